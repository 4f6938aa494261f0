// Compute kernels for the decoder forward/backward, sampling and the optimizer.
// One op per file pair: kernels/<op>.c holds the plain-loop reference (<op>_*_ref,
// for tests) and the fast CPU path; kernels/<op>.cu the CUDA twin (<op>_*_cuda,
// built with `make CUDA=1`). Argument order everywhere: outputs, inputs, sizes,
// options. Shapes use the legend of doc/kernels.md; tensors are fp32, row-major, but
// for the frozen weights of the _dt functions (kernels/dtype.h).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {  // the CUDA twins are compiled as C++; core/err.h has no guard of its own
#endif
#include "core/err.h"
#include "dtype.h"

// Gradient convention: input gradients (dx, dgate, dq, ...) are written (=),
// parameter gradients (dw, dW, dbias, dtable, dw_lm) are accumulated (+=), so a
// step zeroes parameter grads once and never allocates. matmul's dx takes beta.
// Fast paths parallelise with OpenMP over the calling thread's team size
// (OMP_NUM_THREADS); none of them allocates (but for the per-thread conversion
// panels of the _dt GEMMs, allocated once).

// ---- matmul: out(T,N) = alpha * x(T,K) W(N,K)^T + beta * out + bias(N) ----
// bias may be NULL; beta == 0 never reads out. Fast path: a hand-written
// mat-vec that streams W once when T <= matmul_small_t_max, OpenBLAS sgemm above.
extern int matmul_small_t_max;
void matmul_forward(float *out, const float *x, const float *W, const float *bias,
                    int T, int K, int N, float alpha, float beta);
void matmul_forward_ref(float *out, const float *x, const float *W, const float *bias,
                        int T, int K, int N, float alpha, float beta);
// dx(T,K) = alpha * dout(T,N) W(N,K) + dx_beta * dx   (dx may be NULL)
// dW(N,K) += alpha * dout^T x                          (dW may be NULL)
// dbias(N) += alpha * sum_t dout[t]                    (dbias may be NULL)
// A LoRA-adapted projection in one pass: out(T,N) = x W^T + beta out + bias
// + scale (x A^T) B^T, with la(T,R) = x A^T written (A (R,K), B (N,R)). For
// T <= matmul_small_t_max one OpenMP region computes la, then streams W with
// each row's B term added before its sum (decode: one region, not three);
// above, the three products.
void matmul_forward_lora(float *out, float *la, const float *x, const float *W, const float *bias,
                         const float *A, const float *B, int T, int K, int N, int R, float scale,
                         float beta);
void matmul_forward_lora_ref(float *out, float *la, const float *x, const float *W,
                             const float *bias, const float *A, const float *B, int T, int K,
                             int N, int R, float scale, float beta);
void matmul_backward(float *dx, float *dW, float *dbias, const float *dout, const float *x,
                     const float *W, int T, int K, int N, float alpha, float dx_beta);
void matmul_backward_ref(float *dx, float *dW, float *dbias, const float *dout,
                         const float *x, const float *W, int T, int K, int N, float alpha,
                         float dx_beta);

// ---- the same products with W in a storage dtype (kernels/dtype.h) ----
// W (N,K) is f32, bf16 or f16 and is converted to fp32 exactly; x, out, bias,
// the LoRA A and B and every gradient are fp32. With wdt == DT_F32 each is the
// function above, bit for bit. Small T (the mat-vec) converts each W row in
// registers as it streams it; larger T converts W a panel at a time into
// per-thread scratch (allocated once per thread, at its first such call) and
// runs the fp32 GEMM on it. dW (an fp32 gradient) does not read W.
// A quantized W (dtype_is_quant: Q8_0 .. Q6_K): N rows of dtype_row_bytes(wdt,
// K) bytes, K a multiple of dtype_block(wdt); the result is the fp32 product
// on W dequantized as quant_dequant does, up to the order of the sums (the
// mat-vec dequantizes each block in registers, kernels/matmul_quant.c).
void matmul_forward_dt(float *out, const float *x, const void *W, DType wdt, const float *bias,
                       int T, int K, int N, float alpha, float beta);
void matmul_forward_lora_dt(float *out, float *la, const float *x, const void *W, DType wdt,
                            const float *bias, const float *A, const float *B, int T, int K,
                            int N, int R, float scale, float beta);
void matmul_backward_dt(float *dx, float *dW, float *dbias, const float *dout, const float *x,
                        const void *W, DType wdt, int T, int K, int N, float alpha,
                        float dx_beta);
// Which path a product of T rows over a wdt weight takes on this CPU, for the
// benches and logs: "mat-vec, bf16 rows converted in registers (avx512)",
// "sgemm over f32 panels converted from bf16 (avx2)", "sgemm (fp32 weights)", ...
// (a static string; the ISA is dtype_isa()'s).
const char *matmul_path_name(int T, DType wdt);

// ---- rmsnorm: out(R,C) = x * rsqrt(mean(x^2) + eps) * w(C) over each of `rows` rows ----
// rstd(rows) receives the per-row 1/rms for the backward (may be NULL). For the
// per-head q_norm/k_norm, rows = T*H and C = D. out may equal x.
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int rows, int C,
                     float eps);
void rmsnorm_forward_ref(float *out, float *rstd, const float *x, const float *w, int rows,
                         int C, float eps);
// dx = written; dw += (may be NULL when the weight is frozen). rstd from forward.
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int rows, int C);
void rmsnorm_backward_ref(float *dx, float *dw, const float *dout, const float *x,
                          const float *w, const float *rstd, int rows, int C);

