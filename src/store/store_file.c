// file:// backend: a local folder as a bucket (the embedded default for one
// machine). Objects are plain files at ROOT/key; writes go to a temp file that
// is fsynced and then renamed (overwrite) or hard-linked (create-only: link(2)
// fails with EEXIST atomically, the If-None-Match: * semantics). User metadata
// and the etag travel with the object as an extended attribute (user.pail.meta)
// set on the temp file before it is linked, so they appear atomically with it.
// Where the file system has no user xattrs (older tmpfs), they go to a sidecar
// ".pail-meta.<name>" written after the object; readers of versioned objects
// wait out that window (versions.c). Names starting with ".pail" are reserved
// and never listed.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "store/retry.h"
#include "store/store.h"

typedef struct {
    char root[4096];  // absolute folder, no trailing '/'
    double retry_seconds;  // how long a put waits for space on a full disk (--max-outage)
} FileStore;

// errno of the last failed system call of a put, so that a full disk (which
// frees up: a cleaner, gc, an operator) is waited out like a bucket outage.
static __thread int g_put_errno;
static bool disk_full(int e) { return e == ENOSPC || e == EDQUOT; }

static FileStore *fs_of(Store *st) { return st->impl; }

static int join(const FileStore *f, const char *key, char *out, size_t cap, PailErr *err) {
    if ((size_t)snprintf(out, cap, "%s/%s", f->root, key) >= cap)
        return err_set(err, PAIL_ERR_INVALID, "key '%s': path too long", key);
    return 0;
}

// dir and base of a path; out buffers of PATH_MAX.
static void split_path(const char *path, char *dir, size_t dcap, const char **base) {
    const char *slash = strrchr(path, '/');
    size_t n = (size_t)(slash - path);
    if (n >= dcap) n = dcap - 1;
    memcpy(dir, path, n);
    dir[n] = 0;
    *base = slash + 1;
}

static void sidecar_path(const char *path, char *out, size_t cap) {
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    snprintf(out, cap, "%s/.pail-meta.%s", dir, base);
}

static void temp_path(const char *path, char *out, size_t cap) {
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    static _Atomic unsigned long counter;
    snprintf(out, cap, "%s/.pail-tmp.%s.%d.%lu", dir, base, (int)getpid(), ++counter);
}

static int write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void etag_of(const struct stat *sb, char *out, size_t cap) {
    snprintf(out, cap, "%llx-%llx", (unsigned long long)sb->st_size,
             (unsigned long long)sb->st_mtim.tv_sec * 1000000000ULL + sb->st_mtim.tv_nsec);
}

// Reads the sidecar into stat (meta, etag). A missing sidecar is not an error:
// the object may be mid-publish (object first, sidecar second).
#define META_XATTR "user.pail.meta"

static void read_sidecar(const char *path, StoreStat *stat) {
    char side[4200], xv[8192];
    json_error_t jerr;
    json_t *j = NULL;
    ssize_t xn = lgetxattr(path, META_XATTR, xv, sizeof xv - 1);
    if (xn > 0) {
        j = json_loadb(xv, (size_t)xn, 0, &jerr);
    } else {
        sidecar_path(path, side, sizeof side);
        j = json_load_file(side, 0, &jerr);
    }
    if (!j) return;
    const char *etag = json_string_value(json_object_get(j, "etag"));
    if (etag) snprintf(stat->etag, sizeof stat->etag, "%s", etag);
    json_t *meta = json_object_get(j, "meta");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (stat->nmeta >= STORE_MAX_META || !json_is_string(v)) continue;
        snprintf(stat->meta[stat->nmeta].name, sizeof stat->meta[0].name, "%s", k);
        snprintf(stat->meta[stat->nmeta].value, sizeof stat->meta[0].value, "%s", json_string_value(v));
        stat->nmeta++;
    }
    json_decref(j);
}

static char *meta_text(const char *etag, const StorePutOpts *opt) {
    json_t *j = json_object(), *meta = json_object();
    json_object_set_new(j, "etag", json_string(etag));
    for (int i = 0; i < opt->nmeta; i++) json_object_set_new(meta, opt->meta[i].name, json_string(opt->meta[i].value));
    json_object_set_new(j, "meta", meta);
    if (opt->content_type) json_object_set_new(j, "content_type", json_string(opt->content_type));
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return text;
}

static int write_sidecar(const char *path, const char *etag, const StorePutOpts *opt, PailErr *err) {
    char side[4200];
    sidecar_path(path, side, sizeof side);
    char *text = meta_text(etag, opt);
    int rc = fs_write_file_atomic(side, text, strlen(text), err);
    free(text);
    return rc;
}

