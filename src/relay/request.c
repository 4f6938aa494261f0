// Routing (method + URI + Host -> S3 operation) and SigV4 verification for the
// relay (request.h). Everything here works on (pointer, length) and fixed
// buffers; over-long or malformed input is an S3 error, never a crash.
#include "relay/request.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <zlib.h>
#include "core/sha256.h"

static const char B64URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int relay_token_encode(const char *tok, char *out, size_t cap) {
    const uint8_t *s = (const uint8_t *)tok;
    size_t n = strlen(tok), o = 0;
    if ((n + 2) / 3 * 4 + 1 > cap) return -1;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        out[o++] = B64URL[v >> 18 & 63];
        out[o++] = B64URL[v >> 12 & 63];
        if (i + 1 < n) out[o++] = B64URL[v >> 6 & 63];
        if (i + 2 < n) out[o++] = B64URL[v & 63];
    }
    out[o] = 0;
    return 0;
}

int relay_token_decode(const char *s, char *out, size_t cap) {
    size_t n = strlen(s), o = 0;
    uint32_t acc = 0;
    int bits = 0;
    if (n % 4 == 1) return -1;
    for (size_t i = 0; i < n; i++) {
        const char *p = memchr(B64URL, s[i], 64);
        if (!p || !s[i]) return -1;
        acc = acc << 6 | (uint32_t)(p - B64URL);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o + 1 >= cap) return -1;
            out[o++] = (char)(acc >> bits & 0xff);
            if (out[o - 1] == 0) return -1;
        }
    }
    out[o] = 0;
    return 0;
}

static int fail_set(RelayFail *f, int status, const char *code) {
    f->status = status;
    snprintf(f->code, sizeof f->code, "%s", code);
    return -1;
}

