// jinja2 3.1's filters as chat templates use them (jinja2/filters.py), with transformers'
// tojson (json.dumps, ensure_ascii=False). There is no autoescape: safe is the identity and
// escape returns plain text.
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>
#include "tokenizer/jinja_lib.h"

#define BIND(fn, ...)                                                   \
    static const char *const names[] = {__VA_ARGS__};                   \
    enum { NP = sizeof names / sizeof names[0] };                       \
    JValue v[NP];                                                       \
    unsigned given;                                                     \
    if (jl_bind(r, fn, a, names, NP, v, &given) < 0) return -1
#define GIVEN(i) ((given >> (i)) & 1u)

static int list_out(JList *l, JValue *out) {
    *out = jl_list_value(l);
    return 0;
}

// What jinja2 hands on as a generator (map, select, unique, ...): see JList.gen.
static int gen_out(JList *l, JValue *out) {
    l->gen = true;
    return list_out(l, out);
}

// sorted(reverse=...) takes an int or a bool only.
static int reverse_arg(JRender *r, JValue v) {
    if (v.kind == JV_BOOL || v.kind == JV_INT) return 0;
    return jr_fail(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v));
}

static int as_int(JRender *r, JValue v, const char *what, int64_t *i) {
    if (v.kind == JV_INT) *i = v.u.i;
    else if (v.kind == JV_BOOL) *i = v.u.b;
    else return jr_fail(r, "%s: '%s' object cannot be interpreted as an integer", what, jv_type_name(v));
    return 0;
}

// Python's len().
static int py_len(JRender *r, JValue v, int64_t *n) {
    switch (v.kind) {
    case JV_STR: *n = (int64_t)jv_str_nchars(v.u.s); return 0;
    case JV_LIST: case JV_TUPLE:
        if (v.u.l->gen) break;
        *n = (int64_t)v.u.l->n;
        return 0;
    case JV_DICT: *n = (int64_t)v.u.d->n; return 0;
    case JV_UNDEFINED: *n = 0; return 0;
    default: break;
    }
    return jr_fail(r, "object of type '%s' has no len()", jv_type_name(v));
}

// jinja2's ignore_case: strings compare lowered unless case_sensitive.
static int sort_key(JRender *r, JValue v, const char *attr, bool case_sensitive, JValue *key) {
    if (attr && jl_attr_path(r, v, attr, &v) < 0) return -1;
    if (!case_sensitive && v.kind == JV_STR) return jl_lower(r, v, key);
    *key = v;
    return 0;
}

static const char *attr_name(JRender *r, JValue v, bool given) {
    if (!given || v.kind == JV_NONE) return NULL;
    if (v.kind == JV_INT) {
        char b[24];
        snprintf(b, sizeof b, "%lld", (long long)v.u.i);
        const JStr *s = jstr_new(r, b, strlen(b));
        return s ? s->p : NULL;
    }
    return v.kind == JV_STR ? v.u.s->p : NULL;
}

// ---- string filters

static int f_trim(JRender *r, JValue s, const JArgs *a, JValue *out) {
    BIND("trim", "chars");
    JValue str, m;
    if (jl_to_string(r, s, &str) < 0 || jinja_getattr(r, str, "strip", &m) < 0) return -1;
    JArgs sa = {.n = GIVEN(0) ? 1 : 0, .pos = v};
    return m.u.fn->fn(r, &m.u.fn->self, &sa, out);
}

static int f_case(JRender *r, const char *fn, const char *method, JValue s, const JArgs *a, JValue *out) {
    if (jl_no_args(r, fn, a) < 0) return -1;
    JValue str, m;
    if (jl_to_string(r, s, &str) < 0 || jinja_getattr(r, str, method, &m) < 0) return -1;
    JArgs none = {0};
    return m.u.fn->fn(r, &m.u.fn->self, &none, out);
}

// jinja2's do_title: each run split off by [-\s({[<]+ gets its first character upper-cased
// and the rest lowered (unlike str.title(), "they're" stays "They're").
static bool title_sep(int32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || jl_is_space(c); }

static int f_title(JRender *r, JValue s, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "title", a) < 0) return -1;
    JValue str;
    if (jl_to_string(r, s, &str) < 0) return -1;
    const JStr *t = str.u.s;
    JBuf b = {0};
    bool start = true;
    for (size_t i = 0; i < t->len;) {
        int32_t c;
        i += jl_utf8_next(t->p + i, t->len - i, &c);
        bool sep = title_sep(c);
        if ((sep ? jl_utf8_put(r, &b, c) : jl_case_put(r, &b, c, start ? JCASE_UPPER : JCASE_LOWER)) < 0) return -1;
        start = sep;
    }
    return jl_str_from(r, &b, out);
}

static int f_replace(JRender *r, JValue s, const JArgs *a, JValue *out) {
    JValue str;
    if (jl_to_string(r, s, &str) < 0) return -1;
    return jl_replace(r, "replace", str, a, out);
}

