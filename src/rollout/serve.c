// The OpenAI-compatible endpoint (see serve.h). Everything both threads touch
// (episodes, ad-hoc slots, the event queue, the reply queue, whether a held
// request's connection is still there) sits under s->mu; the libevent thread
// alone calls evhttp, the worker's thread alone the tokenizer. What a request
// says and what a reply looks like is openai.c's; connections (the cap, the
// timeouts) are core/conns.c's, their bytes below evhttp serve_conn.c's.
#include "rollout/serve.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include "core/buf.h"
#include "core/conns.h"
#include "core/log.h"
#include "core/net.h"
#include "core/timeutil.h"
#include "rollout/openai.h"
#include "rollout/serve_conn.h"

#define LINGER_MS 5000           // a refused body read and dropped at most this long before the close
#define CAP_LOG_MS 10000         // at most one line about the connection cap this often
#define SWEEP_MS 200

enum { HK_CLAIM, HK_CHAT, HK_TEXT };                  // what a held request waits for
enum { SE_NONE, SE_UNCLAIMED, SE_OPEN };              // a batch episode

typedef struct Serve Serve;

typedef struct Held {            // a request answered later (freed by the libevent thread after its last reply)
    Serve *s;
    struct evhttp_request *req;  // NULL once evhttp freed it (its connection freed by evhttp_free)
    bool gone;                   // its client closed the connection: evhttp left req to us, and our
                                 // last reply to it (which goes nowhere) frees it
    int kind, k;                 // k: the episode or ad-hoc slot
    bool stream, tools_on;
    OpenAIStream os;             // the reply's id, model, usage wanted, role sent
    bool queued;                 // worker: event-stream pieces queued (an error must be one too)
    bool started;                // libevent thread: the streamed reply's head is sent
    char id[48];                 // chatcmpl-... / cmpl-...
    int64_t created, deadline_ms;
    json_t *stop;                // an array of stop strings, or NULL (owned)
    json_t *seg;                 // an episode's edited history, its new segment once the engine takes it (owned)
    Buf sent;                    // the turn's text streamed so far
    // The worker's thread, decoding the turn as it grows (op_token): tokens
    // [pre, rd) decoded last time give the context of the next piece.
    OpenAIStop scan;             // the turn's text so far, and where a stop string cut it
    int pre, rd;
    Buf pend;                    // decoded bytes of an unfinished UTF-8 character
    struct Held *next;           // claim waiters
} Held;

typedef struct {
    Held *h;
    int status;                  // 0: a piece of an event stream
    char *body;                  // owned
    bool last;                   // the held request is answered: end the stream, free h
} Out;

typedef struct {
    int st;
    json_t *row;                 // owned
    json_t *history;             // the conversation as the client sees it (owned; NULL before its first request)
    Held *pend;                  // the request waiting for its turn
    int64_t last_ms;             // last activity: idle past the timeout fails it
    int turns;
    bool final;                  // no turns left: only its reward
    bool tools;                  // its opening offered tools (its turns' calls are parsed)
    int segments;                // segments after the first (edited histories taken)
} SEp;

struct Serve {
    Env base;
    ServeConfig cfg;
    char *model_name, *api_key;  // owned copies
    char url[112];               // http(s)://host:port
    char what[128];              // "endpoint URL", for messages
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;           // an event for env_poll
    pthread_t thread;
    bool thread_up;
    struct event_base *evb;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct event *wake, *tick;
    SSL_CTX *ssl;
    // the libevent thread's:
    Conns conns;                 // open connections (core/conns.h; their user a ServeConn)
    int slack;                   // connections closed, not yet let go by evhttp, before accepting pauses
    bool paused;                 // accepting paused (above cap + slack, or accept() failing)
    long cap_closed, cap_refused, accept_errors;  // since the last line about them
    char accept_why[96];
    int64_t cap_log_ms;
    // under mu:
    SEp *eps;                    // (max_episodes)
    Held **extra;                // (max_extra) the ad-hoc request in each slot, or NULL
    char prefix[208];
    long version, batch_version;
    Held *claims;                // POST /v1/episodes waiting, oldest first
    bool closing;                // op_free: answer what waits, hand out nothing more
    char finishing[256];         // serve_finish's why ("": not finishing): no new episode or ad-hoc request
    EnvEvent *q;                 // events for env_poll
    int qn, qcap;
    Out *out;                    // replies for the libevent thread
    int on, ocap;
    EnvStats st;
    int64_t started_unix;
    uint64_t seq;                // response ids
};


// ---------- small helpers ----------

// A reply; to HEAD its head only, with the Content-Length its body has (evhttp
// would send the body and no length, and the next reply on the connection would
// be read as part of it).
static void send_body(struct evhttp_request *req, int status, const char *ctype, const char *body) {
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Content-Type", ctype);
    if (status == 503 || status == 429) evhttp_add_header(oh, "Retry-After", "1");
    bool head = evhttp_request_get_command(req) == EVHTTP_REQ_HEAD;
    if (head) {
        char n[32];
        snprintf(n, sizeof n, "%zu", body ? strlen(body) : 0);
        evhttp_add_header(oh, "Content-Length", n);
    }
    struct evbuffer *b = head ? NULL : evbuffer_new();
    if (b && body) evbuffer_add(b, body, strlen(body));
    evhttp_send_reply(req, status, openai_status_reason(status), b);
    if (b) evbuffer_free(b);
}

static void send_json(struct evhttp_request *req, int status, json_t *j) {  // steals j
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!b) {
        send_body(req, 500, "application/json", "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                  "\"param\": null, \"code\": null}}");
        return;
    }
    send_body(req, status, "application/json", b);
    free(b);
}

static void send_error(struct evhttp_request *req, int status, const char *param, const char *code, const char *msg) {
    char *b = openai_error_body(status, param, code, "%s", msg);
    send_body(req, status, "application/json", b ? b : "{}");
    free(b);
}

static void wake(Serve *s) { event_active(s->wake, 0, 0); }

// Queues a reply for h (under mu); body owned.
static void out_push(Serve *s, Held *h, int status, char *body, bool last) {
    if (s->on == s->ocap) {
        int nc = s->ocap ? 2 * s->ocap : 64;
        Out *no = realloc(s->out, (size_t)nc * sizeof *no);
        if (!no) {  // the client waits until its connection times out; h leaks
            log_warn("%s: out of memory for a reply", s->what);
            free(body);
            return;
        }
        s->out = no;
        s->ocap = nc;
    }
    s->out[s->on++] = (Out){h, status, body, last};
}

