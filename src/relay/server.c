// grpo-relay's server side: TLS context, the evhttp listener, connection
// accounting and slowloris timeouts (evhttp 2.1 has neither a connection cap nor
// a header timeout), signals, graceful shutdown and the access log.
// Connections: evhttp creates each bufferevent through our bevcb; we keep one
// extra reference so a sweep can tell (callbacks cleared) when evhttp has freed
// it, count it down, and shut down sockets that have not delivered a request in
// time. At the cap the listener is paused (the kernel backlog holds the rest).
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <event2/bufferevent_ssl.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <openssl/err.h>
#include "core/fsutil.h"
#include "core/log.h"
#include "core/net.h"
#include "core/timeutil.h"
#include "relay/relay_int.h"

#define SWEEP_MS 200

Conn *relay_conn_of(Relay *r, struct evhttp_request *req) {
    return conns_of(&r->conns, req);
}

static void listener_update(Relay *r) {
    if (!r->bound || r->stopping) return;
    struct evconnlistener *l = evhttp_bound_socket_get_listener(r->bound);
    bool full = r->conns.n >= r->cfg.max_connections;
    if (full && !r->accepting_paused) {
        evconnlistener_disable(l);
        r->accepting_paused = true;
        log_warn("relay: %ld connections (the --max-connections cap): not accepting more", r->conns.n);
    } else if (!full && r->accepting_paused) {
        evconnlistener_enable(l);
        r->accepting_paused = false;
    }
}

static struct bufferevent *bev_cb(struct event_base *base, void *arg) {
    Relay *r = arg;
    struct bufferevent *bev;
    if (r->ssl) {
        SSL *ssl = SSL_new(r->ssl);
        if (!ssl) return NULL;
        bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    } else {
        bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!bev) return NULL;
    Conn *c = conns_add(&r->conns, bev);
    if (c && front_open(r, bev, c) < 0) {  // requests reach evhttp as they come (bodies buffered by it)
        log_warn("relay: out of memory for a connection's front");
    }
    if (c) {
        atomic_store(&r->st_conns, r->conns.n);
        listener_update(r);
    }
    return bev;
}

static void conn_release(Conn *c, void *ctx) {
    (void)ctx;
    front_close(c);
    RelayReq *q = c->user;
    if (q) {
        c->user = NULL;
        q->conn = NULL;
        if (q->state == RQ_DRAIN) relay_stream_abort(q);  // its drained callback will never come
    }
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    Relay *r = arg;
    int64_t now = time_mono_ms();
    fflush(r->log);
    // Slowloris: a connection gets header_timeout to deliver each header section
    // (from opening, or from its previous response); a body then goes by its
    // rate (front_sweep).
    int64_t hdr = (int64_t)r->cfg.header_timeout_s * 1000;
    conns_sweep(&r->conns, now, hdr, hdr);
    front_sweep(r, now);
    atomic_store(&r->st_conns, r->conns.n);
    listener_update(r);
    mp_expire(r, now);
    if (r->stopping && r->inflight == 0 && r->nwaiters == 0) event_base_loopexit(r->base, NULL);
    if (r->stopping && now > r->stop_deadline_ms) {
        log_warn("relay: %ld requests still in flight at the shutdown deadline; exiting", r->inflight);
        event_base_loopexit(r->base, NULL);
    }
}

static void do_stop(Relay *r) {
    if (r->stopping) return;
    r->stopping = true;
    r->stop_deadline_ms = time_mono_ms() + 30000;
    log_info("relay: stopping: no new connections, answering %ld long-polls, %ld requests in flight", r->nwaiters,
             r->inflight);
    if (r->bound) {
        evhttp_del_accept_socket(r->http, r->bound);
        r->bound = NULL;
    }
    longpoll_drain(r);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    do_stop(arg);
}

static void reload_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    Relay *r = arg;
    RelayKeys nk;
    PailErr err = {0};
    if (relay_keys_load(&nk, r->keys_path, &err) < 0) {
        log_error("relay: key reload failed, keeping the old keys: %s", err.msg);
        return;
    }
    relay_keys_free(&r->keys);
    r->keys = nk;
    log_info("relay: reloaded %d keys from %s", nk.n, r->keys_path);
}

