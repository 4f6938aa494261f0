// The mixture-of-experts part of config.json (config_moe.h): qwen3_moe, qwen2_moe, olmoe,
// granitemoe, mixtral and gpt_oss as transformers 5's Qwen3MoeConfig, Qwen2MoeConfig, OlmoeConfig,
// GraniteMoeConfig, MixtralConfig and GptOssConfig read them (their defaults for a field a file omits,
// their attribute_map spellings), and what their modeling files do with each field; gpt_oss's YaRN
// RoPE as modeling_rope_utils.py's _compute_yarn_parameters reads it.
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
        [MODEL_GPT_OSS] = {128, 4, 2880},
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
    // their routers always renormalise (gpt_oss: a softmax over the K chosen logits, the same weights)
    c->norm_topk_prob = t == MODEL_GRANITEMOE || t == MODEL_MIXTRAL || t == MODEL_GPT_OSS;
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
    case MODEL_GPT_OSS:  // GptOssConfig: biases, sinks, every other layer sliding (128), YaRN 32x of 4096
        c->has_qkv_bias = c->has_o_bias = c->attn_sinks = c->moe_bias = true;
        c->swiglu_alpha = 1.702, c->swiglu_limit = 7.0;
        c->rope_theta = 150000.0;
        c->rms_norm_eps = 1e-5;
        c->max_position_embeddings = 131072;
        c->sliding_window = 128;
        model_config_gemma_layers(c, NULL, 2);
        config_yarn_defaults(c);
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

void config_yarn_defaults(ModelConfig *c) {
    // GptOssConfig's rope_parameters when a file gives none (truncate false there; absent from a file's
    // own yarn object it is true)
    c->rope_scaling = ROPE_SCALING_YARN;
    c->rope_factor = 32.0;
    c->rope_original_max_position_embeddings = 4096;
    c->rope_beta_fast = 32.0, c->rope_beta_slow = 1.0;
    c->rope_truncate = false;
    c->rope_attention_factor = 0;
}

int config_yarn_parse(ModelConfig *c, json_t *sc, const char *field, const char *what, PailErr *err) {
    // original_max_position_embeddings: the object's, else max_position_embeddings (standardize_rope_params;
    // GptOssConfig keeps no top-level one, so a file's is not read, as transformers does not)
    int omax = c->max_position_embeddings;
    if (config_get_int(sc, "original_max_position_embeddings", 1, 1 << 30, &omax, what, err) < 0) return -1;
    json_t *f = json_object_get(sc, "factor");
    if (!f) return err_set(err, PAIL_ERR_INVALID, "%s: %s.rope_type 'yarn' needs a number 'factor'", what, field);
    double factor = (double)c->max_position_embeddings / omax, af = 0, bf = 0, bs = 0;  // factor null: the ratio
    if (config_get_num(sc, "factor", 1e-6, 1e6, &factor, what, err) < 0 ||
        config_get_num(sc, "attention_factor", 1e-6, 1e6, &af, what, err) < 0 ||
        config_get_num(sc, "beta_fast", 0, 1e6, &bf, what, err) < 0 ||
        config_get_num(sc, "beta_slow", 0, 1e6, &bs, what, err) < 0)
        return -1;
    // deepseek's mscale / mscale_all_dim set the attention factor when both are given and it is not
    double ms = 0, msa = 0;
    if (config_get_num(sc, "mscale", -1e6, 1e6, &ms, what, err) < 0 ||
        config_get_num(sc, "mscale_all_dim", -1e6, 1e6, &msa, what, err) < 0)
        return -1;
    if (ms != 0 && msa != 0 && af == 0)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s.mscale = %g with mscale_all_dim = %g is not supported "
                                                  "(deepseek's YaRN attention factor; pail reads attention_factor, else 0.1 ln(factor) + 1)",
                       what, field, ms, msa);
    json_t *prf = json_object_get(sc, "partial_rotary_factor");
    if (prf && !json_is_null(prf) && !(json_is_number(prf) && json_number_value(prf) == 1.0))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s.partial_rotary_factor is not supported for %s (every "
                                                  "head dim rotates)",
                       what, field, model_type_name(c->type));
    json_t *tr = json_object_get(sc, "truncate");  // rope_parameters.get("truncate", True): null is falsy
    if (tr && !json_is_null(tr) && !json_is_boolean(tr))
        return err_set(err, PAIL_ERR_INVALID, "%s: %s.truncate is not a boolean", what, field);
    c->rope_scaling = ROPE_SCALING_YARN;
    c->rope_factor = factor;
    c->rope_original_max_position_embeddings = omax;
    c->rope_beta_fast = bf != 0 ? bf : 32.0;  // `or 32`, `or 1`: absent, null and 0 take the defaults
    c->rope_beta_slow = bs != 0 ? bs : 1.0;
    c->rope_truncate = !tr || json_is_true(tr);
    // get_mscale(factor) is 1 for factor <= 1: held explicitly, 0 meaning 0.1 ln(factor) + 1 above it
    c->rope_attention_factor = af != 0 ? af : factor <= 1.0 ? 1.0 :
                                                              0;
    return 0;
}

