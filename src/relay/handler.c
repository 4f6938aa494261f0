// Request handling for grpo-relay: authenticate, authorize, then answer each S3
// operation from the cache or through a backend job on the worker pool.
// Immutable (versioned) objects are cached whole and concurrent misses on one
// key collapse into one backend GET; other objects, and anything larger than
// the cache's object limit, stream in RELAY_CHUNK ranged reads so memory stays
// bounded whatever the object size.
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include "core/log.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "relay/relay_int.h"
#include "store/runlayout.h"
#include "store/versions.h"

#define MAX_HEADERS 128

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

// Versioned keys never change once written (doc/protocol.md), so they may be
// cached; everything else (LATEST, progress, workers/, control/) is mutable.
bool relay_key_immutable(const char *key) {
    // The series match on the last segments, whatever the run prefix.
    const char *p = key;
    for (;;) {
        if (version_parse(&SERIES_ADAPTERS, p) >= 0 || version_parse(&SERIES_STATES, p) >= 0 ||
            version_parse(&SERIES_EVALS, p) >= 0)
            return true;
        long v, seq;
        char w[WORKER_ID_MAX + 1];
        if (run_parse_rollout(p, &v, w, sizeof w, &seq) == 0) return true;
        const char *slash = strchr(p, '/');
        if (!slash) return false;
        p = slash + 1;
    }
}

// The file:// store's etag is not the content MD5 that S3 clients expect of a
// single-part object (s3cmd checks it), so the relay keeps one in the reserved
// metadata entry pail-md5 (file backend only) and presents it as the ETag.
void relay_stat_normalize(StoreStat *st) {
    for (int i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[i].name, RELAY_META_MD5)) {
            snprintf(st->etag, sizeof st->etag, "%s", st->meta[i].value);
            st->meta[i] = st->meta[--st->nmeta];
            return;
        }
}

// Adds pail-md5 = etag to q's put metadata (file backend). -1 when full.
int relay_put_md5(RelayReq *q, const char *etag) {
    if (!q->r->cfg.root) return 0;
    if (q->put.nmeta >= STORE_MAX_META) return -1;
    snprintf(q->meta[q->put.nmeta].name, sizeof q->meta[0].name, "%s", RELAY_META_MD5);
    snprintf(q->meta[q->put.nmeta].value, sizeof q->meta[0].value, "%s", etag);
    q->put.nmeta++;
    q->put.meta = q->meta;
    return 0;
}

void relay_add_common_headers(RelayReq *q) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
    char id[32];
    snprintf(id, sizeof id, "%016" PRIx64, (uint64_t)q->t0_us ^ ((uint64_t)(uintptr_t)q << 20));
    evhttp_add_header(h, "x-pail-relay", "1");
    evhttp_add_header(h, "x-amz-request-id", id);
    evhttp_add_header(h, "Server", "grpo-relay");
}

void relay_finish(RelayReq *q, int status) {
    Relay *r = q->r;
    relay_log_access(q, status);
    if (q->conn) {
        q->conn->busy = false;
        q->conn->idle_since_ms = time_mono_ms();
        if (q->conn->user == q) q->conn->user = NULL;
    }
    if (q->obj) cache_unref(q->obj);
    if (q->fv.path[0]) unlink(q->fv.path);  // a spooled body (already moved when it became a part)
    spool_release(r, &q->hold);
    if (q->deadline_ev) event_free(q->deadline_ev);
    buf_free(&q->out);
    store_list_free(&q->list);
    free(q->parts);
    free(q);
    r->inflight--;
}

void relay_reply_buf(RelayReq *q, int status, const char *content_type, Buf *body) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
    relay_add_common_headers(q);
    if (content_type) evhttp_add_header(h, "Content-Type", content_type);
    if (q->r->stopping) evhttp_add_header(h, "Connection", "close");
    struct evbuffer *eb = evbuffer_new();
    bool head = !strcmp(q->method, "HEAD");
    if (body && body->len && !head) {
        evbuffer_add(eb, body->data, body->len);
        q->bytes = body->len;
    }
    evhttp_send_reply(q->req, status, NULL, eb);
    evbuffer_free(eb);
    relay_finish(q, status);
}

void relay_reply_error(RelayReq *q, int status, const char *code, const char *message) {
    Buf b = {0};
    const char *res = q->route.key[0] ? q->route.key : NULL;
    relay_xml_error(&b, code, message, res, NULL);
    if (status >= 500) log_warn("relay: %s %s: %d %s: %s", q->method, q->route.key, status, code, message);
    relay_reply_buf(q, status, "application/xml", &b);
    buf_free(&b);
}

