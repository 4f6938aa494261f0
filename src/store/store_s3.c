// s3:// backend: any S3-compatible endpoint (AWS S3, R2, MinIO, Ceph RGW,
// grpo-relay, moto) over libcurl (http.c), signed with SigV4 (sigv4.c), with
// transient failures retried under a time budget (retry.c). Keys get the URL's
// prefix prepended; listings strip it again. The file:// twin is store_file.c.
// Secrets (secret key, session token, signatures) never reach a log line or an
// error message: messages name the bucket, key, endpoint and S3's code/message.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "store/http.h"
#include "store/retry.h"
#include "store/s3_xml.h"
#include "store/sigv4.h"
#include "store/store.h"
#include "store/store_s3.h"

#define MIN_PART (5ull << 20)   // S3's minimum part size (all parts but the last)
#define MAX_PARTS 10000         // S3's maximum part count
#define MAX_PART (5ull << 30)   // S3's maximum part size
#define MAX_HEADERS (12 + STORE_MAX_META)

typedef struct {
    HttpClient http;
    char bucket[256];
    char prefix[STORE_MAX_KEY + 1];  // "" or ends with '/'
    bool https, virtual_host;
    char host[300];                  // host header value: [bucket.]host[:port]
    char base_url[400];              // scheme://host header value
    char endpoint[300];              // as shown in messages: scheme://host[:port]
    char region[64];
    char *access_key, *secret_key, *session_token;  // owned; secrets wiped at close
    double retry_seconds;
    uint64_t part_size;              // the largest part (and the multipart threshold)
    double part_seconds;             // a part should take about this long (PAIL_S3_PART_SECONDS, default 10)
    double rate_bps;                 // upload throughput observed on parts (0: none yet)
    bool clock_ok;                   // a request of this Store was accepted: its clock was in the window then
} S3;

// A clock that jumps out of SigV4's window mid-run is said once a minute per
// process, however many requests wait on it.
static _Atomic int64_t g_skew_report_ms;
#define SKEW_REPORT_EVERY_MS 60000

static S3 *s3_of(Store *st) { return st->impl; }

// ---- requests ----

typedef struct {
    const char *method;
    const char *key;               // object key on the bucket (prefix applied), NULL = bucket
    const SigV4Param *params;
    int nparams;
    const SigV4Header *extra;      // range, if-none-match, content-type, x-amz-meta-*
    int nextra;
    const uint8_t *body;           // memory body, or
    int body_fd;                   // file body (>= 0) at body_off
    uint64_t body_off, body_len;
    const char *payload_hash;      // NULL -> sha256 of the memory body
    Buf *sink;                     // or sink_fd >= 0, or sink_hash
    int sink_fd;
    Sha256 *sink_hash;
    int extra_timeout_s;
} S3Call;

static void call_init(S3Call *c, const char *method, const char *key) {
    memset(c, 0, sizeof *c);
    c->method = method;
    c->key = key;
    c->body_fd = -1;
    c->sink_fd = -1;
}

// "s3://bucket/key" for messages.
static void s3_name(const S3 *s, const char *key, char *out, size_t cap) {
    snprintf(out, cap, "s3://%s%s%s", s->bucket, key ? "/" : "", key ? key : "");
}

static int full_key(const S3 *s, const char *key, char *out, size_t cap, PailErr *err) {
    if ((size_t)snprintf(out, cap, "%s%s", s->prefix, key) >= cap || strlen(out) > STORE_MAX_KEY)
        return err_set(err, PAIL_ERR_INVALID, "s3://%s/%s%s: key with the store prefix is over %d bytes",
                       s->bucket, s->prefix, key, STORE_MAX_KEY);
    return 0;
}

// Path (raw, decoded) of a request: "/bucket/key" path-style, "/key" virtual-host.
static int request_path(const S3 *s, const char *key, Buf *out) {
    if (s->virtual_host) return buf_printf(out, "/%s", key ? key : "");
    return key ? buf_printf(out, "/%s/%s", s->bucket, key) : buf_printf(out, "/%s", s->bucket);
}

