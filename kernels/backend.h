// The compute backend: one table of ops, the way src/store/store.h's
// StoreBackend serves file:// and s3://. The model driver (src/model/
// transformer.c) calls every op through it and never dereferences tensor
// memory, so a CPU backend (kernels/backend_cpu.c over the kernels/<op>.c fast
// paths) and a CUDA backend (kernels/backend_cuda.cu over the <op>.cu twins,
// `make CUDA=1`) are interchangeable: switching is a pointer. A third, the
// stand-in device (kernels/backend_sim.c, --device sim), runs the CPU kernels
// under a GPU's rules (memory the host cannot touch, ops on a stream of their
// own) so that CI proves the code never reads device memory behind the table.
//
// The op contract, the same on both backends:
//   - argument order: the backend (the context), outputs, inputs, sizes,
//     options, the caller's error; each op returns 0, or -1 with err filled in;
//   - every tensor and index array is in the backend's memory (host memory on
//     the CPU, device memory on CUDA and sim): alloc / to_device / to_host move
//     bytes; to_device copies (or stages) the host bytes before it returns;
//   - shapes and semantics are those of kernels/kernels.h (doc/kernels.md);
//     input gradients are written, parameter gradients accumulated;
//   - ops are ordered on the backend's stream; sync waits and reports
//     (to_host syncs first). The CPU backend runs each op to completion on the
//     calling thread's OpenMP team (OMP_NUM_THREADS), or, called by every
//     thread of a parallel region the caller opened, on that team (team_ops).
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {  // the CUDA backend is compiled as C++; core/err.h has no guard of its own
#endif
#include "core/err.h"
#include "dtype.h"
#include "kernels.h"

typedef struct Backend Backend;

typedef enum { BACKEND_CPU, BACKEND_CUDA, BACKEND_SIM } BackendKind;

typedef struct {
    const char *name;  // "cpu", "cuda", "sim"
    // ---- memory (bytes; 64-byte aligned blocks) ----
    void *(*alloc)(Backend *b, size_t bytes, PailErr *err);  // NULL with err naming the size
    void (*release)(Backend *b, void *p);                    // NULL is fine
    int (*to_device)(Backend *b, void *dst, const void *host_src, size_t bytes, PailErr *err);
    int (*to_host)(Backend *b, void *host_dst, const void *src, size_t bytes, PailErr *err);
    int (*sync)(Backend *b, PailErr *err);
    // ---- moving tensor data (what the driver did by hand between ops) ----
    int (*copy)(Backend *b, float *dst, const float *src, size_t n, PailErr *err);
    int (*zero)(Backend *b, float *dst, size_t n, PailErr *err);
    int (*add)(Backend *b, float *y, const float *x, size_t n, PailErr *err);  // y += x
    // dst(n,C)[i] = src[rows[i]]
    int (*gather_rows)(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err);
    // dst[rows[i]] = src(n,C)[i]: scattering selected rows back, and appending
    // to a KV cache (rows = each new token's physical cache row, computed by
    // the cache's owner: contiguous per slot today, a block table later)
    int (*scatter_rows)(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err);
    // the same into rows of C elements of a float dtype dt (a KV cache's pool):
    // dst[rows[i]] = src(n,C)[i] rounded as dtype_from_f32 (nearest even); DT_F32 is scatter_rows
    int (*scatter_rows_dt)(Backend *b, void *dst, DType dt, const float *src, const int *rows, int n, int C,
                           PailErr *err);
    // ---- compute: the contracts of kernels/kernels.h ----
    // W (and w_lm, the embedding table) in its storage dtype wdt (kernels/dtype.h):
    // the _dt contracts of kernels/kernels.h; LoRA A and B are DT_F32
    int (*matmul_forward)(Backend *b, float *out, const float *x, const void *W, DType wdt, const float *bias, int T,
                          int K, int N, float alpha, float beta, PailErr *err);
    int (*matmul_forward_lora)(Backend *b, float *out, float *la, const float *x, const void *W, DType wdt,
                               const float *bias, const float *A, const float *B, int T, int K, int N, int R,
                               float scale, float beta, PailErr *err);
    int (*matmul_backward)(Backend *b, float *dx, float *dW, float *dbias, const float *dout, const float *x,
                           const void *W, DType wdt, int T, int K, int N, float alpha, float dx_beta, PailErr *err);
    int (*rmsnorm_forward)(Backend *b, float *out, float *rstd, const float *x, const float *w, int rows, int C,
                           float eps, PailErr *err);
    int (*rmsnorm_backward)(Backend *b, float *dx, float *dw, const float *dout, const float *x, const float *w,
                            const float *rstd, int rows, int C, PailErr *err);
    int (*rope_forward)(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                        const float *sin_t, int T, int nh, int D, PailErr *err);
    int (*rope_backward)(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                         const float *sin_t, int T, int nh, int D, PailErr *err);
    int (*attention_forward)(Backend *b, float *out, float *lse, const float *q, const float *k, const float *v,
                             const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                             const float *sinks, PailErr *err);
    int (*attention_backward)(Backend *b, float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *out, const float *lse,
                              const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                              const float *sinks, float *dsinks, PailErr *err);
    // W: a sliding window (keys i-W+1..i), 0 = full causal attention (kernels.h); cap: the scores'
    // softcap cap tanh(s / cap), 0 = none (kernels.h's attention_*_cap); sinks (H floats, NULL =
    // none): gpt_oss's per-head sink logits, one more softmax column with no value; dsinks (H floats,
    // may be NULL) ACCUMULATES their gradient (kernels.h's attention_*_sink)
    // a paged KV cache: table (nseq, max_blocks) of KV_BLOCK-token blocks of the pools,
    // whose elements are kvdt (DT_F32, DT_BF16, DT_F16: kernels.h's attention_decode_forward_dt);
    // Tn = cu_new[nseq], the new tokens, given by the caller so that a device
    // sizes its launch without reading cu_new back
    int (*attention_decode_forward)(Backend *b, float *out, const float *q, const void *k_pool, const void *v_pool,
                                    DType kvdt, const int *cu_new, const int *cache_len, const int *table,
                                    int max_blocks, int nseq, int Tn, int H, int Hkv, int D, int W, float cap,
                                    const float *sinks, PailErr *err);
    int (*scale)(Backend *b, float *x, size_t n, float alpha, PailErr *err);  // x *= alpha in place
    int (*swiglu_forward)(Backend *b, float *out, const float *gate, const float *up, size_t n, PailErr *err);
    int (*swiglu_backward)(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                           const float *up, size_t n, PailErr *err);
    // gpt_oss's clamped swiglu (kernels.h's swiglu_clamp_*): alpha, limit from its config
    int (*swiglu_clamp_forward)(Backend *b, float *out, const float *gate, const float *up, size_t n, float alpha,
                                float limit, PailErr *err);
    int (*swiglu_clamp_backward)(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                                 const float *up, size_t n, float alpha, float limit, PailErr *err);
    // targets must be in [0, V): the driver checks them on the host (a device
    // cannot report which one is not)
    // cap: gemma2's final_logit_softcapping (kernels.h's logprob_*_cap_dt), 0 = none
    int (*logprob_forward)(Backend *b, float *logp, float *entropy, float *lse, const float *hidden,
                           const void *w_lm, DType wdt, const int *targets, int T, int C, int V, float temperature,
                           float cap, float *ws, int vchunk, PailErr *err);
    int (*logprob_backward)(Backend *b, float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                            const float *hidden, const void *w_lm, DType wdt, const int *targets, const float *lse,
                            const float *entropy, int T, int C, int V, float temperature, float cap, float *ws,
                            int vchunk, PailErr *err);
    int (*logprob_forward_expect)(Backend *b, float *logp, float *entropy, float *lse, float *expect,
                                  const float *hidden, const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                                  float temperature, float cap, float *ws, size_t ws_floats, PailErr *err);
    // hidden: the forward's rows, read only with a cap (the target's 1 - tanh^2)
    int (*logprob_backward_expect)(Backend *b, float *dhidden, const float *dlogp, const float *expect,
                                   const void *w_lm, DType wdt, const int *targets, int T, int C, float temperature,
                                   float cap, const float *hidden, PailErr *err);
    // tokens must be in [0, V) (checked on the host, as targets)
    int (*embedding_forward)(Backend *b, float *out, const void *table, DType tdt, const int *tokens, int T, int C,
                             int V, PailErr *err);
    int (*embedding_backward)(Backend *b, float *dtable, const float *dout, const int *tokens, int T, int C,
                              PailErr *err);
    // ---- generation: one next token per row, kernels.h's sample_forward (every
    // array in backend memory, sp on the host); the ids, log-probs and stop
    // flags are what crosses to the host, never the logits ----
    // ws: sample_ws(b, n, V, sp) bytes of backend memory, the caller's (planned once)
    size_t (*sample_ws)(Backend *b, int n, int V, const SampleParams *sp);
    int (*sample)(Backend *b, int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                  const int *lrow, const int *rslot, int n, int V, const SampleParams *sp, const int32_t *stop_ids,
                  int n_stop, void *ws, size_t ws_bytes, PailErr *err);
    // *sumsq: a host double (the CUDA backend waits for it)
    int (*adamw_grad_sumsq)(Backend *b, double *sumsq, const float *g, size_t n, PailErr *err);
    int (*adamw_update)(Backend *b, float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int step, float grad_scale, PailErr *err);
    // phi3's partial rotary: RoPE on the first rd of D dims (kernels.h rope_partial)
    int (*rope_partial_forward)(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                                const float *sin_t, int T, int nh, int D, int rd, PailErr *err);
    int (*rope_partial_backward)(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                                 const float *sin_t, int T, int nh, int D, int rd, PailErr *err);
    // cohere: LayerNorm without bias (weight row r % wrows), rope on adjacent pairs (kernels.h)
    int (*layernorm_forward)(Backend *b, float *out, float *mean, float *rstd, const float *x, const float *w,
                             int rows, int C, int wrows, float eps, PailErr *err);
    int (*layernorm_backward)(Backend *b, float *dx, float *dw, const float *dout, const float *x, const float *w,
                              const float *mean, const float *rstd, int rows, int C, int wrows, PailErr *err);
    int (*rope_interleaved_forward)(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                                    const float *sin_t, int T, int nh, int D, PailErr *err);
    int (*rope_interleaved_backward)(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                                     const float *sin_t, int T, int nh, int D, PailErr *err);
    // gemma's MLP activation: gelu_tanh(gate) * up (kernels.h's geglu_forward)
    int (*geglu_forward)(Backend *b, float *out, const float *gate, const float *up, size_t n, PailErr *err);
    int (*geglu_backward)(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                          const float *up, size_t n, PailErr *err);
    // x = cap tanh(x / cap) in place (gemma2's final_logit_softcapping on the decode logits)
    int (*softcap)(Backend *b, float *x, size_t n, float cap, PailErr *err);
    // ---- mixture-of-experts (kernels.h's moe_* and sigmoid_gate_*); idx, tok, pos, offs are
    // int arrays in backend memory (the driver copies offs (E+1) to the host to size its
    // per-expert GEMMs) ----
    int (*moe_route_forward)(Backend *b, int *idx, float *w, const float *logits, int T, int E, int K, int norm,
                             PailErr *err);
    int (*moe_route_backward)(Backend *b, float *dlogits, const float *dw, const float *logits, const int *idx,
                              const float *w, int T, int E, int K, int norm, PailErr *err);
    int (*moe_group)(Backend *b, int *tok, int *pos, int *offs, const int *idx, int T, int K, int E, PailErr *err);
    int (*moe_combine_forward)(Backend *b, float *y, const float *h, const float *w, const int *pos, int T, int K,
                               int C, float beta, PailErr *err);
    int (*moe_combine_backward)(Backend *b, float *dh, float *dw, const float *dy, const float *h, const float *w,
                                const int *pos, int T, int K, int C, PailErr *err);
    int (*sigmoid_gate_forward)(Backend *b, float *y, const float *g, const float *s, int T, int C, float beta,
                                PailErr *err);
    int (*sigmoid_gate_backward)(Backend *b, float *ds, float *dg, const float *dy, const float *g, const float *s,
                                 int T, int C, PailErr *err);
} BackendOps;

struct Backend {
    const BackendOps *ops;
    BackendKind kind;
    bool host_memory;  // tensors are host memory (the CPU): results need no to_host copy
    // Every thread of a caller's OpenMP parallel region may issue the same ops
    // in the same order, and each op then shares out its work on that team
    // (kernels/parallel.h): a decode step opens one region for all its ops.
    bool team_ops;
    int device;        // CUDA ordinal; -1 on the CPU and sim
    char desc[160];    // "cpu (2 threads)", "cuda:0 NVIDIA H200 (139 GiB)"
    void *impl;        // backend state (CUDA: stream, cuBLAS handle, workspace; sim: arena, stream), owned
};

// --device values: "cpu", "cuda" (= cuda:0), "cuda:N", "auto" (cuda:0 when a
// usable GPU is there, else cpu), "sim" (the stand-in device). Checks the
// spelling only.
int backend_parse_device(const char *spec, BackendKind *kind, int *ordinal, PailErr *err);
// Opens the backend for a --device value. "cuda" where there is no usable GPU
// (a CPU-only build, no driver, no device, the CUDA runtime or cuBLAS missing)
// fails at once with one line naming what is missing (PAIL_ERR_UNSUPPORTED).
// max_memory (bytes, 0: none) sizes the sim device's arena.
int backend_open(Backend **out, const char *spec, size_t max_memory, PailErr *err);
void backend_close(Backend *b);
// The CPU backend (a process-wide instance; never fails, never closed).
Backend *backend_cpu(void);

// ---- the sim device (backend_sim.c) ----
// capacity: the arena's bytes (0: PAIL_SIM_MEMORY, else the host's memory; the
// smaller of capacity and PAIL_SIM_MEMORY when both). PAIL_SIM_FAIL_AFTER=N
// makes the Nth stream op fail. -1 with err when the arena cannot be mapped.
int backend_sim_init(Backend *b, size_t capacity, PailErr *err);
void backend_sim_free(Backend *b);
// For tests: hold (true) keeps queued ops from running until released;
// queued counts the ops queued or running; in_use the bytes allocated.
void backend_sim_hold(Backend *b, bool hold);
int backend_sim_queued(Backend *b);
size_t backend_sim_in_use(Backend *b);

// ---- for the backends' own files ----
int backend_cpu_init(Backend *b);
#ifdef PAIL_CUDA
int backend_cuda_init(Backend *b, int ordinal, PailErr *err);  // backend_cuda.cu
void backend_cuda_free(Backend *b);
#endif

#ifdef __cplusplus
}
#endif
