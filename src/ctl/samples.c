// grpo-ctl samples: what the policy generated, from the run's rollout shards:
// prompts and completions decoded with the run's tokenizer (special tokens
// visible), the reward and its named components, the advantage, and the
// adapter version, worker and shard of each. By adapter version, by trainer
// step, or the newest; --worst / --best by reward; --json for scripts.
// Also the shard helpers grpo-ctl tensorboard's text table uses (samples.h).
#include "ctl/samples.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/utf8.h"
#include "ctl/ctl.h"
#include "grpo/state.h"
#include "store/runlayout.h"
#include "store/versions.h"

// ---- shared helpers (samples.h) ------------------------------------------------

int samples_list_shards(Store *st, long version, ShardRefs *out, PailErr *err) {
    StoreList l = {0};
    char prefix[64] = "rollouts/v";
    if (version >= 0) run_key_rollout_dir(prefix, sizeof prefix, version);
    if (store_list_all(st, prefix, NULL, &l, err) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < l.n; i++) {
        ShardRef r = {0};
        if (run_parse_rollout(l.entries[i].key, &r.version, r.worker, sizeof r.worker, &r.seq) < 0) continue;
        snprintf(r.key, sizeof r.key, "%s", l.entries[i].key);
        r.mtime = l.entries[i].mtime;
        if (out->n == out->cap) {
            int cap = out->cap ? 2 * out->cap : 64;
            ShardRef *p = realloc(out->v, (size_t)cap * sizeof *p);
            if (!p) { rc = err_set(err, PAIL_ERR_NOMEM, "rollouts/: out of memory listing shards"); break; }
            out->v = p;
            out->cap = cap;
        }
        out->v[out->n++] = r;
    }
    store_list_free(&l);
    return rc;
}

void samples_refs_free(ShardRefs *r) {
    free(r->v);
    *r = (ShardRefs){0};
}

int samples_shard_load(Store *st, const char *key, ScaleRewards scale, LoadedShard *out, PailErr *err) {
    Buf b = {0};
    *out = (LoadedShard){0};
    snprintf(out->key, sizeof out->key, "%s", key);
    if (store_get(st, key, &b, NULL, NULL, err) < 0) {
        buf_free(&b);
        return -1;
    }
    int rc = shard_read(&out->s, b.data, b.len, key, err);
    buf_free(&b);
    if (rc < 0) return -1;
    int64_t N = out->s.N, P = out->s.P;
    out->adv = calloc(N ? (size_t)N : 1, sizeof *out->adv);
    if (!out->adv) {
        shard_free(&out->s);
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for advantages", key);
    }
    AdvantageStats as = {0};
    if (N > 0) grpo_advantages(out->adv, &as, out->s.rewards, out->s.reward_valid, P, (int)(N / P), scale);
    return 0;
}

void samples_shard_free(LoadedShard *l) {
    shard_free(&l->s);
    free(l->adv);
    l->adv = NULL;
}

ScaleRewards samples_scale(const json_t *man) {
    const char *s = json_string_value(json_object_get(json_object_get(man, "trainer"), "scale-rewards"));
    if (s && !strcmp(s, "none")) return SCALE_NONE;
    if (s && !strcmp(s, "batch")) return SCALE_BATCH;
    return SCALE_GROUP;
}

int samples_tokenizer_open(const json_t *man, const char *model, const char *tokfile, Tokenizer **tok, char *src,
                           size_t cap, PailErr *err) {
    const char *base = json_string_value(json_object_get(man, "base_model"));
    if (tokfile && *tokfile) snprintf(src, cap, "%s", tokfile);
    else if (model && *model) snprintf(src, cap, "%s/tokenizer.json", model);
    else if (base && *base) {
        snprintf(src, cap, "%s/tokenizer.json", base);
        if (access(src, R_OK) != 0)
            return err_set(err, PAIL_ERR_NOT_FOUND, "no tokenizer: run.json's base_model %s has no readable "
                           "tokenizer.json on this machine (pass --model DIR or --tokenizer FILE)", base);
    } else {
        return err_set(err, PAIL_ERR_NOT_FOUND, "no tokenizer: run.json names no base_model (pass --model DIR or "
                       "--tokenizer FILE)");
    }
    if (tokenizer_load(tok, src, err) < 0) return err_wrap(err, "tokenizer %s", src);
    return 0;
}

