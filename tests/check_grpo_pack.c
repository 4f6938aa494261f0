// Check suite for src/grpo/pack.c: several sequences in one row (tokens,
// positions, cu_seqlens, targets and the scored-token map as the trainer, the
// SFT warm-up and grpo-ctl logprobs read them), a train mask with holes, a
// multi-turn completion mask, the
// budget's edges, and sequences that do not fit or have nothing scored.
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "grpo/pack.h"

typedef struct {
    PackRow r;
    void *block;
} Row;

static void row_open(Row *w, int cap, int max_seqs) {
    MemPlan dry = {0};
    pack_plan(&w->r, &dry, cap, max_seqs);
    ck_assert_ptr_null(w->r.tok);
    w->block = mem_calloc_big(dry.used);
    ck_assert_ptr_nonnull(w->block);
    MemPlan real = {w->block, 0};
    pack_plan(&w->r, &real, cap, max_seqs);
    ck_assert_uint_eq(real.used, dry.used);
    pack_reset(&w->r);
}

static void row_close(Row *w) { free(w->block); }

// Two GRPO samples (prompt + completion, the completion scored): the layout
// the trainer's loss reads (rows, targets, row_of, per-sequence offsets).
START_TEST(test_prompt_completion) {
    Row w;
    row_open(&w, 32, 32);
    PackRow *r = &w.r;
    int32_t p1[] = {10, 11, 12}, c1[] = {20, 21}, p2[] = {30}, c2[] = {40, 41, 42};
    PackSeq a = {.prompt = p1, .n_prompt = 3, .completion = c1, .n_completion = 2};
    PackSeq b = {.prompt = p2, .n_prompt = 1, .completion = c2, .n_completion = 3};
    ck_assert_int_eq(pack_rows(&a), 4);  // the last completion token is predicted, never fed
    ck_assert_int_eq(pack_add(r, &a), 0);
    ck_assert_int_eq(pack_add(r, &b), 0);
    ck_assert_int_eq(r->T, 7);
    ck_assert_int_eq(r->nseq, 2);
    ck_assert_int_eq(r->nadded, 2);
    ck_assert_int_eq(r->nscored, 5);
    int tok[] = {10, 11, 12, 20, 30, 40, 41}, pos[] = {0, 1, 2, 3, 0, 1, 2}, tgt[] = {-1, -1, 20, 21, 40, 41, 42};
    for (int t = 0; t < 7; t++) {
        ck_assert_int_eq(r->tok[t], tok[t]);
        ck_assert_int_eq(r->pos[t], pos[t]);
        ck_assert_int_eq(r->tgt[t], tgt[t]);
    }
    ck_assert_int_eq(r->cu[0], 0);
    ck_assert_int_eq(r->cu[1], 4);
    ck_assert_int_eq(r->cu[2], 7);
    int row_of[] = {2, 3, 4, 5, 6};
    for (int q = 0; q < 5; q++) {
        ck_assert_int_eq(r->row_of[q], row_of[q]);
        ck_assert_int_eq(r->tgt[r->row_of[q]] >= 0, 1);
    }
    ck_assert(r->off[0] == 0 && r->off[1] == 2 && r->off[2] == 5);
    // the scored token's index in its sequence is the position of its row + 1
    ck_assert_int_eq(r->pos[r->row_of[2]] + 1, 1);
    pack_reset(r);
    ck_assert(r->T == 0 && r->nseq == 0 && r->nadded == 0 && r->nscored == 0 && r->cu[0] == 0 && r->off[0] == 0);
    row_close(&w);
}
END_TEST

// A multi-turn row: one token list and a mask with holes (the user's turn in
// the middle is context). Only masked tokens get a target; the tokens after
// the last scored one take no row.
START_TEST(test_mask_holes) {
    Row w;
    row_open(&w, 16, 4);
    PackRow *r = &w.r;
    int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t m[] = {1, 0, 1, 1, 0, 0, 1, 0};  // m[0] is ignored; token 7 is not scored
    PackSeq s = {.prompt = ids, .n_prompt = 8, .mask = m};
    ck_assert_int_eq(pack_rows(&s), 6);
    ck_assert_int_eq(pack_add(r, &s), 0);
    ck_assert_int_eq(r->T, 6);
    int tgt[] = {-1, 3, 4, -1, -1, 7};
    for (int t = 0; t < 6; t++) {
        ck_assert_int_eq(r->tok[t], ids[t]);
        ck_assert_int_eq(r->tgt[t], tgt[t]);
    }
    ck_assert_int_eq(r->nscored, 3);
    ck_assert(r->row_of[0] == 1 && r->row_of[1] == 2 && r->row_of[2] == 5);
    // The same tokens split over prompt and completion with a mask: the mask
    // wins over the split.
    PackSeq s2 = {.prompt = ids, .n_prompt = 3, .completion = ids + 3, .n_completion = 5, .mask = m};
    ck_assert_int_eq(pack_add(r, &s2), 0);
    for (int t = 0; t < 6; t++) {
        ck_assert_int_eq(r->tok[6 + t], ids[t]);
        ck_assert_int_eq(r->tgt[6 + t], tgt[t]);
        ck_assert_int_eq(r->pos[6 + t], t);
    }
    ck_assert(r->cu[1] == 6 && r->cu[2] == 12 && r->off[2] == 6);
    row_close(&w);
}
END_TEST

