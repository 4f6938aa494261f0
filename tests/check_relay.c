// Check suite for grpo-relay. "core": the relay runs in-process (port 0, plain
// HTTP on loopback, a temp --root) and pail's own s3:// store client drives it:
// put/get/head/list/delete, metadata, ranges, create-only, collapsed GETs,
// long-poll wake-ups and deadlines, roles. "limits": raw libcurl requests for
// every rejection (unsigned, wrong secret, stale date, tampered payload, wrong
// role, traversal), the key file and route parsers on hostile input, slowloris,
// graceful stop. The independent clients (AWS CLI, s3cmd, boto3, over TLS) are
// in tests/integration/test_relay_clients.sh.
#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "relay/keys.h"
#include "relay/relay.h"
#include "relay/request.h"
#include "store/sigv4.h"
#include "store/store.h"
#include "store/versions.h"
#include "check_relay_harness.h"
#include "check_tmp.h"

// A relay with the three test keys (check_relay_harness.h); cfg's cache 64 MiB unless set,
// the spool the relay's default.
static void relay_start_cfg(TestRelay *t, RelayConfig *cfg) {
    if (!cfg->cache_bytes) cfg->cache_bytes = 64 << 20;
    relay_harness_start(t, cfg, "check-relay", "runs/r1/", false);
}

static void relay_start(TestRelay *t) {
    RelayConfig cfg = {0};
    relay_start_cfg(t, &cfg);
}

static Store *client(TestRelay *t, const char *ak, const char *sk) {
    StoreOptions o = {.endpoint = t->endpoint, .access_key = ak, .secret_key = sk, .retry_seconds = 2,
                      .region = "us-east-1"};
    Store *st = NULL;
    PailErr err = {0};
    ck_assert_msg(store_open(&st, "s3://pail", &o, &err) == 0, "store_open: %s", err.msg);
    return st;
}

static bool file_exists(TestRelay *t, const char *key) {
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", t->root, key);
    struct stat sb;
    return stat(p, &sb) == 0;
}

// ---- raw signed requests with libcurl ----

typedef struct {
    long status;
    Buf body;
    char headers[4096];
} Raw;

static size_t raw_write(char *p, size_t s, size_t n, void *arg) {
    buf_append(&((Raw *)arg)->body, p, s * n);
    return s * n;
}

static size_t raw_header(char *p, size_t s, size_t n, void *arg) {
    Raw *r = arg;
    size_t l = strlen(r->headers);
    if (l + s * n < sizeof r->headers) {
        memcpy(r->headers + l, p, s * n);
        r->headers[l + s * n] = 0;
    }
    return s * n;
}

// Sends method path (already encoded, with query) signed as (ak, sk) at time
// `when`, with body `sent` while the signature covers `signed_body`.
static void raw_req(TestRelay *t, const char *method, const char *path, const char *ak, const char *sk, int64_t when,
                    const char *signed_body, const char *sent, Raw *out) {
    memset(out, 0, sizeof *out);
    char url[2200], host[64], amz[17], hash[65];
    snprintf(url, sizeof url, "%s%s", t->endpoint, path);
    snprintf(host, sizeof host, "127.0.0.1:%d", t->port);
    sigv4_amz_date(amz, when);
    sha256_hex(signed_body ? signed_body : "", signed_body ? strlen(signed_body) : 0, hash);
    struct curl_slist *hl = NULL;
    char line[2300];
    if (ak) {
        const char *qm = strchr(path, '?');
        char rawpath[2048];
        snprintf(rawpath, sizeof rawpath, "%.*s", (int)(qm ? qm - path : (long)strlen(path)), path);
        Buf dec = {0};
        sigv4_uri_decode(&dec, rawpath, strlen(rawpath));
        SigV4Header h[] = {{"host", host}, {"x-amz-date", amz}, {"x-amz-content-sha256", hash}};
        SigV4Request sr = {.method = method, .path = dec.data ? (char *)dec.data : "/", .query = qm ? qm + 1 : NULL,
                           .headers = h, .nheaders = 3, .payload_hash = hash};
        char sig[65];
        Buf authz = {0};
        PailErr err = {0};
        ck_assert_int_eq(sigv4_sign(&sr, ak, sk, amz, "us-east-1", "s3", sig, &authz, &err), 0);
        snprintf(line, sizeof line, "Authorization: %s", (char *)authz.data);
        hl = curl_slist_append(hl, line);
        buf_free(&authz);
        buf_free(&dec);
    }
    snprintf(line, sizeof line, "x-amz-date: %s", amz);
    hl = curl_slist_append(hl, line);
    snprintf(line, sizeof line, "x-amz-content-sha256: %s", hash);
    hl = curl_slist_append(hl, line);
    hl = curl_slist_append(hl, "Expect:");
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (sent) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, sent);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(sent));
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, raw_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, raw_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    CURLcode cc = curl_easy_perform(c);
    ck_assert_msg(cc == CURLE_OK, "curl: %s", curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
}

// A write callback that gives up after 1 MiB: curl then drops the connection mid-body.
static size_t abort_after_1m(char *p, size_t s, size_t n, void *arg) {
    (void)p;
    size_t *got = arg;
    *got += s * n;
    return *got > (1u << 20) ? 0 : s * n;
}

static void expect_s3_error(const Raw *r, long status, const char *code) {
    char want[96];
    snprintf(want, sizeof want, "<Code>%s</Code>", code);
    ck_assert_msg(r->status == status && r->body.data && strstr((char *)r->body.data, want),
                  "want %ld %s, got %ld: %s", status, code, r->status, r->body.data ? (char *)r->body.data : "");
    ck_assert_msg(strstr(r->headers, "x-pail-relay: 1"), "no x-pail-relay header: %s", r->headers);
}

// ---- core ----

