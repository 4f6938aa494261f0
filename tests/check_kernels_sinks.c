// Check suite for attention sinks (gpt_oss; kernels.h's attention_*_sink): the
// forward against a plain double reference written here that appends the sink
// as one more softmax column and drops it after (eager_attention_forward's
// cat / softmax / slice), on the tiled, row-wise and decode paths, with sliding
// windows and softcaps; the backward's dq, dk, dv and dsinks against finite
// differences of that reference and against attention_backward_ref_sink; the
// decode over fp32, bf16 and f16 pools against the packed forward on the same
// cache contents; a sink of -inf giving the no-sink bits; and the sim device
// giving the CPU backend's bits.
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
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

static double *to_d(const float *a, size_t n) {
    double *p = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = a[i];
    return p;
}

static void expect_close(const char *what, const float *got, const double *want, size_t n, double atol,
                         double rtol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            ck_abort_msg("%s: element %zu is %.9g, reference %.9g (|diff| %.3g > %.3g)", what, i, got[i], want[i], d,
                         atol + rtol * fabs(want[i]));
    }
}

static void expect_close_f(const char *what, const float *got, const float *want, size_t n, double atol,
                           double rtol) {
    double *w = to_d(want, n);
    expect_close(what, got, w, n, atol, rtol);
    free(w);
}

// ---- the plain reference: scores, then the sink column, softmax, the sink dropped ----
typedef struct {
    int T, H, Hkv, D, nseq, W;
    const int *cu;
    double cap;
    double *q, *k, *v, *sinks, *g;  // g: the loss weights (finite differences)
} Plain;

// out(T,H,D), lse(T,H) (either may be NULL) of row-major q(T,H,D), k, v(T,Hkv,D).
static void plain_forward(const Plain *c, double *out, double *lse) {
    int D = c->D, G = c->H / c->Hkv;
    double *col = malloc(sizeof(double) * (c->T + 2));
    for (int s = 0; s < c->nseq; s++)
        for (int i = c->cu[s]; i < c->cu[s + 1]; i++)
            for (int h = 0; h < c->H; h++) {
                int j0 = c->W > 0 && i - c->W + 1 > c->cu[s] ? i - c->W + 1 : c->cu[s], n = i - j0 + 1;
                const double *qi = c->q + ((size_t)i * c->H + h) * D;
                for (int j = 0; j < n; j++) {
                    const double *kj = c->k + ((size_t)(j0 + j) * c->Hkv + h / G) * D;
                    double sc = 0;
                    for (int d = 0; d < D; d++) sc += qi[d] * kj[d];
                    sc /= sqrt((double)D);
                    col[j] = c->cap > 0 ? c->cap * tanh(sc / c->cap) : sc;
                }
                col[n] = c->sinks[h];  // torch.cat([scores, sinks], dim=-1)
                double m = -INFINITY, z = 0;
                for (int j = 0; j <= n; j++) m = fmax(m, col[j]);
                for (int j = 0; j <= n; j++) z += exp(col[j] - m);
                if (lse) lse[(size_t)i * c->H + h] = m + log(z);
                if (!out) continue;
                double *o = out + ((size_t)i * c->H + h) * D;
                for (int d = 0; d < D; d++) o[d] = 0;
                for (int j = 0; j < n; j++) {  // probs[..., :-1]: the sink column has no value
                    const double *vj = c->v + ((size_t)(j0 + j) * c->Hkv + h / G) * D;
                    for (int d = 0; d < D; d++) o[d] += exp(col[j] - m) / z * vj[d];
                }
            }
    free(col);
}

static Plain plain_of(const float *q, const float *k, const float *v, const float *sinks, const int *cu, int nseq,
                      int H, int Hkv, int D, int W, float cap) {
    Plain c = {.T = cu[nseq], .H = H, .Hkv = Hkv, .D = D, .nseq = nseq, .W = W, .cu = cu, .cap = cap};
    c.q = to_d(q, (size_t)c.T * H * D), c.k = to_d(k, (size_t)c.T * Hkv * D), c.v = to_d(v, (size_t)c.T * Hkv * D);
    c.sinks = to_d(sinks, (size_t)H);
    return c;
}

static void plain_free(Plain *c) { free(c->q), free(c->k), free(c->v), free(c->sinks), free(c->g); }

