// The trainable state on the backend (see trainable.h): one allocation,
// params | grads | m | v, and the optimizer step over it through the
// backend's table (kernels/backend.h: adamw_grad_sumsq, adamw_update, zero).
#include "lora/trainable.h"
#include <float.h>
#include <stdlib.h>
#include "kernels.h"

struct Trainable {
    Backend *be;       // borrowed
    size_t n;
    bool train;
    float *block;      // backend memory, owned: [params |] grads | m | v
    float *params;     // (n) in block, or the caller's host_params (borrowed)
    float *grads, *m, *v;  // (n) each in block; NULL without train
};

size_t trainable_bytes(size_t n, bool train) { return (train ? 4 : 1) * n * sizeof(float); }
size_t trainable_count(const Trainable *t) { return t->n; }
Backend *trainable_backend(const Trainable *t) { return t->be; }
float *trainable_params(Trainable *t) { return t->params; }
float *trainable_grads(Trainable *t) { return t->grads; }
float *trainable_host_params(Trainable *t) { return t->be->host_memory ? t->params : NULL; }
float *trainable_host_m(Trainable *t) { return t->be->host_memory ? t->m : NULL; }
float *trainable_host_v(Trainable *t) { return t->be->host_memory ? t->v : NULL; }

int trainable_open(Trainable **out, Backend *be, size_t n, bool train, float *host_params, PailErr *err) {
    *out = NULL;
    if (host_params && (!be->host_memory || !train))
        return err_set(err, PAIL_ERR_UNSUPPORTED, "trainable state: parameters trained in place need a host-memory "
                       "backend (this is %s)", be->desc);
    Trainable *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    t->be = be;
    t->n = n;
    t->train = train;
    size_t floats = (train ? 3 : 0) * n + (host_params ? 0 : n);
    if (!(t->block = be->ops->alloc(be, (floats ? floats : 1) * sizeof(float), err))) {
        free(t);
        return err_wrap(err, "the trainable state (%zu parameters%s)", n,
                        train ? ", their gradients and AdamW moments" : "");
    }
    float *at = t->block;
    if (host_params) t->params = host_params;
    else t->params = at, at += n;
    if (train) {
        t->grads = at, at += n;
        t->m = at, at += n;
        t->v = at;
        if (be->ops->zero(be, t->grads, 3 * n, err) < 0) {  // grads, m, v are adjacent
            trainable_close(t);
            return err_wrap(err, "the trainable state");
        }
    }
    *out = t;
    return 0;
}

void trainable_close(Trainable *t) {
    if (!t) return;
    t->be->ops->release(t->be, t->block);
    free(t);
}

// One array to or from the host: nothing to do when host is the array itself.
static int put(Trainable *t, float *dev, const float *host, PailErr *err) {
    if (!host) return t->be->ops->zero(t->be, dev, t->n, err);
    if (host == dev) return 0;
    return t->be->ops->to_device(t->be, dev, host, t->n * sizeof(float), err);
}
static int get(Trainable *t, float *host, const float *dev, PailErr *err) {
    if (!host || host == dev) return 0;
    return t->be->ops->to_host(t->be, host, dev, t->n * sizeof(float), err);
}

int trainable_load(Trainable *t, const float *params, const float *m, const float *v, PailErr *err) {
    int rc = put(t, t->params, params, err);
    if (rc == 0 && t->train) rc = put(t, t->m, m, err);
    if (rc == 0 && t->train) rc = put(t, t->v, v, err);
    if (rc == 0 && t->train) rc = t->be->ops->zero(t->be, t->grads, t->n, err);
    return rc < 0 ? err_wrap(err, "loading the trainable state") : 0;
}

int trainable_save(Trainable *t, float *params, float *m, float *v, PailErr *err) {
    int rc = get(t, params, t->params, err);
    if (rc == 0 && t->train) rc = get(t, m, t->m, err);
    if (rc == 0 && t->train) rc = get(t, v, t->v, err);
    if (rc == 0) rc = t->be->ops->sync(t->be, err);  // a host-memory backend's view is current too
    return rc < 0 ? err_wrap(err, "saving the trainable state") : 0;
}

int trainable_save_grads(Trainable *t, float *grads, PailErr *err) {
    if (!t->train) return err_set(err, PAIL_ERR_INVALID, "trainable state: opened without gradients");
    if (get(t, grads, t->grads, err) < 0 || t->be->ops->sync(t->be, err) < 0)
        return err_wrap(err, "saving the gradients");
    return 0;
}

int trainable_step(Trainable *t, const TrainableHyper *h, int step, double *sumsq, PailErr *err) {
    if (!t->train) return err_set(err, PAIL_ERR_INVALID, "trainable state: opened without gradients");
    Backend *be = t->be;
    const BackendOps *o = be->ops;
    if (o->adamw_grad_sumsq(be, sumsq, t->grads, t->n, err) < 0) return err_wrap(err, "optimizer step %d", step);
    int skipped = !(*sumsq <= FLT_MAX);  // NaN or past float range
    if (!skipped) {
        float scale = adamw_clip_scale(*sumsq, h->max_grad_norm);
        if (o->adamw_update(be, t->params, t->m, t->v, t->grads, t->n, (float)h->lr, h->beta1, h->beta2, h->eps,
                            h->weight_decay, step, scale, err) < 0)
            return err_wrap(err, "optimizer step %d", step);
    }
    if (o->zero(be, t->grads, t->n, err) < 0) return err_wrap(err, "optimizer step %d", step);
    return skipped;
}
