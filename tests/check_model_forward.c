// Check suite for src/model/transformer.c on random tiny models of each
// model_type: KV-cache generation equals the full forward (prefill, fork of a
// shared prompt, batched decode, a prefill mixed with decodes), packing never
// crosses sequence boundaries, LoRA changes the output only when enabled, and
// bad calls are refused. (Agreement with transformers + PEFT, gradients
// included, is validation/model/check_forward.py.)
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check_model_fill.h"
#include "core/rng.h"
#include "kernels.h"
#include "model/transformer.h"

static void tiny_model(ModelWeights *w, ModelType type) {
    ModelConfig c;
    model_config_defaults(&c, type);
    c.hidden_size = 48; c.intermediate_size = 80; c.num_hidden_layers = 2; c.num_attention_heads = 4;
    c.num_key_value_heads = 2; c.head_dim = 12; c.vocab_size = 101; c.max_position_embeddings = 256;
    c.tie_word_embeddings = type == MODEL_QWEN2;
    if (type == MODEL_LLAMA) {
        c.rope_scaling = ROPE_SCALING_LLAMA3;
        c.rope_factor = 8; c.rope_low_freq_factor = 1; c.rope_high_freq_factor = 4;
        c.rope_original_max_position_embeddings = 32;
    }
    model_fill_random(w, &c, 0.15, 1234, (uint64_t)type);
}

static float log_softmax_at(const float *logits, int V, int target) {
    float m = -INFINITY;
    for (int j = 0; j < V; j++) m = fmaxf(m, logits[j]);
    double s = 0;
    for (int j = 0; j < V; j++) s += exp((double)logits[j] - m);
    return (float)((double)logits[target] - m - log(s));
}

// Full-forward log-probs of seq[1..n) given the prefix, as a reference.
static void full_logp(Transformer *tf, const int *seq, int n, float *lp) {
    int pos[64], tgt[64], cu[2] = {0, n};
    for (int t = 0; t < n; t++) { pos[t] = t; tgt[t] = t + 1 < n ? seq[t + 1] : -1; }
    PailErr err = {0};
    ck_assert_msg(transformer_forward(tf, lp, NULL, seq, pos, cu, 1, n, tgt, 1.0f, &err) == 0, "%s", err.msg);
}

START_TEST(test_kv_cache_matches_full) {
    for (int type = 0; type < 3; type++) {
        ModelWeights w;
        tiny_model(&w, (ModelType)type);
        int V = w.cfg.vocab_size;
        TransformerPlan plan = {.max_tokens = 64, .vchunk = 16};
        Transformer *tf;
        PailErr err = {0};
        ck_assert_int_eq(transformer_init(&tf, &w, &plan, &err), 0);
        KvCache *kv;
        ck_assert_int_eq(kvcache_init(&kv, &w.cfg, 4, 40, DT_F32, &err), 0);
        // One prompt (7 tokens) shared by 4 continuations of 6 tokens each.
        int prompt[7] = {3, 17, 42, 8, 99, 1, 56}, cont[4][6];
        Rng r;
        rng_seed(&r, 9, 0);
        for (int g = 0; g < 4; g++)
            for (int i = 0; i < 6; i++) cont[g][i] = (int)rng_below(&r, (uint64_t)V);
        float *logits = malloc(4 * (size_t)V * sizeof(float));
        int n_new[4] = {7, 0, 0, 0};
        ck_assert_msg(transformer_extend(tf, kv, logits, n_new, prompt, &err) == 0, "%s", err.msg);
        float first = log_softmax_at(logits, V, cont[0][0]);
        for (int g = 1; g < 4; g++) ck_assert_int_eq(kvcache_fork(kv, g, 0, &err), 0);
        float dec[4][6];
        for (int g = 0; g < 4; g++) dec[g][0] = log_softmax_at(logits, V, cont[g][0]);  // the shared prompt's logits
        for (int step = 0; step < 5; step++) {  // batched decode: one token per slot
            int toks[4], ones[4] = {1, 1, 1, 1};
            for (int g = 0; g < 4; g++) toks[g] = cont[g][step];
            ck_assert_int_eq(transformer_extend(tf, kv, logits, ones, toks, &err), 0);
            for (int g = 0; g < 4; g++) dec[g][step + 1] = log_softmax_at(logits + (size_t)g * V, V, cont[g][step + 1]);
        }
        for (int g = 0; g < 4; g++) {
            int seq[13];
            memcpy(seq, prompt, sizeof prompt);
            memcpy(seq + 7, cont[g], sizeof cont[g]);
            float lp[13];
            full_logp(tf, seq, 13, lp);
            for (int i = 0; i < 6; i++)  // decode vs full forward: <= 1e-5 (fp32, same kernels up to order)
                ck_assert_msg(fabsf(dec[g][i] - lp[6 + i]) <= 1e-5f, "type %d slot %d step %d: %g vs %g", type, g, i,
                              dec[g][i], lp[6 + i]);
            ck_assert_int_eq(kvcache_len(kv, g), 12);
        }
        // A prefill of slot 3 (after a reset) in the same call as decodes of slots 0 and 1.
        kvcache_reset(kv, 3);
        int mixed_n[4] = {1, 1, 0, 7}, mixed_tok[9] = {5, 6, 3, 17, 42, 8, 99, 1, 56};
        ck_assert_int_eq(transformer_extend(tf, kv, logits, mixed_n, mixed_tok, &err), 0);
        ck_assert(fabsf(log_softmax_at(logits + 2 * (size_t)V, V, cont[0][0]) - first) <= 1e-5f);
        int s0[14];
        memcpy(s0, prompt, sizeof prompt);
        memcpy(s0 + 7, cont[0], 5 * sizeof(int));
        s0[12] = 5;
        s0[13] = 0;
        float lp0[14];
        full_logp(tf, s0, 14, lp0);
        ck_assert(fabsf(log_softmax_at(logits, V, 0) - lp0[12]) <= 1e-5f);
        // Limits: over the slot's context, over the token budget.
        int too_many[4] = {0, 0, 40, 0};
        int *big = calloc(40, sizeof(int));
        ck_assert_int_eq(transformer_extend(tf, kv, logits, too_many, big, &err), -1);
        ck_assert_ptr_nonnull(strstr(err.msg, "slot 2"));
        free(big);
        free(logits);
        kvcache_free(kv);
        transformer_free(tf);
        model_weights_free(&w);
    }
}
END_TEST

