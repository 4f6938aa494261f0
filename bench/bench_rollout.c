// bench_rollout: rollout generation (src/rollout/generate.c) at the bench shape
// with a rank-16 LoRA on all seven projections: tokens/s of generator_run at
// batch 1, 8, 32, 64 with G = 8, each against its roofline measured in the same
// run (min of batch x STREAM triad / weight bytes per step and OpenBLAS sgemm /
// FLOPs per token), and the shared-prompt prefill: prefill tokens per group
// (generator_stats) and the time of G = 8 against G = 1 and against 8 separate
// prefills of a long prompt; the first generator_run of a generator against
// its next ones (the first pays the first touch of its activations and KV
// blocks: kernel time and minor faults, doc/performance.md). Validates
// determinism first. Not a test.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "core/threads.h"
#include "model/modelgen.h"
#include "kernels.h"
#include "refs.h"
#include "rollout/generate.h"

enum { RANK = 16, G = 8, PROMPT = 32, MAX_NEW = 64, LONG_PROMPT = 1024 };

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "bench_rollout: %s: %s\n", what, err ? err->msg : "out of memory");
    exit(1);
}

typedef struct {
    ModelWeights w;
    LoraLayout lay;
    float *lora;
    Transformer *tf;
    double params;  // matmul weights per token: projections + LM head + LoRA
} Bench;

static void bench_build(Bench *b, int max_tokens) {
    PailErr err = {0};
    ModelConfig cfg;
    if (modelgen_shape(&cfg, "bench", MODEL_LLAMA) < 0) die("modelgen_shape bench", NULL);
    if (model_weights_alloc(&b->w, &cfg, &err) < 0) die("model_weights_alloc", &err);
    bench_fill_uniform(b->w.memory, b->w.num_params, 0.02f * sqrtf(3.0f), 11);
    const ModelConfig *c = &b->w.cfg;
    int L = c->num_hidden_layers, C = c->hidden_size;
    for (int i = 0; i < L * C; i++) b->w.p.attn_norm[i] = b->w.p.mlp_norm[i] = 1.0f;
    for (int i = 0; i < C; i++) b->w.p.final_norm[i] = 1.0f;
    LoraConfig lc = {.rank = RANK, .alpha = 32, .targets = LORA_TARGETS_ALL};
    if (lora_layout_build(&b->lay, c, &lc, &err) < 0) die("lora_layout_build", &err);
    b->lora = bench_malloc((size_t)b->lay.n_params * 4);
    lora_init(&b->lay, b->lora, 3);
    for (int l = 0; l < L; l++)
        for (int m = 0; m < LORA_NMOD; m++) {
            const LoraSlot *s = lora_slot(&b->lay, l, m);
            if (!s) continue;  // a module this model has not
            bench_fill_uniform(b->lora + s->b_off, (size_t)s->n_exp * s->out * RANK, 0.01f, 100 + l * 8 + m);
        }
    TransformerPlan plan = {.max_tokens = max_tokens, .lora_rank = RANK};
    if (transformer_init(&b->tf, &b->w, &plan, &err) < 0) die("transformer_init", &err);
    if (transformer_set_lora(b->tf, &b->lay, b->lora, &err) < 0) die("set_lora", &err);
    size_t HD = (size_t)c->num_attention_heads * c->head_dim, KD = (size_t)c->num_key_value_heads * c->head_dim,
           F = c->intermediate_size;
    b->params = (double)L * (C * HD * 2 + C * KD * 2 + 3 * C * F) + (double)c->vocab_size * C +
                (double)b->lay.n_params;
}

typedef struct {
    double secs;
    int64_t tokens;  // completion tokens generated
    GenStats st;
    uint64_t digest; // of every id, for the determinism check
} RunResult;

