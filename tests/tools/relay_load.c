// Load driver for grpo-relay's listing and fairness checks (signed requests
// with libcurl, one blocking connection per thread, over TLS):
//   relay_load populate ROOT RUN NKEYS
//       NKEYS empty shard files ROOT/RUN/rollouts/vNNNNNNNN/wI-SSSSSS.h5, 256 a folder
//   relay_load fair URL CA LIST_AK LIST_SK TR_AK TR_SK RUN CONNS SECONDS MAX_P99_MS
//       CONNS connections LIST RUN/rollouts/ (1000-key pages) in a loop with one
//       key while another key's HEAD and PUT are timed; exit 1 when their p99
//       reaches MAX_P99_MS (tests/integration/test_relay_list.sh)
//   relay_load scale URL CA RO_AK RO_SK TR_AK TR_SK RUN WORKERS SECONDS STEP_S CYCLE_S V0 ADAPTER_BYTES
//       WORKERS simulated rollout workers (a long-poll on adapters/, and each
//       CYCLE_S: a shard PUT, a heartbeat PUT, a stop HEAD, LISTs of adapters/
//       and workers/) and a trainer (each STEP_S: LIST the version's shards, GET
//       some, PUT adapter, LATEST, progress, metrics); prints p50/p99 per
//       request kind and the requests per training step (bench/bench_relay.sh)
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/sha256.h"
#include "core/timeutil.h"
#include "store/sigv4.h"

static const char *g_url, *g_ca;
static atomic_bool g_stop;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

// ---- latencies per request kind ----

enum { K_LIST, K_LONGPOLL, K_PUT_SHARD, K_PUT_SMALL, K_HEAD, K_GET_ADAPTER, K_GET_SHARD, K_TR_LIST, K_TR_PUT, K_TR_HEAD, K_N };
static const char *kind_name[K_N] = {"worker LIST",       "worker long-poll *", "worker PUT shard", "worker PUT small",
                                     "worker HEAD",       "worker GET adapter", "trainer GET shard", "trainer LIST",
                                     "trainer PUT",       "trainer HEAD"};

