// Multi-turn episodes over KV-cache slots (see episode.h). Each episode owns a
// slot from its first prefill to its last turn; every model call advances all
// slots with something to feed: one sampled token for a decoding slot, a chunk
// of an opening or of appended messages for the others, within the token budget.
#include "rollout/episode.h"
#include "rollout/draw.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "shard/shard.h"

enum { EP_OPENING, EP_QUEUED, EP_RUNNING, EP_WAIT_ENV, EP_WAIT_REWARD, EP_DONE };

typedef struct {
    int state, slot;          // slot: its KV slot while it holds one, else -1
    json_t *history, *tools;  // owned
    int32_t *open;            // owned: the opening's tokens (n_open)
    int n_open;
    int32_t *ids;             // pieces of the block: max_episode_tokens each
    float *lp;
    uint8_t *mask;
    int n, turn_start;        // tokens in the row; where the current turn began
    const int32_t *feed;      // tokens still to feed into the slot (into open or ids)
    int n_feed;
    int turns;
    uint8_t finish;
    bool valid, final_sent;
    bool extra;               // an ad-hoc request (k >= nb): one turn, its own sampling settings, no reward
    SamplerConfig smp;
    int max_turn;             // tokens of one turn
    bool stopped, stop_tok;   // the last turn ended with a stop id or string / with a stop id
    double reward;
    json_t *comps;            // owned
    char why[512];
    Rng rng;
    Buf rendered;             // T(H): the history so far as the template renders it, generation prompt included
    EpisodeSeg *segs;         // earlier segments (owned, and their arrays)
    int n_segs, seg_turns;    // seg_turns: the turns those hold
} Ep;

struct Episodes {
    Transformer *tf;          // borrowed
    EpisodeConfig cfg;
    int V, B, cap, nb;        // vocabulary, slots, episodes (nb of a batch, then the ad-hoc requests)
    uint64_t extra_seq;       // ad-hoc requests started (their RNG streams when they give no seed)
    KvCache *kv;              // owned
    TokenDraw *draw;          // owned: the slots' streams and the sampler, on the transformer's backend
    // pieces of block:
    Ep *eps;                  // (cap)
    int *slot_ep;             // (B) the episode in each slot, -1: free
    int *n_new;               // (B)
    int32_t *feed;            // (token_budget)
    int *act, *sampled_slot;  // (B)
    int32_t *tok;             // (B)
    float *lp;                // (B)
    int *lrow, *rslot;        // (B) one draw's rows: logits row, slot
    uint8_t *drawn;           // (B) the sampled slots already drawn for in this call
    int32_t *row_ids;         // (cap, max_episode_tokens)
    float *row_lp;
    uint8_t *row_mask;
    EnvEvent *evs;            // (EV_CAP)
    void *block;              // owned
    EpisodeStats stats;
    Buf a, b;                 // scratch text
};

#define EV_CAP 64

static void plan(Episodes *r, MemPlan *p) {
    size_t B = (size_t)r->B, M = (size_t)r->cfg.max_episode_tokens, C = (size_t)r->cap;
    r->eps = mem_plan_take(p, C * sizeof *r->eps);
    r->slot_ep = mem_plan_take(p, B * sizeof(int));
    r->n_new = mem_plan_take(p, B * sizeof(int));
    r->feed = mem_plan_take(p, (size_t)r->cfg.token_budget * sizeof(int32_t));
    r->act = mem_plan_take(p, B * sizeof(int));
    r->sampled_slot = mem_plan_take(p, B * sizeof(int));
    r->tok = mem_plan_take(p, B * sizeof(int32_t));
    r->lp = mem_plan_take(p, B * sizeof(float));
    r->lrow = mem_plan_take(p, B * sizeof(int));
    r->rslot = mem_plan_take(p, B * sizeof(int));
    r->drawn = mem_plan_take(p, B);
    r->row_ids = mem_plan_take(p, C * M * sizeof(int32_t));
    r->row_lp = mem_plan_take(p, C * M * sizeof(float));
    r->row_mask = mem_plan_take(p, C * M);
    r->evs = mem_plan_take(p, EV_CAP * sizeof *r->evs);
}

