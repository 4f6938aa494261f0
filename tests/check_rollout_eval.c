// Check suite for the eval worker's pure parts (src/rollout/evalworker.c): the
// accuracy rule chosen from a reward set's declared kinds (built by
// reward_set_build, as the worker does) or --success-threshold, when a
// completion counts as correct under it, and the distinct completions count.
#include <check.h>
#include <math.h>
#include <string.h>
#include "rollout/evalworker.h"
#include "rollout/reward.h"

// The rule for the reward set of these specs (with every option they need).
static void rule_of(const char *const *specs, int n, bool has_threshold, double threshold, EvalAccuracy *a) {
    bool cmd = false;
    for (int i = 0; i < n; i++) cmd |= reward_spec_is(specs[i], "cmd");
    RewardConfig cfg = {.specs = specs, .nspecs = n, .format_regex = "[0-9]", .length_target = 4,
                        .cmd = cmd ? "cat" : NULL, .cmd_timeout_s = 5};
    RewardSet *rs;
    PailErr err = {0};
    ck_assert_msg(reward_set_build(&rs, &cfg, &err) == 0, "%s", err.msg);
    eval_accuracy_rule(reward_set_names(rs), reward_set_count(rs), has_threshold, threshold, a);
    reward_set_free(rs);
}

START_TEST(test_rule_binary) {
    EvalAccuracy a;
    // exact_answer decides even beside a partial-credit reward: its component, not the total.
    rule_of((const char *const[]){"length:0.5", "exact_answer"}, 2, false, 0, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_COMPONENT);
    ck_assert_int_eq(a.component, 1);
    ck_assert_str_eq(a.rule, "exact_answer == 1");
    ck_assert(eval_correct(&a, (const float[]){-0.75f, 1.0f}, 0.625, true));
    ck_assert(!eval_correct(&a, (const float[]){0.0f, 0.0f}, 0.0, true));
    ck_assert(!eval_correct(&a, (const float[]){0.0f, 1.0f}, 1.0, false));  // an invalid score is never correct
    // A lone format reward is binary too.
    rule_of((const char *const[]){"format"}, 1, false, 0, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_COMPONENT);
    ck_assert_str_eq(a.rule, "format == 1");
    ck_assert(eval_correct(&a, (const float[]){1.0f}, 1.0, true));
    ck_assert(!eval_correct(&a, (const float[]){0.0f}, 0.0, true));
}
END_TEST

START_TEST(test_rule_threshold) {
    EvalAccuracy a;
    rule_of((const char *const[]){"cmd"}, 1, true, 0.5, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_THRESHOLD);
    ck_assert_str_eq(a.rule, "reward >= 0.5");
    ck_assert(eval_correct(&a, NULL, 0.5, true));
    ck_assert(!eval_correct(&a, NULL, 0.49, true));
    ck_assert(!eval_correct(&a, NULL, 0.9, false));
    // Given, it wins over exact_answer; and --env episodes (no declared kinds) take it.
    rule_of((const char *const[]){"exact_answer"}, 1, true, 1, &a);
    ck_assert_str_eq(a.rule, "reward >= 1");
    eval_accuracy_rule(NULL, 0, true, -0.25, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_THRESHOLD);
    ck_assert_str_eq(a.rule, "reward >= -0.25");
    ck_assert(eval_correct(&a, NULL, -0.25, true));
}
END_TEST

// Partial credit without a threshold: no accuracy, and the why names the kinds.
START_TEST(test_rule_undefined) {
    EvalAccuracy a;
    rule_of((const char *const[]){"cmd"}, 1, false, 0, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_NONE);
    ck_assert_str_eq(a.rule, "not defined for a partial-credit reward (cmd); give --success-threshold");
    ck_assert(!eval_correct(&a, (const float[]){1.0f}, 1.0, true));
    rule_of((const char *const[]){"format", "length", "cmd:2"}, 3, false, 0, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_NONE);
    ck_assert_str_eq(a.rule, "not defined for a partial-credit reward (length, cmd); give --success-threshold");
    rule_of((const char *const[]){"length"}, 1, false, 0, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_NONE);
    eval_accuracy_rule(NULL, 0, false, 0, &a);
    ck_assert_int_eq(a.kind, EVAL_ACC_NONE);
    ck_assert_msg(strstr(a.rule, "--env") && strstr(a.rule, "--success-threshold"), "%s", a.rule);
}
END_TEST

START_TEST(test_distinct) {
    const char *t[] = {"7", "8", "7", "7", "", ""};
    ck_assert_int_eq(eval_distinct(t, 6), 3);
    const char *same[100];
    for (int i = 0; i < 100; i++) same[i] = "the";
    ck_assert_int_eq(eval_distinct(same, 100), 1);
    ck_assert_int_eq(eval_distinct(same, 0), 0);
    const char *prefix[] = {"12", "1", "123"};  // prefixes are different texts
    ck_assert_int_eq(eval_distinct(prefix, 3), 3);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_eval");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_rule_binary);
    tcase_add_test(core, test_rule_threshold);
    tcase_add_test(limits, test_rule_undefined);
    tcase_add_test(limits, test_distinct);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
