// Check suite for src/grpo: advantages (group/batch/none, zero-spread and
// failed rewards), loss invariance under micro-batching, the gradient against
// central finite differences of the loss (the PyTorch/TRL comparison is
// validation/grpo/check_loss.py), the learning-rate schedule, and the
// trainer/worker log-prob agreement (behaviour/* metrics) over micro-batches.
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "grpo/agree.h"
#include "grpo/budget.h"
#include "grpo/loss.h"
#include "grpo/schedule.h"
#include "grpo/signal_warn.h"

START_TEST(test_advantages) {
    float r[8] = {1, 0, 1, 0, 2, 2, 2, 2}, adv[8];
    uint8_t valid[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    AdvantageStats st;
    grpo_advantages(adv, &st, r, valid, 2, 4, SCALE_GROUP);
    double sd = sqrt(1.0 / 3.0);  // unbiased std of {1,0,1,0}
    ck_assert(fabs(adv[0] - 0.5 / (sd + 1e-4)) < 1e-6);
    ck_assert(fabs(adv[1] + 0.5 / (sd + 1e-4)) < 1e-6);
    for (int i = 4; i < 8; i++) ck_assert(adv[i] == 0);  // no spread: no signal
    ck_assert_int_eq(st.zero_spread_groups, 1);
    ck_assert_int_eq(st.groups, 2);
    grpo_advantages(adv, &st, r, valid, 2, 4, SCALE_NONE);
    ck_assert(fabs(adv[0] - 0.5) < 1e-7);
    valid[0] = 0;  // a failed reward: left out of the group's mean and std
    grpo_advantages(adv, &st, r, valid, 2, 4, SCALE_NONE);
    ck_assert(adv[0] == 0);
    ck_assert(fabs(adv[1] - (0 - 1.0 / 3)) < 1e-6);
    ck_assert_int_eq(st.invalid, 1);
    // grpo_group_flat (--dynamic-sampling) agrees with the advantages' notion
    ck_assert(!grpo_group_flat(r, valid, 0, 4));
    ck_assert(grpo_group_flat(r, valid, 4, 8));           // {2,2,2,2}
    ck_assert(grpo_group_flat(r, NULL, 4, 8));
    uint8_t one[4] = {0, 0, 1, 0};
    ck_assert(grpo_group_flat(r, one, 0, 4));             // one valid reward: no spread to learn from
    uint8_t two[4] = {1, 1, 0, 0};
    ck_assert(!grpo_group_flat(r, two, 0, 4));            // {1, 0}
    float spread[4] = {2, 2, 2, 2.0000002f};
    ck_assert(!grpo_group_flat(spread, NULL, 0, 4));      // any spread is a signal
}
END_TEST

static void batch(int n, int64_t *off, float *nw, float *old, float *ref, float *adv, uint8_t *mask) {
    srand(3);
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        off[i + 1] = off[i] + 1 + i % 4;
        adv[i] = (float)(i % 3) - 1.0f;
        mask[i] = i != 2;
    }
    for (int64_t t = 0; t < off[n]; t++) {
        old[t] = -(float)(rand() % 1000) / 400.0f - 0.01f;
        nw[t] = old[t] + ((float)(rand() % 1000) / 1000.0f - 0.5f) * 0.6f;
        ref[t] = old[t] + ((float)(rand() % 1000) / 1000.0f - 0.5f) * 0.3f;
    }
}