// ---- forward and backward, fast against the plain reference, over the paths ----
// The forward: fp32 online softmax vs double, outputs convex combinations of
// values in [-1, 1] (weights short of 1 by the sink's share): 2e-5 abs + rel,
// as check_kernels.c's attention. The backward: fast vs attention_backward_ref_sink
// (a naive softmax with the sink column, no lse): 1e-4 abs + rel; dsinks sums
// T terms of O(1): 1e-4 relative to the largest.
static void sink_case(const int *lens, int nseq, int H, int Hkv, int D, int W, float cap) {
    int cu[8] = {0};
    for (int s = 0; s < nseq; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[nseq];
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D, nl = (size_t)T * H;
    float *q = rnd(nq, -1.5, 1.5), *k = rnd(nk, -1.5, 1.5), *v = rnd(nk, -1, 1), *sinks = rnd(H, -1, 2.5);
    float *out = rnd(nq, 0, 1), *lse = rnd(nl, 0, 1);
    attention_forward_sink(out, lse, q, k, v, cu, nseq, T, H, Hkv, D, W, cap, sinks);
    Plain c = plain_of(q, k, v, sinks, cu, nseq, H, Hkv, D, W, cap);
    double *po = malloc(sizeof(double) * (nq + 1)), *pl = malloc(sizeof(double) * (nl + 1));
    plain_forward(&c, po, pl);
    char what[128];
    snprintf(what, sizeof what, "sink forward out (H %d Hkv %d D %d W %d cap %g, T %d)", H, Hkv, D, W, cap, T);
    expect_close(what, out, po, nq, 2e-5, 2e-5);
    snprintf(what, sizeof what, "sink forward lse (H %d Hkv %d D %d W %d cap %g, T %d)", H, Hkv, D, W, cap, T);
    expect_close(what, lse, pl, nl, 2e-5, 2e-5);
    float *ro = rnd(nq, 0, 1), *rl = rnd(nl, 0, 1);
    attention_forward_ref_sink(ro, rl, q, k, v, cu, nseq, T, H, Hkv, D, W, cap, sinks);
    expect_close("sink forward reference out", ro, po, nq, 1e-6, 1e-6);
    expect_close("sink forward reference lse", rl, pl, nl, 1e-6, 1e-6);

    float *dout = rnd(nq, -1, 1), *dq = rnd(nq, 0, 1), *dk = rnd(nk, 0, 1), *dv = rnd(nk, 0, 1);
    float *dqr = rnd(nq, 0, 1), *dkr = rnd(nk, 0, 1), *dvr = rnd(nk, 0, 1), *ds = malloc(4 * H), *dsr = malloc(4 * H);
    for (int h = 0; h < H; h++) ds[h] = dsr[h] = 0.25f * (float)h;  // accumulated onto
    attention_backward_sink(dq, dk, dv, dout, q, k, v, out, lse, cu, nseq, T, H, Hkv, D, W, cap, sinks, ds);
    attention_backward_ref_sink(dqr, dkr, dvr, dout, q, k, v, out, lse, cu, nseq, T, H, Hkv, D, W, cap, sinks, dsr);
    expect_close_f("sink backward dq", dq, dqr, nq, 1e-4, 1e-4);
    expect_close_f("sink backward dk", dk, dkr, nk, 1e-4, 1e-4);
    expect_close_f("sink backward dv", dv, dvr, nk, 1e-4, 1e-4);
    double most = 1;
    for (int h = 0; h < H; h++) most = fmax(most, fabs(dsr[h]));
    expect_close_f("sink backward dsinks", ds, dsr, H, 1e-4 * most, 0);
    free(q), free(k), free(v), free(sinks), free(out), free(lse), free(po), free(pl), free(ro), free(rl);
    free(dout), free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr), free(ds), free(dsr);
    plain_free(&c);
}