typedef struct {
    pthread_mutex_t mu;
    double *ms[K_N];
    long n[K_N], cap[K_N], fail[K_N];
} Lat;
static Lat g_lat = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void lat_add(int k, double ms, bool ok) {
    pthread_mutex_lock(&g_lat.mu);
    if (!ok) g_lat.fail[k]++;
    if (g_lat.n[k] == g_lat.cap[k]) {
        long cap = g_lat.cap[k] ? g_lat.cap[k] * 2 : 1024;
        double *p = realloc(g_lat.ms[k], (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&g_lat.mu);
            return;
        }
        g_lat.ms[k] = p;
        g_lat.cap[k] = cap;
    }
    g_lat.ms[k][g_lat.n[k]++] = ms;
    pthread_mutex_unlock(&g_lat.mu);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// p50 and p99 of kind k (sorts it); false when there is no sample.
static bool lat_pct(int k, double *p50, double *p99) {
    long n = g_lat.n[k];
    if (!n) return false;
    qsort(g_lat.ms[k], (size_t)n, sizeof(double), cmp_d);
    *p50 = g_lat.ms[k][n / 2];
    long i = (n * 99) / 100;
    *p99 = g_lat.ms[k][i >= n ? n - 1 : i];
    return true;
}

// ---- signed requests ----

typedef struct {
    CURL *h;
    const char *ak, *sk;
    Buf body;
} Conn;

static size_t sink(char *p, size_t s, size_t n, void *arg) {
    Buf *b = arg;
    if (b->len < (4u << 20)) buf_append(b, p, s * n);  // enough to read a listing's keys
    return s * n;
}

static void conn_init(Conn *c, const char *ak, const char *sk) {
    memset(c, 0, sizeof *c);
    c->h = curl_easy_init();
    c->ak = ak;
    c->sk = sk;
}

static void conn_free(Conn *c) {
    curl_easy_cleanup(c->h);
    buf_free(&c->body);
}

// method on path ("/pail/KEY" or "/pail?QUERY", already percent-encoded);
// returns the HTTP status (0 on a transport error or timeout), *ms its latency.
// meta_sha: a PUT's x-amz-meta-pail-sha256 (pail publishes immutable keys with
// it, and the relay caches only those), or NULL.
static long req_meta(Conn *c, const char *method, const char *path, const void *data, size_t len, long timeout_ms,
                     double *ms, const char *meta_sha) {
    char url[4096], host[256];
    snprintf(url, sizeof url, "%s%s", g_url, path);
    const char *p = strstr(g_url, "://") + 3;
    snprintf(host, sizeof host, "%s", p);
    const char *qm = strchr(path, '?');
    char rawpath[2048];
    snprintf(rawpath, sizeof rawpath, "%.*s", (int)(qm ? qm - path : (long)strlen(path)), path);
    Buf dec = {0};
    sigv4_uri_decode(&dec, rawpath, strlen(rawpath));
    char amz[17];
    sigv4_amz_date(amz, time_unix_s());
    SigV4Header h[] = {{"host", host}, {"x-amz-date", amz}, {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"},
                       {"x-amz-meta-pail-sha256", meta_sha}};
    SigV4Request sr = {.method = method, .path = (char *)dec.data, .query = qm ? qm + 1 : NULL, .headers = h,
                       .nheaders = meta_sha ? 4 : 3, .payload_hash = "UNSIGNED-PAYLOAD"};
    char sig[65], line[2300];
    Buf authz = {0};
    PailErr err = {0};
    if (sigv4_sign(&sr, c->ak, c->sk, amz, "us-east-1", "s3", sig, &authz, &err) < 0) {
        fprintf(stderr, "relay_load: sign: %s\n", err.msg);
        exit(1);
    }
    struct curl_slist *l = NULL;
    snprintf(line, sizeof line, "Authorization: %s", (char *)authz.data);
    l = curl_slist_append(l, line);
    snprintf(line, sizeof line, "x-amz-date: %s", amz);
    l = curl_slist_append(l, line);
    l = curl_slist_append(l, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    l = curl_slist_append(l, "Expect:");
    if (meta_sha) {
        snprintf(line, sizeof line, "x-amz-meta-pail-sha256: %s", meta_sha);
        l = curl_slist_append(l, line);
    }
    buf_free(&authz);
    buf_free(&dec);
    buf_reset(&c->body);
    CURL *e = c->h;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, l);
    curl_easy_setopt(e, CURLOPT_CAINFO, g_ca);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &c->body);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (!strcmp(method, "HEAD")) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (!strcmp(method, "PUT")) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, data);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    int64_t t0 = now_us();
    CURLcode rc = curl_easy_perform(e);
    *ms = (double)(now_us() - t0) / 1000.0;
    long code = 0;
    if (rc == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(l);
    return code;
}

static long req(Conn *c, const char *method, const char *path, const void *data, size_t len, long timeout_ms,
                double *ms) {
    return req_meta(c, method, path, data, len, timeout_ms, ms, NULL);
}

// "a/b/" -> "a%2Fb%2F" (keys here are [A-Za-z0-9._/-]).
static void q_enc(char *out, size_t cap, const char *s) {
    size_t n = 0;
    for (; *s && n + 4 < cap; s++) {
        if (*s == '/') n += (size_t)snprintf(out + n, cap - n, "%%2F");
        else out[n++] = *s;
    }
    out[n] = 0;
}

// ---- populate ----

static int populate(const char *root, const char *run, long nkeys) {
    char path[4096];
    int64_t t0 = now_us();
    for (long i = 0; i < nkeys; i++) {
        long v = i / 256, w = i % 256;
        if (w == 0) {
            snprintf(path, sizeof path, "%s/%s/rollouts/v%08ld", root, run, v);
            char cmd[4200];
            if (v == 0) {
                snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
                if (system(cmd) != 0) return 1;
            } else if (mkdir(path, 0755) < 0 && errno != EEXIST) {
                perror(path);
                return 1;
            }
        }
        snprintf(path, sizeof path, "%s/%s/rollouts/v%08ld/w%ld-%06ld.h5", root, run, v, w, v);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        close(fd);
    }
    printf("populated %ld keys in %ld folders in %.1f s\n", nkeys, (nkeys + 255) / 256, (now_us() - t0) / 1e6);
    return 0;
}

// ---- fair ----

typedef struct {
    const char *ak, *sk, *run;
    long pages;
} Lister;

static void *lister(void *arg) {
    Lister *l = arg;
    // Low priority: on a small test machine these clients would otherwise take
    // the CPU from the trainer's client, whose latency is what is measured (in
    // a run they are other machines).
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    Conn c;
    conn_init(&c, l->ak, l->sk);
    char pre[512], path[1024];
    snprintf(path, sizeof path, "%s/rollouts/", l->run);
    q_enc(pre, sizeof pre, path);
    snprintf(path, sizeof path, "/pail?list-type=2&prefix=%s&max-keys=1000", pre);
    while (!atomic_load(&g_stop)) {
        double ms;
        long code = req(&c, "GET", path, NULL, 0, 10000, &ms);
        if (code == 200) l->pages++;
        lat_add(K_LIST, ms, code == 200);
        if (code != 200) time_sleep_ms(50);
    }
    conn_free(&c);
    return NULL;
}

static int fair(char **a) {
    g_url = a[2];
    g_ca = a[3];
    const char *run = a[8];
    int conns = atoi(a[9]);
    double secs = atof(a[10]), max_p99 = atof(a[11]);
    Lister *ls = calloc((size_t)conns, sizeof *ls);
    pthread_t *th = calloc((size_t)conns, sizeof *th);
    for (int i = 0; i < conns; i++) {
        ls[i] = (Lister){a[4], a[5], run, 0};
        pthread_create(&th[i], NULL, lister, &ls[i]);
    }
    Conn tr;
    conn_init(&tr, a[6], a[7]);
    char head[1024], put[1024];
    snprintf(head, sizeof head, "/pail/%s/adapters/LATEST", run);
    snprintf(put, sizeof put, "/pail/%s/trainer/progress.json", run);
    time_sleep_ms(1500);  // the listings under way before the trainer's first request
    int64_t end = now_us() + (int64_t)(secs * 1e6);
    const long timeout_ms = 5000;  // a stalled request counts as 5 s
    while (now_us() < end) {
        double ms;
        long code = req(&tr, "HEAD", head, NULL, 0, timeout_ms, &ms);
        lat_add(K_TR_HEAD, code == 200 ? ms : (double)timeout_ms, code == 200);
        code = req(&tr, "PUT", put, "{\"step\": 1}", 11, timeout_ms, &ms);
        lat_add(K_TR_PUT, code == 200 ? ms : (double)timeout_ms, code == 200);
        time_sleep_ms(50);
    }
    atomic_store(&g_stop, true);
    long pages = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        pages += ls[i].pages;
    }
    conn_free(&tr);
    double h50 = 0, h99 = 0, p50 = 0, p99 = 0, l50 = 0, l99 = 0;
    lat_pct(K_TR_HEAD, &h50, &h99);
    lat_pct(K_TR_PUT, &p50, &p99);
    lat_pct(K_LIST, &l50, &l99);
    printf("%d listing connections: %ld pages of 1000 keys in %.0f s (p50 %.0f ms, p99 %.0f ms)\n", conns, pages,
           secs, l50, l99);
    printf("trainer HEAD: %ld requests, %ld failed, p50 %.1f ms, p99 %.1f ms\n", g_lat.n[K_TR_HEAD],
           g_lat.fail[K_TR_HEAD], h50, h99);
    printf("trainer PUT:  %ld requests, %ld failed, p50 %.1f ms, p99 %.1f ms\n", g_lat.n[K_TR_PUT], g_lat.fail[K_TR_PUT],
           p50, p99);
    free(ls);
    free(th);
    bool ok = g_lat.n[K_TR_HEAD] >= 5 && h99 < max_p99 && p99 < max_p99 && !g_lat.fail[K_TR_HEAD] &&
              !g_lat.fail[K_TR_PUT] && pages > 0;
    if (!ok) printf("FAIL: the trainer's HEAD and PUT p99 must stay under %.0f ms\n", max_p99);
    return ok ? 0 : 1;
}

