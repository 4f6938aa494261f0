// attention_decode: a few new tokens per sequence against a paged KV cache
// (kernels.h's attention_decode_forward_dt), the pools in fp32, bf16 or f16.
// A decode step reads the whole cache, so the kernel is built around those
// reads: the G query heads that share a kv head are computed together, so
// each K and V row is read from memory once (and converted to fp32 in
// registers) for all G; the scores of several keys come from their dot
// products summed across lanes together; an online softmax over chunks of
// keys (KEY_BLOCK, AVX2_KEYS on the AVX2 path) keeps nothing sized by the
// cache. Paths: AVX-512 for fp32
// pools where compiled for it (a task per row and kv head); AVX2 + F16C for
// any pool (D a multiple of 8; picked at run time, dtype_isa): a task per row
// (its kv heads split only when rows are too few for the team), each chunk
// done for all its kv heads before the next, rows read where they lie and the
// next pass's rows requested one pass ahead (SmolLM2's shape, 64 rows, f16
// pools from memory: 1.6x the speed of the old path, which widened each chunk
// into an fp32 copy first, at 576 keys, 1.8x at 2,048); and a portable one for the rest (PAIL_KERNELS_ISA=scalar runs it).
// Sinks (gpt_oss) start a head's online softmax at m = its sink, l = 1 (every
// path). The reference is attention.c's attention_decode_forward_ref_dt; CUDA
// twin: attention_decode.cu.
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <omp.h>
#include "dtype_cpu.h"
#include "kernels.h"
#include "parallel.h"
#include "simd.h"

enum { KEY_BLOCK = 64,
       GMAX = 16 };  // keys a chunk; query heads a task computes together
_Static_assert(KV_BLOCK % KEY_BLOCK == 0, "a key chunk must not straddle two KV blocks");

// Pool row of key j0 of a sequence (its block table row): chunks start at j0
// and stay in one block, so the chunk's keys are rows key_row .. key_row + nb - 1.
static inline size_t key_row(const int *table, int j0) {
    return (size_t)table[j0 / KV_BLOCK] * KV_BLOCK + (size_t)(j0 % KV_BLOCK);
}

