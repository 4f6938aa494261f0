// Base weights: expected tensors per config, one block (matrices in their
// storage dtype, vectors fp32), checked loading
// from a SafeTensorsSet, base_sha256 (see weights.h). Loading validates the whole
// set first and converts only when everything matches, so a bad checkpoint never
// leaves a half-filled model behind.
#include "model/weights.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <math.h>
#include "core/mem.h"
#include "core/sha256.h"
#include "quant.h"

void model_param_specs(const ModelConfig *c, ModelParamSpec s[PARAM_COUNT]) {
    size_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim, V = c->vocab_size;
    size_t Q = (size_t)c->num_attention_heads * D, KV = (size_t)c->num_key_value_heads * D;
    bool b = c->has_qkv_bias, o = c->has_o_bias, n = c->has_qk_norm, moe = model_is_moe(c);
    size_t E = c->num_experts, Fe = c->moe_intermediate_size;
    const ModelParamSpec t[PARAM_COUNT] = {
        [PARAM_EMBED] = {"model.embed_tokens.weight", NULL, false, true, 2, {V, C}, 0},
        [PARAM_ATTN_NORM] = {"input_layernorm.weight", NULL, true, true, 1, {C, 0}, 0},
        [PARAM_WQ] = {"self_attn.q_proj.weight", NULL, true, true, 2, {Q, C}, 0},
        [PARAM_WK] = {"self_attn.k_proj.weight", NULL, true, true, 2, {KV, C}, 0},
        [PARAM_WV] = {"self_attn.v_proj.weight", NULL, true, true, 2, {KV, C}, 0},
        [PARAM_WO] = {"self_attn.o_proj.weight", NULL, true, true, 2, {C, Q}, 0},
        [PARAM_BQ] = {"self_attn.q_proj.bias", NULL, true, b, 1, {Q, 0}, 0},
        [PARAM_BK] = {"self_attn.k_proj.bias", NULL, true, b, 1, {KV, 0}, 0},
        [PARAM_BV] = {"self_attn.v_proj.bias", NULL, true, b, 1, {KV, 0}, 0},
        [PARAM_BO] = {"self_attn.o_proj.bias", NULL, true, o, 1, {C, 0}, 0},
        [PARAM_Q_NORM] = {"self_attn.q_norm.weight", NULL, true, n, 1, {D, 0}, 0},
        [PARAM_K_NORM] = {"self_attn.k_norm.weight", NULL, true, n, 1, {D, 0}, 0},
        [PARAM_MLP_NORM] = {"post_attention_layernorm.weight", NULL, true, true, 1, {C, 0}, 0},
        [PARAM_W_GATE] = {"mlp.gate_proj.weight", NULL, true, true, 2, {F, C}, 0},
        [PARAM_W_UP] = {"mlp.up_proj.weight", NULL, true, true, 2, {F, C}, 0},
        [PARAM_W_DOWN] = {"mlp.down_proj.weight", NULL, true, true, 2, {C, F}, 0},
        [PARAM_FINAL_NORM] = {"model.norm.weight", NULL, false, true, 1, {C, 0}, 0},
        [PARAM_LM_HEAD] = {"lm_head.weight", NULL, false, !c->tie_word_embeddings, 2, {V, C}, 0},
        [PARAM_WQKV] = {"self_attn.qkv_proj.weight", NULL, true, false, 2, {Q + 2 * KV, C}, 0},
        [PARAM_W_GATE_UP] = {"mlp.gate_up_proj.weight", NULL, true, false, 2, {2 * F, C}, 0},
        [PARAM_PRE_FF_NORM] = {"pre_feedforward_layernorm.weight", NULL, true, c->gemma_norms, 1, {C, 0}, 0},
        [PARAM_POST_FF_NORM] = {"post_feedforward_layernorm.weight", NULL, true, c->gemma_norms, 1, {C, 0}, 0},
        [PARAM_ROUTER] = {"mlp.gate.weight", NULL, true, moe, 2, {E, C}, 0},
        [PARAM_EXP_GATE_UP] = {"mlp.experts.gate_up_proj", NULL, true, moe, 2, {E * 2 * Fe, C}, 0},
        [PARAM_EXP_DOWN] = {"mlp.experts.down_proj", NULL, true, moe, 2, {E * C, Fe}, 0},
        [PARAM_SHARED_GATE] = {"mlp.shared_expert_gate.weight", NULL, true, false, 2, {1, C}, 0},
        [PARAM_SINKS] = {"self_attn.sinks", NULL, true, c->attn_sinks, 1, {(size_t)c->num_attention_heads, 0}, 0},
        [PARAM_ROUTER_BIAS] = {"mlp.router.bias", NULL, true, c->moe_bias, 1, {E, 0}, 0},
        [PARAM_EXP_GATE_UP_BIAS] = {"mlp.experts.gate_up_proj_bias", NULL, true, c->moe_bias, 1, {E * 2 * Fe, 0}, 0},
        [PARAM_EXP_DOWN_BIAS] = {"mlp.experts.down_proj_bias", NULL, true, c->moe_bias, 1, {E * C, 0}, 0},
    };
    // EXAONE 3/3.5 checkpoints keep their own names (transformers 5 renames them
    // to llama's on load and back on save: conversion_mapping.py "exaone")
    static const char *exaone[PARAM_COUNT] = {
        [PARAM_EMBED] = "transformer.wte.weight", [PARAM_ATTN_NORM] = "ln_1.weight",
        [PARAM_WQ] = "attn.attention.q_proj.weight", [PARAM_WK] = "attn.attention.k_proj.weight",
        [PARAM_WV] = "attn.attention.v_proj.weight", [PARAM_WO] = "attn.attention.out_proj.weight",
        [PARAM_BQ] = "attn.attention.q_proj.bias", [PARAM_BK] = "attn.attention.k_proj.bias",
        [PARAM_BV] = "attn.attention.v_proj.bias", [PARAM_BO] = "attn.attention.out_proj.bias",
        [PARAM_MLP_NORM] = "ln_2.weight", [PARAM_W_GATE] = "mlp.c_fc_0.weight", [PARAM_W_UP] = "mlp.c_fc_1.weight",
        [PARAM_W_DOWN] = "mlp.c_proj.weight", [PARAM_FINAL_NORM] = "transformer.ln_f.weight",
    };
    // mixtures of experts: the routed MLP's file names; the per-expert families' names are transformers 5's
    // in-memory ones (mlp.experts.gate_up_proj), for messages and --sums: the files hold them per expert
    // (model_param_part). The dense MLP is only qwen2_moe's shared expert.
    static const char *moe_names[MODEL_TYPE_COUNT][3] = {
        [MODEL_MIXTRAL] = {"block_sparse_moe.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"},
        [MODEL_GRANITEMOE] = {"block_sparse_moe.router.layer.weight", "block_sparse_moe.input_linear.weight",
                              "block_sparse_moe.output_linear.weight"},
        [MODEL_GPT_OSS] = {"mlp.router.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"},
    };
    for (int i = 0; i < PARAM_COUNT; i++) {
        s[i] = t[i];
        if (c->post_norm) {  // olmo2: the two layer norms sit after the sub-blocks
            if (i == PARAM_ATTN_NORM) s[i].name = "post_attention_layernorm.weight";
            if (i == PARAM_MLP_NORM) s[i].name = "post_feedforward_layernorm.weight";
        }
        if (c->qk_norm_whole && i == PARAM_Q_NORM) s[i].shape[0] = Q;  // olmo2, olmoe: over H*D, Hkv*D
        if (c->qk_norm_whole && i == PARAM_K_NORM) s[i].shape[0] = KV;
        if (moe && (i == PARAM_W_GATE || i == PARAM_W_UP || i == PARAM_W_DOWN || i == PARAM_SHARED_GATE)) {
            s[i].present = c->type == MODEL_QWEN2_MOE && c->intermediate_size > 0;
            if (i == PARAM_W_GATE) s[i].name = "mlp.shared_expert.gate_proj.weight";
            if (i == PARAM_W_UP) s[i].name = "mlp.shared_expert.up_proj.weight";
            if (i == PARAM_W_DOWN) s[i].name = "mlp.shared_expert.down_proj.weight";
        }
        if (moe && moe_names[c->type][0] && i >= PARAM_ROUTER && i <= PARAM_EXP_DOWN)
            s[i].name = moe_names[c->type][i - PARAM_ROUTER];
        if (c->parallel_block && i == PARAM_MLP_NORM) s[i].present = false;  // cohere: one norm per layer
        if (c->layer_norm && (i == PARAM_Q_NORM || i == PARAM_K_NORM)) {  // cohere: (H, D), (Hkv, D)
            s[i].ndim = 2;
            s[i].shape[0] = i == PARAM_Q_NORM ? (size_t)c->num_attention_heads : (size_t)c->num_key_value_heads;
            s[i].shape[1] = D;
        }
        s[i].prefix = c->type == MODEL_EXAONE ? "transformer.h." : "model.layers.";
        if (c->type == MODEL_EXAONE && exaone[i]) s[i].name = exaone[i];
        if (c->type == MODEL_PHI3) {  // fused projections: q/k/v and gate/up are views (model_weights_tensor)
            if (i == PARAM_WQKV || i == PARAM_W_GATE_UP) s[i].present = true;
            if (i == PARAM_WQ || i == PARAM_WK || i == PARAM_WV || i == PARAM_W_GATE || i == PARAM_W_UP)
                s[i].present = false;
        }
        s[i].numel = s[i].shape[0] * (s[i].ndim == 2 ? s[i].shape[1] : 1);
    }
}

