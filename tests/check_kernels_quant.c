// Check suite for the kernels on GGUF block-quantized weights (DT_Q8_0 ..
// DT_Q6_K, kernels/matmul_quant.c and the _dt kernels of kernels.h): every
// product against the double-precision reference (matmul_*_ref) run on the
// weight dequantized by quant_dequant (gguf-py's floats), on every
// instruction-set path this CPU has, for T on both sides of matmul_small_t_max
// and K of 1, 2, 3 blocks and a model's width. Weights are random bytes with
// sane fp16 scales (every bit pattern of the quants and sub-block scales
// occurs; no quantizer needed). The mat-vec sums the block's products before
// its scale (and a min times x's block sum), so it is held to 1e-5 of the
// products' magnitude sum |x| |W|; the GEMMs run sgemm on the exact
// dequantized panels; the embedding and the head's target rows are exact.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "dtype_cpu.h"
#include "gemm_bf16.h"
#include "kernels.h"
#include "quant.h"

static Rng rng;

static const DType qdts[] = {DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
enum { NQ = sizeof qdts / sizeof qdts[0] };

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

static float *abs_f(const float *a, size_t n) {
    float *p = dup_f(a, n);
    for (size_t i = 0; i < n; i++) p[i] = fabsf(p[i]);
    return p;
}

static void put_f16(unsigned char *p, float f) {
    uint16_t h = dt_f32_to_f16(f);
    memcpy(p, &h, 2);
}

// A quantized weight (N, K): q, N rows of dtype_row_bytes(dt, K) random bytes
// whose fp16 scales are set to sane values (d > 0 of the size that keeps |W|
// near 1, mins negative), and wc, q dequantized by the reference.
typedef struct {
    unsigned char *q;
    float *wc;
    size_t row_bytes;
} QWeight;

static QWeight qweight(DType dt, int N, int K) {
    QWeight w;
    w.row_bytes = dtype_row_bytes(dt, (size_t)K);
    size_t nbytes = w.row_bytes * N, bb = dtype_block_bytes(dt);
    w.q = malloc(nbytes ? nbytes : 1);
    w.wc = malloc(sizeof(float) * ((size_t)N * K + 1));
    for (size_t i = 0; i < nbytes; i++) w.q[i] = (unsigned char)rng_u64(&rng);
    for (size_t b = 0; b < nbytes; b += bb) {
        unsigned char *p = w.q + b;
        float u = 0.5f + rng_uniform_f(&rng), v = 0.5f + rng_uniform_f(&rng);
        switch (dt) {
        case DT_Q8_0: put_f16(p, u / 64); break;
        case DT_Q4_0: put_f16(p, u / 4); break;
        case DT_Q5_0: put_f16(p, u / 8); break;
        case DT_Q4_1: put_f16(p, u / 8), put_f16(p + 2, -v); break;
        case DT_Q5_1: put_f16(p, u / 16), put_f16(p + 2, -v); break;
        case DT_Q4_K: put_f16(p, u / 256), put_f16(p + 2, v / 32); break;
        case DT_Q5_K: put_f16(p, u / 512), put_f16(p + 2, v / 32); break;
        case DT_Q6_K: put_f16(p + 208, u / 1024); break;
        default: ck_abort_msg("not a quantized dtype");
        }
    }
    for (int n = 0; n < N; n++) quant_dequant(w.wc + (size_t)n * K, w.q + n * w.row_bytes, dt, (size_t)K);
    return w;
}

static void qweight_free(QWeight *w) { free(w->q), free(w->wc); }

// |got - want| <= rtol * mag + 1e-30 for every element, mag a magnitude that
// bounds the sums' rounding (the products' sum of absolute values).
static void expect_mag(const char *what, const float *got, const float *want, const float *mag, size_t n,
                       double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]), tol = rtol * mag[i] + 1e-30;
        if (!(d <= tol))
            ck_abort_msg("%s: element %zu is %.9g, reference %.9g (|diff| %.3g > %.3g = %.0e x magnitude %.4g)", what,
                         i, got[i], want[i], d, tol, rtol, mag[i]);
    }
}