// Sends one request, retrying transient failures within the budget. Returns 0
// with the final response (any status; *attempts says how many times it was
// sent, libcurl's own resends included), or -1 with err (PAIL_ERR_NETWORK)
// when the transport failed or retries ran out.
//
// Every request this backend sends may be sent again, even when the failure
// came after the whole request went out: GET, HEAD, DELETE, a plain PUT and
// UploadPart are idempotent; a create-only PUT and CompleteMultipartUpload are
// settled by the retried-412 / NoSuchUpload rule (create_only_verdict), which
// needs *attempts > 1 whenever an earlier copy may have landed. The one request
// that is not idempotent, CreateMultipartUpload, at worst leaves an empty
// upload behind; lifecycle rules for incomplete uploads remove those.
static int s3_call(Store *st, const S3Call *c, HttpResponse *resp, int *attempts, PailErr *err) {
    S3 *s = s3_of(st);
    char name[STORE_MAX_KEY + 300];
    s3_name(s, c->key, name, sizeof name);
    Buf path = {0}, query = {0}, url = {0}, authz = {0};
    char payload_hash[65];
    int rc = -1;
    if (request_path(s, c->key, &path) < 0 || sigv4_canonical_query_pairs(&query, c->params, c->nparams) < 0 ||
        buf_printf(&url, "%s", s->base_url) < 0 || sigv4_uri_encode(&url, (char *)path.data, path.len, true) < 0 ||
        (query.len && buf_printf(&url, "?%s", (char *)query.data) < 0)) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (c->payload_hash) snprintf(payload_hash, sizeof payload_hash, "%s", c->payload_hash);
    else sha256_hex(c->body ? c->body : (const uint8_t *)"", c->body ? c->body_len : 0, payload_hash);

    RetryState rs;
    retry_init(&rs, s->retry_seconds);
    size_t sink_len0 = c->sink ? c->sink->len : 0;
    *attempts = 0;
    for (;;) {
        (*attempts)++;
        if (c->sink) {
            c->sink->len = sink_len0;
            if (c->sink->data) c->sink->data[sink_len0] = 0;
        }
        if (c->sink_fd >= 0 && (ftruncate(c->sink_fd, 0) < 0 || lseek(c->sink_fd, 0, SEEK_SET) < 0)) {
            err_set(err, PAIL_ERR_IO, "%s: cannot rewind the download file: %s", name, strerror(errno));
            goto out;
        }
        char amz_date[17];
        sigv4_amz_date(amz_date, time_unix_s());
        SigV4Header h[MAX_HEADERS];
        int nh = 0;
        h[nh++] = (SigV4Header){"host", s->host};
        h[nh++] = (SigV4Header){"x-amz-date", amz_date};
        h[nh++] = (SigV4Header){"x-amz-content-sha256", payload_hash};
        if (s->session_token) h[nh++] = (SigV4Header){"x-amz-security-token", s->session_token};
        for (int i = 0; i < c->nextra && nh < MAX_HEADERS; i++) h[nh++] = c->extra[i];
        SigV4Request sr = {.method = c->method, .path = (char *)path.data, .query = (char *)query.data,
                           .headers = h, .nheaders = nh, .payload_hash = payload_hash};
        char sig[65];
        buf_reset(&authz);
        if (buf_printf(&authz, "Authorization: ") < 0 ||
            sigv4_sign(&sr, s->access_key, s->secret_key, amz_date, s->region, "s3", sig, &authz, err) < 0) {
            err_wrap(err, "%s: signing", name);
            goto out;
        }
        struct curl_slist *hl = NULL, *t;
        bool ok = true;
        for (int i = 0; i < nh && ok; i++) {
            Buf line = {0};
            ok = buf_printf(&line, "%s: %s", h[i].name, h[i].value) == 0 &&
                 (t = curl_slist_append(hl, (char *)line.data)) != NULL;
            if (ok) hl = t;
            buf_free(&line);
        }
        // "Expect:" turns off 100-continue (one round trip less per PUT).
        ok = ok && (t = curl_slist_append(hl, (char *)authz.data)) && (hl = t) && (t = curl_slist_append(hl, "Expect:")) &&
             (hl = t);
        memset(authz.data, 0, authz.len);  // the signature does not linger
        if (!ok) {
            curl_slist_free_all(hl);
            err_set(err, PAIL_ERR_NOMEM, "out of memory");
            goto out;
        }
        HttpRequest hq = {.method = c->method, .url = (char *)url.data, .headers = hl, .body = c->body,
                          .body_fd = c->body_fd, .body_off = c->body_off, .body_len = c->body_len,
                          .sink = c->sink, .sink_fd = c->sink_fd, .sink_hash = c->sink_hash,
                          .extra_timeout_s = c->extra_timeout_s};
        int prc = http_perform(&s->http, &hq, resp);
        *attempts += resp->resends;
        for (t = hl; t; t = t->next)
            if (!strncmp(t->data, "Authorization:", 14)) memset(t->data, 0, strlen(t->data));
        curl_slist_free_all(hl);
        if (resp->relay) st->is_relay = true;
        S3Error se = {0};
        if (prc == 0 && resp->status >= 300) s3_xml_error((char *)resp->err_body.data, resp->err_body.len, &se);
        log_debug("s3: %s %s -> %ld%s%s (attempt %d)", c->method, name, prc == 0 ? resp->status : 0L,
                  se.code[0] ? " " : "", se.code, *attempts);
        // RequestTimeTooSkewed on a Store whose requests went through before:
        // the clock jumped mid-run (a VM resumed, a bad NTP step). The host
        // must be fixed, but chrony may step it back any moment, so back off
        // (0.5-1 s, doubling to a minute) instead of failing the tool, whose
        // own loop would retry it every second for ever. On a Store's first
        // request the same answer is final: one line, and the tool stops.
        bool skewed = prc == 0 && resp->status == 403 && !strcmp(se.code, "RequestTimeTooSkewed");
        if (prc == 0 && !skewed && (resp->status < 400 || resp->status == 404 || resp->status == 412))
            s->clock_ok = true;
        skewed = skewed && s->clock_ok;
        if (prc < 0 && !retry_is_transient(resp->xfer, 0, NULL)) {
            err_set(err, PAIL_ERR_NETWORK, "%s: %s %s failed: %s%s", name, c->method, s->endpoint, resp->xfer_msg,
                    resp->xfer == XFER_TLS ? " (TLS: check the endpoint's certificate, or AWS_CA_BUNDLE / ca_bundle)"
                                           : "");
            goto out;
        }
        if (prc == 0 && !skewed && !retry_is_transient(XFER_OK, resp->status, se.code)) {
            rc = 0;
            goto out;
        }
        char why[CURL_ERROR_SIZE + 128];
        if (prc < 0) snprintf(why, sizeof why, "%s", resp->xfer_msg);
        else snprintf(why, sizeof why, "HTTP %ld%s%s%s", resp->status, se.code[0] ? " " : "", se.code,
                      skewed ? " (the system clock is off: sync it (chrony/ntp))" : "");
        if (skewed) retry_clock_skew(&rs);
        // A hashed download that failed midway cannot be resumed into the same hash.
        if (c->sink_hash && resp->received > 0) {
            err_set(err, PAIL_ERR_NETWORK, "%s: %s from %s failed: %s", name, c->method, s->endpoint, why);
            goto out;
        }
        if (!retry_wait(&rs)) {
            if (rs.stopped)
                err_set(err, PAIL_ERR_INTERRUPTED, "%s: %s at %s: not retried further, the process is stopping "
                        "(a stop signal), after %d attempts in %.1f s: %s", name, c->method, s->endpoint, *attempts,
                        retry_elapsed_s(&rs), why);
            else
                err_set(err, PAIL_ERR_NETWORK, "%s: %s at %s gave up after %d attempts in %.1f s (--max-outage %g s): "
                        "%s", name, c->method, s->endpoint, *attempts, retry_elapsed_s(&rs), rs.budget_s, why);
            goto out;
        }
        // A blip is logged per retry; a long outage once in a while, so that a
        // tool waiting on the bucket says what it waits for, without flooding.
        int64_t now = time_mono_ms();
        int64_t due = atomic_load(&g_skew_report_ms);
        if (skewed) {
            if (now >= due && atomic_compare_exchange_strong(&g_skew_report_ms, &due, now + SKEW_REPORT_EVERY_MS))
                log_warn("s3: %s %s: RequestTimeTooSkewed: this host's clock is more than 15 minutes from %s's, "
                         "after earlier requests went through: the clock jumped. Sync it (chrony/ntp, e.g. "
                         "'chronyc makestep' or 'timedatectl set-ntp true'); retrying with backoff up to a minute "
                         "apart until --max-outage %g s (said once a minute)",
                         c->method, name, s->endpoint, rs.budget_s);
        } else if (retry_report_due(&rs, now))
            log_warn("s3: %s %s failing for %.0f s (%s), retrying until --max-outage %g s", c->method, name,
                     (double)(now - rs.start_ms) / 1000.0, why, rs.budget_s);
        else if (now - rs.start_ms < RETRY_REPORT_AFTER_MS)
            log_info("s3: %s %s: %s, retry %d", c->method, name, why, rs.retries);
    }
out:
    buf_free(&path);
    buf_free(&query);
    buf_free(&url);
    buf_free(&authz);
    return rc;
}

