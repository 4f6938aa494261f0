// Prompt datasets for grpo-rollout: JSON lines from a local file or a store URL
// (file:///abs/key, s3://bucket/key), one row per line, either {"prompt": str} or
// {"messages": [{"role", ...}, ...]} (optionally with "tools" for the chat template), plus any
// fields rewards need ("answer").
// Samplers turn a dataset into an endless sequence of row indices: a per-worker
// seeded shuffle (workers may join and leave) or a fixed k-of-n partition.
// Not here: chat templates and tokenization (src/tokenizer), rewards (reward.h).
#pragma once
#include <jansson.h>
#include <stdint.h>
#include "core/err.h"
#include "store/store.h"

typedef struct {
    const char *prompt;      // the "prompt" string, or NULL for a messages row (borrowed from fields)
    const json_t *messages;  // the "messages" array, or NULL for a prompt row (borrowed from fields)
    const json_t *tools;     // the "tools" array the chat template sees, or NULL (borrowed from fields)
    json_t *fields;          // the whole row object (owned by the dataset): rewards read it
    int64_t line;            // 1-based line number in the source, for messages
} DatasetRow;

typedef struct {
    char source[STORE_MAX_KEY + 256];  // path or URL as given, used in messages
    char sha256[65];                   // of the file bytes, for the run log
    DatasetRow *rows;                  // (n,) owned
    int64_t n;
} Dataset;

// Loads a local path, or a file:// / s3:// URL through the store (s3 options from
// the AWS_* environment). Errors name the source and line: `data/x.jsonl:17: ...`.
int dataset_load(Dataset **out, const char *path_or_url, PailErr *err);
// The same for an environment program's rows (grpo-rollout --env): any JSON object is a
// row (prompt and messages NULL when it has neither; checked as above when it has one).
int dataset_load_objects(Dataset **out, const char *path_or_url, PailErr *err);
// Loads `key` from an open store (grpo-rollout's run store with its flags).
int dataset_load_store(Dataset **out, Store *st, const char *key, PailErr *err);
// Parses JSON-lines text already in memory; name is used in messages.
int dataset_parse(Dataset **out, const char *text, size_t len, const char *name, PailErr *err);
void dataset_free(Dataset *ds);

// Every row has `field` as a string or a number (e.g. "answer" for exact_answer).
// The error counts the rows that do not and lists their first line numbers:
// `data/x.jsonl: 120 of 500 rows lack "answer" as a string or a number (needed by
// --reward exact_answer): lines 3, 7, 9, ...`; needed_by (NULL: left out) says why.
int dataset_check_field(const Dataset *ds, const char *field, const char *needed_by, PailErr *err);

typedef enum { DATASET_SHUFFLE = 0, DATASET_PARTITION = 1 } DatasetSampleMode;

typedef struct {
    const Dataset *ds;        // borrowed
    DatasetSampleMode mode;
    uint64_t seed, stream;    // shuffle: run seed, hash of the worker id
    int64_t index, count;     // partition: this worker is index of count
    int64_t *order;           // (n,) shuffle: this epoch's permutation (owned)
    int64_t epoch, pos;       // position within the current epoch
    int64_t drawn;            // rows returned so far
} DatasetSampler;

// Endless shuffle: each epoch is a fresh permutation of all rows determined only by
// (seed, worker_id, epoch), so two workers see different orders and a restarted
// worker with the same id repeats its own (dataset_sampler_seek resumes it).
int dataset_sampler_init(DatasetSampler *s, const Dataset *ds, uint64_t seed, const char *worker_id,
                         PailErr *err);
// Deterministic partition: rows index, index+count, index+2*count, ... in order,
// repeated endlessly. Fails when the partition is empty (index >= rows).
int dataset_sampler_init_partition(DatasetSampler *s, const Dataset *ds, int64_t index, int64_t count,
                                   PailErr *err);
int64_t dataset_sampler_next(DatasetSampler *s);  // the next row index
// Positions the sampler as if `drawn` rows had been returned since init.
void dataset_sampler_seek(DatasetSampler *s, int64_t drawn);
void dataset_sampler_free(DatasetSampler *s);
