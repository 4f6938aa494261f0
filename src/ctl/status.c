// grpo-ctl status: one look at a run from its bucket alone: the trainer's
// step and version (with a bar toward --steps), its latest metrics (its
// log-probs' agreement with the workers' too) and reward trend, live workers
// from their heartbeats, evaluations, and lag.
// --watch S redraws every S seconds (in place on a terminal).
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/timeutil.h"
#include "ctl/ctl.h"
#include "grpo/signal_warn.h"
#include "store/runlayout.h"
#include "store/runmeta.h"
#include "store/versions.h"

// The JSON object at key, or NULL. why (when non-NULL) says why not: empty
// when the key does not exist, else what was wrong with it.
static json_t *get_json_why(Store *st, const char *key, char *why, size_t cap) {
    Buf b = {0};
    PailErr err = {0};
    json_t *j = NULL;
    json_error_t je;
    if (why) why[0] = 0;
    if (store_get(st, key, &b, NULL, NULL, &err) == 0) {
        j = json_loadb((char *)b.data, b.len, 0, &je);
        if (!j && why) snprintf(why, cap, "not valid JSON (%s at line %d)", je.text, je.line);
        else if (j && !json_is_object(j)) {
            if (why) snprintf(why, cap, "not a JSON object");
            json_decref(j);
            j = NULL;
        }
    } else if (why && err.code != PAIL_ERR_NOT_FOUND) {
        snprintf(why, cap, "%s", err.msg);
    }
    buf_free(&b);
    return j;
}

static json_t *get_json(Store *st, const char *key) { return get_json_why(st, key, NULL, 0); }

static double num(json_t *j, const char *k) { return json_number_value(json_object_get(j, k)); }

// The evaluations' line: the newest and the first one's mean reward, always,
// and accuracy with its rule where the evaluation defines it (an older eval
// worker wrote accuracy without a rule); where not, why not; the distinct
// completions, with a warning when they are all one text (a collapsed policy).
static void eval_line(FILE *o, json_t *first, json_t *newest, size_t n) {
    fprintf(o, "eval     v%lld: reward %.3f", (long long)num(newest, "version"), num(newest, "reward_mean"));
    json_t *rule = json_object_get(newest, "accuracy_rule");
    if (json_object_get(newest, "accuracy")) {
        fprintf(o, ", accuracy %.1f%%", 100 * num(newest, "accuracy"));
        if (json_is_string(rule)) fprintf(o, " (%s)", json_string_value(rule));
    }
    fprintf(o, "   (v%lld: reward %.3f", (long long)num(first, "version"), num(first, "reward_mean"));
    if (json_object_get(first, "accuracy")) fprintf(o, ", accuracy %.1f%%", 100 * num(first, "accuracy"));
    fprintf(o, "; %zu evaluations)\n", n);
    json_t *note = json_object_get(newest, "accuracy_note");
    if (!json_object_get(newest, "accuracy") && json_is_string(note)) fprintf(o, "         accuracy: %s\n", json_string_value(note));
    json_t *d = json_object_get(newest, "distinct_completions"), *c = json_object_get(newest, "completions");
    if (json_is_integer(d) && json_is_integer(c))
        fprintf(o, "         distinct completions: %lld of %lld%s\n", (long long)json_integer_value(d),
                (long long)json_integer_value(c),
                json_integer_value(d) == 1 && json_integer_value(c) > 1 ? "  (WARNING: every completion is the same text)" : "");
}

// The latest step's agreement of the trainer's log-probs with the workers' on
// the tokens the weights it held generated (behaviour/*, doc/formats.md); a
// step from an older trainer has no such fields, and nothing is said.
static void behaviour_line(FILE *o, json_t *m) {
    json_t *n = json_object_get(m, "behaviour/tokens");
    if (!json_is_integer(n)) return;
    if (json_integer_value(n) <= 0) {
        fprintf(o, "         log-probs vs workers: no staleness-0 token in step %lld\n", (long long)num(m, "step"));
        return;
    }
    static const char *const k[] = {"behaviour/logp_diff_max", "behaviour/logp_diff_mean", "behaviour/k3"};
    char v[3][24];
    for (int i = 0; i < 3; i++) {
        json_t *x = json_object_get(m, k[i]);
        if (json_is_number(x)) snprintf(v[i], sizeof v[i], "%.2e", json_number_value(x));
        else snprintf(v[i], sizeof v[i], "non-finite");
    }
    fprintf(o, "         log-probs vs workers (staleness 0, %lld tokens): |diff| max %s mean %s, k3 %s\n",
            (long long)json_integer_value(n), v[0], v[1], v[2]);
}

