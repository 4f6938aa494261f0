// rmsnorm twin: one block per row for the forward and dx (block reductions), one
// thread per column for dw (coalesced over columns, no atomics).
// CPU twin: kernels/rmsnorm.c.
#include "cuda_common.h"

__global__ static void rms_fwd(float *out, float *rstd, const float *x, const float *w, int C,
                               float eps) {
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * C;
    float ss = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
    ss = block_reduce(ss, sh, false);
    float s = rsqrtf(ss / C + eps);
    if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = s;
    float *o = out + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = xr[c] * s * w[c];
}

__global__ static void rms_bwd_dx(float *dx, const float *dout, const float *x, const float *w,
                                  const float *rstd, int C) {
    __shared__ float sh[32];
    size_t off = (size_t)blockIdx.x * C;
    float s = rstd[blockIdx.x], dot = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dot += dout[off + c] * w[c] * x[off + c];
    dot = block_reduce(dot, sh, false);
    float m = dot * s * s / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dx[off + c] = s * (dout[off + c] * w[c] - x[off + c] * m);
}

__global__ static void rms_bwd_dw(float *dw, const float *dout, const float *x, const float *rstd,
                                  int rows, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0;
    for (int r = 0; r < rows; r++) acc += dout[(size_t)r * C + c] * x[(size_t)r * C + c] * rstd[r];
    dw[c] += acc;
}

extern "C" int rmsnorm_forward_cuda(float *out, float *rstd, const float *x, const float *w,
                                    int rows, int C, float eps, cudaStream_t stream, PailErr *err) {
    if (rows <= 0) return 0;
    rms_fwd<<<rows, 256, 0, stream>>>(out, rstd, x, w, C, eps);
    return cuda_launch_check("rmsnorm_forward_cuda", err);
}

extern "C" int rmsnorm_backward_cuda(float *dx, float *dw, const float *dout, const float *x,
                                     const float *w, const float *rstd, int rows, int C,
                                     cudaStream_t stream, PailErr *err) {
    if (rows <= 0) return 0;
    rms_bwd_dx<<<rows, 256, 0, stream>>>(dx, dout, x, w, rstd, C);
    if (cuda_launch_check("rmsnorm_backward_cuda dx", err)) return -1;
    if (dw) {
        rms_bwd_dw<<<cuda_blocks(C, 128), 128, 0, stream>>>(dw, dout, x, rstd, rows, C);
        return cuda_launch_check("rmsnorm_backward_cuda dw", err);
    }
    return 0;
}
