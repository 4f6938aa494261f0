// The bf16 GEMM on AMX tiles (kernels/matmul_amx.h). Two products reach it,
// both with the frozen bf16 weight W (N,K) as stored:
//   forward  C(M,N) = A(M,K) W^T   (transB): computed as C^T = W A^T, so the
//            tile that tdpbf16ps wants row-major (16 rows x 32 bf16) is 16 rows
//            of W as they lie in memory, and the pair-interleaved ("VNNI") tile
//            is made from A, converted once per call and shared by the team;
//   backward C(M,K) = A(M,N) W     (!transB): the row-major tile is A (dout,
//            converted once, shared), the pair-interleaved tile two rows of W
//            interleaved, packed by each thread for its own columns.
// Either way the weight is never converted to fp32 nor transposed, and A is
// rounded to bf16 once. The reduction goes in blocks of at most KC_MAX (the
// shared buffer stays bounded); blocks after the first accumulate onto C.
// Each thread keeps 4 accumulator tiles (2 x 2 blocks of 16 x 16) over the
// whole block, so every tile load feeds two tdpbf16ps.
#include "matmul_amx.h"
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "core/log.h"
#include "dtype_cpu.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

enum {
    KC_MAX = 4096,               // reduction block (elements; a multiple of 32)
    SHARED_MAX = 32 << 20,       // bytes of the shared converted A, at most
    PANEL_MAX = 1 << 20,         // bytes of a thread's packed W columns (backward)
    MB = 256,                    // rows of A a forward block
};

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_usable_v;

static void amx_init(void) {
    unsigned a, b, c, d;
    // CPUID 7.0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE; 7.1: EAX bit 5 AVX512-BF16.
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) &&
        __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1) &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        // Linux hands the tile data state to a process only on request (5.16+).
        amx_usable_v = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int amx_bf16_usable(void) {
    pthread_once(&amx_once, amx_init);
    return amx_usable_v;
}

// ---- scratch (amx_gemm_team): grown, never shrunk.
static _Thread_local void *scratch_buf;
static _Thread_local size_t scratch_cap;

static void *tls_grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return *buf;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes)) return NULL;
    free(*buf);
    *buf = p, *cap = bytes;
    return p;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")
#include "bf16_simd.h"

// Row m of A, reduction elements [k0, k0 + kc) rounded to bf16 into dst
// (kc a multiple of 32), zeros past K (and for a row past M: src NULL).
static void cvt_row(uint16_t *dst, const float *src, int k0, int kc, int K) {
    for (int k = 0; k < kc; k += 16) {
        int n = src ? K - (k0 + k) : 0;
        __m256i v = n > 0 ? cvt16(src + k0 + k, n) : _mm256_setzero_si256();
        _mm256_storeu_si256((__m256i *)(dst + k), v);
    }
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileCfg;

static void tiles_config(void) {
    TileCfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = 64;
    __asm__ volatile("" : : "m"(cfg) : "memory");  // GCC 12 may drop the stores to cfg otherwise
    _tile_loadconfig(&cfg);
}

// C[m0.., n0..] (up to 16 x 16) = alpha * t + beta * C, t row-major 16 x 16
// (trans: t[n][m], as the forward's C^T tiles come out: transposed first).
static void store_tile(float *C, int ldc, const float *t, int trans, int m0, int mn, int n0, int nn,
                       float alpha, float beta) {
    __m512i r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_load_si512((const __m512i *)(t + i * 16));
    if (trans) transpose16(r);
    __mmask16 m = nn >= 16 ? 0xffff : (__mmask16)((1u << nn) - 1);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < mn; i++) {
        float *c = C + (size_t)(m0 + i) * ldc + n0;
        __m512 v = _mm512_mul_ps(va, _mm512_castsi512_ps(r[i]));
        if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c), v);
        _mm512_mask_storeu_ps(c, m, v);
    }
}

