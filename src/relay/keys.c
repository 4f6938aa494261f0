// Key file parsing and the role policy (keys.h). The policy reads the key
// relative to the client's run prefix, so one rule table serves every run:
// trainer owns run.json, adapters/, trainer/, metrics/; rollout workers own
// rollouts/, workers/, eval/; the operator owns all of them plus control/ and is
// the only role that deletes (gc); readers only read. A trainer or rollout
// key's prefix is its run's root: the folders count only directly below it,
// and inside them only the keys of the run layout (doc/protocol.md) are
// written: a rollout key cannot make an object named like a version folder.
#include "relay/keys.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "store/runlayout.h"
#include "store/versions.h"

static const char *const ROLE_NAMES[] = {"reader", "rollout", "trainer", "operator"};

const char *relay_role_name(RelayRole r) {
    return (unsigned)r < 4 ? ROLE_NAMES[r] : "?";
}

int relay_role_parse(const char *s, RelayRole *out) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, ROLE_NAMES[i])) {
            *out = (RelayRole)i;
            return 0;
        }
    return -1;
}

static bool id_ok(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return false;
    return true;
}

static bool writes_run(RelayRole r) { return r == ROLE_TRAINER || r == ROLE_ROLLOUT; }

static int by_prefix(const void *a, const void *b) {
    return strcmp((*(const RelayKey *const *)a)->prefix, (*(const RelayKey *const *)b)->prefix);
}

static int prefix_vs_key(const void *prefix, const void *k) {
    return strcmp(prefix, (*(const RelayKey *const *)k)->prefix);
}

// A trainer or rollout key's prefix is a run's root, so no other run may lie
// below it: a rollout key for runs/x would own the adapters/ of a run at
// runs/x/eval/y. (Reader and operator prefixes are not runs: a reader of
// runs/x/metrics is fine.) Each writer's ancestors are looked up among the
// writers' prefixes (sorted), so a large file costs n log n, not n^2.
static int nested_check(const RelayKeys *ks, const char *name, PailErr *err) {
    const RelayKey **w = malloc((size_t)(ks->n ? ks->n : 1) * sizeof *w);
    if (!w) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    int nw = 0;
    for (int i = 0; i < ks->n; i++)
        if (writes_run(ks->keys[i].role)) w[nw++] = &ks->keys[i];
    qsort(w, (size_t)nw, sizeof *w, by_prefix);
    int rc = 0;
    for (int i = 0; i < nw && rc == 0; i++) {
        const RelayKey *k = w[i];
        char up[STORE_MAX_KEY];
        for (const char *s = strchr(k->prefix, '/'); s && rc == 0; s = strchr(s + 1, '/')) {
            memcpy(up, k->prefix, (size_t)(s - k->prefix));
            up[s - k->prefix] = 0;
            const RelayKey **hit = bsearch(up, w, (size_t)nw, sizeof *w, prefix_vs_key);
            if (hit)
                rc = err_set(err, PAIL_ERR_INVALID,
                             "%s:%d: run %s of %s key '%s' lies inside run %s of %s key '%s' (line %d): a trainer "
                             "or rollout key's prefix is one run's root and no run holds another",
                             name, k->line, k->prefix, relay_role_name(k->role), k->id, (*hit)->prefix,
                             relay_role_name((*hit)->role), (*hit)->id, (*hit)->line);
        }
    }
    free(w);
    return rc;
}

