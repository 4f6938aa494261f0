// Random weights for the model suites' small configs: allocates w for c and
// fills it N(0, scale^2), the norm weights near 1 as trained models have
// (1 + N(0, 0.01)). Deterministic in seed and stream.
#pragma once
#include <check.h>
#include "core/rng.h"
#include "model/weights.h"

static inline void model_fill_random(ModelWeights *w, const ModelConfig *c, double scale, uint64_t seed,
                                     uint64_t stream) {
    PailErr err = {0};
    ck_assert_msg(model_weights_alloc(w, c, &err) == 0, "%s", err.msg);
    Rng r;
    rng_seed(&r, seed, stream);
    float *m = model_weights_f32(w);
    for (size_t i = 0; i < w->num_params; i++) m[i] = (float)(scale * rng_normal(&r));
    ModelParamId norms[] = {PARAM_ATTN_NORM, PARAM_MLP_NORM, PARAM_FINAL_NORM, PARAM_Q_NORM, PARAM_K_NORM};
    for (size_t k = 0; k < sizeof norms / sizeof norms[0]; k++) {
        if (!w->specs[norms[k]].present) continue;
        size_t n = w->specs[norms[k]].numel * (w->specs[norms[k]].per_layer ? (size_t)c->num_hidden_layers : 1);
        float *p = m + w->offsets[norms[k]];
        for (size_t i = 0; i < n; i++) p[i] = 1.0f + 0.1f * (float)rng_normal(&r);
    }
}