// The 2 x 2 block's step: the pair-interleaved tiles b0, b1 (64-byte rows)
// into tmm6, tmm7, then tmm0..3 += tmm4/5 x tmm6/7.
static inline void tiles_dp4(const uint16_t *b0, const uint16_t *b1) {
    _tile_loadd(6, b0, 64);
    _tile_loadd(7, b1, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}

// The 2 x 2 block's four accumulators out to C[ma.., na..]: tiles 0..3 are
// (m, n), (m, n+16), (m+16, n), (m+16, n+16); trans (the forward's C^T): each
// tile is t[n][m] and they are (n, m), (n, m+16), (n+16, m), (n+16, m+16).
static void store_block(float *C, int ldc, int trans, int M, int N, int ma, int na, float alpha,
                        float beta) {
    float t[4][256] __attribute__((aligned(64)));
    _tile_stored(0, t[0], 64);
    _tile_stored(1, t[1], 64);
    _tile_stored(2, t[2], 64);
    _tile_stored(3, t[3], 64);
    for (int b = 0; b < 4; b++) {
        int hi = (b >> 1) * 16, lo = (b & 1) * 16;
        int m0 = ma + (trans ? lo : hi), n0 = na + (trans ? hi : lo);
        if (m0 >= M || n0 >= N) continue;
        store_tile(C, ldc, t[b], trans, m0, M - m0 < 16 ? M - m0 : 16, n0, N - n0 < 16 ? N - n0 : 16,
                   alpha, beta);
    }
}

// Forward, one thread: C[m range, n range) for W rows [na, nb) and A rows
// [ma, mb) (multiples of 32; nb may pass N, mb M), reduction block [k0, k0 + kc). ap: A pair-interleaved,
// [M/16 tiles][kc/32][16 pair rows][16 m][2].
static void fwd_block(float *C, int ldc, const uint16_t *W, int ldw, const uint16_t *ap, int ma, int mb,
                      int M, int N, int K, int k0, int kc, int na, int nb, float alpha, float beta) {
    int nkb = kc / 32;
    size_t tile_stride = (size_t)nkb * 512;  // elements from one m tile of ap to the next
    uint16_t pad[2][512] __attribute__((aligned(64)));
    // Blocks of MB rows of A (their tiles stay in L2) by pairs of W tiles (in
    // L1 across the block's rows).
    for (int mc = ma; mc < mb; mc += MB)
    for (int n = na; n < nb; n += 32) {
        // W's tiles: rows n..n+15 and n+16..n+31 at column k, in place when
        // whole, else copied with zeros (past N or past K).
        int whole_n = n + 32 <= N;
        for (int m = mc; m < mb && m < mc + MB; m += 32) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            const uint16_t *b0 = ap + (size_t)(m / 16) * tile_stride;
            const uint16_t *b1 = b0 + tile_stride;
            for (int kb = 0; kb < nkb; kb++) {
                int k = k0 + kb * 32;
                if (whole_n && k + 32 <= K) {
                    _tile_loadd(4, W + (size_t)n * ldw + k, ldw * 2);
                    _tile_loadd(5, W + (size_t)(n + 16) * ldw + k, ldw * 2);
                } else {
                    memset(pad, 0, sizeof pad);
                    int kn = K - k < 32 ? K - k : 32;
                    for (int r = 0; r < 32 && n + r < N; r++)
                        memcpy(pad[r >> 4] + (r & 15) * 32, W + (size_t)(n + r) * ldw + k, kn * 2);
                    _tile_loadd(4, pad[0], 64);
                    _tile_loadd(5, pad[1], 64);
                }
                // C^T tiles: 0 = (n, m), 1 = (n, m+16), 2 = (n+16, m), 3 = (n+16, m+16)
                tiles_dp4(b0 + (size_t)kb * 512, b1 + (size_t)kb * 512);
            }
            store_block(C, ldc, 1, M, N, m, n, alpha, beta);
        }
    }
}

// Backward's W columns [c0, c0 + nc) (nc a multiple of 32), reduction rows
// [k0, k0 + kc) pair-interleaved into dst: [nc/16 tiles][kc/32][16][16][2],
// zeros past the reduction (Kr rows) and past the columns (Nc).
static void pack_cols(uint16_t *dst, const uint16_t *W, int ldw, int Kr, int Nc, int k0, int kc, int c0,
                      int nc) {
    int nkb = kc / 32;
    for (int j = 0; j < nc / 16; j++)
        for (int kb = 0; kb < nkb; kb++) {
            uint16_t *t = dst + ((size_t)j * nkb + kb) * 512;
            int col = c0 + j * 16, cn = Nc - col < 16 ? Nc - col : 16;
            __mmask16 cm = cn >= 16 ? 0xffff : cn > 0 ? (__mmask16)((1u << cn) - 1) : 0;
            for (int r = 0; r < 16; r++) {
                int k = k0 + kb * 32 + 2 * r;
                __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
                if (k < Kr) lo = _mm256_maskz_loadu_epi16(cm, W + (size_t)k * ldw + col);
                if (k + 1 < Kr) hi = _mm256_maskz_loadu_epi16(cm, W + (size_t)(k + 1) * ldw + col);
                __m512i v = _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                                            _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
                _mm512_store_si512((__m512i *)(t + r * 32), v);
            }
        }
}

