// The OpenAI front of grpo-rollout --serve as pure functions, no sockets and
// no libevent (serve.c is the transport): request bodies of /v1/chat/completions,
// /v1/completions, /v1/episodes and .../reward parsed and checked; OpenAI's
// error body; the JSON of replies and of event-stream chunks; the scan for stop
// strings as a turn's text grows; the check on a request head's declared body
// size as its bytes arrive. Fuzzed by tests/fuzz/fuzz_openai.c. Thread-safe
// (no shared state).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "core/buf.h"

#define OPENAI_MAX_BODY (8u << 20)  // a request body's bytes (more: 413)
#define OPENAI_MAX_STOP 4           // stop strings of a request
#define OPENAI_MAX_COMPONENTS 32    // reward components of an episode (= SHARD_MAX_COMPONENTS)
#define OPENAI_CLAIM_WAIT_S 30      // POST /v1/episodes: default wait for an episode
#define OPENAI_CLAIM_WAIT_MAX_S 300

// Why a request is refused: the status and OpenAI's error fields.
typedef struct {
    int status;
    const char *param;           // static string or NULL
    const char *code;            // static string or NULL
    char msg[700];
} OpenAIError;

const char *openai_status_reason(int status);  // "Bad Request", ...
// {"error": {"message", "type", "param", "code"}} (malloc'd; NULL: no memory).
char *openai_error_body(int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// A request body as a JSON object (optional: an empty body is {}). NULL with e (400).
json_t *openai_body_parse(const char *p, size_t n, bool optional, OpenAIError *e);

// A generation request, checked. All json_t owned (openai_request_free).
typedef struct {
    json_t *body;                // the parsed body
    json_t *messages;            // chat: the messages as the template takes them (content a string);
                                 // completion: the prompt string
    json_t *tools;               // chat: the tools offered (NULL: none, or tool_choice "none")
    json_t *params;              // temperature, top_p, top_k, seed, max_tokens (as given, checked)
    json_t *stop;                // an array of 1..OPENAI_MAX_STOP non-empty strings, or NULL
    bool stream, include_usage;
} OpenAIRequest;

// body of POST /v1/chat/completions (chat) or /v1/completions: checked against
// the served model's name; default_max: max_tokens when the request names none;
// episode: it carries X-Pail-Episode. 0, or -1 with e (and rq empty).
int openai_request_parse(const char *body, size_t n, bool chat, const char *model_name, int default_max,
                         bool episode, OpenAIRequest *rq, OpenAIError *e);
void openai_request_free(OpenAIRequest *rq);

// POST /v1/episodes: {"wait": seconds} (optional). 0 / -1 with e.
int openai_claim_parse(const char *body, size_t n, double *wait_s, OpenAIError *e);
// POST /v1/episodes/{id}/reward: {"reward": R, "components": {...}}; *components
// NULL or an object of at most OPENAI_MAX_COMPONENTS finite numbers (owned). 0 / -1 with e.
int openai_reward_parse(const char *body, size_t n, double *reward, json_t **components, OpenAIError *e);

// Does a message the client resends agree with the one it was given (role,
// content, the calls' names and arguments, a tool message's id and name)?
bool openai_same_message(const json_t *a, const json_t *b);

// ---------- replies ----------

typedef struct {
    bool text;                   // /v1/completions (else chat)
    const char *id;              // chatcmpl-... / cmpl-...
    int64_t created;
    const char *model;
    bool include_usage;
    bool role_sent;              // chat stream: the first delta carried the role (updated)
} OpenAIStream;

// One server-sent event "data: TEXT\n\n" onto b.
void openai_sse_event(Buf *b, const char *text);
// A streamed piece of content as its event onto b. 0 / -1 (no memory).
int openai_sse_content(Buf *b, OpenAIStream *st, const char *text, size_t n);

// A finished turn. fields as env_step gives them ({"text", "content", "reasoning",
// "tool_calls", "finish", "turn", "usage"}); tools_on: tool calls are parsed;
// stop: the request's stop strings (NULL: none) cut the content; pail: the
// "pail" object of the reply (borrowed); stream: the rest of an event stream
// whose first sent bytes of content went out already. *assistant (chat, may
// be NULL): the message as the client will see it. The body (malloc'd), NULL: no memory.
char *openai_turn_reply(OpenAIStream *st, const json_t *fields, bool tools_on, const json_t *stop,
                        const json_t *pail, bool stream, const char *sent, size_t sent_len, json_t **assistant);

// ---------- stop strings over a growing text ----------

// Scans a turn's text as it grows, each byte once (plus the longest stop
// string's length of overlap). The text is owned.
typedef struct {
    const json_t *stop;          // borrowed: the stop strings, or NULL
    size_t longest;
    Buf text;                    // the turn's text so far
    size_t scanned;              // text before this holds no stop string start
    long cut;                    // where the first stop string starts, or -1
} OpenAIStop;

void openai_stop_init(OpenAIStop *s, const json_t *stop);
void openai_stop_free(OpenAIStop *s);
// Appends n bytes of text. Returns the offset of the first stop string (the
// turn ends there) or -1; -2: no memory.
long openai_stop_feed(OpenAIStop *s, const char *p, size_t n);
// How much of the text may be streamed: all before a stop string, or all but
// what could still begin one, never inside a UTF-8 character.
size_t openai_stop_safe(const OpenAIStop *s);
// The first stop string of stop in text: its offset, or -1.
long openai_stop_at(const json_t *stop, const char *text);

// ---------- a request head's declared body, as its bytes arrive ----------

// Follows the requests on one connection byte by byte (heads, Content-Length
// bodies and chunked ones) to find, while the HTTP server has not read it yet,
// a head whose body is over the limit or whose Content-Length it would refuse
// with its own (HTML) page, and a chunked body's chunk that takes it over.
typedef struct {
    int state;                   // OF_HEAD, OF_BODY, OF_CHUNK_SIZE, OF_CHUNK, OF_TRAILER, OF_LOST (an oversized line)
    size_t line_len;             // bytes of the line so far
    char line[64];               // its first bytes (lower case)
    int64_t clen;                // the head's Content-Length so far (-1: none)
    bool chunked, bad_length;
    bool bad_chunk;              // a chunk-size line was not hex (then OF_LOST)
    size_t head_len;
    uint64_t body_left;          // OF_BODY: bytes; OF_CHUNK: the chunk's bytes and its CRLF
    uint64_t chunked_total;      // a chunked body's bytes so far
} OpenAIFrame;

enum { OPENAI_HIT_TOO_LARGE = 1, OPENAI_HIT_BAD_LENGTH, OPENAI_HIT_CHUNKS_OVER };
typedef struct {
    int kind;                    // 0: none; OPENAI_HIT_TOO_LARGE: a Content-Length over the limit;
                                 // OPENAI_HIT_BAD_LENGTH: one not a number (e.g. -1); OPENAI_HIT_CHUNKS_OVER: a
                                 // chunk-size line taking a chunked body over the limit
    size_t line_end;             // the line ends before p[line_end]
    size_t line_len;             // its bytes, the newline included
    uint64_t declared;           // the body it declares (chunked: so far, with that chunk)
} OpenAIFrameHit;

void openai_frame_init(OpenAIFrame *f);
// Feeds n bytes (p may be NULL when they are all body: f->state is OF_BODY and
// f->body_left >= n); stops early at a hit: returns the bytes taken (up to and
// with its line) and fills *hit (hit->kind 0: none). The caller feeds the rest
// after it. After a hit the body is followed as announced (a malformed
// Content-Length: the connection is not followed any more).
size_t openai_frame_feed(OpenAIFrame *f, const char *p, size_t n, uint64_t max_body, size_t max_head,
                         OpenAIFrameHit *hit);
// Inside a body (or lost, after a malformed length): what a refused request still sends.
bool openai_frame_in_body(const OpenAIFrame *f);