static void expect_same(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4))
            ck_abort_msg("%s: element %zu is %a, expected %a bit for bit", what, i, got[i], want[i]);
}

// The tolerance must tell a wrong layout apart: got has to be further than it
// from the reference on wbad (the dequantized W with each row's first two
// elements swapped, as a path reading the block in the wrong order would).
static void expect_discerning(const char *what, const float *got, const float *wbad_ref, const float *mag,
                              size_t n, double rtol) {
    for (size_t i = 0; i < n; i++)
        if (fabs((double)got[i] - wbad_ref[i]) > rtol * mag[i]) return;
    ck_abort_msg("%s: also within tolerance of the product on a wrongly laid-out W", what);
}

static const double RTOL = 1e-5;

// Forward, LoRA forward and backward of one shape for one dtype on every ISA.
static void quant_case(DType dt, int T, int K, int N, float alpha, float beta) {
    enum { R = 5 };
    QWeight w = qweight(dt, N, K);
    float *x = rnd((size_t)T * K, -1, 1), *bias = rnd(N, -1, 1), *o0 = rnd((size_t)T * N, -1, 1);
    float *A = rnd((size_t)R * K, -1, 1), *B = rnd((size_t)N * R, -1, 1);
    float *dout = rnd((size_t)T * N, -1, 1), *dx0 = rnd((size_t)T * K, -1, 1);
    float *dW0 = rnd((size_t)N * K, -1, 1), *db0 = rnd(N, -1, 1);
    // references on the dequantized W, and the magnitudes of their sums
    float *ref = dup_f(o0, (size_t)T * N), *mag = dup_f(o0, (size_t)T * N);
    matmul_forward_ref(ref, x, w.wc, bias, T, K, N, alpha, beta);
    float *ax = abs_f(x, (size_t)T * K), *aw = abs_f(w.wc, (size_t)N * K), *ab = abs_f(bias, N);
    float *ao = abs_f(o0, (size_t)T * N);
    memcpy(mag, ao, sizeof(float) * T * N);
    matmul_forward_ref(mag, ax, aw, ab, T, K, N, fabsf(alpha), fabsf(beta));
    float *wbad = dup_f(w.wc, (size_t)N * K), *refbad = dup_f(o0, (size_t)T * N);
    for (int n = 0; n < N; n++) {
        float *r = wbad + (size_t)n * K, t = r[0];
        r[0] = r[1], r[1] = t;
    }
    matmul_forward_ref(refbad, x, wbad, bias, T, K, N, alpha, beta);
    float *lref = dup_f(o0, (size_t)T * N), *laref = rnd((size_t)T * R, 0, 1), *lmag = dup_f(ao, (size_t)T * N);
    matmul_forward_lora_ref(lref, laref, x, w.wc, bias, A, B, T, K, N, R, 0.75f, beta);
    float *aA = abs_f(A, (size_t)R * K), *aB = abs_f(B, (size_t)N * R), *lamag = rnd((size_t)T * R, 0, 1);
    matmul_forward_lora_ref(lmag, lamag, ax, aw, ab, aA, aB, T, K, N, R, 0.75f, fabsf(beta));
    float *dxr = dup_f(dx0, (size_t)T * K), *dxmag = abs_f(dx0, (size_t)T * K), *adout = abs_f(dout, (size_t)T * N);
    matmul_backward_ref(dxr, NULL, NULL, dout, x, w.wc, T, K, N, alpha, beta);
    matmul_backward_ref(dxmag, NULL, NULL, adout, ax, aw, T, K, N, fabsf(alpha), fabsf(beta));
    // dW and dbias never read W: the fp32 path's own
    float *dWr = dup_f(dW0, (size_t)N * K), *dbr = dup_f(db0, N), *dxf = dup_f(dx0, (size_t)T * K);
    matmul_backward(dxf, dWr, dbr, dout, x, w.wc, T, K, N, alpha, beta);
    char what[256];
    for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
        ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
        snprintf(what, sizeof what, "matmul_forward_dt %s T=%d K=%d N=%d (%s)", dtype_name(dt), T, K, N,
                 matmul_path_name(T, dt));
        float *out = dup_f(o0, (size_t)T * N);
        matmul_forward_dt(out, x, w.q, dt, bias, T, K, N, alpha, beta);
        expect_mag(what, out, ref, mag, (size_t)T * N, RTOL);
        expect_discerning(what, out, refbad, mag, (size_t)T * N, RTOL);
        float *lo = dup_f(o0, (size_t)T * N), *la = rnd((size_t)T * R, 0, 1);
        matmul_forward_lora_dt(lo, la, x, w.q, dt, bias, A, B, T, K, N, R, 0.75f, beta);
        snprintf(what, sizeof what, "matmul_forward_lora_dt %s T=%d K=%d N=%d (%s)", dtype_name(dt), T, K, N,
                 dtype_isa());
        expect_mag(what, lo, lref, lmag, (size_t)T * N, RTOL);
        expect_mag(what, la, laref, lamag, (size_t)T * R, RTOL);
        float *dx = dup_f(dx0, (size_t)T * K), *dW = dup_f(dW0, (size_t)N * K), *db = dup_f(db0, N);
        matmul_backward_dt(dx, dW, db, dout, x, w.q, dt, T, K, N, alpha, beta);
        snprintf(what, sizeof what, "matmul_backward_dt dx %s T=%d K=%d N=%d (%s)", dtype_name(dt), T, K, N,
                 dtype_isa());
        expect_mag(what, dx, dxr, dxmag, (size_t)T * K, RTOL);
        expect_same("matmul_backward_dt dW", dW, dWr, (size_t)N * K);
        expect_same("matmul_backward_dt dbias", db, dbr, N);
        free(out), free(lo), free(la), free(dx), free(dW), free(db);
    }
    dtype_isa_force(dtype_isa_best());
    free(x), free(bias), free(o0), free(A), free(B), free(dout), free(dx0), free(dW0), free(db0), free(ref), free(mag);
    free(ax), free(aw), free(ab), free(ao), free(wbad), free(refbad), free(lref), free(laref), free(lmag);
    free(aA), free(aB), free(lamag), free(dxr), free(dxmag), free(adout), free(dWr), free(dbr), free(dxf);
    qweight_free(&w);
}

