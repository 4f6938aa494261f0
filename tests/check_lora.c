// Check suite for src/lora: layout sizes and offsets, PEFT's init, target
// parsing, and the adapter file round trip and refusals.
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lora/lora.h"
#include "shard/h5file.h"

static ModelConfig tiny(void) {
    ModelConfig mc;
    model_config_defaults(&mc, MODEL_QWEN2);
    mc.hidden_size = 64; mc.intermediate_size = 176; mc.num_hidden_layers = 3;
    mc.num_attention_heads = 4; mc.num_key_value_heads = 2; mc.head_dim = 16; mc.vocab_size = 300;
    return mc;
}

START_TEST(test_layout) {
    ModelConfig mc = tiny();
    LoraConfig c = {.rank = 8, .alpha = 16};
    PailErr err = {0};
    ck_assert_int_eq(lora_targets_parse("all", &c.targets, &err), 0);
    LoraLayout l;
    ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), 0);
    // per layer: q (64->64), k,v (64->32), o (64->64), gate, up (64->176), down (176->64)
    int64_t per = 0;
    int dims[7][2] = {{64, 64}, {64, 32}, {64, 32}, {64, 64}, {64, 176}, {64, 176}, {176, 64}};
    for (int m = 0; m < 7; m++) per += 8 * dims[m][0] + dims[m][1] * 8;
    ck_assert_int_eq(l.n_params, 3 * per);
    const LoraSlot *s = lora_slot(&l, 2, LORA_DOWN);
    ck_assert_int_eq(s->in, 176);
    ck_assert_int_eq(s->out, 64);
    ck_assert_int_eq(s->b_off + 64 * 8, l.n_params);  // last slot ends the array
    ck_assert(fabs(lora_scaling(&c) - 2.0) < 1e-12);
    c.rslora = true;
    ck_assert(fabs(lora_scaling(&c) - 16.0 / sqrt(8.0)) < 1e-12);
    lora_layout_free(&l);
    ck_assert_int_eq(lora_targets_parse("q_proj,v_proj", &c.targets, &err), 0);
    ck_assert_uint_eq(c.targets, (1u << LORA_Q) | (1u << LORA_V));
    char buf[128];
    lora_targets_format(c.targets, buf, sizeof buf);
    ck_assert_str_eq(buf, "q_proj,v_proj");
    ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), 0);
    ck_assert_ptr_null(lora_slot(&l, 0, LORA_K));
    lora_layout_free(&l);
    ck_assert_int_eq(lora_targets_parse("q_proj,qkv", &c.targets, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "'qkv'"));
    c.rank = 0;
    ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), -1);
}
END_TEST

START_TEST(test_init) {
    ModelConfig mc = tiny();
    LoraConfig c = {.rank = 4, .alpha = 8, .targets = LORA_TARGETS_ALL};
    PailErr err = {0};
    LoraLayout l;
    ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), 0);
    float *p = malloc(l.n_params * sizeof *p), *q = malloc(l.n_params * sizeof *q);
    lora_init(&l, p, 7);
    lora_init(&l, q, 7);
    ck_assert(!memcmp(p, q, l.n_params * sizeof *p));  // deterministic
    const LoraSlot *s = lora_slot(&l, 1, LORA_DOWN);
    float bound = 1.0f / sqrtf(176.0f), mx = 0;
    double sum2 = 0;
    for (int k = 0; k < 4 * 176; k++) {
        float a = p[s->a_off + k];
        ck_assert(fabsf(a) <= bound);
        mx = fmaxf(mx, fabsf(a));
        sum2 += a * a;
    }
    // U(-b, b) has variance b^2/3; 704 samples: within 20%.
    ck_assert(fabs(sum2 / 704 / (bound * bound / 3) - 1) < 0.2);
    ck_assert(mx > 0.9f * bound);
    for (int k = 0; k < 64 * 4; k++) ck_assert(p[s->b_off + k] == 0.0f);  // B = 0
    free(p);
    free(q);
    lora_layout_free(&l);
}
END_TEST

