// Check suite for the quantizer (kernels/quantize.c, quant_quantize) and
// llama-quantize's fallback rule (quant_fallback): the round trip through the
// reference dequantization (quant_dequant) within each type's error bound,
// determinism and block independence, zero and constant blocks, tiny and huge
// magnitudes, finite output for finite input, refusals. Byte equality with
// gguf-py and llama.cpp's own quantizer is tests/integration/test_quantize.sh.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "dtype_cpu.h"
#include "quant.h"

static Rng rng;
static const DType QTYPES[] = {DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
#define NQ (int)(sizeof QTYPES / sizeof *QTYPES)
#define N 4096  // 128 blocks of 32, 16 of 256

static float *normal_row(size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(&rng) * scale;
    return x;
}

// y(n) = x quantized to dt and dequantized; the quantized bytes left in *q (owned by the caller).
static float *round_trip(const float *x, size_t n, DType dt, uint8_t **q) {
    uint8_t *b = malloc(dtype_row_bytes(dt, n));
    float *y = malloc(n * sizeof *y);
    ck_assert_int_eq(quant_quantize(b, x, dt, n), 0);
    quant_dequant(y, b, dt, n);
    if (q) *q = b;
    else free(b);
    return y;
}

// fp16's rounding error of v: half a unit in the last place, 2^-25 at least
// (its subnormals' half step).
static double e16(double v) { return fmax(fabs(v) * 0x1p-11, 0x1p-25); }

// The largest |x - y| a 32-element block may have, from its values alone:
// half a step of the block's scale d, plus the clamped end of the symmetric
// types (the value of the other sign than the block's extreme, at 8 or 16
// steps, stores as 7 or 15: a whole step), plus the fp16 rounding of d (times
// the largest level) and of m. 1% on top for the fp32 arithmetic.
static double block_bound(DType dt, const float *x) {
    float mn = x[0], mx = x[0], amax = 0;
    for (int j = 0; j < 32; j++) {
        mn = fminf(mn, x[j]), mx = fmaxf(mx, x[j]);
        amax = fmaxf(amax, fabsf(x[j]));
    }
    double d = 0, step = 0.5, m = 0;  // the scale, the worst rounding in steps, m's error
    int levels = 0;
    switch (dt) {
    case DT_Q8_0: d = amax / 127.0, levels = 127; break;
    case DT_Q4_0: d = amax / 8.0, levels = 8, step = 1; break;
    case DT_Q5_0: d = amax / 16.0, levels = 16, step = 1; break;
    case DT_Q4_1: d = (mx - mn) / 15.0, levels = 15, m = e16(mn); break;
    case DT_Q5_1: d = (mx - mn) / 31.0, levels = 31, m = e16(mn); break;
    default: break;
    }
    return 1.01 * (d * step + levels * e16(d) + m);
}

// The K-quants fit each group's scale and min by least squares and round the
// scales to 6 (Q4_K, Q5_K) or 8 bits (Q6_K): no simple per-element bound. The
// relative RMS error of every type on this suite's rows: the largest measured
// (seed 4646) Q8_0 0.0055, Q4_0 0.0891, Q4_1 0.0787, Q5_0 0.0436, Q5_1 0.0390,
// Q4_K 0.0726, Q5_K 0.0374, Q6_K 0.0194; bounds about 15% above.
static double rel_rms_bound(DType dt) {
    switch (dt) {
    case DT_Q8_0: return 0.0065;
    case DT_Q4_0: return 0.10;
    case DT_Q4_1: return 0.09;
    case DT_Q5_0: return 0.05;
    case DT_Q5_1: return 0.045;
    case DT_Q4_K: return 0.085;
    case DT_Q5_K: return 0.043;
    case DT_Q6_K: return 0.022;
    default: return 0;
    }
}

static void expect_round_trip(DType dt, const float *x, size_t n, const char *what) {
    float *y = round_trip(x, n, dt, NULL);
    double se = 0, sx = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(y[i]), "%s %s: element %zu dequantizes to %g (x %g)", dtype_name(dt), what, i, y[i], x[i]);
        double d = (double)y[i] - x[i];
        se += d * d, sx += (double)x[i] * x[i];
        if (dtype_block(dt) == 32) {
            double b = block_bound(dt, x + i / 32 * 32);
            ck_assert_msg(fabs(d) <= b, "%s %s: element %zu: x %.9g, dequantized %.9g: |error| %.3g > %.3g",
                          dtype_name(dt), what, i, x[i], y[i], fabs(d), b);
        }
    }
    double rel = sx > 0 ? sqrt(se / sx) : 0;
    ck_assert_msg(rel <= rel_rms_bound(dt), "%s %s: relative RMS error %.4f > %.4f", dtype_name(dt), what, rel, rel_rms_bound(dt));
    free(y);
}

