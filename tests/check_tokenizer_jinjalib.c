// Check suite for the chat-template interpreter's builtins and formatting (jinja_format.c,
// jinja_builtins.c), called directly on values built with the constructors, without the
// parser. Every expected string was printed by the project venv's jinja2 3.1.6 through
// transformers' _compile_jinja_template (the template that gave it is in the comment).
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tokenizer/jinja_internal.h"

static JinjaLimits lim;
static PailErr err;
static JRender R;

static void setup(void) {
    lim = (JinjaLimits){.max_steps = 100000, .max_output = 1 << 20, .max_depth = 64, .max_work = 64u << 20, .now = INT64_MIN};
    err_clear(&err);
    R = (JRender){.lim = &lim, .err = &err, .tname = "t", .arena.cap = 64u << 20};
}
static void teardown(void) { ja_free_all(&R.arena); }

// ---- value builders

static JValue S(const char *s) {
    JValue v;
    ck_assert_int_eq(jv_str_new(&R, s, strlen(s), &v), 0);
    return v;
}
static JValue I(int64_t i) { return jv_int(i); }
static JValue F(double f) { return jv_float(f); }
static JValue B(bool b) { return jv_bool(b); }
static JValue N(void) { return jv_none(); }
static JValue U(void) { return jv_undefined("x"); }
#define END ((JValue){.kind = (JKind)99})
static JValue seq(JKind kind, JValue first, ...) {
    JList *l = jlist_new(&R, 4);
    ck_assert_ptr_nonnull(l);
    va_list ap;
    va_start(ap, first);
    for (JValue v = first; v.kind != (JKind)99; v = va_arg(ap, JValue)) ck_assert_int_eq(jlist_push(&R, l, v), 0);
    va_end(ap);
    return (JValue){.kind = kind, .u.l = l};
}
#define L(...) seq(JV_LIST, __VA_ARGS__, END)
#define T(...) seq(JV_TUPLE, __VA_ARGS__, END)
static JValue EL(void) { return (JValue){.kind = JV_LIST, .u.l = jlist_new(&R, 0)}; }
static JValue dict_of(JValue first, ...) {  // key, value, key, value, ..., END
    JDict *d = jdict_new(&R, 4);
    ck_assert_ptr_nonnull(d);
    va_list ap;
    va_start(ap, first);
    for (JValue k = first; k.kind != (JKind)99; k = va_arg(ap, JValue)) {
        JValue v = va_arg(ap, JValue);
        ck_assert_int_eq(jdict_set(&R, d, k, v), 0);
    }
    va_end(ap);
    return (JValue){.kind = JV_DICT, .u.d = d};
}
#define D(...) dict_of(__VA_ARGS__, END)
static JValue ED(void) { return (JValue){.kind = JV_DICT, .u.d = jdict_new(&R, 0)}; }

// ---- printers

static const char *str_of(JValue v) {
    JBuf b = {0};
    if (jv_to_str(&R, v, &b) < 0) return err.msg;
    return b.p ? b.p : "";
}
static const char *repr_of(JValue v) {
    JBuf b = {0};
    if (jv_to_repr(&R, v, &b) < 0) return err.msg;
    return b.p ? b.p : "";
}
static const char *json_of(JValue v, bool ascii, int indent, const char *istr, const char *si, const char *sk,
                           bool sort) {
    JBuf b = {0};
    err_clear(&err);
    if (jv_to_json(&R, v, ascii, indent, istr, si, sk, sort, &b) < 0) return err.msg;
    return b.p ? b.p : "";
}
static const char *JSON(JValue v) { return json_of(v, false, -1, NULL, NULL, NULL, false); }


// ---- calling builtins

static JArgs args_pos(int n, JValue *pos) { return (JArgs){.n = n, .pos = pos}; }
#define POS(...) args_pos(sizeof((JValue[]){__VA_ARGS__}) / sizeof(JValue), (JValue[]){__VA_ARGS__})
#define NOARGS ((JArgs){0})
static const char *filt(const char *name, JValue self, JArgs a) {
    JValue out;
    err_clear(&err);
    if (jinja_filter_call(&R, name, self, &a, &out) < 0) return err.msg;
    if (jv_is_gen(out)) {  // a generator (map, select, items, ...): shown as |list shows it
        JArgs none = {0};
        if (jinja_filter_call(&R, "list", out, &none, &out) < 0) return err.msg;
    }
    return str_of(out);
}
static const char *kw1(const char *name, JValue self, const char *k, JValue v) {
    const char *names[] = {k};
    JArgs a = {.nkw = 1, .kw_names = names, .kw = &v};
    return filt(name, self, a);
}
static const char *test_of(const char *name, JValue self, JArgs a) {
    bool b;
    err_clear(&err);
    if (jinja_test_call(&R, name, self, &a, &b) < 0) return err.msg;
    return b ? "True" : "False";
}
static const char *meth(JValue obj, const char *name, JArgs a) {
    JValue m, out;
    err_clear(&err);
    if (jinja_getattr(&R, obj, name, &m) < 0) return err.msg;
    if (m.kind != JV_FUNC) return "(not a method)";
    if (m.u.fn->fn(&R, &m.u.fn->self, &a, &out) < 0) return err.msg;
    return str_of(out);
}
// range(args) as a value
static JValue R_(JArgs a) {
    JDict *g = jdict_new(&R, 8);
    ck_assert_int_eq(jinja_globals_add(&R, g), 0);
    const JValue *f = jdict_get_str(g, "range");
    JValue out;
    ck_assert_int_eq(f->u.fn->fn(&R, &f->u.fn->self, &a, &out), 0);
    return out;
}
static const char *glob(const char *name, JArgs a) {
    JDict *g = jdict_new(&R, 8);
    ck_assert_int_eq(jinja_globals_add(&R, g), 0);
    const JValue *f = jdict_get_str(g, name);
    ck_assert_ptr_nonnull(f);
    JValue out;
    err_clear(&err);
    if (f->u.fn->fn(&R, &f->u.fn->self, &a, &out) < 0) return err.msg;
    return str_of(out);
}

