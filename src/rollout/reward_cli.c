// Reading the shared reward flags (reward_cli.h) into a RewardConfig.
#include "rollout/reward_cli.h"
#include <stdio.h>
#include <string.h>

static const char *const CMD_ONLY[] = {"cmd"};

int reward_cli_config(const char *prog, const RewardCliFlags *v, int argc, char **argv, RewardConfig *out) {
    *out = (RewardConfig){.specs = (const char *const *)v->specs.items, .nspecs = v->specs.n, .answer_field = v->answer_field, .answer_marker = v->answer_marker, .format_regex = v->format_regex, .length_target = v->length_target, .cmds = (const char *const *)v->cmds.items, .ncmds = v->cmds.n, .cmd_timeout_s = v->cmd_timeout_s};
    if (v->cmds.n > 0 && !flags_given(argc, argv, "reward") && v->specs.n == 1 && !strcmp(v->specs.items[0], "exact_answer")) {
        if (v->cmds.n > 1) {
            fprintf(stderr, "%s: %d --reward-cmd programs without --reward: name each, --reward cmd:JUDGE with "
                            "--reward-cmd JUDGE=PROGRAM\n",
                    prog, v->cmds.n);
            return 2;
        }
        out->specs = CMD_ONLY;  // the program given is the reward (not exact_answer, the default)
        out->nspecs = 1;
    }
    return 0;
}

const char *reward_cli_given(int argc, char **argv) {
    static const char *const names[] = {"reward", "reward-cmd", "reward-timeout", "answer-field", "answer-marker",
                                        "format-regex", "length-target"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (flags_given(argc, argv, names[i])) return names[i];
    return NULL;
}
