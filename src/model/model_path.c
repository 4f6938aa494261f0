// --model resolution (model_path.h): a folder, a Hugging Face id in the local
// cache, or an error saying what to run.
#include "model/model_path.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The hub cache folder, as huggingface_hub finds it.
static void hub_dir(char *out, size_t cap) {
    const char *v;
    if ((v = getenv("HF_HUB_CACHE")) && *v) snprintf(out, cap, "%s", v);
    else if ((v = getenv("HF_HOME")) && *v) snprintf(out, cap, "%s/hub", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v) snprintf(out, cap, "%s/huggingface/hub", v);
    else snprintf(out, cap, "%s/.cache/huggingface/hub", (v = getenv("HOME")) && *v ? v : "");
}

// ORG/NAME or NAME: the characters of a Hub repository id, at most one '/', and
// not a path's way of starting (/, ., ~).
static bool hub_id_like(const char *s) {
    if (!*s || *s == '/' || *s == '.' || *s == '~') return false;
    int slashes = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '/') {
            if (++slashes > 1 || p[1] == 0 || p[1] == '.' || p[-1] == '.') return false;
        } else if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') {
            return false;
        }
    }
    return !strstr(s, "--") && !strstr(s, "..");
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

// The snapshot refs/main names, or the only one there is.
static int snapshot(const char *repo, char *out, size_t cap, PailErr *err) {
    char path[4096], rev[128] = "";
    snprintf(path, sizeof path, "%s/refs/main", repo);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(rev, sizeof rev, f)) rev[0] = 0;
        fclose(f);
        rev[strcspn(rev, " \r\n")] = 0;
    }
    if (rev[0]) {
        snprintf(out, cap, "%s/snapshots/%s", repo, rev);
        if (is_dir(out)) return 0;
    }
    snprintf(path, sizeof path, "%s/snapshots", repo);
    DIR *d = opendir(path);
    int n = 0;
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') {
                if (n++ == 0) snprintf(out, cap, "%s/%s", path, e->d_name);
            }
        closedir(d);
    }
    if (n == 1 && is_dir(out)) return 0;
    if (n == 0) return err_set(err, PAIL_ERR_NOT_FOUND, "no snapshot under %s", path);
    return err_set(err, PAIL_ERR_INVALID, "%d snapshots under %s and no refs/main naming one: pass the folder of the "
                                          "one to use",
                   n, path);
}

int model_path_resolve(const char *arg, char *out, size_t cap, bool *from_cache, PailErr *err) {
    *from_cache = false;
    struct stat sb;
    size_t n = strlen(arg);
    bool gguf = n > 5 && !strcasecmp(arg + n - 5, ".gguf");
    if (stat(arg, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            snprintf(out, cap, "%s", arg);
            return 0;
        }
        if (gguf)
            return err_set(err, PAIL_ERR_INVALID, "--model %s: a GGUF file, not a model folder: import it once with "
                                                  "`grpo-ctl import-gguf %s --out DIR` (safetensors, tokenizer and config), then pass --model DIR",
                           arg, arg);
        return err_set(err, PAIL_ERR_INVALID, "--model %s: a file, not a model folder (config.json, tokenizer.json, "
                                              "*.safetensors)",
                       arg);
    }
    if (gguf)
        return err_set(err, PAIL_ERR_NOT_FOUND, "--model %s: no such GGUF file (a .gguf is imported with `grpo-ctl "
                                                "import-gguf FILE.gguf --out DIR`, then --model DIR)",
                       arg);
    if (!hub_id_like(arg)) return err_set(err, PAIL_ERR_NOT_FOUND, "--model %s: no such folder", arg);
    char hub[2048], repo[3072];
    hub_dir(hub, sizeof hub);
    int k = snprintf(repo, sizeof repo, "%s/models--", hub);
    for (const char *p = arg; *p && k + 3 < (int)sizeof repo; p++) {
        if (*p == '/') repo[k++] = '-', repo[k++] = '-';
        else repo[k++] = *p;
    }
    repo[k] = 0;
    PailErr serr = {0};
    char snap[4096];
    if (!is_dir(repo) || snapshot(repo, snap, sizeof snap, &serr) < 0) {
        if (serr.code == PAIL_ERR_INVALID) return err_set(err, PAIL_ERR_INVALID, "--model %s: %s", arg, serr.msg);
        return err_set(err, PAIL_ERR_NOT_FOUND, "--model %s: no such folder, and not in the Hugging Face cache (%s): "
                                                "download it with `hf download %s` and pass --model %s again, or `hf download %s --local-dir DIR` "
                                                "and pass --model DIR",
                       arg, repo, arg, arg, arg);
    }
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", snap);
    if (stat(cfg, &sb) != 0)
        return err_set(err, PAIL_ERR_NOT_FOUND, "--model %s: the Hugging Face cache's %s has no config.json (a partial "
                                                "download?): `hf download %s` fetches the whole model",
                       arg, snap, arg);
    if (strlen(snap) >= cap) return err_set(err, PAIL_ERR_INVALID, "--model %s: the path %s is too long", arg, snap);
    snprintf(out, cap, "%s", snap);
    *from_cache = true;
    return 0;
}

int model_path_cli(const char *prog, char **model) {
    char dir[4096];
    bool cached;
    PailErr err = {0};
    if (model_path_resolve(*model, dir, sizeof dir, &cached, &err) < 0) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    if (!cached) return 0;
    char *copy = strdup(dir);
    if (!copy) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    fprintf(stderr, "%s: --model %s: the Hugging Face cache's %s\n", prog, *model, dir);
    free(*model);
    *model = copy;
    return 0;
}
