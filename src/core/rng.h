// Deterministic random numbers: xoshiro256** seeded through splitmix64, so a
// (seed, stream) pair always gives the same sequence on every machine. Used for
// sampling (one stream per prompt and sample), init, shuffles, backoff jitter.
#pragma once
#include <stdint.h>

typedef struct { uint64_t s[4]; } Rng;

void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_u64(Rng *r);
double rng_uniform(Rng *r);         // [0, 1) with 53 random bits
float rng_uniform_f(Rng *r);        // [0, 1) with 24 random bits
double rng_normal(Rng *r);          // standard normal (Box-Muller)
uint64_t rng_below(Rng *r, uint64_t n);  // uniform in [0, n), unbiased
uint64_t hash64(const void *data, uint64_t len);  // FNV-1a then splitmix, for seeds from ids
