// The chat-template interpreter's lookups, globals and tests (jinja_internal.h): obj.name and
// obj[key] as jinja2's ImmutableSandboxedEnvironment resolves them, slices with Python's
// rules, the globals transformers adds (range, dict, namespace, raise_exception,
// strftime_now) and jinja2's tests. Filters are in jinja_filters.c, str/dict/list methods in
// jinja_methods.c; the helpers they share (jinja_lib.h) live here.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>
#include "tokenizer/jinja_lib.h"

// ---- shared helpers

int jl_bind(JRender *r, const char *fn, const JArgs *a, const char *const *names, int n, JValue *vals,
            unsigned *given) {
    *given = 0;
    for (int i = 0; i < n; i++) vals[i] = jv_undefined(names[i]);
    if (a->n > n) return jr_fail(r, "%s() takes at most %d argument%s (%d given)", fn, n, n == 1 ? "" : "s", a->n);
    for (int i = 0; i < a->n; i++) {
        vals[i] = a->pos[i];
        *given |= 1u << i;
    }
    for (int k = 0; k < a->nkw; k++) {
        int i = 0;
        while (i < n && strcmp(names[i], a->kw_names[k])) i++;
        if (i == n) return jr_fail(r, "%s() got an unexpected keyword argument '%s'", fn, a->kw_names[k]);
        if (*given & (1u << i)) return jr_fail(r, "%s() got multiple values for argument '%s'", fn, names[i]);
        vals[i] = a->kw[k];
        *given |= 1u << i;
    }
    return 0;
}

int jl_no_args(JRender *r, const char *fn, const JArgs *a) {
    if (a->n + a->nkw) return jr_fail(r, "%s() takes no arguments (%d given)", fn, a->n + a->nkw);
    return 0;
}

size_t jl_utf8_next(const char *p, size_t n, int32_t *cp) {
    if ((unsigned char)p[0] < 0x80) {
        *cp = (unsigned char)p[0];
        return 1;
    }
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &c);
    if (k <= 0) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

int jl_utf8_put(JRender *r, JBuf *b, int32_t cp) {
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, u);
    return jbuf_put(r, b, (const char *)u, (size_t)k);
}

size_t jl_cp_offset(const JStr *s, size_t i) {
    size_t off = 0;
    for (size_t n = 0; n < i && off < s->len; n++) {
        int32_t c;
        off += jl_utf8_next(s->p + off, s->len - off, &c);
    }
    return off;
}

bool jl_is_space(int32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
    switch (c) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000: return true;
    default: return c >= 0x2000 && c <= 0x200a;
    }
}

int jl_str_from(JRender *r, const JBuf *b, JValue *out) { return jv_str_new(r, b->p ? b->p : "", b->len, out); }

int jl_to_string(JRender *r, JValue v, JValue *out) {
    if (v.kind == JV_STR) {
        *out = v;
        return 0;
    }
    JBuf b = {0};
    if (jv_to_str(r, v, &b) < 0) return -1;
    return jl_str_from(r, &b, out);
}

int jl_iter_list(JRender *r, JValue v, JList **out) {
    switch (v.kind) {
    case JV_LIST: case JV_TUPLE:
        if (v.u.l->gen) {  // a copy of what is left; the generator is consumed
            JList *l = jlist_new(r, v.u.l->n - v.u.l->pos);
            if (!l) return -1;
            for (size_t i = v.u.l->pos; i < v.u.l->n; i++)
                if (jlist_push(r, l, v.u.l->v[i]) < 0) return -1;
            v.u.l->pos = v.u.l->n;
            *out = l;
            return 0;
        }
        *out = v.u.l;
        return jr_work(r, v.u.l->n * sizeof(JValue));  // the caller walks it
    case JV_UNDEFINED: *out = jlist_new(r, 0); return *out ? 0 : -1;  // jinja2's Undefined iterates as empty
    case JV_DICT: {
        JList *l = jlist_new(r, v.u.d->n);
        if (!l) return -1;
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jlist_push(r, l, v.u.d->k[i]) < 0) return -1;
        *out = l;
        return 0;
    }
    case JV_STR: {
        const JStr *s = v.u.s;
        JList *l = jlist_new(r, jv_str_nchars(s));
        if (!l) return -1;
        for (size_t i = 0; i < s->len;) {
            int32_t c;
            size_t k = jl_utf8_next(s->p + i, s->len - i, &c);
            JValue ch;
            if (jv_str_new(r, s->p + i, k, &ch) < 0 || jlist_push(r, l, ch) < 0) return -1;
            i += k;
        }
        *out = l;
        return 0;
    }
    default:
        return jr_fail(r, "'%s' object is not iterable", jv_type_name(v));
    }
}

