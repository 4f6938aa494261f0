// grpo-ctl tensorboard: a run's committed metrics (metrics/step-*.json) and
// held-out evaluations (eval/v*.json) as a TensorBoard event file, so the
// curves come from the bucket alone (a spot trainer's lost disk loses nothing)
// and can be made anywhere, any time. --watch follows a live run.
//
// Tags: train/<metric> (TRL's names, as in doc/formats.md; HF's TensorBoard
// callback adds the same train/ prefix) at the metric's step, and eval/<field>
// (eval/accuracy, eval/reward_mean, eval/components/<reward>, ...) at the step
// of the adapter version scored: the steps done when it was published, i.e.
// one less than the first metrics step whose version >= v (v0: step 0; the
// newest version, which no step has started from yet: the largest committed
// step; a run without metrics: the version number). Each run of the command
// writes one fresh file and then removes the earlier *.pail event files in
// --out, so a rerun never shows a step twice.
//
// Text: samples/completions at each metrics step, a table (TensorBoard's text
// plugin) of --samples completions as TRL's completions table: prompt,
// completion, reward, rewards/<component>, advantage, shard. They come from one
// shard per step: the newest (by its put time) of the newest adapter version
// the step may have drawn from (samples.h: version - staleness_max to version)
// that was put by the step's commit time, decoded as grpo-ctl samples does.
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/timeutil.h"
#include "ctl/ctl.h"
#include "ctl/samples.h"
#include "ctl/tfevents.h"
#include "store/runlayout.h"
#include "store/versions.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

typedef struct { long step, version; } StepVer;
typedef struct { long version; double time; json_t *j; } PendingEval;

typedef struct {
    Store *st;
    const char *prog, *url;
    char metrics_after[STORE_MAX_KEY + 1], evals_after[STORE_MAX_KEY + 1];
    StepVer *sv;  // every metrics step written: its step and version
    int nsv, capsv;
    long max_step;
    PendingEval *pend;  // evaluations whose step is not known yet (--watch)
    int npend, cappend;
    long nsteps, nevals, nlate;
    TfEvent ev;
    // the sample tables
    long nsamples;       // --samples: rows per table (0: none)
    json_t *man;         // run.json (NULL when there is none)
    Tokenizer *tok;      // NULL until the first table needs it, and when none was found
    bool tok_tried, refs_fresh;
    char toksrc[4200];
    ShardRefs refs;      // the rollouts/ listing, made again once per poll that has new steps
    LoadedShard cur;     // the shard of the last table (consecutive steps often share it)
    bool have_cur;
    long ntables, nnoshard;
} Tb;

