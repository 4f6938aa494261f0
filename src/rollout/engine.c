// The rollout worker's generation engine (see engine.h): environment, memory
// plan, weights, the transformer planned for the adapter's rank with the
// generator or the episode runner on it, and the adapter uploaded to the
// model's backend.
#include "rollout/engine.h"
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "model/device.h"
#include "model/memplan.h"
#include "rollout/serve.h"
#include "rollout/toolcall.h"

bool rollout_episodic(const RolloutConfig *c) { return c->env_cmd || c->serve; }

int rollout_group_size(const RolloutConfig *c) {
    return c->eval ? (int)(c->eval_samples > 0 ? c->eval_samples : 1) : c->group_size;
}

// Prompts (dataset rows) per generator or episodes run: a shard's groups, or
// every row of the eval dataset.
static int run_prompts(const EngineSpec *s) {
    return s->cfg->eval ? (int)s->dataset_rows : s->cfg->groups_per_shard;
}

static bool stop_strings_hit(void *ctx, const int32_t *toks, int n) {
    Engine *e = ctx;
    if (!e->cfg->n_stop_strings) return false;
    Buf *b = &e->stop_text;
    PailErr err = {0};
    bool hit = false;
    buf_reset(b);
    // Only the tail can newly contain a stop string: decode the last 16 tokens.
    int from = n > 16 ? n - 16 : 0;
    if (tokenizer_decode(e->tok, toks + from, (size_t)(n - from), false, b, &err) == 0)
        for (int i = 0; i < e->cfg->n_stop_strings && !hit; i++)
            hit = b->data && strstr((char *)b->data, e->cfg->stop_strings[i]) != NULL;
    return hit;
}

// --env: the program and how tool calls are parsed (needs the chat template:
// episodes are conversations); --serve: the endpoint.
static int engine_env_open(Engine *e, const EngineSpec *s, PailErr *err) {
    const RolloutConfig *c = s->cfg;
    if (!s->chat || s->chat->plain_format)
        return err_set(err, PAIL_ERR_INVALID, "%s needs the model's chat template (episodes are conversations): %s",
                       c->serve ? "--serve" : "--env",
                       s->chat ? "--prompt-format renders one user message only" : s->chat_err);
    bool detect = !c->tool_format || !strcmp(c->tool_format, "auto");
    ToolFormat tf = TOOL_FORMAT_NONE;
    if (detect) tf = tool_format_detect(s->chat->text);
    else if (tool_format_parse(c->tool_format, &tf, err) < 0) return err_wrap(err, "--tool-format");
    e->ec.tool_format = tf;
    log_info("%s: tool calls parsed as %s%s; at most %d turns and %d tokens an episode",
             c->serve ? "the endpoint's episodes" : c->env_cmd,
             tool_format_name(tf), detect ? " (from the chat template)" : "", c->max_turns, c->max_episode_tokens);
    int G = rollout_group_size(c), rows = run_prompts(s);
    if (!c->serve) return env_init(&e->env, c->env_cmd, c->env_timeout, rows * G, err);
    // --serve: the endpoint. The bearer key comes from a file (never the command line: ps shows that).
    char key[512] = "";
    if (c->serve_api_key_file) {
        FILE *f = fopen(c->serve_api_key_file, "r");
        if (!f) return err_set(err, PAIL_ERR_IO, "--serve-api-key-file %s: %s", c->serve_api_key_file, strerror(errno));
        bool ok = fgets(key, sizeof key, f) != NULL;
        fclose(f);
        key[strcspn(key, "\r\n")] = 0;
        if (!ok || strlen(key) < 16)
            return err_set(err, PAIL_ERR_INVALID, "--serve-api-key-file %s: the first line must hold the key (16 "
                           "characters or more)", c->serve_api_key_file);
    }
    char name[256];
    if (c->served_model_name) snprintf(name, sizeof name, "%s", c->served_model_name);
    else {
        char real[4096];
        const char *m = realpath(c->model_dir, real) ? real : c->model_dir;
        const char *slash = strrchr(m, '/');
        snprintf(name, sizeof name, "%s", slash && slash[1] ? slash + 1 : m);
    }
    ServeConfig sc = {.listen = c->serve, .cert = c->serve_cert, .key = c->serve_tls_key,
                      .api_key = key[0] ? key : NULL, .model_name = name, .max_episodes = rows * G,
                      .max_extra = c->serve_max_requests, .group_size = G, .max_turns = c->max_turns,
                      .max_new_tokens = c->max_new_tokens, .episode_timeout_s = c->episode_timeout,
                      .max_connections = c->serve_max_connections, .header_timeout_s = c->serve_header_timeout,
                      .idle_timeout_s = c->serve_idle_timeout, .tool_format = tf, .tok = s->tok};
    if (serve_open(&e->env, &sc, err) < 0) return -1;
    log_info("serving the OpenAI API at %s/v1 (model '%s'%s)", serve_url(e->env), name,
             key[0] ? ", bearer key required" : "");
    return 0;
}

