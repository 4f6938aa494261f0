// grpo-rollout's loop and its setup (see worker.h): bucket -> adapter ->
// prompts -> generate -> rewards -> shard -> bucket. It wires the parts: the
// generation engine (engine.h), the shard builder (shardbuild.h), pacing
// (pacing.h) and the eval worker (evalworker.h); it keeps the heartbeat, the
// prompts and their rewards, and where a restarted worker resumes.
#include "rollout/worker.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/log.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "core/utf8.h"
#include "rollout/evalworker.h"
#include "rollout/preflight.h"
#include "rollout/serve.h"
#include "rollout/shardbuild.h"
#include "rollout/worker_int.h"
#include "store/versions.h"

// The generator's abandon_fn: a batch marked by batch_start is abandoned as
// soon as a newer adapter is out (looked up at most every VERSION_CHECK_S
// seconds: one LIST, between decode steps).
#define VERSION_CHECK_S 0.5
#define EVAL_HEARTBEAT_S 5.0  // the eval worker's heartbeat while it generates (grpo-ctl status: LATE past 30 s)
static bool adapter_outdated(void *ctx) {
    Worker *w = ctx;
    // First asked once the batch's first prompts are prefilled and their first tokens drawn.
    if (w->say_first_tokens) {
        w->say_first_tokens = false;
        log_info("adapter v%08ld: first tokens %.2f s after its load", w->version, time_mono_s() - w->loaded_at);
        w->loaded_at = 0;
    }
    // --serve: a batch can wait long for its agents; the heartbeat says the worker serves.
    if (w->cfg->serve && time_mono_s() - w->last_heartbeat > 5) worker_heartbeat(w, "serving");
    // --eval: the heartbeat stays fresh through a long evaluation, so that a hung one shows LATE
    if (w->busy_since && time_mono_s() - w->last_heartbeat > EVAL_HEARTBEAT_S) worker_heartbeat(w, "evaluating");
    // --serve: a batch waits for agents that may never come; stopping (a signal,
    // or control/stop, looked for every few seconds) cancels it.
    if (w->cfg->serve && w->stop && *w->stop) return true;
    if (w->cfg->serve && time_mono_s() >= w->next_stop_check) {
        w->next_stop_check = time_mono_s() + 2.0;  // one HEAD every 2 s, one GET of progress.json
        StoreStat ss;
        PailErr serr = {0};
        if (store_head(w->st, RUN_KEY_STOP, &ss, &serr) == 0) return w->stop_seen = true;
        // The trainer reached --steps (as the worker's loop learns it): the agents'
        // episodes in flight end, new requests get 503 run_done, then the batch ends.
        long final_v = -1;
        if (!w->run_done && pacing_run_state(w, &final_v) == RUN_DONE) {
            char why[200];
            snprintf(why, sizeof why, "the run is done (the trainer reached its --steps; final adapter v%08ld): this "
                     "worker takes no new episodes or requests and exits", final_v);
            log_info("%s once the %d episodes and requests in flight end", why, serve_in_flight(w->eng.env));
            serve_finish(w->eng.env, why);
            w->run_done = true;
        }
    }
    // --env: a batch of episodes can take minutes (an environment's tools are slow); stopping (a
    // signal, control/stop) or the run being done (the trainer reached --steps), looked for every
    // 2 s, cancels it: the program gets "cancel" for its open episodes and the worker exits
    // instead of finishing a shard nobody trains on.
    if (w->eng.env && !w->cfg->serve && !w->cfg->eval) {
        if (w->stop && *w->stop) return true;
        if (time_mono_s() >= w->next_stop_check) {
            w->next_stop_check = time_mono_s() + 2.0;
            StoreStat ss;
            PailErr serr = {0};
            long final_v;
            if (store_head(w->st, RUN_KEY_STOP, &ss, &serr) == 0) return w->stop_seen = true;
            if (pacing_run_state(w, &final_v) == RUN_DONE) return w->done_seen = true;
        }
    }
    if (w->run_done) return serve_in_flight(w->eng.env) == 0;
    if (!w->abandon_stale) return false;
    double now = time_mono_s();
    if (now < w->next_version_check) return false;
    w->next_version_check = now + VERSION_CHECK_S;
    long newest = -1;
    PailErr err = {0};
    return versions_latest(w->st, &SERIES_ADAPTERS, &newest, &err) == 0 && newest > w->version;
}

