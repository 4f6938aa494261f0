// Check suite for src/tokenizer: tiny hand-built tokenizer.json files with expectations
// worked out by hand (merge order, ignore_merges, added tokens and their flags, NFC,
// digit splitting, decoding; SentencePiece-style byte fallback, Metaspace and decoders), chat rendering, hostile files and text, and the published
// Qwen3 / Llama 3 files when ../shared/reference is present (ids from the tokenizers library).
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "check_tmp.h"
#include "core/fsutil.h"
#include "core/timeutil.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

#define QWEN_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define REF "../shared/reference/tokenizers"

// GPT-2 bytes_to_unicode, written out again here so the test does not borrow the code under test.
static void byte_char(int b, char out[8]) {
    int cp = b, n = 0;
    bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    if (!keep) {
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3f)); out[2] = 0; }
}

// A byte-level tokenizer: ids 0..255 are the bytes; extra tokens from 256 in order;
// merges as given (each "a b" must form an extra token).
static char *tiny_json(const char **extra, int nextra, const char **merges, int nmerges, bool ignore_merges,
                       const char *added_json, bool nfc, bool merges_as_pairs) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c[8];
        byte_char(b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    for (int i = 0; i < nextra; i++) json_object_set_new(vocab, extra[i], json_integer(256 + i));
    json_t *m = json_array();
    for (int i = 0; i < nmerges; i++) {
        if (!merges_as_pairs) { json_array_append_new(m, json_string(merges[i])); continue; }
        char a[64];
        snprintf(a, sizeof a, "%s", merges[i]);
        char *sp = strchr(a, ' ');
        *sp = 0;
        json_array_append_new(m, json_pack("[ss]", a, sp + 1));
    }
    json_error_t je;
    json_t *added = json_loads(added_json ? added_json : "[]", 0, &je);
    json_t *root = json_pack("{s:o, s:o, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}, s:{s:s}, s:{s:s, s:o, s:o, s:b}}",
        "added_tokens", added,
        "normalizer", nfc ? json_pack("{s:s}", "type", "NFC") : json_null(),
        "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", QWEN_RE,
        "behavior", "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0,
        "decoder", "type", "ByteLevel",
        "model", "type", "BPE", "vocab", vocab, "merges", m, "ignore_merges", ignore_merges);
    ck_assert_ptr_nonnull(root);
    char *s = json_dumps(root, 0);
    json_decref(root);
    return s;
}

