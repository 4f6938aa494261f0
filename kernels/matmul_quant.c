// The small-T mat-vec's dot products on GGUF block-quantized weight rows
// (kernels/matmul_quant.h; layouts in kernels/quant.c). Each block is
// dequantized in registers and its products with fp32 x summed with FMA; the
// block's scale multiplies the block's sum, and a min (Q4_1, Q5_1, the
// K-quants) multiplies x's sum over its elements, computed once per call
// (matmul_quant_xsums). So the result is the fp32 dot on the row dequantized
// as quant_dequant does, up to the order and rounding of the sums (doc/kernels.md
// has the error against the double reference, and why x is not quantized to
// 8 bits as llama.cpp's integer dot products do). Scalar fallback: a block
// dequantized by the reference into L1, then dotted.
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "matmul_quant.h"
#include "quant.h"

enum { QK = 256 };  // the largest block

// ---- scalar: the reference dequantization a block at a time ----
static inline __attribute__((always_inline)) void qdot_ref(DType dt, float *r, const void *w, const float *x, int K,
                                                           int NT) {
    int be = dtype_block(dt);
    size_t bb = dtype_block_bytes(dt);
    const unsigned char *b = w;
    float s[4] = {0, 0, 0, 0}, buf[QK];
    for (int k = 0; k < K; k += be, b += bb) {
        quant_dequant(buf, b, dt, (size_t)be);
        for (int t = 0; t < NT; t++) {
            const float *xt = x + (size_t)t * K + k;
            float a = 0;
            for (int j = 0; j < be; j++) a += buf[j] * xt[j];
            s[t] += a;
        }
    }
    for (int t = 0; t < NT; t++) r[t] = s[t];
}

#define QDOT_SCALAR(name, DT)                                                                            \
    static void name##_scalar(float *r, const void *w, const float *x, const float *xs, int K, int NT) { \
        (void)xs;                                                                                        \
        qdot_ref(DT, r, w, x, K, NT);                                                                    \
    }
QDOT_SCALAR(q8_0, DT_Q8_0)
QDOT_SCALAR(q4_0, DT_Q4_0)
QDOT_SCALAR(q4_1, DT_Q4_1)
QDOT_SCALAR(q5_0, DT_Q5_0)
QDOT_SCALAR(q5_1, DT_Q5_1)
QDOT_SCALAR(q4_k, DT_Q4_K)
QDOT_SCALAR(q5_k, DT_Q5_K)
QDOT_SCALAR(q6_k, DT_Q6_K)
#undef QDOT_SCALAR

// ---- x's block sums ----
static _Thread_local float *xs_buf;
static _Thread_local size_t xs_cap;

const float *matmul_quant_xsums(DType wdt, const float *x, int T, int K) {
    if (wdt != DT_Q4_1 && wdt != DT_Q5_1 && wdt != DT_Q4_K && wdt != DT_Q5_K) return NULL;
    int nb = K / 32;
    size_t n = (size_t)T * nb;
    if (n > xs_cap) {
        float *p = malloc(sizeof(float) * (n < 4096 ? 4096 : n));
        if (!p) return NULL;
        free(xs_buf);
        xs_buf = p, xs_cap = n < 4096 ? 4096 : n;
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < nb; i++) {
            const float *a = x + (size_t)t * K + 32 * i;
            float s = 0;
#pragma omp simd reduction(+ \
                           : s)
            for (int j = 0; j < 32; j++) s += a[j];
            xs_buf[(size_t)t * nb + i] = s;
        }
    return xs_buf;
}

// ---- AVX2 (+ FMA, F16C) ----
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

