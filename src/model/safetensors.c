// safetensors reader (mmap + validating header parser), sharded sets, dtype
// conversion and the atomic writer. See safetensors.h for the contracts. The
// header parser only trusts what it has checked: every offset and size is
// validated against the file before a tensor's data pointer is formed.
#include "model/safetensors.h"
#include "dtype_cpu.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/fsutil.h"

static const struct { const char *name; size_t size; } dtypes[ST_DTYPE_COUNT] = {
    [ST_DTYPE_BOOL] = {"BOOL", 1},       [ST_DTYPE_U8] = {"U8", 1},
    [ST_DTYPE_I8] = {"I8", 1},           [ST_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [ST_DTYPE_F8_E5M2] = {"F8_E5M2", 1}, [ST_DTYPE_I16] = {"I16", 2},
    [ST_DTYPE_U16] = {"U16", 2},         [ST_DTYPE_F16] = {"F16", 2},
    [ST_DTYPE_BF16] = {"BF16", 2},       [ST_DTYPE_I32] = {"I32", 4},
    [ST_DTYPE_U32] = {"U32", 4},         [ST_DTYPE_F32] = {"F32", 4},
    [ST_DTYPE_F64] = {"F64", 8},         [ST_DTYPE_I64] = {"I64", 8},
    [ST_DTYPE_U64] = {"U64", 8},
};

const char *safetensors_dtype_name(SafeTensorsDtype d) {
    return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].name : "?";
}
size_t safetensors_dtype_size(SafeTensorsDtype d) {
    return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].size : 0;
}
int safetensors_dtype_parse(const char *s, SafeTensorsDtype *out) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(s, dtypes[i].name)) { *out = (SafeTensorsDtype)i; return 0; }
    return -1;
}

// ---- dtype conversion ----

// The scalar conversions are the kernels' (kernels/dtype_cpu.h, header-only):
// one definition of the rounding for the loader, the writers and the kernels.
float bf16_to_f32(uint16_t b) { return dt_bf16_to_f32(b); }
float f16_to_f32(uint16_t h) { return dt_f16_to_f32(h); }
uint16_t f32_to_bf16(float f) { return dt_f32_to_bf16(f); }
uint16_t f32_to_f16(float f) { return dt_f32_to_f16(f); }

int safetensors_to_f32(float *dst, const void *src, SafeTensorsDtype dtype, size_t n) {
    const uint8_t *p = src;
    switch (dtype) {
    case ST_DTYPE_F32: memcpy(dst, src, n * 4); return 0;
    case ST_DTYPE_BF16:
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_DTYPE_F16:
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    default: return -1;
    }
}

// ---- header parser ----

static void tensors_free(SafeTensors *st) {
    for (int i = 0; i < st->n; i++) free(st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_meta; i++) { free(st->meta_keys[i]); free(st->meta_vals[i]); }
    free(st->meta_keys);
    free(st->meta_vals);
    free(st->path);
    st->tensors = NULL;
    st->meta_keys = st->meta_vals = NULL;
    st->path = NULL;
    st->n = st->n_meta = 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const SafeTensor *)a)->name, ((const SafeTensor *)b)->name);
}
static int cmp_offset(const void *a, const void *b) {
    const SafeTensor *x = *(const SafeTensor *const *)a, *y = *(const SafeTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

// Reads "dtype", "shape", "data_offsets" of one entry into t (name already set).
static int parse_entry(SafeTensor *t, json_t *v, uint64_t data_len, const char *what, PailErr *err) {
    const char *nm = t->name;
    if (!json_is_object(v))
        return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': header entry is not an object", what, nm);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': unknown field '%s'", what, nm, k);
    }
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': 'dtype' missing or not a string", what, nm);
    if (safetensors_dtype_parse(json_string_value(jd), &t->dtype) < 0)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: tensor '%s': unknown dtype '%.32s'", what, nm,
                       json_string_value(jd));
    if (!json_is_array(js))
        return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': 'shape' missing or not an array", what, nm);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': %zu dimensions (at most %d)", what, nm,
                       nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t nelem = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                           what, nm, i);
        t->shape[i] = json_integer_value(d);
        if (__builtin_mul_overflow(nelem, (uint64_t)t->shape[i], &nelem))
            return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': shape product overflows 64 bits", what, nm);
    }
    t->nelem = nelem;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': 'data_offsets' is not [begin, end]", what, nm);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b)
        return err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': data_offsets [%lld, %lld] are not 0 <= begin <= end",
                       what, nm, (long long)b, (long long)e);
    if ((uint64_t)e > data_len)
        return err_set(err, PAIL_ERR_INVALID,
                       "%s: tensor '%s': data_offsets end %lld is past the data section (%llu bytes)", what, nm,
                       (long long)e, (unsigned long long)data_len);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    uint64_t nbytes;
    if (__builtin_mul_overflow(nelem, (uint64_t)safetensors_dtype_size(t->dtype), &nbytes) ||
        nbytes != t->end - t->begin)
        return err_set(err, PAIL_ERR_INVALID,
                       "%s: tensor '%s': shape holds %llu elements of %s but data_offsets span %llu bytes", what,
                       nm, (unsigned long long)nelem, safetensors_dtype_name(t->dtype),
                       (unsigned long long)(t->end - t->begin));
    return 0;
}

