// Check suite for the storage-dtype kernels (kernels/dtype.h and the _dt
// functions of kernels.h): conversions against independent references (the
// compiler's _Float16, bit shifts, a double-precision rounding reference) on
// every instruction-set path, and every _dt product against the fp32 reference
// run on the exactly converted weights, on every path, at odd sizes; bit for bit
// where the arithmetic is the same (the mat-vec when its vector width is the
// build's, the small-T dx, the head's target rows, the embedding, DT_F32).
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/rng.h"
#include "dtype_cpu.h"
#include "kernels.h"
#include "gemm_bf16.h"
#include "matmul_amx.h"

static Rng rng;

// The vector width the fp32 mat-vec was compiled with: a bf16 / f16 variant of
// the same width sums in the same order.
#if defined(__AVX512F__)
#define BUILD_ISA DT_ISA_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define BUILD_ISA DT_ISA_AVX2
#else
#define BUILD_ISA DT_ISA_SCALAR
#endif

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform_f(&rng);
    return p;
}

static float *dup_f(const float *a, size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    memcpy(p, a, sizeof(float) * n);
    return p;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            ck_abort_msg("%s: element %zu is %.9g, reference %.9g (|diff| %.3g > %.3g)", what, i,
                         got[i], want[i], d, atol + rtol * fabs(want[i]));
    }
}

// The mat-vec (T <= matmul_small_t_max) sums in the fp32 mat-vec's order where
// the path has the build's vector width, but bf16 rows on AVX-512 (even and
// odd elements apart, dot_bf16_eo in kernels/matmul.c): those are held to the
// tolerance only.
static int matvec_same(DType dt, int isa) { return isa == BUILD_ISA && !(dt == DT_BF16 && isa == DT_ISA_AVX512); }

static void expect_same(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4))
            ck_abort_msg("%s: element %zu is %a, expected %a bit for bit", what, i, got[i], want[i]);
}

// A weight in dtype dt: W16 (n 16-bit values, rounded from uniform [-1, 1)
// with the scalar reference) and Wc, the same values as fp32 (exact).
typedef struct {
    uint16_t *w16;
    float *wc;
} DtWeight;

static float ref_to_f32(uint16_t h, DType dt) {
    return dt == DT_BF16 ? dt_bf16_to_f32(h) : dt_f16_to_f32(h);
}

static DtWeight dt_weight(size_t n, DType dt) {
    DtWeight w = {malloc(2 * (n ? n : 1)), malloc(4 * (n ? n : 1))};
    for (size_t i = 0; i < n; i++) {
        float f = -1.0f + 2.0f * rng_uniform_f(&rng);
        w.w16[i] = dt == DT_BF16 ? dt_f32_to_bf16(f) : dt_f32_to_f16(f);
        w.wc[i] = ref_to_f32(w.w16[i], dt);
    }
    return w;
}

static void dt_weight_free(DtWeight *w) { free(w->w16), free(w->wc); }

static const DType dts[2] = {DT_BF16, DT_F16};

// ---- names ----
START_TEST(test_dtype_names) {
    DType d = DT_COUNT;
    for (int i = 0; i < DT_COUNT; i++) {
        ck_assert_int_eq(dtype_parse(dtype_name((DType)i), &d), 0);
        ck_assert_int_eq(d, i);
    }
    ck_assert_str_eq(dtype_name(DT_BF16), "bf16");
    ck_assert_str_eq(dtype_name(DT_F16), "f16");
    ck_assert_str_eq(dtype_name(DT_F32), "f32");
    ck_assert_uint_eq(dtype_size(DT_F32), 4);
    ck_assert_uint_eq(dtype_size(DT_BF16), 2);
    ck_assert_uint_eq(dtype_size(DT_F16), 2);
    const char *isa = dtype_isa();
    ck_assert_msg(!strcmp(isa, "avx512") || !strcmp(isa, "avx2") || !strcmp(isa, "scalar"), "%s", isa);
}
END_TEST

START_TEST(test_dtype_parse_bad) {
    const char *bad[] = {"", "BF16", "bfloat16", "fp32", "float32", "F32", " f32", "f32 ", "f16\n",
                         "f8", "bf", "half", "bf16x", "Q4_K", "q4_K_M", "q2_k"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        DType d = DT_BF16;
        ck_assert_msg(dtype_parse(bad[i], &d) == -1, "'%s' parsed", bad[i]);
        ck_assert_int_eq(d, DT_BF16);  // untouched
    }
    DType d;
    ck_assert_int_eq(dtype_parse(NULL, &d), -1);
    ck_assert_str_eq(dtype_name(DT_COUNT), "?");
}
END_TEST