// ---- scale ----

typedef struct {
    const char *ak, *sk, *run;
    int id;
    double cycle_s;
} Worker;

static atomic_long g_version;   // newest adapter version published
static atomic_long g_steps;
static long g_v0;

static long version_in(const Buf *b) {  // the newest "adapters/vNNNNNNNN.h5" in a listing
    long best = -1;
    const char *s = b->data ? (const char *)b->data : "";
    for (const char *p = s; (p = strstr(p, "adapters/v")); p += 10) {
        long v = strtol(p + 10, NULL, 10);
        if (v > best) best = v;
    }
    return best;
}

static void *longpoller(void *arg) {
    Worker *w = arg;
    Conn c;
    conn_init(&c, w->ak, w->sk);
    char pre[512], path[2048], sa[512], k[512];
    snprintf(k, sizeof k, "%s/adapters/", w->run);
    q_enc(pre, sizeof pre, k);
    long have = atomic_load(&g_version);
    while (!atomic_load(&g_stop)) {
        snprintf(k, sizeof k, "%s/adapters/v%08ld.h5", w->run, have);
        q_enc(sa, sizeof sa, k);
        snprintf(path, sizeof path, "/pail?list-type=2&prefix=%s&start-after=%s&x-pail-wait=20", pre, sa);
        double ms;
        long code = req(&c, "GET", path, NULL, 0, 40000, &ms);
        if (atomic_load(&g_stop)) break;
        lat_add(K_LONGPOLL, ms, code == 200);
        long v = code == 200 ? version_in(&c.body) : -1;
        if (v > have) {  // a new adapter: fetch it (the relay collapses and caches these)
            have = v;
            snprintf(path, sizeof path, "/pail/%s/adapters/v%08ld.h5", w->run, v);
            code = req(&c, "GET", path, NULL, 0, 60000, &ms);
            lat_add(K_GET_ADAPTER, ms, code == 200);
        } else if (code != 200) {
            time_sleep_ms(500);
        }
    }
    conn_free(&c);
    return NULL;
}

