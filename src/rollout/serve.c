// The OpenAI-compatible endpoint (see serve.h). Everything both threads touch
// (episodes, ad-hoc slots, the event queue, the reply queue, whether a held
// request's connection is still there) sits under s->mu; the libevent thread
// alone calls evhttp, the worker's thread alone the tokenizer.
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
#include <event2/thread.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include "core/buf.h"
#include "core/log.h"
#include "core/net.h"
#include "core/timeutil.h"

#define CLAIM_WAIT_S 30          // POST /v1/episodes: default wait for an episode
#define CLAIM_WAIT_MAX_S 300
#define MAX_BODY (8u << 20)
#define MAX_STOP 4

enum { HK_CLAIM, HK_CHAT, HK_TEXT };                  // what a held request waits for
enum { SE_NONE, SE_UNCLAIMED, SE_OPEN };              // a batch episode

typedef struct Serve Serve;

typedef struct Held {            // a request answered later (freed by the libevent thread after its last reply)
    Serve *s;
    struct evhttp_request *req;  // NULL once evhttp freed it (its connection freed by evhttp_free)
    bool gone;                   // its client closed the connection: evhttp left req to us, and our
                                 // last reply to it (which goes nowhere) frees it
    int kind, k;                 // k: the episode or ad-hoc slot
    bool stream, include_usage, tools_on, role_sent;
    bool queued;                 // worker: event-stream pieces queued (an error must be one too)
    bool started;                // libevent thread: the streamed reply's head is sent
    char id[48];                 // chatcmpl-... / cmpl-...
    int64_t created, deadline_ms;
    json_t *stop;                // ad hoc: an array of stop strings, or NULL
    json_t *seg;                 // an episode's edited history, its new segment once the engine takes it (owned)
    Buf sent;                    // the turn's text streamed so far
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
    // under mu:
    SEp *eps;                    // (max_episodes)
    Held **extra;                // (max_extra) the ad-hoc request in each slot, or NULL
    char prefix[208];
    long version, batch_version;
    Held *claims;                // POST /v1/episodes waiting, oldest first
    bool closing;                // op_free: answer what waits, hand out nothing more
    EnvEvent *q;                 // events for env_poll
    int qn, qcap;
    Out *out;                    // replies for the libevent thread
    int on, ocap;
    EnvStats st;
    int64_t started_unix;
    uint64_t seq;                // response ids
};

// ---------- small helpers ----------

static const char *status_reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
    }
}

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 409: return "conflict_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    case 500: return "server_error";
    default: return "invalid_request_error";
    }
}

// {"error": {"message", "type", "param", "code"}} (malloc'd).
static char *error_body(int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static char *error_body(int status, const char *param, const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *j = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type", error_type(status), "param",
                          param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return b;
}

static void send_body(struct evhttp_request *req, int status, const char *ctype, const char *body) {
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Content-Type", ctype);
    if (status == 503 || status == 429) evhttp_add_header(oh, "Retry-After", "1");
    struct evbuffer *b = evbuffer_new();
    if (b && body) evbuffer_add(b, body, strlen(body));
    evhttp_send_reply(req, status, status_reason(status), b);
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
    char *b = error_body(status, param, code, "%s", msg);
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

// One server-sent event, "data: TEXT\n\n", onto b.
static void sse_event(Buf *b, const char *text) {
    buf_append(b, "data: ", 6);
    buf_append(b, text, strlen(text));
    buf_append(b, "\n\n", 2);
}

static void push_error(Serve *s, Held *h, int status, const char *code, const char *msg) {
    if (h->stream && h->queued) {  // an event stream already under way: the error is its last event
        char *b = error_body(status, NULL, code, "%s", msg);
        Buf sse = {0};
        if (b) sse_event(&sse, b);
        sse_event(&sse, "[DONE]");
        buf_append(&sse, "", 1);
        free(b);
        out_push(s, h, 0, (char *)sse.data, true);
        return;
    }
    out_push(s, h, status, error_body(status, NULL, code, "%s", msg), true);
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
    json_decref(h->stop);
    json_decref(h->seg);
    free(h);
}

// Which batch episode an id names (-1: none; no batch has begun while the prefix is empty).
static int episode_k(const Serve *s, const char *id) {
    return s->prefix[0] ? env_episode_index(s->prefix, id, s->cfg.max_episodes) : -1;
}

// ---------- message normalization ----------

// A message's content as one string: a string, null / absent (""), or an
// array of {"type": "text", "text": ...} parts joined. NULL: not text.
static json_t *content_text(const json_t *c) {
    if (!c || json_is_null(c)) return json_string("");
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!json_is_array(c)) return NULL;
    Buf b = {0};
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *t = json_string_value(json_object_get(p, "text"));
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (!t || !ty || strcmp(ty, "text")) { buf_free(&b); return NULL; }
        buf_append(&b, t, strlen(t));
    }
    json_t *r = json_stringn(b.data ? (char *)b.data : "", b.len);
    buf_free(&b);
    return r;
}

