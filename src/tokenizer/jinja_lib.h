// Helpers shared by the builtins' files (jinja_builtins.c: lookup, globals and tests;
// jinja_filters.c; jinja_methods.c: str/dict/list methods). Private to those three files;
// the evaluator sees only jinja_internal.h.
#pragma once
#include "tokenizer/jinja_internal.h"

// Binds a call's arguments to parameter names as Python does (positionals in order, then
// keywords by name). vals[i] receives parameter i; bit i of *given says it was passed.
// Fails "FN() takes at most N arguments (M given)", "FN() got an unexpected keyword
// argument 'x'" or "FN() got multiple values for argument 'x'".
int jl_bind(JRender *r, const char *fn, const JArgs *a, const char *const *names, int n, JValue *vals,
            unsigned *given);
// A call that takes no arguments.
int jl_no_args(JRender *r, const char *fn, const JArgs *a);

// UTF-8: one code point from p[0..n) (invalid bytes read as U+FFFD, one byte each); its length.
size_t jl_utf8_next(const char *p, size_t n, int32_t *cp);
// Appends cp as UTF-8.
int jl_utf8_put(JRender *r, JBuf *b, int32_t cp);
// Byte offset of code point i (0 <= i <= nchars) of s.
size_t jl_cp_offset(const JStr *s, size_t i);
// Python's str.isspace() for one code point (Unicode White_Space plus the ASCII separators
// 0x1c-0x1f, as CPython's _PyUnicode_IsWhitespace).
bool jl_is_space(int32_t cp);

// A string value from a buffer (copied into a JStr of its own).
int jl_str_from(JRender *r, const JBuf *b, JValue *out);
// str(v) as a string value (v itself when it is one).
int jl_to_string(JRender *r, JValue v, JValue *out);
// One code point case-mapped as CPython does (up to three code points out), appended to b.
typedef enum { JCASE_LOWER, JCASE_UPPER, JCASE_TITLE } JCase;
int jl_case_put(JRender *r, JBuf *b, int32_t cp, JCase kind);
// Python's str.lower() / upper() of a string value (full case mappings, final sigma; jinja_methods.c).
int jl_lower(JRender *r, JValue s, JValue *out);
int jl_upper(JRender *r, JValue s, JValue *out);

// format(v, spec) as Python's format-spec mini-language has it (str.format's {:spec}; jinja_printf.c):
// fill, align, sign, #, 0, width, grouping, precision and type for str, int, bool and float.
int jl_format_spec(JRender *r, JValue v, const char *spec, size_t n, JBuf *out);

// Python's str.islower() (lower true) / isupper(): every cased code point in that case, at least one.
bool jl_str_case_is(const JStr *s, bool lower);

// s.replace(old, new, count) on a string value s (the method and the filter: fn names it).
int jl_replace(JRender *r, const char *fn, JValue s, const JArgs *a, JValue *out);

// Iterating a value as Python's iter() does: a list or tuple's items, a dict's keys, a
// string's characters (each a one-character string). Fails "'int' object is not iterable".
int jl_iter_list(JRender *r, JValue v, JList **out);
static inline JValue jl_list_value(JList *l) { return (JValue){.kind = JV_LIST, .u.l = l}; }

// jinja2's attribute getter for filters' attribute= ("a.b", "0.name": dots descend, integer
// parts index). A missing step gives undefined.
int jl_attr_path(JRender *r, JValue v, const char *path, JValue *out);

// Stable sort of v[0..n) by keys[0..n) (moved along), ascending or descending, with Python's
// ordering (jv_compare); -1 when two keys do not order.
int jl_sort(JRender *r, JValue *keys, JValue *v, size_t n, bool reverse);

// The bound method obj.name when obj's type has one (str, dict, list, tuple); *found false
// otherwise. Mutating methods come back bound too; calling them fails as jinja2's sandbox does.
int jl_method_get(JRender *r, JValue obj, const char *name, JValue *out, bool *found);
