// grpo-rollout's loop and the eval worker (see worker.h): bucket -> adapter ->
// prompts -> generate -> rewards -> shard -> bucket.
#include "rollout/worker.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "core/utf8.h"
#include "lora/peft.h"
#include "lora/trainable.h"
#include "model/device.h"
#include "model/memplan.h"
#include "model/transformer.h"
#include "rollout/dataset.h"
#include "rollout/env.h"
#include "rollout/serve.h"
#include "rollout/episode.h"
#include "rollout/generate.h"
#include "rollout/toolcall.h"
#include "shard/shard.h"
#include "store/runlayout.h"
#include "store/versions.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int32_t *ids;
    int n;
    char *text;           // the prompt as the model sees it (for rewards)
} Prompt;

typedef struct {
    const RolloutConfig *cfg;
    ModelWeights w;
    Tokenizer *tok;
    ChatTemplate chat;
    bool have_chat;
    PailErr chat_err;     // why there is no chat template (when !have_chat)
    Transformer *tf;      // planned for adapters of rank up to lora_rank (worker_plan)
    Generator *gen;       // on tf (single completions)
    GenConfig gc;
    Env *env;             // --env: the environment program
    Episodes *eps;        // --env: on tf, instead of gen
    EpisodeConfig ec;
    long env_batches;     // episode batches started (their ids' prefix)
    int lora_rank;
    Store *st;
    Dataset *ds;
    DatasetSampler smp;
    RewardSet *rs;
    char worker_id[WORKER_ID_MAX + 1];
    char tok_sha[65];
    char run_id[128];
    LoraLayout lay;
    Trainable *adapter;   // the loaded adapter on the model's backend (uploaded once per version)
    long version;         // loaded adapter version, -1: none
    long seq;             // next shard sequence number
    long shards;
    double gen_tokens, gen_seconds;
    int stop_ids[16], n_stop;
    char last_error[512];
    double last_heartbeat;
    uint8_t *row_refused;  // (rows,) 1: longer than --max-prompt-tokens, skipped (owned)
    long skipped_prompts;  // rows refused so far
    long stale_unwritten;  // shards not written: their version had left the trainer's window meanwhile
    long *refused;         // (n_refused,) adapter versions that did not verify (owned)
    int n_refused, cap_refused;
    long run_staleness;    // run.json's trainer max-staleness
    long trainer_window;   // the trainer's max_staleness as pacing last read it
    bool abandon_stale;    // this shard: abandon it when a newer adapter is out (window 0: it would be dropped)
    double next_version_check;
    long run_gps, run_publish_every;  // run.json's trainer groups-per-step (0: unknown) and publish-every (pacing)
    long waiting_after;    // newest version for which "waiting for the next version" was said (-1: none)
    volatile sig_atomic_t *stop;  // the caller's stop flag
    bool stop_seen;               // --serve: control/stop found while a batch waited for agents
    double next_stop_check;
    Buf stop_text;         // stop_strings_hit's decoded tail (kept: the decode loop allocates nothing once it has grown)
} Worker;

// Multi-turn episodes: with an environment program or the endpoint's agents.
static bool episodic(const RolloutConfig *c) { return c->env_cmd || c->serve; }

#define TRAINER_MAX_STALENESS 4  // grpo-train's --max-staleness default, when run.json lacks it

static bool stop_strings_hit(void *ctx, const int32_t *toks, int n) {
    Worker *w = ctx;
    if (!w->cfg->n_stop_strings) return false;
    Buf *b = &w->stop_text;
    PailErr err = {0};
    bool hit = false;
    buf_reset(b);
    // Only the tail can newly contain a stop string: decode the last 16 tokens.
    int from = n > 16 ? n - 16 : 0;
    if (tokenizer_decode(w->tok, toks + from, (size_t)(n - from), false, b, &err) == 0)
        for (int i = 0; i < w->cfg->n_stop_strings && !hit; i++)
            hit = b->data && strstr((char *)b->data, w->cfg->stop_strings[i]) != NULL;
    return hit;
}

// The generator's abandon_fn: with a staleness window of 0 the trainer drops
// a shard of any version but its newest, so a shard in generation is
// abandoned as soon as a newer adapter is out (looked up at most every
// VERSION_CHECK_S seconds: one LIST, between decode steps).
#define VERSION_CHECK_S 0.5
static void heartbeat(Worker *w, const char *state);
static bool adapter_outdated(void *ctx) {
    Worker *w = ctx;
    // --serve: a batch can wait long for its agents; the heartbeat says the worker serves.
    if (w->cfg->serve && time_mono_s() - w->last_heartbeat > 5) heartbeat(w, "serving");
    // --serve: a batch waits for agents that may never come; stopping (a signal,
    // or control/stop, looked for every few seconds) cancels it.
    if (w->cfg->serve && w->stop && *w->stop) return true;
    if (w->cfg->serve && time_mono_s() >= w->next_stop_check) {
        w->next_stop_check = time_mono_s() + 2.0;  // one HEAD every 2 s
        StoreStat ss;
        PailErr serr = {0};
        if (store_head(w->st, RUN_KEY_STOP, &ss, &serr) == 0) return w->stop_seen = true;
    }
    if (!w->abandon_stale) return false;
    double now = time_mono_s();
    if (now < w->next_version_check) return false;
    w->next_version_check = now + VERSION_CHECK_S;
    long newest = -1;
    PailErr err = {0};
    return versions_latest(w->st, &SERIES_ADAPTERS, &newest, &err) == 0 && newest > w->version;
}

static int encode_row(Worker *w, const DatasetRow *row, Prompt *out, PailErr *err) {
    Buf text = {0};
    int rc = 0;
    if (row->messages || (w->cfg->chat && row->prompt)) {
        if (!w->have_chat)
            return err_set(err, PAIL_ERR_INVALID, "%s:%lld: a chat row needs a chat template: %s", w->ds->source,
                           (long long)row->line, w->chat_err.msg);
        if (row->messages) rc = chat_render(&w->chat, (json_t *)row->messages, (json_t *)row->tools, true, &text, err);
        else rc = chat_render_prompt(&w->chat, row->prompt, true, &text, err);
        if (rc < 0) err_wrap(err, "%s:%lld", w->ds->source, (long long)row->line);
    } else if (w->have_chat && w->chat.plain_format) {
        rc = chat_render_prompt(&w->chat, row->prompt, true, &text, err);
    } else {
        rc = buf_append(&text, row->prompt, strlen(row->prompt));
    }
    if (rc < 0) { buf_free(&text); return -1; }
    TokenIds ids = {0};
    if (tokenizer_encode(w->tok, (char *)text.data, text.len, &ids, err) < 0) {
        token_ids_free(&ids);
        buf_free(&text);
        return -1;
    }
    if (ids.len < 1 || ids.len > (size_t)w->cfg->max_prompt_tokens) {
        err_set(err, PAIL_ERR_INVALID, "%s:%lld: prompt has %zu tokens (1..%d accepted: --max-prompt-tokens)",
                w->ds->source, (long long)row->line, ids.len, w->cfg->max_prompt_tokens);
        token_ids_free(&ids);
        buf_free(&text);
        return 1;
    }
    out->ids = ids.data;
    out->n = (int)ids.len;
    out->text = (char *)text.data;  // keeps the NUL-terminated bytes
    return 0;
}

// Encodes dataset row r, or refuses it when it does not fit --max-prompt-tokens:
// one line naming the row and its length, counted, and the row remembered so it
// is neither encoded nor reported again (a 10 MB row costs one tokenization).
// Returns 0 (encoded), 1 (skipped; *out untouched) or -1 with err.
static int prompt_encode(Worker *w, int64_t r, Prompt *out, PailErr *err) {
    if (w->row_refused[r]) return 1;
    int rc = encode_row(w, &w->ds->rows[r], out, err);
    if (rc == 1) {
        w->row_refused[r] = 1;
        w->skipped_prompts++;
        snprintf(w->last_error, sizeof w->last_error, "%s", err->msg);
        log_warn("%s: row skipped (%ld skipped so far)", err->msg, w->skipped_prompts);
    }
    return rc;
}

static void heartbeat(Worker *w, const char *state) {
    double now = time_mono_s();
    char key[128];
    run_key_worker(key, sizeof key, w->worker_id);
    char host[128] = "", last_error[3 * sizeof w->last_error];
    gethostname(host, sizeof host);
    // last_error quotes outside text and may be cut inside a character: made valid here, or
    // json_pack fails and the heartbeat freezes for good.
    utf8_lossy_copy(last_error, sizeof last_error, w->last_error, strlen(w->last_error));
    json_t *j = json_pack("{s:s, s:s, s:I, s:f, s:I, s:I, s:s, s:s, s:i, s:I, s:s}", "worker", w->worker_id, "state",
                          state, "version", (json_int_t)w->version, "tokens_per_second",
                          w->gen_seconds > 0 ? w->gen_tokens / w->gen_seconds : 0.0, "shards_written",
                          (json_int_t)w->shards, "skipped_prompts", (json_int_t)w->skipped_prompts, "last_error",
                          last_error, "host", host, "pid", (int)getpid(), "time", (json_int_t)time_unix_s(), "mode",
                          w->cfg->eval ? "eval" : "rollout");
    if (j && w->env) {
        EnvStats es = env_stats(w->env);
        json_object_set_new(j, "environment", json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "episodes", (json_int_t)es.starts,
                                                        "failed", (json_int_t)es.failed, "restarts", (json_int_t)es.restarts,
                                                        "timeouts", (json_int_t)es.timeouts, "bad_lines",
                                                        (json_int_t)es.bad_lines, "unknown_ids", (json_int_t)es.unknown_ids));
        if (w->cfg->serve) json_object_set_new(j, "endpoint", json_string(serve_url(w->env)));
    }
    if (j && !w->cfg->eval) {
        json_object_set_new(j, "prompts_drawn", json_integer((json_int_t)w->smp.drawn));
        json_object_set_new(j, "shards_not_written_stale", json_integer((json_int_t)w->stale_unwritten));
    }
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text) {  // out of memory: not worth failing the worker over
        log_warn("heartbeat %s: cannot build the JSON", key);
        return;
    }
    PailErr err = {0};
    StorePutOpts opt = {.content_type = "application/json"};
    if (store_put(w->st, key, text, strlen(text), &opt, &err) < 0) log_warn("heartbeat %s: %s", key, err.msg);
    free(text);
    w->last_heartbeat = now;
}

