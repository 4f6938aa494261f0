// Check suite for kernels/ backward passes: each fast backward against central
// finite differences of an independent double-precision forward written here
// (loss = sum(g * op(inputs)) for a random g). Fast-vs-reference: check_kernels.c.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "kernels.h"

static Rng rng;

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform_f(&rng);
    return p;
}

static double *to_d(const float *a, size_t n) {
    double *p = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = a[i];
    return p;
}

typedef double (*LossFn)(void *ctx);

// Central differences in double: truncation O(h^2) ~ 1e-10 and rounding
// ~1e-16/h ~ 1e-11, so the budget (1e-4 abs + rel) is the fp32 backward's own
// rounding (~1e-6 relative) with margin; a wrong term is off by O(0.01..1).
static void fd_check(const char *what, const float *grad, double *x, size_t n, LossFn f,
                     void *ctx, double sign) {
    for (size_t i = 0; i < n; i++) {
        double save = x[i], h = 1e-5 * (1 + fabs(save));
        x[i] = save + h;
        double lp = f(ctx);
        x[i] = save - h;
        double lm = f(ctx);
        x[i] = save;
        double num = sign * (lp - lm) / (2 * h);
        ck_assert_msg(fabs(grad[i] - num) <= 1e-4 * (1 + fabs(num)),
                      "%s: element %zu backward %.9g, finite difference %.9g", what, i, grad[i], num);
    }
}

// ---- matmul ----
typedef struct { int T, K, N; double *x, *W, *b, *g; } MatmulCtx;
static double matmul_loss(void *p) {
    MatmulCtx *c = p;
    double L = 0;
    for (int t = 0; t < c->T; t++)
        for (int n = 0; n < c->N; n++) {
            double y = c->b[n];
            for (int k = 0; k < c->K; k++) y += c->x[t * c->K + k] * c->W[n * c->K + k];
            L += c->g[t * c->N + n] * y;
        }
    return L;
}

START_TEST(test_matmul_grad) {
    int shapes[][3] = {{1, 9, 5}, {4, 7, 3}, {12, 5, 6}};  // small-T and sgemm paths
    for (int s = 0; s < 3; s++) {
        int T = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *x = rnd(T * K, -1, 1), *W = rnd(N * K, -1, 1), *b = rnd(N, -1, 1), *g = rnd(T * N, -1, 1);
        float *dx = rnd(T * K, 0, 1), *dW = calloc(N * K, 4), *db = calloc(N, 4);
        matmul_backward(dx, dW, db, g, x, W, T, K, N, 1.0f, 0.0f);
        MatmulCtx c = {T, K, N, to_d(x, T * K), to_d(W, N * K), to_d(b, N), to_d(g, T * N)};
        fd_check("matmul dx", dx, c.x, T * K, matmul_loss, &c, 1);
        fd_check("matmul dW", dW, c.W, N * K, matmul_loss, &c, 1);
        fd_check("matmul dbias", db, c.b, N, matmul_loss, &c, 1);
        free(x), free(W), free(b), free(g), free(dx), free(dW), free(db);
        free(c.x), free(c.W), free(c.b), free(c.g);
    }
}
END_TEST

// ---- rmsnorm ----
typedef struct { int R, C; double eps, *x, *w, *g; } NormCtx;
static double rmsnorm_loss(void *p) {
    NormCtx *c = p;
    double L = 0;
    for (int r = 0; r < c->R; r++) {
        double ss = 0;
        for (int i = 0; i < c->C; i++) ss += c->x[r * c->C + i] * c->x[r * c->C + i];
        double s = 1 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++) L += c->g[r * c->C + i] * c->x[r * c->C + i] * s * c->w[i];
    }
    return L;
}

