// grpo-relay: the HTTPS S3 gateway between a run's jobs and its bucket.
// One event loop (libevent evhttp, TLS through bufferevent_openssl) verifies
// SigV4 and roles, serves immutable objects from a byte-bounded LRU cache and
// parks long-polls; backend I/O (file:// or s3:// store) runs on worker threads.
// Not here: flag parsing (src/cmd/grpo-relay.c). doc/relay.md is the manual.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "core/err.h"
#include "store/store.h"

typedef struct {
    const char *listen;          // "HOST:PORT"; port 0 picks a free one (relay_port)
    const char *root;            // serve this folder (file:// store), or
    const char *upstream;        // this s3://bucket/prefix (credentials from AWS_*)
    const StoreOptions *upstream_opt;  // endpoint, CA, ... for --upstream (may be NULL)
    const char *bucket;          // the bucket name clients address
    const char *keys_path;       // key file (reloaded by relay_reload_keys / SIGHUP)
    const char *cert, *key;      // TLS certificate and private key (PEM), unless http
    bool http;                   // plain HTTP: only when listen is a loopback address
    uint64_t cache_bytes;        // LRU cache of immutable objects
    uint64_t max_body_bytes;     // largest request body (PUT, UploadPart)
    uint64_t stream_bytes;       // object bytes read but not yet sent, all connections
    long max_connections;
    long max_header_bytes;
    int idle_timeout_s;          // read/write stall limit on a connection
    int header_timeout_s;        // a request's header section must arrive within this (0: 30)
    double min_body_rate;        // bytes/s a body must average over each body_window_s (0: 32768)
    double body_window_s;        // (0: 20)
    int threads;                 // backend worker threads
    int threads_per_key;         // backend threads one access key may hold at once (0: threads - threads/4, >= 1)
    double list_recheck_s;       // --root: a folder's mtime is looked at again at most this often (0: 1)
    int max_wait_s;              // cap on x-pail-wait
    double poll_interval_s;      // re-LIST period for parked long-polls
    const char *spool;           // folder for multipart parts (NULL: a temp folder)
    int max_uploads;             // multipart uploads in progress, all keys (0: 1024)
    int max_uploads_per_key;     // ... per access key (0: 64)
    int trainer_uploads;         // ... of max_uploads that only trainer keys may take (0: 64)
    double upload_expiry_s;      // an upload idle this long is aborted, its spool removed (0: 900)
    double upload_lifetime_s;    // ... and one open this long since its creation (0: 7200)
    uint64_t spool_bytes;        // spooled bytes (parts, bodies arriving), all keys (0: 16 GiB)
    uint64_t spool_bytes_per_key;  // ... per access key (0: 4 GiB)
    uint64_t trainer_spool_bytes;  // ... of spool_bytes that only trainer keys may take (0: 4 GiB)
    bool signals;                // handle SIGTERM/SIGINT (graceful stop), SIGHUP (reload keys)
    FILE *access_log;            // one line per request; NULL = stdout
} RelayConfig;

typedef struct Relay Relay;

// Loads keys and TLS material, opens the backend, binds the listener.
// Returns 0 / -1 with err naming what is wrong (bad key file line, http on a
// non-loopback address, unreadable certificate, port in use, ...).
int relay_open(Relay **out, const RelayConfig *cfg, PailErr *err);
int relay_port(const Relay *r);  // the bound port
// Runs the event loop until a graceful stop has finished. Returns 0 / -1.
int relay_run(Relay *r, PailErr *err);
// Thread-safe: stop accepting, answer parked long-polls, finish in-flight
// requests, then make relay_run return.
void relay_stop(Relay *r);
// Thread-safe: reread the key file (a bad file keeps the old keys, logged).
void relay_reload_keys(Relay *r);
void relay_close(Relay *r);

// Counters for tests and the bench (read on any thread, approximate).
typedef struct {
    long connections, requests, backend_gets, cache_hits, waiters;
    uint64_t cache_used;
} RelayStats;
void relay_stats(const Relay *r, RelayStats *out);
