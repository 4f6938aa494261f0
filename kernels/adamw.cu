// adamw twin: global sum of squares (double accumulation, atomics per block) and
// the torch.optim.AdamW update, elementwise, on the caller's stream (the
// backend's). CPU twin: kernels/adamw.c (whose sum is in a fixed order; the
// atomics here add the blocks' sums in the order they finish).
#include "cuda_common.h"

__global__ static void sumsq_kernel(double *out, const float *g, size_t n) {
    __shared__ double sh[32];
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) atomicAdd(out, s);
    }
}

__global__ static void adamw_kernel(float *p, float *m, float *v, const float *g, size_t n,
                                    float beta1, float beta2, float eps, float decay,
                                    float step_size, float bc2_sqrt, float grad_scale) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi, v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

extern "C" int adamw_grad_sumsq_cuda(double *sumsq, const float *g, size_t n, cudaStream_t stream, PailErr *err) {
    if (cuda_check(cudaMemsetAsync(sumsq, 0, sizeof(double), stream), "adamw_grad_sumsq_cuda memset", err))
        return -1;
    if (!n) return 0;
    unsigned blocks = cuda_blocks(n, 256);
    if (blocks > 1024) blocks = 1024;
    sumsq_kernel<<<blocks, 256, 0, stream>>>(sumsq, g, n);
    return cuda_launch_check("adamw_grad_sumsq_cuda", err);
}

extern "C" int adamw_update_cuda(float *p, float *m, float *v, const float *g, size_t n, float lr,
                                 float beta1, float beta2, float eps, float weight_decay, int step,
                                 float grad_scale, cudaStream_t stream, PailErr *err) {
    if (!n) return 0;
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    adamw_kernel<<<cuda_blocks(n, 256), 256, 0, stream>>>(p, m, v, g, n, beta1, beta2, eps,
                                               1.0f - lr * weight_decay, lr / bc1, sqrtf(bc2),
                                               grad_scale);
    return cuda_launch_check("adamw_update_cuda", err);
}
