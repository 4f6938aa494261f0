// Check suite for the mixture-of-experts models in src/model (config_moe.c, weights.c's expert
// parts, modelgen): config.json of qwen3_moe, qwen2_moe, olmoe, granitemoe and mixtral in the hub's
// legacy layout and transformers 5's, every refusal, config.json written and read back, and tiny
// random checkpoints loaded with every expert's rows equal to its file tensors (per expert, or
// granitemoe's fused), at f32, bf16 and q8_0, saved back, and refused when an expert is missing or
// misshapen. transformers loading these files is tests/integration/test_model_moe.sh's.
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
static void setup_tmp(void) { tmp_make(tmpdir, sizeof tmpdir, "check-model-moe"); }
static void teardown_tmp(void) { tmp_remove(tmpdir); }


static const ModelType moe_types[] = {MODEL_QWEN3_MOE, MODEL_QWEN2_MOE, MODEL_OLMOE, MODEL_GRANITEMOE, MODEL_MIXTRAL};
#define NMOE 5

// ---- config ----

// The fields of Qwen/Qwen3-30B-A3B's config.json (the hub's legacy layout: rope_theta, torch_dtype).
static const char *qwen3_30b =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"decoder_sparse_step\":1,\"eos_token_id\":151645,\"head_dim\":128,"
    "\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":6144,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":48,\"mlp_only_layers\":[],\"model_type\":\"qwen3_moe\","
    "\"moe_intermediate_size\":768,\"norm_topk_prob\":true,\"num_attention_heads\":32,\"num_experts\":128,"
    "\"num_experts_per_tok\":8,\"num_hidden_layers\":48,\"num_key_value_heads\":4,\"output_router_logits\":false,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":1000000.0,\"router_aux_loss_coef\":0.001,"
    "\"sliding_window\":null,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";
// Qwen/Qwen1.5-MoE-A2.7B's: a shared expert of 5632 under its sigmoid gate.
static const char *qwen15_moe =
    "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"decoder_sparse_step\":1,\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":2048,"
    "\"intermediate_size\":5632,\"max_position_embeddings\":8192,\"max_window_layers\":21,\"model_type\":\"qwen2_moe\","
    "\"moe_intermediate_size\":1408,\"norm_topk_prob\":false,\"num_attention_heads\":16,\"num_experts\":60,"
    "\"num_experts_per_tok\":4,\"num_hidden_layers\":24,\"num_key_value_heads\":16,\"rms_norm_eps\":1e-06,"
    "\"rope_theta\":1000000.0,\"shared_expert_intermediate_size\":5632,\"sliding_window\":32768,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"use_sliding_window\":false,\"vocab_size\":151936}";
// allenai/OLMoE-1B-7B-0924's.
static const char *olmoe_1b7b =
    "{\"architectures\":[\"OlmoeForCausalLM\"],\"attention_bias\":false,\"clip_qkv\":null,\"eos_token_id\":50279,"
    "\"hidden_act\":\"silu\",\"hidden_size\":2048,\"intermediate_size\":1024,\"max_position_embeddings\":4096,"
    "\"model_type\":\"olmoe\",\"norm_topk_prob\":false,\"num_attention_heads\":16,\"num_experts\":64,"
    "\"num_experts_per_tok\":8,\"num_hidden_layers\":16,\"num_key_value_heads\":16,\"pad_token_id\":1,"
    "\"rms_norm_eps\":1e-05,\"rope_scaling\":null,\"rope_theta\":10000.0,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\",\"vocab_size\":50304}";
// mistralai/Mixtral-8x7B-v0.1's.
static const char *mixtral_8x7b =
    "{\"architectures\":[\"MixtralForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":1,\"eos_token_id\":2,"
    "\"hidden_act\":\"silu\",\"hidden_size\":4096,\"intermediate_size\":14336,\"max_position_embeddings\":32768,"
    "\"model_type\":\"mixtral\",\"num_attention_heads\":32,\"num_experts_per_tok\":2,\"num_hidden_layers\":32,"
    "\"num_key_value_heads\":8,\"num_local_experts\":8,\"output_router_logits\":false,\"rms_norm_eps\":1e-05,"
    "\"rope_theta\":1000000.0,\"router_aux_loss_coef\":0.02,\"sliding_window\":null,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\",\"vocab_size\":32000}";
