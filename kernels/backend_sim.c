// The stand-in device, --device sim (see backend.h): the CPU backend's kernels
// behind a GPU's rules, for testing on machines without one. Its memory is an
// arena (a memfd) mapped twice: the pointers it hands out lie in a PROT_NONE
// view, so host code that dereferences one faults (SIGSEGV) on any thread, and
// its ops run on a stream thread of their own, in order, through the other,
// read-write view of the same pages. An op returns once queued (its arguments
// copied, to_device's bytes staged), so a result is there only after sync or
// to_host, as on a GPU. The allocator is first-fit over the arena, whose size
// is --max-memory (or PAIL_SIM_MEMORY, or the host's memory); fresh blocks are
// filled with NaN, as a GPU leaves garbage. PAIL_SIM_FAIL_AFTER=N makes the
// Nth stream op fail (a device failing mid-run); like CUDA's sticky errors,
// every later op and sync then fails too. Not a production device: it is as
// fast as the CPU backend at best. Same kernels, same order, same OpenMP team
// size as the CPU backend: the same bits.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "backend.h"

enum { SIM_ALIGN = 256, SIM_RING = 4096, SIM_NP = 12, SIM_NI = 8, SIM_NF = 8 };

typedef struct SimOp SimOp;
struct SimOp {
    int (*run)(const SimOp *o, PailErr *err);
    const char *name;
    void *p[SIM_NP];  // pointer arguments, in the read-write view
    long long i[SIM_NI];
    float f[SIM_NF];
    DType dt;
    void *stage;      // to_device: the staged host bytes (owned until the op ran)
    double *out;      // adamw_grad_sumsq: where the stream thread writes the sum
    double d[3];      // sample: temperature, top_p, min_p
};

typedef struct {
    size_t off, size;
} SimBlock;

typedef struct {
    int fd;
    char *none, *rw;     // the two views of the arena: handed out, and the stream's
    size_t cap, in_use;  // bytes
    SimBlock *blocks;    // allocated blocks, sorted by offset
    int nblocks, capblocks;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    SimOp *ring;         // (SIM_RING) queued ops: head is next, count queued or running
    int head, count;
    bool stop, hold, failed;
    PailErr first;       // the first op error (sticky)
    long long ran, fail_after;
    pthread_t thread;
    bool started;        // the stream thread runs
    int threads;         // the OpenMP team size of the stream thread (the opener's)
    double sumsq;        // adamw_grad_sumsq's result
} SimImpl;

static SimImpl *sim(Backend *b) { return (SimImpl *)b->impl; }
static Backend *cpu(void) { return backend_cpu(); }

