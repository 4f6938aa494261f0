// softcap: x(n) = cap tanh(x / cap) in place (gemma2's final_logit_softcapping on
// the decode head's logits; the log-prob ops apply it to their logit chunks).
// The body is its own reference up to tanhf: softcap_forward_ref in double.
// CPU twin of kernels/softcap.cu.
#include <math.h>
#include "kernels.h"
#include "parallel.h"

static void forward_team(float *x, size_t n, float cap) {
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void softcap_forward(float *x, size_t n, float cap) { KERNEL_TEAM(forward_team(x, n, cap)); }

void softcap_forward_ref(float *x, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(cap * tanh((double)x[i] / cap));
}