static inline float f16s(const unsigned char *p) {
    unsigned short h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline float hsum8q(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 8 bytes from p, each zero- (u8) or sign-extended (i8) to 32 bits
#define U8X8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define I8X8(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define CVT(v) _mm256_cvtepi32_ps(v)
// s[t] += wf * x[t][off .. off + 8) for the NT rows
#define QFMA(s, wf, off)                                                                   \
    do {                                                                                   \
        __m256 wf_ = (wf);                                                                 \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                               \
            s[t] = _mm256_fmadd_ps(wf_, _mm256_loadu_ps(x + (size_t)t * K + (off)), s[t]); \
    } while (0)
#define QZERO(s) _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) s[t] = _mm256_setzero_ps()
// acc[t] += s[t] * scale
#define QSCALE(acc, s, scale)                                                                             \
    do {                                                                                                  \
        __m256 sc_ = _mm256_set1_ps(scale);                                                               \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(s[t], sc_, acc[t]); \
    } while (0)
#define QDONE(acc, extra) \
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) r[t] = hsum8q(acc[t]) + (extra)
#define INL static inline __attribute__((always_inline))
// s[t] += the 32 int8 of q (elements off .. off + 32) times x
#define QFMA32(s, q, off)                                                              \
    do {                                                                               \
        __m128i lo_ = _mm256_castsi256_si128(q), hi_ = _mm256_extracti128_si256(q, 1); \
        QFMA(s, CVT(_mm256_cvtepi8_epi32(lo_)), (off));                                \
        QFMA(s, CVT(_mm256_cvtepi8_epi32(_mm_srli_si128(lo_, 8))), (off) + 8);         \
        QFMA(s, CVT(_mm256_cvtepi8_epi32(hi_)), (off) + 16);                           \
        QFMA(s, CVT(_mm256_cvtepi8_epi32(_mm_srli_si128(hi_, 8))), (off) + 24);        \
    } while (0)
// A 32-element block's 16 bytes of nibbles as 32 bytes: element j < 16 the
// low nibble of byte j, 16 + j its high one.
INL __m256i nibbles32(const unsigned char *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xF));
}
// 32 bits (little-endian) as 32 bytes: 0x10 where bit j is set (Q5's bit 4), else 0.
INL __m256i bits32_x10(const unsigned char *p) {
    uint32_t b;
    memcpy(&b, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)b), shuf);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

// Q8_0 (34 bytes): d, 32 int8.
INL void q8_0_avx2_nt(float *r, const unsigned char *w, const float *x, int K, int NT) {
    __m256 acc[4], s[4];
    QZERO(acc);
    for (int k = 0; k < K; k += 32, w += 34) {
        QZERO(s);
        QFMA(s, CVT(I8X8(w + 2)), k);
        QFMA(s, CVT(I8X8(w + 10)), k + 8);
        QFMA(s, CVT(I8X8(w + 18)), k + 16);
        QFMA(s, CVT(I8X8(w + 26)), k + 24);
        QSCALE(acc, s, f16s(w));
    }
    QDONE(acc, 0.0f);
}

// Q4_0 (18): d, 16 bytes of nibbles (element j < 16 the low nibble of byte j,
// 16 + j its high one), value d (q - 8).
INL void q4_0_avx2_nt(float *r, const unsigned char *w, const float *x, int K, int NT) {
    const __m256i m4 = _mm256_set1_epi32(0xF), o8 = _mm256_set1_epi32(8);
    __m256 acc[4], s[4];
    QZERO(acc);
    for (int k = 0; k < K; k += 32, w += 18) {
        QZERO(s);
        for (int h = 0; h < 2; h++) {
            __m256i v = U8X8(w + 2 + 8 * h);
            QFMA(s, CVT(_mm256_sub_epi32(_mm256_and_si256(v, m4), o8)), k + 8 * h);
            QFMA(s, CVT(_mm256_sub_epi32(_mm256_srli_epi32(v, 4), o8)), k + 16 + 8 * h);
        }
        QSCALE(acc, s, f16s(w));
    }
    QDONE(acc, 0.0f);
}