int jl_attr_path(JRender *r, JValue v, const char *path, JValue *out) {
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        // jinja2's _prepare_attribute_parts: an all-digit part is an integer index
        bool digits = n > 0 && n < 19;
        for (size_t i = 0; i < n && digits; i++) digits = p[i] >= '0' && p[i] <= '9';
        JValue key;
        if (digits) key = jv_int(strtoll(p, NULL, 10));
        else if (jv_str_new(r, p, n, &key) < 0) return -1;
        if (jinja_getitem(r, v, key, &v) < 0) return -1;
        if (!dot) break;
        p = dot + 1;
    }
    *out = v;
    return 0;
}

// Merge sort (stable, as Python's sorted) on index pairs; keys and values move together.
int jl_sort(JRender *r, JValue *keys, JValue *v, size_t n, bool reverse) {
    if (n < 2) return 0;
    JValue *tk = ja_alloc(r, n * sizeof *tk), *tv = ja_alloc(r, n * sizeof *tv);
    if (!tk || !tv) return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int c;
                if (jv_compare(r, keys[j], keys[i], &c) < 0) return -1;
                bool right = reverse ? c > 0 : c < 0;  // strictly before: equal keys keep their order
                size_t s = right ? j++ : i++;
                tk[o] = keys[s];
                tv[o++] = v[s];
            }
            while (i < mid) { tk[o] = keys[i]; tv[o++] = v[i++]; }
            while (j < hi) { tk[o] = keys[j]; tv[o++] = v[j++]; }
        }
        memcpy(keys, tk, n * sizeof *tk);
        memcpy(v, tv, n * sizeof *tv);
    }
    return 0;
}

// ---- lookups

static int g_dict(JRender *r, const JValue *self, const JArgs *a, JValue *out);
static int g_fromkeys(JRender *r, const JValue *self, const JArgs *a, JValue *out);
static int cycler_obj(JRender *r, const JValue *self, const JArgs *a, JValue *out);
static int cycler_attr(JRender *r, JValue state, const char *name, JValue *out);

int jinja_getattr(JRender *r, JValue obj, const char *name, JValue *out) {
    bool found = false;
    switch (obj.kind) {
    case JV_UNDEFINED:
        return jr_fail(r, "'%s' is undefined", obj.u.what);
    case JV_NAMESPACE: {
        const JValue *v = jdict_get_str(obj.u.d, name);
        *out = v ? *v : jv_undefined(name);
        return 0;
    }
    case JV_DICT: {  // the sandbox's getattr first: d.items is the method even with an "items" key
        if (!obj.u.d->loop && jl_method_get(r, obj, name, out, &found) < 0) return -1;
        if (found) return 0;
        const JValue *v = jdict_get_str(obj.u.d, name);
        *out = v ? *v : jv_undefined(name);
        return 0;
    }
    case JV_STR: case JV_LIST: case JV_TUPLE:
        if (jl_method_get(r, obj, name, out, &found) < 0) return -1;
        if (!found) *out = jv_undefined(name);
        return 0;
    case JV_FUNC:  // the dict global's fromkeys (transformers' TemplateDict), a cycler's attributes
        if (obj.u.fn->kind == JF_BUILTIN && obj.u.fn->fn == cycler_obj) return cycler_attr(r, obj.u.fn->self, name, out);
        if (obj.u.fn->kind == JF_BUILTIN && obj.u.fn->fn == g_dict && !strcmp(name, "fromkeys")) {
            JFunc *f = jfunc_builtin(r, "fromkeys", g_fromkeys, jv_undefined(NULL));
            if (!f) return -1;
            *out = (JValue){.kind = JV_FUNC, .u.fn = f};
            return 0;
        }
        *out = jv_undefined(name);
        return 0;
    default:
        *out = jv_undefined(name);
        return 0;
    }
}

static bool index_of(JValue key, int64_t *i) {
    if (key.kind == JV_INT) *i = key.u.i;
    else if (key.kind == JV_BOOL) *i = key.u.b;
    else return false;
    return true;
}

