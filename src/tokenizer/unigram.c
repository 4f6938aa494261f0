// The Unigram model of tokenizer.json (SentencePiece unigram: T5, ALBERT, XLNet-style files):
// each word is cut into the vocab pieces with the highest total score (Viterbi over byte
// positions, as the library's encode_optimized, ties kept by the earlier start); a char no
// piece covers scores min_score - 10 as unk, consecutive unks fuse into one piece, and a piece
// outside the vocab becomes <0xNN> byte tokens (byte_fallback) or unk_id.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

#define UNK_PENALTY 10.0  // the library's K_UNK_PENALTY
#define UNIGRAM_WORK_PER_BYTE 256

// The score the library holds for d: serde_json (without float_roundtrip) parses a number's
// decimal digits into a u64 and then multiplies or divides by a power of ten, two roundings
// that can land one ulp from the correctly rounded double jansson gives. Pieces that swap
// places (A+B vs B+A over a run like "=====") tie exactly in arithmetic, so that ulp decides
// the segmentation. The digits are the shortest that round-trip, as Python and Rust write
// scores (a file with longer digits could still differ).
static double serde_f64(double d) {
    if (d == 0 || !isfinite(d)) return d;
    char buf[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    uint64_t sig = 0;
    const char *c = buf + (buf[0] == '-');
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9') sig = sig * 10 + (uint64_t)(*c - '0');
    int e10 = atoi(c + 1) - (p - 1);
    if (e10 < -308 || e10 > 308) return d;
    char pw[8];
    snprintf(pw, sizeof pw, "1e%d", e10 < 0 ? -e10 : e10);
    double f = (double)sig, pow10 = strtod(pw, NULL);
    f = e10 < 0 ? f / pow10 : f * pow10;
    return d < 0 ? -f : f;
}

int unigram_load(Tokenizer *tok, json_t *model, PailErr *err) {
    Bpe *b = &tok->bpe;
    json_t *vocab = json_object_get(model, "vocab"), *unk = json_object_get(model, "unk_id");
    if (!json_is_array(vocab)) return err_set(err, PAIL_ERR_INVALID, "%s: Unigram model.vocab is missing or not an array", tok->name);
    size_t n = json_array_size(vocab);
    if (n >= 1 << 30) return err_set(err, PAIL_ERR_INVALID, "%s: Unigram model.vocab has %zu pieces", tok->name, n);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(vocab, i);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(json_array_get(e, 0)) ||
            !json_is_number(json_array_get(e, 1)) || !json_string_length(json_array_get(e, 0)))
            return err_set(err, PAIL_ERR_INVALID, "%s: Unigram model.vocab[%zu] is not a [\"piece\", score] pair", tok->name, i);
    }
    b->unigram = true;
    b->unk_id = -1;
    if (unk && !json_is_null(unk)) {
        if (!json_is_integer(unk) || json_integer_value(unk) < 0 || (size_t)json_integer_value(unk) >= n)
            return err_set(err, PAIL_ERR_INVALID, "%s: Unigram model.unk_id is not an id of its %zu pieces", tok->name, n);
        b->unk_id = (int32_t)json_integer_value(unk);
    }
    b->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    b->fuse_unk = true;  // always, in the library's Unigram
    if ((int32_t)n > tok->vocab_size) tok->vocab_size = (int32_t)n;
    return 0;
}

static size_t trie_slot(const Bpe *b, int32_t node, uint8_t c) {
    uint64_t k = (uint64_t)node << 8 | c, h = k * 0x9e3779b97f4a7c15ull;
    size_t j = (size_t)((h ^ h >> 29) & (b->trie_cap - 1));
    while (b->trie_key[j] != UINT64_MAX && b->trie_key[j] != k) j = (j + 1) & (b->trie_cap - 1);
    return j;
}

static inline int32_t trie_next(const Bpe *b, int32_t node, uint8_t c) {
    size_t j = trie_slot(b, node, c);
    return b->trie_key[j] == UINT64_MAX ? -1 : b->trie_child[j];
}

// The trie of all pieces: at most one node per piece byte, sized once from their total.
static int trie_build(Tokenizer *tok, json_t *vocab, PailErr *err) {
    Bpe *b = &tok->bpe;
    size_t n = json_array_size(vocab), total = 0;
    for (size_t i = 0; i < n; i++) total += json_string_length(json_array_get(json_array_get(vocab, i), 0));
    if (total >= INT32_MAX / 2) return err_set(err, PAIL_ERR_INVALID, "%s: Unigram pieces hold %zu bytes", tok->name, total);
    size_t cap = 1024;
    while (cap < 2 * total) cap *= 2;
    b->trie_key = malloc(cap * sizeof *b->trie_key);
    b->trie_child = malloc(cap * sizeof *b->trie_child);
    b->trie_id = malloc((total + 1) * sizeof *b->trie_id);
    if (!b->trie_key || !b->trie_child || !b->trie_id) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    memset(b->trie_key, 0xff, cap * sizeof *b->trie_key);
    b->trie_cap = cap;
    b->trie_id[0] = -1;
    int32_t nodes = 1;
    for (size_t i = 0; i < n; i++) {
        int32_t node = 0;
        const uint8_t *p = (const uint8_t *)tok->id_text[i];
        size_t len = json_string_length(json_array_get(json_array_get(vocab, i), 0));
        for (size_t k = 0; k < len; k++) {
            size_t j = trie_slot(b, node, p[k]);
            if (b->trie_key[j] == UINT64_MAX) {
                b->trie_key[j] = (uint64_t)node << 8 | p[k];
                b->trie_child[j] = nodes;
                b->trie_id[nodes++] = -1;
            }
            node = b->trie_child[j];
        }
        b->trie_id[node] = (int32_t)i;  // a later duplicate wins, as the library's token -> id map
    }
    return 0;
}

