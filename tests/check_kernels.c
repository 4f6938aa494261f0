// Check suite for kernels/: every fast CPU path against its plain-loop reference
// on random inputs (T=1, odd sizes, packed rows of 3 sequences), the logprob op
// against a naive full log-softmax, packed attention against per-sequence runs,
// and KV-cache decode against the full forward; every op on a caller's OpenMP
// team against the same op on its own. Gradients: check_kernels_grad.c.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "backend.h"
#include "core/rng.h"
#include "gemm_bf16.h"
#include "gemm_f32.h"
#include "kernels.h"
#include "simd.h"

static Rng rng;

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

// |got - want| <= atol + rtol * |want| for every element, else fail naming the
// first offending index.
static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            ck_abort_msg("%s: element %zu is %.9g, reference %.9g (|diff| %.3g > %.3g)", what, i,
                         got[i], want[i], d, atol + rtol * fabs(want[i]));
    }
}

// ---- matmul ----
// Tolerance 1e-4 abs + 1e-4 rel: the fp32 sums over K <= 600 products of values
// in [-1,1] round to ~1e-6 (errors grow ~sqrt(K) * 6e-8 * |partial sums|); an
// indexing or blocking bug gives O(0.1..1) errors.
static void matmul_case(int T, int K, int N, int with_bias, float alpha, float beta) {
    float *x = rnd((size_t)T * K, -1, 1), *W = rnd((size_t)N * K, -1, 1);
    float *bias = with_bias ? rnd(N, -1, 1) : NULL, *o0 = rnd((size_t)T * N, -1, 1);
    float *ref = dup_f(o0, (size_t)T * N), *out = dup_f(o0, (size_t)T * N);
    matmul_forward_ref(ref, x, W, bias, T, K, N, alpha, beta);
    char what[128];
    int saved = matmul_small_t_max;
    for (int path = 0; path < 2; path++) {  // 0: sgemm, 1: small-T kernel
        matmul_small_t_max = path ? 1 << 20 : 0;
        memcpy(out, o0, sizeof(float) * T * N);
        matmul_forward(out, x, W, bias, T, K, N, alpha, beta);
        snprintf(what, sizeof what, "matmul_forward %s T=%d K=%d N=%d", path ? "small" : gemm_f32_word(gemm_f32_path()), T, K, N);
        expect_close(what, out, ref, (size_t)T * N, 1e-4, 1e-4);
    }
    // backward: dx with beta, dW and dbias accumulate onto nonzero values
    float *dout = rnd((size_t)T * N, -1, 1), *dx0 = rnd((size_t)T * K, -1, 1);
    float *dW0 = rnd((size_t)N * K, -1, 1), *db0 = rnd(N, -1, 1);
    float *dxr = dup_f(dx0, (size_t)T * K), *dWr = dup_f(dW0, (size_t)N * K), *dbr = dup_f(db0, N);
    matmul_backward_ref(dxr, dWr, dbr, dout, x, W, T, K, N, alpha, beta);
    for (int path = 0; path < 2; path++) {
        matmul_small_t_max = path ? 1 << 20 : 0;
        float *dx = dup_f(dx0, (size_t)T * K), *dW = dup_f(dW0, (size_t)N * K), *db = dup_f(db0, N);
        matmul_backward(dx, dW, db, dout, x, W, T, K, N, alpha, beta);
        snprintf(what, sizeof what, "matmul_backward dx %s T=%d K=%d N=%d", path ? "small" : gemm_f32_word(gemm_f32_path()), T, K, N);
        expect_close(what, dx, dxr, (size_t)T * K, 1e-4, 1e-4);
        expect_close("matmul_backward dW", dW, dWr, (size_t)N * K, 1e-4, 1e-4);
        expect_close("matmul_backward dbias", db, dbr, N, 1e-4, 1e-4);
        free(dx), free(dW), free(db);
    }
    matmul_small_t_max = saved;
    free(x), free(W), free(bias), free(o0), free(ref), free(out);
    free(dout), free(dx0), free(dW0), free(db0), free(dxr), free(dWr), free(dbr);
}

// Every case on each fp32 GEMM this CPU has (gemm_f32.h: OpenBLAS, pail's AVX-512 one).
START_TEST(test_matmul) {
    int rows_max = gemm_f32_rows_max;
    gemm_f32_rows_max = 1 << 30;  // pail's at every T of the cases
    for (GemmF32 g = 0; g < GEMM_F32_COUNT; g++) {
    if (gemm_f32_force(g) < 0) {
        printf("SKIP: the fp32 GEMM %s: not on this CPU\n", gemm_f32_word(g));
        continue;
    }
    matmul_case(1, 64, 33, 1, 1.0f, 0.0f);
    matmul_case(1, 7, 1, 0, 1.0f, 0.0f);
    matmul_case(3, 17, 9, 0, 0.5f, 1.0f);
    matmul_case(5, 100, 70, 1, 1.0f, 1.0f);
    matmul_case(7, 128, 100, 1, 2.0f, 0.0f);
    matmul_case(8, 513, 257, 0, 1.0f, 0.0f);
    matmul_case(9, 100, 71, 1, 1.0f, 0.5f);
    matmul_case(33, 64, 129, 1, 1.0f, 0.0f);
    matmul_case(70, 600, 31, 0, -1.0f, 1.0f);
    // LoRA shapes: C 16 columns wide (x A^T; dx of B; dW of B) is split by rows
    matmul_case(300, 40, 16, 0, 1.0f, 0.0f);
    matmul_case(301, 16, 200, 1, 0.5f, 1.0f);
    matmul_case(1030, 16, 12, 0, 1.0f, 1.0f);
    // pail's: reduction blocks (512) and their tails, 12 + 4 + 1 column tails, 12-row blocks
    matmul_case(45, 1100, 29, 1, 1.0f, 0.5f);
    matmul_case(29, 77, 1043, 0, 0.5f, 1.0f);
    matmul_case(100, 576, 1536, 0, 1.0f, 0.0f);
    }
    gemm_f32_force(GEMM_F32_DEFAULT);
    gemm_f32_rows_max = rows_max;
}
END_TEST

// ---- a LoRA-adapted projection in one pass vs the three products in double ----
START_TEST(test_matmul_lora) {
    int shapes[][4] = {{1, 64, 300, 16}, {3, 100, 70, 5}, {8, 33, 16, 16}, {1, 512, 1408, 16}, {20, 64, 129, 8}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int T = shapes[c][0], K = shapes[c][1], N = shapes[c][2], R = shapes[c][3];
        for (int v = 0; v < 2; v++) {  // no bias, beta 0 / bias, beta 1
            float *x = rnd((size_t)T * K, -1, 1), *W = rnd((size_t)N * K, -1, 1), *A = rnd((size_t)R * K, -1, 1);
            float *B = rnd((size_t)N * R, -1, 1), *bias = v ? rnd(N, -1, 1) : NULL, *o0 = rnd((size_t)T * N, -1, 1);
            float *out = dup_f(o0, (size_t)T * N), *ref = dup_f(o0, (size_t)T * N);
            float *la = rnd((size_t)T * R, 0, 1), *lar = rnd((size_t)T * R, 0, 1);
            matmul_forward_lora(out, la, x, W, bias, A, B, T, K, N, R, 0.75f, v ? 1.0f : 0.0f);
            matmul_forward_lora_ref(ref, lar, x, W, bias, A, B, T, K, N, R, 0.75f, v ? 1.0f : 0.0f);
            char what[96];
            snprintf(what, sizeof what, "matmul_forward_lora T=%d K=%d N=%d R=%d", T, K, N, R);
            expect_close(what, out, ref, (size_t)T * N, 1e-4, 1e-4);
            expect_close("matmul_forward_lora la", la, lar, (size_t)T * R, 1e-4, 1e-4);
            free(x), free(W), free(A), free(B), free(bias), free(o0), free(out), free(ref), free(la), free(lar);
        }
    }
}
END_TEST

// ---- rmsnorm: fp32 sums of C <= 300 squares vs double; 1e-5 abs + rel ----
START_TEST(test_rmsnorm) {
    int shapes[][2] = {{1, 1}, {1, 64}, {5, 7}, {37, 200}, {96, 16}, {3, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)R * C;
        float *x = rnd(n, -2, 2), *w = rnd(C, 0.5, 1.5), *out = rnd(n, 0, 1), *ref = rnd(n, 0, 1);
        float *rs = rnd(R, 0, 1), *rsr = rnd(R, 0, 1);
        rmsnorm_forward(out, rs, x, w, R, C, 1e-6f);
        rmsnorm_forward_ref(ref, rsr, x, w, R, C, 1e-6f);
        expect_close("rmsnorm_forward out", out, ref, n, 1e-5, 1e-5);
        expect_close("rmsnorm_forward rstd", rs, rsr, R, 1e-5, 1e-5);
        float *dout = rnd(n, -1, 1), *dx = rnd(n, 0, 1), *dxr = rnd(n, 0, 1);
        float *dw = rnd(C, -1, 1), *dwr = dup_f(dw, C);
        rmsnorm_backward(dx, dw, dout, x, w, rsr, R, C);
        rmsnorm_backward_ref(dxr, dwr, dout, x, w, rsr, R, C);
        expect_close("rmsnorm_backward dx", dx, dxr, n, 1e-5, 1e-4);
        expect_close("rmsnorm_backward dw", dw, dwr, C, 1e-4, 1e-4);
        rmsnorm_backward(dx, NULL, dout, x, w, rsr, R, C);  // frozen weight
        expect_close("rmsnorm_backward dx (no dw)", dx, dxr, n, 1e-5, 1e-4);
        memcpy(out, x, sizeof(float) * n);  // in place
        rmsnorm_forward(out, NULL, out, w, R, C, 1e-6f);
        expect_close("rmsnorm_forward in place", out, ref, n, 1e-5, 1e-5);
        free(x), free(w), free(out), free(ref), free(rs), free(rsr);
        free(dout), free(dx), free(dxr), free(dw), free(dwr);
    }
}
END_TEST

