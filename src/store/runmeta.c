// run.json and trainer/progress.json: typed readers and writers (see runmeta.h).
#include "store/runmeta.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/runlayout.h"

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int wrong(const char *name, const char *field, const json_t *v, const char *want, PailErr *err) {
    return err_set(err, PAIL_ERR_INVALID, "%s: field '%s' is %s, expected %s", name, field, type_name(v), want);
}

// Each getter leaves *out alone when the field is absent (or null) and fails on a wrong type.
static int get_long(json_t *o, const char *k, const char *name, const char *field, long *out, PailErr *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return wrong(name, field ? field : k, v, "an integer", err);
    *out = (long)json_integer_value(v);
    return 0;
}

static int get_i64(json_t *o, const char *k, const char *name, int64_t *out, PailErr *err) {
    long x = (long)*out;
    if (get_long(o, k, name, NULL, &x, err) < 0) return -1;
    *out = x;
    return 0;
}

static int get_str(json_t *o, const char *k, const char *name, const char *field, char *out, size_t cap,
                   PailErr *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return wrong(name, field ? field : k, v, "a string", err);
    snprintf(out, cap, "%s", json_string_value(v));
    return 0;
}

static int get_dup(json_t *o, const char *k, const char *name, char **out, PailErr *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return wrong(name, k, v, "a string", err);
    free(*out);
    if (!(*out = strdup(json_string_value(v)))) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    return 0;
}

static int get_bool(json_t *o, const char *k, const char *name, const char *field, bool *out, PailErr *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return wrong(name, field ? field : k, v, "true or false", err);
    *out = json_is_true(v);
    return 0;
}

static int get_real(json_t *o, const char *k, const char *name, const char *field, double *out, PailErr *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return wrong(name, field ? field : k, v, "a number", err);
    *out = json_number_value(v);
    return 0;
}

static json_t *load_object(const char *text, size_t len, const char *name, PailErr *err) {
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!j) {
        err_set(err, PAIL_ERR_INVALID, "%s: not valid JSON (line %d: %s)", name, je.line, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        err_set(err, PAIL_ERR_INVALID, "%s: is %s, expected a JSON object", name, type_name(j));
        json_decref(j);
        return NULL;
    }
    return j;
}

// --- run.json -----------------------------------------------------------------

void runinfo_init(RunInfo *ri) {
    memset(ri, 0, sizeof *ri);
    snprintf(ri->compute_dtype, sizeof ri->compute_dtype, "f32");
    ri->max_staleness = RUN_DEFAULT_MAX_STALENESS;
    ri->publish_every = 1;
}

void runinfo_free(RunInfo *ri) {
    free(ri->base_model);
    free(ri->task);
    json_decref(ri->trainer);
    runinfo_init(ri);
}

json_t *runinfo_to_json(const RunInfo *ri) {
    json_t *lora = json_pack("{s:i, s:f, s:s, s:b}", "rank", ri->lora_rank, "alpha", ri->lora_alpha,
                             "target_modules", ri->lora_targets, "use_rslora", ri->lora_rslora);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:I, s:I}", "format", "pail.run",
                          "run_id", ri->run_id, "base_model", ri->base_model ? ri->base_model : "", "base_sha256",
                          ri->base_sha256, "tokenizer_sha256", ri->tokenizer_sha256, "compute_dtype",
                          ri->compute_dtype, "lora", lora, "created_unix", (json_int_t)ri->created_unix,
                          "group_size", (json_int_t)ri->group_size, "groups_per_step",
                          (json_int_t)ri->groups_per_step, "max_staleness", (json_int_t)ri->max_staleness,
                          "publish_every", (json_int_t)ri->publish_every, "steps", (json_int_t)ri->steps);
    if (!j) return NULL;
    if (ri->task) json_object_set_new(j, "task", json_string(ri->task));
    if (ri->trainer) {
        // The flags for reproduction; the settings above are read from their own fields only.
        json_t *tr = json_deep_copy(ri->trainer);
        static const char *const typed[] = {"group-size", "groups-per-step", "max-staleness", "publish-every",
                                            "steps", NULL};
        for (int i = 0; tr && typed[i]; i++) json_object_del(tr, typed[i]);
        if (tr) json_object_set_new(j, "trainer", tr);
    }
    return j;
}

