// The relay's front: it sees each connection's input before evhttp does (an
// evbuffer callback on the bufferevent's input: new bytes move to the front's
// queue, and what evhttp should parse goes back), because evhttp buffers a
// whole body before it calls the handler. The front reads each request's
// header section itself; a request with
// a body is routed, authenticated (SigV4, the header signature) and authorized
// before any body byte is read. A refusal goes to evhttp as the head with
// Content-Length: 0 and the handler answers it (Connection: close) while the
// front drops the body. PUT and UploadPart bodies stream to a spool file (sha256
// and md5 as they arrive, counted against the spool quotas) and evhttp gets the
// head once the body is in; small bodies (CompleteMultipartUpload's XML) pass
// to evhttp. It also times bodies: --min-body-rate over each --body-window.
// Not here: what the handler does with a verdict (handler.c).
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <openssl/evp.h>
#include "core/log.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "relay/relay_int.h"

#define FRONT_MAX_HEADERS 128
#define FRONT_SMALL_BODY (2u << 20)  // bodies evhttp may buffer (a 10,000-part completion is ~1 MiB)

typedef enum { FR_HEAD,
               FR_SPOOL,
               FR_PASS,
               FR_WAIT,
               FR_DISCARD } FrontState;
enum { CH_SIZE,
       CH_DATA,
       CH_CRLF,
       CH_TRAILER };  // where a chunked body is

struct Front {
    Relay *r;
    struct bufferevent *bev;  // the connection's (evhttp's)
    struct evbuffer *input;   // its input: what evhttp parses
    struct evbuffer *inq;     // bytes read, not yet through the front
    struct evbuffer_cb_entry *cbe;
    bool running;  // inside the front: its own changes to input are not new bytes
    Conn *conn;    // borrowed; the front lives as long as it
    Front *prev, *next;
    FrontState state;
    Buf head;              // the header section so far (FR_HEAD)
    size_t scanned;        // of it, searched for its end
    Buf rewritten;         // the head evhttp gets (Content-Length: 0) once the body is spooled
    uint64_t body_left;    // FR_SPOOL, FR_PASS (of a chunked body: of its current chunk)
    bool chunked;          // FR_SPOOL: Transfer-Encoding: chunked (as aws-cli sends aws-chunked bodies)
    int chunk_state;       // CH_*
    uint64_t written;      // body bytes spooled
    int64_t win_start_ms;  // the current --body-window
    uint64_t win_bytes;    // body bytes in it
    int fd;                // the spool file (FR_SPOOL)
    Sha256 *sha;
    EVP_MD_CTX *md5;
    SpoolHold hold;  // the body's bytes against the spool quotas
    bool have_verdict;
    FrontVerdict v;
};

static void drop_body(Front *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->v.path[0]) unlink(f->v.path);
    f->v.path[0] = 0;
    if (f->sha) {
        char hex[65];
        sha256_final_hex(f->sha, hex);
        f->sha = NULL;
    }
    if (f->md5) EVP_MD_CTX_free(f->md5);
    f->md5 = NULL;
    spool_release(f->r, &f->hold);
}

static void window_start(Front *f) {
    f->win_start_ms = time_mono_ms();
    f->win_bytes = 0;
}

// ---- the header section ----

typedef struct {
    char *method, *uri, *version;
    SigV4Header h[FRONT_MAX_HEADERS];
    int n;
} Head;

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    return s;
}

