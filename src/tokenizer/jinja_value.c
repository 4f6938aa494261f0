// The chat-template interpreter's values (jinja_internal.h): the render arena,
// constructors, conversion from JSON and Python's truthiness, equality and ordering.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/jinja_internal.h"

// ---- arena: blocks of at least 64 KiB; big requests get a block of their own

struct JArenaBlock {
    JArenaBlock *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

#define JA_BLOCK (64u << 10)

void *ja_alloc(JRender *r, size_t n) {
    JArena *a = &r->arena;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->cap && a->used + n > a->cap) {
        jr_fail(r, "template used more than %zu MiB of memory", a->cap >> 20);
        return NULL;
    }
    JArenaBlock *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > JA_BLOCK ? n : JA_BLOCK;
        b = malloc(sizeof *b + size);
        if (!b) {
            jr_fail(r, "out of memory");
            return NULL;
        }
        b->size = size;
        b->used = 0;
        if (n > JA_BLOCK && a->head) {  // keep filling the current block
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = b->data + b->used;
    b->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free_all(JArena *a) {
    for (JArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->used = 0;
}

int jr_fail(JRender *r, const char *fmt, ...) {
    if (r->err && r->err->code != PAIL_OK) return -1;  // the first error stands
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->line > 0) return err_set(r->err, PAIL_ERR_INVALID, "%s:%d: %s", r->tname ? r->tname : "template", r->line, msg);
    return err_set(r->err, PAIL_ERR_INVALID, "%s: %s", r->tname ? r->tname : "template", msg);
}

int jr_work(JRender *r, uint64_t bytes) {
    r->work += bytes;
    if (r->work <= r->lim->max_work) return 0;
    r->work = r->lim->max_work + 1;  // no wrap-around however much more is charged
    return jr_fail(r, "work budget of %llu bytes exceeded (the bytes string and list operations read and write; "
                      "a template doing heavy work on long values)",
                   (unsigned long long)r->lim->max_work);
}

int jr_step(JRender *r) {
    if (++r->steps > r->lim->max_steps)
        return jr_fail(r, "rendering took more than %llu steps (loop iterations and calls)",
                       (unsigned long long)r->lim->max_steps);
    return 0;
}

// ---- constructors

const JStr *jstr_new(JRender *r, const char *p, size_t len) {
    if (len > r->lim->max_output) {
        jr_fail(r, "a string of %zu bytes is over the output limit (%zu bytes)", len, r->lim->max_output);
        return NULL;
    }
    if (jr_work(r, len) < 0) return NULL;
    JStr *s = ja_alloc(r, sizeof *s + len + 1);
    if (!s) return NULL;
    s->len = len;
    s->nchars = SIZE_MAX;
    if (len) memcpy(s->p, p, len);
    s->p[len] = 0;
    return s;
}

int jv_str_new(JRender *r, const char *p, size_t len, JValue *out) {
    const JStr *s = jstr_new(r, p, len);
    if (!s) return -1;
    *out = (JValue){.kind = JV_STR, .u.s = s};
    return 0;
}

size_t jv_str_nchars(const JStr *s) {
    if (s->nchars != SIZE_MAX) return s->nchars;
    size_t n = 0;
    for (size_t i = 0; i < s->len; i++) n += ((unsigned char)s->p[i] & 0xC0) != 0x80;
    ((JStr *)s)->nchars = n;  // a cache; the text itself never changes
    return n;
}

static int grow(JRender *r, void **p, size_t *cap, size_t need, size_t elem, int arrays) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    while (nc < need) nc *= 2;
    for (int k = 0; k < arrays; k++) {
        void *np = ja_alloc(r, nc * elem);
        if (!np) return -1;
        if (*cap) memcpy(np, p[k], *cap * elem);
        p[k] = np;
    }
    *cap = nc;
    return 0;
}

JList *jlist_new(JRender *r, size_t cap_hint) {
    JList *l = ja_alloc(r, sizeof *l);
    if (!l) return NULL;
    void *p[1] = {NULL};
    if (cap_hint && grow(r, p, &l->cap, cap_hint, sizeof(JValue), 1) < 0) return NULL;
    l->v = p[0];
    return l;
}

int jlist_push(JRender *r, JList *l, JValue v) {
    if (jr_work(r, sizeof(JValue)) < 0) return -1;
    void *p[1] = {l->v};
    if (grow(r, p, &l->cap, l->n + 1, sizeof(JValue), 1) < 0) return -1;
    l->v = p[0];
    l->v[l->n++] = v;
    return 0;
}

JDict *jdict_new(JRender *r, size_t cap_hint) {
    JDict *d = ja_alloc(r, sizeof *d);
    if (!d) return NULL;
    void *p[2] = {NULL, NULL};
    if (cap_hint && grow(r, p, &d->cap, cap_hint, sizeof(JValue), 2) < 0) return NULL;
    d->k = p[0];
    d->v = p[1];
    return d;
}

const JValue *jdict_get(const JDict *d, JValue k) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

const JValue *jdict_get_str(const JDict *d, const char *key) {
    size_t len = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].kind == JV_STR && d->k[i].u.s->len == len && !memcmp(d->k[i].u.s->p, key, len)) return &d->v[i];
    return NULL;
}

