// bench_kernels_quant: the products on GGUF block-quantized weights
// (kernels/matmul_quant.c) at Qwen2.5-0.5B's shapes (C 896, F 4864, q 896 x
// 896, k/v 128 x 896, the 151936 x 896 head): decode mat-vec (T = 1 and 4)
// time and weight GB/s per type beside bf16 and fp32, prefill (T = 512), and
// the two designs for the mat-vec: (a) pail's, blocks dequantized in registers
// against fp32 x; (b) llama.cpp's, x quantized to 8-bit blocks of 32 and
// integer dot products (maddubs + madd), prototyped here for Q8_0, Q4_1, Q4_K
// and Q6_K: time and largest error against the double reference on the
// dequantized W (the trainer's arithmetic), in units of the products'
// magnitude sum |x| |W|. Validates pail's path first. Not a test.
//   bench_kernels_quant [matvec] [down] [head] [stream1] [designs] [prefill]   (none: all)
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/threads.h"
#include "dtype_cpu.h"
#include "kernels.h"
#include "quant.h"
#include "refs.h"

enum { C = 896,
       F = 4864,
       KV = 128,
       V = 151936 };

static const DType all_dts[] = {DT_F32, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                                DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
enum { NDT = sizeof all_dts / sizeof all_dts[0] };

static unsigned rnd_state = 2463534242u;
static unsigned xr(void) {
    rnd_state ^= rnd_state << 13, rnd_state ^= rnd_state >> 17, rnd_state ^= rnd_state << 5;
    return rnd_state;
}
static float uni(void) { return (xr() >> 8) / 16777216.0f; }
static float gauss(void) {
    float u = uni() + 1e-7f, v = uni();
    return sqrtf(-2 * logf(u)) * cosf(6.2831853f * v);
}

static void put_f16(unsigned char *p, float f) {
    uint16_t h = dt_f32_to_f16(f);
    memcpy(p, &h, 2);
}

// n rows of K in dt: fp32 / bf16 ~ Uniform(-0.05, 0.05); a quantized type:
// random bytes with fp16 scales of that size (as check_kernels_quant builds them).
static void fill_w(void *dst, DType dt, size_t rows, int K) {
    if (!dtype_is_quant(dt)) {
        float *buf = bench_malloc(sizeof(float) * K);
        for (size_t r = 0; r < rows; r++) {
            for (int k = 0; k < K; k++) buf[k] = 0.1f * (uni() - 0.5f);
            if (dt == DT_F32) memcpy((float *)dst + r * K, buf, sizeof(float) * K);
            else dtype_from_f32((char *)dst + r * K * 2, buf, dt, (size_t)K);
        }
        free(buf);
        return;
    }
    size_t nbytes = dtype_row_bytes(dt, (size_t)K) * rows, bb = dtype_block_bytes(dt);
    unsigned char *q = dst;
    for (size_t i = 0; i < nbytes; i++) q[i] = (unsigned char)xr();
    for (size_t b = 0; b < nbytes; b += bb) {
        unsigned char *p = q + b;
        float u = (0.5f + uni()) * 0.05f, v = (0.5f + uni()) * 0.05f;
        switch (dt) {
        case DT_Q8_0: put_f16(p, u / 128); break;
        case DT_Q4_0: put_f16(p, u / 8); break;
        case DT_Q5_0: put_f16(p, u / 16); break;
        case DT_Q4_1: put_f16(p, u / 8), put_f16(p + 2, -v); break;
        case DT_Q5_1: put_f16(p, u / 16), put_f16(p + 2, -v); break;
        case DT_Q4_K: put_f16(p, u / 512), put_f16(p + 2, v / 32); break;
        case DT_Q5_K: put_f16(p, u / 1024), put_f16(p + 2, v / 32); break;
        case DT_Q6_K: put_f16(p + 208, u / 2048); break;
        default: break;
        }
    }
}

static size_t w_bytes(DType dt, size_t N, int K) { return N * dtype_row_bytes(dt, (size_t)K); }

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- design (b): x quantized to 8-bit blocks of 32 (llama.cpp's Q8_0 / Q8_1
// activations; its K-quants take Q8_K, one scale a 256, which rounds no finer),
// integer dot products. A prototype for the measurement, not a kernel pail runs.
typedef struct {
    signed char *q;  // (K) int8
    float *d;        // (K / 32) scales
    int *s;          // (K / 32) sums of q over the block
    int *s16;        // (K / 16) sums of q over each half block (Q6_K's 16-element scales)
} XQ;

static void xq_quantize(XQ *xq, const float *x, int K) {
    for (int b = 0; b < K / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        float d = amax / 127, id = d > 0 ? 1 / d : 0;
        int s = 0, h = 0;
        for (int j = 0; j < 32; j++) {
            int v = (int)lrintf(x[32 * b + j] * id);
            xq->q[32 * b + j] = (signed char)v;
            s += v;
            if (j == 15) h = s;
        }
        xq->d[b] = d, xq->s[b] = s, xq->s16[2 * b] = h, xq->s16[2 * b + 1] = s - h;
    }
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
static inline float f16s(const unsigned char *p) {
    unsigned short h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
// 32 u8 (w) times 32 i8 (x), summed in pairs then fours: 8 x i32 as float
static inline __m256 dot_u8i8(__m256i w, __m256i x) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

static float b_q8_0(const unsigned char *w, const XQ *xq, int K) {
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < K / 32; b++, w += 34) {
        __m256i qw = _mm256_loadu_si256((const __m256i *)(w + 2));
        __m256i qx = _mm256_loadu_si256((const __m256i *)(xq->q + 32 * b));
        __m256 p = dot_u8i8(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16s(w) * xq->d[b]), p, acc);
    }
    return hsum8(acc);
}

static float b_q4_1(const unsigned char *w, const XQ *xq, int K) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float ms = 0;
    for (int b = 0; b < K / 32; b++, w += 20) {
        __m128i v = _mm_loadu_si128((const __m128i *)(w + 4));
        __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        __m256 p = dot_u8i8(q, _mm256_loadu_si256((const __m256i *)(xq->q + 32 * b)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16s(w) * xq->d[b]), p, acc);
        ms += f16s(w + 2) * xq->d[b] * (float)xq->s[b];
    }
    return hsum8(acc) + ms;
}

static void k4_scales(const unsigned char *s, unsigned char sc[8], unsigned char mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 0x3F, mn[j] = s[4 + j] & 0x3F;
        sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
        mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
}

static float b_q4_k(const unsigned char *w, const XQ *xq, int K) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float ms = 0;
    for (int k = 0; k < K; k += 256, w += 144) {
        unsigned char sc[8], mn[8];
        k4_scales(w + 4, sc, mn);
        float d = f16s(w), dmin = f16s(w + 2);
        int b0 = k / 32;
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * j));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            int bl = b0 + 2 * j, bh = bl + 1;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * j] * xq->d[bl]),
                                  dot_u8i8(lo, _mm256_loadu_si256((const __m256i *)(xq->q + 32 * bl))), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * j + 1] * xq->d[bh]),
                                  dot_u8i8(hi, _mm256_loadu_si256((const __m256i *)(xq->q + 32 * bh))), acc);
        }
        for (int s = 0; s < 8; s++) ms += dmin * mn[s] * xq->d[b0 + s] * (float)xq->s[b0 + s];
    }
    return hsum8(acc) - ms;
}

