// Continuous-batching group generation over KV-cache slots (see generate.h).
// Slots 0..B-1 decode; slot B stages the current prompt's prefill, from which
// samples are forked as decode slots free up. Buffers are planned once in
// generator_init (one block, the KV cache and the samplers' scratch).
#include "rollout/generate.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "core/mem.h"
#include "shard/shard.h"

typedef struct {
    bool active;
    int prompt, sample;   // which completion this slot is producing
    int32_t last;         // token to feed next
    Rng rng;
} Slot;

struct Generator {
    Transformer *tf;      // borrowed
    GenConfig cfg;
    int V, B;
    KvCache *kv;          // owned
    SamplerScratch ss;    // for the staged prompt's samples
    SamplerScratch *tss;  // (nthreads) one per OpenMP thread, for the batched decode step; a piece of block
    int nthreads;
    // Pieces of block (plan):
    Slot *slots;          // (B)
    float *logits;        // (B + 1, V)
    float *stage_logits;  // (V) the staged prompt's next-token logits
    int *n_new;           // (B + 1)
    int32_t *feed;        // (B + 1)
    int *act;             // (B) active slots of a decode step
    int32_t *tok;         // (B) their sampled tokens
    float *lp;            // (B) and log-probs
    int *freel;           // (B) free slots of an admission
    int32_t *pf_tokens;   // (prefill_tokens) the prompts of one batched prefill, concatenated
    int prefill_tokens;
    int32_t *out_ids;     // (max_prompts * G, max_new_tokens) the completions of a run
    float *out_lp;        // (max_prompts * G, max_new_tokens) their log-probs
    void *block;          // owned
    GenStats stats;
};

static void plan(Generator *g, MemPlan *p) {
    size_t B = (size_t)g->B, V = (size_t)g->V;
    size_t nout = (size_t)g->cfg.max_prompts * g->cfg.group_size * g->cfg.max_new_tokens;
    g->tss = mem_plan_take(p, (size_t)g->nthreads * sizeof *g->tss);
    g->slots = mem_plan_take(p, B * sizeof *g->slots);
    g->logits = mem_plan_take(p, (B + 1) * V * sizeof(float));
    g->stage_logits = mem_plan_take(p, V * sizeof(float));
    g->n_new = mem_plan_take(p, (B + 1) * sizeof(int));
    g->feed = mem_plan_take(p, (B + 1) * sizeof(int32_t));
    g->act = mem_plan_take(p, B * sizeof(int));
    g->tok = mem_plan_take(p, B * sizeof(int32_t));
    g->lp = mem_plan_take(p, B * sizeof(float));
    g->freel = mem_plan_take(p, B * sizeof(int));
    g->pf_tokens = mem_plan_take(p, (size_t)g->prefill_tokens * sizeof(int32_t));
    g->out_ids = mem_plan_take(p, nout * sizeof(int32_t));
    g->out_lp = mem_plan_take(p, nout * sizeof(float));
}

int generator_init(Generator **out, Transformer *tf, const ModelConfig *mc, const GenConfig *cfg, PailErr *err) {
    *out = NULL;
    if (cfg->group_size < 1 || cfg->batch_size < 1 || cfg->max_new_tokens < 1 || cfg->max_prompt_tokens < 1 ||
        cfg->max_prompts < 1)
        return err_set(err, PAIL_ERR_INVALID, "generator: group size, batch size, max new tokens, prompt length and "
                       "prompts per run must be >= 1");
    Generator *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, PAIL_ERR_NOMEM, "generator: out of memory");
    g->tf = tf;
    g->cfg = *cfg;
    g->V = mc->vocab_size;
    g->B = cfg->batch_size;
    g->nthreads = omp_get_max_threads();
    g->prefill_tokens = cfg->prefill_tokens > cfg->max_prompt_tokens ? cfg->prefill_tokens : cfg->max_prompt_tokens;
    int ctx = cfg->max_prompt_tokens + cfg->max_new_tokens;
    if (kvcache_init_on(&g->kv, transformer_backend(tf), mc, g->B + 1, ctx, err) < 0) {
        free(g);
        return -1;
    }
    MemPlan dry = {0};
    plan(g, &dry);
    if (!(g->block = mem_calloc_big(dry.used))) {
        generator_free(g);
        return err_set(err, PAIL_ERR_NOMEM, "generator: cannot allocate %zu MiB for %d slots and %d prompts x %d "
                       "completions of up to %d tokens", dry.used >> 20, cfg->batch_size, cfg->max_prompts,
                       cfg->group_size, cfg->max_new_tokens);
    }
    MemPlan real = {g->block, 0};
    plan(g, &real);
    bool scratch_ok = sampler_scratch_init(&g->ss, g->V) == 0;
    for (int i = 0; scratch_ok && i < g->nthreads; i++) scratch_ok = sampler_scratch_init(&g->tss[i], g->V) == 0;
    if (!scratch_ok) {
        generator_free(g);
        return err_set(err, PAIL_ERR_NOMEM, "generator: out of memory for the samplers' scratch (%d threads, "
                       "vocabulary %d)", omp_get_max_threads(), mc->vocab_size);
    }
    *out = g;
    return 0;
}

