// The memory plan (see memplan.h). Every figure is what the tools allocate,
// computed the way they size it: model_params_count for the base weights,
// the LoRA layout for the adapter, transformer_plan_bytes (the planner's dry
// pass) for activations, the KV cache's (L, slots, ctx, Hkv, D) pair in its dtype.
#include "model/memplan.h"
#include "kernels.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lora/lora.h"
#include "model/transformer.h"
#include "model/weights.h"

int memplan_build(MemoryPlan *p, const ModelConfig *cfg, const MemoryPlanSpec *spec, const char *device, PailErr *err) {
    memset(p, 0, sizeof *p);
    p->spec = *spec;
    if (spec->weights_dtype) {  // a copy: trainer_memplan's is a local array, printed after it returns
        snprintf(p->weights_dtype, sizeof p->weights_dtype, "%s", spec->weights_dtype);
        p->spec.weights_dtype = p->weights_dtype;
    }
    snprintf(p->device, sizeof p->device, "%s", device ? device : "cpu");
    p->n_weights = model_params_count(cfg);
    DType dt = DT_F32;
    if (spec->weights_dtype && dtype_parse(spec->weights_dtype, &dt) < 0) dt = DT_F32;  // a mix: bytes are given
    DType dts[PARAM_COUNT];
    model_dtypes_uniform(dt, dts);
    p->weights = spec->weights_bytes ? spec->weights_bytes : model_weights_bytes(cfg, dts);
    if (spec->lora_rank > 0) {
        LoraLayout lay;
        LoraConfig lc = {.rank = spec->lora_rank, .alpha = 1, .targets = spec->lora_targets};
        if (lora_layout_build(&lay, cfg, &lc, err) < 0) return -1;
        p->n_lora = (size_t)lay.n_params;
        lora_layout_free(&lay);
    }
    size_t T = (size_t)(spec->token_budget > 0 ? spec->token_budget : 1), V = (size_t)cfg->vocab_size;
    TransformerPlan tp = {.max_tokens = (int)T, .lora_rank = spec->lora_rank};
    switch (spec->role) {
    case MEMPLAN_TRAIN:
        // params, grads, m, v (fp32); full fine-tuning: grads and moments of every weight. The
        // workspace (packed row, step arrays) is the tool's own block: it gives it (memplan_set_own)
        p->lora = 4 * p->n_lora * sizeof(float);
        if (spec->full) p->lora += 3 * p->n_weights * sizeof(float);
        tp.backward = true, tp.recompute = spec->recompute, tp.full = spec->full;
        break;
    case MEMPLAN_ROLLOUT:
        p->lora = p->n_lora * sizeof(float);
        p->kv_slots = spec->batch_size + 1;
        p->kv_ctx = (spec->max_ctx + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK;  // whole blocks (kvcache_init_on)
        // a block pool (generate.c generator_full_blocks): every slot at max_ctx plus the prompts' partial
        // last blocks; or --kv-memory's. Episodes keep every slot at max_ctx (episode.c)
        p->kv_block_bytes = kvcache_block_bytes(cfg, spec->kv_dtype);
        p->kv_full_blocks = p->kv_slots * (p->kv_ctx / KV_BLOCK + (spec->kv_episodes ? 0 : 1));
        size_t asked = spec->kv_memory / p->kv_block_bytes;  // past 2^31 blocks: kvcache_init_on refuses it
        p->kv_blocks = spec->kv_memory && !spec->kv_episodes ? (int)(asked < INT32_MAX ? asked : INT32_MAX)
                                                             : p->kv_full_blocks;
        p->kv_cache = (size_t)p->kv_blocks * p->kv_block_bytes;
        // the generator's logits (decode and prompt slots + the staged prompt), the run's completions (ids and log-probs),
        // and each thread's sampler scratch (probabilities and indices over V)
        p->workspace = ((size_t)(spec->kv_episodes ? p->kv_slots : 2 * spec->batch_size + 1) + 1) * V * sizeof(float) +
                       (size_t)spec->groups_per_step * spec->group_size * spec->max_new_tokens *
                           (sizeof(int32_t) + sizeof(float)) +
                       (size_t)(spec->threads > 0 ? spec->threads + 1 : 2) * V * (sizeof(float) + sizeof(int));
        break;
    case MEMPLAN_FORWARD:
        p->lora = p->n_lora * sizeof(float);
        p->workspace = T * (4 * sizeof(int) + sizeof(float));
        break;
    }
    p->activations = transformer_plan_bytes(cfg, &tp);
    p->total = p->weights + p->lora + p->activations + p->kv_cache + p->workspace;
    return 0;
}

void memplan_fit_kv(MemoryPlan *p, size_t limit) {
    if (p->spec.role != MEMPLAN_ROLLOUT || p->spec.kv_memory || p->spec.kv_episodes) return;
    if (!limit) limit = memplan_available();
    if (!limit || p->total <= limit) return;
    size_t rest = p->total - p->kv_cache, left = limit > rest ? (limit - rest) / p->kv_block_bytes : 0;
    if (left >= (size_t)p->kv_blocks) return;
    p->kv_blocks = (int)left;
    p->kv_cache = left * p->kv_block_bytes;
    p->total = rest + p->kv_cache;
}

void memplan_set_own(MemoryPlan *p, size_t own) {
    p->workspace = own > p->lora ? own - p->lora : 0;
    p->total = p->weights + p->lora + p->activations + p->kv_cache + p->workspace;
}

static const char *human(size_t b, char *buf, size_t cap) {
    if (b >= (size_t)1 << 30) snprintf(buf, cap, "%.2f GiB", (double)b / (1 << 30));
    else snprintf(buf, cap, "%.1f MiB", (double)b / (1 << 20));
    return buf;
}

void memplan_print(FILE *f, const MemoryPlan *p, const char *tool) {
    char a[32];
    const MemoryPlanSpec *s = &p->spec;
    fprintf(f, "%s: memory plan on %s\n", tool, p->device);
    fprintf(f, "  weights      %10s  %zu parameters, %s\n", human(p->weights, a, sizeof a), p->n_weights,
            s->weights_dtype ? s->weights_dtype : "f32");
    // the adapter file as published (fp32) and a rank's share: an MoE's expert adapters are E times a dense MLP's
    char af[32], ar[32], adapter[96] = "";
    if (p->n_lora && s->lora_rank > 0 && !s->full)
        snprintf(adapter, sizeof adapter, "; the adapter file %s, %s a rank", human(p->n_lora * 4, af, sizeof af),
                 human(p->n_lora * 4 / (size_t)s->lora_rank, ar, sizeof ar));
    if (s->role == MEMPLAN_TRAIN)
        fprintf(f, "  LoRA + AdamW %10s  %zu parameters (rank %d): params, grads, m, v in fp32%s%s\n",
                human(p->lora, a, sizeof a), p->n_lora, s->lora_rank, s->full ? "; full: grads, m, v of every weight" : "",
                adapter);
    else if (p->n_lora)
        fprintf(f, "  LoRA         %10s  %zu parameters (rank %d), fp32%s\n", human(p->lora, a, sizeof a), p->n_lora,
                s->lora_rank, adapter);
    fprintf(f, "  activations  %10s  %d tokens%s, fp32\n", human(p->activations, a, sizeof a), s->token_budget,
            s->role != MEMPLAN_TRAIN ? "" : s->recompute ? ", layer inputs only (--recompute)" : ", every layer saved");
    if (p->kv_cache && s->kv_episodes)
        fprintf(f, "  KV cache     %10s  %d slots x %d tokens, %s\n", human(p->kv_cache, a, sizeof a), p->kv_slots,
                p->kv_ctx, dtype_name(s->kv_dtype));
    else if (s->role == MEMPLAN_ROLLOUT)
        fprintf(f, "  KV cache     %10s  %d blocks of %d tokens, %s (%s; the full pool: %d, %d slots x %d tokens)\n",
                human(p->kv_cache, a, sizeof a), p->kv_blocks, KV_BLOCK, dtype_name(s->kv_dtype),
                s->kv_memory ? "--kv-memory" : p->kv_blocks < p->kv_full_blocks ? "what the limit leaves" : "full",
                p->kv_full_blocks, p->kv_slots, p->kv_ctx);
    fprintf(f, "  workspace    %10s  %s\n", human(p->workspace, a, sizeof a),
            s->role == MEMPLAN_ROLLOUT ? "logits of every slot" : "packed batch and step arrays");
    fprintf(f, "  total        %10s\n", human(p->total, a, sizeof a));
}

size_t memplan_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

static const char *hint_of(const MemoryPlan *p) {
    return p->spec.role == MEMPLAN_TRAIN ? (p->spec.recompute ? "lower --token-budget or --lora-rank"
                                                              : "add --recompute, or lower --token-budget or --lora-rank")
           : p->spec.role == MEMPLAN_ROLLOUT && p->spec.kv_memory && !p->spec.kv_episodes
               ? "lower --kv-memory, --batch-size, --max-prompt-tokens or --prefill-tokens"
           : p->spec.role == MEMPLAN_ROLLOUT ? "lower --batch-size, --max-new-tokens, --max-prompt-tokens or --prefill-tokens"
                                             : "lower --token-budget";
}

int memplan_oom(const MemoryPlan *p, PailErr *err) {
    char inner[sizeof err->msg], t[32], w[32], ac[32], lo[32], kv[32];
    snprintf(inner, sizeof inner, "%s", err->msg);
    return err_set(err, PAIL_ERR_NOMEM, "%s; the memory plan needs %s on %s (weights %s, adapter %s, activations %s, "
                   "KV cache %s): %s, or give the device more (--max-memory)", inner, human(p->total, t, sizeof t),
                   p->device, human(p->weights, w, sizeof w), human(p->lora, lo, sizeof lo),
                   human(p->activations, ac, sizeof ac), human(p->kv_cache, kv, sizeof kv), hint_of(p));
}

int memplan_check(const MemoryPlan *p, size_t limit, PailErr *err) {
    bool flag = limit > 0;
    if (!limit) limit = memplan_available();
    if (!limit || p->total <= limit) return 0;
    char t[32], l[32], w[32], ac[32], kv[32], lo[32];
    const char *hint = hint_of(p);
    return err_set(err, PAIL_ERR_NOMEM,
                   "memory plan needs %s on %s but %s%s%s (weights %s, adapter %s, activations %s, KV cache %s): %s",
                   human(p->total, t, sizeof t), p->device, flag ? "--max-memory is " : "", human(limit, l, sizeof l),
                   flag ? "" : " is available", human(p->weights, w, sizeof w), human(p->lora, lo, sizeof lo),
                   human(p->activations, ac, sizeof ac), human(p->kv_cache, kv, sizeof kv),
                   hint);
}

int memplan_parse_size(const char *s, size_t *out, PailErr *err) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    else if (*end == 'T' || *end == 't') mul = 1024.0 * 1024 * 1024 * 1024, end++;
    if (*end == 'i' || *end == 'B') end += *end == 'i' && end[1] == 'B' ? 2 : 1;
    if (end == s || *end || !(v > 0) || !isfinite(v * mul))
        return err_set(err, PAIL_ERR_INVALID, "'%s' is not a memory size (e.g. 24G, 512M, or bytes)", s);
    *out = (size_t)(v * mul);
    return 0;
}