static void poll_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    longpoll_tick(arg);
}

void relay_log_access(RelayReq *q, int status) {
    Relay *r = q->r;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    static __thread time_t last_s = -1;  // format the date once a second
    static __thread char t[40];
    if (ts.tv_sec != last_s) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
        last_s = ts.tv_sec;
    }
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    double ms = (double)((int64_t)mono.tv_sec * 1000000 + mono.tv_nsec / 1000 - q->t0_us) / 1000.0;
    if (ms < 0) ms = 0;
    const char *key = q->route.key[0] ? q->route.key : q->route.op == OP_LIST ? q->route.prefix : "-";
    // One fprintf: lines from a single thread, but keep them whole for readers.
    fprintf(r->log, "%s.%03ldZ %s %s %s %s%s %d %llu %.1f\n", t, ts.tv_nsec / 1000000, q->role[0] ? q->role : "-",
            q->method, relay_op_name(q->route.op), q->route.op == OP_LIST ? "prefix=" : "", key[0] ? key : "-",
            status, (unsigned long long)q->bytes, ms);
}

static int ssl_setup(Relay *r, PailErr *err) {
    return net_tls_server(r->cfg.cert, r->cfg.key, "--cert", "--key", &r->ssl, err);
}

static char *dup_or_null(const char *s) {
    return s ? strdup(s) : NULL;
}

