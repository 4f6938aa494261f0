// Check suite for src/model files: config.json parsing against published
// configs (Llama 3.2, Qwen2.5, Qwen3) and refusals, safetensors round trips and
// byte equality with the reference writer's files, dtype conversion against the
// compiler's _Float16, the hostile-header corpus (tests/fuzz/corpus/safetensors),
// sharded sets, and generated tiny / bench checkpoints loaded and checked.
// Run from the repository root (or set PAIL_ROOT) so the corpus is found.
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/fsutil.h"
#include "core/sha256.h"
#include "model/config.h"
#include "model/modelgen.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "model/transformer.h"
#include "check_tmp.h"

static char tmpdir[256];

static void setup_tmp(void) {
    tmp_make(tmpdir, sizeof tmpdir, "check-model");
}
static void teardown_tmp(void) { tmp_remove(tmpdir); }

static const char *root_dir(void) { return getenv("PAIL_ROOT") ? getenv("PAIL_ROOT") : "."; }

static int parse_cfg(ModelConfig *c, const char *json, PailErr *err) {
    return model_config_parse(c, json, strlen(json), "config.json", err);
}

// ---- config ----

// meta-llama/Llama-3.2-1B config.json as published (legacy rope_scaling layout).
static const char *llama32 =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":128000,\"eos_token_id\":128001,\"head_dim\":64,\"hidden_act\":\"silu\","
    "\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":8192,"
    "\"max_position_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"llama\","
    "\"num_attention_heads\":32,\"num_hidden_layers\":16,\"num_key_value_heads\":8,\"pretraining_tp\":1,"
    "\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.45.0.dev0\","
    "\"use_cache\":true,\"vocab_size\":128256}";
// Qwen/Qwen2.5-0.5B config.json as published.
static const char *qwen25 =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
    "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":24,"
    "\"model_type\":\"qwen2\",\"num_attention_heads\":14,\"num_hidden_layers\":24,\"num_key_value_heads\":2,"
    "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.40.1\",\"use_cache\":true,"
    "\"use_mrope\":false,\"use_sliding_window\":false,\"vocab_size\":151936}";
// Qwen/Qwen3-0.6B config.json as published (head_dim 128 != 1024 / 16).
static const char *qwen3 =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":1024,\"initializer_range\":0.02,\"intermediate_size\":3072,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":28,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

// HuggingFaceTB/SmolLM2-135M config.json as published (llama, tied, no head_dim).
static const char *smollm2 =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":0,\"eos_token_id\":0,\"hidden_act\":\"silu\",\"hidden_size\":576,"
    "\"initializer_range\":0.041666666666666664,\"intermediate_size\":1536,\"is_llama_config\":true,"
    "\"max_position_embeddings\":8192,\"model_type\":\"llama\",\"num_attention_heads\":9,"
    "\"num_hidden_layers\":30,\"num_key_value_heads\":3,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
    "\"rope_interleaved\":false,\"rope_scaling\":null,\"rope_theta\":100000,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.40.1\",\"use_cache\":true,\"vocab_size\":49152}";

// mistralai/Mistral-7B-v0.1 config.json as published (the window on every layer).
static const char *mistral7b =
    "{\"architectures\":[\"MistralForCausalLM\"],\"bos_token_id\":1,\"eos_token_id\":2,\"hidden_act\":\"silu\","
    "\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":14336,"
    "\"max_position_embeddings\":32768,\"model_type\":\"mistral\",\"num_attention_heads\":32,"
    "\"num_hidden_layers\":32,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,"
    "\"sliding_window\":4096,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.34.0.dev0\",\"use_cache\":true,\"vocab_size\":32000}";

// LGAI-EXAONE/EXAONE-3.5-2.4B-Instruct's config.json fields (EXAONE's own names: num_layers,
// layer_norm_epsilon, activation_function; llama3 rope; tied).
static const char *exaone35 =
    "{\"activation_function\":\"silu\",\"architectures\":[\"ExaoneForCausalLM\"],\"attention_dropout\":0.0,"
    "\"bos_token_id\":1,\"embed_dropout\":0.0,\"eos_token_id\":361,\"head_dim\":80,\"hidden_size\":2560,"
    "\"initializer_range\":0.02,\"intermediate_size\":7168,\"layer_norm_epsilon\":1e-05,"
    "\"max_position_embeddings\":32768,\"model_type\":\"exaone\",\"num_attention_heads\":32,"
    "\"num_key_value_heads\":8,\"num_layers\":30,\"pad_token_id\":0,\"rope_scaling\":{\"factor\":8.0,"
    "\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,"
    "\"rope_type\":\"llama3\"},\"rope_theta\":1000000.0,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"vocab_size\":102400}";

