// The chat-template evaluator (jinja_ast.h): walks a parsed template against the render's
// values with jinja2's semantics. Scopes are jinja2's: a for loop's body starts afresh from
// the enclosing scope at every iteration (a set inside it never leaks out: templates use
// namespace() for that), if blocks share the enclosing scope, a macro's or caller's body has
// its own scope whose parent is the one it was defined in (so it sees the template's names),
// loop variables vanish after the loop. Arithmetic is Python's on 64-bit ints (overflow is an
// error, never a wrap). Everything a render creates lives in its arena; the tree is only read.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/jinja_ast.h"

typedef struct Scope Scope;
struct Scope {
    Scope *parent;
    int n, cap;
    const char **names;
    JValue *vals;
};

// Where output goes: the caller's Buf (top level) or a capture (macro, set block, filter block).
typedef struct {
    JBuf *cap;  // NULL = the top-level Buf
} Out;

typedef struct {
    JRender *r;
    Buf *top;
    size_t top_start;
    JinjaSpans *gen;
    int gen_cap;
    JDict *vars, *globals;
} Eval;

typedef struct {
    const Node *def;  // N_MACRO or N_CALL_BLOCK (the caller)
    Scope *closure;
    JValue caller;  // passed on to the body as `caller` (JV_UNDEFINED when none)
} Macro;

enum { FLOW_OK = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

// m.name and m.arguments (a tuple of the parameter names) of a macro; any other attribute undefined.
static int macro_attr(JRender *r, const JFunc *f, const char *name, JValue *out) {
    const Macro *m = f->impl;
    *out = jv_undefined(name);
    if (!strcmp(name, "name") && m->def->kind == N_MACRO) return jv_str_new(r, m->def->name, strlen(m->def->name), out);
    if (!strcmp(name, "arguments")) {
        JList *l = jlist_new(r, (size_t)m->def->nparams);
        if (!l) return -1;
        for (int i = 0; i < m->def->nparams; i++) {
            JValue p;
            const char *pn = m->def->params[i];
            if (jv_str_new(r, pn, strlen(pn), &p) < 0 || jlist_push(r, l, p) < 0) return -1;
        }
        *out = (JValue){.kind = JV_TUPLE, .u.l = l};
    }
    return 0;
}

// ---- scopes

static Scope *scope_new(JRender *r, Scope *parent) {
    Scope *s = ja_alloc(r, sizeof *s);
    if (s) s->parent = parent;
    return s;
}

static int scope_set(JRender *r, Scope *s, const char *name, JValue v) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        const char **nn = ja_alloc(r, (size_t)nc * sizeof *nn);
        JValue *nv = ja_alloc(r, (size_t)nc * sizeof *nv);
        if (!nn || !nv) return -1;
        if (s->n) {
            memcpy(nn, s->names, (size_t)s->n * sizeof *nn);
            memcpy(nv, s->vals, (size_t)s->n * sizeof *nv);
        }
        s->names = nn;
        s->vals = nv;
        s->cap = nc;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
    return 0;
}

static JValue lookup(Eval *E, Scope *s, const char *name) {
    for (; s; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--)
            if (!strcmp(s->names[i], name)) return s->vals[i];
    const JValue *v = E->vars ? jdict_get_str(E->vars, name) : NULL;
    if (!v) v = jdict_get_str(E->globals, name);
    return v ? *v : jv_undefined(name);
}

// jinja2's message for using an undefined value. `what` is a bare name ("x": "'x' is undefined")
// or, when the builtins made it for a missing attribute or item, the whole message
// ("'dict object' has no attribute 'y'").
int jr_fail_undefined(JRender *r, JValue u) {
    const char *w = u.u.what;
    if (!w || !*w) return jr_fail(r, "a value is undefined");
    if (strchr(w, ' ')) return jr_fail(r, "%s", w);
    return jr_fail(r, "'%s' is undefined", w);
}

// ---- output

static int out_put(Eval *E, Out *o, const char *p, size_t n) {
    if (o->cap) return jbuf_put(E->r, o->cap, p, n);
    size_t have = E->top->len - E->top_start;
    if (n > E->r->lim->max_output || have > E->r->lim->max_output - n)
        return jr_fail(E->r, "output is over the limit of %zu bytes", E->r->lim->max_output);
    if (buf_append(E->top, p, n) < 0) return jr_fail(E->r, "out of memory");
    return 0;
}

static int out_value(Eval *E, Out *o, JValue v) {
    if (v.kind == JV_STR) return out_put(E, o, v.u.s->p, v.u.s->len);
    if (o->cap) return jv_to_str(E->r, v, o->cap);
    JBuf b = {0};
    if (jv_to_str(E->r, v, &b) < 0) return -1;
    return out_put(E, o, b.p, b.len);
}

// ---- expressions

static int eval(Eval *E, const Node *nd, Scope *s, JValue *out);
static int exec_body(Eval *E, const NodeList *body, Scope *s, Out *o);

static int eval_list(Eval *E, const NodeList *l, Scope *s, JValue *vals) {
    for (int i = 0; i < l->n; i++)
        if (eval(E, l->v[i], s, &vals[i]) < 0) return -1;
    return 0;
}

