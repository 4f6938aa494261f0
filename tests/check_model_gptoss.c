// Check suite for gpt_oss in src/model (config_moe.c's gpt_oss and YaRN part, weights.c's permuted
// expert parts, modelgen): openai/gpt-oss-20b's config.json (the hub's legacy layout) and transformers
// 5's, GptOssConfig's defaults, every refusal, config.json written and read back; a tiny checkpoint's
// experts loaded transposed and de-interleaved (each row checked against the file's columns), biases,
// sinks, bf16 and q8_0 loads, saved back in transformers' layout bit for bit. transformers loading
// these files is validation/model/check_model_files.py's.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/fsutil.h"
#include "model/config.h"
#include "model/modelgen.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "check_model_moe.h"
#include "check_tmp.h"
#include "quant.h"

static char tmpdir[256];
static void setup_tmp(void) { tmp_make(tmpdir, sizeof tmpdir, "check-model-gptoss"); }
static void teardown_tmp(void) { tmp_remove(tmpdir); }


static bool layer_full(const ModelConfig *c, int l) { return model_layer_window(c, l) == 0; }

// ---- config ----

// openai/gpt-oss-20b's config.json (the hub's legacy layout: rope_scaling, rope_theta, the original
// repository's experts_per_token and initial_context_length), without its quantization_config.
#define GPT_OSS_20B_HEAD                                                                                          \
    "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,\"attention_dropout\":0.0,"               \
    "\"eos_token_id\":200002,\"experts_per_token\":4,\"head_dim\":64,\"hidden_act\":\"silu\",\"hidden_size\":"    \
    "2880,\"initial_context_length\":4096,\"initializer_range\":0.02,\"intermediate_size\":2880,\"layer_types\":" \
    "[\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\","   \
    "\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","       \
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\","    \
    "\"full_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","       \
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\"],"                         \
    "\"max_position_embeddings\":131072,\"model_type\":\"gpt_oss\",\"num_attention_heads\":64,"                   \
    "\"num_experts_per_tok\":4,\"num_hidden_layers\":24,\"num_key_value_heads\":8,\"num_local_experts\":32,"      \
    "\"output_router_logits\":false,\"pad_token_id\":199999,"
#define GPT_OSS_20B_TAIL                                                                                          \
    "\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"              \
    "\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\",\"truncate\":false},\"rope_theta\":150000," \
    "\"router_aux_loss_coef\":0.9,\"sliding_window\":128,\"swiglu_limit\":7.0,\"tie_word_embeddings\":false,"     \
    "\"transformers_version\":\"4.55.0.dev0\",\"use_cache\":true,\"vocab_size\":201088}"
static const char *gpt_oss_20b = GPT_OSS_20B_HEAD GPT_OSS_20B_TAIL;
static const char *gpt_oss_20b_mxfp4 =
    GPT_OSS_20B_HEAD "\"quantization_config\":{\"modules_to_not_convert\":[\"model.layers.*.self_attn\","
                     "\"model.layers.*.mlp.router\",\"model.embed_tokens\",\"lm_head\"],\"quant_method\":\"mxfp4\"}," GPT_OSS_20B_TAIL;

// AutoConfig.for_model('gpt_oss', vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
// num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2)
// .save_pretrained's config.json (transformers 5.24: rope_parameters, dtype)
static const char *gpt_oss_v5 =
    "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,\"attention_dropout\":0.0,\"bos_token_id\":"
    "null,\"dtype\":\"bfloat16\",\"eos_token_id\":null,\"head_dim\":8,\"hidden_act\":\"silu\",\"hidden_size\":32,"
    "\"initializer_range\":0.02,\"intermediate_size\":64,\"layer_types\":[\"sliding_attention\",\"full_attention\"],"
    "\"max_position_embeddings\":131072,\"model_type\":\"gpt_oss\",\"num_attention_heads\":4,\"num_experts_per_tok\":2,"
    "\"num_hidden_layers\":2,\"num_key_value_heads\":2,\"num_local_experts\":4,\"output_router_logits\":false,"
    "\"pad_token_id\":null,\"rms_norm_eps\":1e-05,\"rope_parameters\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":"
    "32.0,\"original_max_position_embeddings\":4096,\"rope_theta\":150000.0,\"rope_type\":\"yarn\",\"truncate\":false},"
    "\"router_aux_loss_coef\":0.001,\"sliding_window\":128,\"swiglu_alpha\":1.702,\"swiglu_limit\":7.0,"
    "\"tie_word_embeddings\":false,\"transformers_version\":\"5.24.0\",\"use_cache\":true,\"vocab_size\":100}";