static const char *EXTRA[] = {"he", "ll", "hell", "hello", "Ġw", "aa", "bc", "ab", "xyz", "Ġ1"};
static const char *MERGES[] = {"h e", "l l", "he ll", "hell o", "Ġ w", "a a", "b c", "a b"};
#define ADDED "[{\"id\":300,\"content\":\"<|im_end|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}," \
              "{\"id\":301,\"content\":\"<think>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false}," \
              "{\"id\":302,\"content\":\"<mask>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":true}," \
              "{\"id\":303,\"content\":\"<|im\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}]"

static Tokenizer *tiny(bool ignore_merges, bool pairs) {
    char *js = tiny_json(EXTRA, 10, MERGES, 8, ignore_merges, ADDED, true, pairs);
    Tokenizer *t;
    PailErr err = {0};
    int rc = tokenizer_load_mem(&t, js, strlen(js), "tiny.json", &err);
    free(js);
    ck_assert_msg(rc == 0, "%s", err.msg);
    return t;
}

static void expect_ids(Tokenizer *t, const char *text, size_t len, const int32_t *want, size_t n) {
    TokenIds ids = {0};
    PailErr err = {0};
    ck_assert_msg(tokenizer_encode(t, text, len, &ids, &err) == 0, "%s", err.msg);
    char got[512] = "", w[512] = "";
    for (size_t i = 0; i < ids.len; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", ids.data[i]);
    for (size_t i = 0; i < n; i++) snprintf(w + strlen(w), sizeof w - strlen(w), "%d ", want[i]);
    ck_assert_msg(!strcmp(got, w), "\"%s\": got [%s] want [%s]", text, got, w);
    token_ids_free(&ids);
}
#define EXPECT(t, text, ...) do { const int32_t w_[] = {__VA_ARGS__}; expect_ids(t, text, strlen(text), w_, sizeof w_ / sizeof w_[0]); } while (0)

START_TEST(test_bpe_merges) {
    for (int pairs = 0; pairs < 2; pairs++) {  // "a b" strings and [a, b] pairs load alike
        Tokenizer *t = tiny(false, pairs);
        ck_assert_int_eq(tokenizer_vocab_size(t), 304);
        EXPECT(t, "hello", 259);                        // h e -> he, l l -> ll, he ll, hell o
        EXPECT(t, "hello world", 259, 260, 'o', 'r', 'l', 'd');  // " world" is one piece: Ġw o r l d
        EXPECT(t, "aaa", 261, 'a');                     // equal ranks: leftmost first
        EXPECT(t, "abc", 'a', 262);                     // "b c" ranks before "a b"
        EXPECT(t, "xyz", 'x', 'y', 'z');                // in the vocab but no merge makes it
        EXPECT(t, "12345", '1', '2', '3', '4', '5');    // \p{N}: one digit per piece
        EXPECT(t, "e\xcc\x81", 0xc3, 0xa9);             // NFC: e + U+0301 -> U+00E9 (bytes C3 A9)
        EXPECT(t, "");
        tokenizer_free(t);
    }
    Tokenizer *t = tiny(true, false);  // ignore_merges: a vocab word wins before any merge
    EXPECT(t, "xyz", 264);
    EXPECT(t, "xyzw", 'x', 'y', 'z', 'w');
    tokenizer_free(t);
}
END_TEST

// Split with a {"String": ...} pattern (a literal, as HF tokenizers matches it): PCRE2 refused
// PCRE2_LITERAL together with PCRE2_UCP ("invalid option bits"), so such a tokenizer.json did not load.
// Ids as HF tokenizers 0.23.3 gives them for the same tokenizer.json.
START_TEST(test_split_string) {
    char *js = tiny_json(EXTRA, 10, MERGES, 8, false, ADDED, true, false);
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    free(js);
    ck_assert_ptr_nonnull(root);
    const char *behavior[] = {"Isolated", "Removed"};
    for (int k = 0; k < 2; k++) {
        json_object_set_new(root, "pre_tokenizer",
                            json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                                      "pretokenizers", "type", "Split", "pattern", "String", "l.", "behavior", behavior[k],
                                      "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0));
        char *txt = json_dumps(root, 0);
        Tokenizer *t;
        PailErr err = {0};
        int rc = tokenizer_load_mem(&t, txt, strlen(txt), "split-string.json", &err);
        free(txt);
        ck_assert_msg(rc == 0, "%s", err.msg);
        if (k == 0) {
            EXPECT(t, "hello", 259);              // no "l." in it: one piece
            EXPECT(t, "hel.lo", 256, 'l', '.', 'l', 'o');  // "l." is a literal, not "l" and any character
        } else {
            EXPECT(t, "hel.lo", 256, 'l', 'o');
        }
        tokenizer_free(t);
    }
    json_decref(root);
}
END_TEST

START_TEST(test_added_tokens) {
    Tokenizer *t = tiny(false, false);
    EXPECT(t, "a<|im_end|>b", 'a', 300, 'b');
    EXPECT(t, "<|im_end|><|im_end|>", 300, 300);
    EXPECT(t, "<|im_en", 303, '_', 'e', 'n');       // leftmost-longest: the shorter "<|im" matches
    EXPECT(t, "<think>hello", 301, 259);             // never split, and BPE restarts after it
    EXPECT(t, "a  <mask>  b", 'a', 302, 'b');        // lstrip/rstrip take the spaces around
    EXPECT(t, "e\xcc\x81<think>", 0xc3, 0xa9, 301);  // text before a token is normalized alone
    ck_assert_int_eq(tokenizer_token_id(t, "<think>"), 301);
    ck_assert_int_eq(tokenizer_token_id(t, "hello"), 259);
    ck_assert_int_eq(tokenizer_token_id(t, "nope"), -1);
    ck_assert(tokenizer_is_special(t, 300));
    ck_assert(!tokenizer_is_special(t, 301));
    ck_assert_str_eq(tokenizer_token_text(t, 260), "Ġw");
    ck_assert_int_eq((int)strlen(tokenizer_sha256(t)), 64);
    tokenizer_free(t);
}
END_TEST

START_TEST(test_decode) {
    Tokenizer *t = tiny(false, false);
    Buf b = {0};
    PailErr err = {0};
    const int32_t ids[] = {259, 260, 'o', 300, 0xc3, 0xa9};
    ck_assert_int_eq(tokenizer_decode(t, ids, 6, false, &b, &err), 0);
    ck_assert_str_eq((char *)b.data, "hello wo<|im_end|>\xc3\xa9");
    buf_reset(&b);
    ck_assert_int_eq(tokenizer_decode(t, ids, 6, true, &b, &err), 0);  // special tokens left out
    ck_assert_str_eq((char *)b.data, "hello wo\xc3\xa9");
    buf_reset(&b);
    const int32_t cut[] = {'a', 0xc3};  // a character cut in half: raw bytes, lossy on request
    ck_assert_int_eq(tokenizer_decode(t, cut, 2, false, &b, &err), 0);
    ck_assert_int_eq((int)b.len, 2);
    Buf l = {0};
    utf8_append_lossy(&l, b.data, b.len);
    ck_assert_str_eq((char *)l.data, "a\xef\xbf\xbd");
    const int32_t bad[] = {1, 304};
    ck_assert_int_eq(tokenizer_decode(t, bad, 2, false, &b, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "id 304 at position 1"));
    buf_free(&b);
    buf_free(&l);
    tokenizer_free(t);
}
END_TEST

// A SentencePiece-style tokenizer (as the converters write Llama-2 / Mistral / Gemma files):
// <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF> (ids 3..258), then pieces with the
// space marker; normalizer, pre_tokenizer and decoder as given (JSON or "null").
#define SP "\xe2\x96\x81"
static Tokenizer *sp_tiny(const char *normalizer, const char *pre, const char *decoder, bool byte_fallback) {
    json_t *vocab = json_pack("{s:i, s:i, s:i}", "<unk>", 0, "<s>", 1, "</s>", 2);
    for (int b = 0; b < 256; b++) {
        char c[8];
        snprintf(c, sizeof c, "<0x%02X>", b);
        json_object_set_new(vocab, c, json_integer(3 + b));
    }
    const char *pieces[] = {SP, "h", "e", "l", "o", SP "h", "ll", SP "he", SP "hell", "\xc3\xa9"};
    for (int i = 0; i < 10; i++) json_object_set_new(vocab, pieces[i], json_integer(259 + i));
    json_error_t je;
    json_t *root = json_pack("{s:[{s:i, s:s, s:b, s:b}, {s:i, s:s, s:b, s:b}, {s:i, s:s, s:b, s:b}],"
                             " s:{s:s, s:o, s:[[ss][ss][ss][ss]], s:s, s:b, s:b}}",
        "added_tokens", "id", 0, "content", "<unk>", "special", 1, "normalized", 0, "id", 1, "content", "<s>", "special", 1,
        "normalized", 0, "id", 2, "content", "</s>", "special", 1, "normalized", 0,
        "model", "type", "BPE", "vocab", vocab, "merges", SP, "h", "l", "l", SP "h", "e", SP "he", "ll",
        "unk_token", "<unk>", "fuse_unk", 1, "byte_fallback", byte_fallback);
    ck_assert_ptr_nonnull(root);
    json_object_set_new(root, "normalizer", json_loads(normalizer, JSON_DECODE_ANY, &je));
    json_object_set_new(root, "pre_tokenizer", json_loads(pre, JSON_DECODE_ANY, &je));
    json_object_set_new(root, "decoder", json_loads(decoder, JSON_DECODE_ANY, &je));
    char *js = json_dumps(root, 0);
    json_decref(root);
    Tokenizer *t;
    PailErr err = {0};
    int rc = tokenizer_load_mem(&t, js, strlen(js), "sp.json", &err);
    free(js);
    ck_assert_msg(rc == 0, "%s", err.msg);
    return t;
}

static void expect_text(Tokenizer *t, const int32_t *ids, size_t n, bool skip, const char *want) {
    Buf b = {0};
    PailErr err = {0};
    ck_assert_msg(tokenizer_decode(t, ids, n, skip, &b, &err) == 0, "%s", err.msg);
    buf_append(&b, "", 1);
    ck_assert_msg(!strcmp((char *)b.data, want), "decoded \"%s\", want \"%s\"", (char *)b.data, want);
    buf_free(&b);
}
#define DECODES(t, skip, want, ...) do { const int32_t i_[] = {__VA_ARGS__}; expect_text(t, i_, sizeof i_ / sizeof i_[0], skip, want); } while (0)

#define SP_DECODER "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"" SP "\"}, \"content\": \" \"}," \
                   " {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}"

START_TEST(test_sentencepiece) {
    // Llama-2 legacy: the normalizer prepends the marker to every piece between added tokens
    Tokenizer *t = sp_tiny("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"" SP "\"},"
                           " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"" SP "\"}]}",
                           "null", SP_DECODER, true);
    EXPECT(t, "hello", 267, 263);                 // ▁ h e l l o: ▁h, ll, ▁he, ▁hell in rank order
    EXPECT(t, "h\xc3\xa9!", 264, 268, 3 + '!');  // '!' is not a piece: its byte token
    EXPECT(t, "h\xe2\x82\xac", 264, 3 + 0xe2, 3 + 0x82, 3 + 0xac);  // € as three byte tokens
    EXPECT(t, "<s>hello", 1, 267, 263);
    EXPECT(t, "o o", 259, 263, 259, 263);
    DECODES(t, false, "hello", 267, 263);         // Strip takes the leading space of the fused text
    DECODES(t, false, "h\xe2\x82\xac", 264, 3 + 0xe2, 3 + 0x82, 3 + 0xac);
    DECODES(t, false, "h\xe2\x82", 264, 3 + 0xe2, 3 + 0x82);  // a cut character: its raw bytes, as ByteLevel
    {  // as text: one U+FFFD per byte, as the library
        const int32_t cut[] = {264, 3 + 0xe2, 3 + 0x82};
        Buf b = {0};
        PailErr err = {0};
        ck_assert_int_eq(tokenizer_decode_text(t, cut, 3, false, &b, &err), 0);
        buf_append(&b, "", 1);
        ck_assert_str_eq((char *)b.data, "h\xef\xbf\xbd\xef\xbf\xbd");
        buf_free(&b);
    }
    DECODES(t, false, "<s> hello", 1, 267, 263);
    DECODES(t, true, "hello", 1, 267, 263, 2);
    tokenizer_free(t);
    // without byte_fallback unknown characters fuse into one <unk>
    t = sp_tiny("{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"" SP "\"}", "null", SP_DECODER, false);
    EXPECT(t, "h\xe2\x82\xac\xe2\x82\xac!", 260, 0);
    EXPECT(t, "hello", 260, 261, 265, 263);       // Gemma-style: no dummy prefix
    tokenizer_free(t);
    // Metaspace, prepend_scheme first: only the text's first piece gets the marker
    t = sp_tiny("null", "{\"type\": \"Metaspace\", \"replacement\": \"" SP "\", \"prepend_scheme\": \"first\", \"split\": false}",
                "{\"type\": \"Metaspace\", \"replacement\": \"" SP "\", \"prepend_scheme\": \"first\", \"split\": false}", true);
    EXPECT(t, "hello", 267, 263);
    EXPECT(t, " hello", 267, 263);                // already starts with the marker
    EXPECT(t, "<s>hello", 1, 260, 261, 265, 263);
    EXPECT(t, "hello<s>hello", 267, 263, 1, 260, 261, 265, 263);
    DECODES(t, false, "hello", 267, 263);         // the first token's marker is dropped
    DECODES(t, false, "<s> hello", 1, 267, 263);
    DECODES(t, true, "hello", 1, 267, 263);
    tokenizer_free(t);
    // Metaspace always + split: each marker starts a word; legacy add_prefix_space form
    t = sp_tiny("null", "{\"type\": \"Metaspace\", \"replacement\": \"" SP "\", \"add_prefix_space\": true}", "null", true);
    EXPECT(t, "hello hello", 267, 263, 267, 263);
    EXPECT(t, "<s>hello", 1, 267, 263);
    DECODES(t, false, SP "hell o", 267, 263);     // no decoder: tokens joined with spaces
    tokenizer_free(t);
    // Split's merging behaviors: "▁hello" cut at "e" is ▁h|e|llo, "hello" cut at each "l" he|l|l|o
    const char *beh[] = {"MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int k = 0; k < 3; k++) {
        char pre[160];
        snprintf(pre, sizeof pre, "{\"type\": \"Split\", \"pattern\": {\"String\": \"e\"}, \"behavior\": \"%s\", \"invert\": false}", beh[k]);
        t = sp_tiny("null", pre, "null", true);
        if (k == 0) EXPECT(t, SP "hello", 266, 265, 263);       // ▁he, llo
        if (k == 1) EXPECT(t, SP "hello", 264, 261, 265, 263);  // ▁h, ello
        if (k == 2) EXPECT(t, SP "hello", 264, 261, 265, 263);  // ▁h, e, llo
        tokenizer_free(t);
        snprintf(pre, sizeof pre, "{\"type\": \"Split\", \"pattern\": {\"String\": \"l\"}, \"behavior\": \"%s\", \"invert\": false}", beh[k]);
        t = sp_tiny("null", pre, "null", true);
        if (k == 2) EXPECT(t, "hello", 260, 261, 265, 263);     // he, ll, o
        else EXPECT(t, "hello", 260, 261, 262, 262, 263);       // hel, l, o / he, l, lo
        tokenizer_free(t);
    }
}
END_TEST

START_TEST(test_unigram) {
    // best total score: "abc" = ab + c (-3.5) over abc (-4) and a + b + c (-4); an unknown char
    // scores min - 10 = -14, and consecutive unknowns fuse into one <unk>
    const char *js = "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": %s, \"vocab\": [[\"<unk>\", 0],"
                     " [\"a\", -1], [\"b\", -1], [\"ab\", -1.5], [\"abc\", -4], [\"c\", -2], [\"<0x78>\", -3]]}}";
    for (int bf = 0; bf < 2; bf++) {
        char buf[512];
        snprintf(buf, sizeof buf, js, bf ? "true" : "false");
        Tokenizer *t;
        PailErr err = {0};
        ck_assert_msg(tokenizer_load_mem(&t, buf, strlen(buf), "uni.json", &err) == 0, "%s", err.msg);
        EXPECT(t, "abc", 3, 5);
        EXPECT(t, "cab", 5, 3);
        EXPECT(t, "xy", 0);                  // two unknowns, one <unk>
        EXPECT(t, "bab", 2, 3);              // b + ab (-2.5) over b + a + b (-3)
        if (bf) EXPECT(t, "abxxc", 3, 6, 6, 5);  // the fused "xx" is not a piece: its bytes
        else EXPECT(t, "abxxc", 3, 0, 5);
        if (bf) EXPECT(t, "xz", 0);          // z has no byte token: the whole piece is unk
        tokenizer_free(t);
    }
    Tokenizer *t;
    PailErr err = {0};
    const char *nounk = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1]]}}";
    ck_assert_int_eq(tokenizer_load_mem(&t, nounk, strlen(nounk), "nounk.json", &err), 0);
    TokenIds ids = {0};
    ck_assert_int_eq(tokenizer_encode(t, "ab", 2, &ids, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "no unk_id"));
    token_ids_free(&ids);
    tokenizer_free(t);
}
END_TEST