START_TEST(test_put_get_list_meta) {
    TestRelay t;
    relay_start(&t);
    Store *st = client(&t, OP_ID, OP_SECRET);
    PailErr err = {0};
    StoreMeta m = {"pail-sha256", "abc"};
    StorePutOpts po = {.nmeta = 1, .meta = &m};
    ck_assert_msg(store_put(st, "runs/r1/trainer/progress.json", "{\"step\":1}", 10, &po, &err) == 0, "%s", err.msg);
    ck_assert(store_is_relay(st));
    Buf b = {0};
    StoreStat ss;
    StoreGetOpts go = {.range_end = -1};
    ck_assert_msg(store_get(st, "runs/r1/trainer/progress.json", &b, &go, &ss, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.len, 10);
    ck_assert_str_eq(store_stat_meta(&ss, "pail-sha256"), "abc");
    // Range and conditional GET.
    buf_reset(&b);
    go = (StoreGetOpts){.range_start = 2, .range_end = 5};
    ck_assert_int_eq(store_get(st, "runs/r1/trainer/progress.json", &b, &go, NULL, &err), 0);
    ck_assert_int_eq(b.len, 4);
    ck_assert(!memcmp(b.data, "step", 4));
    go = (StoreGetOpts){.range_end = -1, .if_none_match = ss.etag};
    ck_assert_int_eq(store_get(st, "runs/r1/trainer/progress.json", &b, &go, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_NOT_MODIFIED);
    // Create-only.
    po.create_only = true;
    ck_assert_int_eq(store_put(st, "runs/r1/trainer/progress.json", "x", 1, &po, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_EXISTS);
    // Listing with pagination and delimiter.
    for (int i = 0; i < 7; i++) {
        char k[64];
        snprintf(k, sizeof k, "runs/r1/metrics/step-%08d.json", i);
        ck_assert_int_eq(store_put(st, k, "{}", 2, NULL, &err), 0);
    }
    StoreList l = {0};
    ck_assert_int_eq(store_list_all(st, "runs/r1/metrics/", NULL, &l, &err), 0);
    ck_assert_int_eq(l.n, 7);
    StoreListOpts lo = {.prefix = "runs/r1/", .delimiter = "/", .max_keys = 1};
    ck_assert_int_eq(store_list(st, &lo, &l, &err), 0);
    ck_assert_int_eq(l.n + l.nprefixes, 1);
    ck_assert(l.truncated);
    lo = (StoreListOpts){.prefix = "runs/r1/metrics/", .start_after = "runs/r1/metrics/step-00000004.json"};
    ck_assert_int_eq(store_list(st, &lo, &l, &err), 0);
    ck_assert_int_eq(l.n, 2);
    // Delete (operator) and a big object that streams in chunks.
    ck_assert_int_eq(store_delete(st, "runs/r1/metrics/step-00000000.json", &err), 0);
    ck_assert(!file_exists(&t, "runs/r1/metrics/step-00000000.json"));
    size_t big = 20u << 20;
    uint8_t *data = malloc(big);
    for (size_t i = 0; i < big; i++) data[i] = (uint8_t)(i * 2654435761u >> 13);
    ck_assert_int_eq(store_put(st, "runs/r1/trainer/blob.bin", data, big, NULL, &err), 0);
    buf_reset(&b);
    go = (StoreGetOpts){.range_end = -1};
    ck_assert_msg(store_get(st, "runs/r1/trainer/blob.bin", &b, &go, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.len, big);
    ck_assert(!memcmp(b.data, data, big));
    free(data);
    store_list_free(&l);
    buf_free(&b);
    store_close(st);
    relay_end(&t);
}
END_TEST

struct ReaderArg {
    TestRelay *t;
    const char *key;
    int ok;
};
static void *reader(void *arg) {
    struct ReaderArg *a = arg;
    Store *st = client(a->t, RO_ID, RO_SECRET);
    Buf b = {0};
    PailErr err = {0};
    a->ok = versioned_get(st, a->key, &b, &err) == 0 && b.len == (3u << 20);
    buf_free(&b);
    store_close(st);
    return NULL;
}

START_TEST(test_versioned_and_collapse) {
    TestRelay t;
    relay_start(&t);
    Store *st = client(&t, TR_ID, TR_SECRET);
    PailErr err = {0};
    size_t n = 3u << 20;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 7);
    char key[64];
    version_key(&SERIES_ADAPTERS, 3, key, sizeof key);
    char full[128];
    snprintf(full, sizeof full, "runs/r1/%s", key);
    ck_assert_msg(versioned_put(st, full, data, n, &err) == 0, "%s", err.msg);
    RelayStats s0, s1;
    relay_stats(t.relay, &s0);
    // Twelve readers at once: one backend GET, the rest from the collapse or the cache.
    enum { N = 12 };
    pthread_t th[N];
    struct ReaderArg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (struct ReaderArg){&t, full, 0};
        pthread_create(&th[i], NULL, reader, &args[i]);
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
    }
    ck_assert_int_eq(ok, N);
    relay_stats(t.relay, &s1);
    ck_assert_msg(s1.backend_gets - s0.backend_gets == 1, "%ld backend GETs for %d readers",
                  s1.backend_gets - s0.backend_gets, N);
    ck_assert_uint_ge(s1.cache_used, n);
    free(data);
    store_close(st);
    relay_end(&t);
}
END_TEST

typedef struct {
    TestRelay *t;
    double timeout;
    long got;
    int rc;
    double waited_ms;
    int64_t woke_ms;
    volatile sig_atomic_t stop;
} WaitArg;

static void *waiter(void *arg) {
    WaitArg *w = arg;
    Store *st = client(w->t, RO_ID, RO_SECRET);
    PailErr err = {0};
    // One probe request so the client has seen x-pail-relay: 1 and long-polls.
    StoreStat ss;
    store_head(st, "runs/r1/run.json", &ss, &err);
    int64_t t0 = time_mono_ms();
    VersionSeries s = {"runs/r1/adapters/v", ".h5"};
    w->rc = versions_wait_newer(st, &s, 0, w->timeout, &w->stop, &w->got, &err);
    w->woke_ms = time_mono_ms();
    w->waited_ms = (double)(w->woke_ms - t0);
    store_close(st);
    return NULL;
}

START_TEST(test_longpoll_wake_and_deadline) {
    TestRelay t;
    RelayConfig cfg = {.poll_interval_s = 30};  // wake-ups must come from the PUT, not the timer
    relay_start_cfg(&t, &cfg);
    Store *st = client(&t, TR_ID, TR_SECRET);
    PailErr err = {0};
    enum { N = 8 };
    WaitArg w[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        w[i] = (WaitArg){.t = &t, .timeout = 10};
        pthread_create(&th[i], NULL, waiter, &w[i]);
    }
    for (int i = 0; i < 100; i++) {  // all parked
        RelayStats s;
        relay_stats(t.relay, &s);
        if (s.waiters == N) break;
        time_sleep_ms(20);
    }
    RelayStats s;
    relay_stats(t.relay, &s);
    ck_assert_int_eq(s.waiters, N);
    int64_t t_pub = time_mono_ms();
    ck_assert_int_eq(versioned_put(st, "runs/r1/adapters/v00000001.h5", "A", 1, &err), 0);
    int64_t t_done = time_mono_ms();
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(w[i].rc == 0 && w[i].got == 1, "waiter %d: rc %d got %ld", i, w[i].rc, w[i].got);
        ck_assert_msg(w[i].woke_ms - t_done < 1000, "waiter %d woke %lld ms after the publish", i,
                      (long long)(w[i].woke_ms - t_done));
    }
    (void)t_pub;
    // Deadline: nothing newer than 1 appears; a 2 s wait returns a timeout after ~2 s.
    WaitArg d = {.t = &t, .timeout = 2};
    VersionSeries vs = {"runs/r1/adapters/v", ".h5"};
    Store *ro = client(&t, RO_ID, RO_SECRET);
    StoreStat ss;
    store_head(ro, "runs/r1/run.json", &ss, &err);
    int64_t t0 = time_mono_ms();
    d.rc = versions_wait_newer(ro, &vs, 1, 2.0, NULL, &d.got, &err);
    int64_t dt = time_mono_ms() - t0;
    ck_assert_int_eq(d.rc, -1);
    ck_assert_int_eq(err.code, PAIL_ERR_TIMEOUT);
    ck_assert_msg(dt >= 1500 && dt < 4000, "deadline after %lld ms", (long long)dt);
    store_close(ro);
    store_close(st);
    relay_end(&t);
}
END_TEST

START_TEST(test_longpoll_bypass_write) {
    // A writer that bypasses the relay (straight into --root) is seen by the periodic re-list.
    TestRelay t;
    RelayConfig cfg = {.poll_interval_s = 0.2};
    relay_start_cfg(&t, &cfg);
    WaitArg w = {.t = &t, .timeout = 10};
    pthread_t th;
    pthread_create(&th, NULL, waiter, &w);
    time_sleep_ms(300);
    char url[400];
    snprintf(url, sizeof url, "file://%s", t.root);
    Store *fs = NULL;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&fs, url, NULL, &err), 0);
    ck_assert_int_eq(versioned_put(fs, "runs/r1/adapters/v00000004.h5", "B", 1, &err), 0);
    int64_t t_put = time_mono_ms();
    pthread_join(th, NULL);
    ck_assert_int_eq(w.rc, 0);
    ck_assert_int_eq(w.got, 4);
    ck_assert_msg(w.woke_ms - t_put < 1500, "woke %lld ms after the bypass write", (long long)(w.woke_ms - t_put));
    store_close(fs);
    relay_end(&t);
}
END_TEST