// ---- rope ----
// inv_freq against transformers 5.24 ROPE_INIT_FUNCTIONS["llama3"] for Llama 3.1
// (theta 5e5, D 128, factor 8, low 1, high 4, original 8192): index 1 is
// high-frequency (unscaled), 20 and 30 the smoothed band, 40+ divided by 8.
START_TEST(test_rope_llama3_freq) {
    float inv[64];
    RopeScaling sc = {8.0f, 1.0f, 4.0f, 8192};
    rope_inv_freq(inv, 128, 500000.0f, &sc);
    const struct { int i; double want; } hf[] = {
        {0, 1.0}, {1, 0.8146172165870667}, {20, 0.016560440883040428},
        {30, 0.0013718936825171113}, {40, 3.428102354519069e-05},
        {45, 1.2297638932068367e-05}, {50, 4.411534519022098e-06}, {63, 3.068925877869333e-07}};
    for (size_t k = 0; k < sizeof hf / sizeof hf[0]; k++)  // 2 ulp of fp32
        ck_assert_msg(fabs(inv[hf[k].i] - hf[k].want) <= 2.4e-7 * hf[k].want,
                      "inv_freq[%d] = %.9g, transformers %.9g", hf[k].i, inv[hf[k].i], hf[k].want);
    float plain[64];
    rope_inv_freq(plain, 128, 500000.0f, NULL);
    ck_assert(plain[40] > 7.9f * inv[40] && plain[40] < 8.1f * inv[40]);
    ck_assert(plain[1] == inv[1]);
}
END_TEST

// Fast and reference compute the same fp32 products in another order: 1e-6.
// Rotation preserves each pair's norm, and position 0 is the identity.
START_TEST(test_rope) {
    int shapes[][3] = {{1, 1, 2}, {5, 3, 8}, {19, 4, 64}, {7, 2, 6}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int T = shapes[s][0], nh = shapes[s][1], D = shapes[s][2], P = 50;
        float *inv = malloc(sizeof(float) * D / 2), *ct = malloc(sizeof(float) * P * D / 2),
              *st = malloc(sizeof(float) * P * D / 2);
        rope_inv_freq(inv, D, 10000.0f, NULL);
        rope_table_build(ct, st, inv, P, D);
        int *pos = malloc(sizeof(int) * T);
        for (int t = 0; t < T; t++) pos[t] = (int)rng_below(&rng, P);
        pos[0] = 0;
        size_t n = (size_t)T * nh * D;
        float *x = rnd(n, -1, 1), *out = rnd(n, 0, 1), *ref = rnd(n, 0, 1);
        rope_forward(out, x, pos, ct, st, T, nh, D);
        rope_forward_ref(ref, x, pos, ct, st, T, nh, D);
        expect_close("rope_forward", out, ref, n, 1e-6, 1e-6);
        expect_close("rope_forward pos 0 is identity", out, x, (size_t)nh * D, 0, 0);
        for (size_t r = 0; r < n / D; r++)
            for (int i = 0; i < D / 2; i++) {
                const float *a = x + r * D, *b = out + r * D;
                double n0 = a[i] * a[i] + a[i + D / 2] * a[i + D / 2];
                double n1 = b[i] * b[i] + b[i + D / 2] * b[i + D / 2];
                ck_assert_msg(fabs(n0 - n1) <= 1e-5 * (1 + n0), "rope changed a pair's norm");
            }
        float *dx = rnd(n, 0, 1), *dxr = rnd(n, 0, 1);
        rope_backward(dx, x, pos, ct, st, T, nh, D);
        rope_backward_ref(dxr, x, pos, ct, st, T, nh, D);
        expect_close("rope_backward", dx, dxr, n, 1e-6, 1e-6);
        rope_backward(out, out, pos, ct, st, T, nh, D);  // in place: R^T R = I
        expect_close("rope_backward undoes forward", out, x, n, 1e-6, 1e-6);
        free(inv), free(ct), free(st), free(pos), free(x), free(out), free(ref), free(dx), free(dxr);
    }
}
END_TEST

// rope_partial (phi3's partial_rotary_factor): the fast path against the literal
// reference (1e-6, as rope), the dims past rd passed through bit for bit (out of
// place and in place), rd = D equal to rope_forward bit for bit, and the
// backward undoing the forward.
START_TEST(test_rope_partial) {
    int shapes[][4] = {{5, 3, 16, 12}, {19, 4, 64, 48}, {7, 2, 6, 2}, {3, 2, 8, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int T = shapes[s][0], nh = shapes[s][1], D = shapes[s][2], rd = shapes[s][3], P = 50;
        float *inv = malloc(sizeof(float) * rd / 2), *ct = malloc(sizeof(float) * P * rd / 2),
              *st = malloc(sizeof(float) * P * rd / 2);
        rope_inv_freq(inv, rd, 10000.0f, NULL);
        rope_table_build(ct, st, inv, P, rd);
        int *pos = malloc(sizeof(int) * T);
        for (int t = 0; t < T; t++) pos[t] = 1 + (int)rng_below(&rng, P - 1);
        size_t n = (size_t)T * nh * D;
        float *x = rnd(n, -1, 1), *out = rnd(n, 0, 1), *ref = rnd(n, 0, 1), *y = malloc(sizeof(float) * n);
        rope_partial_forward(out, x, pos, ct, st, T, nh, D, rd);
        rope_partial_forward_ref(ref, x, pos, ct, st, T, nh, D, rd);
        expect_close("rope_partial_forward", out, ref, n, 1e-6, 1e-6);
        bool rotated = false;
        for (size_t r = 0; r < n / D; r++) {
            for (int i = rd; i < D; i++) ck_assert_msg(out[r * D + i] == x[r * D + i], "a passed dim changed");
            for (int i = 0; i < rd; i++) rotated |= out[r * D + i] != x[r * D + i];
        }
        ck_assert_msg(rotated, "rope_partial rotated nothing");
        memcpy(y, x, sizeof(float) * n);
        rope_partial_forward(y, y, pos, ct, st, T, nh, D, rd);  // in place
        expect_close("rope_partial_forward in place", y, out, n, 0, 0);
        if (rd == D) {
            rope_forward(ref, x, pos, ct, st, T, nh, D);
            expect_close("rope_partial with rd = D is rope", out, ref, n, 0, 0);
        }
        float *dx = rnd(n, 0, 1), *dxr = rnd(n, 0, 1);
        rope_partial_backward(dx, x, pos, ct, st, T, nh, D, rd);
        rope_partial_backward_ref(dxr, x, pos, ct, st, T, nh, D, rd);
        expect_close("rope_partial_backward", dx, dxr, n, 1e-6, 1e-6);
        rope_partial_backward(out, out, pos, ct, st, T, nh, D, rd);  // R^T R = I
        expect_close("rope_partial_backward undoes forward", out, x, n, 1e-6, 1e-6);
        free(inv), free(ct), free(st), free(pos), free(x), free(out), free(ref), free(y), free(dx), free(dxr);
    }
}
END_TEST

// ---- layernorm (cohere): fp32 sums of C <= 300 vs double; 1e-5 abs + rel. wrows > 1:
// the per-head weights of Command-R+'s q/k norms, row r using weight row r % wrows.
// The output has zero mean and unit variance per row before the weight ----
START_TEST(test_layernorm) {
    int shapes[][3] = {{1, 1, 1}, {1, 64, 1}, {5, 7, 1}, {37, 200, 1}, {96, 16, 4}, {3, 300, 3}, {24, 8, 6}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], C = shapes[s][1], WR = shapes[s][2];
        size_t n = (size_t)R * C, nw = (size_t)WR * C;
        float *x = rnd(n, -2, 2), *w = rnd(nw, 0.5, 1.5), *out = rnd(n, 0, 1), *ref = rnd(n, 0, 1);
        for (size_t i = 0; i < n; i++) x[i] += 3.0f;  // an offset the mean must remove
        float *rs = rnd(R, 0, 1), *rsr = rnd(R, 0, 1), *mu = rnd(R, 0, 1), *mur = rnd(R, 0, 1);
        layernorm_forward(out, mu, rs, x, w, R, C, WR, 1e-5f);
        layernorm_forward_ref(ref, mur, rsr, x, w, R, C, WR, 1e-5f);
        expect_close("layernorm_forward out", out, ref, n, 1e-5, 1e-5);
        expect_close("layernorm_forward rstd", rs, rsr, R, 1e-5, 1e-5);
        expect_close("layernorm_forward mean", mu, mur, R, 1e-5, 1e-5);
        for (int r = 0; r < R && C > 1; r++) {
            double m = 0, v = 0;
            for (int c = 0; c < C; c++) m += ref[(size_t)r * C + c] / w[(size_t)(r % WR) * C + c];
            m /= C;
            for (int c = 0; c < C; c++) {
                double z = ref[(size_t)r * C + c] / w[(size_t)(r % WR) * C + c] - m;
                v += z * z;
            }
            ck_assert_msg(fabs(m) < 1e-5 && fabs(v / C - 1) < 1e-3, "layernorm row %d: mean %g, variance %g", r, m,
                          v / C);
        }
        float *dout = rnd(n, -1, 1), *dx = rnd(n, 0, 1), *dxr = rnd(n, 0, 1);
        float *dw = rnd(nw, -1, 1), *dwr = dup_f(dw, nw);
        layernorm_backward(dx, dw, dout, x, w, mur, rsr, R, C, WR);
        layernorm_backward_ref(dxr, dwr, dout, x, w, mur, rsr, R, C, WR);
        expect_close("layernorm_backward dx", dx, dxr, n, 1e-5, 1e-4);
        expect_close("layernorm_backward dw", dw, dwr, nw, 1e-4, 1e-4);
        layernorm_backward(dx, NULL, dout, x, w, mur, rsr, R, C, WR);  // frozen weight
        expect_close("layernorm_backward dx (no dw)", dx, dxr, n, 1e-5, 1e-4);
        memcpy(out, x, sizeof(float) * n);  // in place
        layernorm_forward(out, NULL, NULL, out, w, R, C, WR, 1e-5f);
        expect_close("layernorm_forward in place", out, ref, n, 1e-5, 1e-5);
        free(x), free(w), free(out), free(ref), free(rs), free(rsr), free(mu), free(mur);
        free(dout), free(dx), free(dxr), free(dw), free(dwr);
    }
}
END_TEST