// Maps a store error to an S3 answer. Internal details stay in the log.
void relay_reply_store_error(RelayReq *q) {
    if (q->spool_fail) {  // the spool's disk, not the store: the client retries
        log_warn("relay: %s", q->err.msg);
        relay_reply_error(q, 503, "SlowDown", "The relay's spool is full or failing; retry later.");
        return;
    }
    switch (q->err.code) {
    case PAIL_ERR_NOT_FOUND: relay_reply_error(q, 404, "NoSuchKey", "The specified key does not exist."); return;
    case PAIL_ERR_EXISTS:
        relay_reply_error(q, 412, "PreconditionFailed", "At least one of the preconditions you specified did not hold.");
        return;
    case PAIL_ERR_INVALID: relay_reply_error(q, 400, "InvalidRequest", q->err.msg); return;
    case PAIL_ERR_CONFLICT:  // final for every S3 client (none retries a 409 but ConditionalRequestConflict)
        relay_reply_error(q, 409, "KeyConflict", q->err.msg);
        return;
    case PAIL_ERR_NETWORK:
    case PAIL_ERR_TIMEOUT:
        log_warn("relay: backend: %s", q->err.msg);
        relay_reply_error(q, 503, "ServiceUnavailable", "The relay's backend is unavailable; retry.");
        return;
    default:
        log_error("relay: backend: %s", q->err.msg);
        relay_reply_error(q, 500, "InternalError", "The relay's backend failed; see the relay's log.");
    }
}

static void add_object_headers(RelayReq *q, const StoreStat *st) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
    char v[300];
    snprintf(v, sizeof v, "\"%s\"", st->etag);
    evhttp_add_header(h, "ETag", v);
    time_t t = (time_t)st->mtime;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(v, sizeof v, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    evhttp_add_header(h, "Last-Modified", v);
    evhttp_add_header(h, "Accept-Ranges", "bytes");
    for (int i = 0; i < st->nmeta; i++) {
        char name[96];
        snprintf(name, sizeof name, "x-amz-meta-%s", st->meta[i].name);
        evhttp_add_header(h, name, st->meta[i].value);
    }
}

// Resolves the client's Range against size into [*a, *b); false when unsatisfiable.
static bool resolve_range(const RelayReq *q, uint64_t size, uint64_t *a, uint64_t *b) {
    if (!q->has_range) {
        *a = 0;
        *b = size;
        return true;
    }
    if (q->range_a < 0) {  // suffix: the last -range_a bytes
        uint64_t n = (uint64_t)(-q->range_a);
        if (n == 0 || size == 0) return false;
        *a = n >= size ? 0 : size - n;
        *b = size;
        return true;
    }
    if ((uint64_t)q->range_a >= size) return false;
    *a = (uint64_t)q->range_a;
    *b = q->range_b < 0 || (uint64_t)q->range_b + 1 > size ? size : (uint64_t)q->range_b + 1;
    return true;
}

static bool etag_matches(const char *inm, const char *etag) {
    if (!inm[0]) return false;
    if (!strcmp(inm, "*")) return true;
    // A list of quoted etags, possibly weak (W/"...").
    const char *p = inm;
    size_t el = strlen(etag);
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!strncmp(p, "W/", 2)) p += 2;
        const char *s = p;
        if (*s == '"') s++;
        if (!strncmp(s, etag, el) && (s[el] == '"' || s[el] == ',' || s[el] == 0 || s[el] == ' ')) return true;
        const char *c = strchr(p, ',');
        if (!c) break;
        p = c + 1;
    }
    return false;
}

static void send_range_headers(RelayReq *q, uint64_t a, uint64_t b, uint64_t size) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
    char v[96];
    snprintf(v, sizeof v, "%llu", (unsigned long long)(b - a));
    evhttp_add_header(h, "Content-Length", v);
    if (q->has_range) {
        snprintf(v, sizeof v, "bytes %llu-%llu/%llu", (unsigned long long)a, (unsigned long long)(b ? b - 1 : 0),
                 (unsigned long long)size);
        evhttp_add_header(h, "Content-Range", v);
    }
    evhttp_add_header(h, "Content-Type", "application/octet-stream");
}

static void obj_cleanup(const void *data, size_t len, void *extra) {
    (void)data, (void)len;
    cache_unref(extra);
}