// The request's messages as the template takes them (content a string), or
// NULL with why in msg.
static json_t *messages_check(const json_t *m, char *msg, size_t cap) {
    if (!json_is_array(m) || !json_array_size(m)) {
        snprintf(msg, cap, "'messages' must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(m, i, v) {
        const char *role = json_string_value(json_object_get(v, "role"));
        static const char *roles[] = {"system", "developer", "user", "assistant", "tool", "ipython", NULL};
        int r = 0;
        while (role && roles[r] && strcmp(roles[r], role)) r++;
        if (!json_is_object(v) || !role || !roles[r]) {
            snprintf(msg, cap, "messages[%zu]: 'role' must be one of system, developer, user, assistant, tool", i);
            json_decref(out);
            return NULL;
        }
        json_t *t = content_text(json_object_get(v, "content"));
        if (!t) {
            snprintf(msg, cap, "messages[%zu].content: a string, null or an array of text parts (only text is served)", i);
            json_decref(out);
            return NULL;
        }
        json_t *c = json_copy(v);
        json_object_set_new(c, "content", t);
        json_t *tc = json_object_get(c, "tool_calls");
        if (tc && !json_is_null(tc) && !json_is_array(tc)) {
            snprintf(msg, cap, "messages[%zu].tool_calls: an array", i);
            json_decref(c);
            json_decref(out);
            return NULL;
        }
        // Templates read arguments as objects: decode the OpenAI string form.
        if (json_is_array(tc)) {
            json_t *ntc = json_array(), *call;
            size_t ci;
            json_array_foreach(tc, ci, call) {
                json_t *cc = json_deep_copy(call), *fn = json_object_get(cc, "function");
                json_t *args = json_object_get(fn, "arguments");
                if (json_is_string(args)) {
                    json_t *a = json_loads(json_string_value(args), 0, NULL);
                    if (a) json_object_set_new(fn, "arguments", a);
                }
                json_array_append_new(ntc, cc);
            }
            json_object_set_new(c, "tool_calls", ntc);
        } else if (tc) {
            json_object_del(c, "tool_calls");
        }
        json_array_append_new(out, c);
    }
    return out;
}

// What must agree between a message the client resends and the one it was
// given (or sent before): role, content, the calls' names and arguments, the
// tool message's id and name.
static json_t *canon(const json_t *m) {
    json_t *c = json_pack("{s:O}", "role", json_object_get(m, "role"));
    json_t *t = content_text(json_object_get(m, "content"));
    json_object_set_new(c, "content", t ? t : json_null());
    const char *keys[] = {"tool_call_id", "name", NULL};
    for (int i = 0; keys[i]; i++) {
        json_t *v = json_object_get(m, keys[i]);
        if (v && !json_is_null(v)) json_object_set(c, keys[i], v);
    }
    json_t *tc = json_object_get(m, "tool_calls");
    if (json_array_size(tc)) {
        json_t *calls = json_array(), *call;
        size_t i;
        json_array_foreach(tc, i, call) {
            json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
            json_t *a = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
            json_array_append_new(calls, json_pack("{s:O, s:o}", "name", json_object_get(fn, "name") ?
                                                   json_object_get(fn, "name") : json_null(), "arguments",
                                                   a ? a : args ? json_incref(args) : json_object()));
        }
        json_object_set_new(c, "tool_calls", calls);
    }
    return c;
}

static bool same_message(const json_t *a, const json_t *b) {
    json_t *ca = canon(a), *cb = canon(b);
    bool eq = json_equal(ca, cb);
    json_decref(ca);
    json_decref(cb);
    return eq;
}

// ---------- requests (libevent thread) ----------

static json_t *read_body(struct evhttp_request *req, bool optional, char *msg, size_t cap) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (!n && optional) return json_object();
    const char *p = (const char *)evbuffer_pullup(in, -1);
    json_error_t je;
    json_t *j = p ? json_loadb(p, n, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!json_is_object(j)) {
        if (j) snprintf(msg, cap, "the request body must be a JSON object");
        else snprintf(msg, cap, "we could not parse the JSON body of your request (%s at line %d)", p ? je.text : "empty",
                      p ? je.line : 0);
        json_decref(j);
        return NULL;
    }
    return j;
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
    while (s->closing && s->claims) {
        Held *h = s->claims;
        s->claims = h->next;
        claim_refuse(h, "stopping", STOPPING_MSG);
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

static void handle_claim(Serve *s, struct evhttp_request *req) {
    char msg[512];
    if (s->closing) {
        send_error(req, 503, NULL, "stopping", STOPPING_MSG);
        return;
    }
    json_t *b = read_body(req, true, msg, sizeof msg);
    if (!b) { send_error(req, 400, NULL, NULL, msg); return; }
    json_t *wv = json_object_get(b, "wait");
    double wait_s = CLAIM_WAIT_S;
    if (wv && (!json_is_number(wv) || json_number_value(wv) < 0 || json_number_value(wv) > CLAIM_WAIT_MAX_S)) {
        json_decref(b);
        send_error(req, 400, "wait", NULL, "'wait' must be a number of seconds in 0..300");
        return;
    }
    if (wv) wait_s = json_number_value(wv);
    json_decref(b);
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

static void handle_reward(Serve *s, struct evhttp_request *req, const char *id) {
    char msg[512];
    int k = open_episode(s, req, id, "POST /v1/episodes/{id}/reward");
    if (k < 0) return;
    SEp *e = &s->eps[k];
    json_t *b = read_body(req, false, msg, sizeof msg);
    if (!b) { send_error(req, 400, NULL, NULL, msg); return; }
    json_t *r = json_object_get(b, "reward"), *c = json_object_get(b, "components");
    const char *bad = NULL, *param = NULL;
    if (!env_reward_ok(r))
        bad = "'reward' must be a finite number within +-1e6", param = "reward";
    else if (c && !json_is_null(c) && !json_is_object(c))
        bad = "'components' must be an object of numbers", param = "components";
    else if (json_is_object(c) && !env_components_ok(c))
        bad = "'components' must be an object of finite numbers within +-1e6", param = "components";
    if (bad) { json_decref(b); send_error(req, 400, param, NULL, bad); return; }
    if (e->pend) {
        json_decref(b);
        send_error(req, 409, NULL, "turn_in_flight", "the episode has a chat request in flight: its reward comes after");
        return;
    }
    if (!e->turns) {
        json_decref(b);
        send_error(req, 400, NULL, "episode_has_no_turn", "the episode has had no assistant turn yet: nothing to reward");
        return;
    }
    EnvEvent *ev = push_event(s, ENV_REWARD, k);
    double rv = json_number_value(r);
    if (ev) {
        ev->reward = rv;
        ev->components = json_is_object(c) ? json_incref(c) : NULL;
    }
    json_decref(b);
    ep_reset(e);
    char eid[232];
    env_episode_id(s->prefix, k, eid, sizeof eid);
    send_json(req, 200, json_pack("{s:s, s:s, s:f}", "id", eid, "status", "ended", "reward", rv));
}

// Sampling settings of a request, checked (ad hoc: they apply; in an episode
// the run's apply). NULL with param and msg.
static json_t *sampling_params(const json_t *b, bool chat, int default_max, const char **param, char *msg, size_t cap) {
    json_t *p = json_object(), *v;
    if ((v = json_object_get(b, "temperature")) && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 2) { *param = "temperature"; goto bad; }
        json_object_set(p, "temperature", v);
    }
    if ((v = json_object_get(b, "top_p")) && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1) { *param = "top_p"; goto bad; }
        json_object_set(p, "top_p", v);
    }
    if ((v = json_object_get(b, "top_k")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) { *param = "top_k"; goto bad; }
        json_object_set(p, "top_k", v);
    }
    if ((v = json_object_get(b, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v)) { *param = "seed"; goto bad; }
        json_object_set(p, "seed", v);
    }
    const char *mk = chat && json_object_get(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((v = json_object_get(b, mk)) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1) { *param = mk; goto bad; }
        json_object_set(p, "max_tokens", v);
    } else {
        json_object_set_new(p, "max_tokens", json_integer(default_max));
    }
    if ((v = json_object_get(b, "n")) && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1)) {
        *param = "n";
        snprintf(msg, cap, "'n': only 1 is served (send n requests)");
        json_decref(p);
        return NULL;
    }
    return p;
bad:
    snprintf(msg, cap, "'%s' is out of range or of the wrong type", *param);
    json_decref(p);
    return NULL;
}

