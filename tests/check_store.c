// Check suite for src/store on the file:// backend: objects, metadata,
// create-only, listing with pagination and delimiter, key validation, and the
// versioned-key protocol (verified reads, latest, waiting, two racing writers,
// run manifest). The s3:// backend has its own suites (check_store_s3*.c).
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/timeutil.h"
#include "store/runlayout.h"
#include "store/store.h"
#include "store/versions.h"
#include "check_tmp.h"

static char g_dir[256];
static char g_url[300];

static void setup(void) {
    tmp_make(g_dir, sizeof g_dir, "check-store");
    snprintf(g_url, sizeof g_url, "file://%s", g_dir);
}

static void teardown(void) { tmp_remove(g_dir); }

static Store *open_store(void) {
    Store *st;
    PailErr err = {0};
    ck_assert_msg(store_open(&st, g_url, NULL, &err) == 0, "%s", err.msg);
    return st;
}

START_TEST(test_put_get_head_delete) {
    Store *st = open_store();
    PailErr err = {0};
    StoreMeta meta = {.name = "color", .value = "blue"};
    StorePutOpts opt = {.nmeta = 1, .meta = &meta};
    ck_assert_int_eq(store_put(st, "a/b/c.bin", "hello world", 11, &opt, &err), 0);
    Buf b = {0};
    StoreStat ss;
    ck_assert_int_eq(store_get(st, "a/b/c.bin", &b, NULL, &ss, &err), 0);
    ck_assert_uint_eq(b.len, 11);
    ck_assert(!memcmp(b.data, "hello world", 11));
    ck_assert_uint_eq(ss.size, 11);
    ck_assert_str_eq(store_stat_meta(&ss, "color"), "blue");
    // Range read (inclusive end, as HTTP) and a range past the end clipped.
    buf_reset(&b);
    StoreGetOpts r = {.range_start = 6, .range_end = 100};
    ck_assert_int_eq(store_get(st, "a/b/c.bin", &b, &r, NULL, &err), 0);
    ck_assert_uint_eq(b.len, 5);
    ck_assert(!memcmp(b.data, "world", 5));
    // Conditional get: same etag -> not modified; after a rewrite -> the new bytes.
    StoreGetOpts c = {.range_end = -1, .if_none_match = ss.etag};
    buf_reset(&b);
    ck_assert_int_eq(store_get(st, "a/b/c.bin", &b, &c, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NOT_MODIFIED);
    ck_assert_int_eq(store_put(st, "a/b/c.bin", "HELLO", 5, NULL, &err), 0);
    ck_assert_int_eq(store_get(st, "a/b/c.bin", &b, &c, NULL, &err), 0);
    ck_assert_str_eq((char *)b.data, "HELLO");
    StoreStat hs;
    ck_assert_int_eq(store_head(st, "a/b/c.bin", &hs, &err), 0);
    ck_assert_uint_eq(hs.size, 5);
    ck_assert_ptr_null(store_stat_meta(&hs, "color"));  // a rewrite replaces metadata
    ck_assert_int_eq(store_delete(st, "a/b/c.bin", &err), 0);
    ck_assert_int_eq(store_head(st, "a/b/c.bin", &hs, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NOT_FOUND);
    ck_assert_int_eq(store_delete(st, "a/b/c.bin", &err), 0);  // S3: deleting nothing is fine
    char path[400];
    snprintf(path, sizeof path, "%s/a", g_dir);
    ck_assert_int_ne(access(path, F_OK), 0);  // empty parent folders removed
    buf_free(&b);
    store_close(st);
}
END_TEST

START_TEST(test_create_only) {
    Store *st = open_store();
    PailErr err = {0};
    StorePutOpts co = {.create_only = true};
    ck_assert_int_eq(store_put(st, "x", "1", 1, &co, &err), 0);
    ck_assert_int_eq(store_put(st, "x", "2", 1, &co, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_EXISTS);
    ck_assert_ptr_nonnull(strstr(err.msg, "x"));
    Buf b = {0};
    ck_assert_int_eq(store_get(st, "x", &b, NULL, NULL, &err), 0);
    ck_assert_str_eq((char *)b.data, "1");  // the loser wrote nothing
    buf_free(&b);
    // No temp files left behind, and none visible in listings.
    StoreList l = {0};
    ck_assert_int_eq(store_list_all(st, "", NULL, &l, &err), 0);
    ck_assert_int_eq(l.n, 1);
    store_list_free(&l);
    store_close(st);
}
END_TEST

START_TEST(test_put_file_get_file) {
    Store *st = open_store();
    PailErr err = {0};
    char src[400], dst[400];
    snprintf(src, sizeof src, "%s-src.bin", g_dir);
    snprintf(dst, sizeof dst, "%s-dst.bin", g_dir);
    size_t n = 3 << 20;
    unsigned char *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i * 2654435761u >> 13);
    ck_assert_int_eq(fs_write_file_atomic(src, data, n, &err), 0);
    ck_assert_int_eq(store_put_file(st, "big/file.bin", src, NULL, &err), 0);
    ck_assert_int_eq(store_get_file(st, "big/file.bin", dst, NULL, &err), 0);
    Buf b = {0};
    ck_assert_int_eq(fs_read_file(dst, &b, &err), 0);
    ck_assert_uint_eq(b.len, n);
    ck_assert(!memcmp(b.data, data, n));
    buf_free(&b);
    free(data);
    unlink(src);
    unlink(dst);
    ck_assert_int_eq(store_put_file(st, "nofile", "/nonexistent/file", NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/file"));
    store_close(st);
}
END_TEST

// src_linkable (grpo-relay's spooled uploads): the object is the source file
// itself, hard-linked in (no copy of a GB-sized upload), with the same ETag,
// metadata and mode as a copied put; create-only still refuses an existing key.
START_TEST(test_put_file_linked) {
    Store *st = open_store();
    PailErr err = {0};
    char src[400], path[600];
    snprintf(src, sizeof src, "%s/spool-object", g_dir);
    size_t n = 1 << 20;
    unsigned char *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i * 2654435761u >> 11);
    ck_assert_int_eq(fs_write_file_atomic(src, data, n, &err), 0);
    chmod(src, 0600);
    StoreMeta meta = {.name = "pail-sha256", .value = "abc"};
    StorePutOpts copied = {.create_only = true, .nmeta = 1, .meta = &meta};
    StorePutOpts linked = copied;
    linked.src_linkable = true;
    ck_assert_msg(store_put_file(st, "adapters/copied.h5", src, &copied, &err) == 0, "%s", err.msg);
    ck_assert_msg(store_put_file(st, "adapters/linked.h5", src, &linked, &err) == 0, "%s", err.msg);
    struct stat s0, s1, s2;
    snprintf(path, sizeof path, "%s/adapters/linked.h5", g_dir);
    ck_assert_int_eq(stat(src, &s0), 0);
    ck_assert_int_eq(stat(path, &s1), 0);
    ck_assert_msg(s0.st_ino == s1.st_ino, "the linked put copied the file");
    ck_assert_int_eq(s1.st_mode & 0777, 0644);
    snprintf(path, sizeof path, "%s/adapters/copied.h5", g_dir);
    ck_assert_int_eq(stat(path, &s2), 0);
    ck_assert(s2.st_ino != s0.st_ino);  // without the flag: a copy, as before
    StoreStat a, b;
    ck_assert_int_eq(store_head(st, "adapters/copied.h5", &a, &err), 0);
    ck_assert_int_eq(store_head(st, "adapters/linked.h5", &b, &err), 0);
    ck_assert_str_eq(a.etag, b.etag);
    ck_assert_uint_eq(b.size, n);
    ck_assert_str_eq(store_stat_meta(&b, "pail-sha256"), "abc");
    Buf got = {0};
    ck_assert_int_eq(store_get(st, "adapters/linked.h5", &got, NULL, NULL, &err), 0);
    ck_assert(got.len == n && !memcmp(got.data, data, n));
    buf_free(&got);
    ck_assert_int_eq(store_put_file(st, "adapters/linked.h5", src, &linked, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_EXISTS);
    // No temp link left behind: the source and the two objects are all the names.
    ck_assert_int_eq(stat(src, &s0), 0);
    ck_assert_uint_eq(s0.st_nlink, 2);
    free(data);
    store_close(st);
}
END_TEST

START_TEST(test_list) {
    Store *st = open_store();
    PailErr err = {0};
    char key[64];
    for (int i = 0; i < 25; i++) {
        snprintf(key, sizeof key, "r/v%03d/s%d", i / 5, i % 5);
        ck_assert_int_eq(store_put(st, key, "x", 1, NULL, &err), 0);
    }
    ck_assert_int_eq(store_put(st, "r2", "x", 1, NULL, &err), 0);
    ck_assert_int_eq(store_put(st, "other/y", "x", 1, NULL, &err), 0);
    // Pagination: pages of 10 in byte order, continuation tokens chain.
    StoreList l = {0};
    StoreListOpts o = {.prefix = "r/", .max_keys = 10};
    ck_assert_int_eq(store_list(st, &o, &l, &err), 0);
    ck_assert_int_eq(l.n, 10);
    ck_assert(l.truncated);
    ck_assert_str_eq(l.entries[0].key, "r/v000/s0");
    ck_assert_str_eq(l.entries[9].key, "r/v001/s4");
    char token[sizeof l.next_token];
    snprintf(token, sizeof token, "%s", l.next_token);
    o.continuation = token;
    ck_assert_int_eq(store_list(st, &o, &l, &err), 0);
    ck_assert_str_eq(l.entries[0].key, "r/v002/s0");
    // start-after
    StoreListOpts a = {.prefix = "r/", .start_after = "r/v004/s2"};
    ck_assert_int_eq(store_list(st, &a, &l, &err), 0);
    ck_assert_int_eq(l.n, 2);
    ck_assert_str_eq(l.entries[0].key, "r/v004/s3");
    // Prefix that is not a folder boundary: "r" matches r/... and r2.
    ck_assert_int_eq(store_list_all(st, "r", NULL, &l, &err), 0);
    ck_assert_int_eq(l.n, 26);
    // Delimiter: common prefixes.
    StoreListOpts d = {.prefix = "r/", .delimiter = "/"};
    ck_assert_int_eq(store_list(st, &d, &l, &err), 0);
    ck_assert_int_eq(l.n, 0);
    ck_assert_int_eq(l.nprefixes, 5);
    ck_assert_str_eq(l.prefixes[4], "r/v004/");
    // Pages of one entry with a delimiter: each common prefix exactly once.
    StoreListOpts d1 = {.prefix = "r/", .delimiter = "/", .max_keys = 1};
    char tok1[sizeof l.next_token] = "";
    int pages = 0;
    for (;;) {
        d1.continuation = tok1[0] ? tok1 : NULL;
        ck_assert_int_eq(store_list(st, &d1, &l, &err), 0);
        ck_assert_int_eq(l.nprefixes, 1);
        char want[16];
        snprintf(want, sizeof want, "r/v%03d/", pages);
        ck_assert_str_eq(l.prefixes[0], want);
        pages++;
        if (!l.truncated) break;
        snprintf(tok1, sizeof tok1, "%s", l.next_token);
    }
    ck_assert_int_eq(pages, 5);
    ck_assert_int_eq(store_list_all(st, "nothing/", NULL, &l, &err), 0);
    ck_assert_int_eq(l.n, 0);
    store_list_free(&l);
    store_close(st);
}
END_TEST

START_TEST(test_key_rules) {
    PailErr err = {0};
    const char *bad[] = {"", "/abs", "a/../b", "..", "a/./b", "a//b", "a\\b", "a\nb", "a\x01", ".pail-meta.x",
                         "d/.pail-tmp",
                         // not UTF-8 (S3 keys are): stray bytes, overlong '/', a surrogate, truncated,
                         // past U+10FFFF; U+FFFF is not an XML character
                         "a/\xff\xfe.h5", "a\xc0\xaf" "b", "a\xed\xa0\x80", "a\xe2\x82", "a\xf4\x90\x80\x80",
                         "a\xef\xbf\xbf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(store_key_check(bad[i], &err) == -1, "accepted bad key #%zu", i);
    const char *good[] = {"a", "a/b.h5", "rollouts/v00000001/w-000001.h5", "a..b", "x/.hidden", "trailing/",
                          "caf\xc3\xa9", "\xe2\x82\xac/\xf0\x9f\x98\x80", "\xef\xbf\xbd"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(store_key_check(good[i], &err) == 0, "refused '%s': %s", good[i], err.msg);
    char longkey[STORE_MAX_KEY + 10];
    memset(longkey, 'a', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    ck_assert_int_eq(store_key_check(longkey, &err), -1);
    Store *st = open_store();
    ck_assert_int_eq(store_put(st, "a/../../etc/passwd", "x", 1, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, ".."));
    store_close(st);
    Store *s2;
    ck_assert_int_eq(store_open(&s2, "file://relative/dir", NULL, &err), -1);
    ck_assert_int_eq(store_open(&s2, "ftp://x", NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown scheme"));
    ck_assert_int_eq(store_open(&s2, "s3:///x", NULL, &err), -1);
}
END_TEST

// S3 has no folders: "v5" and "v5/w-000001.h5" can both be keys there. Here
// one would have to be a file and a folder at once, so either order is a
// final PAIL_ERR_CONFLICT naming both keys (it was an I/O error, which the
// relay answered 500 and clients retried for an hour), and nothing stored is
// lost. A file whose name is no key (not UTF-8) is left out of listings.
START_TEST(test_key_folder_conflicts) {
    Store *st = open_store();
    PailErr err = {0};
    StorePutOpts co = {.create_only = true};
    ck_assert_int_eq(store_put(st, "rollouts/v00000005", "x", 1, NULL, &err), 0);
    ck_assert_int_eq(store_put(st, "rollouts/v00000005/w-000001.h5", "y", 1, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_CONFLICT);
    ck_assert_msg(strstr(err.msg, "rollouts/v00000005/w-000001.h5") && strstr(err.msg, "rollouts/v00000005 is an "
                                                                                       "object"), "%s", err.msg);
    ck_assert_int_eq(store_put(st, "rollouts/v00000005/a/b.h5", "y", 1, &co, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_CONFLICT);
    ck_assert_int_eq(store_put(st, "rollouts/v00000006/w-000001.h5", "z", 1, NULL, &err), 0);
    for (int c = 0; c < 2; c++) {
        ck_assert_int_eq(store_put(st, "rollouts/v00000006", "x", 1, c ? &co : NULL, &err), -1);
        ck_assert_msg(err.code == PAIL_ERR_CONFLICT && strstr(err.msg, "other keys lie below it"), "%s", err.msg);
    }
    char src[400];
    snprintf(src, sizeof src, "%s/../check-store-src", g_dir);
    ck_assert_int_eq(fs_write_file_atomic(src, "f", 1, &err), 0);
    ck_assert_int_eq(store_put_file(st, "rollouts/v00000006", src, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_CONFLICT);
    unlink(src);
    Buf b = {0};
    ck_assert_int_eq(store_get(st, "rollouts/v00000005", &b, NULL, NULL, &err), 0);
    ck_assert_int_eq(store_get(st, "rollouts/v00000006/w-000001.h5", &b, NULL, NULL, &err), 0);
    ck_assert_str_eq((char *)b.data, "xz");
    char path[400];
    snprintf(path, sizeof path, "%s/rollouts/v00000006/\xff\xfe.h5", g_dir);
    FILE *f = fopen(path, "w");
    fclose(f);
    StoreList l = {0};
    ck_assert_int_eq(store_list_all(st, "rollouts/v00000006/", NULL, &l, &err), 0);
    ck_assert_int_eq(l.n, 1);
    ck_assert_str_eq(l.entries[0].key, "rollouts/v00000006/w-000001.h5");
    store_list_free(&l);
    buf_free(&b);
    store_close(st);
}
END_TEST

START_TEST(test_versioned) {
    Store *st = open_store();
    PailErr err = {0};
    ck_assert_int_eq(versioned_put(st, "adapters/v00000001.h5", "one", 3, &err), 0);
    ck_assert_int_eq(versioned_put(st, "adapters/v00000001.h5", "one", 3, &err), 0);  // same bytes: idempotent
    ck_assert_int_eq(versioned_put(st, "adapters/v00000001.h5", "uno", 3, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_EXISTS);
    Buf b = {0};
    ck_assert_int_eq(versioned_get(st, "adapters/v00000001.h5", &b, &err), 0);
    ck_assert_str_eq((char *)b.data, "one");
    // Corruption after publish is caught by the reader.
    char path[400];
    snprintf(path, sizeof path, "%s/adapters/v00000001.h5", g_dir);
    FILE *f = fopen(path, "r+b");
    fputc('X', f);
    fclose(f);
    buf_reset(&b);
    ck_assert_int_eq(versioned_get(st, "adapters/v00000001.h5", &b, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "sha256"));
    // An object without pail metadata is refused (after a short wait).
    ck_assert_int_eq(store_put(st, "adapters/v00000002.h5", "two", 3, NULL, &err), 0);
    ck_assert_int_eq(versioned_get(st, "adapters/v00000002.h5", &b, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "pail-sha256"));
    buf_free(&b);
    store_close(st);
}
END_TEST

START_TEST(test_versions_latest) {
    Store *st = open_store();
    PailErr err = {0};
    long v;
    ck_assert_int_eq(versions_latest(st, &SERIES_ADAPTERS, &v, &err), 0);
    ck_assert_int_eq(v, -1);
    char key[64];
    long put[] = {0, 1, 2, 10, 7};
    for (int i = 0; i < 5; i++) {
        version_key(&SERIES_ADAPTERS, put[i], key, sizeof key);
        ck_assert_int_eq(versioned_put(st, key, key, strlen(key), &err), 0);
    }
    ck_assert_int_eq(store_put(st, "adapters/notes.txt", "x", 1, NULL, &err), 0);  // not a version
    ck_assert_int_eq(versions_latest(st, &SERIES_ADAPTERS, &v, &err), 0);
    ck_assert_int_eq(v, 10);
    // A stale hint still finds the newest; a hint ahead of the truth (gc'd) falls back.
    ck_assert_int_eq(versions_write_hint(st, 2, &err), 0);
    ck_assert_int_eq(versions_latest(st, &SERIES_ADAPTERS, &v, &err), 0);
    ck_assert_int_eq(v, 10);
    ck_assert_int_eq(versions_write_hint(st, 99, &err), 0);
    ck_assert_int_eq(versions_latest(st, &SERIES_ADAPTERS, &v, &err), 0);
    ck_assert_int_eq(v, 10);
    long *vs;
    int n;
    ck_assert_int_eq(versions_list(st, &SERIES_ADAPTERS, &vs, &n, &err), 0);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(vs[0], 0);
    ck_assert_int_eq(vs[3], 7);
    free(vs);
    ck_assert_int_eq(version_parse(&SERIES_ADAPTERS, "adapters/v00000042.h5"), 42);
    ck_assert_int_eq(version_parse(&SERIES_ADAPTERS, "adapters/v42.h5"), -1);
    ck_assert_int_eq(version_parse(&SERIES_ADAPTERS, "adapters/v0000004x.h5"), -1);
    ck_assert_int_eq(version_parse(&SERIES_STATES, "trainer/state-v00000003.h5"), 3);
    store_close(st);
}
END_TEST

static void *publish_later(void *arg) {
    (void)arg;
    time_sleep_ms(400);
    Store *st = open_store();
    PailErr err = {0};
    versioned_put(st, "adapters/v00000005.h5", "five", 4, &err);
    store_close(st);
    return NULL;
}

START_TEST(test_wait_newer) {
    Store *st = open_store();
    PailErr err = {0};
    ck_assert_int_eq(versioned_put(st, "adapters/v00000004.h5", "four", 4, &err), 0);
    long v;
    // Nothing newer: the deadline is honoured.
    int64_t t0 = time_mono_ms();
    ck_assert_int_eq(versions_wait_newer(st, &SERIES_ADAPTERS, 4, 0.5, NULL, &v, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_TIMEOUT);
    int64_t waited = time_mono_ms() - t0;
    ck_assert_msg(waited >= 450 && waited < 3000, "waited %lld ms for a 0.5 s deadline", (long long)waited);
    // Published while waiting: wakes with it.
    pthread_t th;
    pthread_create(&th, NULL, publish_later, NULL);
    ck_assert_int_eq(versions_wait_newer(st, &SERIES_ADAPTERS, 4, 20, NULL, &v, &err), 0);
    ck_assert_int_eq(v, 5);
    pthread_join(th, NULL);
    // Already newer: returns at once.
    ck_assert_int_eq(versions_wait_newer(st, &SERIES_ADAPTERS, 3, 20, NULL, &v, &err), 0);
    ck_assert_int_eq(v, 5);
    volatile sig_atomic_t stop = 1;
    ck_assert_int_eq(versions_wait_newer(st, &SERIES_ADAPTERS, 5, 20, &stop, &v, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_INTERRUPTED);
    store_close(st);
}
END_TEST

// Two (here eight) processes race to publish the same version with different
// content: exactly one wins, every other gets PAIL_ERR_EXISTS, and the stored
// object is the winner's.
START_TEST(test_racing_writers) {
    enum { N = 8 };
    for (int round = 0; round < 5; round++) {
        char key[64];
        snprintf(key, sizeof key, "adapters/v%08d.h5", round + 1);
        pid_t pids[N];
        for (int i = 0; i < N; i++) {
            pids[i] = fork();
            if (pids[i] == 0) {
                Store *st;
                PailErr err = {0};
                if (store_open(&st, g_url, NULL, &err) < 0) _exit(3);
                char body[64];
                int n = snprintf(body, sizeof body, "writer %d", i);
                int rc = versioned_put(st, key, body, (size_t)n, &err);
                _exit(rc == 0 ? 0 : err.code == PAIL_ERR_EXISTS ? 1 : 2);
            }
        }
        int wins = 0, conflicts = 0, winner = -1;
        for (int i = 0; i < N; i++) {
            int status;
            waitpid(pids[i], &status, 0);
            ck_assert(WIFEXITED(status));
            if (WEXITSTATUS(status) == 0) { wins++; winner = i; }
            else if (WEXITSTATUS(status) == 1) conflicts++;
        }
        ck_assert_int_eq(wins, 1);
        ck_assert_int_eq(conflicts, N - 1);
        Store *st = open_store();
        PailErr err = {0};
        Buf b = {0};
        ck_assert_int_eq(versioned_get(st, key, &b, &err), 0);
        char want[64];
        snprintf(want, sizeof want, "writer %d", winner);
        ck_assert_str_eq((char *)b.data, want);
        buf_free(&b);
        store_close(st);
    }
}
END_TEST

START_TEST(test_run_layout) {
    PailErr err = {0};
    char key[256], w[WORKER_ID_MAX + 1];
    long v, seq;
    ck_assert_int_eq(run_key_rollout(key, sizeof key, 7, "w3", 12), 0);
    ck_assert_str_eq(key, "rollouts/v00000007/w3-000012.h5");
    ck_assert_int_eq(run_parse_rollout(key, &v, w, sizeof w, &seq), 0);
    ck_assert_int_eq(v, 7);
    ck_assert_str_eq(w, "w3");
    ck_assert_int_eq(seq, 12);
    ck_assert_int_eq(run_parse_rollout("rollouts/v00000007/a-b-000001.h5", &v, w, sizeof w, &seq), 0);
    ck_assert_str_eq(w, "a-b");
    ck_assert_int_eq(run_parse_rollout("rollouts/v7/w-000001.h5", &v, w, sizeof w, &seq), -1);
    ck_assert_int_eq(run_parse_rollout("rollouts/v00000007/w-1.h5", &v, w, sizeof w, &seq), -1);
    ck_assert_int_eq(worker_id_check("node-1_gpu.0", &err), 0);
    ck_assert_int_eq(worker_id_check("bad/id", &err), -1);
    ck_assert_int_eq(worker_id_check("", &err), -1);
    char long_id[80];
    memset(long_id, 'x', 65);
    long_id[65] = 0;
    ck_assert_int_eq(worker_id_check(long_id, &err), -1);
    setenv("SLURM_JOB_ID", "123", 1);
    setenv("SLURM_PROCID", "4", 1);
    worker_id_default(w, sizeof w);
    ck_assert_str_eq(w, "s123-p4");
    unsetenv("SLURM_JOB_ID");
    worker_id_default(w, sizeof w);
    ck_assert_int_eq(worker_id_check(w, &err), 0);
}
END_TEST

START_TEST(test_manifest) {
    Store *st = open_store();
    PailErr err = {0};
    const char *must[] = {"base_sha256", "lora", NULL};
    json_t *m = json_pack("{s:s, s:{s:i, s:f}, s:s}", "base_sha256", "abc", "lora", "rank", 8, "alpha", 16.0,
                          "task", "add");
    ck_assert_int_eq(run_manifest_publish(st, m, must, NULL, &err), 0);
    json_object_set_new(m, "task", json_string("other"));  // not a must-match field
    ck_assert_int_eq(run_manifest_publish(st, m, must, NULL, &err), 0);
    json_object_set_new(json_object_get(m, "lora"), "rank", json_integer(16));
    ck_assert_int_eq(run_manifest_publish(st, m, must, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "'lora'"));
    json_decref(m);
    json_t *old;
    ck_assert_int_eq(run_manifest_read(st, &old, &err), 0);
    ck_assert_str_eq(json_string_value(json_object_get(old, "task")), "add");
    json_decref(old);
    ck_assert_int_eq(store_put(st, RUN_KEY_MANIFEST, "{not json", 9, NULL, &err), 0);
    ck_assert_int_eq(run_manifest_read(st, &old, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "run.json"));
    store_close(st);
}
END_TEST

int main(void) {
    Suite *s = suite_create("store");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_put_get_head_delete);
    tcase_add_test(core, test_put_file_get_file);
    tcase_add_test(core, test_put_file_linked);
    tcase_add_test(core, test_list);
    tcase_add_test(core, test_versioned);
    tcase_add_test(core, test_versions_latest);
    tcase_add_test(core, test_wait_newer);
    tcase_add_test(core, test_racing_writers);
    tcase_add_test(core, test_run_layout);
    tcase_add_test(core, test_manifest);
    tcase_add_test(limits, test_create_only);
    tcase_add_test(limits, test_key_rules);
    tcase_add_test(limits, test_key_folder_conflicts);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
