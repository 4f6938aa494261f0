// Python's printf-style formatting, `'%s: %d' % (a, b)` and jinja2's `format` filter, for the
// chat-template interpreter (jinja_internal.h: jinja_printf). CPython's rules
// (Objects/unicodeobject.c, PyUnicode_Format): %(key) from a dict, flags - + space # 0, width and
// precision (or *), conversions s r a d i u x X o c e E f F g G %; one value that is not a tuple is
// the only argument; arguments left over fail. Floats print with the C library's printf, which is
// correctly rounded in glibc as CPython's own dtoa is; integers are formatted here, sign apart
// (Python's '%x' % -255 is '-ff'). Also str.format's format specs (jl_format_spec, jinja_lib.h),
// the same numbers through the same printf.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/jinja_lib.h"

typedef struct {
    JRender *r;
    JValue args;        // the right operand
    const JValue *pos;  // positional arguments (a tuple's items, or &args)
    size_t npos, next;
    bool mapping;  // args is a dict used with %(key)
} Printf;

static int next_arg(Printf *P, JValue *v) {
    if (P->next >= P->npos) return jr_fail(P->r, "not enough arguments for format string");
    *v = P->pos[P->next++];
    return 0;
}

// Pads body (sign and prefix apart, so zero padding goes between them and the digits).
static int put_padded(JRender *r, JBuf *out, const char *sign, const char *body, size_t blen, int64_t width, bool left,
                      bool zero) {
    size_t slen = strlen(sign), nch = slen;
    for (size_t i = 0; i < blen; i++) nch += ((unsigned char)body[i] & 0xC0) != 0x80;
    int64_t pad = width > (int64_t)nch ? width - (int64_t)nch : 0;
    if ((uint64_t)pad > r->lim->max_output)
        return jr_fail(r, "format width %lld is over the output limit", (long long)width);
    if (!left && !zero)
        for (int64_t i = 0; i < pad; i++)
            if (jbuf_put(r, out, " ", 1) < 0) return -1;
    if (jbuf_put(r, out, sign, slen) < 0) return -1;
    if (!left && zero)
        for (int64_t i = 0; i < pad; i++)
            if (jbuf_put(r, out, "0", 1) < 0) return -1;
    if (jbuf_put(r, out, body, blen) < 0) return -1;
    if (left)
        for (int64_t i = 0; i < pad; i++)
            if (jbuf_put(r, out, " ", 1) < 0) return -1;
    return 0;
}

static const char *type_of(JValue v) { return jv_type_name(v); }

static int conv_int(Printf *P, JValue v, char c, int64_t *i) {
    if (v.kind == JV_INT) *i = v.u.i;
    else if (v.kind == JV_BOOL) *i = v.u.b;
    else if (v.kind == JV_FLOAT && (c == 'd' || c == 'i' || c == 'u')) {
        if (!isfinite(v.u.f))
            return jr_fail(P->r, "cannot convert float %s to integer", isnan(v.u.f) ? "NaN" : "infinity");
        if (fabs(v.u.f) >= 9.2e18) return jr_fail(P->r, "integer of %%%c is beyond 64 bits", c);
        *i = (int64_t)v.u.f;  // int(): truncation
    } else if (v.kind == JV_UNDEFINED) {
        return jr_fail_undefined(P->r, v);
    } else {
        if (c == 'd' || c == 'i' || c == 'u')
            return jr_fail(P->r, "%%%c format: a real number is required, not %s", c, type_of(v));
        return jr_fail(P->r, "%%%c format: an integer is required, not %s", c, type_of(v));
    }
    return 0;
}