void model_param_name(const ModelParamSpec *s, int layer, char *out, size_t cap) {
    if (s->per_layer) snprintf(out, cap, "%s%d.%s", s->prefix, layer, s->name);
    else snprintf(out, cap, "%s", s->name);
}

int model_param_nparts(const ModelConfig *c, ModelParamId id) {
    if (!model_is_moe(c) || c->type == MODEL_GRANITEMOE || c->type == MODEL_GPT_OSS) return 1;
    return id == PARAM_EXP_GATE_UP ? 2 * c->num_experts : id == PARAM_EXP_DOWN ? c->num_experts : 1;
}

void model_param_part(const ModelConfig *c, const ModelParamSpec *specs, ModelParamId id, int layer, int part,
                      ModelTensorPart *o) {
    const ModelParamSpec *s = &specs[id];
    size_t E = c->num_experts, Fe = c->moe_intermediate_size, C = c->hidden_size;
    memset(o, 0, sizeof *o);
    o->rows = s->shape[0];
    o->cols = s->ndim == 2 ? s->shape[1] : 1;
    o->ndim = s->ndim;
    o->shape[0] = s->shape[0], o->shape[1] = s->shape[1];
    if (c->type == MODEL_GPT_OSS && id >= PARAM_EXP_GATE_UP_BIAS && id <= PARAM_EXP_DOWN_BIAS) {
        model_param_name(s, layer, o->name, sizeof o->name);  // (E, 2Fe) interleaved, (E, C) as it is
        o->ndim = 2;
        o->shape[0] = E, o->shape[1] = id == PARAM_EXP_GATE_UP_BIAS ? 2 * Fe : C;
        o->interleaved = id == PARAM_EXP_GATE_UP_BIAS;
        return;
    }
    bool expert = id == PARAM_EXP_GATE_UP || id == PARAM_EXP_DOWN;
    if (!expert || !model_is_moe(c)) {
        model_param_name(s, layer, o->name, sizeof o->name);
        return;
    }
    bool up = id == PARAM_EXP_GATE_UP;
    if (c->type == MODEL_GPT_OSS) {  // transposed: (E, C, 2Fe) gate / up interleaved, (E, Fe, C)
        model_param_name(s, layer, o->name, sizeof o->name);
        o->ndim = 3;
        o->shape[0] = E, o->shape[1] = up ? C : Fe, o->shape[2] = up ? 2 * Fe : C;
        o->transposed = true;
        o->interleaved = up;
        return;
    }
    if (c->type == MODEL_GRANITEMOE) {  // fused: (E, 2Fe, C) gate rows first in each expert, (E, C, Fe)
        model_param_name(s, layer, o->name, sizeof o->name);
        o->ndim = 3;
        o->shape[0] = E, o->shape[1] = up ? 2 * Fe : C, o->shape[2] = up ? C : Fe;
        return;
    }
    bool mix = c->type == MODEL_MIXTRAL;
    int e = up ? part / 2 : part;
    const char *leaf = !up ? (mix ? "w2" : "down_proj") : part % 2 ? (mix ? "w3" : "up_proj") : (mix ? "w1" : "gate_proj");
    snprintf(o->name, sizeof o->name, "%s%d.%s.%d.%s.weight", s->prefix, layer,
             mix ? "block_sparse_moe.experts" : "mlp.experts", e, leaf);
    o->rows = up ? Fe : C;
    o->row0 = up ? (size_t)e * 2 * Fe + (part % 2) * Fe : (size_t)e * C;
    o->shape[0] = o->rows, o->shape[1] = o->cols;
}

size_t model_params_count(const ModelConfig *cfg) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    size_t total = 0, L = cfg->num_hidden_layers;
    for (int i = 0; i < PARAM_COUNT; i++)
        if (specs[i].present) total += specs[i].numel * (specs[i].per_layer ? L : 1);
    return total;
}

bool model_param_is_matrix(ModelParamId id) {
    switch (id) {
    case PARAM_EMBED: case PARAM_WQ: case PARAM_WK: case PARAM_WV: case PARAM_WO:
    case PARAM_W_GATE: case PARAM_W_UP: case PARAM_W_DOWN: case PARAM_LM_HEAD:
    case PARAM_WQKV: case PARAM_W_GATE_UP: case PARAM_ROUTER: case PARAM_EXP_GATE_UP: case PARAM_EXP_DOWN:
    case PARAM_SHARED_GATE: return true;
    default: return false;
    }
}