int relay_keys_parse(RelayKeys *out, const char *text, size_t n, const char *name, PailErr *err) {
    memset(out, 0, sizeof *out);
    int cap = 0, lineno = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && text[j] != '\n') j++;
        lineno++;
        char line[4096];
        size_t len = j - i;
        if (len >= sizeof line) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID, "%s:%d: line longer than %zu bytes", name, lineno, sizeof line - 1);
        }
        memcpy(line, text + i, len);
        line[len] = 0;
        i = j + 1;
        if (memchr(line, 0, len)) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID, "%s:%d: NUL byte in line", name, lineno);
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *f[5];
        int nf = 0;
        for (char *save = NULL, *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
            if (nf == 5) break;
            f[nf++] = t;
        }
        if (nf == 0) continue;
        if (nf < 3 || nf > 4) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID,
                           "%s:%d: expected 'ACCESS_KEY_ID SECRET ROLE [PREFIX]', found %d field%s", name, lineno,
                           nf, nf == 1 ? "" : "s");
        }
        RelayKey k = {0};
        if (strlen(f[0]) >= sizeof k.id || !id_ok(f[0])) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID, "%s:%d: access key id must be 1-127 of [A-Za-z0-9_.-]", name,
                           lineno);
        }
        size_t sl = strlen(f[1]);
        if (sl < 16 || sl >= sizeof k.secret) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID, "%s:%d: secret of key '%s' must be 16-127 bytes (has %zu)", name,
                           lineno, f[0], sl);
        }
        if (relay_role_parse(f[2], &k.role) < 0) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID,
                           "%s:%d: unknown role '%.32s' (reader, rollout, trainer or operator)", name, lineno, f[2]);
        }
        if (nf == 4) {
            char *p = f[3];
            size_t pl = strlen(p);
            while (pl > 0 && p[pl - 1] == '/') p[--pl] = 0;
            PailErr kerr = {0};
            if (pl == 0 || store_key_check(p, &kerr) < 0) {
                relay_keys_free(out);
                return err_set(err, PAIL_ERR_INVALID, "%s:%d: prefix: %s", name, lineno,
                               pl ? kerr.msg : "empty prefix (leave it out for the whole bucket)");
            }
            snprintf(k.prefix, sizeof k.prefix, "%s", p);
        }
        if (!k.prefix[0] && writes_run(k.role)) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID,
                           "%s:%d: %s key '%s' has no run prefix: add its run's prefix as the 4th field (e.g. "
                           "'runs/exp1' for --run s3://BUCKET/runs/exp1); only operator and reader keys serve the "
                           "whole bucket",
                           name, lineno, f[2], f[0]);
        }
        k.line = lineno;
        snprintf(k.id, sizeof k.id, "%s", f[0]);
        memcpy(k.secret, f[1], sl + 1);
        if (relay_keys_find(out, k.id)) {
            relay_keys_free(out);
            return err_set(err, PAIL_ERR_INVALID, "%s:%d: access key id '%s' appears twice", name, lineno, k.id);
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 8;
            RelayKey *nk = realloc(out->keys, (size_t)cap * sizeof *nk);
            if (!nk) {
                relay_keys_free(out);
                return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
            }
            out->keys = nk;
        }
        out->keys[out->n++] = k;
    }
    if (nested_check(out, name, err) < 0) {
        relay_keys_free(out);
        return -1;
    }
    return 0;
}

int relay_keys_load(RelayKeys *out, const char *path, PailErr *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, PAIL_ERR_IO, "key file %s: cannot open", path);
    Buf b = {0};
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + got > (1u << 24) || buf_append(&b, chunk, got) < 0) {
            fclose(f);
            buf_free(&b);
            return err_set(err, PAIL_ERR_INVALID, "key file %s: larger than 16 MiB or out of memory", path);
        }
    }
    fclose(f);
    int rc = relay_keys_parse(out, b.data ? (const char *)b.data : "", b.len, path, err);
    if (rc == 0 && out->n == 0) rc = err_set(err, PAIL_ERR_INVALID, "key file %s: no keys", path);
    // The buffer held secrets: wipe before freeing.
    if (b.data) memset(b.data, 0, b.cap);
    buf_free(&b);
    return rc;
}

void relay_keys_free(RelayKeys *k) {
    if (k->keys) memset(k->keys, 0, (size_t)k->n * sizeof *k->keys);
    free(k->keys);
    k->keys = NULL;
    k->n = 0;
}

const RelayKey *relay_keys_find(const RelayKeys *k, const char *id) {
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->keys[i].id, id)) return &k->keys[i];
    return NULL;
}

// The key relative to the prefix, or NULL when it lies outside.
static const char *relative(const char *prefix, const char *key) {
    size_t pl = strlen(prefix);
    if (pl == 0) return key;
    if (strncmp(key, prefix, pl) || key[pl] != '/') return NULL;
    return key + pl + 1;
}

static bool under(const char *rel, const char *dir) {
    size_t n = strlen(dir);
    return !strncmp(rel, dir, n) && rel[n];
}

