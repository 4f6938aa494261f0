// See openai.h. Moved out of serve.c's libevent callbacks so hostile bodies
// can be fuzzed without a socket (tests/fuzz/fuzz_openai.c).
#define _GNU_SOURCE  // memmem
#include "rollout/openai.h"
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rollout/sampler.h"
#include "shard/shard.h"

_Static_assert(OPENAI_MAX_COMPONENTS == SHARD_MAX_COMPONENTS, "a reward's components must fit a shard");

// ---------- errors ----------

const char *openai_status_reason(int status) {
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

char *openai_error_body(int status, const char *param, const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    // (a message cut inside a UTF-8 character would make json_pack fail)
    json_t *m = json_string(msg);
    if (!m) m = json_string("(the message is not valid UTF-8)");
    json_t *j = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", m, "type", error_type(status), "param",
                          param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return b;
}

static int fail(OpenAIError *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(OpenAIError *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->param = param;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

json_t *openai_body_parse(const char *p, size_t n, bool optional, OpenAIError *e) {
    if (!n && optional) return json_object();
    json_error_t je;
    json_t *j = n ? json_loadb(p, n, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (json_is_object(j)) return j;
    if (j) fail(e, 400, NULL, NULL, "the request body must be a JSON object");
    else fail(e, 400, NULL, NULL, "we could not parse the JSON body of your request (%s at line %d)",
              n ? je.text : "empty", n ? je.line : 0);
    json_decref(j);
    return NULL;
}

// ---------- messages ----------

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
        buf_append(&b, t, json_string_length(json_object_get(p, "text")));
    }
    json_t *r = json_stringn(b.data ? (char *)b.data : "", b.len);
    buf_free(&b);
    return r;
}

// The request's messages as the template takes them (content a string), or
// NULL with e.
static json_t *messages_check(const json_t *m, OpenAIError *e) {
    if (!json_is_array(m) || !json_array_size(m)) {
        fail(e, 400, "messages", NULL, "'messages' must be a non-empty array");
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
            fail(e, 400, "messages", NULL, "messages[%zu]: 'role' must be one of system, developer, user, assistant, "
                 "tool", i);
            json_decref(out);
            return NULL;
        }
        json_t *t = content_text(json_object_get(v, "content"));
        if (!t) {
            fail(e, 400, "messages", NULL, "messages[%zu].content: a string, null or an array of text parts (only "
                 "text is served)", i);
            json_decref(out);
            return NULL;
        }
        json_t *c = json_copy(v);
        json_object_set_new(c, "content", t);
        json_t *tc = json_object_get(c, "tool_calls");
        if (tc && !json_is_null(tc) && !json_is_array(tc)) {
            fail(e, 400, "messages", NULL, "messages[%zu].tool_calls: an array", i);
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

static json_t *canon(const json_t *m) {
    json_t *c = json_object();
    json_t *role = json_object_get(m, "role");
    json_object_set(c, "role", role ? role : json_null());
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
            json_t *name = json_object_get(fn, "name");
            json_array_append_new(calls, json_pack("{s:O, s:o}", "name", name ? name : json_null(), "arguments",
                                                   a ? a : args ? json_incref(args) : json_object()));
        }
        json_object_set_new(c, "tool_calls", calls);
    }
    return c;
}

bool openai_same_message(const json_t *a, const json_t *b) {
    json_t *ca = canon(a), *cb = canon(b);
    bool eq = json_equal(ca, cb);
    json_decref(ca);
    json_decref(cb);
    return eq;
}

// ---------- request settings ----------

// Sampling settings of a request, checked (ad hoc: they apply; in an episode
// the run's apply). NULL with e.
static json_t *sampling_params(const json_t *b, bool chat, int default_max, OpenAIError *e) {
    json_t *p = json_object(), *v;
    const char *param = NULL;
    if ((v = json_object_get(b, "temperature")) && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 2) { param = "temperature"; goto bad; }
        if (!sampler_temperature_ok(json_number_value(v), 2)) {  // grpo-rollout --temperature's rule
            fail(e, 400, "temperature", NULL, "'temperature' %g: give 0 (greedy) or %g..2", json_number_value(v),
                 SAMPLER_MIN_TEMPERATURE);
            json_decref(p);
            return NULL;
        }
        json_object_set(p, "temperature", v);
    }
    if ((v = json_object_get(b, "top_p")) && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1) { param = "top_p"; goto bad; }
        json_object_set(p, "top_p", v);
    }
    if ((v = json_object_get(b, "top_k")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) { param = "top_k"; goto bad; }
        json_object_set(p, "top_k", v);
    }
    if ((v = json_object_get(b, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v)) { param = "seed"; goto bad; }
        json_object_set(p, "seed", v);
    }
    const char *mk = chat && json_object_get(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((v = json_object_get(b, mk)) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1) { param = mk; goto bad; }
        json_object_set(p, "max_tokens", v);
    } else {
        json_object_set_new(p, "max_tokens", json_integer(default_max));
    }
    if ((v = json_object_get(b, "n")) && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1)) {
        fail(e, 400, "n", NULL, "'n': only 1 is served (send n requests)");
        json_decref(p);
        return NULL;
    }
    return p;
