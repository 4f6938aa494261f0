// Exit-on-failure wrappers for main() and setup code (see check.h).
#include "core/check.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

FILE *fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f) {
        fprintf(stderr, "error: cannot open '%s' (mode %s): %s\n  at %s:%d\n"
                "  HINT: check that the path exists and is readable/writable\n",
                path, mode, strerror(errno), file, line);
        exit(1);
    }
    return f;
}

void *malloc_check(size_t size, const char *file, int line) {
    void *p = malloc(size ? size : 1);
    if (!p) {
        fprintf(stderr, "error: out of memory allocating %zu bytes\n  at %s:%d\n"
                "  HINT: reduce the batch or token budget\n", size, file, line);
        exit(1);
    }
    return p;
}

void *calloc_check(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "error: out of memory allocating %zu x %zu bytes\n  at %s:%d\n"
                "  HINT: reduce the batch or token budget\n", n, size, file, line);
        exit(1);
    }
    return p;
}

void pail_check(int rc, const PailErr *err, const char *prog) {
    if (rc == 0) return;
    fprintf(stderr, "%s: %s\n", prog, err && err->msg[0] ? err->msg : "failed");
    exit(1);
}