static bool stop_requested(Worker *w, volatile sig_atomic_t *stop) {
    if (stop && *stop) return true;
    StoreStat ss;
    PailErr err = {0};
    if (store_head(w->st, RUN_KEY_STOP, &ss, &err) == 0) {
        log_info("control/stop found: stopping");
        return true;
    }
    return false;
}

// The model's buffers for adapters of LoRA rank up to `rank`: planned at
// start without LoRA buffers, and again when an adapter of a higher rank
// comes (once: a run's adapters share one rank). The generator holds the
// transformer, so it is made again with it.
static int worker_plan(Worker *w, int rank, PailErr *err) {
    if (w->tf && rank <= w->lora_rank) return 0;
    generator_free(w->gen);
    episodes_free(w->eps);
    transformer_free(w->tf);
    w->gen = NULL;
    w->eps = NULL;
    w->tf = NULL;
    TransformerPlan plan = {.max_tokens = generator_token_budget(w->cfg->max_prompt_tokens, w->cfg->batch_size,
                                                                 w->cfg->prefill_tokens),
                            .lora_rank = rank, .backend = w->cfg->backend};
    if (transformer_init(&w->tf, &w->w, &plan, err) < 0) return -1;
    if (w->env) {
        w->ec.token_budget = plan.max_tokens;
        if (episodes_init(&w->eps, w->tf, &w->w.cfg, &w->ec, err) < 0) return -1;
    } else if (generator_init(&w->gen, w->tf, &w->w.cfg, &w->gc, err) < 0) {
        return -1;
    }
    w->lora_rank = rank;
    return 0;
}

// The adapter p (w->lay's layout; the caller's, not kept) onto the model's
// backend, where the model reads it: planned for its rank, uploaded once.
static int adapter_attach(Worker *w, const float *p, PailErr *err) {
    if (worker_plan(w, w->lay.cfg.rank, err) < 0) return -1;
    Backend *be = transformer_backend(w->tf);
    if (!w->adapter || trainable_count(w->adapter) != (size_t)w->lay.n_params ||
        trainable_backend(w->adapter) != be) {
        trainable_close(w->adapter);
        w->adapter = NULL;
        if (trainable_open(&w->adapter, be, (size_t)w->lay.n_params, false, NULL, err) < 0)
            return err_wrap(err, "the adapter");
    }
    if (trainable_load(w->adapter, p, NULL, NULL, err) < 0) return err_wrap(err, "uploading the adapter");
    return transformer_set_lora(w->tf, &w->lay, trainable_params(w->adapter), err);
}

// Loads adapter version v (verified, checked against the run's base). Returns 0,
// 1 when the adapter itself is bad (size or sha256 mismatch, not a pail adapter,
// another model's, non-finite weights: err says which), -1 for anything else
// (the store unreachable, the key gone, out of memory).
static int load_adapter(Worker *w, long v, PailErr *err) {
    char key[128];
    version_key(&SERIES_ADAPTERS, v, key, sizeof key);
    Buf b = {0};
    if (versioned_get(w->st, key, &b, err) < 0) {
        buf_free(&b);
        return err->code == PAIL_ERR_INVALID ? 1 : -1;
    }
    LoraLayout lay;
    float *p;
    AdapterMeta meta;
    int rc = lora_adapter_read(b.data, b.len, key, &w->w.cfg, &lay, &p, &meta, err);
    buf_free(&b);
    if (rc < 0) return err->code == PAIL_ERR_NOMEM ? -1 : 1;
    if (strcmp(meta.base_sha256, w->w.base_sha256)) {
        free(p);
        lora_layout_free(&lay);
        err_set(err, PAIL_ERR_INVALID, "%s was trained on base %.12s..., this worker's --model is %.12s...", key,
                meta.base_sha256, w->w.base_sha256);
        return 1;
    }
    lora_layout_free(&w->lay);
    w->lay = lay;
    w->version = v;
    if (w->cfg->serve) serve_set_version(w->env, v);
    rc = adapter_attach(w, p, err);
    free(p);
    return rc;
}

static bool adapter_refused(const Worker *w, long v) {
    for (int i = 0; i < w->n_refused; i++)
        if (w->refused[i] == v) return true;
    return false;
}

// Remembers a bad version (published objects never change, so it is never
// fetched again) and reports it in one line.
static void adapter_refuse(Worker *w, long v, const char *why) {
    log_warn("%s: adapter refused, not fetched again", why);
    snprintf(w->last_error, sizeof w->last_error, "%s", why);
    if (w->n_refused == w->cap_refused) {
        int nc = w->cap_refused ? 2 * w->cap_refused : 8;
        long *nr = realloc(w->refused, (size_t)nc * sizeof *nr);
        if (!nr) return;  // it is fetched and refused again next time: slower, still right
        w->refused = nr;
        w->cap_refused = nc;
    }
    w->refused[w->n_refused++] = v;
}

// The newest adapter version in [lo, newest] (with every > 1: newest or a
// multiple of every) that verifies, trying newest first and skipping refused
// ones; loads it unless it is the one in use. *got = that version, or -1 when
// none in the range verifies. -1 with err on a store or memory failure.
static int adapter_pick(Worker *w, long newest, long lo, long every, long *got, PailErr *err) {
    *got = -1;
    long *vs = NULL;
    int n = 0;
    bool listed = false;
    for (long v = newest; v >= 0 && v >= lo;) {
        if (!adapter_refused(w, v)) {
            if (v == w->version) { *got = v; break; }
            int rc = load_adapter(w, v, err);
            if (rc < 0) { free(vs); return -1; }
            if (rc == 0) { *got = v; break; }
            adapter_refuse(w, v, err->msg);
        }
        // The next older one from a listing: versions need not be contiguous (gc).
        if (!listed && versions_list(w->st, &SERIES_ADAPTERS, &vs, &n, err) < 0) return -1;
        listed = true;
        long next = -1;
        for (int i = n - 1; i >= 0 && next < 0; i--)
            if (vs[i] < v && (every <= 1 || vs[i] % every == 0)) next = vs[i];
        v = next;
    }
    free(vs);
    return 0;
}

// The trainer's staleness window: trainer/progress.json's max_staleness (the
// running trainer's), else run.json's (the first trainer's settings).
static long staleness_window(Worker *w) {
    long s = w->run_staleness;
    Buf b = {0};
    PailErr e = {0};
    if (store_get(w->st, RUN_KEY_PROGRESS, &b, NULL, NULL, &e) == 0) {
        json_t *j = json_loadb((char *)b.data, b.len, 0, NULL);
        json_t *v = json_object_get(j, "max_staleness");
        if (json_is_integer(v) && json_integer_value(v) >= 0) s = (long)json_integer_value(v);
        json_decref(j);
    }
    buf_free(&b);
    return s;
}

// A finished shard of version v is still worth writing unless the trainer
// (progress.json, read now) has moved past v + max_staleness while it was
// generated (a worker frozen, cut off or retrying a long time): the trainer
// never lists that version again, so such a shard would be lost uncounted.
// *tv gets the trainer's version. An unreadable progress.json: write.
static bool shard_out_of_window(Worker *w, long v, long *tv, long *ts) {
    Buf b = {0};
    PailErr e = {0};
    bool out = false;
    if (store_get(w->st, RUN_KEY_PROGRESS, &b, NULL, NULL, &e) == 0) {
        json_t *j = json_loadb((char *)b.data, b.len, 0, NULL);
        json_t *jv = json_object_get(j, "version"), *js = json_object_get(j, "max_staleness");
        if (json_is_integer(jv) && json_is_integer(js) && json_integer_value(js) >= 0) {
            *tv = (long)json_integer_value(jv);
            *ts = (long)json_integer_value(js);
            out = v < *tv - *ts;
        }
        json_decref(j);
    }
    buf_free(&b);
    return out;
}

// Nothing in [lo, newest] verifies: said once per newest version.
static void say_waiting(Worker *w, long newest, long lo, long staleness) {
    if (w->waiting_after == newest) return;
    w->waiting_after = newest;
    char key[128], why[96] = "";
    version_key(&SERIES_ADAPTERS, newest, key, sizeof key);
    if (lo == newest - staleness) snprintf(why, sizeof why, " (max_staleness %ld)", staleness);
    if (lo >= newest)
        log_warn("%s is refused and no older version is eligible%s: waiting for the next version", key, why);
    else
        log_warn("%s is refused and no version back to v%08ld verifies%s: waiting for the next version", key,
                 lo < 0 ? 0 : lo, why);
}

// A pause of ms: with --serve, spent answering the endpoint's ad-hoc requests.
static void pause_ms(Worker *w, int ms) {
    PailErr err = {0};
    if (w->cfg->serve && w->eps) {
        if (episodes_serve_idle(w->eps, ms, &err) < 0) log_warn("serving while waiting: %s", err.msg);
    } else {
        time_sleep_ms(ms);
    }
}

// Waits (10 s at most, then the loop looks again) for a version newer than
// after: the relay's long-poll, or polling with backoff (--serve: every 0.5 s,
// answering requests between). Returns 0 to go on, 1 when stopped, -1 with err.

