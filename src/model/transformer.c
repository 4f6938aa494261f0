// Decoder forward/backward over packed rows with unmerged LoRA (see
// transformer.h). Data flow per layer (HF's LlamaDecoderLayer / Qwen2 / Qwen3;
// cohere's parallel block in cohere_layer_forward):
//   xn1 = rmsnorm(x); q,k,v = proj(xn1) (+bias, +LoRA); [qwen3: per-head rmsnorm
//   of q and k]; rope; att = causal GQA over each packed sequence;
//   h = x + o_proj(att); xn2 = rmsnorm(h); act = silu(gate(xn2)) * up(xn2);
//   x' = h + down(act).
// The backward walks it in reverse, accumulating LoRA grads (and base grads
// in full mode). All buffers come from one block planned in transformer_init,
// allocated by the plan's backend. Every op on tensor data goes through the
// backend's table (kernels/backend.h): this file never reads or writes tensor
// memory, only the small host-side index arrays it uploads.
#include "model/transformer.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "model/transformer_impl.h"

size_t transformer_bytes(const Transformer *tf) { return tf->block_floats * sizeof(float); }
Backend *transformer_backend(const Transformer *tf) { return tf->be; }

static void plan_memory(Transformer *tf, Bump *b) {
    const ModelConfig *c = &tf->cfg;
    size_t T = (size_t)tf->plan.max_tokens, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size,
           HD = (size_t)c->num_attention_heads * c->head_dim, KD = (size_t)c->num_key_value_heads * c->head_dim,
           H = (size_t)c->num_attention_heads, Hk = (size_t)c->num_key_value_heads, L = (size_t)c->num_hidden_layers;
    size_t R = (size_t)tf->plan.lora_rank;  // the la buffers' width; transformer_set_lora checks
    for (int l = 0; l < tf->nacts; l++) {
        LayerActs *a = &tf->acts[l];
        a->xn1 = take(b, T * C); a->rstd1 = take(b, T);
        a->q = take(b, T * HD); a->k = take(b, T * KD); a->v = take(b, T * KD);
        if (c->has_qk_norm) {
            a->qn = take(b, T * HD); a->kn = take(b, T * KD);
            a->qrstd = take(b, T * H); a->krstd = take(b, T * Hk);
        }
        a->qr = take(b, T * HD); a->kr = take(b, T * KD);
        a->att = take(b, T * HD); a->lse = take(b, T * H);
        a->h = take(b, T * C);
        a->xn2 = take(b, T * C); a->rstd2 = take(b, T);
        a->gate = take(b, T * F); a->up = take(b, T * F); a->act = take(b, T * F);
        for (int m = 0; m < LORA_NMOD && R > 0; m++)
            if (m < LORA_EXP_GATE_UP || model_is_moe(c))  // the experts' rows: T K; the router's: T
                a->la[m] = take(b, (m < LORA_EXP_GATE_UP || m == LORA_ROUTER ? T : moe_la_rows(c, T)) * R);
        if (model_is_moe(c)) moe_plan(tf, a, b, l == 0);
        if (c->layer_norm) {
            a->mean1 = take(b, T);
            if (c->has_qk_norm) { a->qmean = take(b, T * H); a->kmean = take(b, T * Hk); }
        }
        if (c->gemma_norms) {
            a->o = take(b, T * C); a->orstd = take(b, T);
            a->m = take(b, T * C); a->mrstd = take(b, T);
        }
    }
    if (c->layer_norm) tf->meanf = take(b, T);
    for (size_t l = 0; l <= L; l++) tf->resid[l] = take(b, T * C);
    tf->d_tokens = (int *)take(b, T); tf->d_pos = (int *)take(b, T); tf->d_cu = (int *)take(b, T + 1);
    tf->d_sel = (int *)take(b, T); tf->d_tsel = (int *)take(b, T); tf->d_rows = (int *)take(b, T);
    tf->xf = take(b, T * C); tf->rstdf = take(b, T);
    tf->hsel = take(b, T * C); tf->lse_sel = take(b, T); tf->ent_sel = take(b, T); tf->dlogp_sel = take(b, T);
    // The head's workspace: vocab chunks of all rows, or (expectation path) blocks of full rows.
    size_t wsf = logprob_workspace_floats((int)T, tf->plan.vchunk), V = (size_t)c->vocab_size;
    tf->ws_floats = wsf > V ? wsf : V;
    tf->ws = take(b, tf->ws_floats);
    // longrope: the short_factor table, then the long_factor one (positions + P)
    size_t P = (size_t)tf->plan.max_pos * (c->rope_scaling == ROPE_SCALING_LONGROPE ? 2 : 1),
           D2 = (size_t)c->head_dim / 2;
    tf->cos_t = take(b, P * D2); tf->sin_t = take(b, P * D2); tf->inv_freq = take(b, D2);
    if (c->gemma_norms) {  // the (1 + w) copies of the norm families, and a row of ones to add
        static const ModelParamId norms[] = {PARAM_ATTN_NORM, PARAM_MLP_NORM, PARAM_PRE_FF_NORM, PARAM_POST_FF_NORM,
                                             PARAM_Q_NORM, PARAM_K_NORM, PARAM_FINAL_NORM};
        ModelParamSpec specs[PARAM_COUNT];
        model_param_specs(c, specs);
        size_t n = 0, most = 0;
        for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++) {
            const ModelParamSpec *sp = &specs[norms[i]];
            if (!sp->present) continue;
            size_t fam = sp->numel * (sp->per_layer ? L : 1);
            tf->gn_has[norms[i]] = true;
            tf->gn_off[norms[i]] = n;
            n += fam;
            if (fam > most) most = fam;
        }
        tf->gnorm = take(b, n);
        tf->gones = take(b, most);
        tf->gones_n = most;
    }
    if (c->rope_local_theta > 0) {
        tf->cos_l = take(b, P * D2); tf->sin_l = take(b, P * D2); tf->inv_l = take(b, D2);
    }
    if (tf->plan.backward) {
        tf->dres = take(b, T * C); tf->dtmp = take(b, T * C); tf->dxn = take(b, T * C);
        tf->dq = take(b, T * HD); tf->dk = take(b, T * KD); tf->dv = take(b, T * KD); tf->datt = take(b, T * HD);
        tf->dgate = take(b, T * F); tf->dup = take(b, T * F); tf->dact = take(b, T * F);
        if (R > 0) tf->dla = take(b, T * R);
        tf->dhsel = take(b, T * C);
        if (!tf->plan.full) tf->expect_sel = take(b, T * C);  // the LoRA step's head (transformer_forward)
    }
}

static void plan_defaults(TransformerPlan *p, const ModelConfig *c) {
    if (p->vchunk <= 0) p->vchunk = 4096;
    if (p->vchunk > c->vocab_size && c->vocab_size > 0) p->vchunk = c->vocab_size;  // the head's T x vchunk workspace
    if (p->max_pos <= 0) p->max_pos = c->max_position_embeddings < TRANSFORMER_ROPE_MAX ? c->max_position_embeddings : TRANSFORMER_ROPE_MAX;
    if (p->max_pos < 1) p->max_pos = 4096;
}

size_t transformer_plan_bytes(const ModelConfig *c, const TransformerPlan *plan) {
    Transformer tf = {.cfg = *c, .plan = *plan};
    plan_defaults(&tf.plan, c);
    tf.nacts = (plan->recompute || !plan->backward) ? 1 : c->num_hidden_layers;
    LayerActs *acts = calloc((size_t)tf.nacts, sizeof *acts);
    float **resid = calloc((size_t)c->num_hidden_layers + 1, sizeof *resid);
    size_t bytes = 0;
    if (acts && resid) {
        tf.acts = acts;
        tf.resid = resid;
        Bump dry = {0};
        plan_memory(&tf, &dry);
        bytes = dry.used * sizeof(float);
    }
    free(acts);
    free(resid);
    return bytes;
}


// gemma: norm = (1 + w) for every norm family, into tf->gnorm (the weights keep the file's w, so that
// writing them back, merging and full fine-tuning's updates see the checkpoint's values; the
// gradient of w is that of 1 + w). Run at init and before each full fine-tuning forward.
static int gemma_norm_refresh(Transformer *tf, PailErr *err) {
    const BackendOps *o = tf->be->ops;
    for (int id = 0; id < PARAM_COUNT; id++) {
        if (!tf->gn_has[id]) continue;
        const ModelParamSpec *sp = &tf->w->specs[id];
        size_t n = sp->numel * (sp->per_layer ? (size_t)tf->cfg.num_hidden_layers : 1);
        float *dst = tf->gnorm + tf->gn_off[id];
        if (o->copy(tf->be, dst, wm(tf, (ModelParamId)id, 0), n, err) < 0 || o->add(tf->be, dst, tf->gones, n, err) < 0)
            return err_wrap(err, "transformer: gemma norms");
    }
    return 0;
}

// A RoPE table (host-built, uploaded): theta's frequencies divided by factor (linear scaling; 1: none).
static int rope_table_upload(Transformer *tf, float *d_inv, float *d_cos, float *d_sin, double theta, double factor,
                             PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    size_t D2 = (size_t)c->head_dim / 2, P = (size_t)tf->plan.max_pos;
    float *host = malloc((2 * P * D2 + D2) * sizeof(float));
    if (!host) return err_set(err, PAIL_ERR_NOMEM, "transformer: out of memory for the RoPE tables");
    float *inv = host, *cs = host + D2, *sn = host + D2 + P * D2;
    rope_inv_freq(inv, c->head_dim, (float)theta, NULL);
    if (factor != 1.0)  // transformers' linear rope: inv_freq / factor
        for (size_t i = 0; i < D2; i++) inv[i] /= (float)factor;
    rope_table_build(cs, sn, inv, (int)P, c->head_dim);
    const BackendOps *o = tf->be->ops;
    int rc = o->to_device(tf->be, d_inv, inv, D2 * sizeof(float), err);
    if (rc == 0) rc = o->to_device(tf->be, d_cos, cs, P * D2 * sizeof(float), err);
    if (rc == 0) rc = o->to_device(tf->be, d_sin, sn, P * D2 * sizeof(float), err);
    if (rc == 0) rc = o->sync(tf->be, err);  // host is freed next
    free(host);
    return rc < 0 ? err_wrap(err, "transformer: the RoPE tables") : 0;
}

// gemma's parts of init: the ones row and the (1 + w) norms; gemma3_text's linear scaling of the
// global layers' table and the sliding layers' own table.
static int gemma_init(Transformer *tf, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    float *ones = malloc(tf->gones_n * sizeof(float));
    if (!ones) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < tf->gones_n; i++) ones[i] = 1.0f;
    int rc = tf->be->ops->to_device(tf->be, tf->gones, ones, tf->gones_n * sizeof(float), err);
    if (rc == 0) rc = tf->be->ops->sync(tf->be, err);
    free(ones);
    if (rc < 0 || gemma_norm_refresh(tf, err) < 0) return -1;
    if (c->rope_scaling == ROPE_SCALING_LINEAR &&
        rope_table_upload(tf, tf->inv_freq, tf->cos_t, tf->sin_t, c->rope_theta, c->rope_factor, err) < 0)
        return -1;
    if (tf->cos_l && rope_table_upload(tf, tf->inv_l, tf->cos_l, tf->sin_l, c->rope_local_theta, 1.0, err) < 0)
        return -1;
    return 0;
}