int jinja_getitem(JRender *r, JValue obj, JValue key, JValue *out) {
    int64_t i;
    const char *what = key.kind == JV_STR ? key.u.s->p : "";
    switch (obj.kind) {
    case JV_UNDEFINED:
        return jr_fail(r, "'%s' is undefined", obj.u.what);
    case JV_DICT: {
        const JValue *v = jdict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    case JV_LIST: case JV_TUPLE:
        if (obj.u.l->gen || (obj.u.l->view && obj.u.l->view != JL_RANGE)) break;  // not subscriptable: undefined
        if (index_of(key, &i)) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            *out = i >= 0 && i < n ? obj.u.l->v[i] : jv_undefined(what);
            return 0;
        }
        break;
    case JV_STR:
        if (index_of(key, &i)) {
            int64_t n = (int64_t)jv_str_nchars(obj.u.s);
            if (i < 0) i += n;
            if (i < 0 || i >= n) {
                *out = jv_undefined(what);
                return 0;
            }
            size_t a = jl_cp_offset(obj.u.s, (size_t)i);
            if (jr_work(r, a) < 0) return -1;  // the walk to code point i
            int32_t c;
            size_t k = jl_utf8_next(obj.u.s->p + a, obj.u.s->len - a, &c);
            return jv_str_new(r, obj.u.s->p + a, k, out);
        }
        break;
    default:
        break;
    }
    if (key.kind == JV_STR) return jinja_getattr(r, obj, key.u.s->p, out);
    *out = jv_undefined(what);
    return 0;
}

int jinja_slice(JRender *r, JValue obj, bool has_start, int64_t start, bool has_stop, int64_t stop, bool has_step,
                int64_t step, JValue *out) {
    if (!has_step) step = 1;
    if (step == 0) return jr_fail(r, "slice step cannot be zero");
    int64_t n;
    if (jv_is_listlike(obj) && obj.u.l->view != JL_RANGE)
        return jr_fail(r, "'%s' object is not subscriptable", jv_type_name(obj));
    if (obj.kind == JV_LIST || obj.kind == JV_TUPLE) n = (int64_t)obj.u.l->n;
    else if (obj.kind == JV_STR) n = (int64_t)jv_str_nchars(obj.u.s);
    else if (obj.kind == JV_UNDEFINED) return jr_fail(r, "'%s' is undefined", obj.u.what);
    else return jr_fail(r, "'%s' object is not subscriptable", jv_type_name(obj));
    // PySlice_AdjustIndices
    if (!has_start) start = step < 0 ? n - 1 : 0;
    else if (start < 0) { start += n; if (start < 0) start = step < 0 ? -1 : 0; }
    else if (start >= n) start = step < 0 ? n - 1 : n;
    if (!has_stop) stop = step < 0 ? -1 : n;
    else if (stop < 0) { stop += n; if (stop < 0) stop = step < 0 ? -1 : 0; }
    else if (stop >= n) stop = step < 0 ? n - 1 : n;
    if (obj.kind == JV_STR) {
        const JStr *s = obj.u.s;
        if (jr_work(r, s->len + ((size_t)n + 1) * sizeof(size_t)) < 0) return -1;
        size_t *off = ja_alloc(r, ((size_t)n + 1) * sizeof *off);
        if (!off) return -1;
        for (int64_t k = 0, b = 0; k <= n; k++) {
            off[k] = (size_t)b;
            if (k < n) {
                int32_t c;
                b += (int64_t)jl_utf8_next(s->p + b, s->len - (size_t)b, &c);
            }
        }
        if (step == 1) return jv_str_new(r, s->p + off[start], start < stop ? off[stop] - off[start] : 0, out);
        JBuf b = {0};
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
            if (jbuf_put(r, &b, s->p + off[k], off[k + 1] - off[k]) < 0) return -1;
        return jl_str_from(r, &b, out);
    }
    JList *l = jlist_new(r, 0);
    if (!l) return -1;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
        if (jlist_push(r, l, obj.u.l->v[k]) < 0) return -1;
    *out = (JValue){.kind = obj.kind, .u.l = l};
    return 0;
}

// ---- globals

static int as_index(JRender *r, JValue v, int64_t *i) {
    if (index_of(v, i)) return 0;
    return jr_fail(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v));
}

#define MAX_RANGE 100000  // jinja2.sandbox.MAX_RANGE

