// The chat-template parser (jinja_ast.h): tokens into the syntax tree, by jinja2's grammar
// (jinja2/parser.py) so precedence and the places a tuple or a condition is allowed are
// its own: `x is test` and `|filter` bind at the unary level (after unary minus:
// -x|abs is abs(-x)), `{% if %}` and a for's iterable take no inline `if`, {{ a, b }} is a
// tuple. Unknown tags fail here, as jinja2 fails them at compile time; so do unknown filters
// and tests, except where jinja2 3 defers them to run time (check_unknown below).
// Nesting (brackets, expressions, blocks) is bounded so a hostile template cannot overflow
// the stack.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/jinja_ast.h"

#define PARSE_MAX_DEPTH 100

// ---- the template's memory: blocks that live as long as the template

struct JMem {
    JMem *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

static void *mem_alloc(JMem **head, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    JMem *b = *head;
    if (!b || b->size - b->used < n) {
        size_t size = n > (32u << 10) ? n : (32u << 10);
        JMem *nb = malloc(sizeof *nb + size);
        if (!nb) return NULL;
        nb->used = 0;
        nb->size = size;
        nb->next = *head;
        *head = nb;
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

typedef struct {
    const Tok *t;
    int pos, n;
    const char *name;
    PailErr *err;
    JMem **mem;
    int depth;
    int loops;    // enclosing for loops (in the current macro)
    Node *macro;  // innermost macro being parsed (for varargs / kwargs / caller)
    int unknown;  // unknown filters and tests parsed (check_unknown places them)
} Parser;

static const Tok *cur(Parser *P) { return &P->t[P->pos]; }
static const Tok *peek(Parser *P, int k) { return &P->t[P->pos + k < P->n ? P->pos + k : P->n - 1]; }
static void adv(Parser *P) {
    if (P->pos < P->n - 1) P->pos++;
}

static bool is_op(const Tok *t, const char *op) { return t->kind == TK_OP && t->len == strlen(op) && memcmp(t->p, op, t->len) == 0; }
static bool is_name(const Tok *t, const char *w) { return t->kind == TK_NAME && t->len == strlen(w) && memcmp(t->p, w, t->len) == 0; }

static void describe(const Tok *t, char *out, size_t cap) {
    switch (t->kind) {
    case TK_EOF: snprintf(out, cap, "end of template"); break;
    case TK_DATA: snprintf(out, cap, "template text"); break;
    case TK_BLOCK_BEGIN: snprintf(out, cap, "'{%%'"); break;
    case TK_BLOCK_END: snprintf(out, cap, "'%%}'"); break;
    case TK_VAR_BEGIN: snprintf(out, cap, "'{{'"); break;
    case TK_VAR_END: snprintf(out, cap, "'}}'"); break;
    case TK_STRING: snprintf(out, cap, "a string"); break;
    default: snprintf(out, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->p);
    }
}

static int fail_at(Parser *P, const Tok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(Parser *P, const Tok *t, const char *fmt, ...) {
    if (P->err->code != PAIL_OK) return -1;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(P->err, PAIL_ERR_INVALID, "%s:%d:%d: %s", P->name, t->line, t->col, msg);
}

// "expected WHAT, got <current token>"
static int expected(Parser *P, const char *what) {
    char got[80];
    describe(cur(P), got, sizeof got);
    return fail_at(P, cur(P), "expected %s, got %s", what, got);
}

static int expect_op(Parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        return expected(P, w);
    }
    adv(P);
    return 0;
}

static int oom(Parser *P) { return fail_at(P, cur(P), "out of memory"); }

static char *mem_str(Parser *P, const char *p, size_t n) {
    char *s = mem_alloc(P->mem, n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

static Node *node_new(Parser *P, NodeKind k, const Tok *at) {
    Node *nd = mem_alloc(P->mem, sizeof *nd);
    if (!nd) {
        oom(P);
        return NULL;
    }
    nd->kind = k;
    nd->line = at->line;
    nd->col = at->col;
    return nd;
}

// A growable list while parsing, frozen into template memory.
typedef struct {
    Node **v;
    int n, cap;
    const char **names;  // parallel names (keyword arguments, params) when used
} Grow;

static int grow_push(Parser *P, Grow *g, Node *nd, const char *name) {
    if (g->n == g->cap) {
        int nc = g->cap ? g->cap * 2 : 8;
        Node **nv = realloc(g->v, (size_t)nc * sizeof *nv);
        if (!nv) return oom(P);
        g->v = nv;
        const char **nn = realloc(g->names, (size_t)nc * sizeof *nn);
        if (!nn) return oom(P);
        g->names = nn;
        g->cap = nc;
    }
    g->v[g->n] = nd;
    g->names[g->n++] = name;
    return 0;
}

static int grow_freeze(Parser *P, Grow *g, NodeList *out, const char ***names) {
    out->n = g->n;
    out->v = NULL;
    if (g->n) {
        out->v = mem_alloc(P->mem, (size_t)g->n * sizeof *out->v);
        if (!out->v) goto fail;
        memcpy(out->v, g->v, (size_t)g->n * sizeof *out->v);
        if (names) {
            *names = mem_alloc(P->mem, (size_t)g->n * sizeof **names);
            if (!*names) goto fail;
            memcpy(*names, g->names, (size_t)g->n * sizeof **names);
        }
    }
    free(g->v);
    free(g->names);
    memset(g, 0, sizeof *g);
    return 0;
fail:
    free(g->v);
    free(g->names);
    memset(g, 0, sizeof *g);
    return oom(P);
}

static void grow_drop(Grow *g) {
    free(g->v);
    free(g->names);
    memset(g, 0, sizeof *g);
}

static int enter(Parser *P) {
    if (++P->depth > PARSE_MAX_DEPTH) return fail_at(P, cur(P), "template nested deeper than %d levels", PARSE_MAX_DEPTH);
    return 0;
}

// ---- expressions

static Node *parse_expr(Parser *P, bool with_cond);
static Node *parse_tuple(Parser *P, bool simplified, bool with_cond, const char *extra_end, bool explicit_parens);
static Node *parse_postfix(Parser *P, Node *nd);
static Node *parse_filter_expr(Parser *P, Node *nd);
static Node *parse_primary(Parser *P);

static const char *tok_name(Parser *P, const Tok *t) {
    const char *s = mem_str(P, t->p, t->len);
    if (!s) oom(P);
    return s;
}

// ( args, name=value ) into nd->args / kwnames / kwargs.
static int parse_call_args(Parser *P, Node *nd) {
    const Tok *open = cur(P);
    if (expect_op(P, "(") < 0) return -1;
    Grow pos = {0}, kw = {0};
    bool comma = false;
    while (!is_op(cur(P), ")")) {
        if (comma) {
            if (expect_op(P, ",") < 0) goto fail;
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            fail_at(P, cur(P), "*args / **kwargs in a call are not supported");
            goto fail;
        }
        if (cur(P)->kind == TK_NAME && is_op(peek(P, 1), "=")) {
            const char *k = tok_name(P, cur(P));
            if (!k) goto fail;
            adv(P);
            adv(P);
            Node *v = parse_expr(P, true);
            if (!v || grow_push(P, &kw, v, k) < 0) goto fail;
        } else {
            if (kw.n) {
                fail_at(P, open, "invalid syntax for function call expression (positional argument after keyword argument)");
                goto fail;
            }
            Node *v = parse_expr(P, true);
            if (!v || grow_push(P, &pos, v, NULL) < 0) goto fail;
        }
        comma = true;
    }
    adv(P);
    if (grow_freeze(P, &pos, &nd->args, NULL) < 0) goto fail;
    return grow_freeze(P, &kw, &nd->kwargs, &nd->kwnames);
fail:
    grow_drop(&pos);
    grow_drop(&kw);
    return -1;
}

// name(.name)* after '|' or 'is'
static const char *parse_dotted(Parser *P) {
    if (cur(P)->kind != TK_NAME) {
        expected(P, "a name");
        return NULL;
    }
    char buf[256];
    size_t n = 0;
    for (bool first = true;; first = false) {
        const Tok *a = cur(P);
        if (n + a->len + 2 > sizeof buf) {
            fail_at(P, a, "name too long");
            return NULL;
        }
        if (!first) buf[n++] = '.';
        memcpy(buf + n, a->p, a->len);
        n += a->len;
        adv(P);
        if (!(is_op(cur(P), ".") && peek(P, 1)->kind == TK_NAME)) break;
        adv(P);
    }
    const char *s = mem_str(P, buf, n);
    if (!s) oom(P);
    return s;
}

static Node *parse_filter(Parser *P, Node *input, bool start_inline) {
    while (is_op(cur(P), "|") || start_inline) {
        if (!start_inline) adv(P);
        start_inline = false;
        const Tok *at = cur(P);
        const char *name = parse_dotted(P);
        if (!name) return NULL;
        Node *f = node_new(P, E_FILTER, at);
        if (!f) return NULL;
        f->name = name;
        f->unknown = !jinja_filter_known(name);
        P->unknown += f->unknown;
        f->a = input;
        if (is_op(cur(P), "(") && parse_call_args(P, f) < 0) return NULL;
        input = f;
    }
    return input;
}

static Node *parse_test(Parser *P, Node *input) {
    const Tok *is = cur(P);
    adv(P);
    bool negated = false;
    if (is_name(cur(P), "not")) negated = true, adv(P);
    const Tok *at = cur(P);
    const char *name = parse_dotted(P);
    if (!name) return NULL;
    Node *t = node_new(P, E_TEST, is);
    if (!t) return NULL;
    t->name = name;
    t->unknown = !jinja_test_known(name);
    t->line = at->line, t->col = at->col;  // where the test's name is, for the message
    P->unknown += t->unknown;
    t->a = input;
    t->negated = negated;
    const Tok *c = cur(P);
    if (is_op(c, "(")) {
        if (parse_call_args(P, t) < 0) return NULL;
    } else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT || c->kind == TK_FLOAT || is_op(c, "[") ||
                is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            fail_at(P, c, "you cannot chain multiple tests with is");
            return NULL;
        }
        Node *arg = parse_primary(P);
        if (!arg || !(arg = parse_postfix(P, arg))) return NULL;
        t->args.v = mem_alloc(P->mem, sizeof *t->args.v);
        if (!t->args.v) {
            oom(P);
            return NULL;
        }
        t->args.v[0] = arg;
        t->args.n = 1;
    }
    return t;
}

static Node *parse_filter_expr(Parser *P, Node *nd) {
    while (nd) {
        if (is_op(cur(P), "|")) nd = parse_filter(P, nd, false);
        else if (is_name(cur(P), "is")) nd = parse_test(P, nd);
        else if (is_op(cur(P), "(")) {
            Node *c = node_new(P, E_CALL, cur(P));
            if (!c) return NULL;
            c->a = nd;
            if (parse_call_args(P, c) < 0) return NULL;
            nd = c;
        } else break;
    }
    return nd;
}

static Node *parse_subscribed(Parser *P) {
    Node *parts[3] = {0};
    const Tok *at = cur(P);
    if (is_op(cur(P), ":")) {
        adv(P);
    } else {
        Node *e = parse_expr(P, true);
        if (!e) return NULL;
        if (!is_op(cur(P), ":")) return e;
        adv(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ",")) {
        if (!(parts[1] = parse_expr(P, true))) return NULL;
    }
    if (is_op(cur(P), ":")) {
        adv(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ",") && !(parts[2] = parse_expr(P, true))) return NULL;
    }
    Node *s = node_new(P, E_SLICE, at);
    if (!s || !(s->args.v = mem_alloc(P->mem, 3 * sizeof *s->args.v))) return oom(P), NULL;
    memcpy(s->args.v, parts, sizeof parts);
    s->args.n = 3;
    return s;
}

static Node *parse_postfix(Parser *P, Node *nd) {
    while (nd) {
        const Tok *at = cur(P);
        if (is_op(at, ".")) {
            adv(P);
            const Tok *a = cur(P);
            if (a->kind == TK_NAME) {
                Node *g = node_new(P, E_GETATTR, at);
                if (!g || !(g->name = tok_name(P, a))) return NULL;
                g->a = nd;
                adv(P);
                nd = g;
            } else if (a->kind == TK_INT) {
                Node *g = node_new(P, E_GETITEM, at), *k = node_new(P, E_CONST, a);
                if (!g || !k) return NULL;
                k->cval = jv_int(a->i);
                g->a = nd;
                g->b = k;
                adv(P);
                nd = g;
            } else {
                expected(P, "a name or number after '.'");
                return NULL;
            }
        } else if (is_op(at, "[")) {
            adv(P);
            Grow g = {0};
            while (!is_op(cur(P), "]")) {
                if (g.n && expect_op(P, ",") < 0) return grow_drop(&g), NULL;
                if (is_op(cur(P), "]")) break;
                Node *s = parse_subscribed(P);
                if (!s || grow_push(P, &g, s, NULL) < 0) return grow_drop(&g), NULL;
            }
            adv(P);
            if (g.n == 0) {
                grow_drop(&g);
                fail_at(P, at, "expected a subscript inside '[]'");
                return NULL;
            }
            Node *key;
            if (g.n == 1) {
                key = g.v[0];
                grow_drop(&g);
            } else {
                for (int i = 0; i < g.n; i++)
                    if (g.v[i]->kind == E_SLICE) {
                        grow_drop(&g);
                        fail_at(P, at, "a slice inside a tuple subscript is not supported");
                        return NULL;
                    }
                key = node_new(P, E_TUPLE, at);
                if (!key || grow_freeze(P, &g, &key->args, NULL) < 0) return grow_drop(&g), NULL;
            }
            Node *it;
            if (key->kind == E_SLICE) {
                it = key;
            } else {
                it = node_new(P, E_GETITEM, at);
                if (!it) return NULL;
                it->b = key;
            }
            it->a = nd;
            nd = it;
        } else if (is_op(at, "(")) {
            Node *c = node_new(P, E_CALL, at);
            if (!c) return NULL;
            c->a = nd;
            if (parse_call_args(P, c) < 0) return NULL;
            nd = c;
        } else {
            break;
        }
    }
    return nd;
}

static JValue const_str(Parser *P, const char *p, size_t n, bool *ok) {
    JStr *s = mem_alloc(P->mem, sizeof *s + n + 1);
    if (!s) {
        *ok = false;
        oom(P);
        return jv_none();
    }
    s->len = n;
    memcpy(s->p, p, n);
    s->p[n] = 0;
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) nc += ((unsigned char)p[i] & 0xC0) != 0x80;
    s->nchars = nc;  // cached now: the tree is shared between threads and never written
    *ok = true;
    return (JValue){.kind = JV_STR, .u.s = s};
}

static Node *parse_seq(Parser *P, NodeKind kind, const char *close, bool dict) {
    Node *nd = node_new(P, kind, cur(P));
    if (!nd) return NULL;
    adv(P);
    Grow keys = {0}, vals = {0};
    while (!is_op(cur(P), close)) {
        if (keys.n && expect_op(P, ",") < 0) goto fail;
        if (is_op(cur(P), close)) break;
        Node *k = parse_expr(P, true);
        if (!k || grow_push(P, &keys, k, NULL) < 0) goto fail;
        if (dict) {
            if (expect_op(P, ":") < 0) goto fail;
            Node *v = parse_expr(P, true);
            if (!v || grow_push(P, &vals, v, NULL) < 0) goto fail;
        }
    }
    adv(P);
    if (grow_freeze(P, &keys, &nd->args, NULL) < 0 || grow_freeze(P, &vals, &nd->vals, NULL) < 0) goto fail;
    return nd;
fail:
    grow_drop(&keys);
    grow_drop(&vals);
    return NULL;
}

static void note_name(Parser *P, const char *name) {
    if (!P->macro) return;
    if (!strcmp(name, "varargs")) P->macro->uses_varargs = true;
    else if (!strcmp(name, "kwargs")) P->macro->uses_kwargs = true;
    else if (!strcmp(name, "caller")) P->macro->uses_caller = true;
}

static Node *parse_primary(Parser *P) {
    if (enter(P) < 0) return NULL;
    const Tok *t = cur(P);
    Node *nd = NULL;
    if (t->kind == TK_NAME) {
        nd = node_new(P, E_CONST, t);
        if (!nd) goto out;
        if (is_name(t, "true") || is_name(t, "True")) nd->cval = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) nd->cval = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) nd->cval = jv_none();
        else {
            nd->kind = E_NAME;
            if (!(nd->name = tok_name(P, t))) {
                nd = NULL;
                goto out;
            }
            note_name(P, nd->name);
        }
        adv(P);
    } else if (t->kind == TK_STRING) {
        // adjacent literals concatenate
        size_t n = 0;
        int k = P->pos;
        for (; P->t[k].kind == TK_STRING; k++) n += P->t[k].len;
        char *buf = malloc(n + 1);
        if (!buf) {
            oom(P);
            goto out;
        }
        size_t o = 0;
        for (; cur(P)->kind == TK_STRING; adv(P)) {
            memcpy(buf + o, cur(P)->p, cur(P)->len);
            o += cur(P)->len;
        }
        bool ok;
        nd = node_new(P, E_CONST, t);
        if (nd) nd->cval = const_str(P, buf, n, &ok);
        free(buf);
        if (nd && !ok) nd = NULL;
    } else if (t->kind == TK_INT || t->kind == TK_FLOAT) {
        nd = node_new(P, E_CONST, t);
        if (nd) nd->cval = t->kind == TK_INT ? jv_int(t->i) : jv_float(t->f);
        adv(P);
    } else if (is_op(t, "(")) {
        adv(P);
        nd = parse_tuple(P, false, true, NULL, true);
        if (nd && expect_op(P, ")") < 0) nd = NULL;
    } else if (is_op(t, "[")) {
        nd = parse_seq(P, E_LIST, "]", false);
    } else if (is_op(t, "{")) {
        nd = parse_seq(P, E_DICT, "}", true);
    } else {
        expected(P, "an expression");
    }
