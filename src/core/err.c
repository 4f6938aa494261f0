// PailErr helpers: set, wrap with context, clear. See err.h for the contract.
#include "core/err.h"
#include <stdio.h>
#include <string.h>

int err_set(PailErr *err, PailErrCode code, const char *fmt, ...) {
    if (!err) return -1;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_wrap(PailErr *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return -1;
}

void err_clear(PailErr *err) {
    if (!err) return;
    err->code = PAIL_OK;
    err->msg[0] = 0;
}

const char *err_code_name(PailErrCode code) {
    switch (code) {
    case PAIL_OK: return "ok";
    case PAIL_ERR_IO: return "io";
    case PAIL_ERR_INVALID: return "invalid";
    case PAIL_ERR_NOT_FOUND: return "not found";
    case PAIL_ERR_EXISTS: return "exists";
    case PAIL_ERR_NOT_MODIFIED: return "not modified";
    case PAIL_ERR_AUTH: return "auth";
    case PAIL_ERR_NETWORK: return "network";
    case PAIL_ERR_UNSUPPORTED: return "unsupported";
    case PAIL_ERR_NOMEM: return "out of memory";
    case PAIL_ERR_UNIMPLEMENTED: return "unimplemented";
    case PAIL_ERR_INTERRUPTED: return "interrupted";
    case PAIL_ERR_TIMEOUT: return "timeout";
    case PAIL_ERR_CONFLICT: return "conflict";
    }
    return "unknown";
}
