// The relay's listing index for --root (doc/relay.md, "Listing index"): one
// node per folder holding its names sorted as the keys they start sort (a
// folder "a" as "a/"), so an in-order walk of the tree is the keys in byte
// order and a page is one seek (a binary search per level) plus a step per key.
// Freshness: the relay's own puts and deletes change the index as soon as they
// are on disk (listindex_note). Changes made behind the relay's back are found
// by a folder's mtime and inode, looked at when a listing passes the folder and
// at most once per recheck interval; a changed folder (or one whose mtime is
// within 2 s of its last read, when a change in the same timestamp tick could
// hide) is read again, alone. Every listed key is stat'ed, so a deleted key is
// never listed. Not here: the S3 XML (xmlout.c), the long-poll (longpoll.c).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/log.h"
#include "core/timeutil.h"
#include "relay/listindex.h"

#define IX_MAX_DEPTH 64  // folders deeper than this are not listed (as the file store's walk)
#define IX_RACY_S 2      // a folder modified this close to its read is read again at the next check
#define IX_PATH (STORE_MAX_KEY + 300)
#define IX_BATCH 128  // keys a listing walks per hold of the index's lock

typedef struct Node Node;

// What a listing shows of a key, as of the file's inode, change and
// modification times and size: while they are unchanged (one stat), the etag
// needs no read of the file's metadata.
typedef struct {
    uint64_t ino, size;
    int64_t mtime_ns, ctime_ns;
    char etag[40];
} KeyMeta;

typedef struct {
    uint32_t off;  // name in the node's arena
    uint16_t len;
    uint8_t dir;
    Node *child;    // a folder's node (owned)
    KeyMeta *meta;  // a key's, once listed (owned; NULL until then)
} Ent;

typedef struct {
    char *name;  // owned
    bool dir, exists;
} Pending;

struct Node {
    char *arena;  // names (not terminated); removed names stay until the next read
    size_t alen, acap;
    Ent *ents;  // sorted by name, a folder's name with '/' appended
    int n, cap;
    bool scanned;           // read at least once
    bool scanning;          // being read by the thread holding scan_mu
    bool racy;              // modified within IX_RACY_S of its read: read again at the next check
    int64_t checked_ms;     // last read or unchanged stat (monotonic)
    struct timespec mtime;  // the folder's, at the read
    ino_t ino;              // 0: the folder did not exist
    Pending *pend;          // relay writes noted while being read: replayed on its new names
    int npend, cappend;
};

typedef struct {
    StoreBackend be;  // first: a wrapped Store's be points here
    const StoreBackend *orig;
    ListIndex *ix;
} Hook;

struct ListIndex {
    char root[4096];  // absolute, no trailing '/' ("" for "/")
    int64_t recheck_ms;
    pthread_mutex_t mu;       // the tree
    pthread_mutex_t scan_mu;  // one folder read at a time; only reads free nodes
    Node top;
    Hook hook;
    atomic_long scans;
};

// ---- names ----

static int name_at(const char *s, size_t n, bool dir, size_t i) {
    return i < n ? (unsigned char)s[i] : (i == n && dir) ? '/' :
                                                           -1;
}

