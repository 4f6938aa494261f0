// control/stop looked for by a thread of its own, whatever the caller's thread
// is doing: a step, a publish whose request is still failing (a full disk, a
// relay answering 5xx, slow listings), a resume. When the key is there it sets
// the caller's stop flag once, as SIGTERM does, so every wait that honours the
// signal honours control/stop too (a request in retries ends within the grace
// of retry_stop_on, retry.h). It only reads (a HEAD every every_s) through a
// store handle of its own, with a short retry budget.
#pragma once
#include <signal.h>
#include <stdbool.h>
#include "core/err.h"
#include "store/store.h"

typedef struct StopWatch StopWatch;

// Starts watching RUN_KEY_STOP under url (opened with opt, its retry budget cut
// to 5 s, its stall timeout to 10 s). *stop is set to 1 (never lowered) when
// the key is found.
int stop_watch_open(StopWatch **out, const char *url, const StoreOptions *opt, volatile sig_atomic_t *stop,
                    double every_s, PailErr *err);
// True once the watch found control/stop (w may be NULL: false).
bool stop_watch_found(StopWatch *w);
// Ends the thread (within ~50 ms, or once a HEAD under way ends: at most ~15 s
// against a relay that never answers) and frees w (NULL: nothing).
void stop_watch_close(StopWatch *w);
