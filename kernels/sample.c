// sample: one token per row from next-token logits (temperature, top-k, top-p,
// min-p, stop ids), with the log-probability of the token under the
// distribution sampled from and a per-row xoshiro256** stream advanced in
// place. The rules are those of src/rollout/sampler.h (which calls sample_row):
// probabilities through sample_exp, summed in double in a fixed order, so the
// stream and the logits fix the token. CUDA twin: kernels/sample.cu (the same
// exp bits; its sums are reduced in another order, see doc/kernels.md).
#define _GNU_SOURCE  // qsort_r
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "core/rng.h"
#include "parallel.h"
#include "sample_exp.h"
#include "simd.h"

void sample_exp(float *x, int n) {
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = sample_exp1(x[i]);
}

static int by_prob_desc(const void *a, const void *b, void *arg) {
    const float *p = arg;
    float x = p[*(const int *)a], y = p[*(const int *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int *)a - *(const int *)b;  // ties: lower id first (deterministic)
}

static bool on(double knob) { return knob > 0 && knob < 1; }

int sample_row(float *logprob, uint64_t rng[4], const float *logits, const SampleParams *sp, float *p, int *idx,
               int V) {
    if (!(sp->temperature > 0)) {  // greedy: first maximum
        int best = 0;
        for (int j = 1; j < V; j++)
            if (logits[j] > logits[best]) best = j;
        *logprob = 0.0f;
        return best;
    }
    float inv_t = (float)(1.0 / sp->temperature), m = -INFINITY;
    for (int j = 0; j < V; j++) m = logits[j] > m ? logits[j] : m;
    for (int j = 0; j < V; j++) p[j] = (logits[j] - m) * inv_t;
    sample_exp(p, V);  // the largest is exp(0) = 1 exactly
    bool sorted = (sp->top_k > 0 && sp->top_k < V) || on(sp->top_p);
    if (!sorted) {
        // Every token, or (min-p alone) those with p >= min_p * p_max, in id order.
        float floor_p = on(sp->min_p) || sp->min_p == 1 ? (float)sp->min_p : 0.0f;
        double sum = 0;
        for (int j = 0; j < V; j++)
            if (p[j] >= floor_p) sum += p[j];
        double u = rng_step_uniform(rng) * sum, acc = 0;
        int tok = -1;
        for (int j = 0; j < V; j++) {
            if (p[j] < floor_p) continue;
            acc += p[j];
            if (u < acc) { tok = j; break; }
        }
        if (tok < 0) tok = V - 1;  // u landed on rounding slack: the last kept token with mass
        while (tok > 0 && (p[tok] == 0 || p[tok] < floor_p)) tok--;
        *logprob = (float)(log(p[tok]) - log(sum));
        return tok;
    }
    // Candidates in descending probability; keep the top k, then the smallest
    // prefix whose mass reaches top_p, then those >= min_p times the largest
    // (HF's TopK, TopP then MinP warpers).
    for (int j = 0; j < V; j++) idx[j] = j;
    qsort_r(idx, (size_t)V, sizeof *idx, by_prob_desc, p);
    int keep = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    double kept = 0;
    for (int j = 0; j < keep; j++) kept += p[idx[j]];
    if (on(sp->top_p)) {
        double acc = 0;
        int n = 0;
        while (n < keep) {
            acc += p[idx[n++]];
            if (acc >= sp->top_p * kept) break;
        }
        keep = n;
        kept = acc;
    }
    if (on(sp->min_p) || sp->min_p == 1) {
        float floor_p = (float)sp->min_p * p[idx[0]];
        int n = 1;
        while (n < keep && p[idx[n]] >= floor_p) n++;
        if (n < keep) {
            keep = n;
            kept = 0;
            for (int j = 0; j < keep; j++) kept += p[idx[j]];
        }
    }
    double u = rng_step_uniform(rng) * kept, acc = 0;
    int tok = idx[keep - 1];
    for (int j = 0; j < keep; j++) {
        acc += p[idx[j]];
        if (u < acc) { tok = idx[j]; break; }
    }
    *logprob = (float)(log(p[tok]) - log(kept));
    return tok;
}

static uint8_t is_stop(int32_t tok, const int32_t *stop_ids, int n_stop) {
    for (int k = 0; k < n_stop; k++)
        if (tok == stop_ids[k]) return 1;
    return 0;
}

static void sample_one(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                       const int *lrow, const int *rslot, int a, int V, const SampleParams *sp,
                       const int32_t *stop_ids, int n_stop, void *mine) {
    tok[a] = sample_row(&logp[a], rng + 4 * (size_t)rslot[a], logits + (size_t)lrow[a] * V, sp, (float *)mine,
                        (int *)((char *)mine + (size_t)V * sizeof(float)), V);
    stopped[a] = is_stop(tok[a], stop_ids, n_stop);
}

int sample_forward_ref(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                       const int *lrow, const int *rslot, int n, int V, const SampleParams *sp,
                       const int32_t *stop_ids, int n_stop, PailErr *err) {
    void *scratch = malloc((size_t)V * (sizeof(float) + sizeof(int)));
    if (!scratch) return err_set(err, PAIL_ERR_NOMEM, "sample: out of memory for a row's scratch (V = %d)", V);
    for (int a = 0; a < n; a++)
        sample_one(tok, logp, stopped, rng, logits, lrow, rslot, a, V, sp, stop_ids, n_stop, scratch);
    free(scratch);
    return 0;
}

size_t sample_ws_bytes(int V) { return (size_t)omp_get_max_threads() * V * (sizeof(float) + sizeof(int)); }

int sample_forward(int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits, const int *lrow,
                   const int *rslot, int n, int V, const SampleParams *sp, const int32_t *stop_ids, int n_stop, void *ws,
                   size_t ws_bytes, PailErr *err) {
    // Not a team op (parallel.h): inside a region every thread would draw every row.
    if (omp_in_parallel())
        return err_set(err, PAIL_ERR_INVALID, "sample_forward: called inside a parallel region (it opens its own)");
    size_t per = (size_t)V * (sizeof(float) + sizeof(int));
    int nth = (int)(ws_bytes / per);
    if (nth < 1) return err_set(err, PAIL_ERR_INVALID, "sample_forward: workspace of %zu bytes, %zu needed", ws_bytes, per);
    if (nth > omp_get_max_threads()) nth = omp_get_max_threads();
    if (n < nth) nth = n;
    // Rows are independent (each its own stream), so the split does not change a bit.
    // One row opens no region (libgomp allocates a team for every one-thread region).
    if (nth <= 1) {
        for (int a = 0; a < n; a++) sample_one(tok, logp, stopped, rng, logits, lrow, rslot, a, V, sp, stop_ids, n_stop, ws);
        return 0;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
    for (int a = 0; a < n; a++)
        sample_one(tok, logp, stopped, rng, logits, lrow, rslot, a, V, sp, stop_ids, n_stop,
                   (char *)ws + (size_t)omp_get_thread_num() * per);
    return 0;
}