int episodes_init(Episodes **out, Transformer *tf, const ModelConfig *mc, const EpisodeConfig *cfg, PailErr *err) {
    *out = NULL;
    if (cfg->group_size < 1 || cfg->batch_size < 1 || cfg->max_groups < 1 || cfg->max_prompt_tokens < 1 ||
        cfg->max_episode_tokens < 1 || cfg->max_turn_tokens < 1 || cfg->max_turns < 1 ||
        cfg->token_budget < cfg->batch_size || !cfg->chat || !cfg->tok || !cfg->env)
        return err_set(err, PAIL_ERR_INVALID, "episodes: group size, slots, rows, opening, episode and turn tokens and "
                       "turns must be >= 1, the token budget >= the slots, and a chat template, tokenizer and "
                       "environment given");
    Episodes *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, PAIL_ERR_NOMEM, "episodes: out of memory");
    r->tf = tf;
    r->cfg = *cfg;
    r->V = mc->vocab_size;
    r->B = cfg->batch_size;
    r->nb = cfg->max_groups * cfg->group_size;
    r->cap = r->nb + (cfg->max_extra > 0 ? cfg->max_extra : 0);
    // Every slot at its longest episode at once (n_blocks 0): episodes are not
    // preempted, so --kv-memory does not size this pool.
    if (kvcache_init_on(&r->kv, transformer_backend(tf), mc, r->B, cfg->max_prompt_tokens + cfg->max_episode_tokens,
                        cfg->kv_dtype, 0, err) < 0) {
        free(r);
        return -1;
    }
    MemPlan dry = {0};
    plan(r, &dry);
    if (!(r->block = mem_calloc_big(dry.used))) {
        episodes_free(r);
        return err_set(err, PAIL_ERR_NOMEM, "episodes: cannot allocate %zu MiB for %d slots and %d episodes of up to "
                       "%d tokens", dry.used >> 20, r->B, r->cap, cfg->max_episode_tokens);
    }
    MemPlan real = {r->block, 0};
    plan(r, &real);
    // Ad-hoc requests may ask for top-k / top-p of their own: the sampler plans for it.
    if (token_draw_init(&r->draw, transformer_backend(tf), r->B, r->V, cfg->stop_ids, cfg->n_stop_ids, true, err) < 0) {
        episodes_free(r);
        return err_wrap(err, "episodes");
    }
    for (int i = 0; i < r->B; i++) r->slot_ep[i] = -1;  // every KV slot free
    for (int k = 0; k < r->cap; k++) {
        Ep *e = &r->eps[k];
        e->state = EP_DONE;  // (an ad-hoc slot: free)
        size_t M = (size_t)cfg->max_episode_tokens;
        e->ids = r->row_ids + (size_t)k * M;
        e->lp = r->row_lp + (size_t)k * M;
        e->mask = r->row_mask + (size_t)k * M;
        e->slot = -1;
    }
    *out = r;
    return 0;
}

static void ep_clear(Ep *e) {
    for (int i = 0; i < e->n_segs; i++) {
        free((void *)e->segs[i].ids);
        free((void *)e->segs[i].logprobs);
        free((void *)e->segs[i].mask);
    }
    free(e->segs);
    e->segs = NULL;
    e->n_segs = e->seg_turns = 0;
    json_decref(e->history);
    json_decref(e->tools);
    json_decref(e->comps);
    free(e->open);
    e->history = e->tools = e->comps = NULL;
    e->open = NULL;
    e->n_open = e->n = e->turn_start = e->n_feed = e->turns = 0;
    e->feed = NULL;
    e->finish = FINISH_STOP;
    e->valid = e->final_sent = e->stopped = e->stop_tok = e->extra = false;
    e->reward = 0;
    e->why[0] = 0;
    e->slot = -1;
    buf_reset(&e->rendered);
}

void episodes_free(Episodes *r) {
    if (!r) return;
    kvcache_free(r->kv);
    token_draw_free(r->draw);
    if (r->block) {
        for (int k = 0; k < r->cap; k++) { ep_clear(&r->eps[k]); buf_free(&r->eps[k].rendered); }
    }
    buf_free(&r->a);
    buf_free(&r->b);
    free(r->block);
    free(r);
}

EpisodeStats episodes_stats(const Episodes *r) { return r->stats; }

static void release_slot(Episodes *r, Ep *e) {
    if (e->slot < 0) return;
    r->slot_ep[e->slot] = -1;
    kvcache_reset(r->kv, e->slot);
    e->slot = -1;
}

static void ep_fail(Episodes *r, int k, const char *why) {
    Ep *e = &r->eps[k];
    if (e->state == EP_DONE) return;
    if (!e->why[0]) snprintf(e->why, sizeof e->why, "%s", why);
    e->valid = false;
    e->state = EP_DONE;
    if (!e->extra) r->stats.failed++;
    release_slot(r, e);
    env_cancel(r->cfg.env, k, e->why);
}

// T(messages) into out (reset first): the conversation with the generation prompt.
static int render(Episodes *r, json_t *messages, json_t *tools, Buf *out, PailErr *err) {
    buf_reset(out);
    return chat_render(r->cfg.chat, messages, tools, true, out, err);
}