// ---- the stream ----
static void *stream_main(void *arg) {
    SimImpl *s = arg;
    omp_set_num_threads(s->threads);  // the CPU backend's team size: the same reductions
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && (s->count == 0 || s->hold)) pthread_cond_wait(&s->work, &s->mu);
        if (s->count == 0) break;  // stopping, drained
        SimOp o = s->ring[s->head];
        bool skip = s->failed;
        long long nth = ++s->ran;
        pthread_mutex_unlock(&s->mu);
        PailErr e = {0};
        int rc = 0;
        if (skip) rc = 0;  // a failed stream runs nothing more
        else if (s->fail_after > 0 && nth == s->fail_after)
            rc = err_set(&e, PAIL_ERR_IO, "sim: op %lld (%s) failed: injected by PAIL_SIM_FAIL_AFTER=%lld", nth, o.name,
                         s->fail_after);
        else
            rc = o.run(&o, &e);
        free(o.stage);
        pthread_mutex_lock(&s->mu);
        if (rc < 0 && !s->failed) {
            s->failed = true;
            s->first = e;
        }
        s->head = (s->head + 1) % SIM_RING;
        s->count--;
        pthread_cond_broadcast(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int sticky(SimImpl *s, PailErr *err) {  // with s->mu held
    if (!s->failed) return 0;
    if (err) *err = s->first;
    return -1;
}

static int enqueue(Backend *b, const SimOp *o, PailErr *err) {
    SimImpl *s = sim(b);
    pthread_mutex_lock(&s->mu);
    while (s->count == SIM_RING && !s->failed) pthread_cond_wait(&s->done, &s->mu);
    int rc = sticky(s, err);
    if (rc == 0) {
        s->ring[(s->head + s->count) % SIM_RING] = *o;
        s->count++;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) free(o->stage);
    return rc;
}

static int sim_sync(Backend *b, PailErr *err) {
    SimImpl *s = sim(b);
    pthread_mutex_lock(&s->mu);
    while (s->count > 0) pthread_cond_wait(&s->done, &s->mu);
    int rc = sticky(s, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

// ---- memory ----
// The read-write address of device pointer p (NULL stays NULL); *bad when p is
// not in the arena (a host pointer given to an op).
static void *rwp(SimImpl *s, const void *p, bool *bad) {
    if (!p) return NULL;
    const char *c = p;
    if (c < s->none || c >= s->none + s->cap) {
        *bad = true;
        return NULL;
    }
    return s->rw + (c - s->none);
}

static void *sim_alloc(Backend *b, size_t bytes, PailErr *err) {
    SimImpl *s = sim(b);
    size_t need = ((bytes ? bytes : 1) + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN, at = 0;
    int k = 0;
    pthread_mutex_lock(&s->mu);
    for (; k < s->nblocks; k++) {  // first fit: the gap before block k
        if (s->blocks[k].off - at >= need) break;
        at = s->blocks[k].off + s->blocks[k].size;
    }
    bool fits = at <= s->cap && s->cap - at >= need;
    if (fits && s->nblocks == s->capblocks) {
        int nc = s->capblocks ? 2 * s->capblocks : 64;
        SimBlock *nb = realloc(s->blocks, (size_t)nc * sizeof *nb);
        if (nb) s->blocks = nb, s->capblocks = nc;
        else fits = false;
    }
    if (fits) {
        memmove(s->blocks + k + 1, s->blocks + k, (size_t)(s->nblocks - k) * sizeof *s->blocks);
        s->blocks[k] = (SimBlock){at, need};
        s->nblocks++;
        s->in_use += need;
    }
    size_t in_use = s->in_use;
    pthread_mutex_unlock(&s->mu);
    if (!fits) {
        err_set(err, PAIL_ERR_NOMEM, "device sim: cannot allocate %.1f MiB: %.1f MiB of its %.1f MiB are in use "
                "(its size is --max-memory, or PAIL_SIM_MEMORY)", bytes / 1048576.0, in_use / 1048576.0,
                s->cap / 1048576.0);
        return NULL;
    }
    memset(s->rw + at, 0xff, need);  // NaN floats: nothing may count on fresh memory being zero
    return s->none + at;
}

static void sim_release(Backend *b, void *p) {
    if (!p) return;
    SimImpl *s = sim(b);
    sim_sync(b, NULL);  // as cudaFree: the ops queued before may still use it
    size_t off = (size_t)((char *)p - s->none);
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->nblocks; k++)
        if (s->blocks[k].off == off) {
            s->in_use -= s->blocks[k].size;
            // give the pages back (they read as zero, then as NaN once allocated again)
            fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)s->blocks[k].size);
            memmove(s->blocks + k, s->blocks + k + 1, (size_t)(s->nblocks - k - 1) * sizeof *s->blocks);
            s->nblocks--;
            break;
        }
    pthread_mutex_unlock(&s->mu);
}

// Translates the op's pointer arguments (given in the handed-out view) in place.
static int translate(SimImpl *s, SimOp *o, int np, PailErr *err) {
    for (int k = 0; k < np; k++) {
        bool bad = false;
        void *q = rwp(s, o->p[k], &bad);
        if (bad)
            return err_set(err, PAIL_ERR_INVALID, "sim: %s: argument %d (%p) is not device memory (a host pointer "
                           "given to a device op)", o->name, k + 1, o->p[k]);
        o->p[k] = q;
    }
    return 0;
}

static int submit(Backend *b, SimOp *o, int np, PailErr *err) {
    if (translate(sim(b), o, np, err) < 0) return -1;
    return enqueue(b, o, err);
}

static int run_copy_bytes(const SimOp *o, PailErr *err) {
    (void)err;
    memmove(o->p[0], o->stage ? o->stage : o->p[1], (size_t)o->i[0]);
    return 0;
}

static int sim_to_device(Backend *b, void *dst, const void *src, size_t bytes, PailErr *err) {
    if (!bytes) return 0;
    SimOp o = {.run = run_copy_bytes, .name = "to_device", .p = {dst}, .i = {(long long)bytes}};
    if (translate(sim(b), &o, 1, err) < 0) return -1;
    // staged now, as cudaMemcpyAsync from pageable memory: the caller may reuse src at once
    if (!(o.stage = malloc(bytes)))
        return err_set(err, PAIL_ERR_NOMEM, "sim: to_device: out of host memory staging %zu bytes", bytes);
    memcpy(o.stage, src, bytes);
    return enqueue(b, &o, err);
}

static int sim_to_host(Backend *b, void *dst, const void *src, size_t bytes, PailErr *err) {
    if (!bytes) return 0;
    bool bad = false;
    const void *from = rwp(sim(b), src, &bad);
    if (bad) return err_set(err, PAIL_ERR_INVALID, "sim: to_host: %p is not device memory", src);
    if (sim_sync(b, err) < 0) return -1;
    memcpy(dst, from, bytes);
    return 0;
}

// ---- the ops: queued with their arguments, run by the CPU backend's table ----
#define CPU_OP(name, ...) cpu()->ops->name(cpu(), __VA_ARGS__, err)
#define P(k, T) ((T)o->p[k])
#define I(k) ((int)o->i[k])
#define Z(k) ((size_t)o->i[k])

static int run_copy(const SimOp *o, PailErr *err) { return CPU_OP(copy, P(0, float *), P(1, const float *), Z(0)); }
static int sim_copy(Backend *b, float *dst, const float *src, size_t n, PailErr *err) {
    SimOp o = {.run = run_copy, .name = "copy", .p = {dst, (void *)src}, .i = {(long long)n}};
    return submit(b, &o, 2, err);
}
static int run_zero(const SimOp *o, PailErr *err) { return CPU_OP(zero, P(0, float *), Z(0)); }
static int sim_zero(Backend *b, float *dst, size_t n, PailErr *err) {
    SimOp o = {.run = run_zero, .name = "zero", .p = {dst}, .i = {(long long)n}};
    return submit(b, &o, 1, err);
}
static int run_add(const SimOp *o, PailErr *err) { return CPU_OP(add, P(0, float *), P(1, const float *), Z(0)); }
static int sim_add(Backend *b, float *y, const float *x, size_t n, PailErr *err) {
    SimOp o = {.run = run_add, .name = "add", .p = {y, (void *)x}, .i = {(long long)n}};
    return submit(b, &o, 2, err);
}
static int run_gather_rows(const SimOp *o, PailErr *err) {
    return CPU_OP(gather_rows, P(0, float *), P(1, const float *), P(2, const int *), I(0), I(1));
}
static int sim_gather_rows(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err) {
    SimOp o = {.run = run_gather_rows, .name = "gather_rows", .p = {dst, (void *)src, (void *)rows}, .i = {n, C}};
    return submit(b, &o, 3, err);
}
static int run_scatter_rows(const SimOp *o, PailErr *err) {
    return CPU_OP(scatter_rows, P(0, float *), P(1, const float *), P(2, const int *), I(0), I(1));
}
static int sim_scatter_rows(Backend *b, float *dst, const float *src, const int *rows, int n, int C, PailErr *err) {
    SimOp o = {.run = run_scatter_rows, .name = "scatter_rows", .p = {dst, (void *)src, (void *)rows}, .i = {n, C}};
    return submit(b, &o, 3, err);
}
static int run_scatter_rows_dt(const SimOp *o, PailErr *err) {
    return CPU_OP(scatter_rows_dt, P(0, void *), o->dt, P(1, const float *), P(2, const int *), I(0), I(1));
}
static int sim_scatter_rows_dt(Backend *b, void *dst, DType dt, const float *src, const int *rows, int n, int C,
                               PailErr *err) {
    SimOp o = {.run = run_scatter_rows_dt, .name = "scatter_rows_dt", .p = {dst, (void *)src, (void *)rows},
               .i = {n, C}, .dt = dt};
    return submit(b, &o, 3, err);
}
static int run_matmul_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(matmul_forward, P(0, float *), P(1, const float *), P(2, const void *), o->dt, P(3, const float *),
                  I(0), I(1), I(2), o->f[0], o->f[1]);
}
static int sim_matmul_forward(Backend *b, float *out, const float *x, const void *W, DType wdt, const float *bias,
                              int T, int K, int N, float alpha, float beta, PailErr *err) {
    SimOp o = {.run = run_matmul_forward, .name = "matmul_forward", .p = {out, (void *)x, (void *)W, (void *)bias},
               .i = {T, K, N}, .f = {alpha, beta}, .dt = wdt};
    return submit(b, &o, 4, err);
}
static int run_matmul_forward_lora(const SimOp *o, PailErr *err) {
    return CPU_OP(matmul_forward_lora, P(0, float *), P(1, float *), P(2, const float *), P(3, const void *), o->dt,
                  P(4, const float *), P(5, const float *), P(6, const float *), I(0), I(1), I(2), I(3), o->f[0],
                  o->f[1]);
}
static int sim_matmul_forward_lora(Backend *b, float *out, float *la, const float *x, const void *W, DType wdt,
                                   const float *bias, const float *A, const float *B, int T, int K, int N, int R,
                                   float scale, float beta, PailErr *err) {
    SimOp o = {.run = run_matmul_forward_lora, .name = "matmul_forward_lora",
               .p = {out, la, (void *)x, (void *)W, (void *)bias, (void *)A, (void *)B}, .i = {T, K, N, R},
               .f = {scale, beta}, .dt = wdt};
    return submit(b, &o, 7, err);
}
static int run_matmul_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(matmul_backward, P(0, float *), P(1, float *), P(2, float *), P(3, const float *),
                  P(4, const float *), P(5, const void *), o->dt, I(0), I(1), I(2), o->f[0], o->f[1]);
}
static int sim_matmul_backward(Backend *b, float *dx, float *dW, float *dbias, const float *dout, const float *x,
                               const void *W, DType wdt, int T, int K, int N, float alpha, float dx_beta,
                               PailErr *err) {
    SimOp o = {.run = run_matmul_backward, .name = "matmul_backward",
               .p = {dx, dW, dbias, (void *)dout, (void *)x, (void *)W}, .i = {T, K, N}, .f = {alpha, dx_beta},
               .dt = wdt};
    return submit(b, &o, 6, err);
}
static int run_rmsnorm_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(rmsnorm_forward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *), I(0), I(1),
                  o->f[0]);
}
static int sim_rmsnorm_forward(Backend *b, float *out, float *rstd, const float *x, const float *w, int rows, int C,
                               float eps, PailErr *err) {
    SimOp o = {.run = run_rmsnorm_forward, .name = "rmsnorm_forward", .p = {out, rstd, (void *)x, (void *)w},
               .i = {rows, C}, .f = {eps}};
    return submit(b, &o, 4, err);
}
static int run_rmsnorm_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(rmsnorm_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), P(5, const float *), I(0), I(1));
}
static int sim_rmsnorm_backward(Backend *b, float *dx, float *dw, const float *dout, const float *x, const float *w,
                                const float *rstd, int rows, int C, PailErr *err) {
    SimOp o = {.run = run_rmsnorm_backward, .name = "rmsnorm_backward",
               .p = {dx, dw, (void *)dout, (void *)x, (void *)w, (void *)rstd}, .i = {rows, C}};
    return submit(b, &o, 6, err);
}
static int run_rope_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(rope_forward, P(0, float *), P(1, const float *), P(2, const int *), P(3, const float *),
                  P(4, const float *), I(0), I(1), I(2));
}
static int sim_rope_forward(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                            const float *sin_t, int T, int nh, int D, PailErr *err) {
    SimOp o = {.run = run_rope_forward, .name = "rope_forward",
               .p = {out, (void *)x, (void *)pos, (void *)cos_t, (void *)sin_t}, .i = {T, nh, D}};
    return submit(b, &o, 5, err);
}
static int run_rope_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(rope_backward, P(0, float *), P(1, const float *), P(2, const int *), P(3, const float *),
                  P(4, const float *), I(0), I(1), I(2));
}
static int sim_rope_backward(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                             const float *sin_t, int T, int nh, int D, PailErr *err) {
    SimOp o = {.run = run_rope_backward, .name = "rope_backward",
               .p = {dx, (void *)dout, (void *)pos, (void *)cos_t, (void *)sin_t}, .i = {T, nh, D}};
    return submit(b, &o, 5, err);
}
static int run_attention_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(attention_forward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), P(5, const int *), I(0), I(1), I(2), I(3), I(4), I(5), o->f[0],
                  P(6, const float *));
}
static int sim_attention_forward(Backend *b, float *out, float *lse, const float *q, const float *k, const float *v,
                                 const int *cu, int nseq, int T, int H, int Hkv, int D, int W, float cap,
                                 const float *sinks, PailErr *err) {
    SimOp o = {.run = run_attention_forward, .name = "attention_forward",
               .p = {out, lse, (void *)q, (void *)k, (void *)v, (void *)cu, (void *)sinks},
               .i = {nseq, T, H, Hkv, D, W}, .f = {cap}};
    return submit(b, &o, 7, err);
}
static int run_attention_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(attention_backward, P(0, float *), P(1, float *), P(2, float *), P(3, const float *),
                  P(4, const float *), P(5, const float *), P(6, const float *), P(7, const float *),
                  P(8, const float *), P(9, const int *), I(0), I(1), I(2), I(3), I(4), I(5), o->f[0],
                  P(10, const float *), P(11, float *));
}
static int sim_attention_backward(Backend *b, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                  const float *k, const float *v, const float *out, const float *lse, const int *cu,
                                  int nseq, int T, int H, int Hkv, int D, int W, float cap, const float *sinks,
                                  float *dsinks, PailErr *err) {
    SimOp o = {.run = run_attention_backward, .name = "attention_backward",
               .p = {dq, dk, dv, (void *)dout, (void *)q, (void *)k, (void *)v, (void *)out, (void *)lse, (void *)cu,
                     (void *)sinks, dsinks},
               .i = {nseq, T, H, Hkv, D, W}, .f = {cap}};
    return submit(b, &o, 12, err);
}
static int run_attention_decode_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(attention_decode_forward, P(0, float *), P(1, const float *), P(2, const void *),
                  P(3, const void *), o->dt, P(4, const int *), P(5, const int *), P(6, const int *), I(0), I(1),
                  I(2), I(3), I(4), I(5), I(6), o->f[0], P(7, const float *));
}
static int sim_attention_decode_forward(Backend *b, float *out, const float *q, const void *k_pool,
                                        const void *v_pool, DType kvdt, const int *cu_new, const int *cache_len,
                                        const int *table, int max_blocks, int nseq, int Tn, int H, int Hkv,
                                        int D, int W, float cap, const float *sinks, PailErr *err) {
    SimOp o = {.run = run_attention_decode_forward, .name = "attention_decode_forward",
               .p = {out, (void *)q, (void *)k_pool, (void *)v_pool, (void *)cu_new, (void *)cache_len, (void *)table,
                     (void *)sinks},
               .i = {max_blocks, nseq, Tn, H, Hkv, D, W}, .f = {cap}, .dt = kvdt};
    return submit(b, &o, 8, err);
}
// The sampler: its settings travel in the op (doubles, as given).
static int run_sample(const SimOp *o, PailErr *err) {
    SampleParams sp = {.temperature = o->d[0], .top_p = o->d[1], .min_p = o->d[2], .top_k = I(2)};
    return CPU_OP(sample, P(0, int32_t *), P(1, float *), P(2, uint8_t *), P(3, uint64_t *), P(4, const float *),
                  P(5, const int *), P(6, const int *), I(0), I(1), &sp, P(7, const int32_t *), I(3), P(8, void *),
                  Z(4));
}
static size_t sim_sample_ws(Backend *b, int n, int V, const SampleParams *sp) {
    (void)b;
    return cpu()->ops->sample_ws(cpu(), n, V, sp);
}
static int sim_sample(Backend *b, int32_t *tok, float *logp, uint8_t *stopped, uint64_t *rng, const float *logits,
                      const int *lrow, const int *rslot, int n, int V, const SampleParams *sp, const int32_t *stop_ids,
                      int n_stop, void *ws, size_t ws_bytes, PailErr *err) {
    SimOp o = {.run = run_sample, .name = "sample",
               .p = {tok, logp, stopped, rng, (void *)logits, (void *)lrow, (void *)rslot, (void *)stop_ids, ws},
               .i = {n, V, sp->top_k, n_stop, (long long)ws_bytes}, .d = {sp->temperature, sp->top_p, sp->min_p}};
    return submit(b, &o, 9, err);
}
static int run_scale(const SimOp *o, PailErr *err) { return CPU_OP(scale, P(0, float *), Z(0), o->f[0]); }
static int sim_scale(Backend *b, float *x, size_t n, float alpha, PailErr *err) {
    SimOp o = {.run = run_scale, .name = "scale", .p = {x}, .i = {(long long)n}, .f = {alpha}};
    return submit(b, &o, 1, err);
}
static int run_swiglu_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(swiglu_forward, P(0, float *), P(1, const float *), P(2, const float *), Z(0));
}
static int sim_swiglu_forward(Backend *b, float *out, const float *gate, const float *up, size_t n, PailErr *err) {
    SimOp o = {.run = run_swiglu_forward, .name = "swiglu_forward", .p = {out, (void *)gate, (void *)up},
               .i = {(long long)n}};
    return submit(b, &o, 3, err);
}
static int run_swiglu_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(swiglu_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), Z(0));
}
static int sim_swiglu_backward(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                               const float *up, size_t n, PailErr *err) {
    SimOp o = {.run = run_swiglu_backward, .name = "swiglu_backward",
               .p = {dgate, dup, (void *)dout, (void *)gate, (void *)up}, .i = {(long long)n}};
    return submit(b, &o, 5, err);
}
static int run_swiglu_clamp_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(swiglu_clamp_forward, P(0, float *), P(1, const float *), P(2, const float *), Z(0), o->f[0],
                  o->f[1]);
}
static int sim_swiglu_clamp_forward(Backend *b, float *out, const float *gate, const float *up, size_t n, float alpha,
                                    float limit, PailErr *err) {
    SimOp o = {.run = run_swiglu_clamp_forward, .name = "swiglu_clamp_forward", .p = {out, (void *)gate, (void *)up},
               .i = {(long long)n}, .f = {alpha, limit}};
    return submit(b, &o, 3, err);
}
static int run_swiglu_clamp_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(swiglu_clamp_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), Z(0), o->f[0], o->f[1]);
}
static int sim_swiglu_clamp_backward(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                                     const float *up, size_t n, float alpha, float limit, PailErr *err) {
    SimOp o = {.run = run_swiglu_clamp_backward, .name = "swiglu_clamp_backward",
               .p = {dgate, dup, (void *)dout, (void *)gate, (void *)up}, .i = {(long long)n}, .f = {alpha, limit}};
    return submit(b, &o, 5, err);
}
static int run_softcap(const SimOp *o, PailErr *err) { return CPU_OP(softcap, P(0, float *), Z(0), o->f[0]); }
static int sim_softcap(Backend *b, float *x, size_t n, float cap, PailErr *err) {
    SimOp o = {.run = run_softcap, .name = "softcap", .p = {x}, .i = {(long long)n}, .f = {cap}};
    return submit(b, &o, 1, err);
}
static int run_geglu_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(geglu_forward, P(0, float *), P(1, const float *), P(2, const float *), Z(0));
}
static int sim_geglu_forward(Backend *b, float *out, const float *gate, const float *up, size_t n, PailErr *err) {
    SimOp o = {.run = run_geglu_forward, .name = "geglu_forward", .p = {out, (void *)gate, (void *)up},
               .i = {(long long)n}};
    return submit(b, &o, 3, err);
}
static int run_geglu_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(geglu_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), Z(0));
}
static int sim_geglu_backward(Backend *b, float *dgate, float *dup, const float *dout, const float *gate,
                              const float *up, size_t n, PailErr *err) {
    SimOp o = {.run = run_geglu_backward, .name = "geglu_backward",
               .p = {dgate, dup, (void *)dout, (void *)gate, (void *)up}, .i = {(long long)n}};
    return submit(b, &o, 5, err);
}
static int run_logprob_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(logprob_forward, P(0, float *), P(1, float *), P(2, float *), P(3, const float *),
                  P(4, const void *), o->dt, P(5, const int *), I(0), I(1), I(2), o->f[0], o->f[1], P(6, float *),
                  I(3));
}
static int sim_logprob_forward(Backend *b, float *logp, float *entropy, float *lse, const float *hidden,
                               const void *w_lm, DType wdt, const int *targets, int T, int C, int V,
                               float temperature, float cap, float *ws, int vchunk, PailErr *err) {
    SimOp o = {.run = run_logprob_forward, .name = "logprob_forward",
               .p = {logp, entropy, lse, (void *)hidden, (void *)w_lm, (void *)targets, ws}, .i = {T, C, V, vchunk},
               .f = {temperature, cap}, .dt = wdt};
    return submit(b, &o, 7, err);
}
static int run_logprob_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(logprob_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), P(5, const void *), o->dt, P(6, const int *), P(7, const float *),
                  P(8, const float *), I(0), I(1), I(2), o->f[0], o->f[1], P(9, float *), I(3));
}
static int sim_logprob_backward(Backend *b, float *dhidden, float *dw_lm, const float *dlogp, const float *dentropy,
                                const float *hidden, const void *w_lm, DType wdt, const int *targets,
                                const float *lse, const float *entropy, int T, int C, int V, float temperature,
                                float cap, float *ws, int vchunk, PailErr *err) {
    SimOp o = {.run = run_logprob_backward, .name = "logprob_backward",
               .p = {dhidden, dw_lm, (void *)dlogp, (void *)dentropy, (void *)hidden, (void *)w_lm, (void *)targets,
                     (void *)lse, (void *)entropy, ws},
               .i = {T, C, V, vchunk}, .f = {temperature, cap}, .dt = wdt};
    return submit(b, &o, 10, err);
}
static int run_logprob_forward_expect(const SimOp *o, PailErr *err) {
    return CPU_OP(logprob_forward_expect, P(0, float *), P(1, float *), P(2, float *), P(3, float *),
                  P(4, const float *), P(5, const void *), o->dt, P(6, const int *), I(0), I(1), I(2), o->f[0],
                  o->f[1], P(7, float *), Z(3));
}
static int sim_logprob_forward_expect(Backend *b, float *logp, float *entropy, float *lse, float *expect,
                                      const float *hidden, const void *w_lm, DType wdt, const int *targets, int T,
                                      int C, int V, float temperature, float cap, float *ws, size_t ws_floats,
                                      PailErr *err) {
    SimOp o = {.run = run_logprob_forward_expect, .name = "logprob_forward_expect",
               .p = {logp, entropy, lse, expect, (void *)hidden, (void *)w_lm, (void *)targets, ws},
               .i = {T, C, V, (long long)ws_floats}, .f = {temperature, cap}, .dt = wdt};
    return submit(b, &o, 8, err);
}
static int run_logprob_backward_expect(const SimOp *o, PailErr *err) {
    return CPU_OP(logprob_backward_expect, P(0, float *), P(1, const float *), P(2, const float *),
                  P(3, const void *), o->dt, P(4, const int *), I(0), I(1), o->f[0], o->f[1], P(5, const float *));
}
static int sim_logprob_backward_expect(Backend *b, float *dhidden, const float *dlogp, const float *expect,
                                       const void *w_lm, DType wdt, const int *targets, int T, int C,
                                       float temperature, float cap, const float *hidden, PailErr *err) {
    SimOp o = {.run = run_logprob_backward_expect, .name = "logprob_backward_expect",
               .p = {dhidden, (void *)dlogp, (void *)expect, (void *)w_lm, (void *)targets, (void *)hidden},
               .i = {T, C}, .f = {temperature, cap}, .dt = wdt};
    return submit(b, &o, 6, err);
}
static int run_embedding_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(embedding_forward, P(0, float *), P(1, const void *), o->dt, P(2, const int *), I(0), I(1), I(2));
}
static int sim_embedding_forward(Backend *b, float *out, const void *table, DType tdt, const int *tokens, int T,
                                 int C, int V, PailErr *err) {
    SimOp o = {.run = run_embedding_forward, .name = "embedding_forward", .p = {out, (void *)table, (void *)tokens},
               .i = {T, C, V}, .dt = tdt};
    return submit(b, &o, 3, err);
}
static int run_embedding_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(embedding_backward, P(0, float *), P(1, const float *), P(2, const int *), I(0), I(1));
}
static int sim_embedding_backward(Backend *b, float *dtable, const float *dout, const int *tokens, int T, int C,
                                  PailErr *err) {
    SimOp o = {.run = run_embedding_backward, .name = "embedding_backward",
               .p = {dtable, (void *)dout, (void *)tokens}, .i = {T, C}};
    return submit(b, &o, 3, err);
}
static int run_adamw_grad_sumsq(const SimOp *o, PailErr *err) {
    return CPU_OP(adamw_grad_sumsq, o->out, P(0, const float *), Z(0));
}
// The sum lands in the backend's own double (its "device workspace"), then
// crosses to the host after a sync, as on CUDA.
static int sim_adamw_grad_sumsq(Backend *b, double *sumsq, const float *g, size_t n, PailErr *err) {
    SimImpl *s = sim(b);
    SimOp o = {.run = run_adamw_grad_sumsq, .name = "adamw_grad_sumsq", .p = {(void *)g}, .i = {(long long)n},
               .out = &s->sumsq};
    if (submit(b, &o, 1, err) < 0 || sim_sync(b, err) < 0) return -1;
    *sumsq = s->sumsq;
    return 0;
}
static int run_adamw_update(const SimOp *o, PailErr *err) {
    return CPU_OP(adamw_update, P(0, float *), P(1, float *), P(2, float *), P(3, const float *), Z(0), o->f[0],
                  o->f[1], o->f[2], o->f[3], o->f[4], I(1), o->f[5]);
}
static int sim_adamw_update(Backend *b, float *p, float *m, float *v, const float *g, size_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                            PailErr *err) {
    SimOp o = {.run = run_adamw_update, .name = "adamw_update", .p = {p, m, v, (void *)g}, .i = {(long long)n, step},
               .f = {lr, beta1, beta2, eps, weight_decay, grad_scale}};
    return submit(b, &o, 4, err);
}
static int run_rope_partial_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(rope_partial_forward, P(0, float *), P(1, const float *), P(2, const int *), P(3, const float *),
                  P(4, const float *), I(0), I(1), I(2), I(3));
}
static int sim_rope_partial_forward(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                                    const float *sin_t, int T, int nh, int D, int rd, PailErr *err) {
    SimOp o = {.run = run_rope_partial_forward, .name = "rope_partial_forward",
               .p = {out, (void *)x, (void *)pos, (void *)cos_t, (void *)sin_t}, .i = {T, nh, D, rd}};
    return submit(b, &o, 5, err);
}
static int run_rope_partial_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(rope_partial_backward, P(0, float *), P(1, const float *), P(2, const int *), P(3, const float *),
                  P(4, const float *), I(0), I(1), I(2), I(3));
}
static int sim_rope_partial_backward(Backend *b, float *dx, const float *dout, const int *pos, const float *cos_t,
                                     const float *sin_t, int T, int nh, int D, int rd, PailErr *err) {
    SimOp o = {.run = run_rope_partial_backward, .name = "rope_partial_backward",
               .p = {dx, (void *)dout, (void *)pos, (void *)cos_t, (void *)sin_t}, .i = {T, nh, D, rd}};
    return submit(b, &o, 5, err);
}