static double num_or(json_t *j, const char *k, double dflt) {
    json_t *v = json_object_get(j, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static int add_scalar(Tb *t, const char *prefix, const char *name, json_t *v) {
    if (!json_is_number(v)) return 0;  // null (not finite), strings, objects: not scalars
    double x = json_number_value(v);
    if (!isfinite(x)) return 0;
    char tag[600];
    snprintf(tag, sizeof tag, "%s%s", prefix, name);
    PailErr err = {0};
    if (tfevents_event_scalar(&t->ev, tag, (float)x, &err) < 0) {
        fprintf(stderr, "%s: warning: %s: left out\n", t->prog, err.msg);
        return err.code == PAIL_ERR_NOMEM ? -1 : 0;
    }
    return 0;
}

// The object at key: 0, 1 when it is not a JSON object (warned, skipped), -1 on a store error.
static int get_object(Tb *t, const char *key, json_t **out, PailErr *err) {
    Buf b = {0};
    json_error_t je;
    *out = NULL;
    if (store_get(t->st, key, &b, NULL, NULL, err) < 0) {
        buf_free(&b);
        return -1;
    }
    *out = json_loadb((char *)b.data, b.len, 0, &je);
    buf_free(&b);
    if (json_is_object(*out)) return 0;
    fprintf(stderr, "%s: warning: %s: not a JSON object: left out\n", t->prog, key);
    json_decref(*out);
    *out = NULL;
    return 1;
}

// Adds the samples/completions table of the step whose metrics record is m to
// t->ev. A step without a shard gets none; a shard that cannot be read or
// decoded is warned about and left out: the scalars never depend on it.
static int add_table(Tb *t, json_t *m) {
    StepWindow w;
    if (t->nsamples == 0 || samples_step_window_json(t->man, m, &w) < 0) return 0;
    PailErr err = {0};
    if (!t->refs_fresh) {
        samples_refs_free(&t->refs);
        if (samples_list_shards(t->st, -1, &t->refs, &err) < 0) {
            fprintf(stderr, "%s: warning: sample tables: %s\n", t->prog, err.msg);
            return err.code == PAIL_ERR_NOMEM ? -1 : 0;
        }
        t->refs_fresh = true;
    }
    const ShardRef *pick = NULL;
    for (int i = 0; i < t->refs.n; i++) {
        const ShardRef *r = &t->refs.v[i];
        if (r->version < w.oldest || r->version > w.version || (w.time > 0 && (double)r->mtime > w.time)) continue;
        if (!pick || r->version > pick->version || (r->version == pick->version && r->mtime >= pick->mtime)) pick = r;
    }
    if (!pick) {
        t->nnoshard++;
        return 0;
    }
    if (!t->tok_tried) {
        t->tok_tried = true;
        if (samples_tokenizer_open(t->man, NULL, NULL, &t->tok, t->toksrc, sizeof t->toksrc, &err) < 0)
            fprintf(stderr, "%s: warning: no samples/completions tables: %s\n", t->prog, err.msg);
    }
    if (!t->tok) return 0;
    if (!t->have_cur || strcmp(t->cur.key, pick->key)) {
        if (t->have_cur) samples_shard_free(&t->cur);
        t->have_cur = false;
        if (samples_shard_load(t->st, pick->key, samples_scale(t->man), &t->cur, &err) < 0) {
            fprintf(stderr, "%s: warning: samples/completions: %s: left out\n", t->prog, err.msg);
            return err.code == PAIL_ERR_NOMEM ? -1 : 0;
        }
        t->have_cur = true;
    }
    const RolloutShard *s = &t->cur.s;
    if (samples_tokenizer_check(t->tok, t->toksrc, &t->cur, &err) < 0) {
        fprintf(stderr, "%s: warning: samples/completions: %s: left out\n", t->prog, err.msg);
        return 0;
    }
    int rows = (int)(s->N < t->nsamples ? s->N : t->nsamples), cols = 5 + (int)s->K, rc = 0;
    if (rows == 0) return 0;
    Buf *cell = calloc((size_t)(rows + 1) * (size_t)cols, sizeof *cell);
    const char **cells = calloc((size_t)(rows + 1) * (size_t)cols, sizeof *cells);
    if (!cell || !cells) rc = err_set(&err, PAIL_ERR_NOMEM, "out of memory");
    Buf text = {0};
    for (int c = 0; c < cols && rc == 0; c++) {  // the header row
        if (c == 0) rc = buf_printf(&cell[c], "prompt");
        else if (c == 1) rc = buf_printf(&cell[c], "completion");
        else if (c == 2) rc = buf_printf(&cell[c], "reward");
        else if (c < 3 + s->K) rc = buf_printf(&cell[c], "rewards/%s", s->component_names[c - 3]);
        else rc = buf_printf(&cell[c], c == cols - 2 ? "advantage" : "shard");
    }
    for (int r = 0; r < rows && rc == 0; r++) {
        Buf *row = cell + (size_t)(r + 1) * cols;
        int32_t g = s->group[r];
        const int32_t *ids[2] = {s->prompt_ids + s->prompt_offsets[g], s->completion_ids + s->completion_offsets[r]};
        size_t len[2] = {(size_t)(s->prompt_offsets[g + 1] - s->prompt_offsets[g]),
                         (size_t)(s->completion_offsets[r + 1] - s->completion_offsets[r])};
        for (int k = 0; k < 2 && rc == 0; k++) {
            buf_reset(&text);
            rc = samples_decode(t->tok, ids[k], len[k], &text, &err);
            if (rc == 0 && samples_visible(&row[k], text.data, text.len) < 0)
                rc = err_set(&err, PAIL_ERR_NOMEM, "out of memory");
        }
        bool valid = s->reward_valid[r];
        if (rc == 0) rc = valid ? buf_printf(&row[2], "%.4g", s->rewards[r]) : buf_printf(&row[2], "invalid");
        for (int64_t k = 0; k < s->K && rc == 0; k++)
            rc = valid ? buf_printf(&row[3 + k], "%.4g", s->reward_components[r * s->K + k]) : 0;
        if (rc == 0) rc = buf_printf(&row[cols - 2], "%+.4f", t->cur.adv[r]);
        if (rc == 0) rc = buf_printf(&row[cols - 1], "%s (v%lld, %s)", t->cur.key, (long long)s->adapter_version,
                                     s->worker_id);
        if (rc < 0 && !err.msg[0]) err_set(&err, PAIL_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; rc == 0 && i < (rows + 1) * cols; i++) cells[i] = cell[i].data ? (const char *)cell[i].data : "";
    if (rc == 0) rc = tfevents_event_text_table(&t->ev, "samples/completions", cells, rows + 1, cols, &err);
    if (rc == 0) t->ntables++;
    else fprintf(stderr, "%s: warning: samples/completions: %s: %s: left out\n", t->prog, t->cur.key, err.msg);
    for (int i = 0; cell && i < (rows + 1) * cols; i++) buf_free(&cell[i]);
    free(cell);
    free(cells);
    buf_free(&text);
    return rc < 0 && err.code == PAIL_ERR_NOMEM ? -1 : 0;
}

// The step of adapter version v, or -1 when not known yet (final: use the newest step).
static long version_step(const Tb *t, long v, bool final) {
    if (v == 0) return 0;
    long best = -1;
    for (int i = 0; i < t->nsv; i++)
        if (t->sv[i].version >= v && (best < 0 || t->sv[i].step < best)) best = t->sv[i].step;
    if (best > 0) return best - 1;
    if (!final) return -1;
    return t->nsv ? t->max_step : v;
}

static int write_eval(Tb *t, Buf *out, long step, double time, json_t *j, PailErr *err) {
    tfevents_event_begin(&t->ev, time, step);
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) {
        if (!strcmp(k, "version") || !strcmp(k, "time")) continue;
        if (json_is_object(v)) {
            char pre[300];
            snprintf(pre, sizeof pre, "eval/%.200s/", k);
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) if (add_scalar(t, pre, k2, v2) < 0) goto nomem;
        } else if (add_scalar(t, "eval/", k, v) < 0) {
            goto nomem;
        }
    }
    if (t->ev.nvalues == 0) return 0;
    t->nevals++;
    return tfevents_record(out, &t->ev, err);
nomem:
    return err_set(err, PAIL_ERR_NOMEM, "TensorBoard event: out of memory");
}

// Lists what is new since the last poll and appends its records to out.
// final: evaluations whose step is not derivable get the fallback step.
static int tb_poll(Tb *t, Buf *out, bool final, PailErr *err) {
    StoreList l = {0};
    int rc = 0;
    t->refs_fresh = false;
    if (store_list_all(t->st, "metrics/step-", t->metrics_after[0] ? t->metrics_after : NULL, &l, err) < 0) return -1;
    for (int i = 0; i < l.n && rc == 0; i++) {
        const char *key = l.entries[i].key;
        json_t *j;
        int g = get_object(t, key, &j, err);
        if (g < 0) { rc = -1; break; }
        snprintf(t->metrics_after, sizeof t->metrics_after, "%s", key);
        if (g > 0) continue;
        long step = (long)num_or(j, "step", -1), version = (long)num_or(j, "version", -1);
        if (step < 0) {
            fprintf(stderr, "%s: warning: %s: no step: left out\n", t->prog, key);
        } else if (t->nsv && step <= t->max_step) {
            // TensorBoard drops the later points of a tag when a step goes back.
            fprintf(stderr, "%s: warning: %s arrived after step %ld was written: left out (run without --watch "
                    "to include it)\n", t->prog, key, t->max_step);
            t->nlate++;
        } else {
            if (t->nsv == t->capsv) {
                int cap = t->capsv ? 2 * t->capsv : 256;
                StepVer *p = realloc(t->sv, (size_t)cap * sizeof *p);
                if (!p) { json_decref(j); rc = err_set(err, PAIL_ERR_NOMEM, "metrics: out of memory"); break; }
                t->sv = p;
                t->capsv = cap;
            }
            t->sv[t->nsv++] = (StepVer){step, version};
            t->max_step = step;
            tfevents_event_begin(&t->ev, num_or(j, "time", (double)time_unix_s()), step);
            const char *k;
            json_t *v;
            json_object_foreach(j, k, v) {
                if (strcmp(k, "step") && strcmp(k, "time") && add_scalar(t, "train/", k, v) < 0) {
                    rc = err_set(err, PAIL_ERR_NOMEM, "metrics: out of memory");
                    break;
                }
            }
            if (rc == 0 && add_table(t, j) < 0) rc = err_set(err, PAIL_ERR_NOMEM, "samples: out of memory");
            if (rc == 0 && t->ev.nvalues > 0) {
                rc = tfevents_record(out, &t->ev, err);
                t->nsteps++;
            }
        }
        json_decref(j);
    }
    store_list_reset(&l);
    if (rc == 0 && store_list_all(t->st, "eval/v", t->evals_after[0] ? t->evals_after : NULL, &l, err) < 0) rc = -1;
    for (int i = 0; rc == 0 && i < l.n; i++) {
        const char *key = l.entries[i].key;
        long v = version_parse(&SERIES_EVALS, key);
        if (v < 0) continue;
        json_t *j;
        int g = get_object(t, key, &j, err);
        if (g < 0) { rc = -1; break; }
        snprintf(t->evals_after, sizeof t->evals_after, "%s", key);
        if (g > 0) continue;
        if (t->npend == t->cappend) {
            int cap = t->cappend ? 2 * t->cappend : 64;
            PendingEval *p = realloc(t->pend, (size_t)cap * sizeof *p);
            if (!p) { json_decref(j); rc = err_set(err, PAIL_ERR_NOMEM, "evaluations: out of memory"); break; }
            t->pend = p;
            t->cappend = cap;
        }
        t->pend[t->npend++] = (PendingEval){v, num_or(j, "time", (double)time_unix_s()), j};
    }
    store_list_free(&l);
    int keep = 0;
    for (int i = 0; i < t->npend; i++) {
        long step = rc == 0 ? version_step(t, t->pend[i].version, final) : -1;
        if (step < 0) { t->pend[keep++] = t->pend[i]; continue; }
        rc = write_eval(t, out, step, t->pend[i].time, t->pend[i].j, err);
        json_decref(t->pend[i].j);
    }
    t->npend = keep;
    return rc;
}

// Removes the *.pail event files in dir other than keep (earlier runs of this command).
static void remove_older(const char *prog, const char *dir, const char *keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    size_t n = strlen(".pail");
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "events.out.tfevents.", 20) || len < n || strcmp(e->d_name + len - n, ".pail") ||
            !strcmp(e->d_name, keep))
            continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) == 0) fprintf(stderr, "%s: removed the earlier %s\n", prog, p);
        else fprintf(stderr, "%s: warning: %s: cannot remove: %s\n", prog, p, strerror(errno));
    }
    closedir(d);
}

