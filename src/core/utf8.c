// UTF-8 validation and lossy repair (utf8.h): the one implementation the tokenizer, the logs,
// the worker's heartbeat and the readers of outside programs' output share.
#include "core/utf8.h"
#include <string.h>

// Length of the valid sequence at s, or 0 with *bad = the maximal invalid subpart length
// (Unicode 3.9 / WHATWG: what Rust's from_utf8_lossy replaces with one U+FFFD).
static size_t utf8_valid1(const uint8_t *s, size_t len, size_t *bad) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c >= 0xe0 && c <= 0xef) { need = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else { *bad = 1; return 0; }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= len) { *bad = i; return 0; }
        uint8_t lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xbf;
        if (s[i] < lo_i || s[i] > hi_i) { *bad = i; return 0; }
    }
    return need + 1;
}

long utf8_invalid_at(const uint8_t *s, size_t len) {
    size_t i = 0, bad;
    while (i < len) {
        if (s[i] < 0x80) { i++; continue; }
        size_t n = utf8_valid1(s + i, len - i, &bad);
        if (!n) return (long)i;
        i += n;
    }
    return -1;
}

int utf8_append_lossy(Buf *out, const uint8_t *s, size_t len) {
    size_t i = 0, run = 0, bad;
    while (i < len) {
        size_t n = s[i] < 0x80 ? 1 : utf8_valid1(s + i, len - i, &bad);
        if (n) { i += n; continue; }
        if (buf_append(out, s + run, i - run) < 0 || buf_append(out, "\xef\xbf\xbd", 3) < 0) return -1;
        i += bad;
        run = i;
    }
    return buf_append(out, s + run, len - run);
}

size_t utf8_lossy_copy(char *dst, size_t cap, const char *s, size_t len) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, k = 0, bad;
    while (i < len) {
        size_t n = u[i] < 0x80 ? 1 : utf8_valid1(u + i, len - i, &bad);
        const char *from = n ? s + i : "\xef\xbf\xbd";
        size_t put = n ? n : 3;
        if (k + put >= cap) break;
        memcpy(dst + k, from, put);
        k += put;
        i += n ? n : bad;
    }
    dst[k] = 0;
    return i;
}
