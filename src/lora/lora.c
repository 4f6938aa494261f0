// LoRA configuration, flat layout, PEFT init and adapter files (see lora.h).
#include "lora/lora.h"
#include "core/mem.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "shard/h5file.h"

const char *const LORA_MODULE_NAMES[LORA_NMOD] = {"q_proj",    "k_proj",  "v_proj",
                                                  "o_proj",    "gate_proj", "up_proj",
                                                  "down_proj", "experts.gate_up_proj", "experts.down_proj",
                                                  "router"};
const char *const LORA_MODULE_PARENT[LORA_NMOD] = {"self_attn", "self_attn", "self_attn", "self_attn", "mlp",
                                                   "mlp",       "mlp",       "mlp",       "mlp",       "mlp"};

double lora_scaling(const LoraConfig *c) {
    return c->rslora ? c->alpha / sqrt((double)c->rank) : c->alpha / (double)c->rank;
}

int lora_targets_parse(const char *s, unsigned *targets, PailErr *err) {
    *targets = 0;
    if (!s || !*s) return err_set(err, PAIL_ERR_INVALID, "LoRA targets are empty");
    char *copy = strdup(s), *save = NULL;
    int rc = 0;
    for (char *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        // all / mlp: the modules the model has (lora_layout_build drops the others)
        if (!strcmp(t, "all")) { *targets |= LORA_TARGETS_ALL; continue; }  // the router only when named
        if (!strcmp(t, "attn")) { *targets |= 0xfu; continue; }
        if (!strcmp(t, "mlp")) { *targets |= LORA_MLP_BITS | LORA_EXPERT_BITS | LORA_TARGET_PRESENT; continue; }
        // a mixture of experts': both expert projections; qwen2_moe's shared expert (its gate/up/down)
        if (!strcmp(t, "experts")) { *targets |= LORA_EXPERT_BITS; continue; }
        if (!strcmp(t, "shared_expert")) { *targets |= LORA_MLP_BITS; continue; }
        // phi3's fused modules
        if (!strcmp(t, "qkv_proj")) { *targets |= 0x7u | LORA_TARGET_NAMED_FUSED; continue; }
        if (!strcmp(t, "gate_up_proj")) { *targets |= 0x30u | LORA_TARGET_NAMED_FUSED; continue; }
        int m;
        for (m = 0; m < LORA_NMOD; m++) if (!strcmp(t, LORA_MODULE_NAMES[m])) break;
        if (m == LORA_NMOD) {
            rc = err_set(err, PAIL_ERR_INVALID,
                         "LoRA target '%s' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                         "down_proj, qkv_proj, gate_up_proj (phi3), experts, experts.gate_up_proj, "
                         "experts.down_proj, shared_expert, router (mixtures of experts), all, attn, mlp", t);
            break;
        }
        *targets |= 1u << m;
    }
    free(copy);
    if (rc == 0 && !(*targets & ((1u << LORA_NMOD) - 1))) rc = err_set(err, PAIL_ERR_INVALID, "LoRA targets '%s' name no module", s);
    return rc;
}

void lora_targets_format(unsigned targets, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int m = 0; m < LORA_NMOD; m++)
        if (targets & (1u << m)) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "," : "", LORA_MODULE_NAMES[m]);
}

// The modules mc has: attention's four; the dense MLP's three (an MoE model's shared expert: when
// intermediate_size > 0); the two expert projections of an MoE model.
static unsigned model_modules(const ModelConfig *mc) {
    unsigned t = 0xfu;
    if (mc->intermediate_size > 0) t |= LORA_MLP_BITS;
    if (model_is_moe(mc)) t |= LORA_EXPERT_BITS | (1u << LORA_ROUTER);
    return t;
}

