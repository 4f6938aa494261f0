// libcurl transport for store_s3.c (see http.h). TLS peer and host
// verification are set explicitly on every request and never turned off; a
// custom CA bundle only replaces the trust store. Redirects are not followed
// (a redirected S3 request would need re-signing for another host).
#include "store/http.h"
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define ERR_BODY_MAX (64 * 1024)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;
static void curl_init_once(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int http_client_init(HttpClient *c, const char *ca_bundle, int timeout_s, PailErr *err) {
    memset(c, 0, sizeof *c);
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK)
        return err_set(err, PAIL_ERR_NETWORK, "libcurl global init failed: %s", curl_easy_strerror(curl_init_rc));
    c->curl = curl_easy_init();
    if (!c->curl) return err_set(err, PAIL_ERR_NOMEM, "curl_easy_init failed");
    if (ca_bundle && !(c->ca_bundle = strdup(ca_bundle))) {
        curl_easy_cleanup(c->curl);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    c->timeout_s = timeout_s > 0 ? timeout_s : 30;
    return 0;
}

void http_client_free(HttpClient *c) {
    if (c->curl) curl_easy_cleanup(c->curl);
    free(c->ca_bundle);
    memset(c, 0, sizeof *c);
}

void http_response_free(HttpResponse *r) { buf_free(&r->err_body); }

typedef struct {
    const HttpRequest *req;
    HttpResponse *resp;
    uint64_t sent;   // body bytes handed to libcurl since the last (re)start
    int sink_errno;  // write() failure on sink_fd
    int body_errno;  // read failure on body_fd
} Xfer;

static void reset_headers(HttpResponse *r) {
    r->etag[0] = 0;
    r->content_length = -1;
    r->total_size = 0;
    r->last_modified = 0;
    r->nmeta = 0;
    r->meta_dropped = 0;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    Xfer *x = ud;
    HttpResponse *r = x->resp;
    size_t n = size * nitems;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        // A new status line (after 100 Continue, or a new response): start over.
        reset_headers(r);
        const char *sp = memchr(line, ' ', n);
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return n;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon) return n;
    size_t nl = (size_t)(colon - line);
    const char *v = colon + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    size_t vl = (size_t)(end - v);
#define IS(name) (nl == sizeof(name) - 1 && !strncasecmp(line, name, nl))
    if (IS("etag")) {
        if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') v++, vl -= 2;
        snprintf(r->etag, sizeof r->etag, "%.*s", (int)vl, v);
    } else if (IS("content-length")) {
        r->content_length = strtoll(v, NULL, 10);
        if (!r->total_size) r->total_size = (uint64_t)r->content_length;
    } else if (IS("content-range")) {
        const char *slash = memchr(v, '/', vl);
        if (slash && slash[1] != '*') r->total_size = strtoull(slash + 1, NULL, 10);
    } else if (IS("last-modified")) {
        char tmp[96];
        snprintf(tmp, sizeof tmp, "%.*s", (int)vl, v);
        time_t t = curl_getdate(tmp, NULL);
        r->last_modified = t > 0 ? (int64_t)t : 0;
    } else if (IS("x-pail-relay")) {
        r->relay = vl == 1 && v[0] == '1';
    } else if (nl > 11 && !strncasecmp(line, "x-amz-meta-", 11)) {
        if (r->nmeta < STORE_MAX_META && nl - 11 < sizeof r->meta[0].name && vl < sizeof r->meta[0].value) {
            StoreMeta *m = &r->meta[r->nmeta++];
            for (size_t i = 0; i < nl - 11; i++) m->name[i] = (char)tolower((unsigned char)line[11 + i]);
            m->name[nl - 11] = 0;
            memcpy(m->value, v, vl);
            m->value[vl] = 0;
        } else {
            r->meta_dropped++;
        }
    }
#undef IS
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
    Xfer *x = ud;
    const HttpRequest *q = x->req;
    HttpResponse *r = x->resp;
    size_t n = size * nmemb;
    if (r->status < 200 || r->status > 299) {
        size_t room = r->err_body.len < ERR_BODY_MAX ? ERR_BODY_MAX - r->err_body.len : 0;
        if (room && buf_append(&r->err_body, data, n < room ? n : room) < 0) return 0;
        return n;
    }
    if (q->sink) {
        if (buf_append(q->sink, data, n) < 0) {
            x->sink_errno = ENOMEM;
            return 0;
        }
    } else if (q->sink_fd >= 0) {
        size_t done = 0;
        while (done < n) {
            ssize_t w = write(q->sink_fd, data + done, n - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                x->sink_errno = w < 0 ? errno : EIO;
                return 0;
            }
            done += (size_t)w;
        }
    } else if (q->sink_hash) {
        sha256_update(q->sink_hash, data, n);
    }
    r->received += n;
    return n;
}