START_TEST(test_loss_micro_and_fd) {
    enum { N = 9 };
    int64_t off[N + 1];
    float nw[64], old[64], ref[64], adv[N], g1[64], g2[64];
    uint8_t mask[N];
    batch(N, off, nw, old, ref, adv, mask);
    for (int type = 0; type < 3; type++)
        for (int ratio = 0; ratio < 2; ratio++) {
            GrpoLossConfig cfg = {.type = (LossType)type, .ratio = (RatioType)ratio, .eps_low = 0.2, .eps_high = 0.28,
                                  .beta = 0.05, .tis_cap = 2.0};
            int64_t comps = 0, toks = 0;
            for (int i = 0; i < N; i++) if (mask[i]) { comps++; toks += off[i + 1] - off[i]; }
            double norm = grpo_loss_norm(cfg.type, comps, toks, 8);
            GrpoLossStats a = {0}, b = {0};
            grpo_loss_forward_backward(&a, g1, nw, old, ref, off, N, adv, mask, &cfg, norm);
            // Two micro-batches with the step's normalizer: same loss and gradient.
            int64_t off2[N + 1];
            for (int i = 4; i <= N; i++) off2[i - 4] = off[i] - off[4];
            grpo_loss_forward_backward(&b, g2, nw, old, ref, off, 4, adv, mask, &cfg, norm);
            grpo_loss_forward_backward(&b, g2 + off[4], nw + off[4], old + off[4], ref + off[4], off2, N - 4, adv + 4,
                                       mask + 4, &cfg, norm);
            ck_assert(fabs(a.loss - b.loss) < 1e-9);
            for (int64_t t = 0; t < off[N]; t++) ck_assert(g1[t] == g2[t]);
            // Central differences (h = 1e-3 in float32 log-probs; tolerance 2e-3
            // absolute covers the O(h^2) term and float rounding; kinks of the
            // clip are avoided by checking that both sides agree in clip state).
            for (int64_t t = 0; t < off[N]; t++) {
                float keep = nw[t];
                double h = 1e-3, lp, lm;
                GrpoLossStats s1 = {0}, s2 = {0};
                float scratch[64];
                nw[t] = keep + (float)h;
                grpo_loss_forward_backward(&s1, scratch, nw, old, ref, off, N, adv, mask, &cfg, norm);
                lp = s1.loss;
                nw[t] = keep - (float)h;
                grpo_loss_forward_backward(&s2, scratch, nw, old, ref, off, N, adv, mask, &cfg, norm);
                lm = s2.loss;
                nw[t] = keep;
                if (s1.clipped_low != s2.clipped_low || s1.clipped_high != s2.clipped_high) continue;
                double fd = (lp - lm) / (2 * h);
                ck_assert_msg(fabs(fd - g1[t]) < 2e-3, "type %d ratio %d token %lld: fd %g vs %g", type, ratio,
                              (long long)t, fd, g1[t]);
            }
            for (int64_t t = off[2]; t < off[3]; t++) ck_assert(g1[t] == 0);  // masked completion
        }
}
END_TEST

// Exact where the formula is exact in binary (warmup fractions, the cosine's
// ends); the midpoint within 1 ulp-ish of the closed form.
START_TEST(test_schedule) {
    LrSchedule c = {.kind = SCHEDULE_CONSTANT, .lr = 1e-3, .warmup_steps = 4, .steps = 100};
    ck_assert(lr_schedule_at(&c, 0) == 1e-3 * 1 / 4.0);
    ck_assert(lr_schedule_at(&c, 3) == 1e-3);
    ck_assert(lr_schedule_at(&c, 4) == 1e-3);
    ck_assert(lr_schedule_at(&c, 99) == 1e-3);
    LrSchedule k = {.kind = SCHEDULE_COSINE, .lr = 2.0, .min_lr_ratio = 0.1, .warmup_steps = 2, .steps = 12};
    ck_assert(lr_schedule_at(&k, 0) == 1.0);
    ck_assert(lr_schedule_at(&k, 1) == 2.0);
    ck_assert(lr_schedule_at(&k, 2) == 2.0);                              // t = 0: the peak
    ck_assert(fabs(lr_schedule_at(&k, 7) - 2.0 * (0.1 + 0.9 * 0.5)) < 1e-12);  // t = 1/2
    ck_assert(fabs(lr_schedule_at(&k, 12) - 0.2) < 1e-12);                // t = 1: the floor
    for (int64_t s = 3; s < 12; s++) ck_assert(lr_schedule_at(&k, s) < lr_schedule_at(&k, s - 1));
}
END_TEST

