// libFuzzer target for the safetensors header parser (`make fuzz`, then
// build/fuzz/fuzz_safetensors tests/fuzz/corpus/safetensors). Every input is a
// whole file held in memory; a parse that succeeds must only hand out tensor
// data inside the input, which ASan checks by touching each tensor's bytes.
// Not part of CI: run by hand (doc/models.md gives the command and last figures).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // A private copy sized exactly: reads past the end trip ASan.
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    SafeTensors st;
    PailErr err = {0};
    if (safetensors_parse(&st, buf, size, "fuzz", &err) == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < st.n; i++) {
            const SafeTensor *t = &st.tensors[i];
            size_t nb = t->end - t->begin;
            if (nb) sink ^= t->data[0] ^ t->data[nb - 1];
            if (safetensors_find(&st, t->name) != t) abort();  // sorted, unique names
            float tmp[64];
            if (t->nelem <= 64) safetensors_to_f32(tmp, t->data, t->dtype, t->nelem);
        }
        (void)sink;
        safetensors_close(&st);
    } else if (err.msg[0] == 0) {
        abort();  // every failure says why
    }
    free(buf);
    return 0;
}