// Q6_K: q + 32 (0..63) as u8 against x, 16-element scales through madd, the
// 32 sum(x) taken off with the half-block sums.
static float b_q6_k(const unsigned char *w, const XQ *xq, int K) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float off = 0;
    for (int k = 0; k < K; k += 256, w += 210) {
        const signed char *sc = (const signed char *)(w + 192);
        float d = f16s(w + 208);
        for (int j = 0; j < 2; j++) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * j));
            for (int s = 0; s < 4; s++) {
                __m256i a = _mm256_loadu_si256((const __m256i *)(w + 64 * j + 32 * (s & 1)));
                __m256i nib = s < 2 ? _mm256_and_si256(a, m4) : _mm256_and_si256(_mm256_srli_epi16(a, 4), m4);
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * s), m3), 4);
                int b = (k + 128 * j + 32 * s) / 32, sa = sc[8 * j + 2 * s], sb = sc[8 * j + 2 * s + 1];
                __m256i p16 = _mm256_maddubs_epi16(_mm256_or_si256(nib, hb),
                                                   _mm256_loadu_si256((const __m256i *)(xq->q + 32 * b)));
                __m256i scv = _mm256_setr_epi16(sa, sa, sa, sa, sa, sa, sa, sa, sb, sb, sb, sb, sb, sb, sb, sb);
                __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, scv));
                float dd = d * xq->d[b];
                acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), p, acc);
                off += dd * 32.0f * (float)(sa * xq->s16[2 * b] + sb * xq->s16[2 * b + 1]);
            }
        }
    }
    return hsum8(acc) - off;
}
#pragma GCC pop_options