static const int Ts[] = {1, 2, 3, 4, 5, 8, 17, 64, 200};

// K of 1, 2 and 3 blocks, N odd, every T
START_TEST(test_quant_matmul_blocks) {
    for (int di = 0; di < NQ; di++) {
        DType dt = qdts[di];
        int be = dtype_block(dt);
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            int T = Ts[ti];
            quant_case(dt, T, be, 7, 1.0f, 0.0f);
            quant_case(dt, T, 2 * be, 33, 0.5f, 1.0f);
            quant_case(dt, T, 3 * be, T < 64 ? 67 : 19, -1.0f, 0.5f);
        }
    }
}
END_TEST

// A model's width: K = 896 (Qwen2.5-0.5B's C) for the 32-blocks, 1280 (5
// blocks) for the K-quants; N odd and past a thread's 16-row blocks.
START_TEST(test_quant_matmul_wide) {
    int Tw[] = {1, 3, 4, 8, 17, 64};
    for (int di = 0; di < NQ; di++) {
        DType dt = qdts[di];
        int K = dtype_block(dt) == 256 ? 1280 : 896;
        for (size_t ti = 0; ti < sizeof Tw / sizeof Tw[0]; ti++) quant_case(dt, Tw[ti], K, 45, 1.0f, 0.0f);
    }
}
END_TEST

