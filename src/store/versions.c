// Versioned keys: create-only publish with sha256, verified reads, listing and
// waiting for newer versions (see versions.h, doc/protocol.md).
#include "store/versions.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "core/sha256.h"
#include "core/timeutil.h"

const VersionSeries SERIES_ADAPTERS = {"adapters/v", ".h5"};
const VersionSeries SERIES_STATES = {"trainer/state-v", ".h5"};
const VersionSeries SERIES_EVALS = {"eval/v", ".json"};
#define LATEST_KEY "adapters/LATEST"

// Publishes with metadata; on a create-only conflict compares sha256.
static int put_checked(Store *st, const char *key, const char *hex, int (*put)(Store *, const char *, const void *,
                       size_t, const char *, const StorePutOpts *, PailErr *), const void *data, size_t len,
                       const char *path, PailErr *err) {
    StoreMeta meta;
    snprintf(meta.name, sizeof meta.name, "%s", META_SHA256);
    snprintf(meta.value, sizeof meta.value, "%s", hex);
    StorePutOpts opt = {.create_only = true, .nmeta = 1, .meta = &meta};
    if (put(st, key, data, len, path, &opt, err) == 0) return 0;
    if (err->code != PAIL_ERR_EXISTS) return -1;
    PailErr herr = {0};
    StoreStat ss;
    char u[STORE_MAX_KEY + 300];
    const char *theirs = NULL;
    // The existing object may be our own first attempt (a retried request, or a
    // restart that re-publishes a missed commit): same bytes is success.
    for (int i = 0; i < 20; i++) {
        if (store_head(st, key, &ss, &herr) < 0) break;
        if ((theirs = store_stat_meta(&ss, META_SHA256))) break;
        time_sleep_ms(100);
    }
    if (theirs && !strcmp(theirs, hex)) return 0;
    return err_set(err, PAIL_ERR_EXISTS,
                   "%s: already published with different content (sha256 %.12s..., ours %.12s...): "
                   "another writer is publishing the same versions",
                   store_key_url(st, key, u, sizeof u), theirs ? theirs : "unknown", hex);
}

static int put_mem(Store *st, const char *key, const void *data, size_t len, const char *path,
                   const StorePutOpts *opt, PailErr *err) {
    (void)path;
    return store_put(st, key, data, len, opt, err);
}

static int put_path(Store *st, const char *key, const void *data, size_t len, const char *path,
                    const StorePutOpts *opt, PailErr *err) {
    (void)data; (void)len;
    return store_put_file(st, key, path, opt, err);
}

int versioned_put(Store *st, const char *key, const void *data, size_t len, PailErr *err) {
    char hex[65];
    sha256_hex(data, len, hex);
    return put_checked(st, key, hex, put_mem, data, len, NULL, err);
}

int versioned_put_file(Store *st, const char *key, const char *path, PailErr *err) {
    char hex[65];
    if (sha256_file_hex(path, hex, err) < 0) return -1;
    return put_checked(st, key, hex, put_path, NULL, 0, path, err);
}

static int verify(Store *st, const char *key, const StoreStat *ss, const char *hex, uint64_t size,
                  PailErr *err) {
    const char *want = store_stat_meta(ss, META_SHA256);
    char u[STORE_MAX_KEY + 300];
    if (size != ss->size)
        return err_set(err, PAIL_ERR_INVALID, "%s: got %llu bytes, object is %llu bytes", store_key_url(st, key, u, sizeof u),
                       (unsigned long long)size, (unsigned long long)ss->size);
    if (strcmp(want, hex) != 0)
        return err_set(err, PAIL_ERR_INVALID, "%s: sha256 %.16s... does not match its pail-sha256 %.16s...",
                       store_key_url(st, key, u, sizeof u), hex, want);
    return 0;
}

int versioned_get(Store *st, const char *key, Buf *out, PailErr *err) {
    size_t base = out->len;
    char u[STORE_MAX_KEY + 300];
    for (int attempt = 0;; attempt++) {
        StoreStat ss;
        out->len = base;
        if (store_get(st, key, out, NULL, &ss, err) < 0) return -1;
        if (store_stat_meta(&ss, META_SHA256)) {
            char hex[65];
            sha256_hex(out->data + base, out->len - base, hex);
            return verify(st, key, &ss, hex, out->len - base, err);
        }
        if (attempt == 20)
            return err_set(err, PAIL_ERR_INVALID, "%s: no %s metadata (not published by pail, or incomplete)",
                           store_key_url(st, key, u, sizeof u), META_SHA256);
        time_sleep_ms(100);
    }
}

int versioned_get_file(Store *st, const char *key, const char *path, PailErr *err) {
    char u[STORE_MAX_KEY + 300];
    for (int attempt = 0;; attempt++) {
        StoreStat ss;
        if (store_get_file(st, key, path, &ss, err) < 0) return -1;
        if (store_stat_meta(&ss, META_SHA256)) {
            char hex[65];
            if (sha256_file_hex(path, hex, err) < 0) return -1;
            FILE *f = fopen(path, "rb");
            long size = -1;
            if (f && fseek(f, 0, SEEK_END) == 0) size = ftell(f);
            if (f) fclose(f);
            return verify(st, key, &ss, hex, (uint64_t)size, err);
        }
        if (attempt == 20)
            return err_set(err, PAIL_ERR_INVALID, "%s: no %s metadata (not published by pail, or incomplete)",
                           store_key_url(st, key, u, sizeof u), META_SHA256);
        time_sleep_ms(100);
    }
}

