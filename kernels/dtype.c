// Storage dtypes of frozen weights (kernels/dtype.h): names, conversion to and
// from fp32, and the instruction set the dtype kernels use, chosen at run time
// (the build's -march does not decide it: the AVX-512 and AVX2 variants are
// compiled with GCC target pragmas and picked with __builtin_cpu_supports).
// Every bf16 and f16 value is an fp32 value, so to_f32 is exact on every path;
// from_f32 rounds to nearest even exactly as the scalar dt_f32_to_* do.
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "dtype_cpu.h"
#include "matmul_quant.h"
#include "quant.h"

static const char *const dt_names[DT_COUNT] = {"f32", "bf16", "f16", "q8_0", "q4_0", "q4_1",
                                               "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"};

const char *dtype_name(DType dt) { return (unsigned)dt < DT_COUNT ? dt_names[dt] : "?"; }

int dtype_parse(const char *s, DType *out) {
    for (int i = 0; s && i < DT_COUNT; i++)
        if (!strcmp(s, dt_names[i])) {
            *out = (DType)i;
            return 0;
        }
    return -1;
}

// ---- the instruction set ----

static const char *const isa_labels[DT_ISA_COUNT] = {"scalar", "avx2", "avx512"};
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static DtIsa isa_best_v, isa_v;

const char *dtype_isa_label(DtIsa isa) { return (unsigned)isa < DT_ISA_COUNT ? isa_labels[isa] : "?"; }

static void isa_init(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        isa_best_v = DT_ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c"))
        isa_best_v = DT_ISA_AVX2;
    else
        isa_best_v = DT_ISA_SCALAR;
    isa_v = isa_best_v;
    const char *env = getenv("PAIL_KERNELS_ISA");
    if (!env || !*env) return;
    int want = -1;
    for (int i = 0; i < DT_ISA_COUNT; i++)
        if (!strcmp(env, isa_labels[i])) want = i;
    if (want < 0)
        log_warn("PAIL_KERNELS_ISA=%s is not avx512, avx2 or scalar: ignored (the kernels use %s)",
                 env, isa_labels[isa_v]);
    else if (want > (int)isa_best_v)
        log_warn("PAIL_KERNELS_ISA=%s: this CPU lacks it (the kernels use %s)", env,
                 isa_labels[isa_v]);
    else
        isa_v = (DtIsa)want;
}

DtIsa dtype_isa_id(void) {
    pthread_once(&isa_once, isa_init);
    return isa_v;
}

DtIsa dtype_isa_best(void) {
    pthread_once(&isa_once, isa_init);
    return isa_best_v;
}

const char *dtype_isa(void) { return isa_labels[dtype_isa_id()]; }

int dtype_isa_force(DtIsa isa) {
    pthread_once(&isa_once, isa_init);
    if ((unsigned)isa >= DT_ISA_COUNT || isa > isa_best_v) return -1;
    isa_v = isa;
    return 0;
}

// ---- scalar ----

static void bf16_to_f32_scalar(float *dst, const void *src, size_t n) {
    const dt_u16_unaligned *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = dt_bf16_to_f32(s[i]);
}
static void f16_to_f32_scalar(float *dst, const void *src, size_t n) {
    const dt_u16_unaligned *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = dt_f16_to_f32(s[i]);
}
static void f32_to_bf16_scalar(void *dst, const float *src, size_t n) {
    dt_u16_unaligned *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = dt_f32_to_bf16(src[i]);
}
static void f32_to_f16_scalar(void *dst, const float *src, size_t n) {
    dt_u16_unaligned *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = dt_f32_to_f16(src[i]);
}

// ---- AVX2 (+ FMA, F16C) ----
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// bf16 -> f32: zero-extend to 32 bits, shift into the high half.
static void bf16_to_f32_avx2(float *dst, const void *src, size_t n) {
    const char *s = src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + 2 * i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    bf16_to_f32_scalar(dst + i, s + 2 * i, n - i);
}

