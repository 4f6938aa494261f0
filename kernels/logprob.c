// logprob: per-token log-probabilities of given targets under the LM head,
// logp = z[target] - logsumexp(z) with z = hidden W_lm^T / temperature, and the
// entropy of softmax(z) on request. The head matmul is fused with a streaming
// (online) log-sum-exp over vocab chunks, so the (T,V) logits never exist; the
// backward recomputes each chunk. CPU twin of kernels/logprob.cu. The _dt
// variants take w_lm in a storage dtype: its products go through the _dt
// matmuls, and the rows read directly (a target's) are converted exactly (a
// quantized head: rows of dtype_row_bytes, dequantized as quant_dequant does).
// The _cap variants take gemma2's final_logit_softcapping: z = cap tanh(x / cap)
// / temperature with x = hidden W_lm^T (cap = 0: the ops without it, bit for bit).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype_cpu.h"
#include "kernels.h"
#include "simd.h"

enum { EXP_CHUNK = 256 };  // exp over a chunk of logits at a time (simd.h)

// ws layout: z chunk (T, vchunk), then running max m (T), sum s (T), and
// a = sum exp(z - m) * z (T) for the entropy H = lse - a / s.
size_t logprob_workspace_floats(int T, int vchunk) {
    return (size_t)T * vchunk + 3 * (size_t)T;
}

static inline float row_max(const float *z, int n) {
    float m = -INFINITY;
    for (int j = 0; j < n; j++) m = z[j] > m ? z[j] : m;
    return m;
}

// sum_j exp(z_j - m), and *a = sum_j exp(z_j - m) z_j; the exponentials are also
// written to e_out when given (which may be z itself).
static inline float exp_sums(float *e_out, const float *z, int n, float m, float *a) {
    float s = 0, sa = 0;
    for (int j0 = 0; j0 < n; j0 += EXP_CHUNK) {
        int cnt = n - j0 < EXP_CHUNK ? n - j0 : EXP_CHUNK;
        float e[EXP_CHUNK];
        const float *zc = z + j0;
        for (int j = 0; j < cnt; j++) e[j] = zc[j] - m;
        simd_exp(e, cnt);
#pragma omp simd reduction(+ : s, sa)
        for (int j = 0; j < cnt; j++) {
            s += e[j];
            sa += e[j] * zc[j];
        }
        if (e_out) memcpy(e_out + j0, e, sizeof(float) * cnt);
    }
    *a = sa;
    return s;
}

static int targets_check(const int *targets, int T, int V, float temperature, int vchunk,
                         PailErr *err) {
    if (!(temperature > 0))
        return err_set(err, PAIL_ERR_INVALID, "logprob: temperature %g must be > 0",
                       (double)temperature);
    if (vchunk <= 0) return err_set(err, PAIL_ERR_INVALID, "logprob: vchunk %d must be > 0", vchunk);
    for (int t = 0; t < T; t++)
        if (targets[t] < 0 || targets[t] >= V)
            return err_set(err, PAIL_ERR_INVALID,
                           "logprob: target token %d at position %d is outside the vocabulary [0, %d)",
                           targets[t], t, V);
    return 0;
}

int logprob_forward_dt(float *logp, float *entropy, float *lse, const float *hidden,
                       const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                       float temperature, float *ws, int vchunk, PailErr *err) {
    return logprob_forward_cap_dt(logp, entropy, lse, hidden, w_lm, wdt, targets, T, C, V, temperature, 0.0f, ws,
                                  vchunk, err);
}

// A chunk x(n) of head products into capped logits: cap tanh(x / cap) / temperature.
static void cap_chunk(float *z, size_t n, float cap, float inv_t) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) z[i] = cap * tanhf(z[i] / cap) * inv_t;
}

