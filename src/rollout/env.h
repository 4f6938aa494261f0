// An environment program (grpo-rollout --env CMD, doc/environments.md): one
// long-lived program, started with /bin/sh -c, speaking JSON lines on its
// stdin / stdout, with many episodes interleaved by id. pail writes
//   {"type": "start", "id": ID, "row": {...the dataset row...}}
//   {"type": "step",  "id": ID, "turn": n, "text": "...", "tool_calls": [...], "finish": "stop"|"length",
//    "final": bool}
//   {"type": "end",   "id": ID, "reason": "max_episode_tokens"}   (asks for the reward)
//   {"type": "cancel", "id": ID}                                   (no answer expected)
// and the program answers each start, step or end with one line:
//   {"id": ID, "messages": [...], "tools": [...]}   the next messages (tools: with the opening only)
//   {"id": ID, "reward": R, "components": {"name": x, ...}}   the episode is over
//   {"id": ID, "error": "..."}                      the episode failed
// Failures end episodes with a failed reward, never the worker: an answer that
// breaks the protocol fails its episode; a line that is not JSON, or the
// program exiting, fails every episode open with it and restarts it (with
// back-off); an episode unanswered within the timeout fails, and the program
// is restarted when it wrote nothing at all in that time. Answers for ids not
// open (late ones, after a timeout) are counted and dropped.
// Episodes are handles k in [0, max_episodes) of the current batch (env_begin).
//
// Env is an interface (EnvOps): the program above (env_init) and the
// OpenAI-compatible endpoint (serve.h, where the agent is the environment)
// implement it; the episode engine (episode.h) sees only this.
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/err.h"

typedef struct Env Env;
typedef struct EnvEvent EnvEvent;

// ENV_SEGMENT (the endpoint, serve.h): messages is the whole history again,
// edited by its agent: the episode goes on in a new segment (episode.h).
typedef enum { ENV_MESSAGES, ENV_REWARD, ENV_FAILED, ENV_SEGMENT } EnvEventType;

struct EnvEvent {
    EnvEventType type;
    int k;               // the episode
    json_t *messages;    // ENV_MESSAGES: the array (owned by the event: json_decref it)
    json_t *tools;       // ENV_MESSAGES: the opening's tools, or NULL (owned)
    double reward;       // ENV_REWARD
    json_t *components;  // ENV_REWARD: an object of numbers, or NULL (owned)
    json_t *params;      // ENV_MESSAGES opening an ad-hoc request (k >= the batch's episodes): its sampling
                         // settings {"temperature", "top_p", "top_k", "max_tokens", "seed"}, or NULL (owned); its
                         // messages may then be a string: a raw prompt, tokenized without the chat template
    char why[512];       // ENV_FAILED: one line, with the program's stderr tail where it helps
};

typedef struct {
    int64_t starts, restarts, timeouts, bad_lines, unknown_ids, failed;  // cumulative (restarts: after a crash, a hang, a bad line)
} EnvStats;

typedef struct {  // an implementation's functions, as the env_* calls below describe them
    void (*free)(Env *);
    void (*begin)(Env *, const char *prefix);
    int (*start)(Env *, int k, const json_t *row, PailErr *err);
    int (*step)(Env *, int k, const json_t *fields, PailErr *err);
    int (*end)(Env *, int k, const char *reason, PailErr *err);
    void (*cancel)(Env *, int k, const char *why);
    int (*poll)(Env *, int wait_ms, EnvEvent *ev, int cap, int *n, PailErr *err);
    int (*open)(const Env *);
    EnvStats (*stats)(const Env *);
    const char *(*describe)(const Env *);
    bool (*token)(Env *, int k, const int32_t *turn, int n);  // optional
    void (*refuse)(Env *, int k, const char *why);           // optional: an ENV_SEGMENT not taken
} EnvOps;

struct Env {  // the first member of each implementation's state (allocated zeroed)
    const EnvOps *ops;
    int64_t batches;   // batches counted by env_check_failing
    int failed_run;    // of them, the last ones in a row whose every episode failed
    int64_t lines;     // lines the environment has written (0: it never answered anything)
};

// The environment program. Keeps a copy of cmd; the program starts at the first request. timeout_s > 0.
int env_init(Env **out, const char *cmd, double timeout_s, int max_episodes, PailErr *err);
// Cancels what is open, closes its stdin, waits up to 1 s, then kills its group.
void env_free(Env *e);
// A new batch of episodes, ids "<prefix>.<k>" (episodes of the last batch still
// open are cancelled). prefix: at most 200 bytes, no '"' or '\\'.
void env_begin(Env *e, const char *prefix);
// Requests (queued; env_poll writes them). -1 with err only when out of memory
// or k is out of range.
int env_start(Env *e, int k, const json_t *row, PailErr *err);
// fields: "turn", "text", "tool_calls", "finish", "final" (borrowed; "type" and "id" are added).
int env_step(Env *e, int k, const json_t *fields, PailErr *err);
int env_end(Env *e, int k, const char *reason, PailErr *err);
// No answer expected; why (or NULL) says what ended it, for an implementation
// that has someone waiting to tell.
void env_cancel(Env *e, int k, const char *why);
// After each token sampled in episode k's current turn (turn: its tokens so
// far, n of them): true ends the turn there (a stop string of an ad-hoc
// request). Streams the turn where the implementation can.
bool env_token(Env *e, int k, const int32_t *turn, int n);
// The engine could not take episode k's ENV_SEGMENT (why: one line); the
// episode goes on as it was, waiting for its next messages.
void env_refuse(Env *e, int k, const char *why);
// Writes what is queued, reads answers, applies the timeouts; waits at most
// wait_ms for something to happen (0: never blocks). Fills up to cap events
// (*n); a failed episode is closed. -1 with err only when out of memory.
int env_poll(Env *e, int wait_ms, EnvEvent *ev, int cap, int *n, PailErr *err);
int env_open(const Env *e);  // episodes open (started, not yet over)
// Batches whose every episode fails stop the worker (as a reward program's, reward.h):
// the first one when the environment never wrote a line (a program that cannot
// start: not found, a missing script, a crash before its first answer), or
// ENV_FAILED_BATCHES in a row (a program that crashes once and recovers goes on). Counts a batch of n episodes of which
// `failed` failed (why: one of their reasons); 0 to go on, else -1 with err.
#define ENV_FAILED_BATCHES 3
int env_check_failing(Env *e, int failed, int n, const char *why, PailErr *err);
EnvStats env_stats(const Env *e);
const char *env_describe(const Env *e);  // for messages: "environment 'cmd'", "endpoint https://..."
void env_event_free(EnvEvent *ev);        // what an event owns
// A reward: a finite number within +-1e6 (the shard's bound); components: an
// object of at most SHARD_MAX_COMPONENTS (32) such numbers.
bool env_reward_ok(const json_t *v);
bool env_components_ok(const json_t *o);
// For implementations: episode k's id in the batch named prefix, "<prefix>.<k>"
// (out: cap bytes), and back: the k an id names, in [0, n), or -1.
void env_episode_id(const char *prefix, int k, char *out, size_t cap);
int env_episode_index(const char *prefix, const char *id, int n);
// For implementations: a zeroed event of type for episode k at the end of the
// growing array *q (*n used, *cap allocated), or NULL when out of memory.
EnvEvent *env_event_push(EnvEvent **q, int *n, int *cap, EnvEventType type, int k);
