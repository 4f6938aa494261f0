// rope_interleaved twin: rotary embedding on adjacent pairs (2i, 2i+1) (Cohere),
// forward and transpose, over rope_table_build's (P, D/2) tables.
// CPU twin: kernels/rope_interleaved.c.
#include "cuda_common.h"

__global__ static void rope_il_kernel(float *out, const float *x, const int *pos, const float *cos_t,
                                      const float *sin_t, int T, int nh, int D, float sign) {
    int half = D / 2;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * nh * half) return;
    size_t row = i / half;  // (t, h)
    int j = (int)(i % half), t = (int)(row / nh);
    float c = cos_t[(size_t)pos[t] * half + j], s = sign * sin_t[(size_t)pos[t] * half + j];
    float a = x[row * D + 2 * j], b = x[row * D + 2 * j + 1];
    out[row * D + 2 * j] = a * c - b * s;
    out[row * D + 2 * j + 1] = b * c + a * s;
}

extern "C" int rope_interleaved_forward_cuda(float *out, const float *x, const int *pos, const float *cos_t,
                                             const float *sin_t, int T, int nh, int D, cudaStream_t stream,
                                             PailErr *err) {
    size_t n = (size_t)T * nh * (D / 2);
    if (!n) return 0;
    rope_il_kernel<<<cuda_blocks(n, 256), 256, 0, stream>>>(out, x, pos, cos_t, sin_t, T, nh, D, 1.0f);
    return cuda_launch_check("rope_interleaved_forward_cuda", err);
}

extern "C" int rope_interleaved_backward_cuda(float *dx, const float *dout, const int *pos, const float *cos_t,
                                              const float *sin_t, int T, int nh, int D, cudaStream_t stream,
                                              PailErr *err) {
    size_t n = (size_t)T * nh * (D / 2);
    if (!n) return 0;
    rope_il_kernel<<<cuda_blocks(n, 256), 256, 0, stream>>>(dx, dout, pos, cos_t, sin_t, T, nh, D, -1.0f);
    return cuda_launch_check("rope_interleaved_backward_cuda", err);
}
