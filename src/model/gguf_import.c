// GGUF -> Hugging Face folder (see gguf_import.h). The mapping follows
// transformers 5's GGUF loader (modeling_gguf_pytorch_utils.py) for the config
// and tensors and,
// for the architectures it does not read (exaone, granite, olmo2, smollm3, command-r, cohere2) or reads in part
// (phi3: it drops the rotary width, the window and longrope's tables; gemma2 / gemma3: it keeps
// the config's default query_pre_attn_scalar, caps and sliding layers' base), llama.cpp's
// convert_hf_to_gguf.py run backwards: llama.cpp's key and tensor names to HF's, Q and
// K rows un-permuted where the converter permuted them for its RoPE layout (llama,
// granite, smollm3). The tokenizer is the model's own tokenizer.json, not that loader's
// (gguf_pretok.c chooses its pipeline by tokenizer.ggml.pre): the byte-level BPE vocabulary
// respelled in GPT-2's byte alphabet where a token is not already, CONTROL tokens special and
// USER_DEFINED ones added, both spelled as their text; a SentencePiece vocabulary as Llama 2's
// legacy file, its merges rebuilt from the scores. The mixtures of experts (qwen3moe, qwen2moe,
// olmoe, granitemoe, llama with experts) are read as llama.cpp reads them: gguf_import_moe.c.
#include "model/gguf_import.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "model/gguf_import_moe.h"
#include "model/gguf_pretok.h"
#include "model/modelgen.h"
#include "model/weights.h"

// ---- config ----

static int key_int(const GgufFile *g, const char *arch, const char *k, int64_t *v, bool required, PailErr *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, k);
    PailErr e = {0};
    if (gguf_get_int(g, full, v, &e) == 0) {
        if (*v < 0 || *v > (1 << 30))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s is %lld, out of range", g->path, full, (long long)*v);
        return 1;
    }
    if (e.code == PAIL_ERR_NOT_FOUND && !required) return 0;
    *err = e;
    return -1;
}

static int key_float(const GgufFile *g, const char *arch, const char *k, double *v, PailErr *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, k);
    PailErr e = {0};
    if (gguf_get_float(g, full, v, &e) == 0) return 1;
    if (e.code == PAIL_ERR_NOT_FOUND) return 0;
    *err = e;
    return -1;
}

// What the families after qwen3 add to the llama keys. rope.dimension_count, when given,
// must be D (partial rotary is not imported). A sliding window is imported only for a
// llama file: Mistral, which llama.cpp writes as llama (model_type mistral, that window);
// olmo2's (OLMo 3) and the others' are refused. granite: its four multipliers, written by
// convert_hf_to_gguf as <arch>.attention.scale, embedding_scale, residual_scale and
// logit_scale; llama.cpp requires them, so a file without one is refused. smollm3: the file
// carries no no_rope_layers; llama.cpp leaves RoPE out of every 4th layer (its fixed
// n_no_rope_layer_step, SmolLM3Config's default no_rope_layer_interval), so pail does too.
// llama.cpp's convert writes llama3 RoPE scaling (Llama 3.1 and later, EXAONE 3.5) as
// rope_freqs.weight, D/2 factors that divide the frequencies (LlamaModel /
// ExaoneModel.generate_extra_tensors), not the four parameters. Every published llama3
// scaling has low_freq_factor 1, high_freq_factor 4 and original_max_position_embeddings
// 8192, and its factor is the largest value (the low-frequency band's): with these the
// factors are recomputed as the converter does (float32) and must all equal the file's
// (relative 1e-5); then the model imports with rope_scaling llama3, as its checkpoint had.
// Any other table is refused. transformers' GGUF loader drops the tensor (and so loads
// another model). All factors 1: no scaling.
static int rope_freqs_llama3(const GgufFile *g, ModelConfig *c, PailErr *err) {
    const GgufTensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    if (!t) return 0;
    int half = c->head_dim / 2;
    if (t->ndim != 1 || t->dims[0] != (uint64_t)half || (t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16))
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: rope_freqs.weight is not %d F32 or F16 values (D / 2)", g->path, half);
    float *f = malloc((size_t)half * sizeof *f);
    if (!f) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    gguf_dequantize(f, t->data, t->type, (uint64_t)half);
    float mx = 0, mn = INFINITY;
    for (int i = 0; i < half; i++) mx = f[i] > mx ? f[i] : mx, mn = f[i] < mn ? f[i] : mn;
    int rc = 0;
    if (mn == 1.0f && mx == 1.0f) goto out;  // no band is scaled: the model is unscaled
    char num[32];
    snprintf(num, sizeof num, "%.7g", mx);
    const float factor = mx, lo = 1.0f, hi = 4.0f, orig = 8192.0f;
    const float lo_wave = orig / lo, hi_wave = orig / hi;
    for (int i = 0; i < half; i++) {
        float inv = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)c->head_dim);
        float wave = (float)(2 * M_PI) / inv, want;
        if (wave < hi_wave) want = 1.0f;
        else if (wave > lo_wave) want = factor;
        else {
            float smooth = (orig / wave - lo) / (hi - lo);
            want = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
        if (!(isfinite(f[i]) && fabsf(f[i] - want) <= 1e-5f * want)) {
            rc = err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: rope_freqs.weight[%d] is %g; llama3 RoPE scaling (factor "
                         "%s, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192) gives %g: "
                         "other RoPE scaling is not imported", g->path, i, f[i], num, want);
            goto out;
        }
    }
    c->rope_scaling = ROPE_SCALING_LLAMA3;
    c->rope_factor = strtod(num, NULL);
    c->rope_low_freq_factor = lo;
    c->rope_high_freq_factor = hi;
    c->rope_original_max_position_embeddings = (int)orig;
out:
    free(f);
    return rc;
}

// phi3 (convert_hf_to_gguf's Phi3MiniModel: Phi-3, 3.5, 4, 4-mini). rope.dimension_count is
// int(D * partial_rotary_factor): pail's rotary dims (even, 2..D). attention.sliding_window as
// config.json's (0, which the converter writes for None (Phi-4): full attention). longrope travels
// as rope_factors_short.weight / rope_factors_long.weight (rotary dims / 2 values each), with
// rope.scaling.original_context_length (the top-level original_max_position_embeddings) and
// rope.scaling.attn_factor (the converter's sqrt(1 + ln(s) / ln(original)), s = context_length /
// original, 1 when s <= 1): imported as rope_scaling longrope with those factors, that original and
// that attention_factor (transformers' own double when the file's float32 is it, as the checkpoint
// without the key computes). One table without the other, a table of another length, a value not
// finite and > 0, or longrope without its two keys is refused by name. transformers' GGUF loader
// reads none of these (it loads full rotary, no window, no scaling: another model).
static int phi3_config(const GgufFile *g, const char *arch, ModelConfig *c, PailErr *err) {
    int64_t v;
    int r = key_int(g, arch, "rope.dimension_count", &v, false, err);
    if (r < 0) return -1;
    if (r && (v < 2 || v % 2 || v > c->head_dim))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.rope.dimension_count is %lld; pail needs an even number "
                       "of rotary dims from 2 to the head dim %d", g->path, arch, (long long)v, c->head_dim);
    if (r) c->rope_dim = v < c->head_dim ? (int)v : 0;
    if ((r = key_int(g, arch, "attention.sliding_window", &v, false, err)) < 0) return -1;
    if (r && v > 0) c->sliding_window = (int)v;
    const char *name[2] = {"rope_factors_short.weight", "rope_factors_long.weight"};
    const GgufTensor *t[2] = {gguf_find_tensor(g, name[0]), gguf_find_tensor(g, name[1])};
    if (!t[0] && !t[1]) return 0;
    if (!t[0] || !t[1])
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s without %s (longrope needs both tables)", g->path,
                       name[t[0] ? 0 : 1], name[t[0] ? 1 : 0]);
    int half = model_rope_dim(c) / 2;
    float *dst[2] = {c->rope_short_factor, c->rope_long_factor};
    for (int k = 0; k < 2; k++) {
        if (half > MODEL_MAX_ROPE_FACTORS || t[k]->ndim != 1 || t[k]->dims[0] != (uint64_t)half ||
            (t[k]->type != GGML_TYPE_F32 && t[k]->type != GGML_TYPE_F16))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s is not %d F32 or F16 values (rotary dims / 2)", g->path,
                           name[k], half);
        gguf_dequantize(dst[k], t[k]->data, t[k]->type, (uint64_t)half);
        for (int i = 0; i < half; i++)
            if (!(isfinite(dst[k][i]) && dst[k][i] > 0))
                return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s[%d] is %g; need a finite number > 0", g->path,
                               name[k], i, dst[k][i]);
    }
    int64_t omax;
    double af;
    if ((r = key_int(g, arch, "rope.scaling.original_context_length", &omax, false, err)) < 0) return -1;
    if (!r || omax < 1)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.rope.scaling.original_context_length is %s; longrope's "
                       "tables need it (original_max_position_embeddings)", g->path, arch, r ? "0" : "missing");
    if ((r = key_float(g, arch, "rope.scaling.attn_factor", &af, err)) < 0) return -1;
    if (!r || !(isfinite(af) && af > 0))
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.rope.scaling.attn_factor is %s; longrope's tables need a "
                       "finite number > 0", g->path, arch, r ? "not finite and > 0" : "missing");
    double s = (double)c->max_position_embeddings / (double)omax;
    double dflt = s > 1.0 && omax > 1 ? sqrt(1 + log(s) / log((double)omax)) : 1.0;
    c->rope_scaling = ROPE_SCALING_LONGROPE;
    c->rope_original_max_position_embeddings = (int)omax;
    c->rope_factor = s;
    c->rope_attention_factor = (float)dflt == (float)af ? dflt : af;
    return 0;
}