START_TEST(test_utf8_lossy) {
    // Maximal-subpart replacement, as Python's bytes.decode('utf-8', 'replace') gives.
    struct { const char *in; size_t len; const char *want; } v[] = {
        {"ok", 2, "ok"},
        {"\xf0\x9f\x98", 3, "\xef\xbf\xbd"},                                   // truncated 4-byte: one
        {"\xc0\x80", 2, "\xef\xbf\xbd\xef\xbf\xbd"},                           // overlong: two
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},           // surrogate: three
        {"a\xe2\x82z", 4, "a\xef\xbf\xbdz"},
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // > U+10FFFF
        {"\xe2\x82\xac", 3, "\xe2\x82\xac"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        Buf b = {0};
        utf8_append_lossy(&b, (const uint8_t *)v[i].in, v[i].len);
        ck_assert_msg(b.len == strlen(v[i].want) && !memcmp(b.data, v[i].want, b.len), "vector %zu", i);
        buf_free(&b);
    }
    ck_assert_int_eq(utf8_invalid_at((const uint8_t *)"ab\xff", 3), 2);
    ck_assert_int_eq(utf8_invalid_at((const uint8_t *)"\xe2\x82\xac", 3), -1);
}
END_TEST

// ---- chat: the model's template found where transformers looks, rendered by the interpreter