// Index of the sequence that holds new row t: largest s with cu[s] <= t.
static int seq_of(const int *cu, int nseq, int t) {
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// ---- portable: any D, any pool dtype; each K / V row widened once into a row
// buffer for the task's heads (the compiler vectorises the loops over D) ----
// One head's online softmax over a chunk of nb scores s: the running max m and
// sum l move to the chunk's, the output row o (D) is rescaled to them, and s
// becomes the chunk's exp(s - m) (the weights of its V rows).
static inline __attribute__((always_inline)) void online_softmax_chunk(float *s, int nb, float *m, float *l, float *o,
                                                                       int D) {
    float bm = -INFINITY;
    for (int j = 0; j < nb; j++) bm = s[j] > bm ? s[j] : bm;
    float mn = bm > *m ? bm : *m, corr = expf(*m - mn);  // exp(-inf) = 0 on the first chunk
    for (int d = 0; d < D; d++) o[d] *= corr;
    for (int j = 0; j < nb; j++) s[j] -= mn;
    simd_exp(s, nb);
    *l *= corr;
    for (int j = 0; j < nb; j++) *l += s[j];
    *m = mn;
}

static inline __attribute__((always_inline)) float kv_elem(const void *p, DType dt, size_t i) {
    if (dt == DT_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == DT_BF16 ? dt_bf16_to_f32(h) : dt_f16_to_f32(h);
}

// The G (<= GMAX) query heads q (G x D) that share one kv head, one decode row,
// into o (G x D): keys first..nkeys-1 of pools k, v (element offsets from the
// head's first column, row stride ks elements).
static inline __attribute__((always_inline)) void heads_portable(float *o, const float *q, const void *k,
                                                                 const void *v, DType dt, size_t ks, int first,
                                                                 int nkeys, int G, int D, float scale,
                                                                 const int *table, float cap, const float *sinks) {
    float sc[GMAX][KEY_BLOCK], m[GMAX], l[GMAX], row[D];
    for (int g = 0; g < G; g++) m[g] = sinks ? sinks[g] : -INFINITY, l[g] = sinks ? 1.0f : 0.0f;
    memset(o, 0, sizeof(float) * G * D);
    for (int j0 = first, nb; j0 < nkeys; j0 += nb) {
        nb = KEY_BLOCK - j0 % KEY_BLOCK;
        if (nb > nkeys - j0) nb = nkeys - j0;
        size_t r0 = key_row(table, j0);
        for (int j = 0; j < nb; j++) {
            for (int d = 0; d < D; d++) row[d] = kv_elem(k, dt, (r0 + j) * ks + d);
            for (int g = 0; g < G; g++) {
                const float *qg = q + (size_t)g * D;
                float s = 0;
#pragma omp simd reduction(+ \
                           : s)
                for (int d = 0; d < D; d++) s += qg[d] * row[d];
                s *= scale;
                sc[g][j] = cap > 0 ? cap * tanhf(s / cap) : s;
            }
        }
        for (int g = 0; g < G; g++) online_softmax_chunk(sc[g], nb, &m[g], &l[g], o + (size_t)g * D, D);
        for (int j = 0; j < nb; j++) {
            for (int d = 0; d < D; d++) row[d] = kv_elem(v, dt, (r0 + j) * ks + d);
            for (int g = 0; g < G; g++) {
                float p = sc[g][j], *og = o + (size_t)g * D;
#pragma omp simd
                for (int d = 0; d < D; d++) og[d] += p * row[d];
            }
        }
    }
    for (int g = 0; g < G; g++) {
        float inv = 1.0f / l[g], *og = o + (size_t)g * D;
        for (int d = 0; d < D; d++) og[d] *= inv;
    }
}

#define HEADS_ARGS                                                                                                      \
    float *o, const float *q, const void *k, const void *v, size_t ks, int first, int nkeys, int G, int D, float scale, \
        const int *table, float cap, const float *sinks
#define HEADS_PASS(dt) o, q, k, v, dt, ks, first, nkeys, G, D, scale, table, cap, sinks
typedef void (*HeadsFn)(HEADS_ARGS);
static void heads_portable_f32(HEADS_ARGS) { heads_portable(HEADS_PASS(DT_F32)); }
static void heads_portable_bf16(HEADS_ARGS) { heads_portable(HEADS_PASS(DT_BF16)); }
static void heads_portable_f16(HEADS_ARGS) { heads_portable(HEADS_PASS(DT_F16)); }

// ---- AVX2 + FMA + F16C: D a multiple of 8; a row's 8 columns loaded as
// 16-bit values and widened in registers (bf16: zero-extend, shift left 16;
// f16: vcvtph2ps), so a 16-bit pool is read at half the bytes ----
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
static inline __attribute__((always_inline)) __m256 kv_load8(const void *p, DType dt, size_t i) {
    if (dt == DT_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (dt == DT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

// r[i] = the sum of a[i]'s 8 lanes (two rounds of hadd, then the 128-bit halves).
static inline __m256 hsum8x8(const __m256 a[8]) {
    __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    // s0 lane i (i < 4): half of a[i]'s sum, lane 4 + i: the other half; s1 the same for a[4..7]
    return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

// r = the sums of a[0..3]'s 8 lanes (two rounds of hadd, then the 128-bit halves).
static inline __m128 hsum4x8(const __m256 a[4]) {
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// Rows i of [j, j + n) (below nn) of the next chunk, rb bytes each from nx at
// a stride of rs bytes, towards L1. The next chunk's block is anywhere in the
// pool, so the hardware prefetchers do not see it coming; requesting a few
// rows with each pass of this chunk keeps its loads spread out (a burst of
// all of them at the chunk's start measured slower).
static inline __attribute__((always_inline)) void prefetch_rows(const char *nx, int nn, int j, int n, size_t rs,
                                                                int rb) {
    for (int i = j; i < j + n && i < nn; i++)
        for (int b = 0; b < rb; b += 64) _mm_prefetch(nx + (size_t)i * rs + b, _MM_HINT_T0);
}

// Scores of GN (<= 3) query heads q (GN x D, row stride D) against a chunk's
// nb keys, pool rows kb, kb + ks, ..: KP (4 or 8) keys a pass, each key's 8
// columns widened once in a register for the GN heads (GN x KP accumulators
// and that register within AVX2's 16). Lanes past nb re-read the last key;
// their scores land in sc past nb and are never used. nx (or NULL): the first
// of nn rows (row stride ks) to request for what follows, KP rows a pass.
static inline __attribute__((always_inline)) void scores_pass(float (*sc)[KEY_BLOCK], const float *q, const void *kb,
                                                              DType dt, size_t ks, int nb, int D, float scale,
                                                              const int GN, const int KP, const char *nx, int nn) {
    int nd = D / 8;
    size_t esz = dtype_size(dt);
    for (int j = 0; j < nb; j += KP) {
        if (nx) prefetch_rows(nx, nn, j, KP, ks * esz, D * (int)esz);
        __m256 acc[3][8];
        size_t rr[8];
#pragma GCC unroll 8
        for (int i = 0; i < KP; i++) {
            rr[i] = (size_t)(j + i < nb ? j + i : nb - 1) * ks;
#pragma GCC unroll 3
            for (int g = 0; g < GN; g++) acc[g][i] = _mm256_setzero_ps();
        }
        for (int c = 0; c < nd; c++) {
            __m256 qc[3];  // the GN heads' 8 columns, loaded once for the KP keys
#pragma GCC unroll 3
            for (int g = 0; g < GN; g++) qc[g] = _mm256_loadu_ps(q + (size_t)g * D + 8 * c);
#pragma GCC unroll 8
            for (int i = 0; i < KP; i++) {
                __m256 kv = kv_load8(kb, dt, rr[i] + 8 * c);
#pragma GCC unroll 3
                for (int g = 0; g < GN; g++) acc[g][i] = _mm256_fmadd_ps(qc[g], kv, acc[g][i]);
            }
        }
#pragma GCC unroll 3
        for (int g = 0; g < GN; g++) {
            if (KP == 8) _mm256_storeu_ps(sc[g] + j, _mm256_mul_ps(hsum8x8(acc[g]), _mm256_set1_ps(scale)));
            else _mm_storeu_ps(sc[g] + j, _mm_mul_ps(hsum4x8(acc[g]), _mm_set1_ps(scale)));
        }
    }
}

// o_g += sum_j p_gj v_j for GN (<= 3) heads (o rows of D, weights sc) over a
// chunk's nb value rows from vb: NC x 8 columns of each head's o held in
// registers over the chunk, each value row's 8 columns widened once for the
// GN heads. c0, nc: the 8-column groups [c0, c0 + NC) done by this call.
static inline __attribute__((always_inline)) void values_cols(float *o, float (*sc)[KEY_BLOCK], const void *vb,
                                                              DType dt, size_t ks, int nb, int D, int c0,
                                                              const int GN, const int NC, const char *nx, int nn) {
    size_t esz = dtype_size(dt);
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
        for (int i = 0; i < NC; i++) acc[g][i] = _mm256_loadu_ps(o + (size_t)g * D + 8 * (c0 + i));
    for (int j = 0; j < nb; j++) {
        if (nx) prefetch_rows(nx, nn, j, 1, ks * esz, D * (int)esz);
        __m256 p[3];
#pragma GCC unroll 3
        for (int g = 0; g < GN; g++) p[g] = _mm256_broadcast_ss(&sc[g][j]);
#pragma GCC unroll 4
        for (int i = 0; i < NC; i++) {
            __m256 vv = kv_load8(vb, dt, (size_t)j * ks + 8 * (c0 + i));
#pragma GCC unroll 3
            for (int g = 0; g < GN; g++) acc[g][i] = _mm256_fmadd_ps(p[g], vv, acc[g][i]);
        }
    }
#pragma GCC unroll 3
    for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
        for (int i = 0; i < NC; i++) _mm256_storeu_ps(o + (size_t)g * D + 8 * (c0 + i), acc[g][i]);
}

// values_cols over all D / 8 column groups, 4 at a time and then one; nx, nn
// as scores_pass's, requested a row a key by the first group.
static inline __attribute__((always_inline)) void values_pass(float *o, float (*sc)[KEY_BLOCK], const void *vb,
                                                              DType dt, size_t ks, int nb, int D, const int GN,
                                                              const char *nx, int nn) {
    int nd = D / 8, c0 = 0;
    for (; c0 + 4 <= nd; c0 += 4) values_cols(o, sc, vb, dt, ks, nb, D, c0, GN, 4, c0 ? NULL : nx, nn);
    for (; c0 < nd; c0++) values_cols(o, sc, vb, dt, ks, nb, D, c0, GN, 1, c0 ? NULL : nx, nn);
}

// online_softmax_chunk in vectors: sc (nb <= KEY_BLOCK scores, the lanes past
// nb padded here with -inf, whose weights come out 0).
static inline __attribute__((always_inline)) void softmax_chunk8(float *s, int nb, float *m, float *l, float *o,
                                                                 int D) {
#if defined(__AVX2__) && defined(__FMA__)
    int n8 = (nb + 7) & ~7;
    for (int j = nb; j < n8; j++) s[j] = -INFINITY;
    __m256 bm = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < n8; j += 8) bm = _mm256_max_ps(bm, _mm256_loadu_ps(s + j));
    __m128 b4 = _mm_max_ps(_mm256_castps256_ps128(bm), _mm256_extractf128_ps(bm, 1));
    b4 = _mm_max_ps(b4, _mm_movehl_ps(b4, b4));
    b4 = _mm_max_ss(b4, _mm_movehdup_ps(b4));
    float mx = _mm_cvtss_f32(b4), mn = mx > *m ? mx : *m, corr = expf(*m - mn);  // exp(-inf) = 0 on the first chunk
    __m256 c8 = _mm256_set1_ps(corr), mn8 = _mm256_set1_ps(mn), sum = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), c8));
    for (int j = 0; j < n8; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mn8));
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    s4 = _mm_hadd_ps(s4, s4);
    s4 = _mm_hadd_ps(s4, s4);
    *l = *l * corr + _mm_cvtss_f32(s4);
    *m = mn;
#else
    online_softmax_chunk(s, nb, m, l, o, D);
#endif
}

// Keys a chunk of the AVX2 path: a pass's K and V rows and the next pass's
// requested ones stay well inside L1. bench_kernels_decode at cache 1,024,
// pools from memory, f16, best of 6 runs each: 3.3-3.5 ms a layer call at 16
// keys, 3.6-4.1 at 32, 4.7 at 64 (8: 3.6); from the caches 16 and 64 are even.
enum { AVX2_KEYS = 16 };
_Static_assert(KEY_BLOCK % AVX2_KEYS == 0, "an AVX2 chunk must not straddle two KV blocks");

// The query heads of kv heads hk0 .. hk0 + nhk - 1 for one decode row (q, o:
// their nhk x G rows of D, back to back): keys first..nkeys-1 of pools k, v
// (element offsets from the pool's first column, row stride ks elements). A
// chunk is done for every kv head before the next, so its rows are read
// within a short time, and for each kv head its G query heads go in passes of
// up to 3 (scores_pass, softmax_chunk8, values_pass), the K and V rows widened
// in registers once a pass and read where they lie (no fp32 copy).
static inline __attribute__((always_inline)) void heads_avx2(float *o, const float *q, const void *k, const void *v,
                                                             DType dt, size_t ks, int first, int nkeys, int hk0,
                                                             int nhk, int G, int D, float scale, const int *table,
                                                             float cap, const float *sinks) {
    int nh = nhk * G;
    float sc[3][KEY_BLOCK] __attribute__((aligned(32))), m[nh], l[nh];
    size_t esz = dtype_size(dt);
    for (int h = 0; h < nh; h++) m[h] = sinks ? sinks[h] : -INFINITY, l[h] = sinks ? 1.0f : 0.0f;
    memset(o, 0, sizeof(float) * nh * D);
    for (int j0 = first, nb; j0 < nkeys; j0 += nb) {
        nb = AVX2_KEYS - j0 % AVX2_KEYS;
        if (nb > nkeys - j0) nb = nkeys - j0;
        int nn = nkeys - j0 - nb < AVX2_KEYS ? nkeys - j0 - nb : AVX2_KEYS;
        size_t r0 = key_row(table, j0), r1 = nn > 0 ? key_row(table, j0 + nb) : 0;
        for (int hk = hk0; hk < hk0 + nhk; hk++) {
            size_t c = (size_t)hk * D;
            const char *kb = (const char *)k + (r0 * ks + c) * esz, *vb = (const char *)v + (r0 * ks + c) * esz;
            // requested ahead, one pass before their use: this chunk's value
            // rows during its scores, and the next pass's key rows (the next
            // kv head's in this chunk, else the first's in the next chunk)
            // during its values
            const char *nk = NULL;
            int nkn = 0;
            if (hk + 1 < hk0 + nhk) nk = kb + (size_t)D * esz, nkn = nb;
            else if (nn > 0) nk = (const char *)k + (r1 * ks + (size_t)hk0 * D) * esz, nkn = nn;
            for (int g0 = 0; g0 < G; g0 += 3) {
                int h = (hk - hk0) * G + g0, gn = G - g0 < 3 ? G - g0 : 3;
                const float *qh = q + (size_t)h * D;
                float *oh = o + (size_t)h * D;
                const char *pv = g0 ? NULL : vb, *pk = g0 + 3 < G ? NULL : nk;
                switch (gn) {
                case 1: scores_pass(sc, qh, kb, dt, ks, nb, D, scale, 1, 8, pv, nb); break;
                case 2: scores_pass(sc, qh, kb, dt, ks, nb, D, scale, 2, 4, pv, nb); break;
                default: scores_pass(sc, qh, kb, dt, ks, nb, D, scale, 3, 4, pv, nb); break;
                }
                for (int g = 0; g < gn; g++) {
                    if (cap > 0)
                        for (int j = 0; j < nb; j++) sc[g][j] = cap * tanhf(sc[g][j] / cap);
                    softmax_chunk8(sc[g], nb, &m[h + g], &l[h + g], oh + (size_t)g * D, D);
                }
                switch (gn) {
                case 1: values_pass(oh, sc, vb, dt, ks, nb, D, 1, pk, nkn); break;
                case 2: values_pass(oh, sc, vb, dt, ks, nb, D, 2, pk, nkn); break;
                default: values_pass(oh, sc, vb, dt, ks, nb, D, 3, pk, nkn); break;
                }
            }
        }
    }
    for (int h = 0; h < nh; h++) {
        float inv = 1.0f / l[h], *oh = o + (size_t)h * D;
        for (int d = 0; d < D; d++) oh[d] *= inv;
    }
}
#define AVX2_ARGS                                                                                              \
    float *o, const float *q, const void *k, const void *v, size_t ks, int first, int nkeys, int hk0, int nhk, \
        int G, int D, float scale, const int *table, float cap, const float *sinks
#define AVX2_PASS(dt) o, q, k, v, dt, ks, first, nkeys, hk0, nhk, G, D, scale, table, cap, sinks
typedef void (*Avx2Fn)(AVX2_ARGS);
static void heads_avx2_f32(AVX2_ARGS) { heads_avx2(AVX2_PASS(DT_F32)); }
static void heads_avx2_bf16(AVX2_ARGS) { heads_avx2(AVX2_PASS(DT_BF16)); }
static void heads_avx2_f16(AVX2_ARGS) { heads_avx2(AVX2_PASS(DT_F16)); }
#pragma GCC pop_options

#if defined(__AVX512F__)
// r[i] = the sum of a[i]'s 16 lanes: pairs within 128-bit lanes, then 64-bit
// pairs, then the four lanes (15 adds and 30 shuffles for 16 sums).
static inline __m512 hsum16x16(const __m512 a[16]) {
    __m512 b[8], c[4];
    for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
        c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    // c[i] lane L: the lane-L sums of a[4i .. 4i+3]; now add the four lanes
    __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x44), _mm512_shuffle_f32x4(c[0], c[1], 0xee));
    __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x44), _mm512_shuffle_f32x4(c[2], c[3], 0xee));
    return _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xdd));
}

