// Check wrappers for main() and setup code only (llm.c utils.h style): on
// failure they print what failed, file:line, the arguments and a HINT, then
// exit(1). Library code returns PailErr instead and never uses these.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "core/err.h"

FILE *fopen_check(const char *path, const char *mode, const char *file, int line);
void *malloc_check(size_t size, const char *file, int line);
void *calloc_check(size_t n, size_t size, const char *file, int line);
// Exits with status 1 printing "prog: <err->msg>" when rc != 0.
void pail_check(int rc, const PailErr *err, const char *prog);

#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)
