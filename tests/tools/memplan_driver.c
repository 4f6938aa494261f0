// Measures a memory plan against the process's peak RSS (bench/memplan.sh):
// prints the plan for --mode train (a LoRA step: adapter, gradients, AdamW
// moments, one packed forward + backward of --token-budget tokens) or --mode
// decode (--batch-size sequences prefilled with --prompt tokens then decoded to
// --ctx; the KV cache in --kv-dtype, f32 by default), then does exactly that, and prints "plan B bytes, peak RSS R bytes".
// The peak is reset (/proc/self/clear_refs) after the weights are loaded, so
// the safetensors mapping the loader touched and released is not counted; the
// weights stay resident and are.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/rng.h"
#include "kernels.h"
#include "lora/lora.h"
#include "model/memplan.h"
#include "model/transformer.h"

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "memplan_driver: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static size_t status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0, n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n)) kb = strtoull(line + n + 1, NULL, 10);
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    const char *model = NULL, *mode = "train";
    int budget = 1024, rank = 16, batch = 8, prompt = 64, ctx = 128, recompute = 0;
    DType kvdt = DT_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--token-budget") && i + 1 < argc) budget = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lora-rank") && i + 1 < argc) rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch-size") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--recompute")) recompute = 1;
        else if (!strcmp(argv[i], "--kv-dtype") && i + 1 < argc && dtype_parse(argv[i + 1], &kvdt) == 0) i++;
        else { fprintf(stderr, "memplan_driver: bad argument %s\n", argv[i]); return 2; }
    }
    if (!model) { fprintf(stderr, "usage: memplan_driver --model DIR [--mode train|decode] [sizes]\n"); return 2; }
    bool train = !strcmp(mode, "train");
    PailErr err = {0};
    ModelConfig cfg;
    if (model_config_load(&cfg, model, &err) < 0) die("config", &err);
    MemoryPlanSpec spec = {.role = train ? MEMPLAN_TRAIN : MEMPLAN_ROLLOUT, .weights_dtype = "fp32", .lora_rank = rank,
                        .lora_targets = LORA_TARGETS_ALL, .token_budget = train ? budget : prompt > batch ? prompt : batch,
                        .recompute = recompute, .batch_size = batch,
                        .max_ctx = ctx, .max_new_tokens = ctx - prompt, .kv_dtype = kvdt};
    MemoryPlan plan;
    if (memplan_build(&plan, &cfg, &spec, "cpu", &err) < 0) die("plan", &err);
    memplan_print(stdout, &plan, model);
    ModelWeights w;
    if (model_weights_load(&w, model, &err) < 0) die("load", &err);
    FILE *cr = fopen("/proc/self/clear_refs", "w");  // reset the peak: the loader's mapping is gone
    if (!cr || fputs("5", cr) < 0 || fclose(cr) != 0) die("resetting the peak RSS (/proc/self/clear_refs)", NULL);
    LoraLayout lay;
    LoraConfig lc = {.rank = rank, .alpha = 2.0 * rank, .targets = LORA_TARGETS_ALL};
    if (lora_layout_build(&lay, &cfg, &lc, &err) < 0) die("lora", &err);
    size_t np = (size_t)lay.n_params;
    float *p = calloc(np, sizeof *p), *g = calloc(np, sizeof *g), *m = NULL, *v = NULL;
    if (train) {
        m = calloc(np, sizeof *m);
        v = calloc(np, sizeof *v);
    }
    if (!p || !g || (train && (!m || !v))) die("out of memory for the adapter", NULL);
    lora_init(&lay, p, 1);
    TransformerPlan tp = {.max_tokens = spec.token_budget, .backward = train, .recompute = recompute, .lora_rank = rank};
    Transformer *tf;
    if (transformer_init(&tf, &w, &tp, &err) < 0 || transformer_set_lora(tf, &lay, p, &err) < 0) die("init", &err);
    Rng r;
    rng_seed(&r, 3, 0);
    int V = cfg.vocab_size;
    if (train) {  // one LoRA step over a full packed row
        int T = budget, *tok = malloc(T * sizeof(int)), *pos = malloc(T * sizeof(int)), *tgt = malloc(T * sizeof(int));
        int cu[2] = {0, T};
        float *lp = malloc(T * sizeof(float)), *dl = malloc(T * sizeof(float));
        for (int t = 0; t < T; t++) {
            tok[t] = (int)rng_below(&r, (uint64_t)V);
            pos[t] = t;
        }
        for (int t = 0; t < T; t++) tgt[t] = t + 1 < T ? tok[t + 1] : -1, dl[t] = 1.0f / T;
        if (transformer_forward(tf, lp, NULL, tok, pos, cu, 1, T, tgt, 1.0f, &err) < 0 ||
            transformer_backward(tf, g, NULL, dl, &err) < 0)
            die("step", &err);
        adamw_update(p, m, v, g, np, 1e-4f, 0.9f, 0.999f, 1e-8f, 0, 1, 1);
    } else {  // prefill every slot, then decode to ctx
        KvCache *kv;
        if (kvcache_init(&kv, &cfg, batch + 1, ctx, kvdt, &err) < 0) die("kv", &err);
        float *logits = malloc((size_t)(batch + 2) * V * sizeof(float));
        int *n_new = calloc(batch + 1, sizeof(int)), *tok = malloc((size_t)prompt * sizeof(int));
        for (int t = 0; t < prompt; t++) tok[t] = (int)rng_below(&r, (uint64_t)V);
        for (int s = 0; s < batch; s++) {  // one prefill per slot, as the generator does
            memset(n_new, 0, (batch + 1) * sizeof(int));
            n_new[s] = prompt;
            if (transformer_extend(tf, kv, logits, n_new, tok, &err) < 0) die("prefill", &err);
        }
        int one[4096];
        for (int step = prompt; step < ctx; step++) {
            for (int s = 0; s <= batch; s++) n_new[s] = s < batch;
            for (int s = 0; s < batch; s++) one[s] = (int)rng_below(&r, (uint64_t)V);
            if (transformer_extend(tf, kv, logits, n_new, one, &err) < 0) die("decode", &err);
        }
    }
    size_t hwm = status_kb("VmHWM:") * 1024;
    printf("plan %zu bytes, peak RSS %zu bytes, plan/peak %.3f\n", plan.total, hwm, (double)plan.total / (double)hwm);
    return 0;
}