static void bar(char *out, size_t cap, double frac, int width) {
    if (frac < 0) frac = 0;
    if (frac > 1) frac = 1;
    int full = (int)(frac * width + 0.5);
    size_t k = 0;
    out[k++] = '[';
    for (int i = 0; i < width && k + 2 < cap; i++) out[k++] = i < full ? '#' : '.';
    out[k++] = ']';
    out[k] = 0;
}

// What feeds one generating worker (its heartbeat): compared across workers.
typedef struct {
    char id[80];
    char dataset[600], dataset_key[80];   // "a.jsonl (120 rows, sha256 ab12cd34ef56..)", its sha256
    char rewards[600];                     // the specs and their options, as one line (also the key)
    char chat[700], chat_key[80];
} Feed;

static void feed_of(json_t *w, Feed *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->id, sizeof f->id, "%s", json_string_value(json_object_get(w, "worker")) ?: "?");
    json_t *ds = json_object_get(w, "dataset");
    if (json_is_object(ds)) {
        const char *sha = json_string_value(json_object_get(ds, "sha256")) ?: "";
        snprintf(f->dataset, sizeof f->dataset, "%.400s (%lld rows, sha256 %.12s..)",
                 json_string_value(json_object_get(ds, "path")) ?: "?",
                 (long long)json_integer_value(json_object_get(ds, "rows")), sha);
        snprintf(f->dataset_key, sizeof f->dataset_key, "%s", sha);
    }
    json_t *rw = json_object_get(w, "rewards");
    if (json_is_object(rw)) {
        size_t k = 0;
        json_t *specs = json_object_get(rw, "specs"), *v;
        size_t i;
        json_array_foreach(specs, i, v) {
            if (k >= sizeof f->rewards) break;  // cut: snprintf returned what did not fit
            k += (size_t)snprintf(f->rewards + k, sizeof f->rewards - k, "%s%s", k ? " " : "",
                                  json_string_value(v) ?: "?");
        }
        static const char *const opts[] = {"answer_field", "answer_marker", "format_regex", "length_target", "cmd",
                                           "env", "serve"};
        for (size_t o = 0; o < sizeof opts / sizeof *opts && k < sizeof f->rewards; o++) {
            v = json_object_get(rw, opts[o]);
            if (!v) continue;
            char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            k += (size_t)snprintf(f->rewards + k, sizeof f->rewards - k, "%s%s=%.200s", k ? " " : "", opts[o],
                                  t ? t : "?");
            free(t);
        }
    }
    json_t *ct = json_object_get(w, "chat_template");
    if (json_is_object(ct)) {
        const char *sha = json_string_value(json_object_get(ct, "sha256")) ?: "";
        snprintf(f->chat, sizeof f->chat, "%.600s (sha256 %.12s..)", json_string_value(json_object_get(ct, "name")) ?: "?",
                 sha);
        snprintf(f->chat_key, sizeof f->chat_key, "%s", sha);
    }
}

// One warning per worker whose value (at offset key, shown as desc) differs
// from the most common one among the workers that record it.
static int feed_warn(FILE *o, const Feed *f, int n, const char *what, size_t key, size_t desc) {
    int warned = 0, best = -1, best_n = 0;
#define K(i) ((const char *)&f[i] + key)
#define D(i) ((const char *)&f[i] + desc)
    for (int i = 0; i < n; i++) {
        if (!*K(i)) continue;
        int c = 0;
        for (int j = 0; j < n; j++) c += !strcmp(K(i), K(j));
        if (c > best_n) best = i, best_n = c;
    }
    for (int i = 0; best >= 0 && i < n; i++) {
        if (!*K(i) || !strcmp(K(i), K(best))) continue;
        char ids[400] = "";
        size_t k = 0;
        for (int j = 0; j < n && k < sizeof ids; j++)
            if (!strcmp(K(j), K(best))) k += (size_t)snprintf(ids + k, sizeof ids - k, "%s%s", k ? ", " : "", f[j].id);
        fprintf(o, "WARNING: worker %s uses %s %s while %s use%s %s\n", f[i].id, what, D(i), ids,
                best_n == 1 ? "s" : "", D(best));
        warned++;
    }
#undef K
#undef D
    return warned;
}

