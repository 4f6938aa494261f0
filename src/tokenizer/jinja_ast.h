// Private to the chat-template interpreter's front end and evaluator: the tokens the lexer
// (jinja_lex.c) produces, the syntax tree the parser (jinja_parse.c) builds and the
// evaluator (jinja_eval.c) walks. A parsed tree is immutable: string constants are built
// as JStr with their code-point count already cached, so renders on many threads only read it.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "tokenizer/jinja_internal.h"

// ---- tokens

typedef enum {
    TK_DATA,         // template text (whitespace control and newline normalization applied)
    TK_VAR_BEGIN,    // {{
    TK_VAR_END,      // }}
    TK_BLOCK_BEGIN,  // {%
    TK_BLOCK_END,    // %}
    TK_NAME,
    TK_STRING,       // decoded as Python's unicode-escape does
    TK_INT,
    TK_FLOAT,
    TK_OP,           // op holds the operator text: "**", "//", "==", "(", ...
    TK_EOF,
} TokKind;

typedef struct {
    TokKind kind;
    int line, col;
    const char *p;  // NAME / OP: into the source; DATA / STRING: owned by the token list
    size_t len;
    int64_t i;      // TK_INT
    double f;       // TK_FLOAT
} Tok;

typedef struct {
    Tok *v;
    int n, cap;
    char **owned;  // decoded texts to free
    int nowned, capowned;
} TokList;

// Splits src into tokens; -1 with err ("NAME:LINE:COL: ...") on a lexical error.
int jinja_lex(TokList *out, const char *src, size_t len, const char *name, PailErr *err);
void jinja_toks_free(TokList *t);

// ---- syntax tree

typedef struct Node Node;

typedef struct {
    Node **v;
    int n;
} NodeList;

typedef enum {
    // statements
    N_TEXT,       // str
    N_OUTPUT,     // a
    N_IF,         // a = test, body, orelse
    N_FOR,        // targets (names), a = iterable, b = filter test or NULL, body, orelse
    N_SET,        // targets (names) or ns.attr (name + attr), a = value
    N_SET_BLOCK,  // targets (one name) or ns.attr, body, filters (chain of E_FILTER with a NULL input)
    N_MACRO,      // name, params, defaults (args.v[i] or NULL), body
    N_CALL_BLOCK, // a = the E_CALL, params/defaults of caller, body
    N_FILTER_BLOCK,  // filters, body
    N_BREAK,
    N_CONTINUE,
    N_GENERATION,  // body
    // expressions
    E_CONST,     // cval
    E_NAME,      // name
    E_GETATTR,   // a . name
    E_GETITEM,   // a [ b ]
    E_SLICE,     // a [ args.v[0] : args.v[1] : args.v[2] ] (each may be NULL)
    E_CALL,      // a ( args, kwnames = kwargs )
    E_FILTER,    // a | name ( args ) ; a NULL = the block's body (filter blocks)
    E_TEST,      // a is [not] name ( args ) ; negated
    E_BINOP,     // a op b : op is "+", "-", "*", "/", "//", "%", "**", "~"
    E_AND,
    E_OR,
    E_NOT,       // a
    E_NEG,       // a
    E_POS,       // a
    E_COMPARE,   // a, then ops[i] against args.v[i]: "==" "!=" "<" "<=" ">" ">=" "in" "notin"
    E_COND,      // b if a else c (c may be NULL: undefined)
    E_LIST,      // args
    E_TUPLE,     // args
    E_DICT,      // args (keys), vals
} NodeKind;

struct Node {
    NodeKind kind;
    int line, col;
    const char *name;   // E_NAME, E_GETATTR, E_FILTER, E_TEST, N_MACRO, N_SET's namespace name
    const char *attr;   // N_SET / N_SET_BLOCK on a namespace attribute
    const char *op;     // E_BINOP
    const char **ops;   // E_COMPARE, one per args entry
    Node *a, *b, *c;
    NodeList args;      // call / filter / test arguments, list items, compare operands, dict keys
    NodeList vals;      // E_DICT values
    const char **kwnames;  // E_CALL / E_FILTER / E_TEST keyword arguments
    NodeList kwargs;
    NodeList body, orelse;
    const char **targets;  // N_FOR / N_SET names
    int ntargets;
    bool target_tuple;     // targets came from a, b (unpack) rather than one name
    const char **params;   // N_MACRO / N_CALL_BLOCK
    NodeList defaults;     // same length as params; NULL entries = required
    int nparams;
    bool uses_varargs, uses_kwargs, uses_caller;  // N_MACRO: the body names varargs / kwargs / caller
    NodeList filters;      // N_SET_BLOCK / N_FILTER_BLOCK: E_FILTER nodes applied in order
    bool negated;          // E_TEST
    bool unknown;          // E_FILTER / E_TEST: no such filter or test; fails when evaluated (jinja2 3 defers
                           // these inside if statements and inline ifs; the parser refuses them elsewhere)
    bool elif;             // N_IF: an {% elif %} (the only entry of its parent's orelse)
    bool recursive;        // N_FOR: {% for ... recursive %}: loop(items) renders the body over items
    JValue cval;           // E_CONST (a JV_STR points at a JStr owned by the template)
    const char *str;       // N_TEXT
    size_t len;
};

typedef struct JMem JMem;

struct JinjaTemplate {
    char *name;
    NodeList body;
    JMem *mem;  // every node, string and array of the tree
};

// Walks the tree; defined in jinja_eval.c, called by jinja_render.
int jinja_eval_template(JRender *r, const JinjaTemplate *t, JValue vars, Buf *out, size_t out_start,
                        JinjaSpans *gen);
