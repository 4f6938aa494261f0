// The bf16 GEMMs' path (gemm_bf16.h) and the AVX-512 BF16 kernel: vdpbf16ps
// on the bf16 weight as stored (never converted to fp32, never repacked), the
// activations rounded to bf16 once per call, fp32 accumulation. Two products
// reach it, both with the frozen weight W (N,K):
//   forward  C(M,N) = A(M,K) W^T   (transB): A rounded and pair-interleaved
//            16 rows at a time (bf16_simd.h's pack_pairs16, the layout the
//            AMX path shares), once per call and shared by the team; each
//            vdpbf16ps takes 16 rows' pairs (A[m][k], A[m][k+1]) against one
//            pair of a W row broadcast from memory, so a register holds C's
//            column n for 16 rows m. A 32 x 12 block of C is 24 registers; it
//            is transposed into C when it is stored.
//   backward C(M,K) = A(M,N) W     (!transB, dx = dout W): A (dout) rounded
//            once into 12-row blocks of pairs (bwd_pack), shared; W's rows
//            2r and 2r+1 are interleaved in
//            registers (vpunpck{l,h}wd of two 32-column loads: the columns
//            come out in the unpacks' lane order, put back at the store) and
//            each vdpbf16ps takes them against the pair (A[m][2r],
//            A[m][2r+1]) broadcast. A 12 x 32 block of C is 24 registers.
// The reduction goes in blocks of at most KC (the shared A stays bounded and
// the forward's 12 W rows stay in L1); blocks after the first accumulate onto
// C. The split between threads is the AMX path's: C's columns in 32s, or C's
// rows when there are fewer 32s than threads.
#include "gemm_bf16.h"
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "dtype_cpu.h"
#include "matmul_amx.h"

// ---- the path ----
static pthread_once_t path_once = PTHREAD_ONCE_INIT;
static int usable_v[GEMM_BF16_COUNT];
static GemmBf16 chosen_v;
static const char *const words[GEMM_BF16_COUNT] = {"exact", "avx512bf16", "amx"};

const char *gemm_bf16_word(GemmBf16 g) { return (unsigned)g < GEMM_BF16_COUNT ? words[g] : "?"; }

static void path_init(void) {
    usable_v[GEMM_BF16_EXACT] = 1;
    usable_v[GEMM_BF16_AVX512] = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl");
    usable_v[GEMM_BF16_AMX] = amx_bf16_usable();
    // vdpbf16ps pays where it runs at the fp32 FMA's instruction rate (two
    // products a lane: AMD Zen 4 / 5), not where it runs at half of it (Intel
    // Cooper Lake .. Emerald Rapids: there the exact path's fp32 FMAs are as
    // fast, and exact; doc/kernels.md has both measurements). A fixed rule
    // by vendor, not a timing, so a machine always takes the same path.
    GemmBf16 best = usable_v[GEMM_BF16_AMX]                                  ? GEMM_BF16_AMX
                    : usable_v[GEMM_BF16_AVX512] && __builtin_cpu_is("amd") ? GEMM_BF16_AVX512
                                                                             : GEMM_BF16_EXACT;
    chosen_v = best;
    const char *env = getenv("PAIL_KERNELS_GEMM");
    if (!env || !*env) return;
    int g = 0;
    while (g < GEMM_BF16_COUNT && strcmp(env, words[g])) g++;
    if (g == GEMM_BF16_COUNT)
        log_warn("PAIL_KERNELS_GEMM=%s is not exact, avx512bf16 or amx: ignored (the bf16 GEMMs use %s)", env,
                 words[best]);
    else if (!usable_v[g])
        log_warn("PAIL_KERNELS_GEMM=%s: this CPU (or kernel) does not have it (the bf16 GEMMs use %s)", env,
                 words[best]);
    else
        chosen_v = (GemmBf16)g;
}

int gemm_bf16_usable(GemmBf16 g) {
    pthread_once(&path_once, path_init);
    return (unsigned)g < GEMM_BF16_COUNT && usable_v[g];
}

GemmBf16 gemm_bf16_path(void) {
    pthread_once(&path_once, path_init);
    return dtype_isa_id() == DT_ISA_AVX512 ? chosen_v : GEMM_BF16_EXACT;
}

int gemm_bf16_force(GemmBf16 g) {
    if (!gemm_bf16_usable(g)) return -1;
    chosen_v = g;
    return 0;
}

