// bench_kernels_moe: the expert-grouped GEMM of a mixture-of-experts MLP on the
// CPU at a granite-3.1-1b-a400m-like shape (C 1024, Fe 512 an expert, E 32, K 8,
// T 512 tokens, bf16 weights): router + route + group + gather_rows + the
// per-expert matmul_forward_dt products (gate, up, down) + swiglu + combine,
// against one dense product of the same FLOPs (T*K rows through one expert's
// weights), as GFLOP/s of the expert products' FLOPs and their ratio. Validates
// a few tokens against a token-by-token computation first. Not a test.
// Usage: bench_kernels_moe [T]
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "core/threads.h"
#include "kernels.h"
#include "refs.h"

enum { C = 1024,
       FE = 512,
       E = 32,
       K = 8,
       REPS = 5 };

typedef struct {
    int T;
    float *x, *wr, *logits, *w, *xg, *g, *u, *a, *h, *y;  // x (T,C), wr (E,C), xg (TK,C), g u a (TK,FE), h (TK,C)
    int *idx, *tok, *pos, offs[E + 1];
    uint16_t *wgu, *wd;  // bf16: (E*2FE, C): expert e's gate rows e*2FE.., up rows e*2FE+FE..; (E*C, FE)
} Moe;

static size_t bf16_bytes(size_t n) { return 2 * n; }
static const uint16_t *gate_w(const Moe *m, int e) { return m->wgu + (size_t)e * 2 * FE * C; }
static const uint16_t *up_w(const Moe *m, int e) { return gate_w(m, e) + (size_t)FE * C; }
static const uint16_t *down_w(const Moe *m, int e) { return m->wd + (size_t)e * C * FE; }

// The expert products alone (the grouped GEMM): gate, up and down of each expert's rows.
static void experts(Moe *m) {
    for (int e = 0; e < E; e++) {
        int r0 = m->offs[e], n = m->offs[e + 1] - r0;
        if (!n) continue;
        matmul_forward_dt(m->g + (size_t)r0 * FE, m->xg + (size_t)r0 * C, gate_w(m, e), DT_BF16, NULL, n, C, FE, 1, 0);
        matmul_forward_dt(m->u + (size_t)r0 * FE, m->xg + (size_t)r0 * C, up_w(m, e), DT_BF16, NULL, n, C, FE, 1, 0);
    }
    swiglu_forward(m->a, m->g, m->u, (size_t)m->T * K * FE);
    for (int e = 0; e < E; e++) {
        int r0 = m->offs[e], n = m->offs[e + 1] - r0;
        if (n) matmul_forward_dt(m->h + (size_t)r0 * C, m->a + (size_t)r0 * FE, down_w(m, e), DT_BF16, NULL, n, FE, C, 1, 0);
    }
}

// The whole MLP: y (T,C) from x (T,C).
static void moe_mlp(Moe *m) {
    Backend *cpu = backend_cpu();
    PailErr err = {0};
    matmul_forward(m->logits, m->x, m->wr, NULL, m->T, C, E, 1, 0);
    moe_route_forward(m->idx, m->w, m->logits, m->T, E, K, 1);
    moe_group(m->tok, m->pos, m->offs, m->idx, m->T, K, E);
    cpu->ops->gather_rows(cpu, m->xg, m->x, m->tok, m->T * K, C, &err);
    experts(m);
    moe_combine_forward(m->y, m->h, m->w, m->pos, m->T, K, C, 0);
}

// The same FLOPs dense: T*K rows through expert 0's gate, up and down.
static void dense(Moe *m) {
    int n = m->T * K;
    matmul_forward_dt(m->g, m->xg, gate_w(m, 0), DT_BF16, NULL, n, C, FE, 1, 0);
    matmul_forward_dt(m->u, m->xg, up_w(m, 0), DT_BF16, NULL, n, C, FE, 1, 0);
    swiglu_forward(m->a, m->g, m->u, (size_t)n * FE);
    matmul_forward_dt(m->h, m->a, down_w(m, 0), DT_BF16, NULL, n, FE, C, 1, 0);
}