static int wait_newer(Worker *w, long after, volatile sig_atomic_t *stop, PailErr *err) {
    heartbeat(w, "waiting");
    if (w->cfg->serve) {  // answering requests meanwhile: look for a version every 0.5 s
        for (int i = 0; i < 20; i++) {
            long newest = -1;
            PailErr lerr = {0};
            if (versions_latest(w->st, &SERIES_ADAPTERS, &newest, &lerr) == 0 && newest > after) return 0;
            if (stop && *stop) return 1;
            pause_ms(w, 500);
        }
        return 0;
    }
    long got;
    PailErr lerr = {0};
    if (versions_wait_newer(w->st, &SERIES_ADAPTERS, after, 10, stop, &got, &lerr) == 0) return 0;
    if (lerr.code == PAIL_ERR_TIMEOUT || lerr.code == PAIL_ERR_NETWORK) return 0;
    if (lerr.code == PAIL_ERR_INTERRUPTED) return 1;
    *err = lerr;
    return -1;
}

static int check_manifest(Worker *w, volatile sig_atomic_t *stop, PailErr *err) {
    json_t *m = NULL;
    int64_t deadline = time_mono_ms() + (int64_t)(w->cfg->wait_timeout > 0 ? w->cfg->wait_timeout * 1000 : 1e15);
    while (run_manifest_read(w->st, &m, err) < 0) {
        if (err->code != PAIL_ERR_NOT_FOUND && err->code != PAIL_ERR_NETWORK) return -1;
        if (time_mono_ms() > deadline) return err_wrap(err, "waiting for the trainer to create the run");
        if (stop_requested(w, stop)) return err_set(err, PAIL_ERR_INTERRUPTED, "stopped before the run started");
        pause_ms(w, 500);
    }
    const char *base = json_string_value(json_object_get(m, "base_sha256"));
    const char *toks = json_string_value(json_object_get(m, "tokenizer_sha256"));
    const char *rid = json_string_value(json_object_get(m, "run_id"));
    json_int_t G = json_integer_value(json_object_get(m, "group_size"));
    int rc = 0;
    if (!base || strcmp(base, w->w.base_sha256))
        rc = err_set(err, PAIL_ERR_INVALID, "run.json: base_sha256 %.12s... is not this --model's %.12s... (another "
                     "base model?)", base ? base : "(none)", w->w.base_sha256);
    else if (toks && *toks && strcmp(toks, w->tok_sha))
        rc = err_set(err, PAIL_ERR_INVALID, "run.json: tokenizer_sha256 %.12s... is not this model folder's %.12s...",
                     toks, w->tok_sha);
    else if (!w->cfg->eval && G && G != w->cfg->group_size)
        rc = err_set(err, PAIL_ERR_INVALID, "run.json: the trainer expects groups of %lld, --group-size is %d",
                     (long long)G, w->cfg->group_size);
    // The trainer's compute dtype (run.json of a trainer from before --dtype has none: it held f32).
    const char *tdt = json_string_value(json_object_get(m, "compute_dtype"));
    char mine[32];
    model_weights_dtype_desc(&w->w, mine, sizeof mine);
    if (rc == 0 && strcmp(tdt ? tdt : "f32", mine)) {
        if (w->cfg->strict_dtype)
            rc = err_set(err, PAIL_ERR_INVALID, "run.json: the trainer computes in %s, this worker holds its weights as %s "
                         "(--strict-dtype; give --dtype %s, or drop --strict-dtype)", tdt ? tdt : "f32", mine,
                         tdt && dtype_parse(tdt, &(DType){0}) == 0 ? tdt : "f32");
        else
            log_warn("run.json: the trainer computes in %s, this worker holds its weights as %s: behaviour log-probs "
                     "differ from the trainer's by the rounding (importance weights correct it; --strict-dtype refuses)",
                     tdt ? tdt : "f32", mine);
    }
    snprintf(w->run_id, sizeof w->run_id, "%s", rid ? rid : "");
    json_t *ms = json_object_get(json_object_get(m, "trainer"), "max-staleness");
    w->run_staleness = json_is_integer(ms) && json_integer_value(ms) >= 0 ? (long)json_integer_value(ms)
                                                                           : TRAINER_MAX_STALENESS;
    w->trainer_window = w->run_staleness;
    json_t *tr = json_object_get(m, "trainer"), *gs = json_object_get(tr, "groups-per-step"),
           *pe = json_object_get(tr, "publish-every");
    w->run_gps = json_is_integer(gs) && json_integer_value(gs) > 0 ? (long)json_integer_value(gs) : 0;
    w->run_publish_every = json_is_integer(pe) && json_integer_value(pe) > 0 ? (long)json_integer_value(pe) : 1;
    json_decref(m);
    return rc;
}

// A restarted worker continues its own prompt stream: the sampler is seeked to
// the larger of the position recorded in this worker id's last shard (the one
// with the highest sequence number; prompts_drawn) and in its heartbeat, and
// shard numbers go on after the last one. The heartbeat's version narrows the
// listing: a worker's versions only grow. Nothing found: from the beginning.
static void resume_position(Worker *w) {
    char hkey[128], after[64] = "", last[STORE_MAX_KEY + 1] = "", src[STORE_MAX_KEY + 1] = "";
    run_key_worker(hkey, sizeof hkey, w->worker_id);
    long hb_version = -1, last_seq = -1, last_version = -1;
    int64_t hb_drawn = 0, drawn = 0;
    Buf b = {0};
    PailErr e = {0};
    if (store_get(w->st, hkey, &b, NULL, NULL, &e) == 0) {
        json_t *j = json_loadb((char *)b.data, b.len, 0, NULL);
        const char *id = json_string_value(json_object_get(j, "worker"));
        const char *mode = json_string_value(json_object_get(j, "mode"));
        if (id && !strcmp(id, w->worker_id) && (!mode || !strcmp(mode, "rollout"))) {
            json_t *v = json_object_get(j, "version"), *d = json_object_get(j, "prompts_drawn");
            if (json_is_integer(v)) hb_version = (long)json_integer_value(v);
            if (json_is_integer(d) && json_integer_value(d) > 0) hb_drawn = (int64_t)json_integer_value(d);
        }
        json_decref(j);
    }
    buf_free(&b);
    if (hb_version >= 0) snprintf(after, sizeof after, "rollouts/v%08ld", hb_version);
    StoreList l = {0};
    if (store_list_all(w->st, "rollouts/", after[0] ? after : NULL, &l, &e) < 0) {
        log_warn("listing this worker's earlier shards: %s", e.msg);
    } else {
        for (int i = 0; i < l.n; i++) {
            long v, seq;
            char wid[WORKER_ID_MAX + 1];
            if (run_parse_rollout(l.entries[i].key, &v, wid, sizeof wid, &seq) < 0 || strcmp(wid, w->worker_id))
                continue;
            if (seq > last_seq || (seq == last_seq && v > last_version)) {
                last_seq = seq;
                last_version = v;
                snprintf(last, sizeof last, "%s", l.entries[i].key);
            }
        }
    }
    store_list_free(&l);
    if (last[0]) {
        w->seq = last_seq + 1;
        RolloutShard sh;
        if (versioned_get(w->st, last, &b, &e) == 0 && shard_read(&sh, b.data, b.len, last, &e) == 0) {
            drawn = sh.prompts_drawn;
            shard_free(&sh);
            if (drawn > 0) snprintf(src, sizeof src, "%s", last);
        } else {
            log_warn("reading this worker's last shard: %s", e.msg);
        }
        buf_free(&b);
    }
    if (hb_drawn > drawn) {
        drawn = hb_drawn;
        snprintf(src, sizeof src, "%s", hkey);
    }
    if (drawn > 0) {
        dataset_sampler_seek(&w->smp, drawn);
        log_info("worker %s: resuming after %lld prompts drawn (from %s)", w->worker_id, (long long)drawn, src);
    } else if (last[0]) {
        log_info("worker %s: %s records no prompt position (an older pail wrote it): the prompt stream starts from "
                 "the beginning", w->worker_id, last);
    } else {
        log_info("worker %s: no earlier shard or heartbeat of this id: the prompt stream starts from the beginning",
                 w->worker_id);
    }
}

// The attributes of a shard of this worker's adapter (sizes and data are the caller's).
static void shard_header(Worker *w, RolloutShard *s) {
    const RolloutConfig *c = w->cfg;
    snprintf(s->run_id, sizeof s->run_id, "%s", w->run_id);
    s->adapter_version = w->version;
    snprintf(s->worker_id, sizeof s->worker_id, "%s", w->worker_id);
    s->created_unix = time_unix_s();
    snprintf(s->base_sha256, sizeof s->base_sha256, "%s", w->w.base_sha256);
    snprintf(s->tokenizer_sha256, sizeof s->tokenizer_sha256, "%s", w->tok_sha);
    s->temperature = c->sampler.temperature;
    s->top_p = c->sampler.top_p;
    s->top_k = c->sampler.top_k;
    s->min_p = c->sampler.min_p;
    // Dr.GRPO's constant: a completion's token limit (an episode's, with --env).
    s->max_new_tokens = episodic(c) ? c->max_episode_tokens : c->max_new_tokens;
    s->seed = c->seed;
    s->prompts_drawn = w->smp.drawn;  // where a restart with this worker id continues (resume_position)
}

// Before a generated shard is written: 0 to write it; -1 (err: interrupted)
// when asked to drop the batch; 1 when the trainer moved past its version's
// window meanwhile (its prompts are drawn again, with a newer adapter).
static int shard_still_wanted(Worker *w, volatile sig_atomic_t *stop, int64_t drawn_before, PailErr *err) {
    if (stop && *stop > 1) return err_set(err, PAIL_ERR_INTERRUPTED, "stopped: batch dropped");
    long tv, ts;
    if (!shard_out_of_window(w, w->version, &tv, &ts)) return 0;
    w->stale_unwritten++;
    log_warn("shard of adapter v%08ld not written (%ld so far): the trainer is at v%08ld and uses shards at most "
             "%ld versions old (--max-staleness); its prompts are drawn again", w->version, w->stale_unwritten, tv, ts);
    dataset_sampler_seek(&w->smp, drawn_before);
    return 1;
}