// A multi-turn episode's completion: the model's tokens (cmask 1) are scored,
// the environment's (cmask 0) are context; its trailing environment tokens
// take no row. The behaviour log-prob index the trainer reads (row position +
// 1 - n_prompt) lands on the scored completion tokens.
START_TEST(test_completion_mask) {
    Row w;
    row_open(&w, 16, 4);
    PackRow *r = &w.r;
    int32_t p[] = {10, 11}, c[] = {20, 21, 22, 23, 24, 25};
    uint8_t cm[] = {1, 0, 0, 1, 1, 0};
    PackSeq s = {.prompt = p, .n_prompt = 2, .completion = c, .n_completion = 6, .cmask = cm};
    ck_assert_int_eq(pack_rows(&s), 6);  // token 25 (the environment's, last) is never fed
    ck_assert_int_eq(pack_scored(&s), 3);
    ck_assert_int_eq(pack_add(r, &s), 0);
    ck_assert(r->T == 6 && r->nseq == 1 && r->cu[1] == 6 && r->nscored == 3 && r->off[1] == 3);
    int tok[] = {10, 11, 20, 21, 22, 23}, tgt[] = {-1, 20, -1, -1, 23, 24};
    for (int t = 0; t < 6; t++) {
        ck_assert_int_eq(r->tok[t], tok[t]);
        ck_assert_int_eq(r->pos[t], t);
        ck_assert_int_eq(r->tgt[t], tgt[t]);
    }
    int row_of[] = {1, 4, 5}, cidx[] = {0, 3, 4};
    for (int q = 0; q < 3; q++) {
        ck_assert_int_eq(r->row_of[q], row_of[q]);
        ck_assert_int_eq(r->pos[r->row_of[q]] + 1 - s.n_prompt, cidx[q]);
    }
    // All ones is the unmasked completion; all zeros scores nothing and takes no row.
    uint8_t ones[] = {1, 1, 1, 1, 1, 1}, zeros[6] = {0};
    PackSeq a = {.prompt = p, .n_prompt = 2, .completion = c, .n_completion = 6, .cmask = ones};
    PackSeq plain = {.prompt = p, .n_prompt = 2, .completion = c, .n_completion = 6};
    PackSeq none = {.prompt = p, .n_prompt = 2, .completion = c, .n_completion = 6, .cmask = zeros};
    ck_assert(pack_rows(&a) == pack_rows(&plain) && pack_rows(&a) == 7);
    ck_assert(pack_scored(&a) == pack_scored(&plain) && pack_scored(&a) == 6);
    ck_assert(pack_rows(&none) == 0 && pack_scored(&none) == 0);
    ck_assert_int_eq(pack_add(r, &none), 0);
    ck_assert(r->T == 6 && r->nseq == 1 && r->nadded == 2 && r->off[2] == 3);
    // A full-sequence mask wins over cmask; no prompt: completion token 0 is never scored.
    uint8_t m[] = {0, 0, 1, 1, 0, 0, 0, 0};
    PackSeq both = {.prompt = p, .n_prompt = 2, .completion = c, .n_completion = 6, .mask = m, .cmask = cm};
    ck_assert(pack_rows(&both) == 3 && pack_scored(&both) == 2);
    PackSeq bare = {.completion = c, .n_completion = 6, .cmask = cm};
    ck_assert(pack_rows(&bare) == 4 && pack_scored(&bare) == 2);
    PackSeq bare_plain = {.completion = c, .n_completion = 6};
    ck_assert(pack_rows(&bare_plain) == 5 && pack_scored(&bare_plain) == 5);
    row_close(&w);
}
END_TEST