// YaRN (transformers' _compute_yarn_parameters): each of the dim/2 frequencies blends the original
// (extrapolation) and the factor-scaled one (interpolation) by a linear ramp between the dims that
// turn beta_fast and beta_slow times over original_max_position_embeddings (rounded outwards when
// truncate); cos and sin are scaled by the attention factor (the config's, else 0.1 ln(factor) + 1).
static void yarn_inv_freq(float *inv, const ModelConfig *c, int dim) {
    double base = c->rope_theta, factor = c->rope_factor, om = c->rope_original_max_position_embeddings;
    double bf = c->rope_beta_fast > 0 ? c->rope_beta_fast : 32, bs = c->rope_beta_slow > 0 ? c->rope_beta_slow : 1;
    double low = dim * log(om / (bf * 2 * M_PI)) / (2 * log(base)), high = dim * log(om / (bs * 2 * M_PI)) / (2 * log(base));
    if (c->rope_truncate) low = floor(low), high = ceil(high);
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    for (int i = 0; i < dim / 2; i++) {
        double pf = pow(base, 2.0 * i / dim), ramp = (i - low) / (high - low);
        double ext = 1 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);  // the extrapolation's share
        inv[i] = (float)(1.0 / (factor * pf) * (1 - ext) + 1.0 / pf * ext);
    }
}
static double yarn_attention_factor(const ModelConfig *c) {
    if (c->rope_attention_factor > 0) return c->rope_attention_factor;
    return c->rope_factor <= 1 ? 1.0 : 0.1 * log(c->rope_factor) + 1.0;
}

int transformer_init(Transformer **out, const ModelWeights *w, const TransformerPlan *plan, PailErr *err) {
    *out = NULL;
    const ModelConfig *c = &w->cfg;
    if (plan->max_tokens < 1) return err_set(err, PAIL_ERR_INVALID, "transformer: token budget %d must be >= 1", plan->max_tokens);
    if (plan->lora_rank < 0 || plan->lora_rank > 4096)
        return err_set(err, PAIL_ERR_INVALID, "transformer: LoRA rank bound %d is not in [0, 4096]", plan->lora_rank);
    if (c->head_dim % 2) return err_set(err, PAIL_ERR_UNSUPPORTED, "transformer: head_dim %d is odd (RoPE needs pairs)", c->head_dim);
    if (plan->full && !model_weights_f32(w))
        return err_set(err, PAIL_ERR_INVALID,
                       "transformer: full fine-tuning trains the base weights in fp32; load them with --dtype f32");
    Transformer *tf = calloc(1, sizeof *tf);
    if (!tf) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    tf->w = w;
    tf->be = plan->backend ? plan->backend : backend_cpu();
    tf->cfg = *c;
    tf->plan = *plan;
    plan_defaults(&tf->plan, c);
    // Saved activations per layer only when a backward will read them.
    tf->nacts = (plan->recompute || !plan->backward) ? 1 : c->num_hidden_layers;
    tf->acts = calloc((size_t)tf->nacts, sizeof *tf->acts);
    tf->resid = calloc((size_t)c->num_hidden_layers + 1, sizeof *tf->resid);
    tf->h_pos = malloc((size_t)plan->max_tokens * sizeof(int));
    tf->sel = malloc((size_t)plan->max_tokens * sizeof(int));
    tf->tsel = malloc((size_t)plan->max_tokens * sizeof(int));
    tf->rows = malloc((size_t)plan->max_tokens * sizeof(int));
    tf->h_lp = malloc((size_t)plan->max_tokens * sizeof(float));
    tf->h_ent = malloc((size_t)plan->max_tokens * sizeof(float));
    if (model_is_moe(c) && tf->acts) {
        tf->h_offs = malloc((size_t)tf->nacts * (c->num_experts + 1) * sizeof(int));
        for (int l = 0; l < tf->nacts && tf->h_offs; l++) tf->acts[l].h_offs = tf->h_offs + (size_t)l * (c->num_experts + 1);
    }
    Bump dry = {0};
    plan_memory(tf, &dry);
    tf->block_floats = dry.used;
    PailErr aerr = {0};
    tf->block = tf->be->ops->alloc(tf->be, dry.used * sizeof(float), &aerr);
    if (!tf->acts || !tf->resid || !tf->h_pos || !tf->sel || !tf->tsel || (model_is_moe(c) && !tf->h_offs) ||
        !tf->rows || !tf->h_lp || !tf->h_ent || !tf->block) {
        size_t mb = dry.used * sizeof(float) >> 20;
        err_set(err, PAIL_ERR_NOMEM,
                "transformer: cannot allocate %zu MiB of activations for %d tokens on %s (lower the token "
                "budget, or use activation recomputation)", mb, plan->max_tokens, tf->be->desc);
        transformer_free(tf);
        return -1;
    }
    Bump real = {tf->block, 0};
    plan_memory(tf, &real);
    if (tf->be->host_memory) {
        tf->wbase = w->memory;
    } else {  // a device copy of the base weights
        size_t bytes = w->bytes;
        if (!(tf->wdev = tf->be->ops->alloc(tf->be, bytes, err)) ||
            tf->be->ops->to_device(tf->be, tf->wdev, w->memory, bytes, err) < 0) {
            transformer_free(tf);
            return err_wrap(err, "transformer: the base weights");
        }
        tf->wbase = tf->wdev;
    }
    RopeScaling rs = {0};
    if (c->rope_scaling == ROPE_SCALING_LLAMA3) {
        rs.factor = (float)c->rope_factor;
        rs.low_freq_factor = (float)c->rope_low_freq_factor;
        rs.high_freq_factor = (float)c->rope_high_freq_factor;
        rs.original_max_position = c->rope_original_max_position_embeddings;
    }
    // The RoPE tables are built on the host and uploaded (in place on a host backend).
    // (P, rd/2) for the rd dims RoPE rotates: D, or phi3's partial rotary dims
    int rd = model_rope_dim(c);
    size_t D2 = (size_t)rd / 2, P = (size_t)tf->plan.max_pos * (c->rope_scaling == ROPE_SCALING_LONGROPE ? 2 : 1);
    float *inv = tf->inv_freq, *cs = tf->cos_t, *sn = tf->sin_t, *host = NULL;
    if (!tf->be->host_memory) {
        if (!(host = malloc((2 * P * D2 + D2) * sizeof(float)))) {
            transformer_free(tf);
            return err_set(err, PAIL_ERR_NOMEM, "transformer: out of memory for the RoPE tables");
        }
        inv = host, cs = host + D2, sn = host + D2 + P * D2;
    }
    if (c->rope_scaling == ROPE_SCALING_LONGROPE) {
        // phi3: rows 0..P/2-1 with short_factor, P/2.. with long_factor (a long sequence's positions
        // are shifted by P/2: longrope_pos), both times the attention factor, in fp32 as
        // Phi3RotaryEmbedding's emb.cos() * attention_scaling; inv_freq keeps the short one's
        size_t half = P / 2;
        float af = (float)c->rope_attention_factor;
        rope_inv_freq_ext(inv, rd, (float)c->rope_theta, c->rope_long_factor);
        rope_table_build(cs + half * D2, sn + half * D2, inv, (int)half, rd);
        rope_inv_freq_ext(inv, rd, (float)c->rope_theta, c->rope_short_factor);
        rope_table_build(cs, sn, inv, (int)half, rd);
        for (size_t i = 0; i < P * D2; i++) cs[i] *= af, sn[i] *= af;
    } else if (c->rope_scaling == ROPE_SCALING_YARN) {  // gpt_oss: the blended inv_freq, cos and sin scaled
        yarn_inv_freq(inv, c, rd);
        rope_table_build(cs, sn, inv, (int)P, rd);
        float af = (float)yarn_attention_factor(c);
        for (size_t i = 0; i < P * D2; i++) cs[i] *= af, sn[i] *= af;
    } else {
        rope_inv_freq(inv, rd, (float)c->rope_theta, &rs);
        rope_table_build(cs, sn, inv, (int)P, rd);
    }
    if (host) {
        int rc = tf->be->ops->to_device(tf->be, tf->inv_freq, inv, D2 * sizeof(float), err);
        if (rc == 0) rc = tf->be->ops->to_device(tf->be, tf->cos_t, cs, P * D2 * sizeof(float), err);
        if (rc == 0) rc = tf->be->ops->to_device(tf->be, tf->sin_t, sn, P * D2 * sizeof(float), err);
        if (rc == 0) rc = tf->be->ops->sync(tf->be, err);  // host is freed next
        free(host);
        if (rc < 0) {
            transformer_free(tf);
            return err_wrap(err, "transformer: the RoPE tables");
        }
    }
    if (c->gemma_norms && gemma_init(tf, err) < 0) {
        transformer_free(tf);
        return -1;
    }
    *out = tf;
    return 0;
}

void transformer_free(Transformer *tf) {
    if (!tf) return;
    tf->be->ops->release(tf->be, tf->block);
    tf->be->ops->release(tf->be, tf->wdev);
    free(tf->rows);
    free(tf->h_lp);
    free(tf->h_ent);
    free(tf->acts);
    free(tf->h_offs);
    free(tf->resid);
    free(tf->h_pos);
    free(tf->sel);
    free(tf->tsel);
    free(tf);
}

int transformer_set_lora(Transformer *tf, const LoraLayout *layout, const float *params, PailErr *err) {
    if (layout) {
        if (layout->n_layers != tf->cfg.num_hidden_layers)
            return err_set(err, PAIL_ERR_INVALID, "adapter has %d layers, the model %d", layout->n_layers,
                           tf->cfg.num_hidden_layers);
        if (layout->cfg.rank > tf->plan.lora_rank)
            return err_set(err, PAIL_ERR_INVALID, tf->plan.lora_rank
                           ? "adapter of LoRA rank %d: this model's buffers were planned for ranks up to %d"
                           : "adapter of LoRA rank %d: this model was planned without LoRA buffers (lora_rank %d)",
                           layout->cfg.rank, tf->plan.lora_rank);
    }
    tf->lora = layout;
    tf->lora_params = params;
    tf->lora_scale = layout ? (float)lora_scaling(&layout->cfg) : 0;
    tf->lora_on = layout != NULL;
    return 0;
}

void transformer_lora_enable(Transformer *tf, bool on) { tf->lora_on = on && tf->lora; }


