// Python's formatting of template values (jinja_internal.h): str(), repr() and json.dumps as
// transformers' tojson calls it, byte for byte what CPython 3 prints. Floats print as
// float.__repr__ (the shortest text that reads back to the same double); string repr escapes
// what str.isprintable() refuses, judged with utf8proc's categories (Unicode version: utf8proc's,
// which may lag or lead CPython's for newly assigned code points).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "tokenizer/jinja_internal.h"

int jbuf_put(JRender *r, JBuf *b, const char *p, size_t n) {
    if (n > r->lim->max_output || b->len > r->lim->max_output - n)
        return jr_fail(r, "output is over the limit of %zu bytes", r->lim->max_output);
    if (jr_work(r, n) < 0) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = ja_alloc(r, nc);
        if (!np) return -1;
        if (b->len) memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static int put_s(JRender *r, JBuf *b, const char *s) { return jbuf_put(r, b, s, strlen(s)); }

// One code point from p[0..n): its length in bytes (>= 1). Invalid UTF-8 reads as one byte
// U+FFFD, so a stray byte never stalls a loop.
static size_t utf8_next(const char *p, size_t n, int32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &c);
    if (k <= 0) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

// ---- floats: float.__repr__ (Python/pystrtod.c, mode 'r': shortest digits, exponent when the
// decimal point falls before -4 or past 16 digits, ".0" added to integral values)

static void float_repr(double x, char out[40]) {
    if (isnan(x)) { strcpy(out, "nan"); return; }
    if (isinf(x)) { strcpy(out, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { strcpy(out, signbit(x) ? "-0.0" : "0.0"); return; }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    // e = [-]d[.ddd]e[+-]XX
    char digits[24];
    int nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = atoi(q + 1) + 1;  // digits are 0.DIGITS * 10^decpt
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, nd - 1);
            o += nd - 1;
        }
        int ex = decpt - 1;
        sprintf(o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
        return;
    }
    if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, digits, nd);
        o += nd;
    } else if (decpt >= nd) {
        memcpy(o, digits, nd);
        o += nd;
        for (int i = nd; i < decpt; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, digits, decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, nd - decpt);
        o += nd - decpt;
    }
    *o = 0;
}

// ---- str and repr

// str.isprintable(): false for Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs other than the space.
static bool py_printable(int32_t c) {
    if (c == ' ') return true;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

static int str_repr(JRender *r, const JStr *s, JBuf *out) {
    // Python: single quotes unless the text holds ' and no ".
    char quote = memchr(s->p, '\'', s->len) && !memchr(s->p, '"', s->len) ? '"' : '\'';
    if (jbuf_put(r, out, &quote, 1) < 0) return -1;
    size_t i = 0, run = 0;  // run: start of the pending stretch copied verbatim
    while (i < s->len) {
        int32_t c;
        size_t k = utf8_next(s->p + i, s->len - i, &c);
        char esc[16];
        const char *e = NULL;
        if (c == quote || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; esc[2] = 0; e = esc; }
        else if (c == '\t') e = "\\t";
        else if (c == '\n') e = "\\n";
        else if (c == '\r') e = "\\r";
        else if (c < ' ' || c == 0x7f) { snprintf(esc, sizeof esc, "\\x%02x", (unsigned)c); e = esc; }
        else if (c >= 0x80 && !py_printable(c)) {
            if (c <= 0xff) snprintf(esc, sizeof esc, "\\x%02x", (unsigned)c);
            else if (c <= 0xffff) snprintf(esc, sizeof esc, "\\u%04x", (unsigned)c);
            else snprintf(esc, sizeof esc, "\\U%08x", (unsigned)c);
            e = esc;
        }
        if (e) {
            if (jbuf_put(r, out, s->p + run, i - run) < 0 || put_s(r, out, e) < 0) return -1;
            run = i + k;
        }
        i += k;
    }
    if (jbuf_put(r, out, s->p + run, s->len - run) < 0) return -1;
    return jbuf_put(r, out, &quote, 1);
}

static int repr_depth(JRender *r) {
    if (r->depth >= r->lim->max_depth)
        return jr_fail(r, "value nested deeper than %d levels (a namespace holding itself?)", r->lim->max_depth);
    r->depth++;
    return 0;
}

static int dict_repr(JRender *r, const JDict *d, JBuf *out) {
    if (repr_depth(r) < 0) return -1;
    int rc = put_s(r, out, "{");
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        if (i) rc = put_s(r, out, ", ");
        if (rc == 0) rc = jv_to_repr(r, d->k[i], out);
        if (rc == 0) rc = put_s(r, out, ": ");
        if (rc == 0) rc = jv_to_repr(r, d->v[i], out);
    }
    r->depth--;
    return rc < 0 ? -1 : put_s(r, out, "}");
}

static int func_str(JRender *r, const JFunc *f, JBuf *out) {
    char b[200];
    if (f->kind == JF_MACRO) snprintf(b, sizeof b, "<Macro '%s'>", f->name ? f->name : "");
    else if (f->self.kind != JV_UNDEFINED)  // CPython adds "at 0x...": no address to match
        snprintf(b, sizeof b, "<built-in method %s of %s object>", f->name ? f->name : "", jv_type_name(f->self));
    else snprintf(b, sizeof b, "<function %s>", f->name ? f->name : "");
    return put_s(r, out, b);
}