int samples_tokenizer_check(const Tokenizer *tok, const char *tok_src, const LoadedShard *l, PailErr *err) {
    const char *want = l->s.tokenizer_sha256;
    if (!want[0] || !strcmp(want, tokenizer_sha256(tok))) return 0;
    return err_set(err, PAIL_ERR_INVALID, "%s was generated with tokenizer_sha256 %.12s..., %s is %.12s... "
                   "(pass the run's tokenizer with --model DIR or --tokenizer FILE)", l->key, want, tok_src,
                   tokenizer_sha256(tok));
}

int samples_step_window(Store *st, const json_t *man, long step, StepWindow *w, PailErr *err) {
    char key[64];
    run_key_metrics(key, sizeof key, step);
    Buf b = {0};
    if (store_get(st, key, &b, NULL, NULL, err) < 0) {
        buf_free(&b);
        if (err->code == PAIL_ERR_NOT_FOUND)
            err_set(err, PAIL_ERR_NOT_FOUND, "step %ld: no %s (the trainer has not committed that step)", step, key);
        return -1;
    }
    json_error_t je;
    json_t *j = json_loadb((char *)b.data, b.len, 0, &je);
    buf_free(&b);
    int rc = samples_step_window_json(man, j, w);
    json_decref(j);
    if (rc < 0) return err_set(err, PAIL_ERR_INVALID, "%s: not a JSON object with a version", key);
    return 0;
}

int samples_step_window_json(const json_t *man, const json_t *metrics, StepWindow *w) {
    json_t *v = json_object_get(metrics, "version"), *sm = json_object_get(metrics, "staleness_max"),
           *t = json_object_get(metrics, "time");
    if (!json_is_object(metrics) || !json_is_number(v)) return -1;
    w->version = (long)json_number_value(v);
    json_t *ms = json_object_get(json_object_get(man, "trainer"), "max-staleness");
    long stale = json_is_number(sm) ? (long)ceil(json_number_value(sm))
                 : json_is_number(ms) ? (long)json_number_value(ms) : 0;
    w->oldest = w->version - stale < 0 ? 0 : w->version - stale;
    w->time = json_is_number(t) ? json_number_value(t) : 0;
    return 0;
}

int samples_visible(Buf *out, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        int rc = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f ? buf_printf(out, "\\x%02x", c)
                                                                    : buf_append(out, &c, 1);
        if (rc < 0) return -1;
    }
    return 0;
}

int samples_decode(const Tokenizer *tok, const int32_t *ids, size_t n, Buf *out, PailErr *err) {
    return tokenizer_decode_text(tok, ids, n, false, out, err);
}

// ---- grpo-ctl samples -------------------------------------------------------------

typedef struct {
    int shard;   // index into the loaded shards
    int64_t row; // episode row in [0, N)
} Sample;

static const LoadedShard *g_sort_shards;
static int g_sort_dir;  // +1 worst first (ascending), -1 best first

static int cmp_reward(const void *a, const void *b) {
    const Sample *x = a, *y = b;
    const RolloutShard *sx = &g_sort_shards[x->shard].s, *sy = &g_sort_shards[y->shard].s;
    bool vx = sx->reward_valid[x->row], vy = sy->reward_valid[y->row];
    if (vx != vy) return vx ? -1 : 1;  // invalid rewards last either way
    if (vx) {
        float rx = sx->rewards[x->row], ry = sy->rewards[y->row];
        if (rx != ry) return (rx < ry ? -1 : 1) * g_sort_dir;
    }
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;  // stable: shard order, then row
    return x->row < y->row ? -1 : x->row > y->row;
}

// newest first: by creation time, then (within a second) the higher version, worker, sequence
static int cmp_created(const void *a, const void *b) {
    const LoadedShard *x = a, *y = b;
    if (x->s.created_unix != y->s.created_unix) return x->s.created_unix > y->s.created_unix ? -1 : 1;
    return -strcmp(x->key, y->key);
}

