// The mixture-of-experts part of the GGUF import (gguf_import_moe.h), as llama.cpp reads these
// files (src/models/qwen3moe.cpp, qwen2moe.cpp, olmoe.cpp, granite-moe.cpp, llama.cpp) and its
// convert_hf_to_gguf writes them (conversion/qwen.py, olmo.py, granite.py, llama.py): a layer's
// experts stacked in three 3-D tensors, ffn_gate_exps / ffn_up_exps (E, Fe, C) and ffn_down_exps
// (E, C, Fe) in Hugging Face's order (ggml's dims reversed), the router ffn_gate_inp (E, C) and
// qwen2moe's shared expert ffn_{gate,up,down}_shexp under ffn_gate_inp_shexp (C). Not the dense
// tensors and keys: gguf_import.c.
#include "model/gguf_import_moe.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "kernels.h"

int gguf_moe_arch(const GgufFile *g, const char *arch, size_t al, ModelType *type, PailErr *err) {
    static const struct {
        const char *name;
        ModelType t;
    } archs[] = {
        {"qwen3moe", MODEL_QWEN3_MOE},
        {"qwen2moe", MODEL_QWEN2_MOE},
        {"olmoe", MODEL_OLMOE},
        {"granitemoe", MODEL_GRANITEMOE},
        {"gpt-oss", MODEL_GPT_OSS},
    };
    (void)err;  // no MoE architecture is refused by name (gpt-oss's MXFP4 experts are dequantized)
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == al && !memcmp(arch, archs[i].name, al)) {
            *type = archs[i].t;
            return 1;
        }
    // Mixtral: llama.cpp's convert (LlamaModel) writes it as architecture llama with its expert count
    int64_t e;
    PailErr ignore = {0};
    if (al == 5 && !memcmp(arch, "llama", 5) && gguf_get_int(g, "llama.expert_count", &e, &ignore) == 0 && e > 0) {
        *type = MODEL_MIXTRAL;
        return 1;
    }
    return 0;
}

// <arch>.<k> as an integer in lo..hi: 1 when present, 0 when absent and not required, -1 with err.
static int get_int(const GgufFile *g, const char *arch, const char *k, int64_t lo, int64_t hi, bool required,
                   int64_t *v, PailErr *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, k);
    PailErr e = {0};
    if (gguf_get_int(g, full, v, &e) < 0) {
        if (e.code != PAIL_ERR_NOT_FOUND) {
            *err = e;
            return -1;
        }
        if (!required) return 0;
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s is missing (a mixture-of-experts %s file carries it)",
                       g->path, full, arch);
    }
    if (*v < lo || *v > hi)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s is %lld; pail loads %lld..%lld", g->path, full, (long long)*v,
                       (long long)lo, (long long)hi);
    return 1;
}

// <arch>.<k> as a number: 1 when present, 0 when absent, -1 with err.
static int get_float(const GgufFile *g, const char *arch, const char *k, double *v, PailErr *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, k);
    PailErr e = {0};
    if (gguf_get_float(g, full, v, &e) == 0) return 1;
    if (e.code == PAIL_ERR_NOT_FOUND) return 0;
    *err = e;
    return -1;
}

