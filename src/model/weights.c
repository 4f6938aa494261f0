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

void model_param_specs(const ModelConfig *c, ModelParamSpec s[PARAM_COUNT]) {
    size_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim, V = c->vocab_size;
    size_t Q = (size_t)c->num_attention_heads * D, KV = (size_t)c->num_key_value_heads * D;
    bool b = c->has_qkv_bias, o = c->has_o_bias, n = c->has_qk_norm;
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
    for (int i = 0; i < PARAM_COUNT; i++) {
        s[i] = t[i];
        if (c->post_norm) {  // olmo2: the two layer norms sit after the sub-blocks; q/k norms over H*D, Hkv*D
            if (i == PARAM_ATTN_NORM) s[i].name = "post_attention_layernorm.weight";
            if (i == PARAM_MLP_NORM) s[i].name = "post_feedforward_layernorm.weight";
            if (i == PARAM_Q_NORM) s[i].shape[0] = Q;
            if (i == PARAM_K_NORM) s[i].shape[0] = KV;
        }
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
    case PARAM_WQKV: case PARAM_W_GATE_UP: return true;
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

void model_dtypes_uniform(DType mat, DType dt[PARAM_COUNT]) {
    for (int i = 0; i < PARAM_COUNT; i++) dt[i] = model_param_is_matrix((ModelParamId)i) ? mat : DT_F32;
}

// Family byte offsets for dt; returns the total. fp32 families follow each other
// unpadded, as they always did, so an all-fp32 block is one float array indexed
// by the element offsets (full fine-tuning trains it in place); a 2-byte family
// is padded to 64 bytes so that the next one starts aligned.
static size_t layout(const ModelConfig *cfg, const ModelParamSpec *specs, const DType dt[PARAM_COUNT],
                     size_t *elem_off, size_t *byte_off, size_t *num_params) {
    size_t elems = 0, bytes = 0, L = cfg->num_hidden_layers;
    for (int i = 0; i < PARAM_COUNT; i++) {
        if (elem_off) elem_off[i] = elems;
        if (byte_off) byte_off[i] = bytes;
        if (!specs[i].present) continue;
        size_t n = specs[i].numel * (specs[i].per_layer ? L : 1);
        elems += n;
        bytes += dt[i] == DT_F32 ? n * 4 : (n * dtype_size(dt[i]) + 63) & ~(size_t)63;
    }
    if (num_params) *num_params = elems;
    return bytes;
}

size_t model_weights_bytes(const ModelConfig *cfg, const DType dt[PARAM_COUNT]) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    return layout(cfg, specs, dt, NULL, NULL, NULL);
}

int model_weights_alloc_as(ModelWeights *w, const ModelConfig *cfg, const DType dt_in[PARAM_COUNT], PailErr *err) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    model_param_specs(cfg, w->specs);
    for (int i = 0; i < PARAM_COUNT; i++)
        w->dtype[i] = model_param_is_matrix((ModelParamId)i) && dt_in[i] < DT_COUNT ? dt_in[i] : DT_F32;
    w->bytes = layout(cfg, w->specs, w->dtype, w->offsets, w->byte_offsets, &w->num_params);
    w->memory = mem_alloc_big(w->bytes ? w->bytes : 64);
    if (!w->memory)
        return err_set(err, PAIL_ERR_NOMEM, "out of memory for %zu parameters (%.1f GiB)", w->num_params,
                       w->bytes / (double)(1 << 30));
    void **mats[PARAM_COUNT] = {[PARAM_EMBED] = &w->p.embed_tokens, [PARAM_WQ] = &w->p.wq, [PARAM_WK] = &w->p.wk,
                                [PARAM_WV] = &w->p.wv, [PARAM_WO] = &w->p.wo, [PARAM_W_GATE] = &w->p.w_gate,
                                [PARAM_W_UP] = &w->p.w_up, [PARAM_W_DOWN] = &w->p.w_down,
                                [PARAM_LM_HEAD] = &w->p.lm_head, [PARAM_WQKV] = &w->p.wqkv,
                                [PARAM_W_GATE_UP] = &w->p.w_gate_up};
    float **vecs[PARAM_COUNT] = {[PARAM_ATTN_NORM] = &w->p.attn_norm, [PARAM_BQ] = &w->p.bq, [PARAM_BK] = &w->p.bk,
                                 [PARAM_BV] = &w->p.bv, [PARAM_BO] = &w->p.bo, [PARAM_Q_NORM] = &w->p.q_norm,
                                 [PARAM_K_NORM] = &w->p.k_norm, [PARAM_MLP_NORM] = &w->p.mlp_norm,
                                 [PARAM_FINAL_NORM] = &w->p.final_norm, [PARAM_PRE_FF_NORM] = &w->p.pre_ff_norm,
                                 [PARAM_POST_FF_NORM] = &w->p.post_ff_norm};
    for (int i = 0; i < PARAM_COUNT; i++) {
        void *p = w->specs[i].present ? (char *)w->memory + w->byte_offsets[i] : NULL;
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
    memset(w, 0, sizeof *w);
}

void *model_weights_tensor(const ModelWeights *w, ModelParamId id, int layer) {
    if (id == PARAM_LM_HEAD && w->cfg.tie_word_embeddings) return w->p.embed_tokens;
    ModelParamId fid;
    size_t row0;
    if (fused_view(w, id, &fid, &row0))
        return (char *)model_weights_tensor(w, fid, layer) + row0 * w->specs[fid].shape[1] * dtype_size(w->dtype[fid]);
    const ModelParamSpec *s = &w->specs[id];
    if (!s->present) return NULL;
    return (char *)w->memory + w->byte_offsets[id] +
           (s->per_layer ? (size_t)layer * s->numel * dtype_size(w->dtype[id]) : 0);
}

float *model_weights_f32(const ModelWeights *w) {
    for (int i = 0; i < PARAM_COUNT; i++)
        if (w->specs[i].present && w->dtype[i] != DT_F32) return NULL;
    return w->memory;  // unpadded: byte_offsets[i] == 4 * offsets[i] (layout)
}

void model_dtypes_desc(const ModelConfig *cfg, const DType dt[PARAM_COUNT], char *out, size_t cap) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    bool seen[DT_COUNT] = {0};
    for (int i = 0; i < PARAM_COUNT; i++)
        if (specs[i].present && model_param_is_matrix((ModelParamId)i)) seen[dt[i]] = true;
    size_t n = 0;
    out[0] = 0;
    const DType order[DT_COUNT] = {DT_BF16, DT_F16, DT_F32};  // the narrow one first: "bf16+f32"
    for (int k = 0; k < DT_COUNT; k++)
        if (seen[order[k]] && n < cap) n += snprintf(out + n, cap - n, "%s%s", n ? "+" : "", dtype_name(order[k]));
}

