// Check suite for the CUDA twins (kernels/*.cu): each op on the device against
// the CPU reference on the same random inputs, at the CPU suite's tolerances
// (the device sums in another order and uses its own expf; cuBLAS runs FP32, not
// TF32; weights in a storage dtype against the CPU reference on the converted
// weight). Built in both modes: without CUDA=1, or with no device, only the
// host case runs (the device decoder of the quantized dtypes, kernels/quant_cuda.h,
// compiled for the host against quant_dequant) and the rest prints SKIP.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "kernels.h"
#include "quant.h"
#include "quant_cuda.h"  // host C here (this file is built with -ffp-contract=off: GNUmakefile)

static Rng rng;

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform_f(&rng);
    return p;
}

// ---- GGUF's block-quantized weights: the test's own tiny block writer (no
// quantizer of pail's: any well-formed block serves), round-to-nearest scales
// from the block's range, not llama.cpp's search; and blocks of random bytes
// with finite fp16 scales (every nibble, high bit and sign pattern, subnormal
// scales, Q6_K's negative sub-block scales) ----

static void put_f16(uint8_t *p, float f) {
    uint16_t h = dt_f32_to_f16(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}
static float f16_round(float f) { return dt_f16_to_f32(dt_f32_to_f16(f)); }
static int clampi(long v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : (int)v; }
static float inv(float d) { return d != 0 ? 1.0f / d : 0.0f; }

// 32 values of 0..15 (low 4 bits) as a 32-element block's 16 nibble bytes.
static void put_nib32(uint8_t *qs, const int *q) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0xF) | (q[16 + j] & 0xF) << 4);
}

// One block of dt from its dtype_block(dt) floats x.
static void q_write_block(uint8_t *b, DType dt, const float *x) {
    int ne = dtype_block(dt), q[256];
    float lo = x[0], hi = x[0], amax = 0;
    for (int e = 0; e < ne; e++) lo = fminf(lo, x[e]), hi = fmaxf(hi, x[e]), amax = fmaxf(amax, fabsf(x[e]));
    memset(b, 0, dtype_block_bytes(dt));
    switch (dt) {
    case DT_Q8_0: {
        float d = f16_round(amax / 127);
        put_f16(b, d);
        for (int e = 0; e < 32; e++) b[2 + e] = (uint8_t)(int8_t)clampi(lrintf(x[e] * inv(d)), -127, 127);
        break;
    }
    case DT_Q4_0:
    case DT_Q5_0: {  // d (q - 8) or d (q - 16)
        int half = dt == DT_Q4_0 ? 8 : 16;
        float d = f16_round(amax / half);
        for (int e = 0; e < 32; e++) q[e] = clampi(lrintf(x[e] * inv(d)) + half, 0, 2 * half - 1);
        put_f16(b, d);
        if (dt == DT_Q4_0) put_nib32(b + 2, q);
        else {
            for (int e = 0; e < 32; e++) b[2 + e / 8] |= (uint8_t)((q[e] >> 4) << (e % 8));
            put_nib32(b + 6, q);
        }
        break;
    }
    case DT_Q4_1:
    case DT_Q5_1: {  // d q + m
        int qmax = dt == DT_Q4_1 ? 15 : 31;
        float d = f16_round((hi - lo) / qmax), m = f16_round(lo);
        for (int e = 0; e < 32; e++) q[e] = clampi(lrintf((x[e] - m) * inv(d)), 0, qmax);
        put_f16(b, d), put_f16(b + 2, m);
        if (dt == DT_Q4_1) put_nib32(b + 4, q);
        else {
            for (int e = 0; e < 32; e++) b[4 + e / 8] |= (uint8_t)((q[e] >> 4) << (e % 8));
            put_nib32(b + 8, q);
        }
        break;
    }
    case DT_Q4_K:
    case DT_Q5_K: {  // (d sc) q - (dmin mn) over 8 sub-blocks of 32
        int qmax = dt == DT_Q4_K ? 15 : 31, sc[8], mn[8];
        float s[8], m[8], smax = 0, mmax = 0;
        for (int k = 0; k < 8; k++) {
            float l = 0, h = 0;
            for (int e = 32 * k; e < 32 * k + 32; e++) l = fminf(l, x[e]), h = fmaxf(h, x[e]);
            s[k] = (h - l) / qmax, m[k] = -l, smax = fmaxf(smax, s[k]), mmax = fmaxf(mmax, m[k]);
        }
        float d = f16_round(smax / 63), dmin = f16_round(mmax / 63);
        for (int k = 0; k < 8; k++) sc[k] = clampi(lrintf(s[k] * inv(d)), 0, 63), mn[k] = clampi(lrintf(m[k] * inv(dmin)), 0, 63);
        put_f16(b, d), put_f16(b + 2, dmin);
        uint8_t *sb = b + 4, *qh = b + 16, *qs = b + (dt == DT_Q4_K ? 16 : 48);
        for (int j = 0; j < 4; j++) {  // kernels/quant.c's scale_min_k4, inverted
            sb[j] = (uint8_t)(sc[j] | (sc[4 + j] >> 4) << 6);
            sb[4 + j] = (uint8_t)(mn[j] | (mn[4 + j] >> 4) << 6);
            sb[8 + j] = (uint8_t)((sc[4 + j] & 0xF) | (mn[4 + j] & 0xF) << 4);
        }
        for (int e = 0; e < 256; e++) {
            int k = e / 32;
            float dd = d * sc[k], dm = dmin * mn[k];
            int v = clampi(lrintf((x[e] + dm) * inv(dd)), 0, qmax);
            qs[32 * (e / 64) + e % 32] |= (uint8_t)((v & 0xF) << (4 * (k & 1)));
            if (dt == DT_Q5_K) qh[e % 32] |= (uint8_t)((v >> 4) << k);
        }
        break;
    }
    case DT_Q6_K: {  // (d sc) (q - 32) over 16 sub-blocks of 16; odd sub-blocks' scales negative
        float s[16], smax = 0;
        for (int k = 0; k < 16; k++) {
            float a = 0;
            for (int e = 16 * k; e < 16 * k + 16; e++) a = fmaxf(a, fabsf(x[e]));
            s[k] = (k & 1 ? -a : a) / 31, smax = fmaxf(smax, fabsf(s[k]));
        }
        float d = f16_round(smax / 127);
        put_f16(b + 208, d);
        for (int k = 0; k < 16; k++) b[192 + k] = (uint8_t)(int8_t)clampi(lrintf(s[k] * inv(d)), -127, 127);
        for (int e = 0; e < 256; e++) {
            int j = e / 128, r = e % 128;
            float dd = d * (int8_t)b[192 + e / 16];
            int v = clampi(lrintf(x[e] * inv(dd)), -32, 31) + 32;
            b[64 * j + r % 64] |= (uint8_t)((v & 0xF) << (4 * (r / 64)));
            b[128 + 32 * j + r % 32] |= (uint8_t)((v >> 4) << (2 * (r / 32)));
        }
        break;
    }
    default: ck_abort_msg("q_write_block: %s is not quantized", dtype_name(dt));
    }
}

// n floats (whole blocks) as dt into dst.
static void q_write(void *dst, const float *x, DType dt, size_t n) {
    size_t qk = (size_t)dtype_block(dt), bb = dtype_block_bytes(dt);
    for (size_t i = 0; i < n / qk; i++) q_write_block((uint8_t *)dst + i * bb, dt, x + i * qk);
}

// nb blocks of random bytes, every fp16 scale field finite (not inf / NaN).
static void q_random(uint8_t *b, DType dt, size_t nb) {
    size_t bb = dtype_block_bytes(dt);
    for (size_t i = 0; i < nb * bb; i++) b[i] = (uint8_t)rng_u64(&rng);
    int at[2] = {dt == DT_Q6_K ? 208 : 0, dt == DT_Q4_1 || dt == DT_Q5_1 || dt == DT_Q4_K || dt == DT_Q5_K ? 2 : -1};
    for (size_t i = 0; i < nb; i++)
        for (int f = 0; f < 2; f++)
            if (at[f] >= 0) {
                uint8_t *p = b + i * bb + at[f];
                while ((p[1] & 0x7C) == 0x7C) p[1] = (uint8_t)rng_u64(&rng);  // exponent 31: inf or NaN
            }
}

