// How closely the trainer's log-probs of the sampled tokens agree with the
// workers' behaviour log-probs on tokens the very weights it holds generated
// (staleness 0): there the two are one policy computed twice, so they differ
// only by numerics (the worker's dtype and kernels against the trainer's), and
// a gap beyond that is a bug. Not the importance ratio's statistics (loss.h),
// which mix in staleness. Metrics behaviour/* (doc/formats.md).
#pragma once
#include <stdbool.h>
#include <stdint.h>

typedef struct {     // accumulated over the micro-batches of a step (zero it first)
    double abs_sum;  // sum over tokens of |train - behaviour|
    double abs_max;  // their max (NaN sticks: a non-finite log-prob is reported, not hidden)
    double k3_sum;   // sum of exp(d) - 1 - d, d = train - behaviour
    int64_t tokens;  // tokens covered
} BehaviourAgree;

// Adds the tokens of the completions i < n with use[i] != 0: tokens
// [off[i], off[i+1]) of train_lp (the trainer's, at the sampling temperature)
// and behav_lp (the shard's).
void behaviour_agree_add(BehaviourAgree *a, const float *train_lp, const float *behav_lp, const int64_t *off, int n,
                         const uint8_t *use);

// The step's figures: max and mean |train - behaviour| and the mean k3, an
// estimate of KL(behaviour || train) from the behaviour's own samples. False
// (and nothing written) when no token was covered.
bool behaviour_agree_result(const BehaviourAgree *a, double *max, double *mean, double *k3);