// Compares a (+ '/' when adir) with b (+ '/' when bdir) as bytes.
static int cmp_names(const char *a, size_t al, bool adir, const char *b, size_t bl, bool bdir) {
    size_t m = al < bl ? al : bl;
    int c = memcmp(a, b, m);
    if (c) return c < 0 ? -1 : 1;
    for (size_t i = m; i < al + adir || i < bl + bdir; i++) {
        int x = name_at(a, al, adir, i), y = name_at(b, bl, bdir, i);
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

static const char *ent_name(const Node *nd, const Ent *e) { return nd->arena + e->off; }

// Index of (name, dir) in nd, or -(insertion point) - 1.
static int find(const Node *nd, const char *name, size_t len, bool dir) {
    int lo = 0, hi = nd->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const Ent *e = &nd->ents[mid];
        int c = cmp_names(ent_name(nd, e), e->len, e->dir, name, len, dir);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -lo - 1;
}

static void node_free(Node *nd) {
    for (int i = 0; i < nd->n; i++) {
        free(nd->ents[i].meta);
        if (nd->ents[i].child) {
            node_free(nd->ents[i].child);
            free(nd->ents[i].child);
        }
    }
    for (int i = 0; i < nd->npend; i++) free(nd->pend[i].name);
    free(nd->pend);
    free(nd->arena);
    free(nd->ents);
    memset(nd, 0, sizeof *nd);
}

static int arena_add(char **arena, size_t *alen, size_t *acap, const char *name, size_t len, uint32_t *off) {
    if (*alen + len > *acap) {
        size_t cap = *acap ? *acap * 2 : 256;
        while (cap < *alen + len) cap *= 2;
        if (cap > UINT32_MAX) return -1;
        char *a = realloc(*arena, cap);
        if (!a) return -1;
        *arena = a;
        *acap = cap;
    }
    memcpy(*arena + *alen, name, len);
    *off = (uint32_t)*alen;
    *alen += len;
    return 0;
}

// Inserts (name, dir) at position pos (from find); a folder gets an unread node.
static int insert_at(Node *nd, int pos, const char *name, size_t len, bool dir) {
    if (nd->n == nd->cap) {
        int cap = nd->cap ? nd->cap * 2 : 8;
        Ent *e = realloc(nd->ents, (size_t)cap * sizeof *e);
        if (!e) return -1;
        nd->ents = e;
        nd->cap = cap;
    }
    Ent e = {.len = (uint16_t)len, .dir = dir};
    if (dir && !(e.child = calloc(1, sizeof *e.child))) return -1;
    if (arena_add(&nd->arena, &nd->alen, &nd->acap, name, len, &e.off) < 0) {
        free(e.child);
        return -1;
    }
    memmove(&nd->ents[pos + 1], &nd->ents[pos], (size_t)(nd->n - pos) * sizeof e);
    nd->ents[pos] = e;
    nd->n++;
    return 0;
}

// Applies one noted change to nd's names. Returns the folder's node for a
// folder that exists, else NULL.
static Node *apply_change(Node *nd, const char *name, size_t len, bool dir, bool exists) {
    int i = find(nd, name, len, dir);
    if (exists && i < 0) {
        i = -i - 1;
        if (insert_at(nd, i, name, len, dir) < 0) return NULL;  // out of memory: the next read has it
    } else if (exists && i >= 0 && !dir) {                      // rewritten: its metadata is read again when next listed
        free(nd->ents[i].meta);
        nd->ents[i].meta = NULL;
    } else if (!exists && i >= 0 && !dir) {
        free(nd->ents[i].meta);
        memmove(&nd->ents[i], &nd->ents[i + 1], (size_t)(nd->n - i - 1) * sizeof *nd->ents);
        nd->n--;
        return NULL;
    }
    return i >= 0 && dir ? nd->ents[i].child : NULL;
}

// ---- reading a folder ----

typedef struct {
    char *arena;
    size_t alen, acap;
    Ent *ents;
    int n, cap;
    struct timespec mtime;
    ino_t ino;
    bool racy;
} Listing;

static __thread const char *g_sort_arena;

static int cmp_ents(const void *a, const void *b) {
    const Ent *x = a, *y = b;
    return cmp_names(g_sort_arena + x->off, x->len, x->dir, g_sort_arena + y->off, y->len, y->dir);
}

static void folder_path(const ListIndex *ix, const char *rel, char *out, size_t cap) {
    if (rel[0]) snprintf(out, cap, "%s/%s", ix->root, rel);
    else snprintf(out, cap, "%s", ix->root[0] ? ix->root : "/");
}

// Reads ROOT/rel into L (a missing folder is an empty listing with ino 0).
static int read_folder(const ListIndex *ix, const char *rel, Listing *L) {
    memset(L, 0, sizeof *L);
    char path[IX_PATH + 4096];
    folder_path(ix, rel, path, sizeof path);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat sb;
    // mtime before the names: a change after this stat moves the mtime on.
    if (fstat(fd, &sb) < 0) {
        close(fd);
        return 0;
    }
    L->mtime = sb.st_mtim;
    L->ino = sb.st_ino;
    L->racy = sb.st_mtim.tv_sec >= now.tv_sec - IX_RACY_S;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))) continue;
        if (!strncmp(name, ".pail", 5)) continue;  // sidecars and temp files
        bool dir;
        if (de->d_type == DT_DIR || de->d_type == DT_REG) {
            dir = de->d_type == DT_DIR;
        } else if (de->d_type == DT_UNKNOWN) {
            struct stat es;
            if (fstatat(dirfd(d), name, &es, AT_SYMLINK_NOFOLLOW) < 0) continue;
            if (!S_ISDIR(es.st_mode) && !S_ISREG(es.st_mode)) continue;
            dir = S_ISDIR(es.st_mode);
        } else {
            continue;  // symlinks, sockets, ...: never keys (as the file store's walk)
        }
        size_t len = strlen(name);
        if (L->n == L->cap) {
            int cap = L->cap ? L->cap * 2 : 64;
            Ent *e = realloc(L->ents, (size_t)cap * sizeof *e);
            if (!e) {
                rc = -1;
                break;
            }
            L->ents = e;
            L->cap = cap;
        }
        Ent e = {.len = (uint16_t)len, .dir = dir};
        if (arena_add(&L->arena, &L->alen, &L->acap, name, len, &e.off) < 0) {
            rc = -1;
            break;
        }
        L->ents[L->n++] = e;
    }
    closedir(d);
    g_sort_arena = L->arena;
    if (L->n) qsort(L->ents, (size_t)L->n, sizeof *L->ents, cmp_ents);
    return rc;
}