int unigram_load_tables(Tokenizer *tok, json_t *model, PailErr *err) {
    Bpe *b = &tok->bpe;
    json_t *vocab = json_object_get(model, "vocab");
    size_t n = json_array_size(vocab);
    if (!(b->score = malloc((n ? n : 1) * sizeof *b->score))) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    b->min_score = n ? 1e300 : 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(vocab, i), *p = json_array_get(e, 0);
        size_t len = json_string_length(p);
        if (!(tok->id_text[i] = malloc(len + 1))) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
        memcpy(tok->id_text[i], json_string_value(p), len + 1);
        b->score[i] = serde_f64(json_number_value(json_array_get(e, 1)));
        if (b->score[i] < b->min_score) b->min_score = b->score[i];
        // a later duplicate wins, as the library's token -> id map
        if (strmap_put(&b->vocab, tok->id_text[i], len, (int32_t)i) < 0) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    if (trie_build(tok, vocab, err) < 0) return -1;
    for (int i = 0; i < 256; i++) {
        char c[8];
        snprintf(c, sizeof c, "<0x%02X>", i);
        b->fallback_id[i] = strmap_get(&b->vocab, c, 6);
        b->byte_id[i] = -1;
    }
    return 0;
}

// One piece of the best path (bytes w[a..e)) to ids: its vocab id, else byte tokens, else unk.
static int piece_ids(const Bpe *b, const uint8_t *w, size_t a, size_t e, TokenIds *ids, PailErr *err) {
    int32_t id = strmap_get(&b->vocab, (const char *)w + a, e - a);
    if (id < 0 && b->byte_fallback) {
        size_t k = a;
        while (k < e && b->fallback_id[w[k]] >= 0) k++;
        if (k == e) {
            for (k = a; k < e; k++)
                if (token_ids_push(ids, b->fallback_id[w[k]]) < 0) return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
            return 0;
        }
    }
    if (id < 0) id = b->unk_id;
    return token_ids_push(ids, id) < 0 ? err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory") : 0;
}

int unigram_encode(const Bpe *b, const uint8_t *w, size_t len, TokenIds *ids, PailErr *err) {
    if (!len) return 0;
    double *best = malloc((len + 1) * sizeof *best);
    int32_t *from = malloc((len + 1) * sizeof *from), *node = malloc((len + 1) * sizeof *node);
    int rc = 0;
    if (!best || !from || !node) { rc = err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory"); goto out; }
    for (size_t i = 0; i <= len; i++) from[i] = -1;
    best[0] = 0;
    double unk_score = b->min_score - UNK_PENALTY;
    // Work budget, as the chat template's: trie steps, UNIGRAM_WORK_PER_BYTE per byte of the
    // word. Real pieces are at most 16 characters (SentencePiece's default), 64 steps from a
    // start; a hostile 100k-character piece would make a long run of its character quadratic.
    size_t work = 0,
           budget = len > (SIZE_MAX - 65536) / UNIGRAM_WORK_PER_BYTE ? SIZE_MAX : len * UNIGRAM_WORK_PER_BYTE + 65536;
    for (size_t s = 0; s < len;) {
        uint32_t cp;
        size_t mblen = utf8_decode1(w + s, len - s, &cp);
        bool single = false;
        int32_t at = 0;  // the trie node of w[s..e)
        for (size_t e = s + 1; e <= len && (at = trie_next(b, at, w[e - 1])) >= 0; e++) {
            if (++work > budget) {
                rc = err_set(err, PAIL_ERR_INVALID,
                             "tokenizer: Unigram work budget of %zu steps exceeded on a %zu-byte word (%d per byte: "
                             "the vocabulary has hostile long pieces)", budget, len, UNIGRAM_WORK_PER_BYTE);
                goto out;
            }
            int32_t id = b->trie_id[at];
            if (id < 0) continue;
            double cand = b->score[id] + best[s];
            if (from[e] < 0 || cand > best[e]) { best[e] = cand; from[e] = (int32_t)s; node[e] = id; }
            if (e - s == mblen) single = true;
        }
        if (!single) {
            if (b->unk_id < 0) { rc = err_set(err, PAIL_ERR_INVALID, "tokenizer: Unigram model has no unk_id and the text has a character no piece covers"); goto out; }
            size_t e = s + mblen;
            double cand = unk_score + best[s];
            if (from[e] < 0 || cand > best[e]) { best[e] = cand; from[e] = (int32_t)s; node[e] = b->unk_id; }
        }
        s += mblen;
    }
    // Walk back from the end; consecutive unk nodes fuse into one piece. The pieces' end
    // offsets are collected backwards, then emitted forwards.
    size_t np = 0;
    size_t *cut = malloc((len + 1) * sizeof *cut);
    if (!cut) { rc = err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory"); goto out; }
    for (size_t e = len; e > 0;) {
        size_t s = (size_t)from[e];
        bool unk = node[e] == b->unk_id;
        if (unk) while (s > 0 && node[s] == b->unk_id) s = (size_t)from[s];
        cut[np++] = e;
        e = s;
    }
    for (size_t k = np, a = 0; k-- > 0 && rc == 0;) {
        rc = piece_ids(b, w, a, cut[k], ids, err);
        a = cut[k];
    }
    free(cut);
out:
    free(best);
    free(from);
    free(node);
    return rc;
}
