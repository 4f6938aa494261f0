// attention: causal grouped-query attention over packed rows (several sequences
// back to back, cu_seqlens offsets; a query never sees another sequence), its
// backward, and the decode variant's reference (its fast path: kernels/attention_decode.c).
// The fast path is flash-style:
// keys in blocks with an online softmax, nothing (T,T)-sized is stored; the
// backward recomputes probabilities from lse. A sliding window W > 0 (mistral)
// limits query i to keys i-W+1..i; W = 0 is full causal attention and takes
// exactly the code it took before windows existed. A softcap cap > 0 (gemma2's
// attn_logit_softcapping) replaces each scaled score s by cap tanh(s / cap)
// before the mask and the softmax; its backward multiplies dS by 1 - (s'/cap)^2.
// cap = 0 runs exactly the code it ran before. Sinks (gpt_oss) start each
// row's online softmax at m = sinks[h], l = 1 (one more column, no value)
// instead of m = -inf, l = 0; NULL sinks run the code they ran before.
// CPU twin of kernels/attention.cu.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "blas.h"
#include "kernels.h"
#include "parallel.h"
#include "simd.h"

enum { KEY_BLOCK = 64 };
_Static_assert(KV_BLOCK % KEY_BLOCK == 0, "a key chunk must not straddle two KV blocks");

// Index of the sequence that holds row t: largest s with cu[s] <= t.
static int seq_of(const int *cu, int nseq, int t) {
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
}

static inline float dotf(const float *a, const float *b, int D) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

// One query row against nkeys key/value rows (row stride ks floats): online
// softmax over blocks of KEY_BLOCK keys, the accumulator rescaled once a block.
// Keys j0.. of a chunk: contiguous from k, or, with a block table, in the
// physical block table[j0 / KV_BLOCK] of a pool (KV_BLOCK a multiple of
// KEY_BLOCK, so a chunk never straddles two blocks and the arithmetic is the
// same as over contiguous keys, bit for bit).
static inline size_t key_row(const int *table, int j0) {
    return table ? (size_t)table[j0 / KV_BLOCK] * KV_BLOCK + (size_t)(j0 % KV_BLOCK) : (size_t)j0;
}

// Keys first..nkeys-1 (first > 0 under a sliding window): chunks end on
// KEY_BLOCK boundaries, so the first one may be short; with first = 0 the chunks
// are those of full attention.
static void attn_row(float *o, float *lse, const float *q, const float *k, const float *v,
                     size_t ks, int first, int nkeys, int D, float scale, const int *table, float cap,
                     const float *sink) {
    float sc[KEY_BLOCK];
    float m = sink ? *sink : -INFINITY, l = sink ? 1.0f : 0.0f;
    for (int d = 0; d < D; d++) o[d] = 0;
    for (int j0 = first, nb; j0 < nkeys; j0 += nb) {
        nb = KEY_BLOCK - j0 % KEY_BLOCK;
        if (nb > nkeys - j0) nb = nkeys - j0;
        float bm = -INFINITY;
        for (int j = 0; j < nb; j++) {
            sc[j] = dotf(q, k + (key_row(table, j0) + j) * ks, D) * scale;
            if (cap > 0) sc[j] = cap * tanhf(sc[j] / cap);
            if (sc[j] > bm) bm = sc[j];
        }
        float mn = bm > m ? bm : m, corr = expf(m - mn);  // exp(-inf) = 0 on the first block
        l *= corr;
        for (int d = 0; d < D; d++) o[d] *= corr;
        for (int j = 0; j < nb; j++) sc[j] -= mn;
        simd_exp(sc, nb);
        for (int j = 0; j < nb; j++) {
            float p = sc[j];
            const float *vr = v + (key_row(table, j0) + j) * ks;
            l += p;
#pragma omp simd
            for (int d = 0; d < D; d++) o[d] += p * vr[d];
        }
        m = mn;
    }
    float inv = 1.0f / l;
    for (int d = 0; d < D; d++) o[d] *= inv;
    if (lse) *lse = m + logf(l);
}

// ---- forward and backward over packed rows: tiles of BQ queries x BK keys ----
// Each tile's products go to OpenBLAS (single-threaded; the OpenMP team splits
// the work): S = Q K^T and O += P V in the forward; S, dP = dO V^T, dV += P^T dO,
// dK += dS^T Q, dQ += dS K in the backward. Tiles live on the thread's stack
// (BQ x BK floats, 64 KiB at 128 x 128), so nothing is allocated and nothing
// (T,T)-sized exists. Tiles on the diagonal are masked (j > i gives p = 0).
enum { BQ = 128, BK = 128, DMAX = 256 };