// Replaces nd's names with L's (under mu): folders that stay keep their nodes,
// then the relay's writes noted during the read are applied again.
static void apply_listing(Node *nd, Listing *L) {
    int j = 0;
    for (int i = 0; i < L->n; i++) {
        Ent *e = &L->ents[i];
        if (!e->dir) continue;
        const char *nm = L->arena + e->off;
        while (j < nd->n && cmp_names(ent_name(nd, &nd->ents[j]), nd->ents[j].len, nd->ents[j].dir, nm, e->len, true) < 0)
            j++;
        if (j < nd->n && nd->ents[j].dir && nd->ents[j].len == e->len && !memcmp(ent_name(nd, &nd->ents[j]), nm, e->len)) {
            e->child = nd->ents[j].child;
            nd->ents[j].child = NULL;
        } else {
            e->child = calloc(1, sizeof *e->child);  // NULL (out of memory): dropped below
        }
    }
    for (int i = 0; i < nd->n; i++) {
        free(nd->ents[i].meta);
        if (nd->ents[i].child) {
            node_free(nd->ents[i].child);
            free(nd->ents[i].child);
        }
    }
    free(nd->arena);
    free(nd->ents);
    nd->arena = L->arena;
    nd->alen = L->alen;
    nd->acap = L->acap;
    nd->ents = L->ents;
    nd->n = L->n;
    nd->cap = L->cap;
    int k = 0;
    for (int i = 0; i < nd->n; i++)
        if (!nd->ents[i].dir || nd->ents[i].child) nd->ents[k++] = nd->ents[i];
    nd->n = k;
    for (int i = 0; i < nd->npend; i++) {
        Pending *p = &nd->pend[i];
        apply_change(nd, p->name, strlen(p->name), p->dir, p->exists);
        free(p->name);
    }
    nd->npend = 0;
    nd->mtime = L->mtime;
    nd->ino = L->ino;
    nd->racy = L->racy;
    nd->scanned = true;
    nd->checked_ms = time_mono_ms();
}

// The node of folder rel ("" the top), or NULL when the index has none (under mu).
static Node *find_node(ListIndex *ix, const char *rel) {
    Node *nd = &ix->top;
    const char *s = rel;
    while (*s) {
        const char *slash = strchr(s, '/');
        size_t len = slash ? (size_t)(slash - s) : strlen(s);
        int i = find(nd, s, len, true);
        if (i < 0) return NULL;
        nd = nd->ents[i].child;
        s = slash ? slash + 1 : s + len;
    }
    return nd;
}

