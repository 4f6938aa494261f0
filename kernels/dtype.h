// Storage dtypes of frozen base weights (kernels that take a weight in its
// checkpoint dtype). Activations, gradients, LoRA parameters and optimiser
// state are always fp32; only a frozen weight matrix (a projection, the
// embedding table, the LM head) may be stored as bf16 or f16, and every kernel
// converts it to fp32 exactly (every bf16 and f16 value is an fp32 value) --
// or as one of GGUF's block-quantized types (kernels/quant.h), whose blocks of
// 32 or 256 elements along a row the kernels read as stored (the reference:
// the row dequantized to fp32 as gguf-py does, kernels/quant.c).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The float dtypes first (DT_FLOAT_COUNT of them), then the quantized ones in
// llama.cpp's layouts (ggml-common.h's block_q8_0 ... block_q6_K).
typedef enum {
    DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2,
    DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K,
    DT_COUNT
} DType;
#define DT_FLOAT_COUNT 3

static inline int dtype_is_quant(DType dt) { return dt >= DT_Q8_0 && dt < DT_COUNT; }
// Elements per block: 1 (a float dtype), 32 (Q8_0 .. Q5_1) or 256 (the K-quants).
static inline int dtype_block(DType dt) { return dt < DT_Q8_0 ? 1 : dt >= DT_Q4_K ? 256 : 32; }
// Bytes of one block (of one element for a float dtype).
static inline size_t dtype_block_bytes(DType dt) {
    static const unsigned char bytes[DT_COUNT] = {4, 2, 2, 34, 18, 20, 22, 24, 144, 176, 210};
    return (unsigned)dt < DT_COUNT ? bytes[dt] : 0;
}
// Bytes of n consecutive elements of a row (n a multiple of dtype_block(dt)).
static inline size_t dtype_row_bytes(DType dt, size_t n) { return n / (size_t)dtype_block(dt) * dtype_block_bytes(dt); }
// Bytes of one element: the float dtypes only (a quantized element has no size of its own).
static inline size_t dtype_size(DType dt) { return dt == DT_F32 ? 4 : 2; }
// "f32", "bf16", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"
const char *dtype_name(DType dt);
int dtype_parse(const char *s, DType *out);       // those spellings; -1 otherwise
// dst(n) = src(n) as fp32 (exact; a quantized dtype: dequantized, n a multiple of
// its block and src at a block's start). src any alignment; vectorised, one thread.
void dtype_to_f32(float *dst, const void *src, DType dt, size_t n);
// dst(n) = src(n) rounded to nearest even (torch's .to()); NaN stays NaN, f16 overflow -> inf.
// Float dtypes only (quantizing is kernels/quant.h's quant_quantize).
void dtype_from_f32(void *dst, const float *src, DType dt, size_t n);
// dst(n) in dtype to = src(n) in dtype from: a copy when they match, else
// through fp32 a chunk at a time (exact when widening, rounded once when
// narrowing; from may be quantized (dequantized), to may not unless it is
// from). src any alignment; one thread.
void dtype_convert(void *dst, DType to, const void *src, DType from, size_t n);
// The instruction set the CPU kernels picked at run time for dtype work
// ("avx512", "avx2", "scalar"); PAIL_KERNELS_ISA=avx2|scalar in the environment
// forces a lower one (tests run each path).
const char *dtype_isa(void);

#ifdef __cplusplus
}
#endif
