// The decoder of tokenizer.json: ByteLevel alone (its bytes per id are precomputed at load
// and joined by tokenizer_decode), or a chain of the SentencePiece-era decoders (Replace,
// ByteFallback, Fuse, Strip, Metaspace, in a Sequence) run as the library's decode_chain:
// each step maps the list of token strings to a new list, and the result is their join.
#define _GNU_SOURCE  // memmem
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

static int dec_one(Tokenizer *tok, json_t *j, bool alone, PailErr *err) {
    json_t *type = json_object_get(j, "type");
    const char *t = json_is_string(type) ? json_string_value(type) : "?";
    if (!strcmp(t, "ByteLevel")) {
        if (!alone) return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: decoder ByteLevel inside a Sequence is not supported", tok->name);
        tok->decoder = DEC_BYTE_LEVEL;
        return 0;
    }
    if (!strcmp(t, "Sequence")) {
        json_t *list = json_object_get(j, "decoders");
        if (!json_is_array(list)) return err_set(err, PAIL_ERR_INVALID, "%s: decoder Sequence without a \"decoders\" array", tok->name);
        for (size_t i = 0; i < json_array_size(list); i++)
            if (dec_one(tok, json_array_get(list, i), false, err) < 0) return -1;
        return 0;
    }
    int kind;
    if (!strcmp(t, "Replace")) kind = DEC_STEP_REPLACE;
    else if (!strcmp(t, "ByteFallback")) kind = DEC_STEP_BYTE_FALLBACK;
    else if (!strcmp(t, "Fuse")) kind = DEC_STEP_FUSE;
    else if (!strcmp(t, "Strip")) kind = DEC_STEP_STRIP;
    else if (!strcmp(t, "Metaspace")) kind = DEC_STEP_METASPACE;
    else
        return err_set(err, PAIL_ERR_UNSUPPORTED,
                       "%s: decoder '%s' is not supported (pail implements ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence)",
                       tok->name, t);
    DecStep *p = realloc(tok->dec, (size_t)(tok->n_dec + 1) * sizeof *p);
    if (!p) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    tok->dec = p;
    DecStep *d = &p[tok->n_dec++];
    memset(d, 0, sizeof *d);
    d->kind = kind;
    tok->decoder = DEC_CHAIN;
    const char *pat = NULL, *content = NULL;
    if (kind == DEC_STEP_REPLACE) {
        json_t *pv = json_object_get(j, "pattern"), *c = json_object_get(j, "content");
        json_t *str = json_object_get(pv, "String");
        if (json_object_get(pv, "Regex"))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: decoder Replace with a Regex pattern is not supported (a String pattern is)", tok->name);
        if (!json_is_string(str) || !json_string_length(str) || !json_is_string(c))
            return err_set(err, PAIL_ERR_INVALID, "%s: decoder Replace needs pattern {\"String\": ...} and a \"content\" string", tok->name);
        pat = json_string_value(str);
        content = json_string_value(c);
    } else if (kind == DEC_STEP_STRIP) {
        json_t *c = json_object_get(j, "content"), *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
        if (!json_is_string(c) || !json_string_length(c) || !json_is_integer(a) || !json_is_integer(b) ||
            json_integer_value(a) < 0 || json_integer_value(b) < 0 || json_integer_value(a) > 1 << 20 || json_integer_value(b) > 1 << 20)
            return err_set(err, PAIL_ERR_INVALID, "%s: decoder Strip needs a \"content\" character and \"start\" / \"stop\" counts", tok->name);
        content = json_string_value(c);
        d->start = (int)json_integer_value(a);
        d->stop = (int)json_integer_value(b);
    } else if (kind == DEC_STEP_METASPACE) {
        json_t *r = json_object_get(j, "replacement"), *ps = json_object_get(j, "prepend_scheme");
        content = json_is_string(r) ? json_string_value(r) : "\u2581";
        if (json_is_string(ps)) {
            const char *v = json_string_value(ps);
            d->prepend = !strcmp(v, "always") ? PREPEND_ALWAYS : !strcmp(v, "first") ? PREPEND_FIRST : !strcmp(v, "never") ? PREPEND_NEVER : -1;
            if (d->prepend < 0) return err_set(err, PAIL_ERR_INVALID, "%s: decoder Metaspace prepend_scheme '%s' is not always, first or never", tok->name, v);
        } else {  // older files: add_prefix_space
            json_t *ap = json_object_get(j, "add_prefix_space");
            d->prepend = !ap || json_is_true(ap) ? PREPEND_ALWAYS : PREPEND_NEVER;
        }
    }
    if (kind == DEC_STEP_STRIP || kind == DEC_STEP_METASPACE) {  // one character
        uint32_t cp;
        size_t l = strlen(content);
        if (!l || utf8_decode1((const uint8_t *)content, l, &cp) != l)
            return err_set(err, PAIL_ERR_INVALID, "%s: decoder %s content \"%s\" is not one character", tok->name, t, content);
    }
    if ((pat && !(d->pat = strdup(pat))) || (content && !(d->content = strdup(content))))
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    d->pat_len = pat ? strlen(pat) : 0;
    d->content_len = content ? strlen(content) : 0;
    return 0;
}

int decoder_load(Tokenizer *tok, json_t *j, PailErr *err) {
    tok->decoder = DEC_NONE;
    if (!j || json_is_null(j)) return 0;
    return dec_one(tok, j, true, err);
}