static int f_indent(JRender *r, JValue s, const JArgs *a, JValue *out) {
    BIND("indent", "width", "first", "blank");
    if (s.kind == JV_UNDEFINED) return jr_fail_undefined(r, s);  // s += "\n" raises on Undefined
    JValue str, ind;
    if (jl_to_string(r, s, &str) < 0) return -1;
    if (!GIVEN(0)) v[0] = jv_int(4);
    if (v[0].kind == JV_STR) ind = v[0];
    else {
        int64_t w = 0;
        if (as_int(r, v[0], "indent width", &w) < 0) return -1;
        if (w < 0) w = 0;
        if ((uint64_t)w > r->lim->max_output) return jr_fail(r, "indent width %lld is over the output limit", (long long)w);
        char *sp = ja_alloc(r, (size_t)w + 1);
        if (!sp) return -1;
        memset(sp, ' ', (size_t)w);
        if (jv_str_new(r, sp, (size_t)w, &ind) < 0) return -1;
    }
    bool first = GIVEN(1) && jv_truthy(v[1]), blank = GIVEN(2) && jv_truthy(v[2]);
    // s += "\n"; then s.splitlines() (every Python line boundary), joined with "\n"
    JBuf t = {0};
    if (jbuf_put(r, &t, str.u.s->p, str.u.s->len) < 0 || jbuf_put(r, &t, "\n", 1) < 0) return -1;
    JValue ts, lines, m;
    JArgs none = {0};
    if (jl_str_from(r, &t, &ts) < 0 || jinja_getattr(r, ts, "splitlines", &m) < 0 ||
        m.u.fn->fn(r, &m.u.fn->self, &none, &lines) < 0)
        return -1;
    JList *l = lines.u.l;
    JBuf b = {0};
    const JStr *is = ind.u.s;
    if (first && jbuf_put(r, &b, is->p, is->len) < 0) return -1;
    for (size_t i = 0; i < l->n; i++) {
        const JStr *line = l->v[i].u.s;
        if (i && jbuf_put(r, &b, "\n", 1) < 0) return -1;
        if (i && (blank || line->len) && jbuf_put(r, &b, is->p, is->len) < 0) return -1;
        if (jbuf_put(r, &b, line->p, line->len) < 0) return -1;
    }
    return jl_str_from(r, &b, out);
}

static int f_escape(JRender *r, JValue s, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "escape", a) < 0) return -1;
    JValue str;
    if (jl_to_string(r, s, &str) < 0) return -1;
    JBuf b = {0};
    for (size_t i = 0; i < str.u.s->len; i++) {
        char c = str.u.s->p[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e ? jbuf_put(r, &b, e, strlen(e)) < 0 : jbuf_put(r, &b, &c, 1) < 0) return -1;
    }
    return jl_str_from(r, &b, out);
}

// len(re.findall(r"\w+", s)): \w is a letter, digit, or underscore (str.isalnum() or '_').
static int f_wordcount(JRender *r, JValue s, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "wordcount", a) < 0) return -1;
    JValue str;
    if (jl_to_string(r, s, &str) < 0) return -1;
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < str.u.s->len;) {
        int32_t c;
        i += jl_utf8_next(str.u.s->p + i, str.u.s->len - i, &c);
        utf8proc_category_t k = utf8proc_category(c);
        bool w = c == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
                 (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
        if (w && !in) n++;
        in = w;
    }
    *out = jv_int(n);
    return 0;
}

static int f_tojson(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    int indent = -1;
    const char *istr = NULL, *si = NULL, *sk = NULL;
    if (GIVEN(1) && v[1].kind != JV_NONE) {
        if (v[1].kind == JV_STR) istr = v[1].u.s->p;
        else {
            int64_t w = 0;
            if (as_int(r, v[1], "tojson indent", &w) < 0) return -1;
            indent = w < 0 ? 0 : w > 1000 ? 1000 : (int)w;  // Python: ' ' * negative is ''
            if (w > 1000) return jr_fail(r, "tojson: indent %lld is too wide", (long long)w);
        }
    }
    if (GIVEN(2) && v[2].kind != JV_NONE) {
        JValue sp = v[2];
        if ((sp.kind != JV_LIST && sp.kind != JV_TUPLE) || sp.u.l->n != 2 || sp.u.l->v[0].kind != JV_STR ||
            sp.u.l->v[1].kind != JV_STR)
            return jr_fail(r, "tojson: separators must be a pair of strings (item_separator, key_separator)");
        si = sp.u.l->v[0].u.s->p;
        sk = sp.u.l->v[1].u.s->p;
    }
    JBuf b = {0};
    if (jv_to_json(r, x, GIVEN(0) && jv_truthy(v[0]), indent, istr, si, sk, GIVEN(3) && jv_truthy(v[3]), &b) < 0)
        return -1;
    return jl_str_from(r, &b, out);
}

// ---- conversions

static int f_string(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "string", a) < 0) return -1;
    return jl_to_string(r, x, out);
}