// ---- the kernel ----
enum {
    KC = 1024,              // reduction block (elements; a multiple of 32)
    SHARED_MAX = 32 << 20,  // bytes of the shared converted A, at most
    MB = 256,               // rows of A per forward block (their pairs stay in L2)
    FNR = 12,               // forward: W rows per register block (x 32 rows of A)
    BMR = 12,               // backward: rows of A per register block (x 32 columns)
};

static _Thread_local void *scratch_buf;
static _Thread_local size_t scratch_cap;

void *gemm_scratch(size_t bytes) {
    if (bytes <= scratch_cap) return scratch_buf;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes)) return NULL;
    free(scratch_buf);
    scratch_buf = p, scratch_cap = bytes;
    return p;
}

typedef int32_t __attribute__((may_alias, aligned(2))) pair_t;  // two bf16, as one 32-bit lane

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#include "bf16_simd.h"

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// Forward register block: C[m..m+31][n..n+nr) += the reduction's pairs
// [0, np) (and a lone last element when odd) of A's two pair tiles a0, a1
// (pair p at + 32 p) against W's rows w (ldw apart, starting at the block's
// first element). acc[2j + v]: C's column n + j for rows m + 16 v + 0..15.
static inline __attribute__((always_inline)) void fwd_kernel(__m512 *acc, int nr, const uint16_t *a0,
                                                             const uint16_t *a1, const uint16_t *w, int ldw,
                                                             int np, int odd) {
    __m512 c[2 * FNR];  // in registers (acc is memory: written once at the end)
#pragma GCC unroll 24
    for (int j = 0; j < 2 * nr; j++) c[j] = _mm512_setzero_ps();
    for (int p = 0; p < np; p++) {
        __m512i x0 = _mm512_load_si512((const void *)(a0 + (size_t)p * 32));
        __m512i x1 = _mm512_load_si512((const void *)(a1 + (size_t)p * 32));
#pragma GCC unroll 12
        for (int j = 0; j < nr; j++) {
            __m512i b = _mm512_set1_epi32(*(const pair_t *)(w + (size_t)j * ldw + 2 * p));
            c[2 * j] = dp(c[2 * j], x0, b);
            c[2 * j + 1] = dp(c[2 * j + 1], x1, b);
        }
    }
    if (odd) {
        __m512i x0 = _mm512_load_si512((const void *)(a0 + (size_t)np * 32));
        __m512i x1 = _mm512_load_si512((const void *)(a1 + (size_t)np * 32));
#pragma GCC unroll 12
        for (int j = 0; j < nr; j++) {
            __m512i b = _mm512_set1_epi32(w[(size_t)j * ldw + 2 * np]);  // (W[n][K-1], 0)
            c[2 * j] = dp(c[2 * j], x0, b);
            c[2 * j + 1] = dp(c[2 * j + 1], x1, b);
        }
    }
#pragma GCC unroll 24
    for (int j = 0; j < 2 * nr; j++) acc[j] = c[j];
}

// Forward, one thread: C's columns (W's rows) [na, nb) and rows [ma, mb) (a
// multiple of 32; mb may pass M), reduction block [k0, k0 + kn); ap: A's
// pair tiles, [Mp/16][kc/32][512].
static void fwd_block(float *C, int ldc, const uint16_t *W, int ldw, const uint16_t *ap, int kc, int ma,
                      int mb, int M, int na, int nb, int k0, int kn, float alpha, float beta) {
    size_t tile_stride = (size_t)kc * 16;  // elements from one 16-row tile to the next
    int np = kn / 2, odd = kn & 1;
    __m512 acc[2 * FNR];
    for (int mc = ma; mc < mb; mc += MB)
        for (int n = na; n < nb; n += FNR) {
            int nr = nb - n < FNR ? nb - n : FNR;
            const uint16_t *w = W + (size_t)n * ldw + k0;
            for (int m = mc; m < mb && m < mc + MB; m += 32) {
                const uint16_t *a0 = ap + (size_t)(m / 16) * tile_stride, *a1 = a0 + tile_stride;
                if (nr == FNR) {
                    fwd_kernel(acc, FNR, a0, a1, w, ldw, np, odd);
                    fwd_store(C, ldc, acc, FNR, m, M, n, alpha, beta);
                    continue;
                }
                for (int j = 0; j < nr;) {  // a tail of rows: 4 at a time, then one
                    int r = nr - j >= 4 ? 4 : 1;
                    if (r == 4)
                        fwd_kernel(acc, 4, a0, a1, w + (size_t)j * ldw, ldw, np, odd);
                    else
                        fwd_kernel(acc, 1, a0, a1, w + (size_t)j * ldw, ldw, np, odd);
                    fwd_store(C, ldc, acc, r, m, M, n + j, alpha, beta);
                    j += r;
                }
            }
        }
}