int logprob_forward_cap_dt(float *logp, float *entropy, float *lse, const float *hidden,
                           const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                           float temperature, float cap, float *ws, int vchunk, PailErr *err) {
    if (targets_check(targets, T, V, temperature, vchunk, err)) return -1;
    float *z = ws, *m = ws + (size_t)T * vchunk, *s = m + T, *a = s + T;
    for (int t = 0; t < T; t++) m[t] = -INFINITY, s[t] = 0, a[t] = 0;
    for (int v0 = 0; v0 < V; v0 += vchunk) {
        int nb = V - v0 < vchunk ? V - v0 : vchunk;
        matmul_forward_dt(z, hidden, (const char *)w_lm + (size_t)v0 * dtype_row_bytes(wdt, (size_t)C), wdt,
                          NULL, T, C, nb, cap > 0 ? 1.0f : 1.0f / temperature, 0.0f);
        if (cap > 0) cap_chunk(z, (size_t)T * nb, cap, 1.0f / temperature);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            const float *zr = z + (size_t)t * nb;
            float bm = row_max(zr, nb), mn = bm > m[t] ? bm : m[t], corr = expf(m[t] - mn), ba;
            float bs = exp_sums(NULL, zr, nb, mn, &ba);
            s[t] = s[t] * corr + bs;
            if (entropy) a[t] = a[t] * corr + ba;
            m[t] = mn;
            int tj = targets[t] - v0;
            if (tj >= 0 && tj < nb) logp[t] = zr[tj];  // target logit, finished below
        }
    }
    for (int t = 0; t < T; t++) {
        float l = m[t] + logf(s[t]);
        if (lse) lse[t] = l;
        if (entropy) entropy[t] = l - a[t] / s[t];
        logp[t] -= l;
    }
    return 0;
}

int logprob_forward(float *logp, float *entropy, float *lse, const float *hidden,
                    const float *w_lm, const int *targets, int T, int C, int V,
                    float temperature, float *ws, int vchunk, PailErr *err) {
    return logprob_forward_dt(logp, entropy, lse, hidden, w_lm, DT_F32, targets, T, C, V,
                              temperature, ws, vchunk, err);
}

// dz_j = dlogp (1[j = target] - p_j) - dH p_j (log p_j + H), then d logits =
// dz / temperature; dhidden = dlogits W, dW += dlogits^T hidden, chunk by chunk.
// dW (fp32) is dz^T hidden: it never reads w_lm, so any head dtype may have one.
void logprob_backward_dt(float *dhidden, float *dw_lm, const float *dlogp,
                         const float *dentropy, const float *hidden, const void *w_lm,
                         DType wdt, const int *targets, const float *lse, const float *entropy,
                         int T, int C, int V, float temperature, float *ws, int vchunk) {
    logprob_backward_cap_dt(dhidden, dw_lm, dlogp, dentropy, hidden, w_lm, wdt, targets, lse, entropy, T, C, V,
                            temperature, 0.0f, ws, vchunk);
}

