// Check suite for src/rollout/generate.c on a random tiny model: a run
// allocates nothing (its completions' tokens come from the block planned by
// generator_init; counted by interposing malloc and friends, so not under
// ASan, whose allocator must stay in charge), a second run on the same
// generator repeats the first exactly, and bad plans and runs are refused
// with their reason. (Agreement with transformers' sampling is
// validation/rollout/.)
#include <check.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "rollout/generate.h"
#include "shard/shard.h"

// ---- allocation counter: the executable's malloc family wins over libc's
// for every library in the process; each forwards to glibc's own.
#if defined(__SANITIZE_ADDRESS__)
#define COUNTS_ALLOCATIONS 0
static long g_allocs;
#else
#define COUNTS_ALLOCATIONS 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static volatile long g_allocs;
void *malloc(size_t n) { g_allocs++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { g_allocs++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { g_allocs++; return __libc_realloc(p, n); }
void *aligned_alloc(size_t al, size_t n) { g_allocs++; return __libc_memalign(al, n); }
void *memalign(size_t al, size_t n) { g_allocs++; return __libc_memalign(al, n); }
int posix_memalign(void **out, size_t al, size_t n) {
    g_allocs++;
    *out = __libc_memalign(al, n);
    return *out ? 0 : 12;  // ENOMEM
}
#endif

enum { P = 3, G = 4, MAX_NEW = 12, BATCH = 5, PLEN = 6 };

static void tiny_model(ModelWeights *w) {
    ModelConfig c;
    model_config_defaults(&c, MODEL_LLAMA);
    c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 2; c.num_attention_heads = 4;
    c.num_key_value_heads = 2; c.head_dim = 8; c.vocab_size = 61; c.max_position_embeddings = 128;
    PailErr err = {0};
    ck_assert_msg(model_weights_alloc(w, &c, &err) == 0, "%s", err.msg);
    Rng r;
    rng_seed(&r, 99, 0);
    float *m = model_weights_f32(w);
    for (size_t i = 0; i < w->num_params; i++) m[i] = (float)(0.2 * rng_normal(&r));
}

typedef struct {
    ModelWeights w;
    Transformer *tf;
    Generator *g;
    int stop;  // token id ending a completion
    int32_t ids[P][PLEN];
    GenPrompt pr[P];
} Fixture;

static void fixture_open(Fixture *f, int max_prompts) {
    tiny_model(&f->w);
    PailErr err = {0};
    TransformerPlan plan = {.max_tokens = PLEN > BATCH ? PLEN : BATCH};
    ck_assert_msg(transformer_init(&f->tf, &f->w, &plan, &err) == 0, "%s", err.msg);
    f->stop = 7;  // frequent enough on this model that some completions stop early
    GenConfig gc = {.group_size = G, .max_new_tokens = MAX_NEW, .batch_size = BATCH, .max_prompt_tokens = PLEN,
                    .max_prompts = max_prompts, .sampler = {.temperature = 1.5, .top_p = 1.0},
                    .stop_ids = &f->stop, .n_stop_ids = 1};
    ck_assert_msg(generator_init(&f->g, f->tf, &f->w.cfg, &gc, &err) == 0, "%s", err.msg);
    for (int p = 0; p < P; p++) {
        for (int t = 0; t < PLEN; t++) f->ids[p][t] = (int32_t)((p * 13 + t * 5 + 1) % 61);
        f->pr[p] = (GenPrompt){.ids = f->ids[p], .n = PLEN - p, .seed = 40 + (uint64_t)p};
    }
}

static void fixture_close(Fixture *f) {
    generator_free(f->g);
    transformer_free(f->tf);
    model_weights_free(&f->w);
}

START_TEST(test_run_allocates_nothing) {
    omp_set_num_threads(2);
    Fixture f;
    fixture_open(&f, P);
    GenCompletion a[P * G], b[P * G];
    PailErr err = {0};
    ck_assert_msg(generator_run(f.g, f.pr, P, a, &err) == 0, "%s", err.msg);  // warms OpenMP's thread team
    int stopped = 0, total = 0;
    int32_t first[P * G][MAX_NEW];
    for (int i = 0; i < P * G; i++) {
        ck_assert(a[i].n >= 1 && a[i].n <= MAX_NEW);
        ck_assert(a[i].finish == FINISH_STOP ? a[i].ids[a[i].n - 1] == f.stop : a[i].n == MAX_NEW);
        for (int k = 0; k < a[i].n; k++) ck_assert(a[i].logprobs[k] <= 0);
        stopped += a[i].finish == FINISH_STOP;
        total += a[i].n;
        memcpy(first[i], a[i].ids, (size_t)a[i].n * sizeof(int32_t));
    }
    ck_assert_msg(stopped > 0 && stopped < P * G, "%d of %d stopped: the fixture should mix both", stopped, P * G);
    long before = COUNTS_ALLOCATIONS ? g_allocs : 0;  // no ck_assert in between: Check allocates
    int rc = generator_run(f.g, f.pr, P, b, &err);
    long during = COUNTS_ALLOCATIONS ? g_allocs - before : 0;
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_msg(during == 0, "a run of %d completions (%d tokens) made %ld allocations", P * G, total, during);
    for (int i = 0; i < P * G; i++) {  // the same streams: the same completions, in the same storage
        ck_assert_int_eq(b[i].n, a[i].n);
        ck_assert(!memcmp(b[i].ids, first[i], (size_t)b[i].n * sizeof(int32_t)));
        ck_assert_ptr_eq(b[i].ids, a[i].ids);
    }
    fixture_close(&f);
}
END_TEST

// Prompts prefilled together in one call (each into the first of its G free
// slots) give the completions of prompts prefilled one per call: for G = 1
// (evaluation: every prompt in one call), G = 2 (two prompts per call, the
// third staged) and G = 4 (one prompt per call, forks from the staging slot).
START_TEST(test_batched_prefill_same_completions) {
    static const int gs[] = {1, 2, 4};
    for (int gi = 0; gi < 3; gi++) {
        int g = gs[gi];
        Fixture f;
        fixture_open(&f, P);
        PailErr err = {0};
        GenCompletion one[P * G], many[P * G];
        int32_t ids[P * G][MAX_NEW];
        float lps[P * G][MAX_NEW];
        int64_t calls[2];
        for (int batched = 0; batched < 2; batched++) {
            Generator *gen;
            GenConfig gc = {.group_size = g, .max_new_tokens = MAX_NEW, .batch_size = BATCH, .max_prompt_tokens = PLEN,
                            .max_prompts = P, .prefill_tokens = batched ? 5 * PLEN : 1,
                            .sampler = {.temperature = 1.5, .top_p = 1.0}, .stop_ids = &f.stop, .n_stop_ids = 1};
            TransformerPlan plan = {.max_tokens = generator_token_budget(PLEN, BATCH, gc.prefill_tokens)};
            Transformer *tf;
            ck_assert_msg(transformer_init(&tf, &f.w, &plan, &err) == 0, "%s", err.msg);
            ck_assert_msg(generator_init(&gen, tf, &f.w.cfg, &gc, &err) == 0, "%s", err.msg);
            GenCompletion *out = batched ? many : one;
            ck_assert_msg(generator_run(gen, f.pr, P, out, &err) == 0, "%s", err.msg);
            calls[batched] = generator_stats(gen).prefill_calls;
            for (int i = 0; i < P * g; i++) {
                if (!batched) {
                    memcpy(ids[i], out[i].ids, (size_t)out[i].n * sizeof(int32_t));
                    memcpy(lps[i], out[i].logprobs, (size_t)out[i].n * sizeof(float));
                    continue;
                }
                ck_assert_int_eq(out[i].n, one[i].n);
                ck_assert_int_eq(out[i].finish, one[i].finish);
                ck_assert(!memcmp(out[i].ids, ids[i], (size_t)out[i].n * sizeof(int32_t)));
                for (int k = 0; k < out[i].n; k++) ck_assert_float_eq_tol(out[i].logprobs[k], lps[i][k], 1e-5);
            }
            generator_free(gen);
            transformer_free(tf);
        }
        ck_assert_int_eq(calls[0], P);  // one prompt per call
        ck_assert_int_eq(calls[1], g == 1 ? 1 : g == 2 ? 2 : 3);
        fixture_close(&f);
    }
}
END_TEST

// abandon_fn: true from its third call on.
static bool abandon_third(void *ctx) { return ++*(int *)ctx >= 3; }

START_TEST(test_limits) {
    Fixture f;
    fixture_open(&f, P - 1);
    GenCompletion out[P * G];
    PailErr err = {0};
    ck_assert_int_eq(generator_run(f.g, f.pr, P, out, &err), -1);  // more prompts than planned
    ck_assert_msg(strstr(err.msg, "3 prompts in one run, planned for 2") != NULL, "%s", err.msg);
    ck_assert_int_eq(generator_run(f.g, f.pr, P - 1, out, &err), 0);
    GenPrompt long_one = {.ids = f.ids[0], .n = PLEN + 1};
    ck_assert_int_eq(generator_run(f.g, &long_one, 1, out, &err), -1);
    ck_assert_msg(strstr(err.msg, "7 tokens") != NULL, "%s", err.msg);
    Generator *g2;
    GenConfig none = {.group_size = G, .max_new_tokens = MAX_NEW, .batch_size = BATCH, .max_prompt_tokens = PLEN};
    ck_assert_int_eq(generator_init(&g2, f.tf, &f.w.cfg, &none, &err), -1);  // max_prompts 0
    ck_assert_ptr_null(g2);
    ck_assert_msg(strstr(err.msg, "prompts per run") != NULL, "%s", err.msg);
    // Abandoned before its third decode step: returns 1 after two of them.
    int asked = 0;
    GenConfig ab = {.group_size = G, .max_new_tokens = MAX_NEW, .batch_size = BATCH, .max_prompt_tokens = PLEN,
                    .max_prompts = P, .sampler = {.temperature = 1.5, .top_p = 1.0}, .abandon_fn = abandon_third,
                    .abandon_ctx = &asked};
    ck_assert_msg(generator_init(&g2, f.tf, &f.w.cfg, &ab, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(generator_run(g2, f.pr, P, out, &err), 1);
    ck_assert_int_eq(asked, 3);
    ck_assert_int_eq(generator_stats(g2).decode_calls, 2);
    generator_free(g2);
    fixture_close(&f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_generate");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_run_allocates_nothing);
    tcase_add_test(core, test_batched_prefill_same_completions);
    tcase_add_test(limits, test_limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
