// Check suite for grpo-relay's request bodies (src/relay/front.c, spool.c): a
// body is authenticated from its head before a byte of it is read, streams to
// the spool (hashed on the way; a wrong x-amz-content-sha256 stores nothing),
// counts against the spool's byte quotas (per key, in all, the trainer's share
// reserved), multipart uploads end at --upload-lifetime however active, and a
// slow body passes while a stalled one is cut (--min-body-rate over
// --body-window; --header-timeout covers the head only). The relay runs
// in-process on loopback (plain HTTP); requests are raw sockets, so the test
// decides exactly which bytes were sent when. The 16 x 60 MiB TLS attack and
// the relay's resident memory are in tests/integration/test_relay_hostile.sh.
#define _GNU_SOURCE  // strcasestr
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/sha256.h"
#include "core/timeutil.h"
#include "relay/relay.h"
#include "store/sigv4.h"
#include "store/store.h"
#include "store/versions.h"
#include "check_relay_harness.h"
#include "check_tmp.h"

// A relay with the three test keys and its spool in t->spool (check_relay_harness.h).
static void relay_start(TestRelay *t, RelayConfig *cfg) { relay_harness_start(t, cfg, "check-relay-body", "runs/r1", true); }

// A request head for `method path` with Content-Length len, signed as (ak, sk)
// over payload_hash (ak NULL: unsigned).
static void head(const TestRelay *t, char *out, size_t cap, const char *method, const char *path, const char *ak,
                 const char *sk, const char *payload_hash, uint64_t len) {
    char host[64], amz[17], authz_line[1200] = "";
    snprintf(host, sizeof host, "127.0.0.1:%d", t->port);
    sigv4_amz_date(amz, time_unix_s());
    if (ak) {
        const char *qm = strchr(path, '?');
        char p[1024];
        snprintf(p, sizeof p, "%.*s", (int)(qm ? qm - path : (long)strlen(path)), path);
        SigV4Header h[] = {{"host", host}, {"x-amz-date", amz}, {"x-amz-content-sha256", payload_hash}};
        SigV4Request sr = {.method = method, .path = p, .query = qm ? qm + 1 : NULL, .headers = h, .nheaders = 3, .payload_hash = payload_hash};
        char sig[65];
        Buf authz = {0};
        PailErr err = {0};
        ck_assert_int_eq(sigv4_sign(&sr, ak, sk, amz, "us-east-1", "s3", sig, &authz, &err), 0);
        snprintf(authz_line, sizeof authz_line, "Authorization: %s\r\n", (char *)authz.data);
        buf_free(&authz);
    }
    snprintf(out, cap, "%s %s HTTP/1.1\r\nHost: %s\r\n%sx-amz-date: %s\r\nx-amz-content-sha256: %s\r\n"
                       "Content-Length: %llu\r\n\r\n",
             method, path, host, authz_line, amz, payload_hash,
             (unsigned long long)len);
}

static bool send_all(int s, const void *p, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t w = send(s, (const char *)p + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) return false;
        off += (size_t)w;
    }
    return true;
}

// Reads one response within ms: its status (0: closed before one, -1: none in
// time); the whole of it in buf.
static int reply(int s, char *buf, size_t cap, int ms) {
    size_t n = 0;
    int64_t end = time_mono_ms() + ms;
    buf[0] = 0;
    for (;;) {
        int64_t left = end - time_mono_ms();
        if (left <= 0) return -1;
        struct timeval tv = {left / 1000, (left % 1000) * 1000};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t r = recv(s, buf + n, cap - 1 - n, 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
        if (r <= 0) return n ? atoi(buf + 9) : 0;
        n += (size_t)r;
        buf[n] = 0;
        const char *e = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "\r\nContent-Length:");
        if (e && !strncmp(buf, "HTTP/1.1 100", 12)) {  // 100 Continue: the answer follows
            memmove(buf, e + 4, n - (size_t)(e + 4 - buf) + 1);
            n -= (size_t)(e + 4 - buf);
            continue;
        }
        if (e && (!cl || cl > e || n >= (size_t)(e + 4 - buf) + (size_t)atol(cl + 17))) return atoi(buf + 9);
        if (n + 1 >= cap) return atoi(buf + 9);
    }
}

static void fill(uint8_t *d, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) d[i] = (uint8_t)((i * 131 + seed * 7) >> 3);
}