// gpt-oss as llama.cpp reads it (src/models/openai-moe.cpp, llama-model.cpp, llama-context.cpp)
// and convert_hf_to_gguf's GptOssModel writes it: expert_count, expert_used_count,
// expert_feed_forward_length (Fe) and attention.sliding_window are required; the routing weights
// are a softmax over the K chosen logits (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT:
// norm_topk_prob); the clamped SwiGLU's alpha 1.702 and limit 7 are llama.cpp's constants
// (LLM_FFN_SWIGLU_OAI_MOE; no key carries them). Sliding layers: attention.sliding_window_pattern
// as a bool array (true = sliding) or a period n (layer l slides when l % n < n - 1; absent: 2,
// llama.cpp's default for this architecture, so even layers slide: the converter writes no
// pattern, and a checkpoint's other layer_types are lost in the file). RoPE: rope.scaling.type
// yarn with rope.scaling.factor, rope.scaling.original_context_length (absent: context_length);
// llama.cpp reads no YaRN beta keys (yarn_beta_fast / yarn_beta_slow, which the converter writes,
// are left at its context defaults 32 and 1) and rounds the ramp's bounds to whole dims
// (ggml_rope_yarn_corr_dims' floor / ceil: truncate true, where GptOssConfig says false); its
// attention factor is rope.scaling.attn_factor (absent: 1) times 0.1 ln(factor) + 1. No
// rope.scaling.type (or none): unscaled RoPE. A rope.freq_base_swa other than rope.freq_base is
// refused (pail's gpt_oss has one RoPE table). The output projection's bias is required.
static int gpt_oss_config(const GgufFile *g, const char *arch, ModelConfig *c, PailErr *err) {
    int64_t E, K, fe, sw, v;
    if (get_int(g, arch, "expert_count", 1, MOE_MAX_EXPERTS, true, &E, err) < 0 ||
        get_int(g, arch, "expert_used_count", 1, E, true, &K, err) < 0 ||
        get_int(g, arch, "expert_feed_forward_length", 1, 1 << 20, true, &fe, err) < 0 ||
        get_int(g, arch, "attention.sliding_window", 1, 1 << 30, true, &sw, err) < 0)
        return -1;
    c->num_experts = (int)E;
    c->num_experts_per_tok = (int)K;
    c->moe_intermediate_size = c->dense_intermediate_size = (int)fe;
    c->intermediate_size = 0;
    c->norm_topk_prob = true;
    c->swiglu_alpha = 1.702, c->swiglu_limit = 7.0;
    c->attn_sinks = c->moe_bias = c->has_o_bias = true;
    c->sliding_window = (int)sw;
    int L = c->num_hidden_layers, r;
    char k[128];
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", arch);
    uint64_t n = 0;
    const uint8_t *data = NULL;
    PailErr e = {0};
    bool arr = gguf_get_array(g, k, GGUF_TYPE_BOOL, &n, &data, &e) == 0;
    if (arr && n != (uint64_t)L)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s has %llu entries for %d layers", g->path, k,
                       (unsigned long long)n, L);
    int64_t period = 2;
    if (!arr && (r = get_int(g, arch, "attention.sliding_window_pattern", 0, 1 << 20, false, &v, err)) < 0) return -1;
    if (!arr && r) period = v;
    memset(c->full_attn, 0, sizeof c->full_attn);
    for (int l = 0; l < L; l++) {
        bool swa = arr ? data[l] != 0 : period == 0 || l % period < period - 1;
        if (!swa) c->full_attn[l >> 6] |= 1ull << (l & 63);
    }
    double base = c->rope_theta, f;
    if ((r = get_float(g, arch, "rope.freq_base_swa", &f, err)) < 0) return -1;
    if (r && f != base)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.rope.freq_base_swa is %g, not rope.freq_base %g (pail's "
                                                  "gpt_oss has one RoPE base)",
                       g->path, arch, f, base);
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    const char *s = NULL;
    size_t sl = 0;
    if (gguf_get_string(g, k, &s, &sl, &e) < 0 || (sl == 4 && !memcmp(s, "none", 4))) {
        c->rope_scaling = ROPE_SCALING_NONE;
        return 0;
    }
    if (!(sl == 4 && !memcmp(s, "yarn", 4)))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s is '%.*s'; a gpt-oss file imports with yarn or none",
                       g->path, k, (int)(sl > 32 ? 32 : sl), s);
    double factor = 0, af = 1;
    if ((r = get_float(g, arch, "rope.scaling.factor", &factor, err)) < 0) return -1;
    if (!r || !(isfinite(factor) && factor >= 1 && factor <= 1e6))
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.rope.scaling.factor is %s; YaRN needs a factor 1..1e6",
                       g->path, arch, r ? "out of range" : "missing");
    int64_t omax = c->max_position_embeddings;
    if (get_int(g, arch, "rope.scaling.original_context_length", 1, 1 << 30, false, &omax, err) < 0) return -1;
    if ((r = get_float(g, arch, "rope.scaling.attn_factor", &af, err)) < 0) return -1;
    if (r && !(isfinite(af) && af > 0 && af <= 1e6))
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.rope.scaling.attn_factor is %g; need 0..1e6", g->path, arch, af);
    c->rope_scaling = ROPE_SCALING_YARN;
    c->rope_factor = factor;
    c->rope_original_max_position_embeddings = (int)omax;
    c->rope_beta_fast = 32.0, c->rope_beta_slow = 1.0;
    c->rope_truncate = true;
    // 0: pail's 0.1 ln(factor) + 1; llama.cpp's mscale is 1 for a factor of 1
    double ms = factor <= 1.0 ? 1.0 : 0.1 * log(factor) + 1.0;
    c->rope_attention_factor = af == 1.0 && factor > 1.0 ? 0 : af * ms;
    return 0;
}