static int runinfo_fields(json_t *j, const char *name, RunInfo *ri, PailErr *err) {
    char field[64];
    if (get_str(j, "run_id", name, NULL, ri->run_id, sizeof ri->run_id, err) < 0 ||
        get_dup(j, "base_model", name, &ri->base_model, err) < 0 ||
        get_str(j, "base_sha256", name, NULL, ri->base_sha256, sizeof ri->base_sha256, err) < 0 ||
        get_str(j, "tokenizer_sha256", name, NULL, ri->tokenizer_sha256, sizeof ri->tokenizer_sha256, err) < 0 ||
        get_str(j, "compute_dtype", name, NULL, ri->compute_dtype, sizeof ri->compute_dtype, err) < 0 ||
        get_dup(j, "task", name, &ri->task, err) < 0 || get_i64(j, "created_unix", name, &ri->created_unix, err) < 0)
        return -1;
    json_t *lora = json_object_get(j, "lora");
    if (lora && !json_is_object(lora)) return wrong(name, "lora", lora, "an object", err);
    long rank = 0;
    if (get_long(lora, "rank", name, "lora.rank", &rank, err) < 0 ||
        get_real(lora, "alpha", name, "lora.alpha", &ri->lora_alpha, err) < 0 ||
        get_str(lora, "target_modules", name, "lora.target_modules", ri->lora_targets, sizeof ri->lora_targets,
                err) < 0 ||
        get_bool(lora, "use_rslora", name, "lora.use_rslora", &ri->lora_rslora, err) < 0)
        return -1;
    ri->lora_rank = (int)rank;
    json_t *tr = json_object_get(j, "trainer");
    if (tr && !json_is_object(tr)) return wrong(name, "trainer", tr, "an object", err);
    // The settings workers share: their own field, else (a run.json of an older
    // pail) the trainer's flag of that name.
    static const struct { const char *key, *flag; size_t off; } shared[] = {
        {"group_size", "group-size", offsetof(RunInfo, group_size)},
        {"groups_per_step", "groups-per-step", offsetof(RunInfo, groups_per_step)},
        {"max_staleness", "max-staleness", offsetof(RunInfo, max_staleness)},
        {"publish_every", "publish-every", offsetof(RunInfo, publish_every)},
        {"steps", "steps", offsetof(RunInfo, steps)},
    };
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        long *dst = (long *)((char *)ri + shared[i].off);
        if (json_object_get(j, shared[i].key)) {
            if (get_long(j, shared[i].key, name, NULL, dst, err) < 0) return -1;
        } else {
            snprintf(field, sizeof field, "trainer.%s", shared[i].flag);
            if (get_long(tr, shared[i].flag, name, field, dst, err) < 0) return -1;
        }
        if (*dst < 0)
            return err_set(err, PAIL_ERR_INVALID, "%s: field '%s' is %ld, expected >= 0", name, shared[i].key, *dst);
    }
    if (ri->publish_every < 1) ri->publish_every = 1;
    if (tr) ri->trainer = json_incref(tr);
    return 0;
}

int runinfo_parse(const char *text, size_t len, const char *name, RunInfo *ri, PailErr *err) {
    runinfo_init(ri);
    json_t *j = load_object(text, len, name, err);
    if (!j) return -1;
    int rc = runinfo_fields(j, name, ri, err);
    json_decref(j);
    if (rc < 0) runinfo_free(ri);
    return rc;
}

static int read_text(Store *st, const char *key, Buf *b, char *name, size_t cap, PailErr *err) {
    snprintf(name, cap, "%s", key);
    if (store_get(st, key, b, NULL, NULL, err) == 0) return 0;
    buf_free(b);
    return -1;
}

int runinfo_read(Store *st, RunInfo *ri, PailErr *err) {
    runinfo_init(ri);
    Buf b = {0};
    char name[STORE_MAX_KEY + 512];
    if (read_text(st, RUN_KEY_MANIFEST, &b, name, sizeof name, err) < 0) return -1;
    int rc = runinfo_parse((const char *)b.data, b.len, name, ri, err);
    buf_free(&b);
    return rc;
}

// --- trainer/progress.json ------------------------------------------------------

void progress_init(Progress *p) {
    memset(p, 0, sizeof *p);
    p->version = -1;
    p->max_staleness = -1;
    p->final_version = -1;
}

void progress_free(Progress *p) {
    json_decref(p->pending_by_version);
    json_decref(p->used_by_version);
    progress_init(p);
}

long progress_used(const Progress *p, long v) {
    char k[32];
    snprintf(k, sizeof k, "%ld", v);
    return (long)json_integer_value(json_object_get(p->used_by_version, k));
}