// Maps a final non-success response to an error naming the object.
static int s3_fail(const S3 *s, const char *key, const char *method, const HttpResponse *r, PailErr *err) {
    char name[STORE_MAX_KEY + 300];
    s3_name(s, key, name, sizeof name);
    S3Error se = {0};
    s3_xml_error((char *)r->err_body.data, r->err_body.len, &se);
    long st = r->status;
    if (st == 404 && !strcmp(se.code, "NoSuchBucket"))
        return err_set(err, PAIL_ERR_NOT_FOUND, "s3://%s: bucket '%s' does not exist at %s (NoSuchBucket)", s->bucket,
                       s->bucket, s->endpoint);
    if (st == 404 && (!strcmp(se.code, "NoSuchKey") || !se.code[0]))
        return err_set(err, PAIL_ERR_NOT_FOUND, "%s: not found", name);
    if (st == 401 || st == 403) {
        const char *hint = !strcmp(se.code, "RequestTimeTooSkewed")
                               ? "the system clock is off: sync it (chrony/ntp)"
                               : "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), the "
                                 "key's permissions on the bucket, and the system clock";
        return err_set(err, PAIL_ERR_AUTH, "%s: %s refused by %s: %s%s%s (%s)", name, method, s->endpoint,
                       se.code[0] ? se.code : "HTTP 403", se.message[0] ? ": " : "", se.message, hint);
    }
    if (st == 301 || !strcmp(se.code, "AuthorizationHeaderMalformed") || !strcmp(se.code, "PermanentRedirect"))
        return err_set(err, PAIL_ERR_INVALID, "%s: %s at %s: %s%s%s (is region '%s' the bucket's region? set AWS_REGION)",
                       name, method, s->endpoint, se.code[0] ? se.code : "HTTP 301", se.message[0] ? ": " : "",
                       se.message, s->region);
    if (st == 412) return err_set(err, PAIL_ERR_EXISTS, "%s: already exists (create-only write refused)", name);
    if (st == 304) return err_set(err, PAIL_ERR_NOT_MODIFIED, "%s: not modified", name);
    return err_set(err, st >= 500 ? PAIL_ERR_NETWORK : PAIL_ERR_INVALID, "%s: %s at %s: HTTP %ld%s%s%s%s", name,
                   method, s->endpoint, st, se.code[0] ? " " : "", se.code, se.message[0] ? ": " : "", se.message);
}

static void stat_from(const HttpResponse *r, StoreStat *stat) {
    memset(stat, 0, sizeof *stat);
    stat->size = r->total_size ? r->total_size : (r->content_length > 0 ? (uint64_t)r->content_length : 0);
    snprintf(stat->etag, sizeof stat->etag, "%s", r->etag);
    stat->mtime = r->last_modified;
    stat->nmeta = r->nmeta;
    memcpy(stat->meta, r->meta, sizeof r->meta);
}

// ---- put ----

