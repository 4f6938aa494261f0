// The object store: one interface over two backends, used by every tool.
//   file:///abs/dir         a local folder (the embedded default), store_file.c
//   s3://bucket[/prefix]    any S3-compatible endpoint incl. grpo-relay, store_s3.c
// Keys are relative to the store's root (the folder, or bucket + prefix).
// Not here: the run layout and versioned keys (versions.h) build on this.
// Thread safety: one Store per thread (the s3 backend holds a curl handle).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"

#define STORE_MAX_KEY 1024
#define STORE_MAX_META 8

typedef struct {
    char name[64];    // without the x-amz-meta- prefix, lower case, e.g. "pail-sha256"
    char value[256];
} StoreMeta;

typedef struct {
    uint64_t size;
    char etag[80];            // opaque; quotes stripped
    int64_t mtime;            // unix seconds
    int nmeta;
    StoreMeta meta[STORE_MAX_META];
} StoreStat;

typedef struct {
    // s3://: endpoint URL (http[s]://host[:port]); NULL -> AWS_ENDPOINT_URL, else AWS S3.
    const char *endpoint;
    const char *region;       // NULL -> AWS_REGION / AWS_DEFAULT_REGION / us-east-1
    const char *ca_bundle;    // NULL -> AWS_CA_BUNDLE; peer verification is never off
    bool allow_http;          // plain http:// to a non-loopback endpoint (explicit opt-in)
    int addressing;           // 0 auto (path-style for custom endpoints), 1 path, 2 virtual-host
    double retry_seconds;     // how long one request may keep failing (retried with backoff)
                              // before it fails: the tools' --max-outage; 0 -> 3600
    int timeout_seconds;      // per request connect+transfer stall; 0 -> 30
    uint64_t multipart_threshold;  // 0 -> 16 MiB; parts of this size
    // credentials: NULL -> AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN
    const char *access_key, *secret_key, *session_token;
} StoreOptions;

typedef struct {
    bool create_only;         // If-None-Match: * -> PAIL_ERR_EXISTS when the key exists
    int nmeta;
    const StoreMeta *meta;    // user metadata (borrowed)
    const char *content_type; // NULL -> application/octet-stream
    // store_put_file on file://: the source file may become the object itself
    // (hard-linked into place when on the same filesystem, else copied); the
    // caller never writes to it again (grpo-relay's spooled bodies: no second
    // copy of a large upload). Other stores ignore it.
    bool src_linkable;
} StorePutOpts;

typedef struct {
    int64_t range_start, range_end;  // inclusive byte range; range_end < 0 = none
    const char *if_none_match;       // etag -> PAIL_ERR_NOT_MODIFIED when unchanged
} StoreGetOpts;

typedef struct {
    char *key;                // owned
    uint64_t size;
    int64_t mtime;
    char etag[80];
} StoreEntry;

typedef struct {
    StoreEntry *entries;      // owned, sorted by key (byte order)
    int n, cap;
    char **prefixes;          // common prefixes when a delimiter was given (owned)
    int nprefixes, capprefixes;
    bool truncated;
    char next_token[STORE_MAX_KEY + 64];  // continuation token when truncated
} StoreList;

typedef struct {
    const char *prefix;       // keys starting with this (may be "")
    const char *start_after;  // only keys > this (may be NULL)
    const char *continuation; // token from a previous truncated page (may be NULL)
    const char *delimiter;    // group keys into common prefixes (may be NULL)
    int max_keys;             // 0 -> 1000
    int wait_seconds;         // relay long-poll (x-pail-wait); 0 = none; ignored elsewhere
} StoreListOpts;

typedef struct Store Store;

// Opens a store from a URL (see above). Returns 0 / -1 with err (PAIL_ERR_INVALID
// for a malformed URL, missing credentials, or http:// to a remote host).
int store_open(Store **out, const char *url, const StoreOptions *opt, PailErr *err);
// Splits an object URL, file:///abs/dir/key or s3://bucket/key, into the URL of
// its store (file:// stores are rooted at "/") and the key (*key points into
// url; may be ""). -1 with err naming the URL for another scheme or shape.
int store_split_url(const char *url, char *root, size_t rootcap, const char **key, PailErr *err);
void store_close(Store *st);
const char *store_url(const Store *st);  // the URL it was opened with (no secrets)
// "URL/key" for messages (no doubled '/'); returns buf.
const char *store_key_url(const Store *st, const char *key, char *buf, size_t cap);
// True once any response carried `x-pail-relay: 1` (the endpoint is a grpo-relay).
bool store_is_relay(const Store *st);

