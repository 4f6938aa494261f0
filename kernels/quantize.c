// quant_quantize (kernels/quant.h): fp32 rows to GGUF blocks exactly as
// llama.cpp's quantize_row_<type>_ref (ggml/src/ggml-quants.c, the llama.cpp
// that llama-cpp-python 0.3.36 vendors), which is what llama-quantize writes
// without an importance matrix. The same float operations in the same order,
// each rounded once: built with -ffp-contract=off (GNUmakefile), as ggml-base
// is built for x86-64 without -march flags (no FMA to contract into). Checked
// byte for byte against gguf-py and against llama.cpp's own C
// (validation/model/quantize_check.py, validation/model/llamacpp_quant/).
// A load-time conversion, one thread; Q4_K / Q5_K's group fit, the costly part,
// also runs 8 groups at once on AVX2 (the same bytes; PAIL_KERNELS_ISA=scalar
// takes the scalar path, dtype_isa_id).
#include "quant.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <float.h>
#include "dtype_cpu.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f

// ggml's GGML_FP32_TO_FP16 (ggml_compute_fp32_to_fp16) rounds to nearest even,
// overflows to inf and writes a NaN as 0x7e00 with its sign: dt_f32_to_f16 does
// the same for every fp32 value (validation/model/llamacpp_quant checks all 2^32).
static void put_f16(uint8_t *p, float f) {
    uint16_t h = dt_f32_to_f16(f);
    memcpy(p, &h, 2);
}
static float get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return dt_f16_to_f32(h);
}

// A float converted to an integer type as llama.cpp's x86 build converts it
// (cvttss2si: toward zero; NaN and out-of-range give INT32_MIN), then narrowed
// modulo 2^8. In range that is C's conversion; out of range (a subnormal block
// maximum makes 1/d infinite) C leaves it undefined, and this is what x86 does.
static int32_t trunc_i32(float v) { return v > -2147483904.0f && v < 2147483648.0f ? (int32_t)v : INT32_MIN; }
static int8_t to_i8(float v) { return (int8_t)(uint8_t)(uint32_t)trunc_i32(v); }
static uint8_t to_u8(float v) { return (uint8_t)(uint32_t)trunc_i32(v); }

// Round to nearest (ties to even) for |f| <= 4194303 by adding 1.5 * 2^23 and
// reading the mantissa (llama.cpp's nearest_int; its assert is compiled out).
static int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

// ---- the 32-element types

// Q4_0: d = the signed value of largest magnitude / -8; q = x / d + 8.5 truncated, at most 15.
static void q4_0(uint8_t *b, const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        uint8_t lo = (uint8_t)imin(15, to_i8(x[j] * id + 8.5f));
        uint8_t hi = (uint8_t)imin(15, to_i8(x[16 + j] * id + 8.5f));
        b[2 + j] = (uint8_t)(lo | hi << 4);
    }
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min; q = (x - min) / d + 0.5 truncated.
static void minmax(const float *x, float *mn, float *mx) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    *mn = min, *mx = max;
}

static void q4_1(uint8_t *b, const float *x) {
    float min, max;
    minmax(x, &min, &max);
    float d = (max - min) / 15, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    for (int j = 0; j < 16; j++) {
        uint8_t lo = (uint8_t)imin(15, to_i8((x[j] - min) * id + 0.5f));
        uint8_t hi = (uint8_t)imin(15, to_i8((x[16 + j] - min) * id + 0.5f));
        b[4 + j] = (uint8_t)(lo | hi << 4);
    }
}

// Q5_0: as Q4_0 over 32 levels (d = max / -16, + 16.5, at most 31); bit 4 of
// element j goes to bit j of the little-endian u32 qh.
static void q5_0(uint8_t *b, const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    float d = max / -16, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        uint8_t lo = (uint8_t)imin(31, to_i8(x[j] * id + 16.5f));
        uint8_t hi = (uint8_t)imin(31, to_i8(x[16 + j] * id + 16.5f));
        b[6 + j] = (uint8_t)((lo & 0x0F) | (hi & 0x0F) << 4);
        qh |= (uint32_t)(lo >> 4 & 1) << j | (uint32_t)(hi >> 4 & 1) << (j + 16);
    }
    memcpy(b + 2, &qh, 4);
}

