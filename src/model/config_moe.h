// config.c's mixture-of-experts part (config_moe.c): the defaults, fields, refusals and
// config.json spelling of qwen3_moe, qwen2_moe, olmoe, granitemoe, mixtral and gpt_oss (config.h's
// MoE block). Internal to src/model: callers use config.h.
#pragma once
#include <jansson.h>
#include "model/config.h"

static inline bool model_type_is_moe(ModelType t) { return t >= MODEL_QWEN3_MOE && t < MODEL_TYPE_COUNT; }

// config.c's field readers (absent or null: *out unchanged; -1 with err for a wrong type or range).
int config_get_int(json_t *root, const char *key, long min, long max, int *out, const char *what, PailErr *err);
int config_get_num(json_t *root, const char *key, double min, double max, double *out, const char *what,
                   PailErr *err);

// The type's configuration class defaults (E, K, Fe, norm_topk_prob, norms, positions, theta), keeping
// E, K and Fe where the caller set them.
void config_moe_defaults(ModelConfig *c, const ModelConfig *caller);
// Refuses by name what pail does not run (dense layers inside the model, windowed qwen layers,
// olmoe's clip_qkv, ...); 0 or -1 with err (PAIL_ERR_UNSUPPORTED).
int config_moe_refuse(json_t *root, ModelType type, const char *what, PailErr *err);
// gpt_oss's YaRN: GptOssConfig's default rope_parameters; the fields of a yarn object sc (named field in
// messages; max_position_embeddings already read): 0 or -1 with err.
void config_yarn_defaults(ModelConfig *c);
int config_yarn_parse(ModelConfig *c, json_t *sc, const char *field, const char *what, PailErr *err);
// The MoE fields and the derived ones (after config.c read the common ones): E, K, Fe,
// norm_topk_prob, the shared expert, biases, multipliers, the window.
int config_moe_parse(ModelConfig *c, json_t *root, const char *what, PailErr *err);
// The type's fields in a config.json transformers loads back (intermediate_size included).
void config_moe_to_json(const ModelConfig *c, json_t *o);
