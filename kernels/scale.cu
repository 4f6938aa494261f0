// scale twin: x *= alpha in place (one rounded product per value: the CPU's
// bits). CPU twin: kernels/scale.c.
#include "cuda_common.h"

__global__ static void scale_k(float *x, size_t n, float alpha) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= alpha;
}

extern "C" int scale_forward_cuda(float *x, size_t n, float alpha, cudaStream_t stream, PailErr *err) {
    if (!n) return 0;
    scale_k<<<cuda_blocks(n, 256), 256, 0, stream>>>(x, n, alpha);
    return cuda_launch_check("scale_forward_cuda", err);
}