// Arguments of a call, filter or test (extra = one more keyword argument, e.g. caller).
static int eval_args(Eval *E, const Node *nd, Scope *s, JArgs *a, const char *extra_name, JValue extra) {
    static JValue none_v[1];  // never written: zero-length arrays point here, not at NULL
    static const char *none_n[1];
    int nkw = nd->kwargs.n + (extra_name ? 1 : 0);
    JValue *pos = nd->args.n ? ja_alloc(E->r, (size_t)nd->args.n * sizeof *pos) : none_v;
    JValue *kw = nkw ? ja_alloc(E->r, (size_t)nkw * sizeof *kw) : none_v;
    const char **names = nkw ? ja_alloc(E->r, (size_t)nkw * sizeof *names) : none_n;
    if ((nd->args.n && !pos) || (nkw && (!kw || !names))) return -1;
    if (eval_list(E, &nd->args, s, pos) < 0 || eval_list(E, &nd->kwargs, s, kw) < 0) return -1;
    for (int i = 0; i < nd->kwargs.n; i++) names[i] = nd->kwnames[i];
    if (extra_name) {
        names[nkw - 1] = extra_name;
        kw[nkw - 1] = extra;
    }
    *a = (JArgs){.n = nd->args.n, .pos = pos, .nkw = nkw, .kw_names = names, .kw = kw};
    return 0;
}

static int call_macro(Eval *E, JFunc *fn, const JArgs *a, JValue *out);

static int loop_recurse(Eval *E, const JDict *loop, const JArgs *a, JValue *out);

static int call_value(Eval *E, JValue fn, const JArgs *a, JValue *out) {
    JRender *r = E->r;
    if (fn.kind == JV_UNDEFINED) return jr_fail_undefined(r, fn);
    if (fn.kind == JV_DICT && fn.u.d->recurse) return loop_recurse(E, fn.u.d, a, out);
    if (fn.kind == JV_DICT && fn.u.d->loop)
        return jr_fail(r, "The loop must have the 'recursive' marker to be called recursively.");
    if (fn.kind != JV_FUNC) return jr_fail(r, "'%s' object is not callable", jv_type_name(fn));
    if (jr_step(r) < 0) return -1;
    JFunc *f = fn.u.fn;
    switch (f->kind) {
    case JF_BUILTIN: return f->fn(r, &f->self, a, out);
    case JF_MACRO: return call_macro(E, f, a, out);
    case JF_LOOP: {  // loop.cycle(a, b, ...) or loop.changed(a, ...)
        if (a->nkw) return jr_fail(r, "loop.%s() takes no keyword arguments", f->name);
        if (!strcmp(f->name, "changed")) {  // true at the first call and when the arguments differ from the last
            JList **last = f->impl, *now = jlist_new(r, (size_t)a->n);
            if (!now) return -1;
            for (int k = 0; k < a->n; k++)
                if (jlist_push(r, now, a->pos[k]) < 0) return -1;
            JValue nv = {.kind = JV_TUPLE, .u.l = now};
            bool same = false;
            if (*last && jr_equal(r, (JValue){.kind = JV_TUPLE, .u.l = *last}, nv, &same) < 0) return -1;
            *last = now;
            *out = jv_bool(!same);
            return 0;
        }
        if (a->n == 0) return jr_fail(r, "no items for cycling given");
        int64_t i = *(const int64_t *)f->impl;
        *out = a->pos[i % a->n];
        return 0;
    }
    }
    return jr_fail(r, "unknown callable");
}

static int capture_body(Eval *E, const NodeList *body, Scope *s, JValue *out) {
    JBuf b = {0};
    Out o = {.cap = &b};
    int rc = exec_body(E, body, s, &o);
    if (rc < 0) return -1;
    return jv_str_new(E->r, b.p ? b.p : "", b.len, out);
}

static int call_macro(Eval *E, JFunc *fn, const JArgs *a, JValue *out) {
    JRender *r = E->r;
    Macro *m = fn->impl;
    const Node *def = m->def;
    const char *mname = def->kind == N_MACRO ? def->name : "caller";
    if (++r->depth > r->lim->max_depth) {
        r->depth--;
        return jr_fail(r, "macro calls nested deeper than %d levels", r->lim->max_depth);
    }
    int rc = -1;
    Scope *s = scope_new(r, m->closure);
    bool *set = def->nparams ? ja_alloc(r, (size_t)def->nparams) : NULL;
    if (!s || (def->nparams && !set)) goto out;
    JList *varargs = NULL;
    JDict *kwargs = NULL;
    JValue caller = m->caller;
    for (int i = 0; i < a->n; i++) {
        if (i < def->nparams) {
            if (scope_set(r, s, def->params[i], a->pos[i]) < 0) goto out;
            set[i] = true;
        } else if (def->uses_varargs) {
            if (!varargs && !(varargs = jlist_new(r, (size_t)(a->n - i)))) goto out;
            if (jlist_push(r, varargs, a->pos[i]) < 0) goto out;
        } else {
            jr_fail(r, "macro '%s' takes not more than %d argument(s)", mname, def->nparams);
            goto out;
        }
    }
    for (int k = 0; k < a->nkw; k++) {
        const char *kn = a->kw_names[k];
        int p = -1;
        for (int i = 0; i < def->nparams; i++)
            if (!strcmp(def->params[i], kn)) p = i;
        if (p >= 0) {
            if (set[p]) {
                jr_fail(r, "macro '%s' got multiple values for argument '%s'", mname, kn);
                goto out;
            }
            if (scope_set(r, s, kn, a->kw[k]) < 0) goto out;
            set[p] = true;
        } else if (!strcmp(kn, "caller")) {
            caller = a->kw[k];
        } else if (def->uses_kwargs) {
            JValue key;
            if (!kwargs && !(kwargs = jdict_new(r, 4))) goto out;
            if (jv_str_new(r, kn, strlen(kn), &key) < 0 || jdict_set(r, kwargs, key, a->kw[k]) < 0) goto out;
        } else {
            jr_fail(r, "macro '%s' takes no keyword argument '%s'", mname, kn);
            goto out;
        }
    }
    for (int i = 0; i < def->nparams; i++) {
        if (set[i]) continue;
        JValue v = jv_undefined(def->params[i]);
        if (def->defaults.v[i] && eval(E, def->defaults.v[i], s, &v) < 0) goto out;
        if (scope_set(r, s, def->params[i], v) < 0) goto out;
    }
    if (def->kind == N_MACRO) {
        if (def->uses_varargs) {
            if (!varargs && !(varargs = jlist_new(r, 0))) goto out;
            if (scope_set(r, s, "varargs", (JValue){.kind = JV_TUPLE, .u.l = varargs}) < 0) goto out;
        }
        if (def->uses_kwargs) {
            if (!kwargs && !(kwargs = jdict_new(r, 0))) goto out;
            if (scope_set(r, s, "kwargs", (JValue){.kind = JV_DICT, .u.d = kwargs}) < 0) goto out;
        }
        if (caller.kind != JV_UNDEFINED && scope_set(r, s, "caller", caller) < 0) goto out;
    }
    int line = r->line;
    rc = capture_body(E, &def->body, s, out);
    r->line = line;
out:
    r->depth--;
    return rc;
}

