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

// The run prefixes every role may be given (grpo-ctl doctor probes each). NULL-terminated.
extern const char *const RUN_PREFIXES[];
// grpo-ctl doctor's probe keys: <prefix>doctor-probe-<id> and
// <prefix>doctor-create-only-<id>, left behind when its credentials could
// write but not delete.
#define RUN_PROBE_PROBE "doctor-probe-"
#define RUN_PROBE_CREATE_ONLY "doctor-create-only-"
// Deletes doctor's probe keys under every run prefix; *n gets how many (or
// would be, with dry_run).
int run_gc_probes(Store *st, bool dry_run, int64_t *n, PailErr *err);

// keep >= 1 newest versions stay; max_staleness (>= 0) versions behind the
// newest stay too. Deleting needs the operator role behind a grpo-relay.
int run_gc(Store *st, long keep, long max_staleness, bool dry_run, GcStats *stats, PailErr *err);