// One signed request with a whole body on a fresh connection: its status, the reply in buf.
static int request(TestRelay *t, const char *method, const char *path, const char *ak, const char *sk,
                   const void *body, size_t len, char *buf, size_t cap) {
    char hash[65], h[2048];
    sha256_hex(body ? body : "", len, hash);
    head(t, h, sizeof h, method, path, ak, sk, hash, len);
    int s = connect_port(t->port);
    bool ok = send_all(s, h, strlen(h)) && (!len || send_all(s, body, len));
    int st = ok ? reply(s, buf, cap, 20000) : 0;
    close(s);
    return st;
}

static int spooled_bodies(const char *spool) {
    int n = 0;
    DIR *d = opendir(spool);
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, "body-", 5);
    if (d) closedir(d);
    return n;
}

static bool stored(TestRelay *t, const char *key, const uint8_t *want, size_t n) {
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", t->root, key);
    FILE *f = fopen(p, "rb");
    if (!f) return false;
    uint8_t *got = malloc(n + 1);
    size_t r = fread(got, 1, n + 1, f);
    fclose(f);
    bool same = r == n && !memcmp(got, want, n);
    free(got);
    return same;
}

// An unauthenticated or wrong-role request declaring 64 MiB is answered from
// its head alone, before the client sends a byte of the body (evhttp used to
// buffer the whole body first: 16 such connections took the relay to 1 GiB).
START_TEST(test_auth_before_body) {
    TestRelay t;
    RelayConfig cfg = {0};
    relay_start(&t, &cfg);
    char h[2048], buf[4096];
    const char *cases[][4] = {
        {NULL, NULL, "/pail/runs/r1/trainer/state-v00000001.h5", "AccessDenied"},  // no signature
        {RO_ID, "wrong-secret-0123456789", "/pail/runs/r1/rollouts/v00000001/w-000001.h5", "SignatureDoesNotMatch"},
        {RO_ID, RO_SECRET, "/pail/runs/r1/adapters/v00000001.h5", "AccessDenied"},  // the wrong role
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char hash[65];  // any hash: the body never comes
        sha256_hex("never sent", 10, hash);
        head(&t, h, sizeof h, "PUT", cases[i][2], cases[i][0], cases[i][1], hash, 64u << 20);
        int s = connect_port(t.port);
        ck_assert(send_all(s, h, strlen(h)));
        int st = reply(s, buf, sizeof buf, 3000);
        ck_assert_msg(st == 403 && strstr(buf, cases[i][3]), "case %zu: no answer before the body (%d): %s", i, st,
                      buf);
        ck_assert_msg(strcasestr(buf, "Connection: close"), "case %zu: the connection stays open: %s", i, buf);
        close(s);
    }
    // A signed body streams to the store, hashed on the way.
    size_t n = 3u << 20;
    uint8_t *data = malloc(n);
    fill(data, n, 1);
    ck_assert_int_eq(request(&t, "PUT", "/pail/runs/r1/trainer/progress.json", TR_ID, TR_SECRET, data, n, buf,
                             sizeof buf),
                     200);
    ck_assert(stored(&t, "runs/r1/trainer/progress.json", data, n));
    // Bytes that do not hash to the signed x-amz-content-sha256: refused, nothing stored, nothing left spooled.
    char hash[65], path[] = "/pail/runs/r1/trainer/state-v00000002.h5";
    sha256_hex(data, n, hash);
    head(&t, h, sizeof h, "PUT", path, TR_ID, TR_SECRET, hash, n);
    data[n / 2] ^= 1;
    int s = connect_port(t.port);
    ck_assert(send_all(s, h, strlen(h)) && send_all(s, data, n));
    ck_assert_int_eq(reply(s, buf, sizeof buf, 10000), 400);
    ck_assert_msg(strstr(buf, "XAmzContentSHA256Mismatch"), "%s", buf);
    close(s);
    ck_assert(!stored(&t, "runs/r1/trainer/state-v00000002.h5", data, n));
    ck_assert_int_eq(spooled_bodies(t.spool), 0);
    // A body larger than --max-body-bytes: 400 EntityTooLarge from the head.
    head(&t, h, sizeof h, "PUT", path, TR_ID, TR_SECRET, hash, (64u << 20) + 1);
    s = connect_port(t.port);
    ck_assert(send_all(s, h, strlen(h)));
    ck_assert_int_eq(reply(s, buf, sizeof buf, 3000), 400);
    ck_assert_msg(strstr(buf, "EntityTooLarge"), "%s", buf);
    close(s);
    free(data);
    relay_end(&t);
}
END_TEST