static int parse_metadata(SafeTensors *st, json_t *m, const char *what, PailErr *err) {
    if (!json_is_object(m))
        return err_set(err, PAIL_ERR_INVALID, "%s: '__metadata__' is not an object of strings", what);
    size_t n = json_object_size(m);
    st->meta_keys = calloc(n ? n : 1, sizeof(char *));
    st->meta_vals = calloc(n ? n : 1, sizeof(char *));
    if (!st->meta_keys || !st->meta_vals) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", what);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return err_set(err, PAIL_ERR_INVALID, "%s: '__metadata__' value of '%.64s' is not a string", what, k);
        st->meta_keys[st->n_meta] = strdup(k);
        st->meta_vals[st->n_meta] = strdup(json_string_value(v));
        st->n_meta++;
        if (!st->meta_keys[st->n_meta - 1] || !st->meta_vals[st->n_meta - 1])
            return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", what);
    }
    return 0;
}

static int parse_header(SafeTensors *st, json_t *root, uint64_t data_len, const char *what, PailErr *err) {
    size_t cap = json_object_size(root);
    st->tensors = calloc(cap ? cap : 1, sizeof(SafeTensor));
    if (!st->tensors) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for %zu tensors", what, cap);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (!strcmp(k, "__metadata__")) {
            if (parse_metadata(st, v, what, err) < 0) return -1;
            continue;
        }
        SafeTensor *t = &st->tensors[st->n];
        if (!(t->name = strdup(k))) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", what);
        st->n++;
        if (parse_entry(t, v, data_len, what, err) < 0) return -1;
    }
    // The reference requires the tensors to tile the data section exactly: no
    // overlap (two tensors aliasing bytes), no gap, nothing after the last one.
    SafeTensor **byoff = malloc((st->n ? st->n : 1) * sizeof *byoff);
    if (!byoff) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; i < st->n; i++) byoff[i] = &st->tensors[i];
    qsort(byoff, st->n, sizeof *byoff, cmp_offset);
    uint64_t at = 0;
    for (int i = 0; i < st->n; i++) {
        SafeTensor *t = byoff[i];
        if (t->begin < at) {
            err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s'", what,
                    t->name, (unsigned long long)t->begin, (unsigned long long)t->end, byoff[i - 1]->name);
            free(byoff);
            return -1;
        }
        if (t->begin > at) {
            err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': data_offsets begin %llu leaves a gap after byte %llu",
                    what, t->name, (unsigned long long)t->begin, (unsigned long long)at);
            free(byoff);
            return -1;
        }
        at = t->end;
    }
    free(byoff);
    if (at != data_len)
        return err_set(err, PAIL_ERR_INVALID, "%s: tensors cover %llu bytes but the data section holds %llu", what,
                       (unsigned long long)at, (unsigned long long)data_len);
    qsort(st->tensors, st->n, sizeof(SafeTensor), cmp_name);
    return 0;
}