int model_dtype_parse(const char *s, int *want) {
    // The spellings users bring from torch, numpy and transformers' torch_dtype.
    static const struct { const char *name; int dt; } names[] = {
        {"auto", MODEL_DTYPE_AUTO}, {"f32", DT_F32},       {"fp32", DT_F32},       {"float32", DT_F32},
        {"float", DT_F32},          {"bf16", DT_BF16},     {"bfloat16", DT_BF16},  {"f16", DT_F16},
        {"fp16", DT_F16},           {"float16", DT_F16},   {"half", DT_F16},
    };
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(s, names[i].name)) {
            *want = names[i].dt;
            return 0;
        }
    return -1;
}

int model_quantize_parse(const char *s, int *want) {
    if (!s || !strcasecmp(s, "none")) *want = MODEL_DTYPE_AUTO;
    else if (!strcasecmp(s, "q8_0")) *want = DT_Q8_0;
    else if (!strcasecmp(s, "q4_k")) *want = DT_Q4_K;
    else return -1;
    return 0;
}

void model_dtypes_uniform(DType mat, DType dt[PARAM_COUNT]) {
    for (int i = 0; i < PARAM_COUNT; i++) dt[i] = model_param_is_matrix((ModelParamId)i) ? mat : DT_F32;
}

// Bytes of (family spec s, one layer) held as dt: a matrix row by row (whole blocks).
static size_t slice_bytes(const ModelParamSpec *s, DType dt) {
    if (s->ndim == 2) return s->shape[0] * dtype_row_bytes(dt, s->shape[1]);
    return s->numel * dtype_size(dt);
}

// (family, layer) byte offsets for ldt (PARAM_COUNT * L, may be NULL: only the
// total); returns the total. fp32 families follow each other unpadded, as they
// always did, so an all-fp32 block is one float array indexed by the element
// offsets (full fine-tuning trains it in place); any other family is padded to
// 64 bytes so that the next one starts aligned. Its layers follow each other.
static size_t layout(const ModelConfig *cfg, const ModelParamSpec *specs, const DType *ldt, size_t *elem_off,
                     ModelSlice *sl, size_t *num_params) {
    size_t elems = 0, bytes = 0, L = cfg->num_hidden_layers;
    for (int i = 0; i < PARAM_COUNT; i++) {
        if (elem_off) elem_off[i] = elems;
        if (!specs[i].present) {
            for (size_t l = 0; sl && l < L; l++) sl[i * L + l] = (ModelSlice){DT_F32, bytes};
            continue;
        }
        size_t nl = specs[i].per_layer ? L : 1;
        bool all_f32 = true;
        for (size_t l = 0; l < nl; l++) {
            DType dt = ldt[i * L + l];
            if (sl) sl[i * L + l] = (ModelSlice){dt, bytes};
            bytes += slice_bytes(&specs[i], dt);
            all_f32 &= dt == DT_F32;
        }
        for (size_t l = nl; sl && l < L; l++) sl[i * L + l] = sl[i * L];
        if (!all_f32) bytes = (bytes + 63) & ~(size_t)63;
        elems += specs[i].numel * nl;
    }
    if (num_params) *num_params = elems;
    return bytes;
}

// ldt (PARAM_COUNT * L) from a per-family dt: matrices as dt says, vectors fp32.
static void layer_dtypes(const ModelConfig *cfg, const DType dt[PARAM_COUNT], DType *ldt) {
    size_t L = cfg->num_hidden_layers;
    for (int i = 0; i < PARAM_COUNT; i++)
        for (size_t l = 0; l < L; l++)
            ldt[i * L + l] = model_param_is_matrix((ModelParamId)i) && (unsigned)dt[i] < DT_COUNT ? dt[i] : DT_F32;
}

static size_t layer_bytes(const ModelConfig *cfg, const DType *ldt) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    return layout(cfg, specs, ldt, NULL, NULL, NULL);
}

size_t model_weights_bytes(const ModelConfig *cfg, const DType dt[PARAM_COUNT]) {
    size_t L = cfg->num_hidden_layers;
    DType *ldt = malloc(PARAM_COUNT * (L ? L : 1) * sizeof *ldt);
    if (!ldt) return 0;
    layer_dtypes(cfg, dt, ldt);
    size_t b = layer_bytes(cfg, ldt);
    free(ldt);
    return b;
}