START_TEST(test_roles) {
    TestRelay t;
    relay_start(&t);
    PailErr err = {0};
    Store *ro = client(&t, RO_ID, RO_SECRET), *tr = client(&t, TR_ID, TR_SECRET);
    // A worker that tries to write an adapter: 403, nothing written.
    ck_assert_int_eq(store_put(ro, "runs/r1/adapters/v00000001.h5", "x", 1, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_AUTH);
    ck_assert(!file_exists(&t, "runs/r1/adapters/v00000001.h5"));
    ck_assert_int_eq(store_put(ro, "runs/r1/rollouts/v00000001/w1-000001.h5", "x", 1, NULL, &err), 0);
    ck_assert_int_eq(store_put(tr, "runs/r1/rollouts/v00000001/w1-000002.h5", "x", 1, NULL, &err), -1);
    ck_assert_int_eq(store_put(tr, "runs/r1/control/stop", "x", 1, NULL, &err), -1);
    ck_assert_int_eq(store_put(tr, "runs/r1/run.json", "{}", 2, NULL, &err), 0);
    // Outside the key's run prefix: no read, no write, no list.
    Buf b = {0};
    StoreGetOpts go = {.range_end = -1};
    ck_assert_int_eq(store_put(tr, "runs/r2/run.json", "{}", 2, NULL, &err), -1);
    ck_assert_int_eq(store_get(tr, "runs/r2/run.json", &b, &go, NULL, &err), -1);
    ck_assert_int_eq(err.code, PAIL_ERR_AUTH);
    StoreList l = {0};
    StoreListOpts lo = {.prefix = "runs/"};
    ck_assert_int_eq(store_list(tr, &lo, &l, &err), -1);
    // Only the operator deletes.
    ck_assert_int_eq(store_delete(tr, "runs/r1/run.json", &err), -1);
    ck_assert(file_exists(&t, "runs/r1/run.json"));
    Store *op = client(&t, OP_ID, OP_SECRET);
    ck_assert_int_eq(store_delete(op, "runs/r1/run.json", &err), 0);
    ck_assert(!file_exists(&t, "runs/r1/run.json"));
    ck_assert_int_eq(store_put(op, "runs/r9/control/stop", "1", 1, NULL, &err), 0);
    store_list_free(&l);
    buf_free(&b);
    store_close(op);
    store_close(ro);
    store_close(tr);
    relay_end(&t);
}
END_TEST

// ---- limits ----

START_TEST(test_rejections) {
    TestRelay t;
    relay_start(&t);
    Raw r;
    int64_t now = time_unix_s();
    raw_req(&t, "GET", "/-/health", NULL, NULL, now, NULL, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert(strstr(r.headers, "x-pail-relay: 1"));
    buf_free(&r.body);
    raw_req(&t, "PUT", "/pail/runs/r1/trainer/progress.json", NULL, NULL, now, NULL, "data", &r);
    expect_s3_error(&r, 403, "AccessDenied");
    buf_free(&r.body);
    raw_req(&t, "PUT", "/pail/runs/r1/trainer/progress.json", TR_ID, "not-the-secret-0123456", now, "data", "data", &r);
    expect_s3_error(&r, 403, "SignatureDoesNotMatch");
    buf_free(&r.body);
    raw_req(&t, "PUT", "/pail/runs/r1/trainer/progress.json", "nobody", TR_SECRET, now, "data", "data", &r);
    expect_s3_error(&r, 403, "InvalidAccessKeyId");
    buf_free(&r.body);
    raw_req(&t, "PUT", "/pail/runs/r1/trainer/progress.json", TR_ID, TR_SECRET, now - 16 * 60, "data", "data", &r);
    expect_s3_error(&r, 403, "RequestTimeTooSkewed");
    buf_free(&r.body);
    raw_req(&t, "PUT", "/pail/runs/r1/trainer/progress.json", TR_ID, TR_SECRET, now, "data", "DATA", &r);
    expect_s3_error(&r, 400, "XAmzContentSHA256Mismatch");
    buf_free(&r.body);
    raw_req(&t, "PUT", "/pail/runs/r1/adapters/v00000001.h5", RO_ID, RO_SECRET, now, "data", "data", &r);
    expect_s3_error(&r, 403, "AccessDenied");
    buf_free(&r.body);
    static const char *const bad[] = {"/pail/runs/r1/trainer/%2e%2e/%2e%2e/x", "/pail/runs/r1/trainer/../../x",
                                      "/pail/runs/r1/trainer/a%00b", "/pail/runs/r1/trainer/a%0ab",
                                      "/pail/runs/r1/trainer//x", "/pail/runs/r1/trainer/.pail-meta.x",
                                      "/pail/runs/r1/trainer/a%5cb"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw_req(&t, "PUT", bad[i], OP_ID, OP_SECRET, now, "data", "data", &r);
        ck_assert_msg(r.status == 400 || r.status == 403, "%s: status %ld", bad[i], r.status);
        ck_assert_msg(strstr((char *)r.body.data, "<Code>"), "%s: no S3 error", bad[i]);
        buf_free(&r.body);
    }
    raw_req(&t, "GET", "/other-bucket/x", OP_ID, OP_SECRET, now, NULL, NULL, &r);
    expect_s3_error(&r, 404, "NoSuchBucket");
    buf_free(&r.body);
    raw_req(&t, "GET", "/pail/runs/r1/nothing", OP_ID, OP_SECRET, now, NULL, NULL, &r);
    expect_s3_error(&r, 404, "NoSuchKey");
    buf_free(&r.body);
    // Nothing was written by any rejected request.
    ck_assert(!file_exists(&t, "runs/r1/trainer"));
    ck_assert(!file_exists(&t, "runs/r1/adapters"));
    ck_assert(!file_exists(&t, "x"));
    // The signed one goes through.
    raw_req(&t, "PUT", "/pail/runs/r1/trainer/progress.json", TR_ID, TR_SECRET, now, "data", "data", &r);
    ck_assert_int_eq(r.status, 200);
    buf_free(&r.body);
    ck_assert(file_exists(&t, "runs/r1/trainer/progress.json"));
    relay_end(&t);
}
END_TEST

START_TEST(test_keys_and_policy) {
    RelayKeys k;
    PailErr err = {0};
    const char *good = "# c\n\nAK1 0123456789abcdef trainer runs/a/ # trailing\nAK2 0123456789abcdef reader\n";
    ck_assert_int_eq(relay_keys_parse(&k, good, strlen(good), "k", &err), 0);
    ck_assert_int_eq(k.n, 2);
    ck_assert_str_eq(k.keys[0].prefix, "runs/a");
    ck_assert_int_eq(k.keys[1].role, ROLE_READER);
    relay_keys_free(&k);
    static const char *const bads[] = {"AK 0123456789abcdef wizard\n", "AK short trainer\n", "AK\n",
                                       "AK 0123456789abcdef trainer ../x\n",
                                       "AK 0123456789abcdef trainer runs/a\nAK 0123456789abcdef reader\n",
                                       "A/K 0123456789abcdef trainer\n", "AK 0123456789abcdef trainer a b\n"};
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        ck_assert_msg(relay_keys_parse(&k, bads[i], strlen(bads[i]), "k", &err) == -1, "accepted: %s", bads[i]);
        ck_assert(strstr(err.msg, "k:"));
    }
    ck_assert(relay_policy_allows(ROLE_TRAINER, "runs/a", ACCESS_WRITE, "runs/a/adapters/v00000001.h5", NULL));
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "runs/a", ACCESS_WRITE, "runs/ab/adapters/v00000001.h5", NULL));
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "runs/a", ACCESS_WRITE, "runs/a/rollouts/v1/x.h5", NULL));
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "runs/a", ACCESS_WRITE, "runs/a/adapters/", NULL));
    ck_assert(relay_policy_allows(ROLE_ROLLOUT, "runs/a", ACCESS_WRITE, "runs/a/eval/v00000001.json", NULL));
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "runs/a", ACCESS_WRITE, "runs/a/run.json", NULL));
    ck_assert(relay_policy_allows(ROLE_READER, "runs/a", ACCESS_READ, "runs/a/run.json", NULL));
    ck_assert(!relay_policy_allows(ROLE_READER, "runs/a", ACCESS_WRITE, "runs/a/workers/x.json", NULL));
    ck_assert(!relay_policy_allows(ROLE_READER, "runs/a", ACCESS_READ, "runs/b/run.json", NULL));
    ck_assert(relay_policy_allows(ROLE_OPERATOR, "", ACCESS_WRITE, "x/y/control/stop", NULL));
    ck_assert(relay_policy_allows(ROLE_OPERATOR, "runs", ACCESS_WRITE, "runs/exp1/control/stop", NULL));
    ck_assert(!relay_policy_allows(ROLE_OPERATOR, "runs", ACCESS_WRITE, "runs/exp1/notes.txt", NULL));
    ck_assert(relay_policy_allows(ROLE_OPERATOR, "", ACCESS_DELETE, "anything", NULL));
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "", ACCESS_DELETE, "adapters/v00000001.h5", NULL));
    ck_assert(relay_policy_allows_list("runs/a", "runs/a/adapters/"));
    ck_assert(!relay_policy_allows_list("runs/a", "runs/"));
    ck_assert(!relay_policy_allows_list("runs/a", "runs/ab/"));
}
END_TEST

