// Prompt datasets (see dataset.h): JSON-lines parsing with file:line errors,
// loading from a local path or a store URL, and the two samplers (per-worker
// seeded shuffle, k-of-n partition).
#include "rollout/dataset.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/fsutil.h"
#include "core/rng.h"
#include "core/sha256.h"

// One row: an object with exactly one of "prompt" (non-empty string) or
// "messages" (non-empty array of objects with a string "role"; "content" a string, a list of
// content blocks, null or absent, as in a tool-calling assistant turn), and "tools" an array if given.
// any: an object with neither is a row too (an environment program reads it).
static int row_check(DatasetRow *r, const char *name, bool any, PailErr *err) {
    json_t *o = r->fields;
    long long ln = (long long)r->line;
    if (!json_is_object(o)) return err_set(err, PAIL_ERR_INVALID, "%s:%lld: a row must be a JSON object", name, ln);
    json_t *p = json_object_get(o, "prompt"), *m = json_object_get(o, "messages");
    if (p && m) return err_set(err, PAIL_ERR_INVALID, "%s:%lld: both \"prompt\" and \"messages\" (give one)", name, ln);
    if (!p && !m) return any ? 0 : err_set(err, PAIL_ERR_INVALID, "%s:%lld: neither \"prompt\" nor \"messages\"", name, ln);
    if (p) {
        if (!json_is_string(p)) return err_set(err, PAIL_ERR_INVALID, "%s:%lld: \"prompt\" is not a string", name, ln);
        if (json_string_length(p) == 0) return err_set(err, PAIL_ERR_INVALID, "%s:%lld: \"prompt\" is empty", name, ln);
        r->prompt = json_string_value(p);
        return 0;
    }
    if (!json_is_array(m) || json_array_size(m) == 0)
        return err_set(err, PAIL_ERR_INVALID, "%s:%lld: \"messages\" is not a non-empty array", name, ln);
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) {
        if (!json_is_object(msg))
            return err_set(err, PAIL_ERR_INVALID, "%s:%lld: \"messages\"[%zu] is not an object", name, ln, i);
        if (!json_is_string(json_object_get(msg, "role")))
            return err_set(err, PAIL_ERR_INVALID, "%s:%lld: \"messages\"[%zu] has no string \"role\"", name, ln, i);
        json_t *c = json_object_get(msg, "content");
        if (c && !json_is_string(c) && !json_is_array(c) && !json_is_null(c))
            return err_set(err, PAIL_ERR_INVALID, "%s:%lld: \"messages\"[%zu] \"content\" is not a string, a list or null",
                           name, ln, i);
    }
    json_t *tools = json_object_get(o, "tools");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return err_set(err, PAIL_ERR_INVALID, "%s:%lld: \"tools\" is not an array", name, ln);
    r->messages = m;
    r->tools = json_is_array(tools) ? tools : NULL;
    return 0;
}

static int parse(Dataset **out, const char *text, size_t len, const char *name, bool any, PailErr *err) {
    *out = NULL;
    Dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    snprintf(ds->source, sizeof ds->source, "%s", name);
    sha256_hex(text, len, ds->sha256);
    int64_t cap = 0;
    size_t pos = 0;
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) pos = 3;  // a UTF-8 byte-order mark
    for (int64_t line = 1; pos < len; line++) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (n && s[n - 1] == '\r') n--;  // CRLF files
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t')) k++;
        if (k == n) continue;  // blank lines (a trailing newline, spacing) are not rows
        if (memchr(s, 0, n)) {
            dataset_free(ds);
            return err_set(err, PAIL_ERR_INVALID, "%s:%lld: NUL byte in the line", name, (long long)line);
        }
        json_error_t je;
        json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
        if (!o) {
            dataset_free(ds);
            return err_set(err, PAIL_ERR_INVALID, "%s:%lld: bad JSON at column %d: %s", name, (long long)line,
                           je.column, je.text);
        }
        if (ds->n == cap) {
            int64_t nc = cap ? cap * 2 : 256;
            DatasetRow *nr = realloc(ds->rows, (size_t)nc * sizeof *nr);
            if (!nr) {
                json_decref(o);
                dataset_free(ds);
                return err_set(err, PAIL_ERR_NOMEM, "%s:%lld: out of memory", name, (long long)line);
            }
            ds->rows = nr;
            cap = nc;
        }
        DatasetRow *r = &ds->rows[ds->n++];
        *r = (DatasetRow){.fields = o, .line = line};
        if (row_check(r, name, any, err) < 0) {
            dataset_free(ds);
            return -1;
        }
    }
    if (ds->n == 0) {
        dataset_free(ds);
        return err_set(err, PAIL_ERR_INVALID, "%s: empty dataset (no JSON lines)", name);
    }
    *out = ds;
    return 0;
}

