// bench_model: figures for the decoder (src/model/transformer.c) at the bench
// shape (C 512, L 8, H 8, Hkv 2, F 1408, V 32000; LoRA rank 16 on all seven
// projections), each against a reference measured in the same run: policy
// forward + backward to LoRA (tokens/s, model FLOP/s vs OpenBLAS sgemm on the
// model's own products), single-sequence decode vs the STREAM-triad roofline,
// batched decode vs sgemm. bench/bench_model.sh adds the transformers + PEFT
// reference (validation/bench/torch_policy.py). Validates first. Not a test.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/threads.h"
#include "kernels.h"
#include "model/modelgen.h"
#include "refs.h"
#include "model/transformer.h"

enum { NSEQ = 8, SEQ = 256, TP = NSEQ * SEQ, RANK = 16, PREFILL = 32, DECODE_STEPS = 256, BATCH_STEPS = 48 };

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "bench_model: %s: %s\n", what, err ? err->msg : "out of memory");
    exit(1);
}

// Best (least disturbed) of n times, as bench_kernels and torch_policy.py.
static double best_of(const double *t, int n) {
    double b = t[0];
    for (int i = 1; i < n; i++) b = fmin(b, t[i]);
    return b;
}

// ---- the model ----
typedef struct {
    ModelWeights w;
    LoraLayout lay;
    float *lora;        // (n_params) A ~ PEFT's init, B non-zero (B = 0 would make LoRA free)
    double mat_params;  // weights read by the matmuls per token: projections + LM head (+ LoRA)
    double lora_params;
} BenchModel;

static void model_build(BenchModel *m) {
    PailErr err = {0};
    ModelConfig cfg;
    if (modelgen_shape(&cfg, "bench", MODEL_LLAMA) < 0) die("modelgen_shape bench", NULL);
    if (model_weights_alloc(&m->w, &cfg, &err) < 0) die("model_weights_alloc", &err);
    // N(0, 0.02^2)-sized uniform values (std 0.02), norms 1: a realistic scale
    bench_fill_uniform(m->w.memory, m->w.num_params, 0.02f * sqrtf(3.0f), 11);
    const ModelConfig *c = &m->w.cfg;
    int L = c->num_hidden_layers, C = c->hidden_size;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < C; i++) m->w.p.attn_norm[l * C + i] = m->w.p.mlp_norm[l * C + i] = 1.0f;
    for (int i = 0; i < C; i++) m->w.p.final_norm[i] = 1.0f;
    LoraConfig lc = {.rank = RANK, .alpha = 32, .targets = (1u << LORA_NMOD) - 1};
    if (lora_layout_build(&m->lay, c, &lc, &err) < 0) die("lora_layout_build", &err);
    m->lora = bench_malloc((size_t)m->lay.n_params * sizeof(float));
    lora_init(&m->lay, m->lora, 3);
    for (int l = 0; l < L; l++)
        for (int mod = 0; mod < LORA_NMOD; mod++) {
            const LoraSlot *s = lora_slot(&m->lay, l, mod);
            bench_fill_uniform(m->lora + s->b_off, (size_t)s->out * RANK, 0.01f, 100 + l * 8 + mod);
        }
    size_t HD = (size_t)c->num_attention_heads * c->head_dim, KD = (size_t)c->num_key_value_heads * c->head_dim,
           F = c->intermediate_size;
    m->mat_params = (double)L * (C * HD * 2 + C * KD * 2 + 3 * C * F) + (double)c->vocab_size * C;
    m->lora_params = (double)m->lay.n_params;
}

// Forward + backward FLOPs of one policy step (counting each matmul 2*M*N*K,
// no recomputation): projections and LoRA products, causal attention (QK^T and
// PV over the visible half), the LM head on rows with a target. Backward: the
// dx of every product (base weights frozen: no base dW), the LoRA dA and dB,
// attention dQ dK dV dP (2x its forward), the LM head's dhidden (1x).
static double policy_flops(const BenchModel *m, const int *cu, int nseq, int nsel, double *fwd_out) {
    const ModelConfig *c = &m->w.cfg;
    double C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads, D = c->head_dim,
           HD = H * D, KD = c->num_key_value_heads * D, L = c->num_hidden_layers, V = c->vocab_size, R = RANK;
    double T = cu[nseq], att = 0;
    for (int s = 0; s < nseq; s++) {
        double n = cu[s + 1] - cu[s];
        att += 2.0 * 2.0 * D * H * n * (n + 1) / 2;  // QK^T and PV, key j <= query i
    }
    double proj = 2 * T * (C * HD + 2 * C * KD + HD * C + 3 * C * F);
    double lora = 2 * T * R * ((C + HD) + 2 * (C + KD) + (HD + C) + 2 * (C + F) + (F + C));
    double head = 2.0 * nsel * C * V;
    double fwd = L * (proj + lora + att) + head;
    double bwd = L * (proj + 2 * lora + 2 * att) + head;
    if (fwd_out) *fwd_out = fwd;
    return fwd + bwd;
}