// Q4_1 (20): d, m, nibbles as Q4_0; value d q + m: d (q . x) + m (sum x).
INL void q4_1_avx2_nt(float *r, const unsigned char *w, const float *x, const float *xs, int K, int NT) {
    const __m256i m4 = _mm256_set1_epi32(0xF);
    __m256 acc[4], s[4];
    float mm[4] = {0, 0, 0, 0};
    int nb = K / 32;
    QZERO(acc);
    for (int k = 0; k < K; k += 32, w += 20) {
        QZERO(s);
        for (int h = 0; h < 2; h++) {
            __m256i v = U8X8(w + 4 + 8 * h);
            QFMA(s, CVT(_mm256_and_si256(v, m4)), k + 8 * h);
            QFMA(s, CVT(_mm256_srli_epi32(v, 4)), k + 16 + 8 * h);
        }
        QSCALE(acc, s, f16s(w));
        float m = f16s(w + 2);
        for (int t = 0; t < NT; t++) mm[t] += m * xs[(size_t)t * nb + k / 32];
    }
    QDONE(acc, mm[t]);
}

// Q5_0 (22): d, 32 high bits (bit j: element j's bit 4), nibbles; value d (q - 16).
INL void q5_0_avx2_nt(float *r, const unsigned char *w, const float *x, int K, int NT) {
    const __m256i o16 = _mm256_set1_epi8(16);
    __m256 acc[4], s[4];
    QZERO(acc);
    for (int k = 0; k < K; k += 32, w += 22) {
        __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles32(w + 6), bits32_x10(w + 2)), o16);
        QZERO(s);
        QFMA32(s, q, k);
        QSCALE(acc, s, f16s(w));
    }
    QDONE(acc, 0.0f);
}

// Q5_1 (24): d, m, high bits, nibbles; value d q + m.
INL void q5_1_avx2_nt(float *r, const unsigned char *w, const float *x, const float *xs, int K, int NT) {
    __m256 acc[4], s[4];
    float mm[4] = {0, 0, 0, 0};
    int nb = K / 32;
    QZERO(acc);
    for (int k = 0; k < K; k += 32, w += 24) {
        __m256i q = _mm256_or_si256(nibbles32(w + 8), bits32_x10(w + 4));
        QZERO(s);
        QFMA32(s, q, k);
        QSCALE(acc, s, f16s(w));
        float m = f16s(w + 2);
        for (int t = 0; t < NT; t++) mm[t] += m * xs[(size_t)t * nb + k / 32];
    }
    QDONE(acc, mm[t]);
}