static const char *finish_name(uint8_t f) { return f == FINISH_LENGTH ? "length" : "stop"; }

// Prints text with every line after the first indented by ind, control bytes but
// newline and tab as \xNN; at most max bytes (0: whole): its start, or with
// tail its end (a prompt's end holds the question; a chat's start, the system prompt).
static void print_block(FILE *o, const char *text, size_t len, const char *ind, long max, bool tail) {
    size_t from = 0, n = max > 0 && (size_t)max < len ? (size_t)max : len;
    if (tail && n < len) {
        from = len - n;
        while (from < len && ((unsigned char)text[from] & 0xC0) == 0x80) from++;  // at a character boundary
        fprintf(o, "[... %zu bytes before; --max-chars 0 shows all] ", from);
    } else {
        while (n < len && n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    }
    size_t end = tail ? len : n;
    for (size_t i = from; i < end; i++) {
        unsigned char c = (unsigned char)text[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) fprintf(o, "\\x%02x", c);  // visible, not raw
        else fputc(c, o);
        if (c == '\n') fputs(ind, o);  // after the last one too: a trailing newline shows as an empty "|" line
    }
    if (!tail && n < len) fprintf(o, " [... %zu more bytes; --max-chars 0 shows all]", len - n);
    fputc('\n', o);
}

static int print_json(FILE *o, const LoadedShard *l, int64_t row, const Buf *prompt, const Buf *completion,
                      PailErr *err) {
    const RolloutShard *s = &l->s;
    int32_t g = s->group[row];
    bool valid = s->reward_valid[row];
    json_t *comps = json_object();
    for (int64_t k = 0; k < s->K; k++)
        json_object_set_new(comps, s->component_names[k],
                            valid ? json_real(s->reward_components[row * s->K + k]) : json_null());
    json_t *j = json_object();
    json_object_set_new(j, "shard", json_string(l->key));
    json_object_set_new(j, "worker", json_string(s->worker_id));
    json_object_set_new(j, "adapter_version", json_integer(s->adapter_version));
    json_object_set_new(j, "row", json_integer(row));
    json_object_set_new(j, "group", json_integer(g));
    json_object_set_new(j, "dataset_row", json_integer(s->prompt_index[g]));
    // with their length: a decoded NUL byte is text too (JSON writes it as \u0000)
    json_object_set_new(j, "prompt", json_stringn((const char *)prompt->data ?: "", prompt->len));
    json_object_set_new(j, "completion", json_stringn((const char *)completion->data ?: "", completion->len));
    json_object_set_new(j, "prompt_tokens", json_integer(s->prompt_offsets[g + 1] - s->prompt_offsets[g]));
    json_object_set_new(j, "completion_tokens",
                        json_integer(s->completion_offsets[row + 1] - s->completion_offsets[row]));
    json_object_set_new(j, "reward", valid ? json_real(s->rewards[row]) : json_null());
    json_object_set_new(j, "reward_valid", json_boolean(valid));
    json_object_set_new(j, "rewards", comps);
    json_object_set_new(j, "advantage", json_real(l->adv[row]));
    json_object_set_new(j, "finish_reason", json_string(finish_name(s->finish_reason[row])));
    json_object_set_new(j, "turns", json_integer(s->turns[row]));
    char *txt = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!txt) return err_set(err, PAIL_ERR_NOMEM, "samples: out of memory for JSON");
    fprintf(o, "%s\n", txt);
    free(txt);
    return 0;
}