bad:
    fail(e, 400, param, NULL, "'%s' is out of range or of the wrong type", param);
    json_decref(p);
    return NULL;
}

// stop: a string or an array of up to OPENAI_MAX_STOP non-empty strings; *out NULL when none.
static int stop_check(const json_t *v, json_t **out) {
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    // (a NUL inside one could never match text, which is NUL-terminated)
    if (json_is_string(v)) {
        if (!json_string_length(v) || strlen(json_string_value(v)) != json_string_length(v)) return -1;
        *out = json_pack("[O]", v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > OPENAI_MAX_STOP) return -1;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x) || !json_string_length(x) || strlen(json_string_value(x)) != json_string_length(x))
            return -1;
    }
    *out = json_array_size(v) ? json_incref((json_t *)v) : NULL;
    return 0;
}

static int tools_check(const json_t *t, OpenAIError *e) {
    if (!t || json_is_null(t)) return 0;
    if (!json_is_array(t)) return fail(e, 400, "tools", NULL, "'tools' must be an array");
    size_t i;
    json_t *x;
    json_array_foreach(t, i, x) {
        const char *ty = json_string_value(json_object_get(x, "type"));
        if (!ty || strcmp(ty, "function") || !json_is_string(json_object_get(json_object_get(x, "function"), "name")))
            return fail(e, 400, "tools", NULL, "tools[%zu]: want {\"type\": \"function\", \"function\": {\"name\": ..., "
                        "...}}", i);
    }
    return 0;
}

void openai_request_free(OpenAIRequest *rq) {
    json_decref(rq->body);
    json_decref(rq->messages);
    json_decref(rq->tools);
    json_decref(rq->params);
    json_decref(rq->stop);
    *rq = (OpenAIRequest){0};
}

int openai_request_parse(const char *body, size_t n, bool chat, const char *model_name, int default_max,
                         bool episode, OpenAIRequest *rq, OpenAIError *e) {
    *rq = (OpenAIRequest){0};
    json_t *b = rq->body = openai_body_parse(body, n, false, e);
    if (!b) return -1;
    const char *model = json_string_value(json_object_get(b, "model"));
    json_t *stream_v = json_object_get(b, "stream"), *so = json_object_get(b, "stream_options");
    json_t *tools = json_object_get(b, "tools"), *tcv = json_object_get(b, "tool_choice");
    const char *tc = json_string_value(tcv);
    if (!model) { fail(e, 400, "model", NULL, "you must provide a model parameter"); goto bad; }
    if (strcmp(model, model_name)) {
        fail(e, 404, "model", "model_not_found", "the model '%.200s' does not exist; this endpoint serves '%.200s' "
             "(GET /v1/models)", model, model_name);
        goto bad;
    }
    if (stream_v && !json_is_boolean(stream_v) && !json_is_null(stream_v)) {
        fail(e, 400, "stream", NULL, "'stream' must be a boolean");
        goto bad;
    }
    rq->stream = json_is_true(stream_v);
    rq->include_usage = json_is_true(json_object_get(so, "include_usage"));
    if (chat) {
        if (!(rq->messages = messages_check(json_object_get(b, "messages"), e))) goto bad;
        if (tools_check(tools, e) < 0) goto bad;
        if (tcv && !json_is_null(tcv) && (!tc || (strcmp(tc, "auto") && strcmp(tc, "none")))) {
            fail(e, 400, "tool_choice", NULL, "'tool_choice': \"auto\" and \"none\" are served (the model decides)");
            goto bad;
        }
        if (json_array_size(tools) && !(tc && !strcmp(tc, "none"))) rq->tools = json_incref(tools);
    } else {
        if (episode) {
            fail(e, 400, NULL, NULL, "episodes are conversations: use /v1/chat/completions with X-Pail-Episode");
            goto bad;
        }
        json_t *p = json_object_get(b, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!json_is_string(p) || !json_string_length(p)) {
            fail(e, 400, "prompt", NULL, "'prompt' must be a non-empty string (or an array of one)");
            goto bad;
        }
        rq->messages = json_incref(p);
        static const char *unsup[] = {"echo", "logprobs", "suffix", "best_of", NULL};
        for (int i = 0; unsup[i]; i++) {
            json_t *v = json_object_get(b, unsup[i]);
            if (v && !json_is_null(v) && !json_is_false(v) &&
                !(json_is_integer(v) && json_integer_value(v) <= 1 && !strcmp(unsup[i], "best_of"))) {
                fail(e, 400, unsup[i], NULL, "'%s' is not served", unsup[i]);
                goto bad;
            }
        }
    }
    if (!(rq->params = sampling_params(b, chat, default_max, e))) goto bad;
    if (stop_check(json_object_get(b, "stop"), &rq->stop) < 0) {
        fail(e, 400, "stop", NULL, "'stop' must be a non-empty string or an array of up to %d of them",
             OPENAI_MAX_STOP);
        goto bad;
    }
    return 0;
bad:
    openai_request_free(rq);
    return -1;
}