START_TEST(test_schedule_limits) {
    LrSchedule k = {.kind = SCHEDULE_COSINE, .lr = 1.0, .min_lr_ratio = 0.25, .warmup_steps = 0, .steps = 10};
    ck_assert(lr_schedule_at(&k, 0) == 1.0);                  // no warmup: the peak at step 0
    ck_assert(fabs(lr_schedule_at(&k, 50) - 0.25) < 1e-12);  // past the end: stays at the floor
    LrSchedule w = {.kind = SCHEDULE_COSINE, .lr = 1.0, .min_lr_ratio = 0.5, .warmup_steps = 10, .steps = 10};
    ck_assert(lr_schedule_at(&w, 9) == 1.0);                  // warmup covers every step
    ck_assert(lr_schedule_at(&w, 10) == 0.5);                 // no span left: the floor at once
    LrSchedule z = {.kind = SCHEDULE_COSINE, .lr = 0, .warmup_steps = 3, .steps = 5};
    for (int64_t s = 0; s < 8; s++) ck_assert(lr_schedule_at(&z, s) == 0);
}
END_TEST

// --token-budget auto against a plan of 100 MiB + 1 MiB a token (0.125 MiB with
// recompute): one group, at most the cap; halved to fit; then recompute; else the smallest.
static int fake_plan(void *ctx, int T, bool recompute, MemoryPlan *mp, PailErr *err) {
    (void)err;
    int *calls = ctx;
    (*calls)++;
    memset(mp, 0, sizeof *mp);
    mp->total = ((size_t)100 << 20) + (size_t)T * (recompute ? (1u << 17) : (1u << 20));
    return 0;
}

START_TEST(test_budget_auto) {
    size_t MiB = 1u << 20;
    BudgetChoice ch;
    PailErr err = {0};
    int calls = 0;
    // 8 x 1280 = 10240 capped at 4096: 4196 MiB fits 5000 MiB
    ck_assert_int_eq(budget_choose(8, 1280, false, 5000 * MiB, fake_plan, &calls, &ch, &err), 0);
    ck_assert_int_eq(ch.token_budget, 4096);
    ck_assert(!ch.recompute);
    ck_assert_msg(strstr(ch.why, "4096 tokens: a group of 8 x --max-seq-tokens 1280 = 10240, at most 4096"), "%s", ch.why);
    // a small group: G x seq, under the cap
    ck_assert_int_eq(budget_choose(4, 200, false, 5000 * MiB, fake_plan, &calls, &ch, &err), 0);
    ck_assert_int_eq(ch.token_budget, 800);
    // 3000 MiB: 4096 does not fit, 2048 (2148 MiB) does
    ck_assert_int_eq(budget_choose(8, 1280, false, 3000 * MiB, fake_plan, &calls, &ch, &err), 0);
    ck_assert_int_eq(ch.token_budget, 2048);
    ck_assert(!ch.recompute);
    ck_assert_msg(strstr(ch.why, "4096 tokens would need 4.10 GiB"), "%s", ch.why);
    // 1300 MiB: 1280 tokens (1380 MiB) is the floor and does not fit; recompute at 4096 (612 MiB) does
    ck_assert_int_eq(budget_choose(8, 1280, false, 1300 * MiB, fake_plan, &calls, &ch, &err), 0);
    ck_assert_int_eq(ch.token_budget, 4096);
    ck_assert(ch.recompute);
    ck_assert_msg(strstr(ch.why, "with --recompute turned on"), "%s", ch.why);
    // a long sequence (issue 47): 16384 tokens past the cap; its activations (16.1 GiB) do not fit
    // 5000 MiB, with recompute (2.1 GiB) they do
    ck_assert_int_eq(budget_choose(8, 16384, false, 5000 * MiB, fake_plan, &calls, &ch, &err), 0);
    ck_assert_int_eq(ch.token_budget, 16384);
    ck_assert(ch.recompute);
    ck_assert_msg(strstr(ch.why, "16384 tokens with --recompute turned on: one sequence of --max-seq-tokens 16384 "
                                 "(past the cap of 4096: a micro-batch holds the longest); 16384 tokens without it "
                                 "would need 16.10 GiB"), "%s", ch.why);
    // --recompute given: halved under it, never "turned on"
    ck_assert_int_eq(budget_choose(8, 1280, true, 500 * MiB, fake_plan, &calls, &ch, &err), 0);
    ck_assert_int_eq(ch.token_budget, 2048);
    ck_assert(ch.recompute && !strstr(ch.why, "turned on"));
    // 200 MiB: nothing fits; the smallest plan with recompute is returned for the caller to refuse
    ck_assert_int_eq(budget_choose(8, 1280, false, 200 * MiB, fake_plan, &calls, &ch, &err), 0);
    ck_assert_int_eq(ch.token_budget, 1280);
    ck_assert(ch.recompute && ch.total > 200 * MiB);
    ck_assert_msg(strstr(ch.why, "no budget of at least --max-seq-tokens 1280 fits"), "%s", ch.why);
}
END_TEST


