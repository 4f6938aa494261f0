// --device handling shared by the computing tools (see device.h).
#include "model/device.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int dtype_cli(const char *tool, const char *value, const char *quantize, int *want) {
    if (model_dtype_parse(value, want) < 0) {
        fprintf(stderr, "%s: --dtype '%s': use auto, bf16, f16 or f32 (or bfloat16, float16, float32)\n", tool, value ? value : "");
        return 2;
    }
    int q;
    if (model_quantize_parse(quantize, &q) < 0) {
        fprintf(stderr, "%s: --quantize '%s': use q8_0, q4_k or none\n", tool, quantize);
        return 2;
    }
    if (q != MODEL_DTYPE_AUTO && *want != MODEL_DTYPE_AUTO) {
        fprintf(stderr, "%s: --quantize %s and --dtype %s: give one (--quantize holds the matrices as %s blocks)\n",
                tool, quantize, value, quantize);
        return 2;
    }
    if (q != MODEL_DTYPE_AUTO) *want = q;
    return 0;
}

int kv_dtype_cli(const char *tool, const char *value, int *want) {
    DType dt;
    if (!value || !strcmp(value, "auto")) {
        *want = MODEL_DTYPE_AUTO;
        return 0;
    }
    if (dtype_parse(value, &dt) < 0 || dtype_is_quant(dt)) {
        fprintf(stderr, "%s: --kv-dtype '%s': use auto, bf16, f16 or f32\n", tool, value);
        return 2;
    }
    *want = (int)dt;
    return 0;
}

DType kv_dtype_resolve(int want, const char *desc) {
    if (want != MODEL_DTYPE_AUTO) return (DType)want;
    // f16, not bf16, for a bf16 base: 3 more mantissa bits for the same bytes and
    // speed put the workers' log-probs 4-10x closer to the trainer's (doc/model.md)
    for (const char *p = desc; p && *p;) {
        char name[16];
        size_t n = strcspn(p, "+");
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
        DType dt;
        if (dtype_parse(name, &dt) == 0 && (dt == DT_BF16 || dt == DT_F16 || dtype_is_quant(dt))) return DT_F16;
        p += n + (p[n] == '+');
    }
    return DT_F32;
}

int dtype_plan(const char *dir, int want, char desc[MODEL_DTYPE_DESC], size_t *bytes, PailErr *err) {
    return model_weights_probe(dir, want, bytes, desc, err);
}

void dtype_log_weights(const ModelWeights *w) {
    char desc[MODEL_DTYPE_DESC];
    model_weights_dtype_desc(w, desc, sizeof desc);
    DType dt = w->dtype[PARAM_WQ];  // the projections' (a mix logs the first layer family's paths)
    log_info("weights: %s, %.1f MiB; products: decode %s; prefill and training %s", desc, w->bytes / 1048576.0,
             matmul_path_name(1, dt), matmul_path_name(1 << 12, dt));
}

bool device_unverified_cuda(void) {
    const char *v = getenv("PAIL_UNVERIFIED_CUDA");
    return v && !strcmp(v, "1");
}

int device_open_cli(const char *tool, const char *spec, unsigned ready, size_t max_memory, Backend **out) {
    PailErr err = {0};
    BackendKind kind;
    int ordinal;
    *out = NULL;
    if (backend_parse_device(spec, &kind, &ordinal, &err) < 0) {
        fprintf(stderr, "%s: %s\n", tool, err.msg);
        return 2;
    }
    bool escape = !(ready & DEVICE_READY_CUDA) && kind == BACKEND_CUDA && device_unverified_cuda();
    bool cuda_ready = (ready & DEVICE_READY_CUDA) || escape;
    bool auto_pick = kind == BACKEND_CUDA && ordinal < 0;
    if (auto_pick && !cuda_ready) spec = "cpu";
    // Refused before anything is opened: the same line on every machine, with
    // or without a GPU or a CUDA build.
    if (kind == BACKEND_CUDA && !auto_pick && !cuda_ready) {
        fprintf(stderr, "%s: --device %s: not yet verified on a GPU in this release: use --device cpu\n", tool, spec);
        return 1;
    }
    if (kind == BACKEND_SIM && !(ready & DEVICE_READY_SIM)) {
        fprintf(stderr, "%s: --device sim: %s does not compute on the backend in this release: use --device cpu\n",
                tool, tool);
        return 1;
    }
    if (backend_open(out, spec, max_memory, &err) < 0) {
        fprintf(stderr, "%s: %s\n", tool, err.msg);
        return 1;
    }
    if (escape && (*out)->kind == BACKEND_CUDA)
        log_warn("--device %s: PAIL_UNVERIFIED_CUDA=1: %s is not yet verified on a GPU in this release; this is "
                 "the GPU verification run's escape (mk/gpu-bundle.sh), not for training that matters",
                 spec, tool);
    log_info("device: %s; %s", (*out)->desc, threads_policy_note());
    return 0;
}
