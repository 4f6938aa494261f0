// The str, dict, list and tuple methods chat templates call ('x'.strip(), d.get('k'),
// s.split(',')), with CPython's semantics on code points. Case mapping is CPython's: utf8proc's
// simple mappings, overridden by jinja_case.h where CPython's full ones differ ('ß'.upper() is
// 'SS', 'ﬁ'.title() 'Fi'), and a final sigma lowers to 'ς'. Mutating methods are bound
// like the others; calling one fails as jinja2's ImmutableSandboxedEnvironment does.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "tokenizer/jinja_case.h"
#include "tokenizer/jinja_lib.h"

static const JStr *self_str(const JValue *self) { return self->u.s; }

static const JCaseRow *case_find(const JCaseRow *t, size_t n, int32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t[mid].cp == c) return &t[mid];
        if (t[mid].cp < c) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int jl_case_put(JRender *r, JBuf *b, int32_t c, JCase kind) {
    const JCaseRow *row = kind == JCASE_LOWER   ? case_find(jcase_lower, sizeof jcase_lower / sizeof *jcase_lower, c)
                          : kind == JCASE_UPPER ? case_find(jcase_upper, sizeof jcase_upper / sizeof *jcase_upper, c)
                                                : case_find(jcase_title, sizeof jcase_title / sizeof *jcase_title, c);
    if (!row)
        return jl_utf8_put(r, b, kind == JCASE_LOWER ? utf8proc_tolower(c) : kind == JCASE_UPPER ? utf8proc_toupper(c)
                                                                                                  : utf8proc_totitle(c));
    for (int k = 0; k < 3 && row->to[k]; k++)
        if (jl_utf8_put(r, b, row->to[k]) < 0) return -1;
    return 0;
}

static bool is_cased(int32_t c) {
    return utf8proc_isupper(c) || utf8proc_islower(c) || utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
}

// Unicode's Case_Ignorable, close enough: marks, format characters, modifier letters and
// symbols, and the word-internal punctuation the property lists.
static bool case_ignorable(int32_t c) {
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK || c == '\'' || c == '.' || c == ':' || c == '^' ||
           c == '`' || c == 0xB7 || c == 0x2018 || c == 0x2019 || c == 0x2024 || c == 0x2027;
}

// CPython's Final_Sigma: U+03A3 after a cased letter and not before one (case-ignorables skipped).
static bool final_sigma(const JStr *t, size_t at, size_t next) {
    bool before = false;
    for (size_t i = at; i > 0;) {
        size_t j = i - 1;
        while (j > 0 && ((unsigned char)t->p[j] & 0xC0) == 0x80) j--;
        int32_t c;
        jl_utf8_next(t->p + j, t->len - j, &c);
        i = j;
        if (case_ignorable(c)) continue;
        before = is_cased(c);
        break;
    }
    if (!before) return false;
    for (size_t i = next; i < t->len;) {
        int32_t c;
        i += jl_utf8_next(t->p + i, t->len - i, &c);
        if (case_ignorable(c)) continue;
        return !is_cased(c);
    }
    return true;
}

static int str_map(JRender *r, JValue s, JCase kind, JValue *out) {
    JBuf b = {0};
    const JStr *t = s.u.s;
    for (size_t i = 0; i < t->len;) {
        int32_t c;
        size_t at = i;
        i += jl_utf8_next(t->p + i, t->len - i, &c);
        int rc = kind == JCASE_LOWER && c == 0x3A3 && final_sigma(t, at, i) ? jl_utf8_put(r, &b, 0x3C2)
                                                                            : jl_case_put(r, &b, c, kind);
        if (rc < 0) return -1;
    }
    return jl_str_from(r, &b, out);
}

int jl_lower(JRender *r, JValue s, JValue *out) { return str_map(r, s, JCASE_LOWER, out); }
int jl_upper(JRender *r, JValue s, JValue *out) { return str_map(r, s, JCASE_UPPER, out); }

// ---- str methods

static int m_upper(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return jl_no_args(r, "upper", a) < 0 ? -1 : jl_upper(r, *self, out);
}
static int m_lower(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return jl_no_args(r, "lower", a) < 0 ? -1 : jl_lower(r, *self, out);
}

static int m_title(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "title", a) < 0) return -1;
    const JStr *s = self_str(self);
    JBuf b = {0};
    bool prev_cased = false;  // str.title(): a letter after a cased letter lowers, else titles
    for (size_t i = 0; i < s->len;) {
        int32_t c;
        i += jl_utf8_next(s->p + i, s->len - i, &c);
        if (jl_case_put(r, &b, c, prev_cased ? JCASE_LOWER : JCASE_TITLE) < 0) return -1;
        prev_cased = is_cased(c);
    }
    return jl_str_from(r, &b, out);
}

static int m_capitalize(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "capitalize", a) < 0) return -1;
    const JStr *s = self_str(self);
    JBuf b = {0};
    for (size_t i = 0; i < s->len;) {
        int32_t c;
        bool first = i == 0;
        i += jl_utf8_next(s->p + i, s->len - i, &c);
        if (jl_case_put(r, &b, c, first ? JCASE_TITLE : JCASE_LOWER) < 0) return -1;
    }
    return jl_str_from(r, &b, out);
}

// chars: NULL = whitespace, else the set of code points in chars.
static bool in_set(int32_t c, const JStr *chars) {
    if (!chars) return jl_is_space(c);
    for (size_t i = 0; i < chars->len;) {
        int32_t d;
        i += jl_utf8_next(chars->p + i, chars->len - i, &d);
        if (c == d) return true;
    }
    return false;
}

