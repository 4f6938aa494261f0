// bench_model_quant: base weights held as GGUF blocks (issue 46) against bf16
// at the Qwen2.5-0.5B shape (C 896, L 24, H 14, Hkv 2, F 4864, V 151936, tied,
// q/k/v bias: 494M parameters; 0.99 GB as bf16). Two figures, each a ratio to
// bf16 measured in the same run:
// - decode: batch-1 tokens/s (prefill 8, then one token a step, LoRA rank 16
//   on all seven projections as the rollout runs it, or --rank 0) for bf16,
//   q8_0 and q4_k. "q4_k" is what `--quantize q4_k` stores: Q4_K where a row is
//   whole 256-blocks, else quant_fallback's type (Q5_0 for rows of 896, as
//   llama-quantize does): at this shape only ffn_down (K 4864) is Q4_K, the
//   other projections and the tied embedding Q5_0 (the mix is printed).
//   Targets: q8_0 >= 1.7x, q4_k >= 2.5x bf16.
// - policy: the GRPO step, forward + backward to LoRA (frozen base) over packed
//   sequences (2 x 64 tokens by default), tokens/s on the q4_k base against the
//   bf16 base, alternating, best of --iters. Target >= 0.8x.
// The quantized weights are random valid blocks (random bytes, every fp16
// scale set so the values have std ~0.02): the speed does not depend on the
// values. Validates first, in a child process, on a small model: the
// quantized model's log-probs, LoRA gradients and decode logits against the
// same blocks dequantized into an f32 model; where the kernels for quantized
// weights are missing (or wrong) it prints SKIP and exits 0. Also
// `save-quantized`: a checkpoint loaded with --quantize's rule and written as
// its blocks (bench/dtype_memory.sh's q4_k folder). Not a test.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/threads.h"
#include "kernels.h"
#include "quant.h"
#include "model/modelgen.h"
#include "model/transformer.h"
#include "refs.h"

enum { PREFILL = 8,
       WARMUP = 2,
       MAX_REPS = 8,
       MAX_ITERS = 8,
       TRIAD_PASSES = 3,
       NDT = 3 };
static const DType WANT[NDT] = {DT_BF16, DT_Q8_0, DT_Q4_K};

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "bench_model_quant: %s: %s\n", what, err ? err->msg : "out of memory");
    exit(1);
}

static long int_arg(const char *flag, const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_model_quant: %s %s: want an integer in [%ld, %ld]\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

// ---- the weights ----
// Where each block type keeps its fp16 scales (ggml-common.h's block_<type>:
// d, and dmin / m for the types with a min): bytes from the block's start.
static int half_fields(DType dt, int off[2]) {
    switch (dt) {
    case DT_Q8_0:
    case DT_Q4_0:
    case DT_Q5_0: off[0] = 0; return 1;
    case DT_Q4_1:
    case DT_Q5_1:
    case DT_Q4_K:
    case DT_Q5_K: off[0] = 0, off[1] = 2; return 2;
    case DT_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

static void set_halves(unsigned char *p, DType dt, size_t nblocks, uint16_t h) {
    int off[2], nf = half_fields(dt, off);
    size_t bb = dtype_block_bytes(dt);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblocks; b++)
        for (int f = 0; f < nf; f++) memcpy(p + b * bb + off[f], &h, 2);
}

// rows x K elements of dt at p: random bytes (a counter hash, thread-count
// independent), then every fp16 scale set to one value s such that the
// dequantized values have RMS `rms` (values are linear in the scales: s =
// rms / the RMS at scale 1, over the first rows).
static void fill_quant(void *p, DType dt, size_t rows, size_t K, float rms, uint64_t seed) {
    size_t bytes = rows * dtype_row_bytes(dt, K), words = bytes / 8;
    unsigned char *q = p;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < words; i++) {
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;  // splitmix64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        memcpy(q + i * 8, &z, 8);
    }
    for (size_t i = words * 8; i < bytes; i++) q[i] = (unsigned char)(i * 131 + seed);
    size_t nblocks = bytes / dtype_block_bytes(dt), probe = rows < 16 ? rows : 16;
    set_halves(q, dt, nblocks, 0x3C00);  // 1.0
    float *row = bench_malloc(K * sizeof(float));
    double ss = 0;
    for (size_t r = 0; r < probe; r++) {
        quant_dequant(row, q + r * dtype_row_bytes(dt, K), dt, K);
        for (size_t i = 0; i < K; i++) ss += (double)row[i] * row[i];
    }
    free(row);
    float s = (float)(rms / sqrt(ss / (double)(probe * K)));
    uint16_t h;
    dtype_from_f32(&h, &s, DT_F16, 1);
    set_halves(q, dt, nblocks, h);
}

// Every (family, layer): matrices std 0.02 in their storage dtype (a float one:
// Uniform draws), biases std 0.02, norms 1.
static void weights_fill(ModelWeights *w, uint64_t seed) {
    int L = w->cfg.num_hidden_layers;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &w->specs[id];
        if (!s->present) continue;
        for (int l = 0; l < (s->per_layer ? L : 1); l++) {
            void *p = model_weights_tensor(w, (ModelParamId)id, l);
            DType dt = model_weights_dtype(w, (ModelParamId)id, l);
            unsigned sd = (unsigned)(seed * 131 + (uint64_t)id * 64 + (uint64_t)l);
            if (strstr(s->name, "norm")) {
                for (size_t i = 0; i < s->numel; i++) ((float *)p)[i] = 1.0f;
            } else if (dtype_is_quant(dt)) {
                fill_quant(p, dt, s->shape[0], s->shape[1], 0.02f, sd);
            } else if (dt == DT_F32) {
                bench_fill_uniform(p, s->numel, 0.02f * sqrtf(3.0f), sd);
            } else {
                float *f = bench_malloc(s->numel * sizeof(float));
                bench_fill_uniform(f, s->numel, 0.02f * sqrtf(3.0f), sd);
                dtype_from_f32(p, f, dt, s->numel);
                free(f);
            }
        }
    }
}

