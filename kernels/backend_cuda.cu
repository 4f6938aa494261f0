// The CUDA backend (see backend.h): the same table over the <op>.cu twins,
// device memory from cudaMalloc, every op, copy and memset queued on the
// backend's own stream (non-blocking: it does not serialise with the legacy
// default stream), a cuBLAS handle of its own bound to that stream (with
// cuBLAS's per-handle workspace and the _dt products' panel scratch: a
// CudaBlas, kernels.h) and a small workspace (the sum of squares' device
// double); sync waits for the stream only. cuBLAS is loaded at run
// time (kernels/cublas_dl.c) and the CUDA runtime is linked statically, so a
// CUDA build starts on a machine without a GPU, a driver or CUDA libraries and
// serves --device cpu there. CPU twin of the table: backend_cpu.c.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "backend.h"
#include <cuda_bf16.h>
#include "cuda_common.h"

typedef struct {
    cudaStream_t stream;  // owned: every op of this backend runs on it, in order
    CudaBlas blas;        // owned: the cuBLAS handle on stream, the _dt panels
    double *d_sumsq;      // workspace: adamw_grad_sumsq's device double
} CudaImpl;

static CudaImpl *impl(Backend *b) { return (CudaImpl *)b->impl; }

static void *cu_alloc(Backend *b, size_t bytes, PailErr *err) {
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 64);
    if (e != cudaSuccess) {
        cudaGetLastError();
        err_set(err, PAIL_ERR_NOMEM, "cuda: cannot allocate %zu MiB of device memory: %s", bytes >> 20,
                cudaGetErrorString(e));
        return NULL;
    }
    return p;
}
static void cu_release(Backend *b, void *p) {
    (void)b;
    if (p) cudaFree(p);
}
static int cu_to_device(Backend *b, void *dst, const void *src, size_t bytes, PailErr *err) {
    if (!bytes) return 0;
    return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl(b)->stream), "to_device", err);
}
static int cu_sync(Backend *b, PailErr *err) {
    return cuda_check(cudaStreamSynchronize(impl(b)->stream), "cudaStreamSynchronize", err);
}
static int cu_to_host(Backend *b, void *dst, const void *src, size_t bytes, PailErr *err) {
    if (!bytes) return 0;
    if (cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl(b)->stream), "to_host", err))
        return -1;
    return cu_sync(b, err);
}
static int cu_copy(Backend *b, float *dst, const float *src, size_t n, PailErr *err) {
    if (!n || dst == src) return 0;
    return cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, impl(b)->stream),
                      "copy", err);
}
static int cu_zero(Backend *b, float *dst, size_t n, PailErr *err) {
    if (!n) return 0;
    return cuda_check(cudaMemsetAsync(dst, 0, n * sizeof(float), impl(b)->stream), "zero", err);
}

__global__ static void add_kernel(float *y, const float *x, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
__global__ static void rows_kernel(float *dst, const float *src, const int *rows, int n, int C, int scatter) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)n * C) return;
    size_t r = i / C, c = i % C;
    if (scatter) dst[(size_t)rows[r] * C + c] = src[i];
    else dst[i] = src[(size_t)rows[r] * C + c];
}

static int cu_add(Backend *b, float *y, const float *x, size_t n, PailErr *err) {
    if (!n) return 0;
    add_kernel<<<cuda_blocks(n, 256), 256, 0, impl(b)->stream>>>(y, x, n);
    return cuda_launch_check("add", err);
}
static int cu_gather_rows(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err) {
    if (n <= 0) return 0;
    rows_kernel<<<cuda_blocks((size_t)n * C, 256), 256, 0, impl(b)->stream>>>(dst, src, rows, n, C, 0);
    return cuda_launch_check("gather_rows", err);
}
static int cu_scatter_rows(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err) {
    if (n <= 0) return 0;
    rows_kernel<<<cuda_blocks((size_t)n * C, 256), 256, 0, impl(b)->stream>>>(dst, src, rows, n, C, 1);
    return cuda_launch_check("scatter_rows", err);
}
// a KV pool's rows in bf16 / f16: rounded to nearest even (dtype_from_f32)
__global__ static void rows_dt_kernel(unsigned short *dst, DType dt, const float *src, const int *rows, int n, int C) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)n * C) return;
    size_t r = i / C, c = i % C;
    float x = src[i];
    if (dt == DT_F16) x = x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f :
                                                                    x;  // saturated (backend_cpu.c)
    unsigned short h = dt == DT_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
    dst[(size_t)rows[r] * C + c] = h;
}
static int cu_scatter_rows_dt(Backend *b, void *dst, DType dt, const float *src, const int *rows, int n, int C,
                              PailErr *err) {
    if (dt == DT_F32) return cu_scatter_rows(b, (float *)dst, src, rows, n, C, err);
    if (dt != DT_BF16 && dt != DT_F16)
        return err_set(err, PAIL_ERR_INVALID, "scatter_rows_dt: rows of %s are not a float dtype", dtype_name(dt));
    if (n <= 0) return 0;
    rows_dt_kernel<<<cuda_blocks((size_t)n * C, 256), 256, 0, impl(b)->stream>>>((unsigned short *)dst, dt, src, rows,
                                                                                 n, C);
    return cuda_launch_check("scatter_rows_dt", err);
}

