// S3 multipart uploads through the relay: parts are spooled to files (never
// held in memory beyond one request body), CompleteMultipartUpload joins them
// into one file and hands it to the store (store_put_file: hard-linked in on file://,
// a multipart upload of its own on s3://). Each part is deleted once it is
// joined, so the spool holds one copy of the data and one part more; a join
// cut short (a full spool) is cut back to its last whole part and a retried
// completion with the same parts carries on from there, as does one whose
// store put failed (the upstream down past --max-outage). An upload belongs to
// the access key that created it. Uploads are bounded: --max-uploads in all,
// --max-uploads-per-key per access key, the last --trainer-uploads of them for
// trainer keys only (so no worker key can keep the trainer from publishing),
// and one idle past --upload-expiry, or open past --upload-lifetime (counted
// from its creation: a part now and then does not keep it), is aborted, its
// spool files removed. Its bytes count against the spool quotas (spool.c); a
// part's body is refused before it is read when they are spent (front.c).
// Spool failures answer 503 SlowDown (the client retries), never 500.
#define _GNU_SOURCE  // copy_file_range
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include "core/log.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "relay/relay_int.h"

struct Upload {
    char id[40];
    char key[STORE_MAX_KEY + 1];
    char keyid[128];
    StoreMeta meta[STORE_MAX_META];
    int nmeta;
    char dir[4200];
    char (*etags)[40];  // index = part number; "" = not uploaded
    uint64_t *sizes;
    int cap;
    int *joined;        // (njoined) part numbers already joined into dir/object, in order (their files are gone)
    int njoined;
    uint64_t joined_size;
    int jobs;           // part / complete jobs running
    bool completing;
    RelayRole role;     // of the access key that created it
    int64_t touched_ms; // last activity (create, part, failed completion), monotonic
    int64_t created_ms; // monotonic: --upload-lifetime counts from here
    uint64_t spooled;   // bytes in its spool folder, for the expiry's log line
    SpoolHold hold;     // its parts' bytes against the spool quotas
    Upload *next;
};

static Upload *find(Relay *r, const char *id) {
    for (Upload *u = r->uploads; u; u = u->next)
        if (!strcmp(u->id, id)) return u;
    return NULL;
}

