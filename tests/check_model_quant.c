// Check suite for block-quantized base weights in a model folder (src/model/weights.c,
// doc/models.md "Quantized weights"): a (family, layer) held in each of the eight types
// GGUF files bring (layers of one family in different types, as Q4_K_M mixes them), saved
// as U8 blocks named by "pail.quant.<tensor>" metadata, loaded back block for block, and
// dequantized exactly as kernels/quant.c's reference when a float --dtype is asked;
// the memory plan's probe; --quantize's spelling; and the refusals: an unknown type, a
// truncated row of blocks, rows that are not whole blocks, a quantized norm.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check_tmp.h"
#include "core/rng.h"
#include "dtype_cpu.h"
#include "model/config.h"
#include "model/modelgen.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "quant.h"

static char tmpdir[256];
static void setup_tmp(void) { tmp_make(tmpdir, sizeof tmpdir, "check-model-quant"); }
static void teardown_tmp(void) { tmp_remove(tmpdir); }

// A llama config whose rows are whole 256-blocks (C 256, F 512, V 300 rows).
static void quant_cfg(ModelConfig *c) {
    ck_assert_int_eq(modelgen_shape(c, "tiny", MODEL_LLAMA), 0);
    c->hidden_size = 256, c->intermediate_size = 512, c->vocab_size = 300;
    c->num_attention_heads = 4, c->num_key_value_heads = 2, c->head_dim = 64;
    c->tie_word_embeddings = false;
}

// Byte offsets of a block's fp16 scales: random scales could be inf or NaN.
static void scale_fields(DType dt, int *off, int *n) {
    *n = 1;
    off[0] = 0;
    if (dt == DT_Q4_1 || dt == DT_Q5_1 || dt == DT_Q4_K || dt == DT_Q5_K) *n = 2, off[1] = 2;
    if (dt == DT_Q6_K) off[0] = 208;
}

// Random blocks with scales in [0.001, 0.01] (fp16): every block decodes to finite values.
static void random_blocks(uint8_t *p, DType dt, size_t nblocks, Rng *rng) {
    size_t bb = dtype_block_bytes(dt);
    int off[2], n;
    scale_fields(dt, off, &n);
    for (size_t b = 0; b < nblocks; b++) {
        uint8_t *q = p + b * bb;
        for (size_t i = 0; i < bb; i++) q[i] = (uint8_t)rng_u64(rng);
        for (int k = 0; k < n; k++) {
            uint16_t h = dt_f32_to_f16(0.001f + 0.009f * (float)rng_uniform(rng));
            memcpy(q + off[k], &h, 2);
        }
    }
}

// The mix every test uses: a type per matrix family, wq's two layers in two types.
static DType mix(ModelParamId id, int layer) {
    switch (id) {
    case PARAM_EMBED: return DT_Q8_0;
    case PARAM_WQ: return layer == 0 ? DT_Q4_K : DT_Q6_K;
    case PARAM_WK: return DT_Q4_0;
    case PARAM_WV: return DT_Q4_1;
    case PARAM_WO: return DT_Q5_0;
    case PARAM_W_GATE: return DT_Q5_1;
    case PARAM_W_UP: return DT_Q5_K;
    case PARAM_W_DOWN: return DT_Q8_0;
    case PARAM_LM_HEAD: return DT_Q6_K;
    default: return DT_F32;
    }
}

