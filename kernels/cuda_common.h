// Shared by the CUDA twins (kernels/*.cu) only: error plumbing from CUDA and
// cuBLAS status codes into PailErr, launch sizes and warp/block reductions.
// (The cuBLAS handle and the stream are the caller's: kernels.h's CudaBlas.)
// Not included from C code.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "kernels.h"
#include "quant_cuda.h"

// A CUDA runtime failure is reported as PAIL_ERR_IO naming the op and the call.
int cuda_check(cudaError_t e, const char *what, PailErr *err);
int cublas_check(cublasStatus_t s, const char *what, PailErr *err);
// After a kernel launch: reports a bad launch configuration (asynchronous
// faults surface at kernels_cuda_sync).
int cuda_launch_check(const char *what, PailErr *err);
// 0 when a row of K elements of a weight in dt is whole blocks (always, for a
// float dtype); else -1, PAIL_ERR_INVALID naming what (kernels/dtype.cu).
int dt_check_row(DType dt, int K, const char *what, PailErr *err);
// cuBLAS opened at run time (kernels/cublas_dl.c): 0, or -1 with err naming
// what is missing. Thread-safe.
extern "C" int cuda_dl_cublas(PailErr *err);

static inline unsigned cuda_blocks(size_t n, unsigned threads) {
    return (unsigned)((n + threads - 1) / threads);
}

__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum (or max) over a block of blockDim.x <= 1024 threads, a multiple of 32;
// every thread gets the result. sh: 32 floats of shared memory.
__device__ static inline float block_reduce(float v, float *sh, bool is_max) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();  // sh may still be read by a previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? warp_max(r) : warp_sum(r);
}

// Element i of a weight stored as dt (kernels/dtype.h) as fp32, exactly (a
// quantized one: its rows whole blocks, i = row * K + column; quant_cuda.h).
__device__ static inline float dt_load(const void *w, DType dt, size_t i) {
    if (dt == DT_F32) return ((const float *)w)[i];
    if (dt >= DT_Q8_0) return quant_load(w, dt, i);
    unsigned short h = ((const unsigned short *)w)[i];
    if (dt == DT_BF16) return __uint_as_float((unsigned)h << 16);
    return __half2float(__ushort_as_half(h));
}
