// The reward flags of every tool that scores completions (grpo-rollout, grpo-ctl
// eval): one spelling, one help text, one reading of them into a RewardConfig.
// REWARD_CLI_FLAGS(v) expands to those entries of a Flag table. The rewards
// themselves: reward.h, doc/rewards.md.
#pragma once
#include "core/flags.h"
#include "rollout/reward.h"

typedef struct {
    FlagList specs;             // --reward NAME[:WEIGHT], cmd:JUDGE[:WEIGHT]
    FlagList cmds;              // --reward-cmd [JUDGE=]PROGRAM
    char *answer_field, *answer_marker, *format_regex;
    long length_target;
    double cmd_timeout_s;
} RewardCliFlags;

#define REWARD_CLI_NFLAGS 7
#define REWARD_CLI_FLAGS(v)                                                                                      \
    {"reward", FLAG_LIST, &(v)->specs, "exact_answer", 1, 0,                                                     \
     "NAME[:WEIGHT]: exact_answer, format, length, cmd; several cmd rewards are named, cmd:JUDGE[:WEIGHT] "      \
     "(metric rewards/cmd:JUDGE/mean)"},                                                                         \
    {"answer-field", FLAG_STRING, &(v)->answer_field, "answer", 1, 0,                                            \
     "exact_answer: the dataset field with the reference answer"},                                               \
    {"answer-marker", FLAG_STRING, &(v)->answer_marker, NULL, 1, 0,                                              \
     "exact_answer: the answer follows this text (e.g. ####)"},                                                  \
    {"format-regex", FLAG_STRING, &(v)->format_regex, NULL, 1, 0, "format: PCRE2 pattern the completion must match"}, \
    {"length-target", FLAG_INT, &(v)->length_target, "0", 0, 1 << 24, "length: tokens before the penalty starts"}, \
    {"reward-cmd", FLAG_LIST, &(v)->cmds, NULL, 1, 0,                                                            \
     "cmd: external reward program (JSON lines in, numbers out; run with /bin/sh -c), JUDGE=PROGRAM for "        \
     "cmd:JUDGE; without --reward it selects --reward cmd; its program (and an interpreter's script) must "      \
     "exist at start, and a first batch of failed rewards, or 3 in a row, stops the worker"},                    \
    {"reward-timeout", FLAG_DOUBLE, &(v)->cmd_timeout_s, "30", 0.01, 86400, "cmd: seconds per batch (each program)"}

// After flags_parse: *out points into v. A --reward-cmd with --reward not given
// selects the cmd reward (one program; several need --reward cmd:JUDGE each).
// 0, or 2 after printing "prog: what is wrong" (a usage error).
int reward_cli_config(const char *prog, const RewardCliFlags *v, int argc, char **argv, RewardConfig *out);
// The first reward flag argv gives ("--reward-cmd"), or NULL: --env and --serve
// take none (their environment or agents give the rewards).
const char *reward_cli_given(int argc, char **argv);
