// The eval worker (--eval, grpo-ctl eval): each adapter version, or one
// adapter file, scored on every row of a held-out set, greedy or pass@k, as
// single completions (the run's rewards) or episodes (--env). The result goes
// to eval/v%08d.json in the run (its scored completions to
// eval/samples/v%08d.jsonl), --out and --dump, or stdout. Its loop is worker.c's.
#include "rollout/evalworker.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "core/timeutil.h"
#include "core/utf8.h"
#include "lora/peft.h"
#include "rollout/worker_int.h"
#include "shard/shard.h"
#include "store/versions.h"

void eval_accuracy_rule(const char *const *names, int K, bool has_threshold, double threshold, EvalAccuracy *out) {
    memset(out, 0, sizeof *out);
    out->component = -1;
    if (has_threshold) {
        out->kind = EVAL_ACC_THRESHOLD;
        out->threshold = threshold;
        snprintf(out->rule, sizeof out->rule, "reward >= %g", threshold);
        return;
    }
    if (K == 0) {
        snprintf(out->rule, sizeof out->rule,
                 "not defined for an --env program's reward; give --success-threshold");
        return;
    }
    // exact_answer and format are the 0/1-valued kinds (reward.c); length is a
    // penalty in [-inf, 0] and cmd gives what its program says.
    for (int k = 0; k < K; k++)
        if (!strcmp(names[k], "exact_answer")) out->component = k;
    if (out->component < 0 && K == 1 && !strcmp(names[0], "format")) out->component = 0;
    if (out->component >= 0) {
        out->kind = EVAL_ACC_COMPONENT;
        snprintf(out->rule, sizeof out->rule, "%s == 1", names[out->component]);
        return;
    }
    size_t n = (size_t)snprintf(out->rule, sizeof out->rule, "not defined for a partial-credit reward (");
    for (int k = 0, first = 1; k < K && n < sizeof out->rule; k++) {
        if (!strcmp(names[k], "format")) continue;
        n += (size_t)snprintf(out->rule + n, sizeof out->rule - n, "%s%s", first ? "" : ", ", names[k]);
        first = 0;
    }
    if (n < sizeof out->rule) snprintf(out->rule + n, sizeof out->rule - n, "); give --success-threshold");
}

