// Run retention (see retention.h).
#include "store/retention.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/runlayout.h"
#include "store/versions.h"

static int drop_series(Store *st, const VersionSeries *s, long cutoff, bool dry, int64_t *count, PailErr *err) {
    long *vs;
    int n;
    if (versions_list(st, s, &vs, &n, err) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (vs[i] >= cutoff) break;
        char key[128];
        version_key(s, vs[i], key, sizeof key);
        if (!dry && store_delete(st, key, err) < 0) rc = -1;
        else (*count)++;
    }
    free(vs);
    return rc;
}

int run_gc(Store *st, long keep, long max_staleness, bool dry_run, GcStats *g, PailErr *err) {
    memset(g, 0, sizeof *g);
    if (keep < 1) return err_set(err, PAIL_ERR_INVALID, "keep-versions %ld must be >= 1", keep);
    long newest;
    if (versions_latest(st, &SERIES_ADAPTERS, &newest, err) < 0) return -1;
    if (newest < 0) return 0;
    long cutoff = newest - keep + 1, window = newest - (max_staleness < 0 ? 0 : max_staleness);
    if (window < cutoff) cutoff = window;  // never inside the staleness window
    g->cutoff = cutoff;
    if (cutoff <= 0) return 0;
    // Rollouts first, then states, then adapters: a reader never finds an
    // adapter whose state or shards are gone while the adapter is still listed.
    StoreList l = {0};
    if (store_list_all(st, "rollouts/v", NULL, &l, err) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < l.n && rc == 0; i++) {
        long v, seq;
        char w[WORKER_ID_MAX + 1];
        if (run_parse_rollout(l.entries[i].key, &v, w, sizeof w, &seq) < 0 || v >= cutoff) continue;
        if (!dry_run && store_delete(st, l.entries[i].key, err) < 0) rc = -1;
        else g->shards++;
    }
    store_list_free(&l);
    if (rc == 0) rc = drop_series(st, &SERIES_STATES, cutoff, dry_run, &g->states, err);
    if (rc == 0) rc = drop_series(st, &SERIES_ADAPTERS, cutoff, dry_run, &g->adapters, err);
    return rc;
}

const char *const RUN_PREFIXES[] = {"adapters/", "trainer/", "metrics/", "rollouts/", "workers/", "eval/", "control/",
                                    NULL};

int run_gc_probes(Store *st, bool dry_run, int64_t *n, PailErr *err) {
    *n = 0;
    for (int i = 0; RUN_PREFIXES[i]; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%sdoctor-", RUN_PREFIXES[i]);
        StoreList l = {0};
        if (store_list_all(st, prefix, NULL, &l, err) < 0) return -1;
        int rc = 0;
        for (int k = 0; k < l.n && rc == 0; k++) {
            const char *name = l.entries[k].key + strlen(RUN_PREFIXES[i]);
            if (strchr(name, '/') || (strncmp(name, RUN_PROBE_PROBE, strlen(RUN_PROBE_PROBE)) &&
                                      strncmp(name, RUN_PROBE_CREATE_ONLY, strlen(RUN_PROBE_CREATE_ONLY))))
                continue;
            if (!dry_run && store_delete(st, l.entries[k].key, err) < 0) rc = -1;
            else (*n)++;
        }
        store_list_free(&l);
        if (rc < 0) return -1;
    }
    return 0;
}
