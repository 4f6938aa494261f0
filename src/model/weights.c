// Base weights: expected tensors per config, one fp32 block, checked loading
// from a SafeTensorsSet, base_sha256 (see weights.h). Loading validates the whole
// set first and converts only when everything matches, so a bad checkpoint never
// leaves a half-filled model behind.
#include "model/weights.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/mem.h"
#include "core/sha256.h"

void model_param_specs(const ModelConfig *c, ModelParamSpec s[PARAM_COUNT]) {
    size_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim, V = c->vocab_size;
    size_t Q = (size_t)c->num_attention_heads * D, KV = (size_t)c->num_key_value_heads * D;
    bool b = c->has_qkv_bias, o = c->has_o_bias, n = c->has_qk_norm;
    const ModelParamSpec t[PARAM_COUNT] = {
        [PARAM_EMBED] = {"model.embed_tokens.weight", false, true, 2, {V, C}, 0},
        [PARAM_ATTN_NORM] = {"input_layernorm.weight", true, true, 1, {C, 0}, 0},
        [PARAM_WQ] = {"self_attn.q_proj.weight", true, true, 2, {Q, C}, 0},
        [PARAM_WK] = {"self_attn.k_proj.weight", true, true, 2, {KV, C}, 0},
        [PARAM_WV] = {"self_attn.v_proj.weight", true, true, 2, {KV, C}, 0},
        [PARAM_WO] = {"self_attn.o_proj.weight", true, true, 2, {C, Q}, 0},
        [PARAM_BQ] = {"self_attn.q_proj.bias", true, b, 1, {Q, 0}, 0},
        [PARAM_BK] = {"self_attn.k_proj.bias", true, b, 1, {KV, 0}, 0},
        [PARAM_BV] = {"self_attn.v_proj.bias", true, b, 1, {KV, 0}, 0},
        [PARAM_BO] = {"self_attn.o_proj.bias", true, o, 1, {C, 0}, 0},
        [PARAM_Q_NORM] = {"self_attn.q_norm.weight", true, n, 1, {D, 0}, 0},
        [PARAM_K_NORM] = {"self_attn.k_norm.weight", true, n, 1, {D, 0}, 0},
        [PARAM_MLP_NORM] = {"post_attention_layernorm.weight", true, true, 1, {C, 0}, 0},
        [PARAM_W_GATE] = {"mlp.gate_proj.weight", true, true, 2, {F, C}, 0},
        [PARAM_W_UP] = {"mlp.up_proj.weight", true, true, 2, {F, C}, 0},
        [PARAM_W_DOWN] = {"mlp.down_proj.weight", true, true, 2, {C, F}, 0},
        [PARAM_FINAL_NORM] = {"model.norm.weight", false, true, 1, {C, 0}, 0},
        [PARAM_LM_HEAD] = {"lm_head.weight", false, !c->tie_word_embeddings, 2, {V, C}, 0},
    };
    for (int i = 0; i < PARAM_COUNT; i++) {
        s[i] = t[i];
        s[i].numel = s[i].shape[0] * (s[i].ndim == 2 ? s[i].shape[1] : 1);
    }
}

void model_param_name(const ModelParamSpec *s, int layer, char *out, size_t cap) {
    if (s->per_layer) snprintf(out, cap, "model.layers.%d.%s", layer, s->name);
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

int model_weights_alloc(ModelWeights *w, const ModelConfig *cfg, PailErr *err) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    model_param_specs(cfg, w->specs);
    size_t total = 0, L = cfg->num_hidden_layers;
    for (int i = 0; i < PARAM_COUNT; i++) {
        w->offsets[i] = total;
        if (w->specs[i].present) total += w->specs[i].numel * (w->specs[i].per_layer ? L : 1);
    }
    w->num_params = total;
    w->memory = mem_alloc_big(total * sizeof(float));
    if (!w->memory)
        return err_set(err, PAIL_ERR_NOMEM, "out of memory for %zu parameters (%.1f GiB fp32)", total,
                       total * 4.0 / (1 << 30));
    float **ptrs[PARAM_COUNT] = {&w->p.embed_tokens, &w->p.attn_norm, &w->p.wq, &w->p.wk, &w->p.wv, &w->p.wo,
                                 &w->p.bq, &w->p.bk, &w->p.bv, &w->p.bo, &w->p.q_norm, &w->p.k_norm,
                                 &w->p.mlp_norm, &w->p.w_gate, &w->p.w_up, &w->p.w_down, &w->p.final_norm,
                                 &w->p.lm_head};
    for (int i = 0; i < PARAM_COUNT; i++) *ptrs[i] = w->specs[i].present ? w->memory + w->offsets[i] : NULL;
    if (cfg->tie_word_embeddings) w->p.lm_head = w->p.embed_tokens;
    return 0;
}

void model_weights_free(ModelWeights *w) {
    if (!w) return;
    free(w->memory);
    memset(w, 0, sizeof *w);
}

float *model_weights_tensor(const ModelWeights *w, ModelParamId id, int layer) {
    if (id == PARAM_LM_HEAD && w->cfg.tie_word_embeddings) return w->p.embed_tokens;
    const ModelParamSpec *s = &w->specs[id];
    if (!s->present) return NULL;
    return w->memory + w->offsets[id] + (s->per_layer ? (size_t)layer * s->numel : 0);
}

// Maps a tensor name to (family, layer). Returns 1 when expected, 0 when it is a
// harmless extra to skip, -1 (err set) when unexpected.
static int classify(const ModelConfig *cfg, const ModelParamSpec *specs, const char *name, const char *file,
                    int *id, int *layer, PailErr *err) {
    const char *pre = "model.layers.";
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

int model_weights_load_set(ModelWeights *w, const ModelConfig *cfg, const SafeTensorsSet *set, PailErr *err) {
    if (model_weights_check(cfg, set, err) < 0) return -1;
    if (model_weights_alloc(w, cfg, err) < 0) return -1;
    int L = cfg->num_hidden_layers;
    for (int id = 0; id < PARAM_COUNT; id++) {
        if (!w->specs[id].present) continue;
        for (int l = 0; l < (w->specs[id].per_layer ? L : 1); l++) {
            char nm[256];
            model_param_name(&w->specs[id], l, nm, sizeof nm);
            const SafeTensor *t = safetensors_set_find(set, nm, NULL);  // present: checked above
            safetensors_to_f32(model_weights_tensor(w, id, l), t->data, t->dtype, t->nelem);
        }
    }
    model_base_sha256(set, w->base_sha256);
    return 0;
}

int model_weights_load(ModelWeights *w, const char *dir, PailErr *err) {
    ModelConfig cfg;
    if (model_config_load(&cfg, dir, err) < 0) return -1;
    SafeTensorsSet set;
    if (safetensors_set_open(&set, dir, err) < 0) return -1;
    int rc = model_weights_load_set(w, &cfg, &set, err);
    safetensors_set_close(&set);
    return rc;
}
