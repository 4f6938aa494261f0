// Continuous-batching group generation over KV-cache slots (see generate.h).
// Slots 0..B-1 decode; slot B stages the current prompt's prefill, from which
// samples are forked as decode slots free up. Everything a step computes stays
// on the transformer's backend: the paged KV cache (a fork shares the prompt's
// blocks), the logits, the slots' RNG streams and the sampler op; per step
// the fed token ids go down and the sampled ids, their log-probs and stop
// flags come back. Buffers are planned once in generator_init (one host block,
// one backend block, the KV cache).
#include "rollout/generate.h"
#include "rollout/draw.h"
#include <stdlib.h>
#include <string.h>
#include "core/mem.h"
#include "shard/shard.h"

typedef struct {
    bool active;
    int prompt, sample;   // which completion this slot is producing
    int32_t last;         // token to feed next
} Slot;

struct Generator {
    Transformer *tf;      // borrowed
    GenConfig cfg;
    int V, B;
    KvCache *kv;          // owned
    Backend *be;          // borrowed: the transformer's
    SampleParams sp;
    TokenDraw *draw;      // owned: the slots' streams and the sampler, on the backend
    float *d_stage;       // (V) backend memory, owned: the staged prompt's next-token logits
    // Pieces of block (plan):
    Slot *slots;          // (B)
    int *lrow, *rslot;    // (B) a draw's logits rows and slots
    int *n_new;           // (B + 1)
    int32_t *feed;        // (B + 1)
    int *freel;           // (B) free slots of an admission
    int32_t *pf_tokens;   // (prefill_tokens) the prompts of one batched prefill, concatenated
    int prefill_tokens;
    int32_t *out_ids;     // (max_prompts * G, max_new_tokens) the completions of a run
    float *out_lp;        // (max_prompts * G, max_new_tokens) their log-probs
    void *block;          // owned
    GenStats stats;
};

