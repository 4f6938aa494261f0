// Worker threads for the relay's backend I/O (file:// reads, s3:// requests):
// the event loop never blocks on the store. Each worker owns one Store (Stores
// are single-threaded); finished jobs go back to the loop through an eventfd
// the loop reads (a write(2) is thread-safe whatever libevent's thread setup:
// event_active from a worker needs evthread locks on the base, which a base
// made before evthread_use_pthreads lacks, and corrupts its queue).
// Fairness: each access key's jobs wait in their own lane, lanes are served
// round-robin, and one key runs at most key_cap jobs at once, so 128 slow
// listings from one key delay another key's request by one job, not 128.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "relay/relay_int.h"

typedef struct {
    Pool *p;
    int idx;
} WorkerArg;

// The next job to run (under mu): the first lane from rr on with a job and a
// free share; NULL when none may run now.
static PoolJob *pick(Pool *p) {
    int cap = p->key_cap > 0 ? p->key_cap : p->n;
    PoolLane *l = p->rr ? p->rr : p->lanes;
    for (PoolLane *first = l; l;) {
        if (l->head && l->running < cap) {
            PoolJob *j = l->head;
            l->head = j->next;
            if (!l->head) l->tail = NULL;
            l->running++;
            p->rr = l->next;
            return j;
        }
        l = l->next ? l->next : p->lanes;
        if (l == first) break;
    }
    return NULL;
}

// A job of lane l finished (under mu): an idle lane is dropped.
static void lane_done(Pool *p, PoolLane *l) {
    l->running--;
    if (l->head) {
        pthread_cond_signal(&p->cv);  // l's share freed: a waiting worker may take its next job
        return;
    }
    if (l->running || l == &p->shared) return;
    for (PoolLane **pp = &p->lanes; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    if (p->rr == l) p->rr = l->next;
    free(l);
}

static void *worker_main(void *arg) {
    WorkerArg *wa = arg;
    Pool *p = wa->p;
    Store *st = p->stores[wa->idx];
    free(wa);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        PoolJob *j;
        while (!(j = pick(p)) && !p->quit) pthread_cond_wait(&p->cv, &p->mu);
        if (!j) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        pthread_mutex_unlock(&p->mu);
        j->next = NULL;
        j->run(j, st);
        pthread_mutex_lock(&p->mu);
        lane_done(p, j->lane);
        j->lane = NULL;
        if (p->done_tail) p->done_tail->next = j;
        else p->done_head = j;
        p->done_tail = j;
        pthread_mutex_unlock(&p->mu);
        uint64_t one = 1;
        while (write(p->done_fd, &one, sizeof one) < 0 && errno == EINTR) {}
    }
}

static void done_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    Pool *p = arg;
    uint64_t n;
    while (read(p->done_fd, &n, sizeof n) < 0 && errno == EINTR) {}  // EAGAIN: already drained
    pthread_mutex_lock(&p->mu);
    PoolJob *j = p->done_head;
    p->done_head = p->done_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    while (j) {
        PoolJob *next = j->next;
        j->next = NULL;
        j->done(j);
        j = next;
    }
}

int pool_start(Pool *p, struct event_base *base, int n, const char *url, const StoreOptions *opt, PailErr *err) {
    memset(p, 0, sizeof *p);
    p->done_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->lanes = &p->shared;  // always there, never freed
    p->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->done_fd < 0) return err_set(err, PAIL_ERR_IO, "relay: eventfd: %s", strerror(errno));
    p->done_ev = event_new(base, p->done_fd, EV_READ | EV_PERSIST, done_cb, p);
    if (p->done_ev && event_add(p->done_ev, NULL) < 0) return err_set(err, PAIL_ERR_IO, "relay: cannot watch the pool's eventfd");
    p->threads = calloc((size_t)n, sizeof *p->threads);
    p->stores = calloc((size_t)n, sizeof *p->stores);
    if (!p->done_ev || !p->threads || !p->stores) return err_set(err, PAIL_ERR_NOMEM, "relay: out of memory");
    p->nstores = n;
    for (int i = 0; i < n; i++)
        if (store_open(&p->stores[i], url, opt, err) < 0) return err_wrap(err, "relay backend %s", url);
    for (int i = 0; i < n; i++) {
        WorkerArg *wa = malloc(sizeof *wa);
        if (!wa) return err_set(err, PAIL_ERR_NOMEM, "relay: out of memory");
        wa->p = p;
        wa->idx = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            return err_set(err, PAIL_ERR_IO, "relay: cannot start worker thread %d", i);
        }
        p->n++;
    }
    return 0;
}

void pool_submit(Pool *p, PoolJob *j) {
    j->next = NULL;
    const char *owner = j->owner ? j->owner : "";
    pthread_mutex_lock(&p->mu);
    PoolLane *l = p->lanes;
    while (l && strcmp(l->owner, owner)) l = l->next;
    if (!l && (l = calloc(1, sizeof *l))) {
        snprintf(l->owner, sizeof l->owner, "%s", owner);
        l->next = p->lanes;
        p->lanes = l;
    }
    if (!l) l = &p->shared;  // out of memory: the relay's own lane
    j->lane = l;
    if (l->tail) l->tail->next = j;
    else l->head = j;
    l->tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void pool_stop(Pool *p) {
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
    for (PoolLane *l = p->lanes, *next; l; l = next) {
        next = l->next;
        if (l != &p->shared) free(l);
    }
    for (int i = 0; p->stores && i < p->nstores; i++)
        if (p->stores[i]) store_close(p->stores[i]);
    free(p->threads);
    free(p->stores);
    if (p->done_ev) event_free(p->done_ev);
    if (p->done_fd >= 0) close(p->done_fd);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    memset(p, 0, sizeof *p);
}