// Splits a copy of the header section in place. -1 when it is not one the front
// understands (evhttp then answers it, or the connection is dropped).
static int head_parse(char *s, Head *h) {
    memset(h, 0, sizeof *h);
    char *save = NULL;
    char *line = strtok_r(s, "\n", &save);
    if (!line) return -1;
    size_t l = strlen(line);
    if (l && line[l - 1] == '\r') line[--l] = 0;
    h->method = line;
    char *sp = strchr(line, ' ');
    if (!sp) return -1;
    *sp = 0;
    h->uri = sp + 1;
    sp = strchr(h->uri, ' ');
    if (!sp) return -1;
    *sp = 0;
    h->version = sp + 1;
    if (strncmp(h->version, "HTTP/1.", 7) || !*h->uri) return -1;
    while ((line = strtok_r(NULL, "\n", &save))) {
        l = strlen(line);
        if (l && line[l - 1] == '\r') line[--l] = 0;
        if (!l) break;
        if (line[0] == ' ' || line[0] == '\t' || h->n == FRONT_MAX_HEADERS) return -1;  // folded, or too many
        char *colon = strchr(line, ':');
        if (!colon || colon == line) return -1;
        *colon = 0;
        if (strpbrk(line, " \t")) return -1;
        h->h[h->n++] = (SigV4Header){line, trim(colon + 1)};
    }
    return 0;
}

// The head with Content-Length: 0 (and without Transfer-Encoding or Expect).
static void head_rewrite(Front *f, const Head *h) {
    Buf *b = &f->rewritten;
    buf_reset(b);
    buf_printf(b, "%s %s %s\r\n", h->method, h->uri, h->version);
    for (int i = 0; i < h->n; i++) {
        const char *nm = h->h[i].name;
        if (!strcasecmp(nm, "content-length") || !strcasecmp(nm, "transfer-encoding") || !strcasecmp(nm, "expect"))
            continue;
        buf_printf(b, "%s: %s\r\n", nm, h->h[i].value);
    }
    buf_printf(b, "Content-Length: 0\r\n\r\n");
}

// Hands the rewritten head to evhttp with a refusal for the handler to send;
// the rest of the connection's input is dropped.
static void refuse(Front *f, struct evbuffer *dst, int status, const char *code, const char *msg) {
    drop_body(f);
    f->v.refused = true;
    f->v.admitted = false;
    f->v.status = status;
    snprintf(f->v.code, sizeof f->v.code, "%s", code);
    snprintf(f->v.msg, sizeof f->v.msg, "%s", msg);
    f->have_verdict = true;
    evbuffer_add(dst, f->rewritten.data, f->rewritten.len);
    f->state = FR_DISCARD;
}