static int g_range(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    if (a->nkw) return jr_fail(r, "range() takes no keyword arguments");
    if (a->n < 1 || a->n > 3) return jr_fail(r, "range expected at most 3 arguments, got %d", a->n);
    int64_t start = 0, stop = 0, step = 1;
    if (a->n == 1) {
        if (as_index(r, a->pos[0], &stop) < 0) return -1;
    } else if (as_index(r, a->pos[0], &start) < 0 || as_index(r, a->pos[1], &stop) < 0 ||
               (a->n == 3 && as_index(r, a->pos[2], &step) < 0))
        return -1;
    if (step == 0) return jr_fail(r, "range() arg 3 must not be zero");
    // length as Python computes it, in 128 bits so extreme bounds cannot overflow
    __int128 len = 0;
    if (step > 0 && start < stop) len = ((__int128)stop - start - 1) / step + 1;
    if (step < 0 && start > stop) len = ((__int128)start - stop - 1) / -(__int128)step + 1;
    if (len > MAX_RANGE)
        return jr_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    if ((uint64_t)len > r->lim->max_steps - (r->steps < r->lim->max_steps ? r->steps : r->lim->max_steps))
        return jr_fail(r, "range() of %lld items is over the step limit (%llu)", (long long)len,
                       (unsigned long long)r->lim->max_steps);
    JList *l = jlist_new(r, (size_t)len);
    if (!l) return -1;
    for (int64_t k = 0; k < (int64_t)len; k++)
        if (jlist_push(r, l, jv_int(start + k * step)) < 0) return -1;
    l->view = JL_RANGE;
    l->range[0] = start, l->range[1] = stop, l->range[2] = step;
    *out = jl_list_value(l);
    return 0;
}

// ---- jinja2's cycler and joiner (jinja2/utils.py): objects with state, kept in a private dict
// (their JFunc's self): cycler's "items" (a tuple) and "pos", joiner's "sep" and "used".

static int state_set(JRender *r, JValue state, const char *key, JValue v) {
    JValue k;
    return jv_str_new(r, key, strlen(key), &k) < 0 ? -1 : jdict_set(r, state.u.d, k, v);
}

// The cycler object itself: not callable; c.next(), c.reset(), c.current through cycler_attr.
static int cycler_obj(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self, (void)a, (void)out;
    return jr_fail(r, "'Cycler' object is not callable");
}
static int cycler_next(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "next", a) < 0) return -1;
    const JList *items = jdict_get_str(self->u.d, "items")->u.l;
    int64_t pos = jdict_get_str(self->u.d, "pos")->u.i;
    *out = items->v[pos];
    return state_set(r, *self, "pos", jv_int((pos + 1) % (int64_t)items->n));
}
static int cycler_reset(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "reset", a) < 0) return -1;
    *out = jv_none();
    return state_set(r, *self, "pos", jv_int(0));
}
static int cycler_attr(JRender *r, JValue state, const char *name, JValue *out) {
    JBuiltinFn fn = !strcmp(name, "next") ? cycler_next : !strcmp(name, "reset") ? cycler_reset : NULL;
    if (fn) {
        JFunc *f = jfunc_builtin(r, !strcmp(name, "next") ? "next" : "reset", fn, state);
        if (!f) return -1;
        *out = (JValue){.kind = JV_FUNC, .u.fn = f};
    } else if (!strcmp(name, "current")) {
        *out = jdict_get_str(state.u.d, "items")->u.l->v[jdict_get_str(state.u.d, "pos")->u.i];
    } else {
        *out = jv_undefined(name);
    }
    return 0;
}
static int g_cycler(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    if (a->nkw) return jr_fail(r, "Cycler.__init__() got an unexpected keyword argument '%s'", a->kw_names[0]);
    if (a->n == 0) return jr_fail(r, "at least one item has to be provided");
    JList *items = jlist_new(r, (size_t)a->n);
    JDict *d = jdict_new(r, 2);
    if (!items || !d) return -1;
    for (int i = 0; i < a->n; i++)
        if (jlist_push(r, items, a->pos[i]) < 0) return -1;
    JValue state = {.kind = JV_DICT, .u.d = d};
    if (state_set(r, state, "items", (JValue){.kind = JV_TUPLE, .u.l = items}) < 0 ||
        state_set(r, state, "pos", jv_int(0)) < 0)
        return -1;
    JFunc *f = jfunc_builtin(r, "Cycler", cycler_obj, state);
    if (!f) return -1;
    *out = (JValue){.kind = JV_FUNC, .u.fn = f};
    return 0;
}

