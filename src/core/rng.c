// xoshiro256** (Blackman & Vigna 2018) with splitmix64 seeding (see rng.h).
#include "core/rng.h"
#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL + 0x632be59bd9b4e019ULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

uint64_t rng_u64(Rng *r) { return rng_step(r->s); }

double rng_uniform(Rng *r) { return rng_step_uniform(r->s); }
float rng_uniform_f(Rng *r) { return (float)(rng_u64(r) >> 40) * 0x1.0p-24f; }

double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rng_below(Rng *r, uint64_t n) {
    if (n == 0) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do v = rng_u64(r); while (v >= limit);
    return v % n;
}

uint64_t hash64(const void *data, uint64_t len) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (uint64_t i = 0; i < len; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return splitmix64(&h);
}