// Reads folder rel again unless someone did since want_ms (any thread, no lock held).
static void rescan(ListIndex *ix, const char *rel, int64_t want_ms) {
    pthread_mutex_lock(&ix->scan_mu);
    pthread_mutex_lock(&ix->mu);
    Node *nd = find_node(ix, rel);
    if (!nd || (nd->scanned && nd->checked_ms >= want_ms)) {
        pthread_mutex_unlock(&ix->mu);
        pthread_mutex_unlock(&ix->scan_mu);
        return;
    }
    nd->scanning = true;
    pthread_mutex_unlock(&ix->mu);
    Listing L;
    int rc = read_folder(ix, rel, &L);
    pthread_mutex_lock(&ix->mu);
    nd->scanning = false;
    if (rc == 0) {
        apply_listing(nd, &L);
    } else {  // out of memory: keep the old names, try again at the next check
        free(L.arena);
        free(L.ents);
        log_warn("relay: listing index: out of memory reading folder '%s'", rel);
    }
    pthread_mutex_unlock(&ix->mu);
    pthread_mutex_unlock(&ix->scan_mu);
    atomic_fetch_add(&ix->scans, 1);
}

// 0 when nd may be used as it is, 1 when it must be read (under mu).
static int check(ListIndex *ix, Node *nd, const char *rel, int64_t page_ms) {
    if (!nd->scanned) return 1;
    if (nd->scanning) return 0;  // being read: its names (and the relay's writes) serve meanwhile
    int64_t now = time_mono_ms();
    if (nd->checked_ms >= page_ms || now - nd->checked_ms < ix->recheck_ms) return 0;
    if (nd->racy) return 1;
    char path[IX_PATH + 4096];
    folder_path(ix, rel, path, sizeof path);
    struct stat sb;
    bool same = stat(path, &sb) == 0 ? nd->ino == sb.st_ino && nd->mtime.tv_sec == sb.st_mtim.tv_sec &&
                                           nd->mtime.tv_nsec == sb.st_mtim.tv_nsec :
                                       nd->ino == 0;
    if (!same) return 1;
    nd->checked_ms = now;
    return 0;
}

static void build(ListIndex *ix, Node *nd, char *rel, size_t rlen, int depth) {
    Listing L;
    if (read_folder(ix, rel, &L) < 0) log_warn("relay: listing index: out of memory reading folder '%s'", rel);
    apply_listing(nd, &L);
    atomic_fetch_add(&ix->scans, 1);
    if (depth >= IX_MAX_DEPTH) return;
    for (int i = 0; i < nd->n; i++) {
        Ent *e = &nd->ents[i];
        if (!e->dir || rlen + e->len + 2 >= IX_PATH) continue;
        size_t n = rlen;
        if (n) rel[n++] = '/';
        memcpy(rel + n, ent_name(nd, e), e->len);
        rel[n + e->len] = 0;
        build(ix, e->child, rel, n + e->len, depth + 1);
        rel[rlen] = 0;
    }
}

// ---- the cursor: an in-order walk from a bound ----

typedef struct {
    Node *nd;
    int i;
    size_t plen;  // length of the node's path in Cursor.path (with its '/')
} Frame;

typedef struct {
    ListIndex *ix;
    const char *prefix;
    size_t prefl;
    int64_t page_ms;
    Frame st[IX_MAX_DEPTH + 2];
    int depth;
    char path[IX_PATH];  // the current folder's path with '/', then the key found
    char need[IX_PATH];  // CUR_NEED: the folder to read
} Cursor;

enum { CUR_KEY,
       CUR_END,
       CUR_NEED };

// True when every key of entry e lies before bound b (relative to e's folder).
static bool ent_before(const Node *nd, const Ent *e, const char *b, size_t bl, bool incl) {
    const char *nm = ent_name(nd, e);
    int c = cmp_names(nm, e->len, e->dir, b, bl, false);
    if (!e->dir) return incl ? c < 0 : c <= 0;
    return c < 0 && !(bl > e->len && !memcmp(b, nm, e->len) && b[e->len] == '/');
}

