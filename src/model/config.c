// config.json / generation_config.json reading and config.json writing for the
// llama, qwen2, qwen3, mistral, exaone, smollm3, granite, olmo2, phi3, cohere and cohere2 dense decoders
// (see config.h). Defaults are those of transformers' LlamaConfig / Qwen2Config / Qwen3Config /
// MistralConfig / ExaoneConfig / SmolLM3Config / GraniteConfig / Olmo2Config / Phi3Config / CohereConfig /
// Cohere2Config for a field a file omits. The mixtures of experts' fields are config_moe.c's.
#include "model/config.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "kernels.h"
#include "model/config_moe.h"

static const char *type_names[MODEL_TYPE_COUNT] = {"llama", "qwen2", "qwen3", "mistral", "exaone", "smollm3",
                                                    "granite", "olmo2", "phi3", "cohere", "cohere2", "gemma2",
                                                    "gemma3_text", "qwen3_moe", "qwen2_moe", "olmoe", "granitemoe",
                                                    "mixtral",     "gpt_oss"};
// exaone: the published checkpoints' name (transformers maps model_type exaone to its llama classes)
static const char *arch_names[MODEL_TYPE_COUNT] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                                   "MistralForCausalLM", "ExaoneForCausalLM", "SmolLM3ForCausalLM",
                                                   "GraniteForCausalLM", "Olmo2ForCausalLM", "Phi3ForCausalLM",
                                                   "CohereForCausalLM", "Cohere2ForCausalLM", "Gemma2ForCausalLM",
                                                   "Gemma3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM",
                                                   "OlmoeForCausalLM", "GraniteMoeForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM"};

const char *model_type_name(ModelType t) { return (unsigned)t < MODEL_TYPE_COUNT ? type_names[t] : "?"; }

int model_type_parse(const char *s, ModelType *out) {
    for (int i = 0; i < MODEL_TYPE_COUNT; i++)
        if (!strcmp(s, type_names[i])) { *out = (ModelType)i; return 0; }
    return -1;
}

void model_config_defaults(ModelConfig *cfg, ModelType type) {
    ModelConfig c = {0};
    c.type = type;
    c.rms_norm_eps = 1e-6;
    // ExaoneConfig's and SmolLM3Config's default_theta
    c.rope_theta = type == MODEL_EXAONE ? 500000.0 : type == MODEL_SMOLLM3 ? 2000000.0 : 10000.0;
    c.tie_word_embeddings = type == MODEL_SMOLLM3;  // SmolLM3Config: tied unless the file says otherwise
    if (type == MODEL_GRANITE)  // GraniteConfig's defaults: all 1 (attention_multiplier replaces 1/sqrt(D))
        c.embedding_multiplier = c.residual_multiplier = c.attention_multiplier = c.logits_scaling = 1.0;
    c.max_position_embeddings = type == MODEL_LLAMA ? 2048 : type == MODEL_MISTRAL ? 4096 * 32
                                : type == MODEL_EXAONE ? 4096 : 32768;
    c.has_qkv_bias = type == MODEL_QWEN2;
    c.has_qk_norm = type == MODEL_QWEN3 || type == MODEL_OLMO2;
    c.post_norm = c.qk_norm_whole = type == MODEL_OLMO2;
    c.sliding_window = type == MODEL_MISTRAL ? 4096 : 0;  // MistralConfig's default
    c.bos_token_id = -1;
    if (type == MODEL_PHI3) {  // Phi3Config's defaults
        c.rms_norm_eps = 1e-5;
        c.max_position_embeddings = 4096;
    }
    if (type == MODEL_COHERE || type == MODEL_COHERE2) {  // CohereConfig's / Cohere2Config's defaults (tied, ...)
        c.parallel_block = c.layer_norm = c.rope_interleaved = true;
        c.logit_scale = 0.0625;
        c.rms_norm_eps = 1e-5;
        c.rope_theta = 500000.0;
        c.max_position_embeddings = 8192;
        c.tie_word_embeddings = true;
        if (type == MODEL_COHERE2) c.rope_theta = 10000.0, c.sliding_window = 4096;  // Cohere2Config
    }
    bool gemma = type == MODEL_GEMMA2 || type == MODEL_GEMMA3_TEXT;
    if (gemma) {  // Gemma2Config / Gemma3TextConfig's defaults
        c.gemma_norms = true;
        c.has_qk_norm = type == MODEL_GEMMA3_TEXT;
        c.tie_word_embeddings = true;
        c.max_position_embeddings = type == MODEL_GEMMA2 ? 8192 : 131072;
        c.rope_theta = type == MODEL_GEMMA2 ? 10000.0 : 1000000.0;
        c.rope_local_theta = type == MODEL_GEMMA3_TEXT ? 10000.0 : 0;
        c.sliding_window = 4096;
        c.query_pre_attn_scalar = 256;
        c.attn_logit_softcapping = type == MODEL_GEMMA2 ? 50.0 : 0;
        c.final_logit_softcapping = type == MODEL_GEMMA2 ? 30.0 : 0;
    }
    // keep the sizes a caller already set
    c.hidden_size = cfg->hidden_size;
    c.intermediate_size = cfg->intermediate_size;
    c.num_hidden_layers = cfg->num_hidden_layers;
    c.num_attention_heads = cfg->num_attention_heads;
    c.num_key_value_heads = cfg->num_key_value_heads ? cfg->num_key_value_heads : cfg->num_attention_heads;
    c.vocab_size = cfg->vocab_size;
    c.head_dim = cfg->head_dim ? cfg->head_dim
                 : cfg->num_attention_heads ? cfg->hidden_size / cfg->num_attention_heads : 0;
    if (gemma) {
        model_config_gemma_layers(&c, NULL, 0);
        model_config_gemma_scales(&c);
    }
    if (model_type_is_moe(type)) config_moe_defaults(&c, cfg);
    *cfg = c;
}

void model_config_set_layer_pattern(ModelConfig *c, int pattern) {
    memset(c->full_attn, 0, sizeof c->full_attn);
    memset(c->no_rope, 0, sizeof c->no_rope);
    for (int l = 0; l < c->num_hidden_layers && pattern > 0; l++)
        if ((l + 1) % pattern == 0) {
            c->full_attn[l >> 6] |= 1ULL << (l & 63);
            c->no_rope[l >> 6] |= 1ULL << (l & 63);
        }
}

