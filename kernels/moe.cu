// moe twin: the mixture-of-experts routing, grouping, combine and sigmoid-gated
// shared expert on the device. Routing is a warp a token (K rounds of a warp
// argmax, a tie to the lower expert: the CPU's choice); grouping one block whose
// thread e collects expert e's pairs in (t, k) order (stable, no atomics);
// combine and the gate a block a token. The sizes are checked here as the
// backends do (moe_check_sizes). CPU twin: kernels/moe.c.
#include "cuda_common.h"

enum { WARPS = 4,        // tokens a block of the routing kernels
       THREADS = 256,    // threads a block of the combine and gate kernels
       GCHUNK = 4096 };  // idx entries a pass of the grouping kernel stages in shared memory
#define FULL 0xffffffffu

__global__ static void route_fwd(int *idx, float *w, const float *logits, int T, int E, int K, int norm) {
    int t = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (t >= T) return;  // the whole warp
    const float *l = logits + (size_t)t * E;
    int *it = idx + (size_t)t * K;
    float *wt = w + (size_t)t * K;
    unsigned taken = 0;  // bit j: expert lane + 32 j is chosen (E <= 512)
    for (int k = 0; k < K; k++) {
        float bv = 0;
        int bi = -1;
        for (int j = 0, e = lane; e < E; j++, e += 32)  // the lane's first largest not taken
            if (!(taken >> j & 1) && (bi < 0 || l[e] > bv)) bv = l[e], bi = e;
        for (int o = 16; o > 0; o >>= 1) {  // the larger, a tie to the lower expert
            float ov = __shfl_xor_sync(FULL, bv, o);
            int oi = __shfl_xor_sync(FULL, bi, o);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
        }
        bi = __shfl_sync(FULL, bi, 0);  // one choice for the warp, whatever a NaN did
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == 0) it[k] = bi;
    }
    __syncwarp();  // it[] written by lane 0, read by all
    float m, s = 0;
    if (norm) {
        m = l[it[0]];
        for (int k = lane; k < K; k += 32) s += expf(l[it[k]] - m);
    } else {
        m = -INFINITY;
        for (int e = lane; e < E; e += 32) m = fmaxf(m, l[e]);
        m = warp_max(m);
        for (int e = lane; e < E; e += 32) s += expf(l[e] - m);
    }
    s = warp_sum(s);
    for (int k = lane; k < K; k += 32) wt[k] = expf(l[it[k]] - m) / s;
}

__global__ static void route_bwd(float *dlogits, const float *dw, const float *logits, const int *idx, const float *w,
                                 int T, int E, int K, int norm) {
    int t = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (t >= T) return;
    const float *l = logits + (size_t)t * E, *dwt = dw + (size_t)t * K, *wt = w + (size_t)t * K;
    const int *it = idx + (size_t)t * K;
    float *dl = dlogits + (size_t)t * E, dsum = 0;
    for (int k = lane; k < K; k += 32) dsum += dwt[k] * wt[k];
    dsum = warp_sum(dsum);
    if (norm) {
        for (int e = lane; e < E; e += 32) dl[e] = 0;
        __syncwarp();
        for (int k = lane; k < K; k += 32) dl[it[k]] = wt[k] * (dwt[k] - dsum);
        return;
    }
    float m = -INFINITY, s = 0;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, l[e]);
    m = warp_max(m);
    for (int e = lane; e < E; e += 32) s += expf(l[e] - m);
    s = warp_sum(s);
    for (int e = lane; e < E; e += 32) dl[e] = -(expf(l[e] - m) / s) * dsum;
    __syncwarp();
    for (int k = lane; k < K; k += 32) {
        int j = it[k];
        dl[j] = expf(l[j] - m) / s * (dwt[k] - dsum);
    }
}

// One block of MOE_MAX_EXPERTS threads: thread e counts expert e's pairs, thread 0
// turns the counts into offsets, then thread e writes its pairs in (t, k) order.
// Every thread reads every staged entry (a shared-memory broadcast): T*K is a few
// thousand, and no atomic can reorder an expert's rows.
__global__ static void group_kernel(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E) {
    __shared__ int chunk[GCHUNK];
    __shared__ int base[MOE_MAX_EXPERTS];
    int e = threadIdx.x, cnt = 0;
    size_t n = (size_t)T * K;
    for (size_t c0 = 0; c0 < n; c0 += GCHUNK) {
        int m = n - c0 < GCHUNK ? (int)(n - c0) : GCHUNK;
        __syncthreads();
        for (int i = threadIdx.x; i < m; i += blockDim.x) chunk[i] = idx[c0 + i];
        __syncthreads();
        if (e < E)
            for (int i = 0; i < m; i++) cnt += chunk[i] == e;
    }
    if (e < E) base[e] = cnt;
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int j = 0; j < E; j++) {
            int c = base[j];
            offs[j] = base[j] = s;
            s += c;
        }
        offs[E] = s;
    }
    __syncthreads();
    int next = e < E ? base[e] : 0;
    for (size_t c0 = 0; c0 < n; c0 += GCHUNK) {
        int m = n - c0 < GCHUNK ? (int)(n - c0) : GCHUNK;
        __syncthreads();
        for (int i = threadIdx.x; i < m; i += blockDim.x) chunk[i] = idx[c0 + i];
        __syncthreads();
        if (e < E)
            for (int i = 0; i < m; i++)
                if (chunk[i] == e) {
                    int p = next++;
                    tok[p] = (int)((c0 + i) / K);
                    pos[c0 + i] = p;
                }
    }
}

