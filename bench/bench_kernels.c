// bench_kernels: figures for kernels/ on this machine, each with the reference it
// should be read against: STREAM triad bandwidth, OpenBLAS sgemm GFLOP/s on the
// bench model's products, the small-T mat-vec's weight-streaming GB/s against
// OpenBLAS sgemv/sgemm at T = 1..16 (the crossover sets matmul_small_t_max) with
// the same weight stored as bf16 beside it, the bf16 / f16 panel GEMMs against
// sgemm at the model shapes, and per-op times at the bench shape. Validates the
// fast paths first. Not a test.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/threads.h"
#include "dtype_cpu.h"
#include "kernels.h"
#include "gemm_bf16.h"
#include "gemm_f32.h"
#include "refs.h"
#include "matmul_amx.h"

// bench model (src/model/modelgen.c "bench"): C 512, H 8, Hkv 2, D 64, F 1408, V 32000
enum { C = 512, H = 8, HKV = 2, D = 64, F = 1408, V = 32000, T = 512, NSEQ = 4 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *rnd(size_t n, float scale) {
    float *p = malloc(sizeof(float) * n);
    if (!p) { fprintf(stderr, "bench_kernels: out of memory (%zu floats)\n", n); exit(1); }
    unsigned s = 12345;
#pragma omp parallel for firstprivate(s) schedule(static)
    for (size_t i = 0; i < n; i++) {
        unsigned h = (unsigned)i * 2654435761u ^ s;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = scale * ((h & 0xffffff) / 16777216.0f - 0.5f);
    }
    return p;
}

// Best of `reps` wall times of fn(ctx, i) (best: the least disturbed run).
#define TIME_BEST(reps, stmt)                                    \
    ({                                                           \
        double best_ = 1e30;                                     \
        for (int rep_ = 0; rep_ < (reps); rep_++) {              \
            double t0_ = now();                                  \
            stmt;                                                \
            double dt_ = now() - t0_;                            \
            if (dt_ < best_) best_ = dt_;                        \
        }                                                        \
        best_;                                                   \
    })

static double stream_triad(void) {
    size_t n = 32u << 20;  // 3 x 128 MiB, far beyond any cache
    float *a = rnd(n, 1), *b = rnd(n, 1), *c = rnd(n, 1);
    double t = 1e30;  // not TIME_BEST: a pragma cannot sit in a macro argument
    for (int rep = 0; rep < 10; rep++) {
        double t0 = now();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        t = fmin(t, now() - t0);
    }
    double gbs = 3.0 * n * sizeof(float) / t / 1e9;
    printf("stream triad: %.1f GB/s (a = b + s*c, 3 x %zu MiB, %d threads; STREAM counting, no RFO)\n", gbs,
           n * 4 >> 20, omp_get_max_threads());
    free(a), free(b), free(c);
    return gbs;
}

// OpenBLAS with its own thread pool (the reference) against matmul_forward, which
// runs OpenBLAS single-threaded on one column slice per OpenMP thread.
// The fp32 GEMM each product of more than 8 rows gets (gemm_f32.h: OpenBLAS's
// sgemm or pail's AVX-512 one) and the bf16 one (gemm_bf16.h), each against
// the CPU's measured arithmetic peak (bench_peak, all threads at once): at
// T = 512 (a prefill) and T = 64 (64 sequences decoded together) on the
// bench model's shapes and SmolLM2-135M's (bench/vs_llamacpp.sh's model).
// The fp32 paths alternate in one loop (a neighbour's load hits both alike).
static void sgemm_figures(void) {
    struct { const char *name; int T, K, N; } p[] = {
        {"q/o proj", 512, C, C}, {"gate/up", 512, C, F}, {"down", 512, F, C}, {"lm head", 512, C, V},
        {"smol gate/up", 512, 576, 1536}, {"smol down", 512, 1536, 576}, {"smol q/o", 512, 576, 576},
        {"smol gate/up", 64, 576, 1536}, {"smol down", 64, 1536, 576}, {"smol head", 64, 576, 49152}};
    BenchPeak pk;
    bench_peak(&pk);
    GemmF32 f0 = gemm_f32_path();
    GemmBf16 b0 = gemm_bf16_path();
    int pail = gemm_f32_usable(GEMM_F32_PAIL);
    printf("\nfp32 GEMM (out = x W^T; dx = dout W on OpenBLAS), %d threads: the forward's default is %s "
           "up to %d rows, OpenBLAS above (PAIL_KERNELS_SGEMM; both timed below at every T); bf16 "
           "weights: %s (PAIL_KERNELS_GEMM)\n", pk.threads, gemm_f32_word(f0), gemm_f32_rows_max, gemm_bf16_word(b0));
    printf("  peaks measured now, all threads at once: fp32 %s %.1f GFLOP/s, bf16 vdpbf16ps %.1f GFLOP/s%s\n",
           pk.fp32_isa, pk.fp32_all, pk.bf16_all, pk.amx_all > 0 ? ", AMX tdpbf16ps measured too" : "");
    printf("  %-13s %5s %5s %6s | %-28s | %-15s | %s\n", "", "T", "K", "N", "fwd: openblas / pail GFLOP/s",
           "dx (openblas)", "bf16 weights (default path): fwd, dx");
    int rows_max = gemm_f32_rows_max;
    gemm_f32_rows_max = 1 << 30;  // pail's column: its kernel at every T
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        int T = p[i].T, K = p[i].K, N = p[i].N;
        float *x = rnd((size_t)T * K, 1), *W = rnd((size_t)N * K, 1), *o = rnd((size_t)T * N, 1),
              *dx = rnd((size_t)T * K, 1);
        uint16_t *W16 = malloc((size_t)N * K * 2);
        if (!W16) { fprintf(stderr, "bench_kernels: out of memory\n"); exit(1); }
        dtype_from_f32(W16, W, DT_BF16, (size_t)N * K);
        double fl = 2.0 * T * N * K, tf[2] = {1e30, 1e30}, td = 1e30;
        for (int r = 0; r < 5; r++)
            for (int g = 0; g < 1 + pail; g++) {
                gemm_f32_force((GemmF32)g);
                double t0 = now();
                matmul_forward(o, x, W, NULL, T, K, N, 1, 0);
                double t1 = now();
                tf[g] = fmin(tf[g], t1 - t0);
                if (g == 0) {  // dx: OpenBLAS on either path
                    matmul_backward(dx, NULL, NULL, o, x, W, T, K, N, 1, 0);
                    td = fmin(td, now() - t1);
                }
            }
        gemm_f32_force(f0);
        double tb = TIME_BEST(5, matmul_forward_dt(o, x, W16, DT_BF16, NULL, T, K, N, 1, 0));
        double tbd = TIME_BEST(5, matmul_backward_dt(dx, NULL, NULL, o, x, W16, DT_BF16, T, K, N, 1, 0));
        double bpk = b0 == GEMM_BF16_AMX ? pk.amx_all : b0 == GEMM_BF16_AVX512 ? pk.bf16_all : pk.fp32_all;
        char f1[40] = "-";
        if (pail)
            snprintf(f1, sizeof f1, "%.1f (%.0f%%, %.2fx)", fl / tf[1] / 1e9, 100 * fl / tf[1] / 1e9 / pk.fp32_all,
                     tf[0] / tf[1]);
        printf("  %-13s %5d %5d %6d | %6.1f (%3.0f%%) / %-19s | %6.1f (%3.0f%%) | %.1f (%.0f%% of %s peak), %.1f\n",
               p[i].name, T, K, N, fl / tf[0] / 1e9, 100 * fl / tf[0] / 1e9 / pk.fp32_all, f1, fl / td / 1e9,
               100 * fl / td / 1e9 / pk.fp32_all, fl / tb / 1e9, 100 * fl / tb / 1e9 / bpk,
               b0 == GEMM_BF16_EXACT ? "the fp32" : "its", fl / tbd / 1e9);
        free(x), free(W), free(o), free(dx), free(W16);
    }
    gemm_f32_rows_max = rows_max;
    printf("  (percentages: of the fp32 peak, or of the bf16 path's own; best of 5)\n");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Weight-streaming rate of out(T,N) = x W^T for small T; W cycles through enough
// copies (>= 1 GiB, several times the last-level cache) that every call reads it
// from memory, as a decode step does. The bf16 columns stream the same weight
// stored as bf16 (its own >= 1 GiB of copies): GB/s of the bytes actually read
// (half the fp32 ones), and the median over 7 alternating batches of the bf16
// time over the fp32 time (per product).
static void matvec_figures(int N, int K, double triad) {
    size_t wsz = (size_t)N * K;
    int copies = (int)((1024u << 20) / (wsz * 4)) + 1, copies16 = (int)((1024u << 20) / (wsz * 2)) + 1;
    float *W = rnd(wsz * copies, 1), *x = rnd((size_t)16 * K, 1), *o = rnd((size_t)16 * N, 1);
    float *o2 = rnd((size_t)16 * N, 1);
    uint16_t *W16 = malloc(wsz * copies16 * 2);
    if (!W16) { fprintf(stderr, "bench_kernels: out of memory (bf16 copies)\n"); exit(1); }
    for (int c = 0; c < copies16; c++) dtype_from_f32(W16 + wsz * c, W + wsz * (c % copies), DT_BF16, wsz);
    // validate: small-T kernel vs sgemm on this shape before timing, and the
    // bf16 mat-vec vs the fp32 one on the same weight converted
    int saved = matmul_small_t_max;
    matmul_small_t_max = 1 << 20;
    matmul_forward(o, x, W, NULL, 8, K, N, 1, 0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 8, N, K, 1, x, K, W, K, 0, o2, N);
    double md = 0;
    for (size_t i = 0; i < (size_t)8 * N; i++) md = fmax(md, fabs(o[i] - o2[i]));
    if (md > 1e-3) { fprintf(stderr, "bench_kernels: mat-vec differs from sgemm by %g\n", md); exit(1); }
    float *Wc = malloc(wsz * 4);
    if (!Wc) { fprintf(stderr, "bench_kernels: out of memory\n"); exit(1); }
    dtype_to_f32(Wc, W16, DT_BF16, wsz);
    matmul_forward(o, x, Wc, NULL, 8, K, N, 1, 0);
    matmul_forward_dt(o2, x, W16, DT_BF16, NULL, 8, K, N, 1, 0);
    md = 0;
    for (size_t i = 0; i < (size_t)8 * N; i++) md = fmax(md, fabs(o[i] - o2[i]));
    if (md > 1e-3) { fprintf(stderr, "bench_kernels: bf16 mat-vec differs from fp32 by %g\n", md); exit(1); }
    free(Wc);
    printf("\nweight streaming, W %d x %d (%.1f MiB fp32, %d copies cycled; bf16 %d copies): GB/s of W read\n",
           N, K, wsz * 4 / 1048576.0, copies, copies16);
    printf("  fp32: %s; bf16: %s\n", matmul_path_name(1, DT_F32), matmul_path_name(1, DT_BF16));
    printf("  %3s %10s %10s %9s %10s %10s %8s %8s %8s\n", "T", "mat-vec", "bf16", "bf16 time", "sgemm", "sgemv",
           "vs sgemm", "vs triad", "bf16/tr");
    enum { NT = 10 };
    int ts[NT] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}, c = 0, cross = 0;
    int reps = copies * 2 > 20 ? copies * 2 : 20, reps16 = copies16 * 2 > 20 ? copies16 * 2 : 20;
    double tm[NT], tb[NT], tg[NT], tv = 0;
    // all mat-vec figures first, then the OpenBLAS ones: its pool keeps spinning
    // for a while after a call and would tax whatever runs next on 2 cores
    // fp32 and bf16 batches alternate: rt is the median of each pair's time ratio
    double rt[NT];
    for (int i = 0; i < NT; i++) {
        double ratio[7];
        tm[i] = tb[i] = 1e30;
        for (int b = 0; b < 7; b++) {
            double t0 = now();
            for (int r = 0; r < reps; r++) matmul_forward(o, x, W + wsz * (c++ % copies), NULL, ts[i], K, N, 1, 0);
            double t1 = now();
            for (int r = 0; r < reps16; r++)
                matmul_forward_dt(o, x, W16 + wsz * (c++ % copies16), DT_BF16, NULL, ts[i], K, N, 1, 0);
            double t2 = now();
            tm[i] = fmin(tm[i], (t1 - t0) / reps), tb[i] = fmin(tb[i], (t2 - t1) / reps16);
            ratio[b] = ((t2 - t1) / reps16) / ((t1 - t0) / reps);
        }
        rt[i] = median(ratio, 7);
    }
    openblas_set_num_threads(omp_get_max_threads());  // the reference: OpenBLAS's own pool
    for (int i = 0; i < NT; i++)
        tg[i] = TIME_BEST(5, for (int r = 0; r < reps; r++) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ts[i], N, K, 1, x, K,
                        W + wsz * (c++ % copies), K, 0, o, N);
        }) / reps;
    tv = TIME_BEST(3, for (int r = 0; r < reps; r++) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1, W + wsz * (c++ % copies), K, x, 1, 0, o, 1);
    }) / reps;
    for (int i = 0; i < NT; i++) {
        double gm = wsz * 4 / tm[i] / 1e9, gb = wsz * 2 / tb[i] / 1e9, gg = wsz * 4 / tg[i] / 1e9;
        char gv[16] = "-";
        if (ts[i] == 1) snprintf(gv, sizeof gv, "%.1f", wsz * 4 / tv / 1e9);
        printf("  %3d %10.1f %10.1f %8.2fx %10.1f %10s %7.2fx %7.0f%% %7.0f%%\n", ts[i], gm, gb, rt[i],
               gg, gv, gm / gg, 100 * gm / triad, 100 * gb / triad);
        if (gm > gg && cross == i) cross = i + 1;
    }
    printf("  mat-vec ahead of sgemm for T <= %d (matmul_small_t_max = %d)\n",
           cross ? ts[cross - 1] : 0, saved);
    matmul_small_t_max = saved;
    free(W), free(W16), free(x), free(o), free(o2);
}