// P prompts of n tokens each, G samples of up to max_new tokens, decode batch B.
static RunResult run(Bench *b, int P, int n, int group, int batch, int max_new) {
    PailErr err = {0};
    GenConfig gc = {.group_size = group, .max_new_tokens = max_new, .batch_size = batch, .max_prompt_tokens = n,
                    .max_prompts = P,
                    .sampler = {.temperature = 1.0, .top_p = 1.0}};
    Generator *g;
    if (generator_init(&g, b->tf, &b->w.cfg, &gc, &err) < 0) die("generator_init", &err);
    int32_t *ids = bench_malloc((size_t)P * n * sizeof *ids);
    GenPrompt *pr = bench_malloc((size_t)P * sizeof *pr);
    for (int i = 0; i < P * n; i++) ids[i] = (int32_t)(((unsigned)i * 2654435761u >> 9) % 32000u);
    for (int p = 0; p < P; p++) pr[p] = (GenPrompt){.ids = ids + (size_t)p * n, .n = n, .seed = 1000 + (uint64_t)p};
    GenCompletion *out = calloc((size_t)P * group, sizeof *out);
    if (!out) die("calloc", NULL);
    double t0 = bench_now();
    if (generator_run(g, pr, P, out, &err) < 0) die("generator_run", &err);
    RunResult r = {.secs = bench_now() - t0, .st = generator_stats(g), .digest = 1469598103934665603ull};
    for (int i = 0; i < P * group; i++) {
        r.tokens += out[i].n;
        for (int k = 0; k < out[i].n; k++) r.digest = (r.digest ^ (uint64_t)out[i].ids[k]) * 1099511628211ull;
    }
    free(out), free(pr), free(ids);
    generator_free(g);
    return r;
}

static double ru_kernel_s(const struct rusage *r) { return (double)r->ru_stime.tv_sec + r->ru_stime.tv_usec * 1e-6; }

// One generator, NCALL runs of the batch-64 shape on the same prompts and
// seeds: each call's tok/s, kernel seconds and minor faults (the process's,
// from getrusage), and whether every call gave the first one's completions.
static void first_vs_next(Bench *b) {
    enum { NCALL = 3, B = 64, P = 2 * B / G };
    PailErr err = {0};
    GenConfig gc = {.group_size = G, .max_new_tokens = MAX_NEW, .batch_size = B, .max_prompt_tokens = PROMPT,
                    .max_prompts = P, .sampler = {.temperature = 1.0, .top_p = 1.0}};
    Generator *g;
    if (generator_init(&g, b->tf, &b->w.cfg, &gc, &err) < 0) die("generator_init", &err);
    int32_t *ids = bench_malloc((size_t)P * PROMPT * sizeof *ids);
    GenPrompt pr[P];
    for (int i = 0; i < P * PROMPT; i++) ids[i] = (int32_t)(((unsigned)i * 2654435761u >> 9) % 32000u);
    for (int p = 0; p < P; p++) pr[p] = (GenPrompt){.ids = ids + (size_t)p * PROMPT, .n = PROMPT, .seed = 1000 + (uint64_t)p};
    GenCompletion out[P * G];
    printf("\nfirst generator_run of a generator against the next (batch %d, %d prompts, same prompts and seeds)\n",
           B, P);
    double tps[NCALL];
    uint64_t digest0 = 0;
    bool same = true;
    for (int k = 0; k < NCALL; k++) {
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        double t0 = bench_now();
        if (generator_run(g, pr, P, out, &err) < 0) die("generator_run", &err);
        double secs = bench_now() - t0;
        getrusage(RUSAGE_SELF, &r1);
        int64_t tokens = 0;
        uint64_t digest = 1469598103934665603ull;
        for (int i = 0; i < P * G; i++) {
            tokens += out[i].n;
            for (int j = 0; j < out[i].n; j++) digest = (digest ^ (uint64_t)out[i].ids[j]) * 1099511628211ull;
        }
        if (k == 0) digest0 = digest;
        same = same && digest == digest0;
        tps[k] = tokens / secs;
        printf("  call %d: %8.1f tok/s, kernel %.2f s, %ld minor faults, KV held at the peak %.1f MiB\n", k + 1,
               tps[k], ru_kernel_s(&r1) - ru_kernel_s(&r0), r1.ru_minflt - r0.ru_minflt,
               generator_stats(g).kv_peak_bytes / 1048576.0);
    }
    double next = 0;
    for (int k = 1; k < NCALL; k++) next += tps[k] / (NCALL - 1);
    printf("  first / next: %.2fx (tok/s of call 1 over the mean of calls 2-%d); completions of every call %s\n",
           tps[0] / next, NCALL, same ? "identical to call 1's (ok)" : "DIFFER from call 1's");
    generator_free(g);
    free(ids);
    if (!same) exit(1);
}

