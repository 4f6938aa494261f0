// grpo-rollout: the rollout worker. Until the worker lands (issue: grpo-rollout), it
// parses its flags and --help, and refuses to run rather than pretend.
#include <stdio.h>
#include <stdlib.h>
#include "core/flags.h"

int main(int argc, char **argv) {
    char *model = NULL, *run = NULL, *config = NULL;
    long steps, rank;
    Flag fl[] = {
        {"config", FLAG_STRING, &config, NULL, 1, 0, "file of key = value lines (the command line wins)"},
        {"model", FLAG_STRING, &model, NULL, 1, 0, "Hugging Face model folder (or bucket URL)"},
        {"run", FLAG_STRING, &run, NULL, 1, 0, "run prefix URL: file:///abs/dir or s3://bucket/prefix"},
        {"group-size", FLAG_INT, &steps, "8", 1, 1024, "completions per prompt G"},
        {"max-shards", FLAG_INT, &rank, "0", 0, 100000000, "stop after N shards (0: run until stopped)"},
    };
    int n = sizeof fl / sizeof fl[0];
    PailErr err = {0};
    int rc = flags_parse(fl, n, argc, argv, NULL, NULL, &err);
    if (rc == FLAGS_HELP) {
        flags_usage(stdout, "grpo-rollout --model DIR --run URL --dataset FILE [flags]",
                    "Generates groups of completions with the newest adapter and writes rollout shards (not implemented yet).", fl, n);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "grpo-rollout: %s\n", err.msg);
        return 2;
    }
    fprintf(stderr, "grpo-rollout: not implemented yet: the rollout worker is not built in this version of pail\n");
    flags_free(fl, n);
    return 1;
}
