// --token-budget auto (see budget.h): the rule, and grpo-train's use of it.
#include "grpo/budget.h"
#include <jansson.h>
#include <stdio.h>
#include "core/log.h"

static double gib(size_t b) { return (double)b / (1024.0 * 1024 * 1024); }

int budget_choose(int G, int max_seq, bool recompute, size_t limit, BudgetPlanFn fn, void *ctx, BudgetChoice *out,
                  PailErr *err) {
    if (max_seq < 16) max_seq = 16;
    long group = (long)G * max_seq, want = group < BUDGET_AUTO_CAP ? group : BUDGET_AUTO_CAP;
    if (want < max_seq) want = max_seq;
    if (!limit) limit = memplan_available();
    size_t first_total = 0;
    for (int pass = 0; pass < 2; pass++) {
        bool rec = recompute || pass == 1;
        if (pass == 1 && recompute) break;  // given: nothing more to turn on
        for (long T = want;; T = T / 2 > max_seq ? T / 2 : max_seq) {
            MemoryPlan mp;
            if (fn(ctx, (int)T, rec, &mp, err) < 0) return -1;
            if (!first_total) first_total = mp.total;
            if (!limit || mp.total <= limit) {
                *out = (BudgetChoice){.token_budget = (int)T, .recompute = rec, .total = mp.total, .limit = limit};
                const char *on = rec && !recompute ? " with --recompute turned on" : "";
                int n = max_seq > BUDGET_AUTO_CAP  // a long sequence: the cap gives way to it
                            ? snprintf(out->why, sizeof out->why, "%ld tokens%s: one sequence of --max-seq-tokens %d "
                                       "(past the cap of %d: a micro-batch holds the longest)", T, on, max_seq,
                                       BUDGET_AUTO_CAP)
                            : snprintf(out->why, sizeof out->why, "%ld tokens%s: a group of %d x --max-seq-tokens %d = "
                                       "%ld, at most %d", T, on, G, max_seq, group, BUDGET_AUTO_CAP);
                if (T < want || (rec && !recompute))
                    n += snprintf(out->why + n, sizeof out->why - (size_t)n, "; %ld tokens%s would need %.2f GiB", want,
                                  rec && !recompute ? " without it" : "", gib(first_total));
                if (limit)
                    snprintf(out->why + n, sizeof out->why - (size_t)n, "; the plan's %.2f GiB fits %.2f GiB", gib(mp.total),
                             gib(limit));
                return 0;
            }
            if (T == max_seq) break;
        }
    }
    MemoryPlan mp;  // nothing fits: the smallest, which the caller's check refuses with its sizes
    if (fn(ctx, max_seq, true, &mp, err) < 0) return -1;
    *out = (BudgetChoice){.token_budget = max_seq, .recompute = true, .total = mp.total, .limit = limit};
    snprintf(out->why, sizeof out->why, "%d tokens with --recompute: no budget of at least --max-seq-tokens %d fits "
             "%.2f GiB (the smallest plan needs %.2f GiB)", max_seq, max_seq, gib(limit), gib(mp.total));
    return 0;
}

static int train_plan(void *ctx, int T, bool recompute, MemoryPlan *mp, PailErr *err) {
    TrainerConfig t = *(const TrainerConfig *)ctx;
    t.token_budget = T;
    t.recompute = recompute;
    return trainer_memplan(&t, mp, err);
}

int train_budget_choose(TrainerConfig *c, PailErr *err) {
    BudgetChoice ch;
    int seq = c->max_seq_tokens > 0 ? c->max_seq_tokens : BUDGET_MAX_SEQ_DEFAULT;
    if (budget_choose(c->group_size, seq, c->recompute, c->max_memory, train_plan, c, &ch, err) < 0) return -1;
    c->token_budget = ch.token_budget;
    c->recompute = ch.recompute;
    log_info("--token-budget auto: %s", ch.why);
    if (c->effective) {
        json_object_set_new(c->effective, "token-budget", json_integer(c->token_budget));
        json_object_set_new(c->effective, "recompute", json_boolean(c->recompute));
    }
    return 0;
}
