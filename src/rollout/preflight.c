// Start-up checks of the rollout worker (see preflight.h): the dataset's fields
// against the rewards, the token limits against the model's positions, the
// reward or environment program's path, and the run's store.
#include "rollout/preflight.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/log.h"
#include "model/config.h"
#include "model/transformer.h"
#include "rollout/engine.h"
#include "store/runlayout.h"

int preflight_dataset(const Dataset *ds, const RewardSet *rs, PailErr *err) {
    if (!rs) return 0;  // episodes: the environment program reads the rows
    const char *fields[REWARD_MAX], *rewards[REWARD_MAX];
    int n = reward_set_fields(rs, fields, rewards, REWARD_MAX);
    for (int i = 0; i < n; i++) {
        char why[96];
        snprintf(why, sizeof why, "--reward %s", rewards[i]);
        if (dataset_check_field(ds, fields[i], why, err) < 0) return -1;
    }
    return 0;
}

// The transformer's RoPE table holds min(max_position_embeddings,
// TRANSFORMER_ROPE_MAX) positions: a position past it fails the forward.
#define ROPE_TABLE_MAX TRANSFORMER_ROPE_MAX

int preflight_positions(RolloutConfig *c, PailErr *err) {
    ModelConfig mc;
    if (model_config_load(&mc, c->model_dir, err) < 0) return -1;
    int limit = mc.max_position_embeddings < ROPE_TABLE_MAX ? mc.max_position_embeddings : ROPE_TABLE_MAX;
    bool ep = rollout_episodic(c);
    const char *gen_flag = ep ? "--max-episode-tokens" : "--max-new-tokens";
    int gen = ep ? c->max_episode_tokens : c->max_new_tokens;
    char model[200];
    snprintf(model, sizeof model, "the model's %d positions (max_position_embeddings in %.120s/config.json%s)", limit,
             c->model_dir, mc.max_position_embeddings > ROPE_TABLE_MAX ? ", at most 32768" : "");
    if (gen >= limit)
        return err_set(err, PAIL_ERR_INVALID, "%s %d: no room for a prompt in %s", gen_flag, gen, model);
    if (c->max_prompt_tokens == 0) {  // auto: what the positions leave after the completion
        c->max_prompt_tokens = limit - gen < PREFLIGHT_PROMPT_TOKENS ? limit - gen : PREFLIGHT_PROMPT_TOKENS;
        log_info("--max-prompt-tokens auto: %d (%s%s less %s %d; longer rows are skipped and counted)",
                 c->max_prompt_tokens, limit - gen < PREFLIGHT_PROMPT_TOKENS ? "" : "at most 1024: ", model, gen_flag, gen);
        return 0;
    }
    if (c->max_prompt_tokens >= limit)
        return err_set(err, PAIL_ERR_INVALID, "--max-prompt-tokens %d: no room for a completion in %s", c->max_prompt_tokens,
                       model);
    if ((long)c->max_prompt_tokens + gen > limit)
        return err_set(err, PAIL_ERR_INVALID, "--max-prompt-tokens %d + %s %d = %ld tokens is past %s: lower one of "
                       "them (e.g. --max-prompt-tokens %d)", c->max_prompt_tokens, gen_flag, gen,
                       (long)c->max_prompt_tokens + gen, model, limit - gen);
    return 0;
}

// An executable regular file.
static bool is_program(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

// name (no '/') found on $PATH as an executable.
static bool on_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        char full[4200];
        snprintf(full, sizeof full, "%.*s/%s", (int)(n ? n : 1), n ? path : ".", name);
        if (is_program(full)) return true;
        path += n + (path[n] == ':');
    }
    return false;
}

// Interpreters whose first argument, when not an option, is the script they run.
static bool is_interpreter(const char *prog) {
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    static const char *const names[] = {"python", "bash", "sh", "dash", "perl", "ruby", "node", "Rscript"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        // python3, python3.11 count as python
        if (!strncmp(base, names[i], n) && (!base[n] || ((base[n] >= '0' && base[n] <= '9') || base[n] == '.')))
            return true;
    }
    return false;
}

int preflight_program(const char *cmd, const char *what, PailErr *err) {
    if (!cmd || !*cmd) return 0;
    // Shell syntax (quotes, variables, pipes, globs, redirections, ~): what runs is the shell's to decide.
    if (strpbrk(cmd, "\"'`$|;&<>()*?[]{}~\\!#\n")) return 0;
    char words[2][1024];
    int nw = 0;
    for (const char *p = cmd; *p && nw < 2;) {
        p += strspn(p, " \t");
        size_t n = strcspn(p, " \t");
        if (!n) break;
        if (n >= sizeof words[0]) return 0;
        memcpy(words[nw], p, n);
        words[nw++][n] = 0;
        p += n;
    }
    if (!nw || strchr(words[0], '=')) return 0;  // VAR=value program ...: the shell's
    bool found = strchr(words[0], '/') ? is_program(words[0]) : on_path(words[0]);
    if (!found)
        return err_set(err, PAIL_ERR_INVALID, "%s '%s': the program '%s' %s", what, cmd, words[0],
                       strchr(words[0], '/') ? (access(words[0], F_OK) == 0 ? "is not an executable file"
                                                                             : "does not exist")
                                             : "is not found on PATH");
    if (nw == 2 && words[1][0] != '-' && is_interpreter(words[0])) {
        struct stat st;
        if (stat(words[1], &st) != 0 || !S_ISREG(st.st_mode) || access(words[1], R_OK) != 0)
            return err_set(err, PAIL_ERR_INVALID, "%s '%s': the script '%s' %s", what, cmd, words[1],
                           access(words[1], F_OK) == 0 ? "is not a readable file" : "does not exist");
    }
    return 0;
}

int preflight_store(Store *st, const RolloutConfig *c, PailErr *err) {
    json_t *m = NULL;
    if (run_manifest_read(st, &m, err) < 0) {
        if (err->code == PAIL_ERR_NOT_FOUND || err->code == PAIL_ERR_NETWORK) {
            err_clear(err);
            return 0;
        }
        return err_wrap(err, "--run %s", c->run_url);
    }
    json_int_t G = json_integer_value(json_object_get(m, "group_size"));
    json_decref(m);
    if (!c->eval && G && G != c->group_size)
        return err_set(err, PAIL_ERR_INVALID, "--run %s: run.json: the trainer expects groups of %lld, --group-size is %d",
                       c->run_url, (long long)G, c->group_size);
    return 0;
}
