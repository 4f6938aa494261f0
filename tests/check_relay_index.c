// Check suite for the relay's listing index (src/relay/listindex.c). "core":
// every page of every listing shape (prefix, delimiter, start-after, page
// sizes) equals the file store's own walk-and-sort listing of the same folder,
// the independent reference; the relay's own writes and deletes show at once,
// changes behind its back within the recheck interval, a restart sees all.
// "limits": names that sort around '/', bad names, a deep tree, and writers
// racing listers (a key the relay wrote is never missing from a later page).
// "fairness": the backend pool's per-key lanes (pool.c): a key with 40 slow
// jobs queued delays another key's job by at most one of them.
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check_tmp.h"
#include "core/fsutil.h"
#include "core/timeutil.h"
#include "relay/listindex.h"
#include "relay/relay_int.h"
#include "store/store.h"

static void touch(const char *root, const char *key) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, key);
    char *slash = strrchr(path, '/');
    *slash = 0;
    PailErr err = {0};
    ck_assert_msg(fs_mkdirs(path, &err) == 0, "%s", err.msg);
    *slash = '/';
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(key, f);
    fclose(f);
}

// The whole listing, page by page, as one text: "K key size\n" / "P prefix\n", "T" per page break.
static void list_text(Store *st, const char *prefix, const char *delim, const char *after, int max_keys, Buf *out) {
    buf_reset(out);
    char token[STORE_MAX_KEY + 64] = "";
    for (int page = 0; page < 100000; page++) {
        StoreList l = {0};
        StoreListOpts o = {.prefix = prefix, .delimiter = delim, .start_after = after, .max_keys = max_keys, .continuation = token[0] ? token : NULL};
        PailErr err = {0};
        ck_assert_msg(store_list(st, &o, &l, &err) == 0, "%s", err.msg);
        // Merge entries and prefixes in key order, as S3 clients read them.
        int i = 0, j = 0;
        while (i < l.n || j < l.nprefixes) {
            if (j >= l.nprefixes || (i < l.n && strcmp(l.entries[i].key, l.prefixes[j]) < 0)) {
                buf_printf(out, "K %s %llu\n", l.entries[i].key, (unsigned long long)l.entries[i].size);
                i++;
            } else {
                buf_printf(out, "P %s\n", l.prefixes[j++]);
            }
        }
        bool more = l.truncated;
        snprintf(token, sizeof token, "%s", l.next_token);
        store_list_free(&l);
        if (!more) return;
        buf_printf(out, "T\n");
    }
    ck_abort_msg("listing never ended");
}

typedef struct {
    char root[256];
    ListIndex *ix;
    Store *idx;  // wrapped: lists from the index, writes noted
    Store *ref;  // the plain file store: the reference walk
} T;