// rc 1 when the run cannot be read (endpoint unreachable, credentials, a bad
// run.json) or has not started.
static int show(Store *st, const char *url, long target, FILE *o) {
    int64_t now = time_unix_s();
    RunInfo man;
    PailErr merr = {0};
    if (runinfo_read(st, &man, &merr) < 0) {
        if (merr.code == PAIL_ERR_NOT_FOUND)
            fprintf(o, "run %s: no run.json yet (the trainer has not started)\n", url);
        else if (merr.code == PAIL_ERR_NETWORK || merr.code == PAIL_ERR_AUTH || merr.code == PAIL_ERR_INTERRUPTED)
            fprintf(stderr, "grpo-ctl status: cannot reach %s: %s\n", url, merr.msg);
        else
            fprintf(stderr, "grpo-ctl status: %s: %s\n", url, merr.msg);
        return 1;
    }
    Progress prog;
    PailErr perr = {0};
    bool have_prog = progress_read(st, &prog, &perr) == 0;
    if (!have_prog && perr.code != PAIL_ERR_NOT_FOUND)
        fprintf(stderr, "grpo-ctl status: warning: %s (step and version below are from the adapters and metrics)\n",
                perr.msg);
    fprintf(o, "run %s  (%s, base %.12s..., LoRA rank %d)\n", url, man.run_id[0] ? man.run_id : "?",
            man.base_sha256[0] ? man.base_sha256 : "?", man.lora_rank);
    long step = have_prog ? prog.step : 0, version = have_prog ? prog.version : -1;
    StoreList l = {0};
    PailErr err = {0};
    if (!have_prog) {  // no (readable) progress.json: the newest adapter says the version
        long av;
        if (versions_latest(st, &SERIES_ADAPTERS, &av, &err) == 0) version = av;
    }
    json_t *last = NULL;
    double trend[8], flat[8];  // newest first: reward, share of groups without reward spread
    int nt = 0;
    if (store_list_all(st, "metrics/step-", NULL, &l, &err) == 0 && l.n > 0) {
        for (int i = l.n - 1; i >= 0 && nt < 8; i--) {
            json_t *m = get_json(st, l.entries[i].key);
            if (!m) continue;
            flat[nt] = signal_flat_fraction(num(m, "frac_reward_zero_std"), num(m, "groups"), num(m, "groups_filtered"));
            trend[nt++] = num(m, "reward");
            if (!last) {
                last = m;
                if (!have_prog) step = (long)num(m, "step");
            } else {
                json_decref(m);
            }
        }
    }
    char b[64] = "";
    if (target > 0) bar(b, sizeof b, (double)step / (double)target, 30);
    int64_t age = have_prog ? now - prog.time : -1;
    if (target > 0) fprintf(o, "trainer  step %ld/%ld %s v%ld", step, target, b, version);
    else fprintf(o, "trainer  step %ld  v%ld", step, version);
    if (last)
        fprintf(o, "  reward %.3f  loss %+.4f  kl %.4f  %.0f tok/s  wait %.1fs  staleness %.1f/%.0f", num(last, "reward"),
                num(last, "loss"), num(last, "kl"), num(last, "tokens_per_second"), num(last, "wait_seconds"),
                num(last, "staleness_mean"), num(last, "staleness_max"));
    if (age >= 0) fprintf(o, "  (%llds ago)", (long long)age);
    fprintf(o, "\n");
    if (last) behaviour_line(o, last);
    if (nt > 1) {
        fprintf(o, "         reward trend (newest last):");
        for (int i = nt - 1; i >= 0; i--) fprintf(o, " %.2f", trend[i]);
        fprintf(o, "\n");
    }
    char signal[768];
    if (signal_flat_warning(flat, nt, signal, sizeof signal) >= SIGNAL_FLAT_STEPS) fprintf(o, "WARNING: %s\n", signal);
    if (last && json_object_get(last, "completions/clipped_ratio")) {  // the newest step's lengths and truncation
        double n = num(last, "completions/count"), ratio = num(last, "completions/clipped_ratio");
        fprintf(o, "         completions %.0f tokens mean, %.0f max; %.0f%% hit the budget of %.0f (clipped_ratio)\n",
                num(last, "completions/mean_length"), num(last, "completions/max_length"), 100 * ratio,
                num(last, "max_new_tokens"));
        if (clip_warning(floor(ratio * n + 0.5), n, num(last, "frac_reward_zero_std"),
                         num(last, "max_new_tokens"), signal, sizeof signal) > 0)
            fprintf(o, "WARNING: %s\n", signal);
    }
    if (have_prog) {
        double used = (double)prog.consumed_shards, dropped = (double)prog.dropped_shards;
        fprintf(o, "         shards consumed %lld, dropped %lld (%.1f%% as too stale), rejected %lld\n", (long long)used,
                (long long)dropped, used + dropped > 0 ? 100.0 * dropped / (used + dropped) : 0.0,
                (long long)prog.rejected_shards);
        if (prog.done)
            fprintf(o, "         done: the trainer reached its --steps; final adapter v%ld (workers exit when they "
                    "see it)\n", prog.final_version);
    }
    json_decref(last);
    store_list_reset(&l);
    Feed *feeds = NULL;
    int nf = 0;
    if (store_list_all(st, "workers/", NULL, &l, &err) == 0) {
        feeds = calloc((size_t)l.n + 1, sizeof *feeds);
        for (int i = 0; i < l.n; i++) {
            json_t *w = get_json(st, l.entries[i].key);
            if (!w) continue;
            int64_t wage = now - (int64_t)num(w, "time");
            const char *state = json_string_value(json_object_get(w, "state")) ?: "?";
            const char *role = json_string_value(json_object_get(w, "role"));
            bool eval = role ? !strcmp(role, "eval") : !strcmp(json_string_value(json_object_get(w, "mode")) ?: "", "eval");
            // Over: not late. The eval worker refreshes its heartbeat every few seconds while it
            // evaluates (busy_since: when that began), so a stale one is late; an older worker's
            // "evaluating" without busy_since was written once, at the start, and cannot be.
            bool evaluating = !strcmp(state, "evaluating"), over = !strcmp(state, "stopped") ||
                              !strcmp(state, "finished") || !strcmp(state, "failed");
            json_t *bs = json_object_get(w, "busy_since");
            bool refreshed = evaluating && json_is_integer(bs);
            int64_t busy = refreshed ? now - (int64_t)json_integer_value(bs) : wage;
            char st_s[40];
            if (evaluating) snprintf(st_s, sizeof st_s, "evaluating v%lld", (long long)num(w, "version"));
            else snprintf(st_s, sizeof st_s, "%.30s", state);
            const char *le = json_string_value(json_object_get(w, "last_error"));
            fprintf(o, "%-8s %-14s v%-4lld %-10s %6.0f tok/s  %4lld shards  %s%s%llds ago%s%s\n", eval ? "eval" : "worker",
                    json_string_value(json_object_get(w, "worker")) ?: "?", (long long)num(w, "version"), st_s,
                    num(w, "tokens_per_second"), (long long)num(w, "shards_written"),
                    wage > 30 && !over && (!evaluating || refreshed) ? "LATE " : "", evaluating ? "since " : "",
                    (long long)(evaluating ? busy : wage),
                    le && *le ? "  last error: " : "", le ?: "");
            if (refreshed && wage > 30)  // the evaluation stopped refreshing its heartbeat: hung, or its machine gone
                fprintf(o, "         its heartbeat is %llds old (refreshed every few seconds while it evaluates)\n",
                        (long long)wage);
            json_t *kp = json_object_get(w, "kv_pool");  // the group generator's KV block pool
            if (json_is_object(kp) && num(kp, "blocks") > 0)
                fprintf(o, "         KV pool %lld blocks (%.1f MiB), peak %lld (%.0f%%), %lld preemptions, %lld tokens "
                        "recomputed\n", (long long)num(kp, "blocks"), num(kp, "blocks") * num(kp, "block_bytes") / 1048576.0,
                        (long long)num(kp, "peak_blocks"), 100.0 * num(kp, "peak_blocks") / num(kp, "blocks"),
                        (long long)num(kp, "preemptions"), (long long)num(kp, "recomputed_tokens"));
            Feed f;
            feed_of(w, &f);
            if (f.dataset[0] || f.rewards[0] || f.chat[0])
                fprintf(o, "         %s%s%s%s%s%s\n", f.dataset[0] ? "dataset " : "", f.dataset,
                        f.rewards[0] ? (f.dataset[0] ? "; rewards " : "rewards ") : "", f.rewards,
                        f.chat[0] ? "; chat template " : "", f.chat);
            // The eval worker's dataset is its own; a failed worker feeds the run no more (it was
            // most often restarted with other flags, under a new id): neither is compared.
            if (!eval && feeds && strcmp(state, "failed")) feeds[nf++] = f;
            json_decref(w);
        }
    }
    if (nf > 1) {
        feed_warn(o, feeds, nf, "dataset", offsetof(Feed, dataset_key), offsetof(Feed, dataset));
        feed_warn(o, feeds, nf, "rewards", offsetof(Feed, rewards), offsetof(Feed, rewards));
        feed_warn(o, feeds, nf, "chat template", offsetof(Feed, chat_key), offsetof(Feed, chat));
    }
    free(feeds);
    store_list_reset(&l);
    if (store_list_all(st, "eval/v", NULL, &l, &err) == 0 && l.n > 0) {
        json_t *first = get_json(st, l.entries[0].key), *newest = get_json(st, l.entries[l.n - 1].key);
        if (first && newest) eval_line(o, first, newest, l.n);
        json_decref(first);
        json_decref(newest);
    }
    store_list_free(&l);
    runinfo_free(&man);
    if (have_prog) progress_free(&prog);
    return 0;
}

