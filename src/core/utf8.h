// Making text from outside valid UTF-8: what an --env program, a reward program, a file or a
// client writes may hold any bytes, and JSON (jansson refuses invalid UTF-8) and logs must not.
// One rule everywhere: each maximal invalid subpart becomes one U+FFFD (what Rust's
// from_utf8_lossy and Python's errors='replace' do). Validation only; no normalization.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"

// Appends s[0..len) to out with invalid sequences replaced. 0 / -1 on out of memory.
int utf8_append_lossy(Buf *out, const uint8_t *s, size_t len);
// The same into a fixed buffer: dst (cap > 0) receives the valid text, NUL-terminated, cut at a
// character boundary when it does not fit. Returns the bytes of s consumed (len when it all fit).
size_t utf8_lossy_copy(char *dst, size_t cap, const char *s, size_t len);
// Byte offset of the first invalid UTF-8 sequence, or -1 when s is valid.
long utf8_invalid_at(const uint8_t *s, size_t len);