// gemma2 / gemma3 (convert_hf_to_gguf's Gemma2Model / Gemma3Model, llama.cpp's reading of them).
// attention.sliding_window as the window of the sliding layers (absent or 0: none); the layer pattern
// is llama.cpp's fixed one (gemma2 every 2nd layer full, gemma3 every 6th: Gemma2Config's and
// Gemma3TextConfig's defaults), so a file with attention.sliding_window_pattern is refused. No key
// carries query_pre_attn_scalar: llama.cpp scales the scores by key_length^-0.5, but by (C / H)^-0.5
// for the 27B models (46 layers gemma2, 62 gemma3), as their checkpoints' query_pre_attn_scalar is;
// pail does the same. attn_logit_softcapping / final_logit_softcapping as the caps (absent: llama.cpp's
// 50 and 30 for gemma2, none for gemma3). gemma3: rope.freq_base the global layers' base,
// rope.freq_base_swa the sliding layers' (absent: llama.cpp's 10000); rope.scaling.type linear with
// rope.scaling.factor on the global layers (Gemma 3 4B and larger). The converter stored every norm
// weight as 1 + w; load_tensors takes the 1 off.
static int gemma_config(const GgufFile *g, const char *arch, ModelConfig *c, PailErr *err) {
    int64_t v;
    int r = key_int(g, arch, "rope.dimension_count", &v, false, err);
    if (r < 0) return -1;
    if (r && v != c->head_dim)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.rope.dimension_count is %lld, not the head dim %d "
                       "(pail imports partial rotary for phi3 only)", g->path, arch, (long long)v, c->head_dim);
    if ((r = key_int(g, arch, "attention.sliding_window", &v, false, err)) < 0) return -1;
    c->sliding_window = r ? (int)v : 0;
    char k[128];
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", arch);
    if (gguf_find(g, k))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s is not imported; pail imports %s's fixed layer pattern "
                       "(every %s layer full attention, as llama.cpp runs it)", g->path, k, arch,
                       c->type == MODEL_GEMMA2 ? "2nd" : "6th");
    model_config_gemma_layers(c, NULL, 0);
    int big = c->type == MODEL_GEMMA2 ? 46 : 62;
    c->query_pre_attn_scalar = c->num_hidden_layers == big ? c->hidden_size / c->num_attention_heads : c->head_dim;
    const char *cap[2] = {"attn_logit_softcapping", "final_logit_softcapping"};
    double *dst[2] = {&c->attn_logit_softcapping, &c->final_logit_softcapping}, f;
    for (int i = 0; i < 2; i++) {
        if ((r = key_float(g, arch, cap[i], &f, err)) < 0) return -1;
        if (r && !(isfinite(f) && f >= 0))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.%s is %g; need a finite number >= 0 (0: none)", g->path,
                           arch, cap[i], f);
        if (r) *dst[i] = f;
    }
    if (c->type == MODEL_GEMMA3_TEXT) {
        if ((r = key_float(g, arch, "rope.freq_base_swa", &f, err)) < 0) return -1;
        if (r && !(isfinite(f) && f > 0))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.rope.freq_base_swa is %g; need a finite number > 0",
                           g->path, arch, f);
        if (r) c->rope_local_theta = f;
        const char *s;
        size_t sl;
        PailErr e = {0};
        snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
        if (gguf_get_string(g, k, &s, &sl, &e) == 0 && sl == 6 && !memcmp(s, "linear", 6)) {
            if ((r = key_float(g, arch, "rope.scaling.factor", &f, err)) < 0) return -1;
            if (!r || !(isfinite(f) && f > 0))
                return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.rope.scaling.factor is %s; linear RoPE scaling "
                               "needs a finite number > 0", g->path, arch, r ? "not finite and > 0" : "missing");
            c->rope_scaling = ROPE_SCALING_LINEAR;
            c->rope_factor = f;
        }
    }
    model_config_gemma_scales(c);
    return 0;
}

// command-r / cohere2 (convert_hf_to_gguf's CommandR2Model / Cohere2Model): LayerNorm without
// bias, its epsilon in attention.layer_norm_epsilon (required); logit_scale (required, as llama.cpp
// requires it); command-r's per-head attn_q_norm / attn_k_norm ((H, D), (Hkv, D)) as use_qk_norm;
// HF's rows (Cohere rotates interleaved pairs, llama.cpp's normal RoPE: no permutation). cohere2:
// attention.sliding_window the window (required > 0: Cohere2Config has no windowless model) on
// llama.cpp's fixed pattern (every 4th layer full attention without RoPE, Cohere2Config's default
// sliding_window_pattern); a file with attention.sliding_window_pattern is refused.
static int cohere_config(const GgufFile *g, const char *arch, ModelConfig *c, PailErr *err) {
    int64_t v;
    double f;
    int r = key_int(g, arch, "rope.dimension_count", &v, false, err);
    if (r < 0) return -1;
    if (r && v != c->head_dim)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.rope.dimension_count is %lld, not the head dim %d "
                       "(pail imports partial rotary for phi3 only)", g->path, arch, (long long)v, c->head_dim);
    const char *need[2] = {"attention.layer_norm_epsilon", "logit_scale"};
    double *dst[2] = {&c->rms_norm_eps, &c->logit_scale};
    for (int i = 0; i < 2; i++) {
        if ((r = key_float(g, arch, need[i], &f, err)) < 0) return -1;
        if (!r)
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.%s is missing (a %s file carries it)", g->path, arch,
                           need[i], arch);
        if (!(isfinite(f) && f > 0))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.%s is %g; need a finite number > 0", g->path, arch,
                           need[i], f);
        *dst[i] = f;
    }
    c->has_qk_norm = c->type == MODEL_COHERE && gguf_find_tensor(g, "blk.0.attn_q_norm.weight") != NULL;
    if ((r = key_int(g, arch, "attention.sliding_window", &v, false, err)) < 0) return -1;
    if (c->type == MODEL_COHERE) {
        if (r)
            return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.attention.sliding_window is %lld; command-r has no "
                           "window (cohere2 has)", g->path, arch, (long long)v);
        return 0;
    }
    if (!r || v < 1)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.attention.sliding_window is %s; a cohere2 file needs its "
                       "window", g->path, arch, r ? "0" : "missing");
    char k[128];
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", arch);
    if (gguf_find(g, k))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s is not imported; pail imports cohere2's fixed layer "
                       "pattern (every 4th layer full attention without RoPE, as llama.cpp runs it)", g->path, k);
    c->sliding_window = (int)v;
    model_config_set_layer_pattern(c, 4);
    return 0;
}