static void rm_dir(const char *dir) {
    char p[4400];
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static void upload_free(Relay *r, Upload *u) {
    for (Upload **pp = &r->uploads; *pp; pp = &(*pp)->next)
        if (*pp == u) {
            *pp = u->next;
            break;
        }
    rm_dir(u->dir);
    spool_release(r, &u->hold);
    free(u->joined);
    free(u->etags);
    free(u->sizes);
    free(u);
}

void mp_free_all(Relay *r) {
    while (r->uploads) upload_free(r, r->uploads);
}

static bool too_old(const Relay *r, const Upload *u, int64_t now_ms) {
    return now_ms - u->created_ms >= (int64_t)(r->cfg.upload_lifetime_s * 1000);
}

// The upload named by the request, owned by its key id and for its key; NULL after replying.
static Upload *lookup(RelayReq *q) {
    Upload *u = find(q->r, q->route.upload_id);
    if (!u || strcmp(u->key, q->route.key) || strcmp(u->keyid, q->keyid) || u->completing ||
        (q->route.op == OP_MP_PART && too_old(q->r, u, time_mono_ms()))) {
        relay_reply_error(q, 404, "NoSuchUpload",
                          "The specified multipart upload does not exist (or belongs to another key or access key).");
        return NULL;
    }
    return u;
}

int mp_part_admit(Relay *r, const RelayRoute *rt, const char *keyid, RelayFail *fail, char *msg, size_t cap) {
    Upload *u = find(r, rt->upload_id);
    fail->status = 404;
    snprintf(fail->code, sizeof fail->code, "NoSuchUpload");
    if (!u || strcmp(u->key, rt->key) || strcmp(u->keyid, keyid) || u->completing || too_old(r, u, time_mono_ms())) {
        snprintf(msg, cap, "The specified multipart upload does not exist (or belongs to another key or access key, "
                 "or is older than --upload-lifetime %g s).", r->cfg.upload_lifetime_s);
        return -1;
    }
    for (int i = 0; i < u->njoined; i++)
        if (u->joined[i] == rt->part_number) {
            fail->status = 400;
            snprintf(fail->code, sizeof fail->code, "InvalidPart");
            snprintf(msg, cap, "This part was joined by an earlier completion of the upload; complete it with the "
                     "same parts.");
            return -1;
        }
    return 0;
}

void mp_expire(Relay *r, int64_t now_ms) {
    int64_t idle_ms = (int64_t)(r->cfg.upload_expiry_s * 1000);
    for (Upload *u = r->uploads, *next; u; u = next) {
        next = u->next;
        bool idle = now_ms - u->touched_ms >= idle_ms, old = too_old(r, u, now_ms);
        if (u->jobs > 0 || u->completing || (!idle && !old)) continue;
        if (idle)
            log_warn("relay: multipart upload %s of %s (key id %s) idle for %.0f s: aborted, %llu spooled bytes "
                     "reclaimed (--upload-expiry %g)", u->id, u->key, u->keyid, (double)(now_ms - u->touched_ms) / 1000,
                     (unsigned long long)(u->spooled + u->joined_size), r->cfg.upload_expiry_s);
        else
            log_warn("relay: multipart upload %s of %s (key id %s) open for %.0f s: aborted, %llu spooled bytes "
                     "reclaimed (--upload-lifetime %g)", u->id, u->key, u->keyid, (double)(now_ms - u->created_ms) / 1000,
                     (unsigned long long)(u->spooled + u->joined_size), r->cfg.upload_lifetime_s);
        upload_free(r, u);
    }
}

// The quotas: -1 after a 503 SlowDown (S3's answer to a client that should
// slow down; every client retries it) naming the quota and its flag.
static int quota_check(RelayReq *q) {
    Relay *r = q->r;
    int total = 0, mine = 0, others = 0;
    for (Upload *u = r->uploads; u; u = u->next) {
        total++;
        mine += !strcmp(u->keyid, q->keyid);
        others += u->role != ROLE_TRAINER;
    }
    char msg[512];
    if (total >= r->cfg.max_uploads)
        snprintf(msg, sizeof msg, "The relay holds %d multipart uploads, its limit (--max-uploads); retry later.",
                 total);
    else if (mine >= r->cfg.max_uploads_per_key)
        snprintf(msg, sizeof msg, "Access key %s holds %d multipart uploads, its quota (--max-uploads-per-key); "
                 "complete or abort some, or wait for idle ones to expire (--upload-expiry %g s).", q->keyid, mine,
                 r->cfg.upload_expiry_s);
    else if (q->role_id != ROLE_TRAINER && others >= r->cfg.max_uploads - r->cfg.trainer_uploads)
        snprintf(msg, sizeof msg, "The relay holds %d multipart uploads of other keys; the remaining %d of "
                 "--max-uploads are reserved for trainer keys (--trainer-uploads); retry later.", others,
                 r->cfg.max_uploads - others);
    else
        return 0;
    relay_reply_error(q, 503, "SlowDown", msg);
    return -1;
}

void mp_create(RelayReq *q) {
    Relay *r = q->r;
    if (quota_check(q) < 0) return;
    Upload *u = calloc(1, sizeof *u);
    uint8_t rnd[16];
    if (!u || RAND_bytes(rnd, sizeof rnd) != 1) {
        free(u);
        relay_reply_error(q, 503, "SlowDown", "The relay is out of memory or randomness; retry later.");
        return;
    }
    hex_encode(rnd, sizeof rnd, u->id);
    snprintf(u->key, sizeof u->key, "%s", q->route.key);
    snprintf(u->keyid, sizeof u->keyid, "%s", q->keyid);
    u->role = q->role_id;
    u->touched_ms = u->created_ms = time_mono_ms();
    spool_hold_init(&u->hold, u->keyid, u->role);
    u->nmeta = q->put.nmeta;
    memcpy(u->meta, q->meta, sizeof u->meta);
    snprintf(u->dir, sizeof u->dir, "%s/%s", r->spool, u->id);
    if (mkdir(u->dir, 0700) < 0) {
        log_error("relay: multipart spool %s: %s", u->dir, strerror(errno));
        free(u);
        relay_reply_error(q, 503, "SlowDown", "The relay cannot spool multipart parts; retry later.");
        return;
    }
    u->next = r->uploads;
    r->uploads = u;
    Buf b = {0};
    relay_xml_mp_create(&b, r->bucket, u->key, u->id);
    relay_reply_buf(q, 200, "application/xml", &b);
    buf_free(&b);
}

static int write_file(const char *path, const uint8_t *data, size_t len, PailErr *err) {
    char tmp[4500];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return err_set(err, PAIL_ERR_IO, "spool %s: %s", tmp, strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return err_set(err, PAIL_ERR_IO, "spool %s: %s", tmp, strerror(e));
        }
        off += (size_t)w;
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) return err_set(err, PAIL_ERR_IO, "spool %s: %s", path, strerror(errno));
    return 0;
}