int dataset_parse(Dataset **out, const char *text, size_t len, const char *name, PailErr *err) {
    return parse(out, text, len, name, false, err);
}

static int load_store(Dataset **out, Store *st, const char *key, bool any, PailErr *err) {
    *out = NULL;
    char name[STORE_MAX_KEY + 256];
    store_key_url(st, key, name, sizeof name);
    Buf b = {0};
    if (store_get(st, key, &b, NULL, NULL, err) < 0) {
        buf_free(&b);
        return err_wrap(err, "dataset %s", name);
    }
    int rc = parse(out, b.len ? (const char *)b.data : "", b.len, name, any, err);
    buf_free(&b);
    return rc;
}

int dataset_load_store(Dataset **out, Store *st, const char *key, PailErr *err) {
    return load_store(out, st, key, false, err);
}

static int load(Dataset **out, const char *path_or_url, bool any, PailErr *err) {
    *out = NULL;
    if (!strncmp(path_or_url, "file://", 7) || !strncmp(path_or_url, "s3://", 5)) {
        char root[STORE_MAX_KEY + 64];
        const char *key = NULL;
        if (store_split_url(path_or_url, root, sizeof root, &key, err) < 0) return err_wrap(err, "dataset");
        if (!*key) return err_set(err, PAIL_ERR_INVALID, "dataset URL '%s': no key after the bucket", path_or_url);
        Store *st;
        if (store_open(&st, root, NULL, err) < 0) return err_wrap(err, "dataset %s", path_or_url);
        int rc = load_store(out, st, key, any, err);
        store_close(st);
        return rc;
    }
    if (strstr(path_or_url, "://"))
        return err_set(err, PAIL_ERR_INVALID, "dataset '%s': use a local path, file:///abs/file.jsonl or s3://bucket/key", path_or_url);
    Buf b = {0};
    if (fs_read_file(path_or_url, &b, err) < 0) {
        buf_free(&b);
        return err_wrap(err, "dataset");
    }
    int rc = parse(out, b.len ? (const char *)b.data : "", b.len, path_or_url, any, err);
    buf_free(&b);
    return rc;
}

int dataset_load(Dataset **out, const char *path_or_url, PailErr *err) { return load(out, path_or_url, false, err); }
int dataset_load_objects(Dataset **out, const char *path_or_url, PailErr *err) {
    return load(out, path_or_url, true, err);
}

void dataset_free(Dataset *ds) {
    if (!ds) return;
    for (int64_t i = 0; i < ds->n; i++) json_decref(ds->rows[i].fields);
    free(ds->rows);
    free(ds);
}

