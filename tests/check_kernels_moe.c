// Check suite for the mixture-of-experts kernels (kernels/moe.c): the
// references against hand-computed routings (ties to the lower expert, both
// weight modes), groupings and combines; the fast paths against the references
// on random sizes at one and two threads (the choices and the grouping exactly,
// the floats within a few ulp, and the same bits at either team size); the
// backwards against central differences of a double-precision forward; and the
// CPU and sim backends' ops against the direct calls, sizes refused included.
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "core/rng.h"
#include "kernels.h"

static Rng rng;

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform_f(&rng);
    return p;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n, double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            ck_abort_msg("%s: element %zu is %.9g, reference %.9g (|diff| %.3g > %.3g)", what, i, got[i], want[i], d,
                         atol + rtol * fabs(want[i]));
    }
}

static void expect_ints(const char *what, const int *got, const int *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "%s: element %zu is %d, expected %d", what, i, got[i], want[i]);
}

// ---- the references by hand ----

typedef void (*RouteFn)(int *, float *, const float *, int, int, int, int);
typedef void (*GroupFn)(int *, int *, int *, const int *, int, int, int);
typedef void (*CombineFn)(float *, const float *, const float *, const int *, int, int, int, float);

// E = 4, K = 2: ties broken to the lower expert, and the two weight modes.
enum { HT = 6,
       HE = 4,
       HK = 2 };
static const float hand_l[HT * HE] = {1, 3, 3, 0, 2, -1, 2, 2, 5, 4, 3, 2, -1, -1, -1, -1, 0, 1, 2, 3, 0, 2, 1, 2};
static const int hand_idx[HT * HK] = {1, 2, 0, 2, 0, 1, 0, 1, 3, 2, 1, 3};

static void check_route_hand(RouteFn route, const char *name) {
    int idx[HT * HK];
    float w[HT * HK];
    for (int norm = 0; norm < 2; norm++) {
        route(idx, w, hand_l, HT, HE, HK, norm);
        expect_ints(name, idx, hand_idx, HT * HK);
        float want[HT * HK];
        for (int t = 0; t < HT; t++) {
            const float *l = hand_l + t * HE;
            double s = 0, m = l[hand_idx[t * HK]];
            for (int e = 0; e < HE; e++) s += norm ? 0 : exp(l[e] - m);
            for (int k = 0; k < HK && norm; k++) s += exp(l[hand_idx[t * HK + k]] - m);
            for (int k = 0; k < HK; k++) want[t * HK + k] = (float)(exp(l[hand_idx[t * HK + k]] - m) / s);
        }
        expect_close(name, w, want, HT * HK, 1e-7, 1e-6);
        // the chosen weights: all of the softmax's mass under norm 1, not under norm 0
        ck_assert_msg(fabsf(w[0] + w[1] - 1.0f) < 1e-6f ? norm == 1 : norm == 0, "%s: norm %d: row 0's weights sum to %g",
                      name, norm, w[0] + w[1]);
    }
    ck_assert_float_eq_tol(w[6], 0.5f, 1e-7f);  // four equal logits: the first two, half each
    // K = E sorts the whole row (stably), K = 1 takes the first maximum
    int all[HE], one[HT];
    float wall[HE], wone[HT];
    route(all, wall, hand_l + 4, 1, HE, HE, 1);
    expect_ints(name, all, (const int[]){0, 2, 3, 1}, HE);
    route(one, wone, hand_l, HT, HE, 1, 1);
    expect_ints(name, one, (const int[]){1, 0, 0, 0, 3, 1}, HT);
    for (int t = 0; t < HT; t++) ck_assert_float_eq(wone[t], 1.0f);
}

START_TEST(test_route_hand) {
    check_route_hand(moe_route_forward_ref, "moe_route_forward_ref");
    check_route_hand(moe_route_forward, "moe_route_forward");
}
END_TEST

// T = 3, K = 2, E = 4 (expert 0 once, 1 three times, 2 and 3 once).
static void check_group_hand(GroupFn group, const char *name) {
    const int idx[6] = {1, 2, 0, 1, 1, 3};
    int tok[6], pos[6], offs[5];
    group(tok, pos, offs, idx, 3, 2, 4);
    expect_ints(name, offs, (const int[]){0, 1, 4, 5, 6}, 5);
    expect_ints(name, tok, (const int[]){1, 0, 1, 2, 0, 2}, 6);
    expect_ints(name, pos, (const int[]){1, 4, 0, 2, 3, 5}, 6);
}

