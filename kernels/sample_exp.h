// The sampler's scalar exp (internal to kernels/sample.c and its CUDA twin):
// simd.h's exp8 operation for operation (fmaf is the vector FMA's single
// rounding), so an element gets the same bits in an 8-wide chunk, a tail, a
// scalar build and on the GPU.
#pragma once
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#ifdef __CUDACC__
#define SAMPLE_HD __host__ __device__
#else
#define SAMPLE_HD
#endif

static inline SAMPLE_HD float sample_exp1(float x) {
    const float hi = 88.3762626647949f, lo = -87.3365478515625f;
    bool under = x < lo;
    x = x < hi ? x : hi;  // _mm256_min_ps(x, hi): hi when x is NaN
    x = x > lo ? x : lo;
    float fx = floorf(fmaf(x, 1.44269504088896341f, 0.5f));
    x = fmaf(-fx, 0.693359375f, x);
    x = fmaf(-fx, -2.12194440e-4f, x);
    float y = 1.9875691500e-4f;
    y = fmaf(y, x, 1.3981999507e-3f);
    y = fmaf(y, x, 8.3334519073e-3f);
    y = fmaf(y, x, 4.1665795894e-2f);
    y = fmaf(y, x, 1.6666665459e-1f);
    y = fmaf(y, x, 5.0000001201e-1f);
    float xx = x * x, x1 = x + 1.0f;  // separate roundings, as the vector code's mul and add
    y = fmaf(y, xx, x1);
    uint32_t bits = (uint32_t)((int32_t)fx + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return under ? 0.0f : y * scale;
}
