// scale: x *= alpha in place over n floats (granite's embedding, residual and
// attention multipliers). One body serves as reference and fast path: a single
// rounded product per value, the same bits at any thread count. CPU twin of
// kernels/scale.cu.
#include "kernels.h"
#include "parallel.h"

static void scale_team(float *x, size_t n, float alpha) {
#pragma omp for simd schedule(static) nowait
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

void scale_forward(float *x, size_t n, float alpha) { KERNEL_TEAM_IF(n >= 65536, scale_team(x, n, alpha)); }