// ---- formatting

START_TEST(test_str_repr) {
    // {{ [1, 'a', 1.0, 0.1, 1e-5, 1e16, None, True, (1,), {'a':1}] }}
    ck_assert_str_eq(str_of(L(I(1), S("a"), F(1.0), F(0.1), F(1e-5), F(1e16), N(), B(true), T(I(1)), D(S("a"), I(1)))),
                     "[1, 'a', 1.0, 0.1, 1e-05, 1e+16, None, True, (1,), {'a': 1}]");
    // {{ [1.5, 1e22, 1e-4, 0.0001234, 123456789012345.0, 1234567890123456.0, 12345678901234567.0, -0.0] }}
    ck_assert_str_eq(str_of(L(F(1.5), F(1e22), F(1e-4), F(0.0001234), F(123456789012345.0), F(1234567890123456.0),
                              F(12345678901234567.0), F(-0.0))),
                     "[1.5, 1e+22, 0.0001, 0.0001234, 123456789012345.0, 1234567890123456.0, 1.2345678901234568e+16, -0.0]");
    ck_assert_str_eq(str_of(L(F(INFINITY), F(-INFINITY), F(NAN), F(1e100), F(-2.5e-300), F(0.3), F(2.0 / 3))),
                     "[inf, -inf, nan, 1e+100, -2.5e-300, 0.3, 0.6666666666666666]");
    ck_assert_str_eq(str_of(F(1e15)), "1000000000000000.0");
    ck_assert_str_eq(str_of(I(INT64_MIN)), "-9223372036854775808");
    ck_assert_str_eq(str_of(T(I(1), I(2))), "(1, 2)");
    ck_assert_str_eq(str_of(seq(JV_TUPLE, END)), "()");
    ck_assert_str_eq(str_of(L(EL(), ED())), "[[], {}]");
    ck_assert_str_eq(str_of(S("plain é")), "plain é");
    ck_assert_str_eq(str_of(U()), "");
    ck_assert_str_eq(str_of(L(U(), N())), "[Undefined, None]");  // {{ [x, none] }}
    ck_assert_str_eq(str_of(B(false)), "False");
    // {{ ["it's", 'say "hi"', 'both \' "', "\x7f\x00\t\n\r\\", "é\u200b\u00a0\U0001F600\u2028 \u3000"] }}
    JValue nul;
    ck_assert_int_eq(jv_str_new(&R, "\x7f\0\t\n\r\\", 6, &nul), 0);
    ck_assert_str_eq(str_of(L(S("it's"), S("say \"hi\""), S("both ' \""), nul,
                              S("é\u200b\u00a0\U0001F600\u2028 \u3000"))),
                     "[\"it's\", 'say \"hi\"', 'both \\' \"', '\\x7f\\x00\\t\\n\\r\\\\', "
                     "'é\\u200b\\xa0😀\\u2028 \\u3000']");
    // {{ namespace(a=1) }}
    JValue ns = D(S("a"), I(1));
    ns.kind = JV_NAMESPACE;
    ck_assert_str_eq(str_of(ns), "<Namespace {'a': 1}>");
    ck_assert_str_eq(repr_of(S("a")), "'a'");
}
END_TEST

START_TEST(test_json) {
    // {{ {1: 2, 1.5: 3, true: 4, none: 5}|tojson }}: True == 1, so the key stays 1 with value 4
    ck_assert_str_eq(JSON(D(I(1), I(2), F(1.5), I(3), B(true), I(4), N(), I(5))), "{\"1\": 4, \"1.5\": 3, \"null\": 5}");
    // {{ {'b': 1, 'a': 2}|tojson(sort_keys=true, indent=2) }}
    ck_assert_str_eq(json_of(D(S("b"), I(1), S("a"), I(2)), false, 2, NULL, NULL, NULL, true),
                     "{\n  \"a\": 2,\n  \"b\": 1\n}");
    // {{ [[], {}, [1]]|tojson(indent=2) }}
    ck_assert_str_eq(json_of(L(EL(), ED(), L(I(1))), false, 2, NULL, NULL, NULL, false), "[\n  [],\n  {},\n  [\n    1\n  ]\n]");
    // {{ [1, {'a': 'é\x7f\x01\b\f'}]|tojson(indent='--', ensure_ascii=true) }}
    ck_assert_str_eq(json_of(L(I(1), D(S("a"), S("é\x7f\x01\b\f"))), true, -1, "--", NULL, NULL, false),
                     "[\n--1,\n--{\n----\"a\": \"\\u00e9\\u007f\\u0001\\b\\f\"\n--}\n]");
    ck_assert_str_eq(json_of(S("\U0001F600"), true, -1, NULL, NULL, NULL, false), "\"\\ud83d\\ude00\"");
    ck_assert_str_eq(JSON(S("\U0001F600é\x7f\x1f\"\\\n\r\t")), "\"\U0001F600é\x7f\\u001f\\\"\\\\\\n\\r\\t\"");
    // {{ [1,2]|tojson(separators=(';', '=')) }}, {{ {'a':1}|tojson(indent=0) }}
    ck_assert_str_eq(json_of(L(I(1), I(2)), false, -1, NULL, ";", "=", false), "[1;2]");
    ck_assert_str_eq(json_of(D(S("a"), I(1)), false, 0, NULL, NULL, NULL, false), "{\n\"a\": 1\n}");
    // {{ [1e400, -1e400]|tojson }} and NaN
    ck_assert_str_eq(JSON(L(F(INFINITY), F(-INFINITY), F(NAN), F(1.0), F(1e-5))), "[Infinity, -Infinity, NaN, 1.0, 1e-05]");
    ck_assert_str_eq(JSON(T(I(1), I(2))), "[1, 2]");
    ck_assert_str_eq(JSON(L(N(), B(true), B(false), S("a"))), "[null, true, false, \"a\"]");
    ck_assert_str_eq(JSON(D(S("k"), L(I(1), D(S("x"), N())), S("l"), I(-3))), "{\"k\": [1, {\"x\": null}], \"l\": -3}");
}
END_TEST

