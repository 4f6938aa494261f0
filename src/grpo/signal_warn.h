// The learning-signal check, one rule for grpo-train's log and grpo-ctl status:
// a group whose G rewards are all equal has advantage 0 and teaches nothing;
// when most groups of several steps in a row are so, the run is learning
// nothing, and the warning names the fraction and the usual causes.
#pragma once
#include <stddef.h>

#define SIGNAL_FLAT_FRACTION 0.5  // "most groups": at least this share without reward spread
#define SIGNAL_FLAT_STEPS 3       // "several steps": this many in a row

// The share of a step's groups without reward spread, the groups --dynamic-sampling
// dropped for it counted too: (zero_std_groups + dropped) / (groups + dropped).
double signal_flat_fraction(double frac_reward_zero_std, double groups, double dropped);
// flat: the newest steps' shares, newest first (n of them). Returns how many of
// the newest are in a row at or above SIGNAL_FLAT_FRACTION; when that is at least
// SIGNAL_FLAT_STEPS writes the warning (without a "WARNING:" prefix) into buf.
int signal_flat_warning(const double *flat, int n, char *buf, size_t cap);

// The truncation check, one rule for grpo-train's log and grpo-ctl status:
// completions that hit the generation budget (--max-new-tokens, an episode's
// --max-episode-tokens) were cut off, and a reward that checks a final answer
// scores them as wrong. Of a step's n completions, clipped did (max_new: the budget). Returns 0 when
// at most half did; 1 when more than half did (the warning); 2 when every one
// did and every group's rewards are equal (frac_zero_std 1: advantages, loss
// and gradient all 0), the louder one. Writes the text (no "WARNING:" prefix)
// into buf when it returns > 0, naming the flag and its value.
int clip_warning(double clipped, double n, double frac_zero_std, double max_new, char *buf, size_t cap);
