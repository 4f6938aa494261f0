// swiglu_clamp: gpt_oss's clamped gated activation (GptOssExperts._apply_gate),
// elementwise over n values whose gate and up halves arrive de-interleaved:
// g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) g sigmoid(alpha g),
// and its backward. torch's clamp passes the gradient where its input lies in
// [min, max] inclusive (0 beyond: a value at the limit still gets it), and a NaN
// input stays NaN (comparisons, not fminf). CPU twin of kernels/swiglu_clamp.cu.
#include <math.h>
#include <stdbool.h>
#include "kernels.h"
#include "parallel.h"
#include "simd.h"

enum { CHUNK = 256 };  // exp computed a chunk at a time (simd.h)

static inline float clamp_hi(float x, float hi) { return x > hi ? hi : x; }
static inline float clamp_lohi(float x, float lo, float hi) { return x > hi ? hi : x < lo ? lo :
                                                                                            x; }

// e = exp(-alpha min(gate, limit)) over chunk b (from b * CHUNK); returns the chunk's length.
static inline int exp_chunk(float *e, const float *gate, size_t n, size_t b, float alpha, float limit) {
    size_t i0 = b * CHUNK;
    int m = n - i0 < CHUNK ? (int)(n - i0) : CHUNK;
    for (int i = 0; i < m; i++) e[i] = -alpha * clamp_hi(gate[i0 + i], limit);
    simd_exp(e, m);
    return m;
}

// The op bodies run on the caller's team or on their own (kernels/parallel.h).
static void forward_team(float *out, const float *gate, const float *up, size_t n, float alpha, float limit) {
    size_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t b = 0; b < nch; b++) {
        size_t i0 = b * CHUNK;
        float e[CHUNK];
        int m = exp_chunk(e, gate, n, b, alpha, limit);
#pragma omp simd
        for (int i = 0; i < m; i++) {
            float g = clamp_hi(gate[i0 + i], limit), u = clamp_lohi(up[i0 + i], -limit, limit);
            out[i0 + i] = (u + 1.0f) * (g / (1.0f + e[i]));
        }
    }
}

void swiglu_clamp_forward(float *out, const float *gate, const float *up, size_t n, float alpha, float limit) {
    KERNEL_TEAM(forward_team(out, gate, up, n, alpha, limit));
}

// d/dg [g sigmoid(alpha g)] = s (1 + alpha g (1 - s)), s = sigmoid(alpha g).
static void backward_team(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                          float alpha, float limit) {
    size_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t b = 0; b < nch; b++) {
        size_t i0 = b * CHUNK;
        float e[CHUNK];
        int m = exp_chunk(e, gate, n, b, alpha, limit);
#pragma omp simd
        for (int i = 0; i < m; i++) {
            float g0 = gate[i0 + i], u0 = up[i0 + i], d = dout[i0 + i];
            float g = clamp_hi(g0, limit), u = clamp_lohi(u0, -limit, limit), s = 1.0f / (1.0f + e[i]);
            dgate[i0 + i] = g0 <= limit ? d * (u + 1.0f) * s * (1.0f + alpha * g * (1.0f - s)) : 0.0f;
            dup[i0 + i] = u0 >= -limit && u0 <= limit ? d * g * s : 0.0f;
        }
    }
}

void swiglu_clamp_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                           float alpha, float limit) {
    KERNEL_TEAM(backward_team(dgate, dup, dout, gate, up, n, alpha, limit));
}

// ---- references: double, the formulas written out as torch's code reads ----
void swiglu_clamp_forward_ref(float *out, const float *gate, const float *up, size_t n, float alpha, float limit) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i] > limit ? limit : gate[i];
        double u = up[i] > limit ? limit : up[i] < -limit ? -limit :
                                                            up[i];
        out[i] = (float)((u + 1) * g / (1 + exp(-(double)alpha * g)));
    }
}

// Quotient rule on g / (1 + e^(-alpha g)): 1/den + alpha g e / den^2; the clamps' masks inclusive.
void swiglu_clamp_backward_ref(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                               size_t n, float alpha, float limit) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i] > limit ? limit : gate[i];
        double u = up[i] > limit ? limit : up[i] < -limit ? -limit :
                                                            up[i];
        double e = exp(-(double)alpha * g), den = 1 + e;
        bool gin = gate[i] <= limit, uin = up[i] >= -limit && up[i] <= limit;
        dgate[i] = gin ? (float)(dout[i] * (u + 1) * (1 / den + alpha * g * e / (den * den))) : 0.0f;
        dup[i] = uin ? (float)(dout[i] * g / den) : 0.0f;
    }
}