bool eval_correct(const EvalAccuracy *a, const float *comp, double total, bool valid) {
    if (!valid) return false;
    switch (a->kind) {
    case EVAL_ACC_COMPONENT: return comp[a->component] == 1.0f;
    case EVAL_ACC_THRESHOLD: return total >= a->threshold;
    default: return false;
    }
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int eval_distinct(const char **texts, int n) {
    if (n <= 0) return 0;
    qsort(texts, (size_t)n, sizeof *texts, cmp_str);
    int d = 1;
    for (int i = 1; i < n; i++) d += strcmp(texts[i - 1], texts[i]) != 0;
    return d;
}

// A decoded text as a JSON string: a completion cut inside a character is not
// valid UTF-8, and jansson refuses that.
static json_t *text_json(const char *s) {
    Buf b = {0};
    json_t *j = utf8_append_lossy(&b, (const uint8_t *)s, strlen(s)) < 0 ? NULL
                : json_stringn(b.data ? (const char *)b.data : "", b.len);
    buf_free(&b);
    return j;
}

// Decodes ids (with special tokens when keep_special) into a NUL-terminated
// string the caller frees; "" when it cannot.
static char *decode(const Worker *w, const int32_t *ids, int n, bool keep_special) {
    Buf b = {0};
    PailErr e = {0};
    if (tokenizer_decode_text(w->tok, ids, (size_t)n, !keep_special, &b, &e) < 0 || buf_append(&b, "", 0) < 0) {
        buf_free(&b);
        return strdup("");
    }
    return (char *)b.data;
}

// Appends one scored completion to d as a JSON line: dataset row, sample index
// (pass@k), texts, reward and its components (consumed), and whether it is
// correct (correct < 0: accuracy not defined, left out). 0 / -1 out of memory.
static int dump_line(Buf *d, long row, int sample, const char *prompt, const char *completion, long tokens,
                     double reward, json_t *components, bool valid, int correct) {
    json_t *o = json_pack("{s:I, s:i, s:o, s:o, s:I, s:f, s:o, s:b}", "row", (json_int_t)row, "sample", sample,
                          "prompt", text_json(prompt), "completion", text_json(completion), "completion_tokens",
                          (json_int_t)tokens, "reward", reward, "components", components, "valid", valid);
    if (o && correct >= 0) json_object_set_new(o, "correct", json_boolean(correct));
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    int rc = line && buf_append(d, line, strlen(line)) == 0 && buf_append(d, "\n", 1) == 0 ? 0 : -1;
    free(line);
    return rc;
}

static int write_file(const char *path, const char *what, const void *data, size_t len, PailErr *err) {
    FILE *f = fopen(path, "w");
    if (!f) return err_set(err, PAIL_ERR_IO, "%s %s: cannot write: %s", what, path, strerror(errno));
    bool ok = !len || fwrite(data, 1, len, f) == len;
    int e = errno;
    if (fclose(f) != 0 && ok) ok = false, e = errno;
    return ok ? 0 : err_set(err, PAIL_ERR_IO, "%s %s: cannot write: %s", what, path, strerror(e));
}

// An evaluation's result j (consumed) and its scored completions dump: to
// --out, to the run (unless of a given adapter: the completions first, so a
// result's completions are there once it is), else printed; the completions
// to --dump last, so a failed dump loses no figure. 0 / -1 with err.
static int eval_write(Worker *w, long v, json_t *j, const Buf *dump, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text) return err_set(err, PAIL_ERR_NOMEM, "eval: out of memory for the result");
    int rc = 0;
    if (c->eval_out) rc = write_file(c->eval_out, "--out", text, strlen(text), err);
    if (rc == 0 && v >= 0 && !c->eval_adapter && w->st) {
        char key[64];
        run_key_eval_samples(key, sizeof key, v);
        rc = versioned_put(w->st, key, dump->data ? (const char *)dump->data : "", dump->len, err);
        if (rc < 0 && err->code == PAIL_ERR_EXISTS) rc = 0;  // another eval worker got there first
        if (rc == 0) {
            version_key(&SERIES_EVALS, v, key, sizeof key);
            rc = versioned_put(w->st, key, text, strlen(text), err);
            if (rc < 0 && err->code == PAIL_ERR_EXISTS) rc = 0;
        }
    }
    if (!c->eval_out && !w->st) printf("%s\n", text);
    free(text);
    if (rc == 0 && c->eval_dump) rc = write_file(c->eval_dump, "--dump", dump->data, dump->len, err);
    return rc;
}