static void push_error(Serve *s, Held *h, int status, const char *code, const char *msg) {
    if (h->stream && h->queued) {  // an event stream already under way: the error is its last event
        char *b = openai_error_body(status, NULL, code, "%s", msg);
        Buf sse = {0};
        if (b) openai_sse_event(&sse, b);
        openai_sse_event(&sse, "[DONE]");
        buf_append(&sse, "", 1);
        free(b);
        out_push(s, h, 0, (char *)sse.data, true);
        return;
    }
    out_push(s, h, status, openai_error_body(status, NULL, code, "%s", msg), true);
}

static EnvEvent *push_event(Serve *s, EnvEventType type, int k) {
    EnvEvent *ev = env_event_push(&s->q, &s->qn, &s->qcap, type, k);
    if (ev) pthread_cond_signal(&s->cv);
    return ev;
}

static void ep_reset(SEp *e) {
    json_decref(e->row);
    json_decref(e->history);
    *e = (SEp){0};
}

static void held_free(Held *h) {
    if (!h) return;
    buf_free(&h->sent);
    buf_free(&h->pend);
    openai_stop_free(&h->scan);
    json_decref(h->stop);
    json_decref(h->seg);
    free(h);
}

// Which batch episode an id names (-1: none; no batch has begun while the prefix is empty).
static int episode_k(const Serve *s, const char *id) {
    return s->prefix[0] ? env_episode_index(s->prefix, id, s->cfg.max_episodes) : -1;
}

// ---------- requests (libevent thread) ----------

// The request's body bytes (evhttp holds them; the libevent thread only).
static const char *body_of(struct evhttp_request *req, size_t *n) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *n = evbuffer_get_length(in);
    const char *p = *n ? (const char *)evbuffer_pullup(in, -1) : "";
    if (!p) *n = 0, p = "";
    return p;
}

static void send_openai_error(struct evhttp_request *req, const OpenAIError *e) {
    send_error(req, e->status, e->param, e->code, e->msg);
}

static bool authorized(Serve *s, struct evhttp_request *req) {
    if (!s->api_key) return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    size_t kl = strlen(s->api_key);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    return strlen(h) == kl && CRYPTO_memcmp(h, s->api_key, kl) == 0;
}

// A held request's connection is closing. When its client went away, evhttp
// has already detached the request (it is ours: the reply we owe it frees it);
// when the server frees the connection (evhttp_free) the request goes with it.
static void on_close(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    Held *h = arg;
    Serve *s = h->s;
    pthread_mutex_lock(&s->mu);
    if (h->req && !evhttp_request_get_connection(h->req)) h->gone = true;
    else h->req = NULL;
    if (h->kind == HK_CLAIM) {  // a claim waiter: nobody else holds it
        for (Held **pp = &s->claims; *pp; pp = &(*pp)->next)
            if (*pp == h) {
                *pp = h->next;
                if (h->gone) evhttp_request_free(h->req);
                held_free(h);
                break;
            }
    }
    pthread_mutex_unlock(&s->mu);
}

static Held *held_new(Serve *s, struct evhttp_request *req, int kind, int k) {
    Held *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->s = s;
    h->req = req;
    h->kind = kind;
    h->k = k;
    h->created = time_unix_s();
    snprintf(h->id, sizeof h->id, "%s-%llx%04llx", kind == HK_TEXT ? "cmpl" : "chatcmpl",
             (unsigned long long)time_mono_ms(), (unsigned long long)(s->seq++ & 0xffff));
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (evcon) evhttp_connection_set_closecb(evcon, on_close, h);
    return h;
}

// The reply's shape and the turn's stop strings, from its request (before h is published).
static void held_stream(Held *h, const OpenAIRequest *rq) {
    h->stream = rq->stream;
    h->os = (OpenAIStream){.text = h->kind == HK_TEXT, .id = h->id, .created = h->created,
                           .model = h->s->model_name, .include_usage = rq->include_usage};
    h->stop = rq->stop ? json_incref(rq->stop) : NULL;
    openai_stop_init(&h->scan, h->stop);
}

static void held_drop(Held *h) {  // at the end: a held request never answered
    if (h && h->gone && h->req) evhttp_request_free(h->req);
    held_free(h);
}

static void held_detach(Held *h) {  // before its last reply: the connection is not ours to watch any more
    if (!h->req) return;
    struct evhttp_connection *evcon = evhttp_request_get_connection(h->req);
    if (evcon) evhttp_connection_set_closecb(evcon, NULL, NULL);
}

static json_t *episode_json(Serve *s, int k) {
    int G = s->cfg.group_size;
    char id[232], group[232];
    env_episode_id(s->prefix, k, id, sizeof id);
    snprintf(group, sizeof group, "%s.g%d", s->prefix, k / G);
    return json_pack("{s:s, s:s, s:i, s:i, s:O, s:I, s:i}", "id", id, "group", group, "index", k % G, "group_size", G,
                     "row", s->eps[k].row ? s->eps[k].row : json_null(), "adapter_version",
                     (json_int_t)s->batch_version, "max_turns", s->cfg.max_turns);
}

// A claim (already off the list) gets no episode: 503 with code and msg.
static void claim_refuse(Held *h, const char *code, const char *msg) {
    held_detach(h);
    if (h->req) send_error(h->req, 503, NULL, code, msg);
    held_free(h);
}

#define STOPPING_MSG "the worker is stopping: retry with another one"

// Hands out unclaimed episodes to waiting claims, oldest first (under mu, libevent thread).
static void serve_claims(Serve *s) {
    while ((s->closing || s->finishing[0]) && s->claims) {
        Held *h = s->claims;
        s->claims = h->next;
        if (s->closing) claim_refuse(h, "stopping", STOPPING_MSG);
        else claim_refuse(h, "run_done", s->finishing);
    }
    for (int k = 0; k < s->cfg.max_episodes && s->claims; k++) {
        if (s->eps[k].st != SE_UNCLAIMED) continue;
        Held *h = s->claims;
        s->claims = h->next;
        s->eps[k].st = SE_OPEN;
        s->eps[k].last_ms = time_mono_ms();
        s->st.starts++;
        held_detach(h);
        if (h->req) send_json(h->req, 200, episode_json(s, k));
        held_free(h);
    }
}

static void handle_claim(Serve *s, struct evhttp_request *req, double wait_s) {
    if (s->closing || s->finishing[0]) {
        send_error(req, 503, NULL, s->closing ? "stopping" : "run_done", s->closing ? STOPPING_MSG : s->finishing);
        return;
    }
    Held *h = held_new(s, req, HK_CLAIM, -1);
    if (!h) { send_error(req, 500, NULL, NULL, "out of memory"); return; }
    h->deadline_ms = time_mono_ms() + (int64_t)(wait_s * 1000);
    Held **pp = &s->claims;
    while (*pp) pp = &(*pp)->next;
    *pp = h;
    serve_claims(s);
    if (wait_s == 0) {  // none at once: no waiting
        for (pp = &s->claims; *pp; pp = &(*pp)->next)
            if (*pp == h) {
                *pp = h->next;
                claim_refuse(h, "no_episode", "no episode to hand out now (the worker is between batches)");
                break;
            }
    }
}