START_TEST(test_group_hand) {
    check_group_hand(moe_group_ref, "moe_group_ref");
    check_group_hand(moe_group, "moe_group");
}
END_TEST

// T = 2, K = 2, C = 3: y = beta y + w0 h[pos0] + w1 h[pos1], and with w NULL.
static void check_combine_hand(CombineFn combine, const char *name) {
    const float h[4 * 3] = {1, 2, 3, 10, 20, 30, 100, 200, 300, -1, -2, -3};
    const float w[4] = {0.5f, 0.25f, 2, 1};
    const int pos[4] = {2, 0, 1, 3};
    float y[6] = {1, 1, 1, 2, 2, 2};
    combine(y, h, w, pos, 2, 2, 3, 0.5f);
    expect_close(name, y, (const float[]){50.75f, 101.0f, 151.25f, 20, 39, 58}, 6, 0, 1e-7);
    for (int i = 0; i < 6; i++) y[i] = NAN;  // beta 0 never reads y
    combine(y, h, NULL, pos, 2, 2, 3, 0);
    expect_close(name, y, (const float[]){101, 202, 303, 9, 18, 27}, 6, 0, 0);
}

START_TEST(test_combine_hand) {
    check_combine_hand(moe_combine_forward_ref, "moe_combine_forward_ref");
    check_combine_hand(moe_combine_forward, "moe_combine_forward");
}
END_TEST

// ---- the fast paths against the references ----

static const int Es[] = {4, 8, 60, 128}, Ks[] = {1, 2, 8}, Cs[] = {8, 37, 64};

// Logits (T,E) in [-3, 3]; every third row on a grid of quarters, so that ties are common.
static float *logits_ties(int T, int E) {
    float *l = rnd((size_t)T * E, -3, 3);
    for (int t = 0; t < T; t += 3)
        for (int e = 0; e < E; e++) l[(size_t)t * E + e] = roundf(l[(size_t)t * E + e] * 4) / 4;
    return l;
}

typedef struct {
    int *idx, *tok, *pos, *offs;
    float *w, *dl, *y, *dh, *dw, *ys, *ds, *dg;
} Outs;