// Gaussian rows at several scales, and rows of groups of very different scales.
START_TEST(test_round_trip) {
    for (int t = 0; t < NQ; t++) {
        for (float scale = 1e-3f; scale <= 1e3f; scale *= 10) {
            float *x = normal_row(N, scale);
            char what[64];
            snprintf(what, sizeof what, "N(0, %g)", scale);
            expect_round_trip(QTYPES[t], x, N, what);
            free(x);
        }
        float *x = normal_row(N, 1);
        for (size_t i = 0; i < N; i++) x[i] *= powf(10, (float)(i / 32 % 4) - 2);  // 1e-2 .. 10 by block
        expect_round_trip(QTYPES[t], x, N, "blocks of scales 1e-2 .. 10");
        free(x);
    }
}
END_TEST

// The same input gives the same bytes; a row quantized whole equals its blocks
// quantized one call each (no state across blocks).
START_TEST(test_deterministic) {
    float *x = normal_row(N, 0.05f);
    for (int t = 0; t < NQ; t++) {
        DType dt = QTYPES[t];
        size_t bytes = dtype_row_bytes(dt, N), be = (size_t)dtype_block(dt), bb = dtype_block_bytes(dt);
        uint8_t *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
        memset(a, 0x55, bytes), memset(b, 0xAA, bytes);
        ck_assert_int_eq(quant_quantize(a, x, dt, N), 0);
        ck_assert_int_eq(quant_quantize(b, x, dt, N), 0);
        ck_assert_msg(!memcmp(a, b, bytes), "%s: two runs differ", dtype_name(dt));
        for (size_t i = 0; i < N / be; i++) ck_assert_int_eq(quant_quantize(c + i * bb, x + i * be, dt, be), 0);
        ck_assert_msg(!memcmp(a, c, bytes), "%s: block by block differs from the whole row", dtype_name(dt));
        free(a), free(b), free(c);
    }
    free(x);
}
END_TEST

// All-zero blocks dequantize to zeros; constant blocks as close as the type
// allows (Q4_1 / Q5_1 store the constant itself as m: exact when it is an fp16
// value); a block of zeros inside a non-zero K-quant block stays zero.
START_TEST(test_zero_constant) {
    float x[512], *y;
    for (int t = 0; t < NQ; t++) {
        DType dt = QTYPES[t];
        memset(x, 0, sizeof x);
        y = round_trip(x, 512, dt, NULL);
        for (int i = 0; i < 512; i++) ck_assert_msg(y[i] == 0.0f, "%s: zeros: element %d is %g", dtype_name(dt), i, y[i]);
        free(y);
        const float cs[] = {1.0f, -1.0f, 0.3f, -7.25f, 1e-3f, 1000.0f};
        for (int k = 0; k < 6; k++) {
            for (int i = 0; i < 512; i++) x[i] = cs[k];
            y = round_trip(x, 512, dt, NULL);
            // 32-block types: block_bound; K-quants: one step of a 6-bit scale of the 4-bit grid
            for (int i = 0; i < 512; i++) {
                double b = dtype_block(dt) == 32 ? block_bound(dt, x) : fabsf(cs[k]) * 0.07;
                if (dt == DT_Q4_1 || dt == DT_Q5_1) b = fabsf(cs[k] - (float)(_Float16)cs[k]);
                ck_assert_msg(fabs((double)y[i] - cs[k]) <= b, "%s: constant %g: element %d is %.9g (bound %.3g)", dtype_name(dt), cs[k], i, y[i], b);
            }
            free(y);
        }
        for (int i = 0; i < 512; i++) x[i] = (float)rng_normal(&rng);
        for (int i = 64; i < 96; i++) x[i] = 0;  // a zero group (Q4_K/Q5_K's 32, Q6_K's 16s) mid-block
        y = round_trip(x, 512, dt, NULL);
        for (int i = 64; i < 96; i++) ck_assert_msg(y[i] == 0.0f, "%s: a zero group: element %d is %g", dtype_name(dt), i, y[i]);
        free(y);
    }
}
END_TEST