// ibm-granite/granite-3.1-1b-a400m-base's: the fused experts, granite's multipliers.
static const char *granite_1b =
    "{\"architectures\":[\"GraniteMoeForCausalLM\"],\"attention_bias\":false,\"attention_multiplier\":0.015625,"
    "\"bos_token_id\":0,\"embedding_multiplier\":12.0,\"eos_token_id\":0,\"hidden_act\":\"silu\",\"hidden_size\":1024,"
    "\"intermediate_size\":512,\"logits_scaling\":6.0,\"max_position_embeddings\":131072,\"model_type\":\"granitemoe\","
    "\"num_attention_heads\":16,\"num_experts_per_tok\":8,\"num_hidden_layers\":24,\"num_key_value_heads\":8,"
    "\"num_local_experts\":32,\"residual_multiplier\":0.22,\"rms_norm_eps\":1e-06,\"rope_theta\":1500000.0,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"vocab_size\":49155}";
// What transformers 5.24's save_pretrained writes for qwen3_moe (rope_parameters, dtype, and
// num_local_experts: Qwen3MoeConfig's attribute_map spelling).
static const char *qwen3_moe_v5 =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":null,\"decoder_sparse_step\":1,\"dtype\":\"float32\",\"eos_token_id\":null,\"head_dim\":8,"
    "\"hidden_act\":\"silu\",\"hidden_size\":32,\"initializer_range\":0.02,\"intermediate_size\":40,"
    "\"max_position_embeddings\":32768,\"mlp_only_layers\":[],\"model_type\":\"qwen3_moe\","
    "\"moe_intermediate_size\":16,\"norm_topk_prob\":false,\"num_attention_heads\":4,\"num_experts_per_tok\":2,"
    "\"num_hidden_layers\":2,\"num_key_value_heads\":2,\"num_local_experts\":4,\"output_router_logits\":false,"
    "\"pad_token_id\":null,\"rms_norm_eps\":1e-06,\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":"
    "\"default\"},\"router_aux_loss_coef\":0.001,\"sliding_window\":null,\"tie_word_embeddings\":false,"
    "\"transformers_version\":\"5.24.0\",\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":100}";

