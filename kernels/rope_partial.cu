// rope_partial twin: rotary embedding on the first rd of each head's D dims
// (pairs (j, j + rd/2)), the rest copied when out != x; forward and transpose.
// Tables (P, rd/2). CPU twin: kernels/rope_partial.c.
#include "cuda_common.h"

__global__ static void rope_partial_kernel(float *out, const float *x, const int *pos, const float *cos_t,
                                           const float *sin_t, int T, int nh, int D, int rd, float sign) {
    int half = rd / 2, w = half + (D - rd);  // per row: half rotated pairs, then the passed dims
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * nh * w) return;
    size_t row = i / w;  // (t, h)
    int j = (int)(i % w), t = (int)(row / nh);
    if (j >= half) {
        int d = rd + (j - half);
        if (out != x) out[row * D + d] = x[row * D + d];
        return;
    }
    float c = cos_t[(size_t)pos[t] * half + j], s = sign * sin_t[(size_t)pos[t] * half + j];
    float a = x[row * D + j], b = x[row * D + j + half];
    out[row * D + j] = a * c - b * s;
    out[row * D + j + half] = b * c + a * s;
}

extern "C" int rope_partial_forward_cuda(float *out, const float *x, const int *pos, const float *cos_t,
                                         const float *sin_t, int T, int nh, int D, int rd, cudaStream_t stream,
                                         PailErr *err) {
    size_t n = (size_t)T * nh * (rd / 2 + D - rd);
    if (!n) return 0;
    rope_partial_kernel<<<cuda_blocks(n, 256), 256, 0, stream>>>(out, x, pos, cos_t, sin_t, T, nh, D, rd, 1.0f);
    return cuda_launch_check("rope_partial_forward_cuda", err);
}

extern "C" int rope_partial_backward_cuda(float *dx, const float *dout, const int *pos, const float *cos_t,
                                          const float *sin_t, int T, int nh, int D, int rd, cudaStream_t stream,
                                          PailErr *err) {
    size_t n = (size_t)T * nh * (rd / 2 + D - rd);
    if (!n) return 0;
    rope_partial_kernel<<<cuda_blocks(n, 256), 256, 0, stream>>>(dx, dout, pos, cos_t, sin_t, T, nh, D, rd, -1.0f);
    return cuda_launch_check("rope_partial_backward_cuda", err);
}
