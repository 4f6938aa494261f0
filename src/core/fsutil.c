// Whole-file helpers (see fsutil.h).
#include "core/fsutil.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_read_file(const char *path, Buf *out, PailErr *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno == ENOENT ? PAIL_ERR_NOT_FOUND : PAIL_ERR_IO, "%s: %s", path,
                       strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return err_set(err, PAIL_ERR_INVALID, "%s: is a directory", path);
    }
    if (st.st_size > 0 && buf_reserve(out, (size_t)st.st_size) < 0) {
        close(fd);
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory reading %lld bytes", path,
                       (long long)st.st_size);
    }
    for (;;) {
        if (buf_reserve(out, 1 << 16) < 0) {
            close(fd);
            return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", path);
        }
        ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            return err_set(err, PAIL_ERR_IO, "%s: read: %s", path, strerror(e));
        }
        if (n == 0) break;
        out->len += (size_t)n;
    }
    out->data[out->len] = 0;
    close(fd);
    return 0;
}

int fs_fsync_dir(const char *dir, PailErr *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return err_set(err, PAIL_ERR_IO, "%s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc < 0 && e != EINVAL) return err_set(err, PAIL_ERR_IO, "fsync %s: %s", dir, strerror(e));
    return 0;
}

int fs_mkdirs(const char *dir, PailErr *err) {
    char tmp[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp) return err_set(err, PAIL_ERR_INVALID, "bad folder path '%s'", dir);
    memcpy(tmp, dir, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return err_set(err, PAIL_ERR_IO, "mkdir %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return err_set(err, PAIL_ERR_IO, "mkdir %s: %s", tmp, strerror(errno));
    return 0;
}

int fs_write_file_atomic(const char *path, const void *data, size_t len, PailErr *err) {
    char tmp[4200], dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *d = dirname(dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(err, PAIL_ERR_IO, "%s: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return err_set(err, PAIL_ERR_IO, "write %s: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "fsync %s: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return err_set(err, PAIL_ERR_IO, "rename %s: %s", path, strerror(e));
    }
    return fs_fsync_dir(d, err);
}
