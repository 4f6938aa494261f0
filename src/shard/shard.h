// Rollout shards (doc/formats.md): all completions of one adapter version
// written by one worker, as an HDF5 file built in memory. One reader/writer
// used by every tool: grpo-rollout writes, grpo-train and grpo-ctl read.
// Sizes: P prompts, G completions each, N = P*G completions, K reward components,
// X segments: extra rows after the N, each a further segment of one of the N
// episodes (version 3: an agent edited its history; the segment shares that
// episode's reward and advantage). Per-row arrays hold N + X rows.
#pragma once
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"

#define SHARD_FORMAT "pail.rollout"
#define SHARD_FORMAT_VERSION 3     // read; written when X > 0 (else 2, as before segments)
#define SHARD_FORMAT_VERSION_PLAIN 2  // written without segments; version 1 (no completion_mask, turns) is still read
#define SHARD_FORMAT_VERSION_MIN 1
#define SHARD_MAX_COMPONENTS 32

enum { FINISH_STOP = 0, FINISH_LENGTH = 1 };

typedef struct {
    // root attributes
    char run_id[128];
    int64_t adapter_version;
    char worker_id[65];
    int64_t created_unix;
    char base_sha256[65], tokenizer_sha256[65];
    double temperature, top_p;
    double min_p;                 // 0 = off (absent from shards written before it: 0)
    int64_t top_k, max_new_tokens;
    int64_t seed;
    int64_t prompts_drawn;        // the writer's prompt-sampler position after this shard (0: not recorded)
    // optional (0: not recorded; group shards of a pail with a KV block pool): the writer's pool
    // and its pressure while it generated this shard (doc/rollout.md "KV pool")
    int64_t kv_pool_blocks, kv_peak_blocks, kv_preemptions, kv_recomputed_tokens;
    // sizes
    int64_t P, N, K;
    int64_t X;                    // segments: extra rows after the N (0 before version 3)
    // datasets (owned by the shard after shard_read; borrowed while writing, where
    // completion_mask and turns may be NULL: all ones, and 1 each)
    int32_t *prompt_ids;          // (sum of prompt lengths,)
    int64_t *prompt_offsets;      // (P+1,) prompt p is prompt_ids[off[p]:off[p+1]]
    int64_t *prompt_index;        // (P,) row of the prompt in the dataset
    int32_t *completion_ids;      // (sum of completion lengths,)
    int64_t *completion_offsets;  // (N+X+1,)
    int32_t *group;               // (N+X,) index into prompts (an extra row: its episode's)
    int32_t *segment_of;          // (X,) the episode row in [0, N) each extra row continues; NULL when X = 0
    float *logprobs;              // (sum of completion lengths,) behaviour log-probs (0 where the mask is 0)
    uint8_t *completion_mask;     // (sum of completion lengths,) 1: a token the model generated (trained),
                                  // 0: appended by the environment (tool results, user turns; never scored)
    int32_t *turns;               // (N+X,) assistant turns completed (1 for a single-turn completion; 0: failed before one)
    float *rewards;               // (N+X,) an extra row's: its episode's
    uint8_t *reward_valid;        // (N+X,) 0: reward failed, left out of the loss
    float *reward_components;     // (N+X, K)
    char *component_names[SHARD_MAX_COMPONENTS];  // K names
    uint8_t *finish_reason;       // (N+X,) FINISH_STOP / FINISH_LENGTH
} RolloutShard;

// Bounds on values (checked on read and write). A sampled token's log-prob
// below -1e3 cannot happen (exp underflows in float32 long before), and one
// such value makes the importance ratio exp(new - old) overflow; rewards and
// their components past 1e6 in magnitude are a broken reward function.
#define SHARD_LOGPROB_MIN (-1e3f)
#define SHARD_REWARD_MAX 1e6f

// Checks sizes, offsets (start at 0, non-decreasing, end at the id count),
// groups (in range, each prompt has the same number G of completions, stored
// contiguously), token ids in [0, vocab) when vocab > 0, log-probs in
// [SHARD_LOGPROB_MIN, 0], completion_mask in {0, 1} with the log-prob of a
// mask-0 token exactly 0, turns >= 0, segments (segment_of in [0, N), an
// extra row's group, reward_valid, reward and components its episode's), and
// valid rewards and their components within +-SHARD_REWARD_MAX. A NULL
// completion_mask or turns checks as all ones / 1. name is used in messages.
int shard_check(const RolloutShard *s, int64_t vocab, const char *name, PailErr *err);
// Serializes a checked shard into an HDF5 file image (format version 2, or 3
// when it has segments) appended to out; NULL completion_mask / turns are written as all ones / 1.
int shard_write(const RolloutShard *s, Buf *out, PailErr *err);
// Parses and checks a shard file image, version 1 to 3 (a version-1 shard gets
// completion_mask all ones and turns 1, so neither is ever NULL after a read);
// on failure nothing is left allocated.
int shard_read(RolloutShard *s, const void *data, size_t len, const char *name, PailErr *err);
void shard_free(RolloutShard *s);  // frees what shard_read allocated
int64_t shard_group_size(const RolloutShard *s);  // G = N / P