int config_moe_refuse(json_t *root, ModelType type, const char *what, PailErr *err) {
    if (type == MODEL_GPT_OSS) {
        // the published checkpoints' MXFP4 experts (_blocks / _scales tensors); GGUF import is gguf_import.c's
        json_t *q = json_object_get(root, "quantization_config");
        if (q && !json_is_null(q)) {
            const char *m = json_string_value(json_object_get(q, "quant_method"));
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: quantization_config (quant_method '%s') is not supported: "
                                                      "pail loads gpt_oss safetensors with F32/BF16/F16 experts (dequantize them first, e.g. "
                                                      "transformers' Mxfp4Config(dequantize=True) and save_pretrained)",
                           what, m ? m : "?");
        }
        json_t *lim = json_object_get(root, "swiglu_limit");
        if (lim && (!json_is_number(lim) || !(json_number_value(lim) > 0)))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: swiglu_limit = %g is not supported (a positive clamp)",
                           what, json_is_number(lim) ? json_number_value(lim) : -1.0);
    }
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
    case MODEL_GPT_OSS:
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

// gpt_oss: GptOssConfig's defaults where config.c's differ (head_dim 64, num_key_value_heads 8,
// attention_bias true when absent), sliding_window (null: the sliding layers see everything),
// layer_types (default: even layers sliding, odd full), swiglu_alpha / swiglu_limit.
static int gpt_oss_parse(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    if (!json_object_get(root, "head_dim")) c->head_dim = 64;
    if (!json_object_get(root, "num_key_value_heads")) c->num_key_value_heads = 8;
    json_t *ab = json_object_get(root, "attention_bias");
    c->has_qkv_bias = c->has_o_bias = !ab || json_is_true(ab);
    json_t *sw = json_object_get(root, "sliding_window");
    if (sw && json_is_null(sw)) c->sliding_window = 0;
    else if (config_get_int(root, "sliding_window", 1, 1 << 30, &c->sliding_window, what, err) < 0) return -1;
    if (config_get_num(root, "swiglu_alpha", 1e-6, 1e6, &c->swiglu_alpha, what, err) < 0 ||
        config_get_num(root, "swiglu_limit", 1e-6, 1e6, &c->swiglu_limit, what, err) < 0)
        return -1;
    int L = c->num_hidden_layers;
    json_t *lt = json_object_get(root, "layer_types");
    if (!lt || json_is_null(lt)) {
        model_config_gemma_layers(c, NULL, 2);
        return 0;
    }
    if (!json_is_array(lt) || (int)json_array_size(lt) != L)
        return err_set(err, PAIL_ERR_INVALID, "%s: layer_types is not a list of %d entries (one per layer)", what, L);
    unsigned char full[MODEL_MAX_LAYERS];
    for (int l = 0; l < L; l++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)l));
        if (!s || (strcmp(s, "full_attention") && strcmp(s, "sliding_attention")))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: layer_types[%d] = '%s' is not supported (full_attention "
                                                      "or sliding_attention)",
                           what, l, s ? s : "(not a string)");
        full[l] = !strcmp(s, "full_attention");
    }
    model_config_gemma_layers(c, full, 2);
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
    if (t == MODEL_GPT_OSS && gpt_oss_parse(c, root, what, err) < 0) return -1;
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
    json_object_set_new(o, t == MODEL_GRANITEMOE || t == MODEL_MIXTRAL || t == MODEL_GPT_OSS ? "num_local_experts" : "num_experts",
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
    } else if (t == MODEL_GPT_OSS) {
        json_object_set_new(o, "head_dim", json_integer(c->head_dim));
        json_object_set_new(o, "attention_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "sliding_window", c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
        json_t *lt = json_array();
        for (int l = 0; l < c->num_hidden_layers; l++)
            json_array_append_new(lt, json_string((c->full_attn[l >> 6] >> (l & 63)) & 1 ? "full_attention" : "sliding_attention"));
        json_object_set_new(o, "layer_types", lt);
        json_object_set_new(o, "swiglu_alpha", json_real(c->swiglu_alpha));
        json_object_set_new(o, "swiglu_limit", json_real(c->swiglu_limit));
        json_object_set_new(o, "router_aux_loss_coef", json_real(0.9));
        json_object_set_new(o, "pad_token_id", json_null());
        json_t *rp;  // the published spelling: rope_theta at the top level, rope_scaling
        if (c->rope_scaling == ROPE_SCALING_YARN) {
            rp = json_pack("{s:s,s:f,s:f,s:f,s:i,s:b}", "rope_type", "yarn", "factor", c->rope_factor, "beta_fast",
                           c->rope_beta_fast, "beta_slow", c->rope_beta_slow, "original_max_position_embeddings",
                           c->rope_original_max_position_embeddings, "truncate", (int)c->rope_truncate);
            if (c->rope_attention_factor > 0)
                json_object_set_new(rp, "attention_factor", json_real(c->rope_attention_factor));
        } else {  // null would be GptOssConfig's YaRN
            rp = json_pack("{s:s}", "rope_type", "default");
        }
        json_object_set_new(o, "rope_scaling", rp);
    }
}