// Q5_1: no clamp to 31 (llama.cpp has none: (max - min) / d rounds to at most 31.5).
static void q5_1(uint8_t *b, const float *x) {
    float min, max;
    minmax(x, &min, &max);
    float d = (max - min) / 31, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        uint8_t lo = to_u8((x[j] - min) * id + 0.5f);
        uint8_t hi = to_u8((x[16 + j] - min) * id + 0.5f);
        b[8 + j] = (uint8_t)((lo & 0x0F) | (hi & 0x0F) << 4);
        qh |= (uint32_t)(lo >> 4 & 1) << j | (uint32_t)(hi >> 4 & 1) << (j + 16);
    }
    memcpy(b + 4, &qh, 4);
}

// Q8_0: d = max |x| / 127; q = round(x / d), halves away from zero (roundf).
static void q8_0(uint8_t *b, const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);  // ggml's MAX
    float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)to_i8(roundf(x[j] * id));
}

// ---- the K-quants' helpers (llama.cpp's, called as its _ref functions call them)

// make_qx_quants with rmse_type 1 and no importance weights (Q6_K's 16-element
// groups): the scale of the largest magnitude, then the 18 scales -(nmax +
// 0.1 is) / max around it, keeping the one that maximises (sum w x l)^2 /
// sum w l^2 with w = x^2. L[i] = l + nmax in [0, 2 nmax).
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) amax = ax, max = x[i];
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2, best = scale * sumlx;
        }
    }
    return scale;
}

// make_qkx2_quants with use_mad false: x ~ scale * L - the_min (L in [0, nmax],
// the_min >= 0), starting from the range's scale and trying nstep + 1 others
// (rmin + rdelta is + nmax) / (max - min), each with its weighted least-squares
// scale and min, keeping the least weighted squared error. Returns the scale.
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;  // the next steps measure from it
            }
        }
    }
    *the_min = -min;
    return scale;
}

// ---- Q4_K and Q5_K: 8 groups of 32, each a 6-bit scale and min of the
// block's d and dmin (fp16), the 4- or 5-bit values then requantized with them.

// The 12 scale bytes of block_q4_K / block_q5_K (get_scale_min_k4's layout).
static void pack_scales_k4(uint8_t s[12], const float *scales, const float *mins, float inv_scale, float inv_min) {
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]), lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
}