// The figures both kinds of evaluation report, added to j (consumed by
// eval_write), and the log line: accuracy where defined (else why not), the
// mean reward and its components (comps, means), the distinct completions.
static int eval_report(Worker *w, long v, const char *label, json_t *j, const EvalAccuracy *a, int solved,
                       int P, double reward_mean, json_t *comps, int distinct, int N, const char *more,
                       const Buf *dump, PailErr *err) {
    char cs[512] = "";
    size_t n = 0;
    const char *key;
    json_t *x;
    json_object_foreach(comps, key, x) if (n < sizeof cs)
        n += (size_t)snprintf(cs + n, sizeof cs - n, "%s%s %.3f", n ? ", " : " (", key, json_number_value(x));
    if (n && n < sizeof cs) snprintf(cs + n, sizeof cs - n, ")");
    json_object_set_new(j, "distinct_completions", json_integer(distinct));
    json_object_set_new(j, "completions", json_integer(N));
    char line[1400];
    if (a->kind != EVAL_ACC_NONE) {
        json_object_set_new(j, "accuracy", json_real((double)solved / P));
        json_object_set_new(j, "accuracy_rule", json_string(a->rule));
        json_object_set_new(j, "solved_prompts", json_integer(solved));
        snprintf(line, sizeof line,
                 "eval %s: accuracy %.1f%% (%d of %d prompts; %s%s), reward %.3f%s, distinct completions %d of %d%s",
                 label, 100.0 * solved / P, solved, P, a->rule, N > P ? " in one of its samples" : "", reward_mean,
                 cs, distinct, N, more);
    } else {
        json_object_set_new(j, "accuracy_rule", json_null());
        json_object_set_new(j, "accuracy_note", json_string(a->rule));
        snprintf(line, sizeof line, "eval %s: reward %.3f%s, accuracy: %s; distinct completions %d of %d%s", label,
                 reward_mean, cs, a->rule, distinct, N, more);
    }
    // grpo-ctl eval logs warnings only: its one line goes to stderr as is.
    if (w->cfg->eval_once && !w->st) fprintf(stderr, "%s\n", line);
    else log_info("%s", line);
    return eval_write(w, v, j, dump, err);
}

// --eval with --env: G episodes of every row (greedy for one sample); a row is
// solved when one of its episodes is correct (--success-threshold).
static int eval_version_env(Worker *w, long v, const char *label, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    int R = (int)w->ds->n, G = rollout_group_size(c), N = R * G, rc = -1;
    json_t **rows = calloc((size_t)R, sizeof *rows);
    uint64_t *seeds = calloc((size_t)R, sizeof *seeds);
    EpisodeOut *out = calloc((size_t)N, sizeof *out);
    char **texts = calloc((size_t)N, sizeof *texts);
    Buf dump = {0};
    if (!rows || !seeds || !out || !texts) {
        err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for %d rows x %d episodes", label, R, G);
        goto done;
    }
    for (int r = 0; r < R; r++) {
        rows[r] = (json_t *)w->ds->rows[r].fields;
        seeds[r] = (uint64_t)c->seed + (uint64_t)r;
    }
    EvalAccuracy acc;
    eval_accuracy_rule(NULL, 0, c->eval_has_threshold, c->eval_threshold, &acc);
    char prefix[160];
    snprintf(prefix, sizeof prefix, "eval-%s/%ld", w->worker_id, w->env_batches++);
    double t0 = time_mono_s();
    if (episodes_run(w->eng.eps, prefix, rows, seeds, R, out, err) != 0) goto done;
    int solved = 0, failed = 0;
    double rsum = 0, turns = 0, gen = 0;
    json_t *sums = json_object();
    for (int r = 0; r < R; r++) {
        int ok = 0;
        char *opening = decode(w, out[r * G].open_ids, out[r * G].n_open, true);
        for (int j = 0; j < G; j++) {
            const EpisodeOut *o = &out[r * G + j];
            const char *key;
            json_t *x;
            bool right = eval_correct(&acc, NULL, o->reward, o->valid);
            failed += !o->valid;
            ok |= right;
            rsum += o->valid ? o->reward : 0;
            turns += o->turns;
            for (int t = 0; t < o->n; t++) gen += o->mask[t];
            json_object_foreach((json_t *)o->components, key, x) {
                json_t *s = json_object_get(sums, key);
                json_object_set_new(sums, key, json_real(json_number_value(s) + json_number_value(x)));
            }
            texts[r * G + j] = decode(w, o->ids, o->n, true);
            json_t *cj = o->components ? json_deep_copy(o->components) : json_object();
            if (dump_line(&dump, r, j, opening, texts[r * G + j], o->n, o->valid ? o->reward : 0, cj, o->valid,
                          acc.kind != EVAL_ACC_NONE ? right : -1) < 0) {
                free(opening);
                json_decref(sums);
                err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for the completions' dump", label);
                goto done;
            }
        }
        free(opening);
        solved += ok;
    }
    const char *key;
    json_t *x;
    json_object_foreach(sums, key, x) json_real_set(x, json_real_value(x) / N);
    json_t *res = json_pack("{s:I, s:f, s:O, s:f, s:f, s:i, s:i, s:i, s:s, s:f, s:I, s:s, s:s}", "version",
                            (json_int_t)v, "reward_mean", rsum / N, "components", sums, "completion_length_mean",
                            gen / N, "turns_mean", turns / N, "prompts", R, "failed_episodes", failed, "samples", G,
                            "metric", G > 1 ? "pass@k" : "greedy", "seconds", time_mono_s() - t0, "time",
                            (json_int_t)time_unix_s(), "dataset", w->ds->source, "environment", c->env_cmd);
    int distinct = eval_distinct((const char **)texts, N);
    char more[128];
    snprintf(more, sizeof more, ", %.2f turns an episode, %d episodes failed", turns / N, failed);
    if (!res) {
        json_decref(sums);
        err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for the result", label);
        goto done;
    }
    rc = eval_report(w, v, label, res, &acc, solved, R, rsum / N, sums, distinct, N, more, &dump, err);
    json_decref(sums);
done:
    for (int i = 0; texts && i < N; i++) free(texts[i]);
    free(texts);
    buf_free(&dump);
    free(rows);
    free(seeds);
    free(out);
    return rc;
}

