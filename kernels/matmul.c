// matmul: out(T,N) = alpha * x(T,K) W(N,K)^T + beta * out + bias, and its backward.
// CPU twin of kernels/matmul.cu. Large T goes to OpenBLAS sgemm; for T <=
// matmul_small_t_max a hand-written OpenMP kernel (AVX-512 where compiled for it,
// else AVX2/FMA) streams W once, in memory order, because OpenBLAS streams
// weights at only a fraction of memory bandwidth for products with a few rows
// (bench/bench_kernels.c measures the crossover).
// OpenBLAS runs single-threaded inside an OpenMP team, one column slice per
// thread: its own pthread pool would spin against OpenMP's for the same cores.
#include <omp.h>
#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "blas.h"
#include "kernels.h"

// Crossover measured by bench/bench_kernels.c (doc/kernels.md has the figures):
// at T=8 the mat-vec still beats sgemm on a 512x1408 and a 32000x512 weight.
int matmul_small_t_max = 8;

#if defined(__AVX512F__)
typedef __m512 vf;
#define VW 16
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vf;
#define VW 8
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define VSUM(v) hsum8(v)
#endif

// r[t] = dot(w, x row t) for NT (1..4) consecutive x rows of stride K. W is read
// in memory order, one row after another: a few long sequential streams keep
// the hardware prefetcher ahead (measured here: 57 GB/s against 36 GB/s when
// four rows were read side by side, each only K floats long). U partial sums per
// x row hide the FMA latency: NT * U accumulators, 4 or more in flight.
static inline __attribute__((always_inline)) void dot_row(float *r, const float *w,
                                                          const float *x, int K, int NT) {
    int k = 0;
#ifdef VW
    enum { U = 2 };
    vf acc[4][U];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) acc[t][u] = VZERO();
    for (; k + U * VW <= K; k += U * VW) {
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            vf wv = VLOAD(w + k + u * VW);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[t][u] = VFMA(wv, VLOAD(x + (size_t)t * K + k + u * VW), acc[t][u]);
        }
    }
    for (; k + VW <= K; k += VW) {
        vf wv = VLOAD(w + k);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[t][0] = VFMA(wv, VLOAD(x + (size_t)t * K + k), acc[t][0]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) r[t] = VSUM(VADD(acc[t][0], acc[t][1]));
#else
    for (int t = 0; t < NT; t++) r[t] = 0;
#endif
    for (; k < K; k++)  // tail (K % VW), or the whole row without SIMD
        for (int t = 0; t < NT; t++) r[t] += w[k] * x[(size_t)t * K + k];
}

// One x row: four partial sums of one W row.
static inline __attribute__((always_inline)) void dot_row1(float *r, const float *w, const float *x, int K) {
    int k = 0;
#ifdef VW
    vf a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
    for (; k + 4 * VW <= K; k += 4 * VW) {
        // the four W loads first: four misses in flight before any FMA waits
        vf w0 = VLOAD(w + k), w1 = VLOAD(w + k + VW), w2 = VLOAD(w + k + 2 * VW), w3 = VLOAD(w + k + 3 * VW);
        a0 = VFMA(w0, VLOAD(x + k), a0);
        a1 = VFMA(w1, VLOAD(x + k + VW), a1);
        a2 = VFMA(w2, VLOAD(x + k + 2 * VW), a2);
        a3 = VFMA(w3, VLOAD(x + k + 3 * VW), a3);
    }
    for (; k + VW <= K; k += VW) a0 = VFMA(VLOAD(w + k), VLOAD(x + k), a0);
    *r = VSUM(VADD(VADD(a0, a1), VADD(a2, a3)));
#else
    *r = 0;
#endif
    for (; k < K; k++) *r += w[k] * x[k];
}

static inline __attribute__((always_inline)) void dot_dispatch(float *r, const float *w, const float *x, int K,
                                                               int NT) {
    switch (NT) {
    case 1: dot_row1(r, w, x, K); break;
    case 2: dot_row(r, w, x, K, 2); break;
    case 3: dot_row(r, w, x, K, 3); break;
    default: dot_row(r, w, x, K, 4); break;
    }
}