// Key rules: 1..1024 bytes of UTF-8 (as S3), no leading '/', no empty, "." or
// ".." segments, no segment starting with ".pail" (reserved for the file
// backend), no NUL, control characters, backslash, or U+FFFE/U+FFFF (not XML
// characters). Returns 0 or -1 with a message naming the key.
int store_key_check(const char *key, PailErr *err);
// Bytes in a well-formed UTF-8 character at s (n left) that XML 1.0 can carry:
// 1 for any ASCII byte, 0 when malformed (overlong, surrogate, truncated,
// > U+10FFFF, U+FFFE/U+FFFF).
size_t store_utf8_len(const unsigned char *s, size_t n);
// key for a message: control characters, backslashes and bytes that are not
// UTF-8 as \xNN; always terminated.
void store_key_escape(const char *key, char *out, size_t cap);
// A listing met an entry no pail tool can use (a key store_key_check refuses,
// a malformed size): one warning naming it (escaped) and why, once per key and
// process. Thread-safe.
void store_warn_skipped(const char *where, const char *key, const char *why);

int store_put(Store *st, const char *key, const void *data, size_t len, const StorePutOpts *opt,
              PailErr *err);
// Streams a local file (multipart above the threshold on s3).
int store_put_file(Store *st, const char *key, const char *path, const StorePutOpts *opt,
                   PailErr *err);
// Appends the object (or range) to out; fills stat when non-NULL.
int store_get(Store *st, const char *key, Buf *out, const StoreGetOpts *opt, StoreStat *stat,
              PailErr *err);
// Streams the object into a local file, written atomically.
int store_get_file(Store *st, const char *key, const char *path, StoreStat *stat, PailErr *err);
int store_head(Store *st, const char *key, StoreStat *stat, PailErr *err);
// Deleting a missing key is not an error (S3 semantics).
int store_delete(Store *st, const char *key, PailErr *err);
// One page of a listing; out is reset first.
int store_list(Store *st, const StoreListOpts *opt, StoreList *out, PailErr *err);
// Every key under prefix after start_after (follows continuation); out is reset first.
int store_list_all(Store *st, const char *prefix, const char *start_after, StoreList *out,
                   PailErr *err);
void store_list_free(StoreList *l);
const char *store_stat_meta(const StoreStat *s, const char *name);  // NULL when absent
// Removes what killed writers left behind (file://: temp files older than
// max_age_s under the store's root; s3://: nothing). *removed counts them.
int store_clean_stale(Store *st, double max_age_s, int *removed, PailErr *err);

// ---- backend vtable (store_file.c, store_s3.c) ----
typedef struct {
    const char *scheme;
    int (*put)(Store *, const char *key, const void *data, size_t len, const StorePutOpts *, PailErr *);
    int (*put_file)(Store *, const char *key, const char *path, const StorePutOpts *, PailErr *);
    int (*get)(Store *, const char *key, Buf *out, const StoreGetOpts *, StoreStat *, PailErr *);
    int (*get_file)(Store *, const char *key, const char *path, StoreStat *, PailErr *);
    int (*head)(Store *, const char *key, StoreStat *, PailErr *);
    int (*del)(Store *, const char *key, PailErr *);
    int (*list)(Store *, const StoreListOpts *, StoreList *, PailErr *);
    int (*clean)(Store *, double max_age_s, int *removed, PailErr *);  // NULL: nothing to clean
    void (*close)(Store *);
} StoreBackend;

struct Store {
    const StoreBackend *be;
    char url[STORE_MAX_KEY + 256];
    bool is_relay;
    void *impl;  // backend state (owned)
};

int store_file_open(Store *st, const char *path, const StoreOptions *opt, PailErr *err);
int store_s3_open(Store *st, const char *bucket, const char *prefix, const StoreOptions *opt,
                  PailErr *err);
// StoreList helpers for backends.
int store_list_push(StoreList *l, const char *key, uint64_t size, int64_t mtime, const char *etag);
int store_list_push_prefix(StoreList *l, const char *prefix);
void store_list_reset(StoreList *l);
