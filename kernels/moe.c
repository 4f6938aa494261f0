// moe: a mixture-of-experts MLP's routing (top-K of the router's logits and
// their softmax weights), grouping (the (token, choice) pairs sorted by expert,
// for one GEMM an expert), combine (the weighted sum of a token's K expert rows)
// and qwen2_moe's sigmoid-gated shared expert, with their backwards. The experts'
// products are matmul's. CPU twin of kernels/moe.cu. Every op's result for a
// token depends on that token's row only (no reduction across rows): the same
// bits whatever the team size.
#include <math.h>
#include <stdio.h>
#include "kernels.h"
#include "parallel.h"
#include "simd.h"

int moe_check_sizes(int E, int K, const char *op, PailErr *err) {
    if (E < 1 || E > MOE_MAX_EXPERTS)
        return err_set(err, PAIL_ERR_INVALID, "%s: %d experts: 1 to %d are supported", op, E, MOE_MAX_EXPERTS);
    if (K < 1 || K > E)
        return err_set(err, PAIL_ERR_INVALID, "%s: %d experts a token of %d: 1 to %d are possible", op, K, E, E);
    return 0;
}

int moe_check_k(int K, const char *op, PailErr *err) {
    if (K < 1 || K > MOE_MAX_EXPERTS)
        return err_set(err, PAIL_ERR_INVALID, "%s: %d experts a token: 1 to %d are supported", op, K, MOE_MAX_EXPERTS);
    return 0;
}

// ---- routing ----

// idx (K): the K largest of l (E) in decreasing order, a tie to the lower
// index: an insertion into the sorted prefix that never passes an equal value
// (stable), keeping K entries.
static void topk_row(int *idx, const float *l, int E, int K) {
    int n = 0;
    for (int e = 0; e < E; e++) {
        float v = l[e];
        if (n == K && !(v > l[idx[K - 1]])) continue;
        int j = n < K ? n++ : K - 1;
        for (; j > 0 && v > l[idx[j - 1]]; j--) idx[j] = idx[j - 1];
        idx[j] = e;
    }
}

static float row_max(const float *l, int E) {
    float m = l[0];
    for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
    return m;
}

// p (E) = softmax(l) (max subtracted, the vectorised exp); returns its sum before the division.
static void softmax_row(float *p, const float *l, int E) {
    float m = row_max(l, E), s = 0;
#pragma omp simd
    for (int e = 0; e < E; e++) p[e] = l[e] - m;
    simd_exp(p, E);
#pragma omp simd reduction(+ \
                           : s)
    for (int e = 0; e < E; e++) s += p[e];
    float r = 1.0f / s;
#pragma omp simd
    for (int e = 0; e < E; e++) p[e] *= r;
}

// w (K) = the softmax over the K chosen logits (idx[0] is their max).
static void chosen_softmax(float *w, const float *l, const int *idx, int K) {
    float m = l[idx[0]], s = 0;
    for (int k = 0; k < K; k++) s += w[k] = expf(l[idx[k]] - m);
    for (int k = 0; k < K; k++) w[k] /= s;
}

static void route_forward_team(int *idx, float *w, const float *logits, int T, int E, int K, int norm) {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        int *it = idx + (size_t)t * K;
        float *wt = w + (size_t)t * K;
        topk_row(it, l, E, K);
        if (norm) {
            chosen_softmax(wt, l, it, K);
        } else {
            float p[MOE_MAX_EXPERTS];
            softmax_row(p, l, E);
            for (int k = 0; k < K; k++) wt[k] = p[it[k]];
        }
    }
}

void moe_route_forward(int *idx, float *w, const float *logits, int T, int E, int K, int norm) {
    KERNEL_TEAM(route_forward_team(idx, w, logits, T, E, K, norm));
}

// norm 0: w = p[idx], dl = J_softmax^T dw' with dw' scattered to the chosen:
// dl_j = p_j (dw'_j - sum_k dw_k w_k). norm 1: the same over the K chosen only.
static void route_backward_team(float *dlogits, const float *dw, const float *logits, const int *idx, const float *w,
                                int T, int E, int K, int norm) {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E, *dwt = dw + (size_t)t * K, *wt = w + (size_t)t * K;
        const int *it = idx + (size_t)t * K;
        float *dl = dlogits + (size_t)t * E, dsum = 0;
        for (int k = 0; k < K; k++) dsum += dwt[k] * wt[k];
        if (norm) {
#pragma omp simd
            for (int e = 0; e < E; e++) dl[e] = 0;
            for (int k = 0; k < K; k++) dl[it[k]] = wt[k] * (dwt[k] - dsum);
        } else {
            float p[MOE_MAX_EXPERTS];
            softmax_row(p, l, E);
#pragma omp simd
            for (int e = 0; e < E; e++) dl[e] = -p[e] * dsum;
            for (int k = 0; k < K; k++) dl[it[k]] = p[it[k]] * (dwt[k] - dsum);
        }
    }
}