void relay_md5_hex(const uint8_t *d, size_t n, char out[33]) {
    uint8_t md[16];
    unsigned int ml = 0;
    EVP_Digest(d, n, md, &ml, EVP_md5(), NULL);
    hex_encode(md, 16, out);
}

// A part the front spooled: renamed into the upload's folder (decoded there if aws-chunked).
static void part_file_run(RelayReq *q) {
    const char *part = (const char *)q->out.data;
    if (!strcmp(q->payload_hash, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")) {
        RelayFail fail = {0};
        char tmp[4500];
        snprintf(tmp, sizeof tmp, "%s.tmp", part);
        if (spool_aws_chunked_file(q->fv.path, tmp, q->etag, &q->total, &fail, &q->err) < 0) {
            q->status = fail.status;
            snprintf(q->etag, sizeof q->etag, "%s", fail.code);
            return;
        }
        q->rc = rename(tmp, part) < 0 ? err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", part, strerror(errno)) : 0;
        if (q->rc < 0) unlink(tmp);
    } else {
        q->total = q->fv.len;
        snprintf(q->etag, sizeof q->etag, "%s", q->fv.md5);
        q->rc = rename(q->fv.path, part) < 0 ? err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", part, strerror(errno)) : 0;
    }
    q->spool_fail = q->rc < 0;
}

static void part_run(PoolJob *j, Store *st) {
    (void)st;
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    RelayFail fail = {0};
    const uint8_t *data = q->body;
    size_t len = q->body_len;
    Buf decoded = {0};
    q->status = 0;
    if (q->fv.admitted) {
        part_file_run(q);
        return;
    }
    if (relay_payload_check(q->payload_hash, data, len, &fail, &q->err) < 0 ||
        (!strcmp(q->payload_hash, "STREAMING-UNSIGNED-PAYLOAD-TRAILER") &&
         relay_aws_chunked_decode(data, len, &decoded, &fail, &q->err) < 0)) {
        q->status = fail.status;
        snprintf(q->etag, sizeof q->etag, "%s", fail.code);
        buf_free(&decoded);
        return;
    }
    if (decoded.data || !strcmp(q->payload_hash, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")) {
        data = decoded.data ? decoded.data : (const uint8_t *)"";
        len = decoded.len;
    }
    q->total = len;
    relay_md5_hex(data, len, q->etag);
    q->rc = write_file((const char *)q->out.data, data, len, &q->err);
    q->spool_fail = q->rc < 0;
    buf_free(&decoded);
}

static void part_done(PoolJob *j) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    Upload *u = find(q->r, q->route.upload_id);
    if (u) u->jobs--;
    if (q->status) {
        relay_reply_error(q, q->status, q->etag, q->err.msg);
        return;
    }
    if (q->rc < 0 || !u) {
        if (!u) relay_reply_error(q, 404, "NoSuchUpload", "The multipart upload was aborted.");
        else relay_reply_store_error(q);
        return;
    }
    int pn = q->route.part_number;
    if (pn >= u->cap) {
        int nc = pn + 64 > 10001 ? 10001 : pn + 64;
        void *e = realloc(u->etags, (size_t)nc * sizeof *u->etags);
        if (e) u->etags = e;
        void *s = e ? realloc(u->sizes, (size_t)nc * sizeof *u->sizes) : NULL;
        if (s) u->sizes = s;
        if (!e || !s) {
            relay_reply_error(q, 503, "SlowDown", "The relay is out of memory; retry later.");
            return;
        }
        for (int i = u->cap; i < nc; i++) u->etags[i][0] = 0, u->sizes[i] = 0;
        u->cap = nc;
    }
    snprintf(u->etags[pn], sizeof u->etags[pn], "%s", q->etag);
    spool_release(q->r, &q->hold);  // the body's bytes are the upload's now
    spool_hold_add(q->r, &u->hold, (int64_t)q->total - (int64_t)u->sizes[pn]);
    u->spooled += q->total - u->sizes[pn];
    u->sizes[pn] = q->total;
    u->touched_ms = time_mono_ms();
    char v[48];
    snprintf(v, sizeof v, "\"%s\"", q->etag);
    evhttp_add_header(evhttp_request_get_output_headers(q->req), "ETag", v);
    relay_reply_buf(q, 200, NULL, NULL);
}

void mp_part(RelayReq *q) {
    Upload *u = lookup(q);
    if (!u) return;
    for (int i = 0; i < u->njoined; i++)
        if (u->joined[i] == q->route.part_number) {
            relay_reply_error(q, 400, "InvalidPart", "This part was joined by an earlier completion of the upload; "
                              "complete it with the same parts.");
            return;
        }
    buf_reset(&q->out);
    buf_printf(&q->out, "%s/part-%05d", u->dir, q->route.part_number);
    u->jobs++;
    q->job.run = part_run;
    q->job.done = part_done;
    q->state = RQ_JOB;
    pool_submit(&q->r->pool, &q->job);
}

static void complete_run(PoolJob *j, Store *st) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    const char *dir = (const char *)q->out.data;
    char obj[4400], part[4400];
    snprintf(obj, sizeof obj, "%s/object", dir);
    q->rc = -1;
    q->spool_fail = true;  // until the join is done: a full spool is retried (503), not a failure (500)
    int out = open(obj, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (out < 0) {
        err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", obj, strerror(errno));
        return;
    }
    static __thread uint8_t chunk[1 << 20];
    // q->joined leading parts are in the object already (an earlier completion).
    bool failed = ftruncate(out, (off_t)q->joined_size) < 0 || lseek(out, (off_t)q->joined_size, SEEK_SET) < 0;
    if (failed) err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", obj, strerror(errno));
    for (int i = q->joined; i < q->nparts && !failed; i++) {
        snprintf(part, sizeof part, "%s/part-%05d", dir, q->parts[i].number);
        int in = open(part, O_RDONLY | O_CLOEXEC);
        if (in < 0) {
            err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", part, strerror(errno));
            failed = true;
            break;
        }
        ssize_t n;
        uint64_t size = 0;
        // In the kernel first (no trip through this thread's buffer: seconds for a GB-sized
        // trainer state); read/write where copy_file_range cannot (another filesystem, old kernel).
        bool by_read = false;
        while ((n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0)) > 0) size += (uint64_t)n;
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
            by_read = true;  // the file offsets are past what was copied: read on from there
        } else if (n < 0) {
            err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", obj, strerror(errno));
            failed = true;
        }
        while (!failed && by_read && (n = read(in, chunk, sizeof chunk)) > 0) {
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(out, chunk + off, (size_t)(n - off));
                if (w <= 0) {
                    err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", obj, strerror(w < 0 ? errno : ENOSPC));
                    failed = true;
                    break;
                }
                off += w;
            }
            size += (uint64_t)n;
        }
        if (!failed && n < 0) {
            err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", part, strerror(errno));
            failed = true;
        }
        close(in);
        if (failed) break;
        unlink(part);  // joined: the spool keeps one copy of the data
        q->joined = i + 1;
        q->joined_size += size;
    }
    if (failed) {  // back to the last whole part, for a retried completion
        if (ftruncate(out, (off_t)q->joined_size) < 0) log_warn("relay: spool %s: %s", obj, strerror(errno));
        close(out);
        return;
    }
    if (close(out) < 0) {
        err_set(&q->err, PAIL_ERR_IO, "spool %s: %s", obj, strerror(errno));
        return;
    }
    q->spool_fail = false;
    // A file store links the joined object in (no second copy of a GB-sized upload): the
    // upload's folder is removed once it succeeds, and on a failure the link is undone.
    q->put.src_linkable = true;
    q->rc = store_put_file(st, q->route.key, obj, &q->put, &q->err);
    if (q->rc == 0) {
        PailErr herr = {0};
        if (store_head(st, q->route.key, &q->stat, &herr) < 0) q->stat.etag[0] = 0;
        relay_stat_normalize(&q->stat);
    }
}