// y(T,out) (+)= x W^T + bias, then + s (x A^T) B^T when module m is adapted;
// W is family wid's layer, in its storage dtype.
int proj_forward(Transformer *tf, float *y, float *la, const float *x, ModelParamId wid, const float *bias,
                        int T, int in, int outd, int layer, LoraModule m, float beta, PailErr *err) {
    const void *W = wm(tf, wid, layer);
    const LoraSlot *s = tf->lora_on ? lora_slot(tf->lora, layer, m) : NULL;
    if (!s) {
        OP(matmul_forward, y, x, W, wdt(tf, wid, layer), bias, T, in, outd, 1.0f, beta);
        return 0;
    }
    const float *A = tf->lora_params + s->a_off, *B = tf->lora_params + s->b_off;
    OP(matmul_forward_lora, y, la, x, W, wdt(tf, wid, layer), bias, A, B, T, in, outd, tf->lora->cfg.rank, tf->lora_scale,
       beta);
    return 0;
}

// dx (=, or += when dx_beta = 1) dy W (+ LoRA path); dW, dbias += in full mode; dA, dB += into lora_grads.
int proj_backward(Transformer *tf, float *dx, float *lora_grads, float *base_grads, ModelParamId wid,
                         ModelParamId bid, const float *dy, const float *x, const float *la, int T, int in,
                         int outd, int layer, LoraModule m, float dx_beta, PailErr *err) {
    float *dW = NULL, *db = NULL;
    if (base_grads && tf->plan.full) {
        dW = base_grads + model_weights_elem_offset(tf->w, wid, layer);  // phi3's q..up: fused rows
        if (bid != PARAM_COUNT && tf->w->specs[bid].present)
            db = base_grads + tf->w->offsets[bid] + (size_t)layer * tf->w->specs[bid].numel;
    }
    OP(matmul_backward, dx, dW, db, dy, x, wm(tf, wid, layer), wdt(tf, wid, layer), T, in, outd, 1.0f, dx_beta);
    const LoraSlot *s = tf->lora_on ? lora_slot(tf->lora, layer, m) : NULL;
    if (!s) return 0;
    const float *A = tf->lora_params + s->a_off, *B = tf->lora_params + s->b_off;
    float *dA = lora_grads ? lora_grads + s->a_off : NULL, *dB = lora_grads ? lora_grads + s->b_off : NULL;
    int R = tf->lora->cfg.rank;
    // dla = s dy B, dB += s dy^T la; then dx += dla A, dA += dla^T x.
    OP(matmul_backward, tf->dla, dB, NULL, dy, la, B, DT_F32, T, R, outd, tf->lora_scale, 0.0f);
    OP(matmul_backward, dx, dA, NULL, tf->dla, x, A, DT_F32, T, in, R, 1.0f, 1.0f);
    return 0;
}


// cohere (CohereDecoderLayer): one LayerNorm feeds attention and the MLP, whose
// outputs both join the residual: xn1 = ln(x); q,k,v = proj(xn1) (+bias, +LoRA);
// [use_qk_norm: per-head LayerNorm of q and k, weights (H, D), (Hkv, D)]; RoPE on
// adjacent pairs; att = causal GQA; h = x + o_proj(att); act = silu(gate(xn1)) *
// up(xn1); x' = h + down(act) (HF's residual + attn + mlp, in that order).
// cohere2: its full_attention layers skip RoPE and the window (model_layer_window).
// A layer's attention over its rows' a->qr, a->kr, a->v into a->att, window
// W, softcap cap. In a training forward, the packed causal forward over the
// plan's sequences. In generation, this call's K and V rows appended to each
// slot's cache, then attention over the cache; a call whose every slot starts
// empty (KvCache.fresh) attends over its new rows alone with the packed
// forward, as the cache holds nothing else.
static int layer_attention(Transformer *tf, int l, LayerActs *a, int T, int W, float cap, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    const float *sk = c->attn_sinks ? wv(tf, PARAM_SINKS, l) : NULL;  // gpt_oss: a sink logit a head
    int H = c->num_attention_heads, Hk = c->num_key_value_heads, D = c->head_dim, KD = Hk * D;
    KvCache *kv = tf->kv;
    if (!kv) {
        OP(attention_forward, a->att, a->lse, a->qr, a->kr, a->v, tf->d_cu, tf->nseq, T, H, Hk, D, W, cap, sk);
        return 0;
    }
    // the new rows are rounded into the pools' dtype; a fresh prompt attends its
    // fp32 rows (as the trainer's forward does), later tokens the stored ones
    size_t layer_bytes = (size_t)kv->n_blocks * KV_BLOCK * KD * dtype_size(kv->dt);
    char *kc = (char *)kv->k + (size_t)l * layer_bytes, *vc = (char *)kv->v + (size_t)l * layer_bytes;
    OP(scatter_rows_dt, kc, kv->dt, a->kr, tf->d_rows, T, KD);
    OP(scatter_rows_dt, vc, kv->dt, a->v, tf->d_rows, T, KD);
    if (kv->fresh)
        OP(attention_forward, a->att, a->lse, a->qr, a->kr, a->v, kv->d_cu_new, kv->n_slots, T, H, Hk, D, W, cap, sk);
    else
        OP(attention_decode_forward, a->att, a->qr, kc, vc, kv->dt, kv->d_cu_new, kv->d_new_len, kv->d_table,
           kv->max_blocks, kv->n_slots, T, H, Hk, D, W, cap, sk);
    return 0;
}

static int cohere_layer_forward(Transformer *tf, int l, LayerActs *a, int T, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D;
    float eps = (float)c->rms_norm_eps;
    const float *x = tf->resid[l];
    OP(layernorm_forward, a->xn1, a->mean1, a->rstd1, x, wv(tf, PARAM_ATTN_NORM, l), T, C, 1, eps);
    if (proj_forward(tf, a->q, a->la[LORA_Q], a->xn1, PARAM_WQ, wv(tf, PARAM_BQ, l), T, C, HD, l, LORA_Q, 0,
                     err) < 0 ||
        proj_forward(tf, a->k, a->la[LORA_K], a->xn1, PARAM_WK, wv(tf, PARAM_BK, l), T, C, KD, l, LORA_K, 0,
                     err) < 0 ||
        proj_forward(tf, a->v, a->la[LORA_V], a->xn1, PARAM_WV, wv(tf, PARAM_BV, l), T, C, KD, l, LORA_V, 0,
                     err) < 0)
        return -1;
    const float *qin = a->q, *kin = a->k;
    if (c->has_qk_norm) {  // per head (rows of D), a weight row per head
        OP(layernorm_forward, a->qn, a->qmean, a->qrstd, a->q, wv(tf, PARAM_Q_NORM, l), T * H, D, H, eps);
        OP(layernorm_forward, a->kn, a->kmean, a->krstd, a->k, wv(tf, PARAM_K_NORM, l), T * Hk, D, Hk, eps);
        qin = a->qn;
        kin = a->kn;
    }
    if (model_layer_has_rope(c, l)) {
        OP(rope_interleaved_forward, a->qr, qin, tf->d_pos, tf->cos_t, tf->sin_t, T, H, D);
        OP(rope_interleaved_forward, a->kr, kin, tf->d_pos, tf->cos_t, tf->sin_t, T, Hk, D);
    } else {
        OP(copy, a->qr, qin, (size_t)T * HD);
        OP(copy, a->kr, kin, (size_t)T * KD);
    }
    if (layer_attention(tf, l, a, T, model_layer_window(c, l), 0.0f, err) < 0) return -1;
    OP(copy, a->h, x, (size_t)T * C);
    if (proj_forward(tf, a->h, a->la[LORA_O], a->att, PARAM_WO, wv(tf, PARAM_BO, l), T, HD, C, l, LORA_O, 1,
                     err) < 0 ||
        proj_forward(tf, a->gate, a->la[LORA_GATE], a->xn1, PARAM_W_GATE, NULL, T, C, F, l, LORA_GATE, 0, err) < 0 ||
        proj_forward(tf, a->up, a->la[LORA_UP], a->xn1, PARAM_W_UP, NULL, T, C, F, l, LORA_UP, 0, err) < 0)
        return -1;
    OP(swiglu_forward, a->act, a->gate, a->up, (size_t)T * F);
    float *y = tf->resid[l + 1];
    OP(copy, y, a->h, (size_t)T * C);
    return proj_forward(tf, y, a->la[LORA_DOWN], a->act, PARAM_W_DOWN, NULL, T, F, C, l, LORA_DOWN, 1, err);
}

// cohere_layer_forward's backward: dres = d x' on entry; the MLP's and the
// attention's d xn1 both gather in dxn, then one LayerNorm backward.
static int cohere_layer_backward(Transformer *tf, int l, LayerActs *a, int T, float *lg, float *bg, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D;
    bool full = bg && tf->plan.full;
    const float *x = tf->resid[l];
    float *dres = tf->dres;
    if (proj_backward(tf, tf->dact, lg, bg, PARAM_W_DOWN, PARAM_COUNT, dres, a->act, a->la[LORA_DOWN], T, F, C, l,
                      LORA_DOWN, 0, err) < 0)
        return -1;
    OP(swiglu_backward, tf->dgate, tf->dup, tf->dact, a->gate, a->up, (size_t)T * F);
    if (proj_backward(tf, tf->dxn, lg, bg, PARAM_W_GATE, PARAM_COUNT, tf->dgate, a->xn1, a->la[LORA_GATE], T, C, F, l,
                      LORA_GATE, 0, err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_W_UP, PARAM_COUNT, tf->dup, a->xn1, a->la[LORA_UP], T, C, F, l,
                      LORA_UP, 1, err) < 0 ||
        proj_backward(tf, tf->datt, lg, bg, PARAM_WO, PARAM_BO, dres, a->att, a->la[LORA_O], T, HD, C, l, LORA_O, 0,
                      err) < 0)
        return -1;
    OP(attention_backward, tf->dq, tf->dk, tf->dv, tf->datt, a->qr, a->kr, a->v, a->att, a->lse, tf->d_cu, tf->nseq,
       T, H, Hk, D, model_layer_window(c, l), 0.0f, NULL, NULL);
    if (model_layer_has_rope(c, l)) {
        OP(rope_interleaved_backward, tf->dq, tf->dq, tf->d_pos, tf->cos_t, tf->sin_t, T, H, D);
        OP(rope_interleaved_backward, tf->dk, tf->dk, tf->d_pos, tf->cos_t, tf->sin_t, T, Hk, D);
    }
    if (c->has_qk_norm) {  // dx of each norm into datt (free now), then back
        float *dqw = full ? bg + tf->w->offsets[PARAM_Q_NORM] + (size_t)l * HD : NULL;
        float *dkw = full ? bg + tf->w->offsets[PARAM_K_NORM] + (size_t)l * KD : NULL;
        OP(layernorm_backward, tf->datt, dqw, tf->dq, a->q, wv(tf, PARAM_Q_NORM, l), a->qmean, a->qrstd, T * H, D, H);
        OP(copy, tf->dq, tf->datt, (size_t)T * HD);
        OP(layernorm_backward, tf->datt, dkw, tf->dk, a->k, wv(tf, PARAM_K_NORM, l), a->kmean, a->krstd, T * Hk, D,
           Hk);
        OP(copy, tf->dk, tf->datt, (size_t)T * KD);
    }
    if (proj_backward(tf, tf->dxn, lg, bg, PARAM_WQ, PARAM_BQ, tf->dq, a->xn1, a->la[LORA_Q], T, C, HD, l, LORA_Q, 1,
                      err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_WK, PARAM_BK, tf->dk, a->xn1, a->la[LORA_K], T, C, KD, l, LORA_K, 1,
                      err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_WV, PARAM_BV, tf->dv, a->xn1, a->la[LORA_V], T, C, KD, l, LORA_V, 1,
                      err) < 0)
        return -1;
    float *dnw = full ? bg + tf->w->offsets[PARAM_ATTN_NORM] + (size_t)l * C : NULL;
    OP(layernorm_backward, tf->dtmp, dnw, tf->dxn, x, wv(tf, PARAM_ATTN_NORM, l), a->mean1, a->rstd1, T, C, 1);
    OP(add, dres, tf->dtmp, (size_t)T * C);  // now d resid[l]
    return 0;
}

