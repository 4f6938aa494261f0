// Check suite for the stand-in device (kernels/backend_sim.c, --device sim):
// that it behaves like a GPU where the code under test could get it wrong —
// host code reading its memory faults, ops are queued and their results there
// only after sync / to_host, to_device stages the caller's bytes, fresh memory
// is garbage (NaN), the allocator stops at its size with the sizes in the
// message, an injected op failure surfaces at sync and sticks — and that it
// computes the CPU backend's bits (the optimizer step's ops here; the whole
// model in check_model_backend).
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend.h"
#include "core/rng.h"
#include "kernels.h"

static Backend *open_sim(size_t cap) {
    Backend *b;
    PailErr err = {0};
    ck_assert_msg(backend_open(&b, "sim", cap, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b->kind, BACKEND_SIM);
    ck_assert(!b->host_memory && !b->team_ops);
    return b;
}

static float *dev_alloc(Backend *b, size_t n) {
    PailErr err = {0};
    float *p = b->ops->alloc(b, n * sizeof(float), &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    return p;
}

// A child that dereferences p (on a thread of its own when threaded) dies of SIGSEGV.
static void *deref(void *p) {
    volatile float x = *(volatile float *)p;
    (void)x;
    return NULL;
}
static void expect_segv(float *p, bool threaded, bool write) {
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        if (write) *(volatile float *)p = 1.0f;
        else if (threaded) {
            pthread_t th;
            pthread_create(&th, NULL, deref, p);
            pthread_join(th, NULL);
        } else deref(p);
        _exit(0);  // reached only if the access did not fault
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "a host %s of device memory did not fault (status %d)",
                  write ? "write" : "read", st);
}

START_TEST(test_host_access_faults) {
    Backend *b = open_sim(0);
    PailErr err = {0};
    float *d = dev_alloc(b, 1024);
    ck_assert_int_eq(b->ops->zero(b, d, 1024, &err), 0);
    ck_assert_int_eq(b->ops->sync(b, &err), 0);
    expect_segv(d, false, false);
    expect_segv(d + 1000, true, false);
    expect_segv(d, false, true);
    // through the backend's own copies it is ordinary memory
    float h[4] = {1, 2, 3, 4}, back[4];
    ck_assert_int_eq(b->ops->to_device(b, d, h, sizeof h, &err), 0);
    ck_assert_int_eq(b->ops->to_host(b, back, d, sizeof back, &err), 0);
    ck_assert(!memcmp(h, back, sizeof h));
    b->ops->release(b, d);
    backend_close(b);
}
END_TEST

typedef struct {
    Backend *b;
    volatile int done;
} SyncArg;
static void *sync_thread(void *a) {
    SyncArg *s = a;
    PailErr err = {0};
    ck_assert_int_eq(s->b->ops->sync(s->b, &err), 0);
    s->done = 1;
    return NULL;
}

START_TEST(test_queued_until_sync) {
    Backend *b = open_sim(0);
    PailErr err = {0};
    enum { N = 1000 };
    float *x = dev_alloc(b, N), *y = dev_alloc(b, N), h[N], out[N];
    for (int i = 0; i < N; i++) h[i] = (float)i;
    backend_sim_hold(b, true);
    ck_assert_int_eq(b->ops->to_device(b, x, h, sizeof h, &err), 0);
    for (int i = 0; i < N; i++) h[i] = -1;  // the caller reuses its buffer at once: the copy was staged
    ck_assert_int_eq(b->ops->to_device(b, y, h, sizeof h, &err), 0);
    ck_assert_int_eq(b->ops->add(b, y, x, N, &err), 0);  // y = -1 + i
    ck_assert_int_eq(b->ops->add(b, y, x, N, &err), 0);  // y = -1 + 2i
    ck_assert_int_eq(backend_sim_queued(b), 4);  // queued, none run: the results are not there yet
    SyncArg sa = {b, 0};
    pthread_t th;
    pthread_create(&th, NULL, sync_thread, &sa);
    usleep(100 * 1000);
    ck_assert_msg(!sa.done, "sync returned while the stream still held its ops");
    ck_assert_int_eq(backend_sim_queued(b), 4);
    backend_sim_hold(b, false);
    pthread_join(th, NULL);
    ck_assert(sa.done);
    ck_assert_int_eq(backend_sim_queued(b), 0);
    ck_assert_int_eq(b->ops->to_host(b, out, y, sizeof out, &err), 0);
    for (int i = 0; i < N; i++) ck_assert_msg(out[i] == -1.0f + 2.0f * i, "y[%d] = %g", i, out[i]);
    // to_host waits for the ops queued before it: no sync needed
    ck_assert_int_eq(b->ops->zero(b, y, N, &err), 0);
    ck_assert_int_eq(b->ops->to_host(b, out, y, sizeof out, &err), 0);
    for (int i = 0; i < N; i++) ck_assert(out[i] == 0.0f);
    backend_close(b);  // with nothing held, close joins the stream
}
END_TEST

// Fresh memory is garbage, as on a GPU: NaN, so a missing zero shows.
START_TEST(test_fresh_memory_is_nan) {
    Backend *b = open_sim(0);
    PailErr err = {0};
    float *d = dev_alloc(b, 64), out[64];
    ck_assert_int_eq(b->ops->to_host(b, out, d, sizeof out, &err), 0);
    for (int i = 0; i < 64; i++) ck_assert(isnan(out[i]));
    backend_close(b);
}
END_TEST

// The optimizer step's ops (sum of squares, AdamW, zero) on sim give the CPU
// backend's bits, at the CPU backend's team size (the stream takes the opener's).
START_TEST(test_state_step_bits) {
    Backend *b = open_sim(0), *c = backend_cpu();
    PailErr err = {0};
    enum { N = 200003 };  // past the sum of squares' parallel threshold, not a multiple of its slices
    float *p = malloc(N * 4), *m = malloc(N * 4), *v = malloc(N * 4), *g = malloc(N * 4);
    Rng r;
    rng_seed(&r, 9, 9);
    for (int i = 0; i < N; i++)
        p[i] = (float)rng_normal(&r), m[i] = 0.01f * (float)rng_normal(&r), v[i] = 1e-4f * (float)rng_uniform(&r),
        g[i] = (float)rng_normal(&r);
    float *dp = dev_alloc(b, N), *dm = dev_alloc(b, N), *dv = dev_alloc(b, N), *dg = dev_alloc(b, N);
    ck_assert_int_eq(b->ops->to_device(b, dp, p, N * 4, &err), 0);
    ck_assert_int_eq(b->ops->to_device(b, dm, m, N * 4, &err), 0);
    ck_assert_int_eq(b->ops->to_device(b, dv, v, N * 4, &err), 0);
    for (int step = 1; step <= 3; step++) {
        ck_assert_int_eq(b->ops->to_device(b, dg, g, N * 4, &err), 0);
        double s_sim, s_cpu;
        ck_assert_int_eq(b->ops->adamw_grad_sumsq(b, &s_sim, dg, N, &err), 0);
        ck_assert_int_eq(c->ops->adamw_grad_sumsq(c, &s_cpu, g, N, &err), 0);
        ck_assert_msg(s_sim == s_cpu, "sum of squares: sim %.17g, cpu %.17g", s_sim, s_cpu);
        float scale = adamw_clip_scale(s_cpu, 1.0f);
        ck_assert(scale < 1.0f);  // the clip is exercised
        ck_assert_int_eq(b->ops->adamw_update(b, dp, dm, dv, dg, N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, scale, &err), 0);
        ck_assert_int_eq(c->ops->adamw_update(c, p, m, v, g, N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, scale, &err), 0);
        ck_assert_int_eq(b->ops->zero(b, dg, N, &err), 0);
        for (int i = 0; i < N; i++) g[i] = 0.5f * g[i] + 0.1f * (float)rng_normal(&r);
    }
    float *out = malloc(N * 4);
    float *want[3] = {p, m, v}, *got[3] = {dp, dm, dv};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(b->ops->to_host(b, out, got[k], N * 4, &err), 0);
        ck_assert_msg(!memcmp(out, want[k], N * 4), "array %d of the step differs from the CPU's", k);
    }
    ck_assert_int_eq(b->ops->to_host(b, out, dg, N * 4, &err), 0);
    for (int i = 0; i < N; i++) ck_assert(out[i] == 0.0f);
    free(p), free(m), free(v), free(g), free(out);
    backend_close(b);
}
END_TEST

