// Normalizers (NFC/NFD/NFKC/NFKD via utf8proc, Prepend, Replace, Lowercase, Strip, Sequence)
// and pre-tokenizers (Split with a regex or string pattern, evaluated by PCRE2 in UTF + UCP
// mode with JIT when available, invert honoured; Digits, a Split on \p{N}; ByteLevel with the GPT-2 byte map and optional regex /
// prefix space; Metaspace, SentencePiece's space marker), plus the UTF-8 helpers the module
// shares. Anything else in tokenizer.json is refused.
#define _GNU_SOURCE  // memmem
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "tokenizer/tok_internal.h"

// ---- GPT-2 bytes_to_unicode: printable Latin-1 bytes stay themselves, the others
// (controls, space, 0x7f-0xa0, 0xad) map to 256, 257, ... in byte order.
static uint16_t byte_char[256];
static int16_t char_byte[324];
static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;

static void byte_map_init(void) {
    int next = 256;
    for (int i = 0; i < 324; i++) char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        byte_char[b] = (uint16_t)(keep ? b : next++);
        char_byte[byte_char[b]] = (int16_t)b;
    }
}

uint32_t tok_byte_char(uint8_t b) {
    pthread_once(&byte_map_once, byte_map_init);
    return byte_char[b];
}

int tok_char_to_byte(uint32_t cp) {
    pthread_once(&byte_map_once, byte_map_init);
    return cp < 324 ? char_byte[cp] : -1;
}

// ---- UTF-8

size_t utf8_decode1(const uint8_t *s, size_t len, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80 || len < 2) { *cp = c; return 1; }
    if (c < 0xe0) { *cp = (uint32_t)(c & 0x1f) << 6 | (s[1] & 0x3f); return 2; }
    if (c < 0xf0 || len < 4) { *cp = (uint32_t)(c & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f); return 3; }
    *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
    return 4;
}

size_t utf8_encode1(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3f)); out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f)); out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

// ---- normalizers

static NormStep *norm_new(Tokenizer *tok, PailErr *err) {
    NormStep *p = realloc(tok->norm, (size_t)(tok->n_norm + 1) * sizeof *p);
    if (!p) { err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name); return NULL; }
    tok->norm = p;
    memset(&p[tok->n_norm], 0, sizeof *p);
    return &p[tok->n_norm++];
}

static char *dup_json_string(json_t *v, size_t *len) {
    *len = json_string_length(v);
    char *p = malloc(*len + 1);
    if (p) memcpy(p, json_string_value(v), *len + 1);
    return p;
}

