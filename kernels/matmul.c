// matmul: out(T,N) = alpha * x(T,K) W(N,K)^T + beta * out + bias, and its backward.
// CPU twin of kernels/matmul.cu. Large T goes to OpenBLAS sgemm; for T <=
// matmul_small_t_max a hand-written OpenMP kernel (AVX-512 where compiled for it,
// else AVX2/FMA) streams W once, in memory order, because OpenBLAS streams
// weights at only a fraction of memory bandwidth for products with a few rows
// (bench/bench_kernels.c measures the crossover).
// OpenBLAS runs single-threaded inside an OpenMP team, one column slice per
// thread: its own pthread pool would spin against OpenMP's for the same cores.
// The _dt variants take W as bf16 or f16 (kernels/dtype.h) and compute in fp32:
// the mat-vec converts each row in registers, the GEMMs convert W a panel at a
// time into per-thread scratch and run the same sgemm on it (doc/kernels.md).
// A GGUF block-quantized W (DT_Q8_0 ..): the mat-vec's dot products and the
// x block sums they need are kernels/matmul_quant.c's; the GEMMs dequantize it
// a panel at a time like the others, cut at its blocks.
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "blas.h"
#include "dtype_cpu.h"
#include "kernels.h"
#include "gemm_bf16.h"
#include "gemm_f32.h"
#include "matmul_amx.h"
#include "matmul_quant.h"
#include "parallel.h"

// Crossover measured by bench/bench_kernels.c (doc/kernels.md has the figures):
// at T=8 the mat-vec still beats sgemm on a 512x1408 and a 32000x512 weight.
int matmul_small_t_max = 8;

// ---- the mat-vec's dot products (matmul_dot.h), one variant per ISA and dtype ----
// fp32 weights: the build's vector width (AVX-512 where compiled for it, else
// AVX2/FMA, else scalar). bf16 / f16 weights: every run-time ISA (dtype_cpu.h),
// each compiled for its own target and picked per call; a row is loaded as 16-bit
// values and converted in registers (bf16: zero-extend and shift left 16; f16:
// vcvtph2ps), so a decode step reads half the bytes of the fp32 path.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#pragma GCC pop_options

#if defined(__AVX512F__)
#define VW 16
#define VF __m512
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUM(v) _mm512_reduce_add_ps(v)
#define F32_WIDTH "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
#define VF __m256
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUM(v) hsum8(v)
#define F32_WIDTH "avx2"
#else
#define F32_WIDTH "scalar"
#endif
#define DOT_NAME(n) n##_f32
#define DOT_W_T float
#define DOT_LOADW(p) VLOAD(p)
#define DOT_W1(p) (*(p))
#include "matmul_dot.h"
#undef VW
#undef VF
#undef VZERO
#undef VLOAD
#undef VFMA
#undef VADD
#undef VSUM

typedef void (*DotFn)(float *r, const void *w, const float *x, int K, int NT);

