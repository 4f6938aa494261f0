// Decoder forward/backward over packed rows with unmerged LoRA (see
// transformer.h). Data flow per layer (HF's LlamaDecoderLayer / Qwen2 / Qwen3):
//   xn1 = rmsnorm(x); q,k,v = proj(xn1) (+bias, +LoRA); [qwen3: per-head rmsnorm
//   of q and k]; rope; att = causal GQA over each packed sequence;
//   h = x + o_proj(att); xn2 = rmsnorm(h); act = silu(gate(xn2)) * up(xn2);
//   x' = h + down(act).
// The backward walks it in reverse, accumulating LoRA grads (and base grads
// in full mode). All buffers come from one block planned in transformer_init.
#include "model/transformer.h"
#include "core/mem.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

typedef struct {      // one layer's saved activations, T rows each
    float *xn1, *rstd1;           // (T,C), (T)
    float *q, *k, *v;             // (T,H*D), (T,Hkv*D), (T,Hkv*D) after proj (+bias, +LoRA)
    float *qn, *kn;               // qwen3: after q_norm / k_norm (else equal to q, k)
    float *qrstd, *krstd;         // (T*H), (T*Hkv)
    float *qr, *kr;               // after RoPE
    float *att, *lse;             // (T,H*D), (T,H)
    float *h;                     // (T,C) residual after attention
    float *xn2, *rstd2;           // (T,C), (T)
    float *gate, *up, *act;       // (T,F)
    float *la[LORA_NMOD];         // (T,R) x A^T of each adapted module
} LayerActs;

struct KvCache {
    int L, n_slots, max_ctx, kvd;  // kvd = Hkv * D
    float *k, *v;                  // (L, n_slots, max_ctx, Hkv, D), owned
    int *len;                      // (n_slots) tokens cached per slot
    int *cu_new, *new_len;         // (n_slots + 1), (n_slots): scratch of one extend call
};

struct Transformer {
    const ModelWeights *w;        // borrowed
    ModelConfig cfg;
    TransformerPlan plan;
    const LoraLayout *lora;       // borrowed, NULL = none
    const float *lora_params;     // borrowed
    float lora_scale;
    bool lora_on;
    int nacts;                    // L (saved per layer) or 1 (recompute)
    LayerActs *acts;
    float **resid;                // (L+1) x (T,C): layer inputs, resid[L] = before the final norm
    float *xf, *rstdf;            // final norm out (T,C), (T)
    float *hsel, *lse_sel, *ent_sel, *dlogp_sel;  // rows with a target (Tsel,C), (Tsel) x3
    float *expect_sel;            // (Tsel,C): the head's p W / temperature, for a backward without recompute
    int *sel, *tsel;              // (T) selected row index, its target
    float *ws;                    // logprob workspace
    size_t ws_floats;
    float *cos_t, *sin_t, *inv_freq;
    // backward scratch
    float *dres, *dtmp, *dq, *dk, *dv, *datt, *dgate, *dup, *dact, *dla, *dhsel, *dxn;
    // last forward
    const int *tokens, *pos, *cu;
    KvCache *kv;                  // set during transformer_extend only
    int *tokens_copy, *pos_copy, *cu_copy;
    int T, nseq, Tsel;
    float temperature;
    bool have_forward;
    bool have_expect;             // the last forward wrote expect_sel
    float *block;
    size_t block_floats;
};

size_t transformer_bytes(const Transformer *tf) { return tf->block_floats * sizeof(float); }