static int normalizer_one(Tokenizer *tok, json_t *j, PailErr *err) {
    json_t *type = json_object_get(j, "type");
    const char *t = json_is_string(type) ? json_string_value(type) : NULL;
    if (!t) return err_set(err, PAIL_ERR_INVALID, "%s: normalizer without a \"type\"", tok->name);
    if (!strcmp(t, "Sequence")) {
        json_t *list = json_object_get(j, "normalizers");
        if (!json_is_array(list)) return err_set(err, PAIL_ERR_INVALID, "%s: normalizer Sequence without a \"normalizers\" array", tok->name);
        for (size_t i = 0; i < json_array_size(list); i++)
            if (normalizer_one(tok, json_array_get(list, i), err) < 0) return -1;
        return 0;
    }
    int opt = -1;
    if (!strcmp(t, "NFC")) opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    else if (!strcmp(t, "NFD")) opt = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    else if (!strcmp(t, "NFKC")) opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else if (!strcmp(t, "NFKD")) opt = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    else if (strcmp(t, "Prepend") && strcmp(t, "Replace") && strcmp(t, "Lowercase") && strcmp(t, "Strip"))
        return err_set(err, PAIL_ERR_UNSUPPORTED,
                       "%s: normalizer '%s' is not supported (pail implements NFC, NFD, NFKC, NFKD, Prepend, Replace, Lowercase, Strip and Sequence)",
                       tok->name, t);
    NormStep *n = norm_new(tok, err);
    if (!n) return -1;
    if (opt >= 0) { n->kind = NORM_UTF8PROC; n->opts = opt; return 0; }
    if (!strcmp(t, "Lowercase")) { n->kind = NORM_LOWERCASE; return 0; }
    if (!strcmp(t, "Strip")) {
        n->kind = NORM_STRIP;
        n->left = json_is_true(json_object_get(j, "strip_left"));
        n->right = json_is_true(json_object_get(j, "strip_right"));
        return 0;
    }
    if (!strcmp(t, "Prepend")) {
        json_t *p = json_object_get(j, "prepend");
        if (!json_is_string(p)) return err_set(err, PAIL_ERR_INVALID, "%s: normalizer Prepend without a \"prepend\" string", tok->name);
        n->kind = NORM_PREPEND;
        if (!(n->content = dup_json_string(p, &n->content_len))) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
        return 0;
    }
    // Replace: the content is literal (no group references), every match replaced
    json_t *pat = json_object_get(j, "pattern"), *c = json_object_get(j, "content");
    json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
    if ((!json_is_string(re) && !json_is_string(str)) || !json_is_string(c))
        return err_set(err, PAIL_ERR_INVALID, "%s: normalizer Replace needs pattern {\"String\"|\"Regex\": ...} and a \"content\" string", tok->name);
    n->kind = NORM_REPLACE;
    json_t *pv = json_is_string(re) ? re : str;
    if (!(n->pat = dup_json_string(pv, &n->pat_len)) || !(n->content = dup_json_string(c, &n->content_len)))
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    if (json_is_string(re)) {
        if (!(n->re = tok_regex_compile(tok, n->pat, n->pat_len, false, "normalizer Replace", err))) return -1;
        if (!(n->md = pcre2_match_data_create_from_pattern(n->re, NULL))) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    } else if (!n->pat_len) {
        return err_set(err, PAIL_ERR_INVALID, "%s: normalizer Replace with an empty pattern", tok->name);
    }
    return 0;
}

int normalizer_load(Tokenizer *tok, json_t *j, PailErr *err) {
    return !j || json_is_null(j) ? 0 : normalizer_one(tok, j, err);
}

void normalizer_free(Tokenizer *tok) {
    for (int i = 0; i < tok->n_norm; i++) {
        free(tok->norm[i].pat);
        free(tok->norm[i].content);
        pcre2_match_data_free(tok->norm[i].md);
        pcre2_code_free(tok->norm[i].re);
    }
    free(tok->norm);
    tok->norm = NULL;
    tok->n_norm = 0;
}