out:
    P->depth--;
    return nd;
}

static Node *parse_unary(Parser *P, bool with_filter) {
    if (enter(P) < 0) return NULL;
    const Tok *t = cur(P);
    Node *nd;
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(P);
        nd = node_new(P, is_op(t, "-") ? E_NEG : E_POS, t);
        if (nd && !(nd->a = parse_unary(P, false))) nd = NULL;
    } else {
        nd = parse_primary(P);
    }
    nd = parse_postfix(P, nd);
    if (with_filter) nd = parse_filter_expr(P, nd);
    P->depth--;
    return nd;
}

static Node *binop(Parser *P, const Tok *at, const char *op, Node *a, Node *b) {
    if (!a || !b) return NULL;
    Node *nd = node_new(P, E_BINOP, at);
    if (!nd) return NULL;
    nd->op = op;
    nd->a = a;
    nd->b = b;
    return nd;
}

static Node *parse_pow(Parser *P) {
    Node *l = parse_unary(P, true);
    while (l && is_op(cur(P), "**")) {
        const Tok *at = cur(P);
        adv(P);
        l = binop(P, at, "**", l, parse_unary(P, true));
    }
    return l;
}

static Node *parse_math2(Parser *P) {
    Node *l = parse_pow(P);
    for (;;) {
        const Tok *at = cur(P);
        const char *op = is_op(at, "*") ? "*" : is_op(at, "/") ? "/" : is_op(at, "//") ? "//" : is_op(at, "%") ? "%" : NULL;
        if (!l || !op) return l;
        adv(P);
        l = binop(P, at, op, l, parse_pow(P));
    }
}

