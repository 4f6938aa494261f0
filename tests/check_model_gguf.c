// Check suite for the GGUF reader and dequantization (src/model/gguf.{h,c},
// gguf_quant.c): files written here by a tiny GGUF writer, read back through
// every getter; dequantized blocks against values worked out by hand from the
// format (bit equality with gguf-py is tests/integration/test_gguf.sh); one
// test per refusal, and every truncation of a valid file refused with a message.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "model/gguf.h"

// ---- a tiny GGUF writer ----

static void put(Buf *b, const void *p, size_t n) { ck_assert_int_eq(buf_append(b, p, n), 0); }
static void u32(Buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(Buf *b, uint64_t v) { put(b, &v, 8); }
static void str(Buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void kv_u32(Buf *b, const char *k, uint32_t v) { str(b, k); u32(b, GGUF_TYPE_UINT32); u32(b, v); }
static void kv_str(Buf *b, const char *k, const char *v) { str(b, k); u32(b, GGUF_TYPE_STRING); str(b, v); }
static void kv_f32(Buf *b, const char *k, float v) { str(b, k); u32(b, GGUF_TYPE_FLOAT32); put(b, &v, 4); }
static void header(Buf *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, nt);
    u64(b, nkv);
}
static void tinfo(Buf *b, const char *name, int nd, const uint64_t *dims, uint32_t type, uint64_t off) {
    str(b, name);
    u32(b, (uint32_t)nd);
    for (int i = 0; i < nd; i++) u64(b, dims[i]);
    u32(b, type);
    u64(b, off);
}
static void pad(Buf *b, size_t a) {
    static const uint8_t z[64];
    while (b->len % a) put(b, z, 1);
}

static uint16_t f2h(float f) {
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

// A valid file: every scalar type, a string array, an F32 (3, 2) tensor and a
// Q8_0 (32) tensor, alignment 32.
static void valid_file(Buf *b) {
    header(b, 3, 2, 7);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "llama.block_count", 2);
    kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    str(b, "flag"); u32(b, GGUF_TYPE_BOOL); put(b, "\1", 1);
    str(b, "i64"); u32(b, GGUF_TYPE_INT64); u64(b, (uint64_t)-5);
    str(b, "tokens"); u32(b, GGUF_TYPE_ARRAY); u32(b, GGUF_TYPE_STRING); u64(b, 3);
    str(b, "a"); str(b, "bc"); str(b, "");
    str(b, "nested"); u32(b, GGUF_TYPE_ARRAY); u32(b, GGUF_TYPE_ARRAY); u64(b, 1);
    u32(b, GGUF_TYPE_UINT8); u64(b, 2); put(b, "\1\2", 2);
    uint64_t d1[2] = {3, 2}, d2[1] = {32};
    tinfo(b, "a.weight", 2, d1, GGML_TYPE_F32, 0);
    tinfo(b, "b.weight", 1, d2, GGML_TYPE_Q8_0, 32);
    pad(b, 32);
    float v[6] = {1, 2, 3, 4, 5, 6};
    put(b, v, sizeof v);
    pad(b, 32);
    uint16_t d = f2h(0.5f);
    put(b, &d, 2);
    for (int i = 0; i < 32; i++) { int8_t q = (int8_t)(i - 16); put(b, &q, 1); }
}

START_TEST(test_gguf_read) {
    Buf b = {0};
    valid_file(&b);
    GgufFile g;
    PailErr err = {0};
    ck_assert_msg(gguf_parse(&g, b.data, b.len, "t.gguf", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(g.version, 3);
    ck_assert_int_eq(g.nkv, 7);
    ck_assert_int_eq(g.ntensors, 2);
    const char *s;
    size_t n;
    ck_assert_int_eq(gguf_get_string(&g, "general.architecture", &s, &n, &err), 0);
    ck_assert(n == 5 && !memcmp(s, "llama", 5));
    int64_t iv;
    ck_assert_int_eq(gguf_get_int(&g, "llama.block_count", &iv, &err), 0);
    ck_assert_int_eq(iv, 2);
    ck_assert_int_eq(gguf_get_int(&g, "i64", &iv, &err), 0);
    ck_assert_int_eq(iv, -5);
    double dv;
    ck_assert_int_eq(gguf_get_float(&g, "llama.attention.layer_norm_rms_epsilon", &dv, &err), 0);
    ck_assert(dv == (double)1e-5f);
    bool bv = false;
    ck_assert_int_eq(gguf_get_bool(&g, "flag", &bv, &err), 0);
    ck_assert(bv);
    uint64_t an;
    const uint8_t *ad;
    ck_assert_int_eq(gguf_get_array(&g, "tokens", GGUF_TYPE_STRING, &an, &ad, &err), 0);
    ck_assert_int_eq(an, 3);
    const char *strs[3];
    size_t lens[3];
    gguf_array_strings(ad, an, strs, lens);
    ck_assert(lens[0] == 1 && strs[0][0] == 'a' && lens[1] == 2 && !memcmp(strs[1], "bc", 2) && lens[2] == 0);
    // wrong types and absent keys say so
    ck_assert_int_eq(gguf_get_int(&g, "general.architecture", &iv, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    ck_assert_msg(strstr(err.msg, "t.gguf") && strstr(err.msg, "general.architecture") && strstr(err.msg, "STRING"),
                  "%s", err.msg);
    ck_assert_int_eq(gguf_get_string(&g, "nope", &s, &n, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NOT_FOUND);
    ck_assert_int_eq(gguf_get_array(&g, "tokens", GGUF_TYPE_INT32, &an, &ad, &err), -1);
    const GgufTensor *t = gguf_find_tensor(&g, "a.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert(t->ndim == 2 && t->dims[0] == 3 && t->dims[1] == 2 && t->nelem == 6 && t->nbytes == 24);
    float out[32];
    ck_assert_int_eq(gguf_dequantize(out, t->data, t->type, t->nelem), 0);
    for (int i = 0; i < 6; i++) ck_assert(out[i] == i + 1);
    t = gguf_find_tensor(&g, "b.weight");
    ck_assert(t && t->type == GGML_TYPE_Q8_0 && t->nbytes == 34 && t->offset == 32);
    ck_assert_int_eq(gguf_dequantize(out, t->data, t->type, t->nelem), 0);
    for (int i = 0; i < 32; i++) ck_assert(out[i] == 0.5f * (float)(i - 16));
    ck_assert_ptr_null(gguf_find_tensor(&g, "c"));
    gguf_close(&g);
    buf_free(&b);
}
END_TEST

// Version 2 reads the same; general.alignment moves the data section.
START_TEST(test_gguf_v2_alignment) {
    Buf b = {0};
    header(&b, 2, 1, 1);
    kv_u32(&b, "general.alignment", 64);
    uint64_t d[1] = {4};
    tinfo(&b, "x", 1, d, GGML_TYPE_F16, 0);
    pad(&b, 64);
    size_t start = b.len;
    uint16_t h[4] = {f2h(1), f2h(-2), f2h(0.25f), f2h(6e-8f)};
    put(&b, h, sizeof h);
    GgufFile g;
    PailErr err = {0};
    ck_assert_msg(gguf_parse(&g, b.data, b.len, "v2", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(g.alignment, 64);
    ck_assert_int_eq(g.data_offset, start);
    float o[4];
    ck_assert_int_eq(gguf_dequantize(o, g.tensors[0].data, GGML_TYPE_F16, 4), 0);
    ck_assert(o[0] == 1 && o[1] == -2 && o[2] == 0.25f && o[3] == (float)(_Float16)6e-8f);
    gguf_close(&g);
    buf_free(&b);
}
END_TEST

static float hf(float x) { return (float)(_Float16)x; }

// Each block type against its layout worked out by hand (gguf/quants.py's
// dequantize_blocks read element by element).
START_TEST(test_gguf_dequant_blocks) {
    uint8_t blk[256];
    float y[256];
    uint16_t d = f2h(0.75f), m = f2h(-1.5f);
    // Q4_0: element j low nibble of byte j, 16 + j high nibble.
    memcpy(blk, &d, 2);
    for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q4_0, 32), 0);
    for (int j = 0; j < 16; j++) {
        ck_assert(y[j] == 0.75f * (float)(j - 8));
        ck_assert(y[16 + j] == 0.75f * (float)(15 - j - 8));
    }
    // Q4_1: d * q + m
    memcpy(blk, &d, 2);
    memcpy(blk + 2, &m, 2);
    for (int j = 0; j < 16; j++) blk[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q4_1, 32), 0);
    for (int j = 0; j < 16; j++) ck_assert(y[j] == 0.75f * j - 1.5f);
    // Q5_0: the high bit of element i is bit i of the u32
    memcpy(blk, &d, 2);
    uint32_t qh = 0x80000001u;
    memcpy(blk + 2, &qh, 4);
    for (int j = 0; j < 16; j++) blk[6 + j] = 0xFF;
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q5_0, 32), 0);
    ck_assert(y[0] == 0.75f * 15 && y[1] == 0.75f * -1 && y[31] == 0.75f * 15 && y[16] == 0.75f * -1);
    // Q5_1
    memcpy(blk, &d, 2);
    memcpy(blk + 2, &m, 2);
    memcpy(blk + 4, &qh, 4);
    for (int j = 0; j < 16; j++) blk[8 + j] = 0x21;
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q5_1, 32), 0);
    ck_assert(y[0] == 0.75f * 17 - 1.5f && y[1] == 0.75f * 1 - 1.5f && y[16] == 0.75f * 2 - 1.5f &&
              y[31] == 0.75f * 18 - 1.5f);
    // Q6_K: every low nibble 5, high bits 1, scales k - 8, d 0.75: (0.75 * (k - 8)) * (21 - 32)
    memset(blk, 0x55, 128);
    memset(blk + 128, 0x55, 64);
    for (int k = 0; k < 16; k++) blk[192 + k] = (uint8_t)(int8_t)(k - 8);
    memcpy(blk + 208, &d, 2);
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q6_K, 256), 0);
    for (int e = 0; e < 256; e++) ck_assert(y[e] == (0.75f * (float)(e / 16 - 8)) * -11.0f);
    // Q4_K: scales bytes 0-3 = 1, 4-7 (mins) = 2, 8-11 = 0x31 (sc 4..7 = 1, mn 4..7 = 3)
    memcpy(blk, &d, 2);
    memcpy(blk + 2, &d, 2);
    memset(blk + 4, 1, 4);
    memset(blk + 8, 2, 4);
    memset(blk + 12, 0x31, 4);
    memset(blk + 16, 0x73, 128);
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q4_K, 256), 0);
    ck_assert(y[0] == (0.75f * 1) * 3 - 0.75f * 2);
    ck_assert(y[32] == (0.75f * 1) * 7 - 0.75f * 2);
    ck_assert(y[255] == (0.75f * 1) * 7 - 0.75f * 3);
    // Q2_K: scale byte k = 0x21 (scale 1, min 2), bits: byte value 0b11100100 -> shifts give 0, 1, 2, 3
    memset(blk, 0x21, 16);
    memset(blk + 16, 0xE4, 64);
    memcpy(blk + 80, &d, 2);
    memcpy(blk + 82, &m, 2);
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q2_K, 256), 0);
    for (int e = 0; e < 256; e++) ck_assert(y[e] == 0.75f * (float)((e % 128) / 32) - (-1.5f * 2));
    // Q3_K: hmask all ones (no offset), low bits 0b11100100, scales all 32 + 1 -> 1
    memset(blk, 0xFF, 32);
    memset(blk + 32, 0xE4, 64);
    memset(blk + 96, 0x11, 8);   // low nibbles 1
    memset(blk + 104, 0xAA, 4);  // bits 4-5: 2 -> 0x21 = 33 -> 1
    memcpy(blk + 108, &d, 2);
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q3_K, 256), 0);
    for (int e = 0; e < 256; e++) ck_assert(y[e] == 0.75f * (float)((e % 128) / 32));
    // BF16 and exactness of fp16 subnormals
    uint16_t bf = 0x3fc0;  // 1.5
    ck_assert_int_eq(gguf_dequantize(y, &bf, GGML_TYPE_BF16, 1), 0);
    ck_assert(y[0] == 1.5f);
    uint16_t sub = 1;
    ck_assert_int_eq(gguf_dequantize(y, &sub, GGML_TYPE_F16, 1), 0);
    ck_assert(y[0] == hf(5.9604645e-8f));
    // a count that is not whole blocks
    ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_Q4_K, 100), -1);
}
END_TEST

