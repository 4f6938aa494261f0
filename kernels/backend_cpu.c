// The CPU backend (see backend.h): the table over the fast CPU paths of
// kernels/<op>.c, host memory, nothing asynchronous. Also --device parsing and
// backend_open, which picks this, the sim device (backend_sim.c) or the CUDA
// backend (backend_cuda.cu).
#include "backend.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/mem.h"
#include "kernels.h"
#include "parallel.h"

static void *cpu_alloc(Backend *b, size_t bytes, PailErr *err) {
    (void)b;
    void *p = mem_alloc_big(bytes ? bytes : 64);
    if (!p) err_set(err, PAIL_ERR_NOMEM, "cpu: cannot allocate %zu MiB", bytes >> 20);
    return p;
}
static void cpu_release(Backend *b, void *p) { (void)b; free(p); }

// ---- moving data: work-shared on a caller's team (kernels/parallel.h) ----
// Outside a region a move runs on the calling thread unless it is big: waking
// the team costs more than copying a few KiB (a decode step's rows).
enum { MOVE_CHUNK = 64 << 10, MOVE_BIG = 1 << 20 };  // bytes per task; bytes worth a region of their own

static void move_team(char *dst, const char *src, size_t bytes) {
    size_t nch = (bytes + MOVE_CHUNK - 1) / MOVE_CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t c = 0; c < nch; c++) {
        size_t o = c * MOVE_CHUNK, n = bytes - o < MOVE_CHUNK ? bytes - o : MOVE_CHUNK;
        memcpy(dst + o, src + o, n);
    }
}
static void zero_team(char *dst, size_t bytes) {
    size_t nch = (bytes + MOVE_CHUNK - 1) / MOVE_CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t c = 0; c < nch; c++) {
        size_t o = c * MOVE_CHUNK, n = bytes - o < MOVE_CHUNK ? bytes - o : MOVE_CHUNK;
        memset(dst + o, 0, n);
    }
}
static void add_team(float *y, const float *x, size_t n) {
    enum { F = MOVE_CHUNK / sizeof(float) };
    size_t nch = (n + F - 1) / F;
#pragma omp for schedule(static) nowait
    for (size_t c = 0; c < nch; c++) {
        size_t i1 = (c + 1) * F < n ? (c + 1) * F : n;
#pragma omp simd
        for (size_t i = c * F; i < i1; i++) y[i] += x[i];
    }
}
// dst[rows[i]] = src[i] (scatter) or dst[i] = src[rows[i]] (gather); rows of a
// scatter are distinct (each has one writer).
static void rows_team(float *dst, const float *src, const int *rows, int n, int C, int scatter) {
#pragma omp for schedule(static) nowait
    for (int i = 0; i < n; i++) {
        size_t d = scatter ? (size_t)rows[i] : (size_t)i, s = scatter ? (size_t)i : (size_t)rows[i];
        memcpy(dst + d * C, src + s * C, (size_t)C * sizeof(float));
    }
}

static int cpu_move(Backend *b, void *dst, const void *src, size_t bytes, PailErr *err) {
    (void)b; (void)err;
    if (dst != src && bytes) KERNEL_TEAM_IF(bytes >= MOVE_BIG, move_team(dst, src, bytes));
    return 0;
}
static int cpu_sync(Backend *b, PailErr *err) { (void)b; (void)err; return 0; }

static int cpu_copy(Backend *b, float *dst, const float *src, size_t n, PailErr *err) {
    return cpu_move(b, dst, src, n * sizeof(float), err);
}
static int cpu_zero(Backend *b, float *dst, size_t n, PailErr *err) {
    (void)b; (void)err;
    KERNEL_TEAM_IF(n * sizeof(float) >= MOVE_BIG, zero_team((char *)dst, n * sizeof(float)));
    return 0;
}
static int cpu_add(Backend *b, float *y, const float *x, size_t n, PailErr *err) {
    (void)b; (void)err;
    KERNEL_TEAM_IF(n * sizeof(float) >= MOVE_BIG, add_team(y, x, n));
    return 0;
}
static int cpu_gather_rows(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err) {
    (void)b; (void)err;
    KERNEL_TEAM_IF((size_t)n * C * sizeof(float) >= MOVE_BIG, rows_team(dst, src, rows, n, C, 0));
    return 0;
}
static int cpu_scatter_rows(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err) {
    (void)b; (void)err;
    KERNEL_TEAM_IF((size_t)n * C * sizeof(float) >= MOVE_BIG, rows_team(dst, src, rows, n, C, 1));
    return 0;
}

