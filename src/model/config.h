// A Hugging Face model's config.json (+ generation_config.json) for the dense
// decoders pail supports: model_type llama (Llama 3.x, SmolLM), qwen2 (Qwen2,
// Qwen2.5), qwen3, mistral (llama's layout + a sliding attention window), exaone
// (EXAONE 3/3.5: llama under its own tensor and config names), smollm3 (llama
// with some layers without RoPE), granite (llama with four multipliers), olmo2
// (norms after the sub-blocks, q/k norms over the whole projection), phi3 (fused qkv_proj and
// gate_up_proj, partial_rotary_factor, sliding_window), cohere
// (Command-R: a parallel block under one LayerNorm, RoPE on adjacent pairs,
// logit_scale), cohere2 (cohere's block with sliding-window layers that rotate
// q/k and full-attention layers without RoPE), gemma2 and gemma3_text (sandwich norms
// scaled by 1 + w, GeGLU, sliding and global layers), and the mixtures of experts qwen3_moe,
// qwen2_moe, olmoe, granitemoe and mixtral (fields below). Both the hub's legacy layout (rope_theta + rope_scaling,
// torch_dtype) and transformers 5's (rope_parameters, dtype) are read. What pail
// cannot run (other model types, MoE configs with dense layers, qwen's per-layer sliding window,
// unknown rope scaling) is refused with a message naming the field and value.
// Shape legend (doc/models.md): C hidden, F ffn, L layers, H heads, Hkv kv heads, D head dim, V vocab.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "core/buf.h"
#include "core/err.h"

typedef enum {
    MODEL_LLAMA, MODEL_QWEN2, MODEL_QWEN3, MODEL_MISTRAL, MODEL_EXAONE, MODEL_SMOLLM3, MODEL_GRANITE, MODEL_OLMO2,
    MODEL_PHI3, MODEL_COHERE, MODEL_COHERE2, MODEL_GEMMA2, MODEL_GEMMA3_TEXT,
    // mixtures of experts (num_experts > 0): the dense layout above with a routed MLP
    MODEL_QWEN3_MOE, MODEL_QWEN2_MOE, MODEL_OLMOE, MODEL_GRANITEMOE, MODEL_MIXTRAL, MODEL_GPT_OSS,
    MODEL_TYPE_COUNT
} ModelType;
typedef enum {
    ROPE_SCALING_NONE, ROPE_SCALING_LLAMA3, ROPE_SCALING_LONGROPE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN
} RopeScalingType;  // kernels.h has the RopeScaling params

#define MODEL_MAX_EOS 8
#define MODEL_MAX_LAYERS 1024  // num_hidden_layers' bound (config.json is refused past it)
#define MODEL_MAX_ROPE_FACTORS 512  // longrope's short/long_factor entries: rotary dims / 2 (head_dim <= 1024)