START_TEST(test_config_published) {
    ModelConfig c;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, llama32, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_LLAMA);
    ck_assert_int_eq(c.hidden_size, 2048);
    ck_assert_int_eq(c.num_key_value_heads, 8);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LLAMA3);
    ck_assert(c.rope_factor == 32.0 && c.rope_low_freq_factor == 1.0 && c.rope_high_freq_factor == 4.0);
    ck_assert_int_eq(c.rope_original_max_position_embeddings, 8192);
    ck_assert(c.rope_theta == 500000.0 && c.rms_norm_eps == 1e-5);
    ck_assert(c.tie_word_embeddings && !c.has_qkv_bias && !c.has_o_bias && !c.has_qk_norm);
    ck_assert_int_eq(c.bos_token_id, 128000);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_token_ids[0], 128001);
    ck_assert_str_eq(c.dtype, "bfloat16");
    // Llama 3.2 1B has 1,235,814,400 parameters (tied): the published figure.
    ck_assert_uint_eq(model_config_param_count(&c), 1235814400u);

    ck_assert_msg(parse_cfg(&c, qwen25, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_QWEN2);
    ck_assert(c.has_qkv_bias && !c.has_o_bias && !c.has_qk_norm);  // qwen2: always, no config field
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_NONE);
    ck_assert(c.rope_theta == 1e6);
    // Qwen2.5-0.5B: 494,032,768 parameters (the model card's 0.49B).
    ck_assert_uint_eq(model_config_param_count(&c), 494032768u);

    ck_assert_msg(parse_cfg(&c, qwen3, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_QWEN3);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert(c.has_qk_norm && !c.has_qkv_bias);
    ck_assert(c.rope_theta == 1e6);  // an integer in the file
    ck_assert_int_eq(c.max_position_embeddings, 40960);
    ck_assert_msg(parse_cfg(&c, smollm2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.bos_token_id, 0);
    ck_assert(c.tie_word_embeddings && c.rope_theta == 100000.0);
    // SmolLM2-135M: 134,515,008 parameters (the "135M").
    ck_assert_uint_eq(model_config_param_count(&c), 134515008u);
    ck_assert_msg(parse_cfg(&c, qwen3, &err) == 0, "%s", err.msg);
    // Qwen3-0.6B: 596,049,920 parameters with tied embeddings (0.6B; 0.44B non-embedding).
    ck_assert_uint_eq(model_config_param_count(&c), 596049920u);
    ck_assert_int_eq(c.sliding_window, 0);  // qwen's sliding_window: null (and use_sliding_window false)

    ck_assert_msg(parse_cfg(&c, mistral7b, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_MISTRAL);
    ck_assert_int_eq(c.sliding_window, 4096);
    ck_assert(!c.has_qkv_bias && !c.has_o_bias && !c.has_qk_norm && !c.tie_word_embeddings);
    ck_assert_int_eq(c.head_dim, 128);
    // Mistral-7B-v0.1: 7,241,732,096 parameters (the "7B").
    ck_assert_uint_eq(model_config_param_count(&c), 7241732096u);

    ck_assert_msg(parse_cfg(&c, exaone35, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_EXAONE);
    ck_assert_int_eq(c.num_hidden_layers, 30);  // num_layers
    ck_assert(c.rms_norm_eps == 1e-5);          // layer_norm_epsilon
    ck_assert_int_eq(c.head_dim, 80);
    ck_assert(c.rope_scaling == ROPE_SCALING_LLAMA3 && c.rope_theta == 1e6 && c.tie_word_embeddings);
    ck_assert(!c.has_qkv_bias && !c.has_qk_norm && c.sliding_window == 0);
    // EXAONE-3.5-2.4B: 2,405,327,360 parameters (tied; the model card's 2.14B without embeddings).
    ck_assert_uint_eq(model_config_param_count(&c), 2405327360u);
    // its activation_function is checked as hidden_act is; absent rope_theta: ExaoneConfig's 500000
    const char *gelu = "{\"model_type\":\"exaone\",\"hidden_size\":64,\"intermediate_size\":128,\"num_layers\":2,"
                       "\"num_attention_heads\":4,\"vocab_size\":100,\"activation_function\":\"gelu\"}";
    ck_assert_int_eq(parse_cfg(&c, gelu, &err), -1);
    ck_assert_msg(strstr(err.msg, "hidden_act = 'gelu'"), "%s", err.msg);
    const char *plain = "{\"model_type\":\"exaone\",\"hidden_size\":64,\"intermediate_size\":128,\"num_layers\":2,"
                        "\"num_attention_heads\":4,\"vocab_size\":100}";
    ck_assert_msg(parse_cfg(&c, plain, &err) == 0, "%s", err.msg);
    ck_assert(c.rope_theta == 500000.0 && c.num_hidden_layers == 2 && c.max_position_embeddings == 4096);
}
END_TEST

// transformers 5 writes rope_parameters and dtype instead of rope_theta/rope_scaling/torch_dtype.
START_TEST(test_config_transformers5) {
    const char *j =
        "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":100,\"dtype\":\"float32\","
        "\"attention_bias\":true,\"rope_parameters\":{\"factor\":8.0,\"high_freq_factor\":4.0,"
        "\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,\"rope_theta\":500000.0,"
        "\"rope_type\":\"llama3\"},\"bos_token_id\":1,\"eos_token_id\":[2,3]}";
    ModelConfig c;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(c.rope_theta == 500000.0 && c.rope_scaling == ROPE_SCALING_LLAMA3 && c.rope_factor == 8.0);
    ck_assert(c.has_qkv_bias && c.has_o_bias);  // llama attention_bias covers q, k, v and o
    ck_assert_str_eq(c.dtype, "float32");
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.n_eos, 2);
    const char *g = "{\"bos_token_id\":5,\"eos_token_id\":[7,8,9],\"do_sample\":true}";
    ck_assert_int_eq(model_config_apply_generation(&c, g, strlen(g), "generation_config.json", &err), 0);
    ck_assert_int_eq(c.bos_token_id, 5);
    ck_assert_int_eq(c.n_eos, 3);
    ck_assert_int_eq(c.eos_token_ids[2], 9);
    // "default" rope_parameters: no scaling
    const char *q = "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":4,\"vocab_size\":100,\"layer_types\":[\"full_attention\","
                    "\"full_attention\"],\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":\"default\"}}";
    ck_assert_msg(parse_cfg(&c, q, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_NONE);
    ck_assert_int_eq(c.num_key_value_heads, 4);  // absent: = heads
}
END_TEST

// Mistral's sliding_window: a number, null (v0.3: full attention) or absent (MistralConfig's 4096);
// attention_bias does not exist in MistralAttention and is ignored as transformers does.
START_TEST(test_config_mistral_window) {
    const char *base = "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":128,"
                       "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100";
    static const struct { const char *patch; int want; } cases[] = {
        {",\"sliding_window\":8}", 8}, {",\"sliding_window\":null}", 0}, {"}", 4096},
        {",\"sliding_window\":8,\"attention_bias\":true,\"use_sliding_window\":true}", 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char j[512];
        snprintf(j, sizeof j, "%s%s", base, cases[i].patch);
        ModelConfig c;
        PailErr err = {0};
        ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s: %s", j, err.msg);
        ck_assert_int_eq(c.sliding_window, cases[i].want);
        ck_assert(!c.has_qkv_bias && !c.has_o_bias);
        // written and read back: the window (or null) survives
        Buf b = {0};
        ModelConfig back;
        ck_assert_int_eq(model_config_to_json(&c, "float32", &b), 0);
        ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
        ck_assert_int_eq(back.type, MODEL_MISTRAL);
        ck_assert_int_eq(back.sliding_window, cases[i].want);
        ck_assert(strstr((char *)b.data, "MistralForCausalLM"));
        buf_free(&b);
    }
    static const struct { const char *patch, *want; } bad[] = {
        {",\"sliding_window\":0}", "sliding_window = 0 is out of range"},
        {",\"sliding_window\":\"8\"}", "'sliding_window' is not an integer"},
        {",\"sliding_window\":-4}", "sliding_window = -4 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char j[512];
        snprintf(j, sizeof j, "%s%s", base, bad[i].patch);
        ModelConfig c;
        PailErr err = {0};
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, bad[i].want), "'%s' lacks '%s'", err.msg, bad[i].want);
    }
}
END_TEST

// microsoft/Phi-3-mini-4k-instruct's config.json as published (legacy spelling: rope_scaling,
// torch_dtype, top-level partial_rotary_factor absent = 1), its window, its fused tensors; a
// transformers 5 spelling (rope_parameters with partial_rotary_factor, dtype) as Phi-4-mini's.
START_TEST(test_config_phi3) {
    const char *mini =
        "{\"architectures\":[\"Phi3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
        "\"bos_token_id\":1,\"embd_pdrop\":0.0,\"eos_token_id\":32000,\"hidden_act\":\"silu\",\"hidden_size\":3072,"
        "\"initializer_range\":0.02,\"intermediate_size\":8192,\"max_position_embeddings\":4096,"
        "\"model_type\":\"phi3\",\"num_attention_heads\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":32,"
        "\"original_max_position_embeddings\":4096,\"pad_token_id\":32000,\"resid_pdrop\":0.0,"
        "\"rms_norm_eps\":1e-05,\"rope_scaling\":null,\"rope_theta\":10000.0,\"sliding_window\":2047,"
        "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"vocab_size\":32064}";
    ModelConfig c;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, mini, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_PHI3);
    ck_assert_int_eq(c.sliding_window, 2047);
    ck_assert_int_eq(c.rope_dim, 0);
    ck_assert_int_eq(model_rope_dim(&c), 96);
    ck_assert(!c.has_qkv_bias && !c.has_o_bias && !c.tie_word_embeddings && c.rms_norm_eps == 1e-5);
    ck_assert_str_eq(c.dtype, "bfloat16");
    ck_assert_uint_eq(model_config_param_count(&c), 3821079552u);  // the hub's 3.82B
    ModelParamSpec s[PARAM_COUNT];
    model_param_specs(&c, s);
    ck_assert(s[PARAM_WQKV].present && !s[PARAM_WQ].present && !s[PARAM_WK].present && !s[PARAM_W_UP].present);
    ck_assert_str_eq(s[PARAM_WQKV].name, "self_attn.qkv_proj.weight");
    ck_assert_uint_eq(s[PARAM_WQKV].shape[0], 3 * 3072);
    ck_assert_str_eq(s[PARAM_W_GATE_UP].name, "mlp.gate_up_proj.weight");
    ck_assert_uint_eq(s[PARAM_W_GATE_UP].shape[0], 2 * 8192);
    ck_assert_uint_eq(model_params_count(&c), model_config_param_count(&c));
    // transformers 5's spelling, Phi-4-mini's partial rotary (D = 128: 96 dims), null window, GQA
    const char *v5 =
        "{\"model_type\":\"phi3\",\"hidden_size\":3072,\"intermediate_size\":8192,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":24,\"num_key_value_heads\":8,\"vocab_size\":200064,\"sliding_window\":null,"
        "\"dtype\":\"bfloat16\",\"partial_rotary_factor\":0.5,\"rope_parameters\":{\"rope_type\":\"default\","
        "\"rope_theta\":250000.0,\"partial_rotary_factor\":0.75}}";
    ck_assert_msg(parse_cfg(&c, v5, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.sliding_window, 0);
    ck_assert_int_eq(c.rope_dim, 96);  // rope_parameters' factor wins over the top level's
    ck_assert(c.rope_theta == 250000.0);
    ck_assert_str_eq(c.dtype, "bfloat16");
    // written and read back
    Buf b = {0};
    ModelConfig back;
    ck_assert_int_eq(model_config_to_json(&c, "float32", &b), 0);
    ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    ck_assert(back.type == MODEL_PHI3 && back.rope_dim == 96 && back.sliding_window == 0);
    ck_assert(strstr((char *)b.data, "Phi3ForCausalLM"));
    buf_free(&b);
    // Phi-3.5-mini's longrope, legacy spelling ('su' as older files, top-level original_max);
    // factor = 256 / 16 = 16 gives attention_factor sqrt(1 + ln 16 / ln 16)
    const char *lr =
        "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"vocab_size\":100,\"max_position_embeddings\":256,"
        "\"original_max_position_embeddings\":16,\"partial_rotary_factor\":0.75,\"rope_scaling\":{\"type\":\"su\","
        "\"short_factor\":[1,1.1,1.2,1.3,1.4,1.5],\"long_factor\":[2,3,4,5,6,7]}}";
    ck_assert_msg(parse_cfg(&c, lr, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LONGROPE);
    ck_assert_int_eq(c.rope_original_max_position_embeddings, 16);
    ck_assert(fabs(c.rope_attention_factor - sqrt(2.0)) < 1e-12);
    ck_assert(c.rope_short_factor[1] == 1.1f && c.rope_long_factor[5] == 7.0f);
    ck_assert_int_eq(model_config_to_json(&c, "float32", &b), 0);  // written and read back
    ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    ck_assert(back.rope_scaling == ROPE_SCALING_LONGROPE && back.rope_original_max_position_embeddings == 16);
    ck_assert(fabs(back.rope_attention_factor - sqrt(2.0)) < 1e-9 && back.rope_long_factor[5] == 7.0f);
    buf_free(&b);
    // transformers 5's spelling: rope_parameters; attention_factor given; original_max absent at the
    // top level: Phi3Config's 4096 (it overrides the one inside rope_parameters)
    const char *lr5 =
        "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"vocab_size\":100,\"max_position_embeddings\":131072,"
        "\"rope_parameters\":{\"rope_type\":\"longrope\",\"rope_theta\":10000.0,\"attention_factor\":1.19,"
        "\"original_max_position_embeddings\":64,\"short_factor\":[1,1,1,1,1,1,1,1],\"long_factor\":[1,2,3,4,5,6,7,8]}}";
    ck_assert_msg(parse_cfg(&c, lr5, &err) == 0, "%s", err.msg);
    ck_assert(c.rope_scaling == ROPE_SCALING_LONGROPE && c.rope_original_max_position_embeddings == 4096);
    ck_assert(c.rope_attention_factor == 1.19 && c.rope_dim == 0);
    static const struct { const char *patch, *want; } bad[] = {
        {",\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,1],\"long_factor\":[1,1,1,1,1,1,1,1]}}",
         "rope_scaling.short_factor is not a list of 8 numbers (rotary dims / 2)"},
        {",\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1,1],\"long_factor\":[1,1,1,1,1,1,1,-1]}}",
         "rope_scaling.long_factor[7] is not a positive number"},
        {",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}", "rope_type = 'llama3' is not supported for phi3"},
        {",\"partial_rotary_factor\":0.01}", "partial_rotary_factor = 0.01 gives 0 rotary dims of head_dim 16"},
        {",\"partial_rotary_factor\":0.35}", "partial_rotary_factor = 0.35 gives 5 rotary dims"},
        {",\"partial_rotary_factor\":1.5}", "partial_rotary_factor = 1.5 is out of range"},
        {",\"sliding_window\":0}", "sliding_window = 0 is out of range"},
        {",\"hidden_act\":\"gelu\"}", "hidden_act = 'gelu' is not supported"},
    };
    const char *base = "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":128,"
                       "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char j[512];
        snprintf(j, sizeof j, "%s%s", base, bad[i].patch);
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, bad[i].want), "'%s' lacks '%s'", err.msg, bad[i].want);
    }
}
END_TEST

// allenai/OLMo-2-1124-7B's config.json: norms after the sub-blocks, q/k norms over H*D and Hkv*D.
START_TEST(test_config_olmo2) {
    const char *o7 =
        "{\"architectures\":[\"Olmo2ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
        "\"eos_token_id\":100257,\"hidden_act\":\"silu\",\"hidden_size\":4096,\"initializer_range\":0.02,"
        "\"intermediate_size\":11008,\"max_position_embeddings\":4096,\"model_type\":\"olmo2\","
        "\"num_attention_heads\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":32,\"pad_token_id\":100277,"
        "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":500000,\"tie_word_embeddings\":false,"
        "\"torch_dtype\":\"float32\",\"use_cache\":true,\"vocab_size\":100352}";
    ModelConfig c;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, o7, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_OLMO2);
    ck_assert(c.post_norm && c.has_qk_norm && !c.has_qkv_bias && c.rope_theta == 500000.0);
    // OLMo-2-1124-7B: 7,298,617,344 parameters (the "7B"; q/k norms of 4096 each)
    ck_assert_uint_eq(model_config_param_count(&c), 7298617344u);
    ModelParamSpec s[PARAM_COUNT];
    model_param_specs(&c, s);
    ck_assert_str_eq(s[PARAM_ATTN_NORM].name, "post_attention_layernorm.weight");
    ck_assert_str_eq(s[PARAM_MLP_NORM].name, "post_feedforward_layernorm.weight");
    ck_assert_uint_eq(s[PARAM_Q_NORM].numel, 4096);
    ck_assert_uint_eq(s[PARAM_K_NORM].numel, 4096);
    ck_assert_msg(parse_cfg(&c, qwen3, &err) == 0, "%s", err.msg);  // qwen3's per-head norms: D
    model_param_specs(&c, s);
    ck_assert(!c.post_norm && s[PARAM_Q_NORM].numel == 128);
}
END_TEST

// google/gemma-2-2b's and google/gemma-3-1b-it's config.json fields: gemma2's softcaps are refused by
// name (not run yet) and it parses with them null; gemma3's legacy (rope_theta, rope_local_base_freq,
// rope_scaling, sliding_window_pattern) and transformers 5 (rope_parameters per layer type,
// layer_types) spellings give the same config; what gemma cannot run is refused naming the field.
static const char *gemma2_2b =
    "{\"architectures\":[\"Gemma2ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"attn_logit_softcapping\":50.0,\"bos_token_id\":2,\"cache_implementation\":\"hybrid\",\"eos_token_id\":1,"
    "\"final_logit_softcapping\":30.0,\"head_dim\":256,\"hidden_act\":\"gelu_pytorch_tanh\","
    "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":2304,\"initializer_range\":0.02,"
    "\"intermediate_size\":9216,\"max_position_embeddings\":8192,\"model_type\":\"gemma2\","
    "\"num_attention_heads\":8,\"num_hidden_layers\":26,\"num_key_value_heads\":4,\"pad_token_id\":0,"
    "\"query_pre_attn_scalar\":256,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,\"sliding_window\":4096,"
    "\"torch_dtype\":\"float32\",\"use_cache\":true,\"vocab_size\":256000%s}";
