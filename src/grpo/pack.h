// The row packer: lays sequences end to end into one packed row for
// transformer_forward (tokens, positions, cu_seqlens, targets) and maps every
// scored token to the row that predicts it. A per-token train mask says which
// tokens are scored (their log-prob computed and trained on): the completion
// of a GRPO sample, the assistant turns of an SFT row, every token after the
// first for grpo-ctl logprobs; the tokens a multi-turn episode's model
// generated, not the environment's, through a completion mask. Row r of a sequence feeds its token r and
// predicts token r + 1, so a sequence takes as many rows as the index of its
// last scored token (the tokens after it are never fed) and its token 0 is
// never scored. It only lays out tokens: no model, no loss.
#pragma once
#include <stdint.h>
#include "core/mem.h"

typedef struct {   // one sequence: prompt then completion (either may be empty), borrowed
    const int32_t *prompt;
    int n_prompt;
    const int32_t *completion;
    int n_completion;
    const uint8_t *mask;  // NULL: the completion's tokens are scored (see cmask); else (n_prompt + n_completion)
                          // flags, 1 = scored (mask[0] is ignored: nothing predicts token 0)
    const uint8_t *cmask; // NULL: every completion token is scored; else (n_completion) flags, used when mask
                          // is NULL: 1 = scored (a multi-turn episode's own tokens), 0 = context (the
                          // environment's tokens)
} PackSeq;

typedef struct {
    int cap;           // rows (the token budget T)
    int max_seqs;      // sequences one row takes
    int *tok, *pos;    // (cap) input token and its position in its sequence
    int *tgt;          // (cap) the token the row predicts, -1 where it is not scored
    int *cu;           // (max_seqs + 1) cu_seqlens of the packed sequences (those with a row)
    int *row_of;       // (cap) the row predicting each scored token, sequence by sequence, in order
    int64_t *off;      // (max_seqs + 1) scored tokens of the i-th added sequence: [off[i], off[i + 1])
    int T;             // rows used
    int nseq;          // sequences in cu (an added sequence with nothing scored takes no row)
    int nadded;        // sequences added
    int nscored;       // scored tokens = off[nadded]
} PackRow;

// Takes the row's buffers from a plan (see core/mem.h): both passes.
void pack_plan(PackRow *r, MemPlan *p, int cap, int max_seqs);
void pack_reset(PackRow *r);  // empty the row
// Rows s needs: the index of its last scored token (0: nothing is scored).
int pack_rows(const PackSeq *s);
// Tokens of s that are scored (pack_add adds as many to nscored).
int pack_scored(const PackSeq *s);
// Appends s. 0, or -1 when it does not fit the rows or sequences left (the row
// is unchanged; a sequence refused by an empty row never fits: pack_rows > cap).
int pack_add(PackRow *r, const PackSeq *s);
