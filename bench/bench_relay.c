// Helpers for `make bench`'s relay figures (driven by bench/bench_relay.sh):
//   bench_relay sign METHOD URL AK SK
//       prints SigV4 headers (valid 15 minutes) for wrk to replay, one per line
//   bench_relay longpoll URL CA TRAINER_AK TRAINER_SK READER_AK READER_SK N ROUNDS
//       N clients long-poll (x-pail-wait) on adapters/ over TLS with libcurl multi;
//       each round publishes one version through pail's store client and
//       records every client's wake-up after the publish began; prints p50/p99.
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/sha256.h"
#include "core/timeutil.h"
#include "store/sigv4.h"
#include "store/store.h"
#include "store/versions.h"

static struct curl_slist *sign_headers(const char *method, const char *url, const char *ak, const char *sk) {
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    const char *slash = strchr(p, '/');
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(slash ? slash - p : (long)strlen(p)), p);
    const char *path = slash ? slash : "/";
    const char *qm = strchr(path, '?');
    char rawpath[2048];
    snprintf(rawpath, sizeof rawpath, "%.*s", (int)(qm ? qm - path : (long)strlen(path)), path);
    Buf dec = {0};
    sigv4_uri_decode(&dec, rawpath, strlen(rawpath));
    char amz[17];
    sigv4_amz_date(amz, time_unix_s());
    SigV4Header h[] = {{"host", host}, {"x-amz-date", amz}, {"x-amz-content-sha256", SIGV4_EMPTY_SHA256}};
    SigV4Request sr = {.method = method, .path = (char *)dec.data, .query = qm ? qm + 1 : NULL, .headers = h,
                       .nheaders = 3, .payload_hash = SIGV4_EMPTY_SHA256};
    char sig[65], line[2300];
    Buf authz = {0};
    PailErr err = {0};
    if (sigv4_sign(&sr, ak, sk, amz, "us-east-1", "s3", sig, &authz, &err) < 0) {
        fprintf(stderr, "bench_relay: sign: %s\n", err.msg);
        exit(1);
    }
    struct curl_slist *l = NULL;
    snprintf(line, sizeof line, "Authorization: %s", (char *)authz.data);
    l = curl_slist_append(l, line);
    snprintf(line, sizeof line, "x-amz-date: %s", amz);
    l = curl_slist_append(l, line);
    l = curl_slist_append(l, "x-amz-content-sha256: " SIGV4_EMPTY_SHA256);
    buf_free(&authz);
    buf_free(&dec);
    return l;
}

typedef struct {
    CURL *h;
    struct curl_slist *hdr;
    Buf body;
    int64_t done_us;
} Client;

static size_t sink(char *p, size_t s, size_t n, void *arg) {
    buf_append(arg, p, s * n);
    return s * n;
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    Store *st;
    char key[128];
    int rc;
    int64_t t0, t1;
    PailErr err;
} Pub;

static void *publish(void *arg) {
    Pub *p = arg;
    p->t0 = now_us();
    p->rc = versioned_put(p->st, p->key, "adapter", 7, &p->err);
    p->t1 = now_us();
    return NULL;
}

