// The environment program's runner (see env.h): requests queued in one write
// buffer, every pipe non-blocking and serviced from env_poll, so a program
// that answers while we still write never deadlocks against us.
#include "rollout/env.h"
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/buf.h"
#include "shard/shard.h"
#include "core/child.h"
#include "core/log.h"
#include "core/timeutil.h"
#include "core/utf8.h"

#define ENV_MAX_LINE (16 << 20)  // one answer; longer is a runaway program
#define ENV_REWARD_MAX 1e6       // as the shard's bound

typedef struct {
    bool open, awaiting;
    int64_t deadline_ms;  // of the request it awaits
} EnvEp;

typedef struct {
    Env base;             // first: an Env * is a ProgEnv *
    char *cmd;            // owned
    char what[256];       // "environment 'cmd'" for messages
    double timeout_s;
    int cap;
    Child ch;
    Buf wq;               // requests not yet written (wpos of them written)
    size_t wpos;
    Buf line;             // stdout bytes not yet ending in '\n'
    EnvEp *eps;           // (cap)
    char prefix[208];
    int failures;         // program failures in a row
    int64_t restart_at_ms, last_output_ms;
    EnvEvent *q;          // events not yet handed out
    int qn, qcap;
    EnvStats st;
} ProgEnv;

static const EnvOps PROG_OPS;

int env_init(Env **out, const char *cmd, double timeout_s, int max_episodes, PailErr *err) {
    *out = NULL;
    if (!cmd || !cmd[0]) return err_set(err, PAIL_ERR_INVALID, "--env: empty command");
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return err_set(err, PAIL_ERR_INVALID, "--env-timeout %g s: need > 0", timeout_s);
    if (max_episodes < 1) return err_set(err, PAIL_ERR_INVALID, "environment: %d episodes per batch", max_episodes);
    ProgEnv *e = calloc(1, sizeof *e);
    if (!e || !(e->cmd = strdup(cmd)) || !(e->eps = calloc((size_t)max_episodes, sizeof *e->eps))) {
        if (e) free(e->cmd);
        free(e);
        return err_set(err, PAIL_ERR_NOMEM, "environment: out of memory");
    }
    snprintf(e->what, sizeof e->what, "environment '%.200s'", cmd);
    e->timeout_s = timeout_s;
    e->cap = max_episodes;
    child_init(&e->ch);
    snprintf(e->prefix, sizeof e->prefix, "e");
    e->base.ops = &PROG_OPS;
    *out = &e->base;
    return 0;
}


static void prog_free(ProgEnv *e) {
    if (!e) return;
    // What is queued (the "cancel" of each episode still open) is written first, for up to
    // 1 s: a worker that stops mid-batch closes its episodes before the EOF.
    for (int64_t end = time_mono_ms() + 1000; e->ch.pid >= 0 && e->wpos < e->wq.len && time_mono_ms() < end;) {
        struct pollfd p = {.fd = e->ch.in, .events = POLLOUT};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t w = child_write(&e->ch, e->wq.data + e->wpos, e->wq.len - e->wpos);
        if (w <= 0) break;
        e->wpos += (size_t)w;
    }
    child_close_stdin(&e->ch);  // EOF: a well-behaved program exits now
    child_stop(&e->ch, 1000, NULL, 0);
    for (int i = 0; i < e->qn; i++) env_event_free(&e->q[i]);
    free(e->q);
    buf_free(&e->wq);
    buf_free(&e->line);
    free(e->eps);
    free(e->cmd);
    free(e);
}

static const char *prog_describe(const ProgEnv *e) { return e->what; }
static EnvStats prog_stats(const ProgEnv *e) { return e->st; }

static int prog_open(const ProgEnv *e) {
    int n = 0;
    for (int k = 0; k < e->cap; k++) n += e->eps[k].open;
    return n;
}

// Queues an event; on out of memory the episode still closes (its caller sees
// no event and times it out itself: env_open drops).
static EnvEvent *push_event(ProgEnv *e, EnvEventType type, int k) {
    return env_event_push(&e->q, &e->qn, &e->qcap, type, k);
}

