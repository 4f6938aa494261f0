// Retention of a run's versioned objects: delete adapters, trainer states and
// rollout versions older than the newest N, never anything inside the
// trainer's staleness window (doc/protocol.md). Used by grpo-train
// --keep-versions and grpo-ctl gc.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "store/store.h"

typedef struct {
    int64_t adapters, states, shards;  // objects deleted (or that would be, with dry_run); evals are kept
    int64_t cutoff;                           // versions below it were removed
} GcStats;

// keep >= 1 newest versions stay; max_staleness (>= 0) versions behind the
// newest stay too. Deleting needs the operator role behind a grpo-relay.
int run_gc(Store *st, long keep, long max_staleness, bool dry_run, GcStats *stats, PailErr *err);