// llama.cpp's reading: E and K required; the experts' width is expert_feed_forward_length for
// qwen3moe / qwen2moe (absent: feed_forward_length / K, llama.cpp's fallback), feed_forward_length
// for olmoe, granitemoe and llama (no other key is read); qwen2moe's shared expert
// expert_shared_feed_forward_length wide (absent: feed_forward_length). The K routing weights are
// renormalised (norm_topk_prob) as llama.cpp's build_moe_ffn call fixes it per architecture: for
// qwen3moe, granitemoe and llama, not for qwen2moe and olmoe; no key carries the checkpoint's
// norm_topk_prob (<arch>.expert_weights_norm is not read for these). A shared expert elsewhere
// (GraniteMoeShared) is refused.
int gguf_moe_config(const GgufFile *g, const char *arch, ModelConfig *c, PailErr *err) {
    ModelType t = c->type;
    if (t == MODEL_GPT_OSS) return gpt_oss_config(g, arch, c, err);
    bool qwen = t == MODEL_QWEN3_MOE || t == MODEL_QWEN2_MOE;
    int64_t E, K, v;
    if (get_int(g, arch, "expert_count", 1, MOE_MAX_EXPERTS, true, &E, err) < 0 ||
        get_int(g, arch, "expert_used_count", 1, E, true, &K, err) < 0)
        return -1;
    int n_ff = c->intermediate_size, r;
    int64_t fe = qwen ? n_ff / K : n_ff;
    if (qwen && (r = get_int(g, arch, "expert_feed_forward_length", 1, 1 << 20, false, &v, err)) < 0) return -1;
    if (qwen && r) fe = v;
    if (fe < 1)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.expert_feed_forward_length is missing and "
                                              "feed_forward_length %d / %lld experts a token is 0",
                       g->path, arch, n_ff, (long long)K);
    c->num_experts = (int)E;
    c->num_experts_per_tok = (int)K;
    c->moe_intermediate_size = (int)fe;
    c->dense_intermediate_size = qwen ? n_ff : (int)fe;
    c->intermediate_size = 0;
    if ((r = get_int(g, arch, "expert_shared_feed_forward_length", 0, 1 << 20, false, &v, err)) < 0) return -1;
    if (t == MODEL_QWEN2_MOE) {
        c->intermediate_size = r && v > 0 ? (int)v : n_ff;
        c->has_o_bias = false;  // Qwen2MoeAttention's o_proj has no bias
    } else if (r && v > 0) {
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.expert_shared_feed_forward_length is %lld: a shared "
                                                  "expert is imported for qwen2moe only%s",
                       g->path, arch, (long long)v,
                       t == MODEL_GRANITEMOE ? " (granitemoeshared is not supported)" : "");
    }
    c->norm_topk_prob = t == MODEL_QWEN3_MOE || t == MODEL_GRANITEMOE || t == MODEL_MIXTRAL;
    if (t == MODEL_MIXTRAL) c->has_qkv_bias = c->has_o_bias = false;  // MixtralAttention has none
    return 0;
}

const char *gguf_moe_param_name(ModelParamId id) {
    switch (id) {
    case PARAM_ROUTER: return "ffn_gate_inp.weight";
    case PARAM_SHARED_GATE: return "ffn_gate_inp_shexp.weight";
    case PARAM_W_GATE: return "ffn_gate_shexp.weight";
    case PARAM_W_UP: return "ffn_up_shexp.weight";
    case PARAM_W_DOWN: return "ffn_down_shexp.weight";
    case PARAM_SINKS: return "attn_sinks.weight";  // gpt-oss: the converter's sinks + ".weight"
    case PARAM_ROUTER_BIAS: return "ffn_gate_inp.bias";
    default: return NULL;
    }
}

// The file tensors a layer of an expert family is made of, in row order within an expert
// (gpt-oss's expert biases: ffn_{gate,up}_exps.bias (E, Fe) and ffn_down_exps.bias (E, C)).
static int expert_names(ModelParamId id, const char *nm[2]) {
    bool bias = id == PARAM_EXP_GATE_UP_BIAS || id == PARAM_EXP_DOWN_BIAS;
    if (id == PARAM_EXP_GATE_UP || id == PARAM_EXP_GATE_UP_BIAS) {
        nm[0] = bias ? "ffn_gate_exps.bias" : "ffn_gate_exps.weight", nm[1] = bias ? "ffn_up_exps.bias" : "ffn_up_exps.weight";
        return 2;
    }
    nm[0] = bias ? "ffn_down_exps.bias" : "ffn_down_exps.weight";
    return 1;
}

