// The rollout worker's pacing: which adapter version it generates with (the
// newest that verifies inside the trainer's staleness window; bad versions
// refused once), when (back pressure, --max-ahead; waiting for a newer
// version) and whether a finished shard is still wanted; run.json's checks.
// A part of the worker (worker_int.h), not a library: it reads the bucket.
#pragma once
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/err.h"

typedef struct Worker Worker;

typedef struct {
    long run_staleness;      // run.json's trainer max-staleness
    long trainer_window;     // the trainer's max_staleness as back pressure last read it (-1: unknown)
    long run_gps, run_publish_every;  // run.json's trainer groups-per-step (0: unknown) and publish-every
    bool seen_open, said_done;  // progress.json seen not done (or absent); a done run at start said
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
// True when trainer/progress.json says the run is done (the trainer reached
// --steps) and it was not done before (a run done as the worker starts is
// said once and worked on: a trainer may continue it); *final_version gets
// its last adapter version.
bool pacing_run_done(Worker *w, long *final_version);
// Whether a heartbeat (workers/<id>.json text) is a worker that writes shards:
// an eval worker's is not (pacing leaves it out). Unreadable: true.
bool pacing_heartbeat_generates(const char *json, size_t len);
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