// Scalar: the same loops, one element at a time (the compiler may vectorise them).
#define DOT_NAME(n) n##_bf16_scalar
#define DOT_W_T dt_u16_unaligned
#define DOT_W1(p) dt_bf16_to_f32(*(p))
#include "matmul_dot.h"
#define DOT_NAME(n) n##_f16_scalar
#define DOT_W_T dt_u16_unaligned
#define DOT_W1(p) dt_f16_to_f32(*(p))
#include "matmul_dot.h"
static void dot_bf16_scalar(float *r, const void *w, const float *x, int K, int NT) {
    dot_dispatch_bf16_scalar(r, w, x, K, NT);
}
static void dot_f16_scalar(float *r, const void *w, const float *x, int K, int NT) {
    dot_dispatch_f16_scalar(r, w, x, K, NT);
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define VW 8
#define VF __m256
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUM(v) hsum8(v)
#define DOT_NAME(n) n##_bf16_avx2
#define DOT_W_T dt_u16_unaligned
#define DOT_LOADW(p) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define DOT_W1(p) dt_bf16_to_f32(*(p))
#include "matmul_dot.h"
#define DOT_NAME(n) n##_f16_avx2
#define DOT_W_T dt_u16_unaligned
#define DOT_LOADW(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define DOT_W1(p) dt_f16_to_f32(*(p))
#include "matmul_dot.h"
static void dot_bf16_avx2(float *r, const void *w, const float *x, int K, int NT) {
    dot_dispatch_bf16_avx2(r, w, x, K, NT);
}
static void dot_f16_avx2(float *r, const void *w, const float *x, int K, int NT) {
    dot_dispatch_f16_avx2(r, w, x, K, NT);
}
#undef VW
#undef VF
#undef VZERO
#undef VLOAD
#undef VFMA
#undef VADD
#undef VSUM
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#define VW 16
#define VF __m512
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUM(v) _mm512_reduce_add_ps(v)
// 16-bit rows on AVX-512: each iteration also prefetches the two lines 1 KiB
// ahead (a 16-bit row is consumed at twice the fp32 rate in bytes per FMA;
// without it one thread read 12.2 GB/s where the fp32 row reads 13.7, with it
// 13.8-14.4 at a 15.7 GB/s triad: doc/performance.md). Prefetches never fault.
#define DOT_PF 1024
#define DOT_NAME(n) n##_bf16_avx512
#define DOT_W_T dt_u16_unaligned
#define DOT_LOADW(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define DOT_W1(p) dt_bf16_to_f32(*(p))
#include "matmul_dot.h"
#define DOT_NAME(n) n##_f16_avx512
#define DOT_W_T dt_u16_unaligned
#define DOT_LOADW(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define DOT_W1(p) dt_f16_to_f32(*(p))
#include "matmul_dot.h"
#undef DOT_PF
static void dot_bf16_avx512(float *r, const void *w, const float *x, int K, int NT) {
    dot_dispatch_bf16_avx512(r, w, x, K, NT);
}
static void dot_f16_avx512(float *r, const void *w, const float *x, int K, int NT) {
    dot_dispatch_f16_avx512(r, w, x, K, NT);
}
#undef VW
#undef VF
#undef VZERO
#undef VLOAD
#undef VFMA
#undef VADD
#undef VSUM
#pragma GCC pop_options

// bf16 rows on AVX-512, the decode's mat-vec: 32 weights a 64-byte load, split
// into the even elements (vpslld 16) and the odd ones (vpandd 0xffff0000) and
// multiplied by x's even and odd elements, which the caller lays out once per
// call (xeo: each 32 of x as its 16 even elements, then its 16 odd ones; the
// tail past the last 32 as x). Exact products as every path's, in another
// order of the sums: three instructions per 32 weights where zero-extending
// 16 at a time takes six (measured: batch-1 decode of SmolLM2-135M in bf16
// read 22.9 GB/s of weights that way, the fp32 rows 26.6: doc/performance.md).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
static void dot_bf16_eo(float *r, const uint16_t *w, const float *xeo, int K, int NT) {
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    __m512 acc[4][2];
    for (int t = 0; t < 4; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        _mm_prefetch((const char *)(w + k) + 1024, _MM_HINT_T0);
        __m512i wv = _mm512_loadu_si512((const void *)(w + k));
        __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
        __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(wv, hi_mask));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const float *xt = xeo + (size_t)t * K + k;
            acc[t][0] = _mm512_fmadd_ps(we, _mm512_loadu_ps(xt), acc[t][0]);
            acc[t][1] = _mm512_fmadd_ps(wo, _mm512_loadu_ps(xt + 16), acc[t][1]);
        }
    }
    for (int t = 0; t < NT; t++) {
        float s = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
        for (int j = k; j < K; j++) s += dt_bf16_to_f32(w[j]) * xeo[(size_t)t * K + j];
        r[t] = s;
    }
}

// Rows [0, T) of x (K apart) into xeo as dot_bf16_eo reads them.
static void x_even_odd(float *xeo, const float *x, int T, int K) {
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int t = 0; t < T; t++) {
        const float *a = x + (size_t)t * K;
        float *d = xeo + (size_t)t * K;
        int k = 0;
        for (; k + 32 <= K; k += 32) {
            __m512 lo = _mm512_loadu_ps(a + k), hi = _mm512_loadu_ps(a + k + 16);
            _mm512_storeu_ps(d + k, _mm512_permutex2var_ps(lo, ie, hi));
            _mm512_storeu_ps(d + k + 16, _mm512_permutex2var_ps(lo, io, hi));
        }
        for (; k < K; k++) d[k] = a[k];
    }
}
#pragma GCC pop_options