EnvEvent *env_event_push(EnvEvent **q, int *n, int *cap, EnvEventType type, int k) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        EnvEvent *nq = realloc(*q, (size_t)nc * sizeof *nq);
        if (!nq) return NULL;
        *q = nq;
        *cap = nc;
    }
    EnvEvent *ev = &(*q)[(*n)++];
    memset(ev, 0, sizeof *ev);
    ev->type = type;
    ev->k = k;
    return ev;
}

static void fail_episode(ProgEnv *e, int k, const char *why) {
    if (!e->eps[k].open) return;
    e->eps[k].open = e->eps[k].awaiting = false;
    e->st.failed++;
    EnvEvent *ev = push_event(e, ENV_FAILED, k);
    if (ev) snprintf(ev->why, sizeof ev->why, "%s", why);
}

static void fail_all(ProgEnv *e, const char *why) {
    for (int k = 0; k < e->cap; k++) fail_episode(e, k, why);
}

// The program is gone or not to be trusted: stop it, fail what was open with
// it, start again after the back-off.
static void program_failed(ProgEnv *e, int grace_ms, const char *what) {
    char how[160], tail[600], why[1024];
    child_stop(&e->ch, grace_ms, how, sizeof how);
    child_tail_text(&e->ch, tail, sizeof tail);
    snprintf(why, sizeof why, "%s %s%s%s; restarted; stderr: %s", e->what, what, how[0] ? " and " : "", how, tail);
    log_warn("%s (%d episodes open with it fail)", why, prog_open(e));
    e->st.restarts++;
    fail_all(e, why);
    e->failures++;
    e->restart_at_ms = time_mono_ms() + child_backoff_ms(e->failures);
    buf_reset(&e->wq);  // requests of episodes that just failed
    e->wpos = 0;
    buf_reset(&e->line);
}

static void id_of(const ProgEnv *e, int k, char *out, size_t cap) { env_episode_id(e->prefix, k, out, cap); }

static int queue(ProgEnv *e, int k, json_t *msg, bool await, PailErr *err) {
    char id[232];
    id_of(e, k, id, sizeof id);
    json_object_set_new(msg, "id", json_string(id));
    char *text = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(msg);
    if (!text || buf_append(&e->wq, text, strlen(text)) < 0 || buf_append(&e->wq, "\n", 1) < 0) {
        free(text);
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for a request", e->what);
    }
    free(text);
    if (await) {
        e->eps[k].awaiting = true;
        e->eps[k].deadline_ms = time_mono_ms() + (int64_t)(e->timeout_s * 1000.0);
    }
    return 0;
}

static void prog_cancel(ProgEnv *e, int k, const char *why);

static void prog_begin(ProgEnv *e, const char *prefix) {
    for (int k = 0; k < e->cap; k++) prog_cancel(e, k, NULL);
    snprintf(e->prefix, sizeof e->prefix, "%s", prefix);
}

static int check_k(const ProgEnv *e, int k, PailErr *err) {
    if (k < 0 || k >= e->cap) return err_set(err, PAIL_ERR_INVALID, "%s: episode %d of %d", e->what, k, e->cap);
    return 0;
}

static int prog_start(ProgEnv *e, int k, const json_t *row, PailErr *err) {
    if (check_k(e, k, err) < 0) return -1;
    json_t *m = json_pack("{s:s, s:O}", "type", "start", "row", row ? (json_t *)row : json_null());
    if (!m) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for a request", e->what);
    e->eps[k].open = true;
    e->st.starts++;
    return queue(e, k, m, true, err);
}

static int prog_step(ProgEnv *e, int k, const json_t *fields, PailErr *err) {
    if (check_k(e, k, err) < 0) return -1;
    if (!e->eps[k].open) return 0;  // failed meanwhile: its event is queued
    json_t *m = json_deep_copy(fields);
    if (!m || json_object_set_new(m, "type", json_string("step")) < 0)
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for a request", e->what);
    return queue(e, k, m, true, err);
}