// joiner(sep=", "): calling it gives "" the first time, sep after
static int joiner_call(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "joiner", a) < 0) return -1;
    if (jv_truthy(*jdict_get_str(self->u.d, "used"))) return *out = *jdict_get_str(self->u.d, "sep"), 0;
    if (state_set(r, *self, "used", jv_bool(true)) < 0) return -1;
    return jv_str_new(r, "", 0, out);
}
static int g_joiner(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    static const char *const names[] = {"sep"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, "Joiner.__init__", a, names, 1, v, &given) < 0) return -1;
    if (!given && jv_str_new(r, ", ", 2, &v[0]) < 0) return -1;
    JDict *d = jdict_new(r, 2);
    if (!d) return -1;
    JValue state = {.kind = JV_DICT, .u.d = d};
    if (state_set(r, state, "sep", v[0]) < 0 || state_set(r, state, "used", jv_bool(false)) < 0) return -1;
    JFunc *f = jfunc_builtin(r, "Joiner", joiner_call, state);
    if (!f) return -1;
    *out = (JValue){.kind = JV_FUNC, .u.fn = f};
    return 0;
}

// transformers' dict.fromkeys(iterable, value=None)
static int g_fromkeys(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    static const char *const names[] = {"iterable", "value"};
    JValue v[2];
    unsigned given;
    if (jl_bind(r, "fromkeys", a, names, 2, v, &given) < 0) return -1;
    if (!(given & 1)) return jr_fail(r, "fromkeys expected at least 1 argument, got 0");
    JList *keys;
    JDict *d;
    if (jl_iter_list(r, v[0], &keys) < 0 || !(d = jdict_new(r, keys->n))) return -1;
    for (size_t i = 0; i < keys->n; i++) {
        JValue k = keys->v[i];
        if (k.kind == JV_LIST || k.kind == JV_DICT || k.kind == JV_NAMESPACE)
            return jr_fail(r, "unhashable type: '%s'", jv_type_name(k));
        if (jdict_set(r, d, k, (given & 2) ? v[1] : jv_none()) < 0) return -1;
    }
    *out = (JValue){.kind = JV_DICT, .u.d = d};
    return 0;
}

// dict(*args, **kwargs) into d: a mapping, or an iterable of pairs, then the keywords.
static int dict_fill(JRender *r, const char *fn, const JArgs *a, JDict *d) {
    if (a->n > 1) return jr_fail(r, "%s expected at most 1 argument, got %d", fn, a->n);
    if (a->n == 1) {
        JValue src = a->pos[0];
        if (src.kind == JV_DICT || src.kind == JV_NAMESPACE) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (jdict_set(r, d, src.u.d->k[i], src.u.d->v[i]) < 0) return -1;
        } else {
            JList *l;
            if (jl_iter_list(r, src, &l) < 0) return -1;
            for (size_t i = 0; i < l->n; i++) {
                JValue e = l->v[i];
                JList *pair;
                if (e.kind != JV_LIST && e.kind != JV_TUPLE && e.kind != JV_STR)
                    return jr_fail(r, "cannot convert dictionary update sequence element #%zu to a sequence", i);
                if (jl_iter_list(r, e, &pair) < 0) return -1;
                if (pair->n != 2)
                    return jr_fail(r, "dictionary update sequence element #%zu has length %zu; 2 is required", i,
                                   pair->n);
                if (jdict_set(r, d, pair->v[0], pair->v[1]) < 0) return -1;
            }
        }
    }
    for (int k = 0; k < a->nkw; k++) {
        JValue key;
        if (jv_str_new(r, a->kw_names[k], strlen(a->kw_names[k]), &key) < 0 || jdict_set(r, d, key, a->kw[k]) < 0)
            return -1;
    }
    return 0;
}

static int g_dict(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    JDict *d = jdict_new(r, 0);
    if (!d || dict_fill(r, "dict", a, d) < 0) return -1;
    *out = (JValue){.kind = JV_DICT, .u.d = d};
    return 0;
}

static int g_namespace(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    JDict *d = jdict_new(r, 0);
    if (!d || dict_fill(r, "dict", a, d) < 0) return -1;
    for (size_t i = 0; i < d->n; i++)  // transformers' TemplateNamespace._check_name
        if (d->k[i].kind == JV_STR && d->k[i].u.s->p[0] == '_') {
            JBuf b = {0};
            if (jv_to_repr(r, d->k[i], &b) < 0) return -1;
            return jr_fail(r, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got %s. "
                              "Please rename the attribute.", b.p);
        }
    *out = (JValue){.kind = JV_NAMESPACE, .u.d = d};
    return 0;
}