// The softcap on a tile's scores s(nq, nk): s = cap tanh(s / cap); with g (may be NULL)
// the derivative 1 - tanh^2 for the backward.
static void cap_tile(float *s, float *g, int nq, int nk, float cap) {
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < nk; c++) {
            float t = tanhf(s[(size_t)r * BK + c] / cap);
            s[(size_t)r * BK + c] = cap * t;
            if (g) g[(size_t)r * BK + c] = 1.0f - t * t;
        }
}

// Rows r of a tile s(nq, nk) whose absolute query index i0 + r sees keys up to
// itself: columns with j0 + c > i0 + r are set to -inf.
static void mask_tile(float *s, int nq, int nk, int i0, int j0) {
    for (int r = 0; r < nq; r++)
        for (int c = i0 + r - j0 + 1; c < nk; c++)
            if (c >= 0) s[(size_t)r * BK + c] = -INFINITY;
}

// Sliding window W: columns with j0 + c <= i0 + r - W (out of the row's window) set to -inf.
static void mask_window(float *s, int nq, int nk, int i0, int j0, int W) {
    for (int r = 0; r < nq; r++) {
        int end = i0 + r - W - j0 + 1;  // columns 0..end-1 are too old
        for (int c = 0; c < end && c < nk; c++) s[(size_t)r * BK + c] = -INFINITY;
    }
}

// A window's first key tile for query block i0: the block's first query's
// oldest key (every row of the block then has a key in that tile, as BQ <= BK,
// so no row's running max stays -inf).
static inline int window_start(int i0, int W) { return W > 0 && i0 - W + 1 > 0 ? i0 - W + 1 : 0; }
_Static_assert(BQ <= BK, "window_start needs each row's first key in the block's first tile");

// One (sequence, head, query block): online softmax over key tiles.
static void attn_fwd_block(float *out, float *lse, const float *q, const float *k, const float *v,
                           int i0, int nq, int H, int Hkv, int D, float scale, int W, float cap,
                           const float *sink) {
    float S[BQ * BK], O[BQ * DMAX], m[BQ], l[BQ];
    size_t qs = (size_t)H * D, ks = (size_t)Hkv * D;
    // the sink: a first column of score *sink and no value (O starts at 0 either way)
    for (int r = 0; r < nq; r++) m[r] = sink ? *sink : -INFINITY, l[r] = sink ? 1.0f : 0.0f;
    int nkeys = i0 + nq;  // causal: the block's last query sees keys 0..i0+nq-1
    int js = window_start(i0, W);
    for (int j0 = js; j0 < nkeys; j0 += BK) {
        int nk = nkeys - j0 < BK ? nkeys - j0 : BK;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, D, scale, q + (size_t)i0 * qs, (int)qs,
                    k + (size_t)j0 * ks, (int)ks, 0.0f, S, BK);
        if (cap > 0) cap_tile(S, NULL, nq, nk, cap);
        if (j0 + nk > i0 + 1) mask_tile(S, nq, nk, i0, j0);
        if (W > 0 && j0 <= i0 + nq - 1 - W) mask_window(S, nq, nk, i0, j0, W);
        for (int r = 0; r < nq; r++) {
            float *sr = S + (size_t)r * BK, bm = -INFINITY;
            for (int c = 0; c < nk; c++) bm = sr[c] > bm ? sr[c] : bm;
            float mn = bm > m[r] ? bm : m[r], corr = expf(m[r] - mn), sum = 0;
            for (int c = 0; c < nk; c++) sr[c] -= mn;
            simd_exp(sr, nk);
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < nk; c++) sum += sr[c];
            l[r] = l[r] * corr + sum;
            m[r] = mn;
            if (j0 > js) {
                float *o = O + (size_t)r * D;
#pragma omp simd
                for (int d = 0; d < D; d++) o[d] *= corr;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, D, nk, 1.0f, S, BK, v + (size_t)j0 * ks,
                    (int)ks, j0 > js ? 1.0f : 0.0f, O, D);
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / l[r], *o = out + (size_t)(i0 + r) * qs, *src = O + (size_t)r * D;
#pragma omp simd
        for (int d = 0; d < D; d++) o[d] = src[d] * inv;
        if (lse) lse[(size_t)(i0 + r) * H] = m[r] + logf(l[r]);
    }
}

