// Check suite for the chat-template interpreter's lexer, parser and evaluator
// (src/tokenizer/jinja*.c): whitespace control, scoping, loops and loop.* (recursive too), macros
// and caller, set and filter blocks, expressions, undefined semantics, generators and dict views,
// printf and format specs, unknown filters deferred to run time inside if, render and parse
// errors, generation spans, limits, and the real templates of ../shared/reference/chat-templates
// when present. validation/tokenizer/jinja_semantics.py compares many more cases with jinja2.
// Every expected string in CORE and RENDER_ERRORS is what jinja2 3.1.6 renders in transformers'
// environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols) with the
// variables of VARS_JSON: the table was written by running the project venv's jinja2 on each
// template, not by reading this code.
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/fsutil.h"
#include "tokenizer/jinja.h"

typedef struct {
    const char *tpl, *want;
} Case;

static const Case CORE[] = {
    {"  {% if true %}\n  yes\n  {% endif %}\n  {{ 'v' }}\nend\n",
     "  yes\n  v\nend"},
    {"a {%- if true -%}   b   {%- endif -%}   c",
     "abc"},
    {"a\n  {%+ if true %}b{% endif +%}\nc",
     "a\n  b\nc"},
    {"{# c #}\nx\n  {# c2 #}\ny\n  {#- c3 -#}  z",
     "x\nyz"},
    {"  {% raw %}{{ a }}{% endraw %}\nq",
     "{{ a }}q"},
    {"l1\r\nl2\rl3\n",
     "l1\nl2\nl3"},
    {"{{ 'a' }}\n{{ 'b' }}\n\n",
     "a\nb\n"},
    {"{% set y = 0 %}{% for i in [1,2] %}{{ y }}{% set y = i %}{{ y }}{% endfor %}{{ y }}",
     "01020"},
    {"{% for m in messages %}{% set r = m.role %}{% endfor %}[{{ r }}][{{ m }}]",
     "[][]"},
    {"{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
     "3"},
    {"{% set ns = namespace(a=1) %}{% for i in x %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}",
     "7"},
    {"{% set g = 'top' %}{% macro m() %}{{ g }}{% set g = 'in' %}{{ g }}{% endmacro %}{{ m() }}{{ g }}",
     "topintop"},
    {"{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ m.role }};{% endfor %}",
     "1021TrueFalse2system;2110FalseTrue2user;"},
    {"{% for i in x if i > 1 %}{{ loop.index }}/{{ loop.length }}:{{ i }} {{ loop.previtem }} {{ loop.nextitem }} {{ loop.cycle('a','b') }}|{% else %}none{% endfor %}",
     "1/2:2  3 a|2/2:3 2  b|"},
    {"{% for i in [] %}x{% else %}empty{% endfor %}{% for i in nope %}x{% else %}undef{% endfor %}",
     "emptyundef"},
    {"{% for i in x %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}{% if i == 3 %}{% break %}{% endif %}{% endfor %}",
     "13"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for c in 'ab' %}{{ c }}.{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "a=1;b=s;a.b.ab"},
    {"{% macro m(a, b=2) %}[{{a}}{{b}}{{ varargs }}{{ kwargs }}]{% endmacro %}{{ m(1) }}{{ m(1, 3, 4, k=5) }}{{ m(b=7, a=6) }}",
     "[12(){}][13(4,){'k': 5}][67(){}]"},
    {"{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}inner{% endcall %}",
     "<inner>"},
    {"{% macro m(t) %}<{{ caller(t) }}>{% endmacro %}{% call(v) m('q') %}in{{ v }}{% endcall %}",
     "<inq>"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
     "321"},
    {"{% macro m(p) %}{{ p is defined }}{% endmacro %}{{ m() }}",
     "False"},
    {"{% set t %}a{{ 1 }}b{% endset %}{{ t }}|{% set u | upper %}xy{% endset %}{{ u }}",
     "a1b|XY"},
    {"{% filter upper %}abc{{ s }}{% endfilter %}",
     "ABCH\303\211LLO"},
    {"{% filter upper %}{% set q = 'z' %}{{ q }}{% endfilter %}[{{ q }}]",
     "Z[]"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 / 2 }} {{ 4 / 2 }} {{ 3 * 'ab' }} {{ [1] + [2] }} {{ 1.5 * 2 }} {{ 7.5 // 2 }} {{ True + 1 }}",
     "3 -4 -2 2 1024 0.5 0.5 2.0 ababab [1, 2] 3.0 3.0 2"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 2 in x }} {{ 'l' in s }} {{ 'z' not in s }} {{ 'a' in d }} {{ 1 if false }}|{{ 1 if false else 2 }}",
     "True False True True True True |2"},
    {"{{ x[1:] }} {{ x[::-1] }} {{ s[1:3] }} {{ x[-1] }} {{ x[:-1] }}",
     "[2, 3] [3, 2, 1] \303\251l 3 [1, 2]"},
    {"{{ -1|abs }} {{ x|length }} {{ not 1 is none }} {{ 1 == 1.0 }} {{ 'a' ~ 1 ~ none }}",
     "1 3 True True a1None"},
    {"{{ (1, 2) }} {{ 1, 2 }} {{ {'a': [1, 'b'], 2: none} }} {{ () }} {{ [] }} {{ (1,) }}",
     "(1, 2) (1, 2) {'a': [1, 'b'], 2: None} () [] (1,)"},
    {"{{ \"a\" \"b\" 'c' }} {{ \"\\x41\\u00e9\\t|\\d\\\\\" }} {{ 1_000 }} {{ 1e3 }} {{ 1.5e-3 }} {{ 0.1 }} {{ none }} {{ None }} {{ True }} {{ false }}",
     "abc A\303\251\t|\\d\\ 1000 1000.0 0.0015 0.1 None None True False"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}",
     "12(1, 2)"},
    {"{% if x is defined and x|length > 2 %}big{% elif x %}small{% else %}none{% endif %}{% if 0 %}a{% elif 0 %}b{% elif 1 %}c{% endif %}",
     "bigc"},
    {"{{ x is iterable }}{{ 3 is divisibleby 3 }}{{ 2 is equalto(2) }}{{ d is not mapping }}{{ s is string }}",
     "TrueTrueTrueFalseTrue"},
    {"{{ x | select('lessthan', 2) | list }}{{ x | select('greaterthan', 1) | list }}{{ 'a' is escaped }}{{ 'upper' is filter }}{{ 'from_json' is filter }}{{ 'odd' is test }}{{ 1 is test }}",
     "[1][2, 3]FalseTrueFalseTrueFalse"},
    // split/rsplit on whitespace with a maximum: the rest keeps its whitespace at the far end
    {"{{ 'a b  '.split(none, 1) }}{{ '  a b  '.split(none, 0) }}{{ '  a b  '.rsplit(none, 0) }}{{ ' a  b c '.rsplit(none, 1) }}",
     "['a', 'b  ']['a b  ']['  a b'][' a  b', 'c']"},
    // float() and int() of text as Python reads it, jinja2's int falling back to int(float(text))
    {"{{ '1_000.5' | float }}|{{ 'inf' | int }}|{{ 'nan' | int(7) }}|{{ '-0x10' | float }}|{{ '1e3' | int }}",
     "1000.5|0|7|0.0|1000"},
    // str.format with format specs
    {"{{ '[{:<6}|{:^6}|{:*^7}|{:.2}]'.format('ab', 'ab', 'ab', 'abc') }}{{ '[{:05d}|{:+d}|{:,}|{:#x}|{:08b}|{:c}]'.format(-42, 42, 1234567, 255, 5, 65) }}{{ '[{:.2f}|{:8.3f}|{:e}|{:g}|{:.1%}|{:,.2f}|{}|{:.3}|{:>5}]'.format(3.14159, 3.14159, 12345.678, 1e-7, 0.1234, 1234567.891, 1.5, 2.0, true) }}",
     "[ab    |  ab  |**ab***|ab][-0042|+42|1,234,567|0xff|00000101|A][3.14|   3.142|1.234568e+04|1e-07|12.3%|1,234,567.89|1.5|2.0|    1]"},
    {"{% set c = cycler(1, 'b', none) %}{{ c.current }}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ c.next() }}{{ c.next() }}{{ c.reset() }}{{ c.next() }}|{% set j = joiner() %}{{ j() }}a{{ j() }}b{{ j() }}|{% set k = joiner(1) %}{{ k() }}{{ k() }}",
     "11bNoneNone1None1|a, b, |1"},
    // recursive loops: loop(items) renders the body one level deeper; loop prints as jinja2's LoopContext
    {"{% for n in [{'k': 'a', 'c': [{'k': 'b', 'c': [{'k': 'c', 'c': []}]}, {'k': 'd', 'c': []}]}] recursive %}<{{ n.k }}{{ loop.depth }}{{ loop.index }}/{{ loop.length }}{% if n.c %}[{{ loop(n.c) }}]{% endif %}>{% endfor %}|{% for i in x[:2] %}{{ loop }}{% endfor %}",
     "<a11/1[<b21/2[<c31/1>]><d22/2>]>|<LoopContext 1/2><LoopContext 2/2>"},
    {"{% for i in [1, 1, 2, 1] %}{{ loop.changed(i) }}{% endfor %}|{{ dict.fromkeys(['a', 'b'], 0) }}{{ dict.fromkeys('ab') }}",
     "TrueFalseTrueTrue|{'a': 0, 'b': 0}{'a': None, 'b': None}"},
    {"{{ 'a b'.split() }} {{ '  x '.strip() }} {{ d.get('a') }} {{ d.get('zz', 5) }} {{ messages[0]['content'] }} {{ x.0 }}",
     "['a', 'b'] x 1 5 Sys 1"},
    {"[{{ nope }}][{{ nope is defined }}][{{ d.zz is defined }}][{{ d.zz }}][{{ n.a }}][{{ x[7] }}][{{ nope|length }}][{{ nope ~ 'q' }}]",
     "[][False][False][][][][0][q]"},
    {"{{ nope if nope else 'dflt' }}{{ not nope }}{{ nope == nope }}",
     "dfltTrueTrue"},
    // map, select, reject, selectattr, rejectattr: a false value (None, undefined, 0) is empty
    {"{{ n | selectattr('a') | list }}{{ nope | map(attribute='a') | list }}{{ 0 | select | list }}{{ n | rejectattr('a', 'nosuchtest') | list }}",
     "[][][][]"},
    // they return generators: always true, consumed by iterating, not indexable
    {"{% if x | select('gt', 5) %}gen{% endif %}{% if x | select('gt', 5) | list %}list{% endif %}",
     "gen"},
    {"{% set g = x | map('string') %}{{ g | join }}{{ g | join }}|{{ g | list }}{% set h = x | reverse %}{{ 3 in h }}{{ h | list }}",
     "123|[]True[2, 1]"},
    {"{% set g = x | select %}{{ g | first }}{{ g | list }}[{{ (x | map('abs'))[0] }}]",
     "1[2, 3][]"},
    {"{{ nope is sequence }}{{ nope is callable }}{{ nope is sameas nope }}{{ nope | reverse | list }}{{ nope | replace('a', 'b') }}",
     "TrueTrueFalse[]"},
    // printf-style formatting (str % args) and the format filter
    {"{{ '%d items' % 3 }}|{{ '%.2f' % 1.5 }}|{{ '%s and %s' % ('a', 'b') }}|{{ '%5s|%-5s|' % ('ab', 'cd') }}{{ '%03d %x %o %+d %%' % (7, 255, 8, 4) }}|{{ '%(a)s-%(b)r' % d }}|{{ '%e %g %i' % (12345.678, 0.00001, 3.9) }}|{{ '%s' % nope }}|{{ '%s' % [1] }}|{{ '%-6.2f|' % -1.5 }}{{ '%#x %5.1s|' % (255, 'xyz') }}",
     "3 items|1.50|a and b|   ab|cd   |007 ff 10 +4 %|1-'s'|1.234568e+04 1e-05 3||[1]|-1.50 |0xff     x|"},
    {"{{ ('%.150d' % 2) | length }}{{ ('%.150d' % 2)[-3:] }}",
     "150002"},
    {"{{ '%s-%d' | format('a', 3) }}|{{ '%(k)s' | format(k='v') }}|{{ 'ab' | center(6) }}|{{ x | batch(2) | list }}{{ x | batch(2, 0) | list }}{{ x | slice(2) | list }}{{ x | slice(2, 'f') | list }}|{{ d | attr('a') }}|{{ d | attr('items') is callable }}",
     "a-3|v|  ab  |[[1, 2], [3]][[1, 2], [3, 0]][[1, 2], [3]][[1, 2], [3, 'f']]||True"},
    {"{{ 'ab'.center(7, '*') }}{{ 'ab'.ljust(4, '.') }}{{ 'ab'.rjust(4) }}{{ '7'.zfill(3) }}{{ '-7'.zfill(4) }}{{ 'a=b=c'.partition('=') }}{{ 'a=b=c'.rpartition('=') }}{{ 'abc'.partition('z') }}{{ 'abc'.rpartition('z') }}{{ 'abc'.removeprefix('a') }}{{ 'abc'.removesuffix('c') }}{{ x.copy() }}",
     "***ab**ab..  ab007-007('a', '=', 'b=c')('a=b', '=', 'c')('abc', '', '')('', '', 'abc')bcab[1, 2, 3]"},
    // sort keys are lists ([a, b] for attribute='a,b'): equal parts, undefined ones too, never compared with <
    {"{{ messages | sort(attribute='role,content') | map(attribute='content') | join }}{{ messages | sort(attribute='nope') | map(attribute='role') | join }}|{{ 0b101 }}{{ 0o17 }}{{ 0x_ff }}|{{ 'aB'.swapcase() }}{{ 'ab'.startswith('b', 1) }}{{ 'abc'.endswith('b', 0, 2) }}{{ 'ab'.startswith('a', 5) }}{{ 'Ab Cd'.istitle() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}{{ '1.5'.isnumeric() }}{{ '12'.isdecimal() }}{{ 'a\tb'.expandtabs(4) }}{{ 'Stra\u00dfe'.casefold() }}",
     "SysHisystemuser|515255|AbTrueTrueFalseTrueTrueTrueFalseTruea   bstrasse"},
    // dict views and ranges print as Python's, iterate, take len and in; a view has no index
    {"{{ d.keys() }}{{ d.values() }}{{ d.items() }}|{{ range(3) }}{{ range(1, 9, 2) }}|{{ d.keys() | list }}{{ d.items() | length }}{{ 'a' in d.keys() }}{{ d.keys() is sequence }}{{ range(3) is sequence }}|{{ d.keys()[0] }}|{{ range(5)[-1] }}{{ range(3) == [0, 1, 2] }}{{ d.items() | first }}{{ d | dictsort }}{{ range(4).index(2) }}|{% macro m(a, b=1) %}{% endmacro %}{{ m.name }}{{ m.arguments }}",
     "dict_keys(['a', 'b'])dict_values([1, 's'])dict_items([('a', 1), ('b', 's')])|range(0, 3)range(1, 9, 2)|['a', 'b']2TrueFalseTrue||4False('a', 1)[('a', 1), ('b', 's')]2|m('a', 'b')"},
};
static const Case RENDER_ERRORS[] = {
    {"{{ nope.a }}",
     "'nope' is undefined"},
    {"{{ d.zz.y }}",
     "'dict object' has no attribute 'zz'"},
    {"{{ x[9].y }}",
     "list object has no element 9"},
    {"{{ nope + 1 }}",
     "'nope' is undefined"},
    {"{{ nope() }}",
     "'nope' is undefined"},
    {"{{ 1 + 'a' }}",
     "unsupported operand type(s) for +: 'int' and 'str'"},
    {"{{ 'a' + 1 }}",
     "can only concatenate str (not \"int\") to str"},
    {"{{ 1 // 0 }}",
     "integer division or modulo by zero"},
    {"{{ 1 / 0 }}",
     "division by zero"},
    {"{{ -x }}",
     "bad operand type for unary -: 'list'"},
    {"{{ 1 < 'a' }}",
     "'<' not supported between instances of 'int' and 'str'"},
    {"{% for a, b in x %}{% endfor %}",
     "cannot unpack non-iterable int object"},
    {"{{ 5() }}",
     "'int' object is not callable"},
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
     "macro 'm' takes not more than 1 argument(s)"},
    {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}",
     "macro 'm' takes no keyword argument 'b'"},
    {"{% for i in 5 %}{% endfor %}",
     "'int' object is not iterable"},
    {"{% set q = 1 %}{% set q.a = 2 %}",
     "cannot assign attribute on non-namespace object"},
    {"{{ x | select('odd') | length }}",
     "object of type 'generator' has no len()"},
    {"{{ x | map('abs') | tojson }}",
     "Object of type generator is not JSON serializable"},
    {"{{ x | select | last }}",
     "'generator' object is not reversible"},
    {"{{ x | select + [1] }}",
     "unsupported operand type(s) for +: 'generator' and 'list'"},
    {"{{ nope | int }}",
     "'nope' is undefined"},
    {"{{ nope | indent }}",
     "'nope' is undefined"},
    {"{{ '%d' % 'a' }}",
     "%d format: a real number is required, not str"},
    {"{{ '%s %s' % ('a',) }}",
     "not enough arguments for format string"},
    {"{{ 'abc' % 5 }}",
     "not all arguments converted during string formatting"},
    {"{{ d.keys() | tojson }}",
     "Object of type dict_keys is not JSON serializable"},
    {"{{ range(2) | tojson }}",
     "Object of type range is not JSON serializable"},
    {"{{ d.keys() + ['c'] }}",
     "unsupported operand type(s) for +: 'dict_keys' and 'list'"},
    {"{{ x | sort(x) }}",
     "'list' object cannot be interpreted as an integer"},
    {"{% for i in x %}{{ loop(x) }}{% endfor %}",
     "The loop must have the 'recursive' marker to be called recursively."},
    {"{{ '{:d}'.format('a') }}",
     "Unknown format code 'd' for object of type 'str'"},
    {"{{ [[1], 2] | unique | list }}",
     "unhashable type: 'list'"},
    {"{{ d in d }}",
     "unhashable type: 'dict'"},
    {"{% set ns = namespace() %}{% set ns._x = 1 %}",
     "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '_x'. Please rename the attribute."},
};
#define VARS_JSON "{\"messages\": [{\"role\": \"system\", \"content\": \"Sys\"}, {\"role\": \"user\", \"content\": \"Hi\"}], \"x\": [1, 2, 3], \"d\": {\"a\": 1, \"b\": \"s\"}, \"s\": \"h\\u00e9llo\", \"n\": null}"

