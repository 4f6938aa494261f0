// In-memory LRU cache of immutable objects for the relay, bounded in bytes.
// Objects are reference counted so a response can send a cached body without
// copying while the cache evicts it. Loop thread only (no locks).
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "core/buf.h"
#include "store/store.h"

typedef struct CacheObj {
    char *key;                   // owned
    uint8_t *data;               // owned, size bytes
    uint64_t size;
    StoreStat stat;
    int refs;                    // holders: the table (when in_table) + responses
    bool in_table;
    struct CacheObj *prev, *next;  // LRU order, most recent first
    struct CacheObj *hnext;
} CacheObj;

typedef struct {
    CacheObj **buckets;          // owned
    size_t nbuckets;
    CacheObj *head, *tail;
    uint64_t used, limit;
    long hits, misses, count;
} Cache;

int cache_init(Cache *c, uint64_t limit);
void cache_free(Cache *c);
// A referenced object (caller cache_unref's it), or NULL. Moves it to the front.
CacheObj *cache_get(Cache *c, const char *key);
// Wraps data (taken over, malloc'd) into an object with one reference for the
// caller; inserts it when it fits (size <= limit / 4), evicting the least
// recently used. Returns NULL on out of memory (data is freed).
CacheObj *cache_put(Cache *c, const char *key, uint8_t *data, uint64_t size, const StoreStat *st);
void cache_unref(CacheObj *o);
void cache_invalidate(Cache *c, const char *key);
uint64_t cache_max_object(const Cache *c);