#define B_ Backend *b
#define S_ impl(b)->stream
#define CB_ &impl(b)->blas

static int cu_matmul_forward(B_, float *out, const float *x, const void *W, DType wdt, const float *bias, int T, int K,
                             int N, float alpha, float beta, PailErr *err) {
    return matmul_forward_dt_cuda(out, x, W, wdt, bias, T, K, N, alpha, beta, CB_, err);
}
static int cu_matmul_forward_lora(B_, float *out, float *la, const float *x, const void *W, DType wdt,
                                  const float *bias,
                                  const float *A, const float *Bm, int T, int K, int N, int R, float scale,
                                  float beta, PailErr *err) {
    return matmul_forward_lora_dt_cuda(out, la, x, W, wdt, bias, A, Bm, T, K, N, R, scale, beta, CB_, err);
}
static int cu_matmul_backward(B_, float *dx, float *dW, float *dbias, const float *dout, const float *x,
                              const void *W, DType wdt, int T, int K, int N, float alpha, float dx_beta,
                              PailErr *err) {
    return matmul_backward_dt_cuda(dx, dW, dbias, dout, x, W, wdt, T, K, N, alpha, dx_beta, CB_, err);
}
static int cu_rmsnorm_forward(B_, float *out, float *rstd, const float *x, const float *w, int rows, int C,
                              float eps, PailErr *err) {
    return rmsnorm_forward_cuda(out, rstd, x, w, rows, C, eps, S_, err);
}
static int cu_rmsnorm_backward(B_, float *dx, float *dw, const float *dout, const float *x, const float *w,
                               const float *rstd, int rows, int C, PailErr *err) {
    return rmsnorm_backward_cuda(dx, dw, dout, x, w, rstd, rows, C, S_, err);
}
static int cu_rope_forward(B_, float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                           int T, int nh, int D, PailErr *err) {
    return rope_forward_cuda(out, x, pos, cos_t, sin_t, T, nh, D, S_, err);
}
static int cu_rope_backward(B_, float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                            int T, int nh, int D, PailErr *err) {
    return rope_backward_cuda(dx, dout, pos, cos_t, sin_t, T, nh, D, S_, err);
}
static int cu_attention_forward(B_, float *out, float *lse, const float *q, const float *k, const float *v,
                                const int *cu, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                const float *sinks, PailErr *err) {
    return attention_forward_sink_cuda(out, lse, q, k, v, cu, nseq, T, H, Hkv, D, W, cap, sinks, S_, err);
}
static int cu_attention_backward(B_, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out, const float *lse, const int *cu,
                                 int nseq, int T, int H, int Hkv, int D, int W, float cap, const float *sinks,
                                 float *dsinks, PailErr *err) {
    return attention_backward_sink_cuda(dq, dk, dv, dout, q, k, v, out, lse, cu, nseq, T, H, Hkv, D, W, cap, sinks,
                                        dsinks, S_, err);
}
static int cu_attention_decode_forward(B_, float *out, const float *q, const void *kp, const void *vp, DType kvdt,
                                       const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                       int nseq, int Tn, int H, int Hkv, int D, int W, float cap, const float *sinks,
                                       PailErr *err) {
    return attention_decode_forward_sink_cuda(out, q, kp, vp, kvdt, cu_new, cache_len, table, max_blocks, nseq, Tn, H,
                                              Hkv, D, W, cap, sinks, S_, err);
}
static int cu_scale(B_, float *x, size_t n, float alpha, PailErr *err) { return scale_forward_cuda(x, n, alpha, S_, err); }
static int cu_swiglu_forward(B_, float *out, const float *gate, const float *up, size_t n, PailErr *err) {
    return swiglu_forward_cuda(out, gate, up, n, S_, err);
}
static int cu_swiglu_clamp_forward(B_, float *out, const float *gate, const float *up, size_t n, float alpha,
                                   float limit, PailErr *err) {
    return swiglu_clamp_forward_cuda(out, gate, up, n, alpha, limit, S_, err);
}
static int cu_swiglu_clamp_backward(B_, float *dgate, float *dup, const float *dout, const float *gate,
                                    const float *up, size_t n, float alpha, float limit, PailErr *err) {
    return swiglu_clamp_backward_cuda(dgate, dup, dout, gate, up, n, alpha, limit, S_, err);
}
static int cu_swiglu_backward(B_, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                              size_t n, PailErr *err) {
    return swiglu_backward_cuda(dgate, dup, dout, gate, up, n, S_, err);
}
static int cu_softcap(B_, float *x, size_t n, float cap, PailErr *err) { return softcap_forward_cuda(x, n, cap, S_, err); }
static int cu_geglu_forward(B_, float *out, const float *gate, const float *up, size_t n, PailErr *err) {
    return geglu_forward_cuda(out, gate, up, n, S_, err);
}
static int cu_geglu_backward(B_, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                             size_t n, PailErr *err) {
    return geglu_backward_cuda(dgate, dup, dout, gate, up, n, S_, err);
}
static int cu_logprob_forward(B_, float *logp, float *entropy, float *lse, const float *hidden, const void *w_lm,
                              DType wdt, const int *targets, int T, int C, int V, float temperature, float cap,
                              float *ws, int vchunk, PailErr *err) {
    return logprob_forward_cap_dt_cuda(logp, entropy, lse, hidden, w_lm, wdt, targets, T, C, V, temperature, cap, ws,
                                       vchunk, CB_, err);
}
static int cu_logprob_backward(B_, float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                               const float *hidden, const void *w_lm, DType wdt, const int *targets,
                               const float *lse, const float *entropy, int T, int C, int V, float temperature,
                               float cap, float *ws, int vchunk, PailErr *err) {
    return logprob_backward_cap_dt_cuda(dhidden, dw_lm, dlogp, dentropy, hidden, w_lm, wdt, targets, lse, entropy, T,
                                        C, V, temperature, cap, ws, vchunk, CB_, err);
}
static int cu_logprob_forward_expect(B_, float *logp, float *entropy, float *lse, float *expect,
                                     const float *hidden, const void *w_lm, DType wdt, const int *targets, int T,
                                     int C, int V, float temperature, float cap, float *ws, size_t ws_floats,
                                     PailErr *err) {
    return logprob_forward_expect_cap_dt_cuda(logp, entropy, lse, expect, hidden, w_lm, wdt, targets, T, C, V,
                                              temperature, cap, ws, ws_floats, CB_, err);
}
static int cu_logprob_backward_expect(B_, float *dhidden, const float *dlogp, const float *expect, const void *w_lm,
                                      DType wdt, const int *targets, int T, int C, float temperature, float cap,
                                      const float *hidden, PailErr *err) {
    return logprob_backward_expect_cap_dt_cuda(dhidden, dlogp, expect, w_lm, wdt, targets, T, C, temperature, cap,
                                               hidden, CB_, err);
}
static int cu_embedding_forward(B_, float *out, const void *table, DType tdt, const int *tokens, int T, int C, int V,
                                PailErr *err) {
    return embedding_forward_dt_cuda(out, table, tdt, tokens, T, C, V, S_, err);
}
static int cu_embedding_backward(B_, float *dtable, const float *dout, const int *tokens, int T, int C,
                                 PailErr *err) {
    return embedding_backward_cuda(dtable, dout, tokens, T, C, S_, err);
}
static int cu_adamw_grad_sumsq(B_, double *sumsq, const float *g, size_t n, PailErr *err) {
    if (adamw_grad_sumsq_cuda(impl(b)->d_sumsq, g, n, impl(b)->stream, err)) return -1;
    return cu_to_host(b, sumsq, impl(b)->d_sumsq, sizeof(double), err);
}
static int cu_adamw_update(B_, float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
                           float beta2, float eps, float weight_decay, int step, float grad_scale, PailErr *err) {
    return adamw_update_cuda(p, m, v, g, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale, impl(b)->stream,
                             err);
}
static int cu_rope_partial_forward(B_, float *out, const float *x, const int *pos, const float *cos_t,
                                   const float *sin_t, int T, int nh, int D, int rd, PailErr *err) {
    return rope_partial_forward_cuda(out, x, pos, cos_t, sin_t, T, nh, D, rd, S_, err);
}
static int cu_rope_partial_backward(B_, float *dx, const float *dout, const int *pos, const float *cos_t,
                                    const float *sin_t, int T, int nh, int D, int rd, PailErr *err) {
    return rope_partial_backward_cuda(dx, dout, pos, cos_t, sin_t, T, nh, D, rd, S_, err);
}

