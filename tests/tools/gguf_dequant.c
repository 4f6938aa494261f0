// Test driver for tests/integration/test_gguf.sh: dequantizes every tensor of a
// GGUF file with pail's reader (model/gguf.h) and writes each as raw fp32 to
// OUTDIR/<name>.f32, so the script can compare them with gguf-py's bit for bit.
#include <stdio.h>
#include <stdlib.h>
#include "core/fsutil.h"
#include "model/gguf.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: gguf_dequant FILE.gguf OUTDIR\n");
        return 2;
    }
    GgufFile g;
    PailErr err = {0};
    if (gguf_open(&g, argv[1], &err) < 0) {
        fprintf(stderr, "gguf_dequant: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < g.ntensors && rc == 0; i++) {
        const GgufTensor *t = &g.tensors[i];
        float *y = malloc(t->nelem * sizeof *y);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.f32", argv[2], t->name);
        if (!y || gguf_dequantize(y, t->data, t->type, t->nelem) < 0 ||
            fs_write_file_atomic(path, y, t->nelem * sizeof *y, &err) < 0) {
            fprintf(stderr, "gguf_dequant: %s: %s\n", t->name, err.msg[0] ? err.msg : "failed");
            rc = 1;
        }
        free(y);
    }
    gguf_close(&g);
    return rc;
}