static const char *gemma3_1b =
    "{\"architectures\":[\"Gemma3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"attn_logit_softcapping\":null,\"bos_token_id\":2,\"cache_implementation\":\"hybrid\",\"eos_token_id\":[1,106],"
    "\"final_logit_softcapping\":null,\"head_dim\":256,\"hidden_activation\":\"gelu_pytorch_tanh\","
    "\"hidden_size\":1152,\"initializer_range\":0.02,\"intermediate_size\":6912,\"max_position_embeddings\":32768,"
    "\"model_type\":\"gemma3_text\",\"num_attention_heads\":4,\"num_hidden_layers\":26,\"num_key_value_heads\":1,"
    "\"pad_token_id\":0,\"query_pre_attn_scalar\":256,\"rms_norm_eps\":1e-06,\"sliding_window\":512,"
    "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"vocab_size\":262144,%s}";

START_TEST(test_config_gemma) {
    ModelConfig c, v5;
    PailErr err = {0};
    char j[4096];
    snprintf(j, sizeof j, gemma2_2b, ",\"attn_logit_softcapping\":null");  // null: none
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(c.attn_logit_softcapping == 0 && c.final_logit_softcapping == 30.0);
    snprintf(j, sizeof j, gemma2_2b, ",\"final_logit_softcapping\":\"x\"");
    ck_assert_int_eq(parse_cfg(&c, j, &err), -1);
    ck_assert_msg(strstr(err.msg, "'final_logit_softcapping' is not a number"), "%s", err.msg);
    snprintf(j, sizeof j, gemma2_2b, "");
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(c.attn_logit_softcapping == 50.0 && c.final_logit_softcapping == 30.0);
    ck_assert(c.type == MODEL_GEMMA2 && c.gemma_norms && !c.has_qk_norm && c.tie_word_embeddings);
    ck_assert(c.sliding_window == 4096 && c.rope_local_theta == 0 && c.rope_theta == 10000.0);
    ck_assert(c.embedding_multiplier == 48.0 && c.attention_multiplier == 1.0 / 16);
    for (int l = 0; l < 26; l++)  // Gemma2Config: sliding on even layers
        ck_assert_int_eq(model_layer_window(&c, l), l % 2 ? 0 : 4096);
    ck_assert_uint_eq(model_config_param_count(&c), 2614341888u);  // gemma-2-2b
    ModelParamSpec s[PARAM_COUNT];
    model_param_specs(&c, s);
    ck_assert_str_eq(s[PARAM_PRE_FF_NORM].name, "pre_feedforward_layernorm.weight");
    ck_assert_str_eq(s[PARAM_POST_FF_NORM].name, "post_feedforward_layernorm.weight");
    ck_assert(s[PARAM_PRE_FF_NORM].present && !s[PARAM_LM_HEAD].present);

    const char *legacy = "\"rope_local_base_freq\":10000,\"rope_scaling\":null,\"rope_theta\":1000000,"
                         "\"sliding_window_pattern\":6";
    snprintf(j, sizeof j, gemma3_1b, legacy);
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(c.type == MODEL_GEMMA3_TEXT && c.has_qk_norm && c.rope_theta == 1e6 && c.rope_local_theta == 1e4);
    ck_assert(c.rope_scaling == ROPE_SCALING_NONE && c.n_eos == 2);
    for (int l = 0; l < 26; l++)  // every 6th layer global
        ck_assert_int_eq(model_layer_window(&c, l), (l + 1) % 6 ? 512 : 0);
    ck_assert_uint_eq(model_config_param_count(&c), 999885952u);  // gemma-3-1b
    const char *tf5 = "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
                      "\"sliding_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\","
                      "\"sliding_attention\",\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
                      "\"full_attention\",\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
                      "\"sliding_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\","
                      "\"sliding_attention\",\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
                      "\"full_attention\",\"sliding_attention\",\"sliding_attention\"],\"rope_parameters\":{"
                      "\"full_attention\":{\"rope_theta\":1000000,\"rope_type\":\"default\"},"
                      "\"sliding_attention\":{\"rope_theta\":10000,\"rope_type\":\"default\"}}";
    snprintf(j, sizeof j, gemma3_1b, tf5);
    ck_assert_msg(parse_cfg(&v5, j, &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(v5.full_attn, c.full_attn, sizeof c.full_attn) && v5.rope_theta == c.rope_theta &&
              v5.rope_local_theta == c.rope_local_theta && v5.rope_scaling == ROPE_SCALING_NONE);
    // Gemma 3 4B's global layers: linear x8, in both spellings
    snprintf(j, sizeof j, gemma3_1b, "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},\"rope_theta\":1000000");
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_factor == 8.0 && c.rope_local_theta == 1e4);
    snprintf(j, sizeof j, gemma3_1b, "\"rope_parameters\":{\"full_attention\":{\"factor\":8.0,\"rope_theta\":1000000,"
             "\"rope_type\":\"linear\"},\"sliding_attention\":{\"rope_theta\":20000,\"rope_type\":\"default\"}}");
    ck_assert_msg(parse_cfg(&v5, j, &err) == 0, "%s", err.msg);
    ck_assert(v5.rope_scaling == ROPE_SCALING_LINEAR && v5.rope_factor == 8.0 && v5.rope_local_theta == 2e4);
    // written back (legacy spelling), parsed again
    Buf b = {0};
    ck_assert_int_eq(model_config_to_json(&v5, "bfloat16", &b), 0);
    ck_assert_msg(model_config_parse(&c, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    buf_free(&b);
    ck_assert(c.type == MODEL_GEMMA3_TEXT && c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_factor == 8.0 &&
              c.rope_local_theta == 2e4 && c.rope_theta == 1e6 && c.sliding_window == 512 &&
              !memcmp(c.full_attn, v5.full_attn, sizeof c.full_attn) && c.query_pre_attn_scalar == 256);
    static const struct { const char *patch, *want; } bad[] = {
        {"\"final_logit_softcapping\":-3.0", "final_logit_softcapping = -3 is out of range"},
        {"\"hidden_activation\":\"gelu\"", "hidden_activation = 'gelu' is not supported (only gelu_pytorch_tanh)"},
        {"\"use_bidirectional_attention\":true", "use_bidirectional_attention = true"},
        {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":8.0}", "rope_scaling.rope_type = 'yarn'"},
        {"\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"linear\",\"factor\":2.0}}",
         "rope_parameters.sliding_attention.rope_type = 'linear'"},
        {"\"rope_scaling\":{\"rope_type\":\"linear\"}", "needs a number 'factor'"},
        {"\"layer_types\":[\"full_attention\"]", "layer_types is not a list of 26 entries"},
        {"\"layer_types\":[\"chunked_attention\"]", "layer_types is not a list of 26 entries"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(j, sizeof j, gemma3_1b, bad[i].patch);
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", bad[i].patch);
        ck_assert_msg(strstr(err.msg, bad[i].want), "case %zu: '%s' lacks '%s'", i, err.msg, bad[i].want);
    }
    char lt[2048] = "\"layer_types\":[";
    for (int l = 0; l < 26; l++) strcat(lt, l == 3 ? "\"chunked_attention\"," : "\"full_attention\",");
    lt[strlen(lt) - 1] = ']';
    snprintf(j, sizeof j, gemma3_1b, lt);
    ck_assert_int_eq(parse_cfg(&c, j, &err), -1);
    ck_assert_msg(strstr(err.msg, "layer_types[3] = 'chunked_attention' is not supported"), "%s", err.msg);
}
END_TEST

// ibm-granite/granite-3.1-2b-instruct's config.json fields: its four multipliers are read, written back;
// one out of range is refused naming it; absent, GraniteConfig's 1.
START_TEST(test_config_granite) {
    const char *g31 =
        "{\"architectures\":[\"GraniteForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.1,"
        "\"attention_multiplier\":0.015625,\"bos_token_id\":0,\"embedding_multiplier\":12.0,\"eos_token_id\":0,"
        "\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":8192,"
        "\"logits_scaling\":8.0,\"max_position_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"granite\","
        "\"num_attention_heads\":32,\"num_hidden_layers\":40,\"num_key_value_heads\":8,\"pad_token_id\":0,"
        "\"residual_multiplier\":0.22,\"rms_norm_eps\":1e-05,\"rope_scaling\":null,\"rope_theta\":5000000.0,"
        "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"vocab_size\":49155}";
    ModelConfig c, back;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, g31, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_GRANITE);
    ck_assert(c.embedding_multiplier == 12.0 && c.residual_multiplier == 0.22 && c.attention_multiplier == 0.015625 &&
              c.logits_scaling == 8.0);
    // granite-3.1-2b: 2,533,531,648 parameters (the hub's 2.53B)
    ck_assert_uint_eq(model_config_param_count(&c), 2533531648u);
    Buf b = {0};
    ck_assert_int_eq(model_config_to_json(&c, "bfloat16", &b), 0);
    ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    ck_assert(back.type == MODEL_GRANITE && back.embedding_multiplier == 12.0 && back.residual_multiplier == 0.22 &&
              back.attention_multiplier == 0.015625 && back.logits_scaling == 8.0);
    buf_free(&b);
    const char *plain = "{\"model_type\":\"granite\",\"hidden_size\":64,\"intermediate_size\":128,"
                        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100";
    char j[512];
    snprintf(j, sizeof j, "%s}", plain);
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(c.embedding_multiplier == 1 && c.residual_multiplier == 1 && c.attention_multiplier == 1 &&
              c.logits_scaling == 1);
    snprintf(j, sizeof j, "%s,\"logits_scaling\":0}", plain);
    ck_assert_int_eq(parse_cfg(&c, j, &err), -1);
    ck_assert_msg(strstr(err.msg, "logits_scaling = 0 is out of range"), "%s", err.msg);
    snprintf(j, sizeof j, "%s,\"residual_multiplier\":\"x\"}", plain);
    ck_assert_int_eq(parse_cfg(&c, j, &err), -1);
    ck_assert_msg(strstr(err.msg, "'residual_multiplier' is not a number"), "%s", err.msg);
    // another family leaves them unset (0: not applied)
    ck_assert_msg(parse_cfg(&c, qwen3, &err) == 0, "%s", err.msg);
    ck_assert(c.embedding_multiplier == 0 && c.residual_multiplier == 0 && c.attention_multiplier == 0 &&
              c.logits_scaling == 0);
}
END_TEST

// SmolLM3's layers without RoPE: no_rope_layers (1 = RoPE), else every no_rope_layer_interval-th
// layer (default 4, SmolLM3Config's); tied and rope_theta 2e6 by default; bad lists refused.
START_TEST(test_config_smollm3) {
    const char *base = "{\"model_type\":\"smollm3\",\"hidden_size\":2048,\"intermediate_size\":11008,"
                       "\"num_hidden_layers\":36,\"num_attention_heads\":16,\"num_key_value_heads\":4,"
                       "\"vocab_size\":128256";
    char j[1024];
    ModelConfig c;
    PailErr err = {0};
    snprintf(j, sizeof j, "%s}", base);
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_SMOLLM3);
    ck_assert(c.tie_word_embeddings && c.rope_theta == 2e6);
    for (int l = 0; l < 36; l++) ck_assert_int_eq(model_layer_has_rope(&c, l), (l + 1) % 4 != 0);
    // SmolLM3-3B's shape: 3,075,098,624 parameters (the hub's 3.08B)
    ck_assert_uint_eq(model_config_param_count(&c), 3075098624u);
    snprintf(j, sizeof j, "%s,\"no_rope_layer_interval\":3,\"tie_word_embeddings\":false}", base);
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(!c.tie_word_embeddings && model_layer_has_rope(&c, 0) && !model_layer_has_rope(&c, 2));
    const char *two = "{\"model_type\":\"smollm3\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":4,\"vocab_size\":100";
    snprintf(j, sizeof j, "%s,\"no_rope_layers\":[0,1]}", two);
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(!model_layer_has_rope(&c, 0) && model_layer_has_rope(&c, 1));
    Buf b = {0};
    ModelConfig back;
    ck_assert_int_eq(model_config_to_json(&c, "float32", &b), 0);
    ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    ck_assert(back.type == MODEL_SMOLLM3 && !model_layer_has_rope(&back, 0) && model_layer_has_rope(&back, 1));
    buf_free(&b);
    // other families: every layer rotates
    ck_assert_msg(parse_cfg(&c, qwen3, &err) == 0, "%s", err.msg);
    for (int l = 0; l < c.num_hidden_layers; l++) ck_assert(model_layer_has_rope(&c, l));
    static const struct { const char *patch, *want; } bad[] = {
        {",\"no_rope_layers\":[1]}", "no_rope_layers is not a list of 2 entries"},
        {",\"no_rope_layers\":[1,2]}", "no_rope_layers[1] is not 0 or 1"},
        {",\"no_rope_layer_interval\":0}", "no_rope_layer_interval = 0 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(j, sizeof j, "%s%s", two, bad[i].patch);
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, bad[i].want), "'%s' lacks '%s'", err.msg, bad[i].want);
    }
}
END_TEST

