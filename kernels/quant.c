// The reference dequantization of kernels/quant.h (moved from
// src/model/gguf_quant.c, which now calls it): gguf-py's floats exactly, built
// with -ffp-contract=off (GNUmakefile): numpy never fuses `d * q + m`, and an
// FMA would round once where numpy rounds twice. Scales are fp16 converted
// exactly (dtype_cpu.h). Header-only dependencies, so that the GGUF fuzzer
// links this file alone.
#include "quant.h"
#include <stdint.h>
#include <string.h>
#include "dtype_cpu.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return dt_f16_to_f32(h);
}

// Q4_0 (18 bytes): d, 16 bytes of nibbles; element j < 16 is the low nibble of
// byte j, element 16 + j its high nibble; value d * (q - 8).
static void deq_q4_0(float *y, const uint8_t *b) {
    float d = h2f(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((int8_t)(b[2 + j] & 0xF) - 8);
        y[j + 16] = d * (float)((int8_t)(b[2 + j] >> 4) - 8);
    }
}

// Q4_1 (20): d, m, nibbles as Q4_0; value (d * q) + m.
static void deq_q4_1(float *y, const uint8_t *b) {
    float d = h2f(b), m = h2f(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(b[4 + j] & 0xF) + m;
        y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
    }
}

// Q5_0 (22): d, 32 high bits (little-endian u32, bit i for element i), nibbles; d * (q - 16).
static void deq_q5_0(float *y, const uint8_t *b) {
    float d = h2f(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    for (int j = 0; j < 16; j++) {
        int lo = (b[6 + j] & 0xF) | (((qh >> j) & 1) << 4);
        int hi = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

// Q5_1 (24): d, m, high bits, nibbles; (d * q) + m.
static void deq_q5_1(float *y, const uint8_t *b) {
    float d = h2f(b), m = h2f(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    for (int j = 0; j < 16; j++) {
        int lo = (b[8 + j] & 0xF) | (((qh >> j) & 1) << 4);
        int hi = (b[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

// Q8_0 (34): d, 32 int8; x * d.
static void deq_q8_0(float *y, const uint8_t *b) {
    float d = h2f(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

// Q4_K / Q5_K's 12 scale bytes: 8 six-bit scales and 8 six-bit mins.
static void scale_min_k4(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 0x3F, mn[j] = s[4 + j] & 0x3F;
        sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
        mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
}

// Q4_K (144): d, dmin, 12 scale bytes, 128 bytes of nibbles. Element
// e = 64 j + 32 h + l is nibble h of byte 32 j + l; sub-block e / 32.
// Value (d * sc) * q - (dmin * mn).
static void deq_q4_k(float *y, const uint8_t *b) {
    float d = h2f(b), dmin = h2f(b + 2);
    uint8_t sc[8], mn[8];
    scale_min_k4(b + 4, sc, mn);
    const uint8_t *qs = b + 16;
    for (int e = 0; e < QK_K; e++) {
        int j = e / 64, h = (e % 64) / 32, l = e % 32, k = e / 32;
        float dd = d * (float)sc[k], dm = dmin * (float)mn[k];
        y[e] = dd * (float)((qs[32 * j + l] >> (4 * h)) & 0xF) - dm;
    }
}

// Q5_K (176): d, dmin, scales, 32 bytes of high bits (bit e / 32 of byte e % 32), nibbles as Q4_K.
static void deq_q5_k(float *y, const uint8_t *b) {
    float d = h2f(b), dmin = h2f(b + 2);
    uint8_t sc[8], mn[8];
    scale_min_k4(b + 4, sc, mn);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int e = 0; e < QK_K; e++) {
        int j = e / 64, h = (e % 64) / 32, l = e % 32, k = e / 32;
        int q = ((qs[32 * j + l] >> (4 * h)) & 0xF) | (((qh[l] >> (e / 32)) & 1) << 4);
        float dd = d * (float)sc[k], dm = dmin * (float)mn[k];
        y[e] = dd * (float)q - dm;
    }
}

// Q6_K (210): 128 bytes low nibbles, 64 bytes of 2 high bits, 16 int8 scales, d.
// Element e = 128 j + 64 h + l (l < 64): nibble h of byte 64 j + l; high bits
// 2 s of byte 32 j + l' with e = 128 j + 32 s + l'; q - 32. Value (d * scale) * q.
static void deq_q6_k(float *y, const uint8_t *b) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = h2f(b + 208);
    for (int e = 0; e < QK_K; e++) {
        int j = e / 128, r = e % 128;
        int lo = (ql[64 * j + r % 64] >> (4 * (r / 64))) & 0xF;
        int hi = (qh[32 * j + r % 32] >> (2 * (r / 32))) & 3;
        float dd = d * (float)sc[e / 16];
        y[e] = dd * (float)((int8_t)(lo | (hi << 4)) - 32);
    }
}

void quant_dequant(float *dst, const void *src, DType dt, size_t n) {
    void (*f)(float *, const uint8_t *) = NULL;
    switch (dt) {
    case DT_Q8_0: f = deq_q8_0; break;
    case DT_Q4_0: f = deq_q4_0; break;
    case DT_Q4_1: f = deq_q4_1; break;
    case DT_Q5_0: f = deq_q5_0; break;
    case DT_Q5_1: f = deq_q5_1; break;
    case DT_Q4_K: f = deq_q4_k; break;
    case DT_Q5_K: f = deq_q5_k; break;
    case DT_Q6_K: f = deq_q6_k; break;
    default: return;
    }
    size_t be = (size_t)dtype_block(dt), bb = dtype_block_bytes(dt), nb = n / be;
    const uint8_t *s = src;
    for (size_t i = 0; i < nb; i++) f(dst + i * be, s + i * bb);
}