static void put_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    fclose(f);
}

static char *slurp(const char *path) {
    Buf b = {0};
    PailErr err = {0};
    ck_assert_msg(fs_read_file(path, &b, &err) == 0, "%s (run from the repository root)", err.msg);
    return (char *)b.data;  // the Buf's storage, NUL-terminated
}

static void render_js(const ChatTemplate *t, const char *msgs_json, const char *tools_json, bool gen, const char *want) {
    json_t *m = json_loads(msgs_json, 0, NULL), *tl = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    ck_assert_ptr_nonnull(m);
    Buf b = {0};
    PailErr err = {0};
    ck_assert_msg(chat_render(t, m, tl, gen, &b, &err) == 0, "%s", err.msg);
    ck_assert_msg(b.data && !strcmp((char *)b.data, want), "got:\n%s\nwant:\n%s", b.data ? (char *)b.data : "", want);
    buf_free(&b);
    json_decref(m);
    json_decref(tl);
}

static void load_ok(ChatTemplate *t, const char *dir, const ChatSource *src) {
    PailErr err = {0};
    ck_assert_msg(chat_template_load(t, dir, NULL, src, &err) == 0, "%s", err.msg);
}

// The three templates validation/tokenizer/templates/ holds (checked there against transformers), with
// the renderings the former fixed renderers were validated to give.
START_TEST(test_chat) {
    char dir[64];
    tmp_make(dir, sizeof dir, "chat");
    const char *conv = "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"2+2?\"}, "
                       "{\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \" ok \"}]";
    ChatTemplate t;
    char *q = slurp("validation/tokenizer/templates/qwen3.jinja");
    put_file(dir, "chat_template.jinja", q);
    put_file(dir, "tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\"}");
    load_ok(&t, dir, NULL);
    ck_assert_ptr_nonnull(strstr(t.source, "chat_template.jinja"));
    render_js(&t, conv, NULL, true,
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
              "<|im_start|>user\n ok <|im_end|>\n<|im_start|>assistant\n");
    render_js(&t, "[{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}]",
              NULL, false, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd\n</think>\n\n4<|im_end|>\n");
    json_t *f = json_false();
    PailErr err = {0};
    ck_assert_int_eq(chat_template_set_var(&t, "enable_thinking", f, &err), 0);
    render_js(&t, "[{\"role\": \"user\", \"content\": \"2+2?\"}]", NULL, true,
              "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    ck_assert_int_eq(chat_template_set_var(&t, "messages", f, &err), -1);  // transformers sets it itself
    ck_assert_ptr_nonnull(strstr(err.msg, "'messages'"));
    json_decref(f);
    chat_template_free(&t);
    free(q);
    // Llama 3 from tokenizer_config.json (no chat_template.jinja): bos from the config, content trimmed
    char *l = slurp("validation/tokenizer/templates/llama3.jinja");
    char path[128];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    json_t *cfg = json_pack("{s:s, s:{s:s}}", "chat_template", l, "bos_token", "content", "<|begin_of_text|>");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    ck_assert_int_eq(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    load_ok(&t, dir, NULL);
    ck_assert_ptr_nonnull(strstr(t.source, "tokenizer_config.json"));
    render_js(&t, "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"2+2?\"}]", NULL, true,
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    render_js(&t, "[{\"role\": \"user\", \"content\": \" ok \"}]", NULL, true,
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nok<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    chat_template_free(&t);
    free(l);
    // --chat-template FILE wins over the model's; ChatML's default system message
    snprintf(path, sizeof path, "%s/other.jinja", dir);
    char *c = slurp("validation/tokenizer/templates/chatml.jinja");
    put_file(dir, "other.jinja", c);
    put_file(dir, "chat_template.jinja", "never used");
    ChatSource src = {.template_file = path};
    load_ok(&t, dir, &src);
    render_js(&t, "[{\"role\": \"user\", \"content\": \"2+2?\"}]", NULL, true,
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    chat_template_free(&t);
    free(c);
    tmp_remove(dir);
}
END_TEST

// What the template sees: special tokens as the config sets them (unset ones undefined), kwargs,
// messages with null keys dropped and reasoning aliased, tools/documents None, named templates.
START_TEST(test_chat_inputs) {
    char dir[64];
    tmp_make(dir, sizeof dir, "chat");
    put_file(dir, "tokenizer_config.json",
             "{\"bos_token\": null, \"eos_token\": {\"content\": \"</s>\", \"special\": true}, \"pad_token\": \"<pad>\","
             " \"added_tokens_decoder\": {}}");
    put_file(dir, "special_tokens_map.json", "{\"bos_token\": \"<ignored>\"}");  // read only without added_tokens_decoder
    put_file(dir, "chat_template.jinja",
             "{{ bos_token is defined }}|{{ eos_token }}|{{ pad_token }}|{{ unk_token is defined }}|{{ tools }}|{{ documents }}|"
             "{{ add_generation_prompt }}|{{ greeting }}|{% for m in messages %}{{ m | tojson }}{% endfor %}\n");
    ChatTemplate t;
    ChatSource src = {.kwargs_json = "{\"greeting\": \"hé\", \"eos_token\": \"<kw>\"}"};
    load_ok(&t, dir, &src);
    render_js(&t, "[{\"role\": \"assistant\", \"content\": null, \"reasoning\": \"r\", \"x\": [1, 2.5]}]", NULL, false,
              "False|<kw>|<pad>|False|None|None|False|hé|"
              "{\"thinking\": \"r\", \"role\": \"assistant\", \"reasoning\": \"r\", \"x\": [1, 2.5], \"reasoning_content\": \"r\"}");
    chat_template_free(&t);
    // named templates in tokenizer_config.json: "default", or "tool_use" for rows with tools, or by name
    char path[128];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    ck_assert_int_eq(unlink(path), 0);
    put_file(dir, "tokenizer_config.json",
             "{\"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ messages | length }}\"},"
             " {\"name\": \"tool_use\", \"template\": \"T{{ tools | length }}\"}, {\"name\": \"rag\", \"template\": \"R\"}]}");
    load_ok(&t, dir, NULL);
    render_js(&t, "[{\"role\": \"user\", \"content\": \"a\"}]", NULL, true, "D1");
    render_js(&t, "[{\"role\": \"user\", \"content\": \"a\"}]", "[{\"type\": \"function\"}]", true, "T1");
    chat_template_free(&t);
    ChatSource named = {.template_name = "rag"};
    load_ok(&t, dir, &named);
    render_js(&t, "[{\"role\": \"user\", \"content\": \"a\"}]", "[{\"type\": \"function\"}]", true, "R");
    chat_template_free(&t);
    // additional_chat_templates/ beside chat_template.jinja replace the config's list
    snprintf(path, sizeof path, "%s/additional_chat_templates", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    put_file(path, "tool_use.jinja", "FT");
    put_file(dir, "chat_template.jinja", "FD");
    load_ok(&t, dir, NULL);
    render_js(&t, "[{\"role\": \"user\", \"content\": \"a\"}]", NULL, true, "FD");
    render_js(&t, "[{\"role\": \"user\", \"content\": \"a\"}]", "[]", true, "FT");
    chat_template_free(&t);
    tmp_remove(dir);
}
END_TEST

static void load_fails(const char *dir, const ChatSource *src, const char *needle) {
    ChatTemplate t;
    PailErr err = {0};
    ck_assert_int_eq(chat_template_load(&t, dir, NULL, src, &err), -1);
    ck_assert_msg(strstr(err.msg, needle), "error '%s' lacks '%s'", err.msg, needle);
}

static void render_fails(const ChatTemplate *t, const char *msgs_json, const char *needle) {
    json_t *m = json_loads(msgs_json, 0, NULL);
    Buf b = {0};
    buf_append(&b, "kept", 4);
    PailErr err = {0};
    ck_assert_int_eq(chat_render(t, m, NULL, true, &b, &err), -1);
    ck_assert_msg(strstr(err.msg, needle), "error '%s' lacks '%s'", err.msg, needle);
    ck_assert_msg(b.len == 4 && !memcmp(b.data, "kept", 4), "a failed render changed the output");
    buf_free(&b);
    json_decref(m);
}

START_TEST(test_chat_limits) {
    char dir[64];
    tmp_make(dir, sizeof dir, "chat");
    ChatSource plain_bad = {.prompt_format = "no placeholder"}, plain = {.prompt_format = "Q: {prompt}\nA: {prompt}"};
    load_fails(dir, &plain_bad, "{prompt}");
    ChatTemplate t;
    load_ok(&t, dir, &plain);
    render_js(&t, "[{\"role\": \"user\", \"content\": \"x\"}]", NULL, true, "Q: x\nA: x");
    render_fails(&t, "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"x\"}]", "exactly one user message");
    chat_template_free(&t);
    load_fails(dir, NULL, "no chat template");  // nothing in the folder
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"a\", \"template\": \"x\"}]}");
    load_fails(dir, NULL, "none named \"default\" (there are: a)");
    ChatSource named = {.template_name = "b"};
    load_fails(dir, &named, "no chat template named \"b\" (there are: a)");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": 3}");
    load_fails(dir, NULL, "neither a string nor a list");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": \"{% for m in messages %}{{ m.content }}\"}");
    load_fails(dir, NULL, "tokenizer_config.json (chat_template):1:");  // where it fails to parse
    put_file(dir, "tokenizer_config.json", "not json");
    load_fails(dir, NULL, "cannot read as a JSON object");
    put_file(dir, "tokenizer_config.json",
             "{\"chat_template\": \"{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}ok\"}");
    ChatSource badkw = {.kwargs_json = "[1]"}, reserved = {.kwargs_json = "{\"tools\": 1}"};
    load_fails(dir, &badkw, "--chat-template-kwargs: not a JSON object");
    load_fails(dir, &reserved, "'tools' is set by pail itself");
    load_ok(&t, dir, NULL);
    render_fails(&t, "[{\"role\": \"system\", \"content\": \"s\"}]", "user first");
    render_fails(&t, "[]", "the conversation is empty");
    render_fails(&t, "[\"hi\"]", "messages[0]: not a JSON object");
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"x\"}]", 0, NULL), *tools = json_loads("[{}, \"f\"]", 0, NULL);
    Buf b = {0};
    PailErr err = {0};
    ck_assert_int_eq(chat_render(&t, m, tools, true, &b, &err), -1);
    ck_assert_msg(strstr(err.msg, "tools[1]: not a JSON object"), "%s", err.msg);
    json_decref(m);
    json_decref(tools);
    chat_template_free(&t);
    tmp_remove(dir);
}
END_TEST

static void expect_load_error(const char *js, const char *needle) {
    Tokenizer *t;
    PailErr err = {0};
    ck_assert_int_eq(tokenizer_load_mem(&t, js, strlen(js), "bad.json", &err), -1);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, needle) && strstr(err.msg, "bad.json"), "message \"%s\" lacks \"%s\"", err.msg, needle);
}

START_TEST(test_hostile_files) {
    expect_load_error("", "not valid JSON");
    expect_load_error("[]", "not a JSON object");
    expect_load_error("{\"added_tokens\": []}", "no \"model\"");
    expect_load_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model type 'WordPiece' is not supported");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": []}}", "model.vocab");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}}}", "is not a token id");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": 5}}", "model.merges is not an array");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a c\"]}}",
                      "model.merges[0] uses token \"c\" that is not in the vocab");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [[\"a\", \"b\"]]}}",
                      "makes \"ab\" that is not in the vocab");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "not two tokens");
    expect_load_error("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", "model type 'WordLevel' is not supported");
    expect_load_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]]}}", "Unigram model.vocab[0] is not a [\"piece\", score] pair");
    expect_load_error("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 3, \"vocab\": [[\"a\", 0]]}}", "unk_id is not an id");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "pre_tokenizer 'Whitespace' is not supported");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": \"Split\", "
                      "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "ByteLevel before another");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}, "
                      "\"model\": {\"type\": \"BPE\", \"vocab\": {}}}", "behavior 'Sideways'");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}, "
                      "\"model\": {\"type\": \"BPE\", \"vocab\": {}}}", "does not compile");
    expect_load_error("{\"normalizer\": {\"type\": \"Precompiled\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "normalizer 'Precompiled' is not supported");
    expect_load_error("{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "normalizer Replace needs");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"prepend_scheme\": \"sometimes\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "prepend_scheme 'sometimes'");
    expect_load_error("{\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "decoder ByteLevel inside a Sequence");
    expect_load_error("{\"decoder\": {\"type\": \"Strip\", \"content\": \"ab\", \"start\": 1, \"stop\": 0}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "is not one character");
    expect_load_error("{\"decoder\": {\"type\": \"CTC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "decoder 'CTC' is not supported");
    expect_load_error("{\"decoder\": {\"type\": \"WordPiece\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}}}",
                      "decoder 'WordPiece' is not supported");
    expect_load_error("{\"added_tokens\": [{\"content\": \"x\"}], \"model\": {\"type\": \"BPE\", \"vocab\": {}}}", "added_tokens[0]");
    expect_load_error("{\"added_tokens\": [{\"id\": 0, \"content\": \"x\"}], \"model\": {\"type\": \"BPE\", \"vocab\": {\"y\": 0}}}",
                      "which the vocab gives to \"y\"");
    // ids are bounded by the tokens the file holds: one near 2^30 would size tables of tens of GB
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 100000}}}",
                      "token \"b\" has id 100000, but the file holds 2 tokens (ids must be below 260)");
    expect_load_error("{\"added_tokens\": [{\"id\": 1073741000, \"content\": \"<x>\"}], \"model\": {\"type\": \"BPE\", "
                      "\"vocab\": {\"a\": 0}}}", "token \"<x>\" has id 1073741000");
    expect_load_error("{\"added_tokens\": [{\"id\": 900000000, \"content\": \"<x>\"}], \"model\": {\"type\": \"Unigram\", "
                      "\"vocab\": [[\"a\", 0]]}}", "token \"<x>\" has id 900000000");
    // every truncation of a valid file fails cleanly (run under ASan: make asan)
    char *js = tiny_json(EXTRA, 10, MERGES, 8, false, ADDED, true, false);
    size_t len = strlen(js);
    for (size_t n = 0; n < len; n += (n < 200 || len - n < 200) ? 1 : 7) {
        Tokenizer *t;
        PailErr err = {0};
        ck_assert_int_eq(tokenizer_load_mem(&t, js, n, "cut.json", &err), -1);
        ck_assert_ptr_nonnull(strstr(err.msg, "cut.json"));
    }
    free(js);
}
END_TEST

