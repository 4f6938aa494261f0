// AWS Signature Version 4 signing and verification steps (see sigv4.h).
// Reference: S3 API "Signature Calculations for the Authorization Header" and
// the AWS SigV4 test suite; S3 differs from other services in that the path is
// encoded exactly once and not normalized, which is what is implemented here.
#include "store/sigv4.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "core/sha256.h"

static bool is_unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

int sigv4_uri_encode(Buf *out, const char *s, size_t n, bool keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    if (buf_reserve(out, 3 * n) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_unreserved(c) || (keep_slash && c == '/')) {
            out->data[out->len++] = c;
        } else {
            out->data[out->len++] = '%';
            out->data[out->len++] = (uint8_t)hex[c >> 4];
            out->data[out->len++] = (uint8_t)hex[c & 15];
        }
    }
    out->data[out->len] = 0;
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int sigv4_uri_decode(Buf *out, const char *s, size_t n) {
    if (buf_reserve(out, n) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n) return -1;
            int a = hexval((unsigned char)s[i + 1]), b = hexval((unsigned char)s[i + 2]);
            if (a < 0 || b < 0) return -1;
            out->data[out->len++] = (uint8_t)(a * 16 + b);
            i += 2;
        } else {
            out->data[out->len++] = (uint8_t)s[i];
        }
    }
    out->data[out->len] = 0;
    return 0;
}

typedef struct {
    char *name, *value;  // encoded, owned
} EncPair;

