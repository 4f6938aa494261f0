// PEFT interchange for LoRA adapters (peft.c): export a pail adapter as a PEFT
// folder that PEFT and vLLM load as is, import a PEFT folder, load either kind
// from a path, and merge an adapter into a model's weights.
#pragma once
#include "lora/lora.h"
#include "model/weights.h"

// dir/adapter_config.json + dir/adapter_model.safetensors with keys
// base_model.model.model.layers.<i>.<self_attn|mlp>.<module>.lora_A.weight / lora_B.weight.
// An adapter on a mixture of experts' experts goes out as PEFT's target_parameters
// (<mlp|block_sparse_moe>.experts.gate_up_proj / down_proj, one adapter per expert: lora_A (E R, in),
// lora_B (out, R E)); mc (the model, NULL when unknown) names their parent and is needed for them.
int peft_export(const LoraLayout *l, const float *params, const ModelConfig *mc, const char *base_model,
                const char *dir, PailErr *err);
// Reads a PEFT LoRA folder made for a model of config mc (rank_pattern,
// alpha_pattern and fan_in_fan_out are refused). Allocates *params.
int peft_import(const char *dir, const ModelConfig *mc, LoraLayout *l, float **params, PailErr *err);
// A pail adapter file (.h5) or a PEFT folder, by what path is.
int lora_load_any(const char *path, const ModelConfig *mc, LoraLayout *l, float **params, AdapterMeta *meta,
                  PailErr *err);
// weights_block (w's layout) += scaling * B A for every adapted projection.
int lora_merge(float *weights_block, const ModelWeights *w, const LoraLayout *l, const float *params);
