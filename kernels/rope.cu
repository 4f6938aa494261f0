// rope twin: half-rotation rotary embedding by per-token position ids, forward
// and transpose. The cos/sin tables come from rope_table_build on the host,
// copied once. CPU twin: kernels/rope.c.
#include "cuda_common.h"

__global__ static void rope_kernel(float *out, const float *x, const int *pos, const float *cos_t,
                                   const float *sin_t, int T, int nh, int D, float sign) {
    int half = D / 2;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * nh * half) return;
    size_t row = i / half;  // (t, h)
    int j = (int)(i % half), t = (int)(row / nh);
    float c = cos_t[(size_t)pos[t] * half + j], s = sign * sin_t[(size_t)pos[t] * half + j];
    float a = x[row * D + j], b = x[row * D + j + half];
    out[row * D + j] = a * c - b * s;
    out[row * D + j + half] = b * c + a * s;
}

extern "C" int rope_forward_cuda(float *out, const float *x, const int *pos, const float *cos_t,
                                 const float *sin_t, int T, int nh, int D, cudaStream_t stream,
                                 PailErr *err) {
    size_t n = (size_t)T * nh * (D / 2);
    if (!n) return 0;
    rope_kernel<<<cuda_blocks(n, 256), 256, 0, stream>>>(out, x, pos, cos_t, sin_t, T, nh, D, 1.0f);
    return cuda_launch_check("rope_forward_cuda", err);
}

extern "C" int rope_backward_cuda(float *dx, const float *dout, const int *pos, const float *cos_t,
                                  const float *sin_t, int T, int nh, int D, cudaStream_t stream,
                                  PailErr *err) {
    size_t n = (size_t)T * nh * (D / 2);
    if (!n) return 0;
    rope_kernel<<<cuda_blocks(n, 256), 256, 0, stream>>>(dx, dout, pos, cos_t, sin_t, T, nh, D, -1.0f);
    return cuda_launch_check("rope_backward_cuda", err);
}
