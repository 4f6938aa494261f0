// Reward sets (see reward.h): --reward NAME[:WEIGHT] specs, the format (PCRE2) and
// length rewards, exact_answer on top of reward_answer.c, and the batch that feeds
// the cmd program (reward_cmd.c). Formulas and options: doc/rewards.md.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "rollout/reward.h"
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "rollout/reward_answer.h"
#include "rollout/reward_cmd.h"
#include "shard/shard.h"

typedef enum { REWARD_EXACT_ANSWER, REWARD_FORMAT, REWARD_LENGTH, REWARD_CMD } RewardKind;

static const char *const KIND_NAMES[] = {"exact_answer", "format", "length", "cmd"};

struct RewardSet {
    int K;
    RewardKind kind[REWARD_MAX];
    const char *names[REWARD_MAX];  // point into KIND_NAMES, or name_buf for a named cmd
    char name_buf[REWARD_MAX][40];  // "cmd:JUDGE"
    float weight[REWARD_MAX];
    char answer_field[64], answer_marker[128];
    int64_t length_target;
    char *regex_text;               // owned
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    RewardCmd *cmd[REWARD_MAX];     // per component: its program (cmd rewards only)
    char *cmd_text[REWARD_MAX];     // owned, per component
    int ncmd, cmd_k[REWARD_MAX];    // the cmd components, in spec order
    double cmd_timeout_s;
    Buf batch;                      // JSON lines for the cmd program
    int64_t batches;                // batches scored
    int failed_run;                 // batches in a row whose every completion's reward failed
};

#define CMD_NAME_MAX 32

static bool cmd_name_ok(const char *p, size_t n) {
    if (n == 0 || n > CMD_NAME_MAX || !(isalpha((unsigned char)p[0]) || p[0] == '_')) return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)p[i]) || p[i] == '_' || p[i] == '-' || p[i] == '.')) return false;
    return true;
}

static int weight_parse(const char *spec, const char *w_text, float *weight, PailErr *err) {
    char *end;
    double w = strtod(w_text, &end);
    if (end == w_text || *end || !isfinite(w) || fabs(w) > 1e6)
        return err_set(err, PAIL_ERR_INVALID, "--reward '%s': weight '%s' is not a number (NAME:WEIGHT, e.g. format:0.5)",
                       spec, w_text);
    *weight = (float)w;
    return 0;
}

// "NAME" or "NAME:WEIGHT" with a finite weight; a cmd reward also "cmd:JUDGE" or
// "cmd:JUDGE:WEIGHT" (JUDGE: a letter or _, then letters, digits, _ . -), its name
// into cmd_name ("" when unnamed).
static int spec_parse(const char *spec, RewardKind *kind, float *weight, char cmd_name[CMD_NAME_MAX + 1], PailErr *err) {
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (strlen(KIND_NAMES[i]) == n && !strncmp(spec, KIND_NAMES[i], n)) k = i;
    if (k < 0)
        return err_set(err, PAIL_ERR_INVALID, "--reward '%s': unknown reward '%.*s' (use exact_answer, format, length or cmd, "
                       "optionally NAME:WEIGHT; cmd:JUDGE[:WEIGHT] for a named cmd)", spec, (int)n, spec);
    *kind = (RewardKind)k;
    *weight = 1.0f;
    cmd_name[0] = 0;
    if (!colon) return 0;
    const char *rest = colon + 1;
    if (k == REWARD_CMD) {
        const char *c2 = strchr(rest, ':');
        size_t rn = c2 ? (size_t)(c2 - rest) : strlen(rest);
        char *end;
        (void)strtod(rest, &end);
        bool number = end != rest && (size_t)(end - rest) == rn;
        if (!number && rn > 0) {
            if (!cmd_name_ok(rest, rn))
                return err_set(err, PAIL_ERR_INVALID, "--reward '%s': '%.*s' is neither a weight nor a cmd reward's name "
                               "(a letter or _, then letters, digits, _ . -; at most %d)", spec, (int)rn, rest, CMD_NAME_MAX);
            memcpy(cmd_name, rest, rn);
            cmd_name[rn] = 0;
            return c2 ? weight_parse(spec, c2 + 1, weight, err) : 0;
        }
    }
    return weight_parse(spec, rest, weight, err);
}