// Tiny values, whose fp16 scales are subnormal or round to 0, dequantize to
// finite values within the block's largest magnitude plus the most a
// subnormal-rounded scale can add (2^-24 at each of up to 4096 levels: the
// K-quants' 6- or 8-bit sub-scales times their levels; llama.cpp's are the
// same bytes, test_quantize); huge ones, up to where the fp16 scale would
// overflow (as llama.cpp's does), within the round-trip bounds.
START_TEST(test_magnitudes) {
    const float tiny[] = {1e-30f, 1e-20f, 1e-8f, 1e-6f};
    for (int t = 0; t < NQ; t++) {
        DType dt = QTYPES[t];
        for (int k = 0; k < 4; k++) {
            float *x = normal_row(N, tiny[k]), amax = 0;
            for (int i = 0; i < N; i++) amax = fmaxf(amax, fabsf(x[i]));
            float *y = round_trip(x, N, dt, NULL);
            for (int i = 0; i < N; i++)
                ck_assert_msg(isfinite(y[i]) && fabsf(y[i] - x[i]) <= amax + 0x1p-24f * 4096, "%s: scale %g: element %d: x %g, dequantized %g",
                              dtype_name(dt), tiny[k], i, x[i], y[i]);
            free(x), free(y);
        }
        float *x = normal_row(N, 1e4f);
        expect_round_trip(dt, x, N, "N(0, 1e4)");
        free(x);
    }
}
END_TEST

// Finite input, finite output: every byte pattern written from random rows of
// random scales (10^-12 .. 10^4) dequantizes without NaN or inf.
START_TEST(test_finite) {
    for (int t = 0; t < NQ; t++) {
        for (int r = 0; r < 64; r++) {
            float *x = normal_row(512, powf(10, (float)(rng_uniform(&rng) * 16 - 12)));
            if (r % 4 == 1)
                for (int i = 0; i < 512; i++) x[i] = fabsf(x[i]);  // one-signed rows
            if (r % 4 == 2)
                for (int i = 0; i < 512; i++) x[i] = rng_uniform(&rng) < 0.8 ? 0 : x[i];  // sparse
            float *y = round_trip(x, 512, QTYPES[t], NULL);
            for (int i = 0; i < 512; i++) ck_assert_msg(isfinite(y[i]), "%s: row %d element %d: %g", dtype_name(QTYPES[t]), r, i, y[i]);
            free(x), free(y);
        }
    }
}
END_TEST

// Q4_K and Q5_K's AVX2 path (make_qkx2_quants with the 8 groups in 8 lanes)
// writes the scalar path's bytes: Gaussian rows of many scales, one-signed,
// sparse, constant and zero groups, groups of one value among others.
START_TEST(test_isa_paths) {
    if (dtype_isa_best() < DT_ISA_AVX2) return;
    enum { ROWS = 96,
           n = 1024 };
    float *x = malloc(ROWS * n * sizeof *x);
    for (int r = 0; r < ROWS; r++) {
        float scale = powf(10, (float)(rng_uniform(&rng) * 12 - 8)), *row = x + (size_t)r * n;
        for (int i = 0; i < n; i++) row[i] = (float)rng_normal(&rng) * scale;
        for (int i = 0; i < n; i++) {
            if (r % 5 == 1) row[i] = fabsf(row[i]);
            if (r % 5 == 2 && rng_uniform(&rng) < 0.7) row[i] = 0;
            if (r % 5 == 3 && i / 32 % 3 == 0) row[i] = i / 32 % 2 ? scale : 0;  // constant and zero groups
        }
    }
    const DType ks[] = {DT_Q4_K, DT_Q5_K};
    for (int k = 0; k < 2; k++) {
        size_t bytes = dtype_row_bytes(ks[k], (size_t)ROWS * n);
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        ck_assert_int_eq(dtype_isa_force(DT_ISA_AVX2), 0);
        ck_assert_int_eq(quant_quantize(a, x, ks[k], (size_t)ROWS * n), 0);
        ck_assert_int_eq(dtype_isa_force(DT_ISA_SCALAR), 0);
        ck_assert_int_eq(quant_quantize(b, x, ks[k], (size_t)ROWS * n), 0);
        for (size_t i = 0; i < bytes; i++)
            ck_assert_msg(a[i] == b[i], "%s: byte %zu (block %zu): avx2 0x%02x, scalar 0x%02x", dtype_name(ks[k]), i,
                          i / dtype_block_bytes(ks[k]), a[i], b[i]);
        free(a), free(b);
    }
    dtype_isa_force(dtype_isa_best());
    free(x);
}
END_TEST

