// Run key layout, worker ids and the run manifest (see runlayout.h).
#include "store/runlayout.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/sha256.h"
#include "store/versions.h"

int worker_id_check(const char *id, PailErr *err) {
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > WORKER_ID_MAX)
        return err_set(err, PAIL_ERR_INVALID, "worker id '%s' must be 1 to %d characters", id ? id : "",
                       WORKER_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (!isalnum(c) && c != '_' && c != '.' && c != '-')
            return err_set(err, PAIL_ERR_INVALID, "worker id '%s': character '%c' not in [A-Za-z0-9_.-]", id,
                           isprint(c) ? c : '?');
    }
    if (!strcmp(id, ".") || !strcmp(id, ".."))
        return err_set(err, PAIL_ERR_INVALID, "worker id '%s' is not allowed", id);
    return 0;
}

void worker_id_default(char *out, size_t cap) {
    const char *job = getenv("SLURM_JOB_ID"), *arr = getenv("SLURM_ARRAY_TASK_ID"),
               *arrjob = getenv("SLURM_ARRAY_JOB_ID"), *proc = getenv("SLURM_PROCID");
    char raw[256];
    if (job && *job) {
        if (arr && *arr && arrjob && *arrjob)
            snprintf(raw, sizeof raw, "s%s-a%s-p%s", arrjob, arr, proc ? proc : "0");
        else
            snprintf(raw, sizeof raw, "s%s-p%s", job, proc ? proc : "0");
    } else {
        char host[128] = "host";
        gethostname(host, sizeof host);
        host[sizeof host - 1] = 0;
        char *dot = strchr(host, '.');
        if (dot) *dot = 0;
        snprintf(raw, sizeof raw, "%s-%d", host, (int)getpid());
    }
    size_t k = 0;
    for (size_t i = 0; raw[i] && k + 1 < cap && k < WORKER_ID_MAX; i++) {
        unsigned char c = (unsigned char)raw[i];
        out[k++] = (isalnum(c) || c == '_' || c == '.' || c == '-') ? (char)c : '_';
    }
    out[k] = 0;
}

static int fits(int n, size_t cap) { return n >= 0 && (size_t)n < cap ? 0 : -1; }

int run_key_rollout(char *out, size_t cap, long version, const char *worker, long seq) {
    return fits(snprintf(out, cap, "rollouts/v%08ld/%s-%06ld.h5", version, worker, seq), cap);
}
int run_key_rollout_dir(char *out, size_t cap, long version) {
    return fits(snprintf(out, cap, "rollouts/v%08ld/", version), cap);
}
int run_key_metrics(char *out, size_t cap, long step) {
    return fits(snprintf(out, cap, "metrics/step-%08ld.json", step), cap);
}
int run_key_worker(char *out, size_t cap, const char *worker) {
    return fits(snprintf(out, cap, "workers/%s.json", worker), cap);
}
int run_key_rejected(char *out, size_t cap, const char *shard_key) {
    return fits(snprintf(out, cap, "trainer/rejected/%s.json", shard_key), cap);
}

// Not below eval/v: the listings of eval/v*.json (status, plot, tensorboard) do not see it.
static const VersionSeries EVAL_SAMPLES = {"eval/samples/v", ".jsonl"};
int run_key_eval_samples(char *out, size_t cap, long version) {
    return version < 0 ? -1 : version_key(&EVAL_SAMPLES, version, out, cap);
}
long run_parse_eval_samples(const char *key) { return version_parse(&EVAL_SAMPLES, key); }

int run_parse_rollout(const char *key, long *version, char *worker, size_t wcap, long *seq) {
    long v = 0;
    if (strncmp(key, "rollouts/v", 10)) return -1;
    const char *p = key + 10;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) v = v * 10 + (*p - '0');
    if (digits != 8 || *p != '/') return -1;
    const char *name = p + 1, *ext = strrchr(name, '.');
    if (!ext || strcmp(ext, ".h5") || strchr(name, '/')) return -1;
    const char *dash = NULL;
    for (const char *q = name; q < ext; q++) if (*q == '-') dash = q;
    if (!dash || ext - dash != 7) return -1;
    long s = 0;
    for (const char *q = dash + 1; q < ext; q++) {
        if (*q < '0' || *q > '9') return -1;
        s = s * 10 + (*q - '0');
    }
    size_t wl = (size_t)(dash - name);
    if (wl == 0 || wl >= wcap) return -1;
    memcpy(worker, name, wl);
    worker[wl] = 0;
    if (worker_id_check(worker, NULL) < 0) return -1;
    *version = v;
    *seq = s;
    return 0;
}

int run_manifest_read(Store *st, json_t **out, PailErr *err) {
    Buf b = {0};
    if (store_get(st, RUN_KEY_MANIFEST, &b, NULL, NULL, err) < 0) {
        buf_free(&b);
        return -1;
    }
    json_error_t jerr;
    *out = json_loadb((const char *)b.data, b.len, 0, &jerr);
    buf_free(&b);
    if (!*out || !json_is_object(*out)) {
        if (*out) json_decref(*out);
        *out = NULL;
        return err_set(err, PAIL_ERR_INVALID, "%s/%s: not a JSON object (line %d: %s)", store_url(st),
                       RUN_KEY_MANIFEST, jerr.line, jerr.text);
    }
    return 0;
}

int run_manifest_publish(Store *st, json_t *manifest, const char *const *must_match, json_t **existing,
                         PailErr *err) {
    char *text = json_dumps(manifest, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) return err_set(err, PAIL_ERR_NOMEM, "run.json: cannot serialize");
    size_t len = strlen(text);
    StoreMeta meta = {.name = META_SHA256};
    sha256_hex(text, len, meta.value);
    StorePutOpts opt = {.create_only = true, .nmeta = 1, .meta = &meta, .content_type = "application/json"};
    int rc = store_put(st, RUN_KEY_MANIFEST, text, len, &opt, err);
    free(text);
    if (existing) *existing = NULL;
    if (rc == 0) return 0;
    if (err->code != PAIL_ERR_EXISTS) return -1;
    json_t *old;
    if (run_manifest_read(st, &old, err) < 0) return -1;
    for (int i = 0; must_match && must_match[i]; i++) {
        json_t *a = json_object_get(old, must_match[i]), *b = json_object_get(manifest, must_match[i]);
        if (!json_equal(a, b)) {
            char *sa = a ? json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("(absent)");
            char *sb = b ? json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("(absent)");
            err_set(err, PAIL_ERR_INVALID,
                    "%s/%s: field '%s' is %.200s in the run but %.200s here: start a new run prefix, "
                    "or use the run's settings",
                    store_url(st), RUN_KEY_MANIFEST, must_match[i], sa, sb);
            free(sa);
            free(sb);
            json_decref(old);
            return -1;
        }
    }
    if (existing) *existing = old; else json_decref(old);
    return 0;
}
