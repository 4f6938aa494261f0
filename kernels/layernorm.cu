// layernorm twin (Cohere's LayerNorm without a bias, weight rows cycling per
// row: wrows = 1 or H): one block per row for the forward and dx (block
// reductions), one thread per (weight row, column) for dw (no atomics).
// CPU twin: kernels/layernorm.c.
#include "cuda_common.h"

__global__ static void ln_fwd(float *out, float *mean, float *rstd, const float *x, const float *w, int C, int wrows,
                              float eps) {
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * C, *wr = w + (size_t)(blockIdx.x % wrows) * C;
    float sum = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) sum += xr[c];
    float mu = block_reduce(sum, sh, false) / C;
    float ss = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += (xr[c] - mu) * (xr[c] - mu);
    ss = block_reduce(ss, sh, false);
    float s = rsqrtf(ss / C + eps);
    if (threadIdx.x == 0) {
        if (mean) mean[blockIdx.x] = mu;
        if (rstd) rstd[blockIdx.x] = s;
    }
    float *o = out + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = (xr[c] - mu) * s * wr[c];
}

__global__ static void ln_bwd_dx(float *dx, const float *dout, const float *x, const float *w, const float *mean,
                                 const float *rstd, int C, int wrows) {
    __shared__ float sh[32];
    size_t off = (size_t)blockIdx.x * C;
    const float *wr = w + (size_t)(blockIdx.x % wrows) * C;
    float s = rstd[blockIdx.x], mu = mean[blockIdx.x], sg = 0, sgx = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float g = dout[off + c] * wr[c];
        sg += g;
        sgx += g * (x[off + c] - mu) * s;
    }
    float mg = block_reduce(sg, sh, false) / C;
    float mgx = block_reduce(sgx, sh, false) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dx[off + c] = s * (dout[off + c] * wr[c] - mg - (x[off + c] - mu) * s * mgx);
}

__global__ static void ln_bwd_dw(float *dw, const float *dout, const float *x, const float *mean, const float *rstd,
                                 int rows, int C, int wrows) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)wrows * C) return;
    int k = (int)(i / C), c = (int)(i % C);
    float acc = 0;
    for (int r = k; r < rows; r += wrows) acc += dout[(size_t)r * C + c] * (x[(size_t)r * C + c] - mean[r]) * rstd[r];
    dw[i] += acc;
}

extern "C" int layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *x, const float *w, int rows,
                                      int C, int wrows, float eps, cudaStream_t stream, PailErr *err) {
    if (rows <= 0) return 0;
    ln_fwd<<<rows, 256, 0, stream>>>(out, mean, rstd, x, w, C, wrows, eps);
    return cuda_launch_check("layernorm_forward_cuda", err);
}

extern "C" int layernorm_backward_cuda(float *dx, float *dw, const float *dout, const float *x, const float *w,
                                       const float *mean, const float *rstd, int rows, int C, int wrows,
                                       cudaStream_t stream, PailErr *err) {
    if (rows <= 0) return 0;
    ln_bwd_dx<<<rows, 256, 0, stream>>>(dx, dout, x, w, mean, rstd, C, wrows);
    if (cuda_launch_check("layernorm_backward_cuda dx", err)) return -1;
    if (dw) {
        size_t n = (size_t)wrows * C;
        ln_bwd_dw<<<cuda_blocks(n, 128), 128, 0, stream>>>(dw, dout, x, mean, rstd, rows, C, wrows);
        return cuda_launch_check("layernorm_backward_cuda dw", err);
    }
    return 0;
}
