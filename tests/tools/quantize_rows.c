// Test driver for validation/model/quantize_check.py: quantizes a file of raw
// fp32 with pail's quant_quantize (kernels/quant.h), so the script can compare
// the bytes with gguf-py's and llama.cpp's quantizers.
//   quantize_rows TYPE IN.f32 OUT   TYPE a dtype_parse name (q8_0 .. q6_k)
#include <stdio.h>
#include <stdlib.h>
#include "core/buf.h"
#include "core/fsutil.h"
#include "quant.h"

int main(int argc, char **argv) {
    DType dt;
    if (argc != 4 || dtype_parse(argv[1], &dt) < 0 || !dtype_is_quant(dt)) {
        fprintf(stderr, "usage: quantize_rows q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k IN.f32 OUT\n");
        return 2;
    }
    PailErr err = {0};
    Buf in = {0};
    if (fs_read_file(argv[2], &in, &err) < 0) {
        fprintf(stderr, "quantize_rows: %s\n", err.msg);
        return 1;
    }
    size_t size = in.len, n = size / sizeof(float), out_bytes = dtype_row_bytes(dt, n);
    void *out = malloc(out_bytes + 1);
    if (size % sizeof(float) || !out || quant_quantize(out, (const float *)in.data, dt, n) < 0) {
        fprintf(stderr, "quantize_rows: %s: %zu bytes is not a whole number of %s blocks\n", argv[2], size, argv[1]);
        return 1;
    }
    if (fs_write_file_atomic(argv[3], out, out_bytes, &err) < 0) {
        fprintf(stderr, "quantize_rows: %s\n", err.msg);
        return 1;
    }
    buf_free(&in);
    free(out);
    return 0;
}
