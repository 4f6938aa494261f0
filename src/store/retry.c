// Retry policy and backoff (see retry.h). Full jitter ("Exponential Backoff and
// Jitter", AWS Architecture Blog, 2015): sleeping a uniform fraction of the
// exponential step spreads the retries of many clients hitting one bucket.
#include "store/retry.h"
#include <stdatomic.h>
#include <string.h>
#include "core/timeutil.h"

bool retry_is_transient(XferResult xfer, long status, const char *code) {
    switch (xfer) {
    case XFER_CONNECT:
    case XFER_RESOLVE:
    case XFER_TIMEOUT:
    case XFER_BROKEN:
        return true;
    case XFER_TLS:
    case XFER_OTHER:
        return false;
    case XFER_OK:
        break;
    }
    if (status >= 500 && status <= 599) return status != 501;  // 501 NotImplemented is permanent
    if (status == 429) return true;                          // TooManyRequests / SlowDown
    if (!code) return false;
    if (status == 409 && !strcmp(code, "ConditionalRequestConflict")) return true;
    if (status == 400 && !strcmp(code, "RequestTimeout")) return true;
    return false;
}

int64_t retry_backoff_ms(int retry, int64_t base_ms, int64_t cap_ms, double u) {
    int64_t step = base_ms;
    for (int i = 0; i < retry && step < cap_ms; i++) step *= 2;
    if (step > cap_ms) step = cap_ms;
    if (u < 0) u = 0;
    if (u >= 1) u = 0.999999;
    return (int64_t)(u * (double)step);
}

void retry_init(RetryState *rs, double budget_s) {
    if (budget_s <= 0) budget_s = RETRY_DEFAULT_BUDGET_S;
    rs->budget_s = budget_s;
    rs->start_ms = time_mono_ms();
    rs->deadline_ms = rs->start_ms + (int64_t)(budget_s * 1000);
    rs->report_ms = rs->start_ms + RETRY_REPORT_AFTER_MS;
    rs->base_ms = 100;
    rs->cap_ms = 5000;
    rs->retries = 0;
    rs->floor = 0;
    rs->stopped = false;
    rng_seed(&rs->rng, (uint64_t)rs->start_ms ^ (uint64_t)(uintptr_t)rs, (uint64_t)time_unix_s());
}

static volatile sig_atomic_t *g_stop_flag;
static int64_t g_stop_grace_ms;
static _Atomic int64_t g_stop_seen_ms = -1;  // retries run on more than one thread (stop_watch.h)

void retry_stop_on(volatile sig_atomic_t *flag, double grace_s) {
    g_stop_flag = flag;
    g_stop_grace_ms = grace_s > 0 ? (int64_t)(grace_s * 1000) : 0;
    g_stop_seen_ms = -1;
}

void retry_clock_skew(RetryState *rs) {
    if (rs->floor >= 0.5) return;
    rs->base_ms = 1000;
    rs->cap_ms = 60000;
    rs->floor = 0.5;
    rs->retries = 0;
}

bool retry_wait(RetryState *rs) {
    // Full jitter, or with a floor, "equal jitter": at least floor x the step.
    double u = rs->floor + (1 - rs->floor) * rng_uniform(&rs->rng);
    int64_t delay = retry_backoff_ms(rs->retries, rs->base_ms, rs->cap_ms, u);
    int64_t now = time_mono_ms();
    if (now >= rs->deadline_ms) return false;
    int64_t deadline = rs->deadline_ms;
    if (g_stop_flag && *g_stop_flag) {
        int64_t unseen = -1;
        atomic_compare_exchange_strong(&g_stop_seen_ms, &unseen, now);
        int64_t seen = atomic_load(&g_stop_seen_ms);
        if (seen + g_stop_grace_ms < deadline) deadline = seen + g_stop_grace_ms;
        if (now >= deadline) {
            rs->stopped = true;
            return false;
        }
    }
    // The last attempt is made at the deadline, not one backoff before it: an
    // outage that ends within the budget is always survived.
    if (now + delay > deadline) delay = deadline - now;
    time_sleep_ms(delay);
    rs->retries++;
    return true;
}

double retry_elapsed_s(const RetryState *rs) { return (double)(time_mono_ms() - rs->start_ms) / 1000.0; }

bool retry_report_due(RetryState *rs, int64_t now_ms) {
    if (now_ms < rs->report_ms) return false;
    rs->report_ms = now_ms + RETRY_REPORT_EVERY_MS;
    return true;
}