// Bump allocator over the planned block (sizes computed by a first dry pass).
typedef struct { float *base; size_t used; } Bump;
static float *take(Bump *b, size_t n) {
    float *p = b->base ? b->base + b->used : NULL;
    b->used += (n + 15) & ~(size_t)15;  // 64-byte aligned pieces
    return p;
}

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
        for (int m = 0; m < LORA_NMOD && R > 0; m++) a->la[m] = take(b, T * R);
    }
    for (size_t l = 0; l <= L; l++) tf->resid[l] = take(b, T * C);
    tf->xf = take(b, T * C); tf->rstdf = take(b, T);
    tf->hsel = take(b, T * C); tf->lse_sel = take(b, T); tf->ent_sel = take(b, T); tf->dlogp_sel = take(b, T);
    // The head's workspace: vocab chunks of all rows, or (expectation path) blocks of full rows.
    size_t wsf = logprob_workspace_floats((int)T, tf->plan.vchunk), V = (size_t)c->vocab_size;
    tf->ws_floats = wsf > V ? wsf : V;
    tf->ws = take(b, tf->ws_floats);
    size_t P = (size_t)tf->plan.max_pos, D2 = (size_t)c->head_dim / 2;
    tf->cos_t = take(b, P * D2); tf->sin_t = take(b, P * D2); tf->inv_freq = take(b, D2);
    if (tf->plan.backward) {
        tf->dres = take(b, T * C); tf->dtmp = take(b, T * C); tf->dxn = take(b, T * C);
        tf->dq = take(b, T * HD); tf->dk = take(b, T * KD); tf->dv = take(b, T * KD); tf->datt = take(b, T * HD);
        tf->dgate = take(b, T * F); tf->dup = take(b, T * F); tf->dact = take(b, T * F);
        if (R > 0) tf->dla = take(b, T * R);
        tf->dhsel = take(b, T * C);
        if (!tf->plan.full) tf->expect_sel = take(b, T * C);  // the LoRA step's head (transformer_forward)
    }
}

int transformer_init(Transformer **out, const ModelWeights *w, const TransformerPlan *plan, PailErr *err) {
    *out = NULL;
    const ModelConfig *c = &w->cfg;
    if (plan->max_tokens < 1) return err_set(err, PAIL_ERR_INVALID, "transformer: token budget %d must be >= 1", plan->max_tokens);
    if (plan->lora_rank < 0 || plan->lora_rank > 4096)
        return err_set(err, PAIL_ERR_INVALID, "transformer: LoRA rank bound %d is not in [0, 4096]", plan->lora_rank);
    if (c->head_dim % 2) return err_set(err, PAIL_ERR_UNSUPPORTED, "transformer: head_dim %d is odd (RoPE needs pairs)", c->head_dim);
    Transformer *tf = calloc(1, sizeof *tf);
    if (!tf) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    tf->w = w;
    tf->cfg = *c;
    tf->plan = *plan;
    if (tf->plan.vchunk <= 0) tf->plan.vchunk = 4096;
    if (tf->plan.max_pos <= 0) tf->plan.max_pos = c->max_position_embeddings < 32768 ? c->max_position_embeddings : 32768;
    if (tf->plan.max_pos < 1) tf->plan.max_pos = 4096;
    // Saved activations per layer only when a backward will read them.
    tf->nacts = (plan->recompute || !plan->backward) ? 1 : c->num_hidden_layers;
    tf->acts = calloc((size_t)tf->nacts, sizeof *tf->acts);
    tf->resid = calloc((size_t)c->num_hidden_layers + 1, sizeof *tf->resid);
    tf->tokens_copy = malloc((size_t)plan->max_tokens * sizeof(int));
    tf->pos_copy = malloc((size_t)plan->max_tokens * sizeof(int));
    tf->cu_copy = malloc(((size_t)plan->max_tokens + 1) * sizeof(int));
    tf->sel = malloc((size_t)plan->max_tokens * sizeof(int));
    tf->tsel = malloc((size_t)plan->max_tokens * sizeof(int));
    Bump dry = {0};
    plan_memory(tf, &dry);
    tf->block_floats = dry.used;
    tf->block = mem_alloc_big(dry.used * sizeof(float));
    if (!tf->acts || !tf->resid || !tf->tokens_copy || !tf->pos_copy || !tf->cu_copy || !tf->sel || !tf->tsel ||
        !tf->block) {
        size_t mb = dry.used * sizeof(float) >> 20;
        transformer_free(tf);
        return err_set(err, PAIL_ERR_NOMEM,
                       "transformer: cannot allocate %zu MiB of activations for %d tokens (lower the token budget, "
                       "or use activation recomputation)", mb, plan->max_tokens);
    }
    Bump real = {tf->block, 0};
    plan_memory(tf, &real);
    RopeScaling rs = {0};
    if (c->rope_scaling == ROPE_SCALING_LLAMA3) {
        rs.factor = (float)c->rope_factor;
        rs.low_freq_factor = (float)c->rope_low_freq_factor;
        rs.high_freq_factor = (float)c->rope_high_freq_factor;
        rs.original_max_position = c->rope_original_max_position_embeddings;
    }
    rope_inv_freq(tf->inv_freq, c->head_dim, (float)c->rope_theta, &rs);
    rope_table_build(tf->cos_t, tf->sin_t, tf->inv_freq, tf->plan.max_pos, c->head_dim);
    *out = tf;
    return 0;
}

