// Check suite for src/shard: rollout shard round trip (version 2, with and
// without a multi-turn completion mask; version-1 files still read), h5dump
// readability, and rejection of bad files (truncated, wrong format or version,
// inconsistent offsets, groups, types, missing datasets, masks and turns) with
// messages naming the problem.
// With PAIL_SHARD_SAMPLE=PATH set, also writes a sample shard there (the
// integration test reads it back with h5py).
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "shard/h5file.h"
#include "shard/shard.h"

// A shard of P=3 prompts x G=4 completions with K=2 reward components.
typedef struct {
    RolloutShard s;
    int32_t pid[9], cid[64];
    int64_t poff[4], pidx[3], coff[13];
    int32_t grp[12];
    float lp[64], rew[12], comp[24];
    uint8_t valid[12], fin[12];
    uint8_t cm[64];    // completion mask: all ones unless a test sets it (s.completion_mask stays NULL)
    int32_t turns[12]; // 1 each (s.turns stays NULL)
    char *names[2];
} Sample;

static void sample_init(Sample *x) {
    memset(x, 0, sizeof *x);
    RolloutShard *s = &x->s;
    snprintf(s->run_id, sizeof s->run_id, "run-1");
    s->adapter_version = 7;
    snprintf(s->worker_id, sizeof s->worker_id, "w3");
    s->created_unix = 1796000000;
    memset(s->base_sha256, 'a', 64);
    memset(s->tokenizer_sha256, 'b', 64);
    s->temperature = 1.0;
    s->top_p = 1.0;
    s->top_k = 0;
    s->max_new_tokens = 8;
    s->seed = 42;
    s->P = 3; s->N = 12; s->K = 2;
    for (int i = 0; i < 9; i++) x->pid[i] = 100 + i;
    int64_t po[4] = {0, 2, 5, 9};
    memcpy(x->poff, po, sizeof po);
    for (int p = 0; p < 3; p++) x->pidx[p] = 10 * p;
    int64_t off = 0;
    for (int i = 0; i < 12; i++) {
        x->coff[i] = off;
        off += 1 + i % 5;  // lengths 1..5
        x->grp[i] = i / 4;
        x->rew[i] = (float)(i % 3);
        x->valid[i] = i != 5;
        x->fin[i] = i % 2;
        x->comp[2 * i] = x->rew[i];
        x->comp[2 * i + 1] = 0.5f;
    }
    x->coff[12] = off;
    for (int t = 0; t < off; t++) {
        x->cid[t] = 200 + t;
        x->lp[t] = -0.01f * (float)(t + 1);
        x->cm[t] = 1;
    }
    for (int i = 0; i < 12; i++) x->turns[i] = 1;
    x->names[0] = "exact_answer";
    x->names[1] = "format";
    s->prompt_ids = x->pid; s->prompt_offsets = x->poff; s->prompt_index = x->pidx;
    s->completion_ids = x->cid; s->completion_offsets = x->coff; s->group = x->grp;
    s->logprobs = x->lp; s->rewards = x->rew; s->reward_valid = x->valid;
    s->reward_components = x->comp; s->finish_reason = x->fin;
    s->component_names[0] = x->names[0];
    s->component_names[1] = x->names[1];
}

// Makes the sample multi-turn: completions 4 (5 tokens: model, env, env, model,
// model) and 9 (5 tokens, ending with the environment's) get mask-0 stretches
// with log-prob 0, and 2 or 3 turns; the mask and turns are passed to the writer.
static void sample_multi_turn(Sample *x) {
    int64_t a = x->coff[4], b = x->coff[9];
    ck_assert(x->coff[5] - a == 5 && x->coff[10] - b == 5);
    uint8_t m4[5] = {1, 0, 0, 1, 1}, m9[5] = {1, 1, 0, 1, 0};
    for (int t = 0; t < 5; t++) {
        x->cm[a + t] = m4[t];
        x->cm[b + t] = m9[t];
        if (!m4[t]) x->lp[a + t] = 0;
        if (!m9[t]) x->lp[b + t] = 0;
    }
    x->turns[4] = 2;
    x->turns[9] = 3;
    x->s.completion_mask = x->cm;
    x->s.turns = x->turns;
}