// int(text, base) as Python parses it: surrounding whitespace, one sign, underscores between
// digits, a 0x/0o/0b prefix matching the base (or any with base 0).
static int parse_int(const JStr *s, int base, int64_t *out) {
    const char *p = s->p, *e = s->p + s->len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13))) p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13))) e--;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (e - p >= 2 && p[0] == '0') {
        char c = (char)(p[1] | 0x20);
        int pb = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            p += 2;
            if (p < e && *p == '_') p++;
        }
    }
    if (base == 0) base = 10;
    if (p >= e) return 0;
    __int128 v = 0;
    bool big = false;
    bool prev_us = true;
    for (; p < e; p++) {
        if (*p == '_') {
            if (prev_us) return 0;
            prev_us = true;
            continue;
        }
        int d = *p >= '0' && *p <= '9' ? *p - '0' : (*p | 0x20) >= 'a' && (*p | 0x20) <= 'z' ? (*p | 0x20) - 'a' + 10 : 99;
        if (d >= base) return 0;
        if (!big) v = v * base + d;
        if (v > (__int128)INT64_MAX + 1) big = true;  // beyond int64: refused rather than wrapped
        prev_us = false;
    }
    if (prev_us) return 0;
    if (big || (!neg && v > INT64_MAX)) return -1;
    *out = neg ? (int64_t)-v : (int64_t)v;
    return 1;
}

// float(text) as Python reads it: the stripped text, all of it, a decimal number (an underscore
// only between two digits: "1_000.5") or inf, infinity, nan in any case; no hex.
static bool parse_float(const JStr *s, double *out) {
    const char *p = s->p, *e = s->p + s->len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13))) p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13))) e--;
    char buf[400];
    size_t n = 0;
    if (p == e || e - p >= (ptrdiff_t)sizeof buf) return false;
    for (const char *q = p; q < e; q++) {
        if (*q == '_') {
            if (q == p || q + 1 == e || !isdigit((unsigned char)q[-1]) || !isdigit((unsigned char)q[1])) return false;
            continue;
        }
        if (!isalnum((unsigned char)*q) && !strchr("+-.", *q)) return false;
        buf[n++] = *q;
    }
    buf[n] = 0;
    const char *d = buf + (buf[0] == '+' || buf[0] == '-');
    bool word = isalpha((unsigned char)d[0]);
    if (word && strcasecmp(d, "inf") && strcasecmp(d, "infinity") && strcasecmp(d, "nan")) return false;
    if (!word && strpbrk(d, "xXpP")) return false;  // strtod would read hex
    char *end;
    double f = strtod(buf, &end);
    if (end == buf || *end) return false;
    *out = f;
    return true;
}

// int(f) for a finite float within 64 bits. jinja2's do_int gives the default for nan (ValueError)
// and, for a string, for inf (its int(float(s)) fallback catches OverflowError); int() of an inf
// float raises. Bigger numbers fail: Python's int is unbounded, refused rather than wrapped.
static int float_to_int(JRender *r, double f, bool from_str, JValue def, JValue *out) {
    if (isnan(f) || (isinf(f) && from_str)) return *out = def, 0;
    if (isinf(f)) return jr_fail(r, "cannot convert float infinity to integer");
    if (fabs(f) >= 9.2e18) return jr_fail(r, "int: %g is beyond 64 bits", f);
    *out = jv_int((int64_t)f);
    return 0;
}

static int f_int(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("int", "default", "base");
    if (x.kind == JV_UNDEFINED) return jr_fail_undefined(r, x);  // int(Undefined) raises
    JValue def = GIVEN(0) ? v[0] : jv_int(0);
    int64_t base = 10;
    if (GIVEN(1) && as_int(r, v[1], "int base", &base) < 0) return -1;
    switch (x.kind) {
    case JV_INT: *out = x; return 0;
    case JV_BOOL: *out = jv_int(x.u.b); return 0;
    case JV_FLOAT: return float_to_int(r, x.u.f, false, def, out);
    case JV_STR: {
        int64_t i;
        double f;
        int rc = base >= 0 && base <= 36 && base != 1 ? parse_int(x.u.s, (int)base, &i) : 0;
        if (rc < 0) return jr_fail(r, "int: '%.40s' is beyond 64 bits", x.u.s->p);
        if (rc > 0) return *out = jv_int(i), 0;
        if (parse_float(x.u.s, &f)) return float_to_int(r, f, true, def, out);
        *out = def;
        return 0;
    }
    default: *out = def; return 0;
    }
}

static int f_float(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("float", "default");
    if (x.kind == JV_UNDEFINED) return jr_fail_undefined(r, x);
    JValue def = GIVEN(0) ? v[0] : jv_float(0.0);
    double f;
    if (x.kind == JV_FLOAT) *out = x;
    else if (x.kind == JV_INT) *out = jv_float((double)x.u.i);
    else if (x.kind == JV_BOOL) *out = jv_float(x.u.b);
    else if (x.kind == JV_STR && parse_float(x.u.s, &f)) *out = jv_float(f);
    else *out = def;
    return 0;
}