START_TEST(test_json_limits) {
    // {{ x|tojson }}, {{ namespace(a=1)|tojson }}, {{ {(1,2): 2}|tojson }}, {{ {1: 2, 'a': 3}|tojson(sort_keys=true) }}
    ck_assert_str_eq(JSON(U()), "t: Object of type Undefined is not JSON serializable");
    JValue ns = D(S("a"), I(1));
    ns.kind = JV_NAMESPACE;
    ck_assert_str_eq(JSON(L(ns)), "t: Object of type TemplateNamespace is not JSON serializable");
    ck_assert_str_eq(JSON(D(T(I(1), I(2)), I(2))), "t: keys must be str, int, float, bool or None, not tuple");
    ck_assert_str_eq(json_of(D(I(1), I(2), S("a"), I(3)), false, -1, NULL, NULL, NULL, true),
                     "t: '<' not supported between instances of 'str' and 'int'");
    // a namespace holding itself: bounded by max_depth, not a stack overflow
    ns.u.d->v[0] = ns;
    err_clear(&err);
    ck_assert_str_eq(repr_of(ns), "t: value nested deeper than 64 levels (a namespace holding itself?)");
    ck_assert_int_eq(R.depth, 0);
}
END_TEST

START_TEST(test_jbuf_limit) {
    lim.max_output = 10;
    JBuf b = {0};
    ck_assert_int_eq(jbuf_put(&R, &b, "0123456789", 10), 0);
    ck_assert_int_eq(jbuf_put(&R, &b, "x", 1), -1);
    ck_assert_str_eq(err.msg, "t: output is over the limit of 10 bytes");
    ck_assert_uint_eq(b.len, 10);
    err_clear(&err);
    b = (JBuf){0};
    ck_assert_int_eq(jv_to_str(&R, L(S("abcdef"), S("ghijk")), &b), -1);
}
END_TEST


START_TEST(test_lookup) {
    // {% set d = {'items': 1, 'a': 2} %}{{ d.items }}|{{ d['items'] }}|{{ d.a }}|{{ d.zz is defined }}
    JValue d = D(S("items"), I(1), S("a"), I(2)), v;
    ck_assert_int_eq(jinja_getattr(&R, d, "items", &v), 0);
    ck_assert_int_eq(v.kind, JV_FUNC);
    ck_assert_int_eq(jinja_getitem(&R, d, S("items"), &v), 0);
    ck_assert_str_eq(str_of(v), "1");
    ck_assert_int_eq(jinja_getattr(&R, d, "a", &v), 0);
    ck_assert_str_eq(str_of(v), "2");
    ck_assert_int_eq(jinja_getattr(&R, d, "zz", &v), 0);
    ck_assert_int_eq(v.kind, JV_UNDEFINED);
    ck_assert_int_eq(jinja_getitem(&R, d, S("get"), &v), 0);
    ck_assert_int_eq(v.kind, JV_FUNC);
    // {{ [1,2,3][-1] }}{{ [1,2,3][5] is defined }}{{ [1,2,3]['a'] is defined }}{{ [1,2][1.0] is defined }}{{ [1,2][true] }}
    JValue l = L(I(1), I(2), I(3));
    ck_assert_int_eq(jinja_getitem(&R, l, I(-1), &v), 0);
    ck_assert_str_eq(str_of(v), "3");
    ck_assert_int_eq(jinja_getitem(&R, l, I(5), &v), 0);
    ck_assert_int_eq(v.kind, JV_UNDEFINED);
    ck_assert_int_eq(jinja_getitem(&R, l, S("a"), &v), 0);
    ck_assert_int_eq(v.kind, JV_UNDEFINED);
    ck_assert_int_eq(jinja_getitem(&R, l, F(1.0), &v), 0);
    ck_assert_int_eq(v.kind, JV_UNDEFINED);
    ck_assert_int_eq(jinja_getitem(&R, l, B(true), &v), 0);
    ck_assert_str_eq(str_of(v), "2");
    // {{ 'héllo'[1] }}{{ 'héllo'[-1] }}{{ 'héllo'[1:3] }}{{ 'héllo'[::-1] }}{{ [1,2,3,4][::2] }}{{ (1,2,3)[1:] }}
    JValue h = S("héllo");
    ck_assert_int_eq(jinja_getitem(&R, h, I(1), &v), 0);
    ck_assert_str_eq(str_of(v), "é");
    ck_assert_int_eq(jinja_getitem(&R, h, I(-1), &v), 0);
    ck_assert_str_eq(str_of(v), "o");
    ck_assert_int_eq(jinja_slice(&R, h, true, 1, true, 3, false, 0, &v), 0);
    ck_assert_str_eq(str_of(v), "él");
    ck_assert_int_eq(jinja_slice(&R, h, false, 0, false, 0, true, -1, &v), 0);
    ck_assert_str_eq(str_of(v), "olléh");
    ck_assert_int_eq(jinja_slice(&R, L(I(1), I(2), I(3), I(4)), false, 0, false, 0, true, 2, &v), 0);
    ck_assert_str_eq(str_of(v), "[1, 3]");
    ck_assert_int_eq(jinja_slice(&R, T(I(1), I(2), I(3)), true, 1, false, 0, false, 0, &v), 0);
    ck_assert_str_eq(str_of(v), "(2, 3)");
    // {{ 'abc'[5:] }}{{ [1,2,3][-5:2] }}{{ [1,2,3][::-2] }}{{ 'abc'[:-1] }}
    ck_assert_int_eq(jinja_slice(&R, S("abc"), true, 5, false, 0, false, 0, &v), 0);
    ck_assert_str_eq(str_of(v), "");
    ck_assert_int_eq(jinja_slice(&R, l, true, -5, true, 2, false, 0, &v), 0);
    ck_assert_str_eq(str_of(v), "[1, 2]");
    ck_assert_int_eq(jinja_slice(&R, l, false, 0, false, 0, true, -2, &v), 0);
    ck_assert_str_eq(str_of(v), "[3, 1]");
    ck_assert_int_eq(jinja_slice(&R, S("abc"), false, 0, true, -1, false, 0, &v), 0);
    ck_assert_str_eq(str_of(v), "ab");
    // {{ none.y }} is undefined, not an error
    ck_assert_int_eq(jinja_getattr(&R, N(), "y", &v), 0);
    ck_assert_int_eq(v.kind, JV_UNDEFINED);
}
END_TEST

