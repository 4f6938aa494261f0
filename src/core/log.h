// Leveled logging to stderr with a timestamp and the program name. Results go
// to stdout, diagnostics here. Thread-safe (one fprintf per line).
#pragma once

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } LogLevel;

void log_init(const char *prog, LogLevel level);  // level also from PAIL_LOG=debug|info|warn|error
void log_msg(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
LogLevel log_level(void);
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