// ---- validation: the KV-cache decode gives the full forward's log-probs ----
static void validate_decode(BenchModel *m, Transformer *fwd_tf, Transformer *dec_tf) {
    PailErr err = {0};
    enum { N = PREFILL + 16 };
    int V = m->w.cfg.vocab_size, tok[N], pos[N], tgt[N], cu[2] = {0, N};
    for (int i = 0; i < N; i++) tok[i] = (i * 7919 + 13) % V, pos[i] = i;
    for (int i = 0; i < N; i++) tgt[i] = i + 1 < N ? tok[i + 1] : -1;
    float logp[N], *logits = bench_malloc((size_t)V * 4);
    if (transformer_forward(fwd_tf, logp, NULL, tok, pos, cu, 1, N, tgt, 1.0f, &err) < 0) die("forward", &err);
    KvCache *kv;
    if (kvcache_init(&kv, &m->w.cfg, 1, N, &err) < 0) die("kvcache", &err);
    double worst = 0;
    for (int i = 0; i < N - 1;) {
        int n = i == 0 ? PREFILL : 1;
        if (transformer_extend(dec_tf, kv, logits, &n, tok + i, &err) < 0) die("extend", &err);
        i += n;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, logits[j]);
        for (int j = 0; j < V; j++) s += exp(logits[j] - mx);
        worst = fmax(worst, fabs(logits[tok[i]] - mx - log(s) - logp[i - 1]));
    }
    kvcache_free(kv);
    free(logits);
    printf("validate: KV-cache decode vs full forward log-probs (LoRA on), %d tokens: max abs diff %.2e %s\n", N,
           worst, worst <= 1e-4 ? "(ok, <= 1e-4)" : "(WRONG: > 1e-4)");
    if (!(worst <= 1e-4)) exit(1);
}

// ---- policy forward + backward ----
static double policy(BenchModel *m, Transformer *tf, double sgemm, int iters) {
    PailErr err = {0};
    int V = m->w.cfg.vocab_size;
    int *tok = bench_malloc(TP * sizeof(int)), *pos = bench_malloc(TP * sizeof(int)), *tgt = bench_malloc(TP * sizeof(int)),
        cu[NSEQ + 1], nsel = 0;
    float *logp = bench_malloc(TP * 4), *dlogp = bench_malloc(TP * 4), *grads = bench_malloc((size_t)m->lay.n_params * 4);
    for (int s = 0; s <= NSEQ; s++) cu[s] = s * SEQ;
    for (int t = 0; t < TP; t++) tok[t] = (int)(((unsigned)t * 2654435761u >> 7) % (unsigned)V), pos[t] = t % SEQ;
    for (int t = 0; t < TP; t++) {
        tgt[t] = pos[t] + 1 < SEQ ? tok[t + 1] : -1;  // sum of the log-probs of each sequence's next tokens
        dlogp[t] = tgt[t] >= 0;
        nsel += tgt[t] >= 0;
    }
    double tf_s[16], tb_s[16], fwd_flops;
    double flops = policy_flops(m, cu, NSEQ, nsel, &fwd_flops);
    for (int it = -1; it < iters; it++) {  // it -1: warm-up
        memset(grads, 0, (size_t)m->lay.n_params * 4);
        double t0 = bench_now();
        if (transformer_forward(tf, logp, NULL, tok, pos, cu, NSEQ, TP, tgt, 1.0f, &err) < 0) die("forward", &err);
        double t1 = bench_now();
        if (transformer_backward(tf, grads, NULL, dlogp, &err) < 0) die("backward", &err);
        double t2 = bench_now();
        if (it >= 0) tf_s[it] = t1 - t0, tb_s[it] = t2 - t1;
    }
    double gn = 0, lsum = 0;
    for (int64_t i = 0; i < m->lay.n_params; i++) gn += (double)grads[i] * grads[i];
    for (int t = 0; t < TP; t++) lsum += logp[t];
    double tot[16];
    for (int i = 0; i < iters; i++) tot[i] = tf_s[i] + tb_s[i];
    int bi = 0;
    for (int i = 1; i < iters; i++) if (tot[i] < tot[bi]) bi = i;
    double t = best_of(tot, iters), tf_m = tf_s[bi], tb_m = tb_s[bi];
    double toks = TP / t;
    printf("\npolicy forward + backward to LoRA (frozen base), %d x %d tokens packed (T=%d), rank %d on all 7 "
           "projections, best of %d after a warm-up\n", NSEQ, SEQ, TP, RANK, iters);
    printf("  loss (sum of target log-probs) %.1f, |grad LoRA| %.3g (finite and non-zero: %s)\n", lsum, sqrt(gn),
           isfinite(gn) && gn > 0 ? "yes" : "NO");
    printf("  time: forward %.3f s, backward %.3f s, step %.3f s\n", tf_m, tb_m, t);
    printf("  pail: %.0f tok/s\n", toks);
    printf("  model FLOPs per step %.1f G (forward %.1f G; matmuls 2MNK, causal attention, no recompute)\n",
           flops / 1e9, fwd_flops / 1e9);
    printf("  model FLOP/s: %.1f GFLOP/s vs OpenBLAS sgemm %.1f GFLOP/s on the model's shapes: %.0f%% "
           "(target >= 60%%)\n", flops / t / 1e9, sgemm, 100 * flops / t / 1e9 / sgemm);
    printf("pail_policy_tok_s %.1f\n", toks);  // read by bench/bench_model.sh
    free(tok), free(pos), free(tgt), free(logp), free(dlogp), free(grads);
    return toks;
}