int ctl_status(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    long target;
    double watch;
    Flag fl[CTL_STORE_NFLAGS + 2] = {
        {"steps", FLAG_INT, &target, "0", 0, 100000000, "the run's step target, for the progress bar (0: none)"},
        {"watch", FLAG_DOUBLE, &watch, "0", 0, 86400, "redraw every S seconds until interrupted (0: once)"},
    };
    ctl_store_flags(fl + 2, &sf);
    int n = CTL_STORE_NFLAGS + 2, npos = 0, rc;
    for (int i = 2; i < n; i++)  // a look at a run answers quickly, not after an hour of retries
        if (!strcmp(fl[i].name, "max-outage")) fl[i].def = "10";
    char **pos = NULL;
    const char *usage = "grpo-ctl status RUN_URL [--steps N] [--watch S]";
    if ((rc = ctl_parse(usage, "Shows a run: trainer step and version, reward trend, live workers, evaluations.", fl, n,
                        argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos != 1) {
        fprintf(stderr, "%s: expected one RUN_URL\nusage: %s\n", argv[0], usage);
        goto done;
    }
    PailErr err = {0};
    Store *st = NULL;
    StoreOptions so = ctl_store_options(&sf);
    struct stat sb;
    if (!strncmp(pos[0], "file://", 7) && stat(pos[0] + 7, &sb) != 0) {  // opening it would create it
        fprintf(stderr, "%s: %s: no such run folder\n", argv[0], pos[0]);
        rc = 1;
        goto done;
    }
    if (store_open(&st, pos[0], &so, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        rc = 1;
        goto done;
    }
    bool tty = isatty(1);
    for (;;) {
        if (watch > 0 && tty) fputs("\033[H\033[J", stdout);
        rc = show(st, pos[0], target, stdout);
        fflush(stdout);
        if (watch <= 0) break;
        time_sleep_ms((int64_t)(watch * 1000));
        if (!tty) fputs("\n", stdout);
    }
    store_close(st);
done:
    free(pos);
    flags_free(fl, n);
    return rc;
}