// Builds content-type, x-amz-meta-* and If-None-Match headers; meta names are
// checked (lower-case [a-z0-9_-]) and values printable ASCII without edge spaces.
static int put_headers(const S3 *s, const char *key, const StorePutOpts *o, SigV4Header *h, int *nh,
                       char names[][80], PailErr *err) {
    int n = 0;
    h[n++] = (SigV4Header){"content-type", o->content_type ? o->content_type : "application/octet-stream"};
    if (o->nmeta > STORE_MAX_META)
        return err_set(err, PAIL_ERR_INVALID, "s3://%s/%s: %d metadata entries (max %d)", s->bucket, key, o->nmeta,
                       STORE_MAX_META);
    for (int i = 0; i < o->nmeta; i++) {
        const StoreMeta *m = &o->meta[i];
        if (!m->name[0]) return err_set(err, PAIL_ERR_INVALID, "s3://%s/%s: metadata name is empty", s->bucket, key);
        for (const char *p = m->name; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
                return err_set(err, PAIL_ERR_INVALID,
                               "s3://%s/%s: metadata name '%s' must be lower-case letters, digits, '-' or '_'",
                               s->bucket, key, m->name);
        size_t vl = strlen(m->value);
        for (size_t j = 0; j < vl; j++)
            if ((unsigned char)m->value[j] < 0x20 || (unsigned char)m->value[j] > 0x7e)
                return err_set(err, PAIL_ERR_INVALID, "s3://%s/%s: metadata '%s' has a non-printable or non-ASCII byte",
                               s->bucket, key, m->name);
        if (vl && (m->value[0] == ' ' || m->value[vl - 1] == ' '))
            return err_set(err, PAIL_ERR_INVALID, "s3://%s/%s: metadata '%s' starts or ends with a space", s->bucket,
                           key, m->name);
        snprintf(names[i], 80, "x-amz-meta-%s", m->name);
        h[n++] = (SigV4Header){names[i], m->value};
    }
    if (o->create_only) h[n++] = (SigV4Header){"if-none-match", "*"};
    *nh = n;
    return 0;
}

enum { CREATE_AGAIN = 2, WRITE_ROUNDS = 3 };

// After a retried create-only write got 412 (or a retried complete got
// NoSuchUpload), the object may be our own first attempt whose response was
// lost. Same content (pail-sha256 metadata, else a download hashed) -> 1;
// no object at all -> 2.
static int same_content(Store *st, const char *fkey, uint64_t size, const char *sha_hex, PailErr *err) {
    S3 *s = s3_of(st);
    HttpResponse r = {0};
    int attempts, rc = -1;
    S3Call c;
    call_init(&c, "HEAD", fkey);
    if (s3_call(st, &c, &r, &attempts, err) < 0) goto out;
    if (r.status == 404) {  // the conflicting write is gone (or never landed): the key is free again
        rc = 2;
        goto out;
    }
    if (r.status != 200) {
        s3_fail(s, fkey, "HEAD", &r, err);
        goto out;
    }
    StoreStat stat;
    stat_from(&r, &stat);
    if (stat.size != size) {
        rc = 0;
        goto out;
    }
    const char *m = store_stat_meta(&stat, "pail-sha256");
    if (m) {
        rc = !strcmp(m, sha_hex);
        goto out;
    }
    Sha256 *h = sha256_new();
    call_init(&c, "GET", fkey);
    c.sink_hash = h;
    if (s3_call(st, &c, &r, &attempts, err) < 0) {
        char tmp[65];
        sha256_final_hex(h, tmp);
        goto out;
    }
    char got[65];
    sha256_final_hex(h, got);
    if (r.status != 200) {
        s3_fail(s, fkey, "GET", &r, err);
        goto out;
    }
    rc = !strcmp(got, sha_hex);
out:
    http_response_free(&r);
    return rc;
}

// A create-only write ended with `status` after `attempts`: decides success
// when an earlier attempt (whose response we never saw) may have written it.
// CREATE_AGAIN (err set) when there is no object after all: a conflicting
// write (an earlier attempt still in flight at a restarting relay, say) did
// not stay, and the caller starts the write again (at most WRITE_ROUNDS times).
static int create_only_verdict(Store *st, const char *fkey, const HttpResponse *r, int attempts, uint64_t size,
                               const char *sha_hex, const char *path_for_hash, PailErr *err) {
    S3 *s = s3_of(st);
    if (attempts <= 1) return s3_fail(s, fkey, "PUT", r, err);
    char hex[65];
    if (!sha_hex) {
        if (sha256_file_hex(path_for_hash, hex, err) < 0) return -1;
        sha_hex = hex;
    }
    int same = same_content(st, fkey, size, sha_hex, err);
    if (same < 0) return err_wrap(err, "s3://%s/%s: checking a create-only conflict after a retry", s->bucket, fkey);
    if (same == 2) {  // 412, then no object: the write it conflicted with did not stay; the caller writes again
        err_set(err, PAIL_ERR_NETWORK, "s3://%s/%s: create-only write refused (412), yet no object is there",
                s->bucket, fkey);
        return CREATE_AGAIN;
    }
    if (same) {
        log_info("s3: s3://%s/%s: create-only write retried; the existing object is ours", s->bucket, fkey);
        return 0;
    }
    return err_set(err, PAIL_ERR_EXISTS, "s3://%s/%s: already exists with other content (create-only write refused)",
                   s->bucket, fkey);
}

static int put_multipart(Store *st, const char *fkey, int fd, const uint8_t *mem, const char *path, uint64_t size,
                         const StorePutOpts *o, PailErr *err);

// One PUT of the object c describes (size bytes; sha_hex its sha256, or NULL
// with path to hash it from when a create-only verdict needs it), made again
// while the create-only verdict finds no object behind a 412 (CREATE_AGAIN),
// at most WRITE_ROUNDS times. 0 or -1 (err).
static int put_single(Store *st, const char *fkey, const S3Call *c, const StorePutOpts *o, uint64_t size,
                      const char *sha_hex, const char *path, PailErr *err) {
    S3 *s = s3_of(st);
    int rc = CREATE_AGAIN;
    for (int round = 0; rc == CREATE_AGAIN && round < WRITE_ROUNDS; round++) {
        if (round) log_warn("%s: writing it again", err->msg);
        HttpResponse r = {0};
        int attempts;
        rc = s3_call(st, c, &r, &attempts, err);
        if (rc == 0 && r.status != 200) {
            if (r.status == 412 && o->create_only)
                rc = create_only_verdict(st, fkey, &r, attempts, size, sha_hex, path, err);
            else rc = s3_fail(s, fkey, "PUT", &r, err);
        }
        http_response_free(&r);
    }
    return rc == CREATE_AGAIN ? -1 : rc;
}

static int s3_put(Store *st, const char *key, const void *data, size_t len, const StorePutOpts *o, PailErr *err) {
    S3 *s = s3_of(st);
    char fkey[STORE_MAX_KEY + 2];
    if (full_key(s, key, fkey, sizeof fkey, err) < 0) return -1;
    // Above the part size in parts, as a file is: one request of a trainer state (79 MB for LoRA r16 on a
    // 135M model) was over grpo-relay's --max-body-bytes and every S3 single-PUT limit beyond 5 GB.
    if (len > s->part_size) return put_multipart(st, fkey, -1, data, key, len, o, err);
    SigV4Header h[MAX_HEADERS];
    char names[STORE_MAX_META][80];
    int nh;
    if (put_headers(s, fkey, o, h, &nh, names, err) < 0) return -1;
    char sha[65];
    sha256_hex(data ? data : "", len, sha);
    S3Call c;
    call_init(&c, "PUT", fkey);
    c.extra = h;
    c.nextra = nh;
    c.body = data ? data : (const uint8_t *)"";
    c.body_len = len;
    c.payload_hash = sha;
    return put_single(st, fkey, &c, o, len, sha, NULL, err);
}

// sha256 of fd[off, off+len) (for signed part uploads over plain http).
static int hash_range(int fd, uint64_t off, uint64_t len, char hex[65], const char *path, PailErr *err) {
    Sha256 *h = sha256_new();
    static __thread uint8_t chunk[1 << 16];
    while (len) {
        size_t want = len < sizeof chunk ? (size_t)len : sizeof chunk;
        ssize_t got = pread(fd, chunk, want, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            sha256_final_hex(h, hex);
            return err_set(err, PAIL_ERR_IO, "%s: read at %llu: %s", path, (unsigned long long)off,
                           got < 0 ? strerror(errno) : "file shrank");
        }
        sha256_update(h, chunk, (size_t)got);
        off += (uint64_t)got;
        len -= (uint64_t)got;
    }
    sha256_final_hex(h, hex);
    return 0;
}

static void abort_upload(Store *st, const char *fkey, const char *upload_id) {
    S3Call c;
    call_init(&c, "DELETE", fkey);
    SigV4Param p[] = {{"uploadId", upload_id}};
    c.params = p;
    c.nparams = 1;
    HttpResponse r = {0};
    int attempts;
    PailErr e = {0};
    if (s3_call(st, &c, &r, &attempts, &e) < 0 || (r.status != 204 && r.status != 200 && r.status != 404))
        log_warn("s3: s3://%s/%s: abort of multipart upload failed (%s); a lifecycle rule for incomplete uploads "
                 "cleans it up", s3_of(st)->bucket, fkey, e.msg[0] ? e.msg : "unexpected status");
    http_response_free(&r);
}

uint64_t s3_part_size(uint64_t max, double rate_bps, double seconds, uint64_t remaining, int parts_done) {
    uint64_t lo = max < MIN_PART ? max / 8 : MIN_PART;  // below S3's floor only for a test's small parts
    if (lo < 1) lo = 1;
    uint64_t want = rate_bps > 0 ? (uint64_t)(rate_bps * seconds) : max;
    if (want < lo) want = lo;
    if (want > max) want = max;
    int left = MAX_PARTS - parts_done > 1 ? MAX_PARTS - parts_done : 1;
    uint64_t need = (remaining + (uint64_t)left - 1) / (uint64_t)left;  // or the rest would not fit
    if (want < need) want = need;
    if (want > MAX_PART) want = MAX_PART;
    return want < remaining ? want : remaining;
}

// Parts come from the file fd (path names it in messages) or, with mem non-NULL, from memory.
// Each part's size follows the throughput the parts before it saw (s3_part_size):
// on a slow link a part still takes about part_seconds, so a stall or a retry
// costs little and no server's per-request limit is reached.
// One multipart upload: 0, -1 (err), or CREATE_AGAIN (err set) when the
// upload vanished under it (UploadPart: NoSuchUpload, as after a relay
// restart lost its spool) or its create-only complete found no object.
static int put_multipart_once(Store *st, const char *fkey, int fd, const uint8_t *mem, const char *path,
                              uint64_t size, const StorePutOpts *o, PailErr *err) {
    S3 *s = s3_of(st);
    int nparts = 0, cap = 64;
    uint64_t off = 0, smallest = UINT64_MAX, largest = 0;
    SigV4Header h[MAX_HEADERS];
    char names[STORE_MAX_META][80];
    int nh;
    StorePutOpts co = *o;
    co.create_only = false;  // the condition goes on CompleteMultipartUpload
    if (put_headers(s, fkey, &co, h, &nh, names, err) < 0) return -1;
    HttpResponse r = {0};
    Buf body = {0};
    int attempts, rc = -1;
    char upload_id[1024] = "";
    char(*etags)[80] = calloc((size_t)cap, sizeof *etags);
    if (!etags) return err_set(err, PAIL_ERR_NOMEM, "out of memory");

    S3Call c;
    call_init(&c, "POST", fkey);
    SigV4Param up[] = {{"uploads", ""}};
    c.params = up;
    c.nparams = 1;
    c.extra = h;
    c.nextra = nh;
    c.sink = &body;
    if (s3_call(st, &c, &r, &attempts, err) < 0) goto out;
    if (r.status != 200) {
        s3_fail(s, fkey, "CreateMultipartUpload", &r, err);
        goto out;
    }
    if (s3_xml_upload_id((char *)body.data, body.len, upload_id, sizeof upload_id, err) < 0) {
        err_wrap(err, "s3://%s/%s", s->bucket, fkey);
        goto out;
    }
    for (int i = 0; off < size; i++) {
        uint64_t len = s3_part_size(s->part_size, s->rate_bps, s->part_seconds, size - off, i);
        if (i == cap) {
            void *e = realloc(etags, (size_t)cap * 2 * sizeof *etags);
            if (!e) {
                err_set(err, PAIL_ERR_NOMEM, "out of memory");
                goto abort;
            }
            etags = e;
            cap *= 2;
        }
        char num[16], hex[65];
        snprintf(num, sizeof num, "%d", i + 1);
        // Over https TLS protects the bytes; over http each part is hashed and signed.
        if (s->https) snprintf(hex, sizeof hex, "%s", SIGV4_UNSIGNED_PAYLOAD);
        else if (mem) sha256_hex(mem + off, len, hex);
        else if (hash_range(fd, off, len, hex, path, err) < 0) goto abort;
        SigV4Param pp[] = {{"partNumber", num}, {"uploadId", upload_id}};
        call_init(&c, "PUT", fkey);
        c.params = pp;
        c.nparams = 2;
        if (mem) {
            c.body = mem + off;
        } else {
            c.body_fd = fd;
            c.body_off = off;
        }
        c.body_len = len;
        c.payload_hash = hex;
        int64_t t0 = time_mono_ms();
        if (s3_call(st, &c, &r, &attempts, err) < 0) goto abort;
        int64_t dt = time_mono_ms() - t0;
        if (r.status == 200 && len >= (64u << 10)) {  // what the link carries, retries and all
            double bps = (double)len * 1000.0 / (double)(dt > 0 ? dt : 1);
            s->rate_bps = s->rate_bps > 0 ? 0.5 * s->rate_bps + 0.5 * bps : bps;
        }
        if (r.status != 200) {
            S3Error pe = {0};
            s3_xml_error((char *)r.err_body.data, r.err_body.len, &pe);
            s3_fail(s, fkey, "UploadPart", &r, err);
            if (r.status == 404 && !strcmp(pe.code, "NoSuchUpload")) {
                rc = CREATE_AGAIN;  // nothing left to abort
                goto out;
            }
            goto abort;
        }
        if (!r.etag[0]) {
            err_set(err, PAIL_ERR_INVALID, "s3://%s/%s: part %d upload returned no ETag", s->bucket, fkey, i + 1);
            goto abort;
        }
        snprintf(etags[i], sizeof etags[i], "\"%s\"", r.etag);
        off += len;
        nparts = i + 1;
        if (len < smallest) smallest = len;
        if (len > largest) largest = len;
    }
    log_debug("s3: s3://%s/%s: %d parts of %llu to %llu bytes (upload throughput %.0f B/s)", s->bucket, fkey, nparts,
              (unsigned long long)smallest, (unsigned long long)largest, s->rate_bps);
    Buf xml = {0};
    if (s3_xml_complete_body(&xml, etags, nparts) < 0) {
        buf_free(&xml);
        err_set(err, PAIL_ERR_NOMEM, "out of memory");
        goto abort;
    }
    SigV4Header ch[2] = {{"content-type", "application/xml"}, {"if-none-match", "*"}};
    SigV4Param cp[] = {{"uploadId", upload_id}};
    call_init(&c, "POST", fkey);
    c.params = cp;
    c.nparams = 1;
    c.extra = ch;
    c.nextra = o->create_only ? 2 : 1;
    // The server joins the parts before it answers (a grpo-relay on a file store copies
    // them, S3 sends whitespace meanwhile): a silent wait of a second per 16 MiB is no
    // stall, or a GB-sized state would be uploaded again and again.
    c.extra_timeout_s = (int)(size >> 24);
    c.body = xml.data;
    c.body_len = xml.len;
    buf_reset(&body);
    c.sink = &body;
    int crc = s3_call(st, &c, &r, &attempts, err);
    buf_free(&xml);
    if (crc < 0) goto abort;
    S3Error se;
    // CompleteMultipartUpload can fail with 200 and an <Error> body.
    if (r.status == 200 && s3_xml_error((char *)body.data, body.len, &se) == 0) {
        err_set(err, PAIL_ERR_NETWORK, "s3://%s/%s: CompleteMultipartUpload at %s: %s: %s", s->bucket, fkey,
                s->endpoint, se.code, se.message);
        goto abort;
    }
    if (r.status == 200) {
        rc = 0;
        goto out;
    }
    S3Error e2 = {0};
    s3_xml_error((char *)r.err_body.data, r.err_body.len, &e2);
    // A retried complete whose first attempt succeeded: 412 (create-only) or
    // NoSuchUpload. Either way the object decides.
    if ((r.status == 412 && o->create_only) || (r.status == 404 && attempts > 1 && !strcmp(e2.code, "NoSuchUpload"))) {
        char whole[65];
        if (mem) sha256_hex(mem, size, whole);
        rc = create_only_verdict(st, fkey, &r, attempts, size, mem ? whole : NULL, mem ? NULL : path, err);
        if (rc == 0 || rc == CREATE_AGAIN || r.status == 404) goto out;
        goto abort;
    }
    s3_fail(s, fkey, "CompleteMultipartUpload", &r, err);
abort:
    if (upload_id[0]) abort_upload(st, fkey, upload_id);
out:
    free(etags);
    buf_free(&body);
    http_response_free(&r);
    return rc;
}

static int put_multipart(Store *st, const char *fkey, int fd, const uint8_t *mem, const char *path, uint64_t size,
                         const StorePutOpts *o, PailErr *err) {
    int rc = CREATE_AGAIN;
    for (int round = 0; rc == CREATE_AGAIN && round < WRITE_ROUNDS; round++) {
        if (round) log_warn("%s: starting the upload again", err->msg);
        rc = put_multipart_once(st, fkey, fd, mem, path, size, o, err);
    }
    return rc == CREATE_AGAIN ? -1 : rc;
}

static int s3_put_file(Store *st, const char *key, const char *path, const StorePutOpts *o, PailErr *err) {
    S3 *s = s3_of(st);
    char fkey[STORE_MAX_KEY + 2];
    if (full_key(s, key, fkey, sizeof fkey, err) < 0) return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, errno == ENOENT ? PAIL_ERR_NOT_FOUND : PAIL_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(err, PAIL_ERR_INVALID, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    int rc;
    if (size > s->part_size) {
        rc = put_multipart(st, fkey, fd, NULL, path, size, o, err);
    } else {
        SigV4Header h[MAX_HEADERS];
        char names[STORE_MAX_META][80];
        int nh;
        char hex[65];
        bool hashed = !s->https;
        if (put_headers(s, fkey, o, h, &nh, names, err) < 0 ||
            (hashed && hash_range(fd, 0, size, hex, path, err) < 0)) {
            close(fd);
            return -1;
        }
        if (!hashed) snprintf(hex, sizeof hex, "%s", SIGV4_UNSIGNED_PAYLOAD);
        S3Call c;
        call_init(&c, "PUT", fkey);
        c.extra = h;
        c.nextra = nh;
        c.body_fd = fd;
        c.body_len = size;
        c.payload_hash = hex;
        rc = put_single(st, fkey, &c, o, size, hashed ? hex : NULL, path, err);
    }
    close(fd);
    return rc;
}

// ---- get / head / delete ----

static int get_headers(const StoreGetOpts *o, SigV4Header *h, char *range, size_t rcap, char *inm, size_t icap) {
    int n = 0;
    if (o && o->range_end >= 0) {  // as in store_file.c: range_end < 0 means the whole object
        snprintf(range, rcap, "bytes=%lld-%lld", (long long)o->range_start, (long long)o->range_end);
        h[n++] = (SigV4Header){"range", range};
    }
    if (o && o->if_none_match && o->if_none_match[0]) {
        // Stored etags have their quotes stripped; HTTP wants them back.
        snprintf(inm, icap, "\"%s\"", o->if_none_match);
        h[n++] = (SigV4Header){"if-none-match", inm};
    }
    return n;
}

static int s3_get(Store *st, const char *key, Buf *out, const StoreGetOpts *o, StoreStat *stat, PailErr *err) {
    S3 *s = s3_of(st);
    char fkey[STORE_MAX_KEY + 2], range[64], inm[96];
    if (full_key(s, key, fkey, sizeof fkey, err) < 0) return -1;
    if (o && o->range_end >= 0 && (o->range_start < 0 || o->range_end < o->range_start))
        return err_set(err, PAIL_ERR_INVALID, "s3://%s/%s: range %lld-%lld is empty", s->bucket, fkey,
                       (long long)o->range_start, (long long)o->range_end);
    SigV4Header h[2];
    S3Call c;
    call_init(&c, "GET", fkey);
    c.extra = h;
    c.nextra = get_headers(o, h, range, sizeof range, inm, sizeof inm);
    c.sink = out;
    HttpResponse r = {0};
    int attempts, rc = s3_call(st, &c, &r, &attempts, err);
    if (rc == 0) {
        if (r.status == 200 || r.status == 206) stat_from(&r, stat);
        else rc = s3_fail(s, fkey, "GET", &r, err);
    }
    http_response_free(&r);
    return rc;
}

static int s3_get_file(Store *st, const char *key, const char *path, StoreStat *stat, PailErr *err) {
    S3 *s = s3_of(st);
    char fkey[STORE_MAX_KEY + 2];
    if (full_key(s, key, fkey, sizeof fkey, err) < 0) return -1;
    // Temp file in the destination folder so the rename is atomic.
    char tmp[4200], dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) ? (int)(slash - path) : 1, path);
    else snprintf(dir, sizeof dir, ".");
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.pail-tmp-XXXXXX", path) >= sizeof tmp)
        return err_set(err, PAIL_ERR_INVALID, "%s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return err_set(err, PAIL_ERR_IO, "%s: cannot create a temp file beside it: %s", path, strerror(errno));
    S3Call c;
    call_init(&c, "GET", fkey);
    c.sink_fd = fd;
    HttpResponse r = {0};
    int attempts, rc = s3_call(st, &c, &r, &attempts, err);
    if (rc == 0 && r.status != 200) rc = s3_fail(s, fkey, "GET", &r, err);
    if (rc == 0) {
        stat_from(&r, stat);
        if (r.content_length >= 0 && r.received != (uint64_t)r.content_length)
            rc = err_set(err, PAIL_ERR_NETWORK, "s3://%s/%s: got %llu of %lld bytes", s->bucket, fkey,
                         (unsigned long long)r.received, (long long)r.content_length);
    }
    if (rc == 0 && fsync(fd) < 0) rc = err_set(err, PAIL_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) < 0 && rc == 0) rc = err_set(err, PAIL_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) < 0) rc = err_set(err, PAIL_ERR_IO, "%s: rename: %s", path, strerror(errno));
    if (rc == 0) rc = fs_fsync_dir(dir, err);
    if (rc < 0) unlink(tmp);
    http_response_free(&r);
    return rc;
}