// The opening messages: rendered, tokenized, queued for a slot.
static void on_opening(Episodes *r, int k, json_t *messages, json_t *tools) {
    Ep *e = &r->eps[k];
    PailErr err = {0};
    char why[600];
    bool raw = json_is_string(messages);  // an ad-hoc completion's prompt: no template
    e->history = raw ? NULL : json_deep_copy(messages);
    e->tools = tools ? json_incref(tools) : NULL;
    TokenIds ids = {0};
    if (raw) {
        buf_reset(&e->rendered);
        if (buf_append(&e->rendered, json_string_value(messages), json_string_length(messages)) < 0)
            err_set(&err, PAIL_ERR_NOMEM, "out of memory");
    }
    if (!raw && !e->history) err_set(&err, PAIL_ERR_NOMEM, "out of memory");
    else if (!raw && render(r, e->history, e->tools, &e->rendered, &err) < 0 && !err.msg[0])
        err_set(&err, PAIL_ERR_NOMEM, "out of memory");
    size_t max_bytes = tokenizer_max_text_bytes(r->cfg.tok, (size_t)r->cfg.max_prompt_tokens);
    if (!err.msg[0] && e->rendered.len > max_bytes) {  // refused untokenized: a 1 GiB opening would take tens of GB
        snprintf(why, sizeof why, "the opening %s has %zu bytes, more than %d tokens can hold (%zu: --max-prompt-tokens)",
                 raw ? "prompt" : "messages render", e->rendered.len, r->cfg.max_prompt_tokens, max_bytes);
        ep_fail(r, k, why);
        return;
    }
    // an ad-hoc completion's prompt is plain text: the post_processor's <bos> leads it, as a plain
    // prompt in a dataset (and vLLM's /v1/completions); a template wrote a conversation's own
    if (err.msg[0] || (raw ? tokenizer_encode_text : tokenizer_encode)(r->cfg.tok, (char *)e->rendered.data,
                                                                       e->rendered.len, &ids, &err) < 0) {
        token_ids_free(&ids);
        snprintf(why, sizeof why, "the opening %s: %s", raw ? "prompt" : "messages", err.msg[0] ? err.msg : "out of memory");
        ep_fail(r, k, why);
        return;
    }
    if (ids.len < 1 || ids.len > (size_t)r->cfg.max_prompt_tokens) {
        snprintf(why, sizeof why, "the opening %s as %zu tokens (1..%d accepted: --max-prompt-tokens)",
                 raw ? "prompt is" : "messages render", ids.len, r->cfg.max_prompt_tokens);
        token_ids_free(&ids);
        ep_fail(r, k, why);
        return;
    }
    e->open = ids.data;
    e->n_open = (int)ids.len;
    e->state = EP_QUEUED;
}

// Tokens as text for JSON and the template: decoded, invalid UTF-8 replaced
// (a model can sample a partial character). out is reset first. 0 / -1.
static int decode_text(Episodes *r, const int32_t *ids, int n, bool skip_special, Buf *out, PailErr *err) {
    buf_reset(out);
    if (tokenizer_decode_text(r->cfg.tok, ids, (size_t)n, skip_special, out, err) < 0) return -1;
    return buf_append(out, "", 0) < 0 ? err_set(err, PAIL_ERR_NOMEM, "out of memory") : 0;
}

static bool starts_with(const Buf *s, const Buf *prefix) {
    return s->len >= prefix->len && !memcmp(s->data, prefix->data, prefix->len);
}

// The text the template adds for the new messages (the history's last n_new; see episode.h) into r->a,
// with T(H + assistant + new) in r->b. 0, or -1 (err says why).
static int new_text(Episodes *r, Ep *e, const char *gen_text, const char *stop_text, size_t n_new, PailErr *err) {
    Buf *a = &r->a, *b = &r->b;
    // T(H) + A against T(H + assistant + new).
    buf_reset(a);
    if (buf_append(a, e->rendered.data, e->rendered.len) < 0 || buf_append(a, gen_text, strlen(gen_text)) < 0)
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    if (render(r, e->history, e->tools, b, err) < 0) return -1;
    if (starts_with(b, a)) {
        size_t skip = a->len;
        buf_reset(a);
        return buf_append(a, b->data + skip, b->len - skip) < 0 ? err_set(err, PAIL_ERR_NOMEM, "out of memory") : 0;
    }
    // The fixed one-exchange history.
    r->stats.prefix_fallbacks++;
    json_t *base = json_pack("[{s:s, s:s}]", "role", "user", "content", ".");
    json_t *ext = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "user", "content", ".", "role", "assistant", "content", ".");
    for (size_t i = json_array_size(e->history) - n_new; i < json_array_size(e->history); i++)
        json_array_append(ext, json_array_get(e->history, i));  // the new messages: the history's last n_new
    int rc = -1;
    Buf c = {0};
    if (base && ext && render(r, base, e->tools, a, err) == 0 && buf_append(a, ".", 1) == 0 &&
        chat_render(r->cfg.chat, ext, e->tools, true, &c, err) == 0) {
        if (c.len >= a->len && !memcmp(c.data, a->data, a->len)) {
            size_t skip = a->len, sl = stop_text ? strlen(stop_text) : 0;
            if (sl && c.len - skip >= sl && !memcmp(c.data + skip, stop_text, sl)) skip += sl;  // already in the row
            buf_reset(a);
            if (buf_append(a, c.data + skip, c.len - skip) == 0) rc = 0;
            else err_set(err, PAIL_ERR_NOMEM, "out of memory");
        } else {
            err_set(err, PAIL_ERR_INVALID, "the chat template renders earlier turns differently once new messages follow, "
                    "and the new messages differently after a one-exchange history: no tokens for them "
                    "(doc/environments.md)");
        }
    }
    buf_free(&c);
    json_decref(base);
    json_decref(ext);
    return rc;
}

