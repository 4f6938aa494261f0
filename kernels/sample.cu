// sample twin: one block per row. The probabilities are kernels/sample.c's
// bits (sample_exp.h: its scalar Cephes exp, fmaf for fmaf) and the stream is
// the same xoshiro256**; the double sums are reduced across the block, not
// left to right, so a token can differ from the CPU's only when the uniform
// lands within a few ulps of a boundary of the cumulative mass. The sorted
// path (top-k / top-p) sorts each row with CUB's segmented radix sort (stable:
// equal probabilities keep the lower id first, the CPU's order). CPU twin:
// kernels/sample.c.
#include <cub/cub.cuh>
#include "core/rng.h"
#include "cuda_common.h"
#include "sample_exp.h"

enum { SAMPLE_THREADS = 256 };

__device__ static bool knob_on(double k) { return k > 0 && k < 1; }

typedef cub::BlockReduce<double, SAMPLE_THREADS> SumD;
typedef cub::BlockScan<double, SAMPLE_THREADS> ScanD;

// First index of the greatest logit (the CPU's greedy rule).
__device__ static int block_argmax(const float *l, int V) {
    __shared__ float bv[SAMPLE_THREADS];
    __shared__ int bi[SAMPLE_THREADS];
    float v = -INFINITY;
    int i = V;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        if (l[j] > v || (l[j] == v && j < i)) v = l[j], i = j;
    bv[threadIdx.x] = v, bi[threadIdx.x] = i;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            float w = bv[threadIdx.x + o];
            int k = bi[threadIdx.x + o];
            if (w > bv[threadIdx.x] || (w == bv[threadIdx.x] && k < bi[threadIdx.x])) bv[threadIdx.x] = w, bi[threadIdx.x] = k;
        }
        __syncthreads();
    }
    return bi[0] < V ? bi[0] : 0;
}

// The first position i (in the order given by ord, or ids when ord is NULL) of
// the first n whose cumulative kept mass exceeds u; -1 when none does.
__device__ static int block_walk(const float *p, const int *ord, int n, float floor_p, double u) {
    __shared__ typename ScanD::TempStorage scan;
    __shared__ double base;
    __shared__ int found;
    if (threadIdx.x == 0) base = 0, found = -1;
    __syncthreads();
    for (int c = 0; c < n; c += blockDim.x) {
        int j = c + threadIdx.x;
        float pj = j < n ? p[ord ? ord[j] : j] : 0.0f;
        double x = j < n && pj >= floor_p ? (double)pj : 0.0, incl, total;
        ScanD(scan).InclusiveSum(x, incl, total);
        if (j < n && x > 0 && u < base + incl) atomicMin(&found, j) ;
        __syncthreads();
        if (threadIdx.x == 0) base += total;
        __syncthreads();
        if (found >= 0) break;
    }
    return found;
}

__global__ static void sample_kernel(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                                     const int *lrow, const int *rslot, int V, SampleParams sp, const int32_t *stop_ids,
                                     int n_stop, float *ws, const float *sorted_p, const int *sorted_i, int phase) {
    __shared__ typename SumD::TempStorage red;
    __shared__ float sh[32];
    __shared__ double kept_sh;
    __shared__ int tok_sh;
    int a = blockIdx.x;
    const float *l = logits + (size_t)lrow[a] * V;
    float *p = ws + (size_t)a * V;
    uint64_t *st = rng + 4 * (size_t)rslot[a];
    bool sorted = (sp.top_k > 0 && sp.top_k < V) || knob_on(sp.top_p);
    bool minp = knob_on(sp.min_p) || sp.min_p == 1;
    if (phase == 0) {  // probabilities; the whole sample unless the row needs sorting
        if (!(sp.temperature > 0)) {
            int t = block_argmax(l, V);
            if (threadIdx.x == 0) {
                tok[a] = t, logp[a] = 0.0f;
                uint8_t s = 0;
                for (int k = 0; k < n_stop; k++) s |= t == stop_ids[k];
                stopped[a] = s;
            }
            return;
        }
        float m = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, l[j]);
        m = block_reduce(m, sh, true);
        float inv_t = (float)(1.0 / sp.temperature);
        for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = sample_exp1(__fmul_rn(l[j] - m, inv_t));
        __syncthreads();
        if (sorted) return;  // phase 1 after the sort
        float floor_p = minp ? (float)sp.min_p : 0.0f;
        double s = 0;
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            if (p[j] >= floor_p) s += p[j];
        double sum = SumD(red).Sum(s);
        if (threadIdx.x == 0) kept_sh = sum * rng_step_uniform(st);
        __syncthreads();
        int t = block_walk(p, NULL, V, floor_p, kept_sh);
        if (threadIdx.x == 0) {
            if (t < 0) t = V - 1;
            while (t > 0 && (p[t] == 0 || p[t] < floor_p)) t--;
            tok_sh = t;
            kept_sh = sum;
        }
    } else {  // sorted rows: keep the top k, the top-p prefix, then min-p (serial: the kept set is short)
        const float *q = sorted_p + (size_t)a * V;
        const int *qi = sorted_i + (size_t)a * V;
        if (!(sp.temperature > 0)) return;
        if (!sorted) return;
        if (threadIdx.x == 0) {
            int keep = sp.top_k > 0 && sp.top_k < V ? sp.top_k : V;
            double kept = 0;
            for (int j = 0; j < keep; j++) kept += q[j];
            if (knob_on(sp.top_p)) {
                double acc = 0;
                int n = 0;
                while (n < keep) {
                    acc += q[n++];
                    if (acc >= sp.top_p * kept) break;
                }
                keep = n, kept = acc;
            }
            if (minp) {
                float floor_p = (float)sp.min_p * q[0];
                int n = 1;
                while (n < keep && q[n] >= floor_p) n++;
                if (n < keep) {
                    keep = n, kept = 0;
                    for (int j = 0; j < keep; j++) kept += q[j];
                }
            }
            double u = rng_step_uniform(st) * kept, acc = 0;
            int t = qi[keep - 1];
            for (int j = 0; j < keep; j++) {
                acc += q[j];
                if (u < acc) { t = qi[j]; break; }
            }
            tok_sh = t, kept_sh = kept;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = tok_sh;
        tok[a] = t;
        logp[a] = (float)(log((double)p[t]) - log(kept_sh));
        uint8_t s = 0;
        for (int k = 0; k < n_stop; k++) s |= t == stop_ids[k];
        stopped[a] = s;
    }
}

