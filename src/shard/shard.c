// Rollout shard reader/writer on HDF5 (see shard.h; layout in doc/formats.md).
#include "shard/shard.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shard/h5file.h"

#define MAX_ELEMS (INT64_C(1) << 31)

int64_t shard_group_size(const RolloutShard *s) { return s->P > 0 ? s->N / s->P : 0; }

static int check_offsets(const int64_t *off, int64_t n, int64_t total, const char *what, const char *name,
                         PailErr *err) {
    if (off[0] != 0) return err_set(err, PAIL_ERR_INVALID, "shard %s: %s_offsets[0] is %lld, expected 0", name, what, (long long)off[0]);
    for (int64_t i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return err_set(err, PAIL_ERR_INVALID, "shard %s: %s_offsets decreases at %lld (%lld -> %lld)", name, what,
                           (long long)i, (long long)off[i], (long long)off[i + 1]);
    if (off[n] != total)
        return err_set(err, PAIL_ERR_INVALID, "shard %s: dataset '%s_ids' has %lld values, %s_offsets says %lld", name,
                       what, (long long)total, what, (long long)off[n]);
    return 0;
}

static int check_ids(const int32_t *ids, int64_t n, int64_t vocab, const char *what, const char *name, PailErr *err) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || (vocab > 0 && ids[i] >= vocab))
            return err_set(err, PAIL_ERR_INVALID, "shard %s: %s_ids[%lld] = %d is outside the vocabulary [0, %lld)", name,
                           what, (long long)i, ids[i], (long long)vocab);
    return 0;
}

// Totals implied by the offsets (the ids arrays are as long as the last offset).
static int64_t n_prompt_tokens(const RolloutShard *s) { return s->prompt_offsets[s->P]; }
static int64_t n_completion_tokens(const RolloutShard *s) { return s->completion_offsets[s->N + s->X]; }