bool reward_spec_is(const char *spec, const char *kind) {
    size_t n = strlen(kind);
    return !strncmp(spec, kind, n) && (spec[n] == 0 || spec[n] == ':');
}

static int regex_build(RewardSet *rs, const char *re, PailErr *err) {
    int ec;
    PCRE2_SIZE off;
    // UTF+UCP: \w and classes follow Unicode; DOTALL: '.' spans the lines of a
    // completion; MATCH_INVALID_UTF: a completion cut inside a multi-byte character
    // (max_new_tokens) is still matched instead of failing the match.
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_DOTALL | PCRE2_MATCH_INVALID_UTF;
    rs->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, opts, &ec, &off, NULL);
    if (!rs->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return err_set(err, PAIL_ERR_INVALID, "--format-regex '%s': %s at offset %zu", re, (const char *)msg, (size_t)off);
    }
    // JIT when the library has it; the interpreter is the fallback, same results.
    if (pcre2_jit_compile(rs->re, PCRE2_JIT_COMPLETE) == 0) {
        rs->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
        rs->mctx = pcre2_match_context_create(NULL);
        if (rs->jit_stack && rs->mctx) pcre2_jit_stack_assign(rs->mctx, NULL, rs->jit_stack);
    }
    rs->md = pcre2_match_data_create_from_pattern(rs->re, NULL);
    if (!rs->md || !(rs->regex_text = strdup(re))) return err_set(err, PAIL_ERR_NOMEM, "--format-regex: out of memory");
    return 0;
}

// Gives each cmd reward its --reward-cmd program: "JUDGE=PROGRAM" for cmd:JUDGE, a
// plain PROGRAM for the unnamed cmd. A program no cmd reward takes, or a cmd
// reward without one, is an error (a --reward-cmd must never be silently ignored).
static int cmd_programs(RewardSet *rs, const RewardConfig *cfg, PailErr *err) {
    int np = cfg->ncmds + (cfg->cmd != NULL);
    for (int i = 0; i < np; i++) {
        const char *text = i < cfg->ncmds ? cfg->cmds[i] : cfg->cmd;
        int at = -1;
        const char *prog = text;
        for (int c = 0; c < rs->ncmd && at < 0; c++) {
            const char *nm = rs->names[rs->cmd_k[c]];
            size_t l = strlen(nm);
            if (l > 4 && !strncmp(text, nm + 4, l - 4) && text[l - 4] == '=') at = rs->cmd_k[c], prog = text + l - 3;
        }
        for (int c = 0; c < rs->ncmd && at < 0; c++)
            if (!strcmp(rs->names[rs->cmd_k[c]], "cmd")) at = rs->cmd_k[c];
        if (at < 0) {
            if (rs->ncmd == 0)
                return err_set(err, PAIL_ERR_INVALID, "--reward-cmd '%s' is given but --reward lists no cmd reward (add "
                               "--reward cmd)", text);
            char named[256] = "";
            size_t k = 0;
            for (int c = 0; c < rs->ncmd && k < sizeof named; c++)
                k += (size_t)snprintf(named + k, sizeof named - k, "%s%s=PROGRAM", k ? ", " : "", rs->names[rs->cmd_k[c]] + 4);
            return err_set(err, PAIL_ERR_INVALID, "--reward-cmd '%s': no cmd reward takes it (the named ones take %s; a "
                           "plain PROGRAM is for an unnamed --reward cmd)", text, named);
        }
        if (rs->cmd_text[at])
            return err_set(err, PAIL_ERR_INVALID, "--reward-cmd '%s': %s already has the program '%s' (one each)", text,
                           rs->names[at], rs->cmd_text[at]);
        if (!*prog) return err_set(err, PAIL_ERR_INVALID, "--reward-cmd '%s': an empty program", text);
        if (!(rs->cmd_text[at] = strdup(prog))) return err_set(err, PAIL_ERR_NOMEM, "reward set: out of memory");
    }
    if (rs->ncmd == 0) return 0;
    if (cfg->cmd_timeout_s < 0 || !isfinite(cfg->cmd_timeout_s))
        return err_set(err, PAIL_ERR_INVALID, "--reward-timeout %g: need seconds > 0 (0 = the default 30)", cfg->cmd_timeout_s);
    rs->cmd_timeout_s = cfg->cmd_timeout_s > 0 ? cfg->cmd_timeout_s : 30.0;
    for (int c = 0; c < rs->ncmd; c++) {
        int k = rs->cmd_k[c];
        if (!rs->cmd_text[k]) {
            if (!strcmp(rs->names[k], "cmd"))
                return err_set(err, PAIL_ERR_INVALID, "--reward cmd needs --reward-cmd \"program args\"");
            return err_set(err, PAIL_ERR_INVALID, "--reward %s needs --reward-cmd \"%s=program args\"", rs->names[k],
                           rs->names[k] + 4);
        }
        if (reward_cmd_init(&rs->cmd[k], rs->cmd_text[k], rs->cmd_timeout_s, err) < 0) return -1;
    }
    return 0;
}

