// Internal layout of the tokenizer module, shared by tokenizer.c (loading, added tokens,
// encode/decode), bpe.c (vocab, merges, word merging, word cache), unigram.c and pretok.c
// (normalizers, Split / ByteLevel / Metaspace pre-tokenizers, UTF-8 helpers) and decode.c
// (the decoder chain). Not a public header.
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <jansson.h>
#include "tokenizer/tokenizer.h"

// String -> int32 map, open addressing. Keys are borrowed: they must outlive the map.
typedef struct {
    const char *key;
    uint32_t len;
    int32_t val;
    uint64_t hash;
} StrSlot;
typedef struct {
    StrSlot *slots;  // owned, cap entries (power of 2), key == NULL when empty
    size_t cap, n;
} StrMap;
uint64_t tok_hash(const void *data, size_t len);
int strmap_put(StrMap *m, const char *key, size_t len, int32_t val);  // overwrites; -1 on OOM
int32_t strmap_get(const StrMap *m, const char *key, size_t len);     // -1 when absent
void strmap_free(StrMap *m);

// (left id, right id) -> (rank, merged id), open addressing.
typedef struct {
    uint64_t key;  // (uint64)left << 32 | right, UINT64_MAX when empty
    int32_t rank, id;
} MergeSlot;
typedef struct {
    MergeSlot *slots;  // owned
    size_t cap, n;
} MergeMap;

// Word cache: raw piece bytes -> ids. Cleared whole when full (words repeat a lot in
// text, so a simple bounded table keeps the hit rate of an LRU at a fraction of the cost).
typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, ids_len;  // into arena / ids; key_len 0 = empty slot
} CacheSlot;
typedef struct {
    CacheSlot *slots;  // owned, cap entries
    size_t cap, n;
    Buf keys;          // key bytes
    TokenIds ids;      // ids of all cached words, back to back
} WordCache;

typedef struct {
    StrMap vocab;           // token text as in the file -> id (keys point into strings)
    StrMap raw_vocab;       // byte-level only: token as raw bytes -> id (for ignore_merges)
    MergeMap merges;
    int32_t byte_id[256];   // byte-level: id of the token for each single byte, -1 if absent
    bool byte_level;        // words arrive as raw bytes to be mapped by ByteLevel
    bool ignore_merges;
    int32_t unk_id;         // -1 when no unk_token
    bool fuse_unk;
    bool byte_fallback;     // a char not in the vocab becomes its bytes' <0xNN> tokens
    int32_t fallback_id[256];  // id of "<0xNN>" for each byte, -1 if absent
    bool unigram;           // model type Unigram: Viterbi over scores instead of merges
    double *score;          // unigram: (V) log-probability of each id, owned
    double min_score;       // unigram: lowest score (unk scores min_score - 10)
    // unigram: the pieces as a byte trie, so that the Viterbi walks each start's pieces
    // one byte at a time (a prefix table hashed every prefix: quadratic in a piece's length)
    uint64_t *trie_key;     // owned, trie_cap slots: edge (node << 8 | byte), UINT64_MAX when empty
    int32_t *trie_child;    // owned, (trie_cap,) the edge's child node
    int32_t *trie_id;       // owned, (nodes,) the piece id ending at a node, -1 for none
    size_t trie_cap;
    WordCache cache;
} Bpe;

enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
typedef struct {
    pcre2_code *re;                // owned
    pcre2_match_data *md;          // owned; used under the tokenizer lock
    bool jit;
    int behavior;                  // SPLIT_*
    bool invert;                   // Split invert: the pattern's matches are the pieces, the text between them the delimiters
    bool byte_level;               // this step is the final ByteLevel (maps to BPE words)
    bool add_prefix_space;         // ByteLevel: prepend ' ' to a piece not starting with one
    bool metaspace;                // Metaspace: ' ' -> replacement, prefix, optional split
    int prepend;                   // Metaspace: PREPEND_*
    bool split;                    // Metaspace: cut before each replacement (MergedWithNext)
    char repl[4];                  // Metaspace: the replacement char's UTF-8
    size_t repl_len;
    Buf scratch;                   // ByteLevel prefixed piece / Metaspace replaced piece
} PreStep;
enum { PREPEND_NEVER, PREPEND_ALWAYS, PREPEND_FIRST };

// One normalizer: a utf8proc normal form, Prepend, Replace (string or regex), Lowercase, Strip.
enum { NORM_UTF8PROC, NORM_PREPEND, NORM_REPLACE, NORM_LOWERCASE, NORM_STRIP };
typedef struct {
    int kind;                // NORM_*
    int opts;                // NORM_UTF8PROC: utf8proc option set
    char *pat, *content;     // owned: Prepend's text (content), Replace's pattern and content
    size_t pat_len, content_len;
    pcre2_code *re;          // owned: Replace with a Regex pattern, else NULL
    pcre2_match_data *md;    // owned; used under the tokenizer lock
    bool left, right;        // NORM_STRIP
} NormStep;

// One decoder of the chain (the library's decode_chain over the token strings).
enum { DEC_STEP_REPLACE, DEC_STEP_BYTE_FALLBACK, DEC_STEP_FUSE, DEC_STEP_STRIP, DEC_STEP_METASPACE };
typedef struct {
    int kind;               // DEC_STEP_*
    char *pat, *content;    // owned: Replace; Strip's content char; Metaspace's replacement
    size_t pat_len, content_len;
    int start, stop;        // Strip: chars to strip at most from each end
    int prepend;            // Metaspace: PREPEND_*
} DecStep;