// ---- rope: rotary embedding, half-rotation layout (HF rotate_half) ----
typedef struct {      // transformers' rope_scaling for rope_type "llama3"
    float factor;     // 0 = no scaling (plain default rope)
    float low_freq_factor, high_freq_factor;
    int original_max_position;  // original_max_position_embeddings
} RopeScaling;
// inv_freq(D/2) as transformers computes it in fp32 (_compute_default/_llama3_parameters).
void rope_inv_freq(float *inv_freq, int D, float theta, const RopeScaling *scaling);
// longrope (phi3): inv_freq[i] = 1 / (ext[i] * theta^(2i/D)) in fp32, as transformers'
// _compute_longrope_parameters (ext: its short_factor or long_factor, D/2 entries).
void rope_inv_freq_ext(float *inv_freq, int D, float theta, const float *ext);
// cos, sin (P, D/2): tables for positions 0..P-1; angle = fp32(pos * inv_freq[i]).
void rope_table_build(float *cos_t, float *sin_t, const float *inv_freq, int P, int D);
// out(T,nh,D) = rope(x) with row t rotated by position pos[t] (0 <= pos < P, the
// caller's table size). out may equal x. nh = H for q, Hkv for k.
void rope_forward(float *out, const float *x, const int *pos, const float *cos_t,
                  const float *sin_t, int T, int nh, int D);
void rope_forward_ref(float *out, const float *x, const int *pos, const float *cos_t,
                      const float *sin_t, int T, int nh, int D);
// dx = R(pos)^T dout (written; dx may equal dout).
void rope_backward(float *dx, const float *dout, const int *pos, const float *cos_t,
                   const float *sin_t, int T, int nh, int D);
void rope_backward_ref(float *dx, const float *dout, const int *pos, const float *cos_t,
                       const float *sin_t, int T, int nh, int D);

// ---- rope_partial: RoPE on the first rd of each head's D dims, the rest passed through
// (phi3's partial_rotary_factor); tables (P, rd/2) from rope_table_build(.., rd); rd even,
// 2 <= rd <= D. out may equal x (then the passed dims are not touched). ----
void rope_partial_forward(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t, int T,
                          int nh, int D, int rd);
void rope_partial_forward_ref(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                              int T, int nh, int D, int rd);
// dx = R(pos)^T dout on the rotated dims, dout elsewhere (dx may equal dout).
void rope_partial_backward(float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                           int T, int nh, int D, int rd);
void rope_partial_backward_ref(float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                               int T, int nh, int D, int rd);

// ---- attention: causal grouped-query attention over a packed row ----
// q(T,H,D), k,v(T,Hkv,D); nseq sequences packed back to back, sequence s is rows
// cu_seqlens[s] .. cu_seqlens[s+1]-1 (cu_seqlens[0] = 0, cu_seqlens[nseq] = T).
// Query i of sequence s attends keys cu_seqlens[s]..i only, and with a sliding
// window W > 0 only the last W of them (max(cu_seqlens[s], i-W+1)..i; W = 0:
// all); scale = 1/sqrt(D);
// q head h reads kv head h / (H/Hkv). out(T,H,D); lse(T,H) = log-sum-exp of the
// scaled scores, saved for the backward (may be NULL).
void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W);
void attention_forward_ref(float *out, float *lse, const float *q, const float *k,
                           const float *v, const int *cu_seqlens, int nseq, int T, int H,
                           int Hkv, int D, int W);
// dq, dk, dv written; recomputes the probabilities from q, k and lse.
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse,
                        const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W);
void attention_backward_ref(float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, const int *cu_seqlens, int nseq, int T, int H,
                            int Hkv, int D, int W);
// Decode: a few new tokens per sequence against a paged KV cache. A layer's
// pool k_pool, v_pool (n_blocks, KV_BLOCK, Hkv, D) holds sequence s's token j
// in block table[s * max_blocks + j / KV_BLOCK], row j % KV_BLOCK, for every j
// up to cache_len[s] (the new ones included); blocks may be shared between
// sequences. q(Tn,H,D): the new tokens, sequence s owns rows
// cu_new[s]..cu_new[s+1]-1 and its r-th new token sits at position
// cache_len[s] - n_s + r, attending positions 0..that one (the last W of them
// under a sliding window W > 0; the cache keeps every position).
enum { KV_BLOCK = 64 };  // tokens a KV block (a multiple of the CPU path's key chunk)
void attention_decode_forward(float *out, const float *q, const float *k_pool, const float *v_pool, const int *cu_new,
                              const int *cache_len, const int *table, int max_blocks, int nseq, int H, int Hkv, int D,
                              int W);
void attention_decode_forward_ref(float *out, const float *q, const float *k_pool, const float *v_pool,
                                  const int *cu_new, const int *cache_len, const int *table, int max_blocks, int nseq,
                                  int H, int Hkv, int D, int W);
// The same three ops with a softcap (gemma2's attn_logit_softcapping): cap > 0 replaces each
// scaled score s by cap tanh(s / cap) before the mask and the softmax; cap = 0 is the ops above.
void attention_forward_cap(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap);
void attention_forward_ref_cap(float *out, float *lse, const float *q, const float *k, const float *v,
                               const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap);
void attention_backward_cap(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, const int *cu_seqlens, int nseq,
                            int T, int H, int Hkv, int D, int W, float cap);
void attention_backward_ref_cap(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse,
                                const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap);
void attention_decode_forward_cap(float *out, const float *q, const float *k_pool, const float *v_pool,
                                  const int *cu_new, const int *cache_len, const int *table, int max_blocks, int nseq,
                                  int H, int Hkv, int D, int W, float cap);
void attention_decode_forward_ref_cap(float *out, const float *q, const float *k_pool, const float *v_pool,
                                      const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                      int nseq, int H, int Hkv, int D, int W, float cap);