int reward_set_build(RewardSet **out, const RewardConfig *cfg, PailErr *err) {
    *out = NULL;
    if (cfg->nspecs <= 0) return err_set(err, PAIL_ERR_INVALID, "no reward given (use --reward NAME[:WEIGHT], e.g. --reward exact_answer)");
    if (cfg->nspecs > REWARD_MAX) return err_set(err, PAIL_ERR_INVALID, "%d rewards given (at most %d)", cfg->nspecs, REWARD_MAX);
    RewardSet *rs = calloc(1, sizeof *rs);
    if (!rs) return err_set(err, PAIL_ERR_NOMEM, "reward set: out of memory");
    bool have[4] = {0};
    for (int i = 0; i < cfg->nspecs; i++) {
        RewardKind k = REWARD_EXACT_ANSWER;
        float w = 1.0f;
        char cname[CMD_NAME_MAX + 1];
        if (spec_parse(cfg->specs[i], &k, &w, cname, err) < 0) goto fail;
        const char *name = KIND_NAMES[k];
        if (cname[0]) {
            snprintf(rs->name_buf[rs->K], sizeof rs->name_buf[rs->K], "cmd:%s", cname);
            name = rs->name_buf[rs->K];
        }
        bool twice = false;
        for (int j = 0; j < rs->K; j++) twice |= !strcmp(rs->names[j], name);
        if (twice) {
            err_set(err, PAIL_ERR_INVALID, "--reward '%s': %s is given twice (one --reward per reward%s)", cfg->specs[i], name,
                    k == REWARD_CMD ? "; several cmd rewards are named: cmd:JUDGE" : "");
            goto fail;
        }
        if (k == REWARD_LENGTH && w < 0) {
            // length is already <= 0; a negative weight would pay for long completions
            err_set(err, PAIL_ERR_INVALID, "--reward '%s': the length reward is a penalty (<= 0) already; use a positive weight, e.g. length:0.1",
                    cfg->specs[i]);
            goto fail;
        }
        have[k] = true;
        if (k == REWARD_CMD) rs->cmd_k[rs->ncmd++] = rs->K;
        rs->kind[rs->K] = k;
        rs->names[rs->K] = name;
        rs->weight[rs->K] = w;
        rs->K++;
    }
    const char *field = cfg->answer_field && cfg->answer_field[0] ? cfg->answer_field : "answer";
    if (strlen(field) >= sizeof rs->answer_field || (cfg->answer_marker && strlen(cfg->answer_marker) >= sizeof rs->answer_marker)) {
        err_set(err, PAIL_ERR_INVALID, "--answer-marker / answer field: too long (max %zu bytes)", sizeof rs->answer_field - 1);
        goto fail;
    }
    snprintf(rs->answer_field, sizeof rs->answer_field, "%s", field);
    snprintf(rs->answer_marker, sizeof rs->answer_marker, "%s", cfg->answer_marker ? cfg->answer_marker : "");
    if (have[REWARD_FORMAT]) {
        if (!cfg->format_regex || !cfg->format_regex[0]) {
            err_set(err, PAIL_ERR_INVALID, "--reward format needs --format-regex RE (e.g. '^<think>.*</think>')");
            goto fail;
        }
        if (regex_build(rs, cfg->format_regex, err) < 0) goto fail;
    }
    if (have[REWARD_LENGTH]) {
        if (cfg->length_target <= 0) {
            err_set(err, PAIL_ERR_INVALID, "--reward length needs --length-target N (completion tokens, > 0), got %lld",
                    (long long)cfg->length_target);
            goto fail;
        }
        rs->length_target = cfg->length_target;
    }
    if (cmd_programs(rs, cfg, err) < 0) goto fail;
    *out = rs;
    return 0;
fail:
    reward_set_free(rs);
    return -1;
}

