// grpo-train's loop (see trainer.h): bucket -> shard -> groups -> packed
// micro-batches -> model -> loss -> LoRA grads -> AdamW -> adapter -> bucket.
// A step is four parts: its items (rewards, advantages, masks), micro-batches
// (pack, [reference forward], forward, loss, backward), the update (clip,
// skip a non-finite step, AdamW) and its metrics. The adapter, its gradients
// and moments live on the compute backend (lora/trainable.h): a micro-batch
// sends token ids, positions, offsets and targets down and gets log-probs and
// entropies back, then sends d loss / d logp down; a step gets one double
// back; a publish saves the adapter and moments to the host. Memory is planned
// at start (token budget, groups per step) into one block; a step allocates
// nothing but what the store and HDF5 readers need for new shards, and its
// metrics line.
#include "grpo/trainer.h"
#include "grpo/signal_warn.h"
#include "core/mem.h"
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "grpo/feed.h"
#include "grpo/pack.h"
#include "grpo/state.h"
#include "kernels.h"
#include "lora/peft.h"
#include "lora/trainable.h"
#include "grpo/budget.h"
#include "model/memplan.h"
#include "model/device.h"
#include "model/transformer.h"
#include "shard/h5file.h"
#include "store/retention.h"
#include "store/runlayout.h"
#include "store/runmeta.h"
#include "store/stop_watch.h"
#include "store/versions.h"

typedef struct {   // one completion of the step
    const RolloutShard *s;  // borrowed: the shard of its group (held until feed_commit)
    int64_t i;       // completion index in the shard
    int64_t p;       // its prompt
} Item;

typedef struct {
    const TrainerConfig *cfg;
    ModelWeights w;
    char tok_sha[65];
    Store *st, *src;
    StopWatch *watch;  // control/stop looked for while the trainer works (NULL: replays)
    LoraLayout lay;
    Trainable *ts;                       // owned: params, grads and moments on the backend
    MemoryPlan mp;                       // printed at start; sizes a device's out-of-memory message
    // host views of the params and moments (n_params each; publish and resume): the
    // trainable's own arrays on a host-memory backend, else pieces of `block`
    float *h_params, *h_m, *h_v;
    Transformer *tf;
    Feed feed;
    int64_t step, version, published_step;
    Rng rng;
    char run_id[128];
    int G;
    // micro-batch: token budget T rows, S = min(T, N) sequences
    PackRow row;                         // tokens, positions, targets, cu_seqlens; row_of, off per completion token
    float *logp, *ent, *ref, *dlogp;     // (T) per row
    float *new_c, *old_c, *ref_c, *d_c;  // (T) per completion token of the micro-batch
    float *adv_c;                        // (S) advantage of each sequence in the row
    uint8_t *mask_c;                     // (S) all 1 (the loss takes a mask)
    // step: N = groups_per_step * G completions
    GroupRef *refs;                      // (groups_per_step)
    Item *items;                         // (2N): completions, then segments
    float *rewards, *adv;                // (2N), as items
    uint8_t *valid, *mask;               // (2N) reward valid; trained (valid, tokens, fits the budget)
    void *block;                         // owned: the pieces above (plan_buffers)
    size_t block_bytes;
    FILE *metrics;
    bool metrics_failed;     // --metrics could not be opened (said once)
    Buf pending_metrics;     // JSON lines of the steps since the last publish (committed with it)
    int64_t skipped_steps;   // cumulative: steps whose gradients were non-finite
    int64_t state_parent;    // the state version the next one follows (-1: none yet)
    bool republish;          // resumed past a damaged newest adapter: publish its weights again first
    bool grads_dumped;
    // --dynamic-sampling: groups consumed without spread while the current
    // step gathered (and all run long), and their rewards (for reward_sampled)
    int64_t flat_groups, flat_total, flat_n;
    double flat_reward_sum;
    // the learning-signal check (signal_warn.h): the newest steps' shares of groups
    // without reward spread, newest first, and how many in a row were mostly flat
    double signal_flat[SIGNAL_FLAT_STEPS];
    int signal_n;
    int64_t signal_run;
} Trainer;

// --- publishing ---------------------------------------------------------------

// --- metrics: written only for committed steps ----------------------------------

// A metrics value: JSON has no NaN or infinity, so those become null (one bad
// number must not lose the line).
static void jnum(json_t *o, const char *k, double x) { json_object_set_new(o, k, isfinite(x) ? json_real(x) : json_null()); }
static void jint(json_t *o, const char *k, int64_t x) { json_object_set_new(o, k, json_integer((json_int_t)x)); }

// Opens --metrics for appending. On a resume, drops a line a killed writer left
// half-written, so the lines appended after it stay parseable.
static int metrics_open(Trainer *t, PailErr *err) {
    const char *path = t->cfg->metrics_path;
    if (!path || t->metrics) return 0;
    if (!(t->metrics = fopen(path, "a+")))
        return err_set(err, PAIL_ERR_IO, "--metrics %s: cannot open for appending: %s", path, strerror(errno));
    if (fseeko(t->metrics, 0, SEEK_END) == 0) {
        off_t end = ftello(t->metrics), keep = end;
        while (keep > 0) {  // back to just after the last newline
            if (fseeko(t->metrics, keep - 1, SEEK_SET) < 0 || fgetc(t->metrics) == '\n') break;
            keep--;
        }
        if (keep < end) {
            log_warn("--metrics %s: dropping a half-written last line (%lld bytes)", path, (long long)(end - keep));
            if (ftruncate(fileno(t->metrics), keep) < 0)
                return err_set(err, PAIL_ERR_IO, "--metrics %s: truncate: %s", path, strerror(errno));
        }
        fseeko(t->metrics, 0, SEEK_END);
    }
    return 0;
}

// Is a line for this step already in the local --metrics file?
static bool metrics_file_has(Trainer *t, int64_t step) {
    if (!t->metrics || fseeko(t->metrics, 0, SEEK_SET) < 0) return false;
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, t->metrics) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        found = j && json_integer_value(json_object_get(j, "step")) == step;
        json_decref(j);
    }
    free(line);
    fseeko(t->metrics, 0, SEEK_END);
    return found;
}

// Writes committed metrics lines: metrics/step-N (create-only) and the local
// file. resumed: lines of the state a restart resumed from; the ones already
// written (bucket or file) are left as they are.
static void metrics_emit(Trainer *t, const Buf *lines, bool resumed) {
    const char *p = (const char *)lines->data, *end = p + lines->len;
    PailErr oerr = {0};
    // Opened at the first line to write (a run that trains nothing makes no file); a failure is said once.
    if (lines->len && t->cfg->metrics_path && !t->metrics && !t->metrics_failed && metrics_open(t, &oerr) < 0) {
        log_warn("%s", oerr.msg);
        t->metrics_failed = true;
    }
    int rewritten = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_t *j = json_loadb(p, n, 0, NULL);
        int64_t step = j ? (int64_t)json_integer_value(json_object_get(j, "step")) : -1;
        json_decref(j);
        if (step > 0) {
            char mkey[64];
            run_key_metrics(mkey, sizeof mkey, step);
            PailErr merr = {0};
            StorePutOpts mopt = {.create_only = true, .content_type = "application/json"};
            int rc = store_put(t->st, mkey, p, n, &mopt, &merr);
            if (rc < 0 && merr.code != PAIL_ERR_EXISTS) log_warn("metrics %s: %s", mkey, merr.msg);
            if (resumed && rc == 0) rewritten++;
            if (t->metrics && !(resumed && metrics_file_has(t, step))) {
                fprintf(t->metrics, "%.*s\n", (int)n, p);
                fflush(t->metrics);
            }
        }
        p += n + 1;
    }
    if (rewritten) log_info("resume: wrote the metrics of %d committed step(s) a kill had lost", rewritten);
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

// Reads and parses the trainer state `key` of st (verified, against the model's config).
static int state_load(const Trainer *t, Store *st, const char *key, TrainerState *s, PailErr *err) {
    Buf b = {0};
    int rc = versioned_get(st, key, &b, err);
    if (rc == 0) rc = state_read(s, b.data, b.len, key, &t->w.cfg, err);
    buf_free(&b);
    return rc;
}