// The large-T products over a bf16 (and f16) weight, converted a panel at a
// time into per-thread scratch for the same OpenBLAS sgemm (matmul_forward_dt,
// matmul_backward_dt's dx), against matmul_forward / matmul_backward on the
// fp32 weight: GFLOP/s, and the bf16 time over the fp32 one. The runs
// alternate between the two so that a neighbour's load hits both alike.
static void dtgemm_shape(const char *name, int T, int N, int K, int reps) {
    size_t wsz = (size_t)N * K, big = (size_t)T * (N > K ? N : K);
    float *W = rnd(wsz, 1), *x = rnd(big, 1), *o = rnd((size_t)T * N, 1), *o2 = rnd((size_t)T * N, 1);
    uint16_t *W16 = malloc(wsz * 2), *W16h = malloc(wsz * 2);
    float *Wc = malloc(wsz * 4), *dx = rnd((size_t)T * K, 1);
    if (!W16 || !W16h || !Wc) { fprintf(stderr, "bench_kernels: out of memory\n"); exit(1); }
    dtype_from_f32(W16, W, DT_BF16, wsz);
    dtype_from_f32(W16h, W, DT_F16, wsz);
    dtype_to_f32(Wc, W16, DT_BF16, wsz);
    // the exact path's panels (on a CPU with AVX-512 BF16 or AMX the bf16
    // default is that path, timed after)
    gemm_bf16_force(GEMM_BF16_EXACT);
    // validate: the panel GEMM against sgemm on the converted weight
    matmul_forward(o, x, Wc, NULL, T, K, N, 1, 0);
    matmul_forward_dt(o2, x, W16, DT_BF16, NULL, T, K, N, 1, 0);
    double md = 0, mx = 0;
    for (size_t i = 0; i < (size_t)T * N; i++) md = fmax(md, fabs(o[i] - o2[i])), mx = fmax(mx, fabs(o[i]));
    if (md > 1e-5 * mx * sqrt(K)) {
        fprintf(stderr, "bench_kernels: bf16 panel GEMM differs from sgemm by %g (max |out| %g)\n", md, mx);
        exit(1);
    }
    enum { MAXR = 15 };
    if (reps > MAXR) reps = MAXR;
    double fl = 2.0 * T * N * K, tf = 1e30, tb = 1e30, th = 1e30, df = 1e30, db = 1e30;
    double rb[MAXR], rh[MAXR], rd[MAXR];
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        matmul_forward(o, x, W, NULL, T, K, N, 1, 0);
        double t1 = now();
        matmul_forward_dt(o, x, W16, DT_BF16, NULL, T, K, N, 1, 0);
        double t2 = now();
        matmul_forward_dt(o, x, W16h, DT_F16, NULL, T, K, N, 1, 0);
        double t3 = now();
        matmul_backward(dx, NULL, NULL, o, x, W, T, K, N, 1, 0);
        double t4 = now();
        matmul_backward_dt(dx, NULL, NULL, o, x, W16, DT_BF16, T, K, N, 1, 0);
        double t5 = now();
        tf = fmin(tf, t1 - t0), tb = fmin(tb, t2 - t1), th = fmin(th, t3 - t2);
        df = fmin(df, t4 - t3), db = fmin(db, t5 - t4);
        rb[r] = (t2 - t1) / (t1 - t0), rh[r] = (t3 - t2) / (t1 - t0), rd[r] = (t5 - t4) / (t4 - t3);
    }
    printf("  %-9s %6d x %-5d T=%-4d fwd %6.1f  bf16 %6.1f (%.3fx, median %.3fx)  f16 %6.1f (%.3fx) | "
           "dx %6.1f  bf16 %6.1f (%.3fx, median %.3fx)\n",
           name, N, K, T, fl / tf / 1e9, fl / tb / 1e9, tb / tf, median(rb, reps), fl / th / 1e9,
           median(rh, reps), fl / df / 1e9, fl / db / 1e9, db / df, median(rd, reps));
    for (GemmBf16 g = GEMM_BF16_AVX512; g <= GEMM_BF16_AMX; g++) {
        if (!gemm_bf16_usable(g)) continue;
        // x rounded to bf16, so the distance to sgemm is bf16-sized
        gemm_bf16_force(g);
        matmul_forward_dt(o2, x, W16, DT_BF16, NULL, T, K, N, 1, 0);
        md = 0;
        for (size_t i = 0; i < (size_t)T * N; i++) md = fmax(md, fabs(o[i] - o2[i]));
        if (md > 1e-2 * mx) {
            fprintf(stderr, "bench_kernels: %s GEMM differs from sgemm by %g (max |out| %g)\n", gemm_bf16_word(g),
                    md, mx);
            exit(1);
        }
        double ta = 1e30, da = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            matmul_forward_dt(o, x, W16, DT_BF16, NULL, T, K, N, 1, 0);
            double t1 = now();
            matmul_backward_dt(dx, NULL, NULL, o, x, W16, DT_BF16, T, K, N, 1, 0);
            ta = fmin(ta, t1 - t0), da = fmin(da, now() - t1);
        }
        printf("  %-9s %6d x %-5d T=%-4d bf16 %-10s fwd %6.1f (%.2fx the sgemm's rate) | dx %6.1f (%.2fx); "
               "max |%s - sgemm| %.2g of max |out| %.2g\n", "", N, K, T, gemm_bf16_word(g), fl / ta / 1e9,
               tf / ta, fl / da / 1e9, df / da, gemm_bf16_word(g), md, mx);
        gemm_bf16_force(GEMM_BF16_EXACT);
    }
    free(W), free(x), free(o), free(o2), free(W16), free(W16h), free(Wc), free(dx);
}

