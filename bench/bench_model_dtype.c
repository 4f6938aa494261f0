// bench_model_dtype: base weights held as bf16 against fp32 (issue 14) at the
// Qwen2.5-0.5B shape (C 896, L 24, H 14, Hkv 2, F 4864, V 151936, tied, q/k/v
// bias: 494M parameters, 1.98 GB in fp32, 0.99 GB in bf16, far beyond the
// caches): single-sequence decode with LoRA rank 16 on all seven projections,
// the effective weight GB/s against a STREAM triad run on the weights' own
// block before they are written. bench_model holds the bench-shape figures
// (policy step, batched decode) for both dtypes. Also `decode-logprobs`: a
// checkpoint's log-probs along the decode path (KV cache, one token a step),
// for validation/bench/dtype_logprobs.py. Not a test.
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "model/modelgen.h"
#include "model/transformer.h"
#include "refs.h"

enum { RANK = 16, PREFILL = 8, WARMUP = 2, MAX_REPS = 8, TRIAD_PASSES = 5 };

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "bench_model_dtype: %s: %s\n", what, err ? err->msg : "out of memory");
    exit(1);
}

static long int_arg(const char *flag, const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_model_dtype: %s %s: want an integer in [%ld, %ld]\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

// n values in dtype dt: Uniform(-a, a) drawn in fp32 per 16K-value chunk (the
// chunk's own seed, so the f32 and bf16 blocks hold the same draws, rounded in
// bf16), chunks over the OpenMP threads.
static void fill_dt(void *dst, DType dt, size_t n, float a, unsigned seed) {
    enum { CH = 1 << 14 };
    size_t nch = (n + CH - 1) / CH, esz = dtype_size(dt);
#pragma omp parallel
    {
        float *buf = dt == DT_F32 ? NULL : bench_malloc(CH * sizeof(float));
#pragma omp for schedule(static)
        for (size_t k = 0; k < nch; k++) {
            size_t m = n - k * CH < CH ? n - k * CH : CH;
            char *o = (char *)dst + k * CH * esz;
            // bench_fill_uniform's own parallel loop runs on this thread alone here (nested)
            bench_fill_uniform(buf ? buf : (float *)o, m, a, seed * 7919u + (unsigned)k);
            if (buf) dtype_from_f32(o, buf, dt, m);
        }
        free(buf);
    }
}

// Every family: matrices ~ std 0.02 in their dtype, biases std 0.02, norms 1.
static void weights_fill(ModelWeights *w) {
    int L = w->cfg.num_hidden_layers;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &w->specs[id];
        if (!s->present) continue;
        size_t n = s->numel * (s->per_layer ? L : 1);
        void *p = model_weights_tensor(w, (ModelParamId)id, 0);
        if (strstr(s->name, "norm")) {
            for (size_t i = 0; i < n; i++) ((float *)p)[i] = 1.0f;
        } else {
            fill_dt(p, w->dtype[id], n, 0.02f * sqrtf(3.0f), 11 + id);
        }
    }
}

// Bytes every decode step reads from the weight matrices, in their dtypes: the
// seven projections of each layer and the LM head (the tied embedding table,
// read whole by the head; the embedding lookup's one row is not counted).
static double matrix_bytes(const ModelWeights *w) {
    static const ModelParamId proj[] = {PARAM_WQ, PARAM_WK, PARAM_WV, PARAM_WO, PARAM_W_GATE, PARAM_W_UP,
                                        PARAM_W_DOWN};
    double b = 0;
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++)
        b += (double)w->specs[proj[i]].numel * w->cfg.num_hidden_layers * dtype_size(w->dtype[proj[i]]);
    return b + (double)w->cfg.vocab_size * w->cfg.hidden_size * dtype_size(w->dtype[PARAM_LM_HEAD]);
}

typedef struct {
    int threads, rep;
    DType dt;
    double triad, thp;         // GB/s on the weights' block; its huge-page fraction
    double tok_s, gbs, bytes;  // decode; effective weight GB/s; bytes read per token
} Rep;