// One expert's in and out (n_exp experts) or a dense module's (n_exp 1).
static void module_dims(const ModelConfig *mc, LoraModule m, int *in, int *out, int *n_exp) {
    int C = mc->hidden_size, F = mc->intermediate_size, qd = mc->num_attention_heads * mc->head_dim,
        kvd = mc->num_key_value_heads * mc->head_dim, Fe = mc->moe_intermediate_size;
    *n_exp = 1;
    switch (m) {
    case LORA_EXP_GATE_UP: *in = C; *out = 2 * Fe; *n_exp = mc->num_experts; break;
    case LORA_EXP_DOWN: *in = Fe; *out = C; *n_exp = mc->num_experts; break;
    case LORA_ROUTER: *in = C; *out = mc->num_experts; break;
    case LORA_Q: *in = C; *out = qd; break;
    case LORA_K:
    case LORA_V: *in = C; *out = kvd; break;
    case LORA_O: *in = qd; *out = C; break;
    case LORA_GATE:
    case LORA_UP: *in = C; *out = F; break;
    case LORA_DOWN: *in = F; *out = C; break;
    default: *in = *out = 0;
    }
}

int lora_layout_build(LoraLayout *l, const ModelConfig *mc, const LoraConfig *c, PailErr *err) {
    memset(l, 0, sizeof *l);
    if (c->rank < 1 || c->rank > 4096) return err_set(err, PAIL_ERR_INVALID, "LoRA rank %d is not in [1, 4096]", c->rank);
    if (!(c->alpha > 0) || !isfinite(c->alpha)) return err_set(err, PAIL_ERR_INVALID, "LoRA alpha %g must be positive", c->alpha);
    unsigned named = c->targets & LORA_TARGET_NAMED_FUSED, t = c->targets & ((1u << LORA_NMOD) - 1),
             has = model_modules(mc);
    if (c->targets & LORA_TARGET_PRESENT) t &= has;
    if (!t || (c->targets & ~(named | LORA_TARGET_PRESENT)) >= (1u << LORA_NMOD))
        return err_set(err, PAIL_ERR_INVALID, "LoRA targets are empty");
    for (int m = 0; m < LORA_NMOD; m++)
        if ((t & ~has) & (1u << m))
            return err_set(err, PAIL_ERR_INVALID, "LoRA target '%s': a %s model has no such module (%s)",
                           LORA_MODULE_NAMES[m], model_type_name(mc->type),
                           m >= LORA_EXP_GATE_UP       ? "its MLP is dense: gate_proj, up_proj, down_proj"
                           : model_is_moe(mc)          ? "its MLP is routed: target experts or experts.gate_up_proj, "
                                                         "experts.down_proj"
                                                       : "it has no MLP of that size");
    bool fused = mc->type == MODEL_PHI3;
    if (!fused && named)
        return err_set(err, PAIL_ERR_INVALID, "LoRA targets: qkv_proj and gate_up_proj are phi3's fused modules; a %s "
                       "model has q_proj, k_proj, v_proj, gate_proj, up_proj", model_type_name(mc->type));
    // phi3 (all / attn / mlp, or the fused names): q, k, v adapted together, gate and up together
    if (fused && (((t & 0x7u) && (t & 0x7u) != 0x7u) || ((t & 0x30u) && (t & 0x30u) != 0x30u)))
        return err_set(err, PAIL_ERR_INVALID, "LoRA targets: a phi3 model has no separate q_proj, k_proj, v_proj, "
                       "gate_proj or up_proj (its checkpoint fuses them): target qkv_proj, o_proj, gate_up_proj, "
                       "down_proj (or all, attn, mlp)");
    l->cfg = *c;
    l->cfg.targets = t;
    l->fused = fused;
    l->n_layers = mc->num_hidden_layers;
    l->slots = calloc((size_t)l->n_layers * LORA_NMOD, sizeof *l->slots);
    if (!l->slots) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    int64_t off = 0, R = c->rank;
    for (int i = 0; i < l->n_layers; i++)
        for (int m = 0; m < LORA_NMOD; m++) {
            LoraSlot *s = &l->slots[i * LORA_NMOD + m];
            if (!(t & (1u << m))) continue;
            module_dims(mc, (LoraModule)m, &s->in, &s->out, &s->n_exp);
            if (fused && (m == LORA_K || m == LORA_V || m == LORA_UP)) {
                // the previous slot's A; B rows right after the previous slot's (see LoraLayout.fused)
                const LoraSlot *p = s - 1;
                s->a_off = p->a_off;
                s->b_off = p->b_off + (int64_t)p->out * R;
                off += (int64_t)s->out * R;
                continue;
            }
            s->a_off = off;
            off += (int64_t)s->n_exp * R * s->in;
            s->b_off = off;
            off += (int64_t)s->n_exp * s->out * R;
        }
    l->n_params = off;
    return 0;
}