static int check_body(const RolloutShard *s, int64_t ptok, int64_t ctok, int64_t vocab, const char *name,
                      PailErr *err) {
    if (s->P <= 0 || s->N <= 0) return err_set(err, PAIL_ERR_INVALID, "shard %s: no prompts or no completions (P=%lld, N=%lld)", name, (long long)s->P, (long long)s->N);
    if (s->N % s->P) return err_set(err, PAIL_ERR_INVALID, "shard %s: %lld completions for %lld prompts is not a whole group size", name, (long long)s->N, (long long)s->P);
    if (s->K < 0 || s->K > SHARD_MAX_COMPONENTS) return err_set(err, PAIL_ERR_INVALID, "shard %s: %lld reward components (max %d)", name, (long long)s->K, SHARD_MAX_COMPONENTS);
    if (check_offsets(s->prompt_offsets, s->P, ptok, "prompt", name, err) < 0) return -1;
    if (s->X < 0 || (s->X > 0 && !s->segment_of))
        return err_set(err, PAIL_ERR_INVALID, "shard %s: %lld segments without segment_of", name, (long long)s->X);
    int64_t R = s->N + s->X;  // rows: the episodes', then their further segments
    if (check_offsets(s->completion_offsets, R, ctok, "completion", name, err) < 0) return -1;
    for (int64_t p = 0; p < s->P; p++)  // nothing would predict a completion's first token
        if (s->prompt_offsets[p + 1] == s->prompt_offsets[p])
            return err_set(err, PAIL_ERR_INVALID, "shard %s: prompt %lld is empty (prompt_offsets[%lld] = "
                           "prompt_offsets[%lld] = %lld)", name, (long long)p, (long long)p, (long long)p + 1,
                           (long long)s->prompt_offsets[p]);
    if (check_ids(s->prompt_ids, ptok, vocab, "prompt", name, err) < 0) return -1;
    if (check_ids(s->completion_ids, ctok, vocab, "completion", name, err) < 0) return -1;
    int64_t G = s->N / s->P;
    for (int64_t i = 0; i < R; i++) {
        if (s->group[i] < 0 || s->group[i] >= s->P)
            return err_set(err, PAIL_ERR_INVALID, "shard %s: group[%lld] = %d is not a prompt index in [0, %lld)", name, (long long)i, s->group[i], (long long)s->P);
        if (i < s->N && s->group[i] != i / G)  // a group's G completions stay together
            return err_set(err, PAIL_ERR_INVALID, "shard %s: group[%lld] = %d, expected %lld (groups of %lld stored contiguously)", name, (long long)i, s->group[i], (long long)(i / G), (long long)G);
        if (i >= s->N) {  // a segment: its episode's group and reward
            int64_t e = s->segment_of[i - s->N];
            if (e < 0 || e >= s->N)
                return err_set(err, PAIL_ERR_INVALID, "shard %s: segment_of[%lld] = %lld is not an episode row in [0, %lld)",
                               name, (long long)(i - s->N), (long long)e, (long long)s->N);
            bool same = s->group[i] == s->group[e] && s->reward_valid[i] == s->reward_valid[e] &&
                        (!s->reward_valid[i] || s->rewards[i] == s->rewards[e]);
            for (int64_t k = 0; same && s->reward_valid[i] && k < s->K; k++)
                same = s->reward_components[i * s->K + k] == s->reward_components[e * s->K + k];
            if (!same)
                return err_set(err, PAIL_ERR_INVALID, "shard %s: row %lld, a segment of episode row %lld, has another "
                               "group, reward or components than that episode", name, (long long)i, (long long)e);
        }
        if (s->finish_reason[i] > FINISH_LENGTH)
            return err_set(err, PAIL_ERR_INVALID, "shard %s: finish_reason[%lld] = %d (0 stop, 1 length)", name, (long long)i, s->finish_reason[i]);
        if (s->reward_valid[i] > 1)
            return err_set(err, PAIL_ERR_INVALID, "shard %s: reward_valid[%lld] = %d (0 or 1)", name, (long long)i, s->reward_valid[i]);
        if (!s->reward_valid[i]) continue;
        if (!(fabsf(s->rewards[i]) <= SHARD_REWARD_MAX))  // also NaN
            return err_set(err, PAIL_ERR_INVALID, "shard %s: rewards[%lld] = %g is outside [-%g, %g] but reward_valid is 1",
                           name, (long long)i, (double)s->rewards[i], (double)SHARD_REWARD_MAX, (double)SHARD_REWARD_MAX);
        for (int64_t k = 0; k < s->K; k++) {
            float c = s->reward_components[i * s->K + k];
            if (!(fabsf(c) <= SHARD_REWARD_MAX))
                return err_set(err, PAIL_ERR_INVALID, "shard %s: reward_components[%lld, %lld] = %g is outside [-%g, %g]",
                               name, (long long)i, (long long)k, (double)c, (double)SHARD_REWARD_MAX,
                               (double)SHARD_REWARD_MAX);
        }
    }
    // turns: assistant turns completed; 0 for an episode that failed in its
    // opening or its first turn (it may hold tokens, none of them trained on).
    for (int64_t i = 0; s->turns && i < R; i++)
        if (s->turns[i] < 0)
            return err_set(err, PAIL_ERR_INVALID, "shard %s: turns[%lld] = %d is negative", name, (long long)i, s->turns[i]);
    const uint8_t *cm = s->completion_mask;
    for (int64_t t = 0; t < ctok; t++) {
        if (cm && cm[t] > 1)
            return err_set(err, PAIL_ERR_INVALID, "shard %s: completion_mask[%lld] = %d (0 or 1)", name, (long long)t, cm[t]);
        if (cm && !cm[t]) {
            // An environment's token was not sampled: it has no behaviour log-prob, and
            // the writer stores exactly 0 (anything else is a writer mixing up the arrays).
            if (s->logprobs[t] != 0.0f)
                return err_set(err, PAIL_ERR_INVALID, "shard %s: logprobs[%lld] = %g but completion_mask[%lld] is 0 "
                               "(a token the environment appended has log-prob 0)", name, (long long)t,
                               (double)s->logprobs[t], (long long)t);
            continue;
        }
        if (!(s->logprobs[t] <= 0.0f && s->logprobs[t] >= SHARD_LOGPROB_MIN))  // also NaN
            return err_set(err, PAIL_ERR_INVALID, "shard %s: logprobs[%lld] = %g is outside [%g, 0]", name, (long long)t,
                           (double)s->logprobs[t], (double)SHARD_LOGPROB_MIN);
    }
    for (int64_t k = 0; k < s->K; k++)
        if (!s->component_names[k] || !s->component_names[k][0])
            return err_set(err, PAIL_ERR_INVALID, "shard %s: reward component %lld has no name", name, (long long)k);
    return 0;
}