// ---- conversion to fp32: every 16-bit pattern, every path, odd alignment and length ----
START_TEST(test_dtype_to_f32_all) {
    enum { N = 65536 };
    uint8_t *raw = malloc(2 * N + 1);  // the patterns at an odd address
    float *got = malloc(4 * (N + 1));
    for (int di = 0; di < 2; di++) {
        DType dt = dts[di];
        for (uint32_t h = 0; h < N; h++) raw[1 + 2 * h] = (uint8_t)h, raw[2 + 2 * h] = (uint8_t)(h >> 8);
        for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
            ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
            // from pattern 3 on (a length not a multiple of 8, 16 or 32), past the end untouched
            got[N - 3] = 12345.0f;
            dtype_to_f32(got, raw + 1 + 6, dt, N - 3);
            ck_assert(got[N - 3] == 12345.0f);
            for (uint32_t h = 3; h < N; h++) {
                float g = got[h - 3], want;
                if (dt == DT_BF16) {
                    uint32_t b = h << 16;  // the definition: the high half of an fp32
                    memcpy(&want, &b, 4);
                } else {
                    _Float16 x;  // the compiler's conversion, independent of ours
                    uint16_t hh = (uint16_t)h;
                    memcpy(&x, &hh, 2);
                    want = (float)x;
                }
                if (isnan(want))
                    ck_assert_msg(isnan(g) && signbit(g) == signbit(want), "%s 0x%04x (%s): %a",
                                  dtype_name(dt), h, dtype_isa_label((DtIsa)isa), g);
                else
                    ck_assert_msg(!memcmp(&g, &want, 4), "%s 0x%04x (%s): %a, want %a",
                                  dtype_name(dt), h, dtype_isa_label((DtIsa)isa), g, want);
            }
            for (int n = 0; n < 40; n++) {  // every short length: the vector tails
                float small[40];
                for (int i = 0; i < 40; i++) small[i] = -7.0f;
                dtype_to_f32(small, raw + 1 + 2 * 0x3c00, dt, n);
                for (int i = 0; i < 40; i++)
                    ck_assert(i < n ? small[i] == ref_to_f32((uint16_t)(0x3c00 + i), dt)
                                    : small[i] == -7.0f);
            }
        }
    }
    float f[3];
    dtype_to_f32(f, (float[]){1.5f, -2.0f, 3.25f}, DT_F32, 3);
    ck_assert(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f);
    free(raw), free(got);
}
END_TEST

// ---- rounding from fp32 ----
// Round to nearest even computed independently: the two representable
// neighbours of f (as doubles, exact) and the distance to each.
static uint16_t bf16_rne_ref(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;  // truncated, and one bf16 step out
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    if (f == flo) return (uint16_t)(lo >> 16);
    // Past the largest finite bf16 the step out is inf: IEEE rounds as if it were 2^128.
    double vhi = isinf(fhi) ? copysign(0x1p128, f) : (double)fhi;
    double dlo = fabs((double)f - flo), dhi = fabs(vhi - f);
    if (dlo < dhi || (dlo == dhi && !((lo >> 16) & 1))) return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

START_TEST(test_dtype_from_f32_known) {
    struct { float f; uint16_t bf16, f16; } k[] = {
        {1.0f, 0x3f80, 0x3c00},
        {-2.0f, 0xc000, 0xc000},
        {0.0f, 0x0000, 0x0000},
        {-0.0f, 0x8000, 0x8000},
        {1.0f + 0x1p-8f, 0x3f80, 0x3c04},               // bf16 tie: even stays (f16 exact)
        {1.0f + 3 * 0x1p-8f, 0x3f82, 0x3c0c},           // bf16 tie: odd rounds up
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81, 0x3c04},    // above the bf16 tie
        {1.0f + 0x1p-11f, 0x3f80, 0x3c00},              // f16 tie: even stays
        {1.0f + 3 * 0x1p-11f, 0x3f80, 0x3c02},          // f16 tie: odd rounds up
        {65504.0f, 0x4780, 0x7bff},                     // the largest half
        {65519.99f, 0x4780, 0x7bff},                    // just below the overflow midpoint
        {65520.0f, 0x4780, 0x7c00},                     // the midpoint: to inf
        {1e6f, 0x4974, 0x7c00},
        {-1e6f, 0xc974, 0xfc00},
        {INFINITY, 0x7f80, 0x7c00},
        {-INFINITY, 0xff80, 0xfc00},
        {0x1p-14f, 0x3880, 0x0400},                     // smallest normal half
        {0x1p-24f, 0x3380, 0x0001},                     // smallest subnormal half
        {0x1p-25f, 0x3300, 0x0000},                     // half of it: tie to even (0)
        {0x1.8p-25f, 0x3340, 0x0001},                   // above the tie
        {3 * 0x1p-25f, 0x33c0, 0x0002},                 // 1.5 units: tie to even (2)
        {-5 * 0x1p-25f, 0xb420, 0x8002},                // 2.5 units: tie to even (2)
        {0x1p-130f, 0x0008, 0x0000},                    // an fp32 subnormal: bf16 keeps it
        {3.0e38f, 0x7f62, 0x7c00},
        {0x1.fffffep127f, 0x7f80, 0x7c00},              // FLT_MAX rounds up to inf in bf16
    };
    for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
        ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
            uint16_t b, h;
            dtype_from_f32(&b, &k[i].f, DT_BF16, 1);
            dtype_from_f32(&h, &k[i].f, DT_F16, 1);
            ck_assert_msg(b == k[i].bf16, "bf16(%a) = 0x%04x, want 0x%04x (%s)", k[i].f, b,
                          k[i].bf16, dtype_isa());
            ck_assert_msg(h == k[i].f16, "f16(%a) = 0x%04x, want 0x%04x (%s)", k[i].f, h,
                          k[i].f16, dtype_isa());
        }
        // NaN stays NaN (quiet, sign kept), on the vector lanes as on the tail
        float nans[20];
        for (int i = 0; i < 20; i++) {
            uint32_t u = (i & 1 ? 0xff800001u : 0x7fa00000u) + (uint32_t)i;  // signalling payloads
            memcpy(&nans[i], &u, 4);
        }
        uint16_t b[20], h[20];
        dtype_from_f32(b, nans, DT_BF16, 20);
        dtype_from_f32(h, nans, DT_F16, 20);
        for (int i = 0; i < 20; i++) {
            ck_assert_msg(isnan(dt_bf16_to_f32(b[i])) && (b[i] & 0x40), "bf16 NaN %d: 0x%04x", i, b[i]);
            ck_assert_uint_eq(b[i] >> 15, (unsigned)(i & 1));
            ck_assert_msg(h[i] == (i & 1 ? 0xfe00 : 0x7e00), "f16 NaN %d: 0x%04x (%s)", i, h[i], dtype_isa());
        }
    }
}
END_TEST

