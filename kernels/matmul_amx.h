// The bf16 GEMM on Intel AMX tiles (internal to kernels/): the _dt products
// of many rows over a bf16 weight, C = alpha op(A) op(B) + beta C with A fp32
// rounded to bf16 (round to nearest even) and B the bf16 weight as stored,
// accumulated in fp32 by tdpbf16ps. Chosen at run time where the CPU has
// AMX-BF16 and the kernel lets this process use the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM): gemm_bf16.h says when it runs.
// doc/kernels.md has the layout and the measurements.
#pragma once
#include <stdint.h>

// 1 when this process can run AMX-BF16 tiles (CPU, OS, permission), decided
// once, thread-safe.
int amx_bf16_usable(void);
// A KERNEL_TEAM body (kernels/parallel.h): every thread of the team calls it
// with the same arguments. C(M,N) = alpha op(A)(M,K) op(B) + beta C, row-major;
// A fp32 (lda), B bf16 (ldb elements): B is (N,K) when transB, else (K,N).
// Returns 0 (done, no barrier at the end), or -1 on every thread when the
// scratch could not be allocated (nothing written; the caller takes another
// path).
int amx_gemm_team(int transB, int M, int N, int K, float alpha, const float *A, int lda,
                  const uint16_t *B, int ldb, float beta, float *C, int ldc);