// The open episode id names, or -1 after answering 404 (where: how the id came).
static int open_episode(Serve *s, struct evhttp_request *req, const char *id, const char *where) {
    int k = episode_k(s, id);
    if (k >= 0 && s->eps[k].st == SE_OPEN) return k;
    char msg[512];
    snprintf(msg, sizeof msg, "no open episode '%.200s' (%s: ended, timed out, or of an earlier batch)", id, where);
    send_error(req, 404, NULL, "episode_not_found", msg);
    return -1;
}

// bad: the body's refusal (checked before the lock), answered once the episode is known.
static void handle_reward(Serve *s, struct evhttp_request *req, const char *id, const OpenAIError *bad, double rv,
                          json_t *comps) {
    int k = open_episode(s, req, id, "POST /v1/episodes/{id}/reward");
    if (k < 0) return;
    SEp *e = &s->eps[k];
    if (bad) { send_openai_error(req, bad); return; }
    if (e->pend) {
        send_error(req, 409, NULL, "turn_in_flight", "the episode has a chat request in flight: its reward comes after");
        return;
    }
    if (!e->turns) {
        send_error(req, 400, NULL, "episode_has_no_turn", "the episode has had no assistant turn yet: nothing to reward");
        return;
    }
    EnvEvent *ev = push_event(s, ENV_REWARD, k);
    if (ev) {
        ev->reward = rv;
        ev->components = comps ? json_incref(comps) : NULL;
    }
    ep_reset(e);
    char eid[232];
    env_episode_id(s->prefix, k, eid, sizeof eid);
    send_json(req, 200, json_pack("{s:s, s:s, s:f}", "id", eid, "status", "ended", "reward", rv));
}

// An episode's chat request: its opening, or the history so far plus new messages.
// The request's stop strings end the turn as the model's end of turn does (the
// row keeps every sampled token; the answer is cut before the string).
static void episode_turn(Serve *s, struct evhttp_request *req, const char *id, OpenAIRequest *rq) {
    char msg[700];
    int k = open_episode(s, req, id, "X-Pail-Episode");
    if (k < 0) return;
    SEp *e = &s->eps[k];
    json_t *msgs = rq->messages, *tools = rq->tools;
    if (e->pend) {
        send_error(req, 409, NULL, "turn_in_flight", "the episode already has a chat request in flight");
        return;
    }
    if (e->final) {
        snprintf(msg, sizeof msg, "the episode has no turns left (%d turns, or its tokens ran out): POST its reward",
                 e->turns);
        send_error(req, 400, NULL, "episode_over", msg);
        return;
    }
    json_t *add;
    bool edited = false;
    if (!e->history) {
        add = json_incref(msgs);
    } else {
        size_t have = json_array_size(e->history), n = json_array_size(msgs), i = 0;
        while (i < have && i < n && openai_same_message(json_array_get(e->history, i), json_array_get(msgs, i))) i++;
        edited = i < have;  // the agent edited its history: a new segment (episode.h)
        if (!edited && n == have) {
            send_error(req, 400, "messages", "no_new_messages", "no new messages after the episode's history");
            return;
        }
        add = json_array();
        for (i = edited ? 0 : have; i < n; i++) json_array_append(add, json_array_get(msgs, i));
    }
    Held *h = held_new(s, req, HK_CHAT, k);
    EnvEvent *ev = h ? push_event(s, edited ? ENV_SEGMENT : ENV_MESSAGES, k) : NULL;
    if (!ev) {
        json_decref(add);
        if (h) { held_detach(h); held_free(h); }
        send_error(req, 500, NULL, NULL, "out of memory");
        return;
    }
    held_stream(h, rq);
    if (!e->history) e->tools = json_array_size(tools) && s->cfg.tool_format != TOOL_FORMAT_NONE;
    h->tools_on = e->tools;
    ev->messages = add;
    if (!e->history) {
        ev->tools = json_array_size(tools) ? json_incref(tools) : NULL;
        e->history = json_deep_copy(msgs);
    } else if (edited) {
        h->seg = json_deep_copy(msgs);  // the history once the engine takes the segment (op_refuse: not)
    } else {
        json_array_extend(e->history, add);
    }
    e->pend = h;
    e->last_ms = time_mono_ms();
}

// A request without X-Pail-Episode: its own settings, into a free ad-hoc slot.
static void adhoc_turn(Serve *s, struct evhttp_request *req, bool chat, OpenAIRequest *rq) {
    if (s->finishing[0]) {
        send_error(req, 503, NULL, "run_done", s->finishing);
        return;
    }
    int x = 0;
    while (x < s->cfg.max_extra && s->extra[x]) x++;
    if (x == s->cfg.max_extra) {
        char msg[200];
        snprintf(msg, sizeof msg, "%d requests are in flight (--serve-max-requests): retry", s->cfg.max_extra);
        send_error(req, 429, NULL, "too_many_requests", msg);
        return;
    }
    Held *h = held_new(s, req, chat ? HK_CHAT : HK_TEXT, s->cfg.max_episodes + x);
    EnvEvent *ev = h ? push_event(s, ENV_MESSAGES, s->cfg.max_episodes + x) : NULL;
    if (!ev) {
        if (h) { held_detach(h); held_free(h); }
        send_error(req, 500, NULL, NULL, "out of memory");
        return;
    }
    held_stream(h, rq);
    h->tools_on = chat && json_array_size(rq->tools) && s->cfg.tool_format != TOOL_FORMAT_NONE;
    ev->messages = rq->messages;
    rq->messages = NULL;
    ev->tools = chat && json_array_size(rq->tools) ? json_incref(rq->tools) : NULL;
    ev->params = rq->params;
    rq->params = NULL;
    s->extra[x] = h;
}