static int publish(Trainer *t, PailErr *err) {
    double t0 = time_mono_s();
    int64_t v = t->version + 1;
    if (trainable_save(t->ts, t->h_params, t->h_m, t->h_v, err) < 0) return -1;
    // Readers refuse a non-finite adapter; one in the bucket would stop the run.
    if (!all_finite(t->h_params, (size_t)t->lay.n_params))
        return err_set(err, PAIL_ERR_INVALID, "adapter v%08lld (step %lld) has non-finite weights: not published; "
                       "the bucket still ends at v%08lld, which a restart resumes from", (long long)v,
                       (long long)t->step, (long long)t->version);
    AdapterMeta meta = {.version = v, .step = t->step, .created_unix = time_unix_s()};
    snprintf(meta.base_sha256, sizeof meta.base_sha256, "%s", t->w.base_sha256);
    TrainerState s = {.step = t->step, .version = v, .rng = t->rng, .layout = t->lay, .params = t->h_params,
                      .m = t->h_m, .v = t->h_v, .consumed = t->feed.stats.consumed, .dropped = t->feed.stats.dropped,
                      .rejected = t->feed.stats.rejected, .skipped_steps = t->skipped_steps,
                      .metrics = t->pending_metrics,  // borrowed
                      .rec = t->feed.rec, .rec_n = t->feed.rec_n, .parent = t->state_parent,
                      .late_listed_unix = t->feed.late_listed_unix, .late_listed_from = t->feed.late_listed_from};
    snprintf(s.run_id, sizeof s.run_id, "%s", t->run_id);
    Buf state = {0};
    int rc = -1;
    if (lora_adapter_write(&t->lay, t->h_params, &meta, &s.adapter_image, err) < 0) goto out;
    if (feed_export(&t->feed, &s.keys, &s.versions, &s.n_groups, &s.used, &s.nshards) < 0) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (state_write(&s, &state, err) < 0) goto out;
    char key[128];
    // The order is the protocol: state, then the adapter (the commit), then the hint.
    version_key(&SERIES_STATES, v, key, sizeof key);
    if (versioned_put(t->st, key, state.data, state.len, err) < 0) goto out;
    version_key(&SERIES_ADAPTERS, v, key, sizeof key);
    if (versioned_put(t->st, key, s.adapter_image.data, s.adapter_image.len, err) < 0) goto out;
    PailErr herr = {0};
    if (versions_write_hint(t->st, v, &herr) < 0) log_warn("could not update adapters/LATEST: %s", herr.msg);
    t->version = v;
    t->published_step = t->step;
    t->state_parent = v;
    feed_record_reset(&t->feed);  // those groups are in state vN now
    rc = 0;
    log_info("published adapter v%08lld (step %lld) in %.2f s", (long long)v, (long long)t->step, time_mono_s() - t0);
    metrics_emit(t, &t->pending_metrics, false);  // the steps are committed: now their metrics
    buf_reset(&t->pending_metrics);
    if (t->cfg->keep_versions > 0) {  // best effort: a relay gives deletes to the operator role only
        GcStats g;
        PailErr gerr = {0};
        if (run_gc(t->st, t->cfg->keep_versions, t->cfg->max_staleness, false, &g, &gerr) < 0)
            log_warn("--keep-versions: %s", gerr.msg);
    }
out:
    buf_free(&state);
    buf_free(&s.adapter_image);
    free(s.keys);
    free(s.versions);
    free(s.n_groups);
    free(s.used);
    return rc;
}

static int write_progress(Trainer *t, bool done, PailErr *err) {
    // Per version inside the window: shards listed but not used up, and shards
    // used up (or rejected). Workers compare the latter with their own listing
    // of rollouts/ for back-pressure (shards written since the trainer's last
    // listing are not in either count). A shard whose groups were all taken by
    // the step being gathered counts as used: nothing of it waits, and a
    // trainer still short of its step's groups (with --dynamic-sampling, the
    // flat groups dropped too) must never hold the workers in a pause.
    Progress p;
    progress_init(&p);
    p.pending_by_version = json_object();
    p.used_by_version = json_object();
    for (int i = 0; i < t->feed.n; i++) {
        const FeedShard *e = t->feed.shards[i];
        if (e->version < t->version - t->cfg->max_staleness) continue;  // kept to count late shards
        bool used_up = e->n_groups >= 0 && e->used + e->taken >= e->n_groups;
        char v[32];
        snprintf(v, sizeof v, "%lld", (long long)e->version);
        json_t *obj = used_up ? p.used_by_version : p.pending_by_version;
        json_int_t n = json_integer_value(json_object_get(obj, v));
        json_object_set_new(obj, v, json_integer(n + 1));
    }
    p.version = (long)t->version;
    p.step = (long)t->step;
    p.consumed_shards = (long)t->feed.stats.consumed;
    p.dropped_shards = (long)t->feed.stats.dropped;
    p.rejected_shards = (long)t->feed.stats.rejected;
    p.steps_skipped = (long)t->skipped_steps;
    p.max_staleness = t->cfg->max_staleness;
    p.groups_per_step = t->cfg->groups_per_step;
    p.steps_target = t->cfg->steps;
    p.time = time_unix_s();
    p.done = done;
    p.final_version = done ? (long)t->version : -1;
    int rc = progress_write(t->st, &p, err);
    progress_free(&p);
    return rc;
}

// --- start: manifest, v0 or resume ---------------------------------------------

// Pairs trainer/state-v<use> (read into s) with adapters/v<use>: the state
// embeds the adapter's exact bytes, so the two must be equal. An adapter not
// yet published (killed between the two puts) is published from the state.
// True when the state's adapter image is what adapters/vN was published as
// (its pail-sha256 metadata), i.e. the object was damaged after its publish.
static bool image_is_published(Trainer *t, const TrainerState *s, const char *akey) {
    StoreStat ss;
    PailErr e = {0};
    if (store_head(t->st, akey, &ss, &e) < 0) return false;
    const char *want = store_stat_meta(&ss, META_SHA256);
    char hex[65];
    sha256_hex(s->adapter_image.data, s->adapter_image.len, hex);
    return want && !strcmp(want, hex);
}

static int pair_state(Trainer *t, const TrainerState *s, long use, long av, PailErr *err) {
    char skey[128], akey[128];
    version_key(&SERIES_STATES, use, skey, sizeof skey);
    version_key(&SERIES_ADAPTERS, use, akey, sizeof akey);
    Buf a = {0};
    PailErr gerr = {0};
    if (versioned_get(t->st, akey, &a, &gerr) < 0) {
        buf_free(&a);
        if (gerr.code == PAIL_ERR_INVALID && use == av && image_is_published(t, s, akey)) {
            // Damaged after its publish (the state's copy hashes to what was
            // published): workers refuse it, so the same weights go out again
            // as the next version, as a live trainer does (check_newest_adapter).
            log_warn("resume: the newest adapter %s does not verify (%s): %s holds its exact bytes; resuming from "
                     "it and publishing its weights again as v%08ld", akey, gerr.msg, skey, use + 1);
            t->republish = true;
            return 0;
        }
        if (gerr.code != PAIL_ERR_NOT_FOUND) {
            *err = gerr;
            return err_wrap(err, "resume: reading the adapter of %s", skey);
        }
        if (use != av + 1)
            return err_set(err, PAIL_ERR_INVALID, "resume: %s exists but %s is missing while the newest adapter is "
                           "v%08ld: the run's adapters were deleted or moved; restore %s or start a new --run prefix",
                           skey, akey, av, akey);
        // killed between the state and the adapter: commit it now
        if (versioned_put(t->st, akey, s->adapter_image.data, s->adapter_image.len, err) < 0) return -1;
        PailErr herr = {0};
        versions_write_hint(t->st, use, &herr);
        log_info("resume: published the missed adapter v%08ld from its state", use);
        return 0;
    }
    bool same = a.len == s->adapter_image.len && !memcmp(a.data, s->adapter_image.data, a.len);
    buf_free(&a);
    if (!same)
        return err_set(err, PAIL_ERR_INVALID, "resume: %s and %s disagree (the state embeds other adapter bytes than "
                       "the published ones: the state was rewritten after the adapter). Nothing was changed; "
                       "to continue from an earlier state pass --resume-from %ld (new versions follow the newest "
                       "published one)", skey, akey, use > 0 ? use - 1 : 0);
    return 0;
}

// Fetches adapters/v<v>, verifies it (sha256) and decodes it against the
// model; *meta gets its metadata, the tensors are dropped. key (128 bytes)
// gets its key.
static int adapter_check(Trainer *t, long v, AdapterMeta *meta, char *key, PailErr *err) {
    version_key(&SERIES_ADAPTERS, v, key, 128);
    Buf b = {0};
    LoraLayout l;
    float *p = NULL;
    int rc = versioned_get(t->st, key, &b, err);
    if (rc == 0) rc = lora_adapter_read(b.data, b.len, key, &t->w.cfg, &l, &p, meta, err);
    buf_free(&b);
    if (rc < 0) return -1;
    free(p);
    lora_layout_free(&l);
    return 0;
}