typedef float (*BDot)(const unsigned char *w, const XQ *xq, int K);
static BDot b_dot(DType dt) {
    return dt == DT_Q8_0 ? b_q8_0 : dt == DT_Q4_1 ? b_q4_1 :
                                dt == DT_Q4_K     ? b_q4_k :
                                dt == DT_Q6_K     ? b_q6_k :
                                                    NULL;
}

// out(N) = W x by design (b): x quantized once, rows in guided blocks of 16
// over the team, as pail's mat-vec splits them.
static void b_matvec(float *out, const float *x, const void *W, DType dt, int K, int N, XQ *xq) {
    BDot f = b_dot(dt);
    size_t rb = dtype_row_bytes(dt, (size_t)K);
    if (x) xq_quantize(xq, x, K);  // NULL: xq holds x already
#pragma omp parallel for schedule(guided)
    for (int b = 0; b < (N + 15) / 16; b++)
        for (int n = 16 * b; n < N && n < 16 * b + 16; n++) out[n] = f((const unsigned char *)W + n * rb, xq, K);
}

// ---- figures ----
// Copies of W cycled so that each call reads it from memory (>= 512 MiB in all).
typedef struct {
    void *w;
    int copies;
    size_t bytes;  // one copy
} Cycled;

static Cycled cycled(DType dt, int N, int K) {
    Cycled c;
    c.bytes = w_bytes(dt, (size_t)N, K);
    c.copies = (int)((512u << 20) / c.bytes) + 1;
    c.w = bench_malloc(c.bytes * c.copies);
    fill_w(c.w, dt, (size_t)N, K);
    for (int i = 1; i < c.copies; i++) memcpy((char *)c.w + i * c.bytes, c.w, c.bytes);
    return c;
}
static const void *copy_of(const Cycled *c, int i) { return (const char *)c->w + (size_t)(i % c->copies) * c->bytes; }

// Median over 7 batches of the per-call time of out = x W^T at T rows.
static double time_matvec(const Cycled *c, DType dt, int T, int K, int N, const float *x, float *o) {
    int reps = c->copies * 2 > 16 ? c->copies * 2 : 16, k = 0;
    double t[7];
    for (int b = 0; b < 7; b++) {
        double t0 = bench_now();
        for (int r = 0; r < reps; r++) matmul_forward_dt(o, x, copy_of(c, k++), dt, NULL, T, K, N, 1, 0);
        t[b] = (bench_now() - t0) / reps;
    }
    return median(t, 7);
}

