// GGUF reader (see gguf.h): one pass over (pointer, length) with a bounds-checked
// cursor, every count checked against the bytes left before anything is
// allocated for it. Little-endian hosts only (as the rest of pail).
#include "model/gguf.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    const char *what;
    PailErr *err;
} Cur;

static int need(Cur *c, uint64_t n, const char *thing) {
    if (n > c->len - c->pos)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: %s at byte %zu runs past the end of the file (%zu bytes)",
                       c->what, thing, c->pos, c->len);
    return 0;
}

static int rd(Cur *c, void *dst, size_t n, const char *thing) {
    if (need(c, n, thing) < 0) return -1;
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(Cur *c, uint32_t *v, const char *thing) { return rd(c, v, 4, thing); }
static int rd_u64(Cur *c, uint64_t *v, const char *thing) { return rd(c, v, 8, thing); }

// A string: u64 length then bytes. *s borrows the bytes.
static int rd_str(Cur *c, const uint8_t **s, uint64_t *n, uint64_t max, const char *thing) {
    if (rd_u64(c, n, thing) < 0) return -1;
    if (*n > max)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: %s at byte %zu is %llu bytes long (at most %llu)",
                       c->what, thing, c->pos - 8, (unsigned long long)*n, (unsigned long long)max);
    if (need(c, *n, thing) < 0) return -1;
    *s = c->p + c->pos;
    c->pos += *n;
    return 0;
}

static const size_t scalar_size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static const char *value_type_name(uint32_t t) {
    static const char *n[] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                              "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
    return t < GGUF_TYPE_COUNT ? n[t] : "?";
}

// Skips one value of type t (its bytes validated), depth = arrays around it.
static int skip_value(Cur *c, uint32_t t, int depth, const char *key) {
    if (t >= GGUF_TYPE_COUNT)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: key '%s' has unknown value type %u", c->what, key, t);
    if (t == GGUF_TYPE_STRING) {
        const uint8_t *s;
        uint64_t n;
        return rd_str(c, &s, &n, GGUF_MAX_STRING, "a string value");
    }
    if (t == GGUF_TYPE_BOOL) {
        if (need(c, 1, "a bool value") < 0) return -1;
        if (c->p[c->pos] > 1)
            return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: key '%s' has bool value %u (0 or 1)", c->what, key,
                           c->p[c->pos]);
        c->pos++;
        return 0;
    }
    if (t != GGUF_TYPE_ARRAY) {
        if (need(c, scalar_size[t], "a value") < 0) return -1;
        c->pos += scalar_size[t];
        return 0;
    }
    if (depth >= GGUF_MAX_NEST)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: key '%s' nests arrays more than %d deep", c->what, key,
                       GGUF_MAX_NEST);
    uint32_t et;
    uint64_t n;
    if (rd_u32(c, &et, "an array's element type") < 0 || rd_u64(c, &n, "an array's length") < 0) return -1;
    if (et >= GGUF_TYPE_COUNT)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: key '%s' is an array of unknown type %u", c->what, key, et);
    if (n > GGUF_MAX_ARRAY)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: key '%s' is an array of %llu elements (at most %u)", c->what,
                       key, (unsigned long long)n, GGUF_MAX_ARRAY);
    // Every element takes at least its scalar size (8 for a string or an array's count).
    size_t min = et == GGUF_TYPE_STRING ? 8 : et == GGUF_TYPE_ARRAY ? 12 : scalar_size[et];
    if (n > (c->len - c->pos) / min)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: key '%s' is an array of %llu %s, more than the file holds",
                       c->what, key, (unsigned long long)n, value_type_name(et));
    if (et != GGUF_TYPE_STRING && et != GGUF_TYPE_ARRAY && et != GGUF_TYPE_BOOL) {
        c->pos += n * min;
        return 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if (skip_value(c, et, depth + 1, key) < 0) return -1;
    return 0;
}