// stop: a string or an array of up to 4 non-empty strings; *out NULL when none.
static int stop_check(const json_t *v, json_t **out) {
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        if (!json_string_length(v)) return -1;
        *out = json_pack("[O]", v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > MAX_STOP) return -1;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_string(x) || !json_string_length(x)) return -1;
    *out = json_array_size(v) ? json_incref((json_t *)v) : NULL;
    return 0;
}

static bool tools_check(const json_t *t, char *msg, size_t cap) {
    if (!t || json_is_null(t)) return true;
    if (!json_is_array(t)) { snprintf(msg, cap, "'tools' must be an array"); return false; }
    size_t i;
    json_t *x;
    json_array_foreach(t, i, x) {
        const char *ty = json_string_value(json_object_get(x, "type"));
        if (!ty || strcmp(ty, "function") || !json_is_string(json_object_get(json_object_get(x, "function"), "name"))) {
            snprintf(msg, cap, "tools[%zu]: want {\"type\": \"function\", \"function\": {\"name\": ..., ...}}", i);
            return false;
        }
    }
    return true;
}

// An episode's chat request: its opening, or the history so far plus new messages.
// stop: the request's stop strings (borrowed; NULL: none): the turn ends at one,
// as at the model's end of turn (the row keeps every sampled token; the answer is
// cut before the string).
static void episode_turn(Serve *s, struct evhttp_request *req, const char *id, json_t *msgs, json_t *tools,
                         json_t *stop, bool stream, bool usage) {
    char msg[700];
    int k = open_episode(s, req, id, "X-Pail-Episode");
    if (k < 0) return;
    SEp *e = &s->eps[k];
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
        while (i < have && i < n && same_message(json_array_get(e->history, i), json_array_get(msgs, i))) i++;
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
    h->stream = stream;
    h->include_usage = usage;
    h->stop = stop ? json_incref(stop) : NULL;
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

static void handle_generate(Serve *s, struct evhttp_request *req, bool chat) {
    char msg[700];
    const char *param = NULL;
    json_t *b = read_body(req, false, msg, sizeof msg);
    if (!b) { send_error(req, 400, NULL, NULL, msg); return; }
    const char *model = json_string_value(json_object_get(b, "model"));
    json_t *stream_v = json_object_get(b, "stream"), *so = json_object_get(b, "stream_options");
    const char *epid = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Pail-Episode");
    json_t *msgs = NULL, *params = NULL, *stop = NULL, *tools = json_object_get(b, "tools");
    const char *tc = json_string_value(json_object_get(b, "tool_choice"));
    json_t *tcv = json_object_get(b, "tool_choice");
    int status = 400;
    const char *code = NULL;
    if (!model) { param = "model"; snprintf(msg, sizeof msg, "you must provide a model parameter"); goto fail; }
    if (strcmp(model, s->model_name)) {
        status = 404, code = "model_not_found", param = "model";
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this endpoint serves '%.200s' (GET /v1/models)",
                 model, s->model_name);
        goto fail;
    }
    if (stream_v && !json_is_boolean(stream_v) && !json_is_null(stream_v)) {
        param = "stream";
        snprintf(msg, sizeof msg, "'stream' must be a boolean");
        goto fail;
    }
    bool stream = json_is_true(stream_v), usage = json_is_true(json_object_get(so, "include_usage"));
    if (chat) {
        if (!(msgs = messages_check(json_object_get(b, "messages"), msg, sizeof msg))) { param = "messages"; goto fail; }
        if (!tools_check(tools, msg, sizeof msg)) { param = "tools"; goto fail; }
        if (tcv && !json_is_null(tcv) && (!tc || (strcmp(tc, "auto") && strcmp(tc, "none")))) {
            param = "tool_choice";
            snprintf(msg, sizeof msg, "'tool_choice': \"auto\" and \"none\" are served (the model decides)");
            goto fail;
        }
        if (tc && !strcmp(tc, "none")) tools = NULL;
    } else {
        if (epid) {
            snprintf(msg, sizeof msg, "episodes are conversations: use /v1/chat/completions with X-Pail-Episode");
            goto fail;
        }
        json_t *p = json_object_get(b, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!json_is_string(p) || !json_string_length(p)) {
            param = "prompt";
            snprintf(msg, sizeof msg, "'prompt' must be a non-empty string (or an array of one)");
            goto fail;
        }
        msgs = json_incref(p);
        const char *unsup[] = {"echo", "logprobs", "suffix", "best_of", NULL};
        for (int i = 0; unsup[i]; i++) {
            json_t *v = json_object_get(b, unsup[i]);
            if (v && !json_is_null(v) && !json_is_false(v) && !(json_is_integer(v) && json_integer_value(v) <= 1 &&
                                                               !strcmp(unsup[i], "best_of"))) {
                param = unsup[i];
                snprintf(msg, sizeof msg, "'%s' is not served", unsup[i]);
                goto fail;
            }
        }
    }
    if (!(params = sampling_params(b, chat, chat ? s->cfg.max_new_tokens : 16, &param, msg, sizeof msg))) goto fail;
    if (stop_check(json_object_get(b, "stop"), &stop) < 0) {
        param = "stop";
        snprintf(msg, sizeof msg, "'stop' must be a non-empty string or an array of up to %d of them", MAX_STOP);
        goto fail;
    }
    if (epid) {
        episode_turn(s, req, epid, msgs, tools, stop, stream, usage);
        goto done;
    }
    int x = 0;
    while (x < s->cfg.max_extra && s->extra[x]) x++;
    if (x == s->cfg.max_extra) {
        status = 429, code = "too_many_requests";
        snprintf(msg, sizeof msg, "%d requests are in flight (--serve-max-requests): retry", s->cfg.max_extra);
        goto fail;
    }
    Held *h = held_new(s, req, chat ? HK_CHAT : HK_TEXT, s->cfg.max_episodes + x);
    EnvEvent *ev = h ? push_event(s, ENV_MESSAGES, s->cfg.max_episodes + x) : NULL;
    if (!ev) {
        if (h) { held_detach(h); held_free(h); }
        status = 500;
        snprintf(msg, sizeof msg, "out of memory");
        goto fail;
    }
    h->stream = stream;
    h->include_usage = usage;
    h->tools_on = chat && json_array_size(tools) && s->cfg.tool_format != TOOL_FORMAT_NONE;
    h->stop = stop;
    stop = NULL;
    ev->messages = msgs;
    msgs = NULL;
    ev->tools = chat && json_array_size(tools) ? json_incref(tools) : NULL;
    ev->params = params;
    params = NULL;
    s->extra[x] = h;
    goto done;
fail:
    send_error(req, status, param, code, msg);
done:
    json_decref(b);
    json_decref(msgs);
    json_decref(params);
    json_decref(stop);
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

static void handle(struct evhttp_request *req, void *arg) {
    Serve *s = arg;
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *u = evhttp_uri_parse(uri);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool get = cmd == EVHTTP_REQ_GET, post = cmd == EVHTTP_REQ_POST;
    char msg[600];
    if (!path) path = "";
    pthread_mutex_lock(&s->mu);
    if (!strcmp(path, "/health") && get) {
        send_json(req, 200, json_pack("{s:s, s:I, s:i}", "status", "ok", "adapter_version", (json_int_t)s->version,
                                      "episodes_open", s->base.ops->open(&s->base)));
    } else if (!authorized(s, req)) {
        send_error(req, 401, NULL, "invalid_api_key", "incorrect API key provided (Authorization: Bearer KEY)");
    } else if (!strcmp(path, "/v1/models") && get) {
        handle_models(s, req, NULL);
    } else if (!strncmp(path, "/v1/models/", 11) && get) {
        char *one = evhttp_uridecode(path + 11, 0, NULL);
        handle_models(s, req, one ? one : "");
        free(one);
    } else if (!strcmp(path, "/v1/chat/completions") && post) {
        handle_generate(s, req, true);
    } else if (!strcmp(path, "/v1/completions") && post) {
        handle_generate(s, req, false);
    } else if (!strcmp(path, "/v1/episodes") && post) {
        handle_claim(s, req);
    } else if (!strncmp(path, "/v1/episodes/", 13) && post && strlen(path) > 20 &&
               !strcmp(path + strlen(path) - 7, "/reward")) {
        char raw[256];  // /v1/episodes/{id}/reward
        snprintf(raw, sizeof raw, "%.*s", (int)(strlen(path) - 20 < 255 ? strlen(path) - 20 : 255), path + 13);
        char *id = evhttp_uridecode(raw, 0, NULL);
        handle_reward(s, req, id ? id : "");
        free(id);
    } else {
        bool known = !strcmp(path, "/v1/models") || !strcmp(path, "/v1/chat/completions") ||
                     !strcmp(path, "/v1/completions") || !strcmp(path, "/v1/episodes") || !strcmp(path, "/health");
        snprintf(msg, sizeof msg, "%s %.300s", known ? "method not allowed:" : "unknown request URL:", path);
        send_error(req, known ? 405 : 404, NULL, known ? "method_not_allowed" : "unknown_url", msg);
    }
    pthread_mutex_unlock(&s->mu);
    if (u) evhttp_uri_free(u);
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
                if (b) evhttp_send_reply_chunk(h->req, b);
                if (b) evbuffer_free(b);
                if (o->last) evhttp_send_reply_end(h->req);
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

// Every 200 ms: claims past their wait, episodes idle past the timeout.
static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    Serve *s = arg;
    int64_t now = time_mono_ms();
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

static struct bufferevent *bev_cb(struct event_base *base, void *arg) {
    Serve *s = arg;
    SSL *ssl = SSL_new(s->ssl);
    return ssl ? bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE) : NULL;
}

static void *loop_main(void *arg) {
    Serve *s = arg;
    event_base_dispatch(s->evb);
    return NULL;
}

// ---------- the worker's side (Env) ----------

// Raw decoded text of a turn (special tokens skipped), invalid UTF-8 replaced. 0 / -1.
static int turn_text(const Serve *s, const int32_t *ids, int n, Buf *out) {
    Buf raw = {0};
    PailErr err = {0};
    buf_reset(out);
    int rc = tokenizer_decode(s->cfg.tok, ids, (size_t)n, true, &raw, &err);
    // Hold back a trailing incomplete UTF-8 sequence (the next token completes it).
    size_t len = raw.len;
    if (rc == 0 && len) {
        size_t i = len, back = 0;
        while (i > 0 && back < 4 && (raw.data[i - 1] & 0xC0) == 0x80) i--, back++;
        if (i > 0) {
            uint8_t c = raw.data[i - 1];
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (need > 1 && back + 1 < need) len = i - 1;
        }
    }
    if (rc == 0 && (utf8_append_lossy(out, raw.data ? raw.data : (const uint8_t *)"", len) < 0 ||
                    buf_append(out, "", 0) < 0))
        rc = -1;
    buf_free(&raw);
    return rc;
}

// The first stop string in text: its offset, or -1.
static long stop_at(const json_t *stop, const char *text) {
    long best = -1;
    size_t i;
    json_t *x;
    json_array_foreach(stop, i, x) {
        const char *p = strstr(text, json_string_value(x));
        if (p && (best < 0 || p - text < best)) best = p - text;
    }
    return best;
}

static size_t stop_longest(const json_t *stop) {
    size_t m = 0, i;
    json_t *x;
    json_array_foreach(stop, i, x) if (json_string_length(x) > m) m = json_string_length(x);
    return m;
}

static Held *holder(Serve *s, int k) {
    if (k >= 0 && k < s->cfg.max_episodes) return s->eps[k].pend;
    if (k >= s->cfg.max_episodes && k < s->cfg.max_episodes + s->cfg.max_extra) return s->extra[k - s->cfg.max_episodes];
    return NULL;
}

static void unhold(Serve *s, int k) {
    if (k >= 0 && k < s->cfg.max_episodes) s->eps[k].pend = NULL;
    else if (k >= s->cfg.max_episodes && k < s->cfg.max_episodes + s->cfg.max_extra) s->extra[k - s->cfg.max_episodes] = NULL;
}

static void sse_append(Buf *b, json_t *j) {  // steals j
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (t) sse_event(b, t);
    free(t);
}

static json_t *chunk_json(Serve *s, Held *h, json_t *delta, const char *finish) {  // steals delta
    if (h->kind == HK_TEXT)
        return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:o}]}", "id", h->id, "object", "text_completion",
                         "created", (json_int_t)h->created, "model", s->model_name, "choices", "index", 0, "text",
                         delta, "logprobs", "finish_reason", finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:o}]}", "id", h->id, "object", "chat.completion.chunk",
                     "created", (json_int_t)h->created, "model", s->model_name, "choices", "index", 0, "delta", delta,
                     "logprobs", "finish_reason", finish ? json_string(finish) : json_null());
}