static int run_layernorm_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(layernorm_forward, P(0, float *), P(1, float *), P(2, float *), P(3, const float *),
                  P(4, const float *), I(0), I(1), I(2), o->f[0]);
}
static int sim_layernorm_forward(Backend *b, float *out, float *mean, float *rstd, const float *x, const float *w,
                                 int rows, int C, int wrows, float eps, PailErr *err) {
    SimOp o = {.run = run_layernorm_forward, .name = "layernorm_forward",
               .p = {out, mean, rstd, (void *)x, (void *)w}, .i = {rows, C, wrows}, .f = {eps}};
    return submit(b, &o, 5, err);
}
static int run_layernorm_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(layernorm_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), P(5, const float *), P(6, const float *), I(0), I(1), I(2));
}
static int sim_layernorm_backward(Backend *b, float *dx, float *dw, const float *dout, const float *x, const float *w,
                                  const float *mean, const float *rstd, int rows, int C, int wrows, PailErr *err) {
    SimOp o = {.run = run_layernorm_backward, .name = "layernorm_backward",
               .p = {dx, dw, (void *)dout, (void *)x, (void *)w, (void *)mean, (void *)rstd}, .i = {rows, C, wrows}};
    return submit(b, &o, 7, err);
}
static int run_rope_interleaved_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(rope_interleaved_forward, P(0, float *), P(1, const float *), P(2, const int *),
                  P(3, const float *), P(4, const float *), I(0), I(1), I(2));
}
static int sim_rope_interleaved_forward(Backend *b, float *out, const float *x, const int *pos, const float *cos_t,
                                        const float *sin_t, int T, int nh, int D, PailErr *err) {
    SimOp o = {.run = run_rope_interleaved_forward, .name = "rope_interleaved_forward",
               .p = {out, (void *)x, (void *)pos, (void *)cos_t, (void *)sin_t}, .i = {T, nh, D}};
    return submit(b, &o, 5, err);
}
static int run_rope_interleaved_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(rope_interleaved_backward, P(0, float *), P(1, const float *), P(2, const int *),
                  P(3, const float *), P(4, const float *), I(0), I(1), I(2));
}
static int sim_rope_interleaved_backward(Backend *b, float *dx, const float *dout, const int *pos,
                                         const float *cos_t, const float *sin_t, int T, int nh, int D, PailErr *err) {
    SimOp o = {.run = run_rope_interleaved_backward, .name = "rope_interleaved_backward",
               .p = {dx, (void *)dout, (void *)pos, (void *)cos_t, (void *)sin_t}, .i = {T, nh, D}};
    return submit(b, &o, 5, err);
}