static const struct { GgmlType t; const char *name; size_t block, bytes; } types[] = {
    {GGML_TYPE_F32, "F32", 1, 4},      {GGML_TYPE_F16, "F16", 1, 2},      {GGML_TYPE_BF16, "BF16", 1, 2},
    {GGML_TYPE_Q4_0, "Q4_0", 32, 18},  {GGML_TYPE_Q4_1, "Q4_1", 32, 20},  {GGML_TYPE_Q5_0, "Q5_0", 32, 22},
    {GGML_TYPE_Q5_1, "Q5_1", 32, 24},  {GGML_TYPE_Q8_0, "Q8_0", 32, 34},  {GGML_TYPE_Q2_K, "Q2_K", 256, 84},
    {GGML_TYPE_Q3_K, "Q3_K", 256, 110}, {GGML_TYPE_Q4_K, "Q4_K", 256, 144}, {GGML_TYPE_Q5_K, "Q5_K", 256, 176},
    {GGML_TYPE_Q6_K, "Q6_K", 256, 210}, {GGML_TYPE_MXFP4, "MXFP4", 32, 17},
};

const char *gguf_type_name(GgmlType t) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].t == t) return types[i].name;
    return "?";
}

int gguf_type_block(GgmlType t, size_t *block_elems, size_t *block_bytes) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].t == t) {
            *block_elems = types[i].block, *block_bytes = types[i].bytes;
            return 0;
        }
    return -1;
}