// Decode over pools in a storage dtype kvdt (DT_F32, DT_BF16 or DT_F16; kernels/dtype.h):
// k_pool, v_pool hold (n_blocks, KV_BLOCK, Hkv, D) elements of kvdt, each widened to fp32
// exactly as it is read (q, out and the arithmetic are fp32); cap as the _cap op (0: none).
// kvdt = DT_F32 is attention_decode_forward_cap, bit for bit. The fast path reads each K and
// V row once for the G = H/Hkv query heads that share it (kernels/attention_decode.c).
void attention_decode_forward_dt(float *out, const float *q, const void *k_pool, const void *v_pool, DType kvdt,
                                 const int *cu_new, const int *cache_len, const int *table, int max_blocks, int nseq,
                                 int H, int Hkv, int D, int W, float cap);
void attention_decode_forward_ref_dt(float *out, const float *q, const void *k_pool, const void *v_pool, DType kvdt,
                                     const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                     int nseq, int H, int Hkv, int D, int W, float cap);
// The same ops with attention sinks (gpt_oss): sinks (H floats; NULL = none, exactly the ops
// above) gives query head h a learned logit sinks[h] that joins every row's softmax as one more
// column with no value: p_j = exp(s_j - lse), lse = log(exp(sinks[h]) + sum_j exp(s_j)) (the lse
// saved includes the sink), out = sum_j p_j v_j. The backward's dq, dk, dv are the usual ones given
// that lse; dsinks (H floats, may be NULL) is ACCUMULATED:
// dsinks[h] += sum_t -exp(sinks[h] - lse[t,h]) (dout[t,h,:] . out[t,h,:]).
void attention_forward_sink(float *out, float *lse, const float *q, const float *k, const float *v,
                            const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                            const float *sinks);
void attention_forward_ref_sink(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                const float *sinks);
void attention_backward_sink(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, const int *cu_seqlens, int nseq,
                             int T, int H, int Hkv, int D, int W, float cap, const float *sinks, float *dsinks);
// The reference recomputes each row's softmax with its sink column (out, lse unused).
void attention_backward_ref_sink(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out, const float *lse,
                                 const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                 const float *sinks, float *dsinks);
void attention_decode_forward_sink(float *out, const float *q, const void *k_pool, const void *v_pool, DType kvdt,
                                   const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                   int nseq, int H, int Hkv, int D, int W, float cap, const float *sinks);
void attention_decode_forward_ref_sink(float *out, const float *q, const void *k_pool, const void *v_pool,
                                       DType kvdt, const int *cu_new, const int *cache_len, const int *table,
                                       int max_blocks, int nseq, int H, int Hkv, int D, int W, float cap,
                                       const float *sinks);

// ---- scale: x(n) *= alpha in place (granite's multipliers; exact: one product a value) ----
void scale_forward(float *x, size_t n, float alpha);

// ---- swiglu: out(n) = silu(gate) * up, n = T*F ----
void swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void swiglu_forward_ref(float *out, const float *gate, const float *up, size_t n);
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n);
void swiglu_backward_ref(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n);
// gpt_oss's clamped form (GptOssExperts._apply_gate; gate, up de-interleaved):
// g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) g sigmoid(alpha g).
// The backward follows torch's clamp: dgate = 0 where gate > limit, dup = 0 where
// |up| > limit (the bounds themselves pass the gradient).
void swiglu_clamp_forward(float *out, const float *gate, const float *up, size_t n, float alpha, float limit);
void swiglu_clamp_forward_ref(float *out, const float *gate, const float *up, size_t n, float alpha, float limit);
void swiglu_clamp_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                           float alpha, float limit);
void swiglu_clamp_backward_ref(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                               size_t n, float alpha, float limit);

// ---- moe: a mixture-of-experts MLP's routing, grouping and combine (kernels/moe.c) ----
// T tokens, E experts (MOE_MAX_EXPERTS at most), K chosen a token (1 <= K <= E).
// The experts' own products are the matmul_*_dt ops above, one call per expert
// over its rows of the grouped matrix (the driver's grouped GEMM).
#define MOE_MAX_EXPERTS 512
// 0 when 1 <= E <= MOE_MAX_EXPERTS and 1 <= K <= E (moe_check_k: 1 <= K <= MOE_MAX_EXPERTS,
// for the combine ops, which know no E); else -1, PAIL_ERR_INVALID naming op. The backends'
// moe ops check their sizes with these: the kernels themselves assume them.
int moe_check_sizes(int E, int K, const char *op, PailErr *err);
int moe_check_k(int K, const char *op, PailErr *err);
// Routing: logits (T,E) (the router's x Wr^T, + bias for gpt_oss); idx (T,K) the
// K largest logits' experts in decreasing order, a tie to the lower expert index
// (the order a stable sort gives: the trainer and every worker route alike);
// w (T,K) their weights:
//   norm = 0: p_e = softmax(logits)_e over all E, w_k = p_{idx_k}
//             (qwen2_moe, qwen3_moe and olmoe with norm_topk_prob false);
//   norm = 1: the softmax over the K chosen logits, w_k = exp(l_k - m) / sum_k' exp(l_k' - m)
//             (equal to the above divided by its sum: mixtral, granitemoe, gpt_oss,
//             norm_topk_prob true).
void moe_route_forward(int *idx, float *w, const float *logits, int T, int E, int K, int norm);
void moe_route_forward_ref(int *idx, float *w, const float *logits, int T, int E, int K, int norm);
// dlogits (T,E) (=) from dw (T,K), through the same weights (idx and w the
// forward's; the choice itself has no gradient):
//   norm = 0: dl_j = [j chosen] dw_j p_j - p_j sum_k dw_k w_k   (p recomputed from logits)
//   norm = 1: dl_{idx_k} = w_k (dw_k - sum_k' dw_k' w_k'), 0 for the experts not chosen
void moe_route_backward(float *dlogits, const float *dw, const float *logits, const int *idx, const float *w, int T,
                        int E, int K, int norm);