static int build_config_family(const GgufFile *g, const char *arch, ModelConfig *c, PailErr *err) {
    if (c->type == MODEL_PHI3) return phi3_config(g, arch, c, err);
    if (c->type == MODEL_COHERE || c->type == MODEL_COHERE2) return cohere_config(g, arch, c, err);
    if (c->type == MODEL_GEMMA2 || c->type == MODEL_GEMMA3_TEXT) return gemma_config(g, arch, c, err);
    if (rope_freqs_llama3(g, c, err) < 0) return -1;
    int64_t v;
    int r = key_int(g, arch, "rope.dimension_count", &v, false, err);
    if (r < 0) return -1;
    if (r && v != c->head_dim)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.rope.dimension_count is %lld, not the head dim %d "
                       "(pail imports partial rotary for phi3 only)", g->path, arch, (long long)v, c->head_dim);
    if ((r = key_int(g, arch, "attention.sliding_window", &v, false, err)) < 0) return -1;
    if (c->type == MODEL_GPT_OSS) {  // gguf_moe_config read it
    } else if (r && (c->type == MODEL_LLAMA || c->type == MODEL_MIXTRAL)) {  // Mistral; Mixtral keeps its type
        if (v < 1)
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.attention.sliding_window is %lld", g->path, arch, (long long)v);
        if (c->type == MODEL_LLAMA) c->type = MODEL_MISTRAL;
        c->sliding_window = (int)v;
    } else if (r) {
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s.attention.sliding_window is %lld; pail imports a sliding "
                       "window only for a llama file (Mistral) and phi3", g->path, arch, (long long)v);
    }
    if (c->type == MODEL_GRANITE || c->type == MODEL_GRANITEMOE) {
        struct { const char *k; double *dst; } m[] = {
            {"embedding_scale", &c->embedding_multiplier}, {"residual_scale", &c->residual_multiplier},
            {"attention.scale", &c->attention_multiplier}, {"logit_scale", &c->logits_scaling},
        };
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
            double f;
            if ((r = key_float(g, arch, m[i].k, &f, err)) < 0) return -1;
            if (!r)
                return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.%s is missing (a granite file carries its four "
                               "multipliers)", g->path, arch, m[i].k);
            if (!(isfinite(f) && f > 0))
                return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.%s is %g; need a finite number > 0", g->path, arch,
                               m[i].k, f);
            *m[i].dst = f;
        }
    }
    if (c->type == MODEL_SMOLLM3)
        for (int l = 0; l < c->num_hidden_layers; l++)
            if ((l + 1) % 4 == 0) c->no_rope[l >> 6] |= 1ull << (l & 63);
    return 0;
}

static int build_config(const GgufFile *g, const char *arch, ModelType type, int n_vocab, ModelConfig *cfg,
                        PailErr *err) {
    ModelConfig c = {0};
    model_config_defaults(&c, type);
    int64_t v;
    // The loader's ranges (config.c's model_config_parse), checked as they are read: the
    // layer count sizes the per-layer tables below and every allocation after them.
    struct { const char *k; int *dst; bool req; int64_t max; } ints[] = {
        {"block_count", &c.num_hidden_layers, true, MODEL_MAX_LAYERS}, {"embedding_length", &c.hidden_size, true, 1 << 16},
        {"feed_forward_length", &c.intermediate_size, true, 1 << 20},
        {"attention.head_count", &c.num_attention_heads, true, 1024},
        {"attention.head_count_kv", &c.num_key_value_heads, false, 1024},
        {"context_length", &c.max_position_embeddings, false, 1 << 30}, {"vocab_size", &c.vocab_size, false, 1 << 22},
    };
    c.vocab_size = n_vocab;
    c.num_key_value_heads = 0;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int r = key_int(g, arch, ints[i].k, &v, ints[i].req, err);
        if (r < 0) return -1;
        if (r && (v < 1 || v > ints[i].max))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.%s is %lld; pail loads 1..%lld", g->path, arch, ints[i].k,
                           (long long)v, (long long)ints[i].max);
        if (r) *ints[i].dst = (int)v;
    }
    if (!c.num_key_value_heads) c.num_key_value_heads = c.num_attention_heads;
    int r;
    double f;
    if ((r = key_float(g, arch, "attention.layer_norm_rms_epsilon", &f, err)) < 0) return -1;
    if (r) c.rms_norm_eps = f;
    if (r && !(isfinite(f) && f > 0))  // JSON has no inf or nan: config.json would lose the key
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.attention.layer_norm_rms_epsilon is %g; need a finite number > 0",
                       g->path, arch, f);
    if ((r = key_float(g, arch, "rope.freq_base", &f, err)) < 0) return -1;
    // An inf here was written to config.json as nothing (JSON has no inf) and the model then
    // loaded with the default 10000: a different model. Refused instead.
    if (r && !(isfinite(f) && f > 0))
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s.rope.freq_base is %g; need a finite number > 0", g->path, arch, f);
    if (r) c.rope_theta = f;
    // Llama 3's rope scaling travels as a rope_freqs tensor, which transformers
    // drops; importing the model without it would change it, so it is refused.
    char sk[128];
    snprintf(sk, sizeof sk, "%s.rope.scaling.type", arch);
    const char *s;
    size_t sl;
    PailErr e = {0};
    if (type != MODEL_GPT_OSS && gguf_get_string(g, sk, &s, &sl, &e) == 0 && !(sl == 4 && !memcmp(s, "none", 4)) &&
        !(type == MODEL_GEMMA3_TEXT && sl == 6 && !memcmp(s, "linear", 6)))  // gemma3's: gemma_config
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: RoPE scaling (%s '%.*s') is not imported", g->path, sk,
                       (int)(sl > 32 ? 32 : sl), s);
    // D from the q projection: HF's head_dim for qwen3 (transformers reads no key for it); phi3's
    // fused attn_qkv holds H + 2 Hkv heads
    bool fused = type == MODEL_PHI3;
    const char *qn = fused ? "blk.0.attn_qkv.weight" : "blk.0.attn_q.weight";
    const GgufTensor *q = gguf_find_tensor(g, qn);
    uint64_t nh = (uint64_t)c.num_attention_heads + (fused ? 2 * (uint64_t)c.num_key_value_heads : 0);
    if (!q || q->ndim != 2 || !c.num_attention_heads || q->dims[1] % nh)
        return err_set(err, PAIL_ERR_INVALID, "gguf %s: %s is missing or not (%s*D, C)", g->path, qn,
                       fused ? "(H+2*Hkv)" : "H");
    c.head_dim = (int)(q->dims[1] / nh);
    c.tie_word_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    if (type != MODEL_QWEN2) c.has_qkv_bias = c.has_o_bias = gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    if (model_is_moe(&c) && gguf_moe_config(g, arch, &c, err) < 0) return -1;
    c.bos_token_id = -1;
    if (gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v, &e) == 0) c.bos_token_id = (int)v;
    if (gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v, &e) == 0) c.eos_token_ids[0] = (int)v, c.n_eos = 1;
    if (build_config_family(g, arch, &c, err) < 0) return -1;
    *cfg = c;
    return model_config_validate(cfg, g->path, err);
}