static Node *parse_concat(Parser *P) {
    Node *l = parse_math2(P);
    while (l && is_op(cur(P), "~")) {
        const Tok *at = cur(P);
        adv(P);
        l = binop(P, at, "~", l, parse_math2(P));
    }
    return l;
}

static Node *parse_math1(Parser *P) {
    Node *l = parse_concat(P);
    for (;;) {
        const Tok *at = cur(P);
        const char *op = is_op(at, "+") ? "+" : is_op(at, "-") ? "-" : NULL;
        if (!l || !op) return l;
        adv(P);
        l = binop(P, at, op, l, parse_concat(P));
    }
}

static Node *parse_compare(Parser *P) {
    const Tok *at = cur(P);
    Node *first = parse_math1(P);
    if (!first) return NULL;
    Grow g = {0};
    static const char *const CMP[] = {"==", "!=", "<", "<=", ">", ">="};
    for (;;) {
        const char *op = NULL;
        for (int k = 0; k < 6; k++)
            if (is_op(cur(P), CMP[k])) op = CMP[k];
        if (op) adv(P);
        else if (is_name(cur(P), "in")) op = "in", adv(P);
        else if (is_name(cur(P), "not") && is_name(peek(P, 1), "in")) op = "notin", adv(P), adv(P);
        else break;
        Node *r = parse_math1(P);
        if (!r || grow_push(P, &g, r, op) < 0) return grow_drop(&g), NULL;
    }
    if (!g.n) return first;
    Node *nd = node_new(P, E_COMPARE, at);
    if (!nd) return grow_drop(&g), NULL;
    nd->a = first;
    if (grow_freeze(P, &g, &nd->args, &nd->ops) < 0) return NULL;
    return nd;
}