static void handle_models(Serve *s, struct evhttp_request *req, const char *one) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", s->model_name, "object", "model", "created",
                          (json_int_t)s->started_unix, "owned_by", "pail", "adapter_version", (json_int_t)s->version);
    if (one) {
        if (strcmp(one, s->model_name)) {
            json_decref(m);
            char msg[400];
            snprintf(msg, sizeof msg, "the model '%.200s' does not exist", one);
            send_error(req, 404, "model", "model_not_found", msg);
            return;
        }
        send_json(req, 200, m);
        return;
    }
    send_json(req, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

// A request's reply went out: its connection waits for the next one (the idle timeout).
static void req_done(struct evhttp_request *req, void *arg) {
    Serve *s = arg;
    Conn *c = conns_of(&s->conns, req);
    if (c) {
        c->busy = false;
        c->idle_since_ms = time_mono_ms();
    }
}

enum { R_NONE, R_HEALTH, R_MODELS, R_MODEL, R_CHAT, R_TEXT, R_CLAIM, R_REWARD };

// What path names (id: the model or episode it names, owned), or R_NONE.
static int route(const char *path, char **id) {
    *id = NULL;
    if (!strcmp(path, "/health")) return R_HEALTH;
    if (!strcmp(path, "/v1/models")) return R_MODELS;
    if (!strncmp(path, "/v1/models/", 11)) {
        *id = evhttp_uridecode(path + 11, 0, NULL);
        return R_MODEL;
    }
    if (!strcmp(path, "/v1/chat/completions")) return R_CHAT;
    if (!strcmp(path, "/v1/completions")) return R_TEXT;
    if (!strcmp(path, "/v1/episodes")) return R_CLAIM;
    size_t n = strlen(path);
    if (!strncmp(path, "/v1/episodes/", 13) && n > 20 && !strcmp(path + n - 7, "/reward")) {
        char raw[256];  // /v1/episodes/{id}/reward
        snprintf(raw, sizeof raw, "%.*s", (int)(n - 20 < 255 ? n - 20 : 255), path + 13);
        *id = evhttp_uridecode(raw, 0, NULL);
        return R_REWARD;
    }
    return R_NONE;
}

static void handle(struct evhttp_request *req, void *arg) {
    Serve *s = arg;
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *u = evhttp_uri_parse(uri);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD, post = cmd == EVHTTP_REQ_POST;
    if (!path) path = "";
    char *id = NULL;
    int r = route(path, &id);
    bool ok_method = r == R_HEALTH || r == R_MODELS || r == R_MODEL ? get : r != R_NONE && post;
    bool auth = authorized(s, req);
    Conn *c = conns_of(&s->conns, req);
    ServeConn *sc = c ? c->user : NULL;
    if (c) {
        c->busy = c->served = true;
        if (auth && s->api_key) c->trusted = true;
        evhttp_request_set_on_complete_cb(req, req_done, s);
    }
    // What needs no lock: the refusals, then the bodies parsed.
    OpenAIRequest rq = {0};
    OpenAIError e = {0};
    double wait_s = 0, reward = 0;
    json_t *comps = NULL;
    size_t n = 0;
    const char *body = ok_method && r >= R_CHAT && auth ? body_of(req, &n) : "";
    const char *epid = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Pail-Episode");
    bool parsed = false;
    // Another method may come with a body evhttp does not read: the connection ends with the answer.
    if (!get && !post) evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    if (sc && (sc->too_large || sc->bad_length)) {  // its head refused as it arrived (conn_input): no body read
        char msg[300];
        if (sc->bad_length)
            snprintf(msg, sizeof msg, "the request's Content-Length is not a number of bytes");
        else if (sc->chunks_over)
            snprintf(msg, sizeof msg, "the chunked request body is over the limit of %u bytes", OPENAI_MAX_BODY);
        else
            snprintf(msg, sizeof msg, "the request body of %llu bytes is over the limit of %u bytes",
                     (unsigned long long)sc->too_large, OPENAI_MAX_BODY);
        if (get || post) evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        if (sc->bad_length) send_error(req, 400, NULL, "invalid_content_length", msg);
        else send_error(req, 413, NULL, "request_too_large", msg);
        goto out;
    }
    if (r == R_HEALTH && get) {
        pthread_mutex_lock(&s->mu);
        json_t *j = json_pack("{s:s, s:I, s:i, s:I}", "status", s->finishing[0] ? "finishing" : "ok",
                              "adapter_version", (json_int_t)s->version,
                              "episodes_open", s->base.ops->open(&s->base), "connections", (json_int_t)s->conns.live);
        pthread_mutex_unlock(&s->mu);
        send_json(req, 200, j);
        goto out;
    }
    if (!auth) {
        send_error(req, 401, NULL, "invalid_api_key", "incorrect API key provided (Authorization: Bearer KEY)");
        goto out;
    }
    if (!ok_method) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s %.300s", r != R_NONE ? "method not allowed:" : "unknown request URL:", path);
        send_error(req, r != R_NONE ? 405 : 404, NULL, r != R_NONE ? "method_not_allowed" : "unknown_url", msg);
        goto out;
    }
    if (r == R_CHAT || r == R_TEXT)
        parsed = openai_request_parse(body, n, r == R_CHAT, s->model_name, r == R_CHAT ? s->cfg.max_new_tokens : 16,
                                      epid != NULL, &rq, &e) == 0;
    else if (r == R_CLAIM)
        parsed = openai_claim_parse(body, n, &wait_s, &e) == 0;
    else if (r == R_REWARD)
        parsed = openai_reward_parse(body, n, &reward, &comps, &e) == 0;
    if (!parsed && r != R_REWARD && r >= R_CHAT) {
        send_openai_error(req, &e);
        goto out;
    }
    pthread_mutex_lock(&s->mu);
    switch (r) {
    case R_MODELS: handle_models(s, req, NULL); break;
    case R_MODEL: handle_models(s, req, id ? id : ""); break;
    case R_CHAT:
    case R_TEXT:
        if (epid) episode_turn(s, req, epid, &rq);
        else adhoc_turn(s, req, r == R_CHAT, &rq);
        break;
    case R_CLAIM: handle_claim(s, req, wait_s); break;
    case R_REWARD: handle_reward(s, req, id ? id : "", parsed ? NULL : &e, reward, comps); break;
    }
    pthread_mutex_unlock(&s->mu);
out:
    openai_request_free(&rq);
    json_decref(comps);
    free(id);
    if (u) evhttp_uri_free(u);
}

// A streamed reply's last chunk has left the output buffer: its end (the
// terminating chunk) goes now. evhttp_send_reply_end right after the last chunk
// would set evhttp_send_done as the drain callback while a TLS bufferevent may
// have one deferred already for an earlier chunk (it defers them, and runs them
// without looking at the buffer again): evhttp_send_done would then run with the
// last chunk still queued, turn the connection to reading with writing off, and
// the client's stream would be cut ("incomplete chunked read"). Called by such a
// stale callback too: it waits for the real one while bytes are queued.
static void stream_drained(struct evhttp_connection *evcon, void *arg) {
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    if (bev && evbuffer_get_length(bufferevent_get_output(bev))) return;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    evhttp_send_reply_end(arg);
}

// The connection of a stream whose end waits (stream_drained) is closing. When its
// client left, evhttp detached the request, not ended by us yet, and left it to us.
static void stream_closed(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    struct evhttp_request *req = arg;
    if (!evhttp_request_get_connection(req)) evhttp_request_free(req);
}