void generator_free(Generator *g) {
    if (!g) return;
    kvcache_free(g->kv);
    sampler_scratch_free(&g->ss);
    for (int i = 0; g->block && i < g->nthreads; i++) sampler_scratch_free(&g->tss[i]);
    free(g->block);
    free(g);
}

int generator_token_budget(int max_prompt_tokens, int batch_size, int prefill_tokens) {
    int t = max_prompt_tokens > batch_size ? max_prompt_tokens : batch_size;
    return prefill_tokens > t ? prefill_tokens : t;
}

GenStats generator_stats(const Generator *g) { return g->stats; }

// Appends a sampled token (c has room for max_new_tokens); returns true when
// the completion is finished.
static bool append(Generator *g, GenCompletion *c, int32_t tok, float lp) {
    c->ids[c->n] = tok;
    c->logprobs[c->n] = lp;
    c->n++;
    for (int k = 0; k < g->cfg.n_stop_ids; k++)
        if (tok == g->cfg.stop_ids[k]) { c->finish = FINISH_STOP; return true; }
    if (g->cfg.stop_fn && g->cfg.stop_fn(g->cfg.stop_ctx, c->ids, c->n)) { c->finish = FINISH_STOP; return true; }
    if (c->n >= g->cfg.max_new_tokens) { c->finish = FINISH_LENGTH; return true; }
    return false;
}

// Starts sample j of prompt p in free slot s from the next-token logits of
// its prompt, held in KV slot src (forked into s unless it is s). Returns true
// when the completion finished at its first token (s stays free).
static int start_sample(Generator *g, const GenPrompt *prompts, int p, int j, int s, int src, const float *logits,
                        GenCompletion *out, bool *finished, PailErr *err) {
    Slot *sl = &g->slots[s];
    rng_seed(&sl->rng, prompts[p].seed, (uint64_t)j);
    float lp;
    int32_t tok = (int32_t)sample_token(logits, &g->cfg.sampler, &sl->rng, &g->ss, &lp);
    *finished = append(g, &out[p * g->cfg.group_size + j], tok, lp);
    if (*finished) return 0;
    if (s != src && kvcache_fork(g->kv, s, src, err) < 0) return -1;
    sl->active = true;
    sl->prompt = p;
    sl->sample = j;
    sl->last = tok;
    return 0;
}