static int resume(Trainer *t, long sv, long av, PailErr *err) {
    const TrainerConfig *c = t->cfg;
    long use = c->resume_from >= 0 ? c->resume_from : sv;
    char key[128];
    version_key(&SERIES_STATES, use, key, sizeof key);
    if (use > sv)
        return err_set(err, PAIL_ERR_INVALID, "--resume-from %ld: the newest trainer state is v%08ld", use, sv);
    if (c->resume_from < 0 && av > sv)
        return err_set(err, PAIL_ERR_INVALID, "resume: adapters/v%08ld is newer than the newest trainer state %s: the "
                       "states after it are missing (deleted?). Continuing from %s would fork the run, so nothing "
                       "was changed; pass --resume-from %ld to continue from it with new versions after v%08ld "
                       "(nothing published is rewritten)", av, key, key, sv, av);
    TrainerState s;
    int rc = state_load(t, t->st, key, &s, err);
    if (rc < 0) {
        if (use > 0 && err->code == PAIL_ERR_INVALID) {  // corrupt, not a network failure
            char inner[sizeof err->msg];
            snprintf(inner, sizeof inner, "%s", err->msg);
            return err_set(err, PAIL_ERR_INVALID, "resume from %s: %s; nothing was changed: to continue from the "
                           "previous state pass --resume-from %ld", key, inner, use - 1);
        }
        return err_wrap(err, "resume from %s", key);
    }
    if (s.layout.n_params != t->lay.n_params || s.layout.cfg.rank != t->lay.cfg.rank ||
        s.layout.cfg.targets != t->lay.cfg.targets) {
        state_free(&s);
        return err_set(err, PAIL_ERR_INVALID, "%s: LoRA layout differs from --lora-rank/--lora-targets", key);
    }
    if (pair_state(t, &s, use, av, err) < 0) {
        state_free(&s);
        return -1;
    }
    if (trainable_load(t->ts, s.params, s.m, s.v, err) < 0) {
        state_free(&s);
        return -1;
    }
    t->step = t->published_step = s.step;
    t->version = s.version;
    t->rng = s.rng;
    t->skipped_steps = s.skipped_steps;
    t->state_parent = use;
    t->feed.stats.consumed = s.consumed;
    t->feed.stats.dropped = s.dropped;
    t->feed.stats.rejected = s.rejected;
    if (feed_import(&t->feed, s.keys, s.versions, s.n_groups, s.used, s.nshards, err) < 0) {
        state_free(&s);
        return -1;
    }
    metrics_emit(t, &s.metrics, true);  // the metrics a kill right after the commit lost
    state_free(&s);
    long newest = av > sv ? av : sv;
    if (use < newest) {  // an older state: the next version follows the newest one that exists
        // the step recorded in the newest adapter: the step count goes on after it
        AdapterMeta meta;
        char akey[128];
        if (adapter_check(t, av, &meta, akey, err) < 0) return err_wrap(err, "resume");
        int64_t step = meta.step;
        log_warn("resumed from %s (step %lld) by --resume-from; versions v%08ld..v%08ld stay as published, the next "
                 "is v%08ld at step %lld", key, (long long)t->step, use + 1, newest, newest + 1,
                 (long long)(step > t->step ? step : t->step) + 1);
        t->version = newest;
        if (step > t->step) t->step = t->published_step = step;
        return 0;
    }
    log_info("resumed from trainer/state-v%08ld: step %lld, %d shards tracked", use, (long long)t->step, t->feed.n);
    return 0;
}

// Temp files older than this are a killed writer's (doc/protocol.md).
#define STALE_TMP_SECONDS 3600

