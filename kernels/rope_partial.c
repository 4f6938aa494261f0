// rope_partial: rotary embedding on the first rd of each head's D dims, the
// other D - rd passed through (phi3's partial_rotary_factor: transformers'
// apply_rotary_pos_emb splits q[..., :rd] / q[..., rd:]), half-rotation layout
// within the rotated part (pairs (i, i + rd/2)). Tables (P, rd/2) from
// rope_table_build(.., rd). With rd = D it is rope_forward / rope_backward.
// The fast path (rope_partial_forward / _backward) is rope.c's, one team body for both;
// this file holds the references.
// CPU twin of kernels/rope_partial.cu.
#include "kernels.h"

// Reference: transformers' formula literally on x[..., :rd] (q * cos + rotate_half(q) * sin
// with the duplicated (rd) cos/sin rows), cat with x[..., rd:]; the backward as the
// explicit transpose of that map.
void rope_partial_forward_ref(float *out, const float *x, const int *pos, const float *cos_t, const float *sin_t,
                              int T, int nh, int D, int rd) {
    int half = rd / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *xr = x + ((size_t)t * nh + h) * D;
            float tmp[D];
            for (int d = 0; d < D; d++) {
                if (d >= rd) { tmp[d] = xr[d]; continue; }
                float c = cos_t[(size_t)pos[t] * half + d % half];
                float s = sin_t[(size_t)pos[t] * half + d % half];
                float rot = d < half ? -xr[d + half] : xr[d - half];
                tmp[d] = xr[d] * c + rot * s;
            }
            for (int d = 0; d < D; d++) out[((size_t)t * nh + h) * D + d] = tmp[d];
        }
}

void rope_partial_backward_ref(float *dx, const float *dout, const int *pos, const float *cos_t, const float *sin_t,
                               int T, int nh, int D, int rd) {
    int half = rd / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *g = dout + ((size_t)t * nh + h) * D;
            float tmp[D];
            for (int j = 0; j < D; j++) {
                if (j >= rd) { tmp[j] = g[j]; continue; }
                float c = cos_t[(size_t)pos[t] * half + j % half];
                float s = sin_t[(size_t)pos[t] * half + j % half];
                float other = j < half ? g[j + half] * s : -g[j - half] * s;
                tmp[j] = g[j] * c + other;
            }
            for (int j = 0; j < D; j++) dx[((size_t)t * nh + h) * D + j] = tmp[j];
        }
}