static bool as_num(JValue v, bool *is_int, int64_t *i, double *f) {
    switch (v.kind) {
    case JV_BOOL: *is_int = true, *i = v.u.b; return true;
    case JV_INT: *is_int = true, *i = v.u.i; return true;
    case JV_FLOAT: *is_int = false, *f = v.u.f; return true;
    default: return false;
    }
}

static int seq_concat(JRender *r, JValue a, JValue b, JValue *out) {
    JList *l = jlist_new(r, a.u.l->n + b.u.l->n);
    if (!l) return -1;
    for (size_t i = 0; i < a.u.l->n; i++)
        if (jlist_push(r, l, a.u.l->v[i]) < 0) return -1;
    for (size_t i = 0; i < b.u.l->n; i++)
        if (jlist_push(r, l, b.u.l->v[i]) < 0) return -1;
    *out = (JValue){.kind = a.kind, .u.l = l};
    return 0;
}

static int seq_repeat(JRender *r, JValue a, int64_t n, JValue *out) {
    if (n < 0) n = 0;
    if ((a.kind == JV_STR ? a.u.s->len : a.u.l->n) == 0) n = 0;  // '' * 10**11: no 10**11 empty copies
    if (a.kind == JV_STR) {
        size_t len = a.u.s->len;
        if (len && (uint64_t)n > r->lim->max_output / len)
            return jr_fail(r, "a string of more than %zu bytes is over the output limit", r->lim->max_output);
        char *p = ja_alloc(r, len * (size_t)n + 1);
        if (!p) return -1;
        for (int64_t i = 0; i < n; i++) memcpy(p + (size_t)i * len, a.u.s->p, len);
        return jv_str_new(r, p, len * (size_t)n, out);
    }
    size_t len = a.u.l->n;
    if (len && (uint64_t)n > r->lim->max_output / len) return jr_fail(r, "a list repeated past the output limit");
    JList *l = jlist_new(r, len * (size_t)n);
    if (!l) return -1;
    for (int64_t k = 0; k < n; k++)
        for (size_t i = 0; i < len; i++)
            if (jlist_push(r, l, a.u.l->v[i]) < 0) return -1;
    *out = (JValue){.kind = a.kind, .u.l = l};
    return 0;
}

static double py_fmod(double a, double b) {
    double m = fmod(a, b);
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    else if (m == 0) m = copysign(0.0, b);
    return m;
}

static double py_floordiv(double a, double b) {
    double m = fmod(a, b), div = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0))) div -= 1.0;
    double fl;
    if (div != 0) {
        fl = floor(div);
        if (div - fl > 0.5) fl += 1.0;
    } else {
        fl = copysign(0.0, a / b);
    }
    return fl;
}

