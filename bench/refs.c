// Reference measurements for bench_model and bench_rollout (see refs.h).
#include "refs.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void *bench_malloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench: out of memory allocating %zu bytes\n", n);
        exit(1);
    }
    return p;
}

void bench_fill_uniform(float *p, size_t n, float a, unsigned seed) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        unsigned h = (unsigned)i * 2654435761u ^ seed * 0x9e3779b9u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
        p[i] = a * (2.0f * (h & 0xffffff) / 16777216.0f - 1.0f);
    }
}

// Best of 10 triads over each of 3 fresh allocations: on this VM the rate
// jumps between ~47 and ~80 GB/s from one allocation or run to the next, so the
// roofline uses the best seen and the worst is printed next to it.
double bench_stream_triad(double *lo) {
    size_t n = 32u << 20;  // 3 x 128 MiB, far beyond any cache
    double best = 0;
    *lo = 1e30;
    for (int alloc = 0; alloc < 3; alloc++) {
        float *a = bench_malloc(n * 4), *b = bench_malloc(n * 4), *c = bench_malloc(n * 4);
        bench_fill_uniform(a, n, 1, 1), bench_fill_uniform(b, n, 1, 2), bench_fill_uniform(c, n, 1, 3);
        double t = 1e30;
        for (int rep = 0; rep < 10; rep++) {
            double t0 = bench_now();
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
            t = fmin(t, bench_now() - t0);
        }
        free(a), free(b), free(c);
        double gbs = 3.0 * n * sizeof(float) / t / 1e9;
        best = fmax(best, gbs);
        *lo = fmin(*lo, gbs);
    }
    return best;
}

double bench_sgemm_reference(const ModelConfig *c, int T) {
    int C = c->hidden_size, HD = c->num_attention_heads * c->head_dim, KD = c->num_key_value_heads * c->head_dim,
        F = c->intermediate_size, V = c->vocab_size;
    struct { int K, N; } p[] = {{C, HD}, {C, KD}, {C, KD}, {HD, C}, {C, F}, {C, F}, {F, C}, {C, V}};
    int np = sizeof p / sizeof p[0];
    size_t maxw = 0, maxo = 0, maxx = 0;
    for (int i = 0; i < np; i++) {
        if ((size_t)p[i].K * p[i].N > maxw) maxw = (size_t)p[i].K * p[i].N;
        if ((size_t)T * p[i].N > maxo) maxo = (size_t)T * p[i].N;
        if ((size_t)T * p[i].K > maxx) maxx = (size_t)T * p[i].K;
    }
    float *x = bench_malloc(maxx * 4), *W = bench_malloc(maxw * 4), *o = bench_malloc(maxo * 4);
    bench_fill_uniform(x, maxx, 1, 4), bench_fill_uniform(W, maxw, 0.05f, 5);
    openblas_set_num_threads(omp_get_max_threads());
    double flops = 0, best = 1e30;
    for (int i = 0; i < np; i++) flops += 2.0 * T * p[i].K * p[i].N;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = bench_now();
        for (int i = 0; i < np; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, p[i].N, p[i].K, 1, x, p[i].K, W, p[i].K, 0, o,
                        p[i].N);
        best = fmin(best, bench_now() - t0);
    }
    openblas_set_num_threads(1);  // kernels/matmul.c runs OpenBLAS single-threaded inside OpenMP
    free(x), free(W), free(o);
    return flops / best / 1e9;
}