static void *worker(void *arg) {
    Worker *w = arg;
    Conn c;
    conn_init(&c, w->ak, w->sk);
    char *shard = calloc(1, 64 << 10);
    char path[2048], k[512], pre[512];
    unsigned seed = (unsigned)w->id * 2654435761u;
    // Start spread over one cycle, as workers do that joined at different times.
    time_sleep_ms((int64_t)(rand_r(&seed) % 1000) * (int64_t)(w->cycle_s * 1000) / 1000);
    for (long seq = 0; !atomic_load(&g_stop); seq++) {
        int64_t t0 = now_us();
        double ms;
        long v = atomic_load(&g_version);
        snprintf(path, sizeof path, "/pail/%s/rollouts/v%08ld/w%d-%06ld.h5", w->run, v, w->id, seq);
        snprintf(shard, (64 << 10), "%s", path);
        char sha[65];
        sha256_hex(shard, (64 << 10), sha);
        long code = req_meta(&c, "PUT", path, shard, (64 << 10), 30000, &ms, sha);
        lat_add(K_PUT_SHARD, ms, code == 200);
        char hb[128];
        int n = snprintf(hb, sizeof hb, "{\"worker\": \"w%d\", \"seq\": %ld, \"version\": %ld}", w->id, seq, v);
        snprintf(path, sizeof path, "/pail/%s/workers/w%d.json", w->run, w->id);
        code = req(&c, "PUT", path, hb, (size_t)n, 30000, &ms);
        lat_add(K_PUT_SMALL, ms, code == 200);
        snprintf(path, sizeof path, "/pail/%s/control/stop", w->run);
        code = req(&c, "HEAD", path, NULL, 0, 30000, &ms);
        lat_add(K_HEAD, ms, code == 404 || code == 200);
        snprintf(k, sizeof k, "%s/adapters/", w->run);
        q_enc(pre, sizeof pre, k);
        snprintf(path, sizeof path, "/pail?list-type=2&prefix=%s", pre);
        code = req(&c, "GET", path, NULL, 0, 30000, &ms);
        lat_add(K_LIST, ms, code == 200);
        snprintf(k, sizeof k, "%s/workers/", w->run);
        q_enc(pre, sizeof pre, k);
        snprintf(path, sizeof path, "/pail?list-type=2&prefix=%s", pre);
        code = req(&c, "GET", path, NULL, 0, 30000, &ms);
        lat_add(K_LIST, ms, code == 200);
        int64_t left = (int64_t)(w->cycle_s * 1e6) - (now_us() - t0);
        while (left > 0 && !atomic_load(&g_stop)) {
            time_sleep_ms(left > 200000 ? 200 : left / 1000 + 1);
            left = (int64_t)(w->cycle_s * 1e6) - (now_us() - t0);
        }
    }
    free(shard);
    conn_free(&c);
    return NULL;
}

