// GGUF block dequantization to fp32 (see gguf.h), written to give exactly the
// floats of gguf-py's `gguf.quants.dequantize` (gguf/quants.py, 0.19): the same
// operations in the same order, each rounded to fp32 once. The types pail
// computes on are kernels/quant.c's; Q2_K, Q3_K and MXFP4 (dequantized at import only) are here. This file is built
// with -ffp-contract=off (GNUmakefile): numpy never fuses `d * q + m`, and an
// FMA would round once where numpy rounds twice. Scales are fp16 converted
// exactly (kernels/dtype_cpu.h). Not quantization: pail only reads.
#include <stdint.h>
#include <string.h>
#include "dtype_cpu.h"
#include "model/gguf.h"
#include "quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return dt_f16_to_f32(h);
}


// Q2_K (84): 16 scale bytes (low nibble scale, high nibble min), 64 bytes of
// 2-bit values, d, dmin. Element e = 128 h + 32 s + l is bits 2s of byte
// 32 h + l; sub-block e / 16. Value (d * sc) * q - (dmin * mn).
static void deq_q2_k(float *y, const uint8_t *b) {
    const uint8_t *sc = b, *qs = b + 16;
    float d = h2f(b + 80), dmin = h2f(b + 82);
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, s = (e % 128) / 32, l = e % 32, k = e / 16;
        float dl = d * (float)(sc[k] & 0xF), ml = dmin * (float)(sc[k] >> 4);
        y[e] = dl * (float)((qs[32 * h + l] >> (2 * s)) & 3) - ml;
    }
}

// Q3_K (110): 32 bytes hmask, 64 bytes low 2 bits, 12 bytes of 6-bit scales, d.
// Element e: low bits as Q2_K, high bit (hmask[e % 32] >> e / 32) & 1, and
// q = low - 4 * (1 - high). Scale k (of 16): low nibble of byte k (k < 8) or
// high nibble of byte k - 8, plus bits 2 (k / 4) of byte 8 + k % 4 as bits 4-5;
// minus 32. Value (d * scale) * q.
static void deq_q3_k(float *y, const uint8_t *b) {
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    float d = h2f(b + 108);
    float dl[16];
    for (int k = 0; k < 16; k++) {
        int lo = k < 8 ? sc[k] & 0xF : sc[k - 8] >> 4;
        int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
        dl[k] = d * (float)((int8_t)(lo | (hi << 4)) - 32);
    }
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, s = (e % 128) / 32, l = e % 32;
        int ql = (qs[32 * h + l] >> (2 * s)) & 3, qh = ((hm[l] >> (e / 32)) & 1) ^ 1;
        y[e] = dl[e / 16] * (float)(ql - (qh << 2));
    }
}

// MXFP4 (17, ggml's block_mxfp4: gpt-oss's experts): an E8M0 scale byte e, then 16 bytes of 4-bit
// E2M1 codes. Element j < 16 is byte j's low nibble, element j + 16 its high nibble (ggml's
// dequantize_row_mxfp4); value kvalues[code] * 2^(e - 128) (the doubled E2M1 values and half the
// scale: ggml_e8m0_to_fp32_half, whose e 0 and 1 are the subnormals 2^-128 and 2^-127).
static void deq_mxfp4(float *y, const uint8_t *b) {
    static const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : (uint32_t)(b[0] - 1) << 23;
    float d;
    memcpy(&d, &bits, sizeof d);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)kv[b[1 + j] & 0xF] * d;
        y[j + 16] = (float)kv[b[1 + j] >> 4] * d;
    }
}

int gguf_dequantize(float *dst, const void *src, GgmlType type, uint64_t n) {
    size_t be, bb;
    if (gguf_type_block(type, &be, &bb) < 0 || n % be) return -1;
    const uint8_t *s = src;
    uint64_t nb = n / be;
    switch (type) {
    case GGML_TYPE_F32: memcpy(dst, src, n * 4); return 0;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; i++) dst[i] = h2f(s + 2 * i);
        return 0;
    case GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = dt_bf16_to_f32(h);
        }
        return 0;
    default: break;
    }
    int dt = gguf_type_dtype(type);
    if (dt >= 0 && dtype_is_quant((DType)dt)) {  // the types pail computes on: kernels/quant.c
#pragma omp parallel for schedule(static) if (nb > 4096)
        for (uint64_t i = 0; i < nb; i += 64) {
            uint64_t m = nb - i < 64 ? nb - i : 64;
            quant_dequant(dst + i * be, s + i * bb, (DType)dt, m * be);
        }
        return 0;
    }
    void (*f)(float *, const uint8_t *) = NULL;
    switch (type) {
    case GGML_TYPE_Q2_K: f = deq_q2_k; break;
    case GGML_TYPE_Q3_K: f = deq_q3_k; break;
    case GGML_TYPE_MXFP4: f = deq_mxfp4; break;
    default: return -1;
    }
#pragma omp parallel for schedule(static) if (nb > 4096)
    for (uint64_t i = 0; i < nb; i++) f(dst + i * be, s + i * bb);
    return 0;
}

int gguf_type_dtype(GgmlType type) {
    switch (type) {
    case GGML_TYPE_F32: return DT_F32;
    case GGML_TYPE_F16: return DT_F16;
    case GGML_TYPE_BF16: return DT_BF16;
    case GGML_TYPE_Q8_0: return DT_Q8_0;
    case GGML_TYPE_Q4_0: return DT_Q4_0;
    case GGML_TYPE_Q4_1: return DT_Q4_1;
    case GGML_TYPE_Q5_0: return DT_Q5_0;
    case GGML_TYPE_Q5_1: return DT_Q5_1;
    case GGML_TYPE_Q4_K: return DT_Q4_K;
    case GGML_TYPE_Q5_K: return DT_Q5_K;
    case GGML_TYPE_Q6_K: return DT_Q6_K;
    default: return -1;
    }
}