static json_t *content_delta(Held *h, const char *text) {
    if (h->kind == HK_TEXT) return json_string(text);
    json_t *d = json_pack("{s:s}", "content", text);
    if (d && !h->role_sent) json_object_set_new(d, "role", json_string("assistant"));
    if (d) h->role_sent = true;
    return d;
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
    Buf t = {0};
    if (turn_text(s, turn, n, &t) < 0) { buf_free(&t); return false; }
    const char *text = t.data ? (char *)t.data : "";
    long cut = stops ? stop_at(h->stop, text) : -1;
    bool hit = cut >= 0;
    size_t safe = hit ? (size_t)cut : t.len ? t.len - 1 : 0;  // t.len counts the NUL
    if (!hit && stops) {  // keep back what could begin a stop string
        size_t hold = stop_longest(h->stop) - 1;
        safe = safe > hold ? safe - hold : 0;
    }
    while (safe > 0 && ((uint8_t)text[safe] & 0xC0) == 0x80) safe--;  // never inside a character
    pthread_mutex_lock(&s->mu);
    size_t have = h->sent.len;
    // The text so far extends what was streamed (it does unless a decode changed an earlier piece).
    if (live && safe > have && !memcmp(text, h->sent.data ? (char *)h->sent.data : "", have)) {
        char *piece = strndup(text + have, safe - have);
        Buf sse = {0};
        if (piece) sse_append(&sse, chunk_json(s, h, content_delta(h, piece), NULL));
        free(piece);
        if (sse.len && buf_append(&sse, "", 1) == 0 && buf_append(&h->sent, text + have, safe - have) == 0) {
            h->queued = true;
            out_push(s, h, 0, (char *)sse.data, false);
            wake(s);
        } else {
            buf_free(&sse);
        }
    }
    pthread_mutex_unlock(&s->mu);
    buf_free(&t);
    return hit;
}

