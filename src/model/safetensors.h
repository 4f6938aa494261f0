// safetensors files (https://github.com/huggingface/safetensors): reader over an
// mmap of the file, a header parser that works on (pointer, length) so it can be
// fuzzed, the sharded layout (model.safetensors.index.json), dtype conversion to
// fp32, and a writer (PEFT adapter export, generated models). Not the model
// layout: which tensors a model needs is weights.h.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

// The dtypes the format names. Every one is parsed (an adapter or a foreign file
// may carry integers); only F32, F16 and BF16 convert to fp32.
typedef enum {
    ST_DTYPE_BOOL, ST_DTYPE_U8, ST_DTYPE_I8, ST_DTYPE_F8_E4M3, ST_DTYPE_F8_E5M2,
    ST_DTYPE_I16, ST_DTYPE_U16, ST_DTYPE_F16, ST_DTYPE_BF16,
    ST_DTYPE_I32, ST_DTYPE_U32, ST_DTYPE_F32, ST_DTYPE_F64, ST_DTYPE_I64, ST_DTYPE_U64,
    ST_DTYPE_COUNT
} SafeTensorsDtype;

#define ST_MAX_DIMS 8                      // more dims than any model tensor: refused as absurd
#define ST_MAX_HEADER (100u * 1000 * 1000)  // the reference implementation's limit

typedef struct {
    char *name;               // owned, NUL-terminated (names with an embedded NUL are refused)
    SafeTensorsDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nelem;           // product of shape (1 for a scalar)
    uint64_t begin, end;      // byte offsets relative to the data section
    const uint8_t *data;      // borrowed: points into the file's bytes (mmap or caller buffer)
} SafeTensor;

typedef struct {
    char *path;               // owned copy, for messages ("<buffer>" when parsed from memory)
    const uint8_t *bytes;     // the whole file: mmap (owned when map_len > 0) or caller's buffer
    size_t len, map_len;
    uint64_t header_len;      // the JSON header's length (the first 8 bytes, little-endian)
    SafeTensor *tensors;      // owned, sorted by name (bytewise)
    int n;
    char **meta_keys, **meta_vals;  // owned: the "__metadata__" string map, n_meta entries
    int n_meta;
} SafeTensors;

const char *safetensors_dtype_name(SafeTensorsDtype d);  // "BF16"
size_t safetensors_dtype_size(SafeTensorsDtype d);       // bytes per element (1 for BOOL)
int safetensors_dtype_parse(const char *s, SafeTensorsDtype *out);  // 0 / -1

// Parses a whole safetensors file held in memory (8-byte length, JSON header,
// data). Validates everything before returning: header length <= file size - 8
// and <= ST_MAX_HEADER, a JSON object without duplicate keys, every entry with a
// known dtype, <= ST_MAX_DIMS non-negative dims, data_offsets begin <= end,
// nelem * dtype size == end - begin without overflow, and the data section fully
// and exactly covered by non-overlapping tensors (as the reference validates).
// The SafeTensors borrows bytes; `what` names the file in messages.
// Returns 0, or -1 with err (PAIL_ERR_INVALID / UNSUPPORTED / NOMEM) naming the
// tensor or field. On failure *out holds nothing to free.
int safetensors_parse(SafeTensors *out, const uint8_t *bytes, size_t len, const char *what,
                      PailErr *err);
// mmaps path read-only and parses it; safetensors_close unmaps and frees.
int safetensors_open(SafeTensors *out, const char *path, PailErr *err);
void safetensors_close(SafeTensors *st);
// Binary search by name; NULL when absent.
const SafeTensor *safetensors_find(const SafeTensors *st, const char *name);
const char *safetensors_meta(const SafeTensors *st, const char *key);  // NULL when absent

// Converts n elements of dtype F32/F16/BF16 at src (any alignment, little-endian)
// to fp32. Exact: every F16 and BF16 value is representable in fp32.
// Returns 0, or -1 when the dtype does not convert to float.
int safetensors_to_f32(float *dst, const void *src, SafeTensorsDtype dtype, size_t n);
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);  // round to nearest even, as torch's .to(bfloat16); NaN stays NaN
uint16_t f32_to_f16(float f);   // round to nearest even; overflow -> inf

// A model directory's weight files: one model.safetensors, or the shards named
// in model.safetensors.index.json ("weight_map"), each opened once.
typedef struct {
    char *dir;                // owned
    SafeTensors *files;       // owned, sorted by file name
    char **file_names;        // owned, base names, same order as files
    int nfiles;
} SafeTensorsSet;

// Opens dir/model.safetensors.index.json when present (every shard it names must
// exist and hold exactly the tensors mapped to it), else dir/model.safetensors.
// A tensor name present in two shards is an error.
int safetensors_set_open(SafeTensorsSet *set, const char *dir, PailErr *err);
void safetensors_set_close(SafeTensorsSet *set);
// Finds a tensor in any file; *file_index (may be NULL) gets the file. NULL when absent.
const SafeTensor *safetensors_set_find(const SafeTensorsSet *set, const char *name, int *file_index);

// One tensor to write: data holds nelem * dtype size bytes, little-endian.
typedef struct {
    const char *name;
    SafeTensorsDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;         // borrowed
} SafeTensorsWriteItem;

// Writes a safetensors file atomically (temp file, fsync, rename): header JSON
// with "__metadata__" first (when nmeta > 0) then tensors in name order, padded
// with spaces to a multiple of 8 bytes as the reference writer does, then the
// data in the same order. Duplicate names are an error. Streams the data; it
// does not build the file in memory.
int safetensors_write(const char *path, const SafeTensorsWriteItem *items, int n,
                      const char *const *meta_keys, const char *const *meta_vals, int nmeta,
                      PailErr *err);