// The shapes of check_kernels.c's attention: T = 1, a 64-key chunk crossed, an
// empty sequence with odd D, H == Hkv, 128 x 128 tiles (1 thread: the tiled
// backward; the team: row-wise below 2 tasks a thread), one long sequence, D
// past the tiles (row-wise forward).
static void sink_cases(int W, float cap) {
    int one[] = {1}, three[] = {5, 70, 1}, odd[] = {3, 0, 9, 4}, mha[] = {13, 2, 6}, tiles[] = {300, 129, 7},
        long1[] = {260}, wide[] = {3, 20};
    sink_case(one, 1, 2, 1, 8, W, cap);
    sink_case(three, 3, 4, 2, 16, W, cap);
    sink_case(odd, 4, 3, 1, 7, W, cap);
    sink_case(mha, 3, 2, 2, 32, W, cap);
    int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    sink_case(tiles, 3, 4, 2, 16, W, cap);
    omp_set_num_threads(nth);
    sink_case(tiles, 3, 4, 2, 16, W, cap);
    sink_case(long1, 1, 2, 1, 24, W, cap);
    sink_case(wide, 2, 2, 1, 272, W, cap);
}

// _i: (W, cap) = (0, 0), (50, 0), (0, 1.5), (8, 1.5): full, a window, a softcap, both.
START_TEST(test_sink_forward_backward) {
    static const int Ws[] = {0, 50, 0, 8};
    static const float caps[] = {0, 0, 1.5f, 1.5f};
    sink_cases(Ws[_i], caps[_i]);
}
END_TEST

// ---- finite differences of the plain reference: loss = sum(g * out) ----
static double plain_loss(Plain *c) {
    size_t nq = (size_t)c->T * c->H * c->D;
    double *o = malloc(sizeof(double) * nq), L = 0;
    plain_forward(c, o, NULL);
    for (size_t i = 0; i < nq; i++) L += c->g[i] * o[i];
    free(o);
    return L;
}

// Central differences in double (check_kernels_grad.c's budget): 1e-4 abs + rel;
// a dropped sink moves these by O(0.1).
static void fd_check(const char *what, const float *grad, double *x, size_t n, Plain *c) {
    for (size_t i = 0; i < n; i++) {
        double save = x[i], h = 1e-5 * (1 + fabs(save));
        x[i] = save + h;
        double lp = plain_loss(c);
        x[i] = save - h;
        double lm = plain_loss(c);
        x[i] = save;
        double num = (lp - lm) / (2 * h);
        ck_assert_msg(fabs(grad[i] - num) <= 1e-4 + 1e-4 * fabs(num), "%s[%zu]: analytic %.8g, numeric %.8g", what,
                      i, grad[i], num);
    }
}

// _i: full causal, a window of 3 keys, a softcap 0.8, both; the row-wise backward (a
// team of 4: 6 (sequence, kv head) tasks are under 2 a thread) and the tiled one (1 thread).
START_TEST(test_sink_grad) {
    int W = _i % 2 ? 3 : 0, tiled = _i >= 4;
    float cap = _i % 4 >= 2 ? 0.8f : 0.0f;
    int cu[4] = {0, 4, 5, 12}, nseq = 3, T = 12, H = 4, Hkv = 2, D = 5;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
    float *q = rnd(nq, -1, 1), *k = rnd(nk, -1, 1), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    float *sinks = rnd(H, -0.5, 1.5), *out = malloc(4 * nq), *lse = malloc(4 * (size_t)T * H);
    float *dq = malloc(4 * nq), *dk = malloc(4 * nk), *dv = malloc(4 * nk), *ds = calloc(H, 4);
    int nth = omp_get_max_threads();
    omp_set_num_threads(tiled ? 1 : 4);
    attention_forward_sink(out, lse, q, k, v, cu, nseq, T, H, Hkv, D, W, cap, sinks);
    attention_backward_sink(dq, dk, dv, g, q, k, v, out, lse, cu, nseq, T, H, Hkv, D, W, cap, sinks, ds);
    omp_set_num_threads(nth);
    Plain c = plain_of(q, k, v, sinks, cu, nseq, H, Hkv, D, W, cap);
    c.g = to_d(g, nq);
    fd_check("sink dq", dq, c.q, nq, &c);
    fd_check("sink dk", dk, c.k, nk, &c);
    fd_check("sink dv", dv, c.v, nk, &c);
    fd_check("sink dsinks", ds, c.sinks, H, &c);
    free(q), free(k), free(v), free(g), free(sinks), free(out), free(lse), free(dq), free(dk), free(dv), free(ds);
    plain_free(&c);
}
END_TEST

