// Check suite for src/store/stop_watch.c on a file:// bucket: the thread sets
// the stop flag once control/stop appears (and not before), a retry loop that
// would run for --max-outage then ends within its grace, a stop already under
// way (a signal) is left as it is, and closing is prompt.
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "core/timeutil.h"
#include "store/retry.h"
#include "store/runlayout.h"
#include "store/stop_watch.h"
#include "store/store.h"
#include "check_tmp.h"

static char g_dir[256], g_url[300];
static volatile sig_atomic_t g_flag;

static void setup(void) {
    tmp_make(g_dir, sizeof g_dir, "check-stopwatch");
    snprintf(g_url, sizeof g_url, "file://%s", g_dir);
    g_flag = 0;
}

static void teardown(void) { tmp_remove(g_dir); }

static void put_stop(void) {
    Store *st;
    PailErr err = {0};
    ck_assert_int_eq(store_open(&st, g_url, NULL, &err), 0);
    ck_assert_int_eq(store_put(st, RUN_KEY_STOP, "{}", 2, NULL, &err), 0);
    store_close(st);
}

static bool wait_flag(double s) {
    for (double t0 = time_mono_s(); time_mono_s() - t0 < s;) {
        if (g_flag) return true;
        time_sleep_ms(10);
    }
    return g_flag != 0;
}

START_TEST(test_found_sets_flag) {
    StopWatch *w;
    PailErr err = {0};
    ck_assert_int_eq(stop_watch_open(&w, g_url, NULL, &g_flag, 0.05, &err), 0);
    ck_assert(!wait_flag(0.3));  // nothing there: nothing set
    ck_assert(!stop_watch_found(w));
    put_stop();
    ck_assert(wait_flag(5));
    ck_assert_int_eq(g_flag, 1);
    ck_assert(stop_watch_found(w));
    double t0 = time_mono_s();
    stop_watch_close(w);
    ck_assert_double_lt(time_mono_s() - t0, 1);
}
END_TEST

// The trainer's case: a request that keeps failing (a full disk, a relay
// answering 5xx) would be retried for --max-outage (here an hour); control/stop
// ends it within the grace given to retry_stop_on.
START_TEST(test_ends_a_retry_loop) {
    StopWatch *w;
    PailErr err = {0};
    retry_stop_on(&g_flag, 0.5);
    ck_assert_int_eq(stop_watch_open(&w, g_url, NULL, &g_flag, 0.05, &err), 0);
    RetryState rs;
    retry_init(&rs, 3600);
    double t0 = time_mono_s();
    bool stop_written = false;
    while (retry_wait(&rs)) {
        if (!stop_written && time_mono_s() - t0 > 0.3) put_stop(), stop_written = true;
        ck_assert_double_lt(time_mono_s() - t0, 20);  // never: the retries end on control/stop
    }
    ck_assert(rs.stopped);
    ck_assert_double_lt(time_mono_s() - t0, 10);
    stop_watch_close(w);
    retry_stop_on(NULL, 0);
}
END_TEST

START_TEST(test_signal_first) {  // a stop under way (SIGINT twice: 2) is never lowered
    StopWatch *w;
    PailErr err = {0};
    put_stop();
    g_flag = 2;
    ck_assert_int_eq(stop_watch_open(&w, g_url, NULL, &g_flag, 0.05, &err), 0);
    time_sleep_ms(300);
    ck_assert_int_eq(g_flag, 2);
    stop_watch_close(w);
}
END_TEST

START_TEST(test_bad_url) {
    StopWatch *w = (StopWatch *)1;
    PailErr err = {0};
    ck_assert_int_eq(stop_watch_open(&w, "ftp://nowhere", NULL, &g_flag, 1, &err), -1);
    ck_assert_ptr_null(w);
    ck_assert(strstr(err.msg, "control/stop") != NULL);
    stop_watch_close(NULL);
}
END_TEST

int main(void) {
    Suite *s = suite_create("store_stopwatch");
    TCase *tc = tcase_create("stop_watch");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_found_sets_flag);
    tcase_add_test(tc, test_ends_a_retry_loop);
    tcase_add_test(tc, test_signal_first);
    tcase_add_test(tc, test_bad_url);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
