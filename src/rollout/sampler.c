// Sampling with temperature / top-k / top-p and the log-probability of the
// sampled token under the sampled distribution (see sampler.h).
#define _GNU_SOURCE  // qsort_r
#include "rollout/sampler.h"
#include "simd.h"
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sampler_generation_defaults(SamplerConfig *s, const char *model_dir, unsigned keep, char *desc, PailErr *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    if (desc) snprintf(desc, 256, "%s: none", path);
    if (access(path, F_OK) != 0) return 0;
    json_error_t je;
    json_t *g = json_load_file(path, 0, &je);
    if (!json_is_object(g)) {
        json_decref(g);
        return err_set(err, PAIL_ERR_INVALID, "%s: not a JSON object (line %d: %s)", path, je.line, je.text);
    }
    static const struct { const char *key; unsigned bit; double lo, hi; } keys[] = {
        {"temperature", SAMPLER_KEEP_TEMPERATURE, 0, 100}, {"top_p", SAMPLER_KEEP_TOP_P, 0, 1}, {"top_k", SAMPLER_KEEP_TOP_K, 0, 1 << 24}};
    SamplerConfig out = *s;
    char took[200] = "";
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(g, keys[i].key);
        if (!v || json_is_null(v) || (keep & keys[i].bit)) continue;
        double x = json_number_value(v);
        if (!json_is_number(v) || !(x >= keys[i].lo && x <= keys[i].hi) || (i == 2 && x != floor(x))) {
            json_decref(g);
            return err_set(err, PAIL_ERR_INVALID, "%s: %s is not a number in [%g, %g]", path, keys[i].key, keys[i].lo, keys[i].hi);
        }
        if (i == 0) out.temperature = x;
        else if (i == 1) out.top_p = x;
        else out.top_k = (int)x;
        size_t l = strlen(took);
        snprintf(took + l, sizeof took - l, "%s%s=%g", l ? " " : "", keys[i].key, x);
    }
    json_decref(g);
    *s = out;
    if (desc) snprintf(desc, 256, "%s: %s", path, took[0] ? took : "nothing to take");
    return 0;
}

int sampler_scratch_init(SamplerScratch *s, int V) {
    s->V = V;
    s->p = malloc((size_t)V * sizeof *s->p);
    s->idx = malloc((size_t)V * sizeof *s->idx);
    return s->p && s->idx ? 0 : -1;
}

void sampler_scratch_free(SamplerScratch *s) {
    free(s->p);
    free(s->idx);
    s->p = NULL;
    s->idx = NULL;
}

static int by_prob_desc(const void *a, const void *b, void *arg) {
    const float *p = arg;
    float x = p[*(const int *)a], y = p[*(const int *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int *)a - *(const int *)b;  // ties: lower id first (deterministic)
}

int sample_token(const float *logits, const SamplerConfig *cfg, Rng *rng, SamplerScratch *s, float *logprob) {
    int V = s->V;
    if (!(cfg->temperature > 0)) {  // greedy: first maximum
        int best = 0;
        for (int j = 1; j < V; j++) if (logits[j] > logits[best]) best = j;
        *logprob = 0.0f;
        return best;
    }
    float inv_t = (float)(1.0 / cfg->temperature), m = -INFINITY;
    for (int j = 0; j < V; j++) m = logits[j] > m ? logits[j] : m;
    // exp over the whole vocabulary dominates sampling: kernels/simd.h's
    // vectorised exp (2 ulp), summed in double.
    for (int j = 0; j < V; j++) s->p[j] = (logits[j] - m) * inv_t;
    simd_exp(s->p, V);
    double sum = 0;
    for (int j = 0; j < V; j++) sum += s->p[j];
    bool truncate = (cfg->top_k > 0 && cfg->top_k < V) || (cfg->top_p > 0 && cfg->top_p < 1);
    if (!truncate) {
        double u = rng_uniform(rng) * sum, acc = 0;
        int tok = V - 1;
        for (int j = 0; j < V; j++) {
            acc += s->p[j];
            if (u < acc) { tok = j; break; }
        }
        while (s->p[tok] == 0 && tok > 0) tok--;  // u landed on rounding slack
        *logprob = (float)(log(s->p[tok]) - log(sum));
        return tok;
    }
    // Candidates in descending probability; keep the top k, then the smallest
    // prefix whose mass reaches top_p (as HF's TopKLogitsWarper then TopPLogitsWarper).
    for (int j = 0; j < V; j++) s->idx[j] = j;
    qsort_r(s->idx, (size_t)V, sizeof *s->idx, by_prob_desc, s->p);
    int keep = cfg->top_k > 0 && cfg->top_k < V ? cfg->top_k : V;
    double kept = 0;
    for (int j = 0; j < keep; j++) kept += s->p[s->idx[j]];
    if (cfg->top_p > 0 && cfg->top_p < 1) {
        double acc = 0;
        int n = 0;
        while (n < keep) {
            acc += s->p[s->idx[n++]];
            if (acc >= cfg->top_p * kept) break;
        }
        keep = n;
        kept = acc;
    }
    double u = rng_uniform(rng) * kept, acc = 0;
    int tok = s->idx[keep - 1];
    for (int j = 0; j < keep; j++) {
        acc += s->p[s->idx[j]];
        if (u < acc) { tok = s->idx[j]; break; }
    }
    *logprob = (float)(log(s->p[tok]) - log(kept));
    return tok;
}
