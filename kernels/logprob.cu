// logprob twin: the LM head in vocab chunks through cuBLAS, with a streaming
// log-sum-exp (one block per token row per chunk) so the (T,V) logits never
// exist; the backward recomputes each chunk. Same ws layout as the CPU op
// (logprob_workspace_floats). Targets must be range-checked on the host.
// The _dt variants take w_lm in a storage dtype (the products through the _dt
// matmul twins, the target rows converted in the kernel; vocab row v of a
// quantized head starts at byte v * dtype_row_bytes(wdt, C)). CPU twin:
// kernels/logprob.c. The _cap variants: gemma2's final_logit_softcapping (cap
// tanh(x / cap) / temperature on each chunk, the backward through 1 - tanh^2).
#include "cuda_common.h"

__global__ static void cap_chunk(float *z, size_t n, float cap, float inv_t) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) z[i] = cap * tanhf(z[i] / cap) * inv_t;
}

__global__ static void state_init(float *m, float *s, float *a, int T) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < T) m[t] = -INFINITY, s[t] = 0.0f, a[t] = 0.0f;
}

__global__ static void lse_update(float *logp, float *m, float *s, float *a, const float *z,
                                  const int *targets, int nb, int v0) {
    __shared__ float sh[32];
    int t = blockIdx.x;
    const float *zr = z + (size_t)t * nb;
    float bm = -INFINITY;
    for (int j = threadIdx.x; j < nb; j += blockDim.x) bm = fmaxf(bm, zr[j]);
    bm = block_reduce(bm, sh, true);
    float mn = fmaxf(bm, m[t]), bs = 0.0f, ba = 0.0f;
    for (int j = threadIdx.x; j < nb; j += blockDim.x) {
        float e = expf(zr[j] - mn);
        bs += e;
        ba += e * zr[j];
    }
    bs = block_reduce(bs, sh, false);
    ba = block_reduce(ba, sh, false);
    if (threadIdx.x == 0) {
        float corr = expf(m[t] - mn);
        s[t] = s[t] * corr + bs;
        a[t] = a[t] * corr + ba;
        m[t] = mn;
        int tj = targets[t] - v0;
        if (tj >= 0 && tj < nb) logp[t] = zr[tj];
    }
}

__global__ static void finalize(float *logp, float *entropy, float *lse, const float *m,
                                const float *s, const float *a, int T) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float l = m[t] + logf(s[t]);
    if (lse) lse[t] = l;
    if (entropy) entropy[t] = l - a[t] / s[t];
    logp[t] -= l;
}

__global__ static void dlogits(float *z, const float *dlogp, const float *dentropy,
                               const int *targets, const float *lse, const float *entropy, int T,
                               int nb, int v0, float inv_t, float cap_k) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * nb) return;
    int t = (int)(i / nb), j = (int)(i % nb);
    float lp = z[i] - lse[t], p = expf(lp);
    float dz = dlogp[t] * ((j == targets[t] - v0 ? 1.0f : 0.0f) - p);
    if (dentropy) dz -= dentropy[t] * p * (lp + entropy[t]);
    float th = z[i] * cap_k;  // capped: tanh = z temperature / cap (cap_k 0: no cap, factor 1)
    z[i] = cap_k > 0 ? dz * inv_t * (1.0f - th * th) : dz * inv_t;
}

extern "C" int logprob_forward_cap_dt_cuda(float *logp, float *entropy, float *lse,
                                           const float *hidden, const void *w_lm, DType wdt,
                                           const int *targets, int T, int C, int V, float temperature, float cap,
                                           float *ws, int vchunk, CudaBlas *cb, PailErr *err) {
    if (!(temperature > 0) || vchunk <= 0)
        return err_set(err, PAIL_ERR_INVALID, "logprob_forward_cuda: temperature %g, vchunk %d",
                       (double)temperature, vchunk);
    if (T <= 0) return 0;
    float *z = ws, *m = ws + (size_t)T * vchunk, *s = m + T, *a = s + T;
    state_init<<<cuda_blocks(T, 256), 256, 0, cb->stream>>>(m, s, a, T);
    if (cuda_launch_check("logprob_forward_cuda init", err)) return -1;
    for (int v0 = 0; v0 < V; v0 += vchunk) {
        int nb = V - v0 < vchunk ? V - v0 : vchunk;
        if (matmul_forward_dt_cuda(z, hidden, (const char *)w_lm + (size_t)v0 * dtype_row_bytes(wdt, C),
                                   wdt, NULL, T, C, nb, cap > 0 ? 1.0f : 1.0f / temperature, 0.0f, cb, err))
            return err_wrap(err, "logprob_forward_cuda chunk at %d", v0);
        if (cap > 0) {
            cap_chunk<<<cuda_blocks((size_t)T * nb, 256), 256, 0, cb->stream>>>(z, (size_t)T * nb, cap,
                                                                               1.0f / temperature);
            if (cuda_launch_check("logprob_forward_cuda cap", err)) return -1;
        }
        lse_update<<<T, 256, 0, cb->stream>>>(logp, m, s, a, z, targets, nb, v0);
        if (cuda_launch_check("logprob_forward_cuda lse", err)) return -1;
    }
    finalize<<<cuda_blocks(T, 256), 256, 0, cb->stream>>>(logp, entropy, lse, m, s, a, T);
    return cuda_launch_check("logprob_forward_cuda finalize", err);
}