static int one_spec(Printf *P, const char *s, size_t n, size_t *k, JBuf *out) {
    JRender *r = P->r;
    size_t i = *k;                                                          // just after '%'
    if (i < n && s[i] == '%') return *k = i + 1, jbuf_put(r, out, "%", 1);  // %% only: '%5%' is an error
    JValue v = {0};
    bool have_v = false;
    if (i < n && s[i] == '(') {
        size_t depth = 1, j = i + 1;
        while (j < n && depth) {
            if (s[j] == '(') depth++;
            else if (s[j] == ')') depth--;
            j++;
        }
        if (depth) return jr_fail(r, "incomplete format key");
        if (P->args.kind != JV_DICT) return jr_fail(r, "format requires a mapping");
        JValue key;
        if (jv_str_new(r, s + i + 1, j - i - 2, &key) < 0) return -1;
        const JValue *hit = jdict_get(P->args.u.d, key);
        if (!hit) return jr_fail(r, "KeyError: '%.*s'", (int)(j - i - 2), s + i + 1);
        v = *hit;
        have_v = true;
        P->mapping = true;
        i = j;
    }
    bool left = false, zero = false, plus = false, space = false, alt = false;
    for (; i < n; i++) {
        if (s[i] == '-') left = true;
        else if (s[i] == '0') zero = true;
        else if (s[i] == '+') plus = true;
        else if (s[i] == ' ') space = true;
        else if (s[i] == '#') alt = true;
        else break;
    }
    int64_t width = -1, prec = -1;
    if (i < n && s[i] == '*') {
        JValue w = {0};
        if (next_arg(P, &w) < 0) return -1;
        if (w.kind != JV_INT) return jr_fail(r, "* wants int");
        width = w.u.i;
        if (width < 0) left = true, width = -width;
        i++;
    } else {
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if ((width = (width < 0 ? 0 : width) * 10 + (s[i] - '0')) > 100000000) return jr_fail(r, "width too big");
    }
    if (i < n && s[i] == '.') {
        i++;
        if (i < n && s[i] == '*') {
            JValue p = {0};
            if (next_arg(P, &p) < 0) return -1;
            if (p.kind != JV_INT) return jr_fail(r, "* wants int");
            prec = p.u.i < 0 ? 0 : p.u.i;
            i++;
        } else {
            for (prec = 0; i < n && s[i] >= '0' && s[i] <= '9'; i++)
                if ((prec = prec * 10 + (s[i] - '0')) > 100000000) return jr_fail(r, "precision too big");
        }
    }
    while (i < n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;  // length modifiers: ignored, as CPython
    if (i >= n) return jr_fail(r, "incomplete format");
    char c = s[i++];
    *k = i;
    if (c == '%') return jr_fail(r, "unsupported format character '%%' (0x25) at index %zu", i - 1);
    if (!have_v && next_arg(P, &v) < 0) return -1;
    const char *sign = "";
    switch (c) {
    case 's':
    case 'r':
    case 'a': {
        JBuf t = {0};
        if ((c == 's' ? jv_to_str(r, v, &t) : jv_to_repr(r, v, &t)) < 0) return -1;
        size_t len = t.len;
        if (prec >= 0) {  // at most prec code points
            size_t off = 0;
            for (int64_t m = 0; m < prec && off < len; m++) {
                int32_t cp;
                off += jl_utf8_next(t.p + off, len - off, &cp);
            }
            len = off;
        }
        return put_padded(r, out, "", t.p ? t.p : "", len, width, left, false);
    }
    case 'c': {
        JBuf t = {0};
        if (v.kind == JV_STR && jv_str_nchars(v.u.s) == 1) {
            if (jbuf_put(r, &t, v.u.s->p, v.u.s->len) < 0) return -1;
        } else if ((v.kind == JV_INT && v.u.i >= 0 && v.u.i <= 0x10FFFF) || v.kind == JV_BOOL) {
            if (jl_utf8_put(r, &t, v.kind == JV_BOOL ? v.u.b : (int32_t)v.u.i) < 0) return -1;
        } else {
            return jr_fail(r, "%%c requires an int or a unicode character, not %s", type_of(v));
        }
        return put_padded(r, out, "", t.p, t.len, width, left, false);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
        int64_t iv = 0;
        if (conv_int(P, v, c, &iv) < 0) return -1;
        bool neg = iv < 0;
        uint64_t mag = neg ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
        char digits[80];
        int nd = snprintf(digits, sizeof digits, c == 'x' ? "%llx" : c == 'X' ? "%llX" :
                                                                 c == 'o'     ? "%llo" :
                                                                                "%llu",
                          (unsigned long long)mag);
        char body[600];
        if (prec > 500) return jr_fail(r, "precision too big");
        int zeros = prec > nd ? (int)(prec - nd) : 0;  // '%.5d' % 7 is 00007
        const char *pre = alt ? (c == 'x' ? "0x" : c == 'X' ? "0X" :
                                               c == 'o'     ? "0o" :
                                                              "") :
                                "";
        char signpre[8];
        snprintf(signpre, sizeof signpre, "%s%s", neg ? "-" : plus ? "+" :
                                                          space    ? " " :
                                                                     "",
                 pre);
        memset(body, '0', (size_t)zeros);
        int bl = zeros + snprintf(body + zeros, sizeof body - (size_t)zeros, "%s", digits);
        return put_padded(r, out, signpre, body, (size_t)bl, width, left, zero && !left);
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G': {
        double f;
        if (v.kind == JV_FLOAT) f = v.u.f;
        else if (v.kind == JV_INT) f = (double)v.u.i;
        else if (v.kind == JV_BOOL) f = v.u.b;
        else if (v.kind == JV_UNDEFINED) return jr_fail_undefined(r, v);
        else return jr_fail(r, "must be real number, not %s", type_of(v));
        if (prec < 0) prec = 6;
        if (prec > 500) return jr_fail(r, "precision too big");
        char fmt[16], body[700];
        snprintf(fmt, sizeof fmt, "%%%s.%d%c", alt ? "#" : "", (int)prec, c);
        int bl = snprintf(body, sizeof body, fmt, fabs(f));
        if (bl < 0 || bl >= (int)sizeof body) return jr_fail(r, "a formatted float is too long");
        sign = signbit(f) && !isnan(f) ? "-" : plus ? "+" :
                                           space    ? " " :
                                                      "";
        return put_padded(r, out, sign, body, (size_t)bl, width, left, zero && !left && isfinite(f));
    }
    default:
        return jr_fail(r, "unsupported format character '%c' (0x%x) at index %zu", c, (unsigned char)c, i - 1);
    }
}

int jinja_printf(JRender *r, JValue fmt, JValue args, JValue *out) {
    Printf P = {.r = r, .args = args};
    if (args.kind == JV_TUPLE) P.pos = args.u.l->v, P.npos = args.u.l->n;
    else P.pos = &P.args, P.npos = 1;
    const char *s = fmt.u.s->p;
    size_t n = fmt.u.s->len;
    if (jr_work(r, n) < 0) return -1;
    JBuf b = {0};
    for (size_t i = 0; i < n;) {
        const char *pct = memchr(s + i, '%', n - i);
        size_t lit = pct ? (size_t)(pct - (s + i)) : n - i;
        if (lit && jbuf_put(r, &b, s + i, lit) < 0) return -1;
        i += lit;
        if (!pct) break;
        i++;
        if (one_spec(&P, s, n, &i, &b) < 0) return -1;
    }
    // leftovers: CPython checks that every positional argument was used (a dict never is)
    if (P.next < P.npos && !P.mapping && args.kind != JV_DICT && args.kind != JV_LIST)  // both are "mappings" there
        return jr_fail(r, "not all arguments converted during string formatting");
    return jl_str_from(r, &b, out);
}

// ---- str.format's format spec (Python's format-spec mini-language)

// Groups the digits of a run of digits with sep every `every` digits (from the right).
static int put_grouped(JRender *r, JBuf *b, const char *d, size_t n, char sep, int every) {
    for (size_t i = 0; i < n; i++) {
        if (sep && i && (n - i) % (size_t)every == 0 && jbuf_put(r, b, &sep, 1) < 0) return -1;
        if (jbuf_put(r, b, d + i, 1) < 0) return -1;
    }
    return 0;
}

int jl_format_spec(JRender *r, JValue v, const char *sp, size_t n, JBuf *out) {
    if (n == 0) return jv_to_str(r, v, out);  // format(x, '') is str(x)
    size_t i = 0;
    char fill[5] = " ", align = 0, sign = 0, type = 0, group = 0;
    bool alt = false, zero = false, fill_given = false, align_given;
    int64_t width = -1, prec = -1;
    // [[fill]align]: fill is one code point
    int32_t cp;
    size_t k = jl_utf8_next(sp, n, &cp);
    if (k < n && strchr("<>=^", sp[k])) {
        memcpy(fill, sp, k), fill[k] = 0;
        fill_given = true;
        align = sp[k];
        i = k + 1;
    } else if (strchr("<>=^", sp[0])) {
        align = sp[0];
        i = 1;
    }
    if (i < n && strchr("+- ", sp[i])) sign = sp[i++];
    if (i < n && sp[i] == 'z') i++;  // negative zero to zero: only matters for -0.0, ignored
    if (i < n && sp[i] == '#') alt = true, i++;
    if (i < n && sp[i] == '0') zero = true, i++;
    for (; i < n && sp[i] >= '0' && sp[i] <= '9'; i++)
        if ((width = (width < 0 ? 0 : width) * 10 + (sp[i] - '0')) > 100000000)
            return jr_fail(r, "Too many decimal digits in format string");
    if (i < n && (sp[i] == ',' || sp[i] == '_')) group = sp[i++];
    if (i < n && sp[i] == '.') {
        i++;
        if (i >= n || sp[i] < '0' || sp[i] > '9') return jr_fail(r, "Format specifier missing precision");
        for (prec = 0; i < n && sp[i] >= '0' && sp[i] <= '9'; i++)
            if ((prec = prec * 10 + (sp[i] - '0')) > 500) return jr_fail(r, "precision too big");
    }
    if (i < n) type = sp[i++];
    if (i < n) return jr_fail(r, "Invalid format specifier '%.*s'", (int)n, sp);
    align_given = align != 0;
    bool is_num = v.kind == JV_INT || v.kind == JV_BOOL || v.kind == JV_FLOAT;
    // CPython: '0' makes the fill '0' unless one is given, and the alignment '=' for numbers unless given
    if (zero && !fill_given) fill[0] = '0', fill[1] = 0;
    if (zero && !align_given && is_num && type != 's') align = '=';
    if (group && (type == 'n' || type == 'c' || type == 's' || (group == ',' && type && strchr("boxX", type)) ||
                  (!type && v.kind == JV_STR)))
        return jr_fail(r, "Cannot specify '%c' with '%c'.", group, type ? type : 's');
    if (type == 'c' && sign) return jr_fail(r, "Sign not allowed with integer format specifier 'c'");
    if (type == 'c' && alt) return jr_fail(r, "Alternate form (#) not allowed with integer format specifier 'c'");
    if (alt && !type && v.kind == JV_FLOAT)  // repr() in alternate form ('1.e+16'): not done here
        return jr_fail(r, "format: '#' without a type for a float is not supported");
    JBuf body = {0};
    const char *sgn = "";
    char pre[3] = "";
    bool numeric = false;
    if (v.kind == JV_STR || ((v.kind == JV_NONE || v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_DICT ||
                              v.kind == JV_UNDEFINED) &&
                             !type && !sign && !alt && !group && align != '=')) {
        if (v.kind != JV_STR && (width >= 0 || prec >= 0 || align))  // object.__format__ takes an empty spec only
            return jr_fail(r, "unsupported format string passed to %s.__format__", jv_type_name(v));
        if (type && type != 's') return jr_fail(r, "Unknown format code '%c' for object of type 'str'", type);
        if (sign) return jr_fail(r, "Sign not allowed in string format specifier");
        if (alt) return jr_fail(r, "Alternate form (#) not allowed in string format specifier");
        if (align == '=') return jr_fail(r, "'=' alignment not allowed in string format specifier");
        if (jv_to_str(r, v, &body) < 0) return -1;
        if (prec >= 0) {  // at most prec code points
            size_t off = 0;
            for (int64_t m = 0; m < prec && off < body.len; m++) off += jl_utf8_next(body.p + off, body.len - off, &cp);
            body.len = off;
        }
        if (!align) align = '<';
    } else if ((v.kind == JV_INT || v.kind == JV_BOOL) && (!type || strchr("bcdoxXn", type))) {
        numeric = true;
        int64_t iv = v.kind == JV_INT ? v.u.i : v.u.b;
        if (prec >= 0) return jr_fail(r, "Precision not allowed in integer format specifier");
        if (type == 'c') {
            if (iv < 0 || iv > 0x10FFFF) return jr_fail(r, "%%c arg not in range(0x110000)");
            if (jl_utf8_put(r, &body, (int32_t)iv) < 0) return -1;
        } else {
            uint64_t mag = iv < 0 ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
            char d[80];
            int nd = snprintf(d, sizeof d, type == 'x' ? "%llx" : type == 'X' ? "%llX" :
                                                              type == 'o'     ? "%llo" :
                                                                                "%llu",
                              (unsigned long long)mag);
            if (type == 'b') {
                nd = 0;
                for (int bit = 63; bit >= 0; bit--)
                    if (nd || (mag >> bit) & 1 || bit == 0) d[nd++] = (char)('0' + ((mag >> bit) & 1));
                d[nd] = 0;
            }
            if (alt && type && strchr("boxX", type)) pre[0] = '0', pre[1] = type == 'X' ? 'X' : type;
            sgn = iv < 0 ? "-" : sign == '+' ? "+" :
                             sign == ' '     ? " " :
                                               "";
            if (put_grouped(r, &body, d, (size_t)nd, group, type && strchr("boxX", type) ? 4 : 3) < 0) return -1;
        }
    } else if (v.kind == JV_FLOAT || v.kind == JV_INT || v.kind == JV_BOOL) {
        numeric = true;
        double f = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i :
                                                                   v.u.b;
        if (type == 'n') type = 'g';  // the locale's 'g': the C locale's
        if (type && !strchr("eEfFgG%", type)) return jr_fail(r, "Unknown format code '%c' for object of type 'float'", type);
        sgn = signbit(f) && !isnan(f) ? "-" : sign == '+' ? "+" :
                                          sign == ' '     ? " " :
                                                            "";
        double a = fabs(f);
        char fmt[16], d[700];
        int nd;
        if (!type && prec < 0) {  // repr()
            JBuf t = {0};
            if (jv_to_str(r, jv_float(a), &t) < 0) return -1;
            nd = snprintf(d, sizeof d, "%.*s", (int)t.len, t.p);
        } else if (type == '%') {
            snprintf(fmt, sizeof fmt, "%%%s.%df", alt ? "#" : "", (int)(prec < 0 ? 6 : prec));
            nd = snprintf(d, sizeof d - 1, fmt, a * 100);
            if (nd > 0 && nd < (int)sizeof d - 1) d[nd++] = '%', d[nd] = 0;
        } else if (!type) {  // precision, no type: 'g', but scientific from exponent p - 1 on and a
                             // digit after the point in fixed notation (format(100.0, '.3') is 1e+02)
            int p = prec == 0 ? 1 : (int)prec, ex = 0;
            if (isfinite(a) && a != 0) {
                char e[40];
                snprintf(e, sizeof e, "%.*e", p - 1, a);
                ex = atoi(strchr(e, 'e') + 1);
            }
            if (!isfinite(a)) {
                nd = snprintf(d, sizeof d, "%s", isnan(a) ? "nan" : "inf");
            } else if (ex < -4 || ex >= p - 1) {
                nd = snprintf(d, sizeof d, "%.*e", p - 1, a);
                char *e = strchr(d, 'e'), *z = e;  // trailing zeros after the point go, as in 'g'
                if (memchr(d, '.', (size_t)(e - d))) {
                    while (z > d && z[-1] == '0') z--;
                    if (z > d && z[-1] == '.') z--;
                    memmove(z, e, strlen(e) + 1);
                }
                nd = (int)strlen(d);
            } else {
                nd = snprintf(d, sizeof d, "%.*f", p - 1 - ex, a);
                if (strchr(d, '.')) {
                    while (nd > 0 && d[nd - 1] == '0') d[--nd] = 0;
                    if (d[nd - 1] == '.') d[nd++] = '0', d[nd] = 0;
                } else if (nd + 2 < (int)sizeof d) {
                    d[nd++] = '.', d[nd++] = '0', d[nd] = 0;
                }
            }
        } else {
            snprintf(fmt, sizeof fmt, "%%%s.%d%c", alt ? "#" : "", (int)(prec < 0 ? 6 : prec), type);
            nd = snprintf(d, sizeof d, fmt, a);
        }
        if (nd < 0 || nd >= (int)sizeof d) return jr_fail(r, "a formatted float is too long");
        char *dot = strpbrk(d, ".eE%");
        size_t intlen = dot ? (size_t)(dot - d) : (size_t)nd;
        if (!isfinite(a)) intlen = (size_t)nd, group = 0;
        if (put_grouped(r, &body, d, intlen, group, 3) < 0 || jbuf_put(r, &body, d + intlen, (size_t)nd - intlen) < 0)
            return -1;
    } else {
        return jr_fail(r, "unsupported format string passed to %s.__format__", jv_type_name(v));
    }
    if (!align) align = numeric ? '>' : '<';
    size_t nch = strlen(sgn) + strlen(pre);
    for (size_t q = 0; q < body.len; q++) nch += ((unsigned char)body.p[q] & 0xC0) != 0x80;
    int64_t pad = width > (int64_t)nch ? width - (int64_t)nch : 0;
    if ((uint64_t)pad > r->lim->max_output)
        return jr_fail(r, "format width %lld is over the output limit", (long long)width);
    if (pad && group && fill[0] == '0' && !fill[1] && align == '=')                             // CPython groups the zero padding too
        return jr_fail(r, "format: zero padding with a thousands separator is not supported");  // ('0,000,123')
    int64_t left = align == '<' ? 0 : align == '^' ? pad / 2 :
                                                     pad,
            right = pad - left;
    size_t fl = strlen(fill);
    if (align != '=')
        for (int64_t q = 0; q < left; q++)
            if (jbuf_put(r, out, fill, fl) < 0) return -1;
    if (jbuf_put(r, out, sgn, strlen(sgn)) < 0 || jbuf_put(r, out, pre, strlen(pre)) < 0) return -1;
    if (align == '=')
        for (int64_t q = 0; q < pad; q++)
            if (jbuf_put(r, out, fill, fl) < 0) return -1;
    if (jbuf_put(r, out, body.p ? body.p : "", body.len) < 0) return -1;
    if (align != '=')
        for (int64_t q = 0; q < right; q++)
            if (jbuf_put(r, out, fill, fl) < 0) return -1;
    return 0;
}
