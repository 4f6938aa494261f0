// The trainable state on the compute backend: one allocation of the backend's
// memory holds the parameters, their gradients and both AdamW moments, one
// flat layout (the LoRA layout's, or a full model's), so the optimizer runs
// where the gradients are. Only a double (the gradients' sum of squares)
// crosses to the host a step; the parameters and moments cross when loaded (a
// first version, a resume, --init-adapter) and saved (once per published
// version). The host never holds the gradients (but for --dump-grads). The
// one optimizer step of the code base: grpo-train, LoRA and full SFT; grpo-ctl
// logprobs holds an adapter here without the training half.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "backend.h"

typedef struct {
    double lr;              // this step's (the caller's schedule)
    float beta1, beta2, eps, weight_decay;
    float max_grad_norm;    // torch clip_grad_norm_; <= 0: no clipping
} TrainableHyper;

typedef struct Trainable Trainable;

// n parameters on be (borrowed, outlives it). train: gradients and moments too
// (zeroed). host_params: trained in place instead of in the allocation (full
// SFT's base weights on the CPU; only on a host-memory backend). The
// parameters start unset: trainable_load them. -1 with err (PAIL_ERR_NOMEM
// naming the bytes when the backend's memory is short).
int trainable_open(Trainable **out, Backend *be, size_t n, bool train, float *host_params, PailErr *err);
void trainable_close(Trainable *t);
// The backend memory the allocation holds: (train ? 4 : 1) x n floats (3 x n
// with host_params); for memory plans.
size_t trainable_bytes(size_t n, bool train);
size_t trainable_count(const Trainable *t);
Backend *trainable_backend(const Trainable *t);
// Arrays in the backend's memory (n floats each; grads NULL without train):
// the transformer's adapter and gradient arguments.
float *trainable_params(Trainable *t);
float *trainable_grads(Trainable *t);
// On a host-memory backend the host views of params, m and v (the arrays
// themselves: a save to them copies nothing); NULL elsewhere.
float *trainable_host_params(Trainable *t);
float *trainable_host_m(Trainable *t);
float *trainable_host_v(Trainable *t);

// Parameters (and moments; NULL: zero) from host arrays; the gradients are
// zeroed. The host arrays may be reused when it returns.
int trainable_load(Trainable *t, const float *params, const float *m, const float *v, PailErr *err);
// Parameters (and moments when m, v are given) into host arrays (it waits).
int trainable_save(Trainable *t, float *params, float *m, float *v, PailErr *err);
// The gradients into a host array (--dump-grads; it waits).
int trainable_save_grads(Trainable *t, float *grads, PailErr *err);
// One optimizer step, step counting from 1 (AdamW's bias correction): the
// gradients' sum of squares on the device (*sumsq, to the host), then either
// a skip (returns 1: not finite, or past float range, which would put inf
// into the second moment; nothing changes) or the clip factor and AdamW
// (returns 0); the gradients are zeroed either way. -1 with err when the
// backend fails.
int trainable_step(Trainable *t, const TrainableHyper *h, int step, double *sumsq, PailErr *err);
