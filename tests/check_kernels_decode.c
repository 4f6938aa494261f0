// Check suite for the paged decode attention over 16-bit KV pools
// (kernels/attention_decode.c, attention_decode_forward_dt) and the scatter
// that fills them (the backends' scatter_rows_dt): each path (AVX2 + F16C
// where the CPU has it, and the portable one, forced) against the double
// reference on the same pool, with GQA, a sliding window, a softcap and a
// block two sequences share; the 16-bit pools against the fp32 pool they were
// rounded from, within a bound stated from the rounding; the scatter's bits
// against dtype_from_f32; and the sim device computing the CPU backend's bits.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "core/rng.h"
#include "dtype_cpu.h"
#include "kernels.h"

static Rng rng;

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform_f(&rng);
    return p;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n, double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            ck_abort_msg("%s: element %zu is %.9g, reference %.9g (|diff| %.3g > %.3g)", what, i, got[i], want[i], d,
                         atol + rtol * fabs(want[i]));
    }
}

// Four sequences over a pool of 7 blocks: 0 and 1 share block 5 (a group's
// prompt), 2 spans blocks 3 and 6, 3 holds one token; 2, 1, 3 and 1 new rows.
enum { NSEQ = 4,
       MAXB = 2,
       NBLK = 7 };
static const int lens[NSEQ] = {100, 70, 128, 1}, nnew[NSEQ] = {2, 1, 3, 1};
static const int table[NSEQ * MAXB] = {5, 2, 5, 0, 3, 6, 1, -1};

typedef struct {
    int H, Hkv, D, W;
    float cap;
} Shape;
// GQA 3:1 at D 64 (the AVX2 path), 4:1 at D 20 (not a multiple of 8: the
// portable path) under a window of 40 and a softcap, SmolLM2's 9:3 under a
// window of 8; for the AVX2 path's passes of up to 3 query heads and 4 column
// groups: 8:1 (3 + 3 + 2) with a softcap, MHA at D 40 (4 + 1 column groups),
// 7:1 at D 32 (3 + 3 + 1) under a window of 16
static const Shape shapes[] = {
    {6, 2, 64, 0, 0.0f},
    {4, 1, 20, 40, 1.5f},
    {9, 3, 64, 8, 0.0f},
    {8, 1, 64, 0, 30.0f},
    {3, 3, 40, 0, 0.0f},
    {14, 2, 32, 16, 0.0f},
};
static const DType dts[] = {DT_BF16, DT_F16, DT_F32};

// The largest |out - fp32 pool's out| a pool rounded to dt may give: V in
// [-2, 2] rounded with relative error u (bf16 2^-9, f16 2^-11) moves an output
// (a convex combination of V rows) by at most 2u; the rounded K rows shift the
// probabilities a little more. Measured: about 2u on every case here; 5u.
static double rounding_bound(DType dt) { return dt == DT_BF16 ? 5 * 0x1p-9 : dt == DT_F16 ? 5 * 0x1p-11 :
                                                                                            0; }

// _i: shape (6) x pool dtype (3) x path (2: the best this CPU has, then portable).
START_TEST(test_decode_dt) {
    const Shape *sh = &shapes[_i / 6];
    DType dt = dts[_i / 2 % 3];
    bool portable = _i % 2;
    int H = sh->H, Hkv = sh->Hkv, D = sh->D, cu[NSEQ + 1] = {0};
    for (int s = 0; s < NSEQ; s++) cu[s + 1] = cu[s] + nnew[s];
    int Tn = cu[NSEQ];
    size_t ks = (size_t)Hkv * D, pool = (size_t)NBLK * KV_BLOCK * ks, nq = (size_t)Tn * H * D;
    float *k32 = rnd(pool, -2, 2), *v32 = rnd(pool, -2, 2), *q = rnd(nq, -1, 1);
    void *kp = malloc(pool * 4), *vp = malloc(pool * 4);
    dtype_from_f32(kp, k32, dt, pool);
    dtype_from_f32(vp, v32, dt, pool);
    float *out = malloc(4 * nq), *ref = malloc(4 * nq), *o32 = malloc(4 * nq);
    DtIsa was = dtype_isa_id();
    if (portable) ck_assert_int_eq(dtype_isa_force(DT_ISA_SCALAR), 0);
    attention_decode_forward_dt(out, q, kp, vp, dt, cu, lens, table, MAXB, NSEQ, H, Hkv, D, sh->W, sh->cap);
    dtype_isa_force(was);
    attention_decode_forward_ref_dt(ref, q, kp, vp, dt, cu, lens, table, MAXB, NSEQ, H, Hkv, D, sh->W, sh->cap);
    // the same pool: fp32 arithmetic in another order than the double reference's
    char what[96];
    snprintf(what, sizeof what, "decode %s pool, H %d Hkv %d D %d W %d cap %g, %s path", dtype_name(dt), H, Hkv, D,
             sh->W, sh->cap, portable ? "portable" : dtype_isa());
    expect_close(what, out, ref, nq, 2e-5, 2e-5);
    // against the fp32 pool the 16-bit one was rounded from
    attention_decode_forward_dt(o32, q, k32, v32, DT_F32, cu, lens, table, MAXB, NSEQ, H, Hkv, D, sh->W, sh->cap);
    double d = max_diff(out, o32, nq);
    ck_assert_msg(d <= rounding_bound(dt) + 2e-5, "%s: %g from the fp32 pool's output (bound %g)", what, d,
                  rounding_bound(dt));
    if (dt != DT_F32) ck_assert_msg(d > 0, "%s: the rounded pool gave the fp32 pool's output exactly", what);
    free(k32), free(v32), free(q), free(kp), free(vp), free(out), free(ref), free(o32);
}
END_TEST