START_TEST(test_rmsnorm_grad) {
    int R = 5, C = 13;
    float *x = rnd(R * C, -2, 2), *w = rnd(C, 0.5, 1.5), *g = rnd(R * C, -1, 1);
    float *out = malloc(4 * R * C), *rs = malloc(4 * R), *dx = malloc(4 * R * C), *dw = calloc(C, 4);
    rmsnorm_forward(out, rs, x, w, R, C, 1e-5f);
    rmsnorm_backward(dx, dw, g, x, w, rs, R, C);
    NormCtx c = {R, C, 1e-5, to_d(x, R * C), to_d(w, C), to_d(g, R * C)};
    fd_check("rmsnorm dx", dx, c.x, R * C, rmsnorm_loss, &c, 1);
    fd_check("rmsnorm dw", dw, c.w, C, rmsnorm_loss, &c, 1);
    free(x), free(w), free(g), free(out), free(rs), free(dx), free(dw), free(c.x), free(c.w), free(c.g);
}
END_TEST

// ---- rope: HF's q*cos + rotate_half(q)*sin in double ----
typedef struct { int T, nh, D; const int *pos; const float *ct, *st; double *x, *g; } RopeCtx;
static double rope_loss(void *p) {
    RopeCtx *c = p;
    int half = c->D / 2;
    double L = 0;
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < c->nh; h++) {
            const double *x = c->x + (t * c->nh + h) * c->D, *g = c->g + (t * c->nh + h) * c->D;
            for (int d = 0; d < c->D; d++) {
                double cs = c->ct[c->pos[t] * half + d % half], sn = c->st[c->pos[t] * half + d % half];
                double rot = d < half ? -x[d + half] : x[d - half];
                L += g[d] * (x[d] * cs + rot * sn);
            }
        }
    return L;
}

START_TEST(test_rope_grad) {
    int T = 4, nh = 3, D = 6, P = 20, pos[4] = {0, 7, 19, 3};
    float inv[3], ct[60], st[60];
    RopeScaling sc = {4.0f, 1.0f, 4.0f, 16};
    rope_inv_freq(inv, D, 10000.0f, &sc);
    rope_table_build(ct, st, inv, P, D);
    float *g = rnd(T * nh * D, -1, 1), *x = rnd(T * nh * D, -1, 1), *dx = malloc(4 * T * nh * D);
    rope_backward(dx, g, pos, ct, st, T, nh, D);
    RopeCtx c = {T, nh, D, pos, ct, st, to_d(x, T * nh * D), to_d(g, T * nh * D)};
    fd_check("rope dx", dx, c.x, T * nh * D, rope_loss, &c, 1);
    free(g), free(x), free(dx), free(c.x), free(c.g);
}
END_TEST

// ---- layernorm (cohere): (x - mean) / sqrt(var + eps) * w, weight row r % WR ----
typedef struct { int R, C, WR; double eps, *x, *w, *g; } LnCtx;
static double layernorm_loss(void *p) {
    LnCtx *c = p;
    double L = 0;
    for (int r = 0; r < c->R; r++) {
        const double *x = c->x + r * c->C, *w = c->w + (r % c->WR) * c->C;
        double mu = 0, var = 0;
        for (int i = 0; i < c->C; i++) mu += x[i] / c->C;
        for (int i = 0; i < c->C; i++) var += (x[i] - mu) * (x[i] - mu) / c->C;
        for (int i = 0; i < c->C; i++) L += c->g[r * c->C + i] * (x[i] - mu) / sqrt(var + c->eps) * w[i];
    }
    return L;
}

START_TEST(test_layernorm_grad) {
    int shapes[][3] = {{5, 13, 1}, {6, 8, 3}};  // decoder norm; per-head q/k norm (3 weight rows)
    for (int s = 0; s < 2; s++) {
        int R = shapes[s][0], C = shapes[s][1], WR = shapes[s][2];
        float *x = rnd(R * C, -2, 2), *w = rnd(WR * C, 0.5, 1.5), *g = rnd(R * C, -1, 1);
        float *out = malloc(4 * R * C), *mu = malloc(4 * R), *rs = malloc(4 * R), *dx = malloc(4 * R * C),
              *dw = calloc(WR * C, 4);
        layernorm_forward(out, mu, rs, x, w, R, C, WR, 1e-5f);
        layernorm_backward(dx, dw, g, x, w, mu, rs, R, C, WR);
        LnCtx c = {R, C, WR, 1e-5, to_d(x, R * C), to_d(w, WR * C), to_d(g, R * C)};
        fd_check("layernorm dx", dx, c.x, R * C, layernorm_loss, &c, 1);
        fd_check("layernorm dw", dw, c.w, WR * C, layernorm_loss, &c, 1);
        free(x), free(w), free(g), free(out), free(mu), free(rs), free(dx), free(dw), free(c.x), free(c.w), free(c.g);
    }
}
END_TEST

