// Token sampling from logits: temperature, top-k, top-p (nucleus). Returns the
// token and its log-probability under the distribution actually sampled from
// (after temperature; with top-k/top-p, of the truncated, renormalised
// distribution: doc/rollout.md explains the bias this brings to the trainer's
// importance ratio, which is why the default is no truncation). Temperature 0
// is greedy (log-probability 0: a point mass).
#pragma once
#include "core/rng.h"

typedef struct {
    double temperature;  // 0: greedy
    double top_p;        // 1: off
    int top_k;           // 0: off
} SamplerConfig;

typedef struct {
    float *p;    // (V) probabilities
    int *idx;    // (V) candidate order for top-k / top-p
    int V;
} SamplerScratch;

int sampler_scratch_init(SamplerScratch *s, int V);
void sampler_scratch_free(SamplerScratch *s);
// logits (V) are not modified. Returns the sampled token id.
int sample_token(const float *logits, const SamplerConfig *cfg, Rng *rng, SamplerScratch *s, float *logprob);