static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// The 8 groups of 32 of a Q4_K / Q5_K block: each its weights (the group's RMS
// plus |x|) and make_qkx2_quants' scale, min and L.
static void qkx2_groups(const float *x, uint8_t *L, float *scales, float *mins, int nmax, float rmin, int nstep) {
    float weights[32];
    uint8_t Laux[32];
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx2")
// qkx2_groups with the 8 groups in the 8 lanes of AVX2 registers: each lane
// does its group's scalar arithmetic, operation for operation (no FMA: this
// file is built with -ffp-contract=off; division and sqrt are correctly
// rounded; _mm256_min_ps(x, m) is `x < m ? x : m`, as the scalar `if`), and the
// branches become blends: the same bytes, about 6 times as fast (the scalar
// sums are one long dependency chain a group).
static inline __m256i nearest_int8(__m256 f) {
    __m256i i = _mm256_castps_si256(_mm256_add_ps(f, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}
static inline __m256 blend(__m256 a, __m256 b, __m256 m) { return _mm256_blendv_ps(a, b, m); }

static void qkx2_groups_avx2(const float *x, uint8_t *L, float *scales, float *mins, int nmax, float rmin, int nstep) {
    __m256 xt[32], w[32];
    __m256i Lv[32], La[32];
    for (int i = 0; i < 32; i++)
        xt[i] = _mm256_setr_ps(x[i], x[32 + i], x[64 + i], x[96 + i], x[128 + i], x[160 + i], x[192 + i], x[224 + i]);
    const __m256 zero = _mm256_setzero_ps(), absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(nmax);
    __m256 sum_x2 = zero;
    for (int l = 0; l < 32; l++) sum_x2 = _mm256_add_ps(sum_x2, _mm256_mul_ps(xt[l], xt[l]));
    __m256 av_x = _mm256_sqrt_ps(_mm256_div_ps(sum_x2, _mm256_set1_ps(32)));
    for (int l = 0; l < 32; l++) w[l] = _mm256_add_ps(av_x, _mm256_and_ps(xt[l], absmask));
    // make_qkx2_quants, use_mad false
    __m256 min = xt[0], max = xt[0], sum_w = w[0], sum_x = _mm256_mul_ps(sum_w, xt[0]);
    for (int i = 1; i < 32; i++) {
        min = _mm256_min_ps(xt[i], min);
        max = _mm256_max_ps(xt[i], max);
        sum_w = _mm256_add_ps(sum_w, w[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(w[i], xt[i]));
    }
    min = blend(min, zero, _mm256_cmp_ps(min, zero, _CMP_GT_OQ));
    const __m256 min0 = min, same = _mm256_cmp_ps(max, min, _CMP_EQ_OQ);
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)nmax), _mm256_sub_ps(max, min));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1), iscale), best_error = zero;
    for (int i = 0; i < 32; i++) {
        Lv[i] = _mm256_max_epi32(lo, _mm256_min_epi32(hi, nearest_int8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min)))));
        __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lv[i])), min), xt[i]);
        best_error = _mm256_add_ps(best_error, _mm256_mul_ps(w[i], _mm256_mul_ps(diff, diff)));
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = _mm256_div_ps(_mm256_set1_ps(rmin + 0.1f * is + nmax), _mm256_sub_ps(max, min));
        __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < 32; i++) {
            La[i] = _mm256_max_epi32(lo, _mm256_min_epi32(hi, nearest_int8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min)))));
            __m256 wl = _mm256_mul_ps(w[i], _mm256_cvtepi32_ps(La[i]));
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, _mm256_cvtepi32_ps(La[i])));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xt[i]));
        }
        __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        __m256 pos = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
        this_min = blend(this_min, zero, pos);
        this_scale = blend(this_scale, _mm256_div_ps(sum_xl, sum_l2), pos);
        __m256 cur_error = zero;
        for (int i = 0; i < 32; i++) {
            __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(La[i])), this_min), xt[i]);
            cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(w[i], _mm256_mul_ps(diff, diff)));
        }
        __m256 better = _mm256_and_ps(_mm256_cmp_ps(D, zero, _CMP_GT_OQ), _mm256_cmp_ps(cur_error, best_error, _CMP_LT_OQ));
        if (_mm256_testz_ps(better, better)) continue;
        __m256i bi = _mm256_castps_si256(better);
        for (int i = 0; i < 32; i++) Lv[i] = _mm256_blendv_epi8(Lv[i], La[i], bi);
        best_error = blend(best_error, cur_error, better);
        scale = blend(scale, this_scale, better);
        min = blend(min, this_min, better);
    }
    // a group of one value (max == min) returns L = 0, scale 0 and its own min
    __m256 neg = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    _mm256_storeu_ps(scales, blend(scale, zero, same));
    _mm256_storeu_ps(mins, _mm256_xor_ps(blend(min, min0, same), neg));
    __m256i samei = _mm256_castps_si256(same);
    for (int i = 0; i < 32; i++) {
        int32_t l[8];
        _mm256_storeu_si256((__m256i *)l, _mm256_andnot_si256(samei, Lv[i]));
        for (int j = 0; j < 8; j++) L[32 * j + i] = (uint8_t)l[j];
    }
}
#pragma GCC pop_options
#define HAVE_QKX2_AVX2 1
#endif

// L(256) of one Q4_K (nmax 15) or Q5_K (nmax 31) block; writes d, dmin and the
// scales at b (the first 16 bytes of both layouts).
static void qk_scales(uint8_t *b, uint8_t *L, const float *x, int nmax, float rmin, int nstep) {
    float mins[8], scales[8], max_scale = 0, max_min = 0;
#ifdef HAVE_QKX2_AVX2
    if (dtype_isa_id() >= DT_ISA_AVX2) qkx2_groups_avx2(x, L, scales, mins, nmax, rmin, nstep);
    else
#endif
        qkx2_groups(x, L, scales, mins, nmax, rmin, nstep);
    for (int j = 0; j < 8; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    pack_scales_k4(b + 4, scales, mins, inv_scale, inv_min);
    put_f16(b, max_scale / 63.f);
    put_f16(b + 2, max_min / 63.f);
    // requantize with the stored scales (a group whose scale rounds to 0 keeps make_qkx2_quants' L)
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        scale_min_k4(j, b + 4, &sc, &m);
        float d = get_f16(b) * sc;
        if (d == 0.0f) continue;
        float dm = get_f16(b + 2) * m;
        for (int ii = 0; ii < 32; ii++) L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + ii] + dm) / d)));
    }
}