static Node *parse_not(Parser *P) {
    if (is_name(cur(P), "not")) {
        if (enter(P) < 0) return NULL;
        Node *nd = node_new(P, E_NOT, cur(P));
        adv(P);
        if (nd && !(nd->a = parse_not(P))) nd = NULL;
        P->depth--;
        return nd;
    }
    return parse_compare(P);
}

static Node *parse_and(Parser *P) {
    Node *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        Node *nd = node_new(P, E_AND, cur(P));
        adv(P);
        if (!nd || !(nd->b = parse_not(P))) return NULL;
        nd->a = l;
        l = nd;
    }
    return l;
}

static Node *parse_or(Parser *P) {
    Node *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        Node *nd = node_new(P, E_OR, cur(P));
        adv(P);
        if (!nd || !(nd->b = parse_and(P))) return NULL;
        nd->a = l;
        l = nd;
    }
    return l;
}

static Node *parse_expr(Parser *P, bool with_cond) {
    if (enter(P) < 0) return NULL;
    Node *l = parse_or(P);
    while (with_cond && l && is_name(cur(P), "if")) {
        Node *nd = node_new(P, E_COND, cur(P));
        adv(P);
        if (!nd || !(nd->a = parse_or(P))) {
            l = NULL;
            break;
        }
        nd->b = l;
        if (is_name(cur(P), "else")) {
            adv(P);
            if (!(nd->c = parse_expr(P, true))) {
                l = NULL;
                break;
            }
        }
        l = nd;
    }
    P->depth--;
    return l;
}