void moe_route_backward_ref(float *dlogits, const float *dw, const float *logits, const int *idx, const float *w,
                            int T, int E, int K, int norm);
// Grouping: the T*K (token, choice) pairs sorted by expert, stable (within an
// expert, in (t, k) order): grouped row p (0 <= p < T*K) holds token tok[p];
// pos[t*K + k] is the grouped row of token t's choice k; offs (E+1): expert e's
// rows are offs[e] .. offs[e+1] - 1 (offs[0] = 0, offs[E] = T*K). idx entries
// must be in [0, E) (moe_route's are).
void moe_group(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E);
void moe_group_ref(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E);
// Combine: y(T,C) = beta * y + sum_k w[t,k] h[pos[t*K+k]] (h the grouped rows
// (T*K, C)), the K terms added in k order (deterministic); w NULL: weights 1
// (the backward's dx += its grouped rows' dx). beta == 0 never reads y.
void moe_combine_forward(float *y, const float *h, const float *w, const int *pos, int T, int K, int C, float beta);
void moe_combine_forward_ref(float *y, const float *h, const float *w, const int *pos, int T, int K, int C,
                             float beta);
// dh (T*K, C) (=): dh[pos[t*K+k]] = w[t,k] dy[t]; dw (T,K) (=): dot(dy[t], h[pos[t*K+k]]).
void moe_combine_backward(float *dh, float *dw, const float *dy, const float *h, const float *w, const int *pos,
                          int T, int K, int C);
void moe_combine_backward_ref(float *dh, float *dw, const float *dy, const float *h, const float *w,
                              const int *pos, int T, int K, int C);
// qwen2_moe's shared expert under its sigmoid gate: y(T,C) = beta * y + sigmoid(g[t]) s[t]
// (g (T) = x w_sg^T, s (T,C) the shared expert's output); beta == 0 never reads y.
void sigmoid_gate_forward(float *y, const float *g, const float *s, int T, int C, float beta);
void sigmoid_gate_forward_ref(float *y, const float *g, const float *s, int T, int C, float beta);
// ds (T,C) (=) = sigmoid(g) dy; dg (T) (=) = sigmoid(g) (1 - sigmoid(g)) dot(dy[t], s[t]).
void sigmoid_gate_backward(float *ds, float *dg, const float *dy, const float *g, const float *s, int T, int C);
void sigmoid_gate_backward_ref(float *ds, float *dg, const float *dy, const float *g, const float *s, int T, int C);

// ---- softcap: x(n) = cap tanh(x / cap) in place, cap > 0 (gemma2's logit softcaps) ----
void softcap_forward(float *x, size_t n, float cap);
void softcap_forward_ref(float *x, size_t n, float cap);

// ---- geglu: out(n) = gelu_tanh(gate) * up, n = T*F (gemma's gelu_pytorch_tanh MLP) ----
void geglu_forward(float *out, const float *gate, const float *up, size_t n);
void geglu_forward_ref(float *out, const float *gate, const float *up, size_t n);
void geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
void geglu_backward_ref(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);

// ---- logprob: fused LM head + streaming log-softmax over V in chunks ----
// z = hidden(T,C) w_lm(V,C)^T / temperature is produced vchunk columns at a time
// into ws (T*vchunk floats) and never stored whole. logp(T) = z[target] - lse;
// lse(T) saved for the backward (may be NULL); entropy(T) = -sum p log p on
// request (NULL = skip). Returns -1 when a target is outside [0, V).
size_t logprob_workspace_floats(int T, int vchunk);
int logprob_forward(float *logp, float *entropy, float *lse, const float *hidden,
                    const float *w_lm, const int *targets, int T, int C, int V,
                    float temperature, float *ws, int vchunk, PailErr *err);
int logprob_forward_ref(float *logp, float *entropy, float *lse, const float *hidden,
                        const float *w_lm, const int *targets, int T, int C, int V,
                        float temperature, PailErr *err);
// dhidden(T,C) written; dw_lm(V,C) += (NULL for a frozen head). dlogp(T) is the
// upstream gradient of logp; dentropy(T) of entropy (NULL = none; then entropy
// may be NULL too). lse (and entropy) from the forward; targets already checked.
void logprob_backward(float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                      const float *hidden, const float *w_lm, const int *targets,
                      const float *lse, const float *entropy, int T, int C, int V,
                      float temperature, float *ws, int vchunk);
void logprob_backward_ref(float *dhidden, float *dw_lm, const float *dlogp,
                          const float *dentropy, const float *hidden, const float *w_lm,
                          const int *targets, int T, int C, int V, float temperature);

// The head for a LoRA step (frozen head, no entropy gradient) without the
// backward's second pass over V: the forward also writes expect(T,C) = sum_j
// p_tj w_lm[j] / temperature, streamed over vocab chunks of ws_floats / T - 3
// columns, each one GEMM over all T rows (the CPU; the CUDA twin works in
// blocks of ws_floats / V full rows: give it at least V floats), and the backward
// is then dhidden_t = dlogp_t (w_lm[target_t] / temperature - expect_t).
// Same logp, lse, entropy as logprob_forward.
// The head with gemma2's final_logit_softcapping cap > 0: z = cap tanh(x / cap) / temperature,
// x = hidden W_lm^T (cap = 0: the ops above), and the expectation pair.
int logprob_forward_cap_dt(float *logp, float *entropy, float *lse, const float *hidden, const void *w_lm, DType wdt,
                           const int *targets, int T, int C, int V, float temperature, float cap, float *ws,
                           int vchunk, PailErr *err);