// CohereForAI/c4ai-command-r-v01's config.json (legacy spelling: rope_theta, torch_dtype) and
// c4ai-command-r-plus's as transformers 5 writes it (rope_parameters, dtype): the parallel block,
// LayerNorm (layer_norm_eps), paired RoPE, logit_scale, use_qk_norm's (H, D) / (Hkv, D) norms;
// the parameter counts are transformers' (CohereForCausalLM on the meta device, 2026-12-03).
START_TEST(test_config_cohere) {
    const char *r01 =
        "{\"architectures\":[\"CohereForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
        "\"bos_token_id\":5,\"eos_token_id\":255001,\"hidden_act\":\"silu\",\"hidden_size\":8192,"
        "\"initializer_range\":0.02,\"intermediate_size\":22528,\"layer_norm_eps\":1e-05,\"logit_scale\":0.0625,"
        "\"max_position_embeddings\":8192,\"model_type\":\"cohere\",\"num_attention_heads\":64,"
        "\"num_hidden_layers\":40,\"num_key_value_heads\":64,\"pad_token_id\":0,\"rope_theta\":8000000.0,"
        "\"torch_dtype\":\"float16\",\"use_cache\":true,\"use_qk_norm\":false,\"vocab_size\":256000}";
    const char *rplus =
        "{\"architectures\":[\"CohereForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":5,"
        "\"dtype\":\"bfloat16\",\"eos_token_id\":255001,\"hidden_act\":\"silu\",\"hidden_size\":12288,"
        "\"intermediate_size\":33792,\"layer_norm_eps\":1e-05,\"logit_scale\":0.8333333333333334,"
        "\"max_position_embeddings\":8192,\"model_type\":\"cohere\",\"num_attention_heads\":96,"
        "\"num_hidden_layers\":64,\"num_key_value_heads\":8,\"pad_token_id\":0,"
        "\"rope_parameters\":{\"rope_theta\":75000000.0,\"rope_type\":\"default\"},\"use_qk_norm\":true,"
        "\"vocab_size\":256000}";
    ModelConfig c, back;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, r01, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_COHERE);
    ck_assert(c.parallel_block && c.layer_norm && c.rope_interleaved && !c.has_qk_norm && !c.has_qkv_bias);
    ck_assert(c.logit_scale == 0.0625 && c.rms_norm_eps == 1e-5 && c.rope_theta == 8000000.0 &&
              c.tie_word_embeddings && !strcmp(c.dtype, "float16"));
    ck_assert_uint_eq(model_config_param_count(&c), 34980831232u);  // the hub's 35B
    ModelParamSpec s[PARAM_COUNT];
    model_param_specs(&c, s);
    ck_assert(s[PARAM_ATTN_NORM].present && !s[PARAM_MLP_NORM].present && !s[PARAM_Q_NORM].present &&
              !s[PARAM_LM_HEAD].present);
    ck_assert_str_eq(s[PARAM_ATTN_NORM].name, "input_layernorm.weight");
    ck_assert_msg(parse_cfg(&c, rplus, &err) == 0, "%s", err.msg);
    ck_assert(c.has_qk_norm && c.rope_theta == 75000000.0 && c.num_key_value_heads == 8 &&
              c.logit_scale == 0.8333333333333334 && !strcmp(c.dtype, "bfloat16"));
    ck_assert_uint_eq(model_config_param_count(&c), 103810674688u);  // the hub's 104B
    model_param_specs(&c, s);
    ck_assert(s[PARAM_Q_NORM].present && s[PARAM_Q_NORM].ndim == 2 && s[PARAM_Q_NORM].shape[0] == 96 &&
              s[PARAM_Q_NORM].shape[1] == 128 && s[PARAM_K_NORM].shape[0] == 8 && s[PARAM_K_NORM].numel == 1024);
    Buf b = {0};  // written back: transformers' names (layer_norm_eps), read again alike
    ck_assert_int_eq(model_config_to_json(&c, "bfloat16", &b), 0);
    ck_assert(strstr((char *)b.data, "\"layer_norm_eps\"") && strstr((char *)b.data, "\"use_qk_norm\": true"));
    ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    // config.json's reals carry 12 digits (model_config_to_json): 0.833333333333
    ck_assert(back.type == MODEL_COHERE && back.has_qk_norm && fabs(back.logit_scale - c.logit_scale) < 1e-12 &&
              back.rms_norm_eps == 1e-5 && back.rope_theta == c.rope_theta && back.tie_word_embeddings);
    buf_free(&b);
    // CohereConfig's defaults when absent: logit_scale 0.0625, eps 1e-5, theta 500000, tied
    const char *plain = "{\"model_type\":\"cohere\",\"hidden_size\":64,\"intermediate_size\":128,"
                        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100";
    char j[512];
    snprintf(j, sizeof j, "%s}", plain);
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(c.logit_scale == 0.0625 && c.rms_norm_eps == 1e-5 && c.rope_theta == 500000.0 && c.tie_word_embeddings &&
              !c.has_qk_norm);
    static const struct { const char *patch, *want; } bad[] = {
        {",\"logit_scale\":null}", "logit_scale is null"},
        {",\"logit_scale\":0}", "logit_scale = 0 is out of range"},
        {",\"use_qk_norm\":\"yes\"}", "use_qk_norm is not a boolean"},
        {",\"hidden_act\":\"gelu\"}", "hidden_act = 'gelu'"},
        {",\"layer_norm_eps\":-1}", "layer_norm_eps = -1 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(j, sizeof j, "%s%s", plain, bad[i].patch);
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, bad[i].want), "'%s' lacks '%s'", err.msg, bad[i].want);
    }
    ck_assert_int_eq(parse_cfg(&c, "{\"model_type\":\"gemma\"}", &err), -1);
    ck_assert(strstr(err.msg, "olmo2, phi3, cohere, cohere2, gemma2, gemma3_text dense decoders"));
}
END_TEST

// CohereForAI/c4ai-command-r7b-12-2024's config.json (legacy: sliding_window_pattern 4, rope_theta) and a
// transformers 5 spelling (layer_types, rope_parameters): full_attention layers have no window and no
// RoPE; 8,028,033,024 parameters (transformers' count on the meta device, 2026-12-03).
START_TEST(test_config_cohere2) {
    const char *r7b =
        "{\"architectures\":[\"Cohere2ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
        "\"bos_token_id\":5,\"eos_token_id\":255001,\"hidden_act\":\"silu\",\"hidden_size\":4096,"
        "\"initializer_range\":0.02,\"intermediate_size\":14336,\"layer_norm_eps\":1e-05,\"logit_scale\":0.25,"
        "\"max_position_embeddings\":8192,\"model_type\":\"cohere2\",\"num_attention_heads\":32,"
        "\"num_hidden_layers\":32,\"num_key_value_heads\":8,\"pad_token_id\":0,\"rope_theta\":50000.0,"
        "\"sliding_window\":4096,\"sliding_window_pattern\":4,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
        "\"vocab_size\":256000}";
    ModelConfig c, back;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, r7b, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.type, MODEL_COHERE2);
    ck_assert(c.parallel_block && c.layer_norm && c.rope_interleaved && !c.has_qk_norm && c.logit_scale == 0.25 &&
              c.rope_theta == 50000.0 && c.sliding_window == 4096 && c.tie_word_embeddings);
    for (int l = 0; l < 32; l++) {
        bool full = (l + 1) % 4 == 0;
        ck_assert_msg(model_layer_window(&c, l) == (full ? 0 : 4096) && model_layer_has_rope(&c, l) == !full,
                      "layer %d", l);
    }
    ck_assert_uint_eq(model_config_param_count(&c), 8028033024u);  // the hub's 8B
    Buf b = {0};  // written back with layer_types, read again alike
    ck_assert_int_eq(model_config_to_json(&c, "bfloat16", &b), 0);
    ck_assert(strstr((char *)b.data, "\"layer_types\"") && strstr((char *)b.data, "\"layer_norm_eps\""));
    ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    ck_assert(back.type == MODEL_COHERE2 && back.sliding_window == 4096 && back.logit_scale == 0.25);
    ck_assert(!memcmp(back.full_attn, c.full_attn, sizeof c.full_attn) && !memcmp(back.no_rope, c.no_rope,
                                                                                   sizeof c.no_rope));
    buf_free(&b);
    const char *v5 = "{\"model_type\":\"cohere2\",\"hidden_size\":64,\"intermediate_size\":128,"
                     "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":100,\"sliding_window\":8,"
                     "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},\"dtype\":\"float32\"";
    char j[768];
    snprintf(j, sizeof j, "%s,\"layer_types\":[\"full_attention\",\"sliding_attention\",\"full_attention\"]}", v5);
    ck_assert_msg(parse_cfg(&c, j, &err) == 0, "%s", err.msg);
    ck_assert(model_layer_window(&c, 0) == 0 && model_layer_window(&c, 1) == 8 && model_layer_window(&c, 2) == 0);
    ck_assert(!model_layer_has_rope(&c, 0) && model_layer_has_rope(&c, 1) && !model_layer_has_rope(&c, 2));
    ck_assert(c.rope_theta == 10000.0 && !strcmp(c.dtype, "float32"));
    static const struct { const char *patch, *want; } bad[] = {
        {",\"layer_types\":[\"full_attention\",\"chunked_attention\",\"full_attention\"]}",
         "layer_types[1] = 'chunked_attention'"},
        {",\"layer_types\":[\"full_attention\"]}", "layer_types is not a list of 3 entries"},
        {",\"sliding_window\":null}", "sliding_window = null is not supported for cohere2"},
        {",\"use_qk_norm\":true}", "use_qk_norm = true is not supported for cohere2"},
        {",\"head_dim\":32}", "head_dim = 32: cohere2 uses hidden_size / num_attention_heads"},
        {",\"sliding_window_pattern\":0}", "sliding_window_pattern = 0 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(j, sizeof j, "%s%s", v5, bad[i].patch);
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, bad[i].want), "'%s' lacks '%s'", err.msg, bad[i].want);
    }
    // other families' window stays on every layer
    ck_assert_msg(parse_cfg(&c, qwen3, &err) == 0, "%s", err.msg);
    for (int l = 0; l < c.num_hidden_layers; l++) ck_assert(model_layer_window(&c, l) == c.sliding_window);
}
END_TEST

