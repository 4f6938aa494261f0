// The mixture-of-experts part of the GGUF import (gguf_import.c): llama.cpp's qwen3moe,
// qwen2moe, olmoe, granitemoe and llama-with-experts (Mixtral) files as pail's qwen3_moe,
// qwen2_moe, olmoe, granitemoe and mixtral (config.h's MoE fields, weights.h's expert
// families). Internal to src/model: callers use gguf_import.h.
#pragma once
#include <stdbool.h>
#include "model/gguf.h"
#include "model/weights.h"

// The model type of a MoE architecture (al bytes at arch, not NUL-terminated): 1 with *type
// set, 0 for any other architecture, -1 with err.
int gguf_moe_arch(const GgufFile *g, const char *arch, size_t al, ModelType *type, PailErr *err);
// The MoE fields of c from the file's keys, after gguf_import read the common ones
// (intermediate_size holds <arch>.feed_forward_length). 0, or -1 with err naming the key.
int gguf_moe_config(const GgufFile *g, const char *arch, ModelConfig *c, PailErr *err);
// llama.cpp's per-layer name of a MoE model's router, shared expert and its gate; NULL for the
// others (the experts are gguf_moe_load's).
const char *gguf_moe_param_name(ModelParamId id);
// Whether family id is gguf_moe_load's: exp_gate_up, exp_down and gpt-oss's expert biases.
bool gguf_moe_expert_family(ModelParamId id);
// Whether a per-layer tensor name (after "blk.N.") is one of the experts' tensors (weights, biases).
bool gguf_moe_expert_tensor(const char *suffix);
// The dtype layer l of exp_gate_up / exp_down is imported as: the file's block type when pail
// computes on it (gate and up of one type) and not dequantize, else DT_F32. Run after the check.
DType gguf_moe_layer_dtype(const GgufFile *g, ModelParamId id, int l, bool dequantize);
// Layer l of exp_gate_up (ffn_gate_exps + ffn_up_exps: expert e's gate rows, then its up rows)
// or exp_down (ffn_down_exps), or gpt-oss's exp_gate_up_bias (ffn_gate_exps.bias + ffn_up_exps.bias:
// expert e's gate Fe, then its up Fe) or exp_down_bias (ffn_down_exps.bias), each tensor's name and shape checked; with w NULL only checked,
// else placed (blocks copied, or dequantized to fp32). Returns the file tensors used (their
// pointers in used[0..]), or -1 with err.
int gguf_moe_load(const GgufFile *g, const ModelConfig *c, ModelWeights *w, ModelParamId id, int l,
                  const GgufTensor *used[2], PailErr *err);