// dst's rows in a 16-bit dtype: each row rounded by dtype_from_f32 (vectorised, one thread a row).
// Into f16, a value past the largest finite one is stored as +-65504, not inf
// (one outlier would make a whole attention row NaN); NaN stays NaN.
static void rows_dt_team(void *dst, DType dt, const float *src, const int *rows, int n, int C) {
    size_t rb = (size_t)C * dtype_size(dt);
#pragma omp for schedule(static) nowait
    for (int i = 0; i < n; i++) {
        const float *s = src + (size_t)i * C;
        char *d = (char *)dst + (size_t)rows[i] * rb;
        if (dt != DT_F16) {
            dtype_from_f32(d, s, dt, (size_t)C);
            continue;
        }
        for (int c0 = 0; c0 < C; c0 += 256) {  // saturated a chunk at a time, through the fast converter
            float t[256];
            int m = C - c0 < 256 ? C - c0 : 256;
            for (int c = 0; c < m; c++) t[c] = s[c0 + c] > 65504.0f ? 65504.0f : s[c0 + c] < -65504.0f ? -65504.0f : s[c0 + c];
            dtype_from_f32(d + (size_t)c0 * 2, t, dt, (size_t)m);
        }
    }
}
static int cpu_scatter_rows_dt(Backend *b, void *dst, DType dt, const float *src, const int *rows, int n, int C,
                               PailErr *err) {
    if (dt == DT_F32) return cpu_scatter_rows(b, dst, src, rows, n, C, err);
    if (dt != DT_BF16 && dt != DT_F16)
        return err_set(err, PAIL_ERR_INVALID, "scatter_rows_dt: rows of %s are not a float dtype", dtype_name(dt));
    KERNEL_TEAM_IF((size_t)n * C * sizeof(float) >= MOVE_BIG, rows_dt_team(dst, dt, src, rows, n, C));
    return 0;
}

#define UNUSED (void)b; (void)err