// The K-quants' 8 sub-block scales d sc[k] and mins dmin mn[k] as the
// reference rounds them (one fp32 product each): the 12 bytes unpacked as
// 32-bit words (llama.cpp's kmask trick; byte stores then a vector load of
// them would stall store forwarding), broadcast with a permute (KSC).
INL void k4_scales(const unsigned char *w, __m256 *dsc, __m256 *dmn) {
    uint32_t u[3], sc[2], mn[2];
    memcpy(u, w + 4, 12);
    sc[0] = u[0] & 0x3f3f3f3fu, mn[0] = u[1] & 0x3f3f3f3fu;
    sc[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    mn[1] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    __m128i s8 = _mm_set_epi32(0, 0, (int)sc[1], (int)sc[0]), m8 = _mm_set_epi32(0, 0, (int)mn[1], (int)mn[0]);
    *dsc = _mm256_mul_ps(_mm256_set1_ps(f16s(w)), CVT(_mm256_cvtepu8_epi32(s8)));
    *dmn = _mm256_mul_ps(_mm256_set1_ps(f16s(w + 2)), CVT(_mm256_cvtepu8_epi32(m8)));
}
#define KSC(v, k) _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k))
// acc[t] += s[t] * a vector scale
#define QSCALEV(acc, s, scv)                                                                              \
    do {                                                                                                  \
        __m256 sc_ = (scv);                                                                               \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(s[t], sc_, acc[t]); \
    } while (0)

// Q4_K (144): d, dmin, scales, 128 bytes of nibbles: sub-block 2 j + h (32
// elements) is nibble h of bytes 32 j .. 32 j + 31; value d sc q - dmin mn.
// The mins: dmin mn[k] times x's sum over sub-block k, 8 at a time.
INL void q4_k_avx2_nt(float *r, const unsigned char *w, const float *x, const float *xs, int K, int NT) {
    const __m256i m4 = _mm256_set1_epi32(0xF);
    __m256 acc[4], s0[4], s1[4];
    int nb = K / 32;
    QZERO(acc);
    for (int k = 0; k < K; k += 256, w += 144) {
        __m256 dsc, mv;
        k4_scales(w, &dsc, &mv);
        const unsigned char *qs = w + 16;
        for (int j = 0; j < 4; j++) {
            QZERO(s0);
            QZERO(s1);
            for (int l = 0; l < 32; l += 8) {
                __m256i v = U8X8(qs + 32 * j + l);
                QFMA(s0, CVT(_mm256_and_si256(v, m4)), k + 64 * j + l);
                QFMA(s1, CVT(_mm256_srli_epi32(v, 4)), k + 64 * j + 32 + l);
            }
            QSCALEV(acc, s0, KSC(dsc, 2 * j));
            QSCALEV(acc, s1, KSC(dsc, 2 * j + 1));
        }
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_fnmadd_ps(mv, _mm256_loadu_ps(xs + (size_t)t * nb + k / 32), acc[t]);
    }
    QDONE(acc, 0.0f);
}

// Q5_K (176): as Q4_K with 32 bytes of high bits after the scales (bit k of
// byte l: element 32 k + l's bit 4), the nibbles after them.
INL void q5_k_avx2_nt(float *r, const unsigned char *w, const float *x, const float *xs, int K, int NT) {
    const __m256i m4 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
    __m256 acc[4], s0[4], s1[4];
    int nb = K / 32;
    QZERO(acc);
    for (int k = 0; k < K; k += 256, w += 176) {
        __m256 dsc, mv;
        k4_scales(w, &dsc, &mv);
        __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 16));
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + 48 + 32 * j));
            // bit 2 j (2 j + 1) of each qh byte moved to bit 4
            __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j), 4), b4);
            __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j + 1), 4), b4);
            __m256i q0 = _mm256_or_si256(_mm256_and_si256(v, m4), h0);
            __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), h1);
            QZERO(s0);
            QZERO(s1);
            QFMA32(s0, q0, k + 64 * j);
            QFMA32(s1, q1, k + 64 * j + 32);
            QSCALEV(acc, s0, KSC(dsc, 2 * j));
            QSCALEV(acc, s1, KSC(dsc, 2 * j + 1));
        }
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_fnmadd_ps(mv, _mm256_loadu_ps(xs + (size_t)t * nb + k / 32), acc[t]);
    }
    QDONE(acc, 0.0f);
}

// Q6_K (210): ql (128), qh (64), 16 int8 scales, d. Half j (128 elements),
// quarter s (32): element 128 j + 32 s + l (l < 32) is nibble s / 2 of ql
// byte 64 j + 32 (s % 2) + l, with bits 2 s .. 2 s + 1 of qh byte 32 j + l as
// its bits 4-5; q - 32, times d sc[8 j + 2 s + l / 16].
INL void q6_k_avx2_nt(float *r, const unsigned char *w, const float *x, int K, int NT) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3), o32 = _mm256_set1_epi8(32);
    __m256 acc[4], s0[4], s1[4];
    QZERO(acc);
    for (int k = 0; k < K; k += 256, w += 210) {
        __m256 d = _mm256_set1_ps(f16s(w + 208));
        for (int j = 0; j < 2; j++) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * j));
            // d sc[8 j .. 8 j + 8), broadcast two a quarter (KSC)
            __m256 dsc = _mm256_mul_ps(d, CVT(I8X8(w + 192 + 8 * j)));
            for (int s = 0; s < 4; s++) {
                __m256i a = _mm256_loadu_si256((const __m256i *)(w + 64 * j + 32 * (s & 1)));
                __m256i lo = _mm256_and_si256(s < 2 ? a : _mm256_srli_epi16(a, 4), m4);
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * s), m3), 4);
                __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, hb), o32);
                __m128i qlo = _mm256_castsi256_si128(q), qhi = _mm256_extracti128_si256(q, 1);
                int e = k + 128 * j + 32 * s;
                QZERO(s0);
                QZERO(s1);
                QFMA(s0, CVT(_mm256_cvtepi8_epi32(qlo)), e);
                QFMA(s0, CVT(_mm256_cvtepi8_epi32(_mm_srli_si128(qlo, 8))), e + 8);
                QFMA(s1, CVT(_mm256_cvtepi8_epi32(qhi)), e + 16);
                QFMA(s1, CVT(_mm256_cvtepi8_epi32(_mm_srli_si128(qhi, 8))), e + 24);
                QSCALEV(acc, s0, KSC(dsc, 2 * s));
                QSCALEV(acc, s1, KSC(dsc, 2 * s + 1));
            }
        }
    }
    QDONE(acc, 0.0f);
}

