// The cmd reward's program runner (see reward_cmd.h), a core/child.h program.
// All pipes are non-blocking and serviced from one poll loop, so a program that
// answers line by line while we are still writing never deadlocks against us.
#define _GNU_SOURCE
#include "rollout/reward_cmd.h"
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/child.h"
#include "core/log.h"
#include "core/timeutil.h"
#include "core/utf8.h"

#define CMD_MAX_LINE (64 * 1024)   // an answer is a number: a longer line is garbage

struct RewardCmd {
    char *cmd;          // owned
    double timeout_s;
    Child ch;           // the program, when running (ch.pid >= 0)
    Buf line;           // stdout bytes not yet ending in '\n'
    bool resync;        // restart before the next batch (output may be out of step)
    int failures;       // consecutive batches ending in a crash or timeout
    int64_t restart_at_ms;
};

int reward_cmd_init(RewardCmd **out, const char *cmd, double timeout_s, PailErr *err) {
    *out = NULL;
    if (!cmd || !cmd[0]) return err_set(err, PAIL_ERR_INVALID, "reward cmd: empty command (give --reward-cmd \"program args\")");
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return err_set(err, PAIL_ERR_INVALID, "reward cmd '%s': timeout %g s (need > 0)", cmd, timeout_s);
    RewardCmd *c = calloc(1, sizeof *c);
    if (!c || !(c->cmd = strdup(cmd))) {
        free(c);
        return err_set(err, PAIL_ERR_NOMEM, "reward cmd: out of memory");
    }
    c->timeout_s = timeout_s;
    child_init(&c->ch);
    *out = c;
    return 0;
}

void reward_cmd_free(RewardCmd *c) {
    if (!c) return;
    child_close_stdin(&c->ch);  // EOF: a well-behaved program exits now
    child_stop(&c->ch, 1000, NULL, 0);
    buf_free(&c->line);
    free(c->cmd);
    free(c);
}

int reward_cmd_failures(const RewardCmd *c) { return c->failures; }

// A whole line holding one finite number (surrounding whitespace allowed).
static bool parse_answer(const char *s, size_t n, double *v) {
    char tmp[64];
    while (n && (*s == ' ' || *s == '\t')) { s++; n--; }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    if (!n || n >= sizeof tmp) return false;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    char *end;
    errno = 0;
    *v = strtod(tmp, &end);
    return end == tmp + n && isfinite(*v) && (tmp[0] == '-' || tmp[0] == '+' || tmp[0] == '.' || (tmp[0] >= '0' && tmp[0] <= '9'));
}

// The start of a line the program wrote, for a message: valid UTF-8 (U+FFFD for invalid
// bytes), control bytes as '?', "..." when cut.
static void quote_snippet(const char *s, size_t n, char *out, size_t cap) {
    size_t used = utf8_lossy_copy(out, cap - 3, s, n), k = strlen(out);
    for (size_t i = 0; i < k; i++)
        if ((unsigned char)out[i] < 0x20) out[i] = '?';
    if (used < n) { memcpy(out + k, "...", 3); k += 3; }
    out[k] = 0;
}

// A crash or timeout: the next start waits 0.25 s, doubling per failed batch in a
// row, at most 10 s.
static void note_failure(RewardCmd *c) {
    c->failures++;
    c->restart_at_ms = time_mono_ms() + child_backoff_ms(c->failures);
}