// With a cap, d z / d x = (1 - tanh^2) / temperature, tanh recovered from the capped z as
// z temperature / cap: every dz of the row (the target's 1 included) times 1 - tanh^2.
void logprob_backward_cap_dt(float *dhidden, float *dw_lm, const float *dlogp,
                             const float *dentropy, const float *hidden, const void *w_lm,
                             DType wdt, const int *targets, const float *lse, const float *entropy,
                             int T, int C, int V, float temperature, float cap, float *ws, int vchunk) {
    float *z = ws, inv_t = 1.0f / temperature;
    for (int v0 = 0; v0 < V; v0 += vchunk) {
        int nb = V - v0 < vchunk ? V - v0 : vchunk;
        const void *wc = (const char *)w_lm + (size_t)v0 * dtype_row_bytes(wdt, (size_t)C);
        matmul_forward_dt(z, hidden, wc, wdt, NULL, T, C, nb, cap > 0 ? 1.0f : inv_t, 0.0f);
        if (cap > 0) cap_chunk(z, (size_t)T * nb, cap, inv_t);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            float *zr = z + (size_t)t * nb, gl = dlogp[t], ge = dentropy ? dentropy[t] : 0.0f;
            if (cap > 0) {  // the capped row: its own loop, the uncapped one below untouched
                float L = lse[t], Hent = dentropy ? entropy[t] : 0.0f, k = temperature / cap;
                int tj = targets[t] - v0;
                for (int j = 0; j < nb; j++) {
                    float th = zr[j] * k, p = expf(zr[j] - L);
                    float dz = (j == tj ? gl : 0.0f) - gl * p - ge * p * (zr[j] - L + Hent);
                    zr[j] = dz * inv_t * (1.0f - th * th);
                }
                continue;
            }
            float L = lse[t], Hent = dentropy ? entropy[t] : 0.0f;
            int tj = targets[t] - v0;
            for (int j0 = 0; j0 < nb; j0 += EXP_CHUNK) {
                int cnt = nb - j0 < EXP_CHUNK ? nb - j0 : EXP_CHUNK;
                float p[EXP_CHUNK], *zc = zr + j0;
                for (int j = 0; j < cnt; j++) p[j] = zc[j] - L;
                simd_exp(p, cnt);
#pragma omp simd
                for (int j = 0; j < cnt; j++)
                    zc[j] = (-gl * p[j] - ge * p[j] * (zc[j] - L + Hent)) * inv_t;
            }
            if (tj >= 0 && tj < nb) zr[tj] += gl * inv_t;  // the 1[j = target] term
        }
        matmul_backward_dt(dhidden, dw_lm ? dw_lm + (size_t)v0 * C : NULL, NULL, z, hidden, wc,
                           wdt, T, C, nb, 1.0f, v0 == 0 ? 0.0f : 1.0f);
    }
}

void logprob_backward(float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                      const float *hidden, const float *w_lm, const int *targets,
                      const float *lse, const float *entropy, int T, int C, int V,
                      float temperature, float *ws, int vchunk) {
    logprob_backward_dt(dhidden, dw_lm, dlogp, dentropy, hidden, w_lm, DT_F32, targets, lse,
                        entropy, T, C, V, temperature, ws, vchunk);
}

// ---- the head with its gradient's expectation, for a later backward without recompute ----
// d logp_t / d hidden_t = (W[target_t] - sum_j p_tj W_j) / temperature: the sum is
// the same whatever dlogp turns out to be, so the forward computes it while the
// logits are at hand and the backward is a scaled difference of two rows per
// token, no second pass over V. It streams as logprob_forward does: each vocab
// chunk is one GEMM over every row for its logits and one for its share of
// expect, kept as sum_j exp(z_j - m) W_j against the running max m and rescaled
// when m grows (the online softmax), then divided by the row's sum at the end.
// So the head is read twice whatever T, never as a mat-vec per block of rows.
int logprob_forward_expect_dt(float *logp, float *entropy, float *lse, float *expect,
                              const float *hidden, const void *w_lm, DType wdt,
                              const int *targets, int T, int C, int V, float temperature,
                              float *ws, size_t ws_floats, PailErr *err) {
    return logprob_forward_expect_cap_dt(logp, entropy, lse, expect, hidden, w_lm, wdt, targets, T, C, V, temperature,
                                         0.0f, ws, ws_floats, err);
}