static const DotFn dot_fns[DT_ISA_COUNT][DT_FLOAT_COUNT] = {
    [DT_ISA_SCALAR] = {NULL, dot_bf16_scalar, dot_f16_scalar},
    [DT_ISA_AVX2] = {NULL, dot_bf16_avx2, dot_f16_avx2},
    [DT_ISA_AVX512] = {NULL, dot_bf16_avx512, dot_f16_avx512},
};

// ---- the GEMMs over a converted weight ----
// A panel is up to matmul_dt_panel_rows columns of op(B) (rows of W in the
// forward, columns of W for dx) by as much of the reduction as fits in
// matmul_dt_panel_floats. The width is what matters: OpenBLAS packs the other
// operand (x, or dout) once per call, T x (the panel's reduction), for 2 T x
// reduction x width flops, so narrow panels pay that packing over and over
// (208-row panels of the 896 x 4864 down projection ran 10% behind sgemm). The
// reduction may be cut: OpenBLAS accumulates into C per K block anyway.
// bench/bench_kernels.c (`panels`) measured both (doc/kernels.md).
size_t matmul_dt_panel_floats = (size_t)1 << 20;
int matmul_dt_panel_rows = 1024;

// The calling thread's scratch for panels: matmul_dt_panel_floats, allocated at
// the thread's first _dt GEMM (OpenMP keeps its threads, so once per thread),
// grown only if a larger panel is asked for (a bench raising the budget). NULL
// when the allocation fails: the caller then converts through a small panel on
// its stack instead.
static _Thread_local float *panel_buf;
static _Thread_local size_t panel_cap;

static float *panel_get(size_t floats) {
    if (floats <= panel_cap) return panel_buf;
    if (floats < matmul_dt_panel_floats) floats = matmul_dt_panel_floats;
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, floats * sizeof(float))) return NULL;
    free(panel_buf);
    panel_buf = p, panel_cap = floats;
    return p;
}

enum { PANEL_STACK = 4096 };

// Panel shape for C[:, n0..n1) from `budget` floats: nb columns of op(B) (up to
// matmul_dt_panel_rows, a multiple of 16) by kb of the reduction (all of K when
// it fits). A quantized B is cut only at its blocks: kb a multiple of kal (B
// transposed: the reduction runs along B's rows), nb of nal (else).
static void panel_shape(int K, int width, size_t budget, int kal, int nal, int *nb, int *kb) {
    if (budget < PANEL_STACK) budget = PANEL_STACK;
    int cap = matmul_dt_panel_rows < 16 ? 16 : matmul_dt_panel_rows / 16 * 16;
    if ((size_t)cap > budget / 16) cap = (int)(budget / 16) / 16 * 16;
    if ((size_t)cap > budget / (size_t)kal) cap = (int)(budget / (size_t)kal);
    cap = cap < nal ? nal : cap / nal * nal;
    *nb = width < cap ? width : cap;
    size_t k = budget / (size_t)*nb / (size_t)kal * (size_t)kal;
    *kb = k > (size_t)K ? K : (int)k;
}

// C[:, n0..n1) (M rows) = alpha op(A) op(B)[:, n0..n1) + beta C with B stored as
// bdt (ldb in elements): each panel of op(B) is converted exactly into this
// thread's scratch and multiplied by cblas_sgemm, the reduction's later panels
// accumulating onto the first (beta 1).
static void sgemm_panels(int transA, int transB, int M, int n0, int n1, int K, float alpha,
                         const float *A, int lda, const void *B, DType bdt, int ldb, float beta,
                         float *C, int ldc, DtCvtFn cvt) {
    if (n0 >= n1) return;
    float stack_panel[PANEL_STACK];
    int nb, kb, blk = dtype_block(bdt), kal = transB ? blk : 1, nal = transB ? 1 : blk;
    panel_shape(K, n1 - n0, matmul_dt_panel_floats, kal, nal, &nb, &kb);
    float *buf = panel_get((size_t)nb * kb);
    if (!buf) {
        panel_shape(K, n1 - n0, PANEL_STACK, kal, nal, &nb, &kb);
        buf = stack_panel;
    }
    const char *b = B;  // element e of B at byte dtype_row_bytes(bdt, e) (e at a block's start)
    for (int n = n0; n < n1; n += nb) {
        int nn = n1 - n < nb ? n1 - n : nb;
        for (int k = 0; k < K; k += kb) {
            int nk = K - k < kb ? K - k : kb;
            if (transB)  // op(B)[k][n] = B[n][k]: nn rows of nk
                for (int i = 0; i < nn; i++)
                    cvt(buf + (size_t)i * nk, b + dtype_row_bytes(bdt, (size_t)(n + i) * ldb + k), nk);
            else  // B[k][n]: nk rows of nn
                for (int i = 0; i < nk; i++)
                    cvt(buf + (size_t)i * nn, b + dtype_row_bytes(bdt, (size_t)(k + i) * ldb + n), nn);
            cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                        transB ? CblasTrans : CblasNoTrans, M, nn, nk, alpha,
                        transA ? A + (size_t)k * lda : A + k, lda, buf, transB ? nk : nn,
                        k == 0 ? beta : 1.0f, C + n, ldc);
        }
    }
}

