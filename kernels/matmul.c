// matmul: out(T,N) = alpha * x(T,K) W(N,K)^T + beta * out + bias, and its backward.
// CPU twin of kernels/matmul.cu. Large T goes to OpenBLAS sgemm; for T <=
// matmul_small_t_max a hand-written OpenMP + AVX2/FMA kernel streams W once,
// because OpenBLAS streams weights at only a fraction of memory bandwidth for
// products with a few rows (bench/bench_kernels.c measures the crossover).
// OpenBLAS runs single-threaded inside an OpenMP team, one column slice per
// thread: its own pthread pool would spin against OpenMP's for the same cores.
#include <cblas.h>
#include <omp.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include "kernels.h"

// Crossover measured by bench/bench_kernels.c (doc/kernels.md has the figures):
// at T=8 the mat-vec still beats sgemm on a 512x1408 and a 32000x512 weight.
int matmul_small_t_max = 8;

enum { PREFETCH_FLOATS = 128 };  // 512 bytes ahead of the W loads

#if defined(__AVX2__) && defined(__FMA__)
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

// r[i*NT + t] = dot(W row i, x row t) for R consecutive W rows (stride K) and NT
// consecutive x rows (stride K). R and NT are compile-time constants at every
// call, so the accumulators live in registers: R*NT + NT + 1 <= 13 ymm, within
// AVX2's 16. Each W vector loaded feeds NT FMAs; each x vector R of them.
static inline __attribute__((always_inline)) void dot_rows(float *r, const float *w,
                                                           const float *x, int K, int R,
                                                           int NT) {
    int k = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[i][t] = _mm256_setzero_ps();
    for (; k + 8 <= K; k += 8) {
        __m256 xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x + (size_t)t * K + k);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            // W comes from DRAM once: prefetch a few cache lines ahead of the loads
            _mm_prefetch((const char *)(w + (size_t)i * K + k + PREFETCH_FLOATS), _MM_HINT_T0);
            __m256 wv = _mm256_loadu_ps(w + (size_t)i * K + k);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) r[i * NT + t] = hsum8(acc[i][t]);
#else
    for (int i = 0; i < R * NT; i++) r[i] = 0;
#endif
    for (; k < K; k++)  // tail (K % 8), or the whole row without AVX2
        for (int i = 0; i < R; i++)
            for (int t = 0; t < NT; t++) r[i * NT + t] += w[(size_t)i * K + k] * x[(size_t)t * K + k];
}

// W rows per call for NT x rows: 4 while one x vector is reused (NT <= 2), else 2.
static const int ROWS_FOR_NT[5] = {0, 4, 4, 2, 2};

static void dot_dispatch(float *r, const float *w, const float *x, int K, int R, int NT) {
    switch (NT * 8 + R) {
    case 8 + 4: dot_rows(r, w, x, K, 4, 1); break;
    case 8 + 1: dot_rows(r, w, x, K, 1, 1); break;
    case 16 + 4: dot_rows(r, w, x, K, 4, 2); break;
    case 16 + 1: dot_rows(r, w, x, K, 1, 2); break;
    case 24 + 2: dot_rows(r, w, x, K, 2, 3); break;
    case 24 + 1: dot_rows(r, w, x, K, 1, 3); break;
    case 32 + 2: dot_rows(r, w, x, K, 2, 4); break;
    default: dot_rows(r, w, x, K, 1, 4); break;
    }
}

// C(M, N) = alpha op(A) op(B) + beta C, row-major, with the N columns of C split
// across the OpenMP team in slices of 16: slice [n0, n1) reads B's rows n0..n1-1
// when B is transposed (B is (N, K)), else B's columns n0..n1-1 (B is (K, N)).
// A C too narrow for that (N < 32 per thread) is split by rows.
static void sgemm_omp(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    // kernels/ owns OpenBLAS's threading: one thread per call, set again if
    // someone (a bench measuring OpenBLAS itself) changed it.
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
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

static inline void store_out(float *o, float val, float alpha, float beta, const float *bias,
                             int n) {
    float y = alpha * val + (bias ? bias[n] : 0.0f);
    *o = beta == 0.0f ? y : y + beta * *o;
}

// Small-T forward: threads own blocks of 4 W rows and read each block once; for
// T > 4 the block is revisited from L1/L2 per group of 4 x rows, which stay in
// cache throughout.
static void matmul_forward_small(float *out, const float *x, const float *W, const float *bias,
                                 int T, int K, int N, float alpha, float beta) {
    int nblk = (N + 3) / 4;
    // dynamic: a thread the OS preempts (shared cores) does not hold up the others
#pragma omp parallel for schedule(dynamic, 16)
    for (int b = 0; b < nblk; b++) {
        int n0 = 4 * b, n1 = n0 + 4 < N ? n0 + 4 : N;
        for (int t0 = 0; t0 < T; t0 += 4) {
            int nt = T - t0 < 4 ? T - t0 : 4, R = ROWS_FOR_NT[nt];
            for (int n = n0; n < n1;) {
                int rr = n1 - n >= R ? R : 1;
                float r[16];
                dot_dispatch(r, W + (size_t)n * K, x + (size_t)t0 * K, K, rr, nt);
                for (int i = 0; i < rr; i++)
                    for (int t = 0; t < nt; t++)
                        store_out(out + (size_t)(t0 + t) * N + n + i, r[i * nt + t], alpha, beta,
                                  bias, n + i);
                n += rr;
            }
        }
    }
}

void matmul_forward(float *out, const float *x, const float *W, const float *bias, int T,
                    int K, int N, float alpha, float beta) {
    if (T <= 0 || N <= 0) return;
    if (T <= matmul_small_t_max) {
        matmul_forward_small(out, x, W, bias, T, K, N, alpha, beta);
        return;
    }
    sgemm_omp(0, 1, T, N, K, alpha, x, K, W, K, beta, out, N);
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) out[(size_t)t * N + n] += bias[n];
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
