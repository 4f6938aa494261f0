// Check suite for src/grpo/feed.c on a file:// bucket: groups handed out in
// (version, key) order, commit and re-take, shards arriving late and out of
// order, the staleness window (drops counted), rejections recorded under
// trainer/rejected/, the consumption record surviving export/import, and the
// per-step record of committed groups replayed in its order.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "grpo/feed.h"
#include "store/runlayout.h"
#include "store/versions.h"
#include "check_tmp.h"

static char g_dir[256], g_url[300];

static void setup(void) {
    tmp_make(g_dir, sizeof g_dir, "check-feed");
    snprintf(g_url, sizeof g_url, "file://%s", g_dir);
}

static void teardown(void) { tmp_remove(g_dir); }

// A valid shard of P groups x G=2 completions for adapter version v.
static void put_shard(Store *st, long v, const char *worker, long seq, int P) {
    int N = 2 * P;
    int32_t pid[64], cid[64], grp[64];
    int64_t poff[33], pidx[32], coff[65];
    float lp[64], rew[64], comp[64];
    uint8_t valid[64], fin[64];
    for (int p = 0; p <= P; p++) poff[p] = p;
    for (int p = 0; p < P; p++) { pid[p] = 5; pidx[p] = p; }
    for (int i = 0; i <= N; i++) coff[i] = i;
    for (int i = 0; i < N; i++) {
        cid[i] = 7; grp[i] = i / 2; lp[i] = -0.5f; rew[i] = (float)(i % 2); comp[i] = rew[i]; valid[i] = 1; fin[i] = 0;
    }
    RolloutShard s = {.adapter_version = v, .created_unix = 1, .temperature = 1, .top_p = 1, .max_new_tokens = 4,
                      .P = P, .N = N, .K = 1, .prompt_ids = pid, .prompt_offsets = poff, .prompt_index = pidx,
                      .completion_ids = cid, .completion_offsets = coff, .group = grp, .logprobs = lp,
                      .rewards = rew, .reward_valid = valid, .reward_components = comp, .finish_reason = fin};
    s.component_names[0] = "r";
    snprintf(s.worker_id, sizeof s.worker_id, "%s", worker);
    memset(s.base_sha256, 'a', 64);
    Buf img = {0};
    PailErr err = {0};
    ck_assert_int_eq(shard_write(&s, &img, &err), 0);
    char key[256];
    run_key_rollout(key, sizeof key, v, worker, seq);
    ck_assert_int_eq(versioned_put(st, key, img.data, img.len, &err), 0);
    buf_free(&img);
}

static char g_base[65];
static FeedConfig cfg(int stale) {
    memset(g_base, 'a', 64);
    g_base[64] = 0;
    return (FeedConfig){.base_sha256 = g_base, .tokenizer_sha256 = "", .vocab = 100, .group_size = 2,
                        .max_staleness = stale};
}

START_TEST(test_order_commit_late) {
    Store *st;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&st, g_url, NULL, &err), 0);
    put_shard(st, 1, "wb", 1, 2);
    put_shard(st, 0, "wa", 1, 3);
    FeedConfig c = cfg(4);
    Feed f;
    feed_init(&f, st, st, &c);
    ck_assert_int_eq(feed_refresh(&f, 1, &err), 0);
    GroupRef refs[16];
    int got;
    ck_assert_int_eq(feed_take(&f, 4, refs, &got, &err), 0);
    ck_assert_int_eq(got, 4);
    ck_assert_int_eq(refs[0].version, 0);  // oldest version first
    ck_assert_int_eq(refs[2].group, 2);
    ck_assert_int_eq(refs[3].version, 1);
    // A shard arriving late for an old version is still found (no start-after cursor).
    put_shard(st, 0, "wc", 1, 1);
    ck_assert_int_eq(feed_refresh(&f, 1, &err), 0);
    // A take before commit does not hand out the same groups again.
    ck_assert_int_eq(feed_take(&f, 8, refs + 4, &got, &err), 0);
    ck_assert_int_eq(got, 2);  // wb's second group, then wc's
    ck_assert(refs[0].s->rewards[1] == 1.0f);  // refs from before the refresh still point at their shard
    feed_commit(&f, refs, 6, 1);
    ck_assert_int_eq(feed_take(&f, 8, refs, &got, &err), 0);
    ck_assert_int_eq(got, 0);
    ck_assert_int_eq(f.stats.consumed, 3);
    ck_assert_int_eq(feed_pending_shards(&f), 0);
    feed_free(&f);
    store_close(st);
}
END_TEST