static void check_yarn_default(const ModelConfig *c) {  // GptOssConfig's and the published rope
    ck_assert(c->rope_scaling == ROPE_SCALING_YARN && c->rope_factor == 32.0 &&
              c->rope_original_max_position_embeddings == 4096 && c->rope_beta_fast == 32.0 &&
              c->rope_beta_slow == 1.0 && !c->rope_truncate && c->rope_attention_factor == 0 && c->rope_theta == 150000.0);
}

START_TEST(test_gptoss_config_published) {
    ModelConfig c;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, gpt_oss_20b, &err) == 0, "%s", err.msg);
    ck_assert(c.type == MODEL_GPT_OSS && model_is_moe(&c));
    ck_assert(c.num_experts == 32 && c.num_experts_per_tok == 4 && c.moe_intermediate_size == 2880 && c.norm_topk_prob);
    ck_assert(c.intermediate_size == 0 && c.dense_intermediate_size == 2880);  // no dense MLP, 2880 written back
    ck_assert(c.attn_sinks && c.moe_bias && c.has_qkv_bias && c.has_o_bias && !c.has_qk_norm);
    ck_assert(c.swiglu_alpha == 1.702 && c.swiglu_limit == 7.0);  // alpha: GptOssConfig's default
    ck_assert(c.head_dim == 64 && c.num_key_value_heads == 8 && c.rms_norm_eps == 1e-5 && c.sliding_window == 128);
    for (int l = 0; l < 24; l++) ck_assert(layer_full(&c, l) == (l % 2 == 1) && model_layer_has_rope(&c, l));
    check_yarn_default(&c);
    ck_assert(!c.tie_word_embeddings && c.n_eos == 1 && c.eos_token_ids[0] == 200002);
    // the total: transformers' GptOssForCausalLM of this config on the meta device, its parameters summed;
    // active: less L (E - K) (3 C Fe + 2 Fe + C), the idle experts with their biases
    ck_assert_uint_eq(model_config_param_count(&c), 20914757184u);
    ck_assert_uint_eq(model_config_active_param_count(&c), 4187440704u);
    // with its MXFP4 quantization_config: refused by name (GGUF import is the way in)
    ck_assert_int_eq(parse_cfg(&c, gpt_oss_20b_mxfp4, &err), -1);
    ck_assert_msg(strstr(err.msg, "quantization_config (quant_method 'mxfp4') is not supported"), "%s", err.msg);

    // transformers 5's spelling
    ck_assert_msg(parse_cfg(&c, gpt_oss_v5, &err) == 0, "%s", err.msg);
    ck_assert(c.num_experts == 4 && c.num_experts_per_tok == 2 && c.moe_intermediate_size == 64 && c.head_dim == 8 &&
              c.num_key_value_heads == 2 && c.hidden_size == 32 && c.bos_token_id == -1);
    check_yarn_default(&c);
    ck_assert(!layer_full(&c, 0) && layer_full(&c, 1) && c.sliding_window == 128);
    ck_assert_str_eq(c.dtype, "bfloat16");
    ck_assert_uint_eq(model_config_param_count(&c), 63600u);  // transformers' count of that model

    // GptOssConfig's defaults where config.c's differ: head_dim 64, Hkv 8, biases on, YaRN, odd layers full
    const char *bare = "{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"intermediate_size\":32,\"num_hidden_layers\":3,"
                       "\"num_attention_heads\":8,\"vocab_size\":100,\"num_experts\":4,\"num_experts_per_tok\":2}";
    ck_assert_msg(parse_cfg(&c, bare, &err) == 0, "%s", err.msg);
    ck_assert(c.head_dim == 64 && c.num_key_value_heads == 8 && c.has_qkv_bias && c.has_o_bias &&
              c.max_position_embeddings == 131072 && c.sliding_window == 128 && c.swiglu_alpha == 1.702);
    ck_assert(!layer_full(&c, 0) && layer_full(&c, 1) && !layer_full(&c, 2));
    check_yarn_default(&c);
}
END_TEST