static void t_open(T *t, double recheck_s) {
    PailErr err = {0};
    char url[300];
    snprintf(url, sizeof url, "file://%s", t->root);
    ck_assert_msg(listindex_open(&t->ix, t->root, recheck_s, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(store_open(&t->idx, url, NULL, &err), 0);
    ck_assert_int_eq(store_open(&t->ref, url, NULL, &err), 0);
    listindex_attach(t->ix, t->idx);
}

static void t_close(T *t) {
    store_close(t->idx);
    store_close(t->ref);
    listindex_close(t->ix);
}

static void expect_same(T *t, const char *prefix, const char *delim, const char *after, int max_keys) {
    Buf a = {0}, b = {0};
    list_text(t->idx, prefix, delim, after, max_keys, &a);
    list_text(t->ref, prefix, delim, after, max_keys, &b);
    ck_assert_msg(a.len == b.len && !memcmp(a.data, b.data, a.len),
                  "prefix '%s' delimiter '%s' after '%s' max %d:\nindex:\n%s\nwalk:\n%s", prefix, delim ? delim : "",
                  after ? after : "", max_keys, a.data ? (char *)a.data : "", b.data ? (char *)b.data : "");
    buf_free(&a);
    buf_free(&b);
}

static bool listed(Store *st, const char *prefix, const char *key) {
    Buf a = {0};
    list_text(st, prefix, NULL, NULL, 1000, &a);
    char line[1200];
    snprintf(line, sizeof line, "K %s ", key);
    bool found = a.data && strstr((char *)a.data, line);
    buf_free(&a);
    return found;
}

static const char *g_keys[] = {
    "a.x",
    "a/b.c",
    "a/b/c",
    "a/b-c",
    "a/b0",
    "a-b/c",
    "a0",
    "b",
    "runs/r1/adapters/LATEST",
    "runs/r1/adapters/v00000001.h5",
    "runs/r1/adapters/v00000002.h5",
    "runs/r1/rollouts/v00000001/w0-000001.h5",
    "runs/r1/rollouts/v00000001/w0-000002.h5",
    "runs/r1/rollouts/v00000001/w1-000001.h5",
    "runs/r1/rollouts/v00000002/w0-000003.h5",
    "runs/r1/rollouts/v00000002.x",
    "runs/r1/run.json",
    "runs/r10/run.json",
    "runs/r1-b/run.json",
    "runs/r1.a",
    "runs/\xc3\xa9t\xc3\xa9/x",
    "z/y/x/w/v",
};

START_TEST(test_pages_equal_walk) {
    T t = {0};
    tmp_make(t.root, sizeof t.root, "lidx");
    for (size_t i = 0; i < sizeof g_keys / sizeof *g_keys; i++) touch(t.root, g_keys[i]);
    mkdir(strcat(strcpy((char[300]){0}, t.root), "/empty"), 0755);
    t_open(&t, 60);
    const char *prefixes[] = {"", "a", "a/", "a/b", "runs/", "runs/r1", "runs/r1/", "runs/r1/rollouts/",
                              "runs/r1/rollouts/v0000000", "runs/r1/rollouts/v00000003/w3", "nothing/", "zz", "empty"};
    const char *delims[] = {NULL, "/", "-", ".h5"};
    const char *afters[] = {NULL, "a/b", "runs/r1/rollouts/v00000001/w0-000001.h5", "runs/r1/rollouts/", "runs/r2", "\x7f"};
    int pages[] = {1, 3, 1000};
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++)
        for (size_t d = 0; d < sizeof delims / sizeof *delims; d++)
            for (size_t a = 0; a < sizeof afters / sizeof *afters; a++)
                for (size_t m = 0; m < sizeof pages / sizeof *pages; m++)
                    expect_same(&t, prefixes[p], delims[d], afters[a], pages[m]);
    t_close(&t);
    for (int i = 0; i < 1500; i++) {  // one folder wider than a page
        char k[128];
        snprintf(k, sizeof k, "runs/r1/rollouts/v00000003/w%d-%06d.h5", i % 7, i);
        touch(t.root, k);
    }
    t_open(&t, 60);
    ListIndexStats s;
    listindex_stats(t.ix, &s);
    ck_assert_int_eq(s.keys, (long)(sizeof g_keys / sizeof *g_keys) + 1500);
    expect_same(&t, "runs/", NULL, NULL, 1000);
    expect_same(&t, "runs/r1/rollouts/", "/", NULL, 1);
    expect_same(&t, "runs/r1/rollouts/v00000003/", "-", "runs/r1/rollouts/v00000003/w3", 2);
    expect_same(&t, "runs/r1/rollouts/v00000003/w5", NULL, NULL, 100);
    t_close(&t);
    tmp_remove(t.root);
}
END_TEST

START_TEST(test_own_writes_outside_changes_restart) {
    T t = {0};
    tmp_make(t.root, sizeof t.root, "lidx");
    touch(t.root, "runs/r1/run.json");
    t_open(&t, 0.3);  // outside changes within 0.3 s
    PailErr err = {0};
    // The relay's own writes and deletes: at once, in folders known and new.
    const char *mine[] = {"runs/r1/adapters/v00000001.h5", "runs/r1/rollouts/v00000001/w0-000001.h5", "runs/r1/zz"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(store_put(t.idx, mine[i], "x", 1, NULL, &err), 0);
        ck_assert_msg(listed(t.idx, "runs/", mine[i]), "%s not listed right after its put", mine[i]);
    }
    ck_assert_int_eq(store_delete(t.idx, mine[1], &err), 0);
    ck_assert(!listed(t.idx, "runs/", mine[1]));
    expect_same(&t, "", NULL, NULL, 1000);
    // Behind the index's back: a delete is never listed (every listed key is stat'ed) ...
    char path[600];
    snprintf(path, sizeof path, "%s/%s", t.root, mine[0]);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert(!listed(t.idx, "runs/", mine[0]));
    // ... and a new key shows within the recheck interval.
    touch(t.root, "runs/r1/rollouts/v00000002/w9-000001.h5");
    touch(t.root, "runs/r1/run2.json");
    time_sleep_ms(400);
    ck_assert(listed(t.idx, "runs/", "runs/r1/rollouts/v00000002/w9-000001.h5"));
    ck_assert(listed(t.idx, "runs/", "runs/r1/run2.json"));
    expect_same(&t, "", NULL, NULL, 1000);
    expect_same(&t, "runs/", "/", NULL, 1);
    // An outside folder removal and a file replaced by a folder of the same name.
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/runs/r1/rollouts' && mkdir -p '%s/runs/r1/zz.d' && rm '%s/runs/r1/zz' && "
                              "mkdir '%s/runs/r1/zz' && echo y > '%s/runs/r1/zz/inner'",
             t.root, t.root, t.root, t.root, t.root);
    ck_assert_int_eq(system(cmd), 0);
    time_sleep_ms(400);
    expect_same(&t, "", NULL, NULL, 1000);
    expect_same(&t, "runs/r1/", "/", NULL, 2);
    // A restart reads the tree again.
    t_close(&t);
    touch(t.root, "runs/r1/late.json");
    t_open(&t, 60);
    ck_assert(listed(t.idx, "runs/", "runs/r1/late.json"));
    expect_same(&t, "", NULL, NULL, 3);
    t_close(&t);
    tmp_remove(t.root);
}
END_TEST