typedef struct {
    const char *ak, *sk, *run;
    double step_s;
    size_t adapter_bytes;
} Trainer;

static void *trainer(void *arg) {
    Trainer *t = arg;
    Conn c;
    conn_init(&c, t->ak, t->sk);
    char *adapter = calloc(1, t->adapter_bytes);
    char path[2048], k[512], pre[512], sa[1200];
    char (*keys)[160] = calloc(4096, sizeof *keys);
    // Shards are consumed in key order from where the last step stopped (the
    // million before the run are history).
    char last[512];
    snprintf(last, sizeof last, "%s/rollouts/v%08ld", t->run, g_v0);
    snprintf(k, sizeof k, "%s/rollouts/", t->run);
    q_enc(pre, sizeof pre, k);
    while (!atomic_load(&g_stop)) {
        int64_t t0 = now_us();
        long v = atomic_load(&g_version);
        double ms;
        long code;
        int nk = 0;
        for (int page = 0; page < 4 && nk < 4096 - 1000; page++) {
            q_enc(sa, sizeof sa, last);
            snprintf(path, sizeof path, "/pail?list-type=2&prefix=%s&start-after=%s", pre, sa);
            code = req(&c, "GET", path, NULL, 0, 30000, &ms);
            lat_add(K_TR_LIST, ms, code == 200);
            const char *s = code == 200 && c.body.data ? (const char *)c.body.data : "";
            for (const char *p = s; (p = strstr(p, "<Key>")); p += 5) {
                const char *e = strchr(p + 5, '<');
                if (!e || e - (p + 5) >= 160) continue;
                snprintf(keys[nk], sizeof keys[nk], "%.*s", (int)(e - (p + 5)), p + 5);
                snprintf(last, sizeof last, "%s", keys[nk]);
                nk++;
            }
            if (!strstr(s, "<IsTruncated>true")) break;
        }
        for (int i = 0; i < nk && !atomic_load(&g_stop); i++) {
            snprintf(path, sizeof path, "/pail/%s", keys[i]);
            code = req(&c, "GET", path, NULL, 0, 30000, &ms);
            lat_add(K_GET_SHARD, ms, code == 200);
        }
        // Publish v+1 as the trainer does: adapter, LATEST, progress, metrics.
        snprintf(path, sizeof path, "/pail/%s/adapters/v%08ld.h5", t->run, v + 1);
        snprintf(adapter, t->adapter_bytes, "%s", path);
        char sha[65];
        sha256_hex(adapter, t->adapter_bytes, sha);
        code = req_meta(&c, "PUT", path, adapter, t->adapter_bytes, 60000, &ms, sha);
        lat_add(K_TR_PUT, ms, code == 200);
        char txt[64];
        int n = snprintf(txt, sizeof txt, "%ld", v + 1);
        snprintf(path, sizeof path, "/pail/%s/adapters/LATEST", t->run);
        code = req(&c, "PUT", path, txt, (size_t)n, 30000, &ms);
        lat_add(K_TR_PUT, ms, code == 200);
        snprintf(path, sizeof path, "/pail/%s/trainer/progress.json", t->run);
        code = req(&c, "PUT", path, txt, (size_t)n, 30000, &ms);
        lat_add(K_TR_PUT, ms, code == 200);
        snprintf(path, sizeof path, "/pail/%s/metrics/step-%08ld.json", t->run, v + 1);
        code = req(&c, "PUT", path, txt, (size_t)n, 30000, &ms);
        lat_add(K_TR_PUT, ms, code == 200);
        snprintf(path, sizeof path, "/pail/%s/adapters/LATEST", t->run);
        code = req(&c, "HEAD", path, NULL, 0, 30000, &ms);
        lat_add(K_TR_HEAD, ms, code == 200);
        atomic_store(&g_version, v + 1);
        atomic_fetch_add(&g_steps, 1);
        int64_t left = (int64_t)(t->step_s * 1e6) - (now_us() - t0);
        while (left > 0 && !atomic_load(&g_stop)) {
            time_sleep_ms(left > 200000 ? 200 : left / 1000 + 1);
            left = (int64_t)(t->step_s * 1e6) - (now_us() - t0);
        }
    }
    free(adapter);
    free(keys);
    conn_free(&c);
    return NULL;
}