static bool is_space_cp(uint32_t c) {  // Rust char::is_whitespace (Strip's trim)
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// What normalizing may make of a text of len bytes, as the chat template's work budget
// bounds rendering: NORM_GROWTH x its length plus 4 KiB. Real normalizers grow text at
// most ~11x (NFKD of U+FDFA), Replace ' ' -> '\u2581' 3x; a hostile Replace (one char to
// a megabyte, or steps that each multiply) would otherwise grow it without bound.
#define NORM_GROWTH 16
static size_t norm_limit(size_t len) { return len > (SIZE_MAX - 4096) / NORM_GROWTH ? SIZE_MAX : len * NORM_GROWTH + 4096; }

static int norm_too_long(const Tokenizer *tok, const NormStep *n, size_t limit, PailErr *err) {
    static const char *kind[] = {"NFC/NFD/NFKC/NFKD", "Prepend", "Replace", "Lowercase", "Strip"};
    return err_set(err, PAIL_ERR_INVALID, "%s: normalizer %s grows the text past %zu bytes (%dx its length + 4 KiB)",
                   tok->name, kind[n->kind], limit, NORM_GROWTH);
}

// One step from in to out (out is reset first); in is valid UTF-8. limit: the most bytes out may hold.
static int norm_step(const Tokenizer *tok, const NormStep *n, const uint8_t *s, size_t len, size_t limit, Buf *out,
                     PailErr *err) {
    buf_reset(out);
    int rc = 0;
    switch (n->kind) {
    case NORM_UTF8PROC: {
        bool ascii = true;  // ASCII is unchanged by every normal form
        for (size_t i = 0; i < len && ascii; i++) ascii = s[i] < 0x80;
        if (ascii || !len) { rc = buf_append(out, s, len); break; }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)len, &dst, (utf8proc_option_t)n->opts);
        if (m < 0) return err_set(err, PAIL_ERR_INVALID, "%s: normalizer: %s", tok->name, utf8proc_errmsg(m));
        rc = buf_append(out, dst, (size_t)m);
        free(dst);
        break;
    }
    case NORM_PREPEND:  // the library prepends to non-empty text only
        if (len) rc = buf_append(out, n->content, n->content_len);
        rc |= buf_append(out, s, len);
        break;
    case NORM_LOWERCASE:  // Rust's char::to_lowercase: the simple mapping, but for U+0130's two chars
        for (size_t i = 0; i < len && rc == 0;) {
            uint32_t cp;
            i += utf8_decode1(s + i, len - i, &cp);
            char u[4];
            if (cp == 0x130) { rc = buf_append(out, "i\xcc\x87", 3); continue; }
            rc = buf_append(out, u, utf8_encode1((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u));
        }
        break;
    case NORM_STRIP: {
        size_t a = 0, b = len;
        uint32_t cp;
        while (n->left && a < b) {
            size_t cl = utf8_decode1(s + a, b - a, &cp);
            if (!is_space_cp(cp)) break;
            a += cl;
        }
        while (n->right && b > a) {
            size_t p = b - 1;
            while (p > a && (s[p] & 0xc0) == 0x80) p--;
            utf8_decode1(s + p, b - p, &cp);
            if (!is_space_cp(cp)) break;
            b = p;
        }
        rc = buf_append(out, s + a, b - a);
        break;
    }
    case NORM_REPLACE:
        if (!n->re) {
            size_t i = 0;
            for (;;) {
                const uint8_t *hit = len - i >= n->pat_len ? memmem(s + i, len - i, n->pat, n->pat_len) : NULL;
                if (!hit) break;
                if (out->len + (size_t)(hit - (s + i)) + n->content_len > limit) return norm_too_long(tok, n, limit, err);
                rc |= buf_append(out, s + i, (size_t)(hit - (s + i)));
                rc |= buf_append(out, n->content, n->content_len);
                i = (size_t)(hit - s) + n->pat_len;
            }
            rc |= buf_append(out, s + i, len - i);
            break;
        }
        size_t off = 0, prev = 0;
        while (off <= len) {
            int m = pcre2_match(n->re, s, len, off, PCRE2_NO_UTF_CHECK, n->md, NULL);
            if (m == PCRE2_ERROR_NOMATCH) break;
            if (m < 0) return err_set(err, PAIL_ERR_INVALID, "%s: normalizer Replace regex failed on a %zu-byte text", tok->name, len);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(n->md);
            if (ov[1] == ov[0]) {  // an empty match replaces nothing here
                if (ov[0] >= len) break;
                uint32_t cp;
                off = ov[0] + utf8_decode1(s + ov[0], len - ov[0], &cp);
                continue;
            }
            if (out->len + (ov[0] - prev) + n->content_len > limit) return norm_too_long(tok, n, limit, err);
            rc |= buf_append(out, s + prev, ov[0] - prev);
            rc |= buf_append(out, n->content, n->content_len);
            prev = off = ov[1];
        }
        rc |= buf_append(out, s + prev, len - prev);
        break;
    }
    if (rc == 0 && out->len > limit) return norm_too_long(tok, n, limit, err);
    return rc < 0 ? err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory") : 0;
}

int normalizer_apply(const Tokenizer *tok, const uint8_t *s, size_t len, Buf *out, PailErr *err) {
    if (!tok->n_norm) {
        buf_reset(out);
        return buf_append(out, s, len) < 0 ? err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory") : 0;
    }
    size_t limit = norm_limit(len);  // for the whole chain, not each step: steps that each multiply stay bounded
    if (tok->n_norm == 1) return norm_step(tok, &tok->norm[0], s, len, limit, out, err);
    Buf a = {0}, b = {0};  // ping-pong between two buffers, the last step writes out
    const uint8_t *in = s;
    size_t in_len = len;
    int rc = 0;
    for (int k = 0; k < tok->n_norm && rc == 0; k++) {
        Buf *dst = k + 1 == tok->n_norm ? out : (k % 2 ? &b : &a);
        rc = norm_step(tok, &tok->norm[k], in, in_len, limit, dst, err);
        in = dst->data;
        in_len = dst->len;
    }
    buf_free(&a);
    buf_free(&b);
    return rc;
}