static void attention_forward_rowwise(float *out, float *lse, const float *q, const float *k,
                                      const float *v, const int *cu_seqlens, int nseq, int T,
                                      int H, int Hkv, int D, int W, float cap, const float *sinks);

// The op bodies below run on the caller's team or on their own (kernels/parallel.h).
static void forward_team(float *out, float *lse, const float *q, const float *k, const float *v,
                         const int *cu_seqlens, int nseq, int H, int Hkv, int D, int W, float cap,
                         const float *sinks) {
    int G = H / Hkv, nblk = 0;
    float scale = 1.0f / sqrtf((float)D);
    for (int s = 0; s < nseq; s++) nblk += (cu_seqlens[s + 1] - cu_seqlens[s] + BQ - 1) / BQ;
    // tasks: (query block of some sequence, head); later blocks of a sequence cost more,
    // so dynamic scheduling
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
    for (int b = 0; b < nblk; b++)
        for (int h = 0; h < H; h++) {
            int s = 0, bb = b;
            while (bb >= (cu_seqlens[s + 1] - cu_seqlens[s] + BQ - 1) / BQ)
                bb -= (cu_seqlens[s + 1] - cu_seqlens[s] + BQ - 1) / BQ, s++;
            int start = cu_seqlens[s], n = cu_seqlens[s + 1] - start, i0 = bb * BQ;
            int nq = n - i0 < BQ ? n - i0 : BQ, hk = h / G;
            size_t qs = (size_t)H * D, ks = (size_t)Hkv * D;
            attn_fwd_block(out + (size_t)start * qs + (size_t)h * D, lse ? lse + (size_t)start * H + h : NULL,
                           q + (size_t)start * qs + (size_t)h * D, k + (size_t)start * ks + (size_t)hk * D,
                           v + (size_t)start * ks + (size_t)hk * D, i0, nq, H, Hkv, D, scale, W, cap,
                           sinks ? sinks + h : NULL);
        }
}

void attention_forward_sink(float *out, float *lse, const float *q, const float *k, const float *v,
                            const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                            const float *sinks) {
    if (D > DMAX) {
        attention_forward_rowwise(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, cap, sinks);
        return;
    }
    blas_single_threaded();
    KERNEL_TEAM(forward_team(out, lse, q, k, v, cu_seqlens, nseq, H, Hkv, D, W, cap, sinks));
}

void attention_forward_cap(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap) {
    attention_forward_sink(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, cap, NULL);
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W) {
    attention_forward_cap(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, 0.0f);
}

static void forward_rowwise_team(float *out, float *lse, const float *q, const float *k, const float *v,
                                 const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                 const float *sinks) {
    int G = H / Hkv;
    float scale = 1.0f / sqrtf((float)D);
    size_t ks = (size_t)Hkv * D;
#pragma omp for collapse(2) schedule(dynamic, 4) nowait
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int start = cu_seqlens[seq_of(cu_seqlens, nseq, t)], hk = h / G;
            int first = W > 0 && t - W + 1 > start ? t - W + 1 - start : 0;
            attn_row(out + ((size_t)t * H + h) * D, lse ? lse + (size_t)t * H + h : NULL,
                     q + ((size_t)t * H + h) * D, k + (size_t)start * ks + (size_t)hk * D,
                     v + (size_t)start * ks + (size_t)hk * D, ks, first, t - start + 1, D, scale, NULL, cap,
                     sinks ? sinks + h : NULL);
        }
}

static void attention_forward_rowwise(float *out, float *lse, const float *q, const float *k,
                                      const float *v, const int *cu_seqlens, int nseq, int T,
                                      int H, int Hkv, int D, int W, float cap, const float *sinks) {
    KERNEL_TEAM(forward_rowwise_team(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, cap, sinks));
}