// gemma's layer_types when a file gives none: gemma2 alternates (sliding on even layers), gemma3_text
// has every pattern-th layer full (Gemma3TextConfig's sliding_window_pattern, default 6).
void model_config_gemma_layers(ModelConfig *c, const unsigned char *full, int pattern) {
    memset(c->full_attn, 0, sizeof c->full_attn);
    if (!pattern) pattern = c->type == MODEL_GEMMA2 ? 2 : 6;
    for (int l = 0; l < c->num_hidden_layers && l < MODEL_MAX_LAYERS; l++)
        if (full ? full[l] : (l + 1) % pattern == 0) c->full_attn[l >> 6] |= 1ULL << (l & 63);
}

// gemma: inputs_embeds * sqrt(C) (fp32: transformers rounds it to the model's dtype, so a bf16
// transformers run multiplies by bf16(sqrt(C)); pail's bf16 weights compute in fp32 as transformers'
// fp32 run does), scores q.k * query_pre_attn_scalar^-0.5 (granite's two multipliers carry them).
void model_config_gemma_scales(ModelConfig *c) {
    c->embedding_multiplier = sqrt((double)c->hidden_size);
    c->attention_multiplier = c->query_pre_attn_scalar > 0 ? 1.0 / sqrt((double)c->query_pre_attn_scalar) : 0;
}

// ---- reading ----

// An integer field: absent/null -> *out unchanged (returns 0 with *present = 0).
static int get_int(json_t *root, const char *key, long min, long max, int *out, const char *what, PailErr *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v))
        return err_set(err, PAIL_ERR_INVALID, "%s: '%s' is not an integer", what, key);
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return err_set(err, PAIL_ERR_INVALID, "%s: %s = %lld is out of range [%ld, %ld]", what, key, (long long)x,
                       min, max);
    *out = (int)x;
    return 0;
}

static int get_num(json_t *root, const char *key, double min, double max, double *out, const char *what,
                   PailErr *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return err_set(err, PAIL_ERR_INVALID, "%s: '%s' is not a number", what, key);
    double x = json_number_value(v);
    if (!(x >= min && x <= max))
        return err_set(err, PAIL_ERR_INVALID, "%s: %s = %g is out of range [%g, %g]", what, key, x, min, max);
    *out = x;
    return 0;
}

int config_get_int(json_t *root, const char *key, long min, long max, int *out, const char *what, PailErr *err) {
    return get_int(root, key, min, max, out, what, err);
}

int config_get_num(json_t *root, const char *key, double min, double max, double *out, const char *what,
                   PailErr *err) {
    return get_num(root, key, min, max, out, what, err);
}

static int require(json_t *root, const char *key, const char *what, PailErr *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return err_set(err, PAIL_ERR_INVALID, "%s: required field '%s' is missing", what, key);
    return 0;
}

// bos_token_id: int or null; eos_token_id: int, list of ints, or null.
static int get_special_ids(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    json_t *b = json_object_get(root, "bos_token_id"), *e = json_object_get(root, "eos_token_id");
    if (b && !json_is_null(b)) {
        if (!json_is_integer(b) || json_integer_value(b) < 0 || json_integer_value(b) > (1 << 30))
            return err_set(err, PAIL_ERR_INVALID, "%s: bos_token_id is not a non-negative integer", what);
        c->bos_token_id = (int)json_integer_value(b);
    }
    if (e && !json_is_null(e)) {
        int n = 0;
        if (json_is_integer(e)) {
            if (json_integer_value(e) < 0 || json_integer_value(e) > (1 << 30))
                return err_set(err, PAIL_ERR_INVALID, "%s: eos_token_id is negative or too large", what);
            c->eos_token_ids[n++] = (int)json_integer_value(e);
        } else if (json_is_array(e)) {
            size_t i;
            json_t *x;
            json_array_foreach(e, i, x) {
                if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1 << 30))
                    return err_set(err, PAIL_ERR_INVALID, "%s: eos_token_id[%zu] is not a non-negative integer",
                                   what, i);
                if (n == MODEL_MAX_EOS)
                    return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: eos_token_id lists more than %d ids", what,
                                   MODEL_MAX_EOS);
                c->eos_token_ids[n++] = (int)json_integer_value(x);
            }
        } else {
            return err_set(err, PAIL_ERR_INVALID, "%s: eos_token_id is not an integer or a list", what);
        }
        c->n_eos = n;
    }
    return 0;
}

// rope: transformers 5 writes rope_parameters {rope_type, rope_theta, ...};
// published checkpoints carry rope_theta and rope_scaling {type|rope_type, ...}.
static int get_rope(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    json_t *rp = json_object_get(root, "rope_parameters");
    json_t *sc = json_object_get(root, "rope_scaling");
    const char *field = "rope_scaling";
    if (get_num(root, "rope_theta", 1, 1e12, &c->rope_theta, what, err) < 0) return -1;
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp)) return err_set(err, PAIL_ERR_INVALID, "%s: rope_parameters is not an object", what);
        if (get_num(rp, "rope_theta", 1, 1e12, &c->rope_theta, what, err) < 0) return -1;
        if (!sc || json_is_null(sc)) { sc = rp; field = "rope_parameters"; }
    }
    if (!sc || json_is_null(sc)) return 0;
    if (!json_is_object(sc)) return err_set(err, PAIL_ERR_INVALID, "%s: %s is not an object", what, field);
    json_t *t = json_object_get(sc, "rope_type");
    if (!t) t = json_object_get(sc, "type");
    const char *type = t ? json_string_value(t) : "default";
    if (!type) return err_set(err, PAIL_ERR_INVALID, "%s: %s.rope_type is not a string", what, field);
    if (!strcmp(type, "default")) {
        c->rope_scaling = ROPE_SCALING_NONE;  // gpt_oss's default (no object) is YaRN
        return 0;
    }
    if (c->type == MODEL_GPT_OSS && !strcmp(type, "yarn")) return config_yarn_parse(c, sc, field, what, err);
    if (c->type == MODEL_PHI3) {  // Phi3Config runs 'su' and 'yarn' as 'longrope'; read in get_phi3 (needs D)
        if (strcmp(type, "longrope") && strcmp(type, "su") && strcmp(type, "yarn"))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s.rope_type = '%s' is not supported for phi3 (pail "
                           "supports none/'default' and 'longrope')", what, field, type);
        c->rope_scaling = ROPE_SCALING_LONGROPE;
        return 0;
    }
    if (strcmp(type, "llama3"))
        return err_set(err, PAIL_ERR_UNSUPPORTED,
                       "%s: %s.rope_type = '%s' is not supported (pail supports none/'default' and 'llama3'; "
                       "'longrope' for phi3, 'yarn' for gpt_oss)", what, field, type);
    c->rope_scaling = ROPE_SCALING_LLAMA3;
    static const char *need[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    for (int i = 0; i < 4; i++)
        if (!json_is_number(json_object_get(sc, need[i])))
            return err_set(err, PAIL_ERR_INVALID, "%s: %s.rope_type 'llama3' needs a number '%s'", what, field,
                           need[i]);
    double omax = 0;
    if (get_num(sc, "factor", 1e-6, 1e6, &c->rope_factor, what, err) < 0 ||
        get_num(sc, "low_freq_factor", 1e-6, 1e6, &c->rope_low_freq_factor, what, err) < 0 ||
        get_num(sc, "high_freq_factor", 1e-6, 1e6, &c->rope_high_freq_factor, what, err) < 0 ||
        get_num(sc, "original_max_position_embeddings", 1, 1 << 30, &omax, what, err) < 0)
        return -1;
    c->rope_original_max_position_embeddings = (int)omax;
    if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
        return err_set(err, PAIL_ERR_INVALID, "%s: %s.high_freq_factor %g is not above low_freq_factor %g", what,
                       field, c->rope_high_freq_factor, c->rope_low_freq_factor);
    return 0;
}