extern "C" int logprob_forward_dt_cuda(float *logp, float *entropy, float *lse,
                                       const float *hidden, const void *w_lm, DType wdt,
                                       const int *targets, int T, int C, int V, float temperature,
                                       float *ws, int vchunk, CudaBlas *cb, PailErr *err) {
    return logprob_forward_cap_dt_cuda(logp, entropy, lse, hidden, w_lm, wdt, targets, T, C, V, temperature, 0.0f, ws,
                                       vchunk, cb, err);
}

extern "C" int logprob_forward_cuda(float *logp, float *entropy, float *lse, const float *hidden,
                                    const float *w_lm, const int *targets, int T, int C, int V,
                                    float temperature, float *ws, int vchunk, CudaBlas *cb, PailErr *err) {
    return logprob_forward_dt_cuda(logp, entropy, lse, hidden, w_lm, DT_F32, targets, T, C, V,
                                   temperature, ws, vchunk, cb, err);
}

extern "C" int logprob_backward_cap_dt_cuda(float *dhidden, float *dw_lm, const float *dlogp,
                                            const float *dentropy, const float *hidden,
                                            const void *w_lm, DType wdt, const int *targets,
                                            const float *lse, const float *entropy, int T, int C,
                                            int V, float temperature, float cap, float *ws, int vchunk,
                                            CudaBlas *cb, PailErr *err) {
    if (!(temperature > 0) || vchunk <= 0)
        return err_set(err, PAIL_ERR_INVALID, "logprob_backward_cuda: temperature %g, vchunk %d",
                       (double)temperature, vchunk);
    if (T <= 0) return 0;
    float *z = ws, inv_t = 1.0f / temperature;
    for (int v0 = 0; v0 < V; v0 += vchunk) {
        int nb = V - v0 < vchunk ? V - v0 : vchunk;
        const void *wc = (const char *)w_lm + (size_t)v0 * dtype_row_bytes(wdt, C);
        if (matmul_forward_dt_cuda(z, hidden, wc, wdt, NULL, T, C, nb, cap > 0 ? 1.0f : inv_t, 0.0f, cb, err))
            return err_wrap(err, "logprob_backward_cuda chunk at %d", v0);
        if (cap > 0) {
            cap_chunk<<<cuda_blocks((size_t)T * nb, 256), 256, 0, cb->stream>>>(z, (size_t)T * nb, cap, inv_t);
            if (cuda_launch_check("logprob_backward_cuda cap", err)) return -1;
        }
        dlogits<<<cuda_blocks((size_t)T * nb, 256), 256, 0, cb->stream>>>(z, dlogp, dentropy, targets, lse,
                                                                           entropy, T, nb, v0, inv_t,
                                                                           cap > 0 ? temperature / cap : 0.0f);
        if (cuda_launch_check("logprob_backward_cuda dlogits", err)) return -1;
        if (matmul_backward_dt_cuda(dhidden, dw_lm ? dw_lm + (size_t)v0 * C : NULL, NULL, z,
                                    hidden, wc, wdt, T, C, nb, 1.0f, v0 == 0 ? 0.0f : 1.0f, cb, err))
            return err_wrap(err, "logprob_backward_cuda chunk at %d", v0);
    }
    return 0;
}