// The G query heads that share one KV head, for one decode row: q and o hold
// the G heads' rows back to back (G x D). The online softmax of attn_row per
// head over the same chunks, but each chunk's keys and values are read once
// for all G heads (a decode step reads the whole cache: with G = 3 the rows
// of attn_row read it three times), and the scores of 16 keys come from 16
// dot products summed across lanes together (attn_row's one dot product at a
// time waits on its own reduction).
static void attn_decode_heads(float *o, const float *q, const float *k, const float *v, size_t ks, int first,
                              int nkeys, int G, int D, float scale, const int *table, float cap,
                              const float *sinks) {
    float sc[GMAX][KEY_BLOCK] __attribute__((aligned(64))), m[GMAX], l[GMAX];
    int nd = (D + 15) / 16;
    __mmask16 dm = D % 16 ? (__mmask16)((1u << (D % 16)) - 1) : 0xffff;  // the last 16 of D
    for (int g = 0; g < G; g++) m[g] = sinks ? sinks[g] : -INFINITY, l[g] = sinks ? 1.0f : 0.0f;
    memset(o, 0, sizeof(float) * G * D);
    for (int j0 = first, nb; j0 < nkeys; j0 += nb) {
        nb = KEY_BLOCK - j0 % KEY_BLOCK;
        if (nb > nkeys - j0) nb = nkeys - j0;
        const float *kb = k + key_row(table, j0) * ks, *vb = v + key_row(table, j0) * ks;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * D;
            for (int j = 0; j < nb; j += 16) {
                __m512 acc[16];
                int n16 = nb - j < 16 ? nb - j : 16;
                for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
                for (int c = 0; c < nd; c++) {
                    __mmask16 mk = c == nd - 1 ? dm : 0xffff;
                    __m512 qv = _mm512_maskz_loadu_ps(mk, qg + 16 * c);
                    for (int i = 0; i < n16; i++)
                        acc[i] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(mk, kb + (size_t)(j + i) * ks + 16 * c),
                                                 acc[i]);
                }
                _mm512_store_ps(sc[g] + j, _mm512_mul_ps(hsum16x16(acc), _mm512_set1_ps(scale)));
            }
            if (cap > 0)
                for (int j = 0; j < nb; j++) sc[g][j] = cap * tanhf(sc[g][j] / cap);
            float bm = -INFINITY;
            for (int j = 0; j < nb; j++) bm = sc[g][j] > bm ? sc[g][j] : bm;
            float mn = bm > m[g] ? bm : m[g], corr = expf(m[g] - mn);  // exp(-inf) = 0 on the first block
            l[g] *= corr;
            float *og = o + (size_t)g * D;
            for (int d = 0; d < D; d++) og[d] *= corr;
            for (int j = 0; j < nb; j++) sc[g][j] -= mn;
            simd_exp(sc[g], nb);
            for (int j = 0; j < nb; j++) l[g] += sc[g][j];
            m[g] = mn;
        }
        // o_g += p_gj v_j, 64 columns of o_g in registers over the chunk's
        // keys (the chunk's values stay in L1 for the G heads)
        for (int g = 0; g < G; g++)
            for (int c0 = 0; c0 < nd; c0 += 4) {
                float *og = o + (size_t)g * D + 16 * c0;
                __m512 acc[4];
                __mmask16 mk[4];
                int nc = nd - c0 < 4 ? nd - c0 : 4;
                for (int i = 0; i < 4; i++) {
                    mk[i] = i >= nc ? 0 : c0 + i == nd - 1 ? dm :
                                                             0xffff;
                    acc[i] = _mm512_maskz_loadu_ps(mk[i], og + 16 * i);
                }
                for (int j = 0; j < nb; j++) {
                    __m512 pb = _mm512_set1_ps(sc[g][j]);
                    const float *vr = vb + (size_t)j * ks + 16 * c0;
                    for (int i = 0; i < 4; i++)
                        acc[i] = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(mk[i], vr + 16 * i), acc[i]);
                }
                for (int i = 0; i < nc; i++) _mm512_mask_storeu_ps(og + 16 * i, mk[i], acc[i]);
            }
    }
    for (int g = 0; g < G; g++) {
        float inv = 1.0f / l[g], *og = o + (size_t)g * D;
        for (int d = 0; d < D; d++) og[d] *= inv;
    }
}
#endif