int safetensors_parse(SafeTensors *out, const uint8_t *bytes, size_t len, const char *what, PailErr *err) {
    memset(out, 0, sizeof *out);
    if (len < 8)
        return err_set(err, PAIL_ERR_INVALID, "%s: %zu bytes, shorter than the 8-byte header length", what, len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | bytes[i];
    if (hl > len - 8)
        return err_set(err, PAIL_ERR_INVALID, "%s: header length %llu is larger than the file (%zu bytes)", what,
                       (unsigned long long)hl, len);
    if (hl > ST_MAX_HEADER)
        return err_set(err, PAIL_ERR_INVALID, "%s: header length %llu exceeds the %u-byte limit", what,
                       (unsigned long long)hl, ST_MAX_HEADER);
    if (hl < 2 || bytes[8] != '{')
        return err_set(err, PAIL_ERR_INVALID, "%s: header does not start with '{' (not a safetensors file?)", what);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)bytes + 8, hl, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return err_set(err, PAIL_ERR_INVALID, "%s: header is not valid JSON: %s (line %d column %d)", what,
                       jerr.text, jerr.line, jerr.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(err, PAIL_ERR_INVALID, "%s: header is not a JSON object", what);
    }
    out->bytes = bytes;
    out->len = len;
    out->header_len = hl;
    int rc = parse_header(out, root, len - 8 - hl, what, err);
    json_decref(root);
    if (rc == 0 && !(out->path = strdup(what))) rc = err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", what);
    if (rc < 0) {
        tensors_free(out);
        memset(out, 0, sizeof *out);
        return -1;
    }
    const uint8_t *data = bytes + 8 + hl;
    for (int i = 0; i < out->n; i++) out->tensors[i].data = data + out->tensors[i].begin;
    return 0;
}