// The weights with every matrix as want says: a float dtype, or a quantized
// one where the rows are whole blocks, else quant_fallback's (--quantize's
// choice, src/model/weights.c).
static void weights_alloc(ModelWeights *w, const ModelConfig *cfg, DType want) {
    PailErr err = {0};
    ModelParamSpec specs[PARAM_COUNT];
    model_param_specs(cfg, specs);
    int L = cfg->num_hidden_layers;
    DType *ldt = bench_malloc((size_t)PARAM_COUNT * L * sizeof(DType));
    for (int id = 0; id < PARAM_COUNT; id++)
        for (int l = 0; l < L; l++) {
            DType d = DT_F32;
            if (specs[id].present && model_param_is_matrix((ModelParamId)id))
                d = dtype_is_quant(want) ? quant_fallback(want, specs[id].shape[1]) : want;
            ldt[id * L + l] = d;
        }
    if (model_weights_alloc_layers(w, cfg, ldt, &err) < 0) die("model_weights_alloc_layers", &err);
    free(ldt);
}

static void lora_build(LoraLayout *lay, float **lora, const ModelConfig *cfg, int rank) {
    PailErr err = {0};
    LoraConfig lc = {.rank = rank, .alpha = 2 * rank, .targets = LORA_TARGETS_ALL};
    if (lora_layout_build(lay, cfg, &lc, &err) < 0) die("lora_layout_build", &err);
    *lora = bench_malloc((size_t)lay->n_params * sizeof(float));
    lora_init(lay, *lora, 3);
    for (int l = 0; l < cfg->num_hidden_layers; l++)
        for (int mod = 0; mod < LORA_NMOD; mod++) {  // B non-zero: B = 0 would make LoRA free
            const LoraSlot *s = lora_slot(lay, l, mod);
            if (!s) continue;  // a module this model has not
            bench_fill_uniform(*lora + s->b_off, (size_t)s->n_exp * s->out * rank, 0.01f, 100 + l * 8 + mod);
        }
}

