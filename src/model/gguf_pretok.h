// tokenizer.ggml.pre (a GGUF's pre-tokenizer name) -> the normalizer, pre-tokenizer and
// ignore_merges of the model's own tokenizer.json, for each name whose family pail
// imports (llama.cpp's src/llama-vocab.cpp maps the same names to its regexes). Not the
// table transformers' GGUF loader uses: see doc/tokenizer.md for where the two differ.
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "core/err.h"

typedef struct {
    json_t *normalizer;     // owned; json null for none
    json_t *pre_tokenizer;  // owned; json null for none (SentencePiece, legacy)
    bool ignore_merges;     // the model's BPE has ignore_merges (Llama 3)
    bool fallback;          // the name was unknown and GPT-2's ByteLevel was used (allow_fallback)
} GgufPretok;

// A byte-level ("gpt2") vocabulary's pipeline for the name pre (n bytes; NULL or n 0:
// the key is absent). An unknown or absent name fails with one line naming it
// (UNSUPPORTED), unless allow_fallback, which gives GPT-2's ByteLevel with fallback set.
// path names the file in messages. Returns 0 or -1 with err.
int gguf_pretok_bpe(const char *path, const char *pre, size_t n, bool allow_fallback, GgufPretok *out, PailErr *err);

// A SentencePiece ("llama") vocabulary's pipeline: Llama 2's and Phi-3's tokenizer.json
// (legacy): Prepend("▁") then Replace(" " -> "▁"), no pre-tokenizer.
int gguf_pretok_sp(GgufPretok *out, PailErr *err);

// Whether pre names a byte-level pipeline (refused on a SentencePiece vocabulary).
bool gguf_pretok_is_byte_level(const char *pre, size_t n);

void gguf_pretok_free(GgufPretok *p);
