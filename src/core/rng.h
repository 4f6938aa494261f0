// Deterministic random numbers: xoshiro256** seeded through splitmix64, so a
// (seed, stream) pair always gives the same sequence on every machine. Used for
// sampling (one stream per prompt and sample), init, shuffles, backoff jitter.
#pragma once
#include <stdint.h>

typedef struct { uint64_t s[4]; } Rng;

// One xoshiro256** step on a bare state, and the double in [0, 1) with 53
// random bits it gives: rng_u64 / rng_uniform's arithmetic, inline so that
// the CUDA sampler (kernels/sample.cu) draws the same numbers.
#ifdef __CUDACC__
#define RNG_HD __host__ __device__
#else
#define RNG_HD
#endif
static inline RNG_HD uint64_t rng_step(uint64_t s[4]) {
    uint64_t x = s[1] * 5, t = s[1] << 17;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}
static inline RNG_HD double rng_step_uniform(uint64_t s[4]) { return (rng_step(s) >> 11) * 0x1.0p-53; }

void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_u64(Rng *r);
double rng_uniform(Rng *r);         // [0, 1) with 53 random bits
float rng_uniform_f(Rng *r);        // [0, 1) with 24 random bits
double rng_normal(Rng *r);          // standard normal (Box-Muller)
uint64_t rng_below(Rng *r, uint64_t n);  // uniform in [0, n), unbiased
uint64_t hash64(const void *data, uint64_t len);  // FNV-1a then splitmix, for seeds from ids
