// cuBLAS loaded at run time (CUDA builds only): the few cuBLAS entry points
// the twins call are defined here and forward to libcublas.so.13 opened with
// dlopen on first use, so a CUDA build links no cuBLAS and starts on CPU-only
// nodes and the relay's host. Searched: the loader's path (LD_LIBRARY_PATH,
// ld.so.conf), then /usr/local/cuda/lib64.
#ifdef PAIL_CUDA
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include "core/err.h"

int cuda_dl_cublas(PailErr *err);

static struct {
    void *lib;
    char why[512];
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    const char *(*status_string)(cublasStatus_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
} dl;
static pthread_once_t dl_once = PTHREAD_ONCE_INIT;

static void dl_load(void) {
    static const char *const names[] = {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13", NULL};
    for (int i = 0; names[i] && !dl.lib; i++) dl.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!dl.lib) {
        snprintf(dl.why, sizeof dl.why, "cuBLAS not found (%s): install the CUDA 13 cuBLAS runtime or add its "
                 "folder to LD_LIBRARY_PATH", dlerror());
        return;
    }
#define SYM(field, name)                                                                    \
    if (!(*(void **)&dl.field = dlsym(dl.lib, name))) {                                     \
        snprintf(dl.why, sizeof dl.why, "cuBLAS library lacks %s: not a CUDA 13 cuBLAS", name); \
        dl.lib = NULL;                                                                      \
        return;                                                                             \
    }
    SYM(create, "cublasCreate_v2");
    SYM(destroy, "cublasDestroy_v2");
    SYM(set_math_mode, "cublasSetMathMode");
    SYM(set_stream, "cublasSetStream_v2");
    SYM(status_string, "cublasGetStatusString");
    SYM(sgemm, "cublasSgemm_v2");
#undef SYM
}

int cuda_dl_cublas(PailErr *err) {
    pthread_once(&dl_once, dl_load);
    return dl.lib ? 0 : err_set(err, PAIL_ERR_UNSUPPORTED, "%s", dl.why);
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    return cuda_dl_cublas(NULL) == 0 ? dl.create(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    return cuda_dl_cublas(NULL) == 0 ? dl.destroy(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    return cuda_dl_cublas(NULL) == 0 ? dl.set_math_mode(h, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    return cuda_dl_cublas(NULL) == 0 ? dl.set_stream(h, s) : CUBLAS_STATUS_NOT_INITIALIZED;
}
const char *cublasGetStatusString(cublasStatus_t s) {
    return cuda_dl_cublas(NULL) == 0 ? dl.status_string(s) : "cuBLAS not loaded";
}
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc) {
    if (cuda_dl_cublas(NULL) < 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    return dl.sgemm(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
#else
typedef int cublas_dl_unused;  // CPU builds: nothing here (ISO C wants a declaration)
#endif