static bool tuple_end(Parser *P, const char *extra_end) {
    const Tok *t = cur(P);
    return t->kind == TK_VAR_END || t->kind == TK_BLOCK_END || is_op(t, ")") || (extra_end && is_name(t, extra_end));
}

static Node *parse_tuple(Parser *P, bool simplified, bool with_cond, const char *extra_end, bool explicit_parens) {
    const Tok *at = cur(P);
    Grow g = {0};
    bool is_tuple = false;
    for (;;) {
        if (g.n && expect_op(P, ",") < 0) return grow_drop(&g), NULL;
        if (tuple_end(P, extra_end)) break;
        Node *e = simplified ? parse_primary(P) : parse_expr(P, with_cond);
        if (!e || grow_push(P, &g, e, NULL) < 0) return grow_drop(&g), NULL;
        if (is_op(cur(P), ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (g.n) {
            Node *e = g.v[0];
            grow_drop(&g);
            return e;
        }
        if (!explicit_parens) {
            expected(P, "an expression");
            return NULL;
        }
    }
    Node *nd = node_new(P, E_TUPLE, at);
    if (!nd || grow_freeze(P, &g, &nd->args, NULL) < 0) return grow_drop(&g), NULL;
    return nd;
}

// ---- statements

static int subparse(Parser *P, NodeList *out, const char *const *ends, int nends);

static bool at_end_tag(Parser *P, const char *const *ends, int nends) {
    for (int i = 0; i < nends; i++)
        if (is_name(cur(P), ends[i])) return true;
    return false;
}

static void ends_text(const char *const *ends, int nends, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < nends && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s'%s'", i == 0 ? "" : i == nends - 1 ? " or " : ", ", ends[i]);
}

// %} then a body up to one of ends (left current); drop_needle consumes the end tag's name.
static int parse_body(Parser *P, NodeList *out, const char *const *ends, int nends, bool drop_needle) {
    if (cur(P)->kind != TK_BLOCK_END) return expected(P, "'%}'");
    adv(P);
    if (subparse(P, out, ends, nends) < 0) return -1;
    if (drop_needle) adv(P);
    return 0;
}

// Assignment target: a name, or names separated by commas (with_tuple), or ns.attr.
static int parse_target(Parser *P, Node *nd, bool with_ns, const char *extra_end) {
    if (with_ns && cur(P)->kind == TK_NAME && is_op(peek(P, 1), ".")) {
        if (!(nd->name = tok_name(P, cur(P)))) return -1;
        adv(P);
        adv(P);
        if (cur(P)->kind != TK_NAME) return expected(P, "an attribute name");
        if (!(nd->attr = tok_name(P, cur(P)))) return -1;
        adv(P);
        return 0;
    }
    const char *names[64];
    int n = 0;
    bool paren = false;
    if (is_op(cur(P), "(")) paren = true, adv(P);
    for (;;) {
        if (cur(P)->kind != TK_NAME || is_name(cur(P), "true") || is_name(cur(P), "false") || is_name(cur(P), "none") ||
            is_name(cur(P), "True") || is_name(cur(P), "False") || is_name(cur(P), "None"))
            return expected(P, "a name to assign to");
        if (n == 64) return fail_at(P, cur(P), "more than 64 names to unpack");
        if (!(names[n++] = tok_name(P, cur(P)))) return -1;
        adv(P);
        if (!is_op(cur(P), ",")) break;
        nd->target_tuple = true;
        adv(P);
        if (paren ? is_op(cur(P), ")") : (tuple_end(P, extra_end) || is_op(cur(P), "="))) break;
    }
    if (paren && expect_op(P, ")") < 0) return -1;
    if (paren && n > 0) nd->target_tuple = nd->target_tuple || n > 1;
    nd->targets = mem_alloc(P->mem, (size_t)n * sizeof *nd->targets);
    if (!nd->targets) return oom(P);
    memcpy(nd->targets, names, (size_t)n * sizeof *names);
    nd->ntargets = n;
    return 0;
}

// ( name, name=default, ... )
static int parse_signature(Parser *P, Node *nd) {
    if (expect_op(P, "(") < 0) return -1;
    Grow g = {0};
    bool had_default = false;
    while (!is_op(cur(P), ")")) {
        if (g.n && expect_op(P, ",") < 0) goto fail;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->kind != TK_NAME) {
            expected(P, "a parameter name");
            goto fail;
        }
        const char *name = tok_name(P, cur(P));
        if (!name) goto fail;
        adv(P);
        Node *def = NULL;
        if (is_op(cur(P), "=")) {
            adv(P);
            if (!(def = parse_expr(P, true))) goto fail;
            had_default = true;
        } else if (had_default) {
            fail_at(P, cur(P), "non-default argument follows default argument");
            goto fail;
        }
        if (grow_push(P, &g, def, name) < 0) goto fail;
    }
    adv(P);
    nd->nparams = g.n;
    return grow_freeze(P, &g, &nd->defaults, &nd->params);
fail:
    grow_drop(&g);
    return -1;
}

static Node *parse_for(Parser *P, const Tok *at) {
    Node *nd = node_new(P, N_FOR, at);
    const Tok *target = cur(P);
    if (!nd || parse_target(P, nd, false, "in") < 0) return NULL;
    for (int i = 0; i < nd->ntargets; i++)
        if (!strcmp(nd->targets[i], "loop"))
            return fail_at(P, target, "Can't assign to special loop variable in for-loop target"), NULL;
    if (!is_name(cur(P), "in")) return expected(P, "'in'"), NULL;
    adv(P);
    if (!(nd->a = parse_tuple(P, false, false, "recursive", false))) return NULL;
    if (is_name(cur(P), "if")) {
        adv(P);
        if (!(nd->b = parse_expr(P, true))) return NULL;
    }
    if (is_name(cur(P), "recursive")) nd->recursive = true, adv(P);
    static const char *const E1[] = {"endfor", "else"}, *const E2[] = {"endfor"};
    P->loops++;
    int rc = parse_body(P, &nd->body, E1, 2, false);
    P->loops--;
    if (rc < 0) return NULL;
    bool has_else = is_name(cur(P), "else");
    adv(P);
    if (has_else && parse_body(P, &nd->orelse, E2, 1, true) < 0) return NULL;
    return nd;
}

static Node *parse_if(Parser *P, const Tok *at) {
    static const char *const E1[] = {"elif", "else", "endif"}, *const E2[] = {"endif"};
    Node *root = node_new(P, N_IF, at), *nd = root;
    while (nd) {
        if (!(nd->a = parse_tuple(P, false, false, NULL, false))) return NULL;
        if (parse_body(P, &nd->body, E1, 3, false) < 0) return NULL;
        const Tok *t = cur(P);
        adv(P);
        if (is_name(t, "elif")) {  // a chain, not nesting: the evaluator walks it iteratively
            Node *sub = node_new(P, N_IF, t);
            if (!sub || !(nd->orelse.v = mem_alloc(P->mem, sizeof *nd->orelse.v))) return oom(P), NULL;
            sub->elif = true;
            nd->orelse.v[0] = sub;
            nd->orelse.n = 1;
            nd = sub;
            continue;
        }
        if (is_name(t, "else") && parse_body(P, &nd->orelse, E2, 1, true) < 0) return NULL;
        break;
    }
    return root;
}

static Node *parse_set(Parser *P, const Tok *at) {
    Node *nd = node_new(P, N_SET, at);
    if (!nd || parse_target(P, nd, true, NULL) < 0) return NULL;
    if (is_op(cur(P), "=")) {
        adv(P);
        if (!(nd->a = parse_tuple(P, false, true, NULL, false))) return NULL;
        return nd;
    }
    nd->kind = N_SET_BLOCK;
    if (nd->target_tuple) return fail_at(P, at, "a block set assigns one name"), NULL;
    Grow g = {0};
    if (is_op(cur(P), "|")) {
        Node *f = parse_filter(P, NULL, false);
        if (!f) return NULL;
        for (Node *x = f; x; x = x->a)  // innermost first
            if (grow_push(P, &g, x, NULL) < 0) return grow_drop(&g), NULL;
        for (int i = 0; i < g.n / 2; i++) {
            Node *tmp = g.v[i];
            g.v[i] = g.v[g.n - 1 - i];
            g.v[g.n - 1 - i] = tmp;
        }
        if (grow_freeze(P, &g, &nd->filters, NULL) < 0) return NULL;
    }
    static const char *const E[] = {"endset"};
    if (parse_body(P, &nd->body, E, 1, true) < 0) return NULL;
    return nd;
}

static Node *parse_macro_like(Parser *P, Node *nd, const char *end) {
    Node *saved_macro = P->macro;
    int saved_loops = P->loops;
    P->macro = nd;
    P->loops = 0;
    const char *const E[] = {end};
    int rc = parse_body(P, &nd->body, E, 1, true);
    P->macro = saved_macro;
    P->loops = saved_loops;
    return rc < 0 ? NULL : nd;
}

static Node *parse_statement(Parser *P) {
    const Tok *t = cur(P);
    if (t->kind != TK_NAME) return expected(P, "a tag name"), NULL;
    adv(P);
    if (is_name(t, "for")) return parse_for(P, t);
    if (is_name(t, "if")) return parse_if(P, t);
    if (is_name(t, "set")) return parse_set(P, t);
    if (is_name(t, "macro")) {
        Node *nd = node_new(P, N_MACRO, t);
        if (!nd) return NULL;
        if (cur(P)->kind != TK_NAME) return expected(P, "a macro name"), NULL;
        if (!(nd->name = tok_name(P, cur(P)))) return NULL;
        adv(P);
        if (parse_signature(P, nd) < 0) return NULL;
        return parse_macro_like(P, nd, "endmacro");
    }
    if (is_name(t, "call")) {
        Node *nd = node_new(P, N_CALL_BLOCK, t);
        if (!nd) return NULL;
        if (is_op(cur(P), "(") && parse_signature(P, nd) < 0) return NULL;
        if (!(nd->a = parse_expr(P, true))) return NULL;
        if (nd->a->kind != E_CALL) return fail_at(P, t, "expected a call after 'call'"), NULL;
        return parse_macro_like(P, nd, "endcall");
    }
    if (is_name(t, "filter")) {
        Node *nd = node_new(P, N_FILTER_BLOCK, t);
        Node *f = nd ? parse_filter(P, NULL, true) : NULL;
        if (!f) return NULL;
        Grow g = {0};
        for (Node *x = f; x; x = x->a)
            if (grow_push(P, &g, x, NULL) < 0) return grow_drop(&g), NULL;
        for (int i = 0; i < g.n / 2; i++) {
            Node *tmp = g.v[i];
            g.v[i] = g.v[g.n - 1 - i];
            g.v[g.n - 1 - i] = tmp;
        }
        if (grow_freeze(P, &g, &nd->filters, NULL) < 0) return NULL;
        static const char *const E[] = {"endfilter"};
        if (parse_body(P, &nd->body, E, 1, true) < 0) return NULL;
        return nd;
    }
    if (is_name(t, "generation")) {
        Node *nd = node_new(P, N_GENERATION, t);
        if (!nd) return NULL;
        return parse_macro_like(P, nd, "endgeneration");
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loops) return fail_at(P, t, "'%.*s' outside of a loop", (int)t->len, t->p), NULL;
        return node_new(P, is_name(t, "break") ? N_BREAK : N_CONTINUE, t);
    }
    return fail_at(P, t, "unknown tag '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->p), NULL;
}

static int subparse(Parser *P, NodeList *out, const char *const *ends, int nends) {
    if (enter(P) < 0) return -1;
    Grow g = {0};
    for (;;) {
        const Tok *t = cur(P);
        Node *nd = NULL;
        if (t->kind == TK_EOF) {
            if (nends) {
                char e[200];
                ends_text(ends, nends, e, sizeof e);
                expected(P, e);
                goto fail;
            }
            break;
        } else if (t->kind == TK_DATA) {
            nd = node_new(P, N_TEXT, t);
            if (!nd) goto fail;
            nd->str = mem_str(P, t->p, t->len);
            nd->len = t->len;
            if (!nd->str) {
                oom(P);
                goto fail;
            }
            adv(P);
        } else if (t->kind == TK_VAR_BEGIN) {
            adv(P);
            nd = node_new(P, N_OUTPUT, t);
            if (!nd || !(nd->a = parse_tuple(P, false, true, NULL, false))) goto fail;
            if (cur(P)->kind != TK_VAR_END) {
                expected(P, "'}}'");
                goto fail;
            }
            adv(P);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            adv(P);
            if (at_end_tag(P, ends, nends)) break;
            if (!(nd = parse_statement(P))) {
                if (P->err->code == PAIL_OK || strstr(P->err->msg, "unknown tag")) {
                    // an end tag of some other block, or an unknown one: say what was expected
                    const Tok *bad = &P->t[P->pos - 1];
                    if (nends && bad->kind == TK_NAME && bad->len > 3 && !memcmp(bad->p, "end", 3)) {
                        char e[200];
                        ends_text(ends, nends, e, sizeof e);
                        err_clear(P->err);
                        P->pos--;
                        expected(P, e);
                    }
                }
                goto fail;
            }
            if (cur(P)->kind != TK_BLOCK_END) {
                expected(P, "'%}'");
                goto fail;
            }
            adv(P);
        } else {
            expected(P, "template text or a tag");
            goto fail;
        }
        if (grow_push(P, &g, nd, NULL) < 0) goto fail;
    }
    P->depth--;
    return grow_freeze(P, &g, out, NULL);
fail:
    P->depth--;
    grow_drop(&g);
    if (P->err->code == PAIL_OK) oom(P);
    return -1;
}

// ---- unknown filters and tests

// jinja2 3 compiles a filter or test it does not know into a call that raises "No filter named
// 'x' found." when it runs, but only in a "soft" frame: the test, the bodies and the elif/else
// branches of an {% if %}, and all three parts of an inline if-expression (compiler.py: visit_If
// and visit_CondExpr use frame.soft(); _filter_test_common refuses unknown names elsewhere at
// compile time). Softness passes into what shares the frame ({{ }}, {% set x = %}, a for's
// iterable, a call block's call) and not into a new inner frame: a for loop's body, filter and
// else, a macro's or call block's body and defaults, a set block or filter block (their body
// and filters). The parse is complete first, so an inline if can soften what precedes it.
#define CHECK_MAX_DEPTH 2000

static int check_unknown(Parser *P, const Node *nd, bool soft, int depth);

static int check_list(Parser *P, const NodeList *l, bool soft, int depth) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i] && check_unknown(P, l->v[i], soft, depth) < 0) return -1;
    return 0;
}

