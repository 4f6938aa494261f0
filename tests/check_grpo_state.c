// Check suite for src/grpo/state.c: a trainer state round-trips, its
// consumption record (record/*, record_parent) included; a version without
// steps has no record/ and v0 has record_parent -1.
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "grpo/state.h"

static ModelConfig tiny(void) {
    ModelConfig mc;
    model_config_defaults(&mc, MODEL_QWEN2);
    mc.hidden_size = 64; mc.intermediate_size = 176; mc.num_hidden_layers = 2;
    mc.num_attention_heads = 4; mc.num_key_value_heads = 2; mc.head_dim = 16; mc.vocab_size = 300;
    return mc;
}

// A state of version v with rec_n record runs, written to *img.
static void write_state(const ModelConfig *mc, LoraLayout *l, int64_t v, int64_t parent, const FeedRecord *rec,
                        int rec_n, Buf *img) {
    PailErr err = {0};
    LoraConfig c = {.rank = 2, .alpha = 4, .targets = LORA_TARGETS_ALL};
    ck_assert_int_eq(lora_layout_build(l, mc, &c, &err), 0);
    size_t n = (size_t)l->n_params;
    float *p = calloc(n, sizeof *p), *m = calloc(n, sizeof *m), *vv = calloc(n, sizeof *vv);
    for (size_t i = 0; i < n; i++) p[i] = (float)i * 1e-3f;
    TrainerState st = {.step = v, .version = v, .layout = *l, .params = p, .m = m, .v = vv, .rec = (FeedRecord *)rec,
                       .rec_n = rec_n, .parent = parent, .late_listed_unix = 1700000000 + v,
                       .late_listed_from = v - 3};
    snprintf(st.run_id, sizeof st.run_id, "run-x");
    buf_append(&st.adapter_image, "adapter", 7);
    ck_assert_msg(state_write(&st, img, &err) == 0, "%s", err.msg);
    buf_free(&st.adapter_image);
    free(p);
    free(m);
    free(vv);
}

START_TEST(test_record_round_trip) {
    ModelConfig mc = tiny();
    LoraLayout l;
    FeedRecord rec[2] = {{.step = 7, .key = "rollouts/v00000005/w1-000003.h5", .first = 0, .count = 2},
                         {.step = 8, .key = "rollouts/v00000006/w2-000001.h5", .first = 1, .count = 1}};
    Buf img = {0};
    write_state(&mc, &l, 8, 6, rec, 2, &img);
    TrainerState s;
    PailErr err = {0};
    ck_assert_msg(state_read(&s, img.data, img.len, "state-v8", &mc, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(s.parent, 6);
    ck_assert_int_eq(s.late_listed_unix, 1700000008);
    ck_assert_int_eq(s.late_listed_from, 5);
    ck_assert_int_eq(s.rec_n, 2);
    ck_assert_str_eq(s.rec[0].key, rec[0].key);
    ck_assert_int_eq(s.rec[0].step, 7);
    ck_assert_int_eq(s.rec[0].count, 2);
    ck_assert_str_eq(s.rec[1].key, rec[1].key);
    ck_assert_int_eq(s.rec[1].first, 1);
    state_free(&s);
    // The record alone, without the model's config (grpo-ctl samples --step).
    FeedRecord *r = NULL;
    int rn = 0;
    ck_assert_msg(state_read_record(img.data, img.len, "state-v8", &r, &rn, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rn, 2);
    ck_assert_str_eq(r[1].key, rec[1].key);
    ck_assert_int_eq(r[1].step, 8);
    ck_assert_int_eq(r[0].count, 2);
    free(r);
    ck_assert_int_eq(state_read_record("not hdf5", 8, "state-v8", &r, &rn, &err), -1);
    ck_assert_ptr_null(r);
    lora_layout_free(&l);
    buf_free(&img);
    // v0: no steps, no record/, parent -1.
    write_state(&mc, &l, 0, -1, NULL, 0, &img);
    ck_assert_int_eq(state_read(&s, img.data, img.len, "state-v0", &mc, &err), 0);
    ck_assert_int_eq(s.parent, -1);
    ck_assert_int_eq(s.rec_n, 0);
    state_free(&s);
    ck_assert_int_eq(state_read_record(img.data, img.len, "state-v0", &r, &rn, &err), 0);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(rn, 0);
    lora_layout_free(&l);
    buf_free(&img);
}
END_TEST

int main(void) {
    Suite *s = suite_create("grpo_state");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_record_round_trip);
    suite_add_tcase(s, core);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