int64_t lora_layout_expert_params(const LoraLayout *l) {
    int64_t n = 0;
    for (int i = 0; i < l->n_layers; i++)
        for (int m = LORA_EXP_GATE_UP; m <= LORA_EXP_DOWN; m++) {
            const LoraSlot *s = lora_slot(l, i, (LoraModule)m);
            if (s) n += (int64_t)s->n_exp * l->cfg.rank * (s->in + s->out);
        }
    return n;
}

void lora_layout_free(LoraLayout *l) {
    free(l->slots);
    memset(l, 0, sizeof *l);
}

const LoraSlot *lora_slot(const LoraLayout *l, int layer, LoraModule m) {
    const LoraSlot *s = &l->slots[layer * LORA_NMOD + m];
    return s->in ? s : NULL;
}

int lora_stored_slot(const LoraLayout *l, int layer, LoraModule m, LoraSlot *out, const char **name) {
    const LoraSlot *s = lora_slot(l, layer, m);
    if (!s) return 0;
    *out = *s;
    *name = LORA_MODULE_NAMES[m];
    if (!l->fused) return 1;
    if (m == LORA_K || m == LORA_V || m == LORA_UP) return 0;
    if (m == LORA_Q) {
        out->out += lora_slot(l, layer, LORA_K)->out + lora_slot(l, layer, LORA_V)->out;
        *name = "qkv_proj";
    } else if (m == LORA_GATE) {
        out->out += lora_slot(l, layer, LORA_UP)->out;
        *name = "gate_up_proj";
    }
    return 1;
}

void lora_layout_targets_format(const LoraLayout *l, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int m = 0; m < LORA_NMOD; m++) {
        LoraSlot s;
        const char *nm;
        if (l->n_layers && lora_stored_slot(l, 0, (LoraModule)m, &s, &nm))
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "," : "", nm);
    }
}

void lora_init(const LoraLayout *l, float *params, uint64_t seed) {
    memset(params, 0, (size_t)l->n_params * sizeof *params);
    for (int i = 0; i < l->n_layers; i++)
        for (int m = 0; m < LORA_NMOD; m++) {
            LoraSlot st;
            const char *nm;
            if (!lora_stored_slot(l, i, (LoraModule)m, &st, &nm)) continue;  // a fused module's A once
            const LoraSlot *s = &st;
            Rng r;
            // the dense modules' streams as before the expert modules existed (7 a layer)
            rng_seed(&r, seed, m < LORA_EXP_GATE_UP ? (uint64_t)(i * 7 + m) : (UINT64_C(1) << 40) + (uint64_t)(i * LORA_NMOD + m));
            float bound = 1.0f / sqrtf((float)s->in);
            float *a = params + s->a_off;
            for (int64_t k = 0; k < (int64_t)s->n_exp * l->cfg.rank * s->in; k++)
                a[k] = (2.0f * rng_uniform_f(&r) - 1.0f) * bound;
        }
}

