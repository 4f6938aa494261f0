// Continuous-batching group generation over a KV block pool (see generate.h).
// KV slots 0..B-1 decode; slots B..2B hold the prompts of the groups in
// flight (a prompt slot stays pinned until its group's G samples are done, so
// a preempted sample resumes by forking it again, bit for bit). Everything a
// step computes stays on the transformer's backend: the paged KV cache (a
// fork shares the prompt's blocks), the logits, the slots' RNG streams and
// the sampler op; per step the fed token ids go down and the sampled ids,
// their log-probs and stop flags come back. Buffers are planned once in
// generator_init (one host block, one backend block, the KV cache).
//
// Preemption (vLLM's recompute policy, replayed step by step): when a decode
// step needs more free blocks than there are, the youngest running sequence
// (the most recently started) gives its slot and blocks back, keeping its
// tokens, log-probs and its stream's state. Preempted sequences resume,
// oldest first, before any new group is admitted: the sequence forks its
// prompt slot again and feeds its sampled tokens back one per decode step
// (rows of the batched step, as they were computed the first time: the same
// arithmetic, so the same keys and values), then samples on from where its
// stream stopped. Only when a single sequence is left and still short are
// the pinned prompts of groups with nothing running let go; such a prompt is
// prefilled again, alone, when one of its samples resumes.
#include "rollout/generate.h"
#include "rollout/draw.h"
#include <stdlib.h>
#include <string.h>
#include "core/mem.h"
#include "shard/shard.h"

enum { SEQ_WAITING, SEQ_RUNNING, SEQ_PREEMPTED, SEQ_DONE };

typedef struct {         // one (prompt, sample) of a run
    uint8_t state;
    int slot;            // running: its decode slot
    int fed;             // running: completion tokens its slot's KV holds (n - 1 when caught up)
    int order;           // when it first started: the youngest is preempted first
    Rng rng;             // preempted: its stream where it stopped
} Seq;

typedef struct {
    bool active;
    int seq;             // which completion (p * G + j) this slot is producing
} Slot;

struct Generator {
    Transformer *tf;      // borrowed
    GenConfig cfg;
    int V, B, NP;         // decode slots, prompt slots (B + 1: the groups in flight are never more)
    int watermark;        // free blocks kept back when admitting (vLLM's 1%)
    bool gated;           // a pool below the full size: admission counts blocks (else slots alone)
    KvCache *kv;          // owned
    Backend *be;          // borrowed: the transformer's
    SampleParams sp;
    TokenDraw *draw;      // owned: the slots' streams and the sampler, on the backend
    float *d_stage;       // (V) backend memory, owned: the staged prompt's next-token logits
    // Pieces of block (plan):
    Slot *slots;          // (B)
    int *lrow, *rslot;    // (B) a draw's logits rows and slots
    int *n_new;           // (B + NP)
    int32_t *feed;        // (B)
    int *freel;           // (B) free decode slots of an admission
    int *pslot_of;        // (max_prompts) a prompt's KV slot (-1: none yet or released)
    int *left;            // (max_prompts) samples of the prompt not done
    int *pslot_owner;     // (NP) the prompt a prompt slot holds (-1: free)
    Seq *seqs;            // (max_prompts * G)
    int32_t *pf_tokens;   // (prefill_tokens) the prompts of one batched prefill, concatenated
    int prefill_tokens;
    int32_t *out_ids;     // (max_prompts * G, max_new_tokens) the completions of a run
    float *out_lp;        // (max_prompts * G, max_new_tokens) their log-probs
    void *block;          // owned
    GenStats stats;
};