int model_weights_alloc_as(ModelWeights *w, const ModelConfig *cfg, const DType dt_in[PARAM_COUNT], PailErr *err) {
    size_t L = cfg->num_hidden_layers ? cfg->num_hidden_layers : 1;
    DType *ldt = malloc(PARAM_COUNT * L * sizeof *ldt);
    if (!ldt) {
        memset(w, 0, sizeof *w);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    layer_dtypes(cfg, dt_in, ldt);
    int rc = model_weights_alloc_layers(w, cfg, ldt, err);
    free(ldt);
    return rc;
}

int model_weights_alloc_layers(ModelWeights *w, const ModelConfig *cfg, const DType *ldt_in, PailErr *err) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    model_param_specs(cfg, w->specs);
    size_t L = cfg->num_hidden_layers ? cfg->num_hidden_layers : 1;
    DType *ldt = malloc(PARAM_COUNT * L * sizeof *ldt);
    w->slices = malloc(PARAM_COUNT * L * sizeof *w->slices);
    if (!ldt || !w->slices) {
        free(ldt);
        model_weights_free(w);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < PARAM_COUNT; i++)
        for (size_t l = 0; l < L; l++) {
            DType d = ldt_in[i * L + l];
            bool mat = model_param_is_matrix((ModelParamId)i);
            ldt[i * L + l] = mat && (unsigned)d < DT_COUNT ? d : DT_F32;
            if (mat && w->specs[i].present && dtype_is_quant(d) && w->specs[i].shape[1] % (size_t)dtype_block(d)) {
                char nm[256];
                model_param_name(&w->specs[i], (int)l, nm, sizeof nm);
                size_t cols = w->specs[i].shape[1];
                free(ldt);
                model_weights_free(w);
                return err_set(err, PAIL_ERR_INVALID, "%s: rows of %zu are not whole %s blocks of %d", nm, cols,
                               dtype_name(d), dtype_block(d));
            }
        }
    for (int i = 0; i < PARAM_COUNT; i++) w->dtype[i] = ldt[i * L];
    w->bytes = layout(cfg, w->specs, ldt, w->offsets, w->slices, &w->num_params);
    free(ldt);
    w->memory = mem_alloc_big(w->bytes ? w->bytes : 64);
    if (!w->memory) {
        size_t np = w->num_params, b = w->bytes;
        model_weights_free(w);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory for %zu parameters (%.1f GiB)", np, b / (double)(1 << 30));
    }
    void **mats[PARAM_COUNT] = {[PARAM_EMBED] = &w->p.embed_tokens, [PARAM_WQ] = &w->p.wq, [PARAM_WK] = &w->p.wk,
                                [PARAM_WV] = &w->p.wv, [PARAM_WO] = &w->p.wo, [PARAM_W_GATE] = &w->p.w_gate,
                                [PARAM_W_UP] = &w->p.w_up, [PARAM_W_DOWN] = &w->p.w_down,
                                [PARAM_LM_HEAD] = &w->p.lm_head, [PARAM_WQKV] = &w->p.wqkv,
                                [PARAM_W_GATE_UP] = &w->p.w_gate_up, [PARAM_ROUTER] = &w->p.router,
                                [PARAM_EXP_GATE_UP] = &w->p.exp_gate_up, [PARAM_EXP_DOWN] = &w->p.exp_down,
                                [PARAM_SHARED_GATE] = &w->p.shared_gate};
    float **vecs[PARAM_COUNT] = {[PARAM_ATTN_NORM] = &w->p.attn_norm, [PARAM_BQ] = &w->p.bq, [PARAM_BK] = &w->p.bk,
                                 [PARAM_BV] = &w->p.bv, [PARAM_BO] = &w->p.bo, [PARAM_Q_NORM] = &w->p.q_norm,
                                 [PARAM_K_NORM] = &w->p.k_norm, [PARAM_MLP_NORM] = &w->p.mlp_norm,
                                 [PARAM_FINAL_NORM] = &w->p.final_norm, [PARAM_PRE_FF_NORM] = &w->p.pre_ff_norm,
                                 [PARAM_POST_FF_NORM] = &w->p.post_ff_norm, [PARAM_SINKS] = &w->p.sinks,
                                 [PARAM_ROUTER_BIAS] = &w->p.router_bias,
                                 [PARAM_EXP_GATE_UP_BIAS] = &w->p.exp_gate_up_bias,
                                 [PARAM_EXP_DOWN_BIAS] = &w->p.exp_down_bias};
    for (int i = 0; i < PARAM_COUNT; i++) {
        void *p = w->specs[i].present ? (char *)w->memory + w->slices[i * L].byte : NULL;
        if (mats[i]) *mats[i] = p;
        else *vecs[i] = p;
    }
    if (cfg->tie_word_embeddings) {
        w->p.lm_head = w->p.embed_tokens;
        w->dtype[PARAM_LM_HEAD] = w->dtype[PARAM_EMBED];
    }
    if (w->specs[PARAM_WQKV].present) {  // phi3: the views take their fused family's dtype
        w->dtype[PARAM_WQ] = w->dtype[PARAM_WK] = w->dtype[PARAM_WV] = w->dtype[PARAM_WQKV];
        w->dtype[PARAM_W_GATE] = w->dtype[PARAM_W_UP] = w->dtype[PARAM_W_GATE_UP];
    }
    return 0;
}

// phi3: the fused family and first row of a view (q, k, v in qkv_proj; gate, up in gate_up_proj).
static bool fused_view(const ModelWeights *w, ModelParamId id, ModelParamId *fid, size_t *row0) {
    if (!w->specs[PARAM_WQKV].present) return false;
    size_t Q = (size_t)w->cfg.num_attention_heads * w->cfg.head_dim, KV = (size_t)w->cfg.num_key_value_heads * w->cfg.head_dim;
    switch (id) {
    case PARAM_WQ: *fid = PARAM_WQKV; *row0 = 0; return true;
    case PARAM_WK: *fid = PARAM_WQKV; *row0 = Q; return true;
    case PARAM_WV: *fid = PARAM_WQKV; *row0 = Q + KV; return true;
    case PARAM_W_GATE: *fid = PARAM_W_GATE_UP; *row0 = 0; return true;
    case PARAM_W_UP: *fid = PARAM_W_GATE_UP; *row0 = (size_t)w->cfg.intermediate_size; return true;
    default: return false;
    }
}

size_t model_weights_elem_offset(const ModelWeights *w, ModelParamId id, int layer) {
    ModelParamId fid;
    size_t row0;
    if (fused_view(w, id, &fid, &row0))
        return w->offsets[fid] + (size_t)layer * w->specs[fid].numel + row0 * w->specs[fid].shape[1];
    if (id == PARAM_LM_HEAD && w->cfg.tie_word_embeddings) id = PARAM_EMBED;
    const ModelParamSpec *s = &w->specs[id];
    if (!s->present) return (size_t)-1;
    return w->offsets[id] + (s->per_layer ? (size_t)layer * s->numel : 0);
}

int model_weights_alloc(ModelWeights *w, const ModelConfig *cfg, PailErr *err) {
    DType dt[PARAM_COUNT];
    model_dtypes_uniform(DT_F32, dt);
    return model_weights_alloc_as(w, cfg, dt, err);
}

void model_weights_free(ModelWeights *w) {
    if (!w) return;
    free(w->memory);
    free(w->slices);
    memset(w, 0, sizeof *w);
}

static const ModelSlice *slice_of(const ModelWeights *w, ModelParamId id, int layer) {
    size_t L = w->cfg.num_hidden_layers ? w->cfg.num_hidden_layers : 1;
    return &w->slices[(size_t)id * L + (w->specs[id].per_layer ? (size_t)layer : 0)];
}

void *model_weights_tensor(const ModelWeights *w, ModelParamId id, int layer) {
    if (id == PARAM_LM_HEAD && w->cfg.tie_word_embeddings) return w->p.embed_tokens;
    ModelParamId fid;
    size_t row0;
    if (fused_view(w, id, &fid, &row0))
        return (char *)model_weights_tensor(w, fid, layer) +
               row0 * dtype_row_bytes(slice_of(w, fid, layer)->dt, w->specs[fid].shape[1]);
    if (!w->specs[id].present) return NULL;
    return (char *)w->memory + slice_of(w, id, layer)->byte;
}

DType model_weights_dtype(const ModelWeights *w, ModelParamId id, int layer) {
    if (id == PARAM_LM_HEAD && w->cfg.tie_word_embeddings) id = PARAM_EMBED;
    ModelParamId fid;
    size_t row0;
    if (fused_view(w, id, &fid, &row0)) id = fid;
    return w->specs[id].present ? slice_of(w, id, layer)->dt : DT_F32;
}

bool model_weights_quantized(const ModelWeights *w) {
    size_t L = w->cfg.num_hidden_layers ? w->cfg.num_hidden_layers : 1;
    for (size_t i = 0; w->slices && i < PARAM_COUNT * L; i++)
        if (w->specs[i / L].present && dtype_is_quant(w->slices[i].dt)) return true;
    return false;
}