// Every path against the independent references on a sweep of bit patterns
// (all exponents, mantissas stepping by a prime so that ties and carries
// occur), plus every fp32 in the f16 subnormal range's neighbourhood sampled
// densely, converted in blocks of odd lengths.
START_TEST(test_dtype_from_f32_sweep) {
    size_t n = 0, cap = 200000;
    float *f = malloc(4 * cap);
    for (uint64_t u = 0; u < 0x100000000ull; u += 65521) {
        uint32_t b = (uint32_t)u;
        memcpy(&f[n++], &b, 4);
    }
    for (uint32_t b = 0x32f00000u; b < 0x38900000u && n < cap - 2; b += 997) {
        memcpy(&f[n++], &b, 4);
        uint32_t neg = b | 0x80000000u;
        memcpy(&f[n++], &neg, 4);
    }
    uint16_t *got = malloc(2 * n), *want_b = malloc(2 * n), *want_h = malloc(2 * n);
    for (size_t i = 0; i < n; i++) {
        want_b[i] = bf16_rne_ref(f[i]);
        _Float16 r = (_Float16)f[i];
        memcpy(&want_h[i], &r, 2);
        ck_assert_msg(dt_f32_to_bf16(f[i]) == want_b[i], "scalar bf16(%a)", f[i]);
        if (!isnan(f[i])) ck_assert_msg(dt_f32_to_f16(f[i]) == want_h[i], "scalar f16(%a)", f[i]);
    }
    for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
        ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
        for (int di = 0; di < 2; di++) {
            DType dt = dts[di];
            for (size_t i0 = 0; i0 < n; i0 += 4099) {
                size_t m = n - i0 < 4099 ? n - i0 : 4099;
                dtype_from_f32(got + i0, f + i0, dt, m);
            }
            for (size_t i = 0; i < n; i++) {
                if (dt == DT_F16 && isnan(f[i])) {
                    ck_assert_uint_eq(got[i], dt_f32_to_f16(f[i]));
                    continue;
                }
                uint16_t w = dt == DT_BF16 ? want_b[i] : want_h[i];
                ck_assert_msg(got[i] == w, "%s(%a) = 0x%04x, want 0x%04x (%s)", dtype_name(dt),
                              f[i], got[i], w, dtype_isa());
            }
        }
    }
    free(f), free(got), free(want_b), free(want_h);
}
END_TEST

// ---- matmul ----
// Against the double reference on the converted weight: the same tolerance as
// check_kernels' fp32 fast-vs-ref (1e-4 abs + rel; fp32 sums over K <= 600
// products round at ~1e-6). Reading a wrong element or converting a bf16 as an
// f16 gives O(0.1..1). Exact against the fp32 function on the converted weight
// where the arithmetic is the same: the mat-vec when this path has the build's
// vector width, and the small-T dx always (element-wise products).
static void matmul_dt_case(int T, int K, int N, int with_bias, float alpha, float beta) {
    float *x = rnd((size_t)T * K, -1, 1), *bias = with_bias ? rnd(N, -1, 1) : NULL;
    float *o0 = rnd((size_t)T * N, -1, 1), *dout = rnd((size_t)T * N, -1, 1);
    float *dx0 = rnd((size_t)T * K, -1, 1), *dW0 = rnd((size_t)N * K, -1, 1), *db0 = rnd(N, -1, 1);
    int saved = matmul_small_t_max;
    size_t saved_panel = matmul_dt_panel_floats;
    int saved_rows = matmul_dt_panel_rows;
    char what[160];
    for (int di = 0; di < 2; di++) {
        DType dt = dts[di];
        DtWeight w = dt_weight((size_t)N * K, dt);
        float *ref = dup_f(o0, (size_t)T * N), *dxr = dup_f(dx0, (size_t)T * K);
        float *dWr = dup_f(dW0, (size_t)N * K), *dbr = dup_f(db0, N);
        matmul_forward_ref(ref, x, w.wc, bias, T, K, N, alpha, beta);
        matmul_backward_ref(dxr, dWr, dbr, dout, x, w.wc, T, K, N, alpha, beta);
        for (int isa = 0; isa <= (int)dtype_isa_best(); isa++)
            for (int path = 0; path < 3; path++) {  // sgemm, sgemm with tiny panels, small-T kernel
                ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
                matmul_small_t_max = path == 2 ? 1 << 20 : 0;
                matmul_dt_panel_floats = path == 1 ? 1 : saved_panel;  // 1: the smallest (4096)
                matmul_dt_panel_rows = path == 1 ? 16 : saved_rows;     // panels of 16 columns
                const char *pn = matmul_path_name(T, dt);
                float *out = dup_f(o0, (size_t)T * N), *o32 = dup_f(o0, (size_t)T * N);
                matmul_forward_dt(out, x, w.w16, dt, bias, T, K, N, alpha, beta);
                matmul_forward(o32, x, w.wc, bias, T, K, N, alpha, beta);
                snprintf(what, sizeof what, "matmul_forward_dt %s T=%d K=%d N=%d [%s]", dtype_name(dt), T, K, N, pn);
                expect_close(what, out, ref, (size_t)T * N, 1e-4, 1e-4);
                if (path == 2 && matvec_same(dt, isa)) expect_same(what, out, o32, (size_t)T * N);
                float *dx = dup_f(dx0, (size_t)T * K), *dW = dup_f(dW0, (size_t)N * K), *db = dup_f(db0, N);
                float *dx32 = dup_f(dx0, (size_t)T * K);
                matmul_backward_dt(dx, dW, db, dout, x, w.w16, dt, T, K, N, alpha, beta);
                matmul_backward(dx32, NULL, NULL, dout, x, w.wc, T, K, N, alpha, beta);
                snprintf(what, sizeof what, "matmul_backward_dt dx %s T=%d K=%d N=%d [%s]", dtype_name(dt), T, K, N, pn);
                expect_close(what, dx, dxr, (size_t)T * K, 1e-4, 1e-4);
                if (path == 2) expect_same(what, dx, dx32, (size_t)T * K);
                expect_close("matmul_backward_dt dW", dW, dWr, (size_t)N * K, 1e-4, 1e-4);
                expect_close("matmul_backward_dt dbias", db, dbr, N, 1e-4, 1e-4);
                free(out), free(o32), free(dx), free(dW), free(db), free(dx32);
            }
        free(ref), free(dxr), free(dWr), free(dbr);
        dt_weight_free(&w);
    }
    // DT_F32: the fp32 functions, bit for bit, on both paths
    float *W = rnd((size_t)N * K, -1, 1);
    for (int path = 0; path < 2; path++) {
        matmul_small_t_max = path ? 1 << 20 : 0;
        float *a = dup_f(o0, (size_t)T * N), *b = dup_f(o0, (size_t)T * N);
        matmul_forward_dt(a, x, W, DT_F32, bias, T, K, N, alpha, beta);
        matmul_forward(b, x, W, bias, T, K, N, alpha, beta);
        expect_same("matmul_forward_dt f32", a, b, (size_t)T * N);
        float *dxa = dup_f(dx0, (size_t)T * K), *dxb = dup_f(dx0, (size_t)T * K);
        matmul_backward_dt(dxa, NULL, NULL, dout, x, W, DT_F32, T, K, N, alpha, beta);
        matmul_backward(dxb, NULL, NULL, dout, x, W, T, K, N, alpha, beta);
        expect_same("matmul_backward_dt f32", dxa, dxb, (size_t)T * K);
        free(a), free(b), free(dxa), free(dxb);
    }
    matmul_small_t_max = saved;
    matmul_dt_panel_floats = saved_panel;
    matmul_dt_panel_rows = saved_rows;
    dtype_isa_force(dtype_isa_best());
    free(W), free(x), free(bias), free(o0), free(dout), free(dx0), free(dW0), free(db0);
}

