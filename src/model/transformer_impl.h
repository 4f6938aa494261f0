// The transformer's insides (src/model/transformer.c), shared with the files that
// compute parts of a layer for it (src/model/moe_mlp.c): the saved activations,
// the paged cache, the Transformer itself, the backend-op macro, the planner's
// bump allocator and the weight accessors. Not for other components: they use
// transformer.h.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "model/transformer.h"

// One backend op; a failure returns -1 from the enclosing function with err set.
#define OP(name, ...)                                                   \
    do {                                                                \
        if (tf->be->ops->name(tf->be, __VA_ARGS__, err) < 0) return -1; \
    } while (0)

typedef struct {                   // one layer's saved activations, T rows each
    float *xn1, *rstd1;            // (T,C), (T)
    float *q, *k, *v;              // (T,H*D), (T,Hkv*D), (T,Hkv*D) after proj (+bias, +LoRA)
    float *qn, *kn;                // qwen3: after q_norm / k_norm (else equal to q, k)
    float *qrstd, *krstd;          // (T*H), (T*Hkv)
    float *qr, *kr;                // after RoPE
    float *att, *lse;              // (T,H*D), (T,H)
    float *h;                      // (T,C) residual after attention
    float *xn2, *rstd2;            // (T,C), (T)
    float *gate, *up, *act;        // (T,F)
    float *la[LORA_NMOD];          // (T,R) x A^T of each adapted module
    float *mean1, *qmean, *kmean;  // cohere's LayerNorms: (T), (T*H), (T*Hkv) row means (NULL elsewhere)
    // gemma (sandwich norms): the sub-blocks' outputs before their norms, and those norms' rstd
    float *o, *orstd;  // (T,C) o_proj(att), (T)
    float *m, *mrstd;  // (T,C) down(act), (T)
    // mixture of experts (moe_mlp.c; NULL elsewhere); backend memory but h_offs. TK = T * K rows are
    // the tokens' choices grouped by expert (kernels.h moe_group), expert e's at h_offs[e] ..
    float *rlog, *rw;                 // (T,E) router logits, (T,K) the chosen experts' weights
    int *ridx, *gtok, *gpos, *goffs;  // (T,K) chosen experts, (TK) grouped row's token, (T,K) grouped row
                                      // of each choice, (E+1) expert offsets
    int *h_offs;                      // (E+1) host copy of goffs (sizes the per-expert products)
    float *eg, *eu, *eh;              // (TK,Fe) the experts' gate and up rows, (TK,C) their down outputs
    float *sg, *so;                   // qwen2_moe: (T) shared expert gate logits, (T,C) the shared expert's output
} LayerActs;

// A paged cache: each layer's K and V are pools of KV_BLOCK-token blocks, and
// a slot's tokens live in the blocks its row of the block table names. Blocks
// are counted by reference: a fork shares the source's blocks (a group's
// prompt is stored once for its G samples), a slot about to write into a
// block that another slot also holds gets its own copy of that one block
// first (copy on write: at most the prompt's last, partial block), and a
// block no slot holds goes back to the free list.
struct KvCache {
    Backend *be;                   // borrowed: where the pools and the d_ arrays live
    int L, n_slots, max_ctx, kvd;  // kvd = Hkv * D
    int n_blocks, max_blocks;      // pool blocks; blocks a slot may hold (ceil(max_ctx / KV_BLOCK))
    DType dt;                      // the pools' elements: DT_F32, DT_BF16 or DT_F16 (kvcache_init_on)
    void *k, *v;                   // (L, n_blocks, KV_BLOCK, Hkv, D) of dt, backend memory, owned
    float *logits;                 // (n_slots, V) backend memory, owned: an extend's logits left on the backend
    int V;
    int *len;                   // (n_slots) host: tokens cached per slot
    int *table;                 // (n_slots, max_blocks) host: physical block of each logical one (-1: none)
    int *ref;                   // (n_blocks) host: slots holding each block
    int *free_list, n_free;     // (n_blocks) host: a stack of blocks no slot holds
    int used_peak;              // most blocks held at once since init (kvcache_used_peak)
    int *cu_new, *new_len;      // (n_slots + 1), (n_slots) host: scratch of one extend call
    bool fresh;                 // this extend call: every slot with new tokens starts empty. A
                                // fresh prompt's queries see only its own new rows, so the
                                // packed causal forward (tiles through sgemm) computes its
                                // attention; the decode op would walk the cache a row at a
                                // time (31% of a 512-token prefill of SmolLM2-135M)
    int *d_cu_new, *d_new_len;  // the same in backend memory (== the host ones on a host backend)
    int *d_table;               // the block table in backend memory (== table on a host backend)
};