float *model_weights_f32(const ModelWeights *w) {
    size_t L = w->cfg.num_hidden_layers ? w->cfg.num_hidden_layers : 1;
    for (size_t i = 0; i < PARAM_COUNT * L; i++)
        if (w->specs[i / L].present && w->slices[i].dt != DT_F32) return NULL;
    return w->memory;  // unpadded: a family's first byte is 4 * offsets[i] (layout)
}

void model_layer_dtypes_desc(const ModelConfig *cfg, const DType *ldt, char *out, size_t cap) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    size_t L = cfg->num_hidden_layers ? cfg->num_hidden_layers : 1;
    bool seen[DT_COUNT] = {0};
    for (int i = 0; i < PARAM_COUNT; i++)
        if (specs[i].present && model_param_is_matrix((ModelParamId)i))
            for (size_t l = 0; l < (specs[i].per_layer ? L : 1); l++) seen[ldt[i * L + l]] = true;
    size_t n = 0;
    out[0] = 0;
    // the quantized ones first, then the narrow float one: "q4_k+q6_k", "bf16+f32"
    const DType order[DT_COUNT] = {DT_Q4_0, DT_Q4_1, DT_Q4_K, DT_Q5_0, DT_Q5_1, DT_Q5_K,
                                   DT_Q6_K, DT_Q8_0, DT_BF16, DT_F16,  DT_F32};
    for (int k = 0; k < DT_COUNT; k++)
        if (seen[order[k]] && n < cap) n += snprintf(out + n, cap - n, "%s%s", n ? "+" : "", dtype_name(order[k]));
}

void model_weights_dtype_desc(const ModelWeights *w, char *out, size_t cap) {
    size_t L = w->cfg.num_hidden_layers ? w->cfg.num_hidden_layers : 1;
    DType *ldt = malloc(PARAM_COUNT * L * sizeof *ldt);
    if (!ldt) {
        snprintf(out, cap, "?");
        return;
    }
    for (size_t i = 0; i < PARAM_COUNT * L; i++) ldt[i] = w->slices[i].dt;
    model_layer_dtypes_desc(&w->cfg, ldt, out, cap);
    free(ldt);
}

// A per-expert tensor's (family, part) from its name p after "<prefix>N.": "mlp.experts.E.gate_proj.weight"
// (mixtral: "block_sparse_moe.experts.E.w1.weight"). 1 when it is one, 0 when not, -1 (err) for an
// expert index past num_experts.
static int classify_expert(const ModelConfig *cfg, const char *p, const char *name, const char *file, int *id,
                           int *part, PailErr *err) {
    if (!model_is_moe(cfg) || cfg->type == MODEL_GRANITEMOE || cfg->type == MODEL_GPT_OSS) return 0;
    bool mix = cfg->type == MODEL_MIXTRAL;
    const char *pre = mix ? "block_sparse_moe.experts." : "mlp.experts.";
    size_t n = strlen(pre);
    if (strncmp(p, pre, n)) return 0;
    p += n;
    long e = 0;
    int nd = 0;
    while (*p >= '0' && *p <= '9' && nd < 6) e = e * 10 + (*p++ - '0'), nd++;
    if (nd == 0 || *p != '.' || (nd > 1 && p[-nd] == '0')) return 0;
    p++;
    static const char *leaves[2][3] = {{"gate_proj.weight", "up_proj.weight", "down_proj.weight"},
                                       {"w1.weight", "w3.weight", "w2.weight"}};
    int k = 0;
    while (k < 3 && strcmp(p, leaves[mix][k])) k++;
    if (k == 3) return 0;
    if (e >= cfg->num_experts)
        return err_set(err, PAIL_ERR_INVALID, "%s: unexpected tensor '%s': config.json has num_experts = %d", file,
                       name, cfg->num_experts);
    *id = k == 2 ? PARAM_EXP_DOWN : PARAM_EXP_GATE_UP;
    *part = k == 2 ? (int)e : 2 * (int)e + k;
    return 1;
}

// Maps a tensor name to (family, layer, part). Returns 1 when expected, 0 when it is a
// harmless extra to skip, -1 (err set) when unexpected.
static int classify(const ModelConfig *cfg, const ModelParamSpec *specs, const char *name, const char *file,
                    int *id, int *layer, int *part, PailErr *err) {
    *part = 0;
    const char *pre = specs[PARAM_ATTN_NORM].prefix;
    size_t pl = strlen(pre);
    if (!strncmp(name, pre, pl)) {
        const char *p = name + pl;
        long l = 0;
        int nd = 0;
        while (*p >= '0' && *p <= '9' && nd < 6) l = l * 10 + (*p++ - '0'), nd++;
        if (nd == 0 || *p != '.' || (nd > 1 && name[pl] == '0'))
            return err_set(err, PAIL_ERR_INVALID, "%s: unexpected tensor '%s' (bad layer index)", file, name);
        p++;
        // Old checkpoints stored RoPE's inverse frequencies as a buffer; pail
        // recomputes them from rope_theta, so they carry no information.
        if (!strcmp(p, "self_attn.rotary_emb.inv_freq")) return 0;
        if (l >= cfg->num_hidden_layers)
            return err_set(err, PAIL_ERR_INVALID, "%s: unexpected tensor '%s': config.json has num_hidden_layers = %d",
                           file, name, cfg->num_hidden_layers);
        int ke = classify_expert(cfg, p, name, file, id, part, err);
        if (ke != 0) {
            *layer = (int)l;
            return ke;
        }
        for (int i = 0; i < PARAM_COUNT; i++)
            if (specs[i].per_layer && !strcmp(p, specs[i].name) && model_param_nparts(cfg, (ModelParamId)i) == 1) {
                if (!specs[i].present)
                    return err_set(err, PAIL_ERR_INVALID,
                                   "%s: unexpected tensor '%s': a %s model with this config.json has no %s", file,
                                   name, model_type_name(cfg->type), specs[i].name);
                *id = i;
                *layer = (int)l;
                return 1;
            }
        return err_set(err, PAIL_ERR_INVALID, "%s: unexpected tensor '%s' (not part of a %s decoder layer)", file,
                       name, model_type_name(cfg->type));
    }
    if (!strcmp(name, "model.rotary_emb.inv_freq")) return 0;
    // A tied checkpoint saved with its lm_head copy: the model uses embed_tokens.
    if (cfg->tie_word_embeddings && !strcmp(name, "lm_head.weight")) return 0;
    for (int i = 0; i < PARAM_COUNT; i++)
        if (!specs[i].per_layer && !strcmp(name, specs[i].name)) {
            if (!specs[i].present)
                return err_set(err, PAIL_ERR_INVALID, "%s: unexpected tensor '%s'", file, name);
            *id = i;
            *layer = 0;
            return 1;
        }
    return err_set(err, PAIL_ERR_INVALID, "%s: unexpected tensor '%s' (not part of a %s model)", file, name,
                   model_type_name(cfg->type));
}

