// GGUF's block-quantized weights (kernels/dtype.h's DT_Q8_0 .. DT_Q6_K): a row
// of n elements is n / dtype_block(dt) blocks of dtype_block_bytes(dt) bytes,
// laid out as llama.cpp's ggml-common.h blocks (fp16 scales little-endian).
// The reference dequantization gives exactly gguf-py's floats (gguf/quants.py
// dequantize: the same operations in the same order, each rounded to fp32
// once; this file is built with -ffp-contract=off). Quantizing is llama.cpp's
// quantize_row_<type>_ref, block for block (kernels/quantize.c).
#pragma once
#include <stddef.h>
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// dst(n) = the n elements of src as fp32; n a multiple of dtype_block(dt), src
// at a block's start (any alignment). Nothing for a float dtype. One thread.
void quant_dequant(float *dst, const void *src, DType dt, size_t n);

// dst (dtype_row_bytes(dt, n) bytes) = src(n) quantized to dt exactly as
// llama.cpp's quantize_row_<type>_ref (no importance matrix): byte for byte
// what llama-quantize writes for a tensor without --imatrix. 0, or -1 when n is
// not a multiple of dt's block or dt is not quantized (every DT_Q* is done:
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K). One thread, no allocation.
int quant_quantize(void *dst, const float *src, DType dt, size_t n);

// The dtype llama-quantize stores a tensor of rows of row_elems elements in
// when asked for want (src/llama-quant.cpp's tensor_type_fallback): want when
// its block divides row_elems (or want is not quantized), else Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0 (a 32-block type keeps itself), and DT_F16 when
// 32 does not divide row_elems either.
DType quant_fallback(DType want, size_t row_elems);

#ifdef __cplusplus
}
#endif
