// How a fast CPU path shares work (internal to kernels/): on the team of a
// parallel region its caller already opened, or on a region of its own. On a
// backend with team_ops a decode step (transformer_extend) opens one region
// for all its ~20 ops a layer, so the team wakes once a step instead of once
// an op; an op called anywhere else opens its own region as before. Not for
// the CUDA twins.
//
// The contract of an op written this way:
//   - outside any parallel region (or in a one-thread one) it opens its own;
//   - inside an active region EVERY thread of the team must call it, with the
//     same arguments, in the same order as the other ops (never from inside an
//     `omp single` / `masked` / work-shared loop): each thread does its share
//     and the op returns after a barrier, its outputs whole on every thread;
//   - its body is a function (so that every local is private to the thread
//     in both cases) that splits work only with orphaned `#pragma omp for`
//     loops or omp_get_thread_num() / omp_get_num_threads() splits, never a
//     nested `omp parallel`. Code between two work-shared loops runs on every
//     thread: it must be the same on each and write nothing shared (or be an
//     `omp single`). A reduction across threads needs a shared target (a
//     local of the body is private). Every thread must reach the same
//     barriers: no early return that depends on the thread;
//   - the body ends WITHOUT a barrier (its last loop `nowait`, and any loop
//     whose results no later loop of the body reads): KERNEL_TEAM adds the
//     one barrier an op needs, the end of its own region or an explicit
//     barrier in the caller's, after which the next op may read what this one
//     wrote. (A loop's own barrier before the region's end would cost a second
//     wake-up an op where idle threads sleep.)
#pragma once
#include <omp.h>

// Runs `call` (a call of the op's body) on the current team inside an active
// parallel region, then a barrier; else under `#pragma omp parallel`.
#define KERNEL_TEAM(call)                  \
    do {                                   \
        if (omp_in_parallel()) {           \
            call;                          \
            _Pragma("omp barrier")         \
        } else {                           \
            _Pragma("omp parallel")        \
            { call; }                      \
        }                                  \
    } while (0)

// The same, but outside a region only opens one when `big` (the data-movement
// ops: a copy of a few KiB costs less than waking the team); else `call` runs
// on the calling thread, whose work-shared loops then run every iteration.
#define KERNEL_TEAM_IF(big, call)          \
    do {                                   \
        if (omp_in_parallel()) {           \
            call;                          \
            _Pragma("omp barrier")         \
        } else if (big) {                  \
            _Pragma("omp parallel")        \
            { call; }                      \
        } else {                           \
            call;                          \
        }                                  \
    } while (0)

// The size of the team a KERNEL_TEAM body runs on, for choices made before it
// (a path, a block size): the current team inside a region, else the team the
// op's own region will have.
static inline int kernel_team_size(void) {
    return omp_in_parallel() ? omp_get_num_threads() : omp_get_max_threads();
}