// One function per dtype: NT a constant in each case, so the loops over the x
// rows unroll and their accumulators stay in registers. A type with mins and
// no sums (their scratch could not be had): the exact scalar path.
#define QDOT_AVX2(name, CALL, NEEDS_XS)                                                                 \
    static void name##_avx2(float *r, const void *wv, const float *x, const float *xs, int K, int NT) { \
        const unsigned char *w = wv;                                                                    \
        if (NEEDS_XS && !xs) {                                                                          \
            name##_scalar(r, wv, x, xs, K, NT);                                                         \
            return;                                                                                     \
        }                                                                                               \
        (void)xs;                                                                                       \
        switch (NT) {                                                                                   \
        case 1: CALL(1); break;                                                                         \
        case 2: CALL(2); break;                                                                         \
        case 3: CALL(3); break;                                                                         \
        default: CALL(4); break;                                                                        \
        }                                                                                               \
    }
#define C_Q8_0(n) q8_0_avx2_nt(r, w, x, K, n)
#define C_Q4_0(n) q4_0_avx2_nt(r, w, x, K, n)
#define C_Q4_1(n) q4_1_avx2_nt(r, w, x, xs, K, n)
#define C_Q5_0(n) q5_0_avx2_nt(r, w, x, K, n)
#define C_Q5_1(n) q5_1_avx2_nt(r, w, x, xs, K, n)
#define C_Q4_K(n) q4_k_avx2_nt(r, w, x, xs, K, n)
#define C_Q5_K(n) q5_k_avx2_nt(r, w, x, xs, K, n)
#define C_Q6_K(n) q6_k_avx2_nt(r, w, x, K, n)
QDOT_AVX2(q8_0, C_Q8_0, 0)
QDOT_AVX2(q4_0, C_Q4_0, 0)
QDOT_AVX2(q4_1, C_Q4_1, 1)
QDOT_AVX2(q5_0, C_Q5_0, 0)
QDOT_AVX2(q5_1, C_Q5_1, 1)
QDOT_AVX2(q4_k, C_Q4_K, 1)
QDOT_AVX2(q5_k, C_Q5_K, 1)
QDOT_AVX2(q6_k, C_Q6_K, 0)