static void shape_str(const int64_t *shape, int ndim, char *out, size_t cap) {
    size_t n = snprintf(out, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) n += snprintf(out + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

static const char *quant_key(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", MODEL_QUANT_META, name);
    return buf;
}

// -1: a plain tensor; -2: named quantized with a type pail does not know; else the DType.
int model_tensor_quant(const SafeTensorsSet *set, int fi, const SafeTensor *t) {
    char key[300];
    const char *v = safetensors_meta(&set->files[fi], quant_key(t->name, key, sizeof key));
    if (!v) return -1;
    DType d;
    if (dtype_parse(v, &d) < 0 || !dtype_is_quant(d)) return -2;
    return (int)d;
}

int model_weights_check(const ModelConfig *cfg, const SafeTensorsSet *set, PailErr *err) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    int L = cfg->num_hidden_layers;
    // seen: one byte per part of each (family, layer), family id's from base[id]
    size_t base[PARAM_COUNT], nseen = 0;
    for (int id = 0; id < PARAM_COUNT; id++) {
        base[id] = nseen;
        nseen += (size_t)L * model_param_nparts(cfg, (ModelParamId)id);
    }
    unsigned char *seen = calloc(nseen, 1);
    if (!seen) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    int rc = -1;
    for (int f = 0; f < set->nfiles; f++) {
        const char *file = set->files[f].path;  // dir/name, for messages
        for (int i = 0; i < set->files[f].n; i++) {
            const SafeTensor *t = &set->files[f].tensors[i];
            int id = 0, layer = 0, part = 0;
            int k = classify(cfg, specs, t->name, file, &id, &layer, &part, err);
            if (k < 0) goto out;
            if (k == 0) continue;
            ModelTensorPart tp;  // what this tensor must be: its rows of the family (rows, cols) and file shape
            model_param_part(cfg, specs, (ModelParamId)id, layer, part, &tp);
            size_t at = base[id] + (size_t)layer * model_param_nparts(cfg, (ModelParamId)id) + part;
            int q = model_tensor_quant(set, f, t);
            if (q == -2) {
                err_set(err, PAIL_ERR_UNSUPPORTED, "%s: tensor '%s': metadata %s%s is '%s', not a type pail computes "
                        "on (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)", file, t->name, MODEL_QUANT_META,
                        t->name, safetensors_meta(&set->files[f], quant_key(t->name, (char[300]){0}, 300)));
                goto out;
            }
            if (q >= 0) {  // blocks: U8 [rows, row bytes]
                DType qd = (DType)q;
                if (!model_param_is_matrix((ModelParamId)id) || specs[id].ndim != 2) {
                    err_set(err, PAIL_ERR_UNSUPPORTED, "%s: tensor '%s' is quantized (%s); pail quantizes only the "
                            "projections, the embedding and the head", file, t->name, dtype_name(qd));
                    goto out;
                }
                if (tp.transposed) {  // pail writes them as floats (model_weights_save)
                    err_set(err, PAIL_ERR_UNSUPPORTED, "%s: tensor '%s' is quantized (%s): gpt_oss's transposed "
                            "experts are loaded from F32, F16 or BF16 only", file, t->name, dtype_name(qd));
                    goto out;
                }
                if (tp.cols % (size_t)dtype_block(qd)) {
                    err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' is %s, but its rows of %zu are not whole blocks "
                            "of %d", file, t->name, dtype_name(qd), tp.cols, dtype_block(qd));
                    goto out;
                }
                size_t rb = dtype_row_bytes(qd, tp.cols);
                if (t->dtype != ST_DTYPE_U8 || t->ndim != 2 || (size_t)t->shape[0] != tp.rows ||
                    (size_t)t->shape[1] != rb) {
                    char got[128];
                    shape_str(t->shape, t->ndim, got, sizeof got);
                    err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' is %s [%zu, %zu]: it must be U8 [%zu, %zu] (%zu "
                            "blocks of %zu bytes a row), the file holds %s %s (truncated blocks?)", file, t->name,
                            dtype_name(qd), tp.rows, tp.cols, tp.rows, rb, rb / dtype_block_bytes(qd),
                            dtype_block_bytes(qd), safetensors_dtype_name(t->dtype), got);
                    goto out;
                }
                seen[at] = 1;
                continue;
            }
            if (t->dtype != ST_DTYPE_F32 && t->dtype != ST_DTYPE_BF16 && t->dtype != ST_DTYPE_F16) {
                err_set(err, PAIL_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; pail loads F32, F16 and BF16 (and "
                        "GGUF blocks named by %s<tensor> metadata)", file, t->name,
                        safetensors_dtype_name(t->dtype), MODEL_QUANT_META);
                goto out;
            }
            bool ok = t->ndim == tp.ndim;
            for (int d = 0; ok && d < tp.ndim; d++) ok = (size_t)t->shape[d] == tp.shape[d];
            if (!ok) {
                char got[128], want[128];
                int64_t ws[3] = {(int64_t)tp.shape[0], (int64_t)tp.shape[1], (int64_t)tp.shape[2]};
                shape_str(t->shape, t->ndim, got, sizeof got);
                shape_str(ws, tp.ndim, want, sizeof want);
                err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' has shape %s, config.json implies %s", file, t->name,
                        got, want);
                goto out;
            }
            seen[at] = 1;
        }
    }
    for (int id = 0; id < PARAM_COUNT; id++) {
        if (!specs[id].present) continue;
        int np = model_param_nparts(cfg, (ModelParamId)id);
        for (int l = 0; l < (specs[id].per_layer ? L : 1); l++)
            for (int k = 0; k < np; k++)
                if (!seen[base[id] + (size_t)l * np + k]) {
                    ModelTensorPart tp;
                    model_param_part(cfg, specs, (ModelParamId)id, l, k, &tp);
                    err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' is missing (a %s model with this config.json "
                            "needs it)", set->dir, tp.name, model_type_name(cfg->type));
                    goto out;
                }
    }
    rc = 0;
out:
    free(seen);
    return rc;
}

void model_base_sha256(const SafeTensorsSet *set, char hex[65]) {
    char(*file_hex)[65] = calloc(set->nfiles ? set->nfiles : 1, 65);
    if (!file_hex) {  // a few bytes per shard: only when memory is gone; say so rather than guess
        snprintf(hex, 65, "unavailable-out-of-memory");
        return;
    }
    // Shards hash independently: one thread each.
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < set->nfiles; i++) sha256_hex(set->files[i].bytes, set->files[i].len, file_hex[i]);
    Sha256 *s = sha256_new();
    for (int i = 0; i < set->nfiles; i++) {  // file_names are sorted bytewise (strcmp)
        sha256_update(s, file_hex[i], 64);
        sha256_update(s, "  ", 2);
        sha256_update(s, set->file_names[i], strlen(set->file_names[i]));
        sha256_update(s, "\n", 1);
    }
    sha256_final_hex(s, hex);
    free(file_hex);
}