// Writes s create-only at the next free sequence number (a restarted worker
// with the same id moves on past the taken ones) and counts it. extra: more
// of the log line. 0 / -1 with err.
static int publish_shard(Worker *w, const RolloutShard *s, int64_t ntok, double secs, const char *extra,
                         PailErr *err) {
    Buf img = {0};
    int rc = shard_write(s, &img, err);
    bool put = false;
    for (int tries = 0; rc == 0 && !put; tries++) {
        if (tries == 1000) {
            rc = err_set(err, PAIL_ERR_EXISTS, "1000 shard sequence numbers of worker %s taken in a row", w->worker_id);
            break;
        }
        char key[256];
        run_key_rollout(key, sizeof key, w->version, w->worker_id, w->seq);
        rc = versioned_put(w->st, key, img.data, img.len, err);
        if (rc == 0) {
            double rmean = 0;
            for (int64_t i = 0; i < s->N; i++) rmean += s->rewards[i];
            log_info("wrote %s: %lld groups x %lld, reward %.3f, %.0f tok/s%s", key, (long long)s->P,
                     (long long)shard_group_size(s), rmean / (double)s->N, secs > 0 ? (double)ntok / secs : 0.0, extra);
            w->seq++;
            w->shards++;
            w->gen_tokens += (double)ntok;
            w->gen_seconds += secs;
            put = true;
            break;
        }
        if (err->code != PAIL_ERR_EXISTS) break;
        rc = 0;
        w->seq++;
    }
    buf_free(&img);
    return rc;
}

// The token arrays of a shard of s->P prompts and s->N + s->X rows holding
// nprompt and ntok tokens; with masked also its completion mask and turns
// (without, shard_write stores all ones and 1). 0, or -1 with err (what was
// allocated stays in s, for the caller's frees).
static int shard_alloc_tokens(RolloutShard *s, int64_t nprompt, int64_t ntok, bool masked, PailErr *err) {
    size_t nt = (size_t)(ntok ? ntok : 1), N = (size_t)(s->N + s->X);
    s->prompt_ids = malloc((size_t)nprompt * sizeof(int32_t));
    s->prompt_offsets = malloc(((size_t)s->P + 1) * sizeof(int64_t));
    s->completion_ids = malloc(nt * sizeof(int32_t));
    s->logprobs = malloc(nt * sizeof(float));
    s->completion_offsets = malloc((N + 1) * sizeof(int64_t));
    s->group = malloc(N * sizeof(int32_t));
    if (masked) {
        s->completion_mask = malloc(nt);
        s->turns = malloc(N * sizeof(int32_t));
    }
    if (s->X) s->segment_of = malloc((size_t)s->X * sizeof(int32_t));
    if (!s->prompt_ids || !s->prompt_offsets || !s->completion_ids || !s->logprobs || !s->completion_offsets ||
        !s->group || (masked && (!s->completion_mask || !s->turns)) || (s->X && !s->segment_of))
        return err_set(err, PAIL_ERR_NOMEM, "out of memory for a shard of %lld tokens", (long long)ntok);
    return 0;
}

// --env: the program and how tool calls are parsed (needs the chat template:
// episodes are conversations).
static int env_setup(Worker *w, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    if (!w->have_chat || w->chat.plain_format)
        return err_set(err, PAIL_ERR_INVALID, "%s needs the model's chat template (episodes are conversations): %s",
                       c->serve ? "--serve" : "--env",
                       w->have_chat ? "--prompt-format renders one user message only" : w->chat_err.msg);
    bool detect = !c->tool_format || !strcmp(c->tool_format, "auto");
    ToolFormat tf = TOOL_FORMAT_NONE;
    if (detect) tf = tool_format_detect(w->chat.text);
    else if (tool_format_parse(c->tool_format, &tf, err) < 0) return err_wrap(err, "--tool-format");
    w->ec.tool_format = tf;
    log_info("%s: tool calls parsed as %s%s; at most %d turns and %d tokens an episode",
             c->serve ? "the endpoint's episodes" : c->env_cmd,
             tool_format_name(tf), detect ? " (from the chat template)" : "", c->max_turns, c->max_episode_tokens);
    int G = c->eval ? (int)(c->eval_samples > 0 ? c->eval_samples : 1) : c->group_size;
    int rows = c->eval ? (int)w->ds->n : c->groups_per_shard;
    if (!c->serve) return env_init(&w->env, c->env_cmd, c->env_timeout, rows * G, err);
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
                      .idle_timeout_s = c->serve_idle_timeout, .tool_format = tf, .tok = w->tok};
    if (serve_open(&w->env, &sc, err) < 0) return -1;
    log_info("serving the OpenAI API at %s/v1 (model '%s'%s)", serve_url(w->env), name,
             key[0] ? ", bearer key required" : "");
    return 0;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

// Row i of an episode shard: the rest of the episode's opening after the
// group's shared prompt (mask 0), then the row (ids, lp, mask: n tokens).
// Rows are written in order: row i starts where row i - 1 ended.
static void episode_row(RolloutShard *s, int i, const EpisodeOut *o, int shared, const int32_t *ids,
                        const float *lp, const uint8_t *mask, int n) {
    int64_t q = s->completion_offsets[i];
    int rest = o->n_open ? o->n_open - shared : 0;
    if (rest > 0) {
        memcpy(s->completion_ids + q, o->open_ids + shared, (size_t)rest * sizeof(int32_t));
        memset(s->logprobs + q, 0, (size_t)rest * sizeof(float));
        memset(s->completion_mask + q, 0, (size_t)rest);
        q += rest;
    }
    memcpy(s->completion_ids + q, ids, (size_t)n * sizeof(int32_t));
    memcpy(s->logprobs + q, lp, (size_t)n * sizeof(float));
    memcpy(s->completion_mask + q, mask, (size_t)n);
    s->completion_offsets[i + 1] = q + n;
    s->group[i] = i < s->N ? i / (int)shard_group_size(s) : s->group[s->segment_of[i - s->N]];
}

