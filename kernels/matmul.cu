// matmul twin: out(T,N) = alpha x W^T + beta out + bias and its backward with
// cuBLAS SGEMM (FP32 math). Row-major A(r,c) is column-major A^T, so every product
// is issued transposed: out^T = W x^T, dx^T = W^T dout^T, dW^T += x^T dout.
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
                                   int T, int K, int N, float alpha, float beta, PailErr *err) {
    if (T <= 0 || N <= 0) return 0;
    cublasHandle_t h = cuda_cublas(err);
    if (!h) return -1;
    if (cublas_check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, K, x, K, &beta,
                                 out, N),
                     "matmul_forward_cuda sgemm", err))
        return -1;
    if (bias) {
        add_bias<<<cuda_blocks((size_t)T * N, 256), 256>>>(out, bias, T, N);
        return cuda_launch_check("matmul_forward_cuda bias", err);
    }
    return 0;
}

extern "C" int matmul_backward_cuda(float *dx, float *dW, float *dbias, const float *dout,
                                    const float *x, const float *W, int T, int K, int N,
                                    float alpha, float dx_beta, PailErr *err) {
    if (T <= 0) return 0;
    cublasHandle_t h = cuda_cublas(err);
    if (!h) return -1;
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
        bias_grad<<<cuda_blocks(N, 256), 256>>>(dbias, dout, T, N, alpha);
        return cuda_launch_check("matmul_backward_cuda dbias", err);
    }
    return 0;
}

// The three products of a LoRA-adapted projection (the CPU twin fuses them for
// small T; here cuBLAS runs each).
extern "C" int matmul_forward_lora_cuda(float *out, float *la, const float *x, const float *W,
                                        const float *bias, const float *A, const float *B, int T,
                                        int K, int N, int R, float scale, float beta,
                                        PailErr *err) {
    if (matmul_forward_cuda(out, x, W, bias, T, K, N, 1.0f, beta, err) ||
        matmul_forward_cuda(la, x, A, NULL, T, K, R, 1.0f, 0.0f, err) ||
        matmul_forward_cuda(out, la, B, NULL, T, R, N, scale, 1.0f, err))
        return err_wrap(err, "matmul_forward_lora_cuda");
    return 0;
}
