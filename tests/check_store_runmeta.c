// Check suite for src/store/runmeta.c: run.json and trainer/progress.json
// round-trip through their typed writers and readers, older spellings are
// read, wrong types are refused naming the field; and the probe keys grpo-ctl
// doctor leaves are removed by run_gc_probes (retention.c).
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/retention.h"
#include "store/runlayout.h"
#include "store/runmeta.h"
#include "check_tmp.h"

static int parse_run(const char *text, RunInfo *ri, PailErr *err) {
    return runinfo_parse(text, strlen(text), "run.json", ri, err);
}
static int parse_progress(const char *text, Progress *p, PailErr *err) {
    return progress_parse(text, strlen(text), "progress.json", p, err);
}

START_TEST(test_runinfo_roundtrip) {
    RunInfo ri;
    runinfo_init(&ri);
    snprintf(ri.run_id, sizeof ri.run_id, "run-abc");
    ri.base_model = strdup("/models/tiny");
    ri.task = strdup("gsm8k");
    snprintf(ri.base_sha256, sizeof ri.base_sha256, "%064d", 7);
    snprintf(ri.tokenizer_sha256, sizeof ri.tokenizer_sha256, "%064d", 9);
    snprintf(ri.compute_dtype, sizeof ri.compute_dtype, "bf16");
    ri.created_unix = 1700000000;
    ri.group_size = 8;
    ri.groups_per_step = 16;
    ri.max_staleness = 2;
    ri.publish_every = 3;
    ri.steps = 50;
    ri.lora_rank = 4;
    ri.lora_alpha = 8;
    snprintf(ri.lora_targets, sizeof ri.lora_targets, "q_proj,v_proj");
    ri.lora_rslora = true;
    ri.trainer = json_pack("{s:I, s:I, s:f}", "max-staleness", (json_int_t)2, "group-size", (json_int_t)8, "lr", 1e-5);
    json_t *j = runinfo_to_json(&ri);
    ck_assert_ptr_nonnull(j);
    // One spelling: the shared settings are typed fields, not repeated among the flags.
    ck_assert_int_eq(json_integer_value(json_object_get(j, "max_staleness")), 2);
    ck_assert_ptr_null(json_object_get(json_object_get(j, "trainer"), "max-staleness"));
    ck_assert_ptr_nonnull(json_object_get(json_object_get(j, "trainer"), "lr"));
    ck_assert_str_eq(json_string_value(json_object_get(j, "format")), "pail.run");
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    RunInfo back;
    PailErr err = {0};
    ck_assert_msg(parse_run(text, &back, &err) == 0, "%s", err.msg);
    free(text);
    ck_assert_str_eq(back.run_id, "run-abc");
    ck_assert_str_eq(back.base_model, "/models/tiny");
    ck_assert_str_eq(back.task, "gsm8k");
    ck_assert_str_eq(back.base_sha256, ri.base_sha256);
    ck_assert_str_eq(back.tokenizer_sha256, ri.tokenizer_sha256);
    ck_assert_str_eq(back.compute_dtype, "bf16");
    ck_assert_int_eq(back.created_unix, 1700000000);
    ck_assert_int_eq(back.group_size, 8);
    ck_assert_int_eq(back.groups_per_step, 16);
    ck_assert_int_eq(back.max_staleness, 2);
    ck_assert_int_eq(back.publish_every, 3);
    ck_assert_int_eq(back.steps, 50);
    ck_assert_int_eq(back.lora_rank, 4);
    ck_assert(back.lora_alpha == 8);
    ck_assert_str_eq(back.lora_targets, "q_proj,v_proj");
    ck_assert(back.lora_rslora);
    runinfo_free(&back);
    runinfo_free(&ri);
}
END_TEST