static void f16_to_f32_avx2(float *dst, const void *src, size_t n) {
    const char *s = src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    f16_to_f32_scalar(dst + i, s + 2 * i, n - i);
}

// 8 x u32 (each <= 0xffff) -> 8 x u16 in order.
static inline __m128i pack8_u16(__m256i v) {
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    return _mm256_castsi256_si128(p);
}

static void f32_to_bf16_avx2(void *dst, const float *src, size_t n) {
    char *d = dst;
    size_t i = 0;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff),
                  q = _mm256_set1_epi32(0x40);
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(src + i);
        __m256i u = _mm256_castps_si256(f), hi = _mm256_srli_epi32(u, 16);
        __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
        __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, q), nan);
        _mm_storeu_si128((__m128i *)(d + 2 * i), pack8_u16(r));
    }
    f32_to_bf16_scalar(d + 2 * i, src + i, n - i);
}

// F16C rounds to nearest even, with subnormals and overflow to inf as IEEE
// says; its NaNs keep their payload, the scalar's are sign | 0x7e00: patched.
static void f32_to_f16_avx2(void *dst, const float *src, size_t n) {
    char *d = dst;
    size_t i = 0;
    const __m256i sm = _mm256_set1_epi32(0x8000), qn = _mm256_set1_epi32(0x7e00);
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i u = _mm256_castps_si256(f);
        __m256i fix = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), sm), qn);
        __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
        __m128i nan16 = _mm256_castsi256_si128(
            _mm256_permute4x64_epi64(_mm256_packs_epi32(nan, nan), 0x08));
        h = _mm_blendv_epi8(h, pack8_u16(fix), nan16);
        _mm_storeu_si128((__m128i *)(d + 2 * i), h);
    }
    f32_to_f16_scalar(d + 2 * i, src + i, n - i);
}
#pragma GCC pop_options

// ---- AVX-512 (F, BW, VL) ----
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

static inline __m512 bf16x16_avx512(const void *p, __mmask16 m) {
    __m256i v = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

static void bf16_to_f32_avx512(float *dst, const void *src, size_t n) {
    const char *s = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + 2 * i)));
        __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + 2 * i + 32)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(a, 16)));
        _mm512_storeu_ps(dst + i + 16, _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, bf16x16_avx512(s + 2 * i, m));
    }
}

static void f16_to_f32_avx512(float *dst, const void *src, size_t n) {
    const char *s = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + 2 * i))));
        _mm512_storeu_ps(dst + i + 16,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + 2 * i + 32))));
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + 2 * i)));
    }
}

static void f32_to_bf16_avx512(void *dst, const float *src, size_t n) {
    char *d = dst;
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff),
                  q = _mm512_set1_epi32(0x40);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 f = _mm512_maskz_loadu_ps(m, src + i);
        __m512i u = _mm512_castps_si512(f), hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
        r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm512_or_si512(hi, q));
        _mm256_mask_storeu_epi16(d + 2 * i, m, _mm512_cvtepi32_epi16(r));
    }
}

static void f32_to_f16_avx512(void *dst, const float *src, size_t n) {
    char *d = dst;
    const __m512i sm = _mm512_set1_epi32(0x8000), qn = _mm512_set1_epi32(0x7e00);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 f = _mm512_maskz_loadu_ps(m, src + i);
        __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512i u = _mm512_castps_si512(f);
        __m512i fix = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), sm), qn);
        h = _mm256_mask_mov_epi16(h, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm512_cvtepi32_epi16(fix));
        _mm256_mask_storeu_epi16(d + 2 * i, m, h);
    }
}
#pragma GCC pop_options

// ---- dispatch ----

typedef void (*DtFromFn)(void *dst, const float *src, size_t n);

