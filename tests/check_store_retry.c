// Check suite for src/store/retry.c and the retry loop of store_s3.c: the pure
// policy (which statuses and S3 codes are retried, the backoff), then the real
// client against a loopback HTTP server (libevent evhttp in a thread on
// 127.0.0.1, port 0) that fails on purpose. The server also checks every
// request's SigV4 signature and x-amz-content-sha256 with the verifier API.
// Faults below HTTP (connections reset mid-body or before the answer, refused
// for a while) come from a small raw-socket server further down.
#define _GNU_SOURCE  // memmem
#include <arpa/inet.h>
#include <check.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "core/sha256.h"
#include "core/timeutil.h"
#include "store/retry.h"
#include "store/sigv4.h"
#include "store/store.h"
#include "store/versions.h"

#define AK "AKIDTESTRETRY"
#define SECRET "retry-secret-do-not-print"

// ---- pure policy ----

START_TEST(test_policy) {
    ck_assert(retry_is_transient(XFER_OK, 500, "InternalError"));
    ck_assert(retry_is_transient(XFER_OK, 503, "SlowDown"));
    ck_assert(retry_is_transient(XFER_OK, 502, NULL));
    ck_assert(retry_is_transient(XFER_OK, 504, NULL));
    ck_assert(!retry_is_transient(XFER_OK, 501, "NotImplemented"));
    ck_assert(retry_is_transient(XFER_OK, 429, NULL));
    ck_assert(retry_is_transient(XFER_OK, 409, "ConditionalRequestConflict"));
    ck_assert(!retry_is_transient(XFER_OK, 409, "BucketAlreadyExists"));
    ck_assert(!retry_is_transient(XFER_OK, 409, NULL));
    ck_assert(retry_is_transient(XFER_OK, 400, "RequestTimeout"));
    ck_assert(!retry_is_transient(XFER_OK, 400, "InvalidArgument"));
    ck_assert(!retry_is_transient(XFER_OK, 400, NULL));
    ck_assert(!retry_is_transient(XFER_OK, 403, "AccessDenied"));
    ck_assert(!retry_is_transient(XFER_OK, 403, "SignatureDoesNotMatch"));
    ck_assert(!retry_is_transient(XFER_OK, 404, "NoSuchKey"));
    ck_assert(!retry_is_transient(XFER_OK, 412, "PreconditionFailed"));
    ck_assert(!retry_is_transient(XFER_OK, 304, NULL));
    ck_assert(!retry_is_transient(XFER_OK, 200, NULL));
    ck_assert(!retry_is_transient(XFER_OK, 206, NULL));
    ck_assert(retry_is_transient(XFER_CONNECT, 0, NULL));
    ck_assert(retry_is_transient(XFER_RESOLVE, 0, NULL));
    ck_assert(retry_is_transient(XFER_TIMEOUT, 0, NULL));
    ck_assert(retry_is_transient(XFER_BROKEN, 0, NULL));
    ck_assert(!retry_is_transient(XFER_TLS, 0, NULL));
    ck_assert(!retry_is_transient(XFER_OTHER, 0, NULL));
}
END_TEST

START_TEST(test_backoff) {
    // u * min(cap, base * 2^n)
    ck_assert_int_eq(retry_backoff_ms(0, 100, 5000, 0.5), 50);
    ck_assert_int_eq(retry_backoff_ms(1, 100, 5000, 0.5), 100);
    ck_assert_int_eq(retry_backoff_ms(3, 100, 5000, 0.5), 400);
    ck_assert_int_eq(retry_backoff_ms(6, 100, 5000, 0.5), 2500);   // 6400 capped at 5000
    ck_assert_int_eq(retry_backoff_ms(60, 100, 5000, 0.5), 2500);  // no overflow for large n
    ck_assert_int_eq(retry_backoff_ms(4, 100, 5000, 0.0), 0);
    ck_assert_int_lt(retry_backoff_ms(4, 100, 5000, 1.0), 1600);
    // No sleep crosses the deadline; the last one ends at it (a last attempt
    // there), then the loop gives up.
    RetryState rs;
    int64_t t0 = time_mono_ms();  // before the budget starts: its deadline is then >= t0 + 300
    retry_init(&rs, 0.3);
    int n = 0;
    while (retry_wait(&rs)) n++;
    ck_assert_int_ge(time_mono_ms() - t0, 300);
    ck_assert_int_le(time_mono_ms() - t0, 330);
    ck_assert_int_eq(rs.retries, n);
    ck_assert(!rs.stopped);
}
END_TEST

// A stop (retry_stop_on's flag set) ends the retries within its grace, long
// before the budget, and says so; without the flag set nothing changes.
START_TEST(test_stop_cuts_retries_short) {
    static volatile sig_atomic_t stop;
    stop = 0;
    retry_stop_on(&stop, 0.2);
    RetryState rs;
    retry_init(&rs, 3600);
    ck_assert(retry_wait(&rs));
    ck_assert(!rs.stopped);
    stop = 1;
    int64_t t0 = time_mono_ms();
    while (retry_wait(&rs)) {}
    ck_assert(rs.stopped);
    ck_assert_int_ge(time_mono_ms() - t0, 200);
    ck_assert_int_le(time_mono_ms() - t0, 400);
    RetryState later;  // a request after the grace is not retried at all
    retry_init(&later, 3600);
    ck_assert(!retry_wait(&later));
    ck_assert(later.stopped);
    retry_stop_on(NULL, 0);
    retry_init(&later, 0.05);
    while (retry_wait(&later)) {}
    ck_assert(!later.stopped);
}
END_TEST

// ---- loopback server ----

typedef struct {
    pthread_mutex_t mu;
    struct event_base *base;
    struct evhttp *http;
    pthread_t thread;
    int port;
    // behaviour
    int fail_next;            // answer the next N requests with fail_status
    int fail_status;
    const char *fail_code;
    bool store_on_fail;       // a failed PUT still writes (the response is "lost")
    int always_status;        // every request gets this (0 = off)
    const char *always_code;
    bool relay;               // send x-pail-relay: 1
    const char *list_body;    // a LIST answers this instead (raw bytes)
    // the one object it holds
    bool exists;
    Buf obj;
    char meta_sha[80];
    // what it saw
    int requests, puts, gets, heads, lists;
    int bad_sig, bad_sha;
    char last_query[512];
    char last_psha[80];       // x-amz-content-sha256 of the last request
} Srv;

