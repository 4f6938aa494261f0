// The small-T mat-vec on GGUF block-quantized rows (kernels/matmul_quant.c),
// internal to kernels/: kernels/matmul.c's forward_small calls these dot
// products for a W stored as DT_Q8_0 .. DT_Q6_K; its GEMMs dequantize W a
// panel at a time (dtype_to_f32_fn: on AVX2, matmul_quant_dequant_fn).
#pragma once
#include "dtype_cpu.h"

// r[t] = dot(w, x row t) for NT (1..4) x rows of stride K, w one row of K
// elements as stored (dtype_row_bytes(wdt, K) bytes, K a multiple of the
// block); xs: x's sums over each 32 elements (K / 32 a row), as
// matmul_quant_xsums gives them, or NULL (a slower exact path then).
typedef void (*QDotFn)(float *r, const void *w, const float *x, const float *xs, int K, int NT);

// The dot product for a quantized wdt on an ISA's path (AVX-512 runs the
// AVX2 one); NULL for a float dtype.
QDotFn matmul_quant_dot_fn(DType wdt, DtIsa isa);

// x's sums over each 32 elements, (T, K / 32), in the calling thread's own
// scratch (valid until its next call), for the dtypes whose blocks carry a
// min (Q4_1, Q5_1, Q4_K, Q5_K); NULL for the others or when the scratch
// could not be had. Each thread of a team computes its own: no barrier.
const float *matmul_quant_xsums(DType wdt, const float *x, int T, int K);

// dst(n) = src(n) dequantized exactly as quant_dequant (bit for bit), on an
// ISA's path: NULL below AVX2 (the reference is the scalar path).
// kernels/dtype.c's dtype_to_f32_fn returns it for a quantized dtype.
DtCvtFn matmul_quant_dequant_fn(DType wdt, DtIsa isa);

// The path's name for matmul_path_name: small (the mat-vec) or the GEMM.
const char *matmul_quant_path_name(int small, DType wdt, DtIsa isa);
