// The BPE model of tokenizer.json: vocab and merges (both file forms: "a b" strings and
// [a, b] pairs), ignore_merges, unk handling, byte_fallback (SentencePiece's <0xNN> tokens), the merge loop (the same priority order as
// the tokenizers library's Word::merge_all: lowest rank first, then leftmost), and the
// word -> ids cache. Byte-level words are kept as raw bytes: the GPT-2 byte map is applied
// to the vocab once at load instead of to every word.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

// ---- hashing and maps

uint64_t tok_hash(const void *data, size_t len) {  // FNV-1a, then a murmur finalizer
    const uint8_t *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
    return h;
}

static int strmap_grow(StrMap *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    StrSlot *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = m->slots[i].hash & (cap - 1);
        while (s[j].key) j = (j + 1) & (cap - 1);
        s[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    return 0;
}

int strmap_put(StrMap *m, const char *key, size_t len, int32_t val) {
    if ((m->n + 1) * 4 > m->cap * 3 && strmap_grow(m) < 0) return -1;
    uint64_t h = tok_hash(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        StrSlot *s = &m->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) { s->val = val; return 0; }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (StrSlot){key, (uint32_t)len, val, h};
    m->n++;
    return 0;
}

int32_t strmap_get(const StrMap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint64_t h = tok_hash(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        const StrSlot *s = &m->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) return s->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void strmap_free(StrMap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static int mergemap_init(MergeMap *m, size_t n) {
    size_t cap = 1024;
    while (cap < n * 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->cap = cap;
    m->n = 0;
    return 0;
}

// A later duplicate overwrites an earlier one, as the library's HashMap collect does.
static void mergemap_put(MergeMap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t j = mix64(k) & (m->cap - 1);
    while (m->slots[j].key != UINT64_MAX && m->slots[j].key != k) j = (j + 1) & (m->cap - 1);
    if (m->slots[j].key == UINT64_MAX) m->n++;
    m->slots[j] = (MergeSlot){k, rank, id};
}

static inline const MergeSlot *mergemap_get(const MergeMap *m, int32_t a, int32_t b) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t j = mix64(k) & (m->cap - 1);
    while (m->slots[j].key != UINT64_MAX) {
        if (m->slots[j].key == k) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

// ---- word cache

#define CACHE_SLOTS (1u << 17)
#define CACHE_MAX_WORDS 90000u
#define CACHE_MAX_WORD 256u  // longer words are rare and would crowd the arena

static void cache_clear(WordCache *c) {
    if (c->slots) memset(c->slots, 0, c->cap * sizeof *c->slots);
    c->n = 0;
    buf_reset(&c->keys);
    c->ids.len = 0;
}

static const CacheSlot *cache_find(const WordCache *c, const uint8_t *w, size_t len, uint64_t h) {
    if (!c->slots) return NULL;
    size_t j = h & (c->cap - 1);
    while (c->slots[j].key_len) {
        const CacheSlot *s = &c->slots[j];
        if (s->hash == h && s->key_len == len && !memcmp(c->keys.data + s->key_off, w, len)) return s;
        j = (j + 1) & (c->cap - 1);
    }
    return NULL;
}

static void cache_put(WordCache *c, const uint8_t *w, size_t len, uint64_t h, const int32_t *ids,
                      size_t n) {
    if (len == 0 || len > CACHE_MAX_WORD) return;
    if (!c->slots) {
        c->slots = calloc(CACHE_SLOTS, sizeof *c->slots);
        if (!c->slots) return;  // caching is an optimisation: run without it
        c->cap = CACHE_SLOTS;
    }
    if (c->n >= CACHE_MAX_WORDS) cache_clear(c);
    size_t key_off = c->keys.len, ids_off = c->ids.len;
    if (buf_append(&c->keys, w, len) < 0) return;
    for (size_t i = 0; i < n; i++)
        if (token_ids_push(&c->ids, ids[i]) < 0) { c->keys.len = key_off; c->ids.len = ids_off; return; }
    size_t j = h & (c->cap - 1);
    while (c->slots[j].key_len) j = (j + 1) & (c->cap - 1);
    c->slots[j] = (CacheSlot){h, (uint32_t)key_off, (uint32_t)len, (uint32_t)ids_off, (uint32_t)n};
    c->n++;
}

// ---- merging

typedef struct {
    int32_t rank, pos, id;
} HeapItem;

static inline bool heap_less(HeapItem a, HeapItem b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(HeapItem *h, size_t *n, HeapItem x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static HeapItem heap_pop(HeapItem *h, size_t *n) {
    HeapItem top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        HeapItem best = x;
        if (l < *n && heap_less(h[l], best)) { m = l; best = h[l]; }
        if (r < *n && heap_less(h[r], best)) { m = r; best = h[r]; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = x;
    return top;
}

typedef struct {
    int32_t id, prev, next, len;  // len 0 = merged away
} Symbol;

// The initial symbols: one per byte (byte-level) or per character; a character not in the
// vocab becomes its bytes' <0xNN> tokens (byte_fallback, when all exist), else unk (fused
// when fuse_unk), else is dropped when the model has no unk, as the library does.
static size_t word_symbols(const Bpe *b, const uint8_t *w, size_t len, Symbol *sym) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int32_t id;
        size_t cl = 1;
        if (b->byte_level) id = b->byte_id[w[i]];
        else {
            uint32_t cp;
            cl = utf8_decode1(w + i, len - i, &cp);
            id = strmap_get(&b->vocab, (const char *)w + i, cl);
            if (id < 0 && b->byte_fallback) {
                size_t k = 0;
                while (k < cl && b->fallback_id[w[i + k]] >= 0) k++;
                if (k == cl) {
                    for (k = 0; k < cl; k++, n++) sym[n] = (Symbol){b->fallback_id[w[i + k]], (int32_t)n - 1, (int32_t)n + 1, 1};
                    i += cl;
                    continue;
                }
            }
        }
        if (id < 0 && b->unk_id >= 0) {
            if (b->fuse_unk && n && sym[n - 1].id == b->unk_id) { sym[n - 1].len += (int32_t)cl; i += cl; continue; }
            id = b->unk_id;
        }
        if (id >= 0) {
            sym[n] = (Symbol){id, (int32_t)n - 1, (int32_t)n + 1, (int32_t)cl};
            n++;
        }
        i += cl;
    }
    if (n) sym[n - 1].next = -1;
    return n;
}

static int bpe_merge(const Bpe *b, const uint8_t *w, size_t len, TokenIds *ids, PailErr *err) {
    Symbol stack_sym[64];
    HeapItem stack_heap[3 * 64];
    Symbol *sym = stack_sym;
    HeapItem *heap = stack_heap;
    if (len > 64) {  // each merge pushes at most two items: 3 * len bounds the heap
        sym = malloc(len * sizeof *sym);
        heap = malloc(3 * len * sizeof *heap);
        if (!sym || !heap) { free(sym); free(heap); return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory"); }
    }
    size_t n = word_symbols(b, w, len, sym), nh = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        const MergeSlot *m = mergemap_get(&b->merges, sym[i].id, sym[i + 1].id);
        if (m) heap_push(heap, &nh, (HeapItem){m->rank, (int32_t)i, m->id});
    }
    while (nh) {
        HeapItem top = heap_pop(heap, &nh);
        Symbol *cur = &sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        Symbol *right = &sym[cur->next];
        const MergeSlot *m = mergemap_get(&b->merges, cur->id, right->id);
        if (!m || m->id != top.id) continue;  // a stale entry: one side merged since
        cur->id = top.id;
        cur->len += right->len;
        right->len = 0;
        cur->next = right->next;
        if (cur->next >= 0) sym[cur->next].prev = top.pos;
        if (cur->prev >= 0) {
            const MergeSlot *pm = mergemap_get(&b->merges, sym[cur->prev].id, cur->id);
            if (pm) heap_push(heap, &nh, (HeapItem){pm->rank, cur->prev, pm->id});
        }
        if (cur->next >= 0) {
            const MergeSlot *nm = mergemap_get(&b->merges, cur->id, sym[cur->next].id);
            if (nm) heap_push(heap, &nh, (HeapItem){nm->rank, top.pos, nm->id});
        }
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (sym[i].len && token_ids_push(ids, sym[i].id) < 0)
            rc = err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
    if (sym != stack_sym) { free(sym); free(heap); }
    return rc;
}

int bpe_encode_word(Bpe *b, const uint8_t *w, size_t len, TokenIds *ids, PailErr *err) {
    if (len == 0) return 0;
    if (b->ignore_merges) {
        int32_t id = b->byte_level ? strmap_get(&b->raw_vocab, (const char *)w, len)
                                   : strmap_get(&b->vocab, (const char *)w, len);
        if (id >= 0) return token_ids_push(ids, id) < 0 ? err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory") : 0;
    }
    uint64_t h = tok_hash(w, len);
    const CacheSlot *s = cache_find(&b->cache, w, len, h);
    if (s) {
        for (uint32_t i = 0; i < s->ids_len; i++)
            if (token_ids_push(ids, b->cache.ids.data[s->ids_off + i]) < 0)
                return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
        return 0;
    }
    size_t before = ids->len;
    if ((b->unigram ? unigram_encode(b, w, len, ids, err) : bpe_merge(b, w, len, ids, err)) < 0) return -1;
    cache_put(&b->cache, w, len, h, ids->data + before, ids->len - before);
    return 0;
}

// ---- loading

static int merge_parts(json_t *m, size_t i, const char **a, size_t *al, const char **c, size_t *cl,
                       const char *name, PailErr *err) {
    if (json_is_string(m)) {  // "a b": tokens never hold a space in byte-level vocabs
        const char *s = json_string_value(m);
        size_t len = json_string_length(m);
        const char *sp = memchr(s, ' ', len);
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)))
            return err_set(err, PAIL_ERR_INVALID, "%s: model.merges[%zu] \"%.60s\" is not two tokens separated by one space", name, i, s);
        *a = s; *al = (size_t)(sp - s); *c = sp + 1; *cl = len - *al - 1;
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0)); *al = json_string_length(json_array_get(m, 0));
        *c = json_string_value(json_array_get(m, 1)); *cl = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return err_set(err, PAIL_ERR_INVALID, "%s: model.merges[%zu] is neither a \"a b\" string nor a pair of strings", name, i);
}

int bpe_load(Tokenizer *tok, json_t *model, PailErr *err) {
    Bpe *b = &tok->bpe;
    const char *name = tok->name;
    json_t *type = json_object_get(model, "type");
    if (json_is_string(type) && !strcmp(json_string_value(type), "Unigram")) return unigram_load(tok, model, err);
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE")))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: model type '%s' is not supported (pail implements BPE and Unigram)", name,
                       json_is_string(type) ? json_string_value(type) : "?");
    json_t *v;
    if ((v = json_object_get(model, "dropout")) && !json_is_null(v) && json_number_value(v) > 0)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: BPE dropout %g is not supported (encoding would be random)", name, json_number_value(v));
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++)
        if ((v = json_object_get(model, affix[k])) && json_is_string(v) && json_string_length(v))
            return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: BPE %s \"%s\" is not supported", name, affix[k], json_string_value(v));
    b->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    b->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    b->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    b->unk_id = -1;
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab)) return err_set(err, PAIL_ERR_INVALID, "%s: model.vocab is missing or not an object", name);
    if (merges && !json_is_array(merges)) return err_set(err, PAIL_ERR_INVALID, "%s: model.merges is not an array", name);
    // Ids: the vocab's, plus added tokens (already counted in tok->vocab_size by the caller).
    void *it;
    for (it = json_object_iter(vocab); it; it = json_object_iter_next(vocab, it)) {
        json_t *idv = json_object_iter_value(it);
        if (!json_is_integer(idv) || json_integer_value(idv) < 0 || json_integer_value(idv) >= 1 << 30)
            return err_set(err, PAIL_ERR_INVALID, "%s: model.vocab[\"%.60s\"] is not a token id", name, json_object_iter_key(it));
        int32_t id = (int32_t)json_integer_value(idv);
        if (id >= tok->vocab_size) tok->vocab_size = id + 1;
    }
    return 0;
}