static int prog_end(ProgEnv *e, int k, const char *reason, PailErr *err) {
    if (check_k(e, k, err) < 0) return -1;
    if (!e->eps[k].open) return 0;
    json_t *m = json_pack("{s:s, s:s}", "type", "end", "reason", reason);
    if (!m) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for a request", e->what);
    return queue(e, k, m, true, err);
}

static void prog_cancel(ProgEnv *e, int k, const char *why) {
    (void)why;  // the program needs no reason
    if (k < 0 || k >= e->cap || !e->eps[k].open) return;
    e->eps[k].open = e->eps[k].awaiting = false;
    PailErr err = {0};
    if (e->ch.pid >= 0) queue(e, k, json_pack("{s:s}", "type", "cancel"), false, &err);
}

// The start of a line the program wrote, for a message: valid UTF-8 (invalid bytes become
// U+FFFD: the message goes to the log and the heartbeat's JSON), control bytes as '?'.
static void snippet(const char *s, size_t n, char *out, size_t cap) {
    size_t used = utf8_lossy_copy(out, cap - 3, s, n), k = strlen(out);
    for (size_t i = 0; i < k; i++)
        if ((unsigned char)out[i] < 0x20) out[i] = '?';
    if (used < n) { memcpy(out + k, "...", 3); k += 3; }
    out[k] = 0;
}

// The episode an answer's id names, or -1 (not of this batch, out of range, not open).
static int episode_of(const ProgEnv *e, const char *id) {
    int k = env_episode_index(e->prefix, id, e->cap);
    return k >= 0 && e->eps[k].open ? k : -1;
}

bool env_reward_ok(const json_t *v) {
    return json_is_number(v) && isfinite(json_number_value(v)) && fabs(json_number_value(v)) <= ENV_REWARD_MAX;
}

_Static_assert(SHARD_MAX_COMPONENTS == 32, "the refusal below names 32");
bool env_components_ok(const json_t *o) {
    if (!json_is_object(o) || json_object_size(o) > SHARD_MAX_COMPONENTS) return false;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) if (!env_reward_ok(v)) return false;
    return true;
}

static bool messages_ok(const json_t *m) {
    if (!json_is_array(m) || json_array_size(m) == 0) return false;
    size_t i;
    json_t *v;
    json_array_foreach(m, i, v) if (!json_is_object(v) || !json_is_string(json_object_get(v, "role"))) return false;
    return true;
}

