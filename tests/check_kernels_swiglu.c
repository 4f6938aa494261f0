// Check suite for gpt_oss's clamped swiglu (kernels/swiglu_clamp.c): the fast
// path against the double reference over values on both sides of the clamps,
// the backward against finite differences of torch's formula away from the
// clamp edges, the gradient's masks beyond and at the limits (torch's clamp
// passes it on the bounds), and the sim device giving the CPU backend's bits.
// The caller's-team case is check_kernels.c's team_ops.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "backend.h"
#include "core/rng.h"
#include "kernels.h"

static Rng rng;
static const float ALPHA = 1.702f, LIMIT = 7.0f;  // gpt_oss's swiglu_alpha, swiglu_limit

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform_f(&rng);
    return p;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n, double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            ck_abort_msg("%s: element %zu is %.9g, reference %.9g (|diff| %.3g)", what, i, got[i], want[i], d);
    }
}

// fp32 expf (simd_exp) vs double exp, a few ulp of outputs up to ~60 in size:
// 1e-6 abs + 1e-5 rel, as check_kernels.c's swiglu. n crosses the 256-value
// chunks with a ragged end; the team, then one thread (the same bits).
START_TEST(test_swiglu_clamp_ref) {
    size_t n = 10007;
    float *g = rnd(n, -12, 12), *u = rnd(n, -12, 12), *d = rnd(n, -1, 1);
    g[0] = LIMIT, u[0] = LIMIT, u[1] = -LIMIT, g[2] = -100, g[3] = 100;
    float *o = malloc(4 * n), *r = malloc(4 * n), *o1 = malloc(4 * n);
    float *dg = malloc(4 * n), *du = malloc(4 * n), *dgr = malloc(4 * n), *dur = malloc(4 * n);
    float *dg1 = malloc(4 * n), *du1 = malloc(4 * n);
    swiglu_clamp_forward(o, g, u, n, ALPHA, LIMIT);
    swiglu_clamp_forward_ref(r, g, u, n, ALPHA, LIMIT);
    expect_close("swiglu_clamp_forward", o, r, n, 1e-6, 1e-5);
    swiglu_clamp_backward(dg, du, d, g, u, n, ALPHA, LIMIT);
    swiglu_clamp_backward_ref(dgr, dur, d, g, u, n, ALPHA, LIMIT);
    expect_close("swiglu_clamp_backward dgate", dg, dgr, n, 1e-6, 1e-5);
    expect_close("swiglu_clamp_backward dup", du, dur, n, 1e-6, 1e-5);
    int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    swiglu_clamp_forward(o1, g, u, n, ALPHA, LIMIT);
    swiglu_clamp_backward(dg1, du1, d, g, u, n, ALPHA, LIMIT);
    omp_set_num_threads(nth);
    ck_assert(memcmp(o, o1, 4 * n) == 0 && memcmp(dg, dg1, 4 * n) == 0 && memcmp(du, du1, 4 * n) == 0);
    for (size_t i = 0; i < n; i++) ck_assert_msg(isfinite(o[i]) && isfinite(dg[i]), "element %zu not finite", i);
    free(g), free(u), free(d), free(o), free(r), free(o1), free(dg), free(du), free(dgr), free(dur), free(dg1);
    free(du1);
}
END_TEST

// torch's _apply_gate in double, for the finite differences.
static double torch_gate(double g, double u) {
    g = fmin(g, LIMIT);
    u = fmax(fmin(u, LIMIT), -LIMIT);
    return (u + 1) * g / (1 + exp(-(double)ALPHA * g));
}

// Central differences of sum(dout * out) in double, each value at least 0.05 from a
// clamp edge (h <= 1.3e-4 never crosses one): 1e-4 abs + rel, check_kernels_grad.c's budget.
START_TEST(test_swiglu_clamp_grad) {
    size_t n = 400;
    float *g = rnd(n, -10, 10), *u = rnd(n, -10, 10), *d = rnd(n, -1, 1), *dg = malloc(4 * n), *du = malloc(4 * n);
    for (size_t i = 0; i < n; i++) {
        if (fabsf(g[i] - LIMIT) < 0.05f) g[i] -= 0.1f;
        if (fabsf(fabsf(u[i]) - LIMIT) < 0.05f) u[i] *= 0.98f;
    }
    swiglu_clamp_backward(dg, du, d, g, u, n, ALPHA, LIMIT);
    int inside = 0, beyond = 0;
    for (size_t i = 0; i < n; i++) {
        double hg = 1e-5 * (1 + fabs(g[i])), hu = 1e-5 * (1 + fabs(u[i]));
        double ng = d[i] * (torch_gate(g[i] + hg, u[i]) - torch_gate(g[i] - hg, u[i])) / (2 * hg);
        double nu = d[i] * (torch_gate(g[i], u[i] + hu) - torch_gate(g[i], u[i] - hu)) / (2 * hu);
        ck_assert_msg(fabs(dg[i] - ng) <= 1e-4 + 1e-4 * fabs(ng), "dgate[%zu] (gate %g, up %g): %.8g, numeric %.8g",
                      i, g[i], u[i], dg[i], ng);
        ck_assert_msg(fabs(du[i] - nu) <= 1e-4 + 1e-4 * fabs(nu), "dup[%zu] (gate %g, up %g): %.8g, numeric %.8g", i,
                      g[i], u[i], du[i], nu);
        inside += g[i] < LIMIT && fabsf(u[i]) < LIMIT;
        beyond += g[i] > LIMIT || fabsf(u[i]) > LIMIT;
    }
    ck_assert_msg(inside > 100 && beyond > 100, "the draw has %d values inside the clamps, %d beyond", inside, beyond);
    free(g), free(u), free(d), free(dg), free(du);
}
END_TEST