// Renders tpl with vars (JSON text); returns 0 / -1, output in *out (malloc'd), error in err.
static int render(const char *tpl, const char *vars, const JinjaLimits *lim, char **out, JinjaSpans *gen, PailErr *err) {
    JinjaTemplate *t;
    *out = NULL;
    if (jinja_parse(&t, tpl, strlen(tpl), "t", err) < 0) return -1;
    json_error_t je;
    json_t *v = json_loads(vars ? vars : "{}", 0, &je);
    ck_assert_ptr_nonnull(v);
    Buf b = {0};
    int rc = jinja_render(t, v, lim, &b, gen, err);
    if (rc == 0) *out = strndup(b.data ? (char *)b.data : "", b.len);
    buf_free(&b);
    json_decref(v);
    jinja_free(t);
    return rc;
}

START_TEST(test_core_table) {
    for (size_t i = 0; i < sizeof CORE / sizeof *CORE; i++) {
        PailErr err = {0};
        char *out;
        int rc = render(CORE[i].tpl, VARS_JSON, NULL, &out, NULL, &err);
        ck_assert_msg(rc == 0, "case %zu %s: %s", i, CORE[i].tpl, err.msg);
        ck_assert_msg(!strcmp(out, CORE[i].want), "case %zu %s:\n got  [%s]\n want [%s]", i, CORE[i].tpl, out, CORE[i].want);
        free(out);
    }
}
END_TEST

