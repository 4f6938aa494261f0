// What --serve follows of each connection below evhttp (see serve_conn.h).
#include "rollout/serve_conn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

// Overwrites n bytes of in from offset pos (evhttp has not read them yet).
static void overwrite(struct evbuffer *in, size_t pos, const char *bytes, size_t n) {
    struct evbuffer_ptr at;
    struct evbuffer_iovec v[8];
    if (!n || evbuffer_ptr_set(in, &at, pos, EVBUFFER_PTR_SET) < 0) return;
    int nv = evbuffer_peek(in, (ev_ssize_t)n, &at, v, 8);
    size_t w = 0;
    for (int i = 0; i < nv && i < 8 && w < n; i++)
        for (size_t j = 0; j < v[i].iov_len && w < n; j++) ((char *)v[i].iov_base)[j] = bytes[w++];
}

// The bytes [from, to) arrived after a chunk-size line made the last chunk:
// their first ones become the CRLF that ends its (empty) trailer.
static void blank_pending(ServeConn *sc, struct evbuffer *in, size_t from, size_t to) {
    for (; sc->blank_left && from < to; from++, sc->blank_left--) overwrite(in, from, &"\r\n"[2 - sc->blank_left], 1);
}

// What conn_input does at a hit, in the bytes evhttp has not read: a Content-Length
// header over the limit or not a number is renamed (evhttp then reads no body and
// hands us the request to refuse); a chunk-size line taking a chunked body over the
// limit becomes the last chunk "0" (spaces after it) and the bytes after it the
// CRLF that ends the body, so evhttp hands us the request before its own limit.
static void frame_hit(ServeConn *sc, struct evbuffer *in, size_t start, const OpenAIFrameHit *hit) {
    if (hit->kind == OPENAI_HIT_TOO_LARGE || hit->kind == OPENAI_HIT_BAD_LENGTH) {
        bool bad = hit->kind == OPENAI_HIT_BAD_LENGTH;
        overwrite(in, start, bad ? "x-pail-bad-len" : "x-pail-too-big", 14);  // as long as "content-length"
        if (bad) sc->bad_length = true;
        else sc->too_large = hit->declared;
        return;
    }
    size_t L = hit->line_len;  // the chunk-size line, its newline included
    char cr = 0;
    struct evbuffer_ptr at;
    if (L >= 2 && evbuffer_ptr_set(in, &at, start + L - 2, EVBUFFER_PTR_SET) == 0) evbuffer_copyout_from(in, &at, &cr, 1);
    static const char spaces[64] = "                                                               ";
    overwrite(in, start, "0", 1);
    for (size_t pos = start + 1, end = start + L - (cr == '\r' ? 2 : 1); pos < end; pos += 63)
        overwrite(in, pos, spaces, end - pos < 63 ? end - pos : 63);
    sc->too_large = hit->declared;
    sc->chunks_over = true;
    sc->blank_left = 2;
}

// Bytes arrived on a connection, before evhttp reads them (it parses whole
// lines only): a head whose body is over the limit, or whose Content-Length
// evhttp would refuse, is changed (frame_hit) for evhttp to hand us the request
// to refuse with a JSON 413 or 400 (evhttp's own pages are HTML, and it closes
// while an honest client still sends: a reset).
static void conn_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg) {
    ServeConn *sc = arg;
    if (!info->n_added) return;
    size_t len = evbuffer_get_length(in), base = len - info->n_added, off = 0;
    blank_pending(sc, in, base, len);
    if (sc->fr.body_left >= info->n_added) {  // all of it body (the common case for a big one): counted, not copied
        OpenAIFrameHit hit;
        openai_frame_feed(&sc->fr, NULL, info->n_added, OPENAI_MAX_BODY, SERVE_MAX_HEAD, &hit);
        return;
    }
    while (off < info->n_added) {
        char tmp[4096];
        struct evbuffer_ptr at;
        if (evbuffer_ptr_set(in, &at, base + off, EVBUFFER_PTR_SET) < 0) return;
        size_t want = info->n_added - off < sizeof tmp ? info->n_added - off : sizeof tmp;
        ev_ssize_t got = evbuffer_copyout_from(in, &at, tmp, want);
        if (got <= 0) return;
        OpenAIFrameHit hit;
        size_t took = openai_frame_feed(&sc->fr, tmp, (size_t)got, OPENAI_MAX_BODY, SERVE_MAX_HEAD, &hit);
        if (hit.kind) {
            frame_hit(sc, in, base + off + hit.line_end - hit.line_len, &hit);
            blank_pending(sc, in, base + off + took, len);
        }
        off += took;
    }
}

