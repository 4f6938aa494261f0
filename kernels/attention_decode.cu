// attention_decode twin: a few new tokens per sequence against a paged KV
// cache whose pools are fp32, bf16 or f16 (kernels.h's
// attention_decode_forward_dt), one warp per (new row, query head) with an
// online softmax over the keys (lane l holds dims l, l+32, ...; D <= 256),
// each pool element widened to fp32 as it is read (dt_load). Simple rather
// than fast: the G heads of a kv head each read its rows. Sinks start a row's
// online softmax at m = sinks[h], l = 1. CPU twin:
// kernels/attention_decode.c (reference: attention.c's _ref_dt).
#include "cuda_common.h"

enum { MAXD = 256,
       PER_LANE = MAXD / 32,
       WARPS = 4 };

__device__ static int seq_of(const int *cu, int nseq, int t) {
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Keys first..nkeys-1 of a sequence, key j in row j % KV_BLOCK of the pool's
// block table[j / KV_BLOCK]; k, v point at the kv head's first column.
__global__ static void attn_decode(float *out, const float *q, const void *kp, const void *vp, DType dt,
                                   const int *cu_new, const int *cache_len, const int *table, int max_blocks,
                                   int nseq, int Tn, int H, int Hkv, int D, int W, float cap, const float *sinks) {
    int pair = blockIdx.x * WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (pair >= Tn * H) return;
    int r = pair / H, h = pair % H, s = seq_of(cu_new, nseq, r), hk = h / (H / Hkv);
    int pos = cache_len[s] - (cu_new[s + 1] - cu_new[s]) + (r - cu_new[s]);
    int first = W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0, nkeys = pos + 1;
    const int *tb = table + (size_t)s * max_blocks;
    size_t ks = (size_t)Hkv * D, off = (size_t)hk * D;
    const float *qr_ = q + (size_t)pair * D;
    float qr[PER_LANE], acc[PER_LANE], scale = rsqrtf((float)D);
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        qr[i] = d < D ? qr_[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = sinks ? sinks[h] : -INFINITY, l = sinks ? 1.0f : 0.0f;
    for (int j = first; j < nkeys; j++) {
        size_t row = ((size_t)tb[j / KV_BLOCK] * KV_BLOCK + (size_t)(j % KV_BLOCK)) * ks + off;
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) part += qr[i] * dt_load(kp, dt, row + d);
        }
        float sc = warp_sum(part) * scale;
        if (cap > 0) sc = cap * tanhf(sc / cap);
        float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) acc[i] = acc[i] * corr + p * dt_load(vp, dt, row + d);
        }
        m = mn;
    }
    float inv = 1.0f / l, *o = out + (size_t)pair * D;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < D) o[d] = acc[i] * inv;
    }
}

// cu_new and cache_len are device arrays; Tn = cu_new[nseq] comes from the
// caller (the host built cu_new), so the launch is sized without a read-back
// and the call stays asynchronous on the stream.
extern "C" int attention_decode_forward_sink_cuda(float *out, const float *q, const void *k_pool,
                                                  const void *v_pool, DType kvdt, const int *cu_new,
                                                  const int *cache_len, const int *table, int max_blocks, int nseq,
                                                  int Tn, int H, int Hkv, int D, int W, float cap, const float *sinks,
                                                  cudaStream_t stream, PailErr *err) {
    if (D > MAXD || D <= 0)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "attention_decode_forward_cuda: head dim %d is outside 1..%d", D,
                       MAXD);
    if (Hkv <= 0 || H % Hkv)
        return err_set(err, PAIL_ERR_INVALID, "attention_decode_forward_cuda: %d heads do not split into %d kv heads",
                       H, Hkv);
    if (kvdt != DT_F32 && kvdt != DT_BF16 && kvdt != DT_F16)
        return err_set(err, PAIL_ERR_INVALID, "attention_decode_forward_cuda: a KV pool of %s is not a float dtype",
                       dtype_name(kvdt));
    if (Tn <= 0 || nseq <= 0) return 0;
    attn_decode<<<cuda_blocks((size_t)Tn * H, WARPS), 32 * WARPS, 0, stream>>>(
        out, q, k_pool, v_pool, kvdt, cu_new, cache_len, table, max_blocks, nseq, Tn, H, Hkv, D, W, cap, sinks);
    return cuda_launch_check("attention_decode_forward_cuda", err);
}

extern "C" int attention_decode_forward_dt_cuda(float *out, const float *q, const void *k_pool, const void *v_pool,
                                                DType kvdt, const int *cu_new, const int *cache_len,
                                                const int *table, int max_blocks, int nseq, int Tn, int H, int Hkv,
                                                int D, int W, float cap, cudaStream_t stream, PailErr *err) {
    return attention_decode_forward_sink_cuda(out, q, k_pool, v_pool, kvdt, cu_new, cache_len, table, max_blocks,
                                              nseq, Tn, H, Hkv, D, W, cap, NULL, stream, err);
}

extern "C" int attention_decode_forward_cap_cuda(float *out, const float *q, const float *k_pool,
                                                 const float *v_pool, const int *cu_new, const int *cache_len,
                                                 const int *table, int max_blocks, int nseq, int Tn, int H, int Hkv,
                                                 int D, int W, float cap, cudaStream_t stream, PailErr *err) {
    return attention_decode_forward_dt_cuda(out, q, k_pool, v_pool, DT_F32, cu_new, cache_len, table, max_blocks,
                                            nseq, Tn, H, Hkv, D, W, cap, stream, err);
}

extern "C" int attention_decode_forward_cuda(float *out, const float *q, const float *k_pool, const float *v_pool,
                                             const int *cu_new, const int *cache_len, const int *table,
                                             int max_blocks, int nseq, int Tn, int H, int Hkv, int D, int W,
                                             cudaStream_t stream, PailErr *err) {
    return attention_decode_forward_dt_cuda(out, q, k_pool, v_pool, DT_F32, cu_new, cache_len, table, max_blocks,
                                            nseq, Tn, H, Hkv, D, W, 0.0f, stream, err);
}