// The libevent thread: replies queued by the worker's thread.
static void wake_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    Serve *s = arg;
    pthread_mutex_lock(&s->mu);
    serve_claims(s);
    for (int i = 0; i < s->on; i++) {
        Out *o = &s->out[i];
        Held *h = o->h;
        if (o->last) held_detach(h);
        if (h->req && h->gone) {  // its client left: only the last reply, which frees the request
            if (o->last && h->started) evhttp_send_reply_end(h->req);
            else if (o->last) evhttp_send_reply(h->req, 499, "Client Closed Request", NULL);
        } else if (h->req) {
            if (o->status == 0) {  // an event-stream piece
                if (!h->started) {
                    struct evkeyvalq *oh = evhttp_request_get_output_headers(h->req);
                    evhttp_add_header(oh, "Content-Type", "text/event-stream");
                    evhttp_add_header(oh, "Cache-Control", "no-cache");
                    evhttp_send_reply_start(h->req, 200, "OK");
                    h->started = true;
                }
                struct evbuffer *b = evbuffer_new();
                if (b && o->body) evbuffer_add(b, o->body, strlen(o->body));
                bool end_later = o->last && b && evbuffer_get_length(b) && evhttp_request_get_connection(h->req);
                if (end_later) {
                    evhttp_connection_set_closecb(evhttp_request_get_connection(h->req), stream_closed, h->req);
                    evhttp_send_reply_chunk_with_cb(h->req, b, stream_drained, h->req);
                }
                else if (b) evhttp_send_reply_chunk(h->req, b);
                if (b) evbuffer_free(b);
                if (o->last && !end_later) evhttp_send_reply_end(h->req);
            } else {
                send_body(h->req, o->status, "application/json", o->body ? o->body : "{}");
            }
        }
        free(o->body);
        if (o->last) held_free(h);
    }
    s->on = 0;
    pthread_mutex_unlock(&s->mu);
}

static void conns_tick(Serve *s, int64_t now);

// Every SWEEP_MS: connections (timeouts, the cap), claims past their wait,
// episodes idle past the timeout.
static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    Serve *s = arg;
    int64_t now = time_mono_ms();
    conns_tick(s, now);
    pthread_mutex_lock(&s->mu);
    for (Held **pp = &s->claims; *pp;) {
        Held *h = *pp;
        if (now < h->deadline_ms) { pp = &h->next; continue; }
        *pp = h->next;
        claim_refuse(h, "no_episode", "no episode to hand out within 'wait' (the worker is between batches, or every "
                     "episode of this one is out): retry");
    }
    int64_t lim = (int64_t)(s->cfg.episode_timeout_s * 1000);
    for (int k = 0; k < s->cfg.max_episodes; k++) {
        SEp *e = &s->eps[k];
        if (e->st != SE_OPEN || e->pend || now - e->last_ms < lim) continue;
        EnvEvent *ev = push_event(s, ENV_FAILED, k);
        char eid[232];
        env_episode_id(s->prefix, k, eid, sizeof eid);
        if (ev) snprintf(ev->why, sizeof ev->why, "%s: episode %s left open past --episode-timeout %g s (no request "
                         "and no reward)", s->what, eid, s->cfg.episode_timeout_s);
        s->st.timeouts++;
        s->st.failed++;
        ep_reset(e);
    }
    pthread_mutex_unlock(&s->mu);
}

// ---------- connections (libevent thread) ----------

// The rate-limited line about the cap: counts since the last one.
static void cap_log(Serve *s, int64_t now, bool force) {
    if (!s->cap_closed && !s->cap_refused && !s->accept_errors) return;
    if (!force && now - s->cap_log_ms < CAP_LOG_MS) return;
    if (s->cap_closed || s->cap_refused)
        log_warn("%s: at the --serve-max-connections cap (%d): %ld idle connections closed to make room, %ld "
                 "refused (every one busy) since the last line", s->what, s->cfg.max_connections, s->cap_closed,
                 s->cap_refused);
    if (s->accept_errors)
        log_warn("%s: accepting a connection failed %ld times (%s) since the last line; accepting paused for %d ms "
                 "each time", s->what, s->accept_errors, s->accept_why, SWEEP_MS);
    s->cap_closed = s->cap_refused = s->accept_errors = 0;
    s->cap_log_ms = now;
}

// evhttp let c go: one refused for its body is kept while it is read out (serve_conn_linger).
static bool conn_freed(Conn *c, void *arg) {
    Serve *s = arg;
    int64_t ms = s->cfg.header_timeout_s * 1000 < LINGER_MS ? (int64_t)(s->cfg.header_timeout_s * 1000) : LINGER_MS;
    return c->user && serve_conn_linger(c->user, c->bev, time_mono_ms() + ms);
}

static void conn_release(Conn *c, void *arg) {
    (void)arg;
    if (!c->user) return;
    serve_conn_unwatch(c->user, c->bev);
    free(c->user);
    c->user = NULL;
}

static void listener_pause(Serve *s, bool pause) {
    struct evconnlistener *l = s->bound ? evhttp_bound_socket_get_listener(s->bound) : NULL;
    if (!l || pause == s->paused) return;
    if (pause) evconnlistener_disable(l);
    else evconnlistener_enable(l);
    s->paused = pause;
}

// accept() failed (out of descriptors: EMFILE): evconnlistener would retry at
// once, and log, for as long as it lasts. Paused until the next sweep instead,
// and counted into the rate-limited line.
static void accept_error(struct evconnlistener *l, void *arg) {
    (void)l;
    Serve *s = arg;
    s->accept_errors++;
    snprintf(s->accept_why, sizeof s->accept_why, "%s", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    listener_pause(s, true);
    cap_log(s, time_mono_ms(), false);
}

// evhttp's bufferevent for a new connection. At the cap the oldest connection
// with nothing in flight (one that never showed the key first) is closed to
// make room, so a flood of idle sockets cannot lock out /health or an agent;
// when every one is busy the newcomer is closed instead. Accepting is paused
// while closed ones wait for evhttp to let them go (the descriptors are
// bounded: cap + slack), and resumed by the sweep.
static struct bufferevent *bev_cb(struct event_base *base, void *arg) {
    Serve *s = arg;
    struct bufferevent *bev;
    if (s->ssl) {
        SSL *ssl = SSL_new(s->ssl);
        bev = ssl ? bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE) : NULL;
    } else {
        bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!bev) return NULL;
    ServeConn *sc = calloc(1, sizeof *sc);
    Conn *c = sc ? conns_add(&s->conns, bev) : NULL;
    if (!c) { free(sc); return bev; }  // (uncounted; the sweep's timeouts do not see it)
    c->user = sc;
    serve_conn_watch(sc, bev);
    int64_t now = time_mono_ms();
    if (s->conns.live > s->cfg.max_connections) {
        Conn *v = conns_victim(&s->conns);
        if (v == c) v = NULL;  // (the newest: only when nothing else is idle)
        conns_close(&s->conns, v ? v : c);
        if (v) s->cap_closed++;
        else s->cap_refused++;
        cap_log(s, now, false);
    }
    if (s->conns.n >= s->cfg.max_connections + s->slack) listener_pause(s, true);
    return bev;
}