// The portable path for a pool dtype.
static HeadsFn heads_fn(DType dt) {
    switch (dt) {
    case DT_BF16: return heads_portable_bf16;
    case DT_F16: return heads_portable_f16;
    default: return heads_portable_f32;
    }
}

static void decode_team(float *out, const float *q, const void *k_pool, const void *v_pool, DType dt,
                        const int *cu_new, const int *cache_len, const int *table, int max_blocks, int nseq, int H,
                        int Hkv, int D, int W, float cap, const float *sinks) {
    int G = H / Hkv, Tn = cu_new[nseq], ngb = (G + GMAX - 1) / GMAX;
    float scale = 1.0f / sqrtf((float)D);
    size_t ks = (size_t)Hkv * D, esz = dtype_size(dt);
#if defined(__AVX512F__)
    if (dt == DT_F32 && G <= 16) {  // a KV head's G query heads together (attn_decode_heads)
        const float *k32 = k_pool, *v32 = v_pool;
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
        for (int r = 0; r < Tn; r++)
            for (int hk = 0; hk < Hkv; hk++) {
                int s = seq_of(cu_new, nseq, r);
                int pos = cache_len[s] - (cu_new[s + 1] - cu_new[s]) + (r - cu_new[s]);
                size_t at = ((size_t)r * H + (size_t)hk * G) * D;
                attn_decode_heads(out + at, q + at, k32 + (size_t)hk * D, v32 + (size_t)hk * D, ks,
                                  W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0, pos + 1, G, D, scale,
                                  table + (size_t)s * max_blocks, cap, sinks ? sinks + (size_t)hk * G : NULL);
            }
        return;
    }
#endif
    if (dtype_isa_id() >= DT_ISA_AVX2 && D % 8 == 0) {
        // tasks: (row, a range of its kv heads): whole rows when there are
        // enough of them to keep the team busy (a task then reads each
        // chunk's rows whole), else each row's kv heads split up to one each
        int nt = omp_get_num_threads(), split = Tn >= 4 * nt ? 1 : (4 * nt + Tn - 1) / Tn;
        if (split > Hkv) split = Hkv;
        Avx2Fn fn = dt == DT_BF16 ? heads_avx2_bf16 : dt == DT_F16 ? heads_avx2_f16 :
                                                                     heads_avx2_f32;
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
        for (int r = 0; r < Tn; r++)
            for (int sp = 0; sp < split; sp++) {
                int s = seq_of(cu_new, nseq, r), hk0 = sp * Hkv / split, nhk = (sp + 1) * Hkv / split - hk0;
                int pos = cache_len[s] - (cu_new[s + 1] - cu_new[s]) + (r - cu_new[s]);
                size_t at = ((size_t)r * H + (size_t)hk0 * G) * D;
                fn(out + at, q + at, k_pool, v_pool, ks, W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0, pos + 1, hk0,
                   nhk, G, D, scale, table + (size_t)s * max_blocks, cap, sinks ? sinks + (size_t)hk0 * G : NULL);
            }
        return;
    }
    HeadsFn fn = heads_fn(dt);
    // tasks: (row, kv head, group of up to GMAX of its query heads)
#pragma omp for collapse(3) schedule(dynamic, 1) nowait
    for (int r = 0; r < Tn; r++)
        for (int hk = 0; hk < Hkv; hk++)
            for (int gb = 0; gb < ngb; gb++) {
                int s = seq_of(cu_new, nseq, r), g0 = gb * GMAX, gn = G - g0 < GMAX ? G - g0 : GMAX;
                int pos = cache_len[s] - (cu_new[s + 1] - cu_new[s]) + (r - cu_new[s]);
                size_t at = ((size_t)r * H + (size_t)hk * G + g0) * D, col = (size_t)hk * D * esz;
                fn(out + at, q + at, (const char *)k_pool + col, (const char *)v_pool + col, ks,
                   W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0, pos + 1, gn, D, scale, table + (size_t)s * max_blocks,
                   cap, sinks ? sinks + (size_t)hk * G + g0 : NULL);
            }
}