int jv_to_repr(JRender *r, JValue v, JBuf *out) {
    char b[40];
    switch (v.kind) {
    case JV_UNDEFINED: return put_s(r, out, "Undefined");  // inside a list: [Undefined]
    case JV_NONE: return put_s(r, out, "None");
    case JV_BOOL: return put_s(r, out, v.u.b ? "True" : "False");
    case JV_INT: snprintf(b, sizeof b, "%lld", (long long)v.u.i); return put_s(r, out, b);
    case JV_FLOAT: float_repr(v.u.f, b); return put_s(r, out, b);
    case JV_STR: return str_repr(r, v.u.s, out);
    case JV_LIST: case JV_TUPLE: {
        if (v.u.l->gen) return put_s(r, out, "<generator object>");  // jinja2 adds the filter's name and an address
        if (v.u.l->view == JL_RANGE) {
            const int64_t *g = v.u.l->range;
            if (g[2] == 1) snprintf(b, sizeof b, "range(%lld, %lld)", (long long)g[0], (long long)g[1]);
            else snprintf(b, sizeof b, "range(%lld, %lld, %lld)", (long long)g[0], (long long)g[1], (long long)g[2]);
            return put_s(r, out, b);
        }
        if (v.u.l->view) {  // dict_keys([...]): the items as a list, wrapped
            JList plain = *v.u.l;
            plain.view = JL_LIST;
            if (put_s(r, out, jv_type_name(v)) < 0 || put_s(r, out, "(") < 0 ||
                jv_to_repr(r, (JValue){.kind = JV_LIST, .u.l = &plain}, out) < 0)
                return -1;
            return put_s(r, out, ")");
        }
        bool tup = v.kind == JV_TUPLE;
        if (repr_depth(r) < 0) return -1;
        int rc = put_s(r, out, tup ? "(" : "[");
        for (size_t i = 0; rc == 0 && i < v.u.l->n; i++) {
            if (i) rc = put_s(r, out, ", ");
            if (rc == 0) rc = jv_to_repr(r, v.u.l->v[i], out);
        }
        r->depth--;
        if (rc < 0) return -1;
        if (tup && v.u.l->n == 1 && put_s(r, out, ",") < 0) return -1;
        return put_s(r, out, tup ? ")" : "]");
    }
    case JV_DICT:
        if (v.u.d->loop) {
            const JValue *i = jdict_get_str(v.u.d, "index"), *n = jdict_get_str(v.u.d, "length");
            snprintf(b, sizeof b, "<LoopContext %lld/%lld>", (long long)(i ? i->u.i : 0), (long long)(n ? n->u.i : 0));
            return put_s(r, out, b);
        }
        return dict_repr(r, v.u.d, out);
    case JV_NAMESPACE:
        if (put_s(r, out, "<Namespace ") < 0 || dict_repr(r, v.u.d, out) < 0) return -1;
        return put_s(r, out, ">");
    case JV_FUNC: return func_str(r, v.u.fn, out);
    }
    return jr_fail(r, "cannot print a value of kind %d", (int)v.kind);
}

int jv_to_str(JRender *r, JValue v, JBuf *out) {
    if (v.kind == JV_STR) return jbuf_put(r, out, v.u.s->p, v.u.s->len);
    if (v.kind == JV_UNDEFINED) return 0;
    return jv_to_repr(r, v, out);
}

// ---- json.dumps (Lib/json/encoder.py; the C accelerator prints the same)

typedef struct {
    bool ensure_ascii, sort_keys;
    int indent;              // < 0: none (unless indent_str)
    const char *indent_str;  // non-NULL: this string per level
    const char *sep_item, *sep_key;
} JsonOpts;

static int json_str(JRender *r, const char *p, size_t n, bool ensure_ascii, JBuf *out) {
    if (jbuf_put(r, out, "\"", 1) < 0) return -1;
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char c0 = (unsigned char)p[i];
        int32_t c;
        size_t k = c0 < 0x80 ? (c = c0, 1) : utf8_next(p + i, n - i, &c);
        char esc[16];
        const char *e = NULL;
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
                if (c > 0xffff) {
                    int32_t v = c - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", (unsigned)(0xd800 | (v >> 10)),
                             (unsigned)(0xdc00 | (v & 0x3ff)));
                } else snprintf(esc, sizeof esc, "\\u%04x", (unsigned)c);
                e = esc;
            }
        }
        if (e) {
            if (jbuf_put(r, out, p + run, i - run) < 0 || put_s(r, out, e) < 0) return -1;
            run = i + k;
        }
        i += k;
    }
    if (jbuf_put(r, out, p + run, n - run) < 0) return -1;
    return jbuf_put(r, out, "\"", 1);
}

static int json_float(JRender *r, double f, JBuf *out) {
    if (isnan(f)) return put_s(r, out, "NaN");
    if (isinf(f)) return put_s(r, out, f < 0 ? "-Infinity" : "Infinity");
    char b[40];
    float_repr(f, b);
    return put_s(r, out, b);
}

