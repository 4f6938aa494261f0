// pail's own fp32 GEMM on AVX-512 (gemm_f32.h) for the fp32 weights' forward
// products of more than matmul_small_t_max rows, C(M,N) = A(M,K) W^T, the
// shape of kernels/gemm_bf16.c's forward with fp32 FMAs: A transposed 16 rows
// at a time (each k a 64-byte row of 16 m), once per call and shared by the
// team; each FMA takes 16 rows' A[m][k] against W[n][k] broadcast from W's
// row as stored. A 32 x 12 block of C is 24 registers, transposed into C when
// stored. fp32 arithmetic throughout: only the order of the sums differs from
// OpenBLAS's. dx and dW stay on OpenBLAS: a dx kernel of this shape (dout in
// 12-row blocks against W's rows) measured 0.97-1.02x OpenBLAS on SmolLM2's
// layers and 0.66-0.74x on its 49152-row head's dx (doc/kernels.md).
#include "gemm_f32.h"
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "dtype_cpu.h"
#include "gemm_bf16.h"

int gemm_f32_rows_max = 256;

// ---- the path ----
static pthread_once_t path_once = PTHREAD_ONCE_INIT;
static int pail_usable_v;
static GemmF32 chosen_v;
static const char *const words[GEMM_F32_COUNT] = {"openblas", "pail"};

const char *gemm_f32_word(GemmF32 g) { return (unsigned)g < GEMM_F32_COUNT ? words[g] : "?"; }

static void path_init(void) {
    pail_usable_v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl");
    chosen_v = pail_usable_v ? GEMM_F32_DEFAULT : GEMM_F32_OPENBLAS;
    const char *env = getenv("PAIL_KERNELS_SGEMM");
    if (!env || !*env) return;
    int g = 0;
    while (g < GEMM_F32_COUNT && strcmp(env, words[g])) g++;
    if (g == GEMM_F32_COUNT)
        log_warn("PAIL_KERNELS_SGEMM=%s is not openblas or pail: ignored (the fp32 GEMMs use %s)", env,
                 words[chosen_v]);
    else if (g == GEMM_F32_PAIL && !pail_usable_v)
        log_warn("PAIL_KERNELS_SGEMM=pail: this CPU has no AVX-512 (the fp32 GEMMs use openblas)");
    else
        chosen_v = (GemmF32)g;
}

int gemm_f32_usable(GemmF32 g) {
    pthread_once(&path_once, path_init);
    return g == GEMM_F32_OPENBLAS || (g == GEMM_F32_PAIL && pail_usable_v);
}

GemmF32 gemm_f32_path(void) {
    pthread_once(&path_once, path_init);
    return dtype_isa_id() == DT_ISA_AVX512 ? chosen_v : GEMM_F32_OPENBLAS;
}

int gemm_f32_force(GemmF32 g) {
    if (!gemm_f32_usable(g)) return -1;
    chosen_v = g;
    return 0;
}

// ---- the kernel ----
enum {
    KC = 512,               // reduction block (elements; a multiple of 16)
    SHARED_MAX = 32 << 20,  // bytes of the shared A, at most
    MB = 128,               // rows of A per forward block (their columns stay in L2)
    FNR = 12,               // forward: W rows per register block (x 32 rows of A)
};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
#include "bf16_simd.h"

// Forward register block: C[m..m+31][n..n+nr) over the block's kn reduction
// elements: a0, a1 the two 16-row tiles (element k at + 16 k), w W's row n
// at the block's first element. acc[2j + v]: C's column n + j for rows m + 16
// v + 0..15.
static inline __attribute__((always_inline)) void fwd_kernel(__m512 *acc, int nr, const float *a0,
                                                             const float *a1, const float *w, int ldw, int kn) {
    __m512 c[2 * FNR];  // in registers (acc is memory: written once at the end)
#pragma GCC unroll 24
    for (int j = 0; j < 2 * nr; j++) c[j] = _mm512_setzero_ps();
    for (int k = 0; k < kn; k++) {
        __m512 x0 = _mm512_load_ps(a0 + (size_t)k * 16), x1 = _mm512_load_ps(a1 + (size_t)k * 16);
#pragma GCC unroll 12
        for (int j = 0; j < nr; j++) {
            __m512 b = _mm512_set1_ps(w[(size_t)j * ldw + k]);
            c[2 * j] = _mm512_fmadd_ps(x0, b, c[2 * j]);
            c[2 * j + 1] = _mm512_fmadd_ps(x1, b, c[2 * j + 1]);
        }
    }
#pragma GCC unroll 24
    for (int j = 0; j < 2 * nr; j++) acc[j] = c[j];
}