static void plan(Generator *g, MemPlan *p) {
    size_t B = (size_t)g->B, NP = (size_t)g->NP, MP = (size_t)g->cfg.max_prompts;
    size_t nseq = MP * g->cfg.group_size, nout = nseq * g->cfg.max_new_tokens;
    g->slots = mem_plan_take(p, B * sizeof *g->slots);
    g->lrow = mem_plan_take(p, B * sizeof(int));
    g->rslot = mem_plan_take(p, B * sizeof(int));
    g->n_new = mem_plan_take(p, (B + NP) * sizeof(int));
    g->feed = mem_plan_take(p, B * sizeof(int32_t));
    g->freel = mem_plan_take(p, B * sizeof(int));
    g->pslot_of = mem_plan_take(p, MP * sizeof(int));
    g->left = mem_plan_take(p, MP * sizeof(int));
    g->pslot_owner = mem_plan_take(p, NP * sizeof(int));
    g->seqs = mem_plan_take(p, nseq * sizeof *g->seqs);
    g->pf_tokens = mem_plan_take(p, (size_t)g->prefill_tokens * sizeof(int32_t));
    g->out_ids = mem_plan_take(p, nout * sizeof(int32_t));
    g->out_lp = mem_plan_take(p, nout * sizeof(float));
}

static int blocks_for(int ntok) { return (ntok + KV_BLOCK - 1) / KV_BLOCK; }

// A sequence of n tokens after a prompt of pn: the blocks of its own (the
// prompt's full blocks are shared with the prompt slot; its partial last one
// is copied on the first write).
static int own_blocks(int pn, int n) { return blocks_for(pn + n) - pn / KV_BLOCK; }

int generator_min_blocks(int max_prompt_tokens, int max_new_tokens) {
    return blocks_for(max_prompt_tokens) + own_blocks(max_prompt_tokens, max_new_tokens);
}

// Decode slots hold at most max_ctx tokens each; the prompt slots add, per
// group with samples running, the prompt's partial last block (the samples
// write their own copies), and the staged prompt's blocks (<= max_ctx).
int64_t generator_full_blocks(int batch_size, int max_prompt_tokens, int max_new_tokens) {
    return (int64_t)(batch_size + 1) * (blocks_for(max_prompt_tokens + max_new_tokens) + 1);
}

int generator_init(Generator **out, Transformer *tf, const ModelConfig *mc, const GenConfig *cfg, PailErr *err) {
    *out = NULL;
    if (cfg->group_size < 1 || cfg->batch_size < 1 || cfg->max_new_tokens < 1 || cfg->max_prompt_tokens < 1 ||
        cfg->max_prompts < 1 || cfg->kv_blocks < 0)
        return err_set(err, PAIL_ERR_INVALID, "generator: group size, batch size, max new tokens, prompt length and "
                       "prompts per run must be >= 1, KV blocks >= 0");
    int ctx = cfg->max_prompt_tokens + cfg->max_new_tokens, need = generator_min_blocks(cfg->max_prompt_tokens,
                                                                                          cfg->max_new_tokens);
    int64_t full = generator_full_blocks(cfg->batch_size, cfg->max_prompt_tokens, cfg->max_new_tokens);
    int n_blocks = cfg->kv_blocks > 0 ? cfg->kv_blocks : (int)(full < INT32_MAX ? full : INT32_MAX);
    if (n_blocks < need)
        return err_set(err, PAIL_ERR_INVALID, "KV pool of %d blocks (%.1f MiB) cannot hold one sequence of %d prompt + "
                       "%d new tokens: it needs %d blocks of %d tokens (%.1f MiB)", n_blocks,
                       (double)n_blocks * kvcache_block_bytes(mc, cfg->kv_dtype) / 1048576.0, cfg->max_prompt_tokens,
                       cfg->max_new_tokens, need, KV_BLOCK, (double)need * kvcache_block_bytes(mc, cfg->kv_dtype) / 1048576.0);
    Generator *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, PAIL_ERR_NOMEM, "generator: out of memory");
    g->tf = tf;
    g->cfg = *cfg;
    g->V = mc->vocab_size;
    g->B = cfg->batch_size;
    g->NP = g->B + 1;
    g->watermark = n_blocks / 100 > 1 ? n_blocks / 100 : 1;
    g->gated = n_blocks < full;
    g->be = transformer_backend(tf);
    g->sp = (SampleParams){.temperature = cfg->sampler.temperature, .top_p = cfg->sampler.top_p,
                           .min_p = cfg->sampler.min_p, .top_k = cfg->sampler.top_k};
    g->prefill_tokens = cfg->prefill_tokens > cfg->max_prompt_tokens ? cfg->prefill_tokens : cfg->max_prompt_tokens;
    if (kvcache_init_on(&g->kv, transformer_backend(tf), mc, g->B + g->NP, ctx, cfg->kv_dtype, n_blocks, err) < 0) {
        free(g);
        return -1;
    }
    g->stats.kv_blocks = n_blocks;
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

