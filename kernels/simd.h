// Vectorised exp and sqrt over float arrays for the fast CPU paths (internal to
// kernels/). GCC will not vectorise expf/sqrtf loops without -ffast-math /
// -fno-math-errno, so the ops call these on chunks of a few hundred values.
// AVX2 when compiled for it, else the libm loop. Not used by the references.
#pragma once
#include <math.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

// Cephes expf: exp(x) = 2^n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2] with ln2
// split in two for an exact reduction, degree-5 minimax polynomial for exp(r).
// Relative error <= 2 ulp over [-87, 88]; inputs below -87.3 give ~0 (not
// denormals), which the softmax callers want anyway; -inf gives 0.
static inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365478515625f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                                _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(n)));
}
#endif

// x[i] = exp(x[i]) for i < n.
static inline void simd_exp(float *x, int n) {
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = expf(x[i]);
}

// x[i] = sqrt(x[i]) for i < n (x >= 0).
static inline void simd_sqrt(float *x, int n) {
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrtf(x[i]);
}