void transformer_free(Transformer *tf) {
    if (!tf) return;
    free(tf->block);
    free(tf->acts);
    free(tf->resid);
    free(tf->tokens_copy);
    free(tf->pos_copy);
    free(tf->cu_copy);
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

// y(T,out) (+)= x W^T + bias, then + s (x A^T) B^T when module m is adapted.
static void proj_forward(Transformer *tf, float *y, float *la, const float *x, const float *W, const float *bias,
                         int T, int in, int outd, int layer, LoraModule m, float beta) {
    const LoraSlot *s = tf->lora_on ? lora_slot(tf->lora, layer, m) : NULL;
    if (!s) {
        matmul_forward(y, x, W, bias, T, in, outd, 1.0f, beta);
        return;
    }
    const float *A = tf->lora_params + s->a_off, *B = tf->lora_params + s->b_off;
    matmul_forward_lora(y, la, x, W, bias, A, B, T, in, outd, tf->lora->cfg.rank, tf->lora_scale, beta);
}

// dx (=, or += when dx_beta = 1) dy W (+ LoRA path); dW, dbias += in full mode; dA, dB += into lora_grads.
static void proj_backward(Transformer *tf, float *dx, float *lora_grads, float *base_grads, ModelParamId wid,
                          ModelParamId bid, const float *dy, const float *x, const float *la, const float *W, int T,
                          int in, int outd, int layer, LoraModule m, float dx_beta) {
    float *dW = NULL, *db = NULL;
    if (base_grads && tf->plan.full) {
        dW = base_grads + tf->w->offsets[wid] + (size_t)layer * tf->w->specs[wid].numel;
        if (bid != PARAM_COUNT && tf->w->specs[bid].present)
            db = base_grads + tf->w->offsets[bid] + (size_t)layer * tf->w->specs[bid].numel;
    }
    matmul_backward(dx, dW, db, dy, x, W, T, in, outd, 1.0f, dx_beta);
    const LoraSlot *s = tf->lora_on ? lora_slot(tf->lora, layer, m) : NULL;
    if (!s) return;
    const float *A = tf->lora_params + s->a_off, *B = tf->lora_params + s->b_off;
    float *dA = lora_grads ? lora_grads + s->a_off : NULL, *dB = lora_grads ? lora_grads + s->b_off : NULL;
    int R = tf->lora->cfg.rank;
    // dla = s dy B, dB += s dy^T la; then dx += dla A, dA += dla^T x.
    matmul_backward(tf->dla, dB, NULL, dy, la, B, T, R, outd, tf->lora_scale, 0.0f);
    matmul_backward(dx, dA, NULL, tf->dla, x, A, T, in, R, 1.0f, 1.0f);
}

static float *wl(const Transformer *tf, ModelParamId id, int layer) {
    return tf->w->specs[id].present ? model_weights_tensor(tf->w, id, layer) : NULL;
}

static void layer_forward(Transformer *tf, int l, LayerActs *a, int T) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D;
    float eps = (float)c->rms_norm_eps;
    const float *x = tf->resid[l];
    rmsnorm_forward(a->xn1, a->rstd1, x, wl(tf, PARAM_ATTN_NORM, l), T, C, eps);
    proj_forward(tf, a->q, a->la[LORA_Q], a->xn1, wl(tf, PARAM_WQ, l), wl(tf, PARAM_BQ, l), T, C, HD, l, LORA_Q, 0);
    proj_forward(tf, a->k, a->la[LORA_K], a->xn1, wl(tf, PARAM_WK, l), wl(tf, PARAM_BK, l), T, C, KD, l, LORA_K, 0);
    proj_forward(tf, a->v, a->la[LORA_V], a->xn1, wl(tf, PARAM_WV, l), wl(tf, PARAM_BV, l), T, C, KD, l, LORA_V, 0);
    const float *qin = a->q, *kin = a->k;
    if (c->has_qk_norm) {
        rmsnorm_forward(a->qn, a->qrstd, a->q, wl(tf, PARAM_Q_NORM, l), T * H, D, eps);
        rmsnorm_forward(a->kn, a->krstd, a->k, wl(tf, PARAM_K_NORM, l), T * Hk, D, eps);
        qin = a->qn;
        kin = a->kn;
    }
    rope_forward(a->qr, qin, tf->pos, tf->cos_t, tf->sin_t, T, H, D);
    rope_forward(a->kr, kin, tf->pos, tf->cos_t, tf->sin_t, T, Hk, D);
    if (tf->kv) {  // generation: append this call's K, V to each slot's cache, attend over the cache
        KvCache *kv = tf->kv;
        size_t slot_stride = (size_t)kv->max_ctx * KD;
        float *kc = kv->k + (size_t)l * kv->n_slots * slot_stride, *vc = kv->v + (size_t)l * kv->n_slots * slot_stride;
        for (int s = 0; s < kv->n_slots; s++)
            for (int t = kv->cu_new[s]; t < kv->cu_new[s + 1]; t++) {
                size_t at = (size_t)s * slot_stride + (size_t)(kv->len[s] + t - kv->cu_new[s]) * KD;
                memcpy(kc + at, a->kr + (size_t)t * KD, (size_t)KD * sizeof(float));
                memcpy(vc + at, a->v + (size_t)t * KD, (size_t)KD * sizeof(float));
            }
        attention_decode_forward(a->att, a->qr, kc, vc, kv->cu_new, kv->new_len, kv->n_slots, kv->max_ctx, H, Hk, D);
    } else {
        attention_forward(a->att, a->lse, a->qr, a->kr, a->v, tf->cu, tf->nseq, T, H, Hk, D);
    }
    memcpy(a->h, x, (size_t)T * C * sizeof(float));
    proj_forward(tf, a->h, a->la[LORA_O], a->att, wl(tf, PARAM_WO, l), wl(tf, PARAM_BO, l), T, HD, C, l, LORA_O, 1);
    rmsnorm_forward(a->xn2, a->rstd2, a->h, wl(tf, PARAM_MLP_NORM, l), T, C, eps);
    proj_forward(tf, a->gate, a->la[LORA_GATE], a->xn2, wl(tf, PARAM_W_GATE, l), NULL, T, C, F, l, LORA_GATE, 0);
    proj_forward(tf, a->up, a->la[LORA_UP], a->xn2, wl(tf, PARAM_W_UP, l), NULL, T, C, F, l, LORA_UP, 0);
    swiglu_forward(a->act, a->gate, a->up, (size_t)T * F);
    float *y = tf->resid[l + 1];
    memcpy(y, a->h, (size_t)T * C * sizeof(float));
    proj_forward(tf, y, a->la[LORA_DOWN], a->act, wl(tf, PARAM_W_DOWN, l), NULL, T, F, C, l, LORA_DOWN, 1);
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
    memcpy(tf->tokens_copy, tokens, (size_t)T * sizeof(int));
    memcpy(tf->pos_copy, pos, (size_t)T * sizeof(int));
    memcpy(tf->cu_copy, cu_seqlens, ((size_t)nseq + 1) * sizeof(int));
    tf->tokens = tf->tokens_copy;
    tf->pos = tf->pos_copy;
    tf->cu = tf->cu_copy;
    tf->T = T;
    tf->nseq = nseq;
    tf->temperature = temperature;
    int C = c->hidden_size, V = c->vocab_size;
    if (embedding_forward(tf->resid[0], tf->w->p.embed_tokens, tokens, T, C, V, err) < 0)
        return err_wrap(err, "transformer");
    for (int l = 0; l < c->num_hidden_layers; l++)
        layer_forward(tf, l, &tf->acts[tf->nacts == 1 ? 0 : l], T);
    rmsnorm_forward(tf->xf, tf->rstdf, tf->resid[c->num_hidden_layers], tf->w->p.final_norm, T, C,
                    (float)c->rms_norm_eps);
    // Only rows with a target go through the LM head.
    int n = 0;
    for (int t = 0; t < T; t++) {
        logp[t] = 0;
        if (entropy) entropy[t] = 0;
        if (targets[t] < 0) continue;
        tf->sel[n] = t;
        tf->tsel[n] = targets[t];
        memcpy(tf->hsel + (size_t)n * C, tf->xf + (size_t)t * C, (size_t)C * sizeof(float));
        n++;
    }
    tf->Tsel = n;
    if (n > 0) {
        float *lp = tf->dlogp_sel;  // reused as the compact logp buffer
        // A LoRA step's backward (frozen head) needs only sum_j p_j W_j per row:
        // computed here, it spares the backward a second pass over the vocabulary.
        bool expect = tf->plan.backward && !tf->plan.full && tf->lora_on;
        int rc = expect ? logprob_forward_expect(lp, entropy ? tf->ent_sel : NULL, tf->lse_sel, tf->expect_sel,
                                                 tf->hsel, tf->w->p.lm_head, tf->tsel, n, C, V, temperature, tf->ws,
                                                 tf->ws_floats, err)
                        : logprob_forward(lp, entropy ? tf->ent_sel : NULL, tf->lse_sel, tf->hsel, tf->w->p.lm_head,
                                          tf->tsel, n, C, V, temperature, tf->ws, tf->plan.vchunk, err);
        if (rc < 0) return err_wrap(err, "transformer");
        tf->have_expect = expect;
        for (int i = 0; i < n; i++) {
            logp[tf->sel[i]] = lp[i];
            if (entropy) entropy[tf->sel[i]] = tf->ent_sel[i];
        }
    }
    tf->have_forward = true;
    return 0;
}