int evalworker_version(Worker *w, long v, const char *label, PailErr *err) {
    if (w->eng.env) return eval_version_env(w, v, label, err);
    const RolloutConfig *c = w->cfg;
    // Sized for every row; P counts the rows that fit --max-prompt-tokens.
    int R = (int)w->ds->n, G = rollout_group_size(c), P = 0, N = 0;
    Prompt *pr = calloc((size_t)R, sizeof *pr);
    GenPrompt *gp = calloc((size_t)R, sizeof *gp);
    int64_t *rix = calloc((size_t)R, sizeof *rix);  // (P,) dataset row of each prompt
    GenCompletion *out = calloc((size_t)R * G, sizeof *out);
    int rc = -1, K = reward_set_count(w->rs);
    float *comp = calloc((size_t)R * G * (K ? K : 1), sizeof *comp), *total = calloc((size_t)R * G, sizeof *total);
    uint8_t *valid = calloc((size_t)R * G, 1);
    char **texts = calloc((size_t)R * G, sizeof *texts);  // (N,) decoded completions
    Buf dump = {0};
    if (!pr || !gp || !rix || !out || !comp || !total || !valid || !texts) {
        err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for %d prompts x %d samples", label, R, G);
        goto done;
    }
    long skipped = 0;
    for (int r = 0; r < R; r++) {
        int e = worker_prompt_encode(w, r, &pr[P], err);
        if (e < 0) goto done;
        if (e == 1) { skipped++; continue; }
        rix[P] = r;
        // Seeded by the row, so a skipped row does not change the other rows' samples.
        gp[P] = (GenPrompt){.ids = pr[P].ids, .n = pr[P].n, .seed = (uint64_t)c->seed + (uint64_t)r};
        P++;
    }
    N = P * G;
    if (P == 0) {
        err_set(err, PAIL_ERR_INVALID, "eval dataset %s: no row fits --max-prompt-tokens %d (%ld of %d refused)",
                w->ds->source, c->max_prompt_tokens, skipped, R);
        goto done;
    }
    double t0 = time_mono_s();
    if (generator_run(w->eng.gen, gp, P, out, err) < 0) goto done;
    double len_sum = 0;
    for (int i = 0; i < N; i++) len_sum += out[i].n;
    PailErr warn = {0};
    if (worker_score(w, pr, rix, out, N, G, comp, total, valid, &warn) < 0) { *err = warn; goto done; }
    // Every reward failed (a broken program, a wrong option): no figure, an error
    // (a failed reward is not a 0 reward), as the generating worker's first batch.
    if (reward_set_check_failing(w->rs, &warn, err) < 0) goto done;
    const char *const *names = reward_set_names(w->rs);
    EvalAccuracy acc;
    eval_accuracy_rule(names, K, c->eval_has_threshold, c->eval_threshold, &acc);
    int solved = 0;
    double rsum = 0, csum[SHARD_MAX_COMPONENTS] = {0};
    for (int p = 0; p < P; p++) {
        int ok = 0;
        for (int j = 0; j < G; j++) {
            int i = p * G + j;
            const float *ci = comp + (size_t)i * K;
            bool right = eval_correct(&acc, ci, total[i], valid[i]);
            rsum += total[i];
            for (int k = 0; k < K && k < SHARD_MAX_COMPONENTS; k++) csum[k] += ci[k];
            ok |= right;
            texts[i] = decode(w, out[i].ids, out[i].n, false);
            json_t *cj = json_object();
            for (int k = 0; k < K; k++) json_object_set_new(cj, names[k], json_real(ci[k]));
            if (dump_line(&dump, (long)rix[p], j, pr[p].text, texts[i], out[i].n, total[i], cj, valid[i],
                          acc.kind != EVAL_ACC_NONE ? right : -1) < 0) {
                err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for the completions' dump", label);
                goto done;
            }
        }
        solved += ok;
    }
    json_t *comps = json_object();
    for (int k = 0; k < K && k < SHARD_MAX_COMPONENTS; k++) json_object_set_new(comps, names[k], json_real(csum[k] / N));
    json_t *j = json_pack("{s:I, s:f, s:O, s:f, s:i, s:I, s:i, s:s, s:f, s:I, s:s}", "version", (json_int_t)v,
                          "reward_mean", rsum / N, "components", comps, "completion_length_mean", len_sum / N,
                          "prompts", P, "skipped_prompts", (json_int_t)skipped, "samples", G, "metric",
                          G > 1 ? "pass@k" : "greedy", "seconds", time_mono_s() - t0, "time",
                          (json_int_t)time_unix_s(), "dataset", w->ds->source);
    int distinct = eval_distinct((const char **)texts, N);
    char sk[80] = "";
    if (skipped) snprintf(sk, sizeof sk, "; %ld over --max-prompt-tokens skipped", skipped);
    if (!j) {
        json_decref(comps);
        err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for the result", label);
        goto done;
    }
    rc = eval_report(w, v, label, j, &acc, solved, P, rsum / N, comps, distinct, N, sk, &dump, err);
    json_decref(comps);
done:
    for (int p = 0; p < P; p++) prompt_free(&pr[p]);
    for (int i = 0; texts && i < N; i++) free(texts[i]);
    free(pr); free(gp); free(rix); free(out); free(comp); free(total); free(valid); free(texts);
    buf_free(&dump);
    return rc;
}

int evalworker_once(Worker *w, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    long v = -1;
    if (c->eval_adapter) {
        AdapterMeta meta = {0};
        LoraLayout lay = {0};
        float *p = NULL;
        if ((c->eval_adapter_data
                 ? lora_adapter_read(c->eval_adapter_data, c->eval_adapter_len, c->eval_adapter, &w->eng.w.cfg, &lay,
                                     &p, &meta, err)
                 : lora_load_any(c->eval_adapter, &w->eng.w.cfg, &lay, &p, &meta, err)) < 0) {
            lora_layout_free(&lay);
            return -1;
        }
        v = meta.version;
        int rc = engine_attach(&w->eng, &lay, p, err);
        free(p);
        if (rc < 0) return -1;
    } else if (w->st) {
        if (versions_latest(w->st, &SERIES_ADAPTERS, &v, err) < 0) return -1;
        if (v >= 0 && pacing_adapter_load(w, v, err) != 0) return -1;
    }
    char label[64];
    snprintf(label, sizeof label, v >= 0 ? "adapter v%08ld" : "base model", v);
    return evalworker_version(w, v, label, err);
}
