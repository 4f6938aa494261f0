// geglu: the gated MLP activation out = gelu_tanh(gate) * up (HF GemmaMLP's
// act_fn(gate_proj(x)) * up_proj(x) with hidden_activation "gelu_pytorch_tanh"),
// elementwise over n = T*F values, and its backward. CPU twin of kernels/geglu.cu.
// gelu_tanh(g) = g/2 (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), computed
// as g sigmoid(2u) (the same function: 1 + tanh(u) = 2 sigmoid(2u)), one exp a value.
#include <math.h>
#include "kernels.h"
#include "parallel.h"
#include "simd.h"

enum { CHUNK = 256 };  // exp computed a chunk at a time (simd.h)
#define GELU_K0 0.7978845608028654f  // sqrt(2/pi)
#define GELU_K1 0.044715f

// e = exp(-2u(gate)) over chunk b (from b * CHUNK); returns the chunk's length.
static inline int exp_chunk(float *e, const float *gate, size_t n, size_t b) {
    size_t i0 = b * CHUNK;
    int m = n - i0 < CHUNK ? (int)(n - i0) : CHUNK;
    for (int i = 0; i < m; i++) {
        float g = gate[i0 + i];
        e[i] = -2.0f * GELU_K0 * (g + GELU_K1 * g * g * g);
    }
    simd_exp(e, m);
    return m;
}

static void forward_team(float *out, const float *gate, const float *up, size_t n) {
    size_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t b = 0; b < nch; b++) {
        size_t i0 = b * CHUNK;
        float e[CHUNK];
        int m = exp_chunk(e, gate, n, b);
#pragma omp simd
        for (int i = 0; i < m; i++) out[i0 + i] = gate[i0 + i] / (1.0f + e[i]) * up[i0 + i];
    }
}

void geglu_forward(float *out, const float *gate, const float *up, size_t n) {
    KERNEL_TEAM(forward_team(out, gate, up, n));
}

// d/dg [g s(2u)] = s + g s (1 - s) 2 u', u' = sqrt(2/pi) (1 + 3 * 0.044715 g^2).
static void backward_team(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                          size_t n) {
    size_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp for schedule(static) nowait
    for (size_t b = 0; b < nch; b++) {
        size_t i0 = b * CHUNK;
        float e[CHUNK];
        int m = exp_chunk(e, gate, n, b);
#pragma omp simd
        for (int i = 0; i < m; i++) {
            float g = gate[i0 + i], s = 1.0f / (1.0f + e[i]), d = dout[i0 + i];
            float du = 2.0f * GELU_K0 * (1.0f + 3.0f * GELU_K1 * g * g);
            dgate[i0 + i] = d * up[i0 + i] * (s + g * s * (1.0f - s) * du);
            dup[i0 + i] = d * g * s;
        }
    }
}

void geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    KERNEL_TEAM(backward_team(dgate, dup, dout, gate, up, n));
}

// The reference: torch's formula as written, in double.
void geglu_forward_ref(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i], u = sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
        out[i] = (float)(0.5 * g * (1.0 + tanh(u)) * up[i]);
    }
}

// d/dg [g/2 (1 + tanh u)] = (1 + tanh u)/2 + g/2 (1 - tanh^2 u) u'.
void geglu_backward_ref(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                        size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i], k = sqrt(2.0 / M_PI), t = tanh(k * (g + 0.044715 * g * g * g));
        double dg = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * g * g);
        dgate[i] = (float)(dout[i] * up[i] * dg);
        dup[i] = (float)(dout[i] * 0.5 * g * (1.0 + t));
    }
}