START_TEST(test_bad_names_and_depth) {
    T t = {0};
    tmp_make(t.root, sizeof t.root, "lidx");
    touch(t.root, "ok/a");
    touch(t.root, "ok/b\x01");         // control character: no key can name it
    touch(t.root, "ok/\xff\xfe");      // not UTF-8
    touch(t.root, "ok/.pail-meta.a");  // reserved
    touch(t.root, "ok/c");
    char deep[2048] = "deep";
    for (int i = 0; i < 70; i++) strcat(deep, "/d");
    strcat(deep, "/k");
    touch(t.root, deep);
    char lnk[600];
    snprintf(lnk, sizeof lnk, "%s/ok/link", t.root);
    ck_assert_int_eq(symlink("/etc/passwd", lnk), 0);  // never a key (as the file store's walk)
    t_open(&t, 60);
    expect_same(&t, "", NULL, NULL, 1000);
    expect_same(&t, "ok/", NULL, NULL, 1);
    expect_same(&t, "deep/", "/", NULL, 1000);
    ck_assert(listed(t.idx, "ok/", "ok/c"));
    ck_assert(!listed(t.idx, "ok/", "ok/link"));
    t_close(&t);
    tmp_remove(t.root);
}
END_TEST

typedef struct {
    T *t;
    int id;
    int missing;
    bool stop;
} Writer;

// Puts keys through its own wrapped Store; after each put, lists from another
// thread's point of view (a fresh page from the same index) and checks it is there.
static void *writer(void *arg) {
    Writer *w = arg;
    char url[300];
    snprintf(url, sizeof url, "file://%s", w->t->root);
    Store *st = NULL;
    PailErr err = {0};
    if (store_open(&st, url, NULL, &err) < 0) return NULL;
    listindex_attach(w->t->ix, st);
    for (int i = 0; i < 150; i++) {
        char key[128], pre[64];
        snprintf(pre, sizeof pre, "runs/r1/rollouts/v%08d/", i % 5);
        snprintf(key, sizeof key, "%sw%d-%06d.h5", pre, w->id, i);
        if (store_put(st, key, "x", 1, NULL, &err) < 0) continue;
        if (!listed(st, pre, key)) w->missing++;
        if (i % 3 == 0) {
            store_delete(st, key, &err);
            if (listed(st, pre, key)) w->missing++;
        }
    }
    store_close(st);
    return NULL;
}

