// grpo-ctl doctor: before a long run, checks what usually breaks, one line per
// check and a verdict: the endpoint and its TLS trust, the credentials and
// which run prefixes they may write and delete (probe keys), whether the store
// honours create-only puts, clock skew against the store, run.json against
// the model folder (base_sha256), and free disk.
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include "core/sha256.h"
#include "core/timeutil.h"
#include "ctl/ctl.h"
#include "model/weights.h"
#include "store/retention.h"
#include "store/runmeta.h"

typedef struct { int ok, warn, fail; } Tally;

static void line(Tally *t, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void line(Tally *t, int level, const char *fmt, ...) {
    static const char *tag[] = {"ok  ", "warn", "FAIL"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%s  %s\n", tag[level], msg);
    if (level == 0) t->ok++; else if (level == 1) t->warn++; else t->fail++;
}

int ctl_doctor(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    char *run = NULL, *model = NULL;
    double min_free;
    Flag fl[CTL_STORE_NFLAGS + 3] = {
        {"run", FLAG_STRING, &run, NULL, 1, 0, "the run's prefix URL (file:///abs/dir or s3://bucket/prefix)"},
        {"model", FLAG_STRING, &model, NULL, 1, 0, "the model folder to check against run.json"},
        {"min-free-gb", FLAG_DOUBLE, &min_free, "10", 0, 1e9, "warn below this much free disk"},
    };
    ctl_store_flags(fl + 3, &sf);
    int n = CTL_STORE_NFLAGS + 3, rc;
    for (int i = 3; i < n; i++)  // a preflight should answer quickly, not wait out an outage
        if (!strcmp(fl[i].name, "max-outage")) fl[i].def = "10";
    const char *usage = "grpo-ctl doctor --run URL [--model DIR]";
    if ((rc = ctl_parse(usage, "Checks a run's bucket, credentials, roles, create-only support, clock and model.", fl,
                        n, argc, argv, NULL, NULL)) >= 0)
        goto done;
    rc = 2;
    if (!run) {
        fprintf(stderr, "%s: --run is required\nusage: %s\n", argv[0], usage);
        goto done;
    }
    Tally t = {0};
    PailErr err = {0};
    Store *st = NULL;
    StoreOptions so = ctl_store_options(&sf);
    if (store_open(&st, run, &so, &err) < 0) {
        line(&t, 2, "store: %s", err.msg);
        goto verdict;
    }
    // Reachability, credentials and TLS trust: one listing.
    StoreList l = {0};
    StoreListOpts lo = {.prefix = "", .max_keys = 1};
    double t0 = time_mono_s();
    if (store_list(st, &lo, &l, &err) < 0) {
        line(&t, 2, "list %s: %s", run, err.msg);
        store_list_free(&l);
        goto verdict;
    }
    store_list_free(&l);
    const char *ep = sf.s.endpoint ? sf.s.endpoint : getenv("AWS_ENDPOINT_URL");
    line(&t, 0, "reachable: %s listed in %.0f ms%s%s%s", run, (time_mono_s() - t0) * 1000,
         ep ? " via " : "", ep ? ep : "", !strncmp(run, "s3://", 5) && (!ep || !strncmp(ep, "https", 5))
                                               ? " (TLS certificate verified)" : "");
    if (store_is_relay(st)) line(&t, 0, "the endpoint is a grpo-relay: workers will long-poll it for new versions");
    // Which run prefixes these credentials may write and delete.
    const char *const *prefixes = RUN_PREFIXES;
    size_t nprefixes = 0;
    while (prefixes[nprefixes]) nprefixes++;
    char rnd[65], probe[256];
    char seed[64];
    snprintf(seed, sizeof seed, "%lld-%d", (long long)time_mono_ms(), (int)getpid());
    sha256_hex(seed, strlen(seed), rnd);
    char writable[256] = "", readonly[256] = "", nodelete[256] = "";
    for (size_t i = 0; i < nprefixes; i++) {
        snprintf(probe, sizeof probe, "%s" RUN_PROBE_PROBE "%.12s", prefixes[i], rnd);
        PailErr perr = {0};
        if (store_put(st, probe, "probe", 5, NULL, &perr) < 0) {
            if (perr.code != PAIL_ERR_AUTH) { line(&t, 2, "write %s: %s", probe, perr.msg); continue; }
            strcat(readonly, prefixes[i]);
            strcat(readonly, " ");
            continue;
        }
        strcat(writable, prefixes[i]);
        strcat(writable, " ");
        if (store_delete(st, probe, &perr) < 0) {
            strcat(nodelete, prefixes[i]);
            strcat(nodelete, " ");
        }
    }
    const char *role = !*readonly && !*nodelete ? "operator (writes and deletes everything)"
                     : strstr(writable, "adapters/") ? "trainer" : strstr(writable, "rollouts/") ? "rollout"
                     : !*writable ? "reader" : "custom";
    line(&t, 0, "credentials: write %s| read-only %s| role looks like: %s", *writable ? writable : "nothing ",
         *readonly ? readonly : "none ", role);
    if (*nodelete)
        line(&t, 1, "could write but not delete probe keys under %s(left behind: " RUN_PROBE_PROBE "%.12s; grpo-ctl "
             "gc removes them with an operator key)", nodelete, rnd);
    // Create-only puts: a second If-None-Match: * put of the same key must fail.
    const char *co_prefix = strstr(writable, "rollouts/") ? "rollouts/" : strstr(writable, "adapters/") ? "adapters/"
                          : *writable ? prefixes[0] : NULL;
    if (co_prefix) {
        for (size_t i = 0; i < nprefixes; i++)
            if (strstr(writable, prefixes[i])) { co_prefix = prefixes[i]; break; }
        snprintf(probe, sizeof probe, "%s" RUN_PROBE_CREATE_ONLY "%.12s", co_prefix, rnd);
        StorePutOpts co = {.create_only = true};
        PailErr e1 = {0}, e2 = {0};
        int64_t before = time_unix_s();
        if (store_put(st, probe, "1", 1, &co, &e1) < 0) {
            line(&t, 2, "create-only put %s: %s", probe, e1.msg);
        } else {
            int second = store_put(st, probe, "2", 1, &co, &e2);
            if (second < 0 && e2.code == PAIL_ERR_EXISTS)
                line(&t, 0, "create-only puts are honoured (If-None-Match: *): two trainers cannot both publish a version");
            else
                line(&t, 2, "the store ignores create-only puts (If-None-Match: *): run one trainer only, and expect "
                     "no protection against a twin");
            StoreStat ss;
            if (store_head(st, probe, &ss, &err) == 0 && ss.mtime > 0) {
                int64_t after = time_unix_s(), skew = 0;
                if (ss.mtime < before - 1) skew = ss.mtime - before;
                else if (ss.mtime > after + 1) skew = ss.mtime - after;
                if (llabs(skew) > 300)
                    line(&t, 2, "clock skew %+llds against the store: SigV4 refuses requests beyond 15 minutes; fix NTP",
                         (long long)skew);
                else
                    line(&t, skew ? 1 : 0, "clock skew against the store: %+llds (object timestamps)", (long long)skew);
            }
            PailErr de = {0};
            if (store_delete(st, probe, &de) < 0)
                line(&t, 1, "could not delete %s (%s): grpo-ctl gc removes it with an operator key", probe, de.msg);
        }
    } else {
        line(&t, 1, "create-only and clock checks skipped: these credentials cannot write");
    }
    // run.json and the model.
    RunInfo man;
    PailErr merr = {0};
    bool have_man = runinfo_read(st, &man, &merr) == 0;
    if (!have_man) {
        line(&t, merr.code == PAIL_ERR_NOT_FOUND ? 1 : 2, "run.json: %s", merr.code == PAIL_ERR_NOT_FOUND
             ? "not there yet (the trainer writes it at its first start)" : merr.msg);
    } else {
        line(&t, 0, "run.json: run %s, base %.12s..., LoRA rank %d", man.run_id[0] ? man.run_id : "?",
             man.base_sha256[0] ? man.base_sha256 : "?", man.lora_rank);
    }
    if (model) {
        ModelWeights w;
        PailErr werr = {0};
        if (model_weights_load_as(&w, model, MODEL_DTYPE_AUTO, &werr) < 0) {  // as stored: the least memory
            line(&t, 2, "model %s: %s", model, werr.msg);
        } else {
            const char *base = have_man && man.base_sha256[0] ? man.base_sha256 : NULL;
            if (base && strcmp(base, w.base_sha256))
                line(&t, 2, "model %s: base_sha256 %.12s... is not the run's %.12s... (another base model?)", model,
                     w.base_sha256, base);
            else
                line(&t, 0, "model %s: %zu parameters, base_sha256 %.12s...%s", model, w.num_params, w.base_sha256,
                     base ? " matches run.json" : "");
            model_weights_free(&w);
        }
        struct statvfs vfs;
        if (statvfs(model, &vfs) == 0) {
            double gb = (double)vfs.f_bavail * vfs.f_frsize / 1e9;
            line(&t, gb < min_free ? 1 : 0, "free disk at %s: %.1f GB", model, gb);
        }
    }
    if (!strncmp(run, "file://", 7)) {
        struct statvfs vfs;
        if (statvfs(run + 7, &vfs) == 0) {
            double gb = (double)vfs.f_bavail * vfs.f_frsize / 1e9;
            line(&t, gb < min_free ? 1 : 0, "free disk at %s: %.1f GB", run + 7, gb);
        }
    }
    if (have_man) runinfo_free(&man);
verdict:
    store_close(st);
    printf("doctor: %s (%d ok, %d warnings, %d failures)\n", t.fail ? "NOT READY" : t.warn ? "ready, with warnings" : "ready",
           t.ok, t.warn, t.fail);
    rc = t.fail ? 1 : 0;
done:
    flags_free(fl, n);
    return rc;
}