static int s3_head(Store *st, const char *key, StoreStat *stat, PailErr *err) {
    S3 *s = s3_of(st);
    char fkey[STORE_MAX_KEY + 2];
    if (full_key(s, key, fkey, sizeof fkey, err) < 0) return -1;
    S3Call c;
    call_init(&c, "HEAD", fkey);
    HttpResponse r = {0};
    int attempts, rc = s3_call(st, &c, &r, &attempts, err);
    if (rc == 0) {
        if (r.status == 200) stat_from(&r, stat);
        else rc = s3_fail(s, fkey, "HEAD", &r, err);
    }
    http_response_free(&r);
    return rc;
}

static int s3_del(Store *st, const char *key, PailErr *err) {
    S3 *s = s3_of(st);
    char fkey[STORE_MAX_KEY + 2];
    if (full_key(s, key, fkey, sizeof fkey, err) < 0) return -1;
    S3Call c;
    call_init(&c, "DELETE", fkey);
    HttpResponse r = {0};
    int attempts, rc = s3_call(st, &c, &r, &attempts, err);
    if (rc == 0 && r.status != 204 && r.status != 200) {
        S3Error se = {0};
        s3_xml_error((char *)r.err_body.data, r.err_body.len, &se);
        if (!(r.status == 404 && strcmp(se.code, "NoSuchBucket"))) rc = s3_fail(s, fkey, "DELETE", &r, err);
    }
    http_response_free(&r);
    return rc;
}