// Backward of one (sequence, kv head): every query head of the group, every
// query tile against the key tiles up to its diagonal. p = exp(s - lse),
// dp = dO V^T, ds = p (dp - delta) scale with delta = dO . O per row; the task
// owns dK, dV of its kv head and dQ of its query heads, so no two tasks write
// the same float.
static void attn_bwd_seq_head(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *out, const float *lse,
                              int n, int hk, int H, int Hkv, int D, float scale, int W, float cap,
                              float *Gc) {
    float P[BQ * BK], dP[BQ * BK], delta[BQ], L[BQ];
    int G = H / Hkv;
    size_t qs = (size_t)H * D, ks = (size_t)Hkv * D;
    const float *kh = k + (size_t)hk * D, *vh = v + (size_t)hk * D;
    float *dkh = dk + (size_t)hk * D, *dvh = dv + (size_t)hk * D;
    for (int j = 0; j < n; j++)
        for (int d = 0; d < D; d++) dkh[(size_t)j * ks + d] = dvh[(size_t)j * ks + d] = 0;
    for (int h = hk * G; h < (hk + 1) * G; h++) {
        const float *qh = q + (size_t)h * D, *gh = dout + (size_t)h * D, *oh = out + (size_t)h * D;
        float *dqh = dq + (size_t)h * D;
        for (int i0 = 0; i0 < n; i0 += BQ) {
            int nq = n - i0 < BQ ? n - i0 : BQ;
            for (int r = 0; r < nq; r++) {
                delta[r] = dotf(gh + (size_t)(i0 + r) * qs, oh + (size_t)(i0 + r) * qs, D);
                L[r] = lse[(size_t)(i0 + r) * H + h];
            }
            int js = window_start(i0, W);
            for (int j0 = js; j0 < i0 + nq; j0 += BK) {
                int nk = i0 + nq - j0 < BK ? i0 + nq - j0 : BK;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, D, scale, qh + (size_t)i0 * qs,
                            (int)qs, kh + (size_t)j0 * ks, (int)ks, 0.0f, P, BK);
                if (cap > 0) cap_tile(P, Gc, nq, nk, cap);
                if (j0 + nk > i0 + 1) mask_tile(P, nq, nk, i0, j0);
                if (W > 0 && j0 <= i0 + nq - 1 - W) mask_window(P, nq, nk, i0, j0, W);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, D, 1.0f, gh + (size_t)i0 * qs,
                            (int)qs, vh + (size_t)j0 * ks, (int)ks, 0.0f, dP, BK);
                for (int r = 0; r < nq; r++) {
                    float *pr = P + (size_t)r * BK, *dpr = dP + (size_t)r * BK, Lr = L[r], dr = delta[r];
                    for (int c = 0; c < nk; c++) pr[c] -= Lr;
                    simd_exp(pr, nk);
#pragma omp simd
                    for (int c = 0; c < nk; c++) dpr[c] = pr[c] * (dpr[c] - dr) * scale;  // dS
                    if (cap > 0)  // through the softcap
                        for (int c = 0; c < nk; c++) dpr[c] *= Gc[(size_t)r * BK + c];
                }
                // dV += P^T dO, dK += dS^T Q, dQ += dS K
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, D, nq, 1.0f, P, BK, gh + (size_t)i0 * qs,
                            (int)qs, 1.0f, dvh + (size_t)j0 * ks, (int)ks);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, D, nq, 1.0f, dP, BK, qh + (size_t)i0 * qs,
                            (int)qs, 1.0f, dkh + (size_t)j0 * ks, (int)ks);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, D, nk, 1.0f, dP, BK, kh + (size_t)j0 * ks,
                            (int)ks, j0 > js ? 1.0f : 0.0f, dqh + (size_t)i0 * qs, (int)qs);
            }
        }
    }
}

static void attention_backward_rowwise(float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v,
                                       const float *out, const float *lse, const int *cu_seqlens,
                                       int nseq, int T, int H, int Hkv, int D, int W, float cap);

static void backward_team(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                          const float *v, const float *out, const float *lse, const int *cu_seqlens, int nseq,
                          int H, int Hkv, int D, int W, float cap) {
    float scale = 1.0f / sqrtf((float)D);
    float *Gc = NULL;  // the softcap's derivative tile, per thread (only with a cap: the stack holds P, dP)
    float Gbuf[cap > 0 ? BQ * BK : 1];
    if (cap > 0) Gc = Gbuf;
    size_t qs = (size_t)H * D, ks = (size_t)Hkv * D;
    // longest sequences first would balance better; dynamic is enough for packed rows
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
    for (int s = 0; s < nseq; s++)
        for (int hk = 0; hk < Hkv; hk++) {
            size_t a = (size_t)cu_seqlens[s];
            attn_bwd_seq_head(dq + a * qs, dk + a * ks, dv + a * ks, dout + a * qs, q + a * qs, k + a * ks,
                              v + a * ks, out + a * qs, lse + a * H, cu_seqlens[s + 1] - cu_seqlens[s], hk, H, Hkv,
                              D, scale, W, cap, Gc);
        }
}

