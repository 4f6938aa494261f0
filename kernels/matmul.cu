// matmul twin: out(T,N) = alpha x W^T + beta out + bias and its backward with
// cuBLAS SGEMM (FP32 math). Row-major A(r,c) is column-major A^T, so every product
// is issued transposed: out^T = W x^T, dx^T = W^T dout^T, dW^T += x^T dout.
// Everything on the CudaBlas's stream (its handle is bound to it). A quantized
// W's forward at T <= 8 is a mat-vec kernel of its own (below).
// CPU twin: kernels/matmul.c.
#include "cuda_common.h"

__global__ static void add_bias(float *out, const float *bias, int T, int N) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)T * N) out[i] += bias[i % N];
}

// One thread per column n; consecutive threads read consecutive addresses.
__global__ static void bias_grad(float *dbias, const float *dout, int T, int N, float alpha) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float s = 0;
    for (int t = 0; t < T; t++) s += dout[(size_t)t * N + n];
    dbias[n] += alpha * s;
}

extern "C" int matmul_forward_cuda(float *out, const float *x, const float *W, const float *bias,
                                   int T, int K, int N, float alpha, float beta, CudaBlas *cb, PailErr *err) {
    if (T <= 0 || N <= 0) return 0;
    cublasHandle_t h = cb->handle;
    if (cublas_check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, K, x, K, &beta,
                                 out, N),
                     "matmul_forward_cuda sgemm", err))
        return -1;
    if (bias) {
        add_bias<<<cuda_blocks((size_t)T * N, 256), 256, 0, cb->stream>>>(out, bias, T, N);
        return cuda_launch_check("matmul_forward_cuda bias", err);
    }
    return 0;
}

extern "C" int matmul_backward_cuda(float *dx, float *dW, float *dbias, const float *dout,
                                    const float *x, const float *W, int T, int K, int N,
                                    float alpha, float dx_beta, CudaBlas *cb, PailErr *err) {
    if (T <= 0) return 0;
    cublasHandle_t h = cb->handle;
    const float one = 1.0f;
    if (dx && cublas_check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, K, T, N, &alpha, W, K, dout,
                                       N, &dx_beta, dx, K),
                           "matmul_backward_cuda dx sgemm", err))
        return -1;
    if (dW && cublas_check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, K, N, T, &alpha, x, K, dout,
                                       N, &one, dW, K),
                           "matmul_backward_cuda dW sgemm", err))
        return -1;
    if (dbias) {
        bias_grad<<<cuda_blocks(N, 256), 256, 0, cb->stream>>>(dbias, dout, T, N, alpha);
        return cuda_launch_check("matmul_backward_cuda dbias", err);
    }
    return 0;
}

// The three products of a LoRA-adapted projection (the CPU twin fuses them for
// small T; here cuBLAS runs each).
extern "C" int matmul_forward_lora_cuda(float *out, float *la, const float *x, const float *W,
                                        const float *bias, const float *A, const float *B, int T,
                                        int K, int N, int R, float scale, float beta, CudaBlas *cb,
                                        PailErr *err) {
    if (matmul_forward_cuda(out, x, W, bias, T, K, N, 1.0f, beta, cb, err) ||
        matmul_forward_cuda(la, x, A, NULL, T, K, R, 1.0f, 0.0f, cb, err) ||
        matmul_forward_cuda(out, la, B, NULL, T, R, N, scale, 1.0f, cb, err))
        return err_wrap(err, "matmul_forward_lora_cuda");
    return 0;
}

// ---- W in a storage dtype: converted a row panel at a time (dtype_to_f32_cuda:
// bf16 / f16 exactly, a quantized W dequantized as quant_dequant), then the same SGEMM ----
// One scratch buffer per CudaBlas for the converted panels (its products run on
// its stream, in order, so a panel is never overwritten while a product still
// reads it), allocated at the first _dt product and grown when a larger panel
// is asked for (cudaFree waits for the device first); never more than this many
// floats, so that a bf16 LM head does not come back as a full fp32 copy. Tests
// shrink it to force panels.
extern "C" {
size_t matmul_dt_cuda_panel_floats = (size_t)16 << 20;  // 64 MiB
}

static float *dt_panel_get(CudaBlas *cb, size_t floats, PailErr *err) {
    if (floats <= cb->panel_floats) return cb->panel;
    if (cb->panel && cuda_check(cudaFree(cb->panel), "matmul _dt cuda: cudaFree panel", err)) return NULL;
    cb->panel = NULL, cb->panel_floats = 0;
    if (cuda_check(cudaMalloc((void **)&cb->panel, floats * sizeof(float)), "matmul _dt cuda: cudaMalloc panel",
                   err))
        return NULL;
    cb->panel_floats = floats;
    return cb->panel;
}

// Rows per panel of a (rows, K) weight, and the scratch for that panel.
static float *dt_rows_panel(CudaBlas *cb, int rows, int K, int *per, PailErr *err) {
    size_t cap = matmul_dt_cuda_panel_floats / (size_t)K;
    *per = cap < 1 ? 1 : cap > (size_t)rows ? rows : (int)cap;
    return dt_panel_get(cb, (size_t)*per * K, err);
}

// Elements first.. of W (first and n whole rows, so whole blocks of a quantized W).
static int dt_convert(float *dst, const void *W, DType wdt, size_t first, size_t n, cudaStream_t stream,
                      PailErr *err) {
    if (dtype_to_f32_cuda(dst, (const char *)W + dtype_row_bytes(wdt, first), wdt, n, stream, err))
        return err_wrap(err, "matmul _dt cuda: convert panel");
    return 0;
}

