// grpo-ctl init-model (write a random-weight Hugging Face checkpoint of a given
// shape) and model-info (config summary, parameter count, base_sha256, every
// tensor checked; --sums adds a per-tensor fp32 checksum for validation/model/).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/sha256.h"
#include "ctl/ctl.h"
#include "model/config.h"
#include "model/modelgen.h"
#include "model/safetensors.h"
#include "model/weights.h"

int ctl_init_model(int argc, char **argv) {
    char *out = NULL, *shape = NULL, *type_s = NULL, *dtype_s = NULL, *tok = NULL, *rope_s = NULL;
    long hidden, layers, heads, kv, ffn, vocab, head_dim, seed, bos, eos, maxpos, window, experts, topk, effn;
    double theta, prf;
    bool tie, abias, qknorm, norm_topk;
    double logit_scale;
    Flag fl[] = {
        {"out", FLAG_STRING, &out, NULL, 1, 0, "folder to write (created; existing files replaced)"},
        {"shape", FLAG_STRING, &shape, NULL, 1, 0,
         "preset: tiny (C64 L2 H4 Hkv2 F128 V512), bench (C512 L8 H8 Hkv2 F1408 V32000), "
         "qwen2.5-0.5b (C896 L24 H14 Hkv2 F4864 V151936, tied, qwen2), qwen2.5-7b (C3584 L28 H28 Hkv4 "
         "F18944 V152064, qwen2), granite-3.1-1b-a400m (granitemoe: C1024 L24 H16 Hkv8 E32 K8 Fe512 V49155, tied); "
         "a mixture of experts' tiny has E4 K2 Fe32 (qwen2_moe's shared expert 64); size flags override it "
         "(e.g. --layers 4)"},
        {"model-type", FLAG_STRING, &type_s, NULL, 1, 0,
         "llama, qwen2, qwen3, mistral, exaone, granite, smollm3, olmo2, phi3, cohere, cohere2, gemma2 (Gemma2Config's "
         "softcaps 50 and 30), gemma3_text, or the mixtures of experts qwen3_moe, qwen2_moe, olmoe, granitemoe, "
         "mixtral, gpt_oss (GptOssConfig's sinks, biases, clamped SwiGLU, YaRN; every other layer sliding) (default llama; qwen2 for qwen2.5-0.5b, granitemoe for granite-3.1-1b-a400m)"},
        {"hidden", FLAG_INT, &hidden, "0", 0, 65536, "hidden size C"},
        {"layers", FLAG_INT, &layers, "0", 0, 1024, "layers L"},
        {"heads", FLAG_INT, &heads, "0", 0, 1024, "attention heads H"},
        {"kv-heads", FLAG_INT, &kv, "0", 0, 1024, "key/value heads Hkv (0: = heads)"},
        {"ffn", FLAG_INT, &ffn, "0", 0, 1 << 20,
         "MLP intermediate size F (qwen2_moe: the shared expert's; olmoe, granitemoe, mixtral, gpt_oss: the experts' Fe; "
         "qwen3_moe: config.json's unused dense size)"},
        {"experts", FLAG_INT, &experts, "0", 0, 512, "mixtures of experts: experts E (0: the shape's)"},
        {"experts-per-token", FLAG_INT, &topk, "0", 0, 512, "mixtures of experts: experts a token K (0: the shape's)"},
        {"expert-ffn", FLAG_INT, &effn, "0", 0, 1 << 20, "mixtures of experts: each expert's intermediate size Fe (0: the shape's)"},
        {"norm-topk-prob", FLAG_BOOL, &norm_topk, "false", 1, 0,
         "qwen3_moe, qwen2_moe, olmoe: renormalise the K routing weights (mixtral, granitemoe and gpt_oss always do)"},
        {"vocab", FLAG_INT, &vocab, "0", 0, 1 << 22, "vocabulary size V"},
        {"head-dim", FLAG_INT, &head_dim, "0", 0, 1024, "head dim D (0: C / H)"},
        {"tie-embeddings", FLAG_BOOL, &tie, "false", 1, 0, "lm_head shares embed_tokens (qwen2.5-0.5b: always)"},
        {"attention-bias", FLAG_BOOL, &abias, "false", 1, 0, "llama/qwen3/exaone/granite/smollm3/olmo2/cohere/cohere2/qwen3_moe/olmoe/granitemoe: q, k, v and o biases"},
        {"rope-theta", FLAG_DOUBLE, &theta, "0", 0, 1e12, "RoPE base (0: the model_type's default)"},
        {"rope-scaling", FLAG_STRING, &rope_s, "none", 1, 0,
         "none, or llama3 (Llama 3.2's factor 32, low 1, high 4, original 8192)"},
        {"max-positions", FLAG_INT, &maxpos, "0", 0, 1 << 30, "max_position_embeddings (0: default)"},
        {"sliding-window", FLAG_INT, &window, "-1", -1, 1 << 30,
         "mistral, mixtral, phi3: attention window W (keys i-W+1..i); 0: none (null, full attention); -1: the "
         "default (mistral 4096, MistralConfig's; mixtral, phi3 none); cohere2, gemma2, gemma3_text, gpt_oss: their sliding "
         "layers' window (-1: 4096, their configs' default; gpt_oss 128, tiny 8)"},
        {"partial-rotary-factor", FLAG_DOUBLE, &prf, "1", 0, 1,
         "phi3: RoPE on the first int(D * factor) dims of each head (Phi-4-mini: 0.75)"},
        {"dtype", FLAG_STRING, &dtype_s, "bf16", 1, 0, "the checkpoint's dtype: bf16, f16 or f32"},
        {"seed", FLAG_INT, &seed, "1234", 0, (double)(1L << 52), "random seed"},
        {"tokenizer", FLAG_STRING, &tok, NULL, 1, 0,
         "folder whose tokenizer.json and tokenizer_config.json are copied (bos/eos ids taken from it)"},
        {"qk-norm", FLAG_BOOL, &qknorm, "false", 1, 0, "cohere: use_qk_norm (per-head LayerNorm of q and k, Command-R+)"},
        {"logit-scale", FLAG_DOUBLE, &logit_scale, "0", 0, 1e6, "cohere: logits * logit_scale (0: CohereConfig's 0.0625)"},
        {"bos-id", FLAG_INT, &bos, "-1", -1, 1 << 22, "bos_token_id (-1: from --tokenizer or the shape, else 1)"},
        {"eos-id", FLAG_INT, &eos, "-1", -1, 1 << 22, "eos_token_id (-1: from --tokenizer or the shape, else 2)"},
    };
    int nfl = sizeof fl / sizeof fl[0];
    char **pos = NULL;
    int npos = 0, rc;
    const char *usage = "grpo-ctl init-model --out DIR [--shape tiny|bench|qwen2.5-0.5b|qwen2.5-7b|granite-3.1-1b-a400m] "
                        "[--model-type T] [sizes]";
    if ((rc = ctl_parse(usage, "Writes a random-weight checkpoint in Hugging Face layout (config.json, "
                        "generation_config.json, model.safetensors).", fl, nfl, argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos) { fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], pos[0]); goto done; }
    if (!out) { fprintf(stderr, "%s: --out DIR is required\n", argv[0]); goto done; }
    ModelType type = MODEL_LLAMA;
    if (shape && (!strcmp(shape, "qwen2.5-0.5b") || !strcmp(shape, "qwen2.5-7b"))) type = MODEL_QWEN2;
    if (shape && !strcmp(shape, "granite-3.1-1b-a400m")) type = MODEL_GRANITEMOE;
    if (type_s && model_type_parse(type_s, &type) < 0) {
        fprintf(stderr, "%s: --model-type '%s': use llama, qwen2, qwen3, mistral, exaone, granite, smollm3, olmo2, "
                "phi3, cohere, cohere2, gemma2, gemma3_text, qwen3_moe, qwen2_moe, olmoe, granitemoe, mixtral or gpt_oss\n",
                argv[0], type_s);
        goto done;
    }
    ModelConfig cfg = {0};
    if (shape && modelgen_shape(&cfg, shape, type) < 0) {
        fprintf(stderr, "%s: --shape '%s' with model type %s: use tiny, bench, qwen2.5-0.5b or qwen2.5-7b (the last "
                "two qwen2 only), granite-3.1-1b-a400m (granitemoe only)\n", argv[0], shape, model_type_name(type));
        goto done;
    }
    bool moe = type >= MODEL_QWEN3_MOE;
    if (!moe && (experts || topk || effn || norm_topk)) {
        fprintf(stderr, "%s: --experts, --experts-per-token, --expert-ffn, --norm-topk-prob: model type %s is not a "
                "mixture of experts\n", argv[0], model_type_name(type));
        goto done;
    }
    if (norm_topk && (type == MODEL_GRANITEMOE || type == MODEL_MIXTRAL || type == MODEL_GPT_OSS)) {
        fprintf(stderr, "%s: --norm-topk-prob: %s always renormalises\n", argv[0], model_type_name(type));
        goto done;
    }
    if (!shape) {
        model_config_defaults(&cfg, type);
        cfg.bos_token_id = 1, cfg.eos_token_ids[0] = 2, cfg.n_eos = 1;
    }
    if (hidden) cfg.hidden_size = (int)hidden;
    if (layers) cfg.num_hidden_layers = (int)layers;
    if (heads) cfg.num_attention_heads = (int)heads;
    if (ffn && !moe) cfg.intermediate_size = (int)ffn;
    if (ffn && moe) {  // config.json's intermediate_size: what it means per type
        if (type == MODEL_QWEN2_MOE) cfg.intermediate_size = (int)ffn;
        else if (type == MODEL_QWEN3_MOE) cfg.dense_intermediate_size = (int)ffn;
        else cfg.moe_intermediate_size = cfg.dense_intermediate_size = (int)ffn;
    }
    if (experts) cfg.num_experts = (int)experts;
    if (topk) cfg.num_experts_per_tok = (int)topk;
    if (effn) {
        cfg.moe_intermediate_size = (int)effn;
        if (type != MODEL_QWEN2_MOE && type != MODEL_QWEN3_MOE) cfg.dense_intermediate_size = (int)effn;
    }
    if (norm_topk) cfg.norm_topk_prob = true;
    if (vocab) cfg.vocab_size = (int)vocab;
    cfg.num_key_value_heads = kv ? (int)kv : (shape && !heads ? cfg.num_key_value_heads : cfg.num_attention_heads);
    cfg.head_dim = head_dim ? (int)head_dim : (cfg.num_attention_heads ? cfg.hidden_size / cfg.num_attention_heads : 0);
    if (!head_dim && cfg.num_attention_heads && cfg.hidden_size % cfg.num_attention_heads) {
        fprintf(stderr, "%s: --hidden %d is not a multiple of --heads %d (give --head-dim)\n", argv[0],
                cfg.hidden_size, cfg.num_attention_heads);
        goto done;
    }
    if (tie) cfg.tie_word_embeddings = true;
    if (abias) {
        if (type == MODEL_QWEN2 || type == MODEL_QWEN2_MOE || type == MODEL_MIXTRAL) {
            fprintf(stderr, "%s: --attention-bias: %s\n", argv[0], type == MODEL_MIXTRAL ? "mixtral has no biases"
                    : "qwen2 and qwen2_moe always have q/k/v bias and no o bias");
            goto done;
        }
        cfg.has_qkv_bias = cfg.has_o_bias = true;
    }
    if (type == MODEL_COHERE2) model_config_set_layer_pattern(&cfg, 4);  // Cohere2Config's default pattern
    if (window >= 0) {
        if (type == MODEL_COHERE2 && window == 0) {
            fprintf(stderr, "%s: --sliding-window 0: cohere2's sliding layers need a window\n", argv[0]);
            goto done;
        }
        if (type != MODEL_MISTRAL && type != MODEL_PHI3 && type != MODEL_COHERE2 && type != MODEL_GEMMA2 &&
            type != MODEL_GEMMA3_TEXT && type != MODEL_MIXTRAL && type != MODEL_GPT_OSS) {
            fprintf(stderr, "%s: --sliding-window: only model types mistral, mixtral, phi3, cohere2, gemma2, "
                    "gemma3_text and gpt_oss have one (not %s)\n", argv[0],
                    model_type_name(type));
            goto done;
        }
        cfg.sliding_window = (int)window;
    }
    if (prf != 1) {
        int rd = (int)(cfg.head_dim * prf);
        if (type != MODEL_PHI3) {
            fprintf(stderr, "%s: --partial-rotary-factor: only model type phi3 has one (not %s)\n", argv[0],
                    model_type_name(type));
            goto done;
        }
        if (rd < 2 || rd % 2) {
            fprintf(stderr, "%s: --partial-rotary-factor %g gives %d rotary dims of head dim %d (need an even "
                    "number >= 2)\n", argv[0], prf, rd, cfg.head_dim);
            goto done;
        }
        cfg.rope_dim = rd < cfg.head_dim ? rd : 0;
    }
    if ((qknorm && type != MODEL_COHERE) || (logit_scale > 0 && type != MODEL_COHERE && type != MODEL_COHERE2)) {
        fprintf(stderr, "%s: --%s: only model type cohere%s has it (not %s)\n", argv[0],
                qknorm ? "qk-norm" : "logit-scale", qknorm ? "" : " (and cohere2)", model_type_name(type));
        goto done;
    }
    if (qknorm) cfg.has_qk_norm = true;
    if (logit_scale > 0) cfg.logit_scale = logit_scale;
    if (type == MODEL_GPT_OSS) model_config_gemma_layers(&cfg, NULL, 2);  // GptOssConfig's: odd layers full
    if (cfg.gemma_norms) {  // the layer pattern and sqrt(C) follow the sizes given
        model_config_gemma_layers(&cfg, NULL, 0);
        model_config_gemma_scales(&cfg);
    }
    if (theta > 0) cfg.rope_theta = theta;
    if (maxpos) cfg.max_position_embeddings = (int)maxpos;
    if (!strcmp(rope_s, "llama3")) {
        cfg.rope_scaling = ROPE_SCALING_LLAMA3;
        cfg.rope_factor = 32, cfg.rope_low_freq_factor = 1, cfg.rope_high_freq_factor = 4;
        cfg.rope_original_max_position_embeddings = 8192;
    } else if (strcmp(rope_s, "none")) {
        fprintf(stderr, "%s: --rope-scaling '%s': use none or llama3\n", argv[0], rope_s);
        goto done;
    }
    ModelGenOptions opt = {.dtype = ST_DTYPE_BF16, .seed = (uint64_t)seed, .tokenizer_dir = tok};
    if (!strcmp(dtype_s, "f32")) opt.dtype = ST_DTYPE_F32;
    else if (!strcmp(dtype_s, "f16")) opt.dtype = ST_DTYPE_F16;
    else if (strcmp(dtype_s, "bf16")) {
        fprintf(stderr, "%s: --dtype '%s': use bf16, f16 or f32\n", argv[0], dtype_s);
        goto done;
    }
    PailErr err = {0};
    rc = 1;
    if (tok) {
        int tb, te, mx;
        if (modelgen_tokenizer_ids(tok, &tb, &te, &mx, &err) < 0) {
            fprintf(stderr, "%s: --tokenizer: %s\n", argv[0], err.msg);
            goto done;
        }
        if (mx >= cfg.vocab_size) {
            fprintf(stderr, "%s: --tokenizer %s has token ids up to %d; --vocab %d is too small\n", argv[0], tok, mx,
                    cfg.vocab_size);
            rc = 2;
            goto done;
        }
        cfg.bos_token_id = tb;  // -1 (null) when the tokenizer has no bos_token, as Qwen's
        if (te >= 0) cfg.eos_token_ids[0] = te, cfg.n_eos = 1;
    }
    if (bos >= 0) cfg.bos_token_id = (int)bos;
    if (eos >= 0) cfg.eos_token_ids[0] = (int)eos, cfg.n_eos = 1;
    if (model_config_validate(&cfg, "init-model", &err) < 0) {
        fprintf(stderr, "%s: %s (give every size, or --shape)\n", argv[0], err.msg);
        rc = 2;
        goto done;
    }
    flags_print(stderr, fl, nfl);
    if (modelgen_write(&cfg, out, &opt, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    printf("wrote %s: %s C=%d L=%d H=%d Hkv=%d D=%d F=%d V=%d tied=%d %s, %zu parameters", out,
           model_type_name(cfg.type), cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
           cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size, cfg.tie_word_embeddings,
           opt.dtype == ST_DTYPE_F32 ? "f32" : opt.dtype == ST_DTYPE_F16 ? "f16" : "bf16", model_config_param_count(&cfg));
    if (moe)
        printf(" (E=%d K=%d Fe=%d: %zu active a token)", cfg.num_experts, cfg.num_experts_per_tok,
               cfg.moe_intermediate_size, model_config_active_param_count(&cfg));
    printf("\n");
    rc = 0;
done:
    free(pos);
    flags_free(fl, nfl);
    return rc;
}

int ctl_model_info(int argc, char **argv) {
    char *dir = NULL;
    bool sums;
    Flag fl[] = {
        {"model", FLAG_STRING, &dir, NULL, 1, 0, "Hugging Face model folder (config.json + safetensors)"},
        {"sums", FLAG_BOOL, &sums, "false", 1, 0,
         "print every tensor's sha256 of its fp32 little-endian values and their sum"},
    };
    char **pos = NULL;
    int npos = 0, rc;
    if ((rc = ctl_parse("grpo-ctl model-info --model DIR [--sums]",
                        "Reads config.json, checks and loads every tensor, prints a summary and base_sha256.", fl, 2,
                        argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos || !dir) { fprintf(stderr, "%s: --model DIR is required (and nothing else)\n", argv[0]); goto done; }
    rc = 1;
    PailErr err = {0};
    ModelConfig c;
    SafeTensorsSet set;
    ModelWeights w;
    if (model_config_load(&c, dir, &err) < 0 || safetensors_set_open(&set, dir, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    if (model_weights_load_set(&w, &c, &set, DT_F32, &err) < 0) {  // --sums hashes fp32 values
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        safetensors_set_close(&set);
        goto done;
    }
    printf("model: %s\nmodel_type: %s\n", dir, model_type_name(c.type));
    // a mixture of experts: config.json's intermediate_size (the experts' and the shared one below)
    printf("hidden_size (C): %d\nintermediate_size (F): %d\nnum_hidden_layers (L): %d\n", c.hidden_size,
           model_is_moe(&c) ? c.dense_intermediate_size : c.intermediate_size, c.num_hidden_layers);
    printf("num_attention_heads (H): %d\nnum_key_value_heads (Hkv): %d\nhead_dim (D): %d\nvocab_size (V): %d\n",
           c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size);
    printf("max_position_embeddings: %d\nrms_norm_eps: %g\nrope_theta: %g\n", c.max_position_embeddings,
           c.rms_norm_eps, c.rope_theta);
    if (c.rope_scaling == ROPE_SCALING_LLAMA3)
        printf("rope_scaling: llama3 factor=%g low_freq_factor=%g high_freq_factor=%g original_max=%d\n",
               c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_position_embeddings);
    else if (c.rope_scaling == ROPE_SCALING_YARN)
        printf("rope_scaling: yarn factor=%g original_max=%d beta_fast=%g beta_slow=%g truncate=%s "
               "attention_factor=%g\n", c.rope_factor, c.rope_original_max_position_embeddings, c.rope_beta_fast,
               c.rope_beta_slow, c.rope_truncate ? "true" : "false",
               c.rope_attention_factor > 0 ? c.rope_attention_factor : 0.1 * log(c.rope_factor) + 1.0);
    else if (c.rope_scaling == ROPE_SCALING_LONGROPE)
        printf("rope_scaling: longrope original_max=%d attention_factor=%g (short_factor up to %d positions, "
               "long_factor past)\n", c.rope_original_max_position_embeddings, c.rope_attention_factor,
               c.rope_original_max_position_embeddings);
    else if (c.rope_scaling != ROPE_SCALING_LINEAR)
        printf("rope_scaling: none\n");
    if (c.sliding_window > 0) printf("sliding_window: %d\n", c.sliding_window);
    else printf("sliding_window: none\n");
    if (c.type == MODEL_GRANITE || c.type == MODEL_GRANITEMOE)
        printf("embedding_multiplier: %g\nresidual_multiplier: %g\nattention_multiplier: %g\nlogits_scaling: %g\n",
               c.embedding_multiplier, c.residual_multiplier, c.attention_multiplier, c.logits_scaling);
    printf("no_rope_layers:");  // smollm3's layers without RoPE
    int nnope = 0;
    for (int l = 0; l < c.num_hidden_layers; l++)
        if (!model_layer_has_rope(&c, l)) printf(" %d", l), nnope++;
    printf("%s\n", nnope ? "" : " none");
    if (c.type == MODEL_PHI3)  // fused checkpoint tensors; the adapter's modules are PEFT's fused ones
        printf("fused: self_attn.qkv_proj (q, k, v), mlp.gate_up_proj (gate, up)\npartial_rotary: %d of %d head "
               "dims rotated\n", model_rope_dim(&c), c.head_dim);
    if (c.post_norm) printf("post_norm: true (norms after the sub-blocks, q/k norms over the whole projection)\n");
    else if (c.qk_norm_whole) printf("qk_norm_whole: true (q/k norms over the whole projection, pre-norm layers)\n");
    if (model_is_moe(&c)) {
        printf("num_experts (E): %d\nnum_experts_per_tok (K): %d\nmoe_intermediate_size (Fe): %d\nnorm_topk_prob: %s\n",
               c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.norm_topk_prob ? "true" : "false");
        if (c.type == MODEL_QWEN2_MOE)
            printf("shared_expert: intermediate_size %d under a sigmoid gate\n", c.intermediate_size);
        else
            printf("shared_expert: none\n");
        printf("parameters_active: %zu a token (of %zu: K of E experts)\n", model_config_active_param_count(&c),
               model_config_param_count(&c));
    }
    if (c.type == MODEL_GPT_OSS) {
        printf("attention_sinks: a learned logit per head in every softmax (self_attn.sinks)\n");
        printf("moe_bias: router and experts (mlp.router.bias, mlp.experts.gate_up_proj_bias, down_proj_bias)\n");
        printf("swiglu: clamped, alpha %g, limit %g ((clamp(up) + 1) * min(gate, limit) * sigmoid(alpha gate))\n",
               c.swiglu_alpha, c.swiglu_limit);
        printf("layer_types:");
        for (int l = 0; l < c.num_hidden_layers; l++) printf(" %s", model_layer_window(&c, l) ? "sliding" : "full");
        printf("\n");
    }
    if (c.type == MODEL_COHERE2) {  // its full_attention layers (no window, no RoPE: no_rope_layers above)
        printf("full_attention_layers:");
        for (int l = 0; l < c.num_hidden_layers; l++)
            if (!model_layer_window(&c, l)) printf(" %d", l);
        printf("\n");
    }
    if (c.parallel_block)  // cohere, cohere2
        printf("parallel_block: true (h = x + attn(ln(x)) + mlp(ln(x)), one input_layernorm)\n"
               "norm: layernorm (mean-subtracted, no bias%s)\nrope: interleaved (pairs 2i, 2i+1)\nlogit_scale: %g\n",
               c.has_qk_norm ? "; q/k norms per head" : "", c.logit_scale);
    if (c.gemma_norms) {  // gemma2 / gemma3_text
        printf("gemma: sandwich norms scaled by 1 + w, gelu_pytorch_tanh MLP, embeddings * sqrt(C) = %g, "
               "scores * query_pre_attn_scalar^-0.5 (%d)\n", c.embedding_multiplier, c.query_pre_attn_scalar);
        printf("layer_types:");
        for (int l = 0; l < c.num_hidden_layers; l++) printf(" %s", model_layer_window(&c, l) ? "sliding" : "full");
        printf("\n");
        if (c.rope_local_theta > 0) printf("rope_local_base_freq (sliding layers): %g\n", c.rope_local_theta);
        if (c.rope_scaling == ROPE_SCALING_LINEAR) printf("rope_scaling (full layers): linear factor=%g\n", c.rope_factor);
        if (c.attn_logit_softcapping > 0) printf("attn_logit_softcapping: %g\n", c.attn_logit_softcapping);
        else printf("attn_logit_softcapping: null\n");
        if (c.final_logit_softcapping > 0) printf("final_logit_softcapping: %g\n", c.final_logit_softcapping);
        else printf("final_logit_softcapping: null\n");
    }
    printf("tie_word_embeddings: %s\nqkv_bias: %s\no_bias: %s\nqk_norm: %s\n", c.tie_word_embeddings ? "true" : "false",
           c.has_qkv_bias ? "true" : "false", c.has_o_bias ? "true" : "false", c.has_qk_norm ? "true" : "false");
    printf("bos_token_id: %d\neos_token_id:", c.bos_token_id);
    for (int i = 0; i < c.n_eos; i++) printf(" %d", c.eos_token_ids[i]);
    char sdesc[MODEL_DTYPE_DESC] = "?";
    size_t sbytes = 0;
    PailErr perr = {0};
    model_weights_probe(set.dir, MODEL_DTYPE_AUTO, &sbytes, sdesc, &perr);  // checked above: it cannot fail but for memory
    printf("\ndtype: %s\nstored: %s (the matrices; --dtype auto holds them so: %.1f MiB)\nparameters: %zu\n",
           c.dtype[0] ? c.dtype : "(not given)", sdesc, sbytes / 1048576.0, w.num_params);
    int ntensors = 0;
    for (int i = 0; i < set.nfiles; i++) {
        printf("file: %s %d tensors %zu bytes\n", set.file_names[i], set.files[i].n, set.files[i].len);
        ntensors += set.files[i].n;
    }
    printf("tensors: %d checked\nbase_sha256: %s\n", ntensors, w.base_sha256);
    if (sums) {
        for (int id = 0; id < PARAM_COUNT; id++) {
            if (!w.specs[id].present) continue;
            for (int l = 0; l < (w.specs[id].per_layer ? c.num_hidden_layers : 1); l++) {
                char nm[256], hex[65];
                model_param_name(&w.specs[id], l, nm, sizeof nm);
                const float *x = model_weights_tensor(&w, id, l);
                ModelTensorPart tp;  // gpt_oss's experts: in the file's (transformers') layout
                model_param_part(&c, w.specs, (ModelParamId)id, l, 0, &tp);
                float *perm = NULL;
                if ((tp.transposed || tp.interleaved) && (perm = malloc(w.specs[id].numel * sizeof *perm)) &&
                    model_part_to_file(perm, DT_F32, x, DT_F32, &tp) == 0)
                    x = perm;
                sha256_hex(x, w.specs[id].numel * sizeof(float), hex);
                double s = 0;
                for (size_t i = 0; i < w.specs[id].numel; i++) s += x[i];
                printf("tensor %s sha256_f32=%s sum=%.17g\n", nm, hex, s);
                free(perm);
            }
        }
    }
    model_weights_free(&w);
    safetensors_set_close(&set);
    rc = 0;
done:
    free(pos);
    flags_free(fl, 2);
    return rc;
}