// Forward, one thread: C's columns (W's rows) [na, nb), rows [ma, mb) (a
// multiple of 32; mb may pass M), reduction block [k0, k0 + kn); at: A's
// 16-row tiles, kc elements each.
static void fwd_block(float *C, int ldc, const float *W, int ldw, const float *at, int kc, int ma, int mb, int M,
                      int na, int nb, int k0, int kn, float alpha, float beta) {
    size_t tile_stride = (size_t)kc * 16;
    __m512 acc[2 * FNR];
    for (int mc = ma; mc < mb; mc += MB)
        for (int n = na; n < nb; n += FNR) {
            int nr = nb - n < FNR ? nb - n : FNR;
            const float *w = W + (size_t)n * ldw + k0;
            for (int m = mc; m < mb && m < mc + MB; m += 32) {
                const float *a0 = at + (size_t)(m / 16) * tile_stride, *a1 = a0 + tile_stride;
                if (nr == FNR) {
                    fwd_kernel(acc, FNR, a0, a1, w, ldw, kn);
                    fwd_store(C, ldc, acc, FNR, m, M, n, alpha, beta);
                    continue;
                }
                for (int j = 0; j < nr;) {  // a tail of rows: 4 at a time, then one
                    int r = nr - j >= 4 ? 4 : 1;
                    if (r == 4)
                        fwd_kernel(acc, 4, a0, a1, w + (size_t)j * ldw, ldw, kn);
                    else
                        fwd_kernel(acc, 1, a0, a1, w + (size_t)j * ldw, ldw, kn);
                    fwd_store(C, ldc, acc, r, m, M, n + j, alpha, beta);
                    j += r;
                }
            }
        }
}

// Rows m0..m0+15 of A, elements [k0, k0 + 16) transposed into t (16 x 16,
// element k at t + 16 (k - k0)); zeros past M and past K.
static void pack_t16(float *t, const float *A, int lda, int M, int K, int m0, int k0) {
    __m512i r[16];
    int n = K - k0;
    __mmask16 km = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    for (int i = 0; i < 16; i++)
        r[i] = m0 + i < M ? _mm512_castps_si512(_mm512_maskz_loadu_ps(km, A + (size_t)(m0 + i) * lda + k0))
                          : _mm512_setzero_si512();
    transpose16(r);
    for (int i = 0; i < 16; i++) _mm512_store_si512((__m512i *)(t + i * 16), r[i]);
}

int f32_gemm_team(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc) {
    int nth = omp_get_num_threads(), id = omp_get_thread_num();
    int Mp = (M + 31) / 32 * 32, Kp = (K + 15) / 16 * 16;
    int kc = Kp < KC ? Kp : KC;
    while (kc > 16 && (size_t)Mp * kc * 4 > SHARED_MAX) kc = kc / 2 / 16 * 16;
    void *sh = NULL;
#pragma omp single copyprivate(sh)
    sh = gemm_scratch((size_t)Mp * kc * 4);
    if (!sh) return -1;
    float *s = sh;
    // the split: C's columns (W's rows) in 32s, or its rows when there are fewer 32s than threads
    int ca, cb, ma, mb;
    gemm_split(N, Mp, nth, id, &ca, &cb, &ma, &mb);
    int work = ca < cb && ma < mb;
    for (int k0 = 0; k0 < K; k0 += kc) {
        int kn = K - k0 < kc ? K - k0 : kc, nkb = (kn + 15) / 16;
        if (k0 > 0) {
#pragma omp barrier
        }
#pragma omp for schedule(static)
        for (int mt = 0; mt < Mp / 16; mt++)
            for (int kb = 0; kb < nkb; kb++)
                pack_t16(s + (size_t)mt * kc * 16 + (size_t)kb * 256, A + k0, lda, M, kn, mt * 16, kb * 16);
        // (the loop's implicit barrier: the shared A is whole)
        if (work) fwd_block(C, ldc, B, ldb, s, kc, ma, mb, M, ca, cb, k0, kn, alpha, k0 == 0 ? beta : 1.0f);
    }
    return 0;
}

#pragma GCC pop_options