int version_key(const VersionSeries *s, long v, char *out, size_t cap) {
    return snprintf(out, cap, "%s%08ld%s", s->prefix, v, s->suffix) < (int)cap ? 0 : -1;
}

long version_parse(const VersionSeries *s, const char *key) {
    size_t pl = strlen(s->prefix), sl = strlen(s->suffix), kl = strlen(key);
    if (kl < pl + 8 + sl || strncmp(key, s->prefix, pl) || strcmp(key + kl - sl, s->suffix)) return -1;
    long v = 0;
    for (size_t i = pl; i < kl - sl; i++) {
        if (key[i] < '0' || key[i] > '9' || v > 100000000000L) return -1;
        v = v * 10 + (key[i] - '0');
    }
    return v;
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static int collect(const StoreList *l, const VersionSeries *s, long **vs, int *n) {
    long *out = malloc(((size_t)l->n + 1) * sizeof *out);
    if (!out) return -1;
    int k = 0;
    for (int i = 0; i < l->n; i++) {
        long v = version_parse(s, l->entries[i].key);
        if (v >= 0) out[k++] = v;
    }
    qsort(out, (size_t)k, sizeof *out, cmp_long);
    *vs = out;
    *n = k;
    return 0;
}

int versions_list(Store *st, const VersionSeries *s, long **vs, int *n, PailErr *err) {
    StoreList l = {0};
    if (store_list_all(st, s->prefix, NULL, &l, err) < 0) return -1;
    int rc = collect(&l, s, vs, n);
    store_list_free(&l);
    return rc < 0 ? err_set(err, PAIL_ERR_NOMEM, "out of memory") : 0;
}

static long newest_after(Store *st, const VersionSeries *s, const char *start_after, int wait_s, PailErr *err,
                         int *failed) {
    StoreList l = {0};
    long best = -1;
    char token[sizeof l.next_token] = "";
    *failed = 0;
    for (;;) {
        StoreListOpts o = {.prefix = s->prefix, .start_after = start_after,
                           .continuation = token[0] ? token : NULL, .wait_seconds = wait_s};
        if (store_list(st, &o, &l, err) < 0) { *failed = 1; break; }
        for (int i = 0; i < l.n; i++) {
            long v = version_parse(s, l.entries[i].key);
            if (v > best) best = v;
        }
        if (!l.truncated || !l.next_token[0]) break;
        snprintf(token, sizeof token, "%s", l.next_token);
        wait_s = 0;
    }
    store_list_free(&l);
    return best;
}

int versions_latest(Store *st, const VersionSeries *s, long *v, PailErr *err) {
    int failed = 0;
    *v = -1;
    if (s == &SERIES_ADAPTERS) {
        Buf hint = {0};
        PailErr herr = {0};
        if (store_get(st, LATEST_KEY, &hint, NULL, NULL, &herr) == 0) {
            long h = strtol((char *)hint.data, NULL, 10);
            char after[256];
            // list from just before the hinted version: it and anything newer
            snprintf(after, sizeof after, "%s%08ld", s->prefix, h);
            long best = h >= 0 ? newest_after(st, s, after, 0, err, &failed) : -1;
            buf_free(&hint);
            if (failed) return -1;
            if (best >= 0) { *v = best; return 0; }
        }
        buf_free(&hint);
    }
    long best = newest_after(st, s, NULL, 0, err, &failed);
    if (failed) return -1;
    *v = best;
    return 0;
}

int versions_write_hint(Store *st, long v, PailErr *err) {
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", v);
    StorePutOpts opt = {.content_type = "text/plain"};
    return store_put(st, LATEST_KEY, text, (size_t)n, &opt, err);
}

int versions_wait_newer(Store *st, const VersionSeries *s, long after, double timeout_s,
                        volatile sig_atomic_t *stop, long *out, PailErr *err) {
    char start[256];
    if (after >= 0) version_key(s, after, start, sizeof start);
    int64_t deadline = time_mono_ms() + (int64_t)(timeout_s * 1000);
    Rng rng;
    rng_seed(&rng, (uint64_t)time_mono_ms(), (uint64_t)(uintptr_t)&rng);
    double backoff_ms = 200;
    for (;;) {
        if (stop && *stop) return err_set(err, PAIL_ERR_INTERRUPTED, "stopped while waiting for %s", s->prefix);
        int64_t left = deadline - time_mono_ms();
        int wait_s = 0;
        if (store_is_relay(st)) wait_s = left > 20000 ? 20 : (int)(left / 1000);
        int failed = 0;
        PailErr lerr = {0};
        long best = newest_after(st, s, after >= 0 ? start : NULL, wait_s, &lerr, &failed);
        if (!failed && best > after) { *out = best; return 0; }
        if (failed && lerr.code != PAIL_ERR_NETWORK) { *err = lerr; return -1; }
        left = deadline - time_mono_ms();
        if (left <= 0)
            return err_set(err, PAIL_ERR_TIMEOUT, "%s: no version newer than %ld after %.0f s", s->prefix,
                           after, timeout_s);
        if (wait_s > 0 && !failed) continue;  // the relay already waited
        // Full jitter: sleep uniform in [0, backoff], backoff x1.5 up to 5 s.
        int64_t ms = (int64_t)(rng_uniform(&rng) * backoff_ms) + 50;
        if (ms > left) ms = left;
        for (int64_t slept = 0; slept < ms && !(stop && *stop); slept += 50) time_sleep_ms(ms - slept < 50 ? ms - slept : 50);
        backoff_ms = backoff_ms * 1.5 > 5000 ? 5000 : backoff_ms * 1.5;
    }
}