// With a cap: expect = sum_j p_j (1 - tanh_j^2) W_j / temperature (the capped logits' gradient);
// the backward's target term needs 1 - tanh_t^2, which it recomputes from hidden.
// ws: a chunk of (T, vc) logits, then m, s, a (T) as logprob_forward's; vc = ws_floats / T - 3
// columns (the whole workspace, at most V).
int logprob_forward_expect_cap_dt(float *logp, float *entropy, float *lse, float *expect,
                                  const float *hidden, const void *w_lm, DType wdt,
                                  const int *targets, int T, int C, int V, float temperature, float cap,
                                  float *ws, size_t ws_floats, PailErr *err) {
    if (targets_check(targets, T, V, temperature, 1, err)) return -1;
    if (T < 1) return 0;
    size_t per = ws_floats / (size_t)T;
    if (per < 4)
        return err_set(err, PAIL_ERR_INVALID,
                       "logprob_forward_expect: workspace of %zu floats holds no chunk of logits for %d rows",
                       ws_floats, T);
    int vc = per - 3 < (size_t)V ? (int)(per - 3) : V;
    float inv_t = 1.0f / temperature, k = cap > 0 ? temperature / cap : 0.0f;
    float *z = ws, *m = ws + (size_t)T * vc, *s = m + T, *a = s + T;
    for (int t = 0; t < T; t++) m[t] = -INFINITY, s[t] = 0, a[t] = 0;
    size_t rowb = dtype_row_bytes(wdt, (size_t)C);
    for (int v0 = 0; v0 < V; v0 += vc) {
        int nb = V - v0 < vc ? V - v0 : vc;
        const void *wc = (const char *)w_lm + (size_t)v0 * rowb;
        matmul_forward_dt(z, hidden, wc, wdt, NULL, T, C, nb, cap > 0 ? 1.0f : inv_t, 0.0f);
        if (cap > 0) cap_chunk(z, (size_t)T * nb, cap, inv_t);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            float *zr = z + (size_t)t * nb, bm = row_max(zr, nb), mn = bm > m[t] ? bm : m[t];
            float corr = expf(m[t] - mn), bs, ba;
            int tj = targets[t] - v0;
            if (tj >= 0 && tj < nb) logp[t] = zr[tj];  // target logit, finished below
            if (cap > 0) {  // e (1 - tanh^2), tanh from the capped z before it is overwritten
                bs = ba = 0;
                for (int j = 0; j < nb; j++) {
                    float th = zr[j] * k, e = expf(zr[j] - mn);
                    bs += e;
                    ba += e * zr[j];
                    zr[j] = e * (1.0f - th * th);
                }
            } else {
                bs = exp_sums(zr, zr, nb, mn, &ba);  // zr becomes exp(z - mn)
            }
            s[t] = s[t] * corr + bs;
            if (entropy) a[t] = a[t] * corr + ba;
            m[t] = mn;
            if (v0 > 0 && corr != 1.0f) {  // the row's share so far, against the new max
                float *e = expect + (size_t)t * C;
#pragma omp simd
                for (int c = 0; c < C; c++) e[c] *= corr;
            }
        }
        // expect += exp(z - m) W: the dx form of the head's product
        matmul_backward_dt(expect, NULL, NULL, z, NULL, wc, wdt, T, C, nb, 1.0f, v0 == 0 ? 0.0f : 1.0f);
    }
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float l = m[t] + logf(s[t]), sc = inv_t / s[t], *e = expect + (size_t)t * C;
        if (lse) lse[t] = l;
        if (entropy) entropy[t] = l - a[t] / s[t];
        logp[t] -= l;
#pragma omp simd
        for (int c = 0; c < C; c++) e[c] *= sc;
    }
    return 0;
}

int logprob_forward_expect(float *logp, float *entropy, float *lse, float *expect,
                           const float *hidden, const float *w_lm, const int *targets, int T,
                           int C, int V, float temperature, float *ws, size_t ws_floats,
                           PailErr *err) {
    return logprob_forward_expect_dt(logp, entropy, lse, expect, hidden, w_lm, DT_F32, targets,
                                     T, C, V, temperature, ws, ws_floats, err);
}

// A stored-dtype head's target row is converted EXP_CHUNK floats at a time on
// the thread's stack: the same products as on the fp32 row.
void logprob_backward_expect_dt(float *dhidden, const float *dlogp, const float *expect,
                                const void *w_lm, DType wdt, const int *targets, int T, int C,
                                float temperature) {
    logprob_backward_expect_cap_dt(dhidden, dlogp, expect, w_lm, wdt, targets, T, C, temperature, 0.0f, NULL);
}

