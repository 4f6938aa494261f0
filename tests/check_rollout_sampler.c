// Check suite for sample_token (src/rollout/sampler.c) against exact softmax
// probabilities computed here in double: token frequencies over many draws by a
// chi-square goodness-of-fit test (fixed seeds, so the suite is deterministic),
// the kept set of top-k / top-p (HF TopK then TopP semantics), greedy = first
// argmax, and the returned log-prob equal to the log of the renormalised
// probability. The end-to-end check against transformers is validation/rollout/.
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "rollout/sampler.h"

enum { V = 20, DRAWS = 200000 };

// Fixed, irregular logits (no ties, no two probabilities close enough to make
// the top-p boundary ambiguous at the cut-offs used below).
static void test_logits(float *l) {
    for (int j = 0; j < V; j++) l[j] = (float)(2.0 * sin(1.7 * j + 0.3) + 0.05 * j);
}

// ---- chi-square survival function: Q(df/2, x/2), the regularized upper
// incomplete gamma (series for x < a+1, Lentz continued fraction otherwise;
// Numerical Recipes 6.2). Checked against table values in test_chi2_reference.
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    double gln = lgamma(a);
    if (x < a + 1) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 1000; n++) {
            ap += 1;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1 - a, c = 1.0 / DBL_MIN, d = 1.0 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < DBL_MIN) d = DBL_MIN;
        c = b + an / c;
        if (fabs(c) < DBL_MIN) c = DBL_MIN;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - gln) * h;
}
static double chi2_sf(double x, int df) { return gamma_q(df / 2.0, x / 2.0); }

// Exact probabilities at temperature t, in double.
static void softmax_ref(double *p, const float *l, double t) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) m = fmax(m, l[j]);
    for (int j = 0; j < V; j++) s += p[j] = exp(((double)l[j] - m) / t);
    for (int j = 0; j < V; j++) p[j] /= s;
}

// Keeps only `keep[j]` tokens and renormalises.
static void renorm(double *p, const bool *keep) {
    double s = 0;
    for (int j = 0; j < V; j++) s += keep[j] ? p[j] : 0;
    for (int j = 0; j < V; j++) p[j] = keep[j] ? p[j] / s : 0;
}

// Draws DRAWS tokens; checks every returned log-prob against log(want[tok])
// (<= 1e-6: the sampler's float probabilities carry ~6e-8 relative error), that
// no token with want 0 is ever drawn, and returns the chi-square p-value of the
// counts against want (df = kept tokens - 1).
static double draw_and_test(const float *logits, const SamplerConfig *cfg, const double *want, uint64_t seed) {
    SamplerScratch ss;
    ck_assert_int_eq(sampler_scratch_init(&ss, V), 0);
    Rng rng;
    rng_seed(&rng, seed, 0);
    long count[V] = {0};
    double worst = 0;
    for (int i = 0; i < DRAWS; i++) {
        float lp;
        int tok = sample_token(logits, cfg, &rng, &ss, &lp);
        ck_assert(tok >= 0 && tok < V);
        ck_assert_msg(want[tok] > 0, "token %d drawn but outside the kept set", tok);
        count[tok]++;
        worst = fmax(worst, fabs(lp - log(want[tok])));
    }
    sampler_scratch_free(&ss);
    ck_assert_msg(worst <= 1e-6, "returned logprob differs from log p by %g", worst);
    double x2 = 0;
    int kept = 0;
    for (int j = 0; j < V; j++) {
        if (want[j] == 0) continue;
        double e = want[j] * DRAWS;
        ck_assert_msg(e >= 5, "expected count %g of token %d too small for chi-square", e, j);
        x2 += (count[j] - e) * (count[j] - e) / e;
        kept++;
    }
    ck_assert_int_ge(kept, 2);
    return chi2_sf(x2, kept - 1);
}