static int cmp_offset(const void *a, const void *b) {
    const GgufTensor *x = *(GgufTensor *const *)a, *y = *(GgufTensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Names must be unique: sort pointers to them and compare neighbours.
static int check_unique(char **names, int n, const char *what, const char *thing, PailErr *err) {
    if (n < 2) return 0;
    char **s = malloc((size_t)n * sizeof *s);
    if (!s) return err_set(err, PAIL_ERR_NOMEM, "gguf %s: out of memory", what);
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_str);
    int rc = 0;
    for (int i = 1; i < n; i++)
        if (!strcmp(s[i - 1], s[i])) {
            rc = err_set(err, PAIL_ERR_INVALID, "gguf %s: %s '%s' appears twice", what, thing, s[i]);
            break;
        }
    free(s);
    return rc;
}

// An owned NUL-terminated copy; a name with a NUL in it is refused.
static char *dup_name(Cur *c, const uint8_t *s, uint64_t n, const char *thing) {
    if (memchr(s, 0, n)) {
        err_set(c->err, PAIL_ERR_INVALID, "gguf %s: %s at byte %zu contains a NUL byte", c->what, thing,
                (size_t)(s - c->p));
        return NULL;
    }
    char *d = malloc(n + 1);
    if (!d) {
        err_set(c->err, PAIL_ERR_NOMEM, "gguf %s: out of memory", c->what);
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void free_parts(GgufFile *g) {
    for (int i = 0; i < g->nkv; i++) free(g->kv[i].key);
    for (int i = 0; i < g->ntensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->path);
}

static int parse_kv(Cur *c, GgufFile *g) {
    for (int i = 0; i < g->nkv; i++) {
        GgufKV *kv = &g->kv[i];
        const uint8_t *ks;
        uint64_t kn;
        if (rd_str(c, &ks, &kn, GGUF_MAX_KEY, "a key") < 0) return -1;
        if (!(kv->key = dup_name(c, ks, kn, "a key"))) return -1;
        uint32_t t;
        if (rd_u32(c, &t, "a value type") < 0) return -1;
        if (t >= GGUF_TYPE_COUNT)
            return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: key '%s' has unknown value type %u", c->what, kv->key, t);
        kv->type = t;
        size_t start = c->pos;
        if (t == GGUF_TYPE_ARRAY) {
            uint32_t et;
            uint64_t n;
            if (need(c, 12, "an array header") < 0) return -1;
            memcpy(&et, c->p + c->pos, 4);
            memcpy(&n, c->p + c->pos + 4, 8);
            kv->arr_type = et, kv->arr_n = n;
            start += 12;
        } else if (t == GGUF_TYPE_STRING) {
            start += 8;
        }
        if (skip_value(c, t, 0, kv->key) < 0) return -1;
        kv->val = c->p + start;
        kv->val_len = c->pos - start;
    }
    return 0;
}

static int check_keys_unique(GgufFile *g, PailErr *err) {
    if (g->nkv < 2) return 0;
    char **k = malloc((size_t)g->nkv * sizeof *k);
    if (!k) return err_set(err, PAIL_ERR_NOMEM, "gguf %s: out of memory", g->path);
    for (int i = 0; i < g->nkv; i++) k[i] = g->kv[i].key;
    int rc = check_unique(k, g->nkv, g->path, "key", err);
    free(k);
    return rc;
}

static int parse_alignment(GgufFile *g, PailErr *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKV *a = gguf_find(g, "general.alignment");
    if (!a) return 0;
    if (a->type != GGUF_TYPE_UINT32)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: general.alignment is %s, not UINT32", g->path,
                       value_type_name(a->type));
    uint32_t v;
    memcpy(&v, a->val, 4);
    if (v == 0 || (v & (v - 1)) || v > GGUF_MAX_ALIGNMENT)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: general.alignment %u is not a power of two up to %u", g->path, v,
                       GGUF_MAX_ALIGNMENT);
    g->alignment = v;
    return 0;
}

static int parse_tensor_infos(Cur *c, GgufFile *g) {
    for (int i = 0; i < g->ntensors; i++) {
        GgufTensor *t = &g->tensors[i];
        const uint8_t *ns;
        uint64_t nn;
        if (rd_str(c, &ns, &nn, GGUF_MAX_KEY, "a tensor name") < 0) return -1;
        if (!(t->name = dup_name(c, ns, nn, "a tensor name"))) return -1;
        uint32_t nd, ty;
        if (rd_u32(c, &nd, "a tensor's dim count") < 0) return -1;
        if (nd < 1 || nd > GGUF_MAX_DIMS)
            return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' has %u dims (1 to %d)", c->what, t->name, nd,
                           GGUF_MAX_DIMS);
        t->ndim = (int)nd;
        uint64_t ne = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->dims[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            if (rd_u64(c, &t->dims[d], "a tensor dim") < 0) return -1;
            if (t->dims[d] == 0 || t->dims[d] > (1ull << 40) || ne > (1ull << 48) / t->dims[d])
                return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' dim %u is %llu (out of range)", c->what,
                               t->name, d, (unsigned long long)t->dims[d]);
            ne *= t->dims[d];
        }
        t->nelem = ne;
        if (rd_u32(c, &ty, "a tensor type") < 0 || rd_u64(c, &t->offset, "a tensor offset") < 0) return -1;
        t->type = (GgmlType)ty;
        size_t be, bb;
        if (gguf_type_block(t->type, &be, &bb) < 0)
            return err_set(c->err, PAIL_ERR_UNSUPPORTED,
                           "gguf %s: tensor '%s' has ggml type %u, which pail does not read (F32, F16, BF16, Q4_0, "
                           "Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, MXFP4)", c->what, t->name, ty);
        if (t->dims[0] % be)
            return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' row of %llu is not a multiple of %s's block of %zu",
                           c->what, t->name, (unsigned long long)t->dims[0], gguf_type_name(t->type), be);
        t->nbytes = ne / be * bb;  // ne <= 2^48, bb <= 210: no overflow
    }
    return 0;
}

static int place_tensors(Cur *c, GgufFile *g) {
    uint64_t end_info = c->pos, a = g->alignment;
    g->data_offset = (end_info + a - 1) / a * a;
    if (g->ntensors && g->data_offset > c->len)
        return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: the data section at byte %llu starts past the end (%zu bytes)",
                       c->what, (unsigned long long)g->data_offset, c->len);
    uint64_t room = g->ntensors ? c->len - g->data_offset : 0;
    for (int i = 0; i < g->ntensors; i++) {
        GgufTensor *t = &g->tensors[i];
        if (t->offset % a)
            return err_set(c->err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' offset %llu is not a multiple of the alignment %llu",
                           c->what, t->name, (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset > room || t->nbytes > room - t->offset)
            return err_set(c->err, PAIL_ERR_INVALID,
                           "gguf %s: tensor '%s' bytes %llu..%llu of the data section run past its end (%llu bytes)",
                           c->what, t->name, (unsigned long long)t->offset,
                           (unsigned long long)(t->offset + t->nbytes), (unsigned long long)room);
        t->data = c->p + g->data_offset + t->offset;
    }
    if (g->ntensors < 2) return 0;
    GgufTensor **s = malloc((size_t)g->ntensors * sizeof *s);
    if (!s) return err_set(c->err, PAIL_ERR_NOMEM, "gguf %s: out of memory", c->what);
    for (int i = 0; i < g->ntensors; i++) s[i] = &g->tensors[i];
    qsort(s, (size_t)g->ntensors, sizeof *s, cmp_offset);
    int rc = 0;
    for (int i = 1; i < g->ntensors && rc == 0; i++)
        if (s[i - 1]->offset + s[i - 1]->nbytes > s[i]->offset)
            rc = err_set(c->err, PAIL_ERR_INVALID, "gguf %s: tensors '%s' and '%s' overlap", c->what, s[i - 1]->name,
                         s[i]->name);
    free(s);
    return rc;
}