// C(M, N) = alpha op(A) op(B) + beta C, row-major, with the N columns of C split
// across the OpenMP team in slices of 16: slice [n0, n1) reads B's rows n0..n1-1
// when B is transposed (B is (N, K)), else B's columns n0..n1-1 (B is (K, N)).
// A C too narrow for that (N < 32 per thread) is split by rows.
static void sgemm_omp(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    blas_single_threaded();
#pragma omp parallel
    {
        int nth = omp_get_num_threads(), id = omp_get_thread_num();
        if (N < 32 * nth && M >= 64 * nth) {
            // narrow C (a LoRA rank's 16 columns): slices of rows instead, or one
            // thread would do it all. op(A) rows m0..m1-1 are A's rows, or its
            // columns when A is transposed.
            int mper = ((M + nth - 1) / nth + 7) / 8 * 8;
            int m0 = id * mper, m1 = m0 + mper < M ? m0 + mper : M;
            if (m0 < m1)
                cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                            transB ? CblasTrans : CblasNoTrans, m1 - m0, N, K, alpha,
                            transA ? A + m0 : A + (size_t)m0 * lda, lda, B, ldb, beta,
                            C + (size_t)m0 * ldc, ldc);
        } else {
        int per = ((N + nth - 1) / nth + 15) / 16 * 16;
        int n0 = id * per, n1 = n0 + per < N ? n0 + per : N;
        if (n0 < n1)
            cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                        transB ? CblasTrans : CblasNoTrans, M, n1 - n0, K, alpha, A, lda,
                        transB ? B + (size_t)n0 * ldb : B + n0, ldb, beta, C + n0, ldc);
        }
    }
}

// Small-T forward: out = alpha x W^T + beta out + bias, plus, when A is given,
// scale (x A^T) B^T with la = x A^T written (a LoRA-adapted projection). One
// OpenMP region: la first, then threads own blocks of W rows (16, fewer when W
// is short, as a LoRA A of 16 rows, so that every thread gets some), each row
// read once from memory with its B row's term added before the store; for T > 4
// the row is read again from L1 per group of 4 x rows, which stay in cache.
static void forward_small(float *out, float *la, const float *x, const float *W, const float *bias,
                          const float *A, const float *B, int T, int K, int N, int R, float alpha,
                          float scale, float beta) {
    int nth = omp_get_max_threads(), rows = N >= 64 * nth ? 16 : (N + 4 * nth - 1) / (4 * nth);
    if (rows < 1) rows = 1;
    int nblk = (N + rows - 1) / rows;
#pragma omp parallel
    {
        if (A) {
#pragma omp for schedule(static)
            for (int r = 0; r < R; r++)
                for (int t0 = 0; t0 < T; t0 += 4) {
                    int nt = T - t0 < 4 ? T - t0 : 4;
                    float d[4];
                    dot_dispatch(d, A + (size_t)r * K, x + (size_t)t0 * K, K, nt);
                    for (int t = 0; t < nt; t++) la[(size_t)(t0 + t) * R + r] = d[t];
                }
        }  // (implicit barrier: la is whole)
#pragma omp for schedule(static)
        for (int b = 0; b < nblk; b++) {
            int n1 = (b + 1) * rows < N ? (b + 1) * rows : N;
            for (int n = b * rows; n < n1; n++)
                for (int t0 = 0; t0 < T; t0 += 4) {
                    int nt = T - t0 < 4 ? T - t0 : 4;
                    float d[4];
                    dot_dispatch(d, W + (size_t)n * K, x + (size_t)t0 * K, K, nt);
                    for (int t = 0; t < nt; t++) {
                        float y = alpha * d[t];
                        if (A) {
                            const float *bn = B + (size_t)n * R, *lt = la + (size_t)(t0 + t) * R;
                            float l = 0;
#pragma omp simd reduction(+ : l)
                            for (int r = 0; r < R; r++) l += bn[r] * lt[r];
                            y += scale * l;
                        }
                        if (bias) y += bias[n];
                        float *o = out + (size_t)(t0 + t) * N + n;
                        *o = beta == 0.0f ? y : y + beta * *o;
                    }
                }
        }
    }
}

void matmul_forward(float *out, const float *x, const float *W, const float *bias, int T,
                    int K, int N, float alpha, float beta) {
    if (T <= 0 || N <= 0) return;
    if (T <= matmul_small_t_max) {
        forward_small(out, NULL, x, W, bias, NULL, NULL, T, K, N, 0, alpha, 0.0f, beta);
        return;
    }
    sgemm_omp(0, 1, T, N, K, alpha, x, K, W, K, beta, out, N);
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) out[(size_t)t * N + n] += bias[n];
    }
}