// ---- decode ----
// Prefill PREFILL tokens in each of n slots (one call), then `steps` decode steps
// of one token per slot; returns the decode tokens/s (prefill not counted).
static double decode_rate(BenchModel *m, Transformer *tf, int n, int steps) {
    PailErr err = {0};
    int V = m->w.cfg.vocab_size;
    KvCache *kv;
    if (kvcache_init(&kv, &m->w.cfg, n, PREFILL + steps, &err) < 0) die("kvcache", &err);
    int *n_new = bench_malloc((size_t)n * sizeof(int)), *tok = bench_malloc((size_t)n * PREFILL * sizeof(int));
    float *logits = bench_malloc((size_t)n * V * 4);
    for (int s = 0; s < n; s++) n_new[s] = PREFILL;
    for (int i = 0; i < n * PREFILL; i++) tok[i] = (i * 7919 + 5) % V;
    if (transformer_extend(tf, kv, logits, n_new, tok, &err) < 0) die("prefill", &err);
    for (int s = 0; s < n; s++) n_new[s] = 1;
    double t0 = bench_now();
    for (int st = 0; st < steps; st++) {
        // fixed tokens: choosing them from the logits (a serial pass over n x V)
        // would put the harness's time into the figure
        for (int s = 0; s < n; s++) tok[s] = (st * 7919 + s * 104729) % V;
        if (transformer_extend(tf, kv, logits, n_new, tok, &err) < 0) die("decode", &err);
    }
    double t = bench_now() - t0;
    kvcache_free(kv);
    free(n_new), free(tok), free(logits);
    return (double)n * steps / t;
}

static void decode(BenchModel *m, Transformer *tf, double triad) {
    const ModelConfig *c = &m->w.cfg;
    double bytes = 4.0 * (m->mat_params + m->lora_params);  // every weight once per step, fp32
    double kv_bytes = 2.0 * c->num_hidden_layers * c->num_key_value_heads * c->head_dim * 4 *
                      (PREFILL + DECODE_STEPS / 2.0);  // KV read per token, mean context
    double roof = triad * 1e9 / bytes;
    double r1 = decode_rate(m, tf, 1, DECODE_STEPS);
    printf("\ndecode, one sequence (prefill %d, then %d single-token transformer_extend steps, LoRA on)\n",
           PREFILL, DECODE_STEPS);
    printf("  weights read per token %.1f MB (fp32 projections %.1fM + LM head %.1fM + LoRA %.2fM params; "
           "KV cache adds %.2f MB at the mean context, not counted)\n", bytes / 1e6,
           (m->mat_params - (double)c->vocab_size * c->hidden_size) / 1e6,
           (double)c->vocab_size * c->hidden_size / 1e6, m->lora_params / 1e6, kv_bytes / 1e6);
    printf("  %.1f tok/s vs roofline %.1f tok/s (STREAM triad %.1f GB/s / %.1f MB): %.0f%% (target >= 85%%)\n", r1,
           roof, triad, bytes / 1e6, 100 * r1 / roof);
}