// The loop's state over one run.
typedef struct {
    const GenPrompt *prompts;
    GenCompletion *out;
    int P, next_prompt, staged, staged_next, active, done, npre, started;
} Run;

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
static int seed_slot(Generator *g, const Run *r, int p, int j, int s, PailErr *err) {
    Rng rng;
    rng_seed(&rng, r->prompts[p].seed, (uint64_t)j);
    return token_draw_seed(g->draw, s, &rng, err);
}

// A free prompt slot for prompt p, the lowest (-1: none free).
static int pslot_take(Generator *g, int p) {
    for (int i = 0; i < g->NP; i++)
        if (g->pslot_owner[i] < 0) {
            g->pslot_owner[i] = p;
            return g->pslot_of[p] = g->B + i;
        }
    return -1;
}

// Completion i is done; its prompt's last lets the prompt slot go.
static void seq_done(Generator *g, Run *r, int i) {
    int p = i / g->cfg.group_size;
    g->seqs[i].state = SEQ_DONE;
    r->done++;
    if (--g->left[p] == 0) {
        int ps = g->pslot_of[p];
        kvcache_reset(g->kv, ps);
        g->pslot_owner[ps - g->B] = -1;
        g->pslot_of[p] = -1;
    }
}

static int release_idle_prompt(Generator *g, PailErr *err);

// Prompt p's slot holds its prompt again (prefilled alone if it was let go;
// the admission counted its blocks, or nothing runs and idle prompts give
// theirs).
static int prompt_ready(Generator *g, Run *r, int p, PailErr *err) {
    int ps = g->pslot_of[p];
    const GenPrompt *pr = &r->prompts[p];
    if (kvcache_len(g->kv, ps) > 0) return 0;
    while (kvcache_free_blocks(g->kv) < blocks_for(pr->n))
        if (release_idle_prompt(g, err) < 0) return -1;
    memset(g->n_new, 0, (size_t)(g->B + g->NP) * sizeof(int));
    g->n_new[ps] = pr->n;
    if (transformer_extend(g->tf, g->kv, NULL, g->n_new, pr->ids, err) < 0)
        return err_wrap(err, "prefill of prompt %d again", p);
    g->stats.prefill_calls++;
    g->stats.prefill_tokens += pr->n;
    g->stats.recomputed_tokens += pr->n;
    return 0;
}

// Starts sample j of prompt p in free slot s with the token drawn for it
// (row a of the last draw), forking the prompt's slot; a completion that ends
// at its first token leaves s free.
static int start_sample(Generator *g, Run *r, int p, int j, int s, int a, PailErr *err) {
    int i = p * g->cfg.group_size + j;
    Seq *q = &g->seqs[i];
    int32_t tok = token_draw_tok(g->draw)[a];
    if (append(g, &r->out[i], tok, token_draw_logp(g->draw)[a], token_draw_stopped(g->draw)[a])) {
        seq_done(g, r, i);
        return 0;
    }
    if (kvcache_fork(g->kv, s, g->pslot_of[p], err) < 0) return -1;
    g->slots[s] = (Slot){.active = true, .seq = i};
    *q = (Seq){.state = SEQ_RUNNING, .slot = s, .fed = 0, .order = r->started++};
    r->active++;
    return 0;
}

// Preempted completion i takes free slot s: its prompt forked again, its
// stream where it stopped; its tokens are fed back from the next step on.
static int resume(Generator *g, Run *r, int i, int s, PailErr *err) {
    Seq *q = &g->seqs[i];
    int p = i / g->cfg.group_size;
    if (prompt_ready(g, r, p, err) < 0 || kvcache_fork(g->kv, s, g->pslot_of[p], err) < 0 ||
        token_draw_seed(g->draw, s, &q->rng, err) < 0)
        return -1;
    g->slots[s] = (Slot){.active = true, .seq = i};
    q->state = SEQ_RUNNING;
    q->slot = s;
    q->fed = 0;
    r->active++;
    r->npre--;
    return 0;
}