static int cpu_matmul_forward(Backend *b, float *out, const float *x, const void *W, DType wdt, const float *bias,
                              int T, int K, int N, float alpha, float beta, PailErr *err) {
    UNUSED;
    matmul_forward_dt(out, x, W, wdt, bias, T, K, N, alpha, beta);
    return 0;
}
static int cpu_matmul_forward_lora(Backend *b, float *out, float *la, const float *x, const void *W, DType wdt,
                                   const float *bias, const float *A, const float *B, int T, int K, int N, int R,
                                   float scale, float beta, PailErr *err) {
    UNUSED;
    matmul_forward_lora_dt(out, la, x, W, wdt, bias, A, B, T, K, N, R, scale, beta);
    return 0;
}
static int cpu_matmul_backward(Backend *b, float *dx, float *dW, float *dbias, const float *dout, const float *x,
                               const void *W, DType wdt, int T, int K, int N, float alpha, float dx_beta,
                               PailErr *err) {
    UNUSED;
    matmul_backward_dt(dx, dW, dbias, dout, x, W, wdt, T, K, N, alpha, dx_beta);
    return 0;
}
static int cpu_rmsnorm_forward(Backend *b, float *out, float *rstd, const float *x, const float *w, int rows, int C,
                               float eps, PailErr *err) {
    UNUSED;
    rmsnorm_forward(out, rstd, x, w, rows, C, eps);
    return 0;
}
static int cpu_rmsnorm_backward(Backend *b, float *dx, float *dw, const float *dout, const float *x, const float *w,
                                const float *rstd, int rows, int C, PailErr *err) {
    UNUSED;
    rmsnorm_backward(dx, dw, dout, x, w, rstd, rows, C);
    return 0;
}
static int cpu_rope_forward(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                            const float *sin_t, int T, int nh, int D, PailErr *err) {
    UNUSED;
    rope_forward(out, x, pos, cos_t, sin_t, T, nh, D);
    return 0;
}
static int cpu_rope_backward(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                             const float *sin_t, int T, int nh, int D, PailErr *err) {
    UNUSED;
    rope_backward(dx, dout, pos, cos_t, sin_t, T, nh, D);
    return 0;
}
static int cpu_attention_forward(Backend *b, float *out, float *lse, const float *q, const float *k, const float *v,
                                 const int *cu, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                 const float *sinks, PailErr *err) {
    UNUSED;
    attention_forward_sink(out, lse, q, k, v, cu, nseq, T, H, Hkv, D, W, cap, sinks);
    return 0;
}
static int cpu_attention_backward(Backend *b, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                  const float *k, const float *v, const float *out, const float *lse, const int *cu,
                                  int nseq, int T, int H, int Hkv, int D, int W, float cap, const float *sinks,
                                  float *dsinks, PailErr *err) {
    UNUSED;
    attention_backward_sink(dq, dk, dv, dout, q, k, v, out, lse, cu, nseq, T, H, Hkv, D, W, cap, sinks, dsinks);
    return 0;
}
static int cpu_attention_decode_forward(Backend *b, float *out, const float *q, const void *k_pool,
                                        const void *v_pool, DType kvdt, const int *cu_new, const int *cache_len,
                                        const int *table, int max_blocks, int nseq, int Tn, int H, int Hkv,
                                        int D, int W, float cap, const float *sinks, PailErr *err) {
    (void)b;
    (void)Tn;  // the host reads cu_new itself
    if (kvdt != DT_F32 && kvdt != DT_BF16 && kvdt != DT_F16)
        return err_set(err, PAIL_ERR_INVALID, "attention_decode_forward: a KV pool of %s is not a float dtype",
                       dtype_name(kvdt));
    attention_decode_forward_sink(out, q, k_pool, v_pool, kvdt, cu_new, cache_len, table, max_blocks, nseq, H, Hkv,
                                  D, W, cap, sinks);
    return 0;
}
static int cpu_scale(Backend *b, float *x, size_t n, float alpha, PailErr *err) {
    UNUSED;
    scale_forward(x, n, alpha);
    return 0;
}
static int cpu_swiglu_forward(Backend *b, float *out, const float *gate, const float *up, size_t n, PailErr *err) {
    UNUSED;
    swiglu_forward(out, gate, up, n);
    return 0;
}
static int cpu_swiglu_backward(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                               const float *up, size_t n, PailErr *err) {
    UNUSED;
    swiglu_backward(dgate, dup, dout, gate, up, n);
    return 0;
}
static int cpu_swiglu_clamp_forward(Backend *b, float *out, const float *gate, const float *up, size_t n, float alpha,
                                    float limit, PailErr *err) {
    UNUSED;
    swiglu_clamp_forward(out, gate, up, n, alpha, limit);
    return 0;
}
static int cpu_swiglu_clamp_backward(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                                     const float *up, size_t n, float alpha, float limit, PailErr *err) {
    UNUSED;
    swiglu_clamp_backward(dgate, dup, dout, gate, up, n, alpha, limit);
    return 0;
}
static int cpu_softcap(Backend *b, float *x, size_t n, float cap, PailErr *err) {
    UNUSED;
    softcap_forward(x, n, cap);
    return 0;
}
static int cpu_geglu_forward(Backend *b, float *out, const float *gate, const float *up, size_t n, PailErr *err) {
    UNUSED;
    geglu_forward(out, gate, up, n);
    return 0;
}
static int cpu_geglu_backward(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                              const float *up, size_t n, PailErr *err) {
    UNUSED;
    geglu_backward(dgate, dup, dout, gate, up, n);
    return 0;
}
static int cpu_logprob_forward(Backend *b, float *logp, float *entropy, float *lse, const float *hidden,
                               const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                               float temperature, float cap, float *ws, int vchunk, PailErr *err) {
    (void)b;
    return logprob_forward_cap_dt(logp, entropy, lse, hidden, w_lm, wdt, targets, T, C, V, temperature, cap, ws, vchunk,
                                  err);
}
static int cpu_logprob_backward(Backend *b, float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                                const float *hidden, const void *w_lm, DType wdt, const int *targets,
                                const float *lse, const float *entropy, int T, int C, int V, float temperature,
                                float cap, float *ws, int vchunk, PailErr *err) {
    UNUSED;
    logprob_backward_cap_dt(dhidden, dw_lm, dlogp, dentropy, hidden, w_lm, wdt, targets, lse, entropy, T, C, V,
                            temperature, cap, ws, vchunk);
    return 0;
}
static int cpu_logprob_forward_expect(Backend *b, float *logp, float *entropy, float *lse, float *expect,
                                      const float *hidden, const void *w_lm, DType wdt, const int *targets, int T,
                                      int C, int V, float temperature, float cap, float *ws, size_t ws_floats,
                                      PailErr *err) {
    (void)b;
    return logprob_forward_expect_cap_dt(logp, entropy, lse, expect, hidden, w_lm, wdt, targets, T, C, V, temperature,
                                         cap, ws, ws_floats, err);
}
static int cpu_logprob_backward_expect(Backend *b, float *dhidden, const float *dlogp, const float *expect,
                                       const void *w_lm, DType wdt, const int *targets, int T, int C,
                                       float temperature, float cap, const float *hidden, PailErr *err) {
    UNUSED;
    logprob_backward_expect_cap_dt(dhidden, dlogp, expect, w_lm, wdt, targets, T, C, temperature, cap, hidden);
    return 0;
}
static int cpu_embedding_forward(Backend *b, float *out, const void *table, DType tdt, const int *tokens, int T,
                                 int C, int V, PailErr *err) {
    (void)b;
    return embedding_forward_dt(out, table, tdt, tokens, T, C, V, err);
}
static int cpu_embedding_backward(Backend *b, float *dtable, const float *dout, const int *tokens, int T, int C,
                                  PailErr *err) {
    UNUSED;
    embedding_backward(dtable, dout, tokens, T, C);
    return 0;
}
static size_t cpu_sample_ws(Backend *b, int n, int V, const SampleParams *sp) {
    (void)b, (void)n, (void)sp;
    return sample_ws_bytes(V);
}
static int cpu_sample(Backend *b, int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                      const int *lrow, const int *rslot, int n, int V, const SampleParams *sp, const int32_t *stop_ids,
                      int n_stop, void *ws, size_t ws_bytes, PailErr *err) {
    (void)b;
    return sample_forward(tok, logp, stopped, rng, logits, lrow, rslot, n, V, sp, stop_ids, n_stop, ws, ws_bytes, err);
}
static int cpu_adamw_grad_sumsq(Backend *b, double *sumsq, const float *g, size_t n, PailErr *err) {
    UNUSED;
    *sumsq = adamw_grad_sumsq(g, n);
    return 0;
}
static int cpu_adamw_update(Backend *b, float *p, float *m, float *v, const float *g, size_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                            PailErr *err) {
    UNUSED;
    adamw_update(p, m, v, g, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    return 0;
}
static int cpu_rope_partial_forward(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                                    const float *sin_t, int T, int nh, int D, int rd, PailErr *err) {
    UNUSED;
    rope_partial_forward(out, x, pos, cos_t, sin_t, T, nh, D, rd);
    return 0;
}
static int cpu_rope_partial_backward(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                                     const float *sin_t, int T, int nh, int D, int rd, PailErr *err) {
    UNUSED;
    rope_partial_backward(dx, dout, pos, cos_t, sin_t, T, nh, D, rd);
    return 0;
}

static int cpu_layernorm_forward(Backend *b, float *out, float *mean, float *rstd, const float *x, const float *w,
                                 int rows, int C, int wrows, float eps, PailErr *err) {
    UNUSED;
    layernorm_forward(out, mean, rstd, x, w, rows, C, wrows, eps);
    return 0;
}
static int cpu_layernorm_backward(Backend *b, float *dx, float *dw, const float *dout, const float *x, const float *w,
                                  const float *mean, const float *rstd, int rows, int C, int wrows, PailErr *err) {
    UNUSED;
    layernorm_backward(dx, dw, dout, x, w, mean, rstd, rows, C, wrows);
    return 0;
}
static int cpu_rope_interleaved_forward(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                                        const float *sin_t, int T, int nh, int D, PailErr *err) {
    UNUSED;
    rope_interleaved_forward(out, x, pos, cos_t, sin_t, T, nh, D);
    return 0;
}
static int cpu_rope_interleaved_backward(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                                         const float *sin_t, int T, int nh, int D, PailErr *err) {
    UNUSED;
    rope_interleaved_backward(dx, dout, pos, cos_t, sin_t, T, nh, D);
    return 0;
}

// ---- mixture-of-experts: the sizes checked here (the kernels assume them) ----
static int cpu_moe_route_forward(Backend *b, int *idx, float *w, const float *logits, int T, int E, int K, int norm,
                                 PailErr *err) {
    (void)b;
    if (moe_check_sizes(E, K, "moe_route_forward", err) < 0) return -1;
    moe_route_forward(idx, w, logits, T, E, K, norm);
    return 0;
}
static int cpu_moe_route_backward(Backend *b, float *dlogits, const float *dw, const float *logits, const int *idx,
                                  const float *w, int T, int E, int K, int norm, PailErr *err) {
    (void)b;
    if (moe_check_sizes(E, K, "moe_route_backward", err) < 0) return -1;
    moe_route_backward(dlogits, dw, logits, idx, w, T, E, K, norm);
    return 0;
}
static int cpu_moe_group(Backend *b, int *tok, int *pos, int *offs, const int *idx, int T, int K, int E,
                         PailErr *err) {
    (void)b;
    if (moe_check_sizes(E, K, "moe_group", err) < 0) return -1;
    moe_group(tok, pos, offs, idx, T, K, E);
    return 0;
}
static int cpu_moe_combine_forward(Backend *b, float *y, const float *h, const float *w, const int *pos, int T, int K,
                                   int C, float beta, PailErr *err) {
    (void)b;
    if (moe_check_k(K, "moe_combine_forward", err) < 0) return -1;
    moe_combine_forward(y, h, w, pos, T, K, C, beta);
    return 0;
}
static int cpu_moe_combine_backward(Backend *b, float *dh, float *dw, const float *dy, const float *h, const float *w,
                                    const int *pos, int T, int K, int C, PailErr *err) {
    (void)b;
    if (moe_check_k(K, "moe_combine_backward", err) < 0) return -1;
    moe_combine_backward(dh, dw, dy, h, w, pos, T, K, C);
    return 0;
}
static int cpu_sigmoid_gate_forward(Backend *b, float *y, const float *g, const float *s, int T, int C, float beta,
                                    PailErr *err) {
    UNUSED;
    sigmoid_gate_forward(y, g, s, T, C, beta);
    return 0;
}
static int cpu_sigmoid_gate_backward(Backend *b, float *ds, float *dg, const float *dy, const float *g,
                                     const float *s, int T, int C, PailErr *err) {
    UNUSED;
    sigmoid_gate_backward(ds, dg, dy, g, s, T, C);
    return 0;
}

static const BackendOps cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .to_device = cpu_move,
    .to_host = cpu_move,
    .sync = cpu_sync,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .add = cpu_add,
    .gather_rows = cpu_gather_rows,
    .scatter_rows = cpu_scatter_rows,
    .scatter_rows_dt = cpu_scatter_rows_dt,
    .matmul_forward = cpu_matmul_forward,
    .matmul_forward_lora = cpu_matmul_forward_lora,
    .matmul_backward = cpu_matmul_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_decode_forward = cpu_attention_decode_forward,
    .scale = cpu_scale,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .swiglu_clamp_forward = cpu_swiglu_clamp_forward,
    .swiglu_clamp_backward = cpu_swiglu_clamp_backward,
    .logprob_forward = cpu_logprob_forward,
    .logprob_backward = cpu_logprob_backward,
    .logprob_forward_expect = cpu_logprob_forward_expect,
    .logprob_backward_expect = cpu_logprob_backward_expect,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .sample_ws = cpu_sample_ws,
    .sample = cpu_sample,
    .adamw_grad_sumsq = cpu_adamw_grad_sumsq,
    .adamw_update = cpu_adamw_update,
    .rope_partial_forward = cpu_rope_partial_forward,
    .rope_partial_backward = cpu_rope_partial_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rope_interleaved_forward = cpu_rope_interleaved_forward,
    .rope_interleaved_backward = cpu_rope_interleaved_backward,
    .geglu_forward = cpu_geglu_forward,
    .geglu_backward = cpu_geglu_backward,
    .softcap = cpu_softcap,
    .moe_route_forward = cpu_moe_route_forward,
    .moe_route_backward = cpu_moe_route_backward,
    .moe_group = cpu_moe_group,
    .moe_combine_forward = cpu_moe_combine_forward,
    .moe_combine_backward = cpu_moe_combine_backward,
    .sigmoid_gate_forward = cpu_sigmoid_gate_forward,
    .sigmoid_gate_backward = cpu_sigmoid_gate_backward,
};