static void plan(Generator *g, MemPlan *p) {
    size_t B = (size_t)g->B;
    size_t nout = (size_t)g->cfg.max_prompts * g->cfg.group_size * g->cfg.max_new_tokens;
    g->slots = mem_plan_take(p, B * sizeof *g->slots);
    g->lrow = mem_plan_take(p, B * sizeof(int));
    g->rslot = mem_plan_take(p, B * sizeof(int));
    g->n_new = mem_plan_take(p, (B + 1) * sizeof(int));
    g->feed = mem_plan_take(p, (B + 1) * sizeof(int32_t));
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
    g->be = transformer_backend(tf);
    g->sp = (SampleParams){.temperature = cfg->sampler.temperature, .top_p = cfg->sampler.top_p,
                           .min_p = cfg->sampler.min_p, .top_k = cfg->sampler.top_k};
    g->prefill_tokens = cfg->prefill_tokens > cfg->max_prompt_tokens ? cfg->prefill_tokens : cfg->max_prompt_tokens;
    int ctx = cfg->max_prompt_tokens + cfg->max_new_tokens;
    if (kvcache_init_on(&g->kv, transformer_backend(tf), mc, g->B + 1, ctx, cfg->kv_dtype, err) < 0) {
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
    bool trunc = (cfg->sampler.top_k > 0 && cfg->sampler.top_k < g->V) ||
                 (cfg->sampler.top_p > 0 && cfg->sampler.top_p < 1);
    if (token_draw_init(&g->draw, g->be, g->B, g->V, cfg->stop_ids, cfg->n_stop_ids, trunc, err) < 0 ||
        !(g->d_stage = g->be->ops->alloc(g->be, (size_t)g->V * sizeof(float), err))) {
        generator_free(g);
        return err_wrap(err, "generator");
    }
    *out = g;
    return 0;
}

void generator_free(Generator *g) {
    if (!g) return;
    kvcache_free(g->kv);
    token_draw_free(g->draw);
    if (g->d_stage) g->be->ops->release(g->be, g->d_stage);
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
static bool append(Generator *g, GenCompletion *c, int32_t tok, float lp, bool stop_id) {
    c->ids[c->n] = tok;
    c->logprobs[c->n] = lp;
    c->n++;
    if (stop_id) { c->finish = FINISH_STOP; return true; }
    if (g->cfg.stop_fn && g->cfg.stop_fn(g->cfg.stop_ctx, c->ids, c->n)) { c->finish = FINISH_STOP; return true; }
    if (c->n >= g->cfg.max_new_tokens) { c->finish = FINISH_LENGTH; return true; }
    return false;
}

// Draws one token for each of n rows on the backend (g->lrow, g->rslot).
static int sample_rows(Generator *g, const float *logits, int n, PailErr *err) {
    return token_draw_run(g->draw, logits, g->lrow, g->rslot, n, &g->sp, err);
}

// Seeds slot s's stream for sample j of prompt p (its own stream: the result
// depends on neither the batch nor the slot).
static int seed_slot(Generator *g, const GenPrompt *prompts, int p, int j, int s, PailErr *err) {
    Rng r;
    rng_seed(&r, prompts[p].seed, (uint64_t)j);
    return token_draw_seed(g->draw, s, &r, err);
}

// Starts sample j of prompt p in free slot s with the token drawn for it
// (row a of the last draw), forking the prompt's KV from slot src unless it is s.
// *finished: the completion ended at its first token (s stays free).
static int start_sample(Generator *g, int p, int j, int s, int src, int a, GenCompletion *out, bool *finished,
                        PailErr *err) {
    Slot *sl = &g->slots[s];
    int32_t tok = token_draw_tok(g->draw)[a];
    *finished = append(g, &out[p * g->cfg.group_size + j], tok, token_draw_logp(g->draw)[a],
                       token_draw_stopped(g->draw)[a]);
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
    for (int s = 0; s <= B; s++) kvcache_reset(g->kv, s);  // what a finished or abandoned run still held
    kvcache_reset_peak(g->kv);
    while (done < P * G) {
        // Admit, in prompt order: first the staged prompt's samples; then whole
        // prompts, as many as have G free slots each and fit the prefill
        // budget, prefilled in one call, each into the first of its slots and
        // forked into the others; a prompt without G free slots is prefilled
        // into the staging slot and forked as slots free up.
        for (;;) {
            int nfree = 0;
            for (int s = 0; s < B; s++) if (!g->slots[s].active) g->freel[nfree++] = s;
            if (staged >= 0 && staged_next_sample < G && nfree > 0) {
                // The staged prompt's next samples, one slot each, drawn in one call; a
                // sample that ends at its first token leaves its slot to the next.
                int n = G - staged_next_sample < nfree ? G - staged_next_sample : nfree;
                for (int a = 0; a < n; a++) {
                    g->lrow[a] = 0;
                    g->rslot[a] = g->freel[a];
                    if (seed_slot(g, prompts, staged, staged_next_sample + a, g->freel[a], err) < 0) return -1;
                }
                if (sample_rows(g, g->d_stage, n, err) < 0) return -1;
                for (int a = 0; a < n; a++) {
                    bool fin;
                    int j = staged_next_sample++;
                    if (start_sample(g, staged, j, g->freel[a], S, a, out, &fin, err) < 0) return -1;
                    if (fin) done++;
                    else active++;
                }
                continue;  // slots whose sample ended at once are free again: look again
            }
            if (nfree == 0 || next_prompt == P) break;  // else the staged prompt is done
            int k = 0, ntok = 0;
            memset(g->n_new, 0, (size_t)(B + 1) * sizeof(int));
            while (next_prompt + k < P && nfree - k * G >= G &&
                   (k == 0 || ntok + prompts[next_prompt + k].n <= g->prefill_tokens)) {
                const GenPrompt *pr = &prompts[next_prompt + k];
                int host = g->freel[k * G];
                g->n_new[host] = pr->n;
                memcpy(g->pf_tokens + ntok, pr->ids, (size_t)pr->n * sizeof *pr->ids);
                ntok += pr->n;
                kvcache_reset(g->kv, host);
                k++;
            }
            if (k > 0) {
                if (transformer_extend(g->tf, g->kv, NULL, g->n_new, g->pf_tokens, err) < 0)
                    return err_wrap(err, "prefill of prompts %d..%d", next_prompt, next_prompt + k - 1);
                g->stats.prefill_calls++;
                g->stats.prefill_tokens += ntok;
                // The k x G first tokens in one call: prompt i's logits are row i.
                for (int i = 0; i < k; i++)
                    for (int j = 0; j < G; j++) {
                        int a = i * G + j;
                        g->lrow[a] = i;
                        g->rslot[a] = g->freel[a];
                        if (seed_slot(g, prompts, next_prompt + i, j, g->rslot[a], err) < 0) return -1;
                    }
                if (sample_rows(g, kvcache_logits(g->kv), k * G, err) < 0) return -1;
                for (int i = 0; i < k; i++) {
                    int p = next_prompt + i, host = g->freel[i * G];
                    // The host last: the others fork from its KV before its own sample can end at once.
                    for (int j = G - 1; j >= 0; j--) {
                        bool fin;
                        if (start_sample(g, p, j, g->freel[i * G + j], host, i * G + j, out, &fin, err) < 0)
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
            if (transformer_extend(g->tf, g->kv, NULL, g->n_new, prompts[staged].ids, err) < 0 ||
                g->be->ops->copy(g->be, g->d_stage, kvcache_logits(g->kv), (size_t)g->V, err) < 0)
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
        if (transformer_extend(g->tf, g->kv, NULL, g->n_new, g->feed, err) < 0) return err_wrap(err, "decode");
        g->stats.decode_calls++;
        g->stats.decode_tokens += k;
        // Every active slot's token in one call (each its own stream), then the
        // book-keeping on the host.
        int na = 0;
        for (int s = 0; s < B; s++)
            if (g->slots[s].active) {
                g->lrow[na] = na;
                g->rslot[na++] = s;
            }
        if (sample_rows(g, kvcache_logits(g->kv), na, err) < 0) return -1;
        for (int a = 0; a < na; a++) {
            int s = g->rslot[a];
            Slot *sl = &g->slots[s];
            int32_t tok = token_draw_tok(g->draw)[a];
            if (append(g, &out[sl->prompt * G + sl->sample], tok, token_draw_logp(g->draw)[a],
                       token_draw_stopped(g->draw)[a])) {
                sl->active = false;
                kvcache_reset(g->kv, s);
                active--;
                done++;
            } else {
                sl->last = tok;
            }
        }
    }
    g->stats.kv_peak_bytes = (int64_t)kvcache_used_bytes(g->kv, true);
    return 0;
}