// The bytes of a row's text before rendering: its prompt, or its messages' contents
// (strings and content blocks' "text").
static size_t row_text_bytes(const DatasetRow *row) {
    if (!row->messages) return strlen(row->prompt);
    size_t n = 0, i, k;
    json_t *m, *b;
    json_array_foreach((json_t *)row->messages, i, m) {
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) n += json_string_length(c);
        else json_array_foreach(c, k, b) n += json_string_length(json_object_get(b, "text"));
    }
    return n;
}

// A text longer than --max-prompt-tokens tokens can hold is refused before it is
// tokenized (or rendered): bounded work for a row that is one 1 GiB word.
static int too_many_bytes(Worker *w, const DatasetRow *row, size_t bytes, const char *what, PailErr *err) {
    size_t max = tokenizer_max_text_bytes(w->tok, (size_t)w->cfg->max_prompt_tokens);
    if (bytes <= max) return 0;
    err_set(err, PAIL_ERR_INVALID, "%s:%lld: %s has %zu bytes, more than %d tokens can hold (%zu: --max-prompt-tokens)",
            w->ds->source, (long long)row->line, what, bytes, w->cfg->max_prompt_tokens, max);
    return 1;
}

static int encode_row(Worker *w, const DatasetRow *row, Prompt *out, PailErr *err) {
    Buf text = {0};
    int rc = 0;
    if (too_many_bytes(w, row, row_text_bytes(row), row->messages ? "messages' content" : "prompt", err)) return 1;
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
    if (too_many_bytes(w, row, text.len, "prompt", err)) { buf_free(&text); return 1; }
    // A plain prompt (--prompt-format, or a "prompt" row without --chat) is encoded as
    // transformers' tokenizer(text) encodes it: with the post_processor's special tokens
    // (Gemma's and Llama's <bos>); a chat template writes its own.
    bool plain = !(w->have_chat && !w->chat.plain_format && (row->messages || w->cfg->chat));
    TokenIds ids = {0};
    if ((plain ? tokenizer_encode_text : tokenizer_encode)(w->tok, (char *)text.data, text.len, &ids, err) < 0) {
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
int worker_prompt_encode(Worker *w, int64_t r, Prompt *out, PailErr *err) {
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

void prompt_free(Prompt *p) {
    free(p->ids);
    free(p->text);
}

int worker_score(Worker *w, const Prompt *pr, const int64_t *rows, const GenCompletion *out, int N, int G,
                 float *comp, float *total, uint8_t *valid, PailErr *warn) {
    RewardInput *in = calloc((size_t)N, sizeof *in);
    char **texts = calloc((size_t)N, sizeof *texts);
    int rc = -1;
    if (!in || !texts) {
        err_set(warn, PAIL_ERR_NOMEM, "out of memory for the rewards of %d completions", N);
        goto done;
    }
    for (int i = 0; i < N; i++) {
        Buf b = {0};
        PailErr derr = {0};
        tokenizer_decode(w->tok, out[i].ids, (size_t)out[i].n, true, &b, &derr);
        texts[i] = b.data ? (char *)b.data : strdup("");
        in[i] = (RewardInput){.prompt = pr[i / G].text, .completion = texts[i], .completion_tokens = out[i].n,
                              .row = w->ds->rows[rows[i / G]].fields};
    }
    rc = reward_set_score_batch(w->rs, in, N, comp, total, valid, warn);
done:
    for (int i = 0; texts && i < N; i++) free(texts[i]);
    free(texts);
    free(in);
    return rc;
}

// What feeds this worker, in its heartbeat: its role, dataset, rewards and
// chat template, so grpo-ctl status can flag workers of one run that differ.
void worker_feeds(Worker *w, json_t *j) {
    const RolloutConfig *c = w->cfg;
    json_object_set_new(j, "role", json_string(c->eval ? "eval" : c->serve ? "serve" : "generating"));
    if (w->ds)
        json_object_set_new(j, "dataset", json_pack("{s:s, s:I, s:s}", "path", w->ds->source, "rows",
                                                    (json_int_t)w->ds->n, "sha256", w->ds->sha256));
    json_t *rw = json_object();
    if (c->serve) {
        json_object_set_new(rw, "serve", json_string(c->serve));
    } else if (c->env_cmd) {
        json_object_set_new(rw, "env", json_string(c->env_cmd));
    } else {
        const RewardConfig *r = &c->rewards;
        json_t *specs = json_array();
        for (int i = 0; i < r->nspecs; i++) json_array_append_new(specs, json_string(r->specs[i]));
        json_object_set_new(rw, "specs", specs);
        // only the options of the rewards in use: a cmd-only worker reads no answer field
        bool uses[4] = {0};
        static const char *const kinds[4] = {"exact_answer", "format", "length", "cmd"};
        for (int i = 0; i < r->nspecs; i++)
            for (int k = 0; k < 4; k++) uses[k] |= reward_spec_is(r->specs[i], kinds[k]);
        if (uses[0]) json_object_set_new(rw, "answer_field", json_string(r->answer_field ? r->answer_field : "answer"));
        if (uses[0] && r->answer_marker && *r->answer_marker) json_object_set_new(rw, "answer_marker", json_string(r->answer_marker));
        if (uses[1] && r->format_regex) json_object_set_new(rw, "format_regex", json_string(r->format_regex));
        if (uses[2] && r->length_target > 0) json_object_set_new(rw, "length_target", json_integer(r->length_target));
        int ncmd = r->ncmds + (r->cmd != NULL);
        if (uses[3] && ncmd == 1) json_object_set_new(rw, "cmd", json_string(r->cmd ? r->cmd : r->cmds[0]));
        if (uses[3] && ncmd > 1) {
            json_t *a = json_array();
            for (int i = 0; i < r->ncmds; i++) json_array_append_new(a, json_string(r->cmds[i]));
            if (r->cmd) json_array_append_new(a, json_string(r->cmd));
            json_object_set_new(rw, "cmd", a);
        }
    }
    json_object_set_new(j, "rewards", rw);
    if (w->have_chat)
        json_object_set_new(j, "chat_template", json_pack("{s:s, s:s}", "name", w->chat.source, "sha256", w->chat.sha256));
}

void worker_heartbeat(Worker *w, const char *state) {
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
    if (j && w->eng.env) {
        EnvStats es = env_stats(w->eng.env);
        json_object_set_new(j, "environment", json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "episodes", (json_int_t)es.starts,
                                                        "failed", (json_int_t)es.failed, "restarts", (json_int_t)es.restarts,
                                                        "timeouts", (json_int_t)es.timeouts, "bad_lines",
                                                        (json_int_t)es.bad_lines, "unknown_ids", (json_int_t)es.unknown_ids));
        if (w->cfg->serve) json_object_set_new(j, "endpoint", json_string(serve_url(w->eng.env)));
    }
    if (j) worker_feeds(w, j);
    if (j && w->busy_since) json_object_set_new(j, "busy_since", json_integer((json_int_t)w->busy_since));
    if (j && w->eng.gen) {  // the group generator's KV block pool (doc/rollout.md "KV pool")
        GenStats gs = generator_stats(w->eng.gen);
        json_object_set_new(j, "kv_pool", json_pack("{s:I, s:I, s:I, s:I, s:I}", "blocks", (json_int_t)gs.kv_blocks,
                                                     "block_bytes", (json_int_t)w->eng.mp.kv_block_bytes,
                                                     "peak_blocks", (json_int_t)w->kv_peak_blocks, "preemptions",
                                                     (json_int_t)w->kv_preemptions, "recomputed_tokens",
                                                     (json_int_t)w->kv_recomputed_tokens));
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

bool worker_stop_requested(Worker *w, volatile sig_atomic_t *stop) {
    if (stop && *stop) return true;
    StoreStat ss;
    PailErr err = {0};
    if (store_head(w->st, RUN_KEY_STOP, &ss, &err) == 0) {
        log_info("control/stop found: stopping");
        return true;
    }
    return false;
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

// The attributes of a shard of this worker's adapter (sizes and data are the builder's).
static void shard_header(Worker *w, RolloutShard *s) {
    const RolloutConfig *c = w->cfg;
    snprintf(s->run_id, sizeof s->run_id, "%s", w->run_id);
    s->adapter_version = w->version;
    snprintf(s->worker_id, sizeof s->worker_id, "%s", w->worker_id);
    s->created_unix = time_unix_s();
    snprintf(s->base_sha256, sizeof s->base_sha256, "%s", w->eng.w.base_sha256);
    snprintf(s->tokenizer_sha256, sizeof s->tokenizer_sha256, "%s", w->tok_sha);
    s->temperature = c->sampler.temperature;
    s->top_p = c->sampler.top_p;
    s->top_k = c->sampler.top_k;
    s->min_p = c->sampler.min_p;
    // Dr.GRPO's constant: a completion's token limit (an episode's, with --env).
    s->max_new_tokens = rollout_episodic(c) ? c->max_episode_tokens : c->max_new_tokens;
    s->seed = c->seed;
    s->prompts_drawn = w->smp.drawn;  // where a restart with this worker id continues (resume_position)
}

// Writes built shard s with this worker's attributes (shard_publish) and
// counts it: ntok tokens generated in secs; extra: more of the log line.
static int publish(Worker *w, RolloutShard *s, int64_t ntok, double secs, const char *extra, PailErr *err) {
    char key[256];
    shard_header(w, s);
    if (shard_publish(w->st, s, &w->seq, key, sizeof key, err) < 0) return -1;
    double rmean = 0;
    for (int64_t i = 0; i < s->N; i++) rmean += s->rewards[i];
    log_info("wrote %s: %lld groups x %lld, reward %.3f, %.0f tok/s%s", key, (long long)s->P,
             (long long)shard_group_size(s), rmean / (double)s->N, secs > 0 ? (double)ntok / secs : 0.0, extra);
    w->shards++;
    w->gen_tokens += (double)ntok;
    w->gen_seconds += secs;
    return 0;
}

// The RNG stream seed of the prompt drawn as number `drawn` by this worker.
static uint64_t draw_seed(const Worker *w, int64_t drawn) {
    char sk[256];
    snprintf(sk, sizeof sk, "%s/%lld", w->worker_id, (long long)drawn);
    return (uint64_t)w->cfg->seed ^ hash64(sk, strlen(sk));
}

// A batch starting at t0: with a staleness window of 0 the trainer drops a
// shard of any version but its newest, so it is abandoned (adapter_outdated)
// as soon as a newer adapter is out.
static void batch_start(Worker *w, double t0) {
    w->abandon_stale = w->pace.trainer_window == 0;
    w->next_version_check = t0;
}

// A batch abandoned for a newer adapter: its prompts are drawn again, with it. Returns 1.
static int batch_abandoned(Worker *w, double t0, int64_t drawn_before) {
    log_info("abandoned a shard of adapter v%08ld after %.1f s: a newer version is out and with "
             "--max-staleness 0 the trainer would drop it", w->version, time_mono_s() - t0);
    dataset_sampler_seek(&w->smp, drawn_before);
    return 1;
}

// --env: runs groups_per_shard x G episodes and publishes them as one shard
// (shard_build_episodes). Returns 0, 1 when abandoned or out of the window
// (the prompts are drawn again), -1 with err.
static int one_shard_env(Worker *w, volatile sig_atomic_t *stop, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    int P = c->groups_per_shard, G = c->group_size, N = P * G, rc = -1;
    json_t **rows = calloc((size_t)P, sizeof *rows);
    uint64_t *seeds = calloc((size_t)P, sizeof *seeds);
    int64_t *rix = calloc((size_t)P, sizeof *rix);
    EpisodeOut *out = calloc((size_t)N, sizeof *out);
    RolloutShard s = {0};
    if (!rows || !seeds || !rix || !out) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory for a shard of %d groups x %d episodes", P, G);
        goto done;
    }
    int64_t drawn_before = w->smp.drawn;
    for (int p = 0; p < P; p++) {
        int64_t drawn = w->smp.drawn;
        rix[p] = dataset_sampler_next(&w->smp);
        rows[p] = (json_t *)w->ds->rows[rix[p]].fields;
        seeds[p] = draw_seed(w, drawn);
    }
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s/%ld", w->worker_id, w->env_batches++);
    double t0 = time_mono_s();
    batch_start(w, t0);
    int er = episodes_run(w->eng.eps, prefix, rows, seeds, P, out, err);
    w->abandon_stale = false;
    if (er < 0) goto done;
    if (er == 1 && ((stop && *stop) || w->stop_seen || w->done_seen)) {
        if (w->done_seen) log_info("the run is done: the open episodes of this batch are cancelled");
        else if (c->serve) log_info("stopping: the open episodes of this batch are cancelled (their agents get 503)");
        else log_info("stopping: the open episodes of this batch are cancelled");
        rc = 1;
        goto done;
    }
    if (er == 1 && w->run_done) {  // (the loop then exits: the run is done)
        log_info("the episodes in flight have ended: the batch is over");
        rc = 1;
        goto done;
    }
    if (er == 1) {
        rc = batch_abandoned(w, t0, drawn_before);
        goto done;
    }
    double secs = time_mono_s() - t0;
    EpisodeShardInfo info;
    // A group without a shared opening gets the model's first stop id as its prompt.
    if (shard_build_episodes(&s, out, P, G, rix, w->eng.n_stop ? w->eng.stop_ids[0] : 0, &info, err) < 0) goto done;
    if (info.dropped)  // each episode's are at most 32 (env_components_ok); their union may not be
        log_warn("shard of adapter v%08ld: the episodes name more than %d reward components together; '%s' and "
                 "the names after it are not stored", w->version, SHARD_MAX_COMPONENTS, info.dropped);
    if (info.failed) {
        snprintf(w->last_error, sizeof w->last_error, "%s", info.why);
        log_warn("%d of %d episodes failed (left out of the advantages): %s", info.failed, N, info.why);
    }
    // An environment program failing whole batches stops the worker (an endpoint's agents may just be away).
    if (!c->serve && env_check_failing(w->eng.env, info.failed, N, info.why, err) < 0) goto done;
    if ((rc = pacing_shard_wanted(w, stop, drawn_before, err)) != 0) goto done;
    char extra[224];
    EpisodeStats es = episodes_stats(w->eng.eps);
    snprintf(extra, sizeof extra, "; %.2f turns an episode, %d failed, %lld tokens appended, %lld of %d openings "
             "copied from their group's prefill", info.turns / N, info.failed, (long long)es.appended_tokens,
             (long long)es.forked_openings, N);
    if (s.X) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "; %lld more segments (edited histories)",
                      (long long)s.X);
    rc = publish(w, &s, info.generated, secs, extra, err);
done:
    shard_free(&s);
    free(rows);
    free(seeds);
    free(rix);
    free(out);
    return rc;
}

// Generates, scores and publishes one shard of groups_per_shard groups
// (shard_build_groups). Returns 0, 1 when it was abandoned (adapter_outdated)
// or out of the window, -1 with err.
static int one_shard(Worker *w, volatile sig_atomic_t *stop, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    int P = c->groups_per_shard, G = c->group_size, N = P * G;
    Prompt *pr = calloc((size_t)P, sizeof *pr);
    GenPrompt *gp = calloc((size_t)P, sizeof *gp);
    GenCompletion *out = calloc((size_t)N, sizeof *out);
    int64_t *rows = calloc((size_t)P, sizeof *rows);
    RolloutShard s = {0};
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
        } while ((e = worker_prompt_encode(w, rows[p], &pr[p], err)) == 1);
        if (e < 0) goto done;
        gp[p] = (GenPrompt){.ids = pr[p].ids, .n = pr[p].n, .seed = draw_seed(w, drawn)};
    }
    double t0 = time_mono_s();
    batch_start(w, t0);
    w->say_first_tokens = w->loaded_at > 0;
    GenStats before = generator_stats(w->eng.gen);
    int gr = generator_run(w->eng.gen, gp, P, out, err);
    GenStats after = generator_stats(w->eng.gen);
    w->abandon_stale = false;
    w->say_first_tokens = false;
    if (gr < 0) goto done;
    w->kv_preemptions += after.preemptions - before.preemptions;
    w->kv_recomputed_tokens += after.recomputed_tokens - before.recomputed_tokens;
    if (gr == 1) {
        rc = batch_abandoned(w, t0, drawn_before);
        goto done;
    }
    double secs = time_mono_s() - t0;
    if (shard_build_groups(&s, gp, P, G, out, rows, reward_set_names(w->rs), reward_set_count(w->rs), err) < 0)
        goto done;
    if (after.kv_peak_blocks > w->kv_peak_blocks) w->kv_peak_blocks = after.kv_peak_blocks;
    s.kv_pool_blocks = after.kv_blocks;
    s.kv_peak_blocks = after.kv_peak_blocks;
    s.kv_preemptions = after.preemptions - before.preemptions;
    s.kv_recomputed_tokens = after.recomputed_tokens - before.recomputed_tokens;
    PailErr warn = {0};
    int bad = worker_score(w, pr, rows, out, N, G, s.reward_components, s.rewards, s.reward_valid, &warn);
    if (bad < 0) {
        *err = warn;
        goto done;
    }
    if (bad > 0) {
        snprintf(w->last_error, sizeof w->last_error, "%s", warn.msg);
        log_warn("%d of %d rewards failed: %s", bad, N, warn.msg);
    }
    if (reward_set_check_failing(w->rs, &warn, err) < 0) goto done;  // the batch is not written
    if ((rc = pacing_shard_wanted(w, stop, drawn_before, err)) != 0) goto done;
    rc = publish(w, &s, s.completion_offsets[N], secs, "", err);
done:
    shard_free(&s);
    for (int p = 0; pr && p < P; p++) prompt_free(&pr[p]);
    free(pr);
    free(gp);
    free(out);
    free(rows);
    return rc;
}

// --- setup and loop -------------------------------------------------------------

static int setup(Worker *w, RolloutConfig *c, PailErr *err) {
    w->cfg = c;
    w->version = -1;
    pacing_init(&w->pace);
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
    if ((rollout_episodic(c) ? dataset_load_objects : dataset_load)(&w->ds, dspath, err) < 0) return -1;
    if (!(w->row_refused = calloc((size_t)w->ds->n, 1)))
        return err_set(err, PAIL_ERR_NOMEM, "dataset %s: out of memory", w->ds->source);
    if (!rollout_episodic(c) && reward_set_build(&w->rs, &c->rewards, err) < 0) return -1;
    // Start-up checks (preflight.h), then the store: before the memory plan and the weights.
    if (preflight_dataset(w->ds, w->rs, err) < 0 || preflight_positions(c, err) < 0 ||
        (c->env_cmd && !c->serve && preflight_program(c->env_cmd, "--env", err) < 0))
        return -1;
    for (int i = 0; w->rs && reward_set_cmd(w->rs, i); i++)
        if (preflight_program(reward_set_cmd(w->rs, i), "--reward-cmd", err) < 0) return -1;
    if (c->run_url && (store_open(&w->st, c->run_url, &c->store, err) < 0 || preflight_store(w->st, c, err) < 0))
        return -1;
    EngineSpec es = {.cfg = c, .tok = w->tok, .chat = w->have_chat ? &w->chat : NULL, .chat_err = w->chat_err.msg,
                     .dataset_rows = w->ds->n, .abandon_fn = adapter_outdated, .abandon_ctx = w};
    if (engine_open(&w->eng, &es, err) < 0) return -1;
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
    char desc[512];
    if (c->serve) snprintf(desc, sizeof desc, "from the agents, through the %.400s", env_describe(w->eng.env));
    else if (w->eng.env) snprintf(desc, sizeof desc, "from the environment program '%.400s'", c->env_cmd);
    else reward_set_describe(w->rs, desc, sizeof desc);
    log_info("worker %s: model %s (%zu parameters), dataset %s (%lld rows), rewards: %s", w->worker_id,
             c->model_dir, w->eng.w.num_params, w->ds->source, (long long)w->ds->n, desc);
    return 0;
}

static void teardown(Worker *w) {
    engine_close(&w->eng);
    if (w->have_chat) chat_template_free(&w->chat);
    tokenizer_free(w->tok);
    if (w->ds) { if (!w->cfg->eval) dataset_sampler_free(&w->smp); dataset_free(w->ds); }
    reward_set_free(w->rs);
    store_close(w->st);
    pacing_free(&w->pace);
    free(w->row_refused);
}

int rollout_run(const RolloutConfig *given, volatile sig_atomic_t *stop, PailErr *err) {
    Worker w;
    memset(&w, 0, sizeof w);
    w.stop = stop;
    RolloutConfig cfg = *given;  // setup sets what is chosen at start (--max-prompt-tokens 0: preflight.h)
    const RolloutConfig *c = &cfg;
    int rc = setup(&w, &cfg, err);
    bool set_up = rc == 0;  // a refused setup writes no heartbeat (it would reset this id's resume position)
    if (rc == 0 && c->eval_once) {
        rc = evalworker_once(&w, err);
        teardown(&w);
        return rc;
    }
    if (rc == 0 && !w.st) rc = err_set(err, PAIL_ERR_INVALID, "--run is required");
    if (rc == 0) rc = pacing_check_manifest(&w, stop, err);
    if (rc == 0 && !c->eval) resume_position(&w);
    if (rc == 0) worker_heartbeat(&w, "starting");  // seen at once by the other workers' pacing (others_active)
    if (rc == 0 && !c->eval) pacing_compare_feeds(&w);
    long last_eval = -1;
    bool finished = false;
    while (rc == 0) {
        if (worker_stop_requested(&w, stop)) break;
        // The trainer reached --steps: a generating worker is done at once, the
        // eval worker once it has scored (or skipped) the final version.
        long final_v = -1;
        RunState rs = pacing_run_state(&w, &final_v);
        // The eval worker scores a run done before it started too, up to its final version.
        if ((rs == RUN_DONE && !c->eval) || (rs != RUN_OPEN && c->eval && last_eval >= final_v)) {
            log_info("the run is done (the trainer reached its --steps; final adapter v%08ld): exiting", final_v);
            finished = true;
            break;
        }
        long newest = -1;
        PailErr lerr = {0};
        if (versions_latest(w.st, &SERIES_ADAPTERS, &newest, &lerr) < 0) {
            log_warn("listing adapters: %s", lerr.msg);
            pacing_pause_ms(&w, 1000);
            continue;
        }
        // Rollout workers keep generating with the version they have; they wait
        // only for the first one. The eval worker waits for each new version.
        if (newest < 0 || (c->eval && newest <= last_eval)) {
            long after = c->eval ? (last_eval > w.version ? last_eval : w.version) : w.version;
            int wr = pacing_wait_newer(&w, after, stop, err);
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
            if (last_eval < 0 && newest > 0 && !pacing_adapter_refused(&w, 0)) {
                char k0[64];
                StoreStat ss0;
                version_key(&SERIES_EVALS, 0, k0, sizeof k0);
                baseline = store_head(w.st, k0, &ss0, &lerr) < 0 && lerr.code == PAIL_ERR_NOT_FOUND;
            }
            if (!baseline && c->eval_every > 1 && newest % c->eval_every) { last_eval = newest; continue; }
            S = pacing_window(&w);
            lo = newest - S > last_eval + 1 ? newest - S : last_eval + 1;
            if (baseline) pr = pacing_adapter_pick(&w, 0, 0, 1, &got, &perr);
            if (pr == 0 && got < 0) pr = pacing_adapter_pick(&w, newest, lo, c->eval_every, &got, &perr);
        } else if (newest != w.version) {  // hot swap between shards
            long prev = w.version;
            S = pacing_window(&w);
            lo = newest - S;
            pr = pacing_adapter_pick(&w, newest, lo, 1, &got, &perr);
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
            pacing_pause_ms(&w, 1000);
            continue;
        }
        if (got < 0) {
            pacing_say_waiting(&w, newest, lo, S);
            if (c->eval) { last_eval = newest; continue; }
            int wr = pacing_wait_newer(&w, newest, stop, err);
            if (wr != 0) { rc = wr < 0 ? -1 : 0; break; }
            continue;
        }
        if (c->eval) {
            char label[64];
            snprintf(label, sizeof label, "v%08ld", got);
            w.busy_since = time_unix_s();
            worker_heartbeat(&w, "evaluating");  // busy, not late: grpo-ctl status says "evaluating vN since"
            rc = evalworker_version(&w, got, label, err);
            w.busy_since = 0;
            if (rc < 0) break;
            last_eval = got;
            worker_heartbeat(&w, "evaluated");
            if (c->max_shards > 0 && ++w.shards >= c->max_shards) break;
            continue;
        }
        // After a pause the trainer has moved on: pick the adapter again.
        if (pacing_back_pressure(&w, stop)) continue;
        if (worker_stop_requested(&w, stop)) break;
        int sr = w.eng.env ? one_shard_env(&w, stop, err) : one_shard(&w, stop, err);
        if (sr == 1) continue;  // abandoned: pick the newer adapter
        if (sr < 0) {
            if (err->code == PAIL_ERR_INTERRUPTED) { rc = 0; break; }
            if (err->code == PAIL_ERR_NETWORK) {  // the bucket is down: the batch is lost, keep going
                snprintf(w.last_error, sizeof w.last_error, "%s", err->msg);
                log_warn("%s", err->msg);
                pacing_pause_ms(&w, 2000);
                continue;
            }
            rc = -1;
            break;
        }
        if (time_mono_s() - w.last_heartbeat > 3) worker_heartbeat(&w, "generating");
        if (c->max_shards > 0 && w.shards >= c->max_shards) break;
    }
    if (w.st && set_up) worker_heartbeat(&w, rc != 0 ? "failed" : finished ? "finished" : "stopped");
    teardown(&w);
    return rc;
}