static const struct { const char *name; int T, N, K; } dt_shapes[] = {
    {"gate/up", 2048, 1408, 512}, {"down", 2048, 512, 1408}, {"gate/up", 2048, 4864, 896},
    {"down", 2048, 896, 4864},    {"lm head", 2048, 32000, 512}, {"lm head", 512, 151936, 896},
    {"gate/up", 64, 4864, 896},   {"down", 64, 896, 4864},  // T = 64: a batched decode step
    // SmolLM2-135M (bench/vs_llamacpp.sh's model): pp512, and 64 sequences decoded together
    {"gate/up", 512, 1536, 576},  {"down", 512, 576, 1536},   {"qkv/o", 512, 576, 576},
    {"gate/up", 64, 1536, 576},   {"down", 64, 576, 1536},    {"lm head", 64, 49152, 576}};

static void dtgemm_figures(void) {
    GemmBf16 dflt = gemm_bf16_path();
    gemm_bf16_force(GEMM_BF16_EXACT);  // the header names the exact path; the fast paths' rows follow each shape
    int fast = gemm_bf16_usable(GEMM_BF16_AVX512) || gemm_bf16_usable(GEMM_BF16_AMX);
    printf("\nbf16 / f16 weights, large T, GFLOP/s (%s; %s), panel %zu floats a thread, at most %d columns:\n",
           matmul_path_name(1 << 20, DT_BF16), matmul_path_name(1 << 20, DT_F32), matmul_dt_panel_floats,
           matmul_dt_panel_rows);
    printf("  (fwd: out = x W^T; dx = dout W; ratios: the dtype time over the fp32 sgemm's)%s\n",
           fast ? "; then a row for each bf16 path this CPU has (activations rounded to bf16)" : "");
    for (size_t i = 0; i < sizeof dt_shapes / sizeof dt_shapes[0]; i++)
        dtgemm_shape(dt_shapes[i].name, dt_shapes[i].T, dt_shapes[i].N, dt_shapes[i].K, 9);
    gemm_bf16_force(dflt);
}

