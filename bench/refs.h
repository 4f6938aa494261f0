// Reference measurements shared by the model and rollout benches (refs.c): the
// STREAM triad bandwidth and OpenBLAS sgemm on a model's own products, plus the
// small helpers they need. Benches print their figures against these.
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
