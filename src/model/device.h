// --device for the tools that compute (grpo-train, grpo-rollout, grpo-ctl eval,
// grpo-ctl logprobs): one spelling, one help text, one way of failing. The
// backends themselves are kernels/backend.h.
#pragma once
#include <stdbool.h>
#include "backend.h"
#include "core/flags.h"
#include "model/weights.h"

#define DEVICE_CLI_FLAG(v)                                                                             \
    {"device", FLAG_STRING, (v), "cpu", 1, 0,                                                          \
     "where to compute: cpu, cuda (= cuda:0), cuda:N, auto (a usable GPU, else the CPU), or sim (a "       \
     "stand-in device for tests: the CPU kernels behind a GPU's rules, doc/kernels.md)"}
#define MAX_MEMORY_CLI_FLAG(v)                                                                         \
    {"max-memory", FLAG_STRING, (v), NULL, 1, 0,                                                       \
     "refuse to start when the memory plan (printed at start) exceeds this, e.g. 20G (none: the "      \
     "device's available memory); also the size of --device sim's memory"}

#define DTYPE_CLI_FLAG(v)                                                                              \
    {"dtype", FLAG_STRING, (v), "auto", 1, 0,                                                          \
     "base weights: auto (each matrix as the checkpoint stores it), bf16, f16 or f32 (LoRA, gradients " \
     "and optimiser state are always f32)"}

#define QUANTIZE_CLI_FLAG(v)                                                                           \
    {"quantize", FLAG_STRING, (v), "none", 1, 0,                                                       \
     "quantize the float matrices at load: q8_0 or q4_k (llama.cpp's blocks, bit for bit; q4_k rows "  \
     "that are not whole 256-blocks as q5_0), or none; a GGUF import's blocks are kept as stored "      \
     "either way (doc/models.md)"}

// --dtype's and --quantize's values as one want (model_dtype_parse /
// model_quantize_parse: MODEL_DTYPE_AUTO, a float DType, or a quantized one);
// quantize may be NULL. 2 after printing a usage error (both given).
int dtype_cli(const char *tool, const char *value, const char *quantize, int *want);
// --kv-dtype: the KV cache's elements, auto or one of bf16, f16, f32.
#define KV_DTYPE_CLI_FLAG(v)                                                                           \
    {"kv-dtype", FLAG_STRING, (v), "auto", 1, 0,                                                       \
     "the KV cache's elements: auto (f16 for bf16, f16 and quantized bases: closer to the trainer "     \
     "than bf16 at the same bytes; f32 bases keep f32), bf16, f16 or f32 (doc/model.md)"}
// --kv-dtype's value as MODEL_DTYPE_AUTO or DT_F32 / DT_BF16 / DT_F16; 2 after
// printing one line naming the flag and the accepted values.
int kv_dtype_cli(const char *tool, const char *value, int *want);
// The KV cache's dtype for want (kv_dtype_cli's) and the weights a tool holds
// (dtype_plan's desc, "q4_1+q8_0+f32", "bf16+f32", ...): want when given, else
// f16 when a matrix is bf16, f16 or quantized, else f32.
DType kv_dtype_resolve(int want, const char *weights_desc);
// What a tool loading dir with want will hold, for its memory plan (spec's
// weights_dtype and weights_bytes; desc holds MODEL_DTYPE_DESC bytes). -1 with err.
int dtype_plan(const char *dir, int want, char desc[MODEL_DTYPE_DESC], size_t *bytes, PailErr *err);

// One log line after a model is loaded: how its matrices are held (dtype,
// MiB) and the product paths the kernels take for them on this CPU (decode's
// mat-vec, and prefill / training's GEMM).
void dtype_log_weights(const ModelWeights *w);

// What a tool computes on besides the CPU (device_open_cli's ready).
enum {
    DEVICE_READY_SIM = 1,   // its tensors all live on the backend: the sim device too
    DEVICE_READY_CUDA = 2,  // verified on a GPU (no tool yet: cuda is refused, auto means the CPU)
};
// PAIL_UNVERIFIED_CUDA=1 in the environment: the escape of the GPU
// verification run (mk/gpu-bundle.sh's .gpu/run.sh), not for users. A tool
// without DEVICE_READY_CUDA then opens cuda / cuda:N (and auto picks a GPU)
// as if it were verified, with a warning line; without a usable GPU it fails
// naming what is missing, as a verified tool would.
bool device_unverified_cuda(void);
// Opens the backend a tool's --device names (max_memory: --max-memory's bytes,
// 0 for none: the sim device's size). Returns 0 with *out set; 2 after
// printing a usage error (a bad spelling); 1 after printing one line: cuda
// not yet verified for this tool (before anything is opened: the same line on
// every machine), sim not ready for it, or what is missing (no CUDA in the
// build, no driver, no device, no cuBLAS).
int device_open_cli(const char *tool, const char *spec, unsigned ready, size_t max_memory, Backend **out);
// --max-memory's value in bytes (NULL: 0, no limit but the device's); 2 after
// printing a usage error.
int max_memory_cli(const char *tool, const char *value, size_t *bytes);