// Bytes a decode step reads from the matrices (the projections of every layer
// and the LM head: the tied embedding, read whole), in their storage dtypes.
static double matrix_bytes(const ModelWeights *w) {
    static const ModelParamId proj[] = {PARAM_WQ, PARAM_WK, PARAM_WV, PARAM_WO, PARAM_W_GATE, PARAM_W_UP,
                                        PARAM_W_DOWN};
    double b = 0;
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++)
        for (int l = 0; l < w->cfg.num_hidden_layers; l++) {
            const ModelParamSpec *s = &w->specs[proj[i]];
            DType dt = model_weights_dtype(w, proj[i], l);
            b += (double)s->shape[0] * (dtype_is_quant(dt) ? dtype_row_bytes(dt, s->shape[1]) : s->shape[1] * dtype_size(dt));
        }
    DType hd = model_weights_dtype(w, PARAM_LM_HEAD, 0);
    size_t V = w->cfg.vocab_size, C = w->cfg.hidden_size;
    return b + (double)V * (dtype_is_quant(hd) ? dtype_row_bytes(hd, C) : C * dtype_size(hd));
}

// ---- validation (in a child: a missing kernel may read past a row) ----
// A small model (C 256, F 640: Q4_K rows, and Q5_0 for ffn_down's 640) as
// want's blocks and the same blocks dequantized into an f32 model: log-probs,
// LoRA gradients and decode logits must agree to fp32 rounding.
static int validate_one(DType want) {
    PailErr err = {0};
    ModelConfig cfg;
    if (modelgen_shape(&cfg, "tiny", MODEL_QWEN2) < 0) die("modelgen_shape tiny", NULL);
    cfg.hidden_size = 256, cfg.intermediate_size = 640, cfg.num_attention_heads = 4, cfg.num_key_value_heads = 2;
    cfg.head_dim = 64, cfg.vocab_size = 1024, cfg.num_hidden_layers = 2;
    ModelWeights q, f;
    weights_alloc(&q, &cfg, want);
    weights_fill(&q, 5);
    if (model_weights_alloc(&f, &cfg, &err) < 0) die("model_weights_alloc", &err);
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &q.specs[id];
        if (!s->present) continue;
        for (int l = 0; l < (s->per_layer ? cfg.num_hidden_layers : 1); l++)
            dtype_to_f32(model_weights_tensor(&f, (ModelParamId)id, l), model_weights_tensor(&q, (ModelParamId)id, l),
                         model_weights_dtype(&q, (ModelParamId)id, l), s->numel);
    }
    char desc[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(&q, desc, sizeof desc);
    enum { NS = 2,
           SL = 24,
           T = NS * SL };
    LoraLayout lay;
    float *lora;
    lora_build(&lay, &lora, &cfg, 8);
    int tok[T], pos[T], tgt[T], cu[NS + 1] = {0, SL, T}, V = cfg.vocab_size;
    float logp[2][T], dlogp[T], *grad[2], *logits[2];
    for (int t = 0; t < T; t++) tok[t] = (t * 7919 + 3) % V, pos[t] = t % SL;
    for (int t = 0; t < T; t++) tgt[t] = pos[t] + 1 < SL ? tok[t + 1] : -1, dlogp[t] = tgt[t] >= 0;
    double worst_lp = 0, gd = 0, gn = 0, worst_logit = 0;
    for (int k = 0; k < 2; k++) {
        Transformer *tf;
        TransformerPlan plan = {.max_tokens = T, .backward = true, .lora_rank = 8};
        if (transformer_init(&tf, k ? &f : &q, &plan, &err) < 0) die("transformer_init", &err);
        if (transformer_set_lora(tf, &lay, lora, &err) < 0) die("transformer_set_lora", &err);
        grad[k] = calloc((size_t)lay.n_params, sizeof(float));
        logits[k] = bench_malloc((size_t)V * 4 * sizeof(float));
        if (!grad[k]) die("calloc", NULL);
        if (transformer_forward(tf, logp[k], NULL, tok, pos, cu, NS, T, tgt, 1.0f, &err) < 0) die("forward", &err);
        if (transformer_backward(tf, grad[k], NULL, dlogp, &err) < 0) die("backward", &err);
        KvCache *kv;
        if (kvcache_init(&kv, &cfg, 1, 16, DT_F32, &err) < 0) die("kvcache_init", &err);
        int n = 4;  // prefill 4, then 1-token steps: the mat-vec path
        if (transformer_extend(tf, kv, logits[k], &n, tok, &err) < 0) die("prefill", &err);
        n = 1;
        for (int st = 0; st < 3; st++)
            if (transformer_extend(tf, kv, logits[k], &n, tok + 4 + st, &err) < 0) die("decode", &err);
        kvcache_free(kv);
        transformer_free(tf);
    }
    for (int t = 0; t < T; t++) worst_lp = fmax(worst_lp, fabs((double)logp[0][t] - logp[1][t]));
    for (int64_t i = 0; i < lay.n_params; i++)
        gd += ((double)grad[0][i] - grad[1][i]) * (grad[0][i] - grad[1][i]), gn += (double)grad[1][i] * grad[1][i];
    for (int i = 0; i < V; i++) worst_logit = fmax(worst_logit, fabs((double)logits[0][i] - logits[1][i]));
    double rel = sqrt(gd / gn);
    bool ok = worst_lp < 2e-3 && rel < 1e-3 && worst_logit < 2e-3 && gn > 0 && isfinite(gn);
    printf("  validate %s (%s) against its blocks dequantized into f32: log-probs within %.1e, LoRA gradients %.1e "
           "(relative L2), decode logits within %.1e: %s\n",
           dtype_name(want), desc, worst_lp, rel, worst_logit,
           ok ? "ok" : "MISMATCH");
    for (int k = 0; k < 2; k++) free(grad[k]), free(logits[k]);
    free(lora);
    lora_layout_free(&lay);
    model_weights_free(&q), model_weights_free(&f);
    return ok ? 0 : 1;
}