int lora_adapter_write_h5(hid_t f, const LoraLayout *l, const float *params, const AdapterMeta *meta, PailErr *err) {
    const char *targets[LORA_NMOD];
    int nt = 0;
    for (int m = 0; m < LORA_NMOD; m++) {
        LoraSlot st;
        if (l->n_layers && lora_stored_slot(l, 0, (LoraModule)m, &st, &targets[nt])) nt++;
    }
    int rc = 0;
    rc |= h5a_write_i64(f, "version", meta->version, err);
    rc |= h5a_write_i64(f, "step", meta->step, err);
    rc |= h5a_write_i64(f, "rank", l->cfg.rank, err);
    rc |= h5a_write_f64(f, "alpha", l->cfg.alpha, err);
    rc |= h5a_write_f64(f, "scaling", lora_scaling(&l->cfg), err);
    rc |= h5a_write_i64(f, "use_rslora", l->cfg.rslora, err);
    rc |= h5a_write_i64(f, "num_layers", l->n_layers, err);
    rc |= h5a_write_strs(f, "target_modules", targets, nt, err);
    rc |= h5a_write_str(f, "base_sha256", meta->base_sha256, err);
    rc |= h5a_write_i64(f, "created_unix", meta->created_unix, err);
    for (int i = 0; i < l->n_layers && rc == 0; i++)
        for (int m = 0; m < LORA_NMOD && rc == 0; m++) {
            LoraSlot st;
            const char *nm;
            if (!lora_stored_slot(l, i, (LoraModule)m, &st, &nm)) continue;
            const LoraSlot *s = &st;
            char path[96];
            // experts: (E, R, in) and (E, out, R); a dense module's (R, in) and (out, R)
            int x = s->n_exp > 1, nd = 2 + x;
            int64_t da[3] = {s->n_exp, l->cfg.rank, s->in}, db[3] = {s->n_exp, s->out, l->cfg.rank};
            snprintf(path, sizeof path, "layers/%d/%s/lora_A", i, nm);
            rc |= h5d_write(f, path, H5T_NATIVE_FLOAT, nd, da + !x, params + s->a_off, err);
            snprintf(path, sizeof path, "layers/%d/%s/lora_B", i, nm);
            rc |= h5d_write(f, path, H5T_NATIVE_FLOAT, nd, db + !x, params + s->b_off, err);
        }
    return rc ? -1 : 0;
}

int lora_adapter_write(const LoraLayout *l, const float *params, const AdapterMeta *meta, Buf *out, PailErr *err) {
    char name[64];
    snprintf(name, sizeof name, "adapter v%08lld", (long long)meta->version);
    hid_t f = h5f_create_mem(name, err);
    if (f < 0) return -1;
    int rc = 0;
    rc |= h5a_write_str(f, "format", LORA_FORMAT, err);
    rc |= h5a_write_i64(f, "format_version", LORA_FORMAT_VERSION, err);
    rc |= lora_adapter_write_h5(f, l, params, meta, err);
    if (rc == 0) rc = h5f_image(f, out, name, err);
    h5f_close(f);
    return rc ? -1 : 0;
}

int lora_adapter_read(const void *data, size_t len, const char *name, const ModelConfig *mc, LoraLayout *layout,
                      float **params, AdapterMeta *meta, PailErr *err) {
    memset(layout, 0, sizeof *layout);
    *params = NULL;
    hid_t f = h5f_open_mem(data, len, name, err);
    if (f < 0) return -1;
    char format[64];
    int64_t fv;
    int rc = 0;
    if (h5a_read_str(f, "format", format, sizeof format, name, err) < 0 ||
        h5a_read_i64(f, "format_version", &fv, name, err) < 0) {
        rc = -1;
    } else if (strcmp(format, LORA_FORMAT)) {
        rc = err_set(err, PAIL_ERR_INVALID, "adapter %s: format is '%s', expected '%s'", name, format, LORA_FORMAT);
    } else if (fv != LORA_FORMAT_VERSION) {
        rc = err_set(err, PAIL_ERR_INVALID, "adapter %s: format_version %lld, this pail reads %d (use the pail "
                     "release that wrote it)", name, (long long)fv, LORA_FORMAT_VERSION);
    } else {
        rc = lora_adapter_read_h5(f, name, mc, layout, params, meta, err);
    }
    h5f_close(f);
    return rc < 0 ? -1 : 0;
}

// The dims of layer 0's lora_A (da) and lora_B (db) of module mod: 1, or 0 when the module
// is not in the file, -1 (err) when its B is there without its A.
static int file_module_dims(hid_t f, const char *name, const char *mod, hsize_t da[2], hsize_t db[2], int *ne,
                            PailErr *err) {
    char path[96];
    hsize_t *dims[2] = {db, da};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "layers/0/%s/%s", mod, i ? "lora_A" : "lora_B");
        if (!h5l_exists(f, path)) {
            if (i == 0) return 0;
            return err_set(err, PAIL_ERR_INVALID, "adapter %s: dataset '%s' is missing", name, path);
        }
        hid_t ds = H5Dopen2(f, path, H5P_DEFAULT), sp = H5Dget_space(ds);
        hsize_t d[3] = {0, 0, 0};
        int nd = H5Sget_simple_extent_ndims(sp);
        if (nd == 2 || nd == 3) H5Sget_simple_extent_dims(sp, d, NULL);
        H5Sclose(sp);
        H5Dclose(ds);
        if (nd != 2 && nd != 3)
            return err_set(err, PAIL_ERR_INVALID, "adapter %s: dataset '%s' has %d dimensions", name, path, nd);
        // an expert module's (E, R, in) / (E, out, R): the last two, E in ne
        dims[i][0] = d[nd - 2];
        dims[i][1] = d[nd - 1];
        if (ne) *ne = nd == 3 ? (int)d[0] : 1;
    }
    return 1;
}