static int g_raise_exception(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    (void)out;
    static const char *const names[] = {"message"};
    JValue v[1], s;
    unsigned given;
    if (jl_bind(r, "raise_exception", a, names, 1, v, &given) < 0) return -1;
    if (!(given & 1)) return jr_fail(r, "raise_exception() missing 1 required positional argument: 'message'");
    if (jl_to_string(r, v[0], &s) < 0) return -1;
    if (r->err && r->err->code != PAIL_OK) return -1;
    r->raw_error = true;  // jinja_internal.h: the message goes up exactly as the template wrote it
    return err_set(r->err, PAIL_ERR_INVALID, "%s", s.u.s->p);
}

// datetime.now().strftime(fmt): datetime handles %f, %z, %:z and %Z itself (a naive datetime's
// zone directives print nothing), the rest goes to the C library's strftime as in CPython.
static int g_strftime_now(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    (void)self;
    static const char *const names[] = {"format"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, "strftime_now", a, names, 1, v, &given) < 0) return -1;
    if (!(given & 1)) return jr_fail(r, "strftime_now() missing 1 required positional argument: 'format'");
    if (v[0].kind != JV_STR) return jr_fail(r, "strftime() argument 1 must be str, not %s", jv_type_name(v[0]));
    struct timespec ts = {0};
    if (r->lim->now == INT64_MIN) clock_gettime(CLOCK_REALTIME, &ts);
    else ts.tv_sec = (time_t)r->lim->now;
    struct tm tm;
    if (!localtime_r(&ts.tv_sec, &tm)) return jr_fail(r, "strftime_now: time %lld is out of range", (long long)ts.tv_sec);
    JBuf fmt = {0};
    const char *f = v[0].u.s->p;
    size_t n = v[0].u.s->len;
    for (size_t i = 0; i < n; i++) {  // rewrite the directives datetime owns
        if (f[i] == '%' && i + 1 < n) {
            char c = f[i + 1];
            if (c == 'f') {
                char us[16];
                snprintf(us, sizeof us, "%06ld", (long)(ts.tv_nsec / 1000));
                if (jbuf_put(r, &fmt, us, 6) < 0) return -1;
                i++;
                continue;
            }
            if (c == 'z' || c == 'Z') { i++; continue; }
            if (c == ':' && i + 2 < n && f[i + 2] == 'z') { i += 2; continue; }
            if (jbuf_put(r, &fmt, f + i, 2) < 0) return -1;
            i++;
            continue;
        }
        if (jbuf_put(r, &fmt, f + i, 1) < 0) return -1;
    }
    if (!fmt.len) return jv_str_new(r, "", 0, out);
    // strftime returns 0 when the buffer is too small (or the result empty): grow, bounded.
    for (size_t cap = 256; cap <= r->lim->max_output + 1; cap *= 4) {
        char *buf = ja_alloc(r, cap);
        if (!buf) return -1;
        size_t k = strftime(buf, cap, fmt.p, &tm);
        if (k || cap > 1024 * fmt.len) return jv_str_new(r, buf, k, out);
    }
    return jr_fail(r, "strftime_now: the result is over the output limit (%zu bytes)", r->lim->max_output);
}

int jinja_globals_add(JRender *r, JDict *d) {
    static const struct {
        const char *name;
        JBuiltinFn fn;
    } g[] = {{"range", g_range}, {"dict", g_dict}, {"namespace", g_namespace},
             {"raise_exception", g_raise_exception}, {"strftime_now", g_strftime_now},
             {"cycler", g_cycler}, {"joiner", g_joiner}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        JFunc *f = jfunc_builtin(r, g[i].name, g[i].fn, jv_undefined(NULL));
        JValue k;
        if (!f || jv_str_new(r, g[i].name, strlen(g[i].name), &k) < 0 ||
            jdict_set(r, d, k, (JValue){.kind = JV_FUNC, .u.fn = f}) < 0)
            return -1;
    }
    return 0;
}

// ---- tests (jinja2/tests.py)

