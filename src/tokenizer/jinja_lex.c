// The chat-template lexer (jinja_ast.h): template text into tokens as jinja2's lexer splits it
// with trim_blocks and lstrip_blocks on. Newlines are normalized to "\n" and one trailing
// newline is dropped before anything else, as jinja2 does; '-' / '+' markers, trim_blocks
// (one "\n" after %} or #}) and lstrip_blocks (blanks from the line start up to {% or {#)
// shape the data tokens; {% raw %} bodies are data. String literals are decoded as jinja2
// does it: encode("ascii", "backslashreplace").decode("unicode-escape").
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/jinja_ast.h"

typedef struct {
    const char *s;  // normalized source
    size_t n;
    const char *name;
    PailErr *err;
    TokList *out;
    size_t cur_off;  // line/col cursor (offsets asked for only grow, mostly)
    int cur_line;
    size_t cur_ls;
} Lex;

static void lex_pos(Lex *L, size_t off, int *line, int *col) {
    if (off < L->cur_off) L->cur_off = 0, L->cur_line = 1, L->cur_ls = 0;
    for (; L->cur_off < off; L->cur_off++)
        if (L->s[L->cur_off] == '\n') L->cur_line++, L->cur_ls = L->cur_off + 1;
    *line = L->cur_line;
    *col = (int)(off - L->cur_ls) + 1;
}

static int lex_fail(Lex *L, size_t off, const char *msg, const char *what) {
    int line, col;
    lex_pos(L, off, &line, &col);
    return err_set(L->err, PAIL_ERR_INVALID, "%s:%d:%d: %s%s", L->name, line, col, msg, what ? what : "");
}

static int own(TokList *t, char *p) {
    if (t->nowned == t->capowned) {
        int nc = t->capowned ? t->capowned * 2 : 16;
        char **np = realloc(t->owned, (size_t)nc * sizeof *np);
        if (!np) return -1;
        t->owned = np;
        t->capowned = nc;
    }
    t->owned[t->nowned++] = p;
    return 0;
}

static Tok *tok_push(Lex *L, TokKind k, size_t off, const char *p, size_t len) {
    TokList *t = L->out;
    if (t->n == t->cap) {
        int nc = t->cap ? t->cap * 2 : 256;
        Tok *nv = realloc(t->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            err_set(L->err, PAIL_ERR_NOMEM, "%s: out of memory", L->name);
            return NULL;
        }
        t->v = nv;
        t->cap = nc;
    }
    Tok *tk = &t->v[t->n++];
    *tk = (Tok){.kind = k, .p = p, .len = len};
    lex_pos(L, off, &tk->line, &tk->col);
    return tk;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Data before a tag at off: rstrip for '-', lstrip_blocks for block and comment tags.
static int emit_data(Lex *L, size_t start, size_t end, char sign, bool lstrip_ok, bool line_starting) {
    if (sign == '-') {
        while (end > start && is_ws(L->s[end - 1])) end--;
    } else if (sign != '+' && lstrip_ok) {
        size_t lp = end;
        while (lp > start && L->s[lp - 1] != '\n') lp--;
        if ((lp > start || line_starting) && lp < end) {
            bool blank = true;
            for (size_t i = lp; i < end; i++) blank &= is_ws(L->s[i]);
            if (blank) end = lp;
        }
    }
    if (end > start && !tok_push(L, TK_DATA, start, L->s + start, end - start)) return -1;
    return 0;
}

static void put_utf8(char *o, size_t *k, uint32_t cp) {
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) o[(*k)++] = (char)(0xC0 | cp >> 6), o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | cp >> 12);
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | cp >> 18);
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// One UTF-8 code point at p (n bytes left); its length, 1 for a stray byte.
static size_t utf8_cp(const unsigned char *p, size_t n, uint32_t *cp) {
    unsigned c = p[0];
    size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (k > n) k = 1;
    if (k == 1) {
        *cp = c;
        return 1;
    }
    uint32_t v = c & (0x7F >> k);
    for (size_t i = 1; i < k; i++) v = v << 6 | (p[i] & 0x3F);
    *cp = v;
    return k;
}