START_TEST(test_moe_config_published) {
    ModelConfig c;
    PailErr err = {0};
    ck_assert_msg(parse_cfg(&c, qwen3_30b, &err) == 0, "%s", err.msg);
    ck_assert(c.type == MODEL_QWEN3_MOE && model_is_moe(&c));
    ck_assert(c.num_experts == 128 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 768 && c.norm_topk_prob);
    ck_assert(c.intermediate_size == 0 && c.dense_intermediate_size == 6144);  // no dense MLP, 6144 written back
    ck_assert(c.has_qk_norm && !c.qk_norm_whole && !c.has_qkv_bias && c.head_dim == 128 && c.rope_theta == 1e6);
    ck_assert_str_eq(c.dtype, "bfloat16");
    // the totals: transformers' model of each config built on the meta device, its parameters summed
    // (tied ones once); active: less L (E - K) 3 C Fe
    ck_assert_uint_eq(model_config_param_count(&c), 30532122624u);  // "30.5B, 3.3B activated"
    ck_assert_uint_eq(model_config_active_param_count(&c), 3353032704u);

    ck_assert_msg(parse_cfg(&c, qwen15_moe, &err) == 0, "%s", err.msg);
    ck_assert(c.type == MODEL_QWEN2_MOE && c.num_experts == 60 && c.num_experts_per_tok == 4);
    ck_assert(c.moe_intermediate_size == 1408 && !c.norm_topk_prob);
    ck_assert(c.intermediate_size == 5632 && c.dense_intermediate_size == 5632);  // the shared expert
    ck_assert(c.has_qkv_bias && !c.has_o_bias && !c.has_qk_norm && c.sliding_window == 0);
    ck_assert_uint_eq(model_config_param_count(&c), 14315784192u);
    ck_assert_uint_eq(model_config_active_param_count(&c), 2689173504u);  // "A2.7B"

    ck_assert_msg(parse_cfg(&c, olmoe_1b7b, &err) == 0, "%s", err.msg);
    ck_assert(c.type == MODEL_OLMOE && c.num_experts == 64 && c.num_experts_per_tok == 8);
    ck_assert(c.moe_intermediate_size == 1024 && c.intermediate_size == 0 && !c.norm_topk_prob);
    ck_assert(c.has_qk_norm && c.qk_norm_whole && !c.post_norm && c.rms_norm_eps == 1e-5);
    ck_assert_uint_eq(model_config_param_count(&c), 6919161856u);  // OLMoE-1B-7B: 6.9B total
    ck_assert_uint_eq(model_config_active_param_count(&c), 1282017280u);

    ck_assert_msg(parse_cfg(&c, mixtral_8x7b, &err) == 0, "%s", err.msg);
    ck_assert(c.type == MODEL_MIXTRAL && c.num_experts == 8 && c.num_experts_per_tok == 2);
    ck_assert(c.moe_intermediate_size == 14336 && c.intermediate_size == 0 && c.norm_topk_prob);
    ck_assert(c.sliding_window == 0 && !c.has_qkv_bias && !c.has_o_bias);
    ck_assert_uint_eq(model_config_param_count(&c), 46702792704u);         // Mixtral 8x7B: 46.7B total
    ck_assert_uint_eq(model_config_active_param_count(&c), 12879925248u);  // 12.9B active

    ck_assert_msg(parse_cfg(&c, granite_1b, &err) == 0, "%s", err.msg);
    ck_assert(c.type == MODEL_GRANITEMOE && c.num_experts == 32 && c.num_experts_per_tok == 8);
    ck_assert(c.moe_intermediate_size == 512 && c.intermediate_size == 0 && c.norm_topk_prob);
    ck_assert(c.embedding_multiplier == 12.0 && c.residual_multiplier == 0.22 &&
              c.attention_multiplier == 0.015625 && c.logits_scaling == 6.0 && c.tie_word_embeddings);
    ck_assert_uint_eq(model_config_param_count(&c), 1334628352u);
    ck_assert_uint_eq(model_config_active_param_count(&c), 428658688u);  // "1B-A400M"
    // init-model's granite-3.1-1b-a400m is this config
    ModelConfig g;
    ck_assert_int_eq(modelgen_shape(&g, "granite-3.1-1b-a400m", MODEL_GRANITEMOE), 0);
    ck_assert_uint_eq(model_config_param_count(&g), model_config_param_count(&c));
    ck_assert(g.rope_theta == c.rope_theta && g.attention_multiplier == c.attention_multiplier &&
              g.max_position_embeddings == c.max_position_embeddings && g.bos_token_id == 0);
    ck_assert_int_eq(modelgen_shape(&g, "granite-3.1-1b-a400m", MODEL_MIXTRAL), -1);

    // transformers 5's spelling: rope_parameters, dtype, num_local_experts for qwen3_moe
    ck_assert_msg(parse_cfg(&c, qwen3_moe_v5, &err) == 0, "%s", err.msg);
    ck_assert(c.num_experts == 4 && c.num_experts_per_tok == 2 && c.moe_intermediate_size == 16 &&
              c.dense_intermediate_size == 40 && c.rope_theta == 10000.0 && c.bos_token_id == -1);
    ck_assert_str_eq(c.dtype, "float32");
}
END_TEST