// ---- rope_interleaved (cohere): fast vs reference 1e-6; and, independently, the
// pairs (2i, 2i+1) are the half-rotation's (i, i + D/2) under a permutation of
// each head: rope_interleaved(x) = Pinv rope(P x), exactly (the same products) ----
START_TEST(test_rope_interleaved) {
    int shapes[][3] = {{1, 1, 2}, {5, 3, 8}, {19, 4, 64}, {7, 2, 6}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int T = shapes[s][0], nh = shapes[s][1], D = shapes[s][2], P = 50, half = D / 2;
        float *inv = malloc(sizeof(float) * D / 2), *ct = malloc(sizeof(float) * P * D / 2),
              *st = malloc(sizeof(float) * P * D / 2);
        rope_inv_freq(inv, D, 10000.0f, NULL);
        rope_table_build(ct, st, inv, P, D);
        int *pos = malloc(sizeof(int) * T);
        for (int t = 0; t < T; t++) pos[t] = (int)rng_below(&rng, P);
        size_t n = (size_t)T * nh * D;
        float *x = rnd(n, -1, 1), *out = rnd(n, 0, 1), *ref = rnd(n, 0, 1), *px = rnd(n, 0, 1), *pr = rnd(n, 0, 1);
        rope_interleaved_forward(out, x, pos, ct, st, T, nh, D);
        rope_interleaved_forward_ref(ref, x, pos, ct, st, T, nh, D);
        expect_close("rope_interleaved_forward", out, ref, n, 1e-6, 1e-6);
        for (size_t r = 0; r < n / D; r++)
            for (int i = 0; i < half; i++) {
                px[r * D + i] = x[r * D + 2 * i];
                px[r * D + i + half] = x[r * D + 2 * i + 1];
            }
        rope_forward(pr, px, pos, ct, st, T, nh, D);
        for (size_t r = 0; r < n / D; r++)
            for (int i = 0; i < half; i++) {
                px[r * D + 2 * i] = pr[r * D + i];
                px[r * D + 2 * i + 1] = pr[r * D + i + half];
            }
        expect_close("rope_interleaved_forward = permuted rope_forward", out, px, n, 0, 0);
        float *dx = rnd(n, 0, 1), *dxr = rnd(n, 0, 1);
        rope_interleaved_backward(dx, x, pos, ct, st, T, nh, D);
        rope_interleaved_backward_ref(dxr, x, pos, ct, st, T, nh, D);
        expect_close("rope_interleaved_backward", dx, dxr, n, 1e-6, 1e-6);
        rope_interleaved_backward(out, out, pos, ct, st, T, nh, D);  // in place: R^T R = I
        expect_close("rope_interleaved_backward undoes forward", out, x, n, 1e-6, 1e-6);
        free(inv), free(ct), free(st), free(pos), free(x), free(out), free(ref), free(px), free(pr), free(dx),
            free(dxr);
    }
}
END_TEST

// ---- attention ----
typedef struct {
    int T, H, Hkv, D, nseq, cu[8];
    float *q, *k, *v;
} AttnCase;

static AttnCase attn_make(const int *lens, int nseq, int H, int Hkv, int D) {
    AttnCase c = {.H = H, .Hkv = Hkv, .D = D, .nseq = nseq};
    for (int s = 0; s < nseq; s++) c.cu[s + 1] = c.cu[s] + lens[s];
    c.T = c.cu[nseq];
    c.q = rnd((size_t)c.T * H * D, -1.5, 1.5);
    c.k = rnd((size_t)c.T * Hkv * D, -1.5, 1.5);
    c.v = rnd((size_t)c.T * Hkv * D, -1, 1);
    return c;
}

static void attn_free(AttnCase *c) { free(c->q), free(c->k), free(c->v); }

// fp32 online softmax vs the double three-pass reference: outputs are convex
// combinations of values in [-1,1], errors ~1e-6; 2e-5 abs + rel leaves margin.
// W > 0: a sliding window (the reference starts each row's keys at i-W+1).
// attn_cap > 0: the scores' softcap (test_attention_softcap), else none.
static float attn_cap;
static void attention_case(const int *lens, int nseq, int H, int Hkv, int D, int W) {
    AttnCase c = attn_make(lens, nseq, H, Hkv, D);
    size_t nq = (size_t)c.T * H * D, nk = (size_t)c.T * Hkv * D;
    float *out = rnd(nq, 0, 1), *ref = rnd(nq, 0, 1), *lse = rnd((size_t)c.T * H, 0, 1),
          *lser = rnd((size_t)c.T * H, 0, 1);
    attention_forward_cap(out, lse, c.q, c.k, c.v, c.cu, nseq, c.T, H, Hkv, D, W, attn_cap);
    attention_forward_ref_cap(ref, lser, c.q, c.k, c.v, c.cu, nseq, c.T, H, Hkv, D, W, attn_cap);
    expect_close("attention_forward out", out, ref, nq, 2e-5, 2e-5);
    expect_close("attention_forward lse", lse, lser, (size_t)c.T * H, 2e-5, 2e-5);
    // packed equals each sequence alone
    for (int s = 0; s < nseq; s++) {
        int L = lens[s], cu1[2] = {0, L};
        if (!L) continue;
        float *o1 = rnd((size_t)L * H * D, 0, 1);
        attention_forward_cap(o1, NULL, c.q + (size_t)c.cu[s] * H * D, c.k + (size_t)c.cu[s] * Hkv * D,
                              c.v + (size_t)c.cu[s] * Hkv * D, cu1, 1, L, H, Hkv, D, W, attn_cap);
        expect_close("attention packed vs separate", out + (size_t)c.cu[s] * H * D, o1,
                     (size_t)L * H * D, 1e-6, 0);
        free(o1);
    }
    // backward: both derive dq/dk/dv differently (lse + delta vs naive softmax);
    // sums over <= 100 keys of fp32 terms: 1e-4 abs + rel.
    float *dout = rnd(nq, -1, 1);
    float *dq = rnd(nq, 0, 1), *dk = rnd(nk, 0, 1), *dv = rnd(nk, 0, 1);
    float *dqr = rnd(nq, 0, 1), *dkr = rnd(nk, 0, 1), *dvr = rnd(nk, 0, 1);
    attention_backward_cap(dq, dk, dv, dout, c.q, c.k, c.v, ref, lser, c.cu, nseq, c.T, H, Hkv, D, W, attn_cap);
    attention_backward_ref_cap(dqr, dkr, dvr, dout, c.q, c.k, c.v, ref, lser, c.cu, nseq, c.T, H, Hkv, D, W,
                               attn_cap);
    expect_close("attention_backward dq", dq, dqr, nq, 1e-4, 1e-4);
    expect_close("attention_backward dk", dk, dkr, nk, 1e-4, 1e-4);
    expect_close("attention_backward dv", dv, dvr, nk, 1e-4, 1e-4);
    free(out), free(ref), free(lse), free(lser), free(dout);
    free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr);
    attn_free(&c);
}

// Full causal attention (W = 0), then the same shapes under sliding windows.
static void attention_cases(int W) {
    int one[] = {1};
    attention_case(one, 1, 2, 1, 8, W);              // T = 1
    int three[] = {5, 70, 1};                        // crosses the 64-key block
    attention_case(three, 3, 4, 2, 16, W);
    int odd[] = {3, 0, 9, 4};                        // an empty sequence, G = 3, odd D
    attention_case(odd, 4, 3, 1, 7, W);
    int mha[] = {13, 2, 6};                          // H == Hkv
    attention_case(mha, 3, 2, 2, 32, W);
    // Tiles of 128 queries x 128 keys: several per sequence, diagonal and
    // off-diagonal, ragged ends. One thread: the backward takes the tiled path
    // whenever there are 2 (sequence, kv head) tasks per thread.
    int tiles[] = {300, 129, 7};
    int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    attention_case(tiles, 3, 4, 2, 16, W);
    omp_set_num_threads(nth);
    attention_case(tiles, 3, 4, 2, 16, W);           // the team as set (row-wise below 2 tasks a thread)
    int long1[] = {260};                             // one sequence, one kv head: row-wise backward
    attention_case(long1, 1, 2, 1, 24, W);
    int wide[] = {3, 20};                            // D beyond the tiles' 256: row-wise forward
    attention_case(wide, 2, 2, 1, 272, W);
}

START_TEST(test_attention) { attention_cases(0); }
END_TEST

// Sliding windows: 1 (each query sees itself only), 8 (inside a key chunk), 50
// (a window that starts mid-tile and mid-chunk), 128 (one tile, BQ = BK) and
// 200 (spans two key tiles); 1000 exceeds every sequence, so it equals full
// attention bit for bit.
START_TEST(test_attention_window) {
    int Ws[] = {1, 8, 50, 128, 200};
    for (int i = 0; i < 5; i++) attention_cases(Ws[i]);
    int lens[] = {300, 129, 7};
    AttnCase c = attn_make(lens, 3, 4, 2, 16);
    size_t nq = (size_t)c.T * 4 * 16;
    float *full = rnd(nq, 0, 1), *wide = rnd(nq, 0, 1), *win = rnd(nq, 0, 1);
    attention_forward(full, NULL, c.q, c.k, c.v, c.cu, 3, c.T, 4, 2, 16, 0);
    attention_forward(wide, NULL, c.q, c.k, c.v, c.cu, 3, c.T, 4, 2, 16, 1000);
    attention_forward(win, NULL, c.q, c.k, c.v, c.cu, 3, c.T, 4, 2, 16, 8);
    expect_close("attention window past the sequence = full", wide, full, nq, 0, 0);
    // and a window shorter than the sequence changes the rows past it
    ck_assert(memcmp(win, full, sizeof(float) * 8 * 4 * 16) == 0);
    ck_assert(memcmp(win + (size_t)20 * 4 * 16, full + (size_t)20 * 4 * 16, sizeof(float) * 4 * 16) != 0);
    free(full), free(wide), free(win);
    attn_free(&c);
}
END_TEST

