// Byte quotas on the relay's spool (multipart parts, and request bodies while
// they arrive): every byte on disk is held by an access key, counted against
// --spool-bytes in all and --spool-bytes-per-key per key, and the last
// --trainer-spool-bytes of the total only trainer keys may take, so no worker
// key can fill the disk the trainer publishes through. Not here: the upload
// count quotas (multipart.c). The quotas: event-loop thread only; the file
// helpers at the end run on worker threads.
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "core/sha256.h"
#include "relay/relay_int.h"

void spool_hold_init(SpoolHold *h, const char *keyid, RelayRole role) {
    memset(h, 0, sizeof *h);
    snprintf(h->keyid, sizeof h->keyid, "%s", keyid);
    h->role = role;
}

static void link_hold(Relay *r, SpoolHold *h) {
    if (h->linked) return;
    h->prev = NULL;
    h->next = r->holds;
    if (r->holds) r->holds->prev = h;
    r->holds = h;
    h->linked = true;
}

void spool_release(Relay *r, SpoolHold *h) {
    if (h->linked) {
        if (h->prev) h->prev->next = h->next;
        else r->holds = h->next;
        if (h->next) h->next->prev = h->prev;
        h->linked = false;
    }
    h->prev = h->next = NULL;
    h->bytes = 0;
}

void spool_hold_add(Relay *r, SpoolHold *h, int64_t delta) {
    link_hold(r, h);
    h->bytes = delta < 0 && (uint64_t)-delta > h->bytes ? 0 : (uint64_t)((int64_t)h->bytes + delta);
}

static double mib(uint64_t b) {
    return (double)b / (1 << 20);
}

int spool_admit(Relay *r, SpoolHold *h, const char *keyid, RelayRole role, uint64_t bytes, RelayFail *fail,
                char *msg, size_t cap) {
    const RelayConfig *c = &r->cfg;
    uint64_t total = 0, mine = 0, others = 0;
    for (SpoolHold *x = r->holds; x; x = x->next) {
        total += x->bytes;
        if (!strcmp(x->keyid, keyid)) mine += x->bytes;
        if (x->role != ROLE_TRAINER) others += x->bytes;
    }
    bool trainer = role == ROLE_TRAINER;
    uint64_t room = trainer ? c->spool_bytes : c->spool_bytes - c->trainer_spool_bytes;
    fail->status = 503;
    snprintf(fail->code, sizeof fail->code, "SlowDown");
    if (bytes > c->spool_bytes_per_key || bytes > room) {
        fail->status = 400;
        snprintf(fail->code, sizeof fail->code, "EntityTooLarge");
        snprintf(msg, cap, "A body of %" PRIu64 " bytes can never fit this key's spool share (--spool-bytes-per-key "
                           "%" PRIu64 ", --spool-bytes %" PRIu64 ", --trainer-spool-bytes %" PRIu64 "); send smaller parts.",
                 bytes, c->spool_bytes_per_key, c->spool_bytes, c->trainer_spool_bytes);
        return -1;
    }
    if (mine + bytes > c->spool_bytes_per_key) {
        snprintf(msg, cap, "Access key %s holds %.1f MiB of spooled parts and bodies, its quota "
                           "(--spool-bytes-per-key %.1f MiB); complete or abort uploads, or retry later.",
                 keyid, mib(mine),
                 mib(c->spool_bytes_per_key));
        return -1;
    }
    if (total + bytes > c->spool_bytes) {
        snprintf(msg, cap, "The relay's spool holds %.1f MiB, its limit (--spool-bytes %.1f MiB); retry later.",
                 mib(total), mib(c->spool_bytes));
        return -1;
    }
    if (!trainer && others + bytes > room) {
        snprintf(msg, cap, "Other keys hold %.1f MiB of the spool; the last %.1f MiB of --spool-bytes are reserved "
                           "for trainer keys (--trainer-spool-bytes); retry later.",
                 mib(others), mib(c->trainer_spool_bytes));
        return -1;
    }
    if (!h->linked) spool_hold_init(h, keyid, role);
    spool_hold_add(r, h, (int64_t)bytes);
    return 0;
}

// ---- spooled bodies (worker threads: plain files only) ----

typedef struct {
    int fd;
    EVP_MD_CTX *md5;
    uint64_t len;
} FileSink;

static int file_sink(void *ctx, const uint8_t *p, size_t n) {
    FileSink *s = ctx;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(s->fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    EVP_DigestUpdate(s->md5, p, n);
    s->len += n;
    return 0;
}

int spool_aws_chunked_file(const char *in, const char *out, char md5[33], uint64_t *len, RelayFail *fail,
                           PailErr *err) {
    int fd = open(in, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0) {
        if (fd >= 0) close(fd);
        fail->status = 503;
        snprintf(fail->code, sizeof fail->code, "SlowDown");
        return err_set(err, PAIL_ERR_IO, "spool %s: %s", in, strerror(errno));
    }
    // Mapped, not read: the pages are the page cache's, not the relay's heap.
    size_t n = (size_t)sb.st_size;
    const uint8_t *body = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : (const uint8_t *)"";
    close(fd);
    FileSink s = {.fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), .md5 = EVP_MD_CTX_new()};
    int rc;
    if (body == MAP_FAILED || s.fd < 0 || !s.md5 || EVP_DigestInit_ex(s.md5, EVP_md5(), NULL) != 1) {
        fail->status = 503;
        snprintf(fail->code, sizeof fail->code, "SlowDown");
        rc = err_set(err, PAIL_ERR_IO, "spool %s: %s", s.fd < 0 ? out : in, strerror(errno));
    } else {
        rc = relay_aws_chunked_decode_to(body, n, file_sink, &s, fail, err);
    }
    if (body != MAP_FAILED && n) munmap((void *)body, n);
    if (s.fd >= 0 && close(s.fd) < 0 && rc == 0) {
        fail->status = 503;
        snprintf(fail->code, sizeof fail->code, "SlowDown");
        rc = err_set(err, PAIL_ERR_IO, "spool %s: %s", out, strerror(errno));
    }
    if (s.md5) {
        uint8_t md[16];
        unsigned ml = 0;
        EVP_DigestFinal_ex(s.md5, md, &ml);
        EVP_MD_CTX_free(s.md5);
        hex_encode(md, 16, md5);
    }
    *len = s.len;
    if (rc < 0) unlink(out);
    return rc;
}
