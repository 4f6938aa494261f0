// Connection accounting for the evhttp servers (grpo-relay, grpo-rollout --serve):
// evhttp 2.1 has neither a connection cap nor a header timeout. The server's
// bevcb registers each bufferevent evhttp creates, with one extra reference, so
// a sweep can tell (callbacks cleared) when evhttp has freed it, count it down,
// and shut down sockets that have not delivered a request in time (slowloris,
// a TLS handshake never started). What to do at the cap is the server's.
// One thread: the event loop's.
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct bufferevent;
struct evhttp_request;

typedef struct Conn {
    struct bufferevent *bev;     // one extra reference held until evhttp is done with it
    int64_t opened_ms, idle_since_ms;  // idle since: opened, or its last response went out
    bool busy;                   // a request is being answered
    bool served;                 // a request came on it (keep-alive: the idle timeout applies)
    bool trusted;                // the server's mark (--serve: a request of it carried the key)
    bool closing;                // shut down: evhttp will free it
    bool kept;                   // evhttp freed it and the server kept it (on_freed)
    void *user;                  // the server's (borrowed)
    void *ext;                   // the server's per-connection state (grpo-relay: its Front; borrowed)
    struct Conn *prev, *next, *hnext;
} Conn;

typedef struct {
    Conn *head;                  // newest first
    Conn **hash;                 // by bufferevent
    long n;                      // registered (some maybe freed by evhttp, not yet swept)
    long live;                   // of them not closing
    void (*on_release)(Conn *c, void *ctx);  // optional: before a Conn is freed
    // optional: evhttp freed c; true: the server keeps it (c->closing is set, and
    // the server calls conns_release when done, e.g. after reading out a refused body)
    bool (*on_freed)(Conn *c, void *ctx);
    void *ctx;
} Conns;

int conns_init(Conns *t, void (*on_release)(Conn *c, void *ctx), bool (*on_freed)(Conn *c, void *ctx),
               void *ctx);  // 0 / -1 (no memory)
void conns_release(Conns *t, Conn *c);  // drops our reference (closing the socket) and frees c
void conns_free(Conns *t);       // releases every Conn (after evhttp_free)
Conn *conns_add(Conns *t, struct bufferevent *bev);  // NULL: no memory (the connection goes uncounted)
Conn *conns_of(Conns *t, struct evhttp_request *req);  // NULL: not registered
void conns_close(Conns *t, Conn *c);  // shuts its socket down; evhttp then frees it
// Releases what evhttp freed; closes, not busy, what waited for a whole request
// past header_ms (never served) or idle_ms (served before). Returns how many it closed.
int conns_sweep(Conns *t, int64_t now_ms, int64_t header_ms, int64_t idle_ms);
// The connection to give up for a newcomer at the cap: the oldest one with no
// request in flight, untrusted ones first. NULL: every one is busy.
Conn *conns_victim(Conns *t);