int dataset_check_field(const Dataset *ds, const char *field, const char *needed_by, PailErr *err) {
    int64_t miss = 0;
    char lines[200] = "";
    size_t used = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        json_t *v = json_object_get(ds->rows[i].fields, field);
        if (json_is_string(v) || json_is_number(v)) continue;
        // the first misses' line numbers, as many as fit the message ("..." after them)
        if (used < sizeof lines - 24)
            used += (size_t)snprintf(lines + used, sizeof lines - used, "%s%lld", miss ? ", " : "", (long long)ds->rows[i].line);
        else if (used < sizeof lines) {
            snprintf(lines + used, sizeof lines - used, ", ...");
            used = sizeof lines;  // the list is closed
        }
        miss++;
    }
    if (!miss) return 0;
    return err_set(err, PAIL_ERR_INVALID, "%s: %lld of %lld rows lack \"%s\" as a string or a number%s%s%s: line%s %s",
                   ds->source, (long long)miss, (long long)ds->n, field, needed_by ? " (needed by " : "",
                   needed_by ? needed_by : "", needed_by ? ")" : "", miss > 1 ? "s" : "", lines);
}

// ---- samplers ----

// Epoch e's permutation depends only on (seed, stream, e): Fisher-Yates from the
// identity, so seeking to any epoch costs one shuffle.
static void shuffle_epoch(DatasetSampler *s) {
    int64_t n = s->ds->n;
    uint64_t key[2] = {s->stream, (uint64_t)s->epoch};
    Rng r;
    rng_seed(&r, s->seed, hash64(key, sizeof key));
    for (int64_t i = 0; i < n; i++) s->order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int64_t t = s->order[i];
        s->order[i] = s->order[j];
        s->order[j] = t;
    }
}

int dataset_sampler_init(DatasetSampler *s, const Dataset *ds, uint64_t seed, const char *worker_id,
                         PailErr *err) {
    memset(s, 0, sizeof *s);
    s->ds = ds;
    s->mode = DATASET_SHUFFLE;
    s->seed = seed;
    s->stream = hash64(worker_id, strlen(worker_id));
    s->order = malloc((size_t)ds->n * sizeof *s->order);
    if (!s->order) return err_set(err, PAIL_ERR_NOMEM, "dataset %s: out of memory for the sampler", ds->source);
    shuffle_epoch(s);
    return 0;
}

int dataset_sampler_init_partition(DatasetSampler *s, const Dataset *ds, int64_t index, int64_t count,
                                   PailErr *err) {
    memset(s, 0, sizeof *s);
    if (count < 1 || index < 0 || index >= count)
        return err_set(err, PAIL_ERR_INVALID, "dataset partition: worker index %lld of %lld workers (need 0 <= index < count)",
                       (long long)index, (long long)count);
    if (index >= ds->n)
        return err_set(err, PAIL_ERR_INVALID, "dataset %s: partition %lld of %lld is empty (the dataset has %lld rows)",
                       ds->source, (long long)index, (long long)count, (long long)ds->n);
    s->ds = ds;
    s->mode = DATASET_PARTITION;
    s->index = index;
    s->count = count;
    return 0;
}

// Rows in this worker's partition: index, index+count, ... < n.
static int64_t partition_size(const DatasetSampler *s) { return (s->ds->n - s->index + s->count - 1) / s->count; }

int64_t dataset_sampler_next(DatasetSampler *s) {
    int64_t row;
    if (s->mode == DATASET_PARTITION) {
        row = s->index + s->pos * s->count;
        if (++s->pos == partition_size(s)) { s->pos = 0; s->epoch++; }
    } else {
        row = s->order[s->pos];
        if (++s->pos == s->ds->n) {
            s->pos = 0;
            s->epoch++;
            shuffle_epoch(s);
        }
    }
    s->drawn++;
    return row;
}

void dataset_sampler_seek(DatasetSampler *s, int64_t drawn) {
    if (drawn < 0) drawn = 0;
    int64_t m = s->mode == DATASET_PARTITION ? partition_size(s) : s->ds->n;
    int64_t epoch = drawn / m;
    s->pos = drawn % m;
    s->drawn = drawn;
    if (s->mode == DATASET_SHUFFLE && epoch != s->epoch) {
        s->epoch = epoch;
        shuffle_epoch(s);
    }
    s->epoch = epoch;
}

void dataset_sampler_free(DatasetSampler *s) {
    free(s->order);
    s->order = NULL;
}