START_TEST(test_staleness_and_rejects) {
    Store *st;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&st, g_url, NULL, &err), 0);
    put_shard(st, 0, "wa", 1, 2);
    put_shard(st, 1, "wa", 2, 2);
    put_shard(st, 2, "wa", 3, 2);
    ck_assert_int_eq(versioned_put(st, "rollouts/v00000002/zz-000001.h5", "junk", 4, &err), 0);
    FeedConfig c = cfg(1);
    Feed f;
    feed_init(&f, st, st, &c);
    ck_assert_int_eq(feed_refresh(&f, 1, &err), 0);  // window v0..v1
    ck_assert_int_eq(f.n, 2);
    ck_assert_int_eq(feed_refresh(&f, 3, &err), 0);  // window v2..v3: v0 and v1 fall out, unused
    ck_assert_int_eq(f.stats.dropped, 2);
    GroupRef refs[8];
    int got;
    ck_assert_int_eq(feed_take(&f, 8, refs, &got, &err), 0);
    ck_assert_int_eq(got, 2);  // v2's good shard; the junk one rejected on the way
    ck_assert_int_eq(f.stats.rejected, 1);
    StoreStat ss;
    ck_assert_int_eq(store_head(st, "trainer/rejected/rollouts/v00000002/zz-000001.h5.json", &ss, &err), 0);
    feed_commit(&f, refs, got, 1);
    // The consumption record survives a restart (export -> import).
    char **keys;
    int64_t *vers;
    int32_t *ng, *used;
    int n;
    ck_assert_int_eq(feed_export(&f, &keys, &vers, &ng, &used, &n), 0);
    Feed f2;
    feed_init(&f2, st, st, &c);
    ck_assert_int_eq(feed_import(&f2, keys, vers, ng, used, n, &err), 0);
    free(keys); free(vers); free(ng); free(used);
    put_shard(st, 3, "wb", 1, 1);
    ck_assert_int_eq(feed_refresh(&f2, 3, &err), 0);
    ck_assert_int_eq(feed_take(&f2, 8, refs, &got, &err), 0);
    ck_assert_int_eq(got, 1);  // only the new shard: nothing trained twice
    ck_assert_int_eq(refs[0].version, 3);
    feed_free(&f2);
    feed_free(&f);
    // A shard of another base is rejected, not trained on.
    Feed f3;
    FeedConfig c3 = cfg(4);
    c3.base_sha256 = "bbbb";
    feed_init(&f3, st, st, &c3);
    ck_assert_int_eq(feed_refresh(&f3, 3, &err), 0);
    ck_assert_int_eq(feed_take(&f3, 8, refs, &got, &err), 0);
    ck_assert_int_eq(got, 0);
    ck_assert_int_eq(f3.stats.rejected, 5);  // four good-but-foreign shards (v0..v3) and the junk
    feed_free(&f3);
    // An empty record (the state of v0, before any shard was listed) imports
    // as an empty feed (qsort of NULL: undefined, fatal under make asan).
    Feed f4;
    feed_init(&f4, st, st, &c);
    ck_assert_int_eq(feed_import(&f4, NULL, NULL, NULL, NULL, 0, &err), 0);
    ck_assert_int_eq(f4.n, 0);
    feed_free(&f4);
    store_close(st);
}
END_TEST

