// The trainer/worker log-prob agreement at staleness 0 (agree.h).
// k3 (Schulman, "Approximating KL divergence", 2020): for x ~ q and
// r = p(x) / q(x), E_q[r - 1 - log r] = KL(q || p), unbiased and >= 0 per
// sample. The tokens were sampled by the workers, so q is the behaviour
// policy and p the trainer's: d = log r = train - behaviour (then r is the
// importance ratio the loss uses). expm1(d) - d keeps the d^2 / 2 that
// exp(d) - 1 - d loses to cancellation when d is a float rounding (1e-7).
#include "grpo/agree.h"
#include <math.h>

void behaviour_agree_add(BehaviourAgree *a, const float *train_lp, const float *behav_lp, const int64_t *off, int n,
                         const uint8_t *use) {
    for (int i = 0; i < n; i++) {
        if (!use[i]) continue;
        for (int64_t t = off[i]; t < off[i + 1]; t++) {
            double d = (double)train_lp[t] - (double)behav_lp[t], ad = fabs(d);
            a->abs_sum += ad;
            if (isnan(ad) || ad > a->abs_max) a->abs_max = ad;  // stays NaN once NaN
            a->k3_sum += expm1(d) - d;
            a->tokens++;
        }
    }
}

bool behaviour_agree_result(const BehaviourAgree *a, double *max, double *mean, double *k3) {
    if (a->tokens <= 0) return false;
    *max = a->abs_max;
    *mean = a->abs_sum / (double)a->tokens;
    *k3 = a->k3_sum / (double)a->tokens;
    return true;
}
