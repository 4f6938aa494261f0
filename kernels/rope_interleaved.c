// rope_interleaved: rotary position embedding on adjacent pairs (2i, 2i+1) with
// frequency i (Cohere's rotate_half: x[..., ::2], x[..., 1::2], cos/sin
// repeat_interleave'd), over the same (P, D/2) tables as rope.c's half-rotation
// layout. CPU twin of kernels/rope_interleaved.cu.
#include "kernels.h"
#include "parallel.h"

// sign = +1 forward, -1 backward (the transpose). Work-shared over (token, head)
// pairs as rope.c. out may be x.
static void rope_il_team(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t, int T,
                         int nh, int D, float sign) {
    int half = D / 2;
#pragma omp for collapse(2) schedule(static) nowait
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *c = cos_t + (size_t)pos[t] * half, *s = sin_t + (size_t)pos[t] * half;
            const float *xr = x + ((size_t)t * nh + h) * D;
            float *o = out + ((size_t)t * nh + h) * D;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = xr[2 * i], b = xr[2 * i + 1], sn = sign * s[i];
                o[2 * i] = a * c[i] - b * sn;
                o[2 * i + 1] = b * c[i] + a * sn;
            }
        }
}

void rope_interleaved_forward(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                              int T, int nh, int D) {
    KERNEL_TEAM(rope_il_team(out, x, pos, cos_t, sin_t, T, nh, D, 1.0f));
}

void rope_interleaved_backward(float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                               int T, int nh, int D) {
    KERNEL_TEAM(rope_il_team(dx, dout, pos, cos_t, sin_t, T, nh, D, -1.0f));
}

// Reference: CohereRotaryEmbedding + apply_rotary_pos_emb literally: cos/sin of
// width D with each frequency repeated twice, rot = stack(-x[1::2], x[::2])
// interleaved; the backward as the explicit transpose.
void rope_interleaved_forward_ref(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                                  int T, int nh, int D) {
    int half = D / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *xr = x + ((size_t)t * nh + h) * D;
            float tmp[D];
            for (int d = 0; d < D; d++) {
                float c = cos_t[(size_t)pos[t] * half + d / 2], s = sin_t[(size_t)pos[t] * half + d / 2];
                float rot = d % 2 == 0 ? -xr[d + 1] : xr[d - 1];
                tmp[d] = xr[d] * c + rot * s;
            }
            for (int d = 0; d < D; d++) out[((size_t)t * nh + h) * D + d] = tmp[d];
        }
}

void rope_interleaved_backward_ref(float *dx, const float *dout, const int *pos, const float *cos_t,
                                   const float *sin_t, int T, int nh, int D) {
    int half = D / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *g = dout + ((size_t)t * nh + h) * D;
            float tmp[D];
            // out_d = x_d c + rot_d s, rot_{2i} = -x_{2i+1}, rot_{2i+1} = x_{2i}: so
            // dx_{2i} = g_{2i} c + g_{2i+1} s and dx_{2i+1} = g_{2i+1} c - g_{2i} s
            for (int j = 0; j < D; j++) {
                float c = cos_t[(size_t)pos[t] * half + j / 2], s = sin_t[(size_t)pos[t] * half + j / 2];
                float other = j % 2 == 0 ? g[j + 1] * s : -g[j - 1] * s;
                tmp[j] = g[j] * c + other;
            }
            for (int j = 0; j < D; j++) dx[((size_t)t * nh + h) * D + j] = tmp[j];
        }
}