// ---- dequantization to fp32, bit for bit quant_dequant's ----
// The same operations on the same floats in the same order, each rounded once
// (this file is built with -ffp-contract=off: no mul + add fused), 8 lanes at
// a time: the GEMMs' panels, the embedding's and the head's rows
// (dtype_to_f32_fn on AVX2 and above).
// y[0 .. 32) = d * q (the int8 q, 32 of them); y = d * q + m with m given
INL void deq32(float *y, __m256i q, __m256 d0, __m256 d1) {  // d0: elements 0..15, d1: 16..31
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(y, _mm256_mul_ps(d0, CVT(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d0, CVT(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(d1, CVT(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(d1, CVT(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}
// y[0 .. 32) = d * q + m (sub: d * q - m)
INL void deq32m(float *y, __m256i q, __m256 d, __m256 m, int sub) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; i++) {
        __m256 p = _mm256_mul_ps(d, CVT(_mm256_cvtepi8_epi32(part[i])));
        _mm256_storeu_ps(y + 8 * i, sub ? _mm256_sub_ps(p, m) : _mm256_add_ps(p, m));
    }
}

static void deq_avx2(float *y, const void *src, DType dt, size_t n) {
    const unsigned char *b = src;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    size_t be = (size_t)dtype_block(dt), bb = dtype_block_bytes(dt);
    for (size_t i = 0; i < n; i += be, b += bb, y += be) switch (dt) {
        case DT_Q8_0: {
            __m256 d = _mm256_set1_ps(f16s(b));
            deq32(y, _mm256_loadu_si256((const __m256i *)(b + 2)), d, d);
            break;
        }
        case DT_Q4_0: {
            __m256 d = _mm256_set1_ps(f16s(b));
            deq32(y, _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8)), d, d);
            break;
        }
        case DT_Q4_1:
            deq32m(y, nibbles32(b + 4), _mm256_set1_ps(f16s(b)), _mm256_set1_ps(f16s(b + 2)), 0);
            break;
        case DT_Q5_0: {
            __m256 d = _mm256_set1_ps(f16s(b));
            __m256i q = _mm256_or_si256(nibbles32(b + 6), bits32_x10(b + 2));
            deq32(y, _mm256_sub_epi8(q, _mm256_set1_epi8(16)), d, d);
            break;
        }
        case DT_Q5_1:
            deq32m(y, _mm256_or_si256(nibbles32(b + 8), bits32_x10(b + 4)), _mm256_set1_ps(f16s(b)),
                   _mm256_set1_ps(f16s(b + 2)), 0);
            break;
        case DT_Q4_K:
        case DT_Q5_K: {
            __m256 dsc, dmn;
            k4_scales(b, &dsc, &dmn);
            int k5 = dt == DT_Q5_K;
            const unsigned char *qs = b + (k5 ? 48 : 16);
            __m256i qh = k5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
            const __m256i b4 = _mm256_set1_epi8(0x10);
            for (int j = 0; j < 4; j++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
                __m256i q0 = _mm256_and_si256(v, m4), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (k5) {
                    q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j), 4), b4));
                    q1 = _mm256_or_si256(q1,
                                         _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j + 1), 4), b4));
                }
                deq32m(y + 64 * j, q0, KSC(dsc, 2 * j), KSC(dmn, 2 * j), 1);
                deq32m(y + 64 * j + 32, q1, KSC(dsc, 2 * j + 1), KSC(dmn, 2 * j + 1), 1);
            }
            break;
        }
        case DT_Q6_K: {
            const signed char *sc = (const signed char *)(b + 192);
            float d = f16s(b + 208);
            for (int j = 0; j < 2; j++) {
                __m256i h = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * j));
                for (int s = 0; s < 4; s++) {
                    __m256i a = _mm256_loadu_si256((const __m256i *)(b + 64 * j + 32 * (s & 1)));
                    __m256i lo = _mm256_and_si256(s < 2 ? a : _mm256_srli_epi16(a, 4), m4);
                    __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * s), _mm256_set1_epi8(3)), 4);
                    __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, hb), _mm256_set1_epi8(32));
                    deq32(y + 128 * j + 32 * s, q, _mm256_set1_ps(d * (float)sc[8 * j + 2 * s]),
                          _mm256_set1_ps(d * (float)sc[8 * j + 2 * s + 1]));
                }
            }
            break;
        }
        default: return;
        }
}
#define QDEQ(name, DT) \
    static void name##_deq_avx2(float *y, const void *src, size_t n) { deq_avx2(y, src, DT, n); }