static int binop(Eval *E, const char *op, JValue a, JValue b, JValue *out) {
    JRender *r = E->r;
    if (op[0] == '~') {
        JBuf buf = {0};
        if (jv_to_str(r, a, &buf) < 0 || jv_to_str(r, b, &buf) < 0) return -1;
        return jv_str_new(r, buf.p ? buf.p : "", buf.len, out);
    }
    if (op[0] == '%' && a.kind == JV_STR) return jinja_printf(r, a, b, out);  // str.__mod__ first, even for undefined
    if (a.kind == JV_UNDEFINED) return jr_fail_undefined(r, a);
    if (b.kind == JV_UNDEFINED) return jr_fail_undefined(r, b);
    if (jv_is_listlike(a) || jv_is_listlike(b))
        return jr_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
    bool ai = false, bi = false;
    int64_t x = 0, y = 0;
    double fx = 0, fy = 0;
    bool an = as_num(a, &ai, &x, &fx), bn = as_num(b, &bi, &y, &fy);
    if (an && bn) {
        bool ints = ai && bi;
        if (ai) fx = (double)x;
        if (bi) fy = (double)y;
        int64_t z;
        switch (op[0] == '/' && op[1] == '/' ? 'f' : op[0] == '*' && op[1] == '*' ? 'p' : op[0]) {
        case '+':
            if (!ints) return *out = jv_float(fx + fy), 0;
            if (__builtin_add_overflow(x, y, &z)) break;
            return *out = jv_int(z), 0;
        case '-':
            if (!ints) return *out = jv_float(fx - fy), 0;
            if (__builtin_sub_overflow(x, y, &z)) break;
            return *out = jv_int(z), 0;
        case '*':
            if (!ints) return *out = jv_float(fx * fy), 0;
            if (__builtin_mul_overflow(x, y, &z)) break;
            return *out = jv_int(z), 0;
        case '/':
            if (fy == 0) return jr_fail(r, "division by zero");
            return *out = jv_float(fx / fy), 0;
        case 'f':
            if (ints) {
                if (y == 0) return jr_fail(r, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) break;
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return *out = jv_int(q), 0;
            }
            if (fy == 0) return jr_fail(r, "float floor division by zero");
            return *out = jv_float(py_floordiv(fx, fy)), 0;
        case '%':
            if (ints) {
                if (y == 0) return jr_fail(r, "integer division or modulo by zero");
                if (y == -1) return *out = jv_int(0), 0;
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return *out = jv_int(m), 0;
            }
            if (fy == 0) return jr_fail(r, "float modulo by zero");
            return *out = jv_float(py_fmod(fx, fy)), 0;
        case 'p':
            if (ints && y >= 0) {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) goto overflow;
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
                }
                return *out = jv_int(acc), 0;
            }
            if (fx == 0 && fy < 0) return jr_fail(r, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy)) return jr_fail(r, "a negative number raised to a fractional power is complex");
            return *out = jv_float(pow(fx, fy)), 0;
        }
    overflow:
        return jr_fail(r, "integer result of %s is beyond 64 bits", op);
    }
    if (op[0] == '+' && a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = a.u.s->len + b.u.s->len;
        if (n > r->lim->max_output) return jr_fail(r, "a string of %zu bytes is over the output limit", n);
        char *p = ja_alloc(r, n + 1);
        if (!p) return -1;
        memcpy(p, a.u.s->p, a.u.s->len);
        memcpy(p + a.u.s->len, b.u.s->p, b.u.s->len);
        return jv_str_new(r, p, n, out);
    }
    if (op[0] == '+' && a.kind == b.kind && (a.kind == JV_LIST || a.kind == JV_TUPLE)) return seq_concat(r, a, b, out);
    if (op[0] == '*' && !op[1]) {
        bool seq_a = a.kind == JV_STR || a.kind == JV_LIST || a.kind == JV_TUPLE;
        bool seq_b = b.kind == JV_STR || b.kind == JV_LIST || b.kind == JV_TUPLE;
        if (seq_a && bn && bi) return seq_repeat(r, a, y, out);
        if (seq_b && an && ai) return seq_repeat(r, b, x, out);
    }
    if (op[0] == '+' && (a.kind == JV_STR || a.kind == JV_LIST || a.kind == JV_TUPLE))
        return jr_fail(r, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a), jv_type_name(b), jv_type_name(a));
    return jr_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static int contains(JRender *r, JValue item, JValue c, bool *out) {
    switch (c.kind) {
    case JV_UNDEFINED:
    case JV_STR:
    case JV_LIST:
    case JV_TUPLE:
    case JV_DICT: return jinja_contains(r, c, item, out);
    default: return jr_fail(r, "argument of type '%s' is not iterable", jv_type_name(c));  // a namespace too
    }
}

static int compare(Eval *E, const char *op, JValue a, JValue b, bool *res) {
    JRender *r = E->r;
    if (!strcmp(op, "==")) return jr_equal(r, a, b, res);
    if (!strcmp(op, "!=")) {
        if (jr_equal(r, a, b, res) < 0) return -1;
        *res = !*res;
        return 0;
    }
    if (!strcmp(op, "in")) return contains(r, a, b, res);
    if (!strcmp(op, "notin")) {
        if (contains(r, a, b, res) < 0) return -1;
        *res = !*res;
        return 0;
    }
    if (a.kind == JV_UNDEFINED) return jr_fail_undefined(r, a);
    if (b.kind == JV_UNDEFINED) return jr_fail_undefined(r, b);
    int c;
    if (jv_compare(r, a, b, &c) < 0) return -1;
    *res = op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0);
    return 0;
}

// The undefined a missing attribute or item gives, carrying jinja2's message for later use:
// "'dict object' has no attribute 'y'", "list object has no element 5".
static int missing(JRender *r, JValue obj, JValue key, const char *attr, JValue *out) {
    char tn[64];
    if (obj.kind == JV_NONE) snprintf(tn, sizeof tn, "None");
    else snprintf(tn, sizeof tn, "%s object", obj.kind == JV_NAMESPACE ? "Namespace" : jv_type_name(obj));
    char msg[512];
    if (attr || key.kind == JV_STR)
        snprintf(msg, sizeof msg, "'%s' has no attribute '%s'", tn, attr ? attr : key.u.s->p);
    else if (key.kind == JV_INT)
        snprintf(msg, sizeof msg, "%s has no element %lld", tn, (long long)key.u.i);
    else
        snprintf(msg, sizeof msg, "%s has no element of type '%s'", tn, jv_type_name(key));
    size_t n = strlen(msg);
    char *p = ja_alloc(r, n + 1);
    if (!p) return -1;
    memcpy(p, msg, n + 1);
    *out = jv_undefined(p);
    return 0;
}

static int slice_bound(Eval *E, const Node *nd, Scope *s, bool *has, int64_t *v) {
    *has = false;
    if (!nd) return 0;
    JValue x;
    if (eval(E, nd, s, &x) < 0) return -1;
    if (x.kind == JV_NONE) return 0;
    if (x.kind == JV_INT || x.kind == JV_BOOL) {
        *has = true;
        *v = x.kind == JV_INT ? x.u.i : x.u.b;
        return 0;
    }
    if (x.kind == JV_UNDEFINED) return jr_fail_undefined(E->r, x);
    return jr_fail(E->r, "slice indices must be integers or None");
}

