// Internals of the chat-template interpreter (jinja.h): the value model shared by the
// evaluator (jinja_eval.c), the builtins (jinja_builtins.c: filters, tests, methods,
// globals) and the Python formatting of values (jinja_format.c: str(), repr(), tojson).
// Not a public interface: only src/tokenizer/jinja*.c and tests/check_tokenizer_jinja.c
// include it.
//
// Memory: every value a render creates lives in the render's arena (JRender.arena) and is
// freed at once when the render ends; nothing is reference counted. Values are immutable
// once built, except a namespace's attributes (jinja2's namespace() is the one mutable
// object a template can reach) and the lists/dicts a builtin is still filling.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "tokenizer/jinja.h"

// ---- arena

typedef struct JArenaBlock JArenaBlock;
typedef struct {
    JArenaBlock *head;
    size_t used, cap;  // bytes handed out in all blocks; cap = the render's memory bound
} JArena;

typedef struct JRender JRender;

// n bytes, 16-aligned, zeroed. NULL (with the render's error set: "template used more than
// N MiB") past the cap or when malloc fails.
void *ja_alloc(JRender *r, size_t n);
void ja_free_all(JArena *a);

// ---- values

typedef enum {
    JV_UNDEFINED = 0,  // a missing name, key or attribute; what = its name for messages
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE,      // from (a, b) literals, dict.items() pairs, loop unpacking; prints as ('a', 1)
    JV_DICT,
    JV_NAMESPACE,  // namespace(...): attributes in a JDict, assignable with {% set ns.x = ... %}
    JV_FUNC,       // a macro, a global function, a bound method, loop.cycle, caller
} JKind;

typedef struct JStr JStr;
typedef struct JList JList;
typedef struct JDict JDict;
typedef struct JFunc JFunc;

typedef struct {
    JKind kind;
    union {
        bool b;
        int64_t i;
        double f;
        const JStr *s;
        JList *l;   // JV_LIST, JV_TUPLE
        JDict *d;   // JV_DICT, JV_NAMESPACE
        JFunc *fn;
        const char *what;  // JV_UNDEFINED: the name that was looked up ("" when unknown); borrowed
    } u;
} JValue;

struct JStr {
    size_t len;      // bytes (UTF-8)
    size_t nchars;   // code points (Python len()); SIZE_MAX until jv_str_nchars computes it
    char p[];        // len bytes + NUL
};

struct JList {
    size_t n, cap;
    JValue *v;
    bool gen;    // JV_LIST only: a generator, as jinja2's map, select, reject, selectattr, rejectattr,
                 // unique, items and reverse return one: always true, no len(), no index, not JSON,
                 // and iterating it consumes it (items pos..n are left)
    size_t pos;  // gen: items consumed so far
    uint8_t view;       // JV_LIST only: JL_LIST, or what Python object it stands for (JLView)
    int64_t range[3];   // JL_RANGE: start, stop, step (for repr)
};
// A JV_LIST that is not a list in Python: a dict view (d.keys(), d.values(), d.items()) or a range.
// They iterate, take len() and `in` as a list; they print as dict_keys([...]) or range(0, 3), are not
// JSON and do not concatenate; a view has no index (the sandbox gives undefined), a range has.
typedef enum { JL_LIST = 0, JL_KEYS, JL_VALUES, JL_ITEMS, JL_RANGE } JLView;

struct JDict {  // insertion-ordered; keys compared with jv_equal (strings in practice)
    size_t n, cap;
    JValue *k, *v;
    bool loop;      // a for loop's `loop` (jinja2's LoopContext): its keys are attributes, no methods;
                    // prints as <LoopContext 1/3>, not JSON
    void *recurse;  // loop of a recursive for: evaluator data for calling loop(items); NULL otherwise
};

typedef struct {
    int n;                 // positional arguments
    const JValue *pos;
    int nkw;               // keyword arguments, in call order
    const char *const *kw_names;
    const JValue *kw;
} JArgs;

// A callable value. Builtin kinds are called through their fn pointer; macros and the other
// evaluator-made callables through the evaluator (jinja_eval.c), which owns what impl points at.
typedef int (*JBuiltinFn)(JRender *r, const JValue *self, const JArgs *a, JValue *out);
typedef enum {
    JF_BUILTIN,  // fn(r, self, args): a global (range, namespace, dict, raise_exception, strftime_now)
                 // or a bound method (self = the object, name = the method)
    JF_MACRO,    // {% macro %} or a caller(): impl = evaluator data
    JF_LOOP,     // loop.cycle / the loop(...) of a recursive loop: impl = evaluator data
} JFuncKind;