// The config.json the import would write, read back by the loader's own parser: a value it
// refuses (attn_factor 1e-45, a RoPE factor of 1e30) is refused here, before any weight is
// allocated, instead of making a folder every tool then refuses.
static int config_loads(const GgufFile *g, const ModelConfig *c, SafeTensorsDtype dtype, PailErr *err) {
    Buf b = {0};
    if (model_config_to_json(c, safetensors_dtype_name(dtype), &b) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    ModelConfig back;
    int rc = model_config_parse(&back, (const char *)b.data, b.len, "its config.json", err);
    buf_free(&b);
    if (rc < 0) err_wrap(err, "gguf %s: the loader would refuse", g->path);
    return rc;
}

// ---- tensors ----

// llama.cpp's tensor names; olmo2's two layer norms sit after the sub-blocks (post_norm).
static const char *gguf_param_name(ModelParamId id, bool post_norm) {
    if (post_norm && id == PARAM_ATTN_NORM) return "post_attention_norm.weight";
    if (post_norm && id == PARAM_MLP_NORM) return "post_ffw_norm.weight";
    switch (id) {
    case PARAM_EMBED: return "token_embd.weight";
    case PARAM_ATTN_NORM: return "attn_norm.weight";
    case PARAM_WQ: return "attn_q.weight";
    case PARAM_WK: return "attn_k.weight";
    case PARAM_WV: return "attn_v.weight";
    case PARAM_WO: return "attn_output.weight";
    case PARAM_BQ: return "attn_q.bias";
    case PARAM_BK: return "attn_k.bias";
    case PARAM_BV: return "attn_v.bias";
    case PARAM_BO: return "attn_output.bias";
    case PARAM_Q_NORM: return "attn_q_norm.weight";
    case PARAM_K_NORM: return "attn_k_norm.weight";
    case PARAM_MLP_NORM: return "ffn_norm.weight";
    case PARAM_W_GATE: return "ffn_gate.weight";
    case PARAM_W_UP: return "ffn_up.weight";
    case PARAM_W_DOWN: return "ffn_down.weight";
    case PARAM_FINAL_NORM: return "output_norm.weight";
    case PARAM_LM_HEAD: return "output.weight";
    case PARAM_WQKV: return "attn_qkv.weight";      // phi3's fused qkv_proj
    case PARAM_W_GATE_UP: return "ffn_up.weight";   // phi3's gate_up_proj, gate rows first
    default: return NULL;
    }
}

// gemma's four norms a layer: input_layernorm (attn_norm), post_attention_layernorm
// (post_attention_norm), pre_feedforward_layernorm (ffn_norm), post_feedforward_layernorm (post_ffw_norm)
static const char *param_name(const ModelConfig *c, int id) {
    if (model_is_moe(c) && gguf_moe_param_name((ModelParamId)id)) return gguf_moe_param_name((ModelParamId)id);
    if ((c->gemma_norms || c->type == MODEL_GPT_OSS) && id == PARAM_MLP_NORM) return "post_attention_norm.weight";
    if (c->gemma_norms && id == PARAM_PRE_FF_NORM) return "ffn_norm.weight";
    if (c->gemma_norms && id == PARAM_POST_FF_NORM) return "post_ffw_norm.weight";
    return gguf_param_name(id, c->post_norm);
}

// The norm weights convert_hf_to_gguf stored as 1 + w for gemma (every tensor ending in norm.weight)
static bool gemma_norm_param(int id) {
    return id == PARAM_ATTN_NORM || id == PARAM_MLP_NORM || id == PARAM_PRE_FF_NORM || id == PARAM_POST_FF_NORM ||
           id == PARAM_Q_NORM || id == PARAM_K_NORM || id == PARAM_FINAL_NORM;
}

// Whether llama.cpp's convert_hf_to_gguf permuted Q and K for this architecture: LlamaModel
// and its subclasses (llama, and mistral written as llama; GraniteModel, SmolLM3Model) do;
// qwen2, qwen3, exaone and olmo2 (TextModel, NEOX RoPE in llama.cpp) keep HF's rows; of the
// mixtures of experts Mixtral (LlamaModel) and granitemoe (GraniteMoeModel) are permuted.
static bool gguf_arch_permuted(ModelType type) {
    return type == MODEL_LLAMA || type == MODEL_MISTRAL || type == MODEL_GRANITE || type == MODEL_SMOLLM3 ||
           type == MODEL_MIXTRAL || type == MODEL_GRANITEMOE;
}

// llama.cpp's convert permuted each head's rows (i, t) -> (t, i) for its rotate-half
// RoPE; transformers' _reverse_permute_weights undoes it: row h*R + t*dim + i of
// the result is row h*R + 2*i + t of the file (R = rows per head, dim = R / 2).
static void unpermute(float *dst, const float *src, size_t rows, size_t cols, int n_head) {
    size_t R = rows / (size_t)n_head, dim = R / 2;
    for (int h = 0; h < n_head; h++)
        for (size_t t = 0; t < 2; t++)
            for (size_t i = 0; i < dim; i++)
                memcpy(dst + (h * R + t * dim + i) * cols, src + (h * R + 2 * i + t) * cols, cols * sizeof *dst);
}

static void add_type(GgufImportInfo *info, GgmlType type) {
    const char *tn = gguf_type_name(type);
    if (!strstr(info->types, tn) && strlen(info->types) + strlen(tn) + 2 < sizeof info->types) {
        if (info->types[0]) strcat(info->types, " ");
        strcat(info->types, tn);
    }
}

// The dtype of every (family, layer) of the imported weights, ldt (PARAM_COUNT * L): a
// matrix the file quantized in a type pail computes on keeps its blocks (unless dequantize),
// everything else fp32 (written as the import's dtype). A matrix in a type pail cannot
// compute on (Q2_K, Q3_K) never gets here without dequantize: gguf_import refuses it
// before writing anything. Run after load_tensors' check pass: every tensor is there.
static void import_dtypes(const GgufFile *g, const ModelConfig *cfg, bool dequantize, DType *ldt) {
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    size_t L = cfg->num_hidden_layers ? cfg->num_hidden_layers : 1;
    for (size_t i = 0; i < PARAM_COUNT * L; i++) ldt[i] = DT_F32;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &specs[id];
        if (!s->present || !model_param_is_matrix((ModelParamId)id) || (id == PARAM_LM_HEAD && cfg->tie_word_embeddings))
            continue;
        if (id == PARAM_ROUTER || id == PARAM_SHARED_GATE) continue;  // fp32 (llama.cpp keeps them F32)
        if (id == PARAM_EXP_GATE_UP || id == PARAM_EXP_DOWN) {
            for (size_t l = 0; l < L; l++) ldt[(size_t)id * L + l] = gguf_moe_layer_dtype(g, (ModelParamId)id, (int)l, dequantize);
            continue;
        }
        for (size_t l = 0; l < (s->per_layer ? L : 1); l++) {
            char nm[128];
            if (s->per_layer) snprintf(nm, sizeof nm, "blk.%zu.%s", l, param_name(cfg, id));
            else snprintf(nm, sizeof nm, "%s", param_name(cfg, id));
            const GgufTensor *t = gguf_find_tensor(g, nm);
            if (!t || dequantize) continue;
            int dt = gguf_type_dtype(t->type);  // < 0 only with dequantize: gguf_import refused it up front
            if (dt >= 0 && dtype_is_quant((DType)dt)) ldt[(size_t)id * L + l] = (DType)dt;
        }
        if (!s->per_layer)
            for (size_t l = 1; l < L; l++) ldt[(size_t)id * L + l] = ldt[(size_t)id * L];
    }
}

// Every tensor the config needs, its name and shape checked, and every tensor of the file
// placed; with w NULL only checked (before the weights are allocated: a file that says
// block_count 1000 with 2 layers of tensors is refused without allocating 1000 layers).
static int load_tensors(const GgufFile *g, const ModelConfig *cfg, ModelWeights *w, ModelType type, GgufImportInfo *info,
                        PailErr *err) {
    ModelParamSpec specs_buf[PARAM_COUNT];
    const ModelParamSpec *specs = w ? w->specs : specs_buf;
    if (!w) model_param_specs(cfg, specs_buf);
    int L = cfg->num_hidden_layers, used = 0;
    float *tmp = NULL;
    size_t tmp_cap = 0;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &specs[id];
        if (!s->present || (id == PARAM_LM_HEAD && cfg->tie_word_embeddings)) continue;
        for (int l = 0; l < (s->per_layer ? L : 1); l++) {
            if (gguf_moe_expert_family((ModelParamId)id)) {  // 3-D (biases 2-D): each expert's slab into its rows
                const GgufTensor *ts[2];
                int n = gguf_moe_load(g, cfg, w, (ModelParamId)id, l, ts, err);
                if (n < 0) { free(tmp); return -1; }
                for (int k = 0; k < n && w; k++) add_type(info, ts[k]->type);
                used += n;
                continue;
            }
            char nm[128];
            if (s->per_layer) snprintf(nm, sizeof nm, "blk.%d.%s", l, param_name(cfg, id));
            else snprintf(nm, sizeof nm, "%s", param_name(cfg, id));
            const GgufTensor *t = gguf_find_tensor(g, nm);
            if (!t) { free(tmp); return err_set(err, PAIL_ERR_INVALID, "gguf %s: no tensor '%s'", g->path, nm); }
            // GGUF dims are HF's shape reversed; qwen2moe's shared-expert gate (1, C) is [C] once llama-quantize rewrote it
            bool ok = t->ndim == s->ndim && t->dims[0] == s->shape[s->ndim - 1] &&
                      (s->ndim == 1 || t->dims[1] == s->shape[0]);
            ok |= id == PARAM_SHARED_GATE && t->ndim == 1 && t->dims[0] == s->shape[1];
            if (!ok) {
                free(tmp);
                return err_set(err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' is [%llu, %llu], expected [%zu, %zu] (ggml order)",
                               g->path, nm, (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
                               s->shape[s->ndim - 1], s->ndim == 2 ? s->shape[0] : (size_t)1);
            }
            if (!w) { used++; continue; }
            DType qd = model_weights_dtype(w, (ModelParamId)id, l);
            if (dtype_is_quant(qd)) {  // kept as stored: the blocks, rows un-permuted where the converter permuted
                size_t rows = s->shape[0], rb = dtype_row_bytes(qd, s->shape[1]);
                char *qdst = model_weights_tensor(w, (ModelParamId)id, l);
                bool qperm = gguf_arch_permuted(type) && (id == PARAM_WQ || id == PARAM_WK);
                int nh = id == PARAM_WQ ? cfg->num_attention_heads : cfg->num_key_value_heads;
                if (qperm && rows % (size_t)(2 * nh)) {
                    free(tmp);
                    return err_set(err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' rows %zu are not 2 x %d heads", g->path,
                                   nm, rows, nh);
                }
                if (!qperm) memcpy(qdst, t->data, rows * rb);
                else {
                    size_t R = rows / (size_t)nh, half = R / 2;
                    for (int h = 0; h < nh; h++)
                        for (size_t tt = 0; tt < 2; tt++)
                            for (size_t i = 0; i < half; i++)
                                memcpy(qdst + (h * R + tt * half + i) * rb,
                                       (const char *)t->data + (h * R + 2 * i + tt) * rb, rb);
                }
                add_type(info, t->type);
                used++;
                continue;
            }
            float *dst = model_weights_tensor(w, id, l);
            bool perm = gguf_arch_permuted(type) && (id == PARAM_WQ || id == PARAM_WK || id == PARAM_BQ || id == PARAM_BK);
            if (perm && tmp_cap < s->numel) {
                free(tmp);
                if (!(tmp = malloc(s->numel * sizeof *tmp))) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
                tmp_cap = s->numel;
            }
            gguf_dequantize(perm ? tmp : dst, t->data, t->type, t->nelem);  // the reader checked type and size
            if (perm) {
                int nh = id == PARAM_WQ || id == PARAM_BQ ? cfg->num_attention_heads : cfg->num_key_value_heads;
                size_t rows = s->shape[0], cols = s->ndim == 2 ? s->shape[1] : 1;
                if (rows % (size_t)(2 * nh)) {
                    free(tmp);
                    return err_set(err, PAIL_ERR_INVALID, "gguf %s: tensor '%s' rows %zu are not 2 x %d heads", g->path, nm,
                                   rows, nh);
                }
                unpermute(dst, tmp, rows, cols, nh);
            }
            if (cfg->gemma_norms && gemma_norm_param(id))
                for (size_t i = 0; i < s->numel; i++) dst[i] -= 1.0f;
            add_type(info, t->type);
            used++;
        }
    }
    free(tmp);
    if (used != g->ntensors)
        for (int i = 0; i < g->ntensors; i++) {
            const char *n = g->tensors[i].name, *p = n;
            if (!strncmp(p, "blk.", 4)) {
                p += 4;
                while (*p >= '0' && *p <= '9') p++;
                if (*p == '.') p++;
            }
            // read into the config: rope_freqs_llama3, phi3_config
            bool known = type == MODEL_PHI3 ? !strcmp(n, "rope_factors_short.weight") || !strcmp(n, "rope_factors_long.weight")
                                            : !strcmp(n, "rope_freqs.weight");
            known |= p != n && model_is_moe(cfg) && gguf_moe_expert_tensor(p);
            for (int id = 0; id < PARAM_COUNT && !known; id++)
                known = specs[id].present && param_name(cfg, id) && !strcmp(p, param_name(cfg, id)) &&
                        (specs[id].per_layer == (p != n));
            if (!known)
                return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: tensor '%s' has no place in a %s model", g->path, n,
                               model_type_name(type));
        }
    info->n_tensors = used;
    return 0;
}