// The program's next messages after a turn: appended to the history and, as
// the tokens the template adds for them, to the row; fed into the slot.
static void on_messages(Episodes *r, int k, json_t *messages) {
    Ep *e = &r->eps[k];
    char why[700];
    if (e->final_sent) {
        ep_fail(r, k, "answered the last turn (\"final\": true) or an \"end\" with messages: a reward was expected");
        return;
    }
    PailErr err = {0};
    Buf gen = {0}, content = {0};
    int nt = e->n - e->turn_start;
    // The turn as the model produced it (A: special tokens kept) and as its message's content.
    if (decode_text(r, e->ids + e->turn_start, nt, false, &gen, &err) < 0 ||
        decode_text(r, e->ids + e->turn_start, nt, true, &content, &err) < 0) {
        buf_free(&gen);
        buf_free(&content);
        ep_fail(r, k, "decoding its turn: out of memory");
        return;
    }
    const char *stop_text = e->stop_tok ? tokenizer_token_text(r->cfg.tok, e->ids[e->n - 1]) : NULL;
    json_array_append_new(e->history, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                                content.data ? (char *)content.data : ""));
    json_array_extend(e->history, messages);
    int nrc = new_text(r, e, gen.data ? (char *)gen.data : "", stop_text, json_array_size(messages), &err);
    buf_free(&gen);
    buf_free(&content);
    if (nrc < 0) {
        snprintf(why, sizeof why, "after turn %d: %s", e->turns, err.msg);
        ep_fail(r, k, why);
        return;
    }
    TokenIds ids = {0};
    if (tokenizer_encode(r->cfg.tok, (char *)r->a.data, r->a.len, &ids, &err) < 0) {
        token_ids_free(&ids);
        snprintf(why, sizeof why, "after turn %d: tokenizing the new messages: %s", e->turns, err.msg);
        ep_fail(r, k, why);
        return;
    }
    // T(H) for the next turn: the template's text now.
    buf_reset(&e->rendered);
    if (buf_append(&e->rendered, r->b.data, r->b.len) < 0) {
        token_ids_free(&ids);
        ep_fail(r, k, "out of memory");
        return;
    }
    if (e->n + (int)ids.len >= r->cfg.max_episode_tokens) {  // no room for them and a token of the next turn
        token_ids_free(&ids);
        e->finish = FINISH_LENGTH;
        e->final_sent = true;
        e->state = EP_WAIT_REWARD;
        release_slot(r, e);
        PailErr qerr = {0};
        if (env_end(r->cfg.env, k, "max_episode_tokens", &qerr) < 0) ep_fail(r, k, qerr.msg);
        return;
    }
    memcpy(e->ids + e->n, ids.data, ids.len * sizeof(int32_t));
    memset(e->lp + e->n, 0, ids.len * sizeof(float));
    memset(e->mask + e->n, 0, ids.len);
    // The turn's last sampled token was never fed (its turn ended at it): it goes first.
    e->feed = e->ids + e->n - 1;
    e->n_feed = (int)ids.len + 1;
    e->n += (int)ids.len;
    e->turn_start = e->n;
    r->stats.appended_tokens += (int64_t)ids.len;
    token_ids_free(&ids);
    e->state = EP_RUNNING;
}

// An ad-hoc request: one turn of its messages (or raw prompt) with its own
// sampling settings (params, checked by the implementation; clamped here).
static void start_extra(Episodes *r, EnvEvent *ev) {
    Ep *e = &r->eps[ev->k];
    ep_clear(e);
    e->extra = true;
    e->state = EP_OPENING;
    e->smp = r->cfg.sampler;
    e->max_turn = r->cfg.max_turn_tokens;
    json_t *p = ev->params, *v;
    if ((v = json_object_get(p, "temperature")) && json_is_number(v)) e->smp.temperature = (float)json_number_value(v);
    if ((v = json_object_get(p, "top_p")) && json_is_number(v)) e->smp.top_p = (float)json_number_value(v);
    if ((v = json_object_get(p, "top_k")) && json_is_integer(v)) e->smp.top_k = (int)json_integer_value(v);
    if ((v = json_object_get(p, "max_tokens")) && json_is_integer(v) && json_integer_value(v) > 0)
        e->max_turn = (int)json_integer_value(v);
    if (e->max_turn > r->cfg.max_episode_tokens - 1) e->max_turn = r->cfg.max_episode_tokens - 1;
    if (e->max_turn < 1) e->max_turn = 1;
    if ((v = json_object_get(p, "seed")) && json_is_integer(v)) rng_seed(&e->rng, (uint64_t)json_integer_value(v), 0);
    else rng_seed(&e->rng, 0x9e3779b97f4a7c15ull ^ r->extra_seq, 1);
    r->extra_seq++;
    on_opening(r, ev->k, ev->messages, ev->tools);
}