// A shard that lands for a version after the trainer's last listing of it,
// just before the window moves past it, is counted as dropped (the leaving
// versions are listed one last time), not silently never seen.
START_TEST(test_late_shard_counted) {
    Store *st;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&st, g_url, NULL, &err), 0);
    put_shard(st, 0, "wa", 1, 2);
    FeedConfig c = cfg(1);
    Feed f;
    feed_init(&f, st, st, &c);
    ck_assert_int_eq(feed_refresh(&f, 1, &err), 0);  // window v0..v1
    GroupRef refs[8];
    int got;
    ck_assert_int_eq(feed_take(&f, 2, refs, &got, &err), 0);
    ck_assert_int_eq(feed_commit(&f, refs, got, 1), 0);
    put_shard(st, 0, "wb", 1, 2);                     // lands late for v0
    ck_assert_int_eq(feed_refresh(&f, 2, &err), 0);  // window v1..v2: v0 leaves
    ck_assert_int_eq(f.stats.dropped, 1);
    ck_assert_int_eq(f.n, 0);
    put_shard(st, 0, "wc", 1, 2);                     // later still: with no grace v0 is never listed again
    ck_assert_int_eq(feed_refresh(&f, 2, &err), 0);
    ck_assert_int_eq(f.stats.dropped, 1);
    feed_free(&f);
    store_close(st);
}
END_TEST

// With a grace period the versions that left the window are re-listed: a shard
// landing for one of them much later (its worker frozen between its window
// check and its upload) is counted as dropped exactly once, across refreshes
// and across an export/import (a trainer restart); after the grace the entries
// go, and late_listed_unix/_from say what the counts cover.
START_TEST(test_late_shard_grace) {
    Store *st;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&st, g_url, NULL, &err), 0);
    put_shard(st, 0, "wa", 1, 2);
    FeedConfig c = cfg(1);
    c.late_grace_s = 3600;
    c.late_every_s = 0;
    Feed f;
    feed_init(&f, st, st, &c);
    ck_assert_int_eq(f.late_listed_unix, -1);
    ck_assert_int_eq(feed_refresh(&f, 1, &err), 0);  // window v0..v1, nothing behind it
    ck_assert_int_eq(f.late_listed_unix, -1);
    GroupRef refs[8];
    int got;
    ck_assert_int_eq(feed_take(&f, 2, refs, &got, &err), 0);
    ck_assert_int_eq(feed_commit(&f, refs, got, 1), 0);
    ck_assert_int_eq(feed_refresh(&f, 3, &err), 0);  // window v2..v3: v0 and v1 leave (v0 used up)
    ck_assert_int_eq(f.stats.dropped, 0);
    ck_assert_int_eq(f.late_listed_from, 0);
    ck_assert_int_ge(f.late_listed_unix, 1);
    put_shard(st, 1, "wb", 1, 2);  // lands for v1 after v1 left
    put_shard(st, 3, "wb", 2, 1);  // and one inside the window
    ck_assert_int_eq(feed_refresh(&f, 3, &err), 0);
    ck_assert_int_eq(f.stats.dropped, 1);
    ck_assert_int_eq(feed_pending_shards(&f), 1);  // the v3 one: the re-listing listed the window too
    ck_assert_int_eq(feed_refresh(&f, 3, &err), 0);
    ck_assert_int_eq(f.stats.dropped, 1);  // counted once
    // A restart: the settled entries behind the window travel in the state.
    char **keys;
    int64_t *versions;
    int32_t *ng, *used;
    int n;
    ck_assert_int_eq(feed_export(&f, &keys, &versions, &ng, &used, &n), 0);
    ck_assert_int_eq(n, 3);
    Feed g;
    feed_init(&g, st, st, &c);
    g.stats.dropped = f.stats.dropped;
    ck_assert_int_eq(feed_import(&g, keys, versions, ng, used, n, &err), 0);
    free(keys); free(versions); free(ng); free(used);
    put_shard(st, 0, "wc", 1, 1);  // later still, for v0: still re-listed after the restart
    ck_assert_int_eq(feed_refresh(&g, 3, &err), 0);
    ck_assert_int_eq(g.stats.dropped, 2);
    ck_assert_int_eq(feed_refresh_all(&g, 3, &err), 0);
    ck_assert_int_eq(g.stats.dropped, 2);
    ck_assert_int_eq(feed_pending_shards(&g), 1);
    feed_free(&g);
    // Grace over: the entries behind the window go, nothing more is listed there.
    f.cfg.late_grace_s = 0.05;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(feed_refresh(&f, 3, &err), 0);
    for (int i = 0; i < f.n; i++) ck_assert_int_ge(f.shards[i]->version, 2);
    ck_assert_int_eq(f.gone_n, 0);
    feed_free(&f);
    store_close(st);
}
END_TEST