// Previous code point start before byte offset i (> 0).
static size_t prev_cp(const char *p, size_t i) {
    do i--;
    while (i > 0 && ((unsigned char)p[i] & 0xC0) == 0x80);
    return i;
}

static int strip_impl(JRender *r, const char *fn, const JValue *self, const JArgs *a, bool left, bool right, JValue *out) {
    static const char *const names[] = {"chars"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, fn, a, names, 1, v, &given) < 0) return -1;
    const JStr *chars = NULL;
    if (given && v[0].kind == JV_STR) chars = v[0].u.s;
    else if (given && v[0].kind != JV_NONE)
        return jr_fail(r, "%s arg must be None or str", fn);
    const JStr *s = self_str(self);
    size_t b = 0, e = s->len;
    uint64_t per = chars ? chars->len : 1;  // in_set reads the whole set for each character
    if (jr_work(r, s->len * per) < 0) return -1;
    while (left && b < e) {
        int32_t c;
        size_t k = jl_utf8_next(s->p + b, e - b, &c);
        if (!in_set(c, chars)) break;
        b += k;
    }
    while (right && e > b) {
        size_t p = prev_cp(s->p, e);
        int32_t c;
        jl_utf8_next(s->p + p, e - p, &c);
        if (!in_set(c, chars)) break;
        e = p;
    }
    return jv_str_new(r, s->p + b, e - b, out);
}

static int m_strip(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return strip_impl(r, "strip", self, a, true, true, out);
}
static int m_lstrip(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return strip_impl(r, "lstrip", self, a, true, false, out);
}
static int m_rstrip(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return strip_impl(r, "rstrip", self, a, false, true, out);
}

static int push_str(JRender *r, JList *l, const char *p, size_t n) {
    JValue v;
    return jv_str_new(r, p, n, &v) < 0 ? -1 : jlist_push(r, l, v);
}

static int split_args(JRender *r, const char *fn, const JArgs *a, const JStr **sep, int64_t *maxsplit) {
    static const char *const names[] = {"sep", "maxsplit"};
    JValue v[2];
    unsigned given;
    if (jl_bind(r, fn, a, names, 2, v, &given) < 0) return -1;
    *sep = NULL;
    *maxsplit = -1;
    if ((given & 1) && v[0].kind == JV_STR) {
        *sep = v[0].u.s;
        if (!(*sep)->len) return jr_fail(r, "empty separator");
    } else if ((given & 1) && v[0].kind != JV_NONE)
        return jr_fail(r, "must be str or None, not %s", jv_type_name(v[0]));
    if (given & 2) {
        if (v[1].kind == JV_INT) *maxsplit = v[1].u.i;
        else if (v[1].kind == JV_BOOL) *maxsplit = v[1].u.b;
        else return jr_fail(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v[1]));
    }
    return 0;
}

static int m_split(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    const JStr *sep;
    int64_t max;
    if (split_args(r, "split", a, &sep, &max) < 0) return -1;
    const JStr *s = self_str(self);
    JList *l = jlist_new(r, 0);
    if (!l) return -1;
    size_t i = 0;
    if (sep) {
        for (;;) {
            size_t h;
            int found = max != 0 ? jr_find(r, s->p + i, s->len - i, sep->p, sep->len, &h) : 0;
            if (found < 0) return -1;
            if (!found) break;
            if (push_str(r, l, s->p + i, h) < 0) return -1;
            i += h + sep->len;
            if (max > 0) max--;
        }
        if (push_str(r, l, s->p + i, s->len - i) < 0) return -1;
    } else {  // runs of whitespace; no empty strings at the ends
        if (jr_work(r, s->len) < 0) return -1;
        for (;;) {
            int32_t c;
            size_t k;
            while (i < s->len && jl_is_space((k = jl_utf8_next(s->p + i, s->len - i, &c), c))) i += k;
            if (i >= s->len) break;
            if (max == 0) {  // the rest as it is, trailing whitespace kept (CPython: 'a b  '.split(None, 1))
                if (push_str(r, l, s->p + i, s->len - i) < 0) return -1;
                break;
            }
            size_t b = i;
            while (i < s->len && !jl_is_space((k = jl_utf8_next(s->p + i, s->len - i, &c), c))) i += k;
            if (push_str(r, l, s->p + b, i - b) < 0) return -1;
            if (max > 0) max--;
        }
    }
    *out = jl_list_value(l);
    return 0;
}

static void list_reverse(JList *l) {
    for (size_t i = 0, j = l->n ? l->n - 1 : 0; i < j; i++, j--) {
        JValue t = l->v[i];
        l->v[i] = l->v[j];
        l->v[j] = t;
    }
}

static int m_rsplit(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    const JStr *sep;
    int64_t max;
    if (split_args(r, "rsplit", a, &sep, &max) < 0) return -1;
    const JStr *s = self_str(self);
    JList *l = jlist_new(r, 0);
    if (!l) return -1;
    size_t e = s->len;
    if (sep) {
        JRSearch rs;
        if (jr_rsearch_init(&rs, r, s->p, s->len, sep->p, sep->len) < 0) return -1;
        for (;;) {
            size_t h;
            int found = max != 0 ? jr_rsearch_prev(&rs, e, &h) : 0;
            if (found < 0 || (found && push_str(r, l, s->p + h + sep->len, e - h - sep->len) < 0)) {
                jr_rsearch_free(&rs);
                return -1;
            }
            if (!found) break;
            e = h;
            if (max > 0) max--;
        }
        jr_rsearch_free(&rs);
        if (push_str(r, l, s->p, e) < 0) return -1;
    } else {
        if (jr_work(r, s->len) < 0) return -1;
        for (;;) {
            int32_t c;
            while (e > 0) {
                size_t p = prev_cp(s->p, e);
                jl_utf8_next(s->p + p, e - p, &c);
                if (!jl_is_space(c)) break;
                e = p;
            }
            if (e == 0) break;
            if (max == 0) {  // the rest as it is, leading whitespace kept (CPython: '  1'.rsplit(None, 0))
                if (push_str(r, l, s->p, e) < 0) return -1;
                break;
            }
            size_t b = e;
            while (b > 0) {
                size_t p = prev_cp(s->p, b);
                jl_utf8_next(s->p + p, b - p, &c);
                if (jl_is_space(c)) break;
                b = p;
            }
            if (push_str(r, l, s->p + b, e - b) < 0) return -1;
            e = b;
            if (max > 0) max--;
        }
    }
    list_reverse(l);
    *out = jl_list_value(l);
    return 0;
}

