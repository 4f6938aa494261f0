// libFuzzer target for the GGUF reader (`make fuzz`, then
// build/fuzz/fuzz_gguf tests/fuzz/corpus/gguf). Every input is a whole file in
// memory; a parse that succeeds must hand out only keys, strings and tensor
// bytes inside the input (ASan checks by touching them) and tensors that
// dequantize. Not part of CI: run by hand.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);  // sized exactly: reads past the end trip ASan
    if (!buf) return 0;
    memcpy(buf, data, size);
    GgufFile g;
    PailErr err = {0};
    if (gguf_parse(&g, buf, size, "fuzz", &err) == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < g.nkv; i++) {
            const GgufKV *kv = &g.kv[i];
            if (kv->val_len) sink ^= kv->val[0] ^ kv->val[kv->val_len - 1];
            if (gguf_find(&g, kv->key) != kv) abort();  // unique keys
            if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING && kv->arr_n <= 4096) {
                const char *s[4096];
                size_t l[4096];
                gguf_array_strings(kv->val, kv->arr_n, s, l);
                for (uint64_t j = 0; j < kv->arr_n; j++)
                    if (l[j]) sink ^= (uint8_t)s[j][0] ^ (uint8_t)s[j][l[j] - 1];
            }
        }
        for (int i = 0; i < g.ntensors; i++) {
            const GgufTensor *t = &g.tensors[i];
            if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
            float tmp[1024];
            if (t->nelem <= 1024 && gguf_dequantize(tmp, t->data, t->type, t->nelem) < 0) abort();
        }
        (void)sink;
        gguf_close(&g);
    } else if (err.msg[0] == 0) {
        abort();  // every failure says why
    }
    free(buf);
    return 0;
}
