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
#include "tokenizer/jinja_internal.h"

static JinjaLimits lim;
static PailErr err;
static JRender R;

static void setup(void) {
    lim = (JinjaLimits){.max_steps = 100000, .max_output = 1 << 20, .max_depth = 64, .now = INT64_MIN};
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

static Suite *jinjalib_suite(void) {
    Suite *s = suite_create("tokenizer_jinjalib");
    TCase *core = tcase_create("core");
    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_test(core, test_str_repr);
    tcase_add_test(core, test_json);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(limits, test_json_limits);
    tcase_add_test(limits, test_jbuf_limit);
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