// One answer line. Returns false when the stream cannot be trusted any more.
static bool handle_line(ProgEnv *e, const char *s, size_t n) {
    char snip[120], why[512];
    e->base.lines++;
    json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        e->st.bad_lines++;
        snippet(s, n, snip, sizeof snip);
        snprintf(why, sizeof why, "wrote a line that is not a JSON object ('%s'; debug prints go to stderr)", snip);
        program_failed(e, 0, why);
        return false;
    }
    const char *id = json_string_value(json_object_get(j, "id"));
    int k = id ? episode_of(e, id) : -1;
    if (k < 0) {
        if (e->st.unknown_ids++ < 5 || e->st.unknown_ids % 100 == 0)
            log_warn("%s: answer for %s%s%s, which is not an open episode (late, after a timeout?): dropped (%lld so far)",
                     e->what, id ? "episode '" : "no episode id", id ? id : "", id ? "'" : "", (long long)e->st.unknown_ids);
        json_decref(j);
        return true;
    }
    EnvEp *ep = &e->eps[k];
    json_t *msgs = json_object_get(j, "messages"), *tools = json_object_get(j, "tools"),
           *rew = json_object_get(j, "reward"), *comps = json_object_get(j, "components"),
           *er = json_object_get(j, "error");
    const char *bad = NULL;
    if (!ep->awaiting) bad = "an answer nothing asked for (two answers to one request?)";
    else if (er) {
        snippet(json_string_value(er) ? json_string_value(er) : "(not a string)", 
                json_string_value(er) ? strlen(json_string_value(er)) : 14, snip, sizeof snip);
        snprintf(why, sizeof why, "%s: episode %s: the program says: %s", e->what, id, snip);
        fail_episode(e, k, why);
    } else if (rew) {
        if (!env_reward_ok(rew))
            bad = "\"reward\" is not a finite number within +-1e6";
        else if (comps && !env_components_ok(comps))
            bad = "\"components\" is not an object of at most 32 finite numbers within +-1e6";
        else if (msgs)
            bad = "both \"reward\" and \"messages\"";
        else {
            EnvEvent *ev = push_event(e, ENV_REWARD, k);
            ep->open = ep->awaiting = false;
            if (ev) {
                ev->reward = json_number_value(rew);
                ev->components = json_incref(comps);
            }
        }
    } else if (msgs) {
        if (!messages_ok(msgs)) bad = "\"messages\" is not a non-empty array of objects with a string \"role\"";
        else if (tools && !json_is_array(tools) && !json_is_null(tools)) bad = "\"tools\" is not an array";
        else {
            EnvEvent *ev = push_event(e, ENV_MESSAGES, k);
            ep->awaiting = false;
            if (ev) {
                ev->messages = json_incref(msgs);
                ev->tools = json_is_array(tools) ? json_incref(tools) : NULL;
            } else {
                fail_episode(e, k, "out of memory for an answer");
            }
        }
    } else {
        bad = "none of \"messages\", \"reward\", \"error\"";
    }
    if (bad) {
        snippet(s, n, snip, sizeof snip);
        snprintf(why, sizeof why, "%s: episode %s: %s: '%s'", e->what, id, bad, snip);
        log_warn("%s", why);
        fail_episode(e, k, why);
    }
    json_decref(j);
    return true;
}

static void read_output(ProgEnv *e) {
    char b[65536];
    for (;;) {
        ssize_t r = read(e->ch.out, b, sizeof b);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return;  // EAGAIN: nothing more now
        if (r == 0) { program_failed(e, 200, "closed its stdout"); return; }
        e->last_output_ms = time_mono_ms();
        if (buf_append(&e->line, b, (size_t)r) < 0) { program_failed(e, 0, "(out of memory reading its answers)"); return; }
        size_t start = 0;
        for (size_t i = 0; i < e->line.len; i++) {
            if (e->line.data[i] != '\n') continue;
            size_t ll = i - start;
            const char *ln = (const char *)e->line.data + start;
            start = i + 1;
            while (ll && (ln[ll - 1] == '\r' || ln[ll - 1] == ' ')) ll--;
            if (ll == 0) continue;  // blank lines are allowed
            if (!handle_line(e, ln, ll)) return;  // restarted: the rest is of the old program
        }
        memmove(e->line.data, e->line.data + start, e->line.len - start);
        e->line.len -= start;
        if (e->line.len > ENV_MAX_LINE) {
            char why[96];
            snprintf(why, sizeof why, "wrote a line longer than %d MiB", ENV_MAX_LINE >> 20);
            program_failed(e, 0, why);
            return;
        }
    }
}

static void apply_timeouts(ProgEnv *e) {
    int64_t now = time_mono_ms();
    bool any = false;
    for (int k = 0; k < e->cap; k++) {
        EnvEp *ep = &e->eps[k];
        if (!ep->open || !ep->awaiting || now < ep->deadline_ms) continue;
        char why[512], id[232];
        id_of(e, k, id, sizeof id);
        snprintf(why, sizeof why, "%s: episode %s: no answer within %g s (--env-timeout; does it flush stdout after "
                 "each line?)", e->what, id, e->timeout_s);
        if (!any) log_warn("%s", why);
        any = true;
        e->st.timeouts++;
        fail_episode(e, k, why);
    }
    // Silent for a whole timeout with a request outstanding: hung, start it again.
    if (any && e->ch.pid >= 0 && now - e->last_output_ms >= (int64_t)(e->timeout_s * 1000.0)) {
        char why[96];
        snprintf(why, sizeof why, "wrote nothing in %g s", e->timeout_s);
        program_failed(e, 0, why);
    }
}

