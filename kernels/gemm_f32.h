// Which GEMM the fp32 weights' forward gets (internal to kernels/): out = x
// W^T with more than matmul_small_t_max rows and W fp32 (dx and dW stay on
// OpenBLAS: gemm_f32.c says why).
//   openblas   OpenBLAS's sgemm for the core it detects (or the one
//              threads_policy_apply chose), single-threaded inside the
//              OpenMP team, one column slice per thread (kernels/matmul.c);
//   pail       kernels/gemm_f32.c: AVX-512 FMAs on W as stored, x
//              transposed once per call and shared.
// Both are fp32 arithmetic; only the order of the sums differs. The default
// is GEMM_F32_DEFAULT where the dtype ISA is avx512, else openblas;
// PAIL_KERNELS_SGEMM=openblas|pail chooses. doc/kernels.md has the measurements.
#pragma once

typedef enum { GEMM_F32_OPENBLAS, GEMM_F32_PAIL, GEMM_F32_COUNT } GemmF32;
#define GEMM_F32_DEFAULT GEMM_F32_PAIL
// pail's takes forwards of at most this many rows (x's); above, OpenBLAS even
// on the pail path. Measured (bench_kernels sgemm, SmolLM2's layers, 2 Zen 5
// vCPUs): pail's 1.10-1.18x OpenBLAS at 64 rows, 1.03-1.09x at 128-256,
// 0.97-1.01x at 384, 0.91-1.01x at 512.
extern int gemm_f32_rows_max;

int gemm_f32_usable(GemmF32 g);
GemmF32 gemm_f32_path(void);
// Tests and benches: -1 (nothing changed) when not usable. Not while kernels run.
int gemm_f32_force(GemmF32 g);
// "openblas", "pail" (PAIL_KERNELS_SGEMM's words).
const char *gemm_f32_word(GemmF32 g);

// A KERNEL_TEAM body, as bf16dp_gemm_team (gemm_bf16.h) with B fp32 and
// transposed: C(M,N) = alpha A(M,K) B(N,K)^T + beta C. 0: done (no barrier at
// the end); -1 on every thread: no scratch, nothing written.
int f32_gemm_team(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc);