// The memory plan from the config alone, printed and checked before the
// weights are loaded. The adapter's rank is not known before the first one
// arrives (its few MiB are not in the plan).
static int plan_check(Engine *e, const EngineSpec *s, PailErr *err) {
    const RolloutConfig *c = s->cfg;
    ModelConfig mc;
    if (model_config_load(&mc, c->model_dir, err) < 0) return -1;
    Backend *be = c->backend ? c->backend : backend_cpu();
    int G = rollout_group_size(c), prompts = run_prompts(s);
    bool ep = rollout_episodic(c);
    char wdesc[MODEL_DTYPE_DESC];
    size_t wbytes = 0;
    if (dtype_plan(c->model_dir, c->weights_dtype, wdesc, &wbytes, err) < 0) return -1;
    MemoryPlanSpec spec = {.role = MEMPLAN_ROLLOUT, .weights_dtype = wdesc, .weights_bytes = wbytes,
                           .token_budget = generator_token_budget(c->max_prompt_tokens, c->batch_size, c->prefill_tokens),
                           .batch_size = c->batch_size,
                           .max_ctx = c->max_prompt_tokens + (ep ? c->max_episode_tokens : c->max_new_tokens),
                           .max_new_tokens = ep ? c->max_episode_tokens : c->max_new_tokens,
                           .groups_per_step = prompts > 0 ? prompts : 1, .group_size = G,
                           .threads = omp_get_max_threads(), .kv_memory = c->kv_memory, .kv_episodes = ep,
                           .kv_dtype = kv_dtype_resolve(c->kv_dtype, wdesc)};
    if (memplan_build(&e->mp, &mc, &spec, be->desc, err) < 0) return -1;
    memplan_fit_kv(&e->mp, c->max_memory);  // no --kv-memory: the pool gets what the rest of the plan leaves
    memplan_print(stderr, &e->mp, c->eval_once ? "grpo-ctl eval" : "grpo-rollout");
    if (memplan_check(&e->mp, c->max_memory, err) < 0) return -1;
    if (!ep && e->mp.kv_blocks < generator_min_blocks(c->max_prompt_tokens, c->max_new_tokens)) {
        int need = generator_min_blocks(c->max_prompt_tokens, c->max_new_tokens);
        return err_set(err, PAIL_ERR_INVALID, "KV pool of %d blocks (%.1f MiB, %s) cannot hold one sequence of %d "
                       "prompt + %d new tokens: it needs %d blocks of %d tokens (%.1f MiB); plan total %.1f MiB; raise "
                       "--kv-memory%s or lower --max-new-tokens or --max-prompt-tokens", e->mp.kv_blocks,
                       (double)e->mp.kv_cache / 1048576.0,
                       c->kv_memory ? "--kv-memory" : "what the memory limit leaves after the rest of the plan",
                       c->max_prompt_tokens, c->max_new_tokens, need, KV_BLOCK,
                       (double)need * e->mp.kv_block_bytes / 1048576.0, (double)e->mp.total / 1048576.0,
                       c->kv_memory ? "" : " (or --max-memory)");
    }
    return 0;
}

// The model's buffers for adapters of LoRA rank up to `rank`: planned at
// start without LoRA buffers, and again when an adapter of a higher rank
// comes (once: a run's adapters share one rank). The generator holds the
// transformer, so it is made again with it.
static int engine_plan(Engine *e, int rank, PailErr *err) {
    if (e->tf && rank <= e->lora_rank) return 0;
    generator_free(e->gen);
    episodes_free(e->eps);
    transformer_free(e->tf);
    e->gen = NULL;
    e->eps = NULL;
    e->tf = NULL;
    const RolloutConfig *c = e->cfg;
    TransformerPlan plan = {.max_tokens = generator_token_budget(c->max_prompt_tokens, c->batch_size, c->prefill_tokens),
                            .lora_rank = rank, .backend = c->backend};
    // A device short of memory (or of its --max-memory) is named with the plan.
    if (transformer_init(&e->tf, &e->w, &plan, err) < 0) return err->code == PAIL_ERR_NOMEM ? memplan_oom(&e->mp, err) : -1;
    if (e->env) {
        e->ec.token_budget = plan.max_tokens;
        if (episodes_init(&e->eps, e->tf, &e->w.cfg, &e->ec, err) < 0)
            return err->code == PAIL_ERR_NOMEM ? memplan_oom(&e->mp, err) : -1;
    } else if (generator_init(&e->gen, e->tf, &e->w.cfg, &e->gc, err) < 0) {
        return err->code == PAIL_ERR_NOMEM ? memplan_oom(&e->mp, err) : -1;
    }
    e->lora_rank = rank;
    return 0;
}