// p-value threshold: with a correct sampler the test fails with probability
// 1e-4 per seed; the seeds are fixed, so the suite is deterministic. A biased
// sampler (e.g. a wrong temperature, 0.7 vs 0.75, shifts the probabilities of
// these logits by several percent) gives p-values far below 1e-10 at 200k draws.
#define P_MIN 1e-4

START_TEST(test_chi2_reference) {
    // table values (any statistics text): chi2.sf(30.1435, 19) = 0.05,
    // chi2.sf(3.84146, 1) = 0.05, chi2.sf(43.8202, 19) = 0.001
    ck_assert(fabs(chi2_sf(30.1435, 19) - 0.05) < 1e-5);
    ck_assert(fabs(chi2_sf(3.84146, 1) - 0.05) < 1e-5);
    ck_assert(fabs(chi2_sf(43.8202, 19) - 0.001) < 1e-6);
    ck_assert(fabs(chi2_sf(2.0, 2) - exp(-1.0)) < 1e-12);  // df 2: exp(-x/2)
}
END_TEST

START_TEST(test_temperature) {
    float l[V];
    test_logits(l);
    for (int k = 0; k < 3; k++) {
        double t = (double[]){0.7, 1.0, 1.6}[k], want[V];
        softmax_ref(want, l, t);
        SamplerConfig cfg = {.temperature = t, .top_p = 1.0, .top_k = 0};
        double p = draw_and_test(l, &cfg, want, 1234 + k);
        ck_assert_msg(p > P_MIN, "temperature %g: chi-square p-value %g", t, p);
    }
}
END_TEST

// The test has power: the distribution at temperature 0.75 is rejected for draws at 0.7.
START_TEST(test_chi2_rejects_wrong_temperature) {
    float l[V];
    test_logits(l);
    double want[V];
    softmax_ref(want, l, 0.75);
    SamplerConfig cfg = {.temperature = 0.7, .top_p = 1.0};
    SamplerScratch ss;
    ck_assert_int_eq(sampler_scratch_init(&ss, V), 0);
    Rng rng;
    rng_seed(&rng, 99, 0);
    long count[V] = {0};
    for (int i = 0; i < DRAWS; i++) {
        float lp;
        count[sample_token(l, &cfg, &rng, &ss, &lp)]++;
    }
    sampler_scratch_free(&ss);
    double x2 = 0;
    for (int j = 0; j < V; j++) x2 += (count[j] - want[j] * DRAWS) * (count[j] - want[j] * DRAWS) / (want[j] * DRAWS);
    ck_assert_msg(chi2_sf(x2, V - 1) < 1e-10, "a 0.7 vs 0.75 temperature went unnoticed (p = %g)", chi2_sf(x2, V - 1));
}
END_TEST

// Descending order of want (ties by id, as the sampler).
static void order_desc(int *idx, const double *p) {
    for (int j = 0; j < V; j++) idx[j] = j;
    for (int a = 1; a < V; a++)
        for (int b = a; b > 0 && (p[idx[b]] > p[idx[b - 1]]); b--) {
            int t = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = t;
        }
}

START_TEST(test_top_k) {
    float l[V];
    test_logits(l);
    double t = 0.7, want[V];
    softmax_ref(want, l, t);
    int idx[V];
    order_desc(idx, want);
    bool keep[V] = {0};
    for (int j = 0; j < 5; j++) keep[idx[j]] = true;
    renorm(want, keep);
    SamplerConfig cfg = {.temperature = t, .top_p = 1.0, .top_k = 5};
    double p = draw_and_test(l, &cfg, want, 77);
    ck_assert_msg(p > P_MIN, "top-k 5: chi-square p-value %g", p);
}
END_TEST

