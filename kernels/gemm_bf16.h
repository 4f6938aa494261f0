// Which GEMM the bf16 weights get (internal to kernels/): the _dt products of
// more than matmul_small_t_max rows over a bf16 weight, C = alpha op(A) op(B)
// + beta C with A fp32 and B the bf16 weight.
//   exact      W converted to fp32 panels, fp32 sgemm: the products of the
//              fp32 weights' values, bit for bit (kernels/matmul.c);
//   avx512bf16 vdpbf16ps on the weight as stored, A rounded to bf16 (round to
//              nearest even) once per call, fp32 accumulation (this file's
//              kernel, kernels/gemm_bf16.c);
//   amx        the same rule on AMX tiles (kernels/matmul_amx.c).
// The default is the fastest the CPU has: amx, else avx512bf16 on an AMD CPU
// (Zen 4 / 5 run vdpbf16ps at the FMA's rate; Intel's without AMX at half
// of it, where exact is as fast), else exact; while the dtype ISA is avx512
// (PAIL_KERNELS_ISA=avx2|scalar turns both off); PAIL_KERNELS_GEMM=exact|avx512bf16|amx chooses (one the CPU lacks: a
// warning and the default). f16 weights and fp32 weights always take the
// exact path. doc/kernels.md has the layouts and the measurements.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum { GEMM_BF16_EXACT, GEMM_BF16_AVX512, GEMM_BF16_AMX, GEMM_BF16_COUNT } GemmBf16;

// 1 when this process can run that path (CPU, OS, permission); exact always.
int gemm_bf16_usable(GemmBf16 g);
// The path the bf16 GEMMs take now (decided once, then as forced).
GemmBf16 gemm_bf16_path(void);
// Tests and benches: take g from now on; -1 (nothing changed) when it is not
// usable. Not to be called while kernels run.
int gemm_bf16_force(GemmBf16 g);
// "exact", "avx512bf16", "amx" (PAIL_KERNELS_GEMM's words).
const char *gemm_bf16_word(GemmBf16 g);

// A KERNEL_TEAM body (kernels/parallel.h), as amx_gemm_team (matmul_amx.h):
// every thread of the team calls it with the same arguments. C(M,N) = alpha
// op(A)(M,K) op(B) + beta C, row-major; A fp32 (lda), B bf16 (ldb elements):
// B is (N,K) when transB, else (K,N). Returns 0 (done, no barrier at the end),
// or -1 on every thread when the scratch could not be allocated (nothing
// written; the caller takes the exact path).
int bf16dp_gemm_team(int transB, int M, int N, int K, float alpha, const float *A, int lda,
                     const uint16_t *B, int ldb, float beta, float *C, int ldc);

// The calling thread's scratch for these GEMMs (gemm_bf16.c, gemm_f32.c): 64-byte
// aligned, grown to bytes, never shrunk; NULL when it cannot be had.
void *gemm_scratch(size_t bytes);