// Each refusal names the field and the value.
START_TEST(test_config_refusals) {
    static const struct { const char *patch, *want; } cases[] = {
        {"\"model_type\":\"gemma\"", "model_type = 'gemma' is not supported (pail runs llama, qwen2, qwen3, mistral, exaone, smollm3, granite, olmo2"},
        {"\"model_type\":\"deepseek_v2\"", "model_type = 'deepseek_v2'"},
        {"\"num_experts\":8", "num_experts = 8"},
        {"\"num_local_experts\":4", "num_local_experts = 4"},
        {"\"use_sliding_window\":true", "use_sliding_window = true"},
        {"\"layer_types\":[\"full_attention\",\"sliding_attention\"]", "layer_types[1] = 'sliding_attention'"},
        {"\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0}", "rope_scaling.rope_type = 'yarn'"},
        {"\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2.0}", "rope_type = 'dynamic'"},
        {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}", "needs a number 'low_freq_factor'"},
        {"\"hidden_act\":\"gelu\"", "hidden_act = 'gelu'"},
        {"\"mlp_bias\":true", "mlp_bias = true"},
        {"\"num_key_value_heads\":3", "not a multiple of num_key_value_heads 3"},
        {"\"hidden_size\":-5", "hidden_size = -5"},
        {"\"hidden_size\":\"64\"", "'hidden_size' is not an integer"},
        {"\"bos_token_id\":100", "bos_token_id 100 is not below vocab_size 100"},
        {"\"eos_token_id\":[1,\"x\"]", "eos_token_id[1]"},
        {"\"tie_word_embeddings\":1", "tie_word_embeddings is not a boolean"},
    };
    const char *base = "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                       "\"num_attention_heads\":4,\"vocab_size\":100";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char j[1024];
        // later keys are rejected as duplicates only with JSON_REJECT_DUPLICATES (not used for
        // configs), so jansson keeps the last value: the patch wins over base
        bool has_type = strstr(cases[i].patch, "model_type") != NULL;
        snprintf(j, sizeof j, "{%s%s,%s}", has_type ? "" : "\"model_type\":\"llama\",", base, cases[i].patch);
        ModelConfig c;
        PailErr err = {0};
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, cases[i].want) && strstr(err.msg, "config.json"), "case %zu: '%s' lacks '%s'",
                      i, err.msg, cases[i].want);
    }
    ModelConfig c;
    PailErr err = {0};
    ck_assert_int_eq(parse_cfg(&c, "{\"model_type\":\"llama\"}", &err), -1);
    ck_assert(strstr(err.msg, "required field 'hidden_size'"));
    ck_assert_int_eq(parse_cfg(&c, "{\"model_type\":", &err), -1);
    ck_assert(strstr(err.msg, "not valid JSON"));
    ck_assert_int_eq(model_config_load(&c, "/nonexistent/dir", &err), -1);
    ck_assert(strstr(err.msg, "/nonexistent/dir/config.json"));
}
END_TEST

// ---- dtype conversion ----

START_TEST(test_dtype_conversion) {
    // Every half bit pattern against the compiler's _Float16 (an independent implementation).
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 x;
        memcpy(&x, &h, 2);
        float want = (float)x, got = f16_to_f32((uint16_t)h);
        if (isnan(want)) ck_assert(isnan(got));
        else ck_assert_msg(memcmp(&want, &got, 4) == 0, "f16 0x%04x: %a vs %a", h, got, want);
    }
    // f32 -> f16 rounding against the compiler on a sweep of bit patterns (all
    // exponents, mantissas stepping by a prime so ties and carries are hit).
    for (uint64_t u = 0; u < 0x100000000ull; u += 65521) {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, 4);
        _Float16 r = (_Float16)f;
        uint16_t want;
        memcpy(&want, &r, 2);
        uint16_t got = f32_to_f16(f);
        if (isnan(f)) ck_assert((got & 0x7c00) == 0x7c00 && (got & 0x3ff));
        else ck_assert_msg(got == want, "f32 %a: 0x%04x vs 0x%04x", f, got, want);
    }
    // half ties go to even
    ck_assert_uint_eq(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    ck_assert_uint_eq(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    // bf16: bits are the top half; round to nearest even on the dropped 16 bits
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        uint32_t b;
        memcpy(&b, &f, 4);
        ck_assert_uint_eq(b, h << 16);
        if (!isnan(f)) ck_assert_uint_eq(f32_to_bf16(f), h);
    }
    ck_assert_uint_eq(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);              // tie, even stays
    ck_assert_uint_eq(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);          // tie, odd rounds up
    ck_assert_uint_eq(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);   // above the tie
    ck_assert(isnan(bf16_to_f32(f32_to_bf16(NAN))));
    uint8_t raw[6] = {0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f};  // bf16 1, -2, inf little-endian
    float out[3];
    ck_assert_int_eq(safetensors_to_f32(out, raw, ST_DTYPE_BF16, 3), 0);
    ck_assert(out[0] == 1.0f && out[1] == -2.0f && isinf(out[2]));
    ck_assert_int_eq(safetensors_to_f32(out, raw, ST_DTYPE_I8, 3), -1);
}
END_TEST

// ---- safetensors ----

START_TEST(test_safetensors_roundtrip) {
    float f32[6] = {1.5f, -2.25f, 3e-8f, 65504.0f, -0.0f, 1e30f};
    uint16_t f16[4], bf16[4];
    int64_t i64[3] = {1, -1, (int64_t)1 << 40};
    for (int i = 0; i < 4; i++) f16[i] = f32_to_f16(f32[i]), bf16[i] = f32_to_bf16(f32[i]);
    SafeTensorsWriteItem items[] = {
        {"z.f32", ST_DTYPE_F32, 2, {2, 3}, f32},
        {"a.f16", ST_DTYPE_F16, 1, {4}, f16},
        {"m\"quoted\\name", ST_DTYPE_BF16, 2, {2, 2}, bf16},
        {"ints", ST_DTYPE_I64, 1, {3}, i64},
        {"scalar", ST_DTYPE_F32, 0, {0}, f32},
        {"empty", ST_DTYPE_F32, 2, {0, 5}, f32},
    };
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "x\ny"};
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir);
    PailErr err = {0};
    ck_assert_msg(safetensors_write(path, items, 6, mk, mv, 2, &err) == 0, "%s", err.msg);
    SafeTensors st;
    ck_assert_msg(safetensors_open(&st, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.n, 6);
    ck_assert_uint_eq((8 + st.header_len) % 8, 0);  // data section 8-aligned
    ck_assert_str_eq(safetensors_meta(&st, "note"), "x\ny");
    ck_assert_ptr_null(safetensors_meta(&st, "absent"));
    for (int i = 1; i < st.n; i++) ck_assert(strcmp(st.tensors[i - 1].name, st.tensors[i].name) < 0);
    for (int i = 0; i < 6; i++) {
        const SafeTensor *t = safetensors_find(&st, items[i].name);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->dtype, items[i].dtype);
        ck_assert_int_eq(t->ndim, items[i].ndim);
        for (int d = 0; d < t->ndim; d++) ck_assert_int_eq(t->shape[d], items[i].shape[d]);
        ck_assert_int_eq(memcmp(t->data, items[i].data, t->end - t->begin), 0);
    }
    ck_assert_uint_eq(safetensors_find(&st, "scalar")->nelem, 1);
    ck_assert_uint_eq(safetensors_find(&st, "empty")->nelem, 0);
    // conversion to fp32: F16/BF16 round trip of values they represent exactly
    float back[6];
    safetensors_to_f32(back, safetensors_find(&st, "a.f16")->data, ST_DTYPE_F16, 4);
    ck_assert(back[0] == 1.5f && back[1] == -2.25f && back[3] == 65504.0f);
    ck_assert(fabsf(back[2] - 3e-8f) <= 0x1p-25f);  // f16 subnormal: step 2^-24
    safetensors_to_f32(back, safetensors_find(&st, "m\"quoted\\name")->data, ST_DTYPE_BF16, 4);
    ck_assert(back[0] == 1.5f && back[1] == -2.25f && back[3] == 65536.0f);  // 65504 rounds to 2^16 in bf16
    safetensors_to_f32(back, safetensors_find(&st, "z.f32")->data, ST_DTYPE_F32, 6);
    ck_assert_int_eq(memcmp(back, f32, sizeof f32), 0);
    ck_assert_ptr_null(safetensors_find(&st, "nope"));
    safetensors_close(&st);
    // duplicate names refused
    SafeTensorsWriteItem dup[] = {{"a", ST_DTYPE_F32, 1, {1}, f32}, {"a", ST_DTYPE_F32, 1, {1}, f32}};
    ck_assert_int_eq(safetensors_write(path, dup, 2, NULL, NULL, 0, &err), -1);
    ck_assert(strstr(err.msg, "'a' given twice"));
    SafeTensorsWriteItem neg[] = {{"n", ST_DTYPE_F32, 2, {2, -1}, f32}};
    ck_assert_int_eq(safetensors_write(path, neg, 1, NULL, NULL, 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "shape[1] = -1"), "%s", err.msg);
}
END_TEST

// The reference writer's files (validation/model/make_safetensors_corpus.py):
// our writer must produce the same bytes from the same tensors.
START_TEST(test_safetensors_reference_bytes) {
    const char *names[] = {"good-f32-f16.safetensors", "good-empty.safetensors"};
    for (int k = 0; k < 2; k++) {
        char ref[1024], out[512];
        snprintf(ref, sizeof ref, "%s/tests/fuzz/corpus/safetensors/%s", root_dir(), names[k]);
        snprintf(out, sizeof out, "%s/%s", tmpdir, names[k]);
        SafeTensors st;
        PailErr err = {0};
        ck_assert_msg(safetensors_open(&st, ref, &err) == 0, "%s", err.msg);
        SafeTensorsWriteItem items[8];
        for (int i = 0; i < st.n; i++) {
            const SafeTensor *t = &st.tensors[i];
            items[i] = (SafeTensorsWriteItem){t->name, t->dtype, t->ndim, {0}, t->data};
            memcpy(items[i].shape, t->shape, sizeof t->shape);
        }
        ck_assert_int_eq(safetensors_write(out, items, st.n, (const char *const *)st.meta_keys,
                                           (const char *const *)st.meta_vals, st.n_meta, &err), 0);
        Buf a = {0}, b = {0};
        ck_assert_int_eq(fs_read_file(ref, &a, &err), 0);
        ck_assert_int_eq(fs_read_file(out, &b, &err), 0);
        ck_assert_uint_eq(a.len, b.len);
        ck_assert_msg(memcmp(a.data, b.data, a.len) == 0, "%s differs from the reference writer", names[k]);
        buf_free(&a);
        buf_free(&b);
        safetensors_close(&st);
    }
}
END_TEST