static int write_out(FILE *f, const char *path, Buf *b, PailErr *err) {
    if (b->len && (fwrite(b->data, 1, b->len, f) != b->len || fflush(f) != 0))
        return err_set(err, PAIL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    buf_reset(b);
    return 0;
}

int ctl_tensorboard(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    char *outdir = NULL;
    bool watch = false;
    double interval;
    long nsamples;
    char *model = NULL, *tokfile = NULL;
    enum { NF = 6 };
    Flag fl[CTL_STORE_NFLAGS + NF] = {
        {"out", FLAG_STRING, &outdir, NULL, 1, 0, "the folder to write the event file in (created; point TensorBoard's --logdir at it)"},
        {"watch", FLAG_BOOL, &watch, "false", 1, 0, "follow a live run until control/stop or SIGINT/SIGTERM"},
        {"interval", FLAG_DOUBLE, &interval, "10", 0.05, 86400, "seconds between polls with --watch"},
        {"samples", FLAG_INT, &nsamples, "4", 0, 1000, "completions in each step's samples/completions text table (0: no tables)"},
        {"model", FLAG_STRING, &model, NULL, 1, 0, "model folder whose tokenizer.json decodes the tables (default: "
                                                   "run.json's base_model when it exists here)"},
        {"tokenizer", FLAG_STRING, &tokfile, NULL, 1, 0, "a tokenizer.json to decode the tables with (wins over --model)"},
    };
    ctl_store_flags(fl + NF, &sf);
    int n = CTL_STORE_NFLAGS + NF, npos = 0, rc;
    char **pos = NULL;
    const char *usage = "grpo-ctl tensorboard RUN_URL --out DIR [--watch] [--interval S] [--samples K] "
                        "[--model DIR | --tokenizer FILE]";
    if ((rc = ctl_parse(usage, "Writes a TensorBoard event file from the run's committed metrics (train/<metric> per "
                        "step), evaluations (eval/accuracy, ... per version, at the step of that adapter) and a table "
                        "of completions per step from the rollout shards (samples/completions, text).",
                        fl, n, argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos != 1 || !outdir || !*outdir) {
        fprintf(stderr, "%s: expected RUN_URL and --out DIR\nusage: %s\n", argv[0], usage);
        goto done;
    }
    rc = 1;
    PailErr err = {0};
    Tb t = {.prog = argv[0], .url = pos[0], .nsamples = nsamples};
    StoreOptions so = ctl_store_options(&sf);
    Buf out = {0};
    FILE *f = NULL;
    char path[4200] = "", name[400];
    if (store_open(&t.st, pos[0], &so, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    StoreStat ss;
    bool has_manifest = store_head(t.st, RUN_KEY_MANIFEST, &ss, &err) == 0;
    if (!has_manifest && err.code != PAIL_ERR_NOT_FOUND) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    if (has_manifest && nsamples > 0 && run_manifest_read(t.st, &t.man, &err) < 0)
        fprintf(stderr, "%s: warning: %s (the tables decode with --model / --tokenizer only)\n", argv[0], err.msg);
    if (nsamples > 0 && ((model && *model) || (tokfile && *tokfile))) {  // given: checked before anything is written
        t.tok_tried = true;
        if (samples_tokenizer_open(t.man, model, tokfile, &t.tok, t.toksrc, sizeof t.toksrc, &err) < 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err.msg);
            goto close;
        }
    }
    if (tfevents_record_version(&out, (double)time_unix_s(), &err) < 0 || tb_poll(&t, &out, !watch, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    if (t.nsteps == 0 && t.nevals == 0 && t.npend == 0 && (!watch || !has_manifest)) {
        if (!has_manifest)
            fprintf(stderr, "%s: %s: no run.json, metrics/step-*.json or eval/v*.json: not a run\n", argv[0], pos[0]);
        else
            fprintf(stderr, "%s: %s has no metrics/step-*.json or eval/v*.json yet (nothing written; --watch waits "
                    "for them)\n", argv[0], pos[0]);
        goto close;
    }
    if (fs_mkdirs(outdir, &err) < 0) {
        fprintf(stderr, "%s: --out %s: %s\n", argv[0], outdir, err.msg);
        goto close;
    }
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    for (char *p = host; *p; p++) if (*p == '/' || *p == ' ') *p = '_';
    snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.pail", (long long)time_unix_s(), host);
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    if (!(f = fopen(path, "wb"))) {
        fprintf(stderr, "%s: %s: cannot write: %s\n", argv[0], path, strerror(errno));
        goto close;
    }
    if (write_out(f, path, &out, &err) < 0) { fprintf(stderr, "%s: %s\n", argv[0], err.msg); goto close; }
    remove_older(argv[0], outdir, name);
    fprintf(stderr, "%s: wrote %s (%ld steps, %ld evaluations, %ld sample tables)\n", argv[0], path, t.nsteps,
            t.nevals, t.ntables);
    rc = 0;
    if (watch) {
        struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        fprintf(stderr, "%s: watching %s every %gs (until control/stop, Ctrl-C or SIGTERM)\n", argv[0], pos[0], interval);
        bool stopped = false;
        while (!g_stop && !stopped) {
            for (int64_t end = time_mono_ms() + (int64_t)(interval * 1000); !g_stop && time_mono_ms() < end;)
                time_sleep_ms(end - time_mono_ms() < 200 ? end - time_mono_ms() : 200);
            PailErr perr = {0};
            stopped = store_head(t.st, RUN_KEY_STOP, &ss, &perr) == 0;
            long s0 = t.nsteps, e0 = t.nevals;
            // one more poll after a stop: what the tools committed on their way out
            if (tb_poll(&t, &out, stopped || g_stop, &perr) < 0 || write_out(f, path, &out, &perr) < 0) {
                fprintf(stderr, "%s: warning: %s (retrying)\n", argv[0], perr.msg);
                continue;
            }
            if (t.nsteps != s0 || t.nevals != e0)
                fprintf(stderr, "%s: +%ld steps (to step %ld), +%ld evaluations, %ld sample tables\n", argv[0],
                        t.nsteps - s0, t.max_step, t.nevals - e0, t.ntables);
        }
        fprintf(stderr, "%s: %s: stopped; %s has %ld steps, %ld evaluations\n", argv[0],
                stopped ? "control/stop found" : "signal", path, t.nsteps, t.nevals);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
close:
    if (f && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "%s: %s: write failed: %s\n", argv[0], path, strerror(errno));
        rc = 1;
    }
    for (int i = 0; i < t.npend; i++) json_decref(t.pend[i].j);
    free(t.pend);
    free(t.sv);
    tfevents_event_free(&t.ev);
    if (t.have_cur) samples_shard_free(&t.cur);
    samples_refs_free(&t.refs);
    tokenizer_free(t.tok);
    json_decref(t.man);
    buf_free(&out);
    store_close(t.st);
done:
    free(pos);
    flags_free(fl, n);
    return rc;
}