// The youngest running completion gives its slot and blocks back.
static int preempt_youngest(Generator *g, Run *r, PailErr *err) {
    int s = -1;
    for (int t = 0; t < g->B; t++)
        if (g->slots[t].active && (s < 0 || g->seqs[g->slots[t].seq].order > g->seqs[g->slots[s].seq].order)) s = t;
    Seq *q = &g->seqs[g->slots[s].seq];
    if (token_draw_stream(g->draw, s, &q->rng, err) < 0) return err_wrap(err, "preempting slot %d", s);
    kvcache_reset(g->kv, s);
    g->slots[s].active = false;
    q->state = SEQ_PREEMPTED;
    r->active--;
    r->npre++;
    g->stats.preemptions++;
    return 0;
}

// One sequence left and still short of blocks: lets go of the prompt of a
// group with nothing running (prefilled again when it resumes). 0, or -1
// when there is none (a pool below generator_min_blocks: refused at init).
static int release_idle_prompt(Generator *g, PailErr *err) {
    int G = g->cfg.group_size;
    for (int i = 0; i < g->NP; i++) {
        int p = g->pslot_owner[i];
        if (p < 0 || kvcache_len(g->kv, g->B + i) == 0) continue;
        bool running = false;
        for (int j = 0; j < G; j++) running |= g->seqs[p * G + j].state == SEQ_RUNNING;
        if (running) continue;
        kvcache_reset(g->kv, g->B + i);
        return 0;
    }
    return err_set(err, PAIL_ERR_NOMEM, "KV pool: %d blocks, %d free, cannot hold the next token of one sequence",
                   kvcache_n_blocks(g->kv), kvcache_free_blocks(g->kv));
}