static int f_list(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "list", a) < 0) return -1;
    JList *l, *c;
    if (jl_iter_list(r, x, &l) < 0 || !(c = jlist_new(r, l->n))) return -1;
    for (size_t i = 0; i < l->n; i++)
        if (jlist_push(r, c, l->v[i]) < 0) return -1;
    return list_out(c, out);
}

static int f_safe(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "safe", a) < 0) return -1;
    *out = x;
    return 0;
}

// ---- sequences

static int f_length(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "length", a) < 0) return -1;
    int64_t n = 0;
    if (py_len(r, x, &n) < 0) return -1;
    *out = jv_int(n);
    return 0;
}

static int f_first(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "first", a) < 0) return -1;
    if (jv_is_gen(x)) {  // next(): takes one item
        JList *g = x.u.l;
        *out = g->pos < g->n ? g->v[g->pos++] : jv_undefined("first");
        return 0;
    }
    JList *l;
    if (jl_iter_list(r, x, &l) < 0) return -1;
    *out = l->n ? l->v[0] : jv_undefined("first");
    return 0;
}

static int f_last(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "last", a) < 0) return -1;
    if (jv_is_gen(x)) return jr_fail(r, "'generator' object is not reversible");
    JList *l;
    if (jl_iter_list(r, x, &l) < 0) return -1;
    *out = l->n ? l->v[l->n - 1] : jv_undefined("last");
    return 0;
}

static int f_default(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("default", "default_value", "boolean");
    JValue def = GIVEN(0) ? v[0] : jv_undefined(NULL);
    if (!GIVEN(0) && jv_str_new(r, "", 0, &def) < 0) return -1;
    bool boolean = GIVEN(1) && jv_truthy(v[1]);
    *out = x.kind == JV_UNDEFINED || (boolean && !jv_truthy(x)) ? def : x;
    return 0;
}

static int f_items(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "items", a) < 0) return -1;
    if (x.kind == JV_UNDEFINED) {
        JList *l = jlist_new(r, 0);
        return l ? gen_out(l, out) : -1;
    }
    if (x.kind != JV_DICT) return jr_fail(r, "Can only get item pairs from a mapping.");
    JValue m;
    JArgs none = {0};
    if (jinja_getattr(r, x, "items", &m) < 0 || m.u.fn->fn(r, &m.u.fn->self, &none, out) < 0) return -1;
    out->u.l->view = JL_LIST;
    return gen_out(out->u.l, out);
}

static int f_dictsort(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (GIVEN(2) && reverse_arg(r, v[2]) < 0) return -1;
    if (x.kind != JV_DICT) return jr_fail(r, "dictsort: '%s' object has no attribute 'items'", jv_type_name(x));
    bool cs = GIVEN(0) && jv_truthy(v[0]), rev = GIVEN(2) && jv_truthy(v[2]);
    int pos = 0;
    if (GIVEN(1)) {
        if (v[1].kind == JV_STR && !strcmp(v[1].u.s->p, "value")) pos = 1;
        else if (!(v[1].kind == JV_STR && !strcmp(v[1].u.s->p, "key")))
            return jr_fail(r, "You can only sort by either \"key\" or \"value\"");
    }
    JValue items, m;
    JArgs none = {0};
    if (jinja_getattr(r, x, "items", &m) < 0 || m.u.fn->fn(r, &m.u.fn->self, &none, &items) < 0) return -1;
    JList *l = items.u.l;
    l->view = JL_LIST;  // sorted(d.items()): a list
    JValue *keys = ja_alloc(r, (l->n + 1) * sizeof *keys);
    if (!keys) return -1;
    for (size_t i = 0; i < l->n; i++)
        if (sort_key(r, l->v[i].u.l->v[pos], NULL, cs, &keys[i]) < 0) return -1;
    if (jl_sort(r, keys, l->v, l->n, rev) < 0) return -1;
    return list_out(l, out);
}

static int f_join(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("join", "d", "attribute");
    const char *attr = attr_name(r, v[1], GIVEN(1));
    JValue sep = v[0];
    if (!GIVEN(0) && jv_str_new(r, "", 0, &sep) < 0) return -1;
    JList *l;
    if (jl_iter_list(r, x, &l) < 0) return -1;
    JBuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        JValue e = l->v[i];
        if (attr && jl_attr_path(r, e, attr, &e) < 0) return -1;
        if ((i && jv_to_str(r, sep, &b) < 0) || jv_to_str(r, e, &b) < 0) return -1;
    }
    return jl_str_from(r, &b, out);
}

static JArgs args_from(const JArgs *a, int skip) {
    return (JArgs){.n = a->n - skip, .pos = a->pos + skip, .nkw = a->nkw, .kw_names = a->kw_names, .kw = a->kw};
}

// jinja2's map, select, reject, selectattr and rejectattr start with `if value:`: None, an
// undefined, 0, '' or an empty container give an empty generator without being iterated.
static int falsy_empty(JRender *r, JValue x, JValue *out, bool *done) {
    *done = !jv_truthy(x);
    if (!*done) return 0;
    JList *l = jlist_new(r, 0);
    return l ? gen_out(l, out) : -1;
}

