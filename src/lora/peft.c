// PEFT interchange: a pail adapter as a PEFT LoRA folder (adapter_config.json +
// adapter_model.safetensors) that PEFT and vLLM load as is, the reverse, and
// merging an adapter into the base weights (W' = W + scaling * B A).
#include "lora/peft.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/fsutil.h"
#include "model/safetensors.h"
#include "shard/h5file.h"

// The router's module in transformers 5: mlp.gate (qwen*_moe, olmoe, mixtral), block_sparse_moe.router
// (granitemoe), mlp.router (gpt_oss); PEFT targets its weight (target_parameters "<path>.weight").
static const char *router_path(const ModelConfig *mc) {
    if (mc && mc->type == MODEL_GRANITEMOE) return "block_sparse_moe.router";
    if (mc && mc->type == MODEL_GPT_OSS) return "mlp.router";
    return "mlp.gate";
}

// A dense module's parent in transformers: qwen2_moe's gate/up/down are its shared expert's.
static const char *module_parent(const ModelConfig *mc, LoraModule m) {
    if (mc && model_is_moe(mc) && (m == LORA_GATE || m == LORA_UP || m == LORA_DOWN)) return "mlp.shared_expert";
    return LORA_MODULE_PARENT[m];
}

// The experts' parent module in transformers: granitemoe's block_sparse_moe, else mlp.
static const char *expert_parent(const ModelConfig *mc) {
    return mc && mc->type == MODEL_GRANITEMOE ? "block_sparse_moe" : "mlp";
}

// name: the stored module's (lora_stored_slot: phi3's qkv_proj / gate_up_proj under q's / gate's parent).
// The expert modules are PEFT's ParamWrappers on <parent>.experts.gate_up_proj / down_proj
// (target_parameters; parent "mlp", granitemoe's "block_sparse_moe"), nested when both are adapted:
// gate_up_proj's is the inner one, its keys under experts.base_layer.
static void key_of(char *out, size_t cap, const LoraLayout *l, const ModelConfig *mc, int layer, LoraModule m,
                   const char *name, char ab) {
    if (m == LORA_ROUTER) {  // a 2-D ParamWrapper on the router's weight
        snprintf(out, cap, "base_model.model.model.layers.%d.%s.lora_%c.weight", layer, router_path(mc), ab);
        return;
    }
    if (m >= LORA_EXP_GATE_UP) {
        bool nested = m == LORA_EXP_GATE_UP && lora_slot(l, layer, LORA_EXP_DOWN);
        snprintf(out, cap, "base_model.model.model.layers.%d.%s.experts.%slora_%c.weight", layer, expert_parent(mc),
                 nested ? "base_layer." : "", ab);
        return;
    }
    snprintf(out, cap, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer, module_parent(mc, m), name,
             ab);
}

// An expert module's B between pail's (E, out, R) and PEFT's (out, R E), expert e's column r at r E + e.
// inter: gpt_oss's gate_up_proj, whose out features interleave gate and up (2j gate j, 2j + 1 up j)
// where pail's rows are the gate's Fe, then the up's.
static size_t peft_row(int o, int out, bool inter) {
    return !inter ? (size_t)o : o < out / 2 ? 2 * (size_t)o : 2 * (size_t)(o - out / 2) + 1;
}
static void expert_b_to_peft(float *dst, const float *src, int E, int out, int R, bool inter) {
    for (int e = 0; e < E; e++)
        for (int o = 0; o < out; o++)
            for (int r = 0; r < R; r++)
                dst[peft_row(o, out, inter) * R * E + (size_t)r * E + e] = src[((size_t)e * out + o) * R + r];
}
static void expert_b_from_peft(float *dst, const float *src, int E, int out, int R, bool inter) {
    for (int e = 0; e < E; e++)
        for (int o = 0; o < out; o++)
            for (int r = 0; r < R; r++)
                dst[((size_t)e * out + o) * R + r] = src[peft_row(o, out, inter) * R * E + (size_t)r * E + e];
}
static bool interleaved(const ModelConfig *mc, int m) { return mc && mc->type == MODEL_GPT_OSS && m == LORA_EXP_GATE_UP; }