static int eval_inner(Eval *E, const Node *nd, Scope *s, JValue *out) {
    JRender *r = E->r;
    r->line = nd->line;
    switch (nd->kind) {
    case E_CONST: *out = nd->cval; return 0;
    case E_NAME: *out = lookup(E, s, nd->name); return 0;
    case E_GETATTR: {
        JValue obj;
        if (eval(E, nd->a, s, &obj) < 0) return -1;
        if (obj.kind == JV_UNDEFINED) return jr_fail_undefined(r, obj);
        r->line = nd->line;
        if (obj.kind == JV_FUNC && obj.u.fn->kind == JF_MACRO && obj.u.fn->impl)  // jinja2's Macro.name, .arguments
            return macro_attr(r, obj.u.fn, nd->name, out);
        if (jinja_getattr(r, obj, nd->name, out) < 0) return -1;
        return out->kind == JV_UNDEFINED ? missing(r, obj, jv_undefined(NULL), nd->name, out) : 0;
    }
    case E_GETITEM: {
        JValue obj, key;
        if (eval(E, nd->a, s, &obj) < 0 || eval(E, nd->b, s, &key) < 0) return -1;
        if (obj.kind == JV_UNDEFINED) return jr_fail_undefined(r, obj);
        r->line = nd->line;
        if (jinja_getitem(r, obj, key, out) < 0) return -1;
        return out->kind == JV_UNDEFINED ? missing(r, obj, key, NULL, out) : 0;
    }
    case E_SLICE: {
        JValue obj;
        bool h[3];
        int64_t v[3] = {0};
        if (eval(E, nd->a, s, &obj) < 0) return -1;
        for (int i = 0; i < 3; i++)
            if (slice_bound(E, nd->args.v[i], s, &h[i], &v[i]) < 0) return -1;
        if (obj.kind == JV_UNDEFINED) return jr_fail_undefined(r, obj);
        r->line = nd->line;
        return jinja_slice(r, obj, h[0], v[0], h[1], v[1], h[2], v[2], out);
    }
    case E_CALL: {
        JValue fn;
        JArgs a;
        if (eval(E, nd->a, s, &fn) < 0 || eval_args(E, nd, s, &a, NULL, jv_undefined(NULL)) < 0) return -1;
        r->line = nd->line;
        return call_value(E, fn, &a, out);
    }
    case E_FILTER: {
        JValue self;
        JArgs a;
        if (eval(E, nd->a, s, &self) < 0 || eval_args(E, nd, s, &a, NULL, jv_undefined(NULL)) < 0) return -1;
        r->line = nd->line;
        if (nd->unknown) return jr_fail(r, "No filter named '%s' found.", nd->name);
        if (jr_step(r) < 0) return -1;
        return jinja_filter_call(r, nd->name, self, &a, out);
    }
    case E_TEST: {
        JValue self;
        JArgs a;
        bool b;
        if (eval(E, nd->a, s, &self) < 0 || eval_args(E, nd, s, &a, NULL, jv_undefined(NULL)) < 0) return -1;
        r->line = nd->line;
        if (nd->unknown) return jr_fail(r, "No test named '%s' found.", nd->name);
        if (jinja_test_call(r, nd->name, self, &a, &b) < 0) return -1;
        *out = jv_bool(b != nd->negated);
        return 0;
    }
    case E_BINOP: {
        JValue a, b;
        if (eval(E, nd->a, s, &a) < 0 || eval(E, nd->b, s, &b) < 0) return -1;
        r->line = nd->line;
        return binop(E, nd->op, a, b, out);
    }
    case E_AND:
    case E_OR: {
        if (eval(E, nd->a, s, out) < 0) return -1;
        if (jv_truthy(*out) == (nd->kind == E_OR)) return 0;
        return eval(E, nd->b, s, out);
    }
    case E_NOT: {
        JValue a;
        if (eval(E, nd->a, s, &a) < 0) return -1;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    }
    case E_NEG:
    case E_POS: {
        JValue a;
        if (eval(E, nd->a, s, &a) < 0) return -1;
        r->line = nd->line;
        if (a.kind == JV_UNDEFINED) return jr_fail_undefined(r, a);
        if (a.kind == JV_BOOL) a = jv_int(a.u.b);
        if (a.kind == JV_INT) {
            if (nd->kind == E_NEG && a.u.i == INT64_MIN) return jr_fail(r, "integer result of - is beyond 64 bits");
            *out = nd->kind == E_NEG ? jv_int(-a.u.i) : a;
            return 0;
        }
        if (a.kind == JV_FLOAT) {
            *out = nd->kind == E_NEG ? jv_float(-a.u.f) : a;
            return 0;
        }
        return jr_fail(r, "bad operand type for unary %c: '%s'", nd->kind == E_NEG ? '-' : '+', jv_type_name(a));
    }
    case E_COMPARE: {
        JValue left;
        if (eval(E, nd->a, s, &left) < 0) return -1;
        for (int i = 0; i < nd->args.n; i++) {
            JValue right;
            bool res;
            if (eval(E, nd->args.v[i], s, &right) < 0) return -1;
            r->line = nd->line;
            if (compare(E, nd->ops[i], left, right, &res) < 0) return -1;
            if (!res) return *out = jv_bool(false), 0;
            left = right;
        }
        *out = jv_bool(true);
        return 0;
    }
    case E_COND: {
        JValue c;
        if (eval(E, nd->a, s, &c) < 0) return -1;
        if (jv_truthy(c)) return eval(E, nd->b, s, out);
        if (nd->c) return eval(E, nd->c, s, out);
        *out = jv_undefined("the inline if-expression evaluated to false and no else section was defined");
        return 0;
    }
    case E_LIST:
    case E_TUPLE: {
        JList *l = jlist_new(r, (size_t)nd->args.n);
        if (!l) return -1;
        for (int i = 0; i < nd->args.n; i++) {
            JValue v;
            if (eval(E, nd->args.v[i], s, &v) < 0 || jlist_push(r, l, v) < 0) return -1;
        }
        *out = (JValue){.kind = nd->kind == E_LIST ? JV_LIST : JV_TUPLE, .u.l = l};
        return 0;
    }
    case E_DICT: {
        JDict *d = jdict_new(r, (size_t)nd->args.n);
        if (!d) return -1;
        for (int i = 0; i < nd->args.n; i++) {
            JValue k, v;
            if (eval(E, nd->args.v[i], s, &k) < 0 || eval(E, nd->vals.v[i], s, &v) < 0) return -1;
            if (k.kind == JV_LIST || k.kind == JV_DICT || k.kind == JV_NAMESPACE)
                return jr_fail(r, "unhashable type: '%s'", jv_type_name(k));
            if (jdict_set(r, d, k, v) < 0) return -1;
        }
        *out = (JValue){.kind = JV_DICT, .u.d = d};
        return 0;
    }
    default: return jr_fail(r, "internal error: statement node in an expression");
    }
}