// Pipelined requests (sent in one write, before any answer) are read one after
// another through the front, a spooled PUT among them.
START_TEST(test_pipelined) {
    TestRelay t;
    RelayConfig cfg = {0};
    relay_start(&t, &cfg);
    const char *health = "GET /-/health HTTP/1.1\r\nHost: x\r\n\r\n";
    uint8_t body[20000];
    fill(body, sizeof body, 6);
    char hash[65], put[2048], get[2048], empty[65];
    sha256_hex(body, sizeof body, hash);
    sha256_hex("", 0, empty);
    head(&t, put, sizeof put, "PUT", "/pail/runs/r1/trainer/progress.json", TR_ID, TR_SECRET, hash, sizeof body);
    head(&t, get, sizeof get, "GET", "/pail/runs/r1/trainer/progress.json", TR_ID, TR_SECRET, empty, 0);
    Buf all = {0};
    buf_append(&all, health, strlen(health));
    buf_append(&all, put, strlen(put));
    buf_append(&all, body, sizeof body);
    buf_append(&all, get, strlen(get));
    buf_append(&all, health, strlen(health));
    int s = connect_port(t.port);
    ck_assert(send_all(s, all.data, all.len));
    buf_free(&all);
    // All four answers, in order: health, the PUT, the GET with the body, health.
    static char buf[65536];
    size_t n = 0;
    int answers = 0;
    for (int64_t end = time_mono_ms() + 5000; answers < 4 && time_mono_ms() < end;) {
        struct timeval tv = {0, 200000};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t r = recv(s, buf + n, sizeof buf - 1 - n, 0);
        if (r == 0) break;
        if (r > 0) n += (size_t)r;
        buf[n] = 0;
        answers = 0;  // the GET's body is binary: memmem, not strstr
        for (const char *p = buf; (p = memmem(p, n - (size_t)(p - buf), "HTTP/1.1 200 OK", 15)); p++) answers++;
    }
    close(s);
    ck_assert_msg(answers == 4, "%d of 4 pipelined requests answered", answers);
    const char *g = memmem(buf, n, "Content-Length: 20000", 21);
    ck_assert_msg(g && memmem(buf, (size_t)(g - buf), "\r\n\r\nok\n", 7) && memmem(g, n - (size_t)(g - buf), "\r\n\r\nok\n", 7),
                  "the answers are out of order");
    ck_assert(stored(&t, "runs/r1/trainer/progress.json", body, sizeof body));
    relay_end(&t);
}
END_TEST

// POST ?uploads as (ak, sk): the upload id (empty when refused).
static void mp_open(TestRelay *t, const char *key, const char *ak, const char *sk, char *id, size_t cap) {
    char path[512], buf[4096];
    snprintf(path, sizeof path, "/pail/%s?uploads", key);
    ck_assert_int_eq(request(t, "POST", path, ak, sk, NULL, 0, buf, sizeof buf), 200);
    const char *s = strstr(buf, "<UploadId>");
    ck_assert(s);
    snprintf(id, cap, "%.32s", s + 10);
}

static int mp_part(TestRelay *t, const char *key, const char *id, int pn, const char *ak, const char *sk,
                   const uint8_t *d, size_t n, char *buf, size_t cap) {
    char path[512];
    snprintf(path, sizeof path, "/pail/%s?partNumber=%d&uploadId=%s", key, pn, id);
    return request(t, "PUT", path, ak, sk, d, n, buf, cap);
}