START_TEST(test_runinfo_old_and_defaults) {
    RunInfo ri;
    PailErr err = {0};
    // A run.json of an older pail: the shared settings only among the trainer's flags.
    ck_assert_msg(parse_run("{\"run_id\":\"r\",\"group_size\":4,\"trainer\":{\"max-staleness\":1,"
                            "\"groups-per-step\":6,\"publish-every\":2}}", &ri, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ri.max_staleness, 1);
    ck_assert_int_eq(ri.groups_per_step, 6);
    ck_assert_int_eq(ri.publish_every, 2);
    ck_assert_int_eq(ri.group_size, 4);
    runinfo_free(&ri);
    // Nothing given: the defaults, written in one place.
    ck_assert_msg(parse_run("{}", &ri, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ri.max_staleness, RUN_DEFAULT_MAX_STALENESS);
    ck_assert_int_eq(ri.publish_every, 1);
    ck_assert_str_eq(ri.compute_dtype, "f32");
    ck_assert_ptr_null(ri.task);
    runinfo_free(&ri);
    // The typed field wins over the old spelling.
    ck_assert(parse_run("{\"max_staleness\":0,\"trainer\":{\"max-staleness\":3}}", &ri, &err) == 0);
    ck_assert_int_eq(ri.max_staleness, 0);
    runinfo_free(&ri);
}
END_TEST

START_TEST(test_runinfo_wrong_types) {
    static const struct { const char *json, *want; } cases[] = {
        {"{\"group_size\":\"8\"}", "run.json: field 'group_size' is a string, expected an integer"},
        {"{\"max_staleness\":1.5}", "field 'max_staleness' is a number with a fraction, expected an integer"},
        {"{\"trainer\":{\"max-staleness\":\"4\"}}", "field 'trainer.max-staleness' is a string, expected an integer"},
        {"{\"lora\":{\"rank\":true}}", "field 'lora.rank' is a boolean, expected an integer"},
        {"{\"lora\":[]}", "field 'lora' is an array, expected an object"},
        {"{\"base_sha256\":7}", "field 'base_sha256' is an integer, expected a string"},
        {"{\"max_staleness\":-1}", "field 'max_staleness' is -1, expected >= 0"},
        {"[1]", "run.json: is an array, expected a JSON object"},
        {"{\"run_id\":", "run.json: not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        RunInfo ri;
        PailErr err = {0};
        ck_assert_msg(parse_run(cases[i].json, &ri, &err) == -1, "%s accepted", cases[i].json);
        ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
        ck_assert_msg(strstr(err.msg, cases[i].want), "%s: '%s' lacks '%s'", cases[i].json, err.msg, cases[i].want);
        ck_assert_ptr_null(ri.trainer);
    }
}
END_TEST

START_TEST(test_progress_roundtrip) {
    Progress p;
    progress_init(&p);
    p.version = 7;
    p.step = 9;
    p.consumed_shards = 11;
    p.dropped_shards = 2;
    p.rejected_shards = 1;
    p.steps_skipped = 3;
    p.max_staleness = 2;
    p.groups_per_step = 4;
    p.steps_target = 9;
    p.time = 1700000001;
    p.done = true;
    p.final_version = 7;
    p.pending_by_version = json_pack("{s:i}", "6", 2);
    p.used_by_version = json_pack("{s:i, s:i}", "5", 3, "7", 1);
    json_t *j = progress_to_json(&p);
    ck_assert_ptr_nonnull(j);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    Progress back;
    PailErr err = {0};
    ck_assert_msg(parse_progress(text, &back, &err) == 0, "%s", err.msg);
    free(text);
    ck_assert_int_eq(back.version, 7);
    ck_assert_int_eq(back.step, 9);
    ck_assert_int_eq(back.consumed_shards, 11);
    ck_assert_int_eq(back.dropped_shards, 2);
    ck_assert_int_eq(back.rejected_shards, 1);
    ck_assert_int_eq(back.steps_skipped, 3);
    ck_assert_int_eq(back.max_staleness, 2);
    ck_assert_int_eq(back.groups_per_step, 4);
    ck_assert_int_eq(back.steps_target, 9);
    ck_assert_int_eq(back.time, 1700000001);
    ck_assert(back.done);
    ck_assert_int_eq(back.final_version, 7);
    ck_assert_int_eq(progress_used(&back, 5), 3);
    ck_assert_int_eq(progress_used(&back, 7), 1);
    ck_assert_int_eq(progress_used(&back, 6), 0);  // pending, not used
    progress_free(&back);
    progress_free(&p);
    // A trainer still running: not done, no final version.
    ck_assert(parse_progress("{\"version\":3,\"max-staleness\":1}", &back, &err) == 0);
    ck_assert(!back.done);
    ck_assert_int_eq(back.final_version, -1);
    ck_assert_int_eq(back.max_staleness, 1);  // the other spelling read too
    ck_assert_int_eq(progress_used(&back, 3), 0);
    progress_free(&back);
}
END_TEST

START_TEST(test_progress_wrong_types) {
    static const struct { const char *json, *want; } cases[] = {
        {"{\"version\":\"3\"}", "progress.json: field 'version' is a string, expected an integer"},
        {"{\"done\":1}", "field 'done' is an integer, expected true or false"},
        {"{\"used_shards_by_version\":{\"3\":\"x\"}}", "field 'used_shards_by_version.3' is a string, expected an integer"},
        {"{\"pending_shards_by_version\":[]}", "field 'pending_shards_by_version' is an array, expected an object"},
        {"{\"max_staleness\":{}}", "field 'max_staleness' is an object, expected an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Progress p;
        PailErr err = {0};
        ck_assert_msg(parse_progress(cases[i].json, &p, &err) == -1, "%s accepted", cases[i].json);
        ck_assert_msg(strstr(err.msg, cases[i].want), "%s: '%s' lacks '%s'", cases[i].json, err.msg, cases[i].want);
        ck_assert_ptr_null(p.used_by_version);
    }
}
END_TEST

START_TEST(test_store_read_write_and_probes) {
    char dir[256], url[300];
    tmp_make(dir, sizeof dir, "check-runmeta");
    snprintf(url, sizeof url, "file://%s", dir);
    Store *st;
    PailErr err = {0};
    ck_assert_msg(store_open(&st, url, NULL, &err) == 0, "%s", err.msg);
    RunInfo ri;
    ck_assert_int_eq(runinfo_read(st, &ri, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NOT_FOUND);
    Progress p;
    progress_init(&p);
    p.version = 4;
    p.max_staleness = 1;
    ck_assert_msg(progress_write(st, &p, &err) == 0, "%s", err.msg);
    progress_free(&p);
    ck_assert_msg(progress_read(st, &p, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.version, 4);
    ck_assert_int_eq(p.max_staleness, 1);
    progress_free(&p);
    // A damaged progress.json: the error names the object.
    ck_assert_int_eq(store_put(st, RUN_KEY_PROGRESS, "{\"step\":\"x\"}", 12, NULL, &err), 0);
    ck_assert_int_eq(progress_read(st, &p, &err), -1);
    ck_assert_msg(strstr(err.msg, "trainer/progress.json: field 'step' is a string"), "%s", err.msg);
    // doctor's probes (as its credentials could not delete them) go; other keys stay.
    const char *probes[] = {"adapters/doctor-probe-0123456789ab", "rollouts/doctor-create-only-0123456789ab",
                            "control/doctor-probe-0123456789ab"};
    for (int i = 0; i < 3; i++) ck_assert_int_eq(store_put(st, probes[i], "probe", 5, NULL, &err), 0);
    ck_assert_int_eq(store_put(st, "adapters/doctor-notes", "x", 1, NULL, &err), 0);
    ck_assert_int_eq(store_put(st, "adapters/v00000000.h5", "x", 1, NULL, &err), 0);
    int64_t n = -1;
    ck_assert_msg(run_gc_probes(st, true, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(n, 3);
    StoreStat ss;
    ck_assert_int_eq(store_head(st, probes[0], &ss, &err), 0);  // a dry run deletes nothing
    ck_assert_msg(run_gc_probes(st, false, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(store_head(st, probes[i], &ss, &err), -1);
    ck_assert_int_eq(store_head(st, "adapters/doctor-notes", &ss, &err), 0);
    ck_assert_int_eq(store_head(st, "adapters/v00000000.h5", &ss, &err), 0);
    store_close(st);
    tmp_remove(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("store_runmeta");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_runinfo_roundtrip);
    tcase_add_test(core, test_progress_roundtrip);
    tcase_add_test(core, test_store_read_write_and_probes);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_test(limits, test_runinfo_old_and_defaults);
    tcase_add_test(limits, test_runinfo_wrong_types);
    tcase_add_test(limits, test_progress_wrong_types);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
