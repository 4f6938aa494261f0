// Retry policy for object-store requests: which failures are worth another
// attempt (a pure function, unit-tested on its own) and exponential backoff
// with full jitter bounded by a total time budget (the tools' --max-outage).
// The loop that uses it is in store_s3.c; nothing here knows about curl or S3
// beyond status codes.
#pragma once
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/rng.h"

// How a request ended below HTTP (what the transport layer reports).
typedef enum {
    XFER_OK = 0,      // a complete HTTP response arrived (look at the status)
    XFER_CONNECT,     // connection refused / reset before a response
    XFER_RESOLVE,     // DNS lookup failed
    XFER_TIMEOUT,     // connect or transfer stalled past the timeout
    XFER_BROKEN,      // connection dropped mid-request or mid-response (also after the
                      // whole request went out: an earlier copy may have landed)
    XFER_TLS,         // certificate or handshake refused: configuration, not luck
    XFER_OTHER,       // anything else (out of memory, bad URL, aborted by us)
} XferResult;

// True when another attempt may succeed: connection errors, DNS failures and
// timeouts; HTTP 5xx except 501; 429; 409 with ConditionalRequestConflict; 400
// with RequestTimeout. Every other 4xx (and 2xx/3xx) is final. code may be NULL.
bool retry_is_transient(XferResult xfer, long status, const char *code);

// Full-jitter backoff for a 0-based retry number: u * min(cap, base * 2^n), u in [0,1).
int64_t retry_backoff_ms(int retry, int64_t base_ms, int64_t cap_ms, double u);

// The budget when none is given: an outage of the bucket or relay this long
// costs time, not the run (--max-outage; a plain integer: cli.h prints it).
#define RETRY_DEFAULT_BUDGET_S 3600
// A request still failing this long is reported (one line), then at this period.
#define RETRY_REPORT_AFTER_MS 10000
#define RETRY_REPORT_EVERY_MS 30000

typedef struct {
    int64_t start_ms, deadline_ms;  // monotonic clock
    int64_t base_ms, cap_ms;
    int64_t report_ms;              // next "still failing" report is due then
    double budget_s;
    int retries;                    // retries done so far
    double floor;                   // each sleep is at least this fraction of its step (0: full jitter)
    bool stopped;                   // retry_wait said no because the process is stopping
    Rng rng;
} RetryState;

// A process that is asked to stop (SIGTERM: *flag set by its handler) stops
// retrying within grace_s of the first retry that sees it, whatever is left of
// --max-outage: an outage must not hold a preempted process until SIGKILL. A
// retry's sleep ends early on the signal itself. flag NULL: never.
void retry_stop_on(volatile sig_atomic_t *flag, double grace_s);

// budget_s <= 0 -> RETRY_DEFAULT_BUDGET_S. Seeds the jitter from the clock and
// the address of rs.
void retry_init(RetryState *rs, double budget_s);
// Decides and waits before the next attempt: false (no sleep) once the
// deadline has passed, else sleeps the backoff (cut short to end at the
// deadline, so the last attempt is made there) and returns true; false (and
// rs->stopped) also once a stop (retry_stop_on) is older than its grace.
bool retry_wait(RetryState *rs);
double retry_elapsed_s(const RetryState *rs);
// Switches rs to the schedule for a clock out of the server's window (it may
// be fixed any moment, but not in milliseconds): sleeps of 0.5-1 s, doubling
// up to a minute; the budget is unchanged. Idempotent.
void retry_clock_skew(RetryState *rs);
// True when a long failure should be reported at now_ms (monotonic): once
// RETRY_REPORT_AFTER_MS after the start, then every RETRY_REPORT_EVERY_MS
// after the previous report; never per retry.
bool retry_report_due(RetryState *rs, int64_t now_ms);