// Role folders count only directly below a writer's run prefix, and trainer and
// rollout keys must have one: an un-prefixed rollout key once matched eval/ at
// any depth, so it could write another run's adapters.
START_TEST(test_role_folders_anchored) {
    const char *why = NULL;
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "", ACCESS_WRITE, "runs/eval/exp1/adapters/v00000001.h5", &why));
    ck_assert_msg(strstr(why, "prefix"), "%s", why);
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "", ACCESS_WRITE, "runs/workers/exp2/run.json", NULL));
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "", ACCESS_WRITE, "runs/metrics/exp4/control/stop", NULL));
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "", ACCESS_WRITE, "rollouts/v00000001/w-000001.h5", NULL));
    // The probe's keys with a run prefix: below the run root only.
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "runs/eval", ACCESS_WRITE, "runs/eval/exp1/adapters/v00000001.h5",
                                   NULL));
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "runs/workers", ACCESS_WRITE, "runs/workers/exp2/run.json", NULL));
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "runs/metrics", ACCESS_WRITE, "runs/metrics/exp4/control/stop",
                                   NULL));
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "runs/a", ACCESS_WRITE, "runs/a/x/eval/v00000001.json", NULL));
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "runs/a", ACCESS_WRITE, "runs/a/eval/samples/v1.jsonl", NULL));
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "runs/a", ACCESS_WRITE, "runs/a/eval/samples/v00000001.json", NULL));
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "runs/a", ACCESS_WRITE, "runs/a/x/run.json", NULL));
    // Every file of the run layout (doc/protocol.md) for its own role.
    static const char *const trainer[] = {"run.json", "adapters/v00000001.h5", "adapters/LATEST",
                                          "trainer/state-v00000001.h5", "trainer/progress.json",
                                          "trainer/rejected/rollouts/v00000001/w-000001.h5.json",
                                          "metrics/step-00000001.json"};
    static const char *const rollout[] = {"rollouts/v00000001/w-000001.h5", "workers/w.json", "eval/v00000001.json",
                                          "eval/samples/v00000001.jsonl"};
    char key[256];
    for (size_t i = 0; i < sizeof trainer / sizeof *trainer; i++) {
        snprintf(key, sizeof key, "runs/exp1/%s", trainer[i]);
        ck_assert_msg(relay_policy_allows(ROLE_TRAINER, "runs/exp1", ACCESS_WRITE, key, NULL), "%s", key);
        ck_assert_msg(!relay_policy_allows(ROLE_ROLLOUT, "runs/exp1", ACCESS_WRITE, key, NULL), "%s", key);
        ck_assert_msg(relay_policy_allows(ROLE_OPERATOR, "", ACCESS_WRITE, key, NULL), "%s", key);
    }
    for (size_t i = 0; i < sizeof rollout / sizeof *rollout; i++) {
        snprintf(key, sizeof key, "runs/exp1/%s", rollout[i]);
        ck_assert_msg(relay_policy_allows(ROLE_ROLLOUT, "runs/exp1", ACCESS_WRITE, key, NULL), "%s", key);
        ck_assert_msg(!relay_policy_allows(ROLE_TRAINER, "runs/exp1", ACCESS_WRITE, key, NULL), "%s", key);
        ck_assert_msg(relay_policy_allows(ROLE_OPERATOR, "runs", ACCESS_WRITE, key, NULL), "%s", key);
    }
    ck_assert(!relay_policy_allows(ROLE_TRAINER, "runs/exp1", ACCESS_WRITE, "runs/exp1/control/stop", NULL));
    ck_assert(!relay_policy_allows(ROLE_ROLLOUT, "runs/exp1", ACCESS_WRITE, "runs/exp1/control/stop", NULL));
    ck_assert(relay_policy_allows(ROLE_OPERATOR, "runs/exp1", ACCESS_WRITE, "runs/exp1/control/stop", NULL));

    // At load: a trainer or rollout key without a prefix is refused, naming the
    // key and what to add; operator and reader keys may serve the whole bucket.
    RelayKeys k;
    PailErr err = {0};
    static const char *const roles[] = {"trainer", "rollout"};
    char text[256];
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof text, "ops 0123456789abcdef operator\nexp1-%s 0123456789abcdef %s\n", roles[i],
                 roles[i]);
        ck_assert_int_eq(relay_keys_parse(&k, text, strlen(text), "keys.txt", &err), -1);
        ck_assert_msg(strstr(err.msg, "keys.txt:2:") && strstr(err.msg, "exp1-") && strstr(err.msg, roles[i]) &&
                          strstr(err.msg, "run prefix") && !strchr(err.msg, '\n'),
                      "%s", err.msg);
    }
    const char *ok = "ops 0123456789abcdef operator\nall 0123456789abcdef reader\n"
                     "t1 0123456789abcdef trainer runs/exp1\nr1 0123456789abcdef rollout runs/exp1\n"
                     "o1 0123456789abcdef operator runs\nd1 0123456789abcdef reader runs\n"
                     "t2 0123456789abcdef trainer runs/exp10\nt3 0123456789abcdef trainer runs/exp1-b\n"
                     "m1 0123456789abcdef reader runs/exp1/metrics\no2 0123456789abcdef operator runs/exp1/x\n";
    ck_assert_msg(relay_keys_parse(&k, ok, strlen(ok), "keys.txt", &err) == 0, "%s", err.msg);
    relay_keys_free(&k);
    // A run does not hold another run: a rollout key for runs/exp1 would own
    // the eval/ run's adapters below it.
    static const char *const nested[] = {"r 0123456789abcdef rollout runs/exp1\nt 0123456789abcdef trainer "
                                         "runs/exp1/eval\n",
                                         "t 0123456789abcdef rollout runs/exp1/eval/x\nr 0123456789abcdef trainer "
                                         "runs/exp1\n"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(relay_keys_parse(&k, nested[i], strlen(nested[i]), "keys.txt", &err), -1);
        ck_assert_msg(strstr(err.msg, "keys.txt:") && strstr(err.msg, "runs/exp1") && strstr(err.msg, "inside"), "%s",
                      err.msg);
    }

    // Through the relay: the probe's writes are 403 and write nothing; a relay
    // with an un-prefixed rollout key does not start.
    TestRelay t;
    relay_start(&t);
    Raw r;
    int64_t now = time_unix_s();
    static const struct { const char *path, *ak, *sk; } probe[] = {
        {"/pail/runs/eval/exp1/adapters/v00000001.h5", RO_ID, RO_SECRET},
        {"/pail/runs/workers/exp2/run.json", RO_ID, RO_SECRET},
        {"/pail/runs/metrics/exp4/control/stop", TR_ID, TR_SECRET},
        {"/pail/runs/r1/eval/exp1/adapters/v00000001.h5", TR_ID, TR_SECRET},
        {"/pail/runs/r1/x/eval/v00000001.json", RO_ID, RO_SECRET},
    };
    for (size_t i = 0; i < sizeof probe / sizeof *probe; i++) {
        raw_req(&t, "PUT", probe[i].path, probe[i].ak, probe[i].sk, now, "data", "data", &r);
        ck_assert_msg(r.status == 403, "%s: status %ld", probe[i].path, r.status);
        expect_s3_error(&r, 403, "AccessDenied");
        // The answer says whose key it was and where it may write.
        ck_assert_msg(strstr((char *)r.body.data, probe[i].ak) && strstr((char *)r.body.data, "prefix runs/r1)"),
                      "%s", (char *)r.body.data);
        buf_free(&r.body);
        ck_assert_msg(!file_exists(&t, probe[i].path + 6), "%s written", probe[i].path);
    }
    raw_req(&t, "PUT", "/pail/runs/r1/eval/v00000001.json", RO_ID, RO_SECRET, now, "data", "data", &r);
    ck_assert_int_eq(r.status, 200);
    buf_free(&r.body);
    FILE *f = fopen(t.keys, "a");
    fprintf(f, "exp2-rollout 0123456789abcdef rollout\n");
    fclose(f);
    RelayConfig cfg = {.listen = "127.0.0.1:0", .root = t.root, .keys_path = t.keys, .http = true};
    Relay *bad = NULL;
    ck_assert_int_eq(relay_open(&bad, &cfg, &err), -1);
    ck_assert_msg(strstr(err.msg, "exp2-rollout") && strstr(err.msg, "run prefix"), "%s", err.msg);
    // SIGHUP's reload of that file keeps the old keys.
    relay_reload_keys(t.relay);
    raw_req(&t, "PUT", "/pail/runs/r1/eval/v00000002.json", RO_ID, RO_SECRET, now, "data", "data", &r);
    ck_assert_int_eq(r.status, 200);
    buf_free(&r.body);
    relay_end(&t);
}
END_TEST

