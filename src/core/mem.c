#include "core/mem.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { HUGE_PAGE = 2u << 20 };

void *mem_alloc_big(size_t bytes) {
    if (bytes < HUGE_PAGE) return aligned_alloc(64, ((bytes ? bytes : 1) + 63) & ~(size_t)63);
    size_t n = (bytes + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, n);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, n, MADV_HUGEPAGE);  // advice only: a no-op without THP
#endif
    return p;
}

void *mem_calloc_big(size_t bytes) {
    void *p = mem_alloc_big(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void *mem_plan_take(MemPlan *p, size_t bytes) {
    void *at = p->base ? p->base + p->used : NULL;
    p->used += (bytes + 63) & ~(size_t)63;
    return at;
}