// The agent resent its history edited: the row so far is kept as a segment
// and a new one starts from the edited history (see episode.h). A history
// that does not begin with the episode's opening, or does not fit, is refused
// (the episode goes on as it was).
static void on_segment(Episodes *r, int k, json_t *messages) {
    Ep *e = &r->eps[k];
    Env *env = r->cfg.env;
    char why[700];
    if (e->state != EP_WAIT_ENV || e->slot < 0 || !messages || e->final_sent) {
        env_refuse(env, k, "the episode is not waiting for messages");
        return;
    }
    PailErr err = {0};
    Buf text = {0};
    TokenIds ids = {0};
    if (render(r, messages, e->tools, &text, &err) < 0 ||
        tokenizer_encode(r->cfg.tok, (char *)text.data, text.len, &ids, &err) < 0) {
        snprintf(why, sizeof why, "the edited history: %s", err.msg[0] ? err.msg : "out of memory");
        goto refuse;
    }
    int rest = (int)ids.len - e->n_open;
    if (rest < 1 || memcmp(ids.data, e->open, (size_t)e->n_open * sizeof(int32_t))) {
        snprintf(why, sizeof why, "the edited history does not begin with the episode's opening (its first "
                 "messages, as rendered): a new segment must keep them");
        goto refuse;
    }
    if (rest + 1 >= r->cfg.max_episode_tokens) {
        snprintf(why, sizeof why, "the edited history renders as %d tokens after the opening, and a segment holds "
                 "%d (--max-episode-tokens)", rest, r->cfg.max_episode_tokens);
        goto refuse;
    }
    EpisodeSeg *ns = realloc(e->segs, (size_t)(e->n_segs + 1) * sizeof *ns);
    EpisodeSeg sg = {.n = e->n, .turns = e->turns - e->seg_turns, .finish = e->finish};
    int32_t *sid = malloc((size_t)(e->n ? e->n : 1) * sizeof *sid);
    float *slp = malloc((size_t)(e->n ? e->n : 1) * sizeof *slp);
    uint8_t *sm = malloc((size_t)(e->n ? e->n : 1));
    if (ns) e->segs = ns;
    if (!ns || !sid || !slp || !sm) {
        free(sid);
        free(slp);
        free(sm);
        snprintf(why, sizeof why, "out of memory for a segment");
        goto refuse;
    }
    memcpy(sid, e->ids, (size_t)e->n * sizeof *sid);
    memcpy(slp, e->lp, (size_t)e->n * sizeof *slp);
    memcpy(sm, e->mask, (size_t)e->n);
    sg.ids = sid, sg.logprobs = slp, sg.mask = sm;
    e->segs[e->n_segs++] = sg;
    e->seg_turns = e->turns;
    // The new row: the edited history after the opening (mask 0), prefilled after the opening's KV.
    memcpy(e->ids, ids.data + e->n_open, (size_t)rest * sizeof(int32_t));
    memset(e->lp, 0, (size_t)rest * sizeof(float));
    memset(e->mask, 0, (size_t)rest);
    e->n = e->turn_start = rest;
    e->finish = FINISH_STOP;
    json_decref(e->history);
    e->history = json_deep_copy(messages);
    buf_reset(&e->rendered);
    buf_append(&e->rendered, text.data, text.len);
    if (kvcache_fork_prefix(r->kv, e->slot, e->slot, e->n_open, &err) < 0) {
        buf_free(&text);
        token_ids_free(&ids);
        ep_fail(r, k, err.msg);
        return;
    }
    e->feed = e->ids;
    e->n_feed = rest;
    r->stats.appended_tokens += rest;
    r->stats.segments++;
    e->state = EP_RUNNING;
    buf_free(&text);
    token_ids_free(&ids);
    return;
refuse:
    buf_free(&text);
    token_ids_free(&ids);
    env_refuse(env, k, why);
}