// The paged cache: a prompt of 70 tokens (one full block and a partial one)
// forked into 4 slots is stored once; the first decode step gives each slot
// its own copy of the partial block only (copy on write), crossing into a
// third block takes one more each, and a reset gives the blocks back. Each
// slot's decode equals the full forward of its own sequence, so no slot wrote
// into another's blocks. _i: the pools in f32, bf16, f16: the same blocks at
// half the bytes, and the decode's log-probs within a bound of the fp32 full
// forward (the trainer's), each K and V element rounded once as stored.
// Measured here (the last step's log-prob, 4 slots): bf16 at most 4.5e-3, f16
// 6.8e-4: bounds 2e-2 and 4e-3. A pool of a quantized dtype is refused.
START_TEST(test_kv_blocks_shared) {
    static const DType kvdts[] = {DT_F32, DT_BF16, DT_F16};
    DType kvdt = kvdts[_i];
    float tol = kvdt == DT_F32 ? 1e-5f : kvdt == DT_BF16 ? 2e-2f : 4e-3f;
    ModelWeights w;
    tiny_model(&w, MODEL_QWEN3);
    int V = w.cfg.vocab_size, P = 70, steps = 62;  // positions 70..131: a third block from 128 on
    TransformerPlan plan = {.max_tokens = 140, .vchunk = 16, .max_pos = 256};
    Transformer *tf;
    PailErr err = {0};
    ck_assert_int_eq(transformer_init(&tf, &w, &plan, &err), 0);
    KvCache *kv;
    ck_assert_int_eq(kvcache_init(&kv, &w.cfg, 4, 140, kvdt, &err), 0);
    ck_assert_int_eq(kvcache_dtype(kv), kvdt);
    size_t blk = 2 * (size_t)w.cfg.num_hidden_layers * KV_BLOCK * w.cfg.num_key_value_heads * w.cfg.head_dim *
                 (kvdt == DT_F32 ? 4 : 2);
    ck_assert_uint_eq(kvcache_bytes(kv), 4 * 3 * blk);
    Rng r;
    rng_seed(&r, 4, 0);
    int seq[4][140];
    for (int t = 0; t < P; t++) seq[0][t] = (int)rng_below(&r, (uint64_t)V);
    for (int g = 1; g < 4; g++) memcpy(seq[g], seq[0], P * sizeof(int));
    for (int g = 0; g < 4; g++)
        for (int t = P; t < P + steps + 1; t++) seq[g][t] = (int)rng_below(&r, (uint64_t)V);
    float *logits = malloc(4 * (size_t)V * sizeof(float)), last[4];
    int n_new[4] = {P, 0, 0, 0};
    ck_assert_msg(transformer_extend(tf, kv, logits, n_new, seq[0], &err) == 0, "%s", err.msg);
    for (int g = 1; g < 4; g++) ck_assert_int_eq(kvcache_fork(kv, g, 0, &err), 0);
    ck_assert_uint_eq(kvcache_used_bytes(kv, false), 2 * blk);  // the prompt once, not 4 times
    for (int step = 0; step < steps; step++) {
        int toks[4], ones[4] = {1, 1, 1, 1};
        for (int g = 0; g < 4; g++) toks[g] = seq[g][P + step];
        ck_assert_msg(transformer_extend(tf, kv, logits, ones, toks, &err) == 0, "%s", err.msg);
        if (step == 0) ck_assert_uint_eq(kvcache_used_bytes(kv, false), (1 + 4) * blk);
        for (int g = 0; g < 4; g++) last[g] = log_softmax_at(logits + (size_t)g * V, V, seq[g][P + step + 1]);
    }
    ck_assert_uint_eq(kvcache_used_bytes(kv, false), (1 + 4 + 4) * blk);
    ck_assert_uint_eq(kvcache_used_bytes(kv, true), (1 + 4 + 4) * blk);
    for (int g = 0; g < 4; g++) {
        int n = P + steps + 1, pos[140], tgt[140], cu[2] = {0, n};
        float lp[140];
        for (int t = 0; t < n; t++) pos[t] = t, tgt[t] = t + 1 < n ? seq[g][t + 1] : -1;
        ck_assert_msg(transformer_forward(tf, lp, NULL, seq[g], pos, cu, 1, n, tgt, 1.0f, &err) == 0, "%s", err.msg);
        ck_assert_msg(fabsf(last[g] - lp[n - 2]) <= tol, "%s cache, slot %d: decode %g, full forward %g (bound %g)",
                      dtype_name(kvdt), g, last[g], lp[n - 2], tol);
    }
    for (int g = 1; g < 4; g++) kvcache_reset(kv, g);
    ck_assert_uint_eq(kvcache_used_bytes(kv, false), 3 * blk);  // slot 0: the shared block, its copy, its third
    kvcache_reset(kv, 0);
    ck_assert_uint_eq(kvcache_used_bytes(kv, false), 0);
    ck_assert_uint_eq(kvcache_used_bytes(kv, true), 9 * blk);
    // A truncating fork keeps a prefix: 64 tokens are exactly one block.
    ck_assert_msg(transformer_extend(tf, kv, logits, n_new, seq[0], &err) == 0, "%s", err.msg);
    ck_assert_int_eq(kvcache_fork_prefix(kv, 0, 0, 64, &err), 0);
    ck_assert_uint_eq(kvcache_used_bytes(kv, false), blk);
    ck_assert_int_eq(kvcache_fork_prefix(kv, 1, 0, 70, &err), -1);  // past what slot 0 holds
    free(logits);
    kvcache_free(kv);
    KvCache *bad = NULL;
    ck_assert_int_eq(kvcache_init(&bad, &w.cfg, 4, 140, DT_Q8_0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "KV cache: dtype q8_0 is not one of f32, bf16, f16"));
    ck_assert_ptr_null(bad);
    transformer_free(tf);
    model_weights_free(&w);
}
END_TEST

