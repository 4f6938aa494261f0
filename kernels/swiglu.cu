// swiglu twin: out = silu(gate) * up elementwise and its backward.
// CPU twin: kernels/swiglu.c.
#include "cuda_common.h"

__global__ static void swiglu_fwd(float *out, const float *gate, const float *up, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ static void swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                                  const float *up, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i], s = 1.0f / (1.0f + expf(-g));
    dgate[i] = dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
    dup[i] = dout[i] * g * s;
}

extern "C" int swiglu_forward_cuda(float *out, const float *gate, const float *up, size_t n,
                                   cudaStream_t stream, PailErr *err) {
    if (!n) return 0;
    swiglu_fwd<<<cuda_blocks(n, 256), 256, 0, stream>>>(out, gate, up, n);
    return cuda_launch_check("swiglu_forward_cuda", err);
}

extern "C" int swiglu_backward_cuda(float *dgate, float *dup, const float *dout,
                                    const float *gate, const float *up, size_t n, cudaStream_t stream,
                                    PailErr *err) {
    if (!n) return 0;
    swiglu_bwd<<<cuda_blocks(n, 256), 256, 0, stream>>>(dgate, dup, dout, gate, up, n);
    return cuda_launch_check("swiglu_backward_cuda", err);
}