// HF TopPLogitsWarper keeps the smallest set of most probable tokens whose
// mass reaches top_p; with top-k first, top_p applies to the renormalised top k.
static void top_p_keep(bool *keep, const double *p, double top_p, int top_k) {
    int idx[V];
    order_desc(idx, p);
    int k = top_k > 0 && top_k < V ? top_k : V;
    double kept = 0, acc = 0;
    for (int j = 0; j < k; j++) kept += p[idx[j]];
    memset(keep, 0, V * sizeof *keep);
    for (int j = 0; j < k; j++) {
        keep[idx[j]] = true;
        acc += p[idx[j]] / kept;
        if (acc >= top_p) break;
    }
}

START_TEST(test_top_p) {
    float l[V];
    test_logits(l);
    struct { double t, top_p; int top_k; } cases[] = {{0.7, 0.8, 0}, {1.0, 0.5, 0}, {1.3, 0.9, 8}};
    for (int c = 0; c < 3; c++) {
        double want[V];
        softmax_ref(want, l, cases[c].t);
        bool keep[V];
        top_p_keep(keep, want, cases[c].top_p, cases[c].top_k);
        int nk = 0;
        for (int j = 0; j < V; j++) nk += keep[j];
        ck_assert(nk >= 2 && nk < V);  // the case really truncates
        renorm(want, keep);
        SamplerConfig cfg = {.temperature = cases[c].t, .top_p = cases[c].top_p, .top_k = cases[c].top_k};
        double p = draw_and_test(l, &cfg, want, 500 + c);
        ck_assert_msg(p > P_MIN, "case %d (T %g top-p %g top-k %d, %d kept): chi-square p-value %g", c, cases[c].t,
                      cases[c].top_p, cases[c].top_k, nk, p);
    }
}
END_TEST

// HF MinPLogitsWarper after TopK / TopP: keep p >= min_p * max(p) of what is
// left (at least one); alone it needs no sort, with top-k it cuts the sorted set.
START_TEST(test_min_p) {
    float l[V];
    test_logits(l);
    struct { double t, min_p; int top_k; } cases[] = {{0.7, 0.1, 0}, {1.2, 0.3, 0}, {1.0, 0.5, 6}};
    for (int c = 0; c < 3; c++) {
        double want[V], mx = 0;
        softmax_ref(want, l, cases[c].t);
        bool keep[V];
        int idx[V];
        order_desc(idx, want);
        int k = cases[c].top_k > 0 ? cases[c].top_k : V;
        memset(keep, 0, sizeof keep);
        for (int j = 0; j < k; j++) keep[idx[j]] = true;
        for (int j = 0; j < V; j++) mx = fmax(mx, want[j]);
        int nk = 0;
        for (int j = 0; j < V; j++) nk += keep[j] = keep[j] && want[j] >= cases[c].min_p * mx;
        ck_assert(nk >= 2 && nk < k);  // min-p really cuts
        renorm(want, keep);
        SamplerConfig cfg = {.temperature = cases[c].t, .top_p = 1.0, .top_k = cases[c].top_k, .min_p = cases[c].min_p};
        double p = draw_and_test(l, &cfg, want, 900 + c);
        ck_assert_msg(p > P_MIN, "case %d (T %g min-p %g top-k %d, %d kept): chi-square p-value %g", c, cases[c].t,
                      cases[c].min_p, cases[c].top_k, nk, p);
    }
}
END_TEST

START_TEST(test_greedy) {
    float l[V];
    test_logits(l);
    int best = 0;
    for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
    SamplerScratch ss;
    ck_assert_int_eq(sampler_scratch_init(&ss, V), 0);
    SamplerConfig cfg = {.temperature = 0, .top_p = 0.3, .top_k = 3};
    Rng rng;
    rng_seed(&rng, 1, 0);
    for (int i = 0; i < 100; i++) {
        float lp = 1;
        ck_assert_int_eq(sample_token(l, &cfg, &rng, &ss, &lp), best);
        ck_assert(lp == 0.0f);  // a point mass
    }
    // ties: the first maximum
    l[3] = l[11] = 100.0f;
    float lp;
    ck_assert_int_eq(sample_token(l, &cfg, &rng, &ss, &lp), 3);
    // top-k 1 at a positive temperature is the argmax too, with probability 1
    cfg = (SamplerConfig){.temperature = 0.9, .top_p = 1.0, .top_k = 1};
    l[3] = 50.0f;
    ck_assert_int_eq(sample_token(l, &cfg, &rng, &ss, &lp), 11);
    ck_assert(fabsf(lp) <= 1e-6f);
    sampler_scratch_free(&ss);
}
END_TEST