// Spool bytes are bounded: 8 x 8 MiB rollout parts once filled a 64 MiB spool
// and the trainer's next multipart publish got HTTP 500. Scaled down: a 1 MiB
// spool, 512 KiB per key, the last 256 KiB the trainer's, 128 KiB parts.
START_TEST(test_spool_byte_quotas) {
    TestRelay t;
    RelayConfig cfg = {.spool_bytes = 1u << 20, .spool_bytes_per_key = 512u << 10, .trainer_spool_bytes = 256u << 10};
    relay_start(&t, &cfg);
    size_t pn = 128u << 10;
    uint8_t *part = malloc(640u << 10);
    fill(part, 640u << 10, 2);
    char buf[4096], ro[64], op[64];
    const char *rk = "runs/r1/rollouts/v00000001/w1-000001.h5", *ok = "runs/r1/rollouts/v00000001/op-000001.h5";
    mp_open(&t, rk, RO_ID, RO_SECRET, ro, sizeof ro);
    for (int i = 1; i <= 4; i++) ck_assert_int_eq(mp_part(&t, rk, ro, i, RO_ID, RO_SECRET, part, pn, buf, sizeof buf), 200);
    // The key's quota: retry later (503 SlowDown), naming the flag.
    ck_assert_int_eq(mp_part(&t, rk, ro, 5, RO_ID, RO_SECRET, part, pn, buf, sizeof buf), 503);
    ck_assert_msg(strstr(buf, "SlowDown") && strstr(buf, "--spool-bytes-per-key"), "%s", buf);
    // A part that can never fit a key's share: 400, not to be retried.
    ck_assert_int_eq(mp_part(&t, rk, ro, 6, RO_ID, RO_SECRET, part, 640u << 10, buf, sizeof buf), 400);
    ck_assert_msg(strstr(buf, "EntityTooLarge"), "%s", buf);
    // Another non-trainer key takes the rest up to the trainer's reserve.
    mp_open(&t, ok, OP_ID, OP_SECRET, op, sizeof op);
    for (int i = 1; i <= 2; i++) ck_assert_int_eq(mp_part(&t, ok, op, i, OP_ID, OP_SECRET, part, pn, buf, sizeof buf), 200);
    ck_assert_int_eq(mp_part(&t, ok, op, 3, OP_ID, OP_SECRET, part, pn, buf, sizeof buf), 503);
    ck_assert_msg(strstr(buf, "--trainer-spool-bytes"), "%s", buf);
    // The trainer still publishes a multipart state in its reserve.
    setenv("PAIL_S3_PART_BYTES", "65536", 1);
    StoreOptions so = {.endpoint = t.endpoint, .access_key = TR_ID, .secret_key = TR_SECRET, .retry_seconds = 2, .region = "us-east-1"};
    Store *tr = NULL;
    PailErr err = {0};
    ck_assert_msg(store_open(&tr, "s3://pail", &so, &err) == 0, "%s", err.msg);
    unsetenv("PAIL_S3_PART_BYTES");
    size_t n = 200000;
    uint8_t *state = malloc(n);
    fill(state, n, 3);
    ck_assert_msg(versioned_put(tr, "runs/r1/trainer/state-v00000001.h5", state, n, &err) == 0, "%s", err.msg);
    ck_assert(stored(&t, "runs/r1/trainer/state-v00000001.h5", state, n));
    store_close(tr);
    // Aborting an upload gives its bytes back.
    char path[512];
    snprintf(path, sizeof path, "/pail/%s?uploadId=%s", rk, ro);
    ck_assert_int_eq(request(&t, "DELETE", path, RO_ID, RO_SECRET, NULL, 0, buf, sizeof buf), 204);
    mp_open(&t, rk, RO_ID, RO_SECRET, ro, sizeof ro);
    ck_assert_int_eq(mp_part(&t, rk, ro, 1, RO_ID, RO_SECRET, part, pn, buf, sizeof buf), 200);
    ck_assert_int_eq(spooled_bodies(t.spool), 0);
    free(state);
    free(part);
    relay_end(&t);
}
END_TEST

// An upload's lifetime counts from its creation: one part now and then (a
// part every 15 minutes under a 15-minute idle expiry) no longer keeps it, and
// its spool goes with it.
START_TEST(test_upload_lifetime) {
    TestRelay t;
    RelayConfig cfg = {.upload_lifetime_s = 1.2, .upload_expiry_s = 100};
    relay_start(&t, &cfg);
    char id[64], buf[4096];
    uint8_t part[1000];
    fill(part, sizeof part, 4);
    const char *key = "runs/r1/rollouts/v00000001/w1-000002.h5";
    mp_open(&t, key, RO_ID, RO_SECRET, id, sizeof id);
    int64_t t0 = time_mono_ms();
    int st = 200, pn = 1;
    for (; st == 200 && time_mono_ms() - t0 < 5000; pn++) {
        st = mp_part(&t, key, id, pn, RO_ID, RO_SECRET, part, sizeof part, buf, sizeof buf);
        if (st == 200) time_sleep_ms(200);
    }
    int64_t dt = time_mono_ms() - t0;
    ck_assert_msg(st == 404 && strstr(buf, "NoSuchUpload"), "parts kept the upload open %lld ms (%d)", (long long)dt, st);
    ck_assert_msg(dt >= 1000 && dt < 3500, "the upload ended after %lld ms, its lifetime is 1.2 s", (long long)dt);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", t.spool, id);
    struct stat sb;
    for (int i = 0; i < 20 && stat(dir, &sb) == 0; i++) time_sleep_ms(100);
    ck_assert_msg(stat(dir, &sb) < 0, "the expired upload's spool folder is still there");
    relay_end(&t);
}
END_TEST