START_TEST(test_out_of_memory) {
    Backend *b = open_sim(1 << 20);  // a 1 MiB device
    PailErr err = {0};
    void *a = b->ops->alloc(b, 512 << 10, &err);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(b->ops->alloc(b, 768 << 10, &err));
    ck_assert_int_eq(err.code, PAIL_ERR_NOMEM);
    ck_assert_msg(strstr(err.msg, "cannot allocate 0.8 MiB: 0.5 MiB of its 1.0 MiB are in use") &&
                  strstr(err.msg, "--max-memory"), "%s", err.msg);
    void *c2 = b->ops->alloc(b, 256 << 10, &err);  // what is left still serves
    ck_assert_ptr_nonnull(c2);
    ck_assert_uint_eq(backend_sim_in_use(b), 768 << 10);
    b->ops->release(b, a);
    void *d = b->ops->alloc(b, 512 << 10, &err);  // the freed range again (first fit)
    ck_assert_ptr_eq(d, a);
    backend_close(b);
    // PAIL_SIM_MEMORY sizes it when smaller than the given size (or alone)
    setenv("PAIL_SIM_MEMORY", "65536", 1);
    b = open_sim(1 << 30);
    ck_assert_ptr_null(b->ops->alloc(b, 128 << 10, &err));
    ck_assert_msg(strstr(err.msg, "of its 0.1 MiB"), "%s", err.msg);
    backend_close(b);
    setenv("PAIL_SIM_MEMORY", "lots", 1);
    Backend *bad;
    ck_assert_int_eq(backend_open(&bad, "sim", 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "PAIL_SIM_MEMORY='lots'"), "%s", err.msg);
    unsetenv("PAIL_SIM_MEMORY");
}
END_TEST