int shard_check(const RolloutShard *s, int64_t vocab, const char *name, PailErr *err) {
    if (!s->prompt_offsets || !s->completion_offsets || s->P <= 0 || s->N <= 0)
        return err_set(err, PAIL_ERR_INVALID, "shard %s: empty", name);
    return check_body(s, n_prompt_tokens(s), n_completion_tokens(s), vocab, name, err);
}

int shard_write(const RolloutShard *s, Buf *out, PailErr *err) {
    char name[160];
    snprintf(name, sizeof name, "%s-v%lld", s->worker_id, (long long)s->adapter_version);
    if (shard_check(s, 0, name, err) < 0) return -1;
    int64_t P = s->P, N = s->N + s->X, K = s->K, X = s->X, ptok = n_prompt_tokens(s), ctok = n_completion_tokens(s);
    // (N: every row, the segments' included.) A single-turn writer leaves the mask and turns NULL: every token is the model's, one turn each.
    uint8_t *ones = NULL;
    int32_t *one_turn = NULL;
    const uint8_t *cmask = s->completion_mask;
    const int32_t *turns = s->turns;
    if (!cmask) {
        if (!(ones = malloc((size_t)(ctok > 0 ? ctok : 1)))) return err_set(err, PAIL_ERR_NOMEM, "shard %s: out of memory", name);
        memset(ones, 1, (size_t)ctok);
        cmask = ones;
    }
    if (!turns) {
        if (!(one_turn = malloc((size_t)N * sizeof *one_turn))) {
            free(ones);
            return err_set(err, PAIL_ERR_NOMEM, "shard %s: out of memory", name);
        }
        for (int64_t i = 0; i < N; i++) one_turn[i] = 1;
        turns = one_turn;
    }
    hid_t f = h5f_create_mem(name, err);
    if (f < 0) {
        free(ones);
        free(one_turn);
        return -1;
    }
    int64_t p1 = P + 1, n1 = N + 1, nk[2] = {N, K};
    int rc = 0;
    rc |= h5a_write_str(f, "format", SHARD_FORMAT, err);
    rc |= h5a_write_i64(f, "format_version", X ? SHARD_FORMAT_VERSION : SHARD_FORMAT_VERSION_PLAIN, err);
    rc |= h5a_write_str(f, "run_id", s->run_id, err);
    rc |= h5a_write_i64(f, "adapter_version", s->adapter_version, err);
    rc |= h5a_write_str(f, "worker_id", s->worker_id, err);
    rc |= h5a_write_i64(f, "created_unix", s->created_unix, err);
    rc |= h5a_write_str(f, "base_sha256", s->base_sha256, err);
    rc |= h5a_write_str(f, "tokenizer_sha256", s->tokenizer_sha256, err);
    rc |= h5a_write_f64(f, "temperature", s->temperature, err);
    rc |= h5a_write_f64(f, "top_p", s->top_p, err);
    rc |= h5a_write_i64(f, "top_k", s->top_k, err);
    rc |= h5a_write_f64(f, "min_p", s->min_p, err);
    rc |= h5a_write_i64(f, "max_new_tokens", s->max_new_tokens, err);
    rc |= h5a_write_i64(f, "seed", s->seed, err);
    if (s->prompts_drawn > 0) rc |= h5a_write_i64(f, "prompts_drawn", s->prompts_drawn, err);  // optional
    if (s->kv_pool_blocks > 0) {  // optional, all four
        rc |= h5a_write_i64(f, "kv_pool_blocks", s->kv_pool_blocks, err);
        rc |= h5a_write_i64(f, "kv_peak_blocks", s->kv_peak_blocks, err);
        rc |= h5a_write_i64(f, "kv_preemptions", s->kv_preemptions, err);
        rc |= h5a_write_i64(f, "kv_recomputed_tokens", s->kv_recomputed_tokens, err);
    }
    rc |= h5d_write(f, "prompt_ids", H5T_NATIVE_INT32, 1, &ptok, s->prompt_ids, err);
    rc |= h5d_write(f, "prompt_offsets", H5T_NATIVE_INT64, 1, &p1, s->prompt_offsets, err);
    rc |= h5d_write(f, "prompt_index", H5T_NATIVE_INT64, 1, &P, s->prompt_index, err);
    rc |= h5d_write(f, "completion_ids", H5T_NATIVE_INT32, 1, &ctok, s->completion_ids, err);
    rc |= h5d_write(f, "completion_offsets", H5T_NATIVE_INT64, 1, &n1, s->completion_offsets, err);
    rc |= h5d_write(f, "group", H5T_NATIVE_INT32, 1, &N, s->group, err);
    rc |= h5d_write(f, "logprobs", H5T_NATIVE_FLOAT, 1, &ctok, s->logprobs, err);
    rc |= h5d_write(f, "rewards", H5T_NATIVE_FLOAT, 1, &N, s->rewards, err);
    rc |= h5d_write(f, "reward_valid", H5T_NATIVE_UINT8, 1, &N, s->reward_valid, err);
    rc |= h5d_write(f, "reward_components", H5T_NATIVE_FLOAT, 2, nk, s->reward_components, err);
    rc |= h5d_write(f, "finish_reason", H5T_NATIVE_UINT8, 1, &N, s->finish_reason, err);
    rc |= h5d_write(f, "completion_mask", H5T_NATIVE_UINT8, 1, &ctok, cmask, err);
    rc |= h5d_write(f, "turns", H5T_NATIVE_INT32, 1, &N, turns, err);
    if (X) rc |= h5d_write(f, "segment_of", H5T_NATIVE_INT32, 1, &X, s->segment_of, err);
    if (rc == 0) {
        hid_t ds = H5Dopen2(f, "reward_components", H5P_DEFAULT);
        rc = h5a_write_strs(ds, "names", (const char *const *)s->component_names, (int)K, err);
        H5Dclose(ds);
    }
    if (rc == 0) rc = h5f_image(f, out, name, err);
    h5f_close(f);
    free(ones);
    free(one_turn);
    return rc ? err_wrap(err, "shard %s", name) : 0;
}