static int parse_length(const char *s, uint64_t *out) {
    if (!*s || strlen(s) > 19) return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static bool access_ok(const RelayKey *who, const RelayRoute *rt, char *msg, size_t cap) {
    const char *why = "not allowed";
    bool ok;
    switch (rt->op) {
    case OP_LIST: ok = relay_policy_allows_list(who->prefix, rt->prefix); break;
    case OP_GET:
    case OP_HEAD: ok = relay_policy_allows(who->role, who->prefix, ACCESS_READ, rt->key, &why); break;
    case OP_DELETE: ok = relay_policy_allows(who->role, who->prefix, ACCESS_DELETE, rt->key, &why); break;
    case OP_PUT:
    case OP_MP_CREATE:
    case OP_MP_PART:
    case OP_MP_COMPLETE:
    case OP_MP_ABORT: ok = relay_policy_allows(who->role, who->prefix, ACCESS_WRITE, rt->key, &why); break;
    default: ok = true;
    }
    if (!ok)
        snprintf(msg, cap, "Access Denied: %s (key id %s, role %s, prefix %.300s)", why, who->id,
                 relay_role_name(who->role), who->prefix[0] ? who->prefix : "none");
    return ok;
}

// A whole header section is in f->head: decide what becomes of the request.
static void head_done(Front *f, struct evbuffer *dst) {
    Relay *r = f->r;
    char *copy = malloc(f->head.len + 1);
    Head h;
    if (!copy || (memcpy(copy, f->head.data, f->head.len), copy[f->head.len] = 0, head_parse(copy, &h) < 0)) {
        evbuffer_add(dst, f->head.data, f->head.len);  // evhttp answers what it makes of it; no body follows
        f->state = FR_DISCARD;
        free(copy);
        return;
    }
    const char *cl = NULL, *te = NULL, *expect = NULL;
    int ncl = 0;
    for (int i = 0; i < h.n; i++) {
        if (!strcasecmp(h.h[i].name, "content-length")) cl = h.h[i].value, ncl++;
        else if (!strcasecmp(h.h[i].name, "transfer-encoding")) te = h.h[i].value;
        else if (!strcasecmp(h.h[i].name, "expect")) expect = h.h[i].value;
    }
    uint64_t len = 0;
    bool bad_len = ncl > 1 || (cl && parse_length(cl, &len) < 0);
    if (!te && !bad_len && len == 0) {  // no body: evhttp and the handler as before
        evbuffer_add(dst, f->head.data, f->head.len);
        f->state = FR_WAIT;
        free(copy);
        return;
    }
    // A body follows. From here the body rate governs the connection, not the header timeout.
    if (f->conn) f->conn->busy = true;
    memset(&f->v, 0, sizeof f->v);
    head_rewrite(f, &h);
    char msg[600];
    RelayRoute *rt = calloc(1, sizeof *rt);
    RelayFail fail = {0};
    PailErr err = {0};
    if (!rt) {
        refuse(f, dst, 503, "SlowDown", "The relay is out of memory; retry.");
        free(copy);
        return;
    }
    int route_rc = relay_route_parse(h.method, h.uri, relay_header(h.h, h.n, "host"), r->bucket, rt, &fail, &err);
    const RelayKey *who = NULL;
    const char *qm = strchr(h.uri, '?');
    RelayAuthIn ai = {.method = h.method, .path = rt->path[0] ? rt->path : "/", .query = qm ? qm + 1 : NULL, .headers = h.h, .nheaders = h.n, .tls = r->ssl != NULL, .now = time_unix_s()};
    RelayFail afail = {0};
    PailErr aerr = {0};
    bool is_put = route_rc == 0 && (rt->op == OP_PUT || rt->op == OP_MP_PART);
    bool chunked = te && !strcasecmp(te, "chunked");
    // A chunked body's length is unknown: its quota takes what x-amz-decoded-content-length
    // (aws-chunked) says plus the framing, or --max-body-bytes.
    const char *dl = relay_header(h.h, h.n, "x-amz-decoded-content-length");
    uint64_t decoded = 0;
    if (chunked) {
        len = dl && parse_length(dl, &decoded) == 0 ? decoded + decoded / 1024 + 65536 : r->cfg.max_body_bytes;
        if (len > r->cfg.max_body_bytes) len = r->cfg.max_body_bytes;
    }
    if (te && (!chunked || !is_put || cl))
        refuse(f, dst, 411, "MissingContentLength",
               "Transfer-Encoding is supported by the relay for PUT bodies only, as chunked without Content-Length; "
               "send the body with a Content-Length.");
    else if (bad_len)
        refuse(f, dst, 400, "InvalidArgument", "Content-Length is malformed or repeated.");
    else if (route_rc < 0 && !rt->path[0])
        refuse(f, dst, fail.status, fail.code, err.msg);
    else if (route_rc == 0 && rt->op == OP_HEALTH)
        refuse(f, dst, 400, "InvalidRequest", "GET /-/health takes no body.");
    else if (relay_auth_verify(&r->keys, &ai, &who, f->v.payload_hash, &afail, &aerr) < 0)
        refuse(f, dst, afail.status, afail.code, aerr.msg);
    else if (route_rc < 0)
        refuse(f, dst, fail.status, fail.code, err.msg);
    else if (!access_ok(who, rt, msg, sizeof msg))
        refuse(f, dst, 403, "AccessDenied", msg);
    else if (!is_put && len > FRONT_SMALL_BODY) {
        snprintf(msg, sizeof msg, "A %s body is at most %u bytes.", relay_op_name(rt->op), FRONT_SMALL_BODY);
        refuse(f, dst, 400, "EntityTooLarge", msg);
    } else if (!is_put) {  // small: evhttp reads it, the handler authenticates the unchanged head again
        evbuffer_add(dst, f->head.data, f->head.len);
        f->body_left = len;
        f->state = FR_PASS;
        window_start(f);
    } else if (len > r->cfg.max_body_bytes) {
        snprintf(msg, sizeof msg, "The body (%" PRIu64 " bytes) is larger than this relay takes (--max-body-bytes "
                                  "%" PRIu64 "); use multipart with smaller parts.",
                 len, r->cfg.max_body_bytes);
        refuse(f, dst, 400, "EntityTooLarge", msg);
    } else if (rt->op == OP_MP_PART && mp_part_admit(r, rt, who->id, &fail, msg, sizeof msg) < 0) {
        refuse(f, dst, fail.status, fail.code, msg);
    } else if (spool_admit(r, &f->hold, who->id, who->role, len, &fail, msg, sizeof msg) < 0) {
        refuse(f, dst, fail.status, fail.code, msg);
    } else {
        snprintf(f->v.path, sizeof f->v.path, "%s/body-%016" PRIx64, r->spool, ++r->spool_seq);
        f->fd = open(f->v.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        // The sha256 only checks a signed payload hash: UNSIGNED-PAYLOAD (pail's tools over
        // https) skips that pass over every byte (a second of CPU a GB).
        bool signed_hash = strlen(f->v.payload_hash) == 64;
        f->sha = signed_hash ? sha256_new() : NULL;
        f->md5 = EVP_MD_CTX_new();
        if (f->fd < 0 || (signed_hash && !f->sha) || !f->md5 || EVP_DigestInit_ex(f->md5, EVP_md5(), NULL) != 1) {
            log_warn("relay: spool %s: %s", f->v.path, f->fd < 0 ? strerror(errno) : "out of memory");
            if (f->fd < 0) f->v.path[0] = 0;
            refuse(f, dst, 503, "SlowDown", "The relay cannot spool the body; retry later.");
        } else {
            snprintf(f->v.keyid, sizeof f->v.keyid, "%s", who->id);
            snprintf(f->v.prefix, sizeof f->v.prefix, "%s", who->prefix);
            f->v.role = who->role;
            f->v.len = len;
            f->body_left = chunked ? 0 : len;
            f->chunked = chunked;
            f->chunk_state = CH_SIZE;
            f->written = 0;
            f->state = FR_SPOOL;
            window_start(f);
            if (expect && !strcasecmp(expect, "100-continue") && !strcmp(h.version, "HTTP/1.1")) {
                // evhttp has writing off while it reads, and its write callback
                // would take this for the end of a response: none until it answers.
                bufferevent_data_cb rcb, wcb;
                bufferevent_event_cb ecb;
                void *arg;
                bufferevent_getcb(f->bev, &rcb, &wcb, &ecb, &arg);
                bufferevent_setcb(f->bev, rcb, NULL, ecb, arg);
                bufferevent_write(f->bev, "HTTP/1.1 100 Continue\r\n\r\n", 25);
                bufferevent_enable(f->bev, EV_WRITE);
            }
        }
    }
    if (who && f->v.refused) {  // the access log names who was refused
        snprintf(f->v.keyid, sizeof f->v.keyid, "%s", who->id);
        f->v.role = who->role;
    }
    free(rt);
    free(copy);
}

static enum bufferevent_filter_result head_in(Front *f, struct evbuffer *src, struct evbuffer *dst) {
    if (!f->head.len) {  // blank lines before a request line are ignored (RFC 9112 2.2)
        struct evbuffer_ptr p;
        size_t skip = 0;
        char c;
        while (evbuffer_get_length(src) > skip && evbuffer_ptr_set(src, &p, skip, EVBUFFER_PTR_SET) == 0 &&
               evbuffer_copyout_from(src, &p, &c, 1) == 1 && (c == '\r' || c == '\n'))
            skip++;
        evbuffer_drain(src, skip);
    }
    size_t avail = evbuffer_get_length(src), cap = (size_t)f->r->cfg.max_header_bytes + 4;
    if (!avail) return BEV_OK;
    size_t old = f->head.len, n = avail < cap - old ? avail : cap - old;
    if (buf_reserve(&f->head, n + 1) < 0) return BEV_ERROR;
    evbuffer_copyout(src, f->head.data + old, n);
    f->head.len = old + n;
    const uint8_t *d = f->head.data;
    size_t end = 0;
    for (size_t i = f->scanned; i < f->head.len && !end; i++) {
        if (d[i] != '\n') continue;
        if (i + 1 < f->head.len && d[i + 1] == '\n') end = i + 2;
        else if (i + 2 < f->head.len && d[i + 1] == '\r' && d[i + 2] == '\n') end = i + 3;
    }
    if (!end) {
        evbuffer_drain(src, n);
        f->scanned = f->head.len >= 2 ? f->head.len - 2 : 0;
        if (f->head.len >= cap) {  // too large: evhttp refuses it (--max-header-bytes)
            evbuffer_add(dst, f->head.data, f->head.len);
            f->state = FR_DISCARD;
            buf_reset(&f->head);
            f->scanned = 0;
        }
        return BEV_OK;
    }
    evbuffer_drain(src, end - old);
    f->head.len = end;
    head_done(f, dst);
    buf_reset(&f->head);
    f->scanned = 0;
    return BEV_OK;
}

// ---- the body ----

// Writes n bytes of src (drained) to the spool file, hashing them. false after refusing.
static bool spool_write(Front *f, struct evbuffer *src, size_t n, struct evbuffer *dst) {
    Relay *r = f->r;
    if (f->written + n > r->cfg.max_body_bytes) {
        evbuffer_drain(src, evbuffer_get_length(src));
        refuse(f, dst, 400, "EntityTooLarge", "The chunked body is larger than this relay takes (--max-body-bytes).");
        return false;
    }
    while (n) {
        struct evbuffer_iovec v[16];
        int nv = evbuffer_peek(src, (ev_ssize_t)n, NULL, v, 16);
        size_t took = 0;
        for (int i = 0; i < nv && i < 16 && took < n; i++) {
            size_t l = v[i].iov_len < n - took ? v[i].iov_len : n - took;
            for (size_t off = 0; off < l;) {
                ssize_t w = write(f->fd, (const char *)v[i].iov_base + off, l - off);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) {
                    log_warn("relay: spool %s: %s", f->v.path, w < 0 ? strerror(errno) : "short write");
                    evbuffer_drain(src, evbuffer_get_length(src));
                    refuse(f, dst, 503, "SlowDown", "The relay's spool is full or failing; retry later.");
                    return false;
                }
                off += (size_t)w;
            }
            if (f->sha) sha256_update(f->sha, v[i].iov_base, l);
            EVP_DigestUpdate(f->md5, v[i].iov_base, l);
            took += l;
        }
        if (!took) break;
        evbuffer_drain(src, took);
        n -= took;
        f->written += took;
        f->win_bytes += took;
    }
    if (f->written > f->hold.bytes) spool_hold_add(r, &f->hold, (int64_t)(f->written - f->hold.bytes));
    return true;
}

// The whole body is spooled: evhttp gets the head, the handler the verdict.
static void spool_finish(Front *f, struct evbuffer *dst) {
    uint8_t md[16];
    unsigned ml = 0;
    EVP_DigestFinal_ex(f->md5, md, &ml);
    EVP_MD_CTX_free(f->md5);
    f->md5 = NULL;
    hex_encode(md, 16, f->v.md5);
    if (f->sha) sha256_final_hex(f->sha, f->v.sha256);
    else f->v.sha256[0] = 0;  // no signed hash to check it against
    f->sha = NULL;
    if (close(f->fd) < 0) {
        f->fd = -1;
        log_warn("relay: spool %s: %s", f->v.path, strerror(errno));
        refuse(f, dst, 503, "SlowDown", "The relay's spool is full or failing; retry later.");
        return;
    }
    f->fd = -1;
    f->v.len = f->written;
    f->v.admitted = true;
    f->have_verdict = true;
    evbuffer_add(dst, f->rewritten.data, f->rewritten.len);
    f->state = FR_WAIT;
}

// One line of a chunked body's framing into line (NUL-terminated, CRLF or LF
// removed): 1, 0 (not all here yet), -1 (longer than cap).
static int chunk_line(struct evbuffer *src, char *line, size_t cap) {
    size_t eol = 0;
    struct evbuffer_ptr p = evbuffer_search_eol(src, NULL, &eol, EVBUFFER_EOL_CRLF);
    if (p.pos < 0) return evbuffer_get_length(src) >= cap ? -1 : 0;
    if ((size_t)p.pos >= cap) return -1;
    evbuffer_remove(src, line, (size_t)p.pos);
    line[p.pos] = 0;
    evbuffer_drain(src, eol);
    return 1;
}

static enum bufferevent_filter_result spool_in(Front *f, struct evbuffer *src, struct evbuffer *dst) {
    if (!f->chunked) {
        size_t avail = evbuffer_get_length(src), n = avail < f->body_left ? avail : (size_t)f->body_left;
        if (!spool_write(f, src, n, dst)) return BEV_OK;
        f->body_left -= n;
        if (!f->body_left) spool_finish(f, dst);
        return BEV_OK;
    }
    char line[256];
    while (f->state == FR_SPOOL && evbuffer_get_length(src)) {
        int rc = 1;
        if (f->chunk_state == CH_DATA) {
            size_t avail = evbuffer_get_length(src), n = avail < f->body_left ? avail : (size_t)f->body_left;
            if (!spool_write(f, src, n, dst)) return BEV_OK;
            f->body_left -= n;
            if (!f->body_left) f->chunk_state = CH_CRLF;
            continue;
        }
        rc = chunk_line(src, line, sizeof line);
        if (rc == 0) break;
        if (rc < 0) goto bad;
        if (f->chunk_state == CH_SIZE) {
            char *end;
            errno = 0;
            unsigned long long sz = strtoull(line, &end, 16);
            if (end == line || errno || (*end && *end != ';' && *end != ' ')) goto bad;
            f->body_left = sz;
            f->chunk_state = sz ? CH_DATA : CH_TRAILER;
        } else if (f->chunk_state == CH_CRLF) {
            if (line[0]) goto bad;
            f->chunk_state = CH_SIZE;
        } else if (!line[0]) {  // CH_TRAILER: the empty line ends the body
            spool_finish(f, dst);
        }
    }
    return BEV_OK;
bad:
    evbuffer_drain(src, evbuffer_get_length(src));
    refuse(f, dst, 400, "IncompleteBody", "The chunked body's framing is malformed.");
    return BEV_OK;
}

static enum bufferevent_filter_result front_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t lim,
                                               enum bufferevent_flush_mode mode, void *ctx) {
    (void)lim, (void)mode;
    Front *f = ctx;
    size_t avail = evbuffer_get_length(src);
    switch (f->state) {
    case FR_WAIT: return BEV_NEED_MORE;  // evhttp has this request; the next waits for its answer
    case FR_DISCARD: evbuffer_drain(src, avail); return BEV_OK;
    case FR_PASS: {
        size_t n = avail < f->body_left ? avail : (size_t)f->body_left;
        evbuffer_remove_buffer(src, dst, n);
        f->body_left -= n;
        f->win_bytes += n;
        if (!f->body_left) f->state = FR_WAIT;
        return BEV_OK;
    }
    case FR_SPOOL: return spool_in(f, src, dst);
    case FR_HEAD: return head_in(f, src, dst);
    }
    return BEV_ERROR;
}

