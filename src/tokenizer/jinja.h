// A sandboxed interpreter for the Jinja that Hugging Face chat templates are written in,
// rendering byte for byte what transformers' apply_chat_template renders: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols
// extension, transformers' {% generation %} tag, its tojson (Python json.dumps,
// ensure_ascii=False), raise_exception, strftime_now, dict() and namespace().
//
// The template's data model is Python's as jinja2 sees it: values print with str() (a
// list prints as ['a', 1], None as None, True as True, 1.0 as 1.0), dicts keep insertion
// order, an undefined name prints as "" and fails when used further. What the language
// covers is what the real templates need (doc/tokenizer.md lists it); a construct outside
// that fails to parse or render with an error naming it, never with a wrong rendering.
//
// Rendering is bounded (loop iterations and calls, output bytes, recursion depth, and the
// work budget: bytes that string and list operations read and write) and touches no file, no environment variable and no clock other than the one strftime_now
// reads (JinjaLimits.now).
#pragma once
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"

typedef struct JinjaTemplate JinjaTemplate;  // parsed, immutable; one may render on many threads

// Parses template text (UTF-8, len bytes, may hold NUL-free text only). name labels errors:
// "NAME:LINE:COL: expected 'endfor', got end of template". 0 / -1 with err.
int jinja_parse(JinjaTemplate **out, const char *src, size_t len, const char *name, PailErr *err);
void jinja_free(JinjaTemplate *t);

typedef struct {
    uint64_t max_steps;    // loop iterations + macro/filter calls; 0 = 1,000,000
    size_t max_output;     // bytes of output (and of any one string built); 0 = 16 MiB
    int max_depth;         // nesting of macro calls and expression recursion; 0 = 64
    uint64_t max_work;     // bytes string and list operations touch (copy, search, compare, hash,
                           // index; 16 per list item); 0 = 16 x max_output (256 MiB). Bounds
                           // time where steps cannot: one step may search a 16 MiB string
    int64_t now;           // strftime_now's clock, Unix seconds rendered in local time (as Python's
                           // datetime.now()); INT64_MIN = read the real clock at each call
} JinjaLimits;
// The default work budget per byte of allowed output: 256 MiB at the default 16 MiB, about
// 1.5 s of the slowest charged work (per-code-point scans); the 44 real templates of the
// validation suite touch at most 70 KB on its conversations.
#define JINJA_WORK_PER_OUTPUT 16
#define JINJA_LIMITS_DEFAULT ((JinjaLimits){.now = INT64_MIN})

// A byte range of the output (what a {% generation %} block rendered).
typedef struct {
    size_t begin, end;
} JinjaSpan;

typedef struct {
    JinjaSpan *spans;  // owned (free()); n of them, in output order
    int n;
} JinjaSpans;

// Renders with vars (a JSON object: each key a template global; strings, numbers, bools,
// null as None, arrays as lists, objects as dicts in their key order) and appends the
// output to out. jinja2 drops one trailing newline of the template text; so does this.
// raise_exception(msg) fails with err->msg = msg, code PAIL_ERR_INVALID (the builtin sets the error
// itself with JRender.raw_error; the evaluator never prefixes, wraps or replaces an error once set);
// a limit reached
// fails with PAIL_ERR_INVALID naming it; other failures name the template line and what
// went wrong ("NAME:12: 'dict object' has no attribute 'foo'"). On failure out holds
// what it held before the call. gen (may be NULL) receives the spans of {% generation %}
// blocks, offsets into out->data.
int jinja_render(const JinjaTemplate *t, json_t *vars, const JinjaLimits *lim, Buf *out, JinjaSpans *gen,
                 PailErr *err);
