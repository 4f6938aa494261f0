// A GGUF file (llama, qwen2, qwen3, exaone, granite, olmo2, smollm3, phi3, gemma2, gemma3, command-r or cohere2 architecture,
// or the mixtures of experts qwen3moe, qwen2moe, olmoe, granitemoe and llama with experts (mixtral:
// gguf_import_moe.h); a llama one with a sliding window as mistral; gpt2 byte-level BPE or llama SentencePiece
// BPE tokenizer) imported as a Hugging Face folder the way transformers'
// from_pretrained(..., gguf_file=...) reads it (the tokenizer: as the model's own
// tokenizer.json, gguf_pretok.h): config.json, generation_config.json,
// model.safetensors (the quantized matrices as their blocks in pail's layout,
// doc/models.md, unless dequantized; the rest bf16 or f32), tokenizer.json, tokenizer_config.json and,
// when the file has one, chat_template.jinja. Byte-deterministic: the same file
// gives the same bytes. What pail cannot import is refused with one line.
#pragma once
#include <stdbool.h>
#include "core/err.h"
#include "model/gguf.h"
#include "model/safetensors.h"

typedef struct {
    SafeTensorsDtype dtype;   // ST_DTYPE_BF16 (default) or ST_DTYPE_F32
    bool tokenizer_only;      // write tokenizer.json, tokenizer_config.json (and the template) only
    bool allow_tokenizer_fallback;  // an unknown tokenizer.ggml.pre imports with GPT-2's pre-tokenizer, warned
    bool dequantize;          // every quantized matrix dequantized to dtype (else kept as its blocks)
} GgufImportOptions;

// What the import wrote, for the command's summary line.
typedef struct {
    char arch[16];            // the model_type imported: "llama", "mistral" (a llama file with a window), "qwen3_moe"
    int n_tensors, vocab;
    char types[128];          // the tensor types the file held: "Q4_1 F32 Q8_0"
    bool kept;                // some matrices were kept quantized (model.safetensors holds their blocks)
} GgufImportInfo;

// Writes the folder dir (created). Returns 0, or -1 with err: UNSUPPORTED for an
// architecture, tokenizer or feature pail does not import, INVALID for a file
// whose metadata and tensors disagree.
int gguf_import(const GgufFile *g, const char *dir, const GgufImportOptions *opt, GgufImportInfo *info,
                PailErr *err);
