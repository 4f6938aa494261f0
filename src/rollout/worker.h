// grpo-rollout's loop: wait for the newest adapter (relay long-poll or polling),
// check it against run.json, hot-swap it between shards, draw prompts, generate
// G completions per prompt (generate.h), score them (reward.h), and publish
// each shard create-only at rollouts/v%08d/<worker>-%06d.h5. Also the eval
// worker (--eval): greedy or pass@k scoring of a held-out set per version.
// Flags and defaults live in src/cmd/grpo-rollout.c; the parts are listed in
// worker.c (engine.h, shardbuild.h, pacing.h, evalworker.h).
#pragma once
#include <signal.h>
#include <stdbool.h>
#include "rollout/reward.h"
#include "backend.h"
#include "rollout/sampler.h"
#include "store/store.h"
#include "tokenizer/chat.h"

typedef struct {
    const char *model_dir, *run_url, *dataset, *worker_id;
    StoreOptions store;
    RewardConfig rewards;
    SamplerConfig sampler;
    int group_size, batch_size, max_new_tokens, max_prompt_tokens, groups_per_shard;
    int prefill_tokens;          // prompts prefilled together, up to this many tokens per call
    long seed, max_shards;
    long max_ahead;                  // pacing: < 0 auto (from the trainer's window), 0 never pause, N shards
    long worker_index, num_workers;  // num_workers > 0: partition instead of a shuffle
    bool chat;                       // wrap {"prompt"} rows as a user message in the chat template
    ChatSource chat_source;          // --chat-template, --chat-template-name, --chat-template-kwargs, --prompt-format
    bool generation_defaults;        // --generation-defaults: temperature/top_p/top_k from generation_config.json
    const char *const *stop_strings;
    int n_stop_strings;
    double wait_timeout;             // seconds to wait for an adapter (0: forever)
    bool eval;                       // evaluation worker
    const char *eval_dataset;
    long eval_every, eval_samples;
    bool eval_once;                  // evaluate the newest version, then exit (grpo-ctl eval / tests)
    const char *eval_adapter;        // eval_once: this adapter file instead of the run's newest (NULL: newest / none)
    const char *eval_out;            // eval_once: also write the JSON result here
    const void *eval_adapter_data;   // eval_once: the adapter file's bytes, read from the store URL eval_adapter (borrowed; NULL: read eval_adapter as a path)
    size_t eval_adapter_len;
    const char *eval_dump;           // eval_once: each scored completion as a JSON line to this file (NULL: none)
    bool eval_has_threshold;         // --success-threshold given: a completion is correct when its reward >= eval_threshold
    double eval_threshold;
    const char *env_cmd;             // --env: multi-turn episodes with this program (NULL: single completions)
    double env_timeout;              // --env-timeout seconds per answer
    int max_turns, max_episode_tokens;
    const char *tool_format;         // --tool-format: auto, hermes, llama3, none
    const char *serve;               // --serve HOST:PORT: the OpenAI-compatible endpoint is the environment (serve.h)
    const char *serve_cert, *serve_tls_key, *serve_api_key_file;
    const char *served_model_name;   // NULL: the model folder's name
    double episode_timeout;          // --episode-timeout: an endpoint episode idle this long fails
    int serve_max_requests;          // ad-hoc requests in flight
    int serve_max_connections;       // --serve-max-connections
    double serve_header_timeout, serve_idle_timeout;  // --serve-header-timeout, --serve-idle-timeout (seconds)
    Backend *backend;                // where the model computes (borrowed; NULL: the CPU)
    size_t max_memory;               // refuse a memory plan above this many bytes (0: the device's available memory)
    size_t kv_memory;                // the KV block pool's bytes (0: the full pool, or what max_memory leaves)
    int weights_dtype;               // --dtype: MODEL_DTYPE_AUTO or a DType for the base matrices (0: DT_F32)
    int kv_dtype;                    // --kv-dtype: MODEL_DTYPE_AUTO (kv_dtype_resolve) or DT_F32 / DT_BF16 / DT_F16 (0: DT_F32)
    bool strict_dtype;               // refuse a run whose trainer computes in another dtype (else warn)
} RolloutConfig;

int rollout_run(const RolloutConfig *cfg, volatile sig_atomic_t *stop, PailErr *err);
