// bench_moe: how close a mixture of experts gets to its active size on the CPU.
// Two random bf16 models of the same active parameters a token: granitemoe at
// the granite-3.1-1b-a400m shape (C 1024, L 24, E 32, K 8, Fe 512: 1.3B
// parameters, ~0.4B active) and a dense granite of the same C, L, heads and
// vocabulary with F = K Fe = 4096 (the experts a token runs, as one MLP). For
// each: batch-1 decode and batched decode (tokens/s, the paged KV cache), and
// the policy step (forward + backward to LoRA rank 16 on attention and the
// MLP: the experts on the MoE), then MoE / dense. The dense model is the
// reference measured in the same run: the MoE reads only its chosen experts'
// weights at batch 1, but a batch of tokens touches most experts (more bytes
// than the dense model's), and its grouped products are smaller GEMMs.
// Knobs: BENCH_MOE_LAYERS (24) to shorten both models alike. Not a test.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/modelgen.h"
#include "model/transformer.h"
#include "refs.h"

enum { RANK = 16, PREFILL = 32, STEPS1 = 32, BATCH = 32, STEPSB = 16, NSEQ = 4, SEQ = 256, TP = NSEQ * SEQ };

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "bench_moe: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

typedef struct {
    const char *name;
    ModelWeights w;
    LoraLayout lay;
    float *lora;
} Model;

// Random bf16 weights (uniform, std 0.02; norms 1), LoRA with PEFT's A and a non-zero B.
static void build(Model *m, const ModelConfig *cfg) {
    PailErr err = {0};
    DType bf16[PARAM_COUNT];
    model_dtypes_uniform(DT_BF16, bf16);
    if (model_weights_alloc_as(&m->w, cfg, bf16, &err) < 0) die("model_weights_alloc_as", &err);
    const ModelConfig *c = &m->w.cfg;
    int L = c->num_hidden_layers;
    size_t chunk = (size_t)1 << 22;
    float *tmp = bench_malloc(chunk * sizeof(float));
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &m->w.specs[id];
        if (!s->present) continue;
        size_t n = s->numel * (s->per_layer ? L : 1);
        char *dst = model_weights_tensor(&m->w, (ModelParamId)id, 0);
        DType dt = m->w.dtype[id];
        bool norm = strstr(s->name, "norm") != NULL;
        for (size_t i = 0; i < n; i += chunk) {
            size_t k = n - i < chunk ? n - i : chunk;
            if (norm)
                for (size_t j = 0; j < k; j++) tmp[j] = 1.0f;
            else
                bench_fill_uniform(tmp, k, 0.02f * sqrtf(3.0f), 17 + id * 1000 + (unsigned)(i / chunk));
            if (dt == DT_F32) memcpy(dst + i * sizeof(float), tmp, k * sizeof(float));
            else dtype_from_f32(dst + i * dtype_size(dt), tmp, dt, k);
        }
    }
    free(tmp);
    LoraConfig lc = {.rank = RANK, .alpha = 32, .targets = LORA_TARGETS_ALL};
    if (lora_layout_build(&m->lay, c, &lc, &err) < 0) die("lora_layout_build", &err);
    m->lora = bench_malloc((size_t)m->lay.n_params * sizeof(float));
    lora_init(&m->lay, m->lora, 3);
    for (int l = 0; l < L; l++)
        for (int mod = 0; mod < LORA_NMOD; mod++) {
            const LoraSlot *s = lora_slot(&m->lay, l, mod);
            if (!s) continue;
            bench_fill_uniform(m->lora + s->b_off, (size_t)s->n_exp * s->out * RANK, 0.01f, 100 + l * 16 + mod);
        }
}

static Transformer *open_tf(Model *m, int max_tokens, bool backward) {
    PailErr err = {0};
    Transformer *tf;
    TransformerPlan plan = {.max_tokens = max_tokens, .lora_rank = RANK, .backward = backward, .recompute = backward};
    if (transformer_init(&tf, &m->w, &plan, &err) < 0) die("transformer_init", &err);
    if (transformer_set_lora(tf, &m->lay, m->lora, &err) < 0) die("transformer_set_lora", &err);
    return tf;
}

// n sequences: a PREFILL-token prompt each, then `steps` one-token steps; decode tokens/s.
static double decode_rate(Model *m, int n, int steps) {
    PailErr err = {0};
    int V = m->w.cfg.vocab_size;
    Transformer *tf = open_tf(m, n * PREFILL, false);
    KvCache *kv;
    if (kvcache_init(&kv, &m->w.cfg, n, PREFILL + steps, DT_F16, &err) < 0) die("kvcache", &err);
    int *n_new = bench_malloc((size_t)n * sizeof(int)), *tok = bench_malloc((size_t)n * PREFILL * sizeof(int));
    float *logits = bench_malloc((size_t)n * V * sizeof(float));
    for (int s = 0; s < n; s++) n_new[s] = PREFILL;
    for (int i = 0; i < n * PREFILL; i++) tok[i] = (i * 7919 + 5) % V;
    if (transformer_extend(tf, kv, logits, n_new, tok, &err) < 0) die("prefill", &err);
    for (int s = 0; s < n; s++) n_new[s] = 1;
    double t0 = bench_now();
    for (int st = 0; st < steps; st++) {
        for (int s = 0; s < n; s++) tok[s] = (st * 7919 + s * 104729) % V;
        if (transformer_extend(tf, kv, logits, n_new, tok, &err) < 0) die("decode", &err);
    }
    double t = bench_now() - t0;
    kvcache_free(kv);
    transformer_free(tf);
    free(n_new), free(tok), free(logits);
    return (double)n * steps / t;
}