bool gguf_moe_expert_family(ModelParamId id) {
    return id == PARAM_EXP_GATE_UP || id == PARAM_EXP_DOWN || id == PARAM_EXP_GATE_UP_BIAS || id == PARAM_EXP_DOWN_BIAS;
}

bool gguf_moe_expert_tensor(const char *suffix) {
    static const char *names[] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                                  "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(suffix, names[i])) return true;
    return false;
}

static const GgufTensor *find_layer(const GgufFile *g, int l, const char *suffix, char *nm, size_t cap) {
    snprintf(nm, cap, "blk.%d.%s", l, suffix);
    return gguf_find_tensor(g, nm);
}

DType gguf_moe_layer_dtype(const GgufFile *g, ModelParamId id, int l, bool dequantize) {
    const char *names[2];
    int n = expert_names(id, names), dt = -1;
    if (dequantize) return DT_F32;
    for (int k = 0; k < n; k++) {
        char nm[128];
        const GgufTensor *t = find_layer(g, l, names[k], nm, sizeof nm);
        int d = t ? gguf_type_dtype(t->type) : -1;
        // gate and up of two types share one family layer: held as fp32 (their values dequantized)
        if (d < 0 || !dtype_is_quant((DType)d) || (k && d != dt)) return DT_F32;
        dt = d;
    }
    return (DType)dt;
}

int gguf_moe_load(const GgufFile *g, const ModelConfig *c, ModelWeights *w, ModelParamId id, int l,
                  const GgufTensor *used[2], PailErr *err) {
    const char *names[2];
    int n = expert_names(id, names);
    uint64_t E = (uint64_t)c->num_experts, Fe = (uint64_t)c->moe_intermediate_size, C = (uint64_t)c->hidden_size;
    bool up = id == PARAM_EXP_GATE_UP || id == PARAM_EXP_GATE_UP_BIAS;
    bool bias = id == PARAM_EXP_GATE_UP_BIAS || id == PARAM_EXP_DOWN_BIAS;
    uint64_t rows = up ? Fe : C, cols = up ? C : Fe;  // one expert's slab of one tensor
    if (bias) rows = 1, cols = up ? Fe : C;           // a bias: one row of Fe (gate, up) or C (down)
    for (int k = 0; k < n; k++) {
        char nm[128];
        const GgufTensor *t = find_layer(g, l, names[k], nm, sizeof nm);
        if (!t)
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: no tensor '%s' (a %s layer's experts, stacked %s)", g->path,
                           nm, model_type_name(c->type), bias ? "2-D" : "3-D");
        if (bias && (t->ndim != 2 || t->dims[0] != cols || t->dims[1] != E))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' is [%llu, %llu], expected [%llu, %llu] (ggml "
                                                  "order: %s, E)",
                           g->path, nm, (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
                           (unsigned long long)cols, (unsigned long long)E, up ? "Fe" : "C");
        if (!bias && (t->ndim != 3 || t->dims[0] != cols || t->dims[1] != rows || t->dims[2] != E))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' is [%llu, %llu, %llu], expected [%llu, %llu, "
                                                  "%llu] (ggml order: %s, E)",
                           g->path, nm, (unsigned long long)t->dims[0],
                           (unsigned long long)t->dims[1], (unsigned long long)t->dims[2], (unsigned long long)cols,
                           (unsigned long long)rows, (unsigned long long)E, up ? "C, Fe" : "Fe, C");
        used[k] = t;
    }
    if (!w) return n;
    DType dt = model_weights_dtype(w, id, l);
    char *dst = model_weights_tensor(w, id, l);
    for (int k = 0; k < n; k++) {
        const GgufTensor *t = used[k];
        size_t be, bb;
        gguf_type_block(t->type, &be, &bb);  // the reader checked the type and that a row is whole blocks
        size_t src_row = cols / be * bb;
        for (uint64_t e = 0; e < E; e++) {
            const uint8_t *src = t->data + e * rows * src_row;
            uint64_t row0 = e * n * rows + (uint64_t)k * rows;  // expert e's gate rows, then its up rows
            if (dtype_is_quant(dt)) memcpy(dst + row0 * dtype_row_bytes(dt, cols), src, rows * src_row);
            else gguf_dequantize((float *)dst + row0 * cols, src, t->type, rows * cols);
        }
    }
    return n;
}