static void print_human(FILE *o, int idx, int total, const LoadedShard *l, int64_t row, const char *prompt,
                        size_t plen, const char *completion, size_t clen, long max_chars) {
    const RolloutShard *s = &l->s;
    int32_t g = s->group[row];
    int64_t G = shard_group_size(s);
    fprintf(o, "=== sample %d/%d: adapter v%lld, worker %s, %s\n", idx, total, (long long)s->adapter_version,
            s->worker_id, l->key);
    fprintf(o, "group %d (dataset row %lld), completion %lld of %lld, %lld tokens, finish %s", g,
            (long long)s->prompt_index[g], (long long)(row - (int64_t)g * G + 1), (long long)G,
            (long long)(s->completion_offsets[row + 1] - s->completion_offsets[row]), finish_name(s->finish_reason[row]));
    if (s->turns[row] != 1) fprintf(o, ", %d turns", s->turns[row]);
    fputc('\n', o);
    if (s->reward_valid[row]) {
        fprintf(o, "reward %.4g", s->rewards[row]);
        for (int64_t k = 0; k < s->K; k++)
            fprintf(o, "%s%s %.4g", k ? ", " : "  (", s->component_names[k], s->reward_components[row * s->K + k]);
        fprintf(o, "%s  advantage %+.4f\n", s->K ? ")" : "", l->adv[row]);
    } else {
        fprintf(o, "reward invalid (the reward failed; left out of the loss)  advantage %+.4f\n", l->adv[row]);
    }
    fprintf(o, "prompt     | ");
    print_block(o, prompt, plen, "           | ", max_chars, true);
    fprintf(o, "completion | ");
    print_block(o, completion, clen, "           | ", max_chars, false);
    fputc('\n', o);
}

// The groups step N trained on, from the consumption record of the trainer
// state that committed it: the next version after the one the step started
// from (a republish, which commits no step, may come between). 1 with *rec
// (owned) holding step N's entries, 0 when the record is not there (the state
// removed by gc, written by an older pail, or a step not found: a note says
// so and the caller falls back to the versions the step may have drawn from),
// -1 on a store error.
static int step_record(const char *prog, Store *st, long step, long from, FeedRecord **rec, int *nrec, char *key,
                       size_t cap, PailErr *err) {
    const char *why = "its consumption record is not found";
    char whybuf[1200];
    for (long v = from + 1; v <= from + 3; v++) {
        version_key(&SERIES_STATES, v, key, cap);
        Buf b = {0};
        PailErr e = {0};
        if (store_get(st, key, &b, NULL, NULL, &e) < 0) {
            buf_free(&b);
            if (e.code != PAIL_ERR_NOT_FOUND) {
                *err = e;
                return -1;
            }
            snprintf(whybuf, sizeof whybuf, "%s is not there (removed by gc?)", key);
            why = whybuf;
            break;
        }
        FeedRecord *all = NULL;
        int n = 0;
        int rc = state_read_record(b.data, b.len, key, &all, &n, &e);
        buf_free(&b);
        if (rc < 0) {
            snprintf(whybuf, sizeof whybuf, "%s", e.msg);
            why = whybuf;
            break;
        }
        int m = 0;
        bool later = false;
        for (int i = 0; i < n; i++) {
            if (all[i].step == step) all[m++] = all[i];
            later |= all[i].step > step;
        }
        if (m > 0) {
            *rec = all;
            *nrec = m;
            return 1;
        }
        free(all);
        if (later) break;  // a later state's steps: step N is in none
    }
    fprintf(stderr, "%s: note: step %ld: %s; showing the shards it may have drawn from\n", prog, step, why);
    key[0] = 0;
    return 0;
}

// A shard that cannot be loaded (damaged, not a shard, gone since the listing)
// is skipped with a warning, as the trainer rejects one; a store that fails
// (network, credentials) or memory stops the command. 0: loaded, 1: skipped, -1.
static int load_or_skip(const char *prog, Store *st, const char *key, ScaleRewards scale, LoadedShard *out,
                        int *skipped, PailErr *err) {
    if (samples_shard_load(st, key, scale, out, err) == 0) return 0;
    if (err->code == PAIL_ERR_NETWORK || err->code == PAIL_ERR_AUTH || err->code == PAIL_ERR_NOMEM) return -1;
    fprintf(stderr, "%s: warning: skipped %s: %s\n", prog, key, err->msg);
    (*skipped)++;
    return 1;
}

static int loaded_index(const LoadedShard *ls, int nls, const char *key) {  // -1: not loaded (skipped)
    for (int j = 0; j < nls; j++)
        if (!strcmp(ls[j].key, key)) return j;
    return -1;
}