// Small bodies go out in the same buffer chain as evhttp's header block, so
// bufferevent_openssl makes one TLS record and one write() of the response
// instead of two: the hot path for many workers reading small cached objects.
// evhttp has written nothing yet when evhttp_send_reply returns (the socket
// write waits for the loop), and the Content-Length header is already set.
static bool send_inline(RelayReq *q, int status, const uint8_t *data, size_t len) {
    struct evhttp_connection *evcon = evhttp_request_get_connection(q->req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    if (!bev || len > (32u << 10) || q->r->stopping) return false;
    struct evbuffer *out = bufferevent_get_output(bev);
    if (evbuffer_get_length(out) != 0) return false;
    evbuffer_expand(out, len + 4096);
    evhttp_send_reply(q->req, status, NULL, NULL);
    evbuffer_add(out, data, len);
    q->bytes = len;
    relay_finish(q, status);
    return true;
}

// Answers GET/HEAD from a whole object in memory (cached or just fetched).
static void serve_obj(RelayReq *q, CacheObj *o) {
    bool head = !strcmp(q->method, "HEAD");
    if (etag_matches(q->if_none_match, o->stat.etag)) {
        add_object_headers(q, &o->stat);
        relay_reply_buf(q, 304, NULL, NULL);
        return;
    }
    uint64_t a, b;
    if (!head && !resolve_range(q, o->size, &a, &b)) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
        char v[64];
        snprintf(v, sizeof v, "bytes */%llu", (unsigned long long)o->size);
        evhttp_add_header(h, "Content-Range", v);
        relay_reply_error(q, 416, "InvalidRange", "The requested range is not satisfiable");
        return;
    }
    if (head) a = 0, b = o->size;
    int status = q->has_range && !head ? 206 : 200;
    add_object_headers(q, &o->stat);
    send_range_headers(q, a, b, o->size);
    relay_add_common_headers(q);
    if (!head && send_inline(q, status, o->data + a, b - a)) return;
    struct evbuffer *eb = evbuffer_new();
    if (!head && b > a) {
        o->refs++;
        evbuffer_add_reference(eb, o->data + a, b - a, obj_cleanup, o);
        q->bytes = b - a;
    }
    evhttp_send_reply(q->req, status, NULL, eb);
    evbuffer_free(eb);
    relay_finish(q, status);
}

// ---- collapsed fetches of immutable objects ----

typedef struct Fetch {
    PoolJob job;
    Relay *r;
    char key[STORE_MAX_KEY + 1];
    uint64_t max_size;
    RelayReq *waiters;
    int rc;
    PailErr err;
    StoreStat stat;
    Buf out;
    bool too_big;
    bool verified;   // the bytes hash to their pail-sha256: may be cached
    char owner[128]; // the access key whose miss started it (its share of the threads)
    struct Fetch *next;
} Fetch;

static void get_submit(RelayReq *q);

static void fetch_run(PoolJob *j, Store *st) {
    Fetch *f = (Fetch *)j;
    atomic_fetch_add(&f->r->st_backend_gets, 1);
    f->rc = store_head(st, f->key, &f->stat, &f->err);
    if (f->rc < 0) return;
    relay_stat_normalize(&f->stat);
    if (f->stat.size > f->max_size) {
        f->too_big = true;
        return;
    }
    StoreGetOpts go = {.range_end = -1};
    StoreStat gs;
    f->rc = store_get(st, f->key, &f->out, &go, &gs, &f->err);
    relay_stat_normalize(&gs);
    if (f->rc == 0) {
        f->stat = gs;
        const char *want = store_stat_meta(&f->stat, "pail-sha256");
        char hex[65];
        if (want) {
            sha256_hex(f->out.data ? f->out.data : (const uint8_t *)"", f->out.len, hex);
            f->verified = !strcmp(hex, want);
            if (!f->verified)  // served as stored (the reader refuses it), never cached
                log_warn("%s: sha256 %.16s... does not match its pail-sha256 %.16s...: not cached", f->key, hex,
                         want);
        }
    }
}

