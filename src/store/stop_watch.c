// control/stop watched by a thread (see stop_watch.h).
#include "store/stop_watch.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "core/log.h"
#include "core/timeutil.h"
#include "store/runlayout.h"

#define STOP_WATCH_RETRY_S 5     // a HEAD still failing after this is tried again at the next look
#define STOP_WATCH_TIMEOUT_S 10  // a stalled HEAD (bounds how long closing can wait for one under way)
#define STOP_WATCH_SLICE_MS 50

struct StopWatch {
    Store *st;
    volatile sig_atomic_t *stop;
    int64_t every_ms;
    atomic_bool quit, found;
    pthread_t thread;
};

static void *watch_main(void *arg) {
    StopWatch *w = arg;
    while (!atomic_load(&w->quit)) {
        for (int64_t slept = 0; slept < w->every_ms && !atomic_load(&w->quit); slept += STOP_WATCH_SLICE_MS)
            time_sleep_ms(STOP_WATCH_SLICE_MS);
        if (atomic_load(&w->quit)) break;
        if (*w->stop) continue;  // stopping already (a signal): nothing to add
        StoreStat ss;
        PailErr e = {0};
        if (store_head(w->st, RUN_KEY_STOP, &ss, &e) < 0) continue;  // absent, or unreadable: the next look
        atomic_store(&w->found, true);
        if (!*w->stop) *w->stop = 1;
        log_info("control/stop found: stopping after the step under way (a store request still failing gives up "
                 "within its grace, as on SIGTERM)");
        break;
    }
    return NULL;
}

int stop_watch_open(StopWatch **out, const char *url, const StoreOptions *opt, volatile sig_atomic_t *stop,
                    double every_s, PailErr *err) {
    *out = NULL;
    StopWatch *w = calloc(1, sizeof *w);
    if (!w) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    StoreOptions o = opt ? *opt : (StoreOptions){0};
    if (o.retry_seconds <= 0 || o.retry_seconds > STOP_WATCH_RETRY_S) o.retry_seconds = STOP_WATCH_RETRY_S;
    if (o.timeout_seconds <= 0 || o.timeout_seconds > STOP_WATCH_TIMEOUT_S) o.timeout_seconds = STOP_WATCH_TIMEOUT_S;
    if (store_open(&w->st, url, &o, err) < 0) {
        free(w);
        return err_wrap(err, "watching %s", RUN_KEY_STOP);
    }
    w->stop = stop;
    w->every_ms = every_s > 0 ? (int64_t)(every_s * 1000) : STOP_WATCH_SLICE_MS;
    atomic_init(&w->quit, false);
    atomic_init(&w->found, false);
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        store_close(w->st);
        free(w);
        return err_set(err, PAIL_ERR_NOMEM, "watching %s: cannot start a thread", RUN_KEY_STOP);
    }
    *out = w;
    return 0;
}

bool stop_watch_found(StopWatch *w) { return w && atomic_load(&w->found); }

void stop_watch_close(StopWatch *w) {
    if (!w) return;
    atomic_store(&w->quit, true);
    pthread_join(w->thread, NULL);
    store_close(w->st);
    free(w);
}