// ---- list ----

static int s3_list(Store *st, const StoreListOpts *o, StoreList *out, PailErr *err) {
    S3 *s = s3_of(st);
    char prefix[2 * STORE_MAX_KEY + 2], after[2 * STORE_MAX_KEY + 2], maxk[16], wait[16];
    snprintf(prefix, sizeof prefix, "%s%s", s->prefix, o->prefix ? o->prefix : "");
    snprintf(maxk, sizeof maxk, "%d", o->max_keys > 0 ? o->max_keys : 1000);
    SigV4Param p[8];
    int n = 0;
    p[n++] = (SigV4Param){"list-type", "2"};
    p[n++] = (SigV4Param){"max-keys", maxk};
    if (prefix[0]) p[n++] = (SigV4Param){"prefix", prefix};
    if (o->start_after && o->start_after[0]) {
        snprintf(after, sizeof after, "%s%s", s->prefix, o->start_after);
        p[n++] = (SigV4Param){"start-after", after};
    }
    if (o->continuation && o->continuation[0]) p[n++] = (SigV4Param){"continuation-token", o->continuation};
    if (o->delimiter && o->delimiter[0]) p[n++] = (SigV4Param){"delimiter", o->delimiter};
    // Long-poll only where the server said it understands it (grpo-relay); a
    // plain S3 would reject or ignore the unknown parameter.
    int extra = 0;
    if (o->wait_seconds > 0 && st->is_relay) {
        snprintf(wait, sizeof wait, "%d", o->wait_seconds);
        p[n++] = (SigV4Param){"x-pail-wait", wait};
        extra = o->wait_seconds;
    }
    Buf body = {0};
    S3Call c;
    call_init(&c, "GET", NULL);
    c.params = p;
    c.nparams = n;
    c.sink = &body;
    c.extra_timeout_s = extra;
    HttpResponse r = {0};
    int attempts, rc = s3_call(st, &c, &r, &attempts, err);
    if (rc == 0 && r.status != 200) rc = s3_fail(s, NULL, "ListObjectsV2", &r, err);
    if (rc == 0 && s3_xml_list((char *)body.data, body.len, s->prefix, out, err) < 0)
        rc = err_wrap(err, "s3://%s/%s", s->bucket, prefix);
    buf_free(&body);
    http_response_free(&r);
    return rc;
}

