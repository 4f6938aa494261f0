// Storage dtypes of frozen base weights (kernels that take a weight in its
// checkpoint dtype). Activations, gradients, LoRA parameters and optimiser
// state are always fp32; only a frozen weight matrix (a projection, the
// embedding table, the LM head) may be stored as bf16 or f16, and every kernel
// converts it to fp32 exactly (every bf16 and f16 value is an fp32 value).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2, DT_COUNT } DType;

static inline size_t dtype_size(DType dt) { return dt == DT_F32 ? 4 : 2; }
const char *dtype_name(DType dt);                 // "f32", "bf16", "f16"
int dtype_parse(const char *s, DType *out);       // those spellings; -1 otherwise
// dst(n) = src(n) as fp32 (exact). src any alignment; vectorised, one thread.
void dtype_to_f32(float *dst, const void *src, DType dt, size_t n);
// dst(n) = src(n) rounded to nearest even (torch's .to()); NaN stays NaN, f16 overflow -> inf.
void dtype_from_f32(void *dst, const float *src, DType dt, size_t n);
// dst(n) in dtype to = src(n) in dtype from: a copy when they match, else
// through fp32 a chunk at a time (exact when widening, rounded once when
// narrowing). src any alignment; one thread.
void dtype_convert(void *dst, DType to, const void *src, DType from, size_t n);
// The instruction set the CPU kernels picked at run time for dtype work
// ("avx512", "avx2", "scalar"); PAIL_KERNELS_ISA=avx2|scalar in the environment
// forces a lower one (tests run each path).
const char *dtype_isa(void);

#ifdef __cplusplus
}
#endif
