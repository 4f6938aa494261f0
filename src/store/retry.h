// Retry policy for object-store requests: which failures are worth another
// attempt (a pure function, unit-tested on its own) and exponential backoff
// with full jitter bounded by a total time budget. The loop that uses it is in
// store_s3.c; nothing here knows about curl or S3 beyond status codes.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "core/rng.h"

// How a request ended below HTTP (what the transport layer reports).
typedef enum {
    XFER_OK = 0,      // a complete HTTP response arrived (look at the status)
    XFER_CONNECT,     // connection refused / reset before a response
    XFER_RESOLVE,     // DNS lookup failed
    XFER_TIMEOUT,     // connect or transfer stalled past the timeout
    XFER_BROKEN,      // connection dropped mid-request or mid-response
    XFER_TLS,         // certificate or handshake refused: configuration, not luck
    XFER_OTHER,       // anything else (out of memory, bad URL, aborted by us)
} XferResult;

// True when another attempt may succeed: connection errors, DNS failures and
// timeouts; HTTP 5xx except 501; 429; 409 with ConditionalRequestConflict; 400
// with RequestTimeout. Every other 4xx (and 2xx/3xx) is final. code may be NULL.
bool retry_is_transient(XferResult xfer, long status, const char *code);

// Full-jitter backoff for a 0-based retry number: u * min(cap, base * 2^n), u in [0,1).
int64_t retry_backoff_ms(int retry, int64_t base_ms, int64_t cap_ms, double u);

typedef struct {
    int64_t start_ms, deadline_ms;  // monotonic clock
    int64_t base_ms, cap_ms;
    int retries;                    // retries done so far
    Rng rng;
} RetryState;

// budget_s <= 0 -> 60 s. Seeds the jitter from the clock and the address of rs.
void retry_init(RetryState *rs, double budget_s);
// Decides and waits before the next attempt: false (no sleep) when the next
// attempt would start after the deadline, else sleeps the backoff and returns true.
bool retry_wait(RetryState *rs);
double retry_elapsed_s(const RetryState *rs);