int gguf_parse(GgufFile *out, const uint8_t *bytes, size_t len, const char *what, PailErr *err) {
    memset(out, 0, sizeof *out);
    GgufFile g = {0};
    Cur c = {bytes, len, 0, what, err};
    uint32_t magic;
    uint64_t nt, nkv;
    if (rd_u32(&c, &magic, "the magic") < 0) return -1;
    if (magic != 0x46554747u)  // "GGUF"
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: not a GGUF file (magic %02x %02x %02x %02x)", what, bytes[0],
                       bytes[1], bytes[2], bytes[3]);
    if (rd_u32(&c, &g.version, "the version") < 0) return -1;
    if (g.version != 2 && g.version != 3)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: version %u (pail reads 2 and 3%s)", what, g.version,
                       (g.version >> 24) ? "; this looks big-endian, which pail does not read" : "");
    if (rd_u64(&c, &nt, "the tensor count") < 0 || rd_u64(&c, &nkv, "the key count") < 0) return -1;
    // Each tensor info takes >= 24 bytes (name length, dims, type, offset), each key >= 12.
    if (nt > GGUF_MAX_TENSORS || nt > (len - c.pos) / 24)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %llu tensors, more than the file holds or %u", what,
                       (unsigned long long)nt, GGUF_MAX_TENSORS);
    if (nkv > GGUF_MAX_KV || nkv > (len - c.pos) / 12)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %llu keys, more than the file holds or %u", what,
                       (unsigned long long)nkv, GGUF_MAX_KV);
    if (!(g.path = strdup(what))) return err_set(err, PAIL_ERR_NOMEM, "gguf %s: out of memory", what);
    g.kv = calloc(nkv ? nkv : 1, sizeof *g.kv);
    g.tensors = calloc(nt ? nt : 1, sizeof *g.tensors);
    if (!g.kv || !g.tensors) {
        free_parts(&g);
        return err_set(err, PAIL_ERR_NOMEM, "gguf %s: out of memory", what);
    }
    g.bytes = bytes, g.len = len;
    g.nkv = (int)nkv, g.ntensors = (int)nt;
    if (parse_kv(&c, &g) < 0 || check_keys_unique(&g, err) < 0 || parse_alignment(&g, err) < 0 ||
        parse_tensor_infos(&c, &g) < 0 || place_tensors(&c, &g) < 0) {
        free_parts(&g);
        return -1;
    }
    char **names = malloc((g.ntensors ? g.ntensors : 1) * sizeof *names);
    if (!names) {
        free_parts(&g);
        return err_set(err, PAIL_ERR_NOMEM, "gguf %s: out of memory", what);
    }
    for (int i = 0; i < g.ntensors; i++) names[i] = g.tensors[i].name;
    int rc = check_unique(names, g.ntensors, what, "tensor", err);
    free(names);
    if (rc < 0) {
        free_parts(&g);
        return -1;
    }
    *out = g;
    return 0;
}

