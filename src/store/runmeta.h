// The run's two shared JSON records, each with one typed reader and writer:
// run.json (RunInfo: what the first trainer was started with and what every
// worker must share) and trainer/progress.json (Progress: where the running
// trainer is, its window, what it used, whether the run is done). Every tool
// reads them through here (doc/protocol.md); older spellings are read too, one
// is written. Not the key layout (runlayout.h) nor the heartbeats.
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "store/store.h"

// grpo-train's --max-staleness default, and what a run.json without it means.
#define RUN_DEFAULT_MAX_STALENESS 4

typedef struct {
    char run_id[128];
    char *base_model;            // the trainer's --model path as given (owned; "" when absent)
    char base_sha256[65];
    char tokenizer_sha256[65];   // "" when the model folder had no tokenizer.json
    char compute_dtype[48];      // "f32" when absent (a trainer from before --dtype)
    char *task;                  // --task (owned; NULL when absent)
    int64_t created_unix;
    // What workers must share with the trainer.
    long group_size;             // G (0: absent)
    long groups_per_step;        // 0: absent
    long max_staleness;          // RUN_DEFAULT_MAX_STALENESS when absent
    long publish_every;          // 1 when absent
    long steps;                  // the trainer's --steps (0: absent)
    int lora_rank;               // 0: absent
    double lora_alpha;
    char lora_targets[128];      // "q_proj,v_proj" ("" when absent)
    bool lora_rslora;
    json_t *trainer;             // every flag's effective value, for reproduction (owned; NULL: none)
} RunInfo;

// Zeroes ri and sets the defaults of absent fields.
void runinfo_init(RunInfo *ri);
void runinfo_free(RunInfo *ri);
// run.json as a JSON object (caller json_decref), or NULL when out of memory.
json_t *runinfo_to_json(const RunInfo *ri);
// Parses run.json text (name: for messages). A field of the wrong type is an
// error naming it ("run.json: field 'group_size' is a string, expected an
// integer"); absent fields keep their defaults. Old spellings (the trainer's
// flags under "trainer": "max-staleness", "groups-per-step", ...) are read
// when the new field is absent. 0, or -1 with err (ri then holds nothing).
int runinfo_parse(const char *text, size_t len, const char *name, RunInfo *ri, PailErr *err);
// Reads run.json from the run (PAIL_ERR_NOT_FOUND when there is none).
int runinfo_read(Store *st, RunInfo *ri, PailErr *err);

typedef struct {
    long version, step;          // the trainer's adapter version and step (-1, 0 when absent)
    long consumed_shards, dropped_shards, rejected_shards, steps_skipped;
    long max_staleness;          // the running trainer's window (-1: absent)
    long groups_per_step;        // 0: absent
    int64_t time;                // unix seconds of the write
    bool done;                   // the trainer reached --steps: no more versions come
    long final_version;          // with done: the last adapter version (-1 otherwise)
    long steps_target;           // the trainer's --steps (0: absent)
    // Per version (decimal string) -> shards, inside the window: listed but not
    // used up, and used up (owned JSON objects of integers; never NULL after parse).
    json_t *pending_by_version, *used_by_version;
} Progress;

void progress_init(Progress *p);
void progress_free(Progress *p);
// Shards of version v the trainer has used up (0 when not recorded).
long progress_used(const Progress *p, long v);
json_t *progress_to_json(const Progress *p);
// Like runinfo_parse, for trainer/progress.json.
int progress_parse(const char *text, size_t len, const char *name, Progress *p, PailErr *err);
// Reads trainer/progress.json (PAIL_ERR_NOT_FOUND when there is none).
int progress_read(Store *st, Progress *p, PailErr *err);
// Writes trainer/progress.json (overwritten: it is a status, not a version).
int progress_write(Store *st, const Progress *p, PailErr *err);