int bpe_load_tables(Tokenizer *tok, json_t *model, PailErr *err) {
    Bpe *b = &tok->bpe;
    if (b->unigram) return unigram_load_tables(tok, model, err);
    const char *name = tok->name;
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    for (void *it = json_object_iter(vocab); it; it = json_object_iter_next(vocab, it)) {
        int32_t id = (int32_t)json_integer_value(json_object_iter_value(it));
        size_t klen = json_object_iter_key_len(it);
        if (tok->id_text[id])
            return err_set(err, PAIL_ERR_INVALID, "%s: model.vocab maps two tokens to id %d", name, id);
        tok->id_text[id] = malloc(klen + 1);
        if (!tok->id_text[id]) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
        memcpy(tok->id_text[id], json_object_iter_key(it), klen);
        tok->id_text[id][klen] = 0;
        if (strmap_put(&b->vocab, tok->id_text[id], klen, id) < 0) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    }
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        b->unk_id = strmap_get(&b->vocab, json_string_value(unk), json_string_length(unk));
        if (b->unk_id < 0) return err_set(err, PAIL_ERR_INVALID, "%s: model.unk_token \"%s\" is not in the vocab", name, json_string_value(unk));
    }
    for (int i = 0; i < 256; i++) {
        char c[8];
        b->byte_id[i] = strmap_get(&b->vocab, c, utf8_encode1(tok_byte_char((uint8_t)i), c));
        snprintf(c, sizeof c, "<0x%02X>", i);  // the library's format!("<{b:#04X}>")
        b->fallback_id[i] = strmap_get(&b->vocab, c, 6);
    }
    if (b->byte_level) {  // raw-byte keys for ignore_merges on raw words
        for (size_t s = 0; s < b->vocab.cap; s++) {
            const StrSlot *sl = &b->vocab.slots[s];
            if (!sl->key) continue;
            // raw bytes are never longer than the mapped text, so map in place into a copy
            char *raw = malloc(sl->len + 1);
            if (!raw) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
            size_t n = 0;
            bool ok = true;
            for (size_t i = 0; i < sl->len && ok;) {
                uint32_t cp;
                i += utf8_decode1((const uint8_t *)sl->key + i, sl->len - i, &cp);
                int byte = tok_char_to_byte(cp);
                if (byte < 0) ok = false;
                else raw[n++] = (char)byte;
            }
            if (!ok || strmap_get(&b->raw_vocab, raw, n) >= 0) { free(raw); continue; }
            if (strmap_put(&b->raw_vocab, raw, n, sl->val) < 0) { free(raw); return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name); }
        }
    }
    size_t nm = merges ? json_array_size(merges) : 0;
    if (mergemap_init(&b->merges, nm) < 0) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name);
    Buf joined = {0};
    for (size_t i = 0; i < nm; i++) {
        const char *a = NULL, *c = NULL;
        size_t al = 0, cl = 0;
        if (merge_parts(json_array_get(merges, i), i, &a, &al, &c, &cl, name, err) < 0) { buf_free(&joined); return -1; }
        int32_t ia = strmap_get(&b->vocab, a, al), ic = strmap_get(&b->vocab, c, cl);
        if (ia < 0 || ic < 0) {
            buf_free(&joined);
            return err_set(err, PAIL_ERR_INVALID, "%s: model.merges[%zu] uses token \"%.*s\" that is not in the vocab", name, i,
                           (int)(ia < 0 ? al : cl), ia < 0 ? a : c);
        }
        buf_reset(&joined);
        if (buf_append(&joined, a, al) < 0 || buf_append(&joined, c, cl) < 0) { buf_free(&joined); return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", name); }
        int32_t inew = strmap_get(&b->vocab, (const char *)joined.data, joined.len);
        if (inew < 0) {
            int rc = err_set(err, PAIL_ERR_INVALID, "%s: model.merges[%zu] makes \"%.*s\" that is not in the vocab", name, i,
                             (int)joined.len, (const char *)joined.data);
            buf_free(&joined);
            return rc;
        }
        mergemap_put(&b->merges, ia, ic, (int32_t)i, inew);
    }
    buf_free(&joined);
    return 0;
}

void bpe_free(Bpe *b) {
    for (size_t s = 0; s < b->raw_vocab.cap; s++) free((char *)b->raw_vocab.slots[s].key);
    strmap_free(&b->raw_vocab);
    free(b->trie_key);
    free(b->trie_child);
    free(b->trie_id);
    free(b->score);
    strmap_free(&b->vocab);
    free(b->merges.slots);
    free(b->cache.slots);
    buf_free(&b->cache.keys);
    token_ids_free(&b->cache.ids);
    memset(b, 0, sizeof *b);
}