// Each refusal names the field and its value (or what it means).
START_TEST(test_moe_config_refusals) {
    static const struct { const char *type, *patch, *want; } cases[] = {
        {"qwen3_moe", "\"mlp_only_layers\":[1]", "mlp_only_layers is not empty"},
        {"qwen2_moe", "\"mlp_only_layers\":[0,1]", "mlp_only_layers is not empty"},
        {"qwen3_moe", "\"decoder_sparse_step\":2", "decoder_sparse_step = 2"},
        {"qwen2_moe", "\"use_sliding_window\":true", "use_sliding_window = true"},
        {"qwen3_moe", "\"use_sliding_window\":true", "use_sliding_window = true"},
        {"qwen2_moe", "\"layer_types\":[\"sliding_attention\",\"full_attention\"]", "layer_types[0] = 'sliding_attention'"},
        {"olmoe", "\"clip_qkv\":8.0", "clip_qkv = 8 is not supported"},
        {"olmoe", "\"head_dim\":32", "head_dim = 32: olmoe's q_norm"},
        {"qwen3_moe", "\"num_experts\":0", "num_experts = 0 is not supported"},
        {"mixtral", "\"num_local_experts\":513", "num_local_experts = 513 is not supported (pail runs 1 to 512"},
        {"olmoe", "\"num_experts_per_tok\":5", "num_experts_per_tok = 5 is more than the 4 experts"},
        {"qwen3_moe", "\"num_local_experts\":8", "num_experts = 4 and num_local_experts = 8 disagree"},
        {"mixtral", "\"hidden_act\":\"gelu\"", "hidden_act = 'gelu'"},
        {"granitemoe", "\"residual_multiplier\":0", "residual_multiplier = 0 is out of range"},
        {"qwen2_moe", "\"shared_expert_intermediate_size\":0", "shared_expert_intermediate_size = 0 is out of range"},
        {"qwen3_moe", "\"norm_topk_prob\":1", "norm_topk_prob is not a boolean"},
        {"mixtral", "\"sliding_window\":0", "sliding_window = 0 is out of range"},
        {"llama", "\"moe_intermediate_size\":8", "num_experts = 4: mixture-of-experts models are not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char j[1024];
        // jansson keeps a repeated key's last value: the patch wins over the base
        snprintf(j, sizeof j, "{\"model_type\":\"%s\",\"hidden_size\":64,\"intermediate_size\":32,"
                              "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100,\"%s\":4,"
                              "\"num_experts_per_tok\":2,%s}",
                 cases[i].type,
                 !strcmp(cases[i].type, "mixtral") || !strcmp(cases[i].type, "granitemoe") ? "num_local_experts" : "num_experts",
                 cases[i].patch);
        ModelConfig c;
        PailErr err = {0};
        ck_assert_msg(parse_cfg(&c, j, &err) == -1, "accepted: %s", j);
        ck_assert_msg(strstr(err.msg, cases[i].want) && strstr(err.msg, "config.json"), "case %zu: '%s' lacks '%s'",
                      i, err.msg, cases[i].want);
    }
    // mixtral's router_jitter_noise is training-mode noise only (accepted, not applied); a null
    // clip_qkv, an empty mlp_only_layers and decoder_sparse_step 1 are what transformers writes
    const char *ok[] = {
        "{\"model_type\":\"mixtral\",\"hidden_size\":64,\"intermediate_size\":32,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"vocab_size\":100,\"num_local_experts\":4,\"router_jitter_noise\":0.1}",
        "{\"model_type\":\"olmoe\",\"hidden_size\":64,\"intermediate_size\":32,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"vocab_size\":100,\"num_experts\":4,\"num_experts_per_tok\":2,\"clip_qkv\":null}",
        "{\"model_type\":\"qwen2_moe\",\"hidden_size\":64,\"intermediate_size\":32,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"vocab_size\":100,\"num_experts\":4,\"num_experts_per_tok\":2,"
        "\"mlp_only_layers\":[],\"decoder_sparse_step\":1,\"qkv_bias\":false}",
    };
    ModelConfig c;
    PailErr err = {0};
    for (int i = 0; i < 3; i++) ck_assert_msg(parse_cfg(&c, ok[i], &err) == 0, "%s: %s", ok[i], err.msg);
    ck_assert(c.type == MODEL_QWEN2_MOE && !c.has_qkv_bias && c.intermediate_size == 5632);  // the class default
}
END_TEST

// config.json written by pail reads back the same MoE config, each type with its own field names.
START_TEST(test_moe_config_roundtrip) {
    for (int i = 0; i < NMOE; i++) {
        ModelConfig c, back;
        ck_assert_int_eq(modelgen_shape(&c, "tiny", moe_types[i]), 0);
        c.num_experts = 6, c.num_experts_per_tok = 3;
        if (moe_types[i] == MODEL_MIXTRAL) c.sliding_window = 96;
        if (moe_types[i] == MODEL_GRANITEMOE) c.residual_multiplier = 0.22;
        if (moe_types[i] == MODEL_OLMOE) c.norm_topk_prob = true;
        Buf b = {0};
        ck_assert_int_eq(model_config_to_json(&c, "bfloat16", &b), 0);
        PailErr err = {0};
        ck_assert_msg(model_config_parse(&back, (const char *)b.data, b.len, "written", &err) == 0, "%s", err.msg);
        ck_assert(back.type == c.type && back.num_experts == 6 && back.num_experts_per_tok == 3 &&
                  back.moe_intermediate_size == c.moe_intermediate_size && back.norm_topk_prob == c.norm_topk_prob &&
                  back.intermediate_size == c.intermediate_size &&
                  back.dense_intermediate_size == c.dense_intermediate_size && back.has_qkv_bias == c.has_qkv_bias &&
                  back.has_qk_norm == c.has_qk_norm && back.qk_norm_whole == c.qk_norm_whole &&
                  back.sliding_window == c.sliding_window && back.residual_multiplier == c.residual_multiplier);
        ck_assert_uint_eq(model_config_param_count(&back), model_config_param_count(&c));
        bool local = moe_types[i] == MODEL_GRANITEMOE || moe_types[i] == MODEL_MIXTRAL;
        ck_assert(strstr((const char *)b.data, local ? "\"num_local_experts\": 6" : "\"num_experts\": 6"));
        buf_free(&b);
    }
}
END_TEST

// ---- weights ----

// Every expert's rows of exp_gate_up (gate then up) and exp_down equal the file's tensors.
static void check_experts(const ModelWeights *w, const char *dir) {
    const ModelConfig *c = &w->cfg;
    size_t E = c->num_experts, Fe = c->moe_intermediate_size, C = c->hidden_size;
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&st, p, &err), 0);
    bool mix = c->type == MODEL_MIXTRAL;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const float *gu = model_weights_tensor(w, PARAM_EXP_GATE_UP, l), *dn = model_weights_tensor(w, PARAM_EXP_DOWN, l);
        char nm[256];
        if (c->type == MODEL_GRANITEMOE) {  // fused (E, 2Fe, C) and (E, C, Fe): the same rows in order
            snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.input_linear.weight", l);
            float *x = file_f32(&st, nm, E * 2 * Fe * C);
            ck_assert(!memcmp(x, gu, E * 2 * Fe * C * sizeof *x));
            free(x);
            snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.output_linear.weight", l);
            x = file_f32(&st, nm, E * C * Fe);
            ck_assert(!memcmp(x, dn, E * C * Fe * sizeof *x));
            free(x);
            continue;
        }
        const char *pre = mix ? "block_sparse_moe.experts" : "mlp.experts";
        for (size_t e = 0; e < E; e++) {
            const char *leaf[3] = {mix ? "w1" : "gate_proj", mix ? "w3" : "up_proj", mix ? "w2" : "down_proj"};
            for (int k = 0; k < 3; k++) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s.%zu.%s.weight", l, pre, e, leaf[k]);
                size_t n = Fe * C;
                float *x = file_f32(&st, nm, n);
                const float *want = k == 2 ? dn + e * C * Fe : gu + (e * 2 + k) * Fe * C;
                ck_assert_msg(!memcmp(x, want, n * sizeof *x), "%s differs from the loaded rows", nm);
                free(x);
            }
        }
        ck_assert(gu[0] != gu[Fe * C]);  // gate and up of expert 0 are different draws
    }
    safetensors_close(&st);
}