static void on_event(Episodes *r, EnvEvent *ev) {
    if (ev->k < 0 || ev->k >= r->cap) return;
    Ep *e = &r->eps[ev->k];
    if (ev->k >= r->nb && e->state == EP_DONE && ev->type == ENV_MESSAGES) { start_extra(r, ev); return; }
    if (e->state == EP_DONE) return;
    switch (ev->type) {
    case ENV_FAILED:
        ep_fail(r, ev->k, ev->why);
        break;
    case ENV_REWARD:
        if (e->state == EP_OPENING) { ep_fail(r, ev->k, "the program ended the episode before its first turn"); break; }
        e->valid = true;
        e->reward = ev->reward;
        e->comps = ev->components ? json_incref(ev->components) : NULL;
        e->state = EP_DONE;
        release_slot(r, e);
        break;
    case ENV_MESSAGES:
        if (e->state == EP_OPENING) on_opening(r, ev->k, ev->messages, ev->tools);
        else on_messages(r, ev->k, ev->messages);
        break;
    case ENV_SEGMENT:
        on_segment(r, ev->k, ev->messages);
        break;
    }
}

// A turn is over: its text and tool calls go to the program.
static void end_turn(Episodes *r, int k) {
    Ep *e = &r->eps[k];
    const EpisodeConfig *c = &r->cfg;
    e->turns++;
    r->stats.turns++;
    PailErr err = {0};
    Buf text = {0};
    json_t *calls = NULL;
    char *content = NULL, *reasoning = NULL;
    bool full = e->n >= c->max_episode_tokens - 1;  // no room for another turn
    e->final_sent = e->extra || e->turns >= c->max_turns || full;
    // The row's finish is its last turn's: cut at --max-new-tokens or by the episode's tokens is "length".
    e->finish = full || !e->stopped ? FINISH_LENGTH : FINISH_STOP;
    int rc = decode_text(r, e->ids + e->turn_start, e->n - e->turn_start, true, &text, &err);
    if (rc == 0) rc = tool_calls_parse(c->tool_format, text.data ? (char *)text.data : "", &calls, &content,
                                       &reasoning, &err);
    json_t *f = rc < 0 ? NULL : json_pack("{s:i, s:s, s:o, s:s, s:b, s:{s:i, s:i}}", "turn", e->turns, "text",
                                          text.data ? (char *)text.data : "", "tool_calls", calls, "finish",
                                          e->stopped ? "stop" : "length", "final", e->final_sent, "usage",
                                          "prompt_tokens", e->n_open + e->turn_start, "completion_tokens",
                                          e->n - e->turn_start);
    if (f && content) json_object_set_new(f, "content", json_string(content));
    if (f && reasoning) json_object_set_new(f, "reasoning", json_string(reasoning));
    free(content);
    free(reasoning);
    buf_free(&text);
    if (!f || env_step(c->env, k, f, &err) < 0) {
        json_decref(f);
        ep_fail(r, k, err.msg[0] ? err.msg : "out of memory for a step");
        return;
    }
    json_decref(f);
    if (e->extra) {  // answered: the request is over
        e->state = EP_DONE;
        release_slot(r, e);
    } else if (e->final_sent) {
        e->state = EP_WAIT_REWARD;
        release_slot(r, e);
    } else {
        e->state = EP_WAIT_ENV;  // parked: the slot keeps its KV for the next turn
    }
}

// Appends a sampled token; ends the turn when it is a stop id, a stop string
// ends it, or the turn's or the episode's tokens ran out.
static void on_token(Episodes *r, int k, int32_t tok, float lp) {
    Ep *e = &r->eps[k];
    const EpisodeConfig *c = &r->cfg;
    e->ids[e->n] = tok;
    e->lp[e->n] = lp;
    e->mask[e->n] = 1;
    e->n++;
    e->stop_tok = false;
    for (int i = 0; i < c->n_stop_ids; i++) e->stop_tok |= tok == c->stop_ids[i];
    e->stopped = e->stop_tok;
    bool over = e->stopped || e->n - e->turn_start >= e->max_turn || e->n >= c->max_episode_tokens - 1;
    if (!over && c->stop_fn && c->stop_fn(c->stop_ctx, e->ids + e->turn_start, e->n - e->turn_start))
        over = e->stopped = true;
    if (!over && env_token(c->env, k, e->ids + e->turn_start, e->n - e->turn_start)) over = e->stopped = true;
    if (over) {
        end_turn(r, k);
    } else {
        e->feed = e->ids + e->n - 1;
        e->n_feed = 1;
    }
}

