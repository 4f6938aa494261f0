// Small file-system helpers for main and setup code paths that read or write
// whole local files. All return 0 / -1 with PailErr.
#pragma once
#include <stddef.h>
#include "core/buf.h"
#include "core/err.h"

int fs_read_file(const char *path, Buf *out, PailErr *err);  // appends to out
// Atomic write: temp file in the same folder, fsync, rename, fsync folder.
int fs_write_file_atomic(const char *path, const void *data, size_t len, PailErr *err);
int fs_mkdirs(const char *dir, PailErr *err);  // mkdir -p, 0755
int fs_fsync_dir(const char *dir, PailErr *err);