// Releases what evhttp let go, closes what waited past --serve-header-timeout
// (first request) or --serve-idle-timeout (the next), ends lingering reads,
// resumes accepting below the cap.
static void conns_tick(Serve *s, int64_t now) {
    conns_sweep(&s->conns, now, (int64_t)(s->cfg.header_timeout_s * 1000), (int64_t)(s->cfg.idle_timeout_s * 1000));
    for (Conn *c = s->conns.head, *next; c; c = next) {
        next = c->next;
        if (c->kept && (!c->user || serve_conn_linger_done(c->user, now))) conns_release(&s->conns, c);
    }
    if (s->conns.n < s->cfg.max_connections + s->slack) listener_pause(s, false);
    cap_log(s, now, false);
}

static void *loop_main(void *arg) {
    Serve *s = arg;
    event_base_dispatch(s->evb);
    return NULL;
}

// ---------- the worker's side (Env) ----------

static Held *holder(Serve *s, int k) {
    if (k >= 0 && k < s->cfg.max_episodes) return s->eps[k].pend;
    if (k >= s->cfg.max_episodes && k < s->cfg.max_episodes + s->cfg.max_extra) return s->extra[k - s->cfg.max_episodes];
    return NULL;
}

static void unhold(Serve *s, int k) {
    if (k >= 0 && k < s->cfg.max_episodes) s->eps[k].pend = NULL;
    else if (k >= s->cfg.max_episodes && k < s->cfg.max_episodes + s->cfg.max_extra) s->extra[k - s->cfg.max_episodes] = NULL;
}

// The turn grew to ids[0, n): the text of tokens [h->rd, n) onto h->scan.
// Those tokens are decoded after the ones before them, [h->pre, h->rd), and
// that context's text left out (a token's text can depend on the one before,
// e.g. a leading space a decoder strips at the start): each token is decoded
// about twice, not the whole turn again per token. Bytes of a UTF-8 character
// not yet complete wait in h->pend; invalid ones are replaced. The worker's
// thread (h is its own until it queues its last reply). 0 / -1.
static int turn_grow(const Serve *s, Held *h, const int32_t *ids, int n) {
    if (n <= h->rd) return 0;
    Buf all = {0}, ctx = {0}, piece = {0};
    PailErr err = {0};
    int rc = tokenizer_decode(s->cfg.tok, ids + h->pre, (size_t)(n - h->pre), true, &all, &err);
    if (rc == 0 && h->rd > h->pre) rc = tokenizer_decode(s->cfg.tok, ids + h->pre, (size_t)(h->rd - h->pre), true, &ctx, &err);
    if (rc == 0 && all.len > ctx.len) rc = buf_append(&h->pend, all.data + ctx.len, all.len - ctx.len);
    // Hold back a trailing incomplete UTF-8 sequence (the next token completes it).
    size_t len = h->pend.len;
    if (rc == 0 && len) {
        size_t i = len, back = 0;
        while (i > 0 && back < 4 && (h->pend.data[i - 1] & 0xC0) == 0x80) i--, back++;
        if (i > 0) {
            uint8_t c = h->pend.data[i - 1];
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (need > 1 && back + 1 < need) len = i - 1;
        }
    }
    if (rc == 0 && len && utf8_append_lossy(&piece, h->pend.data, len) < 0) rc = -1;
    if (rc == 0 && openai_stop_feed(&h->scan, piece.data ? (const char *)piece.data : "", piece.len) == -2) rc = -1;
    if (rc == 0) {
        memmove(h->pend.data, h->pend.data + len, h->pend.len - len);
        h->pend.len -= len;
        h->pre = h->rd;
        h->rd = n;
    }
    buf_free(&all);
    buf_free(&ctx);
    buf_free(&piece);
    return rc;
}