static const DType qdts[8] = {DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
enum { QNB = 37 };  // blocks of random bytes, then QNB blocks from the writer, in each exactness case

// QNB random blocks then QNB written ones (from uniform [-1, 1)): 2 QNB blocks of dt.
static uint8_t *q_blocks(DType dt) {
    size_t bb = dtype_block_bytes(dt), qk = (size_t)dtype_block(dt);
    uint8_t *b = malloc(2 * QNB * bb);
    q_random(b, dt, QNB);
    float *x = rnd(QNB * qk, -1, 1);
    q_write(b + QNB * bb, x, dt, QNB * qk);
    free(x);
    return b;
}

// The device decoder (kernels/quant_cuda.h, here compiled for the host): every
// element bit for bit quant_dequant's; and the writer's blocks within a
// quantization step of their floats (the weights the device cases use).
START_TEST(test_quant_decode_host) {
    rng_seed(&rng, 4646, 0);
    for (int d = 0; d < 8; d++) {
        DType dt = qdts[d];
        ck_assert_uint_eq(quant_block_bytes(dt), dtype_block_bytes(dt));
        size_t n = 2 * QNB * (size_t)dtype_block(dt);
        uint8_t *b = q_blocks(dt);
        float *want = malloc(4 * n);
        quant_dequant(want, b, dt, n);
        for (size_t i = 0; i < n; i++) {
            float got = quant_load(b, dt, i);
            ck_assert_msg(memcmp(&got, &want[i], 4) == 0, "%s element %zu (block %zu): decoder %.9g, quant_dequant %.9g",
                          dtype_name(dt), i, i / dtype_block(dt), got, want[i]);
        }
        float *x = rnd(4096, -1, 1), *y = malloc(4 * 4096), worst = 0;
        uint8_t *q = malloc(dtype_row_bytes(dt, 4096));
        q_write(q, x, dt, 4096);
        quant_dequant(y, q, dt, 4096);
        for (int i = 0; i < 4096; i++) worst = fmaxf(worst, fabsf(y[i] - x[i]));
        ck_assert_msg(worst <= 0.15f, "%s: the test's block writer is off by %g", dtype_name(dt), worst);
        free(b), free(want), free(x), free(y), free(q);
    }
}
END_TEST

#ifdef PAIL_CUDA
#include <cuda_runtime.h>
#include "backend.h"

static PailErr err;
static CudaBlas cb;  // the products' cuBLAS handle and panels, on the default stream (the other twins get stream 0)

static void *up(const void *h, size_t bytes) {
    void *d = NULL;
    ck_assert_msg(cudaMalloc(&d, bytes ? bytes : 4) == cudaSuccess, "cudaMalloc %zu bytes", bytes);
    if (h && bytes) ck_assert(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    return d;
}
#define UPF(h, n) ((float *)up((h), sizeof(float) * (n)))
#define UPI(h, n) ((int *)up((h), sizeof(int) * (n)))

static float *down(const float *d, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    ck_assert_msg(kernels_cuda_sync(&err) == 0, "%s", err.msg);
    ck_assert(cudaMemcpy(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
}

#define OK(call) ck_assert_msg((call) == 0, "%s: %s", #call, err.msg)

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            ck_abort_msg("%s: element %zu is %.9g, CPU reference %.9g", what, i, got[i], want[i]);
    }
}

// Device result (freed) against a host reference.
static void expect_dev(const char *what, float *dptr, const float *want, size_t n, double atol,
                       double rtol) {
    float *h = down(dptr, n);
    expect_close(what, h, want, n, atol, rtol);
    free(h);
    cudaFree(dptr);
}

START_TEST(test_matmul_cuda) {
    int shapes[][3] = {{1, 64, 33}, {5, 17, 9}, {37, 130, 70}};
    for (int s = 0; s < 3; s++) {
        int T = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *x = rnd(T * K, -1, 1), *W = rnd(N * K, -1, 1), *b = rnd(N, -1, 1), *o = rnd(T * N, -1, 1);
        float *dx = rnd(T * K, -1, 1), *dW = rnd(N * K, -1, 1), *db = rnd(N, -1, 1), *g = rnd(T * N, -1, 1);
        float *dx_, *dW_, *db_, *o_ = UPF(o, T * N);
        OK(matmul_forward_cuda(o_, UPF(x, T * K), UPF(W, N * K), UPF(b, N), T, K, N, 0.5f, 1.0f, &cb, &err));
        matmul_forward_ref(o, x, W, b, T, K, N, 0.5f, 1.0f);
        expect_dev("matmul_forward_cuda", o_, o, T * N, 1e-4, 1e-4);
        dx_ = UPF(dx, T * K), dW_ = UPF(dW, N * K), db_ = UPF(db, N);
        OK(matmul_backward_cuda(dx_, dW_, db_, UPF(g, T * N), UPF(x, T * K), UPF(W, N * K), T, K, N,
                                2.0f, 1.0f, &cb, &err));
        matmul_backward_ref(dx, dW, db, g, x, W, T, K, N, 2.0f, 1.0f);
        expect_dev("matmul_backward_cuda dx", dx_, dx, T * K, 1e-4, 1e-4);
        expect_dev("matmul_backward_cuda dW", dW_, dW, N * K, 1e-4, 1e-4);
        expect_dev("matmul_backward_cuda dbias", db_, db, N, 1e-4, 1e-4);
        free(x), free(W), free(b), free(o), free(dx), free(dW), free(db), free(g);
    }
}
END_TEST

START_TEST(test_rmsnorm_cuda) {
    int R = 37, C = 300;
    float *x = rnd(R * C, -2, 2), *w = rnd(C, 0.5, 1.5), *o = rnd(R * C, 0, 1), *rs = rnd(R, 0, 1);
    float *g = rnd(R * C, -1, 1), *dx = rnd(R * C, 0, 1), *dw = rnd(C, -1, 1);
    float *o_ = UPF(NULL, R * C), *rs_ = UPF(NULL, R), *x_ = UPF(x, R * C), *w_ = UPF(w, C);
    float *dx_ = UPF(NULL, R * C), *dw_ = UPF(dw, C);
    OK(rmsnorm_forward_cuda(o_, rs_, x_, w_, R, C, 1e-6f, 0, &err));
    rmsnorm_forward_ref(o, rs, x, w, R, C, 1e-6f);
    OK(rmsnorm_backward_cuda(dx_, dw_, UPF(g, R * C), x_, w_, rs_, R, C, 0, &err));
    rmsnorm_backward_ref(dx, dw, g, x, w, rs, R, C);
    expect_dev("rmsnorm_forward_cuda", o_, o, R * C, 1e-5, 1e-5);
    expect_dev("rmsnorm_forward_cuda rstd", rs_, rs, R, 1e-5, 1e-5);
    expect_dev("rmsnorm_backward_cuda dx", dx_, dx, R * C, 1e-5, 1e-4);
    expect_dev("rmsnorm_backward_cuda dw", dw_, dw, C, 1e-4, 1e-4);
    free(x), free(w), free(o), free(rs), free(g), free(dx), free(dw);
}
END_TEST

START_TEST(test_rope_cuda) {
    int T = 9, nh = 3, D = 64, P = 40, pos[9] = {0, 1, 2, 39, 5, 0, 7, 8, 20};
    float inv[32], *ct = malloc(4 * P * D / 2), *st = malloc(4 * P * D / 2);
    RopeScaling sc = {8.0f, 1.0f, 4.0f, 64};
    rope_inv_freq(inv, D, 500000.0f, &sc);
    rope_table_build(ct, st, inv, P, D);
    size_t n = (size_t)T * nh * D;
    float *x = rnd(n, -1, 1), *o = rnd(n, 0, 1), *dx = rnd(n, 0, 1);
    float *ct_ = UPF(ct, P * D / 2), *st_ = UPF(st, P * D / 2), *x_ = UPF(x, n);
    int *pos_ = UPI(pos, T);
    float *o_ = UPF(NULL, n), *dx_ = UPF(NULL, n);
    OK(rope_forward_cuda(o_, x_, pos_, ct_, st_, T, nh, D, 0, &err));
    OK(rope_backward_cuda(dx_, x_, pos_, ct_, st_, T, nh, D, 0, &err));
    rope_forward_ref(o, x, pos, ct, st, T, nh, D);
    rope_backward_ref(dx, x, pos, ct, st, T, nh, D);
    expect_dev("rope_forward_cuda", o_, o, n, 1e-6, 1e-6);
    expect_dev("rope_backward_cuda", dx_, dx, n, 1e-6, 1e-6);
    free(ct), free(st), free(x), free(o), free(dx);
}
END_TEST

// phi3's partial rotary: 48 of 64 dims rotated, the rest copied (out of place) or left (in place)
START_TEST(test_rope_partial_cuda) {
    int T = 9, nh = 3, D = 64, rd = 48, P = 40, pos[9] = {0, 1, 2, 39, 5, 0, 7, 8, 20};
    float inv[24], *ct = malloc(4 * P * rd / 2), *st = malloc(4 * P * rd / 2);
    rope_inv_freq(inv, rd, 10000.0f, NULL);
    rope_table_build(ct, st, inv, P, rd);
    size_t n = (size_t)T * nh * D;
    float *x = rnd(n, -1, 1), *o = rnd(n, 0, 1), *dx = rnd(n, 0, 1);
    float *ct_ = UPF(ct, P * rd / 2), *st_ = UPF(st, P * rd / 2), *x_ = UPF(x, n), *xi_ = UPF(x, n);
    int *pos_ = UPI(pos, T);
    float *o_ = UPF(NULL, n), *dx_ = UPF(NULL, n);
    OK(rope_partial_forward_cuda(o_, x_, pos_, ct_, st_, T, nh, D, rd, 0, &err));
    OK(rope_partial_forward_cuda(xi_, xi_, pos_, ct_, st_, T, nh, D, rd, 0, &err));
    OK(rope_partial_backward_cuda(dx_, x_, pos_, ct_, st_, T, nh, D, rd, 0, &err));
    rope_partial_forward_ref(o, x, pos, ct, st, T, nh, D, rd);
    rope_partial_backward_ref(dx, x, pos, ct, st, T, nh, D, rd);
    expect_dev("rope_partial_forward_cuda", o_, o, n, 1e-6, 1e-6);
    expect_dev("rope_partial_forward_cuda in place", xi_, o, n, 1e-6, 1e-6);
    expect_dev("rope_partial_backward_cuda", dx_, dx, n, 1e-6, 1e-6);
    free(ct), free(st), free(x), free(o), free(dx);
}
END_TEST

// cohere's LayerNorm: one weight row (the decoder norms), and a weight row per head
// cycling over the rows (Command-R+'s q/k norms: rows = T*H, C = D, wrows = H)
START_TEST(test_layernorm_cuda) {
    int shapes[][3] = {{37, 300, 1}, {40, 64, 8}};
    for (int s = 0; s < 2; s++) {
        int R = shapes[s][0], C = shapes[s][1], WR = shapes[s][2];
        float *x = rnd(R * C, -2, 4), *w = rnd(WR * C, 0.5, 1.5), *o = rnd(R * C, 0, 1), *rs = rnd(R, 0, 1);
        float *mu = rnd(R, 0, 1), *g = rnd(R * C, -1, 1), *dx = rnd(R * C, 0, 1), *dw = rnd(WR * C, -1, 1);
        float *o_ = UPF(NULL, R * C), *rs_ = UPF(NULL, R), *mu_ = UPF(NULL, R), *x_ = UPF(x, R * C),
              *w_ = UPF(w, WR * C), *dx_ = UPF(NULL, R * C), *dw_ = UPF(dw, WR * C);
        OK(layernorm_forward_cuda(o_, mu_, rs_, x_, w_, R, C, WR, 1e-5f, 0, &err));
        layernorm_forward_ref(o, mu, rs, x, w, R, C, WR, 1e-5f);
        OK(layernorm_backward_cuda(dx_, dw_, UPF(g, R * C), x_, w_, mu_, rs_, R, C, WR, 0, &err));
        layernorm_backward_ref(dx, dw, g, x, w, mu, rs, R, C, WR);
        expect_dev("layernorm_forward_cuda", o_, o, R * C, 1e-5, 1e-5);
        expect_dev("layernorm_forward_cuda mean", mu_, mu, R, 1e-5, 1e-5);
        expect_dev("layernorm_forward_cuda rstd", rs_, rs, R, 1e-5, 1e-5);
        expect_dev("layernorm_backward_cuda dx", dx_, dx, R * C, 1e-5, 1e-4);
        expect_dev("layernorm_backward_cuda dw", dw_, dw, WR * C, 1e-4, 1e-4);
        free(x), free(w), free(o), free(rs), free(mu), free(g), free(dx), free(dw);
    }
}
END_TEST

START_TEST(test_rope_interleaved_cuda) {
    int T = 9, nh = 3, D = 64, P = 40, pos[9] = {0, 1, 2, 39, 5, 0, 7, 8, 20};
    float inv[32], *ct = malloc(4 * P * D / 2), *st = malloc(4 * P * D / 2);
    rope_inv_freq(inv, D, 10000.0f, NULL);
    rope_table_build(ct, st, inv, P, D);
    size_t n = (size_t)T * nh * D;
    float *x = rnd(n, -1, 1), *o = rnd(n, 0, 1), *dx = rnd(n, 0, 1);
    float *ct_ = UPF(ct, P * D / 2), *st_ = UPF(st, P * D / 2), *x_ = UPF(x, n);
    int *pos_ = UPI(pos, T);
    float *o_ = UPF(NULL, n), *dx_ = UPF(NULL, n);
    OK(rope_interleaved_forward_cuda(o_, x_, pos_, ct_, st_, T, nh, D, 0, &err));
    OK(rope_interleaved_backward_cuda(dx_, x_, pos_, ct_, st_, T, nh, D, 0, &err));
    rope_interleaved_forward_ref(o, x, pos, ct, st, T, nh, D);
    rope_interleaved_backward_ref(dx, x, pos, ct, st, T, nh, D);
    expect_dev("rope_interleaved_forward_cuda", o_, o, n, 1e-6, 1e-6);
    expect_dev("rope_interleaved_backward_cuda", dx_, dx, n, 1e-6, 1e-6);
    free(ct), free(st), free(x), free(o), free(dx);
}
END_TEST

// _i = 1: a sliding window of 9 keys (shorter than the 70-token sequence, the decode's rows past it);
// _i = 2, 3: the same with a softcap 1.5 (gemma2's attn_logit_softcapping)
START_TEST(test_attention_cuda) {
    int cu[5] = {0, 5, 75, 76, 76}, nseq = 4, T = 76, H = 6, Hkv = 2, D = 40, W = _i & 1 ? 9 : 0;
    float cap = _i >= 2 ? 1.5f : 0.0f;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
    float *q = rnd(nq, -1.5, 1.5), *k = rnd(nk, -1.5, 1.5), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    float *o = malloc(4 * nq), *lse = malloc(4 * T * H), *dq = malloc(4 * nq), *dk = malloc(4 * nk),
          *dv = malloc(4 * nk);
    float *q_ = UPF(q, nq), *k_ = UPF(k, nk), *v_ = UPF(v, nk), *o_ = UPF(NULL, nq),
          *lse_ = UPF(NULL, T * H);
    int *cu_ = UPI(cu, nseq + 1);
    attention_forward_ref_cap(o, lse, q, k, v, cu, nseq, T, H, Hkv, D, W, cap);
    attention_backward_ref_cap(dq, dk, dv, g, q, k, v, o, lse, cu, nseq, T, H, Hkv, D, W, cap);
    OK(attention_forward_cap_cuda(o_, lse_, q_, k_, v_, cu_, nseq, T, H, Hkv, D, W, cap, 0, &err));
    float *dq_ = UPF(NULL, nq), *dk_ = UPF(NULL, nk), *dv_ = UPF(NULL, nk);
    OK(attention_backward_cap_cuda(dq_, dk_, dv_, UPF(g, nq), q_, k_, v_, o_, lse_, cu_, nseq, T, H,
                                   Hkv, D, W, cap, 0, &err));
    expect_dev("attention_backward_cuda dq", dq_, dq, nq, 1e-4, 1e-4);
    expect_dev("attention_backward_cuda dk", dk_, dk, nk, 1e-4, 1e-4);
    expect_dev("attention_backward_cuda dv", dv_, dv, nk, 1e-4, 1e-4);
    expect_dev("attention_forward_cuda out", o_, o, nq, 2e-5, 2e-5);
    expect_dev("attention_forward_cuda lse", lse_, lse, T * H, 2e-5, 2e-5);
    // decode over a paged cache: each sequence's cache holds its packed rows, in
    // KV_BLOCK-token blocks spread over a pool by its block table (sequence 1's
    // two blocks out of order, block 2 unused); 2, 3, 1 new tokens
    enum { NBLK = 5, MAXB = 2 };
    int cl[3] = {5, 70, 1}, cun[4] = {0, 2, 5, 6}, table[3 * MAXB] = {3, 0, 4, 0, 1, 0};
    size_t ks = (size_t)Hkv * D, pool = (size_t)NBLK * KV_BLOCK * ks;
    float *kc = rnd(pool, -1, 1), *vc = rnd(pool, -1, 1), *qn = rnd(6 * H * D, -1, 1);
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < cl[s]; j++) {
            size_t row = (size_t)table[s * MAXB + j / KV_BLOCK] * KV_BLOCK + j % KV_BLOCK;
            memcpy(kc + row * ks, k + (cu[s] + j) * ks, 4 * ks);
            memcpy(vc + row * ks, v + (cu[s] + j) * ks, 4 * ks);
        }
    float *od = malloc(4 * 6 * H * D), *od_ = UPF(NULL, 6 * H * D);
    attention_decode_forward_ref_cap(od, qn, kc, vc, cun, cl, table, MAXB, 3, H, Hkv, D, W, cap);
    OK(attention_decode_forward_cap_cuda(od_, UPF(qn, 6 * H * D), UPF(kc, pool), UPF(vc, pool), UPI(cun, 4),
                                         UPI(cl, 3), UPI(table, 3 * MAXB), MAXB, 3, 6, H, Hkv, D, W, cap, 0, &err));
    expect_dev("attention_decode_forward_cuda", od_, od, 6 * H * D, 2e-5, 2e-5);
    ck_assert_int_eq(attention_forward_cuda(o_, NULL, q_, k_, v_, cu_, nseq, T, H, Hkv, 300, W, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "head dim 300"));
    free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv);
    free(kc), free(vc), free(qn), free(od);
}
END_TEST