void attention_decode_forward_sink(float *out, const float *q, const void *k_pool, const void *v_pool, DType kvdt,
                                   const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                   int nseq, int H, int Hkv, int D, int W, float cap, const float *sinks) {
    KERNEL_TEAM(decode_team(out, q, k_pool, v_pool, kvdt, cu_new, cache_len, table, max_blocks, nseq, H, Hkv, D, W,
                            cap, sinks));
}

void attention_decode_forward_dt(float *out, const float *q, const void *k_pool, const void *v_pool, DType kvdt,
                                 const int *cu_new, const int *cache_len, const int *table, int max_blocks, int nseq,
                                 int H, int Hkv, int D, int W, float cap) {
    attention_decode_forward_sink(out, q, k_pool, v_pool, kvdt, cu_new, cache_len, table, max_blocks, nseq, H, Hkv, D,
                                  W, cap, NULL);
}

void attention_decode_forward_cap(float *out, const float *q, const float *k_pool, const float *v_pool,
                                  const int *cu_new, const int *cache_len, const int *table, int max_blocks, int nseq,
                                  int H, int Hkv, int D, int W, float cap) {
    attention_decode_forward_dt(out, q, k_pool, v_pool, DT_F32, cu_new, cache_len, table, max_blocks, nseq, H, Hkv, D,
                                W, cap);
}

void attention_decode_forward(float *out, const float *q, const float *k_pool, const float *v_pool, const int *cu_new,
                              const int *cache_len, const int *table, int max_blocks, int nseq, int H, int Hkv,
                              int D, int W) {
    attention_decode_forward_dt(out, q, k_pool, v_pool, DT_F32, cu_new, cache_len, table, max_blocks, nseq, H, Hkv, D,
                                W, 0.0f);
}