// Same seed, same draws; another seed, other draws.
START_TEST(test_seed_determinism) {
    float l[V];
    test_logits(l);
    SamplerScratch ss;
    ck_assert_int_eq(sampler_scratch_init(&ss, V), 0);
    SamplerConfig cfg = {.temperature = 1.0, .top_p = 1.0};
    int a[64], b[64], c[64];
    float lp;
    Rng r;
    rng_seed(&r, 42, 3);
    for (int i = 0; i < 64; i++) a[i] = sample_token(l, &cfg, &r, &ss, &lp);
    rng_seed(&r, 42, 3);
    for (int i = 0; i < 64; i++) b[i] = sample_token(l, &cfg, &r, &ss, &lp);
    rng_seed(&r, 42, 4);
    for (int i = 0; i < 64; i++) c[i] = sample_token(l, &cfg, &r, &ss, &lp);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(memcmp(a, c, sizeof a) != 0);
    sampler_scratch_free(&ss);
}
END_TEST

// Masked (-inf) logits are never drawn, and the log-probs of the rest are exact.
START_TEST(test_masked_logits) {
    float l[V];
    test_logits(l);
    for (int j = 0; j < V; j += 3) l[j] = -INFINITY;
    double want[V];
    softmax_ref(want, l, 0.8);
    SamplerConfig cfg = {.temperature = 0.8, .top_p = 1.0};
    double p = draw_and_test(l, &cfg, want, 8);
    ck_assert_msg(p > P_MIN, "masked logits: chi-square p-value %g", p);
}
END_TEST

// Large logits (no overflow: the max is subtracted first), top-k >= V and
// top-p 1 are no truncation, a single-token vocabulary has log-prob 0.
START_TEST(test_edges) {
    float l[V];
    test_logits(l);
    for (int j = 0; j < V; j++) l[j] += 1e4f;
    double want[V];
    softmax_ref(want, l, 1.0);
    SamplerConfig cfg = {.temperature = 1.0, .top_p = 1.0, .top_k = V + 5};
    double p = draw_and_test(l, &cfg, want, 10);
    ck_assert_msg(p > P_MIN, "shifted logits, top-k > V: chi-square p-value %g", p);

    SamplerScratch one;
    ck_assert_int_eq(sampler_scratch_init(&one, 1), 0);
    float l1 = 3.0f, lp = 1;
    Rng r;
    rng_seed(&r, 5, 0);
    SamplerConfig c1 = {.temperature = 0.5, .top_p = 0.9, .top_k = 0};
    ck_assert_int_eq(sample_token(&l1, &c1, &r, &one, &lp), 0);
    ck_assert(fabsf(lp) <= 1e-7f);
    c1.top_p = 1.0;
    ck_assert_int_eq(sample_token(&l1, &c1, &r, &one, &lp), 0);
    ck_assert(fabsf(lp) <= 1e-7f);
    sampler_scratch_free(&one);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_sampler");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_chi2_reference);
    tcase_add_test(core, test_temperature);
    tcase_add_test(core, test_chi2_rejects_wrong_temperature);
    tcase_add_test(core, test_top_k);
    tcase_add_test(core, test_top_p);
    tcase_add_test(core, test_min_p);
    tcase_add_test(core, test_greedy);
    tcase_add_test(core, test_seed_determinism);
    tcase_add_test(limits, test_masked_logits);
    tcase_add_test(limits, test_edges);
    tcase_set_timeout(core, 60);
    tcase_set_timeout(limits, 60);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