extern "C" int logprob_backward_dt_cuda(float *dhidden, float *dw_lm, const float *dlogp,
                                        const float *dentropy, const float *hidden,
                                        const void *w_lm, DType wdt, const int *targets,
                                        const float *lse, const float *entropy, int T, int C,
                                        int V, float temperature, float *ws, int vchunk,
                                        CudaBlas *cb, PailErr *err) {
    return logprob_backward_cap_dt_cuda(dhidden, dw_lm, dlogp, dentropy, hidden, w_lm, wdt, targets, lse, entropy, T,
                                        C, V, temperature, 0.0f, ws, vchunk, cb, err);
}

extern "C" int logprob_backward_cuda(float *dhidden, float *dw_lm, const float *dlogp,
                                     const float *dentropy, const float *hidden,
                                     const float *w_lm, const int *targets, const float *lse,
                                     const float *entropy, int T, int C, int V, float temperature,
                                     float *ws, int vchunk, CudaBlas *cb, PailErr *err) {
    return logprob_backward_dt_cuda(dhidden, dw_lm, dlogp, dentropy, hidden, w_lm, DT_F32, targets,
                                    lse, entropy, T, C, V, temperature, ws, vchunk, cb, err);
}

// One block per row of a row block's full logits: max, sum of exp, the target's
// logit; the row becomes p in place. CPU twin: logprob_forward_expect.
__global__ static void row_softmax(float *logp, float *entropy, float *lse, float *z,
                                   const int *targets, int V, float cap_k) {
    __shared__ float sh[32];
    int r = blockIdx.x;
    float *zr = z + (size_t)r * V;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, zr[j]);
    m = block_reduce(m, sh, true);
    float s = 0.0f, a = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float e = expf(zr[j] - m);
        s += e;
        a += e * zr[j];
    }
    s = block_reduce(s, sh, false);
    a = block_reduce(a, sh, false);
    float l = m + logf(s), inv_s = 1.0f / s;
    if (threadIdx.x == 0) {
        logp[r] = zr[targets[r]] - l;  // read before any thread rewrites the row
        if (lse) lse[r] = l;
        if (entropy) entropy[r] = l - a * inv_s;
    }
    __syncthreads();
    if (cap_k > 0)  // capped logits: p (1 - tanh^2), tanh = z temperature / cap
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float th = zr[j] * cap_k;
            zr[j] = expf(zr[j] - m) * inv_s * (1.0f - th * th);
        }
    else
        for (int j = threadIdx.x; j < V; j += blockDim.x) zr[j] = expf(zr[j] - m) * inv_s;
}

// Capped: one block per row; x = hidden_t . W_t (block sum), then the row's difference.
__global__ static void expect_diff_cap(float *dhidden, const float *dlogp, const float *expect, const void *w_lm,
                                       DType wdt, const int *targets, const float *hidden, int C, float inv_t,
                                       float cap) {
    __shared__ float sh[32];
    int t = blockIdx.x;
    size_t wrow = (size_t)targets[t] * C;
    float x = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) x += hidden[(size_t)t * C + c] * dt_load(w_lm, wdt, wrow + c);
    x = block_reduce(x, sh, false);
    float th = tanhf(x / cap), gt = (1.0f - th * th) * inv_t;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dhidden[(size_t)t * C + c] = dlogp[t] * (dt_load(w_lm, wdt, wrow + c) * gt - expect[(size_t)t * C + c]);
}

__global__ static void expect_diff(float *dhidden, const float *dlogp, const float *expect,
                                   const void *w_lm, DType wdt, const int *targets, int T, int C,
                                   float inv_t) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    int t = (int)(i / C), c = (int)(i % C);
    dhidden[i] = dlogp[t] * (dt_load(w_lm, wdt, (size_t)targets[t] * C + c) * inv_t - expect[i]);
}