void reward_set_free(RewardSet *rs) {
    if (!rs) return;
    for (int k = 0; k < REWARD_MAX; k++) {
        reward_cmd_free(rs->cmd[k]);
        free(rs->cmd_text[k]);
    }
    pcre2_match_data_free(rs->md);
    pcre2_match_context_free(rs->mctx);
    pcre2_jit_stack_free(rs->jit_stack);
    pcre2_code_free(rs->re);
    free(rs->regex_text);
    buf_free(&rs->batch);
    free(rs);
}

int reward_set_fields(const RewardSet *rs, const char **fields, const char **rewards, int cap) {
    int n = 0;
    for (int k = 0; k < rs->K && n < cap; k++)
        if (rs->kind[k] == REWARD_EXACT_ANSWER) {
            fields[n] = rs->answer_field;
            rewards[n++] = rs->names[k];
        }
    return n;
}

const char *reward_set_cmd(const RewardSet *rs, int i) { return i >= 0 && i < rs->ncmd ? rs->cmd_text[rs->cmd_k[i]] : NULL; }

int reward_set_check_failing(const RewardSet *rs, const PailErr *warn, PailErr *err) {
    if (rs->failed_run == 0) return 0;
    if (rs->batches == 1)
        return err_set(err, PAIL_ERR_INVALID, "every reward of the first batch failed (the worker stops rather than "
                       "write shards of failed rewards): %s", warn && warn->msg[0] ? warn->msg : "(no message)");
    if (rs->failed_run >= REWARD_FAILED_BATCHES)
        return err_set(err, PAIL_ERR_INVALID, "every reward of %d batches in a row failed (the worker stops rather than "
                       "write shards of failed rewards): %s", rs->failed_run, warn && warn->msg[0] ? warn->msg : "(no message)");
    return 0;
}

int reward_set_count(const RewardSet *rs) { return rs->K; }
const char *const *reward_set_names(const RewardSet *rs) { return rs->names; }
const float *reward_set_weights(const RewardSet *rs) { return rs->weight; }

void reward_set_describe(const RewardSet *rs, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < rs->K && n < cap; k++) {
        n += (size_t)snprintf(buf + n, cap - n, "%s%s:%g", k ? " " : "", rs->names[k], (double)rs->weight[k]);
        if (n >= cap) break;
        switch (rs->kind[k]) {
        case REWARD_EXACT_ANSWER:
            n += (size_t)snprintf(buf + n, cap - n, " (field \"%s\"%s%s%s)", rs->answer_field,
                                  rs->answer_marker[0] ? ", marker '" : "", rs->answer_marker, rs->answer_marker[0] ? "'" : "");
            break;
        case REWARD_FORMAT: n += (size_t)snprintf(buf + n, cap - n, " (regex '%s')", rs->regex_text); break;
        case REWARD_LENGTH: n += (size_t)snprintf(buf + n, cap - n, " (target %lld tokens)", (long long)rs->length_target); break;
        case REWARD_CMD: n += (size_t)snprintf(buf + n, cap - n, " (cmd '%s', timeout %g s)", rs->cmd_text[k], rs->cmd_timeout_s); break;
        }
    }
}

// Keeps the first warning of a batch and counts the rest.
typedef struct {
    PailErr *out;
    int n;
} Warn;

static void warn_add(Warn *w, const PailErr *e) {
    if (w->n++ == 0 && w->out) *w->out = *e;
}

static void warn_finish(Warn *w) {
    if (w->n > 1 && w->out) {
        size_t l = strlen(w->out->msg);
        snprintf(w->out->msg + l, sizeof w->out->msg - l, " (and %d more reward warnings in this batch)", w->n - 1);
    }
}