// The answer to h for a finished turn (fields as env_step gives them); for a
// chat, *assistant is the message as the client will see it.
static char *turn_reply(Serve *s, Held *h, const json_t *fields, json_t **assistant, bool *sse) {
    const char *text = json_string_value(json_object_get(fields, "text"));
    const char *finish = json_string_value(json_object_get(fields, "finish"));
    json_t *usage_in = json_object_get(fields, "usage");
    json_int_t pt = json_integer_value(json_object_get(usage_in, "prompt_tokens")),
               ct = json_integer_value(json_object_get(usage_in, "completion_tokens"));
    Buf content = {0};
    json_t *calls = json_array();
    const char *reasoning = NULL;
    if (h->tools_on) {
        const char *c = json_string_value(json_object_get(fields, "content"));
        buf_append(&content, c ? c : text ? text : "", strlen(c ? c : text ? text : ""));
        reasoning = json_string_value(json_object_get(fields, "reasoning"));
        size_t i;
        json_t *call;
        json_array_foreach(json_object_get(fields, "tool_calls"), i, call) {
            const char *raw = json_string_value(json_object_get(call, "raw"));
            if (raw) {  // malformed: the model's text stays visible to the agent
                if (content.len) buf_append(&content, "\n", 1);
                buf_append(&content, raw, strlen(raw));
                continue;
            }
            char cid[96];
            snprintf(cid, sizeof cid, "call_%s_%d_%zu", h->id + (h->kind == HK_TEXT ? 5 : 9),
                     (int)json_integer_value(json_object_get(fields, "turn")), i);
            char *args = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", cid, "type", "function",
                                                   "function", "name", json_object_get(call, "name"), "arguments",
                                                   args ? args : "{}"));
            free(args);
        }
    } else {
        buf_append(&content, text ? text : "", strlen(text ? text : ""));
    }
    buf_append(&content, "", 1);
    char *ctext = (char *)content.data;
    bool stopped_by_string = false;
    if (h->stop) {
        long cut = stop_at(h->stop, ctext);
        if (cut >= 0) { ctext[cut] = 0; stopped_by_string = true; }
    }
    const char *fr = finish && !strcmp(finish, "length") && !stopped_by_string ? "length"
                     : json_array_size(calls) ? "tool_calls" : "stop";
    json_t *usage = json_pack("{s:I, s:I, s:I}", "prompt_tokens", pt, "completion_tokens", ct, "total_tokens", pt + ct);
    json_t *pail = json_pack("{s:I}", "adapter_version", (json_int_t)s->version);
    if (h->kind == HK_CHAT && h->k < s->cfg.max_episodes) {
        char eid[232];
        env_episode_id(s->prefix, h->k, eid, sizeof eid);
        json_object_set_new(pail, "episode", json_string(eid));
        json_object_set_new(pail, "turn", json_integer(json_integer_value(json_object_get(fields, "turn"))));
        json_object_set_new(pail, "final", json_boolean(json_is_true(json_object_get(fields, "final"))));
        json_object_set_new(pail, "segment", json_integer(s->eps[h->k].segments + 1 + (h->seg != NULL)));
    }
    json_t *msg = NULL;
    if (h->kind == HK_CHAT) {
        msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                        ctext[0] || !json_array_size(calls) ? json_string(ctext) : json_null());
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        if (assistant) *assistant = json_deep_copy(msg);
        if (reasoning && reasoning[0]) json_object_set_new(msg, "reasoning_content", json_string(reasoning));
    }
    char *body = NULL;
    *sse = h->stream;
    if (!h->stream) {
        json_t *j;
        if (h->kind == HK_TEXT)
            j = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:s, s:n, s:s}], s:o, s:o}", "id", h->id, "object",
                          "text_completion", "created", (json_int_t)h->created, "model", s->model_name, "choices",
                          "index", 0, "text", ctext, "logprobs", "finish_reason", fr, "usage", usage, "pail", pail);
        else
            j = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:o, s:n, s:s}], s:o, s:o}", "id", h->id, "object",
                          "chat.completion", "created", (json_int_t)h->created, "model", s->model_name,
                          "system_fingerprint", "pail", "choices", "index", 0, "message", msg, "logprobs",
                          "finish_reason", fr, "usage", usage, "pail", pail);
        msg = NULL;
        body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
    } else {
        Buf b = {0};
        size_t len = strlen(ctext), have = h->sent.len;
        if (len > have && !memcmp(ctext, h->sent.data ? (char *)h->sent.data : "", have))
            sse_append(&b, chunk_json(s, h, content_delta(h, ctext + have), NULL));
        else if (h->kind == HK_CHAT && !h->role_sent) sse_append(&b, chunk_json(s, h, content_delta(h, ""), NULL));
        if (json_array_size(calls)) {
            json_t *dc = json_array(), *call;
            size_t i;
            json_array_foreach(calls, i, call) {
                json_t *c = json_deep_copy(call);
                json_object_set_new(c, "index", json_integer((json_int_t)i));
                json_array_append_new(dc, c);
            }
            sse_append(&b, chunk_json(s, h, json_pack("{s:o}", "tool_calls", dc), NULL));
        }
        if (reasoning && reasoning[0] && h->kind == HK_CHAT)
            sse_append(&b, chunk_json(s, h, json_pack("{s:s}", "reasoning_content", reasoning), NULL));
        json_t *fin = chunk_json(s, h, h->kind == HK_TEXT ? json_string("") : json_object(), fr);
        if (fin) json_object_set(fin, "pail", pail);
        sse_append(&b, fin);
        if (h->include_usage) {
            json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:O}", "id", h->id, "object",
                                  h->kind == HK_TEXT ? "text_completion" : "chat.completion.chunk", "created",
                                  (json_int_t)h->created, "model", s->model_name, "choices", "usage", usage);
            sse_append(&b, u);
        }
        sse_event(&b, "[DONE]");
        buf_append(&b, "", 1);
        body = (char *)b.data;
        json_decref(usage);
        json_decref(pail);
    }
    json_decref(msg);
    json_decref(calls);
    buf_free(&content);
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
    if (!s->model_name || (cfg->api_key && !s->api_key) || !s->eps || !s->extra) {
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
    evhttp_set_max_body_size(s->http, MAX_BODY);
    evhttp_set_max_headers_size(s->http, 65536);
    evhttp_set_timeout(s->http, 3600);  // a turn can take long under load; idle keep-alive closes after this
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    evhttp_set_gencb(s->http, handle, s);
    if (s->ssl) evhttp_set_bevcb(s->http, bev_cb, s);
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
    struct timeval tv = {0, 200000};
    event_add(s->tick, &tv);
    if (pthread_create(&s->thread, NULL, loop_main, s) != 0) {
        op_free(&s->base);
        return err_set(err, PAIL_ERR_IO, "serve: cannot start its thread");
    }
    s->thread_up = true;
    *out = &s->base;
    return 0;
}