static int64_t next_deadline(const ProgEnv *e) {
    int64_t d = INT64_MAX;
    for (int k = 0; k < e->cap; k++)
        if (e->eps[k].open && e->eps[k].awaiting && e->eps[k].deadline_ms < d) d = e->eps[k].deadline_ms;
    return d;
}

static int prog_poll(ProgEnv *e, int wait_ms, EnvEvent *ev, int cap, int *n, PailErr *err) {
    *n = 0;
    int64_t end = time_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    for (bool first = true; e->qn == 0 && (first || time_mono_ms() < end); first = false) {
        int64_t now = time_mono_ms();
        if (e->ch.pid < 0 && e->wpos < e->wq.len && now >= e->restart_at_ms) {
            PailErr serr = {0};
            if (child_start(&e->ch, e->cmd, e->what, &serr) < 0) {
                log_warn("%s", serr.msg);
                fail_all(e, serr.msg);
                e->failures++;
                e->restart_at_ms = now + CHILD_BACKOFF_MAX_MS;
                buf_reset(&e->wq);
                e->wpos = 0;
                break;
            }
            e->last_output_ms = now;
        }
        int64_t until = end;
        int64_t d = next_deadline(e);
        if (d < until) until = d;
        if (e->ch.pid < 0 && e->wpos < e->wq.len && e->restart_at_ms < until) until = e->restart_at_ms;
        int timeout = until > now ? (int)(until - now) : 0;
        if (e->ch.pid >= 0) {
            struct pollfd p[3];
            int np = 0, iin = -1, iout, ierr = -1;
            if (e->wpos < e->wq.len) { iin = np; p[np++] = (struct pollfd){.fd = e->ch.in, .events = POLLOUT}; }
            iout = np;
            p[np++] = (struct pollfd){.fd = e->ch.out, .events = POLLIN};
            if (e->ch.err >= 0) { ierr = np; p[np++] = (struct pollfd){.fd = e->ch.err, .events = POLLIN}; }
            int pr = poll(p, (nfds_t)np, timeout);
            if (pr < 0 && errno != EINTR) return err_set(err, PAIL_ERR_IO, "%s: poll: %s", e->what, strerror(errno));
            if (ierr >= 0 && p[ierr].revents) child_drain_stderr(&e->ch);
            if (iin >= 0 && (p[iin].revents & (POLLOUT | POLLERR | POLLHUP))) {
                ssize_t w = child_write(&e->ch, e->wq.data + e->wpos, e->wq.len - e->wpos);
                if (w > 0) {
                    e->wpos += (size_t)w;
                    if (e->wpos == e->wq.len) { buf_reset(&e->wq); e->wpos = 0; }
                } else if (w < 0 && errno == EPIPE) {
                    program_failed(e, 200, "stopped reading its stdin");
                }
            }
            if (e->ch.pid >= 0 && (p[iout].revents & (POLLIN | POLLHUP | POLLERR))) read_output(e);
        } else if (timeout > 0) {
            time_sleep_ms(timeout);
        }
        apply_timeouts(e);
    }
    int m = e->qn < cap ? e->qn : cap;
    if (m) {  // (the queue is NULL until its first event)
        memcpy(ev, e->q, (size_t)m * sizeof *ev);
        memmove(e->q, e->q + m, (size_t)(e->qn - m) * sizeof *e->q);
    }
    e->qn -= m;
    *n = m;
    return 0;
}