// cap > 0: dhidden = dlogp ((1 - tanh_t^2) W_t / temperature - expect), tanh_t = tanh(hidden_t . W_t / cap)
// recomputed here (one dot of C a row).
void logprob_backward_expect_cap_dt(float *dhidden, const float *dlogp, const float *expect,
                                    const void *w_lm, DType wdt, const int *targets, int T, int C,
                                    float temperature, float cap, const float *hidden) {
    float inv_t = 1.0f / temperature;
    DtCvtFn cvt = dtype_to_f32_fn(wdt, dtype_isa_id());
    size_t rowb = dtype_row_bytes(wdt, (size_t)C);  // c0 below: multiples of EXP_CHUNK, so of any block
    if (cap > 0) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            const char *row = (const char *)w_lm + (size_t)targets[t] * rowb;
            const float *e = expect + (size_t)t * C, *h = hidden + (size_t)t * C;
            float *d = dhidden + (size_t)t * C, g = dlogp[t], x = 0;
            for (int c0 = 0; c0 < C; c0 += EXP_CHUNK) {  // x = h . W_t
                int cnt = C - c0 < EXP_CHUNK ? C - c0 : EXP_CHUNK;
                float wb[EXP_CHUNK];
                if (cvt) cvt(wb, row + dtype_row_bytes(wdt, (size_t)c0), cnt);
                else memcpy(wb, row + dtype_row_bytes(wdt, (size_t)c0), sizeof(float) * cnt);
                for (int c = 0; c < cnt; c++) x += h[c0 + c] * wb[c];
            }
            float th = tanhf(x / cap), gt = (1.0f - th * th) * inv_t;
            for (int c0 = 0; c0 < C; c0 += EXP_CHUNK) {
                int cnt = C - c0 < EXP_CHUNK ? C - c0 : EXP_CHUNK;
                float wb[EXP_CHUNK];
                if (cvt) cvt(wb, row + dtype_row_bytes(wdt, (size_t)c0), cnt);
                else memcpy(wb, row + dtype_row_bytes(wdt, (size_t)c0), sizeof(float) * cnt);
                for (int c = 0; c < cnt; c++) d[c0 + c] = g * (wb[c] * gt - e[c0 + c]);
            }
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        const float *w = (const float *)w_lm + (size_t)targets[t] * C, *e = expect + (size_t)t * C;
        float g = dlogp[t], *d = dhidden + (size_t)t * C;
        if (!cvt) {
#pragma omp simd
            for (int c = 0; c < C; c++) d[c] = g * (w[c] * inv_t - e[c]);
            continue;
        }
        const char *row = (const char *)w_lm + (size_t)targets[t] * rowb;
        for (int c0 = 0; c0 < C; c0 += EXP_CHUNK) {
            int cnt = C - c0 < EXP_CHUNK ? C - c0 : EXP_CHUNK;
            float wb[EXP_CHUNK];
            cvt(wb, row + dtype_row_bytes(wdt, (size_t)c0), cnt);
#pragma omp simd
            for (int c = 0; c < cnt; c++) d[c0 + c] = g * (wb[c] * inv_t - e[c0 + c]);
        }
    }
}

void logprob_backward_expect(float *dhidden, const float *dlogp, const float *expect,
                             const float *w_lm, const int *targets, int T, int C,
                             float temperature) {
    logprob_backward_expect_dt(dhidden, dlogp, expect, w_lm, DT_F32, targets, T, C, temperature);
}

// References: the full (V) logit row per token in double, then textbook log-softmax.
int logprob_forward_ref(float *logp, float *entropy, float *lse, const float *hidden,
                        const float *w_lm, const int *targets, int T, int C, int V,
                        float temperature, PailErr *err) {
    return logprob_forward_ref_cap(logp, entropy, lse, hidden, w_lm, targets, T, C, V, temperature, 0.0f, err);
}