START_TEST(test_injected_failure) {
    setenv("PAIL_SIM_FAIL_AFTER", "3", 1);
    Backend *b = open_sim(0);
    unsetenv("PAIL_SIM_FAIL_AFTER");
    PailErr err = {0};
    float *d = dev_alloc(b, 16), h[16] = {0};
    backend_sim_hold(b, true);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(b->ops->zero(b, d, 16, &err), 0);  // queued: no error yet
    backend_sim_hold(b, false);
    ck_assert_int_eq(b->ops->sync(b, &err), -1);  // it surfaces at sync
    ck_assert_msg(strstr(err.msg, "sim: op 3 (zero) failed: injected by PAIL_SIM_FAIL_AFTER=3"), "%s", err.msg);
    err_clear(&err);
    // sticky, as a CUDA context after a fault: every later op and copy fails alike
    ck_assert_int_eq(b->ops->zero(b, d, 16, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "op 3 (zero)"));
    ck_assert_int_eq(b->ops->to_host(b, h, d, sizeof h, &err), -1);
    double s;
    ck_assert_int_eq(b->ops->adamw_grad_sumsq(b, &s, d, 16, &err), -1);
    backend_close(b);
}
END_TEST

START_TEST(test_host_pointer_refused) {
    Backend *b = open_sim(0);
    PailErr err = {0};
    float *d = dev_alloc(b, 8), host[8] = {0};
    ck_assert_int_eq(b->ops->add(b, d, host, 8, &err), -1);
    ck_assert_msg(strstr(err.msg, "sim: add: argument 2") && strstr(err.msg, "is not device memory"), "%s", err.msg);
    ck_assert_int_eq(b->ops->to_host(b, host, host, sizeof host, &err), -1);
    ck_assert_int_eq(b->ops->sync(b, &err), 0);  // a refused op never reached the stream
    backend_close(b);
}
END_TEST

START_TEST(test_device_spelling) {
    BackendKind k;
    int ord;
    PailErr err = {0};
    ck_assert_int_eq(backend_parse_device("sim", &k, &ord, &err), 0);
    ck_assert_int_eq(k, BACKEND_SIM);
    ck_assert_int_eq(backend_parse_device("sim:0", &k, &ord, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "use cpu, cuda, cuda:N, auto or sim"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("kernels_sim");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_host_access_faults);
    tcase_add_test(core, test_queued_until_sync);
    tcase_add_test(core, test_fresh_memory_is_nan);
    tcase_add_test(core, test_state_step_bits);
    tcase_add_test(limits, test_out_of_memory);
    tcase_add_test(limits, test_injected_failure);
    tcase_add_test(limits, test_host_pointer_refused);
    tcase_add_test(limits, test_device_spelling);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