static bool op_token(Env *env, int k, const int32_t *turn, int n) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    Held *h = holder(s, k);
    bool live = h && h->req && !h->gone && h->stream && !h->tools_on;
    bool stops = h && h->stop;
    bool gone = h && (!h->req || h->gone) && k >= s->cfg.max_episodes;  // an ad-hoc request whose client left: stop
    pthread_mutex_unlock(&s->mu);
    if (gone) return true;
    if (!live && !stops) return false;
    if (turn_grow(s, h, turn, n) < 0) return false;
    bool hit = h->scan.cut >= 0;
    if (!live) return hit;
    size_t safe = openai_stop_safe(&h->scan);
    const char *text = (const char *)h->scan.text.data;
    pthread_mutex_lock(&s->mu);
    size_t have = h->sent.len;
    if (safe > have) {
        Buf sse = {0};
        if (openai_sse_content(&sse, &h->os, text + have, safe - have) == 0 && buf_append(&sse, "", 1) == 0 &&
            buf_append(&h->sent, text + have, safe - have) == 0) {
            h->queued = true;
            out_push(s, h, 0, (char *)sse.data, false);
            wake(s);
        } else {
            buf_free(&sse);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return hit;
}

// The answer to h for a finished turn (fields as env_step gives them); for a
// chat, *assistant is the message as the client will see it.
static char *turn_reply(Serve *s, Held *h, const json_t *fields, json_t **assistant, bool *sse) {
    json_t *pail = json_pack("{s:I}", "adapter_version", (json_int_t)s->version);
    if (pail && h->kind == HK_CHAT && h->k < s->cfg.max_episodes) {
        char eid[232];
        env_episode_id(s->prefix, h->k, eid, sizeof eid);
        json_object_set_new(pail, "episode", json_string(eid));
        json_object_set_new(pail, "turn", json_integer(json_integer_value(json_object_get(fields, "turn"))));
        json_object_set_new(pail, "final", json_boolean(json_is_true(json_object_get(fields, "final"))));
        json_object_set_new(pail, "segment", json_integer(s->eps[h->k].segments + 1 + (h->seg != NULL)));
    }
    *sse = h->stream;
    char *body = pail ? openai_turn_reply(&h->os, fields, h->tools_on, h->stop, pail, h->stream,
                                          (const char *)h->sent.data, h->sent.len, assistant) : NULL;
    json_decref(pail);
    return body;
}

// The held request of k gets its answer (fields as env_step gives them; took_turn:
// the model took a turn, as op_end's empty answer does not).
static void answer_turn(Serve *s, int k, const json_t *fields, bool took_turn) {
    Held *h = holder(s, k);
    if (!h) return;
    json_t *assistant = NULL;
    bool sse = false;
    char *body = turn_reply(s, h, fields, &assistant, &sse);
    if (!body) {
        push_error(s, h, 500, NULL, "out of memory for the answer");
    } else {
        if (sse) h->queued = true;
        out_push(s, h, sse ? 0 : 200, body, true);
    }
    unhold(s, k);
    if (k < s->cfg.max_episodes) {
        SEp *e = &s->eps[k];
        if (h->seg) {  // the engine took the edited history: it is the episode's now
            json_decref(e->history);
            e->history = h->seg;
            h->seg = NULL;
            e->segments++;
        }
        e->turns += took_turn;
        e->last_ms = time_mono_ms();
        if (json_is_true(json_object_get(fields, "final"))) e->final = true;
        if (assistant && e->history) json_array_append(e->history, assistant);
    }
    json_decref(assistant);
    wake(s);
}

static void op_free(Env *env) {
    Serve *s = (Serve *)env;
    if (!s) return;
    if (s->thread_up) {
        // Claims still waiting get 503, and what is queued goes out: the loop runs
        // a little longer for the writes to leave.
        pthread_mutex_lock(&s->mu);
        s->closing = true;
        wake(s);
        pthread_mutex_unlock(&s->mu);
        struct timeval tv = {0, 300000};
        event_base_loopexit(s->evb, &tv);
        pthread_join(s->thread, NULL);
    }
    // The connections first: closing them runs on_close on the requests still
    // held (a claim is freed there), which must still exist.
    if (s->http) evhttp_free(s->http);
    s->http = NULL;
    conns_free(&s->conns);
    // What is still held; a request whose client left is ours to free.
    for (int i = 0; i < s->on; i++) {  // replies never sent: a last one frees its request
        free(s->out[i].body);
        if (s->out[i].last) held_drop(s->out[i].h);
    }
    for (int k = 0; s->eps && k < s->cfg.max_episodes; k++) { held_drop(s->eps[k].pend); ep_reset(&s->eps[k]); }
    for (int x = 0; s->extra && x < s->cfg.max_extra; x++) held_drop(s->extra[x]);
    for (Held *h = s->claims, *n; h; h = n) { n = h->next; held_drop(h); }
    for (int i = 0; i < s->qn; i++) env_event_free(&s->q[i]);
    if (s->wake) event_free(s->wake);
    if (s->tick) event_free(s->tick);
    if (s->evb) event_base_free(s->evb);
    if (s->ssl) SSL_CTX_free(s->ssl);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->q);
    free(s->out);
    free(s->eps);
    free(s->extra);
    free(s->model_name);
    free(s->api_key);
    free(s);
}

static void op_begin(Env *env, const char *prefix) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->cfg.max_episodes; k++) {
        SEp *e = &s->eps[k];
        if (e->pend) push_error(s, e->pend, 503, "batch_over", "the episode's batch is over: start a new episode");
        ep_reset(e);
    }
    snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
    s->batch_version = s->version;
    wake(s);
    pthread_mutex_unlock(&s->mu);
}

static int op_start(Env *env, int k, const json_t *row, PailErr *err) {
    Serve *s = (Serve *)env;
    if (k < 0 || k >= s->cfg.max_episodes) return err_set(err, PAIL_ERR_INVALID, "%s: episode %d of %d", s->what, k,
                                                           s->cfg.max_episodes);
    pthread_mutex_lock(&s->mu);
    ep_reset(&s->eps[k]);
    s->eps[k].st = SE_UNCLAIMED;
    s->eps[k].row = row ? json_deep_copy(row) : json_null();
    wake(s);  // claims waiting
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int op_step(Env *env, int k, const json_t *fields, PailErr *err) {
    (void)err;
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    answer_turn(s, k, fields, true);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int op_end(Env *env, int k, const char *reason, PailErr *err) {
    (void)reason, (void)err;
    Serve *s = (Serve *)env;
    json_t *f = json_pack("{s:i, s:s, s:s, s:[], s:s, s:b, s:{s:i, s:i}}", "turn", 0, "text", "", "content", "",
                          "tool_calls", "finish", "length", "final", 1, "usage", "prompt_tokens", 0,
                          "completion_tokens", 0);
    pthread_mutex_lock(&s->mu);
    if (k >= 0 && k < s->cfg.max_episodes) {
        json_object_set_new(f, "turn", json_integer(s->eps[k].turns));
        answer_turn(s, k, f, false);
        s->eps[k].final = true;  // (also without a request to answer)
    }
    pthread_mutex_unlock(&s->mu);
    json_decref(f);
    return 0;
}

static void op_refuse(Env *env, int k, const char *why) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    Held *h = holder(s, k);
    if (h && k < s->cfg.max_episodes) {
        char msg[800];
        snprintf(msg, sizeof msg, "the edited history cannot start a new segment: %s", why);
        push_error(s, h, 400, "history_mismatch", msg);
        unhold(s, k);
        s->eps[k].last_ms = time_mono_ms();
        wake(s);
    }
    pthread_mutex_unlock(&s->mu);
}

static void op_cancel(Env *env, int k, const char *why) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    Held *h = holder(s, k);
    if (h) {
        bool later = why && !strncmp(why, "abandoned", 9);
        push_error(s, h, later ? 503 : 400, later ? "abandoned" : "episode_failed", why ? why : "the episode failed");
        unhold(s, k);
        wake(s);
    }
    if (k >= 0 && k < s->cfg.max_episodes && s->eps[k].st != SE_NONE) {
        if (s->eps[k].st == SE_OPEN) s->st.failed++;
        ep_reset(&s->eps[k]);
    }
    pthread_mutex_unlock(&s->mu);
}

static int op_poll(Env *env, int wait_ms, EnvEvent *ev, int cap, int *n, PailErr *err) {
    (void)err;
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    if (!s->qn && wait_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += wait_ms / 1000;
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        while (!s->qn && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0) {}
    }
    int m = s->qn < cap ? s->qn : cap;
    if (m) {  // (the queue is NULL until its first event)
        memcpy(ev, s->q, (size_t)m * sizeof *ev);
        memmove(s->q, s->q + m, (size_t)(s->qn - m) * sizeof *s->q);
    }
    s->qn -= m;
    *n = m;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int op_open(const Env *env) {  // under mu or from the worker's thread
    const Serve *s = (const Serve *)env;
    int n = 0;
    for (int k = 0; k < s->cfg.max_episodes; k++) n += s->eps[k].st == SE_OPEN;
    return n;
}

static EnvStats op_stats(const Env *env) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    EnvStats st = s->st;
    pthread_mutex_unlock(&s->mu);
    return st;
}

