// Check suite for the parts of src/rollout/pacing.c that judge heartbeats:
// which workers' heartbeats count as generating for back pressure (not an eval
// worker's), and which feeds (dataset, rewards, chat template) differ between
// two workers of a run.
#include <check.h>
#include <jansson.h>
#include <string.h>
#include "rollout/pacing.h"

static bool generates(const char *json) { return pacing_heartbeat_generates(json, strlen(json)); }

START_TEST(test_heartbeat_generates) {
    ck_assert(generates("{\"role\":\"generating\"}"));
    ck_assert(generates("{\"role\":\"serve\"}"));
    ck_assert(!generates("{\"role\":\"eval\",\"mode\":\"eval\"}"));
    // An older pail's heartbeat: mode only.
    ck_assert(!generates("{\"mode\":\"eval\"}"));
    ck_assert(generates("{\"mode\":\"rollout\"}"));
    // Over: not generating.
    ck_assert(generates("{\"role\":\"generating\",\"state\":\"paused\"}"));
    ck_assert(!generates("{\"role\":\"generating\",\"state\":\"finished\"}"));
    ck_assert(!generates("{\"mode\":\"rollout\",\"state\":\"stopped\"}"));
    ck_assert(!generates("{\"role\":\"serve\",\"state\":\"failed\"}"));
    // Unreadable: counted (it only slows the pace).
    ck_assert(generates("not json"));
    ck_assert(generates("{}"));
}
END_TEST

static json_t *hb(const char *ds_path, const char *ds_sha, const char *spec, const char *ct_sha) {
    return json_pack("{s:{s:s, s:i, s:s}, s:{s:[s]}, s:{s:s, s:s}}", "dataset", "path", ds_path, "rows", 64, "sha256",
                     ds_sha, "rewards", "specs", spec, "chat_template", "name", "model/chat_template.jinja",
                     "sha256", ct_sha);
}

START_TEST(test_feeds_differ) {
    json_t *a = hb("a.jsonl", "aaaaaaaaaaaaaaaaaaaa", "format", "cccc"), *a2 = hb("/other/a.jsonl",
                                                                                  "aaaaaaaaaaaaaaaaaaaa", "format", "cccc");
    json_t *b = hb("b.jsonl", "bbbbbbbbbbbbbbbbbbbb", "format", "cccc");
    json_t *r = hb("a.jsonl", "aaaaaaaaaaaaaaaaaaaa", "exact_answer", "cccc");
    json_t *all = hb("b.jsonl", "bbbbbbbbbbbbbbbbbbbb", "exact_answer", "dddd");
    char why[1024];
    // The same file under another path is the same dataset.
    ck_assert_int_eq(pacing_feeds_differ(a, a2, why, sizeof why), 0);
    ck_assert_str_eq(why, "");
    ck_assert_int_eq(pacing_feeds_differ(a, b, why, sizeof why), 1);
    ck_assert_str_eq(why, "dataset b.jsonl (sha256 bbbbbbbbbbbb..) where this worker has a.jsonl (sha256 aaaaaaaaaaaa..)");
    ck_assert_int_eq(pacing_feeds_differ(a, r, why, sizeof why), 1);
    ck_assert_msg(strstr(why, "rewards {\"specs\":[\"exact_answer\"]} where this worker has {\"specs\":[\"format\"]}"),
                  "%s", why);
    ck_assert_int_eq(pacing_feeds_differ(a, all, why, sizeof why), 3);
    // A heartbeat of an older pail records no feeds: nothing to compare.
    json_t *old = json_pack("{s:s}", "mode", "rollout");
    ck_assert_int_eq(pacing_feeds_differ(a, old, why, sizeof why), 0);
    json_decref(a);
    json_decref(a2);
    json_decref(b);
    json_decref(r);
    json_decref(all);
    json_decref(old);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_pacing");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_heartbeat_generates);
    tcase_add_test(core, test_feeds_differ);
    suite_add_tcase(s, core);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
