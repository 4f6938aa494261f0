// Next tokens drawn on the backend (see draw.h): one backend block planned in
// token_draw_init, one host block for what crosses.
#include "rollout/draw.h"
#include <stdlib.h>
#include <string.h>
#include "core/mem.h"

struct TokenDraw {
    Backend *be;         // borrowed
    int slots, V, n_stop;
    // Pieces of dev (backend memory):
    uint64_t *d_rng;     // (slots, 4) the streams
    int *d_lrow, *d_rslot;
    int32_t *d_stop;     // (n_stop)
    void *d_out;         // (slots) int32 tokens, (slots) float log-probs, (slots) stop flags: one copy back
    void *d_ws;          // the sampler's workspace
    size_t ws_bytes;
    void *dev;           // owned
    void *h_out;         // owned: the host side of d_out
};

static size_t out_bytes(int n) { return (size_t)n * (sizeof(int32_t) + sizeof(float) + 1); }

static void plan(TokenDraw *d, MemPlan *p) {
    size_t S = (size_t)d->slots;
    d->d_rng = mem_plan_take(p, S * 4 * sizeof(uint64_t));
    d->d_lrow = mem_plan_take(p, S * sizeof(int));
    d->d_rslot = mem_plan_take(p, S * sizeof(int));
    d->d_stop = mem_plan_take(p, ((size_t)d->n_stop + 1) * sizeof(int32_t));
    d->d_out = mem_plan_take(p, out_bytes(d->slots));
    d->d_ws = mem_plan_take(p, d->ws_bytes);
}

int token_draw_init(TokenDraw **out, Backend *be, int slots, int V, const int32_t *stop_ids, int n_stop,
                    bool truncation, PailErr *err) {
    *out = NULL;
    TokenDraw *d = calloc(1, sizeof *d);
    if (!d) return err_set(err, PAIL_ERR_NOMEM, "token draw: out of memory");
    d->be = be;
    d->slots = slots;
    d->V = V;
    d->n_stop = n_stop;
    SampleParams worst = {.temperature = 1, .top_p = truncation ? 0.5 : 1, .top_k = truncation ? 1 : 0};
    d->ws_bytes = be->ops->sample_ws(be, slots, V, &worst);
    MemPlan dry = {0};
    plan(d, &dry);
    d->h_out = malloc(out_bytes(slots));
    if (!d->h_out || !(d->dev = be->ops->alloc(be, dry.used, err))) {
        token_draw_free(d);
        return err_set(err, PAIL_ERR_NOMEM, "the sampler's buffers (%zu KiB for %d rows over %d tokens) on %s",
                       dry.used >> 10, slots, V, be->desc);
    }
    MemPlan real = {d->dev, 0};
    plan(d, &real);
    if (n_stop && be->ops->to_device(be, d->d_stop, stop_ids, (size_t)n_stop * sizeof(int32_t), err) < 0) {
        token_draw_free(d);
        return err_wrap(err, "the sampler's stop ids");
    }
    *out = d;
    return 0;
}

void token_draw_free(TokenDraw *d) {
    if (!d) return;
    if (d->dev) d->be->ops->release(d->be, d->dev);
    free(d->h_out);
    free(d);
}

int token_draw_seed(TokenDraw *d, int slot, const Rng *r, PailErr *err) {
    return d->be->ops->to_device(d->be, d->d_rng + 4 * (size_t)slot, r->s, sizeof r->s, err);
}

int token_draw_stream(TokenDraw *d, int slot, Rng *r, PailErr *err) {
    return d->be->ops->to_host(d->be, r->s, d->d_rng + 4 * (size_t)slot, sizeof r->s, err);
}

int token_draw_run(TokenDraw *d, const float *logits, const int *lrow, const int *rslot, int n, const SampleParams *sp,
                   PailErr *err) {
    if (n < 1) return 0;
    if (n > d->slots) return err_set(err, PAIL_ERR_INVALID, "token draw: %d rows, planned for %d", n, d->slots);
    const BackendOps *o = d->be->ops;
    int32_t *tok = d->d_out;
    float *lp = (float *)(tok + d->slots);
    uint8_t *st = (uint8_t *)(lp + d->slots);
    if (o->to_device(d->be, d->d_lrow, lrow, (size_t)n * sizeof(int), err) < 0 ||
        o->to_device(d->be, d->d_rslot, rslot, (size_t)n * sizeof(int), err) < 0 ||
        o->sample(d->be, tok, lp, st, d->d_rng, logits, d->d_lrow, d->d_rslot, n, d->V, sp, d->d_stop, d->n_stop,
                  d->d_ws, d->ws_bytes, err) < 0 ||
        o->to_host(d->be, d->h_out, d->d_out, out_bytes(d->slots), err) < 0)
        return err_wrap(err, "sampling %d rows", n);
    return 0;
}

const int32_t *token_draw_tok(const TokenDraw *d) { return d->h_out; }
const float *token_draw_logp(const TokenDraw *d) { return (const float *)((const int32_t *)d->h_out + d->slots); }
const uint8_t *token_draw_stopped(const TokenDraw *d) {
    return (const uint8_t *)(token_draw_logp(d) + d->slots);
}
