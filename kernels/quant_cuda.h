// The device side of kernels/quant.c: element i of a weight in one of GGUF's
// block-quantized dtypes (DT_Q8_0 .. DT_Q6_K) as fp32, exactly quant_dequant's
// float. Each element is decoded on its own from its block (no per-block
// staging), so a gather, a panel conversion or a dot product reads any element.
// Rounding: every multiply and add is QMUL / QADD / QSUB, on the device
// __fmul_rn / __fadd_rn / __fsub_rn, which nvcc never contracts (by default,
// -fmad=true, it fuses a * b + c into one FMA, rounding once where the
// reference and gguf-py round twice). Here that is belt and braces: every
// product that an add follows is exact in fp32 (an fp16 scale's 11 bits times
// a 5-bit q, or times a 6-bit sub-block scale and then a 5-bit q: at most 22
// bits), so a fused and an unfused d * q + m give the same float; Q6_K's last
// product (up to 25 bits) rounds, and no add follows it. Bytes are read one at
// a time (the fp16 and u32 fields of 18-, 22- and 210-byte blocks are unaligned).
// Included by cuda_common.h (dt_load). Also compiles as host C (plain
// operators; the includer builds with -ffp-contract=off): check_kernels_cuda
// checks this layout arithmetic against quant_dequant in every build, GPU or not.
#pragma once
#include "dtype.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define QDEV __device__ static inline
#define QMUL(a, b) __fmul_rn((a), (b))
#define QADD(a, b) __fadd_rn((a), (b))
#define QSUB(a, b) __fsub_rn((a), (b))
QDEV float quant_h2f(const unsigned char *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
}
#else
#include "dtype_cpu.h"
#define QDEV static inline
#define QMUL(a, b) ((a) * (b))
#define QADD(a, b) ((a) + (b))
#define QSUB(a, b) ((a) - (b))
QDEV float quant_h2f(const unsigned char *p) { return dt_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
#endif

// Nibble j (< 32) of a 32-element block's 16 bytes: element j < 16 is the low
// nibble of byte j, element 16 + j its high nibble.
QDEV int quant_nib32(const unsigned char *qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

// Bit j of a little-endian u32 at p.
QDEV int quant_bit(const unsigned char *p, int j) { return (p[j >> 3] >> (j & 7)) & 1; }

// Q4_K / Q5_K: the six-bit scale (mn = 0) or min (mn = 1) of sub-block k (< 8) from the 12 scale bytes.
QDEV int quant_scale_min_k4(const unsigned char *s, int k, int mn) {
    if (k < 4) return s[4 * mn + k] & 0x3F;
    return (mn ? s[k + 4] >> 4 : s[k + 4] & 0x0F) | ((s[k - 4 + 4 * mn] >> 2) & 0x30);
}

// Element e of the block at b (kernels/quant.c has each layout and formula).
QDEV float quant_block_elem(const unsigned char *b, DType dt, int e) {
    switch (dt) {
    case DT_Q8_0: return QMUL((float)(signed char)b[2 + e], quant_h2f(b));
    case DT_Q4_0: return QMUL(quant_h2f(b), (float)(quant_nib32(b + 2, e) - 8));
    case DT_Q4_1: return QADD(QMUL(quant_h2f(b), (float)quant_nib32(b + 4, e)), quant_h2f(b + 2));
    case DT_Q5_0: return QMUL(quant_h2f(b), (float)((quant_nib32(b + 6, e) | quant_bit(b + 2, e) << 4) - 16));
    case DT_Q5_1:
        return QADD(QMUL(quant_h2f(b), (float)(quant_nib32(b + 8, e) | quant_bit(b + 4, e) << 4)), quant_h2f(b + 2));
    case DT_Q4_K:
    case DT_Q5_K: {  // e = 64 j + 32 h + l: nibble h of byte 32 j + l; sub-block k = e / 32
        int k = e >> 5, l = e & 31;
        const unsigned char *qs = b + (dt == DT_Q4_K ? 16 : 48);
        int q = (qs[32 * (e >> 6) + l] >> (4 * (k & 1))) & 0xF;
        if (dt == DT_Q5_K) q |= ((b[16 + l] >> k) & 1) << 4;  // bit k of high-bit byte l
        float dd = QMUL(quant_h2f(b), (float)quant_scale_min_k4(b + 4, k, 0));
        float dm = QMUL(quant_h2f(b + 2), (float)quant_scale_min_k4(b + 4, k, 1));
        return QSUB(QMUL(dd, (float)q), dm);
    }
    case DT_Q6_K: {  // e = 128 j + r: nibble r / 64 of byte 64 j + r % 64, bits 2 (r / 32) of byte 128 + 32 j + r % 32
        int j = e >> 7, r = e & 127;
        int lo = (b[64 * j + (r & 63)] >> (4 * (r >> 6))) & 0xF;
        int hi = (b[128 + 32 * j + (r & 31)] >> (2 * (r >> 5))) & 3;
        float dd = QMUL(quant_h2f(b + 208), (float)(signed char)b[192 + (e >> 4)]);
        return QMUL(dd, (float)((lo | hi << 4) - 32));
    }
    default: return 0.0f;
    }
}

// dtype_block_bytes (whose table is host-only).
QDEV unsigned quant_block_bytes(DType dt) {
    switch (dt) {
    case DT_Q8_0: return 34;
    case DT_Q4_0: return 18;
    case DT_Q4_1: return 20;
    case DT_Q5_0: return 22;
    case DT_Q5_1: return 24;
    case DT_Q4_K: return 144;
    case DT_Q5_K: return 176;
    default: return 210;  // DT_Q6_K
    }
}

// Element i of a quantized weight whose rows are whole blocks: rows lie back to
// back, so flat index i (row * K + column) is element i % block of block i / block.
// (Blocks of 32 or 256: shifts, not a 64-bit division, on the device.)
QDEV float quant_load(const void *w, DType dt, size_t i) {
    int sh = dt >= DT_Q4_K ? 8 : 5;
    return quant_block_elem((const unsigned char *)w + (i >> sh) * quant_block_bytes(dt), dt,
                            (int)(i & (((size_t)1 << sh) - 1)));
}