START_TEST(test_packing_and_lora) {
    ModelWeights w;
    tiny_model(&w, MODEL_QWEN3);
    TransformerPlan plan = {.max_tokens = 32, .backward = true, .lora_rank = 4};
    Transformer *tf;
    PailErr err = {0};
    ck_assert_int_eq(transformer_init(&tf, &w, &plan, &err), 0);
    int a[5] = {1, 2, 3, 4, 5}, b[4] = {9, 8, 7, 6}, packed[9], pos[9], tgt[9], cu[3] = {0, 5, 9};
    memcpy(packed, a, sizeof a);
    memcpy(packed + 5, b, sizeof b);
    for (int t = 0; t < 9; t++) {
        pos[t] = t < 5 ? t : t - 5;
        tgt[t] = (t == 4 || t == 8) ? -1 : packed[t + 1];
    }
    float lp[9], la[5], lb[4];
    ck_assert_int_eq(transformer_forward(tf, lp, NULL, packed, pos, cu, 2, 9, tgt, 1.0f, &err), 0);
    full_logp(tf, a, 5, la);
    full_logp(tf, b, 4, lb);
    for (int t = 0; t < 4; t++) ck_assert(fabsf(lp[t] - la[t]) <= 1e-5f);
    for (int t = 0; t < 3; t++) ck_assert(fabsf(lp[5 + t] - lb[t]) <= 1e-5f);
    ck_assert(lp[4] == 0 && lp[8] == 0);  // no target: no work, 0
    // An adapter with B = 0 (PEFT init) leaves the output unchanged; a non-zero B changes it.
    LoraConfig lc = {.rank = 4, .alpha = 8, .targets = LORA_TARGETS_ALL};
    LoraLayout lay;
    ck_assert_int_eq(lora_layout_build(&lay, &w.cfg, &lc, &err), 0);
    float *p = malloc((size_t)lay.n_params * sizeof *p);
    lora_init(&lay, p, 1);
    ck_assert_int_eq(transformer_set_lora(tf, &lay, p, &err), 0);
    float lp2[9];
    ck_assert_int_eq(transformer_forward(tf, lp2, NULL, packed, pos, cu, 2, 9, tgt, 1.0f, &err), 0);
    for (int t = 0; t < 9; t++) ck_assert(fabsf(lp2[t] - lp[t]) <= 1e-6f);
    for (int64_t i = 0; i < lay.n_params; i++) p[i] += 0.05f;
    ck_assert_int_eq(transformer_forward(tf, lp2, NULL, packed, pos, cu, 2, 9, tgt, 1.0f, &err), 0);
    float diff = 0;
    for (int t = 0; t < 9; t++) diff = fmaxf(diff, fabsf(lp2[t] - lp[t]));
    ck_assert(diff > 1e-3f);
    transformer_lora_enable(tf, false);  // the base model again (the KL reference)
    ck_assert_int_eq(transformer_forward(tf, lp2, NULL, packed, pos, cu, 2, 9, tgt, 1.0f, &err), 0);
    for (int t = 0; t < 9; t++) ck_assert(fabsf(lp2[t] - lp[t]) <= 1e-6f);
    // Refusals: a backward without base grads in a plan without full; a bad target; an empty sequence.
    float dl[9] = {0}, *bg = calloc(w.num_params, sizeof(float));
    ck_assert_int_eq(transformer_backward(tf, NULL, bg, dl, &err), -1);
    tgt[0] = 5000;
    ck_assert_int_eq(transformer_forward(tf, lp2, NULL, packed, pos, cu, 2, 9, tgt, 1.0f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "5000"));
    int cu_bad[3] = {0, 0, 9};
    tgt[0] = 2;
    ck_assert_int_eq(transformer_forward(tf, lp2, NULL, packed, pos, cu_bad, 2, 9, tgt, 1.0f, &err), -1);
    ck_assert_int_eq(transformer_backward(tf, NULL, NULL, dl, &err), -1);  // no forward to go back through
    free(bg);
    // The LoRA buffers are sized by the plan's rank (a dense model's 7 modules x L layers, and
    // the backward's one, of T x R floats): a lower plan is that much smaller
    // and refuses the rank-4 adapter; a plan without LoRA refuses any.
    for (int r = 0; r <= 2; r += 2) {
        TransformerPlan lower = plan;
        lower.lora_rank = r;
        Transformer *t2;
        ck_assert_int_eq(transformer_init(&t2, &w, &lower, &err), 0);
        size_t want = ((size_t)7 * w.cfg.num_hidden_layers + 1) * 32 * (4 - r) * sizeof(float);
        ck_assert_uint_eq(transformer_bytes(tf) - transformer_bytes(t2), want);
        ck_assert_int_eq(transformer_set_lora(t2, &lay, p, &err), -1);
        ck_assert_msg(strstr(err.msg, "rank 4") != NULL, "%s", err.msg);
        ck_assert_int_eq(transformer_set_lora(t2, NULL, NULL, &err), 0);  // detaching is always fine
        transformer_free(t2);
    }
    free(p);
    lora_layout_free(&lay);
    transformer_free(tf);
    model_weights_free(&w);
}
END_TEST