// Every bad file of the corpus is refused with the listed message fragment.
START_TEST(test_safetensors_corpus) {
    char dir[512], path[1024], line[512];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/safetensors", root_dir());
    snprintf(path, sizeof path, "%s/EXPECTED", dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s missing (run from the repository root or set PAIL_ROOT)", path);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        *tab = 0;
        snprintf(path, sizeof path, "%s/%s", dir, line);
        SafeTensors st;
        PailErr err = {0};
        int rc = safetensors_open(&st, path, &err);
        ck_assert_msg(rc == -1, "%s was accepted", line);
        ck_assert_msg(strstr(err.msg, tab + 1) && strstr(err.msg, line), "%s: message '%s' lacks '%s'", line,
                      err.msg, tab + 1);
        n++;
    }
    fclose(f);
    ck_assert_int_ge(n, 25);
    const char *good[] = {"good-f32-f16.safetensors", "good-int-scalar-empty.safetensors", "good-empty.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, good[i]);
        SafeTensors st;
        PailErr err = {0};
        ck_assert_msg(safetensors_open(&st, path, &err) == 0, "%s: %s", good[i], err.msg);
        safetensors_close(&st);
    }
}
END_TEST

START_TEST(test_safetensors_limits) {
    // header length over the 100 MB limit, in a sparse file that is large enough
    char path[512];
    snprintf(path, sizeof path, "%s/big.safetensors", tmpdir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    uint8_t hdr[9] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{'};  // 100,000,001
    ck_assert_int_eq(write(fd, hdr, 9), 9);
    ck_assert_int_eq(ftruncate(fd, 100000100), 0);
    close(fd);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&st, path, &err), -1);
    ck_assert_msg(strstr(err.msg, "exceeds the 100000000-byte limit"), "%s", err.msg);
    ck_assert_int_eq(safetensors_open(&st, tmpdir, &err), -1);  // a folder
    ck_assert(strstr(err.msg, "not a regular file"));
    snprintf(path, sizeof path, "%s/absent.safetensors", tmpdir);
    ck_assert_int_eq(safetensors_open(&st, path, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NOT_FOUND);

    // every truncation of a valid file is refused (and nothing reads past the end under ASan)
    float v[5] = {1, 2, 3, 4, 5};
    SafeTensorsWriteItem it[] = {{"a", ST_DTYPE_F32, 1, {2}, v}, {"b", ST_DTYPE_F32, 1, {3}, v + 2}};
    snprintf(path, sizeof path, "%s/ok.safetensors", tmpdir);
    ck_assert_int_eq(safetensors_write(path, it, 2, NULL, NULL, 0, &err), 0);
    Buf b = {0};
    ck_assert_int_eq(fs_read_file(path, &b, &err), 0);
    for (size_t len = 0; len < b.len; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, b.data, len);
        ck_assert_msg(safetensors_parse(&st, copy, len, "trunc", &err) == -1, "prefix %zu accepted", len);
        ck_assert(err.msg[0]);
        free(copy);
    }
    // every single-byte corruption either parses to something consistent or is refused
    for (size_t i = 0; i < b.len; i++) {
        uint8_t *copy = malloc(b.len);
        memcpy(copy, b.data, b.len);
        copy[i] ^= 0x5a;
        if (safetensors_parse(&st, copy, b.len, "flip", &err) == 0) {
            for (int k = 0; k < st.n; k++)
                ck_assert(st.tensors[k].data + (st.tensors[k].end - st.tensors[k].begin) <= copy + b.len);
            safetensors_close(&st);
        }
        free(copy);
    }
    ck_assert_int_eq(safetensors_parse(&st, b.data, b.len, "ok", &err), 0);
    safetensors_close(&st);
    buf_free(&b);
}
END_TEST

