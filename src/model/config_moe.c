// The mixture-of-experts part of config.json (config_moe.h): qwen3_moe, qwen2_moe, olmoe,
// granitemoe and mixtral as transformers 5's Qwen3MoeConfig, Qwen2MoeConfig, OlmoeConfig,
// GraniteMoeConfig and MixtralConfig read them (their defaults for a field a file omits, their
// attribute_map spellings), and what their modeling files do with each field.
#include "model/config_moe.h"
#include <stdio.h>
#include <string.h>
#include "kernels.h"

void config_moe_defaults(ModelConfig *c, const ModelConfig *caller) {
    // the configuration classes' defaults: E, K, Fe (moe_intermediate_size or intermediate_size)
    static const int dflt[MODEL_TYPE_COUNT][3] = {
        [MODEL_QWEN3_MOE] = {128, 8, 768},
        [MODEL_QWEN2_MOE] = {60, 4, 1408},
        [MODEL_OLMOE] = {64, 8, 2048},
        [MODEL_GRANITEMOE] = {8, 2, 11008},
        [MODEL_MIXTRAL] = {8, 2, 14336},
    };
    ModelType t = c->type;
    bool qwen = t == MODEL_QWEN3_MOE || t == MODEL_QWEN2_MOE;
    c->num_experts = caller->num_experts ? caller->num_experts : dflt[t][0];
    c->num_experts_per_tok = caller->num_experts_per_tok ? caller->num_experts_per_tok : dflt[t][1];
    // olmoe, granitemoe, mixtral: the experts' size is intermediate_size
    int fe = caller->moe_intermediate_size ? caller->moe_intermediate_size : !qwen && caller->intermediate_size ? caller->intermediate_size :
                                                                                                                  dflt[t][2];
    c->moe_intermediate_size = fe;
    c->dense_intermediate_size = !qwen ? fe : caller->dense_intermediate_size ? caller->dense_intermediate_size :
                                          caller->intermediate_size           ? caller->intermediate_size :
                                                                                fe;
    // qwen2_moe's intermediate_size is its shared expert's (the caller's, else 5632); no dense MLP elsewhere
    c->intermediate_size = t == MODEL_QWEN2_MOE ? (caller->intermediate_size ? caller->intermediate_size : 5632) : 0;
    c->norm_topk_prob = t == MODEL_GRANITEMOE || t == MODEL_MIXTRAL;  // their routers always renormalise
    switch (t) {
    case MODEL_QWEN3_MOE: c->has_qk_norm = true; break;   // per head (D)
    case MODEL_QWEN2_MOE: c->has_qkv_bias = true; break;  // Qwen2MoeConfig.qkv_bias
    case MODEL_OLMOE:                                     // OlmoeConfig: q/k norms over the whole projection, pre-norm layers (not olmo2's post)
        c->has_qk_norm = c->qk_norm_whole = true;
        c->rms_norm_eps = 1e-5;
        c->max_position_embeddings = 4096;
        break;
    case MODEL_GRANITEMOE:
        c->embedding_multiplier = c->residual_multiplier = c->attention_multiplier = c->logits_scaling = 1.0;
        c->max_position_embeddings = 2048;
        break;
    case MODEL_MIXTRAL:  // sliding_window None: full attention
        c->rope_theta = 1000000.0;
        c->rms_norm_eps = 1e-5;
        c->max_position_embeddings = 4096 * 32;
        break;
    default: break;
    }
}

static int get_bool(json_t *root, const char *key, bool *out, const char *what, PailErr *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return err_set(err, PAIL_ERR_INVALID, "%s: %s is not a boolean", what, key);
    *out = json_is_true(v);
    return 0;
}

