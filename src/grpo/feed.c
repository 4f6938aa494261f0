// Rollout group supply for the trainer (see feed.h; protocol in doc/protocol.md).
#include "grpo/feed.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "core/timeutil.h"
#include "store/runlayout.h"
#include "store/versions.h"

void feed_init(Feed *f, Store *st, Store *rejects, const FeedConfig *cfg) {
    memset(f, 0, sizeof *f);
    f->st = st;
    f->rejects = rejects;
    f->cfg = *cfg;
    f->listed_lo = -1;
    f->late_listed_unix = f->late_listed_from = -1;
}

static void shard_entry_free(FeedShard *e) {
    if (e->loaded) shard_free(&e->shard);
    e->loaded = false;
}

void feed_free(Feed *f) {
    for (int i = 0; i < f->n; i++) {
        shard_entry_free(f->shards[i]);
        free(f->shards[i]);
    }
    free(f->shards);
    free(f->rec);
    free(f->seq);
    free(f->gone);
    memset(f, 0, sizeof *f);
}

static int cmp_entry(const void *a, const void *b) {
    const FeedShard *x = *(FeedShard *const *)a, *y = *(FeedShard *const *)b;
    if (x->version != y->version) return x->version < y->version ? -1 : 1;
    return strcmp(x->key, y->key);
}

static int find(const Feed *f, const char *key) {
    for (int i = 0; i < f->n; i++) if (!strcmp(f->shards[i]->key, key)) return i;
    return -1;
}

static int add_entry(Feed *f, const char *key, int64_t version) {
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        FeedShard **p = realloc(f->shards, (size_t)cap * sizeof *p);
        if (!p) return -1;
        f->shards = p;
        f->cap = cap;
    }
    FeedShard *e = calloc(1, sizeof *e);
    if (!e) return -1;
    f->shards[f->n++] = e;
    snprintf(e->key, sizeof e->key, "%s", key);
    e->version = version;
    e->n_groups = -1;
    return 0;
}

static void remove_at(Feed *f, int i) {
    shard_entry_free(f->shards[i]);
    free(f->shards[i]);
    memmove(&f->shards[i], &f->shards[i + 1], (size_t)(f->n - i - 1) * sizeof *f->shards);
    f->n--;
}

// Adds the shards under prefix (after start_after, may be NULL) not yet tracked;
// one found for a version below lo (out of the window) is logged as late.
static int list_prefix(Feed *f, const char *prefix, const char *start_after, int64_t lo, PailErr *err) {
    StoreList l = {0};
    if (store_list_all(f->st, prefix, start_after, &l, err) < 0) return -1;
    int added = 0;
    for (int i = 0; i < l.n; i++) {
        long v, seq;
        char worker[WORKER_ID_MAX + 1];
        if (run_parse_rollout(l.entries[i].key, &v, worker, sizeof worker, &seq) < 0) continue;
        if (find(f, l.entries[i].key) >= 0) continue;
        if (add_entry(f, l.entries[i].key, v) < 0) {
            store_list_free(&l);
            return err_set(err, PAIL_ERR_NOMEM, "out of memory");
        }
        if (v < lo)
            log_info("late shard %s: adapter v%ld had left the window (v%lld..) when it landed", l.entries[i].key, v,
                     (long long)lo);
        added++;
    }
    store_list_free(&l);
    if (added) qsort(f->shards, (size_t)f->n, sizeof *f->shards, cmp_entry);
    return 0;
}

static int gone_push(Feed *f, int64_t version, double now) {
    if (f->gone_n && f->gone[f->gone_n - 1].version >= version) return 0;
    if (f->gone_n == f->gone_cap) {
        int cap = f->gone_cap ? 2 * f->gone_cap : 64;
        __typeof__(f->gone) p = realloc(f->gone, (size_t)cap * sizeof *p);
        if (!p) return -1;
        f->gone = p;
        f->gone_cap = cap;
    }
    f->gone[f->gone_n].version = version;
    f->gone[f->gone_n++].left = now;
    return 0;
}

#define LATE_MAX_VERSIONS 1000  // re-listed at most this many versions below the window

