// Random-weight checkpoints in exact Hugging Face layout (config.json,
// generation_config.json, model.safetensors, and the tokenizer files copied from
// a folder when given), so tests and benches never need a download.
// transformers' AutoModelForCausalLM.from_pretrained loads them with no missing
// or unexpected keys (validation/model/check_model_files.py checks it).
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

// The shapes tests and benches use (doc/models.md): tiny (unit tests), bench
// (C 512, L 8, H 8, Hkv 2, F 1408, V 32000), qwen2.5-0.5b (C 896, L 24, H 14,
// Hkv 2, F 4864, V 151936, tied, q/k/v bias). A mixture-of-experts type's tiny and bench
// have E 4 (bench 8), K 2, Fe F/4 and qwen2_moe's shared expert F/2; granite-3.1-1b-a400m is
// granitemoe's (C 1024, L 24, H 16, Hkv 8, E 32, K 8, Fe 512, V 49155, tied, its multipliers).
// Fills cfg's sizes and model_type defaults; returns -1 for an unknown name.
int modelgen_shape(ModelConfig *cfg, const char *shape, ModelType type);

typedef struct {
    SafeTensorsDtype dtype;      // ST_DTYPE_F32, ST_DTYPE_BF16 or ST_DTYPE_F16
    uint64_t seed;
    const char *tokenizer_dir;   // NULL: no tokenizer files (else tokenizer.json, tokenizer_config.json and, when
                                 // present, special_tokens_map.json and chat_template.jinja are copied)
    bool dequantize;             // model_weights_save: quantized matrices as dtype too (else as their blocks)
} ModelGenOptions;

// Writes the checkpoint into dir (created if needed). Matrices, embeddings and
// biases ~ N(0, 0.02^2) (HF's initializer_range); norm weights 1 + N(0, 0.02^2)
// so a loader that mixes two norms up is caught. Each tensor draws from its own
// stream (seed, hash of its name): values do not depend on write order.
int modelgen_write(const ModelConfig *cfg, const char *dir, const ModelGenOptions *opt, PailErr *err);

// Writes loaded (or trained) weights as a checkpoint in the same layout: what
// `grpo-train --sft --full` saves. opt->seed is unused. A block-quantized
// matrix is written as its blocks (U8 [rows, row bytes] with "pail.quant.<name>"
// metadata, doc/models.md) unless opt->dequantize; the others in opt->dtype.
int model_weights_save(const ModelWeights *w, const char *dir, const ModelGenOptions *opt, PailErr *err);

// From a tokenizer folder (tokenizer.json + tokenizer_config.json): the ids of
// its bos_token and eos_token (-1 when the config names none) and the largest
// token id it can produce (so --vocab can be checked against it).
int modelgen_tokenizer_ids(const char *dir, int *bos, int *eos, int *max_id, PailErr *err);
