// Reward functions for grpo-rollout, combined with weights from --reward NAME[:WEIGHT]
// specs: exact_answer, format (PCRE2 regex), length (penalty beyond a target) and cmd
// (an external program speaking JSON lines). Each component is kept unweighted for
// the shard's reward_components; the total is sum_k weight_k * component_k.
// doc/rewards.md describes each reward, its options and the cmd protocol.
// Thread safety: a RewardSet is used by one thread at a time (regex match data, pipes).
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/err.h"

#define REWARD_MAX 16  // components per set (<= SHARD_MAX_COMPONENTS)

typedef struct {
    // "NAME[:WEIGHT]" (borrowed), e.g. "exact_answer", "format:0.5"; cmd rewards may be
    // named, "cmd:JUDGE[:WEIGHT]", one component "cmd:JUDGE" each (metric rewards/cmd:JUDGE/mean)
    const char *const *specs;
    int nspecs;
    const char *answer_field;   // dataset field with the reference answer; NULL -> "answer"
    const char *answer_marker;  // --answer-marker, e.g. "####"; NULL or "" -> none
    const char *format_regex;   // --format-regex (PCRE2), needed by "format"
    int64_t length_target;      // --length-target tokens, needed by "length" (> 0)
    // --reward-cmd programs, run with /bin/sh -c: "JUDGE=PROGRAM" for cmd:JUDGE, a plain
    // "PROGRAM" for the unnamed cmd; each cmd reward needs one, and each one a cmd reward.
    const char *const *cmds;
    int ncmds;
    const char *cmd;            // one more plain PROGRAM (for callers with a single cmd), or NULL
    double cmd_timeout_s;       // --reward-timeout per batch (each program); 0 -> 30
} RewardConfig;

// One completion to score. prompt is the text the model was given; row is the
// dataset row (its fields go to the cmd program; exact_answer reads answer_field).
typedef struct {
    const char *prompt;
    const char *completion;
    int64_t completion_tokens;
    const json_t *row;          // borrowed, may be NULL
} RewardInput;

typedef struct RewardSet RewardSet;

// Parses the specs and compiles what they need (regex, program command). Bad specs,
// duplicates, missing options or a bad regex fail here with a message naming them.
// The cmd program starts lazily at the first batch.
int reward_set_build(RewardSet **out, const RewardConfig *cfg, PailErr *err);
void reward_set_free(RewardSet *rs);  // stops the cmd program (EOF, then kill after 1 s)
int reward_set_count(const RewardSet *rs);                 // K
const char *const *reward_set_names(const RewardSet *rs);  // K names, for reward_components
const float *reward_set_weights(const RewardSet *rs);      // K weights
// "exact_answer:1 format:0.5 ..." with the options in use, for the run log.
void reward_set_describe(const RewardSet *rs, char *buf, size_t cap);

// The dataset fields the set's rewards read from every row: exact_answer's answer
// field (the cmd program gets every field; which it needs only it knows). Writes up to
// cap (field, reward) pairs, pointers into rs; returns how many.
int reward_set_fields(const RewardSet *rs, const char **fields, const char **rewards, int cap);
// The i-th cmd reward's command line (NULL past the last), for the start-up check of its program.
const char *reward_set_cmd(const RewardSet *rs, int i);
// Whether a spec names a reward of this kind ("cmd:judge:2" is a cmd): for callers
// that describe a set without building it.
bool reward_spec_is(const char *spec, const char *kind);

// Batches that fail every completion stop the worker: the first one scored, or
// REWARD_FAILED_BATCHES in a row (a broken reward program or a wrong option, not
// a model that is still learning: a failed reward is never a 0 reward).
#define REWARD_FAILED_BATCHES 3
// After reward_set_score_batch: 0 to go on, or -1 with err saying that every
// reward of the first batch (or of REWARD_FAILED_BATCHES in a row) failed and
// why (warn: that batch's warning, with the cmd program's stderr tail).
int reward_set_check_failing(const RewardSet *rs, const PailErr *warn, PailErr *err);

// Scores n completions: components (n, K) unweighted, total (n,), valid (n,).
// A completion whose reward could not be computed (cmd crash/timeout/non-number,
// a missing answer field, a regex match error) gets valid 0, total 0 and 0 for the
// failed component. Returns the number of invalid completions (warn then says why,
// with the cmd program's stderr), or -1 only for out of memory (err in warn).
// Never exits or raises a signal: a failed program is restarted at the next batch.
int reward_set_score_batch(RewardSet *rs, const RewardInput *in, int64_t n, float *components,
                           float *total, uint8_t *valid, PailErr *warn);
// One completion (a batch of one).
int reward_set_score(RewardSet *rs, const char *prompt_text, const char *completion_text,
                     int64_t completion_tokens, const json_t *row, float *components, float *total,
                     uint8_t *valid, PailErr *warn);