int main(int argc, char **argv) {
    (void)argc;
    threads_policy_apply(argv);  // the executables' OpenMP wait policy (may start this program again)
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    printf("bench_rollout: %d threads, OpenBLAS core %s, load average %.2f (figures are only meaningful on an idle "
           "machine)\n%s\n", omp_get_max_threads(), openblas_get_corename(), load, threads_policy_note());
    Bench b = {0};
    bench_build(&b, LONG_PROMPT);
    const ModelConfig *c = &b.w.cfg;
    double triad_lo, triad = bench_stream_triad(&triad_lo), sgemm = bench_sgemm_reference(c, 2048);
    double bytes = 4.0 * b.params, flops_tok = 2.0 * b.params;
    printf("references: STREAM triad %.1f GB/s (best of 3 allocations; worst %.1f); OpenBLAS sgemm %.1f GFLOP/s "
           "(a layer's products + LM head, T=2048); weights %.1f MB fp32 per decode step, %.1f MFLOP per token "
           "(2 x matmul params)\n",
           triad, triad_lo, sgemm, bytes / 1e6, flops_tok / 1e6);

    // validate: the same seeds give the same completions at another batch size
    RunResult a = run(&b, 2, PROMPT, 4, 8, 16), a2 = run(&b, 2, PROMPT, 4, 3, 16);
    printf("validate: same seeds, batch 8 vs 3: completions %s\n", a.digest == a2.digest ? "identical (ok)" : "DIFFER");
    if (a.digest != a2.digest) return 1;

    printf("\ngenerator_run, G=%d, prompts of %d tokens, %d new tokens each (%d at batch 1; no stop ids), "
           "temperature 1\n", G, PROMPT, MAX_NEW, MAX_NEW / 2);
    printf("  %5s %7s %8s %10s %12s %12s %8s\n", "batch", "prompts", "tokens", "tok/s", "roofline", "bound",
           "of roof");
    int batches[4] = {1, 8, 32, 64};
    double tps64 = 0;
    for (int i = 0; i < 4; i++) {
        int B = batches[i], P = B >= G ? 2 * B / G : 1;  // two waves of the batch (P x G completions)
        RunResult r = run(&b, P, PROMPT, G, B, B == 1 ? MAX_NEW / 2 : MAX_NEW);
        double bw = B * triad * 1e9 / bytes, fl = sgemm * 1e9 / flops_tok, roof = fmin(bw, fl);
        double tps = r.tokens / r.secs;
        tps64 = tps;
        printf("  %5d %7d %8lld %10.1f %12.1f %12s %7.0f%%\n", B, P, (long long)r.tokens, tps, roof,
               bw < fl ? "bandwidth" : "sgemm", 100 * tps / roof);
    }
    printf("  (roofline = min(batch x triad / weight bytes, sgemm / FLOPs per token); time includes prefill and "
           "sampling)\n");
    // The sampler runs on one thread per token, over all V logits: its share of a batch-64 token.
    {
        int V = c->vocab_size;
        float *z = bench_malloc((size_t)V * 4), lp;
        bench_fill_uniform(z, (size_t)V, 5.0f, 77);
        SamplerScratch ss;
        if (sampler_scratch_init(&ss, V) < 0) die("sampler_scratch_init", NULL);
        SamplerConfig sc = {.temperature = 1.0, .top_p = 1.0};
        Rng rng;
        rng_seed(&rng, 1, 0);
        int n = 2000, acc = 0;
        double t0 = bench_now();
        for (int i = 0; i < n; i++) acc += sample_token(z, &sc, &rng, &ss, &lp);
        double us = (bench_now() - t0) / n * 1e6;
        printf("  sample_token (V=%d, temperature 1, serial over slots): %.1f us per token = %.0f%% of a batch-64 "
               "token's %.1f us%s\n", V, us, 100 * us / (1e6 / tps64), 1e6 / tps64, acc < 0 ? "?" : "");
        sampler_scratch_free(&ss);
        free(z);
    }

    first_vs_next(&b);

    printf("\nshared-prompt prefill, one prompt of %d tokens, 2 new tokens per sample\n", LONG_PROMPT);
    RunResult g1 = run(&b, 1, LONG_PROMPT, 1, 8, 2), g8 = run(&b, 1, LONG_PROMPT, G, 8, 2);
    // no sharing: the same prompt submitted G times as separate prompts, G = 1 each
    PailErr err = {0};
    GenConfig gc = {.group_size = 1, .max_new_tokens = 2, .batch_size = 8, .max_prompt_tokens = LONG_PROMPT,
                    .max_prompts = G, .sampler = {.temperature = 1.0, .top_p = 1.0}};
    Generator *gen;
    if (generator_init(&gen, b.tf, c, &gc, &err) < 0) die("generator_init", &err);
    int32_t *ids = bench_malloc(LONG_PROMPT * sizeof *ids);
    for (int i = 0; i < LONG_PROMPT; i++) ids[i] = (int32_t)(((unsigned)i * 2654435761u >> 9) % 32000u);
    GenPrompt pr[G];
    for (int j = 0; j < G; j++) pr[j] = (GenPrompt){.ids = ids, .n = LONG_PROMPT, .seed = (uint64_t)j};
    GenCompletion out[G] = {0};
    double t0 = bench_now();
    if (generator_run(gen, pr, G, out, &err) < 0) die("generator_run", &err);
    double t_sep = bench_now() - t0;
    GenStats ss = generator_stats(gen);
    generator_free(gen);
    free(ids);
    printf("  G=1:                    %6.3f s, prefill tokens %lld (%lld call)\n", g1.secs,
           (long long)g1.st.prefill_tokens, (long long)g1.st.prefill_calls);
    printf("  G=%d (shared prefill):   %6.3f s, prefill tokens per group %lld for a %d-token prompt (%lld call): "
           "%.2fx the time of G=1\n", G, g8.secs, (long long)g8.st.prefill_tokens, LONG_PROMPT,
           (long long)g8.st.prefill_calls, g8.secs / g1.secs);
    printf("  %d separate prompts:     %6.3f s, prefill tokens %lld (%lld calls): sharing saves %.1fx\n", G, t_sep,
           (long long)ss.prefill_tokens, (long long)ss.prefill_calls, t_sep / g8.secs);
    // KV memory of the group: the paged cache holds the prompt's blocks once
    // (forks share them; each sample copies only the prompt's last, partial
    // block when it first writes); the copying cache it replaced held G copies.
    size_t per_tok = 2 * (size_t)c->num_hidden_layers * c->num_key_value_heads * c->head_dim * sizeof(float);
    double copy_mib = (double)G * (LONG_PROMPT + 2) * per_tok / 1048576.0;
    printf("  KV bytes per group (G=%d, %d + 2 tokens each): %.1f MiB held at the peak (blocks of %d tokens); "
           "G copies of the prompt (the cache before paging) %.1f MiB: %.1fx less\n", G, LONG_PROMPT,
           g8.st.kv_peak_bytes / 1048576.0, KV_BLOCK, copy_mib, copy_mib / (g8.st.kv_peak_bytes / 1048576.0));
    transformer_free(b.tf);
    free(b.lora);
    lora_layout_free(&b.lay);
    model_weights_free(&b.w);
    return 0;
}