int engine_open(Engine *e, const EngineSpec *s, PailErr *err) {
    const RolloutConfig *c = s->cfg;
    e->cfg = c;
    e->tok = s->tok;
    if (rollout_episodic(c) && engine_env_open(e, s, err) < 0) return -1;
    if (plan_check(e, s, err) < 0) return -1;  // before the weights or anything large is allocated
    if (model_weights_load_as(&e->w, c->model_dir, c->weights_dtype, err) < 0) return -1;
    dtype_log_weights(&e->w);
    // Stop at the model's EOS ids and the tokenizer's.
    for (int i = 0; i < e->w.cfg.n_eos && e->n_stop < 15; i++) e->stop_ids[e->n_stop++] = e->w.cfg.eos_token_ids[i];
    int32_t te = tokenizer_eos_id(e->tok);
    if (te >= 0 && e->n_stop < 16) e->stop_ids[e->n_stop++] = te;
    int G = rollout_group_size(c), max_prompts = run_prompts(s);
    e->gc = (GenConfig){.group_size = G, .max_new_tokens = c->max_new_tokens, .batch_size = c->batch_size,
                        .max_prompt_tokens = c->max_prompt_tokens, .max_prompts = max_prompts > 0 ? max_prompts : 1,
                        .prefill_tokens = c->prefill_tokens, .kv_blocks = e->mp.kv_blocks,
                        .kv_dtype = e->mp.spec.kv_dtype,
                        .sampler = c->sampler, .stop_ids = e->stop_ids,
                        .n_stop_ids = e->n_stop, .stop_fn = stop_strings_hit, .stop_ctx = e,
                        .abandon_fn = s->abandon_fn, .abandon_ctx = s->abandon_ctx};
    if (c->eval && c->eval_samples <= 1) e->gc.sampler = (SamplerConfig){.temperature = 0, .top_p = 1, .top_k = 0};
    if (e->env) {
        e->ec.group_size = G;
        e->ec.batch_size = c->batch_size;
        e->ec.max_groups = e->gc.max_prompts;  // a shard's groups, or every eval row
        e->ec.max_extra = c->serve ? c->serve_max_requests : 0;
        e->ec.max_prompt_tokens = c->max_prompt_tokens;
        e->ec.max_episode_tokens = c->max_episode_tokens;
        e->ec.max_turn_tokens = c->max_new_tokens;
        e->ec.max_turns = c->max_turns;
        e->ec.kv_dtype = e->mp.spec.kv_dtype;
        e->ec.sampler = e->gc.sampler;  // greedy for a one-sample eval
        e->ec.stop_ids = e->stop_ids;
        e->ec.n_stop_ids = e->n_stop;
        e->ec.stop_fn = stop_strings_hit;
        e->ec.stop_ctx = e;
        e->ec.abandon_fn = s->abandon_fn;
        e->ec.abandon_ctx = s->abandon_ctx;
        e->ec.chat = s->chat;
        e->ec.tok = s->tok;
        e->ec.env = e->env;
    }
    return engine_plan(e, 0, err);  // no adapter yet
}

void engine_close(Engine *e) {
    generator_free(e->gen);
    episodes_free(e->eps);
    env_free(e->env);
    transformer_free(e->tf);
    trainable_close(e->adapter);
    lora_layout_free(&e->lay);
    model_weights_free(&e->w);
    buf_free(&e->stop_text);
    memset(e, 0, sizeof *e);
}

int engine_attach(Engine *e, LoraLayout *lay, const float *p, PailErr *err) {
    lora_layout_free(&e->lay);
    e->lay = *lay;
    memset(lay, 0, sizeof *lay);
    if (engine_plan(e, e->lay.cfg.rank, err) < 0) return -1;
    Backend *be = transformer_backend(e->tf);
    if (!e->adapter || trainable_count(e->adapter) != (size_t)e->lay.n_params ||
        trainable_backend(e->adapter) != be) {
        trainable_close(e->adapter);
        e->adapter = NULL;
        if (trainable_open(&e->adapter, be, (size_t)e->lay.n_params, false, NULL, err) < 0)
            return err_wrap(err, "the adapter");
    }
    if (trainable_load(e->adapter, p, NULL, NULL, err) < 0) return err_wrap(err, "uploading the adapter");
    return transformer_set_lora(e->tf, &e->lay, trainable_params(e->adapter), err);
}