// A stand-in model config whose projection dims equal the adapter's (head_dim
// 1, so q/k widths are head counts): enough to lay out and read the adapter
// when no model is given.
static int lora_dims_from_file(hid_t f, const char *name, int nl, ModelConfig *mc, PailErr *err) {
    memset(mc, 0, sizeof *mc);
    mc->num_hidden_layers = nl;
    mc->head_dim = 1;
    hsize_t da[2], db[2];
    for (int m = 0; m < LORA_NMOD; m++) {
        int ne = 1, r = file_module_dims(f, name, LORA_MODULE_NAMES[m], da, db, &ne, err);
        if (r < 0) return -1;
        if (r == 0) continue;
        int in = (int)da[1], out = (int)db[0];
        if (m == LORA_EXP_GATE_UP || m == LORA_EXP_DOWN) mc->num_experts = ne, mc->num_experts_per_tok = 1;
        if (m == LORA_ROUTER) mc->hidden_size = in, mc->num_experts = out, mc->num_experts_per_tok = 1;
        switch (m) {
        case LORA_EXP_GATE_UP: mc->hidden_size = in; mc->moe_intermediate_size = out / 2; break;
        case LORA_EXP_DOWN: mc->moe_intermediate_size = in; mc->hidden_size = out; break;
        case LORA_Q: mc->hidden_size = in; mc->num_attention_heads = out; break;
        case LORA_K: case LORA_V: mc->hidden_size = in; mc->num_key_value_heads = out; break;
        case LORA_O: mc->num_attention_heads = in; mc->hidden_size = out; break;
        case LORA_GATE: case LORA_UP: mc->hidden_size = in; mc->intermediate_size = out; break;
        case LORA_DOWN: mc->intermediate_size = in; mc->hidden_size = out; break;
        default: break;
        }
    }
    // phi3's fused modules: q's width is o_proj's input when o_proj is there (k and v then share
    // the rest); else the split is unknown and not needed (files, PEFT export): q takes it all
    static const char *fusedn[2] = {"qkv_proj", "gate_up_proj"};
    for (int k = 0; k < 2; k++) {
        int r = file_module_dims(f, name, fusedn[k], da, db, NULL, err);
        if (r < 0) return -1;
        if (r == 0) continue;
        mc->type = MODEL_PHI3;
        mc->hidden_size = (int)da[1];
        int out = (int)db[0];
        if (k == 1) mc->intermediate_size = out / 2;
        else if (mc->num_attention_heads > 0 && mc->num_attention_heads < out)
            mc->num_key_value_heads = (out - mc->num_attention_heads) / 2;
        else
            mc->num_attention_heads = out, mc->num_key_value_heads = 0;
    }
    return 0;
}