static int eval(Eval *E, const Node *nd, Scope *s, JValue *out) {
    JRender *r = E->r;
    if (++r->depth > r->lim->max_depth) {
        r->depth--;
        return jr_fail(r, "expression nested deeper than %d levels", r->lim->max_depth);
    }
    int rc = eval_inner(E, nd, s, out);
    r->depth--;
    return rc;
}

// ---- statements

static int apply_filters(Eval *E, const NodeList *filters, Scope *s, JValue *v) {
    for (int i = 0; i < filters->n; i++) {
        const Node *f = filters->v[i];
        JArgs a;
        if (eval_args(E, f, s, &a, NULL, jv_undefined(NULL)) < 0) return -1;
        E->r->line = f->line;
        if (f->unknown) return jr_fail(E->r, "No filter named '%s' found.", f->name);
        if (jr_step(E->r) < 0 || jinja_filter_call(E->r, f->name, *v, &a, v) < 0) return -1;
    }
    return 0;
}

// The items a for loop walks: list/tuple items, dict keys, string characters; undefined is empty.
static int iter_items(JRender *r, JValue v, const JValue **items, size_t *n) {
    switch (v.kind) {
    case JV_UNDEFINED: *items = NULL, *n = 0; return 0;
    case JV_LIST:
    case JV_TUPLE:
        *n = v.u.l->n - v.u.l->pos;
        *items = *n ? v.u.l->v + v.u.l->pos : NULL;  // an empty list may have no array
        if (v.u.l->gen) v.u.l->pos = v.u.l->n;  // consumed
        return 0;
    case JV_DICT: *items = v.u.d->k, *n = v.u.d->n; return 0;
    case JV_STR: {
        const JStr *s = v.u.s;
        size_t nc = jv_str_nchars(s);
        JValue *out = nc ? ja_alloc(r, nc * sizeof *out) : NULL;
        if (nc && !out) return -1;
        size_t k = 0;
        for (size_t i = 0; i < s->len && k < nc;) {
            size_t j = i + 1;
            while (j < s->len && ((unsigned char)s->p[j] & 0xC0) == 0x80) j++;
            if (jv_str_new(r, s->p + i, j - i, &out[k++]) < 0) return -1;
            i = j;
        }
        *items = out, *n = k;
        return 0;
    }
    default: return jr_fail(r, "'%s' object is not iterable", jv_type_name(v));
    }
}

static int assign_targets(Eval *E, const Node *nd, Scope *s, JValue v) {
    JRender *r = E->r;
    if (!nd->target_tuple) return scope_set(r, s, nd->targets[0], v);
    const JValue *items;
    size_t n;
    if (v.kind == JV_UNDEFINED) return jr_fail_undefined(r, v);
    if (v.kind != JV_LIST && v.kind != JV_TUPLE && v.kind != JV_DICT && v.kind != JV_STR)
        return jr_fail(r, "cannot unpack non-iterable %s object", jv_type_name(v));
    if (iter_items(r, v, &items, &n) < 0) return -1;
    if (n < (size_t)nd->ntargets)
        return jr_fail(r, "not enough values to unpack (expected %d, got %zu)", nd->ntargets, n);
    if (n > (size_t)nd->ntargets) return jr_fail(r, "too many values to unpack (expected %d)", nd->ntargets);
    for (int i = 0; i < nd->ntargets; i++)
        if (scope_set(r, s, nd->targets[i], items[i]) < 0) return -1;
    return 0;
}

enum {
    L_INDEX, L_INDEX0, L_REVINDEX, L_REVINDEX0, L_FIRST, L_LAST, L_LENGTH, L_DEPTH, L_DEPTH0, L_PREVITEM, L_NEXTITEM,
    L_CYCLE, L_CHANGED, L_N
};
static const char *const LOOP_KEYS[L_N] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                             "length", "depth", "depth0", "previtem", "nextitem", "cycle", "changed"};

// A recursive loop's loop(items): the same for statement over items, one level deeper.
typedef struct {
    const Node *nd;
    Scope *s;  // the scope the for statement runs in
    int depth;
} LoopRecurse;

static int run_for(Eval *E, const Node *nd, Scope *s, JValue seq, int depth, Out *o);

static int exec_for(Eval *E, const Node *nd, Scope *s, Out *o) {
    JValue seq;
    if (eval(E, nd->a, s, &seq) < 0) return -1;
    E->r->line = nd->line;
    return run_for(E, nd, s, seq, 1, o);
}

static int loop_recurse(Eval *E, const JDict *loop, const JArgs *a, JValue *out) {
    const LoopRecurse *lr = loop->recurse;
    JRender *r = E->r;
    if (a->n != 1 || a->nkw) return jr_fail(r, "loop() takes exactly one argument, the items (%d given)", a->n + a->nkw);
    JBuf b = {0};  // the call is an expression: eval's depth bound stops an endless recursion
    Out o = {.cap = &b};
    if (run_for(E, lr->nd, lr->s, a->pos[0], lr->depth + 1, &o) < 0) return -1;
    return jv_str_new(r, b.p ? b.p : "", b.len, out);
}