// Decodes the literal body s[a..b) into a fresh string.
static int decode_string(Lex *L, size_t a, size_t b, Tok *tk) {
    const char *s = L->s;
    char *o = malloc((b - a) * 4 + 1);  // worst case: "\é" becomes "\xe9", growth bounded by 4x
    if (!o || own(L->out, o) < 0) {
        free(o);
        return err_set(L->err, PAIL_ERR_NOMEM, "%s: out of memory", L->name);
    }
    size_t k = 0;
    for (size_t i = a; i < b;) {
        if (s[i] != '\\') {
            o[k++] = s[i++];
            continue;
        }
        if (i + 1 >= b) return lex_fail(L, i, "string literal ends in a lone backslash", NULL);
        char c = s[i + 1];
        i += 2;
        switch (c) {
        case '\n': break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'v': o[k++] = '\v'; break;
        case 'x': case 'u': case 'U': {
            int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < nd; d++) {
                int h = i + (size_t)d < b ? hexval(s[i + (size_t)d]) : -1;
                if (h < 0) return lex_fail(L, i - 2, "truncated \\", c == 'x' ? "xXX escape" : c == 'u' ? "uXXXX escape" : "UXXXXXXXX escape");
                cp = cp << 4 | (uint32_t)h;
            }
            i += (size_t)nd;
            if (cp > 0x10FFFF) return lex_fail(L, i - 10, "illegal Unicode character in \\U escape", NULL);
            if (cp >= 0xD800 && cp <= 0xDFFF) return lex_fail(L, i - 6, "string literal holds a lone surrogate", NULL);
            put_utf8(o, &k, cp);
            break;
        }
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
            uint32_t cp = (uint32_t)(c - '0');
            for (int d = 0; d < 2 && i < b && s[i] >= '0' && s[i] <= '7'; d++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
            put_utf8(o, &k, cp);
            break;
        }
        case 'N': return lex_fail(L, i - 2, "\\N{...} escapes are not supported", NULL);
        default:
            if ((unsigned char)c >= 0x80) {
                // backslashreplace turned the character into \xNN / \uNNNN / \UNNNNNNNN, whose
                // backslash the escaped backslash before it consumes: the text of the escape stays.
                uint32_t cp;
                size_t cl = utf8_cp((const unsigned char *)s + i - 1, b - (i - 1), &cp);
                i += cl - 1;
                k += (size_t)sprintf(o + k, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
            } else {
                o[k++] = '\\';
                o[k++] = c;
            }
        }
    }
    o[k] = 0;
    tk->p = o;
    tk->len = k;
    return 0;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char OPS1[] = "+-/*%~[](){}<>=.:|,;";

// The inside of {{ }} or {% %} from *pos, up to and including its end marker.
static int lex_tag(Lex *L, size_t *pos, bool block, bool *line_starting) {
    const char *s = L->s;
    size_t i = *pos, n = L->n;
    int balance = 0;
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
        if (i >= n) return lex_fail(L, i, block ? "expected '%}'" : "expected '}}'", ", got end of template");
        if (balance == 0) {
            size_t e = 0;
            char sign = 0;
            if ((s[i] == '-' || s[i] == '+') && i + 2 < n && s[i + 1] == (block ? '%' : '}') && s[i + 2] == '}')
                sign = s[i], e = i + 3;
            else if (i + 1 < n && s[i] == (block ? '%' : '}') && s[i + 1] == '}')
                e = i + 2;
            if (sign == '+' && !block) e = 0;  // "+}}" is not an end marker
            if (e) {
                if (!tok_push(L, block ? TK_BLOCK_END : TK_VAR_END, i, s + i, e - i)) return -1;
                if (sign == '-')
                    while (e < n && is_ws(s[e])) e++;
                else if (block && sign != '+' && e < n && s[e] == '\n')
                    e++;
                *line_starting = s[e - 1] == '\n';
                *pos = e;
                return 0;
            }
        }
        char c = s[i];
        if (isalpha((unsigned char)c) || c == '_') {
            size_t j = i + 1;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_')) j++;
            if (!tok_push(L, TK_NAME, i, s + i, j - i)) return -1;
            i = j;
        } else if (c == '0' && i + 2 < n && strchr("bBoOxX", s[i + 1]) &&
                   isxdigit((unsigned char)s[i + 2 + (s[i + 2] == '_')])) {
            // 0b1010, 0o17, 0x1f (jinja2's integer_re: an underscore may precede each digit)
            int base = (s[i + 1] | 0x20) == 'b' ? 2 : (s[i + 1] | 0x20) == 'o' ? 8 : 16;
            size_t j = i + 2;
            uint64_t v = 0;
            bool any = false;
            for (;;) {
                size_t d = j + (j < n && s[j] == '_');
                if (d >= n || !isxdigit((unsigned char)s[d])) break;
                int dv = isdigit((unsigned char)s[d]) ? s[d] - '0' : (s[d] | 0x20) - 'a' + 10;
                if (dv >= base) break;
                if (v > (uint64_t)INT64_MAX / (uint64_t)base || v * (uint64_t)base + (uint64_t)dv > (uint64_t)INT64_MAX)
                    return lex_fail(L, i, "integer literal is larger than 64 bits", NULL);
                v = v * (uint64_t)base + (uint64_t)dv;
                any = true;
                j = d + 1;
            }
            if (!any) return lex_fail(L, i, "invalid number literal", NULL);
            Tok *tk = tok_push(L, TK_INT, i, s + i, j - i);
            if (!tk) return -1;
            tk->i = (int64_t)v;
            i = j;
        } else if (isdigit((unsigned char)c)) {
            char num[128];
            size_t j = i, k = 0;
            bool flt = false, too_long = false;
#define NUM_PUT(ch) (k < sizeof num - 1 ? (void)(num[k++] = (ch)) : (void)(too_long = true))
            while (j < n && (isdigit((unsigned char)s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char)s[j + 1])))) {
                if (s[j] != '_') NUM_PUT(s[j]);
                j++;
            }
            if (j + 1 < n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
                flt = true;
                NUM_PUT(s[j]);
                j++;
                while (j < n && (isdigit((unsigned char)s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char)s[j + 1])))) {
                    if (s[j] != '_') NUM_PUT(s[j]);
                    j++;
                }
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E')) {
                size_t m = j + 1;
                if (m < n && (s[m] == '+' || s[m] == '-')) m++;
                if (m < n && isdigit((unsigned char)s[m])) {
                    flt = true;
                    NUM_PUT('e');
                    for (size_t q = j + 1; q < m; q++) NUM_PUT(s[q]);
                    j = m;
                    while (j < n && (isdigit((unsigned char)s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char)s[j + 1])))) {
                        if (s[j] != '_') NUM_PUT(s[j]);
                        j++;
                    }
                }
            }
            num[k] = 0;
            if (too_long) return lex_fail(L, i, "number literal too long", NULL);