// ---- pre-tokenizers

// GPT-2's pattern, used by ByteLevel when use_regex is true.
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// The library's regex engine (Oniguruma) takes \s as Unicode White_Space; PCRE2 in UCP
// mode also takes U+180E (Mongolian vowel separator, a format character since Unicode 6.3),
// which splits text differently. So \s and \S are rewritten to the explicit set.
#define WHITE_SPACE "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
static int regex_rewrite_space(const char *p, size_t len, Buf *out) {
    bool in_class = false;
    size_t class_start = 0;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        char c = p[i];
        if (c == '\\' && i + 1 < len) {
            char n = p[i + 1];
            if (n == 'Q' || (n == 'S' && in_class)) return -1;  // not worth parsing: refuse
            if (n == 's') rc = in_class ? buf_printf(out, "%s", WHITE_SPACE) : buf_printf(out, "[%s]", WHITE_SPACE);
            else if (n == 'S') rc = buf_printf(out, "[^%s]", WHITE_SPACE);
            else rc = buf_append(out, p + i, 2);
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            class_start = i + 1 < len && p[i + 1] == '^' ? i + 2 : i + 1;
        } else if (in_class && c == '[' && i + 1 < len && p[i + 1] == ':') {  // [:alpha:]
            const char *e = strstr(p + i, ":]");
            size_t n = e && (size_t)(e - p) < len ? (size_t)(e - p) + 2 - i : 1;
            rc = buf_append(out, p + i, n);
            i += n;
            continue;
        } else if (in_class && c == ']' && i != class_start) {
            in_class = false;
        }
        rc = buf_append(out, &c, 1);
        if (i + 1 < len && p[i] == '[' && p[i + 1] == '^' && in_class && class_start == i + 2) {
            rc |= buf_append(out, "^", 1);
            i++;
        }
        i++;
    }
    return rc;
}

pcre2_code *tok_regex_compile(Tokenizer *tok, const char *pat, size_t len, bool literal, const char *what, PailErr *err) {
    int ec;
    PCRE2_SIZE eo;
    // PCRE2 refuses UCP with LITERAL ("invalid option bits"); a literal has no classes for it to affect.
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    Buf fixed = {0};
    pcre2_code *re;
    if (!literal) {
        if (regex_rewrite_space(pat, len, &fixed) < 0) {
            buf_free(&fixed);
            err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s regex \"%.80s\" uses \\Q or \\S inside a class, which pail does not translate", tok->name, what, pat);
            return NULL;
        }
        re = pcre2_compile((PCRE2_SPTR)fixed.data, fixed.len, opts, &ec, &eo, NULL);
    } else {
        re = pcre2_compile((PCRE2_SPTR)pat, len, opts, &ec, &eo, NULL);
    }
    buf_free(&fixed);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        err_set(err, PAIL_ERR_UNSUPPORTED, "%s: %s regex \"%.80s\" does not compile in PCRE2 at offset %zu: %s",
                tok->name, what, pat, (size_t)eo, (char *)msg);
    }
    return re;
}

static int step_compile(Tokenizer *tok, PreStep *st, const char *pat, size_t len, bool literal, PailErr *err) {
    if (!(st->re = tok_regex_compile(tok, pat, len, literal, "pre_tokenizer Split", err))) return -1;
    st->jit = pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE) == 0;
    st->md = pcre2_match_data_create_from_pattern(st->re, NULL);
    if (!st->md) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    return 0;
}

static PreStep *step_new(Tokenizer *tok, PailErr *err) {
    PreStep *p = realloc(tok->pre, (size_t)(tok->n_pre + 1) * sizeof *p);
    if (!p) { err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name); return NULL; }
    tok->pre = p;
    memset(&p[tok->n_pre], 0, sizeof *p);
    return &p[tok->n_pre++];
}