// Q4_K (144 bytes): element 64 c + 32 h + l is nibble h of qs[32 c + l].
static void q4_k(uint8_t *b, const float *x) {
    uint8_t L[QK_K];
    qk_scales(b, L, x, 15, -1.f, 20);
    uint8_t *q = b + 16;
    for (int j = 0; j < QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

// Q5_K (176 bytes): the low nibbles as Q4_K at qs (b + 48); bit 4 of element
// 32 s + l is bit s of qh[l] (b + 16).
static void q5_k(uint8_t *b, const float *x) {
    uint8_t L[QK_K];
    qk_scales(b, L, x, 31, -0.5f, 15);
    uint8_t *qh = b + 16, *ql = b + 48, m1 = 1, m2 = 2;
    memset(qh, 0, QK_K / 8);
    for (int n = 0; n < QK_K; n += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
        for (int j = 0; j < 32; j++) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) l1 -= 16, qh[j] |= m1;
            if (l2 > 15) l2 -= 16, qh[j] |= m2;
            ql[j] = (uint8_t)(l1 | l2 << 4);
        }
    }
}

// Q6_K (210 bytes): 16 groups of 16, each an int8 scale of the fp16 d (the
// largest-magnitude group scale is -128 steps); values q + 32 in [0, 64): low
// nibbles ql (128), two high bits qh (64), scales (16), d.
static void q6_k(uint8_t *b, const float *x) {
    int8_t L[QK_K];
    float scales[QK_K / 16], max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ib++) {
        float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
        scales[ib] = scale;
        if (fabsf(scale) > max_abs_scale) max_abs_scale = fabsf(scale), max_scale = scale;
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(b, 0, 210);
        return;
    }
    uint8_t *ql = b, *qh = b + 128;
    int8_t *sc = (int8_t *)(b + 192);
    float iscale = -128.f / max_scale;
    put_f16(b + 208, 1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ib++) sc[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < QK_K / 16; j++) {
        float d = get_f16(b + 208) * sc[j];
        if (d == 0.0f) continue;
        for (int ii = 0; ii < 16; ii++) L[16 * j + ii] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + ii] / d))) + 32);
    }
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l] = (uint8_t)(q1 | q3 << 4);
            ql[l + 32] = (uint8_t)(q2 | q4 << 4);
            qh[l] = (uint8_t)((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 | (L[j + l + 96] >> 4) << 6);
        }
    }
}

int quant_quantize(void *dst, const float *src, DType dt, size_t n) {
    void (*f)(uint8_t *, const float *) = NULL;
    switch (dt) {
    case DT_Q8_0: f = q8_0; break;
    case DT_Q4_0: f = q4_0; break;
    case DT_Q4_1: f = q4_1; break;
    case DT_Q5_0: f = q5_0; break;
    case DT_Q5_1: f = q5_1; break;
    case DT_Q4_K: f = q4_k; break;
    case DT_Q5_K: f = q5_k; break;
    case DT_Q6_K: f = q6_k; break;
    default: return -1;
    }
    size_t be = (size_t)dtype_block(dt), bb = dtype_block_bytes(dt);
    if (n % be) return -1;
    uint8_t *d = dst;
    for (size_t i = 0; i < n / be; i++) f(d + i * bb, src + i * be);
    return 0;
}

// llama.cpp's llama-quantize (src/llama-quant.cpp, tensor_type_fallback): a row
// whose length is not a multiple of the target's block takes Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0 (a 32-block type keeps itself), and F16 when that
// does not divide the row either.
DType quant_fallback(DType want, size_t row_elems) {
    if (!dtype_is_quant(want) || row_elems % (size_t)dtype_block(want) == 0) return want;
    DType dt = want == DT_Q4_K ? DT_Q5_0 : want == DT_Q5_K ? DT_Q5_1 :
                                       want == DT_Q6_K     ? DT_Q8_0 :
                                                             want;
    return row_elems % (size_t)dtype_block(dt) == 0 ? dt : DT_F16;
}