int safetensors_open(SafeTensors *out, const char *path, PailErr *err) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno == ENOENT ? PAIL_ERR_NOT_FOUND : PAIL_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(err, PAIL_ERR_INVALID, "%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        close(fd);
        return err_set(err, PAIL_ERR_INVALID, "%s: %zu bytes, shorter than the 8-byte header length", path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return err_set(err, PAIL_ERR_IO, "mmap %s (%zu bytes): %s", path, len, strerror(e));
    if (safetensors_parse(out, map, len, path, err) < 0) {
        munmap(map, len);
        return -1;
    }
    out->map_len = len;
    return 0;
}

void safetensors_close(SafeTensors *st) {
    if (!st) return;
    if (st->map_len) munmap((void *)st->bytes, st->map_len);
    tensors_free(st);
    memset(st, 0, sizeof *st);
}

const SafeTensor *safetensors_find(const SafeTensors *st, const char *name) {
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(name, st->tensors[mid].name);
        if (c == 0) return &st->tensors[mid];
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    return NULL;
}

const char *safetensors_meta(const SafeTensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_vals[i];
    return NULL;
}

// ---- sharded sets ----

void safetensors_set_close(SafeTensorsSet *set) {
    if (!set) return;
    for (int i = 0; i < set->nfiles; i++) {
        safetensors_close(&set->files[i]);
        free(set->file_names[i]);
    }
    free(set->files);
    free(set->file_names);
    free(set->dir);
    memset(set, 0, sizeof *set);
}

const SafeTensor *safetensors_set_find(const SafeTensorsSet *set, const char *name, int *file_index) {
    for (int i = 0; i < set->nfiles; i++) {
        const SafeTensor *t = safetensors_find(&set->files[i], name);
        if (t) {
            if (file_index) *file_index = i;
            return t;
        }
    }
    return NULL;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int set_add_file(SafeTensorsSet *set, const char *name, PailErr *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", set->dir, name);
    if (!(set->file_names[set->nfiles] = strdup(name))) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    if (safetensors_open(&set->files[set->nfiles], path, err) < 0) {
        free(set->file_names[set->nfiles]);
        return -1;
    }
    set->nfiles++;
    return 0;
}

// weight_map: {"tensor name": "shard file name"}; the shard names are the set's files.
static int set_open_index(SafeTensorsSet *set, const char *ipath, PailErr *err) {
    json_error_t jerr;
    json_t *root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return err_set(err, PAIL_ERR_INVALID, "%s: not valid JSON: %s (line %d)", ipath, jerr.text, jerr.line);
    json_t *wm = json_object_get(root, "weight_map");
    int rc = -1;
    char **names = NULL;
    size_t nn = 0;
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        err_set(err, PAIL_ERR_INVALID, "%s: 'weight_map' missing or empty", ipath);
        goto out;
    }
    names = calloc(json_object_size(wm), sizeof *names);
    if (!names) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *f = json_string_value(v);
        if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
            err_set(err, PAIL_ERR_INVALID, "%s: weight_map['%s'] is not a file name in the model folder", ipath, k);
            goto out;
        }
        names[nn++] = (char *)f;
    }
    qsort(names, nn, sizeof *names, cmp_str);
    size_t nu = 0;
    for (size_t i = 0; i < nn; i++)
        if (nu == 0 || strcmp(names[nu - 1], names[i])) names[nu++] = names[i];
    set->files = calloc(nu, sizeof *set->files);
    set->file_names = calloc(nu, sizeof *set->file_names);
    if (!set->files || !set->file_names) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    for (size_t i = 0; i < nu; i++)
        if (set_add_file(set, names[i], err) < 0) { err_wrap(err, "shard named in %s", ipath); goto out; }
    // Every mapped tensor is in its shard; every shard tensor is mapped to that shard.
    json_object_foreach(wm, k, v) {
        int fi = -1;
        for (int i = 0; i < set->nfiles; i++)
            if (!strcmp(set->file_names[i], json_string_value(v))) fi = i;
        if (!safetensors_find(&set->files[fi], k)) {
            err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' is mapped to %s but that shard does not hold it", ipath,
                    k, set->file_names[fi]);
            goto out;
        }
    }
    for (int i = 0; i < set->nfiles; i++)
        for (int j = 0; j < set->files[i].n; j++) {
            const char *tn = set->files[i].tensors[j].name;
            const char *f = json_string_value(json_object_get(wm, tn));
            if (!f || strcmp(f, set->file_names[i])) {
                err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' in shard %s is %s", ipath, tn, set->file_names[i],
                        f ? "mapped to another shard (duplicate)" : "not in the weight_map");
                goto out;
            }
        }
    rc = 0;
out:
    free(names);
    json_decref(root);
    return rc;
}

int safetensors_set_open(SafeTensorsSet *set, const char *dir, PailErr *err) {
    memset(set, 0, sizeof *set);
    if (!(set->dir = strdup(dir))) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    char ipath[4096], spath[4096];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    snprintf(spath, sizeof spath, "%s/model.safetensors", dir);
    int rc;
    if (access(ipath, F_OK) == 0) {
        rc = set_open_index(set, ipath, err);
    } else if (access(spath, F_OK) == 0) {
        set->files = calloc(1, sizeof *set->files);
        set->file_names = calloc(1, sizeof *set->file_names);
        rc = (!set->files || !set->file_names) ? err_set(err, PAIL_ERR_NOMEM, "out of memory")
                                               : set_add_file(set, "model.safetensors", err);
    } else {
        rc = err_set(err, PAIL_ERR_NOT_FOUND,
                     "%s: no model.safetensors or model.safetensors.index.json (pail reads safetensors only; "
                     "convert .bin/.pth checkpoints with transformers' save_pretrained)", dir);
    }
    if (rc < 0) safetensors_set_close(set);
    return rc;
}

// ---- writer ----

static int json_put_string(Buf *b, const char *s) {
    if (buf_append(b, "\"", 1) < 0) return -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            if (buf_append(b, e, 2) < 0) return -1;
        } else if (*p < 0x20) {
            if (buf_printf(b, "\\u%04x", *p) < 0) return -1;
        } else if (buf_append(b, p, 1) < 0) {
            return -1;
        }
    }
    return buf_append(b, "\"", 1);
}