// phi3: PEFT's fused qkv_proj (one A shared by q, k and v, B's rows q then k then v) and
// gate_up_proj; the split names refused for it, the fused ones for other families; the file
// holds the fused modules under their names and reads back, with and without the model.
START_TEST(test_fused) {
    ModelConfig mc = tiny();
    mc.type = MODEL_PHI3;
    LoraConfig c = {.rank = 4, .alpha = 8};
    PailErr err = {0};
    LoraLayout l;
    ck_assert_int_eq(lora_targets_parse("qkv_proj,o_proj,gate_up_proj,down_proj", &c.targets, &err), 0);
    ck_assert_msg(lora_layout_build(&l, &mc, &c, &err) == 0, "%s", err.msg);
    ck_assert(l.fused);
    ck_assert_uint_eq(l.cfg.targets, LORA_DENSE_BITS);  // the marks cleared, the modules phi3 has
    // per layer: qkv A (4, 64) B (128, 4), o 64->64, gate_up A (4, 64) B (352, 4), down 176->64
    int64_t per = 4 * 64 + 128 * 4 + (4 * 64 + 64 * 4) + 4 * 64 + 352 * 4 + (4 * 176 + 64 * 4);
    ck_assert_int_eq(l.n_params, 3 * per);
    const LoraSlot *q = lora_slot(&l, 1, LORA_Q), *k = lora_slot(&l, 1, LORA_K), *v = lora_slot(&l, 1, LORA_V);
    ck_assert(q->a_off == k->a_off && k->a_off == v->a_off);
    ck_assert_int_eq(k->b_off, q->b_off + 64 * 4);
    ck_assert_int_eq(v->b_off, k->b_off + 32 * 4);
    ck_assert_int_eq(q->out, 64);
    ck_assert_int_eq(v->out, 32);
    const LoraSlot *g = lora_slot(&l, 1, LORA_GATE), *u = lora_slot(&l, 1, LORA_UP);
    ck_assert(g->a_off == u->a_off && u->b_off == g->b_off + 176 * 4);
    LoraSlot st;
    const char *nm;
    ck_assert_int_eq(lora_stored_slot(&l, 1, LORA_Q, &st, &nm), 1);
    ck_assert_str_eq(nm, "qkv_proj");
    ck_assert_int_eq(st.out, 128);
    ck_assert_int_eq(lora_stored_slot(&l, 1, LORA_K, &st, &nm), 0);
    ck_assert_int_eq(lora_stored_slot(&l, 1, LORA_UP, &st, &nm), 0);
    ck_assert_int_eq(lora_stored_slot(&l, 1, LORA_GATE, &st, &nm), 1);
    ck_assert_str_eq(nm, "gate_up_proj");
    ck_assert_int_eq(st.out, 352);
    char buf[128];
    lora_layout_targets_format(&l, buf, sizeof buf);
    ck_assert_str_eq(buf, "qkv_proj,o_proj,gate_up_proj,down_proj");
    // the file: fused datasets under PEFT's names, read back with and without the model
    float *p = malloc(l.n_params * sizeof *p);
    for (int64_t i = 0; i < l.n_params; i++) p[i] = (float)i * 0.001f - 1.0f;
    AdapterMeta meta = {.version = 3};
    memset(meta.base_sha256, 'c', 64);
    Buf img = {0};
    ck_assert_int_eq(lora_adapter_write(&l, p, &meta, &img, &err), 0);
    for (int with_model = 0; with_model < 2; with_model++) {
        LoraLayout l2;
        float *p2;
        AdapterMeta m2;
        ck_assert_msg(lora_adapter_read(img.data, img.len, "v3", with_model ? &mc : NULL, &l2, &p2, &m2, &err) == 0,
                      "%s", err.msg);
        ck_assert_int_eq(l2.n_params, l.n_params);
        ck_assert(l2.fused);
        ck_assert(!memcmp(p, p2, l.n_params * sizeof *p));
        free(p2);
        lora_layout_free(&l2);
    }
    hid_t f = h5f_open_mem(img.data, img.len, "v3", &err);
    ck_assert(f >= 0);
    ck_assert(h5l_exists(f, "layers/2/qkv_proj/lora_B") && h5l_exists(f, "layers/2/gate_up_proj/lora_A"));
    ck_assert(!h5l_exists(f, "layers/2/q_proj/lora_B") && !h5l_exists(f, "layers/2/up_proj/lora_A"));
    h5f_close(f);
    // the same adapter on a qwen2 model: refused, naming the fused module
    ModelConfig q2 = tiny();
    LoraLayout l3;
    float *p3;
    AdapterMeta m3;
    ck_assert_int_eq(lora_adapter_read(img.data, img.len, "v3", &q2, &l3, &p3, &m3, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "qkv_proj and gate_up_proj are phi3's fused modules"));
    buf_free(&img);
    free(p);
    lora_layout_free(&l);
    // phi3 has no q_proj (alone, or q without k and v) and no gate_proj alone
    const char *bad[] = {"q_proj", "q_proj,v_proj", "gate_proj,down_proj", "up_proj"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(lora_targets_parse(bad[i], &c.targets, &err), 0);
        ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), -1);
        ck_assert_msg(strstr(err.msg, "a phi3 model has no separate q_proj") && strstr(err.msg, "target qkv_proj"),
                      "%s: %s", bad[i], err.msg);
    }
    // all / attn / mlp adapt the fused modules
    ck_assert_int_eq(lora_targets_parse("attn", &c.targets, &err), 0);
    ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), 0);
    lora_layout_targets_format(&l, buf, sizeof buf);
    ck_assert_str_eq(buf, "qkv_proj,o_proj");
    lora_layout_free(&l);
}
END_TEST