static int pretok_one(Tokenizer *tok, json_t *j, bool last, PailErr *err) {
    json_t *type = json_object_get(j, "type");
    const char *t = json_is_string(type) ? json_string_value(type) : NULL;
    if (!t) return err_set(err, PAIL_ERR_INVALID, "%s: pre_tokenizer without a \"type\"", tok->name);
    if (!strcmp(t, "Sequence")) {
        json_t *list = json_object_get(j, "pretokenizers");
        if (!json_is_array(list)) return err_set(err, PAIL_ERR_INVALID, "%s: pre_tokenizer Sequence without a \"pretokenizers\" array", tok->name);
        size_t n = json_array_size(list);
        for (size_t i = 0; i < n; i++)
            if (pretok_one(tok, json_array_get(list, i), last && i + 1 == n, err) < 0) return -1;
        return 0;
    }
    if (!strcmp(t, "Split")) {
        json_t *pat = json_object_get(j, "pattern"), *beh = json_object_get(j, "behavior");
        json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        if (!json_is_string(re) && !json_is_string(str))
            return err_set(err, PAIL_ERR_INVALID, "%s: pre_tokenizer Split needs pattern {\"Regex\": ...} or {\"String\": ...}", tok->name);
        const char *b = json_is_string(beh) ? json_string_value(beh) : "";
        int behavior;
        if (!strcmp(b, "Isolated")) behavior = SPLIT_ISOLATED;
        else if (!strcmp(b, "Removed")) behavior = SPLIT_REMOVED;
        else if (!strcmp(b, "MergedWithPrevious")) behavior = SPLIT_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext")) behavior = SPLIT_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous")) behavior = SPLIT_CONTIGUOUS;
        else return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: pre_tokenizer Split behavior '%s' is not supported (pail implements Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous)", tok->name, b);
        PreStep *st = step_new(tok, err);
        if (!st) return -1;
        st->behavior = behavior;
        st->invert = json_is_true(json_object_get(j, "invert"));  // OLMo 2's and tiktoken conversions' (Removed)
        json_t *p = json_is_string(re) ? re : str;
        return step_compile(tok, st, json_string_value(p), json_string_length(p), !json_is_string(re), err);
    }
    if (!strcmp(t, "Digits")) {  // the library's char::is_numeric (Nd, Nl, No) split: each digit, or each run
        PreStep *st = step_new(tok, err);
        if (!st) return -1;
        st->behavior = json_is_true(json_object_get(j, "individual_digits")) ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        static const char numeric[] = "\\p{N}";
        return step_compile(tok, st, numeric, sizeof numeric - 1, false, err);
    }
    if (!strcmp(t, "ByteLevel")) {
        // Later steps would see mapped characters instead of text: only the last place is supported.
        if (!last) return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: pre_tokenizer ByteLevel before another pre-tokenizer is not supported", tok->name);
        PreStep *st = step_new(tok, err);
        if (!st) return -1;
        st->byte_level = true;
        st->behavior = SPLIT_ISOLATED;
        st->add_prefix_space = json_is_true(json_object_get(j, "add_prefix_space"));
        json_t *ur = json_object_get(j, "use_regex");
        tok->bpe.byte_level = true;
        if (!ur || json_is_true(ur)) return step_compile(tok, st, gpt2_pattern, sizeof gpt2_pattern - 1, false, err);
        return 0;
    }
    if (!strcmp(t, "Metaspace")) {
        json_t *r = json_object_get(j, "replacement"), *ps = json_object_get(j, "prepend_scheme");
        const char *rs = json_is_string(r) ? json_string_value(r) : "\u2581";
        uint32_t cp;
        if (!*rs || utf8_decode1((const uint8_t *)rs, strlen(rs), &cp) != strlen(rs))
            return err_set(err, PAIL_ERR_INVALID, "%s: pre_tokenizer Metaspace replacement \"%s\" is not one character", tok->name, rs);
        PreStep *st = step_new(tok, err);
        if (!st) return -1;
        st->metaspace = true;
        st->repl_len = strlen(rs);
        memcpy(st->repl, rs, st->repl_len);
        json_t *sp = json_object_get(j, "split");
        st->split = !sp || json_is_true(sp);
        if (json_is_string(ps)) {  // older files have add_prefix_space instead: true is always
            const char *v = json_string_value(ps);
            if (!strcmp(v, "always")) st->prepend = PREPEND_ALWAYS;
            else if (!strcmp(v, "first")) st->prepend = PREPEND_FIRST;
            else if (!strcmp(v, "never")) st->prepend = PREPEND_NEVER;
            else return err_set(err, PAIL_ERR_INVALID, "%s: pre_tokenizer Metaspace prepend_scheme '%s' is not always, first or never", tok->name, v);
        } else {
            json_t *ap = json_object_get(j, "add_prefix_space");
            st->prepend = !ap || json_is_true(ap) ? PREPEND_ALWAYS : PREPEND_NEVER;
        }
        return 0;
    }
    return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: pre_tokenizer '%s' is not supported (pail implements Sequence, Split, Digits, ByteLevel, Metaspace)", tok->name, t);
}