const char *relay_op_name(RelayOp op) {
    static const char *const names[] = {"NONE",   "HEALTH", "LISTBUCKETS", "HEADBUCKET", "LOCATION",
                                        "LIST",   "GET",    "HEAD",        "PUT",        "DELETE",
                                        "MPCREATE", "MPPART", "MPCOMPLETE", "MPABORT"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

const char *relay_header(const SigV4Header *h, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcasecmp(h[i].name, name)) return h[i].value;
    return NULL;
}

// Decodes s[0..n) into out (cap includes the NUL). -1 on a bad escape, an
// embedded NUL or overflow.
static int decode_into(const char *s, size_t n, char *out, size_t cap) {
    Buf b = {0};
    if (sigv4_uri_decode(&b, s, n) < 0 || b.len >= cap || (b.len && memchr(b.data, 0, b.len))) {
        buf_free(&b);
        return -1;
    }
    if (b.len) memcpy(out, b.data, b.len);
    out[b.len] = 0;
    buf_free(&b);
    return 0;
}

typedef struct {
    bool list_type2, location, uploads, has_upload_id, has_part, has_marker, has_delete;
    const char *subresource;  // an S3 subresource the relay does not serve (acl, tagging, ...)
} QueryFlags;

// S3 subresources: a GET ?acl must not be answered with the object's bytes.
static const char *const SUBRESOURCES[] = {
    "acl", "policy", "policyStatus", "cors", "lifecycle", "tagging", "versioning", "versions", "website",
    "logging", "notification", "replication", "encryption", "object-lock", "ownershipControls",
    "publicAccessBlock", "accelerate", "requestPayment", "analytics", "inventory", "metrics",
    "intelligent-tiering", "retention", "legal-hold", "torrent", "restore", "select", "attributes", "uploadId-marker"};

static int parse_query(const char *q, RelayRoute *r, QueryFlags *qf, RelayFail *fail, PailErr *err) {
    r->max_keys = 1000;
    if (!q) return 0;
    const char *p = q;
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t nlen = eq ? (size_t)(eq - p) : len;
        const char *v = eq ? eq + 1 : p + len;
        size_t vlen = eq ? len - nlen - 1 : 0;
        char name[64], val[STORE_MAX_KEY + 64];
        if (nlen == 0) goto next;
        if (decode_into(p, nlen, name, sizeof name) < 0 || decode_into(v, vlen, val, sizeof val) < 0) {
            fail_set(fail, 400, "InvalidArgument");
            return err_set(err, PAIL_ERR_INVALID, "query parameter '%.*s' is malformed or too long",
                           (int)(nlen < 40 ? nlen : 40), p);
        }
        if (strlen(val) > STORE_MAX_KEY && strcmp(name, "continuation-token")) {
            fail_set(fail, 400, "InvalidArgument");
            return err_set(err, PAIL_ERR_INVALID, "query parameter '%s' is longer than %d bytes", name, STORE_MAX_KEY);
        }
        if (!strcmp(name, "list-type")) {
            if (strcmp(val, "2")) {
                fail_set(fail, 400, "InvalidArgument");
                return err_set(err, PAIL_ERR_INVALID, "list-type must be 2");
            }
            qf->list_type2 = true;
        } else if (!strcmp(name, "prefix")) {
            snprintf(r->prefix, sizeof r->prefix, "%s", val);
        } else if (!strcmp(name, "start-after")) {
            snprintf(r->start_after, sizeof r->start_after, "%s", val);
        } else if (!strcmp(name, "marker")) {
            snprintf(r->start_after, sizeof r->start_after, "%s", val);
            qf->has_marker = true;
        } else if (!strcmp(name, "continuation-token")) {
            if (!*val || strlen(val) >= sizeof r->token_raw || relay_token_decode(val, r->token, sizeof r->token) < 0) {
                fail_set(fail, 400, "InvalidArgument");
                return err_set(err, PAIL_ERR_INVALID, "continuation-token is not one this relay issued");
            }
            snprintf(r->token_raw, sizeof r->token_raw, "%s", val);
        } else if (!strcmp(name, "delimiter")) {
            if (strlen(val) >= sizeof r->delimiter) {
                fail_set(fail, 400, "InvalidArgument");
                return err_set(err, PAIL_ERR_INVALID, "delimiter longer than %zu bytes", sizeof r->delimiter - 1);
            }
            snprintf(r->delimiter, sizeof r->delimiter, "%s", val);
        } else if (!strcmp(name, "max-keys")) {
            char *end;
            long mk = strtol(val, &end, 10);
            if (!*val || *end || mk < 0 || mk > 1000000) {
                fail_set(fail, 400, "InvalidArgument");
                return err_set(err, PAIL_ERR_INVALID, "max-keys '%.20s' is not an integer in 0..1000000", val);
            }
            r->max_keys = mk > 1000 ? 1000 : (int)mk;
        } else if (!strcmp(name, "x-pail-wait")) {
            char *end;
            long w = strtol(val, &end, 10);
            if (!*val || *end || w < 0 || w > 3600) {
                fail_set(fail, 400, "InvalidArgument");
                return err_set(err, PAIL_ERR_INVALID, "x-pail-wait '%.20s' is not a number of seconds in 0..3600", val);
            }
            r->wait_s = (int)w;
        } else if (!strcmp(name, "encoding-type")) {
            r->encoding_url = !strcmp(val, "url");
        } else if (!strcmp(name, "location")) {
            qf->location = true;
        } else if (!strcmp(name, "uploads")) {
            qf->uploads = true;
        } else if (!strcmp(name, "delete")) {
            qf->has_delete = true;
        } else if (!strcmp(name, "uploadId")) {
            if (!*val || strlen(val) >= sizeof r->upload_id) {
                fail_set(fail, 404, "NoSuchUpload");
                return err_set(err, PAIL_ERR_INVALID, "uploadId is empty or too long");
            }
            snprintf(r->upload_id, sizeof r->upload_id, "%s", val);
            qf->has_upload_id = true;
        } else if (!strcmp(name, "partNumber")) {
            char *end;
            long pn = strtol(val, &end, 10);
            if (!*val || *end || pn < 1 || pn > 10000) {
                fail_set(fail, 400, "InvalidArgument");
                return err_set(err, PAIL_ERR_INVALID, "partNumber '%.20s' is not in 1..10000", val);
            }
            r->part_number = (int)pn;
            qf->has_part = true;
        } else {
            for (size_t i = 0; i < sizeof SUBRESOURCES / sizeof SUBRESOURCES[0]; i++)
                if (!strcmp(name, SUBRESOURCES[i])) qf->subresource = SUBRESOURCES[i];
        }
        // Other parameters (fetch-owner, x-id, ...) change nothing we serve.
    next:
        if (!amp) break;
        p = amp + 1;
    }
    return 0;
}