// The for statement's iterations over seq at depth (1 at the top, +1 per loop() of a recursive loop).
static int run_for(Eval *E, const Node *nd, Scope *s, JValue seq, int depth, Out *o) {
    JRender *r = E->r;
    const JValue *items;
    size_t n;
    if (iter_items(r, seq, &items, &n) < 0) return -1;
    Scope *body = scope_new(r, s);
    if (!body) return -1;
    if (nd->b) {  // {% for x in xs if test %}: the loop runs over the items that pass
        JValue *kept = n ? ja_alloc(r, n * sizeof *kept) : NULL;
        if (n && !kept) return -1;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            JValue t;
            if (jr_step(r) < 0) return -1;
            body->n = 0;
            if (assign_targets(E, nd, body, items[i]) < 0 || eval(E, nd->b, body, &t) < 0) return -1;
            if (jv_truthy(t)) kept[k++] = items[i];
        }
        items = kept, n = k;
    }
    if (n == 0) return exec_body(E, &nd->orelse, s, o);
    JDict *loop = jdict_new(r, L_N);
    int64_t *cyc = ja_alloc(r, sizeof *cyc);
    if (!loop || !cyc) return -1;
    for (int k = 0; k < L_N; k++) {
        JValue key;
        if (jv_str_new(r, LOOP_KEYS[k], strlen(LOOP_KEYS[k]), &key) < 0 || jdict_set(r, loop, key, jv_none()) < 0) return -1;
    }
    JFunc *cf = ja_alloc(r, sizeof *cf), *chf = ja_alloc(r, sizeof *chf);
    JList **last = ja_alloc(r, sizeof *last);  // loop.changed's previous arguments (NULL: no call yet)
    if (!cf || !chf || !last) return -1;
    *cf = (JFunc){.kind = JF_LOOP, .name = "cycle", .impl = cyc};
    *chf = (JFunc){.kind = JF_LOOP, .name = "changed", .impl = last};
    JValue *lv = loop->v;
    lv[L_LENGTH] = jv_int((int64_t)n);
    lv[L_DEPTH] = jv_int(depth);
    lv[L_DEPTH0] = jv_int(depth - 1);
    loop->loop = true;
    if (nd->recursive) {
        LoopRecurse *lr = ja_alloc(r, sizeof *lr);
        if (!lr) return -1;
        *lr = (LoopRecurse){.nd = nd, .s = s, .depth = depth};
        loop->recurse = lr;
    }
    lv[L_CYCLE] = (JValue){.kind = JV_FUNC, .u.fn = cf};
    lv[L_CHANGED] = (JValue){.kind = JV_FUNC, .u.fn = chf};
    JValue loopv = {.kind = JV_DICT, .u.d = loop};
    for (size_t i = 0; i < n; i++) {
        if (jr_step(r) < 0) return -1;
        *cyc = (int64_t)i;
        lv[L_INDEX] = jv_int((int64_t)i + 1);
        lv[L_INDEX0] = jv_int((int64_t)i);
        lv[L_REVINDEX] = jv_int((int64_t)(n - i));
        lv[L_REVINDEX0] = jv_int((int64_t)(n - i - 1));
        lv[L_FIRST] = jv_bool(i == 0);
        lv[L_LAST] = jv_bool(i == n - 1);
        lv[L_PREVITEM] = i ? items[i - 1] : jv_undefined("there is no previous item");
        lv[L_NEXTITEM] = i + 1 < n ? items[i + 1] : jv_undefined("there is no next item");
        body->n = 0;  // every iteration starts from the enclosing scope again, as jinja2's do
        if (scope_set(r, body, "loop", loopv) < 0 || assign_targets(E, nd, body, items[i]) < 0) return -1;
        int rc = exec_body(E, &nd->body, body, o);
        if (rc < 0) return -1;
        if (rc == FLOW_BREAK) break;
    }
    return 0;
}

static int make_macro(Eval *E, const Node *def, Scope *s, JValue caller, JValue *out) {
    Macro *m = ja_alloc(E->r, sizeof *m);
    JFunc *f = ja_alloc(E->r, sizeof *f);
    if (!m || !f) return -1;
    *m = (Macro){.def = def, .closure = s, .caller = caller};
    *f = (JFunc){.kind = JF_MACRO, .name = def->kind == N_MACRO ? def->name : "caller", .impl = m};
    *out = (JValue){.kind = JV_FUNC, .u.fn = f};
    return 0;
}