static int encpair_cmp(const void *a, const void *b) {
    const EncPair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static char *encode_dup(const char *s) {
    Buf b = {0};
    if (sigv4_uri_encode(&b, s ? s : "", s ? strlen(s) : 0, false) < 0 || buf_append(&b, "", 0) < 0) {
        buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

int sigv4_canonical_query_pairs(Buf *out, const SigV4Param *params, int n) {
    if (n <= 0) return buf_append(out, "", 0);
    EncPair *p = calloc((size_t)n, sizeof *p);
    if (!p) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        p[i].name = encode_dup(params[i].name);
        p[i].value = encode_dup(params[i].value);
        if (!p[i].name || !p[i].value) rc = -1;
    }
    if (rc == 0) {
        // Byte order of the encoded strings (AWS: "sort by code point").
        qsort(p, (size_t)n, sizeof *p, encpair_cmp);
        for (int i = 0; i < n && rc == 0; i++)
            rc = buf_printf(out, "%s%s=%s", i ? "&" : "", p[i].name, p[i].value);
    }
    for (int i = 0; i < n; i++) {
        free(p[i].name);
        free(p[i].value);
    }
    free(p);
    return rc;
}

int sigv4_canonical_query(Buf *out, const char *query, PailErr *err) {
    if (!query || !*query) return buf_append(out, "", 0) < 0 ? err_set(err, PAIL_ERR_NOMEM, "out of memory") : 0;
    int cap = 1;
    for (const char *q = query; *q; q++) cap += *q == '&';
    SigV4Param *pp = calloc((size_t)cap, sizeof *pp);
    Buf dec = {0};
    size_t *offs = calloc((size_t)cap * 2, sizeof *offs);
    if (!pp || !offs) {
        free(pp);
        free(offs);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    // Decode every name and value into one buffer (NUL-separated), then point into it.
    int n = 0, rc = 0;
    const char *s = query;
    while (rc == 0) {
        const char *amp = strchr(s, '&');
        size_t len = amp ? (size_t)(amp - s) : strlen(s);
        if (len > 0) {
            const char *eq = memchr(s, '=', len);
            size_t nlen = eq ? (size_t)(eq - s) : len;
            offs[2 * n] = dec.len;
            if (sigv4_uri_decode(&dec, s, nlen) < 0 || buf_append(&dec, "", 1) < 0) {
                rc = err_set(err, PAIL_ERR_INVALID, "query parameter '%.*s': malformed %%-escape",
                             (int)nlen, s);
                break;
            }
            offs[2 * n + 1] = dec.len;
            if ((eq && sigv4_uri_decode(&dec, eq + 1, len - nlen - 1) < 0) || buf_append(&dec, "", 1) < 0) {
                rc = err_set(err, PAIL_ERR_INVALID, "query parameter '%.*s': malformed %%-escape in its value",
                             (int)nlen, s);
                break;
            }
            n++;
        }
        if (!amp) break;
        s = amp + 1;
    }
    if (rc == 0) {
        for (int i = 0; i < n; i++) {
            pp[i].name = (const char *)dec.data + offs[2 * i];
            pp[i].value = (const char *)dec.data + offs[2 * i + 1];
        }
        if (sigv4_canonical_query_pairs(out, pp, n) < 0) rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    buf_free(&dec);
    free(pp);
    free(offs);
    return rc;
}

typedef struct {
    char *name;   // lower-cased, owned
    char *value;  // trimmed, owned
    int order;
} CanonHeader;

static int canon_cmp(const void *a, const void *b) {
    const CanonHeader *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->order - y->order;  // stable: repeated names keep their order
}

// Trim leading/trailing whitespace and collapse inner runs of spaces to one.
static char *trim_collapse(const char *v) {
    size_t n = strlen(v);
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t k = 0;
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == ' ' || c == '\t') {
            space = k > 0;
            continue;
        }
        if (space) o[k++] = ' ';
        space = false;
        o[k++] = (char)c;
    }
    o[k] = 0;
    return o;
}

int sigv4_canonical_request(Buf *out, const SigV4Request *req, char *signed_headers, size_t cap,
                            PailErr *err) {
    if (!req->method || !req->path || req->path[0] != '/')
        return err_set(err, PAIL_ERR_INVALID, "sigv4: request path '%s' must start with '/'",
                       req->path ? req->path : "(null)");
    CanonHeader *h = calloc((size_t)(req->nheaders > 0 ? req->nheaders : 1), sizeof *h);
    if (!h) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    int rc = 0, n = req->nheaders;
    for (int i = 0; i < n && rc == 0; i++) {
        h[i].name = strdup(req->headers[i].name);
        h[i].value = trim_collapse(req->headers[i].value ? req->headers[i].value : "");
        h[i].order = i;
        if (!h[i].name || !h[i].value) rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
        else
            for (char *c = h[i].name; *c; c++) *c = (char)tolower((unsigned char)*c);
    }
    Buf names = {0};
    if (rc == 0) {
        qsort(h, (size_t)n, sizeof *h, canon_cmp);
        bool ok = buf_printf(out, "%s\n", req->method) == 0 &&
                  sigv4_uri_encode(out, req->path, strlen(req->path), true) == 0 &&
                  buf_append(out, "\n", 1) == 0;
        if (ok) {
            PailErr qe = {0};
            if (sigv4_canonical_query(out, req->query, &qe) < 0) {
                rc = err_set(err, qe.code, "%s", qe.msg);
                ok = false;
            }
        }
        ok = ok && buf_append(out, "\n", 1) == 0;
        for (int i = 0; ok && i < n; i++) {
            if (i > 0 && !strcmp(h[i].name, h[i - 1].name)) {
                ok = buf_printf(out, ",%s", h[i].value) == 0;
                continue;
            }
            ok = buf_printf(out, "%s%s:%s", i ? "\n" : "", h[i].name, h[i].value) == 0 &&
                 buf_printf(&names, "%s%s", names.len ? ";" : "", h[i].name) == 0;
        }
        ok = ok && buf_printf(out, "%s\n%s\n%s", n ? "\n" : "", names.len ? (char *)names.data : "",
                              req->payload_hash ? req->payload_hash : SIGV4_EMPTY_SHA256) == 0;
        if (!ok && rc == 0) rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
        if (rc == 0 && signed_headers) {
            if (names.len >= cap) rc = err_set(err, PAIL_ERR_INVALID, "sigv4: signed header list too long");
            else
                memcpy(signed_headers, names.len ? (char *)names.data : "", names.len + 1);
        }
    }
    for (int i = 0; i < n; i++) {
        free(h[i].name);
        free(h[i].value);
    }
    free(h);
    buf_free(&names);
    return rc;
}

void sigv4_scope(char *out, size_t cap, const char *date8, const char *region, const char *service) {
    snprintf(out, cap, "%.8s/%s/%s/aws4_request", date8, region, service);
}

int sigv4_string_to_sign(Buf *out, const char *amz_date, const char *region, const char *service,
                         const char *creq, size_t creq_len) {
    char scope[256], hex[65];
    sigv4_scope(scope, sizeof scope, amz_date, region, service);
    sha256_hex(creq, creq_len, hex);
    return buf_printf(out, SIGV4_ALGORITHM "\n%s\n%s\n%s", amz_date, scope, hex);
}

void sigv4_signing_key(uint8_t key[32], const char *secret, const char *date8, const char *region,
                       const char *service) {
    size_t sl = strlen(secret);
    char *k0 = malloc(sl + 5);
    uint8_t a[32], b[32];
    if (!k0) {  // 200-byte secrets are not a thing; fall back to a stack copy
        memset(key, 0, 32);
        return;
    }
    memcpy(k0, "AWS4", 4);
    memcpy(k0 + 4, secret, sl + 1);
    hmac_sha256(k0, sl + 4, date8, 8, a);
    hmac_sha256(a, 32, region, strlen(region), b);
    hmac_sha256(b, 32, service, strlen(service), a);
    hmac_sha256(a, 32, "aws4_request", 12, key);
    memset(k0, 0, sl + 4);  // the secret does not linger in freed memory
    free(k0);
}

void sigv4_signature(char hex[65], const uint8_t key[32], const char *sts, size_t sts_len) {
    uint8_t mac[32];
    hmac_sha256(key, 32, sts, sts_len, mac);
    hex_encode(mac, 32, hex);
}

int sigv4_sign(const SigV4Request *req, const char *access_key, const char *secret,
               const char *amz_date, const char *region, const char *service, char sig[65],
               Buf *authz, PailErr *err) {
    Buf creq = {0}, sts = {0};
    char names[1024];
    if (strlen(amz_date) != 16) return err_set(err, PAIL_ERR_INVALID, "sigv4: x-amz-date '%s' is not YYYYMMDDTHHMMSSZ", amz_date);
    if (sigv4_canonical_request(&creq, req, names, sizeof names, err) < 0) {
        buf_free(&creq);
        return -1;
    }
    int rc = 0;
    if (sigv4_string_to_sign(&sts, amz_date, region, service, (char *)creq.data, creq.len) < 0) {
        rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
    } else {
        uint8_t key[32];
        sigv4_signing_key(key, secret, amz_date, region, service);
        sigv4_signature(sig, key, (char *)sts.data, sts.len);
        memset(key, 0, sizeof key);
        if (authz) {
            char scope[256];
            sigv4_scope(scope, sizeof scope, amz_date, region, service);
            if (buf_printf(authz, SIGV4_ALGORITHM " Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                           access_key, scope, names, sig) < 0)
                rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
        }
    }
    buf_free(&creq);
    buf_free(&sts);
    return rc;
}

// Copies the value of "Name=" up to ',' (or end) into out; -1 when absent or too long.
static int auth_field(const char *v, const char *name, char *out, size_t cap) {
    size_t nl = strlen(name);
    const char *p = v;
    while ((p = strstr(p, name)) != NULL) {
        bool start = p == v || p[-1] == ' ' || p[-1] == ',';
        if (start && p[nl] == '=') break;
        p += nl;
    }
    if (!p) return -1;
    p += nl + 1;
    size_t len = strcspn(p, ", ");
    if (len == 0 || len >= cap) return -1;
    memcpy(out, p, len);
    out[len] = 0;
    return 0;
}

int sigv4_parse_authorization(const char *value, SigV4Auth *out, PailErr *err) {
    memset(out, 0, sizeof *out);
    size_t al = strlen(SIGV4_ALGORITHM);
    if (!value || strncmp(value, SIGV4_ALGORITHM, al) || value[al] != ' ')
        return err_set(err, PAIL_ERR_AUTH, "Authorization header: not " SIGV4_ALGORITHM
                       " (only Signature Version 4 is accepted)");
    const char *rest = value + al + 1;
    char cred[512];
    if (auth_field(rest, "Credential", cred, sizeof cred) < 0)
        return err_set(err, PAIL_ERR_AUTH, "Authorization header: missing or oversized Credential=");
    // AK/YYYYMMDD/region/service/aws4_request; the access key itself has no '/'.
    char *parts[5];
    int np = 0;
    for (char *s = cred, *tok; np < 5 && (tok = strsep(&s, "/")) != NULL;) parts[np++] = tok;
    if (np != 5 || strchr(parts[4], '/') || strcmp(parts[4], "aws4_request") || strlen(parts[1]) != 8 ||
        !*parts[0] || !*parts[2] || !*parts[3])
        return err_set(err, PAIL_ERR_AUTH,
                       "Authorization header: Credential is not AKID/YYYYMMDD/region/service/aws4_request");
    if (strlen(parts[0]) >= sizeof out->access_key || strlen(parts[2]) >= sizeof out->region ||
        strlen(parts[3]) >= sizeof out->service)
        return err_set(err, PAIL_ERR_AUTH, "Authorization header: Credential field too long");
    for (int i = 0; i < 8; i++)
        if (!isdigit((unsigned char)parts[1][i]))
            return err_set(err, PAIL_ERR_AUTH, "Authorization header: credential date '%s' is not YYYYMMDD", parts[1]);
    strcpy(out->access_key, parts[0]);
    memcpy(out->date, parts[1], 9);
    strcpy(out->region, parts[2]);
    strcpy(out->service, parts[3]);
    if (auth_field(rest, "SignedHeaders", out->signed_headers, sizeof out->signed_headers) < 0)
        return err_set(err, PAIL_ERR_AUTH, "Authorization header: missing or oversized SignedHeaders=");
    char sig[80];
    if (auth_field(rest, "Signature", sig, sizeof sig) < 0 || strlen(sig) != 64)
        return err_set(err, PAIL_ERR_AUTH, "Authorization header: Signature= is not 64 hex digits");
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)sig[i]) || isupper((unsigned char)sig[i]))
            return err_set(err, PAIL_ERR_AUTH, "Authorization header: Signature= is not lowercase hex");
    memcpy(out->signature, sig, 65);
    return 0;
}

int sigv4_expected_signature(const SigV4Request *req, const char *signed_headers,
                             const char *secret, const char *amz_date, const char *region,
                             const char *service, char sig[65], PailErr *err) {
    SigV4Header *sel = calloc((size_t)(req->nheaders > 0 ? req->nheaders : 1), sizeof *sel);
    if (!sel) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    int n = 0, rc = 0;
    const char *s = signed_headers;
    while (*s && rc == 0) {
        size_t len = strcspn(s, ";");
        bool found = false;
        for (int i = 0; i < req->nheaders; i++) {
            if (strlen(req->headers[i].name) == len && !strncasecmp(req->headers[i].name, s, len)) {
                if (n < req->nheaders) sel[n++] = req->headers[i];
                found = true;
            }
        }
        if (!found) rc = err_set(err, PAIL_ERR_AUTH, "signed header '%.*s' is not in the request", (int)len, s);
        s += len;
        if (*s == ';') s++;
    }
    if (rc == 0) {
        SigV4Request r = *req;
        r.headers = sel;
        r.nheaders = n;
        rc = sigv4_sign(&r, "", secret, amz_date, region, service, sig, NULL, err);
    }
    free(sel);
    return rc;
}

bool sigv4_signature_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    size_t n = la < lb ? la : lb;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

void sigv4_amz_date(char out[17], int64_t unix_s) {
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}