// Host without the port, lower-cased into out.
static void host_name(const char *host, char *out, size_t cap) {
    size_t i = 0;
    if (host && host[0] == '[') {  // IPv6 literal: never a virtual host
        out[0] = 0;
        return;
    }
    for (; host && host[i] && host[i] != ':' && i + 1 < cap; i++)
        out[i] = (char)((host[i] >= 'A' && host[i] <= 'Z') ? host[i] + 32 : host[i]);
    out[i] = 0;
}

int relay_route_parse(const char *method, const char *uri, const char *host, const char *bucket,
                      RelayRoute *out, RelayFail *fail, PailErr *err) {
    memset(out, 0, sizeof *out);
    fail->status = 0;
    fail->code[0] = 0;
    if (!uri || uri[0] != '/') {
        fail_set(fail, 400, "InvalidURI");
        return err_set(err, PAIL_ERR_INVALID, "request target must start with '/'");
    }
    const char *qm = strchr(uri, '?');
    size_t plen = qm ? (size_t)(qm - uri) : strlen(uri);
    if (plen == 9 && !memcmp(uri, "/-/health", 9)) {
        out->op = OP_HEALTH;
        return 0;
    }
    if (decode_into(uri, plen, out->path, sizeof out->path) < 0) {
        fail_set(fail, 400, "InvalidURI");
        return err_set(err, PAIL_ERR_INVALID, "request path is malformed (bad %%-escape, NUL or too long)");
    }
    QueryFlags qf = {0};
    if (parse_query(qm ? qm + 1 : NULL, out, &qf, fail, err) < 0) return -1;

    if (qf.subresource) {
        fail_set(fail, 501, "NotImplemented");
        return err_set(err, PAIL_ERR_UNSUPPORTED, "the ?%s subresource is not supported by the relay", qf.subresource);
    }
    // Virtual-host style when Host is "<bucket>.<something>".
    char hn[300];
    host_name(host, hn, sizeof hn);
    size_t bl = strlen(bucket);
    const char *keypart;
    if (!strncmp(hn, bucket, bl) && hn[bl] == '.') {
        snprintf(out->bucket, sizeof out->bucket, "%s", bucket);
        keypart = out->path + 1;
    } else {
        const char *b = out->path + 1, *slash = strchr(b, '/');
        size_t n = slash ? (size_t)(slash - b) : strlen(b);
        if (n == 0) {
            if (!strcmp(method, "GET")) {
                out->op = OP_LIST_BUCKETS;
                return 0;
            }
            fail_set(fail, 405, "MethodNotAllowed");
            return err_set(err, PAIL_ERR_INVALID, "%s / is not supported", method);
        }
        if (n >= sizeof out->bucket) n = sizeof out->bucket - 1;
        memcpy(out->bucket, b, n);
        out->bucket[n] = 0;
        keypart = slash ? slash + 1 : "";
    }
    if (strcmp(out->bucket, bucket)) {
        fail_set(fail, 404, "NoSuchBucket");
        return err_set(err, PAIL_ERR_NOT_FOUND, "bucket '%.64s' is not served here (this relay serves '%s')",
                       out->bucket, bucket);
    }
    snprintf(out->key, sizeof out->key, "%s", keypart);
    if (strlen(keypart) >= sizeof out->key) {
        fail_set(fail, 400, "KeyTooLongError");
        return err_set(err, PAIL_ERR_INVALID, "key longer than %d bytes", STORE_MAX_KEY);
    }
    bool is_get = !strcmp(method, "GET"), is_head = !strcmp(method, "HEAD"), is_put = !strcmp(method, "PUT"),
         is_del = !strcmp(method, "DELETE"), is_post = !strcmp(method, "POST");
    if (!out->key[0]) {
        if (is_get && qf.location) out->op = OP_LOCATION;
        else if (is_get && !qf.uploads) {
            out->op = OP_LIST;
            out->list_v2 = qf.list_type2;
        } else if (is_head) out->op = OP_HEAD_BUCKET;
        else {
            fail_set(fail, 501, "NotImplemented");
            return err_set(err, PAIL_ERR_UNSUPPORTED, "bucket operation %s%s is not supported by the relay", method,
                           qf.uploads ? " ?uploads" : qf.has_delete ? " ?delete" : "");
        }
        return 0;
    }
    PailErr kerr = {0};
    if (store_key_check(out->key, &kerr) < 0) {
        fail_set(fail, 400, "InvalidArgument");
        return err_set(err, PAIL_ERR_INVALID, "%s", kerr.msg);
    }
    if (is_get && !qf.has_upload_id) out->op = OP_GET;
    else if (is_head) out->op = OP_HEAD;
    else if (is_put && qf.has_part && qf.has_upload_id) out->op = OP_MP_PART;
    else if (is_put && !qf.has_part && !qf.has_upload_id) out->op = OP_PUT;
    else if (is_del && qf.has_upload_id) out->op = OP_MP_ABORT;
    else if (is_del) out->op = OP_DELETE;
    else if (is_post && qf.uploads) out->op = OP_MP_CREATE;
    else if (is_post && qf.has_upload_id) out->op = OP_MP_COMPLETE;
    else {
        fail_set(fail, 501, "NotImplemented");
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s on an object with these parameters is not supported", method);
    }
    return 0;
}

