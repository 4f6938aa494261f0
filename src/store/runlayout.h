// The run's key layout (doc/protocol.md): every key a tool reads or writes under
// a run prefix is built here, so the layout is written down once.
#pragma once
#include <jansson.h>
#include <stddef.h>
#include "core/err.h"
#include "store/store.h"

#define RUN_KEY_MANIFEST "run.json"
#define RUN_KEY_LATEST "adapters/LATEST"
#define RUN_KEY_PROGRESS "trainer/progress.json"
#define RUN_KEY_STOP "control/stop"
#define WORKER_ID_MAX 64

// [A-Za-z0-9_.-]{1,64}; returns 0 or -1 with a message naming the id.
int worker_id_check(const char *id, PailErr *err);
// A unique default id: Slurm job/array/proc ids when present
// (s<job>[-a<array task>]-p<proc>), else <host>-<pid>; sanitized to the id rules.
void worker_id_default(char *out, size_t cap);

int run_key_rollout(char *out, size_t cap, long version, const char *worker, long seq);  // rollouts/v%08d/<w>-%06d.h5
int run_key_rollout_dir(char *out, size_t cap, long version);                            // rollouts/v%08d/
int run_key_metrics(char *out, size_t cap, long step);                                   // metrics/step-%08d.json
int run_key_worker(char *out, size_t cap, const char *worker);                           // workers/<w>.json
int run_key_rejected(char *out, size_t cap, const char *shard_key);                      // trainer/rejected/<key>.json
int run_key_eval_samples(char *out, size_t cap, long version);                           // eval/samples/v%08d.jsonl
// The version of an eval/samples/v%08d.jsonl key (an eval's scored completions,
// beside its eval/v%08d.json), or -1 when key is not one.
long run_parse_eval_samples(const char *key);
// Parses rollouts/v%08d/<worker>-%06d.h5; -1 when the key is not a shard key.
int run_parse_rollout(const char *key, long *version, char *worker, size_t wcap, long *seq);

// Publishes run.json create-only; when one exists, checks that each field named
// in must_match (NULL-terminated, top-level keys) is equal, and refuses with a
// message naming the first field that differs. *existing (optional) gets the
// stored manifest (caller json_decref).
int run_manifest_publish(Store *st, json_t *manifest, const char *const *must_match, json_t **existing,
                         PailErr *err);
int run_manifest_read(Store *st, json_t **out, PailErr *err);
