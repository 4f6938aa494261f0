// The relay's listing index for a --root (file://) backend: every folder's
// sorted names, read once at start and kept current by the relay's own writes
// and deletes, so a LIST page costs O(page + depth * log n) instead of a walk
// and sort of the whole tree. Changes made to --root behind the relay's back
// are found through folder mtimes (see listindex.c). Not for --upstream.
// Thread safety: every function but open/close may be called from any thread.
#pragma once
#include "core/err.h"
#include "store/store.h"

typedef struct ListIndex ListIndex;

// Reads the tree under root (an absolute folder). recheck_s: a folder's mtime
// is looked at again at most this often (outside changes show within it).
int listindex_open(ListIndex **out, const char *root, double recheck_s, PailErr *err);
// After every Store that listindex_attach wrapped is closed.
void listindex_close(ListIndex *ix);
// Wraps st (a file:// Store on ix's root): its puts and deletes update ix once
// they are on disk, and its listings come from ix.
void listindex_attach(ListIndex *ix, Store *st);
// The relay wrote (exists) or deleted key: visible to the next listing.
void listindex_note(ListIndex *ix, const char *key, bool exists);
// One page, as store_list; each listed key is stat'ed (size, mtime, etag) on st,
// so a key deleted in the meantime is never listed.
int listindex_list(ListIndex *ix, Store *st, const StoreListOpts *opt, StoreList *out, PailErr *err);

typedef struct {
    long keys, folders, scans;  // names known, folders read, folder reads since open
} ListIndexStats;
void listindex_stats(ListIndex *ix, ListIndexStats *out);