// smollm3: no_rope_layers (one 0/1 per layer, 1 = RoPE), else every
// no_rope_layer_interval-th layer (default 4) without RoPE, as SmolLM3Config.
static int get_no_rope(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    int L = c->num_hidden_layers, interval = 4;
    json_t *v = json_object_get(root, "no_rope_layers");
    memset(c->no_rope, 0, sizeof c->no_rope);
    if (v && !json_is_null(v)) {
        if (!json_is_array(v) || (int)json_array_size(v) != L)
            return err_set(err, PAIL_ERR_INVALID, "%s: no_rope_layers is not a list of %d entries (one per layer)",
                           what, L);
        for (int l = 0; l < L; l++) {
            json_t *x = json_array_get(v, (size_t)l);
            if (!json_is_integer(x) || (json_integer_value(x) != 0 && json_integer_value(x) != 1))
                return err_set(err, PAIL_ERR_INVALID, "%s: no_rope_layers[%d] is not 0 or 1", what, l);
            if (!json_integer_value(x)) c->no_rope[l >> 6] |= 1ull << (l & 63);
        }
        return 0;
    }
    if (get_int(root, "no_rope_layer_interval", 1, 1 << 20, &interval, what, err) < 0) return -1;
    for (int l = 0; l < L; l++)
        if ((l + 1) % interval == 0) c->no_rope[l >> 6] |= 1ull << (l & 63);
    return 0;
}

// phi3's longrope (transformers' _compute_longrope_parameters): short_factor and long_factor, rd/2
// numbers each; original_max_position_embeddings from the top level as Phi3Config sets it (its
// default 4096; standardize_rope_params lets it override the scaling object's); attention_factor,
// else from factor (else max_position_embeddings / original_max).
static int get_longrope(ModelConfig *c, json_t *root, int rd, const char *what, PailErr *err) {
    json_t *sc = json_object_get(root, "rope_scaling");
    const char *field = "rope_scaling";
    if (!json_is_object(sc)) sc = json_object_get(root, "rope_parameters"), field = "rope_parameters";
    static const char *lists[2] = {"short_factor", "long_factor"};
    float *dst[2] = {c->rope_short_factor, c->rope_long_factor};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(sc, lists[k]);
        if (!json_is_array(v) || (int)json_array_size(v) != rd / 2)
            return err_set(err, PAIL_ERR_INVALID, "%s: %s.%s is not a list of %d numbers (rotary dims / 2)", what,
                           field, lists[k], rd / 2);
        for (int i = 0; i < rd / 2; i++) {
            json_t *x = json_array_get(v, (size_t)i);
            if (!json_is_number(x) || !(json_number_value(x) > 0) || !isfinite(json_number_value(x)))
                return err_set(err, PAIL_ERR_INVALID, "%s: %s.%s[%d] is not a positive number", what, field,
                               lists[k], i);
            dst[k][i] = (float)json_number_value(x);  // torch.tensor(.., dtype=float32)
        }
    }
    int omax = 4096;
    if (get_int(root, "original_max_position_embeddings", 1, 1 << 30, &omax, what, err) < 0) return -1;
    c->rope_original_max_position_embeddings = omax;
    double factor = (double)c->max_position_embeddings / omax, af = 0;
    if (get_num(sc, "factor", 1e-6, 1e6, &factor, what, err) < 0 ||
        get_num(sc, "attention_factor", 1e-6, 1e6, &af, what, err) < 0)
        return -1;
    c->rope_factor = factor;
    if (af == 0) af = factor <= 1.0 || omax < 2 ? 1.0 : sqrt(1 + log(factor) / log((double)omax));
    c->rope_attention_factor = af;
    return 0;
}

// phi3: sliding_window (every layer, as mistral's; null or absent = full, Phi3Config's None) and
// partial_rotary_factor (rope_parameters' when there, else the top level's; Phi3Config: 1.0):
// RoPE on the first int(D * factor) dims of each head, as Phi3RotaryEmbedding's dim.
static int get_phi3(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    json_t *swv = json_object_get(root, "sliding_window");
    if (swv && !json_is_null(swv) && get_int(root, "sliding_window", 1, 1 << 30, &c->sliding_window, what, err) < 0)
        return -1;
    double f = 1.0;
    json_t *rp = json_object_get(root, "rope_parameters");
    const char *fname = "partial_rotary_factor";
    if (json_is_object(rp) && json_object_get(rp, "partial_rotary_factor")) {
        if (get_num(rp, "partial_rotary_factor", 0, 1, &f, what, err) < 0) return -1;
        fname = "rope_parameters.partial_rotary_factor";
    } else if (get_num(root, "partial_rotary_factor", 0, 1, &f, what, err) < 0) {
        return -1;
    }
    int rd = (int)(c->head_dim * f);  // python's int(): toward zero
    if (rd < 2 || rd % 2)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s = %g gives %d rotary dims of head_dim %d (pail needs an "
                       "even number >= 2)", what, fname, f, rd, c->head_dim);
    c->rope_dim = rd < c->head_dim ? rd : 0;
    if (c->rope_scaling == ROPE_SCALING_LONGROPE) return get_longrope(c, root, rd, what, err);
    return 0;
}