void decoder_free(Tokenizer *tok) {
    for (int i = 0; i < tok->n_dec; i++) {
        free(tok->dec[i].pat);
        free(tok->dec[i].content);
    }
    free(tok->dec);
    tok->dec = NULL;
    tok->n_dec = 0;
}

// A list of strings back to back in one buffer.
typedef struct {
    Buf text;
    size_t *off, *len;  // owned, n entries (cap allocated)
    size_t n, cap;
} StrList;

static int list_push(StrList *l, const void *s, size_t len) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *o = realloc(l->off, cap * sizeof *o);
        if (!o) return -1;
        l->off = o;
        size_t *n = realloc(l->len, cap * sizeof *n);
        if (!n) return -1;
        l->len = n;
        l->cap = cap;
    }
    l->off[l->n] = l->text.len;
    l->len[l->n] = len;
    l->n++;
    return buf_append(&l->text, s, len);
}

static int list_extend(StrList *l, const void *s, size_t len) {  // appends to the last string
    l->len[l->n - 1] += len;
    return buf_append(&l->text, s, len);
}

static void list_free(StrList *l) {
    buf_free(&l->text);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static int hex_digit(uint8_t c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// ByteFallback: a run of <0xNN> tokens becomes one string of its bytes when they are valid
// UTF-8, else one U+FFFD per byte, as the library does. raw keeps the bytes of an invalid run
// instead, as the ByteLevel path does, so that a caller decoding a growing sequence
// (grpo-rollout --serve's streaming) can hold back a character not all sampled yet.
static int flush_bytes(StrList *out, Buf *bytes, bool raw) {
    int rc = 0;
    if (!bytes->len) return 0;
    if (raw || utf8_invalid_at(bytes->data, bytes->len) < 0) rc = list_push(out, bytes->data, bytes->len);
    else
        for (size_t i = 0; i < bytes->len && rc == 0; i++) rc = list_push(out, "\xef\xbf\xbd", 3);
    buf_reset(bytes);
    return rc;
}

static int step_run(const DecStep *d, const StrList *in, StrList *out, bool raw) {
    const uint8_t *base = in->text.data;
    int rc = 0;
    if (d->kind == DEC_STEP_FUSE) {
        if (!in->n) return 0;
        return list_push(out, base, in->text.len);  // the strings are back to back in order
    }
    if (d->kind == DEC_STEP_BYTE_FALLBACK) {
        Buf bytes = {0};
        for (size_t i = 0; i < in->n && rc == 0; i++) {
            const uint8_t *s = base + in->off[i];
            int hi, lo;
            if (in->len[i] == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && (hi = hex_digit(s[3])) >= 0 && (lo = hex_digit(s[4])) >= 0) {
                uint8_t b = (uint8_t)(hi << 4 | lo);
                rc = buf_append(&bytes, &b, 1);
                continue;
            }
            rc = flush_bytes(out, &bytes, raw);
            if (rc == 0) rc = list_push(out, s, in->len[i]);
        }
        if (rc == 0) rc = flush_bytes(out, &bytes, raw);
        buf_free(&bytes);
        return rc;
    }
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const uint8_t *s = base + in->off[i];
        size_t len = in->len[i];
        if (d->kind == DEC_STEP_STRIP) {  // up to start / stop copies of the content char at each end
            size_t a = 0, b = len, cl = d->content_len;
            for (int k = 0; k < d->start && b - a >= cl && !memcmp(s + a, d->content, cl); k++) a += cl;
            for (int k = 0; k < d->stop && b - a >= cl && !memcmp(s + b - cl, d->content, cl); k++) b -= cl;
            rc = list_push(out, s + a, b - a);
            continue;
        }
        // Replace (pattern -> content) and Metaspace (replacement -> ' ', dropped in the
        // first token unless the scheme is never)
        const char *pat = d->kind == DEC_STEP_REPLACE ? d->pat : d->content;
        size_t pl = d->kind == DEC_STEP_REPLACE ? d->pat_len : d->content_len;
        const char *with = d->kind == DEC_STEP_REPLACE ? d->content : " ";
        size_t wl = d->kind == DEC_STEP_REPLACE ? d->content_len : 1;
        if (d->kind == DEC_STEP_METASPACE && i == 0 && d->prepend != PREPEND_NEVER) wl = 0;
        rc = list_push(out, "", 0);
        for (size_t p = 0; p < len && rc == 0;) {
            const uint8_t *hit = len - p >= pl ? memmem(s + p, len - p, pat, pl) : NULL;
            size_t run = hit ? (size_t)(hit - (s + p)) : len - p;
            rc = list_extend(out, s + p, run);
            p += run;
            if (hit) { if (rc == 0) rc = list_extend(out, with, wl); p += pl; }
        }
    }
    return rc;
}

int decoder_chain(const Tokenizer *tok, const char *const *texts, size_t n, bool raw, Buf *out, PailErr *err) {
    StrList a = {0}, b = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) rc = list_push(&a, texts[i], strlen(texts[i]));
    for (int k = 0; k < tok->n_dec && rc == 0; k++) {
        b.n = 0;
        buf_reset(&b.text);
        rc = step_run(&tok->dec[k], &a, &b, raw);
        StrList t = a; a = b; b = t;
    }
    if (rc == 0) rc = buf_append(out, a.text.data, a.text.len);
    list_free(&a);
    list_free(&b);
    return rc < 0 ? err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory") : 0;
}
