// Sampling settings from generation_config.json, and sample_token: one row of
// kernels/sample.c's op (the one sampler of the code base; see sampler.h).
#include "rollout/sampler.h"
#include "kernels.h"
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool sampler_temperature_ok(double t, double max) { return t == 0 || (t >= SAMPLER_MIN_TEMPERATURE && t <= max); }

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
        {"temperature", SAMPLER_KEEP_TEMPERATURE, 0, 100}, {"top_p", SAMPLER_KEEP_TOP_P, 0, 1},
        {"top_k", SAMPLER_KEEP_TOP_K, 0, 1 << 24}, {"min_p", SAMPLER_KEEP_MIN_P, 0, 1}};
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
        if (i == 0 && !sampler_temperature_ok(x, keys[i].hi)) {
            json_decref(g);
            return err_set(err, PAIL_ERR_INVALID, "%s: temperature %g is neither 0 (greedy) nor at least %g", path, x,
                           SAMPLER_MIN_TEMPERATURE);
        }
        if (i == 0) out.temperature = x;
        else if (i == 1) out.top_p = x;
        else if (i == 2) out.top_k = (int)x;
        else out.min_p = x;
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

int sample_token(const float *logits, const SamplerConfig *cfg, Rng *rng, SamplerScratch *s, float *logprob) {
    SampleParams sp = {.temperature = cfg->temperature, .top_p = cfg->top_p, .min_p = cfg->min_p, .top_k = cfg->top_k};
    return sample_row(logprob, rng->s, logits, &sp, s->p, s->idx, s->V);
}