// ---- extras (store_s3.h) ----

int store_s3_create_bucket(Store *st, PailErr *err) {
    if (!st->be || strcmp(st->be->scheme, "s3")) return err_set(err, PAIL_ERR_INVALID, "%s: not an s3:// store", st->url);
    S3 *s = s3_of(st);
    Buf body = {0};
    if (strcmp(s->region, "us-east-1"))
        buf_printf(&body,
                   "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                   "<LocationConstraint>%s</LocationConstraint></CreateBucketConfiguration>",
                   s->region);
    S3Call c;
    call_init(&c, "PUT", NULL);
    c.body = body.len ? body.data : (const uint8_t *)"";
    c.body_len = body.len;
    HttpResponse r = {0};
    int attempts, rc = s3_call(st, &c, &r, &attempts, err);
    if (rc == 0 && r.status != 200) {
        S3Error se = {0};
        s3_xml_error((char *)r.err_body.data, r.err_body.len, &se);
        if (!(r.status == 409 && !strcmp(se.code, "BucketAlreadyOwnedByYou"))) rc = s3_fail(s, NULL, "CreateBucket", &r, err);
    }
    buf_free(&body);
    http_response_free(&r);
    return rc;
}

int store_s3_probe_create_only(Store *st, PailErr *err) {
    if (!st->be || strcmp(st->be->scheme, "s3")) return err_set(err, PAIL_ERR_INVALID, "%s: not an s3:// store", st->url);
    char key[96];
    snprintf(key, sizeof key, "pail-probe/create-only-%lld-%d", (long long)time_unix_s(), (int)getpid());
    StorePutOpts o = {.create_only = true};
    // Different contents, so the retried-412 rule can never call the second ours.
    if (s3_put(st, key, "probe 1", 7, &o, err) < 0) return err_wrap(err, "create-only probe: first PUT");
    PailErr e2 = {0};
    int rc = s3_put(st, key, "probe 2", 7, &o, &e2);
    int verdict;
    if (rc == 0) verdict = 0;
    else if (e2.code == PAIL_ERR_EXISTS) verdict = 1;
    else {
        *err = e2;
        err_wrap(err, "create-only probe: second PUT");
        verdict = -1;
    }
    PailErr e3 = {0};
    if (s3_del(st, key, &e3) < 0) log_warn("create-only probe: could not delete %s: %s", key, e3.msg);
    return verdict;
}

// ---- open / close ----

static void s3_close(Store *st) {
    S3 *s = s3_of(st);
    if (!s) return;
    http_client_free(&s->http);
    if (s->secret_key) memset(s->secret_key, 0, strlen(s->secret_key));
    if (s->session_token) memset(s->session_token, 0, strlen(s->session_token));
    free(s->access_key);
    free(s->secret_key);
    free(s->session_token);
    free(s);
    st->impl = NULL;
}