START_TEST(test_methods) {
    // {{ 'abc'.upper() }}{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(none, 1) }}{{ 'a,b,c'.rsplit(',', 1) }}
    ck_assert_str_eq(meth(S("abc"), "upper", NOARGS), "ABC");
    ck_assert_str_eq(meth(S("a,b,,c"), "split", POS(S(","))), "['a', 'b', '', 'c']");
    ck_assert_str_eq(meth(S(" a  b "), "split", NOARGS), "['a', 'b']");
    ck_assert_str_eq(meth(S("a b c"), "split", POS(N(), I(1))), "['a', 'b c']");
    ck_assert_str_eq(meth(S("a,b,c"), "rsplit", POS(S(","), I(1))), "['a,b', 'c']");
    // {{ 'a\nb\r\nc\n'.splitlines() }}{{ 'ab'.startswith(('x','a')) }}{{ 'xxaxx'.strip('x') }}{{ 'aaa'.replace('a','b',2) }}
    ck_assert_str_eq(meth(S("a\nb\r\nc\n"), "splitlines", NOARGS), "['a', 'b', 'c']");
    ck_assert_str_eq(meth(S("ab"), "startswith", POS(T(S("x"), S("a")))), "True");
    ck_assert_str_eq(meth(S("xxaxx"), "strip", POS(S("x"))), "a");
    ck_assert_str_eq(meth(S("aaa"), "replace", POS(S("a"), S("b"), I(2))), "bba");
    // {{ 'hello world foo-bar'.title() }}{{ 'hELLO wORLD'.capitalize() }}
    ck_assert_str_eq(meth(S("hello world foo-bar"), "title", NOARGS), "Hello World Foo-Bar");
    ck_assert_str_eq(meth(S("hELLO wORLD"), "capitalize", NOARGS), "Hello world");
    // CPython's full case mappings and final sigma (jinja_case.h):
    // {{ 'ß'.upper() }}|{{ 'ﬁx'.title() }}|{{ 'ﬁ'.capitalize() }}|{{ 'ΟΔΟΣ ΟΔΟΣ.'.lower() }}|{{ 'Σ'.lower() }}|{{ 'İ'.lower() }}
    ck_assert_str_eq(meth(S("\u00df"), "upper", NOARGS), "SS");
    ck_assert_str_eq(meth(S("\ufb01x"), "title", NOARGS), "Fix");
    ck_assert_str_eq(meth(S("\ufb01"), "capitalize", NOARGS), "Fi");
    ck_assert_str_eq(meth(S("\u039f\u0394\u039f\u03a3 \u039f\u0394\u039f\u03a3."), "lower", NOARGS),
                     "\u03bf\u03b4\u03bf\u03c2 \u03bf\u03b4\u03bf\u03c2.");
    ck_assert_str_eq(meth(S("\u03a3"), "lower", NOARGS), "\u03c3");
    ck_assert_str_eq(meth(S("\u0130"), "lower", NOARGS), "i\u0307");
    ck_assert_str_eq(meth(S("abc"), "find", POS(S("c"))), "2");
    ck_assert_str_eq(meth(S("abc"), "index", POS(S("z"))), "t: substring not found");
    ck_assert_str_eq(meth(D(S("a"), I(1)), "get", POS(S("b"), I(5))), "5");
    ck_assert_str_eq(meth(D(S("a"), I(1)), "get", POS(S("b"))), "None");
    ck_assert_str_eq(meth(D(S("a"), I(1)), "items", NOARGS), "dict_items([('a', 1)])");
    // {{ [1].append(2) }} / {{ {}.update({}) }}: bound, then refused when called
    ck_assert_str_eq(meth(L(I(1)), "append", POS(I(2))), "t: access to attribute 'append' of 'list' object is unsafe.");
    ck_assert_str_eq(meth(ED(), "update", POS(ED())), "t: access to attribute 'update' of 'dict' object is unsafe.");
    ck_assert_str_eq(meth(ED(), "pop", POS(S("a"), I(1))), "t: access to attribute 'pop' of 'dict' object is unsafe.");
}
END_TEST