static bool hex12(const char *s) {
    for (int i = 0; i < 12; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return !s[12];
}

// grpo-ctl doctor's probes of what a key may write: <folder>doctor-probe-<hex>
// and <folder>doctor-create-only-<hex>, which no series parses.
static bool doctor_probe(const char *rel, const char *const *folders) {
    for (; *folders; folders++) {
        size_t n = strlen(*folders);
        if (strncmp(rel, *folders, n)) continue;
        const char *p = rel + n;
        if (!strncmp(p, "doctor-probe-", 13)) return hex12(p + 13);
        if (!strncmp(p, "doctor-create-only-", 19)) return hex12(p + 19);
    }
    return false;
}

// The run layout of doc/protocol.md, the keys a trainer writes (rel is
// relative to the run's root).
static bool trainer_key(const char *rel) {
    static const char *const folders[] = {"adapters/", "trainer/", "metrics/", NULL};
    if (!strcmp(rel, RUN_KEY_MANIFEST) || !strcmp(rel, RUN_KEY_LATEST) || !strcmp(rel, RUN_KEY_PROGRESS) ||
        version_parse(&SERIES_ADAPTERS, rel) >= 0 || version_parse(&SERIES_STATES, rel) >= 0 ||
        doctor_probe(rel, folders))
        return true;
    static const VersionSeries metrics = {"metrics/step-", ".json"};
    if (version_parse(&metrics, rel) >= 0) return true;
    const char *rej = "trainer/rejected/";
    size_t rl = strlen(rej), kl = strlen(rel);
    if (strncmp(rel, rej, rl) || kl < rl + 5 || strcmp(rel + kl - 5, ".json")) return false;
    char shard[STORE_MAX_KEY + 1], w[WORKER_ID_MAX + 1];
    snprintf(shard, sizeof shard, "%.*s", (int)(kl - rl - 5), rel + rl);
    long v, seq;
    return run_parse_rollout(shard, &v, w, sizeof w, &seq) == 0;
}

// ... and the keys a rollout or eval worker writes.
static bool rollout_key(const char *rel) {
    static const char *const folders[] = {"rollouts/", "workers/", "eval/", NULL};
    long v, seq;
    char w[WORKER_ID_MAX + 1];
    if (run_parse_rollout(rel, &v, w, sizeof w, &seq) == 0 || version_parse(&SERIES_EVALS, rel) >= 0 ||
        run_parse_eval_samples(rel) >= 0 || doctor_probe(rel, folders))
        return true;
    size_t kl = strlen(rel), idl = kl - 13;  // "workers/" <id> ".json"
    if (strncmp(rel, "workers/", 8) || kl < 8 + 6 || strcmp(rel + kl - 5, ".json") || idl > WORKER_ID_MAX)
        return false;
    memcpy(w, rel + 8, idl);
    w[idl] = 0;
    return worker_id_check(w, NULL) == 0;
}

bool relay_policy_allows(RelayRole role, const char *prefix, RelayAccess what, const char *key,
                         const char **why) {
    const char *dummy;
    if (!why) why = &dummy;
    const char *rel = relative(prefix, key);
    if (!rel) {
        *why = "key is outside this access key's run prefix";
        return false;
    }
    if (what == ACCESS_READ) return true;
    if (what == ACCESS_DELETE) {
        if (role == ROLE_OPERATOR) return true;
        *why = "only the operator role deletes";
        return false;
    }
    // A trainer or rollout key's prefix is its run's root: the role folders
    // count directly below it only. The operator's prefix is a scope over any
    // number of runs (it deletes anything in it anyway), so for the operator
    // they count below any folder.
    if (!prefix[0] && writes_run(role)) {
        *why = "a trainer or rollout key needs a run prefix";
        return false;
    }
    bool trainer = false, rollout = false, control = false;
    for (const char *p = rel; p;) {
        trainer |= !strcmp(p, "run.json") || under(p, "adapters/") || under(p, "trainer/") || under(p, "metrics/");
        rollout |= under(p, "rollouts/") || under(p, "workers/") || under(p, "eval/");
        control |= under(p, "control/");
        if (role != ROLE_OPERATOR) break;
        p = strchr(p, '/');
        if (p) p++;
    }
    switch (role) {
    case ROLE_OPERATOR:
        if (trainer || rollout || control) return true;
        *why = "the operator writes run.json, adapters/, trainer/, metrics/, rollouts/, workers/, eval/, control/";
        return false;
    case ROLE_TRAINER:
        if (!trainer) {
            *why = "the trainer role writes run.json, adapters/, trainer/ and metrics/ directly below its run prefix "
                   "only";
            return false;
        }
        if (trainer_key(rel)) return true;
        *why = "not a trainer key of the run layout (run.json, adapters/v%08d.h5, adapters/LATEST, "
               "trainer/state-v%08d.h5, trainer/progress.json, trainer/rejected/<shard key>.json, "
               "metrics/step-%08d.json; doc/protocol.md)";
        return false;
    case ROLE_ROLLOUT:
        if (!rollout) {
            *why = "the rollout role writes rollouts/, workers/ and eval/ directly below its run prefix only";
            return false;
        }
        if (rollout_key(rel)) return true;
        *why = "not a rollout key of the run layout (rollouts/v%08d/<worker>-%06d.h5, workers/<worker>.json, "
               "eval/v%08d.json, eval/samples/v%08d.jsonl; doc/protocol.md)";
        return false;
    default:
        *why = "the reader role only reads";
        return false;
    }
}

bool relay_policy_allows_list(const char *prefix, const char *list_prefix) {
    size_t pl = strlen(prefix);
    if (pl == 0) return true;
    return !strncmp(list_prefix, prefix, pl) && list_prefix[pl] == '/';
}