int config_moe_refuse(json_t *root, ModelType type, const char *what, PailErr *err) {
    if (type == MODEL_GPT_OSS)  // its parsing is under way (issue 48)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: model_type = 'gpt_oss' is not supported yet", what);
    if (type == MODEL_QWEN3_MOE || type == MODEL_QWEN2_MOE) {
        // Qwen*MoeDecoderLayer: a layer in mlp_only_layers, or with (l + 1) % decoder_sparse_step != 0, is dense
        json_t *m = json_object_get(root, "mlp_only_layers");
        if (m && !json_is_null(m) && (!json_is_array(m) || json_array_size(m)))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: mlp_only_layers is not empty: dense layers inside a "
                                                      "mixture-of-experts model are not supported (every layer's MLP must be routed)",
                           what);
        json_t *s = json_object_get(root, "decoder_sparse_step");
        if (s && !json_is_null(s) && !(json_is_integer(s) && json_integer_value(s) == 1))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: decoder_sparse_step = %lld: dense layers inside a "
                                                      "mixture-of-experts model are not supported (only 1: every layer routed)",
                           what,
                           json_is_integer(s) ? (long long)json_integer_value(s) : -1LL);
    }
    if (type == MODEL_OLMOE) {  // OlmoeAttention clamps q, k and v to +-clip_qkv
        json_t *cq = json_object_get(root, "clip_qkv");
        if (cq && !json_is_null(cq))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: clip_qkv = %g is not supported (only null)", what,
                           json_is_number(cq) ? json_number_value(cq) : -1.0);
    }
    // mixtral's router_jitter_noise multiplies the MoE input by U(1 - r, 1 + r) only in training mode
    // (MixtralSparseMoeBlock: self.training and jitter_noise > 0), a regulariser; pail's forward is the
    // eval-mode one in training as well, so a non-zero value is accepted and not applied.
    return 0;
}

// E from the spellings the type's configuration class reads (its attribute_map's alias too); both
// present must agree.
static int get_experts(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    const char *names[2] = {NULL, NULL};
    switch (c->type) {
    case MODEL_QWEN3_MOE:
    case MODEL_OLMOE:
    case MODEL_MIXTRAL:
        names[0] = "num_experts", names[1] = "num_local_experts";
        break;
    case MODEL_QWEN2_MOE: names[0] = "num_experts"; break;
    default: names[0] = "num_local_experts"; break;  // granitemoe
    }
    int got[2] = {0, 0};
    for (int i = 0; i < 2 && names[i]; i++) {
        json_t *v = json_object_get(root, names[i]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_integer(v)) return err_set(err, PAIL_ERR_INVALID, "%s: '%s' is not an integer", what, names[i]);
        long long e = json_integer_value(v);
        if (e < 1 || e > MOE_MAX_EXPERTS)
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s = %lld is not supported (pail runs 1 to %d experts; "
                                                      "0 would make every layer dense)",
                           what, names[i], e, MOE_MAX_EXPERTS);
        got[i] = (int)e;
    }
    if (got[0] && got[1] && got[0] != got[1])
        return err_set(err, PAIL_ERR_INVALID, "%s: %s = %d and %s = %d disagree", what, names[0], got[0], names[1],
                       got[1]);
    if (got[0] || got[1]) c->num_experts = got[0] ? got[0] : got[1];
    return 0;
}

int config_moe_parse(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    ModelType t = c->type;
    bool qwen = t == MODEL_QWEN3_MOE || t == MODEL_QWEN2_MOE;
    int file_f = c->intermediate_size;  // config.json's (required)
    c->dense_intermediate_size = file_f;
    if (get_experts(c, root, what, err) < 0 ||
        config_get_int(root, "num_experts_per_tok", 1, MOE_MAX_EXPERTS, &c->num_experts_per_tok, what, err) < 0)
        return -1;
    if (c->num_experts_per_tok > c->num_experts)
        return err_set(err, PAIL_ERR_INVALID, "%s: num_experts_per_tok = %d is more than the %d experts", what,
                       c->num_experts_per_tok, c->num_experts);
    if (qwen) {
        if (config_get_int(root, "moe_intermediate_size", 1, 1 << 20, &c->moe_intermediate_size, what, err) < 0)
            return -1;
    } else {
        c->moe_intermediate_size = file_f;
    }
    if ((qwen || t == MODEL_OLMOE) && get_bool(root, "norm_topk_prob", &c->norm_topk_prob, what, err) < 0) return -1;
    c->intermediate_size = 0;
    if (t == MODEL_QWEN2_MOE) {  // the shared expert: the dense MLP families, under a sigmoid gate
        int shared = 5632;       // Qwen2MoeConfig's default
        if (config_get_int(root, "shared_expert_intermediate_size", 1, 1 << 20, &shared, what, err) < 0 ||
            get_bool(root, "qkv_bias", &c->has_qkv_bias, what, err) < 0)
            return -1;
        c->intermediate_size = shared;
        c->has_o_bias = false;  // Qwen2MoeAttention's o_proj has no bias
    }
    if (t == MODEL_OLMOE && c->head_dim * c->num_attention_heads != c->hidden_size)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: head_dim = %d: olmoe's q_norm is over hidden_size %d, so "
                                                  "head_dim must be hidden_size / num_attention_heads (%d)",
                       what, c->head_dim, c->hidden_size,
                       c->hidden_size / c->num_attention_heads);
    if (t == MODEL_GRANITEMOE &&
        (config_get_num(root, "embedding_multiplier", 1e-6, 1e6, &c->embedding_multiplier, what, err) < 0 ||
         config_get_num(root, "residual_multiplier", 1e-6, 1e6, &c->residual_multiplier, what, err) < 0 ||
         config_get_num(root, "attention_multiplier", 1e-6, 1e6, &c->attention_multiplier, what, err) < 0 ||
         config_get_num(root, "logits_scaling", 1e-6, 1e6, &c->logits_scaling, what, err) < 0))
        return -1;
    if (t == MODEL_MIXTRAL) {  // MixtralConfig: sliding_window None (null or absent) = full attention
        json_t *sw = json_object_get(root, "sliding_window");
        c->sliding_window = 0;
        if (sw && !json_is_null(sw) &&
            config_get_int(root, "sliding_window", 1, 1 << 30, &c->sliding_window, what, err) < 0)
            return -1;
    }
    return 0;
}

