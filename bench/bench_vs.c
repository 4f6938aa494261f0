// bench_vs: pail's side of bench/vs_llamacpp.sh. Times one generation shape on
// a model folder through grpo-rollout's own path (src/rollout/generate.c:
// batched prefill, the paged KV cache with forked prompts, the sampler on the
// backend), without LoRA and without stop ids (every completion is max_new
// tokens long), at temperature 1. Prompts are fixed pseudo-random token ids.
//   bench_vs MODEL_DIR DTYPE PROMPTS G PROMPT_TOKENS NEW_TOKENS REPS WARMUP [KV_DTYPE]
// KV_DTYPE: the KV cache's, as grpo-rollout's --kv-dtype (auto when not given).
// With WARMUP 1, one untimed run first (the KV pages touched, the threads
// started, as llama.cpp's warm-up and its cleared KV buffer do), printed as
// "first"; then REPS timed runs, one line each ("rep"): seconds, prefill and
// decode calls. Not a test.
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/threads.h"
#include "refs.h"
#include "model/device.h"
#include "rollout/generate.h"

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "bench_vs: %s: %s\n", what, err ? err->msg : "out of memory");
    exit(1);
}

static int arg_int(const char *name, const char *s, int lo, int hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_vs: %s '%s': not an integer in %d..%d\n", name, s, lo, hi);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: bench_vs MODEL_DIR DTYPE PROMPTS G PROMPT_TOKENS NEW_TOKENS REPS WARMUP [KV_DTYPE]\n");
        return 2;
    }
    threads_policy_apply(argv);  // the executables' OpenMP wait policy (may start this program again)
    int want;
    if (model_dtype_parse(argv[2], &want) < 0) {
        fprintf(stderr, "bench_vs: dtype '%s': not auto, f32, bf16 or f16\n", argv[2]);
        return 2;
    }
    int P = arg_int("PROMPTS", argv[3], 1, 4096), G = arg_int("G", argv[4], 1, 4096);
    int T = arg_int("PROMPT_TOKENS", argv[5], 1, 1 << 20), N = arg_int("NEW_TOKENS", argv[6], 1, 1 << 20);
    int reps = arg_int("REPS", argv[7], 1, 1000), warm = arg_int("WARMUP", argv[8], 0, 1);
    PailErr err = {0};
    ModelWeights w;
    if (model_weights_load_as(&w, argv[1], want, &err) < 0) die(argv[1], &err);
    const ModelConfig *c = &w.cfg;
    char dt[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(&w, dt, sizeof dt);
    int want_kv;
    if (kv_dtype_cli("bench_vs", argc == 10 ? argv[9] : "auto", &want_kv) != 0) return 2;
    DType kvdt = kv_dtype_resolve(want_kv, dt);
    // grpo-rollout's defaults: every completion of the run in one batch
    // (--batch-size 64 for 8 x 8), prompts prefilled together up to 1024 tokens.
    GenConfig gc = {.group_size = G, .max_new_tokens = N, .batch_size = P * G, .max_prompt_tokens = T,
                    .max_prompts = P, .prefill_tokens = 1024, .kv_dtype = kvdt,
                    .sampler = {.temperature = 1.0, .top_p = 1.0}};
    TransformerPlan plan = {.max_tokens = generator_token_budget(T, gc.batch_size, gc.prefill_tokens)};
    Transformer *tf;
    Generator *g;
    if (transformer_init(&tf, &w, &plan, &err) < 0) die("transformer_init", &err);
    if (generator_init(&g, tf, c, &gc, &err) < 0) die("generator_init", &err);
    int32_t *ids = bench_malloc((size_t)P * T * sizeof *ids);
    GenPrompt *pr = bench_malloc((size_t)P * sizeof *pr);
    GenCompletion *out = bench_malloc((size_t)P * G * sizeof *out);
    for (size_t i = 0; i < (size_t)P * T; i++) ids[i] = (int32_t)((i * 2654435761u >> 9) % (unsigned)c->vocab_size);
    for (int p = 0; p < P; p++) pr[p] = (GenPrompt){.ids = ids + (size_t)p * T, .n = T, .seed = 1000 + (uint64_t)p};
    printf("bench_vs: %s (%s), KV cache %s, %d threads, %d prompts x %d samples, %d prompt tokens, %d new tokens\n",
           argv[1], dt, dtype_name(kvdt), omp_get_max_threads(), P, G, T, N);
    GenStats prev = {0};  // the generator's counters add up over runs
    for (int r = 1 - warm; r <= reps; r++) {
        double t0 = bench_now();
        if (generator_run(g, pr, P, out, &err) < 0) die("generator_run", &err);
        double secs = bench_now() - t0;
        GenStats st = generator_stats(g);
        long long gen = 0;
        for (int i = 0; i < P * G; i++) gen += out[i].n;
        if (gen != (long long)P * G * N) {
            fprintf(stderr, "bench_vs: %lld tokens generated, %lld expected\n", gen, (long long)P * G * N);
            return 1;
        }
        printf("%s %.6f s, prefill %lld tokens in %lld calls, decode %lld tokens in %lld calls\n",
               r ? "rep" : "first", secs, (long long)(st.prefill_tokens - prev.prefill_tokens),
               (long long)(st.prefill_calls - prev.prefill_calls), (long long)(st.decode_tokens - prev.decode_tokens),
               (long long)(st.decode_calls - prev.decode_calls));
        prev = st;
    }
    free(out), free(pr), free(ids);
    generator_free(g);
    transformer_free(tf);
    model_weights_free(&w);
    return 0;
}