START_TEST(test_filters) {
    // {{ '  a b \n'|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'abc'|length }}{{ 'héllo'|count }}
    ck_assert_str_eq(filt("trim", S("  a b \n"), NOARGS), "a b");
    ck_assert_str_eq(filt("trim", S("xxaxx"), POS(S("x"))), "a");
    ck_assert_str_eq(filt("count", S("héllo"), NOARGS), "5");
    ck_assert_str_eq(filt("first", L(I(1), I(2), I(3)), NOARGS), "1");
    ck_assert_str_eq(filt("last", L(I(1), I(2), I(3)), NOARGS), "3");
    ck_assert_str_eq(filt("first", D(S("a"), I(1)), NOARGS), "a");
    // {{ x|default('d') }}{{ ''|default('d') }}{{ ''|default('d', true) }}{{ none|default('d') }}{{ ''|default('f', boolean=true) }}
    ck_assert_str_eq(filt("default", U(), POS(S("d"))), "d");
    ck_assert_str_eq(filt("default", S(""), POS(S("d"))), "");
    ck_assert_str_eq(filt("default", S(""), POS(S("d"), B(true))), "d");
    ck_assert_str_eq(filt("d", N(), POS(S("d"))), "None");
    const char *dn[] = {"boolean"};
    JValue bt = B(true), dv = S("f");
    JArgs da = {.n = 1, .pos = &dv, .nkw = 1, .kw_names = dn, .kw = &bt};
    ck_assert_str_eq(filt("default", S(""), da), "f");
    // {{ {'b':1,'A':2, 'a': 3}|dictsort }}{{ {'b':1,'a':2}|dictsort(reverse=true) }}{{ {'b':1,'a':0}|dictsort(by='value') }}
    ck_assert_str_eq(filt("dictsort", D(S("b"), I(1), S("A"), I(2), S("a"), I(3)), NOARGS), "[('A', 2), ('a', 3), ('b', 1)]");
    ck_assert_str_eq(kw1("dictsort", D(S("b"), I(1), S("a"), I(2)), "reverse", B(true)), "[('b', 1), ('a', 2)]");
    ck_assert_str_eq(kw1("dictsort", D(S("b"), I(1), S("a"), I(0)), "by", S("value")), "[('a', 0), ('b', 1)]");
    ck_assert_str_eq(filt("items", D(S("b"), I(1), S("a"), I(2)), NOARGS), "[('b', 1), ('a', 2)]");
    // {{ [1,2,3]|join(', ') }}{{ [{'a':1},{'a':2}]|join(',', attribute='a') }}{{ 'abc'|join('-') }}
    ck_assert_str_eq(filt("join", L(I(1), I(2), I(3)), POS(S(", "))), "1, 2, 3");
    ck_assert_str_eq(filt("join", L(I(1), I(2), I(3)), NOARGS), "123");
    ck_assert_str_eq(filt("join", S("abc"), POS(S("-"))), "a-b-c");
    // {{ [{'a':1},{'a':2}]|map(attribute='a')|list }}{{ ['a','b']|map('upper')|list }}{{ [{'b':1}]|map(attribute='a', default=5)|list }}
    ck_assert_str_eq(kw1("map", L(D(S("a"), I(1)), D(S("a"), I(2))), "attribute", S("a")), "[1, 2]");
    ck_assert_str_eq(filt("map", L(S("a"), S("b")), POS(S("upper"))), "['A', 'B']");
    ck_assert_str_eq(filt("map", L(I(1), I(2)), POS(S("string"))), "['1', '2']");
    // {{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3]|reject('equalto', 2)|list }}{{ [1,0,2]|select|list }}{{ [1,2,3]|select('>', 1)|list }}
    ck_assert_str_eq(filt("select", L(I(1), I(2), I(3), I(4)), POS(S("odd"))), "[1, 3]");
    ck_assert_str_eq(filt("reject", L(I(1), I(2), I(3)), POS(S("equalto"), I(2))), "[1, 3]");
    ck_assert_str_eq(filt("select", L(I(1), I(0), I(2)), NOARGS), "[1, 2]");
    ck_assert_str_eq(filt("select", L(I(1), I(2), I(3)), POS(S(">"), I(1))), "[2, 3]");
    // {{ [{'a':1},{'b':2}]|selectattr('a')|list }}{{ [{'a':1},{'a':2}]|selectattr('a', 'equalto', 2)|list }}{{ ...|rejectattr('a', 'defined')|list }}
    ck_assert_str_eq(filt("selectattr", L(D(S("a"), I(1)), D(S("b"), I(2))), POS(S("a"))), "[{'a': 1}]");
    ck_assert_str_eq(filt("selectattr", L(D(S("a"), I(1)), D(S("a"), I(2))), POS(S("a"), S("equalto"), I(2))), "[{'a': 2}]");
    ck_assert_str_eq(filt("rejectattr", L(D(S("a"), I(1)), D(S("b"), I(2))), POS(S("a"), S("defined"))), "[{'b': 2}]");
    // {{ 'aBc dé'|upper }}{{ 'AbC'|lower }}{{ 'hello WORLD'|capitalize }}{{ 'aaa'|replace('a', 'b', 2) }}
    ck_assert_str_eq(filt("upper", S("aBc dé"), NOARGS), "ABC DÉ");
    ck_assert_str_eq(filt("lower", S("AbC"), NOARGS), "abc");
    ck_assert_str_eq(filt("capitalize", S("hello WORLD"), NOARGS), "Hello world");
    ck_assert_str_eq(filt("replace", S("aaa"), POS(S("a"), S("b"), I(2))), "bba");
    // {{ "they're bill's"|title }}{{ 'hello-world aB'|title }}
    ck_assert_str_eq(filt("title", S("they're bill's"), NOARGS), "They're Bill's");
    ck_assert_str_eq(filt("title", S("hello-world aB"), NOARGS), "Hello-World Ab");
    // {{ '12'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ '0x1A'|int(0, 16) }}{{ 'ff'|int(base=16) }}{{ 3.7|int }}{{ '3.7'|int }}{{ ' 12 '|int }}{{ true|int }}
    ck_assert_str_eq(filt("int", S("12"), NOARGS), "12");
    ck_assert_str_eq(filt("int", S("x"), NOARGS), "0");
    ck_assert_str_eq(filt("int", S("x"), POS(I(7))), "7");
    ck_assert_str_eq(filt("int", S("0x1A"), POS(I(0), I(16))), "26");
    ck_assert_str_eq(kw1("int", S("ff"), "base", I(16)), "255");
    ck_assert_str_eq(filt("int", F(3.7), NOARGS), "3");
    ck_assert_str_eq(filt("int", S("3.7"), NOARGS), "3");
    ck_assert_str_eq(filt("int", S(" 12 "), NOARGS), "12");
    ck_assert_str_eq(filt("int", B(true), NOARGS), "1");
    // {{ '1.5'|float }}{{ 'x'|float }}{{ 2|float }}{{ 'abc'|list }}{{ {'a':1}|list }}{{ (1,2)|list }}
    ck_assert_str_eq(filt("float", S("1.5"), NOARGS), "1.5");
    ck_assert_str_eq(filt("float", S("x"), NOARGS), "0.0");
    ck_assert_str_eq(filt("float", I(2), NOARGS), "2.0");
    ck_assert_str_eq(filt("list", S("abc"), NOARGS), "['a', 'b', 'c']");
    ck_assert_str_eq(filt("list", T(I(1), I(2)), NOARGS), "[1, 2]");
    // {{ 'a\nb\n\nc'|indent }}|{{ ...|indent(2, true) }}|{{ ...|indent(2, true, true) }}|{{ 'a\nb'|indent('> ') }}|{{ 'a\n'|indent }}
    ck_assert_str_eq(filt("indent", S("a\nb\n\nc"), NOARGS), "a\n    b\n\n    c");
    ck_assert_str_eq(filt("indent", S("a\nb\n\nc"), POS(I(2), B(true))), "  a\n  b\n\n  c");
    ck_assert_str_eq(filt("indent", S("a\nb\n\nc"), POS(I(2), B(true), B(true))), "  a\n  b\n  \n  c");
    ck_assert_str_eq(filt("indent", S("a\nb"), POS(S("> "))), "a\n> b");
    ck_assert_str_eq(filt("indent", S("a\n"), NOARGS), "a\n");
    // {{ [1,2,1,'a','A']|unique|list }}{{ ['a','A']|unique(case_sensitive=true)|list }}{{ -3|abs }}{{ 2.5|round }}{{ 3.14159|round(2) }}{{ 2.5|round(0, 'floor') }}{{ 2|round }}
    ck_assert_str_eq(filt("unique", L(I(1), I(2), I(1), S("a"), S("A")), NOARGS), "[1, 2, 'a']");
    ck_assert_str_eq(kw1("unique", L(S("a"), S("A")), "case_sensitive", B(true)), "['a', 'A']");
    ck_assert_str_eq(filt("abs", I(-3), NOARGS), "3");
    ck_assert_str_eq(filt("round", F(2.5), NOARGS), "2.0");
    ck_assert_str_eq(filt("round", F(3.14159), POS(I(2))), "3.14");
    ck_assert_str_eq(filt("round", F(2.5), POS(I(0), S("floor"))), "2.0");
    ck_assert_str_eq(filt("round", I(2), NOARGS), "2");
    // {{ [1,2,3]|sum }}{{ [1.5,2]|sum }}{{ [{'a':1},{'a':2}]|sum(attribute='a') }}{{ [1,2]|sum(start=10) }}{{ [3,1,2]|min }}{{ [3,1,2]|max }}{{ ['b','A','a']|min }}{{ ['b','A','a']|max(case_sensitive=true) }}
    ck_assert_str_eq(filt("sum", L(I(1), I(2), I(3)), NOARGS), "6");
    ck_assert_str_eq(filt("sum", L(F(1.5), I(2)), NOARGS), "3.5");
    ck_assert_str_eq(kw1("sum", L(D(S("a"), I(1)), D(S("a"), I(2))), "attribute", S("a")), "3");
    ck_assert_str_eq(kw1("sum", L(I(1), I(2)), "start", I(10)), "13");
    ck_assert_str_eq(filt("min", L(I(3), I(1), I(2)), NOARGS), "1");
    ck_assert_str_eq(filt("max", L(I(3), I(1), I(2)), NOARGS), "3");
    ck_assert_str_eq(filt("min", L(S("b"), S("A"), S("a")), NOARGS), "A");
    ck_assert_str_eq(kw1("max", L(S("b"), S("A"), S("a")), "case_sensitive", B(true)), "b");
    // {{ [1,2,3]|reverse|list }}{{ 'abc'|reverse }}{{ [3,1,2]|sort(reverse=true) }}{{ ['b','A','a']|sort }}{{ [{'a':2},{'a':1}]|sort(attribute='a') }}{{ 'a b  c'|wordcount }}
    ck_assert_str_eq(filt("reverse", L(I(1), I(2), I(3)), NOARGS), "[3, 2, 1]");
    ck_assert_str_eq(filt("reverse", S("abc"), NOARGS), "cba");
    ck_assert_str_eq(kw1("sort", L(I(3), I(1), I(2)), "reverse", B(true)), "[3, 2, 1]");
    ck_assert_str_eq(filt("sort", L(S("b"), S("A"), S("a")), NOARGS), "['A', 'a', 'b']");
    ck_assert_str_eq(kw1("sort", L(D(S("a"), I(2)), D(S("a"), I(1))), "attribute", S("a")), "[{'a': 1}, {'a': 2}]");
    ck_assert_str_eq(filt("wordcount", S("a b  c"), NOARGS), "3");
    ck_assert_str_eq(filt("e", S("<a>"), NOARGS), "&lt;a&gt;");
    ck_assert_str_eq(filt("safe", L(I(1)), NOARGS), "[1]");
    ck_assert_str_eq(filt("string", N(), NOARGS), "None");
    ck_assert_str_eq(kw1("tojson", D(S("b"), I(1), S("a"), I(2)), "sort_keys", B(true)), "{\"a\": 2, \"b\": 1}");
    ck_assert_str_eq(filt("tojson", U(), NOARGS), "t: Object of type Undefined is not JSON serializable");
}
END_TEST