void moe_route_backward(float *dlogits, const float *dw, const float *logits, const int *idx, const float *w, int T,
                        int E, int K, int norm) {
    KERNEL_TEAM(route_backward_team(dlogits, dw, logits, idx, w, T, E, K, norm));
}

// The reference: selection (K passes, each the first largest not yet taken),
// libm expf and sums in index order; the backward straight from the formula.
void moe_route_forward_ref(int *idx, float *w, const float *logits, int T, int E, int K, int norm) {
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        int *it = idx + (size_t)t * K;
        unsigned char taken[MOE_MAX_EXPERTS] = {0};
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
            taken[best] = 1;
            it[k] = best;
        }
        float m = l[0], s = 0;
        for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
        if (norm) m = l[it[0]];
        if (norm)
            for (int k = 0; k < K; k++) s += expf(l[it[k]] - m);
        else
            for (int e = 0; e < E; e++) s += expf(l[e] - m);
        for (int k = 0; k < K; k++) w[(size_t)t * K + k] = expf(l[it[k]] - m) / s;
    }
}

void moe_route_backward_ref(float *dlogits, const float *dw, const float *logits, const int *idx, const float *w,
                            int T, int E, int K, int norm) {
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E, *dwt = dw + (size_t)t * K, *wt = w + (size_t)t * K;
        const int *it = idx + (size_t)t * K;
        float m = l[0], s = 0, dsum = 0;
        for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
        for (int e = 0; e < E; e++) s += expf(l[e] - m);
        for (int k = 0; k < K; k++) dsum += dwt[k] * wt[k];
        for (int j = 0; j < E; j++) {
            int kj = -1;
            for (int k = 0; k < K; k++)
                if (it[k] == j) kj = k;
            float g;
            if (norm) g = kj < 0 ? 0.0f : wt[kj] * (dwt[kj] - dsum);
            else {
                float p = expf(l[j] - m) / s;
                g = kj < 0 ? -p * dsum : p * (dwt[kj] - dsum);
            }
            dlogits[(size_t)t * E + j] = g;
        }
    }
}

// ---- grouping ----

// A counting sort on the calling thread (an `omp single` in a team): T*K is a
// few thousand ints, less work than a second wake-up of the team would cost.
static void group_team(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E) {
#pragma omp single nowait
    {
        int next[MOE_MAX_EXPERTS];
        size_t n = (size_t)T * K;
        for (int e = 0; e <= E; e++) offs[e] = 0;
        for (size_t i = 0; i < n; i++) offs[idx[i] + 1]++;
        for (int e = 0; e < E; e++) offs[e + 1] += offs[e];
        for (int e = 0; e < E; e++) next[e] = offs[e];
        for (size_t i = 0; i < n; i++) {
            int p = next[idx[i]]++;
            tok[p] = (int)(i / K);
            pos[i] = p;
        }
    }
}

void moe_group(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E) {
    KERNEL_TEAM_IF(0, group_team(tok, pos, offs, idx, T, K, E));
}

// The reference: expert by expert, the pairs in (t, k) order.
void moe_group_ref(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E) {
    int p = 0;
    for (int e = 0; e < E; e++) {
        offs[e] = p;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++)
                if (idx[t * K + k] == e) {
                    tok[p] = t;
                    pos[t * K + k] = p++;
                }
    }
    offs[E] = p;
}

// ---- combine ----

enum { CCH = 256 };  // columns a chunk: the running sum stays in a stack buffer

static void combine_forward_team(float *y, const float *h, const float *w, const int *pos, int T, int K, int C,
                                 float beta) {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++) {
        float *yr = y + (size_t)t * C;
        for (int c0 = 0; c0 < C; c0 += CCH) {
            int m = C - c0 < CCH ? C - c0 : CCH;
            float acc[CCH];
            const float *h0 = h + (size_t)pos[(size_t)t * K] * C + c0;
            float w0 = w ? w[(size_t)t * K] : 1.0f;
#pragma omp simd
            for (int c = 0; c < m; c++) acc[c] = w0 * h0[c];
            for (int k = 1; k < K; k++) {
                const float *hk = h + (size_t)pos[(size_t)t * K + k] * C + c0;
                float wk = w ? w[(size_t)t * K + k] : 1.0f;
#pragma omp simd
                for (int c = 0; c < m; c++) acc[c] += wk * hk[c];
            }
            if (beta == 0) {
#pragma omp simd
                for (int c = 0; c < m; c++) yr[c0 + c] = acc[c];
            } else {
#pragma omp simd
                for (int c = 0; c < m; c++) yr[c0 + c] = beta * yr[c0 + c] + acc[c];
            }
        }
    }
}