static bool line_break(int32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
}

static int m_splitlines(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    static const char *const names[] = {"keepends"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, "splitlines", a, names, 1, v, &given) < 0) return -1;
    bool keep = given && jv_truthy(v[0]);
    const JStr *s = self_str(self);
    JList *l = jlist_new(r, 0);
    if (!l || jr_work(r, s->len) < 0) return -1;
    size_t b = 0, i = 0;
    while (i < s->len) {
        int32_t c;
        size_t k = jl_utf8_next(s->p + i, s->len - i, &c);
        if (!line_break(c)) {
            i += k;
            continue;
        }
        size_t e = i + k;
        if (c == '\r' && e < s->len && s->p[e] == '\n') e++;
        if (push_str(r, l, s->p + b, (keep ? e : i) - b) < 0) return -1;
        b = i = e;
    }
    if (b < s->len && push_str(r, l, s->p + b, s->len - b) < 0) return -1;
    *out = jl_list_value(l);
    return 0;
}

static int affix(JRender *r, const char *fn, const JValue *self, const JArgs *a, bool end, JValue *out) {
    static const char *const names[] = {"prefix", "start", "end"};
    JValue v[3];
    unsigned given;
    if (jl_bind(r, fn, a, names, 3, v, &given) < 0) return -1;
    if (!(given & 1)) return jr_fail(r, "%s() takes at least 1 argument (0 given)", fn);
    const JStr *s = self_str(self);
    if (given & 6) {  // s[start:end] first (code points; None or absent = open)
        bool has[2];
        int64_t at[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            JValue b = v[1 + k];
            has[k] = (given & (2u << k)) && b.kind != JV_NONE;
            if (!has[k]) continue;
            if (b.kind != JV_INT && b.kind != JV_BOOL)
                return jr_fail(r, "slice indices must be integers or None or have an __index__ method");
            at[k] = b.kind == JV_INT ? b.u.i : b.u.b;
        }
        if (has[0] && at[0] > (int64_t)jv_str_nchars(s)) return *out = jv_bool(false), 0;  // CPython: start past the end
        JValue sub;
        if (jinja_slice(r, *self, has[0], at[0], has[1], at[1], false, 1, &sub) < 0) return -1;
        s = sub.u.s;
    }
    const JValue *cand = &v[0];
    size_t nc = 1;
    if (v[0].kind == JV_TUPLE) {
        cand = v[0].u.l->v;
        nc = v[0].u.l->n;
    }
    bool hit = false;
    for (size_t i = 0; i < nc; i++) {
        if (cand[i].kind != JV_STR)
            return jr_fail(r, v[0].kind == JV_TUPLE ? "tuple for %s must only contain str, not %s"
                                                    : "%s first arg must be str or a tuple of str, not %s",
                           fn, jv_type_name(cand[i]));
        const JStr *p = cand[i].u.s;
        if (jr_work(r, p->len + sizeof(JValue)) < 0) return -1;
        if (p->len <= s->len && !memcmp(s->p + (end ? s->len - p->len : 0), p->p, p->len)) hit = true;
    }
    *out = jv_bool(hit);
    return 0;
}

static int m_startswith(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return affix(r, "startswith", self, a, false, out);
}
static int m_endswith(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return affix(r, "endswith", self, a, true, out);
}

static int str_arg(JRender *r, const char *fn, JValue v, const char *what, const JStr **out) {
    if (v.kind != JV_STR)
        return jr_fail(r, "%s() argument %s must be str, not %s", fn, what, jv_type_name(v));
    *out = v.u.s;
    return 0;
}

// str.replace(old, new, count=-1), also the replace filter's body.
static int replace_impl(JRender *r, const JStr *s, const JStr *old, const JStr *rep, int64_t count, JValue *out) {
    JBuf b = {0};
    size_t i = 0;
    if (jr_work(r, s->len) < 0) return -1;
    if (!old->len) {  // '' matches before every character and at the end
        for (size_t k = 0; count != 0 && k <= s->len;) {
            if (jbuf_put(r, &b, rep->p, rep->len) < 0) return -1;
            if (count > 0) count--;
            if (k == s->len) { i = k; break; }
            int32_t c;
            size_t n = jl_utf8_next(s->p + k, s->len - k, &c);
            if (jbuf_put(r, &b, s->p + k, n) < 0) return -1;
            k += n;
            i = k;
        }
    } else {
        while (count != 0) {
            size_t h;
            int found = jr_find(r, s->p + i, s->len - i, old->p, old->len, &h);
            if (found < 0) return -1;
            if (!found) break;
            h += i;
            if (jbuf_put(r, &b, s->p + i, h - i) < 0 || jbuf_put(r, &b, rep->p, rep->len) < 0) return -1;
            i = h + old->len;
            if (count > 0) count--;
        }
    }
    if (jbuf_put(r, &b, s->p + i, s->len - i) < 0) return -1;
    return jl_str_from(r, &b, out);
}

