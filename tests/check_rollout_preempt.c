// Check suite for the generator's KV block pool (src/rollout/generate.c) on a
// random tiny model: a pool so small that running sequences are preempted
// gives the completions of the full pool: the same tokens bit for bit (a
// preempted sequence replays its tokens through the decode step and samples
// on from its own stream) and the same log-probs within 1e-5 (see below), and
// a pool too small for one sequence is refused at init with both sizes.
#include <check.h>
#include <omp.h>
#include <string.h>
#include "core/rng.h"
#include "rollout/generate.h"
#include "shard/shard.h"

enum { P = 4,
       G = 3,
       MAX_NEW = 150,
       BATCH = 4,
       PLEN = 6 };

typedef struct {
    ModelWeights w;
    Transformer *tf;
    int32_t ids[P][PLEN];
    GenPrompt pr[P];
    int stop;
} Fixture;

static void fixture_open(Fixture *f) {
    ModelConfig c;
    model_config_defaults(&c, MODEL_LLAMA);
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.vocab_size = 61;
    c.max_position_embeddings = 512;
    PailErr err = {0};
    ck_assert_msg(model_weights_alloc(&f->w, &c, &err) == 0, "%s", err.msg);
    Rng r;
    rng_seed(&r, 7, 0);
    float *m = model_weights_f32(&f->w);
    for (size_t i = 0; i < f->w.num_params; i++) m[i] = (float)(0.2 * rng_normal(&r));
    TransformerPlan plan = {.max_tokens = generator_token_budget(PLEN, BATCH, 0)};
    ck_assert_msg(transformer_init(&f->tf, &f->w, &plan, &err) == 0, "%s", err.msg);
    for (int p = 0; p < P; p++) {
        for (int t = 0; t < PLEN; t++) f->ids[p][t] = (int32_t)((p * 11 + t * 7 + 3) % 61);
        f->pr[p] = (GenPrompt){.ids = f->ids[p], .n = PLEN - p % 2, .seed = 100 + (uint64_t)p};
    }
    f->stop = 5;  // rare enough that most completions run past a block of 64 tokens
}

static void fixture_close(Fixture *f) {
    transformer_free(f->tf);
    model_weights_free(&f->w);
}

static GenConfig config(Fixture *f, int kv_blocks) {
    return (GenConfig){.group_size = G, .max_new_tokens = MAX_NEW, .batch_size = BATCH, .max_prompt_tokens = PLEN, .max_prompts = P, .kv_blocks = kv_blocks, .sampler = {.temperature = 1.0, .top_p = 1.0}, .stop_ids = &f->stop, .n_stop_ids = 1};
}

// Runs the fixture's prompts on a pool of kv_blocks; copies the completions
// into ids / lps (P * G rows of MAX_NEW), their lengths into n.
static GenStats run(Fixture *f, int kv_blocks, int32_t *ids, float *lps, int *n, uint8_t *finish) {
    PailErr err = {0};
    Generator *g;
    GenConfig gc = config(f, kv_blocks);
    ck_assert_msg(generator_init(&g, f->tf, &f->w.cfg, &gc, &err) == 0, "%s", err.msg);
    GenCompletion out[P * G];
    ck_assert_msg(generator_run(g, f->pr, P, out, &err) == 0, "%s", err.msg);
    for (int i = 0; i < P * G; i++) {
        n[i] = out[i].n;
        finish[i] = out[i].finish;
        memcpy(ids + (size_t)i * MAX_NEW, out[i].ids, (size_t)out[i].n * sizeof(int32_t));
        memcpy(lps + (size_t)i * MAX_NEW, out[i].logprobs, (size_t)out[i].n * sizeof(float));
    }
    GenStats st = generator_stats(g);
    generator_free(g);
    return st;
}

