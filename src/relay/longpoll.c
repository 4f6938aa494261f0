// ListObjectsV2 and pail's long-poll extension (x-pail-wait=SECONDS): a LIST
// that finds nothing after start-after is parked until a key appears under its
// prefix or its deadline passes. Writes through the relay wake matching waiters
// at once; a periodic re-LIST catches writers that bypass the relay. Waiters
// with the same query share one backend LIST (200 workers waiting on
// adapters/ cost one LIST per wake-up).
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "relay/listindex.h"
#include "relay/relay_int.h"

static void list_run(PoolJob *j, Store *st) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    const RelayRoute *rt = &q->route;
    q->rc = 0;
    if (rt->max_keys == 0) {  // S3: an empty page (the store reads 0 as "the default")
        buf_reset(&q->out);
        relay_xml_list(&q->out, q->r->bucket, rt, &q->list);
        return;
    }
    StoreListOpts o = {.prefix = rt->prefix,
                       .start_after = rt->start_after[0] ? rt->start_after : NULL,
                       .continuation = rt->token[0] ? rt->token : NULL,
                       .delimiter = rt->delimiter[0] ? rt->delimiter : NULL,
                       .max_keys = rt->max_keys};
    q->rc = store_list(st, &o, &q->list, &q->err);
    // The file store ends a delimited page's token inside the last common
    // prefix, so the next page would repeat it; continue past the whole group
    // instead ("\xff" sorts after every UTF-8 key under the prefix).
    StoreList *l = &q->list;
    if (q->rc == 0 && q->r->cfg.root && rt->delimiter[0] && l->truncated && l->nprefixes) {
        const char *cp = l->prefixes[l->nprefixes - 1];
        if (!l->n || strcmp(cp, l->entries[l->n - 1].key) > 0)
            snprintf(l->next_token, sizeof l->next_token, "%s\xff", cp);
    }
    // The XML here, not on the event loop: a 1000-key page is ~250 KB of text,
    // and the loop serves every other key's requests.
    buf_reset(&q->out);
    if (q->rc == 0) relay_xml_list(&q->out, q->r->bucket, rt, l);
}

static void unpark(Relay *r, RelayReq *q) {
    for (RelayReq **pp = &r->waiters; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            q->next = NULL;
            r->nwaiters--;
            break;
        }
    if (q->deadline_ev) {
        event_free(q->deadline_ev);
        q->deadline_ev = NULL;
    }
}

// Sends the (possibly empty) listing in xml to q.
static void reply_xml(RelayReq *q, Buf *xml) {
    if (q->state == RQ_WAITING) unpark(q->r, q);
    relay_reply_buf(q, 200, "application/xml", xml);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    RelayReq *q = arg;
    if (q->relisting) {  // answered when its re-list comes back
        q->expired = true;
        return;
    }
    StoreList empty = {0};
    Buf b = {0};
    relay_xml_list(&b, q->r->bucket, &q->route, &empty);
    reply_xml(q, &b);
    buf_free(&b);
}

void longpoll_park(RelayReq *q) {
    Relay *r = q->r;
    q->state = RQ_WAITING;
    q->next = r->waiters;
    r->waiters = q;
    r->nwaiters++;
    q->deadline_ev = evtimer_new(r->base, deadline_cb, q);
    struct timeval tv = {q->route.wait_s, 0};
    evtimer_add(q->deadline_ev, &tv);
}