// --env: runs groups_per_shard x G episodes and publishes them as one shard.
// A group's prompt is the tokens its episodes' openings share (all of them,
// when the program opens each alike); the rest of an opening starts its
// completion, with mask 0. Returns 0, 1 when abandoned or out of the window
// (the prompts are drawn again), -1 with err.
static int one_shard_env(Worker *w, volatile sig_atomic_t *stop, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    int P = c->groups_per_shard, G = c->group_size, N = P * G, rc = -1;
    json_t **rows = calloc((size_t)P, sizeof *rows);
    uint64_t *seeds = calloc((size_t)P, sizeof *seeds);
    int64_t *rix = calloc((size_t)P, sizeof *rix);
    int *lcp = calloc((size_t)P, sizeof *lcp), *base = calloc((size_t)P, sizeof *base);
    EpisodeOut *out = calloc((size_t)N, sizeof *out);
    RolloutShard s = {0};
    if (!rows || !seeds || !rix || !lcp || !base || !out) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory for a shard of %d groups x %d episodes", P, G);
        goto done;
    }
    int64_t drawn_before = w->smp.drawn;
    for (int p = 0; p < P; p++) {
        int64_t drawn = w->smp.drawn;
        rix[p] = dataset_sampler_next(&w->smp);
        rows[p] = (json_t *)w->ds->rows[rix[p]].fields;
        char sk[256];
        snprintf(sk, sizeof sk, "%s/%lld", w->worker_id, (long long)drawn);
        seeds[p] = (uint64_t)c->seed ^ hash64(sk, strlen(sk));
    }
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s/%ld", w->worker_id, w->env_batches++);
    double t0 = time_mono_s();
    w->abandon_stale = w->trainer_window == 0;
    w->next_version_check = t0;
    int er = episodes_run(w->eps, prefix, rows, seeds, P, out, err);
    w->abandon_stale = false;
    if (er < 0) goto done;
    if (er == 1 && ((stop && *stop) || w->stop_seen)) {
        log_info("stopping: the open episodes of this batch are cancelled (their agents get 503)");
        rc = 1;
        goto done;
    }
    if (er == 1) {
        log_info("abandoned a shard of adapter v%08ld after %.1f s: a newer version is out and with "
                 "--max-staleness 0 the trainer would drop it", w->version, time_mono_s() - t0);
        dataset_sampler_seek(&w->smp, drawn_before);
        rc = 1;
        goto done;
    }
    double secs = time_mono_s() - t0;
    // Reward components: every name the program gave, in first-seen order (0 where an episode has none).
    const char *names[SHARD_MAX_COMPONENTS];
    int K = 0, failed = 0;
    const char *why = NULL, *dropped = NULL;
    for (int i = 0; i < N; i++) {
        const char *key;
        json_t *v;
        if (!out[i].valid) { failed++; if (!why) why = out[i].why; }
        json_object_foreach((json_t *)out[i].components, key, v) {
            int k = 0;
            while (k < K && strcmp(names[k], key)) k++;
            if (k == K && K < SHARD_MAX_COMPONENTS) names[K++] = key;
            else if (k == K && !dropped) dropped = key;
        }
    }
    if (dropped)  // each episode's are at most 32 (env_components_ok); their union may not be
        log_warn("shard of adapter v%08ld: the episodes name more than %d reward components together; '%s' and "
                 "the names after it are not stored", w->version, SHARD_MAX_COMPONENTS, dropped);
    int64_t nprompt = 0, ntok = 0, ngen = 0;
    int X = 0;  // further segments (an endpoint's agent edited its history): rows after the N
    double turns = 0;
    for (int p = 0; p < P; p++) {
        base[p] = -1;
        for (int j = 0; j < G; j++) {
            const EpisodeOut *o = &out[p * G + j];
            if (!o->n_open) continue;
            if (base[p] < 0) { base[p] = p * G + j; lcp[p] = o->n_open; }
            else lcp[p] = common_prefix(out[base[p]].open_ids, lcp[p], o->open_ids, o->n_open);
        }
        nprompt += lcp[p] > 0 ? lcp[p] : 1;
        for (int j = 0; j < G; j++) {
            const EpisodeOut *o = &out[p * G + j];
            int rest = o->n_open ? o->n_open - (lcp[p] > 0 ? lcp[p] : 0) : 0;
            ntok += o->n + rest;
            for (int t = 0; t < o->n; t++) ngen += o->mask[t];
            for (int g = 0; g < o->n_segs; g++) {
                ntok += o->segs[g].n + rest;
                for (int t = 0; t < o->segs[g].n; t++) ngen += o->segs[g].mask[t];
            }
            X += o->n_segs;
            turns += o->turns;
        }
    }
    shard_header(w, &s);
    s.P = P;
    s.N = N;
    s.X = X;
    s.K = K;
    s.prompt_index = rix;
    size_t R = (size_t)(N + X);
    s.rewards = calloc(R, sizeof(float));
    s.reward_valid = calloc(R, 1);
    s.reward_components = calloc(R * (K ? K : 1), sizeof(float));
    s.finish_reason = malloc(R);
    for (int k = 0; k < K; k++) s.component_names[k] = (char *)names[k];
    if (shard_alloc_tokens(&s, nprompt, ntok, true, err) < 0) goto free_shard;
    if (!s.rewards || !s.reward_valid || !s.reward_components || !s.finish_reason) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory for a shard of %d episodes", N);
        goto free_shard;
    }
    s.prompt_offsets[0] = 0;
    s.completion_offsets[0] = 0;
    for (int p = 0; p < P; p++) {
        int32_t *pp = s.prompt_ids + s.prompt_offsets[p];
        // A group no episode of which was opened (or whose openings share no
        // token: their rows would not be what the model saw) gets a one-token
        // placeholder prompt, the model's first stop id, and failed rewards.
        if (lcp[p] > 0) memcpy(pp, out[base[p]].open_ids, (size_t)lcp[p] * sizeof(int32_t));
        else pp[0] = w->n_stop ? w->stop_ids[0] : 0;
        s.prompt_offsets[p + 1] = s.prompt_offsets[p] + (lcp[p] > 0 ? lcp[p] : 1);
        int shared = lcp[p] > 0 ? lcp[p] : 0;
        for (int j = 0; j < G; j++) {
            int i = p * G + j;
            const EpisodeOut *o = &out[i];
            int segturns = 0;
            for (int g = 0; g < o->n_segs; g++) segturns += o->segs[g].turns;
            episode_row(&s, i, o, shared, o->ids, o->logprobs, o->mask, o->n);
            s.turns[i] = o->turns - segturns;
            s.finish_reason[i] = o->finish;
            s.reward_valid[i] = o->valid && lcp[p] > 0;
            s.rewards[i] = o->valid ? (float)o->reward : 0.0f;
            for (int k = 0; k < K && o->valid; k++) {
                json_t *v = json_object_get(o->components, names[k]);
                s.reward_components[(size_t)i * K + k] = v ? (float)json_number_value(v) : 0.0f;
            }
        }
    }
    // The segments, in the same token layout, after the N rows; each shares its episode's reward.
    for (int i = 0, x = 0; i < N; i++)
        for (int g = 0; g < out[i].n_segs; g++, x++) {
            const EpisodeSeg *sg = &out[i].segs[g];
            int r = N + x, p = i / G;
            s.segment_of[x] = i;
            episode_row(&s, r, &out[i], lcp[p] > 0 ? lcp[p] : 0, sg->ids, sg->logprobs, sg->mask, sg->n);
            s.turns[r] = sg->turns;
            s.finish_reason[r] = sg->finish;
            s.reward_valid[r] = s.reward_valid[i];
            s.rewards[r] = s.rewards[i];
            for (int k = 0; k < K; k++) s.reward_components[(size_t)r * K + k] = s.reward_components[(size_t)i * K + k];
        }
    if (failed) {
        snprintf(w->last_error, sizeof w->last_error, "%s", why);
        log_warn("%d of %d episodes failed (left out of the advantages): %s", failed, N, why);
    }
    if ((rc = shard_still_wanted(w, stop, drawn_before, err)) != 0) goto free_shard;
    char extra[224];
    EpisodeStats es = episodes_stats(w->eps);
    snprintf(extra, sizeof extra, "; %.2f turns an episode, %d failed, %lld tokens appended, %lld of %d openings "
             "copied from their group's prefill", turns / N, failed, (long long)es.appended_tokens,
             (long long)es.forked_openings, N);
    if (X) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "; %d more segments (edited histories)", X);
    rc = publish_shard(w, &s, ngen, secs, extra, err);
free_shard:
    s.prompt_index = NULL;  // rix, freed below
    for (int k = 0; k < SHARD_MAX_COMPONENTS; k++) s.component_names[k] = NULL;  // borrowed
    shard_free(&s);
done:
    free(rows);
    free(seeds);
    free(rix);
    free(lcp);
    free(base);
    free(out);
    return rc;
}

// Generates, scores and publishes one shard of groups_per_shard groups.
// Returns 0, 1 when it was abandoned (adapter_outdated), -1 with err.
static int one_shard(Worker *w, volatile sig_atomic_t *stop, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    int P = c->groups_per_shard, G = c->group_size, N = P * G;
    Prompt *pr = calloc((size_t)P, sizeof *pr);
    GenPrompt *gp = calloc((size_t)P, sizeof *gp);
    GenCompletion *out = calloc((size_t)N, sizeof *out);
    int64_t *rows = calloc((size_t)P, sizeof *rows);
    int rc = -1;
    if (!pr || !gp || !out || !rows) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory for a shard of %d groups x %d", P, G);
        goto done;
    }
    int64_t drawn_before = w->smp.drawn;
    for (int p = 0; p < P; p++) {
        int64_t drawn, misses = 0;
        int e;
        do {  // skip refused rows; a whole cycle of them means none fits
            if (misses++ > w->ds->n) {
                err_set(err, PAIL_ERR_INVALID, "dataset %s: no row fits --max-prompt-tokens %d (%ld of %lld refused)",
                        w->ds->source, c->max_prompt_tokens, w->skipped_prompts, (long long)w->ds->n);
                goto done;
            }
            drawn = w->smp.drawn;
            rows[p] = dataset_sampler_next(&w->smp);
        } while ((e = prompt_encode(w, rows[p], &pr[p], err)) == 1);
        if (e < 0) goto done;
        char sk[256];
        snprintf(sk, sizeof sk, "%s/%lld", w->worker_id, (long long)drawn);
        gp[p] = (GenPrompt){.ids = pr[p].ids, .n = pr[p].n, .seed = (uint64_t)c->seed ^ hash64(sk, strlen(sk))};
    }
    double t0 = time_mono_s();
    w->abandon_stale = w->trainer_window == 0;
    w->next_version_check = t0;
    int gr = generator_run(w->gen, gp, P, out, err);
    w->abandon_stale = false;
    if (gr < 0) goto done;
    if (gr == 1) {  // the prompts are drawn again, with the new adapter
        log_info("abandoned a shard of adapter v%08ld after %.1f s: a newer version is out and with "
                 "--max-staleness 0 the trainer would drop it", w->version, time_mono_s() - t0);
        dataset_sampler_seek(&w->smp, drawn_before);
        rc = 1;
        goto done;
    }
    double secs = time_mono_s() - t0;
    // Rewards.
    int K = reward_set_count(w->rs);
    RewardInput *in = calloc((size_t)N, sizeof *in);
    char **texts = calloc((size_t)N, sizeof *texts);
    float *comp = calloc((size_t)N * (K ? K : 1), sizeof *comp), *total = calloc((size_t)N, sizeof *total);
    uint8_t *valid = calloc((size_t)N, 1), *fin = calloc((size_t)N, 1);
    int64_t ntok = 0, nprompt = 0;
    for (int i = 0; i < N; i++) {
        Buf b = {0};
        PailErr derr = {0};
        tokenizer_decode(w->tok, out[i].ids, (size_t)out[i].n, true, &b, &derr);
        texts[i] = b.data ? (char *)b.data : strdup("");
        in[i] = (RewardInput){.prompt = pr[i / G].text, .completion = texts[i], .completion_tokens = out[i].n,
                              .row = w->ds->rows[rows[i / G]].fields};
        ntok += out[i].n;
        fin[i] = out[i].finish;
    }
    for (int p = 0; p < P; p++) nprompt += pr[p].n;
    PailErr warn = {0};
    int bad = reward_set_score_batch(w->rs, in, N, comp, total, valid, &warn);
    if (bad < 0) { *err = warn; goto free_scores; }
    if (bad > 0) {
        snprintf(w->last_error, sizeof w->last_error, "%s", warn.msg);
        log_warn("%d of %d rewards failed: %s", bad, N, warn.msg);
    }
    if ((rc = shard_still_wanted(w, stop, drawn_before, err)) != 0) goto free_scores;
    rc = -1;
    // Assemble the shard.
    RolloutShard s = {0};
    shard_header(w, &s);
    s.P = P;
    s.N = N;
    s.K = K;
    s.prompt_index = rows;
    s.rewards = total;
    s.reward_valid = valid;
    s.reward_components = comp;
    s.finish_reason = fin;
    const char *const *names = reward_set_names(w->rs);
    for (int k = 0; k < K; k++) s.component_names[k] = (char *)names[k];
    if (shard_alloc_tokens(&s, nprompt, ntok, false, err) == 0) {
        s.prompt_offsets[0] = 0;
        for (int p = 0; p < P; p++) {
            memcpy(s.prompt_ids + s.prompt_offsets[p], pr[p].ids, (size_t)pr[p].n * sizeof(int32_t));
            s.prompt_offsets[p + 1] = s.prompt_offsets[p] + pr[p].n;
        }
        s.completion_offsets[0] = 0;
        for (int i = 0; i < N; i++) {
            memcpy(s.completion_ids + s.completion_offsets[i], out[i].ids, (size_t)out[i].n * sizeof(int32_t));
            memcpy(s.logprobs + s.completion_offsets[i], out[i].logprobs, (size_t)out[i].n * sizeof(float));
            s.completion_offsets[i + 1] = s.completion_offsets[i] + out[i].n;
            s.group[i] = i / G;
        }
        rc = publish_shard(w, &s, ntok, secs, "", err);
    }
    free(s.prompt_ids);
    free(s.prompt_offsets);
    free(s.completion_ids);
    free(s.logprobs);
    free(s.completion_offsets);
    free(s.group);
    rows = NULL;     // owned by the shard struct above, freed as prompt_index below
    free(s.prompt_index);
    comp = NULL; total = NULL; valid = NULL; fin = NULL;
    free(s.rewards);
    free(s.reward_components);
    free(s.reward_valid);
    free(s.finish_reason);