// Attaches the metadata to the temp file; false when the file system has no
// user xattrs (the caller then writes a sidecar after the object).
static bool set_meta_xattr(int fd, const char *etag, const StorePutOpts *opt) {
    char *text = meta_text(etag, opt);
    bool ok = fsetxattr(fd, META_XATTR, text, strlen(text), 0) == 0;
    free(text);
    return ok;
}

// Moves a finished temp file into place (rename, or link for create-only) and
// writes the sidecar. On any failure the temp file is removed.
static int commit_temp(Store *st, const char *key, const char *tmp, const char *path,
                       const char *etag, const StorePutOpts *opt, bool xattr, PailErr *err) {
    char u[STORE_MAX_KEY + 300];
    if (opt->create_only) {
        if (link(tmp, path) < 0) {
            int e = g_put_errno = errno;
            unlink(tmp);
            if (e == EEXIST)
                return err_set(err, PAIL_ERR_EXISTS, "%s: key already exists (create-only put)", store_key_url(st, key, u, sizeof u));
            return err_set(err, PAIL_ERR_IO, "%s: link: %s", key, strerror(e));
        }
        unlink(tmp);
    } else if (rename(tmp, path) < 0) {
        int e = g_put_errno = errno;
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "%s: rename: %s", key, strerror(e));
    }
    if (xattr) {  // the metadata came with the object; an older object's sidecar is stale
        char side[4400];
        sidecar_path(path, side, sizeof side);
        unlink(side);
    } else if (write_sidecar(path, etag, opt, err) < 0) {
        g_put_errno = errno;
        return err_wrap(err, "%s: metadata", key);
    }
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    return fs_fsync_dir(dir, err);
}

// S3 has no folders, so "a/b" and "a/b/c" can both be keys there; here "a/b"
// would have to be a file and a folder at once. Either order is refused with
// PAIL_ERR_CONFLICT naming both (final: retrying cannot help), never an I/O
// error a client would retry for its whole --max-outage.
static int key_conflict(Store *st, const char *key, const char *path, PailErr *err) {
    FileStore *f = fs_of(st);
    char p[4200];
    struct stat sb;
    // The message names keys only: grpo-relay hands it to clients, who need not see its --root.
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return err_set(err, PAIL_ERR_CONFLICT, "key %s: other keys lie below it (%s/...), and on a file store a "
                       "key cannot be both an object and a folder", key, key);
    for (const char *sl = strchr(key, '/'); sl; sl = strchr(sl + 1, '/')) {
        snprintf(p, sizeof p, "%s/%.*s", f->root, (int)(sl - key), key);
        if (lstat(p, &sb) == 0 && !S_ISDIR(sb.st_mode))
            return err_set(err, PAIL_ERR_CONFLICT, "key %s: %.*s is an object, and on a file store a key cannot be "
                           "both an object and a folder", key, (int)(sl - key), key);
    }
    return 0;
}

static int prepare_dir(Store *st, const char *key, const char *path, PailErr *err) {
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    if (fs_mkdirs(dir, err) < 0) {
        int e = errno;
        if (key_conflict(st, key, path, err) < 0) return -1;
        errno = e;
        return -1;
    }
    return key_conflict(st, key, path, err);
}

static int put_once(Store *st, const char *key, const void *data, size_t len, const StorePutOpts *opt,
                    PailErr *err) {
    FileStore *f = fs_of(st);
    char path[4200], tmp[4400], etag[80], u[STORE_MAX_KEY + 300];
    if (join(f, key, path, sizeof path, err) < 0) return -1;
    if (prepare_dir(st, key, path, err) < 0) {
        g_put_errno = errno;
        return -1;
    }
    if (opt->create_only && access(path, F_OK) == 0)
        return err_set(err, PAIL_ERR_EXISTS, "%s: key already exists (create-only put)", store_key_url(st, key, u, sizeof u));
    temp_path(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(err, PAIL_ERR_IO, "%s: create temp: %s", key, strerror(g_put_errno = errno));
    char hex[65];
    sha256_hex(data, len, hex);
    snprintf(etag, sizeof etag, "%.32s", hex);
    if (write_all(fd, data, len) < 0 || fsync(fd) < 0) {
        int e = g_put_errno = errno;
        close(fd);
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "%s: write: %s", key, strerror(e));
    }
    bool xattr = set_meta_xattr(fd, etag, opt);
    close(fd);
    return commit_temp(st, key, tmp, path, etag, opt, xattr, err);
}