static double best_of(void (*f)(Moe *), Moe *m) {
    f(m);  // warm
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = bench_now();
        f(m);
        double dt = bench_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

// Token t's output computed on its own: each chosen expert's MLP on x[t], weighted.
static double check_token(Moe *m, int t) {
    float g[FE], u[FE], a[FE], h[C], want[C] = {0};
    const float *xt = m->x + (size_t)t * C;
    for (int k = 0; k < K; k++) {
        int e = m->idx[t * K + k];
        matmul_forward_dt(g, xt, gate_w(m, e), DT_BF16, NULL, 1, C, FE, 1, 0);
        matmul_forward_dt(u, xt, up_w(m, e), DT_BF16, NULL, 1, C, FE, 1, 0);
        swiglu_forward_ref(a, g, u, FE);
        matmul_forward_dt(h, a, down_w(m, e), DT_BF16, NULL, 1, FE, C, 1, 0);
        for (int c = 0; c < C; c++) want[c] += m->w[t * K + k] * h[c];
    }
    double worst = 0;
    for (int c = 0; c < C; c++)
        worst = fmax(worst, fabs((double)m->y[(size_t)t * C + c] - want[c]) / (fabs(want[c]) + 1e-3));
    return worst;
}

int main(int argc, char **argv) {
    threads_policy_apply(argv);
    Moe m = {.T = argc > 1 ? atoi(argv[1]) : 512};
    if (m.T < 1 || m.T > 65536) {
        fprintf(stderr, "bench_kernels_moe: T '%s': 1 to 65536 tokens\n", argv[1]);
        return 2;
    }
    size_t tk = (size_t)m.T * K, nw = (size_t)E * 2 * FE * C;
    m.x = bench_malloc(4 * (size_t)m.T * C), m.wr = bench_malloc(4 * (size_t)E * C);
    m.logits = bench_malloc(4 * (size_t)m.T * E), m.w = bench_malloc(4 * tk), m.xg = bench_malloc(4 * tk * C);
    m.g = bench_malloc(4 * tk * FE), m.u = bench_malloc(4 * tk * FE), m.a = bench_malloc(4 * tk * FE);
    m.h = bench_malloc(4 * tk * C), m.y = bench_malloc(4 * (size_t)m.T * C);
    m.idx = bench_malloc(4 * tk), m.tok = bench_malloc(4 * tk), m.pos = bench_malloc(4 * tk);
    m.wgu = bench_malloc(bf16_bytes(nw)), m.wd = bench_malloc(bf16_bytes((size_t)E * C * FE));
    float *tmp = bench_malloc(4 * nw);
    bench_fill_uniform(tmp, nw, 0.03f, 1);
    dtype_from_f32(m.wgu, tmp, DT_BF16, nw);
    bench_fill_uniform(tmp, (size_t)E * C * FE, 0.04f, 2);
    dtype_from_f32(m.wd, tmp, DT_BF16, (size_t)E * C * FE);
    free(tmp);
    bench_fill_uniform(m.x, (size_t)m.T * C, 1.0f, 3);
    bench_fill_uniform(m.wr, (size_t)E * C, 0.1f, 4);

    moe_mlp(&m);
    double worst = 0;
    for (int t = 0; t < m.T; t += m.T / 3 + 1) worst = fmax(worst, check_token(&m, t));
    int lo = m.offs[1] - m.offs[0], hi = lo;
    for (int e = 1; e < E; e++) {
        int n = m.offs[e + 1] - m.offs[e];
        lo = n < lo ? n : lo, hi = n > hi ? n : hi;
    }
    printf("validate: the grouped MLP against token-by-token products, worst relative error %.2e (%s)\n", worst,
           worst < 1e-3 ? "ok" : "FAILED");
    if (!(worst < 1e-3)) return 1;

    double flops = 6.0 * tk * C * FE;  // gate, up (2 T K C FE each) and down (2 T K FE C)
    double t_moe = best_of(moe_mlp, &m), t_exp = best_of(experts, &m), t_dense = best_of(dense, &m);
    printf("shape: C %d, Fe %d, E %d, K %d, T %d (%zu grouped rows, %d to %d an expert), bf16 weights, %d threads\n",
           C, FE, E, K, m.T, tk, lo, hi, omp_get_max_threads());
    printf("moe MLP (router, route, group, gather, %d x 3 expert products, swiglu, combine): %.2f ms, %.1f GFLOP/s\n", E,
           t_moe * 1e3, flops / t_moe / 1e9);
    printf("  the expert products and swiglu alone: %.2f ms, %.1f GFLOP/s; routing and data movement %.2f ms\n",
           t_exp * 1e3, flops / t_exp / 1e9, (t_moe - t_exp) * 1e3);
    printf("dense (%zu rows through one expert's weights, the same FLOPs): %.2f ms, %.1f GFLOP/s\n", tk,
           t_dense * 1e3, flops / t_dense / 1e9);
    printf("ratio moe / dense GFLOP/s: %.2f (expert products alone: %.2f)\n", t_dense / t_moe, t_dense / t_exp);
    return 0;
}