free_scores:
    for (int i = 0; i < N; i++) free(texts[i]);
    free(texts);
    free(in);
    free(comp);
    free(total);
    free(valid);
    free(fin);
done:
    for (int p = 0; pr && p < P; p++) { free(pr[p].ids); free(pr[p].text); }
    free(pr);
    free(gp);
    free(out);
    free(rows);
    return rc;
}

// Other workers that may have a shard in generation: heartbeats under
// workers/ written in the last ACTIVE_WORKER_S seconds (a worker writes one
// after each shard and while paused or waiting; a stopped one or an eval
// worker is counted until its heartbeat ages out: it only slows the pace).
#define ACTIVE_WORKER_S 120
static long others_active(Worker *w) {
    StoreList l = {0};
    PailErr err = {0};
    char own[128];
    long n = 0;
    run_key_worker(own, sizeof own, w->worker_id);
    if (store_list_all(w->st, "workers/", NULL, &l, &err) == 0)
        for (int i = 0; i < l.n; i++)
            if (strcmp(l.entries[i].key, own) && l.entries[i].mtime >= (int64_t)time_unix_s() - ACTIVE_WORKER_S) n++;
    store_list_free(&l);
    return n;
}

// Pacing: pauses before a shard while the trainer has enough unused groups
// that this one would wait past its staleness window. A shard of version v is
// used while the trainer's version is at most v + S, and the trainer takes
// groups_per_step groups a step, oldest first, one version a step: so
// (S + 1) steps' groups can be in the window unused (the step in training
// counts: its groups stay unused until it commits) before a new one goes
// stale. Auto (--max-ahead not given, max_ahead < 0) pauses while the unused
// groups plus this shard's exceed that; --max-ahead N pauses while more than N
// shards are unused; 0 never pauses. Never below what one step needs: a trainer
// short of a step's groups would wait forever. Other workers' shards in
// generation are not in the bucket yet: auto leaves room for one from each
// worker whose heartbeat is recent (others_active). Returns true when it
// paused (the trainer has moved on since the adapter was picked).
static bool back_pressure(Worker *w, volatile sig_atomic_t *stop) {
    long ahead = w->cfg->max_ahead, gsh = w->cfg->groups_per_shard;
    if (ahead == 0) return false;
    bool paused = false;
    for (int waited = 0;; waited++) {
        Buf b = {0};
        PailErr err = {0};
        long pending = 0, allowed = ahead, capacity = 0, others = 0;
        // The trainer's window and rate: progress.json, else (a trainer not yet
        // past its start) run.json's settings and the adapter in use.
        long cur = w->version, win = w->run_staleness, gps = w->run_gps;
        json_t *j = NULL, *used = NULL;
        if (store_get(w->st, RUN_KEY_PROGRESS, &b, NULL, NULL, &err) == 0) {
            if ((j = json_loadb((char *)b.data, b.len, 0, NULL))) {
                json_t *g = json_object_get(j, "groups_per_step");
                cur = (long)json_integer_value(json_object_get(j, "version"));
                win = (long)json_integer_value(json_object_get(j, "max_staleness"));
                w->trainer_window = win;
                if (json_integer_value(g) > 0) gps = (long)json_integer_value(g);  // else run.json's
                used = json_object_get(j, "used_shards_by_version");
            }
        }
        buf_free(&b);
        // Auto needs the trainer's rate: without it (no progress.json nor
        // run.json groups-per-step, an older trainer) it does not pause.
        if ((j && ahead > 0) || (ahead < 0 && gps > 0 && cur >= 0)) {
            long need = (gps + gsh - 1) / gsh;
            if (ahead < 0) {  // in shards of this worker's size, this one and the others' in generation included
                // A version lasts publish_every steps: S of them and the rest of this one.
                capacity = (win * w->run_publish_every + 1) * gps;
                others = others_active(w);
                allowed = capacity / gsh - 1 - others;
                if (allowed < need - 1) allowed = need - 1;  // pending shards up to one step's: go
            } else if (need > allowed) {
                allowed = need;
            }
            // Shards in the bucket inside the trainer's window that it has not
            // used up yet, whatever their version (a trainer publishing every
            // step would otherwise reset a per-version count while older shards
            // pile up and go stale): what is listed minus what it used.
            for (long v = cur - win < 0 ? 0 : cur - win; v <= cur; v++) {
                char prefix[64], vs[32];
                run_key_rollout_dir(prefix, sizeof prefix, v);
                snprintf(vs, sizeof vs, "%ld", v);
                StoreList l = {0};
                if (store_list_all(w->st, prefix, NULL, &l, &err) == 0)
                    pending += l.n - (long)json_integer_value(json_object_get(used, vs));
                store_list_free(&l);
            }
        }
        json_decref(j);
        if (pending <= allowed || stop_requested(w, stop)) return paused;
        paused = true;
        if (waited % 10 == 0) {
            if (ahead < 0)
                log_info("pausing: the trainer has %ld shards (%ld groups) not yet consumed and %ld other workers may "
                         "be generating; it uses %ld groups before a new shard goes stale (--max-ahead auto)",
                         pending, pending * gsh, others, capacity);
            else
                log_info("pausing: the trainer has %ld shards not yet consumed (--max-ahead %ld)", pending, ahead);
        }
        if (time_mono_s() - w->last_heartbeat > 5) heartbeat(w, "paused");
        pause_ms(w, waited < 20 ? 100 : 1000);  // fast trainers consume within a step: look again soon
    }
}

// --- eval -------------------------------------------------------------------

// An evaluation's result j (consumed): to --out, to eval/v%08d.json in the
// run (unless of a given adapter file), else printed. 0 / -1 with err.
static int eval_write(Worker *w, long v, json_t *j, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text) return err_set(err, PAIL_ERR_NOMEM, "eval: out of memory for the result");
    int rc = 0;
    if (c->eval_out) {
        FILE *f = fopen(c->eval_out, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) rc = err_set(err, PAIL_ERR_IO, "%s: cannot write", c->eval_out);
    }
    if (rc == 0 && v >= 0 && !c->eval_adapter && w->st) {
        char key[64];
        version_key(&SERIES_EVALS, v, key, sizeof key);
        rc = versioned_put(w->st, key, text, strlen(text), err);
        if (rc < 0 && err->code == PAIL_ERR_EXISTS) rc = 0;  // another eval worker got there first
    }
    if (!c->eval_out && !w->st) printf("%s\n", text);
    free(text);
    return rc;
}

// --eval with --env: G episodes of every row (greedy for one sample); a row is
// solved when one of its episodes has a positive reward.
static int eval_version_env(Worker *w, long v, const char *label, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    int R = (int)w->ds->n, G = (int)(c->eval_samples > 0 ? c->eval_samples : 1), N = R * G, rc = -1;
    json_t **rows = calloc((size_t)R, sizeof *rows);
    uint64_t *seeds = calloc((size_t)R, sizeof *seeds);
    EpisodeOut *out = calloc((size_t)N, sizeof *out);
    if (!rows || !seeds || !out) {
        err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for %d rows x %d episodes", label, R, G);
        goto done;
    }
    for (int r = 0; r < R; r++) {
        rows[r] = (json_t *)w->ds->rows[r].fields;
        seeds[r] = (uint64_t)c->seed + (uint64_t)r;
    }
    char prefix[160];
    snprintf(prefix, sizeof prefix, "eval-%s/%ld", w->worker_id, w->env_batches++);
    double t0 = time_mono_s();
    if (episodes_run(w->eps, prefix, rows, seeds, R, out, err) != 0) goto done;
    int solved = 0, failed = 0;
    double rsum = 0, turns = 0, gen = 0;
    json_t *sums = json_object();
    for (int r = 0; r < R; r++) {
        int ok = 0;
        for (int j = 0; j < G; j++) {
            const EpisodeOut *o = &out[r * G + j];
            const char *key;
            json_t *x;
            failed += !o->valid;
            ok |= o->valid && o->reward > 0;
            rsum += o->valid ? o->reward : 0;
            turns += o->turns;
            for (int t = 0; t < o->n; t++) gen += o->mask[t];
            json_object_foreach((json_t *)o->components, key, x) {
                json_t *acc = json_object_get(sums, key);
                json_object_set_new(sums, key, json_real(json_number_value(acc) + json_number_value(x)));
            }
        }
        solved += ok;
    }
    const char *key;
    json_t *x;
    json_object_foreach(sums, key, x) json_real_set(x, json_real_value(x) / N);
    json_t *res = json_pack("{s:I, s:f, s:f, s:o, s:f, s:f, s:i, s:i, s:i, s:s, s:f, s:I, s:s, s:s}", "version",
                            (json_int_t)v, "accuracy", (double)solved / R, "reward_mean", rsum / N, "components", sums,
                            "completion_length_mean", gen / N, "turns_mean", turns / N, "prompts", R,
                            "failed_episodes", failed, "samples", G, "metric", G > 1 ? "pass@k" : "greedy", "seconds",
                            time_mono_s() - t0, "time", (json_int_t)time_unix_s(), "dataset", w->ds->source,
                            "environment", c->env_cmd);
    log_info("eval %s: accuracy %.1f%% (%d of %d rows), reward %.3f, %.2f turns an episode, %d episodes failed",
             label, 100.0 * solved / R, solved, R, rsum / N, turns / N, failed);
    rc = eval_write(w, v, res, err);
done:
    free(rows);
    free(seeds);
    free(out);
    return rc;
}

