// Drawing next tokens on the model's backend: the slots' RNG streams, the
// rows' logits-row and slot maps, the stop ids, the sampler's workspace and
// its outputs live in one backend block; per call the row maps go down and the
// sampled ids, their log-probs and stop flags come back, never the logits.
// Used by the group generator (generate.c) and the episode engine (episode.c).
// Not thread-safe: one caller at a time.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "backend.h"
#include "core/rng.h"

typedef struct TokenDraw TokenDraw;

// Plans for up to `slots` rows a call over a vocabulary of V. stop_ids
// (copied) flag the rows that drew one. truncation: some call may use top-k
// or top-p (a CUDA backend then plans the sort's buffers). Allocates once.
int token_draw_init(TokenDraw **out, Backend *be, int slots, int V, const int32_t *stop_ids, int n_stop,
                    bool truncation, PailErr *err);
void token_draw_free(TokenDraw *d);
// Slot s's stream starts at r (an episode or a sample taking the slot).
int token_draw_seed(TokenDraw *d, int slot, const Rng *r, PailErr *err);
// *r = slot s's stream where it is now (a preempted sample keeps it to go on
// from there when it resumes, token_draw_seed).
int token_draw_stream(TokenDraw *d, int slot, Rng *r, PailErr *err);
// Row a (of n <= slots) draws from row lrow[a] of logits (backend memory,
// (*, V)) with slot rslot[a]'s stream (host arrays; distinct slots). The
// results are the host arrays below, valid until the next call.
int token_draw_run(TokenDraw *d, const float *logits, const int *lrow, const int *rslot, int n, const SampleParams *sp,
                   PailErr *err);
const int32_t *token_draw_tok(const TokenDraw *d);
const float *token_draw_logp(const TokenDraw *d);
const uint8_t *token_draw_stopped(const TokenDraw *d);