void moe_combine_forward(float *y, const float *h, const float *w, const int *pos, int T, int K, int C, float beta) {
    KERNEL_TEAM(combine_forward_team(y, h, w, pos, T, K, C, beta));
}

static void combine_backward_team(float *dh, float *dw, const float *dy, const float *h, const float *w,
                                  const int *pos, int T, int K, int C) {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++) {
        const float *dyr = dy + (size_t)t * C;
        for (int k = 0; k < K; k++) {
            size_t r = (size_t)pos[(size_t)t * K + k] * C;
            float wk = w ? w[(size_t)t * K + k] : 1.0f;
            if (dh) {
                float *o = dh + r;
#pragma omp simd
                for (int c = 0; c < C; c++) o[c] = wk * dyr[c];
            }
            if (dw) {
                const float *hr = h + r;
                float d = 0;
#pragma omp simd reduction(+ \
                           : d)
                for (int c = 0; c < C; c++) d += dyr[c] * hr[c];
                dw[(size_t)t * K + k] = d;
            }
        }
    }
}

void moe_combine_backward(float *dh, float *dw, const float *dy, const float *h, const float *w, const int *pos,
                          int T, int K, int C) {
    KERNEL_TEAM(combine_backward_team(dh, dw, dy, h, w, pos, T, K, C));
}

void moe_combine_forward_ref(float *y, const float *h, const float *w, const int *pos, int T, int K, int C,
                             float beta) {
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int k = 0; k < K; k++)
                s += (w ? w[t * K + k] : 1.0f) * h[(size_t)pos[t * K + k] * C + c];
            y[(size_t)t * C + c] = beta == 0 ? s : beta * y[(size_t)t * C + c] + s;
        }
}

void moe_combine_backward_ref(float *dh, float *dw, const float *dy, const float *h, const float *w,
                              const int *pos, int T, int K, int C) {
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            size_t r = (size_t)pos[t * K + k] * C;
            double d = 0;
            for (int c = 0; c < C; c++) {
                if (dh) dh[r + c] = (w ? w[t * K + k] : 1.0f) * dy[(size_t)t * C + c];
                d += (double)dy[(size_t)t * C + c] * h[r + c];
            }
            if (dw) dw[t * K + k] = (float)d;
        }
}

// ---- the sigmoid-gated shared expert ----

static float sigmoidf(float g) { return 1.0f / (1.0f + expf(-g)); }

static void sg_forward_team(float *y, const float *g, const float *s, int T, int C, float beta) {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++) {
        float a = sigmoidf(g[t]), *yr = y + (size_t)t * C;
        const float *sr = s + (size_t)t * C;
        if (beta == 0) {
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] = a * sr[c];
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] = beta * yr[c] + a * sr[c];
        }
    }
}

void sigmoid_gate_forward(float *y, const float *g, const float *s, int T, int C, float beta) {
    KERNEL_TEAM(sg_forward_team(y, g, s, T, C, beta));
}

static void sg_backward_team(float *ds, float *dg, const float *dy, const float *g, const float *s, int T, int C) {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++) {
        float a = sigmoidf(g[t]), d = 0;
        const float *dyr = dy + (size_t)t * C, *sr = s + (size_t)t * C;
        if (ds) {
            float *o = ds + (size_t)t * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = a * dyr[c];
        }
        if (dg) {
#pragma omp simd reduction(+ \
                           : d)
            for (int c = 0; c < C; c++) d += dyr[c] * sr[c];
            dg[t] = a * (1.0f - a) * d;
        }
    }
}

void sigmoid_gate_backward(float *ds, float *dg, const float *dy, const float *g, const float *s, int T, int C) {
    KERNEL_TEAM(sg_backward_team(ds, dg, dy, g, s, T, C));
}

void sigmoid_gate_forward_ref(float *y, const float *g, const float *s, int T, int C, float beta) {
    for (int t = 0; t < T; t++) {
        double a = 1.0 / (1.0 + exp(-(double)g[t]));
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)t * C + c;
            y[i] = (float)((beta == 0 ? 0.0 : (double)beta * y[i]) + a * s[i]);
        }
    }
}

void sigmoid_gate_backward_ref(float *ds, float *dg, const float *dy, const float *g, const float *s, int T, int C) {
    for (int t = 0; t < T; t++) {
        double a = 1.0 / (1.0 + exp(-(double)g[t])), d = 0;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)t * C + c;
            if (ds) ds[i] = (float)(a * dy[i]);
            d += (double)dy[i] * s[i];
        }
        if (dg) dg[t] = (float)(a * (1.0 - a) * d);
    }
}