static int longpoll(int argc, char **argv) {
    if (argc < 10) return 2;
    const char *url = argv[2], *ca = argv[3];
    int n = atoi(argv[8]), rounds = atoi(argv[9]);
    StoreOptions so = {.endpoint = url, .ca_bundle = ca, .access_key = argv[4], .secret_key = argv[5],
                       .region = "us-east-1"};
    Store *st = NULL;
    PailErr err = {0};
    if (store_open(&st, "s3://pail", &so, &err) < 0) {
        fprintf(stderr, "bench_relay: %s\n", err.msg);
        return 1;
    }
    // Start after whatever is there.
    long base = 0;
    VersionSeries s = {"runs/r1/adapters/v", ".h5"};
    versions_latest(st, &s, &base, &err);
    if (base < 0) base = 0;
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)n + 8);
    Client *cl = calloc((size_t)n, sizeof *cl);
    for (int i = 0; i < n; i++) cl[i].h = curl_easy_init();
    int64_t *lat = calloc((size_t)(n * rounds), sizeof *lat), *lat_done = calloc((size_t)(n * rounds), sizeof *lat);
    int nl = 0, bad = 0;
    for (int r = 0; r < rounds; r++) {
        long v = base + r + 1;
        char lurl[1024];
        snprintf(lurl, sizeof lurl,
                 "%s/pail?list-type=2&prefix=runs%%2Fr1%%2Fadapters%%2F&start-after=runs%%2Fr1%%2Fadapters%%2Fv%08ld.h5"
                 "&x-pail-wait=20",
                 url, v - 1);
        for (int i = 0; i < n; i++) {
            Client *c = &cl[i];
            curl_slist_free_all(c->hdr);
            c->hdr = sign_headers("GET", lurl, argv[6], argv[7]);
            buf_reset(&c->body);
            c->done_us = 0;
            curl_easy_setopt(c->h, CURLOPT_URL, lurl);
            curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hdr);
            curl_easy_setopt(c->h, CURLOPT_CAINFO, ca);
            curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, sink);
            curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &c->body);
            curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 40L);
            curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
            curl_multi_add_handle(m, c->h);
        }
        // Let every client connect (TLS) and park, then publish.
        int running = n;
        int64_t settle = now_us() + (r == 0 ? 3000000 : 500000);
        while (now_us() < settle) {
            curl_multi_perform(m, &running);
            curl_multi_poll(m, NULL, 0, 20, NULL);
        }
        if (running != n) {
            fprintf(stderr, "bench_relay: round %d: only %d of %d clients still waiting before the publish\n", r,
                    running, n);
        }
        Pub p = {.st = st};
        version_key(&s, v, p.key, sizeof p.key);
        pthread_t th;
        pthread_create(&th, NULL, publish, &p);
        int64_t deadline = now_us() + 30000000;
        int done = 0;
        while (done < n && now_us() < deadline) {
            curl_multi_perform(m, &running);
            CURLMsg *msg;
            int left;
            while ((msg = curl_multi_info_read(m, &left))) {
                if (msg->msg != CURLMSG_DONE) continue;
                Client *c;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
                c->done_us = now_us();
                long code = 0;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
                if (msg->data.result != CURLE_OK || code != 200 || !c->body.data || !strstr((char *)c->body.data, p.key))
                    bad++;
                curl_multi_remove_handle(m, msg->easy_handle);
                done++;
            }
            if (done < n) curl_multi_poll(m, NULL, 0, 5, NULL);
        }
        pthread_join(th, NULL);
        if (p.rc < 0) {
            fprintf(stderr, "bench_relay: publish %s: %s\n", p.key, p.err.msg);
            return 1;
        }
        for (int i = 0; i < n; i++)
            if (cl[i].done_us) {
                lat[nl] = cl[i].done_us - p.t0;
                lat_done[nl++] = cl[i].done_us - p.t1;
            }
    }
    qsort(lat, (size_t)nl, sizeof *lat, cmp_i64);
    qsort(lat_done, (size_t)nl, sizeof *lat_done, cmp_i64);
    if (nl == 0) {
        fprintf(stderr, "bench_relay: no client woke\n");
        return 1;
    }
    double p50 = lat[nl / 2] / 1000.0, p99 = lat[(nl * 99) / 100 >= nl ? nl - 1 : (nl * 99) / 100] / 1000.0;
    double d50 = lat_done[nl / 2] / 1000.0, d99 = lat_done[(nl * 99) / 100 >= nl ? nl - 1 : (nl * 99) / 100] / 1000.0;
    // From the publish's start includes the PUT itself (TLS write, the store's
    // fsync); from its response is the wake-up alone (waiters may even answer
    // before the PUT's response reaches its client: negative values).
    printf("long-poll publish-to-wake, %d clients x %d rounds (%d wake-ups, %d bad): "
           "p50 %.1f ms  p99 %.1f ms after the PUT's response; p50 %.1f ms  p99 %.1f ms from the PUT's start  "
           "[target p50 < 20 ms, p99 < 100 ms]\n",
           n, rounds, nl, bad, d50, d99, p50, p99);
    int ok = bad == 0 && nl == n * rounds;
    for (int i = 0; i < n; i++) {
        curl_slist_free_all(cl[i].hdr);
        buf_free(&cl[i].body);
        curl_easy_cleanup(cl[i].h);
    }
    curl_multi_cleanup(m);
    free(cl);
    free(lat);
    free(lat_done);
    store_close(st);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (argc == 6 && !strcmp(argv[1], "sign")) {
        struct curl_slist *l = sign_headers(argv[2], argv[3], argv[4], argv[5]);
        for (struct curl_slist *i = l; i; i = i->next) printf("%s\n", i->data);
        curl_slist_free_all(l);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "longpoll")) return longpoll(argc, argv);
    fprintf(stderr, "usage: bench_relay sign METHOD URL AK SK | longpoll URL CA TR_AK TR_SK RD_AK RD_SK N ROUNDS\n");
    return 2;
}
