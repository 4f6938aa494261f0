// grpo-ctl import-gguf: a GGUF file (llama, qwen2, qwen3, exaone, granite, olmo2, smollm3, phi3, gemma2, gemma3, command-r, cohere2,
// the mixtures of experts qwen3moe, qwen2moe, olmoe, granitemoe, gpt-oss and llama with experts (Mixtral), with a gpt2 or llama
// tokenizer)
// as a Hugging Face folder pail and transformers load (model/gguf_import.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ctl/ctl.h"
#include "model/gguf_import.h"
#include "model/weights.h"

int ctl_import_gguf(int argc, char **argv) {
    char *out = NULL, *dtype_s = NULL;
    bool tok_only = false, fallback = false, dequant = false;
    Flag fl[] = {
        {"out", FLAG_STRING, &out, NULL, 1, 0, "folder to write (created; existing files replaced)"},
        {"dtype", FLAG_STRING, &dtype_s, "bf16", 1, 0,
         "model.safetensors dtype of the float tensors (and of every matrix with --dequantize): bf16 or f32"},
        {"dequantize", FLAG_BOOL, &dequant, "false", 1, 0,
         "hold every quantized matrix as --dtype (exact dequantized values with f32) instead of keeping its blocks; "
         "needed for Q2_K and Q3_K, which pail does not compute on"},
        {"tokenizer-only", FLAG_BOOL, &tok_only, "false", 1, 0,
         "write the tokenizer files only (any architecture; llama.cpp's vocab-only files)"},
        {"allow-tokenizer-fallback", FLAG_BOOL, &fallback, "false", 1, 0,
         "import an unknown or missing tokenizer.ggml.pre with GPT-2's pre-tokenizer, warned (ids may differ from "
         "the model's), instead of refusing it"},
    };
    char **pos = NULL;
    int npos = 0, rc;
    const char *usage = "grpo-ctl import-gguf FILE.gguf --out DIR [--dtype bf16|f32] [--dequantize] [--tokenizer-only] "
                        "[--allow-tokenizer-fallback]";
    if ((rc = ctl_parse(usage,
                        "Imports a GGUF file (llama, qwen2, qwen3, exaone, granite, olmo2, smollm3, phi3, gemma2, gemma3, command-r or cohere2 architecture, "
                        "or the mixtures of experts qwen3moe, qwen2moe, olmoe, granitemoe, gpt-oss (as gpt_oss) and llama with "
                        "llama.expert_count (as mixtral); a llama "
                        "file with a sliding window as mistral; F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
                        "Q5_1, Q8_0, Q2_K..Q6_K, MXFP4 (always dequantized to --dtype, said on stderr) tensors; gpt2 byte-level BPE or llama SentencePiece BPE tokenizer) into config.json, "
                        "generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json and "
                        "chat_template.jinja, as transformers' from_pretrained(..., gguf_file=...) reads it (exaone, granite, olmo2, "
                        "smollm3, command-r, cohere2, which it does not read, phi3, whose partial rotary, window and longrope it drops, and gemma2 / gemma3, "
                        "whose query_pre_attn_scalar, caps and local RoPE base it does not read, and the mixtures of experts "
                        "(llama.cpp's reading: doc/models.md): as their Hugging Face checkpoints load). The tokenizer is the model's own tokenizer.json, chosen by "
                        "tokenizer.ggml.pre (doc/tokenizer.md), not the one transformers' GGUF loader builds. "
                        "Quantized matrices (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) keep their blocks: every "
                        "pail tool computes on them as stored, one base for the trainer and the workers "
                        "(doc/models.md); --dequantize writes them as --dtype, as transformers would load them.",
                        fl, 5, argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos != 1) { fprintf(stderr, "%s: give one FILE.gguf (see --help)\n", argv[0]); goto done; }
    if (!out) { fprintf(stderr, "%s: --out DIR is required\n", argv[0]); goto done; }
    GgufImportOptions opt = {.tokenizer_only = tok_only, .allow_tokenizer_fallback = fallback, .dequantize = dequant};
    int want = MODEL_DTYPE_AUTO;
    if (model_dtype_parse(dtype_s, &want) == 0 && want == DT_BF16) opt.dtype = ST_DTYPE_BF16;
    else if (want == DT_F32) opt.dtype = ST_DTYPE_F32;
    else { fprintf(stderr, "%s: --dtype '%s': use bf16 or f32 (or bfloat16, float32)\n", argv[0], dtype_s); goto done; }
    rc = 1;
    GgufFile g;
    PailErr err = {0};
    if (gguf_open(&g, pos[0], &err) < 0) { fprintf(stderr, "%s: %s\n", argv[0], err.msg); goto done; }
    GgufImportInfo info;
    if (gguf_import(&g, out, &opt, &info, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
    } else {
        if (strstr(info.types, "MXFP4"))  // gpt-oss's experts: pail has no MXFP4 compute type
            fprintf(stderr, "%s: MXFP4 tensors dequantized to %s at import (pail computes on no MXFP4)\n", argv[0],
                    dtype_s);
        if (tok_only) printf("wrote %s: tokenizer, vocab %d\n", out, info.vocab);
        else if (info.kept)
            printf("wrote %s: %s, %d tensors (%s): quantized matrices kept as their blocks, the rest %s, vocab %d\n", out,
                   info.arch, info.n_tensors, info.types, dtype_s, info.vocab);
        else printf("wrote %s: %s, %d tensors (%s) as %s, vocab %d\n", out, info.arch, info.n_tensors, info.types, dtype_s,
                    info.vocab);
        rc = 0;
    }
    gguf_close(&g);
done:
    free(pos);
    flags_free(fl, 5);
    return rc;
}
