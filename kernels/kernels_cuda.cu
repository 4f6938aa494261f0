// Device plumbing for the CUDA twins: device count, synchronisation, the shared
// cuBLAS handle and the error helpers of cuda_common.h. The ops are in
// kernels/<op>.cu; their CPU twins in kernels/<op>.c.
#include "cuda_common.h"

static cublasHandle_t g_cublas;

int cuda_check(cudaError_t e, const char *what, PailErr *err) {
    if (e == cudaSuccess) return 0;
    return err_set(err, PAIL_ERR_IO, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int cublas_check(cublasStatus_t s, const char *what, PailErr *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    return err_set(err, PAIL_ERR_IO, "%s: cuBLAS status %d (%s)", what, (int)s, cublasGetStatusString(s));
}

int cuda_launch_check(const char *what, PailErr *err) {
    return cuda_check(cudaGetLastError(), what, err);
}

cublasHandle_t cuda_cublas(PailErr *err) {
    if (g_cublas) return g_cublas;
    cublasHandle_t h;
    if (cublas_check(cublasCreate(&h), "cublasCreate", err)) return NULL;
    // FP32 products (no TF32): the twins are compared against the CPU at fp32 tolerances.
    if (cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err)) {
        cublasDestroy(h);
        return NULL;
    }
    g_cublas = h;
    return h;
}

extern "C" int kernels_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

extern "C" int kernels_cuda_sync(PailErr *err) {
    return cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err);
}