static size_t cu_sample_ws(Backend *b, int n, int V, const SampleParams *sp) {
    (void)b;
    return sample_ws_bytes_cuda(n, V, sp);
}
static int cu_sample(Backend *b, int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                     const int *lrow, const int *rslot, int n, int V, const SampleParams *sp, const int32_t *stop_ids,
                     int n_stop, void *ws, size_t ws_bytes, PailErr *err) {
    return sample_forward_cuda(tok, logp, stopped, rng, logits, lrow, rslot, n, V, sp, stop_ids, n_stop, ws, ws_bytes,
                               S_, err);
}

static int cu_layernorm_forward(B_, float *out, float *mean, float *rstd, const float *x, const float *w, int rows,
                                int C, int wrows, float eps, PailErr *err) {
    return layernorm_forward_cuda(out, mean, rstd, x, w, rows, C, wrows, eps, S_, err);
}
static int cu_layernorm_backward(B_, float *dx, float *dw, const float *dout, const float *x, const float *w,
                                 const float *mean, const float *rstd, int rows, int C, int wrows, PailErr *err) {
    return layernorm_backward_cuda(dx, dw, dout, x, w, mean, rstd, rows, C, wrows, S_, err);
}
static int cu_rope_interleaved_forward(B_, float *out, const float *x, const int *pos, const float *cos_t,
                                       const float *sin_t, int T, int nh, int D, PailErr *err) {
    return rope_interleaved_forward_cuda(out, x, pos, cos_t, sin_t, T, nh, D, S_, err);
}
static int cu_rope_interleaved_backward(B_, float *dx, const float *dout, const int *pos, const float *cos_t,
                                        const float *sin_t, int T, int nh, int D, PailErr *err) {
    return rope_interleaved_backward_cuda(dx, dout, pos, cos_t, sin_t, T, nh, D, S_, err);
}