static void fetch_done(PoolJob *j) {
    Fetch *f = (Fetch *)j;
    Relay *r = f->r;
    for (Fetch **pp = &r->fetches; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    CacheObj *o = NULL;
    // Only what pail published whole (with its pail-sha256, and bytes that
    // match it) is cached: a versioned key read mid-publish, uploaded by
    // another tool, or damaged in the bucket is served but never pinned in the
    // cache, so a repaired object is served as repaired.
    if (f->rc == 0 && !f->too_big && f->verified) {
        uint8_t *data = f->out.data;
        uint64_t size = f->out.len;
        if (!data) data = malloc(1);
        f->out.data = NULL;
        o = cache_put(&r->cache, f->key, data, size, &f->stat);
    }
    for (RelayReq *q = f->waiters, *next; q; q = next) {
        next = q->next;
        q->next = NULL;
        if (f->rc < 0) {
            q->err = f->err;
            relay_reply_store_error(q);
        } else if (f->too_big || !o) {
            get_submit(q);  // stream it on its own
        } else {
            o->refs++;
            q->obj = o;
            serve_obj(q, o);
        }
    }
    if (o) cache_unref(o);
    buf_free(&f->out);
    free(f);
}

// ---- per-request GET / HEAD with streaming ----

static void get_run(PoolJob *j, Store *st) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    atomic_fetch_add(&q->r->st_backend_gets, 1);
    q->status = 0;
    if (q->state == RQ_STREAM) {  // next chunk of a running stream
        uint64_t n = q->end - q->off > RELAY_CHUNK ? RELAY_CHUNK : q->end - q->off;
        StoreGetOpts go = {.range_start = (int64_t)q->off, .range_end = (int64_t)(q->off + n - 1)};
        StoreStat gs;
        buf_reset(&q->out);
        q->rc = store_get(st, q->route.key, &q->out, &go, &gs, &q->err);
        relay_stat_normalize(&gs);
        if (q->rc == 0 && (strcmp(gs.etag, q->etag) || q->out.len != n))
            q->rc = err_set(&q->err, PAIL_ERR_IO, "%s changed while it was being sent", q->route.key);
        return;
    }
    // A mutable key (adapters/LATEST, progress.json) may be replaced between
    // the HEAD and the first read: nothing is sent yet, so take a fresh look.
    for (int attempt = 0;; attempt++) {
        buf_reset(&q->out);
        q->rc = store_head(st, q->route.key, &q->stat, &q->err);
        if (q->rc < 0) return;
        relay_stat_normalize(&q->stat);
        if (!strcmp(q->method, "HEAD")) return;
        if (etag_matches(q->if_none_match, q->stat.etag)) {
            q->status = 304;
            return;
        }
        uint64_t a, b;
        if (!resolve_range(q, q->stat.size, &a, &b)) {
            q->status = 416;
            return;
        }
        q->off = a;
        q->end = b;
        q->total = q->stat.size;
        snprintf(q->etag, sizeof q->etag, "%s", q->stat.etag);
        if (b == a) return;
        uint64_t n = b - a > RELAY_CHUNK ? RELAY_CHUNK : b - a;
        StoreGetOpts go = {.range_start = (int64_t)a, .range_end = (int64_t)(a + n - 1)};
        StoreStat gs;
        q->rc = store_get(st, q->route.key, &q->out, &go, &gs, &q->err);
        relay_stat_normalize(&gs);
        if (q->rc == 0 && (strcmp(gs.etag, q->etag) || q->out.len != n)) {
            if (attempt < 4) continue;
            q->rc = err_set(&q->err, PAIL_ERR_IO, "%s changed while it was being read", q->route.key);
        }
        return;
    }
}

static void stream_drained(struct evhttp_connection *evcon, void *arg);

// Object bytes handed to connections (read from the backend, not yet sent)
// are counted against --stream-bytes; GET jobs wait while the budget is spent,
// so slow readers cannot make the relay hold unbounded data.
static void chunk_free(const void *data, size_t len, void *extra) {
    Relay *r = extra;
    free((void *)data);
    r->stream_used -= len;
    while (r->stream_wait && r->stream_used < r->cfg.stream_bytes && r->pool.threads) {
        RelayReq *q = r->stream_wait;
        r->stream_wait = q->next;
        q->next = NULL;
        pool_submit(&r->pool, &q->job);
    }
}

static void stream_gate(RelayReq *q) {
    Relay *r = q->r;
    if (r->stream_used < r->cfg.stream_bytes) {
        pool_submit(&r->pool, &q->job);
        return;
    }
    RelayReq **pp = &r->stream_wait;
    while (*pp) pp = &(*pp)->next;
    q->next = NULL;
    *pp = q;
}

// Moves q->out into eb without a copy; the bytes count until they are sent.
static void out_to_evbuffer(RelayReq *q, struct evbuffer *eb) {
    size_t len = q->out.len;
    if (len == 0) return;
    q->r->stream_used += len;
    evbuffer_add_reference(eb, q->out.data, len, chunk_free, q->r);
    q->out = (Buf){0};
}

static void stream_send_chunk(RelayReq *q) {
    struct evbuffer *eb = evbuffer_new();
    q->bytes += q->out.len;
    q->off += q->out.len;
    out_to_evbuffer(q, eb);
    q->state = RQ_DRAIN;
    if (q->conn) q->conn->user = q;
    evhttp_send_reply_chunk_with_cb(q->req, eb, stream_drained, q);
    evbuffer_free(eb);
}

// The connection went away mid-stream (from the sweep, or a failed chunk).
void relay_stream_abort(RelayReq *q) {
    evhttp_send_reply_end(q->req);  // frees a request whose connection is gone
    relay_finish(q, 200);
}

static void stream_drained(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    RelayReq *q = arg;
    if (q->off >= q->end) {
        evhttp_send_reply_end(q->req);
        relay_finish(q, q->has_range ? 206 : 200);
        return;
    }
    q->state = RQ_STREAM;
    stream_gate(q);
}

