// geglu twin: out = gelu_tanh(gate) * up elementwise (as g sigmoid(2u)) and its
// backward. CPU twin: kernels/geglu.c.
#include "cuda_common.h"

#define GELU_K0 0.7978845608028654f  // sqrt(2/pi)
#define GELU_K1 0.044715f

__global__ static void geglu_fwd(float *out, const float *gate, const float *up, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    out[i] = g / (1.0f + expf(-2.0f * GELU_K0 * (g + GELU_K1 * g * g * g))) * up[i];
}

__global__ static void geglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                                 const float *up, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i], s = 1.0f / (1.0f + expf(-2.0f * GELU_K0 * (g + GELU_K1 * g * g * g)));
    float du = 2.0f * GELU_K0 * (1.0f + 3.0f * GELU_K1 * g * g);
    dgate[i] = dout[i] * up[i] * (s + g * s * (1.0f - s) * du);
    dup[i] = dout[i] * g * s;
}

extern "C" int geglu_forward_cuda(float *out, const float *gate, const float *up, size_t n,
                                  cudaStream_t stream, PailErr *err) {
    if (!n) return 0;
    geglu_fwd<<<cuda_blocks(n, 256), 256, 0, stream>>>(out, gate, up, n);
    return cuda_launch_check("geglu_forward_cuda", err);
}

extern "C" int geglu_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate,
                                   const float *up, size_t n, cudaStream_t stream, PailErr *err) {
    if (!n) return 0;
    geglu_bwd<<<cuda_blocks(n, 256), 256, 0, stream>>>(dgate, dup, dout, gate, up, n);
    return cuda_launch_check("geglu_backward_cuda", err);
}