// ---- mixture-of-experts: sizes checked when queued (an error the caller gets at once, not the stream's) ----
static int run_moe_route_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(moe_route_forward, P(0, int *), P(1, float *), P(2, const float *), I(0), I(1), I(2), I(3));
}
static int sim_moe_route_forward(Backend *b, int *idx, float *w, const float *logits, int T, int E, int K, int norm,
                                 PailErr *err) {
    if (moe_check_sizes(E, K, "moe_route_forward", err) < 0) return -1;
    SimOp o = {.run = run_moe_route_forward, .name = "moe_route_forward", .p = {idx, w, (void *)logits},
               .i = {T, E, K, norm}};
    return submit(b, &o, 3, err);
}
static int run_moe_route_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(moe_route_backward, P(0, float *), P(1, const float *), P(2, const float *), P(3, const int *),
                  P(4, const float *), I(0), I(1), I(2), I(3));
}
static int sim_moe_route_backward(Backend *b, float *dlogits, const float *dw, const float *logits, const int *idx,
                                  const float *w, int T, int E, int K, int norm, PailErr *err) {
    if (moe_check_sizes(E, K, "moe_route_backward", err) < 0) return -1;
    SimOp o = {.run = run_moe_route_backward, .name = "moe_route_backward",
               .p = {dlogits, (void *)dw, (void *)logits, (void *)idx, (void *)w}, .i = {T, E, K, norm}};
    return submit(b, &o, 5, err);
}
static int run_moe_group(const SimOp *o, PailErr *err) {
    return CPU_OP(moe_group, P(0, int *), P(1, int *), P(2, int *), P(3, const int *), I(0), I(1), I(2));
}
static int sim_moe_group(Backend *b, int *tok, int *pos, int *offs, const int *idx, int T, int K, int E,
                         PailErr *err) {
    if (moe_check_sizes(E, K, "moe_group", err) < 0) return -1;
    SimOp o = {.run = run_moe_group, .name = "moe_group", .p = {tok, pos, offs, (void *)idx}, .i = {T, K, E}};
    return submit(b, &o, 4, err);
}
static int run_moe_combine_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(moe_combine_forward, P(0, float *), P(1, const float *), P(2, const float *), P(3, const int *),
                  I(0), I(1), I(2), o->f[0]);
}
static int sim_moe_combine_forward(Backend *b, float *y, const float *h, const float *w, const int *pos, int T, int K,
                                   int C, float beta, PailErr *err) {
    if (moe_check_k(K, "moe_combine_forward", err) < 0) return -1;
    SimOp o = {.run = run_moe_combine_forward, .name = "moe_combine_forward",
               .p = {y, (void *)h, (void *)w, (void *)pos}, .i = {T, K, C}, .f = {beta}};
    return submit(b, &o, 4, err);
}
static int run_moe_combine_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(moe_combine_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), P(5, const int *), I(0), I(1), I(2));
}
static int sim_moe_combine_backward(Backend *b, float *dh, float *dw, const float *dy, const float *h, const float *w,
                                    const int *pos, int T, int K, int C, PailErr *err) {
    if (moe_check_k(K, "moe_combine_backward", err) < 0) return -1;
    SimOp o = {.run = run_moe_combine_backward, .name = "moe_combine_backward",
               .p = {dh, dw, (void *)dy, (void *)h, (void *)w, (void *)pos}, .i = {T, K, C}};
    return submit(b, &o, 6, err);
}
static int run_sigmoid_gate_forward(const SimOp *o, PailErr *err) {
    return CPU_OP(sigmoid_gate_forward, P(0, float *), P(1, const float *), P(2, const float *), I(0), I(1), o->f[0]);
}
static int sim_sigmoid_gate_forward(Backend *b, float *y, const float *g, const float *s, int T, int C, float beta,
                                    PailErr *err) {
    SimOp o = {.run = run_sigmoid_gate_forward, .name = "sigmoid_gate_forward", .p = {y, (void *)g, (void *)s},
               .i = {T, C}, .f = {beta}};
    return submit(b, &o, 3, err);
}
static int run_sigmoid_gate_backward(const SimOp *o, PailErr *err) {
    return CPU_OP(sigmoid_gate_backward, P(0, float *), P(1, float *), P(2, const float *), P(3, const float *),
                  P(4, const float *), I(0), I(1));
}
static int sim_sigmoid_gate_backward(Backend *b, float *ds, float *dg, const float *dy, const float *g,
                                     const float *s, int T, int C, PailErr *err) {
    SimOp o = {.run = run_sigmoid_gate_backward, .name = "sigmoid_gate_backward",
               .p = {ds, dg, (void *)dy, (void *)g, (void *)s}, .i = {T, C}};
    return submit(b, &o, 5, err);
}