// ---- tokenizer ----

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
// other 68 to U+0100.. in byte order.
static void byte_alphabet(uint32_t map[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        map[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

static bool in_alphabet(uint32_t cp) { return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 323); }

static int utf8_put(Buf *b, uint32_t cp) {
    char s[4];
    int n;
    if (cp < 0x80) s[0] = (char)cp, n = 1;
    else if (cp < 0x800) s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else s[0] = (char)(0xE0 | cp >> 12), s[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), s[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    return buf_append(b, s, (size_t)n);
}

// Decodes one UTF-8 code point at s (n bytes left); returns its length, 0 when invalid.
static int utf8_get(const unsigned char *s, size_t n, uint32_t *cp) {
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    int len = s[0] >= 0xF0 && s[0] < 0xF5 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t c = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    *cp = c;
    return len;
}

// The vocabulary key of a token: itself when every character is in the byte
// alphabet, else each of its UTF-8 bytes spelled in it (transformers' byte_level_tokenizer).
static int respell(const char *tok, size_t len, const uint32_t map[256], Buf *out, bool *same) {
    buf_reset(out);
    *same = true;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = utf8_get((const unsigned char *)tok + i, len - i, &cp);
        if (!n) return -1;
        if (!in_alphabet(cp)) *same = false;
        i += (size_t)n;
    }
    if (*same) return buf_append(out, tok, len);
    for (size_t i = 0; i < len; i++)
        if (utf8_put(out, map[(unsigned char)tok[i]]) < 0) return -1;
    return 0;
}

// A SentencePiece token is its own vocabulary key (its space is already U+2581).
static int spelled_as_is(const char *tok, size_t len, Buf *out) {
    buf_reset(out);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = utf8_get((const unsigned char *)tok + i, len - i, &cp);
        if (!n) return -1;
        i += (size_t)n;
    }
    return buf_append(out, tok, len);
}

typedef struct {
    uint64_t n;
    const char **tok;
    size_t *len;
    int32_t *type;            // token_type, NULL when absent
    const uint8_t *score;     // scores, FLOAT32 (SentencePiece), NULL when absent; borrowed from the file
    int64_t bos, eos, unk, pad;  // -1 when absent
    int64_t dflt[3];          // SentencePiece: <unk>, <s>, </s> when their id key is absent (-1 else)
    bool add_bos, add_eos;
    bool sp;                  // tokenizer.ggml.model "llama" (SentencePiece BPE), else "gpt2"
    bool gemma;               // a Gemma SentencePiece file (gemma_vocab): no dummy prefix, merges by position
    Buf spelled;              // gemma_vocab's respelled tokens (tok[i] may point here)
    bool *respelled;          // (n) which were, NULL when none
} Vocab;

static bool is_named_special(const Vocab *v, uint64_t i) {
    return (int64_t)i == v->bos || (int64_t)i == v->eos || (int64_t)i == v->unk || (int64_t)i == v->pad ||
           (int64_t)i == v->dflt[0] || (int64_t)i == v->dflt[1] || (int64_t)i == v->dflt[2];
}

// A CONTROL or USER_DEFINED token: an added token of the model's tokenizer. llama.cpp's
// converter writes it as its text, the spelling of the model's tokenizer.json (its
// added_tokens and get_vocab), so it is its own vocabulary key: respelled in the byte
// alphabet, '<｜begin▁of▁sentence｜>' became a second spelling that no loader accepts.
static bool is_added(const Vocab *v, uint64_t i) { return v->type && (v->type[i] == 3 || v->type[i] == 4); }

static int write_json(const char *dir, const char *name, json_t *j, PailErr *err) {
    char *s = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    if (!s) return err_set(err, PAIL_ERR_NOMEM, "out of memory writing %s", name);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    Buf b = {0};
    int rc = buf_printf(&b, "%s\n", s) < 0 ? err_set(err, PAIL_ERR_NOMEM, "out of memory")
                                          : fs_write_file_atomic(path, b.data, b.len, err);
    free(s);
    buf_free(&b);
    return rc;
}

// ---- SentencePiece merges ----

// One candidate merge: the token tok split at byte `at` into two vocabulary tokens.
typedef struct {
    uint32_t tok, at;         // token index (its first occurrence), split byte offset
    int64_t lid, rid;         // the halves' ids (a repeated token: its last index, as a dict keeps)
    float score;              // the score of the whole token
    uint32_t lcp, rcp;        // the halves' lengths in code points (Python's len)
    uint64_t seq;             // order of appearance, for the stable sort
} SpMerge;

static int sp_merge_local_cmp(const void *a, const void *b) {  // within one token: (vocab[l], vocab[r]) ascending
    const SpMerge *x = a, *y = b;
    if (x->lid != y->lid) return x->lid < y->lid ? -1 : 1;
    return x->rid < y->rid ? -1 : x->rid > y->rid;
}

static int sp_merge_cmp(const void *a, const void *b) {  // (score, len(l), len(r)) descending, then stable
    const SpMerge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->lcp != y->lcp) return x->lcp > y->lcp ? -1 : 1;
    if (x->rcp != y->rcp) return x->rcp > y->rcp ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

// A SentencePiece vocabulary carries no merges: transformers' get_merges rebuilds them with
// generate_merges(vocab, dict(zip(tokens, scores))): every split of a token into two
// vocabulary tokens, ranked by the whole token's score, best first, longer left half first,
// then longer right half, ties in vocabulary order. vocab maps each token to its (last) id.
static int sp_generate_merges(const GgufFile *g, const Vocab *v, json_t *vocab, json_t *merges, PailErr *err) {
    json_t *first = json_object();
    SpMerge *m = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    if (!first) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    for (uint64_t i = 0; i < v->n; i++) {
        if (json_object_getn(first, v->tok[i], v->len[i])) continue;  // a repeated token: the dict's first slot
        json_object_setn_new(first, v->tok[i], v->len[i], json_true());
        json_int_t last = json_integer_value(json_object_getn(vocab, v->tok[i], v->len[i]));
        float score = -(float)last;  // Gemma: the file's order is the merge order (exact in a float below 2^24)
        if (!v->gemma) memcpy(&score, v->score + 4 * (size_t)last, 4);  // GGUF arrays are unaligned
        size_t start = n, cp_total = 0;
        for (size_t k = 0; k < v->len[i]; k++) cp_total += ((unsigned char)v->tok[i][k] & 0xC0) != 0x80;
        size_t cp = 0;
        for (size_t at = 0; at < v->len[i]; at++) {
            if (((unsigned char)v->tok[i][at] & 0xC0) == 0x80) continue;  // inside a code point
            if (at > 0) {
                json_t *l = json_object_getn(vocab, v->tok[i], at), *r = json_object_getn(vocab, v->tok[i] + at, v->len[i] - at);
                if (l && r) {
                    if (n == cap) {
                        size_t nc = cap ? 2 * cap : 4096;
                        SpMerge *nm = realloc(m, nc * sizeof *m);
                        if (!nm) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
                        m = nm, cap = nc;
                    }
                    m[n++] = (SpMerge){.tok = (uint32_t)i, .at = (uint32_t)at, .lid = json_integer_value(l),
                                       .rid = json_integer_value(r), .score = score, .lcp = (uint32_t)cp,
                                       .rcp = (uint32_t)(cp_total - cp)};
                }
            }
            cp++;
        }
        qsort(m + start, n - start, sizeof *m, sp_merge_local_cmp);
        for (size_t k = start; k < n; k++) m[k].seq = k;
    }
    if (n) qsort(m, n, sizeof *m, sp_merge_cmp);
    for (size_t k = 0; k < n; k++) {
        const char *t = v->tok[m[k].tok];
        json_t *pair = json_pack("[s%, s%]", t, (size_t)m[k].at, t + m[k].at, v->len[m[k].tok] - m[k].at);
        if (!pair || json_array_append_new(merges, pair) < 0) {
            err_set(err, PAIL_ERR_NOMEM, "gguf %s: out of memory building %zu merges", g->path, n);
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(first);
    free(m);
    return rc;
}

static int build_tokenizer_json(const GgufFile *g, const Vocab *v, const char *dir, const GgufImportOptions *opt,
                                PailErr *err) {
    GgufPretok pt = {0};
    uint32_t map[256];
    byte_alphabet(map);
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    Buf key = {0};
    int rc = -1;
    if (!vocab || !merges || !added) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    for (uint64_t i = 0; i < v->n; i++) {
        bool same;
        int rk = v->sp || is_added(v, i) ? spelled_as_is(v->tok[i], v->len[i], &key)
                                         : respell(v->tok[i], v->len[i], map, &key, &same);
        if (rk < 0) {
            err_set(err, PAIL_ERR_INVALID, "gguf %s: token %llu is not UTF-8", g->path, (unsigned long long)i);
            goto out;
        }
        if (buf_append(&key, "", 1) < 0) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
        json_object_setn_new(vocab, (char *)key.data, key.len - 1, json_integer((json_int_t)i));
    }
    for (uint64_t i = 0; i < v->n; i++) {
        int32_t t = v->type ? v->type[i] : 1;
        // a Gemma whitespace token respelled with U+2581s is not added: transformers looks it up as the
        // file spells it (real spaces) and does not find it
        if (!(is_added(v, i) && !(v->respelled && v->respelled[i])) && !is_named_special(v, i)) continue;
        json_t *c = json_stringn(v->tok[i], v->len[i]);
        if (!c) { err_set(err, PAIL_ERR_INVALID, "gguf %s: token %llu is not UTF-8", g->path, (unsigned long long)i); goto out; }
        json_array_append_new(added, json_pack("{s:I, s:o, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i, "content", c,
                                               "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                               "special", t != 4));
    }
    uint64_t nm = 0;
    const uint8_t *md;
    PailErr e = {0};
    if (v->sp && !gguf_find(g, "tokenizer.ggml.merges")) {  // the usual SentencePiece file: merges from the scores
        if (sp_generate_merges(g, v, vocab, merges, err) < 0) goto out;
    } else if (gguf_get_array(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &nm, &md, &e) < 0) {
        *err = e;
        goto out;
    }
    for (uint64_t i = 0; i < nm; i++) {
        uint64_t l;
        memcpy(&l, md, 8);
        const char *s = (const char *)md + 8, *sp = memchr(s, ' ', l);
        md += 8 + l;
        json_t *a = sp ? json_stringn(s, (size_t)(sp - s)) : NULL, *b = sp ? json_stringn(sp + 1, l - (size_t)(sp - s) - 1) : NULL;
        if (!a || !b || memchr(sp + 1, ' ', l - (size_t)(sp - s) - 1)) {
            json_decref(a), json_decref(b);
            err_set(err, PAIL_ERR_INVALID, "gguf %s: merge %llu is not two UTF-8 tokens separated by one space", g->path,
                    (unsigned long long)i);
            goto out;
        }
        json_array_append_new(merges, json_pack("[o, o]", a, b));
    }
    const char *pre = NULL;
    size_t pl = 0;
    if (gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pl, &e) < 0) pre = NULL, pl = 0;
    if (v->gemma) {
        // Gemma (GemmaTokenizer): spaces become U+2581 in a normalizer, no dummy prefix, a Split on
        // " " that the normalizer leaves nothing to split, and a decoder without the prefix's Strip
        pt.normalizer = json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", " ", "content", "\u2581");
        pt.pre_tokenizer = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", " ", "behavior",
                                     "MergedWithPrevious", "invert", 0);
        if (!pt.normalizer || !pt.pre_tokenizer) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    } else if ((v->sp ? gguf_pretok_sp(&pt, err)
                      : gguf_pretok_bpe(g->path, pre, pl, opt->allow_tokenizer_fallback, &pt, err)) < 0) {
        goto out;
    }
    if (pt.fallback && pre)
        log_warn("gguf %s: tokenizer.ggml.pre '%.*s' is not a pre-tokenizer pail knows; imported with GPT-2's "
                 "(--allow-tokenizer-fallback): ids may differ from the model's", g->path, (int)(pl > 64 ? 64 : pl), pre);
    else if (pt.fallback)
        log_warn("gguf %s: tokenizer.ggml.pre is missing; imported with GPT-2's pre-tokenizer "
                 "(--allow-tokenizer-fallback): ids may differ from the model's", g->path);
    // TokenizersBackend.update_post_processor: bos / eos around each sequence as the file asks
    const char *bos = v->add_bos && v->bos >= 0 ? v->tok[v->bos] : NULL, *eos = v->add_eos && v->eos >= 0 ? v->tok[v->eos] : NULL;
    size_t bl = bos ? v->len[v->bos] : 0, el = eos ? v->len[v->eos] : 0;
    json_t *single = json_array(), *pair = json_array(), *specials = json_object();
    for (int seq = 0; seq < 2; seq++) {
        json_t *arr = seq ? pair : single;
        for (int k = 0; k <= seq; k++) {
            if (bos) json_array_append_new(arr, json_pack("{s:{s:s%, s:i}}", "SpecialToken", "id", bos, bl, "type_id", k));
            json_array_append_new(arr, json_pack("{s:{s:s, s:i}}", "Sequence", "id", k ? "B" : "A", "type_id", k));
            if (eos) json_array_append_new(arr, json_pack("{s:{s:s%, s:i}}", "SpecialToken", "id", eos, el, "type_id", k));
        }
    }
    if (bos) json_object_setn_new(specials, bos, bl, json_pack("{s:s%, s:[I], s:[s%]}", "id", bos, bl, "ids", (json_int_t)v->bos, "tokens", bos, bl));
    if (eos) json_object_setn_new(specials, eos, el, json_pack("{s:s%, s:[I], s:[s%]}", "id", eos, el, "ids", (json_int_t)v->eos, "tokens", eos, el));
    // SentencePiece: LlamaTokenizer's BPE (fuse_unk, byte_fallback to the <0xNN> tokens, no
    // unk_token: a piece with neither is dropped, as transformers' tokenizer does) and decoder
    json_t *model = v->gemma ? json_pack("{s:s, s:n, s:s, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                                         "unk_token", "<unk>", "continuing_subword_prefix", "end_of_word_suffix",
                                         "fuse_unk", 1, "byte_fallback", 1, "ignore_merges", 0, "vocab", vocab,
                                         "merges", merges)
                  : v->sp ? json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                                      "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 1,
                                      "byte_fallback", 1, "ignore_merges", 0, "vocab", vocab, "merges", merges)
                          : json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout", "unk_token",
                              "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", pt.ignore_merges, "vocab", vocab, "merges", merges);
    json_t *decoder = v->gemma ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]}", "type", "Sequence", "decoders",
                                           "type", "Replace", "pattern", "String", "\u2581", "content", " ", "type",
                                           "ByteFallback", "type", "Fuse")
                    : v->sp ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type",
                                        "Sequence", "decoders", "type", "Replace", "pattern", "String", "\u2581",
                                        "content", " ", "type", "ByteFallback", "type", "Fuse", "type", "Strip",
                                        "content", " ", "start", 1, "stop", 0)
                            : json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                                        "trim_offsets", 1, "use_regex", 1);
    vocab = merges = NULL;
    json_t *tj = json_pack("{s:s, s:n, s:n, s:o, s:O, s:O, s:{s:s, s:o, s:o, s:o}, s:o, s:o}", "version", "1.0",
                           "truncation", "padding", "added_tokens", added, "normalizer", pt.normalizer,
                           "pre_tokenizer", pt.pre_tokenizer,
                           "post_processor", "type", "TemplateProcessing", "single", single, "pair", pair,
                           "special_tokens", specials, "decoder", decoder, "model", model);
    added = NULL;
    if (!tj) { err_set(err, PAIL_ERR_NOMEM, "out of memory building tokenizer.json"); goto out; }
    rc = write_json(dir, "tokenizer.json", tj, err);
