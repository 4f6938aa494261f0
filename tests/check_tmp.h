// Scratch folders for the Check suites: made under /tmp, removed whole.
#pragma once
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

// dir (cap bytes) becomes a fresh /tmp/pail-<tag>-XXXXXX.
static inline void tmp_make(char *dir, size_t cap, const char *tag) {
    snprintf(dir, cap, "/tmp/pail-%s-XXXXXX", tag);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static inline void tmp_remove(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