static DType from_st(SafeTensorsDtype d) {
    return d == ST_DTYPE_BF16 ? DT_BF16 : d == ST_DTYPE_F16 ? DT_F16 : DT_F32;
}

void model_weights_choose_dtypes(const ModelConfig *cfg, const SafeTensorsSet *set, int want, DType *ldt) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    size_t L = cfg->num_hidden_layers ? cfg->num_hidden_layers : 1;
    for (size_t i = 0; i < PARAM_COUNT * L; i++) ldt[i] = DT_F32;
    int want_all = want;
    for (int id = 0; id < PARAM_COUNT; id++) {
        if (!specs[id].present || !model_param_is_matrix((ModelParamId)id)) continue;
        size_t nl = specs[id].per_layer ? L : 1;
        // the router and qwen2_moe's shared-expert gate choose the experts: --quantize keeps them as stored
        // (16-bit floats or f32); --dtype applies to them as to every matrix
        want = (id == PARAM_ROUTER || id == PARAM_SHARED_GATE) && want_all != MODEL_DTYPE_AUTO &&
                       dtype_is_quant((DType)want_all)
                   ? MODEL_DTYPE_AUTO
                   : want_all;
        DType *d = ldt + (size_t)id * L;
        // as stored: a quantized layer its blocks; the float layers their one dtype, or f32 (exact) when they
        // differ. A layer of several tensors (the experts) is quantized when all its parts are, alike; a mix is f32.
        int first = -1, np = model_param_nparts(cfg, (ModelParamId)id);
        for (size_t l = 0; l < nl; l++) {
            int q = -3, f = -1;  // q: -3 no part yet, -1 float parts, -4 a mix; f: the float parts' dtype
            for (int k = 0; k < np; k++) {
                ModelTensorPart tp;
                model_param_part(cfg, specs, (ModelParamId)id, (int)l, k, &tp);
                int fi = 0;
                const SafeTensor *t = safetensors_set_find(set, tp.name, &fi);
                int qk = t ? model_tensor_quant(set, fi, t) : -1;
                q = q == -3 || q == qk ? qk : -4;
                if (qk < 0) {
                    int fk = t ? (int)from_st(t->dtype) : (int)DT_F32;
                    f = f < 0 || f == fk ? fk : (int)DT_F32;
                }
            }
            if (q >= 0) {
                d[l] = want != MODEL_DTYPE_AUTO && !dtype_is_quant((DType)want) ? (DType)want : (DType)q;
                continue;
            }
            if (q == -4 || f < 0) f = DT_F32;
            d[l] = (DType)f;
            if (first < 0) first = f;
            else if (f != first) first = DT_F32;
        }
        for (size_t l = 0; l < nl; l++) {
            if (dtype_is_quant(d[l])) continue;
            if (want == MODEL_DTYPE_AUTO) d[l] = (DType)first;
            else if (dtype_is_quant((DType)want)) d[l] = quant_fallback((DType)want, specs[id].shape[1]);
            else d[l] = (DType)want;
        }
        for (size_t l = nl; l < L; l++) d[l] = d[0];
    }
    if (cfg->tie_word_embeddings)
        for (size_t l = 0; l < L; l++) ldt[PARAM_LM_HEAD * L + l] = ldt[PARAM_EMBED * L];
}

// dst (n, in dtype to) = the tensor t (dtype_convert). -1 when a finite value
// overflowed to f16's infinity; *bad is its element.
static int convert_tensor(void *dst, DType to, const SafeTensor *t, size_t *bad) {
    DType from = from_st(t->dtype);
    dtype_convert(dst, to, t->data, from, t->nelem);
    if (to != DT_F16 || from == DT_F16) return 0;
    const uint16_t *o = dst;
    for (size_t k = 0; k < t->nelem; k++)
        if ((o[k] & 0x7fff) == 0x7c00) {
            float v;
            dtype_to_f32(&v, (const char *)t->data + k * dtype_size(from), from, 1);
            if (isfinite(v)) {
                *bad = k;
                return -1;
            }
        }
    return 0;
}

// (family, layer) from tensor t of file fi into dst, held as dt: blocks copied,
// dequantized, converted, or quantized a row at a time. -1 as convert_tensor.
static int load_slice(void *dst, DType dt, const SafeTensorsSet *set, int fi, const SafeTensor *t,
                      const ModelParamSpec *s, size_t *bad) {
    int q = model_tensor_quant(set, fi, t);
    if (q >= 0) {
        if ((DType)q == dt) memcpy(dst, t->data, t->nelem);  // U8 [rows, row bytes]: the blocks as stored
        else dtype_convert(dst, dt, t->data, (DType)q, s->numel);
        return 0;
    }
    if (!dtype_is_quant(dt)) return convert_tensor(dst, dt, t, bad);
    size_t rows = s->shape[0], cols = s->shape[1], rb = dtype_row_bytes(dt, cols);
    DType from = from_st(t->dtype);
    float *row = malloc(cols * sizeof *row);
    if (!row) return -2;
    for (size_t r = 0; r < rows; r++) {
        dtype_to_f32(row, (const char *)t->data + r * cols * dtype_size(from), from, cols);
        quant_quantize((char *)dst + r * rb, row, dt, cols);
    }
    free(row);
    return 0;
}

// The file element (flat index) holding family row r (of the part's rows), column k.
static size_t part_file_index(const ModelTensorPart *tp, size_t r, size_t k) {
    size_t R = tp->rows / tp->shape[0], e = r / R, i = r % R;
    size_t j = tp->interleaved ? (i < R / 2 ? 2 * i : 2 * (i - R / 2) + 1) : i;
    return e * R * tp->cols + (tp->transposed ? k * R + j : j * tp->cols + k);
}

// A permuted part (gpt_oss's experts) from the file tensor t into the family's rows dst (dt), an expert at
// a time through fp32 (exact for F16 and BF16): converted, or quantized a row at a time. -1 (*bad: the
// file element) when a finite value overflowed f16, -2 out of memory.
static int load_permuted(void *dst, DType dt, const SafeTensor *t, const ModelTensorPart *tp, size_t *bad) {
    size_t E = tp->shape[0], R = tp->rows / E, K = tp->cols, n = R * K;
    DType from = from_st(t->dtype);
    size_t rb = dtype_row_bytes(dt, K);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    int rc = a && b ? 0 : -2;
    for (size_t e = 0; e < E && rc == 0; e++) {
        dtype_to_f32(a, (const char *)t->data + e * n * dtype_size(from), from, n);
        for (size_t r = 0; r < R; r++)
            for (size_t k = 0; k < K; k++) b[r * K + k] = a[part_file_index(tp, e * R + r, k) - e * n];
        char *d = (char *)dst + e * R * rb;
        if (dtype_is_quant(dt)) {
            for (size_t r = 0; r < R; r++) quant_quantize(d + r * rb, b + r * K, dt, K);
            continue;
        }
        dtype_convert(d, dt, b, DT_F32, n);
        if (dt != DT_F16 || from == DT_F16) continue;
        const uint16_t *o = (const uint16_t *)d;
        for (size_t x = 0; x < n && rc == 0; x++)
            if ((o[x] & 0x7fff) == 0x7c00 && isfinite(b[x])) {
                *bad = part_file_index(tp, e * R + x / K, x % K);
                rc = -1;
            }
    }
    free(a);
    free(b);
    return rc;
}

