// Error reporting for library code: functions return 0 on success and -1 on
// failure after filling a caller-owned PailErr (redis anet.c style). Library
// code never exits; main decides. Messages name the thing and what is wrong.
#pragma once
#include <stdarg.h>

typedef enum {
    PAIL_OK = 0,
    PAIL_ERR_IO,            // local I/O failed (open, read, write, fsync)
    PAIL_ERR_INVALID,       // bad input: malformed file, bad key, wrong shape
    PAIL_ERR_NOT_FOUND,     // key / file / tensor does not exist
    PAIL_ERR_EXISTS,        // create-only write lost: the key already exists
    PAIL_ERR_NOT_MODIFIED,  // conditional GET: the object still has the given etag
    PAIL_ERR_AUTH,          // credentials refused (403, bad signature, unknown key)
    PAIL_ERR_NETWORK,       // unreachable endpoint, timeout, retries exhausted
    PAIL_ERR_UNSUPPORTED,   // a feature the file or server uses that pail does not
    PAIL_ERR_NOMEM,
    PAIL_ERR_UNIMPLEMENTED, // not built yet: said plainly, never faked
    PAIL_ERR_INTERRUPTED,   // stopped by a signal or a stop request
    PAIL_ERR_TIMEOUT,       // a wait reached its deadline
    PAIL_ERR_CONFLICT,      // the key collides with another (an object where a folder must be, or the reverse)
} PailErrCode;

typedef struct {
    PailErrCode code;
    char msg[1024];
} PailErr;

// Sets code and a printf-formatted message; returns -1 so callers can
// `return err_set(err, ...)`. err may be NULL.
int err_set(PailErr *err, PailErrCode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Prefixes the existing message with "prefix: " (context as an error travels up).
int err_wrap(PailErr *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(PailErr *err);
const char *err_code_name(PailErrCode code);
