// Check suite for the CUDA twins (kernels/*.cu): each op on the device against
// the CPU reference on the same random inputs, at the CPU suite's tolerances
// (the device sums in another order and uses its own expf; cuBLAS runs FP32, not
// TF32; weights in a storage dtype against the CPU reference on the converted
// weight). Built in both modes: without CUDA=1, or with no device, prints SKIP.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "kernels.h"

#ifndef PAIL_CUDA
int main(void) {
    printf("SKIP: built without CUDA (make CUDA=1 builds the CUDA twins)\n");
    return 0;
}
#else
#include <cuda_runtime.h>

static Rng rng;
static PailErr err;
static CudaBlas cb;  // the products' cuBLAS handle and panels, on the default stream (the other twins get stream 0)

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform_f(&rng);
    return p;
}

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
// the exactly converted weight, at the tolerances above; the conversion panel
// shrunk to 1000 floats as well (several row panels a product) ----
extern size_t matmul_dt_cuda_panel_floats;  // kernels/matmul.cu

// n values from uniform [-1, 1) rounded to dt (host), and back as fp32 into wc.
static uint16_t *dt_weight(float *wc, size_t n, DType dt) {
    float *f = rnd(n, -1, 1);
    uint16_t *h = malloc(2 * (n ? n : 1));
    dtype_from_f32(h, f, dt, n);
    dtype_to_f32(wc, h, dt, n);
    free(f);
    return h;
}

static void dtype_cuda_case(DType dt, size_t panel) {
    matmul_dt_cuda_panel_floats = panel;
    char what[96];
    int shapes[][3] = {{1, 64, 33}, {5, 17, 9}, {37, 130, 70}};
    for (int sh = 0; sh < 3; sh++) {
        int T = shapes[sh][0], K = shapes[sh][1], N = shapes[sh][2];
        float *Wc = malloc(4 * N * K);
        uint16_t *W16 = dt_weight(Wc, (size_t)N * K, dt);
        void *W_ = up(W16, 2 * (size_t)N * K);
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
        free(Wc), free(W16), free(x), free(b), free(o), free(dx), free(dW), free(db), free(g);
        free(A), free(B), free(la), free(o2);
    }
    // the head
    int T = 13, C = 48, V = 300, vchunk = 64, tg[13];
    float temp = 0.7f;
    for (int t = 0; t < T; t++) tg[t] = (int)rng_below(&rng, V);
    tg[0] = V - 1;
    float *Wc = malloc(4 * V * C);
    uint16_t *W16 = dt_weight(Wc, (size_t)V * C, dt);
    void *W_ = up(W16, 2 * (size_t)V * C);
    float *h = rnd(T * C, -1, 1), *dl = rnd(T, -1, 1), *de = rnd(T, -1, 1);
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
    free(Wc), free(W16), free(h), free(dl), free(de), free(dh), free(dW), free(eo);
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

int main(void) {
    int ndev = kernels_cuda_device_count();
    if (ndev <= 0) {
        printf("SKIP: no CUDA device (cudaGetDeviceCount found none)\n");
        return 0;
    }
    rng_seed(&rng, 4242, 0);
    if (cuda_blas_init(&cb, 0, &err) < 0) {
        printf("check_kernels_cuda: %s\n", err.msg);
        return 1;
    }
    Suite *s = suite_create("kernels_cuda");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 120);
    tcase_add_test(core, test_matmul_cuda);
    tcase_add_test(core, test_rmsnorm_cuda);
    tcase_add_test(core, test_rope_cuda);
    tcase_add_test(core, test_rope_partial_cuda);
    tcase_add_loop_test(core, test_attention_cuda, 0, 4);  // also the head-dim limit
    tcase_add_test(core, test_swiglu_cuda);
    tcase_add_test(core, test_geglu_cuda);
    tcase_add_test(core, test_scale_cuda);
    tcase_add_test(core, test_matmul_lora_cuda);
    tcase_add_test(core, test_logprob_cuda);
    tcase_add_test(core, test_dtype_cuda);
    tcase_add_test(core, test_sample_cuda);
    tcase_add_test(core, test_layernorm_cuda);
    tcase_add_test(core, test_rope_interleaved_cuda);
    tcase_add_test(limits, test_embedding_adamw_cuda);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);  // a CUDA context does not survive fork()
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    cuda_blas_free(&cb);
    return failed ? 1 : 0;
}
#endif
