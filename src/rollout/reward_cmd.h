// The cmd reward's external program (reward_cmd.c): started once with /bin/sh -c
// in its own process group, fed JSON lines on stdin, answering one number per line
// on stdout. Crashes, timeouts, non-numbers and surplus output fail only the
// affected completions; the program is restarted (with backoff) at the next batch.
// Protocol and failure rules: doc/rewards.md.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

typedef struct RewardCmd RewardCmd;

// Keeps a copy of cmd; the program starts at the first batch. timeout_s > 0.
int reward_cmd_init(RewardCmd **out, const char *cmd, double timeout_s, PailErr *err);
// Closes the program's stdin, waits up to 1 s for it to exit, then kills its group.
void reward_cmd_free(RewardCmd *c);
// Writes `text` (n lines, each ending in '\n') and reads n answers within one
// timeout. scores[i] and ok[i] (1 = a finite number arrived) for each line. Returns
// the number of failed answers (warn says what happened, with the program's stderr
// tail), or -1 with warn on out of memory.
int reward_cmd_run(RewardCmd *c, const char *text, size_t len, int64_t n, double *scores, uint8_t *ok,
                   PailErr *warn);
// Batches in a row that ended in a crash or timeout (0 after a clean batch).
int reward_cmd_failures(const RewardCmd *c);