static void batched(BenchModel *m, Transformer *tf, double triad, double sgemm) {
    double bytes = 4.0 * (m->mat_params + m->lora_params), roof = triad * 1e9 / bytes;
    printf("\nbatched decode (prefill %d per sequence, then %d steps of one token per sequence)\n", PREFILL,
           BATCH_STEPS);
    printf("  %5s %10s %12s %10s %14s\n", "seqs", "tok/s", "GFLOP/s", "of sgemm", "bw roofline");
    int ns[3] = {8, 32, 64};
    for (int i = 0; i < 3; i++) {
        double r = decode_rate(m, tf, ns[i], BATCH_STEPS);
        double gf = 2.0 * (m->mat_params + m->lora_params) * r / 1e9;  // 2 * matmul params per token
        printf("  %5d %10.1f %12.1f %9.0f%% %13.0f%%%s\n", ns[i], r, gf, 100 * gf / sgemm,
               100 * r / (roof * ns[i]), ns[i] == 64 ? "  (target >= 50% of sgemm at 64)" : "");
    }
    printf("  (sgemm reference %.1f GFLOP/s; bw roofline = seqs x triad / weight bytes per step)\n", sgemm);
}

// Sections named on the command line (emptied arguments were options); none named: all.
static int want(int argc, char **argv, const char *section) {
    int named = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], section)) return 1;
        named += argv[i][0] != 0;
    }
    return !named;
}

// Usage: bench_model [policy] [decode] [batched] [--iters N]   (default: all three, 5 iterations)
int main(int argc, char **argv) {
    threads_policy_apply(argv);  // the executables' OpenMP wait policy (may start this program again)
    int iters = 5;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]), argv[i][0] = argv[i + 1][0] = 0;
    if (iters < 1 || iters > 16) { fprintf(stderr, "bench_model: --iters must be 1..16\n"); return 2; }
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    printf("bench_model: %d threads, OpenBLAS core %s, load average %.2f (figures are only meaningful on an idle "
           "machine)\n%s\n", omp_get_max_threads(), openblas_get_corename(), load, threads_policy_note());
    BenchModel m = {0};
    model_build(&m);
    const ModelConfig *c = &m.w.cfg;
    printf("model: bench shape C %d L %d H %d Hkv %d D %d F %d V %d, %.1fM params, LoRA rank %d: %.2fM params\n",
           c->hidden_size, c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads, c->head_dim,
           c->intermediate_size, c->vocab_size, m.w.num_params / 1e6, RANK, m.lora_params / 1e6);
    double triad_lo, triad = bench_stream_triad(&triad_lo);
    double sgemm = bench_sgemm_reference(c, TP);
    printf("references: STREAM triad %.1f GB/s (best of 3 allocations; worst %.1f); OpenBLAS sgemm %.1f GFLOP/s "
           "(forward products of a layer + LM head, T=%d, %d threads)\n", triad, triad_lo, sgemm, TP,
           omp_get_max_threads());
    PailErr err = {0};
    Transformer *ptf, *dtf;
    TransformerPlan pp = {.max_tokens = TP, .backward = true, .lora_rank = RANK},
                    dp = {.max_tokens = 64 * PREFILL, .lora_rank = RANK};
    if (transformer_init(&ptf, &m.w, &pp, &err) < 0) die("transformer_init (policy)", &err);
    if (transformer_init(&dtf, &m.w, &dp, &err) < 0) die("transformer_init (decode)", &err);
    if (transformer_set_lora(ptf, &m.lay, m.lora, &err) < 0 || transformer_set_lora(dtf, &m.lay, m.lora, &err) < 0)
        die("set_lora", &err);
    validate_decode(&m, ptf, dtf);
    if (want(argc, argv, "policy")) policy(&m, ptf, sgemm, iters);
    if (want(argc, argv, "decode")) decode(&m, dtf, triad);
    if (want(argc, argv, "batched")) batched(&m, dtf, triad, sgemm);
    transformer_free(ptf);
    transformer_free(dtf);
    free(m.lora);
    lora_layout_free(&m.lay);
    model_weights_free(&m.w);
    return 0;
}