// Features pail does not run: refused by name rather than silently ignored.
static int refuse_unsupported(json_t *root, ModelType type, const char *what, PailErr *err) {
    if (model_type_is_moe(type) && config_moe_refuse(root, type, what, err) < 0) return -1;
    static const char *moe[] = {"num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size",
                                "num_experts_per_tok"};
    for (size_t i = 0; !model_type_is_moe(type) && i < sizeof moe / sizeof moe[0]; i++) {  // a dense type's
        json_t *v = json_object_get(root, moe[i]);
        if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
            return err_set(err, PAIL_ERR_UNSUPPORTED,
                           "%s: %s = %lld: mixture-of-experts models are not supported", what, moe[i],
                           json_is_integer(v) ? (long long)json_integer_value(v) : -1LL);
    }
    // qwen2/qwen3's use_sliding_window windows only layers past max_window_layers;
    // mistral's sliding_window (every layer) is read in model_config_parse
    json_t *sw = json_object_get(root, "use_sliding_window");
    if (type != MODEL_MISTRAL && json_is_true(sw))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: use_sliding_window = true: %s's windowed layers are not "
                       "supported (mistral's window on every layer is)", what, type_names[type]);
    bool gemma = type == MODEL_GEMMA2 || type == MODEL_GEMMA3_TEXT;
    json_t *lt = json_object_get(root, "layer_types");
    // cohere2: get_cohere2_layers; gemma: get_gemma; gpt_oss: config_moe_parse
    if (!gemma && lt && json_is_array(lt) && type != MODEL_COHERE2 && type != MODEL_GPT_OSS) {
        size_t i;
        json_t *x;
        json_array_foreach(lt, i, x) {
            const char *s = json_string_value(x);
            if (!s || strcmp(s, "full_attention"))
                return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: layer_types[%zu] = '%s': only full_attention layers "
                               "are supported", what, i, s ? s : "(not a string)");
        }
    }
    if (gemma) {  // GemmaMLP: hidden_activation (hidden_act in older files), gelu_pytorch_tanh only
        static const char *keys[] = {"hidden_activation", "hidden_act"};
        for (int i = 0; i < 2; i++) {
            json_t *a = json_object_get(root, keys[i]);
            if (a && !json_is_null(a) && (!json_is_string(a) || strcmp(json_string_value(a), "gelu_pytorch_tanh")))
                return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s = '%s' is not supported (only gelu_pytorch_tanh)",
                               what, keys[i], json_is_string(a) ? json_string_value(a) : "?");
        }
        if (json_is_true(json_object_get(root, "use_bidirectional_attention")))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: use_bidirectional_attention = true is not supported "
                           "(causal decoders only)", what);
        return 0;
    }
    json_t *act = json_object_get(root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu")))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: hidden_act = '%s' is not supported (only silu)", what,
                       json_is_string(act) ? json_string_value(act) : "?");
    if (json_is_true(json_object_get(root, "mlp_bias")))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", what);
    json_t *tp = json_object_get(root, "pretraining_tp");
    if (json_is_integer(tp) && json_integer_value(tp) != 1)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: pretraining_tp = %lld is not supported (only 1)", what,
                       (long long)json_integer_value(tp));
    return 0;
}

// cohere2: layer_types (sliding_attention / full_attention, one per layer), else the legacy
// sliding_window_pattern (default 4: every 4th layer full), as Cohere2Config; sliding_window
// (default 4096) windows the sliding layers. head_dim is C / H whatever the file says.
static int get_cohere2_layers(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    int L = c->num_hidden_layers, pattern = 4;
    json_t *sw = json_object_get(root, "sliding_window");
    if (sw && json_is_null(sw))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: sliding_window = null is not supported for cohere2 (its "
                       "sliding layers would run without a window and without RoPE)", what);
    if (get_int(root, "sliding_window", 1, 1 << 30, &c->sliding_window, what, err) < 0) return -1;
    json_t *qn = json_object_get(root, "use_qk_norm");
    if (json_is_true(qn))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: use_qk_norm = true is not supported for cohere2 "
                       "(Cohere2Attention has no q/k norms)", what);
    if (c->head_dim != c->hidden_size / c->num_attention_heads || c->hidden_size % c->num_attention_heads)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: head_dim = %d: cohere2 uses hidden_size / num_attention_heads "
                       "(%d / %d)", what, c->head_dim, c->hidden_size, c->num_attention_heads);
    json_t *lt = json_object_get(root, "layer_types");
    if (!lt || json_is_null(lt)) {
        if (get_int(root, "sliding_window_pattern", 1, 1 << 20, &pattern, what, err) < 0) return -1;
        model_config_set_layer_pattern(c, pattern);
        return 0;
    }
    if (!json_is_array(lt) || (int)json_array_size(lt) != L)
        return err_set(err, PAIL_ERR_INVALID, "%s: layer_types is not a list of %d entries (one per layer)", what, L);
    model_config_set_layer_pattern(c, 0);
    for (int l = 0; l < L; l++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)l));
        if (s && !strcmp(s, "full_attention")) {
            c->full_attn[l >> 6] |= 1ULL << (l & 63);
            c->no_rope[l >> 6] |= 1ULL << (l & 63);
        } else if (!s || strcmp(s, "sliding_attention")) {
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: layer_types[%d] = '%s': cohere2 layers are "
                           "sliding_attention or full_attention", what, l, s ? s : "(not a string)");
        }
    }
    return 0;
}

// A number or null (null -> 0: "none"), for gemma's softcaps.
static int get_num_or_null(json_t *root, const char *key, double *out, const char *what, PailErr *err) {
    json_t *v = json_object_get(root, key);
    if (v && json_is_null(v)) { *out = 0; return 0; }
    return get_num(root, key, 1e-6, 1e6, out, what, err);
}

// gemma3_text's rope: global (full_attention) layers rope_theta with an optional linear
// scaling, sliding layers rope_local_base_freq; transformers 5 writes both in rope_parameters
// {"full_attention": {...}, "sliding_attention": {...}}, older files rope_theta,
// rope_local_base_freq and rope_scaling (applied to the full_attention layers).
static int get_rope_scaling_linear(ModelConfig *c, json_t *sc, const char *field, bool local, const char *what,
                                   PailErr *err) {
    if (!sc || json_is_null(sc)) return 0;
    if (!json_is_object(sc)) return err_set(err, PAIL_ERR_INVALID, "%s: %s is not an object", what, field);
    json_t *t = json_object_get(sc, "rope_type");
    if (!t) t = json_object_get(sc, "type");
    const char *type = t ? json_string_value(t) : "default";
    if (!type) return err_set(err, PAIL_ERR_INVALID, "%s: %s.rope_type is not a string", what, field);
    if (!strcmp(type, "default")) return 0;
    if (local || strcmp(type, "linear"))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s.rope_type = '%s' is not supported (gemma3_text: 'default'%s)",
                       what, field, type, local ? "" : " or 'linear'");
    if (!json_is_number(json_object_get(sc, "factor")))
        return err_set(err, PAIL_ERR_INVALID, "%s: %s.rope_type 'linear' needs a number 'factor'", what, field);
    if (get_num(sc, "factor", 1e-6, 1e6, &c->rope_factor, what, err) < 0) return -1;
    c->rope_scaling = ROPE_SCALING_LINEAR;
    return 0;
}