static int f_map(JRender *r, JValue x, const JArgs *a, JValue *out) {
    bool done;
    if (falsy_empty(r, x, out, &done) < 0 || done) return done ? 0 : -1;
    JList *l, *res;
    if (jl_iter_list(r, x, &l) < 0 || !(res = jlist_new(r, l->n))) return -1;
    if (a->n == 0) {  // map(attribute=..., default=...)
        const char *attr = NULL;
        JValue def = jv_undefined(NULL);
        bool has_def = false;
        for (int k = 0; k < a->nkw; k++) {
            if (!strcmp(a->kw_names[k], "attribute")) attr = attr_name(r, a->kw[k], true);
            else if (!strcmp(a->kw_names[k], "default")) { def = a->kw[k]; has_def = true; }
            else return jr_fail(r, "map: unexpected keyword argument '%s'", a->kw_names[k]);
        }
        if (!attr) return jr_fail(r, "map requires a filter argument");
        for (size_t i = 0; i < l->n; i++) {
            JValue e;
            if (jl_attr_path(r, l->v[i], attr, &e) < 0) return -1;
            if (has_def && e.kind == JV_UNDEFINED) e = def;
            if (jlist_push(r, res, e) < 0) return -1;
        }
        return gen_out(res, out);
    }
    if (a->pos[0].kind != JV_STR) return jr_fail(r, "map: the filter name must be a string");
    const char *name = a->pos[0].u.s->p;
    if (!jinja_filter_known(name)) return jr_fail(r, "No filter named '%s'.", name);
    JArgs rest = args_from(a, 1);
    for (size_t i = 0; i < l->n; i++) {
        JValue e;
        if (jinja_filter_call(r, name, l->v[i], &rest, &e) < 0 || jlist_push(r, res, e) < 0) return -1;
    }
    return gen_out(res, out);
}

// select / reject / selectattr / rejectattr (jinja2's select_or_reject).
static int select_impl(JRender *r, JValue x, const JArgs *a, bool attr_mode, bool want, JValue *out) {
    const char *fn = attr_mode ? (want ? "selectattr" : "rejectattr") : (want ? "select" : "reject");
    bool done;
    if (falsy_empty(r, x, out, &done) < 0 || done) return done ? 0 : -1;
    if (a->nkw) return jr_fail(r, "%s() got an unexpected keyword argument '%s'", fn, a->kw_names[0]);
    int k = 0;
    const char *attr = NULL;
    if (attr_mode) {
        if (a->n < 1) return jr_fail(r, "%s: missing the attribute argument", fn);
        if (!(attr = attr_name(r, a->pos[0], true))) return jr_fail(r, "%s: the attribute must be a string", fn);
        k = 1;
    }
    const char *test = NULL;
    if (a->n > k) {
        if (a->pos[k].kind != JV_STR) return jr_fail(r, "%s: the test name must be a string", fn);
        test = a->pos[k].u.s->p;
        if (!jinja_test_known(test)) return jr_fail(r, "No test named '%s'.", test);
        k++;
    }
    JArgs rest = {.n = a->n - k, .pos = a->pos + k};
    JList *l, *res;
    if (jl_iter_list(r, x, &l) < 0 || !(res = jlist_new(r, 0))) return -1;
    for (size_t i = 0; i < l->n; i++) {
        JValue e = l->v[i];
        bool ok;
        if (attr && jl_attr_path(r, e, attr, &e) < 0) return -1;
        if (test) {
            if (jinja_test_call(r, test, e, &rest, &ok) < 0) return -1;
        } else
            ok = jv_truthy(e);
        if (ok == want && jlist_push(r, res, l->v[i]) < 0) return -1;
    }
    return gen_out(res, out);
}

static int f_select(JRender *r, JValue x, const JArgs *a, JValue *out) { return select_impl(r, x, a, false, true, out); }
static int f_reject(JRender *r, JValue x, const JArgs *a, JValue *out) { return select_impl(r, x, a, false, false, out); }
static int f_selectattr(JRender *r, JValue x, const JArgs *a, JValue *out) { return select_impl(r, x, a, true, true, out); }
static int f_rejectattr(JRender *r, JValue x, const JArgs *a, JValue *out) { return select_impl(r, x, a, true, false, out); }

