// rmsnorm: out = x * rsqrt(mean(x^2) + eps) * w per row (HF LlamaRMSNorm in fp32),
// used for the layer norms (rows = T, C = hidden) and Qwen3's per-head
// q_norm/k_norm (rows = T*H, C = D). CPU twin of kernels/rmsnorm.cu.
#include <math.h>
#include "kernels.h"
#include "parallel.h"

// The op bodies run on the caller's team or on their own (kernels/parallel.h).
static void forward_team(float *out, float *rstd, const float *x, const float *w, int rows, int C, float eps) {
#pragma omp for schedule(static) nowait
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C;
        float *o = out + (size_t)r * C;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
        float s = 1.0f / sqrtf(ss / C + eps);
        if (rstd) rstd[r] = s;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = xr[c] * s * w[c];
    }
}

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int rows, int C,
                     float eps) {
    KERNEL_TEAM(forward_team(out, rstd, x, w, rows, C, eps));
}

void rmsnorm_forward_ref(float *out, float *rstd, const float *x, const float *w, int rows,
                         int C, float eps) {
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[(size_t)r * C + c] * x[(size_t)r * C + c];
        double s = 1.0 / sqrt(ss / C + eps);
        if (rstd) rstd[r] = (float)s;
        for (int c = 0; c < C; c++)
            out[(size_t)r * C + c] = (float)(x[(size_t)r * C + c] * s * w[c]);
    }
}

// With xh = x * rstd: dx = rstd * (g - xh * mean(g * xh)), g = dout * w;
// dw += sum_rows dout * xh. dx is parallel over rows; dw over column blocks
// (each thread owns its columns: no per-thread partial buffers to allocate).
static void backward_team(float *dx, float *dw, const float *dout, const float *x, const float *w,
                          const float *rstd, int rows, int C) {
#pragma omp for schedule(static) nowait
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C;
        float s = rstd[r], dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) dot += dr[c] * w[c] * xr[c];
        float m = dot * s * s / C;  // mean(g * xh) * rstd
        float *o = dx + (size_t)r * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = s * (dr[c] * w[c] - xr[c] * m);
    }
    if (dw) {
        enum { CB = 64 };
        int nblk = (C + CB - 1) / CB;
#pragma omp for schedule(static) nowait
        for (int b = 0; b < nblk; b++) {
            int c0 = b * CB, c1 = c0 + CB < C ? c0 + CB : C;
            float acc[CB] = {0};
            for (int r = 0; r < rows; r++) {
                const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C;
                float s = rstd[r];
                for (int c = c0; c < c1; c++) acc[c - c0] += dr[c] * xr[c] * s;
            }
            for (int c = c0; c < c1; c++) dw[c] += acc[c - c0];
        }
    }
}

void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int rows, int C) {
    KERNEL_TEAM(backward_team(dx, dw, dout, x, w, rstd, rows, C));
}

void rmsnorm_backward_ref(float *dx, float *dw, const float *dout, const float *x,
                          const float *w, const float *rstd, int rows, int C) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C;
        double s = rstd[r];
        // d out_c / d x_j = w_c * (s * [c == j] - x_c * x_j * s^3 / C)
        for (int j = 0; j < C; j++) {
            double g = 0;
            for (int c = 0; c < C; c++)
                g += dr[c] * w[c] * ((c == j ? s : 0.0) - (double)xr[c] * xr[j] * s * s * s / C);
            dx[(size_t)r * C + j] = (float)g;
        }
        if (dw)
            for (int c = 0; c < C; c++) dw[c] += (float)(dr[c] * xr[c] * s);
    }
}
