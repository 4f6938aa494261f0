// The eval worker (--eval, grpo-ctl eval): each adapter version, or one
// adapter file, scored on every row of a held-out set, greedy or pass@k, as
// single completions (the run's rewards) or episodes (--env). The result goes
// to eval/v%08d.json in the run, --out, or stdout. Its loop is worker.c's.
#include "rollout/evalworker.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "core/timeutil.h"
#include "lora/peft.h"
#include "rollout/worker_int.h"
#include "shard/shard.h"
#include "store/versions.h"

// An evaluation's result j (consumed): to --out, to eval/v%08d.json in the
// run (unless of a given adapter file), else printed. 0 / -1 with err.
static int eval_write(Worker *w, long v, json_t *j, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text) return err_set(err, PAIL_ERR_NOMEM, "eval: out of memory for the result");
    int rc = 0;
    if (c->eval_out) {
        FILE *f = fopen(c->eval_out, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) rc = err_set(err, PAIL_ERR_IO, "%s: cannot write", c->eval_out);
    }
    if (rc == 0 && v >= 0 && !c->eval_adapter && w->st) {
        char key[64];
        version_key(&SERIES_EVALS, v, key, sizeof key);
        rc = versioned_put(w->st, key, text, strlen(text), err);
        if (rc < 0 && err->code == PAIL_ERR_EXISTS) rc = 0;  // another eval worker got there first
    }
    if (!c->eval_out && !w->st) printf("%s\n", text);
    free(text);
    return rc;
}

// --eval with --env: G episodes of every row (greedy for one sample); a row is
// solved when one of its episodes has a positive reward.
static int eval_version_env(Worker *w, long v, const char *label, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    int R = (int)w->ds->n, G = rollout_group_size(c), N = R * G, rc = -1;
    json_t **rows = calloc((size_t)R, sizeof *rows);
    uint64_t *seeds = calloc((size_t)R, sizeof *seeds);
    EpisodeOut *out = calloc((size_t)N, sizeof *out);
    if (!rows || !seeds || !out) {
        err_set(err, PAIL_ERR_NOMEM, "eval %s: out of memory for %d rows x %d episodes", label, R, G);
        goto done;
    }
    for (int r = 0; r < R; r++) {
        rows[r] = (json_t *)w->ds->rows[r].fields;
        seeds[r] = (uint64_t)c->seed + (uint64_t)r;
    }
    char prefix[160];
    snprintf(prefix, sizeof prefix, "eval-%s/%ld", w->worker_id, w->env_batches++);
    double t0 = time_mono_s();
    if (episodes_run(w->eng.eps, prefix, rows, seeds, R, out, err) != 0) goto done;
    int solved = 0, failed = 0;
    double rsum = 0, turns = 0, gen = 0;
    json_t *sums = json_object();
    for (int r = 0; r < R; r++) {
        int ok = 0;
        for (int j = 0; j < G; j++) {
            const EpisodeOut *o = &out[r * G + j];
            const char *key;
            json_t *x;
            failed += !o->valid;
            ok |= o->valid && o->reward > 0;
            rsum += o->valid ? o->reward : 0;
            turns += o->turns;
            for (int t = 0; t < o->n; t++) gen += o->mask[t];
            json_object_foreach((json_t *)o->components, key, x) {
                json_t *acc = json_object_get(sums, key);
                json_object_set_new(sums, key, json_real(json_number_value(acc) + json_number_value(x)));
            }
        }
        solved += ok;
    }
    const char *key;
    json_t *x;
    json_object_foreach(sums, key, x) json_real_set(x, json_real_value(x) / N);
    json_t *res = json_pack("{s:I, s:f, s:f, s:o, s:f, s:f, s:i, s:i, s:i, s:s, s:f, s:I, s:s, s:s}", "version",
                            (json_int_t)v, "accuracy", (double)solved / R, "reward_mean", rsum / N, "components", sums,
                            "completion_length_mean", gen / N, "turns_mean", turns / N, "prompts", R,
                            "failed_episodes", failed, "samples", G, "metric", G > 1 ? "pass@k" : "greedy", "seconds",
                            time_mono_s() - t0, "time", (json_int_t)time_unix_s(), "dataset", w->ds->source,
                            "environment", c->env_cmd);
    log_info("eval %s: accuracy %.1f%% (%d of %d rows), reward %.3f, %.2f turns an episode, %d episodes failed",
             label, 100.0 * solved / R, solved, R, rsum / N, turns / N, failed);
    rc = eval_write(w, v, res, err);
done:
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
    if (!pr || !gp || !rix || !out || !comp || !total || !valid) {
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
    // A prompt is solved when one of its samples is: exact_answer == 1 when that
    // reward is in the set, else a positive total reward.
    int acc_k = -1;
    const char *const *names = reward_set_names(w->rs);
    for (int k = 0; k < K; k++) if (!strcmp(names[k], "exact_answer")) acc_k = k;
    int solved = 0;
    double rsum = 0, csum[SHARD_MAX_COMPONENTS] = {0};
    for (int p = 0; p < P; p++) {
        int ok = 0;
        for (int j = 0; j < G; j++) {
            int i = p * G + j;
            rsum += total[i];
            for (int k = 0; k < K && k < SHARD_MAX_COMPONENTS; k++) csum[k] += comp[(size_t)i * K + k];
            if (valid[i] && (acc_k >= 0 ? comp[(size_t)i * K + acc_k] >= 0.5f : total[i] > 0)) ok = 1;
        }
        solved += ok;
    }
    json_t *comps = json_object();
    for (int k = 0; k < K && k < SHARD_MAX_COMPONENTS; k++) json_object_set_new(comps, names[k], json_real(csum[k] / N));
    json_t *j = json_pack("{s:I, s:f, s:f, s:o, s:f, s:i, s:I, s:i, s:s, s:f, s:I, s:s}", "version", (json_int_t)v,
                          "accuracy", (double)solved / P, "reward_mean", rsum / N, "components", comps,
                          "completion_length_mean", len_sum / N, "prompts", P, "skipped_prompts",
                          (json_int_t)skipped, "samples", G, "metric", G > 1 ? "pass@k" : "greedy", "seconds",
                          time_mono_s() - t0, "time", (json_int_t)time_unix_s(), "dataset", w->ds->source);
    char sk[64] = "";
    if (skipped) snprintf(sk, sizeof sk, "; %ld over --max-prompt-tokens skipped", skipped);
    log_info("eval %s: accuracy %.1f%% (%d of %d%s), reward %.3f", label, 100.0 * solved / P, solved, P, sk,
             rsum / N);
    rc = eval_write(w, v, j, err);
done:
    for (int p = 0; p < P; p++) prompt_free(&pr[p]);
    free(pr); free(gp); free(rix); free(out); free(comp); free(total); free(valid);
    return rc;
}

int evalworker_once(Worker *w, PailErr *err) {
    const RolloutConfig *c = w->cfg;
    long v = -1;
    if (c->eval_adapter) {
        AdapterMeta meta;
        LoraLayout lay = {0};
        float *p = NULL;
        if (lora_load_any(c->eval_adapter, &w->eng.w.cfg, &lay, &p, &meta, err) < 0) {
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