// w: cfg held as mix(), filled (blocks random, vectors 1 + small noise); saved to dir.
static void make_quant(ModelWeights *w, ModelConfig *cfg, const char *dir) {
    quant_cfg(cfg);
    int L = cfg->num_hidden_layers;
    DType *ldt = malloc(PARAM_COUNT * (size_t)L * sizeof *ldt);
    for (int id = 0; id < PARAM_COUNT; id++)
        for (int l = 0; l < L; l++) ldt[id * L + l] = mix((ModelParamId)id, l);
    PailErr err = {0};
    ck_assert_msg(model_weights_alloc_layers(w, cfg, ldt, &err) == 0, "%s", err.msg);
    free(ldt);
    Rng rng;
    rng_seed(&rng, 12345, 0);
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &w->specs[id];
        if (!s->present) continue;
        for (int l = 0; l < (s->per_layer ? L : 1); l++) {
            DType dt = model_weights_dtype(w, (ModelParamId)id, l);
            ck_assert_int_eq(dt, mix((ModelParamId)id, l));
            void *p = model_weights_tensor(w, (ModelParamId)id, l);
            if (dtype_is_quant(dt)) random_blocks(p, dt, s->numel / (size_t)dtype_block(dt), &rng);
            else
                for (size_t i = 0; i < s->numel; i++) ((float *)p)[i] = 1.0f + 0.01f * (float)rng_uniform(&rng);
        }
    }
    ModelGenOptions o = {.dtype = ST_DTYPE_F32};  // the vectors exactly
    ck_assert_msg(model_weights_save(w, dir, &o, &err) == 0, "%s", err.msg);
}