void matmul_forward_lora(float *out, float *la, const float *x, const float *W, const float *bias,
                         const float *A, const float *B, int T, int K, int N, int R, float scale,
                         float beta) {
    if (T <= 0 || N <= 0) return;
    if (T > matmul_small_t_max) {
        matmul_forward(out, x, W, bias, T, K, N, 1.0f, beta);
        matmul_forward(la, x, A, NULL, T, K, R, 1.0f, 0.0f);
        matmul_forward(out, la, B, NULL, T, R, N, scale, 1.0f);
        return;
    }
    forward_small(out, la, x, W, bias, A, B, T, K, N, R, 1.0f, scale, beta);
}

void matmul_forward_lora_ref(float *out, float *la, const float *x, const float *W,
                             const float *bias, const float *A, const float *B, int T, int K,
                             int N, int R, float scale, float beta) {
    matmul_forward_ref(la, x, A, NULL, T, K, R, 1.0f, 0.0f);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0, l = 0;
            for (int k = 0; k < K; k++) s += (double)x[(size_t)t * K + k] * W[(size_t)n * K + k];
            for (int r = 0; r < R; r++) l += (double)la[(size_t)t * R + r] * B[(size_t)n * R + r];
            double y = s + scale * l + (bias ? bias[n] : 0.0);
            float *o = &out[(size_t)t * N + n];
            *o = (float)(beta == 0.0f ? y : y + (double)beta * *o);
        }
}

void matmul_forward_ref(float *out, const float *x, const float *W, const float *bias, int T,
                        int K, int N, float alpha, float beta) {
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)x[(size_t)t * K + k] * W[(size_t)n * K + k];
            double y = alpha * s + (bias ? bias[n] : 0.0);
            float *o = &out[(size_t)t * N + n];
            *o = (float)(beta == 0.0f ? y : y + (double)beta * *o);
        }
}

// Small-T dx = alpha * dout W + beta * dx: threads own column blocks of dx and
// walk all N rows of W, so W is streamed once and no two threads write a column.
static void matmul_dx_small(float *dx, const float *dout, const float *W, int T, int K, int N,
                            float alpha, float beta) {
    enum { KB = 128 };  // 512-byte slices of each W row: K = 512 still makes 4 blocks
    int nblk = (K + KB - 1) / KB;
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < nblk; b++) {
        int k0 = b * KB, k1 = k0 + KB < K ? k0 + KB : K;
        for (int t = 0; t < T; t++) {
            float *d = dx + (size_t)t * K;
            for (int k = k0; k < k1; k++) d[k] = beta == 0.0f ? 0.0f : beta * d[k];
        }
        for (int n = 0; n < N; n++) {
            const float *w = W + (size_t)n * K;
            for (int t = 0; t < T; t++) {
                float a = alpha * dout[(size_t)t * N + n];
                float *d = dx + (size_t)t * K;
#pragma omp simd
                for (int k = k0; k < k1; k++) d[k] += a * w[k];
            }
        }
    }
}

void matmul_backward(float *dx, float *dW, float *dbias, const float *dout, const float *x,
                     const float *W, int T, int K, int N, float alpha, float dx_beta) {
    if (T <= 0) return;
    if (dx) {
        if (T <= matmul_small_t_max)
            matmul_dx_small(dx, dout, W, T, K, N, alpha, dx_beta);
        else
            sgemm_omp(0, 0, T, K, N, alpha, dout, N, W, K, dx_beta, dx, K);
    }
    if (dW)
        sgemm_omp(1, 0, N, K, T, alpha, dout, N, x, K, 1.0f, dW, K);
    if (dbias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float s = 0;
            for (int t = 0; t < T; t++) s += dout[(size_t)t * N + n];
            dbias[n] += alpha * s;
        }
    }
}

void matmul_backward_ref(float *dx, float *dW, float *dbias, const float *dout,
                         const float *x, const float *W, int T, int K, int N, float alpha,
                         float dx_beta) {
    if (dx)
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) {
                double s = 0;
                for (int n = 0; n < N; n++) s += (double)dout[(size_t)t * N + n] * W[(size_t)n * K + k];
                float *d = &dx[(size_t)t * K + k];
                *d = (float)(alpha * s + (dx_beta == 0.0f ? 0.0 : (double)dx_beta * *d));
            }
    if (dW)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double s = 0;
                for (int t = 0; t < T; t++) s += (double)dout[(size_t)t * N + n] * x[(size_t)t * K + k];
                dW[(size_t)n * K + k] += (float)(alpha * s);
            }
    if (dbias)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += dout[(size_t)t * N + n];
            dbias[n] += (float)(alpha * s);
        }
}