void logprob_backward_cap_dt(float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                             const float *hidden, const void *w_lm, DType wdt, const int *targets, const float *lse,
                             const float *entropy, int T, int C, int V, float temperature, float cap, float *ws,
                             int vchunk);
int logprob_forward_expect_cap_dt(float *logp, float *entropy, float *lse, float *expect, const float *hidden,
                                  const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                                  float temperature, float cap, float *ws, size_t ws_floats, PailErr *err);
// hidden: the forward's rows (read only when cap > 0)
void logprob_backward_expect_cap_dt(float *dhidden, const float *dlogp, const float *expect, const void *w_lm,
                                    DType wdt, const int *targets, int T, int C, float temperature, float cap,
                                    const float *hidden);
int logprob_forward_ref_cap(float *logp, float *entropy, float *lse, const float *hidden, const float *w_lm,
                            const int *targets, int T, int C, int V, float temperature, float cap, PailErr *err);
void logprob_backward_ref_cap(float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                              const float *hidden, const float *w_lm, const int *targets, int T, int C, int V,
                              float temperature, float cap);
int logprob_forward_expect(float *logp, float *entropy, float *lse, float *expect,
                           const float *hidden, const float *w_lm, const int *targets, int T,
                           int C, int V, float temperature, float *ws, size_t ws_floats,
                           PailErr *err);
void logprob_backward_expect(float *dhidden, const float *dlogp, const float *expect,
                             const float *w_lm, const int *targets, int T, int C,
                             float temperature);

// The head with w_lm (V,C) in a storage dtype (converted exactly; quantized:
// rows of dtype_row_bytes(wdt, C), products as matmul_forward_dt's); DT_F32 is
// the functions above bit for bit. dw_lm (fp32, +=) is dz^T hidden and never
// reads w_lm, so it is computed for any head dtype (a trained head is fp32
// anyway; a frozen one passes NULL).
int logprob_forward_dt(float *logp, float *entropy, float *lse, const float *hidden,
                       const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                       float temperature, float *ws, int vchunk, PailErr *err);
void logprob_backward_dt(float *dhidden, float *dw_lm, const float *dlogp,
                         const float *dentropy, const float *hidden, const void *w_lm,
                         DType wdt, const int *targets, const float *lse, const float *entropy,
                         int T, int C, int V, float temperature, float *ws, int vchunk);
int logprob_forward_expect_dt(float *logp, float *entropy, float *lse, float *expect,
                              const float *hidden, const void *w_lm, DType wdt,
                              const int *targets, int T, int C, int V, float temperature,
                              float *ws, size_t ws_floats, PailErr *err);
void logprob_backward_expect_dt(float *dhidden, const float *dlogp, const float *expect,
                                const void *w_lm, DType wdt, const int *targets, int T, int C,
                                float temperature);

// ---- embedding: out(T,C) = table(V,C)[tokens[t]] ----
// Returns -1 when a token is outside [0, V).
int embedding_forward(float *out, const float *table, const int *tokens, int T, int C, int V,
                      PailErr *err);
int embedding_forward_ref(float *out, const float *table, const int *tokens, int T, int C,
                          int V, PailErr *err);
// table (V,C) in a storage dtype; rows converted exactly (quantized: rows of
// dtype_row_bytes(tdt, C), C a multiple of the block, dequantized).
int embedding_forward_dt(float *out, const void *table, DType tdt, const int *tokens, int T, int C,
                         int V, PailErr *err);
// dtable(V,C) += scatter of dout(T,C) (tokens already checked by the forward).
void embedding_backward(float *dtable, const float *dout, const int *tokens, int T, int C);
void embedding_backward_ref(float *dtable, const float *dout, const int *tokens, int T, int C);

// ---- adamw: decoupled weight decay Adam over one flat array (torch.optim.AdamW) ----
// sum of squares in double, for global grad-norm clipping across arrays.
double adamw_grad_sumsq(const float *g, size_t n);
double adamw_grad_sumsq_ref(const float *g, size_t n);
// torch clip_grad_norm_: min(1, max_norm / (sqrt(sumsq) + 1e-6)); max_norm <= 0: 1.
float adamw_clip_scale(double sumsq, float max_norm);
// p, m, v (n) updated in place with gradient g * grad_scale; step counts from 1.
void adamw_update(float *p, float *m, float *v, const float *g, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step,
                  float grad_scale);
void adamw_update_ref(float *p, float *m, float *v, const float *g, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int step,
                      float grad_scale);

// ---- sample: one next token per row (src/rollout/sampler.h states the rules) ----
typedef struct {
    double temperature;  // 0: greedy (first maximum; log-prob 0)
    double top_p;        // in (0, 1): nucleus; else off
    double min_p;        // in (0, 1]: keep p >= min_p * p_max (after top-k / top-p); else off
    int top_k;           // in (0, V): keep the k most likely; else off
} SampleParams;
// The sampler's exp (simd.h's Cephes polynomial): the same bits for every
// element on every path, scalar, AVX2 and CUDA, so the logits and the stream
// fix the token.
void sample_exp(float *x, int n);
// One row: returns the token, advances the xoshiro256** state rng (4 words,
// core/rng.h's Rng), *logprob = its log-probability under the distribution
// sampled from. p (V floats) and idx (V ints) are scratch.
int sample_row(float *logprob, uint64_t rng[4], const float *logits, const SampleParams *sp, float *p, int *idx,
               int V);
// n rows: row a draws from logits row lrow[a] ((*, V)) with the stream rng
// (4 words a slot) of slot rslot[a], writing tok[a], logp[a] and stopped[a] =
// 1 when tok[a] is one of stop_ids (else 0). Slots of one call are distinct.
// The fast path runs rows in parallel on its own OpenMP region (never call it
// inside one: -1), each thread on its share of ws (sample_ws_bytes(V): V
// floats and ints a thread of omp_get_max_threads()).
size_t sample_ws_bytes(int V);
int sample_forward(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits, const int *lrow,
                   const int *rslot, int n, int V, const SampleParams *sp, const int32_t *stop_ids, int n_stop, void *ws,
                   size_t ws_bytes, PailErr *err);
