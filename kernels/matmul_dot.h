// The small-T mat-vec's dot products, a template included by kernels/matmul.c
// once per (instruction set, weight dtype): the fp32 weights with the build's
// vector width, and bf16 / f16 weights under each run-time ISA, so that every
// variant reads W the same way and sums in the same order (a bf16 row gives
// the fp32 kernel's result on the same row converted, bit for bit, when the
// widths match). No include guard: it is meant to be included repeatedly.
//
// The includer defines:
//   DOT_NAME(n)    the variant's name for n (n##_bf16_avx2, ...)
//   DOT_W_T        the weight element type (float, dt_u16_unaligned)
//   DOT_LOADW(p)   VW weights from element p, converted to fp32 (a VF)
//   DOT_W1(p)      one weight from element p as a float
//   and, for a vector variant, VW, VF, VZERO(), VLOAD(p), VFMA(a, b, c),
//   VADD(a, b), VSUM(v) (without VW: the scalar loops).

// r[t] = dot(w, x row t) for NT (1..4) consecutive x rows of stride K. W is read
// in memory order, one row after another: a few long sequential streams keep
// the hardware prefetcher ahead (measured here: 57 GB/s against 36 GB/s when
// four rows were read side by side, each only K floats long). U partial sums per
// x row hide the FMA latency: NT * U accumulators, 4 or more in flight.
static inline __attribute__((always_inline)) void DOT_NAME(dot_row)(float *r, const DOT_W_T *w,
                                                                    const float *x, int K, int NT) {
    int k = 0;
#ifdef VW
    enum { U = 2 };
    VF acc[4][U];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) acc[t][u] = VZERO();
    for (; k + U * VW <= K; k += U * VW) {
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            VF wv = DOT_LOADW(w + k + u * VW);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[t][u] = VFMA(wv, VLOAD(x + (size_t)t * K + k + u * VW), acc[t][u]);
        }
    }
    for (; k + VW <= K; k += VW) {
        VF wv = DOT_LOADW(w + k);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[t][0] = VFMA(wv, VLOAD(x + (size_t)t * K + k), acc[t][0]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) r[t] = VSUM(VADD(acc[t][0], acc[t][1]));
#else
    for (int t = 0; t < NT; t++) r[t] = 0;
#endif
    for (; k < K; k++)  // tail (K % VW), or the whole row without SIMD
        for (int t = 0; t < NT; t++) r[t] += DOT_W1(w + k) * x[(size_t)t * K + k];
}

// One x row: four partial sums of one W row.
static inline __attribute__((always_inline)) void DOT_NAME(dot_row1)(float *r, const DOT_W_T *w,
                                                                     const float *x, int K) {
    int k = 0;
#ifdef VW
    VF a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
    for (; k + 4 * VW <= K; k += 4 * VW) {
        // the four W loads first: four misses in flight before any FMA waits
#ifdef DOT_PF
        _mm_prefetch((const char *)(w + k) + DOT_PF, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + k) + DOT_PF + 64, _MM_HINT_T0);
#endif
        VF w0 = DOT_LOADW(w + k), w1 = DOT_LOADW(w + k + VW), w2 = DOT_LOADW(w + k + 2 * VW),
           w3 = DOT_LOADW(w + k + 3 * VW);
        a0 = VFMA(w0, VLOAD(x + k), a0);
        a1 = VFMA(w1, VLOAD(x + k + VW), a1);
        a2 = VFMA(w2, VLOAD(x + k + 2 * VW), a2);
        a3 = VFMA(w3, VLOAD(x + k + 3 * VW), a3);
    }
    for (; k + VW <= K; k += VW) a0 = VFMA(DOT_LOADW(w + k), VLOAD(x + k), a0);
    *r = VSUM(VADD(VADD(a0, a1), VADD(a2, a3)));
#else
    *r = 0;
#endif
    for (; k < K; k++) *r += DOT_W1(w + k) * x[k];
}

static inline __attribute__((always_inline)) void DOT_NAME(dot_dispatch)(float *r, const void *w,
                                                                         const float *x, int K,
                                                                         int NT) {
    const DOT_W_T *wt = (const DOT_W_T *)w;
    switch (NT) {
    case 1: DOT_NAME(dot_row1)(r, wt, x, K); break;
    case 2: DOT_NAME(dot_row)(r, wt, x, K, 2); break;
    case 3: DOT_NAME(dot_row)(r, wt, x, K, 3); break;
    default: DOT_NAME(dot_row)(r, wt, x, K, 4); break;
    }
}

#undef DOT_NAME
#undef DOT_W_T
#undef DOT_LOADW
#undef DOT_W1
