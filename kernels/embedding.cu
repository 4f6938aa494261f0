// embedding twin: gather rows of the table, and the scatter-add backward with
// atomics (tokens repeat). Token ids must be checked on the host (the CPU
// embedding_forward does) before they reach the device. The _dt gather reads a
// table in a storage dtype, converting each element exactly (a quantized one
// decoded from its block, as quant_dequant: its rows whole blocks). CPU twin:
// embedding.c.
#include "cuda_common.h"

__global__ static void gather(float *out, const void *table, DType tdt, const int *tokens, int T,
                              int C, int V) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    size_t t = i / C, c = i % C;
    int tok = tokens[t];
    out[i] = tok >= 0 && tok < V ? dt_load(table, tdt, (size_t)tok * C + c) : 0.0f;  // never read out of bounds
}

__global__ static void scatter_add(float *dtable, const float *dout, const int *tokens, int T,
                                   int C) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    size_t t = i / C, c = i % C;
    atomicAdd(&dtable[(size_t)tokens[t] * C + c], dout[i]);
}

extern "C" int embedding_forward_dt_cuda(float *out, const void *table, DType tdt,
                                         const int *tokens, int T, int C, int V, cudaStream_t stream,
                                         PailErr *err) {
    if (dt_check_row(tdt, C, "embedding_forward_dt_cuda", err)) return -1;
    if (T <= 0) return 0;
    gather<<<cuda_blocks((size_t)T * C, 256), 256, 0, stream>>>(out, table, tdt, tokens, T, C, V);
    return cuda_launch_check("embedding_forward_cuda", err);
}

extern "C" int embedding_forward_cuda(float *out, const float *table, const int *tokens, int T,
                                      int C, int V, cudaStream_t stream, PailErr *err) {
    return embedding_forward_dt_cuda(out, table, DT_F32, tokens, T, C, V, stream, err);
}

extern "C" int embedding_backward_cuda(float *dtable, const float *dout, const int *tokens, int T,
                                       int C, cudaStream_t stream, PailErr *err) {
    if (T <= 0) return 0;
    scatter_add<<<cuda_blocks((size_t)T * C, 256), 256, 0, stream>>>(dtable, dout, tokens, T, C);
    return cuda_launch_check("embedding_backward_cuda", err);
}