// Admits work, in this order, while decode slots and free blocks last:
// preempted completions (oldest first), the staged prompt's next samples, then
// whole prompts, as many as have G free slots each and fit the prefill budget,
// prefilled in one call into their prompt slots and forked; a prompt without G
// free slots is staged (its samples start as slots free up). A new group needs
// its prompt's blocks + one per sample (its first token's block or its copy of
// the prompt's last) + the watermark free; a resumed completion the blocks of
// its own up to where it stopped + the watermark. With nothing running the
// first candidate is admitted whatever is free.
static int admit(Generator *g, Run *r, PailErr *err) {
    int G = g->cfg.group_size, B = g->B;
    const GenPrompt *prompts = r->prompts;
    for (;;) {
        int nfree = 0, fb = kvcache_free_blocks(g->kv);
        bool force = r->active == 0 || !g->gated;
        for (int s = 0; s < B; s++)
            if (!g->slots[s].active) g->freel[nfree++] = s;
        if (nfree == 0) return 0;
        if (r->npre > 0) {
            int i = -1, n = r->P * G;
            for (int t = 0; t < n; t++)
                if (g->seqs[t].state == SEQ_PREEMPTED && (i < 0 || g->seqs[t].order < g->seqs[i].order)) i = t;
            int p = i / G, pn = prompts[p].n;
            int need = own_blocks(pn, r->out[i].n) + (kvcache_len(g->kv, g->pslot_of[p]) ? 0 : blocks_for(pn));
            if (!force && fb < need + g->watermark) return 0;
            if (resume(g, r, i, g->freel[0], err) < 0) return -1;
            continue;
        }
        if (r->staged >= 0 && r->staged_next < G) {
            // The staged prompt's next samples, one slot each, drawn in one call; a
            // sample that ends at its first token leaves its slot to the next.
            int n = G - r->staged_next < nfree ? G - r->staged_next : nfree;
            int pre = kvcache_len(g->kv, g->pslot_of[r->staged]) ? 0 : blocks_for(prompts[r->staged].n);
            if (!force && n > fb - g->watermark - pre) n = fb - g->watermark - pre;
            if (n < 1) return 0;
            if (prompt_ready(g, r, r->staged, err) < 0) return -1;
            for (int a = 0; a < n; a++) {
                g->lrow[a] = 0;
                g->rslot[a] = g->freel[a];
                if (seed_slot(g, r, r->staged, r->staged_next + a, g->freel[a], err) < 0) return -1;
            }
            if (sample_rows(g, g->d_stage, n, err) < 0) return -1;
            for (int a = 0; a < n; a++)
                if (start_sample(g, r, r->staged, r->staged_next++, g->freel[a], a, err) < 0) return -1;
            continue;  // slots whose sample ended at once are free again: look again
        }
        if (r->next_prompt == r->P) return 0;
        int k = 0, ntok = 0, nb = 0;
        memset(g->n_new, 0, (size_t)(B + g->NP) * sizeof(int));
        while (r->next_prompt + k < r->P && nfree - k * G >= G &&
               (k == 0 || ntok + prompts[r->next_prompt + k].n <= g->prefill_tokens)) {
            const GenPrompt *pr = &prompts[r->next_prompt + k];
            int need = blocks_for(pr->n) + G;
            if (!(force && k == 0) && fb - nb < need + g->watermark) break;
            int ps = pslot_take(g, r->next_prompt + k);
            if (ps < 0) break;
            g->n_new[ps] = pr->n;
            memcpy(g->pf_tokens + ntok, pr->ids, (size_t)pr->n * sizeof *pr->ids);
            ntok += pr->n;
            nb += need;
            k++;
        }
        if (k > 0) {
            int p0 = r->next_prompt;
            if (transformer_extend(g->tf, g->kv, NULL, g->n_new, g->pf_tokens, err) < 0)
                return err_wrap(err, "prefill of prompts %d..%d", p0, p0 + k - 1);
            g->stats.prefill_calls++;
            g->stats.prefill_tokens += ntok;
            // The k x G first tokens in one call: prompt i's logits are row i.
            for (int i = 0; i < k; i++)
                for (int j = 0; j < G; j++) {
                    int a = i * G + j;
                    g->lrow[a] = i;
                    g->rslot[a] = g->freel[a];
                    if (seed_slot(g, r, p0 + i, j, g->rslot[a], err) < 0) return -1;
                }
            if (sample_rows(g, kvcache_logits(g->kv), k * G, err) < 0) return -1;
            r->next_prompt += k;
            for (int i = 0; i < k; i++)
                for (int j = 0; j < G; j++)
                    if (start_sample(g, r, p0 + i, j, g->freel[i * G + j], i * G + j, err) < 0) return -1;
            continue;  // slots that finished at once are free again
        }
        if (nfree >= G) return 0;  // short of blocks or of prompt slots: wait for some to free up
        // Fewer than G free slots: stage the next prompt.
        const GenPrompt *pr = &prompts[r->next_prompt];
        if (!force && fb < blocks_for(pr->n) + 1 + g->watermark) return 0;
        int ps = pslot_take(g, r->next_prompt);
        if (ps < 0) return 0;
        r->staged = r->next_prompt++;
        r->staged_next = 0;
        g->n_new[ps] = pr->n;
        if (transformer_extend(g->tf, g->kv, NULL, g->n_new, pr->ids, err) < 0 ||
            g->be->ops->copy(g->be, g->d_stage, kvcache_logits(g->kv), (size_t)g->V, err) < 0)
            return err_wrap(err, "prefill of prompt %d", r->staged);
        g->stats.prefill_calls++;
        g->stats.prefill_tokens += pr->n;
    }
}

