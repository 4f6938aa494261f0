// attention_decode: a few new tokens per sequence against a paged KV cache
// (kernels.h's attention_decode_forward_dt), the pools in fp32, bf16 or f16.
// A decode step reads the whole cache, so the kernel is built around those
// reads: one task per (new row, kv head) computes the G query heads that
// share the kv head, so each K and V row is read from memory once (and
// converted to fp32 in registers) for all G; the scores of 8 (AVX2) or 16
// (AVX-512) keys come from their dot products summed across lanes together;
// an online softmax over chunks of KEY_BLOCK keys keeps nothing sized by the
// cache. Paths: AVX-512 for fp32 pools where compiled for it, AVX2 + F16C for
// any pool (D a multiple of 8; picked at run time, dtype_isa), and a portable
// one for the rest (PAIL_KERNELS_ISA=scalar runs it). Sinks (gpt_oss) start
// a head's online softmax at m = its sink, l = 1 (every path). The reference is
// attention.c's attention_decode_forward_ref_dt; CUDA twin: attention_decode.cu.
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

// The next chunk's K and V rows (up to KEY_BLOCK from pool row r) towards L2
// while this one is computed: its block is anywhere in the pool, so the
// hardware prefetchers do not see it coming.
static inline __attribute__((always_inline)) void kv_prefetch(const void *k, const void *v, DType dt, size_t r,
                                                              int n, size_t ks, int D) {
    size_t esz = dtype_size(dt), rb = (size_t)D * esz;
    if (n > KEY_BLOCK) n = KEY_BLOCK;
    for (int j = 0; j < n; j++)
        for (size_t b = 0; b < rb; b += 64) {
            _mm_prefetch((const char *)k + (r + j) * ks * esz + b, _MM_HINT_T1);
            _mm_prefetch((const char *)v + (r + j) * ks * esz + b, _MM_HINT_T1);
        }
}

// heads_portable's contract and online softmax. A 16-bit chunk's K and V rows
// are widened once into fp32 scratch (L1-sized: 64 rows of D), which the G
// heads then read (widening in each head's loop costs ~3 vector ops an FMA);
// fp32 rows are read in place. Scores 8 keys at a time (a chunk's last group
// re-reads its last key for the lanes past nb, whose scores are never used),
// o_g += p v over 64 columns of o_g in registers.
static inline __attribute__((always_inline)) void heads_avx2(float *o, const float *q, const void *k, const void *v,
                                                             DType dt, size_t ks, int first, int nkeys, int G,
                                                             int D, float scale, const int *table, float cap,
                                                             const float *sinks) {
    float sc[GMAX][KEY_BLOCK] __attribute__((aligned(32))), m[GMAX], l[GMAX];
    float kbuf[dt == DT_F32 ? 1 : KEY_BLOCK * D], vbuf[dt == DT_F32 ? 1 : KEY_BLOCK * D];
    int nd = D / 8;
    for (int g = 0; g < G; g++) m[g] = sinks ? sinks[g] : -INFINITY, l[g] = sinks ? 1.0f : 0.0f;
    memset(o, 0, sizeof(float) * G * D);
    for (int j0 = first, nb; j0 < nkeys; j0 += nb) {
        nb = KEY_BLOCK - j0 % KEY_BLOCK;
        if (nb > nkeys - j0) nb = nkeys - j0;
        size_t r0 = key_row(table, j0), st = ks;
        const float *kr, *vr;
        if (j0 + nb < nkeys) kv_prefetch(k, v, dt, key_row(table, j0 + nb), nkeys - j0 - nb, ks, D);
        if (dt == DT_F32) {
            kr = (const float *)k + r0 * ks, vr = (const float *)v + r0 * ks;
        } else {
            for (int j = 0; j < nb; j++)
                for (int c = 0; c < nd; c++) {
                    _mm256_storeu_ps(kbuf + (size_t)j * D + 8 * c, kv_load8(k, dt, (r0 + j) * ks + 8 * c));
                    _mm256_storeu_ps(vbuf + (size_t)j * D + 8 * c, kv_load8(v, dt, (r0 + j) * ks + 8 * c));
                }
            kr = kbuf, vr = vbuf, st = (size_t)D;
        }
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * D;
            for (int j = 0; j < nb; j += 8) {
                __m256 acc[8];
                const float *rr[8];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) {
                    rr[i] = kr + (size_t)(j + i < nb ? j + i : nb - 1) * st;
                    acc[i] = _mm256_setzero_ps();
                }
                for (int c = 0; c < nd; c++) {
                    __m256 qv = _mm256_loadu_ps(qg + 8 * c);
#pragma GCC unroll 8
                    for (int i = 0; i < 8; i++) acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(rr[i] + 8 * c), acc[i]);
                }
                _mm256_store_ps(sc[g] + j, _mm256_mul_ps(hsum8x8(acc), _mm256_set1_ps(scale)));
            }
            if (cap > 0)
                for (int j = 0; j < nb; j++) sc[g][j] = cap * tanhf(sc[g][j] / cap);
            online_softmax_chunk(sc[g], nb, &m[g], &l[g], o + (size_t)g * D, D);
        }
        for (int g = 0; g < G; g++)
            for (int c0 = 0; c0 < nd; c0 += 8) {
                float *og = o + (size_t)g * D + 8 * c0;
                int nc = nd - c0 < 8 ? nd - c0 : 8;
                __m256 acc[8];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) acc[i] = i < nc ? _mm256_loadu_ps(og + 8 * i) : _mm256_setzero_ps();
                for (int j = 0; j < nb; j++) {
                    __m256 pb = _mm256_set1_ps(sc[g][j]);
                    const float *vj = vr + (size_t)j * st + 8 * c0;
#pragma GCC unroll 8
                    for (int i = 0; i < 8; i++)
                        if (i < nc) acc[i] = _mm256_fmadd_ps(pb, _mm256_loadu_ps(vj + 8 * i), acc[i]);
                }
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    if (i < nc) _mm256_storeu_ps(og + 8 * i, acc[i]);
            }
    }
    for (int g = 0; g < G; g++) {
        float inv = 1.0f / l[g], *og = o + (size_t)g * D;
        for (int d = 0; d < D; d++) og[d] *= inv;
    }
}
static void heads_avx2_f32(HEADS_ARGS) { heads_avx2(HEADS_PASS(DT_F32)); }
static void heads_avx2_bf16(HEADS_ARGS) { heads_avx2(HEADS_PASS(DT_BF16)); }
static void heads_avx2_f16(HEADS_ARGS) { heads_avx2(HEADS_PASS(DT_F16)); }
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

// The path for a pool dtype on this CPU (AVX-512 fp32 handled by the caller).
static HeadsFn heads_fn(DType dt, int D) {
    bool avx2 = dtype_isa_id() >= DT_ISA_AVX2 && D % 8 == 0;
    switch (dt) {
    case DT_BF16: return avx2 ? heads_avx2_bf16 : heads_portable_bf16;
    case DT_F16: return avx2 ? heads_avx2_f16 : heads_portable_f16;
    default: return avx2 ? heads_avx2_f32 : heads_portable_f32;
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
    HeadsFn fn = heads_fn(dt, D);
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
