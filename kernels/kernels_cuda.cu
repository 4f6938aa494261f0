// Device plumbing for the CUDA twins: device count, synchronisation, a
// CudaBlas (a cuBLAS handle bound to a stream, and the _dt panels' scratch)
// and the error helpers of cuda_common.h. The ops are in kernels/<op>.cu;
// their CPU twins in kernels/<op>.c.
#include <string.h>
#include "cuda_common.h"

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

// cuBLAS keeps its own workspace per handle (allocated by cublasCreate), so
// one handle per CudaBlas is one workspace per backend.
extern "C" int cuda_blas_init(CudaBlas *cb, cudaStream_t stream, PailErr *err) {
    memset(cb, 0, sizeof *cb);
    if (cuda_dl_cublas(err) < 0) return -1;
    cublasHandle_t h;
    if (cublas_check(cublasCreate(&h), "cublasCreate", err)) return -1;
    // FP32 products (no TF32): the twins are compared against the CPU at fp32 tolerances.
    if (cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err) ||
        cublas_check(cublasSetStream(h, stream), "cublasSetStream", err)) {
        cublasDestroy(h);
        return -1;
    }
    cb->stream = stream;
    cb->handle = h;
    return 0;
}

extern "C" void cuda_blas_free(CudaBlas *cb) {
    if (cb->handle) cudaStreamSynchronize(cb->stream);  // nothing queued still reads the panel
    if (cb->panel) cudaFree(cb->panel);
    if (cb->handle) cublasDestroy(cb->handle);
    memset(cb, 0, sizeof *cb);
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