static void get_done(PoolJob *j) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    if (q->state == RQ_STREAM) {
        if (q->rc < 0 || !evhttp_request_get_connection(q->req)) {
            if (q->rc < 0) log_warn("relay: GET %s aborted mid-stream: %s", q->route.key, q->err.msg);
            // Cut the connection: the client sees a short body, never a wrong one.
            struct evhttp_connection *evcon = evhttp_request_get_connection(q->req);
            if (evcon) {
                evhttp_connection_free(evcon);  // frees q->req with it
                relay_finish(q, 500);
            } else {
                relay_stream_abort(q);
            }
            return;
        }
        stream_send_chunk(q);
        return;
    }
    if (q->rc < 0) {
        relay_reply_store_error(q);
        return;
    }
    if (q->status == 304) {
        add_object_headers(q, &q->stat);
        relay_reply_buf(q, 304, NULL, NULL);
        return;
    }
    if (q->status == 416) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
        char v[64];
        snprintf(v, sizeof v, "bytes */%llu", (unsigned long long)q->stat.size);
        evhttp_add_header(h, "Content-Range", v);
        relay_reply_error(q, 416, "InvalidRange", "The requested range is not satisfiable");
        return;
    }
    bool head = !strcmp(q->method, "HEAD");
    add_object_headers(q, &q->stat);
    if (head) {
        send_range_headers(q, 0, q->stat.size, q->stat.size);
        relay_reply_buf(q, 200, NULL, NULL);
        return;
    }
    int status = q->has_range ? 206 : 200;
    send_range_headers(q, q->off, q->end, q->total);
    relay_add_common_headers(q);
    if (q->end - q->off == q->out.len) {  // all of it in one piece
        struct evbuffer *eb = evbuffer_new();
        q->bytes = q->out.len;
        out_to_evbuffer(q, eb);
        evhttp_send_reply(q->req, status, NULL, eb);
        evbuffer_free(eb);
        relay_finish(q, status);
        return;
    }
    evhttp_send_reply_start(q->req, status, NULL);
    stream_send_chunk(q);
}

static void get_submit(RelayReq *q) {
    q->job.run = get_run;
    q->job.done = get_done;
    q->state = RQ_JOB;
    stream_gate(q);
}

static int parse_range(RelayReq *q, const char *v) {
    if (!v) return 0;
    if (strncmp(v, "bytes=", 6) || strchr(v, ',')) return 0;  // not bytes, or multi-range: whole object
    const char *s = v + 6;
    char *end;
    if (*s == '-') {
        long long n = strtoll(s + 1, &end, 10);
        if (*end || n <= 0) return -1;
        q->range_a = -n;
        q->range_b = -1;
    } else {
        long long a = strtoll(s, &end, 10);
        if (end == s || *end != '-' || a < 0) return -1;
        s = end + 1;
        long long b = -1;
        if (*s) {
            b = strtoll(s, &end, 10);
            if (*end || b < a) return -1;
        }
        q->range_a = a;
        q->range_b = b;
    }
    q->has_range = true;
    return 0;
}

static void op_get(RelayReq *q, const SigV4Header *h, int nh) {
    Relay *r = q->r;
    const char *inm = relay_header(h, nh, "if-none-match");
    if (inm) snprintf(q->if_none_match, sizeof q->if_none_match, "%s", inm);
    if (parse_range(q, relay_header(h, nh, "range")) < 0) {
        relay_reply_error(q, 416, "InvalidRange", "The Range header is malformed");
        return;
    }
    q->immutable = relay_key_immutable(q->route.key);
    if (q->immutable && r->cache.limit > 0) {
        CacheObj *o = cache_get(&r->cache, q->route.key);
        if (o) {
            q->obj = o;
            serve_obj(q, o);
            return;
        }
        for (Fetch *f = r->fetches; f; f = f->next)
            if (!strcmp(f->key, q->route.key)) {
                q->next = f->waiters;
                f->waiters = q;
                q->state = RQ_JOB;
                return;
            }
        Fetch *f = calloc(1, sizeof *f);
        if (f) {
            f->r = r;
            snprintf(f->key, sizeof f->key, "%s", q->route.key);
            f->max_size = cache_max_object(&r->cache);
            f->waiters = q;
            f->job.run = fetch_run;
            f->job.done = fetch_done;
            snprintf(f->owner, sizeof f->owner, "%s", q->keyid);
            f->job.owner = f->owner;
            f->next = r->fetches;
            r->fetches = f;
            q->state = RQ_JOB;
            pool_submit(&r->pool, &f->job);
            return;
        }
    }
    get_submit(q);
}

// ---- PUT / DELETE ----