// Sinks (gpt_oss; attention_*_sink_cuda) against the CPU references with sinks:
// the forward (out, lse), the backward (dq, dk, dv, and dsinks accumulated onto
// nonzero values: atomics in another order, so 1e-4 of the largest), and the
// decode over an fp32 and a bf16 pool; _i: full, or a window of 9 with a softcap 1.5.
START_TEST(test_attention_sink_cuda) {
    int cu[4] = {0, 5, 75, 76}, nseq = 3, T = 76, H = 6, Hkv = 2, D = 40, W = _i ? 9 : 0;
    float cap = _i ? 1.5f : 0.0f;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
    float *q = rnd(nq, -1.5, 1.5), *k = rnd(nk, -1.5, 1.5), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    float *sinks = rnd(H, -1, 2.5), ds[6] = {0.5f, -1, 0, 2, 0.25f, 3};
    float *o = malloc(4 * nq), *lse = malloc(4 * T * H), *dq = malloc(4 * nq), *dk = malloc(4 * nk),
          *dv = malloc(4 * nk);
    float *q_ = UPF(q, nq), *k_ = UPF(k, nk), *v_ = UPF(v, nk), *o_ = UPF(NULL, nq), *lse_ = UPF(NULL, T * H);
    float *s_ = UPF(sinks, H), *ds_ = UPF(ds, H);
    int *cu_ = UPI(cu, nseq + 1);
    attention_forward_ref_sink(o, lse, q, k, v, cu, nseq, T, H, Hkv, D, W, cap, sinks);
    attention_backward_ref_sink(dq, dk, dv, g, q, k, v, o, lse, cu, nseq, T, H, Hkv, D, W, cap, sinks, ds);
    OK(attention_forward_sink_cuda(o_, lse_, q_, k_, v_, cu_, nseq, T, H, Hkv, D, W, cap, s_, 0, &err));
    float *dq_ = UPF(NULL, nq), *dk_ = UPF(NULL, nk), *dv_ = UPF(NULL, nk);
    OK(attention_backward_sink_cuda(dq_, dk_, dv_, UPF(g, nq), q_, k_, v_, o_, lse_, cu_, nseq, T, H, Hkv, D, W, cap,
                                    s_, ds_, 0, &err));
    double most = 1;
    for (int h = 0; h < H; h++) most = fmax(most, fabs(ds[h]));
    expect_dev("attention_backward_sink_cuda dq", dq_, dq, nq, 1e-4, 1e-4);
    expect_dev("attention_backward_sink_cuda dk", dk_, dk, nk, 1e-4, 1e-4);
    expect_dev("attention_backward_sink_cuda dv", dv_, dv, nk, 1e-4, 1e-4);
    expect_dev("attention_backward_sink_cuda dsinks", ds_, ds, H, 1e-4 * most, 0);
    expect_dev("attention_forward_sink_cuda out", o_, o, nq, 2e-5, 2e-5);
    expect_dev("attention_forward_sink_cuda lse", lse_, lse, T * H, 2e-5, 2e-5);
    enum { NBLK = 5, MAXB = 2 };
    int cl[3] = {5, 70, 1}, cun[4] = {0, 2, 5, 6}, table[3 * MAXB] = {3, 0, 4, 0, 1, 0};
    size_t pool = (size_t)NBLK * KV_BLOCK * Hkv * D, no = 6 * (size_t)H * D;
    float *k32 = rnd(pool, -1.5, 1.5), *v32 = rnd(pool, -1, 1), *qn = rnd(no, -1.5, 1.5), *od = malloc(4 * no);
    void *kp = malloc(4 * pool), *vp = malloc(4 * pool);
    for (int di = 0; di < 2; di++) {
        DType dt = di ? DT_BF16 : DT_F32;
        dtype_from_f32(kp, k32, dt, pool);
        dtype_from_f32(vp, v32, dt, pool);
        attention_decode_forward_ref_sink(od, qn, kp, vp, dt, cun, cl, table, MAXB, 3, H, Hkv, D, W, cap, sinks);
        float *od_ = UPF(NULL, no);
        OK(attention_decode_forward_sink_cuda(od_, UPF(qn, no), up(kp, pool * dtype_size(dt)),
                                              up(vp, pool * dtype_size(dt)), dt, UPI(cun, 4), UPI(cl, 3),
                                              UPI(table, 3 * MAXB), MAXB, 3, 6, H, Hkv, D, W, cap, s_, 0, &err));
        expect_dev("attention_decode_forward_sink_cuda", od_, od, no, 2e-5, 2e-5);
    }
    free(q), free(k), free(v), free(g), free(sinks), free(o), free(lse), free(dq), free(dk), free(dv);
    free(k32), free(v32), free(qn), free(od), free(kp), free(vp);
}
END_TEST

