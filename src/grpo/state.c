// Trainer state reader/writer (see state.h).
#include "grpo/state.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shard/h5file.h"

int state_write(const TrainerState *st, Buf *out, PailErr *err) {
    char name[64];
    snprintf(name, sizeof name, "trainer state v%08lld", (long long)st->version);
    hid_t f = h5f_create_mem(name, err);
    if (f < 0) return -1;
    AdapterMeta meta = {.version = st->version, .step = st->step};
    int rc = 0;
    rc |= h5a_write_str(f, "format", STATE_FORMAT, err);
    rc |= h5a_write_i64(f, "format_version", STATE_FORMAT_VERSION, err);
    rc |= h5a_write_str(f, "run_id", st->run_id, err);
    rc |= h5a_write_i64(f, "consumed_shards", st->consumed, err);
    rc |= h5a_write_i64(f, "dropped_shards", st->dropped, err);
    rc |= h5a_write_i64(f, "rejected_shards", st->rejected, err);
    rc |= h5a_write_i64(f, "skipped_steps", st->skipped_steps, err);
    rc |= h5a_write_i64(f, "late_listed_unix", st->late_listed_unix, err);
    rc |= h5a_write_i64(f, "late_listed_from", st->late_listed_from, err);
    rc |= lora_adapter_write_h5(f, &st->layout, st->params, &meta, err);
    int64_t n = st->layout.n_params, four = 4, img = (int64_t)st->adapter_image.len, ns = st->nshards;
    rc |= h5d_write(f, "optimizer/m", H5T_NATIVE_FLOAT, 1, &n, st->m, err);
    rc |= h5d_write(f, "optimizer/v", H5T_NATIVE_FLOAT, 1, &n, st->v, err);
    rc |= h5d_write(f, "rng", H5T_NATIVE_UINT64, 1, &four, st->rng.s, err);
    rc |= h5d_write(f, "adapter_image", H5T_NATIVE_UINT8, 1, &img, st->adapter_image.data, err);
    rc |= h5d_write_strs(f, "feed/keys", (const char *const *)st->keys, st->nshards, err);
    rc |= h5d_write(f, "feed/versions", H5T_NATIVE_INT64, 1, &ns, st->versions, err);
    rc |= h5d_write(f, "feed/n_groups", H5T_NATIVE_INT32, 1, &ns, st->n_groups, err);
    rc |= h5d_write(f, "feed/used", H5T_NATIVE_INT32, 1, &ns, st->used, err);
    rc |= h5a_write_i64(f, "record_parent", st->parent, err);
    if (st->rec_n) {  // a version without steps (v0, a republish) has no record/
        int64_t nr = st->rec_n;
        char **rk = calloc((size_t)nr, sizeof *rk);
        int64_t *rs = calloc((size_t)nr, sizeof *rs);
        int32_t *rf = calloc((size_t)nr, sizeof *rf), *rcnt = calloc((size_t)nr, sizeof *rcnt);
        if (!rk || !rs || !rf || !rcnt) {
            rc |= err_set(err, PAIL_ERR_NOMEM, "%s: out of memory for the consumption record", name);
        } else {
            for (int i = 0; i < st->rec_n; i++) {
                rk[i] = st->rec[i].key;
                rs[i] = st->rec[i].step;
                rf[i] = st->rec[i].first;
                rcnt[i] = st->rec[i].count;
            }
            rc |= h5d_write(f, "record/steps", H5T_NATIVE_INT64, 1, &nr, rs, err);
            rc |= h5d_write_strs(f, "record/keys", (const char *const *)rk, st->rec_n, err);
            rc |= h5d_write(f, "record/first", H5T_NATIVE_INT32, 1, &nr, rf, err);
            rc |= h5d_write(f, "record/count", H5T_NATIVE_INT32, 1, &nr, rcnt, err);
        }
        free(rk);
        free(rs);
        free(rf);
        free(rcnt);
    }
    if (st->metrics.len) {
        int64_t ml = (int64_t)st->metrics.len;
        rc |= h5d_write(f, "metrics", H5T_NATIVE_UINT8, 1, &ml, st->metrics.data, err);
    }
    if (rc == 0) rc = h5f_image(f, out, name, err);
    h5f_close(f);
    return rc ? -1 : 0;
}

