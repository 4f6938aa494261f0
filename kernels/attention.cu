// attention twin: packed causal GQA forward and backward (the KV-cache decode: attention_decode.cu), one
// warp per (query, head) with an online softmax over the keys (lane l holds
// dims l, l+32, ...; D <= 256). Simple rather than fast: the backward scatters
// dk/dv with atomics. A sliding window W > 0 starts each row's keys at i-W+1
// (W = 0: full causal). A softcap cap > 0 replaces each scaled score s by
// cap tanh(s / cap) (its backward multiplies ds by 1 - tanh^2). Sinks start a
// row's online softmax at m = sinks[h], l = 1; their gradient is summed with
// atomics (lane 0 of each row's warp). CPU twin: kernels/attention.c.
#include "cuda_common.h"

enum { MAXD = 256, PER_LANE = MAXD / 32, WARPS = 4 };

__device__ static int seq_of(const int *cu, int nseq, int t) {
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Keys first..nkeys-1, contiguous from k, or (table) key j in row j % KV_BLOCK
// of the pool's block table[j / KV_BLOCK].
__device__ static void warp_row(float *o, float *lse, const float *q, const float *k,
                                const float *v, size_t ks, int first, int nkeys, int D, float scale,
                                const int *table, float cap, const float *sink) {
    int lane = threadIdx.x & 31;
    float qr[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        qr[i] = d < D ? q[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = sink ? *sink : -INFINITY, l = sink ? 1.0f : 0.0f;
    for (int j = first; j < nkeys; j++) {
        size_t row = table ? (size_t)table[j / KV_BLOCK] * KV_BLOCK + (size_t)(j % KV_BLOCK) : (size_t)j;
        const float *kj = k + row * ks, *vj = v + row * ks;
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) part += qr[i] * kj[d];
        }
        float s = warp_sum(part) * scale;
        if (cap > 0) s = cap * tanhf(s / cap);
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) acc[i] = acc[i] * corr + p * vj[d];
        }
        m = mn;
    }
    float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < D) o[d] = acc[i] * inv;
    }
    if (lse && lane == 0) *lse = m + logf(l);
}

__global__ static void attn_fwd(float *out, float *lse, const float *q, const float *k,
                                const float *v, const int *cu, int nseq, int T, int H, int Hkv,
                                int D, int W, float cap, const float *sinks) {
    int pair = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (pair >= T * H) return;
    int t = pair / H, h = pair % H, start = cu[seq_of(cu, nseq, t)], hk = h / (H / Hkv);
    size_t ks = (size_t)Hkv * D, off = (size_t)start * ks + (size_t)hk * D;
    int first = W > 0 && t - W + 1 > start ? t - W + 1 - start : 0;
    warp_row(out + (size_t)pair * D, lse ? lse + pair : NULL, q + (size_t)pair * D, k + off, v + off,
             ks, first, t - start + 1, D, rsqrtf((float)D), NULL, cap, sinks ? sinks + h : NULL);
}

// p = exp(s - lse), ds = p (dout.v - dout.out) * scale; dq in registers, dk/dv
// scattered with atomics (several queries and the G heads of a group share them).
__global__ static void attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse,
                                const int *cu, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                const float *sinks, float *dsinks) {
    int pair = blockIdx.x * WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (pair >= T * H) return;
    int i = pair / H, h = pair % H, start = cu[seq_of(cu, nseq, i)], hk = h / (H / Hkv);
    size_t ks = (size_t)Hkv * D;
    const float *qi = q + (size_t)pair * D, *gi = dout + (size_t)pair * D, *oi = out + (size_t)pair * D;
    float qr[PER_LANE], gr[PER_LANE], dqr[PER_LANE], part = 0.0f, scale = rsqrtf((float)D);
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        int d = lane + 32 * e;
        qr[e] = d < D ? qi[d] : 0.0f;
        gr[e] = d < D ? gi[d] : 0.0f;
        dqr[e] = 0.0f;
        if (d < D) part += gr[e] * oi[d];
    }
    float delta = warp_sum(part), L = lse[pair];
    if (sinks && dsinks && lane == 0) atomicAdd(&dsinks[h], -expf(sinks[h] - L) * delta);
    for (int j = W > 0 && i - W + 1 > start ? i - W + 1 : start; j <= i; j++) {
        const float *kj = k + (size_t)j * ks + (size_t)hk * D, *vj = v + (size_t)j * ks + (size_t)hk * D;
        float sp = 0.0f, gp = 0.0f;
#pragma unroll
        for (int e = 0; e < PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) sp += qr[e] * kj[d], gp += gr[e] * vj[d];
        }
        float s = warp_sum(sp) * scale, g = 1.0f;
        if (cap > 0) {
            float t = tanhf(s / cap);
            s = cap * t, g = 1.0f - t * t;
        }
        float p = expf(s - L), ds = p * (warp_sum(gp) - delta) * scale * g;
        float *dkj = dk + (size_t)j * ks + (size_t)hk * D, *dvj = dv + (size_t)j * ks + (size_t)hk * D;