static void complete_done(PoolJob *j) {
    RelayReq *q = (RelayReq *)((char *)j - offsetof(RelayReq, job));
    Relay *r = q->r;
    Upload *u = find(r, q->route.upload_id);
    if (q->rc == 0 || (u && q->err.code == PAIL_ERR_EXISTS)) {
        if (u) upload_free(r, u);
    } else if (u) {
        u->completing = false;  // the client may retry the completion: it carries on from the parts joined
        u->jobs--;
        u->touched_ms = time_mono_ms();
        for (int i = u->njoined; i < q->joined; i++) u->joined[i] = q->parts[i].number;
        u->njoined = q->joined;
        u->joined_size = q->joined_size;
    }
    if (q->rc < 0) {
        relay_reply_store_error(q);
        return;
    }
    cache_invalidate(&r->cache, q->route.key);
    char key[STORE_MAX_KEY + 1];
    snprintf(key, sizeof key, "%s", q->route.key);
    Buf b = {0};
    relay_xml_mp_complete(&b, r->bucket, key, q->stat.etag);
    relay_reply_buf(q, 200, "application/xml", &b);
    buf_free(&b);
    longpoll_wake_key(r, key);
}

void mp_complete(RelayReq *q) {
    RelayFail fail = {0};
    PailErr err = {0};
    if (relay_payload_check(q->payload_hash, q->body, q->body_len, &fail, &err) < 0) {
        relay_reply_error(q, fail.status, fail.code, err.msg);
        return;
    }
    Upload *u = lookup(q);
    if (!u) return;
    if (u->jobs > 0) {
        relay_reply_error(q, 409, "OperationAborted", "Parts of this upload are still being written; retry.");
        return;
    }
    if (relay_xml_parse_complete((const char *)q->body, q->body_len, &q->parts, &q->nparts, &fail, &err) < 0) {
        relay_reply_error(q, fail.status, fail.code, err.msg);
        return;
    }
    for (int i = 0; i < q->nparts; i++) {
        int pn = q->parts[i].number;
        if (pn >= u->cap || !u->etags[pn][0] || (q->parts[i].etag[0] && strcmp(q->parts[i].etag, u->etags[pn]))) {
            char msg[160];
            snprintf(msg, sizeof msg, "Part %d was not uploaded or its ETag does not match.", pn);
            relay_reply_error(q, 400, "InvalidPart", msg);
            return;
        }
    }
    // Parts already joined by an earlier completion must lead this one's list.
    bool same = q->nparts >= u->njoined;
    for (int i = 0; same && i < u->njoined; i++) same = q->parts[i].number == u->joined[i];
    if (!same) {
        relay_reply_error(q, 400, "InvalidPart", "An earlier completion of this upload joined other parts first; "
                          "complete it with the same parts.");
        return;
    }
    int *jn = realloc(u->joined, ((size_t)q->nparts + 1) * sizeof *jn);
    if (!jn) {
        relay_reply_error(q, 503, "SlowDown", "The relay is out of memory; retry.");
        return;
    }
    u->joined = jn;
    q->joined = u->njoined;
    q->joined_size = u->joined_size;
    q->put.nmeta = u->nmeta;
    memcpy(q->meta, u->meta, sizeof q->meta);
    q->put.meta = q->meta;
    // S3's multipart ETag: md5 of the parts' binary md5s, "-" part count.
    Buf cat = {0};
    for (int i = 0; i < q->nparts; i++) {
        uint8_t raw[16];
        const char *h = u->etags[q->parts[i].number];
        for (int k = 0; k < 16; k++) {
            unsigned v = 0;
            sscanf(h + 2 * k, "%2x", &v);
            raw[k] = (uint8_t)v;
        }
        buf_append(&cat, raw, 16);
    }
    char md5[33], etag[48];
    relay_md5_hex(cat.data ? cat.data : (const uint8_t *)"", cat.len, md5);
    buf_free(&cat);
    snprintf(etag, sizeof etag, "%s-%d", md5, q->nparts);
    if (relay_put_md5(q, etag) < 0) {
        relay_reply_error(q, 400, "MetadataTooLarge", "The relay keeps at most 7 user metadata entries.");
        return;
    }
    buf_reset(&q->out);
    buf_printf(&q->out, "%s", u->dir);
    u->completing = true;
    u->jobs++;
    q->job.run = complete_run;
    q->job.done = complete_done;
    q->state = RQ_JOB;
    pool_submit(&q->r->pool, &q->job);
}

void mp_abort(RelayReq *q) {
    Upload *u = lookup(q);
    if (!u) return;
    if (u->jobs > 0) {
        relay_reply_error(q, 409, "OperationAborted", "Parts of this upload are still being written; retry.");
        return;
    }
    upload_free(q->r, u);
    relay_reply_buf(q, 204, NULL, NULL);
}