static const BackendOps sim_ops = {
    .name = "sim",
    .alloc = sim_alloc,
    .release = sim_release,
    .to_device = sim_to_device,
    .to_host = sim_to_host,
    .sync = sim_sync,
    .copy = sim_copy,
    .zero = sim_zero,
    .add = sim_add,
    .gather_rows = sim_gather_rows,
    .scatter_rows = sim_scatter_rows,
    .scatter_rows_dt = sim_scatter_rows_dt,
    .matmul_forward = sim_matmul_forward,
    .matmul_forward_lora = sim_matmul_forward_lora,
    .matmul_backward = sim_matmul_backward,
    .rmsnorm_forward = sim_rmsnorm_forward,
    .rmsnorm_backward = sim_rmsnorm_backward,
    .rope_forward = sim_rope_forward,
    .rope_backward = sim_rope_backward,
    .attention_forward = sim_attention_forward,
    .attention_backward = sim_attention_backward,
    .attention_decode_forward = sim_attention_decode_forward,
    .scale = sim_scale,
    .swiglu_forward = sim_swiglu_forward,
    .swiglu_backward = sim_swiglu_backward,
    .swiglu_clamp_forward = sim_swiglu_clamp_forward,
    .swiglu_clamp_backward = sim_swiglu_clamp_backward,
    .logprob_forward = sim_logprob_forward,
    .logprob_backward = sim_logprob_backward,
    .logprob_forward_expect = sim_logprob_forward_expect,
    .logprob_backward_expect = sim_logprob_backward_expect,
    .embedding_forward = sim_embedding_forward,
    .embedding_backward = sim_embedding_backward,
    .sample_ws = sim_sample_ws,
    .sample = sim_sample,
    .adamw_grad_sumsq = sim_adamw_grad_sumsq,
    .adamw_update = sim_adamw_update,
    .rope_partial_forward = sim_rope_partial_forward,
    .rope_partial_backward = sim_rope_partial_backward,
    .layernorm_forward = sim_layernorm_forward,
    .layernorm_backward = sim_layernorm_backward,
    .rope_interleaved_forward = sim_rope_interleaved_forward,
    .rope_interleaved_backward = sim_rope_interleaved_backward,
    .geglu_forward = sim_geglu_forward,
    .geglu_backward = sim_geglu_backward,
    .softcap = sim_softcap,
    .moe_route_forward = sim_moe_route_forward,
    .moe_route_backward = sim_moe_route_backward,
    .moe_group = sim_moe_group,
    .moe_combine_forward = sim_moe_combine_forward,
    .moe_combine_backward = sim_moe_combine_backward,
    .sigmoid_gate_forward = sim_sigmoid_gate_forward,
    .sigmoid_gate_backward = sim_sigmoid_gate_backward,
};