// C(M, N) = alpha op(A) op(B) + beta C, row-major, with the N columns of C split
// across the OpenMP team in slices of 16: slice [n0, n1) reads B's rows n0..n1-1
// when B is transposed (B is (N, K)), else B's columns n0..n1-1 (B is (K, N)).
// A C too narrow for that (N < 32 per thread) is split by rows. B is stored as
// bdt: not fp32, each thread converts its slice a panel at a time (sgemm_panels).
// The body runs on a team (kernels/parallel.h): every thread its slice (KERNEL_TEAM adds the barrier).
static void sgemm_team(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                       const void *Bv, DType bdt, int ldb, float beta, float *C, int ldc) {
    const float *B = Bv;
    // bf16 W on a CPU with AMX or AVX-512 BF16 (gemm_bf16.h): the weight as
    // stored against A rounded to bf16, unless the kernel's scratch could not
    // be had (then every thread falls through to the exact path).
    if (bdt == DT_BF16 && !transA) {
        GemmBf16 g = gemm_bf16_path();
        if (g == GEMM_BF16_AMX && amx_gemm_team(transB, M, N, K, alpha, A, lda, Bv, ldb, beta, C, ldc) == 0)
            return;
        if (g == GEMM_BF16_AVX512 &&
            bf16dp_gemm_team(transB, M, N, K, alpha, A, lda, Bv, ldb, beta, C, ldc) == 0)
            return;
    }
    // fp32 W, the forward of up to gemm_f32_rows_max rows: pail's AVX-512 GEMM
    // where it is the path (gemm_f32.h)
    if (bdt == DT_F32 && !transA && transB && M <= gemm_f32_rows_max && gemm_f32_path() == GEMM_F32_PAIL &&
        f32_gemm_team(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
    DtCvtFn cvt = dtype_to_f32_fn(bdt, dtype_isa_id());
    {
        int nth = omp_get_num_threads(), id = omp_get_thread_num();
        if (N < 32 * nth && M >= 64 * nth) {
            // narrow C (a LoRA rank's 16 columns): slices of rows instead, or one
            // thread would do it all. op(A) rows m0..m1-1 are A's rows, or its
            // columns when A is transposed.
            int mper = ((M + nth - 1) / nth + 7) / 8 * 8;
            int m0 = id * mper, m1 = m0 + mper < M ? m0 + mper : M;
            const float *Am = transA ? A + m0 : A + (size_t)m0 * lda;
            if (m0 < m1 && !cvt)
                cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                            transB ? CblasTrans : CblasNoTrans, m1 - m0, N, K, alpha,
                            Am, lda, B, ldb, beta, C + (size_t)m0 * ldc, ldc);
            else if (m0 < m1)
                sgemm_panels(transA, transB, m1 - m0, 0, N, K, alpha, Am, lda, Bv, bdt, ldb, beta,
                             C + (size_t)m0 * ldc, ldc, cvt);
        } else {
        // B's columns (not transposed) in whole blocks of a quantized B
        int al = !transB && dtype_block(bdt) > 16 ? dtype_block(bdt) : 16;
        int per = ((N + nth - 1) / nth + al - 1) / al * al;
        int n0 = id * per, n1 = n0 + per < N ? n0 + per : N;
        if (n0 < n1 && !cvt)
            cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                        transB ? CblasTrans : CblasNoTrans, M, n1 - n0, K, alpha, A, lda,
                        transB ? B + (size_t)n0 * ldb : B + n0, ldb, beta, C + n0, ldc);
        else if (n0 < n1)
            sgemm_panels(transA, transB, M, n0, n1, K, alpha, A, lda, Bv, bdt, ldb, beta, C, ldc,
                         cvt);
        }
    }
}