// Softcap (gemma2's attn_logit_softcapping): cap 1.5 on scores of up to ~3 (q, k in +-1.5,
// 1/sqrt(D)), so tanh bends most of them: every shape above, full and under a window of 50, fast
// vs reference at the same tolerances (tanhf a few ulp); and the cap changes the outputs.
START_TEST(test_attention_softcap) {
    attn_cap = 1.5f;
    attention_cases(0);
    attention_cases(50);
    attn_cap = 0;
    int lens[] = {40};
    AttnCase c = attn_make(lens, 1, 2, 1, 16);
    size_t nq = (size_t)c.T * 2 * 16;
    float *a = rnd(nq, 0, 1), *b = rnd(nq, 0, 1);
    attention_forward_cap(a, NULL, c.q, c.k, c.v, c.cu, 1, c.T, 2, 1, 16, 0, 0.0f);
    attention_forward_cap(b, NULL, c.q, c.k, c.v, c.cu, 1, c.T, 2, 1, 16, 0, 1.5f);
    double most = 0;
    for (size_t i = 0; i < nq; i++) most = fmax(most, fabs((double)a[i] - b[i]));
    ck_assert_msg(most > 1e-2, "the softcap changed the outputs by %g only", most);
    free(a), free(b);
    attn_free(&c);
}
END_TEST

// Decode: the last n_s rows of each sequence through the paged KV cache equal
// the full causal forward's last rows (the same arithmetic, so 1e-6), with the
// sequences' blocks scattered over the pool out of order; under a sliding window
// (_i: W = 0, 8, 40, 66) the packed forward's windowed rows; _i 4..7 the same with a softcap 1.5.
START_TEST(test_attention_decode) {
    static const int Ws[] = {0, 8, 40, 66};
    int W = Ws[_i % 4];
    float cap = _i >= 4 ? 1.5f : 0.0f;
    int lens[] = {9, 1, 70}, nnew[] = {2, 1, 3}, nseq = 3, H = 4, Hkv = 2, D = 16, max_blocks = 2, n_blocks = 7;
    int table[] = {5, -1, 0, -1, 3, 6};  // sequence 2 spans blocks 3 and 6
    AttnCase c = attn_make(lens, nseq, H, Hkv, D);
    size_t ks = (size_t)Hkv * D, pool = (size_t)n_blocks * KV_BLOCK * ks;
    float *full = rnd((size_t)c.T * H * D, 0, 1);
    attention_forward_cap(full, NULL, c.q, c.k, c.v, c.cu, nseq, c.T, H, Hkv, D, W, cap);
    float *kc = rnd(pool, -9, 9), *vc = rnd(pool, -9, 9);
    int cu_new[4] = {0}, cache_len[3];
    for (int s = 0; s < nseq; s++) {
        for (int j = 0; j < lens[s]; j++) {
            size_t row = (size_t)table[s * max_blocks + j / KV_BLOCK] * KV_BLOCK + j % KV_BLOCK;
            memcpy(kc + row * ks, c.k + (c.cu[s] + j) * ks, sizeof(float) * ks);
            memcpy(vc + row * ks, c.v + (c.cu[s] + j) * ks, sizeof(float) * ks);
        }
        cu_new[s + 1] = cu_new[s] + nnew[s];
        cache_len[s] = lens[s];
    }
    int Tn = cu_new[nseq];
    float *qn = malloc(sizeof(float) * Tn * H * D), *want = malloc(sizeof(float) * Tn * H * D);
    for (int s = 0; s < nseq; s++) {
        size_t src = (size_t)(c.cu[s + 1] - nnew[s]) * H * D, dst = (size_t)cu_new[s] * H * D;
        memcpy(qn + dst, c.q + src, sizeof(float) * nnew[s] * H * D);
        memcpy(want + dst, full + src, sizeof(float) * nnew[s] * H * D);
    }
    float *out = rnd((size_t)Tn * H * D, 0, 1), *ref = rnd((size_t)Tn * H * D, 0, 1);
    attention_decode_forward_cap(out, qn, kc, vc, cu_new, cache_len, table, max_blocks, nseq, H, Hkv, D, W, cap);
    expect_close("attention_decode vs full forward", out, want, (size_t)Tn * H * D, 1e-6, 1e-6);
    attention_decode_forward_ref_cap(ref, qn, kc, vc, cu_new, cache_len, table, max_blocks, nseq, H, Hkv, D, W, cap);
    expect_close("attention_decode vs reference", out, ref, (size_t)Tn * H * D, 2e-5, 2e-5);
    free(full), free(kc), free(vc), free(qn), free(want), free(out), free(ref);
    attn_free(&c);
}
END_TEST

// ---- swiglu: fp32 expf vs double exp, a few ulp: 1e-6 abs + rel ----
// ---- scale: x * alpha, one rounded product per value: exact against the naive loop,
// on 1 thread and the team, in place ----
START_TEST(test_scale) {
    size_t sizes[] = {1, 7, 100003};
    float alphas[] = {0.22f, 12.0f, -3.5f};
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float *x = rnd(n, -4, 4), *want = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) want[i] = x[i] * alphas[s];
        scale_forward(x, n, alphas[s]);
        expect_close("scale_forward", x, want, n, 0, 0);
        free(x), free(want);
    }
}
END_TEST

START_TEST(test_swiglu) {
    size_t sizes[] = {1, 7, 1001};
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float *g = rnd(n, -8, 8), *u = rnd(n, -2, 2), *o = rnd(n, 0, 1), *r = rnd(n, 0, 1);
        swiglu_forward(o, g, u, n);
        swiglu_forward_ref(r, g, u, n);
        expect_close("swiglu_forward", o, r, n, 1e-6, 1e-6);
        float *d = rnd(n, -1, 1), *dg = rnd(n, 0, 1), *du = rnd(n, 0, 1), *dgr = rnd(n, 0, 1),
              *dur = rnd(n, 0, 1);
        swiglu_backward(dg, du, d, g, u, n);
        swiglu_backward_ref(dgr, dur, d, g, u, n);
        expect_close("swiglu_backward dgate", dg, dgr, n, 1e-6, 1e-5);
        expect_close("swiglu_backward dup", du, dur, n, 1e-6, 1e-5);
        free(g), free(u), free(o), free(r), free(d), free(dg), free(du), free(dgr), free(dur);
    }
}
END_TEST

// ---- geglu: fp32 expf (simd.h, <= 2 ulp) of the sigmoid form vs torch's tanh form in double;
// large |gate| (+-8) reaches the saturated tails: 1e-6 abs + 1e-5 rel ----
START_TEST(test_geglu) {
    size_t sizes[] = {1, 7, 1001};
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float *g = rnd(n, -8, 8), *u = rnd(n, -2, 2), *o = rnd(n, 0, 1), *r = rnd(n, 0, 1);
        geglu_forward(o, g, u, n);
        geglu_forward_ref(r, g, u, n);
        expect_close("geglu_forward", o, r, n, 1e-6, 1e-5);
        float *d = rnd(n, -1, 1), *dg = rnd(n, 0, 1), *du = rnd(n, 0, 1), *dgr = rnd(n, 0, 1),
              *dur = rnd(n, 0, 1);
        geglu_backward(dg, du, d, g, u, n);
        geglu_backward_ref(dgr, dur, d, g, u, n);
        expect_close("geglu_backward dgate", dg, dgr, n, 1e-6, 1e-5);
        expect_close("geglu_backward dup", du, dur, n, 1e-6, 1e-5);
        free(g), free(u), free(o), free(r), free(d), free(dg), free(du), free(dgr), free(dur);
    }
}
END_TEST

// ---- logprob vs the naive full log-softmax ----
// Logits are fp32 dot products over C = 48 (~1e-6 error each) scaled by
// 1/0.7; the streaming LSE adds a few ulp per chunk: 2e-5 abs + rel on logp,
// lse and entropy; 1e-4 on the gradients (sums over V = 300 of such terms).
static void logprob_case(int T, int C, int V, float temp, int vchunk) {
    float *h = rnd((size_t)T * C, -1, 1), *W = rnd((size_t)V * C, -1, 1);
    int *tg = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) tg[t] = (int)rng_below(&rng, V);
    tg[0] = V - 1;  // the last chunk's last column
    float *lp = rnd(T, 0, 1), *ent = rnd(T, 0, 1), *lse = rnd(T, 0, 1);
    float *lpr = rnd(T, 0, 1), *entr = rnd(T, 0, 1), *lser = rnd(T, 0, 1);
    float *ws = malloc(sizeof(float) * logprob_workspace_floats(T, vchunk));
    PailErr err = {0};
    ck_assert_int_eq(logprob_forward(lp, ent, lse, h, W, tg, T, C, V, temp, ws, vchunk, &err), 0);
    ck_assert_int_eq(logprob_forward_ref(lpr, entr, lser, h, W, tg, T, C, V, temp, &err), 0);
    expect_close("logprob_forward logp", lp, lpr, T, 2e-5, 2e-5);
    expect_close("logprob_forward lse", lse, lser, T, 2e-5, 2e-5);
    expect_close("logprob_forward entropy", ent, entr, T, 2e-5, 2e-5);
    float *lp2 = rnd(T, 0, 1);  // entropy and lse are optional
    ck_assert_int_eq(logprob_forward(lp2, NULL, NULL, h, W, tg, T, C, V, temp, ws, vchunk, &err), 0);
    expect_close("logprob_forward logp without entropy", lp2, lp, T, 0, 0);
    float *dlp = rnd(T, -1, 1), *dent = rnd(T, -1, 1);
    float *dh = rnd((size_t)T * C, 0, 1), *dhr = rnd((size_t)T * C, 0, 1);
    float *dW = rnd((size_t)V * C, -1, 1), *dWr = dup_f(dW, (size_t)V * C);
    logprob_backward(dh, dW, dlp, dent, h, W, tg, lse, ent, T, C, V, temp, ws, vchunk);
    logprob_backward_ref(dhr, dWr, dlp, dent, h, W, tg, T, C, V, temp);
    expect_close("logprob_backward dhidden", dh, dhr, (size_t)T * C, 1e-4, 1e-4);
    expect_close("logprob_backward dw_lm", dW, dWr, (size_t)V * C, 1e-4, 1e-4);
    logprob_backward(dh, NULL, dlp, NULL, h, W, tg, lse, NULL, T, C, V, temp, ws, vchunk);
    logprob_backward_ref(dhr, NULL, dlp, NULL, h, W, tg, T, C, V, temp);
    expect_close("logprob_backward dhidden (no entropy)", dh, dhr, (size_t)T * C, 1e-4, 1e-4);
    // The expectation path: same forward figures, the backward without a second
    // pass; vocab chunks of ws_floats / T - 3 columns over every row: 3 V + 5
    // floats (one chunk of V at T = 1, else a ragged last), then chunks of 1 and of
    // 7 columns (the running max rescales expect at nearly every chunk).
    size_t wsn[] = {3 * (size_t)V + 5, (size_t)T * 4, (size_t)T * 10 + 1};
    float *ex = rnd((size_t)T * C, 0, 1), *ws3 = malloc(sizeof(float) * (3 * (size_t)V + 5 + (size_t)T * 10));
    float *lp3 = rnd(T, 0, 1), *ent3 = rnd(T, 0, 1), *lse3 = rnd(T, 0, 1);
    for (size_t k = 0; k < sizeof wsn / sizeof wsn[0]; k++) {
        ck_assert_int_eq(logprob_forward_expect(lp3, ent3, lse3, ex, h, W, tg, T, C, V, temp, ws3, wsn[k], &err), 0);
        expect_close("logprob_forward_expect logp", lp3, lpr, T, 2e-5, 2e-5);
        expect_close("logprob_forward_expect lse", lse3, lser, T, 2e-5, 2e-5);
        expect_close("logprob_forward_expect entropy", ent3, entr, T, 2e-5, 2e-5);
        logprob_backward_expect(dh, dlp, ex, W, tg, T, C, temp);
        expect_close("logprob_backward_expect dhidden", dh, dhr, (size_t)T * C, 1e-4, 1e-4);
    }
    ck_assert_int_eq(logprob_forward_expect(lp3, NULL, NULL, ex, h, W, tg, T, C, V, temp, ws3, (size_t)T * 4 - 1, &err),
                     -1);
    ck_assert_msg(strstr(err.msg, "holds no chunk"), "%s", err.msg);
    free(ex), free(ws3), free(lp3), free(ent3), free(lse3);
    free(h), free(W), free(tg), free(lp), free(ent), free(lse), free(lpr), free(entr), free(lser);
    free(ws), free(lp2), free(dlp), free(dent), free(dh), free(dhr), free(dW), free(dWr);
}

