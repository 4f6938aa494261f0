// Reference measurements shared by the model and rollout benches (refs.c): the
// STREAM triad bandwidth (on fresh arrays, or on a given allocation), OpenBLAS
// sgemm on a model's own products and the cores' FMA peak, plus the small
// helpers they need. Benches print their figures against these. Only libc,
// OpenMP and OpenBLAS here: every bench links this file.
#pragma once
#include <stddef.h>
#include "model/config.h"

double bench_now(void);                       // monotonic seconds
void *bench_malloc(size_t n);                 // exits with a message when out of memory
// Uniform(-a, a) from a counter hash: fast, thread-count independent.
void bench_fill_uniform(float *p, size_t n, float a, unsigned seed);
// Best triad GB/s over 3 fresh allocations x 10 runs; *lo gets the worst allocation's best.
double bench_stream_triad(double *lo);
// GFLOP/s of OpenBLAS sgemm (its own pool, all OpenMP threads) on one layer's
// forward products and the LM head at T rows; leaves OpenBLAS single-threaded.
double bench_sgemm_reference(const ModelConfig *c, int T);
// Best triad GB/s of `passes` runs at the current OpenMP thread count over three
// float arrays carved from block (bytes long; its contents are overwritten): a
// reference for code that will stream that very allocation (this VM's bandwidth
// differs from one allocation to the next).
double bench_triad_on(void *block, size_t bytes, int passes);
// Fraction of [p, p + bytes) in the transparent huge pages of its mappings
// (/proc/self/smaps AnonHugePages); -1 when smaps cannot be read.
double bench_thp_fraction(const void *p, size_t bytes);

// The cores' arithmetic peak, measured (bench_peak): independent chains of
// fp32 FMAs on the widest vectors the CPU has (zmm with AVX-512, else ymm with
// AVX2 + FMA; none: fp32_core 0) and of the bf16 dot product vdpbf16ps (zmm,
// avx512_bf16; else bf16_core 0) and of AMX tdpbf16ps (4 accumulator tiles;
// where kernels/matmul_amx.h finds AMX usable, else amx_core 0), on one thread and on all OpenMP threads at
// once; the clock from a chain of dependent 1-cycle integer adds.
typedef struct {
    double ghz;                    // one thread's clock while running integer adds
    const char *fp32_isa;          // "zmm vfmadd231ps, 16 chains", "ymm ..., 12 chains" or "none"
    double fp32_core, fp32_all;    // GFLOP/s: one thread alone; all threads together (FMA = 2 FLOPs)
    double bf16_core, bf16_all;    // GFLOP/s of vdpbf16ps (2 products + 2 adds per fp32 lane)
    double amx_core, amx_all;      // GFLOP/s of AMX tdpbf16ps (16 x 16 x 32 x 2 a tile op); 0 without AMX
    int threads;
} BenchPeak;
void bench_peak(BenchPeak *pk);