START_TEST(test_hostile_text) {
    Tokenizer *t = tiny(false, false);
    TokenIds ids = {0};
    PailErr err = {0};
    ck_assert_int_eq(tokenizer_encode(t, "ab\xff", 3, &ids, &err), -1);  // the library takes only valid str
    ck_assert_ptr_nonnull(strstr(err.msg, "not valid UTF-8 (byte 0xff at offset 2)"));
    ck_assert_int_eq(tokenizer_encode(t, "\xed\xa0\x80", 3, &ids, &err), -1);  // a surrogate
    ids.len = 0;
    ck_assert_int_eq(tokenizer_encode(t, "a\0b", 3, &ids, &err), 0);  // NUL is text
    ck_assert_int_eq((int)ids.len, 3);
    // long runs: one 200k-character word and 200k spaces (merge heap, regex stack)
    size_t n = 200000;
    char *big = malloc(n);
    memset(big, 'a', n);
    ids.len = 0;
    ck_assert_int_eq(tokenizer_encode(t, big, n, &ids, &err), 0);
    ck_assert_int_eq((int)ids.len, (int)(n / 2));  // all "aa"
    memset(big, ' ', n);
    ids.len = 0;
    ck_assert_int_eq(tokenizer_encode(t, big, n, &ids, &err), 0);
    ck_assert_int_eq((int)ids.len, (int)n);
    free(big);
    token_ids_free(&ids);
    tokenizer_free(t);
}
END_TEST