// gemma2's final_logit_softcapping: h, W in +-1 over C = 48 give logits up to ~8, so cap 3
// bends most of them; the capped head (chunked forward and backward, bf16 head too) against
// the double reference at the uncapped bounds, and the cap changes logp. softcap_forward
// (the decode head's) against its double reference: tanhf, a few ulp.
static void logprob_cap_case(int T, int C, int V, float temp, int vchunk, float cap) {
    float *h = rnd((size_t)T * C, -1, 1), *W = rnd((size_t)V * C, -1, 1);
    int *tg = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) tg[t] = (int)rng_below(&rng, V);
    tg[0] = V - 1;
    float *lp = rnd(T, 0, 1), *ent = rnd(T, 0, 1), *lse = rnd(T, 0, 1);
    float *lpr = rnd(T, 0, 1), *entr = rnd(T, 0, 1), *lser = rnd(T, 0, 1), *lp0 = rnd(T, 0, 1);
    float *ws = malloc(sizeof(float) * logprob_workspace_floats(T, vchunk));
    PailErr err = {0};
    ck_assert_int_eq(logprob_forward_cap_dt(lp, ent, lse, h, W, DT_F32, tg, T, C, V, temp, cap, ws, vchunk, &err), 0);
    ck_assert_int_eq(logprob_forward_ref_cap(lpr, entr, lser, h, W, tg, T, C, V, temp, cap, &err), 0);
    expect_close("logprob_forward_cap logp", lp, lpr, T, 2e-5, 2e-5);
    expect_close("logprob_forward_cap lse", lse, lser, T, 2e-5, 2e-5);
    expect_close("logprob_forward_cap entropy", ent, entr, T, 2e-5, 2e-5);
    ck_assert_int_eq(logprob_forward_ref(lp0, NULL, NULL, h, W, tg, T, C, V, temp, &err), 0);
    double most = 0;
    for (int t = 0; t < T; t++) most = fmax(most, fabs((double)lp0[t] - lpr[t]));
    ck_assert_msg(most > 0.1, "the cap changed logp by %g only", most);
    float *dlp = rnd(T, -1, 1), *dent = rnd(T, -1, 1);
    float *dh = rnd((size_t)T * C, 0, 1), *dhr = rnd((size_t)T * C, 0, 1);
    float *dW = rnd((size_t)V * C, -1, 1), *dWr = dup_f(dW, (size_t)V * C);
    logprob_backward_cap_dt(dh, dW, dlp, dent, h, W, DT_F32, tg, lse, ent, T, C, V, temp, cap, ws, vchunk);
    logprob_backward_ref_cap(dhr, dWr, dlp, dent, h, W, tg, T, C, V, temp, cap);
    expect_close("logprob_backward_cap dhidden", dh, dhr, (size_t)T * C, 1e-4, 1e-4);
    expect_close("logprob_backward_cap dw_lm", dW, dWr, (size_t)V * C, 1e-4, 1e-4);
    // the expectation pair with the cap (3 V floats, then chunks of 5 columns), against the reference
    // without dentropy
    float *ex = rnd((size_t)T * C, 0, 1), *ws3 = malloc(sizeof(float) * 3 * V), *lp3 = rnd(T, 0, 1);
    logprob_backward_ref_cap(dhr, NULL, dlp, NULL, h, W, tg, T, C, V, temp, cap);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(logprob_forward_expect_cap_dt(lp3, NULL, NULL, ex, h, W, DT_F32, tg, T, C, V, temp, cap, ws3,
                                                       k ? (size_t)T * 8 : 3 * (size_t)V, &err), 0);
        expect_close("logprob_forward_expect_cap logp", lp3, lpr, T, 2e-5, 2e-5);
        logprob_backward_expect_cap_dt(dh, dlp, ex, W, DT_F32, tg, T, C, temp, cap, h);
        expect_close("logprob_backward_expect_cap dhidden", dh, dhr, (size_t)T * C, 1e-4, 1e-4);
    }
    free(ex), free(ws3), free(lp3);
    // a bf16 head: the reference on the same (rounded) values
    uint16_t *Wb = malloc(sizeof(uint16_t) * V * C);
    dtype_convert(Wb, DT_BF16, W, DT_F32, (size_t)V * C);
    dtype_convert(W, DT_F32, Wb, DT_BF16, (size_t)V * C);
    ck_assert_int_eq(logprob_forward_cap_dt(lp, NULL, lse, h, Wb, DT_BF16, tg, T, C, V, temp, cap, ws, vchunk, &err), 0);
    ck_assert_int_eq(logprob_forward_ref_cap(lpr, NULL, lser, h, W, tg, T, C, V, temp, cap, &err), 0);
    expect_close("logprob_forward_cap logp (bf16 head)", lp, lpr, T, 2e-5, 2e-5);
    logprob_backward_cap_dt(dh, NULL, dlp, NULL, h, Wb, DT_BF16, tg, lse, NULL, T, C, V, temp, cap, ws, vchunk);
    logprob_backward_ref_cap(dhr, NULL, dlp, NULL, h, W, tg, T, C, V, temp, cap);
    expect_close("logprob_backward_cap dhidden (bf16 head)", dh, dhr, (size_t)T * C, 1e-4, 1e-4);
    free(Wb);
    free(h), free(W), free(tg), free(lp), free(ent), free(lse), free(lpr), free(entr), free(lser), free(lp0);
    free(ws), free(dlp), free(dent), free(dh), free(dhr), free(dW), free(dWr);
}

START_TEST(test_logprob_softcap) {
    logprob_cap_case(5, 48, 300, 0.7f, 7, 3.0f);
    logprob_cap_case(13, 48, 300, 1.0f, 128, 3.0f);
    logprob_cap_case(9, 33, 257, 1.3f, 257, 1.5f);
    size_t n = 1001;
    float *x = rnd(n, -20, 20), *r = dup_f(x, n);
    softcap_forward(x, n, 3.0f);
    softcap_forward_ref(r, n, 3.0f);
    expect_close("softcap_forward", x, r, n, 1e-6, 1e-6);
    free(x), free(r);
}
END_TEST

START_TEST(test_logprob) {
    logprob_case(1, 48, 300, 1.0f, 64);
    logprob_case(5, 48, 300, 0.7f, 7);      // many chunks, T below the small-T bound
    logprob_case(13, 48, 300, 0.7f, 128);   // sgemm path, ragged last chunk
    logprob_case(9, 33, 257, 1.3f, 257);    // one chunk
}
END_TEST

// The probabilities of every possible target for one context sum to 1.
START_TEST(test_logprob_normalised) {
    int C = 16, V = 200;
    float *h1 = rnd(C, -2, 2), *W = rnd((size_t)V * C, -2, 2), *h = malloc(sizeof(float) * V * C);
    int *tg = malloc(sizeof(int) * V);
    for (int t = 0; t < V; t++) memcpy(h + (size_t)t * C, h1, sizeof(float) * C), tg[t] = t;
    float *lp = malloc(sizeof(float) * V), *ws = malloc(sizeof(float) * logprob_workspace_floats(V, 32));
    PailErr err = {0};
    ck_assert_int_eq(logprob_forward(lp, NULL, NULL, h, W, tg, V, C, V, 0.9f, ws, 32, &err), 0);
    double sum = 0;
    for (int t = 0; t < V; t++) sum += exp(lp[t]);
    ck_assert_msg(fabs(sum - 1) < 1e-5, "sum of p over the vocabulary is %.9g", sum);
    free(h1), free(W), free(h), free(tg), free(lp), free(ws);
}
END_TEST

// ---- embedding (exact: copies and fp32 sums in the same order) ----
START_TEST(test_embedding) {
    int T = 11, C = 300, V = 17;
    int tok[11] = {3, 0, 16, 3, 3, 5, 16, 1, 2, 3, 9};
    float *tab = rnd((size_t)V * C, -1, 1), *o = rnd((size_t)T * C, 0, 1), *r = rnd((size_t)T * C, 0, 1);
    PailErr err = {0};
    ck_assert_int_eq(embedding_forward(o, tab, tok, T, C, V, &err), 0);
    ck_assert_int_eq(embedding_forward_ref(r, tab, tok, T, C, V, &err), 0);
    expect_close("embedding_forward", o, r, (size_t)T * C, 0, 0);
    float *d = rnd((size_t)T * C, -1, 1), *dt = rnd((size_t)V * C, -1, 1), *dtr = dup_f(dt, (size_t)V * C);
    embedding_backward(dt, d, tok, T, C);
    embedding_backward_ref(dtr, d, tok, T, C);
    expect_close("embedding_backward", dt, dtr, (size_t)V * C, 0, 0);
    free(tab), free(o), free(r), free(d), free(dt), free(dtr);
}
END_TEST