START_TEST(test_render_errors) {
    for (size_t i = 0; i < sizeof RENDER_ERRORS / sizeof *RENDER_ERRORS; i++) {
        PailErr err = {0};
        char *out;
        ck_assert_msg(render(RENDER_ERRORS[i].tpl, VARS_JSON, NULL, &out, NULL, &err) < 0, "case %zu renders", i);
        // "t:LINE: " then jinja2's own message
        char want[1200];
        snprintf(want, sizeof want, "t:1: %s", RENDER_ERRORS[i].want);
        ck_assert_msg(!strcmp(err.msg, want), "case %zu %s:\n got  [%s]\n want [%s]", i, RENDER_ERRORS[i].tpl, err.msg, want);
        ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    }
    // the line of the failing expression
    PailErr err = {0};
    char *out;
    ck_assert_int_lt(render("a\n{% if true %}\n  {{ nope.x }}\n{% endif %}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_str_eq(err.msg, "t:3: 'nope' is undefined");
    // raise_exception's message is exactly the template's text: no line prefix
    ck_assert_int_lt(render("{% if true %}\n{{ raise_exception('Only user and assistant roles!') }}{% endif %}", NULL,
                            NULL, &out, NULL, &err), 0);
    ck_assert_str_eq(err.msg, "Only user and assistant roles!");
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
}
END_TEST

// jinja2 refuses every one of these when compiling; the messages are this parser's, with line:col.
START_TEST(test_parse_errors) {
    static const Case P[] = {
        {"{% for x in y %}\n\n  {{ x }}", "t:3:10: expected 'endfor' or 'else', got end of template"},
        {"{% if a %}{% endfor %}", "t:1:14: expected 'elif', 'else' or 'endif', got 'endfor'"},
        {"{% frobnicate %}", "t:1:4: unknown tag 'frobnicate'"},
        {"{{ x|nosuchfilter }}", "t:1:6: no filter named 'nosuchfilter'"},
        {"{{ x is nosuchtest }}", "t:1:9: no test named 'nosuchtest'"},
        {"{% break %}", "t:1:4: 'break' outside of a loop"},
        {"{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}", "t:1:35: 'continue' outside of a loop"},
        {"{{ 1 + }}", "t:1:8: expected an expression, got '}}'"},
        {"{{ 'abc }}", "t:1:4: unterminated string literal"},
        {"{# never closed", "t:1:1: missing end of comment tag"},
        {"{{ a b }}", "t:1:6: expected '}}', got 'b'"},
        {"{% if a %}x{% endif b %}", "t:1:21: expected '%}', got 'b'"},
        {"{{ f(a=1, 2) }}", "t:1:5: invalid syntax for function call expression (positional argument after keyword argument)"},
        {"{% macro m(a=1, b) %}{% endmacro %}", "t:1:18: non-default argument follows default argument"},
        {"{{ x is defined is defined }}", "t:1:17: you cannot chain multiple tests with is"},
        {"{% set x %}a", "t:1:13: expected 'endset', got end of template"},
        {"{% for loop in x %}{% endfor %}", "t:1:8: Can't assign to special loop variable in for-loop target"},
    };
    for (size_t i = 0; i < sizeof P / sizeof *P; i++) {
        JinjaTemplate *t = NULL;
        PailErr err = {0};
        ck_assert_msg(jinja_parse(&t, P[i].tpl, strlen(P[i].tpl), "t", &err) < 0, "case %zu parses", i);
        ck_assert_msg(!strcmp(err.msg, P[i].want), "case %zu %s:\n got  [%s]\n want [%s]", i, P[i].tpl, err.msg, P[i].want);
        ck_assert_ptr_null(t);
    }
}
END_TEST

// jinja2 3 defers an unknown filter or test to run time inside an {% if %} (test, bodies, elif,
// else) and an inline if-expression, and refuses it at compile time anywhere else, including a
// for loop's body, a macro, a set block or a filter block inside an if. Outputs and messages are
// jinja2 3.1.6's.
START_TEST(test_unknown_deferred) {
    static const Case OK[] = {
        {"{% if false %}{{ x | from_json }}{% elif true %}a{% else %}{{ x is nosuchtest }}{% endif %}", "a"},
        {"{{ 'a' if true else x | from_json }}{% set y = (x|from_json) if false else 'b' %}{{ y }}", "ab"},
        {"{% if false %}{% for i in x | from_json %}{% endfor %}{% endif %}c", "c"},
        {"{% for i in x %}{% if i > 5 %}{{ i | nosuchfilter }}{% endif %}{% endfor %}d", "d"},
        {"{% if messages[0].content is string %}e{% elif messages[0].content | from_json %}f{% endif %}", "e"},
    };
    for (size_t i = 0; i < sizeof OK / sizeof *OK; i++) {
        PailErr err = {0};
        char *out;
        ck_assert_msg(render(OK[i].tpl, VARS_JSON, NULL, &out, NULL, &err) == 0, "case %zu: %s", i, err.msg);
        ck_assert_str_eq(out, OK[i].want);
        free(out);
    }
    static const Case RUN[] = {
        {"{% if false %}{% elif x is nosuchtest %}{% endif %}", "t:1: No test named 'nosuchtest' found."},
        {"{% for i in x %}{% if i > 2 %}{{ i | nosuchfilter }}{% endif %}{% endfor %}", "t:1: No filter named 'nosuchfilter' found."},
    };
    for (size_t i = 0; i < sizeof RUN / sizeof *RUN; i++) {
        PailErr err = {0};
        char *out;
        ck_assert_msg(render(RUN[i].tpl, VARS_JSON, NULL, &out, NULL, &err) < 0, "case %zu renders", i);
        ck_assert_str_eq(err.msg, RUN[i].want);
    }
    static const Case PARSE[] = {
        {"{% if true %}{% for i in x %}{{ i | from_json }}{% endfor %}{% endif %}", "t:1:37: no filter named 'from_json'"},
        {"{% if true %}{% macro m() %}{{ 1 | from_json }}{% endmacro %}{% endif %}", "t:1:36: no filter named 'from_json'"},
        {"{% if true %}{% set v %}{{ 1 | from_json }}{% endset %}{% endif %}", "t:1:32: no filter named 'from_json'"},
        {"{% if true %}{% filter from_json %}{% endfilter %}{% endif %}", "t:1:24: no filter named 'from_json'"},
        {"{% if true %}{% for i in x if i is from_json %}{% endfor %}{% endif %}", "t:1:36: no test named 'from_json'"},
        {"{% if true %}{% set v | from_json %}{% endset %}{% endif %}", "t:1:25: no filter named 'from_json'"},
        {"{% if true %}{% endif %}{{ x | from_json }}", "t:1:32: no filter named 'from_json'"},
    };
    for (size_t i = 0; i < sizeof PARSE / sizeof *PARSE; i++) {
        JinjaTemplate *t = NULL;
        PailErr err = {0};
        ck_assert_msg(jinja_parse(&t, PARSE[i].tpl, strlen(PARSE[i].tpl), "t", &err) < 0, "case %zu parses", i);
        ck_assert_str_eq(err.msg, PARSE[i].want);
    }
}
END_TEST

// transformers' AssistantTracker: the span starts at the length of the output so far and covers
// what the block rendered; the block's body is a caller() with a scope of its own.
START_TEST(test_generation) {
    PailErr err = {0};
    char *out;
    JinjaSpans gen;
    const char *tpl = "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
                      "{{ m.content }}!{% set leak = 1 %}{% endgeneration %}{% endif %}{% endfor %}[{{ leak }}]";
    const char *vars = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\\u00e9\"},"
                       "{\"role\":\"user\",\"content\":\"r\"},{\"role\":\"assistant\",\"content\":\"bb\"}]}";
    ck_assert_int_eq(render(tpl, vars, NULL, &out, &gen, &err), 0);
    ck_assert_str_eq(out, "<user><assistant>a\xc3\xa9!<user><assistant>bb![]");
    ck_assert_int_eq(gen.n, 2);
    ck_assert_uint_eq(gen.spans[0].begin, 17);
    ck_assert_uint_eq(gen.spans[0].end, 21);  // bytes: é is two
    ck_assert_uint_eq(gen.spans[1].begin, 38);
    ck_assert_uint_eq(gen.spans[1].end, 41);
    free(gen.spans);
    free(out);
    // no spans asked for: renders the same
    ck_assert_int_eq(render(tpl, vars, NULL, &out, NULL, &err), 0);
    ck_assert_str_eq(out, "<user><assistant>a\xc3\xa9!<user><assistant>bb![]");
    free(out);
}
END_TEST

START_TEST(test_failure_restores_output) {
    JinjaTemplate *t;
    PailErr err = {0};
    const char *tpl = "{% for m in messages %}{{ m.content }}{% endfor %}{{ raise_exception('stop') }}";
    ck_assert_int_eq(jinja_parse(&t, tpl, strlen(tpl), "t", &err), 0);
    json_t *v = json_loads("{\"messages\":[{\"content\":\"abc\"}]}", 0, NULL);
    Buf b = {0};
    buf_append(&b, "keep", 4);
    JinjaSpans gen;
    ck_assert_int_lt(jinja_render(t, v, NULL, &b, &gen, &err), 0);
    ck_assert_uint_eq(b.len, 4);
    ck_assert_str_eq((char *)b.data, "keep");
    ck_assert_int_eq(gen.n, 0);
    ck_assert_ptr_null(gen.spans);
    ck_assert_str_eq(err.msg, "stop");
    // appends after what the Buf held
    const char *ok = "{{ 1 }}";
    jinja_free(t);
    ck_assert_int_eq(jinja_parse(&t, ok, strlen(ok), "t", &err), 0);
    ck_assert_int_eq(jinja_render(t, v, NULL, &b, NULL, &err), 0);
    ck_assert_str_eq((char *)b.data, "keep1");
    buf_free(&b);
    json_decref(v);
    jinja_free(t);
}
END_TEST

// ---- limits

START_TEST(test_limit_steps) {
    PailErr err = {0};
    char *out;
    JinjaLimits lim = JINJA_LIMITS_DEFAULT;
    lim.max_steps = 1000;
    const char *tpl = "{% for a in x %}{% for b in x %}{% for c in x %}.{% endfor %}{% endfor %}{% endfor %}";
    const char *vars = "{\"x\":[0,1,2,3,4,5,6,7,8,9,10,11]}";  // 12 + 144 + 1728 iterations
    ck_assert_int_lt(render(tpl, vars, &lim, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 1000 steps"));
    lim.max_steps = 2000;
    ck_assert_int_eq(render(tpl, vars, &lim, &out, NULL, &err), 0);
    ck_assert_uint_eq(strlen(out), 1728);
    free(out);
    // an endless recursion of macros stops at the depth bound
    ck_assert_int_lt(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "deeper than 64"));
    // and so does an endless recursive loop
    ck_assert_int_lt(render("{% for n in [1] recursive %}{{ loop([1]) }}{% endfor %}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "deeper than 64"));
}
END_TEST

START_TEST(test_limit_output) {
    PailErr err = {0};
    char *out;
    JinjaLimits lim = JINJA_LIMITS_DEFAULT;
    lim.max_output = 1000;
    const char *vars = "{\"x\":[0,1,2,3,4,5,6,7,8,9]}";
    ck_assert_int_eq(render("{% for a in x %}{% for b in x %}{{ '12345678' }}{% endfor %}{% endfor %}", vars, &lim, &out, NULL, &err), 0);
    free(out);  // 800 bytes
    ck_assert_int_lt(render("{% for a in x %}{% for b in x %}{{ '123456789ab' }}{% endfor %}{% endfor %}", vars, &lim, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "over the limit of 1000 bytes"));
    // inside a capture, and strings built by operators
    ck_assert_int_lt(render("{% set s %}{% for a in x %}{% for b in x %}{{ '123456789ab' }}{% endfor %}{% endfor %}{% endset %}",
                            vars, &lim, &out, NULL, &err), 0);
    ck_assert_int_lt(render("{{ ('x' * 600) + ('y' * 600) }}", vars, &lim, &out, NULL, &err), 0);
    ck_assert_int_lt(render("{{ 'x' * 100000000000 }}", vars, &lim, &out, NULL, &err), 0);
    // an empty sequence repeated that many times is empty, at once (the fuzzer's timeout: 10**11 empty copies)
    ck_assert_int_eq(render("[{{ [] * 111111111111 }}{{ '' * 111111111111 }}{{ () * 111111111111 }}]", vars, &lim, &out, NULL, &err), 0);
    ck_assert_str_eq(out, "[[]()]");
    free(out);
}
END_TEST

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Renders tpl with the default limits, asserting it takes under max_s seconds (bounds with room for a
// loaded machine and ASan; the code they guard took 4 to 100+ times as long); returns render's rc.
static int render_timed(const char *tpl, double max_s, char **out, PailErr *err) {
    double t0 = now_s();
    int rc = render(tpl, NULL, NULL, out, NULL, err);
    double dt = now_s() - t0;
    ck_assert_msg(dt < max_s, "%.2f s (over %.1f s) for %s", dt, max_s, tpl);
    return rc;
}

// Searches are linear whatever the strings: a naive backward scan made this rfind O(n * m)
// (12.7 s; the 16M/8M variant ~20 minutes). Results are CPython's.
START_TEST(test_limit_search_time) {
    PailErr err = {0};
    char *out;
    ck_assert_int_eq(render_timed("{{ ('a' * 1600000).rfind('a' * 800000 ~ 'b') }}", 3.0, &out, &err), 0);
    ck_assert_str_eq(out, "-1");
    free(out);
    ck_assert_int_eq(render_timed("{{ ('a' * 16000000).rfind('a' * 8000000 ~ 'b') }}|{{ ('a' * 16000000).rindex('a' * 8000000) }}"
                                  "|{{ ('a' * 1600000).rsplit('a' * 800000 ~ 'b')|length }}",
                                  5.0, &out, &err), 0);
    ck_assert_str_eq(out, "-1|8000000|1");
    free(out);
    const char *tpl = "{{ ('ab' * 100).rfind('b') }} {{ ('ab' * 3).rindex('ab') }} {{ 'a--b--c'.rsplit('--', 1) }} "
                      "{{ ('x' * 40 ~ 'y' ~ 'x' * 40 ~ 'y' ~ 'x' * 40).rsplit('x' * 40) }} "
                      "{{ ('\u00e9' ~ 'a' * 20 ~ '\u00e9' ~ 'a' * 20).rfind('a' * 20) }} "
                      "{{ ('x' * 20 ~ 'y' * 20 ~ 'x' * 20 ~ 'y' * 20).rfind('x' * 20 ~ 'y' * 20) }} {{ 'abc'.rfind('') }}";
    ck_assert_int_eq(render(tpl, NULL, NULL, &out, NULL, &err), 0);
    ck_assert_str_eq(out, "199 4 ['a--b', 'c'] ['', 'y', 'y', ''] 22 40 3");
    free(out);
}
END_TEST

// unique hashes: 40k items were O(n^2) (3.4 s). 1, 1.0 and True are one value, as in Python.
START_TEST(test_limit_unique_time) {
    PailErr err = {0};
    char *out;
    ck_assert_int_eq(render_timed("{{ (range(80000)|list + range(80000)|list)|unique|list|length }}", 3.0, &out, &err), 0);
    ck_assert_str_eq(out, "80000");
    free(out);
    ck_assert_int_eq(render("{{ [1, 1.0, True, 2, 'a', 'A', 'b', 2.5, 2.5]|unique|list }}{{ ['a', 'A']|unique(case_sensitive=true)|list }}"
                            "{{ [{'k': 'x'}, {'k': 'X'}, {'k': 'y'}]|unique(attribute='k')|map(attribute='k')|join }}",
                            NULL, NULL, &out, NULL, &err), 0);
    ck_assert_str_eq(out, "[1, 2, 'a', 'b', 2.5]['a', 'A']xy");
    free(out);
}
END_TEST

// The work budget bounds what steps cannot: one step may scan a 16 MiB string. A 1000 x 999 loop
// of `'b' in` a 16 MB string ran past 60 s; now it stops with one error naming the line.
START_TEST(test_limit_work) {
    PailErr err = {0};
    char *out;
    const char *hostile[] = {
        "\n\n{% set s = 'a' * 16000000 %}{% for i in range(1000) %}{% for j in range(999) %}{% if 'b' in s %}x{% endif %}"
        "{% endfor %}{% endfor %}",
        "\n\n{% set s = 'a' * 8000000 %}{% for i in range(1000) %}{% for j in range(999) %}{% if s[7999999] == 'b' %}x"
        "{% endif %}{% endfor %}{% endfor %}",
        "\n\n{% set s = 'a' * 16000000 %}{% set t = 'a' * 15999999 ~ 'b' %}{% for i in range(1000) %}{% for j in range(999) %}"
        "{% if s == t %}x{% endif %}{% endfor %}{% endfor %}",
        "\n\n{% set l = [0] * 1000000 %}{% for i in range(1000) %}{% for j in range(999) %}{% if 1 in l %}x{% endif %}"
        "{% endfor %}{% endfor %}",
        "\n\n{% set s = ' ' * 4000000 %}{% for i in range(1000) %}{% for j in range(999) %}{{ s.strip() }}{% endfor %}{% endfor %}",
    };
    for (size_t k = 0; k < sizeof hostile / sizeof *hostile; k++) {
        ck_assert_int_lt(render_timed(hostile[k], 10.0, &out, &err), 0);
        ck_assert_msg(strstr(err.msg, "t:3: work budget of 268435456 bytes exceeded"), "%s", err.msg);
    }
    // the budget is a limit like the others: a small one refuses what the default allows
    JinjaLimits lim = JINJA_LIMITS_DEFAULT;
    lim.max_work = 10000;
    const char *tpl = "{% for i in range(20) %}{{ ('x' * 600).find('y') }}{% endfor %}";
    ck_assert_int_lt(render(tpl, NULL, &lim, &out, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "t:1: work budget of 10000 bytes exceeded"), "%s", err.msg);
    ck_assert_int_eq(render(tpl, NULL, NULL, &out, NULL, &err), 0);
    free(out);
}
END_TEST

START_TEST(test_limit_nesting) {
    PailErr err = {0};
    size_t n = 100000;
    char *src = malloc(2 * n + 8);
    ck_assert_ptr_nonnull(src);
    strcpy(src, "{{ ");
    memset(src + 3, '(', n);
    src[3 + n] = '1';
    memset(src + 4 + n, ')', n);
    strcpy(src + 4 + 2 * n, " }}");
    JinjaTemplate *t = NULL;
    ck_assert_int_lt(jinja_parse(&t, src, strlen(src), "t", &err), 0);
    ck_assert_msg(strstr(err.msg, "nested deeper than") != NULL, "%s", err.msg);
    // blocks too
    char *p = src;
    for (int i = 0; i < 5000; i++) p += sprintf(p, "{%%if 1%%}");
    ck_assert_int_lt(jinja_parse(&t, src, strlen(src), "t", &err), 0);
    ck_assert_msg(strstr(err.msg, "nested deeper than") != NULL, "%s", err.msg);
    // - - - ... 1 and not not not ... 1
    for (int k = 0; k < 2; k++) {
        p = src + sprintf(src, "{{ ");
        for (size_t i = 0; i < 20000; i++) p += sprintf(p, k ? "not " : "- ");
        strcpy(p, "1 }}");
        ck_assert_int_lt(jinja_parse(&t, src, strlen(src), "t", &err), 0);
        ck_assert_msg(strstr(err.msg, "nested deeper than") != NULL, "%s", err.msg);
    }
    free(src);
    // moderate nesting parses and renders; the render's expression depth bound is max_depth
    char *out;
    ck_assert_int_eq(render("{{ ((((((((((1)))))))))) }}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_str_eq(out, "1");
    free(out);
    JinjaLimits lim = JINJA_LIMITS_DEFAULT;
    lim.max_depth = 4;
    ck_assert_int_lt(render("{{ [[[[[[1]]]]]] }}", NULL, &lim, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "deeper than 4"));
}
END_TEST

START_TEST(test_integer_overflow) {
    PailErr err = {0};
    char *out;
    ck_assert_int_lt(render("{{ 9223372036854775807 + 1 }}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "beyond 64 bits"));
    ck_assert_int_lt(render("{{ 3 ** 64 }}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_int_lt(render("{{ 99999999999999999999 }}", NULL, NULL, &out, NULL, &err), 0);
    // Python's int is unbounded: a conversion past 64 bits is refused, not turned into the default
    ck_assert_int_lt(render("{{ 1e300 | int }}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "beyond 64 bits"));
    ck_assert_int_lt(render("{{ '99999999999999999999' | int }}", NULL, NULL, &out, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "beyond 64 bits"));
}
END_TEST

// ---- the real templates

#define REF "../shared/reference/chat-templates"

// What jinja2 renders for Qwen3-0.6B with a system and a user message and the generation prompt.
static const char QWEN3_SYS_USER[] = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n";

START_TEST(test_reference_templates) {
    FILE *m = fopen(REF "/MANIFEST.tsv", "r");
    if (!m) {
        fprintf(stderr, "check_tokenizer_jinja: " REF " absent, reference templates skipped\n");
        return;
    }
    char line[2048];
    int n = 0;
    const char *vars = "{\"messages\":[{\"role\":\"system\",\"content\":\"You are helpful.\"},{\"role\":\"user\",\"content\":\"Hello!\"}],"
                       "\"add_generation_prompt\":true,\"tools\":null,\"documents\":null}";
    while (fgets(line, sizeof line, m)) {
        char name[512], bos[256], eos[256];
        if (sscanf(line, "%511[^\t]\t%*[^\t]\t%*[^\t]\t%*[^\t]\t%255[^\t]\t%255[^\t]", name, bos, eos) != 3 ||
            !strcmp(name, "name"))
            continue;
        char path[700];
        snprintf(path, sizeof path, REF "/%s.jinja", name);
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "%s", path);
        static char src[1 << 20];
        size_t len = fread(src, 1, sizeof src - 1, f);
        fclose(f);
        src[len] = 0;
        JinjaTemplate *t;
        PailErr err = {0};
        ck_assert_msg(jinja_parse(&t, src, len, name, &err) == 0, "%s", err.msg);
        json_t *v = json_loads(vars, 0, NULL);
        if (strcmp(bos, "null")) json_object_set_new(v, "bos_token", json_string(bos));  // MANIFEST: null = none set
        if (strcmp(eos, "null")) json_object_set_new(v, "eos_token", json_string(eos));
        Buf b = {0};
        int rc = jinja_render(t, v, NULL, &b, NULL, &err);
        // Gemma 2 and Mistral 7B v0.1 refuse a system message with raise_exception, as in transformers
        if (strstr(name, "gemma-2"))
            ck_assert_msg(rc < 0 && !strcmp(err.msg, "System role not supported"), "%s: %s", name, err.msg);
        else if (strstr(name, "Mistral-7B-Instruct-v0.1"))
            ck_assert_msg(rc < 0 && !strcmp(err.msg, "Conversation roles must alternate user/assistant/user/assistant/..."),
                          "%s: %s", name, err.msg);
        else
            ck_assert_msg(rc == 0, "%s: %s", name, err.msg);
        if (!strcmp(name, "Qwen-Qwen3-0.6B")) ck_assert_str_eq((char *)b.data, QWEN3_SYS_USER);
        buf_free(&b);
        json_decref(v);
        jinja_free(t);
        n++;
    }
    fclose(m);
    ck_assert_int_eq(n, 44);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tokenizer_jinja");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_core_table);
    tcase_add_test(core, test_render_errors);
    tcase_add_test(core, test_parse_errors);
    tcase_add_test(core, test_unknown_deferred);
    tcase_add_test(core, test_generation);
    tcase_add_test(core, test_failure_restores_output);
    tcase_add_test(core, test_reference_templates);
    tcase_add_test(limits, test_limit_steps);
    tcase_add_test(limits, test_limit_output);
    tcase_add_test(limits, test_limit_nesting);
    tcase_add_test(limits, test_limit_search_time);
    tcase_add_test(limits, test_limit_unique_time);
    tcase_add_test(limits, test_limit_work);
    tcase_add_test(limits, test_integer_overflow);
    tcase_set_timeout(core, 60);
    tcase_set_timeout(limits, 60);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