static void matvec_figures(const char *name, int N, int K) {
    printf("\ndecode mat-vec, W %s = %d x %d (N x K): ms a call (median of 7 batches), GB/s of W read\n", name, N,
           K);
    printf("  %-6s %9s %8s %8s %8s %8s %8s  %s\n", "dtype", "MiB", "T=1 ms", "GB/s", "T=4 ms", "GB/s", "vs bf16",
           "path");
    float *x = bench_malloc(sizeof(float) * 4 * K), *o = bench_malloc(sizeof(float) * 4 * N);
    for (int i = 0; i < 4 * K; i++) x[i] = gauss();
    double tbf = 0;
    for (int d = 0; d < NDT; d++) {
        DType dt = all_dts[d];
        if (K % dtype_block(dt)) {  // llama.cpp stores such a tensor in a fallback type (Q5_0 for Q4_K_M's)
            printf("  %-6s   (K = %d is not a multiple of its %d-element block)\n", dtype_name(dt), K, dtype_block(dt));
            continue;
        }
        Cycled c = cycled(dt, N, K);
        double t1 = time_matvec(&c, dt, 1, K, N, x, o), t4 = time_matvec(&c, dt, 4, K, N, x, o);
        if (dt == DT_BF16) tbf = t1;
        char vs[16] = "-";
        if (tbf > 0) snprintf(vs, sizeof vs, "%.2fx", tbf / t1);
        printf("  %-6s %9.2f %8.3f %8.1f %8.3f %8.1f %8s  %s\n", dtype_name(dt), c.bytes / 1048576.0, t1 * 1e3,
               c.bytes / t1 / 1e9, t4 * 1e3, c.bytes / t4 / 1e9, vs, matmul_path_name(1, dt));
        free(c.w);
    }
    free(x), free(o);
}

// Largest |got - ref| / (|x| |W|)_n over the N outputs, ref and the
// magnitude in double on the dequantized W; *rel gets the largest |got - ref|
// over the outputs' root mean square.
static double max_err(const float *got, const float *x, const float *wc, int K, int N, double *rel) {
    double worst = 0, worst_abs = 0, ss = 0;
    for (int n = 0; n < N; n++) {
        double s = 0, m = 0;
        for (int k = 0; k < K; k++) {
            double p = (double)x[k] * wc[(size_t)n * K + k];
            s += p, m += fabs(p);
        }
        worst = fmax(worst, fabs(got[n] - s) / m);
        worst_abs = fmax(worst_abs, fabs(got[n] - s));
        ss += s * s;
    }
    *rel = worst_abs / sqrt(ss / N);
    return worst;
}

static void design_figures(int N, int K) {
    printf("\nmat-vec designs at W %d x %d, T = 1, x ~ N(0, 1): (a) pail's, blocks dequantized in registers, fp32 x;\n"
           "(b) llama.cpp's, x quantized to int8 blocks of 32, maddubs + madd. ms a call (median of 7 alternating\n"
           "batches; W cycled from memory), and the largest error against the double product on the dequantized W\n"
           "in units of the sum |x| |W| of that output, and over the outputs' root mean square\n",
           N, K);
    printf("  %-6s %9s %9s %8s %12s %12s %12s %12s\n", "dtype", "(a) ms", "(b) ms", "(a)/(b)", "(a) error", "(b) error",
           "(a) vs rms", "(b) vs rms");
    float *x = bench_malloc(sizeof(float) * K), *o = bench_malloc(sizeof(float) * N);
    float *ob = bench_malloc(sizeof(float) * N), *wc = bench_malloc(sizeof(float) * (size_t)N * K);
    for (int i = 0; i < K; i++) x[i] = gauss();
    XQ xq = {bench_malloc(K), bench_malloc(sizeof(float) * (K / 32)), bench_malloc(sizeof(int) * (K / 32)),
             bench_malloc(sizeof(int) * (K / 16))};
    DType dts[] = {DT_Q8_0, DT_Q4_1, DT_Q4_K, DT_Q6_K};
    for (int d = 0; d < 4; d++) {
        DType dt = dts[d];
        if (K % dtype_block(dt)) continue;
        Cycled c = cycled(dt, N, K);
        int reps = c.copies * 2 > 16 ? c.copies * 2 : 16, k = 0;
        double ta[7], tb[7];
        for (int b = 0; b < 7; b++) {
            double t0 = bench_now();
            for (int r = 0; r < reps; r++) matmul_forward_dt(o, x, copy_of(&c, k++), dt, NULL, 1, K, N, 1, 0);
            double t1 = bench_now();
            for (int r = 0; r < reps; r++) b_matvec(ob, x, copy_of(&c, k++), dt, K, N, &xq);
            ta[b] = (t1 - t0) / reps, tb[b] = (bench_now() - t1) / reps;
        }
        for (int n = 0; n < N; n++) quant_dequant(wc + (size_t)n * K, (const char *)c.w + n * dtype_row_bytes(dt, K), dt, K);
        matmul_forward_dt(o, x, c.w, dt, NULL, 1, K, N, 1, 0);
        b_matvec(ob, x, c.w, dt, K, N, &xq);
        double ra, rb, ea = max_err(o, x, wc, K, N, &ra), eb = max_err(ob, x, wc, K, N, &rb);
        if (ea > 1e-5) {
            fprintf(stderr, "bench_kernels_quant: %s mat-vec error %.3g > 1e-5 of the magnitude\n", dtype_name(dt), ea);
            exit(1);
        }
        double ma = median(ta, 7), mb = median(tb, 7);
        printf("  %-6s %9.3f %9.3f %7.2fx %12.2e %12.2e %12.2e %12.2e\n", dtype_name(dt), ma * 1e3, mb * 1e3, ma / mb,
               ea, eb, ra, rb);
        free(c.w);
    }
    free(x), free(o), free(ob), free(wc), free(xq.q), free(xq.d), free(xq.s), free(xq.s16);
}