// ---- rope_interleaved (cohere): pairs (2i, 2i+1), rot = (-x[2i+1], x[2i]), in double ----
static double rope_il_loss(void *p) {
    RopeCtx *c = p;
    int half = c->D / 2;
    double L = 0;
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < c->nh; h++) {
            const double *x = c->x + (t * c->nh + h) * c->D, *g = c->g + (t * c->nh + h) * c->D;
            for (int d = 0; d < c->D; d++) {
                double cs = c->ct[c->pos[t] * half + d / 2], sn = c->st[c->pos[t] * half + d / 2];
                double rot = d % 2 == 0 ? -x[d + 1] : x[d - 1];
                L += g[d] * (x[d] * cs + rot * sn);
            }
        }
    return L;
}

START_TEST(test_rope_interleaved_grad) {
    int T = 4, nh = 3, D = 6, P = 20, pos[4] = {0, 7, 19, 3};
    float inv[3], ct[60], st[60];
    rope_inv_freq(inv, D, 10000.0f, NULL);
    rope_table_build(ct, st, inv, P, D);
    float *g = rnd(T * nh * D, -1, 1), *x = rnd(T * nh * D, -1, 1), *dx = malloc(4 * T * nh * D);
    rope_interleaved_backward(dx, g, pos, ct, st, T, nh, D);
    RopeCtx c = {T, nh, D, pos, ct, st, to_d(x, T * nh * D), to_d(g, T * nh * D)};
    fd_check("rope_interleaved dx", dx, c.x, T * nh * D, rope_il_loss, &c, 1);
    free(g), free(x), free(dx), free(c.x), free(c.g);
}
END_TEST

// ---- attention: packed causal GQA, naive softmax per query in double; W > 0 a sliding window ----
typedef struct { int T, H, Hkv, D, nseq; const int *cu; double *q, *k, *v, *g; int W; } AttnCtx;
static double attention_loss(void *p) {
    AttnCtx *c = p;
    int D = c->D, G = c->H / c->Hkv;
    double L = 0, sc[64];
    for (int s = 0; s < c->nseq; s++)
        for (int i = c->cu[s]; i < c->cu[s + 1]; i++)
            for (int h = 0; h < c->H; h++) {
                const double *qi = c->q + (i * c->H + h) * D;
                int hk = h / G, n = i - c->cu[s] + 1, j0 = c->W > 0 && n > c->W ? n - c->W : 0;
                double m = -INFINITY, z = 0;
                for (int j = j0; j < n; j++) {
                    const double *kj = c->k + ((c->cu[s] + j) * c->Hkv + hk) * D;
                    sc[j] = 0;
                    for (int d = 0; d < D; d++) sc[j] += qi[d] * kj[d] / sqrt((double)D);
                    m = fmax(m, sc[j]);
                }
                for (int j = j0; j < n; j++) z += (sc[j] = exp(sc[j] - m));
                for (int j = j0; j < n; j++) {
                    const double *vj = c->v + ((c->cu[s] + j) * c->Hkv + hk) * D;
                    for (int d = 0; d < D; d++) L += c->g[(i * c->H + h) * D + d] * sc[j] / z * vj[d];
                }
            }
    return L;
}