QDEQ(q8_0, DT_Q8_0)
QDEQ(q4_0, DT_Q4_0)
QDEQ(q4_1, DT_Q4_1)
QDEQ(q5_0, DT_Q5_0)
QDEQ(q5_1, DT_Q5_1)
QDEQ(q4_k, DT_Q4_K)
QDEQ(q5_k, DT_Q5_K)
QDEQ(q6_k, DT_Q6_K)
#undef QDEQ
#pragma GCC pop_options

static const DtCvtFn deq_fns[DT_COUNT] = {
    [DT_Q8_0] = q8_0_deq_avx2,
    [DT_Q4_0] = q4_0_deq_avx2,
    [DT_Q4_1] = q4_1_deq_avx2,
    [DT_Q5_0] = q5_0_deq_avx2,
    [DT_Q5_1] = q5_1_deq_avx2,
    [DT_Q4_K] = q4_k_deq_avx2,
    [DT_Q5_K] = q5_k_deq_avx2,
    [DT_Q6_K] = q6_k_deq_avx2,
};

DtCvtFn matmul_quant_dequant_fn(DType wdt, DtIsa isa) {
    if (!dtype_is_quant(wdt) || isa < DT_ISA_AVX2 || (unsigned)isa >= DT_ISA_COUNT) return NULL;
    return deq_fns[wdt];
}

// ---- dispatch and names ----
static const QDotFn qdot_fns[2][DT_COUNT] = {
    {[DT_Q8_0] = q8_0_scalar, [DT_Q4_0] = q4_0_scalar, [DT_Q4_1] = q4_1_scalar, [DT_Q5_0] = q5_0_scalar, [DT_Q5_1] = q5_1_scalar, [DT_Q4_K] = q4_k_scalar, [DT_Q5_K] = q5_k_scalar, [DT_Q6_K] = q6_k_scalar},
    {[DT_Q8_0] = q8_0_avx2, [DT_Q4_0] = q4_0_avx2, [DT_Q4_1] = q4_1_avx2, [DT_Q5_0] = q5_0_avx2, [DT_Q5_1] = q5_1_avx2, [DT_Q4_K] = q4_k_avx2, [DT_Q5_K] = q5_k_avx2, [DT_Q6_K] = q6_k_avx2},
};

QDotFn matmul_quant_dot_fn(DType wdt, DtIsa isa) {
    if (!dtype_is_quant(wdt) || (unsigned)isa >= DT_ISA_COUNT) return NULL;
    return qdot_fns[isa >= DT_ISA_AVX2][wdt];
}

#define QNAMES(t)                                                              \
    {                                                                          \
        {"mat-vec on " t " blocks dequantized one at a time into L1 (scalar)", \
         "mat-vec on " t " blocks dequantized in registers (avx2)",            \
         "mat-vec on " t " blocks dequantized in registers (avx2)"},           \
        { "sgemm over f32 panels dequantized from " t " (scalar)",             \
          "sgemm over f32 panels dequantized from " t " (avx2)",               \
          "sgemm over f32 panels dequantized from " t " (avx2)" }              \
    }
static const struct {
    const char *small[DT_ISA_COUNT];
    const char *gemm[DT_ISA_COUNT];
} qnames[DT_COUNT] = {
    [DT_Q8_0] = QNAMES("q8_0"),
    [DT_Q4_0] = QNAMES("q4_0"),
    [DT_Q4_1] = QNAMES("q4_1"),
    [DT_Q5_0] = QNAMES("q5_0"),
    [DT_Q5_1] = QNAMES("q5_1"),
    [DT_Q4_K] = QNAMES("q4_k"),
    [DT_Q5_K] = QNAMES("q5_k"),
    [DT_Q6_K] = QNAMES("q6_k"),
};

const char *matmul_quant_path_name(int small, DType wdt, DtIsa isa) {
    if (!dtype_is_quant(wdt) || (unsigned)isa >= DT_ISA_COUNT) return "?";
    return small ? qnames[wdt].small[isa] : qnames[wdt].gemm[isa];
}
