// Child programs behind pipes (see child.h). posix_spawn rather than fork: the
// caller holds gigabytes of mapped weights and OpenMP threads, and glibc's
// posix_spawn uses CLONE_VFORK, so starting the program copies nothing.
#define _GNU_SOURCE
#include "core/child.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/timeutil.h"
#include "core/utf8.h"

extern char **environ;

void child_init(Child *c) {
    c->pid = -1;
    c->in = c->out = c->err = -1;
    c->tail_len = 0;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

void child_close_stdin(Child *c) { close_fd(&c->in); }

static void tail_add(Child *c, const char *p, size_t n) {
    if (n >= CHILD_TAIL) {
        p += n - CHILD_TAIL;
        n = CHILD_TAIL;
    }
    if (c->tail_len + n > CHILD_TAIL) {
        size_t drop = c->tail_len + n - CHILD_TAIL;
        memmove(c->tail, c->tail + drop, c->tail_len - drop);
        c->tail_len -= drop;
    }
    memcpy(c->tail + c->tail_len, p, n);
    c->tail_len += n;
}

void child_drain_stderr(Child *c) {
    char b[4096];
    while (c->err >= 0) {
        ssize_t r = read(c->err, b, sizeof b);
        if (r > 0) { tail_add(c, b, (size_t)r); continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) close_fd(&c->err);
        break;
    }
}

void child_tail_text(const Child *c, char *out, size_t cap) {
    size_t n = c->tail_len;
    while (n && (c->tail[n - 1] == '\n' || c->tail[n - 1] == '\r')) n--;
    size_t start = n > 480 ? n - 480 : 0;
    int lines = 0;
    for (size_t i = n; i > start; i--)
        if (c->tail[i - 1] == '\n' && ++lines == 6) { start = i; break; }
    char raw[CHILD_TAIL * 3 + 4] = "";
    size_t k = 0;
    for (size_t i = start; i < n && k + 4 < sizeof raw; i++) {
        char ch = c->tail[i];
        if (ch == '\n') { memcpy(raw + k, " | ", 3); k += 3; }
        else if (ch == '\r' || ch == '\t') raw[k++] = ' ';
        else if ((unsigned char)ch < 0x20) raw[k++] = '?';
        else raw[k++] = ch;
    }
    utf8_lossy_copy(out, cap, raw, k);  // the program's bytes: made valid before a log or a JSON sees them
    if (!k) snprintf(out, cap, "(empty)");
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int child_start(Child *c, const char *cmd, const char *what, PailErr *err) {
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
        int e = errno;
        for (int i = 0; i < 2; i++) { close_fd(&pin[i]); close_fd(&pout[i]); close_fd(&perr[i]); }
        return err_set(err, PAIL_ERR_IO, "%s: could not start: pipe: %s", what, strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
    posix_spawnattr_init(&at);
    // Own process group (a stop kills the shell and whatever it started), default
    // SIGPIPE and an empty mask, whatever the caller's threads block or ignore.
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
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
        return err_set(err, PAIL_ERR_IO, "%s: could not start /bin/sh: %s", what, strerror(rc));
    }
    c->pid = pid;
    c->in = pin[1];
    c->out = pout[0];
    c->err = perr[0];
    set_nonblock(c->in);
    set_nonblock(c->out);
    set_nonblock(c->err);
    c->tail_len = 0;
    return 0;
}

void child_stop(Child *c, int grace_ms, char *how, size_t cap) {
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
    child_drain_stderr(c);
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

int64_t child_backoff_ms(int failures) {
    int doublings = failures <= 1 ? 0 : failures - 1 < 6 ? failures - 1 : 6;
    int64_t b = (int64_t)250 << doublings;
    return b < CHILD_BACKOFF_MAX_MS ? b : CHILD_BACKOFF_MAX_MS;
}

// SIGPIPE for a pipe write goes to the writing thread: block it here, and if the
// write failed with EPIPE consume the signal before unblocking (unless one was
// already pending).
ssize_t child_write(Child *c, const void *p, size_t n) {
    sigset_t set, old, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    ssize_t w = write(c->in, p, n);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}
