// AVX-512 helpers shared by the GEMMs (kernels/matmul_amx.c, gemm_bf16.c,
// gemm_f32.c): fp32 rounded to bf16, the 16 x 16 transpose, the pair packing,
// the forward's transposed store and the split between threads. Static
// inline, with no target of their own: include this inside the includer's
// `#pragma GCC target` region (each compiles them for its own ISA).
#pragma once
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

// 16 fp32 -> 16 bf16, round to nearest even, NaN kept quiet (dt_f32_to_bf16).
static inline __m256i cvt16(const float *src, int n) {
    __mmask16 m = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

// A 16 x 16 matrix of 32-bit elements transposed in registers: two rounds
// of unpacks (4 x 4 blocks within each 128-bit lane), then the lanes.
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // r[i + j] lane L: column 4L + j of rows i..i+3
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; j++) {  // row 4L + j: lane L of r[j], r[4 + j], r[8 + j], r[12 + j]
        __m512i u0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x44), u1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xee);
        __m512i u2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x44), u3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xee);
        t[j] = _mm512_shuffle_i32x4(u0, u2, 0x88);
        t[4 + j] = _mm512_shuffle_i32x4(u0, u2, 0xdd);
        t[8 + j] = _mm512_shuffle_i32x4(u1, u3, 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(u1, u3, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

// Rows m0..m0+15 of A (M x K, fp32, lda), elements k..k+31, rounded to bf16
// and pair-interleaved into t (64-byte aligned, 512 elements): row p of t holds
// (A[m0 + i][k + 2p], A[m0 + i][k + 2p + 1]) for i = 0..15, the layout both
// tdpbf16ps and vdpbf16ps take as the operand whose pairs are summed. Zeros
// past M and past K.
static inline void pack_pairs16(uint16_t *t, const float *A, int lda, int M, int K, int m0, int k) {
    __m512i r[16];
    int n = K - k;
    for (int i = 0; i < 16; i++) {
        int m = m0 + i;
        const float *src = A + (size_t)m * lda + k;
        __m256i lo = m < M && n > 0 ? cvt16(src, n) : _mm256_setzero_si256();
        __m256i hi = m < M && n > 16 ? cvt16(src + 16, n - 16) : _mm256_setzero_si256();
        r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    transpose16(r);
    for (int i = 0; i < 16; i++) _mm512_store_si512((__m512i *)(t + i * 32), r[i]);
}

// A forward register block's accumulators (acc[2j + v]: C's column n + j for
// rows m + 16 v + 0..15) into C[m..m+31][n..n+nr): alpha acc + beta C, rows
// past M skipped. Each 16-row half is transposed in registers (columns past
// nr zero) and stored a row at a time, nr lanes masked. Not inlined: its
// constants would hold registers the kernels' loops need.
static __attribute__((noinline, unused)) void fwd_store(float *C, int ldc, const __m512 *acc, int nr, int m, int M,
                                                        int n, float alpha, float beta) {
    __mmask16 cm = (__mmask16)((1u << nr) - 1);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int v = 0; v < 2 && m + 16 * v < M; v++) {
        __m512i r[16];
        for (int j = 0; j < 16; j++) r[j] = j < nr ? _mm512_castps_si512(acc[2 * j + v]) : _mm512_setzero_si512();
        transpose16(r);
        int rows = M - (m + 16 * v) < 16 ? M - (m + 16 * v) : 16;
        for (int i = 0; i < rows; i++) {
            float *c = C + (size_t)(m + 16 * v + i) * ldc + n;
            __m512 y = _mm512_mul_ps(va, _mm512_castsi512_ps(r[i]));
            if (beta != 0.0f) y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(cm, c), y);
            _mm512_mask_storeu_ps(c, cm, y);
        }
    }
}

// Thread id's share of C (N columns, Mp rows, a multiple of 32): its columns
// [ca, cb) in 32s, all rows; when there are fewer 32s of columns than threads
// (and than 32s of rows), all columns and its rows [ma, mb) in 32s instead.
static inline void gemm_split(int N, int Mp, int nth, int id, int *ca, int *cb, int *ma, int *mb) {
    int pairs = (N + 31) / 32, mpairs = Mp / 32;
    *ca = 0, *cb = N, *ma = 0, *mb = Mp;
    if (pairs >= nth || pairs >= mpairs) {
        *ca = (int)((long)pairs * id / nth) * 32, *cb = (int)((long)pairs * (id + 1) / nth) * 32;
        if (*cb > N) *cb = N;
    } else {
        *ma = (int)((long)mpairs * id / nth) * 32, *mb = (int)((long)mpairs * (id + 1) / nth) * 32;
    }
}