// ---- SigV4 verification ----

#define MAX_SKEW_S (15 * 60)

static int64_t parse_amz_date(const char *s) {
    // YYYYMMDDTHHMMSSZ
    if (!s || strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z') return -1;
    for (int i = 0; i < 15; i++)
        if (i != 8 && (s[i] < '0' || s[i] > '9')) return -1;
    struct tm tm = {0};
    tm.tm_year = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0') - 1900;
    tm.tm_mon = (s[4] - '0') * 10 + (s[5] - '0') - 1;
    tm.tm_mday = (s[6] - '0') * 10 + (s[7] - '0');
    tm.tm_hour = (s[9] - '0') * 10 + (s[10] - '0');
    tm.tm_min = (s[11] - '0') * 10 + (s[12] - '0');
    tm.tm_sec = (s[13] - '0') * 10 + (s[14] - '0');
    if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
        tm.tm_sec > 60)
        return -1;
    return (int64_t)timegm(&tm);
}

static bool is_hex64(const char *s) {
    if (strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

// Derived signing keys (four HMACs each) are reused for a key id, day, region
// and service: the verifier's hot path is then one canonical request, one
// SHA-256 and one HMAC. The secret is part of the match, so a reload that
// changes it never reuses a stale key. One cache per thread (the event loop).
typedef struct {
    char id[128], secret[128], date[9], region[64], service[16];
    uint8_t key[32];
    bool used;
} KeyCacheEntry;
static __thread KeyCacheEntry key_cache[32];

static void signing_key(const RelayKey *k, const char *date8, const char *region, const char *service,
                        uint8_t out[32]) {
    unsigned h = 5381;
    for (const char *c = k->id; *c; c++) h = h * 33 + (unsigned char)*c;
    for (int i = 0; i < 8; i++) h = h * 33 + (unsigned char)date8[i];
    KeyCacheEntry *e = &key_cache[h % 32];
    if (e->used && !strcmp(e->id, k->id) && !strcmp(e->secret, k->secret) && !strncmp(e->date, date8, 8) &&
        !strcmp(e->region, region) && !strcmp(e->service, service)) {
        memcpy(out, e->key, 32);
        return;
    }
    sigv4_signing_key(out, k->secret, date8, region, service);
    if (strlen(region) < sizeof e->region && strlen(service) < sizeof e->service) {
        snprintf(e->id, sizeof e->id, "%s", k->id);
        snprintf(e->secret, sizeof e->secret, "%s", k->secret);
        snprintf(e->date, sizeof e->date, "%.8s", date8);
        snprintf(e->region, sizeof e->region, "%s", region);
        snprintf(e->service, sizeof e->service, "%s", service);
        memcpy(e->key, out, 32);
        e->used = true;
    }
}

// sigv4_expected_signature with the cached signing key: only the headers named
// in signed_headers take part, each must be present.
static int expected_signature(const SigV4Request *req, const char *signed_headers, const RelayKey *k,
                              const char *amz_date, const char *region, const char *service, char sig[65],
                              PailErr *err) {
    SigV4Header sel[64];
    int n = 0;
    const char *s = signed_headers;
    while (*s) {
        size_t len = strcspn(s, ";");
        bool found = false;
        for (int i = 0; i < req->nheaders; i++)
            if (strlen(req->headers[i].name) == len && !strncasecmp(req->headers[i].name, s, len)) {
                if (n == 64) return err_set(err, PAIL_ERR_AUTH, "more than 64 signed headers");
                sel[n++] = req->headers[i];
                found = true;
            }
        if (!found) return err_set(err, PAIL_ERR_AUTH, "signed header '%.*s' is not in the request", (int)len, s);
        s += len;
        if (*s == ';') s++;
    }
    SigV4Request r = *req;
    r.headers = sel;
    r.nheaders = n;
    Buf creq = {0}, sts = {0};
    int rc = sigv4_canonical_request(&creq, &r, NULL, 0, err);
    if (rc == 0 && sigv4_string_to_sign(&sts, amz_date, region, service, (char *)creq.data, creq.len) < 0)
        rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
    if (rc == 0) {
        uint8_t key[32];
        signing_key(k, amz_date, region, service, key);
        sigv4_signature(sig, key, (char *)sts.data, sts.len);
    }
    buf_free(&creq);
    buf_free(&sts);
    return rc;
}

int relay_auth_verify(const RelayKeys *keys, const RelayAuthIn *in, const RelayKey **who, char payload_hash[72],
                      RelayFail *fail, PailErr *err) {
    *who = NULL;
    const char *authz = relay_header(in->headers, in->nheaders, "authorization");
    if (!authz) {
        if (in->query && strstr(in->query, "X-Amz-Signature")) {
            fail_set(fail, 403, "AccessDenied");
            return err_set(err, PAIL_ERR_AUTH, "presigned URLs are not accepted by the relay");
        }
        fail_set(fail, 403, "AccessDenied");
        return err_set(err, PAIL_ERR_AUTH, "request is not signed (no Authorization header)");
    }
    SigV4Auth a;
    PailErr perr = {0};
    if (sigv4_parse_authorization(authz, &a, &perr) < 0) {
        fail_set(fail, 403, "AccessDenied");
        return err_set(err, PAIL_ERR_AUTH, "Authorization header: %s", perr.msg);
    }
    const RelayKey *k = relay_keys_find(keys, a.access_key);
    if (!k) {
        fail_set(fail, 403, "InvalidAccessKeyId");
        return err_set(err, PAIL_ERR_AUTH, "access key id '%.40s' is not in the key file", a.access_key);
    }
    const char *amz_date = relay_header(in->headers, in->nheaders, "x-amz-date");
    int64_t t = parse_amz_date(amz_date);
    if (t < 0) {
        fail_set(fail, 403, "AccessDenied");
        return err_set(err, PAIL_ERR_AUTH, "missing or malformed x-amz-date (want YYYYMMDDTHHMMSSZ)");
    }
    if (t < in->now - MAX_SKEW_S || t > in->now + MAX_SKEW_S) {
        fail_set(fail, 403, "RequestTimeTooSkewed");
        return err_set(err, PAIL_ERR_AUTH, "x-amz-date %s is more than 15 minutes from the relay's clock", amz_date);
    }
    if (strncmp(a.date, amz_date, 8) || strcmp(a.service, "s3")) {
        fail_set(fail, 403, "SignatureDoesNotMatch");
        return err_set(err, PAIL_ERR_AUTH, "credential scope %s/%s does not match x-amz-date %.8s / service s3",
                       a.date, a.service, amz_date);
    }
    // Both signed: the date header must be in SignedHeaders, or it proves nothing.
    char sh[1100];
    snprintf(sh, sizeof sh, ";%s;", a.signed_headers);
    if (!strstr(sh, ";x-amz-date;") || !strstr(sh, ";host;")) {
        fail_set(fail, 403, "AccessDenied");
        return err_set(err, PAIL_ERR_AUTH, "SignedHeaders must include host and x-amz-date");
    }
    const char *ph = relay_header(in->headers, in->nheaders, "x-amz-content-sha256");
    if (!ph) {
        fail_set(fail, 400, "InvalidRequest");
        return err_set(err, PAIL_ERR_AUTH, "missing x-amz-content-sha256 (SigV4 needs the payload hash)");
    }
    bool unsigned_payload = !strcmp(ph, SIGV4_UNSIGNED_PAYLOAD) || !strcmp(ph, "STREAMING-UNSIGNED-PAYLOAD-TRAILER");
    if (!unsigned_payload && !is_hex64(ph)) {
        if (!strncmp(ph, "STREAMING-", 10)) {
            fail_set(fail, 501, "NotImplemented");
            return err_set(err, PAIL_ERR_UNSUPPORTED, "payload signing '%.48s' is not supported by the relay", ph);
        }
        fail_set(fail, 400, "InvalidArgument");
        return err_set(err, PAIL_ERR_AUTH, "x-amz-content-sha256 must be a lowercase hex sha256 or UNSIGNED-PAYLOAD");
    }
    if (unsigned_payload && !in->tls) {
        fail_set(fail, 403, "AccessDenied");
        return err_set(err, PAIL_ERR_AUTH, "UNSIGNED-PAYLOAD is accepted over TLS only");
    }
    if (!strstr(sh, ";x-amz-content-sha256;")) {
        fail_set(fail, 403, "AccessDenied");
        return err_set(err, PAIL_ERR_AUTH, "SignedHeaders must include x-amz-content-sha256");
    }
    SigV4Request req = {.method = in->method, .path = in->path, .query = in->query, .headers = in->headers,
                        .nheaders = in->nheaders, .payload_hash = ph};
    char want[65];
    if (expected_signature(&req, a.signed_headers, k, amz_date, a.region, a.service, want, &perr) < 0) {
        fail_set(fail, 403, "SignatureDoesNotMatch");
        return err_set(err, PAIL_ERR_AUTH, "signature: %s", perr.msg);
    }
    if (!sigv4_signature_equal(want, a.signature)) {
        fail_set(fail, 403, "SignatureDoesNotMatch");
        return err_set(err, PAIL_ERR_AUTH, "signature does not match for access key '%s'", k->id);
    }
    snprintf(payload_hash, 72, "%s", ph);
    *who = k;
    return 0;
}

int relay_payload_check(const char *payload_hash, const uint8_t *body, size_t len, RelayFail *fail, PailErr *err) {
    if (!is_hex64(payload_hash)) return 0;  // the unsigned forms (allowed over TLS only)
    char hex[65];
    sha256_hex(body, len, hex);
    return relay_payload_check_digest(payload_hash, hex, fail, err);
}

int relay_payload_check_digest(const char *payload_hash, const char *hex, RelayFail *fail, PailErr *err) {
    if (!is_hex64(payload_hash)) return 0;
    if (strcmp(hex, payload_hash)) {
        fail_set(fail, 400, "XAmzContentSHA256Mismatch");
        return err_set(err, PAIL_ERR_AUTH, "body sha256 %.16s... does not match x-amz-content-sha256 %.16s...", hex,
                       payload_hash);
    }
    return 0;
}

static int buf_sink(void *ctx, const uint8_t *p, size_t n) {
    return buf_append(ctx, p, n);
}

int relay_aws_chunked_decode(const uint8_t *body, size_t len, Buf *out, RelayFail *fail, PailErr *err) {
    buf_reset(out);
    return relay_aws_chunked_decode_to(body, len, buf_sink, out, fail, err);
}

int relay_aws_chunked_decode_to(const uint8_t *body, size_t len, RelaySink sink, void *ctx, RelayFail *fail,
                                PailErr *err) {
    size_t i = 0;
    uLong crc = crc32(0L, Z_NULL, 0);
    for (;;) {
        // chunk-size in hex [;chunk-signature=...] CRLF
        size_t j = i;
        while (j + 1 < len && !(body[j] == '\r' && body[j + 1] == '\n')) j++;
        if (j + 1 >= len || j == i || j - i > 200) goto bad;
        uint64_t sz = 0;
        size_t k = i;
        for (; k < j && body[k] != ';'; k++) {
            int c = body[k], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (v < 0 || sz > (1ull << 40)) goto bad;
            sz = sz * 16 + (uint64_t)v;
        }
        if (k == i) goto bad;
        i = j + 2;
        if (sz == 0) break;
        if (sz > len - i || len - i - sz < 2 || body[i + sz] != '\r' || body[i + sz + 1] != '\n') goto bad;
        if (sink(ctx, body + i, sz) < 0) {
            fail_set(fail, 503, "SlowDown");
            return err_set(err, PAIL_ERR_IO, "cannot keep the decoded aws-chunked body (out of memory or spool)");
        }
        for (size_t off = 0; off < sz;) {  // crc32() takes a uInt length
            size_t n = sz - off > (1u << 30) ? (1u << 30) : sz - off;
            crc = crc32(crc, body + i + off, (uInt)n);
            off += n;
        }
        i += sz + 2;
    }
    // Trailers: "name:value" CRLF ... CRLF
    while (i + 1 < len && !(body[i] == '\r' && body[i + 1] == '\n')) {
        size_t j = i;
        while (j + 1 < len && !(body[j] == '\r' && body[j + 1] == '\n')) j++;
        if (j + 1 >= len) {
            j = len;  // a last trailer without CRLF
        }
        const char *line = (const char *)body + i;
        size_t ll = j - i;
        static const char crc_name[] = "x-amz-checksum-crc32:";
        if (ll > sizeof crc_name - 1 && !strncasecmp(line, crc_name, sizeof crc_name - 1)) {
            uLong c = crc;
            uint8_t be[4] = {(uint8_t)(c >> 24), (uint8_t)(c >> 16), (uint8_t)(c >> 8), (uint8_t)c};
            static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            char want[9] = {tbl[be[0] >> 2], tbl[((be[0] & 3) << 4) | (be[1] >> 4)],
                            tbl[((be[1] & 15) << 2) | (be[2] >> 6)], tbl[be[2] & 63], tbl[be[3] >> 2],
                            tbl[(be[3] & 3) << 4], '=', '=', 0};
            const char *v = line + sizeof crc_name - 1;
            size_t vl = ll - (sizeof crc_name - 1);
            while (vl && *v == ' ') v++, vl--;
            if (vl != 8 || memcmp(v, want, 8)) {
                fail_set(fail, 400, "BadDigest");
                return err_set(err, PAIL_ERR_INVALID, "aws-chunked body: x-amz-checksum-crc32 does not match the data");
            }
        }
        if (j >= len) break;
        i = j + 2;
    }
    return 0;
bad:
    fail_set(fail, 400, "IncompleteBody");
    return err_set(err, PAIL_ERR_INVALID, "aws-chunked body is malformed at byte %zu", i);
}