static size_t on_read(char *out, size_t size, size_t nmemb, void *ud) {
    Xfer *x = ud;
    const HttpRequest *q = x->req;
    size_t want = size * nmemb;
    uint64_t left = q->body_len - x->sent;
    if (want > left) want = (size_t)left;
    if (want == 0) return 0;
    if (q->body) {
        memcpy(out, q->body + x->sent, want);
    } else {
        ssize_t got;
        do got = pread(q->body_fd, out, want, (off_t)(q->body_off + x->sent));
        while (got < 0 && errno == EINTR);
        if (got <= 0) {
            x->body_errno = got < 0 ? errno : EIO;  // the file shrank under us
            return CURL_READFUNC_ABORT;
        }
        want = (size_t)got;
    }
    x->sent += want;
    return want;
}

// libcurl resends a request by itself when a reused keep-alive connection
// turns out dead (reset or closed before any response byte: a restarted relay
// or proxy). To send the body again it seeks back here; without this callback
// it gives up with CURLE_SEND_FAIL_REWIND. Both body sources are (pointer or
// fd, offset) pairs read with pread, so a rewind is just resetting `sent`.
static int on_seek(void *ud, curl_off_t offset, int origin) {
    Xfer *x = ud;
    HttpResponse *r = x->resp;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > x->req->body_len) return CURL_SEEKFUNC_FAIL;
    // Response bytes already went to the sink: only http_perform's caller can
    // roll those back, so let the transfer fail and the caller retry whole.
    if (r->received > 0) return CURL_SEEKFUNC_FAIL;
    x->sent = (uint64_t)offset;
    x->body_errno = 0;
    buf_reset(&r->err_body);
    r->resends++;
    return CURL_SEEKFUNC_OK;
}

static XferResult classify(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
        return XFER_CONNECT;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return XFER_RESOLVE;
    case CURLE_OPERATION_TIMEDOUT:
        return XFER_TIMEOUT;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_FAIL_REWIND:  // a resend libcurl could not rewind for: the caller starts over
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return XFER_BROKEN;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return XFER_TLS;
    default:
        return XFER_OTHER;
    }
}

// CURLE_SSL_CONNECT_ERROR covers a handshake the configuration refuses (wrong
// protocol or version) and one the peer cut short: reset, or closed without a
// word (OpenSSL's SSL_ERROR_SYSCALL), as a relay or proxy does while it
// restarts. The second is the network's doing and worth another attempt.
static bool handshake_cut(CURL *h, const char *msg) {
    long e = 0;
    curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &e);
    if (e == ECONNRESET || e == EPIPE || e == ECONNABORTED || e == ETIMEDOUT) return true;
    return strstr(msg, "SSL_ERROR_SYSCALL") != NULL;
}

int http_perform(HttpClient *c, const HttpRequest *q, HttpResponse *r) {
    buf_reset(&r->err_body);
    r->xfer = XFER_OK;
    r->xfer_msg[0] = 0;
    r->status = 0;
    r->relay = false;
    r->received = 0;
    r->resends = 0;
    reset_headers(r);
    Xfer x = {.req = q, .resp = r};
    char errbuf[CURL_ERROR_SIZE] = "";
    CURL *h = c->curl;
    curl_easy_reset(h);  // keeps the connection cache: keep-alive survives
    curl_easy_setopt(h, CURLOPT_URL, q->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, q->headers);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->timeout_s);
    // A stall (under 1 byte/s for the timeout) fails the request; a slow but
    // moving multi-GB transfer does not.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)(c->timeout_s + q->extra_timeout_s));
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (c->ca_bundle) curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_bundle);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    bool has_body = q->body || q->body_fd >= 0 || !strcmp(q->method, "PUT") || !strcmp(q->method, "POST");
    if (!strcmp(q->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (has_body) {
        // UPLOAD sends the body with Content-Length from INFILESIZE; CUSTOMREQUEST
        // turns the PUT into a POST where needed, without form encoding.
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_len);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &x);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, &x);
        if (strcmp(q->method, "PUT")) curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
    } else if (strcmp(q->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
    }
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) return 0;
    r->xfer = classify(rc);
    if (rc == CURLE_SSL_CONNECT_ERROR && handshake_cut(h, errbuf)) r->xfer = XFER_BROKEN;
    if (x.sink_errno) {
        r->xfer = XFER_OTHER;
        snprintf(r->xfer_msg, sizeof r->xfer_msg, "writing the response: %s", strerror(x.sink_errno));
    } else if (x.body_errno) {
        r->xfer = XFER_OTHER;
        snprintf(r->xfer_msg, sizeof r->xfer_msg, "reading the upload body: %s", strerror(x.body_errno));
    } else {
        snprintf(r->xfer_msg, sizeof r->xfer_msg, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    }
    return -1;
}