int openai_claim_parse(const char *body, size_t n, double *wait_s, OpenAIError *e) {
    json_t *b = openai_body_parse(body, n, true, e);
    if (!b) return -1;
    json_t *wv = json_object_get(b, "wait");
    *wait_s = OPENAI_CLAIM_WAIT_S;
    int rc = 0;
    if (wv && (!json_is_number(wv) || json_number_value(wv) < 0 || json_number_value(wv) > OPENAI_CLAIM_WAIT_MAX_S))
        rc = fail(e, 400, "wait", NULL, "'wait' must be a number of seconds in 0..%d", OPENAI_CLAIM_WAIT_MAX_S);
    else if (wv)
        *wait_s = json_number_value(wv);
    json_decref(b);
    return rc;
}

static bool reward_ok(const json_t *v) {
    return json_is_number(v) && isfinite(json_number_value(v)) && fabs(json_number_value(v)) <= SHARD_REWARD_MAX;
}

int openai_reward_parse(const char *body, size_t n, double *reward, json_t **components, OpenAIError *e) {
    *components = NULL;
    json_t *b = openai_body_parse(body, n, false, e);
    if (!b) return -1;
    json_t *r = json_object_get(b, "reward"), *c = json_object_get(b, "components");
    int rc = 0;
    if (!reward_ok(r)) {
        rc = fail(e, 400, "reward", NULL, "'reward' must be a finite number within +-1e6");
    } else if (c && !json_is_null(c) && !json_is_object(c)) {
        rc = fail(e, 400, "components", NULL, "'components' must be an object of numbers");
    } else if (json_object_size(c) > OPENAI_MAX_COMPONENTS) {
        // A shard holds 32 names; more were cut silently once.
        rc = fail(e, 400, "components", "too_many_components", "'components' has %zu entries; an episode's reward "
                  "has at most %d (a shard's limit)", json_object_size(c), OPENAI_MAX_COMPONENTS);
    } else if (json_is_object(c)) {
        const char *key;
        json_t *v;
        json_object_foreach(c, key, v) if (!reward_ok(v)) {
            rc = fail(e, 400, "components", NULL, "'components' must be an object of finite numbers within +-1e6");
            break;
        }
    }
    if (rc == 0) {
        *reward = json_number_value(r);
        *components = json_is_object(c) && json_object_size(c) ? json_incref(c) : NULL;
    }
    json_decref(b);
    return rc;
}

// ---------- replies ----------

void openai_sse_event(Buf *b, const char *text) {
    buf_append(b, "data: ", 6);
    buf_append(b, text, strlen(text));
    buf_append(b, "\n\n", 2);
}

static void sse_append(Buf *b, json_t *j) {  // steals j
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (t) openai_sse_event(b, t);
    free(t);
}

static json_t *chunk_json(const OpenAIStream *st, json_t *delta, const char *finish) {  // steals delta
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:o}]}", "id", st->id, "object",
                     st->text ? "text_completion" : "chat.completion.chunk", "created", (json_int_t)st->created,
                     "model", st->model, "choices", "index", 0, st->text ? "text" : "delta", delta, "logprobs",
                     "finish_reason", finish ? json_string(finish) : json_null());
}

