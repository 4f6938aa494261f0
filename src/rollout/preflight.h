// Start-up checks of grpo-rollout, its --eval worker and grpo-ctl eval (all
// through rollout_run's setup), run after the dataset and the rewards are read
// and before the memory plan and the weights: a wrong setup is refused in one
// line at once instead of failing per batch or dying mid-run. Each is cheap
// (config.json, a stat, one store read). Not here: the memory plan (engine.c)
// and what only a batch can tell (reward_set_check_failing).
#pragma once
#include "core/err.h"
#include "rollout/dataset.h"
#include "rollout/reward.h"
#include "rollout/worker.h"
#include "store/store.h"

// Every row has each field the rewards read (reward_set_fields): the error
// counts the rows that lack it and names their first line numbers.
int preflight_dataset(const Dataset *ds, const RewardSet *rs, PailErr *err);
// --max-prompt-tokens, --max-new-tokens (--max-episode-tokens with --env) and
// their sum fit the model's positions (config.json max_position_embeddings, at
// most the RoPE table's 32768): else one line naming the flag, its value and
// the limit. --max-prompt-tokens 0 (auto) becomes what fits, at most
// PREFLIGHT_PROMPT_TOKENS, said in one log line. Every prompt within
// --max-prompt-tokens then fits with its completion; longer rows are skipped
// and counted.
#define PREFLIGHT_PROMPT_TOKENS 1024
int preflight_positions(RolloutConfig *c, PailErr *err);
// The program a command line runs (--reward-cmd, --env) exists and is
// executable, and so does the script an interpreter is given ("python3 x.py"):
// decided only for a plain command line (words without shell syntax); any other
// is run as it is and the first-batch rule catches it. what: the flag, for the message.
int preflight_program(const char *cmd, const char *what, PailErr *err);
// The run's store answers: run.json is read (a missing one is fine: the trainer
// may start later; an unreachable store too: the worker waits for it), and a run
// whose trainer expects another group size is refused. Other errors (credentials,
// a bucket that does not exist, a bad run.json) are returned.
int preflight_store(Store *st, const RolloutConfig *c, PailErr *err);