// A body the front spooled: decoded in the spool if aws-chunked, then handed to
// the store as a file (never whole in memory).
static void put_file_run(RelayReq *q, Store *st) {
    RelayFail fail = {0};
    char md5[33], dec[4300];
    const char *path = q->fv.path;
    snprintf(md5, sizeof md5, "%s", q->fv.md5);
    if (!strcmp(q->payload_hash, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")) {
        uint64_t n = 0;
        snprintf(dec, sizeof dec, "%s.dec", q->fv.path);
        if (spool_aws_chunked_file(q->fv.path, dec, md5, &n, &fail, &q->err) < 0) {
            q->status = fail.status;
            snprintf(q->etag, sizeof q->etag, "%s", fail.code);
            return;
        }
        if (rename(dec, q->fv.path) < 0) {
            unlink(dec);
            q->status = 503;
            snprintf(q->etag, sizeof q->etag, "SlowDown");
            err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", q->fv.path, strerror(errno));
            return;
        }
    }
    if (relay_put_md5(q, md5) < 0) {
        q->status = 400;
        snprintf(q->etag, sizeof q->etag, "MetadataTooLarge");
        err_set(&q->err, PAIL_ERR_INVALID, "The relay keeps at most 7 user metadata entries.");
        return;
    }
    q->put.src_linkable = true;  // the spool's file, removed after: a file store links it in, no copy
    q->rc = store_put_file(st, q->route.key, path, &q->put, &q->err);
    if (q->rc == 0) {
        PailErr herr = {0};
        if (store_head(st, q->route.key, &q->stat, &herr) < 0) q->stat.etag[0] = 0;
        relay_stat_normalize(&q->stat);
    }
}

static void put_run(PoolJob *j, Store *st) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    RelayFail fail = {0};
    const uint8_t *data = q->body;
    size_t len = q->body_len;
    Buf decoded = {0};
    q->status = 0;
    if (q->fv.admitted) {
        put_file_run(q, st);
        return;
    }
    if (relay_payload_check(q->payload_hash, data, len, &fail, &q->err) < 0) {
        q->status = fail.status;
        snprintf(q->etag, sizeof q->etag, "%s", fail.code);
        return;
    }
    if (!strcmp(q->payload_hash, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")) {
        if (relay_aws_chunked_decode(data, len, &decoded, &fail, &q->err) < 0) {
            q->status = fail.status;
            snprintf(q->etag, sizeof q->etag, "%s", fail.code);
            buf_free(&decoded);
            return;
        }
        data = decoded.data ? decoded.data : (const uint8_t *)"";
        len = decoded.len;
    }
    char md5[33];
    relay_md5_hex(data, len, md5);
    if (relay_put_md5(q, md5) < 0) {
        q->status = 400;
        snprintf(q->etag, sizeof q->etag, "MetadataTooLarge");
        err_set(&q->err, PAIL_ERR_INVALID, "The relay keeps at most 7 user metadata entries.");
        buf_free(&decoded);
        return;
    }
    q->rc = store_put(st, q->route.key, data, len, &q->put, &q->err);
    buf_free(&decoded);
    if (q->rc == 0) {
        PailErr herr = {0};
        if (store_head(st, q->route.key, &q->stat, &herr) < 0) q->stat.etag[0] = 0;
        relay_stat_normalize(&q->stat);
    }
}

static void put_done(PoolJob *j) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    if (q->status) {
        relay_reply_error(q, q->status, q->etag, q->err.msg);
        return;
    }
    if (q->rc < 0) {
        relay_reply_store_error(q);
        return;
    }
    cache_invalidate(&q->r->cache, q->route.key);
    char key[STORE_MAX_KEY + 1];
    snprintf(key, sizeof key, "%s", q->route.key);
    Relay *r = q->r;
    if (q->stat.etag[0]) {
        char v[96];
        snprintf(v, sizeof v, "\"%s\"", q->stat.etag);
        evhttp_add_header(evhttp_request_get_output_headers(q->req), "ETag", v);
    }
    relay_reply_buf(q, 200, NULL, NULL);
    longpoll_wake_key(r, key);
}

// x-amz-meta-* request headers into q->meta; -1 (after replying) when too many or too long.
static int collect_meta(RelayReq *q, const SigV4Header *h, int nh) {
    int n = 0;
    for (int i = 0; i < nh; i++) {
        if (strncasecmp(h[i].name, "x-amz-meta-", 11)) continue;
        const char *name = h[i].name + 11;
        if (!strcasecmp(name, RELAY_META_MD5)) {
            relay_reply_error(q, 400, "InvalidArgument", "x-amz-meta-" RELAY_META_MD5 " is reserved by the relay");
            return -1;
        }
        if (n == STORE_MAX_META || strlen(name) >= sizeof q->meta[0].name || !*name ||
            strlen(h[i].value) >= sizeof q->meta[0].value) {
            relay_reply_error(q, 400, "MetadataTooLarge",
                              "The relay keeps at most 8 user metadata entries, names < 64 and values < 256 bytes.");
            return -1;
        }
        for (size_t k = 0; name[k]; k++)
            q->meta[n].name[k] = (char)((name[k] >= 'A' && name[k] <= 'Z') ? name[k] + 32 : name[k]),
            q->meta[n].name[k + 1] = 0;
        snprintf(q->meta[n].value, sizeof q->meta[n].value, "%s", h[i].value);
        n++;
    }
    q->put.nmeta = n;
    q->put.meta = q->meta;
    return 0;
}

