// The decoder's forward and backward over packed rows, with LoRA applied
// unmerged: per-token log-probabilities of given targets (the LM head fused
// with a streaming log-sum-exp, never a (T, V) tensor), and gradients of a loss
// given d logp / d params to every layer's LoRA A and B (base frozen) or, in
// full mode, to every base weight. Memory for one plan (token budget) is
// allocated once by transformer_init; nothing is allocated in a step.
// Generation appends tokens to per-slot KV caches (transformer_extend). The ops
// run on the plan's backend (kernels/backend.h: the CPU, or CUDA with make
// CUDA=1): activations, KV caches and the adapter and gradient arrays given to
// it live in that backend's memory; the token, position, target and logp /
// logits arrays of these calls are host memory.
// Shapes: T tokens in a packed row, C hidden, H heads, Hkv kv heads, D head dim,
// F ffn, V vocab, L layers, R LoRA rank.
#pragma once
#include <stdbool.h>
#include "lora/lora.h"
#include "backend.h"
#include "model/weights.h"

// The most positions a RoPE table holds by default (the start-up checks refuse
// limits past it, src/rollout/preflight.c).
#define TRANSFORMER_ROPE_MAX 32768

typedef struct {
    int max_tokens;   // T budget of one forward (the trainer's --token-budget)
    bool backward;    // keep the activations the backward needs
    bool full;        // gradients for every base weight (full fine-tuning)
    bool recompute;   // keep only layer inputs; recompute each layer in the backward
    int vchunk;       // vocabulary chunk of the fused LM head (0: 4096; at most V)
    int max_pos;      // RoPE table size (0: min(max_position_embeddings, TRANSFORMER_ROPE_MAX))
    int lora_rank;    // highest LoRA rank transformer_set_lora accepts (0: no LoRA buffers, no adapter)
    Backend *backend; // where it runs (borrowed; NULL: the CPU)
} TransformerPlan;

typedef struct Transformer Transformer;

// Plans memory for w's shape; w, and later the adapter, are borrowed.
int transformer_init(Transformer **out, const ModelWeights *w, const TransformerPlan *plan, PailErr *err);
void transformer_free(Transformer *tf);
size_t transformer_bytes(const Transformer *tf);  // activation memory planned
Backend *transformer_backend(const Transformer *tf);  // the backend it runs on (borrowed)
// The same figure for a config and a plan, computed by the planner's dry pass
// without allocating (the memory plan printed before anything is).
size_t transformer_plan_bytes(const ModelConfig *cfg, const TransformerPlan *plan);
// Attaches an adapter (layout for w's config; params borrowed, may change
// between calls); its rank must be at most the plan's lora_rank. NULL detaches. transformer_lora_enable toggles it without
// detaching (the KL reference is the base model: same weights, LoRA off).
int transformer_set_lora(Transformer *tf, const LoraLayout *layout, const float *params, PailErr *err);
void transformer_lora_enable(Transformer *tf, bool on);

// Forward over T packed tokens: sequence s is rows cu_seqlens[s]..cu_seqlens[s+1]-1
// (its tokens at positions pos[t], usually 0..len-1). For every row with
// targets[t] >= 0, logp[t] = log p(targets[t] | tokens up to t) at the given
// temperature (logits / temperature); rows with targets[t] < 0 get 0 and cost
// no LM-head work. entropy (may be NULL) likewise. Keeps what the backward
// needs when the plan has backward.
int transformer_forward(Transformer *tf, float *logp, float *entropy, const int *tokens, const int *pos,
                        const int *cu_seqlens, int nseq, int T, const int *targets, float temperature,
                        PailErr *err);
// Backward of the last forward for upstream gradient dlogp[t] (rows without a
// target ignored): accumulates (+=) into lora_grads (the adapter's layout; NULL
// to skip) and, in full mode, into base_grads (a ModelWeights-shaped block of
// num_params floats, NULL to skip).
int transformer_backward(Transformer *tf, float *lora_grads, float *base_grads, const float *dlogp, PailErr *err);