START_TEST(test_matmul_dt_small) {
    for (int T = 1; T <= 9; T++) matmul_dt_case(T, 17 + 16 * (T % 3), 9 + 7 * T, T & 1, 1.0f, T % 3 == 0 ? 0.5f : 0.0f);
    matmul_dt_case(1, 513, 257, 1, 2.0f, 0.0f);  // K past 32 with a tail of 1
    matmul_dt_case(4, 64, 1, 0, 1.0f, 1.0f);     // one output column
    matmul_dt_case(3, 7, 33, 0, 0.5f, 1.0f);     // K below one vector
}
END_TEST

START_TEST(test_matmul_dt_large) {
    matmul_dt_case(33, 100, 70, 1, 1.0f, 0.0f);
    matmul_dt_case(70, 600, 31, 0, -1.0f, 1.0f);  // N below a thread's 32 columns: split by rows
    matmul_dt_case(300, 513, 257, 1, 0.5f, 0.5f); // N past the panel of 16 rows, K past kb
    matmul_dt_case(65, 40, 600, 0, 1.0f, 0.0f);   // dx: K of 40 columns, N = 600 rows in panels
}
END_TEST

// ---- the bf16 GEMMs on AMX tiles and on AVX-512 BF16 (kernels/gemm_bf16.h) ----
// Their contract: activations rounded to bf16 (nearest even), the bf16 weight
// as stored, fp32 accumulation. So against the double reference run on the
// rounded activations each is as close as an fp32 GEMM (1e-4 abs + rel), and
// against the reference on the unrounded ones it must differ (the rounding
// happened: the tests above, which force the exact path, cannot see it). dW
// (fp32 dout and x) and dbias are not rounded. A path the CPU lacks: nothing
// to run, and asking for it changes nothing.
static float *rounded_bf16(const float *x, size_t n) {
    float *p = malloc(4 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = dt_bf16_to_f32(dt_f32_to_bf16(x[i]));
    return p;
}

static void gemm_case(GemmBf16 g, int T, int K, int N, int with_bias, float alpha, float beta) {
    float *x = rnd((size_t)T * K, -1, 1), *bias = with_bias ? rnd(N, -1, 1) : NULL;
    float *o0 = rnd((size_t)T * N, -1, 1), *dout = rnd((size_t)T * N, -1, 1);
    float *dx0 = rnd((size_t)T * K, -1, 1), *dW0 = rnd((size_t)N * K, -1, 1), *db0 = rnd(N, -1, 1);
    float *xb = rounded_bf16(x, (size_t)T * K), *doutb = rounded_bf16(dout, (size_t)T * N);
    DtWeight w = dt_weight((size_t)N * K, DT_BF16);
    float *ref = dup_f(o0, (size_t)T * N), *ref_x = dup_f(o0, (size_t)T * N), *dxr = dup_f(dx0, (size_t)T * K);
    float *dWr = dup_f(dW0, (size_t)N * K), *dbr = dup_f(db0, N);
    matmul_forward_ref(ref, xb, w.wc, bias, T, K, N, alpha, beta);
    matmul_forward_ref(ref_x, x, w.wc, bias, T, K, N, alpha, beta);
    matmul_backward_ref(dxr, NULL, NULL, doutb, NULL, w.wc, T, K, N, alpha, beta);
    matmul_backward_ref(NULL, dWr, dbr, dout, x, w.wc, T, K, N, alpha, beta);
    int saved = matmul_small_t_max;
    matmul_small_t_max = 0;  // every T on the GEMM path
    ck_assert_int_eq(gemm_bf16_force(g), 0);
    char what[200];
    snprintf(what, sizeof what, "%s T=%d K=%d N=%d [%s]", gemm_bf16_word(g), T, K, N, matmul_path_name(T, DT_BF16));
    ck_assert_msg(strstr(what, g == GEMM_BF16_AMX ? "AMX tiles" : "vdpbf16ps"), "%s", what);
    float *out = dup_f(o0, (size_t)T * N), *dx = dup_f(dx0, (size_t)T * K), *dW = dup_f(dW0, (size_t)N * K),
          *db = dup_f(db0, N);
    matmul_forward_dt(out, x, w.w16, DT_BF16, bias, T, K, N, alpha, beta);
    matmul_backward_dt(dx, dW, db, dout, x, w.w16, DT_BF16, T, K, N, alpha, beta);
    ck_assert_int_eq(gemm_bf16_force(GEMM_BF16_EXACT), 0);
    matmul_small_t_max = saved;
    expect_close(what, out, ref, (size_t)T * N, 1e-4, 1e-4);
    expect_close(what, dx, dxr, (size_t)T * K, 1e-4, 1e-4);
    expect_close(what, dW, dWr, (size_t)N * K, 1e-4, 1e-4);
    expect_close(what, db, dbr, N, 1e-4, 1e-4);
    double far = 0;
    for (size_t i = 0; i < (size_t)T * N; i++) far = fmax(far, fabs((double)out[i] - ref_x[i]));
    ck_assert_msg(far > 1e-5, "%s: equals the unrounded reference (%.3g): were the activations rounded?", what, far);
    free(out), free(dx), free(dW), free(db), free(ref), free(ref_x), free(dxr), free(dWr), free(dbr);
    free(x), free(xb), free(bias), free(o0), free(dout), free(doutb), free(dx0), free(dW0), free(db0);
    dt_weight_free(&w);
}

static void gemm_cases(GemmBf16 g) {
    gemm_case(g, 9, 49, 37, 1, 1.0f, 0.0f);      // tails everywhere: rows, reduction, columns
    gemm_case(g, 33, 100, 70, 1, 0.7f, 0.5f);    // alpha, beta
    gemm_case(g, 17, 64, 5, 0, 1.0f, 1.0f);      // fewer column pairs than threads: split by rows
    gemm_case(g, 70, 600, 31, 0, -1.0f, 1.0f);
    gemm_case(g, 300, 513, 257, 1, 0.5f, 0.5f);  // several row blocks, odd K
    gemm_case(g, 65, 40, 600, 0, 1.0f, 0.0f);    // dx: 600 reduction rows, 40 columns
    gemm_case(g, 40, 4100, 33, 0, 1.0f, 0.0f);   // forward reduction past one block (4096)
    gemm_case(g, 40, 33, 4130, 0, 1.0f, 0.5f);   // dx reduction past one block
    gemm_case(g, 100, 3, 20, 1, 1.0f, 0.0f);     // K below one pair
    gemm_case(g, 64, 512, 1408, 0, 1.0f, 0.0f);  // a model's shape
    gemm_case(g, 13, 1031, 45, 1, 1.0f, 0.5f);   // odd reduction across blocks (1024), 12 + 4..11 + 1 rows
    gemm_case(g, 29, 77, 1027, 0, 0.5f, 0.0f);   // dx: odd reduction rows, 12 + 4 + 1 rows, 1027 % 32 columns
    // f16 weights keep the exact path (neither has f16)
    ck_assert_int_eq(gemm_bf16_force(g), 0);
    ck_assert(!strstr(matmul_path_name(1000, DT_F16), "AMX") && !strstr(matmul_path_name(1000, DT_F16), "vdpbf16ps"));
    // a lower ISA turns it off with the rest
    ck_assert_int_eq(dtype_isa_force(DT_ISA_AVX2), 0);
    ck_assert_int_eq(gemm_bf16_path(), GEMM_BF16_EXACT);
    ck_assert_int_eq(dtype_isa_force(dtype_isa_best()), 0);
    ck_assert_int_eq(gemm_bf16_path(), g);
    ck_assert_int_eq(gemm_bf16_force(GEMM_BF16_EXACT), 0);
}

START_TEST(test_matmul_amx) {
    if (!amx_bf16_usable()) {
        ck_assert_int_eq(gemm_bf16_force(GEMM_BF16_AMX), -1);
        ck_assert(!strstr(matmul_path_name(1000, DT_BF16), "AMX"));
        printf("SKIP: AMX: this CPU (or kernel) has no AMX-BF16 tiles\n");
        return;
    }
    gemm_cases(GEMM_BF16_AMX);
}
END_TEST

START_TEST(test_matmul_avx512bf16) {
    if (!gemm_bf16_usable(GEMM_BF16_AVX512)) {
        ck_assert_int_eq(gemm_bf16_force(GEMM_BF16_AVX512), -1);
        ck_assert(!strstr(matmul_path_name(1000, DT_BF16), "vdpbf16ps"));
        printf("SKIP: AVX-512 BF16: this CPU has no vdpbf16ps\n");
        return;
    }
    gemm_cases(GEMM_BF16_AVX512);
}
END_TEST

// The adapted projection with a stored-dtype W (A, B fp32).
START_TEST(test_matmul_lora_dt) {
    int shapes[][4] = {{1, 64, 300, 16}, {3, 100, 70, 5}, {8, 33, 16, 16}, {1, 512, 1408, 16}, {20, 64, 129, 8}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int T = shapes[c][0], K = shapes[c][1], N = shapes[c][2], R = shapes[c][3];
        for (int di = 0; di < 2; di++) {
            DtWeight w = dt_weight((size_t)N * K, dts[di]);
            float *x = rnd((size_t)T * K, -1, 1), *A = rnd((size_t)R * K, -1, 1), *B = rnd((size_t)N * R, -1, 1);
            float *bias = rnd(N, -1, 1), *o0 = rnd((size_t)T * N, -1, 1), *ref = dup_f(o0, (size_t)T * N);
            float *lar = rnd((size_t)T * R, 0, 1);
            matmul_forward_lora_ref(ref, lar, x, w.wc, bias, A, B, T, K, N, R, 0.75f, 1.0f);
            for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
                ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
                float *out = dup_f(o0, (size_t)T * N), *o32 = dup_f(o0, (size_t)T * N);
                float *la = rnd((size_t)T * R, 0, 1), *la32 = rnd((size_t)T * R, 0, 1);
                matmul_forward_lora_dt(out, la, x, w.w16, dts[di], bias, A, B, T, K, N, R, 0.75f, 1.0f);
                matmul_forward_lora(o32, la32, x, w.wc, bias, A, B, T, K, N, R, 0.75f, 1.0f);
                char what[128];
                snprintf(what, sizeof what, "matmul_forward_lora_dt %s T=%d K=%d N=%d R=%d (%s)",
                         dtype_name(dts[di]), T, K, N, R, dtype_isa());
                expect_close(what, out, ref, (size_t)T * N, 1e-4, 1e-4);
                expect_close("matmul_forward_lora_dt la", la, lar, (size_t)T * R, 1e-4, 1e-4);
                if (T <= matmul_small_t_max && matvec_same(dts[di], isa)) expect_same(what, out, o32, (size_t)T * N);
                free(out), free(o32), free(la), free(la32);
            }
            dtype_isa_force(dtype_isa_best());
            float *a = dup_f(o0, (size_t)T * N), *b = dup_f(o0, (size_t)T * N);  // DT_F32
            float *la = rnd((size_t)T * R, 0, 1), *lb = rnd((size_t)T * R, 0, 1);
            matmul_forward_lora_dt(a, la, x, w.wc, DT_F32, bias, A, B, T, K, N, R, 0.75f, 1.0f);
            matmul_forward_lora(b, lb, x, w.wc, bias, A, B, T, K, N, R, 0.75f, 1.0f);
            expect_same("matmul_forward_lora_dt f32", a, b, (size_t)T * N);
            free(a), free(b), free(la), free(lb);
            free(x), free(A), free(B), free(bias), free(o0), free(ref), free(lar);
            dt_weight_free(&w);
        }
    }
}
END_TEST

