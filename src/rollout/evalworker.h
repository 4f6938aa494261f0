// The eval worker (grpo-rollout --eval, grpo-ctl eval): scores an adapter
// version on every row of the eval dataset and writes the result (see
// evalworker.c). A part of the worker (worker_int.h): the loop that picks the
// versions is worker.c's. The accuracy rule and the distinct count are pure
// and exposed for the tests.
#pragma once
#include <stdbool.h>
#include "core/err.h"

typedef struct Worker Worker;

// When a completion counts as correct, and so whether accuracy is defined.
typedef enum {
    EVAL_ACC_NONE,       // not defined: a partial-credit reward and no --success-threshold
    EVAL_ACC_COMPONENT,  // a binary component == 1 (exact_answer, or format alone)
    EVAL_ACC_THRESHOLD,  // --success-threshold X: total reward >= X
} EvalAccKind;

typedef struct {
    EvalAccKind kind;
    int component;      // EVAL_ACC_COMPONENT: its index among the K components
    double threshold;   // EVAL_ACC_THRESHOLD
    char rule[160];     // "exact_answer == 1", "reward >= 0.5"; EVAL_ACC_NONE: why it is not defined
} EvalAccuracy;

// Chooses the rule from the declared reward kinds (names: the K components of
// the reward set; K 0 for --env episodes, whose program gives the rewards):
// --success-threshold (has_threshold) wins; else exact_answer == 1 when
// exact_answer is in the set; else a lone format == 1; else none, with why.
void eval_accuracy_rule(const char *const *names, int K, bool has_threshold, double threshold, EvalAccuracy *out);
// Whether one completion is correct under a (EVAL_ACC_NONE: never): comp its
// K components (may be NULL unless kind is EVAL_ACC_COMPONENT), total its reward.
bool eval_correct(const EvalAccuracy *a, const float *comp, double total, bool valid);
// Distinct strings among texts[0..n) (reorders the array).
int eval_distinct(const char **texts, int n);

// Evaluates the adapter on the engine (version v, -1: the base model; label
// names it in the log) and writes the result (and, in a run, its completions
// to eval/samples/v%08d.jsonl first; --dump: to that file). 0 / -1 with err.
int evalworker_version(Worker *w, long v, const char *label, PailErr *err);
// grpo-ctl eval: the adapter --adapter (a file, a PEFT folder, or the bytes
// ctl read from a store URL), else the run's newest version, else the base
// model, evaluated once. 0 / -1 with err.
int evalworker_once(Worker *w, PailErr *err);
