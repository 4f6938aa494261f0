// grpo-rollout --serve HOST:PORT (doc/environments.md, "An agent as the
// environment"): an OpenAI-compatible endpoint on the worker's generator, so an
// agent written against the OpenAI client is the environment. It implements
// Env (env.h): the episode engine asks it for episodes as it asks a program.
//
//   GET  /v1/models                    the run's model, with the adapter version generating now
//   POST /v1/chat/completions          streaming or not; tools and tool_calls for the families
//                                      toolcall.h parses
//   POST /v1/completions               a raw prompt (no chat template)
//   POST /v1/episodes                  {"id", "group", "index", "group_size", "row", ...}: the next
//                                      episode of the batch the worker is generating (waits up to
//                                      "wait" seconds, 30 by default, for one; then 503)
//   POST /v1/episodes/{id}/reward      {"reward": R, "components": {...}}: ends the episode
//   GET  /health                       {"status": "ok", ...} (no key needed)
//
// A chat request with the header X-Pail-Episode: ID is a turn of that episode:
// its messages are the opening (first request) or the history so far plus the
// new messages (the assistant turns as this endpoint returned them); it
// samples with the run's settings. A request without the header is ad hoc:
// answered with its own temperature, top_p, seed, stop and max_tokens, never
// trained on. Errors are OpenAI's JSON: {"error": {"message", "type", "param",
// "code"}} with the status.
//
// Limits (doc/environments.md, "The endpoint's limits"): a request body of 8 MiB
// (more: 413, also when only its Content-Length says so, or a chunked one's
// chunks), --serve-max-connections
// (at the cap the oldest connection with nothing in flight is closed for the
// newcomer, so /health and the agents get in), --serve-header-timeout and
// --serve-idle-timeout. A refusal is logged in one rate-limited line.
//
// Threads: one libevent thread owns the sockets; the worker's thread runs the
// engine and calls the Env functions; both meet under one mutex, and replies
// go back to the libevent thread through a queue.
#pragma once
#include <stddef.h>
#include "core/err.h"
#include "rollout/env.h"
#include "rollout/toolcall.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *listen;         // HOST:PORT, or PORT (loopback); port 0: any free one
    const char *cert, *key;     // TLS: PEM certificate chain and private key (required off loopback)
    const char *api_key;        // the bearer key clients send (required off loopback; NULL: none on loopback)
    const char *model_name;     // the model id clients name
    int max_episodes;           // episodes of one batch (the engine's max_groups x G)
    int max_extra;              // ad-hoc requests in flight (the engine's max_extra); more get 429
    int group_size;
    int max_turns;              // told to clients with each episode
    int max_new_tokens;         // an ad-hoc request's default max_tokens (chat)
    double episode_timeout_s;   // an episode idle (no request in flight) this long fails
    int max_connections;        // open connections; at the cap the oldest idle one is closed for a newcomer
    double header_timeout_s;    // a new connection's first whole request (a TLS handshake included) within this
    double idle_timeout_s;      // a keep-alive connection's next request within this (and a read / write stall)
    ToolFormat tool_format;
    const Tokenizer *tok;       // borrowed: decodes streamed text on the worker's thread
} ServeConfig;

int serve_open(Env **out, const ServeConfig *cfg, PailErr *err);
// The adapter version generating now (/v1/models, each response's "pail" object). -1: the base model.
void serve_set_version(Env *e, long version);
const char *serve_url(const Env *e);  // "http(s)://host:port", the port the one bound
// The run is done: no episode is handed out any more and no ad-hoc request taken
// (503 with code "run_done" and why); the open episodes go on to their rewards.
void serve_finish(Env *e, const char *why);
// Open episodes plus ad-hoc requests in flight (what serve_finish lets end).
int serve_in_flight(Env *e);