static Srv S;

static void reply_error(struct evhttp_request *req, int status, const char *code) {
    struct evbuffer *b = evbuffer_new();
    if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
        evbuffer_add_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                               "<Message>test server says %s</Message><SignatureProvided>deadbeef</SignatureProvided>"
                               "</Error>", code, code);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/xml");
    evhttp_send_reply(req, status, "X", b);
    evbuffer_free(b);
}

// Checks the Authorization header and x-amz-content-sha256 against the body.
static void verify_request(struct evhttp_request *req, const uint8_t *body, size_t blen) {
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *auth = evhttp_find_header(in, "Authorization");
    const char *date = evhttp_find_header(in, "x-amz-date");
    const char *psha = evhttp_find_header(in, "x-amz-content-sha256");
    char hex[65];
    sha256_hex(body, blen, hex);
    if (!psha || (strcmp(psha, hex) && strcmp(psha, SIGV4_UNSIGNED_PAYLOAD))) S.bad_sha++;
    snprintf(S.last_psha, sizeof S.last_psha, "%s", psha ? psha : "");
    SigV4Auth a;
    PailErr err = {0};
    if (!auth || !date || !psha || sigv4_parse_authorization(auth, &a, &err) < 0 || strcmp(a.access_key, AK)) {
        S.bad_sig++;
        return;
    }
    SigV4Header h[64];
    int n = 0;
    for (struct evkeyval *kv = in->tqh_first; kv && n < 64; kv = kv->next.tqe_next) h[n++] = (SigV4Header){kv->key, kv->value};
    const char *uri = evhttp_request_get_uri(req);
    const char *q = strchr(uri, '?');
    Buf path = {0};
    sigv4_uri_decode(&path, uri, q ? (size_t)(q - uri) : strlen(uri));
    SigV4Request r = {.method = evhttp_request_get_command(req) == EVHTTP_REQ_GET    ? "GET"
                                : evhttp_request_get_command(req) == EVHTTP_REQ_HEAD ? "HEAD"
                                : evhttp_request_get_command(req) == EVHTTP_REQ_PUT  ? "PUT"
                                : evhttp_request_get_command(req) == EVHTTP_REQ_POST ? "POST"
                                                                                     : "DELETE",
                      .path = (char *)path.data, .query = q ? q + 1 : NULL, .headers = h, .nheaders = n,
                      .payload_hash = psha};
    char sig[65];
    if (sigv4_expected_signature(&r, a.signed_headers, SECRET, date, a.region, a.service, sig, &err) < 0 ||
        !sigv4_signature_equal(sig, a.signature))
        S.bad_sig++;
    buf_free(&path);
}

static void handler(struct evhttp_request *req, void *arg) {
    (void)arg;
    pthread_mutex_lock(&S.mu);
    S.requests++;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    struct evbuffer *inb = evhttp_request_get_input_buffer(req);
    size_t blen = evbuffer_get_length(inb);
    uint8_t *body = malloc(blen + 1);
    evbuffer_remove(inb, body, blen);
    verify_request(req, body, blen);
    struct evkeyvalq *in = evhttp_request_get_input_headers(req), *out = evhttp_request_get_output_headers(req);
    if (S.relay) evhttp_add_header(out, "x-pail-relay", "1");
    const char *uri = evhttp_request_get_uri(req);
    const char *q = strchr(uri, '?');
    if (S.always_status) {
        reply_error(req, S.always_status, S.always_code);
        goto done;
    }
    if (S.fail_next > 0) {
        S.fail_next--;
        if (cmd == EVHTTP_REQ_PUT && S.store_on_fail) {
            buf_reset(&S.obj);
            buf_append(&S.obj, body, blen);
            S.exists = true;
            const char *m = evhttp_find_header(in, "x-amz-meta-pail-sha256");
            snprintf(S.meta_sha, sizeof S.meta_sha, "%s", m ? m : "");
        }
        reply_error(req, S.fail_status, S.fail_code);
        goto done;
    }
    if (cmd == EVHTTP_REQ_GET && q && strstr(q, "list-type=2")) {
        S.lists++;
        snprintf(S.last_query, sizeof S.last_query, "%s", q + 1);
        struct evbuffer *b = evbuffer_new();
        if (S.list_body) evbuffer_add(b, S.list_body, strlen(S.list_body));
        else evbuffer_add_printf(b, "<ListBucketResult><Name>b</Name><KeyCount>1</KeyCount><IsTruncated>false</IsTruncated>"
                               "<Contents><Key>obj</Key><Size>%zu</Size><ETag>\"e\"</ETag>"
                               "<LastModified>2026-01-02T03:04:05.000Z</LastModified></Contents></ListBucketResult>",
                            S.obj.len);
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
    } else if (cmd == EVHTTP_REQ_PUT) {
        S.puts++;
        const char *inm = evhttp_find_header(in, "If-None-Match");
        if (inm && !strcmp(inm, "*") && S.exists) {
            reply_error(req, 412, "PreconditionFailed");
            goto done;
        }
        buf_reset(&S.obj);
        buf_append(&S.obj, body, blen);
        S.exists = true;
        const char *m = evhttp_find_header(in, "x-amz-meta-pail-sha256");
        snprintf(S.meta_sha, sizeof S.meta_sha, "%s", m ? m : "");
        evhttp_add_header(out, "ETag", "\"etag1\"");
        evhttp_send_reply(req, 200, "OK", NULL);
    } else if (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD) {
        cmd == EVHTTP_REQ_GET ? S.gets++ : S.heads++;
        if (!S.exists) {
            reply_error(req, 404, "NoSuchKey");
            goto done;
        }
        if (S.meta_sha[0]) evhttp_add_header(out, "x-amz-meta-pail-sha256", S.meta_sha);
        evhttp_add_header(out, "ETag", "\"etag1\"");
        struct evbuffer *b = evbuffer_new();
        if (cmd == EVHTTP_REQ_GET) evbuffer_add(b, S.obj.data ? (void *)S.obj.data : "", S.obj.len);
        else {
            char cl[32];
            snprintf(cl, sizeof cl, "%zu", S.obj.len);
            evhttp_add_header(out, "Content-Length", cl);
        }
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
    } else {
        reply_error(req, 501, "NotImplemented");
    }
done:
    free(body);
    pthread_mutex_unlock(&S.mu);
}

