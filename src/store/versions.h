// The coordination protocol on top of the store (doc/protocol.md): immutable
// versioned objects written create-only with their sha256 as metadata, verified
// reads, version listing (LIST is the truth, adapters/LATEST only a hint), and
// waiting for a newer version (relay long-poll when the endpoint is a
// grpo-relay, polling with backoff and jitter otherwise).
#pragma once
#include <signal.h>
#include "store/store.h"

#define META_SHA256 "pail-sha256"  // x-amz-meta-pail-sha256: lowercase hex of the object

// Create-only put with pail-sha256 metadata. If the key exists with the same
// sha256 (our own earlier attempt) it succeeds; with other content it fails
// with PAIL_ERR_EXISTS ("another writer published this version").
int versioned_put(Store *st, const char *key, const void *data, size_t len, PailErr *err);
int versioned_put_file(Store *st, const char *key, const char *path, PailErr *err);
// Get and verify size and sha256 against the metadata. An object without the
// metadata may be mid-publish (file backend: object first, sidecar second):
// it is re-read for up to ~2 s, then refused as PAIL_ERR_INVALID.
int versioned_get(Store *st, const char *key, Buf *out, PailErr *err);
int versioned_get_file(Store *st, const char *key, const char *path, PailErr *err);

// A series of versioned keys: prefix + "%08ld" + suffix, e.g. "adapters/v" ".h5".
typedef struct {
    const char *prefix, *suffix;
} VersionSeries;
extern const VersionSeries SERIES_ADAPTERS;  // adapters/v%08d.h5
extern const VersionSeries SERIES_STATES;    // trainer/state-v%08d.h5
extern const VersionSeries SERIES_EVALS;     // eval/v%08d.json

int version_key(const VersionSeries *s, long v, char *out, size_t cap);
// Parses a key of the series; returns the version or -1 when it is not one.
long version_parse(const VersionSeries *s, const char *key);
// All versions present, ascending (caller frees *vs).
int versions_list(Store *st, const VersionSeries *s, long **vs, int *n, PailErr *err);
// The newest version, or -1 when there is none. Reads the LATEST hint (when the
// series has one) to list only from there, and falls back to a full listing.
int versions_latest(Store *st, const VersionSeries *s, long *v, PailErr *err);
// Rewrites the adapters/LATEST hint (plain put; readers never trust it alone).
int versions_write_hint(Store *st, long v, PailErr *err);
// Waits until a version > after exists; *out = the newest one. Returns -1 with
// PAIL_ERR_TIMEOUT at the deadline, PAIL_ERR_INTERRUPTED when *stop becomes
// non-zero (may be NULL).
int versions_wait_newer(Store *st, const VersionSeries *s, long after, double timeout_s,
                        volatile sig_atomic_t *stop, long *out, PailErr *err);