// 0 when the quantized paths agree; else the reason (printed as a SKIP).
static const char *validate(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
        int rc = validate_one(DT_Q8_0) | validate_one(DT_Q4_K);
        fflush(stdout);
        _exit(rc);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return "waitpid failed";
    if (WIFSIGNALED(st)) return "the validation crashed (no kernels for quantized weights in this build?)";
    if (WEXITSTATUS(st)) return "the quantized model does not match its dequantized twin (kernels missing or wrong)";
    return NULL;
}

// ---- decode ----
typedef struct {
    DType want;
    double triad, tok_s, bytes;
    char desc[MODEL_DTYPE_DESC];
} Rep;

static void decode_rep(const ModelConfig *cfg, const LoraLayout *lay, const float *lora, int rank, DType want,
                       int steps, Rep *r) {
    PailErr err = {0};
    ModelWeights w;
    weights_alloc(&w, cfg, want);
    r->triad = bench_triad_on(w.memory, w.bytes, TRIAD_PASSES);  // also the block's first touch
    weights_fill(&w, 11);
    model_weights_dtype_desc(&w, r->desc, sizeof r->desc);
    Transformer *tf;
    TransformerPlan plan = {.max_tokens = PREFILL, .lora_rank = rank};
    if (transformer_init(&tf, &w, &plan, &err) < 0) die("transformer_init", &err);
    if (rank && transformer_set_lora(tf, lay, lora, &err) < 0) die("transformer_set_lora", &err);
    KvCache *kv;
    if (kvcache_init(&kv, cfg, 1, PREFILL + WARMUP + steps, DT_F32, &err) < 0) die("kvcache_init", &err);
    int V = cfg->vocab_size, tok[PREFILL], n = PREFILL;
    float *logits = bench_malloc((size_t)V * sizeof(float));
    for (int i = 0; i < PREFILL; i++) tok[i] = (i * 7919 + 5) % V;
    if (transformer_extend(tf, kv, logits, &n, tok, &err) < 0) die("prefill", &err);
    n = 1;
    double t0 = 0;
    for (int st = 0; st < WARMUP + steps; st++) {
        if (st == WARMUP) t0 = bench_now();
        tok[0] = (st * 104729 + 13) % V;  // fixed tokens: no argmax over V in the timed loop
        if (transformer_extend(tf, kv, logits, &n, tok, &err) < 0) die("decode", &err);
    }
    r->tok_s = steps / (bench_now() - t0);
    r->want = want;
    r->bytes = matrix_bytes(&w) + (rank ? 4.0 * lay->n_params : 0);
    free(logits);
    kvcache_free(kv);
    transformer_free(tf);
    model_weights_free(&w);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void decode(const ModelConfig *cfg, int reps, int steps, int rank) {
    LoraLayout lay = {0};
    float *lora = NULL;
    if (rank) lora_build(&lay, &lora, cfg, rank);
    printf("\ndecode: one sequence, prefill %d, %d untimed + %d timed single-token steps, LoRA %s; dtypes "
           "alternate rep by rep, each rep a fresh weight block (STREAM triad on it first, best of %d)\n",
           PREFILL, WARMUP, steps, rank ? "on all 7 projections (fp32)" : "off", TRIAD_PASSES);
    if (rank) printf("  LoRA rank %d: %.1f MB of fp32 read per token besides the base\n", rank, 4.0 * lay.n_params / 1e6);
    printf("  mat-vec paths: bf16 %s, q8_0 %s, q4_k %s, q5_0 %s\n", matmul_path_name(1, DT_BF16),
           matmul_path_name(1, DT_Q8_0), matmul_path_name(1, DT_Q4_K), matmul_path_name(1, DT_Q5_0));
    printf("  %3s %-14s %10s %9s %9s %10s %9s %9s\n", "rep", "weights", "triad", "MB/token", "tok/s", "ms/token",
           "eff GB/s", "of triad");
    Rep all[NDT][MAX_REPS];
    for (int i = 0; i < reps; i++)
        for (int d = 0; d < NDT; d++) {
            Rep *r = &all[d][i];
            decode_rep(cfg, &lay, lora, rank, WANT[d], steps, r);
            double gbs = r->bytes * r->tok_s / 1e9;
            printf("  %3d %-14s %5.1f GB/s %9.0f %9.1f %10.1f %9.1f %8.0f%%\n", i + 1, r->desc, r->triad,
                   r->bytes / 1e6, r->tok_s, 1e3 / r->tok_s, gbs, 100 * gbs / r->triad);
            fflush(stdout);
        }
    double med[NDT];
    for (int d = 0; d < NDT; d++) {
        double v[MAX_REPS];
        for (int i = 0; i < reps; i++) v[i] = all[d][i].tok_s;
        med[d] = median(v, reps);
    }
    static const double target[NDT] = {0, 1.7, 2.5};
    printf("  medians: bf16 %.1f tok/s", med[0]);
    for (int d = 1; d < NDT; d++) printf(", %s %.1f tok/s", all[d][0].desc, med[d]);
    printf("\n");
    for (int d = 1; d < NDT; d++)
        printf("  decode %s / bf16: %.2fx tok/s (bytes per token %.2fx fewer; target >= %.1fx: %s)\n",
               all[d][0].desc, med[d] / med[0], all[0][0].bytes / all[d][0].bytes, target[d],
               med[d] / med[0] >= target[d] ? "met" : "NOT met");
    printf("pail_decode_tok_s bf16 %.2f q8_0 %.2f q4_k %.2f\n", med[0], med[1], med[2]);  // for scripts
    free(lora);
    if (rank) lora_layout_free(&lay);
}

// ---- policy ----
static void policy(const ModelConfig *cfg, int nseq, int seqlen, int iters) {
    PailErr err = {0};
    enum { RANK = 16 };
    int T = nseq * seqlen, V = cfg->vocab_size, nsel = 0;
    LoraLayout lay;
    float *lora;
    lora_build(&lay, &lora, cfg, RANK);
    ModelWeights w[2];
    Transformer *tf[2];
    static const DType pw[2] = {DT_BF16, DT_Q4_K};
    char desc[2][MODEL_DTYPE_DESC];
    TransformerPlan plan = {.max_tokens = T, .backward = true, .lora_rank = RANK};
    for (int d = 0; d < 2; d++) {
        weights_alloc(&w[d], cfg, pw[d]);
        weights_fill(&w[d], 11);
        model_weights_dtype_desc(&w[d], desc[d], sizeof desc[d]);
        if (transformer_init(&tf[d], &w[d], &plan, &err) < 0) die("transformer_init (policy)", &err);
        if (transformer_set_lora(tf[d], &lay, lora, &err) < 0) die("transformer_set_lora", &err);
    }
    int *tok = bench_malloc((size_t)T * sizeof(int)), *pos = bench_malloc((size_t)T * sizeof(int)),
        *tgt = bench_malloc((size_t)T * sizeof(int)), *cu = bench_malloc((size_t)(nseq + 1) * sizeof(int));
    float *logp = bench_malloc((size_t)T * 4), *dlogp = bench_malloc((size_t)T * 4),
          *grads = bench_malloc((size_t)lay.n_params * 4);
    for (int s = 0; s <= nseq; s++) cu[s] = s * seqlen;
    for (int t = 0; t < T; t++) tok[t] = (int)(((unsigned)t * 2654435761u >> 7) % (unsigned)V), pos[t] = t % seqlen;
    for (int t = 0; t < T; t++) {
        tgt[t] = pos[t] + 1 < seqlen ? tok[t + 1] : -1;
        dlogp[t] = tgt[t] >= 0;
        nsel += tgt[t] >= 0;
    }
    printf("\npolicy: GRPO step, forward + backward to LoRA rank %d on all 7 projections (frozen base), %d x %d "
           "tokens packed (T=%d, %d targets), the base as bf16 and as %s, alternating, best of %d after a warm-up\n",
           RANK, nseq, seqlen, T, nsel, desc[1], iters);
    printf("  GEMM paths at T=%d: bf16 %s, q4_k %s, q5_0 %s\n", T, matmul_path_name(T, DT_BF16),
           matmul_path_name(T, DT_Q4_K), matmul_path_name(T, DT_Q5_0));
    double best[2] = {INFINITY, INFINITY}, bf[2] = {0}, bb[2] = {0};
    for (int it = -1; it < iters; it++)
        for (int d = 0; d < 2; d++) {
            memset(grads, 0, (size_t)lay.n_params * 4);
            double t0 = bench_now();
            if (transformer_forward(tf[d], logp, NULL, tok, pos, cu, nseq, T, tgt, 1.0f, &err) < 0)
                die("forward", &err);
            double t1 = bench_now();
            if (transformer_backward(tf[d], grads, NULL, dlogp, &err) < 0) die("backward", &err);
            double t2 = bench_now();
            if (it >= 0 && t2 - t0 < best[d]) best[d] = t2 - t0, bf[d] = t1 - t0, bb[d] = t2 - t1;
            if (it == iters - 1) {
                double gn = 0;
                for (int64_t i = 0; i < lay.n_params; i++) gn += (double)grads[i] * grads[i];
                if (!(isfinite(gn) && gn > 0)) {
                    fprintf(stderr, "bench_model_quant: policy %s: LoRA gradient not finite and non-zero\n", desc[d]);
                    exit(1);
                }
            }
            printf("  %s iteration %d: %.2f s\n", desc[d], it + 1, t2 - t0);
            fflush(stdout);
        }
    for (int d = 0; d < 2; d++)
        printf("  base %-14s forward %.2f s, backward %.2f s, step %.2f s: %.0f tok/s\n", desc[d], bf[d], bb[d],
               best[d], T / best[d]);
    double ratio = best[0] / best[1];
    printf("  policy step %s / bf16: %.2fx tok/s (target >= 0.8x: %s)\n", desc[1], ratio,
           ratio >= 0.8 ? "met" : "NOT met");
    printf("pail_policy_tok_s bf16 %.1f q4_k %.1f\n", T / best[0], T / best[1]);
    free(tok), free(pos), free(tgt), free(cu), free(logp), free(dlogp), free(grads), free(lora);
    for (int d = 0; d < 2; d++) transformer_free(tf[d]), model_weights_free(&w[d]);
    lora_layout_free(&lay);
}

// ---- save-quantized: a checkpoint loaded with --quantize's rule and written
// back as its blocks (model_weights_save), the folder `grpo-ctl import-gguf`
// makes of a quantized GGUF: bench/dtype_memory.sh's q4_k case.
static int save_quantized(const char *model, const char *out, const char *q, const char *tok) {
    PailErr err = {0};
    int want;
    if (model_quantize_parse(q, &want) < 0 || want == MODEL_DTYPE_AUTO) {
        fprintf(stderr, "bench_model_quant: --quantize '%s': use q8_0 or q4_k\n", q);
        return 2;
    }
    ModelWeights w;
    double t0 = bench_now();
    if (model_weights_load_as(&w, model, want, &err) < 0) die(model, &err);
    double t1 = bench_now();
    ModelGenOptions opt = {.dtype = ST_DTYPE_BF16, .tokenizer_dir = tok};
    if (model_weights_save(&w, out, &opt, &err) < 0) die(out, &err);
    char desc[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(&w, desc, sizeof desc);
    printf("bench_model_quant: %s loaded with --quantize %s (%s, %.0f MB held; %.1f s), written as its blocks to %s "
           "(%.1f s)\n",
           model, q, desc, w.bytes / 1e6, t1 - t0, out, bench_now() - t1);
    model_weights_free(&w);
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_model_quant [decode] [policy] [--reps N (3)] [--steps N (32)] [--rank R (16)]\n"
                    "                         [--iters N (2)] [--seqs N (2)] [--seq-len N (64)]\n"
                    "                         [--shape qwen2.5-0.5b|smollm2-135m (qwen2.5-0.5b)]\n"
                    "       bench_model_quant save-quantized --model DIR --out DIR [--quantize q4_k|q8_0 (q4_k)]\n"
                    "                         [--tokenizer DIR]\n");
    exit(2);
}

int main(int argc, char **argv) {
    threads_policy_apply(argv);  // the executables' OpenMP wait policy (may start this program again)
    int reps = 3, steps = 32, rank = 16, iters = 2, nseq = 2, seqlen = 64, dec = 0, pol = 0, save = 0;
    const char *model = NULL, *out = NULL, *q = "q4_k", *tok = NULL, *shape = "qwen2.5-0.5b";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "decode")) dec = 1;
        else if (!strcmp(a, "save-quantized")) save = 1;
        else if (!strcmp(a, "--model") && v) model = v, i++;
        else if (!strcmp(a, "--out") && v) out = v, i++;
        else if (!strcmp(a, "--quantize") && v) q = v, i++;
        else if (!strcmp(a, "--tokenizer") && v) tok = v, i++;
        else if (!strcmp(a, "policy")) pol = 1;
        else if (!strcmp(a, "--reps") && v) reps = (int)int_arg(a, v, 1, MAX_REPS), i++;
        else if (!strcmp(a, "--steps") && v) steps = (int)int_arg(a, v, 1, 100000), i++;
        else if (!strcmp(a, "--rank") && v) rank = (int)int_arg(a, v, 0, 64), i++;
        else if (!strcmp(a, "--iters") && v) iters = (int)int_arg(a, v, 1, MAX_ITERS), i++;
        else if (!strcmp(a, "--seqs") && v) nseq = (int)int_arg(a, v, 1, 64), i++;
        else if (!strcmp(a, "--seq-len") && v) seqlen = (int)int_arg(a, v, 2, 4096), i++;
        else if (!strcmp(a, "--shape") && v) shape = v, i++;
        else usage();
    }
    if (save) {
        if (!model || !out || dec || pol) usage();
        return save_quantized(model, out, q, tok);
    }
    if (!dec && !pol) dec = pol = 1;
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    printf("bench_model_quant: load average %.2f (figures are only meaningful on an idle machine); dtype ISA %s\n%s\n",
           load, dtype_isa(), threads_policy_note());
    const char *why = validate();  // before this process starts OpenMP's threads: it forks
    if (why) {
        printf("bench_model_quant: SKIP: %s\n", why);
        return 0;
    }
    ModelConfig cfg;
    if (!strcmp(shape, "smollm2-135m")) {  // HuggingFaceTB/SmolLM2-135M-Instruct's config.json
        if (modelgen_shape(&cfg, "bench", MODEL_LLAMA) < 0) die("modelgen_shape bench", NULL);
        cfg.hidden_size = 576, cfg.num_hidden_layers = 30, cfg.num_attention_heads = 9, cfg.num_key_value_heads = 3;
        cfg.head_dim = 64, cfg.intermediate_size = 1536, cfg.vocab_size = 49152, cfg.tie_word_embeddings = true;
    } else if (strcmp(shape, "qwen2.5-0.5b") || modelgen_shape(&cfg, shape, MODEL_QWEN2) < 0) {
        usage();
    }
    DType b[PARAM_COUNT];
    model_dtypes_uniform(DT_BF16, b);
    printf("model: %s shape (C %d L %d H %d Hkv %d F %d V %d, tied), %.2f GB as bf16; %d threads\n", shape,
           cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
           cfg.intermediate_size, cfg.vocab_size, model_weights_bytes(&cfg, b) / 1e9, omp_get_max_threads());
    if (dec) decode(&cfg, reps, steps, rank);
    if (pol) policy(&cfg, nseq, seqlen, iters);
    return 0;
}