START_TEST(test_tests) {
    // {{ 1 is odd }}{{ 2 is even }}{{ 6 is divisibleby(3) }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 1 is number }}{{ true is number }}{{ 1.0 is float }}{{ true is integer }}{{ true is boolean }}{{ 1 is true }}{{ true is true }}
    const char *want1[] = {"True", "True", "True", "True", "True", "True", "True", "True", "False", "True", "False", "True"};
    const char *got1[] = {test_of("odd", I(1), NOARGS), test_of("even", I(2), NOARGS),
                          test_of("divisibleby", I(6), POS(I(3))), test_of("lower", S("a"), NOARGS),
                          test_of("upper", S("A"), NOARGS), test_of("number", I(1), NOARGS),
                          test_of("number", B(true), NOARGS), test_of("float", F(1.0), NOARGS),
                          test_of("integer", B(true), NOARGS), test_of("boolean", B(true), NOARGS),
                          test_of("true", I(1), NOARGS), test_of("true", B(true), NOARGS)};
    for (int i = 0; i < 12; i++) ck_assert_msg(!strcmp(got1[i], want1[i]), "test %d: %s", i, got1[i]);
    // {{ 'a' is iterable }}{{ 1 is iterable }}{{ {} is mapping }}{{ 'a' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}{{ none is none }}
    ck_assert_str_eq(test_of("iterable", S("a"), NOARGS), "True");
    ck_assert_str_eq(test_of("iterable", I(1), NOARGS), "False");
    ck_assert_str_eq(test_of("iterable", U(), NOARGS), "True");  // {{ x is iterable }}
    ck_assert_str_eq(test_of("mapping", ED(), NOARGS), "True");
    ck_assert_str_eq(test_of("sequence", ED(), NOARGS), "True");
    ck_assert_str_eq(test_of("sequence", I(1), NOARGS), "False");
    ck_assert_str_eq(test_of("none", N(), NOARGS), "True");
    // {{ 1 is eq(1.0) }}{{ 'a' is in 'abc' }}{{ 'a' is in {'a':1} }}{{ [] is sameas [] }}{{ none is sameas none }}
    ck_assert_str_eq(test_of("eq", I(1), POS(F(1.0))), "True");
    ck_assert_str_eq(test_of("in", S("a"), POS(S("abc"))), "True");
    ck_assert_str_eq(test_of("in", S("a"), POS(D(S("a"), I(1)))), "True");
    ck_assert_str_eq(test_of("sameas", EL(), POS(EL())), "False");
    ck_assert_str_eq(test_of("sameas", N(), POS(N())), "True");
    ck_assert_str_eq(test_of("odd", F(1.5), NOARGS), "False");
    ck_assert_str_eq(test_of("lower", I(1), NOARGS), "False");
    ck_assert_str_eq(test_of("defined", U(), NOARGS), "False");
    ck_assert_str_eq(test_of("string", U(), NOARGS), "False");
}
END_TEST