void state_free(TrainerState *st) {
    free(st->params);
    free(st->m);
    free(st->v);
    buf_free(&st->adapter_image);
    buf_free(&st->metrics);
    for (int i = 0; i < st->nshards; i++) free(st->keys[i]);
    free(st->keys);
    free(st->versions);
    free(st->n_groups);
    free(st->used);
    free(st->rec);
    lora_layout_free(&st->layout);
    memset(st, 0, sizeof *st);
}

static int read_record(hid_t f, TrainerState *st, const char *name, PailErr *err) {
    char **keys = NULL;
    int nk = 0, rc = -1;
    int64_t *steps = NULL;
    int32_t *first = NULL, *count = NULL;
    if (h5d_read_strs(f, "record/keys", &keys, &nk, 1 << 24, name, err) < 0) return -1;
    int64_t n = nk;
    if (h5d_read(f, "record/steps", H5T_NATIVE_INT64, 1, &n, NULL, n, (void **)&steps, name, err) < 0 ||
        h5d_read(f, "record/first", H5T_NATIVE_INT32, 1, &n, NULL, n, (void **)&first, name, err) < 0 ||
        h5d_read(f, "record/count", H5T_NATIVE_INT32, 1, &n, NULL, n, (void **)&count, name, err) < 0)
        goto done;
    if (!(st->rec = calloc((size_t)nk + 1, sizeof *st->rec))) {
        err_set(err, PAIL_ERR_NOMEM, "trainer state %s: out of memory for the consumption record", name);
        goto done;
    }
    for (int i = 0; i < nk; i++) {
        if (strlen(keys[i]) >= sizeof st->rec[i].key || first[i] < 0 || count[i] < 1) {
            err_set(err, PAIL_ERR_INVALID, "trainer state %s: record entry %d (%.80s, first %d, count %d) is not valid",
                    name, i, keys[i], (int)first[i], (int)count[i]);
            goto done;
        }
        st->rec[i] = (FeedRecord){.step = steps[i], .first = first[i], .count = count[i]};
        snprintf(st->rec[i].key, sizeof st->rec[i].key, "%s", keys[i]);
    }
    st->rec_n = nk;
    rc = 0;
done:
    for (int i = 0; i < nk; i++) free(keys[i]);
    free(keys);
    free(steps);
    free(first);
    free(count);
    return rc;
}

int state_read_record(const void *data, size_t len, const char *name, FeedRecord **rec, int *n, PailErr *err) {
    *rec = NULL;
    *n = 0;
    hid_t f = h5f_open_mem(data, len, name, err);
    if (f < 0) return -1;
    char format[64];
    TrainerState st = {0};
    int rc = -1;
    if (h5a_read_str(f, "format", format, sizeof format, name, err) < 0) goto done;
    if (strcmp(format, STATE_FORMAT)) {
        err_set(err, PAIL_ERR_INVALID, "trainer state %s: format is '%s', expected '%s'", name, format, STATE_FORMAT);
        goto done;
    }
    if (h5a_exists(f, "record_parent") <= 0) {
        err_set(err, PAIL_ERR_INVALID, "trainer state %s has no consumption record (written by an older pail)", name);
        goto done;
    }
    if (h5l_exists(f, "record") > 0 && read_record(f, &st, name, err) < 0) goto done;
    *rec = st.rec;
    *n = st.rec_n;
    st.rec = NULL;
    rc = 0;
done:
    free(st.rec);
    h5f_close(f);
    return rc;
}

