// grpo-train: the GRPO trainer. Until the trainer lands (issue: grpo-train), it
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
        {"steps", FLAG_INT, &steps, "200", 1, 100000000, "optimizer steps"},
        {"lora-rank", FLAG_INT, &rank, "16", 1, 4096, "LoRA rank R"},
    };
    int n = sizeof fl / sizeof fl[0];
    PailErr err = {0};
    int rc = flags_parse(fl, n, argc, argv, NULL, NULL, &err);
    if (rc == FLAGS_HELP) {
        flags_usage(stdout, "grpo-train --model DIR --run URL [flags]",
                    "GRPO on LoRA adapters from rollout shards (not implemented yet).", fl, n);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "grpo-train: %s\n", err.msg);
        return 2;
    }
    fprintf(stderr, "grpo-train: not implemented yet: the trainer is not built in this version of pail\n");
    flags_free(fl, n);
    return 1;
}