static bool is_num(JValue v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static double num_f(JValue v) { return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b; }

// value % m == want, with Python's modulo (the result takes the divisor's sign).
static int py_mod_is(JRender *r, JValue v, JValue m, double want, bool *out) {
    if (v.kind == JV_STR) {  // str % m is printf formatting: a string, never equal to a number
        JValue s;
        if (jinja_printf(r, v, m, &s) < 0) return -1;
        *out = false;
        return 0;
    }
    if (!is_num(v) || !is_num(m))
        return jr_fail(r, "unsupported operand type(s) for %%: '%s' and '%s'", jv_type_name(v), jv_type_name(m));
    if (v.kind != JV_FLOAT && m.kind != JV_FLOAT) {
        int64_t a = v.kind == JV_INT ? v.u.i : v.u.b, b = m.kind == JV_INT ? m.u.i : m.u.b;
        if (b == 0) return jr_fail(r, "integer modulo by zero");
        if (b == -1) { *out = want == 0; return 0; }
        int64_t q = a % b;
        if (q && (q < 0) != (b < 0)) q += b;
        *out = (double)q == want;
        return 0;
    }
    double a = num_f(v), b = num_f(m);
    if (b == 0) return jr_fail(r, "float modulo");
    double q = fmod(a, b);
    if (q && (q < 0) != (b < 0)) q += b;
    *out = q == want;
    return 0;
}

// str.islower() / isupper(): some cased character, and none of the other case.
bool jl_str_case_is(const JStr *s, bool lower) {
    bool cased = false;
    for (size_t i = 0; i < s->len;) {
        int32_t c;
        i += jl_utf8_next(s->p + i, s->len - i, &c);
        if (utf8proc_isupper(c) || utf8proc_category(c) == UTF8PROC_CATEGORY_LT) {
            if (lower) return false;
            cased = true;
        } else if (utf8proc_islower(c)) {
            if (!lower) return false;
            cased = true;
        }
    }
    return cased;
}

int jinja_contains(JRender *r, JValue seq, JValue v, bool *out) {
    size_t at;
    int found;
    *out = false;
    switch (seq.kind) {
    case JV_STR:
        if (v.kind != JV_STR)
            return jr_fail(r, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
        if (!v.u.s->len) return *out = true, 0;
        if ((found = jr_find(r, seq.u.s->p, seq.u.s->len, v.u.s->p, v.u.s->len, &at)) < 0) return -1;
        *out = found;
        return 0;
    case JV_LIST: case JV_TUPLE: {
        size_t i = seq.u.l->pos;
        for (; i < seq.u.l->n && !*out; i++)
            if (jr_equal(r, seq.u.l->v[i], v, out) < 0) return -1;
        if (seq.u.l->gen) seq.u.l->pos = i;  // a generator is consumed up to the match
        return 0;
    }
    case JV_DICT: case JV_NAMESPACE:
        if (v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_NAMESPACE)  // a key is looked up by hash
            return jr_fail(r, "unhashable type: '%s'", jv_type_name(v));
        if (jr_work(r, seq.u.d->n * sizeof(JValue)) < 0) return -1;  // jdict_get scans the keys
        *out = jdict_get(seq.u.d, v) != NULL;
        return 0;
    case JV_UNDEFINED:
        *out = false;
        return 0;
    default:
        return jr_fail(r, "argument of type '%s' is not iterable", jv_type_name(seq));
    }
}

static const char *const test_names[] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
    "boolean", "true", "false", "equalto", "eq", "==", "ne", "!=", "lt", "<", "gt", ">", "le", "<=", "ge", ">=",
    "in", "odd", "even", "divisibleby", "callable", "lower", "upper", "sameas", "lessthan", "greaterthan", "escaped",
    "filter", "test", NULL};

bool jinja_test_known(const char *name) {
    for (int i = 0; test_names[i]; i++)
        if (!strcmp(test_names[i], name)) return true;
    return false;
}

static int one_arg(JRender *r, const char *name, const JArgs *a, JValue *v) {
    static const char *const names[] = {"other"};
    unsigned given;
    if (jl_bind(r, name, a, names, 1, v, &given) < 0) return -1;
    if (!(given & 1)) return jr_fail(r, "test '%s' takes 1 argument (0 given)", name);
    return 0;
}

int jinja_test_call(JRender *r, const char *name, JValue v, const JArgs *a, bool *out) {
    JValue o;
    int c;
    const char *n = name;
#define IS(s) (!strcmp(n, s))
    if (IS("eq") || IS("==") || IS("equalto")) {
        if (one_arg(r, n, a, &o) < 0) return -1;
        return jr_equal(r, v, o, out);
    }
    if (IS("ne") || IS("!=")) {
        if (one_arg(r, n, a, &o) < 0 || jr_equal(r, v, o, out) < 0) return -1;
        *out = !*out;
        return 0;
    }
    if (IS("lt") || IS("<") || IS("lessthan") || IS("gt") || IS(">") || IS("greaterthan") || IS("le") || IS("<=") ||
        IS("ge") || IS(">=")) {
        if (one_arg(r, n, a, &o) < 0) return -1;
        char op = IS("lt") || IS("<") || IS("lessthan") || IS("le") || IS("<=") ? '<' : '>';
        bool eq = IS("le") || IS("<=") || IS("ge") || IS(">=");
        if (jv_compare(r, v, o, &c) < 0) {  // the message names the operator asked for
            if (r->err) err_clear(r->err);
            return jr_fail(r, "'%c%s' not supported between instances of '%s' and '%s'", op, eq ? "=" : "",
                           jv_type_name(v), jv_type_name(o));
        }
        if (isnan(num_f(v)) || isnan(num_f(o))) c = 2;  // NaN: every comparison False
        *out = c == 2 ? false : op == '<' ? (eq ? c <= 0 : c < 0) : (eq ? c >= 0 : c > 0);
        return 0;
    }
    if (IS("in")) {
        if (one_arg(r, n, a, &o) < 0) return -1;
        return jinja_contains(r, o, v, out);
    }
    if (IS("sameas")) {  // Python's `is`: scalars CPython shares (None, bools, small ints, equal
                         // literals) compare by value, containers by identity
        if (one_arg(r, n, a, &o) < 0) return -1;
        if (v.kind != o.kind || v.kind == JV_UNDEFINED) *out = false;  // each undefined is an object of its own
        else if (v.kind == JV_LIST || v.kind == JV_TUPLE) *out = v.u.l == o.u.l;
        else if (v.kind == JV_DICT || v.kind == JV_NAMESPACE) *out = v.u.d == o.u.d;
        else return jr_equal(r, v, o, out);
        return 0;
    }
    if (IS("divisibleby")) {
        static const char *const names[] = {"num"};
        unsigned given;
        if (jl_bind(r, n, a, names, 1, &o, &given) < 0) return -1;
        if (!given) return jr_fail(r, "test 'divisibleby' takes 1 argument (0 given)");
        return py_mod_is(r, v, o, 0, out);
    }
    if (jl_no_args(r, n, a) < 0) return -1;
    if (IS("odd")) return py_mod_is(r, v, jv_int(2), 1, out);
    if (IS("escaped")) return *out = false, 0;  // nothing here has __html__ (no Markup: autoescape is off)
    if (IS("filter") || IS("test")) {  // `'upper' is filter`: the name is one this environment knows
        *out = v.kind == JV_STR && (IS("filter") ? jinja_filter_known(v.u.s->p) : jinja_test_known(v.u.s->p));
        return 0;
    }
    if (IS("even")) return py_mod_is(r, v, jv_int(2), 0, out);
    if (IS("defined")) *out = v.kind != JV_UNDEFINED;
    else if (IS("undefined")) *out = v.kind == JV_UNDEFINED;
    else if (IS("none")) *out = v.kind == JV_NONE;
    else if (IS("string")) *out = v.kind == JV_STR;
    else if (IS("mapping")) *out = v.kind == JV_DICT;
    else if (IS("iterable"))
        *out = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_DICT || v.kind == JV_UNDEFINED;
    else if (IS("sequence"))  // len() and [] work: jinja2's Undefined has both
        *out = v.kind == JV_STR || (v.kind == JV_LIST && !v.u.l->gen && (!v.u.l->view || v.u.l->view == JL_RANGE)) ||
               v.kind == JV_TUPLE || v.kind == JV_DICT ||
               v.kind == JV_UNDEFINED;
    else if (IS("number")) *out = is_num(v);
    else if (IS("integer")) *out = v.kind == JV_INT;
    else if (IS("float")) *out = v.kind == JV_FLOAT;
    else if (IS("boolean")) *out = v.kind == JV_BOOL;
    else if (IS("true")) *out = v.kind == JV_BOOL && v.u.b;
    else if (IS("false")) *out = v.kind == JV_BOOL && !v.u.b;
    else if (IS("callable"))  // Undefined has __call__ (that raises); a cycler has none
        *out = (v.kind == JV_FUNC && !(v.u.fn->kind == JF_BUILTIN && v.u.fn->fn == cycler_obj)) || v.kind == JV_UNDEFINED;
    else if (IS("lower") || IS("upper")) {
        JValue s;
        if (jl_to_string(r, v, &s) < 0) return -1;
        *out = jl_str_case_is(s.u.s, IS("lower"));
    } else
        return jr_fail(r, "No test named '%s'.", name);
#undef IS
    return 0;
}
