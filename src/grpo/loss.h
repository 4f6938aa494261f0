// GRPO's math on per-token log-probabilities, independent of the model:
// group advantages and the policy loss variants with their gradient with
// respect to the policy's log-probs (the model's backward takes it from there).
// Formulas follow TRL's GRPOTrainer (advantages, ratio, clipping, aggregation,
// k3 KL), validated in validation/grpo/ against PyTorch autograd and TRL.
// Sizes: n completions in a micro-batch, tokens of completion i in [off[i], off[i+1]):
// its scored tokens only (the packer leaves a multi-turn completion's
// environment tokens out), so every mean and count here is over those.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "core/err.h"

typedef enum { SCALE_GROUP, SCALE_BATCH, SCALE_NONE } ScaleRewards;
typedef enum { LOSS_DAPO, LOSS_GRPO, LOSS_DR_GRPO } LossType;
typedef enum { RATIO_TOKEN, RATIO_SEQUENCE } RatioType;

typedef struct {
    int64_t groups, zero_spread_groups;  // groups seen / groups whose rewards had no spread (no signal)
    int64_t invalid;                     // completions with reward_valid = 0 (left out)
    double adv_mean, adv_std, adv_min, adv_max;  // over valid completions
} AdvantageStats;

// Advantages for n = P*G completions stored group by group (group p is
// [p*G, (p+1)*G)): A = (r - mean_group) / (std + 1e-4) with std the unbiased
// standard deviation (of the group, of the batch, or 1 for SCALE_NONE).
// Completions with valid[i] = 0 get A = 0 and are excluded from mean/std; a
// group with fewer than 2 valid completions, or zero spread, gets A = 0.
void grpo_advantages(float *adv, AdvantageStats *st, const float *rewards, const uint8_t *valid, int64_t P, int G,
                     ScaleRewards scale);
// Whether the group of rewards[lo, hi) carries no learning signal: fewer than
// 2 valid rewards, or no spread among them (what grpo_advantages zeroes).
bool grpo_group_flat(const float *rewards, const uint8_t *valid, int64_t lo, int64_t hi);

typedef struct {
    LossType type;
    RatioType ratio;
    double eps_low, eps_high;  // PPO clip range [1 - eps_low, 1 + eps_high]
    double tis_cap;            // > 0: cap the importance weight at C (dual clip for A < 0); 0: off
    double beta;               // k3 KL penalty weight against the base model; 0: off
} GrpoLossConfig;

typedef struct {   // accumulated over the micro-batches of a step (zero it first)
    double loss;   // the step's loss (sum of micro-batch contributions)
    double kl_sum, ratio_sum, ratio_min, ratio_max;
    int64_t tokens, clipped_low, clipped_high, completions;
} GrpoLossStats;

// The normalizer of a step (all its micro-batches): dapo: scored completion
// tokens in the step (a multi-turn completion's mask-1 tokens); grpo:
// completions in the step; dr_grpo: completions in the step * max_new_tokens.
// Only completions with mask 1 count.
double grpo_loss_norm(LossType type, int64_t completions, int64_t tokens, int64_t max_new_tokens);

// One micro-batch: adds its loss contribution and statistics to st and writes
// d_new_lp[t] = d(step loss)/d(new_lp[t]) (0 for masked completions).
// new_lp: the policy's log-probs at the sampling temperature; old_lp: the
// behaviour log-probs from the shard; ref_lp: the base model's (NULL unless
// beta > 0); adv[i], mask[i] in {0,1}. norm from grpo_loss_norm.
void grpo_loss_forward_backward(GrpoLossStats *st, float *d_new_lp, const float *new_lp, const float *old_lp,
                                const float *ref_lp, const int64_t *off, int n, const float *adv,
                                const uint8_t *mask, const GrpoLossConfig *cfg, double norm);