typedef struct {
    ModelType type;
    int hidden_size;              // C
    int intermediate_size;        // F
    int num_hidden_layers;        // L
    int num_attention_heads;      // H
    int num_key_value_heads;      // Hkv (defaults to H when absent); H % Hkv == 0
    int head_dim;                 // D: config "head_dim" when present, else C / H
    int vocab_size;               // V
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    RopeScalingType rope_scaling; // llama3: the four fields below are set
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position_embeddings;
    bool tie_word_embeddings;
    // Derived from model_type and config: qwen2 always has q/k/v bias and no o
    // bias (no config field); llama/qwen3 "attention_bias" covers q, k, v and o.
    bool has_qkv_bias, has_o_bias;
    bool has_qk_norm;             // qwen3: per-head RMSNorm (D) on q and k before RoPE; olmo2: over H*D, Hkv*D
    bool post_norm;               // olmo2: no pre-norms; RMSNorm on each sub-block's output before the residual add
    bool qk_norm_whole;           // olmo2, olmoe: the q/k norms are over the whole projection (H*D, Hkv*D), not per head
    int sliding_window;           // mistral: query i sees keys i-W+1..i on every layer; 0 = full (null)
    // smollm3: bit l set = layer l applies no RoPE to q and k (no_rope_layers[l] == 0); all clear elsewhere
    unsigned long long no_rope[MODEL_MAX_LAYERS / 64];
    // granite (0 elsewhere: not applied): inputs_embeds * embedding_multiplier; h = x + residual_multiplier
    // * sub-block; attention scores q.k * attention_multiplier (instead of 1/sqrt(D)); logits / logits_scaling
    double embedding_multiplier, residual_multiplier, attention_multiplier, logits_scaling;
    int bos_token_id;             // -1 when none
    int eos_token_ids[MODEL_MAX_EOS];  // generation_config.json's when present, else config.json's
    int n_eos;
    char dtype[16];               // the checkpoint's declared dtype ("bfloat16"), "" when absent
    // phi3: RoPE on the first rope_dim dims of each head (int(D * partial_rotary_factor)), the rest passed
    // through; 0 elsewhere (= D, every dim rotated)
    int rope_dim;
    // phi3 longrope (rope_scaling ROPE_SCALING_LONGROPE; legacy "su"): inv_freq[i] / short_factor[i],
    // or / long_factor[i] for a sequence longer than rope_original_max_position_embeddings (Phi3Config's
    // top-level field, 4096 when absent), cos and sin times rope_attention_factor (the config's, else
    // sqrt(1 + ln(factor) / ln(original_max)) with factor max_position_embeddings / original_max)
    double rope_attention_factor;
    float rope_short_factor[MODEL_MAX_ROPE_FACTORS], rope_long_factor[MODEL_MAX_ROPE_FACTORS];
    // cohere (all false / 0 elsewhere): h = x + attn(ln(x)) + mlp(ln(x)) under one input_layernorm (no
    // post_attention_layernorm); the norms are LayerNorm without bias (eps in rms_norm_eps, config
    // layer_norm_eps), q/k norms per head with (H, D) / (Hkv, D) weights; RoPE rotates pairs (2i, 2i+1);
    // logits * logit_scale
    bool parallel_block, layer_norm, rope_interleaved;
    double logit_scale;
    // cohere2, gemma2, gemma3_text: bit l set = layer l is a full_attention layer (no window; cohere2's have no
    // RoPE either: their bits in no_rope are set too); the others window with sliding_window. All clear
    // elsewhere (mistral windows every layer). model_layer_window reads it.
    unsigned long long full_attn[MODEL_MAX_LAYERS / 64];
    // gemma2 / gemma3_text (zero elsewhere). gemma_norms: every RMSNorm scales by (1 + w) (the weights hold
    // the file's w; the transformer keeps 1 + w in its planned block), four per layer: input_layernorm, post_attention_layernorm on
    // the attention output before the residual add, pre_feedforward_layernorm, post_feedforward_layernorm
    // on the MLP output before the add; the MLP is gelu_tanh(gate) * up (geglu). embedding_multiplier
    // sqrt(C) and attention_multiplier query_pre_attn_scalar^-0.5 use granite's fields.
    bool gemma_norms;
    int query_pre_attn_scalar;
    double attn_logit_softcapping, final_logit_softcapping;  // cap tanh(x / cap) on scores / logits; 0 = null
    double rope_local_theta;      // gemma3: the sliding layers' RoPE base (their own table); 0 = one table
    // Mixture of experts (0 / false elsewhere): every layer's MLP is a routed one (a model whose
    // config makes some layers dense, qwen's mlp_only_layers / decoder_sparse_step, is refused by name).
    // Router logits x Wr^T (E, C) pick K experts a token (kernels.h moe_route: ties to the lower index);
    // expert e's MLP is down_e(silu(gate_e x) * up_e x) with its gate and up rows fused (E, 2 Fe, C),
    // gate rows first (transformers 5's gate_up_proj). norm_topk_prob: the K weights renormalised to
    // sum 1 (mixtral and granitemoe always); else softmax probabilities over all E.
    // qwen2_moe's shared expert is the dense MLP families (PARAM_W_GATE/UP/DOWN, named
    // mlp.shared_expert.*) with intermediate_size = shared_expert_intermediate_size (0: none), under
    // sigmoid(x w_sg^T) (PARAM_SHARED_GATE); config.json's own intermediate_size is kept in
    // dense_intermediate_size to be written back. olmoe's q/k norms are over the whole projection (olmo2's,
    // with pre-norms); granitemoe has granite's four multipliers; mixtral mistral's sliding_window.
    int num_experts;              // E (num_experts / num_local_experts)
    int num_experts_per_tok;      // K
    int moe_intermediate_size;    // Fe (qwen's moe_intermediate_size; the others' intermediate_size)
    bool norm_topk_prob;
    int dense_intermediate_size;  // config.json's intermediate_size when intermediate_size holds the shared expert's
    // (the other MoE types: intermediate_size 0, no dense MLP; dense_intermediate_size config.json's, which for
    // olmoe, granitemoe and mixtral is the experts' size, = moe_intermediate_size)
    // gpt_oss (0 / false elsewhere; its MoE as the fields above, norm_topk_prob: the softmax over the K
    // chosen logits): a learned logit per head joining every row's attention softmax with no value
    // (attn_sinks: PARAM_SINKS); biases on the router and the experts (moe_bias: PARAM_ROUTER_BIAS,
    // PARAM_EXP_GATE_UP_BIAS, PARAM_EXP_DOWN_BIAS); the experts' clamped SwiGLU g = min(gate, limit),
    // u = clamp(up, -limit, limit), (u + 1) g sigmoid(alpha g) (swiglu_limit > 0; 0: plain SwiGLU);
    // sliding and full layers as gemma's (full_attn, sliding_window); q/k/v/o biases (has_qkv_bias,
    // has_o_bias); YaRN RoPE (rope_scaling ROPE_SCALING_YARN with rope_factor,
    // rope_original_max_position_embeddings, rope_attention_factor (transformers' attention_factor,
    // else 0.1 ln(factor) + 1) and the three fields below).
    bool attn_sinks, moe_bias;
    double swiglu_alpha, swiglu_limit;
    double rope_beta_fast, rope_beta_slow;  // YaRN's ramp (defaults 32, 1)
    bool rope_truncate;                     // YaRN: round the ramp's bounds to whole dims (default true)
} ModelConfig;