// Forward + backward to LoRA over NSEQ x SEQ packed tokens (recomputing each layer's
// activations, as the trainer's auto budget does at this size); tokens/s, best of 2.
static double policy_rate(Model *m) {
    PailErr err = {0};
    int V = m->w.cfg.vocab_size, cu[NSEQ + 1];
    Transformer *tf = open_tf(m, TP, true);
    int *tok = bench_malloc(TP * sizeof(int)), *pos = bench_malloc(TP * sizeof(int)),
        *tgt = bench_malloc(TP * sizeof(int));
    float *logp = bench_malloc(TP * sizeof(float)), *dlogp = bench_malloc(TP * sizeof(float)),
          *g = bench_malloc((size_t)m->lay.n_params * sizeof(float));
    for (int s = 0; s <= NSEQ; s++) cu[s] = s * SEQ;
    for (int t = 0; t < TP; t++) tok[t] = (int)(((unsigned)t * 2654435761u >> 7) % (unsigned)V), pos[t] = t % SEQ;
    for (int t = 0; t < TP; t++) tgt[t] = pos[t] + 1 < SEQ ? tok[t + 1] : -1, dlogp[t] = tgt[t] >= 0;
    double best = 1e30;
    for (int it = 0; it < 2; it++) {
        memset(g, 0, (size_t)m->lay.n_params * sizeof(float));
        double t0 = bench_now();
        if (transformer_forward(tf, logp, NULL, tok, pos, cu, NSEQ, TP, tgt, 1.0f, &err) < 0) die("forward", &err);
        if (transformer_backward(tf, g, NULL, dlogp, &err) < 0) die("backward", &err);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    double gn = 0;
    for (int64_t i = 0; i < m->lay.n_params; i++) gn += (double)g[i] * g[i];
    if (!(gn > 0) || !isfinite(gn)) die("policy: the LoRA gradient is zero or not finite", NULL);
    transformer_free(tf);
    free(tok), free(pos), free(tgt), free(logp), free(dlogp), free(g);
    return TP / best;
}

static double active_params(const ModelConfig *c) {
    double C = c->hidden_size, HD = (double)c->num_attention_heads * c->head_dim,
           KD = (double)c->num_key_value_heads * c->head_dim, mlp;
    if (model_is_moe(c))
        mlp = (double)c->num_experts_per_tok * 3 * C * c->moe_intermediate_size + (double)c->num_experts * C;
    else
        mlp = 3 * C * c->intermediate_size;
    return c->num_hidden_layers * (2 * C * HD + 2 * C * KD + mlp) + (double)c->vocab_size * C;
}

int main(void) {
    ModelConfig moe, dense;
    if (modelgen_shape(&moe, "granite-3.1-1b-a400m", MODEL_GRANITEMOE) < 0) die("shape granite-3.1-1b-a400m", NULL);
    const char *ls = getenv("BENCH_MOE_LAYERS");
    if (ls && atoi(ls) > 0) moe.num_hidden_layers = atoi(ls);
    // the dense twin: granite with the K experts a token runs as one MLP
    dense = moe;
    model_config_defaults(&dense, MODEL_GRANITE);
    dense.hidden_size = moe.hidden_size, dense.num_hidden_layers = moe.num_hidden_layers;
    dense.num_attention_heads = moe.num_attention_heads, dense.num_key_value_heads = moe.num_key_value_heads;
    dense.head_dim = moe.head_dim, dense.vocab_size = moe.vocab_size;
    dense.intermediate_size = moe.num_experts_per_tok * moe.moe_intermediate_size;
    dense.num_experts = dense.num_experts_per_tok = dense.moe_intermediate_size = 0;
    dense.embedding_multiplier = moe.embedding_multiplier, dense.residual_multiplier = moe.residual_multiplier;
    dense.attention_multiplier = moe.attention_multiplier, dense.logits_scaling = moe.logits_scaling;
    dense.tie_word_embeddings = moe.tie_word_embeddings;
    Model m[2] = {{.name = "granitemoe"}, {.name = "dense"}};
    build(&m[0], &moe);
    build(&m[1], &dense);
    printf("granite-3.1-1b-a400m-shaped MoE (E %d, K %d, Fe %d, L %d) against a dense granite of F %d (same active "
           "parameters), bf16 weights, f16 KV cache, LoRA rank %d on attention and the MLP / experts\n",
           moe.num_experts, moe.num_experts_per_tok, moe.moe_intermediate_size, moe.num_hidden_layers,
           dense.intermediate_size, RANK);
    double r[2][3];
    for (int i = 0; i < 2; i++) {
        printf("  %-10s %.2fB parameters, %.3fB active a token\n", m[i].name, m[i].w.num_params / 1e9,
               active_params(&m[i].w.cfg) / 1e9);
        r[i][0] = decode_rate(&m[i], 1, STEPS1);
        r[i][1] = decode_rate(&m[i], BATCH, STEPSB);
        r[i][2] = policy_rate(&m[i]);
        printf("  %-10s decode batch 1 %.1f tok/s, batch %d %.1f tok/s, policy step (%d x %d tokens) %.1f tok/s\n",
               m[i].name, r[i][0], BATCH, r[i][1], NSEQ, SEQ, r[i][2]);
    }
    printf("MoE / dense of the same active size: decode batch 1 %.2fx, batch %d %.2fx, policy step %.2fx\n",
           r[0][0] / r[1][0], BATCH, r[0][1] / r[1][1], r[0][2] / r[1][2]);
    for (int i = 0; i < 2; i++) {
        lora_layout_free(&m[i].lay);
        free(m[i].lora);
        model_weights_free(&m[i].w);
    }
    return 0;
}