// ---- logprob with a stored-dtype head ----
// Same tolerances as check_kernels' logprob (2e-5 on logp, lse, entropy; 1e-4
// on gradients) against the naive double log-softmax on the converted head.
static void logprob_dt_case(int T, int C, int V, float temp, int vchunk) {
    float *h = rnd((size_t)T * C, -1, 1), *dlp = rnd(T, -1, 1), *dent = rnd(T, -1, 1);
    int *tg = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) tg[t] = (int)rng_below(&rng, V);
    tg[0] = V - 1;
    float *ws = malloc(sizeof(float) * logprob_workspace_floats(T, vchunk));
    float *ws3 = malloc(sizeof(float) * (3 * V + 5));
    PailErr err = {0};
    char what[128];
    for (int di = 0; di < 2; di++) {
        DType dt = dts[di];
        DtWeight w = dt_weight((size_t)V * C, dt);
        float *lpr = rnd(T, 0, 1), *entr = rnd(T, 0, 1), *lser = rnd(T, 0, 1);
        float *dhr = rnd((size_t)T * C, 0, 1), *dW0 = rnd((size_t)V * C, -1, 1), *dWr = dup_f(dW0, (size_t)V * C);
        float *dhr2 = rnd((size_t)T * C, 0, 1);
        ck_assert_int_eq(logprob_forward_ref(lpr, entr, lser, h, w.wc, tg, T, C, V, temp, &err), 0);
        logprob_backward_ref(dhr, dWr, dlp, dent, h, w.wc, tg, T, C, V, temp);
        logprob_backward_ref(dhr2, NULL, dlp, NULL, h, w.wc, tg, T, C, V, temp);
        for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
            ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
            snprintf(what, sizeof what, "logprob %s T=%d C=%d V=%d vchunk %d (%s)", dtype_name(dt), T, C, V,
                     vchunk, dtype_isa());
            float *lp = rnd(T, 0, 1), *ent = rnd(T, 0, 1), *lse = rnd(T, 0, 1);
            ck_assert_int_eq(logprob_forward_dt(lp, ent, lse, h, w.w16, dt, tg, T, C, V, temp, ws, vchunk, &err), 0);
            expect_close(what, lp, lpr, T, 2e-5, 2e-5);
            expect_close(what, lse, lser, T, 2e-5, 2e-5);
            expect_close(what, ent, entr, T, 2e-5, 2e-5);
            if (T <= matmul_small_t_max && matvec_same(dt, isa)) {  // the chunk products are the fp32 ones
                float *lp32 = rnd(T, 0, 1);
                ck_assert_int_eq(logprob_forward(lp32, NULL, NULL, h, w.wc, tg, T, C, V, temp, ws, vchunk, &err), 0);
                expect_same(what, lp, lp32, T);
                free(lp32);
            }
            // backward with entropy and a head gradient (which never reads w_lm)
            float *dh = rnd((size_t)T * C, 0, 1), *dW = dup_f(dW0, (size_t)V * C);
            logprob_backward_dt(dh, dW, dlp, dent, h, w.w16, dt, tg, lse, ent, T, C, V, temp, ws, vchunk);
            expect_close("logprob_backward_dt dhidden", dh, dhr, (size_t)T * C, 1e-4, 1e-4);
            expect_close("logprob_backward_dt dw_lm", dW, dWr, (size_t)V * C, 1e-4, 1e-4);
            logprob_backward_dt(dh, NULL, dlp, NULL, h, w.w16, dt, tg, lse, NULL, T, C, V, temp, ws, vchunk);
            expect_close("logprob_backward_dt dhidden (no entropy)", dh, dhr2, (size_t)T * C, 1e-4, 1e-4);
            // the expectation path: vocab chunks of (3 V + 5) / T - 3 columns, a ragged last
            float *ex = rnd((size_t)T * C, 0, 1), *lp3 = rnd(T, 0, 1), *ent3 = rnd(T, 0, 1), *lse3 = rnd(T, 0, 1);
            ck_assert_int_eq(logprob_forward_expect_dt(lp3, ent3, lse3, ex, h, w.w16, dt, tg, T, C, V, temp, ws3,
                                                       3 * V + 5, &err), 0);
            expect_close("logprob_forward_expect_dt logp", lp3, lpr, T, 2e-5, 2e-5);
            expect_close("logprob_forward_expect_dt lse", lse3, lser, T, 2e-5, 2e-5);
            expect_close("logprob_forward_expect_dt entropy", ent3, entr, T, 2e-5, 2e-5);
            float *dh3 = rnd((size_t)T * C, 0, 1), *dh32 = rnd((size_t)T * C, 0, 1);
            logprob_backward_expect_dt(dh3, dlp, ex, w.w16, dt, tg, T, C, temp);
            expect_close("logprob_backward_expect_dt dhidden", dh3, dhr2, (size_t)T * C, 1e-4, 1e-4);
            logprob_backward_expect(dh32, dlp, ex, w.wc, tg, T, C, temp);  // same products on fp32 rows
            expect_same("logprob_backward_expect_dt vs fp32", dh3, dh32, (size_t)T * C);
            ck_assert_int_eq(logprob_forward_expect_dt(lp3, NULL, NULL, ex, h, w.w16, dt, tg, T, C, V, temp, ws3,
                                                       (size_t)T * 4 - 1, &err), -1);
            ck_assert_msg(strstr(err.msg, "holds no chunk"), "%s", err.msg);
            free(lp), free(ent), free(lse), free(dh), free(dW), free(ex), free(lp3), free(ent3), free(lse3);
            free(dh3), free(dh32);
        }
        dtype_isa_force(dtype_isa_best());
        // DT_F32 is the fp32 head bit for bit
        float *a = rnd(T, 0, 1), *b = rnd(T, 0, 1), *da = rnd((size_t)T * C, 0, 1), *db = rnd((size_t)T * C, 0, 1);
        ck_assert_int_eq(logprob_forward_dt(a, NULL, NULL, h, w.wc, DT_F32, tg, T, C, V, temp, ws, vchunk, &err), 0);
        ck_assert_int_eq(logprob_forward(b, NULL, NULL, h, w.wc, tg, T, C, V, temp, ws, vchunk, &err), 0);
        expect_same("logprob_forward_dt f32", a, b, T);
        logprob_backward_dt(da, NULL, dlp, NULL, h, w.wc, DT_F32, tg, lser, NULL, T, C, V, temp, ws, vchunk);
        logprob_backward(db, NULL, dlp, NULL, h, w.wc, tg, lser, NULL, T, C, V, temp, ws, vchunk);
        expect_same("logprob_backward_dt f32", da, db, (size_t)T * C);
        free(a), free(b), free(da), free(db);
        free(lpr), free(entr), free(lser), free(dhr), free(dW0), free(dWr), free(dhr2);
        dt_weight_free(&w);
    }
    free(h), free(dlp), free(dent), free(tg), free(ws), free(ws3);
}