// _i = 0: full causal; 1: a window of 3 keys (shorter than the 7-token sequence)
START_TEST(test_attention_grad) {
    int cu[4] = {0, 4, 5, 12}, nseq = 3, T = 12, H = 4, Hkv = 2, D = 5, W = _i ? 3 : 0;
    size_t nq = T * H * D, nk = T * Hkv * D;
    float *q = rnd(nq, -1, 1), *k = rnd(nk, -1, 1), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    float *out = malloc(4 * nq), *lse = malloc(4 * T * H);
    float *dq = malloc(4 * nq), *dk = malloc(4 * nk), *dv = malloc(4 * nk);
    attention_forward(out, lse, q, k, v, cu, nseq, T, H, Hkv, D, W);
    attention_backward(dq, dk, dv, g, q, k, v, out, lse, cu, nseq, T, H, Hkv, D, W);
    AttnCtx c = {T, H, Hkv, D, nseq, cu, to_d(q, nq), to_d(k, nk), to_d(v, nk), to_d(g, nq), W};
    fd_check("attention dq", dq, c.q, nq, attention_loss, &c, 1);
    fd_check("attention dk", dk, c.k, nk, attention_loss, &c, 1);
    fd_check("attention dv", dv, c.v, nk, attention_loss, &c, 1);
    free(q), free(k), free(v), free(g), free(out), free(lse), free(dq), free(dk), free(dv);
    free(c.q), free(c.k), free(c.v), free(c.g);
}
END_TEST

// ---- swiglu ----
typedef struct { size_t n; double *a, *u, *g; } GluCtx;
static double swiglu_loss(void *p) {
    GluCtx *c = p;
    double L = 0;
    for (size_t i = 0; i < c->n; i++) L += c->g[i] * c->a[i] / (1 + exp(-c->a[i])) * c->u[i];
    return L;
}

START_TEST(test_swiglu_grad) {
    size_t n = 41;
    float *a = rnd(n, -6, 6), *u = rnd(n, -2, 2), *g = rnd(n, -1, 1), *da = malloc(4 * n), *du = malloc(4 * n);
    swiglu_backward(da, du, g, a, u, n);
    GluCtx c = {n, to_d(a, n), to_d(u, n), to_d(g, n)};
    fd_check("swiglu dgate", da, c.a, n, swiglu_loss, &c, 1);
    fd_check("swiglu dup", du, c.u, n, swiglu_loss, &c, 1);
    free(a), free(u), free(g), free(da), free(du), free(c.a), free(c.u), free(c.g);
}
END_TEST

// ---- geglu: the backward against finite differences of torch's tanh form ----
static double geglu_loss(void *p) {
    GluCtx *c = p;
    double L = 0;
    for (size_t i = 0; i < c->n; i++) {
        double a = c->a[i], t = tanh(sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a));
        L += c->g[i] * 0.5 * a * (1 + t) * c->u[i];
    }
    return L;
}

START_TEST(test_geglu_grad) {
    size_t n = 41;
    float *a = rnd(n, -6, 6), *u = rnd(n, -2, 2), *g = rnd(n, -1, 1), *da = malloc(4 * n), *du = malloc(4 * n);
    geglu_backward(da, du, g, a, u, n);
    GluCtx c = {n, to_d(a, n), to_d(u, n), to_d(g, n)};
    fd_check("geglu dgate", da, c.a, n, geglu_loss, &c, 1);
    fd_check("geglu dup", du, c.u, n, geglu_loss, &c, 1);
    free(a), free(u), free(g), free(da), free(du), free(c.a), free(c.u), free(c.g);
}
END_TEST

// ---- logprob: loss = sum_t a_t logp_t + b_t H_t with a naive log-softmax ----
typedef struct { int T, C, V; double temp; const int *tg; double *h, *W, *a, *b; } LpCtx;
static double logprob_loss(void *p) {
    LpCtx *c = p;
    double L = 0, z[64];
    for (int t = 0; t < c->T; t++) {
        double m = -INFINITY, s = 0, H = 0;
        for (int j = 0; j < c->V; j++) {
            z[j] = 0;
            for (int i = 0; i < c->C; i++) z[j] += c->h[t * c->C + i] * c->W[j * c->C + i];
            z[j] /= c->temp;
            m = fmax(m, z[j]);
        }
        for (int j = 0; j < c->V; j++) s += exp(z[j] - m);
        double lse = m + log(s);
        for (int j = 0; j < c->V; j++) H -= exp(z[j] - lse) * (z[j] - lse);
        L += c->a[t] * (z[c->tg[t]] - lse) + (c->b ? c->b[t] * H : 0);
    }
    return L;
}

