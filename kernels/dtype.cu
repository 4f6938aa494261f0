// dtype twin: a weight in its storage dtype converted to fp32 on the device,
// exactly as dtype_to_f32 (bf16 / f16: every value is an fp32 value; the
// quantized dtypes: quant_dequant's floats bit for bit, kernels/quant_cuda.h).
// The _dt products convert W's row panels with it before cuBLAS. CPU twin:
// kernels/dtype.c (and kernels/quant.c).
#include "cuda_common.h"

// One thread an element: a quantized block's threads read its scales from the
// same cache lines, and the fp32 writes are coalesced.
__global__ static void to_f32(float *dst, const void *src, DType dt, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = dt_load(src, dt, i);
}

extern "C" int dtype_to_f32_cuda(float *dst, const void *src, DType dt, size_t n, cudaStream_t stream,
                                 PailErr *err) {
    if ((unsigned)dt >= DT_COUNT || n % (size_t)dtype_block(dt))
        return err_set(err, PAIL_ERR_INVALID, "dtype_to_f32_cuda: %zu elements of dtype %d are not whole blocks", n,
                       (int)dt);
    if (!n) return 0;
    to_f32<<<cuda_blocks(n, 256), 256, 0, stream>>>(dst, src, dt, n);
    return cuda_launch_check("dtype_to_f32_cuda", err);
}

int dt_check_row(DType dt, int K, const char *what, PailErr *err) {
    if (K % dtype_block(dt) == 0) return 0;
    return err_set(err, PAIL_ERR_INVALID, "%s: a %s weight's rows of %d elements are not whole blocks of %d", what,
                   dtype_name(dt), K, dtype_block(dt));
}