START_TEST(test_preempted_same_completions) {
    omp_set_num_threads(2);
    Fixture f;
    fixture_open(&f);
    static int32_t ids[2][P * G * MAX_NEW];
    static float lps[2][P * G * MAX_NEW];
    int n[2][P * G];
    uint8_t fin[2][P * G];
    int min = generator_min_blocks(PLEN, MAX_NEW);
    ck_assert_int_eq(min, 1 + 3);  // the prompt's block + 156 tokens of its own
    GenStats full = run(&f, 0, ids[0], lps[0], n[0], fin[0]);
    ck_assert_int_eq(full.preemptions, 0);
    ck_assert_int_eq(full.kv_blocks, generator_full_blocks(BATCH, PLEN, MAX_NEW));
    int longer = 0;
    for (int i = 0; i < P * G; i++) longer += n[0][i] > KV_BLOCK;
    ck_assert_msg(longer >= BATCH, "only %d completions pass a block: the pool would not run short", longer);
    // The smallest pool that starts, and one a little larger: sequences are preempted and replayed.
    const int pools[] = {min, min + 3};
    for (int k = 0; k < 2; k++) {
        GenStats st = run(&f, pools[k], ids[1], lps[1], n[1], fin[1]);
        ck_assert_msg(st.preemptions > 0, "a pool of %d blocks preempted nothing", pools[k]);
        ck_assert_int_gt(st.recomputed_tokens, 0);
        ck_assert_int_eq(st.kv_blocks, pools[k]);
        ck_assert_int_le(st.kv_peak_blocks, pools[k]);
        for (int i = 0; i < P * G; i++) {
            ck_assert_int_eq(n[1][i], n[0][i]);
            ck_assert_int_eq(fin[1][i], fin[0][i]);
            ck_assert_msg(!memcmp(ids[1] + (size_t)i * MAX_NEW, ids[0] + (size_t)i * MAX_NEW,
                                  (size_t)n[0][i] * sizeof(int32_t)),
                          "completion %d: other tokens", i);
            // The log-probs within 1e-5: a decode row's projections take the mat-vec's
            // one-row dot product when it is alone in its group of 4 rows (kernels/
            // matmul_dot.h dot_row1: four partial sums, dot_row's two), so the last bit
            // depends on how many slots decode with it, with or without preemptions
            // (measured: at most 1 ulp here; with one summation order they agree bit for bit)
            for (int t = 0; t < n[0][i]; t++)
                ck_assert_float_eq_tol(lps[1][(size_t)i * MAX_NEW + t], lps[0][(size_t)i * MAX_NEW + t], 1e-5);
        }
    }
    fixture_close(&f);
}
END_TEST

// Other batch sizes and group sizes (G > batch: samples staged; G = 1), each
// from the smallest pool to nearly the full one: the same tokens, no stall.
START_TEST(test_sweep_same_tokens) {
    omp_set_num_threads(1);
    Fixture f;
    fixture_open(&f);
    static int32_t ids[2][P * 5 * MAX_NEW];
    static const int batches[] = {1, 3, 4}, groups[] = {1, 2, 5};
    int64_t preempted = 0;
    for (int bi = 0; bi < 3; bi++)
        for (int gi = 0; gi < 3; gi++) {
            int g = groups[gi], n[2][P * 5];
            GenConfig gc = config(&f, 0);
            gc.batch_size = batches[bi];
            gc.group_size = g;
            int min = generator_min_blocks(PLEN, MAX_NEW), full = (int)generator_full_blocks(gc.batch_size, PLEN, MAX_NEW);
            int pools[] = {0, min, min + 1, (min + full) / 2, full - 1};
            for (int k = 0; k < 5; k++) {
                if (k > 0 && pools[k] >= full) continue;
                gc.kv_blocks = pools[k];
                PailErr err = {0};
                Generator *gen;
                ck_assert_msg(generator_init(&gen, f.tf, &f.w.cfg, &gc, &err) == 0, "%s", err.msg);
                GenCompletion out[P * 5];
                ck_assert_msg(generator_run(gen, f.pr, P, out, &err) == 0, "batch %d G %d pool %d: %s", gc.batch_size,
                              g, pools[k], err.msg);
                preempted += generator_stats(gen).preemptions;
                int32_t *dst = ids[k > 0];
                for (int i = 0; i < P * g; i++) {
                    n[k > 0][i] = out[i].n;
                    memcpy(dst + (size_t)i * MAX_NEW, out[i].ids, (size_t)out[i].n * sizeof(int32_t));
                    if (k == 0) continue;
                    ck_assert_msg(n[1][i] == n[0][i] && !memcmp(ids[1] + (size_t)i * MAX_NEW, ids[0] + (size_t)i * MAX_NEW,
                                                                (size_t)n[0][i] * sizeof(int32_t)),
                                  "batch %d G %d pool %d: completion %d differs", gc.batch_size, g, pools[k], i);
                }
                generator_free(gen);
            }
        }
    ck_assert_int_gt(preempted, 0);
    fixture_close(&f);
}
END_TEST