// unique keeps the first of each set of equal keys. A hash table of the kept keys' indices
// (open addressing, at most half full) makes it O(n); a scan of the kept keys for each
// item was O(n^2) (40k items took 3.4 s).
static int f_unique(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("unique", "case_sensitive", "attribute");
    bool cs = GIVEN(0) && jv_truthy(v[0]);
    const char *attr = attr_name(r, v[1], GIVEN(1));
    JList *l, *res, *seen;
    if (jl_iter_list(r, x, &l) < 0 || !(res = jlist_new(r, 0)) || !(seen = jlist_new(r, 0))) return -1;
    size_t cap = 16;
    while (cap < 2 * l->n) cap *= 2;
    size_t *slot = ja_alloc(r, cap * sizeof *slot);  // index into seen + 1; 0 = empty
    if (!slot) return -1;
    for (size_t i = 0; i < l->n; i++) {
        JValue key;
        if (sort_key(r, l->v[i], attr, cs, &key) < 0) return -1;
        if (key.kind == JV_LIST || key.kind == JV_DICT || key.kind == JV_NAMESPACE)  // a set of them: Python hashes
            return jr_fail(r, "unhashable type: '%s'", jv_type_name(key));
        uint64_t work = 0;
        size_t h = (size_t)jv_hash(key, &work) & (cap - 1);
        if (jr_work(r, work) < 0) return -1;
        bool dup = false;
        for (; slot[h] && !dup; h = (h + 1) & (cap - 1))
            if (jr_equal(r, seen->v[slot[h] - 1], key, &dup) < 0) return -1;
        if (dup) continue;
        if (jlist_push(r, seen, key) < 0 || jlist_push(r, res, l->v[i]) < 0) return -1;
        slot[h] = seen->n;
    }
    return gen_out(res, out);
}

static int f_sort(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("sort", "reverse", "case_sensitive", "attribute");
    if (GIVEN(0) && reverse_arg(r, v[0]) < 0) return -1;
    bool rev = GIVEN(0) && jv_truthy(v[0]), cs = GIVEN(1) && jv_truthy(v[1]);
    const char *attr = attr_name(r, v[2], GIVEN(2));
    JList *l, *c;
    if (jl_iter_list(r, x, &l) < 0 || !(c = jlist_new(r, l->n))) return -1;
    // jinja2's make_multi_attrgetter: attribute="a,b.c" gives each item the key [a, b.c], a list,
    // so equal parts (two undefined ones too) compare equal before any '<' is asked
    const char *parts[16];
    int np = 0;
    char *buf = NULL;
    if (attr) {
        size_t al = strlen(attr);
        if (!(buf = ja_alloc(r, al + 1))) return -1;
        memcpy(buf, attr, al + 1);
        for (char *p = buf;; p++) {
            if (np == 16) return jr_fail(r, "sort: more than 16 attributes");
            parts[np++] = p;
            if (!(p = strchr(p, ','))) break;
            *p = 0;
        }
    } else {
        parts[np++] = NULL;
    }
    JValue *keys = ja_alloc(r, (l->n + 1) * sizeof *keys);
    if (!keys) return -1;
    for (size_t i = 0; i < l->n; i++) {
        JList *k = jlist_new(r, (size_t)np);
        if (!k || jlist_push(r, c, l->v[i]) < 0) return -1;
        for (int p = 0; p < np; p++) {
            JValue kv;
            if (sort_key(r, l->v[i], parts[p], cs, &kv) < 0 || jlist_push(r, k, kv) < 0) return -1;
        }
        keys[i] = jl_list_value(k);
    }
    if (jl_sort(r, keys, c->v, c->n, rev) < 0) return -1;
    return list_out(c, out);
}

static int min_max(JRender *r, const char *fn, JValue x, const JArgs *a, bool max, JValue *out) {
    BIND(fn, "case_sensitive", "attribute");
    bool cs = GIVEN(0) && jv_truthy(v[0]);
    const char *attr = attr_name(r, v[1], GIVEN(1));
    JList *l;
    if (jl_iter_list(r, x, &l) < 0) return -1;
    if (!l->n) {
        *out = jv_undefined(fn);  // jinja2: "No aggregated item, sequence was empty."
        return 0;
    }
    size_t best = 0;
    JValue bk;
    if (sort_key(r, l->v[0], attr, cs, &bk) < 0) return -1;
    for (size_t i = 1; i < l->n; i++) {
        JValue k;
        int c;
        if (sort_key(r, l->v[i], attr, cs, &k) < 0 || jv_compare(r, k, bk, &c) < 0) return -1;
        if (max ? c > 0 : c < 0) {
            best = i;
            bk = k;
        }
    }
    *out = l->v[best];
    return 0;
}
static int f_min(JRender *r, JValue x, const JArgs *a, JValue *out) { return min_max(r, "min", x, a, false, out); }
static int f_max(JRender *r, JValue x, const JArgs *a, JValue *out) { return min_max(r, "max", x, a, true, out); }

// jinja2: a string reversed; reversed(x), an iterator, for what Python can reverse (list, tuple,
// dict); a generator, which it cannot, into a list, reversed.
static int f_reverse(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "reverse", a) < 0) return -1;
    if (x.kind == JV_STR) return jinja_slice(r, x, false, 0, false, 0, true, -1, out);
    bool was_gen = jv_is_gen(x);
    JList *l, *c;
    if (jl_iter_list(r, x, &l) < 0 || !(c = jlist_new(r, l->n))) return -1;
    for (size_t i = l->n; i-- > 0;)
        if (jlist_push(r, c, l->v[i]) < 0) return -1;
    return was_gen ? list_out(c, out) : gen_out(c, out);
}

// ---- numbers