// The panel shape's effect (what set matmul_dt_panel_floats and _rows): the
// same rows at several budgets and widths. `bench_kernels panels`.
static void panel_figures(void) {
    size_t saved = matmul_dt_panel_floats, sizes[] = {1u << 18, 1u << 20, 1u << 22};
    int saved_rows = matmul_dt_panel_rows, rows[] = {256, 1024};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (size_t p = 0; p < sizeof sizes / sizeof sizes[0]; p++) {
            matmul_dt_panel_floats = sizes[p], matmul_dt_panel_rows = rows[r];
            printf("\npanel %zu floats (%zu KiB) a thread, at most %d columns:\n", sizes[p], sizes[p] * 4 / 1024,
                   rows[r]);
            for (size_t i = 0; i < sizeof dt_shapes / sizeof dt_shapes[0]; i++)
                dtgemm_shape(dt_shapes[i].name, dt_shapes[i].T, dt_shapes[i].N, dt_shapes[i].K, 3);
        }
    matmul_dt_panel_floats = saved, matmul_dt_panel_rows = saved_rows;
}

// Bandwidth of an op that moves `bytes`: against the DRAM triad when the data
// cannot fit in cache, else flagged as cache-resident (the triad does not apply).
static void print_bw(const char *op, double t, double bytes, double triad) {
    double gbs = bytes / t / 1e9;
    if (bytes > 64e6)
        printf("  %-26s %9.3f  %.1f GB/s (%.0f%% of triad)\n", op, t * 1e3, gbs, 100 * gbs / triad);
    else
        printf("  %-26s %9.3f  %.1f GB/s (%.1f MB, cache-resident: triad n/a)\n", op, t * 1e3, gbs,
               bytes / 1e6);
}