// src_linkable: the source hard-linked as the temp file (same filesystem), so
// nothing is copied; it is hashed (the ETag) and fsynced in place. 1 when it
// could not be linked (another filesystem, ...): the caller copies.
static int put_file_linked(Store *st, const char *key, const char *src, const char *tmp, const char *path,
                           const StorePutOpts *opt, PailErr *err) {
    if (link(src, tmp) < 0) return 1;
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = g_put_errno = errno;
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "%s: open %s: %s", key, src, strerror(e));
    }
    Sha256 *h = sha256_new();
    static __thread char chunk[1 << 20];
    ssize_t n;
    int bad = 0;
    while ((n = read(fd, chunk, sizeof chunk)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { bad = errno; break; }
        sha256_update(h, chunk, (size_t)n);
    }
    char hex[65], etag[80];
    sha256_final_hex(h, hex);
    if (bad || fchmod(fd, 0644) < 0 || fsync(fd) < 0) {
        int e = g_put_errno = bad ? bad : errno;
        close(fd);
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "%s: %s: %s", key, src, strerror(e));
    }
    snprintf(etag, sizeof etag, "%.32s", hex);
    bool xattr = set_meta_xattr(fd, etag, opt);
    close(fd);
    return commit_temp(st, key, tmp, path, etag, opt, xattr, err);
}

static int put_file_once(Store *st, const char *key, const char *src, const StorePutOpts *opt,
                         PailErr *err) {
    FileStore *f = fs_of(st);
    char path[4200], tmp[4400], etag[80], u[STORE_MAX_KEY + 300];
    if (join(f, key, path, sizeof path, err) < 0) return -1;
    if (prepare_dir(st, key, path, err) < 0) {
        g_put_errno = errno;
        return -1;
    }
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return err_set(err, PAIL_ERR_NOT_FOUND, "%s: %s", src, strerror(errno));
    if (opt->create_only && access(path, F_OK) == 0) {
        close(in);
        return err_set(err, PAIL_ERR_EXISTS, "%s: key already exists (create-only put)", store_key_url(st, key, u, sizeof u));
    }
    temp_path(path, tmp, sizeof tmp);
    if (opt->src_linkable) {
        int rc = put_file_linked(st, key, src, tmp, path, opt, err);
        if (rc <= 0) {
            close(in);
            return rc;
        }
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        g_put_errno = errno;
        close(in);
        return err_set(err, PAIL_ERR_IO, "%s: create temp: %s", key, strerror(g_put_errno));
    }
    Sha256 *h = sha256_new();
    static __thread char chunk[1 << 20];
    ssize_t n;
    int bad = 0;
    while ((n = read(in, chunk, sizeof chunk)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || write_all(fd, chunk, (size_t)n) < 0) { bad = errno; break; }
        sha256_update(h, chunk, (size_t)n);
    }
    char hex[65];
    sha256_final_hex(h, hex);
    close(in);
    if (bad || fsync(fd) < 0) {
        int e = g_put_errno = bad ? bad : errno;
        close(fd);
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "%s: copy from %s: %s", key, src, strerror(e));
    }
    snprintf(etag, sizeof etag, "%.32s", hex);
    bool xattr = set_meta_xattr(fd, etag, opt);
    close(fd);
    return commit_temp(st, key, tmp, path, etag, opt, xattr, err);
}

// A put that found the disk full (ENOSPC, EDQUOT) is tried again with backoff
// for up to --max-outage: one line when it starts waiting, one every 30 s after
// 10 s, and one error line naming the key when the budget is spent. The temp
// file of each failed attempt is removed, so waiting takes no space.
static int put_retrying(Store *st, const char *key, const void *data, size_t len, const char *src,
                        const StorePutOpts *opt, PailErr *err) {
    FileStore *f = fs_of(st);
    RetryState rs;
    retry_init(&rs, f->retry_seconds);
    for (;;) {
        g_put_errno = 0;
        int rc = src ? put_file_once(st, key, src, opt, err) : put_once(st, key, data, len, opt, err);
        if (rc == 0 || !disk_full(g_put_errno)) return rc;
        if (rs.retries == 0)
            log_warn("%s: %s; retrying for up to %g s (--max-outage)", key, strerror(g_put_errno), rs.budget_s);
        else if (retry_report_due(&rs, time_mono_ms()))
            log_warn("%s: disk still full after %.0f s, retrying until --max-outage %g s", key,
                     retry_elapsed_s(&rs), rs.budget_s);
        if (!retry_wait(&rs)) {
            char inner[sizeof err->msg];
            snprintf(inner, sizeof inner, "%s", err->msg);
            if (rs.stopped)
                return err_set(err, PAIL_ERR_INTERRUPTED, "%s (not retried further after %.1f s: the process is "
                               "stopping)", inner, retry_elapsed_s(&rs));
            return err_set(err, PAIL_ERR_IO, "%s (gave up after %.1f s, --max-outage %g s)", inner,
                           retry_elapsed_s(&rs), rs.budget_s);
        }
    }
}