// One repetition: a fresh weight block, the triad on it, the weights written
// into it, then PREFILL tokens and WARMUP + steps single-token steps (the
// WARMUP ones untimed) on one sequence at `threads` threads.
static void decode_rep(const ModelConfig *cfg, const LoraLayout *lay, const float *lora, DType dt, int threads,
                       int steps, Rep *r) {
    PailErr err = {0};
    DType dts[PARAM_COUNT];
    model_dtypes_uniform(dt, dts);
    ModelWeights w;
    int nmax = omp_get_max_threads();
    omp_set_num_threads(threads);
    if (model_weights_alloc_as(&w, cfg, dts, &err) < 0) die("model_weights_alloc_as", &err);
    r->triad = bench_triad_on(w.memory, w.bytes, TRIAD_PASSES);  // first touch of the block too
    r->thp = bench_thp_fraction(w.memory, w.bytes);
    omp_set_num_threads(nmax);
    weights_fill(&w);
    omp_set_num_threads(threads);
    Transformer *tf;
    TransformerPlan plan = {.max_tokens = PREFILL, .lora_rank = RANK};
    if (transformer_init(&tf, &w, &plan, &err) < 0) die("transformer_init", &err);
    if (transformer_set_lora(tf, lay, lora, &err) < 0) die("transformer_set_lora", &err);
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
    double t = bench_now() - t0;
    r->threads = threads, r->dt = dt;
    r->tok_s = steps / t;
    r->bytes = matrix_bytes(&w) + 4.0 * lay->n_params;
    r->gbs = r->bytes * r->tok_s / 1e9;
    free(logits);
    kvcache_free(kv);
    transformer_free(tf);
    model_weights_free(&w);
    omp_set_num_threads(nmax);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The bandwidth states of reps[0..n): two, split at the widest gap between the
// sorted triads when that gap is 1.2x or more (this VM's two states are ~45
// and ~80 GB/s: 1.7x; noise on a busy machine spreads one state by less), else
// one. Returns the triad at or above which a rep is in the high state (+inf:
// one state).
static double state_split(const Rep *reps, int n) {
    double t[2 * MAX_REPS];
    for (int i = 0; i < n; i++) t[i] = reps[i].triad;
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    if (n < 2) return INFINITY;
    int at = 1;
    for (int i = 1; i < n; i++)
        if (t[i] / t[i - 1] > t[at] / t[at - 1]) at = i;
    return t[at] >= 1.2 * t[at - 1] ? t[at] : INFINITY;
}

static void state_summary(const Rep *reps, int n, int threads) {
    double split = state_split(reps, n);
    for (int st = 0; st < (isinf(split) ? 1 : 2); st++) {
        double lo = INFINITY, hi = 0, tok[2] = {0}, pct[2] = {0}, pmin[2] = {INFINITY, INFINITY}, pmax[2] = {0};
        int cnt[2] = {0};
        for (int i = 0; i < n; i++) {
            if ((reps[i].triad >= split) != st) continue;
            int d = reps[i].dt == DT_BF16;
            double p = 100 * reps[i].gbs / reps[i].triad;
            lo = fmin(lo, reps[i].triad), hi = fmax(hi, reps[i].triad);
            tok[d] += reps[i].tok_s, pct[d] += p, cnt[d]++;
            pmin[d] = fmin(pmin[d], p), pmax[d] = fmax(pmax[d], p);
        }
        printf("  %d thread%s, %s state (triad %.1f-%.1f GB/s):", threads, threads > 1 ? "s" : "",
               isinf(split) ? "one" : st ? "high" : "low", lo, hi);
        for (int d = 0; d < 2; d++)
            if (cnt[d])
                printf(" %s %.1f tok/s, %.0f%% of triad (%.0f-%.0f%%, %d reps);", d ? "bf16" : "f32",
                       tok[d] / cnt[d], pct[d] / cnt[d], pmin[d], pmax[d], cnt[d]);
        printf(" (target >= 85%% of triad)\n");
        if (cnt[0] && cnt[1])
            printf("    bf16 / f32 tok/s in this state: %.2fx (target >= 1.8x)\n",
                   (tok[1] / cnt[1]) / (tok[0] / cnt[0]));
        else
            printf("    bf16 / f32 tok/s: no pair in this state (only one dtype landed in it)\n");
    }
}

static void decode_dtype(int reps, int steps) {
    PailErr err = {0};
    ModelConfig cfg;
    if (modelgen_shape(&cfg, "qwen2.5-0.5b", MODEL_QWEN2) < 0) die("modelgen_shape qwen2.5-0.5b", NULL);
    LoraConfig lc = {.rank = RANK, .alpha = 32, .targets = LORA_TARGETS_ALL};
    LoraLayout lay;
    if (lora_layout_build(&lay, &cfg, &lc, &err) < 0) die("lora_layout_build", &err);
    float *lora = bench_malloc((size_t)lay.n_params * sizeof(float));
    lora_init(&lay, lora, 3);
    for (int l = 0; l < cfg.num_hidden_layers; l++)
        for (int mod = 0; mod < LORA_NMOD; mod++) {  // B non-zero: B = 0 would make LoRA free
            const LoraSlot *s = lora_slot(&lay, l, mod);
            if (!s) continue;  // a module this model has not
            bench_fill_uniform(lora + s->b_off, (size_t)s->n_exp * s->out * RANK, 0.01f, 100 + l * 8 + mod);
        }
    DType f32[PARAM_COUNT], bf16[PARAM_COUNT];
    model_dtypes_uniform(DT_F32, f32), model_dtypes_uniform(DT_BF16, bf16);
    int nmax = omp_get_max_threads();
    printf("\ndecode-dtype: one sequence at the qwen2.5-0.5b shape (C %d L %d H %d Hkv %d F %d V %d, tied), "
           "weights %.2f GB as f32, %.2f GB as bf16; LoRA rank %d on all 7 projections (%.2fM fp32 params)\n",
           cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
           cfg.intermediate_size, cfg.vocab_size, model_weights_bytes(&cfg, f32) / 1e9,
           model_weights_bytes(&cfg, bf16) / 1e9, RANK, lay.n_params / 1e6);
    printf("  per repetition: a fresh weight block, a STREAM triad (best of %d) over three arrays carved from that "
           "block at the decode's thread count, then the weights written into it; prefill %d, %d untimed + %d timed "
           "single-token transformer_extend steps. Effective GB/s = (matrix bytes in their dtype + fp32 LoRA) per "
           "token x tok/s (KV cache and the embedding row not counted: < 1 MB). f32 and bf16 alternate.\n",
           TRIAD_PASSES, PREFILL, WARMUP, steps);
    printf("  kernels: dtype ISA %s, mat-vec path %s (bf16) / %s (f32)\n", dtype_isa(), matmul_path_name(1, DT_BF16),
           matmul_path_name(1, DT_F32));
    printf("  %7s %3s %5s %10s %5s %9s %9s %9s %9s\n", "threads", "rep", "dtype", "triad", "THP", "tok/s",
           "ms/token", "eff GB/s", "of triad");
    int counts[2] = {1, nmax > 1 ? nmax : 0};
    Rep all[2][2 * MAX_REPS];
    for (int ti = 0; ti < 2; ti++) {
        if (!counts[ti]) continue;
        for (int i = 0; i < 2 * reps; i++) {
            Rep *r = &all[ti][i];
            decode_rep(&cfg, &lay, lora, i % 2 ? DT_BF16 : DT_F32, counts[ti], steps, r);
            r->rep = i / 2 + 1;
            printf("  %7d %3d %5s %5.1f GB/s %4.0f%% %9.1f %9.1f %9.1f %8.0f%%\n", r->threads, r->rep,
                   dtype_name(r->dt), r->triad, 100 * r->thp, r->tok_s, 1e3 / r->tok_s, r->gbs,
                   100 * r->gbs / r->triad);
            fflush(stdout);
        }
    }
    printf("  bytes per token: f32 %.3f GB, bf16 %.3f GB (LoRA %.1f MB of each)\n", all[0][0].bytes / 1e9,
           all[0][1].bytes / 1e9, 4.0 * lay.n_params / 1e6);
    for (int ti = 0; ti < 2; ti++)
        if (counts[ti]) state_summary(all[ti], 2 * reps, counts[ti]);
    free(lora);
    lora_layout_free(&lay);
}

// ---- decode-logprobs: log p(ids[t] | ids[<t]) for t >= prefill, every
// sequence in its own KvCache slot, prefill one call, then one token per slot
// a step (the rollout path), weights held as the checkpoint stores them.
static void decode_logprobs(const char *dir, const char *input, int prefill) {
    PailErr err = {0};
    ModelWeights w;
    if (model_weights_load_as(&w, dir, MODEL_DTYPE_AUTO, &err) < 0) die("load model", &err);
    char desc[32];
    model_weights_dtype_desc(&w, desc, sizeof desc);
    fprintf(stderr, "bench_model_dtype decode-logprobs: %s, weights held as %s\n", dir, desc);
    FILE *f = fopen(input, "r");
    if (!f) die(input, NULL);
    enum { MAXSEQ = 64 };
    int *ids[MAXSEQ], len[MAXSEQ], nseq = 0, maxlen = 0, V = w.cfg.vocab_size;
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr), *a = j ? json_object_get(j, "ids") : NULL;
        if (!json_is_array(a) || nseq == MAXSEQ) {
            fprintf(stderr, "bench_model_dtype: %s:%d: want {\"ids\": [...]} (at most %d lines)\n", input, nseq + 1,
                    MAXSEQ);
            exit(1);
        }
        len[nseq] = (int)json_array_size(a);
        if (len[nseq] <= prefill) {
            fprintf(stderr, "bench_model_dtype: %s:%d: %d ids, want more than --prefill %d\n", input, nseq + 1,
                    len[nseq], prefill);
            exit(1);
        }
        ids[nseq] = bench_malloc((size_t)len[nseq] * sizeof(int));
        for (int i = 0; i < len[nseq]; i++) {
            json_t *v = json_array_get(a, (size_t)i);
            ids[nseq][i] = (int)json_integer_value(v);
            if (!json_is_integer(v) || ids[nseq][i] < 0 || ids[nseq][i] >= V) {
                fprintf(stderr, "bench_model_dtype: %s:%d: ids[%d] is not a token id below %d\n", input, nseq + 1,
                        i, V);
                exit(1);
            }
        }
        maxlen = len[nseq] > maxlen ? len[nseq] : maxlen;
        nseq++;
        json_decref(j);
    }
    fclose(f);
    Transformer *tf;
    TransformerPlan plan = {.max_tokens = nseq * prefill};
    if (transformer_init(&tf, &w, &plan, &err) < 0) die("transformer_init", &err);
    KvCache *kv;
    if (kvcache_init(&kv, &w.cfg, nseq, maxlen, DT_F32, &err) < 0) die("kvcache_init", &err);
    int *tok = bench_malloc((size_t)nseq * prefill * sizeof(int)), n_new[MAXSEQ];
    float *logits = bench_malloc((size_t)nseq * V * sizeof(float));
    double *lp[MAXSEQ];
    for (int s = 0; s < nseq; s++) {
        memcpy(tok + s * prefill, ids[s], (size_t)prefill * sizeof(int));
        n_new[s] = prefill;
        lp[s] = bench_malloc((size_t)len[s] * sizeof(double));
    }
    for (int p = prefill; p <= maxlen; p++) {  // this call's logits predict ids[s][p]
        if (transformer_extend(tf, kv, logits, n_new, tok, &err) < 0) die("transformer_extend", &err);
        int row = 0, nt = 0;
        for (int s = 0; s < nseq; s++) {
            if (!n_new[s]) continue;
            const float *z = logits + (size_t)row++ * V;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < V; j++) mx = fmax(mx, z[j]);
            for (int j = 0; j < V; j++) sum += exp(z[j] - mx);
            lp[s][p] = z[ids[s][p]] - mx - log(sum);
        }
        for (int s = 0; s < nseq; s++) {
            n_new[s] = p + 1 < len[s];
            if (n_new[s]) tok[nt++] = ids[s][p];
        }
        if (!nt) break;
    }
    for (int s = 0; s < nseq; s++) {
        printf("{\"from\": %d, \"logprobs\": [", prefill);
        for (int p = prefill; p < len[s]; p++) printf("%s%.9g", p > prefill ? ", " : "", lp[s][p]);
        printf("]}\n");
        free(lp[s]), free(ids[s]);
    }
    free(tok), free(logits);
    kvcache_free(kv);
    transformer_free(tf);
    model_weights_free(&w);
}