START_TEST(test_route_parse) {
    RelayRoute r;
    RelayFail f;
    PailErr err = {0};
    ck_assert_int_eq(relay_route_parse("GET", "/pail/a/b%20c", "127.0.0.1:1", "pail", &r, &f, &err), 0);
    ck_assert_int_eq(r.op, OP_GET);
    ck_assert_str_eq(r.key, "a/b c");
    ck_assert_str_eq(r.path, "/pail/a/b c");
    ck_assert_int_eq(relay_route_parse("GET", "/a/b", "pail.localhost:9000", "pail", &r, &f, &err), 0);
    ck_assert_str_eq(r.key, "a/b");
    ck_assert_int_eq(relay_route_parse("GET", "/pail?list-type=2&prefix=a%2F&start-after=a%2Fb&max-keys=5000&x-pail-wait=7",
                                       "h", "pail", &r, &f, &err), 0);
    ck_assert_int_eq(r.op, OP_LIST);
    ck_assert(r.list_v2);
    ck_assert_str_eq(r.prefix, "a/");
    ck_assert_int_eq(r.max_keys, 1000);
    ck_assert_int_eq(r.wait_s, 7);
    ck_assert_int_eq(relay_route_parse("POST", "/pail/k?uploads", "h", "pail", &r, &f, &err), 0);
    ck_assert_int_eq(r.op, OP_MP_CREATE);
    ck_assert_int_eq(relay_route_parse("PUT", "/pail/k?partNumber=3&uploadId=abc", "h", "pail", &r, &f, &err), 0);
    ck_assert_int_eq(r.op, OP_MP_PART);
    ck_assert_int_eq(r.part_number, 3);
    static const char *const bad[] = {"/pail/%2e%2e/x", "/pail/a/%00", "/pail/a%zz", "/pail/a?max-keys=-1",
                                      "/pail/a?partNumber=0&uploadId=x", "pail/a", "/pail/a?x-pail-wait=abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(relay_route_parse("PUT", bad[i], "h", "pail", &r, &f, &err) == -1 && f.status >= 400,
                      "accepted %s", bad[i]);
    ck_assert_int_eq(relay_route_parse("GET", "/pail/a?acl", "h", "pail", &r, &f, &err), -1);
    ck_assert_str_eq(f.code, "NotImplemented");
    ck_assert_int_eq(relay_route_parse("GET", "/pail?versioning", "h", "pail", &r, &f, &err), -1);
    ck_assert_int_eq(relay_route_parse("GET", "/pail/a?x-id=GetObject", "h", "pail", &r, &f, &err), 0);
    ck_assert_int_eq(relay_route_parse("GET", "/nope/a", "h", "pail", &r, &f, &err), -1);
    ck_assert_str_eq(f.code, "NoSuchBucket");
    // Byte by byte: every prefix of a long URI parses or fails cleanly.
    const char *u = "/pail/runs/r1/adapters?list-type=2&prefix=runs%2Fr1%2F&delimiter=%2F&continuation-token=abc";
    char buf[256];
    for (size_t n = 0; n <= strlen(u); n++) {
        memcpy(buf, u, n);
        buf[n] = 0;
        relay_route_parse("GET", buf, "h", "pail", &r, &f, &err);
    }
    // aws-chunked decoding with a CRC32 trailer (botocore's default for PUT over TLS).
    const char *body = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n";
    Buf out = {0};
    ck_assert_msg(relay_aws_chunked_decode((const uint8_t *)body, strlen(body), &out, &f, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(out.len, 5);
    const char *badcrc = "5\r\nhellp\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n";
    ck_assert_int_eq(relay_aws_chunked_decode((const uint8_t *)badcrc, strlen(badcrc), &out, &f, &err), -1);
    ck_assert_str_eq(f.code, "BadDigest");
    const char *trunc = "50\r\nhello";
    ck_assert_int_eq(relay_aws_chunked_decode((const uint8_t *)trunc, strlen(trunc), &out, &f, &err), -1);
    buf_free(&out);
}
END_TEST

START_TEST(test_slowloris_and_stop) {
    TestRelay t;
    RelayConfig cfg = {.header_timeout_s = 1};
    relay_start_cfg(&t, &cfg);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
    int64_t t0 = time_mono_ms();
    char c;
    // Trickle a header one byte every 200 ms: the relay must hang up within ~1 s.
    const char *hdr = "GET /-/health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    ssize_t rn = 1;
    for (size_t i = 0; hdr[i] && time_mono_ms() - t0 < 5000; i++) {
        if (send(s, &hdr[i], 1, MSG_NOSIGNAL) < 0) break;
        struct timeval tv = {0, 200000};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        rn = recv(s, &c, 1, 0);
        if (rn == 0 || (rn < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
    }
    int64_t dt = time_mono_ms() - t0;
    ck_assert_msg(dt < 3000, "slow connection still open after %lld ms", (long long)dt);
    close(s);
    // Graceful stop: a parked long-poll returns (empty) instead of being cut.
    WaitArg w = {.t = &t, .timeout = 20};
    pthread_t th;
    pthread_create(&th, NULL, waiter, &w);
    for (int i = 0; i < 100; i++) {
        RelayStats st;
        relay_stats(t.relay, &st);
        if (st.waiters == 1) break;
        time_sleep_ms(20);
    }
    int64_t t1 = time_mono_ms();
    relay_stop(t.relay);
    pthread_join(t.th, NULL);
    ck_assert_msg(time_mono_ms() - t1 < 2000, "stop took %lld ms", (long long)(time_mono_ms() - t1));
    w.stop = 1;
    pthread_join(th, NULL);
    relay_close(t.relay);
    tmp_remove(t.dir);
}
END_TEST

// GET /-/health on socket s; true when a 200 arrives within ms.
static bool health_within(int s, int ms) {
    const char *req = "GET /-/health HTTP/1.1\r\nHost: x\r\n\r\n";
    if (send(s, req, strlen(req), MSG_NOSIGNAL) < 0) return false;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    ssize_t n = recv(s, buf, sizeof buf - 1, 0);
    if (n <= 0) return false;
    buf[n] = 0;
    return strstr(buf, " 200 ") != NULL;
}

START_TEST(test_client_gone_mid_stream) {
    TestRelay t;
    relay_start(&t);
    Store *st = client(&t, OP_ID, OP_SECRET);
    PailErr err = {0};
    size_t big = 40u << 20;
    uint8_t *data = calloc(1, big);
    ck_assert_int_eq(store_put(st, "runs/r1/trainer/big.bin", data, big, NULL, &err), 0);
    free(data);
    for (int i = 0; i < 3; i++) {  // three clients walk away after 1 MiB
        char url[256], host[64], amz[17];
        snprintf(url, sizeof url, "%s/pail/runs/r1/trainer/big.bin", t.endpoint);
        snprintf(host, sizeof host, "127.0.0.1:%d", t.port);
        sigv4_amz_date(amz, time_unix_s());
        SigV4Header h[] = {{"host", host}, {"x-amz-date", amz}, {"x-amz-content-sha256", SIGV4_EMPTY_SHA256}};
        SigV4Request sr = {.method = "GET", .path = "/pail/runs/r1/trainer/big.bin", .headers = h, .nheaders = 3,
                           .payload_hash = SIGV4_EMPTY_SHA256};
        char sig[65], line[600];
        Buf authz = {0};
        ck_assert_int_eq(sigv4_sign(&sr, OP_ID, OP_SECRET, amz, "us-east-1", "s3", sig, &authz, &err), 0);
        struct curl_slist *hl = NULL;
        snprintf(line, sizeof line, "Authorization: %s", (char *)authz.data);
        hl = curl_slist_append(hl, line);
        snprintf(line, sizeof line, "x-amz-date: %s", amz);
        hl = curl_slist_append(hl, line);
        hl = curl_slist_append(hl, "x-amz-content-sha256: " SIGV4_EMPTY_SHA256);
        size_t got = 0;
        CURL *c = curl_easy_init();
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, abort_after_1m);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
        curl_easy_setopt(c, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t)(4 << 20));
        ck_assert_int_eq(curl_easy_perform(c), CURLE_WRITE_ERROR);
        curl_easy_cleanup(c);
        curl_slist_free_all(hl);
        buf_free(&authz);
    }
    // The relay notices, frees the streams, and stops at once (nothing in flight).
    Buf b = {0};
    StoreGetOpts go = {.range_end = -1};
    ck_assert_int_eq(store_get(st, "runs/r1/trainer/big.bin", &b, &go, NULL, &err), 0);
    ck_assert_int_eq(b.len, big);
    buf_free(&b);
    store_close(st);
    time_sleep_ms(500);
    int64_t t0 = time_mono_ms();
    relay_stop(t.relay);
    pthread_join(t.th, NULL);
    ck_assert_msg(time_mono_ms() - t0 < 2000, "stop waited %lld ms for abandoned streams",
                  (long long)(time_mono_ms() - t0));
    relay_close(t.relay);
    tmp_remove(t.dir);
}
END_TEST

START_TEST(test_connection_cap) {
    TestRelay t;
    RelayConfig cfg = {.max_connections = 4};
    relay_start_cfg(&t, &cfg);
    int idle[4];
    for (int i = 0; i < 4; i++) {
        idle[i] = connect_port(t.port);
        ck_assert(health_within(idle[i], 2000));  // each one is served
    }
    time_sleep_ms(300);
    int extra = connect_port(t.port);  // the kernel accepts it; the relay does not serve it
    ck_assert_msg(!health_within(extra, 800), "a 5th connection was served over --max-connections 4");
    RelayStats st;
    relay_stats(t.relay, &st);
    ck_assert_int_eq(st.connections, 4);
    close(idle[0]);  // below the cap again: the waiting one is accepted and answered
    struct timeval tv = {3, 0};
    setsockopt(extra, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    ssize_t n = recv(extra, buf, sizeof buf - 1, 0);
    ck_assert_msg(n > 0, "the waiting connection was never served");
    buf[n] = 0;
    ck_assert(strstr(buf, " 200 "));
    for (int i = 1; i < 4; i++) close(idle[i]);
    close(extra);
    relay_end(&t);
}
END_TEST

START_TEST(test_open_errors) {
    RelayConfig c = {.listen = "0.0.0.0:0", .root = "/tmp", .keys_path = "/nonexistent", .http = true};
    Relay *r = NULL;
    PailErr err = {0};
    ck_assert_int_eq(relay_open(&r, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "loopback"), "%s", err.msg);
    c.listen = "127.0.0.1:0";
    ck_assert_int_eq(relay_open(&r, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "/nonexistent"), "%s", err.msg);
    c.http = false;
    c.keys_path = NULL;
    ck_assert_int_eq(relay_open(&r, &c, &err), -1);
    c.listen = "127.0.0.1";
    ck_assert_int_eq(relay_open(&r, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "HOST:PORT"), "%s", err.msg);
}
END_TEST

// ---- what an adversarial probe found (keys, folders, uploads) ----

// Keys that are not UTF-8 (or carry control characters) are refused before any
// I/O, as S3 does: such a key in a listing made every LIST of its folder
// unreadable XML, failing the trainer and the workers until it was deleted. A
// file of that name put straight into --root is left out of listings.
START_TEST(test_keys_not_utf8) {
    TestRelay t;
    relay_start(&t);
    Raw r;
    int64_t now = time_unix_s();
    static const char *const bad[] = {"/pail/runs/r1/rollouts/v00000101/%FF%FE.h5",
                                      "/pail/runs/r1/rollouts/v00000101/w%C0%AF-000001.h5",   // overlong '/'
                                      "/pail/runs/r1/rollouts/v00000101/w%ED%A0%80-000001.h5",  // a surrogate
                                      "/pail/runs/r1/rollouts/v00000101/w%E2%82-000001.h5",  // truncated
                                      "/pail/runs/r1/rollouts/v00000101/w%01-000001.h5"};
    const char *who[][2] = {{RO_ID, RO_SECRET}, {OP_ID, OP_SECRET}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        for (int k = 0; k < 2; k++) {
            raw_req(&t, "PUT", bad[i], who[k][0], who[k][1], now, "data", "data", &r);
            expect_s3_error(&r, 400, "InvalidArgument");
            buf_free(&r.body);
        }
    ck_assert(!file_exists(&t, "runs/r1/rollouts"));
    // UTF-8 is fine (for the operator; a rollout key writes shard names only).
    raw_req(&t, "PUT", "/pail/runs/r1/control/%C3%A9t%C3%A9", OP_ID, OP_SECRET, now, "data", "data", &r);
    ck_assert_int_eq(r.status, 200);
    buf_free(&r.body);
    // A bad name put into --root behind the relay's back: listings skip it.
    char p[1400];
    snprintf(p, sizeof p, "%s/runs/r1/rollouts/v00000101", t.root);
    PailErr err = {0};
    ck_assert_int_eq(fs_mkdirs(p, &err), 0);
    snprintf(p, sizeof p, "%s/runs/r1/rollouts/v00000101/\xff\xfe.h5", t.root);
    FILE *f = fopen(p, "w");
    fputs("x", f);
    fclose(f);
    Store *ro = client(&t, RO_ID, RO_SECRET);
    ck_assert_msg(store_put(ro, "runs/r1/rollouts/v00000101/w1-000001.h5", "x", 1, NULL, &err) == 0, "%s", err.msg);
    StoreList l = {0};
    ck_assert_msg(store_list_all(ro, "runs/r1/rollouts/v00000101/", NULL, &l, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(l.n, 1);
    ck_assert_str_eq(l.entries[0].key, "runs/r1/rollouts/v00000101/w1-000001.h5");
    store_list_free(&l);
    store_close(ro);
    relay_end(&t);
}
END_TEST

// Role writes follow the run layout of doc/protocol.md: a rollout key that
// wrote objects named like version folders (rollouts/v00000005) made every
// worker's shard of those versions a 500, retried for an hour. On the file
// store a key that is a folder of another, or the reverse, is a final 409.
START_TEST(test_key_grammar_and_folders) {
    TestRelay t;
    relay_start(&t);
    Raw r;
    int64_t now = time_unix_s();
    static const struct { const char *path, *ak, *sk; } refused[] = {
        {"/pail/runs/r1/rollouts/v00000005", RO_ID, RO_SECRET},
        {"/pail/runs/r1/rollouts/v00000005/", RO_ID, RO_SECRET},
        {"/pail/runs/r1/rollouts/v5/w1-000001.h5", RO_ID, RO_SECRET},
        {"/pail/runs/r1/rollouts/v00000005/w1-1.h5", RO_ID, RO_SECRET},
        {"/pail/runs/r1/rollouts/v00000005/w1-000001.h5/x", RO_ID, RO_SECRET},
        {"/pail/runs/r1/workers/w1.json/x", RO_ID, RO_SECRET},
        {"/pail/runs/r1/workers/w1", RO_ID, RO_SECRET},
        {"/pail/runs/r1/eval/v00000001", RO_ID, RO_SECRET},
        {"/pail/runs/r1/adapters/v00000001", TR_ID, TR_SECRET},
        {"/pail/runs/r1/adapters/notes.txt", TR_ID, TR_SECRET},
        {"/pail/runs/r1/trainer/x", TR_ID, TR_SECRET},
        {"/pail/runs/r1/metrics/step-1.json", TR_ID, TR_SECRET},
        {"/pail/runs/r1/run.json/x", TR_ID, TR_SECRET},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        raw_req(&t, "PUT", refused[i].path, refused[i].ak, refused[i].sk, now, "data", "data", &r);
        ck_assert_msg(r.status == 403 || r.status == 400, "%s: status %ld", refused[i].path, r.status);
        ck_assert_msg(r.status != 403 || strstr((char *)r.body.data, "doc/protocol.md") ||
                          strstr((char *)r.body.data, "directly below"),
                      "%s: %s", refused[i].path, (char *)r.body.data);
        buf_free(&r.body);
        // A multipart upload is held to the same grammar.
        char mp[512];
        snprintf(mp, sizeof mp, "%s?uploads", refused[i].path);
        raw_req(&t, "POST", mp, refused[i].ak, refused[i].sk, now, "", "", &r);
        ck_assert_msg(r.status == 403 || r.status == 400, "%s: status %ld", mp, r.status);
        buf_free(&r.body);
    }
    ck_assert(!file_exists(&t, "runs/r1/rollouts"));
    ck_assert(!file_exists(&t, "runs/r1/adapters"));
    // The layout's own keys go through (doc/protocol.md).
    static const struct { const char *path, *ak, *sk; } layout[] = {
        {"/pail/runs/r1/rollouts/v00000005/w1-000001.h5", RO_ID, RO_SECRET},
        {"/pail/runs/r1/workers/w1.json", RO_ID, RO_SECRET},
        {"/pail/runs/r1/eval/v00000001.json", RO_ID, RO_SECRET},
        {"/pail/runs/r1/run.json", TR_ID, TR_SECRET},
        {"/pail/runs/r1/adapters/v00000001.h5", TR_ID, TR_SECRET},
        {"/pail/runs/r1/adapters/LATEST", TR_ID, TR_SECRET},
        {"/pail/runs/r1/trainer/state-v00000001.h5", TR_ID, TR_SECRET},
        {"/pail/runs/r1/trainer/progress.json", TR_ID, TR_SECRET},
        {"/pail/runs/r1/trainer/rejected/rollouts/v00000005/w1-000001.h5.json", TR_ID, TR_SECRET},
        {"/pail/runs/r1/metrics/step-00000001.json", TR_ID, TR_SECRET},
    };
    for (size_t i = 0; i < sizeof layout / sizeof *layout; i++) {
        raw_req(&t, "PUT", layout[i].path, layout[i].ak, layout[i].sk, now, "data", "data", &r);
        ck_assert_msg(r.status == 200, "%s: status %ld %s", layout[i].path, r.status, (char *)r.body.data);
        buf_free(&r.body);
    }
    // The operator writes anything in the role folders, but on the file store
    // a key cannot be both an object and a folder: 409, final, nothing lost.
    Store *op = client(&t, OP_ID, OP_SECRET);
    PailErr err = {0};
    ck_assert_msg(store_put(op, "runs/r1/rollouts/v00000006", "x", 1, NULL, &err) == 0, "%s", err.msg);
    Store *ro = client(&t, RO_ID, RO_SECRET);
    double t0 = time_mono_s();
    ck_assert_int_eq(store_put(ro, "runs/r1/rollouts/v00000006/w1-000001.h5", "x", 1, NULL, &err), -1);
    ck_assert_msg(err.code == PAIL_ERR_INVALID && strstr(err.msg, "409") && strstr(err.msg, "rollouts/v00000006"),
                  "%s", err.msg);
    ck_assert_msg(time_mono_s() - t0 < 1.5, "the conflict was retried (%.1f s): %s", time_mono_s() - t0, err.msg);
    t0 = time_mono_s();
    ck_assert_int_eq(store_put(op, "runs/r1/rollouts/v00000005", "x", 1, NULL, &err), -1);
    ck_assert_msg(err.code == PAIL_ERR_INVALID && strstr(err.msg, "409"), "%s", err.msg);
    ck_assert_msg(time_mono_s() - t0 < 1.5, "the conflict was retried (%.1f s): %s", time_mono_s() - t0, err.msg);
    StorePutOpts co = {.create_only = true};
    ck_assert_int_eq(store_put(op, "runs/r1/rollouts/v00000005", "x", 1, &co, &err), -1);
    ck_assert_msg(strstr(err.msg, "409"), "%s", err.msg);
    Buf b = {0};
    StoreGetOpts go = {.range_end = -1};
    ck_assert_msg(store_get(ro, "runs/r1/rollouts/v00000005/w1-000001.h5", &b, &go, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.len, 4);
    buf_reset(&b);
    ck_assert_msg(store_get(ro, "runs/r1/rollouts/v00000006", &b, &go, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.len, 1);
    buf_free(&b);
    store_close(ro);
    store_close(op);
    relay_end(&t);
}
END_TEST

// One POST ?uploads signed as (ak, sk); returns the status, the upload id in id.
static long mp_open(TestRelay *t, const char *key, const char *ak, const char *sk, char *id, size_t cap) {
    Raw r;
    char path[512];
    snprintf(path, sizeof path, "/pail/%s?uploads", key);
    raw_req(t, "POST", path, ak, sk, time_unix_s(), "", "", &r);
    id[0] = 0;
    const char *s = r.body.data ? strstr((char *)r.body.data, "<UploadId>") : NULL;
    if (s) snprintf(id, cap, "%.32s", s + 10);
    long st = r.status;
    if (st != 200)
        ck_assert_msg(strstr((char *)r.body.data, "<Code>SlowDown</Code>") && strstr((char *)r.body.data, "--max-uploads"),
                      "%ld: %s", st, (char *)r.body.data);
    buf_free(&r.body);
    return st;
}

// Multipart quotas: a rollout key that opened 1,024 uploads once left the
// trainer unable to publish anything over 16 MiB. Each access key holds at
// most --max-uploads-per-key (64) uploads, and the last --trainer-uploads of
// --max-uploads are the trainer's. A loopback load of 70 uploads.
START_TEST(test_multipart_quota) {
    TestRelay t;
    relay_start(&t);
    char id[64], key[128];
    int ok = 0, refused = 0;
    for (int i = 0; i < 70; i++) {
        snprintf(key, sizeof key, "runs/r1/rollouts/v00000001/w1-%06d.h5", i);
        long st = mp_open(&t, key, RO_ID, RO_SECRET, id, sizeof id);
        st == 200 ? ok++ : refused++;
        ck_assert(st == 200 || st == 503);
    }
    ck_assert_int_eq(ok, 64);
    ck_assert_int_eq(refused, 6);
    // The trainer still publishes a multipart state (parts of 64 KiB).
    setenv("PAIL_S3_PART_BYTES", "65536", 1);
    Store *tr = client(&t, TR_ID, TR_SECRET);
    unsetenv("PAIL_S3_PART_BYTES");
    size_t n = 300000;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 7);
    PailErr err = {0};
    ck_assert_msg(versioned_put(tr, "runs/r1/trainer/state-v00000001.h5", data, n, &err) == 0, "%s", err.msg);
    Buf b = {0};
    ck_assert_msg(versioned_get(tr, "runs/r1/trainer/state-v00000001.h5", &b, &err) == 0, "%s", err.msg);
    ck_assert(b.len == n && !memcmp(b.data, data, n));
    buf_free(&b);
    free(data);
    store_close(tr);
    relay_end(&t);
}
END_TEST

static int spool_entries(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

// The trainer's reserve and the expiry of idle uploads: with 6 uploads in
// all and 2 for trainer keys, a rollout key gets 4, the trainer still
// publishes in parts, and uploads left idle past --upload-expiry are aborted
// with their spool files removed (abandoned parts once filled a 2 MiB spool and
// failed the trainer's parts), after which the rollout key opens uploads again.
START_TEST(test_multipart_reserve_and_expiry) {
    TestRelay t;
    char spool[400];
    RelayConfig cfg = {.max_uploads = 6, .trainer_uploads = 2, .max_uploads_per_key = 8, .upload_expiry_s = 1.5};
    tmp_make(spool, sizeof spool, "check-relay-spool");
    cfg.spool = spool;
    relay_start_cfg(&t, &cfg);
    char id[64], key[128], path[256];
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof key, "runs/r1/rollouts/v00000001/w1-%06d.h5", i);
        if (mp_open(&t, key, RO_ID, RO_SECRET, id, sizeof id) != 200) continue;
        ok++;
        Raw r;
        snprintf(path, sizeof path, "/pail/%s?partNumber=1&uploadId=%s", key, id);
        char part[4097];
        memset(part, 'p', 4096);
        part[4096] = 0;
        raw_req(&t, "PUT", path, RO_ID, RO_SECRET, time_unix_s(), part, part, &r);
        ck_assert_int_eq(r.status, 200);
        buf_free(&r.body);
    }
    ck_assert_int_eq(ok, 4);
    ck_assert_int_eq(spool_entries(spool), 4);
    setenv("PAIL_S3_PART_BYTES", "65536", 1);
    Store *tr = client(&t, TR_ID, TR_SECRET);
    unsetenv("PAIL_S3_PART_BYTES");
    size_t n = 200000;
    uint8_t *data = calloc(1, n);
    PailErr err = {0};
    ck_assert_msg(versioned_put(tr, "runs/r1/adapters/v00000001.h5", data, n, &err) == 0, "%s", err.msg);
    free(data);
    store_close(tr);
    // Idle past the expiry: aborted, spool reclaimed, the part's upload is gone.
    for (int i = 0; i < 40 && spool_entries(spool) > 0; i++) time_sleep_ms(100);
    ck_assert_int_eq(spool_entries(spool), 0);
    Raw r;
    raw_req(&t, "PUT", path, RO_ID, RO_SECRET, time_unix_s(), "x", "x", &r);
    expect_s3_error(&r, 404, "NoSuchUpload");
    buf_free(&r.body);
    ck_assert_int_eq(mp_open(&t, "runs/r1/rollouts/v00000001/w1-000009.h5", RO_ID, RO_SECRET, id, sizeof id), 200);
    relay_end(&t);
    tmp_remove(spool);
}
END_TEST

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("relay");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_put_get_list_meta);
    tcase_add_test(core, test_versioned_and_collapse);
    tcase_add_test(core, test_longpoll_wake_and_deadline);
    tcase_add_test(core, test_longpoll_bypass_write);
    tcase_add_test(core, test_roles);
    tcase_set_timeout(core, 60);
    suite_add_tcase(s, core);
    TCase *lim = tcase_create("limits");
    tcase_add_test(lim, test_rejections);
    tcase_add_test(lim, test_keys_and_policy);
    tcase_add_test(lim, test_role_folders_anchored);
    tcase_add_test(lim, test_route_parse);
    tcase_add_test(lim, test_slowloris_and_stop);
    tcase_add_test(lim, test_open_errors);
    tcase_add_test(lim, test_connection_cap);
    tcase_add_test(lim, test_client_gone_mid_stream);
    tcase_add_test(lim, test_keys_not_utf8);
    tcase_add_test(lim, test_key_grammar_and_folders);
    tcase_add_test(lim, test_multipart_quota);
    tcase_add_test(lim, test_multipart_reserve_and_expiry);
    tcase_set_timeout(lim, 60);
    suite_add_tcase(s, lim);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