// The budget's edges: a sequence that exactly fills what is left goes in, one
// row more does not (and leaves the row as it was); max_seqs bounds the count;
// a sequence longer than the budget never fits.
START_TEST(test_budget_edges) {
    Row w;
    row_open(&w, 8, 3);
    PackRow *r = &w.r;
    int32_t ids[16];
    for (int i = 0; i < 16; i++) ids[i] = 100 + i;
    PackSeq five = {.prompt = ids, .n_prompt = 2, .completion = ids + 2, .n_completion = 4};  // 5 rows
    PackSeq four = {.prompt = ids, .n_prompt = 1, .completion = ids + 1, .n_completion = 3};  // 3 rows
    PackSeq big = {.prompt = ids, .n_prompt = 1, .completion = ids + 1, .n_completion = 8};   // 8 rows
    PackSeq huge = {.prompt = ids, .n_prompt = 1, .completion = ids + 1, .n_completion = 9};  // 9 rows
    ck_assert_int_eq(pack_add(r, &five), 0);
    ck_assert_int_eq(pack_add(r, &five), -1);  // 5 + 5 > 8
    ck_assert(r->T == 5 && r->nadded == 1 && r->nscored == 4 && r->cu[1] == 5);
    ck_assert_int_eq(pack_add(r, &four), 0);   // 5 + 3 = 8: exactly full
    ck_assert_int_eq(r->T, 8);
    PackSeq none = {.prompt = ids, .n_prompt = 4};  // nothing scored: no row, still counted
    ck_assert_int_eq(pack_add(r, &none), 0);
    ck_assert(r->nadded == 3 && r->nseq == 2 && r->off[3] == r->off[2]);
    ck_assert_int_eq(pack_add(r, &none), -1);  // max_seqs
    pack_reset(r);
    ck_assert_int_eq(pack_add(r, &big), 0);    // the whole budget
    pack_reset(r);
    ck_assert_int_eq(pack_rows(&huge), 9);
    ck_assert_int_eq(pack_add(r, &huge), -1);  // longer than the budget: never fits
    ck_assert(r->T == 0 && r->nadded == 0);
    row_close(&w);
}
END_TEST

// Sequences with nothing to score: one token (grpo-ctl logprobs prints []),
// an empty completion, an all-zero mask; and an empty prompt, whose first
// completion token nothing predicts.
START_TEST(test_nothing_scored) {
    Row w;
    row_open(&w, 8, 8);
    PackRow *r = &w.r;
    int32_t ids[] = {5, 6, 7};
    uint8_t zero[3] = {0}, all[3] = {1, 1, 1};
    PackSeq one = {.prompt = ids, .n_prompt = 1, .mask = all};
    PackSeq empty_c = {.prompt = ids, .n_prompt = 3};
    PackSeq masked = {.prompt = ids, .n_prompt = 3, .mask = zero};
    PackSeq c_only = {.completion = ids, .n_completion = 1};
    ck_assert_int_eq(pack_rows(&one), 0);
    ck_assert_int_eq(pack_rows(&empty_c), 0);
    ck_assert_int_eq(pack_rows(&masked), 0);
    ck_assert_int_eq(pack_rows(&c_only), 0);
    ck_assert_int_eq(pack_add(r, &one), 0);
    ck_assert_int_eq(pack_add(r, &empty_c), 0);
    ck_assert_int_eq(pack_add(r, &masked), 0);
    ck_assert(r->T == 0 && r->nseq == 0 && r->nadded == 3 && r->nscored == 0);
    PackSeq no_prompt = {.completion = ids, .n_completion = 3};  // tokens 1 and 2 scored
    ck_assert_int_eq(pack_rows(&no_prompt), 2);
    ck_assert_int_eq(pack_add(r, &no_prompt), 0);
    ck_assert(r->T == 2 && r->nseq == 1 && r->cu[1] == 2 && r->nscored == 2 && r->off[3] == 0 && r->off[4] == 2);
    ck_assert(r->tgt[0] == 6 && r->tgt[1] == 7 && r->row_of[0] == 0);
    PackSeq all_lp = {.prompt = ids, .n_prompt = 3, .mask = all};  // logprobs: every token after the first
    ck_assert_int_eq(pack_add(r, &all_lp), 0);
    ck_assert(r->T == 4 && r->tgt[2] == 6 && r->tgt[3] == 7 && r->nscored == 4);
    row_close(&w);
}
END_TEST

int main(void) {
    Suite *s = suite_create("grpo_pack");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_prompt_completion);
    tcase_add_test(core, test_mask_holes);
    tcase_add_test(core, test_completion_mask);
    tcase_add_test(limits, test_budget_edges);
    tcase_add_test(limits, test_nothing_scored);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