// A mixture of experts: the expert modules (E adapters each, pail's (E, R, in) / (E, out, R)
// order), all / mlp taking what the model has, explicit names refused where a model lacks them,
// and the 3-D datasets' file round trip.
START_TEST(test_experts) {
    ModelConfig mc = tiny();
    mc.type = MODEL_QWEN3_MOE;
    mc.num_experts = 6; mc.num_experts_per_tok = 2; mc.moe_intermediate_size = 24; mc.intermediate_size = 0;
    LoraConfig c = {.rank = 4, .alpha = 8};
    PailErr err = {0};
    LoraLayout l;
    ck_assert_int_eq(lora_targets_parse("all", &c.targets, &err), 0);
    ck_assert_msg(lora_layout_build(&l, &mc, &c, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(lora_slot(&l, 0, LORA_GATE));  // no shared expert: all skips the dense MLP
    ck_assert_ptr_null(lora_slot(&l, 0, LORA_ROUTER));  // and the router, named or frozen
    const LoraSlot *gu = lora_slot(&l, 1, LORA_EXP_GATE_UP), *dn = lora_slot(&l, 1, LORA_EXP_DOWN);
    ck_assert(gu && dn);
    ck_assert_int_eq(gu->n_exp, 6);
    ck_assert_int_eq(gu->in, 64);
    ck_assert_int_eq(gu->out, 48);
    ck_assert_int_eq(dn->in, 24);
    ck_assert_int_eq(dn->out, 64);
    ck_assert_int_eq(gu->b_off - gu->a_off, 6 * 4 * 64);
    ck_assert_int_eq(dn->a_off - gu->b_off, 6 * 48 * 4);
    // per layer: attention as dense, then the two expert modules
    int64_t per = 4 * 64 + 64 * 4 + 2 * (4 * 64 + 32 * 4) + 4 * 64 + 64 * 4 + 6 * (4 * 64 + 48 * 4) + 6 * (4 * 24 + 64 * 4);
    ck_assert_int_eq(l.n_params, 3 * per);
    float *p = malloc(l.n_params * sizeof *p);
    lora_init(&l, p, 3);
    for (int64_t k = 0; k < (int64_t)6 * 4 * 24; k++) ck_assert(p[dn->a_off + k] != 0);  // every expert's A drawn
    for (int64_t k = 0; k < (int64_t)6 * 64 * 4; k++) p[dn->b_off + k] = (float)k;  // B: a recognisable order
    Buf img = {0};
    AdapterMeta meta = {.version = 2};
    ck_assert_int_eq(lora_adapter_write(&l, p, &meta, &img, &err), 0);
    LoraLayout l2;
    float *p2;
    AdapterMeta m2;
    ck_assert_msg(lora_adapter_read(img.data, img.len, "a", &mc, &l2, &p2, &m2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(l2.n_params, l.n_params);
    ck_assert_int_eq(memcmp(p, p2, l.n_params * sizeof *p), 0);
    free(p2);
    lora_layout_free(&l2);
    ck_assert_msg(lora_adapter_read(img.data, img.len, "a", NULL, &l2, &p2, &m2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(l2.n_params, l.n_params);  // the shapes from the file alone
    ck_assert_int_eq(lora_slot(&l2, 2, LORA_EXP_DOWN)->n_exp, 6);
    free(p2);
    lora_layout_free(&l2);
    buf_free(&img);
    free(p);
    lora_layout_free(&l);
    // explicit names a model lacks: refused with the alternatives
    ck_assert_int_eq(lora_targets_parse("gate_proj", &c.targets, &err), 0);
    ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "experts.gate_up_proj") != NULL, "%s", err.msg);
    ModelConfig dense = tiny();
    ck_assert_int_eq(lora_targets_parse("q_proj,experts", &c.targets, &err), 0);
    ck_assert_int_eq(lora_layout_build(&l, &dense, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "'experts.gate_up_proj'") != NULL, "%s", err.msg);
    ck_assert_int_eq(lora_targets_parse("mlp", &c.targets, &err), 0);  // a dense model's mlp: its three
    ck_assert_int_eq(lora_layout_build(&l, &dense, &c, &err), 0);
    ck_assert_uint_eq(l.cfg.targets, LORA_MLP_BITS);
    lora_layout_free(&l);
    ck_assert_int_eq(lora_targets_parse("shared_expert,experts.down_proj", &c.targets, &err), 0);
    ck_assert_uint_eq(c.targets, LORA_MLP_BITS | (1u << LORA_EXP_DOWN));
    // the router: frozen under all (above: no slot), adapted when named (C -> E)
    ck_assert_int_eq(lora_targets_parse("q_proj,router", &c.targets, &err), 0);
    ck_assert_msg(lora_layout_build(&l, &mc, &c, &err) == 0, "%s", err.msg);
    const LoraSlot *rt = lora_slot(&l, 0, LORA_ROUTER);
    ck_assert(rt && rt->in == 64 && rt->out == 6 && rt->n_exp == 1);
    lora_layout_free(&l);
    ck_assert_int_eq(lora_targets_parse("router", &c.targets, &err), 0);
    ck_assert_int_eq(lora_layout_build(&l, &dense, &c, &err), -1);  // a dense model has no router
}
END_TEST

START_TEST(test_adapter_file) {
    ModelConfig mc = tiny();
    LoraConfig c = {.rank = 4, .alpha = 8, .targets = (1u << LORA_Q) | (1u << LORA_DOWN)};
    PailErr err = {0};
    LoraLayout l;
    ck_assert_int_eq(lora_layout_build(&l, &mc, &c, &err), 0);
    float *p = malloc(l.n_params * sizeof *p);
    for (int64_t k = 0; k < l.n_params; k++) p[k] = (float)k * 0.001f - 1.0f;
    AdapterMeta meta = {.version = 12, .step = 24, .created_unix = 1796000000};
    memset(meta.base_sha256, 'c', 64);
    Buf img = {0};
    ck_assert_int_eq(lora_adapter_write(&l, p, &meta, &img, &err), 0);
    LoraLayout l2;
    float *p2;
    AdapterMeta m2;
    ck_assert_msg(lora_adapter_read(img.data, img.len, "v12", &mc, &l2, &p2, &m2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(l2.n_params, l.n_params);
    ck_assert_uint_eq(l2.cfg.targets, c.targets);
    ck_assert_int_eq(m2.version, 12);
    ck_assert_int_eq(m2.step, 24);
    ck_assert_str_eq(m2.base_sha256, meta.base_sha256);
    ck_assert(!memcmp(p, p2, l.n_params * sizeof *p));
    free(p2);
    lora_layout_free(&l2);
    // Another model shape: refused, naming the dataset and the dims.
    ModelConfig other = mc;
    other.intermediate_size = 160;
    ck_assert_int_eq(lora_adapter_read(img.data, img.len, "v12", &other, &l2, &p2, &m2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "layers/0/down_proj/lora_A"));
    other = mc;
    other.num_hidden_layers = 4;
    ck_assert_int_eq(lora_adapter_read(img.data, img.len, "v12", &other, &l2, &p2, &m2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "layers"));
    ck_assert_int_eq(lora_adapter_read(img.data, img.len / 2, "half", &mc, &l2, &p2, &m2, &err), -1);
    if (getenv("PAIL_ADAPTER_SAMPLE")) ck_assert_int_eq(h5f_write_path(&img, getenv("PAIL_ADAPTER_SAMPLE"), &err), 0);
    buf_free(&img);
    free(p);
    lora_layout_free(&l);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lora");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_layout);
    tcase_add_test(core, test_init);
    tcase_add_test(core, test_fused);
    tcase_add_test(core, test_experts);
    tcase_add_test(limits, test_adapter_file);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