static int cur_check(Cursor *c, Node *nd, size_t plen) {
    char rel[IX_PATH];
    size_t n = plen ? plen - 1 : 0;
    memcpy(rel, c->path, n);
    rel[n] = 0;
    if (!check(c->ix, nd, rel, c->page_ms)) return 0;
    memcpy(c->need, rel, n + 1);
    return 1;
}

// From the cursor's entry on: the next valid key under the prefix into c->path.
static int cur_settle(Cursor *c) {
    for (;;) {
        if (c->depth == 0) return CUR_END;
        Frame *f = &c->st[c->depth - 1];
        Node *nd = f->nd;
        if (f->i >= nd->n) {
            if (--c->depth == 0) return CUR_END;
            c->st[c->depth - 1].i++;
            continue;
        }
        const Ent *e = &nd->ents[f->i];
        size_t klen = f->plen + e->len;
        if (klen >= STORE_MAX_KEY) {  // no key can name it
            f->i++;
            continue;
        }
        memcpy(c->path + f->plen, ent_name(nd, e), e->len);
        if (e->dir) {
            c->path[klen] = '/';
            size_t m = klen + 1 < c->prefl ? klen + 1 : c->prefl;
            // Past the bound, a folder off the prefix's path lies after every key under it.
            if (memcmp(c->path, c->prefix, m)) return CUR_END;
            if (c->depth > IX_MAX_DEPTH) {
                f->i++;
                continue;
            }
            if (cur_check(c, e->child, klen + 1)) return CUR_NEED;
            c->st[c->depth++] = (Frame){e->child, 0, klen + 1};
            continue;
        }
        c->path[klen] = 0;
        if (strncmp(c->path, c->prefix, c->prefl)) return CUR_END;
        PailErr kerr = {0};
        if (store_key_check(c->path, &kerr) < 0) {  // put there behind the relay's back
            char why[sizeof kerr.msg + 64];
            snprintf(why, sizeof why, "%s; no key can name it: remove the file", kerr.msg);
            store_warn_skipped(c->ix->root, c->path, why);
            f->i++;
            continue;
        }
        return CUR_KEY;
    }
}

// Positions the cursor on the first key > bound (>= when incl).
static int cur_seek(Cursor *c, const char *bound, bool incl) {
    c->depth = 0;
    if (cur_check(c, &c->ix->top, 0)) return CUR_NEED;
    c->st[c->depth++] = (Frame){&c->ix->top, 0, 0};
    size_t blen = strlen(bound);
    for (;;) {
        Frame *f = &c->st[c->depth - 1];
        Node *nd = f->nd;
        const char *b = bound + f->plen;
        size_t bl = blen - f->plen;
        int lo = 0, hi = nd->n;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (ent_before(nd, &nd->ents[mid], b, bl, incl)) lo = mid + 1;
            else hi = mid;
        }
        f->i = lo;
        if (lo == nd->n) break;
        const Ent *e = &nd->ents[lo];
        // The bound lies inside this folder: seek within it.
        if (!e->dir || !(bl > e->len && !memcmp(b, ent_name(nd, e), e->len) && b[e->len] == '/')) break;
        if (c->depth > IX_MAX_DEPTH) {
            f->i++;
            break;
        }
        memcpy(c->path + f->plen, b, e->len + 1);
        if (cur_check(c, e->child, f->plen + e->len + 1)) return CUR_NEED;
        c->st[c->depth++] = (Frame){e->child, 0, f->plen + e->len + 1};
    }
    return cur_settle(c);
}

static int cur_next(Cursor *c) {
    c->st[c->depth - 1].i++;
    return cur_settle(c);
}

// ---- public ----