// The front's own parsing under hostile framing: a request a byte at a time,
// chunked bodies (decoded into the spool, hashed as decoded), malformed chunk
// sizes, Transfer-Encoding where it is not taken, bad and repeated Content-Length.
START_TEST(test_hostile_framing) {
    TestRelay t;
    RelayConfig cfg = {0};
    relay_start(&t, &cfg);
    char h[2048], buf[4096], hash[65];
    uint8_t body[3000];
    fill(body, sizeof body, 7);
    sha256_hex(body, sizeof body, hash);
    // A byte at a time.
    head(&t, h, sizeof h, "PUT", "/pail/runs/r1/trainer/state-v00000001.h5", TR_ID, TR_SECRET, hash, sizeof body);
    int s = connect_port(t.port);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (size_t i = 0; h[i]; i++) ck_assert(send_all(s, &h[i], 1));
    for (size_t i = 0; i < sizeof body; i += 7) ck_assert(send_all(s, body + i, sizeof body - i < 7 ? sizeof body - i : 7));
    ck_assert_int_eq(reply(s, buf, sizeof buf, 5000), 200);
    close(s);
    ck_assert(stored(&t, "runs/r1/trainer/state-v00000001.h5", body, sizeof body));
    // Chunked: Transfer-Encoding instead of Content-Length, sizes in hex, a trailer.
    const char *cases[][3] = {
        {"chunked", "400\r\n", "200"},  // good framing (the sizes below)
        {"chunked", "zz\r\n", "400"},   // not a size
        {"gzip", "400\r\n", "411"},     // a coding the relay does not take
    };
    for (size_t c = 0; c < 3; c++) {
        char path[128];
        snprintf(path, sizeof path, "/pail/runs/r1/trainer/state-v0000001%zu.h5", c);
        head(&t, h, sizeof h, "PUT", path, TR_ID, TR_SECRET, hash, 0);
        char *cl = strstr(h, "Content-Length: 0\r\n");
        ck_assert(cl);
        char te[64];
        snprintf(te, sizeof te, "Transfer-Encoding: %s\r\n", cases[c][0]);
        memmove(cl + strlen(te), cl + 19, strlen(cl + 19) + 1);
        memcpy(cl, te, strlen(te));
        Buf b = {0};
        buf_append(&b, h, strlen(h));
        for (size_t off = 0; off < sizeof body; off += 1024) {
            size_t n = sizeof body - off < 1024 ? sizeof body - off : 1024;
            char sz[32];
            if (n == 1024) snprintf(sz, sizeof sz, "%s", cases[c][1]);
            else snprintf(sz, sizeof sz, "%zx;ext=1\r\n", n);
            buf_append(&b, sz, strlen(sz));
            buf_append(&b, body + off, n);
            buf_append(&b, "\r\n", 2);
        }
        buf_append(&b, "0\r\nx-trailer: 1\r\n\r\n", 19);
        s = connect_port(t.port);
        ck_assert(send_all(s, b.data, b.len));
        buf_free(&b);
        int st = reply(s, buf, sizeof buf, 5000);
        close(s);
        ck_assert_msg(st == atoi(cases[c][2]), "chunked case %zu: %d: %s", c, st, buf);
        ck_assert(stored(&t, path + 6, body, sizeof body) == (c == 0));
    }
    // Content-Length malformed, or twice.
    const char *bad[] = {"Content-Length: 12abc\r\n", "Content-Length: 5\r\nContent-Length: 5\r\n"};
    for (size_t c = 0; c < 2; c++) {
        head(&t, h, sizeof h, "PUT", "/pail/runs/r1/trainer/state-v00000020.h5", TR_ID, TR_SECRET, hash, 0);
        char *cl = strstr(h, "Content-Length: 0\r\n");
        memmove(cl + strlen(bad[c]), cl + 19, strlen(cl + 19) + 1);
        memcpy(cl, bad[c], strlen(bad[c]));
        s = connect_port(t.port);
        ck_assert(send_all(s, h, strlen(h)));
        ck_assert_int_eq(reply(s, buf, sizeof buf, 5000), 400);
        close(s);
    }
    ck_assert_int_eq(spooled_bodies(t.spool), 0);
    relay_end(&t);
}
END_TEST