static json_t *content_delta(OpenAIStream *st, const char *text, size_t n) {
    if (st->text) return json_stringn(text, n);
    json_t *d = json_pack("{s:s%}", "content", text, n);
    if (d && !st->role_sent) json_object_set_new(d, "role", json_string("assistant"));
    if (d) st->role_sent = true;
    return d;
}

int openai_sse_content(Buf *b, OpenAIStream *st, const char *text, size_t n) {
    json_t *d = content_delta(st, text, n);
    json_t *j = d ? chunk_json(st, d, NULL) : NULL;
    if (!j) return -1;
    size_t before = b->len;
    sse_append(b, j);
    return b->len > before ? 0 : -1;
}

char *openai_turn_reply(OpenAIStream *st, const json_t *fields, bool tools_on, const json_t *stop,
                        const json_t *pail, bool stream, const char *sent, size_t sent_len, json_t **assistant) {
    const char *text = json_string_value(json_object_get(fields, "text"));
    const char *finish = json_string_value(json_object_get(fields, "finish"));
    json_t *usage_in = json_object_get(fields, "usage");
    json_int_t pt = json_integer_value(json_object_get(usage_in, "prompt_tokens")),
               ct = json_integer_value(json_object_get(usage_in, "completion_tokens"));
    Buf content = {0};
    json_t *calls = json_array();
    const char *reasoning = NULL;
    if (tools_on) {
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
            const char *dash = strchr(st->id, '-');
            snprintf(cid, sizeof cid, "call_%s_%d_%zu", dash ? dash + 1 : st->id,
                     (int)json_integer_value(json_object_get(fields, "turn")), i);
            char *args = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
            json_t *name = json_object_get(call, "name");
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", cid, "type", "function",
                                                   "function", "name", name ? name : json_null(), "arguments",
                                                   args ? args : "{}"));
            free(args);
        }
    } else {
        buf_append(&content, text ? text : "", strlen(text ? text : ""));
    }
    buf_append(&content, "", 1);
    char *ctext = (char *)content.data;
    bool stopped_by_string = false;
    if (stop) {
        long cut = openai_stop_at(stop, ctext);
        if (cut >= 0) { ctext[cut] = 0; stopped_by_string = true; }
    }
    const char *fr = finish && !strcmp(finish, "length") && !stopped_by_string ? "length"
                     : json_array_size(calls) ? "tool_calls" : "stop";
    json_t *usage = json_pack("{s:I, s:I, s:I}", "prompt_tokens", pt, "completion_tokens", ct, "total_tokens", pt + ct);
    json_t *msg = NULL;
    if (!st->text) {
        msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                        ctext[0] || !json_array_size(calls) ? json_string(ctext) : json_null());
        if (msg && json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        if (assistant) *assistant = json_deep_copy(msg);
        if (msg && reasoning && reasoning[0]) json_object_set_new(msg, "reasoning_content", json_string(reasoning));
    }
    char *body = NULL;
    if (!stream) {
        json_t *j;
        if (st->text)
            j = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:s, s:n, s:s}], s:O, s:O}", "id", st->id, "object",
                          "text_completion", "created", (json_int_t)st->created, "model", st->model, "choices",
                          "index", 0, "text", ctext, "logprobs", "finish_reason", fr, "usage", usage, "pail", pail);
        else
            j = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:O, s:n, s:s}], s:O, s:O}", "id", st->id, "object",
                          "chat.completion", "created", (json_int_t)st->created, "model", st->model,
                          "system_fingerprint", "pail", "choices", "index", 0, "message", msg, "logprobs",
                          "finish_reason", fr, "usage", usage, "pail", pail);
        body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
    } else {
        Buf b = {0};
        size_t len = strlen(ctext);
        if (len > sent_len && !memcmp(ctext, sent ? sent : "", sent_len))
            openai_sse_content(&b, st, ctext + sent_len, len - sent_len);
        else if (!st->text && !st->role_sent)
            openai_sse_content(&b, st, "", 0);
        if (json_array_size(calls)) {
            json_t *dc = json_array(), *call;
            size_t i;
            json_array_foreach(calls, i, call) {
                json_t *c = json_deep_copy(call);
                json_object_set_new(c, "index", json_integer((json_int_t)i));
                json_array_append_new(dc, c);
            }
            sse_append(&b, chunk_json(st, json_pack("{s:o}", "tool_calls", dc), NULL));
        }
        if (reasoning && reasoning[0] && !st->text)
            sse_append(&b, chunk_json(st, json_pack("{s:s}", "reasoning_content", reasoning), NULL));
        json_t *fin = chunk_json(st, st->text ? json_string("") : json_object(), fr);
        if (fin) json_object_set(fin, "pail", (json_t *)pail);
        sse_append(&b, fin);
        if (st->include_usage)
            sse_append(&b, json_pack("{s:s, s:s, s:I, s:s, s:[], s:O}", "id", st->id, "object",
                                     st->text ? "text_completion" : "chat.completion.chunk", "created",
                                     (json_int_t)st->created, "model", st->model, "choices", "usage", usage));
        openai_sse_event(&b, "[DONE]");
        if (buf_append(&b, "", 1) == 0) body = (char *)b.data;
        else buf_free(&b);
    }
    json_decref(usage);
    json_decref(msg);
    json_decref(calls);
    buf_free(&content);
    return body;
}