// The sinks' gradient: the sink column's probability is exp(sink - lse) and its
// value 0, so its dS is p_sink (0 - delta) with delta = dout . out. One thread
// a head sums the rows in order (the same bits on any team size).
static void sink_grad_team(float *dsinks, const float *dout, const float *out, const float *lse,
                           const float *sinks, int T, int H, int D) {
#pragma omp for schedule(static) nowait
    for (int h = 0; h < H; h++) {
        float acc = 0;
        for (int t = 0; t < T; t++) {
            size_t at = ((size_t)t * H + h) * D;
            acc -= expf(sinks[h] - lse[(size_t)t * H + h]) * dotf(dout + at, out + at, D);
        }
        dsinks[h] += acc;
    }
}

void attention_backward_sink(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, const int *cu_seqlens, int nseq,
                             int T, int H, int Hkv, int D, int W, float cap, const float *sinks, float *dsinks) {
    // (sequence, kv head) tasks: too few to keep the team busy on one long
    // sequence, or D beyond the tiles: the row-wise path. Given the lse (which
    // holds the sink), dq, dk, dv do not depend on the sinks.
    if (D > DMAX || nseq * Hkv < 2 * kernel_team_size()) {
        attention_backward_rowwise(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, cap);
    } else {
        blas_single_threaded();
        KERNEL_TEAM(backward_team(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, H, Hkv, D, W, cap));
    }
    if (sinks && dsinks) KERNEL_TEAM(sink_grad_team(dsinks, dout, out, lse, sinks, T, H, D));
}

void attention_backward_cap(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, const float *lse,
                            const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap) {
    attention_backward_sink(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, cap, NULL, NULL);
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse,
                        const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W) {
    attention_backward_cap(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, 0.0f);
}

// Row-wise backward in two passes so that every output row has one writer and nothing
// is allocated: (A) over (query, head): dq; (B) over (block of KEY_TILE keys, kv
// head): dk, dv, each query's row (q, dout, delta) loaded once per tile.
// p = exp(s - lse), dp = dout . v, ds = p (dp - delta), delta = dout . out.
enum { KEY_TILE = 16 };