typedef struct {
    TestRelay *t;
    const char *path;
    const uint8_t *data;
    size_t n, chunk, stop_after;  // bytes per 100 ms; stop sending after this many (n: never)
    int status;                   // 0: the relay closed the connection
    int64_t ms;
} SlowPut;

static void *slow_put(void *arg) {
    SlowPut *p = arg;
    char hash[65], h[2048], buf[4096];
    sha256_hex(p->data, p->n, hash);
    head(p->t, h, sizeof h, "PUT", p->path, TR_ID, TR_SECRET, hash, p->n);
    int s = connect_port(p->t->port);
    int64_t t0 = time_mono_ms();
    bool ok = send_all(s, h, strlen(h));
    for (size_t off = 0; ok && off < p->n && off < p->stop_after; off += p->chunk) {
        size_t len = p->n - off < p->chunk ? p->n - off : p->chunk;
        ok = send_all(s, p->data + off, len);
        time_sleep_ms(100);
    }
    p->status = ok ? reply(s, buf, sizeof buf, 8000) : 0;
    p->ms = time_mono_ms() - t0;
    close(s);
    return NULL;
}

// Slow is not hostile: a client slower than a 16 MiB part per --header-timeout
// could never put one (at 400 KB/s grpo-ctl put of 16 MiB failed 4 times in
// 121 s). Scaled down: the head within 1 s, a body at 64 KiB/s or better over
// each 1 s window. A 640 KiB body at ~320 KiB/s takes 2 s and is stored; one
// that stalls after 64 KiB is cut within a few windows and nothing stays spooled.
START_TEST(test_slow_body_and_stall) {
    TestRelay t;
    RelayConfig cfg = {.header_timeout_s = 1, .min_body_rate = 65536, .body_window_s = 1};
    relay_start(&t, &cfg);
    size_t n = 640u << 10;
    uint8_t *data = malloc(n);
    fill(data, n, 5);
    SlowPut slow = {&t, "/pail/runs/r1/trainer/state-v00000001.h5", data, n, 32u << 10, n, -1, 0};
    SlowPut stall = {&t, "/pail/runs/r1/trainer/state-v00000002.h5", data, n, 32u << 10, 64u << 10, -1, 0};
    pthread_t a, b;
    pthread_create(&a, NULL, slow_put, &slow);
    pthread_create(&b, NULL, slow_put, &stall);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    ck_assert_msg(slow.status == 200, "a 320 KiB/s body was refused or cut after %lld ms (%d)", (long long)slow.ms,
                  slow.status);
    ck_assert_msg(slow.ms > 1500, "the slow body took only %lld ms: not slower than --header-timeout", (long long)slow.ms);
    ck_assert(stored(&t, "runs/r1/trainer/state-v00000001.h5", data, n));
    ck_assert_msg(stall.status == 0 && stall.ms < 6000, "a stalled body: status %d after %lld ms", stall.status,
                  (long long)stall.ms);
    ck_assert(!stored(&t, "runs/r1/trainer/state-v00000002.h5", data, n));
    for (int i = 0; i < 20 && spooled_bodies(t.spool); i++) time_sleep_ms(100);
    ck_assert_int_eq(spooled_bodies(t.spool), 0);
    // The header section is still bounded: a head trickled a byte every 200 ms is cut.
    int s = connect_port(t.port);
    int64_t t0 = time_mono_ms();
    const char *hd = "PUT /pail/runs/r1/trainer/x HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (size_t i = 0; hd[i] && time_mono_ms() - t0 < 5000; i++) {
        if (!send_all(s, &hd[i], 1)) break;
        char c;
        struct timeval tv = {0, 200000};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t r = recv(s, &c, 1, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
    }
    ck_assert_msg(time_mono_ms() - t0 < 3000, "a trickled head was not cut");
    close(s);
    free(data);
    relay_end(&t);
}
END_TEST

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("relay_body");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_auth_before_body);
    tcase_add_test(core, test_spool_byte_quotas);
    tcase_add_test(core, test_pipelined);
    tcase_set_timeout(core, 60);
    suite_add_tcase(s, core);
    TCase *lim = tcase_create("limits");
    tcase_add_test(lim, test_upload_lifetime);
    tcase_add_test(lim, test_slow_body_and_stall);
    tcase_add_test(lim, test_hostile_framing);
    tcase_set_timeout(lim, 60);
    suite_add_tcase(s, lim);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
