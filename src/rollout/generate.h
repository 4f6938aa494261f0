// Group generation with continuous batching over a KV block pool: each prompt
// is prefilled once into a prompt slot and forked into a free decode slot for
// each of its G samples (prompts with G free slots are prefilled together, up
// to prefill_tokens per call; the samples of one without wait for slots);
// every decode step advances all active slots in one batched call, and a
// finished slot is refilled at once from the queue. Groups are admitted while
// free blocks last; a step that needs more blocks than are free preempts the
// youngest sequence, which later replays its sampled tokens and goes on with
// its own stream (doc/rollout.md "KV pool"). Each (prompt, sample) has its own
// RNG stream, so results depend neither on the batch size, nor on the slot a
// sample ran in, nor on preemptions. Everything, the completions' tokens
// included, is planned and allocated by generator_init: nothing in the loop.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "model/transformer.h"
#include "rollout/sampler.h"

typedef struct {
    int group_size;        // G
    int max_new_tokens;
    int batch_size;        // decode slots
    int max_prompt_tokens; // longest prompt accepted
    int max_prompts;       // prompts per generator_run (the completions' storage: max_prompts x G x max_new_tokens)
    int prefill_tokens;    // prompts prefilled together in one call, up to this many tokens (at least one prompt)
    int kv_blocks;         // KV pool blocks (0: generator_full_blocks, never short)
    DType kv_dtype;        // the KV cache's elements: DT_F32, DT_BF16 or DT_F16 (kvcache_init_on)
    SamplerConfig sampler;
    const int *stop_ids;   // generation ends after one of these (kept in the completion)
    int n_stop_ids;
    // Optional: true when the completion so far ends the generation (stop strings).
    bool (*stop_fn)(void *ctx, const int32_t *tokens, int n);
    void *stop_ctx;
    // Optional: asked before each decode step; true abandons the run (e.g. the
    // adapter it samples from is out of date). It rate-limits itself.
    bool (*abandon_fn)(void *ctx);
    void *abandon_ctx;
} GenConfig;

typedef struct {
    const int32_t *ids;    // prompt tokens (borrowed)
    int n;
    uint64_t seed;         // stream seed of this prompt; sample j uses stream j
} GenPrompt;

typedef struct {           // one completion: borrowed from the generator until its next run or free
    int32_t *ids;
    float *logprobs;       // log-prob of each sampled token under the sampled distribution
    int n;
    uint8_t finish;        // FINISH_STOP / FINISH_LENGTH (shard.h)
} GenCompletion;

typedef struct Generator Generator;

// Plans KV caches and buffers for cfg on tf's model (tf: a plan with
// max_tokens >= generator_token_budget(cfg), no backward needed).
// An allocation that fails is an error naming what it was for; a pool too
// small for one sequence of max_prompt_tokens + max_new_tokens is an error
// (PAIL_ERR_INVALID) naming both sizes.
int generator_init(Generator **out, Transformer *tf, const ModelConfig *mc, const GenConfig *cfg, PailErr *err);
void generator_free(Generator *g);
// Tokens of the generator's largest model call: max(max_prompt_tokens, batch_size, prefill_tokens).
int generator_token_budget(int max_prompt_tokens, int batch_size, int prefill_tokens);
// Generates G completions for each of P <= max_prompts prompts: out[p * G + j],
// whose ids and logprobs are the generator's (valid until the next run).
// Returns 0, 1 when abandon_fn said so (out holds nothing usable), or -1 with
// err (a prompt longer than max_prompt_tokens is an error naming it).
int generator_run(Generator *g, const GenPrompt *prompts, int P, GenCompletion *out, PailErr *err);
// The smallest pool (blocks) that holds one sequence of max_prompt_tokens +
// max_new_tokens with its prompt's pinned copy (generator_init refuses less).
int generator_min_blocks(int max_prompt_tokens, int max_new_tokens);
// The full pool, (batch_size + 1) x (ceil(max_ctx / KV_BLOCK) + 1): every
// decode slot at max length and the prompts of the groups in flight at once.
// It never runs short, and groups are admitted by free slots alone; a smaller
// pool counts blocks.
int64_t generator_full_blocks(int batch_size, int max_prompt_tokens, int max_new_tokens);
// Counters since generator_init (model calls and tokens, for tokens/s figures;
// preemptions), and the KV pool's figures of the last run.
typedef struct {
    int64_t prefill_calls, prefill_tokens, decode_calls, decode_tokens;
    int64_t kv_peak_bytes;      // the most KV-cache bytes held at once in the last run (the pool's blocks in use)
    int64_t kv_blocks;          // the pool's blocks
    int64_t kv_peak_blocks;     // the most held at once in the last run
    int64_t preemptions;        // sequences preempted (their blocks freed, replayed later)
    int64_t recomputed_tokens;  // tokens computed again for them (replayed completion tokens, prompts prefilled again)
} GenStats;
GenStats generator_stats(const Generator *g);