START_TEST(test_quant_folder_roundtrip) {
    ModelConfig cfg;
    ModelWeights w;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/q", tmpdir);
    make_quant(&w, &cfg, dir);
    char desc[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(&w, desc, sizeof desc);
    ck_assert_str_eq(desc, "q4_0+q4_1+q4_k+q5_0+q5_1+q5_k+q6_k+q8_0");
    ck_assert(model_weights_quantized(&w));
    PailErr err = {0};
    ModelWeights a, f, b;
    ck_assert_msg(model_weights_load_as(&a, dir, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
    ck_assert_msg(model_weights_load_as(&f, dir, DT_F32, &err) == 0, "%s", err.msg);
    ck_assert_msg(model_weights_load_as(&b, dir, DT_BF16, &err) == 0, "%s", err.msg);
    ck_assert(!model_weights_quantized(&f) && !model_weights_quantized(&b));
    ck_assert_ptr_nonnull(model_weights_f32(&f));
    ck_assert_uint_eq(a.bytes, w.bytes);
    ck_assert_msg(a.bytes * 4 < f.bytes, "quantized %zu, f32 %zu", a.bytes, f.bytes);
    size_t pbytes = 0;
    char pdesc[MODEL_DTYPE_DESC];
    ck_assert_msg(model_weights_probe(dir, MODEL_DTYPE_AUTO, &pbytes, pdesc, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(pbytes, a.bytes);  // the memory plan's figure is the block's
    ck_assert_str_eq(pdesc, desc);
    ck_assert_msg(model_weights_probe(dir, DT_BF16, &pbytes, pdesc, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(pbytes, b.bytes);
    ck_assert_str_eq(pdesc, "bf16");
    int L = cfg.num_hidden_layers;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &w.specs[id];
        if (!s->present) continue;
        for (int l = 0; l < (s->per_layer ? L : 1); l++) {
            DType dt = mix((ModelParamId)id, l);
            ck_assert_int_eq(model_weights_dtype(&a, (ModelParamId)id, l), dt);
            const void *src = model_weights_tensor(&w, (ModelParamId)id, l);
            size_t nb = s->ndim == 2 ? s->shape[0] * dtype_row_bytes(dt, s->shape[1]) : s->numel * 4;
            ck_assert_msg(!memcmp(model_weights_tensor(&a, (ModelParamId)id, l), src, nb), "family %d layer %d bytes",
                          id, l);
            float *ref = malloc(s->numel * sizeof *ref);
            if (dtype_is_quant(dt)) quant_dequant(ref, src, dt, s->numel);
            else memcpy(ref, src, s->numel * sizeof *ref);
            const float *fv = model_weights_tensor(&f, (ModelParamId)id, l);
            const uint16_t *bv = model_weights_tensor(&b, (ModelParamId)id, l);
            for (size_t i = 0; i < s->numel; i++) {
                ck_assert_msg(fv[i] == ref[i], "family %d layer %d elem %zu: %g, dequantized %g", id, l, i, fv[i],
                              ref[i]);
                if (dtype_is_quant(dt))
                    ck_assert_msg(bv[i] == dt_f32_to_bf16(ref[i]), "family %d layer %d elem %zu: bf16", id, l, i);
            }
            free(ref);
        }
    }
    ck_assert_str_eq(a.base_sha256, f.base_sha256);
    // saving the held blocks again writes the same file (blocks as they are)
    char dir2[600];
    snprintf(dir2, sizeof dir2, "%s/q2", tmpdir);
    ModelGenOptions o = {.dtype = ST_DTYPE_F32};
    ck_assert_msg(model_weights_save(&a, dir2, &o, &err) == 0, "%s", err.msg);
    ModelWeights a2;
    ck_assert_msg(model_weights_load_as(&a2, dir2, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(a2.base_sha256, a.base_sha256);
    // dequantize: a bf16 checkpoint of the dequantized values
    o.dequantize = true, o.dtype = ST_DTYPE_BF16;
    ck_assert_msg(model_weights_save(&a, dir2, &o, &err) == 0, "%s", err.msg);
    ModelWeights d;
    ck_assert_msg(model_weights_load_as(&d, dir2, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);
    model_weights_dtype_desc(&d, desc, sizeof desc);
    ck_assert_str_eq(desc, "bf16");
    ck_assert(!memcmp(model_weights_tensor(&d, PARAM_WQ, 1), model_weights_tensor(&b, PARAM_WQ, 1),
                      w.specs[PARAM_WQ].numel * 2));
    model_weights_free(&d), model_weights_free(&a2);
    model_weights_free(&a), model_weights_free(&f), model_weights_free(&b), model_weights_free(&w);
}
END_TEST

// Rewrites dir/model.safetensors with tensor `name` replaced (shape, data) and its quant
// metadata value set to qtype (NULL: dropped), into out/.
static void rewrite(const char *dir, const char *out, const char *name, SafeTensorsDtype dt, int64_t r, int64_t c,
                    const char *qtype) {
    char path[600], cfgp[600], cmd[1400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    SafeTensors st;
    PailErr err = {0};
    ck_assert_msg(safetensors_open(&st, path, &err) == 0, "%s", err.msg);
    SafeTensorsWriteItem *items = calloc((size_t)st.n, sizeof *items);
    const char **mk = calloc((size_t)st.n_meta + 1, sizeof *mk), **mv = calloc((size_t)st.n_meta + 1, sizeof *mv);
    uint8_t *zeros = calloc((size_t)(r * c * 4 + 1), 1);
    int nm = 0;
    char key[300];
    snprintf(key, sizeof key, "%s%s", MODEL_QUANT_META, name);
    for (int i = 0; i < st.n_meta; i++) {
        if (!strcmp(st.meta_keys[i], key)) continue;
        mk[nm] = st.meta_keys[i], mv[nm++] = st.meta_vals[i];
    }
    if (qtype) mk[nm] = key, mv[nm++] = qtype;
    for (int i = 0; i < st.n; i++) {
        const SafeTensor *t = &st.tensors[i];
        items[i] = (SafeTensorsWriteItem){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}, t->data};
        if (!strcmp(t->name, name)) items[i] = (SafeTensorsWriteItem){t->name, dt, 2, {r, c}, zeros};
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/config.json' '%s/'", out, dir, out);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cfgp, sizeof cfgp, "%s/model.safetensors", out);
    ck_assert_msg(safetensors_write(cfgp, items, st.n, mk, mv, nm, &err) == 0, "%s", err.msg);
    free(items), free(mk), free(mv), free(zeros);
    safetensors_close(&st);
}

static void expect_refusal(const char *dir, const char *want1, const char *want2) {
    ModelWeights w;
    PailErr err = {0};
    ck_assert_int_eq(model_weights_load_as(&w, dir, MODEL_DTYPE_AUTO, &err), -1);
    ck_assert_msg(strstr(err.msg, want1) && strstr(err.msg, want2), "got: %s", err.msg);
    ck_assert_msg(!strchr(err.msg, '\n'), "one line: %s", err.msg);
}

START_TEST(test_quant_folder_refusals) {
    ModelConfig cfg;
    ModelWeights w;
    char dir[512], bad[600];
    snprintf(dir, sizeof dir, "%s/r", tmpdir);
    make_quant(&w, &cfg, dir);
    const char *wk = "model.layers.1.self_attn.k_proj.weight";  // q4_0 (128, 256): 8 blocks of 18 a row
    snprintf(bad, sizeof bad, "%s/unknown", tmpdir);
    rewrite(dir, bad, wk, ST_DTYPE_U8, 128, 144, "iq2_xs");
    expect_refusal(bad, wk, "'iq2_xs', not a type pail computes on");
    snprintf(bad, sizeof bad, "%s/truncated", tmpdir);
    rewrite(dir, bad, wk, ST_DTYPE_U8, 128, 143, "q4_0");
    expect_refusal(bad, wk, "it must be U8 [128, 144] (8 blocks of 18 bytes a row), the file holds U8 [128, 143]");
    snprintf(bad, sizeof bad, "%s/rows", tmpdir);
    rewrite(dir, bad, wk, ST_DTYPE_U8, 128, 144, "q4_k");  // 256 per row: one q4_k block is 144 bytes...
    ModelWeights ok;
    PailErr err = {0};
    ck_assert_msg(model_weights_load_as(&ok, bad, MODEL_DTYPE_AUTO, &err) == 0, "%s", err.msg);  // ...and valid
    ck_assert_int_eq(model_weights_dtype(&ok, PARAM_WK, 1), DT_Q4_K);
    model_weights_free(&ok);
    const char *down = "model.layers.0.mlp.down_proj.weight";  // (256, 512): 512 = 2 q4_k blocks, not 3
    snprintf(bad, sizeof bad, "%s/rows2", tmpdir);
    rewrite(dir, bad, down, ST_DTYPE_U8, 256, 2 * 144 + 1, "q4_k");
    expect_refusal(bad, down, "(truncated blocks?)");
    const char *norm = "model.layers.0.input_layernorm.weight";
    snprintf(bad, sizeof bad, "%s/norm", tmpdir);
    rewrite(dir, bad, norm, ST_DTYPE_U8, 1, 34 * 8, "q8_0");
    expect_refusal(bad, norm, "pail quantizes only the projections, the embedding and the head");
    // a U8 tensor without the metadata is not a weight pail loads
    snprintf(bad, sizeof bad, "%s/nometa", tmpdir);
    rewrite(dir, bad, wk, ST_DTYPE_U8, 128, 144, NULL);
    expect_refusal(bad, wk, "has dtype U8");
    model_weights_free(&w);
    // rows of 64 (the tiny shape) are not whole q4_k blocks: refused at allocation
    ModelConfig t;
    ck_assert_int_eq(modelgen_shape(&t, "tiny", MODEL_LLAMA), 0);
    DType *ldt = calloc(PARAM_COUNT * (size_t)t.num_hidden_layers, sizeof *ldt);
    ldt[PARAM_WQ * t.num_hidden_layers + 1] = DT_Q4_K;
    ModelWeights tw;
    ck_assert_int_eq(model_weights_alloc_layers(&tw, &t, ldt, &err), -1);
    ck_assert_msg(strstr(err.msg, "model.layers.1.self_attn.q_proj.weight: rows of 64 are not whole q4_k blocks of 256"),
                  "%s", err.msg);
    free(ldt);
}
END_TEST

// --quantize q4_k / q8_0 at load: every float matrix as quant_quantize makes it (llama.cpp's
// blocks), q4_k rows of 320 as quant_fallback's q5_0; blocks already there kept.
START_TEST(test_quantize_at_load) {
    ModelConfig cfg;
    quant_cfg(&cfg);
    cfg.intermediate_size = 320;  // down_proj's rows of 320: not whole 256-blocks
    char dir[512];
    snprintf(dir, sizeof dir, "%s/f", tmpdir);
    ModelGenOptions o = {.dtype = ST_DTYPE_BF16, .seed = 3};
    PailErr err = {0};
    ck_assert_msg(modelgen_write(&cfg, dir, &o, &err) == 0, "%s", err.msg);
    ModelWeights f, q, e;
    ck_assert_msg(model_weights_load_as(&f, dir, DT_F32, &err) == 0, "%s", err.msg);
    ck_assert_msg(model_weights_load_as(&q, dir, DT_Q4_K, &err) == 0, "%s", err.msg);
    ck_assert_msg(model_weights_load_as(&e, dir, DT_Q8_0, &err) == 0, "%s", err.msg);
    char desc[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(&q, desc, sizeof desc);
    ck_assert_str_eq(desc, "q4_k+q5_0");
    model_weights_dtype_desc(&e, desc, sizeof desc);
    ck_assert_str_eq(desc, "q8_0");
    size_t pbytes = 0;
    ck_assert_msg(model_weights_probe(dir, DT_Q4_K, &pbytes, desc, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(pbytes, q.bytes);
    ck_assert_str_eq(desc, "q4_k+q5_0");
    ck_assert_str_eq(q.base_sha256, f.base_sha256);  // the same files: run.json's compute_dtype tells them apart
    int L = cfg.num_hidden_layers;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &f.specs[id];
        if (!s->present || !model_param_is_matrix((ModelParamId)id)) continue;
        DType want = s->shape[1] % 256 ? DT_Q5_0 : DT_Q4_K;
        for (int l = 0; l < (s->per_layer ? L : 1); l++) {
            ModelWeights *ws[2] = {&q, &e};
            DType dts[2] = {want, DT_Q8_0};
            for (int k = 0; k < 2; k++) {
                ck_assert_int_eq(model_weights_dtype(ws[k], (ModelParamId)id, l), dts[k]);
                size_t rb = dtype_row_bytes(dts[k], s->shape[1]);
                uint8_t *ref = malloc(s->shape[0] * rb);
                const float *src = model_weights_tensor(&f, (ModelParamId)id, l);
                for (size_t r = 0; r < s->shape[0]; r++)
                    ck_assert_int_eq(quant_quantize(ref + r * rb, src + r * s->shape[1], dts[k], s->shape[1]), 0);
                ck_assert_msg(!memcmp(model_weights_tensor(ws[k], (ModelParamId)id, l), ref, s->shape[0] * rb),
                              "family %d layer %d as %s", id, l, dtype_name(dts[k]));
                free(ref);
            }
        }
    }
    ck_assert(q.bytes * 3 < f.bytes / 2);  // ~4.5 bits a weight against 32 (the vectors stay fp32)
    // a folder that already holds blocks keeps them under --quantize
    char qdir[600];
    snprintf(qdir, sizeof qdir, "%s/fq", tmpdir);
    o.dtype = ST_DTYPE_F32;
    ck_assert_msg(model_weights_save(&e, qdir, &o, &err) == 0, "%s", err.msg);
    ModelWeights k;
    ck_assert_msg(model_weights_load_as(&k, qdir, DT_Q4_K, &err) == 0, "%s", err.msg);
    model_weights_dtype_desc(&k, desc, sizeof desc);
    ck_assert_str_eq(desc, "q8_0");
    model_weights_free(&k), model_weights_free(&f), model_weights_free(&q), model_weights_free(&e);
}
END_TEST

START_TEST(test_quantize_parse) {
    int want = 7;
    ck_assert_int_eq(model_quantize_parse("q8_0", &want), 0);
    ck_assert_int_eq(want, DT_Q8_0);
    ck_assert_int_eq(model_quantize_parse("Q4_K", &want), 0);
    ck_assert_int_eq(want, DT_Q4_K);
    ck_assert_int_eq(model_quantize_parse("none", &want), 0);
    ck_assert_int_eq(want, MODEL_DTYPE_AUTO);
    ck_assert_int_eq(model_quantize_parse(NULL, &want), 0);
    ck_assert_int_eq(want, MODEL_DTYPE_AUTO);
    const char *bad[] = {"q4_k_m", "q4", "int8", "", "bf16", "q6_k"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        want = 7;
        ck_assert_msg(model_quantize_parse(bad[i], &want) == -1, "'%s' parsed", bad[i]);
        ck_assert_int_eq(want, 7);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_quant");
    TCase *core = tcase_create("core");
    tcase_add_checked_fixture(core, setup_tmp, teardown_tmp);
    tcase_set_timeout(core, 120);
    tcase_add_test(core, test_quant_folder_roundtrip);
    tcase_add_test(core, test_quant_folder_refusals);
    tcase_add_test(core, test_quantize_at_load);
    tcase_add_test(core, test_quantize_parse);
    suite_add_tcase(s, core);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