int sample_forward_ref(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                       const int *lrow, const int *rslot, int n, int V, const SampleParams *sp,
                       const int32_t *stop_ids, int n_stop, PailErr *err);

// ---- layernorm: Cohere's LayerNorm, no bias: out = (x - mean) * rsqrt(var + eps) * w ----
// Over each of `rows` rows of C; row r uses weight row r % wrows of w(wrows, C)
// (wrows = 1 for the decoder norms; H or Hkv for Command-R+'s per-head q/k norms,
// rows = T*H, C = D). mean, rstd (rows) receive the row's mean and 1/std for the
// backward (each may be NULL). out may equal x.
void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, int rows, int C,
                       int wrows, float eps);
void layernorm_forward_ref(float *out, float *mean, float *rstd, const float *x, const float *w, int rows, int C,
                           int wrows, float eps);
// dx = written (may not alias dout or x); dw(wrows, C) += (may be NULL). mean, rstd from forward.
void layernorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *mean,
                        const float *rstd, int rows, int C, int wrows);
void layernorm_backward_ref(float *dx, float *dw, const float *dout, const float *x, const float *w,
                            const float *mean, const float *rstd, int rows, int C, int wrows);

// ---- rope_interleaved: rotary embedding on adjacent pairs (2i, 2i+1) (Cohere) ----
// rope_forward's contract and tables (cos, sin (P, D/2) from rope_table_build);
// pair (2i, 2i+1) is rotated by frequency i. out may equal x.
void rope_interleaved_forward(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                              int T, int nh, int D);
void rope_interleaved_forward_ref(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                                  int T, int nh, int D);
void rope_interleaved_backward(float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                               int T, int nh, int D);
void rope_interleaved_backward_ref(float *dx, const float *dout, const int *pos, const float *cos_t,
                                   const float *sin_t, int T, int nh, int D);

// ---- CUDA twins (make CUDA=1): same contracts, every pointer a device pointer ----
// Defined only in CUDA builds: callers guard their use with #ifdef PAIL_CUDA.
// They return 0, or -1 with err set when a CUDA/cuBLAS call fails. Every twin
// runs on the stream it is given (a cudaStream_t; NULL: the legacy default
// stream): its kernels launch there, its copies and memsets are the Async
// variants there, and it never waits for the device, so it returns once
// queued (faults surface at the stream's next synchronisation;
// kernels_cuda_sync() waits for the whole device and reports). The twins
// that multiply matrices (matmul_*, logprob_*) take a CudaBlas instead: the
// stream, a cuBLAS handle bound to it and the scratch of the _dt products.
// The CUDA backend owns one stream and one CudaBlas (backend_cuda.cu);
// check_kernels_cuda uses the default stream.
struct CUstream_st;
struct cublasContext;
typedef struct {
    struct CUstream_st *stream;    // where the products and their small kernels run (NULL: default)
    struct cublasContext *handle;  // cuBLAS, owned, bound to stream, FP32 math (no TF32)
    float *panel;                  // (panel_floats) device, owned: the _dt products' converted weight panels,
    size_t panel_floats;           // allocated at the first _dt product, grown on demand
} CudaBlas;
// Creates the handle on stream (cuBLAS opened at run time: kernels/cublas_dl.c);
// -1 with err naming what is missing. One thread uses a CudaBlas at a time.
int cuda_blas_init(CudaBlas *cb, struct CUstream_st *stream, PailErr *err);
void cuda_blas_free(CudaBlas *cb);  // waits for the stream; a zeroed CudaBlas is fine
int kernels_cuda_device_count(void);  // 0 when no driver or no device (never fails)
int kernels_cuda_sync(PailErr *err);
int matmul_forward_cuda(float *out, const float *x, const float *W, const float *bias, int T,
                        int K, int N, float alpha, float beta, CudaBlas *cb, PailErr *err);
int matmul_forward_lora_cuda(float *out, float *la, const float *x, const float *W,
                             const float *bias, const float *A, const float *B, int T, int K,
                             int N, int R, float scale, float beta, CudaBlas *cb, PailErr *err);
int matmul_backward_cuda(float *dx, float *dW, float *dbias, const float *dout,
                         const float *x, const float *W, int T, int K, int N, float alpha,
                         float dx_beta, CudaBlas *cb, PailErr *err);
// n elements of src (device) in dtype dt as fp32 into dst (device): dtype_to_f32's
// twin, the same floats bit for bit (a quantized dt: quant_dequant's; n whole
// blocks from a block's start, else -1 PAIL_ERR_INVALID).
int dtype_to_f32_cuda(float *dst, const void *src, DType dt, size_t n, struct CUstream_st *stream, PailErr *err);
// W / w_lm / table in a storage dtype (device memory), converted exactly; a
// quantized one's rows (K, C) whole blocks, else -1 PAIL_ERR_INVALID.
int matmul_forward_dt_cuda(float *out, const float *x, const void *W, DType wdt,
                           const float *bias, int T, int K, int N, float alpha, float beta,
                           CudaBlas *cb, PailErr *err);
int matmul_forward_lora_dt_cuda(float *out, float *la, const float *x, const void *W, DType wdt,
                                const float *bias, const float *A, const float *B, int T,
                                int K, int N, int R, float scale, float beta, CudaBlas *cb, PailErr *err);
int matmul_backward_dt_cuda(float *dx, float *dW, float *dbias, const float *dout,
                            const float *x, const void *W, DType wdt, int T, int K, int N,
                            float alpha, float dx_beta, CudaBlas *cb, PailErr *err);