// The row's reference answer as text: strings as they are, integers exactly,
// reals with 17 significant digits (round-trips a double).
static bool reference_text(const json_t *row, const char *field, char *out, size_t cap) {
    json_t *v = json_object_get(row, field);
    if (json_is_string(v)) snprintf(out, cap, "%s", json_string_value(v));
    else if (json_is_integer(v)) snprintf(out, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(out, cap, "%.17g", json_real_value(v));
    else return false;
    return true;
}

// format: 1 when the regex matches anywhere (users anchor with ^ / $), else 0.
static int score_format(RewardSet *rs, const char *text, float *v, PailErr *e) {
    int rc = pcre2_match(rs->re, (PCRE2_SPTR)text, strlen(text), 0, 0, rs->md, rs->mctx);
    if (rc >= 0) { *v = 1; return 0; }
    if (rc == PCRE2_ERROR_NOMATCH) { *v = 0; return 0; }
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    *v = 0;
    return err_set(e, PAIL_ERR_INVALID, "format regex '%s': match failed: %s", rs->regex_text, (const char *)msg);
}

// length: 0 up to the target, then -(tokens - target) / target (-1 at twice the target).
static float score_length(const RewardSet *rs, int64_t tokens) {
    if (tokens <= rs->length_target) return 0.0f;
    return -(float)((double)(tokens - rs->length_target) / (double)rs->length_target);
}

// Appends s as a JSON string body with invalid UTF-8 replaced by U+FFFD: decoded
// completions can end inside a character, and the program must get valid JSON.
static int utf8_sanitized(const char *s, Buf *tmp) {
    buf_reset(tmp);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = p[0] < 0x80 ? 1 : (p[0] >> 5) == 6 ? 2 : (p[0] >> 4) == 14 ? 3 : (p[0] >> 3) == 30 ? 4 : 0;
        bool good = n > 0;
        for (int i = 1; good && i < n; i++) good = (p[i] & 0xC0) == 0x80;
        if (good && n > 1) {
            uint32_t cp = n == 2 ? (p[0] & 0x1Fu) : n == 3 ? (p[0] & 0x0Fu) : (p[0] & 0x07u);
            for (int i = 1; i < n; i++) cp = (cp << 6) | (p[i] & 0x3Fu);
            // overlong forms, surrogates and values past U+10FFFF are invalid too
            if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
                (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
                good = false;
        }
        if (good) {
            if (buf_append(tmp, p, (size_t)n) < 0) return -1;
            p += n;
        } else {
            if (buf_append(tmp, "\xEF\xBF\xBD", 3) < 0) return -1;
            p++;
        }
    }
    return 0;
}

// {"prompt", "completion", "completion_tokens", ...row fields} as one line.
static int cmd_line(RewardSet *rs, const RewardInput *in, Buf *tmp) {
    json_t *o = in->row && json_is_object(in->row) ? json_copy((json_t *)in->row) : json_object();
    if (!o) return -1;
    int rc = 0;
    if (utf8_sanitized(in->prompt ? in->prompt : "", tmp) < 0 ||
        json_object_set_new(o, "prompt", json_stringn((const char *)tmp->data, tmp->len)) < 0 ||
        utf8_sanitized(in->completion ? in->completion : "", tmp) < 0 ||
        json_object_set_new(o, "completion", json_stringn((const char *)tmp->data, tmp->len)) < 0 ||
        json_object_set_new(o, "completion_tokens", json_integer(in->completion_tokens)) < 0)
        rc = -1;
    char *line = rc == 0 ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!line) return -1;
    rc = buf_append(&rs->batch, line, strlen(line)) < 0 || buf_append(&rs->batch, "\n", 1) < 0 ? -1 : 0;
    free(line);
    return rc;
}