int jdict_set(JRender *r, JDict *d, JValue k, JValue v) {
    for (size_t i = 0; i < d->n; i++) {
        bool eq;
        if (jr_equal(r, d->k[i], k, &eq) < 0) return -1;
        if (eq) {
            d->v[i] = v;
            return 0;
        }
    }
    // Two arrays grown together: copy both with the old capacity, then set the new one.
    size_t cap = d->cap;
    void *p[2] = {d->k, d->v};
    if (grow(r, p, &cap, d->n + 1, sizeof(JValue), 2) < 0) return -1;
    d->k = p[0];
    d->v = p[1];
    d->cap = cap;
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

JFunc *jfunc_builtin(JRender *r, const char *name, JBuiltinFn fn, JValue self) {
    JFunc *f = ja_alloc(r, sizeof *f);
    if (!f) return NULL;
    *f = (JFunc){.kind = JF_BUILTIN, .name = name, .fn = fn, .self = self};
    return f;
}

int jv_from_json(JRender *r, json_t *j, JValue *out) {
    if (r->depth > r->lim->max_depth) return jr_fail(r, "input nested deeper than %d levels", r->lim->max_depth);
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_TRUE: *out = jv_bool(true); return 0;
    case JSON_FALSE: *out = jv_bool(false); return 0;
    case JSON_INTEGER: *out = jv_int(json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_STRING: return jv_str_new(r, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        JList *l = jlist_new(r, json_array_size(j));
        if (!l) return -1;
        r->depth++;
        for (size_t i = 0; i < json_array_size(j); i++) {
            JValue v;
            if (jv_from_json(r, json_array_get(j, i), &v) < 0 || jlist_push(r, l, v) < 0) { r->depth--; return -1; }
        }
        r->depth--;
        *out = (JValue){.kind = JV_LIST, .u.l = l};
        return 0;
    }
    case JSON_OBJECT: {
        JDict *d = jdict_new(r, json_object_size(j));
        if (!d) return -1;
        const char *key;
        size_t klen;
        json_t *val;
        r->depth++;
        json_object_keylen_foreach(j, key, klen, val) {
            JValue k, v;
            // JSON object keys are unique, so append without the equality scan.
            if (jv_str_new(r, key, klen, &k) < 0 || jv_from_json(r, val, &v) < 0) { r->depth--; return -1; }
            void *p[2] = {d->k, d->v};
            size_t cap = d->cap;
            if (grow(r, p, &cap, d->n + 1, sizeof(JValue), 2) < 0) { r->depth--; return -1; }
            d->k = p[0];
            d->v = p[1];
            d->cap = cap;
            d->k[d->n] = k;
            d->v[d->n++] = v;
        }
        r->depth--;
        *out = (JValue){.kind = JV_DICT, .u.d = d};
        return 0;
    }
    }
    return jr_fail(r, "unknown JSON value");
}

// ---- Python semantics

bool jv_truthy(JValue v) {
    switch (v.kind) {
    case JV_UNDEFINED: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: case JV_TUPLE: return v.u.l->gen || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    case JV_NAMESPACE: case JV_FUNC: return true;
    }
    return false;
}

static bool numeric(JValue v, double *f, int64_t *i, bool *is_int) {
    switch (v.kind) {
    case JV_BOOL: *i = v.u.b; *f = v.u.b; *is_int = true; return true;
    case JV_INT: *i = v.u.i; *f = (double)v.u.i; *is_int = true; return true;
    case JV_FLOAT: *f = v.u.f; *is_int = false; return true;
    default: return false;
    }
}

// Item compares and string bytes compared go to *work (cost of a list item: sizeof(JValue)).
static bool equal_w(JValue a, JValue b, uint64_t *work) {
    double fa, fb;
    int64_t ia, ib;
    bool xa, xb;
    *work += sizeof(JValue);
    if (numeric(a, &fa, &ia, &xa) && numeric(b, &fb, &ib, &xb)) return xa && xb ? ia == ib : fa == fb;
    if (a.kind == JV_LIST || a.kind == JV_TUPLE) {
        if (jv_is_gen(a) || jv_is_gen(b)) return b.kind == a.kind && a.u.l == b.u.l;  // by identity
        if (b.kind == JV_LIST && a.u.l->view != b.u.l->view) return false;  // a list is no dict_keys or range
        if (b.kind != a.kind || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_w(a.u.l->v[i], b.u.l->v[i], work)) return false;
        return true;
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEFINED: case JV_NONE: return true;  // jinja2: Undefined == Undefined
    case JV_STR:
        if (a.u.s->len != b.u.s->len) return false;
        *work += a.u.s->len;
        return !memcmp(a.u.s->p, b.u.s->p, a.u.s->len);
    case JV_DICT: {
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            *work += b.u.d->n * sizeof(JValue);  // jdict_get scans the keys
            const JValue *o = jdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !equal_w(a.u.d->v[i], *o, work)) return false;
        }
        return true;
    }
    case JV_NAMESPACE: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

bool jv_equal(JValue a, JValue b) {
    uint64_t w = 0;
    return equal_w(a, b, &w);
}

int jr_equal(JRender *r, JValue a, JValue b, bool *eq) {
    uint64_t w = 0;
    *eq = equal_w(a, b, &w);
    return jr_work(r, w);
}

// FNV-1a over 8-byte words, then a 64-bit finalizer (murmur3's fmix64).
static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    return mix((h ^ w) * 0x100000001b3ull);
}