int ctl_samples(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    long step, version, nshow, max_chars;
    bool worst = false, best = false, as_json = false;
    char *model = NULL, *tokfile = NULL;
    enum { NF = 9 };
    Flag fl[NF + CTL_STORE_NFLAGS] = {
        {"step", FLAG_INT, &step, "-1", -1, 1e9, "the groups trainer step N trained on (its trainer state's record); "
                                                 "without that record, the shards it may have drawn from (-1: off)"},
        {"version", FLAG_INT, &version, "-1", -1, 99999999, "the shards generated by adapter version V (-1: off)"},
        {"n", FLAG_INT, &nshow, "4", 1, 1e6, "samples (completions) to show"},
        {"worst", FLAG_BOOL, &worst, "false", 1, 0, "the lowest rewards first (invalid rewards last)"},
        {"best", FLAG_BOOL, &best, "false", 1, 0, "the highest rewards first (invalid rewards last)"},
        {"json", FLAG_BOOL, &as_json, "false", 1, 0, "one JSON object per sample and line, whole texts"},
        {"max-chars", FLAG_INT, &max_chars, "0", 0, 1e9, "in the human output, at most this many bytes of each "
                                                         "text: a prompt's end, a completion's start (0: whole)"},
        {"model", FLAG_STRING, &model, NULL, 1, 0, "model folder whose tokenizer.json decodes (default: run.json's "
                                                   "base_model when it exists here)"},
        {"tokenizer", FLAG_STRING, &tokfile, NULL, 1, 0, "a tokenizer.json to decode with (wins over --model)"},
    };
    ctl_store_flags(fl + NF, &sf);
    int n = NF + CTL_STORE_NFLAGS, npos = 0, rc;
    char **pos = NULL;
    const char *usage = "grpo-ctl samples RUN_URL [--step N | --version V] [--n K] [--worst | --best] [--json] "
                        "[--model DIR | --tokenizer FILE]";
    if ((rc = ctl_parse(usage, "Shows completions the rollout workers generated, from the run's shards: prompt, "
                        "completion (decoded, special tokens shown), reward and its components, advantage, adapter "
                        "version, worker and shard. Default: the shards of the newest version that has any.",
                        fl, n, argc, argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos != 1) {
        fprintf(stderr, "%s: expected one RUN_URL\nusage: %s\n", argv[0], usage);
        goto done;
    }
    if (step >= 0 && version >= 0) {
        fprintf(stderr, "%s: --step and --version select shards two ways: give one\n", argv[0]);
        goto done;
    }
    if (worst && best) {
        fprintf(stderr, "%s: --worst and --best: give one\n", argv[0]);
        goto done;
    }
    rc = 1;
    const char *url = pos[0];
    PailErr err = {0};
    Store *st = NULL;
    json_t *man = NULL;
    Tokenizer *tok = NULL;
    ShardRefs refs = {0};
    LoadedShard *ls = NULL;
    int nls = 0, skipped = 0;
    Sample *sm = NULL;
    FeedRecord *rec = NULL;
    int nrec = 0;
    Buf ptext = {0}, ctext = {0};
    char toksrc[4200];
    StoreOptions so = ctl_store_options(&sf);
    if (store_open(&st, url, &so, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    if (run_manifest_read(st, &man, &err) < 0) {
        if (err.code == PAIL_ERR_NOT_FOUND) fprintf(stderr, "%s: %s: no run.json: not a run\n", argv[0], url);
        else fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    // --version V lists rollouts/vV/ only; the whole listing when it is empty, for the message.
    if (samples_list_shards(st, version, &refs, &err) < 0 ||
        (refs.n == 0 && version >= 0 && samples_list_shards(st, -1, &refs, &err) < 0)) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    if (refs.n == 0) {
        fprintf(stderr, "%s: %s has no rollout shards (rollouts/v*/ is empty: no worker has written one, or gc "
                "removed them)\n", argv[0], url);
        goto close;
    }
    // Which versions, and which shards of them.
    long vlo, vhi;
    double by_time = 0;
    StepWindow w = {0};
    char statekey[128] = "";
    if (version >= 0) {
        vlo = vhi = version;
    } else if (step >= 0) {
        if (samples_step_window(st, man, step, &w, &err) < 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err.msg);
            goto close;
        }
        vlo = w.oldest;
        vhi = w.version;
        by_time = w.time;
        int r = step_record(argv[0], st, step, w.version, &rec, &nrec, statekey, sizeof statekey, &err);
        if (r < 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err.msg);
            goto close;
        }
    } else {
        vlo = vhi = refs.v[refs.n - 1].version;
    }
    ScaleRewards scale = samples_scale(man);
    int64_t total = 0;
    if (nrec > 0) {  // exactly the groups step N trained on, in the order it took them
        if (!(ls = calloc((size_t)nrec, sizeof *ls))) {
            fprintf(stderr, "%s: out of memory\n", argv[0]);
            goto close;
        }
        for (int i = 0; i < nrec; i++) {
            bool seen = loaded_index(ls, nls, rec[i].key) >= 0;
            for (int j = 0; j < i && !seen; j++) seen = !strcmp(rec[j].key, rec[i].key);  // (skipped before)
            if (seen) continue;
            int r = load_or_skip(argv[0], st, rec[i].key, scale, &ls[nls], &skipped, &err);
            if (r < 0) {
                fprintf(stderr, "%s: step %ld trained on %s: %s\n", argv[0], step, rec[i].key, err.msg);
                goto close;
            }
            nls += r == 0;
        }
        for (int i = 0; i < nrec; i++) {
            int j = loaded_index(ls, nls, rec[i].key);
            if (j < 0) continue;
            if ((int64_t)rec[i].first + rec[i].count > ls[j].s.P) {
                fprintf(stderr, "%s: %s: step %ld's record names groups %d to %d of %s, which has %lld\n", argv[0],
                        statekey, step, rec[i].first, rec[i].first + rec[i].count - 1, rec[i].key,
                        (long long)ls[j].s.P);
                goto close;
            }
            total += (int64_t)rec[i].count * shard_group_size(&ls[j].s);
        }
    } else {
        int cand = 0;
        for (int i = 0; i < refs.n; i++) cand += refs.v[i].version >= vlo && refs.v[i].version <= vhi;
        if (cand == 0) {
            if (version >= 0)
                fprintf(stderr, "%s: adapter version %ld has no shards under rollouts/v%08ld/ (versions with shards: %ld "
                        "to %ld)\n", argv[0], version, version, refs.v[0].version, refs.v[refs.n - 1].version);
            else
                fprintf(stderr, "%s: step %ld drew from adapter versions %ld to %ld, which have no shards left "
                        "(versions with shards: %ld to %ld)\n", argv[0], step, vlo, vhi, refs.v[0].version,
                        refs.v[refs.n - 1].version);
            goto close;
        }
        if (!(ls = calloc((size_t)cand, sizeof *ls))) {
            fprintf(stderr, "%s: out of memory\n", argv[0]);
            goto close;
        }
        for (int i = 0; i < refs.n; i++) {
            if (refs.v[i].version < vlo || refs.v[i].version > vhi) continue;
            int r = load_or_skip(argv[0], st, refs.v[i].key, scale, &ls[nls], &skipped, &err);
            if (r < 0) {
                fprintf(stderr, "%s: %s\n", argv[0], err.msg);
                goto close;
            }
            if (r == 1) continue;
            if (by_time > 0 && (double)ls[nls].s.created_unix > by_time) {  // written after the step committed
                samples_shard_free(&ls[nls]);
                continue;
            }
            total += ls[nls++].s.N;
        }
        if (total == 0 && !skipped) {
            fprintf(stderr, "%s: step %ld: no shard of adapter versions %ld to %ld was written by its commit time\n",
                    argv[0], step, vlo, vhi);
            goto close;
        }
        qsort(ls, (size_t)nls, sizeof *ls, cmp_created);
    }
    if (total == 0) {  // (skipped: every shard selected, each said above)
        fprintf(stderr, "%s: none of the %d shards selected could be read (warnings above)\n", argv[0], skipped);
        goto close;
    }
    if (!(sm = malloc((size_t)total * sizeof *sm))) {
        fprintf(stderr, "%s: out of memory for %lld samples\n", argv[0], (long long)total);
        goto close;
    }
    int64_t k = 0;
    if (nrec > 0) {
        for (int i = 0; i < nrec; i++) {
            int j = loaded_index(ls, nls, rec[i].key);
            if (j < 0) continue;
            int64_t G = shard_group_size(&ls[j].s);
            for (int64_t r = (int64_t)rec[i].first * G; r < ((int64_t)rec[i].first + rec[i].count) * G; r++)
                sm[k++] = (Sample){j, r};
        }
    } else {
        for (int i = 0; i < nls; i++)
            for (int64_t r = 0; r < ls[i].s.N; r++) sm[k++] = (Sample){i, r};
    }
    if (worst || best) {
        g_sort_shards = ls;
        g_sort_dir = worst ? 1 : -1;
        qsort(sm, (size_t)total, sizeof *sm, cmp_reward);
    }
    if (samples_tokenizer_open(man, model, tokfile, &tok, toksrc, sizeof toksrc, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto close;
    }
    for (int i = 0; i < nls; i++)  // before any output: a wrong tokenizer prints nothing
        if (samples_tokenizer_check(tok, toksrc, &ls[i], &err) < 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err.msg);
            goto close;
        }
    int show = total < nshow ? (int)total : (int)nshow;
    if (!as_json) {
        if (version >= 0) printf("run %s: adapter version %ld: %d shards, %lld samples", url, version, nls, (long long)total);
        else if (step >= 0 && nrec > 0)
            printf("run %s: step %ld (from adapter v%ld), the groups it trained on (%s): %d shards, %lld samples", url,
                   step, w.version, statekey, nls, (long long)total);
        else if (step >= 0)
            printf("run %s: step %ld (from adapter v%ld; versions %ld to %ld, written by its commit): %d shards, %lld "
                   "samples", url, step, w.version, vlo, vhi, nls, (long long)total);
        else printf("run %s: newest adapter version with shards, v%ld: %d shards, %lld samples", url, vhi, nls, (long long)total);
        if (skipped) printf(" (%d shard%s skipped: cannot be read)", skipped, skipped > 1 ? "s" : "");
        printf("; showing %d%s (tokenizer %s)\n\n", show, worst ? ", worst first" : best ? ", best first" : "", toksrc);
    }
    for (int i = 0; i < show; i++) {
        const LoadedShard *l = &ls[sm[i].shard];
        int64_t row = sm[i].row;
        int32_t g = l->s.group[row];
        buf_reset(&ptext);
        buf_reset(&ctext);
        if (samples_decode(tok, l->s.prompt_ids + l->s.prompt_offsets[g],
                           (size_t)(l->s.prompt_offsets[g + 1] - l->s.prompt_offsets[g]), &ptext, &err) < 0 ||
            samples_decode(tok, l->s.completion_ids + l->s.completion_offsets[row],
                           (size_t)(l->s.completion_offsets[row + 1] - l->s.completion_offsets[row]), &ctext, &err) < 0) {
            fprintf(stderr, "%s: %s: %s\n", argv[0], l->key, err.msg);
            goto close;
        }
        const char *pt = ptext.data ? (char *)ptext.data : "", *ct = ctext.data ? (char *)ctext.data : "";
        if (as_json) {
            if (print_json(stdout, l, row, &ptext, &ctext, &err) < 0) {
                fprintf(stderr, "%s: %s\n", argv[0], err.msg);
                goto close;
            }
        } else {
            print_human(stdout, i + 1, show, l, row, pt, ptext.len, ct, ctext.len, max_chars);
        }
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "%s: stdout: write failed\n", argv[0]);
        goto close;
    }
    rc = 0;
close:
    for (int i = 0; i < nls; i++) samples_shard_free(&ls[i]);
    free(ls);
    free(sm);
    free(rec);
    buf_free(&ptext);
    buf_free(&ctext);
    tokenizer_free(tok);
    samples_refs_free(&refs);
    json_decref(man);
    store_close(st);
done:
    free(pos);
    flags_free(fl, n);
    return rc;
}