// YaRN as _compute_yarn_parameters reads it: truncate true when the object omits it (null: false),
// beta_fast / beta_slow `or 32` / `or 1`, factor null = max_position / original, attention_factor kept
// (0: 0.1 ln(factor) + 1; 1 for a factor <= 1), original_max_position_embeddings the object's else
// max_position_embeddings (AutoConfig.from_pretrained of each case gives these rope_parameters);
// rope_type default: none.
START_TEST(test_gptoss_config_yarn) {
    static const struct {
        const char *rope;
        double factor, bf, bs, af;
        int omax;
        bool truncate;
        RopeScalingType type;
    } cases[] = {
        {"\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":8.0,\"original_max_position_embeddings\":1024}", 8, 32,
         1, 0, 1024, true, ROPE_SCALING_YARN},
        {"\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"beta_fast\":16,\"beta_slow\":2,\"attention_factor\":1.25,"
         "\"original_max_position_embeddings\":2048,\"truncate\":null}",
         4, 16, 2, 1.25, 2048, false, ROPE_SCALING_YARN},
        {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":null,\"beta_fast\":0,\"beta_slow\":null,\"truncate\":true,"
         "\"original_max_position_embeddings\":4096}",
         8, 32, 1, 0, 4096, true, ROPE_SCALING_YARN},  // max_position_embeddings 32768 / 4096
        // a top-level original_max_position_embeddings is not GptOssConfig's: max_position_embeddings is used
        {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":1.0},\"original_max_position_embeddings\":512", 1, 32, 1,
         1.0, 32768, true, ROPE_SCALING_YARN},
        {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0,\"mscale\":1.0}", 2, 32, 1, 0, 32768, true,
         ROPE_SCALING_YARN},  // mscale alone: not applied by transformers either
        {"\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}", 0, 0, 0, 0, 0, false,
         ROPE_SCALING_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char j[1024];
        snprintf(j, sizeof j, "{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"intermediate_size\":32,"
                              "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":100,\"num_local_experts\":4,"
                              "\"num_experts_per_tok\":2,\"max_position_embeddings\":32768,%s}",
                 cases[i].rope);
        ModelConfig c;
        PailErr err = {0};
        ck_assert_msg(parse_cfg(&c, j, &err) == 0, "case %zu: %s", i, err.msg);
        ck_assert_msg(c.rope_scaling == cases[i].type, "case %zu", i);
        if (c.rope_scaling == ROPE_SCALING_NONE) {
            ck_assert(c.rope_theta == 10000.0);
            continue;
        }
        ck_assert_msg(c.rope_factor == cases[i].factor && c.rope_beta_fast == cases[i].bf &&
                          c.rope_beta_slow == cases[i].bs && c.rope_attention_factor == cases[i].af &&
                          c.rope_original_max_position_embeddings == cases[i].omax && c.rope_truncate == cases[i].truncate,
                      "case %zu: factor %g beta %g/%g af %g omax %d truncate %d", i, c.rope_factor, c.rope_beta_fast,
                      c.rope_beta_slow, c.rope_attention_factor, c.rope_original_max_position_embeddings, c.rope_truncate);
    }
}
END_TEST

// Each refusal names the field and its value.
START_TEST(test_gptoss_config_refusals) {
    static const struct { const char *type, *patch, *want; } cases[] = {
        {"gpt_oss", "\"quantization_config\":{\"quant_method\":\"mxfp4\"}", "quantization_config (quant_method 'mxfp4')"},
        {"gpt_oss", "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":40,\"mscale\":1.0,\"mscale_all_dim\":0.707}",
         "rope_scaling.mscale = 1 with mscale_all_dim = 0.707 is not supported"},
        {"gpt_oss", "\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4,\"partial_rotary_factor\":0.5}",
         "rope_parameters.partial_rotary_factor is not supported for gpt_oss"},
        {"gpt_oss", "\"rope_scaling\":{\"rope_type\":\"yarn\"}", "rope_scaling.rope_type 'yarn' needs a number 'factor'"},
        {"gpt_oss", "\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}", "rope_scaling.rope_type = 'dynamic'"},
        {"gpt_oss", "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"truncate\":1}", "rope_scaling.truncate is not a boolean"},
        {"gpt_oss", "\"swiglu_limit\":0", "swiglu_limit = 0 is not supported"},
        {"gpt_oss", "\"swiglu_alpha\":-1", "swiglu_alpha = -1 is out of range"},
        {"gpt_oss", "\"layer_types\":[\"sliding_attention\",\"chunked_attention\"]", "layer_types[1] = 'chunked_attention'"},
        {"gpt_oss", "\"layer_types\":[\"full_attention\"]", "layer_types is not a list of 2 entries"},
        {"gpt_oss", "\"sliding_window\":0", "sliding_window = 0 is out of range"},
        {"gpt_oss", "\"num_experts\":8", "num_experts = 8 and num_local_experts = 4 disagree"},
        {"gpt_oss", "\"num_experts_per_tok\":5", "num_experts_per_tok = 5 is more than the 4 experts"},
        // YaRN stays gpt_oss's: the other types refuse it as before
        {"qwen3", "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":32768}",
         "rope_scaling.rope_type = 'yarn' is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char j[1024];
        bool oss = !strcmp(cases[i].type, "gpt_oss");
        snprintf(j, sizeof j, "{\"model_type\":\"%s\",\"hidden_size\":64,\"intermediate_size\":32,"
                              "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100%s,%s}",
                 cases[i].type, oss ? ",\"num_local_experts\":4,\"num_experts_per_tok\":2" : "", cases[i].patch);
        ModelConfig c;
        PailErr err = {0};
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, cases[i].want) && strstr(err.msg, "config.json"), "case %zu: '%s' lacks '%s'",
                      i, err.msg, cases[i].want);
    }
}
END_TEST