typedef struct {
    char *content;  // owned, NUL-terminated
    size_t len;
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
} AddedToken;

// Leftmost-longest matcher over a set of added tokens (the library uses Aho-Corasick
// with LeftmostLongest; the tokens share few first bytes, so a first-byte index suffices).
typedef struct {
    int *order;          // owned: token indices sorted by first byte, then length descending
    int start[257];      // tokens with first byte b are order[start[b] .. start[b+1])
    char **patterns;     // owned: what is matched (content, or normalized content)
    size_t *plen;
    int n;
} AddedMatcher;

struct Tokenizer {
    char sha256[65];
    char *name;                  // owned: file name for messages
    NormStep *norm;              // owned, n_norm steps applied in order
    int n_norm;
    PreStep *pre;                // owned, n_pre steps
    int n_pre;
    Bpe bpe;
    AddedToken *added;           // owned
    int n_added;
    AddedMatcher match_raw, match_norm;  // added tokens with normalized false / true
    char **id_text;              // owned strings (vocab keys and added contents) by id
    Buf *id_bytes;               // decoded bytes by id (the decoder applied once at load)
    uint8_t *id_flags;           // 1 = added token, 2 = special
    int32_t vocab_size;
    size_t max_token_len;        // bytes of the longest token text (vocab or added)
    int decoder;                 // DEC_*
    DecStep *dec;                // owned: DEC_CHAIN's steps
    int n_dec;
    int32_t bos_id, eos_id;
    int32_t *pp_ids;             // owned: the post_processor's special ids for one text (postproc.c):
    int n_pp_before, n_pp_after; //   n_pp_before before it, then n_pp_after after it
    char pp_refused[96];         // a post_processor pail cannot apply ("" when it can)
    pcre2_jit_stack *jit_stack;  // owned, shared by the regexes under the lock
    pcre2_match_context *mctx;
    pthread_mutex_t lock;        // guards the word cache, match data and scratch buffers
    Buf norm_buf;                // scratch for the normalized segment
};
enum { DEC_NONE, DEC_BYTE_LEVEL, DEC_CHAIN };

// ---- postproc.c
// Reads the post_processor: the special ids transformers adds around one text.
int postproc_load(Tokenizer *tok, json_t *pp, PailErr *err);

// ---- bpe.c
// Checks the model's settings and sizes tok->vocab_size from its ids.
int bpe_load(Tokenizer *tok, json_t *model, PailErr *err);
// Second phase, after tok->id_text is allocated: vocab maps, byte ids, merges.
int bpe_load_tables(Tokenizer *tok, json_t *model, PailErr *err);
void bpe_free(Bpe *b);
// Appends the ids of one pre-tokenized word (raw bytes when byte_level, else UTF-8 text).
int bpe_encode_word(Bpe *b, const uint8_t *w, size_t len, TokenIds *ids, PailErr *err);

// ---- unigram.c (the Unigram model; its tables live in Bpe)
int unigram_load(Tokenizer *tok, json_t *model, PailErr *err);
int unigram_load_tables(Tokenizer *tok, json_t *model, PailErr *err);
// Appends the ids of one word: the best segmentation by total score, unknown chars fused.
int unigram_encode(const Bpe *b, const uint8_t *w, size_t len, TokenIds *ids, PailErr *err);

// ---- pretok.c
uint32_t tok_byte_char(uint8_t b);  // GPT-2 bytes_to_unicode
int tok_char_to_byte(uint32_t cp);  // inverse, -1 for chars outside the map
size_t utf8_decode1(const uint8_t *s, size_t len, uint32_t *cp);  // valid input only
size_t utf8_encode1(uint32_t cp, char out[4]);
int normalizer_load(Tokenizer *tok, json_t *j, PailErr *err);
void normalizer_free(Tokenizer *tok);
// Normalizes s into out (replacing its contents); s must be valid UTF-8.
int normalizer_apply(const Tokenizer *tok, const uint8_t *s, size_t len, Buf *out, PailErr *err);
int pretok_load(Tokenizer *tok, json_t *j, PailErr *err);
void pretok_free(Tokenizer *tok);
// Runs the pre-tokenizer steps from step on one piece and BPE-encodes each resulting word.
// at_start: the piece begins at offset 0 of the text (Metaspace prepend_scheme "first").
int pretok_encode(Tokenizer *tok, int step, const uint8_t *s, size_t len, bool at_start, TokenIds *ids, PailErr *err);
// Compiles a tokenizer.json regex (\s rewritten to the library's White_Space) for PCRE2;
// what names the component in messages.
pcre2_code *tok_regex_compile(Tokenizer *tok, const char *pat, size_t len, bool literal, const char *what, PailErr *err);

// ---- decode.c
int decoder_load(Tokenizer *tok, json_t *j, PailErr *err);
void decoder_free(Tokenizer *tok);
// Runs the decoder chain over the tokens' texts and appends the result to out; raw keeps
// ByteFallback's invalid byte runs as bytes instead of U+FFFDs.
int decoder_chain(const Tokenizer *tok, const char *const *texts, size_t n, bool raw, Buf *out, PailErr *err);
