// The rollout worker's pacing (see pacing.h): the adapter version to use and
// the versions refused, the trainer's staleness window, back pressure, waiting
// for a newer version, and run.json's checks.
#include "rollout/pacing.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "core/timeutil.h"
#include "lora/lora.h"
#include "rollout/serve.h"
#include "rollout/worker_int.h"
#include "store/runmeta.h"
#include "store/versions.h"

void pacing_init(Pacing *p) {
    memset(p, 0, sizeof *p);
    p->run_staleness = RUN_DEFAULT_MAX_STALENESS;
    p->trainer_window = -1;  // unknown until back pressure reads progress.json (or run.json)
    p->waiting_after = -1;
}

void pacing_free(Pacing *p) {
    free(p->refused);
    memset(p, 0, sizeof *p);
}

// Loads adapter version v (verified, checked against the run's base). Returns 0,
// 1 when the adapter itself is bad (size or sha256 mismatch, not a pail adapter,
// another model's, non-finite weights: err says which), -1 for anything else
// (the store unreachable, the key gone, out of memory).
int pacing_adapter_load(Worker *w, long v, PailErr *err) {
    char key[128];
    version_key(&SERIES_ADAPTERS, v, key, sizeof key);
    Buf b = {0};
    double t0 = time_mono_s();
    if (versioned_get(w->st, key, &b, err) < 0) {
        buf_free(&b);
        return err->code == PAIL_ERR_INVALID ? 1 : -1;
    }
    LoraLayout lay;
    float *p;
    AdapterMeta meta;
    double t1 = time_mono_s(), mb = (double)b.len / 1e6;
    int rc = lora_adapter_read(b.data, b.len, key, &w->eng.w.cfg, &lay, &p, &meta, err);
    buf_free(&b);
    double t2 = time_mono_s();
    if (rc < 0) return err->code == PAIL_ERR_NOMEM ? -1 : 1;
    if (strcmp(meta.base_sha256, w->eng.w.base_sha256)) {
        free(p);
        lora_layout_free(&lay);
        err_set(err, PAIL_ERR_INVALID, "%s was trained on base %.12s..., this worker's --model is %.12s...", key,
                meta.base_sha256, w->eng.w.base_sha256);
        return 1;
    }
    w->version = v;
    if (w->cfg->serve) serve_set_version(w->eng.env, v);
    rc = engine_attach(&w->eng, &lay, p, err);
    free(p);
    if (rc < 0) return rc;
    double t3 = time_mono_s();
    // The fetch includes the sha256 check against the object's pail-sha256.
    log_info("adapter v%08ld loaded in %.1f s (%.0f MB, fetch %.1f s, parse %.1f s, attach %.1f s)", v, t3 - t0, mb,
             t1 - t0, t2 - t1, t3 - t2);
    w->loaded_at = t3;
    return 0;
}

bool pacing_adapter_refused(const Worker *w, long v) {
    for (int i = 0; i < w->pace.n_refused; i++)
        if (w->pace.refused[i] == v) return true;
    return false;
}

// Remembers a bad version (published objects never change, so it is never
// fetched again) and reports it in one line.
static void adapter_refuse(Worker *w, long v, const char *why) {
    log_warn("%s: adapter refused, not fetched again", why);
    snprintf(w->last_error, sizeof w->last_error, "%s", why);
    if (w->pace.n_refused == w->pace.cap_refused) {
        int nc = w->pace.cap_refused ? 2 * w->pace.cap_refused : 8;
        long *nr = realloc(w->pace.refused, (size_t)nc * sizeof *nr);
        if (!nr) return;  // it is fetched and refused again next time: slower, still right
        w->pace.refused = nr;
        w->pace.cap_refused = nc;
    }
    w->pace.refused[w->pace.n_refused++] = v;
}