// config.json written by pail reads back the same gpt_oss config (layer_types, window, YaRN, SwiGLU).
START_TEST(test_gptoss_config_roundtrip) {
    for (int k = 0; k < 3; k++) {
        ModelConfig c, back;
        ck_assert_int_eq(modelgen_shape(&c, "tiny", MODEL_GPT_OSS), 0);
        c.num_experts = 6, c.num_experts_per_tok = 3, c.swiglu_alpha = 1.5, c.swiglu_limit = 5.0;
        if (k == 1) {  // layers 0 and 1 both full, no window; YaRN of transformers' own defaults
            model_config_gemma_layers(&c, (const unsigned char[]){1, 1}, 2);
            c.sliding_window = 0;
            c.rope_factor = 4, c.rope_beta_fast = 16, c.rope_beta_slow = 2, c.rope_truncate = true;
            c.rope_attention_factor = 1.1, c.rope_original_max_position_embeddings = 2048;
        }
        if (k == 2) c.rope_scaling = ROPE_SCALING_NONE, c.rope_theta = 10000.0;
        Buf b = {0};
        ck_assert_int_eq(model_config_to_json(&c, "bfloat16", &b), 0);
        PailErr err = {0};
        ck_assert_msg(model_config_parse(&back, (const char *)b.data, b.len, "written", &err) == 0, "%s", err.msg);
        ck_assert(back.type == MODEL_GPT_OSS && back.num_experts == 6 && back.num_experts_per_tok == 3 &&
                  back.moe_intermediate_size == c.moe_intermediate_size && back.norm_topk_prob &&
                  back.intermediate_size == 0 && back.head_dim == c.head_dim &&
                  back.num_key_value_heads == c.num_key_value_heads && back.has_qkv_bias && back.has_o_bias &&
                  back.attn_sinks && back.moe_bias && back.swiglu_alpha == 1.5 && back.swiglu_limit == 5.0 &&
                  back.sliding_window == c.sliding_window && back.rope_theta == c.rope_theta);
        for (int l = 0; l < 2; l++) ck_assert(layer_full(&back, l) == layer_full(&c, l));
        ck_assert(back.rope_scaling == c.rope_scaling);
        if (c.rope_scaling == ROPE_SCALING_YARN)
            ck_assert(back.rope_factor == c.rope_factor && back.rope_beta_fast == c.rope_beta_fast &&
                      back.rope_beta_slow == c.rope_beta_slow && back.rope_truncate == c.rope_truncate &&
                      back.rope_attention_factor == c.rope_attention_factor &&
                      back.rope_original_max_position_embeddings == c.rope_original_max_position_embeddings);
        ck_assert_uint_eq(model_config_param_count(&back), model_config_param_count(&c));
        ck_assert(strstr((const char *)b.data, "\"num_local_experts\": 6"));
        buf_free(&b);
    }
}
END_TEST

// ---- weights ----

