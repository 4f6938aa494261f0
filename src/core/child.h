// A child program behind three pipes, for the programs pail talks to in JSON
// lines (the cmd reward, environment programs): started with /bin/sh -c in its
// own process group (posix_spawn: nothing of the caller's memory is copied),
// every pipe non-blocking, the tail of its stderr kept for messages, stopped by
// killing its whole group. The protocol on top is the caller's.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "core/err.h"

#define CHILD_TAIL 2048  // stderr bytes kept
#define CHILD_BACKOFF_MAX_MS 10000  // the longest wait before a restart

typedef struct {
    pid_t pid;            // -1 when not running; also its process group id
    int in, out, err;     // our ends of its stdin / stdout / stderr, -1 when closed
    char tail[CHILD_TAIL];  // the last bytes of its stderr
    size_t tail_len;
} Child;

void child_init(Child *c);  // not running
// Starts `sh -c cmd`; what names it in messages ("reward cmd 'x'"). 0 / -1 with err.
int child_start(Child *c, const char *cmd, const char *what, PailErr *err);
// Waits up to grace_ms for it to exit by itself, then kills its group and closes
// the pipes. how (may be NULL) gets how it ended: "exited with status 3",
// "killed by signal 9 (Killed)", "killed" (it was still running).
void child_stop(Child *c, int grace_ms, char *how, size_t cap);
void child_close_stdin(Child *c);  // EOF on its stdin: a well-behaved program exits
void child_drain_stderr(Child *c);  // reads what its stderr has, without blocking
// The last lines of its stderr on one line ("a | b | c"), "(empty)" when none.
void child_tail_text(const Child *c, char *out, size_t cap);
// How long to wait before starting a program again after `failures` failures in a
// row (>= 1): 0.25 s, doubling, at most CHILD_BACKOFF_MAX_MS.
int64_t child_backoff_ms(int failures);
// write() to its stdin that cannot raise SIGPIPE in this process (EPIPE instead).
ssize_t child_write(Child *c, const void *p, size_t n);