struct Transformer {
    const ModelWeights *w;  // borrowed
    Backend *be;            // borrowed (the plan's, or the CPU)
    const char *wbase;      // the weights' block in backend memory (w->memory on a host backend)
    void *wdev;             // owned device copy of w->memory (NULL on a host backend)
    ModelConfig cfg;
    TransformerPlan plan;
    const LoraLayout *lora;    // borrowed, NULL = none
    const float *lora_params;  // borrowed
    float lora_scale;
    bool lora_on;
    int nacts;  // L (saved per layer) or 1 (recompute)
    LayerActs *acts;
    float **resid;                                // (L+1) x (T,C): layer inputs, resid[L] = before the final norm
    float *xf, *rstdf;                            // final norm out (T,C), (T)
    float *hsel, *lse_sel, *ent_sel, *dlogp_sel;  // rows with a target (Tsel,C), (Tsel) x3
    float *expect_sel;                            // (Tsel,C): the head's p W / temperature, for a backward without recompute
    int *sel, *tsel;                              // (T) host: selected row index, its target
    int *d_tokens, *d_pos, *d_cu;                 // (T), (T), (T+1) in backend memory
    int *d_sel, *d_tsel, *d_rows;                 // (T) in backend memory: selected rows, their targets, KV destination rows
    int *rows;                                    // (T) host: KV destination rows of one extend call
    float *h_lp, *h_ent;                          // (T) host copies of the compact logp / entropy (device backends)
    float *ws;                                    // logprob workspace
    size_t ws_floats;
    float *cos_t, *sin_t, *inv_freq;
    // backward scratch
    float *dres, *dtmp, *dq, *dk, *dv, *datt, *dgate, *dup, *dact, *dla, *dhsel, *dxn;
    // last forward (its tokens, positions and offsets are the d_ arrays)
    KvCache *kv;  // set during transformer_extend only
    int *h_pos;   // (T) host: positions of one extend call's new tokens
    int T, nseq, Tsel;
    float temperature;
    bool have_forward;
    bool have_expect;  // the last forward wrote expect_sel
    // gemma: every norm vector as 1 + w (gemma_norm_refresh), what wv() gives for a norm family;
    // the sliding layers' RoPE table (gemma3_text's rope_local_theta)
    float *gnorm;  // gemma norm families back to back, gn_off[id] floats in (NULL elsewhere)
    size_t gn_off[PARAM_COUNT];
    bool gn_has[PARAM_COUNT];
    float *gones;  // (the largest norm family) ones, added to w
    size_t gones_n;
    float *cos_l, *sin_l, *inv_l;  // (P, D/2) x2, (D/2); NULL: one table
    float *block;                  // backend memory, owned
    size_t block_floats;
    float *meanf;  // (T) cohere: the final LayerNorm's row means (NULL elsewhere)
    // mixture of experts (moe_mlp.c): scratch shared by the layers (TK = T * K rows)
    float *moe_out, *xg, *eact;                                         // (T,C) the routed MLP's output, (TK,C) grouped inputs, (TK,Fe) activations
    float *deh, *drw, *deg, *deu, *deact, *drlog, *ds, *dsg, *dla_moe;  // backward: (TK,C) (also the grouped dx),
                                                                        // (T,K), (TK,Fe) x3, (T,E), (T,C), (T), (TK,R)
    int *h_offs;                                                        // (nacts, E+1) host: every LayerActs' h_offs
};

// Bump allocator over the planned block (sizes computed by a first dry pass).
typedef struct {
    float *base;
    size_t used;
} Bump;
static inline float *take(Bump *b, size_t n) {
    float *p = b->base ? b->base + b->used : NULL;
    b->used += (n + 15) & ~(size_t)15;  // 64-byte aligned pieces
    return p;
}

// Family id at layer in backend memory (NULL when this config has none): a
// matrix in its storage dtype (tf->w->dtype[id]), a vector (norm, bias) as fp32.
static inline const void *wm(const Transformer *tf, ModelParamId id, int layer) {
    if (id == PARAM_LM_HEAD && tf->cfg.tie_word_embeddings) id = PARAM_EMBED;
    if (!tf->w->specs[id].present && !model_weights_tensor(tf->w, id, layer)) return NULL;  // phi3's views
    return tf->wbase + ((const char *)model_weights_tensor(tf->w, id, layer) - (const char *)tf->w->memory);
}
static inline const float *wv(const Transformer *tf, ModelParamId id, int layer) {
    if (tf->gnorm && tf->gn_has[id])  // gemma: the (1 + w) copy
        return tf->gnorm + tf->gn_off[id] + (size_t)layer * tf->w->specs[id].numel;
    return wm(tf, id, layer);
}
static inline DType wdt(const Transformer *tf, ModelParamId id, int layer) { return model_weights_dtype(tf->w, id, layer); }

// A (LoRA-)adapted projection of family wid at layer (transformer.c): y (+)= x W^T + bias (+ LoRA),
// and its backward (dx written, or added with dx_beta 1; LoRA / base grads accumulated).
int proj_forward(Transformer *tf, float *y, float *la, const float *x, ModelParamId wid, const float *bias, int T,
                 int in, int outd, int layer, LoraModule m, float beta, PailErr *err);
int proj_backward(Transformer *tf, float *dx, float *lora_grads, float *base_grads, ModelParamId wid,
                  ModelParamId bid, const float *dy, const float *x, const float *la, int T, int in, int outd,
                  int layer, LoraModule m, float dx_beta, PailErr *err);

// mixture of experts (moe_mlp.c): the routed MLP of layer l (+ qwen2_moe's gated shared expert)
// planned into a's fields (and the shared scratch, once: l == 0) ...
void moe_plan(Transformer *tf, LayerActs *a, Bump *b, bool first);
// The expert modules' la rows (T * K) a layer plans (0 for a dense model).
size_t moe_la_rows(const ModelConfig *c, size_t T);
// ... out (T,C) = moe(xin) (written; out may not alias xin) ...
int moe_mlp_forward(Transformer *tf, int l, LayerActs *a, int T, const float *xin, float *out, PailErr *err);
// ... and its backward: dxin (T,C) written from dy (T,C); LoRA grads into lg, base grads into bg (full).
int moe_mlp_backward(Transformer *tf, int l, LayerActs *a, int T, const float *dy, const float *xin, float *dxin,
                     float *lg, float *bg, PailErr *err);