// ---- decode: the paged cache in fp32, bf16, f16 against the packed forward ----
typedef struct {
    int H, Hkv, D, W;
    float cap;
} Shape;
// GQA 2:1 at D 16 (the AVX2 path), 3:1 at D 20 (portable) under a window and a
// softcap, and 17:1 at D 8 (two groups of query heads a task: GMAX = 16).
static const Shape shapes[] = {{4, 2, 16, 0, 0.0f}, {6, 2, 20, 8, 1.5f}, {34, 2, 8, 40, 0.0f}};
static const DType dts[] = {DT_F32, DT_BF16, DT_F16};

// _i: shape (3) x pool dtype (3) x path (2: this CPU's best, then portable). The
// pools hold the rows rounded to dt; the packed forward runs on those rows widened
// back (exact), so both see the same numbers: 2e-6 abs + rel covers the two
// summation orders (check_kernels.c's decode: 1e-6 at fp32).
START_TEST(test_sink_decode) {
    const Shape *sh = &shapes[_i / 6];
    DType dt = dts[_i / 2 % 3];
    bool portable = _i % 2;
    int H = sh->H, Hkv = sh->Hkv, D = sh->D, W = sh->W, nseq = 3, maxb = 2, nblk = 7;
    int lens[] = {9, 1, 70}, nnew[] = {2, 1, 3}, table[] = {5, -1, 0, -1, 3, 6}, cu[4] = {0}, cu_new[4] = {0};
    for (int s = 0; s < nseq; s++) cu[s + 1] = cu[s] + lens[s], cu_new[s + 1] = cu_new[s] + nnew[s];
    int T = cu[nseq], Tn = cu_new[nseq];
    size_t ks = (size_t)Hkv * D, esz = dtype_size(dt), pool = (size_t)nblk * KV_BLOCK * ks;
    float *q = rnd((size_t)T * H * D, -1.5, 1.5), *k = rnd((size_t)T * ks, -1.5, 1.5), *v = rnd((size_t)T * ks, -1, 1);
    float *sinks = rnd(H, -1, 2.5);
    char *kp = malloc(pool * esz), *vp = malloc(pool * esz);
    memset(kp, 0x7f, pool * esz);  // rows no table names: huge or NaN, never read
    memset(vp, 0x7f, pool * esz);
    for (int s = 0; s < nseq; s++)
        for (int j = 0; j < lens[s]; j++) {
            size_t row = (size_t)table[s * maxb + j / KV_BLOCK] * KV_BLOCK + j % KV_BLOCK, t = (size_t)cu[s] + j;
            dtype_from_f32(kp + row * ks * esz, k + t * ks, dt, ks);
            dtype_from_f32(vp + row * ks * esz, v + t * ks, dt, ks);
            dtype_to_f32(k + t * ks, kp + row * ks * esz, dt, ks);  // the cache's contents
            dtype_to_f32(v + t * ks, vp + row * ks * esz, dt, ks);
        }
    float *full = malloc(4 * (size_t)T * H * D), *qn = malloc(4 * (size_t)Tn * H * D);
    float *want = malloc(4 * (size_t)Tn * H * D), *out = rnd((size_t)Tn * H * D, 0, 1);
    float *ref = malloc(4 * (size_t)Tn * H * D), *bare = malloc(4 * (size_t)Tn * H * D);
    attention_forward_sink(full, NULL, q, k, v, cu, nseq, T, H, Hkv, D, W, sh->cap, sinks);
    for (int s = 0; s < nseq; s++) {
        size_t src = (size_t)(cu[s + 1] - nnew[s]) * H * D, dst = (size_t)cu_new[s] * H * D;
        memcpy(qn + dst, q + src, 4 * (size_t)nnew[s] * H * D);
        memcpy(want + dst, full + src, 4 * (size_t)nnew[s] * H * D);
    }
    DtIsa was = dtype_isa_id();
    if (portable) ck_assert_int_eq(dtype_isa_force(DT_ISA_SCALAR), 0);
    attention_decode_forward_sink(out, qn, kp, vp, dt, cu_new, lens, table, maxb, nseq, H, Hkv, D, W, sh->cap, sinks);
    attention_decode_forward_sink(bare, qn, kp, vp, dt, cu_new, lens, table, maxb, nseq, H, Hkv, D, W, sh->cap, NULL);
    dtype_isa_force(was);
    char what[128];
    snprintf(what, sizeof what, "sink decode %s pool, H %d Hkv %d D %d W %d cap %g, %s path", dtype_name(dt), H, Hkv,
             D, W, sh->cap, portable ? "portable" : dtype_isa());
    size_t no = (size_t)Tn * H * D;
    expect_close_f(what, out, want, no, 2e-6, 2e-6);
    attention_decode_forward_ref_sink(ref, qn, kp, vp, dt, cu_new, lens, table, maxb, nseq, H, Hkv, D, W, sh->cap,
                                      sinks);
    expect_close_f("sink decode vs its reference", out, ref, no, 2e-5, 2e-5);
    double most = 0;  // the sinks do something on every path
    for (size_t i = 0; i < no; i++) most = fmax(most, fabs((double)out[i] - bare[i]));
    ck_assert_msg(most > 1e-2, "%s: the sinks moved the outputs by %g only", what, most);
    free(q), free(k), free(v), free(sinks), free(kp), free(vp), free(full), free(qn), free(want), free(out);
    free(ref), free(bare);
}
END_TEST