int peft_export(const LoraLayout *l, const float *params, const ModelConfig *mc, const char *base_model,
                const char *dir, PailErr *err) {
    bool experts = l->n_layers && (lora_slot(l, 0, LORA_EXP_GATE_UP) || lora_slot(l, 0, LORA_EXP_DOWN) ||
                                   lora_slot(l, 0, LORA_ROUTER));
    if (experts && !mc)
        return err_set(err, PAIL_ERR_INVALID, "an adapter on the experts needs --model to export (PEFT names the "
                       "expert tensors by the model's layout)");
    if (fs_mkdirs(dir, err) < 0) return -1;
    const char *xp = expert_parent(mc);
    json_t *targets = json_array(), *tparams = json_array();
    for (int m = 0; m < LORA_NMOD; m++) {
        LoraSlot st;
        const char *nm;
        if (!l->n_layers || !lora_stored_slot(l, 0, (LoraModule)m, &st, &nm)) continue;
        if (m < LORA_EXP_GATE_UP) {
            json_array_append_new(targets, json_string(nm));
        } else if (m == LORA_ROUTER) {
            char tp[96];
            snprintf(tp, sizeof tp, "%s.weight", router_path(mc));
            json_array_append_new(tparams, json_string(tp));
        } else {
            char tp[96];
            snprintf(tp, sizeof tp, "%s.%s", xp, nm);  // mlp.experts.gate_up_proj
            json_array_append_new(tparams, json_string(tp));
        }
    }
    json_t *cfg = json_pack("{s:s, s:s, s:s, s:i, s:f, s:f, s:o, s:b, s:s, s:b, s:b, s:b, s:n, s:n, s:{}, s:{}}",
                            "base_model_name_or_path", base_model ? base_model : "", "peft_type", "LORA", "task_type",
                            "CAUSAL_LM", "r", l->cfg.rank, "lora_alpha", l->cfg.alpha, "lora_dropout", 0.0,
                            "target_modules", targets, "use_rslora", l->cfg.rslora, "bias", "none", "fan_in_fan_out", 0,
                            "inference_mode", 1, "init_lora_weights", 1, "modules_to_save", "layers_to_transform",
                            "rank_pattern", "alpha_pattern");
    if (json_array_size(tparams)) json_object_set(cfg, "target_parameters", tparams);
    json_decref(tparams);
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(cfg);
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    int rc = fs_write_file_atomic(path, text, strlen(text), err);
    free(text);
    if (rc < 0) return -1;
    int n = 0, cap = 2 * l->n_layers * LORA_NMOD;
    SafeTensorsWriteItem *items = calloc((size_t)cap, sizeof *items);
    char(*names)[160] = calloc((size_t)cap, sizeof *names);
    // the experts' B in PEFT's order: one copy of the whole flat array (its other entries unused)
    float *pb = experts ? malloc((size_t)l->n_params * sizeof(float)) : NULL;
    if (!items || !names || (experts && !pb)) {
        free(items);
        free(names);
        free(pb);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    int R = l->cfg.rank;
    for (int i = 0; i < l->n_layers; i++)
        for (int m = 0; m < LORA_NMOD; m++) {
            LoraSlot st;
            const char *nm;
            if (!lora_stored_slot(l, i, (LoraModule)m, &st, &nm)) continue;
            const LoraSlot *s = &st;
            const float *b = params + s->b_off;
            if (s->n_exp > 1) {
                expert_b_to_peft(pb + s->b_off, b, s->n_exp, s->out, R, interleaved(mc, m));
                b = pb + s->b_off;
            }
            key_of(names[n], sizeof names[n], l, mc, i, (LoraModule)m, nm, 'A');
            items[n] = (SafeTensorsWriteItem){names[n], ST_DTYPE_F32, 2, {(int64_t)s->n_exp * R, s->in},
                                              params + s->a_off};
            n++;
            key_of(names[n], sizeof names[n], l, mc, i, (LoraModule)m, nm, 'B');
            items[n] = (SafeTensorsWriteItem){names[n], ST_DTYPE_F32, 2, {s->out, (int64_t)R * s->n_exp}, b};
            n++;
        }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    rc = safetensors_write(path, items, n, mk, mv, 1, err);
    free(items);
    free(names);
    free(pb);
    return rc;
}

int peft_import(const char *dir, const ModelConfig *mc, LoraLayout *l, float **params, PailErr *err) {
    memset(l, 0, sizeof *l);
    *params = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!cfg) return err_set(err, PAIL_ERR_INVALID, "%s: %s", path, jerr.text);
    const char *ptype = json_string_value(json_object_get(cfg, "peft_type"));
    json_t *tm = json_object_get(cfg, "target_modules");
    LoraConfig c = {.rank = (int)json_integer_value(json_object_get(cfg, "r")),
                    .alpha = json_number_value(json_object_get(cfg, "lora_alpha")),
                    .rslora = json_is_true(json_object_get(cfg, "use_rslora"))};
    int rc = 0;
    if (!ptype || strcmp(ptype, "LORA")) rc = err_set(err, PAIL_ERR_UNSUPPORTED, "%s: peft_type '%s' is not LORA", path, ptype ? ptype : "");
    else if (json_is_true(json_object_get(cfg, "fan_in_fan_out")))
        rc = err_set(err, PAIL_ERR_UNSUPPORTED, "%s: fan_in_fan_out adapters are not supported", path);
    else if (json_object_size(json_object_get(cfg, "rank_pattern")) || json_object_size(json_object_get(cfg, "alpha_pattern")))
        rc = err_set(err, PAIL_ERR_UNSUPPORTED, "%s: per-module rank_pattern/alpha_pattern are not supported", path);
    else if (json_is_string(tm)) {
        if (lora_targets_parse(json_string_value(tm), &c.targets, err) < 0) rc = err_wrap(err, "%s: target_modules", path);
    } else if (json_is_array(tm)) {
        size_t i;
        json_t *v;
        json_array_foreach(tm, i, v) {
            unsigned t;
            if (!json_is_string(v) || lora_targets_parse(json_string_value(v), &t, err) < 0) {
                rc = err_wrap(err, "%s: target_modules", path);
                break;
            }
            c.targets |= t;
        }
    } else if (!json_is_array(json_object_get(cfg, "target_parameters"))) {
        rc = err_set(err, PAIL_ERR_INVALID, "%s: target_modules is missing", path);
    }
    // PEFT's target_parameters: a mixture of experts' fused expert tensors (<parent>.experts.gate_up_proj /
    // down_proj); any other parameter is not a module pail adapts
    json_t *tpa = json_object_get(cfg, "target_parameters");
    if (rc == 0 && json_is_array(tpa)) {
        size_t i;
        json_t *v;
        json_array_foreach(tpa, i, v) {
            const char *t = json_string_value(v), *dot = t ? strstr(t, "experts.") : NULL;
            unsigned bit;
            char rw[96];
            snprintf(rw, sizeof rw, "%s.weight", router_path(mc));
            if (t && !strcmp(t, rw)) {
                c.targets |= 1u << LORA_ROUTER;
                continue;
            }
            if (dot && lora_targets_parse(dot, &bit, err) == 0 && !(bit & ~LORA_EXPERT_BITS)) {
                c.targets |= bit;
                continue;
            }
            rc = err_set(err, PAIL_ERR_UNSUPPORTED, "%s: target_parameters '%s' is not an expert projection "
                         "(mlp.experts.gate_up_proj or mlp.experts.down_proj) or the router's weight", path, t ? t : "?");
            break;
        }
    }
    json_decref(cfg);
    if (rc < 0 || lora_layout_build(l, mc, &c, err) < 0) return -1;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    SafeTensors st;
    if (safetensors_open(&st, path, err) < 0) {
        lora_layout_free(l);
        return -1;
    }
    *params = calloc((size_t)l->n_params, sizeof(float));
    float *tmp = NULL;  // one expert B in PEFT's order
    for (int i = 0; i < l->n_layers && rc == 0; i++)
        for (int m = 0; m < LORA_NMOD && rc == 0; m++) {
            LoraSlot ls;
            const char *nm;
            if (!lora_stored_slot(l, i, (LoraModule)m, &ls, &nm)) continue;
            const LoraSlot *s = &ls;
            for (int ab = 0; ab < 2 && rc == 0; ab++) {
                char key[160];
                key_of(key, sizeof key, l, mc, i, (LoraModule)m, nm, ab ? 'B' : 'A');
                const SafeTensor *t = safetensors_find(&st, key);
                if (!t && m < LORA_EXP_GATE_UP) {  // PEFT also saves without the "model." level for some architectures
                    char alt[160];
                    snprintf(alt, sizeof alt, "base_model.model.layers.%d.%s.%s.lora_%c.weight", i,
                             module_parent(mc, (LoraModule)m), nm, ab ? 'B' : 'A');
                    t = safetensors_find(&st, alt);
                }
                int64_t r0 = ab ? s->out : (int64_t)c.rank * s->n_exp, r1 = ab ? (int64_t)c.rank * s->n_exp : s->in;
                if (!t) rc = err_set(err, PAIL_ERR_INVALID, "%s: tensor %s is missing", path, key);
                else if (t->ndim != 2 || t->shape[0] != r0 || t->shape[1] != r1)
                    rc = err_set(err, PAIL_ERR_INVALID, "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", path,
                                 key, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)r0,
                                 (long long)r1);
                else if (s->n_exp > 1 && ab && !tmp && !(tmp = malloc((size_t)t->nelem * sizeof(float))))
                    rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
                else if (safetensors_to_f32(s->n_exp > 1 && ab ? tmp : *params + (ab ? s->b_off : s->a_off), t->data,
                                            t->dtype, t->nelem) < 0)
                    rc = err_set(err, PAIL_ERR_INVALID, "%s: tensor %s has dtype %s", path, key,
                                 safetensors_dtype_name(t->dtype));
                else if (s->n_exp > 1 && ab)
                    expert_b_from_peft(*params + s->b_off, tmp, s->n_exp, s->out, c.rank, interleaved(mc, m));
                if (s->n_exp > 1 && ab) {  // sized per module: the next one may differ
                    free(tmp);
                    tmp = NULL;
                }
            }
        }
    free(tmp);
    safetensors_close(&st);
    if (rc < 0) {
        free(*params);
        *params = NULL;
        lora_layout_free(l);
    }
    return rc;
}

