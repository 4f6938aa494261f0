// Multi-turn episodes (grpo-rollout --env, doc/environments.md): G episodes
// per dataset row, each a conversation between the model and an environment
// program (env.h). Tokens in, tokens out: an episode's row is append-only and
// is exactly what its KV cache holds. The opening messages are rendered with
// the chat template and tokenized once; the model's tokens are kept as
// sampled (mask 1, with their behaviour log-probs); each answer of the
// program is appended as the tokens the template adds for it (mask 0, log-prob
// 0), by the rules below, and prefilled into the episode's KV slot, which the
// episode keeps across its turns (no re-prefill). An episode waiting for its
// program parks its slot; the others keep decoding. An opening that another
// episode of the group holds in its slot is copied from there (its last token
// fed again for the logits): a group's openings are prefilled once.
//
// The tokens for new messages: with T(h) the template's rendering of history
// h with the generation prompt, A the text of the assistant turn just
// generated (its tokens decoded, special tokens kept) and H the history so
// far, the new text is T(H + assistant + new) minus T(H) + A when the latter
// is a prefix of it (templates that render each message independently of the
// later ones). Otherwise (a template that rewrites earlier turns, e.g. drops
// past reasoning, or trims the content) it is the same difference over a fixed
// one-exchange history [user ".", assistant "."], less the end-of-turn token the
// model already produced; the episode fails when neither is a prefix.
//
// Segments (an endpoint's agent resent an edited history, ENV_SEGMENT): the
// episode's row so far becomes a finished segment and a new one starts, whose
// row is the edited history rendered, less the episode's opening (which it must
// begin with; mask 0), then the turns that follow. The slot keeps the
// opening's KV and prefills the rest. Every segment shares the episode's reward.
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "model/transformer.h"
#include "rollout/env.h"
#include "rollout/sampler.h"
#include "rollout/toolcall.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int group_size;          // G episodes per row
    int batch_size;          // KV slots: episodes in flight (parked ones included)
    int max_groups;          // rows per episodes_run
    int max_extra;           // ad-hoc requests in flight (k in [max_groups * G, + max_extra), EnvEvent.params):
                             // one turn each, answered through the environment, never in the output
    int max_prompt_tokens;   // longest opening accepted
    int max_episode_tokens;  // the row after the opening: generated and appended tokens
    int max_turn_tokens;     // one assistant turn (--max-new-tokens)
    int max_turns;           // assistant turns; the last one is sent with "final": true
    int token_budget;        // the transformer's plan: tokens per model call
    DType kv_dtype;          // the KV cache's elements: DT_F32, DT_BF16 or DT_F16 (kvcache_init_on)
    SamplerConfig sampler;
    const int *stop_ids;     // a turn ends after one of these (kept in the row)
    int n_stop_ids;
    bool (*stop_fn)(void *ctx, const int32_t *tokens, int n);  // optional: stop strings on the turn so far
    void *stop_ctx;
    bool (*abandon_fn)(void *ctx);  // optional, as in generate.h
    void *abandon_ctx;
    ToolFormat tool_format;
    const ChatTemplate *chat;  // borrowed
    Tokenizer *tok;            // borrowed
    Env *env;                  // borrowed
} EpisodeConfig;

typedef struct {             // an earlier segment of an episode (ENV_SEGMENT: its agent edited the history)
    const int32_t *ids;      // the row after the episode's opening: the rest of the segment's history (mask 0),
    const float *logprobs;   // then its turns
    const uint8_t *mask;
    int n, turns;
    uint8_t finish;
} EpisodeSeg;

typedef struct {             // one episode: borrowed from the runner until its next run or free
    const int32_t *open_ids; // the opening, rendered and tokenized (n_open; 0 when the program never opened it)
    int n_open;
    const int32_t *ids;      // the row after the opening (n)
    const float *logprobs;   // behaviour log-probs, 0 where mask is 0
    const uint8_t *mask;     // 1: sampled by the model
    int n;
    int turns;               // assistant turns
    uint8_t finish;          // FINISH_STOP, or FINISH_LENGTH when the episode's tokens ran out or its last
                             // turn was cut at max_turn_tokens
    bool valid;              // the program gave a reward
    double reward;
    const json_t *components;  // the program's named components, or NULL
    char why[512];           // !valid: what went wrong
    const EpisodeSeg *segs;  // earlier segments, oldest first (n_segs; ids above is the last one's row);
    int n_segs;              // turns above counts every segment's
} EpisodeOut;

typedef struct {
    int64_t prefill_tokens, decode_tokens, model_calls, appended_tokens, turns, failed, prefix_fallbacks;
    int64_t forked_openings;  // episodes whose opening was copied from another's slot (its last token fed)
    int64_t segments;         // new segments started (ENV_SEGMENT)
} EpisodeStats;

typedef struct Episodes Episodes;

int episodes_init(Episodes **out, Transformer *tf, const ModelConfig *mc, const EpisodeConfig *cfg, PailErr *err);
void episodes_free(Episodes *r);
// Runs G episodes for each of P <= max_groups rows: out[p * G + j], sample j
// of row p drawing from RNG stream (seeds[p], j). prefix names the batch's
// episode ids ("<prefix>.<k>"). Ad-hoc requests the environment opens meanwhile
// are served alongside; the run returns once the batch is over and none is in
// flight. Returns 0, 1 when abandon_fn said so (the
// open episodes are cancelled; out holds nothing usable), -1 with err.
int episodes_run(Episodes *r, const char *prefix, json_t *const *rows, const uint64_t *seeds, int P, EpisodeOut *out,
                 PailErr *err);
EpisodeStats episodes_stats(const Episodes *r);  // of the last run
// Between runs: serves the ad-hoc requests the environment opens for about
// wait_ms (longer while one is in flight), so that an endpoint answers while
// its worker waits (for an adapter, for the trainer). 0, or -1 with err.
int episodes_serve_idle(Episodes *r, int wait_ms, PailErr *err);
