// grpo-ctl stop: asks a run's trainer and workers to stop cleanly by writing
// control/stop (doc/protocol.md): a JSON object with the reason, time, host and
// user. The trainer looks for it after each step and every ~5 s while waiting
// (it stops after the step it is in, publishing it), workers between shards;
// each exits 0.
#include <jansson.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/timeutil.h"
#include "ctl/ctl.h"
#include "store/runlayout.h"

int ctl_stop(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    char *reason = NULL;
    Flag fl[CTL_STORE_NFLAGS + 1] = {
        {"reason", FLAG_STRING, &reason, "operator request", 1, 0, "why, recorded in control/stop"},
    };
    ctl_store_flags(fl + 1, &sf);
    int n = CTL_STORE_NFLAGS + 1, npos = 0, rc;
    char **pos = NULL;
    const char *usage = "grpo-ctl stop RUN_URL [--reason TEXT]";
    if ((rc = ctl_parse(usage, "Writes RUN_URL/control/stop: the run's trainer stops after the step it is in (publishing "
                        "it; shards it holds for later steps are not trained), workers after their shard; each exits 0. Remove it (grpo-ctl rm RUN_URL/control/stop) before starting the run again.",
                        fl, n, argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos != 1) {
        fprintf(stderr, "%s: expected one RUN_URL\nusage: %s\n", argv[0], usage);
        goto done;
    }
    rc = 1;
    PailErr err = {0};
    Store *st = NULL;
    StoreOptions so = ctl_store_options(&sf);
    struct stat sb;
    if (!strncmp(pos[0], "file://", 7) && stat(pos[0] + 7, &sb) != 0) {  // opening it would create it
        fprintf(stderr, "%s: %s has no run.json: not a run (no such folder; nothing written)\n", argv[0], pos[0]);
        goto done;
    }
    if (store_open(&st, pos[0], &so, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    StoreStat ss;
    if (store_head(st, RUN_KEY_MANIFEST, &ss, &err) < 0) {
        if (err.code == PAIL_ERR_NOT_FOUND)
            fprintf(stderr, "%s: %s has no run.json: not a run (nothing written)\n", argv[0], pos[0]);
        else
            fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    bool again = store_head(st, RUN_KEY_STOP, &ss, &err) == 0;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    struct passwd *pw = getpwuid(getuid());
    json_t *j = json_pack("{s:s, s:I, s:s, s:s}", "reason", reason ? reason : "", "time", (json_int_t)time_unix_s(),
                          "host", host, "user", pw && pw->pw_name ? pw->pw_name : "");
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        goto close;
    }
    Buf body = {0};
    int prc = buf_printf(&body, "%s\n", text);
    free(text);
    StorePutOpts opt = {.content_type = "application/json"};
    if (prc < 0) err_set(&err, PAIL_ERR_NOMEM, "control/stop: out of memory");
    else prc = store_put(st, RUN_KEY_STOP, body.data, body.len, &opt, &err);
    buf_free(&body);
    if (prc < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    size_t ul = strlen(pos[0]);
    printf("%s %s%scontrol/stop (reason: %s): the trainer stops after the step it is in, workers after their "
           "shard; remove it before starting the run again\n", again ? "replaced" : "wrote", pos[0], ul && pos[0][ul - 1] == '/' ? "" : "/",
           reason ? reason : "");
    rc = 0;
close:
    store_close(st);
done:
    free(pos);
    flags_free(fl, n);
    return rc;
}