static int cu_moe_route_forward(B_, int *idx, float *w, const float *logits, int T, int E, int K, int norm,
                                PailErr *err) {
    return moe_route_forward_cuda(idx, w, logits, T, E, K, norm, S_, err);
}
static int cu_moe_route_backward(B_, float *dlogits, const float *dw, const float *logits, const int *idx,
                                 const float *w, int T, int E, int K, int norm, PailErr *err) {
    return moe_route_backward_cuda(dlogits, dw, logits, idx, w, T, E, K, norm, S_, err);
}
static int cu_moe_group(B_, int *tok, int *pos, int *offs, const int *idx, int T, int K, int E, PailErr *err) {
    return moe_group_cuda(tok, pos, offs, idx, T, K, E, S_, err);
}
static int cu_moe_combine_forward(B_, float *y, const float *h, const float *w, const int *pos, int T, int K, int C,
                                  float beta, PailErr *err) {
    return moe_combine_forward_cuda(y, h, w, pos, T, K, C, beta, S_, err);
}
static int cu_moe_combine_backward(B_, float *dh, float *dw, const float *dy, const float *h, const float *w,
                                   const int *pos, int T, int K, int C, PailErr *err) {
    return moe_combine_backward_cuda(dh, dw, dy, h, w, pos, T, K, C, S_, err);
}
static int cu_sigmoid_gate_forward(B_, float *y, const float *g, const float *s, int T, int C, float beta,
                                   PailErr *err) {
    return sigmoid_gate_forward_cuda(y, g, s, T, C, beta, S_, err);
}
static int cu_sigmoid_gate_backward(B_, float *ds, float *dg, const float *dy, const float *g, const float *s, int T,
                                    int C, PailErr *err) {
    return sigmoid_gate_backward_cuda(ds, dg, dy, g, s, T, C, S_, err);
}