// Every loaded expert row against the file's columns, written out index by index: gate row i of expert
// e is gate_up_proj[e][:, 2i], up row i is [e][:, 2i + 1], down row c is down_proj[e][:, c]; the gate_up
// bias de-interleaved alike; down bias, router bias and sinks as stored.
static void check_layout(const ModelWeights *w, const char *dir) {
    const ModelConfig *c = &w->cfg;
    size_t E = c->num_experts, Fe = c->moe_intermediate_size, C = c->hidden_size, H = c->num_attention_heads;
    char p[600], nm[256];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&st, p, &err), 0);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const float *gu = model_weights_tensor(w, PARAM_EXP_GATE_UP, l), *dn = model_weights_tensor(w, PARAM_EXP_DOWN, l);
        const float *gub = model_weights_tensor(w, PARAM_EXP_GATE_UP_BIAS, l);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.gate_up_proj", l);
        float *f = file_f32(&st, nm, E * C * 2 * Fe);  // (E, C, 2Fe)
        for (size_t e = 0; e < E; e++)
            for (size_t i = 0; i < Fe; i++)
                for (size_t k = 0; k < C; k++) {
                    ck_assert(gu[(e * 2 * Fe + i) * C + k] == f[(e * C + k) * 2 * Fe + 2 * i]);
                    ck_assert(gu[(e * 2 * Fe + Fe + i) * C + k] == f[(e * C + k) * 2 * Fe + 2 * i + 1]);
                }
        free(f);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.down_proj", l);
        f = file_f32(&st, nm, E * Fe * C);  // (E, Fe, C)
        for (size_t e = 0; e < E; e++)
            for (size_t r = 0; r < C; r++)
                for (size_t k = 0; k < Fe; k++) ck_assert(dn[(e * C + r) * Fe + k] == f[(e * Fe + k) * C + r]);
        free(f);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
        f = file_f32(&st, nm, E * 2 * Fe);  // (E, 2Fe)
        for (size_t e = 0; e < E; e++)
            for (size_t i = 0; i < Fe; i++)
                ck_assert(gub[e * 2 * Fe + i] == f[e * 2 * Fe + 2 * i] &&
                          gub[e * 2 * Fe + Fe + i] == f[e * 2 * Fe + 2 * i + 1]);
        free(f);
        struct {
            ModelParamId id;
            const char *leaf;
            size_t n;
        } vec[] = {
            {PARAM_EXP_DOWN_BIAS, "mlp.experts.down_proj_bias", E * C},
            {PARAM_ROUTER_BIAS, "mlp.router.bias", E},
            {PARAM_SINKS, "self_attn.sinks", H},
            {PARAM_ROUTER, "mlp.router.weight", E * C},
        };
        for (int v = 0; v < 4; v++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, vec[v].leaf);
            f = file_f32(&st, nm, vec[v].n);
            ck_assert_msg(!memcmp(f, model_weights_tensor(w, vec[v].id, l), vec[v].n * sizeof *f), "%s", nm);
            for (size_t k = 0; k < vec[v].n; k++) ck_assert(f[k] != 0);  // random draws: biases and sinks too
            free(f);
        }
    }
    safetensors_close(&st);
}

// Two checkpoints' tensors equal byte for byte (the same names, dtypes, shapes and values).
static void same_tensors(const char *d1, const char *d2) {
    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/model.safetensors", d2);
    SafeTensors a, b;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&a, p1, &err), 0);
    ck_assert_int_eq(safetensors_open(&b, p2, &err), 0);
    ck_assert_int_eq(a.n, b.n);
    for (int i = 0; i < a.n; i++) {
        const SafeTensor *x = &a.tensors[i], *y = safetensors_find(&b, x->name);
        ck_assert_msg(y != NULL, "%s missing", x->name);
        ck_assert(x->dtype == y->dtype && x->ndim == y->ndim && x->nelem == y->nelem);
        for (int d = 0; d < x->ndim; d++) ck_assert(x->shape[d] == y->shape[d]);
        ck_assert_msg(!memcmp(x->data, y->data, x->end - x->begin), "%s differs", x->name);
    }
    safetensors_close(&a);
    safetensors_close(&b);
}