static void op_figures(double triad) {
    int cu[NSEQ + 1], pos[T];
    for (int s = 0; s <= NSEQ; s++) cu[s] = s * (T / NSEQ);
    for (int t = 0; t < T; t++) pos[t] = t % (T / NSEQ);
    float *x = rnd((size_t)T * C, 1), *w = rnd(C, 1), *y = rnd((size_t)T * C, 1), *rs = rnd(T, 1);
    float *dx = rnd((size_t)T * C, 1), *dw = rnd(C, 1);
    printf("\nper-op times, bench shape T=%d (%d packed sequences) C=%d H=%d Hkv=%d D=%d F=%d V=%d:\n",
           T, NSEQ, C, H, HKV, D, F, V);
    printf("  %-26s %9s  %s\n", "op", "ms", "figure (reference)");
    double t = TIME_BEST(10, rmsnorm_forward(y, rs, x, w, T, C, 1e-5f));
    print_bw("rmsnorm_forward", t, 2.0 * T * C * 4, triad);
    t = TIME_BEST(10, rmsnorm_backward(dx, dw, y, x, w, rs, T, C));
    print_bw("rmsnorm_backward", t, 5.0 * T * C * 4, triad);

    float inv[D / 2], *ct = rnd((size_t)T * D / 2, 1), *st = rnd((size_t)T * D / 2, 1);
    rope_inv_freq(inv, D, 10000.0f, NULL);
    rope_table_build(ct, st, inv, T, D);
    size_t nq = (size_t)T * H * D, nk = (size_t)T * HKV * D;
    float *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *o = rnd(nq, 1), *lse = rnd((size_t)T * H, 1);
    t = TIME_BEST(10, rope_forward(q, q, pos, ct, st, T, H, D));
    print_bw("rope_forward (q)", t, 2.0 * nq * 4, triad);
    // causal flops: per (query, head) 4*D per visible key
    double aflops = 0;
    for (int s = 0; s < NSEQ; s++) {
        double L = cu[s + 1] - cu[s];
        aflops += 4.0 * D * H * L * (L + 1) / 2;
    }
    {  // validate at the bench shape before timing (the unit tests use small shapes)
        float *r = rnd(nq, 1), *lr = rnd((size_t)T * H, 1);
        attention_forward(o, lse, q, k, v, cu, NSEQ, T, H, HKV, D, 0);
        attention_forward_ref(r, lr, q, k, v, cu, NSEQ, T, H, HKV, D, 0);
        double md = 0;
        for (size_t i = 0; i < nq; i++) md = fmax(md, fabs(o[i] - r[i]));
        if (md > 1e-4) { fprintf(stderr, "bench_kernels: attention differs from reference by %g\n", md); exit(1); }
        printf("  (attention_forward validated against the reference: max |diff| %.2g)\n", md);
        free(r), free(lr);
    }
    t = TIME_BEST(5, attention_forward(o, lse, q, k, v, cu, NSEQ, T, H, HKV, D, 0));
    printf("  %-26s %9.3f  %.1f GFLOP/s\n", "attention_forward", t * 1e3, aflops / t / 1e9);
    float *dq = rnd(nq, 1), *dk = rnd(nk, 1), *dv = rnd(nk, 1);
    t = TIME_BEST(3, attention_backward(dq, dk, dv, o, q, k, v, o, lse, cu, NSEQ, T, H, HKV, D, 0));
    printf("  %-26s %9.3f  %.1f GFLOP/s (forward-equivalent x2.5)\n", "attention_backward",
           t * 1e3, 2.5 * aflops / t / 1e9);
    // decode: 8 sequences, one new token each, 512 cached positions
    int ns = 8, maxc = 512, cun[9], cl[8];
    for (int s = 0; s <= ns; s++) cun[s] = s;
    for (int s = 0; s < ns; s++) cl[s] = maxc;
    float *kc = rnd((size_t)ns * maxc * HKV * D, 1), *vc = rnd((size_t)ns * maxc * HKV * D, 1);
    // the paged pool: sequence s holds blocks s*mb .. s*mb + mb - 1, in order
    int mb = maxc / KV_BLOCK, *tbl = malloc(sizeof(int) * (size_t)ns * mb);
    for (int i = 0; i < ns * mb; i++) tbl[i] = i;
    t = TIME_BEST(20, attention_decode_forward(o, q, kc, vc, cun, cl, tbl, mb, ns, H, HKV, D, 0));
    free(tbl);
    double kvb = 2.0 * ns * maxc * HKV * D * 4;
    print_bw("attention_decode (8x512 kv)", t, kvb, triad);

    size_t nf = (size_t)T * F;
    float *g = rnd(nf, 4), *u = rnd(nf, 1), *h = rnd(nf, 1), *dg = rnd(nf, 1), *du = rnd(nf, 1);
    t = TIME_BEST(10, swiglu_forward(h, g, u, nf));
    print_bw("swiglu_forward", t, 3.0 * nf * 4, triad);
    t = TIME_BEST(10, swiglu_backward(dg, du, h, g, u, nf));
    print_bw("swiglu_backward", t, 5.0 * nf * 4, triad);

    float *wl = rnd((size_t)V * C, 0.1f), *dwl = rnd((size_t)V * C, 1), lp[T], ent[T], ls[T], dl[T];
    int tg[T];
    for (int i = 0; i < T; i++) tg[i] = (i * 7919) % V, dl[i] = 1;
    int vchunk = 2048;
    float *ws = malloc(sizeof(float) * logprob_workspace_floats(T, vchunk));
    PailErr err = {0};
    double lflops = 2.0 * T * C * V;
    {  // validate 4 rows against the naive full log-softmax
        float lr[4], er[4];
        if (logprob_forward(lp, ent, ls, x, wl, tg, 4, C, V, 1.0f, ws, vchunk, &err) ||
            logprob_forward_ref(lr, er, NULL, x, wl, tg, 4, C, V, 1.0f, &err)) {
            fprintf(stderr, "bench_kernels: %s\n", err.msg);
            exit(1);
        }
        double md = 0;
        for (int i = 0; i < 4; i++) md = fmax(md, fmax(fabs(lp[i] - lr[i]), fabs(ent[i] - er[i])));
        if (md > 1e-4) { fprintf(stderr, "bench_kernels: logprob differs from reference by %g\n", md); exit(1); }
        printf("  (logprob_forward validated against the naive log-softmax: max |diff| %.2g)\n", md);
    }
    t = TIME_BEST(3, logprob_forward(lp, ent, ls, x, wl, tg, T, C, V, 1.0f, ws, vchunk, &err));
    printf("  %-26s %9.3f  %.1f GFLOP/s (LM-head sgemm share; vchunk %d)\n",
           "logprob_forward +entropy", t * 1e3, lflops / t / 1e9, vchunk);
    t = TIME_BEST(3, logprob_backward(dx, dwl, dl, NULL, x, wl, tg, ls, NULL, T, C, V, 1.0f, ws, vchunk));
    printf("  %-26s %9.3f  %.1f GFLOP/s (3 products: recompute, dhidden, dW)\n",
           "logprob_backward +dW", t * 1e3, 3 * lflops / t / 1e9);
    t = TIME_BEST(3, logprob_forward(lp, NULL, ls, x, wl, tg, 4, C, V, 1.0f, ws, vchunk, &err));
    printf("  %-26s %9.3f  %.1f GB/s of W_lm read (decode, T=4)\n", "logprob_forward T=4",
           t * 1e3, (double)V * C * 4 / t / 1e9);

    float *tab = wl;
    t = TIME_BEST(10, embedding_forward(y, tab, tg, T, C, V, &err));
    print_bw("embedding_forward", t, 2.0 * T * C * 4, triad);

    size_t np = 8u << 20;  // an 8M-parameter flat array (LoRA params + grads + moments)
    float *p = rnd(np, 1), *m = rnd(np, 0), *vv = rnd(np, 0), *gr = rnd(np, 1);
    t = TIME_BEST(5, adamw_update(p, m, vv, gr, np, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 3, 1.0f));
    print_bw("adamw_update (8M params)", t, 7.0 * np * 4, triad);  // p, m, v in+out, g in
    double ss = 0;
    t = TIME_BEST(5, ss += adamw_grad_sumsq(gr, np));
    print_bw("adamw_grad_sumsq", t, 1.0 * np * 4, triad);
    if (!(ss > 0)) printf("  (sum of squares %g: wrong)\n", ss);
    free(x), free(w), free(y), free(rs), free(dx), free(dw), free(ct), free(st);
    free(q), free(k), free(v), free(o), free(lse), free(dq), free(dk), free(dv), free(kc), free(vc);
    free(g), free(u), free(h), free(dg), free(du), free(wl), free(dwl), free(ws);
    free(p), free(m), free(vv), free(gr);
}