int gguf_open(GgufFile *out, const char *path, PailErr *err) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return err_set(err, errno == ENOENT ? PAIL_ERR_NOT_FOUND : PAIL_ERR_IO, "gguf %s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, PAIL_ERR_IO, "gguf %s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    void *m = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && m == MAP_FAILED) return err_set(err, PAIL_ERR_IO, "gguf %s: mmap of %zu bytes failed", path, len);
    static const uint8_t empty[4];
    if (gguf_parse(out, len ? m : empty, len, path, err) < 0) {
        if (len) munmap(m, len);
        return -1;
    }
    out->map_len = len;
    return 0;
}

void gguf_close(GgufFile *g) {
    if (g->map_len) munmap((void *)g->bytes, g->map_len);
    free_parts(g);
    memset(g, 0, sizeof *g);
}

const GgufKV *gguf_find(const GgufFile *g, const char *key) {
    for (int i = 0; i < g->nkv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name) {
    for (int i = 0; i < g->ntensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static const GgufKV *get(const GgufFile *g, const char *key, PailErr *err) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) err_set(err, PAIL_ERR_NOT_FOUND, "gguf %s: no key '%s'", g->path, key);
    return kv;
}

static int wrong_type(const GgufFile *g, const GgufKV *kv, const char *want, PailErr *err) {
    return err_set(err, PAIL_ERR_INVALID, "gguf %s: key '%s' is %s%s%s, not %s", g->path, kv->key,
                   value_type_name(kv->type), kv->type == GGUF_TYPE_ARRAY ? " of " : "",
                   kv->type == GGUF_TYPE_ARRAY ? value_type_name(kv->arr_type) : "", want);
}

int gguf_get_int(const GgufFile *g, const char *key, int64_t *out, PailErr *err) {
    const GgufKV *kv = get(g, key, err);
    if (!kv) return -1;
    const uint8_t *v = kv->val;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: *out = v[0]; return 0;
    case GGUF_TYPE_INT8: *out = (int8_t)v[0]; return 0;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, v, 2); *out = x; return 0; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, v, 2); *out = x; return 0; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, v, 4); *out = x; return 0; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, v, 4); *out = x; return 0; }
    case GGUF_TYPE_INT64: { int64_t x; memcpy(&x, v, 8); *out = x; return 0; }
    case GGUF_TYPE_UINT64: {
        uint64_t x;
        memcpy(&x, v, 8);
        if (x > INT64_MAX)
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: key '%s' is %llu, out of range", g->path, key,
                           (unsigned long long)x);
        *out = (int64_t)x;
        return 0;
    }
    default: return wrong_type(g, kv, "an integer", err);
    }
}

int gguf_get_float(const GgufFile *g, const char *key, double *out, PailErr *err) {
    const GgufKV *kv = get(g, key, err);
    if (!kv) return -1;
    if (kv->type == GGUF_TYPE_FLOAT32) { float f; memcpy(&f, kv->val, 4); *out = f; return 0; }
    if (kv->type == GGUF_TYPE_FLOAT64) { memcpy(out, kv->val, 8); return 0; }
    return wrong_type(g, kv, "FLOAT32 or FLOAT64", err);
}

int gguf_get_bool(const GgufFile *g, const char *key, bool *out, PailErr *err) {
    const GgufKV *kv = get(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_TYPE_BOOL) return wrong_type(g, kv, "BOOL", err);
    *out = kv->val[0] != 0;
    return 0;
}

int gguf_get_string(const GgufFile *g, const char *key, const char **s, size_t *len, PailErr *err) {
    const GgufKV *kv = get(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_TYPE_STRING) return wrong_type(g, kv, "STRING", err);
    *s = (const char *)kv->val, *len = kv->val_len;
    return 0;
}

int gguf_get_array(const GgufFile *g, const char *key, GgufValueType elem, uint64_t *n, const uint8_t **data,
                   PailErr *err) {
    const GgufKV *kv = get(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != elem) {
        char want[32];
        snprintf(want, sizeof want, "ARRAY of %s", value_type_name(elem));
        return wrong_type(g, kv, want, err);
    }
    *n = kv->arr_n, *data = kv->val;
    return 0;
}

void gguf_array_strings(const uint8_t *data, uint64_t n, const char **strs, size_t *lens) {
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l;
        memcpy(&l, data, 8);
        strs[i] = (const char *)data + 8, lens[i] = (size_t)l;
        data += 8 + l;
    }
}
