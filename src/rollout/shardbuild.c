// The rollout shard builder (see shardbuild.h): plain groups and episode rows
// with their segments go through one allocation and one row writer, so both
// kinds own their arrays alike; then the create-only publish.
#include "rollout/shardbuild.h"
#include <stdlib.h>
#include <string.h>
#include "store/runlayout.h"
#include "store/versions.h"

// Every array of a shard of these sizes (rewards zeroed), prompt_index and
// the K names copied; completion_mask and turns only when masked (without,
// shard_write stores all ones and 1). What was allocated stays in s on failure.
static int shard_alloc(RolloutShard *s, int64_t P, int64_t N, int64_t X, int K, int64_t nprompt, int64_t ntok,
                       bool masked, const int64_t *prompt_index, const char *const *names, PailErr *err) {
    s->P = P;
    s->N = N;
    s->X = X;
    s->K = K;
    size_t nt = (size_t)(ntok ? ntok : 1), R = (size_t)(N + X);
    s->prompt_ids = malloc((size_t)(nprompt ? nprompt : 1) * sizeof(int32_t));
    s->prompt_offsets = malloc(((size_t)P + 1) * sizeof(int64_t));
    s->prompt_index = malloc((size_t)P * sizeof(int64_t));
    s->completion_ids = malloc(nt * sizeof(int32_t));
    s->logprobs = malloc(nt * sizeof(float));
    s->completion_offsets = malloc((R + 1) * sizeof(int64_t));
    s->group = malloc(R * sizeof(int32_t));
    s->rewards = calloc(R, sizeof(float));
    s->reward_valid = calloc(R, 1);
    s->reward_components = calloc(R * (size_t)(K ? K : 1), sizeof(float));
    s->finish_reason = calloc(R, 1);
    if (masked) {
        s->completion_mask = malloc(nt);
        s->turns = malloc(R * sizeof(int32_t));
    }
    if (X) s->segment_of = malloc((size_t)X * sizeof(int32_t));
    bool named = true;
    for (int k = 0; k < K; k++) named = named && (s->component_names[k] = strdup(names[k]));
    if (!s->prompt_ids || !s->prompt_offsets || !s->prompt_index || !s->completion_ids || !s->logprobs ||
        !s->completion_offsets || !s->group || !s->rewards || !s->reward_valid || !s->reward_components ||
        !s->finish_reason || (masked && (!s->completion_mask || !s->turns)) || (X && !s->segment_of) || !named)
        return err_set(err, PAIL_ERR_NOMEM, "out of memory for a shard of %lld rows and %lld tokens",
                       (long long)R, (long long)ntok);
    memcpy(s->prompt_index, prompt_index, (size_t)P * sizeof(int64_t));
    s->prompt_offsets[0] = 0;
    s->completion_offsets[0] = 0;
    return 0;
}

// Prompt p, after prompt p - 1.
static void put_prompt(RolloutShard *s, int p, const int32_t *ids, int n) {
    memcpy(s->prompt_ids + s->prompt_offsets[p], ids, (size_t)n * sizeof(int32_t));
    s->prompt_offsets[p + 1] = s->prompt_offsets[p] + n;
}

// Row i, after row i - 1: npre tokens pre (mask 0, log-prob 0), then n tokens
// ids with their log-probs lp and mask (NULL for a shard without a mask). A
// segment row (i >= N) is in its episode's group: segment_of is set first.
static void put_row(RolloutShard *s, int64_t i, const int32_t *pre, int npre, const int32_t *ids, const float *lp,
                    const uint8_t *mask, int n) {
    int64_t q = s->completion_offsets[i];
    if (npre > 0) {
        memcpy(s->completion_ids + q, pre, (size_t)npre * sizeof(int32_t));
        memset(s->logprobs + q, 0, (size_t)npre * sizeof(float));
        memset(s->completion_mask + q, 0, (size_t)npre);
        q += npre;
    }
    memcpy(s->completion_ids + q, ids, (size_t)n * sizeof(int32_t));
    memcpy(s->logprobs + q, lp, (size_t)n * sizeof(float));
    if (mask) memcpy(s->completion_mask + q, mask, (size_t)n);
    s->completion_offsets[i + 1] = q + n;
    s->group[i] = i < s->N ? (int32_t)(i / shard_group_size(s)) : s->group[s->segment_of[i - s->N]];
}