static int scale(char **a) {
    g_url = a[2];
    g_ca = a[3];
    const char *run = a[8];
    int nw = atoi(a[9]);
    double secs = atof(a[10]), step_s = atof(a[11]), cycle_s = atof(a[12]);
    g_v0 = atol(a[13]);
    atomic_store(&g_version, g_v0);
    Worker *ws = calloc((size_t)nw, sizeof *ws);
    pthread_t *th = calloc((size_t)nw * 2 + 1, sizeof *th);
    for (int i = 0; i < nw; i++) {
        ws[i] = (Worker){a[4], a[5], run, i, cycle_s};
        pthread_create(&th[2 * i], NULL, longpoller, &ws[i]);
        pthread_create(&th[2 * i + 1], NULL, worker, &ws[i]);
    }
    Trainer t = {a[6], a[7], run, step_s, (size_t)atol(a[14])};
    pthread_create(&th[2 * nw], NULL, trainer, &t);
    time_sleep_ms((int64_t)(secs * 1000));
    atomic_store(&g_stop, true);
    // Long-polls parked on the relay end by their deadline; do not wait for them.
    pthread_join(th[2 * nw], NULL);
    for (int i = 0; i < nw; i++) pthread_join(th[2 * i + 1], NULL);
    long steps = atomic_load(&g_steps), total = 0, fails = 0;
    printf("%d workers, %.0f s, %ld training steps (one per %.1f s), a shard per worker per %.1f s\n", nw, secs, steps,
           step_s, cycle_s);
    printf("%-20s %8s %6s %10s %10s\n", "request kind", "count", "failed", "p50 ms", "p99 ms");
    for (int k = 0; k < K_N; k++) {
        double p50, p99;
        if (!lat_pct(k, &p50, &p99)) continue;
        printf("%-20s %8ld %6ld %10.1f %10.1f\n", kind_name[k], g_lat.n[k], g_lat.fail[k], p50, p99);
        total += g_lat.n[k];
        fails += g_lat.fail[k];
    }
    printf("(* a long-poll waits for the next version: its time is the wait, not a latency)\n");
    printf("client requests: %ld (%.0f/s), %.0f per training step\n", total, total / secs,
           steps ? (double)total / (double)steps : 0.0);
    // A few requests past their timeout on a loaded machine are figures; more is a failure.
    bool ok = fails * 100 <= total;
    if (!ok) printf("FAIL: %ld of %ld requests failed\n", fails, total);
    fflush(stdout);
    _exit(ok ? 0 : 1);  // parked long-poll threads are not joined
}

int main(int argc, char **argv) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (argc == 5 && !strcmp(argv[1], "populate")) return populate(argv[2], argv[3], atol(argv[4]));
    if (argc == 12 && !strcmp(argv[1], "fair")) return fair(argv);
    if (argc == 15 && !strcmp(argv[1], "scale")) return scale(argv);
    fprintf(stderr,
            "usage: relay_load populate ROOT RUN NKEYS\n"
            "       relay_load fair URL CA LIST_AK LIST_SK TR_AK TR_SK RUN CONNS SECONDS MAX_P99_MS\n"
            "       relay_load scale URL CA RO_AK RO_SK TR_AK TR_SK RUN WORKERS SECONDS STEP_S CYCLE_S V0 ADAPTER_BYTES\n");
    return 2;
}
