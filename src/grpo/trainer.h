// grpo-train's loop: consume rollout groups within the staleness bound, take
// GRPO steps on the LoRA adapter, publish each new adapter version with its
// resumable state (doc/protocol.md), write metrics. Also replay (train from
// stored shards, deterministic). The flags and their defaults live in
// src/cmd/grpo-train.c; this takes the parsed values.
#pragma once
#include "model/memplan.h"
#include <signal.h>
#include <stdbool.h>
#include <jansson.h>
#include "grpo/loss.h"
#include "grpo/schedule.h"
#include "backend.h"
#include "store/store.h"

typedef struct {
    const char *model_dir;       // Hugging Face model folder
    const char *run_url;         // the run's prefix
    const char *replay_url;      // NULL, or a run prefix whose rollouts/ are replayed in key order
    bool replay_record;          // with replay_url: the groups its trainer consumed, in order (its states' record)
    const char *init_adapter;    // NULL, or a pail adapter file / URL for v0
    const char *dump_grads;      // NULL, or a local .h5 for the first step's LoRA gradients
    const char *metrics_path;    // local metrics.jsonl (NULL: none)
    const char *run_id;          // NULL: derived at the first start
    const char *task;            // free text for run.json
    StoreOptions store;
    int lora_rank;
    double lora_alpha;
    unsigned lora_targets;
    bool rslora;
    double lr, beta1, beta2, adam_eps, weight_decay, max_grad_norm, min_lr_ratio;
    LrScheduleKind schedule;
    long warmup_steps;
    long steps, groups_per_step;
    int group_size, max_staleness, token_budget, publish_every;  // token_budget 0: chosen (budget.h)
    int max_seq_tokens;          // the longest prompt + completion the workers send: sizes token_budget 0
    long keep_versions;          // retention after each publish (0: keep all)
    ScaleRewards scale_rewards;
    GrpoLossConfig loss;
    long seed;
    bool recompute;
    bool train_zero_advantage;   // forward/backward completions with advantage 0 too (their gradient is 0 without KL)
    bool dynamic_sampling;       // DAPO: groups without reward spread are consumed, not trained; a step waits for
                                 // groups_per_step groups with spread
    bool clear_stop;             // --clear-stop: remove a control/stop left in the run at start
    bool refuse_resume;          // --no-resume: a run with state is an error, not continued
    long resume_from;            // -1: the newest state; else this state's version (versions go on after the newest)
    double rollout_timeout;      // seconds to wait for enough groups (0: forever)
    double late_grace;           // seconds a version that left the window is re-listed for late shards
    json_t *effective;           // every flag's effective value, written into run.json (borrowed)
    Backend *backend;            // where the model computes (borrowed; NULL: the CPU)
    size_t max_memory;           // refuse a memory plan above this many bytes (0: the device's available memory)
    int weights_dtype;           // --dtype: MODEL_DTYPE_AUTO or a DType the base matrices are held in (0: DT_F32)
} TrainerConfig;

// Runs until cfg->steps optimizer steps are done (counting those of a resumed
// state), *stop becomes non-zero (SIGTERM/SIGUSR1), control/stop appears, or
// a replay runs out of shards. Publishes what it trained before returning.
// 0, or -1 with err (PAIL_ERR_EXISTS: another trainer publishes this run).
int trainer_run(const TrainerConfig *cfg, volatile sig_atomic_t *stop, PailErr *err);
// Bytes of the trainer's own block for n_params LoRA parameters: params,
// grads, both AdamW moments, the packed micro-batch and the step's arrays
// (token_budget, groups_per_step, group_size of cfg). Allocates nothing.
size_t trainer_buffers_bytes(const TrainerConfig *cfg, int64_t n_params);
// The memory plan grpo-train prints before the weights (config.json alone:
// weights, adapter state, activations of cfg's token_budget and recompute, the
// trainer's block). Prints nothing, checks nothing. 0, or -1 with err.
int trainer_memplan(const TrainerConfig *cfg, MemoryPlan *mp, PailErr *err);
