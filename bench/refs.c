// Reference measurements for bench_model and bench_rollout (see refs.h).
#include "refs.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
#include "matmul_amx.h"

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

// Best of `passes` runs of a = b + 3 c at the current thread count, in GB/s
// (STREAM's count: 3 arrays of n floats per run, write-allocate not counted).
static double triad(float *a, const float *b, const float *c, size_t n, int passes) {
    double t = 1e30;
    for (int rep = 0; rep < passes; rep++) {
        double t0 = bench_now();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        t = fmin(t, bench_now() - t0);
    }
    return 3.0 * n * sizeof(float) / t / 1e9;
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
        double gbs = triad(a, b, c, n, 10);
        free(a), free(b), free(c);
        best = fmax(best, gbs);
        *lo = fmin(*lo, gbs);
    }
    return best;
}

double bench_triad_on(void *block, size_t bytes, int passes) {
    size_t n = bytes / (3 * sizeof(float)) & ~(size_t)15;  // 64-byte multiples: a block's alignment is kept
    float *a = block, *b = a + n, *c = b + n;
    bench_fill_uniform(a, n, 1, 1), bench_fill_uniform(b, n, 1, 2), bench_fill_uniform(c, n, 1, 3);
    return triad(a, b, c, n, passes);
}

double bench_thp_fraction(const void *p, size_t bytes) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    unsigned long a, b, kb;
    double overlap = 0, huge = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2)  // a mapping's header line
            overlap = a < hi && b > lo ? (double)((b < hi ? b : hi) - (a > lo ? a : lo)) : 0;
        else if (overlap > 0 && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1)
            huge += fmin(1024.0 * kb, overlap);
    }
    fclose(f);
    return bytes ? huge / bytes : 0;
}

// ---- the cores' peak: inline assembly, so the compiler can neither fold the
// chains nor spill them. Zeroed registers keep every value normal (0 * 0 + 0).
// Enough independent chains to cover the FMA latency (4 cycles) on two ports.
#define Z16(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11) op(12) op(13) op(14) op(15)
#define ZERO_Z(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
#define FMA_Z(i) "vfmadd231ps %%zmm16, %%zmm17, %%zmm" #i "\n\t"
#define DPBF_Z(i) "vdpbf16ps %%zmm16, %%zmm17, %%zmm" #i "\n\t"
#define Y12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define ZERO_Y(i) "vxorps %%ymm" #i ", %%ymm" #i ", %%ymm" #i "\n\t"
#define FMA_Y(i) "vfmadd231ps %%ymm12, %%ymm13, %%ymm" #i "\n\t"
#define ZMM_CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
                     "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "cc"

__attribute__((target("avx512f"))) static void peak_fma_zmm(long n) {  // 16 x 16 lanes x 2 FLOPs per iteration
    __asm__ volatile(Z16(ZERO_Z) ZERO_Z(16) ZERO_Z(17) "1:\n\t" Z16(FMA_Z) "dec %0\n\tjnz 1b\n\tvzeroupper"
                     : "+r"(n) : : ZMM_CLOBBERS);
}

__attribute__((target("avx512f,avx512bf16"))) static void peak_dpbf16_zmm(long n) {  // 16 x 16 lanes x 4 FLOPs
    __asm__ volatile(Z16(ZERO_Z) ZERO_Z(16) ZERO_Z(17) "1:\n\t" Z16(DPBF_Z) "dec %0\n\tjnz 1b\n\tvzeroupper"
                     : "+r"(n) : : ZMM_CLOBBERS);
}

__attribute__((target("avx2,fma"))) static void peak_fma_ymm(long n) {  // 12 x 8 lanes x 2 FLOPs
    __asm__ volatile(Y12(ZERO_Y) ZERO_Y(12) ZERO_Y(13) "1:\n\t" Y12(FMA_Y) "dec %0\n\tjnz 1b\n\tvzeroupper"
                     : "+r"(n) : : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                       "xmm10", "xmm11", "xmm12", "xmm13", "cc");
}

// 4 independent accumulator tiles, 16 x 16 fp32 each, by 16 x 32 bf16 inputs:
// 16 x 16 x 32 x 2 FLOPs a tdpbf16ps.
__attribute__((target("amx-tile,amx-bf16"))) static void peak_amx(long n) {
    struct { uint8_t palette, start, res[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = 64;
    static const uint16_t ones[16 * 32] __attribute__((aligned(64))) = {0};
    __asm__ volatile("" : : "m"(cfg) : "memory");  // GCC 12 may drop the stores to cfg otherwise
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (long i = 0; i < n; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
}

// Register-register adds: Golden Cove and later fold a dependent add of an
// immediate at rename (several per cycle), so the chain adds a register.
#define ADD8 "add %2, %1\n\t" "add %2, %1\n\t" "add %2, %1\n\t" "add %2, %1\n\t" \
             "add %2, %1\n\t" "add %2, %1\n\t" "add %2, %1\n\t" "add %2, %1\n\t"
static void peak_add_chain(long n) {  // 64 dependent adds per iteration: 64 cycles
    long x = 0, one = 1;
    __asm__ volatile("1:\n\t" ADD8 ADD8 ADD8 ADD8 ADD8 ADD8 ADD8 ADD8 "dec %0\n\tjnz 1b"
                     : "+r"(n), "+r"(x) : "r"(one) : "cc");
}

// Best of 5 rates (units per second) of loop(n) x per_iter on one thread, or on
// all threads at once (then the sum: every thread's units over the slowest's time).
static double peak_rate(void (*loop)(long), long n, double per_iter, int all) {
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double worst = 0;
        int nt = 1;
#pragma omp parallel if (all) reduction(max : worst)
        {
#pragma omp single
            nt = omp_get_num_threads();
#pragma omp barrier
            double t0 = bench_now();
            loop(n);
            worst = bench_now() - t0;
        }
        best = fmax(best, nt * n * per_iter / worst);
    }
    return best;
}

void bench_peak(BenchPeak *pk) {
    memset(pk, 0, sizeof *pk);
    __builtin_cpu_init();
    pk->threads = omp_get_max_threads();
    pk->ghz = peak_rate(peak_add_chain, 2000000, 64, 0) / 1e9;
    void (*fma)(long) = NULL;
    double fma_flops = 0;
    if (__builtin_cpu_supports("avx512f"))
        fma = peak_fma_zmm, fma_flops = 16 * 16 * 2, pk->fp32_isa = "zmm vfmadd231ps, 16 chains";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        fma = peak_fma_ymm, fma_flops = 12 * 8 * 2, pk->fp32_isa = "ymm vfmadd231ps, 12 chains";
    else
        pk->fp32_isa = "none";
    if (fma) {
        pk->fp32_core = peak_rate(fma, 20000000, fma_flops, 0) / 1e9;
        pk->fp32_all = peak_rate(fma, 20000000, fma_flops, 1) / 1e9;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) {
        pk->bf16_core = peak_rate(peak_dpbf16_zmm, 10000000, 16 * 16 * 4, 0) / 1e9;
        pk->bf16_all = peak_rate(peak_dpbf16_zmm, 10000000, 16 * 16 * 4, 1) / 1e9;
    }
    if (amx_bf16_usable()) {
        pk->amx_core = peak_rate(peak_amx, 2000000, 4.0 * 16 * 16 * 32 * 2, 0) / 1e9;
        pk->amx_all = peak_rate(peak_amx, 2000000, 4.0 * 16 * 16 * 32 * 2, 1) / 1e9;
    }
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
