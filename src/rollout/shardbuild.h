// The rollout shard builder: a RolloutShard (shard.h) from a batch of plain
// groups (generate.h) or of episodes with their segments (episode.h), and its
// create-only publishing at the next free sequence number. Not the
// attributes (the worker's: adapter, seeds, sampler), not the HDF5 format.
//
// Ownership, one rule for both kinds: a built shard owns every array and
// every component name, as one from shard_read does, and shard_free frees
// them all, after a failed build too. Nothing the builders read is kept.
#pragma once
#include "rollout/episode.h"
#include "rollout/generate.h"
#include "shard/shard.h"
#include "store/store.h"

// P prompts (prompts[p]) with G completions each (out[p * G + j]) into s's
// sizes and arrays (its attributes are left alone): prompt_index copied, K
// reward components named names, rewards zeroed for the caller to score into
// s->rewards, s->reward_valid and s->reward_components. 0, or -1 with err (out of memory).
int shard_build_groups(RolloutShard *s, const GenPrompt *prompts, int P, int G, const GenCompletion *out,
                       const int64_t *prompt_index, const char *const *names, int K, PailErr *err);

typedef struct {
    int failed;            // episodes without a reward
    const char *why;       // the first failed one's reason (borrowed from out)
    const char *dropped;   // the first component name past SHARD_MAX_COMPONENTS (borrowed from out; NULL: none)
    int64_t generated;     // tokens the model sampled (mask 1)
    double turns;          // assistant turns, all episodes together
} EpisodeShardInfo;

// P groups of G episodes (out[p * G + j], dataset rows prompt_index) into s's
// sizes and arrays. A group's prompt is the tokens its episodes' openings
// share; the rest of an opening starts each row, with mask 0. A group whose
// episodes were never opened, or whose openings share no token, gets the
// one-token prompt placeholder and failed rewards. The segments follow the N
// rows, each sharing its episode's reward. Reward components: every name the
// episodes gave, in first-seen order (0 where an episode has none). 0, or -1
// with err (out of memory).
int shard_build_episodes(RolloutShard *s, const EpisodeOut *out, int P, int G, const int64_t *prompt_index,
                         int32_t placeholder, EpisodeShardInfo *info, PailErr *err);

// Writes s create-only at rollouts/v<adapter_version>/<worker_id>-<*seq>.h5,
// moving on past sequence numbers already taken (a restarted worker with the
// same id; the same bytes already there count as written: an earlier try);
// *seq is then the number after the one written, and key (cap bytes) names
// it. 0, or -1 with err (a store error, or 1000 numbers taken).
int shard_publish(Store *st, const RolloutShard *s, long *seq, char *key, size_t cap, PailErr *err);
