// Row packer (see pack.h).
#include "grpo/pack.h"
#include <limits.h>
#include <stddef.h>

void pack_plan(PackRow *r, MemPlan *p, int cap, int max_seqs) {
    r->cap = cap;
    r->max_seqs = max_seqs;
    r->tok = mem_plan_take(p, (size_t)cap * sizeof(int));
    r->pos = mem_plan_take(p, (size_t)cap * sizeof(int));
    r->tgt = mem_plan_take(p, (size_t)cap * sizeof(int));
    r->row_of = mem_plan_take(p, (size_t)cap * sizeof(int));
    r->cu = mem_plan_take(p, ((size_t)max_seqs + 1) * sizeof(int));
    r->off = mem_plan_take(p, ((size_t)max_seqs + 1) * sizeof(int64_t));
    r->T = r->nseq = r->nadded = r->nscored = 0;
}

void pack_reset(PackRow *r) {
    r->T = r->nseq = r->nadded = r->nscored = 0;
    r->cu[0] = 0;
    r->off[0] = 0;
}

static int seq_token(const PackSeq *s, int j) {
    return j < s->n_prompt ? s->prompt[j] : s->completion[j - s->n_prompt];
}

static int seq_scored(const PackSeq *s, int64_t j) {
    if (j < 1) return 0;
    if (s->mask) return s->mask[j] != 0;
    if (j < s->n_prompt) return 0;
    return s->cmask ? s->cmask[j - s->n_prompt] != 0 : 1;
}

int pack_rows(const PackSeq *s) {
    int64_t n = (int64_t)s->n_prompt + s->n_completion;
    if (!s->mask && !s->cmask) return s->n_completion > 0 && n > 1 ? (int)(n - 1 < INT_MAX ? n - 1 : INT_MAX) : 0;
    for (int64_t j = n - 1; j >= 1; j--)  // the tokens after the last scored one are never fed
        if (seq_scored(s, j)) return j < INT_MAX ? (int)j : INT_MAX;
    return 0;
}

int pack_scored(const PackSeq *s) {
    int64_t n = (int64_t)s->n_prompt + s->n_completion, k = 0;
    if (!s->mask && !s->cmask) k = s->n_prompt > 0 ? s->n_completion : s->n_completion - (s->n_completion > 0);
    else
        for (int64_t j = 1; j < n; j++) k += seq_scored(s, j);
    return k < INT_MAX ? (int)k : INT_MAX;
}

int pack_add(PackRow *r, const PackSeq *s) {
    int rows = pack_rows(s);
    if (r->nadded >= r->max_seqs || rows > r->cap - r->T) return -1;
    int start = r->T;
    for (int j = 0; j < rows; j++) {
        int row = start + j;
        r->tok[row] = seq_token(s, j);
        r->pos[row] = j;
        if (seq_scored(s, j + 1)) {
            r->tgt[row] = seq_token(s, j + 1);
            r->row_of[r->nscored++] = row;
        } else {
            r->tgt[row] = -1;
        }
    }
    r->T += rows;
    if (rows > 0) r->cu[++r->nseq] = r->T;
    r->off[++r->nadded] = r->nscored;
    return 0;
}