START_TEST(test_swiglu_cuda) {
    size_t n = 10007;
    float *a = rnd(n, -8, 8), *u = rnd(n, -2, 2), *g = rnd(n, -1, 1);
    float *o = malloc(4 * n), *da = malloc(4 * n), *du = malloc(4 * n);
    float *a_ = UPF(a, n), *u_ = UPF(u, n), *o_ = UPF(NULL, n), *da_ = UPF(NULL, n), *du_ = UPF(NULL, n);
    OK(swiglu_forward_cuda(o_, a_, u_, n, 0, &err));
    OK(swiglu_backward_cuda(da_, du_, UPF(g, n), a_, u_, n, 0, &err));
    swiglu_forward_ref(o, a, u, n);
    swiglu_backward_ref(da, du, g, a, u, n);
    expect_dev("swiglu_forward_cuda", o_, o, n, 1e-6, 1e-5);
    expect_dev("swiglu_backward_cuda dgate", da_, da, n, 1e-6, 1e-5);
    expect_dev("swiglu_backward_cuda dup", du_, du, n, 1e-6, 1e-5);
    free(a), free(u), free(g), free(o), free(da), free(du);
}
END_TEST

// gpt_oss's clamped swiglu: values on both sides of the clamps (limit 7), fp32 expf on both sides.
START_TEST(test_swiglu_clamp_cuda) {
    size_t n = 10007;
    float *a = rnd(n, -12, 12), *u = rnd(n, -12, 12), *g = rnd(n, -1, 1);
    float *o = malloc(4 * n), *da = malloc(4 * n), *du = malloc(4 * n);
    float *a_ = UPF(a, n), *u_ = UPF(u, n), *o_ = UPF(NULL, n), *da_ = UPF(NULL, n), *du_ = UPF(NULL, n);
    OK(swiglu_clamp_forward_cuda(o_, a_, u_, n, 1.702f, 7.0f, 0, &err));
    OK(swiglu_clamp_backward_cuda(da_, du_, UPF(g, n), a_, u_, n, 1.702f, 7.0f, 0, &err));
    swiglu_clamp_forward_ref(o, a, u, n, 1.702f, 7.0f);
    swiglu_clamp_backward_ref(da, du, g, a, u, n, 1.702f, 7.0f);
    expect_dev("swiglu_clamp_forward_cuda", o_, o, n, 1e-6, 1e-5);
    expect_dev("swiglu_clamp_backward_cuda dgate", da_, da, n, 1e-6, 1e-5);
    expect_dev("swiglu_clamp_backward_cuda dup", du_, du, n, 1e-6, 1e-5);
    free(a), free(u), free(g), free(o), free(da), free(du);
}
END_TEST

START_TEST(test_geglu_cuda) {
    size_t n = 10007;
    float *a = rnd(n, -8, 8), *u = rnd(n, -2, 2), *g = rnd(n, -1, 1);
    float *o = malloc(4 * n), *da = malloc(4 * n), *du = malloc(4 * n);
    float *a_ = UPF(a, n), *u_ = UPF(u, n), *o_ = UPF(NULL, n), *da_ = UPF(NULL, n), *du_ = UPF(NULL, n);
    OK(geglu_forward_cuda(o_, a_, u_, n, 0, &err));
    OK(geglu_backward_cuda(da_, du_, UPF(g, n), a_, u_, n, 0, &err));
    geglu_forward_ref(o, a, u, n);
    geglu_backward_ref(da, du, g, a, u, n);
    expect_dev("geglu_forward_cuda", o_, o, n, 1e-6, 1e-5);
    expect_dev("geglu_backward_cuda dgate", da_, da, n, 1e-6, 1e-5);
    expect_dev("geglu_backward_cuda dup", du_, du, n, 1e-6, 1e-5);
    free(a), free(u), free(g), free(o), free(da), free(du);
}
END_TEST

// scale: one rounded product a value on both sides: the CPU's bits.
START_TEST(test_scale_cuda) {
    size_t n = 10007;
    float *x = rnd(n, -8, 8), *x_ = UPF(x, n);
    OK(scale_forward_cuda(x_, n, 0.22f, 0, &err));
    scale_forward(x, n, 0.22f);
    expect_dev("scale_forward_cuda", x_, x, n, 0, 0);
    free(x);
}
END_TEST

START_TEST(test_matmul_lora_cuda) {
    int T = 3, K = 100, N = 70, R = 5;
    float *x = rnd(T * K, -1, 1), *W = rnd(N * K, -1, 1), *A = rnd(R * K, -1, 1), *B = rnd(N * R, -1, 1);
    float *bias = rnd(N, -1, 1), *o = rnd(T * N, -1, 1), *la = malloc(4 * T * R);
    float *o_ = UPF(o, T * N), *la_ = UPF(NULL, T * R);
    OK(matmul_forward_lora_cuda(o_, la_, UPF(x, T * K), UPF(W, N * K), UPF(bias, N), UPF(A, R * K), UPF(B, N * R),
                                T, K, N, R, 0.75f, 1.0f, &cb, &err));
    matmul_forward_lora_ref(o, la, x, W, bias, A, B, T, K, N, R, 0.75f, 1.0f);
    expect_dev("matmul_forward_lora_cuda", o_, o, T * N, 1e-4, 1e-4);
    expect_dev("matmul_forward_lora_cuda la", la_, la, T * R, 1e-4, 1e-4);
    free(x), free(W), free(A), free(B), free(bias), free(o), free(la);
}
END_TEST