// ---- gemma2 / gemma3_text: one layer (HF Gemma2DecoderLayer / Gemma3DecoderLayer) ----
//   xn1 = norm(x); q,k,v = proj(xn1); [gemma3: per-head q/k norms]; rope (gemma3's sliding layers:
//   their own table); att = attention(q * query_pre_attn_scalar^-0.5, window of the layer);
//   h = x + norm(o_proj(att)); xn2 = norm(h); act = gelu_tanh(gate(xn2)) * up(xn2);
//   x' = h + norm(down(act)). Every norm scales by 1 + w (wv's gemma copy).
static const float *gemma_cos(const Transformer *tf, int l) {
    return tf->cos_l && model_layer_window(&tf->cfg, l) ? tf->cos_l : tf->cos_t;
}
static const float *gemma_sin(const Transformer *tf, int l) {
    return tf->sin_l && model_layer_window(&tf->cfg, l) ? tf->sin_l : tf->sin_t;
}

static int gemma_layer_forward(Transformer *tf, int l, LayerActs *a, int T, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D, W = model_layer_window(c, l);
    float eps = (float)c->rms_norm_eps;
    const float *x = tf->resid[l];
    OP(rmsnorm_forward, a->xn1, a->rstd1, x, wv(tf, PARAM_ATTN_NORM, l), T, C, eps);
    if (proj_forward(tf, a->q, a->la[LORA_Q], a->xn1, PARAM_WQ, wv(tf, PARAM_BQ, l), T, C, HD, l, LORA_Q, 0, err) < 0 ||
        proj_forward(tf, a->k, a->la[LORA_K], a->xn1, PARAM_WK, wv(tf, PARAM_BK, l), T, C, KD, l, LORA_K, 0, err) < 0 ||
        proj_forward(tf, a->v, a->la[LORA_V], a->xn1, PARAM_WV, wv(tf, PARAM_BV, l), T, C, KD, l, LORA_V, 0, err) < 0)
        return -1;
    const float *qin = a->q, *kin = a->k;
    if (c->has_qk_norm) {  // gemma3: per head (D)
        OP(rmsnorm_forward, a->qn, a->qrstd, a->q, wv(tf, PARAM_Q_NORM, l), T * H, D, eps);
        OP(rmsnorm_forward, a->kn, a->krstd, a->k, wv(tf, PARAM_K_NORM, l), T * Hk, D, eps);
        qin = a->qn;
        kin = a->kn;
    }
    OP(rope_forward, a->qr, qin, tf->d_pos, gemma_cos(tf, l), gemma_sin(tf, l), T, H, D);
    OP(rope_forward, a->kr, kin, tf->d_pos, gemma_cos(tf, l), gemma_sin(tf, l), T, Hk, D);
    // scores q.k * query_pre_attn_scalar^-0.5: the kernels' 1/sqrt(D) undone on q
    OP(scale, a->qr, (size_t)T * HD, (float)c->attention_multiplier * sqrtf((float)D));
    if (layer_attention(tf, l, a, T, W, (float)c->attn_logit_softcapping, err) < 0) return -1;
    if (proj_forward(tf, a->o, a->la[LORA_O], a->att, PARAM_WO, wv(tf, PARAM_BO, l), T, HD, C, l, LORA_O, 0, err) < 0)
        return -1;
    OP(rmsnorm_forward, a->h, a->orstd, a->o, wv(tf, PARAM_MLP_NORM, l), T, C, eps);  // post_attention_layernorm
    OP(add, a->h, x, (size_t)T * C);
    OP(rmsnorm_forward, a->xn2, a->rstd2, a->h, wv(tf, PARAM_PRE_FF_NORM, l), T, C, eps);
    if (proj_forward(tf, a->gate, a->la[LORA_GATE], a->xn2, PARAM_W_GATE, NULL, T, C, F, l, LORA_GATE, 0, err) < 0 ||
        proj_forward(tf, a->up, a->la[LORA_UP], a->xn2, PARAM_W_UP, NULL, T, C, F, l, LORA_UP, 0, err) < 0)
        return -1;
    OP(geglu_forward, a->act, a->gate, a->up, (size_t)T * F);
    if (proj_forward(tf, a->m, a->la[LORA_DOWN], a->act, PARAM_W_DOWN, NULL, T, F, C, l, LORA_DOWN, 0, err) < 0)
        return -1;
    float *y = tf->resid[l + 1];
    OP(rmsnorm_forward, y, a->mrstd, a->m, wv(tf, PARAM_POST_FF_NORM, l), T, C, eps);
    OP(add, y, a->h, (size_t)T * C);
    return 0;
}

static int layer_forward(Transformer *tf, int l, LayerActs *a, int T, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    if (c->parallel_block) return cohere_layer_forward(tf, l, a, T, err);
    if (c->gemma_norms) return gemma_layer_forward(tf, l, a, T, err);
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D;
    float eps = (float)c->rms_norm_eps;
    const float *x = tf->resid[l];
    // olmo2 (post_norm): no pre-norms; each sub-block's output is normed before it
    // joins the residual (the projections' outputs kept in xn1 / xn2, free there)
    bool post = c->post_norm;
    const float *ain = x;
    if (!post) {
        OP(rmsnorm_forward, a->xn1, a->rstd1, x, wv(tf, PARAM_ATTN_NORM, l), T, C, eps);
        ain = a->xn1;
    }
    if (proj_forward(tf, a->q, a->la[LORA_Q], ain, PARAM_WQ, wv(tf, PARAM_BQ, l), T, C, HD, l, LORA_Q, 0,
                     err) < 0 ||
        proj_forward(tf, a->k, a->la[LORA_K], ain, PARAM_WK, wv(tf, PARAM_BK, l), T, C, KD, l, LORA_K, 0,
                     err) < 0 ||
        proj_forward(tf, a->v, a->la[LORA_V], ain, PARAM_WV, wv(tf, PARAM_BV, l), T, C, KD, l, LORA_V, 0,
                     err) < 0)
        return -1;
    const float *qin = a->q, *kin = a->k;
    if (c->has_qk_norm && c->qk_norm_whole) {  // olmo2, olmoe: over the whole projection (H*D, Hkv*D), before the heads split
        OP(rmsnorm_forward, a->qn, a->qrstd, a->q, wv(tf, PARAM_Q_NORM, l), T, HD, eps);
        OP(rmsnorm_forward, a->kn, a->krstd, a->k, wv(tf, PARAM_K_NORM, l), T, KD, eps);
        qin = a->qn;
        kin = a->kn;
    } else if (c->has_qk_norm) {  // qwen3: per head (D)
        OP(rmsnorm_forward, a->qn, a->qrstd, a->q, wv(tf, PARAM_Q_NORM, l), T * H, D, eps);
        OP(rmsnorm_forward, a->kn, a->krstd, a->k, wv(tf, PARAM_K_NORM, l), T * Hk, D, eps);
        qin = a->qn;
        kin = a->kn;
    }
    if (model_layer_has_rope(c, l)) {
        if (c->rope_dim) {  // phi3's partial rotary: the first rope_dim dims of each head
            OP(rope_partial_forward, a->qr, qin, tf->d_pos, tf->cos_t, tf->sin_t, T, H, D, c->rope_dim);
            OP(rope_partial_forward, a->kr, kin, tf->d_pos, tf->cos_t, tf->sin_t, T, Hk, D, c->rope_dim);
        } else {
            OP(rope_forward, a->qr, qin, tf->d_pos, tf->cos_t, tf->sin_t, T, H, D);
            OP(rope_forward, a->kr, kin, tf->d_pos, tf->cos_t, tf->sin_t, T, Hk, D);
        }
    } else {  // smollm3's no-RoPE layers: q and k as projected
        OP(copy, a->qr, qin, (size_t)T * HD);
        OP(copy, a->kr, kin, (size_t)T * KD);
    }
    // granite: scores q.k * attention_multiplier; the kernels' 1/sqrt(D) undone on q
    if (c->attention_multiplier > 0) OP(scale, a->qr, (size_t)T * HD, (float)c->attention_multiplier * sqrtf((float)D));
    if (layer_attention(tf, l, a, T, model_layer_window(c, l), 0.0f, err) < 0) return -1;
    // granite: h = x + r o_proj(att), as r (x / r + o_proj(att)) so that the
    // projection still accumulates into h (r = 1: neither scale runs)
    float r = c->residual_multiplier > 0 ? (float)c->residual_multiplier : 1.0f;
    if (post) {  // olmo2: h = x + norm(o_proj(att))
        if (proj_forward(tf, a->xn1, a->la[LORA_O], a->att, PARAM_WO, wv(tf, PARAM_BO, l), T, HD, C, l, LORA_O,
                         0, err) < 0)
            return -1;
        OP(rmsnorm_forward, a->h, a->rstd1, a->xn1, wv(tf, PARAM_ATTN_NORM, l), T, C, eps);
        OP(add, a->h, x, (size_t)T * C);
    } else {
        OP(copy, a->h, x, (size_t)T * C);
        if (r != 1.0f) OP(scale, a->h, (size_t)T * C, 1.0f / r);
        if (proj_forward(tf, a->h, a->la[LORA_O], a->att, PARAM_WO, wv(tf, PARAM_BO, l), T, HD, C, l, LORA_O,
                         1, err) < 0)
            return -1;
        if (r != 1.0f) OP(scale, a->h, (size_t)T * C, r);
        OP(rmsnorm_forward, a->xn2, a->rstd2, a->h, wv(tf, PARAM_MLP_NORM, l), T, C, eps);
    }
    const float *min = post ? a->h : a->xn2;
    if (model_is_moe(c)) {  // y = h + r moe(xn2)
        if (moe_mlp_forward(tf, l, a, T, min, tf->moe_out, err) < 0) return -1;
        if (r != 1.0f) OP(scale, tf->moe_out, (size_t)T * C, r);
        OP(copy, tf->resid[l + 1], a->h, (size_t)T * C);
        OP(add, tf->resid[l + 1], tf->moe_out, (size_t)T * C);
        return 0;
    }
    if (proj_forward(tf, a->gate, a->la[LORA_GATE], min, PARAM_W_GATE, NULL, T, C, F, l, LORA_GATE, 0,
                     err) < 0 ||
        proj_forward(tf, a->up, a->la[LORA_UP], min, PARAM_W_UP, NULL, T, C, F, l, LORA_UP, 0, err) < 0)
        return -1;
    OP(swiglu_forward, a->act, a->gate, a->up, (size_t)T * F);
    float *y = tf->resid[l + 1];
    if (post) {  // olmo2: y = h + norm(down(act))
        if (proj_forward(tf, a->xn2, a->la[LORA_DOWN], a->act, PARAM_W_DOWN, NULL, T, F, C, l, LORA_DOWN, 0, err) < 0)
            return -1;
        OP(rmsnorm_forward, y, a->rstd2, a->xn2, wv(tf, PARAM_MLP_NORM, l), T, C, eps);
        OP(add, y, a->h, (size_t)T * C);
        return 0;
    }
    OP(copy, y, a->h, (size_t)T * C);
    if (r != 1.0f) OP(scale, y, (size_t)T * C, 1.0f / r);
    if (proj_forward(tf, y, a->la[LORA_DOWN], a->act, PARAM_W_DOWN, NULL, T, F, C, l, LORA_DOWN, 1, err) < 0)
        return -1;
    if (r != 1.0f) OP(scale, y, (size_t)T * C, r);
    return 0;
}