int lora_load_any(const char *path, const ModelConfig *mc, LoraLayout *l, float **params, AdapterMeta *meta,
                  PailErr *err) {
    struct stat sb;
    memset(meta, 0, sizeof *meta);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return peft_import(path, mc, l, params, err);
    Buf b = {0};
    if (fs_read_file(path, &b, err) < 0) { buf_free(&b); return -1; }
    int rc = lora_adapter_read(b.data, b.len, path, mc, l, params, meta, err);
    buf_free(&b);
    return rc;
}

int lora_merge(float *weights_block, const ModelWeights *w, const LoraLayout *l, const float *params) {
    _Static_assert(LORA_NMOD == 10, "a LoRA module without its base family");
    static const ModelParamId ids[LORA_NMOD] = {PARAM_WQ,   PARAM_WK,   PARAM_WV,     PARAM_WO,         PARAM_W_GATE,
                                                PARAM_W_UP, PARAM_W_DOWN, PARAM_EXP_GATE_UP, PARAM_EXP_DOWN,
                                                PARAM_ROUTER};
    float scale = (float)lora_scaling(&l->cfg);
    int R = l->cfg.rank;
    for (int i = 0; i < l->n_layers; i++)
        for (int m = 0; m < LORA_NMOD; m++) {
            LoraSlot st;
            const char *nm;
            if (!lora_stored_slot(l, i, (LoraModule)m, &st, &nm)) continue;  // phi3: qkv_proj's rows from q's
            const LoraSlot *s = &st;
            // (out, in); phi3: fused rows; experts: expert e's (out, in) block at e out in
            float *W0 = weights_block + model_weights_elem_offset(w, ids[m], i);
            for (int e = 0; e < s->n_exp; e++) {
                float *W = W0 + (size_t)e * s->out * s->in;
                const float *A = params + s->a_off + (size_t)e * R * s->in,  // (R, in)
                    *B = params + s->b_off + (size_t)e * s->out * R;         // (out, R)
                // W += scale * B A, accumulated in double per element for a faithful merge.
#pragma omp parallel for schedule(static)
                for (int o = 0; o < s->out; o++)
                    for (int k = 0; k < s->in; k++) {
                        double acc = 0;
                        for (int r = 0; r < R; r++) acc += (double)B[(size_t)o * R + r] * A[(size_t)r * s->in + k];
                        W[(size_t)o * s->in + k] += (float)(scale * acc);
                    }
            }
        }
    return 0;
}