int listindex_open(ListIndex **out, const char *root, double recheck_s, PailErr *err) {
    *out = NULL;
    ListIndex *ix = calloc(1, sizeof *ix);
    if (!ix) return err_set(err, PAIL_ERR_NOMEM, "relay: out of memory");
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--;
    if (n >= sizeof ix->root) {
        free(ix);
        return err_set(err, PAIL_ERR_INVALID, "relay: --root %s: path too long", root);
    }
    memcpy(ix->root, root, n);
    ix->root[n == 1 && root[0] == '/' ? 0 : n] = 0;
    ix->recheck_ms = (int64_t)(recheck_s * 1000 + 0.5);
    if (ix->recheck_ms < 1) ix->recheck_ms = 1;
    pthread_mutex_init(&ix->mu, NULL);
    pthread_mutex_init(&ix->scan_mu, NULL);
    double t0 = time_mono_s();
    char rel[IX_PATH] = "";
    build(ix, &ix->top, rel, 0, 0);
    ListIndexStats s;
    listindex_stats(ix, &s);
    log_info("relay: listing index: %ld keys in %ld folders read in %.2f s", s.keys, s.folders, time_mono_s() - t0);
    *out = ix;
    return 0;
}

void listindex_close(ListIndex *ix) {
    if (!ix) return;
    node_free(&ix->top);
    pthread_mutex_destroy(&ix->mu);
    pthread_mutex_destroy(&ix->scan_mu);
    free(ix);
}

static void count(const Node *nd, ListIndexStats *s) {
    s->folders++;
    for (int i = 0; i < nd->n; i++) {
        if (nd->ents[i].dir) count(nd->ents[i].child, s);
        else s->keys++;
    }
}

void listindex_stats(ListIndex *ix, ListIndexStats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&ix->mu);
    count(&ix->top, out);
    pthread_mutex_unlock(&ix->mu);
    out->scans = atomic_load(&ix->scans);
}

static void pend_push(Node *nd, const char *name, size_t len, bool dir, bool exists) {
    if (nd->npend == nd->cappend) {
        int cap = nd->cappend ? nd->cappend * 2 : 8;
        Pending *p = realloc(nd->pend, (size_t)cap * sizeof *p);
        if (!p) return;
        nd->pend = p;
        nd->cappend = cap;
    }
    char *s = strndup(name, len);
    if (s) nd->pend[nd->npend++] = (Pending){s, dir, exists};
}

void listindex_note(ListIndex *ix, const char *key, bool exists) {
    pthread_mutex_lock(&ix->mu);
    Node *nd = &ix->top;
    const char *seg = key;
    while (nd && (nd->scanned || nd->scanning)) {  // an unread folder is read from the disk when first listed
        const char *slash = strchr(seg, '/');
        size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
        bool dir = slash != NULL;
        if (!dir || exists) {
            if (nd->scanning) pend_push(nd, seg, len, dir, exists);
            if (nd->scanned) nd = apply_change(nd, seg, len, dir, exists);
            else nd = NULL;
        } else {  // a delete below a folder the index does not hold: nothing to remove
            int i = find(nd, seg, len, true);
            nd = i >= 0 ? nd->ents[i].child : NULL;
        }
        if (!dir) break;
        seg = slash + 1;
    }
    pthread_mutex_unlock(&ix->mu);
}

typedef struct {
    char *key;
    bool prefix;
    bool cached;  // meta holds the index's copy
    bool fresh;   // meta was read now: store it in the index
    KeyMeta meta;
} Item;

// The entry of key (a file) in the index, or NULL (under mu).
static Ent *find_key(ListIndex *ix, const char *key) {
    const char *slash = strrchr(key, '/');
    Node *nd = &ix->top;
    if (slash) {
        char rel[IX_PATH];
        snprintf(rel, sizeof rel, "%.*s", (int)(slash - key), key);
        nd = find_node(ix, rel);
    }
    const char *base = slash ? slash + 1 : key;
    int i = nd ? find(nd, base, strlen(base), false) : -1;
    return i >= 0 ? &nd->ents[i] : NULL;
}