int shard_build_groups(RolloutShard *s, const GenPrompt *prompts, int P, int G, const GenCompletion *out,
                       const int64_t *prompt_index, const char *const *names, int K, PailErr *err) {
    int N = P * G;
    int64_t nprompt = 0, ntok = 0;
    for (int p = 0; p < P; p++) nprompt += prompts[p].n;
    for (int i = 0; i < N; i++) ntok += out[i].n;
    if (shard_alloc(s, P, N, 0, K, nprompt, ntok, false, prompt_index, names, err) < 0) return -1;
    for (int p = 0; p < P; p++) put_prompt(s, p, prompts[p].ids, prompts[p].n);
    for (int i = 0; i < N; i++) {
        put_row(s, i, NULL, 0, out[i].ids, out[i].logprobs, NULL, out[i].n);
        s->finish_reason[i] = out[i].finish;
    }
    return 0;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

// Every component name the episodes gave, in first-seen order, at most
// SHARD_MAX_COMPONENTS (the first one past them: info->dropped); the failed
// episodes counted.
static int episode_names(const EpisodeOut *out, int N, const char **names, EpisodeShardInfo *info) {
    int K = 0;
    for (int i = 0; i < N; i++) {
        const char *key;
        json_t *v;
        if (!out[i].valid) { info->failed++; if (!info->why) info->why = out[i].why; }
        json_object_foreach((json_t *)out[i].components, key, v) {
            int k = 0;
            while (k < K && strcmp(names[k], key)) k++;
            if (k == K && K < SHARD_MAX_COMPONENTS) names[K++] = key;
            else if (k == K && !info->dropped) info->dropped = key;
        }
    }
    return K;
}

int shard_build_episodes(RolloutShard *s, const EpisodeOut *out, int P, int G, const int64_t *prompt_index,
                         int32_t placeholder, EpisodeShardInfo *info, PailErr *err) {
    int N = P * G;
    memset(info, 0, sizeof *info);
    const char *names[SHARD_MAX_COMPONENTS];
    int K = episode_names(out, N, names, info);
    // lcp[p]: the tokens group p's openings share (0: none, or no opening), base[p]: its first opened episode.
    int *lcp = calloc((size_t)P, sizeof *lcp), *base = calloc((size_t)P, sizeof *base), rc = -1;
    if (!lcp || !base) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory for a shard of %d groups x %d episodes", P, G);
        goto done;
    }
    int64_t nprompt = 0, ntok = 0;
    int X = 0;  // further segments (an endpoint's agent edited its history): rows after the N
    for (int p = 0; p < P; p++) {
        base[p] = -1;
        for (int j = 0; j < G; j++) {
            const EpisodeOut *o = &out[p * G + j];
            if (!o->n_open) continue;
            if (base[p] < 0) { base[p] = p * G + j; lcp[p] = o->n_open; }
            else lcp[p] = common_prefix(out[base[p]].open_ids, lcp[p], o->open_ids, o->n_open);
        }
        nprompt += lcp[p] > 0 ? lcp[p] : 1;
        for (int j = 0; j < G; j++) {
            const EpisodeOut *o = &out[p * G + j];
            int rest = o->n_open ? o->n_open - (lcp[p] > 0 ? lcp[p] : 0) : 0;
            ntok += o->n + rest;
            for (int t = 0; t < o->n; t++) info->generated += o->mask[t];
            for (int g = 0; g < o->n_segs; g++) {
                ntok += o->segs[g].n + rest;
                for (int t = 0; t < o->segs[g].n; t++) info->generated += o->segs[g].mask[t];
            }
            X += o->n_segs;
            info->turns += o->turns;
        }
    }
    if (shard_alloc(s, P, N, X, K, nprompt, ntok, true, prompt_index, names, err) < 0) goto done;
    for (int p = 0; p < P; p++) {
        int shared = lcp[p] > 0 ? lcp[p] : 0;
        // Openings that share no token: their rows would not be what the model saw.
        if (shared) put_prompt(s, p, out[base[p]].open_ids, shared);
        else put_prompt(s, p, &placeholder, 1);
        for (int j = 0; j < G; j++) {
            int i = p * G + j;
            const EpisodeOut *o = &out[i];
            int segturns = 0;
            for (int g = 0; g < o->n_segs; g++) segturns += o->segs[g].turns;
            int rest = o->n_open ? o->n_open - shared : 0;
            put_row(s, i, rest > 0 ? o->open_ids + shared : NULL, rest, o->ids, o->logprobs, o->mask, o->n);
            s->turns[i] = o->turns - segturns;
            s->finish_reason[i] = o->finish;
            s->reward_valid[i] = o->valid && shared > 0;
            s->rewards[i] = o->valid ? (float)o->reward : 0.0f;
            for (int k = 0; k < K && o->valid; k++) {
                json_t *v = json_object_get(o->components, names[k]);
                s->reward_components[(size_t)i * K + k] = v ? (float)json_number_value(v) : 0.0f;
            }
        }
    }
    // The segments, in the same token layout, after the N rows; each shares its episode's reward.
    for (int i = 0, x = 0; i < N; i++)
        for (int g = 0; g < out[i].n_segs; g++, x++) {
            const EpisodeSeg *sg = &out[i].segs[g];
            const EpisodeOut *o = &out[i];
            int r = N + x, shared = lcp[i / G] > 0 ? lcp[i / G] : 0;
            int rest = o->n_open ? o->n_open - shared : 0;
            s->segment_of[x] = i;
            put_row(s, r, rest > 0 ? o->open_ids + shared : NULL, rest, sg->ids, sg->logprobs, sg->mask, sg->n);
            s->turns[r] = sg->turns;
            s->finish_reason[r] = sg->finish;
            s->reward_valid[r] = s->reward_valid[i];
            s->rewards[r] = s->rewards[i];
            for (int k = 0; k < K; k++) s->reward_components[(size_t)r * K + k] = s->reward_components[(size_t)i * K + k];
        }
    rc = 0;
done:
    free(lcp);
    free(base);
    return rc;
}

int shard_publish(Store *st, const RolloutShard *s, long *seq, char *key, size_t cap, PailErr *err) {
    Buf img = {0};
    int rc = shard_write(s, &img, err);
    for (int tries = 0; rc == 0; tries++) {
        if (tries == 1000) {
            rc = err_set(err, PAIL_ERR_EXISTS, "1000 shard sequence numbers of worker %s taken in a row", s->worker_id);
            break;
        }
        run_key_rollout(key, cap, (long)s->adapter_version, s->worker_id, *seq);
        rc = versioned_put(st, key, img.data, img.len, err);
        if (rc < 0 && err->code != PAIL_ERR_EXISTS) break;
        (*seq)++;
        if (rc == 0) break;
        rc = 0;
    }
    buf_free(&img);
    return rc;
}