void model_weights_dtype_desc(const ModelWeights *w, char *out, size_t cap) {
    model_dtypes_desc(&w->cfg, w->dtype, out, cap);
}

// Maps a tensor name to (family, layer). Returns 1 when expected, 0 when it is a
// harmless extra to skip, -1 (err set) when unexpected.
static int classify(const ModelConfig *cfg, const ModelParamSpec *specs, const char *name, const char *file,
                    int *id, int *layer, PailErr *err) {
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
        for (int i = 0; i < PARAM_COUNT; i++)
            if (specs[i].per_layer && !strcmp(p, specs[i].name)) {
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

int model_weights_check(const ModelConfig *cfg, const SafeTensorsSet *set, PailErr *err) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    int L = cfg->num_hidden_layers;
    unsigned char *seen = calloc((size_t)PARAM_COUNT * L, 1);
    if (!seen) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    int rc = -1;
    for (int f = 0; f < set->nfiles; f++) {
        const char *file = set->files[f].path;  // dir/name, for messages
        for (int i = 0; i < set->files[f].n; i++) {
            const SafeTensor *t = &set->files[f].tensors[i];
            int id = 0, layer = 0;
            int k = classify(cfg, specs, t->name, file, &id, &layer, err);
            if (k < 0) goto out;
            if (k == 0) continue;
            const ModelParamSpec *s = &specs[id];
            bool ok = t->ndim == s->ndim && (size_t)t->shape[0] == s->shape[0] &&
                      (s->ndim == 1 || (size_t)t->shape[1] == s->shape[1]);
            if (!ok) {
                char got[128], want[64];
                shape_str(t->shape, t->ndim, got, sizeof got);
                if (s->ndim == 2) snprintf(want, sizeof want, "[%zu, %zu]", s->shape[0], s->shape[1]);
                else snprintf(want, sizeof want, "[%zu]", s->shape[0]);
                err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' has shape %s, config.json implies %s", file, t->name,
                        got, want);
                goto out;
            }
            if (t->dtype != ST_DTYPE_F32 && t->dtype != ST_DTYPE_BF16 && t->dtype != ST_DTYPE_F16) {
                err_set(err, PAIL_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; pail loads F32, F16 and BF16", file,
                        t->name, safetensors_dtype_name(t->dtype));
                goto out;
            }
            seen[(size_t)id * L + layer] = 1;
        }
    }
    for (int id = 0; id < PARAM_COUNT; id++) {
        if (!specs[id].present) continue;
        for (int l = 0; l < (specs[id].per_layer ? L : 1); l++)
            if (!seen[(size_t)id * L + l]) {
                char nm[256];
                model_param_name(&specs[id], l, nm, sizeof nm);
                err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' is missing (a %s model with this config.json needs it)",
                        set->dir, nm, model_type_name(cfg->type));
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

void model_weights_choose_dtypes(const ModelConfig *cfg, const SafeTensorsSet *set, int want, DType dt[PARAM_COUNT]) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    for (int id = 0; id < PARAM_COUNT; id++) {
        dt[id] = DT_F32;
        if (!specs[id].present || !model_param_is_matrix((ModelParamId)id)) continue;
        if (want != MODEL_DTYPE_AUTO) {
            dt[id] = (DType)want;
            continue;
        }
        // as stored: the family's one dtype, or f32 (exact) when its layers differ
        int first = -1;
        for (int l = 0; l < (specs[id].per_layer ? cfg->num_hidden_layers : 1); l++) {
            char nm[256];
            model_param_name(&specs[id], l, nm, sizeof nm);
            const SafeTensor *t = safetensors_set_find(set, nm, NULL);
            int d = t ? (int)from_st(t->dtype) : (int)DT_F32;
            if (first < 0) first = d;
            else if (d != first) first = DT_F32;
        }
        dt[id] = first < 0 ? DT_F32 : (DType)first;
    }
    if (cfg->tie_word_embeddings) dt[PARAM_LM_HEAD] = dt[PARAM_EMBED];
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

int model_weights_load_set(ModelWeights *w, const ModelConfig *cfg, const SafeTensorsSet *set, int want,
                           PailErr *err) {
    if (want != MODEL_DTYPE_AUTO && (want < 0 || want >= DT_COUNT))
        return err_set(err, PAIL_ERR_INVALID, "weights: dtype %d is not auto, f32, bf16 or f16", want);
    if (model_weights_check(cfg, set, err) < 0) return -1;
    DType dt[PARAM_COUNT];
    model_weights_choose_dtypes(cfg, set, want, dt);
    if (model_weights_alloc_as(w, cfg, dt, err) < 0) return -1;
    int L = cfg->num_hidden_layers, nwork = 0;
    int *work = malloc((size_t)PARAM_COUNT * L * sizeof *work);  // id * L + layer
    if (!work) {
        model_weights_free(w);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    for (int id = 0; id < PARAM_COUNT; id++)
        if (w->specs[id].present)
            for (int l = 0; l < (w->specs[id].per_layer ? L : 1); l++) work[nwork++] = id * L + l;
    int failed = -1;  // the work item whose tensor overflowed f16
    size_t bad_at = 0;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < nwork; i++) {
        int id = work[i] / L, l = work[i] % L;
        char nm[256];
        model_param_name(&w->specs[id], l, nm, sizeof nm);
        const SafeTensor *t = safetensors_set_find(set, nm, NULL);  // present: checked above
        size_t bad = 0;
        if (convert_tensor(model_weights_tensor(w, id, l), w->dtype[id], t, &bad) < 0) {
#pragma omp critical(weights_load_fail)
            if (failed < 0 || i < failed) failed = i, bad_at = bad;
        }
    }
    if (failed >= 0) {
        int id = work[failed] / L, l = work[failed] % L;
        char nm[256];
        model_param_name(&w->specs[id], l, nm, sizeof nm);
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

int model_weights_probe(const char *dir, int want, DType dt[PARAM_COUNT], size_t *bytes, char *desc, PailErr *err) {
    ModelConfig cfg;
    if (model_config_load(&cfg, dir, err) < 0) return -1;
    SafeTensorsSet set;
    if (safetensors_set_open(&set, dir, err) < 0) return -1;
    int rc = model_weights_check(&cfg, &set, err);
    if (rc == 0) {
        model_weights_choose_dtypes(&cfg, &set, want, dt);
        if (bytes) *bytes = model_weights_bytes(&cfg, dt);
        if (desc) model_dtypes_desc(&cfg, dt, desc, 32);
    }
    safetensors_set_close(&set);
    return rc;
}