// The arithmetic alone: one thread, W of 64 rows in cache, the thread's CPU
// time (a loaded machine's other processes do not count): ns per weight.
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void compute_figures(int K) {
    enum { N = 64,
           REPS = 200 };
    printf("\nmat-vec arithmetic, one thread, W 64 x %d in cache (thread CPU time, best of 5 x %d calls):\n"
           "ns per weight; (b) where prototyped, x quantized once for all the calls\n",
           K, REPS);
    printf("  %-6s %9s %9s %9s %8s\n", "dtype", "(a) T=1", "(a) T=4/4", "(b) T=1", "(a)/(b)");
    float *x = bench_malloc(sizeof(float) * 4 * K), *o = bench_malloc(sizeof(float) * 4 * N);
    for (int i = 0; i < 4 * K; i++) x[i] = gauss();
    XQ xq = {bench_malloc(K), bench_malloc(sizeof(float) * (K / 32)), bench_malloc(sizeof(int) * (K / 32)),
             bench_malloc(sizeof(int) * (K / 16))};
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int d = 1; d < NDT; d++) {
        DType dt = all_dts[d];
        void *w = bench_malloc(w_bytes(dt, N, K));
        fill_w(w, dt, N, K);
        double t[3] = {1e30, 1e30, 1e30};
        for (int b = 0; b < 5; b++) {
            double t0 = cpu_now();
            for (int r = 0; r < REPS; r++) matmul_forward_dt(o, x, w, dt, NULL, 1, K, N, 1, 0);
            double t1 = cpu_now();
            for (int r = 0; r < REPS; r++) matmul_forward_dt(o, x, w, dt, NULL, 4, K, N, 1, 0);
            double t2 = cpu_now();
            if (b_dot(dt))
                for (int r = 0; r < REPS; r++) b_matvec(o, r ? NULL : x, w, dt, K, N, &xq);
            double t3 = cpu_now();
            t[0] = fmin(t[0], t1 - t0), t[1] = fmin(t[1], (t2 - t1) / 4), t[2] = fmin(t[2], t3 - t2);
        }
        double per = 1e9 / ((double)REPS * N * K);
        if (b_dot(dt))
            printf("  %-6s %9.3f %9.3f %9.3f %7.2fx\n", dtype_name(dt), t[0] * per, t[1] * per, t[2] * per,
                   t[0] / t[2]);
        else
            printf("  %-6s %9.3f %9.3f %9s %8s\n", dtype_name(dt), t[0] * per, t[1] * per, "-", "-");
        free(w);
    }
    omp_set_num_threads(saved);
    free(x), free(o), free(xq.q), free(xq.d), free(xq.s), free(xq.s16);
}