int rmsnorm_forward_cuda(float *out, float *rstd, const float *x, const float *w, int rows,
                         int C, float eps, struct CUstream_st *stream, PailErr *err);
int rmsnorm_backward_cuda(float *dx, float *dw, const float *dout, const float *x,
                          const float *w, const float *rstd, int rows, int C, struct CUstream_st *stream,
                          PailErr *err);
int rope_forward_cuda(float *out, const float *x, const int *pos, const float *cos_t,
                      const float *sin_t, int T, int nh, int D, struct CUstream_st *stream, PailErr *err);
int rope_backward_cuda(float *dx, const float *dout, const int *pos, const float *cos_t,
                       const float *sin_t, int T, int nh, int D, struct CUstream_st *stream, PailErr *err);
int rope_partial_forward_cuda(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                              int T, int nh, int D, int rd, struct CUstream_st *stream, PailErr *err);
int rope_partial_backward_cuda(float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                               int T, int nh, int D, int rd, struct CUstream_st *stream, PailErr *err);
int attention_forward_cuda(float *out, float *lse, const float *q, const float *k,
                           const float *v, const int *cu_seqlens, int nseq, int T, int H,
                           int Hkv, int D, int W, struct CUstream_st *stream, PailErr *err);
int attention_backward_cuda(float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, const int *cu_seqlens, int nseq, int T, int H,
                            int Hkv, int D, int W, struct CUstream_st *stream, PailErr *err);
// Tn = cu_new[nseq] (the caller's: the launch is sized without a read-back).
int attention_decode_forward_cuda(float *out, const float *q, const float *k_pool, const float *v_pool,
                                  const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                  int nseq, int Tn, int H, int Hkv, int D, int W, struct CUstream_st *stream,
                                  PailErr *err);
// The attention twins with a softcap (kernels.h's attention_*_cap)
int attention_forward_cap_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                               const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                               struct CUstream_st *stream, PailErr *err);
int attention_backward_cap_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                const float *v, const float *out, const float *lse, const int *cu_seqlens, int nseq,
                                int T, int H, int Hkv, int D, int W, float cap, struct CUstream_st *stream,
                                PailErr *err);
int attention_decode_forward_cap_cuda(float *out, const float *q, const float *k_pool, const float *v_pool,
                                      const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                      int nseq, int Tn, int H, int Hkv, int D, int W, float cap,
                                      struct CUstream_st *stream, PailErr *err);
// The pools in kvdt (attention_decode_forward_dt's twin; kvdt a float dtype, else -1 PAIL_ERR_INVALID).
int attention_decode_forward_dt_cuda(float *out, const float *q, const void *k_pool, const void *v_pool, DType kvdt,
                                     const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                     int nseq, int Tn, int H, int Hkv, int D, int W, float cap,
                                     struct CUstream_st *stream, PailErr *err);
// The attention twins with sinks (kernels.h's attention_*_sink; sinks, dsinks device arrays or NULL;
// dsinks accumulated with atomics)
int attention_forward_sink_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                const float *sinks, struct CUstream_st *stream, PailErr *err);
int attention_backward_sink_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                 const float *v, const float *out, const float *lse, const int *cu_seqlens, int nseq,
                                 int T, int H, int Hkv, int D, int W, float cap, const float *sinks, float *dsinks,
                                 struct CUstream_st *stream, PailErr *err);
int attention_decode_forward_sink_cuda(float *out, const float *q, const void *k_pool, const void *v_pool,
                                       DType kvdt, const int *cu_new, const int *cache_len, const int *table,
                                       int max_blocks, int nseq, int Tn, int H, int Hkv, int D, int W, float cap,
                                       const float *sinks, struct CUstream_st *stream, PailErr *err);
int scale_forward_cuda(float *x, size_t n, float alpha, struct CUstream_st *stream, PailErr *err);
int swiglu_forward_cuda(float *out, const float *gate, const float *up, size_t n,
                        struct CUstream_st *stream, PailErr *err);
int swiglu_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n, struct CUstream_st *stream, PailErr *err);
int swiglu_clamp_forward_cuda(float *out, const float *gate, const float *up, size_t n, float alpha, float limit,
                              struct CUstream_st *stream, PailErr *err);
int swiglu_clamp_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                               size_t n, float alpha, float limit, struct CUstream_st *stream, PailErr *err);
int softcap_forward_cuda(float *x, size_t n, float cap, struct CUstream_st *stream, PailErr *err);
int geglu_forward_cuda(float *out, const float *gate, const float *up, size_t n, struct CUstream_st *stream,
                       PailErr *err);
int geglu_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                        struct CUstream_st *stream, PailErr *err);
int moe_route_forward_cuda(int *idx, float *w, const float *logits, int T, int E, int K, int norm,
                           struct CUstream_st *stream, PailErr *err);
int moe_route_backward_cuda(float *dlogits, const float *dw, const float *logits, const int *idx, const float *w,
                            int T, int E, int K, int norm, struct CUstream_st *stream, PailErr *err);
int moe_group_cuda(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E, struct CUstream_st *stream,
                   PailErr *err);
int moe_combine_forward_cuda(float *y, const float *h, const float *w, const int *pos, int T, int K, int C,
                             float beta, struct CUstream_st *stream, PailErr *err);
int moe_combine_backward_cuda(float *dh, float *dw, const float *dy, const float *h, const float *w, const int *pos,
                              int T, int K, int C, struct CUstream_st *stream, PailErr *err);
int sigmoid_gate_forward_cuda(float *y, const float *g, const float *s, int T, int C, float beta,
                              struct CUstream_st *stream, PailErr *err);