static const DtCvtFn to_f32_fns[DT_ISA_COUNT][DT_COUNT] = {
    [DT_ISA_SCALAR] = {NULL, bf16_to_f32_scalar, f16_to_f32_scalar},
    [DT_ISA_AVX2] = {NULL, bf16_to_f32_avx2, f16_to_f32_avx2},
    [DT_ISA_AVX512] = {NULL, bf16_to_f32_avx512, f16_to_f32_avx512},
};
static const DtFromFn from_f32_fns[DT_ISA_COUNT][DT_COUNT] = {
    [DT_ISA_SCALAR] = {NULL, f32_to_bf16_scalar, f32_to_f16_scalar},
    [DT_ISA_AVX2] = {NULL, f32_to_bf16_avx2, f32_to_f16_avx2},
    [DT_ISA_AVX512] = {NULL, f32_to_bf16_avx512, f32_to_f16_avx512},
};

// The quantized dtypes: the reference dequantization (kernels/quant.c) on every ISA.
#define QDEQ(T, DT) \
    static void T##_to_f32(float *dst, const void *src, size_t n) { quant_dequant(dst, src, DT, n); }
QDEQ(q8_0, DT_Q8_0)
QDEQ(q4_0, DT_Q4_0)
QDEQ(q4_1, DT_Q4_1)
QDEQ(q5_0, DT_Q5_0)
QDEQ(q5_1, DT_Q5_1)
QDEQ(q4_k, DT_Q4_K)
QDEQ(q5_k, DT_Q5_K)
QDEQ(q6_k, DT_Q6_K)
#undef QDEQ
static const DtCvtFn quant_to_f32_fns[DT_COUNT] = {
    [DT_Q8_0] = q8_0_to_f32,
    [DT_Q4_0] = q4_0_to_f32,
    [DT_Q4_1] = q4_1_to_f32,
    [DT_Q5_0] = q5_0_to_f32,
    [DT_Q5_1] = q5_1_to_f32,
    [DT_Q4_K] = q4_k_to_f32,
    [DT_Q5_K] = q5_k_to_f32,
    [DT_Q6_K] = q6_k_to_f32,
};

DtCvtFn dtype_to_f32_fn(DType dt, DtIsa isa) {
    if ((unsigned)dt >= DT_COUNT || (unsigned)isa >= DT_ISA_COUNT) return NULL;
    if (dtype_is_quant(dt))  // AVX2 and above: kernels/matmul_quant.c's, bit for bit the reference's
        return isa >= DT_ISA_AVX2 ? matmul_quant_dequant_fn(dt, isa) : quant_to_f32_fns[dt];
    return to_f32_fns[isa][dt];
}

void dtype_to_f32(float *dst, const void *src, DType dt, size_t n) {
    DtCvtFn f = dtype_to_f32_fn(dt, dtype_isa_id());
    if (f) f(dst, src, n);
    else if (dt == DT_F32) memcpy(dst, src, n * sizeof(float));
}

void dtype_from_f32_isa(void *dst, const float *src, DType dt, size_t n, DtIsa isa) {
    if ((unsigned)dt >= DT_COUNT || dtype_is_quant(dt) || (unsigned)isa >= DT_ISA_COUNT) return;
    if (dt == DT_F32) memcpy(dst, src, n * sizeof(float));
    else from_f32_fns[isa][dt](dst, src, n);
}

void dtype_from_f32(void *dst, const float *src, DType dt, size_t n) {
    dtype_from_f32_isa(dst, src, dt, n, dtype_isa_id());
}

void dtype_convert(void *dst, DType to, const void *src, DType from, size_t n) {
    if (to == from) {
        memcpy(dst, src, dtype_row_bytes(to, n));
        return;
    }
    if (to == DT_F32 || from == DT_F32) {
        if (to == DT_F32) dtype_to_f32(dst, src, from, n);
        else dtype_from_f32(dst, src, to, n);
        return;
    }
    enum { CH = 4096 };
    float buf[CH];
    for (size_t i = 0; i < n; i += CH) {
        size_t m = n - i < CH ? n - i : CH;
        dtype_to_f32(buf, (const char *)src + dtype_row_bytes(from, i), from, m);  // CH: whole blocks
        dtype_from_f32((char *)dst + i * dtype_size(to), buf, to, m);
    }
}