static void backward_rowwise_team(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                  const float *k, const float *v, const float *out, const float *lse,
                                  const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W,
                                  float cap) {
    int G = H / Hkv;
    float scale = 1.0f / sqrtf((float)D);
    size_t ks = (size_t)Hkv * D, qs = (size_t)H * D;
#pragma omp for collapse(2) schedule(dynamic, 4) nowait
    for (int i = 0; i < T; i++)
        for (int h = 0; h < H; h++) {
            int start = cu_seqlens[seq_of(cu_seqlens, nseq, i)], hk = h / G;
            const float *qi = q + i * qs + (size_t)h * D, *gi = dout + i * qs + (size_t)h * D;
            float *dqi = dq + i * qs + (size_t)h * D;
            float delta = dotf(gi, out + i * qs + (size_t)h * D, D), L = lse[(size_t)i * H + h];
            float p[KEY_BLOCK], g[KEY_BLOCK];
            for (int d = 0; d < D; d++) dqi[d] = 0;
            int first = W > 0 && i - W + 1 > start ? i - W + 1 : start;
            for (int j0 = first; j0 <= i; j0 += KEY_BLOCK) {
                int nb = i + 1 - j0 < KEY_BLOCK ? i + 1 - j0 : KEY_BLOCK;
                if (cap > 0)  // softcapped scores, and the cap's derivative
                    for (int j = 0; j < nb; j++) {
                        float t = tanhf(dotf(qi, k + (j0 + j) * ks + (size_t)hk * D, D) * scale / cap);
                        p[j] = cap * t - L;
                        g[j] = 1.0f - t * t;
                    }
                else
                    for (int j = 0; j < nb; j++)
                        p[j] = dotf(qi, k + (j0 + j) * ks + (size_t)hk * D, D) * scale - L;
                simd_exp(p, nb);
                for (int j = 0; j < nb; j++) {
                    const float *kj = k + (j0 + j) * ks + (size_t)hk * D;
                    float ds = p[j] * (dotf(gi, v + (j0 + j) * ks + (size_t)hk * D, D) - delta) * scale;
                    if (cap > 0) ds *= g[j];
#pragma omp simd
                    for (int d = 0; d < D; d++) dqi[d] += ds * kj[d];
                }
            }
        }
    // (B): one task per tile start; rows that do not start a tile of their
    // sequence are skipped (cheap, and keeps the loop flat for OpenMP).
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
    for (int j0 = 0; j0 < T; j0++)
        for (int hk = 0; hk < Hkv; hk++) {
            int s = seq_of(cu_seqlens, nseq, j0), start = cu_seqlens[s], end = cu_seqlens[s + 1];
            if ((j0 - start) % KEY_TILE) continue;
            int nb = end - j0 < KEY_TILE ? end - j0 : KEY_TILE;
            float dkt[KEY_TILE * D], dvt[KEY_TILE * D], p[KEY_TILE], g[KEY_TILE];
            for (int e = 0; e < nb * D; e++) dkt[e] = dvt[e] = 0;
            // a window: queries past j0 + nb - 1 + W - 1 see none of the tile's keys
            int iend = W > 0 && j0 + nb - 1 + W < end ? j0 + nb - 1 + W : end;
            for (int h = hk * G; h < (hk + 1) * G; h++)
                for (int i = j0; i < iend; i++) {
                    const float *qi = q + i * qs + (size_t)h * D, *gi = dout + i * qs + (size_t)h * D;
                    float delta = dotf(gi, out + i * qs + (size_t)h * D, D), L = lse[(size_t)i * H + h];
                    int nj = i - j0 + 1 < nb ? i - j0 + 1 : nb;  // causal: keys j0..min(i, tile end)
                    int j1 = W > 0 && i - W + 1 > j0 ? i - W + 1 - j0 : 0;  // window: keys from i-W+1
                    if (cap > 0)
                        for (int j = j1; j < nj; j++) {
                            float t = tanhf(dotf(qi, k + (j0 + j) * ks + (size_t)hk * D, D) * scale / cap);
                            p[j] = cap * t - L;
                            g[j] = 1.0f - t * t;
                        }
                    else
                        for (int j = j1; j < nj; j++)
                            p[j] = dotf(qi, k + (j0 + j) * ks + (size_t)hk * D, D) * scale - L;
                    simd_exp(p + j1, nj - j1);
                    for (int j = j1; j < nj; j++) {
                        float ds = p[j] * (dotf(gi, v + (j0 + j) * ks + (size_t)hk * D, D) - delta) * scale;
                        if (cap > 0) ds *= g[j];
                        float *dkj = dkt + j * D, *dvj = dvt + j * D, pj = p[j];
#pragma omp simd
                        for (int d = 0; d < D; d++) {
                            dkj[d] += ds * qi[d];
                            dvj[d] += pj * gi[d];
                        }
                    }
                }
            for (int j = 0; j < nb; j++) {
                memcpy(dk + (j0 + j) * ks + (size_t)hk * D, dkt + j * D, sizeof(float) * D);
                memcpy(dv + (j0 + j) * ks + (size_t)hk * D, dvt + j * D, sizeof(float) * D);
            }
        }
}

static void attention_backward_rowwise(float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v,
                                       const float *out, const float *lse, const int *cu_seqlens,
                                       int nseq, int T, int H, int Hkv, int D, int W, float cap) {
    KERNEL_TEAM(backward_rowwise_team(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, cap));
}

// ---- references: three passes per query row in double (max, sum, weighted sum) ----

// cap > 0: the scaled score s becomes cap tanh(s / cap).
static inline double ref_cap(double s, double cap) { return cap > 0 ? cap * tanh(s / cap) : s; }

