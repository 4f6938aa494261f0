// grpo-ctl gc: retention for a run (src/store/retention.c). The staleness
// window comes from run.json's trainer settings unless given. Also removes
// the probe objects grpo-ctl doctor could not delete.
#include <stdio.h>
#include <stdlib.h>
#include "ctl/ctl.h"
#include "store/retention.h"
#include "store/runmeta.h"

int ctl_gc(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    long keep, stale;
    bool dry;
    Flag fl[CTL_STORE_NFLAGS + 3] = {
        {"keep-versions", FLAG_INT, &keep, NULL, 1, 100000000, "keep the newest N adapter versions (required)"},
        {"max-staleness", FLAG_INT, &stale, "-1", -1, 1000000, "also keep this window (-1: run.json's trainer setting)"},
        {"dry-run", FLAG_BOOL, &dry, "false", 1, 0, "count what would be deleted, delete nothing"},
    };
    ctl_store_flags(fl + 3, &sf);
    int n = CTL_STORE_NFLAGS + 3, npos = 0, rc;
    char **pos = NULL;
    keep = 0;
    const char *usage = "grpo-ctl gc RUN_URL --keep-versions N [--dry-run]";
    if ((rc = ctl_parse(usage, "Deletes adapters, trainer states and rollout versions older than the newest N\n"
                               "(never inside the staleness window), and the probe objects grpo-ctl doctor left.\n"
                               "Behind a relay it needs the operator key.",
                        fl, n, argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos != 1 || keep < 1) {
        fprintf(stderr, "%s: expected RUN_URL and --keep-versions N\nusage: %s\n", argv[0], usage);
        goto done;
    }
    rc = 1;
    PailErr err = {0};
    Store *st = NULL;
    StoreOptions so = ctl_store_options(&sf);
    if (store_open(&st, pos[0], &so, &err) < 0) goto fail;
    if (stale < 0) {
        RunInfo ri;
        if (runinfo_read(st, &ri, &err) < 0) goto fail;
        stale = ri.max_staleness;
        runinfo_free(&ri);
    }
    GcStats g;
    if (run_gc(st, keep, stale, dry, &g, &err) < 0) goto fail;
    if (g.cutoff <= 0)
        printf("nothing to delete: every version is among the newest %ld or inside the staleness window (%ld)\n", keep,
               stale);
    else
        printf("%s %lld adapters, %lld trainer states, %lld rollout shards (versions below v%08lld)\n",
               dry ? "would delete" : "deleted", (long long)g.adapters, (long long)g.states, (long long)g.shards,
               (long long)g.cutoff);
    int64_t probes = 0;
    if (run_gc_probes(st, dry, &probes, &err) < 0) goto fail;
    if (probes) printf("%s %lld probe object(s) grpo-ctl doctor left (doctor-probe-*, doctor-create-only-*)\n",
                       dry ? "would delete" : "deleted", (long long)probes);
    int cleaned = 0;
    if (!dry) {  // what killed writers left (file:// temp files over an hour old)
        if (store_clean_stale(st, 3600, &cleaned, &err) < 0) goto fail;
        if (cleaned) printf("removed %d stale temp file(s) of killed writers\n", cleaned);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "%s: %s\n", argv[0], err.msg);
    store_close(st);
done:
    free(pos);
    flags_free(fl, n);
    return rc;
}