// A tokenizer file with one long string (n times c) spliced into fmt's %s.
static Tokenizer *load_with_run(const char *fmt, char c, size_t n) {
    char *run = malloc(n + 1);
    memset(run, c, n);
    run[n] = 0;
    size_t len = strlen(fmt) + n;
    char *js = malloc(len + 1);
    snprintf(js, len + 1, fmt, run);
    Tokenizer *t;
    PailErr err = {0};
    ck_assert_msg(tokenizer_load_mem(&t, js, strlen(js), "work.json", &err) == 0, "%s", err.msg);
    free(js);
    free(run);
    return t;
}

START_TEST(test_work_bounds) {
    TokenIds ids = {0};
    PailErr err = {0};
    // A Replace that makes a megabyte of each 'a': bounded as the chat template's work budget
    // (16 x the text + 4 KiB), one line naming the normalizer; the text without an 'a' encodes.
    Tokenizer *t = load_with_run("{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"%s\"},"
                                 " \"model\": {\"type\": \"BPE\", \"vocab\": {\"b\": 0, \"c\": 1}}}", 'b', 1 << 20);
    ck_assert_int_eq(tokenizer_encode(t, "caaaa", 5, &ids, &err), -1);
    ck_assert_msg(strstr(err.msg, "work.json: normalizer Replace grows the text past 4176 bytes (16x its length + 4 KiB)"), "%s", err.msg);
    ck_assert_int_eq(tokenizer_encode(t, "cc", 2, &ids, &err), 0);
    ck_assert_int_eq((int)ids.len, 2);
    tokenizer_free(t);
    // steps that each grow 8x stay bounded as a chain (8 x 8 = 64x): the limit is the whole normalizer's
    const char *x8 = "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"b\"}, \"content\": \"bbbbbbbb\"}";
    char js[1024];
    snprintf(js, sizeof js, "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [%s, %s]}, \"model\": {\"type\": \"BPE\", "
             "\"vocab\": {\"b\": 0}}}", x8, x8);
    ck_assert_int_eq(tokenizer_load_mem(&t, js, strlen(js), "x8.json", &err), 0);
    ids.len = 0;
    ck_assert_int_eq(tokenizer_encode(t, "bbbb", 4, &ids, &err), 0);  // 256 bytes: under 4 KiB
    ck_assert_int_eq((int)ids.len, 256);
    char *many = malloc(8192);
    memset(many, 'b', 8192);
    ck_assert_int_eq(tokenizer_encode(t, many, 8192, &ids, &err), -1);
    ck_assert_msg(strstr(err.msg, "x8.json: normalizer Replace grows the text past 135168 bytes"), "%s", err.msg);
    free(many);
    tokenizer_free(t);
    // A 100k-character Unigram piece: loads in linear time, a short text still encodes, and a
    // long run of its character fails on the work budget in bounded time instead of quadratic.
    double t0 = time_mono_s();
    t = load_with_run("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"a\", -1], [\"%s\", -2]]}}",
                      'a', 100000);
    ids.len = 0;
    ck_assert_int_eq(tokenizer_encode(t, "aaa", 3, &ids, &err), 0);
    ck_assert_int_eq((int)ids.len, 3);
    size_t n = 20000;
    char *run = malloc(n);
    memset(run, 'a', n);
    ck_assert_int_eq(tokenizer_encode(t, run, n, &ids, &err), -1);
    ck_assert_msg(strstr(err.msg, "Unigram work budget of 5185536 steps exceeded on a 20000-byte word"), "%s", err.msg);
    free(run);
    tokenizer_free(t);
    ck_assert_msg(time_mono_s() - t0 < 20, "took %.1f s", time_mono_s() - t0);
    // A text that cannot fit n tokens is known by its bytes: 4 x n x the longest token.
    t = tiny(false, false);
    ck_assert_uint_gt(tokenizer_max_text_bytes(t, 10), 10);
    ck_assert_uint_eq(tokenizer_max_text_bytes(t, 10), 10 * tokenizer_max_text_bytes(t, 1));
    ck_assert_uint_eq(tokenizer_max_text_bytes(t, SIZE_MAX), SIZE_MAX);
    tokenizer_free(t);
    token_ids_free(&ids);
}
END_TEST