out:
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    gguf_pretok_free(&pt);
    buf_free(&key);
    return rc;
}

// What a SentencePiece ("llama") file needs beyond the token list: its scores, to rank
// the merges when it has none, finite; the dummy prefix, the only pipeline pail builds for it
// (Llama 2's and Phi-3's legacy tokenizer.json) but for Gemma's files, which have none and are
// built as GemmaTokenizer; no byte-level pre-tokenizer name.
static int sp_check(const GgufFile *g, Vocab *v, PailErr *err) {
    PailErr e = {0};
    if (!gguf_find(g, "tokenizer.ggml.merges")) {
        uint64_t ns;
        const uint8_t *sd;
        if (!gguf_find(g, "tokenizer.ggml.scores"))
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: tokenizer.ggml.scores is missing; a SentencePiece vocabulary "
                           "without merges needs its scores to rank them", g->path);
        if (gguf_get_array(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &ns, &sd, err) < 0) return -1;
        if (ns != v->n)
            return err_set(err, PAIL_ERR_INVALID, "gguf %s: %llu token scores for %llu tokens", g->path,
                           (unsigned long long)ns, (unsigned long long)v->n);
        v->score = sd;  // the reader checked it lies in the file
        for (uint64_t i = 0; i < ns; i++) {
            float f;
            memcpy(&f, sd + 4 * i, 4);
            if (isnan(f))
                return err_set(err, PAIL_ERR_INVALID, "gguf %s: tokenizer.ggml.scores[%llu] is nan", g->path,
                               (unsigned long long)i);
        }
    }
    bool prefix = true;
    if (!v->gemma && gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix, &e) == 0 && !prefix)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: tokenizer.ggml.add_space_prefix is false; pail imports "
                       "SentencePiece vocabularies with the dummy prefix only (as Llama 2's and Phi-3's tokenizers add it)",
                       g->path);
    const char *pre;
    size_t pl;
    if (gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pl, &e) == 0 && gguf_pretok_is_byte_level(pre, pl))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: tokenizer.ggml.pre '%.*s' is a byte-level split for a "
                       "SentencePiece ('llama') vocabulary", g->path, (int)(pl > 32 ? 32 : pl), pre);
    return 0;
}