// Backward, one thread: C[m range, column range [ca, cb)) (multiples of 32),
// reduction block [k0, k0 + kc); ab: A rounded, [Mp][kc] row-major.
static void bwd_block(float *C, int ldc, const uint16_t *W, int ldw, const uint16_t *ab, uint16_t *panel,
                      int ma, int mb, int M, int Kr, int Nc, int k0, int kc, int ca, int cb, float alpha,
                      float beta) {
    int nkb = kc / 32, pc = PANEL_MAX / (kc * 2) / 32 * 32;
    if (pc < 32) pc = 32;
    for (int c0 = ca; c0 < cb; c0 += pc) {
        int nc = cb - c0 < pc ? cb - c0 : pc;
        pack_cols(panel, W, ldw, Kr, Nc, k0, kc, c0, nc);
        for (int m = ma; m < mb; m += 32)
            for (int j = 0; j < nc; j += 32) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                const uint16_t *p0 = panel + (size_t)(j / 16) * nkb * 512, *p1 = p0 + (size_t)nkb * 512;
                for (int kb = 0; kb < nkb; kb++) {
                    _tile_loadd(4, ab + (size_t)m * kc + kb * 32, kc * 2);
                    _tile_loadd(5, ab + (size_t)(m + 16) * kc + kb * 32, kc * 2);
                    tiles_dp4(p0 + (size_t)kb * 512, p1 + (size_t)kb * 512);
                }
                store_block(C, ldc, 0, M, Nc, m, c0 + j, alpha, beta);
            }
    }
}

int amx_gemm_team(int transB, int M, int N, int K, float alpha, const float *A, int lda,
                  const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    int nth = omp_get_num_threads(), id = omp_get_thread_num();
    int Mp = (M + 31) / 32 * 32, Kp = (K + 31) / 32 * 32;
    int kc = Kp < KC_MAX ? Kp : KC_MAX;
    while (kc > 32 && (size_t)Mp * kc * 2 > SHARED_MAX) kc = kc / 2 / 32 * 32;
    // One buffer, from the TLS of whichever thread runs the single (its
    // pointer broadcast): the shared converted A, then each thread's packed
    // W columns (the backward's). NULL on every thread when it failed.
    int pc = PANEL_MAX / (kc * 2) / 32 * 32;
    if (pc < 32) pc = 32;
    size_t shared_bytes = (size_t)Mp * kc * 2, panel_bytes = transB ? 0 : (size_t)pc * kc * 2;
    void *sh = NULL;
#pragma omp single copyprivate(sh)
    sh = tls_grow(&scratch_buf, &scratch_cap, shared_bytes + (size_t)nth * panel_bytes);
    if (!sh) return -1;
    uint16_t *s = sh, *panel = (uint16_t *)((char *)sh + shared_bytes + (size_t)id * panel_bytes);
    // The work split: the forward's W rows (C's columns) or the backward's C
    // columns in 32s, split between the threads; when there are fewer 32s
    // than threads, C's rows in 32s instead.
    int pairs = (N + 31) / 32, mpairs = Mp / 32;
    int ca = 0, cb = pairs * 32, ma = 0, mb = Mp;
    if (pairs >= nth || pairs >= mpairs) {
        ca = (int)((long)pairs * id / nth) * 32, cb = (int)((long)pairs * (id + 1) / nth) * 32;
    } else {
        ma = (int)((long)mpairs * id / nth) * 32, mb = (int)((long)mpairs * (id + 1) / nth) * 32;
    }
    int work = ca < cb && ma < mb;
    for (int k0 = 0; k0 < Kp; k0 += kc) {
        int kn = Kp - k0 < kc ? Kp - k0 : kc;
        if (k0 > 0) {
#pragma omp barrier
        }
        if (transB) {
            // A pair-interleaved per 16 rows: [Mp/16][kn/32][16 pair rows][16 m][2],
            // each tile the transpose (as 32-bit pairs) of 16 rows' 32 values.
            int nkb = kn / 32;
#pragma omp for schedule(static)
            for (int mt = 0; mt < Mp / 16; mt++)
                for (int kb = 0; kb < nkb; kb++)
                    pack_pairs16(s + ((size_t)mt * nkb + kb) * 512, A, lda, M, K, mt * 16, k0 + kb * 32);
        } else {
#pragma omp for schedule(static)
            for (int m = 0; m < Mp; m++)
                cvt_row(s + (size_t)m * kn, m < M ? A + (size_t)m * lda : NULL, k0, kn, K);
        }
        // (the loops' implicit barrier: the shared A is whole)
        if (!work) continue;
        float b = k0 == 0 ? beta : 1.0f;
        tiles_config();
        if (transB)
            fwd_block(C, ldc, B, ldb, s, ma, mb, M, N, K, k0, kn, ca, cb, alpha, b);
        else
            bwd_block(C, ldc, B, ldb, s, panel, ma, mb, M, K, N, k0, kn, ca, cb, alpha, b);
        _tile_release();
    }
    return 0;
}

#pragma GCC pop_options