int jl_replace(JRender *r, const char *fn, JValue s, const JArgs *a, JValue *out) {
    static const char *const names[] = {"old", "new", "count"};
    JValue v[3];
    unsigned given;
    const JStr *old = NULL, *rep = NULL;
    if (jl_bind(r, fn, a, names, 3, v, &given) < 0) return -1;
    if ((given & 3) != 3) return jr_fail(r, "%s() takes at least 2 arguments", fn);
    JValue o, n;  // the filter converts both to str (soft_str); str.replace checked them already
    if (jl_to_string(r, v[0], &o) < 0 || jl_to_string(r, v[1], &n) < 0) return -1;
    if (str_arg(r, fn, o, "1", &old) < 0 || str_arg(r, fn, n, "2", &rep) < 0) return -1;
    int64_t count = -1;
    if (given & 4) {
        if (v[2].kind == JV_INT) count = v[2].u.i;
        else if (v[2].kind == JV_BOOL) count = v[2].u.b;
        else if (v[2].kind == JV_NONE) count = -1;
        else return jr_fail(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v[2]));
    }
    return replace_impl(r, s.u.s, old, rep, count, out);
}

static int m_replace(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    for (int i = 0; i < a->n && i < 2; i++)
        if (a->pos[i].kind != JV_STR)
            return jr_fail(r, "replace() argument %d must be str, not %s", i + 1, jv_type_name(a->pos[i]));
    return jl_replace(r, "str.replace", *self, a, out);
}

// Code point index of byte offset off in s (charged: it reads s up to off).
static int cp_index(JRender *r, const JStr *s, size_t off, int64_t *at) {
    if (jr_work(r, off) < 0) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < off; i++) n += ((unsigned char)s->p[i] & 0xC0) != 0x80;
    *at = n;
    return 0;
}

static int find_impl(JRender *r, const char *fn, const JValue *self, const JArgs *a, bool rev, bool raise,
                     JValue *out) {
    static const char *const names[] = {"sub"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, fn, a, names, 1, v, &given) < 0) return -1;
    if (!given) return jr_fail(r, "%s() takes at least 1 argument (0 given)", fn);
    if (v[0].kind != JV_STR) return jr_fail(r, "must be str, not %s", jv_type_name(v[0]));
    const JStr *s = self_str(self), *sub = v[0].u.s;
    int64_t at = -1;
    size_t off = rev ? s->len : 0;
    int found = 1;  // '' is found at once, at either end
    if (sub->len && !rev) {
        found = jr_find(r, s->p, s->len, sub->p, sub->len, &off);
    } else if (sub->len) {
        JRSearch rs;
        if (jr_rsearch_init(&rs, r, s->p, s->len, sub->p, sub->len) < 0) return -1;
        found = jr_rsearch_prev(&rs, s->len, &off);
        jr_rsearch_free(&rs);
    }
    if (found < 0 || (found && cp_index(r, s, off, &at) < 0)) return -1;
    if (at < 0 && raise) return jr_fail(r, "substring not found");
    *out = jv_int(at);
    return 0;
}

static int m_find(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return find_impl(r, "find", self, a, false, false, out);
}
static int m_rfind(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return find_impl(r, "rfind", self, a, true, false, out);
}
static int m_index(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return find_impl(r, "index", self, a, false, true, out);
}
static int m_rindex(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return find_impl(r, "rindex", self, a, true, true, out);
}

static int m_str_count(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    static const char *const names[] = {"sub"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, "count", a, names, 1, v, &given) < 0) return -1;
    if (!given) return jr_fail(r, "count() takes at least 1 argument (0 given)");
    if (v[0].kind != JV_STR) return jr_fail(r, "must be str, not %s", jv_type_name(v[0]));
    const JStr *s = self_str(self), *sub = v[0].u.s;
    if (!sub->len) {
        *out = jv_int((int64_t)jv_str_nchars(s) + 1);
        return 0;
    }
    int64_t n = 0;
    size_t i = 0, h;
    int found;
    while ((found = jr_find(r, s->p + i, s->len - i, sub->p, sub->len, &h)) == 1) {
        n++;
        i += h + sub->len;
    }
    if (found < 0) return -1;
    *out = jv_int(n);
    return 0;
}

static int m_join(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    static const char *const names[] = {"iterable"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, "join", a, names, 1, v, &given) < 0) return -1;
    if (!given) return jr_fail(r, "join() takes exactly one argument (0 given)");
    if (v[0].kind == JV_UNDEFINED) return jr_fail(r, "can only join an iterable");
    JList *l;
    if (jl_iter_list(r, v[0], &l) < 0) return -1;
    const JStr *sep = self_str(self);
    JBuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].kind != JV_STR)
            return jr_fail(r, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l->v[i]));
        if ((i && jbuf_put(r, &b, sep->p, sep->len) < 0) || jbuf_put(r, &b, l->v[i].u.s->p, l->v[i].u.s->len) < 0)
            return -1;
    }
    return jl_str_from(r, &b, out);
}