// transformers' LlamaTokenizer falls back to <unk>, <s>, </s> for a special token whose id
// the file does not give, and adds it as a special token (the post-processor adds only the
// file's own bos / eos). One the vocabulary lacks would get an id past the model's
// embeddings, so it is refused.
static int sp_default_specials(const GgufFile *g, Vocab *v, PailErr *err) {
    static const char *key[3] = {"unknown_token_id", "bos_token_id", "eos_token_id"};
    static const char *name[3] = {"<unk>", "<s>", "</s>"};
    PailErr e = {0};
    for (int k = 0; k < 3; k++) {
        char full[64];
        int64_t id;
        snprintf(full, sizeof full, "tokenizer.ggml.%s", key[k]);
        if (gguf_get_int(g, full, &id, &e) == 0) continue;
        for (uint64_t i = v->n; i-- > 0 && v->dflt[k] < 0;)  // the last one, as the vocab dict keeps
            if (v->len[i] == strlen(name[k]) && !memcmp(v->tok[i], name[k], v->len[i])) v->dflt[k] = (int64_t)i;
        if (v->dflt[k] < 0)
            return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: %s is missing and the vocabulary has no '%s' "
                           "(transformers would add one past the model's vocabulary)", g->path, full, name[k]);
    }
    return 0;
}

static json_t *token_or_null(const Vocab *v, int64_t id) {
    return id >= 0 ? json_stringn(v->tok[id], v->len[id]) : json_null();
}

// Python's str.isspace(): what transformers' `not t.strip()` asks of each code point.
static bool py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// A Gemma file (architecture gemma, gemma2 or gemma3) is built as transformers' gemma_tokenizer
// builds it: a token of whitespace holding a space is stored with real spaces, while
// GemmaTokenizer looks it up as U+2581s, one per code point, so it is respelled; the merges
// are ranked by file order, which Gemma's scores do not follow (sp_generate_merges).
static int gemma_vocab(const GgufFile *g, Vocab *v, PailErr *err) {
    const char *arch;
    size_t al;
    PailErr e = {0};
    if (gguf_get_string(g, "general.architecture", &arch, &al, &e) < 0 || al < 5 || memcmp(arch, "gemma", 5) ||
        !(al == 5 || (al == 6 && (arch[5] == '2' || arch[5] == '3'))) || !v->sp)
        return 0;
    v->gemma = true;
    size_t *at = calloc(v->n, sizeof *at);  // offset + 1 into v->spelled of a respelled token
    if (!at || !(v->respelled = calloc(v->n, sizeof *v->respelled))) {
        free(at);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < v->n; i++) {
        bool space = false, white = v->len[i] > 0;
        size_t ncp = 0;
        for (size_t k = 0; k < v->len[i] && white;) {
            uint32_t cp;
            int n = utf8_get((const unsigned char *)v->tok[i] + k, v->len[i] - k, &cp);
            if (!n) white = false;
            else white = py_space(cp), space |= cp == ' ', k += (size_t)n, ncp++;
        }
        if (!white || !space) continue;
        at[i] = v->spelled.len + 1;
        v->respelled[i] = true, v->len[i] = 3 * ncp;
        for (size_t k = 0; k < ncp; k++)
            if (buf_append(&v->spelled, "\xe2\x96\x81", 3) < 0) { free(at); return err_set(err, PAIL_ERR_NOMEM, "out of memory"); }
    }
    for (uint64_t i = 0; i < v->n; i++)  // pointers only now: the buffer no longer moves
        if (at[i]) v->tok[i] = (const char *)v->spelled.data + at[i] - 1;
    free(at);
    return 0;
}