__global__ static void combine_fwd(float *y, const float *h, const float *w, const int *pos, int K, int C,
                                   float beta) {
    size_t t = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0;
        for (int k = 0; k < K; k++)  // in k order, as the CPU
            s += (w ? w[t * K + k] : 1.0f) * h[(size_t)pos[t * K + k] * C + c];
        float *yc = y + t * C + c;
        *yc = beta == 0 ? s : beta * *yc + s;
    }
}

__global__ static void combine_bwd(float *dh, float *dw, const float *dy, const float *h, const float *w,
                                   const int *pos, int K, int C) {
    __shared__ float sh[32];
    size_t t = blockIdx.x;
    const float *dyr = dy + t * C;
    for (int k = 0; k < K; k++) {
        size_t r = (size_t)pos[t * K + k] * C;
        float wk = w ? w[t * K + k] : 1.0f, d = 0;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            if (dh) dh[r + c] = wk * dyr[c];
            if (dw) d += dyr[c] * h[r + c];
        }
        if (dw) {
            d = block_reduce(d, sh, false);
            if (threadIdx.x == 0) dw[t * K + k] = d;
        }
    }
}

__global__ static void gate_fwd(float *y, const float *g, const float *s, int T, int C, float beta) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float a = 1.0f / (1.0f + expf(-g[i / C]));
    y[i] = beta == 0 ? a * s[i] : beta * y[i] + a * s[i];
}

__global__ static void gate_bwd(float *ds, float *dg, const float *dy, const float *g, const float *s, int C) {
    __shared__ float sh[32];
    size_t t = blockIdx.x;
    float a = 1.0f / (1.0f + expf(-g[t])), d = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        size_t i = t * C + c;
        if (ds) ds[i] = a * dy[i];
        d += dy[i] * s[i];
    }
    if (dg) {
        d = block_reduce(d, sh, false);
        if (threadIdx.x == 0) dg[t] = a * (1.0f - a) * d;
    }
}

extern "C" int moe_route_forward_cuda(int *idx, float *w, const float *logits, int T, int E, int K, int norm,
                                      cudaStream_t stream, PailErr *err) {
    if (moe_check_sizes(E, K, "moe_route_forward_cuda", err) < 0) return -1;
    if (T <= 0) return 0;
    route_fwd<<<cuda_blocks((size_t)T, WARPS), WARPS * 32, 0, stream>>>(idx, w, logits, T, E, K, norm);
    return cuda_launch_check("moe_route_forward_cuda", err);
}

extern "C" int moe_route_backward_cuda(float *dlogits, const float *dw, const float *logits, const int *idx,
                                       const float *w, int T, int E, int K, int norm, cudaStream_t stream,
                                       PailErr *err) {
    if (moe_check_sizes(E, K, "moe_route_backward_cuda", err) < 0) return -1;
    if (T <= 0) return 0;
    route_bwd<<<cuda_blocks((size_t)T, WARPS), WARPS * 32, 0, stream>>>(dlogits, dw, logits, idx, w, T, E, K, norm);
    return cuda_launch_check("moe_route_backward_cuda", err);
}

extern "C" int moe_group_cuda(int *tok, int *pos, int *offs, const int *idx, int T, int K, int E,
                              cudaStream_t stream, PailErr *err) {
    if (moe_check_sizes(E, K, "moe_group_cuda", err) < 0) return -1;
    group_kernel<<<1, MOE_MAX_EXPERTS, 0, stream>>>(tok, pos, offs, idx, T > 0 ? T : 0, K, E);
    return cuda_launch_check("moe_group_cuda", err);
}

extern "C" int moe_combine_forward_cuda(float *y, const float *h, const float *w, const int *pos, int T, int K, int C,
                                        float beta, cudaStream_t stream, PailErr *err) {
    if (moe_check_k(K, "moe_combine_forward_cuda", err) < 0) return -1;
    if (T <= 0 || C <= 0) return 0;
    combine_fwd<<<T, THREADS, 0, stream>>>(y, h, w, pos, K, C, beta);
    return cuda_launch_check("moe_combine_forward_cuda", err);
}

extern "C" int moe_combine_backward_cuda(float *dh, float *dw, const float *dy, const float *h, const float *w,
                                         const int *pos, int T, int K, int C, cudaStream_t stream, PailErr *err) {
    if (moe_check_k(K, "moe_combine_backward_cuda", err) < 0) return -1;
    if (T <= 0) return 0;
    combine_bwd<<<T, THREADS, 0, stream>>>(dh, dw, dy, h, w, pos, K, C);
    return cuda_launch_check("moe_combine_backward_cuda", err);
}

extern "C" int sigmoid_gate_forward_cuda(float *y, const float *g, const float *s, int T, int C, float beta,
                                         cudaStream_t stream, PailErr *err) {
    size_t n = (size_t)(T > 0 ? T : 0) * (C > 0 ? C : 0);
    if (!n) return 0;
    gate_fwd<<<cuda_blocks(n, THREADS), THREADS, 0, stream>>>(y, g, s, T, C, beta);
    return cuda_launch_check("sigmoid_gate_forward_cuda", err);
}

extern "C" int sigmoid_gate_backward_cuda(float *ds, float *dg, const float *dy, const float *g, const float *s, int T,
                                          int C, cudaStream_t stream, PailErr *err) {
    if (T <= 0) return 0;
    gate_bwd<<<T, THREADS, 0, stream>>>(ds, dg, dy, g, s, C);
    return cuda_launch_check("sigmoid_gate_backward_cuda", err);
}