static int add(JRender *r, JValue x, JValue y, JValue *out) {
    bool xi = x.kind == JV_INT || x.kind == JV_BOOL, yi = y.kind == JV_INT || y.kind == JV_BOOL;
    if ((xi || x.kind == JV_FLOAT) && (yi || y.kind == JV_FLOAT)) {
        if (xi && yi) {
            int64_t a = x.kind == JV_INT ? x.u.i : x.u.b, b = y.kind == JV_INT ? y.u.i : y.u.b, s;
            if (__builtin_add_overflow(a, b, &s)) return jr_fail(r, "sum: integer overflow past 64 bits");
            *out = jv_int(s);
        } else {
            double a = x.kind == JV_FLOAT ? x.u.f : x.kind == JV_INT ? (double)x.u.i : x.u.b;
            double b = y.kind == JV_FLOAT ? y.u.f : y.kind == JV_INT ? (double)y.u.i : y.u.b;
            *out = jv_float(a + b);
        }
        return 0;
    }
    return jr_fail(r, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(x), jv_type_name(y));
}

static int f_sum(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("sum", "attribute", "start");
    const char *attr = attr_name(r, v[0], GIVEN(0));
    JValue acc = GIVEN(1) ? v[1] : jv_int(0);
    JList *l;
    if (jl_iter_list(r, x, &l) < 0) return -1;
    for (size_t i = 0; i < l->n; i++) {
        JValue e = l->v[i];
        if ((attr && jl_attr_path(r, e, attr, &e) < 0) || add(r, acc, e, &acc) < 0) return -1;
    }
    *out = acc;
    return 0;
}

static int f_abs(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "abs", a) < 0) return -1;
    if (x.kind == JV_INT) {
        if (x.u.i == INT64_MIN) return jr_fail(r, "abs: integer overflow past 64 bits");
        *out = jv_int(x.u.i < 0 ? -x.u.i : x.u.i);
    } else if (x.kind == JV_BOOL) *out = jv_int(x.u.b);
    else if (x.kind == JV_FLOAT) *out = jv_float(fabs(x.u.f));
    else return jr_fail(r, "bad operand type for abs(): '%s'", jv_type_name(x));
    return 0;
}

static int f_round(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("round", "precision", "method");
    int64_t prec = 0;
    if (GIVEN(0) && as_int(r, v[0], "round precision", &prec) < 0) return -1;
    const char *method = GIVEN(1) && v[1].kind == JV_STR ? v[1].u.s->p : "common";
    if (strcmp(method, "common") && strcmp(method, "floor") && strcmp(method, "ceil"))
        return jr_fail(r, "method must be common, ceil or floor");
    if (x.kind != JV_INT && x.kind != JV_BOOL && x.kind != JV_FLOAT)
        return jr_fail(r, "type %s doesn't define __round__ method", jv_type_name(x));
    double f = x.kind == JV_FLOAT ? x.u.f : x.kind == JV_INT ? (double)x.u.i : x.u.b;
    if (!strcmp(method, "common")) {
        if (x.kind != JV_FLOAT && prec >= 0) {  // round(int, n >= 0) is the int itself
            *out = x.kind == JV_INT ? x : jv_int(x.u.b);
            return 0;
        }
        if (!isfinite(f) || prec > 300) { *out = jv_float(f); return 0; }
        if (prec >= 0) {  // printf rounds the exact binary value half-to-even, as Python's round
            char b[400];
            snprintf(b, sizeof b, "%.*f", (int)prec, f);
            *out = jv_float(strtod(b, NULL));
        } else {
            double p = pow(10, (double)-prec);
            double q = f / p, rq = nearbyint(q);
            *out = x.kind == JV_FLOAT ? jv_float(rq * p) : jv_int((int64_t)(rq * p));
        }
        return 0;
    }
    double p = pow(10, (double)prec);
    *out = jv_float((!strcmp(method, "floor") ? floor(f * p) : ceil(f * p)) / p);
    return 0;
}

// ---- the table

typedef int (*FilterFn)(JRender *r, JValue x, const JArgs *a, JValue *out);
static int f_upper(JRender *r, JValue x, const JArgs *a, JValue *out) { return f_case(r, "upper", "upper", x, a, out); }
static int f_lower(JRender *r, JValue x, const JArgs *a, JValue *out) { return f_case(r, "lower", "lower", x, a, out); }
static int f_capitalize(JRender *r, JValue x, const JArgs *a, JValue *out) {
    return f_case(r, "capitalize", "capitalize", x, a, out);
}

// ---- format, attr, batch, slice, center (jinja2/filters.py)