START_TEST(test_moe_weights_tiny) {
    for (int i = 0; i < NMOE; i++) {
        ModelType type = moe_types[i];
        ModelConfig cfg;
        char d32[512], d16[512], dq[512], sub[64];
        snprintf(sub, sizeof sub, "%s-f32", model_type_name(type));
        tiny_gen(tmpdir, sub, type, ST_DTYPE_F32, &cfg, d32, sizeof d32);
        snprintf(sub, sizeof sub, "%s-bf16", model_type_name(type));
        tiny_gen(tmpdir, sub, type, ST_DTYPE_BF16, &cfg, d16, sizeof d16);
        ModelWeights a, b, q;
        PailErr err = {0};
        ck_assert_msg(model_weights_load(&a, d32, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(a.num_params, model_config_param_count(&cfg));
        ck_assert_uint_eq(a.num_params, model_params_count(&cfg));
        check_experts(&a, d32);
        // bf16 as stored: every value the f32 draw rounded
        ck_assert_msg(model_weights_load_as(&b, d16, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(b.dtype[PARAM_EXP_GATE_UP], DT_BF16);
        size_t n = model_weights_tensor(&a, PARAM_EXP_DOWN, 1) == NULL ? 0 : (size_t)cfg.num_experts * cfg.hidden_size * cfg.moe_intermediate_size;
        const float *af = model_weights_tensor(&a, PARAM_EXP_DOWN, 1);
        const uint16_t *bf = model_weights_tensor(&b, PARAM_EXP_DOWN, 1);
        for (size_t k = 0; k < n; k++) ck_assert(bf[k] == f32_to_bf16(af[k]));
        // --quantize q8_0: the experts' rows (C 64, Fe 32: whole blocks) as blocks, each row quantized
        ck_assert_msg(model_weights_load_as(&q, d32, DT_Q8_0, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(model_weights_dtype(&q, PARAM_EXP_GATE_UP, 1), DT_Q8_0);
        ck_assert_int_eq(model_weights_dtype(&q, PARAM_EXP_DOWN, 1), DT_Q8_0);
        // the router (and qwen2_moe's shared-expert gate) choose the experts: kept as stored
        ck_assert_int_eq(model_weights_dtype(&q, PARAM_ROUTER, 1), DT_F32);
        ck_assert_int_eq(model_weights_dtype(&q, PARAM_SHARED_GATE, 1), DT_F32);
        size_t rb = dtype_row_bytes(DT_Q8_0, cfg.moe_intermediate_size);
        char *row = malloc(rb);
        const float *ad = model_weights_tensor(&a, PARAM_EXP_DOWN, 1);
        const char *qd = model_weights_tensor(&q, PARAM_EXP_DOWN, 1);
        for (size_t r = 0; r < (size_t)cfg.num_experts * cfg.hidden_size; r++) {
            quant_quantize(row, ad + r * cfg.moe_intermediate_size, DT_Q8_0, cfg.moe_intermediate_size);
            ck_assert_msg(!memcmp(row, qd + r * rb, rb), "exp_down row %zu", r);
        }
        free(row);
        // saved (blocks kept) and loaded back: the same blocks under the per-expert names
        snprintf(dq, sizeof dq, "%s/%s-q8", tmpdir, model_type_name(type));
        ModelGenOptions opt = {.dtype = ST_DTYPE_BF16};
        ck_assert_msg(model_weights_save(&q, dq, &opt, &err) == 0, "%s", err.msg);
        ModelWeights q2;
        ck_assert_msg(model_weights_load_as(&q2, dq, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(model_weights_dtype(&q2, PARAM_EXP_DOWN, 1), DT_Q8_0);
        ck_assert(!memcmp(model_weights_tensor(&q2, PARAM_EXP_DOWN, 1), qd, (size_t)cfg.num_experts * cfg.hidden_size * rb));
        ck_assert_str_ne(q2.base_sha256, a.base_sha256);
        // the element offsets follow the layout: layer 1 of exp_down right after layer 0
        ck_assert_uint_eq(model_weights_elem_offset(&a, PARAM_EXP_DOWN, 1) - model_weights_elem_offset(&a, PARAM_EXP_DOWN, 0),
                          (size_t)cfg.num_experts * cfg.hidden_size * cfg.moe_intermediate_size);
        ck_assert(model_weights_f32(&a) + model_weights_elem_offset(&a, PARAM_EXP_DOWN, 1) == af);
        model_weights_free(&q2);
        model_weights_free(&q);
        model_weights_free(&a);
        model_weights_free(&b);
    }
}
END_TEST

// Writes dir's model.safetensors into out (with its config.json) without tensor `drop`, and with
// tensor `grow`'s first dim one larger (its data repeated).
static void rewrite(const char *dir, const char *out, const char *drop, const char *grow) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_int_eq(safetensors_open(&st, p, &err), 0);
    SafeTensorsWriteItem *it = calloc(st.n, sizeof *it);
    void *big = NULL;
    int n = 0;
    for (int i = 0; i < st.n; i++) {
        const SafeTensor *t = &st.tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        it[n] = (SafeTensorsWriteItem){t->name, t->dtype, t->ndim, {0}, t->data};
        for (int d = 0; d < t->ndim; d++) it[n].shape[d] = t->shape[d];
        if (grow && !strcmp(t->name, grow)) {
            size_t bytes = t->end - t->begin, row = bytes / t->shape[0];
            big = malloc(bytes + row);
            memcpy(big, t->data, bytes);
            memcpy((char *)big + bytes, t->data, row);
            it[n].shape[0]++;
            it[n].data = big;
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
    free(big);
    free(it);
    safetensors_close(&st);
}

// A missing, misshapen or surplus expert tensor is refused with its name and the file.
START_TEST(test_moe_weights_errors) {
    static const struct {
        ModelType type;
        const char *drop, *grow, *want;
    } cases[] = {
        {MODEL_QWEN3_MOE, "model.layers.1.mlp.experts.3.up_proj.weight", NULL,
         "tensor 'model.layers.1.mlp.experts.3.up_proj.weight' is missing"},
        {MODEL_QWEN2_MOE, "model.layers.0.mlp.shared_expert_gate.weight", NULL,
         "tensor 'model.layers.0.mlp.shared_expert_gate.weight' is missing"},
        {MODEL_MIXTRAL, "model.layers.0.block_sparse_moe.experts.2.w2.weight", NULL,
         "tensor 'model.layers.0.block_sparse_moe.experts.2.w2.weight' is missing"},
        {MODEL_GRANITEMOE, "model.layers.1.block_sparse_moe.input_linear.weight", NULL,
         "tensor 'model.layers.1.block_sparse_moe.input_linear.weight' is missing"},
        {MODEL_OLMOE, NULL, "model.layers.0.mlp.experts.1.gate_proj.weight",
         "tensor 'model.layers.0.mlp.experts.1.gate_proj.weight' has shape [33, 64], config.json implies [32, 64]"},
        {MODEL_GRANITEMOE, NULL, "model.layers.0.block_sparse_moe.output_linear.weight",
         "tensor 'model.layers.0.block_sparse_moe.output_linear.weight' has shape [5, 64, 32], config.json implies "
         "[4, 64, 32]"},
        {MODEL_QWEN3_MOE, NULL, "model.layers.0.mlp.gate.weight",
         "tensor 'model.layers.0.mlp.gate.weight' has shape [5, 64], config.json implies [4, 64]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ModelConfig cfg;
        char d[512], out[600], sub[64];
        snprintf(sub, sizeof sub, "src-%zu", i);
        tiny_gen(tmpdir, sub, cases[i].type, ST_DTYPE_F32, &cfg, d, sizeof d);
        snprintf(out, sizeof out, "%s/bad-%zu", tmpdir, i);
        rewrite(d, out, cases[i].drop, cases[i].grow);
        ModelWeights w;
        PailErr err = {0};
        ck_assert_int_eq(model_weights_load(&w, out, &err), -1);
        ck_assert_msg(strstr(err.msg, cases[i].want) && strstr(err.msg, out), "case %zu: '%s' lacks '%s'", i,
                      err.msg, cases[i].want);
    }
    // an expert past num_experts: config.json says 3 experts, the file holds 4
    ModelConfig cfg;
    char d[512], p[600];
    tiny_gen(tmpdir, "five", MODEL_QWEN3_MOE, ST_DTYPE_F32, &cfg, d, sizeof d);
    cfg.num_experts = 3;
    Buf b = {0};
    ck_assert_int_eq(model_config_to_json(&cfg, "float32", &b), 0);
    snprintf(p, sizeof p, "%s/config.json", d);
    PailErr err = {0};
    ck_assert_int_eq(fs_write_file_atomic(p, b.data, b.len, &err), 0);
    buf_free(&b);
    ModelWeights w;
    ck_assert_int_eq(model_weights_load(&w, d, &err), -1);
    ck_assert_msg(strstr(err.msg, "unexpected tensor 'model.layers.0.mlp.experts.3.") &&
                      strstr(err.msg, "num_experts = 3"),
                  "%s", err.msg);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_moe");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_checked_fixture(core, setup_tmp, teardown_tmp);
    tcase_add_checked_fixture(limits, setup_tmp, teardown_tmp);
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_moe_config_published);
    tcase_add_test(core, test_moe_config_roundtrip);
    tcase_add_test(core, test_moe_weights_tiny);
    tcase_add_test(limits, test_moe_config_refusals);
    tcase_add_test(limits, test_moe_weights_errors);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