typedef struct { Tokenizer *t; size_t n; } ThreadArg;
static void *encode_many(void *p) {
    ThreadArg *a = p;
    TokenIds ids = {0};
    PailErr err = {0};
    for (int i = 0; i < 2000; i++) {
        ids.len = 0;
        if (tokenizer_encode(a->t, "hello world aaa abc hello", 25, &ids, &err) < 0) break;
    }
    a->n = ids.len;
    token_ids_free(&ids);
    return NULL;
}

START_TEST(test_threads) {  // one tokenizer, two threads: the cache lock keeps results right
    Tokenizer *t = tiny(false, false);
    ThreadArg a[2] = {{t, 0}, {t, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, encode_many, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    ck_assert_int_eq((int)a[0].n, 14);
    ck_assert_int_eq((int)a[1].n, 14);
    tokenizer_free(t);
}
END_TEST

START_TEST(test_reference_files) {
    if (access(REF "/qwen3/tokenizer.json", R_OK) || access(REF "/llama3/tokenizer.json", R_OK)) {
        printf("SKIP reference tokenizers: " REF " absent\n");
        return;
    }
    Tokenizer *q, *l;
    PailErr err = {0};
    ck_assert_msg(tokenizer_load(&q, REF "/qwen3/tokenizer.json", &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_load(&l, REF "/llama3/tokenizer.json", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(tokenizer_vocab_size(q), 151669);  // 151,643 + 26 added
    ck_assert_int_eq(tokenizer_vocab_size(l), 128256);
    ck_assert_int_eq(tokenizer_bos_id(q), -1);
    ck_assert_int_eq(tokenizer_eos_id(q), 151645);  // <|im_end|>
    ck_assert_int_eq(tokenizer_bos_id(l), 128000);
    ck_assert_int_eq(tokenizer_eos_id(l), 128001);
    // ids from tokenizers 0.23.3, encode(text, add_special_tokens=False)
    EXPECT(q, "Hello world", 9707, 1879);
    EXPECT(q, " 1234567 don't", 220, 16, 17, 18, 19, 20, 21, 22, 1513, 944);
    EXPECT(q, "<|im_start|>user\n你好<|im_end|>", 151644, 872, 198, 108386, 151645);
    EXPECT(l, "Hello world", 9906, 1917);
    EXPECT(l, " 1234567 don't", 220, 4513, 10961, 22, 1541, 956);
    EXPECT(l, "<|begin_of_text|><|start_header_id|>x", 128000, 128006, 87);
    tokenizer_free(q);
    tokenizer_free(l);
}
END_TEST

static Tokenizer *tiny_with_post(const char *post, PailErr *err) {
    char *js = tiny_json(EXTRA, 10, MERGES, 8, false, ADDED, true, false);
    json_t *root = json_loads(js, 0, NULL), *pp = json_loads(post, JSON_DECODE_ANY, NULL);
    free(js);
    ck_assert_ptr_nonnull(root);
    ck_assert_ptr_nonnull(pp);
    json_object_set_new(root, "post_processor", pp);
    js = json_dumps(root, 0);
    json_decref(root);
    Tokenizer *t = NULL;
    int rc = tokenizer_load_mem(&t, js, strlen(js), "post.json", err);
    free(js);
    return rc == 0 ? t : NULL;
}

static void expect_text_ids(Tokenizer *t, const char *text, const int32_t *want, size_t n) {
    TokenIds ids = {0};
    PailErr err = {0};
    ck_assert_msg(tokenizer_encode_text(t, text, strlen(text), &ids, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(ids.len, n);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(ids.data[i], want[i]);
    token_ids_free(&ids);
}
#define EXPECT_TEXT(t, text, ...) do { const int32_t w_[] = {__VA_ARGS__}; expect_text_ids(t, text, w_, sizeof w_ / sizeof w_[0]); } while (0)

// tokenizer_encode_text: the special tokens the post_processor puts around one text, as
// transformers' tokenizer(text) adds them (Gemma's and Llama's <bos>); plain encode adds none.
START_TEST(test_post_processor) {
    PailErr err = {0};
    Tokenizer *t = tiny_with_post("{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\", \"trim_offsets\": false},"
                                  " {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|im\", \"type_id\": 0}},"
                                  " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"<|im_end|>\", \"type_id\": 0}}],"
                                  " \"pair\": [], \"special_tokens\": {\"<|im\": {\"id\": \"<|im\", \"ids\": [303], \"tokens\": [\"<|im\"]},"
                                  " \"<|im_end|>\": {\"id\": \"<|im_end|>\", \"ids\": [300], \"tokens\": [\"<|im_end|>\"]}}}]}", &err);
    ck_assert_msg(t, "%s", err.msg);
    EXPECT_TEXT(t, "hello", 303, 259, 300);
    EXPECT_TEXT(t, "", 303, 300);
    EXPECT(t, "hello", 259);
    tokenizer_free(t);
    ck_assert_ptr_nonnull(t = tiny_with_post("{\"type\": \"RobertaProcessing\", \"cls\": [\"<|im\", 303], \"sep\": [\"<mask>\", 302]}", &err));
    EXPECT_TEXT(t, "hello", 303, 259, 302);
    tokenizer_free(t);
    ck_assert_ptr_nonnull(t = tiny_with_post("{\"type\": \"ByteLevel\"}", &err));
    EXPECT_TEXT(t, "hello", 259);
    tokenizer_free(t);
    ck_assert_ptr_nonnull(t = tiny_with_post("null", &err));
    EXPECT_TEXT(t, "hello", 259);
    tokenizer_free(t);
    // a kind pail cannot apply loads (encode is unaffected) and is refused, named, for a plain prompt
    ck_assert_ptr_nonnull(t = tiny_with_post("{\"type\": \"Mystery\"}", &err));
    TokenIds ids = {0};
    ck_assert_int_eq(tokenizer_encode_text(t, "hello", 5, &ids, &err), -1);
    ck_assert_msg(strstr(err.msg, "post_processor 'Mystery'"), "%s", err.msg);
    token_ids_free(&ids);
    EXPECT(t, "hello", 259);
    tokenizer_free(t);
    // ids outside the vocabulary, a special token with no ids: refused at load, named
    ck_assert_ptr_null(tiny_with_post("{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"x\"}},"
                                      " {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"x\": {\"ids\": [1000000000]}}}", &err));
    ck_assert_msg(strstr(err.msg, "id 1000000000 is not in the vocabulary"), "%s", err.msg);
    ck_assert_ptr_null(tiny_with_post("{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"y\"}}],"
                                      " \"special_tokens\": {}}", &err));
    ck_assert_msg(strstr(err.msg, "single[0]"), "%s", err.msg);
    // the reference Llama 3 and Qwen3 files: a ByteLevel post_processor, nothing added (transformers
    // 5.24's tokenizer("Hello world") gives these ids for both)
    const char *refs[2] = {REF "/llama3/tokenizer.json", REF "/qwen3/tokenizer.json"};
    const int32_t want[2][2] = {{9906, 1917}, {9707, 1879}};
    for (int k = 0; k < 2; k++) {
        if (access(refs[k], R_OK)) continue;
        ck_assert_msg(tokenizer_load(&t, refs[k], &err) == 0, "%s", err.msg);
        expect_text_ids(t, "Hello world", want[k], 2);
        tokenizer_free(t);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("tokenizer");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_bpe_merges);
    tcase_add_test(core, test_split_string);
    tcase_add_test(core, test_added_tokens);
    tcase_add_test(core, test_decode);
    tcase_add_test(core, test_sentencepiece);
    tcase_add_test(core, test_unigram);
    tcase_add_test(core, test_chat);
    tcase_add_test(core, test_chat_inputs);
    tcase_add_test(core, test_reference_files);
    tcase_add_test(core, test_threads);
    tcase_add_test(core, test_post_processor);
    tcase_add_test(limits, test_utf8_lossy);
    tcase_add_test(limits, test_chat_limits);
    tcase_add_test(limits, test_hostile_files);
    tcase_add_test(limits, test_hostile_text);
    tcase_add_test(limits, test_work_bounds);
    tcase_set_timeout(core, 60);
    tcase_set_timeout(limits, 60);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
