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
    LoraConfig c = {.rank = 4, .alpha = 8, .targets = (1u << LORA_NMOD) - 1};
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
    tcase_add_test(limits, test_adapter_file);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