static int refresh(Feed *f, int64_t current, bool late_now, PailErr *err) {
    if (f->seq) return 0;  // a replayed record names its shards
    if (f->cfg.replay) return list_prefix(f, "rollouts/", NULL, -1, err);
    int64_t lo = current - f->cfg.max_staleness;
    double now = time_mono_s();
    char prefix[64];
    if (f->listed_lo < 0 && f->cfg.late_grace_s > 0) {  // after an import: the versions below the window it tracks stay re-listed
        int64_t oldest = lo;
        for (int i = 0; i < f->n; i++) if (f->shards[i]->version < oldest) oldest = f->shards[i]->version;
        for (int64_t v = oldest < lo - LATE_MAX_VERSIONS ? lo - LATE_MAX_VERSIONS : oldest; v < lo; v++)
            if (gone_push(f, v, now) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    // The versions leaving the window are listed one last time, so that a
    // shard that landed since the last listing is counted as dropped below;
    // then they are re-listed for late_grace_s.
    int64_t from = f->listed_lo < 0 ? lo : f->listed_lo;
    if (from < lo - LATE_MAX_VERSIONS) from = lo - LATE_MAX_VERSIONS;
    for (int64_t v = from < 0 ? 0 : from; v < lo; v++) {
        run_key_rollout_dir(prefix, sizeof prefix, (long)v);
        if (list_prefix(f, prefix, NULL, lo, err) < 0) return -1;
        if (f->cfg.late_grace_s > 0 && gone_push(f, v, now) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    int drop = 0;  // versions whose grace is over
    while (drop < f->gone_n && (f->gone[drop].left + f->cfg.late_grace_s < now || f->gone_n - drop > LATE_MAX_VERSIONS))
        drop++;
    if (drop) {
        memmove(f->gone, f->gone + drop, (size_t)(f->gone_n - drop) * sizeof *f->gone);
        f->gone_n -= drop;
    }
    // The re-listing: one LIST from the oldest version in grace to the newest
    // (so it lists the window too).
    bool listed_window = false;
    if (f->gone_n && (late_now || !f->late_listed || now - f->late_listed >= f->cfg.late_every_s)) {
        char after[64];
        run_key_rollout_dir(after, sizeof after, (long)f->gone[0].version);
        after[strlen(after) - 1] = 0;  // "rollouts/v%08d": every key of that version and the newer ones
        int64_t unix_now = time_unix_s();
        if (list_prefix(f, "rollouts/", after, lo, err) < 0) return -1;
        f->late_listed = now;
        f->late_listed_unix = unix_now;
        f->late_listed_from = f->gone[0].version;
        listed_window = true;
    }
    // Out of the window: count what was not fully used as dropped, once, and
    // keep the entry while its version is re-listed (so it is not counted again).
    int64_t keep_from = f->gone_n ? f->gone[0].version : lo;
    for (int i = 0; i < f->n;) {
        FeedShard *e = f->shards[i];
        if (e->version >= lo || e->taken > 0) { i++; continue; }  // groups handed out for this step stay
        if (e->n_groups < 0 || e->used < e->n_groups) {
            f->stats.dropped++;
            if (e->n_groups > 0) f->stats.groups_dropped += e->n_groups - e->used;
            log_info("dropped %s: adapter v%lld is more than %d versions behind v%lld", e->key,
                     (long long)e->version, f->cfg.max_staleness, (long long)current);
            shard_entry_free(e);
            e->n_groups = e->used = 0;  // settled
        }
        if (e->version < keep_from) remove_at(f, i);
        else i++;
    }
    for (int64_t v = lo < 0 ? 0 : lo; v <= current && !listed_window; v++) {
        run_key_rollout_dir(prefix, sizeof prefix, (long)v);
        if (list_prefix(f, prefix, NULL, lo, err) < 0) return -1;
    }
    f->listed_lo = lo;
    return 0;
}

int feed_refresh(Feed *f, int64_t current, PailErr *err) { return refresh(f, current, false, err); }
int feed_refresh_all(Feed *f, int64_t current, PailErr *err) { return refresh(f, current, true, err); }

static void reject(Feed *f, FeedShard *e, const char *why) {
    f->stats.rejected++;
    snprintf(f->last_error, sizeof f->last_error, "%s", why);
    log_warn("rejected %s: %s", e->key, why);
    e->n_groups = 0;
    e->used = 0;
    char key[512];
    if (run_key_rejected(key, sizeof key, e->key) == 0) {
        json_t *j = json_pack("{s:s, s:s, s:I}", "key", e->key, "error", why, "time", (json_int_t)time_unix_s());
        char *text = json_dumps(j, JSON_INDENT(2));
        PailErr perr = {0};
        StorePutOpts opt = {.content_type = "application/json"};
        if (store_put(f->rejects, key, text, strlen(text), &opt, &perr) < 0)
            log_warn("could not record the rejection of %s: %s", e->key, perr.msg);
        free(text);
        json_decref(j);
    }
}

// Loads and checks one shard. 0: loaded, or rejected/vanished (n_groups = 0);
// -1: a store error worth retrying later (nothing changed).
static int load(Feed *f, FeedShard *e, PailErr *err) {
    Buf b = {0};
    PailErr gerr = {0};
    if (versioned_get(f->st, e->key, &b, &gerr) < 0) {
        buf_free(&b);
        if (gerr.code == PAIL_ERR_NETWORK || gerr.code == PAIL_ERR_AUTH) {
            *err = gerr;
            return -1;
        }
        if (gerr.code == PAIL_ERR_NOT_FOUND) {  // deleted (gc) since the listing
            e->n_groups = 0;
            return 0;
        }
        reject(f, e, gerr.msg);
        return 0;
    }
    RolloutShard *s = &e->shard;
    int rc = shard_read(s, b.data, b.len, e->key, &gerr);
    buf_free(&b);
    if (rc < 0) {
        reject(f, e, gerr.msg);
        return 0;
    }
    char why[512] = "";
    int64_t G = shard_group_size(s);
    if (s->adapter_version != e->version)
        snprintf(why, sizeof why, "shard %s: adapter_version %lld does not match its key", e->key,
                 (long long)s->adapter_version);
    else if (f->cfg.base_sha256 && strcmp(s->base_sha256, f->cfg.base_sha256))
        snprintf(why, sizeof why, "shard %s: base_sha256 %.12s... is not the run's %.12s...", e->key, s->base_sha256,
                 f->cfg.base_sha256);
    else if (f->cfg.tokenizer_sha256 && strcmp(s->tokenizer_sha256, f->cfg.tokenizer_sha256))
        snprintf(why, sizeof why, "shard %s: tokenizer_sha256 %.12s... is not the run's %.12s...", e->key,
                 s->tokenizer_sha256, f->cfg.tokenizer_sha256);
    else if (f->cfg.group_size && G != f->cfg.group_size)
        snprintf(why, sizeof why, "shard %s: groups of %lld completions, the run uses %d", e->key, (long long)G,
                 f->cfg.group_size);
    else if (!(s->temperature > 0))
        snprintf(why, sizeof why, "shard %s: temperature %g must be > 0", e->key, s->temperature);
    else if (shard_check(s, f->cfg.vocab, e->key, &gerr) < 0)
        snprintf(why, sizeof why, "%s", gerr.msg);
    if (why[0]) {
        shard_free(s);
        reject(f, e, why);
        return 0;
    }
    e->loaded = true;
    e->n_groups = (int32_t)s->P;
    if (e->used > e->n_groups) e->used = e->n_groups;
    f->stats.consumed++;
    return 0;
}

// Replay of a record: the next groups of the sequence, whatever shard they are in.
static int take_recorded(Feed *f, int want, GroupRef *out, int *got, PailErr *err) {
    while (*got < want && f->seq_pos + f->seq_taken < f->seq_n) {
        FeedShard *e = f->seq[f->seq_pos + f->seq_taken].e;
        int32_t g = f->seq[f->seq_pos + f->seq_taken].group;
        if (!e->loaded && e->n_groups != 0 && load(f, e, err) < 0) return -1;
        if (!e->loaded || g >= e->n_groups)
            return err_set(err, PAIL_ERR_INVALID, "replay: the record names group %d of %s, which %s", (int)g, e->key,
                           e->loaded ? "has fewer groups" : "was rejected (see trainer/rejected/)");
        GroupRef *r = &out[(*got)++];
        *r = (GroupRef){.src = e, .group = g, .version = e->version, .s = &e->shard};
        e->taken++;
        f->seq_taken++;
    }
    return 0;
}

int feed_take(Feed *f, int want, GroupRef *out, int *got, PailErr *err) {
    *got = 0;
    if (f->seq) return take_recorded(f, want, out, got, err);
    for (int i = 0; i < f->n && *got < want; i++) {
        FeedShard *e = f->shards[i];
        if (e->n_groups == 0) continue;
        if (e->n_groups > 0 && e->used + e->taken >= e->n_groups) continue;
        if (!e->loaded && load(f, e, err) < 0) return -1;
        while (e->loaded && e->used + e->taken < e->n_groups && *got < want) {
            GroupRef *r = &out[(*got)++];
            r->src = e;
            r->group = e->used + e->taken;
            r->version = e->version;
            r->s = &e->shard;
            e->taken++;
        }
    }
    return 0;
}

static int record_add(Feed *f, int64_t step, const char *key, int32_t group) {
    FeedRecord *last = f->rec_n ? &f->rec[f->rec_n - 1] : NULL;
    if (last && last->step == step && last->first + last->count == group && !strcmp(last->key, key)) {
        last->count++;
        return 0;
    }
    if (f->rec_n == f->rec_cap) {
        int cap = f->rec_cap ? 2 * f->rec_cap : 16;
        FeedRecord *p = realloc(f->rec, (size_t)cap * sizeof *p);
        if (!p) return -1;
        f->rec = p;
        f->rec_cap = cap;
    }
    FeedRecord *r = &f->rec[f->rec_n++];
    r->step = step;
    snprintf(r->key, sizeof r->key, "%s", key);
    r->first = group;
    r->count = 1;
    return 0;
}

void feed_record_reset(Feed *f) { f->rec_n = 0; }

int feed_replay_record(Feed *f, const FeedRecord *rec, int n, PailErr *err) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += rec[i].count;
    free(f->seq);
    if (!(f->seq = calloc((size_t)total + 1, sizeof *f->seq))) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    f->seq_n = f->seq_pos = f->seq_taken = 0;
    for (int i = 0; i < n; i++) {
        int at = find(f, rec[i].key);
        if (at < 0) {
            long v, seq;
            char worker[WORKER_ID_MAX + 1];
            if (run_parse_rollout(rec[i].key, &v, worker, sizeof worker, &seq) < 0)
                return err_set(err, PAIL_ERR_INVALID, "replay: the record names '%s', which is not a shard key",
                               rec[i].key);
            if (add_entry(f, rec[i].key, v) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
            at = f->n - 1;
        }
        for (int32_t g = 0; g < rec[i].count; g++)
            f->seq[f->seq_n++] = (__typeof__(*f->seq)){.e = f->shards[at], .group = rec[i].first + g};
    }
    return 0;
}

int feed_commit(Feed *f, const GroupRef *refs, int n, int64_t step) {
    int rc = 0;
    for (int i = 0; i < n; i++)
        if (record_add(f, step, refs[i].src->key, refs[i].group) < 0) rc = -1;
    f->seq_pos += f->seq_taken;
    f->seq_taken = 0;
    for (int i = 0; i < f->n; i++) {
        FeedShard *e = f->shards[i];
        e->used += e->taken;
        e->taken = 0;
        // Free a finished shard's data; the entry stays while its version is in
        // the window so a re-listing does not load it again.
        if (e->loaded && e->used >= e->n_groups) shard_entry_free(e);
    }
    return rc;
}

int64_t feed_pending_shards(const Feed *f) {
    if (f->seq) return f->seq_n - f->seq_pos - f->seq_taken;
    int64_t n = 0;
    for (int i = 0; i < f->n; i++)
        if (f->shards[i]->n_groups < 0 || f->shards[i]->used < f->shards[i]->n_groups) n++;
    return n;
}

int feed_export(const Feed *f, char ***keys, int64_t **versions, int32_t **n_groups, int32_t **used, int *n) {
    *n = f->n;
    *keys = calloc((size_t)f->n + 1, sizeof **keys);
    *versions = calloc((size_t)f->n + 1, sizeof **versions);
    *n_groups = calloc((size_t)f->n + 1, sizeof **n_groups);
    *used = calloc((size_t)f->n + 1, sizeof **used);
    if (!*keys || !*versions || !*n_groups || !*used) return -1;
    for (int i = 0; i < f->n; i++) {
        (*keys)[i] = f->shards[i]->key;  // borrowed
        (*versions)[i] = f->shards[i]->version;
        (*n_groups)[i] = f->shards[i]->n_groups;
        (*used)[i] = f->shards[i]->used;
    }
    return 0;
}

int feed_import(Feed *f, char *const *keys, const int64_t *versions, const int32_t *n_groups, const int32_t *used,
                int n, PailErr *err) {
    for (int i = 0; i < n; i++) {
        if (add_entry(f, keys[i], versions[i]) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
        FeedShard *e = f->shards[f->n - 1];
        e->n_groups = n_groups[i] < 0 ? -1 : n_groups[i];
        e->used = used[i];
        // A shard known to have groups left is reloaded lazily; fully used ones stay unloaded.
        if (e->n_groups > 0 && e->used < e->n_groups) e->n_groups = -1;
    }
    if (f->n > 1) qsort(f->shards, (size_t)f->n, sizeof *f->shards, cmp_entry);  // none: shards is NULL
    return 0;
}