__global__ static void iota_rows(int *idx, int *offsets, int n, int V) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)n * V) idx[i] = (int)(i % V);
    if (i <= (size_t)n) offsets[i] = (int)(i * V);
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t sort_temp_bytes(int n, int V) {
    size_t t = 0;
    cub::DeviceSegmentedRadixSort::SortPairsDescending(NULL, t, (const float *)NULL, (float *)NULL, (const int *)NULL,
                                                       (int *)NULL, n * V, n, (const int *)NULL, (const int *)NULL);
    return t;
}

extern "C" size_t sample_ws_bytes_cuda(int n, int V, const SampleParams *sp) {
    size_t rows = align256((size_t)n * V * sizeof(float));
    bool sorted = (sp->top_k > 0 && sp->top_k < V) || (sp->top_p > 0 && sp->top_p < 1);
    if (!sorted || !(sp->temperature > 0)) return rows;
    return rows + 3 * align256((size_t)n * V * sizeof(float)) + align256((size_t)(n + 1) * sizeof(int)) +
           align256(sort_temp_bytes(n, V));
}

extern "C" int sample_forward_cuda(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                                   const int *lrow, const int *rslot, int n, int V, const SampleParams *sp,
                                   const int32_t *stop_ids, int n_stop, void *ws, size_t ws_bytes,
                                   cudaStream_t stream, PailErr *err) {
    if (n <= 0) return 0;
    if ((size_t)n * V > (size_t)INT32_MAX)
        return err_set(err, PAIL_ERR_INVALID, "sample_forward_cuda: %d rows of %d logits exceed 2^31 entries", n, V);
    size_t need = sample_ws_bytes_cuda(n, V, sp);
    if (ws_bytes < need)
        return err_set(err, PAIL_ERR_INVALID, "sample_forward_cuda: workspace of %zu bytes, %zu needed", ws_bytes, need);
    char *w = (char *)ws;
    float *p = (float *)w;
    sample_kernel<<<n, SAMPLE_THREADS, 0, stream>>>(tok, logp, stopped, rng, logits, lrow, rslot, V, *sp, stop_ids,
                                                    n_stop, p, NULL, NULL, 0);
    if (cuda_launch_check("sample_forward_cuda", err)) return -1;
    if (need == align256((size_t)n * V * sizeof(float))) return 0;
    size_t rows = align256((size_t)n * V * sizeof(float));
    float *sp_out = (float *)(w + rows);
    int *idx = (int *)(w + 2 * rows), *idx_out = (int *)(w + 3 * rows), *off = (int *)(w + 4 * rows);
    void *temp = w + 4 * rows + align256((size_t)(n + 1) * sizeof(int));
    size_t temp_bytes = sort_temp_bytes(n, V);
    iota_rows<<<cuda_blocks((size_t)n * V + 1, 256), 256, 0, stream>>>(idx, off, n, V);
    if (cuda_launch_check("sample_forward_cuda iota", err)) return -1;
    if (cuda_check(cub::DeviceSegmentedRadixSort::SortPairsDescending(temp, temp_bytes, p, sp_out, idx, idx_out, n * V,
                                                                      n, off, off + 1, 0, sizeof(float) * 8, stream),
                   "sample_forward_cuda sort", err))
        return -1;
    sample_kernel<<<n, SAMPLE_THREADS, 0, stream>>>(tok, logp, stopped, rng, logits, lrow, rslot, V, *sp, stop_ids,
                                                    n_stop, p, sp_out, idx_out, 1);
    return cuda_launch_check("sample_forward_cuda", err);
}
