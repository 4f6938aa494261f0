// See conns.h.
#include "core/conns.h"
#include "core/timeutil.h"
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#define CONNS_HASH 4096

static size_t slot(const void *bev) { return ((uintptr_t)bev >> 4) % CONNS_HASH; }

int conns_init(Conns *t, void (*on_release)(Conn *c, void *ctx), bool (*on_freed)(Conn *c, void *ctx),
               void *ctx) {
    *t = (Conns){.on_release = on_release, .on_freed = on_freed, .ctx = ctx};
    t->hash = calloc(CONNS_HASH, sizeof *t->hash);
    return t->hash ? 0 : -1;
}

Conn *conns_add(Conns *t, struct bufferevent *bev) {
    Conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    bufferevent_incref(bev);
    c->bev = bev;
    c->opened_ms = c->idle_since_ms = time_mono_ms();
    c->next = t->head;
    if (t->head) t->head->prev = c;
    t->head = c;
    size_t s = slot(bev);
    c->hnext = t->hash[s];
    t->hash[s] = c;
    t->n++;
    t->live++;
    return c;
}

Conn *conns_of(Conns *t, struct evhttp_request *req) {
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    if (!bev || !t->hash) return NULL;
    for (Conn *c = t->hash[slot(bev)]; c; c = c->hnext)
        if (c->bev == bev) return c;
    return NULL;
}

void conns_release(Conns *t, Conn *c) {
    if (t->on_release) t->on_release(c, t->ctx);
    if (c->prev) c->prev->next = c->next;
    else t->head = c->next;
    if (c->next) c->next->prev = c->prev;
    Conn **pp = &t->hash[slot(c->bev)];
    while (*pp && *pp != c) pp = &(*pp)->hnext;
    if (*pp) *pp = c->hnext;
    if (!c->closing) t->live--;
    t->n--;
    if (c->kept) {  // the server's callbacks on it
        bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
        bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    }
    bufferevent_decref(c->bev);  // the last reference: closes the socket
    free(c);
}

void conns_close(Conns *t, Conn *c) {
    if (c->closing) return;
    evutil_socket_t s = bufferevent_getfd(c->bev);
    if (s >= 0) shutdown(s, SHUT_RDWR);
    c->closing = true;
    t->live--;
}

int conns_sweep(Conns *t, int64_t now_ms, int64_t header_ms, int64_t idle_ms) {
    int closed = 0;
    for (Conn *c = t->head, *next; c; c = next) {
        next = c->next;
        bufferevent_data_cb rcb, wcb;
        bufferevent_event_cb ecb;
        bufferevent_getcb(c->bev, &rcb, &wcb, &ecb, NULL);
        if (!rcb && !wcb && !ecb && !c->kept) {  // evhttp freed it: ours is the last reference
            if (t->on_freed && t->on_freed(c, t->ctx)) {
                if (!c->closing) t->live--;
                c->closing = c->kept = true;
            } else {
                conns_release(t, c);
            }
            continue;
        }
        // A connection gets header_ms to deliver its first whole request (a TLS
        // handshake included), idle_ms for each next one after a response.
        if (!c->busy && !c->closing && now_ms - c->idle_since_ms > (c->served ? idle_ms : header_ms)) {
            conns_close(t, c);
            closed++;
        }
    }
    return closed;
}

Conn *conns_victim(Conns *t) {
    Conn *oldest = NULL, *oldest_untrusted = NULL;
    for (Conn *c = t->head; c; c = c->next) {  // newest first: the last match is the oldest
        if (c->busy || c->closing) continue;
        oldest = c;
        if (!c->trusted) oldest_untrusted = c;
    }
    return oldest_untrusted ? oldest_untrusted : oldest;
}

void conns_free(Conns *t) {
    while (t->head) conns_release(t, t->head);
    free(t->hash);
    t->hash = NULL;
}