static void *srv_loop(void *arg) {
    (void)arg;
    event_base_dispatch(S.base);
    return NULL;
}

// TLS for the https cases: a fresh self-signed P-256 certificate for 127.0.0.1.
static SSL_CTX *g_tls;
static char g_cert_path[64];

static struct bufferevent *tls_bev(struct event_base *base, void *arg) {
    (void)arg;
    return bufferevent_openssl_socket_new(base, -1, SSL_new(g_tls), BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
}

static void tls_make(void) {
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    ck_assert(key && x);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, key);
    X509_NAME *nm = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (const unsigned char *)"pail test", -1, -1, 0);
    X509_set_issuer_name(x, nm);
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *san = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "IP:127.0.0.1");
    X509_EXTENSION *bc = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
    X509_add_ext(x, san, -1);
    X509_add_ext(x, bc, -1);
    X509_EXTENSION_free(san);
    X509_EXTENSION_free(bc);
    ck_assert(X509_sign(x, key, EVP_sha256()) > 0);
    snprintf(g_cert_path, sizeof g_cert_path, "/tmp/pail-check-ca-XXXXXX");
    int fd = mkstemp(g_cert_path);
    FILE *f = fdopen(fd, "w");
    PEM_write_X509(f, x);
    fclose(f);
    g_tls = SSL_CTX_new(TLS_server_method());
    ck_assert(SSL_CTX_use_certificate(g_tls, x) == 1 && SSL_CTX_use_PrivateKey(g_tls, key) == 1);
    X509_free(x);
    EVP_PKEY_free(key);
}

static void srv_start_mode(bool tls) {
    evthread_use_pthreads();
    buf_free(&S.obj);
    memset(&S, 0, sizeof S);
    pthread_mutex_init(&S.mu, NULL);
    S.base = event_base_new();
    S.http = evhttp_new(S.base);
    evhttp_set_allowed_methods(S.http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_POST |
                                           EVHTTP_REQ_DELETE);
    evhttp_set_gencb(S.http, handler, NULL);
    if (tls) {
        tls_make();
        evhttp_set_bevcb(S.http, tls_bev, NULL);
    }
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(S.http, "127.0.0.1", 0);
    ck_assert_ptr_nonnull(bs);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    getsockname(evconnlistener_get_fd(evhttp_bound_socket_get_listener(bs)), (struct sockaddr *)&sa, &sl);
    S.port = ntohs(sa.sin_port);
    pthread_create(&S.thread, NULL, srv_loop, NULL);
}

static void srv_start(void) { srv_start_mode(false); }

static void srv_stop(void) {
    event_base_loopbreak(S.base);
    pthread_join(S.thread, NULL);
    evhttp_free(S.http);
    event_base_free(S.base);
    buf_free(&S.obj);
    pthread_mutex_destroy(&S.mu);
    if (g_tls) {
        SSL_CTX_free(g_tls);
        g_tls = NULL;
        unlink(g_cert_path);
    }
}

static Store *open_store(double retry_s) {
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", S.port);
    StoreOptions o = {.endpoint = ep, .access_key = AK, .secret_key = SECRET, .retry_seconds = retry_s,
                      .timeout_seconds = 5};
    Store *st = NULL;
    PailErr err = {0};
    ck_assert_msg(store_open(&st, "s3://testbucket/pre", &o, &err) == 0, "%s", err.msg);
    return st;
}

static void set_obj(const char *s) {
    buf_reset(&S.obj);
    buf_append(&S.obj, s, strlen(s));
    S.exists = true;
}

// ---- the loop against the server ----