static int get_rope_gemma3(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    if (get_num(root, "rope_theta", 1, 1e12, &c->rope_theta, what, err) < 0 ||
        get_num(root, "rope_local_base_freq", 1, 1e12, &c->rope_local_theta, what, err) < 0 ||
        get_rope_scaling_linear(c, json_object_get(root, "rope_scaling"), "rope_scaling", false, what, err) < 0)
        return -1;
    json_t *rp = json_object_get(root, "rope_parameters");
    if (!rp || json_is_null(rp)) return 0;
    if (!json_is_object(rp)) return err_set(err, PAIL_ERR_INVALID, "%s: rope_parameters is not an object", what);
    json_t *full = json_object_get(rp, "full_attention"), *slide = json_object_get(rp, "sliding_attention");
    if (!full && !slide) full = rp;  // one flat dict: the global layers'
    if (full && (get_num(full, "rope_theta", 1, 1e12, &c->rope_theta, what, err) < 0 ||
                 get_rope_scaling_linear(c, full, "rope_parameters.full_attention", false, what, err) < 0))
        return -1;
    if (!slide || json_is_null(slide)) return 0;
    if (!json_is_object(slide))
        return err_set(err, PAIL_ERR_INVALID, "%s: rope_parameters.sliding_attention is not an object", what);
    if (get_num(slide, "rope_theta", 1, 1e12, &c->rope_local_theta, what, err) < 0 ||
        get_rope_scaling_linear(c, slide, "rope_parameters.sliding_attention", true, what, err) < 0)
        return -1;
    return 0;
}

// gemma2 / gemma3_text: sliding_window (null: every layer full), layer_types or
// sliding_window_pattern, query_pre_attn_scalar, the softcaps.
static int get_gemma(ModelConfig *c, json_t *root, const char *what, PailErr *err) {
    json_t *swv = json_object_get(root, "sliding_window");
    if (swv && json_is_null(swv)) c->sliding_window = 0;
    else if (get_int(root, "sliding_window", 1, 1 << 30, &c->sliding_window, what, err) < 0) return -1;
    int L = c->num_hidden_layers, pattern = 0;
    json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != L)
            return err_set(err, PAIL_ERR_INVALID, "%s: layer_types is not a list of %d entries (one per layer)", what, L);
        unsigned char full[MODEL_MAX_LAYERS];
        for (int l = 0; l < L; l++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)l));
            if (!s || (strcmp(s, "full_attention") && strcmp(s, "sliding_attention")))
                return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: layer_types[%d] = '%s' is not supported (full_attention "
                               "or sliding_attention)", what, l, s ? s : "(not a string)");
            full[l] = !strcmp(s, "full_attention");
        }
        model_config_gemma_layers(c, full, 0);
    } else {
        if (c->type == MODEL_GEMMA3_TEXT &&
            get_int(root, "sliding_window_pattern", 1, 1 << 20, &pattern, what, err) < 0)
            return -1;
        model_config_gemma_layers(c, NULL, pattern);
    }
    if (get_int(root, "query_pre_attn_scalar", 1, 1 << 20, &c->query_pre_attn_scalar, what, err) < 0 ||
        get_num_or_null(root, "attn_logit_softcapping", &c->attn_logit_softcapping, what, err) < 0 ||
        get_num_or_null(root, "final_logit_softcapping", &c->final_logit_softcapping, what, err) < 0)
        return -1;
    if (c->type == MODEL_GEMMA3_TEXT && get_rope_gemma3(c, root, what, err) < 0) return -1;
    model_config_gemma_scales(c);
    return 0;
}

int model_config_validate(const ModelConfig *c, const char *what, PailErr *err) {
    // a mixture of experts has no dense MLP (intermediate_size 0) but qwen2_moe's shared expert
    bool moe = model_type_is_moe(c->type);
    if (c->hidden_size <= 0 || c->intermediate_size < (moe && c->type != MODEL_QWEN2_MOE ? 0 : 1) || c->num_hidden_layers <= 0 ||
        c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 || c->head_dim <= 0 || c->vocab_size <= 0)
        return err_set(err, PAIL_ERR_INVALID, "%s: sizes must be positive (hidden %d, ffn %d, layers %d, heads %d, "
                       "kv heads %d, head_dim %d, vocab %d)", what, c->hidden_size, c->intermediate_size,
                       c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads, c->head_dim,
                       c->vocab_size);
    if (c->num_attention_heads % c->num_key_value_heads)
        return err_set(err, PAIL_ERR_INVALID, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       what, c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim % 2)
        return err_set(err, PAIL_ERR_INVALID, "%s: head_dim %d is odd (RoPE rotates pairs)", what, c->head_dim);
    if (!(c->rms_norm_eps > 0)) return err_set(err, PAIL_ERR_INVALID, "%s: rms_norm_eps must be > 0", what);
    if (moe != model_is_moe(c))
        return err_set(err, PAIL_ERR_INVALID, "%s: num_experts = %d for model_type %s", what, c->num_experts,
                       model_type_name(c->type));
    if (moe && c->num_experts > MOE_MAX_EXPERTS)
        return err_set(err, PAIL_ERR_INVALID, "%s: num_experts %d is more than %d", what, c->num_experts,
                       MOE_MAX_EXPERTS);
    if (moe && (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts))
        return err_set(err, PAIL_ERR_INVALID, "%s: num_experts_per_tok %d is not in [1, num_experts %d]", what,
                       c->num_experts_per_tok, c->num_experts);
    if (moe && c->moe_intermediate_size <= 0)
        return err_set(err, PAIL_ERR_INVALID, "%s: moe_intermediate_size %d is not positive", what,
                       c->moe_intermediate_size);
    if (moe && c->type != MODEL_QWEN2_MOE && c->intermediate_size)
        return err_set(err, PAIL_ERR_INVALID, "%s: intermediate_size %d: %s has no dense MLP", what,
                       c->intermediate_size, model_type_name(c->type));
    if (c->bos_token_id >= c->vocab_size)
        return err_set(err, PAIL_ERR_INVALID, "%s: bos_token_id %d is not below vocab_size %d", what,
                       c->bos_token_id, c->vocab_size);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] >= c->vocab_size)
            return err_set(err, PAIL_ERR_INVALID, "%s: eos_token_id %d is not below vocab_size %d", what,
                           c->eos_token_ids[i], c->vocab_size);
    return 0;
}