// ---- adamw: fp32 torch-order update vs the textbook double form: 1e-6 rel ----
START_TEST(test_adamw) {
    size_t n = 1037;
    float *p = rnd(n, -1, 1), *m = rnd(n, -0.1, 0.1), *v = rnd(n, 0, 0.01), *g = rnd(n, -3, 3);
    float *pr = dup_f(p, n), *mr = dup_f(m, n), *vr = dup_f(v, n);
    double ss = adamw_grad_sumsq(g, n), ssr = adamw_grad_sumsq_ref(g, n);
    ck_assert(fabs(ss - ssr) <= 1e-12 * ssr);
    float sc = adamw_clip_scale(ss, 1.0f);
    ck_assert(fabs(sc * sqrt(ss) - 1.0) < 1e-5);
    ck_assert(adamw_clip_scale(ss, 1e6f) == 1.0f);
    ck_assert(adamw_clip_scale(ss, 0) == 1.0f);
    for (int step = 1; step <= 3; step++) {
        adamw_update(p, m, v, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, sc);
        adamw_update_ref(pr, mr, vr, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, sc);
    }
    expect_close("adamw p", p, pr, n, 1e-6, 1e-6);
    expect_close("adamw m", m, mr, n, 1e-7, 1e-6);
    expect_close("adamw v", v, vr, n, 1e-9, 1e-5);
    free(p), free(m), free(v), free(g), free(pr), free(mr), free(vr);
}
END_TEST

