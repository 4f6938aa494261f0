// stderr logger: "2026-11-30T13:20:01Z grpo-train info: message". Every line is valid UTF-8:
// messages quote outside text (an --env program's line, a reward program's stderr), and a
// log that holds invalid bytes breaks whatever reads it next (jq, a JSON shipper, a terminal).
#include "core/log.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/utf8.h"

static const char *g_prog = "pail";
static LogLevel g_level = LOG_INFO;

void log_init(const char *prog, LogLevel level) {
    if (prog) g_prog = prog;
    g_level = level;
    const char *env = getenv("PAIL_LOG");
    if (env) {
        if (!strcmp(env, "debug")) g_level = LOG_DEBUG;
        else if (!strcmp(env, "info")) g_level = LOG_INFO;
        else if (!strcmp(env, "warn")) g_level = LOG_WARN;
        else if (!strcmp(env, "error")) g_level = LOG_ERROR;
    }
}

LogLevel log_level(void) { return g_level; }

void log_msg(LogLevel level, const char *fmt, ...) {
    if (level < g_level) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char ts[32], line[2048], clean[4096];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    utf8_lossy_copy(clean, sizeof clean, line, strlen(line));  // also mends a cut at the 2047th byte
    fprintf(stderr, "%s %s %s: %s\n", ts, g_prog, names[level], clean);
}