// Outside writers make folders change under the listers (re-reads race the puts).
static void *outsider(void *arg) {
    Writer *w = arg;
    for (int i = 0; !w->stop && i < 100000; i++) {
        char key[128];
        snprintf(key, sizeof key, "runs/r1/rollouts/v%08d/out-%06d.h5", i % 5, i);
        touch(w->t->root, key);
        time_sleep_ms(2);
    }
    return NULL;
}

START_TEST(test_writers_race_listers) {
    T t = {0};
    tmp_make(t.root, sizeof t.root, "lidx");
    touch(t.root, "runs/r1/run.json");
    t_open(&t, 0.001);  // every listing re-reads changed folders: the race at its widest
    Writer w[4] = {{&t, 0, 0, false}, {&t, 1, 0, false}, {&t, 2, 0, false}, {&t, 3, 0, false}};
    Writer out = {&t, 9, 0, false};
    pthread_t th[4], to;
    pthread_create(&to, NULL, outsider, &out);
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, writer, &w[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    out.stop = true;
    pthread_join(to, NULL);
    for (int i = 0; i < 4; i++) ck_assert_msg(w[i].missing == 0, "writer %d: %d own writes missing or deletes listed", i, w[i].missing);
    time_sleep_ms(5);
    expect_same(&t, "", NULL, NULL, 1000);
    t_close(&t);
    tmp_remove(t.root);
}
END_TEST

typedef struct {
    PoolJob job;
    int64_t submit_ms, start_ms;
    int sleep_ms;
} SlowJob;

static void slow_run(PoolJob *j, Store *st) {
    (void)st;
    SlowJob *s = (SlowJob *)j;
    s->start_ms = time_mono_ms();
    time_sleep_ms(s->sleep_ms);
}

static void slow_done(PoolJob *j) { (void)j; }

// 40 jobs of 100 ms from one key on 4 threads, then one job of another key:
// it waits for a free share (cap 3: none) or one running job (cap 4), where a
// single queue made it wait for all 40 (1 s).
static int64_t other_key_wait(int cap) {
    struct event_base *base = event_base_new();
    Pool p;
    PailErr err = {0};
    ck_assert_msg(pool_start(&p, base, 4, "file:///tmp", NULL, &err) == 0, "%s", err.msg);
    p.key_cap = cap;
    SlowJob *jobs = calloc(41, sizeof *jobs);
    for (int i = 0; i < 41; i++) {
        jobs[i].job = (PoolJob){.run = slow_run, .done = slow_done, .owner = i < 40 ? "rollout" : "trainer"};
        jobs[i].sleep_ms = i < 40 ? 100 : 1;
    }
    for (int i = 0; i < 40; i++) pool_submit(&p, &jobs[i].job);
    time_sleep_ms(20);  // the rollout key's jobs hold the threads
    jobs[40].submit_ms = time_mono_ms();
    pool_submit(&p, &jobs[40].job);
    for (int i = 0; i < 500 && !jobs[40].start_ms; i++) time_sleep_ms(10);
    int64_t wait = jobs[40].start_ms ? jobs[40].start_ms - jobs[40].submit_ms : 5000;
    pool_stop(&p);
    event_base_free(base);
    free(jobs);
    return wait;
}

START_TEST(test_pool_share) {
    int64_t w3 = other_key_wait(3), w4 = other_key_wait(4);
    // Sleeping jobs need no CPU, and one queue made it ~1000 ms: the bounds leave
    // room for a loaded machine's scheduling.
    ck_assert_msg(w3 < 300, "with a free share the trainer's job waited %lld ms", (long long)w3);
    ck_assert_msg(w4 < 600, "round-robin: the trainer's job waited %lld ms (one running job is 100 ms)", (long long)w4);
}
END_TEST

int main(void) {
    Suite *s = suite_create("relay_index");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_pages_equal_walk);
    tcase_add_test(core, test_own_writes_outside_changes_restart);
    tcase_set_timeout(core, 60);
    suite_add_tcase(s, core);
    TCase *lim = tcase_create("limits");
    tcase_add_test(lim, test_bad_names_and_depth);
    tcase_add_test(lim, test_writers_race_listers);
    tcase_set_timeout(lim, 60);
    suite_add_tcase(s, lim);
    TCase *fair = tcase_create("fairness");
    tcase_add_test(fair, test_pool_share);
    tcase_set_timeout(fair, 60);
    suite_add_tcase(s, fair);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