// Token ids checked on the host: a device cannot say which one is bad.
static int check_ids(const int *ids, int n, int V, const char *what, PailErr *err) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return err_set(err, PAIL_ERR_INVALID, "%s %d at position %d is outside the vocabulary [0, %d)", what,
                           ids[i], i, V);
    return 0;
}

// The host view of n floats at src in backend memory: src itself on a host
// backend, else a copy in host (n floats).
static const float *host_view(Transformer *tf, const float *src, float *host, size_t n, PailErr *err) {
    if (tf->be->host_memory) return src;
    return tf->be->ops->to_host(tf->be, host, src, n * sizeof(float), err) < 0 ? NULL : host;
}

// phi3's longrope: transformers picks long_factor when a forward's max(position_ids) + 1 exceeds
// original_max_position_embeddings (longrope_frequency_update), which for one sequence is its
// length: each packed sequence of more positions reads the long table (rows shifted by max_pos),
// the others the short one, as each would run alone in transformers.
static void longrope_pos(const Transformer *tf, int *out, const int *pos, const int *cu, int nseq) {
    int omax = tf->cfg.rope_original_max_position_embeddings;
    for (int s = 0; s < nseq; s++) {
        int mx = 0;
        for (int t = cu[s]; t < cu[s + 1]; t++) mx = pos[t] > mx ? pos[t] : mx;
        int shift = mx + 1 > omax ? tf->plan.max_pos : 0;
        for (int t = cu[s]; t < cu[s + 1]; t++) out[t] = pos[t] + shift;
    }
}

int transformer_forward(Transformer *tf, float *logp, float *entropy, const int *tokens, const int *pos,
                        const int *cu_seqlens, int nseq, int T, const int *targets, float temperature,
                        PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    tf->have_forward = tf->have_expect = false;
    if (T < 1 || T > tf->plan.max_tokens)
        return err_set(err, PAIL_ERR_INVALID, "transformer: %d tokens, the plan holds 1..%d", T, tf->plan.max_tokens);
    if (nseq < 1 || cu_seqlens[0] != 0 || cu_seqlens[nseq] != T)
        return err_set(err, PAIL_ERR_INVALID, "transformer: sequence offsets must run from 0 to %d", T);
    for (int s = 0; s < nseq; s++)
        if (cu_seqlens[s + 1] <= cu_seqlens[s])
            return err_set(err, PAIL_ERR_INVALID, "transformer: sequence %d is empty", s);
    for (int t = 0; t < T; t++)
        if (pos[t] < 0 || pos[t] >= tf->plan.max_pos)
            return err_set(err, PAIL_ERR_INVALID, "transformer: position %d at row %d is outside [0, %d)", pos[t], t,
                           tf->plan.max_pos);
    int C = c->hidden_size, V = c->vocab_size;
    if (check_ids(tokens, T, V, "transformer: embedding: token", err) < 0) return -1;
    tf->T = T;
    tf->nseq = nseq;
    // granite: logits / logits_scaling as well (0: not set, 1)
    tf->temperature = c->logits_scaling > 0 ? temperature * (float)c->logits_scaling : temperature;
    if (c->logit_scale > 0) tf->temperature = temperature / (float)c->logit_scale;  // cohere: logits * logit_scale
    // Only rows with a target go through the LM head.
    int n = 0;
    for (int t = 0; t < T; t++) {
        if (targets[t] < 0) continue;
        tf->sel[n] = t;
        tf->tsel[n] = targets[t];
        n++;
    }
    if (check_ids(tf->tsel, n, V, "transformer: target", err) < 0) return -1;
    OP(to_device, tf->d_tokens, tokens, (size_t)T * sizeof(int));
    if (c->rope_scaling == ROPE_SCALING_LONGROPE) {
        longrope_pos(tf, tf->h_pos, pos, cu_seqlens, nseq);
        pos = tf->h_pos;
    }
    OP(to_device, tf->d_pos, pos, (size_t)T * sizeof(int));
    OP(to_device, tf->d_cu, cu_seqlens, ((size_t)nseq + 1) * sizeof(int));
    OP(to_device, tf->d_sel, tf->sel, (size_t)n * sizeof(int));
    OP(to_device, tf->d_tsel, tf->tsel, (size_t)n * sizeof(int));
    if (tf->gnorm && tf->plan.full && gemma_norm_refresh(tf, err) < 0) return -1;  // the weights may have moved
    OP(embedding_forward, tf->resid[0], wm(tf, PARAM_EMBED, 0), wdt(tf, PARAM_EMBED, 0), tf->d_tokens, T, C, V);
    if (c->embedding_multiplier > 0 && c->embedding_multiplier != 1.0)
        OP(scale, tf->resid[0], (size_t)T * C, (float)c->embedding_multiplier);
    for (int l = 0; l < c->num_hidden_layers; l++)
        if (layer_forward(tf, l, &tf->acts[tf->nacts == 1 ? 0 : l], T, err) < 0) return -1;
    if (c->layer_norm)  // cohere
        OP(layernorm_forward, tf->xf, tf->meanf, tf->rstdf, tf->resid[c->num_hidden_layers],
           wv(tf, PARAM_FINAL_NORM, 0), T, C, 1, (float)c->rms_norm_eps);
    else
        OP(rmsnorm_forward, tf->xf, tf->rstdf, tf->resid[c->num_hidden_layers], wv(tf, PARAM_FINAL_NORM, 0), T, C,
           (float)c->rms_norm_eps);
    tf->Tsel = n;
    for (int t = 0; t < T; t++) {
        logp[t] = 0;
        if (entropy) entropy[t] = 0;
    }
    if (n > 0) {
        OP(gather_rows, tf->hsel, tf->xf, tf->d_sel, n, C);
        float *lp = tf->dlogp_sel;  // reused as the compact logp buffer
        float *ent = entropy ? tf->ent_sel : NULL;
        const void *head = wm(tf, PARAM_LM_HEAD, 0);
        DType hdt = wdt(tf, PARAM_LM_HEAD, 0);
        // A LoRA step's backward (frozen head) needs only sum_j p_j W_j per row:
        // computed here, it spares the backward a second pass over the vocabulary.
        bool expect = tf->plan.backward && !tf->plan.full && tf->lora_on;
        if (expect)
            OP(logprob_forward_expect, lp, ent, tf->lse_sel, tf->expect_sel, tf->hsel, head, hdt, tf->d_tsel, n, C, V,
               tf->temperature, (float)c->final_logit_softcapping, tf->ws, tf->ws_floats);
        else
            OP(logprob_forward, lp, ent, tf->lse_sel, tf->hsel, head, hdt, tf->d_tsel, n, C, V, tf->temperature,
               (float)c->final_logit_softcapping, tf->ws, tf->plan.vchunk);
        tf->have_expect = expect;
        const float *hlp = host_view(tf, lp, tf->h_lp, (size_t)n, err);
        const float *hent = ent ? host_view(tf, ent, tf->h_ent, (size_t)n, err) : NULL;
        if (!hlp || (ent && !hent)) return err_wrap(err, "transformer");
        for (int i = 0; i < n; i++) {
            logp[tf->sel[i]] = hlp[i];
            if (entropy) entropy[tf->sel[i]] = hent[i];
        }
    }
    tf->have_forward = true;
    return 0;
}