int relay_put_conditions(RelayReq *q, const SigV4Header *h, int nh) {
    const char *inm = relay_header(h, nh, "if-none-match");
    if (inm) {
        if (strcmp(inm, "*")) {
            relay_reply_error(q, 501, "NotImplemented", "If-None-Match on PUT supports only '*' (create-only)");
            return -1;
        }
        q->put.create_only = true;
    }
    if (relay_header(h, nh, "if-match")) {
        relay_reply_error(q, 501, "NotImplemented", "If-Match on PUT is not supported by the relay");
        return -1;
    }
    if (relay_header(h, nh, "x-amz-copy-source")) {
        relay_reply_error(q, 501, "NotImplemented", "CopyObject is not supported by the relay");
        return -1;
    }
    return collect_meta(q, h, nh);
}

static void op_put(RelayReq *q, const SigV4Header *h, int nh) {
    if (relay_put_conditions(q, h, nh) < 0) return;
    q->job.run = put_run;
    q->job.done = put_done;
    q->state = RQ_JOB;
    pool_submit(&q->r->pool, &q->job);
}

static void del_run(PoolJob *j, Store *st) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    q->rc = store_delete(st, q->route.key, &q->err);
}

static void del_done(PoolJob *j) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    if (q->rc < 0) {
        relay_reply_store_error(q);
        return;
    }
    cache_invalidate(&q->r->cache, q->route.key);
    relay_reply_buf(q, 204, NULL, NULL);
}

// ---- entry point ----

static const char *method_name(enum evhttp_cmd_type t) {
    switch (t) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_DELETE: return "DELETE";
    default: return "OTHER";
    }
}

static bool allowed(RelayReq *q, RelayAccess what) {
    const char *why = NULL;
    if (relay_policy_allows(q->role_id, q->prefix, what, q->route.key, &why)) return true;
    char msg[768];
    snprintf(msg, sizeof msg, "Access Denied: %s (key id %s, role %s, prefix %.300s)", why, q->keyid, q->role,
             q->prefix[0] ? q->prefix : "none");
    relay_reply_error(q, 403, "AccessDenied", msg);
    return false;
}