extern "C" int logprob_forward_expect_cap_dt_cuda(float *logp, float *entropy, float *lse,
                                                  float *expect, const float *hidden,
                                                  const void *w_lm, DType wdt, const int *targets,
                                                  int T, int C, int V, float temperature, float cap, float *ws,
                                                  size_t ws_floats, CudaBlas *cb, PailErr *err) {
    size_t rows = ws_floats / (size_t)V;
    if (!(temperature > 0) || rows < 1)
        return err_set(err, PAIL_ERR_INVALID,
                       "logprob_forward_expect_cuda: temperature %g, workspace %zu floats for V %d",
                       (double)temperature, ws_floats, V);
    float inv_t = 1.0f / temperature;
    for (int t0 = 0; t0 < T; t0 += (int)rows) {
        int nr = T - t0 < (int)rows ? T - t0 : (int)rows;
        if (matmul_forward_dt_cuda(ws, hidden + (size_t)t0 * C, w_lm, wdt, NULL, nr, C, V, cap > 0 ? 1.0f : inv_t,
                                   0.0f, cb, err))
            return err_wrap(err, "logprob_forward_expect_cuda rows at %d", t0);
        if (cap > 0) {
            cap_chunk<<<cuda_blocks((size_t)nr * V, 256), 256, 0, cb->stream>>>(ws, (size_t)nr * V, cap, inv_t);
            if (cuda_launch_check("logprob_forward_expect_cuda cap", err)) return -1;
        }
        row_softmax<<<nr, 256, 0, cb->stream>>>(logp + t0, entropy ? entropy + t0 : NULL, lse ? lse + t0 : NULL,
                                                ws, targets + t0, V, cap > 0 ? temperature / cap : 0.0f);
        if (cuda_launch_check("logprob_forward_expect_cuda softmax", err)) return -1;
        if (matmul_backward_dt_cuda(expect + (size_t)t0 * C, NULL, NULL, ws, NULL, w_lm, wdt, nr, C,
                                    V, inv_t, 0.0f, cb, err))
            return err_wrap(err, "logprob_forward_expect_cuda rows at %d", t0);
    }
    return 0;
}

extern "C" int logprob_forward_expect_dt_cuda(float *logp, float *entropy, float *lse,
                                              float *expect, const float *hidden,
                                              const void *w_lm, DType wdt, const int *targets,
                                              int T, int C, int V, float temperature, float *ws,
                                              size_t ws_floats, CudaBlas *cb, PailErr *err) {
    return logprob_forward_expect_cap_dt_cuda(logp, entropy, lse, expect, hidden, w_lm, wdt, targets, T, C, V,
                                              temperature, 0.0f, ws, ws_floats, cb, err);
}

extern "C" int logprob_forward_expect_cuda(float *logp, float *entropy, float *lse,
                                           float *expect, const float *hidden, const float *w_lm,
                                           const int *targets, int T, int C, int V,
                                           float temperature, float *ws, size_t ws_floats,
                                           CudaBlas *cb, PailErr *err) {
    return logprob_forward_expect_dt_cuda(logp, entropy, lse, expect, hidden, w_lm, DT_F32, targets,
                                          T, C, V, temperature, ws, ws_floats, cb, err);
}

extern "C" int logprob_backward_expect_dt_cuda(float *dhidden, const float *dlogp,
                                               const float *expect, const void *w_lm, DType wdt,
                                               const int *targets, int T, int C,
                                               float temperature, CudaBlas *cb, PailErr *err) {
    if (dt_check_row(wdt, C, "logprob_backward_expect_cuda", err)) return -1;
    if (T <= 0) return 0;
    expect_diff<<<cuda_blocks((size_t)T * C, 256), 256, 0, cb->stream>>>(dhidden, dlogp, expect, w_lm, wdt,
                                                                          targets, T, C, 1.0f / temperature);
    return cuda_launch_check("logprob_backward_expect_cuda", err);
}

extern "C" int logprob_backward_expect_cap_dt_cuda(float *dhidden, const float *dlogp,
                                                   const float *expect, const void *w_lm, DType wdt,
                                                   const int *targets, int T, int C, float temperature, float cap,
                                                   const float *hidden, CudaBlas *cb, PailErr *err) {
    if (!(cap > 0))
        return logprob_backward_expect_dt_cuda(dhidden, dlogp, expect, w_lm, wdt, targets, T, C, temperature, cb, err);
    if (dt_check_row(wdt, C, "logprob_backward_expect_cuda", err)) return -1;
    if (T <= 0) return 0;
    expect_diff_cap<<<T, 256, 0, cb->stream>>>(dhidden, dlogp, expect, w_lm, wdt, targets, hidden, C,
                                               1.0f / temperature, cap);
    return cuda_launch_check("logprob_backward_expect_cuda", err);
}

extern "C" int logprob_backward_expect_cuda(float *dhidden, const float *dlogp,
                                            const float *expect, const float *w_lm,
                                            const int *targets, int T, int C, float temperature,
                                            CudaBlas *cb, PailErr *err) {
    return logprob_backward_expect_dt_cuda(dhidden, dlogp, expect, w_lm, DT_F32, targets, T, C,
                                           temperature, cb, err);
}