static int exec_stmt(Eval *E, const Node *nd, Scope *s, Out *o) {
    JRender *r = E->r;
    r->line = nd->line;
    switch (nd->kind) {
    case N_TEXT: return out_put(E, o, nd->str, nd->len);
    case N_OUTPUT: {
        JValue v;
        if (eval(E, nd->a, s, &v) < 0) return -1;
        return out_value(E, o, v);
    }
    case N_IF:
        for (;;) {
            JValue t;
            r->line = nd->line;
            if (eval(E, nd->a, s, &t) < 0) return -1;
            if (jv_truthy(t)) return exec_body(E, &nd->body, s, o);
            if (nd->orelse.n == 1 && nd->orelse.v[0]->elif) {
                nd = nd->orelse.v[0];
                continue;
            }
            return exec_body(E, &nd->orelse, s, o);
        }
    case N_FOR: return exec_for(E, nd, s, o);
    case N_SET:
    case N_SET_BLOCK: {
        JValue v;
        if (nd->kind == N_SET) {
            if (eval(E, nd->a, s, &v) < 0) return -1;
        } else {
            Scope *inner = scope_new(r, s);
            if (!inner || capture_body(E, &nd->body, inner, &v) < 0 || apply_filters(E, &nd->filters, s, &v) < 0) return -1;
        }
        r->line = nd->line;
        if (nd->attr) {
            JValue ns = lookup(E, s, nd->name), key;
            if (ns.kind != JV_NAMESPACE) return jr_fail(r, "cannot assign attribute on non-namespace object");
            if (nd->attr[0] == '_')  // transformers' TemplateNamespace.__setitem__
                return jr_fail(r, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%s'. "
                                  "Please rename the attribute.", nd->attr);
            if (jv_str_new(r, nd->attr, strlen(nd->attr), &key) < 0) return -1;
            return jdict_set(r, ns.u.d, key, v);
        }
        return assign_targets(E, nd, s, v);
    }
    case N_MACRO: {
        JValue f;
        if (make_macro(E, nd, s, jv_undefined(NULL), &f) < 0) return -1;
        return scope_set(r, s, nd->name, f);
    }
    case N_CALL_BLOCK: {
        JValue caller, fn, res;
        JArgs a;
        const Node *call = nd->a;
        if (make_macro(E, nd, s, jv_undefined(NULL), &caller) < 0) return -1;
        if (eval(E, call->a, s, &fn) < 0 || eval_args(E, call, s, &a, "caller", caller) < 0) return -1;
        r->line = nd->line;
        if (call_value(E, fn, &a, &res) < 0) return -1;
        return out_value(E, o, res);
    }
    case N_FILTER_BLOCK: {  // the body is a scope of its own: a set inside does not leak (jinja2's inner frame)
        JValue v;
        Scope *inner = scope_new(r, s);
        if (!inner || capture_body(E, &nd->body, inner, &v) < 0 || apply_filters(E, &nd->filters, s, &v) < 0) return -1;
        return out_value(E, o, v);
    }
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    case N_GENERATION: {
        // transformers renders the body as a caller() (its own scope) and records where it
        // lands: from the length of the top-level output so far.
        JValue v;
        Scope *inner = scope_new(r, s);
        if (!inner || capture_body(E, &nd->body, inner, &v) < 0) return -1;
        size_t begin = E->top->len - E->top_start;
        if (out_value(E, o, v) < 0) return -1;
        if (E->gen) {
            if (E->gen->n == E->gen_cap) {
                int nc = E->gen_cap ? E->gen_cap * 2 : 8;
                JinjaSpan *ns = realloc(E->gen->spans, (size_t)nc * sizeof *ns);
                if (!ns) return jr_fail(r, "out of memory");
                E->gen->spans = ns;
                E->gen_cap = nc;
            }
            E->gen->spans[E->gen->n++] = (JinjaSpan){begin, begin + v.u.s->len};
        }
        return 0;
    }
    default: return jr_fail(r, "internal error: expression node as a statement");
    }
}

static int exec_body(Eval *E, const NodeList *body, Scope *s, Out *o) {
    for (int i = 0; i < body->n; i++) {
        int rc = exec_stmt(E, body->v[i], s, o);
        if (rc) return rc;
    }
    return 0;
}

// ---- entry

int jinja_eval_template(JRender *r, const JinjaTemplate *t, JValue vars, Buf *out, size_t out_start, JinjaSpans *gen) {
    Eval E = {.r = r, .top = out, .top_start = out_start, .gen = gen};
    r->eval = &E;
    if (vars.kind == JV_DICT) E.vars = vars.u.d;
    if (!(E.globals = jdict_new(r, 8)) || jinja_globals_add(r, E.globals) < 0) return -1;
    Scope *root = scope_new(r, NULL);
    if (!root) return -1;
    Out o = {0};
    return exec_body(&E, &t->body, root, &o) < 0 ? -1 : 0;
}

int jinja_render(const JinjaTemplate *t, json_t *vars, const JinjaLimits *lim, Buf *out, JinjaSpans *gen, PailErr *err) {
    JinjaLimits L = lim ? *lim : JINJA_LIMITS_DEFAULT;
    if (!L.max_steps) L.max_steps = 1000000;
    if (!L.max_output) L.max_output = 16u << 20;
    if (!L.max_depth) L.max_depth = 64;
    if (!L.max_work) L.max_work = (uint64_t)L.max_output * JINJA_WORK_PER_OUTPUT;
    PailErr local = {0};
    if (!err) err = &local;
    err_clear(err);
    if (gen) *gen = (JinjaSpans){0};
    // Memory: 64 bytes of arena per byte of allowed output, at least 16 MiB (the input
    // conversation lives there too) and at most 256 MiB.
    size_t cap = L.max_output > (4u << 20) ? (256u << 20) : L.max_output * 64;
    if (cap < (16u << 20)) cap = 16u << 20;
    JRender r = {.arena = {.cap = cap}, .lim = &L, .tname = t->name, .err = err};
    size_t start = out->len;
    int rc = 0;
    JValue v = jv_undefined(NULL);
    if (vars) {
        if (!json_is_object(vars)) rc = jr_fail(&r, "the template's variables must be a JSON object");
        else rc = jv_from_json(&r, vars, &v);
    }
    if (rc == 0) rc = jinja_eval_template(&r, t, v, out, start, gen);
    ja_free_all(&r.arena);
    if (rc < 0) {
        out->len = start;
        if (out->data) out->data[start] = 0;
        if (gen) {
            free(gen->spans);
            *gen = (JinjaSpans){0};
        }
        if (err->code == PAIL_OK) err_set(err, PAIL_ERR_INVALID, "%s: rendering failed", t->name);
        return -1;
    }
    return 0;
}