static void layer_backward(Transformer *tf, int l, LayerActs *a, int T, float *lg, float *bg) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, Hk = c->num_key_value_heads,
        D = c->head_dim, HD = H * D, KD = Hk * D;
    bool full = bg && tf->plan.full;
    const float *x = tf->resid[l];
    float *dres = tf->dres;  // d resid[l+1] on entry, d resid[l] on exit
    // MLP: resid[l+1] = h + down(act)
    proj_backward(tf, tf->dact, lg, bg, PARAM_W_DOWN, PARAM_COUNT, dres, a->act, a->la[LORA_DOWN],
                  wl(tf, PARAM_W_DOWN, l), T, F, C, l, LORA_DOWN, 0);
    swiglu_backward(tf->dgate, tf->dup, tf->dact, a->gate, a->up, (size_t)T * F);
    proj_backward(tf, tf->dxn, lg, bg, PARAM_W_GATE, PARAM_COUNT, tf->dgate, a->xn2, a->la[LORA_GATE],
                  wl(tf, PARAM_W_GATE, l), T, C, F, l, LORA_GATE, 0);
    proj_backward(tf, tf->dxn, lg, bg, PARAM_W_UP, PARAM_COUNT, tf->dup, a->xn2, a->la[LORA_UP],
                  wl(tf, PARAM_W_UP, l), T, C, F, l, LORA_UP, 1);
    float *dnw = full ? bg + tf->w->offsets[PARAM_MLP_NORM] + (size_t)l * C : NULL;
    rmsnorm_backward(tf->dtmp, dnw, tf->dxn, a->h, wl(tf, PARAM_MLP_NORM, l), a->rstd2, T, C);
    for (size_t i = 0; i < (size_t)T * C; i++) dres[i] += tf->dtmp[i];  // now d h
    // Attention: h = x + o_proj(att)
    proj_backward(tf, tf->datt, lg, bg, PARAM_WO, PARAM_BO, dres, a->att, a->la[LORA_O], wl(tf, PARAM_WO, l), T,
                  HD, C, l, LORA_O, 0);
    attention_backward(tf->dq, tf->dk, tf->dv, tf->datt, a->qr, a->kr, a->v, a->att, a->lse, tf->cu, tf->nseq, T, H,
                       Hk, D);
    rope_backward(tf->dq, tf->dq, tf->pos, tf->cos_t, tf->sin_t, T, H, D);
    rope_backward(tf->dk, tf->dk, tf->pos, tf->cos_t, tf->sin_t, T, Hk, D);
    if (c->has_qk_norm) {
        float *dqw = full ? bg + tf->w->offsets[PARAM_Q_NORM] + (size_t)l * D : NULL;
        float *dkw = full ? bg + tf->w->offsets[PARAM_K_NORM] + (size_t)l * D : NULL;
        // in place: dx of the norm over the pre-norm q (datt is free now)
        rmsnorm_backward(tf->datt, dqw, tf->dq, a->q, wl(tf, PARAM_Q_NORM, l), a->qrstd, T * H, D);
        memcpy(tf->dq, tf->datt, (size_t)T * HD * sizeof(float));
        rmsnorm_backward(tf->datt, dkw, tf->dk, a->k, wl(tf, PARAM_K_NORM, l), a->krstd, T * Hk, D);
        memcpy(tf->dk, tf->datt, (size_t)T * KD * sizeof(float));
    }
    proj_backward(tf, tf->dxn, lg, bg, PARAM_WQ, PARAM_BQ, tf->dq, a->xn1, a->la[LORA_Q], wl(tf, PARAM_WQ, l), T, C,
                  HD, l, LORA_Q, 0);
    proj_backward(tf, tf->dxn, lg, bg, PARAM_WK, PARAM_BK, tf->dk, a->xn1, a->la[LORA_K], wl(tf, PARAM_WK, l), T, C,
                  KD, l, LORA_K, 1);
    proj_backward(tf, tf->dxn, lg, bg, PARAM_WV, PARAM_BV, tf->dv, a->xn1, a->la[LORA_V], wl(tf, PARAM_WV, l), T, C,
                  KD, l, LORA_V, 1);
    dnw = full ? bg + tf->w->offsets[PARAM_ATTN_NORM] + (size_t)l * C : NULL;
    rmsnorm_backward(tf->dtmp, dnw, tf->dxn, x, wl(tf, PARAM_ATTN_NORM, l), a->rstd1, T, C);
    for (size_t i = 0; i < (size_t)T * C; i++) dres[i] += tf->dtmp[i];  // now d resid[l]
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
    for (int i = 0; i < tf->Tsel; i++) tf->dlogp_sel[i] = dlogp[tf->sel[i]];
    float *dlm = full ? base_grads + tf->w->offsets[PARAM_LM_HEAD] : NULL;
    if (full && c->tie_word_embeddings) dlm = base_grads + tf->w->offsets[PARAM_EMBED];
    memset(tf->dxn, 0, (size_t)T * C * sizeof(float));
    if (tf->Tsel > 0) {
        if (tf->have_expect)  // a LoRA plan: no head gradient (dlm) can be asked for
            logprob_backward_expect(tf->dhsel, tf->dlogp_sel, tf->expect_sel, tf->w->p.lm_head, tf->tsel, tf->Tsel, C,
                                    tf->temperature);
        else
            logprob_backward(tf->dhsel, dlm, tf->dlogp_sel, NULL, tf->hsel, tf->w->p.lm_head, tf->tsel, tf->lse_sel,
                             NULL, tf->Tsel, C, V, tf->temperature, tf->ws, tf->plan.vchunk);
        for (int i = 0; i < tf->Tsel; i++)
            memcpy(tf->dxn + (size_t)tf->sel[i] * C, tf->dhsel + (size_t)i * C, (size_t)C * sizeof(float));
    }
    float *dfw = full ? base_grads + tf->w->offsets[PARAM_FINAL_NORM] : NULL;
    rmsnorm_backward(tf->dres, dfw, tf->dxn, tf->resid[L], tf->w->p.final_norm, tf->rstdf, T, C);
    for (int l = L - 1; l >= 0; l--) {
        LayerActs *a = &tf->acts[tf->nacts == 1 ? 0 : l];
        if (tf->nacts == 1 && l != L - 1) layer_forward(tf, l, a, T);  // recompute this layer's activations
        layer_backward(tf, l, a, T, lora_grads, base_grads);
    }
    if (full) embedding_backward(base_grads + tf->w->offsets[PARAM_EMBED], tf->dres, tf->tokens, T, C);
    return 0;
}