// The vtable: Env * -> ProgEnv *.
#define P(e) ((ProgEnv *)(e))
#define CP(e) ((const ProgEnv *)(e))
static void op_free(Env *e) { prog_free(P(e)); }
static void op_begin(Env *e, const char *prefix) { prog_begin(P(e), prefix); }
static int op_start(Env *e, int k, const json_t *row, PailErr *err) { return prog_start(P(e), k, row, err); }
static int op_step(Env *e, int k, const json_t *f, PailErr *err) { return prog_step(P(e), k, f, err); }
static int op_end(Env *e, int k, const char *reason, PailErr *err) { return prog_end(P(e), k, reason, err); }
static void op_cancel(Env *e, int k, const char *why) { prog_cancel(P(e), k, why); }
static int op_poll(Env *e, int wait_ms, EnvEvent *ev, int cap, int *n, PailErr *err) {
    return prog_poll(P(e), wait_ms, ev, cap, n, err);
}
static int op_open(const Env *e) { return prog_open(CP(e)); }
static EnvStats op_stats(const Env *e) { return prog_stats(CP(e)); }
static const char *op_describe(const Env *e) { return prog_describe(CP(e)); }
static const EnvOps PROG_OPS = {op_free, op_begin, op_start, op_step, op_end, op_cancel, op_poll, op_open, op_stats,
                                op_describe, NULL, NULL};

// The interface (env.h), for every implementation.
void env_free(Env *e) { if (e) e->ops->free(e); }
void env_begin(Env *e, const char *prefix) { e->ops->begin(e, prefix); }
int env_start(Env *e, int k, const json_t *row, PailErr *err) { return e->ops->start(e, k, row, err); }
int env_step(Env *e, int k, const json_t *fields, PailErr *err) { return e->ops->step(e, k, fields, err); }
int env_end(Env *e, int k, const char *reason, PailErr *err) { return e->ops->end(e, k, reason, err); }
void env_cancel(Env *e, int k, const char *why) { e->ops->cancel(e, k, why); }
int env_poll(Env *e, int wait_ms, EnvEvent *ev, int cap, int *n, PailErr *err) {
    return e->ops->poll(e, wait_ms, ev, cap, n, err);
}
int env_open(const Env *e) { return e->ops->open(e); }
EnvStats env_stats(const Env *e) { return e->ops->stats(e); }

int env_check_failing(Env *e, int failed, int n, const char *why, PailErr *err) {
    if (n <= 0) return 0;
    e->batches++;
    e->failed_run = failed >= n ? e->failed_run + 1 : 0;
    if (!e->failed_run) return 0;
    if (e->batches == 1 && e->lines == 0)
        return err_set(err, PAIL_ERR_INVALID, "every episode of the first batch failed and the environment never "
                       "answered (the worker stops rather than write shards of failed episodes): %s", why && *why ? why : "(no reason given)");
    if (e->failed_run >= ENV_FAILED_BATCHES)
        return err_set(err, PAIL_ERR_INVALID, "every episode of %d batches in a row failed (the worker stops rather than "
                       "write shards of failed episodes): %s", e->failed_run, why && *why ? why : "(no reason given)");
    return 0;
}
const char *env_describe(const Env *e) { return e->ops->describe(e); }
bool env_token(Env *e, int k, const int32_t *turn, int n) { return e->ops->token && e->ops->token(e, k, turn, n); }
void env_refuse(Env *e, int k, const char *why) { if (e->ops->refuse) e->ops->refuse(e, k, why); }
void env_episode_id(const char *prefix, int k, char *out, size_t cap) { snprintf(out, cap, "%s.%d", prefix, k); }

int env_episode_index(const char *prefix, const char *id, int n) {
    size_t pl = strlen(prefix);
    if (!id || strncmp(id, prefix, pl) || id[pl] != '.') return -1;
    char *end;
    errno = 0;
    long k = strtol(id + pl + 1, &end, 10);
    if (errno || *end || end == id + pl + 1 || k < 0 || k >= n) return -1;
    return (int)k;
}

void env_event_free(EnvEvent *ev) {
    json_decref(ev->messages);
    json_decref(ev->tools);
    json_decref(ev->components);
    json_decref(ev->params);
    ev->messages = ev->tools = ev->components = ev->params = NULL;
}