// str.format: {} / {0} / {name} fields, optional !s / !r, optional :spec (jl_format_spec); {{ and
// }} are literal braces. Fields with attributes or indexes ({0.name}, {0[1]}) and nested {} in a
// spec are refused rather than guessed.
static int m_format(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    const JStr *s = self_str(self);
    JBuf b = {0};
    int auto_idx = 0;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->p[i];
        if (c == '}') {
            if (i + 1 < s->len && s->p[i + 1] == '}') i++;
            else return jr_fail(r, "Single '}' encountered in format string");
            if (jbuf_put(r, &b, "}", 1) < 0) return -1;
            continue;
        }
        if (c != '{') {
            if (jbuf_put(r, &b, &c, 1) < 0) return -1;
            continue;
        }
        if (i + 1 < s->len && s->p[i + 1] == '{') {
            i++;
            if (jbuf_put(r, &b, "{", 1) < 0) return -1;
            continue;
        }
        const char *close = memchr(s->p + i, '}', s->len - i);
        if (!close) return jr_fail(r, "Single '{' encountered in format string");
        size_t fb = i + 1, fe = (size_t)(close - s->p);
        char conv = 0;
        const char *colon = memchr(s->p + fb, ':', fe - fb);
        size_t fe_name = colon ? (size_t)(colon - s->p) : fe;  // the field name and conversion end here
        const char *bang = memchr(s->p + fb, '!', fe_name - fb);
        if (colon && memchr(colon, '{', (size_t)(s->p + fe - colon)))
            return jr_fail(r, "str.format: nested fields in a format spec are not supported");
        size_t ne = fe_name;
        if (memchr(s->p + fb, '.', ne - fb) || memchr(s->p + fb, '[', ne - fb))
            return jr_fail(r, "str.format: attribute and index fields ('%.*s') are not supported", (int)(ne - fb),
                           s->p + fb);
        if (bang) {
            ne = (size_t)(bang - s->p);
            if (fe_name - ne != 2 || (bang[1] != 's' && bang[1] != 'r'))
                return jr_fail(r, "str.format: unknown conversion in '%.*s'", (int)(fe - fb), s->p + fb);
            conv = bang[1];
        }
        JValue v;
        if (ne == fb) {
            if (auto_idx >= a->n) return jr_fail(r, "Replacement index %d out of range for positional args tuple", auto_idx);
            v = a->pos[auto_idx++];
        } else if (s->p[fb] >= '0' && s->p[fb] <= '9') {
            int k = atoi(s->p + fb);
            if (k >= a->n) return jr_fail(r, "Replacement index %d out of range for positional args tuple", k);
            v = a->pos[k];
        } else {
            int k = 0;
            while (k < a->nkw && (strlen(a->kw_names[k]) != ne - fb || memcmp(a->kw_names[k], s->p + fb, ne - fb))) k++;
            if (k == a->nkw) return jr_fail(r, "'%.*s'", (int)(ne - fb), s->p + fb);  // KeyError's text
            v = a->kw[k];
        }
        if (conv) {  // !s / !r first, then the spec applies to that string
            JBuf t = {0};
            if ((conv == 'r' ? jv_to_repr(r, v, &t) : jv_to_str(r, v, &t)) < 0 || jl_str_from(r, &t, &v) < 0) return -1;
        }
        if (colon) {
            if (jl_format_spec(r, v, colon + 1, (size_t)(s->p + fe - colon - 1), &b) < 0) return -1;
        } else if (jv_to_str(r, v, &b) < 0) {
            return -1;
        }
        i = fe;
    }
    return jl_str_from(r, &b, out);
}

static int str_all(JRender *r, const char *fn, const JValue *self, const JArgs *a, bool (*pred)(int32_t), JValue *out) {
    if (jl_no_args(r, fn, a) < 0) return -1;
    const JStr *s = self_str(self);
    if (jr_work(r, s->len) < 0) return -1;
    bool ok = s->len > 0;
    for (size_t i = 0; i < s->len && ok;) {
        int32_t c;
        i += jl_utf8_next(s->p + i, s->len - i, &c);
        ok = pred(c);
    }
    *out = jv_bool(ok);
    return 0;
}
static bool p_digit(int32_t c) {
    return utf8proc_category(c) == UTF8PROC_CATEGORY_ND || (c >= 0xb2 && c <= 0xb3) || c == 0xb9;  // Python also counts superscripts
}
static bool p_alpha(int32_t c) {
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
}
static bool p_alnum(int32_t c) { return p_alpha(c) || p_digit(c) || utf8proc_category(c) == UTF8PROC_CATEGORY_NL || utf8proc_category(c) == UTF8PROC_CATEGORY_NO; }
static int m_isdigit(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return str_all(r, "isdigit", self, a, p_digit, out);
}
static int m_isalpha(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return str_all(r, "isalpha", self, a, p_alpha, out);
}
static int m_isalnum(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return str_all(r, "isalnum", self, a, p_alnum, out);
}
static int m_isspace(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return str_all(r, "isspace", self, a, jl_is_space, out);
}
static bool p_decimal(int32_t c) { return utf8proc_category(c) == UTF8PROC_CATEGORY_ND; }
static bool p_numeric(int32_t c) {
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}
static int m_isdecimal(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return str_all(r, "isdecimal", self, a, p_decimal, out);
}
static int m_isnumeric(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return str_all(r, "isnumeric", self, a, p_numeric, out);
}

// ---- dict methods

static int m_get(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    static const char *const names[] = {"key", "default"};
    JValue v[2];
    unsigned given;
    if (jl_bind(r, "get", a, names, 2, v, &given) < 0) return -1;
    if (!(given & 1)) return jr_fail(r, "get expected at least 1 argument, got 0");
    const JValue *hit = jdict_get(self->u.d, v[0]);
    *out = hit ? *hit : (given & 2) ? v[1] : jv_none();
    return 0;
}