// ---------- stop strings ----------

long openai_stop_at(const json_t *stop, const char *text) {
    long best = -1;
    size_t i;
    json_t *x;
    json_array_foreach(stop, i, x) {
        const char *p = strstr(text, json_string_value(x));
        if (p && (best < 0 || p - text < best)) best = p - text;
    }
    return best;
}

void openai_stop_init(OpenAIStop *s, const json_t *stop) {
    *s = (OpenAIStop){.stop = stop, .cut = -1};
    size_t i;
    json_t *x;
    json_array_foreach(stop, i, x) if (json_string_length(x) > s->longest) s->longest = json_string_length(x);
}

void openai_stop_free(OpenAIStop *s) { buf_free(&s->text); }

long openai_stop_feed(OpenAIStop *s, const char *p, size_t n) {
    if (s->cut >= 0) return s->cut;
    if (buf_append(&s->text, p, n) < 0) return -2;
    if (!s->longest) return -1;
    // A stop string found now starts at or after scanned: before it, a start
    // would have ended inside the text scanned last time and been found then.
    const char *t = (const char *)s->text.data;
    size_t i;
    json_t *x;
    json_array_foreach(s->stop, i, x) {
        const char *hit = memmem(t + s->scanned, s->text.len - s->scanned, json_string_value(x), json_string_length(x));
        if (hit && (s->cut < 0 || hit - t < s->cut)) s->cut = hit - t;
    }
    if (s->cut < 0 && s->text.len >= s->longest) s->scanned = s->text.len - s->longest + 1;
    return s->cut;
}

size_t openai_stop_safe(const OpenAIStop *s) {
    size_t safe = s->cut >= 0 ? (size_t)s->cut : s->text.len;
    if (s->cut < 0 && s->longest) safe = safe > s->longest - 1 ? safe - (s->longest - 1) : 0;  // could begin one
    const uint8_t *t = s->text.data;
    while (safe > 0 && safe < s->text.len && (t[safe] & 0xC0) == 0x80) safe--;  // never inside a character
    return safe;
}

// ---------- request heads ----------

enum { OF_HEAD, OF_BODY, OF_CHUNK_SIZE, OF_CHUNK, OF_TRAILER, OF_LOST };

void openai_frame_init(OpenAIFrame *f) { *f = (OpenAIFrame){.state = OF_HEAD, .clen = -1}; }

bool openai_frame_in_body(const OpenAIFrame *f) { return f->state != OF_HEAD; }

// A head line ended (line: its first bytes lower-cased, len its full length
// without the newline). Returns the Content-Length it declares, -1 for another
// line, -2 for a Content-Length that is not a number.
static int64_t head_line(OpenAIFrame *f, size_t len) {
    char *l = f->line;
    size_t m = len < sizeof f->line ? len : sizeof f->line;
    if (m && l[m - 1] == '\r') m--;
    if (m >= 15 && !memcmp(l, "content-length:", 15)) {
        size_t i = 15;
        while (i < m && (l[i] == ' ' || l[i] == '\t')) i++;
        if (i == m || len > sizeof f->line) return INT64_MAX;  // a value too long to hold: over any limit
        int64_t v = 0;
        size_t d = i;
        for (; i < m && isdigit((unsigned char)l[i]); i++) {
            if (v > (INT64_MAX - 9) / 10) return INT64_MAX;
            v = v * 10 + (l[i] - '0');
        }
        bool digits = i > d;
        while (i < m && (l[i] == ' ' || l[i] == '\t')) i++;
        return i == m && digits ? v : -2;
    }
    if (m >= 18 && !memcmp(l, "transfer-encoding:", 18)) f->chunked = true;
    return -1;
}