int model_config_parse(ModelConfig *cfg, const char *text, size_t len, const char *what, PailErr *err) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root) return err_set(err, PAIL_ERR_INVALID, "%s: not valid JSON: %s (line %d)", what, jerr.text, jerr.line);
    int rc = -1;
    ModelConfig c = {0};
    if (!json_is_object(root)) { err_set(err, PAIL_ERR_INVALID, "%s: not a JSON object", what); goto out; }
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_string(mt)) { err_set(err, PAIL_ERR_INVALID, "%s: 'model_type' missing or not a string", what); goto out; }
    ModelType type;
    if (model_type_parse(json_string_value(mt), &type) < 0) {
        err_set(err, PAIL_ERR_UNSUPPORTED, "%s: model_type = '%s' is not supported (pail runs llama, qwen2, qwen3, "
                "mistral, exaone, smollm3, granite, olmo2, phi3, cohere, cohere2, gemma2, gemma3_text dense decoders "
                "and the qwen3_moe, qwen2_moe, olmoe, granitemoe, mixtral, gpt_oss mixtures of experts)", what,
                json_string_value(mt));
        goto out;
    }
    if (type == MODEL_EXAONE) {  // EXAONE's own config names (ExaoneConfig.attribute_map), read as llama's
        static const char *alias[][2] = {{"num_hidden_layers", "num_layers"},
                                         {"rms_norm_eps", "layer_norm_epsilon"},
                                         {"hidden_act", "activation_function"}};
        for (int i = 0; i < 3; i++) {
            json_t *v = json_object_get(root, alias[i][1]);
            if (v && !json_object_get(root, alias[i][0])) json_object_set(root, alias[i][0], v);
        }
    }
    if (refuse_unsupported(root, type, what, err) < 0) goto out;
    static const char *req[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                "vocab_size"};
    for (int i = 0; i < 5; i++)
        if (require(root, req[i], what, err) < 0) goto out;
    model_config_defaults(&c, type);
    if (get_int(root, "hidden_size", 1, 1 << 16, &c.hidden_size, what, err) < 0 ||
        get_int(root, "intermediate_size", 1, 1 << 20, &c.intermediate_size, what, err) < 0 ||
        get_int(root, "num_hidden_layers", 1, 1024, &c.num_hidden_layers, what, err) < 0 ||
        get_int(root, "num_attention_heads", 1, 1024, &c.num_attention_heads, what, err) < 0 ||
        get_int(root, "vocab_size", 1, 1 << 22, &c.vocab_size, what, err) < 0)
        goto out;
    c.num_key_value_heads = c.num_attention_heads;
    c.head_dim = 0;
    if (get_int(root, "num_key_value_heads", 1, 1024, &c.num_key_value_heads, what, err) < 0 ||
        get_int(root, "head_dim", 1, 1024, &c.head_dim, what, err) < 0 ||
        get_int(root, "max_position_embeddings", 1, 1 << 30, &c.max_position_embeddings, what, err) < 0 ||
        get_num(root, "rms_norm_eps", 1e-30, 1, &c.rms_norm_eps, what, err) < 0 ||
        (type != MODEL_GEMMA3_TEXT && get_rope(&c, root, what, err) < 0) || get_special_ids(&c, root, what, err) < 0)
        goto out;
    if (c.head_dim == 0 && (type == MODEL_GEMMA2 || type == MODEL_GEMMA3_TEXT)) c.head_dim = 256;  // their default
    if (c.head_dim == 0) {
        if (c.hidden_size % c.num_attention_heads) {
            err_set(err, PAIL_ERR_INVALID, "%s: hidden_size %d is not a multiple of num_attention_heads %d and there "
                    "is no head_dim", what, c.hidden_size, c.num_attention_heads);
            goto out;
        }
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    if (type == MODEL_MISTRAL) {  // MistralConfig: sliding_window defaults to 4096; null = full attention
        json_t *swv = json_object_get(root, "sliding_window");
        if (swv && json_is_null(swv)) c.sliding_window = 0;
        else if (get_int(root, "sliding_window", 1, 1 << 30, &c.sliding_window, what, err) < 0) goto out;
    }
    if (type == MODEL_SMOLLM3 && get_no_rope(&c, root, what, err) < 0) goto out;
    if (type == MODEL_PHI3 && get_phi3(&c, root, what, err) < 0) goto out;
    if ((type == MODEL_GEMMA2 || type == MODEL_GEMMA3_TEXT) && get_gemma(&c, root, what, err) < 0) goto out;
    if (type == MODEL_GRANITE &&
        (get_num(root, "embedding_multiplier", 1e-6, 1e6, &c.embedding_multiplier, what, err) < 0 ||
         get_num(root, "residual_multiplier", 1e-6, 1e6, &c.residual_multiplier, what, err) < 0 ||
         get_num(root, "attention_multiplier", 1e-6, 1e6, &c.attention_multiplier, what, err) < 0 ||
         get_num(root, "logits_scaling", 1e-6, 1e6, &c.logits_scaling, what, err) < 0))
        goto out;
    if (type == MODEL_COHERE2 && get_cohere2_layers(&c, root, what, err) < 0) goto out;
    if (type == MODEL_COHERE || type == MODEL_COHERE2) {
        // Cohere(2)Config's layer_norm_eps is its LayerNorms' eps, held where rms_norm_eps is
        if (get_num(root, "layer_norm_eps", 1e-30, 1, &c.rms_norm_eps, what, err) < 0) goto out;
        json_t *qn = json_object_get(root, "use_qk_norm");
        if (qn && !json_is_null(qn) && !json_is_boolean(qn)) {
            err_set(err, PAIL_ERR_INVALID, "%s: use_qk_norm is not a boolean", what);
            goto out;
        }
        c.has_qk_norm = json_is_true(qn);
        json_t *ls = json_object_get(root, "logit_scale");
        if (ls && json_is_null(ls)) {  // CohereForCausalLM would multiply the logits by None
            err_set(err, PAIL_ERR_INVALID, "%s: logit_scale is null (CohereForCausalLM needs a number)", what);
            goto out;
        }
        if (get_num(root, "logit_scale", 1e-6, 1e6, &c.logit_scale, what, err) < 0) goto out;
    }
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_null(tie)) {
        if (!json_is_boolean(tie)) { err_set(err, PAIL_ERR_INVALID, "%s: tie_word_embeddings is not a boolean", what); goto out; }
        c.tie_word_embeddings = json_is_true(tie);
    }
    // MistralAttention, MixtralAttention and Phi3Attention have no biases, whatever the file says; qwen2_moe's
    // are its qkv_bias (config_moe_parse)
    if (type != MODEL_QWEN2 && type != MODEL_MISTRAL && type != MODEL_PHI3 && type != MODEL_MIXTRAL &&
        type != MODEL_QWEN2_MOE) {
        json_t *ab = json_object_get(root, "attention_bias");
        if (ab && !json_is_null(ab) && !json_is_boolean(ab)) {
            err_set(err, PAIL_ERR_INVALID, "%s: attention_bias is not a boolean", what);
            goto out;
        }
        c.has_qkv_bias = c.has_o_bias = json_is_true(ab);
    }
    if (model_type_is_moe(type) && config_moe_parse(&c, root, what, err) < 0) goto out;
    json_t *dt = json_object_get(root, "torch_dtype");
    if (!json_is_string(dt)) dt = json_object_get(root, "dtype");
    if (json_is_string(dt)) snprintf(c.dtype, sizeof c.dtype, "%s", json_string_value(dt));
    if (model_config_validate(&c, what, err) < 0) goto out;
    *cfg = c;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int model_config_apply_generation(ModelConfig *cfg, const char *text, size_t len, const char *what, PailErr *err) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root) return err_set(err, PAIL_ERR_INVALID, "%s: not valid JSON: %s (line %d)", what, jerr.text, jerr.line);
    ModelConfig c = *cfg;
    int rc = json_is_object(root) ? get_special_ids(&c, root, what, err)
                                  : err_set(err, PAIL_ERR_INVALID, "%s: not a JSON object", what);
    json_decref(root);
    if (rc == 0 && (rc = model_config_validate(&c, what, err)) == 0) *cfg = c;
    return rc;
}