static int check_unknown(Parser *P, const Node *nd, bool soft, int depth) {
    if (depth > CHECK_MAX_DEPTH) {
        Tok at = {.line = nd->line, .col = nd->col};
        return fail_at(P, &at, "template nested deeper than %d levels", CHECK_MAX_DEPTH);
    }
    depth++;
    switch (nd->kind) {
    case N_IF:
        soft = true;
        break;
    case N_FOR:  // only the iterable is visited in the enclosing frame
        if (check_unknown(P, nd->a, soft, depth) < 0) return -1;
        if (nd->b && check_unknown(P, nd->b, false, depth) < 0) return -1;
        return check_list(P, &nd->body, false, depth) < 0 ? -1 : check_list(P, &nd->orelse, false, depth);
    case N_MACRO:
    case N_GENERATION:
        soft = false;
        break;
    case N_SET_BLOCK:
    case N_FILTER_BLOCK:  // filters.v[n - 1] is the outermost filter: its chain (->a) holds the others
        if (nd->filters.n && check_unknown(P, nd->filters.v[nd->filters.n - 1], false, depth) < 0) return -1;
        return check_list(P, &nd->body, false, depth);
    case N_CALL_BLOCK:
        if (check_unknown(P, nd->a, soft, depth) < 0) return -1;
        return check_list(P, &nd->defaults, false, depth) < 0 ? -1 : check_list(P, &nd->body, false, depth);
    case E_COND:
        soft = true;
        break;
    case E_FILTER:
    case E_TEST:
        if (nd->unknown && !soft) {
            Tok at = {.line = nd->line, .col = nd->col};
            return fail_at(P, &at, "no %s named '%s'", nd->kind == E_FILTER ? "filter" : "test", nd->name);
        }
        break;
    default: break;
    }
    const Node *kids[3] = {nd->a, nd->b, nd->c};
    for (int i = 0; i < 3; i++)
        if (kids[i] && check_unknown(P, kids[i], soft, depth) < 0) return -1;
    const NodeList *lists[] = {&nd->args, &nd->vals, &nd->kwargs, &nd->body, &nd->orelse, &nd->defaults, &nd->filters};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
        if (check_list(P, lists[i], soft, depth) < 0) return -1;
    return 0;
}

