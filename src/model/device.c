// --device handling shared by the computing tools (see device.h).
#include "model/device.h"
#include <stdio.h>
#include "core/log.h"
#include "core/threads.h"
#include "model/memplan.h"
#include "model/weights.h"
#include "kernels.h"

int max_memory_cli(const char *tool, const char *value, size_t *bytes) {
    PailErr err = {0};
    *bytes = 0;
    if (!value) return 0;
    if (memplan_parse_size(value, bytes, &err) < 0) {
        fprintf(stderr, "%s: --max-memory: %s\n", tool, err.msg);
        return 2;
    }
    return 0;
}

int dtype_cli(const char *tool, const char *value, int *want) {
    if (model_dtype_parse(value, want) < 0) {
        fprintf(stderr, "%s: --dtype '%s': use auto, bf16, f16 or f32\n", tool, value ? value : "");
        return 2;
    }
    return 0;
}

int dtype_plan(const char *dir, int want, char desc[32], size_t *bytes, PailErr *err) {
    DType dt[PARAM_COUNT];
    return model_weights_probe(dir, want, dt, bytes, desc, err);
}

void dtype_log_weights(const ModelWeights *w) {
    char desc[32];
    model_weights_dtype_desc(w, desc, sizeof desc);
    DType dt = w->dtype[PARAM_WQ];  // the projections' (a mix logs the first layer family's paths)
    log_info("weights: %s, %.1f MiB; products: decode %s; prefill and training %s", desc, w->bytes / 1048576.0,
             matmul_path_name(1, dt), matmul_path_name(1 << 12, dt));
}

int device_open_cli(const char *tool, const char *spec, bool cuda_ready, Backend **out) {
    PailErr err = {0};
    BackendKind kind;
    int ordinal;
    *out = NULL;
    if (backend_parse_device(spec, &kind, &ordinal, &err) < 0) {
        fprintf(stderr, "%s: %s\n", tool, err.msg);
        return 2;
    }
    bool auto_pick = kind == BACKEND_CUDA && ordinal < 0;
    if (auto_pick && !cuda_ready) spec = "cpu";
    if (backend_open(out, spec, &err) < 0) {
        fprintf(stderr, "%s: %s\n", tool, err.msg);
        return 1;
    }
    if ((*out)->kind == BACKEND_CUDA && !cuda_ready) {
        fprintf(stderr, "%s: --device %s: %s computes on the CPU only in this release (found %s): use --device cpu\n",
                tool, spec, tool, (*out)->desc);
        backend_close(*out);
        *out = NULL;
        return 1;
    }
    log_info("device: %s; %s", (*out)->desc, threads_policy_note());
    return 0;
}
