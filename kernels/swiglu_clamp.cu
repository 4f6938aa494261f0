// swiglu_clamp twin: gpt_oss's clamped gated activation
// out = (clamp(up, -limit, limit) + 1) g sigmoid(alpha g), g = min(gate, limit),
// elementwise, and its backward (the clamps pass the gradient inside their
// bounds, inclusive). CPU twin: kernels/swiglu_clamp.c.
#include "cuda_common.h"

__global__ static void swiglu_clamp_fwd(float *out, const float *gate, const float *up, size_t n, float alpha,
                                        float limit) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i] > limit ? limit : gate[i], u = up[i] > limit ? limit : up[i] < -limit ? -limit :
                                                                                              up[i];
    out[i] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
}

__global__ static void swiglu_clamp_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                                        const float *up, size_t n, float alpha, float limit) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g0 = gate[i], u0 = up[i], d = dout[i];
    float g = g0 > limit ? limit : g0, u = u0 > limit ? limit : u0 < -limit ? -limit :
                                                                              u0;
    float s = 1.0f / (1.0f + expf(-alpha * g));
    dgate[i] = g0 <= limit ? d * (u + 1.0f) * s * (1.0f + alpha * g * (1.0f - s)) : 0.0f;
    dup[i] = u0 >= -limit && u0 <= limit ? d * g * s : 0.0f;
}

extern "C" int swiglu_clamp_forward_cuda(float *out, const float *gate, const float *up, size_t n, float alpha,
                                         float limit, cudaStream_t stream, PailErr *err) {
    if (!n) return 0;
    swiglu_clamp_fwd<<<cuda_blocks(n, 256), 256, 0, stream>>>(out, gate, up, n, alpha, limit);
    return cuda_launch_check("swiglu_clamp_forward_cuda", err);
}

extern "C" int swiglu_clamp_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate,
                                          const float *up, size_t n, float alpha, float limit, cudaStream_t stream,
                                          PailErr *err) {
    if (!n) return 0;
    swiglu_clamp_bwd<<<cuda_blocks(n, 256), 256, 0, stream>>>(dgate, dup, dout, gate, up, n, alpha, limit);
    return cuda_launch_check("swiglu_clamp_backward_cuda", err);
}
