// Token sampling from logits: temperature, top-k, top-p (nucleus), min-p. Returns the
// token and its log-probability under the distribution actually sampled from
// (after temperature; with top-k/top-p, of the truncated, renormalised
// distribution: doc/rollout.md explains the bias this brings to the trainer's
// importance ratio, which is why the default is no truncation). Temperature 0
// is greedy (log-probability 0: a point mass).
#pragma once
#include <stdbool.h>
#include "core/err.h"
#include "core/rng.h"

typedef struct {
    double temperature;  // 0: greedy
    double top_p;        // 1: off
    int top_k;           // 0: off
    double min_p;        // 0: off; keep p >= min_p * p_max (after top-k and top-p, as HF)
} SamplerConfig;

typedef struct {
    float *p;    // (V) probabilities
    int *idx;    // (V) candidate order for top-k / top-p
    int V;
} SamplerScratch;

// The lowest temperature pail samples with; 0 is greedy. Below it 1 / T turns the logits'
// rounding (bf16 keeps ~3 digits: 0.03 of a logit of 8) into whole nats between the sampler's
// log-probs and the trainer's, and near 1e-38 (a float denormal) 1 / T overflows: every step
// such shards feed is skipped for non-finite gradients. vLLM raises such temperatures to 0.01.
#define SAMPLER_MIN_TEMPERATURE 0.01
// The one rule for every temperature given (flags, generation_config.json, --serve requests):
// 0 (greedy) or SAMPLER_MIN_TEMPERATURE..max.
bool sampler_temperature_ok(double t, double max);

enum { SAMPLER_KEEP_TEMPERATURE = 1, SAMPLER_KEEP_TOP_P = 2, SAMPLER_KEEP_TOP_K = 4, SAMPLER_KEEP_MIN_P = 8 };
// --generation-defaults: temperature, top_p, top_k and min_p from model_dir/generation_config.json
// where it sets them, except those keep names (given on the command line). No file, or a
// key absent or null: that setting stays. A value out of range is an error naming the file.
// desc (may be NULL, 256 bytes) says what was taken. 0 / -1 with err.
int sampler_generation_defaults(SamplerConfig *s, const char *model_dir, unsigned keep, char *desc, PailErr *err);

int sampler_scratch_init(SamplerScratch *s, int V);
void sampler_scratch_free(SamplerScratch *s);
// logits (V) are not modified. Returns the sampled token id.
int sample_token(const float *logits, const SamplerConfig *cfg, Rng *rng, SamplerScratch *s, float *logprob);
