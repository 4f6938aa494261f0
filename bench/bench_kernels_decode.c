// bench_kernels_decode: the paged decode attention (kernels/attention_decode.c)
// at long caches, one layer of SmolLM2-135M's shape (H 9, Hkv 3, D 64) for a
// batch of 64 sequences decoding one token each, cache lengths 256, 1024 and
// 2048, with the pools in fp32, bf16 and f16: ms per call, the KV bytes read
// per second against the STREAM-like copy bandwidth of this machine, and the
// 16-bit pools' speed-up over fp32. As in a decode step, every call reads
// another layer's pools from memory: layers enough for 512 MB of pools
// (huge-page backed, as the KV cache's), called in turn, and each sequence's
// blocks interleaved with the others' (the pool's free list hands them out
// as the 64 sequences grow together). Validates each pool against the
// reference first. Not a test. Usage: bench_kernels_decode [lengths...];
// PAIL_BENCH_DECODE_LAYERS=N sets the layers (1: the kernel's speed from the
// caches, where one layer's pools fit in them).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/mem.h"
#include "core/threads.h"
#include "dtype_cpu.h"
#include "kernels.h"

enum { H = 9, HKV = 3, D = 64, NSEQ = 64 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *rnd(size_t n, float scale, unsigned seed) {
    float *p = malloc(sizeof(float) * n);
    if (!p) {
        fprintf(stderr, "bench_kernels_decode: out of memory (%zu floats)\n", n);
        exit(1);
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = scale * ((h & 0xffffff) / 16777216.0f - 0.5f);
    }
    return p;
}

// GB/s of a large memcpy (read + write counted), the bandwidth a decode step's
// cache reads are bounded by.
static double copy_bw(void) {
    size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n), memset(b, 2, n);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
#pragma omp parallel for schedule(static)
        for (int c = 0; c < 64; c++) memcpy(b + (size_t)c * (n / 64), a + (size_t)c * (n / 64), n / 64);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    free(a), free(b);
    return 2.0 * n / best / 1e9;
}

int main(int argc, char **argv) {
    threads_policy_apply(argv);
    int lens[8] = {256, 1024, 2048}, nlen = 3;
    if (argc > 1) {
        nlen = 0;
        for (int i = 1; i < argc && nlen < 8; i++) lens[nlen++] = atoi(argv[i]);
    }
    double bw = copy_bw();
    printf("bench_kernels_decode: %d threads, dtype kernels %s; H %d, Hkv %d, D %d, %d sequences x 1 new token; "
           "copy bandwidth %.1f GB/s\n",
           omp_get_max_threads(), dtype_isa(), H, HKV, D, NSEQ, bw);
    printf("  %-6s %-5s %10s %10s %8s %7s\n", "cache", "pool", "ms/call", "KV GB/s", "vs f32", "layers");
    const DType dts[] = {DT_F32, DT_BF16, DT_F16};
    for (int li = 0; li < nlen; li++) {
        int len = lens[li], mb = (len + KV_BLOCK - 1) / KV_BLOCK;
        size_t ks = (size_t)HKV * D, rows = (size_t)NSEQ * mb * KV_BLOCK, nq = (size_t)NSEQ * H * D;
        float *k32 = rnd(rows * ks, 2, 1), *v32 = rnd(rows * ks, 2, 2), *q = rnd(nq, 2, 3);
        float *o = malloc(sizeof(float) * nq), *ref = malloc(sizeof(float) * nq);
        int cun[NSEQ + 1], cl[NSEQ], *tbl = malloc(sizeof(int) * (size_t)NSEQ * mb);
        for (int s = 0; s <= NSEQ; s++) cun[s] = s;
        for (int s = 0; s < NSEQ; s++) cl[s] = len;
        // sequence s's block b: the free list's b * NSEQ + s-th (all grow together)
        for (int s = 0; s < NSEQ; s++)
            for (int b = 0; b < mb; b++) tbl[s * mb + b] = b * NSEQ + s;
        double t32 = 0;
        for (int di = 0; di < 3; di++) {
            DType dt = dts[di];
            size_t lb = rows * ks * dtype_size(dt);  // one layer's K (or V) pool
            int nl = (int)((512u << 20) / (2 * lb)) + 1;
            if (nl > 64) nl = 64;
            const char *want = getenv("PAIL_BENCH_DECODE_LAYERS");  // 1: from the caches
            if (want) nl = atoi(want);
            if (nl < 1) nl = 1;
            char *kp = mem_alloc_big(lb * nl), *vp = mem_alloc_big(lb * nl);
            if (!kp || !vp) {
                fprintf(stderr, "bench_kernels_decode: out of memory (%d layers of %zu MiB)\n", nl, 2 * lb >> 20);
                return 1;
            }
            dtype_from_f32(kp, k32, dt, rows * ks);
            dtype_from_f32(vp, v32, dt, rows * ks);
            for (int l = 1; l < nl; l++) memcpy(kp + l * lb, kp, lb), memcpy(vp + l * lb, vp, lb);
            attention_decode_forward_ref_dt(ref, q, kp, vp, dt, cun, cl, tbl, mb, NSEQ, H, HKV, D, 0, 0.0f);
            attention_decode_forward_dt(o, q, kp, vp, dt, cun, cl, tbl, mb, NSEQ, H, HKV, D, 0, 0.0f);
            double most = 0;
            for (size_t i = 0; i < nq; i++) most = fmax(most, fabs((double)o[i] - ref[i]));
            if (most > 1e-4) {
                fprintf(stderr, "bench_kernels_decode: %s pool, cache %d: %g from the reference\n", dtype_name(dt),
                        len, most);
                return 1;
            }
            int reps = 5;
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                for (int l = 0; l < nl; l++)
                    attention_decode_forward_dt(o, q, kp + l * lb, vp + l * lb, dt, cun, cl, tbl, mb, NSEQ, H, HKV,
                                                D, 0, 0.0f);
                double t = (now() - t0) / nl;
                if (t < best) best = t;
            }
            if (dt == DT_F32) t32 = best;
            double bytes = 2.0 * NSEQ * len * ks * dtype_size(dt);
            printf("  %-6d %-5s %10.3f %10.1f %7.2fx %7d\n", len, dtype_name(dt), best * 1e3, bytes / best / 1e9,
                   t32 / best, nl);
            free(kp), free(vp);
        }
        free(k32), free(v32), free(q), free(o), free(ref), free(tbl);
    }
    return 0;
}