// One thread, W read from memory, the thread's CPU time (a stall on memory
// counts, another process's turn does not): what a core streams, measurable
// on a busy machine.
static void stream1_figures(const char *name, int N, int K) {
    printf("\ndecode mat-vec on one thread, W %s = %d x %d from memory, T = 1 (thread CPU time, best of 5 passes\n"
           "over >= 512 MiB of copies): ms a call, GB/s of W read\n",
           name, N, K);
    printf("  %-6s %8s %8s %8s\n", "dtype", "ms", "GB/s", "vs bf16");
    float *x = bench_malloc(sizeof(float) * K), *o = bench_malloc(sizeof(float) * N);
    for (int i = 0; i < K; i++) x[i] = gauss();
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    double tbf = 0;
    for (int d = 0; d < NDT; d++) {
        DType dt = all_dts[d];
        if (K % dtype_block(dt)) continue;
        Cycled c = cycled(dt, N, K);
        double best = 1e30;
        for (int b = 0, k = 0; b < 5; b++) {
            double t0 = cpu_now();
            for (int r = 0; r < c.copies; r++) matmul_forward_dt(o, x, copy_of(&c, k++), dt, NULL, 1, K, N, 1, 0);
            best = fmin(best, (cpu_now() - t0) / c.copies);
        }
        if (dt == DT_BF16) tbf = best;
        char vs[16] = "-";
        if (tbf > 0) snprintf(vs, sizeof vs, "%.2fx", tbf / best);
        printf("  %-6s %8.3f %8.2f %8s\n", dtype_name(dt), best * 1e3, c.bytes / best / 1e9, vs);
        free(c.w);
    }
    omp_set_num_threads(saved);
    free(x), free(o);
}

static void prefill_figures(int N, int K) {
    enum { TP = 512 };
    printf("\nprefill, T = %d rows, W %d x %d: ms a call (best of 3), GFLOP/s\n", TP, N, K);
    float *x = bench_malloc(sizeof(float) * TP * K), *o = bench_malloc(sizeof(float) * (size_t)TP * N);
    for (size_t i = 0; i < (size_t)TP * K; i++) x[i] = gauss();
    double tf = 0;
    for (int d = 0; d < NDT; d++) {
        DType dt = all_dts[d];
        if (K % dtype_block(dt)) continue;
        void *w = bench_malloc(w_bytes(dt, (size_t)N, K));
        fill_w(w, dt, (size_t)N, K);
        matmul_forward_dt(o, x, w, dt, NULL, TP, K, N, 1, 0);  // panels allocated
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
            double t0 = bench_now();
            matmul_forward_dt(o, x, w, dt, NULL, TP, K, N, 1, 0);
            best = fmin(best, bench_now() - t0);
        }
        if (dt == DT_F32) tf = best;
        printf("  %-6s %8.2f ms %7.1f GFLOP/s %6.2fx fp32's time  %s\n", dtype_name(dt), best * 1e3,
               2.0 * TP * N * K / best / 1e9, best / tf, matmul_path_name(TP, dt));
        free(w);
    }
    free(x), free(o);
}

static int want(int argc, char **argv, const char *what) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], what)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    threads_policy_apply(argv);
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(f);
    }
    printf("bench_kernels_quant: %d threads, load average %.2f (figures are only meaningful on an idle machine); "
           "dtype kernels %s (best %s)\n",
           omp_get_max_threads(), load[0], dtype_isa(), dtype_isa_label(dtype_isa_best()));
    if (want(argc, argv, "matvec") || want(argc, argv, "down")) matvec_figures("down", C, F);
    if (want(argc, argv, "matvec")) {
        matvec_figures("gate/up", F, C);
        matvec_figures("q/o", C, C);
        matvec_figures("k/v", KV, C);
    }
    if (want(argc, argv, "head")) matvec_figures("head", V, C);
    if (want(argc, argv, "stream1")) {
        stream1_figures("down", C, F);
        stream1_figures("gate/up", F, C);
    }
    if (want(argc, argv, "designs")) {
        compute_figures(4864);
        design_figures(F, C);
        design_figures(C, F);
    }
    if (want(argc, argv, "prefill")) {
        prefill_figures(F, C);
        prefill_figures(C, F);
    }
    return 0;
}