int model_config_load(ModelConfig *cfg, const char *dir, PailErr *err) {
    char path[4096];
    Buf b = {0};
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (fs_read_file(path, &b, err) < 0) return -1;
    int rc = model_config_parse(cfg, (const char *)b.data, b.len, path, err);
    buf_free(&b);
    if (rc < 0) return -1;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    PailErr e2 = {0};
    if (fs_read_file(path, &b, &e2) < 0) {
        if (e2.code == PAIL_ERR_NOT_FOUND) return 0;
        *err = e2;
        return -1;
    }
    rc = model_config_apply_generation(cfg, (const char *)b.data, b.len, path, err);
    buf_free(&b);
    return rc;
}

// ---- writing ----

int model_config_to_json(const ModelConfig *c, const char *dtype_name, Buf *out) {
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", arch_names[c->type]));
    json_object_set_new(o, "model_type", json_string(model_type_name(c->type)));
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    json_object_set_new(o, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_t *eos = json_null();
    if (c->n_eos == 1) eos = json_integer(c->eos_token_ids[0]);
    if (c->n_eos > 1) {
        eos = json_array();
        for (int i = 0; i < c->n_eos; i++) json_array_append_new(eos, json_integer(c->eos_token_ids[i]));
    }
    json_object_set_new(o, "eos_token_id", eos);
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "initializer_range", json_real(0.02));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position_embeddings));
    json_object_set_new(o, "num_attention_heads", json_integer(c->num_attention_heads));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->num_hidden_layers));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->num_key_value_heads));
    json_object_set_new(o, c->type == MODEL_COHERE || c->type == MODEL_COHERE2 ? "layer_norm_eps" : "rms_norm_eps",
                        json_real(c->rms_norm_eps));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    if (c->rope_scaling == ROPE_SCALING_LLAMA3)
        json_object_set_new(o, "rope_scaling",
                            json_pack("{s:f,s:f,s:f,s:i,s:s}", "factor", c->rope_factor, "low_freq_factor",
                                      c->rope_low_freq_factor, "high_freq_factor", c->rope_high_freq_factor,
                                      "original_max_position_embeddings", c->rope_original_max_position_embeddings,
                                      "rope_type", "llama3"));
    else
        json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "torch_dtype", json_string(dtype_name));
    json_object_set_new(o, "use_cache", json_true());
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    if (c->type == MODEL_LLAMA || c->type == MODEL_QWEN3 || c->type == MODEL_EXAONE || c->type == MODEL_SMOLLM3 ||
        c->type == MODEL_GRANITE || c->type == MODEL_OLMO2 || c->type == MODEL_GEMMA2 || c->type == MODEL_GEMMA3_TEXT) {
        json_object_set_new(o, "attention_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    }
    if (model_is_moe(c)) {
        config_moe_to_json(c, o);
    } else if (c->type == MODEL_MISTRAL) {  // MistralConfig has no attention_bias: q/k/v/o never carry one
        json_object_set_new(o, "head_dim", json_integer(c->head_dim));
        json_object_set_new(o, "sliding_window", c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
    } else if (c->type == MODEL_SMOLLM3) {
        json_t *nr = json_array();
        for (int l = 0; l < c->num_hidden_layers; l++) json_array_append_new(nr, json_integer(model_layer_has_rope(c, l)));
        json_object_set_new(o, "no_rope_layers", nr);
        // SmolLM3Config's default pad id 128004 would lie past a smaller vocabulary (nn.Embedding refuses it)
        json_object_set_new(o, "pad_token_id", json_null());
        json_object_set_new(o, "mlp_bias", json_false());
        json_object_set_new(o, "use_sliding_window", json_false());
        json_object_set_new(o, "sliding_window", json_null());
    } else if (c->type == MODEL_PHI3) {  // Phi3Config's pad 32000 would lie past a smaller vocabulary
        json_object_set_new(o, "pad_token_id", json_null());
        json_object_set_new(o, "sliding_window", c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
        json_object_set_new(o, "partial_rotary_factor", json_real(c->rope_dim ? (double)c->rope_dim / c->head_dim : 1.0));
        json_object_set_new(o, "original_max_position_embeddings",
                            json_integer(c->rope_scaling == ROPE_SCALING_LONGROPE
                                         ? c->rope_original_max_position_embeddings : c->max_position_embeddings));
        if (c->rope_scaling == ROPE_SCALING_LONGROPE) {
            json_t *sf = json_array(), *lf = json_array();
            for (int i = 0; i < model_rope_dim(c) / 2; i++) {
                json_array_append_new(sf, json_real(c->rope_short_factor[i]));
                json_array_append_new(lf, json_real(c->rope_long_factor[i]));
            }
            json_object_set_new(o, "rope_scaling", json_pack("{s:s,s:o,s:o,s:f}", "type", "longrope", "short_factor",
                                                             sf, "long_factor", lf, "attention_factor",
                                                             c->rope_attention_factor));
        }
        if (c->head_dim * c->num_attention_heads != c->hidden_size)
            json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    } else if (c->type == MODEL_OLMO2) {
        json_object_set_new(o, "pad_token_id", json_null());  // Olmo2Config's default 1 is a real token
    } else if (c->type == MODEL_GRANITE) {
        json_object_set_new(o, "mlp_bias", json_false());
        json_object_set_new(o, "embedding_multiplier", json_real(c->embedding_multiplier));
        json_object_set_new(o, "residual_multiplier", json_real(c->residual_multiplier));
        json_object_set_new(o, "attention_multiplier", json_real(c->attention_multiplier));
        json_object_set_new(o, "logits_scaling", json_real(c->logits_scaling));
    } else if (c->type == MODEL_COHERE) {
        json_object_set_new(o, "attention_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "head_dim", json_integer(c->head_dim));
        json_object_set_new(o, "use_qk_norm", json_boolean(c->has_qk_norm));
        json_object_set_new(o, "logit_scale", json_real(c->logit_scale));
        json_object_set_new(o, "pad_token_id", json_null());  // CohereConfig's default 0 is a real token
    } else if (c->type == MODEL_COHERE2) {
        json_object_set_new(o, "attention_bias", json_boolean(c->has_qkv_bias));
        json_object_set_new(o, "logit_scale", json_real(c->logit_scale));
        json_object_set_new(o, "pad_token_id", json_null());
        json_object_set_new(o, "sliding_window", json_integer(c->sliding_window));
        json_t *lt = json_array();
        for (int l = 0; l < c->num_hidden_layers; l++)
            json_array_append_new(lt, json_string(model_layer_window(c, l) ? "sliding_attention" : "full_attention"));
        json_object_set_new(o, "layer_types", lt);
    } else if (c->type == MODEL_LLAMA || c->type == MODEL_EXAONE) {
        json_object_set_new(o, "mlp_bias", json_false());
        if (c->type == MODEL_LLAMA) json_object_set_new(o, "pretraining_tp", json_integer(1));
    } else if (c->type == MODEL_GEMMA2 || c->type == MODEL_GEMMA3_TEXT) {
        // written below
    } else {
        json_object_set_new(o, "use_sliding_window", json_false());
        json_object_set_new(o, "sliding_window", json_null());
        json_object_set_new(o, "max_window_layers", json_integer(c->num_hidden_layers));
    }
    if (c->type == MODEL_GEMMA2 || c->type == MODEL_GEMMA3_TEXT) {
        json_object_set_new(o, "hidden_act", json_string("gelu_pytorch_tanh"));
        json_object_set_new(o, "hidden_activation", json_string("gelu_pytorch_tanh"));
        json_object_set_new(o, "query_pre_attn_scalar", json_integer(c->query_pre_attn_scalar));
        json_object_set_new(o, "sliding_window", c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
        json_t *lt = json_array();
        for (int l = 0; l < c->num_hidden_layers; l++)
            json_array_append_new(lt, json_string((c->full_attn[l >> 6] >> (l & 63)) & 1 ? "full_attention"
                                                                                         : "sliding_attention"));
        json_object_set_new(o, "layer_types", lt);
        json_object_set_new(o, "attn_logit_softcapping",
                            c->attn_logit_softcapping > 0 ? json_real(c->attn_logit_softcapping) : json_null());
        json_object_set_new(o, "final_logit_softcapping",
                            c->final_logit_softcapping > 0 ? json_real(c->final_logit_softcapping) : json_null());
        json_object_set_new(o, "pad_token_id", json_null());
        if (c->type == MODEL_GEMMA3_TEXT) {  // the legacy spelling, which Gemma3TextConfig still reads
            json_object_set_new(o, "rope_local_base_freq", json_real(c->rope_local_theta));
            json_object_set_new(o, "rope_scaling", c->rope_scaling == ROPE_SCALING_LINEAR
                                ? json_pack("{s:s,s:f}", "rope_type", "linear", "factor", c->rope_factor) : json_null());
            json_object_set_new(o, "use_bidirectional_attention", json_false());
        }
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(12));
    json_decref(o);
    if (!s) return -1;
    int rc = buf_append(out, s, strlen(s));
    rc |= buf_append(out, "\n", 1);
    free(s);
    return rc;
}

size_t model_config_param_count(const ModelConfig *c) {
    size_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim, H = c->num_attention_heads,
           Hkv = c->num_key_value_heads, V = c->vocab_size;
    size_t layer = 2 * C + H * D * C + 2 * Hkv * D * C + C * H * D + 3 * C * F;
    if (c->has_qkv_bias) layer += H * D + 2 * Hkv * D;
    if (c->has_o_bias) layer += C;
    if (c->has_qk_norm) layer += c->qk_norm_whole || c->layer_norm ? H * D + Hkv * D : 2 * D;  // olmo2, cohere: H*D
    if (c->parallel_block) layer -= C;  // cohere: no post_attention_layernorm
    if (c->gemma_norms) layer += 2 * C;  // pre_ and post_feedforward_layernorm
    if (model_is_moe(c))  // the router, every expert's gate, up and down; qwen2_moe's shared expert's gate
        layer += (size_t)c->num_experts * C + (size_t)c->num_experts * 3 * C * c->moe_intermediate_size +
                 (c->type == MODEL_QWEN2_MOE ? C : 0);
    if (c->attn_sinks) layer += H;
    if (c->moe_bias)  // gpt_oss: the router's bias, each expert's gate_up (2 Fe) and down (C) biases
        layer += (size_t)c->num_experts * (1 + 2 * (size_t)c->moe_intermediate_size + C);
    return V * C + (size_t)c->num_hidden_layers * layer + C + (c->tie_word_embeddings ? 0 : V * C);
}

size_t model_config_active_param_count(const ModelConfig *c) {
    size_t C = c->hidden_size, Fe = c->moe_intermediate_size;
    size_t idle = (size_t)(c->num_experts - c->num_experts_per_tok) * (3 * C * Fe + (c->moe_bias ? 2 * Fe + C : 0));
    return model_config_param_count(c) - (model_is_moe(c) ? (size_t)c->num_hidden_layers * idle : 0);
}