// Two shards plus an index; then broken indexes.
START_TEST(test_safetensors_sharded) {
    float v[4] = {1, 2, 3, 4};
    SafeTensorsWriteItem s1[] = {{"x", ST_DTYPE_F32, 1, {2}, v}};
    SafeTensorsWriteItem s2[] = {{"y", ST_DTYPE_F32, 1, {2}, v + 2}, {"z", ST_DTYPE_F32, 1, {1}, v}};
    char p[512];
    PailErr err = {0};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", tmpdir);
    ck_assert_int_eq(safetensors_write(p, s1, 1, NULL, NULL, 0, &err), 0);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", tmpdir);
    ck_assert_int_eq(safetensors_write(p, s2, 2, NULL, NULL, 0, &err), 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", tmpdir);
    const char *idx = "{\"metadata\":{\"total_size\":20},\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                      "\"y\":\"model-00002-of-00002.safetensors\",\"z\":\"model-00002-of-00002.safetensors\"}}";
    ck_assert_int_eq(fs_write_file_atomic(p, idx, strlen(idx), &err), 0);
    SafeTensorsSet set;
    ck_assert_msg(safetensors_set_open(&set, tmpdir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(set.nfiles, 2);
    int fi = -1;
    const SafeTensor *t = safetensors_set_find(&set, "y", &fi);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(fi, 1);
    ck_assert(((const float *)(const void *)t->data)[1] == 4.0f);
    ck_assert_ptr_null(safetensors_set_find(&set, "w", NULL));
    safetensors_set_close(&set);

    static const struct { const char *idx, *want; } bad[] = {
        {"{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\",\"y\":\"model-00002-of-00002.safetensors\"}}",
         "tensor 'z' in shard model-00002-of-00002.safetensors is not in the weight_map"},
        {"{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\",\"y\":\"model-00002-of-00002.safetensors\","
         "\"z\":\"model-00002-of-00002.safetensors\",\"w\":\"model-00001-of-00002.safetensors\"}}",
         "tensor 'w' is mapped to model-00001-of-00002.safetensors but that shard does not hold it"},
        {"{\"weight_map\":{\"x\":\"../etc/passwd\"}}", "not a file name in the model folder"},
        {"{\"weight_map\":{\"x\":\"model-00003-of-00002.safetensors\"}}", "model-00003-of-00002.safetensors"},
        {"{\"weight_map\":{}}", "'weight_map' missing or empty"},
        {"{\"weight_map\":", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(fs_write_file_atomic(p, bad[i].idx, strlen(bad[i].idx), &err), 0);
        ck_assert_int_eq(safetensors_set_open(&set, tmpdir, &err), -1);
        ck_assert_msg(strstr(err.msg, bad[i].want), "case %zu: '%s' lacks '%s'", i, err.msg, bad[i].want);
    }
    unlink(p);
    ck_assert_int_eq(safetensors_set_open(&set, tmpdir, &err), -1);  // no index, no model.safetensors
    ck_assert(strstr(err.msg, "no model.safetensors"));
}
END_TEST

// ---- weights ----

static void gen(const char *sub, const char *shape, ModelType type, SafeTensorsDtype dt, uint64_t seed,
                ModelConfig *cfg, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/%s", tmpdir, sub);
    ck_assert_int_eq(modelgen_shape(cfg, shape, type), 0);
    ModelGenOptions opt = {.dtype = dt, .seed = seed};
    PailErr err = {0};
    ck_assert_msg(modelgen_write(cfg, dir, &opt, &err) == 0, "%s", err.msg);
}

// Mean and standard deviation of n floats.
static void stats(const float *x, size_t n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
    *mean = s / n;
    *sd = sqrt(s2 / n - *mean * *mean);
}

START_TEST(test_weights_tiny) {
    for (int type = MODEL_LLAMA; type < MODEL_TYPE_COUNT; type++) {
        ModelConfig cfg;
        char d32[512], d16[512];
        gen("f32", "tiny", type, ST_DTYPE_F32, 42, &cfg, d32, sizeof d32);
        gen("bf16", "tiny", type, ST_DTYPE_BF16, 42, &cfg, d16, sizeof d16);
        ModelWeights a, b;
        PailErr err = {0};
        ck_assert_msg(model_weights_load(&a, d32, &err) == 0, "%s", err.msg);
        ck_assert_msg(model_weights_load(&b, d16, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(a.cfg.type, type);
        bool gemma = type == MODEL_GEMMA2 || type == MODEL_GEMMA3_TEXT;
        bool oss = type == MODEL_GPT_OSS;  // gpt_oss: q/k/v/o biases, sinks, biased router and experts; window 8
        ck_assert_int_eq(a.cfg.sliding_window, type == MODEL_MISTRAL || type == MODEL_COHERE2 || gemma ? 4096 : oss ? 8 : 0);
        ck_assert_int_eq(a.cfg.hidden_size, cfg.hidden_size);
        ck_assert_int_eq(a.cfg.bos_token_id, 1);
        ck_assert_int_eq(a.cfg.eos_token_ids[0], 2);
        ck_assert_uint_eq(a.num_params, model_config_param_count(&cfg));
        ck_assert(!!a.p.bq == (type == MODEL_QWEN2 || type == MODEL_QWEN2_MOE || oss) && !!a.p.sinks == oss &&
                  !!a.p.router_bias == oss && !!a.p.exp_gate_up_bias == oss && !!a.p.exp_down_bias == oss &&
                  !!a.p.q_norm == (type == MODEL_QWEN3 || type == MODEL_OLMO2 || type == MODEL_GEMMA3_TEXT ||
                                   type == MODEL_QWEN3_MOE || type == MODEL_OLMOE));
        // mixtures of experts: the routed families; the dense MLP only as qwen2_moe's shared expert
        bool moe = type >= MODEL_QWEN3_MOE;
        ck_assert(!!a.p.router == moe && !!a.p.exp_gate_up == moe && !!a.p.exp_down == moe);
        ck_assert(!!a.p.shared_gate == (type == MODEL_QWEN2_MOE));
        ck_assert(!!(a.p.w_gate || a.p.w_gate_up) == (!moe || type == MODEL_QWEN2_MOE));
        ck_assert(!!a.p.pre_ff_norm == gemma && !!a.p.post_ff_norm == gemma);
        // smollm3, cohere, cohere2 and gemma: tied by default; cohere, cohere2: one norm per layer
        ck_assert(!!a.p.bo == oss && (a.p.lm_head != a.p.embed_tokens) ==
                                        (type != MODEL_SMOLLM3 && type != MODEL_COHERE && type != MODEL_COHERE2 && !gemma));
        ck_assert(!!a.p.mlp_norm == (type != MODEL_COHERE && type != MODEL_COHERE2));
        // The bf16 file holds the same draws rounded: loading it equals rounding the f32 load.
        const float *am = model_weights_f32(&a), *bm = model_weights_f32(&b);
        for (size_t i = 0; i < a.num_params; i++)
            ck_assert_msg(bm[i] == bf16_to_f32(f32_to_bf16(am[i])), "param %zu", i);
        // Draws look like N(0, 0.02) and norms like 1 + N(0, 0.02): with >= 8192 values the
        // sample sd is within 5% and the mean within 5 standard errors.
        double m, sd;
        const float *wq = a.p.wq ? a.p.wq : a.p.wqkv;  // phi3: q's rows are qkv_proj's first
        stats(wq, (size_t)cfg.num_hidden_layers * cfg.hidden_size * cfg.hidden_size, &m, &sd);
        ck_assert(fabs(sd - 0.02) < 0.001 && fabs(m) < 5 * 0.02 / sqrt(8192.0));
        stats(a.p.attn_norm, (size_t)cfg.num_hidden_layers * cfg.hidden_size, &m, &sd);
        // gemma scales by 1 + w: its norms are drawn around 0
        ck_assert(fabs(m - (gemma ? 0.0 : 1.0)) < 0.01 && sd > 0.01 && sd < 0.03);
        // Layers differ (each tensor has its own stream).
        ck_assert(wq[0] != wq[(size_t)cfg.hidden_size * cfg.hidden_size]);
        // base_sha256 = sha256 of `sha256sum model.safetensors` output (doc/models.md).
        char fh[65], line[256], want[65], p[600];
        snprintf(p, sizeof p, "%s/model.safetensors", d32);
        ck_assert_int_eq(sha256_file_hex(p, fh, &err), 0);
        int n = snprintf(line, sizeof line, "%s  model.safetensors\n", fh);
        sha256_hex(line, n, want);
        ck_assert_str_eq(a.base_sha256, want);
        ck_assert_str_ne(a.base_sha256, b.base_sha256);
        model_weights_free(&a);
        model_weights_free(&b);
    }
    // tied + same seed: the same draws, and lm_head aliases the embedding
    ModelConfig cfg;
    ck_assert_int_eq(modelgen_shape(&cfg, "tiny", MODEL_QWEN2), 0);
    cfg.tie_word_embeddings = true;
    char d[512];
    snprintf(d, sizeof d, "%s/tied", tmpdir);
    ModelGenOptions opt = {.dtype = ST_DTYPE_F32, .seed = 42};
    PailErr err = {0};
    ck_assert_int_eq(modelgen_write(&cfg, d, &opt, &err), 0);
    ModelWeights w;
    ck_assert_msg(model_weights_load(&w, d, &err) == 0, "%s", err.msg);
    ck_assert(w.cfg.tie_word_embeddings && w.p.lm_head == w.p.embed_tokens);
    ck_assert_uint_eq(w.num_params, model_config_param_count(&cfg));
    SafeTensorsSet set;
    ck_assert_int_eq(safetensors_set_open(&set, d, &err), 0);
    ck_assert_ptr_null(safetensors_set_find(&set, "lm_head.weight", NULL));
    safetensors_set_close(&set);
    model_weights_free(&w);
}
END_TEST

// The bench shape: generated in bf16 (~78 MB), loaded and counted.
START_TEST(test_weights_bench_shape) {
    ModelConfig cfg;
    char d[512];
    gen("bench", "bench", MODEL_LLAMA, ST_DTYPE_BF16, 1, &cfg, d, sizeof d);
    ck_assert_int_eq(cfg.hidden_size, 512);
    ck_assert_int_eq(cfg.num_hidden_layers, 8);
    ck_assert_int_eq(cfg.intermediate_size, 1408);
    ck_assert_int_eq(cfg.vocab_size, 32000);
    ModelWeights w;
    PailErr err = {0};
    ck_assert_msg(model_weights_load(&w, d, &err) == 0, "%s", err.msg);
    // V*C*2 (untied) + L*(2C + C*C + 2*C*128 + C*C + 3*C*F) + C
    size_t want = 2ull * 32000 * 512 + 8ull * (2 * 512 + 512 * 512 + 2 * 512 * 128 + 512 * 512 + 3 * 512 * 1408) + 512;
    ck_assert_uint_eq(w.num_params, want);
    double m, sd;
    stats((const float *)w.p.w_down, (size_t)8 * 512 * 1408, &m, &sd);
    ck_assert(fabs(sd - 0.02) < 0.0005);
    model_weights_free(&w);
    ModelConfig q;
    ck_assert_int_eq(modelgen_shape(&q, "qwen2.5-0.5b", MODEL_QWEN2), 0);
    ck_assert_uint_eq(model_config_param_count(&q), 494032768u);
    ck_assert_int_eq(modelgen_shape(&q, "qwen2.5-0.5b", MODEL_LLAMA), -1);
    ck_assert_int_eq(modelgen_shape(&q, "huge", MODEL_LLAMA), -1);
}
END_TEST

// Rewrites dir/model.safetensors from the loaded tensors with one change.
enum { EDIT_DROP, EDIT_EXTRA, EDIT_RESHAPE, EDIT_DTYPE, EDIT_INV_FREQ, EDIT_LAYER };
static void rewrite(const char *dir, int edit, const char *target) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&st, p, &err), 0);
    SafeTensorsWriteItem *it = calloc(st.n + 1, sizeof *it);
    int n = 0;
    static float junk[64];
    for (int i = 0; i < st.n; i++) {
        const SafeTensor *t = &st.tensors[i];
        if (edit == EDIT_DROP && !strcmp(t->name, target)) continue;
        it[n] = (SafeTensorsWriteItem){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(it[n].shape, t->shape, sizeof t->shape);
        if (!strcmp(t->name, target) && edit == EDIT_RESHAPE) {  // same bytes, transposed shape
            it[n].shape[0] = t->shape[1];
            it[n].shape[1] = t->shape[0];
        }
        if (!strcmp(t->name, target) && edit == EDIT_DTYPE) it[n].dtype = ST_DTYPE_I32;
        n++;
    }
    if (edit == EDIT_EXTRA || edit == EDIT_INV_FREQ || edit == EDIT_LAYER)
        it[n++] = (SafeTensorsWriteItem){target, ST_DTYPE_F32, 1, {8}, junk};
    // the file is mapped: write elsewhere, then replace
    char q[700];
    snprintf(q, sizeof q, "%s.new", p);
    ck_assert_msg(safetensors_write(q, it, n, NULL, NULL, 0, &err) == 0, "%s", err.msg);
    free(it);
    safetensors_close(&st);
    ck_assert_int_eq(rename(q, p), 0);
}

START_TEST(test_weights_errors) {
    static const struct { int edit; const char *target, *want; } cases[] = {
        {EDIT_DROP, "model.layers.1.mlp.up_proj.weight", "tensor 'model.layers.1.mlp.up_proj.weight' is missing"},
        {EDIT_DROP, "model.layers.0.self_attn.k_proj.bias", "tensor 'model.layers.0.self_attn.k_proj.bias' is missing"},
        {EDIT_DROP, "lm_head.weight", "tensor 'lm_head.weight' is missing"},
        {EDIT_EXTRA, "model.layers.0.mlp.experts.0.weight", "unexpected tensor 'model.layers.0.mlp.experts.0.weight'"},
        {EDIT_EXTRA, "vision_tower.weight", "unexpected tensor 'vision_tower.weight'"},
        {EDIT_EXTRA, "model.layers.0.self_attn.o_proj.bias", "has no self_attn.o_proj.bias"},
        {EDIT_EXTRA, "model.layers.0.self_attn.q_norm.weight", "has no self_attn.q_norm.weight"},
        {EDIT_LAYER, "model.layers.2.input_layernorm.weight", "num_hidden_layers = 2"},
        {EDIT_LAYER, "model.layers.01.input_layernorm.weight", "bad layer index"},
        {EDIT_RESHAPE, "model.layers.1.mlp.down_proj.weight", "has shape [128, 64], config.json implies [64, 128]"},
        {EDIT_DTYPE, "model.norm.weight", "'model.norm.weight' has dtype I32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ModelConfig cfg;
        char d[512];
        gen("bad", "tiny", MODEL_QWEN2, ST_DTYPE_F32, 3, &cfg, d, sizeof d);
        rewrite(d, cases[i].edit, cases[i].target);
        ModelWeights w;
        PailErr err = {0};
        ck_assert_msg(model_weights_load(&w, d, &err) == -1, "case %zu accepted", i);
        ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].want);
    }
    // harmless extras are skipped: old rotary_emb.inv_freq buffers
    ModelConfig cfg;
    char d[512];
    gen("inv", "tiny", MODEL_LLAMA, ST_DTYPE_F32, 3, &cfg, d, sizeof d);
    rewrite(d, EDIT_INV_FREQ, "model.layers.0.self_attn.rotary_emb.inv_freq");
    ModelWeights w;
    PailErr err = {0};
    ck_assert_msg(model_weights_load(&w, d, &err) == 0, "%s", err.msg);
    model_weights_free(&w);
    // a config/weights mismatch: config says 3 layers, the file has 2
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", d);
    cfg.num_hidden_layers = 3;
    Buf b = {0};
    ck_assert_int_eq(model_config_to_json(&cfg, "float32", &b), 0);
    ck_assert_int_eq(fs_write_file_atomic(p, b.data, b.len, &err), 0);
    buf_free(&b);
    ck_assert_int_eq(model_weights_load(&w, d, &err), -1);
    ck_assert_msg(strstr(err.msg, "'model.layers.2.input_layernorm.weight' is missing"), "%s", err.msg);
}
END_TEST

// Every element of family id (all layers) of a as fp32, exactly.
static float *family_f32(const ModelWeights *a, ModelParamId id) {
    const ModelParamSpec *sp = &a->specs[id];
    size_t n = sp->numel * (sp->per_layer ? (size_t)a->cfg.num_hidden_layers : 1);
    float *f = malloc(n * sizeof *f);
    ck_assert(f != NULL);
    dtype_to_f32(f, model_weights_tensor(a, id, 0), a->dtype[id], n);
    return f;
}

// The rounding of src (f32) to dt, back to f32.
static float round_to(float x, DType dt) {
    uint16_t h;
    float y;
    dtype_from_f32(&h, &x, dt, 1);
    dtype_to_f32(&y, &h, dt, 1);
    return y;
}

// --dtype: auto holds each matrix as stored and vectors as fp32, the values exact;
// bf16 / f16 / f32 convert (rounding to nearest even once); the bytes halve.
START_TEST(test_weights_dtypes) {
    for (int type = MODEL_QWEN2; type <= MODEL_QWEN3; type++) {  // biases (qwen2), q/k norms (qwen3)
        ModelConfig cfg;
        char d16[512], d32[512];
        gen("dt16", "tiny", type, ST_DTYPE_BF16, 7, &cfg, d16, sizeof d16);
        gen("dt32", "tiny", type, ST_DTYPE_F32, 7, &cfg, d32, sizeof d32);
        ModelWeights a, f, r, h;
        PailErr err = {0};
        ck_assert_msg(model_weights_load_as(&a, d16, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
        ck_assert_msg(model_weights_load_as(&f, d16, DT_F32, &err) == 0, "%s", err.msg);
        ck_assert_msg(model_weights_load_as(&r, d32, DT_BF16, &err) == 0, "%s", err.msg);
        ck_assert_msg(model_weights_load_as(&h, d32, DT_F16, &err) == 0, "%s", err.msg);
        ck_assert_str_eq(a.base_sha256, f.base_sha256);  // the files' hash, whatever the dtype held
        ck_assert_ptr_null(model_weights_f32(&a));
        ck_assert_ptr_nonnull(model_weights_f32(&f));
        char desc[32];
        model_weights_dtype_desc(&a, desc, sizeof desc);
        ck_assert_str_eq(desc, "bf16");
        model_weights_dtype_desc(&f, desc, sizeof desc);
        ck_assert_str_eq(desc, "f32");
        model_weights_dtype_desc(&h, desc, sizeof desc);
        ck_assert_str_eq(desc, "f16");
        // matrices at 2 bytes, vectors at 4: a bit over half the fp32 block
        ck_assert_uint_eq(f.bytes, f.num_params * 4);
        ck_assert_msg(a.bytes < f.bytes * 52 / 100 && a.bytes > f.bytes / 2, "%zu vs %zu", a.bytes, f.bytes);
        size_t probed = 0;
        char pdesc[MODEL_DTYPE_DESC];
        ck_assert_msg(model_weights_probe(d16, MODEL_DTYPE_AUTO, &probed, pdesc, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(probed, a.bytes);  // the memory plan's figure is the block's
        ck_assert_str_eq(pdesc, "bf16");
        for (int id = 0; id < PARAM_COUNT; id++) {
            if (!a.specs[id].present) continue;
            bool mat = model_param_is_matrix((ModelParamId)id);
            ck_assert_int_eq(a.dtype[id], mat ? DT_BF16 : DT_F32);
            ck_assert_int_eq(r.dtype[id], mat ? DT_BF16 : DT_F32);
            ck_assert_int_eq(h.dtype[id], mat ? DT_F16 : DT_F32);
            ck_assert_int_eq(f.dtype[id], DT_F32);
            ck_assert_int_eq((int)((uintptr_t)model_weights_tensor(&a, id, 0) % 64), 0);  // families aligned
            float *av = family_f32(&a, id), *fv = family_f32(&f, id), *rv = family_f32(&r, id),
                  *hv = family_f32(&h, id);
            const ModelParamSpec *sp = &a.specs[id];
            size_t n = sp->numel * (sp->per_layer ? (size_t)cfg.num_hidden_layers : 1);
            // the f32 file's values: rounding them to bf16 gives the bf16 file's (modelgen rounds once)
            ModelWeights g;
            ck_assert_msg(model_weights_load_as(&g, d32, DT_F32, &err) == 0, "%s", err.msg);
            float *gv = family_f32(&g, id);
            for (size_t i = 0; i < n; i++) {
                ck_assert_msg(av[i] == fv[i], "family %d elem %zu: auto %g, f32 %g", id, i, av[i], fv[i]);
                ck_assert_msg(!mat || rv[i] == round_to(gv[i], DT_BF16), "family %d elem %zu: bf16 rounding", id, i);
                ck_assert_msg(mat ? hv[i] == round_to(gv[i], DT_F16) : hv[i] == gv[i], "family %d elem %zu: f16", id,
                              i);
            }
            free(av), free(fv), free(rv), free(hv), free(gv);
            model_weights_free(&g);
        }
        // tied head: the embedding's dtype
        if (cfg.tie_word_embeddings) ck_assert_int_eq(a.dtype[PARAM_LM_HEAD], a.dtype[PARAM_EMBED]);
        // saving the bf16-held weights as bf16 writes the same values (no second rounding)
        char dsave[600];
        snprintf(dsave, sizeof dsave, "%s/saved", tmpdir);
        ModelGenOptions o = {.dtype = ST_DTYPE_BF16};
        ck_assert_msg(model_weights_save(&a, dsave, &o, &err) == 0, "%s", err.msg);
        ModelWeights s2;
        ck_assert_msg(model_weights_load_as(&s2, dsave, DT_F32, &err) == 0, "%s", err.msg);
        const float *s2v = model_weights_f32(&s2), *fv2 = model_weights_f32(&f);
        for (size_t i = 0; i < f.num_params; i++) ck_assert_msg(s2v[i] == fv2[i], "saved param %zu", i);
        model_weights_free(&s2);
        model_weights_free(&a), model_weights_free(&f), model_weights_free(&r), model_weights_free(&h);
    }
    // parse: the four spellings
    int want = 99;
    ck_assert_int_eq(model_dtype_parse("auto", &want), 0);
    ck_assert_int_eq(want, MODEL_DTYPE_AUTO);
    ck_assert_int_eq(model_dtype_parse("bf16", &want), 0);
    ck_assert_int_eq(want, DT_BF16);
    ck_assert_int_eq(model_dtype_parse("f16", &want), 0);
    ck_assert_int_eq(want, DT_F16);
    ck_assert_int_eq(model_dtype_parse("f32", &want), 0);
    ck_assert_int_eq(want, DT_F32);
    // and torch's / transformers' spellings, in any case
    struct { const char *s; int dt; } alias[] = {{"fp32", DT_F32},      {"float32", DT_F32}, {"FLOAT", DT_F32},
                                                 {"BF16", DT_BF16},     {"bfloat16", DT_BF16}, {"fp16", DT_F16},
                                                 {"Float16", DT_F16},   {"half", DT_F16},    {"AUTO", MODEL_DTYPE_AUTO}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++) {
        want = 99;
        ck_assert_int_eq(model_dtype_parse(alias[i].s, &want), 0);
        ck_assert_int_eq(want, alias[i].dt);
    }
    const char *bad[] = {"f8", "fp8", "float64", "", "auto ", " bf16", "bf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) ck_assert_int_eq(model_dtype_parse(bad[i], &want), -1);
}
END_TEST

// Rewrites dir's model.safetensors with the tensors named in to_bf16 stored as
// BF16 (their f32 values rounded), the rest as they are.
static void restore_as_bf16(const char *dir, const char *const *to_bf16, int n16) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&st, p, &err), 0);
    SafeTensorsWriteItem *it = calloc(st.n, sizeof *it);
    uint16_t **bufs = calloc(st.n, sizeof *bufs);
    for (int i = 0; i < st.n; i++) {
        const SafeTensor *t = &st.tensors[i];
        it[i] = (SafeTensorsWriteItem){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(it[i].shape, t->shape, sizeof t->shape);
        for (int k = 0; k < n16; k++)
            if (!strcmp(t->name, to_bf16[k])) {
                ck_assert_int_eq(t->dtype, ST_DTYPE_F32);
                bufs[i] = malloc(t->nelem * 2);
                float *tmp = malloc(t->nelem * 4);
                memcpy(tmp, t->data, t->nelem * 4);
                dtype_from_f32(bufs[i], tmp, DT_BF16, t->nelem);
                free(tmp);
                it[i].dtype = ST_DTYPE_BF16;
                it[i].data = bufs[i];
            }
    }
    char q[700];
    snprintf(q, sizeof q, "%s.new", p);
    ck_assert_msg(safetensors_write(q, it, st.n, NULL, NULL, 0, &err) == 0, "%s", err.msg);
    for (int i = 0; i < st.n; i++) free(bufs[i]);
    free(bufs);
    free(it);
    safetensors_close(&st);
    ck_assert_int_eq(rename(q, p), 0);
}

// A family whose layers mix dtypes is held as f32 (exactly); the others as stored;
// a value beyond f16's range refuses --dtype f16 naming the tensor; full
// fine-tuning refuses non-fp32 weights.
START_TEST(test_weights_dtype_limits) {
    ModelConfig cfg;
    char d[512];
    gen("mix", "tiny", MODEL_LLAMA, ST_DTYPE_F32, 5, &cfg, d, sizeof d);
    const char *const to16[] = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                                "model.layers.1.self_attn.k_proj.weight"};
    restore_as_bf16(d, to16, 3);
    ModelWeights w;
    PailErr err = {0};
    ck_assert_msg(model_weights_load_as(&w, d, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(w.dtype[PARAM_WQ], DT_F32);  // layer 0 bf16, layer 1 f32
    ck_assert_int_eq(w.dtype[PARAM_WK], DT_BF16);
    ck_assert_int_eq(w.dtype[PARAM_WV], DT_F32);
    char desc[32];
    model_weights_dtype_desc(&w, desc, sizeof desc);
    ck_assert_str_eq(desc, "bf16+f32");
    TransformerPlan fp = {.max_tokens = 8, .backward = true, .full = true};
    Transformer *tf = NULL;
    ck_assert_int_eq(transformer_init(&tf, &w, &fp, &err), -1);
    ck_assert_msg(strstr(err.msg, "--dtype f32"), "%s", err.msg);
    model_weights_free(&w);
    // f16 overflow: one weight at 1e6
    char d2[512];
    gen("big", "tiny", MODEL_LLAMA, ST_DTYPE_F32, 5, &cfg, d2, sizeof d2);
    ModelWeights g;
    ck_assert_msg(model_weights_load(&g, d2, &err) == 0, "%s", err.msg);
    ((float *)model_weights_tensor(&g, PARAM_W_UP, 1))[17] = 1e6f;
    ModelGenOptions o = {.dtype = ST_DTYPE_F32};
    ck_assert_msg(model_weights_save(&g, d2, &o, &err) == 0, "%s", err.msg);
    model_weights_free(&g);
    ck_assert_int_eq(model_weights_load_as(&w, d2, DT_F16, &err), -1);
    ck_assert_msg(strstr(err.msg, "'model.layers.1.mlp.up_proj.weight'") && strstr(err.msg, "f16"), "%s", err.msg);
    ck_assert_msg(model_weights_load_as(&w, d2, DT_BF16, &err) == 0, "%s", err.msg);  // bf16 has the range
    model_weights_free(&w);
    ck_assert_int_eq(model_weights_load_as(&w, d2, DT_COUNT, &err), -1);  // not a dtype
}
END_TEST

// config.json written by modelgen parses back to the same config.
START_TEST(test_config_write_roundtrip) {
    ModelConfig c, back;
    ck_assert_int_eq(modelgen_shape(&c, "tiny", MODEL_LLAMA), 0);
    c.rope_scaling = ROPE_SCALING_LLAMA3;
    c.rope_factor = 32, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4;
    c.rope_original_max_position_embeddings = 8192;
    c.rope_theta = 500000;
    c.rms_norm_eps = 1e-5;
    c.has_qkv_bias = c.has_o_bias = true;
    c.eos_token_ids[1] = 3, c.n_eos = 2;
    Buf b = {0};
    ck_assert_int_eq(model_config_to_json(&c, "bfloat16", &b), 0);
    PailErr err = {0};
    ck_assert_msg(model_config_parse(&back, (char *)b.data, b.len, "w", &err) == 0, "%s", err.msg);
    ck_assert_str_eq(back.dtype, "bfloat16");
    ck_assert(back.type == c.type && back.hidden_size == c.hidden_size &&
              back.intermediate_size == c.intermediate_size && back.num_hidden_layers == c.num_hidden_layers &&
              back.num_attention_heads == c.num_attention_heads && back.num_key_value_heads == c.num_key_value_heads &&
              back.head_dim == c.head_dim && back.vocab_size == c.vocab_size &&
              back.max_position_embeddings == c.max_position_embeddings);
    ck_assert(back.rms_norm_eps == c.rms_norm_eps && back.rope_theta == c.rope_theta &&
              back.rope_scaling == c.rope_scaling && back.rope_factor == c.rope_factor &&
              back.rope_low_freq_factor == c.rope_low_freq_factor &&
              back.rope_high_freq_factor == c.rope_high_freq_factor &&
              back.rope_original_max_position_embeddings == c.rope_original_max_position_embeddings);
    ck_assert(back.tie_word_embeddings == c.tie_word_embeddings && back.has_qkv_bias && back.has_o_bias &&
              !back.has_qk_norm && back.bos_token_id == c.bos_token_id && back.n_eos == 2 &&
              back.eos_token_ids[0] == c.eos_token_ids[0] && back.eos_token_ids[1] == 3);
    buf_free(&b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_checked_fixture(core, setup_tmp, teardown_tmp);
    tcase_add_checked_fixture(limits, setup_tmp, teardown_tmp);
    tcase_set_timeout(core, 120);
    tcase_add_test(core, test_config_published);
    tcase_add_test(core, test_config_transformers5);
    tcase_add_test(core, test_config_write_roundtrip);
    tcase_add_test(core, test_config_mistral_window);
    tcase_add_test(core, test_config_phi3);
    tcase_add_test(core, test_config_smollm3);
    tcase_add_test(core, test_config_granite);
    tcase_add_test(core, test_config_olmo2);
    tcase_add_test(core, test_config_cohere);
    tcase_add_test(core, test_config_cohere2);
    tcase_add_test(core, test_config_gemma);
    tcase_add_test(core, test_dtype_conversion);
    tcase_add_test(core, test_safetensors_roundtrip);
    tcase_add_test(core, test_safetensors_reference_bytes);
    tcase_add_test(core, test_safetensors_sharded);
    tcase_add_test(core, test_weights_tiny);
    tcase_add_test(core, test_weights_bench_shape);
    tcase_add_test(core, test_weights_dtypes);
    tcase_add_test(limits, test_config_refusals);
    tcase_add_test(limits, test_safetensors_corpus);
    tcase_add_test(limits, test_safetensors_limits);
    tcase_add_test(limits, test_weights_errors);
    tcase_add_test(limits, test_weights_dtype_limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
