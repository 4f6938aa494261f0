// swiglu: the gated MLP activation out = silu(gate) * up (HF LlamaMLP's
// act_fn(gate_proj(x)) * up_proj(x) with hidden_act "silu"), elementwise over
// n = T*F values, and its backward. CPU twin of kernels/swiglu.cu.
#include <math.h>
#include "kernels.h"
#include "parallel.h"
#include "simd.h"

enum { CHUNK = 256 };  // exp computed a chunk at a time (simd.h)

// e = exp(-gate) over chunk b (from b * CHUNK); returns the chunk's length.
static inline int exp_neg_chunk(float *e, const float *gate, size_t n, size_t b) {
    size_t i0 = b * CHUNK;
    int m = n - i0 < CHUNK ? (int)(n - i0) : CHUNK;
    for (int i = 0; i < m; i++) e[i] = -gate[i0 + i];
    simd_exp(e, m);
    return m;
}

// The op bodies run on the caller's team or on their own (kernels/parallel.h).
static void forward_team(float *out, const float *gate, const float *up, size_t n) {
    size_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t b = 0; b < nch; b++) {
        size_t i0 = b * CHUNK;
        float e[CHUNK];
        int m = exp_neg_chunk(e, gate, n, b);
#pragma omp simd
        for (int i = 0; i < m; i++) out[i0 + i] = gate[i0 + i] / (1.0f + e[i]) * up[i0 + i];
    }
}

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    KERNEL_TEAM(forward_team(out, gate, up, n));
}

// silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g).
static void backward_team(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                          size_t n) {
    size_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t b = 0; b < nch; b++) {
        size_t i0 = b * CHUNK;
        float e[CHUNK];
        int m = exp_neg_chunk(e, gate, n, b);
#pragma omp simd
        for (int i = 0; i < m; i++) {
            float g = gate[i0 + i], s = 1.0f / (1.0f + e[i]), d = dout[i0 + i];
            dgate[i0 + i] = d * up[i0 + i] * s * (1.0f + g * (1.0f - s));
            dup[i0 + i] = d * g * s;
        }
    }
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n) {
    KERNEL_TEAM(backward_team(dgate, dup, dout, gate, up, n));
}

void swiglu_forward_ref(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
}

// d/dg [g / (1 + e^-g)] = 1/(1 + e^-g) + g e^-g / (1 + e^-g)^2 (quotient rule).
void swiglu_backward_ref(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i], e = exp(-g), den = 1.0 + e;
        dgate[i] = (float)(dout[i] * up[i] * (1.0 / den + g * e / (den * den)));
        dup[i] = (float)(dout[i] * g / den);
    }
}