void config_moe_to_json(const ModelConfig *c, json_t *o) {
    ModelType t = c->type;
    json_object_set_new(o, "num_experts_per_tok", json_integer(c->num_experts_per_tok));
    json_object_set_new(o, "output_router_logits", json_false());
    // the published checkpoints' spelling: num_experts for qwen*_moe and olmoe, num_local_experts for
    // granitemoe and mixtral (qwen3_moe's attribute_map reads either)
    json_object_set_new(o, t == MODEL_GRANITEMOE || t == MODEL_MIXTRAL ? "num_local_experts" : "num_experts",
                        json_integer(c->num_experts));
    bool qwen = t == MODEL_QWEN3_MOE || t == MODEL_QWEN2_MOE;  // the others' intermediate_size is the experts'
    json_object_set_new(o, "intermediate_size",
                        json_integer(qwen && c->dense_intermediate_size ? c->dense_intermediate_size : c->moe_intermediate_size));
    if (t == MODEL_QWEN3_MOE || t == MODEL_QWEN2_MOE) {
        json_object_set_new(o, "moe_intermediate_size", json_integer(c->moe_intermediate_size));
        json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
        json_object_set_new(o, "decoder_sparse_step", json_integer(1));
        json_object_set_new(o, "mlp_only_layers", json_array());
        json_object_set_new(o, "use_sliding_window", json_false());
        json_object_set_new(o, "sliding_window", json_null());
        json_object_set_new(o, "max_window_layers", json_integer(c->num_hidden_layers));
    }
    if (t == MODEL_QWEN3_MOE) {
        json_object_set_new(o, "attention_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    } else if (t == MODEL_QWEN2_MOE) {
        json_object_set_new(o, "qkv_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->intermediate_size));
        if (c->head_dim * c->num_attention_heads != c->hidden_size)
            json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    } else if (t == MODEL_OLMOE) {
        json_object_set_new(o, "attention_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
        json_object_set_new(o, "clip_qkv", json_null());
        json_object_set_new(o, "pad_token_id", json_null());  // OlmoeConfig's default 1 is a real token
    } else if (t == MODEL_GRANITEMOE) {
        json_object_set_new(o, "attention_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "embedding_multiplier", json_real(c->embedding_multiplier));
        json_object_set_new(o, "residual_multiplier", json_real(c->residual_multiplier));
        json_object_set_new(o, "attention_multiplier", json_real(c->attention_multiplier));
        json_object_set_new(o, "logits_scaling", json_real(c->logits_scaling));
        if (c->head_dim * c->num_attention_heads != c->hidden_size)
            json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    } else if (t == MODEL_MIXTRAL) {  // MixtralAttention has no biases
        json_object_set_new(o, "head_dim", json_integer(c->head_dim));
        json_object_set_new(o, "sliding_window", c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
        json_object_set_new(o, "router_jitter_noise", json_real(0.0));
    }
}
