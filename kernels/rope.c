// rope: rotary position embedding in HF's half-rotation layout (rotate_half: pairs
// (i, i + D/2)), with transformers' llama3 frequency scaling. Tables are built
// once per model (P positions) and indexed by per-token position ids, so packed
// sequences each restart at 0. CPU twin of kernels/rope.cu.
#include <math.h>
#include "kernels.h"
#include "parallel.h"

// transformers _compute_default_rope_parameters: inv_freq = 1 / base^(2i/D),
// computed in fp32 as torch does; then _compute_llama3_parameters when scaled.
void rope_inv_freq(float *inv_freq, int D, float theta, const RopeScaling *sc) {
    int half = D / 2;
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)D;
        inv_freq[i] = 1.0f / powf(theta, e);
    }
    if (!sc || sc->factor <= 0) return;
    double factor = sc->factor, lo = sc->low_freq_factor, hi = sc->high_freq_factor;
    double old_ctx = sc->original_max_position;
    double low_freq_wavelen = old_ctx / lo, high_freq_wavelen = old_ctx / hi;
    for (int i = 0; i < half; i++) {
        float f = inv_freq[i];
        double wavelen = 2 * M_PI / f;
        float scaled = wavelen > low_freq_wavelen ? (float)(f / factor) : f;
        if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
            // medium band: interpolate between the scaled and the original frequency
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            scaled = (float)((1 - smooth) * scaled / factor + smooth * scaled);
        }
        inv_freq[i] = scaled;
    }
}

void rope_inv_freq_ext(float *inv_freq, int D, float theta, const float *ext) {
    for (int i = 0; i < D / 2; i++) {
        float e = (float)(2 * i) / (float)D;
        inv_freq[i] = 1.0f / (ext[i] * powf(theta, e));
    }
}

void rope_table_build(float *cos_t, float *sin_t, const float *inv_freq, int P, int D) {
    int half = D / 2;
    for (int p = 0; p < P; p++)
        for (int i = 0; i < half; i++) {
            float ang = (float)p * inv_freq[i];  // fp32 product, as HF's freqs matmul
            cos_t[(size_t)p * half + i] = (float)cos((double)ang);
            sin_t[(size_t)p * half + i] = (float)sin((double)ang);
        }
}

// sign = +1 forward (rotate by +angle), -1 backward (the transpose rotates back).
// Work-shared over (token, head) pairs, so a decode step's one token still
// splits (kernels/parallel.h: on the caller's team or its own). out may be x.
// The first rd of each head's D dims turn (tables (P, rd/2)); the others pass
// through (rd < D: phi3's partial rotary, kernels/rope_partial.c).
static void rope_team_rd(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t, int T, int nh,
                  int D, int rd, float sign) {
    int half = rd / 2;
#pragma omp for collapse(2) schedule(static) nowait
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *c = cos_t + (size_t)pos[t] * half, *s = sin_t + (size_t)pos[t] * half;
            const float *xr = x + ((size_t)t * nh + h) * D;
            float *o = out + ((size_t)t * nh + h) * D;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = xr[i], b = xr[i + half], sn = sign * s[i];
                o[i] = a * c[i] - b * sn;
                o[i + half] = b * c[i] + a * sn;
            }
            if (o != xr)
                for (int i = rd; i < D; i++) o[i] = xr[i];
        }
}

static void rope_apply(float *out, const float *x, const int *pos, const float *cos_t,
                       const float *sin_t, int T, int nh, int D, float sign) {
    KERNEL_TEAM(rope_team_rd(out, x, pos, cos_t, sin_t, T, nh, D, D, sign));
}

void rope_partial_forward(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t, int T,
                          int nh, int D, int rd) {
    KERNEL_TEAM(rope_team_rd(out, x, pos, cos_t, sin_t, T, nh, D, rd, 1.0f));
}

void rope_partial_backward(float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                           int T, int nh, int D, int rd) {
    KERNEL_TEAM(rope_team_rd(dx, dout, pos, cos_t, sin_t, T, nh, D, rd, -1.0f));
}

void rope_forward(float *out, const float *x, const int *pos, const float *cos_t,
                  const float *sin_t, int T, int nh, int D) {
    rope_apply(out, x, pos, cos_t, sin_t, T, nh, D, 1.0f);
}

void rope_backward(float *dx, const float *dout, const int *pos, const float *cos_t,
                   const float *sin_t, int T, int nh, int D) {
    rope_apply(dx, dout, pos, cos_t, sin_t, T, nh, D, -1.0f);
}

// Reference: HF's formula literally, q*cos + rotate_half(q)*sin with the
// duplicated (D) cos/sin rows, and the backward as the explicit transpose.
void rope_forward_ref(float *out, const float *x, const int *pos, const float *cos_t,
                      const float *sin_t, int T, int nh, int D) {
    int half = D / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *xr = x + ((size_t)t * nh + h) * D;
            float tmp[D];
            for (int d = 0; d < D; d++) {
                float c = cos_t[(size_t)pos[t] * half + d % half];
                float s = sin_t[(size_t)pos[t] * half + d % half];
                float rot = d < half ? -xr[d + half] : xr[d - half];
                tmp[d] = xr[d] * c + rot * s;
            }
            for (int d = 0; d < D; d++) out[((size_t)t * nh + h) * D + d] = tmp[d];
        }
}

void rope_backward_ref(float *dx, const float *dout, const int *pos, const float *cos_t,
                       const float *sin_t, int T, int nh, int D) {
    int half = D / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *g = dout + ((size_t)t * nh + h) * D;
            float tmp[D];
            // out_d = x_d c_d + rot_d s_d with rot_d = -x_{d+half} (d < half) or x_{d-half};
            // so dx_j = g_j c_j + (j >= half ? -g_{j-half} s_{j-half} : g_{j+half} s_{j+half})
            for (int j = 0; j < D; j++) {
                float c = cos_t[(size_t)pos[t] * half + j % half];
                float s = sin_t[(size_t)pos[t] * half + j % half];
                float other = j < half ? g[j + half] * s : -g[j - half] * s;
                tmp[j] = g[j] * c + other;
            }
            for (int j = 0; j < D; j++) dx[((size_t)t * nh + h) * D + j] = tmp[j];
        }
}