// The GEMMs' panels cut at blocks: a budget of 4096 floats makes panels of
// 16 rows by one 256-block of the reduction (forward) and of 256 columns (dx),
// and a dx of 1280 columns splits across threads at a block (768 + 512).
START_TEST(test_quant_matmul_panels) {
    size_t saved = matmul_dt_panel_floats;
    int saved_rows = matmul_dt_panel_rows;
    matmul_dt_panel_floats = 4096;
    for (int di = 0; di < NQ; di++) {
        quant_case(qdts[di], 40, 1280, 37, 1.0f, 0.5f);
        quant_case(qdts[di], 17, 768, 600, 1.0f, 0.0f);
    }
    matmul_dt_panel_floats = saved;
    matmul_dt_panel_rows = 48;
    for (int di = 0; di < NQ; di++) quant_case(qdts[di], 33, 512, 101, 1.0f, 0.0f);
    matmul_dt_panel_rows = saved_rows;
}
END_TEST

// ---- dequantization: every ISA's dtype_to_f32 is quant_dequant bit for bit ----
// Blocks of random bytes, and then with random fp16 scales over the whole
// finite range (subnormal, negative, up to 65504: products that round in fp32,
// so a fused multiply-add or another order of the operations would show).
START_TEST(test_quant_dequant_exact) {
    enum { NB = 64 };
    for (int di = 0; di < NQ; di++) {
        DType dt = qdts[di];
        int K = NB * dtype_block(dt);
        QWeight w = qweight(dt, 1, K);
        for (int pass = 0; pass < 2; pass++) {
            if (pass)  // every 16-bit scale field random (finite)
                for (size_t b = 0; b < w.row_bytes; b += dtype_block_bytes(dt))
                    for (int f = 0; f < 2; f++) {
                        size_t off = dt == DT_Q6_K ? 208 : (size_t)2 * f;
                        uint16_t h;
                        do h = (uint16_t)rng_u64(&rng);
                        while ((h & 0x7c00) == 0x7c00);
                        memcpy(w.q + b + off, &h, 2);
                    }
            quant_dequant(w.wc, w.q, dt, (size_t)K);
            for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
                ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
                float *y = rnd((size_t)K, 0, 1);
                dtype_to_f32(y, w.q, dt, (size_t)K);
                char what[96];
                snprintf(what, sizeof what, "dtype_to_f32 %s pass %d (%s)", dtype_name(dt), pass, dtype_isa());
                expect_same(what, y, w.wc, (size_t)K);
                // a part of a row from a block's start: the panels' and the head's slices
                dtype_to_f32(y, w.q + dtype_block_bytes(dt), dt, (size_t)dtype_block(dt));
                expect_same(what, y, w.wc + dtype_block(dt), (size_t)dtype_block(dt));
                free(y);
            }
        }
        qweight_free(&w);
    }
    dtype_isa_force(dtype_isa_best());
}
END_TEST

// ---- embedding: a row dequantized exactly ----
START_TEST(test_quant_embedding) {
    int T = 9, V = 13, tok[9] = {3, 0, 12, 3, 5, 12, 1, 2, 9};
    PailErr err = {0};
    for (int di = 0; di < NQ; di++) {
        DType dt = qdts[di];
        int C = 2 * dtype_block(dt);
        QWeight w = qweight(dt, V, C);
        float *want = rnd((size_t)T * C, 0, 1);
        ck_assert_int_eq(embedding_forward(want, w.wc, tok, T, C, V, &err), 0);
        for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
            ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
            float *o = rnd((size_t)T * C, 0, 1);
            ck_assert_int_eq(embedding_forward_dt(o, w.q, dt, tok, T, C, V, &err), 0);
            expect_same("embedding_forward_dt", o, want, (size_t)T * C);
            free(o);
        }
        int bad[2] = {1, 13};
        float *o = rnd((size_t)2 * C, 0, 1);
        ck_assert_int_eq(embedding_forward_dt(o, w.q, dt, bad, 2, C, V, &err), -1);
        ck_assert_msg(strstr(err.msg, "token 13 at position 1"), "%s", err.msg);
        free(o), free(want);
        qweight_free(&w);
    }
    dtype_isa_force(dtype_isa_best());
}
END_TEST

