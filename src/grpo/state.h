// Trainer state files (trainer/state-v%08d.h5, format "pail.trainer_state"):
// everything a restarted trainer needs from the bucket alone: the adapter
// (its exact published file bytes, so a missed commit is re-published
// identically, and its tensors for h5py users), AdamW moments, step, version,
// RNG, the consumption record of every shard still inside the staleness
// window, and the groups consumed by the steps this version commits, in order
// (record/*, with record_parent: the state version the trainer continued from,
// so the chain of states back to v0 is the whole run). Layout in doc/formats.md.
#pragma once
#include <stdint.h>
#include "core/buf.h"
#include "core/rng.h"
#include "grpo/feed.h"
#include "lora/lora.h"

#define STATE_FORMAT "pail.trainer_state"
#define STATE_FORMAT_VERSION 1

typedef struct {
    int64_t step, version;
    char run_id[128];
    Rng rng;
    int64_t consumed, dropped, rejected;  // cumulative shard counters
    int64_t skipped_steps;                // cumulative steps skipped for non-finite gradients
    // The trainer's last re-listing of the versions behind its window (feed.h):
    // every shard of a version >= late_listed_from that landed before the wall
    // clock late_listed_unix is counted (-1: none yet, or an older state).
    int64_t late_listed_unix, late_listed_from;
    LoraLayout layout;
    float *params, *m, *v;  // (n_params) each, owned after state_read
    Buf adapter_image;      // the adapter file as published for this version (owned)
    int nshards;            // consumption record
    char **keys;
    int64_t *versions;
    int32_t *n_groups, *used;
    // The metrics lines (JSON, one per line) of the steps this version commits:
    // written to metrics/ and --metrics only after the commit, and again on a
    // resume that finds them missing (owned after state_read; borrowed to write).
    Buf metrics;
    // The groups the steps of this version consumed, in order (borrowed to
    // write; owned after state_read), and the state version this one follows:
    // -1 for v0, -2 when read from a state written before the record existed.
    FeedRecord *rec;
    int rec_n;
    int64_t parent;
} TrainerState;

// Serializes st (params/m/v borrowed) into an HDF5 image appended to out.
int state_write(const TrainerState *st, Buf *out, PailErr *err);
// Parses a state image against the model's config; allocates what it returns.
int state_read(TrainerState *st, const void *data, size_t len, const char *name, const ModelConfig *mc, PailErr *err);
void state_free(TrainerState *st);  // frees what state_read allocated
// The consumption record alone from a state image (record/*: the groups the
// steps of this version committed, in order), without the model's config: for
// tools that show what a step trained on. *rec is owned by the caller (NULL
// with *n = 0 when the version commits no step); -1 with err for a state
// written before the record existed, or a bad one.
int state_read_record(const void *data, size_t len, const char *name, FeedRecord **rec, int *n, PailErr *err);