int model_part_to_file(void *dst, DType to, const void *src, DType dt, const ModelTensorPart *tp) {
    size_t E = tp->shape[0], R = tp->rows / E, K = tp->cols, n = R * K;
    size_t rb = dtype_row_bytes(dt, K);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return -1;
    }
    for (size_t e = 0; e < E; e++) {
        dtype_convert(b, DT_F32, (const char *)src + e * R * rb, dt, n);
        for (size_t r = 0; r < R; r++)
            for (size_t k = 0; k < K; k++) a[part_file_index(tp, e * R + r, k) - e * n] = b[r * K + k];
        dtype_convert((char *)dst + e * n * dtype_size(to), to, a, DT_F32, n);
    }
    free(a);
    free(b);
    return 0;
}

typedef struct {
    int id, layer, part;
} LoadItem;

int model_weights_load_set(ModelWeights *w, const ModelConfig *cfg, const SafeTensorsSet *set, int want,
                           PailErr *err) {
    if (want != MODEL_DTYPE_AUTO && (want < 0 || want >= DT_COUNT))
        return err_set(err, PAIL_ERR_INVALID, "weights: dtype %d is not auto, f32, bf16, f16 or a quantized type", want);
    if (model_weights_check(cfg, set, err) < 0) return -1;
    size_t Lz = cfg->num_hidden_layers ? cfg->num_hidden_layers : 1;
    DType *ldt = malloc(PARAM_COUNT * Lz * sizeof *ldt);
    if (!ldt) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    model_weights_choose_dtypes(cfg, set, want, ldt);
    int arc = model_weights_alloc_layers(w, cfg, ldt, err);
    free(ldt);
    if (arc < 0) return -1;
    int L = cfg->num_hidden_layers;
    size_t nwork = 0, cap = 0;
    for (int id = 0; id < PARAM_COUNT; id++)
        if (w->specs[id].present) cap += (size_t)L * model_param_nparts(cfg, (ModelParamId)id);
    LoadItem *work = malloc((cap ? cap : 1) * sizeof *work);  // a tensor each: (family, layer, part)
    if (!work) {
        model_weights_free(w);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    for (int id = 0; id < PARAM_COUNT; id++)
        if (w->specs[id].present)
            for (int l = 0; l < (w->specs[id].per_layer ? L : 1); l++)
                for (int k = 0; k < model_param_nparts(cfg, (ModelParamId)id); k++) work[nwork++] = (LoadItem){id, l, k};
    long failed = -1;  // the work item whose tensor overflowed f16
    int nomem = 0;
    size_t bad_at = 0;
#pragma omp parallel for schedule(dynamic, 1)
    for (long i = 0; i < (long)nwork; i++) {
        int id = work[i].id, l = work[i].layer;
        ModelTensorPart tp;
        model_param_part(cfg, w->specs, (ModelParamId)id, l, work[i].part, &tp);
        int fi = 0;
        const SafeTensor *t = safetensors_set_find(set, tp.name, &fi);  // present: checked above
        size_t bad = 0;
        DType dt = model_weights_dtype(w, id, l);
        ModelParamSpec ps = w->specs[id];  // this tensor's rows of the family's layer
        if (ps.ndim == 2) ps.shape[0] = tp.rows, ps.numel = tp.rows * tp.cols;
        char *dst = (char *)model_weights_tensor(w, id, l) + (ps.ndim == 2 ? tp.row0 * dtype_row_bytes(dt, tp.cols) : 0);
        int r = tp.transposed || tp.interleaved ? load_permuted(dst, dt, t, &tp, &bad)
                                                : load_slice(dst, dt, set, fi, t, &ps, &bad);
        if (r == -2) {
#pragma omp atomic write
            nomem = 1;
        } else if (r < 0) {
#pragma omp critical(weights_load_fail)
            if (failed < 0 || i < failed) failed = i, bad_at = bad;
        }
    }
    if (nomem) {
        free(work);
        model_weights_free(w);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory quantizing the weights");
    }
    if (failed >= 0) {
        ModelTensorPart tp;
        model_param_part(cfg, w->specs, (ModelParamId)work[failed].id, work[failed].layer, work[failed].part, &tp);
        const char *nm = tp.name;
        const SafeTensor *t = safetensors_set_find(set, nm, NULL);
        float v = 0;
        safetensors_to_f32(&v, (const char *)t->data + bad_at * safetensors_dtype_size(t->dtype), t->dtype, 1);
        free(work);
        model_weights_free(w);
        return err_set(err, PAIL_ERR_INVALID,
                       "%s: tensor '%s' holds %g (element %zu), beyond f16's range: load it with --dtype bf16 or f32",
                       set->dir, nm, v, bad_at);
    }
    free(work);
    model_base_sha256(set, w->base_sha256);
    return 0;
}

int model_weights_load_as(ModelWeights *w, const char *dir, int want, PailErr *err) {
    ModelConfig cfg;
    if (model_config_load(&cfg, dir, err) < 0) return -1;
    SafeTensorsSet set;
    if (safetensors_set_open(&set, dir, err) < 0) return -1;
    int rc = model_weights_load_set(w, &cfg, &set, want, err);
    safetensors_set_close(&set);
    return rc;
}

int model_weights_load(ModelWeights *w, const char *dir, PailErr *err) {
    return model_weights_load_as(w, dir, DT_F32, err);
}

int model_weights_probe(const char *dir, int want, size_t *bytes, char *desc, PailErr *err) {
    ModelConfig cfg;
    if (model_config_load(&cfg, dir, err) < 0) return -1;
    SafeTensorsSet set;
    if (safetensors_set_open(&set, dir, err) < 0) return -1;
    int rc = model_weights_check(&cfg, &set, err);
    size_t L = cfg.num_hidden_layers ? cfg.num_hidden_layers : 1;
    DType *ldt = rc == 0 ? malloc(PARAM_COUNT * L * sizeof *ldt) : NULL;
    if (rc == 0 && !ldt) rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
    if (rc == 0) {
        model_weights_choose_dtypes(&cfg, &set, want, ldt);
        if (bytes) *bytes = layer_bytes(&cfg, ldt);
        if (desc) model_layer_dtypes_desc(&cfg, ldt, desc, MODEL_DTYPE_DESC);
    }
    free(ldt);
    safetensors_set_close(&set);
    return rc;
}