// ---- limits: bad ids are refused with a message naming them ----
START_TEST(test_bad_ids) {
    float tab[6] = {0}, out[6], ws[64];
    int bad[2] = {1, 3}, neg[1] = {-1};
    PailErr err = {0};
    ck_assert_int_eq(embedding_forward(out, tab, bad, 2, 2, 3, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "token 3 at position 1"));
    ck_assert_int_eq(embedding_forward_ref(out, tab, neg, 1, 2, 3, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    float lp[2];
    ck_assert_int_eq(logprob_forward(lp, NULL, NULL, tab, tab, bad, 2, 2, 3, 1.0f, ws, 4, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "target token 3"));
    int ok[2] = {0, 1};
    ck_assert_int_eq(logprob_forward(lp, NULL, NULL, tab, tab, ok, 2, 2, 3, 0.0f, ws, 4, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "temperature"));
    ck_assert_int_eq(logprob_forward(lp, NULL, NULL, tab, tab, ok, 2, 2, 3, 1.0f, ws, 0, &err), -1);
    // all-zero logits: uniform over V = 3
    ck_assert_int_eq(logprob_forward(lp, NULL, NULL, tab, tab, ok, 2, 2, 3, 1.0f, ws, 2, &err), 0);
    ck_assert(fabsf(lp[0] + logf(3.0f)) < 1e-6f && fabsf(lp[1] + logf(3.0f)) < 1e-6f);
}
END_TEST

// Large-magnitude scores must not overflow the online softmax.
START_TEST(test_attention_extreme) {
    int lens[] = {100}, H = 1, Hkv = 1, D = 4;
    AttnCase c = attn_make(lens, 1, H, Hkv, D);
    for (int i = 0; i < 100 * D; i++) c.q[i] *= 200, c.k[i] *= 200;
    float *o = rnd(100 * D, 0, 1), *r = rnd(100 * D, 0, 1), *l = rnd(100, 0, 1), *lr = rnd(100, 0, 1);
    attention_forward(o, l, c.q, c.k, c.v, c.cu, 1, 100, H, Hkv, D, 0);
    attention_forward_ref(r, lr, c.q, c.k, c.v, c.cu, 1, 100, H, Hkv, D, 0);
    for (int i = 0; i < 100 * D; i++) ck_assert(isfinite(o[i]));
    expect_close("attention extreme out", o, r, 100 * D, 1e-4, 1e-4);
    expect_close("attention extreme lse", l, lr, 100, 1e-2, 1e-5);
    free(o), free(r), free(l), free(lr);
    attn_free(&c);
}
END_TEST

// The vectorised exp behind swiglu, logprob and attention: <= 2 ulp (2.4e-7
// relative) against double exp over the useful range; far below gives ~0 (0 with
// AVX2, libm denormals without), -inf gives 0.
START_TEST(test_simd_exp) {
    enum { N = 4099 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = -87.0f + 175.0f * i / (N - 1);
    float y[N];
    memcpy(y, x, sizeof y);
    simd_exp(y, N);
    for (int i = 0; i < N; i++) {
        double want = exp((double)x[i]);
        ck_assert_msg(fabs(y[i] - want) <= 2.4e-7 * want, "exp(%.9g) = %.9g, libm %.9g", x[i], y[i], want);
    }
    float z[9] = {-INFINITY, -1000, -100, -88, 0, 0, 0, 0, 0};
    simd_exp(z, 9);
    ck_assert(z[0] == 0 && z[1] == 0 && z[2] < 1e-37f && z[3] < 1e-37f && z[4] == 1.0f);
    float s[9] = {0, 1, 4, 2.25f, 1e-8f, 9, 16, 25, 7};
    simd_sqrt(s, 9);
    ck_assert(s[1] == 1 && s[2] == 2 && s[3] == 1.5f && s[8] == sqrtf(7.0f));
}
END_TEST

// ---- sample ----
// sample_exp gives one value per input whatever the lane (an 8-wide chunk or
// the scalar tail), and the batched op equals one row at a time: rows mapped
// to logits rows and RNG slots, each slot's stream advanced once, stop flags.
START_TEST(test_sample) {
    enum { N = 4099 };
    static float x[N], y[N + 7];
    for (int i = 0; i < N; i++) x[i] = -90.0f + 180.0f * (float)rng_uniform_f(&rng);
    for (int shift = 0; shift < 8; shift++) {  // the same value in every lane and in the tail
        memcpy(y + shift, x, sizeof x);
        sample_exp(y + shift, N - shift);
        for (int i = 0; i < N - shift; i++) {
            float one = x[i];
            sample_exp(&one, 1);
            ck_assert_msg(memcmp(&one, &y[shift + i], 4) == 0, "sample_exp(%.9g): %.9g in a chunk, %.9g alone", x[i],
                          y[shift + i], one);
        }
    }
    enum { V = 517, R = 3, ROWS = 7, SLOTS = 9 };
    float *logits = rnd((size_t)R * V, -6, 6);
    int lrow[ROWS] = {0, 0, 1, 2, 2, 2, 1}, rslot[ROWS] = {8, 0, 3, 1, 2, 6, 5};
    int32_t stops[2] = {-1, 0};
    SampleParams cases[] = {{1.0, 1, 0, 0}, {0.7, 0.9, 0, 0}, {1.1, 1, 0.2, 0}, {0.8, 0.95, 0.1, 40}, {0, 1, 0, 0}};
    size_t wsb = sample_ws_bytes(V);
    void *ws = malloc(wsb);
    PailErr e0 = {0};
    uint64_t s0[4 * SLOTS] = {0};
    int32_t t0[ROWS];
    float l0[ROWS];
    uint8_t f0[ROWS];
    ck_assert_int_eq(sample_forward(t0, l0, f0, s0, logits, lrow, rslot, ROWS, V, &cases[0], stops, 2, ws, 100, &e0), -1);
    ck_assert_ptr_nonnull(strstr(e0.msg, "workspace"));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t st0[SLOTS * 4], st1[SLOTS * 4], st2[SLOTS * 4];
        for (int k = 0; k < SLOTS; k++) rng_seed((Rng *)&st0[4 * k], 11 + c, (uint64_t)k);
        memcpy(st1, st0, sizeof st0);
        memcpy(st2, st0, sizeof st0);
        int32_t t1[ROWS], t2[ROWS];
        float l1[ROWS], l2[ROWS], p[V];
        uint8_t s1[ROWS], s2[ROWS];
        int idx[V];
        PailErr err = {0};
        stops[0] = -1;
        ck_assert_int_eq(sample_forward(t1, l1, s1, st1, logits, lrow, rslot, ROWS, V, &cases[c], stops, 2, ws, wsb, &err), 0);
        stops[0] = t1[3];  // a token drawn: flagged wherever it is drawn
        memcpy(st1, st0, sizeof st0);
        ck_assert_int_eq(sample_forward(t1, l1, s1, st1, logits, lrow, rslot, ROWS, V, &cases[c], stops, 2, ws, wsb, &err), 0);
        ck_assert_int_eq(sample_forward_ref(t2, l2, s2, st2, logits, lrow, rslot, ROWS, V, &cases[c], stops, 2, &err), 0);
        ck_assert(memcmp(st1, st2, sizeof st1) == 0 && memcmp(t1, t2, sizeof t1) == 0 && memcmp(l1, l2, sizeof l1) == 0);
        ck_assert(memcmp(s1, s2, sizeof s1) == 0 && s1[3] == 1);
        for (int a = 0; a < ROWS; a++) {
            uint64_t one[4];
            memcpy(one, &st0[4 * rslot[a]], sizeof one);
            float lp;
            int tok = sample_row(&lp, one, logits + (size_t)lrow[a] * V, &cases[c], p, idx, V);
            ck_assert_msg(tok == t1[a] && lp == l1[a], "case %zu row %d: %d (%g) batched, %d (%g) alone", c, a, t1[a],
                          l1[a], tok, lp);
            ck_assert(s1[a] == (tok == stops[0] || tok == stops[1]));
            // the slot's stream moved on by one draw (greedy draws none)
            ck_assert((memcmp(one, &st1[4 * rslot[a]], sizeof one) == 0));
            ck_assert((memcmp(one, &st0[4 * rslot[a]], sizeof one) == 0) == (cases[c].temperature == 0));
        }
        ck_assert((memcmp(&st1[4 * 4], &st0[4 * 4], 32) == 0));  // slot 4 is no row's
    }
    free(ws);
    free(logits);
}
END_TEST

// ---- ops on a caller's team (kernels/parallel.h) ----
// Called by every thread of a region the caller opened, each op must give to
// the bit what it gives on its own: every output element is computed by one
// thread with the same arithmetic whatever the team. The cases that accumulate
// or work in place (add, the rmsnorm dw, rope in place) also catch an op that
// runs whole on every thread instead of sharing (y += x twice); and every
// thread checks the outputs as soon as the op returns (the op must end with a
// barrier, its outputs whole on every thread).
enum { OUTS = 3 };
typedef struct {
    const char *name;
    void (*run)(void *ctx);
    void *ctx;
    float *out[OUTS];  // the op's outputs (n[i] floats), restored before each run
    size_t n[OUTS];
} TeamCase;

static void team_case(const TeamCase *tc, int nth) {
    float *init[OUTS] = {0}, *want[OUTS] = {0};
    for (int i = 0; i < OUTS && tc->out[i]; i++) init[i] = dup_f(tc->out[i], tc->n[i]);
    int saved = omp_get_max_threads();
    omp_set_num_threads(nth);  // its own region: the same team size (paths chosen by it are the same)
    tc->run(tc->ctx);
    for (int i = 0; i < OUTS && tc->out[i]; i++) {
        want[i] = dup_f(tc->out[i], tc->n[i]);
        memcpy(tc->out[i], init[i], sizeof(float) * tc->n[i]);
    }
    int bad_out = -1, bad_thread = -1, team = 0;
#pragma omp parallel num_threads(nth)
    {
        tc->run(tc->ctx);
        for (int i = 0; i < OUTS && tc->out[i]; i++)
            if (memcmp(tc->out[i], want[i], sizeof(float) * tc->n[i])) {
#pragma omp critical
                bad_out = i, bad_thread = omp_get_thread_num();
            }
#pragma omp single
        team = omp_get_num_threads();
    }
    omp_set_num_threads(saved);
    ck_assert_msg(team == nth, "%s: the region has %d threads, asked for %d", tc->name, team, nth);
    if (bad_out >= 0) {
        size_t j = 0;
        while (j < tc->n[bad_out] && tc->out[bad_out][j] == want[bad_out][j]) j++;
        ck_abort_msg("%s on a caller's team of %d: output %d differs from the op on its own (seen by thread %d%s)",
                     tc->name, nth, bad_out, bad_thread,
                     j < tc->n[bad_out] ? "" : "; whole after the region: the op returned before its work was done");
    }
    for (int i = 0; i < OUTS; i++) free(init[i]), free(want[i]);
}

typedef struct {
    Backend *be;
    float *y, *x, *out, *rstd, *w, *dx, *dw, *dout, *g, *u, *dg, *du, *lse, *q, *k, *v, *dq, *dk, *dv;
    const float *ct, *st;
    int *rows, *pos, *cu, *len, *table;
    size_t n;
    int R, C, T, nh, D, nseq, H, Hkv, max_ctx;
    int failed;  // backend ops that returned non-zero
} TeamArgs;

// A backend op's failure is counted (ck_assert is for the test's own thread).
#define BE_OK(call)                          \
    do {                                     \
        int rc_ = (call);                    \
        _Pragma("omp atomic") a->failed += rc_ != 0; \
    } while (0)
static void t_copy(void *c) { TeamArgs *a = c; BE_OK(a->be->ops->copy(a->be, a->y, a->x, a->n, NULL)); }
static void t_zero(void *c) { TeamArgs *a = c; BE_OK(a->be->ops->zero(a->be, a->y, a->n, NULL)); }
static void t_add(void *c) { TeamArgs *a = c; BE_OK(a->be->ops->add(a->be, a->y, a->x, a->n, NULL)); }
static void t_to_device(void *c) {
    TeamArgs *a = c;
    BE_OK(a->be->ops->to_device(a->be, a->y, a->x, a->n * sizeof(float), NULL));
}
static void t_gather(void *c) {
    TeamArgs *a = c;
    BE_OK(a->be->ops->gather_rows(a->be, a->y, a->x, a->rows, a->R, a->C, NULL));
}
static void t_scatter(void *c) {
    TeamArgs *a = c;
    BE_OK(a->be->ops->scatter_rows(a->be, a->y, a->x, a->rows, a->R, a->C, NULL));
}
static void t_rmsnorm(void *c) { TeamArgs *a = c; rmsnorm_forward(a->out, a->rstd, a->x, a->w, a->R, a->C, 1e-6f); }
static void t_rmsnorm_in_place(void *c) { TeamArgs *a = c; rmsnorm_forward(a->out, NULL, a->out, a->w, a->R, a->C, 1e-6f); }
static void t_rmsnorm_bwd(void *c) {
    TeamArgs *a = c;
    rmsnorm_backward(a->dx, a->dw, a->dout, a->x, a->w, a->rstd, a->R, a->C);
}
static void t_rope_in_place(void *c) { TeamArgs *a = c; rope_forward(a->out, a->out, a->pos, a->ct, a->st, a->T, a->nh, a->D); }
static void t_rope_bwd(void *c) { TeamArgs *a = c; rope_backward(a->dx, a->dout, a->pos, a->ct, a->st, a->T, a->nh, a->D); }
static void t_swiglu(void *c) { TeamArgs *a = c; swiglu_forward(a->out, a->g, a->u, a->n); }
static void t_swiglu_bwd(void *c) { TeamArgs *a = c; swiglu_backward(a->dg, a->du, a->dout, a->g, a->u, a->n); }
static void t_swiglu_clamp(void *c) { TeamArgs *a = c; swiglu_clamp_forward(a->out, a->g, a->u, a->n, 1.702f, 7.0f); }
static void t_swiglu_clamp_bwd(void *c) {
    TeamArgs *a = c;
    swiglu_clamp_backward(a->dg, a->du, a->dout, a->g, a->u, a->n, 1.702f, 7.0f);
}
static void t_attention(void *c) {
    TeamArgs *a = c;
    attention_forward(a->out, a->lse, a->q, a->k, a->v, a->cu, a->nseq, a->T, a->H, a->Hkv, a->D, 0);
}
static void t_attention_bwd(void *c) {
    TeamArgs *a = c;
    attention_backward(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->out, a->lse, a->cu, a->nseq, a->T, a->H,
                       a->Hkv, a->D, 0);
}
static void t_decode(void *c) {
    TeamArgs *a = c;
    attention_decode_forward(a->out, a->q, a->k, a->v, a->cu, a->len, a->table, a->max_ctx, a->nseq, a->H, a->Hkv,
                             a->D, 0);
}

// The backend's data movement (the table the model driver calls), big enough
// to split (64 KiB a task) and a decode step's few floats.
static void team_moves(int nth) {
    size_t sizes[] = {5, 100003};
    for (int s = 0; s < 2; s++) {
        size_t n = sizes[s];
        TeamArgs a = {.be = backend_cpu(), .n = n, .x = rnd(n, -1, 1), .y = rnd(n, -1, 1)};
        TeamCase cs[] = {{"cpu copy", t_copy, &a, {a.y}, {n}}, {"cpu zero", t_zero, &a, {a.y}, {n}},
                         {"cpu add", t_add, &a, {a.y}, {n}}, {"cpu to_device", t_to_device, &a, {a.y}, {n}}};
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) team_case(&cs[i], nth);
        ck_assert_int_eq(a.failed, 0);
        free(a.x), free(a.y);
    }
    int C = 300, M = 700, R = 500;  // rows of 1200 bytes; a gather may repeat rows, a scatter's are distinct
    TeamArgs a = {.be = backend_cpu(), .R = R, .C = C, .x = rnd((size_t)M * C, -1, 1),
                  .y = rnd((size_t)M * C, -1, 1), .rows = malloc(sizeof(int) * R)};
    for (int i = 0; i < R; i++) a.rows[i] = (int)rng_below(&rng, M);
    TeamCase g = {"cpu gather_rows", t_gather, &a, {a.y}, {(size_t)R * C}};
    team_case(&g, nth);
    for (int i = 0; i < R; i++) a.rows[i] = (i * 3 + 1) % M;  // 3 and 700 coprime: distinct
    TeamCase sc = {"cpu scatter_rows", t_scatter, &a, {a.y}, {(size_t)M * C}};
    team_case(&sc, nth);
    ck_assert_int_eq(a.failed, 0);
    free(a.x), free(a.y), free(a.rows);
}

static void team_norm_rope_swiglu(int nth) {
    int R = 37, C = 200;
    size_t n = (size_t)R * C;
    TeamArgs a = {.R = R, .C = C, .x = rnd(n, -2, 2), .w = rnd(C, 0.5, 1.5), .out = rnd(n, -1, 1),
                  .rstd = rnd(R, 0, 1), .dx = rnd(n, 0, 1), .dw = rnd(C, -1, 1), .dout = rnd(n, -1, 1)};
    TeamCase cs[] = {{"rmsnorm_forward", t_rmsnorm, &a, {a.out, a.rstd}, {n, (size_t)R}},
                     {"rmsnorm_forward in place", t_rmsnorm_in_place, &a, {a.out}, {n}},
                     {"rmsnorm_backward (dw accumulates)", t_rmsnorm_bwd, &a, {a.dx, a.dw}, {n, (size_t)C}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) team_case(&cs[i], nth);
    int T = 9, nh = 8, D = 64, P = 40;  // rope: (token, head) pairs split, also T = 1 (a decode step)
    float *inv = malloc(sizeof(float) * D / 2), *ct = malloc(sizeof(float) * P * D / 2),
          *st = malloc(sizeof(float) * P * D / 2);
    rope_inv_freq(inv, D, 10000.0f, NULL);
    rope_table_build(ct, st, inv, P, D);
    int pos[9] = {3, 0, 17, 39, 5, 5, 1, 22, 8};
    for (int t1 = 0; t1 < 2; t1++) {
        int Tn = t1 ? 1 : T;
        size_t m = (size_t)Tn * nh * D;
        TeamArgs r = {.T = Tn, .nh = nh, .D = D, .pos = pos, .ct = ct, .st = st, .out = rnd(m, -1, 1),
                      .dx = rnd(m, 0, 1), .dout = rnd(m, -1, 1)};
        TeamCase rc[] = {{"rope_forward in place", t_rope_in_place, &r, {r.out}, {m}},
                         {"rope_backward", t_rope_bwd, &r, {r.dx}, {m}}};
        for (size_t i = 0; i < 2; i++) team_case(&rc[i], nth);
        free(r.out), free(r.dx), free(r.dout);
    }
    size_t ns[] = {1408, 5};
    for (int s = 0; s < 2; s++) {
        size_t m = ns[s];
        TeamArgs w = {.n = m, .g = rnd(m, -8, 8), .u = rnd(m, -2, 2), .out = rnd(m, 0, 1), .dg = rnd(m, 0, 1),
                      .du = rnd(m, 0, 1), .dout = rnd(m, -1, 1)};
        TeamCase wc[] = {{"swiglu_forward", t_swiglu, &w, {w.out}, {m}},
                         {"swiglu_backward", t_swiglu_bwd, &w, {w.dg, w.du}, {m, m}},
                         {"swiglu_clamp_forward", t_swiglu_clamp, &w, {w.out}, {m}},
                         {"swiglu_clamp_backward", t_swiglu_clamp_bwd, &w, {w.dg, w.du}, {m, m}}};
        for (size_t i = 0; i < sizeof wc / sizeof wc[0]; i++) team_case(&wc[i], nth);
        free(w.g), free(w.u), free(w.out), free(w.dg), free(w.du), free(w.dout);
    }
    free(inv), free(ct), free(st);
    free(a.x), free(a.w), free(a.out), free(a.rstd), free(a.dx), free(a.dw), free(a.dout);
}

// Attention: the tiled forward, the row-wise one (D > 256), the backward's
// tiled path (>= 2 (sequence, kv head) tasks a thread) and its row-wise one,
// and decode over a cache.
static void team_attention(int nth) {
    struct { int lens[3], nseq, H, Hkv, D; } cases[] = {{{150, 7, 40}, 3, 4, 2, 16},   // 6 tasks: tiled bwd
                                                       {{70, 0, 0}, 1, 2, 1, 24},      // 1 task: row-wise bwd
                                                       {{3, 20, 0}, 2, 2, 1, 272}};    // row-wise fwd
    for (int ci = 0; ci < 3; ci++) {
        AttnCase c = attn_make(cases[ci].lens, cases[ci].nseq, cases[ci].H, cases[ci].Hkv, cases[ci].D);
        size_t nq = (size_t)c.T * c.H * c.D, nk = (size_t)c.T * c.Hkv * c.D;
        TeamArgs a = {.q = c.q, .k = c.k, .v = c.v, .cu = c.cu, .nseq = c.nseq, .T = c.T, .H = c.H, .Hkv = c.Hkv,
                      .D = c.D, .out = rnd(nq, 0, 1), .lse = rnd((size_t)c.T * c.H, 0, 1), .dout = rnd(nq, -1, 1),
                      .dq = rnd(nq, 0, 1), .dk = rnd(nk, 0, 1), .dv = rnd(nk, 0, 1)};
        TeamCase f = {"attention_forward", t_attention, &a, {a.out, a.lse}, {nq, (size_t)c.T * c.H}};
        team_case(&f, nth);
        t_attention(&a);  // out and lse for the backward
        if (c.D <= 256) {
            TeamCase b = {"attention_backward", t_attention_bwd, &a, {a.dq, a.dk, a.dv}, {nq, nk, nk}};
            team_case(&b, nth);
        }
        free(a.out), free(a.lse), free(a.dout), free(a.dq), free(a.dk), free(a.dv);
        attn_free(&c);
    }
    // decode: max_ctx holds the blocks a sequence may hold; 4 blocks in the pool
    int H = 8, Hkv = 2, D = 64, nseq = 3, max_blocks = 2, cu[4] = {0, 1, 3, 4}, len[3] = {70, 9, 1};
    int table[6] = {2, 0, 3, -1, 1, -1};
    size_t kn = (size_t)4 * KV_BLOCK * Hkv * D, nq = (size_t)cu[nseq] * H * D;
    TeamArgs a = {.q = rnd(nq, -1.5, 1.5), .k = rnd(kn, -1.5, 1.5), .v = rnd(kn, -1, 1), .cu = cu, .len = len,
                  .table = table, .nseq = nseq, .max_ctx = max_blocks, .H = H, .Hkv = Hkv, .D = D,
                  .out = rnd(nq, 0, 1)};
    TeamCase dc = {"attention_decode_forward", t_decode, &a, {a.out}, {nq}};
    team_case(&dc, nth);
    free(a.q), free(a.k), free(a.v), free(a.out);
}

// The products a decode step issues (matmul.c, embedding.c), with W in each
// storage dtype: the mat-vec (T <= matmul_small_t_max) and the sgemm path (its
// column slices, and the bf16 panels), LoRA-adapted, accumulating (beta = 1:
// an op run whole on every thread would add twice), and the embedding gather.
typedef struct {
    float *out, *la, *x, *A, *B, *bias;
    const void *W, *table;
    DType dt;
    const int *tok;
    int T, K, N, R, V;
    float beta;
} MmArgs;
static void t_mm(void *c) {
    MmArgs *a = c;
    matmul_forward_dt(a->out, a->x, a->W, a->dt, a->bias, a->T, a->K, a->N, 1.0f, a->beta);
}
static void t_mm_lora(void *c) {
    MmArgs *a = c;
    matmul_forward_lora_dt(a->out, a->la, a->x, a->W, a->dt, a->bias, a->A, a->B, a->T, a->K, a->N, a->R, 0.5f,
                           a->beta);
}
static void t_embed(void *c) {
    MmArgs *a = c;
    PailErr e = {0};
    if (embedding_forward_dt(a->out, a->table, a->dt, a->tok, a->T, a->K, a->V, &e) != 0) a->out[0] = NAN;
}

static void team_matmul(int nth) {
    int N = 300, R = 4, Ts[] = {1, 3, 8, 21};
    float *W32 = rnd((size_t)N * 256, -1, 1);
    uint16_t *W16 = malloc((size_t)N * 256 * 2);
    unsigned char *Wq = malloc(dtype_row_bytes(DT_Q8_0, (size_t)N * 256));  // the largest quantized W here
    for (int dt = 0; dt < DT_COUNT; dt++) {
        // a quantized W: K of whole blocks, random bytes below 0x3c (so every
        // fp16 scale, wherever its type has it, is finite and below 1)
        int K = dtype_is_quant((DType)dt) ? 256 : 200;
        const void *W = W32;
        if (dtype_is_quant((DType)dt)) {
            for (size_t i = 0; i < dtype_row_bytes((DType)dt, (size_t)N * K); i++) Wq[i] = (unsigned char)rng_below(&rng, 0x3c);
            W = Wq;
        } else if (dt != DT_F32) {
            dtype_from_f32(W16, W32, (DType)dt, (size_t)N * K);
            W = W16;
        }
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            int T = Ts[ti];
            MmArgs a = {.out = rnd((size_t)T * N, -1, 1), .la = rnd((size_t)T * R, 0, 1), .x = rnd((size_t)T * K, -1, 1),
                        .A = rnd((size_t)R * K, -1, 1), .B = rnd((size_t)N * R, -1, 1), .bias = rnd(N, -1, 1),
                        .W = W, .dt = (DType)dt, .T = T, .K = K, .N = N, .R = R, .beta = 1.0f};
            char n1[64], n2[64];
            snprintf(n1, sizeof n1, "matmul_forward_dt %s T=%d (beta 1)", dtype_name((DType)dt), T);
            snprintf(n2, sizeof n2, "matmul_forward_lora_dt %s T=%d (beta 1)", dtype_name((DType)dt), T);
            TeamCase mc = {n1, t_mm, &a, {a.out}, {(size_t)T * N}};
            team_case(&mc, nth);
            TeamCase lc = {n2, t_mm_lora, &a, {a.out, a.la}, {(size_t)T * N, (size_t)T * R}};
            team_case(&lc, nth);
            free(a.out), free(a.la), free(a.x), free(a.A), free(a.B), free(a.bias);
        }
        int tok[7] = {4, 299, 0, 4, 17, 250, 3};
        MmArgs e = {.out = rnd((size_t)7 * K, 0, 1), .table = W, .dt = (DType)dt, .tok = tok, .T = 7, .K = K, .V = N};
        TeamCase ec = {"embedding_forward_dt", t_embed, &e, {e.out}, {(size_t)7 * K}};
        team_case(&ec, nth);
        free(e.out);
    }
    free(W32), free(W16), free(Wq);
}

START_TEST(test_ops_in_team) {
    for (int nth = 2; nth <= 3; nth++) {  // 3: more threads than this machine may have cores, an odd split
        team_moves(nth);
        team_norm_rope_swiglu(nth);
        team_attention(nth);
        team_matmul(nth);
    }
}
END_TEST

int main(void) {
    rng_seed(&rng, 1234, 0);
    // the bf16 products against references on the same values: the exact path
    // (the fast ones round activations to bf16; check_kernels_dtype tests them)
    gemm_bf16_force(GEMM_BF16_EXACT);
    Suite *s = suite_create("kernels");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_matmul);
    tcase_add_test(core, test_matmul_lora);
    tcase_add_test(core, test_rmsnorm);
    tcase_add_test(core, test_rope_llama3_freq);
    tcase_add_test(core, test_rope);
    tcase_add_test(core, test_rope_partial);
    tcase_add_test(core, test_attention);
    tcase_add_test(core, test_attention_window);
    tcase_add_loop_test(core, test_attention_decode, 0, 8);
    tcase_add_test(core, test_attention_softcap);
    tcase_add_test(core, test_swiglu);
    tcase_add_test(core, test_geglu);
    tcase_add_test(core, test_logprob_softcap);
    tcase_add_test(core, test_scale);
    tcase_add_test(core, test_logprob);
    tcase_add_test(core, test_logprob_normalised);
    tcase_add_test(core, test_embedding);
    tcase_add_test(core, test_adamw);
    tcase_add_test(core, test_sample);
    tcase_add_test(core, test_ops_in_team);
    tcase_add_test(core, test_layernorm);
    tcase_add_test(core, test_rope_interleaved);
    tcase_add_test(limits, test_bad_ids);
    tcase_add_test(limits, test_attention_extreme);
    tcase_add_test(limits, test_simd_exp);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