void relay_handle(struct evhttp_request *req, void *arg) {
    Relay *r = arg;
    RelayReq *q = calloc(1, sizeof *q);
    if (!q) {
        evhttp_send_error(req, 503, "out of memory");
        return;
    }
    q->r = r;
    q->req = req;
    q->t0_us = now_us();
    q->conn = relay_conn_of(r, req);
    if (q->conn) {
        q->conn->busy = true;
        q->conn->user = q;
    }
    q->tls = r->ssl != NULL;
    front_take(q->conn, &q->fv, &q->hold);
    r->inflight++;
    atomic_fetch_add(&r->st_requests, 1);
    snprintf(q->method, sizeof q->method, "%s", method_name(evhttp_request_get_command(req)));
    if (r->stopping) {
        relay_reply_error(q, 503, "ServiceUnavailable", "The relay is shutting down.");
        return;
    }
    const char *uri = evhttp_request_get_uri(req);
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    SigV4Header hs[MAX_HEADERS];
    int nh = 0;
    for (struct evkeyval *kv = in->tqh_first; kv; kv = kv->next.tqe_next) {
        if (nh == MAX_HEADERS) {
            relay_reply_error(q, 400, "RequestHeaderSectionTooLarge", "More than 128 request headers.");
            return;
        }
        hs[nh++] = (SigV4Header){kv->key, kv->value};
    }
    RelayFail fail = {0};
    PailErr err = {0};
    int route_rc = relay_route_parse(q->method, uri, relay_header(hs, nh, "host"), r->bucket, &q->route, &fail, &err);
    if (route_rc == 0 && q->route.op == OP_HEALTH) {
        Buf b = {0};
        buf_printf(&b, "ok\n");
        relay_reply_buf(q, 200, "text/plain", &b);
        buf_free(&b);
        return;
    }
    if (q->fv.refused) {  // decided by the front from the head alone; the body was never read
        if (q->fv.keyid[0]) {
            snprintf(q->keyid, sizeof q->keyid, "%s", q->fv.keyid);
            snprintf(q->role, sizeof q->role, "%s", relay_role_name(q->fv.role));
        }
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        relay_reply_error(q, q->fv.status, q->fv.code, q->fv.msg);
        return;
    }
    if (route_rc < 0 && !q->route.path[0]) {  // the path itself is malformed: nothing to authenticate
        relay_reply_error(q, fail.status, fail.code, err.msg);
        return;
    }
    if (q->fv.admitted) {  // authenticated by the front (the head it signed had the body's length)
        snprintf(q->keyid, sizeof q->keyid, "%s", q->fv.keyid);
        snprintf(q->role, sizeof q->role, "%s", relay_role_name(q->fv.role));
        snprintf(q->prefix, sizeof q->prefix, "%s", q->fv.prefix);
        snprintf(q->payload_hash, sizeof q->payload_hash, "%s", q->fv.payload_hash);
        q->role_id = q->fv.role;
    } else {
        const char *qm = strchr(uri, '?');
        RelayAuthIn ai = {.method = q->method, .path = q->route.path[0] ? q->route.path : "/",
                          .query = qm ? qm + 1 : NULL, .headers = hs, .nheaders = nh, .tls = q->tls,
                          .now = time_unix_s()};
        const RelayKey *who = NULL;
        RelayFail afail = {0};
        PailErr aerr = {0};
        if (relay_auth_verify(&r->keys, &ai, &who, q->payload_hash, &afail, &aerr) < 0) {
            relay_reply_error(q, afail.status, afail.code, aerr.msg);
            return;
        }
        snprintf(q->keyid, sizeof q->keyid, "%s", who->id);
        snprintf(q->role, sizeof q->role, "%s", relay_role_name(who->role));
        snprintf(q->prefix, sizeof q->prefix, "%s", who->prefix);
        q->role_id = who->role;
    }
    q->job.owner = q->keyid;  // the backend threads are shared out per access key (pool.c)
    if (route_rc < 0) {
        relay_reply_error(q, fail.status, fail.code, err.msg);
        return;
    }
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    q->body_len = evbuffer_get_length(body);
    q->body = q->body_len ? evbuffer_pullup(body, -1) : (const uint8_t *)"";
    if (q->fv.admitted) {  // a signed payload hash must match the bytes that arrived; nothing is stored otherwise
        q->body = NULL;
        q->body_len = q->fv.len;
        if (relay_payload_check_digest(q->payload_hash, q->fv.sha256, &fail, &err) < 0) {
            relay_reply_error(q, fail.status, fail.code, err.msg);
            return;
        }
    }
    Buf b = {0};
    switch (q->route.op) {
    case OP_LIST_BUCKETS:
        relay_xml_buckets(&b, r->bucket);
        relay_reply_buf(q, 200, "application/xml", &b);
        break;
    case OP_HEAD_BUCKET: relay_reply_buf(q, 200, NULL, NULL); break;
    case OP_LOCATION:
        relay_xml_location(&b);
        relay_reply_buf(q, 200, "application/xml", &b);
        break;
    case OP_LIST:
        if (!relay_policy_allows_list(q->prefix, q->route.prefix)) {
            char msg[256];
            snprintf(msg, sizeof msg, "Access Denied: key id %s may list only under '%s/'", q->keyid, q->prefix);
            relay_reply_error(q, 403, "AccessDenied", msg);
            break;
        }
        if (q->route.wait_s > r->cfg.max_wait_s) q->route.wait_s = r->cfg.max_wait_s;
        relay_list_submit(q);
        break;
    case OP_GET:
    case OP_HEAD:
        if (allowed(q, ACCESS_READ)) op_get(q, hs, nh);
        break;
    case OP_PUT:
        if (allowed(q, ACCESS_WRITE)) op_put(q, hs, nh);
        break;
    case OP_DELETE:
        if (allowed(q, ACCESS_DELETE)) {
            q->job.run = del_run;
            q->job.done = del_done;
            q->state = RQ_JOB;
            pool_submit(&r->pool, &q->job);
        }
        break;
    case OP_MP_CREATE:
        if (allowed(q, ACCESS_WRITE) && relay_put_conditions(q, hs, nh) == 0) mp_create(q);
        break;
    case OP_MP_PART:
        if (allowed(q, ACCESS_WRITE)) mp_part(q);
        break;
    case OP_MP_COMPLETE:
        if (allowed(q, ACCESS_WRITE)) {
            const char *inm = relay_header(hs, nh, "if-none-match");
            if (inm && !strcmp(inm, "*")) q->put.create_only = true;
            mp_complete(q);
        }
        break;
    case OP_MP_ABORT:
        if (allowed(q, ACCESS_WRITE)) mp_abort(q);
        break;
    default: relay_reply_error(q, 501, "NotImplemented", "This operation is not supported by the relay."); break;
    }
    buf_free(&b);
}