// ---- the relay's side ----

static void front_run(Front *f) {
    f->running = true;
    while (evbuffer_get_length(f->inq)) {
        size_t before = evbuffer_get_length(f->inq);
        FrontState st = f->state;
        enum bufferevent_filter_result res = front_in(f->inq, f->input, -1, BEV_NORMAL, f);
        if (res == BEV_ERROR) {
            log_warn("relay: out of memory reading a request head: connection closed");
            f->state = FR_DISCARD;
            evbuffer_drain(f->inq, evbuffer_get_length(f->inq));
            if (f->conn) conns_close(&f->r->conns, f->conn);
            break;
        }
        if (res == BEV_NEED_MORE || (evbuffer_get_length(f->inq) == before && f->state == st)) break;
    }
    f->running = false;
}

// New bytes in the connection's input: they go through the front first.
static void input_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    Front *f = arg;
    if (!info->n_added || f->running) return;
    f->running = true;
    size_t len = evbuffer_get_length(buf), fresh = info->n_added < len ? info->n_added : len;
    if (fresh < len) {  // bytes ahead of the new ones are evhttp's already
        struct evbuffer *keep = evbuffer_new();
        if (keep) {
            evbuffer_remove_buffer(buf, keep, len - fresh);
            evbuffer_add_buffer(f->inq, buf);
            evbuffer_add_buffer(buf, keep);
            evbuffer_free(keep);
        }
    } else {
        evbuffer_add_buffer(f->inq, buf);
    }
    front_run(f);
}

