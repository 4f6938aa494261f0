// OpenBLAS inside kernels/ (internal): every call runs single-threaded inside an
// OpenMP team that splits the work; OpenBLAS's own pthread pool would spin
// against OpenMP's threads for the same cores.
#pragma once
#include <cblas.h>

// Set again if someone (a bench measuring OpenBLAS itself) changed it. Safe
// when every thread of a caller's region calls it (kernels/parallel.h): the
// setting is changed once, in a critical section, and only ever to 1.
static inline void blas_single_threaded(void) {
    if (openblas_get_num_threads() != 1) {
#pragma omp critical(pail_blas_threads)
        if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    }
}