// The record: each commit appends runs of consecutive groups of one shard,
// tagged with the step; a feed replaying it hands out exactly those groups, in
// that order, across shards, and says when a named shard cannot serve them.
START_TEST(test_record_replay) {
    Store *st;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&st, g_url, NULL, &err), 0);
    put_shard(st, 0, "wa", 1, 3);
    put_shard(st, 0, "wb", 1, 2);
    FeedConfig c = cfg(4);
    Feed f;
    feed_init(&f, st, st, &c);
    ck_assert_int_eq(feed_refresh(&f, 0, &err), 0);
    GroupRef refs[8];
    int got;
    ck_assert_int_eq(feed_take(&f, 2, refs, &got, &err), 0);  // wa g0 g1
    ck_assert_int_eq(feed_commit(&f, refs, got, 1), 0);
    ck_assert_int_eq(feed_take(&f, 2, refs, &got, &err), 0);  // wa g2, wb g0
    ck_assert_int_eq(feed_commit(&f, refs, got, 2), 0);
    ck_assert_int_eq(f.rec_n, 3);
    ck_assert_str_eq(f.rec[0].key, "rollouts/v00000000/wa-000001.h5");
    ck_assert_int_eq(f.rec[0].step, 1);
    ck_assert_int_eq(f.rec[0].first, 0);
    ck_assert_int_eq(f.rec[0].count, 2);
    ck_assert_int_eq(f.rec[1].first, 2);
    ck_assert_int_eq(f.rec[1].step, 2);
    ck_assert_str_eq(f.rec[2].key, "rollouts/v00000000/wb-000001.h5");
    // Replayed in another order than key order: wb first, then wa's groups 1 and 0.
    FeedRecord rec[3] = {{.step = 1, .key = "rollouts/v00000000/wb-000001.h5", .first = 1, .count = 1},
                         {.step = 1, .key = "rollouts/v00000000/wa-000001.h5", .first = 1, .count = 1},
                         {.step = 2, .key = "rollouts/v00000000/wa-000001.h5", .first = 0, .count = 1}};
    Feed r;
    FeedConfig rc = c;
    rc.replay = true;
    feed_init(&r, st, st, &rc);
    ck_assert_int_eq(feed_replay_record(&r, rec, 3, &err), 0);
    ck_assert_int_eq(feed_refresh(&r, 0, &err), 0);
    ck_assert_int_eq(feed_pending_shards(&r), 3);
    ck_assert_int_eq(feed_take(&r, 2, refs, &got, &err), 0);
    ck_assert_int_eq(got, 2);
    ck_assert_str_eq(refs[0].src->key, "rollouts/v00000000/wb-000001.h5");
    ck_assert_int_eq(refs[0].group, 1);
    ck_assert_str_eq(refs[1].src->key, "rollouts/v00000000/wa-000001.h5");
    ck_assert_int_eq(refs[1].group, 1);
    ck_assert_int_eq(feed_commit(&r, refs, got, 1), 0);
    ck_assert_int_eq(feed_take(&r, 2, refs, &got, &err), 0);
    ck_assert_int_eq(got, 1);
    ck_assert_int_eq(refs[0].group, 0);
    ck_assert_int_eq(feed_commit(&r, refs, got, 2), 0);
    ck_assert_int_eq(feed_pending_shards(&r), 0);
    feed_free(&r);
    // A record naming a group the shard does not have: one line naming both.
    FeedRecord bad = {.step = 1, .key = "rollouts/v00000000/wb-000001.h5", .first = 5, .count = 1};
    feed_init(&r, st, st, &rc);
    ck_assert_int_eq(feed_replay_record(&r, &bad, 1, &err), 0);
    ck_assert_int_eq(feed_take(&r, 1, refs, &got, &err), -1);
    ck_assert_msg(strstr(err.msg, "group 5 of rollouts/v00000000/wb-000001.h5"), "%s", err.msg);
    feed_free(&r);
    feed_free(&f);
    store_close(st);
}
END_TEST

int main(void) {
    Suite *s = suite_create("grpo_feed");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(core, test_order_commit_late);
    tcase_add_test(core, test_record_replay);
    tcase_add_test(core, test_late_shard_counted);
    tcase_add_test(core, test_late_shard_grace);
    tcase_add_test(limits, test_staleness_and_rejects);
    tcase_set_timeout(limits, 60);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