// The newest adapter version in [lo, newest] (with every > 1: newest or a
// multiple of every) that verifies, trying newest first and skipping refused
// ones; loads it unless it is the one in use. *got = that version, or -1 when
// none in the range verifies. -1 with err on a store or memory failure.
int pacing_adapter_pick(Worker *w, long newest, long lo, long every, long *got, PailErr *err) {
    *got = -1;
    long *vs = NULL;
    int n = 0;
    bool listed = false;
    for (long v = newest; v >= 0 && v >= lo;) {
        if (!pacing_adapter_refused(w, v)) {
            if (v == w->version) { *got = v; break; }
            int rc = pacing_adapter_load(w, v, err);
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


// trainer/progress.json as the trainer last wrote it into *p (progress_free):
// true, or false when it is not there or cannot be read (said once per reason).
static bool progress_get(Worker *w, Progress *p) {
    PailErr e = {0};
    if (progress_read(w->st, p, &e) == 0) return true;
    if (e.code == PAIL_ERR_INVALID && strcmp(w->pace.progress_error, e.msg)) {
        log_warn("%s (pacing goes by run.json)", e.msg);
        snprintf(w->pace.progress_error, sizeof w->pace.progress_error, "%s", e.msg);
    }
    return false;
}

// A run already done when this worker started (a finished run about to be
// continued with more --steps, or a fixture for a worker's own shards) does
// not end it: the worker works on as before. Only a "done" that follows an
// open run (progress.json not done, or none yet) ends it.
RunState pacing_run_state(Worker *w, long *final_version) {
    Progress p;
    bool done = false;
    if (progress_get(w, &p)) {
        done = p.done;
        *final_version = p.final_version;
        progress_free(&p);
    }
    if (!done) {
        w->pace.seen_open = true;
        return RUN_OPEN;
    }
    if (w->pace.seen_open || w->pace.done_idle) return RUN_DONE;
    if (!w->pace.said_done && !w->cfg->eval) {  // the eval worker scores it up to its final version
        log_info("the run is done (final adapter v%08ld) as this worker starts: working on, for a trainer started "
                 "again with more --steps", *final_version);
        w->pace.said_done = true;
    }
    return RUN_DONE_BEFORE;
}

// The trainer's staleness window: trainer/progress.json's max_staleness (the
// running trainer's), else run.json's (the first trainer's settings).
long pacing_window(Worker *w) {
    long s = w->pace.run_staleness;
    Progress p;
    if (progress_get(w, &p)) {
        if (p.max_staleness >= 0) s = p.max_staleness;
        progress_free(&p);
    }
    return s;
}

// A finished shard of version v is still worth writing unless the trainer
// (progress.json, read now) has moved past v + max_staleness while it was
// generated (a worker frozen, cut off or retrying a long time): the trainer
// never lists that version again, so such a shard would be lost uncounted.
// *tv gets the trainer's version. An unreadable progress.json: write.
static bool shard_out_of_window(Worker *w, long v, long *tv, long *ts) {
    bool out = false;
    Progress p;
    if (progress_get(w, &p)) {
        if (p.version >= 0 && p.max_staleness >= 0) {
            *tv = p.version;
            *ts = p.max_staleness;
            out = v < *tv - *ts;
        }
        progress_free(&p);
    }
    return out;
}

// Nothing in [lo, newest] verifies: said once per newest version.
void pacing_say_waiting(Worker *w, long newest, long lo, long staleness) {
    if (w->pace.waiting_after == newest) return;
    w->pace.waiting_after = newest;
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
void pacing_pause_ms(Worker *w, int ms) {
    PailErr err = {0};
    if (w->cfg->serve && w->eng.eps) {
        if (episodes_serve_idle(w->eng.eps, ms, &err) < 0) log_warn("serving while waiting: %s", err.msg);
    } else {
        time_sleep_ms(ms);
    }
}

// Waits (10 s at most, then the loop looks again) for a version newer than
// after: the relay's long-poll, or polling with backoff (--serve: every 0.5 s,
// answering requests between). Returns 0 to go on, 1 when stopped, -1 with err.
int pacing_wait_newer(Worker *w, long after, volatile sig_atomic_t *stop, PailErr *err) {
    worker_heartbeat(w, "waiting");
    if (w->cfg->serve) {  // answering requests meanwhile: look for a version every 0.5 s
        for (int i = 0; i < 20; i++) {
            long newest = -1;
            PailErr lerr = {0};
            if (versions_latest(w->st, &SERIES_ADAPTERS, &newest, &lerr) == 0 && newest > after) return 0;
            if (stop && *stop) return 1;
            pacing_pause_ms(w, 500);
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

int pacing_check_manifest(Worker *w, volatile sig_atomic_t *stop, PailErr *err) {
    RunInfo ri;
    int64_t deadline = time_mono_ms() + (int64_t)(w->cfg->wait_timeout > 0 ? w->cfg->wait_timeout * 1000 : 1e15);
    while (runinfo_read(w->st, &ri, err) < 0) {
        if (err->code != PAIL_ERR_NOT_FOUND && err->code != PAIL_ERR_NETWORK) return -1;
        if (time_mono_ms() > deadline) return err_wrap(err, "waiting for the trainer to create the run");
        if (worker_stop_requested(w, stop)) return err_set(err, PAIL_ERR_INTERRUPTED, "stopped before the run started");
        pacing_pause_ms(w, 500);
    }
    int rc = 0;
    if (!ri.base_sha256[0] || strcmp(ri.base_sha256, w->eng.w.base_sha256))
        rc = err_set(err, PAIL_ERR_INVALID, "run.json: base_sha256 %.12s... (held as %s) is not this --model's "
                     "%.12s... (another base model, or another quantization of it?)",
                     ri.base_sha256[0] ? ri.base_sha256 : "(none)", ri.compute_dtype, w->eng.w.base_sha256);
    else if (ri.tokenizer_sha256[0] && strcmp(ri.tokenizer_sha256, w->tok_sha))
        rc = err_set(err, PAIL_ERR_INVALID, "run.json: tokenizer_sha256 %.12s... is not this model folder's %.12s...",
                     ri.tokenizer_sha256, w->tok_sha);
    else if (!w->cfg->eval && ri.group_size && ri.group_size != w->cfg->group_size)
        rc = err_set(err, PAIL_ERR_INVALID, "run.json: the trainer expects groups of %ld, --group-size is %d",
                     ri.group_size, w->cfg->group_size);
    // The trainer's compute dtype (run.json of a trainer from before --dtype has none: it held f32).
    const char *tdt = ri.compute_dtype;
    char mine[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(&w->eng.w, mine, sizeof mine);
    // One quantized base for every role: a worker on another quantization (or on
    // none) computes another model, which no importance weight corrects.
    bool quant = strchr(tdt, 'q') || strchr(mine, 'q');
    if (rc == 0 && strcmp(tdt, mine) && quant)
        rc = err_set(err, PAIL_ERR_INVALID, "run.json: the trainer's base is held as %s, this worker's as %s: every "
                     "role computes on the same quantized base (give the trainer's --quantize, or the same model "
                     "folder)", tdt, mine);
    else if (rc == 0 && strcmp(tdt, mine)) {
        if (w->cfg->strict_dtype)
            rc = err_set(err, PAIL_ERR_INVALID, "run.json: the trainer computes in %s, this worker holds its weights as %s "
                         "(--strict-dtype; give --dtype %s, or drop --strict-dtype)", tdt, mine,
                         dtype_parse(tdt, &(DType){0}) == 0 ? tdt : "f32");
        else
            log_warn("run.json: the trainer computes in %s, this worker holds its weights as %s: behaviour log-probs "
                     "differ from the trainer's by the rounding (importance weights correct it; --strict-dtype refuses)",
                     tdt, mine);
    }
    snprintf(w->run_id, sizeof w->run_id, "%s", ri.run_id);
    w->pace.run_staleness = ri.max_staleness;
    w->pace.trainer_window = w->pace.run_staleness;
    w->pace.run_gps = ri.groups_per_step;
    w->pace.run_publish_every = ri.publish_every;
    runinfo_free(&ri);
    return rc;
}

// Before a generated shard is written: 0 to write it; -1 (err: interrupted)
// when asked to drop the batch; 1 when the trainer moved past its version's
// window meanwhile (its prompts are drawn again, with a newer adapter).
int pacing_shard_wanted(Worker *w, volatile sig_atomic_t *stop, int64_t drawn_before, PailErr *err) {
    if (stop && *stop > 1) return err_set(err, PAIL_ERR_INTERRUPTED, "stopped: batch dropped");
    long tv, ts;
    if (!shard_out_of_window(w, w->version, &tv, &ts)) return 0;
    w->stale_unwritten++;
    log_warn("shard of adapter v%08ld not written (%ld so far): the trainer is at v%08ld and uses shards at most "
             "%ld versions old (--max-staleness); its prompts are drawn again", w->version, w->stale_unwritten, tv, ts);
    dataset_sampler_seek(&w->smp, drawn_before);
    return 1;
}


// Other workers that may have a shard in generation: heartbeats under
// workers/ written in the last ACTIVE_WORKER_S seconds (a worker writes one
// after each shard and while paused or waiting; one killed is counted until
// its heartbeat ages out: it only slows the pace). An eval worker writes no
// shards: its heartbeat (role "eval", or mode "eval" from an older pail) is
// not counted, or it would shrink every generating worker's room; nor is one
// that says it stopped, finished or failed.
#define ACTIVE_WORKER_S 120
bool pacing_heartbeat_generates(const char *json, size_t len) {
    json_t *j = json_loadb(json, len, 0, NULL);
    const char *role = json_string_value(json_object_get(j, "role"));
    const char *mode = json_string_value(json_object_get(j, "mode"));
    const char *state = json_string_value(json_object_get(j, "state")) ?: "";
    bool gen = !(role ? !strcmp(role, "eval") : mode && !strcmp(mode, "eval")) && strcmp(state, "stopped") &&
               strcmp(state, "finished") && strcmp(state, "failed");
    json_decref(j);
    return gen;
}

static const char *feed_sha(const json_t *hb, const char *k) {
    return json_string_value(json_object_get(json_object_get(hb, k), "sha256"));
}

static void feed_desc(const json_t *hb, const char *k, char *out, size_t cap) {
    const json_t *o = json_object_get(hb, k);
    const char *sha = feed_sha(hb, k) ?: "";
    const char *name = json_string_value(json_object_get(o, k[0] == 'd' ? "path" : "name")) ?: "?";
    snprintf(out, cap, "%.300s (sha256 %.12s..)", name, sha);
}

int pacing_feeds_differ(const json_t *mine, const json_t *other, char *why, size_t cap) {
    int n = 0;
    char a[400], b[400];
    if (why && cap) why[0] = 0;
    static const char *const sha_keys[] = {"dataset", "chat_template"};
    for (int i = 0; i < 2; i++) {
        const char *x = feed_sha(mine, sha_keys[i]), *y = feed_sha(other, sha_keys[i]);
        if (!x || !y || !strcmp(x, y)) continue;
        if (n++ == 0 && why) {
            feed_desc(other, sha_keys[i], a, sizeof a);
            feed_desc(mine, sha_keys[i], b, sizeof b);
            snprintf(why, cap, "%s %s where this worker has %s", i ? "chat template" : "dataset", a, b);
        }
    }
    json_t *rx = json_object_get(mine, "rewards"), *ry = json_object_get(other, "rewards");
    if (rx && ry && !json_equal(rx, ry) && n++ == 0 && why) {
        char *sx = json_dumps(rx, JSON_COMPACT | JSON_SORT_KEYS), *sy = json_dumps(ry, JSON_COMPACT | JSON_SORT_KEYS);
        snprintf(why, cap, "rewards %.300s where this worker has %.300s", sy ? sy : "?", sx ? sx : "?");
        free(sx);
        free(sy);
    }
    return n;
}

void pacing_compare_feeds(Worker *w) {
    StoreList l = {0};
    PailErr err = {0};
    char own[128];
    run_key_worker(own, sizeof own, w->worker_id);
    json_t *mine = json_object();
    if (!mine) return;
    worker_feeds(w, mine);
    if (store_list_all(w->st, "workers/", NULL, &l, &err) == 0)
        for (int i = 0; i < l.n; i++) {
            if (!strcmp(l.entries[i].key, own) || l.entries[i].mtime < (int64_t)time_unix_s() - ACTIVE_WORKER_S) continue;
            Buf b = {0};
            PailErr e = {0};
            json_t *hb = NULL;
            if (store_get(w->st, l.entries[i].key, &b, NULL, NULL, &e) == 0)
                hb = json_loadb((const char *)b.data, b.len, 0, NULL);
            buf_free(&b);
            char why[1024];
            char *text = hb ? json_dumps(hb, JSON_COMPACT) : NULL;
            bool gen = text && pacing_heartbeat_generates(text, strlen(text));
            free(text);
            if (hb && gen && pacing_feeds_differ(mine, hb, why, sizeof why) > 0)
                log_warn("worker %s of this run uses %s: the trainer mixes both into its steps (grpo-ctl status "
                         "shows every worker's)", json_string_value(json_object_get(hb, "worker")) ?: "?", why);
            json_decref(hb);
        }
    store_list_free(&l);
    json_decref(mine);
}

static long others_active(Worker *w) {
    StoreList l = {0};
    PailErr err = {0};
    char own[128];
    long n = 0;
    run_key_worker(own, sizeof own, w->worker_id);
    if (store_list_all(w->st, "workers/", NULL, &l, &err) == 0)
        for (int i = 0; i < l.n; i++) {
            if (!strcmp(l.entries[i].key, own) || l.entries[i].mtime < (int64_t)time_unix_s() - ACTIVE_WORKER_S) continue;
            Buf b = {0};
            PailErr e = {0};
            if (store_get(w->st, l.entries[i].key, &b, NULL, NULL, &e) < 0 ||
                pacing_heartbeat_generates((const char *)b.data, b.len))
                n++;  // unreadable: counted, as before
            buf_free(&b);
        }
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
bool pacing_back_pressure(Worker *w, volatile sig_atomic_t *stop) {
    long ahead = w->cfg->max_ahead, gsh = w->cfg->groups_per_shard;
    if (ahead == 0) return false;
    bool paused = false;
    for (int waited = 0;; waited++) {
        PailErr err = {0};
        long pending = 0, allowed = ahead, capacity = 0, others = 0;
        // The trainer's window and rate: progress.json, else (a trainer not yet
        // past its start) run.json's settings and the adapter in use.
        long cur = w->version, win = w->pace.run_staleness, gps = w->pace.run_gps;
        bool done_before = false;
        Progress p;
        bool have = progress_get(w, &p);
        if (have) {
            done_before = p.done && !w->pace.seen_open;
            if (!p.done) w->pace.seen_open = true;
            else if (w->pace.seen_open) {  // the run is over: nothing to pause for
                progress_free(&p);
                return paused;
            }
            cur = p.version;
            if (p.max_staleness >= 0) win = p.max_staleness;
            w->pace.trainer_window = win;
            if (p.groups_per_step > 0) gps = p.groups_per_step;  // else run.json's
        }
        // Auto needs the trainer's rate: without it (no progress.json nor
        // run.json groups-per-step, an older trainer) it does not pause.
        if ((have && ahead > 0) || (ahead < 0 && gps > 0 && cur >= 0)) {
            long need = (gps + gsh - 1) / gsh;
            if (ahead < 0) {  // in shards of this worker's size, this one and the others' in generation included
                // A version lasts publish_every steps: S of them and the rest of this one.
                capacity = (win * w->pace.run_publish_every + 1) * gps;
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
                char prefix[64];
                run_key_rollout_dir(prefix, sizeof prefix, v);
                StoreList l = {0};
                if (store_list_all(w->st, prefix, NULL, &l, &err) == 0)
                    pending += l.n - (have ? progress_used(&p, v) : 0);
                store_list_free(&l);
            }
        }
        if (have) progress_free(&p);
        if (pending <= allowed || worker_stop_requested(w, stop)) return paused;
        if (done_before) {  // a worker started on a done run: no trainer uses what waits, so it ends here
            log_info("the run is done and %ld of its shards wait unused: nothing more to generate for", pending);
            w->pace.done_idle = true;
            return true;
        }
        paused = true;
        if (waited % 10 == 0) {
            if (ahead < 0)
                log_info("pausing: the trainer has %ld shards (%ld groups) not yet consumed and %ld other workers may "
                         "be generating; it uses %ld groups before a new shard goes stale (--max-ahead auto)",
                         pending, pending * gsh, others, capacity);
            else
                log_info("pausing: the trainer has %ld shards not yet consumed (--max-ahead %ld)", pending, ahead);
        }
        if (time_mono_s() - w->last_heartbeat > 5) worker_heartbeat(w, "paused");
        pacing_pause_ms(w, waited < 20 ? 100 : 1000);  // fast trainers consume within a step: look again soon
    }
}