#undef NUM_PUT
            Tok *tk = tok_push(L, flt ? TK_FLOAT : TK_INT, i, s + i, j - i);
            if (!tk) return -1;
            errno = 0;
            if (flt) tk->f = strtod(num, NULL);
            else {
                tk->i = strtoll(num, NULL, 10);
                if (errno == ERANGE) return lex_fail(L, i, "integer literal is larger than 64 bits", NULL);
            }
            i = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) j += s[j] == '\\' ? 2 : 1;
            if (j >= n) return lex_fail(L, i, "unterminated string literal", NULL);
            Tok *tk = tok_push(L, TK_STRING, i, NULL, 0);
            if (!tk) return -1;
            if (decode_string(L, i + 1, j, &L->out->v[L->out->n - 1]) < 0) return -1;
            i = j + 1;
        } else {
            size_t len = 0;
            for (size_t k = 0; k < sizeof OPS2 / sizeof *OPS2; k++)
                if (i + 1 < n && s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1]) len = 2;
            if (!len && c && strchr(OPS1, c)) len = 1;
            if (!len) {
                char what[16];
                snprintf(what, sizeof what, "'%c'", c);
                return lex_fail(L, i, "unexpected character ", isprint((unsigned char)c) ? what : "(control or non-ASCII)");
            }
            if (c == '(' || c == '[' || c == '{') balance++;
            else if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
            if (!tok_push(L, TK_OP, i, s + i, len)) return -1;
            i += len;
        }
    }
}

