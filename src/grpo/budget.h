// grpo-train's --token-budget auto (0, the default): the tokens of one packed
// micro-batch, chosen before the weights load from what the run needs and what
// the memory plan fits, instead of a fixed 16384 (18 GiB of activations for a
// 135M model). The rule (doc/performance.md): one group per micro-batch, G x
// --max-seq-tokens, at most BUDGET_AUTO_CAP and at least --max-seq-tokens (a
// micro-batch holds the longest sequence); halved while the plan does not fit
// the memory (--max-memory, else what is available), not below
// --max-seq-tokens; then the same with --recompute on. An explicit
// --token-budget is taken as given (and refused when it does not fit).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "core/err.h"
#include "grpo/trainer.h"
#include "model/memplan.h"

#define BUDGET_AUTO_CAP 4096        // tokens: past this a forward is long enough to keep a device busy
#define BUDGET_MAX_SEQ_DEFAULT 1280 // grpo-rollout's --max-prompt-tokens 1024 + --max-new-tokens 256

// Builds the plan of a budget of T tokens with or without recompute (0, or -1 with err).
typedef int (*BudgetPlanFn)(void *ctx, int T, bool recompute, MemoryPlan *mp, PailErr *err);

typedef struct {
    int token_budget;
    bool recompute;         // turned on (or given)
    size_t total, limit;    // the chosen plan's bytes and the memory it was fitted to (0: unknown)
    char why[320];          // one line: what was chosen and why
} BudgetChoice;

// G: completions per group; max_seq: the longest prompt + completion; recompute:
// --recompute given; limit: --max-memory bytes (0: the host's available memory).
// When nothing fits, the smallest plan with recompute is chosen (the caller's
// memplan_check then refuses it with its sizes). 0, or -1 with err from fn.
int budget_choose(int G, int max_seq, bool recompute, size_t limit, BudgetPlanFn fn, void *ctx, BudgetChoice *out,
                  PailErr *err);
// grpo-train: chooses c->token_budget (and c->recompute) for c->max_seq_tokens with
// trainer_memplan, says so in one log line and records both in c->effective.
int train_budget_choose(TrainerConfig *c, PailErr *err);