// cap > 0: the logit cap tanh(x / cap) before the temperature, in double.
static inline double ref_capz(double x, double cap) { return cap > 0 ? cap * tanh(x / cap) : x; }

int logprob_forward_ref_cap(float *logp, float *entropy, float *lse, const float *hidden,
                            const float *w_lm, const int *targets, int T, int C, int V,
                            float temperature, float cap, PailErr *err) {
    if (targets_check(targets, T, V, temperature, 1, err)) return -1;
    double *zr = malloc(sizeof(double) * V);
    for (int t = 0; t < T; t++) {
        double mx = -INFINITY, sum = 0, ent = 0;
        for (int j = 0; j < V; j++) {
            double d = 0;
            for (int c = 0; c < C; c++) d += (double)hidden[(size_t)t * C + c] * w_lm[(size_t)j * C + c];
            zr[j] = ref_capz(d, cap) / temperature;
            if (zr[j] > mx) mx = zr[j];
        }
        for (int j = 0; j < V; j++) sum += exp(zr[j] - mx);
        double l = mx + log(sum);
        for (int j = 0; j < V; j++) ent -= exp(zr[j] - l) * (zr[j] - l);
        logp[t] = (float)(zr[targets[t]] - l);
        if (lse) lse[t] = (float)l;
        if (entropy) entropy[t] = (float)ent;
    }
    free(zr);
    return 0;
}

void logprob_backward_ref(float *dhidden, float *dw_lm, const float *dlogp,
                          const float *dentropy, const float *hidden, const float *w_lm,
                          const int *targets, int T, int C, int V, float temperature) {
    logprob_backward_ref_cap(dhidden, dw_lm, dlogp, dentropy, hidden, w_lm, targets, T, C, V, temperature, 0.0f);
}

// cap > 0: dz through the cap's derivative 1 - tanh(x / cap)^2, x recomputed in double.
void logprob_backward_ref_cap(float *dhidden, float *dw_lm, const float *dlogp,
                              const float *dentropy, const float *hidden, const float *w_lm,
                              const int *targets, int T, int C, int V, float temperature, float cap) {
    double *zr = malloc(sizeof(double) * V), *dh = malloc(sizeof(double) * C), *xr = malloc(sizeof(double) * V);
    for (int t = 0; t < T; t++) {
        const float *h = hidden + (size_t)t * C;
        double mx = -INFINITY, sum = 0, ent = 0;
        for (int j = 0; j < V; j++) {
            double d = 0;
            for (int c = 0; c < C; c++) d += (double)h[c] * w_lm[(size_t)j * C + c];
            xr[j] = d;
            zr[j] = ref_capz(d, cap) / temperature;
            if (zr[j] > mx) mx = zr[j];
        }
        for (int j = 0; j < V; j++) sum += exp(zr[j] - mx);
        double l = mx + log(sum);
        for (int j = 0; j < V; j++) ent -= exp(zr[j] - l) * (zr[j] - l);
        for (int c = 0; c < C; c++) dh[c] = 0;
        for (int j = 0; j < V; j++) {
            double p = exp(zr[j] - l);
            double dz = dlogp[t] * ((j == targets[t]) - p);
            if (dentropy) dz -= dentropy[t] * p * ((zr[j] - l) + ent);
            dz /= temperature;
            if (cap > 0) dz *= 1 - pow(tanh(xr[j] / cap), 2);
            for (int c = 0; c < C; c++) {
                dh[c] += dz * w_lm[(size_t)j * C + c];
                if (dw_lm) dw_lm[(size_t)j * C + c] += (float)(dz * h[c]);
            }
        }
        for (int c = 0; c < C; c++) dhidden[(size_t)t * C + c] = (float)dh[c];
    }
    free(zr);
    free(dh);
    free(xr);
}