// The fp32 entry points are the _dt op on an fp32 pool, bit for bit.
START_TEST(test_decode_f32_same) {
    int H = 6, Hkv = 2, D = 64, cu[NSEQ + 1] = {0};
    for (int s = 0; s < NSEQ; s++) cu[s + 1] = cu[s] + nnew[s];
    size_t pool = (size_t)NBLK * KV_BLOCK * Hkv * D, nq = (size_t)cu[NSEQ] * H * D;
    float *k = rnd(pool, -2, 2), *v = rnd(pool, -2, 2), *q = rnd(nq, -1, 1);
    float *a = malloc(4 * nq), *b = malloc(4 * nq);
    attention_decode_forward_cap(a, q, k, v, cu, lens, table, MAXB, NSEQ, H, Hkv, D, 8, 1.5f);
    attention_decode_forward_dt(b, q, k, v, DT_F32, cu, lens, table, MAXB, NSEQ, H, Hkv, D, 8, 1.5f);
    ck_assert(memcmp(a, b, 4 * nq) == 0);
    free(k), free(v), free(q), free(a), free(b);
}
END_TEST

// scatter_rows_dt on the CPU backend: each row's bits are dtype_from_f32's, the
// rows not named keep theirs; a quantized dtype is refused by name.
START_TEST(test_scatter_dt) {
    Backend *b = backend_cpu();
    enum { ROWS = 9,
           N = 4,
           C = 40 };
    const int rows[N] = {7, 0, 3, 8};
    float *src = rnd((size_t)N * C, -3e4f, 3e4f);
    for (int di = 0; di < 3; di++) {
        DType dt = dts[di];
        size_t rb = (size_t)C * dtype_size(dt);
        unsigned char *dst = malloc(ROWS * rb), *want = malloc(ROWS * rb);
        memset(dst, 0xa5, ROWS * rb);
        memset(want, 0xa5, ROWS * rb);
        for (int i = 0; i < N; i++) dtype_from_f32(want + (size_t)rows[i] * rb, src + (size_t)i * C, dt, C);
        PailErr err = {0};
        ck_assert_int_eq(b->ops->scatter_rows_dt(b, dst, dt, src, rows, N, C, &err), 0);
        ck_assert_msg(memcmp(dst, want, ROWS * rb) == 0, "scatter_rows_dt %s", dtype_name(dt));
        free(dst), free(want);
    }
    PailErr err = {0};
    // into f16, past +-65504 saturates (inf would make an attention row NaN); NaN stays NaN; bf16 keeps its range
    float big[4] = {1e5f, -7e4f, 65504.0f, NAN};
    uint16_t h[4], bf[4];
    int r0 = 0;
    ck_assert_int_eq(b->ops->scatter_rows_dt(b, h, DT_F16, big, &r0, 1, 4, &err), 0);
    ck_assert_msg(h[0] == 0x7bff && h[1] == 0xfbff && h[2] == 0x7bff && (h[3] & 0x7c00) == 0x7c00 && (h[3] & 0x3ff),
                  "f16 saturation: %04x %04x %04x %04x", h[0], h[1], h[2], h[3]);
    ck_assert_int_eq(b->ops->scatter_rows_dt(b, bf, DT_BF16, big, &r0, 1, 4, &err), 0);
    ck_assert_msg(fabsf(dt_bf16_to_f32(bf[0]) - 1e5f) < 1e3f, "bf16 1e5 -> %g", dt_bf16_to_f32(bf[0]));
    float dummy[C];
    ck_assert_int_eq(b->ops->scatter_rows_dt(b, dummy, DT_Q8_0, src, rows, 1, C, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "rows of q8_0 are not a float dtype"));
    free(src);
}
END_TEST

