// The memory plan a tool prints before it allocates anything: base weights by
// dtype, the LoRA adapter (+ gradients and AdamW moments when training),
// activations (the transformer planner's dry pass), the KV cache by dtype and
// slots, and workspace (logits, packed batches), per device; and the refusal
// of a plan that does not fit the device (or --max-memory) with the sizes and
// the flags that shrink it. Sizes come from the config alone (no weights read).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "core/err.h"
#include "dtype.h"
#include "model/config.h"

typedef enum { MEMPLAN_TRAIN, MEMPLAN_ROLLOUT, MEMPLAN_FORWARD } MemoryPlanRole;

typedef struct {
    MemoryPlanRole role;
    const char *weights_dtype;  // how the matrices are held: "f32", "bf16", "f16" or a mix ("bf16+f32")
    size_t weights_bytes;       // the block's bytes (model_weights_bytes); 0: from weights_dtype for every matrix
    int lora_rank;              // 0: no adapter
    unsigned lora_targets;      // LORA_* bit mask
    int token_budget;           // tokens of one packed forward (train: --token-budget)
    bool recompute;             // train: --recompute
    bool full;                  // train: --sft --full (gradients and moments for every weight)
    int batch_size;             // rollout: sequences decoded together (KV slots = batch + 1)
    int max_ctx;                // rollout: prompt + completion tokens per slot
    size_t kv_memory;           // rollout: the KV block pool's bytes (--kv-memory; 0: the full pool, or what the
                                // limit leaves, memplan_fit_kv)
    bool kv_episodes;           // rollout: episodes (--env, --serve): every slot at max_ctx, no pool to size
    int max_new_tokens;         // rollout: completion tokens stored per completion
    DType kv_dtype;             // rollout: the KV cache's elements (DT_F32, DT_BF16, DT_F16; 0: DT_F32)
    int groups_per_step, group_size;  // rollout: prompts per run (groups per shard, or eval rows) and G
    int threads;                // rollout: sampler scratch per OpenMP thread (0: 1)
} MemoryPlanSpec;

typedef struct {
    char device[160];
    size_t weights, lora, activations, kv_cache, workspace, total;
    size_t n_weights, n_lora;   // parameter counts
    int kv_slots, kv_ctx;
    int kv_blocks, kv_full_blocks;  // rollout: the pool's KV_BLOCK-token blocks, and the full pool's
    size_t kv_block_bytes;
    MemoryPlanSpec spec;       // the caller's, but weights_dtype points at the copy below
    char weights_dtype[48];    // spec->weights_dtype's text: the caller's may be gone when the plan prints
} MemoryPlan;

int memplan_build(MemoryPlan *p, const ModelConfig *cfg, const MemoryPlanSpec *spec, const char *device, PailErr *err);
// A tool that plans part of its own memory by a dry pass (the trainer's block
// of adapter state and step arrays) gives that figure: it replaces the
// estimate of the adapter + workspace lines (the adapter line keeps its size).
void memplan_set_own(MemoryPlan *p, size_t adapter_and_workspace);
void memplan_print(FILE *f, const MemoryPlan *p, const char *tool);
// Rollout without --kv-memory: a plan over limit bytes (0: the device's
// available memory) gives the KV pool what the rest leaves, down to 0 blocks
// (the caller refuses a pool too small for one sequence). Others: unchanged.
void memplan_fit_kv(MemoryPlan *p, size_t limit);
// 0 when the plan fits limit bytes (0: the device's available memory); else -1
// with err listing the sizes and the flags that shrink the plan.
int memplan_check(const MemoryPlan *p, size_t limit, PailErr *err);
// An allocation on the device failed (err says which, PAIL_ERR_NOMEM): err
// becomes one line with it, the plan's sizes and the flags that shrink the
// plan. Returns -1.
int memplan_oom(const MemoryPlan *p, PailErr *err);
size_t memplan_available(void);  // the host's MemAvailable, 0 when unknown
// "24G", "512M", "1.5T", "300000000" (bytes; K M G T are powers of 1024).
int memplan_parse_size(const char *s, size_t *out, PailErr *err);