static Outs outs_alloc(int T, int E, int K, int C) {
    size_t n = (size_t)T * K;
    Outs o = {malloc(4 * n), malloc(4 * n), malloc(4 * n), malloc(4 * (E + 1)), malloc(4 * n),
              malloc(4 * (size_t)T * E), malloc(4 * (size_t)T * C), malloc(4 * n * C), malloc(4 * n),
              malloc(4 * (size_t)T * C), malloc(4 * (size_t)T * C), malloc(4 * (size_t)T)};
    return o;
}
static void outs_free(Outs *o) {
    void *p[] = {o->idx, o->tok, o->pos, o->offs, o->w, o->dl, o->y, o->dh, o->dw, o->ys, o->ds, o->dg};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

typedef struct {
    int T, E, K, C, norm;
    float *l, *dw, *h, *y0, *dy, *g, *s;
} Case;

// Every op of a case, fast or reference; the later ops take the reference's
// idx, w and pos when given (so that the fast ops see the same inputs). y and
// ys start as y0, copied here unless prefilled (by a team's caller, before its
// region: its threads may write nothing shared between the ops).
static void run_case_in(Outs *o, const Case *c, int fast, const Outs *in, int prefilled) {
    int T = c->T, E = c->E, K = c->K, C = c->C;
    (fast ? moe_route_forward : moe_route_forward_ref)(o->idx, o->w, c->l, T, E, K, c->norm);
    const int *idx = in ? in->idx : o->idx;
    const float *w = in ? in->w : o->w;
    (fast ? moe_route_backward : moe_route_backward_ref)(o->dl, c->dw, c->l, idx, w, T, E, K, c->norm);
    (fast ? moe_group : moe_group_ref)(o->tok, o->pos, o->offs, idx, T, K, E);
    const int *pos = in ? in->pos : o->pos;
    if (!prefilled) memcpy(o->y, c->y0, 4 * (size_t)T * C);
    (fast ? moe_combine_forward : moe_combine_forward_ref)(o->y, c->h, w, pos, T, K, C, 0.75f);
    (fast ? moe_combine_backward : moe_combine_backward_ref)(o->dh, o->dw, c->dy, c->h, w, pos, T, K, C);
    if (!prefilled) memcpy(o->ys, c->y0, 4 * (size_t)T * C);
    (fast ? sigmoid_gate_forward : sigmoid_gate_forward_ref)(o->ys, c->g, c->s, T, C, 1.0f);
    (fast ? sigmoid_gate_backward : sigmoid_gate_backward_ref)(o->ds, o->dg, c->dy, c->g, c->s, T, C);
}
static void run_case(Outs *o, const Case *c, int fast, const Outs *in) { run_case_in(o, c, fast, in, 0); }

static void expect_same_bits(const Outs *a, const Outs *b, int T, int E, int K, int C) {
    size_t n = (size_t)T * K, tc = (size_t)T * C;
    ck_assert_msg(!memcmp(a->idx, b->idx, 4 * n) && !memcmp(a->w, b->w, 4 * n) &&
                      !memcmp(a->dl, b->dl, 4 * (size_t)T * E) && !memcmp(a->tok, b->tok, 4 * n) &&
                      !memcmp(a->pos, b->pos, 4 * n) && !memcmp(a->offs, b->offs, 4 * (size_t)(E + 1)) &&
                      !memcmp(a->y, b->y, 4 * tc) && !memcmp(a->dh, b->dh, 4 * n * C) &&
                      !memcmp(a->dw, b->dw, 4 * n) && !memcmp(a->ys, b->ys, 4 * tc) && !memcmp(a->ds, b->ds, 4 * tc) &&
                      !memcmp(a->dg, b->dg, 4 * (size_t)T),
                  "T %d E %d K %d C %d: one and two threads give different bits", T, E, K, C);
}

// Loop index: E, K, C and the weight mode; T random in 1..300.
START_TEST(test_fast_vs_ref) {
    int E = Es[_i % 4], K = Ks[_i / 4 % 3], C = Cs[_i / 12 % 3], norm = _i / 36;
    if (K > E) K = E;
    Case c = {.T = (int)rng_below(&rng, 300) + 1, .E = E, .K = K, .C = C, .norm = norm};
    int T = c.T;
    size_t n = (size_t)T * K;
    c.l = logits_ties(T, E), c.dw = rnd(n, -1, 1), c.h = rnd(n * C, -2, 2), c.y0 = rnd((size_t)T * C, -1, 1);
    c.dy = rnd((size_t)T * C, -1, 1), c.g = rnd(T, -6, 6), c.s = rnd((size_t)T * C, -2, 2);
    Outs ref = outs_alloc(T, E, K, C), f1 = outs_alloc(T, E, K, C), f2 = outs_alloc(T, E, K, C);
    run_case(&ref, &c, 0, NULL);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    run_case(&f1, &c, 1, &ref);
    omp_set_num_threads(2);
    run_case(&f2, &c, 1, &ref);
    omp_set_num_threads(saved);
    char what[96];
    snprintf(what, sizeof what, "T %d E %d K %d C %d norm %d", T, E, K, C, norm);
    expect_ints(what, f1.idx, ref.idx, n);  // the choices exactly: every worker and the trainer route alike
    expect_ints(what, f1.tok, ref.tok, n);
    expect_ints(what, f1.pos, ref.pos, n);
    expect_ints(what, f1.offs, ref.offs, E + 1);
    expect_close(what, f1.w, ref.w, n, 1e-7, 1e-5);  // the vectorised exp: 2 ulp, and another sum order
    expect_close(what, f1.dl, ref.dl, (size_t)T * E, 1e-7, 1e-5);
    expect_close(what, f1.y, ref.y, (size_t)T * C, 1e-5, 1e-5);
    expect_close(what, f1.dh, ref.dh, n * C, 0, 1e-6);
    expect_close(what, f1.dw, ref.dw, n, 1e-5, 1e-5);
    expect_close(what, f1.ys, ref.ys, (size_t)T * C, 1e-6, 1e-6);
    expect_close(what, f1.ds, ref.ds, (size_t)T * C, 1e-7, 1e-6);
    expect_close(what, f1.dg, ref.dg, T, 1e-6, 1e-5);
    expect_same_bits(&f1, &f2, T, E, K, C);
    outs_free(&ref), outs_free(&f1), outs_free(&f2);
    free(c.l), free(c.dw), free(c.h), free(c.y0), free(c.dy), free(c.g), free(c.s);
}
END_TEST

// Every thread of a caller's parallel region issuing the same ops (the CPU
// backend's team_ops, kernels/parallel.h): each op shares its work on that team
// and its outputs are whole after it, the same bits as called alone.
START_TEST(test_team_ops) {
    Case c = {.T = 97, .E = 60, .K = 8, .C = 37, .norm = 0};
    int T = c.T, E = c.E, K = c.K, C = c.C;
    size_t n = (size_t)T * K;
    c.l = logits_ties(T, E), c.dw = rnd(n, -1, 1), c.h = rnd(n * C, -2, 2), c.y0 = rnd((size_t)T * C, -1, 1);
    c.dy = rnd((size_t)T * C, -1, 1), c.g = rnd(T, -6, 6), c.s = rnd((size_t)T * C, -2, 2);
    Outs alone = outs_alloc(T, E, K, C), team = outs_alloc(T, E, K, C);
    for (c.norm = 0; c.norm < 2; c.norm++) {
        run_case(&alone, &c, 1, NULL);
        memcpy(team.y, c.y0, 4 * (size_t)T * C);
        memcpy(team.ys, c.y0, 4 * (size_t)T * C);
#pragma omp parallel num_threads(2)
        run_case_in(&team, &c, 1, NULL, 1);
        expect_same_bits(&team, &alone, T, E, K, C);
    }
    outs_free(&alone), outs_free(&team);
    free(c.l), free(c.dw), free(c.h), free(c.y0), free(c.dy), free(c.g), free(c.s);
}
END_TEST

// ---- gradients: central differences of a double forward ----

// The chosen weights of one row in double (idx fixed: the choice has no gradient).
static void route_w_double(double *w, const double *l, const int *idx, int E, int K, int norm) {
    double m = l[idx[0]], s = 0;
    for (int e = 0; e < E && !norm; e++) s += exp(l[e] - m);
    for (int k = 0; k < K && norm; k++) s += exp(l[idx[k]] - m);
    for (int k = 0; k < K; k++) w[k] = exp(l[idx[k]] - m) / s;
}

START_TEST(test_route_grad) {
    enum { T = 5,
           E = 12,
           K = 3 };
    const double eps = 1e-5;
    for (int norm = 0; norm < 2; norm++) {
        float *l = rnd(T * E, -2, 2), *dw = rnd(T * K, -1, 1), w[T * K], dl[T * E], dlr[T * E];
        int idx[T * K];
        moe_route_forward(idx, w, l, T, E, K, norm);
        moe_route_backward(dl, dw, l, idx, w, T, E, K, norm);
        moe_route_backward_ref(dlr, dw, l, idx, w, T, E, K, norm);
        for (int t = 0; t < T; t++) {
            double ld[E], wp[K], wm[K];
            for (int e = 0; e < E; e++) ld[e] = l[t * E + e];
            route_w_double(wp, ld, idx + t * K, E, K, norm);
            expect_close("moe_route_forward against the double forward", w + t * K, (float[]){wp[0], wp[1], wp[2]}, K,
                         1e-7, 1e-6);
            for (int j = 0; j < E; j++) {  // d/dl_j of sum_k dw_k w_k
                ld[j] += eps;
                route_w_double(wp, ld, idx + t * K, E, K, norm);
                ld[j] -= 2 * eps;
                route_w_double(wm, ld, idx + t * K, E, K, norm);
                ld[j] += eps;
                double g = 0;
                for (int k = 0; k < K; k++) g += dw[t * K + k] * (wp[k] - wm[k]) / (2 * eps);
                float gf = (float)g;
                expect_close(norm ? "moe_route_backward (norm 1)" : "moe_route_backward (norm 0)", dl + t * E + j, &gf,
                             1, 1e-6, 1e-4);
                expect_close("moe_route_backward_ref", dlr + t * E + j, &gf, 1, 1e-6, 1e-4);
            }
        }
        free(l), free(dw);
    }
}
END_TEST

// L = sum dy . y, y = sum_k w h[pos] (+ beta y, no gradient to h or w): linear,
// so the differences are exact but for rounding.
START_TEST(test_combine_grad) {
    enum { T = 4,
           K = 2,
           C = 9 };
    const int pos[T * K] = {3, 0, 7, 1, 2, 5, 6, 4};
    float *h = rnd(T * K * C, -2, 2), *w = rnd(T * K, 0, 1), *dy = rnd(T * C, -1, 1);
    float dh[T * K * C], dw[T * K], dhr[T * K * C], dwr[T * K];
    moe_combine_backward(dh, dw, dy, h, w, pos, T, K, C);
    moe_combine_backward_ref(dhr, dwr, dy, h, w, pos, T, K, C);
    const double eps = 1e-3;
    double hd[T * K * C], wd[T * K];
    for (int i = 0; i < T * K * C; i++) hd[i] = h[i];
    for (int i = 0; i < T * K; i++) wd[i] = w[i];
#define LOSS(out)                                                                                              \
    do {                                                                                                       \
        out = 0;                                                                                               \
        for (int t = 0; t < T; t++)                                                                            \
            for (int k = 0; k < K; k++)                                                                        \
                for (int c = 0; c < C; c++) out += dy[t * C + c] * wd[t * K + k] * hd[pos[t * K + k] * C + c]; \
    } while (0)
    for (int i = 0; i < T * K * C; i++) {
        double lp, lm;
        hd[i] += eps;
        LOSS(lp);
        hd[i] -= 2 * eps;
        LOSS(lm);
        hd[i] += eps;
        float g = (float)((lp - lm) / (2 * eps));
        expect_close("moe_combine_backward dh", dh + i, &g, 1, 1e-6, 1e-5);
        expect_close("moe_combine_backward_ref dh", dhr + i, &g, 1, 1e-6, 1e-5);
    }
    for (int i = 0; i < T * K; i++) {
        double lp, lm;
        wd[i] += eps;
        LOSS(lp);
        wd[i] -= 2 * eps;
        LOSS(lm);
        wd[i] += eps;
        float g = (float)((lp - lm) / (2 * eps));
        expect_close("moe_combine_backward dw", dw + i, &g, 1, 1e-6, 1e-5);
        expect_close("moe_combine_backward_ref dw", dwr + i, &g, 1, 1e-6, 1e-5);
    }
#undef LOSS
    free(h), free(w), free(dy);
}
END_TEST

START_TEST(test_sigmoid_gate_grad) {
    enum { T = 5,
           C = 11 };
    float *g = rnd(T, -4, 4), *s = rnd(T * C, -2, 2), *dy = rnd(T * C, -1, 1), ds[T * C], dg[T], dsr[T * C], dgr[T];
    sigmoid_gate_backward(ds, dg, dy, g, s, T, C);
    sigmoid_gate_backward_ref(dsr, dgr, dy, g, s, T, C);
    const double eps = 1e-5;
    for (int t = 0; t < T; t++) {
        double lp = 0, lm = 0, a = 1 / (1 + exp(-(double)g[t])), sp = 1 / (1 + exp(-(g[t] + eps))),
               sm = 1 / (1 + exp(-(g[t] - eps)));
        for (int c = 0; c < C; c++) lp += dy[t * C + c] * sp * s[t * C + c], lm += dy[t * C + c] * sm * s[t * C + c];
        float want = (float)((lp - lm) / (2 * eps));
        expect_close("sigmoid_gate_backward dg", dg + t, &want, 1, 1e-6, 1e-4);
        expect_close("sigmoid_gate_backward_ref dg", dgr + t, &want, 1, 1e-6, 1e-4);
        for (int c = 0; c < C; c++) {  // linear in s: d/ds = sigmoid(g) dy
            float d = (float)(a * dy[t * C + c]);
            expect_close("sigmoid_gate_backward ds", ds + t * C + c, &d, 1, 1e-7, 1e-6);
            expect_close("sigmoid_gate_backward_ref ds", dsr + t * C + c, &d, 1, 1e-7, 1e-6);
        }
    }
    // forward: beta y + sigmoid(g) s
    float y[T * C], want[T * C];
    for (int i = 0; i < T * C; i++) y[i] = want[i] = dy[i];
    sigmoid_gate_forward(y, g, s, T, C, 0.5f);
    for (int i = 0; i < T * C; i++) want[i] = (float)(0.5 * want[i] + s[i] / (1 + exp(-(double)g[i / C])));
    expect_close("sigmoid_gate_forward", y, want, T * C, 1e-6, 1e-6);
    free(g), free(s), free(dy);
}
END_TEST

// ---- the backends ----

static void *dev_put(Backend *b, const void *h, size_t bytes) {
    PailErr err = {0};
    void *d = b->ops->alloc(b, bytes ? bytes : 4, &err);
    ck_assert_msg(d, "%s", err.msg);
    if (h) ck_assert_msg(b->ops->to_device(b, d, h, bytes, &err) == 0, "%s", err.msg);
    return d;
}
static void dev_get(Backend *b, void *h, const void *d, size_t bytes) {
    PailErr err = {0};
    ck_assert_msg(b->ops->to_host(b, h, d, bytes, &err) == 0, "%s", err.msg);
}

#define OK(call) ck_assert_msg((call) == 0, "%s: %s", #call, err.msg)

// Every op through a backend (loop index 0: cpu, 1: sim) against the direct calls, bit for bit.
START_TEST(test_backend_ops) {
    Backend *b = backend_cpu();
    PailErr err = {0};
    if (_i == 1) ck_assert_msg(backend_open(&b, "sim", 64 << 20, &err) == 0, "%s", err.msg);
    int T = 37, E = 60, K = 4, C = 40, norm = 0;
    for (int rep = 0; rep < 2; rep++, norm = 1) {
        size_t n = (size_t)T * K, tc = (size_t)T * C;
        Case c = {.T = T, .E = E, .K = K, .C = C, .norm = norm};
        c.l = logits_ties(T, E), c.dw = rnd(n, -1, 1), c.h = rnd(n * C, -2, 2), c.y0 = rnd(tc, -1, 1);
        c.dy = rnd(tc, -1, 1), c.g = rnd(T, -6, 6), c.s = rnd(tc, -2, 2);
        Outs want = outs_alloc(T, E, K, C), got = outs_alloc(T, E, K, C);
        run_case(&want, &c, 1, NULL);
        int *idx = dev_put(b, NULL, 4 * n), *tok = dev_put(b, NULL, 4 * n), *pos = dev_put(b, NULL, 4 * n),
            *offs = dev_put(b, NULL, 4 * (E + 1));
        float *l = dev_put(b, c.l, 4 * (size_t)T * E), *dw = dev_put(b, c.dw, 4 * n), *w = dev_put(b, NULL, 4 * n),
              *dl = dev_put(b, NULL, 4 * (size_t)T * E), *h = dev_put(b, c.h, 4 * n * C), *y = dev_put(b, c.y0, 4 * tc),
              *dy = dev_put(b, c.dy, 4 * tc), *dh = dev_put(b, NULL, 4 * n * C), *dwc = dev_put(b, NULL, 4 * n),
              *g = dev_put(b, c.g, 4 * (size_t)T), *s = dev_put(b, c.s, 4 * tc), *ys = dev_put(b, c.y0, 4 * tc),
              *ds = dev_put(b, NULL, 4 * tc), *dg = dev_put(b, NULL, 4 * (size_t)T);
        OK(b->ops->moe_route_forward(b, idx, w, l, T, E, K, norm, &err));
        OK(b->ops->moe_route_backward(b, dl, dw, l, idx, w, T, E, K, norm, &err));
        OK(b->ops->moe_group(b, tok, pos, offs, idx, T, K, E, &err));
        OK(b->ops->moe_combine_forward(b, y, h, w, pos, T, K, C, 0.75f, &err));
        OK(b->ops->moe_combine_backward(b, dh, dwc, dy, h, w, pos, T, K, C, &err));
        OK(b->ops->sigmoid_gate_forward(b, ys, g, s, T, C, 1.0f, &err));
        OK(b->ops->sigmoid_gate_backward(b, ds, dg, dy, g, s, T, C, &err));
        dev_get(b, got.idx, idx, 4 * n), dev_get(b, got.w, w, 4 * n), dev_get(b, got.dl, dl, 4 * (size_t)T * E);
        dev_get(b, got.tok, tok, 4 * n), dev_get(b, got.pos, pos, 4 * n), dev_get(b, got.offs, offs, 4 * (E + 1));
        dev_get(b, got.y, y, 4 * tc), dev_get(b, got.dh, dh, 4 * n * C), dev_get(b, got.dw, dwc, 4 * n);
        dev_get(b, got.ys, ys, 4 * tc), dev_get(b, got.ds, ds, 4 * tc), dev_get(b, got.dg, dg, 4 * (size_t)T);
        expect_same_bits(&got, &want, T, E, K, C);
        void *p[] = {idx, tok, pos, offs, l, dw, w, dl, h, y, dy, dh, dwc, g, s, ys, ds, dg};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) b->ops->release(b, p[i]);
        outs_free(&want), outs_free(&got);
        free(c.l), free(c.dw), free(c.h), free(c.y0), free(c.dy), free(c.g), free(c.s);
    }
    if (_i == 1) backend_close(b);
}
END_TEST

