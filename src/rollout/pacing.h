// The rollout worker's pacing: which adapter version it generates with (the
// newest that verifies inside the trainer's staleness window; bad versions
// refused once), when (back pressure, --max-ahead; waiting for a newer
// version) and whether a finished shard is still wanted; run.json's checks.
// A part of the worker (worker_int.h), not a library: it reads the bucket.
#pragma once
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <jansson.h>
#include "core/err.h"

typedef struct Worker Worker;

typedef struct {
    long run_staleness;      // run.json's trainer max-staleness
    long trainer_window;     // the trainer's max_staleness as back pressure last read it (-1: unknown)
    long run_gps, run_publish_every;  // run.json's trainer groups-per-step (0: unknown) and publish-every
    bool seen_open, said_done;  // progress.json seen not done (or absent); a done run at start said
    bool done_idle;             // on a run done at start, back pressure would pause: the worker ends
    char progress_error[256];  // the last unreadable progress.json's message, said once
    long waiting_after;      // newest version for which "waiting for the next version" was said (-1: none)
    long *refused;           // (n_refused,) adapter versions that did not verify (owned)
    int n_refused, cap_refused;
} Pacing;

void pacing_init(Pacing *p);
void pacing_free(Pacing *p);

// Waits for run.json (--wait-timeout) and checks it against this worker's
// model, tokenizer, group size and dtype; keeps the run id and the trainer's
// settings. 0, or -1 with err.
int pacing_check_manifest(Worker *w, volatile sig_atomic_t *stop, PailErr *err);
typedef enum {
    RUN_OPEN,         // the trainer runs (or has not written progress.json yet)
    RUN_DONE,         // the trainer reached --steps after this worker saw the run open: exit
    RUN_DONE_BEFORE,  // done already as this worker started: work on (a trainer may continue it) until
                      // back pressure would pause it (then RUN_DONE)
} RunState;
// From trainer/progress.json's done (said once for RUN_DONE_BEFORE);
// *final_version gets the run's last adapter version when done.
RunState pacing_run_state(Worker *w, long *final_version);
// Whether a heartbeat (workers/<id>.json text) is a worker that may be writing
// a shard: not an eval worker's, nor one stopped, finished or failed (pacing
// leaves them out). Unreadable: true.
bool pacing_heartbeat_generates(const char *json, size_t len);
// Compares two heartbeats' feeds (worker_feeds: dataset sha256, rewards,
// chat template sha256) recorded in both; writes the first difference into
// why ("dataset b.jsonl (sha256 ab12..) where it has a.jsonl (sha256 cd34..)")
// and returns how many of the three differ.
int pacing_feeds_differ(const json_t *mine, const json_t *other, char *why, size_t cap);
// At start: one warning per other live generating worker fed differently
// (another dataset, rewards or chat template): the trainer would mix both.
void pacing_compare_feeds(Worker *w);
// The trainer's staleness window: progress.json's max_staleness, else run.json's.
long pacing_window(Worker *w);
// True when adapter version v did not verify before (it is never fetched again).
bool pacing_adapter_refused(const Worker *w, long v);
// Loads adapter version v onto the engine. 0, 1 when the adapter itself is bad
// (err says why), -1 for anything else (store, memory).
int pacing_adapter_load(Worker *w, long v, PailErr *err);
// The newest version in [lo, newest] (with every > 1: newest or a multiple of
// every) that verifies, loaded unless in use; *got -1 when none. 0, or -1 with err.
int pacing_adapter_pick(Worker *w, long newest, long lo, long every, long *got, PailErr *err);
// Nothing in [lo, newest] verifies: said once per newest version.
void pacing_say_waiting(Worker *w, long newest, long lo, long staleness);
// Pauses before a shard while the trainer has enough unused shards that this
// one would go stale (--max-ahead). True when it paused.
bool pacing_back_pressure(Worker *w, volatile sig_atomic_t *stop);
// Before a generated shard is written: 0 to write it; -1 (err: interrupted)
// when asked to drop the batch; 1 when the trainer moved past its version's
// window meanwhile (the sampler is put back to drawn_before).
int pacing_shard_wanted(Worker *w, volatile sig_atomic_t *stop, int64_t drawn_before, PailErr *err);
// Waits (10 s at most) for a version newer than after. 0 to go on, 1 when stopped, -1 with err.
int pacing_wait_newer(Worker *w, long after, volatile sig_atomic_t *stop, PailErr *err);
// A pause of ms: with --serve, spent answering the endpoint's ad-hoc requests.
void pacing_pause_ms(Worker *w, int ms);