// str(value) % (kwargs or args)
static int f_format(JRender *r, JValue x, const JArgs *a, JValue *out) {
    if (a->n && a->nkw) return jr_fail(r, "can't handle positional and keyword arguments at the same time");
    JValue s, args;
    if (jl_to_string(r, x, &s) < 0) return -1;
    if (a->nkw) {
        JDict *d = jdict_new(r, (size_t)a->nkw);
        if (!d) return -1;
        for (int k = 0; k < a->nkw; k++) {
            JValue key;
            if (jv_str_new(r, a->kw_names[k], strlen(a->kw_names[k]), &key) < 0 || jdict_set(r, d, key, a->kw[k]) < 0)
                return -1;
        }
        args = (JValue){.kind = JV_DICT, .u.d = d};
    } else {
        JList *l = jlist_new(r, (size_t)a->n);
        if (!l) return -1;
        for (int k = 0; k < a->n; k++)
            if (jlist_push(r, l, a->pos[k]) < 0) return -1;
        args = (JValue){.kind = JV_TUPLE, .u.l = l};
    }
    return jinja_printf(r, s, args, out);
}

// getattr(obj, name): a Python attribute (a method, a namespace's attribute), never a dict key.
static int f_attr(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("attr", "name");
    if (!GIVEN(0)) return jr_fail(r, "attr() missing 1 required positional argument: 'name'");
    JValue name;
    if (jl_to_string(r, v[0], &name) < 0) return -1;
    if (x.kind == JV_NAMESPACE) {
        const JValue *hit = jdict_get(x.u.d, name);
        *out = hit ? *hit : jv_undefined(name.u.s->p);
        return 0;
    }
    bool found;
    if (jl_method_get(r, x, name.u.s->p, out, &found) < 0) return -1;
    if (!found) *out = jv_undefined(name.u.s->p);
    return 0;
}

static int f_batch(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("batch", "linecount", "fill_with");
    int64_t n = 0;
    if (!GIVEN(0)) return jr_fail(r, "batch() missing 1 required positional argument: 'linecount'");
    if (as_int(r, v[0], "batch linecount", &n) < 0) return -1;
    bool fill = GIVEN(1) && v[1].kind != JV_NONE;
    JList *l, *res = jlist_new(r, 0), *tmp = jlist_new(r, 0);
    if (!res || !tmp || jl_iter_list(r, x, &l) < 0) return -1;
    for (size_t i = 0; i < l->n; i++) {
        if ((int64_t)tmp->n == n) {
            if (jlist_push(r, res, jl_list_value(tmp)) < 0 || !(tmp = jlist_new(r, 0))) return -1;
        }
        if (jlist_push(r, tmp, l->v[i]) < 0) return -1;
    }
    if (tmp->n) {
        if (fill)
            while ((int64_t)tmp->n < n)
                if (jlist_push(r, tmp, v[1]) < 0) return -1;
        if (jlist_push(r, res, jl_list_value(tmp)) < 0) return -1;
    }
    return gen_out(res, out);
}

static int f_slice(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("slice", "slices", "fill_with");
    int64_t slices = 0;
    if (!GIVEN(0)) return jr_fail(r, "slice() missing 1 required positional argument: 'slices'");
    if (as_int(r, v[0], "slice count", &slices) < 0) return -1;
    if (slices <= 0) return jr_fail(r, "integer division or modulo by zero");
    if (slices > 1000000) return jr_fail(r, "slice count %lld is over the limit", (long long)slices);
    bool fill = GIVEN(1) && v[1].kind != JV_NONE;
    JList *l, *res = jlist_new(r, (size_t)slices);
    if (!res || jl_iter_list(r, x, &l) < 0) return -1;
    int64_t len = (int64_t)l->n, per = len / slices, extra = len % slices, offset = 0;
    for (int64_t k = 0; k < slices; k++) {
        int64_t start = offset + k * per;
        if (k < extra) offset++;
        int64_t end = offset + (k + 1) * per;
        JList *t = jlist_new(r, (size_t)(end - start + 1));
        if (!t) return -1;
        for (int64_t i = start; i < end; i++)
            if (jlist_push(r, t, l->v[i]) < 0) return -1;
        if (fill && k >= extra && jlist_push(r, t, v[1]) < 0) return -1;
        if (jlist_push(r, res, jl_list_value(t)) < 0) return -1;
    }
    return gen_out(res, out);
}

static int f_center(JRender *r, JValue x, const JArgs *a, JValue *out) {
    BIND("center", "width");
    JValue s, m;
    if (jl_to_string(r, x, &s) < 0 || jinja_getattr(r, s, "center", &m) < 0) return -1;
    JValue w = GIVEN(0) ? v[0] : jv_int(80);
    JArgs one = {.n = 1, .pos = &w};
    return m.u.fn->fn(r, &m.u.fn->self, &one, out);
}

static const struct {
    const char *name;
    FilterFn fn;
} filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"format", f_format},
    {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
    {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

static FilterFn filter_find(const char *name) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name)) return filters[i].fn;
    return NULL;
}

bool jinja_filter_known(const char *name) { return filter_find(name) != NULL; }

int jinja_filter_call(JRender *r, const char *name, JValue self, const JArgs *a, JValue *out) {
    FilterFn fn = filter_find(name);
    if (!fn) return jr_fail(r, "No filter named '%s'.", name);
    if (jr_step(r) < 0) return -1;
    return fn(r, self, a, out);
}
