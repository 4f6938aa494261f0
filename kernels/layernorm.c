// layernorm: Cohere's LayerNorm without a bias, out = (x - mean) * rsqrt(var + eps) * w
// per row, in fp32 (HF CohereLayerNorm): the decoder norms (rows = T, C = hidden,
// one weight row) and Command-R+'s per-head q_norm/k_norm (rows = T*H, C = D, a
// weight row per head: wrows = H). Not llama's RMSNorm (kernels/rmsnorm.c).
// CPU twin of kernels/layernorm.cu.
#include <math.h>
#include "kernels.h"
#include "parallel.h"

// The op bodies run on the caller's team or on their own (kernels/parallel.h).
static void forward_team(float *out, float *mean, float *rstd, const float *x, const float *w, int rows, int C, int wrows,
                         float eps) {
#pragma omp for schedule(static) nowait
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *wr = w + (size_t)(r % wrows) * C;
        float *o = out + (size_t)r * C;
        float sum = 0, ss = 0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++) sum += xr[c];
        float mu = sum / C;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += (xr[c] - mu) * (xr[c] - mu);
        float s = 1.0f / sqrtf(ss / C + eps);
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = s;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (xr[c] - mu) * s * wr[c];
    }
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, int rows, int C, int wrows,
                       float eps) {
    KERNEL_TEAM(forward_team(out, mean, rstd, x, w, rows, C, wrows, eps));
}

void layernorm_forward_ref(float *out, float *mean, float *rstd, const float *x, const float *w, int rows, int C, int wrows,
                           float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *wr = w + (size_t)(r % wrows) * C;
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++) mu += xr[c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (xr[c] - mu) * (xr[c] - mu);
        double s = 1.0 / sqrt(var / C + eps);
        if (mean) mean[r] = (float)mu;
        if (rstd) rstd[r] = (float)s;
        for (int c = 0; c < C; c++) out[(size_t)r * C + c] = (float)((xr[c] - mu) * s * wr[c]);
    }
}

// With xh = (x - mean) * rstd and g = dout * w: dx = rstd * (g - mean(g) - xh *
// mean(g * xh)); dw += sum_rows dout * xh, with the forward's mean and rstd.
// dx is parallel over rows; dw over column blocks of each weight row (no
// per-thread partial buffers).
static void backward_team(float *dx, float *dw, const float *dout, const float *x, const float *w,
                          const float *mean, const float *rstd, int rows, int C, int wrows) {
#pragma omp for schedule(static) nowait
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C, *wr = w + (size_t)(r % wrows) * C;
        float s = rstd[r], mu = mean[r], sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
        for (int c = 0; c < C; c++) {
            float g = dr[c] * wr[c];
            sg += g;
            sgx += g * (xr[c] - mu) * s;
        }
        float mg = sg / C, mgx = sgx / C;
        float *o = dx + (size_t)r * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = s * (dr[c] * wr[c] - mg - (xr[c] - mu) * s * mgx);
    }
    if (dw) {
        enum { CB = 64 };
        int nblk = (C + CB - 1) / CB;
#pragma omp for collapse(2) schedule(static) nowait
        for (int k = 0; k < wrows; k++)
            for (int b = 0; b < nblk; b++) {
                int c0 = b * CB, c1 = c0 + CB < C ? c0 + CB : C;
                float acc[CB] = {0};
                for (int r = k; r < rows; r += wrows) {
                    const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C;
                    float mu = mean[r], s = rstd[r];
                    for (int c = c0; c < c1; c++) acc[c - c0] += dr[c] * (xr[c] - mu) * s;
                }
                for (int c = c0; c < c1; c++) dw[(size_t)k * C + c] += acc[c - c0];
            }
    }
}

void layernorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *mean,
                        const float *rstd, int rows, int C, int wrows) {
    KERNEL_TEAM(backward_team(dx, dw, dout, x, w, mean, rstd, rows, C, wrows));
}

// The Jacobian written out: d out_c / d x_j = w_c s ([c == j] - 1/C - xh_c xh_j / C).
void layernorm_backward_ref(float *dx, float *dw, const float *dout, const float *x, const float *w,
                            const float *mean, const float *rstd, int rows, int C, int wrows) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C, *wr = w + (size_t)(r % wrows) * C;
        double mu = mean[r], s = rstd[r];
        for (int j = 0; j < C; j++) {
            double g = 0, xj = (xr[j] - mu) * s;
            for (int c = 0; c < C; c++)
                g += dr[c] * wr[c] * s * ((c == j ? 1.0 : 0.0) - 1.0 / C - (xr[c] - mu) * s * xj / C);
            dx[(size_t)r * C + j] = (float)g;
        }
        if (dw)
            for (int c = 0; c < C; c++) dw[(size_t)(r % wrows) * C + c] += (float)(dr[c] * (xr[c] - mu) * s);
    }
}