static int eval_version(Worker *w, long v, const char *label, PailErr *err) {
    if (w->env) return eval_version_env(w, v, label, err);
    const RolloutConfig *c = w->cfg;
    // Sized for every row; P counts the rows that fit --max-prompt-tokens.
    int R = (int)w->ds->n, G = (int)(c->eval_samples > 0 ? c->eval_samples : 1), P = 0, N = 0;
    Prompt *pr = calloc((size_t)R, sizeof *pr);
    GenPrompt *gp = calloc((size_t)R, sizeof *gp);
    int64_t *rix = calloc((size_t)R, sizeof *rix);  // (P,) dataset row of each prompt
    GenCompletion *out = calloc((size_t)R * G, sizeof *out);
    int rc = -1, K = reward_set_count(w->rs);
    RewardInput *in = calloc((size_t)R * G, sizeof *in);
    char **texts = calloc((size_t)R * G, sizeof *texts);
    float *comp = calloc((size_t)R * G * (K ? K : 1), sizeof *comp), *total = calloc((size_t)R * G, sizeof *total);
    uint8_t *valid = calloc((size_t)R * G, 1);
    if (!pr || !gp || !rix || !out || !in || !texts || !comp || !total || !valid) {
        err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for %d prompts x %d samples", label, R, G);
        goto done;
    }
    long skipped = 0;
    for (int r = 0; r < R; r++) {
        int e = prompt_encode(w, r, &pr[P], err);
        if (e < 0) goto done;
        if (e == 1) { skipped++; continue; }
        rix[P] = r;
        // Seeded by the row, so a skipped row does not change the other rows' samples.
        gp[P] = (GenPrompt){.ids = pr[P].ids, .n = pr[P].n, .seed = (uint64_t)c->seed + (uint64_t)r};
        P++;
    }
    N = P * G;
    if (P == 0) {
        err_set(err, PAIL_ERR_INVALID, "eval dataset %s: no row fits --max-prompt-tokens %d (%ld of %d refused)",
                w->ds->source, c->max_prompt_tokens, skipped, R);
        goto done;
    }
    double t0 = time_mono_s();
    if (generator_run(w->gen, gp, P, out, err) < 0) goto done;
    double len_sum = 0;
    for (int i = 0; i < N; i++) {
        Buf b = {0};
        PailErr derr = {0};
        tokenizer_decode(w->tok, out[i].ids, (size_t)out[i].n, true, &b, &derr);
        texts[i] = b.data ? (char *)b.data : strdup("");
        in[i] = (RewardInput){.prompt = pr[i / G].text, .completion = texts[i], .completion_tokens = out[i].n,
                              .row = w->ds->rows[rix[i / G]].fields};
        len_sum += out[i].n;
    }
    PailErr warn = {0};
    if (reward_set_score_batch(w->rs, in, N, comp, total, valid, &warn) < 0) { *err = warn; goto done; }
    // A prompt is solved when one of its samples is: exact_answer == 1 when that
    // reward is in the set, else a positive total reward.
    int acc_k = -1;
    const char *const *names = reward_set_names(w->rs);
    for (int k = 0; k < K; k++) if (!strcmp(names[k], "exact_answer")) acc_k = k;
    int solved = 0;
    double rsum = 0, csum[SHARD_MAX_COMPONENTS] = {0};
    for (int p = 0; p < P; p++) {
        int ok = 0;
        for (int j = 0; j < G; j++) {
            int i = p * G + j;
            rsum += total[i];
            for (int k = 0; k < K && k < SHARD_MAX_COMPONENTS; k++) csum[k] += comp[(size_t)i * K + k];
            if (valid[i] && (acc_k >= 0 ? comp[(size_t)i * K + acc_k] >= 0.5f : total[i] > 0)) ok = 1;
        }
        solved += ok;
    }
    json_t *comps = json_object();
    for (int k = 0; k < K && k < SHARD_MAX_COMPONENTS; k++) json_object_set_new(comps, names[k], json_real(csum[k] / N));
    json_t *j = json_pack("{s:I, s:f, s:f, s:o, s:f, s:i, s:I, s:i, s:s, s:f, s:I, s:s}", "version", (json_int_t)v,
                          "accuracy", (double)solved / P, "reward_mean", rsum / N, "components", comps,
                          "completion_length_mean", len_sum / N, "prompts", P, "skipped_prompts",
                          (json_int_t)skipped, "samples", G, "metric", G > 1 ? "pass@k" : "greedy", "seconds",
                          time_mono_s() - t0, "time", (json_int_t)time_unix_s(), "dataset", w->ds->source);
    char sk[64] = "";
    if (skipped) snprintf(sk, sizeof sk, "; %ld over --max-prompt-tokens skipped", skipped);
    log_info("eval %s: accuracy %.1f%% (%d of %d%s), reward %.3f", label, 100.0 * solved / P, solved, P, sk,
             rsum / N);
    rc = eval_write(w, v, j, err);
done:
    for (int p = 0; p < P; p++) { free(pr[p].ids); free(pr[p].text); }
    for (int i = 0; i < N; i++) free(texts[i]);
    free(pr); free(gp); free(rix); free(out); free(in); free(texts); free(comp); free(total); free(valid);
    return rc;
}

// --- setup and loop -------------------------------------------------------------

// The memory plan from the config alone, printed and checked before the
// weights are loaded. The adapter's rank is not known before the first one
// arrives (its few MiB are not in the plan).
static int plan_check(Worker *w, const RolloutConfig *c, PailErr *err) {
    ModelConfig mc;
    if (model_config_load(&mc, c->model_dir, err) < 0) return -1;
    Backend *be = c->backend ? c->backend : backend_cpu();
    int G = c->eval ? (int)(c->eval_samples > 0 ? c->eval_samples : 1) : c->group_size;
    int prompts = c->eval ? (int)w->ds->n : c->groups_per_shard;
    char wdesc[32];
    size_t wbytes = 0;
    if (dtype_plan(c->model_dir, c->weights_dtype, wdesc, &wbytes, err) < 0) return -1;
    MemoryPlanSpec spec = {.role = MEMPLAN_ROLLOUT, .weights_dtype = wdesc, .weights_bytes = wbytes,
                           .token_budget = generator_token_budget(c->max_prompt_tokens, c->batch_size, c->prefill_tokens),
                           .batch_size = c->batch_size,
                           .max_ctx = c->max_prompt_tokens + (episodic(c) ? c->max_episode_tokens : c->max_new_tokens),
                           .max_new_tokens = episodic(c) ? c->max_episode_tokens : c->max_new_tokens, .groups_per_step = prompts > 0 ? prompts : 1,
                           .group_size = G, .threads = omp_get_max_threads()};
    MemoryPlan mp;
    if (memplan_build(&mp, &mc, &spec, be->desc, err) < 0) return -1;
    memplan_print(stderr, &mp, c->eval_once ? "grpo-ctl eval" : "grpo-rollout");
    return memplan_check(&mp, c->max_memory, err);
}