static int want(int argc, char **argv, const char *section) {
    if (argc < 2) return strcmp(section, "panels") != 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], section)) return 1;
    return 0;
}

// Usage: bench_kernels [sgemm] [matvec] [dtgemm] [ops] [panels]   (default: all
// but panels; triad always runs)
int main(int argc, char **argv) {
    threads_policy_apply(argv);  // the executables' OpenMP wait policy (may start this program again)
    int threads = omp_get_max_threads();
    openblas_set_num_threads(threads);
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(f);
    }
    printf("bench_kernels: %d threads (OMP_NUM_THREADS / OpenBLAS), matmul_small_t_max %d, load average %.2f "
           "(figures are only meaningful on an idle machine); dtype kernels: %s (best %s)\n%s\n",
           threads, matmul_small_t_max, load[0], dtype_isa(), dtype_isa_label(dtype_isa_best()),
           threads_policy_note());
    double triad = stream_triad();
    if (want(argc, argv, "sgemm")) sgemm_figures();
    if (want(argc, argv, "matvec")) {
        matvec_figures(1408, C, triad);  // gate/up weight
        matvec_figures(C, F, triad);     // down weight (512 x 1408)
        matvec_figures(V, C, triad);     // LM head
    }
    if (want(argc, argv, "dtgemm")) dtgemm_figures();
    if (want(argc, argv, "panels")) panel_figures();
    if (want(argc, argv, "ops")) op_figures(triad);
    return 0;
}