START_TEST(test_503_twice_then_ok) {
    srv_start();
    set_obj("hello");
    S.fail_next = 2, S.fail_status = 503, S.fail_code = "SlowDown";
    Store *st = open_store(5);
    Buf out = {0};
    PailErr err = {0};
    ck_assert_msg(store_get(st, "k", &out, NULL, NULL, &err) == 0, "%s", err.msg);
    ck_assert_str_eq((char *)out.data, "hello");  // failed attempts left nothing behind
    ck_assert_int_eq(S.requests, 3);
    ck_assert_int_eq(S.bad_sig, 0);
    ck_assert_int_eq(S.bad_sha, 0);
    buf_free(&out);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_429_then_ok) {
    srv_start();
    S.fail_next = 1, S.fail_status = 429, S.fail_code = "TooManyRequests";
    Store *st = open_store(5);
    PailErr err = {0};
    ck_assert_msg(store_put(st, "k", "abc", 3, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(S.requests, 2);
    ck_assert_int_eq((int)S.obj.len, 3);
    ck_assert_int_eq(S.bad_sig, 0);
    ck_assert_int_eq(S.bad_sha, 0);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_always_500_gives_up) {
    srv_start();
    S.always_status = 500, S.always_code = "InternalError";
    Store *st = open_store(1.5);
    Buf out = {0};
    PailErr err = {0};
    double t0 = time_mono_s();
    ck_assert_int_eq(store_get(st, "k", &out, NULL, NULL, &err), -1);
    double dt = time_mono_s() - t0;
    ck_assert_int_eq(err.code, PAIL_ERR_NETWORK);
    ck_assert_ptr_nonnull(strstr(err.msg, "gave up"));
    ck_assert_ptr_nonnull(strstr(err.msg, "InternalError"));
    ck_assert_ptr_nonnull(strstr(err.msg, "s3://testbucket/pre/k"));
    ck_assert_msg(dt < 2.0, "took %.2f s for a 1.5 s budget", dt);
    ck_assert_int_ge(S.requests, 2);
    buf_free(&out);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_403_not_retried) {
    srv_start();
    S.always_status = 403, S.always_code = "AccessDenied";
    Store *st = open_store(5);
    Buf out = {0};
    PailErr err = {0};
    ck_assert_int_eq(store_get(st, "k", &out, NULL, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_AUTH);
    ck_assert_int_eq(S.requests, 1);
    ck_assert_ptr_nonnull(strstr(err.msg, "AccessDenied"));
    ck_assert_ptr_nonnull(strstr(err.msg, "AWS_ACCESS_KEY_ID"));
    ck_assert_ptr_null(strstr(err.msg, SECRET));
    ck_assert_ptr_null(strstr(err.msg, "deadbeef"));  // S3's SignatureProvided is not echoed
    buf_free(&out);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_create_only_lost_response_same) {
    // First attempt writes but its response is lost (500); the retry gets 412;
    // the existing object is ours, so the write succeeded.
    srv_start();
    S.fail_next = 1, S.fail_status = 500, S.fail_code = "InternalError", S.store_on_fail = true;
    Store *st = open_store(5);
    PailErr err = {0};
    StorePutOpts o = {.create_only = true};
    ck_assert_msg(store_put(st, "k", "payload", 7, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(S.gets, 1);  // no pail-sha256 metadata: downloaded and hashed
    // Same with pail-sha256 metadata: a HEAD is enough.
    S.exists = false;
    S.fail_next = 1;
    S.gets = S.heads = 0;
    char hex[65];
    sha256_hex("payload2", 8, hex);
    StoreMeta m = {.name = "pail-sha256"};
    snprintf(m.value, sizeof m.value, "%s", hex);
    StorePutOpts o2 = {.create_only = true, .nmeta = 1, .meta = &m};
    ck_assert_msg(store_put(st, "k", "payload2", 8, &o2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(S.heads, 1);
    ck_assert_int_eq(S.gets, 0);
    ck_assert_int_eq(S.bad_sig, 0);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_create_only_lost_response_differs) {
    // Someone else's object is there; our first attempt failed before writing.
    srv_start();
    set_obj("theirs!");
    S.fail_next = 1, S.fail_status = 503, S.fail_code = "SlowDown";
    Store *st = open_store(5);
    PailErr err = {0};
    StorePutOpts o = {.create_only = true};
    ck_assert_int_eq(store_put(st, "k", "payload", 7, &o, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_EXISTS);
    ck_assert_str_eq((char *)S.obj.data, "theirs!");
    // Without a retry a 412 is a conflict at once: nothing is downloaded.
    S.heads = S.gets = S.requests = 0;
    ck_assert_int_eq(store_put(st, "k", "theirs!", 7, &o, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_EXISTS);
    ck_assert_int_eq(S.requests, 1);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_relay_long_poll) {
    srv_start();
    set_obj("x");
    Store *st = open_store(5);
    StoreList l = {0};
    PailErr err = {0};
    StoreListOpts lo = {.prefix = "", .wait_seconds = 3};
    ck_assert_msg(store_list(st, &lo, &l, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(strstr(S.last_query, "x-pail-wait"));  // not a relay (yet)
    ck_assert(!store_is_relay(st));
    ck_assert_int_eq(l.n, 0);  // "obj" is outside the store prefix "pre/"
    S.relay = true;
    ck_assert_int_eq(store_list(st, &lo, &l, &err), 0);
    ck_assert(store_is_relay(st));
    ck_assert_int_eq(store_list(st, &lo, &l, &err), 0);
    ck_assert_ptr_nonnull(strstr(S.last_query, "x-pail-wait=3"));
    ck_assert_ptr_nonnull(strstr(S.last_query, "prefix=pre%2F"));
    ck_assert_int_eq(S.bad_sig, 0);  // the parameter is inside the signed query
    store_list_free(&l);
    store_close(st);
    srv_stop();
}
END_TEST

// stderr into a temp file between _begin and _end, which returns what was
// written (caller frees).
static char *capture_stderr_begin(int *saved) {
    fflush(stderr);
    *saved = dup(2);
    char *path = strdup("/tmp/pail-check-stderr-XXXXXX");
    int fd = mkstemp(path);
    dup2(fd, 2);
    close(fd);
    return path;
}

static char *capture_stderr_end(int saved, char *path) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 1 << 16);
    size_t n = f ? fread(text, 1, (1 << 16) - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    unlink(path);
    free(path);
    return text;
}

static int count_lines_with(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++) n++;
    return n;
}

// A listing entry the client cannot use (a key that is not UTF-8, a control
// character) once made the whole LIST fail ("not XML") and with it the trainer
// and every worker, until an operator deleted the object. It is skipped, with
// one warning naming it; the rest of the page is used.
START_TEST(test_list_skips_unusable_keys) {
    srv_start();
    S.list_body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult><Name>b</Name>"
                  "<IsTruncated>false</IsTruncated>"
                  "<Contents><Key>pre/rollouts/v00000101/\xff\xfe.h5</Key><Size>1</Size></Contents>"
                  "<Contents><Key>pre/rollouts/v00000101/w1-000001.h5</Key><Size>2</Size></Contents>"
                  "<Contents><Key>pre/rollouts/v00000101/w\x01-000002.h5</Key><Size>3</Size></Contents>"
                  "<Contents><Key>pre/rollouts/v00000101/w\\-000003.h5</Key><Size>3</Size></Contents>"
                  "<Contents><Key>pre/rollouts/v00000101/w2-000001.h5</Key><Size>4</Size></Contents>"
                  "</ListBucketResult>";
    Store *st = open_store(5);
    StoreList l = {0};
    PailErr err = {0};
    StoreListOpts lo = {.prefix = "rollouts/v00000101/"};
    int saved;
    char *path = capture_stderr_begin(&saved);
    int rc1 = store_list(st, &lo, &l, &err);
    int n1 = l.n;
    int rc2 = store_list(st, &lo, &l, &err);
    char *text = capture_stderr_end(saved, path);
    ck_assert_msg(rc1 == 0 && rc2 == 0, "%s", err.msg);
    ck_assert_int_eq(n1, 2);
    ck_assert_int_eq(l.n, 2);
    ck_assert_str_eq(l.entries[0].key, "rollouts/v00000101/w1-000001.h5");
    ck_assert_str_eq(l.entries[1].key, "rollouts/v00000101/w2-000001.h5");
    ck_assert_int_eq(l.entries[1].size, 4);
    // One warning per key, not one per LIST, naming it (bytes escaped).
    ck_assert_msg(count_lines_with(text, "\\xff\\xfe.h5") == 1, "%s", text);
    ck_assert_msg(count_lines_with(text, "w\\x01-000002.h5") == 1, "%s", text);
    ck_assert_msg(count_lines_with(text, "skipped") == 3, "%s", text);
    free(text);
    store_list_free(&l);
    store_close(st);
    srv_stop();
}
END_TEST

// A clock that jumps past the server's 15-minute window mid-run: the client
// had requests accepted before, so it backs off (not a request a second for
// ever), says so once a minute naming the fix, and goes on when the clock is
// right again. The same skew on a Store's first request is refused at once.
START_TEST(test_clock_skew_mid_run) {
    srv_start();
    set_obj("hello");
    Buf out = {0};
    PailErr err = {0};
    Store *fresh = open_store(30);
    S.fail_next = 1, S.fail_status = 403, S.fail_code = "RequestTimeTooSkewed";
    ck_assert_int_eq(store_get(fresh, "k", &out, NULL, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_AUTH);
    ck_assert_int_eq(S.requests, 1);
    ck_assert_msg(strstr(err.msg, "RequestTimeTooSkewed") && strstr(err.msg, "chrony"), "%s", err.msg);
    store_close(fresh);

    Store *st = open_store(30);
    ck_assert_msg(store_get(st, "k", &out, NULL, NULL, &err) == 0, "%s", err.msg);
    int saved;
    char *path = capture_stderr_begin(&saved);
    S.fail_next = 3;
    int before = S.requests;
    double t0 = time_mono_s();
    int rc1 = store_get(st, "k", &out, NULL, NULL, &err);
    double dt = time_mono_s() - t0;
    int sent = S.requests - before;
    S.fail_next = 2;
    int rc2 = store_get(st, "k", &out, NULL, NULL, &err);
    char *text = capture_stderr_end(saved, path);
    ck_assert_msg(rc1 == 0 && rc2 == 0, "%s", err.msg);
    ck_assert_int_eq(sent, 4);
    // Backoff: 0.5-1 s, 1-2 s, 2-4 s before the three retries.
    ck_assert_msg(dt >= 3.4 && dt < 8, "3 retries took %.2f s", dt);
    ck_assert_msg(count_lines_with(text, "RequestTimeTooSkewed") == 1, "%s", text);
    ck_assert_msg(strstr(text, "chrony") && strstr(text, "clock"), "%s", text);
    free(text);
    buf_free(&out);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_connection_refused) {
    // A port nobody listens on: bind, read the port, close.
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", ntohs(sa.sin_port));
    StoreOptions o = {.endpoint = ep, .access_key = AK, .secret_key = SECRET, .retry_seconds = 1};
    Store *st;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&st, "s3://testbucket", &o, &err), 0);
    Buf out = {0};
    double t0 = time_mono_s();
    ck_assert_int_eq(store_get(st, "k", &out, NULL, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NETWORK);
    ck_assert_ptr_nonnull(strstr(err.msg, ep));
    ck_assert_double_lt(time_mono_s() - t0, 1.6);
    ck_assert_ptr_null(strstr(err.msg, SECRET));
    buf_free(&out);
    store_close(st);
}
END_TEST


START_TEST(test_tls_verification) {
    // https to a server whose certificate no trusted CA signed: refused at once
    // (configuration, not luck: no retries), and accepted with that CA given.
    srv_start_mode(true);
    set_obj("over tls");
    char ep[64];
    snprintf(ep, sizeof ep, "https://127.0.0.1:%d", S.port);
    StoreOptions o = {.endpoint = ep, .access_key = AK, .secret_key = SECRET, .retry_seconds = 5, .timeout_seconds = 5};
    Store *st = NULL;
    PailErr err = {0};
    Buf out = {0};
    unsetenv("AWS_CA_BUNDLE");
    ck_assert_int_eq(store_open(&st, "s3://testbucket", &o, &err), 0);
    double t0 = time_mono_s();
    ck_assert_int_eq(store_get(st, "k", &out, NULL, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NETWORK);
    ck_assert_msg(strstr(err.msg, "certificate") || strstr(err.msg, "TLS"), "%s", err.msg);
    ck_assert_double_lt(time_mono_s() - t0, 1.0);
    ck_assert_int_eq(S.requests, 0);
    store_close(st);
    o.ca_bundle = g_cert_path;
    ck_assert_int_eq(store_open(&st, "s3://testbucket", &o, &err), 0);
    ck_assert_msg(store_get(st, "k", &out, NULL, NULL, &err) == 0, "%s", err.msg);
    ck_assert_str_eq((char *)out.data, "over tls");
    // Over https a streamed file upload is sent as UNSIGNED-PAYLOAD (still signed).
    char path[] = "/tmp/pail-check-retry-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_eq(write(fd, "file body", 9), 9);
    close(fd);
    ck_assert_msg(store_put_file(st, "f", path, NULL, &err) == 0, "%s", err.msg);
    unlink(path);
    ck_assert_str_eq(S.last_psha, SIGV4_UNSIGNED_PAYLOAD);
    ck_assert_int_eq((int)S.obj.len, 9);
    ck_assert_mem_eq(S.obj.data, "file body", 9);
    ck_assert_int_eq(S.bad_sig, 0);
    buf_free(&out);
    store_close(st);
    srv_stop();
}
END_TEST

// ---- a raw loopback server: faults below HTTP ----
// evhttp cannot drop a connection halfway through a request body, nor refuse
// connections for a while, so these cases use a small blocking HTTP/1.1
// server: keep-alive, a thread per connection, one object (no signature
// checks: the evhttp server above does those), and a script of what the i-th
// PUT gets. A reset is a close with SO_LINGER 0 (RST), as when a relay or
// proxy process dies mid-request.

typedef enum { RAW_ANSWER = 0, RAW_RESET_MID_BODY, RAW_RESET_AFTER_BODY } RawFault;

typedef struct {
    pthread_mutex_t mu;
    int lfd, port;
    pthread_t thread;
    int64_t listen_at_ms;   // connections are refused until then (bound, not listening)
    atomic_bool quit;
    atomic_int live;        // connection threads running
    int cut_conns;          // the first N connections are closed at once (a TLS handshake cut)
    bool cut_rst;           // ...with a reset (else a plain close)
    RawFault script[8];     // the i-th PUT (0-based, counting from puts = 0) gets script[i]
    int nscript;
    int puts, gets, heads, conns, resets;
    bool exists;
    Buf obj;
    char meta_sha[80];
} RawSrv;

static RawSrv R;

// Header value (trimmed) of `name` in a request head, or false.
static bool raw_header(const char *head, const char *name, char *out, size_t cap) {
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, nl) || p[2 + nl] != ':') continue;
        const char *v = p + 3 + nl, *e = strstr(v, "\r\n");
        while (*v == ' ') v++;
        snprintf(out, cap, "%.*s", (int)(e - v), v);
        return true;
    }
    return false;
}

static void raw_send(int fd, const char *head, const void *body, size_t blen) {
    send(fd, head, strlen(head), MSG_NOSIGNAL);
    if (blen) send(fd, body, blen, MSG_NOSIGNAL);
}

static void raw_reset(int fd) {
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    pthread_mutex_lock(&R.mu);
    R.resets++;
    pthread_mutex_unlock(&R.mu);
}

// Reads until buf holds `want` bytes; false on EOF, error or quit.
static bool raw_fill(int fd, Buf *in, size_t want) {
    char chunk[65536];
    while (in->len < want) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, 100);
        if (atomic_load(&R.quit)) return false;
        if (pr <= 0) continue;
        ssize_t got = recv(fd, chunk, sizeof chunk, 0);
        if (got <= 0) return false;
        ck_assert_int_eq(buf_append(in, chunk, (size_t)got), 0);
    }
    return true;
}

// Stores a PUT body unless create-only finds the key taken; true when stored.
static bool raw_apply_put(const char *head, const uint8_t *body, size_t blen) {
    char inm[8], sha[80];
    if (raw_header(head, "if-none-match", inm, sizeof inm) && !strcmp(inm, "*") && R.exists) return false;
    buf_reset(&R.obj);
    buf_append(&R.obj, body, blen);
    R.exists = true;
    snprintf(R.meta_sha, sizeof R.meta_sha, "%s", raw_header(head, "x-amz-meta-pail-sha256", sha, sizeof sha) ? sha : "");
    return true;
}

static void *raw_conn(void *arg) {
    int fd = (int)(intptr_t)arg;
    Buf in = {0};
    for (;;) {
        char *end = NULL;
        while (!(end = in.len ? memmem(in.data, in.len, "\r\n\r\n", 4) : NULL))
            if (!raw_fill(fd, &in, in.len + 1)) goto closed;
        size_t hlen = (size_t)(end - (char *)in.data) + 4;
        char *head = strndup((char *)in.data, hlen), cl[32];
        size_t blen = raw_header(head, "content-length", cl, sizeof cl) ? strtoull(cl, NULL, 10) : 0;
        bool put = !strncmp(head, "PUT ", 4), get = !strncmp(head, "GET ", 4), hd = !strncmp(head, "HEAD ", 5);
        pthread_mutex_lock(&R.mu);
        RawFault f = put && R.puts < R.nscript ? R.script[R.puts] : RAW_ANSWER;
        if (put) R.puts++;
        pthread_mutex_unlock(&R.mu);
        if (f == RAW_RESET_MID_BODY) {
            raw_fill(fd, &in, hlen + blen / 2);
            free(head);
            raw_reset(fd);
            buf_free(&in);
            goto done;
        }
        if (!raw_fill(fd, &in, hlen + blen)) {
            free(head);
            goto closed;
        }
        const uint8_t *body = in.data + hlen;
        char resp[512];
        pthread_mutex_lock(&R.mu);
        if (put) {
            bool stored = raw_apply_put(head, body, blen);
            if (f == RAW_RESET_AFTER_BODY) {  // the write landed; the answer never leaves
                pthread_mutex_unlock(&R.mu);
                free(head);
                raw_reset(fd);
                buf_free(&in);
                goto done;
            }
            if (stored) raw_send(fd, "HTTP/1.1 200 OK\r\nETag: \"e1\"\r\nContent-Length: 0\r\n\r\n", NULL, 0);
            else {
                const char *x = "<Error><Code>PreconditionFailed</Code><Message>taken</Message></Error>";
                snprintf(resp, sizeof resp, "HTTP/1.1 412 Precondition Failed\r\nContent-Type: application/xml\r\n"
                                            "Content-Length: %zu\r\n\r\n", strlen(x));
                raw_send(fd, resp, x, strlen(x));
            }
        } else if ((get || hd) && R.exists) {
            get ? R.gets++ : R.heads++;
            char meta[160] = "";
            if (R.meta_sha[0]) snprintf(meta, sizeof meta, "x-amz-meta-pail-sha256: %s\r\n", R.meta_sha);
            snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nETag: \"e1\"\r\n%sContent-Length: %zu\r\n\r\n", meta,
                     R.obj.len);
            raw_send(fd, resp, R.obj.data, get ? R.obj.len : 0);
        } else if (get || hd) {
            get ? R.gets++ : R.heads++;
            const char *x = "<Error><Code>NoSuchKey</Code><Message>no</Message></Error>";
            snprintf(resp, sizeof resp, "HTTP/1.1 404 Not Found\r\nContent-Length: %zu\r\n\r\n", hd ? 0 : strlen(x));
            raw_send(fd, resp, x, hd ? 0 : strlen(x));
        } else {
            raw_send(fd, "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n\r\n", NULL, 0);
        }
        pthread_mutex_unlock(&R.mu);
        free(head);
        memmove(in.data, in.data + hlen + blen, in.len - hlen - blen);
        in.len -= hlen + blen;
    }
closed:
    close(fd);
    buf_free(&in);
done:
    atomic_fetch_sub(&R.live, 1);
    return NULL;
}

static void *raw_accept(void *arg) {
    (void)arg;
    while (time_mono_ms() < R.listen_at_ms)
        if (atomic_load(&R.quit)) return NULL;
        else time_sleep_ms(10);
    ck_assert_int_eq(listen(R.lfd, 16), 0);
    while (!atomic_load(&R.quit)) {
        struct pollfd pf = {.fd = R.lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0) continue;
        int fd = accept(R.lfd, NULL, NULL);
        if (fd < 0) continue;
        pthread_mutex_lock(&R.mu);
        bool cut = R.conns++ < R.cut_conns;
        pthread_mutex_unlock(&R.mu);
        if (cut) {
            if (R.cut_rst) raw_reset(fd);
            else close(fd);
            continue;
        }
        atomic_fetch_add(&R.live, 1);
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, raw_conn, (void *)(intptr_t)fd), 0);
        pthread_detach(t);
    }
    return NULL;
}

// Starts the server; it refuses connections for the first refuse_ms (< 0: for good).
static void raw_start(int64_t refuse_ms) {
    memset(&R, 0, sizeof R);
    pthread_mutex_init(&R.mu, NULL);
    R.lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(R.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(R.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    getsockname(R.lfd, (struct sockaddr *)&sa, &sl);
    R.port = ntohs(sa.sin_port);
    R.listen_at_ms = refuse_ms < 0 ? INT64_MAX : time_mono_ms() + refuse_ms;
    ck_assert_int_eq(pthread_create(&R.thread, NULL, raw_accept, NULL), 0);
}

// Call after store_close (which closes the client's keep-alive connections).
static void raw_stop(void) {
    atomic_store(&R.quit, true);
    pthread_join(R.thread, NULL);
    close(R.lfd);
    for (int i = 0; i < 100 && atomic_load(&R.live) > 0; i++) time_sleep_ms(20);
    ck_assert_int_eq(atomic_load(&R.live), 0);
    buf_free(&R.obj);
    pthread_mutex_destroy(&R.mu);
}

static void raw_script(int n, const RawFault *f) {
    pthread_mutex_lock(&R.mu);
    R.puts = R.gets = R.heads = R.resets = 0;
    R.nscript = n;
    memcpy(R.script, f, (size_t)n * sizeof *f);
    pthread_mutex_unlock(&R.mu);
}

static Store *raw_store(double retry_s) {
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", R.port);
    StoreOptions o = {.endpoint = ep, .access_key = AK, .secret_key = SECRET, .retry_seconds = retry_s,
                      .timeout_seconds = 5};
    Store *st = NULL;
    PailErr err = {0};
    ck_assert_msg(store_open(&st, "s3://testbucket/pre", &o, &err) == 0, "%s", err.msg);
    return st;
}

static uint8_t *pattern(size_t n) {
    uint8_t *b = malloc(n);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 131 + (i >> 9));
    return b;
}

static void raw_obj_is(const uint8_t *body, size_t n) {
    pthread_mutex_lock(&R.mu);
    ck_assert_uint_eq(R.obj.len, n);
    ck_assert(memcmp(R.obj.data, body, n) == 0);
    pthread_mutex_unlock(&R.mu);
}

START_TEST(test_reset_mid_body) {
    // A PUT whose connection is reset halfway through the body: first on the
    // reused keep-alive connection (libcurl resends on a fresh one by itself
    // and must be able to rewind the body), then on that fresh one (the store's
    // loop retries). What lands is the whole body, from memory and from a file.
    size_t n = 96 << 10;
    uint8_t *body = pattern(n);
    raw_start(0);
    Store *st = raw_store(10);
    PailErr err = {0};
    RawFault f[] = {RAW_ANSWER, RAW_RESET_MID_BODY, RAW_RESET_MID_BODY};
    raw_script(3, f);
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);  // leaves a keep-alive connection
    ck_assert_msg(store_put(st, "k", body, n, NULL, &err) == 0, "%s", err.msg);
    raw_obj_is(body, n);
    ck_assert_int_eq(R.resets, 2);
    ck_assert_int_eq(R.puts, 4);
    // The same from a file (pread at an offset: the rewind is an offset too).
    char path[] = "/tmp/pail-check-retry-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_eq(write(fd, body, n), (ssize_t)n);
    close(fd);
    raw_script(3, f);
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(store_put_file(st, "f", path, NULL, &err) == 0, "%s", err.msg);
    raw_obj_is(body, n);
    ck_assert_int_eq(R.resets, 2);
    // A reset on the reused connection only: libcurl's own resend is enough.
    RawFault g[] = {RAW_ANSWER, RAW_RESET_MID_BODY};
    raw_script(2, g);
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(store_put_file(st, "f", path, NULL, &err) == 0, "%s", err.msg);
    raw_obj_is(body, n);
    ck_assert_int_eq(R.puts, 3);
    unlink(path);
    store_close(st);
    raw_stop();
    free(body);
}
END_TEST

START_TEST(test_reset_after_body) {
    // The server takes the whole body and applies the PUT, then resets the
    // connection without answering (a relay killed mid-request). The PUT is
    // sent again: a plain one just lands again; a create-only one gets 412 for
    // its own first copy, which the retried-412 rule settles as success.
    raw_start(0);
    Store *st = raw_store(10);
    PailErr err = {0};
    RawFault f[] = {RAW_ANSWER, RAW_RESET_AFTER_BODY};
    raw_script(2, f);
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(store_put(st, "k", "plain put", 9, NULL, &err) == 0, "%s", err.msg);
    raw_obj_is((const uint8_t *)"plain put", 9);
    ck_assert_int_eq(R.puts, 3);
    // Create-only without pail-sha256: the object is downloaded and hashed.
    R.exists = false;
    raw_script(2, f);
    StorePutOpts co = {.create_only = true};
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);
    R.exists = false;
    ck_assert_msg(store_put(st, "k", "create-only", 11, &co, &err) == 0, "%s", err.msg);
    raw_obj_is((const uint8_t *)"create-only", 11);
    ck_assert_int_eq(R.gets, 1);
    // A versioned publish (pail-sha256): one HEAD settles it.
    R.exists = false;
    raw_script(2, f);
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);
    R.exists = false;
    ck_assert_msg(versioned_put(st, "k", "versioned", 9, &err) == 0, "%s", err.msg);
    raw_obj_is((const uint8_t *)"versioned", 9);
    ck_assert_int_eq(R.gets, 0);
    ck_assert_int_ge(R.heads, 1);
    // From a file, create-only.
    char path[] = "/tmp/pail-check-retry-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_eq(write(fd, "file body", 9), 9);
    close(fd);
    R.exists = false;
    raw_script(2, f);
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);
    R.exists = false;
    ck_assert_msg(store_put_file(st, "k", path, &co, &err) == 0, "%s", err.msg);
    raw_obj_is((const uint8_t *)"file body", 9);
    unlink(path);
    // Someone else's object was there all along: still a conflict, not ours.
    raw_script(2, f);
    ck_assert_msg(store_put(st, "warm", "w", 1, NULL, &err) == 0, "%s", err.msg);  // "w" is now there
    ck_assert_int_eq(store_put(st, "k", "mine", 4, &co, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_EXISTS);
    ck_assert_ptr_nonnull(strstr(err.msg, "other content"));
    raw_obj_is((const uint8_t *)"w", 1);
    store_close(st);
    raw_stop();
}
END_TEST