uint64_t jv_hash(JValue v, uint64_t *work) {
    double f;
    int64_t i;
    bool is_int;
    *work += sizeof(JValue);
    if (numeric(v, &f, &i, &is_int)) {  // 1 == 1.0 == True: an integral float hashes as the int
        if (!is_int && f == floor(f) && f >= -9.2e18 && f <= 9.2e18) i = (int64_t)f, is_int = true;
        if (is_int) return mix((uint64_t)i ^ 0x9e3779b97f4a7c15ull);
        uint64_t b;
        memcpy(&b, &f, 8);
        return mix(b);
    }
    switch (v.kind) {
    case JV_STR: *work += v.u.s->len; return hash_bytes(v.u.s->p, v.u.s->len);
    case JV_LIST: case JV_TUPLE: {
        uint64_t h = mix(v.kind * 31u + v.u.l->n);
        for (size_t k = 0; k < v.u.l->n; k++) h = mix(h ^ jv_hash(v.u.l->v[k], work));
        return h;
    }
    case JV_DICT: {  // equal dicts may order their keys differently: combine without order
        uint64_t h = mix(v.u.d->n + 77);
        for (size_t k = 0; k < v.u.d->n; k++) h += mix(jv_hash(v.u.d->k[k], work) ^ jv_hash(v.u.d->v[k], work) * 3);
        return h;
    }
    case JV_NAMESPACE: return mix((uint64_t)(uintptr_t)v.u.d);
    case JV_FUNC: return mix((uint64_t)(uintptr_t)v.u.fn);
    default: return mix(v.kind);  // undefined, None
    }
}

const char *jv_type_name(JValue v) {
    switch (v.kind) {
    case JV_UNDEFINED: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: {
        static const char *const views[] = {"list", "dict_keys", "dict_values", "dict_items", "range"};
        return v.u.l->gen ? "generator" : views[v.u.l->view];
    }
    case JV_TUPLE: return "tuple";
    case JV_DICT: return v.u.d->loop ? "LoopContext" : "dict";
    case JV_NAMESPACE: return "Namespace";
    case JV_FUNC: return v.u.fn->kind == JF_MACRO ? "Macro" : "builtin_function_or_method";
    }
    return "object";
}

int jv_compare(JRender *r, JValue a, JValue b, int *cmp) {
    double fa, fb;
    int64_t ia, ib;
    bool xa, xb;
    if (numeric(a, &fa, &ia, &xa) && numeric(b, &fb, &ib, &xb)) {
        if (xa && xb) *cmp = (ia > ib) - (ia < ib);
        else *cmp = (fa > fb) - (fa < fb);  // NaN compares as equal here; Python says False both ways
        return 0;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {  // UTF-8 byte order is code point order
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        if (jr_work(r, n + sizeof(JValue)) < 0) return -1;
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        *cmp = c ? (c > 0) - (c < 0) : (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
        return 0;
    }
    if ((a.kind == JV_LIST || a.kind == JV_TUPLE) && a.kind == b.kind) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            bool eq;
            if (jr_equal(r, a.u.l->v[i], b.u.l->v[i], &eq) < 0) return -1;
            if (eq) continue;
            return jv_compare(r, a.u.l->v[i], b.u.l->v[i], cmp);
        }
        *cmp = (a.u.l->n > n) - (b.u.l->n > n);
        return 0;
    }
    return jr_fail(r, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}