// Size, mtime and etag of item it's key on st: one fstatat in its folder (dfd)
// while the file is as the index saw it last, else the store's own head.
// False when the key is gone.
static bool item_stat(const Hook *h, Store *st, int dfd, Item *it, StoreStat *out) {
    const char *slash = strrchr(it->key, '/');
    struct stat sb;
    if (fstatat(dfd, slash ? slash + 1 : it->key, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode)) return false;
    int64_t mns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    int64_t cns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec;
    KeyMeta *m = &it->meta;
    if (it->cached && m->ino == sb.st_ino && m->size == (uint64_t)sb.st_size && m->mtime_ns == mns && m->ctime_ns == cns) {
        out->size = m->size;
        out->mtime = sb.st_mtim.tv_sec;
        snprintf(out->etag, sizeof out->etag, "%s", m->etag);
        return true;
    }
    PailErr herr = {0};
    if (h->orig->head(st, it->key, out, &herr) < 0) return false;
    if (strlen(out->etag) < sizeof m->etag && out->size == (uint64_t)sb.st_size) {
        *m = (KeyMeta){.ino = sb.st_ino, .size = out->size, .mtime_ns = mns, .ctime_ns = cns};
        snprintf(m->etag, sizeof m->etag, "%s", out->etag);
        it->fresh = true;
    }
    return true;
}

int listindex_list(ListIndex *ix, Store *st, const StoreListOpts *opt, StoreList *out, PailErr *err) {
    store_list_reset(out);
    const Hook *h = (const Hook *)st->be;
    const char *prefix = opt->prefix ? opt->prefix : "";
    const char *delim = opt->delimiter && *opt->delimiter ? opt->delimiter : NULL;
    int max_keys = opt->max_keys > 0 ? opt->max_keys : 1000;
    const char *after = opt->start_after;
    if (opt->continuation && (!after || strcmp(opt->continuation, after) > 0)) after = opt->continuation;
    if (strlen(prefix) > STORE_MAX_KEY || (after && strlen(after) > STORE_MAX_KEY + 8))
        return err_set(err, PAIL_ERR_INVALID, "list: prefix or marker longer than %d bytes", STORE_MAX_KEY);
    char bound[STORE_MAX_KEY + 16];
    bool incl = !(after && strcmp(after, prefix) >= 0);
    snprintf(bound, sizeof bound, "%s", incl ? prefix : after);
    Item *items = calloc((size_t)max_keys, sizeof *items);
    Cursor *c = calloc(1, sizeof *c);
    if (!items || !c) {
        free(items);
        free(c);
        return err_set(err, PAIL_ERR_NOMEM, "list: out of memory");
    }
    c->ix = ix;
    c->prefix = prefix;
    c->prefl = strlen(prefix);
    int n = 0, rc = 0, reads = 0;
    pthread_mutex_lock(&ix->mu);
    c->page_ms = time_mono_ms();
    int at = cur_seek(c, bound, incl);
    for (;;) {
        if (at == CUR_NEED) {
            if (++reads > 100000) {
                rc = err_set(err, PAIL_ERR_IO, "list: folders under '%s' keep changing", prefix);
                break;
            }
            char rel[IX_PATH];
            snprintf(rel, sizeof rel, "%s", c->need);
            int64_t want = time_mono_ms();
            pthread_mutex_unlock(&ix->mu);
            rescan(ix, rel, want);
            pthread_mutex_lock(&ix->mu);
            at = cur_seek(c, bound, incl);
            continue;
        }
        if (at == CUR_END) break;
        if (n == max_keys) {
            out->truncated = true;
            snprintf(out->next_token, sizeof out->next_token, "%s", bound);
            break;
        }
        const char *key = c->path;
        const char *dl = delim ? strstr(key + c->prefl, delim) : NULL;
        if (dl) {
            size_t cl = (size_t)(dl - key) + strlen(delim);
            if (!(items[n].key = strndup(key, cl))) {
                rc = err_set(err, PAIL_ERR_NOMEM, "list: out of memory");
                break;
            }
            items[n++].prefix = true;
            // Past every key of the group: "\xff" sorts after any UTF-8 byte.
            snprintf(bound, sizeof bound, "%.*s\xff", (int)cl, key);
            incl = false;
            at = cur_seek(c, bound, incl);
        } else {
            if (!(items[n].key = strdup(key))) {
                rc = err_set(err, PAIL_ERR_NOMEM, "list: out of memory");
                break;
            }
            const Ent *e = &c->st[c->depth - 1].nd->ents[c->st[c->depth - 1].i];
            if (e->meta) {
                items[n].meta = *e->meta;
                items[n].cached = true;
            }
            n++;
            snprintf(bound, sizeof bound, "%s", key);
            incl = false;
            at = cur_next(c);
        }
        // Let writers (the relay's puts note their keys) in between: the
        // lock is held for at most IX_BATCH keys, then the walk seeks again.
        if (n % IX_BATCH == 0 && at == CUR_KEY) {
            pthread_mutex_unlock(&ix->mu);
            pthread_mutex_lock(&ix->mu);
            at = cur_seek(c, bound, incl);
        }
    }
    pthread_mutex_unlock(&ix->mu);
    // Each key is stat'ed, so one deleted meanwhile is never listed.
    int dfd = -1, nfresh = 0;
    char dir[IX_PATH] = "", want[IX_PATH];
    for (int i = 0; i < n && rc == 0; i++) {
        if (items[i].prefix) {
            if (store_list_push_prefix(out, items[i].key) < 0) rc = err_set(err, PAIL_ERR_NOMEM, "list: out of memory");
            continue;
        }
        const char *slash = strrchr(items[i].key, '/');
        snprintf(want, sizeof want, "%.*s", slash ? (int)(slash - items[i].key) : 0, items[i].key);
        if (dfd < 0 || strcmp(want, dir)) {
            if (dfd >= 0) close(dfd);
            char path[IX_PATH + 4096];
            folder_path(ix, want, path, sizeof path);
            dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            snprintf(dir, sizeof dir, "%s", want);
            if (dfd < 0) continue;  // the folder is gone
        }
        StoreStat s = {0};
        if (!item_stat(h, st, dfd, &items[i], &s)) continue;  // deleted meanwhile
        nfresh += items[i].fresh;
        if (store_list_push(out, items[i].key, s.size, s.mtime, s.etag) < 0)
            rc = err_set(err, PAIL_ERR_NOMEM, "list: out of memory");
    }
    if (dfd >= 0) close(dfd);
    if (nfresh) {  // remember what was read, for the next pages
        pthread_mutex_lock(&ix->mu);
        for (int i = 0; i < n; i++) {
            if (!items[i].fresh) continue;
            Ent *e = find_key(ix, items[i].key);
            if (!e || e->dir) continue;
            if (!e->meta) e->meta = malloc(sizeof *e->meta);
            if (e->meta) *e->meta = items[i].meta;
        }
        pthread_mutex_unlock(&ix->mu);
    }
    for (int i = 0; i < n; i++) free(items[i].key);
    free(items);
    free(c);
    return rc;
}

