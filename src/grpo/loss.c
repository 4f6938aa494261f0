// GRPO advantages and loss variants with their gradient (see loss.h). The
// per-token objective is PPO's clipped surrogate as in TRL:
//   r = exp(new - old) (token) or exp(mean_t(new - old)) (sequence, GSPO)
//   obj = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), dual-clipped at C A for A < 0 with --tis-cap
//   loss_t = -obj + beta (exp(ref - new) - (ref - new) - 1)
// aggregated: dapo sum_t loss_t / tokens(step); grpo mean_i(mean_t loss_t);
// dr_grpo sum_t loss_t / (completions(step) * max_new_tokens).
// t runs over a completion's scored tokens, the only ones its range holds
// (a multi-turn episode's environment tokens are left out by the packer).
#include "grpo/loss.h"
#include <math.h>
#include <string.h>

static void group_mean_std(const float *r, const uint8_t *valid, int64_t lo, int64_t hi, double *mean, double *std,
                           int64_t *count) {
    double s = 0;
    int64_t n = 0;
    for (int64_t i = lo; i < hi; i++) if (!valid || valid[i]) { s += r[i]; n++; }
    double m = n ? s / (double)n : 0, v = 0;
    for (int64_t i = lo; i < hi; i++) if (!valid || valid[i]) v += (r[i] - m) * (r[i] - m);
    *mean = m;
    *std = n > 1 ? sqrt(v / (double)(n - 1)) : 0;  // Bessel-corrected, as torch.std
    *count = n;
}

// No spread, or too few valid rewards: no learning signal.
static bool flat_of(int64_t n, double sd) { return n < 2 || sd == 0; }

bool grpo_group_flat(const float *rewards, const uint8_t *valid, int64_t lo, int64_t hi) {
    double m, sd;
    int64_t n;
    group_mean_std(rewards, valid, lo, hi, &m, &sd, &n);
    return flat_of(n, sd);
}

void grpo_advantages(float *adv, AdvantageStats *st, const float *rewards, const uint8_t *valid, int64_t P, int G,
                     ScaleRewards scale) {
    memset(st, 0, sizeof *st);
    int64_t N = P * G;
    double bmean, bstd;
    int64_t bn;
    group_mean_std(rewards, valid, 0, N, &bmean, &bstd, &bn);
    for (int64_t i = 0; i < N; i++) if (valid && !valid[i]) st->invalid++;
    double s = 0, s2 = 0;
    int64_t na = 0;
    st->adv_min = INFINITY;
    st->adv_max = -INFINITY;
    for (int64_t p = 0; p < P; p++) {
        double m, sd;
        int64_t n;
        group_mean_std(rewards, valid, p * G, (p + 1) * G, &m, &sd, &n);
        st->groups++;
        bool flat = flat_of(n, sd);
        if (flat) st->zero_spread_groups++;
        double denom = scale == SCALE_GROUP ? sd + 1e-4 : scale == SCALE_BATCH ? bstd + 1e-4 : 1.0;
        for (int64_t i = p * G; i < (p + 1) * G; i++) {
            bool ok = !valid || valid[i];
            adv[i] = (!ok || flat) ? 0.0f : (float)((rewards[i] - m) / denom);
            if (ok) {
                s += adv[i];
                s2 += (double)adv[i] * adv[i];
                na++;
                if (adv[i] < st->adv_min) st->adv_min = adv[i];
                if (adv[i] > st->adv_max) st->adv_max = adv[i];
            }
        }
    }
    if (na) {
        st->adv_mean = s / (double)na;
        st->adv_std = na > 1 ? sqrt(fmax(0, (s2 - s * s / (double)na) / (double)(na - 1))) : 0;
    } else {
        st->adv_min = st->adv_max = 0;
    }
}

double grpo_loss_norm(LossType type, int64_t completions, int64_t tokens, int64_t max_new_tokens) {
    double n = type == LOSS_DAPO ? (double)tokens
             : type == LOSS_GRPO ? (double)completions
                                 : (double)completions * (double)max_new_tokens;
    return n > 0 ? n : 1.0;
}

// d(-obj)/d(r) for the clipped surrogate at ratio r and advantage A, and obj.
static double surrogate(double r, double A, const GrpoLossConfig *cfg, double *obj) {
    double lo = 1 - cfg->eps_low, hi = 1 + cfg->eps_high;
    double rc = r < lo ? lo : r > hi ? hi : r;
    double u = r * A, c = rc * A;
    double o = u <= c ? u : c, g = u <= c ? A : (r >= lo && r <= hi ? A : 0);
    if (cfg->tis_cap > 0 && A < 0 && o < cfg->tis_cap * A) { o = cfg->tis_cap * A; g = 0; }
    *obj = o;
    return -g;
}

void grpo_loss_forward_backward(GrpoLossStats *st, float *d_new_lp, const float *new_lp, const float *old_lp,
                                const float *ref_lp, const int64_t *off, int n, const float *adv,
                                const uint8_t *mask, const GrpoLossConfig *cfg, double norm) {
    if (st->completions == 0 && st->tokens == 0) { st->ratio_min = INFINITY; st->ratio_max = -INFINITY; }
    double lo = 1 - cfg->eps_low, hi = 1 + cfg->eps_high;
    for (int i = 0; i < n; i++) {
        int64_t a = off[i], b = off[i + 1], len = b - a;
        if (!mask[i] || len == 0) {
            for (int64_t t = a; t < b; t++) d_new_lp[t] = 0;
            continue;
        }
        double A = adv[i];
        // Weight of each token's loss in the step's loss.
        double w = cfg->type == LOSS_GRPO ? 1.0 / ((double)len * norm) : 1.0 / norm;
        st->completions++;
        double seq_r = 0, seq_g = 0, seq_obj = 0;
        if (cfg->ratio == RATIO_SEQUENCE) {
            double m = 0;
            for (int64_t t = a; t < b; t++) m += (double)new_lp[t] - old_lp[t];
            seq_r = exp(m / (double)len);
            seq_g = surrogate(seq_r, A, cfg, &seq_obj);  // d(-obj)/ds
        }
        for (int64_t t = a; t < b; t++) {
            double r, g, obj;
            if (cfg->ratio == RATIO_SEQUENCE) {
                r = seq_r;
                obj = seq_obj;
                // Each of the len tokens of i carries -obj_i and ds/dnew_t = s / len,
                // so d/dnew_t = len * w * (d(-obj)/ds) * s / len = w * seq_g * s.
                g = seq_g * seq_r;
            } else {
                r = exp((double)new_lp[t] - old_lp[t]);
                g = surrogate(r, A, cfg, &obj) * r;  // d(-obj)/dnew = d(-obj)/dr * r
            }
            double lt = -obj, dt = g;
            if (cfg->beta > 0 && ref_lp) {
                double x = (double)ref_lp[t] - new_lp[t];
                double kl = exp(x) - x - 1;
                lt += cfg->beta * kl;
                dt += cfg->beta * (1 - exp(x));
                st->kl_sum += kl;
            }
            st->loss += w * lt;
            d_new_lp[t] = (float)(w * dt);
            st->ratio_sum += r;
            if (r < st->ratio_min) st->ratio_min = r;
            if (r > st->ratio_max) st->ratio_max = r;
            st->clipped_low += r < lo && A < 0;
            st->clipped_high += r > hi && A > 0;
            st->tokens++;
        }
    }
}
