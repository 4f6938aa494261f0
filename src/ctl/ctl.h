// grpo-ctl subcommands, one file each in src/ctl/. Each takes the arguments after
// the subcommand name (argv[0] is "grpo-ctl NAME") and returns the exit status:
// 0 success, 1 runtime failure, 2 usage error.
#pragma once
#include "core/flags.h"
#include "store/cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} CtlCommand;

int ctl_put(int argc, char **argv);
int ctl_get(int argc, char **argv);
int ctl_ls(int argc, char **argv);
int ctl_stat(int argc, char **argv);
int ctl_rm(int argc, char **argv);
int ctl_logprobs(int argc, char **argv);     // src/ctl/logprobs.c
int ctl_eval(int argc, char **argv);         // src/ctl/eval.c
int ctl_plot(int argc, char **argv);         // src/ctl/plot.c
int ctl_tensorboard(int argc, char **argv);  // src/ctl/tensorboard.c
int ctl_samples(int argc, char **argv);      // src/ctl/samples.c
int ctl_stop(int argc, char **argv);         // src/ctl/stop.c
int ctl_status(int argc, char **argv);       // src/ctl/status.c
int ctl_export(int argc, char **argv);       // src/ctl/export.c
int ctl_gc(int argc, char **argv);           // src/ctl/gc.c
int ctl_doctor(int argc, char **argv);       // src/ctl/doctor.c
int ctl_init_model(int argc, char **argv);   // src/ctl/model.c
int ctl_plan(int argc, char **argv);         // src/ctl/plan.c
int ctl_model_info(int argc, char **argv);
int ctl_import_gguf(int argc, char **argv);  // src/ctl/import_gguf.c
int ctl_tokenize(int argc, char **argv);
int ctl_detokenize(int argc, char **argv);

// The store options every store-facing subcommand takes (--endpoint, --region,
// --ca-bundle, --allow-http, --max-outage, --addressing), appended to a
// subcommand's own flag table by ctl_store_flags().
typedef struct {
    StoreCliFlags s;  // --endpoint, --region, --ca-bundle, --allow-http, --max-outage (store/cli.h)
    char *addressing;
} CtlStoreFlags;
#define CTL_STORE_NFLAGS 6
void ctl_store_flags(Flag *out, CtlStoreFlags *dst);
// The StoreOptions those flags describe (addressing left to ctl_open_url).
StoreOptions ctl_store_options(const CtlStoreFlags *sf);
// Splits a URL "file:///abs/dir/key" or "s3://bucket/key" into a store root URL
// and a key, opens the store. key may be "" (bucket root / "/").
int ctl_open_url(const char *url, const CtlStoreFlags *sf, Store **st, char *key, size_t keycap,
                 PailErr *err);
// Parses flags for a subcommand; returns -1 to continue, or an exit status
// (0 after --help, 2 on a usage error, printed).
// Reads a local path, or a file:// / s3:// URL, into out.
int ctl_read_url_or_path(const char *src, const CtlStoreFlags *sf, Buf *out, PailErr *err);
int ctl_parse(const char *usage, const char *about, Flag *fl, int n, int argc, char **argv,
              char ***pos, int *npos);
