// The learning-signal warning (signal_warn.h).
#include "grpo/signal_warn.h"
#include <stdio.h>

double signal_flat_fraction(double frac_reward_zero_std, double groups, double dropped) {
    double all = groups + (dropped > 0 ? dropped : 0);
    return all > 0 ? (frac_reward_zero_std * groups + (dropped > 0 ? dropped : 0)) / all : 0.0;
}

int signal_flat_warning(const double *flat, int n, char *buf, size_t cap) {
    int run = 0;
    double sum = 0;
    while (run < n && flat[run] >= SIGNAL_FLAT_FRACTION) sum += flat[run++];
    if (cap) buf[0] = 0;
    if (run < SIGNAL_FLAT_STEPS) return run;
    snprintf(buf, cap,
             "no learning signal: %.0f%% of the groups of the last %d steps had equal rewards (zero variance, "
             "frac_reward_zero_std; their advantage is 0). Usual causes: the sampling temperature (too low: the G "
             "completions are alike; too high: all noise), a reward that gives every completion the same value "
             "(see grpo-ctl samples), or a task too easy (every completion right) or too hard (every one wrong) "
             "for this model",
             100 * sum / run, run);
    return run;
}

int clip_warning(double clipped, double n, double frac_zero_std, double max_new, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    if (!(n > 0) || clipped * 2 <= n) return 0;
    if (clipped >= n && frac_zero_std >= 1.0) {
        snprintf(buf, cap,
                 "NOTHING IS LEARNED: every completion of the step (%.0f) hit the generation budget, "
                 "--max-new-tokens %.0f, and every group's rewards are equal, so the advantages, the loss and the "
                 "gradient are all 0. The answers are cut off before they end: raise --max-new-tokens on the workers "
                 "(--max-episode-tokens for episodes; doc/rollout.md, \"Long completions\")",
                 n, max_new);
        return 2;
    }
    snprintf(buf, cap,
             "%.0f%% of the step's completions (%.0f of %.0f) hit the generation budget, --max-new-tokens %.0f "
             "(completions/clipped_ratio %.2f): they were cut off, and a reward that checks a final answer scores them "
             "as wrong. Raise --max-new-tokens on the workers (--max-episode-tokens for episodes), or reward shorter "
             "answers",
             100 * clipped / n, clipped, n, max_new, clipped / n);
    return 1;
}
