// A grpo-relay on loopback for the relay's Check suites (check_relay, check_relay_body):
// three keys (operator; trainer and rollout of run runs/r1), a file:// root in a scratch
// folder, plain HTTP, its loop on a thread; and a raw TCP connection to it.
#pragma once
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include "relay/relay.h"
#include "check_tmp.h"

#define OP_ID "optest"
#define OP_SECRET "operator-secret-0123456789"
#define TR_ID "trtest"
#define TR_SECRET "trainer-secret-0123456789"
#define RO_ID "rotest"
#define RO_SECRET "rollout-secret-0123456789"

typedef struct {
    Relay *relay;
    pthread_t th;
    char dir[256], root[300], keys[300], spool[300], endpoint[64];
    int port;
} TestRelay;

static inline void *relay_harness_thread(void *arg) {
    TestRelay *t = arg;
    PailErr err = {0};
    relay_run(t->relay, &err);
    return NULL;
}

// Opens a relay with cfg (its other fields the caller's) in a fresh scratch folder named
// after tag; the rollout key's prefix is ro_prefix; with own_spool the spool is the
// folder's spool/ (t->spool), else the relay's default.
static inline void relay_harness_start(TestRelay *t, RelayConfig *cfg, const char *tag, const char *ro_prefix,
                                       bool own_spool) {
    static FILE *log;
    tmp_make(t->dir, sizeof t->dir, tag);
    snprintf(t->root, sizeof t->root, "%s/root", t->dir);
    snprintf(t->keys, sizeof t->keys, "%s/keys", t->dir);
    snprintf(t->spool, sizeof t->spool, "%s/spool", t->dir);
    mkdir(t->root, 0755);
    FILE *f = fopen(t->keys, "w");
    fprintf(f, "# operator for every run, trainer and rollout for run runs/r1\n");
    fprintf(f, OP_ID " " OP_SECRET " operator\n" TR_ID " " TR_SECRET " trainer runs/r1\n");
    fprintf(f, RO_ID " " RO_SECRET " rollout %s\n", ro_prefix);
    fclose(f);
    if (!log) log = fopen("/dev/null", "w");
    cfg->listen = "127.0.0.1:0";
    cfg->root = t->root;
    cfg->keys_path = t->keys;
    if (own_spool) cfg->spool = t->spool;
    cfg->http = true;
    cfg->access_log = log;
    PailErr err = {0};
    ck_assert_msg(relay_open(&t->relay, cfg, &err) == 0, "relay_open: %s", err.msg);
    t->port = relay_port(t->relay);
    snprintf(t->endpoint, sizeof t->endpoint, "http://127.0.0.1:%d", t->port);
    pthread_create(&t->th, NULL, relay_harness_thread, t);
}

static inline void relay_end(TestRelay *t) {
    relay_stop(t->relay);
    pthread_join(t->th, NULL);
    relay_close(t->relay);
    tmp_remove(t->dir);
}

static inline int connect_port(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
    return s;
}