int lora_adapter_read_h5(hid_t f, const char *name, const ModelConfig *mc, LoraLayout *layout, float **params,
                         AdapterMeta *meta, PailErr *err) {
    memset(layout, 0, sizeof *layout);
    *params = NULL;
    int64_t rank, rs = 0, nl;
    double alpha, scaling;
    char **targets = NULL;
    int nt = 0, rc = 0;
    if (h5a_read_i64(f, "version", &meta->version, name, err) < 0 || h5a_read_i64(f, "step", &meta->step, name, err) < 0 ||
        h5a_read_i64(f, "created_unix", &meta->created_unix, name, err) < 0 ||
        h5a_read_str(f, "base_sha256", meta->base_sha256, sizeof meta->base_sha256, name, err) < 0 ||
        h5a_read_i64(f, "rank", &rank, name, err) < 0 || h5a_read_f64(f, "alpha", &alpha, name, err) < 0 ||
        h5a_read_f64(f, "scaling", &scaling, name, err) < 0 || h5a_read_i64(f, "num_layers", &nl, name, err) < 0 ||
        h5a_read_strs(f, "target_modules", &targets, &nt, name, err) < 0) { rc = -1; goto done; }
    if (h5a_exists(f, "use_rslora") && h5a_read_i64(f, "use_rslora", &rs, name, err) < 0) { rc = -1; goto done; }
    ModelConfig own;
    if (!mc) {  // no model at hand (export): take the dims from the file's layer 0
        if (nl < 1 || nl > 100000) { rc = err_set(err, PAIL_ERR_INVALID, "adapter %s: num_layers %lld", name, (long long)nl); goto done; }
        if (lora_dims_from_file(f, name, (int)nl, &own, err) < 0) { rc = -1; goto done; }
        mc = &own;
    }
    if (nl != mc->num_hidden_layers) {
        rc = err_set(err, PAIL_ERR_INVALID, "adapter %s: %lld layers, the model has %d", name, (long long)nl,
                     mc->num_hidden_layers);
        goto done;
    }
    LoraConfig c = {.rank = (int)rank, .alpha = alpha, .rslora = rs != 0};
    for (int i = 0; i < nt; i++) {
        unsigned t;
        if (lora_targets_parse(targets[i], &t, err) < 0) { rc = err_wrap(err, "adapter %s", name); goto done; }
        c.targets |= t;
    }
    if (rank < 1 || rank > 4096 || lora_layout_build(layout, mc, &c, err) < 0) {
        if (rank < 1 || rank > 4096) err_set(err, PAIL_ERR_INVALID, "adapter %s: rank %lld", name, (long long)rank);
        rc = -1;
        goto done;
    }
    if (fabs(lora_scaling(&c) - scaling) > 1e-9 * fabs(scaling)) {
        rc = err_set(err, PAIL_ERR_INVALID, "adapter %s: scaling %g does not match alpha %g / rank %lld", name, scaling,
                     alpha, (long long)rank);
        goto done;
    }
    *params = mem_alloc_big((size_t)(layout->n_params ? layout->n_params : 1) * sizeof(float));
    if (!*params) { rc = err_set(err, PAIL_ERR_NOMEM, "adapter %s: out of memory", name); goto done; }
    for (int i = 0; i < layout->n_layers && rc == 0; i++)
        for (int m = 0; m < LORA_NMOD && rc == 0; m++) {
            LoraSlot st;
            const char *nm;
            if (!lora_stored_slot(layout, i, (LoraModule)m, &st, &nm)) continue;
            const LoraSlot *s = &st;
            char path[96];
            int x = s->n_exp > 1, nd = 2 + x;
            int64_t da[3] = {s->n_exp, rank, s->in}, db[3] = {s->n_exp, s->out, rank};
            float *buf = NULL;
            snprintf(path, sizeof path, "layers/%d/%s/lora_A", i, nm);
            if ((rc = h5d_read(f, path, H5T_NATIVE_FLOAT, nd, da + !x, NULL, INT64_C(1) << 34, (void **)&buf, name,
                               err)) < 0)
                break;
            memcpy(*params + s->a_off, buf, (size_t)(s->n_exp * rank * s->in) * sizeof(float));
            free(buf);
            snprintf(path, sizeof path, "layers/%d/%s/lora_B", i, nm);
            if ((rc = h5d_read(f, path, H5T_NATIVE_FLOAT, nd, db + !x, NULL, INT64_C(1) << 34, (void **)&buf, name,
                               err)) < 0)
                break;
            memcpy(*params + s->b_off, buf, (size_t)(s->n_exp * s->out * rank) * sizeof(float));
            free(buf);
        }
    for (int64_t k = 0; rc == 0 && k < layout->n_params; k++)
        if (!isfinite((*params)[k])) rc = err_set(err, PAIL_ERR_INVALID, "adapter %s: non-finite weight", name);
done:
    for (int i = 0; i < nt; i++) free(targets[i]);
    free(targets);
    if (rc < 0) {
        free(*params);
        *params = NULL;
        lora_layout_free(layout);
        return -1;
    }
    return 0;
}