// A chunk-size line's size (hex digits, then optionally ';' extensions or
// spaces), or -1 when it is not one (the HTTP server refuses it).
static int64_t chunk_size(const OpenAIFrame *f, size_t len) {
    size_t m = len < sizeof f->line ? len : sizeof f->line, i = 0;
    if (m && f->line[m - 1] == '\r') m--;
    int64_t v = 0;
    for (; i < m && isxdigit((unsigned char)f->line[i]); i++) {
        if (v > (INT64_MAX >> 4)) return -1;
        v = v * 16 + (isdigit((unsigned char)f->line[i]) ? f->line[i] - '0' : f->line[i] - 'a' + 10);
    }
    if (i == 0 || (i < m && f->line[i] != ';' && f->line[i] != ' ')) return -1;
    return v;
}

size_t openai_frame_feed(OpenAIFrame *f, const char *p, size_t n, uint64_t max_body, size_t max_head,
                         OpenAIFrameHit *hit) {
    *hit = (OpenAIFrameHit){0};
    size_t i = 0;
    while (i < n) {
        if (f->state == OF_LOST) return n;
        if (f->state == OF_BODY || f->state == OF_CHUNK) {
            size_t take = (uint64_t)(n - i) < f->body_left ? n - i : (size_t)f->body_left;
            i += take;
            f->body_left -= take;
            if (!f->body_left) f->state = f->state == OF_BODY ? OF_HEAD : OF_CHUNK_SIZE;
            continue;
        }
        char c = p[i++];
        f->head_len++;
        if (c != '\n') {
            if (f->line_len < sizeof f->line) f->line[f->line_len] = (char)tolower((unsigned char)c);
            f->line_len++;
            if (f->head_len > max_head) f->state = OF_LOST;  // the HTTP server refuses it
            continue;
        }
        size_t len = f->line_len;
        f->line_len = 0;
        bool blank = len == 0 || (len == 1 && f->line[0] == '\r');
        if (f->state == OF_CHUNK_SIZE) {
            f->head_len = 0;
            int64_t v = chunk_size(f, len);
            if (v < 0) { f->state = OF_LOST, f->bad_chunk = true; continue; }
            if (v == 0) { f->state = OF_TRAILER; continue; }
            // Over the limit once (the caller ends the body the server sees there); followed on after.
            bool over = f->chunked_total <= max_body && (uint64_t)v > max_body - f->chunked_total;
            if (f->chunked_total <= max_body) f->chunked_total = over ? max_body + 1 : f->chunked_total + (uint64_t)v;
            f->state = OF_CHUNK;
            f->body_left = (uint64_t)v + 2;  // its bytes, then CRLF
            if (over) {
                *hit = (OpenAIFrameHit){OPENAI_HIT_CHUNKS_OVER, i, len + 1, max_body + 1};
                return i;
            }
            continue;
        }
        if (f->state == OF_TRAILER) {
            f->head_len = 0;
            if (blank) f->state = OF_HEAD;
            continue;
        }
        if (blank && f->head_len <= 2) {  // blank lines before a request line are skipped (RFC 9112 2.2)
            f->head_len = 0;
            continue;
        }
        if (blank) {  // the head ends
            int64_t cl = f->clen;
            bool chunked = f->chunked, bad = f->bad_length;
            f->head_len = 0;
            f->clen = -1;
            f->chunked = f->bad_length = false;
            if (bad) f->state = OF_LOST;  // where its body ends is not known
            else if (chunked) f->state = OF_CHUNK_SIZE, f->chunked_total = 0;
            else if (cl > 0) f->state = OF_BODY, f->body_left = (uint64_t)cl;
            continue;
        }
        int64_t v = head_line(f, len);
        if (v == -2) {
            f->bad_length = true;
            *hit = (OpenAIFrameHit){OPENAI_HIT_BAD_LENGTH, i, len + 1, 0};
            return i;
        }
        if (v >= 0) {
            f->clen = v;
            if ((uint64_t)v > max_body) {
                *hit = (OpenAIFrameHit){OPENAI_HIT_TOO_LARGE, i, len + 1, (uint64_t)v};
                return i;
            }
        }
    }
    return n;
}