START_TEST(test_logprob_dt) {
    logprob_dt_case(1, 48, 300, 1.0f, 64);
    logprob_dt_case(5, 33, 257, 0.7f, 7);     // many chunks; C odd (rows at odd 2-byte offsets)
    logprob_dt_case(13, 48, 300, 0.7f, 128);  // sgemm path, ragged last chunk
}
END_TEST

// ---- embedding: rows converted exactly ----
START_TEST(test_embedding_dt) {
    int T = 11, C = 301, V = 17;
    int tok[11] = {3, 0, 16, 3, 3, 5, 16, 1, 2, 3, 9};
    PailErr err = {0};
    for (int di = 0; di < 2; di++) {
        DtWeight w = dt_weight((size_t)V * C, dts[di]);
        float *want = rnd((size_t)T * C, 0, 1);
        ck_assert_int_eq(embedding_forward(want, w.wc, tok, T, C, V, &err), 0);
        for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
            ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
            float *o = rnd((size_t)T * C, 0, 1);
            ck_assert_int_eq(embedding_forward_dt(o, w.w16, dts[di], tok, T, C, V, &err), 0);
            expect_same("embedding_forward_dt", o, want, (size_t)T * C);
            free(o);
        }
        int bad[2] = {1, 17};
        float o[2 * 301];
        ck_assert_int_eq(embedding_forward_dt(o, w.w16, dts[di], bad, 2, C, V, &err), -1);
        ck_assert_msg(strstr(err.msg, "token 17 at position 1"), "%s", err.msg);
        free(want);
        dt_weight_free(&w);
    }
    dtype_isa_force(dtype_isa_best());
    float tab[6] = {1, 2, 3, 4, 5, 6}, o[4];
    int t2[2] = {2, 0};
    ck_assert_int_eq(embedding_forward_dt(o, tab, DT_F32, t2, 2, 2, 3, &err), 0);
    ck_assert(o[0] == 5 && o[1] == 6 && o[2] == 1 && o[3] == 2);
}
END_TEST