// Queued episodes into free slots, in order. The KV of a row only grows, so
// when an episode of the same group holds the same opening in its slot, the
// opening but its last token is copied from there and only that token is fed
// (for its logits); one whose twin is still prefilling it waits for that
// call. A group's openings, usually alike, are prefilled once.
static int admit(Episodes *r, int N, PailErr *err) {
    int G = r->cfg.group_size;
    for (int k = 0; k < r->cap; k++) {
        if (k == N) k = r->nb;  // then the ad-hoc requests
        if (k >= r->cap) break;
        Ep *e = &r->eps[k];
        if (e->state != EP_QUEUED) continue;
        int src = -1;
        bool wait = false;
        for (int j = k - k % G; !e->extra && j < k - k % G + G && e->n_open > 1 && src < 0 && !wait; j++) {
            const Ep *h = &r->eps[j];
            if (j == k || h->slot < 0 || h->n_open != e->n_open ||
                memcmp(h->open, e->open, (size_t)e->n_open * sizeof(int32_t)))
                continue;
            if (kvcache_len(r->kv, h->slot) >= e->n_open - 1) src = h->slot;
            else wait = h->state == EP_RUNNING;  // its prefill is under way
        }
        if (wait) continue;
        int s = 0;
        while (s < r->B && r->slot_ep[s] >= 0) s++;
        if (s == r->B) return 0;
        r->slot_ep[s] = k;
        e->slot = s;
        e->state = EP_RUNNING;
        kvcache_reset(r->kv, s);
        if (token_draw_seed(r->draw, s, &e->rng, err) < 0) return -1;  // the episode's stream, for its life
        e->feed = e->open;
        e->n_feed = e->n_open;
        if (src >= 0) {
            if (kvcache_fork_prefix(r->kv, s, src, e->n_open - 1, err) < 0) return -1;
            e->feed = e->open + e->n_open - 1;
            e->n_feed = 1;
            r->stats.forked_openings++;
        }
    }
    return 0;
}

static bool same_params(const SamplerConfig *a, const SamplerConfig *b) {
    return a->temperature == b->temperature && a->top_p == b->top_p && a->top_k == b->top_k && a->min_p == b->min_p;
}

// The tokens of the na sampled slots (logits row act[a], slot sampled_slot[a])
// into tok and lp: one draw on the backend for each set of sampling settings
// (one, but for ad-hoc requests that bring their own).
static int draw_rows(Episodes *r, int na, PailErr *err) {
    uint8_t *done = r->drawn;
    memset(done, 0, (size_t)na);
    for (int a0 = 0; a0 < na; a0++) {
        if (done[a0]) continue;
        const SamplerConfig *smp = &r->eps[r->slot_ep[r->sampled_slot[a0]]].smp;
        int n = 0;
        for (int a = a0; a < na; a++)
            if (!done[a] && same_params(smp, &r->eps[r->slot_ep[r->sampled_slot[a]]].smp)) {
                r->lrow[n] = r->act[a];
                r->rslot[n++] = r->sampled_slot[a];
            }
        SampleParams sp = {.temperature = smp->temperature, .top_p = smp->top_p, .min_p = smp->min_p,
                           .top_k = smp->top_k};
        if (token_draw_run(r->draw, kvcache_logits(r->kv), r->lrow, r->rslot, n, &sp, err) < 0) return -1;
        for (int a = a0, i = 0; a < na; a++)
            if (!done[a] && same_params(smp, &r->eps[r->slot_ep[r->sampled_slot[a]]].smp)) {
                r->tok[a] = token_draw_tok(r->draw)[i];
                r->lp[a] = token_draw_logp(r->draw)[i++];
                done[a] = 1;
            }
    }
    return 0;
}

// One model call over every running slot: decoding slots first (one token
// each), then chunks of prefills within the token budget. Samples the slots
// whose feed is done. 1, 0 when there was nothing to compute, -1 with err.
static int model_call(Episodes *r, PailErr *err) {
    int B = r->B, budget = r->cfg.token_budget, used = 0;
    memset(r->n_new, 0, (size_t)B * sizeof(int));
    for (int pass = 0; pass < 2; pass++)
        for (int s = 0; s < B; s++) {
            int k = r->slot_ep[s];
            if (k < 0 || r->eps[k].state != EP_RUNNING || r->n_new[s]) continue;
            Ep *e = &r->eps[k];
            if ((pass == 0) != (e->n_feed == 1)) continue;
            int take = e->n_feed < budget - used ? e->n_feed : budget - used;
            r->n_new[s] = take;
            used += take;
        }
    if (!used) return 0;  // nothing to compute
    int pos = 0, na = 0, ns = 0;
    for (int s = 0; s < B; s++) {
        if (!r->n_new[s]) continue;
        Ep *e = &r->eps[r->slot_ep[s]];
        memcpy(r->feed + pos, e->feed, (size_t)r->n_new[s] * sizeof(int32_t));
        pos += r->n_new[s];
        if (r->n_new[s] == 1 && e->n_feed == 1 && (e->feed < e->open || e->feed >= e->open + e->n_open))
            r->stats.decode_tokens++;
        else r->stats.prefill_tokens += r->n_new[s];
        e->feed += r->n_new[s];
        e->n_feed -= r->n_new[s];
        if (e->n_feed == 0) { r->act[na] = ns; r->sampled_slot[na++] = s; }
        ns++;
    }
    if (transformer_extend(r->tf, r->kv, NULL, r->n_new, r->feed, err) < 0) return err_wrap(err, "episodes");
    r->stats.model_calls++;
    if (draw_rows(r, na, err) < 0) return -1;
    for (int a = 0; a < na; a++) on_token(r, r->slot_ep[r->sampled_slot[a]], r->tok[a], r->lp[a]);
    return 1;
}