// Backward of gemma_layer_forward; dres: d resid[l+1] on entry, d resid[l] on exit.
static int gemma_layer_backward(Transformer *tf, int l, LayerActs *a, int T, float *lg, float *bg, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D, W = model_layer_window(c, l);
    bool full = bg && tf->plan.full;
    const float *x = tf->resid[l];
    float *dres = tf->dres;
#define NORM_GRAD(id) (full ? bg + tf->w->offsets[id] + (size_t)l * tf->w->specs[id].numel : NULL)
    // x' = h + norm(m): d m into dtmp
    OP(rmsnorm_backward, tf->dtmp, NORM_GRAD(PARAM_POST_FF_NORM), dres, a->m, wv(tf, PARAM_POST_FF_NORM, l), a->mrstd,
       T, C);
    if (proj_backward(tf, tf->dact, lg, bg, PARAM_W_DOWN, PARAM_COUNT, tf->dtmp, a->act, a->la[LORA_DOWN], T, F, C, l,
                      LORA_DOWN, 0, err) < 0)
        return -1;
    OP(geglu_backward, tf->dgate, tf->dup, tf->dact, a->gate, a->up, (size_t)T * F);
    if (proj_backward(tf, tf->dxn, lg, bg, PARAM_W_GATE, PARAM_COUNT, tf->dgate, a->xn2, a->la[LORA_GATE], T, C, F, l,
                      LORA_GATE, 0, err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_W_UP, PARAM_COUNT, tf->dup, a->xn2, a->la[LORA_UP], T, C, F, l,
                      LORA_UP, 1, err) < 0)
        return -1;
    OP(rmsnorm_backward, tf->dtmp, NORM_GRAD(PARAM_PRE_FF_NORM), tf->dxn, a->h, wv(tf, PARAM_PRE_FF_NORM, l), a->rstd2,
       T, C);
    OP(add, dres, tf->dtmp, (size_t)T * C);  // now d h
    // h = x + norm(o): d o into dtmp
    OP(rmsnorm_backward, tf->dtmp, NORM_GRAD(PARAM_MLP_NORM), dres, a->o, wv(tf, PARAM_MLP_NORM, l), a->orstd, T, C);
    if (proj_backward(tf, tf->datt, lg, bg, PARAM_WO, PARAM_BO, tf->dtmp, a->att, a->la[LORA_O], T, HD, C, l, LORA_O,
                      0, err) < 0)
        return -1;
    OP(attention_backward, tf->dq, tf->dk, tf->dv, tf->datt, a->qr, a->kr, a->v, a->att, a->lse, tf->d_cu, tf->nseq,
       T, H, Hk, D, W, (float)c->attn_logit_softcapping, NULL, NULL);
    OP(scale, tf->dq, (size_t)T * HD, (float)c->attention_multiplier * sqrtf((float)D));
    OP(rope_backward, tf->dq, tf->dq, tf->d_pos, gemma_cos(tf, l), gemma_sin(tf, l), T, H, D);
    OP(rope_backward, tf->dk, tf->dk, tf->d_pos, gemma_cos(tf, l), gemma_sin(tf, l), T, Hk, D);
    if (c->has_qk_norm) {  // per head; dx into datt (free now), then back
        OP(rmsnorm_backward, tf->datt, NORM_GRAD(PARAM_Q_NORM), tf->dq, a->q, wv(tf, PARAM_Q_NORM, l), a->qrstd, T * H, D);
        OP(copy, tf->dq, tf->datt, (size_t)T * HD);
        OP(rmsnorm_backward, tf->datt, NORM_GRAD(PARAM_K_NORM), tf->dk, a->k, wv(tf, PARAM_K_NORM, l), a->krstd, T * Hk,
           D);
        OP(copy, tf->dk, tf->datt, (size_t)T * KD);
    }
    if (proj_backward(tf, tf->dxn, lg, bg, PARAM_WQ, PARAM_BQ, tf->dq, a->xn1, a->la[LORA_Q], T, C, HD, l, LORA_Q, 0,
                      err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_WK, PARAM_BK, tf->dk, a->xn1, a->la[LORA_K], T, C, KD, l, LORA_K, 1,
                      err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_WV, PARAM_BV, tf->dv, a->xn1, a->la[LORA_V], T, C, KD, l, LORA_V, 1,
                      err) < 0)
        return -1;
    OP(rmsnorm_backward, tf->dtmp, NORM_GRAD(PARAM_ATTN_NORM), tf->dxn, x, wv(tf, PARAM_ATTN_NORM, l), a->rstd1, T, C);
    OP(add, dres, tf->dtmp, (size_t)T * C);  // now d resid[l]
#undef NORM_GRAD
    return 0;
}

static int layer_backward(Transformer *tf, int l, LayerActs *a, int T, float *lg, float *bg, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    if (c->parallel_block) return cohere_layer_backward(tf, l, a, T, lg, bg, err);
    if (c->gemma_norms) return gemma_layer_backward(tf, l, a, T, lg, bg, err);
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D;
    bool full = bg && tf->plan.full;
    const float *x = tf->resid[l];
    float *dres = tf->dres;  // d resid[l+1] on entry, d resid[l] on exit
    // granite's residual_multiplier r: the sub-blocks' outputs see r dres (in dtmp, free until the norms' backward)
    float r = c->residual_multiplier > 0 ? (float)c->residual_multiplier : 1.0f;
    const float *dsub = dres;
    if (r != 1.0f) {
        OP(copy, tf->dtmp, dres, (size_t)T * C);
        OP(scale, tf->dtmp, (size_t)T * C, r);
        dsub = tf->dtmp;
    }
    bool post = c->post_norm;  // olmo2 (layer_forward)
    float *dnw = full ? bg + tf->w->offsets[PARAM_MLP_NORM] + (size_t)l * C : NULL;
    if (post) {  // y = h + norm(m), m = down(act) in xn2: d m into dtmp
        OP(rmsnorm_backward, tf->dtmp, dnw, dres, a->xn2, wv(tf, PARAM_MLP_NORM, l), a->rstd2, T, C);
        dsub = tf->dtmp;
    }
    // MLP: resid[l+1] = h + r down(act), or h + r moe(xn2)
    const float *min = post ? a->h : a->xn2;
    if (model_is_moe(c)) {
        if (moe_mlp_backward(tf, l, a, T, dsub, min, tf->dxn, lg, bg, err) < 0) return -1;
    } else {
        if (proj_backward(tf, tf->dact, lg, bg, PARAM_W_DOWN, PARAM_COUNT, dsub, a->act, a->la[LORA_DOWN], T, F, C,
                          l, LORA_DOWN, 0, err) < 0)
            return -1;
        OP(swiglu_backward, tf->dgate, tf->dup, tf->dact, a->gate, a->up, (size_t)T * F);
        if (proj_backward(tf, tf->dxn, lg, bg, PARAM_W_GATE, PARAM_COUNT, tf->dgate, min, a->la[LORA_GATE], T, C, F,
                          l, LORA_GATE, 0, err) < 0 ||
            proj_backward(tf, tf->dxn, lg, bg, PARAM_W_UP, PARAM_COUNT, tf->dup, min, a->la[LORA_UP], T, C, F, l,
                          LORA_UP, 1, err) < 0)
            return -1;
    }
    if (post) {
        OP(add, dres, tf->dxn, (size_t)T * C);  // now d h
        // h = x + norm(o), o = o_proj(att) in xn1: d o into dtmp
        dnw = full ? bg + tf->w->offsets[PARAM_ATTN_NORM] + (size_t)l * C : NULL;
        OP(rmsnorm_backward, tf->dtmp, dnw, dres, a->xn1, wv(tf, PARAM_ATTN_NORM, l), a->rstd1, T, C);
    } else {
        OP(rmsnorm_backward, tf->dtmp, dnw, tf->dxn, a->h, wv(tf, PARAM_MLP_NORM, l), a->rstd2, T, C);
        OP(add, dres, tf->dtmp, (size_t)T * C);  // now d h
        // Attention: h = x + r o_proj(att)
        if (r != 1.0f) {
            OP(copy, tf->dtmp, dres, (size_t)T * C);
            OP(scale, tf->dtmp, (size_t)T * C, r);
        }
    }
    if (proj_backward(tf, tf->datt, lg, bg, PARAM_WO, PARAM_BO, dsub, a->att, a->la[LORA_O], T,
                      HD, C, l, LORA_O, 0, err) < 0)
        return -1;
    OP(attention_backward, tf->dq, tf->dk, tf->dv, tf->datt, a->qr, a->kr, a->v, a->att, a->lse, tf->d_cu, tf->nseq,
       T, H, Hk, D, model_layer_window(c, l), 0.0f, tf->cfg.attn_sinks ? wv(tf, PARAM_SINKS, l) : NULL,
       full && tf->cfg.attn_sinks ? bg + tf->w->offsets[PARAM_SINKS] + (size_t)l * H : NULL);  // gpt_oss: sliding and full layers, sinks
    if (c->attention_multiplier > 0)  // granite: q was scaled after RoPE
        OP(scale, tf->dq, (size_t)T * HD, (float)c->attention_multiplier * sqrtf((float)D));
    if (model_layer_has_rope(c, l)) {
        if (c->rope_dim) {
            OP(rope_partial_backward, tf->dq, tf->dq, tf->d_pos, tf->cos_t, tf->sin_t, T, H, D, c->rope_dim);
            OP(rope_partial_backward, tf->dk, tf->dk, tf->d_pos, tf->cos_t, tf->sin_t, T, Hk, D, c->rope_dim);
        } else {
            OP(rope_backward, tf->dq, tf->dq, tf->d_pos, tf->cos_t, tf->sin_t, T, H, D);
            OP(rope_backward, tf->dk, tf->dk, tf->d_pos, tf->cos_t, tf->sin_t, T, Hk, D);
        }
    }
    if (c->has_qk_norm) {
        // the norm's rows: per head (qwen3: T*H rows of D) or the whole projection (olmo2: T rows of H*D)
        bool whole = c->qk_norm_whole;
        int qrows = whole ? T : T * H, krows = whole ? T : T * Hk, qw = whole ? HD : D, kw = whole ? KD : D;
        float *dqw = full ? bg + tf->w->offsets[PARAM_Q_NORM] + (size_t)l * qw : NULL;
        float *dkw = full ? bg + tf->w->offsets[PARAM_K_NORM] + (size_t)l * kw : NULL;
        // dx of the norm over the pre-norm q into datt (free now), then back
        OP(rmsnorm_backward, tf->datt, dqw, tf->dq, a->q, wv(tf, PARAM_Q_NORM, l), a->qrstd, qrows, qw);
        OP(copy, tf->dq, tf->datt, (size_t)T * HD);
        OP(rmsnorm_backward, tf->datt, dkw, tf->dk, a->k, wv(tf, PARAM_K_NORM, l), a->krstd, krows, kw);
        OP(copy, tf->dk, tf->datt, (size_t)T * KD);
    }
    const float *ain = post ? x : a->xn1;
    if (proj_backward(tf, tf->dxn, lg, bg, PARAM_WQ, PARAM_BQ, tf->dq, ain, a->la[LORA_Q], T,
                      C, HD, l, LORA_Q, 0, err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_WK, PARAM_BK, tf->dk, ain, a->la[LORA_K], T,
                      C, KD, l, LORA_K, 1, err) < 0 ||
        proj_backward(tf, tf->dxn, lg, bg, PARAM_WV, PARAM_BV, tf->dv, ain, a->la[LORA_V], T,
                      C, KD, l, LORA_V, 1, err) < 0)
        return -1;
    if (post) {
        OP(add, dres, tf->dxn, (size_t)T * C);  // now d resid[l]
        return 0;
    }
    dnw = full ? bg + tf->w->offsets[PARAM_ATTN_NORM] + (size_t)l * C : NULL;
    OP(rmsnorm_backward, tf->dtmp, dnw, tf->dxn, x, wv(tf, PARAM_ATTN_NORM, l), a->rstd1, T, C);
    OP(add, dres, tf->dtmp, (size_t)T * C);  // now d resid[l]
    return 0;
}