START_TEST(test_logprob_grad) {
    int T = 3, C = 6, V = 23, tg[3] = {22, 0, 9}, vchunk = 5;
    float temp = 0.8f;
    float *h = rnd(T * C, -1, 1), *W = rnd(V * C, -1, 1), *a = rnd(T, -1, 1), *b = rnd(T, -1, 1);
    float lp[3], ent[3], lse[3], *ws = malloc(4 * logprob_workspace_floats(T, vchunk));
    float *dh = malloc(4 * T * C), *dW = calloc(V * C, 4);
    PailErr err = {0};
    ck_assert_int_eq(logprob_forward(lp, ent, lse, h, W, tg, T, C, V, temp, ws, vchunk, &err), 0);
    logprob_backward(dh, dW, a, b, h, W, tg, lse, ent, T, C, V, temp, ws, vchunk);
    LpCtx c = {T, C, V, temp, tg, to_d(h, T * C), to_d(W, V * C), to_d(a, T), to_d(b, T)};
    fd_check("logprob dhidden", dh, c.h, T * C, logprob_loss, &c, 1);
    fd_check("logprob dw_lm", dW, c.W, V * C, logprob_loss, &c, 1);
    free(c.b), c.b = NULL;  // logp only
    memset(dW, 0, 4 * V * C);
    logprob_backward(dh, dW, a, NULL, h, W, tg, lse, NULL, T, C, V, temp, ws, vchunk);
    fd_check("logprob dhidden (logp only)", dh, c.h, T * C, logprob_loss, &c, 1);
    fd_check("logprob dw_lm (logp only)", dW, c.W, V * C, logprob_loss, &c, 1);
    free(h), free(W), free(a), free(b), free(ws), free(dh), free(dW), free(c.h), free(c.W), free(c.a);
}
END_TEST

// ---- embedding: loss = sum g * table[tokens] ----
typedef struct { int T, C; const int *tok; double *tab, *g; } EmbCtx;
static double embedding_loss(void *p) {
    EmbCtx *c = p;
    double L = 0;
    for (int t = 0; t < c->T; t++)
        for (int i = 0; i < c->C; i++) L += c->g[t * c->C + i] * c->tab[c->tok[t] * c->C + i];
    return L;
}

START_TEST(test_embedding_grad) {
    int T = 6, C = 5, V = 4, tok[6] = {1, 3, 1, 0, 1, 3};
    float *tab = rnd(V * C, -1, 1), *g = rnd(T * C, -1, 1), *dt = calloc(V * C, 4);
    embedding_backward(dt, g, tok, T, C);
    EmbCtx c = {T, C, tok, to_d(tab, V * C), to_d(g, T * C)};
    fd_check("embedding dtable", dt, c.tab, V * C, embedding_loss, &c, 1);
    free(tab), free(g), free(dt), free(c.tab), free(c.g);
}
END_TEST

int main(void) {
    rng_seed(&rng, 99, 0);
    Suite *s = suite_create("kernels_grad");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_matmul_grad);
    tcase_add_test(core, test_rmsnorm_grad);
    tcase_add_test(core, test_rope_grad);
    tcase_add_loop_test(core, test_attention_grad, 0, 2);
    tcase_add_test(core, test_swiglu_grad);
    tcase_add_test(core, test_layernorm_grad);
    tcase_add_test(core, test_rope_interleaved_grad);
    tcase_add_test(core, test_geglu_grad);
    tcase_add_test(core, test_logprob_grad);
    tcase_add_test(limits, test_embedding_grad);  // repeated tokens: rows collide
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
