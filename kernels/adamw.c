// adamw: AdamW over one flat fp32 array (LoRA params, grads and moments share a
// layout), with torch.optim.AdamW's exact update order (decay, moments, bias-
// corrected step) and torch.nn.utils.clip_grad_norm_'s clip factor.
// CPU twin of kernels/adamw.cu.
#include <math.h>
#include "kernels.h"
#include "simd.h"

// In a fixed order whatever the team's size: SUMSQ_PARTS slices, each summed
// alone, then the slices in order (an OpenMP reduction adds the threads'
// partial sums in the order they finish, so the clip factor, and with it the
// adapter, could differ between two runs, or between the CPU and sim devices).
enum { SUMSQ_PARTS = 64 };
double adamw_grad_sumsq(const float *g, size_t n) {
    double part[SUMSQ_PARTS];
    size_t per = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
#pragma omp parallel for schedule(static) if (n >= (1u << 16))
    for (int k = 0; k < SUMSQ_PARTS; k++) {
        size_t i0 = (size_t)k * per < n ? (size_t)k * per : n, i1 = i0 + per < n ? i0 + per : n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)g[i] * g[i];
        part[k] = s;
    }
    double s = 0;
    for (int k = 0; k < SUMSQ_PARTS; k++) s += part[k];
    return s;
}

double adamw_grad_sumsq_ref(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

float adamw_clip_scale(double sumsq, float max_norm) {
    if (max_norm <= 0) return 1.0f;
    double c = max_norm / (sqrt(sumsq) + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

// torch (single-tensor path): p *= 1 - lr*wd; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
void adamw_update(float *p, float *m, float *v, const float *g, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step,
                  float grad_scale) {
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * weight_decay;
    enum { CHUNK = 256 };  // sqrt a chunk at a time (simd.h)
    size_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nch; b++) {
        size_t i0 = b * CHUNK;
        int cnt = n - i0 < CHUNK ? (int)(n - i0) : CHUNK;
        float den[CHUNK];
        float *pp = p + i0, *mm = m + i0, *vv = v + i0;
        const float *gg = g + i0;
#pragma omp simd
        for (int i = 0; i < cnt; i++) {
            float gi = gg[i] * grad_scale;
            mm[i] = beta1 * mm[i] + (1.0f - beta1) * gi;
            den[i] = vv[i] = beta2 * vv[i] + (1.0f - beta2) * gi * gi;
        }
        simd_sqrt(den, cnt);
#pragma omp simd
        for (int i = 0; i < cnt; i++)
            pp[i] = pp[i] * decay - step_size * mm[i] / (den[i] / bc2_sqrt + eps);
    }
}

void adamw_update_ref(float *p, float *m, float *v, const float *g, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int step,
                      float grad_scale) {
    double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * grad_scale;
        double mi = beta1 * (double)m[i] + (1.0 - beta1) * gi;
        double vi = beta2 * (double)v[i] + (1.0 - beta2) * gi * gi;
        double mh = mi / bc1, vh = vi / bc2;  // textbook form of the same update
        double pi = (double)p[i] * (1.0 - (double)lr * weight_decay);
        p[i] = (float)(pi - lr * mh / (sqrt(vh) + eps));
        m[i] = (float)mi, v[i] = (float)vi;
    }
}