// ---- logprob with a quantized head ----
// Against the fp32 kernels on the dequantized head (the same tolerances as
// check_kernels_dtype: 2e-5 on logp, lse, entropy; 1e-4 on gradients) and the
// head's target rows (backward_expect) bit for bit.
static void logprob_q_case(DType dt, int T, int V, float temp, int vchunk, float cap) {
    int C = 2 * dtype_block(dt);
    QWeight w = qweight(dt, V, C);
    float *h = rnd((size_t)T * C, -1, 1), *dlp = rnd(T, -1, 1), *dent = rnd(T, -1, 1);
    int *tg = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) tg[t] = (int)rng_below(&rng, V);
    tg[0] = V - 1;
    float *ws = malloc(sizeof(float) * logprob_workspace_floats(T, vchunk)), *ws3 = malloc(sizeof(float) * (3 * V + 5));
    PailErr err = {0};
    float *lpr = rnd(T, 0, 1), *entr = rnd(T, 0, 1), *lser = rnd(T, 0, 1), *dhr = rnd((size_t)T * C, 0, 1);
    float *dhr2 = rnd((size_t)T * C, 0, 1);
    ck_assert_int_eq(logprob_forward_ref_cap(lpr, entr, lser, h, w.wc, tg, T, C, V, temp, cap, &err), 0);
    logprob_backward_ref_cap(dhr, NULL, dlp, dent, h, w.wc, tg, T, C, V, temp, cap);
    logprob_backward_ref_cap(dhr2, NULL, dlp, NULL, h, w.wc, tg, T, C, V, temp, cap);
    char what[160];
    for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
        ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
        snprintf(what, sizeof what, "logprob %s T=%d C=%d V=%d cap %g (%s)", dtype_name(dt), T, C, V, (double)cap,
                 dtype_isa());
        float *lp = rnd(T, 0, 1), *ent = rnd(T, 0, 1), *lse = rnd(T, 0, 1);
        ck_assert_int_eq(
            logprob_forward_cap_dt(lp, ent, lse, h, w.q, dt, tg, T, C, V, temp, cap, ws, vchunk, &err), 0);
        for (int t = 0; t < T; t++)
            ck_assert_msg(fabsf(lp[t] - lpr[t]) <= 2e-5f + 2e-5f * fabsf(lpr[t]) &&
                              fabsf(lse[t] - lser[t]) <= 2e-5f + 2e-5f * fabsf(lser[t]) &&
                              fabsf(ent[t] - entr[t]) <= 2e-5f + 2e-5f * fabsf(entr[t]),
                          "%s: t=%d logp %g/%g lse %g/%g entropy %g/%g", what, t, lp[t], lpr[t], lse[t], lser[t],
                          ent[t], entr[t]);
        float *dh = rnd((size_t)T * C, 0, 1);
        logprob_backward_cap_dt(dh, NULL, dlp, dent, h, w.q, dt, tg, lse, ent, T, C, V, temp, cap, ws, vchunk);
        for (size_t i = 0; i < (size_t)T * C; i++)
            ck_assert_msg(fabsf(dh[i] - dhr[i]) <= 1e-4f + 1e-4f * fabsf(dhr[i]), "%s backward: %zu %g/%g", what, i,
                          dh[i], dhr[i]);
        // the expectation path: blocks of 3 rows, a ragged last
        float *ex = rnd((size_t)T * C, 0, 1), *lp3 = rnd(T, 0, 1), *ex32 = rnd((size_t)T * C, 0, 1);
        float *lp32 = rnd(T, 0, 1);
        ck_assert_int_eq(logprob_forward_expect_cap_dt(lp3, NULL, NULL, ex, h, w.q, dt, tg, T, C, V, temp, cap, ws3,
                                                       3 * V + 5, &err),
                         0);
        ck_assert_int_eq(logprob_forward_expect_cap_dt(lp32, NULL, NULL, ex32, h, w.wc, DT_F32, tg, T, C, V, temp, cap,
                                                       ws3, 3 * V + 5, &err),
                         0);
        for (int t = 0; t < T; t++)
            ck_assert_msg(fabsf(lp3[t] - lpr[t]) <= 2e-5f + 2e-5f * fabsf(lpr[t]), "%s expect: t=%d %g/%g", what, t,
                          lp3[t], lpr[t]);
        float *dh3 = rnd((size_t)T * C, 0, 1), *dh32 = rnd((size_t)T * C, 0, 1);
        // the same expectation into both: the target rows' part must be the fp32 one bit for bit
        logprob_backward_expect_cap_dt(dh3, dlp, ex32, w.q, dt, tg, T, C, temp, cap, h);
        logprob_backward_expect_cap_dt(dh32, dlp, ex32, w.wc, DT_F32, tg, T, C, temp, cap, h);
        if (cap > 0)  // the recomputed tanh: the same dot products on the same floats
            expect_same("logprob_backward_expect_cap_dt (quantized vs fp32 rows)", dh3, dh32, (size_t)T * C);
        else
            expect_same("logprob_backward_expect_dt (quantized vs fp32 rows)", dh3, dh32, (size_t)T * C);
        logprob_backward_expect_cap_dt(dh3, dlp, ex, w.q, dt, tg, T, C, temp, cap, h);
        for (size_t i = 0; i < (size_t)T * C; i++)
            ck_assert_msg(fabsf(dh3[i] - dhr2[i]) <= 1e-4f + 1e-4f * fabsf(dhr2[i]), "%s expect backward: %zu %g/%g",
                          what, i, dh3[i], dhr2[i]);
        free(lp), free(ent), free(lse), free(dh), free(ex), free(lp3), free(ex32), free(lp32), free(dh3), free(dh32);
    }
    dtype_isa_force(dtype_isa_best());
    free(h), free(dlp), free(dent), free(tg), free(ws), free(ws3), free(lpr), free(entr), free(lser), free(dhr);
    free(dhr2);
    qweight_free(&w);
}

