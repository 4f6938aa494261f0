// BPE tokenizer loaded from a Hugging Face tokenizer.json: byte-level (GPT-2, Qwen2/2.5/3,
// Llama 3, Tekken) and SentencePiece-derived (Llama-2, Mistral, Gemma, Phi-3): added/special
// tokens matched first and never split, normalizers (NFC & co via utf8proc, Prepend, Replace,
// Lowercase, Strip), pre-tokenizer Split regexes (PCRE2, UTF + Unicode properties, JIT),
// ByteLevel, Metaspace, BPE merges with ignore_merges and byte_fallback, the Unigram model,
// and the decoders. Encoding equals the tokenizers library's encode(text,
// add_special_tokens=False). Chat templates live in chat.h.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"
#include "core/utf8.h"

typedef struct Tokenizer Tokenizer;  // opaque; const after load except the word cache

typedef struct {
    int32_t *data;  // owned
    size_t len, cap;
} TokenIds;

// Loads tokenizer.json; also reads bos/eos tokens from tokenizer_config.json in the same
// folder when that file exists. Components pail does not implement are refused with an
// error naming them. 0 / -1 with err.
int tokenizer_load(Tokenizer **out, const char *tokenizer_json_path, PailErr *err);
// Same from the file's bytes (name is used in messages only).
int tokenizer_load_mem(Tokenizer **out, const char *json, size_t len, const char *name, PailErr *err);
void tokenizer_free(Tokenizer *tok);

// Appends the ids of text (UTF-8, len bytes, may hold NUL) to ids. Text that is not valid
// UTF-8 is refused (the library takes only str). Thread safety: calls on one Tokenizer
// serialize on an internal lock that guards the word -> ids cache; use one Tokenizer per
// thread for parallel encoding.
int tokenizer_encode(Tokenizer *tok, const char *text, size_t len, TokenIds *ids, PailErr *err);
// The same, then the special tokens the post_processor puts around one text (transformers'
// tokenizer(text), add_special_tokens=True: Gemma's and Llama's <bos>), for plain text that
// no chat template wrote them into. Fails, naming it, on a post_processor pail cannot apply.
int tokenizer_encode_text(Tokenizer *tok, const char *text, size_t len, TokenIds *ids, PailErr *err);
// Appends the decoded bytes of ids to out (the decoder's bytes, which may be invalid UTF-8
// when ids cut a character: ByteLevel and ByteFallback tokens, kept raw so that a growing
// sequence can be decoded piece by piece). skip_special drops special added tokens. Thread-safe.
int tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, Buf *out,
                     PailErr *err);
// Same as text, valid UTF-8 equal to the library's decode: an invalid ByteFallback run is
// one U+FFFD per byte, invalid ByteLevel bytes one per maximal invalid subpart.
int tokenizer_decode_text(const Tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, Buf *out,
                          PailErr *err);
// utf8_append_lossy, utf8_invalid_at: core/utf8.h (included above).

int32_t tokenizer_token_id(const Tokenizer *tok, const char *token);  // -1 when absent
const char *tokenizer_token_text(const Tokenizer *tok, int32_t id);     // borrowed; NULL when absent
// The most bytes a text that encodes to n_tokens tokens can have, to refuse a text without
// encoding it (a 1 GiB word would take tens of GB to merge): n_tokens x the longest token's
// text x TOKENIZER_TEXT_SLACK, the slack for what normalizers and stripping added tokens drop.
// Only a text that loses more than that (a run of unknown characters fused into one unk) encodes
// to fewer tokens.
#define TOKENIZER_TEXT_SLACK 4
size_t tokenizer_max_text_bytes(const Tokenizer *tok, size_t n_tokens);
int32_t tokenizer_vocab_size(const Tokenizer *tok);  // max id + 1 over vocab and added tokens
int32_t tokenizer_bos_id(const Tokenizer *tok);      // -1 when tokenizer_config.json has none
int32_t tokenizer_eos_id(const Tokenizer *tok);
bool tokenizer_is_special(const Tokenizer *tok, int32_t id);
const char *tokenizer_sha256(const Tokenizer *tok);  // hex sha256 of the tokenizer.json bytes
// Sets the bos/eos tokens by content (from a tokenizer_config.json read elsewhere).
int tokenizer_set_bos_eos(Tokenizer *tok, const char *bos, const char *eos, PailErr *err);

void token_ids_free(TokenIds *ids);
int token_ids_push(TokenIds *ids, int32_t id);  // 0 / -1 on out of memory
