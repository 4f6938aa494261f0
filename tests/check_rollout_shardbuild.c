// Check suite for src/rollout/shardbuild.c: plain groups and episodes (a
// shared opening, a segment) built into shards that pass shard_check and come
// back from shard_write / shard_read as built; names copied, not borrowed; a
// group without an opening, more than SHARD_MAX_COMPONENTS names; the
// create-only publish moving past taken sequence numbers.
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include "check_tmp.h"
#include "rollout/shardbuild.h"
#include "store/versions.h"

// s written and read back: the same sizes, prompts, rows and rewards.
static void round_trip(const RolloutShard *s) {
    PailErr err = {0};
    ck_assert_msg(shard_check(s, 0, "built", &err) == 0, "%s", err.msg);
    Buf img = {0};
    ck_assert_msg(shard_write(s, &img, &err) == 0, "%s", err.msg);
    RolloutShard r;
    ck_assert_msg(shard_read(&r, img.data, img.len, "built", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.P, s->P);
    ck_assert_int_eq(r.N, s->N);
    ck_assert_int_eq(r.X, s->X);
    ck_assert_int_eq(r.K, s->K);
    int64_t R = s->N + s->X, nt = s->completion_offsets[R];
    ck_assert_mem_eq(r.prompt_ids, s->prompt_ids, (size_t)s->prompt_offsets[s->P] * sizeof(int32_t));
    ck_assert_mem_eq(r.completion_offsets, s->completion_offsets, (size_t)(R + 1) * sizeof(int64_t));
    ck_assert_mem_eq(r.completion_ids, s->completion_ids, (size_t)nt * sizeof(int32_t));
    ck_assert_mem_eq(r.logprobs, s->logprobs, (size_t)nt * sizeof(float));
    ck_assert_mem_eq(r.group, s->group, (size_t)R * sizeof(int32_t));
    ck_assert_mem_eq(r.rewards, s->rewards, (size_t)R * sizeof(float));
    for (int k = 0; k < s->K; k++) ck_assert_str_eq(r.component_names[k], s->component_names[k]);
    shard_free(&r);
    buf_free(&img);
}

START_TEST(test_groups) {
    int32_t p0[] = {5, 6, 7}, p1[] = {8};
    GenPrompt pr[2] = {{.ids = p0, .n = 3}, {.ids = p1, .n = 1}};
    int32_t c0[] = {1, 2}, c1[] = {3}, c2[] = {4, 4, 4}, c3[] = {9};
    float l0[] = {-0.5f, -1}, l1[] = {-2}, l2[] = {-0.1f, -0.2f, -0.3f}, l3[] = {0};
    GenCompletion out[4] = {{c0, l0, 2, FINISH_STOP}, {c1, l1, 1, FINISH_LENGTH}, {c2, l2, 3, FINISH_STOP},
                            {c3, l3, 1, FINISH_STOP}};
    int64_t rows[2] = {11, 3};
    char n0[] = "format", n1[] = "length";
    const char *names[2] = {n0, n1};
    RolloutShard s = {0};
    PailErr err = {0};
    ck_assert_msg(shard_build_groups(&s, pr, 2, 2, out, rows, names, 2, &err) == 0, "%s", err.msg);
    n0[0] = 'X';  // the shard holds copies
    ck_assert_str_eq(s.component_names[0], "format");
    ck_assert_ptr_null(s.completion_mask);  // plain: written as all ones
    ck_assert_int_eq(s.prompt_offsets[2], 4);
    ck_assert_int_eq(s.completion_offsets[4], 7);
    ck_assert_int_eq(s.completion_ids[3], 4);
    ck_assert_int_eq(s.group[2], 1);
    ck_assert_int_eq(s.finish_reason[1], FINISH_LENGTH);
    ck_assert_int_eq(s.prompt_index[0], 11);
    for (int i = 0; i < 4; i++) s.rewards[i] = (float)i, s.reward_valid[i] = 1;  // the caller scores
    snprintf(s.worker_id, sizeof s.worker_id, "w");
    round_trip(&s);
    shard_free(&s);
}
END_TEST

// Two episodes of one row whose openings share 2 tokens; the second has an
// earlier segment (its agent edited the history).
START_TEST(test_episodes) {
    int32_t o0[] = {1, 2, 3}, o1[] = {1, 2, 9, 9}, i0[] = {20, 21}, i1[] = {22}, sid[] = {30, 31};
    float l0[] = {-1, -1}, l1[] = {-2}, sl[] = {-3, 0};
    uint8_t m0[] = {1, 1}, m1[] = {1}, sm[] = {1, 0};
    EpisodeSeg seg = {.ids = sid, .logprobs = sl, .mask = sm, .n = 2, .turns = 1, .finish = FINISH_STOP};
    json_t *c = json_pack("{s:f, s:f}", "digit", 1.0, "turns", 3.0);
    EpisodeOut out[2] = {{.open_ids = o0, .n_open = 3, .ids = i0, .logprobs = l0, .mask = m0, .n = 2, .turns = 2,
                          .valid = true, .reward = 1, .components = c},
                         {.open_ids = o1, .n_open = 4, .ids = i1, .logprobs = l1, .mask = m1, .n = 1, .turns = 3,
                          .valid = true, .reward = 0.5, .components = c, .segs = &seg, .n_segs = 1}};
    int64_t rows[1] = {4};
    RolloutShard s = {0};
    EpisodeShardInfo info;
    PailErr err = {0};
    ck_assert_msg(shard_build_episodes(&s, out, 1, 2, rows, 0, &info, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(s.X, 1);
    ck_assert_int_eq(s.K, 2);
    ck_assert_int_eq(info.failed, 0);
    ck_assert_int_eq(info.generated, 2 + 1 + 1);
    ck_assert_int_eq(s.prompt_offsets[1], 2);  // the shared {1, 2}
    // Row 0: {3} (mask 0) then {20, 21}; row 1: {9, 9} then {22}; the segment: {9, 9} then {30, 31}.
    int32_t want[] = {3, 20, 21, 9, 9, 22, 9, 9, 30, 31};
    uint8_t mask[] = {0, 1, 1, 0, 0, 1, 0, 0, 1, 0};
    ck_assert_int_eq(s.completion_offsets[3], 10);
    ck_assert_mem_eq(s.completion_ids, want, sizeof want);
    ck_assert_mem_eq(s.completion_mask, mask, sizeof mask);
    ck_assert_int_eq(s.segment_of[0], 1);
    ck_assert_int_eq(s.group[2], 0);
    ck_assert_int_eq(s.turns[1], 2);  // its own turns, less the segment's
    ck_assert(s.rewards[2] == 0.5f);
    ck_assert(s.reward_components[2 * 2 + 1] == 3.0f);
    snprintf(s.worker_id, sizeof s.worker_id, "w");
    round_trip(&s);
    shard_free(&s);
    json_decref(c);
}
END_TEST

START_TEST(test_limits) {
    // A group never opened: the placeholder prompt and failed rewards; 40 names: 32 kept.
    json_t *c = json_object();
    for (int k = 0; k < 40; k++) {
        char name[8];
        snprintf(name, sizeof name, "c%02d", k);
        json_object_set_new(c, name, json_real(0.5));
    }
    int32_t ids[] = {7};
    float lp[] = {-1};
    uint8_t m[] = {1};
    EpisodeOut out[2] = {{.ids = ids, .logprobs = lp, .mask = m, .n = 1, .valid = true, .reward = 1, .components = c},
                         {.ids = ids, .logprobs = lp, .mask = m, .n = 1, .valid = false}};
    snprintf(out[1].why, sizeof out[1].why, "it broke");
    int64_t rows[1] = {0};
    RolloutShard s = {0};
    EpisodeShardInfo info;
    PailErr err = {0};
    ck_assert_msg(shard_build_episodes(&s, out, 1, 2, rows, 42, &info, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(s.prompt_offsets[1], 1);
    ck_assert_int_eq(s.prompt_ids[0], 42);
    ck_assert_int_eq(s.reward_valid[0], 0);
    ck_assert_int_eq(s.K, SHARD_MAX_COMPONENTS);
    ck_assert_str_eq(info.dropped, "c32");
    ck_assert_int_eq(info.failed, 1);
    ck_assert_str_eq(info.why, "it broke");
    shard_free(&s);
    json_decref(c);

    // Publish: create-only, past the numbers taken.
    char dir[64], url[96], key[256];
    tmp_make(dir, sizeof dir, "shardbuild");
    snprintf(url, sizeof url, "file://%s", dir);
    Store *st = NULL;
    ck_assert_msg(store_open(&st, url, NULL, &err) == 0, "%s", err.msg);
    int32_t p0[] = {5};
    GenPrompt pr[1] = {{.ids = p0, .n = 1}};
    GenCompletion gc[1] = {{ids, lp, 1, FINISH_STOP}};
    ck_assert_msg(shard_build_groups(&s, pr, 1, 1, gc, rows, NULL, 0, &err) == 0, "%s", err.msg);
    s.adapter_version = 3;
    snprintf(s.worker_id, sizeof s.worker_id, "w");
    long seq = 0;
    ck_assert_msg(shard_publish(st, &s, &seq, key, sizeof key, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(key, "rollouts/v00000003/w-000000.h5");
    ck_assert_int_eq(seq, 1);
    seq = 0;  // a restart that does not know of it, with another shard (the same bytes count as written)
    s.seed = 1;
    ck_assert_msg(shard_publish(st, &s, &seq, key, sizeof key, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(key, "rollouts/v00000003/w-000001.h5");
    ck_assert_int_eq(seq, 2);
    shard_free(&s);
    store_close(st);
    tmp_remove(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_shardbuild");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_groups);
    tcase_add_test(core, test_episodes);
    tcase_add_test(limits, test_limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
