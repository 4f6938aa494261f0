// softcap twin: x = cap tanh(x / cap) in place. CPU twin: kernels/softcap.c.
#include "cuda_common.h"

__global__ static void softcap_k(float *x, size_t n, float cap) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

extern "C" int softcap_forward_cuda(float *x, size_t n, float cap, cudaStream_t stream, PailErr *err) {
    if (!n) return 0;
    softcap_k<<<cuda_blocks(n, 256), 256, 0, stream>>>(x, n, cap);
    return cuda_launch_check("softcap_forward_cuda", err);
}