int transformer_backward(Transformer *tf, float *lora_grads, float *base_grads, const float *dlogp, PailErr *err) {
    if (!tf->plan.backward) return err_set(err, PAIL_ERR_INVALID, "transformer: planned without backward");
    if (!tf->have_forward) return err_set(err, PAIL_ERR_INVALID, "transformer: backward without a forward");
    if (base_grads && !tf->plan.full)
        return err_set(err, PAIL_ERR_INVALID, "transformer: base gradients need a plan with full = true");
    const ModelConfig *c = &tf->cfg;
    int T = tf->T, C = c->hidden_size, V = c->vocab_size, L = c->num_hidden_layers;
    bool full = base_grads != NULL;
    // LM head (rows with a target only), then scatter back into (T,C).
    for (int i = 0; i < tf->Tsel; i++) tf->h_lp[i] = dlogp[tf->sel[i]];
    OP(to_device, tf->dlogp_sel, tf->h_lp, (size_t)tf->Tsel * sizeof(float));
    float *dlm = full ? base_grads + tf->w->offsets[PARAM_LM_HEAD] : NULL;
    if (full && c->tie_word_embeddings) dlm = base_grads + tf->w->offsets[PARAM_EMBED];
    OP(zero, tf->dxn, (size_t)T * C);
    if (tf->Tsel > 0) {
        const void *head = wm(tf, PARAM_LM_HEAD, 0);
        DType hdt = wdt(tf, PARAM_LM_HEAD, 0);
        if (tf->have_expect)  // a LoRA plan: no head gradient (dlm) can be asked for
            OP(logprob_backward_expect, tf->dhsel, tf->dlogp_sel, tf->expect_sel, head, hdt, tf->d_tsel, tf->Tsel, C,
               tf->temperature, (float)c->final_logit_softcapping, tf->hsel);
        else
            OP(logprob_backward, tf->dhsel, dlm, tf->dlogp_sel, NULL, tf->hsel, head, hdt, tf->d_tsel, tf->lse_sel, NULL,
               tf->Tsel, C, V, tf->temperature, (float)c->final_logit_softcapping, tf->ws, tf->plan.vchunk);
        OP(scatter_rows, tf->dxn, tf->dhsel, tf->d_sel, tf->Tsel, C);
    }
    float *dfw = full ? base_grads + tf->w->offsets[PARAM_FINAL_NORM] : NULL;
    if (c->layer_norm)  // cohere
        OP(layernorm_backward, tf->dres, dfw, tf->dxn, tf->resid[L], wv(tf, PARAM_FINAL_NORM, 0), tf->meanf,
           tf->rstdf, T, C, 1);
    else
        OP(rmsnorm_backward, tf->dres, dfw, tf->dxn, tf->resid[L], wv(tf, PARAM_FINAL_NORM, 0), tf->rstdf, T, C);
    for (int l = L - 1; l >= 0; l--) {
        LayerActs *a = &tf->acts[tf->nacts == 1 ? 0 : l];
        // recompute this layer's activations
        if (tf->nacts == 1 && l != L - 1 && layer_forward(tf, l, a, T, err) < 0) return -1;
        if (layer_backward(tf, l, a, T, lora_grads, base_grads, err) < 0) return -1;
    }
    if (full && c->embedding_multiplier > 0 && c->embedding_multiplier != 1.0) OP(scale, tf->dres, (size_t)T * C, (float)c->embedding_multiplier);
    if (full) OP(embedding_backward, base_grads + tf->w->offsets[PARAM_EMBED], tf->dres, tf->d_tokens, T, C);
    return 0;
}

size_t kvcache_block_bytes(const ModelConfig *cfg, DType kvdt) {
    return 2 * (size_t)cfg->num_hidden_layers * KV_BLOCK * cfg->num_key_value_heads * cfg->head_dim * dtype_size(kvdt);
}

int kvcache_init_on(KvCache **out, Backend *be, const ModelConfig *cfg, int n_slots, int max_ctx, DType kvdt,
                    int n_blocks, PailErr *err) {
    *out = NULL;
    if (n_slots < 1 || max_ctx < 1 || n_blocks < 0)
        return err_set(err, PAIL_ERR_INVALID, "KV cache: %d slots of %d tokens, %d blocks", n_slots, max_ctx, n_blocks);
    if (kvdt != DT_F32 && kvdt != DT_BF16 && kvdt != DT_F16)
        return err_set(err, PAIL_ERR_INVALID, "KV cache: dtype %s is not one of f32, bf16, f16", dtype_name(kvdt));
    int max_blocks = (max_ctx + KV_BLOCK - 1) / KV_BLOCK;
    // 0: every slot can hold max_ctx tokens of its own at once, a pool that
    // never runs dry whatever the sharing (most of it idle in a group); a
    // smaller pool is the caller's to schedule (kvcache_free_blocks).
    if (n_blocks == 0) n_blocks = (int)((int64_t)n_slots * max_blocks > INT32_MAX ? INT32_MAX : n_slots * max_blocks);
    if ((int64_t)n_blocks * KV_BLOCK > INT32_MAX || (int64_t)n_slots * max_blocks > INT32_MAX)
        return err_set(err, PAIL_ERR_INVALID, "KV cache: %d blocks of %d tokens (%d slots x %d tokens) exceed 2^31 rows",
                       n_blocks, KV_BLOCK, n_slots, max_ctx);
    KvCache *kv = calloc(1, sizeof *kv);
    if (!kv) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    kv->be = be ? be : backend_cpu();
    kv->L = cfg->num_hidden_layers;
    kv->n_slots = n_slots;
    kv->max_ctx = max_ctx;
    kv->max_blocks = max_blocks;
    kv->n_blocks = n_blocks;
    kv->kvd = cfg->num_key_value_heads * cfg->head_dim;
    kv->V = cfg->vocab_size;
    kv->dt = kvdt;
    size_t n = (size_t)kv->L * kv->n_blocks * KV_BLOCK * kv->kvd, nt = (size_t)n_slots * max_blocks;
    PailErr aerr = {0};
    const BackendOps *o = kv->be->ops;
    kv->k = o->alloc(kv->be, n * dtype_size(kvdt), &aerr);
    kv->v = o->alloc(kv->be, n * dtype_size(kvdt), &aerr);
    kv->len = calloc((size_t)n_slots, sizeof(int));
    kv->table = malloc(nt * sizeof(int));
    kv->ref = calloc((size_t)kv->n_blocks, sizeof(int));
    kv->free_list = malloc((size_t)kv->n_blocks * sizeof(int));
    kv->cu_new = calloc((size_t)n_slots + 1, sizeof(int));
    kv->new_len = calloc((size_t)n_slots, sizeof(int));
    kv->logits = o->alloc(kv->be, (size_t)n_slots * kv->V * sizeof(float), &aerr);
    bool ok = kv->k && kv->v && kv->len && kv->table && kv->ref && kv->free_list && kv->cu_new && kv->new_len &&
              kv->logits;
    if (ok && kv->be->host_memory) {
        kv->d_cu_new = kv->cu_new;
        kv->d_new_len = kv->new_len;
        kv->d_table = kv->table;
    } else if (ok) {
        kv->d_cu_new = o->alloc(kv->be, ((size_t)n_slots + 1) * sizeof(int), &aerr);
        kv->d_new_len = o->alloc(kv->be, (size_t)n_slots * sizeof(int), &aerr);
        kv->d_table = o->alloc(kv->be, nt * sizeof(int), &aerr);
        ok = kv->d_cu_new && kv->d_new_len && kv->d_table;
    }
    if (!ok) {
        kvcache_free(kv);
        return err_set(err, PAIL_ERR_NOMEM, "KV cache: cannot allocate %zu MiB for %d blocks of %d tokens (%s) on %s",
                       2 * n * dtype_size(kvdt) >> 20, n_blocks, KV_BLOCK, dtype_name(kvdt),
                       (be ? be : backend_cpu())->desc);
    }
    for (size_t i = 0; i < nt; i++) kv->table[i] = -1;
    for (int b = 0; b < kv->n_blocks; b++) kv->free_list[b] = kv->n_blocks - 1 - b;  // block 0 popped first
    kv->n_free = kv->n_blocks;
    *out = kv;
    return 0;
}

int kvcache_init(KvCache **out, const ModelConfig *cfg, int n_slots, int max_ctx, DType kvdt, PailErr *err) {
    return kvcache_init_on(out, backend_cpu(), cfg, n_slots, max_ctx, kvdt, 0, err);
}

void kvcache_free(KvCache *kv) {
    if (!kv) return;
    const BackendOps *o = kv->be->ops;
    o->release(kv->be, kv->k);
    o->release(kv->be, kv->v);
    o->release(kv->be, kv->logits);
    if (!kv->be->host_memory) {
        o->release(kv->be, kv->d_cu_new);
        o->release(kv->be, kv->d_new_len);
        o->release(kv->be, kv->d_table);
    }
    free(kv->len);
    free(kv->table);
    free(kv->ref);
    free(kv->free_list);
    free(kv->cu_new);
    free(kv->new_len);
    free(kv);
}

static int *slot_table(KvCache *kv, int slot) { return kv->table + (size_t)slot * kv->max_blocks; }
static int blocks_for(int ntok) { return (ntok + KV_BLOCK - 1) / KV_BLOCK; }

// Drops the slot's hold on its logical blocks from `from` on.
static void release_from(KvCache *kv, int slot, int from) {
    int *t = slot_table(kv, slot);
    for (int i = from; i < kv->max_blocks && t[i] >= 0; i++) {
        if (--kv->ref[t[i]] == 0) kv->free_list[kv->n_free++] = t[i];
        t[i] = -1;
    }
}

static int block_take(KvCache *kv, PailErr *err) {
    if (kv->n_free == 0)  // a full-size pool never runs dry; a smaller one's caller checks kvcache_append_blocks
        return err_set(err, PAIL_ERR_NOMEM, "KV cache: all %d blocks of %d tokens are in use", kv->n_blocks, KV_BLOCK);
    int b = kv->free_list[--kv->n_free];
    kv->ref[b] = 1;
    int used = kv->n_blocks - kv->n_free;
    if (used > kv->used_peak) kv->used_peak = used;
    return b;
}

int kvcache_len(const KvCache *kv, int slot) { return kv->len[slot]; }
void kvcache_reset(KvCache *kv, int slot) {
    release_from(kv, slot, 0);
    kv->len[slot] = 0;
}
const float *kvcache_logits(const KvCache *kv) { return kv->logits; }
size_t kvcache_bytes(const KvCache *kv) {
    return 2 * (size_t)kv->L * kv->n_blocks * KV_BLOCK * kv->kvd * dtype_size(kv->dt);
}
size_t kvcache_used_bytes(const KvCache *kv, bool peak) {
    size_t blocks = peak ? (size_t)kv->used_peak : (size_t)(kv->n_blocks - kv->n_free);
    return 2 * (size_t)kv->L * blocks * KV_BLOCK * kv->kvd * dtype_size(kv->dt);
}
DType kvcache_dtype(const KvCache *kv) { return kv->dt; }
void kvcache_reset_peak(KvCache *kv) { kv->used_peak = kv->n_blocks - kv->n_free; }
int kvcache_n_blocks(const KvCache *kv) { return kv->n_blocks; }
int kvcache_free_blocks(const KvCache *kv) { return kv->n_free; }
int kvcache_peak_blocks(const KvCache *kv) { return kv->used_peak; }
int kvcache_append_blocks(const KvCache *kv, int slot, int n) {
    const int *t = kv->table + (size_t)slot * kv->max_blocks;
    int len = kv->len[slot], need = 0;
    if (len % KV_BLOCK && kv->ref[t[len / KV_BLOCK]] > 1) need++;  // copy on write (kv_prepare)
    for (int i = blocks_for(len); i < blocks_for(len + n) && i < kv->max_blocks; i++) need += t[i] < 0;
    return need;
}

