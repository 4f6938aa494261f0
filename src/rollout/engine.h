// The rollout worker's generation engine: the base model, its transformer
// planned for the adapter's rank, the group generator (single completions,
// generate.h) or the episode runner on an environment (episode.h, env.h,
// serve.h), and the adapter on the model's backend. Not the choice of which
// adapter version to use (pacing.h) nor what becomes of the completions.
#pragma once
#include <stdbool.h>
#include "lora/lora.h"
#include "lora/trainable.h"
#include "model/memplan.h"
#include "model/transformer.h"
#include "rollout/episode.h"
#include "rollout/generate.h"
#include "rollout/worker.h"

// What engine_open needs besides the config; everything here is borrowed and
// outlives the engine.
typedef struct {
    const RolloutConfig *cfg;
    Tokenizer *tok;
    const ChatTemplate *chat;   // NULL: the model has none (chat_err says why)
    const char *chat_err;
    long dataset_rows;          // the eval worker runs every row at once
    bool (*abandon_fn)(void *ctx);  // asked between decode steps (generate.h); may be NULL
    void *abandon_ctx;
} EngineSpec;

typedef struct {
    const RolloutConfig *cfg;   // borrowed
    ModelWeights w;             // the base model (owned)
    Transformer *tf;            // planned for adapters of rank up to lora_rank (owned)
    Generator *gen;             // single completions on tf (owned; NULL with an environment)
    Episodes *eps;              // episodes on tf (owned; NULL without an environment)
    Env *env;                   // --env's program or --serve's endpoint (owned; NULL: single completions)
    GenConfig gc;
    EpisodeConfig ec;
    int lora_rank;
    LoraLayout lay;             // the attached adapter's layout (owned)
    Trainable *adapter;         // the attached adapter on the model's backend (owned; uploaded once per version)
    Tokenizer *tok;             // borrowed (stop strings)
    int stop_ids[16], n_stop;   // the model's EOS ids and the tokenizer's
    Buf stop_text;              // the stop-string check's decoded tail (kept: the decode loop allocates nothing once it has grown)
    MemoryPlan mp;              // the plan printed at start: what an allocation that fails names
} Engine;

// Multi-turn episodes: with an environment program or the endpoint's agents.
bool rollout_episodic(const RolloutConfig *c);
// Completions per prompt: --group-size, or the eval worker's --eval-samples (1 at least).
int rollout_group_size(const RolloutConfig *c);

// Opens the environment (--env, --serve), prints and checks the memory plan,
// loads the weights, and plans the generation without LoRA. 0, or -1 with err
// (engine_close frees what was made either way).
int engine_open(Engine *e, const EngineSpec *spec, PailErr *err);
void engine_close(Engine *e);
// Takes the adapter's layout (*lay is the engine's from then, left empty) and
// uploads its parameters p (the caller's, not kept) to the model's backend,
// planning the model again first when its rank is higher. 0 / -1 with err.
int engine_attach(Engine *e, LoraLayout *lay, const float *p, PailErr *err);