int front_open(Relay *r, struct bufferevent *bev, Conn *c) {
    Front *f = calloc(1, sizeof *f);
    if (!f) return -1;
    f->r = r;
    f->bev = bev;
    f->conn = c;
    f->fd = -1;
    f->input = bufferevent_get_input(bev);
    f->inq = evbuffer_new();
    f->cbe = f->inq ? evbuffer_add_cb(f->input, input_cb, f) : NULL;
    if (!f->cbe) {
        if (f->inq) evbuffer_free(f->inq);
        free(f);
        return -1;
    }
    f->next = r->fronts;
    if (r->fronts) r->fronts->prev = f;
    r->fronts = f;
    c->ext = f;
    return 0;
}

void front_close(Conn *c) {
    Front *f = c->ext;
    if (!f) return;
    Relay *r = f->r;
    c->ext = NULL;
    if (f->prev) f->prev->next = f->next;
    else r->fronts = f->next;
    if (f->next) f->next->prev = f->prev;
    evbuffer_remove_cb_entry(f->input, f->cbe);
    drop_body(f);
    evbuffer_free(f->inq);
    buf_free(&f->head);
    buf_free(&f->rewritten);
    free(f);
}

bool front_take(Conn *c, FrontVerdict *out, SpoolHold *hold) {
    Front *f = c ? c->ext : NULL;
    if (!f) return false;
    bool had = f->have_verdict;
    if (had) {
        *out = f->v;
        uint64_t bytes = f->hold.bytes;
        spool_release(f->r, &f->hold);
        if (bytes) {
            spool_hold_init(hold, f->v.keyid, f->v.role);
            spool_hold_add(f->r, hold, (int64_t)bytes);
        }
        f->v.path[0] = 0;  // the request's now
        f->have_verdict = false;
    }
    if (f->state == FR_WAIT) {
        f->state = FR_HEAD;
        // A pipelined request: evhttp parses it once it has answered this one.
        // A socket bufferevent keeps its input's end frozen outside its reads.
        if (evbuffer_get_length(f->inq)) {
            bool plain = !f->r->ssl;
            if (plain) evbuffer_unfreeze(f->input, 0);
            front_run(f);
            if (plain) evbuffer_freeze(f->input, 0);
        }
    }
    return had;
}

void front_sweep(Relay *r, int64_t now_ms) {
    int64_t win = (int64_t)(r->cfg.body_window_s * 1000);
    for (Front *f = r->fronts; f; f = f->next) {
        if (f->state != FR_SPOOL && f->state != FR_PASS) continue;
        int64_t dt = now_ms - f->win_start_ms;
        if (dt < win) continue;
        double rate = (double)f->win_bytes * 1000.0 / (double)dt;
        if (rate >= r->cfg.min_body_rate) {
            window_start(f);
            continue;
        }
        log_warn("relay: a request body arrived at %.0f B/s over the last %.1f s, below --min-body-rate %.0f: "
                 "connection closed (%" PRIu64 " bytes still to come)",
                 rate, (double)dt / 1000, r->cfg.min_body_rate,
                 f->body_left);
        drop_body(f);
        f->state = FR_DISCARD;
        if (f->conn) conns_close(&r->conns, f->conn);
    }
}