int kvcache_fork(KvCache *kv, int dst, int src, PailErr *err) { return kvcache_fork_prefix(kv, dst, src, kv->len[src], err); }

int kvcache_fork_prefix(KvCache *kv, int dst, int src, int ntok, PailErr *err) {
    if (ntok < 0 || ntok > kv->len[src])
        return err_set(err, PAIL_ERR_INVALID, "KV cache fork %d -> %d: %d tokens of %d", src, dst, ntok, kv->len[src]);
    int nb = blocks_for(ntok);
    if (dst == src) {  // truncate: the blocks past the prefix are let go
        release_from(kv, dst, nb);
        kv->len[dst] = ntok;
        return 0;
    }
    release_from(kv, dst, 0);
    int *d = slot_table(kv, dst), *s_ = slot_table(kv, src);
    for (int i = 0; i < nb; i++) {
        d[i] = s_[i];
        kv->ref[d[i]]++;
    }
    kv->len[dst] = ntok;
    return 0;
}

// Before slot s writes tokens len..len+n-1: its partly filled last block, if
// another slot holds it too, becomes a copy of its own; the blocks the new
// tokens reach are taken from the free list.
static int kv_prepare(KvCache *kv, int s, int n, PailErr *err) {
    int *t = slot_table(kv, s), len = kv->len[s];
    if (len % KV_BLOCK && kv->ref[t[len / KV_BLOCK]] > 1) {
        int old = t[len / KV_BLOCK], nb = block_take(kv, err);
        if (nb < 0) return -1;
        // a block's bytes copied as floats (KV_BLOCK is even: a 16-bit block is whole floats)
        size_t blk = (size_t)KV_BLOCK * kv->kvd * dtype_size(kv->dt), layer = (size_t)kv->n_blocks * blk;
        size_t nf = blk / sizeof(float);
        const BackendOps *o = kv->be->ops;
        char *k = kv->k, *v = kv->v;
        for (int l = 0; l < kv->L; l++) {
            size_t from = (size_t)l * layer + (size_t)old * blk, to = (size_t)l * layer + (size_t)nb * blk;
            if (o->copy(kv->be, (float *)(k + to), (const float *)(k + from), nf, err) < 0 ||
                o->copy(kv->be, (float *)(v + to), (const float *)(v + from), nf, err) < 0)
                return err_wrap(err, "KV cache slot %d: copying a shared block", s);
        }
        kv->ref[old]--;
        t[len / KV_BLOCK] = nb;
    }
    for (int i = blocks_for(len); i < blocks_for(len + n); i++) {
        if (t[i] >= 0) continue;  // taken by a call that failed later
        int b = block_take(kv, err);
        if (b < 0) return -1;
        t[i] = b;
    }
    return 0;
}

// The backend's part of an extend call (tf->kv set): the embedding, the
// layers over the cache, the head's logits for the npart selected rows.
static int extend_ops(Transformer *tf, float *out, int T, int npart, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, V = c->vocab_size;
    OP(embedding_forward, tf->resid[0], wm(tf, PARAM_EMBED, 0), wdt(tf, PARAM_EMBED, 0), tf->d_tokens, T, C, V);
    if (c->embedding_multiplier > 0 && c->embedding_multiplier != 1.0)
        OP(scale, tf->resid[0], (size_t)T * C, (float)c->embedding_multiplier);
    for (int l = 0; l < c->num_hidden_layers; l++)
        if (layer_forward(tf, l, &tf->acts[0], T, err) < 0) return -1;
    OP(gather_rows, tf->hsel, tf->resid[c->num_hidden_layers], tf->d_sel, npart, C);
    if (c->layer_norm)  // cohere
        OP(layernorm_forward, tf->xf, NULL, NULL, tf->hsel, wv(tf, PARAM_FINAL_NORM, 0), npart, C, 1,
           (float)c->rms_norm_eps);
    else
        OP(rmsnorm_forward, tf->xf, NULL, tf->hsel, wv(tf, PARAM_FINAL_NORM, 0), npart, C, (float)c->rms_norm_eps);
    float head_alpha = c->logits_scaling > 0 ? (float)(1.0 / c->logits_scaling) : 1.0f;  // granite: / logits_scaling
    if (c->logit_scale > 0) head_alpha = (float)c->logit_scale;                           // cohere: * logit_scale
    OP(matmul_forward, out, tf->xf, wm(tf, PARAM_LM_HEAD, 0), wdt(tf, PARAM_LM_HEAD, 0), NULL, npart, C, V, head_alpha,
       0.0f);
    if (c->final_logit_softcapping > 0)  // gemma2: the sampler sees transformers' capped logits
        OP(softcap, out, (size_t)npart * V, (float)c->final_logit_softcapping);
    return 0;
}

int transformer_extend(Transformer *tf, KvCache *kv, float *logits, const int *n_new, const int *tokens,
                       PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int V = c->vocab_size, T = 0, npart = 0;
    tf->have_forward = tf->have_expect = false;
    if (kv->L != c->num_hidden_layers || kv->kvd != c->num_key_value_heads * c->head_dim)
        return err_set(err, PAIL_ERR_INVALID, "KV cache was made for another model shape");
    if (kv->be != tf->be)
        return err_set(err, PAIL_ERR_INVALID, "KV cache is on %s, the model on %s", kv->be->desc, tf->be->desc);
    kv->cu_new[0] = 0;
    kv->fresh = true;
    for (int s = 0; s < kv->n_slots; s++) {
        if (n_new[s] > 0 && kv->len[s] > 0) kv->fresh = false;
        if (n_new[s] < 0 || kv->len[s] + n_new[s] > kv->max_ctx)
            return err_set(err, PAIL_ERR_INVALID, "KV cache slot %d: %d + %d tokens exceed its %d", s, kv->len[s],
                           n_new[s], kv->max_ctx);
        if (kv->len[s] + n_new[s] > tf->plan.max_pos)
            return err_set(err, PAIL_ERR_INVALID, "slot %d: position %d is past the RoPE table (%d)", s,
                           kv->len[s] + n_new[s] - 1, tf->plan.max_pos);
        // phi3's longrope: a sequence that grows past original_max_position_embeddings switches to
        // long_factor, and transformers then recomputes the whole cache with it
        // (Phi3ForCausalLM.prepare_inputs_for_generation); pail does not recompute: refused
        int omax = c->rope_original_max_position_embeddings;
        if (c->rope_scaling == ROPE_SCALING_LONGROPE && n_new[s] && kv->len[s] > 0 && kv->len[s] <= omax &&
            kv->len[s] + n_new[s] > omax)
            return err_set(err, PAIL_ERR_UNSUPPORTED, "slot %d: %d + %d tokens cross phi3's longrope "
                           "original_max_position_embeddings %d: its cache holds short_factor keys, and the "
                           "switch to long_factor (transformers recomputes the cache) is not supported", s,
                           kv->len[s], n_new[s], omax);
        kv->cu_new[s + 1] = kv->cu_new[s] + n_new[s];
        kv->new_len[s] = kv->len[s] + n_new[s];
        npart += n_new[s] > 0;
    }
    T = kv->cu_new[kv->n_slots];
    if (T < 1 || T > tf->plan.max_tokens)
        return err_set(err, PAIL_ERR_INVALID, "transformer_extend: %d new tokens, the plan holds 1..%d", T,
                       tf->plan.max_tokens);
    if (check_ids(tokens, T, V, "transformer_extend: embedding: token", err) < 0) return -1;
    // Each new token's position, and its physical row in a layer's pool.
    int n = 0;
    for (int s = 0; s < kv->n_slots; s++) {
        if (n_new[s] && kv_prepare(kv, s, n_new[s], err) < 0) return -1;
        const int *tb = slot_table(kv, s);
        for (int t = kv->cu_new[s]; t < kv->cu_new[s + 1]; t++) {
            int pos = tf->h_pos[t] = kv->len[s] + t - kv->cu_new[s];
            tf->rows[t] = tb[pos / KV_BLOCK] * KV_BLOCK + pos % KV_BLOCK;
        }
        if (n_new[s]) tf->sel[n++] = kv->cu_new[s + 1] - 1;  // the last new row of each participating slot
    }
    tf->T = T;
    OP(to_device, tf->d_tokens, tokens, (size_t)T * sizeof(int));
    if (c->rope_scaling == ROPE_SCALING_LONGROPE)  // a slot past original_max reads the long table
        for (int s = 0; s < kv->n_slots; s++)
            if (kv->new_len[s] > c->rope_original_max_position_embeddings)
                for (int t = kv->cu_new[s]; t < kv->cu_new[s + 1]; t++) tf->h_pos[t] += tf->plan.max_pos;
    OP(to_device, tf->d_pos, tf->h_pos, (size_t)T * sizeof(int));
    OP(to_device, tf->d_rows, tf->rows, (size_t)T * sizeof(int));
    OP(to_device, tf->d_sel, tf->sel, (size_t)npart * sizeof(int));
    OP(to_device, kv->d_cu_new, kv->cu_new, ((size_t)kv->n_slots + 1) * sizeof(int));
    OP(to_device, kv->d_new_len, kv->new_len, (size_t)kv->n_slots * sizeof(int));
    if (!tf->be->host_memory)
        OP(to_device, kv->d_table, kv->table, (size_t)kv->n_slots * kv->max_blocks * sizeof(int));
    // On a host backend the logits go straight into the caller's buffer; with
    // none they stay in the cache's (kvcache_logits).
    float *out = tf->be->host_memory && logits ? logits : kv->logits;
    tf->kv = kv;
    int rc;
    if (tf->be->team_ops && omp_get_max_threads() > 1) {
        // One OpenMP region for the whole step: every thread issues the same
        // ops in the same order and each op shares out its work on this team
        // (kernels/parallel.h), so the team wakes once a call, not ~20 times a
        // layer. Errors take the same path on every thread: the ops return -1
        // only from checks of their arguments, which every thread evaluates
        // alike before any barrier, so all threads leave at the same op.
        // Thread 0 writes the caller's err; the others their own copy.
        rc = 0;
#pragma omp parallel
        {
            PailErr own = {0};
            int first = omp_get_thread_num() == 0;
            int r = extend_ops(tf, out, T, npart, first ? err : &own);
            if (first) rc = r;
        }
    } else {
        rc = extend_ops(tf, out, T, npart, err);
    }
    tf->kv = NULL;
    if (rc < 0) return -1;
    if (logits && out != logits) OP(to_host, logits, out, (size_t)npart * V * sizeof(float));
    for (int s = 0; s < kv->n_slots; s++) kv->len[s] = kv->new_len[s];
    return 0;
}