static void cancel_all(Episodes *r, int N, const char *why) {
    for (int k = 0; k < r->cap; k++)
        if ((k < N || k >= r->nb) && r->eps[k].state != EP_DONE) {
            release_slot(r, &r->eps[k]);
            r->eps[k].state = EP_DONE;
            env_cancel(r->cfg.env, k, why);
        }
}

// One round of the engine: the environment's events (waiting up to wait_ms
// for the first), admissions into free slots, then -- unless abandon_fn says
// so -- one model call. 1: something was computed, 0: nothing, 2: abandoned
// (the open episodes of the batch's n and the ad-hoc requests cancelled), -1
// with err (the same cancelled).
static int engine_round(Episodes *r, int n, int wait_ms, bool abandon, PailErr *err) {
    int nev = 0;
    if (env_poll(r->cfg.env, wait_ms, r->evs, EV_CAP, &nev, err) < 0) return -1;
    for (int i = 0; i < nev; i++) {
        on_event(r, &r->evs[i]);  // (an episode no longer open ignores its events)
        env_event_free(&r->evs[i]);
    }
    if (admit(r, n, err) < 0) return -1;
    if (abandon && r->cfg.abandon_fn && r->cfg.abandon_fn(r->cfg.abandon_ctx)) {
        cancel_all(r, n, "abandoned: a newer adapter is out and the trainer would drop what this one generates");
        return 2;
    }
    int mc = model_call(r, err);
    if (mc < 0) cancel_all(r, n, err->msg);
    return mc;
}

int episodes_run(Episodes *r, const char *prefix, json_t *const *rows, const uint64_t *seeds, int P, EpisodeOut *out,
                 PailErr *err) {
    int G = r->cfg.group_size, N = P * G;
    if (P < 1 || N > r->cap)
        return err_set(err, PAIL_ERR_INVALID, "episodes: %d rows in one run, planned for %d", P, r->cfg.max_groups);
    memset(&r->stats, 0, sizeof r->stats);
    for (int s = 0; s < r->B; s++) { r->slot_ep[s] = -1; kvcache_reset(r->kv, s); }
    Env *env = r->cfg.env;
    env_begin(env, prefix);
    for (int k = r->nb; k < r->cap; k++)  // ad-hoc requests: none in flight between runs (episodes_serve_idle)
        if (r->eps[k].state == EP_DONE) ep_clear(&r->eps[k]);
    for (int k = 0; k < N; k++) {
        Ep *e = &r->eps[k];
        ep_clear(e);
        e->state = EP_OPENING;
        e->smp = r->cfg.sampler;
        e->max_turn = r->cfg.max_turn_tokens;
        rng_seed(&e->rng, seeds[k / G], (uint64_t)(k % G));
        if (env_start(env, k, rows[k / G], err) < 0) return -1;
    }
    for (bool worked = false;;) {
        int done = 0;
        for (int k = 0; k < N; k++) done += r->eps[k].state == EP_DONE;
        for (int k = r->nb; k < r->cap; k++) done -= r->eps[k].state != EP_DONE;  // ad-hoc requests in flight
        if (done == N) break;
        // Nothing was computed: wait for the program (env_poll returns at its first event).
        int rc = engine_round(r, N, worked ? 0 : 1000, true, err);
        if (rc < 0) return -1;
        if (rc == 2) return 1;
        worked = rc > 0;
    }
    for (int k = 0; k < N; k++) {
        Ep *e = &r->eps[k];
        out[k] = (EpisodeOut){.open_ids = e->open, .n_open = e->n_open, .ids = e->ids, .logprobs = e->lp,
                              .mask = e->mask, .n = e->n, .turns = e->turns, .finish = e->finish, .valid = e->valid,
                              .reward = e->reward, .components = e->comps, .segs = e->segs,
                              .n_segs = e->n_segs};
        snprintf(out[k].why, sizeof out[k].why, "%s", e->why);
    }
    return 0;
}

int episodes_serve_idle(Episodes *r, int wait_ms, PailErr *err) {
    int64_t end = time_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    for (bool worked = false;;) {
        int active = 0;
        for (int k = r->nb; k < r->cap; k++) active += r->eps[k].state != EP_DONE;
        int64_t now = time_mono_ms();
        if (now >= end && !active) return 0;
        // No batch is open (its episodes are all over): only ad-hoc requests.
        int rc = engine_round(r, 0, worked ? 0 : now < end ? (int)(end - now < 1000 ? end - now : 1000) : 10, false, err);
        if (rc < 0) return -1;
        worked = rc > 0;
    }
}