// sink (may be NULL): one more softmax column, score *sink, no value.
static void ref_row(float *o, float *lse, const float *q, const float *k, const float *v,
                    size_t ks, int nkeys, int D, double cap, const float *sink) {
    double scale = 1.0 / sqrt((double)D), m = sink ? *sink : -INFINITY, l = 0;
    for (int j = 0; j < nkeys; j++) {
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)q[d] * k[j * ks + d];
        if (ref_cap(s * scale, cap) > m) m = ref_cap(s * scale, cap);
    }
    for (int d = 0; d < D; d++) o[d] = 0;
    double acc[D];
    for (int d = 0; d < D; d++) acc[d] = 0;
    if (sink) l = exp(*sink - m);
    for (int j = 0; j < nkeys; j++) {
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)q[d] * k[j * ks + d];
        double p = exp(ref_cap(s * scale, cap) - m);
        l += p;
        for (int d = 0; d < D; d++) acc[d] += p * v[j * ks + d];
    }
    for (int d = 0; d < D; d++) o[d] = (float)(acc[d] / l);
    if (lse) *lse = (float)(m + log(l));
}

void attention_forward_ref(float *out, float *lse, const float *q, const float *k,
                           const float *v, const int *cu_seqlens, int nseq, int T, int H,
                           int Hkv, int D, int W) {
    attention_forward_ref_cap(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, 0.0f);
}

void attention_forward_ref_cap(float *out, float *lse, const float *q, const float *k,
                               const float *v, const int *cu_seqlens, int nseq, int T, int H,
                               int Hkv, int D, int W, float cap) {
    attention_forward_ref_sink(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, cap, NULL);
}

void attention_forward_ref_sink(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                const float *sinks) {
    size_t ks = (size_t)Hkv * D;
    for (int s = 0; s < nseq; s++)
        for (int t = cu_seqlens[s]; t < cu_seqlens[s + 1]; t++)
            for (int h = 0; h < H; h++) {
                int hk = h / (H / Hkv), start = cu_seqlens[s];
                if (W > 0 && t - W + 1 > start) start = t - W + 1;  // the window's oldest key
                ref_row(out + ((size_t)t * H + h) * D, lse ? lse + (size_t)t * H + h : NULL,
                        q + ((size_t)t * H + h) * D, k + start * ks + (size_t)hk * D,
                        v + start * ks + (size_t)hk * D, ks, t - start + 1, D, cap, sinks ? sinks + h : NULL);
            }
    (void)T;
}

// Reference backward, derived independently of the fast one: the softmax row is
// recomputed naively and ds = p * (dp - sum_j p_j dp_j) (no lse, no out).
void attention_backward_ref(float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, const int *cu_seqlens, int nseq, int T, int H,
                            int Hkv, int D, int W) {
    attention_backward_ref_cap(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, 0.0f);
}

// cap > 0: p from the capped scores, and ds through the cap's derivative 1 - tanh^2 (in double).
void attention_backward_ref_cap(float *dq, float *dk, float *dv, const float *dout,
                                const float *q, const float *k, const float *v, const float *out,
                                const float *lse, const int *cu_seqlens, int nseq, int T, int H,
                                int Hkv, int D, int W, float cap) {
    attention_backward_ref_sink(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, cap, NULL,
                                NULL);
}

// sinks: the sink column joins the recomputed softmax (score sinks[h], dp 0), so it
// takes its share of each row's mass and its ds = p_sink (0 - sum_j p_j dp_j) is dsinks'.
void attention_backward_ref_sink(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out, const float *lse,
                                 const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                 const float *sinks, float *dsinks) {
    (void)out, (void)lse;
    size_t ks = (size_t)Hkv * D, qs = (size_t)H * D;
    double scale = 1.0 / sqrt((double)D);
    memset(dq, 0, sizeof(float) * T * qs);
    memset(dk, 0, sizeof(float) * T * ks);
    memset(dv, 0, sizeof(float) * T * ks);
    double *p = malloc(sizeof(double) * (T + 1)), *dp = malloc(sizeof(double) * (T + 1));
    double *gc = malloc(sizeof(double) * (T + 1));
    for (int s = 0; s < nseq; s++) {
        for (int i = cu_seqlens[s]; i < cu_seqlens[s + 1]; i++)
            for (int h = 0; h < H; h++) {
                int start = W > 0 && i - W + 1 > cu_seqlens[s] ? i - W + 1 : cu_seqlens[s];
                int hk = h / (H / Hkv), n = i - start + 1;
                const float *qi = q + i * qs + h * D, *gi = dout + i * qs + h * D;
                double m = sinks ? sinks[h] : -INFINITY, l = 0, pdp = 0;
                for (int j = 0; j < n; j++) {
                    double sc = 0, g = 0;
                    for (int d = 0; d < D; d++) {
                        sc += (double)qi[d] * k[(start + j) * ks + hk * D + d];
                        g += (double)gi[d] * v[(start + j) * ks + hk * D + d];
                    }
                    p[j] = sc * scale, dp[j] = g, gc[j] = 1;
                    if (cap > 0) {
                        double t = tanh(p[j] / cap);
                        p[j] = cap * t, gc[j] = 1 - t * t;
                    }
                    if (p[j] > m) m = p[j];
                }
                double psink = sinks ? exp(sinks[h] - m) : 0;
                l = psink;
                for (int j = 0; j < n; j++) l += (p[j] = exp(p[j] - m));
                for (int j = 0; j < n; j++) pdp += (p[j] /= l) * dp[j];
                if (sinks && dsinks) dsinks[h] += (float)(-(psink / l) * pdp);
                for (int j = 0; j < n; j++) {
                    double ds = p[j] * (dp[j] - pdp) * scale * gc[j];
                    for (int d = 0; d < D; d++) {
                        size_t kv = (start + j) * ks + hk * D + d;
                        dq[i * qs + h * D + d] += (float)(ds * k[kv]);
                        dk[kv] += (float)(ds * qi[d]);
                        dv[kv] += (float)(p[j] * gi[d]);
                    }
                }
            }
    }
    free(p);
    free(dp);
    free(gc);
}