START_TEST(test_gptoss_weights_tiny) {
    ModelConfig cfg;
    char d32[512], d16[512], out[600];
    tiny_gen(tmpdir, "f32", MODEL_GPT_OSS, ST_DTYPE_F32, &cfg, d32, sizeof d32);
    tiny_gen(tmpdir, "bf16", MODEL_GPT_OSS, ST_DTYPE_BF16, &cfg, d16, sizeof d16);
    ModelWeights a, b, q;
    PailErr err = {0};
    ck_assert_msg(model_weights_load(&a, d32, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(a.num_params, model_config_param_count(&cfg));
    ck_assert_uint_eq(a.num_params, model_params_count(&cfg));
    check_layout(&a, d32);
    // saved back (f32): transformers' layout, every tensor byte-identical to the file it came from
    snprintf(out, sizeof out, "%s/saved-f32", tmpdir);
    ModelGenOptions o32 = {.dtype = ST_DTYPE_F32};
    ck_assert_msg(model_weights_save(&a, out, &o32, &err) == 0, "%s", err.msg);
    same_tensors(d32, out);
    // bf16 as stored: the f32 draws rounded, in the family's rows; saved back bf16 byte-identical
    ck_assert_msg(model_weights_load_as(&b, d16, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.dtype[PARAM_EXP_GATE_UP], DT_BF16);
    size_t n = (size_t)cfg.num_experts * 2 * cfg.moe_intermediate_size * cfg.hidden_size;
    const float *af = model_weights_tensor(&a, PARAM_EXP_GATE_UP, 1);
    const uint16_t *bf = model_weights_tensor(&b, PARAM_EXP_GATE_UP, 1);
    for (size_t k = 0; k < n; k++) ck_assert(bf[k] == f32_to_bf16(af[k]));
    snprintf(out, sizeof out, "%s/saved-bf16", tmpdir);
    ModelGenOptions o16 = {.dtype = ST_DTYPE_BF16};
    ck_assert_msg(model_weights_save(&b, out, &o16, &err) == 0, "%s", err.msg);
    same_tensors(d16, out);
    // --dtype f16: permuted and converted, the same values as converting the f32 rows
    ModelWeights h;
    ck_assert_msg(model_weights_load_as(&h, d32, DT_F16, &err) == 0, "%s", err.msg);
    const uint16_t *hf = model_weights_tensor(&h, PARAM_EXP_DOWN, 0);
    const float *ad = model_weights_tensor(&a, PARAM_EXP_DOWN, 0);
    for (size_t k = 0; k < (size_t)cfg.num_experts * cfg.hidden_size * cfg.moe_intermediate_size; k++)
        ck_assert(hf[k] == f32_to_f16(ad[k]));
    model_weights_free(&h);
    // --quantize q8_0: the experts' rows quantized from the permuted rows; the router stays as stored
    ck_assert_msg(model_weights_load_as(&q, d32, DT_Q8_0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(model_weights_dtype(&q, PARAM_EXP_GATE_UP, 1), DT_Q8_0);
    ck_assert_int_eq(model_weights_dtype(&q, PARAM_EXP_DOWN, 1), DT_Q8_0);
    ck_assert_int_eq(model_weights_dtype(&q, PARAM_ROUTER, 1), DT_F32);
    size_t C = cfg.hidden_size, rb = dtype_row_bytes(DT_Q8_0, C);
    char *row = malloc(rb);
    const char *qg = model_weights_tensor(&q, PARAM_EXP_GATE_UP, 1);
    for (size_t r = 0; r < n / C; r++) {
        quant_quantize(row, af + r * C, DT_Q8_0, C);
        ck_assert_msg(!memcmp(row, qg + r * rb, rb), "exp_gate_up row %zu", r);
    }
    free(row);
    // saved: the quantized experts dequantized into transformers' layout (floats), loaded back equal
    snprintf(out, sizeof out, "%s/saved-q8", tmpdir);
    ck_assert_msg(model_weights_save(&q, out, &o32, &err) == 0, "%s", err.msg);
    ModelWeights q2;
    ck_assert_msg(model_weights_load_as(&q2, out, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(model_weights_dtype(&q2, PARAM_EXP_GATE_UP, 1), DT_F32);
    float *deq = malloc(n * sizeof *deq);
    dtype_to_f32(deq, qg, DT_Q8_0, n);
    ck_assert(!memcmp(deq, model_weights_tensor(&q2, PARAM_EXP_GATE_UP, 1), n * sizeof *deq));
    free(deq);
    model_weights_free(&q2);
    model_weights_free(&q);
    model_weights_free(&a);
    model_weights_free(&b);
}
END_TEST

// Writes dir's model.safetensors into out (with its config.json), `drop` left out, `swap`'s two last
// dims exchanged (its data as it is), `rename` written as `to`.
static void rewrite(const char *dir, const char *out, const char *drop, const char *swap, const char *rename,
                    const char *to) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&st, p, &err), 0);
    SafeTensorsWriteItem *it = calloc(st.n, sizeof *it);
    int n = 0;
    for (int i = 0; i < st.n; i++) {
        const SafeTensor *t = &st.tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        it[n] = (SafeTensorsWriteItem){rename && !strcmp(t->name, rename) ? to : t->name, t->dtype, t->ndim, {0}, t->data};
        for (int d = 0; d < t->ndim; d++) it[n].shape[d] = t->shape[d];
        if (swap && !strcmp(t->name, swap)) {
            it[n].shape[t->ndim - 1] = t->shape[t->ndim - 2];
            it[n].shape[t->ndim - 2] = t->shape[t->ndim - 1];
        }
        n++;
    }
    ck_assert_int_eq(fs_mkdirs(out, &err), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    ck_assert_msg(safetensors_write(p, it, n, mk, mv, 1, &err) == 0, "%s", err.msg);
    Buf b = {0};
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_int_eq(fs_read_file(p, &b, &err), 0);
    snprintf(p, sizeof p, "%s/config.json", out);
    ck_assert_int_eq(fs_write_file_atomic(p, b.data, b.len, &err), 0);
    buf_free(&b);
    free(it);
    safetensors_close(&st);
}

// A missing or misshapen gpt_oss tensor is refused with its name, shapes and the file.
START_TEST(test_gptoss_weights_errors) {
    static const struct { const char *drop, *swap, *rename, *to, *want; } cases[] = {
        {"model.layers.1.self_attn.sinks", NULL, NULL, NULL, "tensor 'model.layers.1.self_attn.sinks' is missing"},
        {"model.layers.0.mlp.router.bias", NULL, NULL, NULL, "tensor 'model.layers.0.mlp.router.bias' is missing"},
        {"model.layers.0.mlp.experts.down_proj_bias", NULL, NULL, NULL,
         "tensor 'model.layers.0.mlp.experts.down_proj_bias' is missing"},
        // down_proj as the other types hold it, (E, C, Fe): refused, not read transposed
        {NULL, "model.layers.1.mlp.experts.down_proj", NULL, NULL,
         "tensor 'model.layers.1.mlp.experts.down_proj' has shape [4, 64, 32], config.json implies [4, 32, 64]"},
        {NULL, NULL, "model.layers.0.mlp.router.weight", "model.layers.0.mlp.gate.weight",
         "unexpected tensor 'model.layers.0.mlp.gate.weight'"},
        {NULL, NULL, "model.layers.0.mlp.experts.down_proj", "model.layers.0.mlp.experts.0.down_proj.weight",
         "unexpected tensor 'model.layers.0.mlp.experts.0.down_proj.weight'"},
    };
    ModelConfig cfg;
    char d[512];
    tiny_gen(tmpdir, "src", MODEL_GPT_OSS, ST_DTYPE_F32, &cfg, d, sizeof d);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[600];
        snprintf(out, sizeof out, "%s/bad-%zu", tmpdir, i);
        rewrite(d, out, cases[i].drop, cases[i].swap, cases[i].rename, cases[i].to);
        ModelWeights w;
        PailErr err = {0};
        ck_assert_int_eq(model_weights_load(&w, out, &err), -1);
        ck_assert_msg(strstr(err.msg, cases[i].want) && strstr(err.msg, out), "case %zu: '%s' lacks '%s'", i,
                      err.msg, cases[i].want);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_gptoss");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_checked_fixture(core, setup_tmp, teardown_tmp);
    tcase_add_checked_fixture(limits, setup_tmp, teardown_tmp);
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_gptoss_config_published);
    tcase_add_test(core, test_gptoss_config_yarn);
    tcase_add_test(core, test_gptoss_config_roundtrip);
    tcase_add_test(core, test_gptoss_weights_tiny);
    tcase_add_test(limits, test_gptoss_config_refusals);
    tcase_add_test(limits, test_gptoss_weights_errors);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