int kvcache_init(KvCache **out, const ModelConfig *cfg, int n_slots, int max_ctx, PailErr *err) {
    *out = NULL;
    if (n_slots < 1 || max_ctx < 1)
        return err_set(err, PAIL_ERR_INVALID, "KV cache: %d slots of %d tokens", n_slots, max_ctx);
    KvCache *kv = calloc(1, sizeof *kv);
    if (!kv) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    kv->L = cfg->num_hidden_layers;
    kv->n_slots = n_slots;
    kv->max_ctx = max_ctx;
    kv->kvd = cfg->num_key_value_heads * cfg->head_dim;
    size_t n = (size_t)kv->L * n_slots * max_ctx * kv->kvd;
    kv->k = mem_alloc_big(n * sizeof(float));
    kv->v = mem_alloc_big(n * sizeof(float));
    kv->len = calloc((size_t)n_slots, sizeof(int));
    kv->cu_new = calloc((size_t)n_slots + 1, sizeof(int));
    kv->new_len = calloc((size_t)n_slots, sizeof(int));
    if (!kv->k || !kv->v || !kv->len || !kv->cu_new || !kv->new_len) {
        kvcache_free(kv);
        return err_set(err, PAIL_ERR_NOMEM, "KV cache: cannot allocate %zu MiB for %d slots x %d tokens",
                       2 * n * sizeof(float) >> 20, n_slots, max_ctx);
    }
    *out = kv;
    return 0;
}