void attention_decode_forward_ref(float *out, const float *q, const float *k_pool, const float *v_pool,
                                  const int *cu_new, const int *cache_len, const int *table, int max_blocks, int nseq,
                                  int H, int Hkv, int D, int W) {
    attention_decode_forward_ref_dt(out, q, k_pool, v_pool, DT_F32, cu_new, cache_len, table, max_blocks, nseq, H, Hkv,
                                    D, W, 0.0f);
}

void attention_decode_forward_ref_cap(float *out, const float *q, const float *k_pool, const float *v_pool,
                                      const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                      int nseq, int H, int Hkv, int D, int W, float cap) {
    attention_decode_forward_ref_dt(out, q, k_pool, v_pool, DT_F32, cu_new, cache_len, table, max_blocks, nseq, H, Hkv,
                                    D, W, cap);
}

void attention_decode_forward_ref_dt(float *out, const float *q, const void *k_pool, const void *v_pool, DType kvdt,
                                     const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                     int nseq, int H, int Hkv, int D, int W, float cap) {
    attention_decode_forward_ref_sink(out, q, k_pool, v_pool, kvdt, cu_new, cache_len, table, max_blocks, nseq, H,
                                      Hkv, D, W, cap, NULL);
}

// The sequence's keys gathered in order from its blocks and widened to fp32
// (exact: dtype_to_f32), then the double reference rows.
void attention_decode_forward_ref_sink(float *out, const float *q, const void *k_pool, const void *v_pool,
                                       DType kvdt, const int *cu_new, const int *cache_len, const int *table,
                                       int max_blocks, int nseq, int H, int Hkv, int D, int W, float cap,
                                       const float *sinks) {
    size_t ks = (size_t)Hkv * D, esz = dtype_size(kvdt);
    for (int s = 0; s < nseq; s++) {
        int n = cu_new[s + 1] - cu_new[s], len = cache_len[s];
        float *k = malloc(sizeof(float) * ((size_t)len * ks + 1)), *v = malloc(sizeof(float) * ((size_t)len * ks + 1));
        for (int j = 0; j < len; j++) {
            size_t row = (size_t)table[(size_t)s * max_blocks + j / KV_BLOCK] * KV_BLOCK + (size_t)(j % KV_BLOCK);
            dtype_to_f32(k + (size_t)j * ks, (const char *)k_pool + row * ks * esz, kvdt, ks);
            dtype_to_f32(v + (size_t)j * ks, (const char *)v_pool + row * ks * esz, kvdt, ks);
        }
        for (int r = 0; r < n; r++)
            for (int h = 0; h < H; h++) {
                int row = cu_new[s] + r, hk = h / (H / Hkv), pos = len - n + r;
                int first = W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0;
                ref_row(out + ((size_t)row * H + h) * D, NULL, q + ((size_t)row * H + h) * D,
                        k + (size_t)first * ks + (size_t)hk * D, v + (size_t)first * ks + (size_t)hk * D, ks,
                        pos + 1 - first, D, cap, sinks ? sinks + h : NULL);
            }
        free(k);
        free(v);
    }
}