static int file_put(Store *st, const char *key, const void *data, size_t len, const StorePutOpts *opt,
                    PailErr *err) {
    return put_retrying(st, key, data, len, NULL, opt, err);
}

static int file_put_file(Store *st, const char *key, const char *src, const StorePutOpts *opt, PailErr *err) {
    return put_retrying(st, key, NULL, 0, src, opt, err);
}

static int open_object(Store *st, const char *key, char *path, size_t cap, struct stat *sb,
                       PailErr *err) {
    char u[STORE_MAX_KEY + 300];
    if (join(fs_of(st), key, path, cap, err) < 0) return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return err_set(err, PAIL_ERR_NOT_FOUND, "%s: not found", store_key_url(st, key, u, sizeof u));
        return err_set(err, PAIL_ERR_IO, "%s: %s", store_key_url(st, key, u, sizeof u), strerror(errno));
    }
    if (fstat(fd, sb) < 0 || !S_ISREG(sb->st_mode)) {
        close(fd);
        return err_set(err, PAIL_ERR_NOT_FOUND, "%s: not found (not a regular file)",
                       store_key_url(st, key, u, sizeof u));
    }
    return fd;
}

static void fill_stat(const char *path, const struct stat *sb, StoreStat *stat) {
    memset(stat, 0, sizeof *stat);
    stat->size = (uint64_t)sb->st_size;
    stat->mtime = sb->st_mtim.tv_sec;
    etag_of(sb, stat->etag, sizeof stat->etag);
    read_sidecar(path, stat);
}

static int file_head(Store *st, const char *key, StoreStat *stat, PailErr *err) {
    char path[4200];
    struct stat sb;
    int fd = open_object(st, key, path, sizeof path, &sb, err);
    if (fd < 0) return -1;
    close(fd);
    fill_stat(path, &sb, stat);
    return 0;
}

static int file_get(Store *st, const char *key, Buf *out, const StoreGetOpts *opt, StoreStat *stat,
                    PailErr *err) {
    char path[4200];
    struct stat sb;
    int fd = open_object(st, key, path, sizeof path, &sb, err);
    if (fd < 0) return -1;
    fill_stat(path, &sb, stat);
    if (opt->if_none_match && !strcmp(opt->if_none_match, stat->etag)) {
        close(fd);
        return err_set(err, PAIL_ERR_NOT_MODIFIED, "%s: not modified", key);
    }
    uint64_t start = 0, end = stat->size;  // [start, end)
    if (opt->range_end >= 0) {
        if (opt->range_start < 0 || (uint64_t)opt->range_start >= stat->size || opt->range_end < opt->range_start) {
            close(fd);
            return err_set(err, PAIL_ERR_INVALID, "%s: range %lld-%lld not satisfiable (size %llu)", key,
                           (long long)opt->range_start, (long long)opt->range_end,
                           (unsigned long long)stat->size);
        }
        start = (uint64_t)opt->range_start;
        end = (uint64_t)opt->range_end + 1 < stat->size ? (uint64_t)opt->range_end + 1 : stat->size;
    }
    if (buf_reserve(out, end - start) < 0) {
        close(fd);
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for %llu bytes", key,
                       (unsigned long long)(end - start));
    }
    uint64_t off = start;
    while (off < end) {
        ssize_t n = pread(fd, out->data + out->len, end - off, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            close(fd);
            return err_set(err, PAIL_ERR_IO, "%s: read: %s", key, n < 0 ? strerror(errno) : "short file");
        }
        out->len += (size_t)n;
        off += (uint64_t)n;
    }
    out->data[out->len] = 0;
    close(fd);
    return 0;
}