static void list_done(PoolJob *j) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    Relay *r = q->r;
    bool found = q->rc == 0 && (q->list.n > 0 || q->list.nprefixes > 0 || q->list.truncated);
    RelayReq *members = q->group;
    q->group = NULL;
    q->relisting = false;
    if (q->rc < 0 && q->state != RQ_WAITING) {  // the first LIST failed: say so
        for (RelayReq *m = members, *next; m; m = next) {
            next = m->group;
            m->group = NULL;
            m->relisting = false;
        }
        relay_reply_store_error(q);
        return;
    }
    if (q->rc < 0) log_warn("relay: long-poll re-list under '%s' failed: %s", q->route.prefix, q->err.msg);
    Buf xml = q->out;  // built by list_run; q may be freed by its own answer below
    q->out = (Buf){0};
    if (q->rc < 0) {
        StoreList empty = {0};
        relay_xml_list(&xml, r->bucket, &q->route, &empty);
    }
    // The leader and every follower: answer, or (nothing yet) stay parked.
    RelayReq *all = q;
    q->group = members;
    for (RelayReq *m = all, *next; m; m = next) {
        next = m->group;
        m->group = NULL;
        m->relisting = false;
        bool waits = m->route.wait_s > 0 && !r->stopping;
        if (found || m->expired || !waits) {
            reply_xml(m, &xml);
        } else if (m->state != RQ_WAITING) {
            longpoll_park(m);
        }
    }
    buf_free(&xml);
}

void relay_list_submit(RelayReq *q) {
    store_list_free(&q->list);
    q->job.run = list_run;
    q->job.done = list_done;
    if (q->state != RQ_WAITING) q->state = RQ_JOB;
    pool_submit(&q->r->pool, &q->job);
}

static bool same_query(const RelayRoute *a, const RelayRoute *b) {
    return a->list_v2 == b->list_v2 && a->max_keys == b->max_keys && a->encoding_url == b->encoding_url &&
           !strcmp(a->prefix, b->prefix) && !strcmp(a->start_after, b->start_after) && !strcmp(a->token, b->token) &&
           !strcmp(a->delimiter, b->delimiter);
}

// Re-lists the waiters under which key falls (all of them when key is NULL),
// one backend LIST per distinct query.
static void relist(Relay *r, const char *key) {
    RelayReq **leaders = calloc((size_t)r->nwaiters + 1, sizeof *leaders);
    int nl = 0;
    for (RelayReq *w = r->waiters; w; w = w->next) {
        if (w->relisting) continue;
        if (key && (strncmp(key, w->route.prefix, strlen(w->route.prefix)) || strcmp(key, w->route.start_after) <= 0))
            continue;
        w->relisting = true;
        w->group = NULL;
        RelayReq *lead = NULL;
        for (int i = 0; leaders && i < nl && !lead; i++)
            if (same_query(&leaders[i]->route, &w->route)) lead = leaders[i];
        if (lead) {
            w->group = lead->group;
            lead->group = w;
        } else if (leaders) {
            leaders[nl++] = w;
        } else {
            relay_list_submit(w);  // out of memory: no sharing
        }
    }
    for (int i = 0; i < nl; i++) relay_list_submit(leaders[i]);
    free(leaders);
}

void longpoll_wake_key(Relay *r, const char *key) {
    if (r->waiters) relist(r, key);
}

void longpoll_tick(Relay *r) {
    if (r->waiters) relist(r, NULL);
}

void longpoll_drain(Relay *r) {
    StoreList empty = {0};
    for (RelayReq *w = r->waiters, *next; w; w = next) {
        next = w->next;
        if (w->relisting) {
            w->expired = true;
            continue;
        }
        Buf b = {0};
        relay_xml_list(&b, r->bucket, &w->route, &empty);
        reply_xml(w, &b);
        buf_free(&b);
    }
}

int relay_list_start(Relay *r, PailErr *err) {
    RelayConfig *c = &r->cfg;
    int cap = c->threads_per_key ? c->threads_per_key : c->threads - c->threads / 4;
    if (cap < 1) cap = 1;
    if (cap > c->threads)
        return err_set(err, PAIL_ERR_INVALID, "relay: --threads-per-key %d is more than --threads %d", cap, c->threads);
    r->pool.key_cap = cap;
    if (!c->root) return 0;  // upstream: the bucket lists
    if (c->list_recheck_s <= 0) c->list_recheck_s = 1.0;
    if (listindex_open(&r->index, r->store_url + strlen("file://"), c->list_recheck_s, err) < 0) return -1;
    for (int i = 0; i < r->pool.nstores; i++) listindex_attach(r->index, r->pool.stores[i]);
    return 0;
}

void relay_list_stop(Relay *r) {
    listindex_close(r->index);
    r->index = NULL;
}
