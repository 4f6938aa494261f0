// The rollout worker's state, shared by its parts: worker.c (setup, the loop,
// heartbeat, prompts), pacing.c and evalworker.c. Internal to src/rollout;
// the engine (engine.h) and the shard builder (shardbuild.h) do not see it.
#pragma once
#include "core/buf.h"
#include "rollout/dataset.h"
#include "rollout/engine.h"
#include "rollout/generate.h"
#include "rollout/pacing.h"
#include "rollout/reward.h"
#include "store/runlayout.h"
#include "tokenizer/chat.h"

typedef struct {
    int32_t *ids;         // (n,) owned
    int n;
    char *text;           // the prompt as the model sees it, for rewards (owned)
} Prompt;

struct Worker {
    const RolloutConfig *cfg;  // borrowed
    Engine eng;                // the model, generation, and the adapter in use
    Pacing pace;
    Tokenizer *tok;
    ChatTemplate chat;
    bool have_chat;
    PailErr chat_err;     // why there is no chat template (when !have_chat)
    long env_batches;     // episode batches started (their ids' prefix)
    Store *st;
    Dataset *ds;
    DatasetSampler smp;
    RewardSet *rs;        // single completions' rewards (NULL with episodes)
    char worker_id[WORKER_ID_MAX + 1];
    char tok_sha[65];
    char run_id[128];
    long version;         // loaded adapter version, -1: none
    long seq;             // next shard sequence number
    long shards;
    double gen_tokens, gen_seconds;
    // the generator's KV pool: the most blocks held in one shard, preemptions and tokens recomputed, all shards
    int64_t kv_peak_blocks, kv_preemptions, kv_recomputed_tokens;
    char last_error[512];
    double last_heartbeat;
    uint8_t *row_refused;  // (rows,) 1: longer than --max-prompt-tokens, skipped (owned)
    long skipped_prompts;  // rows refused so far
    long stale_unwritten;  // shards not written: their version had left the trainer's window meanwhile
    bool abandon_stale;    // this shard: abandon it when a newer adapter is out (window 0: it would be dropped)
    double next_version_check;
    double loaded_at;             // when the adapter in use was loaded (time_mono_s), 0 once its first tokens are said
    bool say_first_tokens;        // this batch: log the first tokens' delay after loaded_at (adapter_outdated)
    volatile sig_atomic_t *stop;  // the caller's stop flag
    bool stop_seen;               // --serve, --env: control/stop found while a batch waited for agents / episodes
    bool done_seen;               // --env: the run was done (trainer at --steps) while a batch's episodes ran
    bool run_done;                // --serve: the run ended while a batch waited: what is in flight ends, then it exits
    double next_stop_check;
    int64_t busy_since;           // --eval: unix time the evaluation under way began, 0 when none
};

// Sets j's "role", "dataset", "rewards" and "chat_template": what feeds this worker.
void worker_feeds(Worker *w, json_t *j);
// Writes workers/<id>.json: state, version, counters, worker_feeds.
void worker_heartbeat(Worker *w, const char *state);
// A signal, or control/stop in the bucket.
bool worker_stop_requested(Worker *w, volatile sig_atomic_t *stop);
// Dataset row r as a prompt: 0 (*out the caller's: prompt_free), 1 when
// longer than --max-prompt-tokens (skipped, said once), -1 with err.
int worker_prompt_encode(Worker *w, int64_t r, Prompt *out, PailErr *err);
void prompt_free(Prompt *p);
// Scores N = P * G completions of prompts pr (dataset rows rows[p]) into
// comp (N, K), total and valid: reward_set_score_batch's result, warn its message.
int worker_score(Worker *w, const Prompt *pr, const int64_t *rows, const GenCompletion *out, int N, int G,
                 float *comp, float *total, uint8_t *valid, PailErr *warn);