// MXFP4 (ggml's block_mxfp4, gpt-oss's experts): an E8M0 scale byte e, 16 bytes of E2M1 codes;
// element j < 16 byte j's low nibble, j + 16 its high one; kvalues {0, 1, 2, 3, 4, 6, 8, 12, 0,
// -1, ..., -12} times 2^(e - 128) (e 0 and 1: the subnormals 2^-128, 2^-127). In a file of a
// gpt-oss tensor of two blocks, read and dequantized.
START_TEST(test_gguf_mxfp4) {
    static const float kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const uint8_t es[4] = {127, 130, 1, 254};
    for (int i = 0; i < 4; i++) {
        uint8_t blk[17];
        blk[0] = es[i];
        for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)((j & 0xF) | (((15 - j) & 0xF) << 4));
        float y[32], d = ldexpf(1.0f, es[i] - 128);
        ck_assert_int_eq(gguf_dequantize(y, blk, GGML_TYPE_MXFP4, 32), 0);
        for (int j = 0; j < 16; j++) {
            ck_assert_msg(y[j] == kv[j] * d, "e %d element %d: %g, want %g", es[i], j, y[j], kv[j] * d);
            ck_assert_msg(y[j + 16] == kv[15 - j] * d, "e %d element %d: %g", es[i], j + 16, y[j + 16]);
        }
    }
    float y[32];
    uint8_t one[17] = {127, 0x71};  // 2^-1: element 0 code 1 (1 -> 0.5), element 16 code 7 (12 -> 6)
    ck_assert_int_eq(gguf_dequantize(y, one, GGML_TYPE_MXFP4, 32), 0);
    ck_assert(y[0] == 0.5f && y[16] == 6.0f && y[1] == 0.0f);
    ck_assert_int_eq(gguf_dequantize(y, one, GGML_TYPE_MXFP4, 16), -1);  // not whole blocks
    Buf b = {0};
    header(&b, 3, 1, 1);
    kv_str(&b, "general.architecture", "gpt-oss");
    uint64_t d[2] = {32, 2};
    tinfo(&b, "blk.0.ffn_gate_exps.weight", 2, d, GGML_TYPE_MXFP4, 0);
    pad(&b, 32);
    put(&b, one, sizeof one);
    one[0] = 126;
    put(&b, one, sizeof one);
    GgufFile g;
    PailErr err = {0};
    ck_assert_msg(gguf_parse(&g, b.data, b.len, "m.gguf", &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(g.tensors[0].nbytes, 34);
    float o[64];
    ck_assert_int_eq(gguf_dequantize(o, g.tensors[0].data, g.tensors[0].type, g.tensors[0].nelem), 0);
    ck_assert(o[0] == 0.5f && o[16] == 6.0f && o[32] == 0.25f && o[48] == 3.0f);
    ck_assert_str_eq(gguf_type_name(GGML_TYPE_MXFP4), "MXFP4");
    ck_assert_int_eq(gguf_type_dtype(GGML_TYPE_MXFP4), -1);  // no compute type: dequantized at import
    gguf_close(&g);
    buf_free(&b);
}
END_TEST

// ---- refusals: each a file that differs from a valid one in one way ----

static void expect_refusal(const Buf *b, const char *needle) {
    GgufFile g;
    PailErr err = {0};
    int rc = gguf_parse(&g, b->data, b->len, "bad.gguf", &err);
    if (rc == 0) gguf_close(&g);
    ck_assert_msg(rc == -1, "accepted a file that should say '%s'", needle);
    ck_assert_msg(strstr(err.msg, "bad.gguf") && strstr(err.msg, needle), "'%s' lacks '%s'", err.msg, needle);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
}

// A header and one tensor (F32 of dims) after the given keys, data zeros.
static void one_tensor(Buf *b, int nd, const uint64_t *dims, uint32_t type, uint64_t off, size_t data) {
    header(b, 3, 1, 0);
    tinfo(b, "t", nd, dims, type, off);
    pad(b, 32);
    uint8_t *z = calloc(1, data + 1);
    put(b, z, data);
    free(z);
}

START_TEST(test_gguf_refuse_magic) {
    Buf b = {0};
    put(&b, "GGML", 4);
    u32(&b, 3); u64(&b, 0); u64(&b, 0);
    expect_refusal(&b, "not a GGUF file");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_version) {
    Buf b = {0};
    header(&b, 1, 0, 0);
    expect_refusal(&b, "version 1");
    buf_reset(&b);
    header(&b, 4, 0, 0);
    expect_refusal(&b, "version 4");
    buf_reset(&b);
    header(&b, 0x03000000u, 0, 0);
    expect_refusal(&b, "big-endian");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_counts) {
    Buf b = {0};
    header(&b, 3, 1000, 0);
    expect_refusal(&b, "1000 tensors");
    buf_reset(&b);
    header(&b, 3, 0, (uint64_t)1 << 40);
    expect_refusal(&b, "keys");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_string_length) {
    Buf b = {0};
    header(&b, 3, 0, 1);
    u64(&b, 1ull << 62);
    put(&b, "abcd", 4);
    expect_refusal(&b, "a key");
    buf_reset(&b);
    header(&b, 3, 0, 1);
    str(&b, "k"); u32(&b, GGUF_TYPE_STRING); u64(&b, 100); put(&b, "short", 5);
    expect_refusal(&b, "runs past the end");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_array_length) {
    Buf b = {0};
    header(&b, 3, 0, 1);
    str(&b, "k"); u32(&b, GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_UINT32); u64(&b, 1000); u32(&b, 1);
    expect_refusal(&b, "more than the file holds");
    buf_reset(&b);
    header(&b, 3, 0, 1);
    str(&b, "k"); u32(&b, GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_UINT8); u64(&b, 1ull << 40);
    expect_refusal(&b, "elements");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_nesting) {
    Buf b = {0};
    header(&b, 3, 0, 1);
    str(&b, "deep"); u32(&b, GGUF_TYPE_ARRAY);
    for (int i = 0; i < GGUF_MAX_NEST + 1; i++) { u32(&b, GGUF_TYPE_ARRAY); u64(&b, 1); }
    u32(&b, GGUF_TYPE_UINT8); u64(&b, 0);
    expect_refusal(&b, "nests arrays");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_value_type) {
    Buf b = {0};
    header(&b, 3, 0, 1);
    str(&b, "k"); u32(&b, 13); u32(&b, 0);
    expect_refusal(&b, "unknown value type 13");
    buf_reset(&b);
    header(&b, 3, 0, 1);
    str(&b, "k"); u32(&b, GGUF_TYPE_ARRAY); u32(&b, 99); u64(&b, 0);
    expect_refusal(&b, "unknown type 99");
    buf_reset(&b);
    header(&b, 3, 0, 1);
    str(&b, "k"); u32(&b, GGUF_TYPE_BOOL); put(&b, "\2", 1);
    expect_refusal(&b, "bool value 2");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_duplicates) {
    Buf b = {0};
    header(&b, 3, 0, 2);
    kv_u32(&b, "k", 1);
    kv_u32(&b, "k", 2);
    expect_refusal(&b, "key 'k' appears twice");
    buf_reset(&b);
    uint64_t d[1] = {8};
    header(&b, 3, 2, 0);
    tinfo(&b, "t", 1, d, GGML_TYPE_F32, 0);
    tinfo(&b, "t", 1, d, GGML_TYPE_F32, 32);
    pad(&b, 32);
    uint8_t z[64] = {0};
    put(&b, z, 64);
    expect_refusal(&b, "tensor 't' appears twice");
    buf_reset(&b);
    header(&b, 3, 0, 1);
    u64(&b, 3); put(&b, "a\0b", 3); u32(&b, GGUF_TYPE_UINT8); put(&b, "\0", 1);
    expect_refusal(&b, "NUL byte");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_alignment) {
    Buf b = {0};
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 48);
    expect_refusal(&b, "not a power of two");
    buf_reset(&b);
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 0);
    expect_refusal(&b, "not a power of two");
    buf_reset(&b);
    header(&b, 3, 0, 1);
    kv_str(&b, "general.alignment", "32");
    expect_refusal(&b, "not UINT32");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_dims) {
    Buf b = {0};
    uint64_t d[5] = {32, 1, 1, 1, 1};
    one_tensor(&b, 0, d, GGML_TYPE_F32, 0, 128);
    expect_refusal(&b, "has 0 dims");
    buf_reset(&b);
    one_tensor(&b, 5, d, GGML_TYPE_F32, 0, 128);
    expect_refusal(&b, "has 5 dims");
    buf_reset(&b);
    uint64_t z[2] = {32, 0};
    one_tensor(&b, 2, z, GGML_TYPE_F32, 0, 128);
    expect_refusal(&b, "dim 1 is 0");
    buf_reset(&b);
    uint64_t big[3] = {1ull << 30, 1ull << 30, 1ull << 30};
    one_tensor(&b, 3, big, GGML_TYPE_F32, 0, 128);
    expect_refusal(&b, "out of range");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_type) {
    Buf b = {0};
    uint64_t d[1] = {32};
    one_tensor(&b, 1, d, 16 /* IQ2_XXS */, 0, 128);
    expect_refusal(&b, "ggml type 16");
    buf_reset(&b);
    uint64_t r[1] = {48};
    one_tensor(&b, 1, r, GGML_TYPE_Q4_0, 0, 128);
    expect_refusal(&b, "not a multiple of Q4_0's block of 32");
    // MXFP4 (39, 17 bytes a 32-block): a row not whole blocks is refused like the others
    buf_reset(&b);
    one_tensor(&b, 1, r, GGML_TYPE_MXFP4, 0, 128);
    expect_refusal(&b, "not a multiple of MXFP4's block of 32");
    buf_free(&b);
}
END_TEST