// A positive byte count or count from the environment (0 when unset).
static int env_size(const char *name, long long *out, PailErr *err) {
    const char *v = getenv(name);
    *out = 0;
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 1)
        return err_set(err, PAIL_ERR_INVALID, "%s='%s': expected a positive whole number", name, v);
    *out = x;
    return 0;
}

int backend_sim_init(Backend *b, size_t capacity, PailErr *err) {
    memset(b, 0, sizeof *b);
    long long env_cap, fail_after;
    if (env_size("PAIL_SIM_MEMORY", &env_cap, err) < 0 || env_size("PAIL_SIM_FAIL_AFTER", &fail_after, err) < 0)
        return -1;
    if (env_cap > 0 && (!capacity || (size_t)env_cap < capacity)) capacity = (size_t)env_cap;
    if (!capacity) capacity = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    capacity = (capacity + page - 1) / page * page;
    SimImpl *s = calloc(1, sizeof *s);
    if (!s || !(s->ring = calloc(SIM_RING, sizeof *s->ring))) {
        if (s) free(s);
        return err_set(err, PAIL_ERR_NOMEM, "sim: out of memory");
    }
    s->cap = capacity;
    s->fail_after = fail_after;
    s->threads = omp_get_max_threads();
    s->none = s->rw = MAP_FAILED;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    s->fd = memfd_create("pail-sim-device", MFD_CLOEXEC);
    if (s->fd < 0 || ftruncate(s->fd, (off_t)capacity) < 0 ||
        (s->none = mmap(NULL, capacity, PROT_NONE, MAP_SHARED | MAP_NORESERVE, s->fd, 0)) == MAP_FAILED ||
        (s->rw = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, s->fd, 0)) == MAP_FAILED) {
        err_set(err, PAIL_ERR_NOMEM, "sim: cannot map a device arena of %.1f MiB: %s", capacity / 1048576.0,
                strerror(errno));
        b->impl = s;
        backend_sim_free(b);
        return -1;
    }
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        err_set(err, PAIL_ERR_NOMEM, "sim: cannot start the stream thread");
        b->impl = s;
        backend_sim_free(b);
        return -1;
    }
    s->started = true;
    b->ops = &sim_ops;
    b->kind = BACKEND_SIM;
    b->host_memory = false;
    b->team_ops = false;  // its ops run on the stream thread's own team
    b->device = -1;
    b->impl = s;
    snprintf(b->desc, sizeof b->desc, "sim (a stand-in device: CPU kernels, %d threads, %.0f MiB)", s->threads,
             capacity / 1048576.0);
    return 0;
}

void backend_sim_free(Backend *b) {
    SimImpl *s = sim(b);
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        s->hold = false;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    if (s->none != MAP_FAILED) munmap(s->none, s->cap);
    if (s->rw != MAP_FAILED) munmap(s->rw, s->cap);
    if (s->fd >= 0) close(s->fd);
    free(s->blocks);
    free(s->ring);
    free(s);
    b->impl = NULL;
}

void backend_sim_hold(Backend *b, bool hold) {
    SimImpl *s = sim(b);
    pthread_mutex_lock(&s->mu);
    s->hold = hold;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

int backend_sim_queued(Backend *b) {
    SimImpl *s = sim(b);
    pthread_mutex_lock(&s->mu);
    int n = s->count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t backend_sim_in_use(Backend *b) {
    SimImpl *s = sim(b);
    pthread_mutex_lock(&s->mu);
    size_t n = s->in_use;
    pthread_mutex_unlock(&s->mu);
    return n;
}