static int setup(Worker *w, const RolloutConfig *c, PailErr *err) {
    w->cfg = c;
    w->version = -1;
    w->waiting_after = -1;
    w->run_staleness = TRAINER_MAX_STALENESS;
    w->trainer_window = -1;  // unknown until pacing reads progress.json (or run.json)
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", c->model_dir);
    if (tokenizer_load(&w->tok, path, err) < 0) return -1;
    snprintf(w->tok_sha, sizeof w->tok_sha, "%s", tokenizer_sha256(w->tok));
    PailErr cerr = {0};
    const ChatSource *cs = &c->chat_source;
    bool asked = c->chat || chat_source_given(cs);
    if (chat_template_load(&w->chat, c->model_dir, NULL, cs, &cerr) == 0) {
        w->have_chat = true;
        log_info("chat template: %s (sha256 %.16s)", w->chat.source, w->chat.sha256);
    } else if (asked) {
        *err = cerr;
        return -1;
    } else {
        log_info("chat template: %s (rows with \"messages\" will be refused)", cerr.msg);
        w->chat_err = cerr;
    }
    const char *dspath = c->eval ? c->eval_dataset : c->dataset;
    if (!dspath) return err_set(err, PAIL_ERR_INVALID, c->eval ? "--eval needs --eval-dataset" : "--dataset is required");
    if ((episodic(c) ? dataset_load_objects : dataset_load)(&w->ds, dspath, err) < 0) return -1;
    if (!(w->row_refused = calloc((size_t)w->ds->n, 1)))
        return err_set(err, PAIL_ERR_NOMEM, "dataset %s: out of memory", w->ds->source);
    if (!episodic(c) && reward_set_build(&w->rs, &c->rewards, err) < 0) return -1;
    if (episodic(c) && env_setup(w, err) < 0) return -1;
    if (plan_check(w, c, err) < 0) return -1;  // before the weights or anything large is allocated
    if (model_weights_load_as(&w->w, c->model_dir, c->weights_dtype, err) < 0) return -1;
    dtype_log_weights(&w->w);
    // Stop at the model's EOS ids and the tokenizer's.
    for (int i = 0; i < w->w.cfg.n_eos && w->n_stop < 15; i++) w->stop_ids[w->n_stop++] = w->w.cfg.eos_token_ids[i];
    int32_t te = tokenizer_eos_id(w->tok);
    if (te >= 0 && w->n_stop < 16) w->stop_ids[w->n_stop++] = te;
    int G = c->eval ? (int)(c->eval_samples > 0 ? c->eval_samples : 1) : c->group_size;
    int batch = c->batch_size;
    // A shard's groups, or every row of the eval dataset, in one run.
    int max_prompts = c->eval ? (int)w->ds->n : c->groups_per_shard;
    w->gc = (GenConfig){.group_size = G, .max_new_tokens = c->max_new_tokens, .batch_size = batch,
                        .max_prompt_tokens = c->max_prompt_tokens, .max_prompts = max_prompts > 0 ? max_prompts : 1,
                        .prefill_tokens = c->prefill_tokens,
                        .sampler = c->sampler, .stop_ids = w->stop_ids,
                        .n_stop_ids = w->n_stop, .stop_fn = stop_strings_hit, .stop_ctx = w,
                        .abandon_fn = adapter_outdated, .abandon_ctx = w};
    if (c->eval && c->eval_samples <= 1) w->gc.sampler = (SamplerConfig){.temperature = 0, .top_p = 1, .top_k = 0};
    if (w->env) {
        w->ec.group_size = G;
        w->ec.batch_size = batch;
        w->ec.max_groups = max_prompts > 0 ? max_prompts : 1;  // a shard's groups, or every eval row
        w->ec.max_extra = c->serve ? c->serve_max_requests : 0;
        w->ec.max_prompt_tokens = c->max_prompt_tokens;
        w->ec.max_episode_tokens = c->max_episode_tokens;
        w->ec.max_turn_tokens = c->max_new_tokens;
        w->ec.max_turns = c->max_turns;
        w->ec.sampler = w->gc.sampler;  // greedy for a one-sample eval
        w->ec.stop_ids = w->stop_ids;
        w->ec.n_stop_ids = w->n_stop;
        w->ec.stop_fn = stop_strings_hit;
        w->ec.stop_ctx = w;
        w->ec.abandon_fn = adapter_outdated;
        w->ec.abandon_ctx = w;
        w->ec.chat = &w->chat;
        w->ec.tok = w->tok;
        w->ec.env = w->env;
    }
    if (worker_plan(w, 0, err) < 0) return -1;  // no adapter yet
    if (c->worker_id) {  // checked before the copy: a longer id would be cut silently
        if (worker_id_check(c->worker_id, err) < 0) return -1;
        snprintf(w->worker_id, sizeof w->worker_id, "%s", c->worker_id);
    } else {
        worker_id_default(w->worker_id, sizeof w->worker_id);
        if (worker_id_check(w->worker_id, err) < 0) return -1;
    }
    if (!c->eval) {
        if (c->num_workers > 0) {
            if (dataset_sampler_init_partition(&w->smp, w->ds, c->worker_index, c->num_workers, err) < 0) return -1;
        } else if (dataset_sampler_init(&w->smp, w->ds, (uint64_t)c->seed, w->worker_id, err) < 0) {
            return -1;
        }
    }
    if (c->run_url && store_open(&w->st, c->run_url, &c->store, err) < 0) return -1;
    char desc[512];
    if (c->serve) snprintf(desc, sizeof desc, "from the agents, through the %.400s", env_describe(w->env));
    else if (w->env) snprintf(desc, sizeof desc, "from the environment program '%.400s'", c->env_cmd);
    else reward_set_describe(w->rs, desc, sizeof desc);
    log_info("worker %s: model %s (%zu parameters), dataset %s (%lld rows), rewards: %s", w->worker_id,
             c->model_dir, w->w.num_params, w->ds->source, (long long)w->ds->n, desc);
    return 0;
}

static void teardown(Worker *w) {
    generator_free(w->gen);
    episodes_free(w->eps);
    env_free(w->env);
    transformer_free(w->tf);
    if (w->have_chat) chat_template_free(&w->chat);
    tokenizer_free(w->tok);
    if (w->ds) { if (!w->cfg->eval) dataset_sampler_free(&w->smp); dataset_free(w->ds); }
    reward_set_free(w->rs);
    store_close(w->st);
    trainable_close(w->adapter);
    lora_layout_free(&w->lay);
    model_weights_free(&w->w);
    free(w->row_refused);
    free(w->refused);
    buf_free(&w->stop_text);
}

static int run_eval_once(Worker *w, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    long v = -1;
    if (c->eval_adapter) {
        AdapterMeta meta;
        float *p = NULL;
        if (lora_load_any(c->eval_adapter, &w->w.cfg, &w->lay, &p, &meta, err) < 0) return -1;
        v = meta.version;
        int rc = adapter_attach(w, p, err);
        free(p);
        if (rc < 0) return -1;
    } else if (w->st) {
        if (versions_latest(w->st, &SERIES_ADAPTERS, &v, err) < 0) return -1;
        if (v >= 0 && load_adapter(w, v, err) != 0) return -1;
    }
    char label[64];
    snprintf(label, sizeof label, v >= 0 ? "adapter v%08ld" : "base model", v);
    return eval_version(w, v, label, err);
}

int rollout_run(const RolloutConfig *c, volatile sig_atomic_t *stop, PailErr *err) {
    Worker w;
    memset(&w, 0, sizeof w);
    w.stop = stop;
    int rc = setup(&w, c, err);
    if (rc == 0 && c->eval_once) {
        rc = run_eval_once(&w, err);
        teardown(&w);
        return rc;
    }
    if (rc == 0 && !w.st) rc = err_set(err, PAIL_ERR_INVALID, "--run is required");
    if (rc == 0) rc = check_manifest(&w, stop, err);
    if (rc == 0 && !c->eval) resume_position(&w);
    if (rc == 0) heartbeat(&w, "starting");  // seen at once by the other workers' pacing (others_active)
    long last_eval = -1;
    while (rc == 0) {
        if (stop_requested(&w, stop)) break;
        long newest = -1;
        PailErr lerr = {0};
        if (versions_latest(w.st, &SERIES_ADAPTERS, &newest, &lerr) < 0) {
            log_warn("listing adapters: %s", lerr.msg);
            pause_ms(&w, 1000);
            continue;
        }
        // Rollout workers keep generating with the version they have; they wait
        // only for the first one. The eval worker waits for each new version.
        if (newest < 0 || (c->eval && newest <= last_eval)) {
            long after = c->eval ? (last_eval > w.version ? last_eval : w.version) : w.version;
            int wr = wait_newer(&w, after, stop, err);
            if (wr != 0) { rc = wr < 0 ? -1 : 0; break; }
            continue;
        }
        // A version that does not verify is refused once; the newest one that
        // does inside the trainer's staleness window is used instead, and
        // when there is none the worker waits for the next version.
        long got = -1, S = 0, lo = 0;
        PailErr perr = {0};
        int pr = 0;
        if (c->eval) {
            bool baseline = false;  // v0 (the base model) first when not yet evaluated
            if (last_eval < 0 && newest > 0 && !adapter_refused(&w, 0)) {
                char k0[64];
                StoreStat ss0;
                version_key(&SERIES_EVALS, 0, k0, sizeof k0);
                baseline = store_head(w.st, k0, &ss0, &lerr) < 0 && lerr.code == PAIL_ERR_NOT_FOUND;
            }
            if (!baseline && c->eval_every > 1 && newest % c->eval_every) { last_eval = newest; continue; }
            S = staleness_window(&w);
            lo = newest - S > last_eval + 1 ? newest - S : last_eval + 1;
            if (baseline) pr = adapter_pick(&w, 0, 0, 1, &got, &perr);
            if (pr == 0 && got < 0) pr = adapter_pick(&w, newest, lo, c->eval_every, &got, &perr);
        } else if (newest != w.version) {  // hot swap between shards
            long prev = w.version;
            S = staleness_window(&w);
            lo = newest - S;
            pr = adapter_pick(&w, newest, lo, 1, &got, &perr);
            if (pr == 0 && got >= 0 && got != prev) {
                if (got == newest) log_info("using adapter v%08ld", got);
                else log_info("using adapter v%08ld: the newest that verifies (v%08ld is refused)", got, newest);
            }
        } else {
            got = newest;
        }
        if (pr < 0) {
            if (perr.code != PAIL_ERR_NETWORK && perr.code != PAIL_ERR_NOT_FOUND) { *err = perr; rc = -1; break; }
            snprintf(w.last_error, sizeof w.last_error, "%s", perr.msg);
            log_warn("loading an adapter: %s", perr.msg);
            pause_ms(&w, 1000);
            continue;
        }
        if (got < 0) {
            say_waiting(&w, newest, lo, S);
            if (c->eval) { last_eval = newest; continue; }
            int wr = wait_newer(&w, newest, stop, err);
            if (wr != 0) { rc = wr < 0 ? -1 : 0; break; }
            continue;
        }
        if (c->eval) {
            char label[64];
            snprintf(label, sizeof label, "v%08ld", got);
            if ((rc = eval_version(&w, got, label, err)) < 0) break;
            last_eval = got;
            heartbeat(&w, "evaluated");
            if (c->max_shards > 0 && ++w.shards >= c->max_shards) break;
            continue;
        }
        // After a pause the trainer has moved on: pick the adapter again.
        if (back_pressure(&w, stop)) continue;
        if (stop_requested(&w, stop)) break;
        int sr = w.env ? one_shard_env(&w, stop, err) : one_shard(&w, stop, err);
        if (sr == 1) continue;  // abandoned: pick the newer adapter
        if (sr < 0) {
            if (err->code == PAIL_ERR_INTERRUPTED) { rc = 0; break; }
            if (err->code == PAIL_ERR_NETWORK) {  // the bucket is down: the batch is lost, keep going
                snprintf(w.last_error, sizeof w.last_error, "%s", err->msg);
                log_warn("%s", err->msg);
                pause_ms(&w, 2000);
                continue;
            }
            rc = -1;
            break;
        }
        if (time_mono_s() - w.last_heartbeat > 3) heartbeat(&w, "generating");
        if (c->max_shards > 0 && w.shards >= c->max_shards) break;
    }
    if (w.st) heartbeat(&w, rc == 0 ? "stopped" : "failed");
    teardown(&w);
    return rc;
}