int reward_cmd_run(RewardCmd *c, const char *text, size_t len, int64_t n, double *scores, uint8_t *ok,
                   PailErr *warn) {
    for (int64_t i = 0; i < n; i++) { scores[i] = 0; ok[i] = 0; }
    if (n <= 0) return 0;
    if (c->ch.pid >= 0) {
        // Bytes on stdout before we asked anything: the last batch was out of step.
        child_drain_stderr(&c->ch);
        char b[256];
        ssize_t r = c->resync ? 0 : read(c->ch.out, b, sizeof b);
        if (!c->resync && r > 0)
            log_warn("reward cmd '%s': wrote to stdout between batches; restarting it", c->cmd);
        else if (!c->resync && r == 0)
            log_warn("reward cmd '%s': exited between batches; restarting it", c->cmd);
        if (c->resync || r >= 0) child_stop(&c->ch, 0, NULL, 0);
    }
    if (c->ch.pid < 0) {
        int64_t wait = c->restart_at_ms - time_mono_ms();
        if (c->failures > 0 && wait > 0) time_sleep_ms(wait);  // backoff, never a hot loop
        char what[256];
        snprintf(what, sizeof what, "reward cmd '%.200s'", c->cmd);
        if (child_start(&c->ch, c->cmd, what, warn) < 0) {
            note_failure(c);
            return (int)n;
        }
        buf_reset(&c->line);
        c->resync = false;
    }
    int64_t deadline = time_mono_ms() + (int64_t)(c->timeout_s * 1000.0);
    size_t wpos = 0;
    int64_t got = 0, bad = 0, first_bad = -1;
    char bad_text[64] = "";
    const char *what = NULL;  // how the batch ended early
    bool stdin_closed = false, extra = false;
    char buf[16384];
    while (got < n && !what) {
        int64_t left = deadline - time_mono_ms();
        if (left <= 0) { what = "timeout"; break; }
        struct pollfd p[3];
        int np = 0, iin = -1, iout, ierr = -1;
        if (wpos < len && !stdin_closed) { iin = np; p[np++] = (struct pollfd){.fd = c->ch.in, .events = POLLOUT}; }
        iout = np;
        p[np++] = (struct pollfd){.fd = c->ch.out, .events = POLLIN};
        if (c->ch.err >= 0) { ierr = np; p[np++] = (struct pollfd){.fd = c->ch.err, .events = POLLIN}; }
        int pr = poll(p, (nfds_t)np, (int)(left > 1000 ? 1000 : left));
        if (pr < 0 && errno != EINTR) { what = "poll failed"; break; }
        if (pr <= 0) continue;
        if (iin >= 0 && (p[iin].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = child_write(&c->ch, text + wpos, len - wpos);
            if (w > 0) wpos += (size_t)w;
            else if (w < 0 && errno == EPIPE) stdin_closed = true;  // it stopped reading: its stdout says why
        }
        if (ierr >= 0 && p[ierr].revents) child_drain_stderr(&c->ch);
        if (p[iout].revents) {
            ssize_t r = read(c->ch.out, buf, sizeof buf);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) { what = "eof"; break; }
            if (buf_append(&c->line, buf, (size_t)r) < 0) { what = "oom"; break; }
            size_t start = 0;
            for (size_t i = 0; i < c->line.len; i++) {
                if (c->line.data[i] != '\n') continue;
                const char *ln = (const char *)c->line.data + start;
                size_t ll = i - start;
                start = i + 1;
                if (got == n) { extra = true; break; }
                if (parse_answer(ln, ll, &scores[got])) {
                    ok[got] = 1;
                } else {
                    scores[got] = 0;
                    bad++;
                    if (first_bad < 0) { first_bad = got; quote_snippet(ln, ll, bad_text, sizeof bad_text); }
                }
                got++;
            }
            if (extra || (got == n && start < c->line.len)) { extra = true; break; }
            memmove(c->line.data, c->line.data + start, c->line.len - start);
            c->line.len -= start;
            if (c->line.len > CMD_MAX_LINE) { what = "long"; break; }
        }
    }
    buf_reset(&c->line);
    if (got == n && wpos < len) extra = true;  // answered before reading all input
    if (got == n && !extra && !what) {
        // Surplus already in the pipe is caught here at no cost; surplus written
        // later is caught at the next batch's start (restart, logged), too late to
        // drop this batch: the protocol has no batch terminator to wait for.
        ssize_t r = read(c->ch.out, buf, sizeof buf);
        if (r > 0) extra = true;
    }
    if (extra) {
        // Surplus lines: answers and inputs are out of step, so none can be trusted.
        for (int64_t i = 0; i < n; i++) ok[i] = 0;
        child_stop(&c->ch, 0, NULL, 0);
        err_set(warn, PAIL_ERR_INVALID,
                "reward cmd '%s': wrote more lines than the %lld inputs (debug prints on stdout? use stderr); "
                "the batch's answers are out of step and were dropped; restarted at the next batch",
                c->cmd, (long long)n);
        return (int)n;
    }
    if (what) {
        char how[128], tail[600];
        double secs = c->timeout_s;
        if (!strcmp(what, "timeout")) {
            child_stop(&c->ch, 0, how, sizeof how);
            snprintf(how, sizeof how, "timed out after %.3g s (does it flush stdout after each answer? "
                                      "e.g. print(x, flush=True))", secs);
        } else if (!strcmp(what, "long")) {
            child_stop(&c->ch, 0, how, sizeof how);
            snprintf(how, sizeof how, "wrote an answer line longer than %d bytes", CMD_MAX_LINE);
        } else {
            child_stop(&c->ch, 200, how, sizeof how);
            if (!strcmp(how, "killed")) snprintf(how, sizeof how, "closed its stdout (then killed)");
            if (!strcmp(what, "oom")) snprintf(how, sizeof how, "out of memory reading its output");
            else if (!strcmp(what, "poll failed")) snprintf(how, sizeof how, "poll failed");
        }
        child_tail_text(&c->ch, tail, sizeof tail);
        note_failure(c);
        err_set(warn, PAIL_ERR_IO, "reward cmd '%s': %s after %lld of %lld answers%s; restarted at the next batch; stderr: %s",
                c->cmd, how, (long long)got, (long long)n, bad ? " (and non-number answers)" : "", tail);
        return (int)(n - got + bad);
    }
    c->failures = 0;
    if (bad) {
        // Non-numbers fail their completions; restart so a program that wrote an
        // extra line cannot shift the next batch's answers.
        c->resync = true;
        char tail[400];
        child_drain_stderr(&c->ch);
        child_tail_text(&c->ch, tail, sizeof tail);
        err_set(warn, PAIL_ERR_INVALID,
                "reward cmd '%s': %lld of %lld answers are not numbers (line %lld: '%s'); restarted at the next batch; stderr: %s",
                c->cmd, (long long)bad, (long long)n, (long long)first_bad + 1, bad_text, tail);
        return (int)bad;
    }
    return 0;
}