int generator_run(Generator *g, const GenPrompt *prompts, int P, GenCompletion *out, PailErr *err) {
    int G = g->cfg.group_size, B = g->B, S = B;  // S: the staging slot
    if (P > g->cfg.max_prompts)
        return err_set(err, PAIL_ERR_INVALID, "generator: %d prompts in one run, planned for %d", P, g->cfg.max_prompts);
    for (int p = 0; p < P; p++)
        if (prompts[p].n < 1 || prompts[p].n > g->cfg.max_prompt_tokens)
            return err_set(err, PAIL_ERR_INVALID, "prompt %d has %d tokens (1..%d accepted)", p, prompts[p].n,
                           g->cfg.max_prompt_tokens);
    size_t M = (size_t)g->cfg.max_new_tokens;
    for (int i = 0; i < P * G; i++)
        out[i] = (GenCompletion){.ids = g->out_ids + (size_t)i * M, .logprobs = g->out_lp + (size_t)i * M};
    for (int s = 0; s < B; s++) g->slots[s].active = false;
    int next_prompt = 0, staged = -1, staged_next_sample = 0, active = 0, done = 0;
    while (done < P * G) {
        // Admit, in prompt order: first the staged prompt's samples; then whole
        // prompts, as many as have G free slots each and fit the prefill
        // budget, prefilled in one call, each into the first of its slots and
        // forked into the others; a prompt without G free slots is prefilled
        // into the staging slot and forked as slots free up.
        for (;;) {
            int nfree = 0;
            for (int s = 0; s < B; s++) if (!g->slots[s].active) g->freel[nfree++] = s;
            int used = 0;  // of freel
            while (staged >= 0 && staged_next_sample < G && used < nfree) {
                bool fin;
                int j = staged_next_sample++;
                if (start_sample(g, prompts, staged, j, g->freel[used], S, g->stage_logits, out, &fin, err) < 0)
                    return -1;
                if (fin) done++;
                else { used++; active++; }
            }
            if (used == nfree || next_prompt == P) break;  // else the staged prompt is done
            int k = 0, ntok = 0;
            memset(g->n_new, 0, (size_t)(B + 1) * sizeof(int));
            while (next_prompt + k < P && nfree - used - k * G >= G &&
                   (k == 0 || ntok + prompts[next_prompt + k].n <= g->prefill_tokens)) {
                const GenPrompt *pr = &prompts[next_prompt + k];
                int host = g->freel[used + k * G];
                g->n_new[host] = pr->n;
                memcpy(g->pf_tokens + ntok, pr->ids, (size_t)pr->n * sizeof *pr->ids);
                ntok += pr->n;
                kvcache_reset(g->kv, host);
                k++;
            }
            if (k > 0) {
                if (transformer_extend(g->tf, g->kv, g->logits, g->n_new, g->pf_tokens, err) < 0)
                    return err_wrap(err, "prefill of prompts %d..%d", next_prompt, next_prompt + k - 1);
                g->stats.prefill_calls++;
                g->stats.prefill_tokens += ntok;
                for (int i = 0; i < k; i++) {
                    int p = next_prompt + i, host = g->freel[used + i * G];
                    const float *lg = g->logits + (size_t)i * g->V;
                    // The host last: the others fork from its KV before its own sample can end at once.
                    for (int j = G - 1; j >= 0; j--) {
                        bool fin;
                        if (start_sample(g, prompts, p, j, g->freel[used + i * G + j], host, lg, out, &fin, err) < 0)
                            return -1;
                        if (fin) done++;
                        else active++;
                    }
                }
                next_prompt += k;
                continue;  // slots that finished at once are free again
            }
            // Fewer than G free slots: stage the next prompt.
            staged = next_prompt++;
            staged_next_sample = 0;
            g->n_new[S] = prompts[staged].n;
            kvcache_reset(g->kv, S);
            if (transformer_extend(g->tf, g->kv, g->stage_logits, g->n_new, prompts[staged].ids, err) < 0)
                return err_wrap(err, "prefill of prompt %d", staged);
            g->stats.prefill_calls++;
            g->stats.prefill_tokens += prompts[staged].n;
        }
        if (active == 0) continue;
        if (g->cfg.abandon_fn && g->cfg.abandon_fn(g->cfg.abandon_ctx)) return 1;
        // One decode step over every active slot.
        int k = 0;
        for (int s = 0; s <= B; s++) g->n_new[s] = 0;
        for (int s = 0; s < B; s++)
            if (g->slots[s].active) { g->n_new[s] = 1; g->feed[k++] = g->slots[s].last; }
        if (transformer_extend(g->tf, g->kv, g->logits, g->n_new, g->feed, err) < 0) return err_wrap(err, "decode");
        g->stats.decode_calls++;
        g->stats.decode_tokens += k;
        // Sample every active slot in parallel (each has its own RNG stream, so
        // the result does not depend on the threads), then book-keep serially.
        int na = 0;
        for (int s = 0; s < B; s++) if (g->slots[s].active) g->act[na++] = s;
#pragma omp parallel for schedule(static)
        for (int a = 0; a < na; a++) {
            Slot *sl = &g->slots[g->act[a]];
            g->tok[a] = (int32_t)sample_token(g->logits + (size_t)a * g->V, &g->cfg.sampler, &sl->rng,
                                              &g->tss[omp_get_thread_num()], &g->lp[a]);
        }
        for (int a = 0; a < na; a++) {
            int s = g->act[a];
            Slot *sl = &g->slots[s];
            int32_t tok = g->tok[a];
            float lp = g->lp[a];
            if (append(g, &out[sl->prompt * G + sl->sample], tok, lp)) {
                sl->active = false;
                kvcache_reset(g->kv, s);
                active--;
                done++;
            } else {
                sl->last = tok;
            }
        }
    }
    return 0;
}
