// What grpo-rollout --serve follows of each connection below evhttp (serve.c),
// on the libevent thread: the requests' bytes as they arrive, before evhttp
// parses them (openai.h's frame), so that a body over the limit or a length
// evhttp would refuse with its own HTML page reaches serve.c as a request to
// answer in JSON; the replies as they are queued, so that the HTML pages
// libevent still sends by itself are rewritten into the JSON error; and the
// reading out of a refused body before the close (no reset for an honest client).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "rollout/openai.h"

#define SERVE_MAX_HEAD 65536  // a request's head (evhttp_set_max_headers_size too)

struct bufferevent;

typedef struct {
    OpenAIFrame fr;      // its requests, followed as they arrive
    uint64_t too_large;  // a head declared this body, over the limit (or a chunked one went over it:
                         // chunks_over): answered 413, the body dropped
    bool chunks_over;
    bool bad_length;          // a head's Content-Length is not a number: answered 400, the rest dropped
    int blank_left;           // chunks_over: the next bytes to overwrite with the CRLF that ends the trailer
    size_t resp_start;        // where the last reply queued on it begins in its output buffer
    bool rewriting;           // its output buffer is being rewritten
    int64_t linger_until_ms;  // kept after evhttp let it go, reading out a refused body until then
    bool linger_end;          // its client closed
} ServeConn;

// Follows bev's input and output (sc zeroed; both outlive the watch).
void serve_conn_watch(ServeConn *sc, struct bufferevent *bev);
void serve_conn_unwatch(ServeConn *sc, struct bufferevent *bev);
// evhttp let the connection go: true when it was refused for a body still
// arriving, which is read out (and dropped) until it ends, its client closes or
// until_ms; bev then reads for sc until serve_conn_linger_done says so.
bool serve_conn_linger(ServeConn *sc, struct bufferevent *bev, int64_t until_ms);
bool serve_conn_linger_done(const ServeConn *sc, int64_t now_ms);