static const StoreBackend s3_backend = {
    .scheme = "s3", .put = s3_put, .put_file = s3_put_file, .get = s3_get, .get_file = s3_get_file,
    .head = s3_head, .del = s3_del, .list = s3_list, .close = s3_close,
};

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static bool is_loopback(const char *host) {
    if (!strcasecmp(host, "localhost") || !strcasecmp(host, "localhost.")) return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

// Splits "http[s]://host[:port][/]" (IPv6 as [addr]) into its parts.
static int parse_endpoint(const char *ep, bool *https, char *host, size_t hcap, char *port, size_t pcap,
                          PailErr *err) {
    const char *p;
    if (!strncasecmp(ep, "https://", 8)) *https = true, p = ep + 8;
    else if (!strncasecmp(ep, "http://", 7)) *https = false, p = ep + 7;
    else return err_set(err, PAIL_ERR_INVALID, "endpoint '%s': must start with https:// or http://", ep);
    const char *end = p + strcspn(p, "/?#");
    if (*end && strcmp(end, "/"))
        return err_set(err, PAIL_ERR_INVALID, "endpoint '%s': a path is not supported (give scheme://host[:port])", ep);
    if (memchr(p, '@', (size_t)(end - p)))
        return err_set(err, PAIL_ERR_INVALID, "endpoint: credentials in the URL are not accepted (use AWS_ACCESS_KEY_ID)");
    const char *hs = p, *he, *colon;
    if (*p == '[') {
        he = memchr(p, ']', (size_t)(end - p));
        if (!he) return err_set(err, PAIL_ERR_INVALID, "endpoint '%s': unterminated IPv6 address", ep);
        hs = p + 1;
        colon = he + 1 < end && he[1] == ':' ? he + 1 : NULL;
        if (he + 1 < end && !colon) return err_set(err, PAIL_ERR_INVALID, "endpoint '%s': junk after ']'", ep);
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        he = colon ? colon : end;
    }
    if (he == hs || (size_t)(he - hs) >= hcap) return err_set(err, PAIL_ERR_INVALID, "endpoint '%s': bad host", ep);
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = 0;
    port[0] = 0;
    if (colon) {
        size_t pl = (size_t)(end - colon - 1);
        if (pl == 0 || pl >= pcap) return err_set(err, PAIL_ERR_INVALID, "endpoint '%s': bad port", ep);
        memcpy(port, colon + 1, pl);
        port[pl] = 0;
        char *e;
        long v = strtol(port, &e, 10);
        if (*e || v < 1 || v > 65535) return err_set(err, PAIL_ERR_INVALID, "endpoint '%s': port '%s' is not 1..65535", ep, port);
    }
    return 0;
}

int store_s3_open(Store *st, const char *bucket, const char *prefix, const StoreOptions *opt, PailErr *err) {
    size_t bl = strlen(bucket);
    if (bl < 3 || bl > 63)
        return err_set(err, PAIL_ERR_INVALID, "s3://%s: bucket names have 3 to 63 characters", bucket);
    for (const char *c = bucket; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '-' || *c == '_'))
            return err_set(err, PAIL_ERR_INVALID, "s3://%s: bucket name has a '%c' (letters, digits, '.', '-' only)",
                           bucket, *c);
    S3 *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    snprintf(s->bucket, sizeof s->bucket, "%s", bucket);
    size_t pl = strlen(prefix);
    while (pl && prefix[pl - 1] == '/') pl--;  // "s3://b/runs/x/" == "s3://b/runs/x"
    if (pl) {
        char tmp[STORE_MAX_KEY + 1];
        if (pl >= STORE_MAX_KEY) {
            free(s);
            return err_set(err, PAIL_ERR_INVALID, "s3://%s/%.64s...: prefix too long", bucket, prefix);
        }
        memcpy(tmp, prefix, pl);
        tmp[pl] = 0;
        if (store_key_check(tmp, err) < 0) {
            free(s);
            return err_wrap(err, "s3://%s: prefix", bucket);
        }
        snprintf(s->prefix, sizeof s->prefix, "%s/", tmp);
    }
    int rc = -1;
    snprintf(s->region, sizeof s->region, "%s",
             opt->region && *opt->region ? opt->region
             : env_nonempty("AWS_REGION")  ? env_nonempty("AWS_REGION")
             : env_nonempty("AWS_DEFAULT_REGION") ? env_nonempty("AWS_DEFAULT_REGION")
                                                   : "us-east-1");
    const char *ep = opt->endpoint && *opt->endpoint ? opt->endpoint
                      : env_nonempty("AWS_ENDPOINT_URL_S3") ? env_nonempty("AWS_ENDPOINT_URL_S3")
                                                             : env_nonempty("AWS_ENDPOINT_URL");
    bool custom = ep != NULL;
    char aws_ep[128], host[256], port[8];
    if (!custom) {
        snprintf(aws_ep, sizeof aws_ep, "https://s3.%s.amazonaws.com", s->region);
        ep = aws_ep;
    }
    if (parse_endpoint(ep, &s->https, host, sizeof host, port, sizeof port, err) < 0) {
        err_wrap(err, "s3://%s", bucket);
        goto fail;
    }
    bool v6 = strchr(host, ':') != NULL;
    snprintf(s->endpoint, sizeof s->endpoint, "%s://%s%s%s%s%s", s->https ? "https" : "http", v6 ? "[" : "", host,
             v6 ? "]" : "", port[0] ? ":" : "", port);
    if (!s->https && !is_loopback(host) && !opt->allow_http) {
        err_set(err, PAIL_ERR_INVALID,
                "s3://%s: endpoint %s is plain http:// to a non-loopback host: credentials and data would cross the "
                "network unencrypted; use https:// or set allow_http to accept that",
                bucket, s->endpoint);
        goto fail;
    }
    int addressing = opt->addressing;
    if (addressing < 0 || addressing > 2) {
        err_set(err, PAIL_ERR_INVALID, "s3://%s: addressing %d (0 auto, 1 path-style, 2 virtual-host)", bucket,
                addressing);
        goto fail;
    }
    // Auto: virtual-host on AWS (path-style is deprecated there) unless the bucket
    // has a dot, which breaks the *.s3 wildcard certificate; path-style elsewhere.
    s->virtual_host = addressing == 2 || (addressing == 0 && !custom && !strchr(bucket, '.'));
    snprintf(s->host, sizeof s->host, "%s%s%s%s%s%s%s", s->virtual_host ? bucket : "", s->virtual_host ? "." : "",
             v6 ? "[" : "", host, v6 ? "]" : "", port[0] ? ":" : "", port);
    snprintf(s->base_url, sizeof s->base_url, "%s://%s", s->https ? "https" : "http", s->host);

    const char *ak = opt->access_key && *opt->access_key ? opt->access_key : env_nonempty("AWS_ACCESS_KEY_ID");
    const char *sk = opt->secret_key && *opt->secret_key ? opt->secret_key : env_nonempty("AWS_SECRET_ACCESS_KEY");
    const char *tok = opt->session_token && *opt->session_token ? opt->session_token : env_nonempty("AWS_SESSION_TOKEN");
    if (!ak || !sk) {
        err_set(err, PAIL_ERR_INVALID, "s3://%s: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY%s",
                bucket, ak ? " (the secret key is missing)" : sk ? " (the access key id is missing)" : "");
        goto fail;
    }
    s->access_key = strdup(ak);
    s->secret_key = strdup(sk);
    s->session_token = tok ? strdup(tok) : NULL;
    if (!s->access_key || !s->secret_key || (tok && !s->session_token)) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    const char *ca = opt->ca_bundle && *opt->ca_bundle ? opt->ca_bundle : env_nonempty("AWS_CA_BUNDLE");
    if (ca && access(ca, R_OK) < 0) {
        err_set(err, PAIL_ERR_INVALID, "s3://%s: CA bundle %s: %s", bucket, ca, strerror(errno));
        goto fail;
    }
    s->retry_seconds = opt->retry_seconds > 0 ? opt->retry_seconds : RETRY_DEFAULT_BUDGET_S;
    s->part_size = opt->multipart_threshold ? opt->multipart_threshold : 16ull << 20;
    s->part_seconds = 10;
    const char *ps = env_nonempty("PAIL_S3_PART_SECONDS");
    if (ps) {  // tests scale the link and the parts down together
        char *end;
        double v = strtod(ps, &end);
        if (*end || !(v >= 0.01 && v <= 3600)) {
            err_set(err, PAIL_ERR_INVALID, "s3://%s: PAIL_S3_PART_SECONDS '%s': give seconds, 0.01 to 3600", bucket, ps);
            goto fail;
        }
        s->part_seconds = v;
    }
    const char *pe = env_nonempty("PAIL_S3_PART_BYTES");
    if (!opt->multipart_threshold && pe) {  // a grpo-relay takes smaller parts than S3 (the fault campaign's)
        char *end;
        unsigned long long v = strtoull(pe, &end, 10);
        if (*end || v < (16u << 10) || v > (5ull << 30)) {
            err_set(err, PAIL_ERR_INVALID, "s3://%s: PAIL_S3_PART_BYTES '%s': give bytes, 16384 to 5 GiB", bucket, pe);
            goto fail;
        }
        s->part_size = v;
    } else if (s->part_size < MIN_PART) {
        err_set(err, PAIL_ERR_INVALID, "s3://%s: multipart_threshold %llu is below S3's 5 MiB minimum part size",
                bucket, (unsigned long long)s->part_size);
        goto fail;
    }
    if (opt->timeout_seconds < 0) {
        err_set(err, PAIL_ERR_INVALID, "s3://%s: timeout_seconds %d is negative", bucket, opt->timeout_seconds);
        goto fail;
    }
    if (http_client_init(&s->http, ca, opt->timeout_seconds, err) < 0) goto fail;
    st->be = &s3_backend;
    st->impl = s;
    log_debug("s3: opened s3://%s/%s at %s (%s, region %s)", bucket, s->prefix, s->endpoint,
              s->virtual_host ? "virtual-host" : "path-style", s->region);
    return 0;
fail:
    st->impl = s;
    s3_close(st);
    return rc;
}