// ---- limits ----
// A sink of -inf takes no mass: every path gives the no-sink bits (the online
// softmax's first rescale multiplies l = 1 by exp(-inf) = 0), and dsinks gets 0.
START_TEST(test_sink_minus_inf) {
    int lens[] = {300, 129, 7}, cu[4] = {0}, nseq = 3, H = 4, Hkv = 2;
    for (int s = 0; s < nseq; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[nseq];
    for (int pass = 0; pass < 2; pass++) {
        int D = pass ? 264 : 16;  // the tiles, then the row-wise path
        size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
        float *q = rnd(nq, -1.5, 1.5), *k = rnd(nk, -1.5, 1.5), *v = rnd(nk, -1, 1);
        float sinks[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, ds[4] = {0};
        float *a = malloc(4 * nq), *b = malloc(4 * nq), *la = malloc(4 * (size_t)T * H), *lb = malloc(4 * (size_t)T * H);
        attention_forward_sink(a, la, q, k, v, cu, nseq, T, H, Hkv, D, 50, 1.5f, sinks);
        attention_forward_cap(b, lb, q, k, v, cu, nseq, T, H, Hkv, D, 50, 1.5f);
        ck_assert_msg(memcmp(a, b, 4 * nq) == 0 && memcmp(la, lb, 4 * (size_t)T * H) == 0,
                      "a -inf sink changed the forward's bits (D %d)", D);
        float *dq = malloc(4 * nq), *dk = malloc(4 * nk), *dv = malloc(4 * nk);
        attention_backward_sink(dq, dk, dv, a, q, k, v, a, la, cu, nseq, T, H, Hkv, D, 50, 1.5f, sinks, ds);
        for (int h = 0; h < H; h++) ck_assert_msg(ds[h] == 0, "dsinks[%d] = %g for a -inf sink", h, ds[h]);
        free(q), free(k), free(v), free(a), free(b), free(la), free(lb), free(dq), free(dk), free(dv);
    }
    // decode, every path and pool dtype
    int table[] = {5, 2, 5, 0, 3, 6, 1, -1}, dlens[] = {100, 70, 128, 1}, cun[5] = {0, 2, 3, 6, 7};
    size_t pool = (size_t)7 * KV_BLOCK * 2 * 64, no = (size_t)7 * 6 * 64;
    float *k32 = rnd(pool, -2, 2), *v32 = rnd(pool, -2, 2), *q = rnd(no, -1, 1);
    float sinks[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    float *a = malloc(4 * no), *b = malloc(4 * no);
    void *kp = malloc(4 * pool), *vp = malloc(4 * pool);
    for (int di = 0; di < 3; di++)
        for (int portable = 0; portable < 2; portable++) {
            dtype_from_f32(kp, k32, dts[di], pool);
            dtype_from_f32(vp, v32, dts[di], pool);
            DtIsa was = dtype_isa_id();
            if (portable) ck_assert_int_eq(dtype_isa_force(DT_ISA_SCALAR), 0);
            attention_decode_forward_sink(a, q, kp, vp, dts[di], cun, dlens, table, 2, 4, 6, 2, 64, 8, 0, sinks);
            attention_decode_forward_dt(b, q, kp, vp, dts[di], cun, dlens, table, 2, 4, 6, 2, 64, 8, 0);
            dtype_isa_force(was);
            ck_assert_msg(memcmp(a, b, 4 * no) == 0, "a -inf sink changed the decode's bits (%s pool, %s)",
                          dtype_name(dts[di]), portable ? "portable" : dtype_isa());
        }
    free(k32), free(v32), free(q), free(a), free(b), free(kp), free(vp);
}
END_TEST

// Sinks far above and below the scores: +30 takes nearly all the mass (out
// ~ 0, lse ~ 30, no overflow: the running max starts at the sink), -30 nearly none.
START_TEST(test_sink_extreme) {
    int lens[] = {70, 5}, cu[3] = {0, 70, 75}, nseq = 2, T = 75, H = 2, Hkv = 1, D = 16;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
    float *q = rnd(nq, -1.5, 1.5), *k = rnd(nk, -1.5, 1.5), *v = rnd(nk, -1, 1), sinks[2] = {30, -30};
    float *out = malloc(4 * nq), *lse = malloc(4 * (size_t)T * H);
    attention_forward_sink(out, lse, q, k, v, cu, nseq, T, H, Hkv, D, 0, 0, sinks);
    Plain c = plain_of(q, k, v, sinks, cu, nseq, H, Hkv, D, 0, 0);
    double *po = malloc(sizeof(double) * nq), *pl = malloc(sizeof(double) * T * H);
    plain_forward(&c, po, pl);
    expect_close("sink +-30 out", out, po, nq, 2e-5, 2e-5);
    expect_close("sink +-30 lse", lse, pl, (size_t)T * H, 2e-5, 2e-5);
    for (int t = 0; t < T; t++) ck_assert_msg(fabsf(lse[t * H] - 30) < 1e-3, "row %d: lse %g with a sink of 30", t,
                                              lse[t * H]);
    (void)lens;
    free(q), free(k), free(v), free(out), free(lse), free(po), free(pl);
    plain_free(&c);
}
END_TEST

// ---- on a caller's team (kernels/parallel.h): every thread of a region calls the
// ops; the bits of the ops on their own, and dsinks accumulated once (not once a thread) ----
START_TEST(test_sink_team) {
    int cu[4] = {0, 300, 429, 436}, nseq = 3, T = 436, H = 4, Hkv = 2, D = 16, nth = 2;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D, nl = (size_t)T * H;
    float *q = rnd(nq, -1.5, 1.5), *k = rnd(nk, -1.5, 1.5), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    float *sinks = rnd(H, -1, 2.5);
    float *o[2], *l[2], *dq[2], *dk[2], *dv[2], *od[2], ds[2][4];
    int dcu[3] = {0, 2, 3}, dlen[2] = {300, 129}, table[2 * 5] = {0, 1, 2, 3, 4, 5, 6, 7, -1, -1};
    for (int r = 0; r < 2; r++) {
        o[r] = malloc(4 * nq), l[r] = malloc(4 * nl), dq[r] = malloc(4 * nq), dk[r] = malloc(4 * nk);
        dv[r] = malloc(4 * nk), od[r] = malloc(4 * 3 * (size_t)H * D);
        for (int h = 0; h < H; h++) ds[r][h] = 0.5f * (float)h;
    }
    // the decode reads the first two sequences' rows as a pool: blocks 0..4 hold sequence 0, 5..7 sequence 1
    size_t pool = (size_t)8 * KV_BLOCK * Hkv * D;
    float *kp = calloc(pool, 4), *vp = calloc(pool, 4);
    memcpy(kp, k, 4 * (size_t)300 * Hkv * D), memcpy(vp, v, 4 * (size_t)300 * Hkv * D);
    memcpy(kp + (size_t)5 * KV_BLOCK * Hkv * D, k + (size_t)300 * Hkv * D, 4 * (size_t)129 * Hkv * D);
    memcpy(vp + (size_t)5 * KV_BLOCK * Hkv * D, v + (size_t)300 * Hkv * D, 4 * (size_t)129 * Hkv * D);
    int saved = omp_get_max_threads();
    omp_set_num_threads(nth);  // alone: the same team size (the same paths)
    attention_forward_sink(o[0], l[0], q, k, v, cu, nseq, T, H, Hkv, D, 50, 0, sinks);
    attention_backward_sink(dq[0], dk[0], dv[0], g, q, k, v, o[0], l[0], cu, nseq, T, H, Hkv, D, 50, 0, sinks, ds[0]);
    attention_decode_forward_sink(od[0], q + (size_t)297 * H * D, kp, vp, DT_F32, dcu, dlen, table, 5, 2, H, Hkv, D,
                                  50, 0, sinks);
#pragma omp parallel num_threads(nth)
    {
        attention_forward_sink(o[1], l[1], q, k, v, cu, nseq, T, H, Hkv, D, 50, 0, sinks);
        attention_backward_sink(dq[1], dk[1], dv[1], g, q, k, v, o[1], l[1], cu, nseq, T, H, Hkv, D, 50, 0, sinks,
                                ds[1]);
        attention_decode_forward_sink(od[1], q + (size_t)297 * H * D, kp, vp, DT_F32, dcu, dlen, table, 5, 2, H, Hkv,
                                      D, 50, 0, sinks);
    }
    omp_set_num_threads(saved);
    ck_assert_msg(memcmp(o[0], o[1], 4 * nq) == 0 && memcmp(l[0], l[1], 4 * nl) == 0, "forward on a team");
    ck_assert_msg(memcmp(dq[0], dq[1], 4 * nq) == 0 && memcmp(dk[0], dk[1], 4 * nk) == 0 &&
                      memcmp(dv[0], dv[1], 4 * nk) == 0,
                  "backward on a team");
    for (int h = 0; h < H; h++)
        ck_assert_msg(ds[0][h] == ds[1][h], "dsinks[%d] on a team %g, alone %g", h, ds[1][h], ds[0][h]);
    ck_assert_msg(memcmp(od[0], od[1], 4 * 3 * (size_t)H * D) == 0, "decode on a team");
    for (int r = 0; r < 2; r++) free(o[r]), free(l[r]), free(dq[r]), free(dk[r]), free(dv[r]), free(od[r]);
    free(q), free(k), free(v), free(g), free(sinks), free(kp), free(vp);
}
END_TEST

// ---- the sim device: the CPU backend's bits for the three ops with sinks ----
static void *up(Backend *b, const void *src, size_t bytes) {
    PailErr err = {0};
    void *d = b->ops->alloc(b, bytes, &err);
    ck_assert_msg(d, "%s", err.msg);
    ck_assert_msg(b->ops->to_device(b, d, src, bytes, &err) == 0, "%s", err.msg);
    return d;
}

START_TEST(test_sink_sim) {
    Backend *sim, *cpu = backend_cpu();
    PailErr err = {0};
    ck_assert_msg(backend_open(&sim, "sim", 64 << 20, &err) == 0, "%s", err.msg);
    int cu[4] = {0, 40, 41, 110}, nseq = 3, T = 110, H = 6, Hkv = 2, D = 16, W = 50;
    float cap = 1.5f;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D, nl = (size_t)T * H;
    float *q = rnd(nq, -1.5, 1.5), *k = rnd(nk, -1.5, 1.5), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    float *sinks = rnd(H, -1, 2.5), ds0[6] = {0.5f, -1, 0, 2, 0.25f, 3};
    float *o = malloc(4 * nq), *l = malloc(4 * nl), *dq = malloc(4 * nq), *dk = malloc(4 * nk), *dv = malloc(4 * nk);
    float ds[6], got[6];
    memcpy(ds, ds0, sizeof ds);
    ck_assert_int_eq(cpu->ops->attention_forward(cpu, o, l, q, k, v, cu, nseq, T, H, Hkv, D, W, cap, sinks, &err), 0);
    ck_assert_int_eq(cpu->ops->attention_backward(cpu, dq, dk, dv, g, q, k, v, o, l, cu, nseq, T, H, Hkv, D, W, cap,
                                                  sinks, ds, &err),
                     0);
    float *Q = up(sim, q, 4 * nq), *K = up(sim, k, 4 * nk), *V = up(sim, v, 4 * nk), *Gd = up(sim, g, 4 * nq);
    float *S = up(sim, sinks, 4 * (size_t)H), *DS = up(sim, ds0, sizeof ds0);
    int *CU = up(sim, cu, sizeof cu);
    float *O = sim->ops->alloc(sim, 4 * nq, &err), *L = sim->ops->alloc(sim, 4 * nl, &err);
    float *DQ = sim->ops->alloc(sim, 4 * nq, &err), *DK = sim->ops->alloc(sim, 4 * nk, &err),
          *DV = sim->ops->alloc(sim, 4 * nk, &err);
    ck_assert_int_eq(sim->ops->attention_forward(sim, O, L, Q, K, V, CU, nseq, T, H, Hkv, D, W, cap, S, &err), 0);
    ck_assert_int_eq(sim->ops->attention_backward(sim, DQ, DK, DV, Gd, Q, K, V, O, L, CU, nseq, T, H, Hkv, D, W, cap,
                                                  S, DS, &err),
                     0);
    float *h = malloc(4 * nq);
    struct {
        const char *what;
        float *dev, *host;
        size_t n;
    } cmp[] = {{"out", O, o, nq}, {"lse", L, l, nl}, {"dq", DQ, dq, nq}, {"dk", DK, dk, nk}, {"dv", DV, dv, nk}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        ck_assert_msg(sim->ops->to_host(sim, h, cmp[i].dev, 4 * cmp[i].n, &err) == 0, "%s", err.msg);
        ck_assert_msg(memcmp(h, cmp[i].host, 4 * cmp[i].n) == 0, "sim attention with sinks: %s not the CPU's bits",
                      cmp[i].what);
    }
    ck_assert_int_eq(sim->ops->to_host(sim, got, DS, sizeof got, &err), 0);
    ck_assert_msg(memcmp(got, ds, sizeof ds) == 0, "sim dsinks: not the CPU's bits");
    // decode: the last 3 rows of sequence 2 against its cache (fp32 pool, blocks 1 and 0)
    int table[] = {1, 0}, clen[1] = {69}, cun[2] = {0, 3};
    size_t pool = (size_t)2 * KV_BLOCK * Hkv * D, ks = (size_t)Hkv * D;
    float *kp = rnd(pool, -1.5, 1.5), *vp = rnd(pool, -1, 1), *want = malloc(4 * 3 * H * D);
    ck_assert_int_eq(cpu->ops->attention_decode_forward(cpu, want, q + (size_t)107 * H * D, kp, vp, DT_F32, cun, clen,
                                                        table, 2, 1, 3, H, Hkv, D, W, cap, sinks, &err),
                     0);
    float *KP = up(sim, kp, 4 * pool), *VP = up(sim, vp, 4 * pool);
    int *TB = up(sim, table, sizeof table), *CL = up(sim, clen, sizeof clen), *CN = up(sim, cun, sizeof cun);
    ck_assert_int_eq(sim->ops->attention_decode_forward(sim, O, Q + (size_t)107 * H * D, KP, VP, DT_F32, CN, CL, TB, 2,
                                                        1, 3, H, Hkv, D, W, cap, S, &err),
                     0);
    ck_assert_int_eq(sim->ops->to_host(sim, h, O, 4 * 3 * H * D, &err), 0);
    ck_assert_msg(memcmp(h, want, 4 * 3 * H * D) == 0, "sim decode with sinks: not the CPU's bits");
    (void)ks;
    void *ptrs[] = {Q, K, V, Gd, S, DS, CU, O, L, DQ, DK, DV, KP, VP, TB, CL, CN};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) sim->ops->release(sim, ptrs[i]);
    free(q), free(k), free(v), free(g), free(sinks), free(o), free(l), free(dq), free(dk), free(dv), free(h);
    free(kp), free(vp), free(want);
    backend_close(sim);
}
END_TEST

int main(void) {
    rng_seed(&rng, 48, 0);
    Suite *s = suite_create("kernels_sinks");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 120);
    tcase_add_loop_test(core, test_sink_forward_backward, 0, 4);
    tcase_add_loop_test(core, test_sink_grad, 0, 8);
    tcase_add_loop_test(core, test_sink_decode, 0, 18);
    tcase_add_test(core, test_sink_sim);
    tcase_add_test(core, test_sink_team);
    tcase_add_test(limits, test_sink_minus_inf);
    tcase_add_test(limits, test_sink_extreme);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