static int file_get_file(Store *st, const char *key, const char *dst, StoreStat *stat, PailErr *err) {
    char path[4200], tmp[4400];
    struct stat sb;
    int fd = open_object(st, key, path, sizeof path, &sb, err);
    if (fd < 0) return -1;
    fill_stat(path, &sb, stat);
    snprintf(tmp, sizeof tmp, "%s.pail-tmp.%d", dst, (int)getpid());
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        close(fd);
        return err_set(err, PAIL_ERR_IO, "%s: %s", tmp, strerror(errno));
    }
    static __thread char chunk[1 << 20];
    ssize_t n;
    int bad = 0;
    while ((n = read(fd, chunk, sizeof chunk)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || write_all(out, chunk, (size_t)n) < 0) { bad = errno; break; }
    }
    close(fd);
    if (bad || fsync(out) < 0 || close(out) < 0) {
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "%s: %s", dst, strerror(bad ? bad : errno));
    }
    if (rename(tmp, dst) < 0) {
        int e = errno;
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "%s: rename: %s", dst, strerror(e));
    }
    return 0;
}

static int file_del(Store *st, const char *key, PailErr *err) {
    FileStore *f = fs_of(st);
    char path[4200], side[4400];
    if (join(f, key, path, sizeof path, err) < 0) return -1;
    sidecar_path(path, side, sizeof side);
    if (unlink(path) < 0 && errno != ENOENT && errno != ENOTDIR)
        return err_set(err, PAIL_ERR_IO, "%s: delete: %s", key, strerror(errno));
    unlink(side);
    // S3 has no folders: remove parents left empty, up to the root.
    size_t rootlen = strlen(f->root);
    for (char *slash = strrchr(path, '/'); slash && (size_t)(slash - path) > rootlen;
         slash = strrchr(path, '/')) {
        *slash = 0;
        if (rmdir(path) < 0) break;
    }
    return 0;
}

typedef struct {
    const StoreListOpts *opt;
    const char *after;  // max(start_after, continuation)
    char **keys;
    int n, cap;
} Walk;

static int walk_push(Walk *w, const char *key) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 256;
        char **k = realloc(w->keys, (size_t)cap * sizeof *k);
        if (!k) return -1;
        w->keys = k;
        w->cap = cap;
    }
    return (w->keys[w->n++] = strdup(key)) ? 0 : -1;
}

// Recursive walk of ROOT/rel collecting keys that start with the prefix.
static int walk_dir(Walk *w, const char *root, const char *rel, int depth) {
    if (depth > 64) return 0;
    char dirpath[4200];
    snprintf(dirpath, sizeof dirpath, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dirpath);
    if (!d) return 0;
    struct dirent *de;
    size_t plen = strlen(w->opt->prefix);
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))) continue;
        if (!strncmp(name, ".pail", 5)) continue;
        char key[STORE_MAX_KEY + 300];
        int kn = snprintf(key, sizeof key, "%s%s%s", rel, *rel ? "/" : "", name);
        if (kn >= STORE_MAX_KEY) continue;
        size_t cmp = (size_t)kn < plen ? (size_t)kn : plen;
        if (strncmp(key, w->opt->prefix, cmp) != 0) continue;  // not on the prefix's path
        char full[4400];
        snprintf(full, sizeof full, "%s/%s", root, key);
        struct stat sb;
        if (lstat(full, &sb) < 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (walk_dir(w, root, key, depth + 1) < 0) { closedir(d); return -1; }
        } else if (S_ISREG(sb.st_mode) && (size_t)kn >= plen) {
            if (w->after && strcmp(key, w->after) <= 0) continue;
            PailErr kerr = {0};
            if (store_key_check(key, &kerr) < 0) {  // put there behind the store's back: no key can name it
                char why[sizeof kerr.msg + 64];
                snprintf(why, sizeof why, "%s; no key can name it: remove the file", kerr.msg);
                store_warn_skipped(root, key, why);
                continue;
            }
            if (walk_push(w, key) < 0) { closedir(d); return -1; }
        }
    }
    closedir(d);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int file_list(Store *st, const StoreListOpts *opt, StoreList *out, PailErr *err) {
    FileStore *f = fs_of(st);
    Walk w = {.opt = opt, .after = opt->start_after};
    if (opt->continuation && (!w.after || strcmp(opt->continuation, w.after) > 0)) w.after = opt->continuation;
    // Start the walk at the deepest folder named by the prefix.
    char rel[STORE_MAX_KEY + 1];
    snprintf(rel, sizeof rel, "%s", opt->prefix);
    char *slash = strrchr(rel, '/');
    if (slash) *slash = 0; else rel[0] = 0;
    if (rel[0] && store_key_check(rel, err) < 0) return err_wrap(err, "list prefix");
    if (walk_dir(&w, f->root, rel, 0) < 0) return err_set(err, PAIL_ERR_NOMEM, "list: out of memory");
    if (w.n) qsort(w.keys, (size_t)w.n, sizeof *w.keys, cmp_str);
    size_t plen = strlen(opt->prefix);
    int count = 0, rc = 0;
    const char *last = NULL;
    for (int i = 0; i < w.n && rc == 0; i++) {
        const char *key = w.keys[i];
        const char *dl = opt->delimiter && *opt->delimiter ? strstr(key + plen, opt->delimiter) : NULL;
        char cp[STORE_MAX_KEY + 1] = "";
        if (dl) {
            size_t cl = (size_t)(dl - key) + strlen(opt->delimiter);
            snprintf(cp, sizeof cp, "%.*s", (int)cl, key);
            // Keys of the common prefix just returned are part of it, even past a
            // full page: the continuation token then skips the whole group.
            if (out->nprefixes && !strcmp(out->prefixes[out->nprefixes - 1], cp)) { last = key; continue; }
        }
        if (count == opt->max_keys) {
            out->truncated = true;
            snprintf(out->next_token, sizeof out->next_token, "%s", last);
            break;
        }
        if (dl) {
            rc = store_list_push_prefix(out, cp);
        } else {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", f->root, key);
            struct stat sb;
            if (stat(path, &sb) < 0) continue;  // deleted meanwhile
            char etag[80];
            etag_of(&sb, etag, sizeof etag);
            StoreStat ss = {0};
            read_sidecar(path, &ss);
            rc = store_list_push(out, key, (uint64_t)sb.st_size, sb.st_mtim.tv_sec, ss.etag[0] ? ss.etag : etag);
        }
        count++;
        last = key;
    }
    for (int i = 0; i < w.n; i++) free(w.keys[i]);
    free(w.keys);
    if (rc < 0) return err_set(err, PAIL_ERR_NOMEM, "list: out of memory");
    return 0;
}

