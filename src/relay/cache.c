// Byte-bounded LRU of immutable objects (cache.h): a chained hash table for
// lookup and a doubly linked list for recency. Evicted objects live on while a
// response still references them.
#include "relay/cache.h"
#include <stdlib.h>
#include <string.h>

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int cache_init(Cache *c, uint64_t limit) {
    memset(c, 0, sizeof *c);
    c->limit = limit;
    c->nbuckets = 4096;
    c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
    return c->buckets ? 0 : -1;
}

static void obj_free(CacheObj *o) {
    free(o->key);
    free(o->data);
    free(o);
}

void cache_unref(CacheObj *o) {
    if (o && --o->refs == 0) obj_free(o);
}

static void lru_unlink(Cache *c, CacheObj *o) {
    if (o->prev) o->prev->next = o->next;
    else c->head = o->next;
    if (o->next) o->next->prev = o->prev;
    else c->tail = o->prev;
    o->prev = o->next = NULL;
}

static void lru_front(Cache *c, CacheObj *o) {
    o->next = c->head;
    o->prev = NULL;
    if (c->head) c->head->prev = o;
    c->head = o;
    if (!c->tail) c->tail = o;
}

static void remove_obj(Cache *c, CacheObj *o) {
    CacheObj **pp = &c->buckets[hash_str(o->key) % c->nbuckets];
    while (*pp && *pp != o) pp = &(*pp)->hnext;
    if (*pp) *pp = o->hnext;
    lru_unlink(c, o);
    c->used -= o->size;
    c->count--;
    o->in_table = false;
    cache_unref(o);
}

void cache_free(Cache *c) {
    while (c->head) remove_obj(c, c->head);
    free(c->buckets);
    c->buckets = NULL;
}

CacheObj *cache_get(Cache *c, const char *key) {
    for (CacheObj *o = c->buckets[hash_str(key) % c->nbuckets]; o; o = o->hnext)
        if (!strcmp(o->key, key)) {
            lru_unlink(c, o);
            lru_front(c, o);
            o->refs++;
            c->hits++;
            return o;
        }
    c->misses++;
    return NULL;
}

uint64_t cache_max_object(const Cache *c) {
    return c->limit / 4;
}

CacheObj *cache_put(Cache *c, const char *key, uint8_t *data, uint64_t size, const StoreStat *st) {
    CacheObj *o = calloc(1, sizeof *o);
    if (!o || !(o->key = strdup(key))) {
        free(o);
        free(data);
        return NULL;
    }
    o->data = data;
    o->size = size;
    o->stat = *st;
    o->refs = 1;
    if (size > cache_max_object(c) || c->limit == 0) return o;
    cache_invalidate(c, key);
    while (c->tail && c->used + size > c->limit) remove_obj(c, c->tail);
    size_t b = hash_str(key) % c->nbuckets;
    o->hnext = c->buckets[b];
    c->buckets[b] = o;
    lru_front(c, o);
    o->in_table = true;
    o->refs++;
    c->used += size;
    c->count++;
    return o;
}

void cache_invalidate(Cache *c, const char *key) {
    for (CacheObj *o = c->buckets[hash_str(key) % c->nbuckets]; o; o = o->hnext)
        if (!strcmp(o->key, key)) {
            remove_obj(c, o);
            return;
        }
}