// One decode step over every active slot: first the blocks it needs (the
// youngest preempted until they are free), then each slot's next token fed:
// a caught-up completion's last token, whose logits are sampled, or a resumed
// one's next replayed token, whose logits are not.
static int decode_step(Generator *g, Run *r, PailErr *err) {
    int B = g->B;
    for (;;) {
        int need = 0;
        for (int s = 0; s < B; s++)
            if (g->slots[s].active) need += kvcache_append_blocks(g->kv, s, 1);
        if (need <= kvcache_free_blocks(g->kv)) break;
        if ((r->active > 1 ? preempt_youngest(g, r, err) : release_idle_prompt(g, err)) < 0) return -1;
    }
    int k = 0;
    memset(g->n_new, 0, (size_t)(B + g->NP) * sizeof(int));
    for (int s = 0; s < B; s++)
        if (g->slots[s].active) {
            const Seq *q = &g->seqs[g->slots[s].seq];
            g->n_new[s] = 1;
            g->feed[k++] = r->out[g->slots[s].seq].ids[q->fed];
        }
    if (transformer_extend(g->tf, g->kv, NULL, g->n_new, g->feed, err) < 0) return err_wrap(err, "decode");
    g->stats.decode_calls++;
    g->stats.decode_tokens += k;
    // The caught-up slots' tokens in one call (each its own stream), then the
    // book-keeping on the host.
    int na = 0, row = 0;
    for (int s = 0; s < B; s++)
        if (g->slots[s].active) {
            Seq *q = &g->seqs[g->slots[s].seq];
            if (++q->fed == r->out[g->slots[s].seq].n) {
                g->lrow[na] = row;
                g->rslot[na++] = s;
            } else {
                g->stats.recomputed_tokens++;
            }
            row++;
        }
    if (sample_rows(g, kvcache_logits(g->kv), na, err) < 0) return -1;
    for (int a = 0; a < na; a++) {
        int s = g->rslot[a], i = g->slots[s].seq;
        if (append(g, &r->out[i], token_draw_tok(g->draw)[a], token_draw_logp(g->draw)[a],
                   token_draw_stopped(g->draw)[a])) {
            g->slots[s].active = false;
            kvcache_reset(g->kv, s);
            r->active--;
            seq_done(g, r, i);
        }
    }
    return 0;
}

int generator_run(Generator *g, const GenPrompt *prompts, int P, GenCompletion *out, PailErr *err) {
    int G = g->cfg.group_size, B = g->B;
    if (P > g->cfg.max_prompts)
        return err_set(err, PAIL_ERR_INVALID, "generator: %d prompts in one run, planned for %d", P, g->cfg.max_prompts);
    for (int p = 0; p < P; p++)
        if (prompts[p].n < 1 || prompts[p].n > g->cfg.max_prompt_tokens)
            return err_set(err, PAIL_ERR_INVALID, "prompt %d has %d tokens (1..%d accepted)", p, prompts[p].n,
                           g->cfg.max_prompt_tokens);
    size_t M = (size_t)g->cfg.max_new_tokens;
    for (int i = 0; i < P * G; i++) {
        out[i] = (GenCompletion){.ids = g->out_ids + (size_t)i * M, .logprobs = g->out_lp + (size_t)i * M};
        g->seqs[i] = (Seq){.state = SEQ_WAITING};
    }
    for (int p = 0; p < P; p++) {
        g->pslot_of[p] = -1;
        g->left[p] = G;
    }
    for (int i = 0; i < g->NP; i++) g->pslot_owner[i] = -1;
    for (int s = 0; s < B; s++) g->slots[s].active = false;
    for (int s = 0; s < B + g->NP; s++) kvcache_reset(g->kv, s);  // what a finished or abandoned run still held
    kvcache_reset_peak(g->kv);
    Run r = {.prompts = prompts, .out = out, .P = P, .staged = -1};
    while (r.done < P * G) {
        if (admit(g, &r, err) < 0) return -1;
        if (r.active == 0) {
            if (r.done < P * G)  // admit starts something whenever nothing runs
                return err_set(err, PAIL_ERR_INVALID, "generator: stalled with %d of %d completions done", r.done,
                               P * G);
            break;
        }
        if (g->cfg.abandon_fn && g->cfg.abandon_fn(g->cfg.abandon_ctx)) return 1;
        if (decode_step(g, &r, err) < 0) return -1;
    }
    g->stats.kv_peak_bytes = (int64_t)kvcache_used_bytes(g->kv, true);
    g->stats.kv_peak_blocks = kvcache_peak_blocks(g->kv);
    return 0;
}
