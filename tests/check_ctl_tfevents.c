// Check suite for src/ctl/tfevents.c: CRC-32C against the published check
// value and RFC 3720's B.4 vectors, and the bytes of one hand-assembled record
// and of a text-plugin table value.
// (tests/integration/test_tensorboard.sh reads whole files back with the
// tensorboard package's own reader.)
#define _GNU_SOURCE  // memmem
#include <check.h>
#include <string.h>
#include "ctl/tfevents.h"

START_TEST(test_crc32c) {
    ck_assert_uint_eq(tfevents_crc32c("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value
    uint8_t z[32] = {0}, ff[32], inc[32];
    memset(ff, 0xFF, sizeof ff);
    for (int i = 0; i < 32; i++) inc[i] = (uint8_t)i;
    ck_assert_uint_eq(tfevents_crc32c(z, 32), 0x8A9136AAu);   // RFC 3720 B.4: 32 bytes of zeros
    ck_assert_uint_eq(tfevents_crc32c(ff, 32), 0x62A8AB43u);  // 32 bytes of 0xFF
    ck_assert_uint_eq(tfevents_crc32c(inc, 32), 0x46DD794Eu); // 0x00..0x1F
    uint32_t c = tfevents_crc32c("123456789", 9);
    ck_assert_uint_eq(tfevents_masked_crc("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}
END_TEST

START_TEST(test_record_bytes) {
    TfEvent e = {0};
    Buf out = {0};
    PailErr err = {0};
    tfevents_event_begin(&e, 1.0, 300);
    ck_assert_int_eq(tfevents_event_scalar(&e, "r", 0.5f, &err), 0);
    ck_assert_int_eq(tfevents_record(&out, &e, &err), 0);
    // Event: 09 <1.0 LE> 10 ac 02 2a 0a (Summary: 0a 08 (Value: 0a 01 'r' 15 <0.5f LE>))
    static const uint8_t want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x10, 0xac, 0x02, 0x2a, 0x0a, 0x0a, 0x08,
                                   0x0a, 0x01, 'r', 0x15, 0, 0, 0, 0x3f};
    ck_assert_uint_eq(out.len, 8 + 4 + sizeof want + 4);
    ck_assert_uint_eq(out.data[0], sizeof want);
    for (int i = 1; i < 8; i++) ck_assert_uint_eq(out.data[i], 0);
    ck_assert_mem_eq(out.data + 12, want, sizeof want);
    uint32_t lc = tfevents_masked_crc(out.data, 8), dc = tfevents_masked_crc(want, sizeof want);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(out.data[8 + i], (lc >> (8 * i)) & 0xFF);
        ck_assert_uint_eq(out.data[12 + sizeof want + i], (dc >> (8 * i)) & 0xFF);
    }
    buf_reset(&out);
    ck_assert_int_eq(tfevents_record_version(&out, 2.0, &err), 0);
    ck_assert_uint_eq(out.data[0], 9 + 2 + 13);
    ck_assert_mem_eq(out.data + 12 + 9, "\x1a\x0d" "brain.Event:2", 15);
    tfevents_event_free(&e);
    buf_free(&out);
}
END_TEST

START_TEST(test_text_table) {
    TfEvent e = {0};
    Buf out = {0};
    PailErr err = {0};
    tfevents_event_begin(&e, 1.0, 3);
    const char *cells[] = {"a", "bc"};
    ck_assert_int_eq(tfevents_event_text_table(&e, "t", cells, 1, 2, &err), 0);
    ck_assert_int_eq(e.nvalues, 1);
    // Summary.value: 0a 24 (Value: 0a 01 't'; tensor 42 13 (dtype 08 07 DT_STRING; shape 12 08 (dim 12 02 08 01,
    // dim 12 02 08 02); string_val 42 01 'a', 42 02 'b' 'c'); metadata 4a 0a (plugin_data 0a 06 (plugin_name
    // 0a 04 "text"); data_class 20 02 DATA_CLASS_TENSOR))
    static const uint8_t want[] = {0x0a, 0x24, 0x0a, 0x01, 't',  0x42, 0x13, 0x08, 0x07, 0x12, 0x08, 0x12, 0x02,
                                   0x08, 0x01, 0x12, 0x02, 0x08, 0x02, 0x42, 0x01, 'a',  0x42, 0x02, 'b',  'c',
                                   0x4a, 0x0a, 0x0a, 0x06, 0x0a, 0x04, 't',  'e',  'x',  't',  0x20, 0x02};
    ck_assert_uint_eq(e.summary.len, sizeof want);
    ck_assert_mem_eq(e.summary.data, want, sizeof want);
    // Scalars and a table share one event: the record holds both values.
    ck_assert_int_eq(tfevents_event_scalar(&e, "r", 0.5f, &err), 0);
    ck_assert_int_eq(tfevents_record(&out, &e, &err), 0);
    ck_assert_uint_eq(out.data[0], 9 + 2 + 2 + sizeof want + 10);
    // Cells longer than 127 bytes (2-byte lengths) and NULL cells (empty) encode; a cell count that is not
    // rows x cols cannot be given, bad shapes and tags are refused.
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *c2[] = {big, NULL, "", "d"};
    tfevents_event_begin(&e, 0, 0);
    ck_assert_int_eq(tfevents_event_text_table(&e, "t", c2, 2, 2, &err), 0);
    ck_assert_ptr_nonnull(memmem(e.summary.data, e.summary.len, "\x42\xab\x02xxx", 6));  // 299 = ab 02
    ck_assert_ptr_nonnull(memmem(e.summary.data, e.summary.len, "\x42\x00\x42\x00\x42\x01" "d", 7));
    ck_assert_int_eq(tfevents_event_text_table(&e, "t", c2, 0, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "0 x 2 cells"));
    ck_assert_int_eq(tfevents_event_text_table(&e, "", c2, 1, 1, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    ck_assert_int_eq(e.nvalues, 1);
    tfevents_event_free(&e);
    buf_free(&out);
}
END_TEST

START_TEST(test_limits) {
    TfEvent e = {0};
    Buf out = {0};
    PailErr err = {0};
    ck_assert_uint_eq(tfevents_crc32c("", 0), 0);
    tfevents_event_begin(&e, 0, 0);
    ck_assert_int_eq(tfevents_event_scalar(&e, "", 1.0f, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    char tag[600];
    memset(tag, 'a', sizeof tag - 1);
    tag[sizeof tag - 1] = 0;
    ck_assert_int_eq(tfevents_event_scalar(&e, tag, 1.0f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "1 to 512 bytes"));
    tag[512] = 0;
    ck_assert_int_eq(tfevents_event_scalar(&e, tag, 1.0f, &err), 0);  // 512 bytes: a 2-byte length varint
    ck_assert_int_eq(e.nvalues, 1);
    // An event with no values, and a negative step (int64 as a 10-byte varint), still frame.
    tfevents_event_begin(&e, 0, -1);
    ck_assert_int_eq(tfevents_record(&out, &e, &err), 0);
    ck_assert_uint_eq(out.data[0], 9 + 11 + 2);
    ck_assert_uint_eq(out.data[12 + 9 + 10], 0x01);
    tfevents_event_free(&e);
    buf_free(&out);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ctl_tfevents");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_crc32c);
    tcase_add_test(core, test_record_bytes);
    tcase_add_test(core, test_text_table);
    suite_add_tcase(s, core);
    TCase *lim = tcase_create("limits");
    tcase_add_test(lim, test_limits);
    suite_add_tcase(s, lim);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
