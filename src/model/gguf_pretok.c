// tokenizer.ggml.pre -> the model's own tokenizer.json pipeline (see gguf_pretok.h). The
// regexes are those of the models' tokenizer.json files, which llama.cpp's llama-vocab.cpp
// copies (adapted to its engine) for the same names; checked against the ids each model's
// Hugging Face tokenizer gives on llama.cpp's vocabulary tests (tests/integration/test_gguf_vocab.sh).
#include "model/gguf_pretok.h"
#include <string.h>

typedef enum {
    PRE_GPT2,          // ByteLevel with GPT-2's regex
    PRE_LLAMA3,        // Split(Llama 3's regex) + ByteLevel
    PRE_QWEN2,         // Split(Qwen2's regex: one digit at a time) + ByteLevel
    PRE_TEKKEN,        // Split(Tekken's regex) + ByteLevel
    PRE_DIGITS_GPT2,   // Digits(individual) + ByteLevel with GPT-2's regex (StarCoder-derived)
    PRE_DEEPSEEK_LLM,  // DeepSeek LLM's five Splits + Digits (runs) + ByteLevel
    PRE_DEEPSEEK_CODER,
} PreKind;

typedef struct {
    const char *name;
    PreKind kind;
    bool nfc, ignore_merges;
} PreName;

// Names pail imports; a family's own tokenizer.json decides the flags: Llama 3's and Tekken's BPE have
// ignore_merges (a word in the vocab is one token even where the merges would not build
// it: 'Cửa' is), Qwen2's and Command-R's files normalize NFC. The names after a family's
// first are llama.cpp's aliases of its regex, taken as transformers' loader takes them.
static const PreName NAMES[] = {
    {"gpt-2", PRE_GPT2, false, false},
    {"olmo", PRE_GPT2, true, false},
    {"llama-bpe", PRE_LLAMA3, false, true},
    {"llama3", PRE_LLAMA3, false, true},
    {"llama-v3", PRE_LLAMA3, false, true},
    {"smaug-bpe", PRE_LLAMA3, false, true},
    {"falcon3", PRE_LLAMA3, false, false},
    {"falcon-h1", PRE_LLAMA3, false, false},
    {"pixtral", PRE_LLAMA3, false, false},
    {"midm-2.0", PRE_LLAMA3, false, false},
    {"lfm2", PRE_LLAMA3, false, false},
    {"jina-v5-nano", PRE_LLAMA3, false, false},
    {"dbrx", PRE_LLAMA3, false, false},
    {"qwen2", PRE_QWEN2, true, false},
    {"deepseek-r1-qwen", PRE_QWEN2, true, false},
    {"kormo", PRE_QWEN2, false, false},
    {"f2llmv2", PRE_QWEN2, false, false},
    {"megrez", PRE_QWEN2, false, false},
    {"tekken", PRE_TEKKEN, false, true},
    {"starcoder", PRE_DIGITS_GPT2, false, false},
    {"refact", PRE_DIGITS_GPT2, false, false},
    {"smollm", PRE_DIGITS_GPT2, false, false},
    {"exaone", PRE_DIGITS_GPT2, false, false},
    {"command-r", PRE_DIGITS_GPT2, true, false},
    {"deepseek-llm", PRE_DEEPSEEK_LLM, false, false},
    {"deepseek-coder", PRE_DEEPSEEK_CODER, false, false},
};

static const char *LLAMA3_SPLIT =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *QWEN2_SPLIT =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Mistral Nemo's (tekken.json's pattern, as transformers' MistralConverter writes it)
static const char *TEKKEN_SPLIT =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
// DeepSeek LLM's letters: its tokenizer.json lists them as ranges. Six characters that NFC
// changes (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126 OHM, U+212A KELVIN) are written escaped,
// so that no editor's normalization turns 'KELVIN-U+212D' into 'K-U+212D' or a range into a
// descending one.
static const char *DEEPSEEK_LLM_SPLITS[] = {
    "[\\r\\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ"
    "-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}"
    "ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    NULL,
};
static const char *DEEPSEEK_CODER_SPLITS[] = {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", NULL};

static json_t *byte_level(bool regex) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex",
                     regex);
}