const char *model_type_name(ModelType t);  // "llama", ..., "gemma3_text", "qwen3_moe", ..., "mixtral"
// True for a mixture-of-experts model (its MLPs are routed: model_config.h's num_experts).
static inline bool model_is_moe(const ModelConfig *c) { return c->num_experts > 0; }
// The head dims RoPE rotates: D, or phi3's partial rope_dim.
static inline int model_rope_dim(const ModelConfig *c) { return c->rope_dim ? c->rope_dim : c->head_dim; }
// Whether layer l rotates q and k (every layer but smollm3's no-RoPE ones).
static inline bool model_layer_has_rope(const ModelConfig *c, int l) { return !((c->no_rope[l >> 6] >> (l & 63)) & 1); }
int model_type_parse(const char *s, ModelType *out);  // 0 / -1
// The attention window of layer l (0: full causal attention): sliding_window on every
// layer (mistral), but the full_attention layers of cohere2, gemma2 and gemma3_text.
static inline int model_layer_window(const ModelConfig *c, int l) {
    return (c->full_attn[l >> 6] >> (l & 63)) & 1 ? 0 : c->sliding_window;
}
// cohere2's legacy sliding_window_pattern P: layer l is full_attention (window 0, no RoPE)
// when (l + 1) % P == 0, sliding_attention otherwise (Cohere2Config's layer_types default).
void model_config_set_layer_pattern(ModelConfig *c, int pattern);

// Parses config.json text (len bytes; need not be NUL-terminated). `what` names
// the file in messages. Returns 0, or -1 with err: PAIL_ERR_UNSUPPORTED for a
// model pail refuses (the message names the field and value), PAIL_ERR_INVALID
// for a malformed or inconsistent file.
int model_config_parse(ModelConfig *cfg, const char *json, size_t len, const char *what, PailErr *err);
// Applies generation_config.json text: bos_token_id / eos_token_id (int or list)
// replace config.json's when present.
int model_config_apply_generation(ModelConfig *cfg, const char *json, size_t len, const char *what,
                                  PailErr *err);
// dir/config.json, then dir/generation_config.json when it exists.
int model_config_load(ModelConfig *cfg, const char *dir, PailErr *err);
// Checks sizes and derived fields are consistent (all positive, H % Hkv == 0, 1 <= K <= E <=
// MOE_MAX_EXPERTS, ...).
int model_config_validate(const ModelConfig *cfg, const char *what, PailErr *err);
// Fills the defaults pail uses for a model_type and shape: HF's defaults for
// eps/theta/positions, qwen2 q/k/v bias, qwen3 q/k norm, mistral's window 4096, head_dim = C / H.
void model_config_defaults(ModelConfig *cfg, ModelType type);
// gemma2 / gemma3_text: full_attn from full[l] (1 = full_attention; NULL: the family's default
// pattern, or every pattern-th layer when pattern > 0); the embedding and attention multipliers from
// hidden_size and query_pre_attn_scalar (call after changing either).
void model_config_gemma_layers(ModelConfig *c, const unsigned char *full, int pattern);
void model_config_gemma_scales(ModelConfig *c);
// Writes a config.json that transformers' AutoModelForCausalLM loads with the
// fields a published checkpoint of this model_type carries (architectures,
// model_type, torch_dtype, ...). dtype_name: "float32" / "bfloat16".
int model_config_to_json(const ModelConfig *cfg, const char *dtype_name, Buf *out);
// Number of parameters the checkpoint holds (lm_head counted only when untied; every expert).
size_t model_config_param_count(const ModelConfig *cfg);
// The parameters one token computes with: model_config_param_count less the L * (E - K) experts it
// is not routed to (= the total for a dense model).
size_t model_config_active_param_count(const ModelConfig *cfg);
