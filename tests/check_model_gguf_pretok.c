// Check suite for the GGUF pre-tokenizer table (src/model/gguf_pretok.c): every name's
// pipeline loads in pail's tokenizer (its regexes compile in PCRE2) and splits as the
// family's tokenizer.json does on the cases that tell them apart; unknown and missing names
// refused with one line, or GPT-2's with the fallback. The ids against the models' own are
// tests/integration/test_gguf_vocab.sh (llama.cpp's vocab tests).
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "model/gguf_pretok.h"
#include "tokenizer/tokenizer.h"

// Each name and the ids of " 123" with merges 1+2 and 12+3: a piece holding the whole
// number gives [' ', 123] (2 ids), one digit at a time [' ', 1, 2, 3] (4).
static const struct {
    const char *name;
    int n;
} NAMES[] = {
    {"gpt-2", 2}, {"olmo", 2}, {"llama-bpe", 2}, {"llama3", 2}, {"llama-v3", 2}, {"smaug-bpe", 2}, {"falcon3", 2}, {"falcon-h1", 2}, {"pixtral", 2}, {"midm-2.0", 2}, {"lfm2", 2}, {"jina-v5-nano", 2}, {"dbrx", 2}, {"qwen2", 4}, {"deepseek-r1-qwen", 4}, {"kormo", 4}, {"f2llmv2", 4}, {"megrez", 4}, {"tekken", 4}, {"starcoder", 4}, {"refact", 4}, {"smollm", 4}, {"exaone", 4}, {"command-r", 4}, {"deepseek-llm", 2}, {"deepseek-coder", 4}};

// A byte-level tokenizer with the pipeline of pre: the 256 byte symbols, "12" and "123".
static Tokenizer *load(const char *pre) {
    GgufPretok pt;
    PailErr err = {0};
    ck_assert_msg(gguf_pretok_bpe("x.gguf", pre, strlen(pre), false, &pt, &err) == 0, "%s: %s", pre, err.msg);
    json_t *vocab = json_object();
    static const int keep[][2] = {{33, 126}, {161, 172}, {174, 255}};
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int cp = b;
        bool in = false;
        for (int k = 0; k < 3; k++) in |= b >= keep[k][0] && b <= keep[k][1];
        if (!in) cp = 256 + n++;
        char s[4] = {0};
        if (cp < 0x80) s[0] = (char)cp;
        else s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F));
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_object_set_new(vocab, "12", json_integer(256));
    json_object_set_new(vocab, "123", json_integer(257));
    json_t *tj = json_pack("{s:o, s:o, s:{s:s, s:o, s:[s, s], s:b}}", "normalizer", pt.normalizer, "pre_tokenizer",
                           pt.pre_tokenizer, "model", "type", "BPE", "vocab", vocab, "merges", "1 2", "12 3",
                           "ignore_merges", pt.ignore_merges);
    char *s = json_dumps(tj, 0);
    json_decref(tj);
    Tokenizer *tok;
    ck_assert_msg(tokenizer_load_mem(&tok, s, strlen(s), pre, &err) == 0, "%s: %s", pre, err.msg);
    free(s);
    return tok;
}

START_TEST(test_core) {
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        Tokenizer *tok = load(NAMES[i].name);
        TokenIds ids = {0};
        PailErr err = {0};
        ck_assert_msg(tokenizer_encode(tok, " 123", 4, &ids, &err) == 0, "%s: %s", NAMES[i].name, err.msg);
        ck_assert_msg((int)ids.len == NAMES[i].n, "%s: ' 123' gives %zu ids, want %d", NAMES[i].name, ids.len, NAMES[i].n);
        ck_assert_int_eq(ids.data[ids.len - 1], NAMES[i].n == 2 ? 257 : '3');
        free(ids.data);
        tokenizer_free(tok);
    }
    GgufPretok pt;
    PailErr err = {0};
    ck_assert_int_eq(gguf_pretok_sp(&pt, &err), 0);
    ck_assert(json_is_null(pt.pre_tokenizer));
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(pt.normalizer, "normalizers"), 0), "type")),
                     "Prepend");
    gguf_pretok_free(&pt);
    ck_assert(gguf_pretok_is_byte_level("qwen2", 5));
    ck_assert(!gguf_pretok_is_byte_level("default", 7));
    ck_assert(gguf_pretok_bpe("x.gguf", "command-r", 9, false, &pt, &err) == 0);
    ck_assert_str_eq(json_string_value(json_object_get(pt.normalizer, "type")), "NFC");
    gguf_pretok_free(&pt);
    ck_assert(gguf_pretok_bpe("x.gguf", "llama-bpe", 9, false, &pt, &err) == 0 && pt.ignore_merges && !pt.fallback);
    gguf_pretok_free(&pt);
}
END_TEST

START_TEST(test_limits) {
    GgufPretok pt;
    PailErr err = {0};
    ck_assert_int_eq(gguf_pretok_bpe("x.gguf", "qwen2x", 6, false, &pt, &err), -1);
    ck_assert_msg(strstr(err.msg, "x.gguf: tokenizer.ggml.pre 'qwen2x' is not a pre-tokenizer pail knows") != NULL, "%s", err.msg);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
    ck_assert_int_eq(gguf_pretok_bpe("x.gguf", "qwen", 4, false, &pt, &err), -1);  // a prefix of a name is not it
    ck_assert_int_eq(gguf_pretok_bpe("x.gguf", NULL, 0, false, &pt, &err), -1);
    ck_assert_msg(strstr(err.msg, "tokenizer.ggml.pre is missing") != NULL, "%s", err.msg);
    ck_assert_int_eq(gguf_pretok_bpe("x.gguf", "made-up", 7, true, &pt, &err), 0);
    ck_assert(pt.fallback && !pt.ignore_merges && json_is_null(pt.normalizer));
    ck_assert_str_eq(json_string_value(json_object_get(pt.pre_tokenizer, "type")), "ByteLevel");
    gguf_pretok_free(&pt);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_gguf_pretok");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_core);
    tcase_add_test(tc, test_limits);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