// ---- generation: KV caches in slots ----
// A cache holds n_slots independent sequences of up to max_ctx tokens each,
// paged: every layer's K and V are pools of KV_BLOCK-token blocks
// (kernels/kernels.h) and each slot a row of a block table. Forks share
// blocks instead of copying them; a slot that appends to a block another slot
// holds first gets its own copy of that block (doc/model.md). The pools hold
// kvdt elements (DT_F32, DT_BF16 or DT_F16; else -1 PAIL_ERR_INVALID): each new
// K and V row is rounded to it once, as it is stored (kvcache_dtype_default).
typedef struct KvCache KvCache;
int kvcache_init(KvCache **out, const ModelConfig *cfg, int n_slots, int max_ctx, DType kvdt,
                 PailErr *err);  // on the CPU, every slot at max_ctx at once
// On a backend (the transformer's: transformer_extend refuses another's), K and
// V stored as kvdt (f32, bf16 or f16), with a pool of n_blocks blocks (0:
// n_slots x ceil(max_ctx / KV_BLOCK), every slot at max_ctx at once; fewer:
// the caller schedules by kvcache_append_blocks, an append past the free
// blocks is an error). max_ctx caps each slot.
int kvcache_init_on(KvCache **out, Backend *be, const ModelConfig *cfg, int n_slots, int max_ctx, DType kvdt,
                    int n_blocks, PailErr *err);
DType kvcache_dtype(const KvCache *kv);
// Bytes of one pool block (K and V of KV_BLOCK tokens in every layer, as kvdt).
size_t kvcache_block_bytes(const ModelConfig *cfg, DType kvdt);
void kvcache_free(KvCache *kv);
int kvcache_len(const KvCache *kv, int slot);
void kvcache_reset(KvCache *kv, int slot);              // empty the slot (its blocks go back to the pool)
// dst = src's tokens (a shared prompt): dst holds src's blocks, nothing is copied.
int kvcache_fork(KvCache *kv, int dst, int src, PailErr *err);
// dst = src's first ntok tokens (<= its length): an episode whose opening
// another of its group already holds. dst == src truncates.
int kvcache_fork_prefix(KvCache *kv, int dst, int src, int ntok, PailErr *err);
size_t kvcache_bytes(const KvCache *kv);                // the pools, allocated once
// (n_slots, V) backend memory: the rows of the last transformer_extend called
// with logits NULL, in slot order (valid until the next extend).
const float *kvcache_logits(const KvCache *kv);
// Bytes of the blocks held now (peak: the most held at once since init or the
// last kvcache_reset_peak), for the figures of a group's KV memory.
size_t kvcache_used_bytes(const KvCache *kv, bool peak);
void kvcache_reset_peak(KvCache *kv);
int kvcache_n_blocks(const KvCache *kv);     // the pool's blocks
int kvcache_free_blocks(const KvCache *kv);  // blocks no slot holds now
int kvcache_peak_blocks(const KvCache *kv);  // the most held at once (see kvcache_reset_peak)
// Free blocks that appending n tokens to slot would take (its shared last
// block's copy included).
int kvcache_append_blocks(const KvCache *kv, int slot, int n);

// Appends n_new[s] tokens to each slot s (0 = slot idle this call; tokens are
// concatenated in slot order, Tn = sum n_new <= the plan's token budget), each
// new token attending its slot's cached tokens and the new ones before it, and
// writes the logits (V floats, not divided by any temperature) of the last new
// token of every slot with n_new[s] > 0, in slot order, to logits (host
// memory; NULL: left on the backend, kvcache_logits, for a sampler op there). A prompt
// prefill is one call with the prompt's tokens; a decode step one token per
// active slot.
int transformer_extend(Transformer *tf, KvCache *kv, float *logits, const int *n_new, const int *tokens,
                       PailErr *err);