START_TEST(test_gguf_refuse_offsets) {
    Buf b = {0};
    uint64_t d[1] = {8};
    one_tensor(&b, 1, d, GGML_TYPE_F32, 4, 128);
    expect_refusal(&b, "not a multiple of the alignment 32");
    buf_reset(&b);
    one_tensor(&b, 1, d, GGML_TYPE_F32, 0, 16);
    expect_refusal(&b, "run past its end");
    buf_reset(&b);
    one_tensor(&b, 1, d, GGML_TYPE_F32, 1ull << 63, 64);
    expect_refusal(&b, "run past its end");
    buf_reset(&b);
    uint64_t big[1] = {16};
    header(&b, 3, 2, 0);
    tinfo(&b, "a", 1, big, GGML_TYPE_F32, 0);
    tinfo(&b, "b", 1, d, GGML_TYPE_F32, 32);
    pad(&b, 32);
    uint8_t z[128] = {0};
    put(&b, z, 128);
    expect_refusal(&b, "overlap");
    buf_reset(&b);
    header(&b, 3, 1, 0);
    tinfo(&b, "a", 1, d, GGML_TYPE_F32, 0);  // the data section would start past the end
    expect_refusal(&b, "past the end");
    buf_free(&b);
}
END_TEST

// Every prefix of a valid file is refused with a message, never read past.
START_TEST(test_gguf_truncations) {
    Buf b = {0};
    valid_file(&b);
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, b.data, n);
        GgufFile g;
        PailErr err = {0};
        int rc = gguf_parse(&g, p, n, "cut.gguf", &err);
        if (rc == 0) gguf_close(&g);
        ck_assert_msg(rc == -1 && err.msg[0], "prefix of %zu bytes accepted", n);
        free(p);
    }
    buf_free(&b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_gguf");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_gguf_read);
    tcase_add_test(core, test_gguf_v2_alignment);
    tcase_add_test(core, test_gguf_dequant_blocks);
    tcase_add_test(core, test_gguf_mxfp4);
    tcase_add_test(limits, test_gguf_refuse_magic);
    tcase_add_test(limits, test_gguf_refuse_version);
    tcase_add_test(limits, test_gguf_refuse_counts);
    tcase_add_test(limits, test_gguf_refuse_string_length);
    tcase_add_test(limits, test_gguf_refuse_array_length);
    tcase_add_test(limits, test_gguf_refuse_nesting);
    tcase_add_test(limits, test_gguf_refuse_value_type);
    tcase_add_test(limits, test_gguf_refuse_duplicates);
    tcase_add_test(limits, test_gguf_refuse_alignment);
    tcase_add_test(limits, test_gguf_refuse_dims);
    tcase_add_test(limits, test_gguf_refuse_type);
    tcase_add_test(limits, test_gguf_refuse_offsets);
    tcase_add_test(limits, test_gguf_truncations);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