void shard_free(RolloutShard *s) {
    free(s->prompt_ids);
    free(s->prompt_offsets);
    free(s->prompt_index);
    free(s->completion_ids);
    free(s->completion_offsets);
    free(s->group);
    free(s->logprobs);
    free(s->rewards);
    free(s->reward_valid);
    free(s->reward_components);
    free(s->finish_reason);
    free(s->completion_mask);
    free(s->turns);
    free(s->segment_of);
    for (int k = 0; k < SHARD_MAX_COMPONENTS; k++) free(s->component_names[k]);
    memset(s, 0, sizeof *s);
}

int shard_read(RolloutShard *s, const void *data, size_t len, const char *name, PailErr *err) {
    memset(s, 0, sizeof *s);
    hid_t f = h5f_open_mem(data, len, name, err);
    if (f < 0) return -1;
    char format[64];
    int64_t version, d[2];
    int rc = 0;
    if (h5a_read_str(f, "format", format, sizeof format, name, err) < 0 ||
        h5a_read_i64(f, "format_version", &version, name, err) < 0) {
        rc = err_wrap(err, "shard");
        goto done;
    }
    if (strcmp(format, SHARD_FORMAT) != 0) {
        rc = err_set(err, PAIL_ERR_INVALID, "shard %s: format is '%s', expected '%s'", name, format, SHARD_FORMAT);
        goto done;
    }
    if (version < SHARD_FORMAT_VERSION_MIN || version > SHARD_FORMAT_VERSION) {
        rc = err_set(err, PAIL_ERR_INVALID,
                     "shard %s: format_version %lld, this pail reads %d to %d (use the pail release that wrote it, "
                     "or regenerate the rollouts)", name, (long long)version, SHARD_FORMAT_VERSION_MIN,
                     SHARD_FORMAT_VERSION);
        goto done;
    }
    if (h5a_read_str(f, "run_id", s->run_id, sizeof s->run_id, name, err) < 0 ||
        h5a_read_i64(f, "adapter_version", &s->adapter_version, name, err) < 0 ||
        h5a_read_str(f, "worker_id", s->worker_id, sizeof s->worker_id, name, err) < 0 ||
        h5a_read_i64(f, "created_unix", &s->created_unix, name, err) < 0 ||
        h5a_read_str(f, "base_sha256", s->base_sha256, sizeof s->base_sha256, name, err) < 0 ||
        h5a_read_str(f, "tokenizer_sha256", s->tokenizer_sha256, sizeof s->tokenizer_sha256, name, err) < 0 ||
        h5a_read_f64(f, "temperature", &s->temperature, name, err) < 0 ||
        h5a_read_f64(f, "top_p", &s->top_p, name, err) < 0 ||
        h5a_read_i64(f, "top_k", &s->top_k, name, err) < 0 ||
        h5a_read_i64(f, "max_new_tokens", &s->max_new_tokens, name, err) < 0 ||
        h5a_read_i64(f, "seed", &s->seed, name, err) < 0 ||
        (h5a_exists(f, "prompts_drawn") && h5a_read_i64(f, "prompts_drawn", &s->prompts_drawn, name, err) < 0) ||
        (h5a_exists(f, "min_p") && h5a_read_f64(f, "min_p", &s->min_p, name, err) < 0) ||
        (h5a_exists(f, "kv_pool_blocks") &&
         (h5a_read_i64(f, "kv_pool_blocks", &s->kv_pool_blocks, name, err) < 0 ||
          h5a_read_i64(f, "kv_peak_blocks", &s->kv_peak_blocks, name, err) < 0 ||
          h5a_read_i64(f, "kv_preemptions", &s->kv_preemptions, name, err) < 0 ||
          h5a_read_i64(f, "kv_recomputed_tokens", &s->kv_recomputed_tokens, name, err) < 0))) {
        rc = err_wrap(err, "shard");
        goto done;
    }
    if (s->kv_pool_blocks < 0 || s->kv_peak_blocks < 0 || s->kv_peak_blocks > s->kv_pool_blocks ||
        s->kv_preemptions < 0 || s->kv_recomputed_tokens < 0) {
        rc = err_set(err, PAIL_ERR_INVALID, "shard %s: KV pool figures out of range (pool %lld blocks, peak %lld, "
                     "preemptions %lld, recomputed tokens %lld)", name, (long long)s->kv_pool_blocks,
                     (long long)s->kv_peak_blocks, (long long)s->kv_preemptions, (long long)s->kv_recomputed_tokens);
        goto done;
    }
    if (s->prompts_drawn < 0) {
        rc = err_set(err, PAIL_ERR_INVALID, "shard %s: prompts_drawn %lld is negative", name, (long long)s->prompts_drawn);
        goto done;
    }
    int64_t any = -1, ptok, ctok;
    if ((rc = h5d_read(f, "prompt_offsets", H5T_NATIVE_INT64, 1, &any, d, MAX_ELEMS, (void **)&s->prompt_offsets, name, err)) < 0) goto done;
    s->P = d[0] - 1;
    if ((rc = h5d_read(f, "completion_offsets", H5T_NATIVE_INT64, 1, &any, d, MAX_ELEMS, (void **)&s->completion_offsets, name, err)) < 0) goto done;
    s->N = d[0] - 1;
    if (version >= 3) {  // segments: rows after the episodes'
        if ((rc = h5d_read(f, "segment_of", H5T_NATIVE_INT32, 1, &any, d, MAX_ELEMS, (void **)&s->segment_of, name, err)) < 0) goto done;
        s->X = d[0];
        s->N -= s->X;
    }
    if (s->P <= 0 || s->N <= 0) {
        rc = err_set(err, PAIL_ERR_INVALID, "shard %s: no prompts or no completions", name);
        goto done;
    }
    int64_t P = s->P, N = s->N + s->X;  // (N: every row here)
    if ((rc = h5d_read(f, "prompt_ids", H5T_NATIVE_INT32, 1, &any, &ptok, MAX_ELEMS, (void **)&s->prompt_ids, name, err)) < 0) goto done;
    if ((rc = h5d_read(f, "prompt_index", H5T_NATIVE_INT64, 1, &P, NULL, MAX_ELEMS, (void **)&s->prompt_index, name, err)) < 0) goto done;
    if ((rc = h5d_read(f, "completion_ids", H5T_NATIVE_INT32, 1, &any, &ctok, MAX_ELEMS, (void **)&s->completion_ids, name, err)) < 0) goto done;
    if ((rc = h5d_read(f, "group", H5T_NATIVE_INT32, 1, &N, NULL, MAX_ELEMS, (void **)&s->group, name, err)) < 0) goto done;
    if ((rc = h5d_read(f, "logprobs", H5T_NATIVE_FLOAT, 1, &ctok, NULL, MAX_ELEMS, (void **)&s->logprobs, name, err)) < 0) goto done;
    if ((rc = h5d_read(f, "rewards", H5T_NATIVE_FLOAT, 1, &N, NULL, MAX_ELEMS, (void **)&s->rewards, name, err)) < 0) goto done;
    if ((rc = h5d_read(f, "reward_valid", H5T_NATIVE_UINT8, 1, &N, NULL, MAX_ELEMS, (void **)&s->reward_valid, name, err)) < 0) goto done;
    if ((rc = h5d_read(f, "finish_reason", H5T_NATIVE_UINT8, 1, &N, NULL, MAX_ELEMS, (void **)&s->finish_reason, name, err)) < 0) goto done;
    if (version >= 2) {
        if ((rc = h5d_read(f, "completion_mask", H5T_NATIVE_UINT8, 1, &ctok, NULL, MAX_ELEMS, (void **)&s->completion_mask, name, err)) < 0) goto done;
        if ((rc = h5d_read(f, "turns", H5T_NATIVE_INT32, 1, &N, NULL, MAX_ELEMS, (void **)&s->turns, name, err)) < 0) goto done;
    } else {  // version 1: single-turn completions, every token the model's
        s->completion_mask = malloc((size_t)(ctok > 0 ? ctok : 1));
        s->turns = malloc((size_t)N * sizeof *s->turns);
        if (!s->completion_mask || !s->turns) {
            rc = err_set(err, PAIL_ERR_NOMEM, "shard %s: out of memory", name);
            goto done;
        }
        memset(s->completion_mask, 1, (size_t)ctok);
        for (int64_t i = 0; i < N; i++) s->turns[i] = 1;
    }
    int64_t nk[2] = {N, -1};
    if ((rc = h5d_read(f, "reward_components", H5T_NATIVE_FLOAT, 2, nk, d, MAX_ELEMS, (void **)&s->reward_components, name, err)) < 0) goto done;
    s->K = d[1];
    if (s->K > SHARD_MAX_COMPONENTS) {
        rc = err_set(err, PAIL_ERR_INVALID, "shard %s: %lld reward components (max %d)", name, (long long)s->K, SHARD_MAX_COMPONENTS);
        goto done;
    }
    if (s->K > 0) {
        hid_t ds = H5Dopen2(f, "reward_components", H5P_DEFAULT);
        char **names = NULL;
        int nn = 0;
        rc = h5a_read_strs(ds, "names", &names, &nn, name, err);
        H5Dclose(ds);
        if (rc < 0) goto done;
        for (int k = 0; k < nn; k++) {
            if (k < SHARD_MAX_COMPONENTS) s->component_names[k] = names[k]; else free(names[k]);
        }
        free(names);
        if (nn != s->K) {
            rc = err_set(err, PAIL_ERR_INVALID, "shard %s: reward_components has %lld columns but %d names", name, (long long)s->K, nn);
            goto done;
        }
    }
    rc = check_body(s, ptok, ctok, 0, name, err);
done:
    h5f_close(f);
    if (rc < 0) shard_free(s);
    return rc < 0 ? -1 : 0;
}