// ---- the instruction set: PAIL_KERNELS_ISA, read once, in a fresh process ----
static char self_exe[4096];

static void isa_in_child(const char *env, char *out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s%s '%s' --print-isa 2>&1", env ? "PAIL_KERNELS_ISA=" : "env -u PAIL_KERNELS_ISA",
             env ? env : "", self_exe);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    ck_assert_int_eq(pclose(p), 0);
}

START_TEST(test_isa_env) {
    char out[4096], want[64];
    const char *best = dtype_isa_label(dtype_isa_best());
    isa_in_child(NULL, out, sizeof out);
    snprintf(want, sizeof want, "isa %s\n", best);
    ck_assert_msg(!strcmp(out, want), "unset: '%s'", out);
    isa_in_child("scalar", out, sizeof out);
    ck_assert_msg(!strcmp(out, "isa scalar\n"), "scalar: '%s'", out);
    ck_assert_msg(strstr(out, "isa scalar"), "%s", out);
    if (dtype_isa_best() >= DT_ISA_AVX2) {
        isa_in_child("avx2", out, sizeof out);
        ck_assert_msg(!strcmp(out, "isa avx2\n"), "avx2: '%s'", out);
    }
    isa_in_child("avx3", out, sizeof out);  // a bad spelling: one line naming it, then the best
    ck_assert_msg(strstr(out, "PAIL_KERNELS_ISA=avx3 is not avx512, avx2 or scalar"), "%s", out);
    snprintf(want, sizeof want, "\nisa %s\n", best);
    ck_assert_msg(strstr(out, want), "%s", out);
    // the paths' names follow the choice
    ck_assert_int_eq(dtype_isa_force(DT_ISA_SCALAR), 0);
    ck_assert_str_eq(matmul_path_name(1, DT_BF16), "mat-vec, bf16 rows converted in registers (scalar)");
    ck_assert_str_eq(matmul_path_name(matmul_small_t_max + 1, DT_F16),
                     "sgemm over f32 panels converted from f16 (scalar)");
    ck_assert_str_eq(matmul_path_name(1000, DT_F32), "sgemm (fp32 weights)");
    ck_assert(strstr(matmul_path_name(1, DT_F32), "fp32 rows"));
    ck_assert_int_eq(dtype_isa_force(dtype_isa_best()), 0);
    ck_assert(strstr(matmul_path_name(1, DT_BF16), best));
    ck_assert_int_eq(dtype_isa_force(DT_ISA_COUNT), -1);
}
END_TEST

