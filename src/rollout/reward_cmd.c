// The cmd reward's program runner (see reward_cmd.h). posix_spawn rather than
// fork: the worker holds gigabytes of mapped weights and OpenMP threads, and
// glibc's posix_spawn uses CLONE_VFORK, so starting the program copies nothing.
// All pipes are non-blocking and serviced from one poll loop, so a program that
// answers line by line while we are still writing never deadlocks against us.
#define _GNU_SOURCE
#include "rollout/reward_cmd.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/log.h"
#include "core/timeutil.h"

extern char **environ;

#define CMD_MAX_LINE (64 * 1024)   // an answer is a number: a longer line is garbage
#define CMD_TAIL 2048              // stderr bytes kept for messages
#define CMD_BACKOFF_MS 250         // first restart delay after a crash or timeout
#define CMD_BACKOFF_MAX_MS 10000

struct RewardCmd {
    char *cmd;          // owned
    double timeout_s;
    pid_t pid;          // -1 when not running; also the process group id
    int in, out, err;   // our ends of its stdin/stdout/stderr pipes, -1 when closed
    Buf line;           // stdout bytes not yet ending in '\n'
    char tail[CMD_TAIL];  // the last bytes of its stderr
    size_t tail_len;
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
    c->pid = -1;
    c->in = c->out = c->err = -1;
    *out = c;
    return 0;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static void tail_add(RewardCmd *c, const char *p, size_t n) {
    if (n >= CMD_TAIL) {
        p += n - CMD_TAIL;
        n = CMD_TAIL;
    }
    if (c->tail_len + n > CMD_TAIL) {
        size_t drop = c->tail_len + n - CMD_TAIL;
        memmove(c->tail, c->tail + drop, c->tail_len - drop);
        c->tail_len -= drop;
    }
    memcpy(c->tail + c->tail_len, p, n);
    c->tail_len += n;
}

// Reads what is available on stderr without blocking; closes it at EOF.
static void drain_stderr(RewardCmd *c) {
    char b[4096];
    while (c->err >= 0) {
        ssize_t r = read(c->err, b, sizeof b);
        if (r > 0) { tail_add(c, b, (size_t)r); continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) close_fd(&c->err);
        break;
    }
}

// The last lines of stderr on one line ("a | b | c"), at most cap-1 bytes.
static void tail_text(const RewardCmd *c, char *out, size_t cap) {
    size_t n = c->tail_len;
    while (n && (c->tail[n - 1] == '\n' || c->tail[n - 1] == '\r')) n--;
    size_t start = n > 480 ? n - 480 : 0;
    int lines = 0;
    for (size_t i = n; i > start; i--)
        if (c->tail[i - 1] == '\n' && ++lines == 6) { start = i; break; }
    size_t k = 0;
    for (size_t i = start; i < n && k + 4 < cap; i++) {
        char ch = c->tail[i];
        if (ch == '\n') { memcpy(out + k, " | ", 3); k += 3; }
        else if (ch == '\r' || ch == '\t') out[k++] = ' ';
        else if ((unsigned char)ch < 0x20) out[k++] = '?';
        else out[k++] = ch;
    }
    out[k] = 0;
    if (!k) snprintf(out, cap, "(empty)");
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int start_program(RewardCmd *c, PailErr *warn) {
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
        int e = errno;
        for (int i = 0; i < 2; i++) { close_fd(&pin[i]); close_fd(&pout[i]); close_fd(&perr[i]); }
        return err_set(warn, PAIL_ERR_IO, "reward cmd '%s': could not start: pipe: %s", c->cmd, strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
    posix_spawnattr_init(&at);
    // Own process group (a timeout kills the shell and whatever it started), default
    // SIGPIPE and an empty mask, whatever the worker's threads block or ignore.
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {"sh", "-c", c->cmd, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close_fd(&pin[0]);
    close_fd(&pout[1]);
    close_fd(&perr[1]);
    if (rc != 0) {
        close_fd(&pin[1]);
        close_fd(&pout[0]);
        close_fd(&perr[0]);
        return err_set(warn, PAIL_ERR_IO, "reward cmd '%s': could not start /bin/sh: %s", c->cmd, strerror(rc));
    }
    c->pid = pid;
    c->in = pin[1];
    c->out = pout[0];
    c->err = perr[0];
    set_nonblock(c->in);
    set_nonblock(c->out);
    set_nonblock(c->err);
    buf_reset(&c->line);
    c->tail_len = 0;
    c->resync = false;
    return 0;
}

// Stops the program: waits up to grace_ms for it to exit by itself, then kills its
// whole group. Describes how it ended into how (for messages).
static void stop_program(RewardCmd *c, int grace_ms, char *how, size_t cap) {
    if (how) how[0] = 0;
    if (c->pid < 0) return;
    int status = 0;
    pid_t w = 0;
    for (int64_t end = time_mono_ms() + grace_ms;;) {
        w = waitpid(c->pid, &status, WNOHANG);
        if (w != 0 || time_mono_ms() >= end) break;
        time_sleep_ms(5);
    }
    kill(-c->pid, SIGKILL);  // also any children left holding the pipes
    if (w == 0) while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {}
    drain_stderr(c);
    if (how) {
        if (w == 0) snprintf(how, cap, "killed");
        else if (w < 0) snprintf(how, cap, "lost (waitpid: %s)", strerror(errno));
        else if (WIFEXITED(status) && WEXITSTATUS(status) > 128 && WEXITSTATUS(status) < 128 + NSIG)
            // the shell's convention for a command that a signal killed
            snprintf(how, cap, "exited with status %d (its command was killed by signal %d, %s)", WEXITSTATUS(status),
                     WEXITSTATUS(status) - 128, strsignal(WEXITSTATUS(status) - 128));
        else if (WIFEXITED(status))
            snprintf(how, cap, "exited with status %d%s", WEXITSTATUS(status),
                     WEXITSTATUS(status) == 127 ? " (command not found)" :
                     WEXITSTATUS(status) == 126 ? " (not executable)" : "");
        else if (WIFSIGNALED(status))
            snprintf(how, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        else snprintf(how, cap, "ended (status 0x%x)", status);
    }
    close_fd(&c->in);
    close_fd(&c->out);
    close_fd(&c->err);
    c->pid = -1;
}

void reward_cmd_free(RewardCmd *c) {
    if (!c) return;
    close_fd(&c->in);  // EOF: a well-behaved program exits now
    stop_program(c, 1000, NULL, 0);
    buf_free(&c->line);
    free(c->cmd);
    free(c);
}

int reward_cmd_failures(const RewardCmd *c) { return c->failures; }

// write() that cannot raise SIGPIPE in this process: SIGPIPE for a pipe write is
// sent to the writing thread, so block it here, and if the write failed with EPIPE
// consume the signal before unblocking (unless one was already pending).
static ssize_t write_nosigpipe(int fd, const void *p, size_t n) {
    sigset_t set, old, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    ssize_t w = write(fd, p, n);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}

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

static void quote_snippet(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < cap; i++) out[k++] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    if (n && k < n && k + 4 >= cap) { memcpy(out + k, "...", 3); k += 3; }
    out[k] = 0;
}

// A crash or timeout: the next start waits 0.25 s, doubling per failed batch in a
// row, at most 10 s.
static void note_failure(RewardCmd *c) {
    c->failures++;
    int64_t backoff = (int64_t)CMD_BACKOFF_MS << (c->failures - 1 < 6 ? c->failures - 1 : 6);
    c->restart_at_ms = time_mono_ms() + (backoff < CMD_BACKOFF_MAX_MS ? backoff : CMD_BACKOFF_MAX_MS);
}

int reward_cmd_run(RewardCmd *c, const char *text, size_t len, int64_t n, double *scores, uint8_t *ok,
                   PailErr *warn) {
    for (int64_t i = 0; i < n; i++) { scores[i] = 0; ok[i] = 0; }
    if (n <= 0) return 0;
    if (c->pid >= 0) {
        // Bytes on stdout before we asked anything: the last batch was out of step.
        drain_stderr(c);
        char b[256];
        ssize_t r = c->resync ? 0 : read(c->out, b, sizeof b);
        if (!c->resync && r > 0)
            log_warn("reward cmd '%s': wrote to stdout between batches; restarting it", c->cmd);
        else if (!c->resync && r == 0)
            log_warn("reward cmd '%s': exited between batches; restarting it", c->cmd);
        if (c->resync || r >= 0) stop_program(c, 0, NULL, 0);
    }
    if (c->pid < 0) {
        int64_t wait = c->restart_at_ms - time_mono_ms();
        if (c->failures > 0 && wait > 0) time_sleep_ms(wait);  // backoff, never a hot loop
        if (start_program(c, warn) < 0) {
            note_failure(c);
            return (int)n;
        }
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
        if (wpos < len && !stdin_closed) { iin = np; p[np++] = (struct pollfd){.fd = c->in, .events = POLLOUT}; }
        iout = np;
        p[np++] = (struct pollfd){.fd = c->out, .events = POLLIN};
        if (c->err >= 0) { ierr = np; p[np++] = (struct pollfd){.fd = c->err, .events = POLLIN}; }
        int pr = poll(p, (nfds_t)np, (int)(left > 1000 ? 1000 : left));
        if (pr < 0 && errno != EINTR) { what = "poll failed"; break; }
        if (pr <= 0) continue;
        if (iin >= 0 && (p[iin].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write_nosigpipe(c->in, text + wpos, len - wpos);
            if (w > 0) wpos += (size_t)w;
            else if (w < 0 && errno == EPIPE) stdin_closed = true;  // it stopped reading: its stdout says why
        }
        if (ierr >= 0 && p[ierr].revents) drain_stderr(c);
        if (p[iout].revents) {
            ssize_t r = read(c->out, buf, sizeof buf);
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
        ssize_t r = read(c->out, buf, sizeof buf);
        if (r > 0) extra = true;
    }
    if (extra) {
        // Surplus lines: answers and inputs are out of step, so none can be trusted.
        for (int64_t i = 0; i < n; i++) ok[i] = 0;
        stop_program(c, 0, NULL, 0);
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
            stop_program(c, 0, how, sizeof how);
            snprintf(how, sizeof how, "timed out after %.3g s (does it flush stdout after each answer? "
                                      "e.g. print(x, flush=True))", secs);
        } else if (!strcmp(what, "long")) {
            stop_program(c, 0, how, sizeof how);
            snprintf(how, sizeof how, "wrote an answer line longer than %d bytes", CMD_MAX_LINE);
        } else {
            stop_program(c, 200, how, sizeof how);
            if (!strcmp(how, "killed")) snprintf(how, sizeof how, "closed its stdout (then killed)");
            if (!strcmp(what, "oom")) snprintf(how, sizeof how, "out of memory reading its output");
            else if (!strcmp(what, "poll failed")) snprintf(how, sizeof how, "poll failed");
        }
        tail_text(c, tail, sizeof tail);
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
        drain_stderr(c);
        tail_text(c, tail, sizeof tail);
        err_set(warn, PAIL_ERR_INVALID,
                "reward cmd '%s': %lld of %lld answers are not numbers (line %lld: '%s'); restarted at the next batch; stderr: %s",
                c->cmd, (long long)bad, (long long)n, (long long)first_bad + 1, bad_text, tail);
        return (int)bad;
    }
    return 0;
}