// The sim device: the new rows scattered into 16-bit pools in device memory,
// then the decode op over them: the CPU backend's bits (same kernels, same team).
START_TEST(test_sim_decode_dt) {
    Backend *sim, *cpu = backend_cpu();
    PailErr err = {0};
    ck_assert_msg(backend_open(&sim, "sim", 64 << 20, &err) == 0, "%s", err.msg);
    int H = 9, Hkv = 3, D = 64, cu[NSEQ + 1] = {0}, KD = Hkv * D;
    for (int s = 0; s < NSEQ; s++) cu[s + 1] = cu[s] + nnew[s];
    int Tn = cu[NSEQ], newrows[16];
    for (int s = 0, r = 0; s < NSEQ; s++)  // each new token's pool row, as the cache's owner computes it
        for (int j = lens[s] - nnew[s]; j < lens[s]; j++, r++)
            newrows[r] = table[s * MAXB + j / KV_BLOCK] * KV_BLOCK + j % KV_BLOCK;
    size_t pool = (size_t)NBLK * KV_BLOCK * KD, nq = (size_t)Tn * H * D;
    float *k32 = rnd(pool, -2, 2), *v32 = rnd(pool, -2, 2), *q = rnd(nq, -1, 1), *kn = rnd((size_t)Tn * KD, -2, 2);
    float *got = malloc(4 * nq), *want = malloc(4 * nq);
    for (int di = 0; di < 2; di++) {
        DType dt = dts[di];
        size_t pb = pool * dtype_size(dt);
        void *kp = malloc(pb), *vp = malloc(pb);
        dtype_from_f32(kp, k32, dt, pool);
        dtype_from_f32(vp, v32, dt, pool);
        void *dk = sim->ops->alloc(sim, pb, &err), *dv = sim->ops->alloc(sim, pb, &err);
        float *dq = sim->ops->alloc(sim, 4 * nq, &err), *dkn = sim->ops->alloc(sim, 4 * (size_t)Tn * KD, &err),
              *dout = sim->ops->alloc(sim, 4 * nq, &err);
        int *dcu = sim->ops->alloc(sim, sizeof cu, &err), *dlen = sim->ops->alloc(sim, sizeof lens, &err),
            *dtab = sim->ops->alloc(sim, sizeof table, &err), *drows = sim->ops->alloc(sim, sizeof newrows, &err);
        ck_assert_msg(dk && dv && dq && dkn && dout && dcu && dlen && dtab && drows, "%s", err.msg);
        ck_assert_int_eq(sim->ops->to_device(sim, dk, kp, pb, &err), 0);
        ck_assert_int_eq(sim->ops->to_device(sim, dv, vp, pb, &err), 0);
        ck_assert_int_eq(sim->ops->to_device(sim, dq, q, 4 * nq, &err), 0);
        ck_assert_int_eq(sim->ops->to_device(sim, dkn, kn, 4 * (size_t)Tn * KD, &err), 0);
        ck_assert_int_eq(sim->ops->to_device(sim, dcu, cu, sizeof cu, &err), 0);
        ck_assert_int_eq(sim->ops->to_device(sim, dlen, lens, sizeof lens, &err), 0);
        ck_assert_int_eq(sim->ops->to_device(sim, dtab, table, sizeof table, &err), 0);
        ck_assert_int_eq(sim->ops->to_device(sim, drows, newrows, sizeof newrows, &err), 0);
        ck_assert_int_eq(sim->ops->scatter_rows_dt(sim, dk, dt, dkn, drows, Tn, KD, &err), 0);
        ck_assert_int_eq(sim->ops->scatter_rows_dt(sim, dv, dt, dkn, drows, Tn, KD, &err), 0);
        ck_assert_int_eq(sim->ops->attention_decode_forward(sim, dout, dq, dk, dv, dt, dcu, dlen, dtab, MAXB, NSEQ, Tn,
                                                            H, Hkv, D, 0, 0.0f, NULL, &err),
                         0);
        ck_assert_msg(sim->ops->to_host(sim, got, dout, 4 * nq, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(cpu->ops->scatter_rows_dt(cpu, kp, dt, kn, newrows, Tn, KD, &err), 0);
        ck_assert_int_eq(cpu->ops->scatter_rows_dt(cpu, vp, dt, kn, newrows, Tn, KD, &err), 0);
        ck_assert_int_eq(cpu->ops->attention_decode_forward(cpu, want, q, kp, vp, dt, cu, lens, table, MAXB, NSEQ, Tn,
                                                            H, Hkv, D, 0, 0.0f, NULL, &err),
                         0);
        ck_assert_msg(memcmp(got, want, 4 * nq) == 0, "sim decode over a %s pool: not the CPU backend's bits",
                      dtype_name(dt));
        void *ptrs[] = {dk, dv, dq, dkn, dout, dcu, dlen, dtab, drows};
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) sim->ops->release(sim, ptrs[i]);
        free(kp), free(vp);
    }
    free(k32), free(v32), free(q), free(kn), free(got), free(want);
    backend_close(sim);
}
END_TEST

int main(void) {
    rng_seed(&rng, 47, 0);
    Suite *s = suite_create("kernels_decode");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 60);
    tcase_add_loop_test(core, test_decode_dt, 0, 36);
    tcase_add_test(core, test_decode_f32_same);
    tcase_add_test(core, test_sim_decode_dt);
    tcase_add_test(limits, test_scatter_dt);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