// Sizes the kernels cannot take: refused at the call (on sim too, before anything is queued).
START_TEST(test_backend_sizes) {
    Backend *b = backend_cpu();
    PailErr err = {0};
    if (_i == 1) ck_assert_msg(backend_open(&b, "sim", 1 << 20, &err) == 0, "%s", err.msg);
    int *ib = dev_put(b, NULL, 4096);
    float *fb = dev_put(b, NULL, 4096);
    const struct {
        int E, K;
        const char *says;
    } bad[] = {{4, 0, "0 experts a token"}, {4, 5, "5 experts a token of 4"}, {600, 2, "600 experts"}, {0, 1, "0 experts"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int E = bad[i].E, K = bad[i].K;
        memset(&err, 0, sizeof err);
        ck_assert_int_eq(b->ops->moe_route_forward(b, ib, fb, fb, 1, E, K, 0, &err), -1);
        ck_assert_msg(strstr(err.msg, "moe_route_forward") && strstr(err.msg, bad[i].says), "%s", err.msg);
        ck_assert_int_eq(b->ops->moe_route_backward(b, fb, fb, fb, ib, fb, 1, E, K, 1, &err), -1);
        ck_assert_int_eq(b->ops->moe_group(b, ib, ib, ib, ib, 1, K, E, &err), -1);
        ck_assert_msg(strstr(err.msg, "moe_group"), "%s", err.msg);
    }
    ck_assert_int_eq(b->ops->moe_combine_forward(b, fb, fb, fb, ib, 1, 0, 4, 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "moe_combine_forward: 0 experts a token"), "%s", err.msg);
    ck_assert_int_eq(b->ops->moe_combine_backward(b, fb, fb, fb, fb, fb, ib, 1, 513, 4, &err), -1);
    ck_assert_msg(strstr(err.msg, "moe_combine_backward: 513"), "%s", err.msg);
    // the limits themselves are fine: E = MOE_MAX_EXPERTS, K = E; T = 0 does nothing
    float *l = rnd(MOE_MAX_EXPERTS, -1, 1), w[MOE_MAX_EXPERTS];
    int idx[MOE_MAX_EXPERTS], seen[MOE_MAX_EXPERTS] = {0};
    float *dl = dev_put(b, l, 4 * MOE_MAX_EXPERTS), *dw = dev_put(b, NULL, 4 * MOE_MAX_EXPERTS);
    int *di = dev_put(b, NULL, 4 * MOE_MAX_EXPERTS);
    OK(b->ops->moe_route_forward(b, di, dw, dl, 1, MOE_MAX_EXPERTS, MOE_MAX_EXPERTS, 1, &err));
    OK(b->ops->moe_route_forward(b, ib, fb, fb, 0, 4, 2, 0, &err));
    dev_get(b, idx, di, sizeof idx), dev_get(b, w, dw, sizeof w);
    double sum = 0;
    for (int k = 0; k < MOE_MAX_EXPERTS; k++) {
        ck_assert(idx[k] >= 0 && idx[k] < MOE_MAX_EXPERTS && !seen[idx[k]]);
        seen[idx[k]] = 1, sum += w[k];
        if (k) ck_assert(l[idx[k]] <= l[idx[k - 1]]);
    }
    ck_assert_msg(fabs(sum - 1) < 1e-5, "the weights of all 512 sum to %g", sum);
    void *p[] = {ib, fb, dl, dw, di};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) b->ops->release(b, p[i]);
    free(l);
    if (_i == 1) backend_close(b);
}
END_TEST

int main(void) {
    rng_seed(&rng, 48, 0);
    Suite *s = suite_create("kernels_moe");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_route_hand);
    tcase_add_test(core, test_group_hand);
    tcase_add_test(core, test_combine_hand);
    tcase_add_loop_test(core, test_fast_vs_ref, 0, 72);
    tcase_add_test(core, test_team_ops);
    tcase_add_test(core, test_route_grad);
    tcase_add_test(core, test_combine_grad);
    tcase_add_test(core, test_sigmoid_gate_grad);
    tcase_add_loop_test(core, test_backend_ops, 0, 2);
    tcase_add_loop_test(limits, test_backend_sizes, 0, 2);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