static int cmp_item(const void *a, const void *b) {
    return strcmp((*(const SafeTensorsWriteItem *const *)a)->name, (*(const SafeTensorsWriteItem *const *)b)->name);
}

static int write_all(int fd, const void *data, size_t len) {
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int safetensors_write(const char *path, const SafeTensorsWriteItem *items, int n,
                      const char *const *meta_keys, const char *const *meta_vals, int nmeta, PailErr *err) {
    const SafeTensorsWriteItem **order = malloc((n ? n : 1) * sizeof *order);
    Buf h = {0};
    int rc = -1, fd = -1;
    char tmp[4200];
    tmp[0] = 0;
    if (!order) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) order[i] = &items[i];
    qsort(order, n, sizeof *order, cmp_item);
    int bad = 0;
    bad |= buf_append(&h, "{", 1);
    if (nmeta > 0) {
        bad |= buf_append(&h, "\"__metadata__\":{", 16);
        for (int i = 0; i < nmeta; i++) {
            if (i) bad |= buf_append(&h, ",", 1);
            bad |= json_put_string(&h, meta_keys[i]);
            bad |= buf_append(&h, ":", 1);
            bad |= json_put_string(&h, meta_vals[i]);
        }
        bad |= buf_append(&h, "}", 1);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const SafeTensorsWriteItem *t = order[i];
        if (i && !strcmp(t->name, order[i - 1]->name)) {
            err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s' given twice", path, t->name);
            goto out;
        }
        if (!strcmp(t->name, "__metadata__") || (unsigned)t->dtype >= ST_DTYPE_COUNT || t->ndim < 0 ||
            t->ndim > ST_MAX_DIMS) {
            err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': bad name, dtype or rank", path, t->name);
            goto out;
        }
        uint64_t ne = 1, nb;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0 || __builtin_mul_overflow(ne, (uint64_t)t->shape[d], &ne)) {
                err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': shape[%d] = %lld is negative or overflows", path,
                        t->name, d, (long long)t->shape[d]);
                goto out;
            }
        if (__builtin_mul_overflow(ne, (uint64_t)safetensors_dtype_size(t->dtype), &nb) ||
            __builtin_add_overflow(off, nb, &(uint64_t){0})) {
            err_set(err, PAIL_ERR_INVALID, "%s: tensor '%s': size overflows", path, t->name);
            goto out;
        }
        if (nmeta > 0 || i) bad |= buf_append(&h, ",", 1);
        bad |= json_put_string(&h, t->name);
        bad |= buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", safetensors_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) bad |= buf_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        bad |= buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                          (unsigned long long)(off + nb));
        off += nb;
    }
    bad |= buf_append(&h, "}", 1);
    while (h.len % 8) bad |= buf_append(&h, " ", 1);  // so the data section starts 8-aligned
    if (bad) { err_set(err, PAIL_ERR_NOMEM, "%s: out of memory building the header", path); goto out; }

    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { err_set(err, PAIL_ERR_IO, "%s: %s", tmp, strerror(errno)); tmp[0] = 0; goto out; }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    if (write_all(fd, len8, 8) < 0 || write_all(fd, h.data, h.len) < 0) goto ioerr;
    for (int i = 0; i < n; i++) {
        uint64_t ne = 1;
        for (int d = 0; d < order[i]->ndim; d++) ne *= (uint64_t)order[i]->shape[d];
        if (write_all(fd, order[i]->data, ne * safetensors_dtype_size(order[i]->dtype)) < 0) goto ioerr;
    }
    if (fsync(fd) < 0) goto ioerr;
    if (close(fd) < 0) { fd = -1; goto ioerr; }
    fd = -1;
    if (rename(tmp, path) < 0) goto ioerr;
    tmp[0] = 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    rc = fs_fsync_dir(dirname(dir), err);
    goto out;
ioerr:
    err_set(err, PAIL_ERR_IO, "write %s: %s", path, strerror(errno));
out:
    if (fd >= 0) close(fd);
    if (tmp[0]) unlink(tmp);
    buf_free(&h);
    free(order);
    return rc;
}
