// bench_model: figures for the decoder (src/model/transformer.c) at the bench
// shape (C 512, L 8, H 8, Hkv 2, F 1408, V 32000; LoRA rank 16 on all seven
// projections), each against a reference measured in the same run: policy
// forward + backward to LoRA with the base held as f32 and as bf16 (tokens/s,
// model FLOP/s vs OpenBLAS sgemm on the model's own products, the bf16 / f32
// ratio), single-sequence decode vs the STREAM-triad roofline, batched decode
// (both dtypes) vs sgemm and vs the cores' measured FMA peak.
// bench/bench_model.sh adds the transformers + PEFT reference
// (validation/bench/torch_policy.py); bench_model_dtype the decode at a shape
// beyond the caches. Validates first. Not a test.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/threads.h"
#include "kernels.h"
#include "gemm_bf16.h"
#include "matmul_amx.h"
#include "model/modelgen.h"
#include "refs.h"
#include "model/transformer.h"

enum { NSEQ = 8, SEQ = 256, TP = NSEQ * SEQ, RANK = 16, PREFILL = 32, DECODE_STEPS = 256, BATCH_STEPS = 48 };

// What each figure runs: the base held as f32; as bf16 on the exact path (W
// converted to fp32, fp32 arithmetic); as bf16 on the CPU's fast bf16 GEMM
// (AMX tiles, else AVX-512 BF16: activations rounded to bf16 at the GEMMs),
// where it has one.
typedef struct {
    int d;       // 0: the f32-held transformer, 1: the bf16-held one
    GemmBf16 g;  // the bf16 GEMMs' path
    const char *name;
} Variant;
static Variant variants[3] = {{0, GEMM_BF16_EXACT, "f32"}, {1, GEMM_BF16_EXACT, "bf16"}, {1, GEMM_BF16_EXACT, "?"}};
static int n_variants(void) {
    GemmBf16 fast = gemm_bf16_usable(GEMM_BF16_AMX) ? GEMM_BF16_AMX : GEMM_BF16_AVX512;
    if (!gemm_bf16_usable(fast)) return 2;
    variants[2].g = fast, variants[2].name = fast == GEMM_BF16_AMX ? "bf16 amx" : "bf16 vdp";
    return 3;
}
static void variant_use(const Variant *v) { gemm_bf16_force(v->g); }

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
// The same values held twice: w's matrices are fp32 rounded to bf16 (so that
// the bf16 copy holds exactly the same numbers and both give the same math),
// wb's are bf16 (vectors fp32 in both). Index d of the Transformer pairs below:
// 0 runs on w, 1 on wb.
typedef struct {
    ModelWeights w, wb;
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
    DType bf16[PARAM_COUNT];
    model_dtypes_uniform(DT_BF16, bf16);
    if (model_weights_alloc_as(&m->wb, c, bf16, &err) < 0) die("model_weights_alloc_as bf16", &err);
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &m->w.specs[id];
        if (!s->present) continue;
        size_t n = s->numel * (s->per_layer ? L : 1);
        void *f = model_weights_tensor(&m->w, (ModelParamId)id, 0),
             *b = model_weights_tensor(&m->wb, (ModelParamId)id, 0);
        if (m->wb.dtype[id] == DT_F32) {
            memcpy(b, f, n * sizeof(float));
        } else {
            dtype_from_f32(b, f, m->wb.dtype[id], n);
            dtype_to_f32(f, b, m->wb.dtype[id], n);
        }
    }
    LoraConfig lc = {.rank = RANK, .alpha = 32, .targets = LORA_TARGETS_ALL};
    if (lora_layout_build(&m->lay, c, &lc, &err) < 0) die("lora_layout_build", &err);
    m->lora = bench_malloc((size_t)m->lay.n_params * sizeof(float));
    lora_init(&m->lay, m->lora, 3);
    for (int l = 0; l < L; l++)
        for (int mod = 0; mod < LORA_NMOD; mod++) {
            const LoraSlot *s = lora_slot(&m->lay, l, mod);
            if (!s) continue;  // a module this model has not
            bench_fill_uniform(m->lora + s->b_off, (size_t)s->n_exp * s->out * RANK, 0.01f, 100 + l * 8 + mod);
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
static void validate_decode(BenchModel *m, Transformer *fwd_tf, Transformer *dec_tf, const char *base,
                            double tol) {
    PailErr err = {0};
    enum { N = PREFILL + 16 };
    int V = m->w.cfg.vocab_size, tok[N], pos[N], tgt[N], cu[2] = {0, N};
    for (int i = 0; i < N; i++) tok[i] = (i * 7919 + 13) % V, pos[i] = i;
    for (int i = 0; i < N; i++) tgt[i] = i + 1 < N ? tok[i + 1] : -1;
    float logp[N], *logits = bench_malloc((size_t)V * 4);
    if (transformer_forward(fwd_tf, logp, NULL, tok, pos, cu, 1, N, tgt, 1.0f, &err) < 0) die("forward", &err);
    KvCache *kv;
    if (kvcache_init(&kv, &m->w.cfg, 1, N, DT_F32, &err) < 0) die("kvcache", &err);
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
    printf("validate: KV-cache decode vs full forward log-probs (LoRA on, base %s), %d tokens: max abs diff %.2e "
           "(%s, <= %g)\n", base, N, worst, worst <= tol ? "ok" : "WRONG: not", tol);
    if (!(worst <= tol)) exit(1);
}

// ---- validation: the same values held as bf16 and as f32 give the same log-probs ----
// (fp32 arithmetic in both; only the kernels' summation order may differ)
static void validate_dtypes(BenchModel *m, Transformer *tf[2]) {
    PailErr err = {0};
    enum { N = 96 };
    int V = m->w.cfg.vocab_size, tok[N], pos[N], tgt[N], cu[2] = {0, N};
    float logp[2][N];
    for (int i = 0; i < N; i++) tok[i] = (i * 104729 + 7) % V, pos[i] = i;
    for (int i = 0; i < N; i++) tgt[i] = i + 1 < N ? tok[i + 1] : -1;
    for (int d = 0; d < 2; d++)
        if (transformer_forward(tf[d], logp[d], NULL, tok, pos, cu, 1, N, tgt, 1.0f, &err) < 0) die("forward", &err);
    double worst = 0;
    for (int i = 0; i < N - 1; i++) worst = fmax(worst, fabs((double)logp[0][i] - logp[1][i]));
    printf("validate: forward log-probs, base held as bf16 vs the same values as f32, %d tokens: max abs diff %.2e "
           "%s\n", N, worst, worst <= 1e-4 ? "(ok, <= 1e-4)" : "(WRONG: > 1e-4)");
    if (!(worst <= 1e-4)) exit(1);
}

// ---- policy forward + backward ----
// The step on the f32-held base and on the bf16-held one, alternating
// iteration by iteration (so a disturbance hits both alike), best of iters each.
static void policy(BenchModel *m, Transformer *tf[2], double sgemm, int iters) {
    PailErr err = {0};
    int V = m->w.cfg.vocab_size, nv = n_variants();
    int *tok = bench_malloc(TP * sizeof(int)), *pos = bench_malloc(TP * sizeof(int)), *tgt = bench_malloc(TP * sizeof(int)),
        cu[NSEQ + 1], nsel = 0;
    float *logp[3], *grads[3], *dlogp = bench_malloc(TP * 4);
    for (int d = 0; d < nv; d++) logp[d] = bench_malloc(TP * 4), grads[d] = bench_malloc((size_t)m->lay.n_params * 4);
    for (int s = 0; s <= NSEQ; s++) cu[s] = s * SEQ;
    for (int t = 0; t < TP; t++) tok[t] = (int)(((unsigned)t * 2654435761u >> 7) % (unsigned)V), pos[t] = t % SEQ;
    for (int t = 0; t < TP; t++) {
        tgt[t] = pos[t] + 1 < SEQ ? tok[t + 1] : -1;  // sum of the log-probs of each sequence's next tokens
        dlogp[t] = tgt[t] >= 0;
        nsel += tgt[t] >= 0;
    }
    double tf_s[3][16], tb_s[3][16], fwd_flops;
    double flops = policy_flops(m, cu, NSEQ, nsel, &fwd_flops);
    for (int it = -1; it < iters; it++)  // it -1: warm-up
        for (int d = 0; d < nv; d++) {
            Transformer *t = tf[variants[d].d];
            variant_use(&variants[d]);
            memset(grads[d], 0, (size_t)m->lay.n_params * 4);
            double t0 = bench_now();
            if (transformer_forward(t, logp[d], NULL, tok, pos, cu, NSEQ, TP, tgt, 1.0f, &err) < 0)
                die("forward", &err);
            double t1 = bench_now();
            if (transformer_backward(t, grads[d], NULL, dlogp, &err) < 0) die("backward", &err);
            double t2 = bench_now();
            if (it >= 0) tf_s[d][it] = t1 - t0, tb_s[d][it] = t2 - t1;
        }
    printf("\npolicy forward + backward to LoRA (frozen base), %d x %d tokens packed (T=%d), rank %d on all 7 "
           "projections, the base held as f32 and as bf16 (the same values)%s, alternating, best of %d after a "
           "warm-up\n", NSEQ, SEQ, TP, RANK, nv > 2 ? ", bf16 both exact and on the CPU's bf16 GEMM" : "", iters);
    printf("  model FLOPs per step %.1f G (forward %.1f G; matmuls 2MNK, causal attention, no recompute)\n",
           flops / 1e9, fwd_flops / 1e9);
    double toks[3], gn[3] = {0}, lsum[3] = {0};
    for (int d = 0; d < nv; d++) {
        for (int64_t i = 0; i < m->lay.n_params; i++) gn[d] += (double)grads[d][i] * grads[d][i];
        for (int t = 0; t < TP; t++) lsum[d] += logp[d][t];
        double tot[16];
        for (int i = 0; i < iters; i++) tot[i] = tf_s[d][i] + tb_s[d][i];
        int bi = 0;
        for (int i = 1; i < iters; i++) if (tot[i] < tot[bi]) bi = i;
        double t = best_of(tot, iters);
        toks[d] = TP / t;
        printf("  base %-8s: loss (sum of target log-probs) %.1f, |grad LoRA| %.3g (finite and non-zero: %s)\n",
               variants[d].name, lsum[d], sqrt(gn[d]), isfinite(gn[d]) && gn[d] > 0 ? "yes" : "NO");
        printf("                 forward %.3f s, backward %.3f s, step %.3f s: %.0f tok/s; model FLOP/s %.1f GFLOP/s "
               "vs OpenBLAS sgemm %.1f GFLOP/s on the model's shapes: %.0f%% (target >= 60%%)\n", tf_s[d][bi],
               tb_s[d][bi], t, toks[d], flops / t / 1e9, sgemm, 100 * flops / t / 1e9 / sgemm);
    }
    for (int d = 1; d < nv; d++) {
        double gd = 0;
        for (int64_t i = 0; i < m->lay.n_params; i++)
            gd += ((double)grads[d][i] - grads[0][i]) * (grads[d][i] - grads[0][i]);
        printf("  %s vs f32-held (same values): loss differs by %.2e (%.1e relative), LoRA gradients by %.2e "
               "(relative L2)%s\n", variants[d].name, fabs(lsum[d] - lsum[0]), fabs(lsum[d] - lsum[0]) / fabs(lsum[0]),
               sqrt(gd / gn[0]), variants[d].g ? " (activations rounded to bf16 at the GEMMs)" : "");
    }
    int best = nv - 1;  // the bf16 path this CPU runs by default
    printf("  pail: %.0f tok/s (f32 base), %.0f tok/s (bf16 base, exact)", toks[0], toks[1]);
    if (nv > 2) printf(", %.0f tok/s (bf16 base, %s)", toks[2], gemm_bf16_word(variants[2].g));
    printf(": bf16 / f32 %.2fx (%s; target >= 1.3x)\n", toks[best] / toks[0], variants[best].name);
    printf("pail_policy_tok_s %.1f\n", toks[0]);  // read by bench/bench_model.sh
    printf("pail_policy_bf16_tok_s %.1f\n", toks[best]);
    variant_use(&variants[nv - 1]);
    free(tok), free(pos), free(tgt), free(dlogp);
    for (int d = 0; d < nv; d++) free(logp[d]), free(grads[d]);
}

// ---- decode ----
// Prefill PREFILL tokens in each of n slots (one call), then `steps` decode steps
// of one token per slot; returns the decode tokens/s (prefill not counted).
static double decode_rate(BenchModel *m, Transformer *tf, int n, int steps) {
    PailErr err = {0};
    int V = m->w.cfg.vocab_size;
    KvCache *kv;
    if (kvcache_init(&kv, &m->w.cfg, n, PREFILL + steps, DT_F32, &err) < 0) die("kvcache", &err);
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

// Batched decode on the f32-held and the bf16-held base, against sgemm and
// against the cores' fp32 FMA peak (the kernels convert bf16 exactly and
// compute in fp32, so the fp32 FMA rate is their ceiling): one thread's
// measured peak x the thread count, the all-threads-at-once figure beside it.
static void batched(BenchModel *m, Transformer *tf[2], double triad, double sgemm, const BenchPeak *pk) {
    double peak = pk->fp32_core * pk->threads, bpeak = pk->bf16_core * pk->threads;
    printf("\nbatched decode (prefill %d per sequence, then %d steps of one token per sequence)\n", PREFILL,
           BATCH_STEPS);
    printf("  %5s %8s %10s %12s %10s %10s %14s\n", "seqs", "base", "tok/s", "GFLOP/s", "of sgemm", "of peak",
           "bw roofline");
    int ns[3] = {8, 32, 64}, nv = n_variants();
    double gf64[3] = {0};
    for (int d = 0; d < nv; d++) {
        const Variant *v = &variants[d];
        variant_use(v);
        double bytes = (v->d ? 2.0 : 4.0) * (m->mat_params) + 4.0 * m->lora_params, roof = triad * 1e9 / bytes;
        for (int i = 0; i < 3; i++) {
            double r = decode_rate(m, tf[v->d], ns[i], BATCH_STEPS);
            double gf = 2.0 * (m->mat_params + m->lora_params) * r / 1e9;  // 2 * matmul params per token
            if (ns[i] == 64) gf64[d] = gf;
            printf("  %5d %8s %10.1f %12.1f %9.0f%% %9.0f%% %13.0f%%%s\n", ns[i], v->name, r, gf,
                   100 * gf / sgemm, peak > 0 ? 100 * gf / peak : 0, 100 * r / (roof * ns[i]),
                   ns[i] != 64 || (d == 1 && nv > 2) ? "" : d ? "  (target >= 60% of sgemm at 64)"
                                                           : "  (target >= 50% of sgemm at 64)");
        }
    }
    variant_use(&variants[nv - 1]);
    printf("  (sgemm reference %.1f GFLOP/s; of peak = GFLOP/s / (fp32 FMA peak of one thread x %d threads) = "
           "%.1f GFLOP/s; bw roofline = seqs x triad / weight bytes per step in the base's dtype)\n", sgemm,
           pk->threads, peak);
    printf("  peak, measured in this run: clock %.2f GHz (a chain of dependent register adds on one thread, 1 cycle "
           "each); fp32 %s: %.1f GFLOP/s on one thread alone (%.1f FLOP/cycle at that clock); all %d threads at "
           "once %.1f GFLOP/s%s\n", pk->ghz, pk->fp32_isa, pk->fp32_core, pk->ghz > 0 ? pk->fp32_core / pk->ghz : 0,
           pk->threads, pk->fp32_all,
           pk->fp32_all < 0.9 * peak ? " (under threads x one thread: the vCPUs share a core, or were busy)" : "");
    if (bpeak > 0)
        printf("  bf16 dot product vdpbf16ps (zmm, 16 chains): %.1f GFLOP/s on one thread (%.1f FLOP/cycle), %.1f on "
               "%d threads at once; %s at 64 sequences: %.0f%% of one thread's x %d\n", pk->bf16_core,
               pk->ghz > 0 ? pk->bf16_core / pk->ghz : 0, pk->bf16_all, pk->threads, variants[nv - 1].name,
               100 * gf64[nv - 1] / bpeak, pk->threads);
    else
        printf("  bf16 dot product: the CPU has no avx512_bf16\n");
    if (pk->amx_core > 0)
        printf("  AMX tdpbf16ps (4 accumulator tiles): %.0f GFLOP/s on one thread (%.0f FLOP/cycle), %.0f on %d "
               "threads at once; bf16 amx at 64 sequences: %.1f%% of that\n", pk->amx_core,
               pk->ghz > 0 ? pk->amx_core / pk->ghz : 0, pk->amx_all, pk->threads,
               100 * gf64[2] / pk->amx_all);
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
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("bench_model: %d threads, OpenBLAS core %s (OPENBLAS_CORETYPE %s), load average %.2f (figures are only "
           "meaningful on an idle machine)\n%s\n", omp_get_max_threads(), openblas_get_corename(),
           coretype ? coretype : "unset", load, threads_policy_note());
    __builtin_cpu_init();
    if (!strcmp(openblas_get_corename(), "Prescott") && __builtin_cpu_supports("avx2"))
        printf("  (OpenBLAS did not recognise this CPU and runs its SSE3 kernels on an AVX2%s machine: sgemm, and "
               "every figure against it, runs far under what OPENBLAS_CORETYPE=%s gives)\n",
               __builtin_cpu_supports("avx512f") ? "/AVX-512" : "",
               __builtin_cpu_supports("avx512f") ? "SkylakeX or Cooperlake" : "Haswell");
    printf("kernels: dtype ISA %s; matmul path for bf16 weights at T = 1 %s, T = 64 %s, T = %d %s\n", dtype_isa(),
           matmul_path_name(1, DT_BF16), matmul_path_name(64, DT_BF16), TP, matmul_path_name(TP, DT_BF16));
    BenchModel m = {0};
    model_build(&m);
    const ModelConfig *c = &m.w.cfg;
    printf("model: bench shape C %d L %d H %d Hkv %d D %d F %d V %d, %.1fM params held as f32 (%.0f MB) and as "
           "bf16 (%.0f MB; the f32 copy holds the same bf16-rounded values), LoRA rank %d: %.2fM params\n",
           c->hidden_size, c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads, c->head_dim,
           c->intermediate_size, c->vocab_size, m.w.num_params / 1e6, m.w.bytes / 1e6, m.wb.bytes / 1e6, RANK,
           m.lora_params / 1e6);
    double triad_lo, triad = bench_stream_triad(&triad_lo);
    double sgemm = bench_sgemm_reference(c, TP);
    printf("references: STREAM triad %.1f GB/s (best of 3 allocations; worst %.1f); OpenBLAS sgemm %.1f GFLOP/s "
           "(forward products of a layer + LM head, T=%d, %d threads)\n", triad, triad_lo, sgemm, TP,
           omp_get_max_threads());
    PailErr err = {0};
    Transformer *ptf[2], *dtf[2];
    TransformerPlan pp = {.max_tokens = TP, .backward = true, .lora_rank = RANK},
                    dp = {.max_tokens = 64 * PREFILL, .lora_rank = RANK};
    for (int d = 0; d < 2; d++) {
        const ModelWeights *w = d ? &m.wb : &m.w;
        if (transformer_init(&ptf[d], w, &pp, &err) < 0) die("transformer_init (policy)", &err);
        if (transformer_init(&dtf[d], w, &dp, &err) < 0) die("transformer_init (decode)", &err);
        if (transformer_set_lora(ptf[d], &m.lay, m.lora, &err) < 0 ||
            transformer_set_lora(dtf[d], &m.lay, m.lora, &err) < 0)
            die("set_lora", &err);
    }
    variant_use(&variants[1]);  // the exact path: the checks are fp32-tight
    validate_decode(&m, ptf[0], dtf[0], "f32", 1e-4);
    validate_decode(&m, ptf[1], dtf[1], "bf16", 1e-4);
    validate_dtypes(&m, ptf);
    if (n_variants() > 2) {
        // the forward's GEMMs on AMX / AVX-512 BF16 round their activations to
        // bf16; the decode's mat-vecs do not: a bf16-sized distance, reported
        // (and checked only against gross error: validation/bench/
        // dtype_logprobs.py measures it against transformers' own bf16 distance)
        variant_use(&variants[2]);
        char what[80];
        snprintf(what, sizeof what, "bf16, forward's GEMMs on %s", gemm_bf16_word(variants[2].g));
        validate_decode(&m, ptf[1], dtf[1], what, 0.1);
    }
    if (want(argc, argv, "policy")) policy(&m, ptf, sgemm, iters);
    if (want(argc, argv, "decode")) decode(&m, dtf[0], triad);
    if (want(argc, argv, "batched")) {
        BenchPeak pk;
        bench_peak(&pk);
        batched(&m, dtf, triad, sgemm, &pk);
    }
    for (int d = 0; d < 2; d++) transformer_free(ptf[d]), transformer_free(dtf[d]);
    free(m.lora);
    lora_layout_free(&m.lay);
    model_weights_free(&m.w);
    model_weights_free(&m.wb);
    return 0;
}
