// The CPU side of kernels/dtype.h, internal to kernels/ (and their tests and
// bench): the scalar conversions, the instruction set chosen at run time and
// the per-ISA row converters that the matmul, logprob and embedding kernels
// call. The scalar conversions are header-only: src/model/safetensors.c's
// f32_to_bf16, f32_to_f16, ... are these (its fuzzer links no kernels/).
#pragma once
#include <stdint.h>
#include <string.h>
#include "dtype.h"

typedef enum { DT_ISA_SCALAR = 0, DT_ISA_AVX2, DT_ISA_AVX512, DT_ISA_COUNT } DtIsa;

// The instruction set the dtype kernels run: the best this CPU has
// (__builtin_cpu_supports: AVX-512 F/BW/VL; else AVX2 + FMA + F16C; else
// scalar), lowered by PAIL_KERNELS_ISA=avx2|scalar, decided once at the first
// call (thread-safe).
DtIsa dtype_isa_id(void);
DtIsa dtype_isa_best(void);              // what this CPU supports (ignores the environment)
const char *dtype_isa_label(DtIsa isa);  // "avx512", "avx2", "scalar"
// Tests and benches: the kernels use `isa` from now on. -1 (nothing changed)
// when this CPU lacks it. Not to be called while kernels run.
int dtype_isa_force(DtIsa isa);

// dst(n) = src(n) as fp32 on a given ISA's code path (dtype_to_f32 is this
// with dtype_isa_id()); src any alignment.
typedef void (*DtCvtFn)(float *dst, const void *src, size_t n);
DtCvtFn dtype_to_f32_fn(DType dt, DtIsa isa);  // NULL for DT_F32 (a copy) or a bad dtype
void dtype_from_f32_isa(void *dst, const float *src, DType dt, size_t n, DtIsa isa);

// The _dt GEMMs' conversion panel (kernels/matmul.c): floats per thread, and
// at most this many columns of the product a panel. Measured by
// bench/bench_kernels.c (doc/kernels.md); the bench and tests vary them.
extern size_t matmul_dt_panel_floats;
extern int matmul_dt_panel_rows;

// ---- scalar conversions (exact to fp32; round to nearest even from it) ----
// A 16-bit element at any address (safetensors data offsets need not be even).
typedef uint16_t dt_u16_unaligned __attribute__((aligned(1), may_alias));

static inline float dt_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t dt_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float dt_bf16_to_f32(uint16_t b) { return dt_f32_from_bits((uint32_t)b << 16); }

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Subnormals are
// normalised by shifting the mantissa up, so the result is exact.
static inline float dt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return dt_f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf / nan
    if (exp == 0) {
        if (man == 0) return dt_f32_from_bits(sign);
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        return dt_f32_from_bits(sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13));
    }
    return dt_f32_from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

// Round to nearest, ties to even, as torch's .to(bfloat16); a NaN stays a (quiet) NaN.
static inline uint16_t dt_f32_to_bf16(float f) {
    uint32_t u = dt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

// Round to nearest even; >= 65520 in magnitude overflows to inf; NaN -> 0x7e00 (signed).
static inline uint16_t dt_f32_to_f16(float f) {
    uint32_t u = dt_f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);   // NaN
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // >= 65520 rounds to inf
    if (a < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
        if (a < 0x33000000u) return (uint16_t)sign;  // < 2^-25 rounds to 0 (ties to even)
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        int shift = (int)(126 - e);  // value = m * 2^(e-150); half subnormal unit = 2^-24
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0x0fffu + ((a >> 13) & 1);  // round mantissa to 10 bits, ties to even
    return (uint16_t)(sign | (((r >> 23) - 112) << 10 | ((r >> 13) & 0x3ff)));
}