int reward_set_score_batch(RewardSet *rs, const RewardInput *in, int64_t n, float *components, float *total,
                           uint8_t *valid, PailErr *warn) {
    Warn w = {.out = warn};
    if (warn) err_clear(warn);
    int K = rs->K;
    for (int64_t i = 0; i < n; i++) valid[i] = 1;
    for (int k = 0; k < K; k++) {
        PailErr e;
        switch (rs->kind[k]) {
        case REWARD_EXACT_ANSWER:
            for (int64_t i = 0; i < n; i++) {
                char ref[512];
                float v = 0;
                if (!in[i].row || !reference_text(in[i].row, rs->answer_field, ref, sizeof ref)) {
                    err_set(&e, PAIL_ERR_INVALID, "exact_answer: the dataset row has no string or number \"%s\"", rs->answer_field);
                    warn_add(&w, &e);
                    valid[i] = 0;
                } else {
                    v = reward_answer_match(in[i].completion ? in[i].completion : "", rs->answer_marker, ref) ? 1.0f : 0.0f;
                }
                components[i * K + k] = v;
            }
            break;
        case REWARD_FORMAT:
            for (int64_t i = 0; i < n; i++) {
                float v;
                if (score_format(rs, in[i].completion ? in[i].completion : "", &v, &e) < 0) {
                    warn_add(&w, &e);
                    valid[i] = 0;
                }
                components[i * K + k] = v;
            }
            break;
        case REWARD_LENGTH:
            for (int64_t i = 0; i < n; i++) components[i * K + k] = score_length(rs, in[i].completion_tokens);
            break;
        case REWARD_CMD: {
            buf_reset(&rs->batch);
            Buf tmp = {0};
            double *sc = malloc((size_t)(n > 0 ? n : 1) * sizeof *sc);
            uint8_t *ok = malloc((size_t)(n > 0 ? n : 1));
            int rc = sc && ok ? 0 : -1;
            for (int64_t i = 0; rc == 0 && i < n; i++) rc = cmd_line(rs, &in[i], &tmp);
            buf_free(&tmp);
            if (rc < 0) {
                free(sc);
                free(ok);
                return err_set(warn, PAIL_ERR_NOMEM, "reward cmd: out of memory building a batch of %lld lines", (long long)n);
            }
            if (reward_cmd_run(rs->cmd[k], (const char *)rs->batch.data, rs->batch.len, n, sc, ok, &e) > 0) warn_add(&w, &e);
            for (int64_t i = 0; i < n; i++) {
                float v = ok[i] ? (float)sc[i] : 0.0f;
                if (!isfinite(v)) {
                    err_set(&e, PAIL_ERR_INVALID, "reward %s '%s': answer %lld (%g) is out of float range", rs->names[k], rs->cmd_text[k],
                            (long long)i + 1, sc[i]);
                    warn_add(&w, &e);
                    ok[i] = 0;
                    v = 0.0f;
                }
                components[i * K + k] = v;
                if (!ok[i]) valid[i] = 0;
            }
            free(sc);
            free(ok);
            break;
        }
        }
    }
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double t = 0;
        double cmax = 0;
        for (int k = 0; k < K; k++) {
            t += (double)rs->weight[k] * components[i * K + k];
            cmax = fmax(cmax, fabs((double)components[i * K + k]));
        }
        // Past the shard bound (a huge cmd answer, or one times a weight): the
        // trainer would reject the whole shard.
        if (valid[i] && !(fabs(t) <= SHARD_REWARD_MAX && cmax <= SHARD_REWARD_MAX)) {
            PailErr e;
            err_set(&e, PAIL_ERR_INVALID, "reward: completion %lld's weighted total %g or a component (max |%g|) is "
                    "outside +-%g", (long long)i, t, cmax, (double)SHARD_REWARD_MAX);
            warn_add(&w, &e);
            valid[i] = 0;
        }
        total[i] = valid[i] ? (float)t : 0.0f;
        bad += !valid[i];
    }
    if (n > 0) {
        rs->batches++;
        rs->failed_run = bad == n ? rs->failed_run + 1 : 0;
    }
    warn_finish(&w);
    return bad;
}

int reward_set_score(RewardSet *rs, const char *prompt_text, const char *completion_text, int64_t completion_tokens,
                     const json_t *row, float *components, float *total, uint8_t *valid, PailErr *warn) {
    RewardInput in = {.prompt = prompt_text, .completion = completion_text, .completion_tokens = completion_tokens, .row = row};
    return reward_set_score_batch(rs, &in, 1, components, total, valid, warn);
}