// Beyond the limits the output is the limit's and the gradient through the
// clamped input 0 (exactly); on the limits themselves torch's clamp passes it
// (min/max inclusive); far below, the gate's sigmoid is 0 and nothing is NaN.
START_TEST(test_swiglu_clamp_limits) {
    float g[] = {LIMIT + 3, LIMIT, LIMIT, -50, 2.0f, 2.0f, 2.0f, 2.0f, NAN};
    float u[] = {0.5f, 0.5f, LIMIT, 1.0f, LIMIT + 1, -LIMIT - 1, LIMIT, -LIMIT, 1.0f};
    size_t n = sizeof g / sizeof g[0];
    float d[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, o[9], dg[9], du[9], r[9];
    swiglu_clamp_forward(o, g, u, n, ALPHA, LIMIT);
    swiglu_clamp_backward(dg, du, d, g, u, n, ALPHA, LIMIT);
    ck_assert_msg(o[0] == o[1], "gate past the limit: %g, at it %g", o[0], o[1]);
    ck_assert_msg(dg[0] == 0 && dg[1] != 0, "dgate past the limit %g (want 0), at it %g (want nonzero)", dg[0], dg[1]);
    ck_assert_msg(du[2] != 0 && du[6] != 0 && du[7] != 0, "dup on the limits: %g %g %g", du[2], du[6], du[7]);
    ck_assert_msg(du[4] == 0 && du[5] == 0, "dup past the limits: %g %g", du[4], du[5]);
    ck_assert_msg(dg[4] != 0 && dg[5] != 0, "dgate with a clamped up: %g %g", dg[4], dg[5]);
    ck_assert_msg(o[4] == o[6] && dg[4] == dg[6], "up past the limit: %g / %g, at it %g / %g", o[4], dg[4], o[6],
                  dg[6]);
    ck_assert_msg(o[5] == o[7], "up below -limit: %g, at it %g", o[5], o[7]);
    ck_assert_msg(fabsf(o[3]) < 1e-30f && isfinite(dg[3]) && isfinite(du[3]), "gate -50: out %g, dgate %g, dup %g", o[3],
                  dg[3], du[3]);
    ck_assert_msg(isnan(o[8]), "a NaN gate gave %g (torch's clamp keeps NaN)", o[8]);
    swiglu_clamp_forward_ref(r, g, u, n, ALPHA, LIMIT);
    expect_close("swiglu_clamp limits vs reference", o, r, n - 1, 1e-6, 1e-5);
    ck_assert(isnan(r[8]));
}
END_TEST

// The sim device: the CPU backend's bits for both ops.
START_TEST(test_swiglu_clamp_sim) {
    Backend *sim, *cpu = backend_cpu();
    PailErr err = {0};
    ck_assert_msg(backend_open(&sim, "sim", 16 << 20, &err) == 0, "%s", err.msg);
    size_t n = 3001, b = 4 * n;
    float *g = rnd(n, -12, 12), *u = rnd(n, -12, 12), *d = rnd(n, -1, 1), *h = malloc(b);
    float *o = malloc(b), *dg = malloc(b), *du = malloc(b);
    ck_assert_int_eq(cpu->ops->swiglu_clamp_forward(cpu, o, g, u, n, ALPHA, LIMIT, &err), 0);
    ck_assert_int_eq(cpu->ops->swiglu_clamp_backward(cpu, dg, du, d, g, u, n, ALPHA, LIMIT, &err), 0);
    float *G = sim->ops->alloc(sim, b, &err), *U = sim->ops->alloc(sim, b, &err), *Dd = sim->ops->alloc(sim, b, &err);
    float *O = sim->ops->alloc(sim, b, &err), *DG = sim->ops->alloc(sim, b, &err), *DU = sim->ops->alloc(sim, b, &err);
    ck_assert_msg(G && U && Dd && O && DG && DU, "%s", err.msg);
    ck_assert_int_eq(sim->ops->to_device(sim, G, g, b, &err), 0);
    ck_assert_int_eq(sim->ops->to_device(sim, U, u, b, &err), 0);
    ck_assert_int_eq(sim->ops->to_device(sim, Dd, d, b, &err), 0);
    ck_assert_int_eq(sim->ops->swiglu_clamp_forward(sim, O, G, U, n, ALPHA, LIMIT, &err), 0);
    ck_assert_int_eq(sim->ops->swiglu_clamp_backward(sim, DG, DU, Dd, G, U, n, ALPHA, LIMIT, &err), 0);
    ck_assert_int_eq(sim->ops->to_host(sim, h, O, b, &err), 0);
    ck_assert_msg(memcmp(h, o, b) == 0, "sim swiglu_clamp_forward: not the CPU's bits");
    ck_assert_int_eq(sim->ops->to_host(sim, h, DG, b, &err), 0);
    ck_assert_msg(memcmp(h, dg, b) == 0, "sim swiglu_clamp_backward dgate: not the CPU's bits");
    ck_assert_int_eq(sim->ops->to_host(sim, h, DU, b, &err), 0);
    ck_assert_msg(memcmp(h, du, b) == 0, "sim swiglu_clamp_backward dup: not the CPU's bits");
    void *ptrs[] = {G, U, Dd, O, DG, DU};
    for (size_t i = 0; i < 6; i++) sim->ops->release(sim, ptrs[i]);
    free(g), free(u), free(d), free(h), free(o), free(dg), free(du);
    backend_close(sim);
}
END_TEST

int main(void) {
    rng_seed(&rng, 49, 0);
    Suite *s = suite_create("kernels_swiglu");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_swiglu_clamp_ref);
    tcase_add_test(core, test_swiglu_clamp_grad);
    tcase_add_test(core, test_swiglu_clamp_sim);
    tcase_add_test(limits, test_swiglu_clamp_limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