// PAIL_KERNELS_GEMM: unset, the best the CPU has (amx, else avx512bf16 on an
// AMD CPU, else exact); each word takes its path where the CPU has it.
static void print_gemm(const char *env, char *out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s '%s' --print-gemm 2>&1", env, self_exe);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    ck_assert_int_eq(pclose(p), 0);
}

START_TEST(test_gemm_env) {
    char out[4096];
    static const char *const marks[GEMM_BF16_COUNT] = {"sgemm over f32 panels converted from bf16", "vdpbf16ps",
                                                      "AMX tiles"};
    __builtin_cpu_init();
    GemmBf16 best = gemm_bf16_usable(GEMM_BF16_AMX)                                  ? GEMM_BF16_AMX
                    : gemm_bf16_usable(GEMM_BF16_AVX512) && __builtin_cpu_is("amd") ? GEMM_BF16_AVX512
                                                                                     : GEMM_BF16_EXACT;
    print_gemm("env -u PAIL_KERNELS_GEMM", out, sizeof out);
    ck_assert_msg(strstr(out, marks[best]), "default: %s", out);
    for (int g = 0; g < GEMM_BF16_COUNT; g++) {
        char env[64];
        snprintf(env, sizeof env, "PAIL_KERNELS_GEMM=%s", gemm_bf16_word((GemmBf16)g));
        print_gemm(env, out, sizeof out);
        if (gemm_bf16_usable((GemmBf16)g))
            ck_assert_msg(strstr(out, marks[g]) && !strstr(out, "warn:"), "%s: %s", env, out);
        else
            ck_assert_msg(strstr(out, "does not have it") && strstr(out, marks[best]), "%s: %s", env, out);
    }
    // a bad spelling: one line naming it, and the default
    print_gemm("PAIL_KERNELS_GEMM=fast", out, sizeof out);
    ck_assert_msg(strstr(out, "PAIL_KERNELS_GEMM=fast is not exact, avx512bf16 or amx: ignored"), "%s", out);
    ck_assert_msg(strstr(out, marks[best]), "%s", out);
}
END_TEST

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--print-isa")) {  // for test_isa_env
        printf("isa %s\n", dtype_isa());
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--print-gemm")) {  // for test_gemm_env
        printf("%s\n", matmul_path_name(1000, DT_BF16));
        return 0;
    }
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (n > 0) self_exe[n] = 0;
    rng_seed(&rng, 777, 0);
    // The tests of the exact path (every product's fp32 arithmetic on the
    // converted weight) run with it forced; test_matmul_amx and
    // test_matmul_avx512bf16 turn the others on.
    gemm_bf16_force(GEMM_BF16_EXACT);
    Suite *s = suite_create("kernels_dtype");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    tcase_add_test(core, test_dtype_names);
    tcase_add_test(core, test_dtype_to_f32_all);
    tcase_add_test(core, test_dtype_from_f32_known);
    tcase_add_test(core, test_matmul_dt_small);
    tcase_add_test(core, test_matmul_dt_large);
    tcase_add_test(core, test_matmul_lora_dt);
    tcase_add_test(core, test_matmul_amx);
    tcase_add_test(core, test_matmul_avx512bf16);
    tcase_add_test(core, test_logprob_dt);
    tcase_add_test(core, test_embedding_dt);
    tcase_add_test(limits, test_dtype_parse_bad);
    tcase_add_test(limits, test_dtype_from_f32_sweep);
    tcase_add_test(limits, test_isa_env);
    tcase_add_test(limits, test_gemm_env);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
