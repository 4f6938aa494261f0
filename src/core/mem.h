// Large, long-lived float buffers (weights, adapters, KV caches, optimiser
// state): 64-byte aligned, so that a row's vector loads never straddle two
// cache lines (glibc's malloc returns mmap'd blocks 16 bytes past a page: the
// single-sequence decode ran at 300 tok/s on such weights against 390 aligned),
// and advised into transparent huge pages where the kernel offers them on
// request (no measured gain here; fewer TLB misses on larger models).
// Release with free().
#pragma once
#include <stddef.h>

void *mem_alloc_big(size_t bytes);
void *mem_calloc_big(size_t bytes);  // zero-filled
