// Store front: URL dispatch, key validation, list helpers shared by backends.
// The backends are store_file.c (file://) and store_s3.c (s3://).
#include "store/store.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include "core/log.h"

size_t store_utf8_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;  // bounds of the second byte: no overlongs, surrogates or > U+10FFFF
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    if (len == 3 && c == 0xef && s[1] == 0xbf && s[2] >= 0xbe) return 0;  // U+FFFE, U+FFFF: not XML characters
    return len;
}

void store_key_escape(const char *key, char *out, size_t cap) {
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)key;
    size_t n = strlen(key);
    for (size_t i = 0; i < n && o + 5 < cap;) {
        size_t l = s[i] < 0x80 ? (s[i] >= 0x20 && s[i] != 0x7f && s[i] != '\\') : store_utf8_len(s + i, n - i);
        if (l == 0 || l > cap - o - 1) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", s[i]);
            i++;
        } else {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
        }
    }
    out[o < cap ? o : cap - 1] = 0;
}

// A few hashes of keys already warned about, so that a bad object met by
// every LIST is reported once per process, not once per LIST.
static pthread_mutex_t g_warned_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_warned[64];
static int g_nwarned;

void store_warn_skipped(const char *where, const char *key, const char *why) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 1099511628211ull;
    pthread_mutex_lock(&g_warned_mu);
    bool seen = false;
    for (int i = 0; i < 64 && !seen; i++) seen = g_warned[i] == h;
    if (!seen) g_warned[g_nwarned++ % 64] = h;
    pthread_mutex_unlock(&g_warned_mu);
    if (seen) return;
    char esc[STORE_MAX_KEY * 4 + 8];
    store_key_escape(key, esc, sizeof esc);
    log_warn("%s: skipped '%s': %s", where, esc, why);
}