// Temp files of writers killed between the write and the rename/link
// (".pail-tmp.<name>.<pid>.<n>"): removed once older than max_age_s, which a
// live writer never reaches (each write updates the mtime).
static int clean_dir(const char *dir, int depth, time_t cutoff, int *removed) {
    if (depth > 64) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))) continue;
        char full[4400];
        if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, name) >= sizeof full) continue;
        struct stat sb;
        if (lstat(full, &sb) < 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (strncmp(name, ".pail", 5)) clean_dir(full, depth + 1, cutoff, removed);
        } else if (S_ISREG(sb.st_mode) && !strncmp(name, ".pail-tmp.", 10) && sb.st_mtime < cutoff) {
            if (unlink(full) == 0) (*removed)++;
        }
    }
    closedir(d);
    return 0;
}

static int file_clean(Store *st, double max_age_s, int *removed, PailErr *err) {
    (void)err;
    const FileStore *f = fs_of(st);
    return clean_dir(f->root[0] ? f->root : "/", 0, time(NULL) - (time_t)max_age_s, removed);
}

static void file_close(Store *st) { free(st->impl); }

static const StoreBackend file_backend = {
    .scheme = "file",
    .put = file_put,
    .put_file = file_put_file,
    .get = file_get,
    .get_file = file_get_file,
    .head = file_head,
    .del = file_del,
    .list = file_list,
    .clean = file_clean,
    .close = file_close,
};

int store_file_open(Store *st, const char *path, const StoreOptions *opt, PailErr *err) {
    FileStore *f = calloc(1, sizeof *f);
    if (!f) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    f->retry_seconds = opt && opt->retry_seconds > 0 ? opt->retry_seconds : RETRY_DEFAULT_BUDGET_S;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (n >= sizeof f->root) {
        free(f);
        return err_set(err, PAIL_ERR_INVALID, "file://%s: path too long", path);
    }
    memcpy(f->root, path, n);
    f->root[n] = 0;
    if (n == 1) f->root[0] = 0;  // "/" root: keys are joined as "/key"
    struct stat sb;
    if (f->root[0] && stat(f->root, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        free(f);
        return err_set(err, PAIL_ERR_INVALID, "file://%s: not a folder", path);
    }
    if (f->root[0] && fs_mkdirs(f->root, err) < 0) {
        free(f);
        return err_wrap(err, "file://%s", path);
    }
    st->be = &file_backend;
    st->impl = f;
    return 0;
}