START_TEST(test_globals) {
    // {{ range(3)|list }}{{ range(1,3)|list }}{{ range(5,0,-2)|list }}
    // a range prints as Python's range(); its items as |list shows them
    ck_assert_str_eq(glob("range", POS(I(3))), "range(0, 3)");
    ck_assert_str_eq(filt("list", R_(POS(I(3))), NOARGS), "[0, 1, 2]");
    ck_assert_str_eq(filt("list", R_(POS(I(1), I(3))), NOARGS), "[1, 2]");
    ck_assert_str_eq(filt("list", R_(POS(I(5), I(0), I(-2))), NOARGS), "[5, 3, 1]");
    ck_assert_str_eq(glob("range", POS(I(5), I(0), I(-2))), "range(5, 0, -2)");
    // {{ dict([('a', 1)], c=3) }}{{ dict({'x': 1}) }}
    const char *cn[] = {"c"};
    JValue c3 = I(3), pairs = L(T(S("a"), I(1)));
    ck_assert_str_eq(glob("dict", ((JArgs){.n = 1, .pos = &pairs, .nkw = 1, .kw_names = cn, .kw = &c3})), "{'a': 1, 'c': 3}");
    ck_assert_str_eq(glob("dict", POS(D(S("x"), I(1)))), "{'x': 1}");
    ck_assert_str_eq(glob("namespace", POS(D(S("a"), I(2)))), "<Namespace {'a': 2}>");
    // {{ raise_exception('boom ' ~ 1) }}: the message exactly, no template prefix
    ck_assert_str_eq(glob("raise_exception", POS(S("boom 1"))), "boom 1");
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    ck_assert(R.raw_error);
    lim.now = 86400 * 365;  // 1971-01-01 00:00:00 UTC
    setenv("TZ", "UTC", 1);
    tzset();
    ck_assert_str_eq(glob("strftime_now", POS(S("%Y-%m-%d %H:%M %% %f|%z|%Z"))), "1971-01-01 00:00 % 000000||");
    ck_assert_str_eq(glob("strftime_now", POS(S("%d %B %Y"))), "01 January 1971");
}
END_TEST