int backend_cpu_init(Backend *b) {
    memset(b, 0, sizeof *b);
    b->ops = &cpu_ops;
    b->kind = BACKEND_CPU;
    b->host_memory = true;
    // every op transformer_extend issues shares a caller's team
    // (kernels/parallel.h); logprob.c and adamw.c do not yet, so nothing else
    // may call them inside such a region
    b->team_ops = true;
    b->device = -1;
    snprintf(b->desc, sizeof b->desc, "cpu (%d threads)", omp_get_max_threads());
    return 0;
}

Backend *backend_cpu(void) {
    static Backend cpu;
    static int ready;  // benign race: every thread writes the same bytes
    if (!ready) {
        backend_cpu_init(&cpu);
        ready = 1;
    }
    return &cpu;
}

int backend_parse_device(const char *spec, BackendKind *kind, int *ordinal, PailErr *err) {
    *ordinal = -1;
    if (!spec || !strcmp(spec, "cpu")) {
        *kind = BACKEND_CPU;
        return 0;
    }
    if (!strcmp(spec, "sim")) {
        *kind = BACKEND_SIM;
        return 0;
    }
    if (!strcmp(spec, "auto")) {
        *kind = BACKEND_CUDA;  // with ordinal -1: fall back to the CPU
        return 0;
    }
    if (!strncmp(spec, "cuda", 4)) {
        const char *n = spec + 4;
        *kind = BACKEND_CUDA;
        *ordinal = 0;
        if (!*n) return 0;
        char *end;
        long v = *n == ':' ? strtol(n + 1, &end, 10) : -1;
        if (*n == ':' && end != n + 1 && !*end && v >= 0 && v < 1024) {
            *ordinal = (int)v;
            return 0;
        }
    }
    return err_set(err, PAIL_ERR_INVALID, "--device '%s': use cpu, cuda, cuda:N, auto or sim", spec);
}