// A quantized W and a few rows of x (a decode step): one warp a W row, the row
// read once as stored and decoded in registers (no fp32 panel, which would
// write and read back 4 bytes for each of W's ~0.5 to 1), lanes striding K,
// MATVEC_T_MAX partial sums a lane, then a warp sum each.
enum { MATVEC_T_MAX = 8 };
__global__ static void matvec_dt(float *out, const float *x, const void *W, DType wdt, int T, int K, int N,
                                 float alpha, float beta) {
    int n = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;  // a whole warp: the sums below shuffle over all 32 lanes
    float s[MATVEC_T_MAX];
#pragma unroll
    for (int t = 0; t < MATVEC_T_MAX; t++) s[t] = 0.0f;
    size_t row = (size_t)n * K;
    for (int k = lane; k < K; k += 32) {
        float w = dt_load(W, wdt, row + k);
#pragma unroll
        for (int t = 0; t < MATVEC_T_MAX; t++)
            if (t < T) s[t] += w * x[(size_t)t * K + k];
    }
#pragma unroll
    for (int t = 0; t < MATVEC_T_MAX; t++)
        if (t < T) {
            float v = warp_sum(s[t]);
            float *o = &out[(size_t)t * N + n];
            if (lane == 0) *o = beta == 0.0f ? alpha * v : alpha * v + beta * *o;  // beta 0: out not read (NaN stays out)
        }
}

extern "C" int matmul_forward_dt_cuda(float *out, const float *x, const void *W, DType wdt,
                                      const float *bias, int T, int K, int N, float alpha,
                                      float beta, CudaBlas *cb, PailErr *err) {
    if (wdt == DT_F32 || K <= 0)  // (K = 0 reads no weight)
        return matmul_forward_cuda(out, x, (const float *)W, bias, T, K, N, alpha, beta, cb, err);
    if (dt_check_row(wdt, K, "matmul_forward_dt_cuda", err)) return -1;
    if (T <= 0 || N <= 0) return 0;
    if (dtype_is_quant(wdt) && T <= MATVEC_T_MAX) {
        matvec_dt<<<cuda_blocks((size_t)N * 32, 256), 256, 0, cb->stream>>>(out, x, W, wdt, T, K, N, alpha, beta);
        if (cuda_launch_check("matmul_forward_dt_cuda mat-vec", err)) return -1;
    } else {
        cublasHandle_t h = cb->handle;
        int per;
        float *p = dt_rows_panel(cb, N, K, &per, err);
        if (!p) return -1;
        for (int n0 = 0; n0 < N; n0 += per) {  // out[:, n0..] = x W[n0..]^T: its rows n0.. of out^T
            int nn = N - n0 < per ? N - n0 : per;
            if (dt_convert(p, W, wdt, (size_t)n0 * K, (size_t)nn * K, cb->stream, err) ||
                cublas_check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, nn, T, K, &alpha, p, K, x, K, &beta, out + n0,
                                         N),
                             "matmul_forward_dt_cuda sgemm", err))
                return -1;
        }
    }
    if (bias) {
        add_bias<<<cuda_blocks((size_t)T * N, 256), 256, 0, cb->stream>>>(out, bias, T, N);
        return cuda_launch_check("matmul_forward_dt_cuda bias", err);
    }
    return 0;
}

// dx = alpha dout W + dx_beta dx as a sum over W's row panels (the reduction);
// dW and dbias never read W: the fp32 twin's.
extern "C" int matmul_backward_dt_cuda(float *dx, float *dW, float *dbias, const float *dout,
                                       const float *x, const void *W, DType wdt, int T, int K,
                                       int N, float alpha, float dx_beta, CudaBlas *cb, PailErr *err) {
    if (wdt == DT_F32 || K <= 0 || N <= 0)  // (an empty W reads no weight)
        return matmul_backward_cuda(dx, dW, dbias, dout, x, (const float *)W, T, K, N, alpha,
                                    dx_beta, cb, err);
    if (dt_check_row(wdt, K, "matmul_backward_dt_cuda", err)) return -1;
    if (T <= 0) return 0;
    if (dx) {
        cublasHandle_t h = cb->handle;
        int per;
        float *p = dt_rows_panel(cb, N, K, &per, err);
        if (!p) return -1;
        const float one = 1.0f;
        for (int n0 = 0; n0 < N; n0 += per) {  // dx^T += W[n0..]^T dout[:, n0..]^T
            int nn = N - n0 < per ? N - n0 : per;
            if (dt_convert(p, W, wdt, (size_t)n0 * K, (size_t)nn * K, cb->stream, err) ||
                cublas_check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, K, T, nn, &alpha, p, K,
                                         dout + n0, N, n0 == 0 ? &dx_beta : &one, dx, K),
                             "matmul_backward_dt_cuda dx sgemm", err))
                return -1;
        }
    }
    return matmul_backward_cuda(NULL, dW, dbias, dout, x, NULL, T, K, N, alpha, dx_beta, cb, err);
}

extern "C" int matmul_forward_lora_dt_cuda(float *out, float *la, const float *x, const void *W,
                                           DType wdt, const float *bias, const float *A,
                                           const float *B, int T, int K, int N, int R,
                                           float scale, float beta, CudaBlas *cb, PailErr *err) {
    if (matmul_forward_dt_cuda(out, x, W, wdt, bias, T, K, N, 1.0f, beta, cb, err) ||
        matmul_forward_cuda(la, x, A, NULL, T, K, R, 1.0f, 0.0f, cb, err) ||
        matmul_forward_cuda(out, la, B, NULL, T, R, N, scale, 1.0f, cb, err))
        return err_wrap(err, "matmul_forward_lora_dt_cuda");
    return 0;
}