// jv_hash agrees with jv_equal (unique relies on it): equal values hash alike across kinds.
START_TEST(test_hash) {
    uint64_t w = 0;
    JValue eq[][2] = {{I(1), F(1.0)}, {I(1), B(true)}, {I(0), B(false)}, {S("ab"), S("ab")}, {L(I(1), S("x")), L(F(1.0), S("x"))},
                      {N(), N()}, {T(I(2)), T(F(2.0))}};
    for (size_t i = 0; i < sizeof eq / sizeof *eq; i++) {
        ck_assert(jv_equal(eq[i][0], eq[i][1]));
        ck_assert_uint_eq(jv_hash(eq[i][0], &w), jv_hash(eq[i][1], &w));
    }
    ck_assert_uint_ne(jv_hash(S("ab"), &w), jv_hash(S("ba"), &w));
    ck_assert_uint_ne(jv_hash(L(I(1)), &w), jv_hash(T(I(1)), &w));
    ck_assert_uint_gt(w, 0);
}
END_TEST

START_TEST(test_builtin_limits) {
    // {{ [1,2,3][1:2:0] }}, {{ range(1,2,0) }}, {{ range(10000000)|length }}, {{ dict(1) }}, {{ namespace(_a=1) }}
    JValue v;
    ck_assert_int_eq(jinja_slice(&R, L(I(1)), true, 1, true, 2, true, 0, &v), -1);
    ck_assert_str_eq(err.msg, "t: slice step cannot be zero");
    ck_assert_str_eq(glob("range", POS(I(1), I(2), I(0))), "t: range() arg 3 must not be zero");
    ck_assert_str_eq(glob("range", POS(I(10000000))),
                     "t: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    lim.max_steps = 10;
    ck_assert_str_eq(glob("range", POS(I(11))), "t: range() of 11 items is over the step limit (10)");
    ck_assert_str_eq(glob("dict", POS(I(1))), "t: 'int' object is not iterable");
    const char *un[] = {"_a"};
    JValue one = I(1);
    ck_assert_str_eq(glob("namespace", ((JArgs){.nkw = 1, .kw_names = un, .kw = &one})),
                     "t: Chat templates cannot store underscore-prefixed attributes on a namespace, but got '_a'. "
                     "Please rename the attribute.");
    // {{ 1 is lt 'a' }}, {{ 1 is in 2 }}, {{ 1 is divisibleby 0 }}, {{ 'a' is odd }}
    ck_assert_str_eq(test_of("lt", I(1), POS(S("a"))), "t: '<' not supported between instances of 'int' and 'str'");
    ck_assert_str_eq(test_of("in", I(1), POS(I(2))), "t: argument of type 'int' is not iterable");
    ck_assert_str_eq(test_of("divisibleby", I(1), POS(I(0))), "t: integer modulo by zero");
    ck_assert_str_eq(test_of("odd", S("a"), NOARGS), "t: not all arguments converted during string formatting");
    ck_assert_str_eq(filt("nosuch", I(1), NOARGS), "t: No filter named 'nosuch'.");
    ck_assert(!jinja_filter_known("nosuch") && jinja_filter_known("tojson") && jinja_test_known("defined"));
    ck_assert_str_eq(filt("length", I(1), NOARGS), "t: object of type 'int' has no len()");
    ck_assert_str_eq(meth(S("a"), "split", POS(S(""))), "t: empty separator");
    ck_assert_str_eq(meth(S("a"), "join", POS(L(I(1)))), "t: sequence item 0: expected str instance, int found");
    // a big replace stays under max_output
    lim.max_output = 100;
    ck_assert_str_eq(meth(S("aaaaaaaaaa"), "replace", POS(S("a"), S("bbbbbbbbbbbb"))), "t: output is over the limit of 100 bytes");
}
END_TEST

static Suite *jinjalib_suite(void) {
    Suite *s = suite_create("tokenizer_jinjalib");
    TCase *core = tcase_create("core");
    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_test(core, test_str_repr);
    tcase_add_test(core, test_json);
    tcase_add_test(core, test_lookup);
    tcase_add_test(core, test_methods);
    tcase_add_test(core, test_filters);
    tcase_add_test(core, test_tests);
    tcase_add_test(core, test_globals);
    tcase_add_test(core, test_hash);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(limits, test_json_limits);
    tcase_add_test(limits, test_jbuf_limit);
    tcase_add_test(limits, test_builtin_limits);
    suite_add_tcase(s, limits);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(jinjalib_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