int backend_open(Backend **out, const char *spec, size_t max_memory, PailErr *err) {
    *out = NULL;
    BackendKind kind;
    int ordinal;
    if (backend_parse_device(spec, &kind, &ordinal, err) < 0) return -1;
    if (kind == BACKEND_CPU) {
        *out = backend_cpu();
        return 0;
    }
    if (kind == BACKEND_SIM) {
        Backend *b = calloc(1, sizeof *b);
        if (!b) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
        if (backend_sim_init(b, max_memory, err) < 0) {
            free(b);
            return -1;
        }
        *out = b;
        return 0;
    }
    bool auto_pick = ordinal < 0;
#ifdef PAIL_CUDA
    Backend *b = calloc(1, sizeof *b);
    if (!b) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    PailErr cerr = {0};
    if (backend_cuda_init(b, auto_pick ? 0 : ordinal, &cerr) == 0) {
        *out = b;
        return 0;
    }
    free(b);
    if (auto_pick) {
        *out = backend_cpu();
        return 0;
    }
    return err_set(err, cerr.code, "--device %s: %s", spec, cerr.msg);
#else
    if (auto_pick) {
        *out = backend_cpu();
        return 0;
    }
    return err_set(err, PAIL_ERR_UNSUPPORTED, "--device %s: this pail was built without CUDA (build it with make CUDA=1)",
                   spec);
#endif
}

void backend_close(Backend *b) {
    if (!b || b == backend_cpu()) return;
    if (b->kind == BACKEND_SIM) backend_sim_free(b);
#ifdef PAIL_CUDA
    else backend_cuda_free(b);
#endif
    free(b);
}