// The learning-signal warning: most groups without reward spread for
// SIGNAL_FLAT_STEPS steps in a row, newest first; the groups --dynamic-sampling
// dropped count as flat.
START_TEST(test_signal_flat) {
    char msg[768];
    ck_assert(fabs(signal_flat_fraction(0.5, 8, 0) - 0.5) < 1e-12);
    ck_assert(fabs(signal_flat_fraction(0.0, 8, 8) - 0.5) < 1e-12);  // 8 trained with spread, 8 dropped flat
    ck_assert(signal_flat_fraction(0, 0, 0) == 0);
    double two[] = {1.0, 0.9};
    ck_assert_int_eq(signal_flat_warning(two, 2, msg, sizeof msg), 2);  // not yet several steps
    ck_assert_str_eq(msg, "");
    double mixed[] = {1.0, 0.75, 0.2, 1.0};
    ck_assert_int_eq(signal_flat_warning(mixed, 4, msg, sizeof msg), 2);  // the run is broken by the 0.2 step
    double flat[] = {1.0, 0.75, 0.5, 0.1};
    ck_assert_int_eq(signal_flat_warning(flat, 4, msg, sizeof msg), 3);
    ck_assert_msg(strstr(msg, "no learning signal: 75% of the groups of the last 3 steps had equal rewards") &&
                  strstr(msg, "temperature") && strstr(msg, "same value") && strstr(msg, "too easy") &&
                  strstr(msg, "too hard"), "%s", msg);
}
END_TEST

// The truncation warning: more than half of a step's completions at the
// generation budget warns, naming the flag and its value; all of them with no
// group's rewards spread is the louder one; half or fewer says nothing.
START_TEST(test_clip_warning) {
    char msg[768];
    ck_assert_int_eq(clip_warning(32, 64, 1.0, 256, msg, sizeof msg), 0);  // half: not "more than half"
    ck_assert_str_eq(msg, "");
    ck_assert_int_eq(clip_warning(0, 0, 1.0, 256, msg, sizeof msg), 0);    // an empty step
    ck_assert_int_eq(clip_warning(40, 64, 0.5, 256, msg, sizeof msg), 1);
    ck_assert_msg(strstr(msg, "62% of the step's completions (40 of 64) hit the generation budget, --max-new-tokens 256") &&
                  strstr(msg, "clipped_ratio 0.62") && strstr(msg, "Raise --max-new-tokens"), "%s", msg);
    ck_assert_int_eq(clip_warning(64, 64, 0.75, 256, msg, sizeof msg), 1);  // all cut, but some groups still differ
    ck_assert_int_eq(clip_warning(64, 64, 1.0, 512, msg, sizeof msg), 2);
    ck_assert_msg(strstr(msg, "NOTHING IS LEARNED: every completion of the step (64) hit the generation budget, "
                              "--max-new-tokens 512") && strstr(msg, "gradient are all 0") &&
                  strstr(msg, "raise --max-new-tokens on the workers (--max-episode-tokens for episodes"), "%s", msg);
}
END_TEST

