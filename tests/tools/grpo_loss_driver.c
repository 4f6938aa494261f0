// Test driver for validation/grpo/check_loss.py: reads one batch as JSON on
// stdin, runs pail's advantages and loss, prints advantages, loss and
// d loss / d new_lp as JSON on stdout. Optionally splits the batch into
// micro-batches ("micro": k) to exercise gradient accumulation.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grpo/loss.h"

static float *floats(json_t *a, size_t *n) {
    *n = json_array_size(a);
    float *v = calloc(*n + 1, sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (float)json_number_value(json_array_get(a, i));
    return v;
}

int main(void) {
    json_error_t jerr;
    json_t *in = json_loadf(stdin, 0, &jerr);
    if (!in) { fprintf(stderr, "grpo_loss_driver: bad JSON on stdin: %s\n", jerr.text); return 2; }
    size_t nt, nr, n_old, n_ref = 0;
    float *new_lp = floats(json_object_get(in, "new"), &nt), *old_lp = floats(json_object_get(in, "old"), &n_old);
    float *rewards = floats(json_object_get(in, "rewards"), &nr);
    json_t *ref = json_object_get(in, "ref");
    float *ref_lp = ref ? floats(ref, &n_ref) : NULL;
    json_t *lens = json_object_get(in, "lens"), *valid_j = json_object_get(in, "valid");
    int P = (int)json_integer_value(json_object_get(in, "P")), G = (int)json_integer_value(json_object_get(in, "G"));
    int n = P * G, micro = json_object_get(in, "micro") ? (int)json_integer_value(json_object_get(in, "micro")) : 1;
    int64_t *off = calloc((size_t)n + 1, sizeof *off);
    uint8_t *valid = calloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        off[i + 1] = off[i] + json_integer_value(json_array_get(lens, (size_t)i));
        valid[i] = valid_j ? (uint8_t)json_integer_value(json_array_get(valid_j, (size_t)i)) : 1;
    }
    if ((size_t)off[n] != nt || n_old != nt || (ref_lp && n_ref != nt) || nr != (size_t)n) {
        fprintf(stderr, "grpo_loss_driver: sizes disagree\n");
        return 2;
    }
    const char *scale = json_string_value(json_object_get(in, "scale_rewards"));
    const char *type = json_string_value(json_object_get(in, "loss_type"));
    const char *ratio = json_string_value(json_object_get(in, "ratio"));
    GrpoLossConfig cfg = {
        .type = !strcmp(type, "dapo") ? LOSS_DAPO : !strcmp(type, "grpo") ? LOSS_GRPO : LOSS_DR_GRPO,
        .ratio = !strcmp(ratio, "sequence") ? RATIO_SEQUENCE : RATIO_TOKEN,
        .eps_low = json_number_value(json_object_get(in, "eps_low")),
        .eps_high = json_number_value(json_object_get(in, "eps_high")),
        .tis_cap = json_number_value(json_object_get(in, "tis_cap")),
        .beta = json_number_value(json_object_get(in, "beta")),
    };
    ScaleRewards sr = !strcmp(scale, "group") ? SCALE_GROUP : !strcmp(scale, "batch") ? SCALE_BATCH : SCALE_NONE;
    float *adv = calloc((size_t)n, sizeof *adv), *grad = calloc(nt + 1, sizeof *grad);
    AdvantageStats ast;
    grpo_advantages(adv, &ast, rewards, valid, P, G, sr);
    int64_t comps = 0, toks = 0;
    for (int i = 0; i < n; i++) if (valid[i]) { comps++; toks += off[i + 1] - off[i]; }
    double norm = grpo_loss_norm(cfg.type, comps, toks, json_integer_value(json_object_get(in, "max_new_tokens")));
    GrpoLossStats st = {0};
    // Micro-batches of whole completions; offsets rebased per micro-batch.
    for (int m = 0; m < micro; m++) {
        int lo = n * m / micro, hi = n * (m + 1) / micro;
        int64_t base = off[lo];
        int64_t *moff = calloc((size_t)(hi - lo) + 1, sizeof *moff);
        for (int i = lo; i <= hi; i++) moff[i - lo] = off[i] - base;
        grpo_loss_forward_backward(&st, grad + base, new_lp + base, old_lp + base, ref_lp ? ref_lp + base : NULL, moff,
                                   hi - lo, adv + lo, valid + lo, &cfg, norm);
        free(moff);
    }
    json_t *out = json_object(), *ja = json_array(), *jg = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(ja, json_real(adv[i]));
    for (size_t t = 0; t < nt; t++) json_array_append_new(jg, json_real(grad[t]));
    json_object_set_new(out, "adv", ja);
    json_object_set_new(out, "grad", jg);
    json_object_set_new(out, "loss", json_real(st.loss));
    json_object_set_new(out, "zero_spread_groups", json_integer(ast.zero_spread_groups));
    json_object_set_new(out, "clipped_low", json_integer(st.clipped_low));
    json_object_set_new(out, "clipped_high", json_integer(st.clipped_high));
    json_dumpf(out, stdout, JSON_COMPACT);
    putchar('\n');
    return 0;
}
