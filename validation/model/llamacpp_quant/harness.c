// llama.cpp's own quantizer for validation/model/quantize_check.py: links the
// pinned llama.cpp's ggml/src/ggml-quants.c (built by build.sh as ggml-base is
// built: -O3 -DNDEBUG, no -march) and runs its quantize_row_<type>_ref, so pail's
// kernels/quantize.c can be compared with it byte for byte. Not part of pail.
//   harness TYPE IN.f32 OUT    OUT = IN (raw fp32, a multiple of TYPE's block) quantized
//   harness f16 [STRIDE]       ggml's fp32 -> fp16 against pail's dt_f32_to_f16 on every
//                              STRIDE-th fp32 bit pattern (1: all 2^32, 15 s)
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml-quants.h"
#include "ggml-impl.h"
#include "dtype_cpu.h"

// ggml-quants.c's only calls into the rest of ggml; the _ref functions reach none of them.
void ggml_abort(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "harness: ggml_abort at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { ggml_abort(__FILE__, __LINE__, "ggml_row_size(%d, %lld)", (int)type, (long long)ne); }
size_t ggml_type_size(enum ggml_type type) { ggml_abort(__FILE__, __LINE__, "ggml_type_size(%d)", (int)type); }
const char *ggml_type_name(enum ggml_type type) { ggml_abort(__FILE__, __LINE__, "ggml_type_name(%d)", (int)type); }

static const struct {
    const char *name;
    int block, bytes;
    void (*fn)(const float *, void *, int64_t);
} types[] = {
    {"q8_0", 32, sizeof(block_q8_0), (void (*)(const float *, void *, int64_t))quantize_row_q8_0_ref},
    {"q4_0", 32, sizeof(block_q4_0), (void (*)(const float *, void *, int64_t))quantize_row_q4_0_ref},
    {"q4_1", 32, sizeof(block_q4_1), (void (*)(const float *, void *, int64_t))quantize_row_q4_1_ref},
    {"q5_0", 32, sizeof(block_q5_0), (void (*)(const float *, void *, int64_t))quantize_row_q5_0_ref},
    {"q5_1", 32, sizeof(block_q5_1), (void (*)(const float *, void *, int64_t))quantize_row_q5_1_ref},
    {"q4_k", 256, sizeof(block_q4_K), (void (*)(const float *, void *, int64_t))quantize_row_q4_K_ref},
    {"q5_k", 256, sizeof(block_q5_K), (void (*)(const float *, void *, int64_t))quantize_row_q5_K_ref},
    {"q6_k", 256, sizeof(block_q6_K), (void (*)(const float *, void *, int64_t))quantize_row_q6_K_ref},
};

static int check_f16(uint64_t stride) {
    uint64_t bad = 0, n = 0;
    for (uint64_t u = 0; u <= UINT32_MAX; u += stride, n++) {
        float f;
        uint32_t w = (uint32_t)u;
        memcpy(&f, &w, 4);
        uint16_t a = ggml_compute_fp32_to_fp16(f), b = dt_f32_to_f16(f);
        if (a != b && bad++ < 5) fprintf(stderr, "f16: 0x%08x: ggml 0x%04x, pail 0x%04x\n", w, a, b);
    }
    printf("f16: %llu of %llu fp32 values (bit patterns with stride %llu) convert differently\n", (unsigned long long)bad,
           (unsigned long long)n, (unsigned long long)stride);
    return bad != 0;
}

int main(int argc, char **argv) {
    if ((argc == 2 || argc == 3) && !strcmp(argv[1], "f16")) {
        uint64_t stride = argc == 3 ? strtoull(argv[2], NULL, 10) : 1;
        return stride ? check_f16(stride) : 2;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: harness TYPE IN.f32 OUT | harness f16 [STRIDE]\n");
        return 2;
    }
    int t = -1;
    for (int i = 0; i < (int)(sizeof types / sizeof *types); i++)
        if (!strcmp(argv[1], types[i].name)) t = i;
    if (t < 0) {
        fprintf(stderr, "harness: unknown type '%s'\n", argv[1]);
        return 2;
    }
    FILE *in = fopen(argv[2], "rb");
    if (!in || fseek(in, 0, SEEK_END) != 0) {
        fprintf(stderr, "harness: cannot read %s\n", argv[2]);
        return 1;
    }
    long size = ftell(in);
    rewind(in);
    size_t n = (size_t)size / 4;
    if (size % 4 || n % (size_t)types[t].block) {
        fprintf(stderr, "harness: %s: %ld bytes is not a whole number of %d-float blocks\n", argv[2], size, types[t].block);
        return 1;
    }
    float *x = malloc(n * 4 + 4);
    void *y = malloc(n / (size_t)types[t].block * (size_t)types[t].bytes + 1);
    if (!x || !y || fread(x, 4, n, in) != n) {
        fprintf(stderr, "harness: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(in);
    types[t].fn(x, y, (int64_t)n);
    FILE *out = fopen(argv[3], "wb");
    size_t nb = n / (size_t)types[t].block * (size_t)types[t].bytes;
    if (!out || fwrite(y, 1, nb, out) != nb || fclose(out) != 0) {
        fprintf(stderr, "harness: cannot write %s\n", argv[3]);
        return 1;
    }
    free(x);
    free(y);
    return 0;
}