// c[2i] += lo x pair i, c[2i + 1] += hi x pair i, for the block's 12 rows' pairs ab[0..11].
static inline __attribute__((always_inline)) void bwd_pairs(__m512 *c, __m512i lo, __m512i hi, const pair_t *ab) {
#pragma GCC unroll 12
    for (int i = 0; i < BMR; i++) {
        __m512i b = _mm512_set1_epi32(ab[i]);
        c[2 * i] = dp(c[2 * i], lo, b);
        c[2 * i + 1] = dp(c[2 * i + 1], hi, b);
    }
}

// Backward register block: C[m..m+12)[c..c+32) over the reduction pairs [0,
// np) (nrows = 2 np or 2 np - 1 rows of W exist): ab is the block's pairs,
// (A[m + i][2r], A[m + i][2r + 1]) at ab[12 r + i] (zeros past M and past an
// odd reduction), w W's row 0 of the reduction block at column c, cm the
// columns that exist. acc[2i]: the unpacklo columns of row m + i (c + 8L +
// 0..3 in lane L), acc[2i + 1] the unpackhi ones (c + 8L + 4..7).
static void bwd_kernel(__m512 *acc, const pair_t *ab, const uint16_t *w, int ldw, int nrows, __mmask32 cm) {
    __m512 c[2 * BMR];  // in registers (acc is memory: written once at the end)
#pragma GCC unroll 24
    for (int j = 0; j < 2 * BMR; j++) c[j] = _mm512_setzero_ps();
    int np = nrows / 2;
    for (int r = 0; r < np; r++, ab += BMR) {
        __m512i w0 = _mm512_maskz_loadu_epi16(cm, w + (size_t)(2 * r) * ldw);
        __m512i w1 = _mm512_maskz_loadu_epi16(cm, w + (size_t)(2 * r + 1) * ldw);
        bwd_pairs(c, _mm512_unpacklo_epi16(w0, w1), _mm512_unpackhi_epi16(w0, w1), ab);
    }
    if (nrows & 1) {
        __m512i w0 = _mm512_maskz_loadu_epi16(cm, w + (size_t)(2 * np) * ldw), z = _mm512_setzero_si512();
        bwd_pairs(c, _mm512_unpacklo_epi16(w0, z), _mm512_unpackhi_epi16(w0, z), ab);
    }
#pragma GCC unroll 24
    for (int j = 0; j < 2 * BMR; j++) acc[j] = c[j];
}

// acc (bwd_kernel's) into C[m..m+mr)[c..c+nc): the unpacks' lane order put
// back (lanes L of lo and hi are columns 8L..8L+3 and 8L+4..8L+7).
static void bwd_store(float *C, int ldc, const __m512 *acc, int mr, int m, int c, int nc, float alpha,
                      float beta) {
    __mmask16 m0 = nc >= 16 ? 0xffff : (__mmask16)((1u << nc) - 1);
    __mmask16 m1 = nc >= 32 ? 0xffff : nc > 16 ? (__mmask16)((1u << (nc - 16)) - 1) : 0;
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < mr; i++) {
        __m512 lo = acc[2 * i], hi = acc[2 * i + 1];
        __m512 t0 = _mm512_shuffle_f32x4(lo, hi, 0x44), t1 = _mm512_shuffle_f32x4(lo, hi, 0xee);
        __m512 v[2] = {_mm512_shuffle_f32x4(t0, t0, 0xd8), _mm512_shuffle_f32x4(t1, t1, 0xd8)};
        __mmask16 mk[2] = {m0, m1};
        float *row = C + (size_t)(m + i) * ldc + c;
        for (int h = 0; h < 2; h++) {
            if (!mk[h]) continue;
            __m512 y = _mm512_mul_ps(va, v[h]);
            if (beta != 0.0f) y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk[h], row + 16 * h), y);
            _mm512_mask_storeu_ps(row + 16 * h, mk[h], y);
        }
    }
}