static json_t *split(const char *re) {
    return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", re, "behavior", "Isolated", "invert", 0);
}

static json_t *digits(bool individual) { return json_pack("{s:s, s:b}", "type", "Digits", "individual_digits", individual); }

static const PreName *find(const char *pre, size_t n) {
    for (size_t i = 0; pre && i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strlen(NAMES[i].name) == n && !memcmp(pre, NAMES[i].name, n)) return &NAMES[i];
    return NULL;
}

static json_t *pipeline(PreKind k) {
    json_t *seq = json_array();
    if (!seq) return NULL;
    const char **splits = k == PRE_DEEPSEEK_LLM ? DEEPSEEK_LLM_SPLITS : k == PRE_DEEPSEEK_CODER ? DEEPSEEK_CODER_SPLITS :
                                                                                                  NULL;
    for (size_t i = 0; splits && splits[i]; i++) json_array_append_new(seq, split(splits[i]));
    switch (k) {
    case PRE_GPT2: json_decref(seq); return byte_level(true);
    case PRE_LLAMA3: json_array_append_new(seq, split(LLAMA3_SPLIT)); break;
    case PRE_QWEN2: json_array_append_new(seq, split(QWEN2_SPLIT)); break;
    case PRE_TEKKEN: json_array_append_new(seq, split(TEKKEN_SPLIT)); break;
    case PRE_DIGITS_GPT2: json_array_append_new(seq, digits(true)); break;
    case PRE_DEEPSEEK_LLM: json_array_append_new(seq, digits(false)); break;
    case PRE_DEEPSEEK_CODER: json_array_append_new(seq, digits(true)); break;
    }
    json_array_append_new(seq, byte_level(k == PRE_DIGITS_GPT2));
    return json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", seq);
}

int gguf_pretok_bpe(const char *path, const char *pre, size_t n, bool allow_fallback, GgufPretok *out, PailErr *err) {
    memset(out, 0, sizeof *out);
    const PreName *p = find(pre, n);
    if (!p && !allow_fallback) {
        if (!pre)
            return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: tokenizer.ggml.pre is missing, so the model's pre-tokenizer "
                                                      "is unknown (--allow-tokenizer-fallback imports it with GPT-2's)",
                           path);
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: tokenizer.ggml.pre '%.*s' is not a pre-tokenizer pail knows "
                                                  "(doc/tokenizer.md lists them; --allow-tokenizer-fallback imports it with GPT-2's)",
                       path, (int)(n > 64 ? 64 : n), pre);
    }
    out->fallback = !p;
    out->ignore_merges = p && p->ignore_merges;
    out->normalizer = p && p->nfc ? json_pack("{s:s}", "type", "NFC") : json_null();
    out->pre_tokenizer = pipeline(p ? p->kind : PRE_GPT2);
    if (!out->normalizer || !out->pre_tokenizer) {
        gguf_pretok_free(out);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    return 0;
}

int gguf_pretok_sp(GgufPretok *out, PailErr *err) {
    memset(out, 0, sizeof *out);
    out->normalizer = json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence", "normalizers", "type",
                                "Prepend", "prepend", "\u2581", "type", "Replace", "pattern", "String", " ", "content",
                                "\u2581");
    out->pre_tokenizer = json_null();
    if (!out->normalizer) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    return 0;
}

bool gguf_pretok_is_byte_level(const char *pre, size_t n) { return find(pre, n) != NULL; }

void gguf_pretok_free(GgufPretok *p) {
    json_decref(p->normalizer);
    json_decref(p->pre_tokenizer);
    p->normalizer = p->pre_tokenizer = NULL;
}
