// grpo-ctl status: one look at a run from its bucket alone: the trainer's
// step and version (with a bar toward --steps), its latest metrics and reward
// trend, live workers from their heartbeats, evaluations, and lag.
// --watch S redraws every S seconds (in place on a terminal).
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/timeutil.h"
#include "ctl/ctl.h"
#include "store/runlayout.h"
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

static int show(Store *st, const char *url, long target, FILE *o) {
    int64_t now = time_unix_s();
    char why[1200];
    json_t *man = get_json(st, RUN_KEY_MANIFEST), *prog = get_json_why(st, RUN_KEY_PROGRESS, why, sizeof why);
    if (!prog && why[0]) fprintf(stderr, "grpo-ctl status: warning: %s: %s (step and version below are from the "
                                 "adapters and metrics)\n", RUN_KEY_PROGRESS, why);
    if (!man) {
        fprintf(o, "run %s: no run.json yet (the trainer has not started)\n", url);
        json_decref(prog);
        return 1;
    }
    fprintf(o, "run %s  (%s, base %.12s..., LoRA rank %lld)\n", url,
            json_string_value(json_object_get(man, "run_id")) ?: "?",
            json_string_value(json_object_get(man, "base_sha256")) ?: "?",
            (long long)json_integer_value(json_object_get(json_object_get(man, "lora"), "rank")));
    long step = prog ? (long)num(prog, "step") : 0, version = prog ? (long)num(prog, "version") : -1;
    StoreList l = {0};
    PailErr err = {0};
    if (!prog) {  // no (readable) progress.json: the newest adapter says the version
        long av;
        if (versions_latest(st, &SERIES_ADAPTERS, &av, &err) == 0) version = av;
    }
    json_t *last = NULL;
    double trend[8];
    int nt = 0;
    if (store_list_all(st, "metrics/step-", NULL, &l, &err) == 0 && l.n > 0) {
        for (int i = l.n - 1; i >= 0 && nt < 8; i--) {
            json_t *m = get_json(st, l.entries[i].key);
            if (!m) continue;
            trend[nt++] = num(m, "reward");
            if (!last) {
                last = m;
                if (!prog) step = (long)num(m, "step");
            } else {
                json_decref(m);
            }
        }
    }
    char b[64] = "";
    if (target > 0) bar(b, sizeof b, (double)step / (double)target, 30);
    int64_t age = prog ? now - (int64_t)num(prog, "time") : -1;
    if (target > 0) fprintf(o, "trainer  step %ld/%ld %s v%ld", step, target, b, version);
    else fprintf(o, "trainer  step %ld  v%ld", step, version);
    if (last)
        fprintf(o, "  reward %.3f  loss %+.4f  kl %.4f  %.0f tok/s  wait %.1fs  staleness %.1f/%.0f", num(last, "reward"),
                num(last, "loss"), num(last, "kl"), num(last, "tokens_per_second"), num(last, "wait_seconds"),
                num(last, "staleness_mean"), num(last, "staleness_max"));
    if (age >= 0) fprintf(o, "  (%llds ago)", (long long)age);
    fprintf(o, "\n");
    if (nt > 1) {
        fprintf(o, "         reward trend (newest last):");
        for (int i = nt - 1; i >= 0; i--) fprintf(o, " %.2f", trend[i]);
        fprintf(o, "\n");
    }
    if (prog) {
        double used = num(prog, "consumed_shards"), dropped = num(prog, "dropped_shards");
        fprintf(o, "         shards consumed %lld, dropped %lld (%.1f%% as too stale), rejected %lld\n", (long long)used,
                (long long)dropped, used + dropped > 0 ? 100.0 * dropped / (used + dropped) : 0.0,
                (long long)num(prog, "rejected_shards"));
    }
    json_decref(last);
    store_list_reset(&l);
    if (store_list_all(st, "workers/", NULL, &l, &err) == 0) {
        for (int i = 0; i < l.n; i++) {
            json_t *w = get_json(st, l.entries[i].key);
            if (!w) continue;
            int64_t wage = now - (int64_t)num(w, "time");
            const char *state = json_string_value(json_object_get(w, "state"));
            fprintf(o, "%-8s %-14s v%-4lld %-10s %6.0f tok/s  %4lld shards  %s%llds ago%s%s\n",
                    strcmp(json_string_value(json_object_get(w, "mode")) ?: "", "eval") ? "worker" : "eval",
                    json_string_value(json_object_get(w, "worker")) ?: "?", (long long)num(w, "version"),
                    state ? state : "?", num(w, "tokens_per_second"), (long long)num(w, "shards_written"),
                    wage > 30 && strcmp(state ? state : "", "stopped") ? "LATE " : "", (long long)wage,
                    json_string_value(json_object_get(w, "last_error")) && *json_string_value(json_object_get(w, "last_error")) ? "  last error: " : "",
                    json_string_value(json_object_get(w, "last_error")) ?: "");
            json_decref(w);
        }
    }
    store_list_reset(&l);
    if (store_list_all(st, "eval/v", NULL, &l, &err) == 0 && l.n > 0) {
        json_t *first = get_json(st, l.entries[0].key), *newest = get_json(st, l.entries[l.n - 1].key);
        if (first && newest)
            fprintf(o, "eval     v%lld: accuracy %.1f%%   (v%lld: %.1f%%; %d evaluations)\n",
                    (long long)num(newest, "version"), 100 * num(newest, "accuracy"), (long long)num(first, "version"),
                    100 * num(first, "accuracy"), l.n);
        json_decref(first);
        json_decref(newest);
    }
    store_list_free(&l);
    json_decref(man);
    json_decref(prog);
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
