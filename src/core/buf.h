// Growable byte buffer (owned memory). Used for HTTP bodies, object contents,
// JSON text. Always keeps a NUL after the data so text can be read as a string.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;  // owned, len bytes + a NUL
    size_t len, cap;
} Buf;

int buf_reserve(Buf *b, size_t extra);  // 0 / -1 on out of memory
int buf_append(Buf *b, const void *data, size_t len);
int buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(Buf *b);  // len = 0, keeps capacity
void buf_free(Buf *b);