#pragma unroll
        for (int e = 0; e < PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) {
                dqr[e] += ds * kj[d];
                atomicAdd(&dkj[d], ds * qr[e]);
                atomicAdd(&dvj[d], p * gr[e]);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        int d = lane + 32 * e;
        if (d < D) dq[(size_t)pair * D + d] = dqr[e];
    }
}

static int check_dims(const char *op, int H, int Hkv, int D, PailErr *err) {
    if (D > MAXD || D <= 0)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: head dim %d is outside 1..%d", op, D, MAXD);
    if (Hkv <= 0 || H % Hkv)
        return err_set(err, PAIL_ERR_INVALID, "%s: %d heads do not split into %d kv heads", op, H, Hkv);
    return 0;
}

extern "C" int attention_forward_sink_cuda(float *out, float *lse, const float *q, const float *k,
                                           const float *v, const int *cu_seqlens, int nseq, int T, int H, int Hkv,
                                           int D, int W, float cap, const float *sinks, cudaStream_t stream,
                                           PailErr *err) {
    if (check_dims("attention_forward_cuda", H, Hkv, D, err)) return -1;
    if (T <= 0) return 0;
    attn_fwd<<<cuda_blocks((size_t)T * H, WARPS), 32 * WARPS, 0, stream>>>(out, lse, q, k, v, cu_seqlens, nseq, T,
                                                                            H, Hkv, D, W, cap, sinks);
    return cuda_launch_check("attention_forward_cuda", err);
}

extern "C" int attention_forward_cap_cuda(float *out, float *lse, const float *q, const float *k,
                                          const float *v, const int *cu_seqlens, int nseq, int T,
                                          int H, int Hkv, int D, int W, float cap, cudaStream_t stream, PailErr *err) {
    return attention_forward_sink_cuda(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, cap, NULL, stream, err);
}

extern "C" int attention_forward_cuda(float *out, float *lse, const float *q, const float *k,
                                      const float *v, const int *cu_seqlens, int nseq, int T,
                                      int H, int Hkv, int D, int W, cudaStream_t stream, PailErr *err) {
    return attention_forward_cap_cuda(out, lse, q, k, v, cu_seqlens, nseq, T, H, Hkv, D, W, 0.0f, stream, err);
}

extern "C" int attention_backward_sink_cuda(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                            const float *k, const float *v, const float *out, const float *lse,
                                            const int *cu_seqlens, int nseq, int T, int H, int Hkv, int D, int W,
                                            float cap, const float *sinks, float *dsinks, cudaStream_t stream,
                                            PailErr *err) {
    if (check_dims("attention_backward_cuda", H, Hkv, D, err)) return -1;
    if (T <= 0) return 0;
    size_t nk = (size_t)T * Hkv * D * sizeof(float);
    if (cuda_check(cudaMemsetAsync(dk, 0, nk, stream), "attention_backward_cuda memset dk", err) ||
        cuda_check(cudaMemsetAsync(dv, 0, nk, stream), "attention_backward_cuda memset dv", err))
        return -1;
    attn_bwd<<<cuda_blocks((size_t)T * H, WARPS), 32 * WARPS, 0, stream>>>(dq, dk, dv, dout, q, k, v, out, lse,
                                                                            cu_seqlens, nseq, T, H, Hkv, D, W, cap,
                                                                            sinks, dsinks);
    return cuda_launch_check("attention_backward_cuda", err);
}

extern "C" int attention_backward_cap_cuda(float *dq, float *dk, float *dv, const float *dout,
                                           const float *q, const float *k, const float *v,
                                           const float *out, const float *lse, const int *cu_seqlens,
                                           int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                           cudaStream_t stream, PailErr *err) {
    return attention_backward_sink_cuda(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, cap,
                                        NULL, NULL, stream, err);
}

extern "C" int attention_backward_cuda(float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v,
                                       const float *out, const float *lse, const int *cu_seqlens,
                                       int nseq, int T, int H, int Hkv, int D, int W, cudaStream_t stream,
                                       PailErr *err) {
    return attention_backward_cap_cuda(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, nseq, T, H, Hkv, D, W, 0.0f,
                                       stream, err);
}