START_TEST(test_pool_too_small) {
    Fixture f;
    fixture_open(&f);
    PailErr err = {0};
    Generator *g;
    GenConfig gc = config(&f, generator_min_blocks(PLEN, MAX_NEW) - 1);
    ck_assert_int_eq(generator_init(&g, f.tf, &f.w.cfg, &gc, &err), -1);
    ck_assert_ptr_null(g);
    ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
    ck_assert_msg(strstr(err.msg, "KV pool of 3 blocks") && strstr(err.msg, "6 prompt + 150 new tokens") &&
                      strstr(err.msg, "needs 4 blocks"),
                  "%s", err.msg);
    gc.kv_blocks = -1;
    ck_assert_int_eq(generator_init(&g, f.tf, &f.w.cfg, &gc, &err), -1);
    fixture_close(&f);
}
END_TEST

// The cache under the generator: a pool of n_blocks blocks counts what an
// append would take (copy on write included), and an append past the free
// blocks is an error naming the pool, not a crash.
START_TEST(test_kvcache_pool_counts) {
    Fixture f;
    fixture_open(&f);
    PailErr err = {0};
    KvCache *kv;
    ck_assert_int_eq(kvcache_init_on(&kv, transformer_backend(f.tf), &f.w.cfg, 2, 256, DT_F32, -1, &err), -1);
    ck_assert_msg(kvcache_init_on(&kv, transformer_backend(f.tf), &f.w.cfg, 2, 256, DT_F32, 2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(kvcache_n_blocks(kv), 2);
    ck_assert_int_eq(kvcache_append_blocks(kv, 0, 65), 2);
    int n_new[2] = {PLEN, 0};
    for (int k = 0; k < 11; k++)  // 66 tokens: both blocks
        ck_assert_msg(transformer_extend(f.tf, kv, NULL, n_new, f.ids[0], &err) == 0, "%s", err.msg);
    ck_assert_int_eq(kvcache_free_blocks(kv), 0);
    ck_assert_int_eq(kvcache_peak_blocks(kv), 2);
    ck_assert_int_eq(kvcache_append_blocks(kv, 0, 1), 0);          // room left in its second block
    ck_assert_int_eq(kvcache_fork_prefix(kv, 1, 0, 65, &err), 0);  // shares both, the second partly filled
    ck_assert_int_eq(kvcache_append_blocks(kv, 1, 1), 1);          // its copy of the shared one
    int one[2] = {0, 1};
    ck_assert_int_eq(transformer_extend(f.tf, kv, NULL, one, f.ids[1], &err), -1);
    ck_assert_msg(strstr(err.msg, "all 2 blocks of 64 tokens are in use") != NULL, "%s", err.msg);
    kvcache_reset(kv, 0);
    ck_assert_int_eq(kvcache_free_blocks(kv), 0);  // slot 1 still holds both
    kvcache_reset(kv, 1);
    ck_assert_int_eq(kvcache_free_blocks(kv), 2);
    kvcache_free(kv);
    fixture_close(&f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_preempt");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_preempted_same_completions);
    tcase_add_test(core, test_sweep_same_tokens);
    tcase_add_test(limits, test_pool_too_small);
    tcase_add_test(limits, test_kvcache_pool_counts);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