static int dict_view(JRender *r, const JValue *self, const JArgs *a, int which, JValue *out) {
    static const char *const fn[] = {"keys", "values", "items"};
    if (jl_no_args(r, fn[which], a) < 0) return -1;
    const JDict *d = self->u.d;
    JList *l = jlist_new(r, d->n);
    if (!l) return -1;
    for (size_t i = 0; i < d->n; i++) {
        JValue e = which == 0 ? d->k[i] : d->v[i];
        if (which == 2) {
            JList *p = jlist_new(r, 2);
            if (!p || jlist_push(r, p, d->k[i]) < 0 || jlist_push(r, p, d->v[i]) < 0) return -1;
            e = (JValue){.kind = JV_TUPLE, .u.l = p};
        }
        if (jlist_push(r, l, e) < 0) return -1;
    }
    l->view = (uint8_t)(JL_KEYS + which);
    *out = jl_list_value(l);
    return 0;
}
static int m_keys(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return dict_view(r, self, a, 0, out);
}
static int m_values(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return dict_view(r, self, a, 1, out);
}
static int m_items(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return dict_view(r, self, a, 2, out);
}

// ---- padding, partition, prefixes (CPython's unicodeobject.c)

// width and fill of center / ljust / rjust: fill one character.
static int pad_args(JRender *r, const char *fn, const JArgs *a, int64_t *width, const JStr **fill) {
    static const char *const names[] = {"width", "fillchar"};
    JValue v[2];
    unsigned given;
    if (jl_bind(r, fn, a, names, 2, v, &given) < 0) return -1;
    if (!(given & 1)) return jr_fail(r, "%s() takes at least 1 argument (0 given)", fn);
    if (v[0].kind != JV_INT && v[0].kind != JV_BOOL)
        return jr_fail(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v[0]));
    *width = v[0].kind == JV_INT ? v[0].u.i : v[0].u.b;
    *fill = NULL;
    if (given & 2) {
        if (v[1].kind != JV_STR || jv_str_nchars(v[1].u.s) != 1)
            return jr_fail(r, "The fill character must be exactly one character long");
        *fill = v[1].u.s;
    }
    if (*width > 0 && (uint64_t)*width > r->lim->max_output) return jr_fail(r, "%s width is over the output limit", fn);
    return 0;
}

static int put_fill(JRender *r, JBuf *b, const JStr *fill, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (jbuf_put(r, b, fill ? fill->p : " ", fill ? fill->len : 1) < 0) return -1;
    return 0;
}

// kind: 'c' center, 'l' ljust, 'r' rjust
static int pad_impl(JRender *r, const char *fn, char kind, const JValue *self, const JArgs *a, JValue *out) {
    int64_t width;
    const JStr *fill, *s = self_str(self);
    if (pad_args(r, fn, a, &width, &fill) < 0) return -1;
    int64_t n = (int64_t)jv_str_nchars(s), marg = width - n;
    if (marg <= 0) return *out = *self, 0;
    int64_t left = kind == 'l' ? 0 : kind == 'r' ? marg : marg / 2 + (marg & width & 1);
    JBuf b = {0};
    if (put_fill(r, &b, fill, left) < 0 || jbuf_put(r, &b, s->p, s->len) < 0 || put_fill(r, &b, fill, marg - left) < 0)
        return -1;
    return jl_str_from(r, &b, out);
}
static int m_center(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return pad_impl(r, "center", 'c', self, a, out);
}
static int m_ljust(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return pad_impl(r, "ljust", 'l', self, a, out);
}
static int m_rjust(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return pad_impl(r, "rjust", 'r', self, a, out);
}

static int m_zfill(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    int64_t width;
    const JStr *fill, *s = self_str(self);
    if (pad_args(r, "zfill", a, &width, &fill) < 0) return -1;
    if (fill) return jr_fail(r, "zfill() takes exactly one argument (2 given)");
    int64_t n = (int64_t)jv_str_nchars(s);
    if (width <= n) return *out = *self, 0;
    bool sign = s->len && (s->p[0] == '+' || s->p[0] == '-');
    JBuf b = {0};
    if ((sign && jbuf_put(r, &b, s->p, 1) < 0)) return -1;
    for (int64_t i = 0; i < width - n; i++)
        if (jbuf_put(r, &b, "0", 1) < 0) return -1;
    if (jbuf_put(r, &b, s->p + sign, s->len - sign) < 0) return -1;
    return jl_str_from(r, &b, out);
}

static int one_str_arg(JRender *r, const char *fn, const JArgs *a, const JStr **sep) {
    static const char *const names[] = {"sep"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, fn, a, names, 1, v, &given) < 0) return -1;
    if (!given) return jr_fail(r, "%s() takes exactly one argument (0 given)", fn);
    if (v[0].kind != JV_STR) return jr_fail(r, "must be str, not %s", jv_type_name(v[0]));
    *sep = v[0].u.s;
    return 0;
}

static int part_impl(JRender *r, const char *fn, bool from_end, const JValue *self, const JArgs *a, JValue *out) {
    const JStr *sep, *s = self_str(self);
    if (one_str_arg(r, fn, a, &sep) < 0) return -1;
    if (!sep->len) return jr_fail(r, "empty separator");
    size_t at = 0;
    int found;
    if (from_end) {
        JRSearch rs;
        if (jr_rsearch_init(&rs, r, s->p, s->len, sep->p, sep->len) < 0) return -1;
        found = jr_rsearch_prev(&rs, s->len, &at);
        jr_rsearch_free(&rs);
    } else {
        found = jr_find(r, s->p, s->len, sep->p, sep->len, &at);
    }
    if (found < 0) return -1;
    JList *l = jlist_new(r, 3);
    if (!l) return -1;
    size_t cut[3][2] = {{0, 0}, {0, 0}, {0, 0}};  // (offset, length) of head, separator, tail
    if (found) {
        cut[0][1] = at;
        cut[1][0] = at, cut[1][1] = sep->len;
        cut[2][0] = at + sep->len, cut[2][1] = s->len - at - sep->len;
    } else {
        cut[from_end ? 2 : 0][1] = s->len;  // not found: ('s', '', '') or ('', '', 's')
    }
    for (int i = 0; i < 3; i++)
        if (push_str(r, l, s->p + cut[i][0], cut[i][1]) < 0) return -1;
    *out = (JValue){.kind = JV_TUPLE, .u.l = l};
    return 0;
}
static int m_partition(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return part_impl(r, "partition", false, self, a, out);
}
static int m_rpartition(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return part_impl(r, "rpartition", true, self, a, out);
}

