// Internal state of grpo-relay shared by its files (not a public interface).
// Threading: everything here is owned by the event-loop thread, except Pool
// jobs' run() functions, which execute on worker threads and touch only their
// own RelayReq fields and the worker's Store.
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/bufferevent.h>
#include <openssl/ssl.h>
#include "core/conns.h"
#include "relay/cache.h"
#include "relay/keys.h"
#include "relay/relay.h"
#include "relay/request.h"
#include "relay/xmlout.h"

#define RELAY_META_MD5 "pail-md5"  // reserved metadata: the S3-style ETag on file://
#define RELAY_CHUNK (8u << 20)  // streaming unit for large GETs (one ranged backend read)

typedef struct RelayReq RelayReq;
typedef struct Upload Upload;
typedef struct Front Front;

// ---- spool byte quotas (spool.c) ----
// Bytes a key holds in the spool: a body being received, or an upload's parts.
// Linked into Relay.holds while bytes > 0 or an upload holds it.
typedef struct SpoolHold {
    struct SpoolHold *prev, *next;
    char keyid[128];
    RelayRole role;
    uint64_t bytes;
    bool linked;
} SpoolHold;

// Reserves `bytes` for (keyid, role) against --spool-bytes, --spool-bytes-per-key
// and the trainer's --trainer-spool-bytes, linking h. 0, or -1 with fail (503
// SlowDown: retry later; 400 EntityTooLarge: it can never fit) and msg.
int spool_admit(Relay *r, SpoolHold *h, const char *keyid, RelayRole role, uint64_t bytes, RelayFail *fail,
                char *msg, size_t cap);
void spool_hold_init(SpoolHold *h, const char *keyid, RelayRole role);  // 0 bytes, not linked
void spool_hold_add(Relay *r, SpoolHold *h, int64_t delta);  // no check (bytes already on disk); links h
void spool_release(Relay *r, SpoolHold *h);                  // unlinks, 0 bytes
// Decodes the aws-chunked body spooled in `in` into file `out` (its md5 hex and
// length); any thread. 0 / -1 (fail: 400 for a bad body, 503 SlowDown for the spool).
int spool_aws_chunked_file(const char *in, const char *out, char md5[33], uint64_t *len, RelayFail *fail,
                           PailErr *err);

// ---- the front (front.c): sees each connection's input before evhttp ----
// What the front decided about a request's head before evhttp saw it: a
// refusal (the body is never read), or an admitted body spooled to a file.
typedef struct {
    bool refused, admitted;
    int status;
    char code[48];
    char msg[480];
    char keyid[128], prefix[STORE_MAX_KEY];
    RelayRole role;
    char payload_hash[72];
    char path[4200];             // the spooled body (the request owns it once taken)
    uint64_t len;
    char sha256[65], md5[33];    // of the bytes as received
} FrontVerdict;

int front_open(Relay *r, struct bufferevent *bev, Conn *c);  // c->ext = the front; 0 / -1 (no memory)
void front_close(Conn *c);  // c is being released: its spooled body, if any, is removed
// The verdict for the request evhttp just handed over on c (false: none, the
// handler authenticates as before); moves a spooled body and its hold to the request.
bool front_take(Conn *c, FrontVerdict *out, SpoolHold *hold);
void front_sweep(Relay *r, int64_t now_ms);  // cuts bodies slower than --min-body-rate

// ---- worker pool (pool.c) ----
typedef struct PoolJob {
    void (*run)(struct PoolJob *, Store *st);  // on a worker thread
    void (*done)(struct PoolJob *);            // back on the loop thread
    const char *owner;           // access key id it runs for (NULL: the relay's own); read at submit
    struct PoolLane *lane;       // pool.c: the owner's queue
    struct PoolJob *next;
} PoolJob;

// One access key's queued jobs (pool.c): lanes are served round-robin, and one
// key runs at most key_cap jobs at once, so no key can hold every thread.
typedef struct PoolLane {
    char owner[128];
    PoolJob *head, *tail;
    int running;
    struct PoolLane *next;
} PoolLane;

typedef struct {
    pthread_t *threads;
    Store **stores;              // one per worker (Stores are single-threaded)
    int n, nstores;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    PoolLane *lanes, *rr;        // queued jobs per owner; rr: the lane served next
    PoolLane shared;             // owner "": the relay's own jobs (and any, out of memory)
    int key_cap;                 // jobs one owner may run at once (0: n)
    PoolJob *done_head, *done_tail;
    bool quit;
    int done_fd;                 // eventfd: workers add 1 per finished job
    struct event *done_ev;       // reads done_fd on the loop, drains done_*
} Pool;

int pool_start(Pool *p, struct event_base *base, int n, const char *url, const StoreOptions *opt, PailErr *err);
void pool_submit(Pool *p, PoolJob *j);
void pool_stop(Pool *p);

// ---- connections (server.c; core/conns.h: a Conn's user is the RelayReq answered on it) ----

