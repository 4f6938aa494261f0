// Base model weights: the tensor names a llama / qwen2 / qwen3 checkpoint must
// hold, one fp32 block for all of them computed from the config (llm.c
// fill_in_parameter_sizes + malloc_and_point), loading from safetensors with
// every tensor checked by name, shape and dtype, and the base_sha256 that ties an
// adapter to its base (format in doc/models.md). Not the forward pass.
// Per-layer tensors are stacked over layers: layer l of wq is wq + l * H*D*C.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "model/config.h"
#include "model/safetensors.h"

typedef enum {
    PARAM_EMBED, PARAM_ATTN_NORM, PARAM_WQ, PARAM_WK, PARAM_WV, PARAM_WO, PARAM_BQ, PARAM_BK, PARAM_BV,
    PARAM_BO, PARAM_Q_NORM, PARAM_K_NORM, PARAM_MLP_NORM, PARAM_W_GATE, PARAM_W_UP, PARAM_W_DOWN,
    PARAM_FINAL_NORM, PARAM_LM_HEAD, PARAM_COUNT
} ModelParamId;

// Named pointers into ModelWeights.memory (all borrowed from it). NULL when the
// config has no such tensor. lm_head == embed_tokens when tied.
typedef struct {
    float *embed_tokens;  // (V, C)       model.embed_tokens.weight
    float *attn_norm;     // (L, C)       model.layers.N.input_layernorm.weight
    float *wq;            // (L, H*D, C)  self_attn.q_proj.weight
    float *wk;            // (L, Hkv*D, C)
    float *wv;            // (L, Hkv*D, C)
    float *wo;            // (L, C, H*D)  self_attn.o_proj.weight
    float *bq;            // (L, H*D)     qwen2; llama/qwen3 with attention_bias
    float *bk;            // (L, Hkv*D)
    float *bv;            // (L, Hkv*D)
    float *bo;            // (L, C)       llama/qwen3 with attention_bias
    float *q_norm;        // (L, D)       qwen3: self_attn.q_norm.weight
    float *k_norm;        // (L, D)
    float *mlp_norm;      // (L, C)       post_attention_layernorm.weight
    float *w_gate;        // (L, F, C)    mlp.gate_proj.weight
    float *w_up;          // (L, F, C)
    float *w_down;        // (L, C, F)
    float *final_norm;    // (C)          model.norm.weight
    float *lm_head;       // (V, C)       lm_head.weight, or embed_tokens when tied
} ModelParams;

// One tensor family: its HF name (the part after "model.layers.N." when per
// layer), its per-layer shape, and whether this config has it.
typedef struct {
    const char *name;
    bool per_layer, present;
    int ndim;
    size_t shape[2];
    size_t numel;         // per layer when per_layer
} ModelParamSpec;

typedef struct {
    ModelConfig cfg;
    ModelParams p;
    ModelParamSpec specs[PARAM_COUNT];
    size_t offsets[PARAM_COUNT];  // element offset of each family in memory
    size_t num_params;            // floats in memory (lm_head counted once when tied)
    float *memory;                // owned: the one fp32 block
    char base_sha256[65];         // "" until loaded from files
} ModelWeights;

// The tensor families of cfg (specs[PARAM_COUNT]); absent ones have present = false.
void model_param_specs(const ModelConfig *cfg, ModelParamSpec specs[PARAM_COUNT]);
// Floats the block holds for cfg (lm_head counted once when tied), without allocating.
size_t model_params_count(const ModelConfig *cfg);
// Sizes the block from cfg, allocates it (uninitialised) and points the params.
int model_weights_alloc(ModelWeights *w, const ModelConfig *cfg, PailErr *err);
void model_weights_free(ModelWeights *w);
// Pointer to (family, layer) in w (layer ignored for global tensors).
float *model_weights_tensor(const ModelWeights *w, ModelParamId id, int layer);
// HF name of (family, layer): "model.layers.3.self_attn.q_proj.weight".
void model_param_name(const ModelParamSpec *s, int layer, char *out, size_t cap);

// Checks set against cfg without loading: every expected tensor present with the
// expected shape and a float dtype (F32/F16/BF16); nothing unexpected except
// harmless extras (rotary_emb.inv_freq buffers; lm_head.weight when tied). The
// message names the tensor and file.
int model_weights_check(const ModelConfig *cfg, const SafeTensorsSet *set, PailErr *err);
// Alloc + check + convert every tensor to fp32 + base_sha256. w->cfg = *cfg.
int model_weights_load_set(ModelWeights *w, const ModelConfig *cfg, const SafeTensorsSet *set, PailErr *err);
// dir/config.json (+ generation_config.json) and the safetensors in dir.
int model_weights_load(ModelWeights *w, const char *dir, PailErr *err);
// base_sha256 of the set's files: sha256 over the lines "<file sha256 hex>  <file
// name>\n" sorted by file name (bytewise), i.e. `sha256sum` output. Hashes the
// mapped bytes; no second read.
void model_base_sha256(const SafeTensorsSet *set, char hex[65]);