// libevent answers a few requests itself before the endpoint sees them (a
// request line it cannot parse, e.g. HTTP/0.9's "GET /health" without a
// version; a malformed chunk size), with an HTML page. Such a reply is
// rewritten as it is queued (its page is the last thing evhttp adds) into
// OpenAI's JSON error with the same status; the connection closes after it,
// as libevent's page says.
static void conn_output(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg) {
    ServeConn *sc = arg;
    if (sc->rewriting) return;
    if (info->n_deleted) sc->resp_start = sc->resp_start > info->n_deleted ? sc->resp_start - info->n_deleted : 0;
    if (!info->n_added || info->n_deleted) return;
    static const char page[] = "<HTML><HEAD>\n<TITLE>";  // libevent's ERR_FORMAT
    char first[sizeof page - 1];
    struct evbuffer_ptr at;
    size_t start = info->orig_size, len = evbuffer_get_length(out);
    if (evbuffer_ptr_set(out, &at, start, EVBUFFER_PTR_SET) < 0) return;
    ev_ssize_t got = evbuffer_copyout_from(out, &at, first, info->n_added < sizeof first ? info->n_added : sizeof first);
    if (got >= 7 && !memcmp(first, "HTTP/1.", 7)) {  // a reply's status line: evhttp adds it first
        sc->resp_start = start;
        return;
    }
    if (got != (ev_ssize_t)sizeof first || memcmp(first, page, sizeof first) || sc->resp_start >= start) return;
    char head[128] = "";
    size_t hl = start - sc->resp_start < sizeof head - 1 ? start - sc->resp_start : sizeof head - 1;
    if (evbuffer_ptr_set(out, &at, sc->resp_start, EVBUFFER_PTR_SET) < 0 || evbuffer_copyout_from(out, &at, head, hl) < 0)
        return;
    head[hl] = 0;
    char *eol = strstr(head, "\r\n");
    int status = 0;
    if (!eol || sscanf(head, "HTTP/%*d.%*d %d", &status) != 1) return;
    *eol = 0;
    if (sc->fr.bad_chunk) {  // (libevent calls a malformed chunk 413, as an oversized one)
        status = 400;
        snprintf(head, sizeof head, "HTTP/1.1 400 Bad Request");
    }
    char *body = sc->fr.bad_chunk ? openai_error_body(status, NULL, "invalid_request", "a chunk-size line that is "
                                                                                       "not a hexadecimal number") :
                 status == 413    ? openai_error_body(status, NULL, "request_too_large", "the request body is over the "
                                                                                            "limit of %u bytes",
                                                      OPENAI_MAX_BODY) :
                 status == 400    ? openai_error_body(status, NULL, "invalid_request", "not an HTTP/1.x request this "
                                                                                          "endpoint reads (a request line METHOD PATH HTTP/1.1, headers, a "
                                                                                          "body as its Content-Length or chunks say)") :
                                    openai_error_body(status, NULL, NULL, "%s", openai_status_reason(status));
    char *prefix = sc->resp_start ? malloc(sc->resp_start) : NULL;
    if (!body || (sc->resp_start && (!prefix || evbuffer_copyout(out, prefix, sc->resp_start) < 0))) {
        free(body);
        free(prefix);
        return;
    }
    sc->rewriting = true;
    evbuffer_drain(out, len);
    if (prefix) evbuffer_add(out, prefix, sc->resp_start);
    evbuffer_add_printf(out, "%s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                        head, strlen(body), body);
    sc->rewriting = false;
    free(body);
    free(prefix);
}

static void linger_read(struct bufferevent *bev, void *arg) {
    (void)arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));  // (conn_input counted it down first)
}

static void linger_event(struct bufferevent *bev, short what, void *arg) {
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) ((ServeConn *)arg)->linger_end = true;
}

void serve_conn_watch(ServeConn *sc, struct bufferevent *bev) {
    openai_frame_init(&sc->fr);
    evbuffer_add_cb(bufferevent_get_input(bev), conn_input, sc);
    evbuffer_add_cb(bufferevent_get_output(bev), conn_output, sc);
}

void serve_conn_unwatch(ServeConn *sc, struct bufferevent *bev) {
    evbuffer_remove_cb(bufferevent_get_input(bev), conn_input, sc);
    evbuffer_remove_cb(bufferevent_get_output(bev), conn_output, sc);
}

// One refused for its body keeps being read (and the body dropped) until that
// body is in, its client closes or until_ms: closing while an honest client
// still sends would reset its connection before it reads the 413.
bool serve_conn_linger(ServeConn *sc, struct bufferevent *bev, int64_t until_ms) {
    if (!(sc->too_large || sc->bad_length) || !openai_frame_in_body(&sc->fr)) return false;
    sc->linger_until_ms = until_ms;
    bufferevent_setcb(bev, linger_read, NULL, linger_event, sc);
    bufferevent_enable(bev, EV_READ);
    linger_read(bev, sc);
    return true;
}

bool serve_conn_linger_done(const ServeConn *sc, int64_t now_ms) {
    return !openai_frame_in_body(&sc->fr) || sc->linger_end || now_ms > sc->linger_until_ms;
}