int pretok_load(Tokenizer *tok, json_t *j, PailErr *err) {
    if (!j || json_is_null(j)) return 0;
    if (pretok_one(tok, j, true, err) < 0) return -1;
    tok->jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    tok->mctx = pcre2_match_context_create(NULL);
    if (!tok->jit_stack || !tok->mctx) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    pcre2_jit_stack_assign(tok->mctx, NULL, tok->jit_stack);
    return 0;
}

void pretok_free(Tokenizer *tok) {
    for (int i = 0; i < tok->n_pre; i++) {
        pcre2_match_data_free(tok->pre[i].md);
        pcre2_code_free(tok->pre[i].re);
        buf_free(&tok->pre[i].scratch);
    }
    free(tok->pre);
    tok->pre = NULL;
    tok->n_pre = 0;
    if (tok->jit_stack) pcre2_jit_stack_free(tok->jit_stack);
    if (tok->mctx) pcre2_match_context_free(tok->mctx);
}

static int emit(Tokenizer *tok, int step, const uint8_t *s, size_t len, bool at_start, TokenIds *ids, PailErr *err) {
    if (!len) return 0;
    if (step + 1 < tok->n_pre) return pretok_encode(tok, step + 1, s, len, at_start, ids, err);
    return bpe_encode_word(&tok->bpe, s, len, ids, err);
}

// Metaspace: every ' ' becomes the replacement, which is prepended (scheme always, or first
// for the piece at offset 0) unless the piece starts with it; split cuts before each one.
static int metaspace_encode(Tokenizer *tok, int step, const uint8_t *s, size_t len, bool at_start, TokenIds *ids, PailErr *err) {
    PreStep *st = &tok->pre[step];
    Buf *b = &st->scratch;
    buf_reset(b);
    bool starts = len >= st->repl_len && !memcmp(s, st->repl, st->repl_len);
    int rc = 0;
    // s[0] == ' ' becomes the replacement below, so the piece then starts with it too
    if (len && s[0] != ' ' && !starts && (st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && at_start)))
        rc = buf_append(b, st->repl, st->repl_len);
    for (size_t i = 0; i < len && rc == 0;) {
        const uint8_t *sp = memchr(s + i, ' ', len - i);
        size_t run = sp ? (size_t)(sp - (s + i)) : len - i;
        rc = buf_append(b, s + i, run);
        i += run;
        if (i < len) { rc |= buf_append(b, st->repl, st->repl_len); i++; }
    }
    if (rc < 0) return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
    const uint8_t *p = b->data;
    size_t n = b->len;
    if (!st->split) return emit(tok, step, p, n, at_start, ids, err);
    size_t prev = 0;
    for (size_t i = 1; i + st->repl_len <= n; i++) {
        if (memcmp(p + i, st->repl, st->repl_len)) continue;
        if (emit(tok, step, p + prev, i - prev, at_start && prev == 0, ids, err) < 0) return -1;
        prev = i;
        i += st->repl_len - 1;
    }
    return emit(tok, step, p + prev, n - prev, at_start && prev == 0, ids, err);
}