// The agreement figures of a step: the same whether its completions come in
// one micro-batch or several, only the chosen completions counted, k3 with
// d = train - behaviour (KL(behaviour || train): the tokens are the
// behaviour's samples) against a long-double reference, kept where d is a
// float rounding (exp(d) - 1 - d in double loses it), NaN reported.
START_TEST(test_behaviour_agree) {
    // 3 completions: tokens [0,2), [2,5), [5,6); the second is not at staleness 0
    const float tr[] = {-1.0f, -0.5f, -2.0f, -3.0f, -0.25f, -0.125f};
    const float bh[] = {-1.25f, -0.5f, -9.0f, -9.0f, -9.0f, -0.0625f};
    const int64_t off[] = {0, 2, 5, 6};
    const uint8_t use[] = {1, 0, 1};
    BehaviourAgree one = {0}, split = {0};
    behaviour_agree_add(&one, tr, bh, off, 3, use);
    // micro-batches: completion 0, then completions 1 and 2 (offsets within the micro-batch)
    const int64_t off_a[] = {0, 2}, off_b[] = {0, 3, 4};
    behaviour_agree_add(&split, tr, bh, off_a, 1, use);
    behaviour_agree_add(&split, tr + 2, bh + 2, off_b, 2, use + 1);
    double mx, mean, k3, mx2, mean2, k32;
    ck_assert(behaviour_agree_result(&one, &mx, &mean, &k3));
    ck_assert(behaviour_agree_result(&split, &mx2, &mean2, &k32));
    ck_assert_int_eq(one.tokens, 3);
    ck_assert_int_eq(split.tokens, 3);
    ck_assert(mx == mx2 && mean == mean2 && k3 == k32);
    ck_assert(mx == 0.25);
    ck_assert(fabs(mean - (0.25 + 0 + 0.0625) / 3) < 1e-15);
    long double ref = 0, d[] = {0.25L, 0.0L, -0.0625L};
    for (int i = 0; i < 3; i++) ref += expl(d[i]) - 1 - d[i];
    ck_assert_msg(fabs(k3 - (double)(ref / 3)) < 1e-15, "k3 %.17g want %.17Lg", k3, ref / 3);
    // the direction: exp(d) - 1 - d is not even in d
    ck_assert(fabs(k3 - (expm1(-0.25) + 0.25 + expm1(0.0625) - 0.0625) / 3) > 1e-4);
    // d = 2^-23 (a float's rounding near 1): k3 = d^2 / 2 (+ d^3 / 6), about 7.1e-15
    const float t1[] = {-1.0f}, b1[] = {-1.0f - 0x1p-23f};
    const int64_t o1[] = {0, 1};
    const uint8_t u1[] = {1};
    BehaviourAgree tiny = {0};
    behaviour_agree_add(&tiny, t1, b1, o1, 1, u1);
    ck_assert(behaviour_agree_result(&tiny, &mx, &mean, &k3));
    double dd = (double)t1[0] - (double)b1[0];
    ck_assert_msg(fabs(k3 - dd * dd / 2) < 1e-6 * dd * dd, "k3 %g want %g", k3, dd * dd / 2);
    // nothing covered: no figures (the metrics are null, not 0)
    BehaviourAgree none = {0};
    const uint8_t off3[] = {0, 0, 0};
    behaviour_agree_add(&none, tr, bh, off, 3, off3);
    ck_assert(!behaviour_agree_result(&none, &mx, &mean, &k3));
    ck_assert_int_eq(none.tokens, 0);
    // a non-finite log-prob is not hidden by the max
    const float tn[] = {-1.0f, NAN, -1.0f}, bn[] = {-1.0f, -1.0f, -3.0f};
    const int64_t on[] = {0, 3};
    BehaviourAgree nan_a = {0};
    behaviour_agree_add(&nan_a, tn, bn, on, 1, u1);
    ck_assert(behaviour_agree_result(&nan_a, &mx, &mean, &k3));
    ck_assert(isnan(mx) && isnan(mean) && isnan(k3));
}
END_TEST

int main(void) {
    Suite *s = suite_create("grpo");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_advantages);
    tcase_add_test(core, test_loss_micro_and_fd);
    tcase_add_test(core, test_schedule);
    tcase_add_test(limits, test_schedule_limits);
    tcase_add_test(core, test_budget_auto);
    tcase_add_test(core, test_signal_flat);
    tcase_add_test(core, test_clip_warning);
    tcase_add_test(core, test_behaviour_agree);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