void kvcache_free(KvCache *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv->len);
    free(kv->cu_new);
    free(kv->new_len);
    free(kv);
}

int kvcache_len(const KvCache *kv, int slot) { return kv->len[slot]; }
void kvcache_reset(KvCache *kv, int slot) { kv->len[slot] = 0; }
size_t kvcache_bytes(const KvCache *kv) {
    return 2 * (size_t)kv->L * kv->n_slots * kv->max_ctx * kv->kvd * sizeof(float);
}

void kvcache_fork(KvCache *kv, int dst, int src) {
    if (dst == src) return;
    size_t stride = (size_t)kv->max_ctx * kv->kvd, n = (size_t)kv->len[src] * kv->kvd;
    for (int l = 0; l < kv->L; l++) {
        size_t base = (size_t)l * kv->n_slots * stride;
        memcpy(kv->k + base + (size_t)dst * stride, kv->k + base + (size_t)src * stride, n * sizeof(float));
        memcpy(kv->v + base + (size_t)dst * stride, kv->v + base + (size_t)src * stride, n * sizeof(float));
    }
    kv->len[dst] = kv->len[src];
}

int transformer_extend(Transformer *tf, KvCache *kv, float *logits, const int *n_new, const int *tokens,
                       PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, V = c->vocab_size, T = 0, npart = 0;
    tf->have_forward = tf->have_expect = false;
    if (kv->L != c->num_hidden_layers || kv->kvd != c->num_key_value_heads * c->head_dim)
        return err_set(err, PAIL_ERR_INVALID, "KV cache was made for another model shape");
    kv->cu_new[0] = 0;
    for (int s = 0; s < kv->n_slots; s++) {
        if (n_new[s] < 0 || kv->len[s] + n_new[s] > kv->max_ctx)
            return err_set(err, PAIL_ERR_INVALID, "KV cache slot %d: %d + %d tokens exceed its %d", s, kv->len[s],
                           n_new[s], kv->max_ctx);
        if (kv->len[s] + n_new[s] > tf->plan.max_pos)
            return err_set(err, PAIL_ERR_INVALID, "slot %d: position %d is past the RoPE table (%d)", s,
                           kv->len[s] + n_new[s] - 1, tf->plan.max_pos);
        kv->cu_new[s + 1] = kv->cu_new[s] + n_new[s];
        kv->new_len[s] = kv->len[s] + n_new[s];
        npart += n_new[s] > 0;
    }
    T = kv->cu_new[kv->n_slots];
    if (T < 1 || T > tf->plan.max_tokens)
        return err_set(err, PAIL_ERR_INVALID, "transformer_extend: %d new tokens, the plan holds 1..%d", T,
                       tf->plan.max_tokens);
    for (int s = 0; s < kv->n_slots; s++)
        for (int t = kv->cu_new[s]; t < kv->cu_new[s + 1]; t++) tf->pos_copy[t] = kv->len[s] + t - kv->cu_new[s];
    memcpy(tf->tokens_copy, tokens, (size_t)T * sizeof(int));
    tf->tokens = tf->tokens_copy;
    tf->pos = tf->pos_copy;
    tf->T = T;
    if (embedding_forward(tf->resid[0], tf->w->p.embed_tokens, tokens, T, C, V, err) < 0)
        return err_wrap(err, "transformer_extend");
    tf->kv = kv;
    for (int l = 0; l < c->num_hidden_layers; l++) layer_forward(tf, l, &tf->acts[0], T);
    tf->kv = NULL;
    // The last new row of each participating slot through the final norm and the head.
    int n = 0;
    for (int s = 0; s < kv->n_slots; s++) {
        if (!n_new[s]) continue;
        memcpy(tf->hsel + (size_t)n * C, tf->resid[c->num_hidden_layers] + (size_t)(kv->cu_new[s + 1] - 1) * C,
               (size_t)C * sizeof(float));
        n++;
    }
    rmsnorm_forward(tf->xf, NULL, tf->hsel, tf->w->p.final_norm, npart, C, (float)c->rms_norm_eps);
    matmul_forward(logits, tf->xf, tf->w->p.lm_head, NULL, npart, C, V, 1.0f, 0.0f);
    for (int s = 0; s < kv->n_slots; s++) kv->len[s] = kv->new_len[s];
    return 0;
}