static int start(Trainer *t, PailErr *err) {
    const TrainerConfig *c = t->cfg;
    int cleaned = 0;
    PailErr cerr = {0};
    if (store_clean_stale(t->st, STALE_TMP_SECONDS, &cleaned, &cerr) < 0) log_warn("cleaning temp files: %s", cerr.msg);
    else if (cleaned) log_info("removed %d temp file(s) that killed writers left over an hour ago", cleaned);
    long sv, av;
    // Adapters first: a state is written before its adapter, so with a twin
    // publishing meanwhile the states listed after the adapters are never
    // behind them unless some were deleted (states first read a live twin's
    // publish as "states missing" and advised --resume-from, a fork).
    if (versions_latest(t->st, &SERIES_ADAPTERS, &av, err) < 0 || versions_latest(t->st, &SERIES_STATES, &sv, err) < 0)
        return err_wrap(err, "listing the run's versions");
    if (sv >= 0 || av >= 0) {  // a run with versions: its run.json must still be there
        StoreStat ms;
        PailErr herr = {0};
        if (store_head(t->st, RUN_KEY_MANIFEST, &ms, &herr) < 0) {
            if (herr.code != PAIL_ERR_NOT_FOUND) {
                *err = herr;
                return err_wrap(err, "%s", RUN_KEY_MANIFEST);
            }
            return err_set(err, PAIL_ERR_INVALID, "%s/%s is missing but the run has versions (adapters up to v%08ld, "
                           "trainer state up to v%08ld): refusing to start a new run over it; restore run.json "
                           "(its run_id is in the trainer state) or use a new --run prefix", store_url(t->st),
                           RUN_KEY_MANIFEST, av, sv);
        }
    }
    RunInfo ri;
    runinfo_init(&ri);
    ri.base_model = (char *)c->model_dir;  // borrowed: ri is not freed
    ri.task = (char *)c->task;
    ri.trainer = c->effective;
    snprintf(ri.base_sha256, sizeof ri.base_sha256, "%s", t->w.base_sha256);
    snprintf(ri.tokenizer_sha256, sizeof ri.tokenizer_sha256, "%s", t->tok_sha);
    ri.created_unix = time_unix_s();
    ri.group_size = c->group_size;
    ri.groups_per_step = c->groups_per_step;
    ri.max_staleness = c->max_staleness;
    ri.publish_every = c->publish_every;
    ri.steps = c->steps;
    ri.lora_rank = t->lay.cfg.rank;
    ri.lora_alpha = t->lay.cfg.alpha;
    ri.lora_rslora = t->lay.cfg.rslora;
    lora_layout_targets_format(&t->lay, ri.lora_targets, sizeof ri.lora_targets);  // phi3: its fused names
    // What the trainer computes its log-probs with: workers compare theirs (a
    // bf16 worker's behaviour log-probs differ from an f32 trainer's by the rounding).
    char dtd[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(&t->w, dtd, sizeof dtd);
    snprintf(ri.compute_dtype, sizeof ri.compute_dtype, "%s", dtd);
    char rid[128];
    if (c->run_id) snprintf(rid, sizeof rid, "%s", c->run_id);
    else {
        char h[65];
        char seed[256];
        snprintf(seed, sizeof seed, "%s %lld %d", c->run_url, (long long)time_unix_s(), (int)getpid());
        sha256_hex(seed, strlen(seed), h);
        snprintf(rid, sizeof rid, "run-%.12s", h);
    }
    snprintf(ri.run_id, sizeof ri.run_id, "%s", rid);
    json_t *man = runinfo_to_json(&ri);
    if (!man) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for its JSON", RUN_KEY_MANIFEST);
    static const char *const must[] = {"base_sha256", "tokenizer_sha256", "lora", "group_size", NULL};
    json_t *existing = NULL;
    int rc = run_manifest_publish(t->st, man, must, &existing, err);
    json_decref(man);
    if (rc < 0) return -1;
    snprintf(t->run_id, sizeof t->run_id, "%s", rid);
    if (existing) {  // the run's first trainer wrote it: its run id and settings stay
        json_decref(existing);
        RunInfo old;
        if (runinfo_read(t->st, &old, err) < 0) return -1;
        if (strcmp(old.compute_dtype, dtd))
            log_warn("run.json: the run was created computing in %s; this trainer holds its weights as %s (--dtype %s): "
                     "log-probs differ by the rounding", old.compute_dtype, dtd,
                     c->weights_dtype == MODEL_DTYPE_AUTO ? "auto" : dtype_name(c->weights_dtype));
        if (old.run_id[0]) snprintf(t->run_id, sizeof t->run_id, "%s", old.run_id);
        runinfo_free(&old);
    }

    if (sv >= 0 && c->refuse_resume)
        return err_set(err, PAIL_ERR_INVALID, "%s holds trainer state v%08ld: --no-resume refuses to continue it "
                       "(use a new --run prefix for a fresh start)", store_url(t->st), sv);
    if (sv < 0 && c->resume_from >= 0)
        return err_set(err, PAIL_ERR_INVALID, "--resume-from %ld: %s holds no trainer state", c->resume_from,
                       store_url(t->st));
    if (sv >= 0) {  // from the bucket alone
        if (resume(t, sv, av, err) < 0) return -1;
        return t->republish ? publish(t, err) : 0;
    }
    if (av >= 0)
        return err_set(err, PAIL_ERR_INVALID,
                       "%s: adapters exist (v%08ld) but no trainer state: not a run this trainer can resume",
                       store_url(t->st), av);
    // A new run: v0 is PEFT's init (B = 0) or the given adapter, published as
    // version 0 with its state.
    if (c->init_adapter) {
        LoraLayout l2;
        float *p2;
        AdapterMeta meta;
        if (lora_load_any(c->init_adapter, &t->w.cfg, &l2, &p2, &meta, err) < 0) return err_wrap(err, "--init-adapter");
        if (meta.base_sha256[0] && strcmp(meta.base_sha256, t->w.base_sha256)) {
            free(p2);
            lora_layout_free(&l2);
            return err_set(err, PAIL_ERR_INVALID, "--init-adapter %s was trained on base %.12s..., --model is %.12s...",
                           c->init_adapter, meta.base_sha256, t->w.base_sha256);
        }
        if (l2.n_params != t->lay.n_params || l2.cfg.targets != t->lay.cfg.targets) {
            free(p2);
            lora_layout_free(&l2);
            return err_set(err, PAIL_ERR_INVALID, "--init-adapter %s: rank/targets differ from the run's LoRA config",
                           c->init_adapter);
        }
        int lrc = trainable_load(t->ts, p2, NULL, NULL, err);
        free(p2);
        lora_layout_free(&l2);
        if (lrc < 0) return -1;
    } else {
        lora_init(&t->lay, t->h_params, (uint64_t)c->seed);
        if (trainable_load(t->ts, t->h_params, NULL, NULL, err) < 0) return -1;
    }
    t->version = -1;  // publish() makes it v0
    return publish(t, err);
}

// --- one step -------------------------------------------------------------------

// While waiting for rollouts: is the newest adapter still readable? One that
// was corrupted in the bucket after its publish is refused by every worker, so
// no shard of its version will come; the same weights go out again as the next
// version (a new state, the step unchanged) and workers move on to it.
static int check_newest_adapter(Trainer *t, PailErr *err) {
    char key[128];
    PailErr gerr = {0};
    AdapterMeta meta;
    if (adapter_check(t, t->version, &meta, key, &gerr) == 0) return 0;
    if (gerr.code == PAIL_ERR_NETWORK || gerr.code == PAIL_ERR_AUTH) return 0;  // not a verdict on the bytes
    log_warn("the newest adapter %s does not verify (%s): workers refuse it; publishing its weights again as "
             "v%08lld", key, gerr.msg, (long long)t->version + 1);
    return publish(t, err);
}

// --dynamic-sampling (DAPO): of the `got` groups just taken into refs[have..],
// those without reward spread are consumed (the feed counts them taken, so the
// step's feed_commit uses them up) but not kept: the step waits for
// groups_per_step groups with a signal. A replayed record names only kept
// groups, so a replay trains the same steps. Returns how many were kept.
static int drop_flat(Trainer *t, int have, int got) {
    int kept = 0, G = t->G;
    for (int k = have; k < have + got; k++) {
        GroupRef r = t->refs[k];
        const RolloutShard *s = r.s;
        int64_t lo = (int64_t)r.group * G;
        if (!grpo_group_flat(s->rewards, s->reward_valid, lo, lo + G)) {
            t->refs[have + kept++] = r;
            continue;
        }
        t->flat_groups++;
        t->flat_total++;
        for (int64_t i = lo; i < lo + G; i++)
            if (s->reward_valid[i]) t->flat_reward_sum += s->rewards[i], t->flat_n++;
    }
    return kept;
}

static int gather(Trainer *t, volatile sig_atomic_t *stop, int *ngroups, double *waited, PailErr *err) {
    const TrainerConfig *c = t->cfg;
    int want = (int)c->groups_per_step, have = 0;
    double t0 = time_mono_s(), next_progress = 0;
    int64_t sleep_ms = 100;
    bool listed_replay = false, relisted = false;
    double next_adapter_check = t0 + 10;  // then every 30 s of waiting
    t->flat_groups = t->flat_n = 0, t->flat_reward_sum = 0;  // this step's
    for (;;) {
        if (!c->replay_url || !listed_replay) {
            if (feed_refresh(&t->feed, t->version, err) < 0) {
                if (err->code != PAIL_ERR_NETWORK) return -1;
                log_warn("listing rollouts: %s (retrying)", err->msg);
            }
            listed_replay = true;
        }
        int got = 0;
        bool take_failed = false;
        if (feed_take(&t->feed, want - have, t->refs + have, &got, err) < 0) {
            if (err->code != PAIL_ERR_NETWORK) return -1;
            log_warn("reading a shard: %s (retrying)", err->msg);
            take_failed = true;
        }
        have += c->dynamic_sampling ? drop_flat(t, have, got) : got;
        if (have >= want) break;
        if (c->replay_url) {
            // Every group listed is handed out (the step's own stay pending until
            // it commits, so the pending count cannot tell): list once more for
            // shards written since, and stop when there are none.
            if (got > 0 || take_failed) { relisted = false; continue; }
            if (relisted) break;  // the replay ran out of shards
            if (feed_refresh(&t->feed, t->version, err) < 0) return -1;
            relisted = true;
            continue;
        }
        if (stop && *stop) break;
        double now = time_mono_s();
        if (c->rollout_timeout > 0 && now - t0 > c->rollout_timeout)
            return err_set(err, PAIL_ERR_TIMEOUT, "no rollouts for %.0f s (have %d of %d groups for step %lld%s): are "
                           "rollout workers running against %s?", now - t0, have, want, (long long)t->step + 1,
                           t->flat_groups ? ", more dropped by --dynamic-sampling for no reward spread" : "",
                           store_url(t->st));
        if (now >= next_progress) {
            PailErr perr = {0};
            if (write_progress(t, false, &perr) < 0) log_warn("progress.json: %s", perr.msg);
            StoreStat ss;
            if (store_head(t->st, RUN_KEY_STOP, &ss, &perr) == 0) {
                log_info("control/stop found: stopping");
                if (stop) *stop = 1;
                break;
            }
            next_progress = now + 5;
        }
        if (now >= next_adapter_check) {
            int64_t v = t->version;
            if (check_newest_adapter(t, err) < 0) return -1;
            next_adapter_check = now + 30;
            if (t->version != v) continue;  // a new version: list its window at once
        }
        time_sleep_ms(sleep_ms);
        sleep_ms = sleep_ms * 3 / 2 > 2000 ? 2000 : sleep_ms * 3 / 2;
    }
    *ngroups = have;
    *waited = time_mono_s() - t0;
    return 0;
}

typedef struct {
    double reward_sum, reward_sq, len_sum, ent_sum, staleness_sum, staleness_max;
    double trained_len_sum, turns_sum;  // mask-1 (model) tokens and assistant turns of the completions
    int64_t completions, truncated, tokens, too_long, ent_n;
    double comp_sum[SHARD_MAX_COMPONENTS];
    int64_t comp_n;
} StepStats;

typedef struct {   // one optimizer step in the making
    int ngroups, N;  // groups, completions (N = ngroups * G)
    int n_items;     // N, then the episodes' further segments (shard format 3), at most N of them
    int64_t segments, segments_dropped;  // segments trained; left out (more than N in one step)
    int64_t K;       // reward components (of the first group's shard)
    double t0, waited;
    StepStats ss;
    AdvantageStats ast;
    GrpoLossStats ls;
    double norm;     // the loss normalizer of the whole step
    double sumsq, lr;
    int64_t zero_adv_skipped;  // completions left out of the forward/backward: advantage 0, no KL term
} Step;

// The packer's view of a completion: its prompt, then the completion, whose
// mask-1 tokens (the model's; a multi-turn episode's environment tokens are
// mask 0, context only) are scored.
static PackSeq item_seq(const Item *it) {
    const RolloutShard *s = it->s;
    int64_t p0 = s->prompt_offsets[it->p], c0 = s->completion_offsets[it->i];
    return (PackSeq){.prompt = s->prompt_ids + p0, .n_prompt = (int)(s->prompt_offsets[it->p + 1] - p0),
                     .completion = s->completion_ids + c0,
                     .n_completion = (int)(s->completion_offsets[it->i + 1] - c0),
                     .cmask = s->completion_mask ? s->completion_mask + c0 : NULL};  // never NULL after shard_read
}

// Step items: the completions of the step's groups, their rewards and
// advantages, which ones are trained (valid reward, at least one scored
// token, fits the token budget), the loss normalizer and the reward
// statistics. Scored tokens are the completion's mask-1 tokens (all of a
// single-turn completion's): the normalizer counts those only.
static void step_items(Trainer *t, Step *st) {
    const TrainerConfig *c = t->cfg;
    int G = t->G, N = st->N;
    StepStats *ss = &st->ss;
    for (int g = 0; g < st->ngroups; g++) {
        const RolloutShard *s = t->refs[g].s;
        double stale = (double)(t->version - t->refs[g].version);
        ss->staleness_sum += stale;
        if (stale > ss->staleness_max) ss->staleness_max = stale;
        if (g == 0) st->K = s->K;
        for (int j = 0; j < G; j++) {
            int64_t i = (int64_t)t->refs[g].group * G + j;
            t->items[g * G + j] = (Item){.s = s, .i = i, .p = t->refs[g].group};
            t->rewards[g * G + j] = s->rewards[i];
            t->valid[g * G + j] = s->reward_valid[i];
        }
    }
    grpo_advantages(t->adv, &st->ast, t->rewards, t->valid, st->ngroups, G, c->scale_rewards);
    // An episode's further segments (an agent edited its history, doc/formats.md)
    // are items of their own with the episode's advantage; the group's
    // statistics count each episode once.
    st->n_items = N;
    for (int g = 0; g < st->ngroups; g++) {
        const RolloutShard *s = t->refs[g].s;
        for (int64_t x = 0; x < s->X; x++) {
            int64_t e = s->segment_of[x];
            if (e / G != t->refs[g].group) continue;
            if (st->n_items == 2 * N) { st->segments_dropped++; continue; }
            int k = st->n_items++, parent = g * G + (int)(e % G);
            t->items[k] = (Item){.s = s, .i = s->N + x, .p = t->refs[g].group};
            t->rewards[k] = t->rewards[parent];
            t->valid[k] = t->valid[parent];
            t->adv[k] = t->adv[parent];
            st->segments++;
        }
    }
    if (st->segments_dropped)
        log_warn("step %ld: %lld segments past the step's %d left out", t->step + 1, (long long)st->segments_dropped, N);
    int64_t comps = 0, toks = 0, max_new = 1;
    for (int k = 0; k < st->n_items; k++) {
        Item *it = &t->items[k];
        PackSeq seq = item_seq(it);
        int64_t clen = seq.n_completion, scored = pack_scored(&seq);
        int fits = pack_rows(&seq) <= c->token_budget;
        if (!fits) ss->too_long++;
        t->mask[k] = t->valid[k] && scored > 0 && fits;
        // Dr.GRPO's constant: the generation budget (an episode shard's max_new_tokens is
        // the writer's --max-episode-tokens, which bounds the mask-1 and mask-0 tokens together)
        if (it->s->max_new_tokens > max_new) max_new = it->s->max_new_tokens;
        if (t->valid[k] && k < N) {
            ss->reward_sum += t->rewards[k];
            ss->reward_sq += (double)t->rewards[k] * t->rewards[k];
            ss->completions++;
            for (int64_t q = 0; q < st->K && q < SHARD_MAX_COMPONENTS && q < it->s->K; q++)
                ss->comp_sum[q] += it->s->reward_components[it->i * it->s->K + q];
            ss->comp_n++;
        }
        ss->len_sum += (double)clen;
        ss->trained_len_sum += (double)scored;
        ss->turns_sum += it->s->turns ? it->s->turns[it->i] : 1;
        ss->truncated += it->s->finish_reason[it->i] == FINISH_LENGTH;
        if (t->mask[k]) { comps++; toks += scored; }
    }
    st->norm = grpo_loss_norm(c->loss.type, comps, toks, max_new);
    // A completion with advantage 0 (its group's rewards had no spread, or its
    // reward is its group's mean) adds 0 to the loss and to every gradient when there
    // is no KL term: every loss variant multiplies its term by A. It still
    // counts in the normalizer above, as in TRL, so leaving it out of the
    // forward and backward changes nothing but the time (and the token
    // statistics, which then cover the trained completions only).
    if (c->loss.beta == 0 && !c->train_zero_advantage)
        for (int k = 0; k < st->n_items; k++)
            if (t->mask[k] && t->adv[k] == 0.0f) t->mask[k] = 0, st->zero_adv_skipped++;
}

// One micro-batch from trained item *k on: the consecutive trained items of
// the same sampling temperature that fit the token budget, packed into one
// row; [the KL reference's forward, LoRA off]; the policy's forward; the loss
// and its gradient per completion token; the backward into the gradients (+=).
// *k moves past the items taken (and the untrained ones among them).
static int micro_batch(Trainer *t, Step *st, int *k, PailErr *err) {
    const TrainerConfig *c = t->cfg;
    PackRow *r = &t->row;
    float temp = (float)t->items[*k].s->temperature;
    int b = *k;
    pack_reset(r);
    for (; b < st->n_items; b++) {
        if (!t->mask[b]) continue;
        const Item *it = &t->items[b];
        PackSeq seq = item_seq(it);
        int a = r->nadded;
        if ((float)it->s->temperature != temp || pack_add(r, &seq) < 0) break;
        t->adv_c[a] = t->adv[b];
        t->mask_c[a] = 1;
        // behaviour log-probs: the scored token's index in its sequence is its row's position + 1
        // (only mask-1 completion tokens are scored, so never an environment token's stored 0)
        const float *lp = it->s->logprobs + it->s->completion_offsets[it->i];
        for (int64_t q = r->off[a]; q < r->off[a + 1]; q++) t->old_c[q] = lp[r->pos[r->row_of[q]] + 1 - seq.n_prompt];
    }
    *k = b;
    int T = r->T, n = r->nadded, nct = r->nscored;
    if (c->loss.beta > 0) {  // the KL reference: the base model, LoRA off, same row
        transformer_lora_enable(t->tf, false);
        int rc = transformer_forward(t->tf, t->ref, NULL, r->tok, r->pos, r->cu, r->nseq, T, r->tgt, temp, err);
        transformer_lora_enable(t->tf, true);
        if (rc < 0) return -1;
        for (int q = 0; q < nct; q++) t->ref_c[q] = t->ref[r->row_of[q]];
    }
    if (transformer_forward(t->tf, t->logp, t->ent, r->tok, r->pos, r->cu, r->nseq, T, r->tgt, temp, err) < 0)
        return -1;
    for (int q = 0; q < nct; q++) {
        t->new_c[q] = t->logp[r->row_of[q]];
        st->ss.ent_sum += t->ent[r->row_of[q]];
    }
    st->ss.ent_n += nct;
    grpo_loss_forward_backward(&st->ls, t->d_c, t->new_c, t->old_c, c->loss.beta > 0 ? t->ref_c : NULL, r->off, n,
                               t->adv_c, t->mask_c, &c->loss, st->norm);
    memset(t->dlogp, 0, (size_t)T * sizeof(float));
    for (int q = 0; q < nct; q++) t->dlogp[r->row_of[q]] = t->d_c[q];
    if (transformer_backward(t->tf, trainable_grads(t->ts), NULL, t->dlogp, err) < 0) return -1;
    st->ss.tokens += T;
    return 0;
}

// --dump-grads: the first step's LoRA gradients, in the adapter's layout.
static int dump_grads(Trainer *t, PailErr *err) {
    const char *path = t->cfg->dump_grads;
    Buf img = {0};
    AdapterMeta gm = {.version = t->version, .step = t->step};
    float *g = malloc((size_t)t->lay.n_params * sizeof(float));  // a debugging copy, once
    if (!g) return err_set(err, PAIL_ERR_NOMEM, "--dump-grads %s: out of memory", path);
    if (trainable_save_grads(t->ts, g, err) < 0 || lora_adapter_write(&t->lay, g, &gm, &img, err) < 0 ||
        h5f_write_path(&img, path, err) < 0) {
        free(g);
        buf_free(&img);
        return err_wrap(err, "--dump-grads %s", path);
    }
    free(g);
    buf_free(&img);
    t->grads_dumped = true;
    return 0;
}

// The update on the backend (trainable_step): the global gradient norm,
// clipping, AdamW at the schedule's learning rate, the gradients zeroed.
// Returns 1 (nothing changed, the step counted as skipped) when the gradients
// are not finite, 0 after a step, -1 when the device fails.
static int step_update(Trainer *t, Step *st, PailErr *err) {
    const TrainerConfig *c = t->cfg;
    LrSchedule sched = {.kind = c->schedule, .lr = c->lr, .min_lr_ratio = c->min_lr_ratio,
                        .warmup_steps = c->warmup_steps, .steps = c->steps};
    st->lr = lr_schedule_at(&sched, t->step);
    TrainableHyper h = {.lr = st->lr, .beta1 = (float)c->beta1, .beta2 = (float)c->beta2, .eps = (float)c->adam_eps,
                        .weight_decay = (float)c->weight_decay, .max_grad_norm = (float)c->max_grad_norm};
    int rc = trainable_step(t->ts, &h, (int)(t->step + 1), &st->sumsq, err);
    if (rc < 0) return -1;
    // A square sum past float range (or NaN) would put inf into AdamW's second
    // moment and NaN into the adapter: the step is skipped, its groups used up.
    if (rc == 1) {
        t->skipped_steps++;
        char used[1024] = "";
        size_t ul = 0;
        for (int g = 0; g < st->ngroups && ul + 2 < sizeof used; g++) {
            if (g > 0 && t->refs[g].src == t->refs[g - 1].src) continue;
            ul += (size_t)snprintf(used + ul, sizeof used - ul, "%s%s", ul ? ", " : "", t->refs[g].src->key);
        }
        log_warn("step %lld skipped (%lld so far): non-finite gradients (sum of squares %g) from %d groups of %s",
                 (long long)t->step + 1, (long long)t->skipped_steps, st->sumsq, st->ngroups, used);
        return 1;
    }
    t->step++;
    return 0;
}

// Warns when most groups of SIGNAL_FLAT_STEPS steps in a row had no reward spread
// (then every 10 such steps more): the run learns nothing, and the metric alone
// went unnoticed.
static void signal_check(Trainer *t, double frac_zero, int64_t groups) {
    double f = signal_flat_fraction(frac_zero, (double)groups, (double)t->flat_groups);
    memmove(t->signal_flat + 1, t->signal_flat, (SIGNAL_FLAT_STEPS - 1) * sizeof t->signal_flat[0]);
    t->signal_flat[0] = f;
    if (t->signal_n < SIGNAL_FLAT_STEPS) t->signal_n++;
    t->signal_run = f >= SIGNAL_FLAT_FRACTION ? t->signal_run + 1 : 0;
    char msg[768];
    if (t->signal_run % 10 == SIGNAL_FLAT_STEPS && signal_flat_warning(t->signal_flat, t->signal_n, msg, sizeof msg) > 0 &&
        msg[0])
        log_warn("step %lld: %s", (long long)t->step, msg);
}

// The step's metrics (TRL's names where one exists; doc/formats.md): a JSON
// line into pending_metrics, written out by the publish that commits the step,
// and a line on stderr. Read before feed_commit releases the shards the
// reward component names live in; commits the step's groups.
static int step_metrics(Trainer *t, Step *st, PailErr *err) {
    const StepStats *ss = &st->ss;
    const GrpoLossStats *ls = &st->ls;
    const AdvantageStats *ast = &st->ast;
    int ngroups = st->ngroups, N = st->N;
    double secs = time_mono_s() - st->t0;
    double rmean = ss->completions ? ss->reward_sum / (double)ss->completions : 0;
    double rstd = ss->completions > 1 ? sqrt(fmax(0, (ss->reward_sq - ss->reward_sum * rmean) / (double)(ss->completions - 1))) : 0;
    double tok = (double)ls->tokens, kl = ls->tokens ? ls->kl_sum / tok : 0.0;
    json_t *mj = json_object();
    jint(mj, "step", t->step);
    jint(mj, "version", t->version);
    jnum(mj, "reward", rmean);
    jnum(mj, "reward_std", rstd);
    jnum(mj, "frac_reward_zero_std", ast->groups ? (double)ast->zero_spread_groups / (double)ast->groups : 0.0);
    jnum(mj, "advantage_mean", ast->adv_mean);
    jnum(mj, "advantage_std", ast->adv_std);
    jnum(mj, "advantage_min", ast->adv_min);
    jnum(mj, "advantage_max", ast->adv_max);
    jnum(mj, "loss", ls->loss);
    jnum(mj, "ratio_mean", ls->tokens ? ls->ratio_sum / tok : 1.0);
    jnum(mj, "ratio_min", ls->tokens ? ls->ratio_min : 1.0);
    jnum(mj, "ratio_max", ls->tokens ? ls->ratio_max : 1.0);
    jnum(mj, "clip_ratio/low_mean", ls->tokens ? (double)ls->clipped_low / tok : 0.0);
    jnum(mj, "clip_ratio/high_mean", ls->tokens ? (double)ls->clipped_high / tok : 0.0);
    jnum(mj, "kl", kl);
    jnum(mj, "entropy", ss->ent_n ? ss->ent_sum / (double)ss->ent_n : NAN);  // null: nothing trained
    jnum(mj, "completions/mean_length", N ? ss->len_sum / N : 0.0);
    jnum(mj, "completions/mean_trained_tokens", N ? ss->trained_len_sum / N : 0.0);
    jnum(mj, "completions/mean_turns", N ? ss->turns_sum / N : 0.0);
    jint(mj, "completions/truncated", ss->truncated);
    jint(mj, "completions/too_long", ss->too_long);
    jint(mj, "num_tokens", ss->tokens);
    jint(mj, "completions/zero_advantage_skipped", st->zero_adv_skipped);
    jint(mj, "completions/segments", st->segments);
    jint(mj, "invalid_rewards", ast->invalid);
    jnum(mj, "tokens_per_second", secs > 0 ? (double)ss->tokens / secs : 0.0);
    jnum(mj, "staleness_mean", ngroups ? ss->staleness_sum / ngroups : 0.0);
    jnum(mj, "staleness_max", ss->staleness_max);
    jnum(mj, "wait_seconds", st->waited);
    jint(mj, "shards_consumed", t->feed.stats.consumed);
    jint(mj, "shards_dropped", t->feed.stats.dropped);
    int64_t seen = t->feed.stats.consumed + t->feed.stats.dropped;  // the share of shards lost as too stale
    jnum(mj, "shards_dropped_fraction", seen ? (double)t->feed.stats.dropped / (double)seen : 0.0);
    jint(mj, "shards_rejected", t->feed.stats.rejected);
    jint(mj, "steps_skipped", t->skipped_steps);
    jint(mj, "groups", ngroups);
    if (t->cfg->dynamic_sampling) {  // what the policy's samples scored, the dropped groups too
        double n = (double)ss->completions + (double)t->flat_n;
        jint(mj, "groups_filtered", t->flat_groups);
        jint(mj, "groups_filtered_total", t->flat_total);
        jnum(mj, "reward_sampled", n > 0 ? (ss->reward_sum + t->flat_reward_sum) / n : 0.0);
    }
    jnum(mj, "learning_rate", st->lr);
    jnum(mj, "grad_norm", sqrt(st->sumsq));
    jnum(mj, "step_seconds", secs);
    jint(mj, "time", time_unix_s());
    for (int64_t q = 0; q < st->K && q < SHARD_MAX_COMPONENTS; q++) {
        char name[160];
        snprintf(name, sizeof name, "rewards/%s/mean", t->refs[0].s->component_names[q]);
        jnum(mj, name, ss->comp_n ? ss->comp_sum[q] / (double)ss->comp_n : 0);
    }
    if (feed_commit(&t->feed, t->refs, ngroups, t->step) < 0)
        return err_set(err, PAIL_ERR_NOMEM, "step %lld: out of memory for the consumption record", (long long)t->step);
    char flat[48] = "";
    if (t->cfg->dynamic_sampling) snprintf(flat, sizeof flat, " | %lld flat groups dropped", (long long)t->flat_groups);
    fprintf(stderr, "step %lld v%lld | reward %.3f | loss %+.4f | kl %.4f | %.0f tok/s | wait %.1f s | stale %.1f/%.0f%s\n",
            (long long)t->step, (long long)t->version, rmean, ls->loss, kl, secs > 0 ? (double)ss->tokens / secs : 0.0,
            st->waited, ngroups ? ss->staleness_sum / ngroups : 0.0, ss->staleness_max, flat);
    signal_check(t, ast->groups ? (double)ast->zero_spread_groups / (double)ast->groups : 0.0, ast->groups);
    // The line waits in pending_metrics for the publish that commits this step.
    char *text = json_dumps(mj, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(mj);
    if (!text || buf_append(&t->pending_metrics, text, strlen(text)) < 0 || buf_append(&t->pending_metrics, "\n", 1) < 0) {
        free(text);
        return err_set(err, PAIL_ERR_NOMEM, "step %lld: out of memory for its metrics", (long long)t->step);
    }
    free(text);
    return 0;
}

// One optimizer step on the ngroups groups in t->refs: items, micro-batches,
// update, metrics; then the publish when one is due, and progress.json.
static int train_step(Trainer *t, int ngroups, double waited, volatile sig_atomic_t *stop, PailErr *err) {
    const TrainerConfig *c = t->cfg;
    Step st = {.ngroups = ngroups, .N = ngroups * t->G, .t0 = time_mono_s(), .waited = waited};
    step_items(t, &st);  // the gradients are zero: since the load, or the last step
    for (int k = 0; k < st.n_items;) {
        if (!t->mask[k]) { k++; continue; }
        if (micro_batch(t, &st, &k, err) < 0) return -1;
        if (stop && *stop > 1) return err_set(err, PAIL_ERR_INTERRUPTED, "stopped mid-step");
    }
    if (c->dump_grads && !t->grads_dumped && dump_grads(t, err) < 0) return -1;
    int up = step_update(t, &st, err);
    if (up < 0) return -1;
    if (up) {  // skipped: its groups are used up all the same
        if (feed_commit(&t->feed, t->refs, ngroups, t->step + 1) < 0)
            return err_set(err, PAIL_ERR_NOMEM, "step %lld: out of memory for the consumption record",
                           (long long)t->step + 1);
        return 0;
    }
    if (step_metrics(t, &st, err) < 0) return -1;
    int rc = 0;
    if (t->step - t->published_step >= c->publish_every) rc = publish(t, err);
    PailErr merr = {0};
    if (rc == 0 && write_progress(t, false, &merr) < 0) log_warn("progress.json: %s", merr.msg);
    return rc;
}

// --- setup ----------------------------------------------------------------------

// The trainer's host buffers, pieces of one block (sizes from the LoRA
// layout, the token budget and the step's groups); run twice, see core/mem.h.
static void plan_buffers(Trainer *t, MemPlan *p) {
    const TrainerConfig *c = t->cfg;
    size_t n = (size_t)t->lay.n_params, T = (size_t)c->token_budget;
    // Items: a step's N completions and up to N further segments of its episodes.
    size_t N = 2 * (size_t)c->groups_per_step * (size_t)c->group_size, S = T < N ? T : N;
    if (c->backend && !c->backend->host_memory) {  // the publish's host copies of params and moments
        t->h_params = mem_plan_take(p, n * sizeof(float));
        t->h_m = mem_plan_take(p, n * sizeof(float));
        t->h_v = mem_plan_take(p, n * sizeof(float));
    }
    pack_plan(&t->row, p, (int)T, (int)S);
    float **per_row[] = {&t->logp, &t->ent, &t->ref, &t->dlogp, &t->new_c, &t->old_c, &t->ref_c, &t->d_c};
    for (size_t i = 0; i < sizeof per_row / sizeof *per_row; i++) *per_row[i] = mem_plan_take(p, T * sizeof(float));
    t->adv_c = mem_plan_take(p, S * sizeof(float));
    t->mask_c = mem_plan_take(p, S);
    t->refs = mem_plan_take(p, (size_t)c->groups_per_step * sizeof *t->refs);
    t->items = mem_plan_take(p, N * sizeof *t->items);
    t->rewards = mem_plan_take(p, N * sizeof(float));
    t->adv = mem_plan_take(p, N * sizeof(float));
    t->valid = mem_plan_take(p, N);
    t->mask = mem_plan_take(p, N);
}

size_t trainer_buffers_bytes(const TrainerConfig *c, int64_t n_params) {
    Trainer t = {.cfg = c, .lay = {.n_params = n_params}};
    MemPlan dry = {0};
    plan_buffers(&t, &dry);
    return dry.used;
}

int trainer_memplan(const TrainerConfig *c, MemoryPlan *mp, PailErr *err) {
    ModelConfig mc;
    if (model_config_load(&mc, c->model_dir, err) < 0) return -1;
    LoraConfig lc = {.rank = c->lora_rank, .alpha = c->lora_alpha, .rslora = c->rslora, .targets = c->lora_targets};
    LoraLayout lay = {0};
    if (lora_layout_build(&lay, &mc, &lc, err) < 0) return -1;
    // the trainer's own: the adapter state (trainable.h) and its host block (step arrays)
    size_t own = trainable_bytes((size_t)lay.n_params, true) + trainer_buffers_bytes(c, lay.n_params);
    lora_layout_free(&lay);
    Backend *be = c->backend ? c->backend : backend_cpu();
    char wdesc[MODEL_DTYPE_DESC];
    size_t wbytes = 0;
    if (dtype_plan(c->model_dir, c->weights_dtype, wdesc, &wbytes, err) < 0) return -1;
    MemoryPlanSpec spec = {.role = MEMPLAN_TRAIN, .weights_dtype = wdesc, .weights_bytes = wbytes,
                           .lora_rank = c->lora_rank,
                           .lora_targets = c->lora_targets, .token_budget = c->token_budget,
                           .recompute = c->recompute, .groups_per_step = (int)c->groups_per_step,
                           .group_size = c->group_size};
    if (memplan_build(mp, &mc, &spec, be->desc, err) < 0) return -1;
    memplan_set_own(mp, own);
    return 0;
}

// The memory plan from the config alone, printed and checked before the
// weights or anything else is allocated.
static int plan_check(Trainer *t, const TrainerConfig *c, PailErr *err) {
    if (trainer_memplan(c, &t->mp, err) < 0) return -1;
    memplan_print(stderr, &t->mp, "grpo-train");
    return memplan_check(&t->mp, c->max_memory, err);
}

// --replay-record: the groups the source run's trainer committed, in order,
// from the chain of its states (newest back to v0 through record_parent).
static int replay_record_load(Trainer *t, PailErr *err) {
    long v;
    if (versions_latest(t->src, &SERIES_STATES, &v, err) < 0) return err_wrap(err, "--replay-record");
    if (v < 0)
        return err_set(err, PAIL_ERR_INVALID, "--replay-record: %s holds no trainer state", store_url(t->src));
    FeedRecord *all = NULL;
    int n = 0, rc = -1, states = 0;
    while (v >= 0) {
        char key[128];
        version_key(&SERIES_STATES, v, key, sizeof key);
        TrainerState s;
        int r = state_load(t, t->src, key, &s, err);
        if (r < 0) {
            err_wrap(err, "--replay-record");
            goto out;
        }
        if (s.parent == -2 || s.parent >= v) {
            err_set(err, PAIL_ERR_INVALID, "--replay-record: %s %s", key, s.parent == -2 ?
                    "has no consumption record (written by an older pail)" : "names a later state as its parent");
            state_free(&s);
            goto out;
        }
        FeedRecord *p = realloc(all, (size_t)(n + s.rec_n + 1) * sizeof *p);
        if (!p) {
            state_free(&s);
            err_set(err, PAIL_ERR_NOMEM, "--replay-record: out of memory");
            goto out;
        }
        all = p;
        memmove(all + s.rec_n, all, (size_t)n * sizeof *all);  // older states go first
        if (s.rec_n) memcpy(all, s.rec, (size_t)s.rec_n * sizeof *all);  // a first state has none (NULL)
        n += s.rec_n;
        v = (long)s.parent;
        states++;
        state_free(&s);
    }
    int64_t groups = 0;
    for (int i = 0; i < n; i++) groups += all[i].count;
    rc = feed_replay_record(&t->feed, all, n, err);
    if (rc == 0)
        log_info("--replay-record: %lld groups in %d runs from a chain of %d trainer states of %s", (long long)groups,
                 n, states, store_url(t->src));
out:
    free(all);
    return rc;
}

static int setup(Trainer *t, TrainerConfig *c, PailErr *err) {
    t->cfg = c;
    t->G = c->group_size;
    // The run's store first: a wrong URL or credentials are said before the plan and the weights.
    if (store_open(&t->st, c->run_url, &c->store, err) < 0) return -1;
    if (c->replay_url && store_open(&t->src, c->replay_url, &c->store, err) < 0) return -1;
    json_t *m = NULL;  // read once: credentials, the bucket (none yet: a new run; unreachable: start() retries)
    if (run_manifest_read(t->st, &m, err) < 0 && err->code != PAIL_ERR_NOT_FOUND && err->code != PAIL_ERR_NETWORK)
        return err_wrap(err, "--run %s", c->run_url);
    json_decref(m);
    err_clear(err);
    if (c->token_budget == 0 && train_budget_choose(c, err) < 0) return -1;  // --token-budget auto
    if (plan_check(t, c, err) < 0) return -1;
    if (model_weights_load_as(&t->w, c->model_dir, c->weights_dtype, err) < 0) return -1;
    dtype_log_weights(&t->w);
    Backend *be = c->backend ? c->backend : backend_cpu();
    char tj[4200];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", c->model_dir);
    if (access(tj, R_OK) == 0) {
        if (sha256_file_hex(tj, t->tok_sha, err) < 0) return -1;
    } else {
        t->tok_sha[0] = 0;
    }
    LoraConfig lc = {.rank = c->lora_rank, .alpha = c->lora_alpha, .rslora = c->rslora, .targets = c->lora_targets};
    if (lora_layout_build(&t->lay, &t->w.cfg, &lc, err) < 0) return -1;
    MemPlan dry = {0};
    plan_buffers(t, &dry);
    if (!(t->block = mem_calloc_big(dry.used)))
        return err_set(err, PAIL_ERR_NOMEM, "trainer: cannot allocate %zu MiB for %d groups of %d and a token "
                       "budget of %d", dry.used >> 20, (int)c->groups_per_step, c->group_size, c->token_budget);
    t->block_bytes = dry.used;
    MemPlan real = {t->block, 0};
    plan_buffers(t, &real);
    TransformerPlan plan = {.max_tokens = c->token_budget, .backward = true, .recompute = c->recompute,
                            .lora_rank = t->lay.cfg.rank, .backend = be};
    // On the device: the adapter state, then the model (a shortage says the plan's sizes).
    if (trainable_open(&t->ts, be, (size_t)t->lay.n_params, true, NULL, err) < 0 ||
        transformer_init(&t->tf, &t->w, &plan, err) < 0)
        return err->code == PAIL_ERR_NOMEM ? memplan_oom(&t->mp, err) : -1;
    if (be->host_memory) {
        t->h_params = trainable_host_params(t->ts);
        t->h_m = trainable_host_m(t->ts);
        t->h_v = trainable_host_v(t->ts);
    }
    if (transformer_set_lora(t->tf, &t->lay, trainable_params(t->ts), err) < 0) return -1;
    FeedConfig fc = {.base_sha256 = t->w.base_sha256, .tokenizer_sha256 = t->tok_sha, .vocab = t->w.cfg.vocab_size,
                     .group_size = c->group_size, .max_staleness = c->max_staleness, .replay = c->replay_url != NULL,
                     .late_grace_s = c->late_grace, .late_every_s = 30};
    feed_init(&t->feed, c->replay_url ? t->src : t->st, t->st, &fc);
    if (c->replay_record && replay_record_load(t, err) < 0) return -1;
    t->state_parent = -1;
    rng_seed(&t->rng, (uint64_t)c->seed, 0x7261696e);
    log_info("model %s: %zu parameters, base_sha256 %.16s..., LoRA rank %d: %lld trainable; activations %zu MiB, "
             "trainer buffers %zu MiB", c->model_dir, t->w.num_params, t->w.base_sha256, t->lay.cfg.rank,
             (long long)t->lay.n_params, transformer_bytes(t->tf) >> 20, t->block_bytes >> 20);
    return 0;
}

static void teardown(Trainer *t) {
    feed_free(&t->feed);
    transformer_free(t->tf);
    trainable_close(t->ts);
    model_weights_free(&t->w);
    lora_layout_free(&t->lay);
    store_close(t->st);
    store_close(t->src);
    free(t->block);
    if (t->metrics) fclose(t->metrics);
    buf_free(&t->pending_metrics);
}

// control/stop left in the run (by grpo-ctl stop for an earlier trainer) would
// stop this one at its first check: --clear-stop removes it; without it the
// trainer fails (exit 1) saying so and how to remove it, before anything is
// published. 0 to go on, -1 with err.
// A run done at fewer steps than this trainer's --steps is open again, said in
// progress.json before anything slow (state, first step), so that a worker
// starting now does not read the old "done" and end.
static void progress_reopen(Trainer *t) {
    Progress p;
    PailErr e = {0};
    if (progress_read(t->st, &p, &e) < 0) return;
    if (p.done && p.step < t->cfg->steps) {
        long final = p.final_version;
        p.done = false;
        p.final_version = -1;
        p.steps_target = t->cfg->steps;
        if (progress_write(t->st, &p, &e) < 0) log_warn("progress.json: %s", e.msg);
        else log_info("the run was done at step %ld (adapter v%08ld): open again up to --steps %ld", p.step, final,
                      t->cfg->steps);
    }
    progress_free(&p);
}

static int control_stop_check(Trainer *t, PailErr *err) {
    Buf b = {0};
    PailErr e = {0};
    if (store_get(t->st, RUN_KEY_STOP, &b, NULL, NULL, &e) < 0) {
        buf_free(&b);
        if (e.code == PAIL_ERR_NOT_FOUND) {
            progress_reopen(t);
            return 0;
        }
        *err = e;
        return err_wrap(err, "%s", RUN_KEY_STOP);
    }
    json_t *j = json_loadb((const char *)b.data, b.len, 0, NULL);
    buf_free(&b);
    const char *reason = json_string_value(json_object_get(j, "reason"));
    int64_t when = (int64_t)json_integer_value(json_object_get(j, "time"));
    char said[320] = "";
    if (reason || when > 0)
        snprintf(said, sizeof said, " (reason: %.200s; written %lld s ago)", reason ? reason : "?",
                 (long long)(time_unix_s() - when));
    json_decref(j);
    if (t->cfg->clear_stop) {
        progress_reopen(t);  // first: a worker may start as soon as control/stop is gone
        if (store_delete(t->st, RUN_KEY_STOP, err) < 0) return err_wrap(err, "--clear-stop: %s", RUN_KEY_STOP);
        log_info("--clear-stop: removed %s/%s%s", store_url(t->st), RUN_KEY_STOP, said);
        return 0;
    }
    return err_set(err, PAIL_ERR_INVALID, "%s/%s is there%s: stopping before training; remove it with `grpo-ctl rm "
                   "%s/%s`, or start grpo-train with --clear-stop", store_url(t->st), RUN_KEY_STOP, said,
                   t->cfg->run_url, RUN_KEY_STOP);
}

// control/stop looked for after each step too (a HEAD, unless the watch found
// it during the step): a trainer holding shards for more steps would otherwise
// train them all before it next waits.
static bool stop_requested(Trainer *t, volatile sig_atomic_t *stop) {
    if (t->cfg->replay_url) return false;
    if (!stop_watch_found(t->watch)) {
        StoreStat ss;
        PailErr e = {0};
        if (*stop || store_head(t->st, RUN_KEY_STOP, &ss, &e) < 0) return false;
    }
    log_info("control/stop found after step %lld: stopping (publishing what was trained)", (long long)t->step);
    return true;
}

int trainer_run(const TrainerConfig *cfg, volatile sig_atomic_t *stop, PailErr *err) {
    Trainer t;
    memset(&t, 0, sizeof t);
    TrainerConfig c = *cfg;  // setup may choose its token_budget (budget.h)
    int rc = setup(&t, &c, err);
    if (rc == 0) rc = control_stop_check(&t, err);  // an earlier stop request: an error, nothing trained
    // From here control/stop is looked for by a thread of its own every 5 s
    // (stop_watch.h), whatever the trainer waits on: a step, a resume, a
    // request in retries. Replays do not stop for it.
    if (rc == 0 && stop && !cfg->replay_url) rc = stop_watch_open(&t.watch, c.run_url, &c.store, stop, 5, err);
    if (rc == 0) rc = start(&t, err);
    while (rc == 0 && t.step < cfg->steps && !(stop && *stop)) {
        int ngroups = 0;
        double waited = 0;
        if ((rc = gather(&t, stop, &ngroups, &waited, err)) < 0) break;
        if (ngroups < cfg->groups_per_step) {
            if (cfg->replay_url && !(stop && *stop))
                log_info("replay: no more shards (%d groups left over, not a full step)", ngroups);
            break;
        }
        rc = train_step(&t, ngroups, waited, stop, err);
        if (rc == 0 && t.step < cfg->steps && stop && stop_requested(&t, stop)) *stop = 1;
    }
    // Publish what was trained since the last version (preemption loses nothing),
    // with the late shards of the versions behind the window counted up to now.
    if (rc == 0 && t.step > t.published_step) {
        if (!cfg->replay_url && feed_refresh_all(&t.feed, t.version, err) < 0) {
            log_warn("listing rollouts before the last publish: %s (their late shards are counted by the next "
                     "trainer)", err->msg);
            *err = (PailErr){0};
        }
        rc = publish(&t, err);
    }
    if (rc == 0) {
        // Reaching --steps ends the run: workers see "done" and exit (a trainer
        // started again with more steps clears it at its next write). --steps 0
        // only publishes v0: the run stays open for the workers it prepares.
        bool done = !cfg->replay_url && cfg->steps > 0 && t.step >= cfg->steps;
        PailErr perr = {0};
        if (write_progress(&t, done, &perr) < 0) log_warn("progress.json: %s", perr.msg);
        else if (done) log_info("%s: done, final version v%08lld: workers exit when they see it", RUN_KEY_PROGRESS,
                                (long long)t.version);
        char flat[80] = "";
        if (cfg->dynamic_sampling)
            snprintf(flat, sizeof flat, "; groups without reward spread dropped %lld", (long long)t.flat_total);
        log_info("done: step %lld, adapter v%08lld; shards consumed %lld, dropped %lld, rejected %lld%s",
                 (long long)t.step, (long long)t.version, (long long)t.feed.stats.consumed,
                 (long long)t.feed.stats.dropped, (long long)t.feed.stats.rejected, flat);
    }
    stop_watch_close(t.watch);
    teardown(&t);
    return rc;
}