struct JFunc {
    JFuncKind kind;
    const char *name;  // for messages and for str(): "<built-in method items of dict object>" style not needed
    JBuiltinFn fn;     // JF_BUILTIN
    JValue self;       // bound method's object (JV_UNDEFINED for globals)
    void *impl;        // JF_MACRO / JF_LOOP: evaluator-owned
};

// The state of one render: limits, counters, the arena and the first error.
struct JRender {
    JArena arena;
    const JinjaLimits *lim;  // borrowed; defaults already applied
    uint64_t steps;          // loop iterations + calls so far
    uint64_t work;           // bytes touched so far (jr_work)
    int depth;               // current recursion depth
    int line;                // template line being evaluated (for messages)
    const char *tname;       // the template's name (for messages)
    PailErr *err;
    bool raw_error;          // set with the error by raise_exception(msg): err->msg is exactly msg (code
                             // PAIL_ERR_INVALID) and whoever sees the -1 passes it up unprefixed, unwrapped
    void *eval;              // evaluator-private state
};

// jinja2's UndefinedError for using undefined u (its name, or the message a missing attribute or
// item left): "'x' is undefined", "'dict object' has no attribute 'y'"; returns -1.
int jr_fail_undefined(JRender *r, JValue u);
// Sets r->err ("NAME:LINE: message" with the current line) and returns -1.
int jr_fail(JRender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Counts one step; -1 with the error set once lim->max_steps is passed.
int jr_step(JRender *r);
// Charges bytes of work (read, written, compared, hashed); -1 with the error set once
// lim->max_work is passed ("NAME:LINE: ... work budget of N bytes exceeded"). Every operation
// whose time grows with the size of a value charges that size, so a render's time is bounded
// by max_steps small operations plus max_work bytes of large ones.
int jr_work(JRender *r, uint64_t bytes);

// Substring search that stays linear in time (jinja_search.c), charging what it reads.
// jr_find: first occurrence of nd[0..m) in h[0..n) (m > 0): 1 with *at set, 0 when absent, -1 on error.
int jr_find(JRender *r, const char *h, size_t n, const char *nd, size_t m, size_t *at);
// Backward search, for rfind and rsplit: one set-up (reversed copies when the needle is long),
// then jr_rsearch_prev finds the last occurrence that ends at or before `end`.
typedef struct {
    JRender *r;
    const char *h, *nd;  // borrowed
    size_t n, m;
    char *rh, *rn;  // owned (malloc): h and nd reversed, NULL for short needles
} JRSearch;
int jr_rsearch_init(JRSearch *s, JRender *r, const char *h, size_t n, const char *nd, size_t m);  // 0 / -1
int jr_rsearch_prev(JRSearch *s, size_t end, size_t *at);  // 1 found, 0 absent, -1 error
void jr_rsearch_free(JRSearch *s);

// Constructors. Strings are copied into the arena; a NULL return means the error is set.
static inline bool jv_is_gen(JValue v) { return v.kind == JV_LIST && v.u.l->gen; }
// A generator, dict view or range: a JV_LIST that Python's list operations (+, *, ==, JSON) refuse.
static inline bool jv_is_listlike(JValue v) { return v.kind == JV_LIST && (v.u.l->gen || v.u.l->view); }
static inline JValue jv_undefined(const char *what) { return (JValue){.kind = JV_UNDEFINED, .u.what = what ? what : ""}; }
static inline JValue jv_none(void) { return (JValue){.kind = JV_NONE}; }
static inline JValue jv_bool(bool b) { return (JValue){.kind = JV_BOOL, .u.b = b}; }
static inline JValue jv_int(int64_t i) { return (JValue){.kind = JV_INT, .u.i = i}; }
static inline JValue jv_float(double f) { return (JValue){.kind = JV_FLOAT, .u.f = f}; }
const JStr *jstr_new(JRender *r, const char *p, size_t len);  // NULL on error (set)
int jv_str_new(JRender *r, const char *p, size_t len, JValue *out);  // 0 / -1
size_t jv_str_nchars(const JStr *s);  // code points (cached)
JList *jlist_new(JRender *r, size_t cap_hint);
int jlist_push(JRender *r, JList *l, JValue v);  // 0 / -1
JDict *jdict_new(JRender *r, size_t cap_hint);
int jdict_set(JRender *r, JDict *d, JValue k, JValue v);  // replaces in place or appends; 0 / -1
const JValue *jdict_get(const JDict *d, JValue k);           // NULL when absent
const JValue *jdict_get_str(const JDict *d, const char *key);  // NULL when absent
JFunc *jfunc_builtin(JRender *r, const char *name, JBuiltinFn fn, JValue self);

// From / to JSON (jansson): objects become dicts in key order, integers JV_INT, reals JV_FLOAT.
int jv_from_json(JRender *r, json_t *j, JValue *out);

// Python semantics.
bool jv_truthy(JValue v);                   // bool(v); undefined is false
bool jv_equal(JValue a, JValue b);          // ==, with 1 == 1.0 == True, [..] elementwise, dicts by keys
int jr_equal(JRender *r, JValue a, JValue b, bool *eq);  // jv_equal charging its work; 0 / -1
// A hash consistent with jv_equal (equal values hash equal: 1, 1.0 and True alike); adds the
// bytes it reads to *work.
uint64_t jv_hash(JValue v, uint64_t *work);
// <, <=, >, >= as Python orders them: numbers with numbers, strings by code point, lists and tuples
// lexicographically. -1 with the error set for types Python refuses to order ("'<' not supported
// between instances of 'str' and 'int'"); else 0 with *cmp < 0, 0, > 0.
int jv_compare(JRender *r, JValue a, JValue b, int *cmp);
const char *jv_type_name(JValue v);  // Python's: 'str', 'int', 'list', 'dict', 'NoneType', 'Undefined'...

// Formatting (jinja_format.c).
typedef struct {
    char *p;
    size_t len, cap;
} JBuf;  // arena-backed growable text; bounded by lim->max_output
int jbuf_put(JRender *r, JBuf *b, const char *p, size_t n);
int jv_to_str(JRender *r, JValue v, JBuf *out);   // Python str(v); undefined gives ""
int jv_to_repr(JRender *r, JValue v, JBuf *out);  // Python repr(v)
// Python json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson calls it:
// indent < 0 = None, or indent_str non-NULL for a string indent; sep_item/sep_key NULL = Python's defaults
// (", " and ": ", or "," and ": " with an indent).
int jv_to_json(JRender *r, JValue v, bool ensure_ascii, int indent, const char *indent_str, const char *sep_item,
               const char *sep_key, bool sort_keys, JBuf *out);

// Python's fmt % args (jinja_printf.c): fmt a string value; args a tuple, a dict for %(key)s, or
// one value. 0 / -1 with the error set (CPython's messages).
int jinja_printf(JRender *r, JValue fmt, JValue args, JValue *out);

// Builtins (jinja_builtins.c). Each returns 0 / -1 with the error set; "no such filter/test" is
// caught at parse time with jinja_filter_known / jinja_test_known, or at run time where jinja2
// defers it (jinja_parse.c: check_unknown).
bool jinja_filter_known(const char *name);
bool jinja_test_known(const char *name);
int jinja_filter_call(JRender *r, const char *name, JValue self, const JArgs *a, JValue *out);
int jinja_test_call(JRender *r, const char *name, JValue self, const JArgs *a, bool *out);
// Attribute lookup as jinja2's sandbox does it (obj.name, and obj[name] when the item is missing):
// dict keys and a namespace's attributes, the str/dict/list methods templates call (a bound JV_FUNC),
// and the sandbox's refusal of mutating methods (append, update, pop, ...: calling one fails with
// "access to attribute 'append' of 'list' object is unsafe"). Sets *out to undefined when absent.
int jinja_getattr(JRender *r, JValue obj, const char *name, JValue *out);
// `v in seq` (also the `in` test): a substring of a string, an item of a list or tuple, a key of a
// dict or namespace; undefined contains nothing. Fails for other types.
int jinja_contains(JRender *r, JValue seq, JValue v, bool *out);
// obj[key]: dict item, list/tuple/str index (negative from the end), then attribute; undefined when
// absent (as jinja2: a missing key is undefined, not an error).
int jinja_getitem(JRender *r, JValue obj, JValue key, JValue *out);
// obj[start:stop:step] on a list, tuple or str (code points), Python's rules for missing and negative
// bounds; has_* false = omitted.
int jinja_slice(JRender *r, JValue obj, bool has_start, int64_t start, bool has_stop, int64_t stop, bool has_step,
                int64_t step, JValue *out);
// The globals every template sees: range, dict, namespace, raise_exception, strftime_now, lipsum-free.
// Fills d with name -> JV_FUNC.
int jinja_globals_add(JRender *r, JDict *d);