int relay_open(Relay **out, const RelayConfig *cfg, PailErr *err) {
    *out = NULL;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, (void (*)(void))evthread_use_pthreads);
    Relay *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, PAIL_ERR_NOMEM, "relay: out of memory");
    r->cfg = *cfg;
    RelayConfig *c = &r->cfg;
    if (!c->listen) c->listen = "127.0.0.1:9000";
    if (!c->bucket) c->bucket = "pail";
    if (!c->max_connections) c->max_connections = 1024;
    if (!c->max_header_bytes) c->max_header_bytes = 16384;
    if (!c->max_body_bytes) c->max_body_bytes = 64u << 20;
    if (!c->stream_bytes) c->stream_bytes = 256u << 20;
    if (!c->idle_timeout_s) c->idle_timeout_s = 60;
    if (!c->header_timeout_s) c->header_timeout_s = 30;
    if (!c->threads) c->threads = 8;
    if (!c->max_wait_s) c->max_wait_s = 25;
    if (c->poll_interval_s <= 0) c->poll_interval_s = 1.0;
    if (!c->max_uploads) c->max_uploads = 1024;
    if (!c->max_uploads_per_key) c->max_uploads_per_key = 64;
    if (!c->trainer_uploads) c->trainer_uploads = 64;
    if (c->upload_expiry_s <= 0) c->upload_expiry_s = 900;
    if (c->upload_lifetime_s <= 0) c->upload_lifetime_s = 7200;
    if (!c->spool_bytes) c->spool_bytes = 16ull << 30;
    if (!c->spool_bytes_per_key) c->spool_bytes_per_key = 4ull << 30;
    if (!c->trainer_spool_bytes) c->trainer_spool_bytes = 4ull << 30;
    if (c->min_body_rate <= 0) c->min_body_rate = 32768;
    if (c->body_window_s <= 0) c->body_window_s = 20;
    r->log = c->access_log ? c->access_log : stdout;
    setvbuf(r->log, NULL, _IOLBF, 0);  // one access-log line is visible as soon as its request ends (tail -f)
    r->listen = strdup(c->listen);
    r->bucket = strdup(c->bucket);
    r->keys_path = dup_or_null(c->keys_path);
    c->listen = r->listen;
    c->bucket = r->bucket;
    c->keys_path = r->keys_path;
    if (!r->listen || !r->bucket || conns_init(&r->conns, conn_release, NULL, r) < 0) {
        relay_close(r);
        return err_set(err, PAIL_ERR_NOMEM, "relay: out of memory");
    }
    char host[256];
    int port = 0;
    int rc = net_split_listen(c->listen, "--listen", host, sizeof host, &port, err);
    if (rc == 0 && !c->keys_path) rc = err_set(err, PAIL_ERR_INVALID, "relay: --keys FILE is required");
    if (rc == 0 && !!c->root == !!c->upstream)
        rc = err_set(err, PAIL_ERR_INVALID, "relay: give exactly one of --root DIR and --upstream s3://bucket/prefix");
    if (rc == 0 && c->http && !net_is_loopback(host))
        rc = err_set(err, PAIL_ERR_INVALID,
                     "relay: --http (plain HTTP) is allowed on a loopback address only, not '%s'; use --cert/--key", host);
    if (rc == 0 && !c->http && (!c->cert || !c->key))
        rc = err_set(err, PAIL_ERR_INVALID, "relay: --cert FILE and --key FILE are required (or --http on loopback)");
    if (rc == 0 && c->trainer_uploads >= c->max_uploads)
        rc = err_set(err, PAIL_ERR_INVALID, "relay: --trainer-uploads %d must be below --max-uploads %d",
                     c->trainer_uploads, c->max_uploads);
    if (rc == 0 && c->trainer_spool_bytes >= c->spool_bytes)
        rc = err_set(err, PAIL_ERR_INVALID, "relay: --trainer-spool-bytes %llu must be below --spool-bytes %llu",
                     (unsigned long long)c->trainer_spool_bytes, (unsigned long long)c->spool_bytes);
    if (rc == 0) rc = relay_keys_load(&r->keys, c->keys_path, err);
    if (rc == 0 && !c->http) rc = ssl_setup(r, err);
    if (rc == 0) {
        if (c->root) {
            char real[4096];
            if (!realpath(c->root, real)) rc = err_set(err, PAIL_ERR_IO, "--root %s: %s", c->root, strerror(errno));
            else if ((r->store_url = malloc(strlen(real) + 8))) sprintf(r->store_url, "file://%s", real);
        } else {
            r->store_url = strdup(c->upstream);
        }
        if (rc == 0 && !r->store_url) rc = err_set(err, PAIL_ERR_NOMEM, "relay: out of memory");
    }
    if (rc == 0) {
        if (c->spool) {
            r->spool = strdup(c->spool);
            if (fs_mkdirs(r->spool, err) < 0) rc = -1;
        } else {
            char tmpl[] = "/tmp/grpo-relay-spool-XXXXXX";
            if (!mkdtemp(tmpl)) rc = err_set(err, PAIL_ERR_IO, "relay: cannot create a spool folder in /tmp: %s", strerror(errno));
            else {
                r->spool = strdup(tmpl);
                r->spool_owned = true;
            }
        }
    }
    if (rc == 0 && cache_init(&r->cache, c->cache_bytes) < 0) rc = err_set(err, PAIL_ERR_NOMEM, "relay: out of memory");
    if (rc == 0) {
        // The changelist folds evhttp's per-request enable/disable of read and
        // write into at most one epoll_ctl per descriptor and loop turn.
        struct event_config *ec = event_config_new();
        if (ec) event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
        r->base = ec ? event_base_new_with_config(ec) : NULL;
        if (ec) event_config_free(ec);
        if (!r->base) rc = err_set(err, PAIL_ERR_IO, "relay: event_base_new failed");
    }
    if (rc == 0) rc = pool_start(&r->pool, r->base, c->threads, r->store_url, c->root ? NULL : c->upstream_opt, err);
    if (rc == 0) rc = relay_list_start(r, err);
    if (rc == 0) {
        r->http = evhttp_new(r->base);
        evhttp_set_max_headers_size(r->http, c->max_header_bytes);
        // PUT and UploadPart bodies stream to the spool through the front; evhttp
        // buffers only the small ones (CompleteMultipartUpload's XML).
        evhttp_set_max_body_size(r->http, (ev_ssize_t)(c->max_body_bytes < (2u << 20) ? c->max_body_bytes : 2u << 20));
        evhttp_set_timeout(r->http, c->idle_timeout_s);
        evhttp_set_allowed_methods(r->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_POST |
                                                EVHTTP_REQ_DELETE);
        evhttp_set_gencb(r->http, relay_handle, r);
        evhttp_set_bevcb(r->http, bev_cb, r);
        r->bound = evhttp_bind_socket_with_handle(r->http, host, (ev_uint16_t)port);
        if (!r->bound) rc = err_set(err, PAIL_ERR_IO, "relay: cannot listen on %s: %s", c->listen, strerror(errno));
    }
    if (rc == 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        evutil_socket_t fd = evhttp_bound_socket_get_fd(r->bound);
        // Accepted sockets inherit it: small responses go out at once instead of
        // waiting ~40 ms for a delayed ACK (Nagle), which would cap keep-alive rates.
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            r->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
        struct timeval sweep = {0, SWEEP_MS * 1000};
        struct timeval poll = {(long)c->poll_interval_s, (long)((c->poll_interval_s - (long)c->poll_interval_s) * 1e6)};
        r->sweep_ev = event_new(r->base, -1, EV_PERSIST, sweep_cb, r);
        r->poll_ev = event_new(r->base, -1, EV_PERSIST, poll_cb, r);
        r->stop_ev = event_new(r->base, -1, 0, stop_cb, r);
        r->reload_ev = event_new(r->base, -1, 0, reload_cb, r);
        event_add(r->sweep_ev, &sweep);
        event_add(r->poll_ev, &poll);
        if (c->signals) {
            signal(SIGPIPE, SIG_IGN);
            r->sig_term = evsignal_new(r->base, SIGTERM, stop_cb, r);
            r->sig_int = evsignal_new(r->base, SIGINT, stop_cb, r);
            r->sig_hup = evsignal_new(r->base, SIGHUP, reload_cb, r);
            event_add(r->sig_term, NULL);
            event_add(r->sig_int, NULL);
            event_add(r->sig_hup, NULL);
        }
    }
    if (rc < 0) {
        relay_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

int relay_port(const Relay *r) {
    return r->port;
}

int relay_run(Relay *r, PailErr *err) {
    if (event_base_dispatch(r->base) < 0) return err_set(err, PAIL_ERR_IO, "relay: event loop failed");
    return 0;
}

void relay_stop(Relay *r) {
    event_active(r->stop_ev, EV_READ, 0);
}

void relay_reload_keys(Relay *r) {
    event_active(r->reload_ev, EV_READ, 0);
}

void relay_stats(const Relay *r, RelayStats *out) {
    memset(out, 0, sizeof *out);
    out->connections = atomic_load(&((Relay *)r)->st_conns);
    out->requests = atomic_load(&((Relay *)r)->st_requests);
    out->backend_gets = atomic_load(&((Relay *)r)->st_backend_gets);
    out->cache_hits = r->cache.hits;
    out->cache_used = r->cache.used;
    out->waiters = r->nwaiters;
}

static void rm_tree(const char *path) {
    char cmd[4200];
    // The spool holds only our own part files: a plain recursive removal.
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(cmd, sizeof cmd, "%s/%s", path, e->d_name);
        rm_tree(cmd);
    }
    closedir(d);
    rmdir(path);
}

void relay_close(Relay *r) {
    if (!r) return;
    if (r->pool.threads) pool_stop(&r->pool);
    relay_list_stop(r);
    mp_free_all(r);
    struct event *evs[] = {r->sweep_ev, r->poll_ev, r->stop_ev, r->reload_ev, r->sig_term, r->sig_int, r->sig_hup};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i]) event_free(evs[i]);
    if (r->http) evhttp_free(r->http);
    conns_free(&r->conns);
    if (r->base) event_base_free(r->base);
    if (r->cache.buckets) cache_free(&r->cache);
    if (r->ssl) SSL_CTX_free(r->ssl);
    relay_keys_free(&r->keys);
    if (r->spool_owned && r->spool) rm_tree(r->spool);
    free(r->spool);
    free(r->store_url);
    free(r->listen);
    free(r->bucket);
    free(r->keys_path);
    if (r->log) fflush(r->log);
    free(r);
}