// ---- the Store wrapper ----

static int hk_put(Store *st, const char *key, const void *data, size_t len, const StorePutOpts *o, PailErr *err) {
    const Hook *h = (const Hook *)st->be;
    int rc = h->orig->put(st, key, data, len, o, err);
    if (rc == 0) listindex_note(h->ix, key, true);
    return rc;
}

static int hk_put_file(Store *st, const char *key, const char *path, const StorePutOpts *o, PailErr *err) {
    const Hook *h = (const Hook *)st->be;
    int rc = h->orig->put_file(st, key, path, o, err);
    if (rc == 0) listindex_note(h->ix, key, true);
    return rc;
}

static int hk_del(Store *st, const char *key, PailErr *err) {
    const Hook *h = (const Hook *)st->be;
    int rc = h->orig->del(st, key, err);
    if (rc == 0) listindex_note(h->ix, key, false);
    return rc;
}

static int hk_list(Store *st, const StoreListOpts *opt, StoreList *out, PailErr *err) {
    return listindex_list(((const Hook *)st->be)->ix, st, opt, out, err);
}

void listindex_attach(ListIndex *ix, Store *st) {
    if (!ix->hook.orig) {
        ix->hook.orig = st->be;
        ix->hook.be = *st->be;
        ix->hook.be.put = hk_put;
        ix->hook.be.put_file = hk_put_file;
        ix->hook.be.del = hk_del;
        ix->hook.be.list = hk_list;
        ix->hook.ix = ix;
    }
    st->be = &ix->hook.be;
}
