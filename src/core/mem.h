// Large, long-lived float buffers (weights, adapters, KV caches, optimiser
// state): 64-byte aligned, so that a row's vector loads never straddle two
// cache lines (glibc's malloc returns mmap'd blocks 16 bytes past a page: the
// single-sequence decode ran at 300 tok/s on such weights against 390 aligned),
// and advised into transparent huge pages where the kernel offers them on
// request (no measured gain here; fewer TLB misses on larger models).
// Release with free(). A family of buffers is planned into one block
// (MemPlan, as the transformer plans its activations).
#pragma once
#include <stddef.h>

void *mem_alloc_big(size_t bytes);
void *mem_calloc_big(size_t bytes);  // zero-filled

// One block for a family of buffers (llm.c's malloc_and_point): a plan
// function takes every piece from a MemPlan. Run it once with base NULL to
// size the block (the pieces come back NULL), allocate `used` bytes (64-byte
// aligned, e.g. mem_calloc_big), then run it again with base = the block.
typedef struct {
    char *base;   // NULL: the sizing pass
    size_t used;  // bytes taken so far
} MemPlan;
void *mem_plan_take(MemPlan *p, size_t bytes);  // a 64-byte aligned piece of bytes; NULL in the sizing pass