// The trainer's plan at long T (issue 47): linear in T (nothing (T, T) or (T, V)),
// and the LM head's T x vchunk workspace no wider than the vocabulary (a
// 101-token model used to plan T x 4096 floats for it).
START_TEST(test_plan_linear_in_T) {
    ModelWeights w;
    tiny_model(&w, MODEL_QWEN2);
    const ModelConfig *c = &w.cfg;
    for (int rec = 0; rec < 2; rec++) {
        size_t b[3];
        for (int k = 0; k < 3; k++) {
            TransformerPlan p = {.max_tokens = 4096 << k, .backward = true, .recompute = rec, .lora_rank = 16};
            b[k] = transformer_plan_bytes(c, &p);
        }
        ck_assert_msg(b[2] - b[1] == 2 * (b[1] - b[0]), "recompute %d: %zu, %zu, %zu bytes at 4k, 8k, 16k tokens", rec,
                      b[0], b[1], b[2]);
        TransformerPlan d = {.max_tokens = 16384, .backward = true, .recompute = rec, .lora_rank = 16},
                        v = {.max_tokens = 16384, .backward = true, .recompute = rec, .lora_rank = 16, .vchunk = 101};
        ck_assert_uint_eq(transformer_plan_bytes(c, &d), transformer_plan_bytes(c, &v));
    }
    model_weights_free(&w);
}
END_TEST
int main(void) {
    Suite *s = suite_create("model_forward");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_kv_cache_matches_full);
    tcase_add_loop_test(core, test_kv_blocks_shared, 0, 3);
    tcase_add_test(core, test_plan_linear_in_T);
    tcase_add_test(limits, test_packing_and_lora);
    tcase_set_timeout(core, 60);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