static void sgemm_omp(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                      int lda, const void *Bv, DType bdt, int ldb, float beta, float *C, int ldc) {
    blas_single_threaded();
    KERNEL_TEAM(sgemm_team(transA, transB, M, N, K, alpha, A, lda, Bv, bdt, ldb, beta, C, ldc));
}

// Small-T forward: out = alpha x W^T + beta out + bias, plus, when A is given,
// scale (x A^T) B^T with la = x A^T written (a LoRA-adapted projection). One
// OpenMP region: la first, then threads own blocks of W rows (16, fewer when W
// is short, as a LoRA A of 16 rows, so that every thread gets some), each row
// read once from memory with its B row's term added before the store; for T > 4
// the row is read again from L1 per group of 4 x rows, which stay in cache.
// W is stored as wdt (A and B are fp32): the dot products of dot_fns.
static void forward_small_team(float *out, float *la, const float *x, const void *W, DType wdt,
                               const float *bias, const float *A, const float *B, int T, int K, int N,
                               int R, float alpha, float scale, float beta) {
    int nth = omp_get_num_threads(), rows = N >= 64 * nth ? 16 : (N + 4 * nth - 1) / (4 * nth);
    if (rows < 1) rows = 1;
    int nblk = (N + rows - 1) / rows;
    // quantized rows: kernels/matmul_quant.c, with x's block sums where it needs them
    QDotFn qdot = dtype_is_quant(wdt) ? matmul_quant_dot_fn(wdt, dtype_isa_id()) : NULL;
    const float *xs = qdot ? matmul_quant_xsums(wdt, x, T, K) : NULL;
    DotFn dot = wdt == DT_F32 || qdot ? NULL : dot_fns[dtype_isa_id()][wdt];
    size_t row_bytes = dtype_row_bytes(wdt, (size_t)K);
    // bf16 rows on AVX-512: x's even and odd elements apart, once (dot_bf16_eo)
    const float *xeo = NULL;
    if (wdt == DT_BF16 && dtype_isa_id() == DT_ISA_AVX512 && K >= 32) {
        float *buf = NULL;
#pragma omp single copyprivate(buf)
        {
            buf = panel_get((size_t)T * K);
            if (buf) x_even_odd(buf, x, T, K);
        }
        xeo = buf;  // NULL (no scratch): the zero-extending dot products
    }
    {
        if (A) {
#pragma omp for schedule(static)
            for (int r = 0; r < R; r++)
                for (int t0 = 0; t0 < T; t0 += 4) {
                    int nt = T - t0 < 4 ? T - t0 : 4;
                    float d[4];
                    dot_dispatch_f32(d, A + (size_t)r * K, x + (size_t)t0 * K, K, nt);
                    for (int t = 0; t < nt; t++) la[(size_t)(t0 + t) * R + r] = d[t];
                }
        }  // (implicit barrier: la is whole)
// guided: each thread's first share is one long contiguous run of rows (one
// stream the prefetchers follow: with 16-row blocks handed out alternately,
// two threads read 16-bit rows at 18 GB/s of a 31 GB/s triad, guided 26), the
// shrinking tail still balances a thread that was held up (doc/kernels.md).
// The same bits whatever the schedule.
#pragma omp for schedule(guided) nowait
        for (int b = 0; b < nblk; b++) {
            int n1 = (b + 1) * rows < N ? (b + 1) * rows : N;
            for (int n = b * rows; n < n1; n++)
                for (int t0 = 0; t0 < T; t0 += 4) {
                    int nt = T - t0 < 4 ? T - t0 : 4;
                    float d[4];
                    const void *wn = (const char *)W + (size_t)n * row_bytes;
                    if (xeo)
                        dot_bf16_eo(d, wn, xeo + (size_t)t0 * K, K, nt);
                    else if (qdot)
                        qdot(d, wn, x + (size_t)t0 * K, xs ? xs + (size_t)t0 * (K / 32) : NULL, K, nt);
                    else if (dot)
                        dot(d, wn, x + (size_t)t0 * K, K, nt);
                    else
                        dot_dispatch_f32(d, wn, x + (size_t)t0 * K, K, nt);
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

static void forward_small(float *out, float *la, const float *x, const void *W, DType wdt,
                          const float *bias, const float *A, const float *B, int T, int K, int N,
                          int R, float alpha, float scale, float beta) {
    KERNEL_TEAM(forward_small_team(out, la, x, W, wdt, bias, A, B, T, K, N, R, alpha, scale, beta));
}

// out(T,N) += bias on a team.
static void add_bias_team(float *out, const float *bias, int T, int N) {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) out[(size_t)t * N + n] += bias[n];
}

void matmul_forward_dt(float *out, const float *x, const void *W, DType wdt, const float *bias,
                       int T, int K, int N, float alpha, float beta) {
    if (T <= 0 || N <= 0) return;
    if (K <= 0) wdt = DT_F32;  // an empty W: nothing to convert
    if (T <= matmul_small_t_max) {
        forward_small(out, NULL, x, W, wdt, bias, NULL, NULL, T, K, N, 0, alpha, 0.0f, beta);
        return;
    }
    sgemm_omp(0, 1, T, N, K, alpha, x, K, W, wdt, K, beta, out, N);
    if (bias) KERNEL_TEAM(add_bias_team(out, bias, T, N));
}

void matmul_forward(float *out, const float *x, const float *W, const float *bias, int T,
                    int K, int N, float alpha, float beta) {
    matmul_forward_dt(out, x, W, DT_F32, bias, T, K, N, alpha, beta);
}

void matmul_forward_lora_dt(float *out, float *la, const float *x, const void *W, DType wdt,
                            const float *bias, const float *A, const float *B, int T, int K,
                            int N, int R, float scale, float beta) {
    if (T <= 0 || N <= 0) return;
    if (K <= 0) wdt = DT_F32;
    if (T > matmul_small_t_max) {
        matmul_forward_dt(out, x, W, wdt, bias, T, K, N, 1.0f, beta);
        matmul_forward(la, x, A, NULL, T, K, R, 1.0f, 0.0f);
        matmul_forward(out, la, B, NULL, T, R, N, scale, 1.0f);
        return;
    }
    forward_small(out, la, x, W, wdt, bias, A, B, T, K, N, R, 1.0f, scale, beta);
}

void matmul_forward_lora(float *out, float *la, const float *x, const float *W, const float *bias,
                         const float *A, const float *B, int T, int K, int N, int R, float scale,
                         float beta) {
    matmul_forward_lora_dt(out, la, x, W, DT_F32, bias, A, B, T, K, N, R, scale, beta);
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
// W stored as wdt: each row's slice is converted into a 512-byte buffer (L1)
// first, then read once per dout row (the same products as fp32 on the
// converted W, bit for bit).
static void matmul_dx_small_team(float *dx, const float *dout, const void *W, DType wdt, int T, int K,
                                 int N, float alpha, float beta) {
    enum { KBMAX = 256 };
    // 512-byte slices of each W row (K = 512 still makes 4 blocks), a K-quant's 256-element blocks whole
    int KB = dtype_block(wdt) > 128 ? 256 : 128;
    int nblk = (K + KB - 1) / KB;
    DtCvtFn cvt = dtype_to_f32_fn(wdt, dtype_isa_id());
#pragma omp for schedule(dynamic, 1) nowait
    for (int b = 0; b < nblk; b++) {
        int k0 = b * KB, k1 = k0 + KB < K ? k0 + KB : K;
        float wb[KBMAX];
        for (int t = 0; t < T; t++) {
            float *d = dx + (size_t)t * K;
            for (int k = k0; k < k1; k++) d[k] = beta == 0.0f ? 0.0f : beta * d[k];
        }
        for (int n = 0; n < N; n++) {
            const float *w = (const float *)W + (size_t)n * K;
            int off = 0;  // w[k - off] is W[n][k]
            if (cvt) {
                cvt(wb, (const char *)W + dtype_row_bytes(wdt, (size_t)n * K + k0), k1 - k0);
                w = wb, off = k0;
            }
            for (int t = 0; t < T; t++) {
                float a = alpha * dout[(size_t)t * N + n];
                float *d = dx + (size_t)t * K;
#pragma omp simd
                for (int k = k0; k < k1; k++) d[k] += a * w[k - off];
            }
        }
    }
}

static void matmul_dx_small(float *dx, const float *dout, const void *W, DType wdt, int T, int K, int N,
                            float alpha, float beta) {
    KERNEL_TEAM(matmul_dx_small_team(dx, dout, W, wdt, T, K, N, alpha, beta));
}

// dbias(N) += alpha * sum_t dout[t] on a team.
static void dbias_team(float *dbias, const float *dout, int T, int N, float alpha) {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++) {
        float s = 0;
        for (int t = 0; t < T; t++) s += dout[(size_t)t * N + n];
        dbias[n] += alpha * s;
    }
}

void matmul_backward_dt(float *dx, float *dW, float *dbias, const float *dout, const float *x,
                        const void *W, DType wdt, int T, int K, int N, float alpha,
                        float dx_beta) {
    if (T <= 0) return;
    if (K <= 0 || N <= 0) wdt = DT_F32;  // an empty W: nothing to convert
    if (dx) {
        if (T <= matmul_small_t_max)
            matmul_dx_small(dx, dout, W, wdt, T, K, N, alpha, dx_beta);
        else
            sgemm_omp(0, 0, T, K, N, alpha, dout, N, W, wdt, K, dx_beta, dx, K);
    }
    if (dW)  // an fp32 gradient from dout and x: W is not read
        sgemm_omp(1, 0, N, K, T, alpha, dout, N, x, DT_F32, K, 1.0f, dW, K);
    if (dbias) KERNEL_TEAM(dbias_team(dbias, dout, T, N, alpha));
}

void matmul_backward(float *dx, float *dW, float *dbias, const float *dout, const float *x,
                     const float *W, int T, int K, int N, float alpha, float dx_beta) {
    matmul_backward_dt(dx, dW, dbias, dout, x, W, DT_F32, T, K, N, alpha, dx_beta);
}

// Names of the paths, for benches and logs: [small T][wdt][ISA].
static const char *const path_names[2][DT_FLOAT_COUNT][DT_ISA_COUNT] = {
    {{"sgemm (fp32 weights)", "sgemm (fp32 weights)", "sgemm (fp32 weights)"},
     {"sgemm over f32 panels converted from bf16 (scalar)",
      "sgemm over f32 panels converted from bf16 (avx2)",
      "sgemm over f32 panels converted from bf16 (avx512)"},
     {"sgemm over f32 panels converted from f16 (scalar)",
      "sgemm over f32 panels converted from f16 (avx2)",
      "sgemm over f32 panels converted from f16 (avx512)"}},
    {{"mat-vec, fp32 rows (" F32_WIDTH ", build time)", "mat-vec, fp32 rows (" F32_WIDTH ", build time)",
      "mat-vec, fp32 rows (" F32_WIDTH ", build time)"},
     {"mat-vec, bf16 rows converted in registers (scalar)",
      "mat-vec, bf16 rows converted in registers (avx2)",
      "mat-vec, bf16 rows converted in registers (avx512)"},
     {"mat-vec, f16 rows converted in registers (scalar)",
      "mat-vec, f16 rows converted in registers (avx2)",
      "mat-vec, f16 rows converted in registers (avx512)"}},
};

const char *matmul_path_name(int T, DType wdt) {
    if ((unsigned)wdt >= DT_COUNT) return "?";
    if (dtype_is_quant(wdt)) return matmul_quant_path_name(T <= matmul_small_t_max, wdt, dtype_isa_id());
    if (wdt == DT_BF16 && T > matmul_small_t_max && gemm_bf16_path() == GEMM_BF16_AMX)
        return "AMX tiles on the bf16 weights as stored, activations rounded to bf16, fp32 accumulation";
    if (wdt == DT_BF16 && T > matmul_small_t_max && gemm_bf16_path() == GEMM_BF16_AVX512)
        return "AVX-512 BF16 (vdpbf16ps) on the bf16 weights as stored, activations rounded to bf16, fp32 "
               "accumulation";
    return path_names[T <= matmul_small_t_max][wdt][dtype_isa_id()];
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