START_TEST(test_quant_logprob) {
    for (int di = 0; di < NQ; di++) {
        logprob_q_case(qdts[di], 1, 300, 1.0f, 64, 0.0f);
        logprob_q_case(qdts[di], 5, 257, 0.7f, 7, 0.0f);     // many chunks
        logprob_q_case(qdts[di], 13, 300, 0.7f, 128, 0.0f);  // sgemm path, ragged last chunk
        logprob_q_case(qdts[di], 3, 100, 1.0f, 64, 30.0f);   // a softcap
        logprob_q_case(qdts[di], 11, 100, 0.8f, 64, 30.0f);
    }
}
END_TEST

// The names say which path runs.
START_TEST(test_quant_path_names) {
    for (int di = 0; di < NQ; di++) {
        DType dt = qdts[di];
        for (int isa = 0; isa <= (int)dtype_isa_best(); isa++) {
            ck_assert_int_eq(dtype_isa_force((DtIsa)isa), 0);
            const char *s = matmul_path_name(1, dt), *g = matmul_path_name(matmul_small_t_max + 1, dt);
            ck_assert_msg(strstr(s, "mat-vec on ") && strstr(s, dtype_name(dt)) &&
                              strstr(s, isa == DT_ISA_SCALAR ? "(scalar)" : "(avx2)"),
                          "%s", s);
            ck_assert_msg(strstr(g, "sgemm over f32 panels dequantized from ") && strstr(g, dtype_name(dt)), "%s", g);
        }
    }
    dtype_isa_force(dtype_isa_best());
    ck_assert_str_eq(matmul_path_name(1, (DType)DT_COUNT), "?");
    ck_assert(strstr(matmul_path_name(1, DT_BF16), "bf16 rows"));
}
END_TEST

int main(void) {
    rng_seed(&rng, 4242, 0);
    gemm_bf16_force(GEMM_BF16_EXACT);
    Suite *s = suite_create("kernels_quant");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 240);
    tcase_set_timeout(limits, 120);
    tcase_add_test(core, test_quant_dequant_exact);
    tcase_add_test(core, test_quant_matmul_blocks);
    tcase_add_test(core, test_quant_matmul_wide);
    tcase_add_test(core, test_quant_embedding);
    tcase_add_test(core, test_quant_logprob);
    tcase_add_test(limits, test_quant_matmul_panels);
    tcase_add_test(limits, test_quant_path_names);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