static int fix_impl(JRender *r, const char *fn, bool suffix, const JValue *self, const JArgs *a, JValue *out) {
    const JStr *fix, *s = self_str(self);
    if (one_str_arg(r, fn, a, &fix) < 0) return -1;
    if (jr_work(r, fix->len) < 0) return -1;
    if (!fix->len || fix->len > s->len || memcmp(s->p + (suffix ? s->len - fix->len : 0), fix->p, fix->len))
        return *out = *self, 0;
    return jv_str_new(r, s->p + (suffix ? 0 : fix->len), s->len - fix->len, out);
}
static int m_removeprefix(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return fix_impl(r, "removeprefix", false, self, a, out);
}
static int m_removesuffix(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    return fix_impl(r, "removesuffix", true, self, a, out);
}

static int m_swapcase(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "swapcase", a) < 0) return -1;
    const JStr *s = self_str(self);
    if (jr_work(r, s->len) < 0) return -1;
    JBuf b = {0};
    for (size_t i = 0; i < s->len;) {
        int32_t c;
        i += jl_utf8_next(s->p + i, s->len - i, &c);
        int rc = utf8proc_isupper(c) ? jl_case_put(r, &b, c, JCASE_LOWER)
                 : utf8proc_islower(c) ? jl_case_put(r, &b, c, JCASE_UPPER)
                                       : jl_utf8_put(r, &b, c);
        if (rc < 0) return -1;
    }
    return jl_str_from(r, &b, out);
}

static int m_casefold(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "casefold", a) < 0) return -1;
    const JStr *s = self_str(self);
    if (jr_work(r, s->len) < 0) return -1;
    utf8proc_uint8_t *f = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s->p, (utf8proc_ssize_t)s->len, &f, UTF8PROC_CASEFOLD);
    if (n < 0) return jl_lower(r, *self, out);  // not valid UTF-8: lower() is the closest
    int rc = jv_str_new(r, (const char *)f, (size_t)n, out);
    free(f);
    return rc;
}

static int m_expandtabs(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    static const char *const names[] = {"tabsize"};
    JValue v[1];
    unsigned given;
    if (jl_bind(r, "expandtabs", a, names, 1, v, &given) < 0) return -1;
    int64_t tab = 8;
    if (given) {
        if (v[0].kind != JV_INT) return jr_fail(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v[0]));
        tab = v[0].u.i;
    }
    if (tab > 4096) return jr_fail(r, "expandtabs: tab size %lld is over the limit", (long long)tab);
    const JStr *s = self_str(self);
    if (jr_work(r, s->len) < 0) return -1;
    JBuf b = {0};
    int64_t col = 0;
    for (size_t i = 0; i < s->len;) {
        int32_t c;
        size_t k = jl_utf8_next(s->p + i, s->len - i, &c);
        if (c == '\t') {
            if (tab > 0) {
                int64_t sp = tab - col % tab;
                for (int64_t q = 0; q < sp; q++)
                    if (jbuf_put(r, &b, " ", 1) < 0) return -1;
                col += sp;
            }
        } else {
            if (jbuf_put(r, &b, s->p + i, k) < 0) return -1;
            col = c == '\n' || c == '\r' ? 0 : col + 1;
        }
        i += k;
    }
    return jl_str_from(r, &b, out);
}

static int m_islower(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "islower", a) < 0 || jr_work(r, self_str(self)->len) < 0) return -1;
    return *out = jv_bool(jl_str_case_is(self_str(self), true)), 0;
}
static int m_isupper(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "isupper", a) < 0 || jr_work(r, self_str(self)->len) < 0) return -1;
    return *out = jv_bool(jl_str_case_is(self_str(self), false)), 0;
}
// istitle: an upper or titlecase letter only after an uncased one, a lowercase one only after a cased one
static int m_istitle(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "istitle", a) < 0) return -1;
    const JStr *s = self_str(self);
    if (jr_work(r, s->len) < 0) return -1;
    bool prev_cased = false, cased = false, ok = true;
    for (size_t i = 0; i < s->len && ok;) {
        int32_t c;
        i += jl_utf8_next(s->p + i, s->len - i, &c);
        if (utf8proc_isupper(c) || utf8proc_category(c) == UTF8PROC_CATEGORY_LT) {
            ok = !prev_cased;
            prev_cased = cased = true;
        } else if (utf8proc_islower(c)) {
            ok = prev_cased;
            prev_cased = cased = true;
        } else {
            prev_cased = false;
        }
    }
    return *out = jv_bool(ok && cased), 0;
}

static int m_list_copy(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "copy", a) < 0) return -1;
    JList *l = jlist_new(r, self->u.l->n);
    if (!l) return -1;
    for (size_t i = 0; i < self->u.l->n; i++)
        if (jlist_push(r, l, self->u.l->v[i]) < 0) return -1;
    *out = jl_list_value(l);
    return 0;
}