// Split's behaviors over the text cut into segments (match or not), as the library's
// NormalizedString::split folds them: the last piece is held back (pend) while the next
// segment may still join it.
typedef struct {
    size_t ps, pe;  // pending piece, ps == SIZE_MAX when none
    bool pend_match, prev_match;
} SplitState;

static int split_flush(Tokenizer *tok, int step, const uint8_t *s, bool at_start, SplitState *z, TokenIds *ids, PailErr *err) {
    if (z->ps == SIZE_MAX) return 0;
    int rc = emit(tok, step, s + z->ps, z->pe - z->ps, at_start && z->ps == 0, ids, err);
    z->ps = SIZE_MAX;
    return rc;
}

static int split_segment(Tokenizer *tok, int step, const uint8_t *s, bool at_start, SplitState *z, size_t a, size_t b, bool m,
                         TokenIds *ids, PailErr *err) {
    int behavior = tok->pre[step].behavior;
    if (tok->pre[step].invert) m = !m;  // the library's Invert pattern: the same segments, the flags swapped
    if (behavior == SPLIT_ISOLATED || (behavior == SPLIT_REMOVED && !m)) return emit(tok, step, s + a, b - a, at_start && a == 0, ids, err);
    if (behavior == SPLIT_REMOVED) return 0;
    bool have = z->ps != SIZE_MAX, join;
    if (behavior == SPLIT_MERGED_PREV) join = have && m && !z->prev_match;  // a match ends the piece before it
    else if (behavior == SPLIT_MERGED_NEXT) join = have && z->pend_match && !m;  // a match starts the piece after it
    else join = have && m && z->pend_match;  // Contiguous: adjacent matches are one piece
    z->prev_match = m;
    if (join) { z->pe = b; z->pend_match = m; return 0; }
    if (split_flush(tok, step, s, at_start, z, ids, err) < 0) return -1;
    z->ps = a;
    z->pe = b;
    z->pend_match = m;
    return 0;
}

int pretok_encode(Tokenizer *tok, int step, const uint8_t *s, size_t len, bool at_start, TokenIds *ids, PailErr *err) {
    if (step >= tok->n_pre) return bpe_encode_word(&tok->bpe, s, len, ids, err);
    PreStep *st = &tok->pre[step];
    if (st->metaspace) return metaspace_encode(tok, step, s, len, at_start, ids, err);
    if (st->add_prefix_space && len && s[0] != ' ') {
        buf_reset(&st->scratch);
        if (buf_append(&st->scratch, " ", 1) < 0 || buf_append(&st->scratch, s, len) < 0)
            return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
        s = st->scratch.data;
        len = st->scratch.len;
    }
    if (!st->re) return emit(tok, step, s, len, at_start, ids, err);
    size_t off = 0, prev = 0;
    SplitState z = {SIZE_MAX, 0, false, false};
    while (off <= len) {
        int rc = st->jit ? pcre2_jit_match(st->re, s, len, off, PCRE2_NO_UTF_CHECK, st->md, tok->mctx)
                         : pcre2_match(st->re, s, len, off, PCRE2_NO_UTF_CHECK, st->md, tok->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(err, PAIL_ERR_INVALID, "%s: pre_tokenizer regex failed on a %zu-byte piece: %s", tok->name, len, (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // empty match: no piece; step one character on
            if (ms >= len) break;
            uint32_t cp;
            off = ms + utf8_decode1(s + ms, len - ms, &cp);
            continue;
        }
        if (ms > prev && split_segment(tok, step, s, at_start, &z, prev, ms, false, ids, err) < 0) return -1;
        if (split_segment(tok, step, s, at_start, &z, ms, me, true, ids, err) < 0) return -1;
        prev = off = me;
    }
    if (prev < len && split_segment(tok, step, s, at_start, &z, prev, len, false, ids, err) < 0) return -1;
    return split_flush(tok, step, s, at_start, &z, ids, err);
}