json_t *progress_to_json(const Progress *p) {
    json_t *pend = p->pending_by_version ? json_deep_copy(p->pending_by_version) : json_object();
    json_t *used = p->used_by_version ? json_deep_copy(p->used_by_version) : json_object();
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:b}", "format",
                          "pail.progress", "version", (json_int_t)p->version, "step", (json_int_t)p->step,
                          "consumed_shards", (json_int_t)p->consumed_shards, "dropped_shards",
                          (json_int_t)p->dropped_shards, "rejected_shards", (json_int_t)p->rejected_shards,
                          "steps_skipped", (json_int_t)p->steps_skipped, "max_staleness",
                          (json_int_t)p->max_staleness, "groups_per_step", (json_int_t)p->groups_per_step, "time",
                          (json_int_t)p->time, "pending_shards_by_version", pend, "used_shards_by_version", used,
                          "done", p->done);
    if (!j) return NULL;
    if (p->steps_target > 0) json_object_set_new(j, "steps", json_integer(p->steps_target));
    if (p->done) json_object_set_new(j, "final_version", json_integer(p->final_version));
    return j;
}

// A per-version count object: {"<version>": shards, ...}, every value an integer.
static int counts(json_t *j, const char *k, const char *name, json_t **out, PailErr *err) {
    json_t *v = json_object_get(j, k);
    if (!v || json_is_null(v)) {
        *out = json_object();
        return *out ? 0 : err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    }
    if (!json_is_object(v)) return wrong(name, k, v, "an object", err);
    const char *vk;
    json_t *n;
    json_object_foreach(v, vk, n) {
        if (!json_is_integer(n)) {
            char field[160];
            snprintf(field, sizeof field, "%s.%.100s", k, vk);
            return wrong(name, field, n, "an integer", err);
        }
    }
    *out = json_incref(v);
    return 0;
}

static int progress_fields(json_t *j, const char *name, Progress *p, PailErr *err) {
    if (get_long(j, "version", name, NULL, &p->version, err) < 0 || get_long(j, "step", name, NULL, &p->step, err) < 0 ||
        get_long(j, "consumed_shards", name, NULL, &p->consumed_shards, err) < 0 ||
        get_long(j, "dropped_shards", name, NULL, &p->dropped_shards, err) < 0 ||
        get_long(j, "rejected_shards", name, NULL, &p->rejected_shards, err) < 0 ||
        get_long(j, "steps_skipped", name, NULL, &p->steps_skipped, err) < 0 ||
        get_long(j, "groups_per_step", name, NULL, &p->groups_per_step, err) < 0 ||
        get_i64(j, "time", name, &p->time, err) < 0 || get_bool(j, "done", name, NULL, &p->done, err) < 0 ||
        get_long(j, "final_version", name, NULL, &p->final_version, err) < 0 ||
        get_long(j, "steps", name, NULL, &p->steps_target, err) < 0)
        return -1;
    // One spelling is written; "max-staleness" is read too.
    const char *ms = json_object_get(j, "max_staleness") ? "max_staleness" : "max-staleness";
    if (get_long(j, ms, name, NULL, &p->max_staleness, err) < 0) return -1;
    if (p->done && p->final_version < 0) p->final_version = p->version;
    if (counts(j, "pending_shards_by_version", name, &p->pending_by_version, err) < 0 ||
        counts(j, "used_shards_by_version", name, &p->used_by_version, err) < 0)
        return -1;
    return 0;
}

int progress_parse(const char *text, size_t len, const char *name, Progress *p, PailErr *err) {
    progress_init(p);
    json_t *j = load_object(text, len, name, err);
    if (!j) return -1;
    int rc = progress_fields(j, name, p, err);
    json_decref(j);
    if (rc < 0) progress_free(p);
    return rc;
}

int progress_read(Store *st, Progress *p, PailErr *err) {
    progress_init(p);
    Buf b = {0};
    char name[STORE_MAX_KEY + 512];
    if (read_text(st, RUN_KEY_PROGRESS, &b, name, sizeof name, err) < 0) return -1;
    int rc = progress_parse((const char *)b.data, b.len, name, p, err);
    buf_free(&b);
    return rc;
}

int progress_write(Store *st, const Progress *p, PailErr *err) {
    json_t *j = progress_to_json(p);
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for its JSON", RUN_KEY_PROGRESS);
    StorePutOpts opt = {.content_type = "application/json"};
    int rc = store_put(st, RUN_KEY_PROGRESS, text, strlen(text), &opt, err);
    free(text);
    return rc;
}
