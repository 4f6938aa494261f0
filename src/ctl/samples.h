// What grpo-ctl samples and grpo-ctl tensorboard share to show what the policy
// generated: a run's rollout shards (listed, picked by adapter version or by
// trainer step), one shard loaded with its group advantages, the tokenizer
// found by one rule, and token ids decoded with special tokens kept visible.
// Read-only: nothing here writes to the bucket.
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include "core/buf.h"
#include "core/err.h"
#include "grpo/loss.h"
#include "shard/shard.h"
#include "store/store.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    char key[STORE_MAX_KEY + 1];  // rollouts/v%08d/<worker>-%06d.h5
    long version, seq;
    char worker[65];
    int64_t mtime;  // the listing's (unix seconds): when the shard was put
} ShardRef;

typedef struct {
    ShardRef *v;  // owned, in key order: version ascending, then worker, then seq
    int n, cap;
} ShardRefs;

// Every shard key under rollouts/, or under rollouts/v%08d/ when version >= 0,
// appended to out (keys that are not shard keys are skipped).
int samples_list_shards(Store *st, long version, ShardRefs *out, PailErr *err);
void samples_refs_free(ShardRefs *r);

// A shard as read, with the advantages the trainer computes for its N episode
// rows (grpo_advantages over the shard's groups with the run's scaling).
typedef struct {
    RolloutShard s;  // owned (shard_read)
    float *adv;      // (N,) owned
    char key[STORE_MAX_KEY + 1];
} LoadedShard;

int samples_shard_load(Store *st, const char *key, ScaleRewards scale, LoadedShard *out, PailErr *err);
void samples_shard_free(LoadedShard *l);

// The run's advantage scaling: run.json's trainer."scale-rewards" (group when absent).
// batch: the batch here is the shard's groups (the trainer's step batch is not stored).
ScaleRewards samples_scale(const json_t *man);

// The tokenizer, by one rule: tokfile (a tokenizer.json) when given, else
// model/tokenizer.json when model is given, else run.json's base_model
// folder's tokenizer.json when it exists on this machine. src (cap bytes)
// gets the path used. -1 with a message saying which flag to pass.
int samples_tokenizer_open(const json_t *man, const char *model, const char *tokfile, Tokenizer **tok, char *src,
                           size_t cap, PailErr *err);
// 0 when tok is the one the shard was generated with (its tokenizer_sha256), else -1 naming both.
int samples_tokenizer_check(const Tokenizer *tok, const char *tok_src, const LoadedShard *l, PailErr *err);

// Step N of metrics/step-%08d.json: the adapter version it started from, the
// oldest version it may have drawn from (version - staleness_max, or run.json's
// --max-staleness when the record has none) and its commit time.
typedef struct {
    long version, oldest;
    double time;
} StepWindow;
int samples_step_window(Store *st, const json_t *man, long step, StepWindow *w, PailErr *err);
// The same from a metrics record already read (-1 when it has no version).
int samples_step_window_json(const json_t *man, const json_t *metrics, StepWindow *w);

// Appends the text of ids to out (special tokens as their text, invalid UTF-8
// as U+FFFD); out stays NUL-terminated (core/buf.h).
int samples_decode(const Tokenizer *tok, const int32_t *ids, size_t n, Buf *out, PailErr *err);
// Appends text with its control bytes other than newline and tab written as
// \xNN, as grpo-ctl samples prints them (0 / -1 out of memory).
int samples_visible(Buf *out, const uint8_t *s, size_t n);