START_TEST(test_tls_handshake_cut) {
    // https to an endpoint that takes the connection and drops it during the
    // TLS handshake (a relay restarting): reset, or closed without a word.
    // That is an outage, retried, not a certificate problem given up at once.
    for (int rst = 0; rst < 2; rst++) {
        raw_start(0);
        R.cut_conns = 1 << 30;
        R.cut_rst = rst;
        char ep[64];
        snprintf(ep, sizeof ep, "https://127.0.0.1:%d", R.port);
        StoreOptions o = {.endpoint = ep, .access_key = AK, .secret_key = SECRET, .retry_seconds = 1,
                          .timeout_seconds = 5};
        Store *st = NULL;
        PailErr err = {0};
        ck_assert_msg(store_open(&st, "s3://testbucket", &o, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(store_put(st, "k", "x", 1, NULL, &err), -1);
        ck_assert_int_eq(err.code, PAIL_ERR_NETWORK);
        ck_assert_msg(strstr(err.msg, "gave up after") && !strstr(err.msg, "TLS: check"), "%s", err.msg);
        ck_assert_int_ge(R.conns, 2);
        store_close(st);
        raw_stop();
    }
    // A handshake refused for what the peer said (https to a plain-http
    // server: "wrong version number") is configuration, and still final.
    srv_start();
    char ep[64];
    snprintf(ep, sizeof ep, "https://127.0.0.1:%d", S.port);
    StoreOptions o = {.endpoint = ep, .access_key = AK, .secret_key = SECRET, .retry_seconds = 5, .timeout_seconds = 5};
    Store *st = NULL;
    PailErr err = {0};
    ck_assert_msg(store_open(&st, "s3://testbucket", &o, &err) == 0, "%s", err.msg);
    double t0 = time_mono_s();
    ck_assert_int_eq(store_put(st, "k", "x", 1, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "TLS: check") && !strstr(err.msg, "gave up"), "%s", err.msg);
    ck_assert_double_lt(time_mono_s() - t0, 1.0);
    store_close(st);
    srv_stop();
}
END_TEST

START_TEST(test_outage_budget) {
    // The default budget is an hour (--max-outage), no longer 60 s.
    RetryState rs;
    retry_init(&rs, 0);
    ck_assert_int_eq(rs.deadline_ms - rs.start_ms, (int64_t)RETRY_DEFAULT_BUDGET_S * 1000);
    ck_assert_int_eq(RETRY_DEFAULT_BUDGET_S, 3600);
    // "Still failing" lines: the first after 10 s, then every 30 s, not per retry.
    retry_init(&rs, 100);
    int64_t t = rs.start_ms;
    ck_assert(!retry_report_due(&rs, t + 9999));
    ck_assert(retry_report_due(&rs, t + 10000));
    ck_assert(!retry_report_due(&rs, t + 10001));
    ck_assert(!retry_report_due(&rs, t + 39999));
    ck_assert(retry_report_due(&rs, t + 40000));
    ck_assert(!retry_report_due(&rs, t + 60000));
    ck_assert(retry_report_due(&rs, t + 75000));  // a late check reports once, then 30 s on
    ck_assert(!retry_report_due(&rs, t + 104999));
    ck_assert(retry_report_due(&rs, t + 105000));
    // An outage (connections refused) shorter than the budget costs time only.
    raw_start(2000);
    Store *st = raw_store(3);
    PailErr err = {0};
    double t0 = time_mono_s();
    ck_assert_msg(store_put(st, "k", "after the outage", 16, NULL, &err) == 0, "%s", err.msg);
    ck_assert_double_ge(time_mono_s() - t0, 1.9);
    raw_obj_is((const uint8_t *)"after the outage", 16);
    store_close(st);
    raw_stop();
    // Longer than the budget: the error names the request, the key, the time
    // spent and the budget.
    raw_start(-1);
    st = raw_store(1);
    t0 = time_mono_s();
    ck_assert_int_eq(store_put(st, "adapters/v00000012.h5", "x", 1, NULL, &err), -1);
    double dt = time_mono_s() - t0;
    ck_assert_int_eq(err.code, PAIL_ERR_NETWORK);
    ck_assert_ptr_nonnull(strstr(err.msg, "s3://testbucket/pre/adapters/v00000012.h5"));
    ck_assert_ptr_nonnull(strstr(err.msg, "PUT"));
    ck_assert_ptr_nonnull(strstr(err.msg, "--max-outage 1 s"));
    const char *in = strstr(err.msg, " attempts in ");
    ck_assert_msg(in, "%s", err.msg);
    double said = strtod(in + 13, NULL);
    ck_assert_msg(said > 0.5 && said <= dt + 0.05, "said %.2f s, took %.2f s: %s", said, dt, err.msg);
    ck_assert_double_lt(dt, 1.6);
    store_close(st);
    raw_stop();
}
END_TEST

int main(void) {
    Suite *s = suite_create("store_retry");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_policy);
    tcase_add_test(core, test_backoff);
    tcase_add_test(core, test_stop_cuts_retries_short);
    tcase_add_test(core, test_503_twice_then_ok);
    tcase_add_test(core, test_429_then_ok);
    tcase_add_test(core, test_create_only_lost_response_same);
    tcase_add_test(core, test_relay_long_poll);
    tcase_add_test(core, test_reset_mid_body);
    tcase_add_test(core, test_reset_after_body);
    tcase_set_timeout(core, 30);
    suite_add_tcase(s, core);
    TCase *lim = tcase_create("limits");
    tcase_add_test(lim, test_always_500_gives_up);
    tcase_add_test(lim, test_403_not_retried);
    tcase_add_test(lim, test_create_only_lost_response_differs);
    tcase_add_test(lim, test_connection_refused);
    tcase_add_test(lim, test_tls_verification);
    tcase_add_test(lim, test_tls_handshake_cut);
    tcase_add_test(lim, test_outage_budget);
    tcase_add_test(lim, test_list_skips_unusable_keys);
    tcase_add_test(lim, test_clock_skew_mid_run);
    tcase_set_timeout(lim, 30);
    suite_add_tcase(s, lim);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