static void mem_free(JMem *m) {
    while (m) {
        JMem *next = m->next;
        free(m);
        m = next;
    }
}

int jinja_parse(JinjaTemplate **out, const char *src, size_t len, const char *name, PailErr *err) {
    *out = NULL;
    if (!name) name = "template";
    for (size_t i = 0; i < len; i++)
        if (!src[i]) return err_set(err, PAIL_ERR_INVALID, "%s: template text holds a NUL byte at offset %zu", name, i);
    JinjaTemplate *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name))) {
        free(t);
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    }
    TokList toks;
    PailErr local = {0};
    PailErr *e = err ? err : &local;
    if (jinja_lex(&toks, src, len, name, e) < 0) {
        jinja_toks_free(&toks);
        jinja_free(t);
        return -1;
    }
    e->code = PAIL_OK;
    Parser P = {.t = toks.v, .n = toks.n, .name = name, .err = e, .mem = &t->mem};
    int rc = subparse(&P, &t->body, NULL, 0);
    if (rc == 0 && P.unknown) rc = check_list(&P, &t->body, false, 0);
    jinja_toks_free(&toks);
    if (rc < 0) {
        jinja_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void jinja_free(JinjaTemplate *t) {
    if (!t) return;
    mem_free(t->mem);
    free(t->name);
    free(t);
}