static const char *op_describe(const Env *env) { return ((const Serve *)env)->what; }

static const EnvOps SERVE_OPS = {op_free, op_begin, op_start, op_step, op_end, op_cancel, op_poll, op_open, op_stats,
                                 op_describe, op_token, op_refuse};

void serve_set_version(Env *env, long version) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    s->version = version;
    pthread_mutex_unlock(&s->mu);
}

const char *serve_url(const Env *env) { return ((const Serve *)env)->url; }

void serve_finish(Env *env, const char *why) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    snprintf(s->finishing, sizeof s->finishing, "%s", why && *why ? why : "the run is done");
    wake(s);  // the claims waiting are answered
    pthread_mutex_unlock(&s->mu);
}

int serve_in_flight(Env *env) {
    Serve *s = (Serve *)env;
    pthread_mutex_lock(&s->mu);
    int n = op_open(env);
    for (int x = 0; x < s->cfg.max_extra; x++) n += s->extra[x] != NULL;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int serve_open(Env **out, const ServeConfig *cfg, PailErr *err) {
    *out = NULL;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, (void (*)(void))evthread_use_pthreads);
    // A client that closes its connection while we write must not kill the
    // worker (SIGPIPE); the write fails and evhttp drops the connection. (A
    // --serve worker starts no child programs, which would inherit this.)
    signal(SIGPIPE, SIG_IGN);
    char host[256], listen[300];
    int port = 0;
    // A bare port listens on loopback.
    snprintf(listen, sizeof listen, "%s%s", strspn(cfg->listen, "0123456789") == strlen(cfg->listen) ? "127.0.0.1:" : "",
             cfg->listen);
    if (net_split_listen(listen, "--serve", host, sizeof host, &port, err) < 0) return -1;
    bool loop = net_is_loopback(host), tls = cfg->cert || cfg->key;
    if (!!cfg->cert != !!cfg->key)
        return err_set(err, PAIL_ERR_INVALID, "--serve-cert and --serve-tls-key come together");
    if (!loop && (!tls || !cfg->api_key))
        return err_set(err, PAIL_ERR_INVALID, "--serve %s is not a loopback address: it needs TLS (--serve-cert, "
                       "--serve-tls-key) and a bearer key (--serve-api-key-file)", cfg->listen);
    if (cfg->max_episodes < 1 || cfg->max_extra < 1 || cfg->group_size < 1 || !cfg->tok || !cfg->model_name ||
        !(cfg->episode_timeout_s > 0))
        return err_set(err, PAIL_ERR_INVALID, "serve: episodes, requests and group size >= 1, a tokenizer, a model name "
                       "and an episode timeout > 0");
    if (cfg->max_connections < 1 || !(cfg->header_timeout_s > 0) || !(cfg->idle_timeout_s > 0))
        return err_set(err, PAIL_ERR_INVALID, "serve: --serve-max-connections >= 1, --serve-header-timeout and "
                       "--serve-idle-timeout > 0");
    // Descriptors for every connection up to the cap and those closed but not
    // yet let go (slack), plus the worker's own files.
    int slack = cfg->max_connections / 4 > 16 ? cfg->max_connections / 4 : 16;
    if (net_reserve_fds((long)cfg->max_connections + slack + 64, "--serve-max-connections", err) < 0) return -1;
    Serve *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, PAIL_ERR_NOMEM, "serve: out of memory");
    s->base.ops = &SERVE_OPS;
    s->cfg = *cfg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->version = -1;
    s->started_unix = time_unix_s();
    s->model_name = strdup(cfg->model_name);
    s->api_key = cfg->api_key ? strdup(cfg->api_key) : NULL;
    s->eps = calloc((size_t)cfg->max_episodes, sizeof *s->eps);
    s->extra = calloc((size_t)cfg->max_extra, sizeof *s->extra);
    s->slack = slack;
    if (!s->model_name || (cfg->api_key && !s->api_key) || !s->eps || !s->extra ||
        conns_init(&s->conns, conn_release, conn_freed, s) < 0) {
        op_free(&s->base);
        return err_set(err, PAIL_ERR_NOMEM, "serve: out of memory");
    }
    if (tls && net_tls_server(cfg->cert, cfg->key, "--serve-cert", "--serve-tls-key", &s->ssl, err) < 0) {
        op_free(&s->base);
        return -1;
    }
    s->evb = event_base_new();
    s->http = s->evb ? evhttp_new(s->evb) : NULL;
    s->wake = s->evb ? event_new(s->evb, -1, 0, wake_cb, s) : NULL;
    s->tick = s->evb ? event_new(s->evb, -1, EV_PERSIST, tick_cb, s) : NULL;
    if (!s->http || !s->wake || !s->tick) {
        op_free(&s->base);
        return err_set(err, PAIL_ERR_NOMEM, "serve: cannot set up the event loop");
    }
    // (a body over the limit never reaches evhttp's check: conn_input; a chunked one does)
    evhttp_set_max_body_size(s->http, OPENAI_MAX_BODY);
    evhttp_set_max_headers_size(s->http, SERVE_MAX_HEAD);
    // A stall while reading a request or writing a reply. evhttp reads nothing
    // while a request waits for its answer, so a long turn is not cut by it.
    evhttp_set_timeout(s->http, (int)(s->cfg.idle_timeout_s + 0.999));
    // Every method reaches handle(), which answers with OpenAI's JSON (evhttp's own refusal is an HTML 501).
    // (1 << 15: libevent 2.1's type for a method it does not know, e.g. "FOO")
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH | (1 << 15));
    evhttp_set_gencb(s->http, handle, s);
    evhttp_set_bevcb(s->http, bev_cb, s);
    s->bound = evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)port);
    if (!s->bound) {
        int e = errno;
        op_free(&s->base);
        return err_set(err, PAIL_ERR_IO, "--serve %s: cannot listen: %s", cfg->listen, strerror(e));
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(s->bound), (struct sockaddr *)&ss, &sl) == 0)
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    snprintf(s->url, sizeof s->url, "%s://%s%s%s:%d", s->ssl ? "https" : "http", strchr(host, ':') ? "[" : "", host,
             strchr(host, ':') ? "]" : "", s->port);
    snprintf(s->what, sizeof s->what, "endpoint %s", s->url);
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(s->bound), accept_error);
    struct timeval tv = {0, SWEEP_MS * 1000};
    event_add(s->tick, &tv);
    if (pthread_create(&s->thread, NULL, loop_main, s) != 0) {
        op_free(&s->base);
        return err_set(err, PAIL_ERR_IO, "serve: cannot start its thread");
    }
    s->thread_up = true;
    *out = &s->base;
    return 0;
}