START_TEST(test_logprob_cuda) {
    int T = 13, C = 48, V = 300, vchunk = 64, tg[13];
    float temp = 0.7f;
    for (int t = 0; t < T; t++) tg[t] = (int)rng_below(&rng, V);
    tg[0] = V - 1;
    float *h = rnd(T * C, -1, 1), *W = rnd(V * C, -1, 1), *dl = rnd(T, -1, 1), *de = rnd(T, -1, 1);
    float lp[13], ent[13], lse[13], *dh = malloc(4 * T * C), *dW = rnd(V * C, -1, 1);
    float *h_ = UPF(h, T * C), *W_ = UPF(W, V * C), *ws_ = UPF(NULL, logprob_workspace_floats(T, vchunk));
    float *lp_ = UPF(NULL, T), *ent_ = UPF(NULL, T), *lse_ = UPF(NULL, T), *dh_ = UPF(NULL, T * C),
          *dW_ = UPF(dW, V * C);
    int *tg_ = UPI(tg, T);
    OK(logprob_forward_ref(lp, ent, lse, h, W, tg, T, C, V, temp, &err));
    logprob_backward_ref(dh, dW, dl, de, h, W, tg, T, C, V, temp);
    OK(logprob_forward_cuda(lp_, ent_, lse_, h_, W_, tg_, T, C, V, temp, ws_, vchunk, &cb, &err));
    OK(logprob_backward_cuda(dh_, dW_, UPF(dl, T), UPF(de, T), h_, W_, tg_, lse_, ent_, T, C, V, temp,
                             ws_, vchunk, &cb, &err));
    expect_dev("logprob_forward_cuda logp", lp_, lp, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_cuda entropy", ent_, ent, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_cuda lse", lse_, lse, T, 2e-5, 2e-5);
    expect_dev("logprob_backward_cuda dhidden", dh_, dh, T * C, 1e-4, 1e-4);
    expect_dev("logprob_backward_cuda dw_lm", dW_, dW, V * C, 1e-4, 1e-4);
    // the expectation path, 4 rows per block (ragged last), no entropy gradient
    logprob_backward_ref(dh, NULL, dl, NULL, h, W, tg, T, C, V, temp);
    float *ex_ = UPF(NULL, T * C), *ws4_ = UPF(NULL, 4 * V), *dh2_ = UPF(NULL, T * C);
    lp_ = UPF(NULL, T), ent_ = UPF(NULL, T), lse_ = UPF(NULL, T);
    OK(logprob_forward_expect_cuda(lp_, ent_, lse_, ex_, h_, W_, tg_, T, C, V, temp, ws4_, 4 * V, &cb, &err));
    OK(logprob_backward_expect_cuda(dh2_, UPF(dl, T), ex_, W_, tg_, T, C, temp, &cb, &err));
    expect_dev("logprob_forward_expect_cuda logp", lp_, lp, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_expect_cuda entropy", ent_, ent, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_expect_cuda lse", lse_, lse, T, 2e-5, 2e-5);
    expect_dev("logprob_backward_expect_cuda dhidden", dh2_, dh, T * C, 1e-4, 1e-4);
    // gemma2's final_logit_softcapping 3 (logits up to ~8 here: bent), and the decode head's softcap op
    float cap = 3.0f, *dW2 = rnd(V * C, -1, 1), *dW2_ = UPF(dW2, V * C), *dh3_ = UPF(NULL, T * C);
    OK(logprob_forward_ref_cap(lp, ent, lse, h, W, tg, T, C, V, temp, cap, &err));
    logprob_backward_ref_cap(dh, dW2, dl, de, h, W, tg, T, C, V, temp, cap);
    lp_ = UPF(NULL, T), ent_ = UPF(NULL, T), lse_ = UPF(NULL, T);
    OK(logprob_forward_cap_dt_cuda(lp_, ent_, lse_, h_, W_, DT_F32, tg_, T, C, V, temp, cap, ws_, vchunk, &cb, &err));
    OK(logprob_backward_cap_dt_cuda(dh3_, dW2_, UPF(dl, T), UPF(de, T), h_, W_, DT_F32, tg_, lse_, ent_, T, C, V, temp,
                                    cap, ws_, vchunk, &cb, &err));
    expect_dev("logprob_forward_cap_dt_cuda logp", lp_, lp, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_cap_dt_cuda entropy", ent_, ent, T, 2e-5, 2e-5);
    expect_dev("logprob_backward_cap_dt_cuda dhidden", dh3_, dh, T * C, 1e-4, 1e-4);
    expect_dev("logprob_backward_cap_dt_cuda dw_lm", dW2_, dW2, V * C, 1e-4, 1e-4);
    logprob_backward_ref_cap(dh, NULL, dl, NULL, h, W, tg, T, C, V, temp, cap);  // the capped expectation pair
    float *ex2_ = UPF(NULL, T * C), *dh4_ = UPF(NULL, T * C);
    lp_ = UPF(NULL, T);
    OK(logprob_forward_expect_cap_dt_cuda(lp_, NULL, NULL, ex2_, h_, W_, DT_F32, tg_, T, C, V, temp, cap, ws4_, 4 * V,
                                          &cb, &err));
    OK(logprob_backward_expect_cap_dt_cuda(dh4_, UPF(dl, T), ex2_, W_, DT_F32, tg_, T, C, temp, cap, h_, &cb, &err));
    expect_dev("logprob_forward_expect_cap_dt_cuda logp", lp_, lp, T, 2e-5, 2e-5);
    expect_dev("logprob_backward_expect_cap_dt_cuda dhidden", dh4_, dh, T * C, 1e-4, 1e-4);
    float *x = rnd(1001, -20, 20), *x_ = UPF(x, 1001);
    softcap_forward_ref(x, 1001, cap);
    OK(softcap_forward_cuda(x_, 1001, cap, 0, &err));
    expect_dev("softcap_forward_cuda", x_, x, 1001, 1e-6, 1e-6);
    free(x), free(dW2);
    free(h), free(W), free(dl), free(de), free(dh), free(dW);
}
END_TEST

START_TEST(test_embedding_adamw_cuda) {
    int T = 11, C = 300, V = 17, tok[11] = {3, 0, 16, 3, 3, 5, 16, 1, 2, 3, 9};
    float *tab = rnd(V * C, -1, 1), *o = malloc(4 * T * C), *g = rnd(T * C, -1, 1), *dt = rnd(V * C, -1, 1);
    float *o_ = UPF(NULL, T * C), *dt_ = UPF(dt, V * C);
    int *tok_ = UPI(tok, T);
    OK(embedding_forward_ref(o, tab, tok, T, C, V, &err));
    embedding_backward_ref(dt, g, tok, T, C);
    OK(embedding_forward_cuda(o_, UPF(tab, V * C), tok_, T, C, V, 0, &err));
    OK(embedding_backward_cuda(dt_, UPF(g, T * C), tok_, T, C, 0, &err));
    expect_dev("embedding_forward_cuda", o_, o, T * C, 0, 0);
    expect_dev("embedding_backward_cuda", dt_, dt, V * C, 1e-6, 1e-6);  // atomics: any order
    size_t n = 100003;
    float *p = rnd(n, -1, 1), *m = rnd(n, -0.1, 0.1), *v = rnd(n, 0, 0.01), *gr = rnd(n, -3, 3);
    float *p_ = UPF(p, n), *m_ = UPF(m, n), *v_ = UPF(v, n), *gr_ = UPF(gr, n);
    double *ss_ = up(NULL, sizeof(double)), ss;
    OK(adamw_grad_sumsq_cuda(ss_, gr_, n, 0, &err));
    OK(kernels_cuda_sync(&err));
    ck_assert(cudaMemcpy(&ss, ss_, sizeof ss, cudaMemcpyDeviceToHost) == cudaSuccess);
    double ssr = adamw_grad_sumsq_ref(gr, n);
    ck_assert_msg(fabs(ss - ssr) <= 1e-10 * ssr, "sumsq %.17g, CPU %.17g", ss, ssr);
    float sc = adamw_clip_scale(ssr, 1.0f);
    for (int step = 1; step <= 3; step++) {
        OK(adamw_update_cuda(p_, m_, v_, gr_, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, sc, 0, &err));
        adamw_update_ref(p, m, v, gr, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, sc);
    }
    expect_dev("adamw_update_cuda p", p_, p, n, 1e-6, 1e-6);
    expect_dev("adamw_update_cuda m", m_, m, n, 1e-7, 1e-6);
    expect_dev("adamw_update_cuda v", v_, v, n, 1e-9, 1e-5);
    free(tab), free(o), free(g), free(dt), free(p), free(m), free(v), free(gr);
}
END_TEST

// ---- weights in a storage dtype: every _dt twin against the CPU reference on
// the exactly converted (bf16, f16) or dequantized (quant_dequant) weight, at
// the tolerances above; the conversion panel shrunk (several row panels a
// product, a quantized panel starting mid-weight at a row's first block) ----
extern size_t matmul_dt_cuda_panel_floats;  // kernels/matmul.cu

// A (rows, K) weight as dt from uniform [-1, 1) floats: bf16 / f16 rounded, a
// quantized dt by the block writer; wc gets it back as fp32 (the reference's
// weight). rows * dtype_row_bytes(dt, K) bytes.
static void *dt_weight(float *wc, size_t rows, int K, DType dt) {
    size_t n = rows * (size_t)K;
    float *f = rnd(n, -1, 1);
    void *h = malloc(rows * dtype_row_bytes(dt, (size_t)K) + 1);
    if (dtype_is_quant(dt)) {
        q_write(h, f, dt, n);
        quant_dequant(wc, h, dt, n);
    } else {
        dtype_from_f32(h, f, dt, n);
        dtype_to_f32(wc, h, dt, n);
    }
    free(f);
    return h;
}

// Shapes (T, K, N): a quantized dt's K in whole blocks (1 to 3: 32 .. 768).
static void dtype_cuda_case(DType dt, size_t panel) {
    matmul_dt_cuda_panel_floats = panel;
    char what[128];
    int qk = dtype_block(dt), q = dtype_is_quant(dt);
    int shapes[][3] = {{1, q ? 2 * qk : 64, 33}, {5, q ? qk : 17, 9}, {37, q ? 3 * qk : 130, q ? 40 : 70}};
    for (int sh = 0; sh < 3; sh++) {
        int T = shapes[sh][0], K = shapes[sh][1], N = shapes[sh][2];
        float *Wc = malloc(4 * N * K);
        void *Wh = dt_weight(Wc, N, K, dt);
        void *W_ = up(Wh, N * dtype_row_bytes(dt, K));
        float *x = rnd(T * K, -1, 1), *b = rnd(N, -1, 1), *o = rnd(T * N, -1, 1);
        float *dx = rnd(T * K, -1, 1), *dW = rnd(N * K, -1, 1), *db = rnd(N, -1, 1), *g = rnd(T * N, -1, 1);
        float *o_ = UPF(o, T * N), *x_ = UPF(x, T * K);
        OK(matmul_forward_dt_cuda(o_, x_, W_, dt, UPF(b, N), T, K, N, 0.5f, 1.0f, &cb, &err));
        matmul_forward_ref(o, x, Wc, b, T, K, N, 0.5f, 1.0f);
        snprintf(what, sizeof what, "matmul_forward_dt_cuda %s T=%d K=%d N=%d panel %zu", dtype_name(dt), T, K, N, panel);
        expect_dev(what, o_, o, T * N, 1e-4, 1e-4);
        float *dx_ = UPF(dx, T * K), *dW_ = UPF(dW, N * K), *db_ = UPF(db, N);
        OK(matmul_backward_dt_cuda(dx_, dW_, db_, UPF(g, T * N), x_, W_, dt, T, K, N, 2.0f, 0.5f, &cb, &err));
        matmul_backward_ref(dx, dW, db, g, x, Wc, T, K, N, 2.0f, 0.5f);
        snprintf(what, sizeof what, "matmul_backward_dt_cuda dx %s T=%d K=%d N=%d panel %zu", dtype_name(dt), T, K, N, panel);
        expect_dev(what, dx_, dx, T * K, 1e-4, 1e-4);
        expect_dev("matmul_backward_dt_cuda dW", dW_, dW, N * K, 1e-4, 1e-4);
        expect_dev("matmul_backward_dt_cuda dbias", db_, db, N, 1e-4, 1e-4);
        int R = 5;
        float *A = rnd(R * K, -1, 1), *B = rnd(N * R, -1, 1), *la = malloc(4 * T * R), *o2 = rnd(T * N, -1, 1);
        float *o2_ = UPF(o2, T * N), *la_ = UPF(NULL, T * R);
        OK(matmul_forward_lora_dt_cuda(o2_, la_, x_, W_, dt, UPF(b, N), UPF(A, R * K), UPF(B, N * R), T, K, N, R,
                                       0.75f, 1.0f, &cb, &err));
        matmul_forward_lora_ref(o2, la, x, Wc, b, A, B, T, K, N, R, 0.75f, 1.0f);
        expect_dev("matmul_forward_lora_dt_cuda", o2_, o2, T * N, 1e-4, 1e-4);
        expect_dev("matmul_forward_lora_dt_cuda la", la_, la, T * R, 1e-4, 1e-4);
        free(Wc), free(Wh), free(x), free(b), free(o), free(dx), free(dW), free(db), free(g);
        free(A), free(B), free(la), free(o2);
    }
    // the head (vocab rows of a quantized one at v0 * dtype_row_bytes(dt, C)); hidden
    // scaled so that the logits spread as with C = 48
    int T = 13, C = q ? (qk < 64 ? 64 : qk) : 48, V = 300, vchunk = 64, tg[13];
    float temp = 0.7f, hs = sqrtf(48.0f / C);
    for (int t = 0; t < T; t++) tg[t] = (int)rng_below(&rng, V);
    tg[0] = V - 1;
    float *Wc = malloc(4 * V * C);
    void *Wh = dt_weight(Wc, V, C, dt);
    void *W_ = up(Wh, V * dtype_row_bytes(dt, C));
    float *h = rnd(T * C, -hs, hs), *dl = rnd(T, -1, 1), *de = rnd(T, -1, 1);
    float lp[13], ent[13], lse[13], *dh = malloc(4 * T * C), *dW = rnd(V * C, -1, 1);
    float *h_ = UPF(h, T * C), *ws_ = UPF(NULL, logprob_workspace_floats(T, vchunk));
    float *lp_ = UPF(NULL, T), *ent_ = UPF(NULL, T), *lse_ = UPF(NULL, T), *dh_ = UPF(NULL, T * C),
          *dW_ = UPF(dW, V * C), *dl_ = UPF(dl, T);
    int *tg_ = UPI(tg, T);
    OK(logprob_forward_ref(lp, ent, lse, h, Wc, tg, T, C, V, temp, &err));
    logprob_backward_ref(dh, dW, dl, de, h, Wc, tg, T, C, V, temp);
    OK(logprob_forward_dt_cuda(lp_, ent_, lse_, h_, W_, dt, tg_, T, C, V, temp, ws_, vchunk, &cb, &err));
    OK(logprob_backward_dt_cuda(dh_, dW_, dl_, UPF(de, T), h_, W_, dt, tg_, lse_, ent_, T, C, V, temp, ws_,
                                vchunk, &cb, &err));
    snprintf(what, sizeof what, "logprob_forward_dt_cuda %s panel %zu", dtype_name(dt), panel);
    expect_dev(what, lp_, lp, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_dt_cuda entropy", ent_, ent, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_dt_cuda lse", lse_, lse, T, 2e-5, 2e-5);
    expect_dev("logprob_backward_dt_cuda dhidden", dh_, dh, T * C, 1e-4, 1e-4);
    expect_dev("logprob_backward_dt_cuda dw_lm", dW_, dW, V * C, 1e-4, 1e-4);
    logprob_backward_ref(dh, NULL, dl, NULL, h, Wc, tg, T, C, V, temp);
    float *ex_ = UPF(NULL, T * C), *ws4_ = UPF(NULL, 4 * V), *dh2_ = UPF(NULL, T * C);
    lp_ = UPF(NULL, T), ent_ = UPF(NULL, T), lse_ = UPF(NULL, T);
    OK(logprob_forward_expect_dt_cuda(lp_, ent_, lse_, ex_, h_, W_, dt, tg_, T, C, V, temp, ws4_, 4 * V, &cb, &err));
    OK(logprob_backward_expect_dt_cuda(dh2_, dl_, ex_, W_, dt, tg_, T, C, temp, &cb, &err));
    expect_dev("logprob_forward_expect_dt_cuda logp", lp_, lp, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_expect_dt_cuda entropy", ent_, ent, T, 2e-5, 2e-5);
    expect_dev("logprob_forward_expect_dt_cuda lse", lse_, lse, T, 2e-5, 2e-5);
    expect_dev("logprob_backward_expect_dt_cuda dhidden", dh2_, dh, T * C, 1e-4, 1e-4);
    // the embedding: exact
    int ET = 11, tok[11] = {3, 0, 16, 3, 3, 5, 16, 1, 2, 3, 9};
    float *eo = malloc(4 * ET * C), *eo_ = UPF(NULL, ET * C);
    OK(embedding_forward_ref(eo, Wc, tok, ET, C, V, &err));
    OK(embedding_forward_dt_cuda(eo_, W_, dt, UPI(tok, ET), ET, C, V, 0, &err));
    expect_dev("embedding_forward_dt_cuda", eo_, eo, ET * C, 0, 0);
    if (q) {  // a row that is not whole blocks: refused before any launch (no output touched)
        ck_assert_int_eq(matmul_forward_dt_cuda(NULL, h_, W_, dt, NULL, T, C - 16, 2, 1.0f, 0.0f, &cb, &err), -1);
        ck_assert_msg(strstr(err.msg, "not whole blocks"), "%s", err.msg);
        ck_assert_int_eq(matmul_backward_dt_cuda(NULL, NULL, NULL, dl_, h_, W_, dt, T, C + 16, 1, 1.0f, 0.0f, &cb, &err),
                         -1);
        ck_assert_int_eq(embedding_forward_dt_cuda(NULL, W_, dt, tg_, T, C - 16, V, 0, &err), -1);
        ck_assert_int_eq(logprob_backward_expect_dt_cuda(NULL, dl_, NULL, W_, dt, tg_, T, C - 16, temp, &cb, &err), -1);
        ck_assert_int_eq(dtype_to_f32_cuda(NULL, W_, dt, (size_t)qk + 1, 0, &err), -1);
    }
    free(Wc), free(Wh), free(h), free(dl), free(de), free(dh), free(dW), free(eo);
}

// The sampler: the CPU's tokens and log-probs from the same logits and
// streams. The probabilities are the same bits; the double sums are reduced in
// another order, so a token may differ only when the uniform lands within a
// few ulps of a cumulative boundary: over these rows none does (a mismatch in
// more than 1 row of 512 a case is a bug, not rounding). Every slot's stream
// advanced exactly as on the CPU.
START_TEST(test_sample_cuda) {
    enum { V = 1031, R = 64, ROWS = 512 };
    float *logits = rnd((size_t)R * V, -8, 8);
    int lrow[ROWS], rslot[ROWS];
    for (int a = 0; a < ROWS; a++) lrow[a] = a % R, rslot[a] = (a * 7) % ROWS;
    int32_t stops[2] = {5, 17};
    SampleParams cases[] = {{1.0, 1, 0, 0}, {0.7, 0.9, 0, 0}, {1.1, 1, 0.2, 0}, {0.8, 0.95, 0.1, 40}, {0, 1, 0, 0}};
    float *dl = UPF(logits, (size_t)R * V);
    int *dlr = UPI(lrow, ROWS), *drs = UPI(rslot, ROWS);
    int32_t *dstop = (int32_t *)up(stops, sizeof stops), *dtok = (int32_t *)up(NULL, ROWS * sizeof(int32_t));
    float *dlp = UPF(NULL, ROWS);
    uint8_t *dst = (uint8_t *)up(NULL, ROWS);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        static uint64_t st[ROWS * 4], got_st[ROWS * 4];
        for (int k = 0; k < ROWS; k++) rng_seed((Rng *)&st[4 * k], 3 + c, (uint64_t)k);
        uint64_t *drng = (uint64_t *)up(st, sizeof st);
        size_t wsb = sample_ws_bytes_cuda(ROWS, V, &cases[c]);
        void *ws = up(NULL, wsb);
        OK(sample_forward_cuda(dtok, dlp, dst, drng, dl, dlr, drs, ROWS, V, &cases[c], dstop, 2, ws, wsb, 0, &err));
        int32_t tok[ROWS], ctok[ROWS];
        float lp[ROWS], clp[ROWS];
        uint8_t stp[ROWS], cstp[ROWS];
        OK(kernels_cuda_sync(&err));
        ck_assert(cudaMemcpy(tok, dtok, sizeof tok, cudaMemcpyDeviceToHost) == cudaSuccess);
        ck_assert(cudaMemcpy(lp, dlp, sizeof lp, cudaMemcpyDeviceToHost) == cudaSuccess);
        ck_assert(cudaMemcpy(stp, dst, sizeof stp, cudaMemcpyDeviceToHost) == cudaSuccess);
        ck_assert(cudaMemcpy(got_st, drng, sizeof got_st, cudaMemcpyDeviceToHost) == cudaSuccess);
        OK(sample_forward_ref(ctok, clp, cstp, st, logits, lrow, rslot, ROWS, V, &cases[c], stops, 2, &err));
        int differ = 0;
        for (int a = 0; a < ROWS; a++) {
            if (tok[a] != ctok[a]) { differ++; continue; }
            ck_assert_msg(fabsf(lp[a] - clp[a]) <= 1e-5f, "case %zu row %d: log-prob %g, CPU %g", c, a, lp[a], clp[a]);
            ck_assert(stp[a] == cstp[a]);
        }
        ck_assert_msg(differ <= 1, "case %zu: %d of %d tokens differ from the CPU's", c, differ, ROWS);
        ck_assert_msg(memcmp(st, got_st, sizeof st) == 0, "case %zu: the streams moved otherwise", c);
        cudaFree(drng), cudaFree(ws);
    }
    cudaFree(dl), cudaFree(dlr), cudaFree(drs), cudaFree(dstop), cudaFree(dtok), cudaFree(dlp), cudaFree(dst);
    free(logits);
}
END_TEST

START_TEST(test_dtype_cuda) {
    size_t saved = matmul_dt_cuda_panel_floats;
    DType dts[2] = {DT_BF16, DT_F16};
    for (int d = 0; d < 2; d++) {
        dtype_cuda_case(dts[d], saved);
        dtype_cuda_case(dts[d], 1000);
    }
    matmul_dt_cuda_panel_floats = saved;
    // DT_F32 takes the fp32 twins
    int T = 5, K = 17, N = 9;
    float *x = rnd(T * K, -1, 1), *W = rnd(N * K, -1, 1), *o = rnd(T * N, -1, 1);
    float *o_ = UPF(o, T * N);
    OK(matmul_forward_dt_cuda(o_, UPF(x, T * K), UPF(W, N * K), DT_F32, NULL, T, K, N, 1.0f, 0.0f, &cb, &err));
    matmul_forward_ref(o, x, W, NULL, T, K, N, 1.0f, 0.0f);
    expect_dev("matmul_forward_dt_cuda f32", o_, o, T * N, 1e-4, 1e-4);
    free(x), free(W), free(o);
}
END_TEST

// Every quantized dtype through every _dt twin (the matmul products, the LoRA
// forward, dx, the head's log-probs and gradients, the expectation pair, the
// embedding), conversion panels of 32 blocks (10 to 32 W rows: products of 3 to
// 19 panels, each but the first starting mid-weight at a row's first block),
// and the rows refused that are not whole blocks.
START_TEST(test_quant_cuda) {
    rng_seed(&rng, 4646, 2);
    size_t saved = matmul_dt_cuda_panel_floats;
    dtype_cuda_case(qdts[_i], 32 * (size_t)dtype_block(qdts[_i]));
    matmul_dt_cuda_panel_floats = saved;
}
END_TEST

// dtype_to_f32_cuda (the _dt products' panel conversion): bit for bit the CPU's
// floats, quant_dequant's for the quantized dtypes (random blocks and written
// ones, from the first block and from block 5), dtype_to_f32's for bf16 / f16.
START_TEST(test_dequant_cuda) {
    rng_seed(&rng, 4646, 1);
    for (int d = 0; d < 8; d++) {
        DType dt = qdts[d];
        size_t qk = (size_t)dtype_block(dt), bb = dtype_block_bytes(dt), n = 2 * QNB * qk;
        uint8_t *b = q_blocks(dt), *b_ = up(b, 2 * QNB * bb);
        float *want = malloc(4 * n), *got_ = UPF(NULL, n);
        quant_dequant(want, b, dt, n);
        for (int from = 0; from <= 5; from += 5) {
            OK(dtype_to_f32_cuda(got_, b_ + from * bb, dt, n - from * qk, 0, &err));
            float *got = down(got_, n - from * qk);
            for (size_t i = 0; i < n - from * qk; i++)
                ck_assert_msg(memcmp(&got[i], &want[from * qk + i], 4) == 0,
                              "dtype_to_f32_cuda %s from block %d: element %zu is %.9g, quant_dequant %.9g",
                              dtype_name(dt), from, i, got[i], want[from * qk + i]);
            free(got);
        }
        cudaFree(b_), cudaFree(got_);
        free(b), free(want);
    }
    for (DType dt = DT_BF16; dt <= DT_F16; dt++) {
        size_t n = 1001;
        float *want = malloc(4 * n), *got_ = UPF(NULL, n);
        void *h = dt_weight(want, 1, (int)n, dt), *h_ = up(h, 2 * n);
        OK(dtype_to_f32_cuda(got_, h_, dt, n, 0, &err));
        float *got = down(got_, n);
        ck_assert_msg(memcmp(got, want, 4 * n) == 0, "dtype_to_f32_cuda %s differs from dtype_to_f32", dtype_name(dt));
        cudaFree(h_), cudaFree(got_);
        free(want), free(h), free(got);
    }
}
END_TEST

// Decode over 16-bit pools (attention_decode_forward_dt_cuda) against the CPU
// reference on the same pool (_i: bf16, f16; _i >= 2 a window of 9 and a
// softcap), sequences 0 and 1 sharing a block; and the CUDA backend's
// scatter_rows_dt rounding as dtype_from_f32 (bit for bit).
START_TEST(test_attention_decode_dt_cuda) {
    DType dt = _i % 2 ? DT_F16 : DT_BF16;
    int H = 9, Hkv = 3, D = 64, W = _i >= 2 ? 9 : 0, KD = Hkv * D;
    float cap = _i >= 2 ? 1.5f : 0.0f;
    enum { NBLK = 5, MAXB = 2 };
    int cl[3] = {100, 70, 1}, cun[4] = {0, 2, 3, 5}, table[3 * MAXB] = {3, 0, 3, 4, 1, 0};
    size_t pool = (size_t)NBLK * KV_BLOCK * KD, nq = 5 * (size_t)H * D, pb = pool * 2;
    float *k32 = rnd(pool, -2, 2), *v32 = rnd(pool, -2, 2), *q = rnd(nq, -1, 1), *o = malloc(4 * nq);
    void *kp = malloc(pb), *vp = malloc(pb);
    dtype_from_f32(kp, k32, dt, pool);
    dtype_from_f32(vp, v32, dt, pool);
    attention_decode_forward_ref_dt(o, q, kp, vp, dt, cun, cl, table, MAXB, 3, H, Hkv, D, W, cap);
    float *o_ = UPF(NULL, nq);
    OK(attention_decode_forward_dt_cuda(o_, UPF(q, nq), up(kp, pb), up(vp, pb), dt, UPI(cun, 4), UPI(cl, 3),
                                        UPI(table, 3 * MAXB), MAXB, 3, 5, H, Hkv, D, W, cap, 0, &err));
    expect_dev("attention_decode_forward_dt_cuda", o_, o, nq, 2e-5, 2e-5);
    ck_assert_int_eq(attention_decode_forward_dt_cuda(o_, q, kp, vp, DT_Q8_0, cun, cl, table, MAXB, 3, 5, H, Hkv, D,
                                                      W, cap, 0, &err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "q8_0 is not a float dtype"));
    // scatter_rows_dt: 4 rows of K D into rows 7, 0, 3, 8 of a 9-row buffer
    Backend *b;
    ck_assert_msg(backend_open(&b, "cuda", 0, &err) == 0, "%s", err.msg);
    int rows[4] = {7, 0, 3, 8};
    unsigned short *want = malloc(9 * (size_t)KD * 2), *got = malloc(9 * (size_t)KD * 2);
    memset(want, 0, 9 * (size_t)KD * 2);
    for (int i = 0; i < 4; i++) dtype_from_f32(want + (size_t)rows[i] * KD, k32 + (size_t)i * KD, dt, KD);
    void *d = b->ops->alloc(b, 9 * (size_t)KD * 2, &err);
    float *src = b->ops->alloc(b, 4 * (size_t)KD * 4, &err);
    int *drows = b->ops->alloc(b, sizeof rows, &err);
    ck_assert_msg(d && src && drows, "%s", err.msg);
    OK(b->ops->zero(b, d, 9 * (size_t)KD / 2, &err));
    OK(b->ops->to_device(b, src, k32, 4 * (size_t)KD * 4, &err));
    OK(b->ops->to_device(b, drows, rows, sizeof rows, &err));
    OK(b->ops->scatter_rows_dt(b, d, dt, src, drows, 4, KD, &err));
    OK(b->ops->to_host(b, got, d, 9 * (size_t)KD * 2, &err));
    ck_assert_msg(memcmp(got, want, 9 * (size_t)KD * 2) == 0, "scatter_rows_dt %s on cuda", dtype_name(dt));
    b->ops->release(b, d), b->ops->release(b, src), b->ops->release(b, drows);
    backend_close(b);
    free(k32), free(v32), free(q), free(o), free(kp), free(vp), free(want), free(got);
}
END_TEST
// moe: the choices and the grouping exactly (the same tie-break, the same stable
// order), the floats at the CPU suite's tolerances (another expf and sum order).
static int *downi(const int *d, size_t n) {
    int *h = malloc(sizeof(int) * (n ? n : 1));
    ck_assert_msg(kernels_cuda_sync(&err) == 0, "%s", err.msg);
    ck_assert(cudaMemcpy(h, d, sizeof(int) * n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
}
static void expect_dev_ints(const char *what, int *dptr, const int *want, size_t n) {
    int *h = downi(dptr, n);
    for (size_t i = 0; i < n; i++)
        if (h[i] != want[i]) ck_abort_msg("%s: element %zu is %d, CPU reference %d", what, i, h[i], want[i]);
    free(h);
    cudaFree(dptr);
}

START_TEST(test_moe_cuda) {
    const int shapes[][3] = {{8, 2, 0}, {60, 4, 1}, {128, 8, 0}, {512, 8, 1}};  // E, K, norm
    int T = 300, C = 37;
    for (int si = 0; si < 4; si++) {
        int E = shapes[si][0], K = shapes[si][1], norm = shapes[si][2];
        size_t n = (size_t)T * K, tc = (size_t)T * C;
        float *l = rnd((size_t)T * E, -3, 3), *dw = rnd(n, -1, 1), *h = rnd(n * C, -2, 2), *y = rnd(tc, -1, 1);
        float *dy = rnd(tc, -1, 1), *g = rnd(T, -6, 6), *s = rnd(tc, -2, 2), *ys = rnd(tc, -1, 1);
        for (int t = 0; t < T; t += 3)  // ties: a grid of quarters
            for (int e = 0; e < E; e++) l[(size_t)t * E + e] = roundf(l[(size_t)t * E + e] * 4) / 4;
        int *idx = malloc(4 * n), *tok = malloc(4 * n), *pos = malloc(4 * n), *offs = malloc(4 * (E + 1));
        float *w = malloc(4 * n), *dl = malloc(4 * (size_t)T * E), *dh = malloc(4 * n * C), *dwc = malloc(4 * n);
        float *ds = malloc(4 * tc), *dg = malloc(4 * (size_t)T);
        float *l_ = UPF(l, (size_t)T * E), *w_ = UPF(NULL, n), *dl_ = UPF(NULL, (size_t)T * E), *h_ = UPF(h, n * C);
        float *y_ = UPF(y, tc), *dy_ = UPF(dy, tc), *dh_ = UPF(NULL, n * C), *dwc_ = UPF(NULL, n), *g_ = UPF(g, T);
        float *s_ = UPF(s, tc), *ys_ = UPF(ys, tc), *ds_ = UPF(NULL, tc), *dg_ = UPF(NULL, T);
        int *idx_ = UPI(NULL, n), *tok_ = UPI(NULL, n), *pos_ = UPI(NULL, n), *offs_ = UPI(NULL, E + 1);
        moe_route_forward_ref(idx, w, l, T, E, K, norm);
        moe_route_backward_ref(dl, dw, l, idx, w, T, E, K, norm);
        moe_group_ref(tok, pos, offs, idx, T, K, E);
        moe_combine_forward_ref(y, h, w, pos, T, K, C, 0.5f);
        moe_combine_backward_ref(dh, dwc, dy, h, w, pos, T, K, C);
        sigmoid_gate_forward_ref(ys, g, s, T, C, 1.0f);
        sigmoid_gate_backward_ref(ds, dg, dy, g, s, T, C);
        OK(moe_route_forward_cuda(idx_, w_, l_, T, E, K, norm, 0, &err));
        float *dw_ = UPF(dw, n);
        OK(moe_route_backward_cuda(dl_, dw_, l_, idx_, w_, T, E, K, norm, 0, &err));
        OK(moe_group_cuda(tok_, pos_, offs_, idx_, T, K, E, 0, &err));
        OK(moe_combine_forward_cuda(y_, h_, w_, pos_, T, K, C, 0.5f, 0, &err));
        OK(moe_combine_backward_cuda(dh_, dwc_, dy_, h_, w_, pos_, T, K, C, 0, &err));
        OK(sigmoid_gate_forward_cuda(ys_, g_, s_, T, C, 1.0f, 0, &err));
        OK(sigmoid_gate_backward_cuda(ds_, dg_, dy_, g_, s_, T, C, 0, &err));
        ck_assert_int_eq(moe_route_forward_cuda(idx_, w_, l_, T, E, E + 1, norm, 0, &err), -1);  // K > E: refused
        expect_dev_ints("moe_route_forward_cuda idx", idx_, idx, n);
        expect_dev_ints("moe_group_cuda tok", tok_, tok, n);
        expect_dev_ints("moe_group_cuda pos", pos_, pos, n);
        expect_dev_ints("moe_group_cuda offs", offs_, offs, E + 1);
        expect_dev("moe_route_forward_cuda w", w_, w, n, 1e-7, 1e-5);
        expect_dev("moe_route_backward_cuda", dl_, dl, (size_t)T * E, 1e-7, 1e-5);
        expect_dev("moe_combine_forward_cuda", y_, y, tc, 1e-5, 1e-5);
        expect_dev("moe_combine_backward_cuda dh", dh_, dh, n * C, 1e-7, 1e-6);
        expect_dev("moe_combine_backward_cuda dw", dwc_, dwc, n, 1e-5, 1e-5);
        expect_dev("sigmoid_gate_forward_cuda", ys_, ys, tc, 1e-6, 1e-5);
        expect_dev("sigmoid_gate_backward_cuda ds", ds_, ds, tc, 1e-7, 1e-5);
        expect_dev("sigmoid_gate_backward_cuda dg", dg_, dg, T, 1e-6, 1e-5);
        void *d[] = {l_, h_, dy_, g_, s_, dw_};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) cudaFree(d[i]);
        void *f[] = {l, dw, h, y, dy, g, s, ys, idx, tok, pos, offs, w, dl, dh, dwc, ds, dg};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    }
}
END_TEST
#endif  // PAIL_CUDA

int main(void) {
    Suite *s = suite_create("kernels_cuda");
    TCase *host = tcase_create("host");
    tcase_add_test(host, test_quant_decode_host);
    int failed = 0;
#ifdef PAIL_CUDA
    int ndev = kernels_cuda_device_count();
    if (ndev <= 0) printf("SKIP: no CUDA device (cudaGetDeviceCount found none): the host case only\n");
    rng_seed(&rng, 4242, 0);
    if (ndev > 0 && cuda_blas_init(&cb, 0, &err) < 0) {
        printf("check_kernels_cuda: %s\n", err.msg);
        return 1;
    }
    if (ndev > 0) {  // the device cases first: their random streams as before the quantized ones came
        TCase *core = tcase_create("core"), *limits = tcase_create("limits"), *quant = tcase_create("quant");
        tcase_set_timeout(core, 120);
        tcase_add_test(core, test_matmul_cuda);
        tcase_add_test(core, test_rmsnorm_cuda);
        tcase_add_test(core, test_rope_cuda);
        tcase_add_test(core, test_rope_partial_cuda);
        tcase_add_loop_test(core, test_attention_cuda, 0, 4);  // also the head-dim limit
        tcase_add_loop_test(core, test_attention_decode_dt_cuda, 0, 4);
        tcase_add_test(core, test_swiglu_cuda);
        tcase_add_test(core, test_geglu_cuda);
        tcase_add_test(core, test_scale_cuda);
        tcase_add_test(core, test_matmul_lora_cuda);
        tcase_add_test(core, test_logprob_cuda);
        tcase_add_test(core, test_dtype_cuda);
        tcase_add_test(core, test_sample_cuda);
        tcase_add_test(core, test_layernorm_cuda);
        tcase_add_test(core, test_rope_interleaved_cuda);
        tcase_add_test(core, test_moe_cuda);
        tcase_add_loop_test(core, test_attention_sink_cuda, 0, 2);
        tcase_add_test(core, test_swiglu_clamp_cuda);
        tcase_add_test(limits, test_embedding_adamw_cuda);
        tcase_set_timeout(quant, 120);
        tcase_add_test(quant, test_dequant_cuda);
        tcase_add_loop_test(quant, test_quant_cuda, 0, 8);  // qdts[_i]
        suite_add_tcase(s, core);
        suite_add_tcase(s, limits);
        suite_add_tcase(s, quant);
    }
#else
    printf("SKIP: built without CUDA (make CUDA=1 builds the CUDA twins): the host case only\n");
#endif
    suite_add_tcase(s, host);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);  // a CUDA context does not survive fork()
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
#ifdef PAIL_CUDA
    cuda_blas_free(&cb);
#endif
    return failed ? 1 : 0;
}