int sigmoid_gate_backward_cuda(float *ds, float *dg, const float *dy, const float *g, const float *s, int T, int C,
                               struct CUstream_st *stream, PailErr *err);
// Targets are not range-checked on the device: check them on the host first.
int logprob_forward_cuda(float *logp, float *entropy, float *lse, const float *hidden,
                         const float *w_lm, const int *targets, int T, int C, int V,
                         float temperature, float *ws, int vchunk, CudaBlas *cb, PailErr *err);
int logprob_backward_cuda(float *dhidden, float *dw_lm, const float *dlogp,
                          const float *dentropy, const float *hidden, const float *w_lm,
                          const int *targets, const float *lse, const float *entropy, int T,
                          int C, int V, float temperature, float *ws, int vchunk,
                          CudaBlas *cb, PailErr *err);
int logprob_forward_expect_cuda(float *logp, float *entropy, float *lse, float *expect,
                                const float *hidden, const float *w_lm, const int *targets,
                                int T, int C, int V, float temperature, float *ws,
                                size_t ws_floats, CudaBlas *cb, PailErr *err);
int logprob_backward_expect_cuda(float *dhidden, const float *dlogp, const float *expect,
                                 const float *w_lm, const int *targets, int T, int C,
                                 float temperature, CudaBlas *cb, PailErr *err);
int logprob_forward_cap_dt_cuda(float *logp, float *entropy, float *lse, const float *hidden, const void *w_lm,
                                DType wdt, const int *targets, int T, int C, int V, float temperature, float cap,
                                float *ws, int vchunk, CudaBlas *cb, PailErr *err);
int logprob_backward_cap_dt_cuda(float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                                 const float *hidden, const void *w_lm, DType wdt, const int *targets,
                                 const float *lse, const float *entropy, int T, int C, int V, float temperature,
                                 float cap, float *ws, int vchunk, CudaBlas *cb, PailErr *err);
int logprob_forward_expect_cap_dt_cuda(float *logp, float *entropy, float *lse, float *expect, const float *hidden,
                                       const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                                       float temperature, float cap, float *ws, size_t ws_floats, CudaBlas *cb,
                                       PailErr *err);
int logprob_backward_expect_cap_dt_cuda(float *dhidden, const float *dlogp, const float *expect, const void *w_lm,
                                        DType wdt, const int *targets, int T, int C, float temperature, float cap,
                                        const float *hidden, CudaBlas *cb, PailErr *err);
int logprob_forward_dt_cuda(float *logp, float *entropy, float *lse, const float *hidden,
                            const void *w_lm, DType wdt, const int *targets, int T, int C,
                            int V, float temperature, float *ws, int vchunk, CudaBlas *cb, PailErr *err);
int logprob_backward_dt_cuda(float *dhidden, float *dw_lm, const float *dlogp,
                             const float *dentropy, const float *hidden, const void *w_lm,
                             DType wdt, const int *targets, const float *lse,
                             const float *entropy, int T, int C, int V, float temperature,
                             float *ws, int vchunk, CudaBlas *cb, PailErr *err);
int logprob_forward_expect_dt_cuda(float *logp, float *entropy, float *lse, float *expect,
                                   const float *hidden, const void *w_lm, DType wdt,
                                   const int *targets, int T, int C, int V, float temperature,
                                   float *ws, size_t ws_floats, CudaBlas *cb, PailErr *err);
int logprob_backward_expect_dt_cuda(float *dhidden, const float *dlogp, const float *expect,
                                    const void *w_lm, DType wdt, const int *targets, int T,
                                    int C, float temperature, CudaBlas *cb, PailErr *err);
int embedding_forward_dt_cuda(float *out, const void *table, DType tdt, const int *tokens,
                              int T, int C, int V, struct CUstream_st *stream, PailErr *err);
// Token ids must be checked on the host (out-of-range ones read as zero rows).
int embedding_forward_cuda(float *out, const float *table, const int *tokens, int T, int C, int V,
                           struct CUstream_st *stream, PailErr *err);
int embedding_backward_cuda(float *dtable, const float *dout, const int *tokens, int T, int C,
                            struct CUstream_st *stream, PailErr *err);
// sumsq: a device double written with the sum of squares.
int adamw_grad_sumsq_cuda(double *sumsq, const float *g, size_t n, struct CUstream_st *stream, PailErr *err);
int adamw_update_cuda(float *p, float *m, float *v, const float *g, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int step,
                      float grad_scale, struct CUstream_st *stream, PailErr *err);
// ws: sample_ws_bytes_cuda(n, V, sp) bytes of device memory (the rows'
// probabilities; with top-k / top-p also the sort's buffers). stop_ids on the device.
size_t sample_ws_bytes_cuda(int n, int V, const SampleParams *sp);
int sample_forward_cuda(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                        const int *lrow, const int *rslot, int n, int V, const SampleParams *sp,
                        const int32_t *stop_ids, int n_stop, void *ws, size_t ws_bytes, struct CUstream_st *stream,
                        PailErr *err);

int layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *x, const float *w, int rows, int C,
                           int wrows, float eps, struct CUstream_st *stream, PailErr *err);
int layernorm_backward_cuda(float *dx, float *dw, const float *dout, const float *x, const float *w,
                            const float *mean, const float *rstd, int rows, int C, int wrows,
                            struct CUstream_st *stream, PailErr *err);
int rope_interleaved_forward_cuda(float *out, const float *x, const int *pos, const float *cos_t,
                                  const float *sin_t, int T, int nh, int D, struct CUstream_st *stream, PailErr *err);
int rope_interleaved_backward_cuda(float *dx, const float *dout, const int *pos, const float *cos_t,
                                   const float *sin_t, int T, int nh, int D, struct CUstream_st *stream,
                                   PailErr *err);

#ifdef __cplusplus
}
#endif