static void usage(void) {
    fprintf(stderr, "usage: bench_model_dtype [decode-dtype] [--reps N (3)] [--steps N (32)]\n"
                    "       bench_model_dtype decode-logprobs --model DIR --input FILE.jsonl [--prefill N (16)]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int reps = 3, steps = 32, prefill = 16, lp = 0;
    const char *model = NULL, *input = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "decode-dtype")) continue;
        else if (!strcmp(a, "decode-logprobs")) lp = 1;
        else if (!strcmp(a, "--reps") && v) reps = (int)int_arg(a, v, 1, MAX_REPS), i++;
        else if (!strcmp(a, "--steps") && v) steps = (int)int_arg(a, v, 1, 100000), i++;
        else if (!strcmp(a, "--prefill") && v) prefill = (int)int_arg(a, v, 1, 4096), i++;
        else if (!strcmp(a, "--model") && v) model = v, i++;
        else if (!strcmp(a, "--input") && v) input = v, i++;
        else usage();
    }
    if (lp) {
        if (!model || !input) usage();
        decode_logprobs(model, input, prefill);
        return 0;
    }
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    printf("bench_model_dtype: %d threads, load average %.2f (figures are only meaningful on an idle machine)\n",
           omp_get_max_threads(), load);
    decode_dtype(reps, steps);
    return 0;
}