// "{%[-+]? WORD [-+]?%}" at i: *sign is the opening marker, *after the offset past the tag.
static bool match_tag_word(const char *s, size_t n, size_t i, const char *word, char *sign, size_t *after, bool *dash_end,
                           bool *plus_end) {
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return false;
    size_t j = i + 2;
    *sign = 0;
    if (j < n && (s[j] == '-' || s[j] == '+')) *sign = s[j++];
    while (j < n && is_ws(s[j])) j++;
    size_t wl = strlen(word);
    if (j + wl > n || memcmp(s + j, word, wl) != 0) return false;
    j += wl;
    while (j < n && is_ws(s[j])) j++;
    *dash_end = *plus_end = false;
    if (j + 2 < n && (s[j] == '-' || s[j] == '+') && s[j + 1] == '%' && s[j + 2] == '}') {
        *dash_end = s[j] == '-';
        *plus_end = s[j] == '+';
        j += 3;
    } else if (j + 1 < n && s[j] == '%' && s[j + 1] == '}')
        j += 2;
    else
        return false;
    *after = j;
    return true;
}

int jinja_lex(TokList *out, const char *src, size_t len, const char *name, PailErr *err) {
    memset(out, 0, sizeof *out);
    // Newlines normalized, one trailing newline dropped (jinja2's keep_trailing_newline=False).
    char *s = malloc(len + 1);
    if (!s || own(out, s) < 0) {
        free(s);
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    Lex L = {.s = s, .n = n, .name = name, .err = err, .out = out, .cur_line = 1};
    size_t pos = 0;
    bool line_starting = true;
    while (pos < n) {
        size_t k = pos;
        while (k + 1 < n && !(s[k] == '{' && (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#'))) k++;
        if (k + 1 >= n) {
            if (emit_data(&L, pos, n, 0, false, false) < 0) return -1;
            break;
        }
        char kind = s[k + 1];
        char sign = k + 2 < n && (s[k + 2] == '-' || s[k + 2] == '+') ? s[k + 2] : 0;
        size_t after;
        bool dash_end, plus_end;
        char rsign;
        if (kind == '%' && match_tag_word(s, n, k, "raw", &rsign, &after, &dash_end, &plus_end)) {
            if (emit_data(&L, pos, k, sign, true, line_starting) < 0) return -1;
            if (dash_end)
                while (after < n && is_ws(s[after])) after++;
            // the body runs to the first {% endraw %}
            size_t e = after;
            for (;; e++) {
                if (e + 1 >= n) return lex_fail(&L, k, "expected '{% endraw %}' for this raw block", ", got end of template");
                if (match_tag_word(s, n, e, "endraw", &rsign, &pos, &dash_end, &plus_end)) break;
            }
            if (emit_data(&L, after, e, rsign, true, after > 0 && s[after - 1] == '\n') < 0) return -1;
            if (dash_end)
                while (pos < n && is_ws(s[pos])) pos++;
            else if (!plus_end && pos < n && s[pos] == '\n')
                pos++;
            line_starting = s[pos - 1] == '\n';
            continue;
        }
        if (emit_data(&L, pos, k, sign, kind != '{', line_starting) < 0) return -1;
        size_t body = k + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t e = body;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) return lex_fail(&L, k, "missing end of comment tag", NULL);
            char esign = e > body && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
            pos = e + 2;
            if (esign == '-')
                while (pos < n && is_ws(s[pos])) pos++;
            else if (esign != '+' && pos < n && s[pos] == '\n')
                pos++;
            line_starting = s[pos - 1] == '\n';
            continue;
        }
        if (!tok_push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, k, s + k, body - k)) return -1;
        pos = body;
        if (lex_tag(&L, &pos, kind == '%', &line_starting) < 0) return -1;
    }
    if (!tok_push(&L, TK_EOF, n, s + n, 0)) return -1;
    return 0;
}

void jinja_toks_free(TokList *t) {
    for (int i = 0; i < t->nowned; i++) free(t->owned[i]);
    free(t->owned);
    free(t->v);
    memset(t, 0, sizeof *t);
}