static int m_copy(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (jl_no_args(r, "copy", a) < 0) return -1;
    JDict *d = jdict_new(r, self->u.d->n);
    if (!d) return -1;
    for (size_t i = 0; i < self->u.d->n; i++)
        if (jdict_set(r, d, self->u.d->k[i], self->u.d->v[i]) < 0) return -1;
    *out = (JValue){.kind = JV_DICT, .u.d = d};
    return 0;
}

// ---- list / tuple methods

static int m_list_index(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (a->nkw || a->n != 1) return jr_fail(r, "index() takes exactly one argument (%d given)", a->n + a->nkw);
    for (size_t i = 0; i < self->u.l->n; i++) {
        bool eq;
        if (jr_equal(r, self->u.l->v[i], a->pos[0], &eq) < 0) return -1;
        if (eq) {
            *out = jv_int((int64_t)i);
            return 0;
        }
    }
    JBuf b = {0};
    if (jv_to_repr(r, a->pos[0], &b) < 0) return -1;
    return jr_fail(r, self->kind == JV_TUPLE ? "tuple.index(x): x not in tuple" : "%s is not in list", b.p ? b.p : "");
}

static int m_list_count(JRender *r, const JValue *self, const JArgs *a, JValue *out) {
    if (a->nkw || a->n != 1) return jr_fail(r, "count() takes exactly one argument (%d given)", a->n + a->nkw);
    int64_t n = 0;
    for (size_t i = 0; i < self->u.l->n; i++) {
        bool eq;
        if (jr_equal(r, self->u.l->v[i], a->pos[0], &eq) < 0) return -1;
        n += eq;
    }
    *out = jv_int(n);
    return 0;
}

// What the sandbox refuses (jinja2.sandbox._mutable_spec): bound like any method, failing when
// called. A builtin gets self but not its JFunc, so each name has its own function.
static int unsafe(JRender *r, const char *name, JValue self) {
    return jr_fail(r, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(self));
}
#define UNSAFE(n)                                                                         \
    static int u_##n(JRender *r, const JValue *self, const JArgs *a, JValue *out) { \
        (void)a;                                                                          \
        (void)out;                                                                        \
        return unsafe(r, #n, *self);                                                      \
    }
UNSAFE(append) UNSAFE(extend) UNSAFE(insert) UNSAFE(pop) UNSAFE(remove) UNSAFE(sort) UNSAFE(reverse)
UNSAFE(clear) UNSAFE(update) UNSAFE(popitem) UNSAFE(setdefault)

typedef struct {
    const char *name;
    JBuiltinFn fn;
} Method;

static const Method str_methods[] = {
    {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip}, {"split", m_split}, {"rsplit", m_rsplit},
    {"splitlines", m_splitlines}, {"startswith", m_startswith}, {"endswith", m_endswith}, {"replace", m_replace},
    {"title", m_title}, {"upper", m_upper}, {"lower", m_lower}, {"capitalize", m_capitalize}, {"find", m_find},
    {"rfind", m_rfind}, {"index", m_index}, {"rindex", m_rindex}, {"count", m_str_count}, {"join", m_join},
    {"format", m_format}, {"isdigit", m_isdigit}, {"isalpha", m_isalpha}, {"isalnum", m_isalnum},
    {"isspace", m_isspace}, {"center", m_center}, {"ljust", m_ljust}, {"rjust", m_rjust}, {"zfill", m_zfill},
    {"partition", m_partition}, {"rpartition", m_rpartition}, {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix}, {"swapcase", m_swapcase}, {"casefold", m_casefold},
    {"expandtabs", m_expandtabs}, {"islower", m_islower}, {"isupper", m_isupper}, {"istitle", m_istitle},
    {"isdecimal", m_isdecimal}, {"isnumeric", m_isnumeric}, {NULL, NULL}};
static const Method dict_methods[] = {{"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values},
                                      {"copy", m_copy}, {NULL, NULL}};
static const Method seq_methods[] = {{"index", m_list_index}, {"count", m_list_count}, {NULL, NULL}};
static const Method list_methods[] = {{"copy", m_list_copy}, {NULL, NULL}};
static const Method list_unsafe[] = {{"append", u_append}, {"extend", u_extend}, {"insert", u_insert},
                                     {"pop", u_pop}, {"remove", u_remove}, {"sort", u_sort},
                                     {"reverse", u_reverse}, {"clear", u_clear}, {NULL, NULL}};
static const Method dict_unsafe[] = {{"update", u_update}, {"pop", u_pop}, {"popitem", u_popitem},
                                     {"setdefault", u_setdefault}, {"clear", u_clear}, {NULL, NULL}};

int jl_method_get(JRender *r, JValue obj, const char *name, JValue *out, bool *found) {
    const Method *tables[3] = {NULL, NULL, NULL};
    switch (obj.kind) {
    case JV_STR: tables[0] = str_methods; break;
    case JV_DICT: tables[0] = dict_methods; tables[1] = dict_unsafe; break;
    case JV_LIST:
        if (obj.u.l->view == JL_RANGE) tables[0] = seq_methods;
        else if (!obj.u.l->gen && !obj.u.l->view)
            tables[0] = seq_methods, tables[1] = list_unsafe, tables[2] = list_methods;
        break;
    case JV_TUPLE: tables[0] = seq_methods; break;
    default: break;
    }
    *found = false;
    for (int t = 0; t < 3; t++)
        for (const Method *m = tables[t]; m && m->name; m++)
            if (!strcmp(m->name, name)) {
                JFunc *f = jfunc_builtin(r, m->name, m->fn, obj);  // m->name: static, outlives the caller's
                if (!f) return -1;
                *out = (JValue){.kind = JV_FUNC, .u.fn = f};
                *found = true;
                return 0;
            }
    return 0;
}