// Known bytes: llama.cpp's layout, worked by hand for one block of each 32-type.
START_TEST(test_known_blocks) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);  // -16 .. 15
    uint8_t b[34];
    ck_assert_int_eq(quant_quantize(b, x, DT_Q8_0, 32), 0);
    // d = 16 / 127 (fp16 0x3008), q = round(x * 127 / 16): -127 for -16, 0 for 0
    ck_assert_int_eq(b[0] | b[1] << 8, 0x3008);
    ck_assert_int_eq((int8_t)b[2], -127);
    ck_assert_int_eq((int8_t)b[2 + 16], 0);
    ck_assert_int_eq(quant_quantize(b, x, DT_Q4_0, 32), 0);
    // max -16: d = 2 (0x4000); q = x / 2 + 8.5 truncated: -16 -> 0, 0 -> 8, 15 -> 15
    ck_assert_int_eq(b[0] | b[1] << 8, 0x4000);
    ck_assert_int_eq(b[2], 0 | 8 << 4);
    ck_assert_int_eq(b[2 + 15] >> 4, 15);
    ck_assert_int_eq(quant_quantize(b, x, DT_Q4_1, 32), 0);
    // d = 31 / 15, m = -16 (0xcc00)
    ck_assert_int_eq(b[2] | b[3] << 8, 0xcc00);
    ck_assert_int_eq(b[4] & 0xF, 0);
    ck_assert_int_eq(b[4 + 15] >> 4, 15);
}
END_TEST

// n not a multiple of the block, and dtypes pail does not quantize to: -1 and
// nothing written; n = 0 writes nothing and succeeds.
START_TEST(test_refusals) {
    float x[512] = {0};
    uint8_t b[600];
    for (int t = 0; t < NQ; t++) {
        DType dt = QTYPES[t];
        size_t be = (size_t)dtype_block(dt);
        const size_t bad[] = {1, be - 1, be + 1, 3 * be / 2, 511};
        for (int k = 0; k < 5; k++) {
            memset(b, 0x5A, sizeof b);
            ck_assert_msg(quant_quantize(b, x, dt, bad[k]) == -1, "%s: n %zu accepted", dtype_name(dt), bad[k]);
            for (size_t i = 0; i < sizeof b; i++) ck_assert_int_eq(b[i], 0x5A);
        }
        ck_assert_int_eq(quant_quantize(b, x, dt, 0), 0);
        ck_assert_int_eq(b[0], 0x5A);
    }
    const DType floats[] = {DT_F32, DT_BF16, DT_F16, DT_COUNT, (DType)-1};
    for (int k = 0; k < 5; k++) ck_assert_int_eq(quant_quantize(b, x, floats[k], 256), -1);
}
END_TEST

// llama-quantize's tensor_type_fallback (src/llama-quant.cpp) for rows whose
// length the target's block does not divide (Qwen2-0.5B's 896, 4864).
START_TEST(test_fallback) {
    ck_assert_int_eq(quant_fallback(DT_Q4_K, 2048), DT_Q4_K);
    ck_assert_int_eq(quant_fallback(DT_Q4_K, 896), DT_Q5_0);
    ck_assert_int_eq(quant_fallback(DT_Q4_K, 4864), DT_Q4_K);  // 19 * 256
    ck_assert_int_eq(quant_fallback(DT_Q5_K, 896), DT_Q5_1);
    ck_assert_int_eq(quant_fallback(DT_Q6_K, 896), DT_Q8_0);
    ck_assert_int_eq(quant_fallback(DT_Q6_K, 100), DT_F16);  // 32 does not divide it either
    ck_assert_int_eq(quant_fallback(DT_Q4_K, 16), DT_F16);
    ck_assert_int_eq(quant_fallback(DT_Q8_0, 96), DT_Q8_0);
    ck_assert_int_eq(quant_fallback(DT_Q8_0, 100), DT_F16);
    ck_assert_int_eq(quant_fallback(DT_Q4_0, 48), DT_F16);
    ck_assert_int_eq(quant_fallback(DT_BF16, 7), DT_BF16);
    ck_assert_int_eq(quant_fallback(DT_F32, 7), DT_F32);
    for (int t = 0; t < NQ; t++) {  // whatever it picks quantizes the row
        DType dt = quant_fallback(QTYPES[t], 896);
        ck_assert(dt == DT_F16 || 896 % dtype_block(dt) == 0);
    }
}
END_TEST

int main(void) {
    rng_seed(&rng, 4646, 0);
    Suite *s = suite_create("kernels_quantize");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 60);
    tcase_set_timeout(limits, 60);
    tcase_add_test(core, test_round_trip);
    tcase_add_test(core, test_deterministic);
    tcase_add_test(core, test_known_blocks);
    tcase_add_test(core, test_fallback);
    tcase_add_test(core, test_isa_paths);
    tcase_add_test(limits, test_zero_constant);
    tcase_add_test(limits, test_magnitudes);
    tcase_add_test(limits, test_finite);
    tcase_add_test(limits, test_refusals);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