static int write_tokenizer(const GgufFile *g, const char *dir, const GgufImportOptions *opt, int *n_vocab, PailErr *err) {
    const char *model;
    size_t ml;
    PailErr e = {0};
    if (gguf_get_string(g, "tokenizer.ggml.model", &model, &ml, &e) < 0) {
        *err = e;
        return err_wrap(err, "tokenizer");
    }
    Vocab v = {.dflt = {-1, -1, -1}};
    v.sp = ml == 5 && !memcmp(model, "llama", 5);
    if (!(ml == 4 && !memcmp(model, "gpt2", 4)) && !v.sp)
        return err_set(err, PAIL_ERR_UNSUPPORTED,
                       "gguf %s: tokenizer.ggml.model is '%.*s'; pail imports 'gpt2' (byte-level BPE) and 'llama' "
                       "(SentencePiece BPE)", g->path, (int)(ml > 32 ? 32 : ml), model);
    const uint8_t *td;
    if (gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &v.n, &td, err) < 0) return -1;
    if (v.n == 0 || v.n > (1u << 22)) return err_set(err, PAIL_ERR_INVALID, "gguf %s: %llu tokens", g->path, (unsigned long long)v.n);
    v.tok = malloc(v.n * sizeof *v.tok);
    v.len = malloc(v.n * sizeof *v.len);
    int rc = -1;
    if (!v.tok || !v.len) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    gguf_array_strings(td, v.n, v.tok, v.len);
    uint64_t nt;
    const uint8_t *tt;
    if (gguf_find(g, "tokenizer.ggml.token_type")) {
        if (gguf_get_array(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &nt, &tt, err) < 0) goto out;
        if (nt != v.n) { err_set(err, PAIL_ERR_INVALID, "gguf %s: %llu token types for %llu tokens", g->path, (unsigned long long)nt, (unsigned long long)v.n); goto out; }
        if (!(v.type = malloc(nt * sizeof *v.type))) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
        memcpy(v.type, tt, nt * 4);
    }
    if (gemma_vocab(g, &v, err) < 0) goto out;
    if (v.sp && (sp_check(g, &v, err) < 0)) goto out;
    const char *ids[4] = {"bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"};
    int64_t *dst[4] = {&v.bos, &v.eos, &v.unk, &v.pad};
    for (int i = 0; i < 4; i++) {
        char k[64];
        snprintf(k, sizeof k, "tokenizer.ggml.%s", ids[i]);
        *dst[i] = -1;
        if (gguf_get_int(g, k, dst[i], &e) == 0 && (*dst[i] < 0 || (uint64_t)*dst[i] >= v.n)) {
            err_set(err, PAIL_ERR_INVALID, "gguf %s: %s %lld is not a token id (%llu tokens)", g->path, k,
                    (long long)*dst[i], (unsigned long long)v.n);
            goto out;
        }
    }
    // transformers: a SentencePiece file without the flag adds BOS (llama.cpp's default for it)
    if (v.sp) v.add_bos = true;
    if (v.sp && sp_default_specials(g, &v, err) < 0) goto out;
    gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &v.add_bos, &e);
    gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &v.add_eos, &e);
    if (build_tokenizer_json(g, &v, dir, opt, err) < 0) goto out;
    const char *ct = NULL;
    size_t cl = 0;
    gguf_get_string(g, "tokenizer.chat_template", &ct, &cl, &e);
    json_t *cfg = json_pack("{s:b, s:b, s:o, s:o, s:o, s:o, s:s}", "add_bos_token", v.add_bos, "add_eos_token", v.add_eos,
                            "bos_token", token_or_null(&v, v.bos >= 0 ? v.bos : v.dflt[1]), "eos_token",
                            token_or_null(&v, v.eos >= 0 ? v.eos : v.dflt[2]), "pad_token", token_or_null(&v, v.pad),
                            "unk_token", token_or_null(&v, v.unk >= 0 ? v.unk : v.dflt[0]), "tokenizer_class",
                            "PreTrainedTokenizerFast");
    if (!cfg) { err_set(err, PAIL_ERR_INVALID, "gguf %s: a special token is not UTF-8", g->path); goto out; }
    // Refused, not cleaned: a template is text, and a NUL in it is a damaged file (GGUF strings
    // carry a length, no terminator). Written out, every later load refused it; cutting at the NUL
    // would import some other template.
    const char *nul = ct ? memchr(ct, 0, cl) : NULL;
    if (nul) {
        json_decref(cfg);
        err_set(err, PAIL_ERR_INVALID, "gguf %s: tokenizer.chat_template holds a NUL byte at offset %zu of %zu; a chat "
                "template is text, so the file is damaged",
                g->path, (size_t)(nul - ct), cl);
        goto out;
    }
    if (ct) {
        json_t *s = json_stringn(ct, cl);
        if (!s) { json_decref(cfg); err_set(err, PAIL_ERR_INVALID, "gguf %s: tokenizer.chat_template is not UTF-8", g->path); goto out; }
        json_object_set_new(cfg, "chat_template", s);
        char path[4096];
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        if (fs_write_file_atomic(path, ct, cl, err) < 0) { json_decref(cfg); goto out; }
    }
    if (write_json(dir, "tokenizer_config.json", cfg, err) < 0) goto out;
    *n_vocab = (int)v.n;
    rc = 0;
out:
    free(v.tok);
    free(v.len);
    free(v.type);
    buf_free(&v.spelled);
    free(v.respelled);
    return rc;
}

int gguf_import(const GgufFile *g, const char *dir, const GgufImportOptions *opt, GgufImportInfo *info, PailErr *err) {
    memset(info, 0, sizeof *info);
    if (opt->tokenizer_only) {  // any architecture: the tokenizer files alone (llama.cpp's vocab-only files)
        if (fs_mkdirs(dir, err) < 0 || write_tokenizer(g, dir, opt, &info->vocab, err) < 0) return -1;
        snprintf(info->arch, sizeof info->arch, "tokenizer");
        return 0;
    }
    const char *arch;
    size_t al;
    if (gguf_get_string(g, "general.architecture", &arch, &al, err) < 0) return -1;
    ModelType type;
    char a[16] = "";
    if (al < sizeof a) memcpy(a, arch, al);
    // llama.cpp writes Mistral 7B's GGUF as architecture "llama": it imports as llama (full
    // attention), or as mistral when the file gives a sliding window (build_config_family)
    // llama.cpp's "gemma3" is the text model, model_type gemma3_text
    // and its "command-r" model_type cohere
    // The mixtures of experts: qwen3moe, qwen2moe, olmoe, granitemoe, gpt-oss, and llama with llama.expert_count
    // (Mixtral) as their model types (gguf_import_moe.c)
    bool gemma3 = al == 6 && !memcmp(arch, "gemma3", 6), cmdr = al == 9 && !memcmp(arch, "command-r", 9);
    int moe = gguf_moe_arch(g, arch, al, &type, err);
    if (moe < 0) return -1;
    if (!moe && (gemma3 || cmdr)) type = gemma3 ? MODEL_GEMMA3_TEXT : MODEL_COHERE;
    else if (!moe && (al >= sizeof a || model_type_parse(a, &type) < 0 || type == MODEL_MISTRAL ||
        !(type <= MODEL_QWEN3 || type == MODEL_EXAONE || type == MODEL_GRANITE || type == MODEL_OLMO2 ||
          type == MODEL_SMOLLM3 || type == MODEL_PHI3 || type == MODEL_GEMMA2 || type == MODEL_COHERE2)))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: architecture '%.*s' (pail imports llama, qwen2, qwen3, "
                       "exaone, granite, olmo2, smollm3, phi3, gemma2, gemma3, command-r, cohere2, qwen3moe, qwen2moe, "
                       "olmoe, granitemoe, gpt-oss and llama with experts)", g->path, (int)(al > 32 ? 32 : al), arch);
    snprintf(info->arch, sizeof info->arch, "%s", a);
    if (opt->dtype != ST_DTYPE_BF16 && opt->dtype != ST_DTYPE_F32)
        return err_set(err, PAIL_ERR_INVALID, "gguf import: dtype %s is not BF16 or F32", safetensors_dtype_name(opt->dtype));
    // A matrix in a type pail cannot compute on is refused before anything is written; MXFP4 (gpt-oss's
    // experts, pail has no MXFP4 compute) is always dequantized to the import's dtype.
    for (int i = 0; i < g->ntensors && !opt->dequantize; i++)
        if (g->tensors[i].ndim >= 2 && gguf_type_dtype(g->tensors[i].type) < 0 && g->tensors[i].type != GGML_TYPE_MXFP4)
            return err_set(err, PAIL_ERR_UNSUPPORTED, "gguf %s: tensor '%s' is %s, a type pail does not compute on "
                           "(it keeps Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16, BF16 and F32): import with "
                           "--dequantize to hold the model in bf16", g->path, g->tensors[i].name,
                           gguf_type_name(g->tensors[i].type));
    if (fs_mkdirs(dir, err) < 0) return -1;
    int n_vocab = 0;
    if (write_tokenizer(g, dir, opt, &n_vocab, err) < 0) return -1;
    ModelConfig cfg;
    if (build_config(g, a, type, n_vocab, &cfg, err) < 0) return -1;
    info->vocab = cfg.vocab_size;
    snprintf(info->arch, sizeof info->arch, "%s", model_type_name(cfg.type));  // a llama file with a window: mistral
    if (config_loads(g, &cfg, opt->dtype, err) < 0 || load_tensors(g, &cfg, NULL, type, info, err) < 0) return -1;
    size_t L = cfg.num_hidden_layers ? cfg.num_hidden_layers : 1;
    DType *ldt = malloc(PARAM_COUNT * L * sizeof *ldt);
    if (!ldt) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    ModelWeights w;
    import_dtypes(g, &cfg, opt->dequantize, ldt);
    if (model_weights_alloc_layers(&w, &cfg, ldt, err) < 0) {
        free(ldt);
        return -1;
    }
    free(ldt);
    info->kept = model_weights_quantized(&w);
    int rc = load_tensors(g, &cfg, &w, type, info, err);
    ModelGenOptions mo = {.dtype = opt->dtype};
    if (rc == 0) rc = model_weights_save(&w, dir, &mo, err);
    model_weights_free(&w);
    return rc;
}
