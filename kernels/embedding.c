// embedding: gather rows of the token table, out(T,C) = table(V,C)[tokens], and
// the backward scatter-add into dtable for full fine-tuning. Token ids are
// checked here (they come from files and tokenizers). CPU twin of embedding.cu.
// embedding_forward_dt gathers from a table in a storage dtype (rows converted
// exactly, kernels/dtype.h; a quantized row dequantized as quant_dequant does).
#include <string.h>
#include "kernels.h"
#include "parallel.h"

static int tokens_check(const int *tokens, int T, int V, PailErr *err) {
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return err_set(err, PAIL_ERR_INVALID,
                           "embedding: token %d at position %d is outside the vocabulary [0, %d)",
                           tokens[t], t, V);
    return 0;
}

// The gather on a team (kernels/parallel.h); rows converted from tdt.
static void gather_team(float *out, const void *table, DType tdt, const int *tokens, int T, int C) {
    size_t row = dtype_row_bytes(tdt, (size_t)C);  // a quantized row: C a multiple of its block
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++) {
        const void *src = (const char *)table + (size_t)tokens[t] * row;
        if (tdt == DT_F32) memcpy(out + (size_t)t * C, src, sizeof(float) * C);
        else dtype_to_f32(out + (size_t)t * C, src, tdt, C);
    }
}

int embedding_forward(float *out, const float *table, const int *tokens, int T, int C, int V,
                      PailErr *err) {
    return embedding_forward_dt(out, table, DT_F32, tokens, T, C, V, err);
}

// The token check runs on every thread of a caller's team alike (the same ids),
// so a bad id takes every thread out before the gather's barrier.
int embedding_forward_dt(float *out, const void *table, DType tdt, const int *tokens, int T, int C,
                         int V, PailErr *err) {
    if (tokens_check(tokens, T, V, err)) return -1;
    KERNEL_TEAM(gather_team(out, table, tdt, tokens, T, C));
    return 0;
}

// A token may repeat, so rows of dtable collide: threads own column blocks
// instead of tokens and each walks all T tokens (no atomics, no scratch).
void embedding_backward(float *dtable, const float *dout, const int *tokens, int T, int C) {
    enum { CB = 256 };
    int nblk = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nblk; b++) {
        int c0 = b * CB, c1 = c0 + CB < C ? c0 + CB : C;
        for (int t = 0; t < T; t++) {
            float *d = dtable + (size_t)tokens[t] * C;
            const float *g = dout + (size_t)t * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

int embedding_forward_ref(float *out, const float *table, const int *tokens, int T, int C,
                          int V, PailErr *err) {
    if (tokens_check(tokens, T, V, err)) return -1;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) out[(size_t)t * C + c] = table[(size_t)tokens[t] * C + c];
    return 0;
}

void embedding_backward_ref(float *dtable, const float *dout, const int *tokens, int T, int C) {
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) dtable[(size_t)tokens[t] * C + c] += dout[(size_t)t * C + c];
}