// Backward, one thread: C[rows [ma, mb) clipped to M][columns [ca, cb)
// clipped to Nc], reduction rows [k0, k0 + kn) of W; ab: A's rows rounded, in
// blocks of 12 (bwd_pack), np2 pairs a block.
static void bwd_block(float *C, int ldc, const uint16_t *W, int ldw, const pair_t *ab, int np2, int ma, int mb,
                      int M, int ca, int cb, int Nc, int k0, int kn, float alpha, float beta) {
    __m512 acc[2 * BMR];
    if (mb > M) mb = M;
    if (cb > Nc) cb = Nc;
    const uint16_t *w0 = W + (size_t)k0 * ldw;
    for (int c = ca; c < cb; c += 32) {
        int nc = cb - c < 32 ? cb - c : 32;
        __mmask32 cm = nc >= 32 ? 0xffffffffu : (__mmask32)((1u << nc) - 1);
        for (int m = ma / BMR * BMR; m < mb; m += BMR) {
            // a block this thread shares with the next one's rows: its own rows stored
            int lo = m < ma ? ma : m, hi = m + BMR < mb ? m + BMR : mb;
            bwd_kernel(acc, ab + (size_t)(m / BMR) * np2 * BMR, w0 + c, ldw, kn, cm);
            bwd_store(C, ldc, acc + 2 * (lo - m), hi - lo, lo, c, nc, alpha, beta);
        }
    }
}

// Row m of A, reduction elements [k0, k0 + kn) rounded to bf16 and stored as
// pairs in 12-row blocks: pair r at ab[(m / 12 * np2 + r) * 12 + m % 12] (np2
// pairs a block; a zero after an odd kn; zeros for A NULL, a row past M).
static void bwd_pack(pair_t *ab, int np2, const float *A, int lda, int m, int k0, int kn) {
    pair_t *d = ab + (size_t)(m / BMR) * np2 * BMR + m % BMR;
    const float *s = A ? A + (size_t)m * lda + k0 : NULL;
    for (int k = 0; k < kn; k += 32) {
        int n = kn - k;
        int32_t p[16] __attribute__((aligned(64)));
        __m256i lo = s ? cvt16(s + k, n) : _mm256_setzero_si256();
        __m256i hi = s && n > 16 ? cvt16(s + k + 16, n - 16) : _mm256_setzero_si256();
        _mm512_store_si512((__m512i *)p, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
        int npr = n >= 32 ? 16 : (n + 1) / 2;
        for (int r = 0; r < npr; r++) d[(size_t)(k / 2 + r) * BMR] = p[r];
    }
}

int bf16dp_gemm_team(int transB, int M, int N, int K, float alpha, const float *A, int lda,
                     const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    int nth = omp_get_num_threads(), id = omp_get_thread_num();
    // the shared A: the forward's pair tiles, 16 rows each (Mp rows); the
    // backward's 12-row blocks (Mb rows): either way kc reduction elements a row
    int Mp = (M + 31) / 32 * 32, Kp = (K + 31) / 32 * 32, Mb = (M + BMR - 1) / BMR * BMR;
    int rows = transB ? Mp : Mb;
    int kc = Kp < KC ? Kp : KC;
    while (kc > 32 && (size_t)rows * kc * 2 > SHARED_MAX) kc = kc / 2 / 32 * 32;
    void *sh = NULL;
#pragma omp single copyprivate(sh)
    sh = gemm_scratch((size_t)rows * kc * 2);
    if (!sh) return -1;
    uint16_t *s = sh;
    // The split: C's columns in 32s between the threads; when there are fewer
    // 32s than threads, C's rows in 32s instead.
    int ca, cb, ma, mb;
    gemm_split(N, Mp, nth, id, &ca, &cb, &ma, &mb);
    int work = ca < cb && ma < mb;
    for (int k0 = 0; k0 < K; k0 += kc) {
        int kn = K - k0 < kc ? K - k0 : kc;
        if (k0 > 0) {
#pragma omp barrier
        }
        if (transB) {
            int nkb = (kn + 31) / 32;
#pragma omp for schedule(static)
            for (int mt = 0; mt < Mp / 16; mt++)
                for (int kb = 0; kb < nkb; kb++)
                    pack_pairs16(s + (size_t)mt * kc * 16 + (size_t)kb * 512, A + k0, lda, M, kn, mt * 16,
                                 kb * 32);
        } else {
            // the last block's rows past M: zeros
#pragma omp for schedule(static)
            for (int m = 0; m < Mb; m++) bwd_pack((pair_t *)s, kc / 2, m < M ? A : NULL, lda, m, k0, kn);
        }
        // (the loops' implicit barrier: the shared A is whole)
        if (!work) continue;
        float b = k0 == 0 ? beta : 1.0f;
        if (transB)
            fwd_block(C, ldc, B, ldb, s, kc, ma, mb, M, ca, cb, k0, kn, alpha, b);
        else
            bwd_block(C, ldc, B, ldb, (const pair_t *)s, kc / 2, ma, mb, M, ca, cb, N, k0, kn, alpha, b);
    }
    return 0;
}

#pragma GCC pop_options