int state_read(TrainerState *st, const void *data, size_t len, const char *name, const ModelConfig *mc, PailErr *err) {
    memset(st, 0, sizeof *st);
    hid_t f = h5f_open_mem(data, len, name, err);
    if (f < 0) return -1;
    char format[64];
    int64_t fv, any = -1, d;
    int rc = -1;
    void *rng = NULL, *img = NULL;
    if (h5a_read_str(f, "format", format, sizeof format, name, err) < 0 ||
        h5a_read_i64(f, "format_version", &fv, name, err) < 0)
        goto done;
    if (strcmp(format, STATE_FORMAT)) {
        err_set(err, PAIL_ERR_INVALID, "trainer state %s: format is '%s', expected '%s'", name, format, STATE_FORMAT);
        goto done;
    }
    if (fv != STATE_FORMAT_VERSION) {
        err_set(err, PAIL_ERR_INVALID, "trainer state %s: format_version %lld, this pail reads %d (resume with the "
                "pail release that wrote it)", name, (long long)fv, STATE_FORMAT_VERSION);
        goto done;
    }
    AdapterMeta meta;
    if (h5a_read_str(f, "run_id", st->run_id, sizeof st->run_id, name, err) < 0 ||
        h5a_read_i64(f, "consumed_shards", &st->consumed, name, err) < 0 ||
        h5a_read_i64(f, "dropped_shards", &st->dropped, name, err) < 0 ||
        h5a_read_i64(f, "rejected_shards", &st->rejected, name, err) < 0 ||
        lora_adapter_read_h5(f, name, mc, &st->layout, &st->params, &meta, err) < 0)
        goto done;
    // Optional (states written before these existed read as zero / none).
    if (h5a_exists(f, "skipped_steps") > 0 && h5a_read_i64(f, "skipped_steps", &st->skipped_steps, name, err) < 0)
        goto done;
    st->late_listed_unix = st->late_listed_from = -1;
    if ((h5a_exists(f, "late_listed_unix") > 0 &&
         h5a_read_i64(f, "late_listed_unix", &st->late_listed_unix, name, err) < 0) ||
        (h5a_exists(f, "late_listed_from") > 0 &&
         h5a_read_i64(f, "late_listed_from", &st->late_listed_from, name, err) < 0))
        goto done;
    st->step = meta.step;
    st->version = meta.version;
    int64_t n = st->layout.n_params, four = 4;
    if (h5d_read(f, "optimizer/m", H5T_NATIVE_FLOAT, 1, &n, NULL, n, (void **)&st->m, name, err) < 0 ||
        h5d_read(f, "optimizer/v", H5T_NATIVE_FLOAT, 1, &n, NULL, n, (void **)&st->v, name, err) < 0 ||
        h5d_read(f, "rng", H5T_NATIVE_UINT64, 1, &four, NULL, 4, &rng, name, err) < 0 ||
        h5d_read(f, "adapter_image", H5T_NATIVE_UINT8, 1, &any, &d, INT64_C(1) << 34, &img, name, err) < 0)
        goto done;
    memcpy(st->rng.s, rng, sizeof st->rng.s);
    if (buf_append(&st->adapter_image, img, (size_t)d) < 0) {
        err_set(err, PAIL_ERR_NOMEM, "trainer state %s: out of memory for the adapter image", name);
        goto done;
    }
    if (h5l_exists(f, "metrics") > 0) {
        void *mt = NULL;
        int64_t ml;
        if (h5d_read(f, "metrics", H5T_NATIVE_UINT8, 1, &any, &ml, INT64_C(1) << 30, &mt, name, err) < 0) goto done;
        int ok = buf_append(&st->metrics, mt, (size_t)ml);
        free(mt);
        if (ok < 0) {
            err_set(err, PAIL_ERR_NOMEM, "trainer state %s: out of memory for the metrics", name);
            goto done;
        }
    }
    int nk;
    if (h5d_read_strs(f, "feed/keys", &st->keys, &nk, 1 << 22, name, err) < 0) goto done;
    st->nshards = nk;
    int64_t ns = nk;
    if (h5d_read(f, "feed/versions", H5T_NATIVE_INT64, 1, &ns, NULL, ns, (void **)&st->versions, name, err) < 0 ||
        h5d_read(f, "feed/n_groups", H5T_NATIVE_INT32, 1, &ns, NULL, ns, (void **)&st->n_groups, name, err) < 0 ||
        h5d_read(f, "feed/used", H5T_NATIVE_INT32, 1, &ns, NULL, ns, (void **)&st->used, name, err) < 0)
        goto done;
    st->parent = -2;
    if (h5a_exists(f, "record_parent") > 0 && h5a_read_i64(f, "record_parent", &st->parent, name, err) < 0) goto done;
    if (h5l_exists(f, "record") > 0 && read_record(f, st, name, err) < 0) goto done;
    rc = 0;
done:
    free(rng);
    free(img);
    h5f_close(f);
    if (rc < 0) state_free(st);
    return rc;
}