static int json_newline(JRender *r, const JsonOpts *o, int level, JBuf *out) {
    if (put_s(r, out, "\n") < 0) return -1;
    for (int i = 0; i < level; i++) {
        if (o->indent_str) {
            if (put_s(r, out, o->indent_str) < 0) return -1;
        } else
            for (int k = 0; k < o->indent; k++)
                if (put_s(r, out, " ") < 0) return -1;
    }
    return 0;
}

static const char *json_type_name(JValue v) {
    return v.kind == JV_NAMESPACE ? "TemplateNamespace" : jv_type_name(v);
}

// A dict key as json.dumps converts it: str as is, float/int/bool/None spelled as values.
static int json_key(JRender *r, JValue k, const JsonOpts *o, JBuf *out) {
    char b[40];
    switch (k.kind) {
    case JV_STR: return json_str(r, k.u.s->p, k.u.s->len, o->ensure_ascii, out);
    case JV_BOOL: return put_s(r, out, k.u.b ? "\"true\"" : "\"false\"");
    case JV_NONE: return put_s(r, out, "\"null\"");
    case JV_INT: snprintf(b, sizeof b, "\"%lld\"", (long long)k.u.i); return put_s(r, out, b);
    case JV_FLOAT:
        if (put_s(r, out, "\"") < 0 || json_float(r, k.u.f, out) < 0) return -1;
        return put_s(r, out, "\"");
    default:
        return jr_fail(r, "keys must be str, int, float, bool or None, not %s", json_type_name(k));
    }
}

static int json_value(JRender *r, JValue v, const JsonOpts *o, int level, JBuf *out);

static int json_items(JRender *r, JValue v, const JsonOpts *o, int level, JBuf *out) {
    bool dict = v.kind == JV_DICT;
    size_t n = dict ? v.u.d->n : v.u.l->n;
    if (n == 0) return put_s(r, out, dict ? "{}" : "[]");
    size_t *order = NULL;
    if (dict && o->sort_keys) {  // sorted(d.items()): keys are unique, so keys decide
        order = ja_alloc(r, n * sizeof *order);
        if (!order) return -1;
        // Insertion sort asking new < old, as CPython's binary insertion sort does: with mixed
        // key types the same comparison fails, with the same message.
        for (size_t i = 0; i < n; i++) {
            size_t j = i;
            while (j > 0) {
                int c;
                if (jv_compare(r, v.u.d->k[i], v.u.d->k[order[j - 1]], &c) < 0) return -1;
                if (c >= 0) break;
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
    }
    bool ind = o->indent >= 0 || o->indent_str;
    if (put_s(r, out, dict ? "{" : "[") < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (i && put_s(r, out, o->sep_item) < 0) return -1;
        if (ind && json_newline(r, o, level + 1, out) < 0) return -1;
        if (dict) {
            size_t k = order ? order[i] : i;
            if (json_key(r, v.u.d->k[k], o, out) < 0 || put_s(r, out, o->sep_key) < 0 ||
                json_value(r, v.u.d->v[k], o, level + 1, out) < 0)
                return -1;
        } else if (json_value(r, v.u.l->v[i], o, level + 1, out) < 0)
            return -1;
    }
    if (ind && json_newline(r, o, level, out) < 0) return -1;
    return put_s(r, out, dict ? "}" : "]");
}

static int json_value(JRender *r, JValue v, const JsonOpts *o, int level, JBuf *out) {
    char b[40];
    switch (v.kind) {
    case JV_NONE: return put_s(r, out, "null");
    case JV_BOOL: return put_s(r, out, v.u.b ? "true" : "false");
    case JV_INT: snprintf(b, sizeof b, "%lld", (long long)v.u.i); return put_s(r, out, b);
    case JV_FLOAT: return json_float(r, v.u.f, out);
    case JV_STR: return json_str(r, v.u.s->p, v.u.s->len, o->ensure_ascii, out);
    case JV_LIST: case JV_TUPLE: case JV_DICT: {
        if (jv_is_listlike(v) || (v.kind == JV_DICT && v.u.d->loop))
            return jr_fail(r, "Object of type %s is not JSON serializable", jv_type_name(v));
        if (repr_depth(r) < 0) return -1;
        int rc = json_items(r, v, o, level, out);
        r->depth--;
        return rc;
    }
    default:
        return jr_fail(r, "Object of type %s is not JSON serializable", json_type_name(v));
    }
}

int jv_to_json(JRender *r, JValue v, bool ensure_ascii, int indent, const char *indent_str, const char *sep_item,
               const char *sep_key, bool sort_keys, JBuf *out) {
    bool ind = indent >= 0 || indent_str;
    JsonOpts o = {.ensure_ascii = ensure_ascii, .sort_keys = sort_keys, .indent = indent, .indent_str = indent_str,
                  .sep_item = sep_item ? sep_item : ind ? "," : ", ", .sep_key = sep_key ? sep_key : ": "};
    return json_value(r, v, &o, 0, out);
}