START_TEST(test_round_trip) {
    Sample x;
    sample_init(&x);
    Buf img = {0};
    PailErr err = {0};
    ck_assert_msg(shard_write(&x.s, &img, &err) == 0, "%s", err.msg);
    RolloutShard r;
    ck_assert_msg(shard_read(&r, img.data, img.len, "sample", &err) == 0, "%s", err.msg);
    ck_assert_str_eq(r.run_id, "run-1");
    ck_assert_str_eq(r.worker_id, "w3");
    ck_assert_int_eq(r.adapter_version, 7);
    ck_assert_int_eq(r.P, 3);
    ck_assert_int_eq(r.N, 12);
    ck_assert_int_eq(r.K, 2);
    ck_assert_int_eq(shard_group_size(&r), 4);
    ck_assert_int_eq(r.max_new_tokens, 8);
    ck_assert(r.temperature == 1.0);
    ck_assert(!memcmp(r.completion_ids, x.cid, sizeof(int32_t) * (size_t)x.coff[12]));
    ck_assert(!memcmp(r.logprobs, x.lp, sizeof(float) * (size_t)x.coff[12]));
    ck_assert(!memcmp(r.prompt_offsets, x.poff, sizeof x.poff));
    ck_assert(!memcmp(r.reward_components, x.comp, sizeof x.comp));
    ck_assert_int_eq(r.reward_valid[5], 0);
    ck_assert_str_eq(r.component_names[1], "format");
    ck_assert_str_eq(r.base_sha256, x.s.base_sha256);
    ck_assert_int_eq(r.prompts_drawn, 0);
    // A single-turn writer's NULL mask and turns are written as all ones and 1.
    ck_assert(r.completion_mask && r.turns);
    for (int64_t t = 0; t < x.coff[12]; t++) ck_assert_int_eq(r.completion_mask[t], 1);
    for (int i = 0; i < 12; i++) ck_assert_int_eq(r.turns[i], 1);
    shard_free(&r);
    ck_assert_ptr_null(r.completion_mask);
    // The optional sampler position round-trips.
    Buf img2 = {0};
    x.s.prompts_drawn = 1234567890123LL;
    ck_assert_msg(shard_write(&x.s, &img2, &err) == 0, "%s", err.msg);
    ck_assert_msg(shard_read(&r, img2.data, img2.len, "sample", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.prompts_drawn, 1234567890123LL);
    ck_assert_int_eq(r.kv_pool_blocks, 0);  // not recorded
    shard_free(&r);
    buf_free(&img2);
    x.s.prompts_drawn = 0;
    // So do the optional KV pool figures.
    Buf img3 = {0};
    x.s.kv_pool_blocks = 40, x.s.kv_peak_blocks = 38, x.s.kv_preemptions = 5, x.s.kv_recomputed_tokens = 321;
    ck_assert_msg(shard_write(&x.s, &img3, &err) == 0, "%s", err.msg);
    ck_assert_msg(shard_read(&r, img3.data, img3.len, "sample", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.kv_pool_blocks, 40);
    ck_assert_int_eq(r.kv_peak_blocks, 38);
    ck_assert_int_eq(r.kv_preemptions, 5);
    ck_assert_int_eq(r.kv_recomputed_tokens, 321);
    shard_free(&r);
    buf_free(&img3);
    x.s.kv_pool_blocks = x.s.kv_peak_blocks = x.s.kv_preemptions = x.s.kv_recomputed_tokens = 0;
    // The same bytes open in the standard tools.
    char path[] = "/tmp/pail-check-shard-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(h5f_write_path(&img, path, &err), 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "h5dump -A '%s' > /dev/null 2>&1", path);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "h5dump -d logprobs '%s' 2>/dev/null | grep -q 'DATASPACE  SIMPLE { ( %lld )'", path,
             (long long)x.coff[12]);
    ck_assert_int_eq(system(cmd), 0);
    unlink(path);
    buf_free(&img);
    // Version 2 with a multi-turn mask: the mask, turns and the 0 log-probs round-trip.
    sample_multi_turn(&x);
    ck_assert_msg(shard_write(&x.s, &img, &err) == 0, "%s", err.msg);
    ck_assert_msg(shard_read(&r, img.data, img.len, "multi", &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(r.completion_mask, x.cm, (size_t)x.coff[12]));
    ck_assert(!memcmp(r.turns, x.turns, sizeof x.turns));
    ck_assert(!memcmp(r.logprobs, x.lp, sizeof(float) * (size_t)x.coff[12]));
    ck_assert_int_eq(r.completion_mask[x.coff[4] + 1], 0);
    ck_assert_int_eq(r.completion_mask[x.coff[10] - 1], 0);
    ck_assert_int_eq(r.turns[9], 3);
    shard_free(&r);
    // The sample h5py reads (test_formats_h5py.sh) is the multi-turn one.
    const char *sample = getenv("PAIL_SHARD_SAMPLE");
    if (sample) ck_assert_int_eq(h5f_write_path(&img, sample, &err), 0);
    buf_free(&img);
}
END_TEST

// Version 3: an episode's further segment is a row after the N, sharing its
// reward; a shard without one is still written as version 2.
typedef struct {
    RolloutShard s;
    int32_t pid[2], cid[9], grp[3], turns[3], seg[1];
    int64_t poff[2], pidx[1], coff[4];
    float lp[9], rew[3], comp[3];
    uint8_t valid[3], fin[3], cm[9];
    char *names[1];
} SegSample;

static void seg_init(SegSample *x) {
    memset(x, 0, sizeof *x);
    RolloutShard *s = &x->s;
    snprintf(s->run_id, sizeof s->run_id, "run-1");
    snprintf(s->worker_id, sizeof s->worker_id, "w3");
    memset(s->base_sha256, 'a', 64);
    memset(s->tokenizer_sha256, 'b', 64);
    s->temperature = 1.0; s->top_p = 1.0; s->max_new_tokens = 8;
    s->P = 1; s->N = 2; s->X = 1; s->K = 1;
    x->pid[0] = 1; x->pid[1] = 2;
    x->poff[1] = 2;
    int64_t co[4] = {0, 3, 5, 9};  // episode 0, episode 1, episode 0's second segment
    memcpy(x->coff, co, sizeof co);
    for (int t = 0; t < 9; t++) { x->cid[t] = 10 + t; x->cm[t] = t != 5 && t != 6; x->lp[t] = x->cm[t] ? -0.5f : 0; }
    x->rew[0] = x->rew[2] = 1; x->rew[1] = 0;
    x->comp[0] = x->comp[2] = 1;
    for (int i = 0; i < 3; i++) { x->valid[i] = 1; x->turns[i] = 1 + (i == 2); }
    x->seg[0] = 0;
    x->names[0] = "correct";
    s->prompt_ids = x->pid; s->prompt_offsets = x->poff; s->prompt_index = x->pidx;
    s->completion_ids = x->cid; s->completion_offsets = x->coff; s->group = x->grp;
    s->logprobs = x->lp; s->rewards = x->rew; s->reward_valid = x->valid; s->reward_components = x->comp;
    s->finish_reason = x->fin; s->completion_mask = x->cm; s->turns = x->turns; s->segment_of = x->seg;
    s->component_names[0] = x->names[0];
}

START_TEST(test_segments) {
    SegSample x;
    seg_init(&x);
    Buf img = {0};
    PailErr err = {0};
    ck_assert_msg(shard_write(&x.s, &img, &err) == 0, "%s", err.msg);
    RolloutShard r;
    ck_assert_msg(shard_read(&r, img.data, img.len, "seg", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.N, 2);
    ck_assert_int_eq(r.X, 1);
    ck_assert_int_eq(r.segment_of[0], 0);
    ck_assert_int_eq(r.completion_offsets[3], 9);
    for (int t = 0; t < 9; t++) { ck_assert_int_eq(r.completion_ids[t], 10 + t); ck_assert_int_eq(r.completion_mask[t], x.cm[t]); }
    ck_assert_int_eq(r.turns[2], 2);
    ck_assert_float_eq(r.rewards[2], 1.0f);
    ck_assert_int_eq(shard_group_size(&r), 2);
    hid_t f = h5f_open_mem(img.data, img.len, "seg", &err);
    int64_t v = 0;
    ck_assert(f >= 0 && h5a_read_i64(f, "format_version", &v, "seg", &err) == 0);
    ck_assert_int_eq(v, 3);
    h5f_close(f);
    shard_free(&r);
    // Refused: a segment of no episode, or with another reward than its episode's.
    x.seg[0] = 2;
    ck_assert_int_eq(shard_check(&x.s, 0, "seg", &err), -1);
    ck_assert_msg(strstr(err.msg, "segment_of[0] = 2 is not an episode row in [0, 2)"), "%s", err.msg);
    x.seg[0] = 1;
    ck_assert_int_eq(shard_check(&x.s, 0, "seg", &err), -1);
    ck_assert_msg(strstr(err.msg, "row 2, a segment of episode row 1, has another group, reward or components"), "%s",
                  err.msg);
    x.seg[0] = 0;
    x.comp[2] = 0.5f;
    ck_assert_int_eq(shard_check(&x.s, 0, "seg", &err), -1);
    // Without segments: version 2, as before.
    seg_init(&x);
    x.s.X = 0;
    x.s.segment_of = NULL;
    x.coff[3] = 0;
    buf_reset(&img);
    ck_assert_msg(shard_write(&x.s, &img, &err) == 0, "%s", err.msg);
    f = h5f_open_mem(img.data, img.len, "plain", &err);
    ck_assert(f >= 0 && h5a_read_i64(f, "format_version", &v, "plain", &err) == 0);
    ck_assert_int_eq(v, 2);
    h5f_close(f);
    buf_free(&img);
}
END_TEST

START_TEST(test_check_refuses) {
    Sample x;
    PailErr err = {0};
    Buf img = {0};
    sample_init(&x);
    x.coff[12] = x.coff[11] - 1;  // offsets decrease
    ck_assert_int_eq(shard_write(&x.s, &img, &err), -1);
    sample_init(&x);
    x.grp[5] = 2;  // a completion outside its group
    ck_assert_int_eq(shard_write(&x.s, &img, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "group[5]"));
    sample_init(&x);
    x.lp[3] = 0.5f;  // not a log-probability
    ck_assert_int_eq(shard_write(&x.s, &img, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "logprobs[3]"));
    sample_init(&x);
    x.poff[1] = 0;  // an empty prompt (the trainer's packer had nothing predicting its completions' first token)
    ck_assert_int_eq(shard_write(&x.s, &img, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "prompt 0 is empty"));
    sample_init(&x);
    x.s.N = 11;  // not a whole group size
    ck_assert_int_eq(shard_write(&x.s, &img, &err), -1);
    sample_init(&x);
    x.cid[0] = 5000;
    ck_assert_int_eq(shard_check(&x.s, 1000, "s", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "vocabulary"));
    ck_assert_uint_eq(img.len, 0);  // nothing was produced by the refused writes
}
END_TEST

// Writes a shard like shard_write but lets the test break one thing.
// BREAK_NONE writes a version-1 file (no completion_mask, turns): what older
// pails and the h5py writers of validation/ write; BREAK_V2 and those after it
// a version-2 file with x->cm and x->turns.
typedef enum { BREAK_NONE, BREAK_FORMAT, BREAK_VERSION, BREAK_LOGPROBS_LEN, BREAK_DROP_GROUP, BREAK_FLOAT_IDS,
               BREAK_NAMES, BREAK_DRAWN_NEGATIVE, BREAK_DRAWN_STRING, BREAK_V0,
               BREAK_V2, BREAK_V2_NO_MASK, BREAK_V2_NO_TURNS, BREAK_V2_MASK_LEN, BREAK_V2_FLOAT_MASK,
               BREAK_KV_PEAK, BREAK_KV_PARTIAL } Break;

static void write_broken(const Sample *x, Break b, Buf *out) {
    PailErr err = {0};
    const RolloutShard *s = &x->s;
    hid_t f = h5f_create_mem("broken", &err);
    ck_assert_int_ge(f, 0);
    h5a_write_str(f, "format", b == BREAK_FORMAT ? "pail.lora" : SHARD_FORMAT, &err);
    h5a_write_i64(f, "format_version", b == BREAK_VERSION ? 4 : b == BREAK_V0 ? 0 : b >= BREAK_V2 ? 2 : 1, &err);
    h5a_write_str(f, "run_id", s->run_id, &err);
    h5a_write_i64(f, "adapter_version", s->adapter_version, &err);
    h5a_write_str(f, "worker_id", s->worker_id, &err);
    h5a_write_i64(f, "created_unix", s->created_unix, &err);
    h5a_write_str(f, "base_sha256", s->base_sha256, &err);
    h5a_write_str(f, "tokenizer_sha256", s->tokenizer_sha256, &err);
    h5a_write_f64(f, "temperature", 1, &err);
    h5a_write_f64(f, "top_p", 1, &err);
    h5a_write_i64(f, "top_k", 0, &err);
    h5a_write_i64(f, "max_new_tokens", 8, &err);
    h5a_write_i64(f, "seed", 1, &err);
    if (b == BREAK_DRAWN_NEGATIVE) h5a_write_i64(f, "prompts_drawn", -3, &err);
    if (b == BREAK_DRAWN_STRING) h5a_write_str(f, "prompts_drawn", "12", &err);
    if (b == BREAK_KV_PEAK) {
        h5a_write_i64(f, "kv_pool_blocks", 10, &err);
        h5a_write_i64(f, "kv_peak_blocks", 11, &err);
        h5a_write_i64(f, "kv_preemptions", 0, &err);
        h5a_write_i64(f, "kv_recomputed_tokens", 0, &err);
    }
    if (b == BREAK_KV_PARTIAL) h5a_write_i64(f, "kv_pool_blocks", 10, &err);
    int64_t ptok = 9, ctok = x->coff[12], lpn = b == BREAK_LOGPROBS_LEN ? ctok - 3 : ctok, p1 = 4, n1 = 13, P = 3,
            N = 12, nk[2] = {12, 2};
    h5d_write(f, "prompt_ids", H5T_NATIVE_INT32, 1, &ptok, x->pid, &err);
    h5d_write(f, "prompt_offsets", H5T_NATIVE_INT64, 1, &p1, x->poff, &err);
    h5d_write(f, "prompt_index", H5T_NATIVE_INT64, 1, &P, x->pidx, &err);
    if (b == BREAK_FLOAT_IDS) h5d_write(f, "completion_ids", H5T_NATIVE_FLOAT, 1, &ctok, x->lp, &err);
    else h5d_write(f, "completion_ids", H5T_NATIVE_INT32, 1, &ctok, x->cid, &err);
    h5d_write(f, "completion_offsets", H5T_NATIVE_INT64, 1, &n1, x->coff, &err);
    if (b != BREAK_DROP_GROUP) h5d_write(f, "group", H5T_NATIVE_INT32, 1, &N, x->grp, &err);
    h5d_write(f, "logprobs", H5T_NATIVE_FLOAT, 1, &lpn, x->lp, &err);
    h5d_write(f, "rewards", H5T_NATIVE_FLOAT, 1, &N, x->rew, &err);
    h5d_write(f, "reward_valid", H5T_NATIVE_UINT8, 1, &N, x->valid, &err);
    h5d_write(f, "reward_components", H5T_NATIVE_FLOAT, 2, nk, x->comp, &err);
    h5d_write(f, "finish_reason", H5T_NATIVE_UINT8, 1, &N, x->fin, &err);
    if (b >= BREAK_V2) {
        int64_t mn = b == BREAK_V2_MASK_LEN ? ctok - 1 : ctok;
        if (b == BREAK_V2_FLOAT_MASK) h5d_write(f, "completion_mask", H5T_NATIVE_FLOAT, 1, &ctok, x->lp, &err);
        else if (b != BREAK_V2_NO_MASK) h5d_write(f, "completion_mask", H5T_NATIVE_UINT8, 1, &mn, x->cm, &err);
        if (b != BREAK_V2_NO_TURNS) h5d_write(f, "turns", H5T_NATIVE_INT32, 1, &N, x->turns, &err);
    }
    hid_t ds = H5Dopen2(f, "reward_components", H5P_DEFAULT);
    const char *names[2] = {"a", "b"};
    h5a_write_strs(ds, "names", names, b == BREAK_NAMES ? 1 : 2, &err);
    H5Dclose(ds);
    ck_assert_int_eq(h5f_image(f, out, "broken", &err), 0);
    h5f_close(f);
}

// The fault probe's shard: a finite log-prob of -1.34e38 passed the reader and
// the next adapter was all NaN. Values are bounded on read and write.
START_TEST(test_value_bounds) {
    Sample x;
    PailErr err = {0};
    struct { int what; float v; const char *msg; } bad[] = {
        {0, -1.34e38f, "logprobs[3] = -1.34e+38 is outside [-1000, 0]"},
        {0, -1000.5f, "logprobs[3]"},
        {0, NAN, "logprobs[3]"},
        {1, 2e6f, "rewards[4] = 2e+06 is outside"},
        {1, -INFINITY, "rewards[4]"},
        {1, NAN, "rewards[4]"},
        {2, 3e7f, "reward_components[4, 1] = 3e+07"},
        {2, NAN, "reward_components[4, 1]"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        sample_init(&x);
        if (bad[k].what == 0) x.lp[3] = bad[k].v;
        else if (bad[k].what == 1) x.rew[4] = bad[k].v;
        else x.comp[2 * 4 + 1] = bad[k].v;
        ck_assert_int_eq(shard_check(&x.s, 0, "s", &err), -1);
        ck_assert_msg(strstr(err.msg, bad[k].msg), "case %zu: %s", k, err.msg);
        // and on read, from a file that bypassed the writer's check
        Buf img = {0};
        RolloutShard r;
        write_broken(&x, BREAK_NONE, &img);
        ck_assert_int_eq(shard_read(&r, img.data, img.len, "s", &err), -1);
        ck_assert_msg(strstr(err.msg, bad[k].msg), "read case %zu: %s", k, err.msg);
        buf_free(&img);
    }
    // The bounds themselves are fine, and an invalid reward's value is not read.
    sample_init(&x);
    x.lp[3] = -1000.0f;
    x.rew[4] = -1e6f;
    x.comp[2 * 4 + 1] = 1e6f;
    x.rew[5] = NAN;  // reward_valid[5] is 0
    x.comp[2 * 5] = INFINITY;
    ck_assert_msg(shard_check(&x.s, 0, "s", &err) == 0, "%s", err.msg);
}
END_TEST

// The mask-aware checks, on write and on read: mask values in {0, 1}, an
// environment token's log-prob exactly 0, turns >= 1 for a completion with
// tokens (0 allowed for an empty one); a mask-0 stretch lifts only the
// log-prob bound of its own tokens.
START_TEST(test_mask_checks) {
    Sample x;
    PailErr err = {0};
    enum { MASK, LP, TURNS };
    struct { int what; int64_t at; float v; const char *msg; } bad[] = {
        {MASK, 6, 2, "completion_mask[6] = 2 (0 or 1)"},
        {LP, 11, -0.5f, "logprobs[11] = -0.5 but completion_mask[11] is 0"},
        {LP, 11, NAN, "logprobs[11] = nan but completion_mask[11] is 0"},
        {LP, 11, 1e-30f, "logprobs[11] = 1e-30 but completion_mask[11] is 0"},
        {TURNS, 7, -1, "turns[7] = -1 is negative"},
        {LP, 13, -2000, "logprobs[13] = -2000 is outside [-1000, 0]"},  // a mask-1 token of the same completion
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        sample_init(&x);
        sample_multi_turn(&x);  // completion 4 is tokens 10..14, mask 1 0 0 1 1
        if (bad[k].what == MASK) x.cm[bad[k].at] = (uint8_t)bad[k].v;
        else if (bad[k].what == LP) x.lp[bad[k].at] = bad[k].v;
        else x.turns[bad[k].at] = (int32_t)bad[k].v;
        Buf img = {0};
        ck_assert_int_eq(shard_write(&x.s, &img, &err), -1);
        ck_assert_msg(strstr(err.msg, bad[k].msg), "case %zu: %s", k, err.msg);
        ck_assert_uint_eq(img.len, 0);
        RolloutShard r;
        write_broken(&x, BREAK_V2, &img);
        ck_assert_int_eq(shard_read(&r, img.data, img.len, "s", &err), -1);
        ck_assert_msg(strstr(err.msg, bad[k].msg), "read case %zu: %s", k, err.msg);
        buf_free(&img);
    }
    // -0.0 is 0; a mask all 0 (an episode the environment wrote alone) is a shard
    // the trainer skips, not a broken one; 0 turns, with or without tokens (an
    // episode that failed in its opening or its first turn) is fine.
    sample_init(&x);
    sample_multi_turn(&x);
    x.lp[11] = -0.0f;
    for (int64_t t = x.coff[2]; t < x.coff[3]; t++) x.cm[t] = 0, x.lp[t] = 0;
    x.coff[1] = 0;  // completion 0 empty (completion 1 takes its token)
    x.turns[0] = 0;
    ck_assert_msg(shard_check(&x.s, 0, "s", &err) == 0, "%s", err.msg);
    x.turns[1] = 0;
    ck_assert_msg(shard_check(&x.s, 0, "s", &err) == 0, "%s", err.msg);
    // With no mask every token is the model's: a log-prob of 0 is fine, the bound holds everywhere.
    sample_init(&x);
    x.lp[11] = 0;
    ck_assert_msg(shard_check(&x.s, 0, "s", &err) == 0, "%s", err.msg);
}
END_TEST

START_TEST(test_read_refuses) {
    Sample x;
    sample_init(&x);
    struct { Break b; const char *want; } cases[] = {
        {BREAK_NONE, NULL},
        {BREAK_FORMAT, "format is 'pail.lora'"},
        {BREAK_VERSION, "format_version 4, this pail reads 1 to 3"},
        {BREAK_V0, "format_version 0"},
        {BREAK_V2, NULL},
        {BREAK_V2_NO_MASK, "dataset 'completion_mask' is missing"},
        {BREAK_V2_NO_TURNS, "dataset 'turns' is missing"},
        {BREAK_V2_MASK_LEN, "dataset 'completion_mask' has"},
        {BREAK_V2_FLOAT_MASK, "'completion_mask' has type float"},
        {BREAK_LOGPROBS_LEN, "dataset 'logprobs' has"},
        {BREAK_DROP_GROUP, "dataset 'group' is missing"},
        {BREAK_FLOAT_IDS, "'completion_ids' has type float"},
        {BREAK_NAMES, "2 columns but 1 names"},
        {BREAK_DRAWN_NEGATIVE, "prompts_drawn -3 is negative"},
        {BREAK_DRAWN_STRING, "attribute 'prompts_drawn' is not"},
        {BREAK_KV_PEAK, "KV pool figures out of range (pool 10 blocks, peak 11"},
        {BREAK_KV_PARTIAL, "'kv_peak_blocks'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Buf img = {0};
        write_broken(&x, cases[i].b, &img);
        RolloutShard r;
        PailErr err = {0};
        int rc = shard_read(&r, img.data, img.len, "rollouts/v00000007/w3-000001.h5", &err);
        if (!cases[i].want) {
            ck_assert_msg(rc == 0, "%s", err.msg);
            ck_assert_int_eq(r.prompts_drawn, 0);  // an older writer's shard: not recorded
            // version 1 (BREAK_NONE) or 2 with the defaults: every token the model's, one turn each
            ck_assert(r.completion_mask && r.turns);
            for (int64_t t = 0; t < x.coff[12]; t++) ck_assert_int_eq(r.completion_mask[t], 1);
            for (int k = 0; k < 12; k++) ck_assert_int_eq(r.turns[k], 1);
            ck_assert(!memcmp(r.logprobs, x.lp, sizeof(float) * (size_t)x.coff[12]));
            shard_free(&r);
        } else {
            ck_assert_msg(rc == -1, "case %zu accepted", i);
            ck_assert_msg(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].want);
            ck_assert_ptr_nonnull(strstr(err.msg, "rollouts/v00000007/w3-000001.h5"));
        }
        buf_free(&img);
    }
}
END_TEST

START_TEST(test_read_garbage) {
    Sample x;
    sample_init(&x);
    sample_multi_turn(&x);  // flips reach the mask and turns too
    Buf img = {0};
    PailErr err = {0};
    ck_assert_int_eq(shard_write(&x.s, &img, &err), 0);
    RolloutShard r;
    ck_assert_int_eq(shard_read(&r, "hello", 5, "tiny", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not an HDF5 file"));
    // Every truncation of a valid file is refused without crashing.
    for (size_t cut = 8; cut < img.len; cut += img.len / 97 + 1) {
        int rc = shard_read(&r, img.data, cut, "cut", &err);
        if (rc == 0) shard_free(&r);
        ck_assert_msg(rc == -1, "truncated to %zu of %zu bytes was accepted", cut, img.len);
    }
    // Flipped bytes: refused or, if HDF5 still parses it, still consistent.
    for (size_t pos = 0; pos < img.len; pos += (getenv("PAIL_FLIP_ALL") ? 1 : 61)) {
        Buf bad = {0};
        buf_append(&bad, img.data, img.len);
        bad.data[pos] ^= 0x5a;
        if (shard_read(&r, bad.data, bad.len, "flipped", &err) == 0) {
            ck_assert_int_eq(shard_check(&r, 0, "flipped", &err), 0);
            shard_free(&r);
        }
        buf_free(&bad);
    }
    buf_free(&img);
}
END_TEST

int main(void) {
    Suite *s = suite_create("shard");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_round_trip);
    tcase_add_test(core, test_segments);
    tcase_add_test(limits, test_check_refuses);
    tcase_add_test(limits, test_read_refuses);
    tcase_add_test(limits, test_value_bounds);
    tcase_add_test(limits, test_mask_checks);
    tcase_add_test(limits, test_read_garbage);
    tcase_set_timeout(limits, 60);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