// ---- the relay ----
struct Relay {
    RelayConfig cfg;             // strings below are owned copies
    char *listen, *bucket, *keys_path, *spool, *store_url;
    bool spool_owned;
    RelayKeys keys;
    SSL_CTX *ssl;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    int port;
    Pool pool;
    struct ListIndex *index;     // --root: the listing index (listindex.h), else NULL
    Cache cache;
    struct event *sweep_ev, *stop_ev, *reload_ev, *poll_ev, *sig_term, *sig_int, *sig_hup;
    Conns conns;                 // all open connections
    bool accepting_paused;
    bool stopping;
    int64_t stop_deadline_ms;
    long inflight;               // requests accepted, not yet answered
    RelayReq *waiters;           // parked long-polls
    long nwaiters;
    Upload *uploads;
    struct Fetch *fetches;       // collapsed in-flight GETs of immutable keys
    Front *fronts;               // every connection's front (front.c)
    SpoolHold *holds;            // spool bytes held, by key (spool.c)
    uint64_t spool_seq;          // names of spooled bodies
    uint64_t stream_used;        // object bytes handed to connections, not yet sent
    RelayReq *stream_wait;       // GET jobs waiting for stream_used < stream_bytes
    atomic_long st_requests, st_backend_gets, st_conns;
    uint64_t next_request_id;
    FILE *log;
};

// ---- requests (handler.c) ----
// RQ_WAITING: a parked long-poll; RQ_DRAIN: a stream waiting for its chunk to be sent.
typedef enum { RQ_NEW, RQ_JOB, RQ_WAITING, RQ_STREAM, RQ_DRAIN } RqState;

struct RelayReq {
    Relay *r;
    struct evhttp_request *req;
    Conn *conn;
    int64_t t0_us;
    char method[8];
    RelayRoute route;
    char keyid[128], role[16], prefix[STORE_MAX_KEY];  // copied: a reload may free the key table
    RelayRole role_id;
    char payload_hash[72];
    bool tls;
    const uint8_t *body;         // request body (borrowed from evhttp's input buffer), or
    size_t body_len;
    FrontVerdict fv;             // ... a body the front spooled (fv.admitted: fv.path, fv.len)
    SpoolHold hold;              // its bytes, released (and fv.path removed) when the request ends
    bool spool_fail;             // the job failed on the spool (disk full): 503 SlowDown, not 500
    // operation inputs
    StorePutOpts put;
    StoreMeta meta[STORE_MAX_META];
    char content_type[128];
    char if_none_match[96];
    bool has_range;
    int64_t range_a, range_b;    // client Range (b < 0: open end; a < 0: suffix of -a bytes)
    bool immutable;
    // results (filled by job run(), read in done())
    int rc;
    PailErr err;
    StoreStat stat;
    Buf out;                     // response body
    StoreList list;
    CacheObj *obj;               // a cached (or uncacheable but shared) object to send
    int status;
    uint64_t off, end;           // byte range being sent [off, end)
    uint64_t total;
    uint64_t bytes;              // body bytes sent
    char etag[80];
    // plumbing
    PoolJob job;
    RqState state;
    RelayReq *next;              // waiter list / fetch list
    struct event *deadline_ev;   // long-poll deadline
    bool relisting, expired;
    RelayReq *group;             // long-polls answered by this one's re-list
    Upload *upload;
    RelayPart *parts;
    int nparts;
    int joined;                  // a completion: leading parts already in the joined object
    uint64_t joined_size;        // its bytes
};

// handler.c
void relay_handle(struct evhttp_request *req, void *arg);
void relay_reply_error(RelayReq *q, int status, const char *code, const char *message);
void relay_reply_buf(RelayReq *q, int status, const char *content_type, Buf *body);
void relay_finish(RelayReq *q, int status);  // access log, bookkeeping, free
void relay_add_common_headers(RelayReq *q);
void relay_stream_abort(RelayReq *q);
void relay_stat_normalize(StoreStat *st);           // pail-md5 metadata -> etag
int relay_put_md5(RelayReq *q, const char *etag);   // file backend: remember the S3 ETag
void relay_md5_hex(const uint8_t *d, size_t n, char out[33]);
void relay_reply_store_error(RelayReq *q);  // maps q->err to an S3 error
int relay_put_conditions(RelayReq *q, const SigV4Header *h, int nh);  // -1 after replying
bool relay_key_immutable(const char *key);
// longpoll.c
void longpoll_park(RelayReq *q);
void longpoll_wake_key(Relay *r, const char *key);
void longpoll_tick(Relay *r);
void longpoll_drain(Relay *r);  // shutdown: answer every waiter with an empty list
void relay_list_submit(RelayReq *q);  // LIST job (also used for re-lists)
void relay_list_reply(RelayReq *q);
int relay_list_start(Relay *r, PailErr *err);  // after pool_start: listing index, per-key share of the threads
void relay_list_stop(Relay *r);                // after pool_stop
// multipart.c
void mp_create(RelayReq *q);
void mp_part(RelayReq *q);
void mp_complete(RelayReq *q);
void mp_abort(RelayReq *q);
void mp_free_all(Relay *r);
// Before an UploadPart body is read: the upload exists, is the key's and open. 0 / -1 (fail, msg).
int mp_part_admit(Relay *r, const RelayRoute *rt, const char *keyid, RelayFail *fail, char *msg, size_t cap);
void mp_expire(Relay *r, int64_t now_ms);  // aborts uploads idle past --upload-expiry (their spool files too)
// server.c
Conn *relay_conn_of(Relay *r, struct evhttp_request *req);
void relay_log_access(RelayReq *q, int status);