int store_key_check(const char *key, PailErr *err) {
    if (!key || !*key) return err_set(err, PAIL_ERR_INVALID, "key is empty");
    size_t n = strlen(key);
    if (n > STORE_MAX_KEY)
        return err_set(err, PAIL_ERR_INVALID, "key '%.64s...' is %zu bytes (max %d)", key, n,
                       STORE_MAX_KEY);
    if (key[0] == '/') return err_set(err, PAIL_ERR_INVALID, "key '%s' is absolute (starts with '/')", key);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c == 0x7f)
            return err_set(err, PAIL_ERR_INVALID, "key '%.*s' has a control character (0x%02x) at byte %zu",
                           (int)i, key, c, i);
        if (c == '\\') return err_set(err, PAIL_ERR_INVALID, "key '%s' has a backslash", key);
        if (c >= 0x80) {  // S3 keys are UTF-8, and an XML listing cannot carry anything else
            size_t l = store_utf8_len((const unsigned char *)key + i, n - i);
            if (l == 0)
                return err_set(err, PAIL_ERR_INVALID, "key '%.*s' is not UTF-8 at byte %zu (0x%02x): keys are UTF-8",
                               (int)i, key, i, c);
            i += l - 1;
        }
    }
    const char *seg = key;
    for (;;) {
        const char *slash = strchr(seg, '/');
        size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
        if (len == 0 && slash)
            return err_set(err, PAIL_ERR_INVALID, "key '%s' has an empty path segment ('//')", key);
        if ((len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.'))
            return err_set(err, PAIL_ERR_INVALID, "key '%s' has a '%.*s' segment", key, (int)len, seg);
        if (len >= 5 && !strncmp(seg, ".pail", 5))
            return err_set(err, PAIL_ERR_INVALID, "key '%s': segments starting with '.pail' are reserved", key);
        if (len > 255)
            return err_set(err, PAIL_ERR_INVALID, "key '%.64s...' has a segment longer than 255 bytes", key);
        if (!slash) break;
        seg = slash + 1;
    }
    return 0;
}

int store_open(Store **out, const char *url, const StoreOptions *opt, PailErr *err) {
    static const StoreOptions defaults = {0};
    if (!opt) opt = &defaults;
    *out = NULL;
    if (!url) return err_set(err, PAIL_ERR_INVALID, "store URL is empty");
    Store *st = calloc(1, sizeof *st);
    if (!st) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    snprintf(st->url, sizeof st->url, "%s", url);
    int rc;
    if (!strncmp(url, "file://", 7)) {
        const char *path = url + 7;
        if (path[0] != '/') {
            free(st);
            return err_set(err, PAIL_ERR_INVALID,
                           "store URL '%s': file:// needs an absolute path (file:///abs/dir)", url);
        }
        rc = store_file_open(st, path, opt, err);
    } else if (!strncmp(url, "s3://", 5)) {
        const char *b = url + 5, *slash = strchr(b, '/');
        char bucket[256];
        size_t blen = slash ? (size_t)(slash - b) : strlen(b);
        if (blen == 0 || blen >= sizeof bucket) {
            free(st);
            return err_set(err, PAIL_ERR_INVALID, "store URL '%s': no bucket name (s3://bucket/prefix)", url);
        }
        memcpy(bucket, b, blen);
        bucket[blen] = 0;
        const char *prefix = slash ? slash + 1 : "";
        rc = store_s3_open(st, bucket, prefix, opt, err);
    } else {
        free(st);
        return err_set(err, PAIL_ERR_INVALID,
                       "store URL '%s': unknown scheme (use file:///abs/dir or s3://bucket/prefix)", url);
    }
    if (rc < 0) {
        free(st);
        return -1;
    }
    *out = st;
    return 0;
}

int store_split_url(const char *url, char *root, size_t rootcap, const char **key, PailErr *err) {
    if (!strncmp(url, "file://", 7)) {
        if (url[7] != '/')
            return err_set(err, PAIL_ERR_INVALID, "URL '%s': file:// needs an absolute path (file:///abs/dir/key)", url);
        snprintf(root, rootcap, "file:///");
        *key = url + 8;
    } else if (!strncmp(url, "s3://", 5)) {
        const char *slash = strchr(url + 5, '/');
        size_t n = slash ? (size_t)(slash - url) : strlen(url);
        if (n >= rootcap) return err_set(err, PAIL_ERR_INVALID, "URL '%s': bucket name too long", url);
        memcpy(root, url, n);
        root[n] = 0;
        *key = slash ? slash + 1 : "";
    } else {
        return err_set(err, PAIL_ERR_INVALID, "URL '%s': use file:///abs/dir/key or s3://bucket/key", url);
    }
    return 0;
}

void store_close(Store *st) {
    if (!st) return;
    if (st->be && st->be->close) st->be->close(st);
    free(st);
}

const char *store_url(const Store *st) { return st->url; }
bool store_is_relay(const Store *st) { return st->is_relay; }

const char *store_key_url(const Store *st, const char *key, char *buf, size_t cap) {
    size_t n = strlen(st->url);
    snprintf(buf, cap, "%s%s%s", st->url, n && st->url[n - 1] == '/' ? "" : "/", key);
    return buf;
}

#define KEY_CHECK(key)                                          \
    do {                                                        \
        if (store_key_check(key, err) < 0) return -1;           \
    } while (0)

int store_put(Store *st, const char *key, const void *data, size_t len, const StorePutOpts *opt,
              PailErr *err) {
    static const StorePutOpts none = {0};
    KEY_CHECK(key);
    return st->be->put(st, key, data, len, opt ? opt : &none, err);
}

int store_put_file(Store *st, const char *key, const char *path, const StorePutOpts *opt,
                   PailErr *err) {
    static const StorePutOpts none = {0};
    KEY_CHECK(key);
    return st->be->put_file(st, key, path, opt ? opt : &none, err);
}

int store_get(Store *st, const char *key, Buf *out, const StoreGetOpts *opt, StoreStat *stat,
              PailErr *err) {
    static const StoreGetOpts none = {.range_start = 0, .range_end = -1};
    KEY_CHECK(key);
    StoreStat tmp;
    return st->be->get(st, key, out, opt ? opt : &none, stat ? stat : &tmp, err);
}

int store_get_file(Store *st, const char *key, const char *path, StoreStat *stat, PailErr *err) {
    KEY_CHECK(key);
    StoreStat tmp;
    return st->be->get_file(st, key, path, stat ? stat : &tmp, err);
}

int store_head(Store *st, const char *key, StoreStat *stat, PailErr *err) {
    KEY_CHECK(key);
    StoreStat tmp;
    return st->be->head(st, key, stat ? stat : &tmp, err);
}

int store_delete(Store *st, const char *key, PailErr *err) {
    KEY_CHECK(key);
    return st->be->del(st, key, err);
}

int store_clean_stale(Store *st, double max_age_s, int *removed, PailErr *err) {
    *removed = 0;
    return st->be->clean ? st->be->clean(st, max_age_s, removed, err) : 0;
}

int store_list(Store *st, const StoreListOpts *opt, StoreList *out, PailErr *err) {
    store_list_reset(out);
    StoreListOpts o = *opt;
    if (!o.prefix) o.prefix = "";
    if (o.max_keys <= 0 || o.max_keys > 1000) o.max_keys = 1000;
    return st->be->list(st, &o, out, err);
}

int store_list_all(Store *st, const char *prefix, const char *start_after, StoreList *out,
                   PailErr *err) {
    store_list_reset(out);
    StoreList page = {0};
    char token[sizeof page.next_token] = "";
    for (;;) {
        StoreListOpts o = {.prefix = prefix, .start_after = start_after,
                           .continuation = token[0] ? token : NULL};
        if (store_list(st, &o, &page, err) < 0) {
            store_list_free(&page);
            return -1;
        }
        for (int i = 0; i < page.n; i++) {
            StoreEntry *e = &page.entries[i];
            if (store_list_push(out, e->key, e->size, e->mtime, e->etag) < 0) {
                store_list_free(&page);
                return err_set(err, PAIL_ERR_NOMEM, "out of memory listing '%s'", prefix);
            }
        }
        if (!page.truncated || !page.next_token[0]) break;
        snprintf(token, sizeof token, "%s", page.next_token);
    }
    store_list_free(&page);
    return 0;
}

int store_list_push(StoreList *l, const char *key, uint64_t size, int64_t mtime, const char *etag) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        StoreEntry *e = realloc(l->entries, (size_t)cap * sizeof *e);
        if (!e) return -1;
        l->entries = e;
        l->cap = cap;
    }
    StoreEntry *e = &l->entries[l->n];
    e->key = strdup(key);
    if (!e->key) return -1;
    e->size = size;
    e->mtime = mtime;
    snprintf(e->etag, sizeof e->etag, "%s", etag ? etag : "");
    l->n++;
    return 0;
}

int store_list_push_prefix(StoreList *l, const char *prefix) {
    if (l->nprefixes == l->capprefixes) {
        int cap = l->capprefixes ? 2 * l->capprefixes : 16;
        char **p = realloc(l->prefixes, (size_t)cap * sizeof *p);
        if (!p) return -1;
        l->prefixes = p;
        l->capprefixes = cap;
    }
    l->prefixes[l->nprefixes] = strdup(prefix);
    return l->prefixes[l->nprefixes++] ? 0 : -1;
}

void store_list_reset(StoreList *l) {
    for (int i = 0; i < l->n; i++) free(l->entries[i].key);
    for (int i = 0; i < l->nprefixes; i++) free(l->prefixes[i]);
    l->n = l->nprefixes = 0;
    l->truncated = false;
    l->next_token[0] = 0;
}

void store_list_free(StoreList *l) {
    store_list_reset(l);
    free(l->entries);
    free(l->prefixes);
    memset(l, 0, sizeof *l);
}

const char *store_stat_meta(const StoreStat *s, const char *name) {
    for (int i = 0; i < s->nmeta; i++)
        if (!strcasecmp(s->meta[i].name, name)) return s->meta[i].value;
    return NULL;
}