static BackendOps make_ops(void) {  // C++ has no designated initializers for this struct's order
    BackendOps o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.alloc = cu_alloc;
    o.release = cu_release;
    o.to_device = cu_to_device;
    o.to_host = cu_to_host;
    o.sync = cu_sync;
    o.copy = cu_copy;
    o.zero = cu_zero;
    o.add = cu_add;
    o.gather_rows = cu_gather_rows;
    o.scatter_rows = cu_scatter_rows;
    o.scatter_rows_dt = cu_scatter_rows_dt;
    o.matmul_forward = cu_matmul_forward;
    o.matmul_forward_lora = cu_matmul_forward_lora;
    o.matmul_backward = cu_matmul_backward;
    o.rmsnorm_forward = cu_rmsnorm_forward;
    o.rmsnorm_backward = cu_rmsnorm_backward;
    o.rope_forward = cu_rope_forward;
    o.rope_backward = cu_rope_backward;
    o.attention_forward = cu_attention_forward;
    o.attention_backward = cu_attention_backward;
    o.attention_decode_forward = cu_attention_decode_forward;
    o.scale = cu_scale;
    o.swiglu_forward = cu_swiglu_forward;
    o.swiglu_backward = cu_swiglu_backward;
    o.swiglu_clamp_forward = cu_swiglu_clamp_forward;
    o.swiglu_clamp_backward = cu_swiglu_clamp_backward;
    o.logprob_forward = cu_logprob_forward;
    o.logprob_backward = cu_logprob_backward;
    o.logprob_forward_expect = cu_logprob_forward_expect;
    o.logprob_backward_expect = cu_logprob_backward_expect;
    o.embedding_forward = cu_embedding_forward;
    o.embedding_backward = cu_embedding_backward;
    o.sample_ws = cu_sample_ws;
    o.sample = cu_sample;
    o.adamw_grad_sumsq = cu_adamw_grad_sumsq;
    o.adamw_update = cu_adamw_update;
    o.rope_partial_forward = cu_rope_partial_forward;
    o.rope_partial_backward = cu_rope_partial_backward;
    o.layernorm_forward = cu_layernorm_forward;
    o.layernorm_backward = cu_layernorm_backward;
    o.rope_interleaved_forward = cu_rope_interleaved_forward;
    o.rope_interleaved_backward = cu_rope_interleaved_backward;
    o.geglu_forward = cu_geglu_forward;
    o.geglu_backward = cu_geglu_backward;
    o.softcap = cu_softcap;
    o.moe_route_forward = cu_moe_route_forward;
    o.moe_route_backward = cu_moe_route_backward;
    o.moe_group = cu_moe_group;
    o.moe_combine_forward = cu_moe_combine_forward;
    o.moe_combine_backward = cu_moe_combine_backward;
    o.sigmoid_gate_forward = cu_sigmoid_gate_forward;
    o.sigmoid_gate_backward = cu_sigmoid_gate_backward;
    return o;
}
static const BackendOps cuda_ops = make_ops();

extern "C" int backend_cuda_init(Backend *b, int ordinal, PailErr *err) {
    memset(b, 0, sizeof *b);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // what the runtime would open
    if (!drv)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "no NVIDIA driver on this machine (%s)",
                       dlerror());
    dlclose(drv);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return err_set(err, PAIL_ERR_UNSUPPORTED, "no usable NVIDIA GPU (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
    }
    if (ordinal >= n)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "this machine has %d GPU%s (cuda:0..cuda:%d)",
                       n, n == 1 ? "" : "s", n - 1);
    if (cuda_check(cudaSetDevice(ordinal), "cudaSetDevice", err)) return -1;
    if (cuda_dl_cublas(err) < 0) return -1;
    CudaImpl *ci = (CudaImpl *)calloc(1, sizeof *ci);
    if (!ci) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    b->ops = &cuda_ops;
    b->kind = BACKEND_CUDA;
    b->host_memory = false;
    b->device = ordinal;
    b->impl = ci;
    // Its own stream, not the legacy default one: a backend's ops never wait
    // for (or hold up) work another backend or library queued elsewhere.
    if (cuda_check(cudaStreamCreateWithFlags(&ci->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                   err) < 0 ||
        cuda_blas_init(&ci->blas, ci->stream, err) < 0 ||
        !(ci->d_sumsq = (double *)cu_alloc(b, sizeof(double), err))) {
        backend_cuda_free(b);
        return -1;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess)
        snprintf(b->desc, sizeof b->desc, "cuda:%d %.100s (%zu GiB)", ordinal, prop.name, prop.totalGlobalMem >> 30);
    else
        snprintf(b->desc, sizeof b->desc, "cuda:%d", ordinal);
    return 0;
}

extern "C" void backend_cuda_free(Backend *b) {
    CudaImpl *ci = impl(b);
    if (!ci) return;
    if (ci->stream) cudaStreamSynchronize(ci->stream);  // nothing queued still uses what is freed below
    cuda_blas_free(&ci->blas);
    cu_release(b, ci->d_sumsq);
    if (ci->stream) cudaStreamDestroy(ci->stream);
    free(ci);
    b->impl = NULL;
}
