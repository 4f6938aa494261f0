// GGUF files (llama.cpp's format, versions 2 and 3, little-endian): a reader that
// treats the file as hostile, metadata by key with typed getters, and
// dequantization to fp32 of the block types gguf-py's `gguf.quants.dequantize`
// knows for dense models (gguf_quant.c), bit-equal to it. Not the import to a
// Hugging Face folder: that is gguf_import.h.
// Dims follow ggml: dims[0] is the innermost (contiguous) one; the row-major
// shape Hugging Face uses is the dims reversed.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "dtype.h"

// Metadata value types (the numbers are the format's).
typedef enum {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12, GGUF_TYPE_COUNT
} GgufValueType;

// Tensor types pail reads (ggml's numbers). Any other is refused by the reader.
typedef enum {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13, GGML_TYPE_Q6_K = 14,
    GGML_TYPE_BF16 = 30, GGML_TYPE_MXFP4 = 39,
} GgmlType;

#define GGUF_MAX_DIMS 4                  // ggml's GGML_MAX_DIMS
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_MAX_KV (1u << 16)
#define GGUF_MAX_KEY 65535               // the spec's bound on key length
#define GGUF_MAX_STRING (64u << 20)      // one string value (chat templates are ~10 KB)
#define GGUF_MAX_ARRAY (1u << 26)        // elements of one array (vocabularies are ~150k)
#define GGUF_MAX_NEST 4                  // arrays of arrays, this deep at most
#define GGUF_MAX_ALIGNMENT (1u << 20)
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    char *key;                // owned, NUL-terminated (keys with a NUL are refused)
    GgufValueType type;
    GgufValueType arr_type;   // ARRAY: the element type
    uint64_t arr_n;           // ARRAY: the element count
    const uint8_t *val;       // borrowed: the value's bytes in the file (ARRAY: its first element;
    size_t val_len;           //   STRING: the characters, after the length)
} GgufKV;

typedef struct {
    char *name;               // owned, NUL-terminated
    int ndim;
    uint64_t dims[GGUF_MAX_DIMS];  // dims[0] innermost; unused ones 1
    GgmlType type;
    uint64_t nelem;
    uint64_t offset, nbytes;  // relative to the data section; offset aligned
    const uint8_t *data;      // borrowed: inside the file's bytes
} GgufTensor;

typedef struct {
    char *path;               // owned copy, for messages
    const uint8_t *bytes;     // the whole file: mmap (owned when map_len > 0) or the caller's buffer
    size_t len, map_len;
    uint32_t version;         // 2 or 3
    uint64_t alignment;       // general.alignment, or 32
    uint64_t data_offset;     // where the data section starts
    GgufKV *kv;               // owned, file order
    int nkv;
    GgufTensor *tensors;      // owned, file order
    int ntensors;
} GgufFile;

const char *gguf_type_name(GgmlType t);      // "Q4_K"; "?" for one the reader refuses
// Elements per block and bytes per block of a tensor type; -1 for an unknown type.
int gguf_type_block(GgmlType t, size_t *block_elems, size_t *block_bytes);

// Parses a whole GGUF file held in memory. Validates everything before
// returning: magic, version 2 or 3, counts within the limits above and the
// file, every string and array inside the file, value types known, arrays
// nested at most GGUF_MAX_NEST deep, keys and tensor names unique,
// general.alignment a power of two (UINT32), every tensor with 1..4 non-zero
// dims, a known type, dims[0] a multiple of its block, a size not overflowing,
// an aligned offset, its bytes inside the file and not overlapping another's.
// Borrows bytes; `what` names the file in messages. Returns 0, or -1 with err
// (INVALID / UNSUPPORTED / NOMEM) and nothing to free.
int gguf_parse(GgufFile *out, const uint8_t *bytes, size_t len, const char *what, PailErr *err);
// mmaps path read-only and parses it; gguf_close unmaps and frees.
int gguf_open(GgufFile *out, const char *path, PailErr *err);
void gguf_close(GgufFile *g);

const GgufKV *gguf_find(const GgufFile *g, const char *key);          // NULL when absent
const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name);

// Typed getters: 0, or -1 with err: NOT_FOUND when the key is absent, INVALID
// when its value has another type (the message names the file, key and types).
// gguf_get_int accepts any integer type (and checks it fits int64);
// gguf_get_float FLOAT32 or FLOAT64; gguf_get_string borrows the characters
// (not NUL-terminated; *len set).
int gguf_get_int(const GgufFile *g, const char *key, int64_t *out, PailErr *err);
int gguf_get_float(const GgufFile *g, const char *key, double *out, PailErr *err);
int gguf_get_bool(const GgufFile *g, const char *key, bool *out, PailErr *err);
int gguf_get_string(const GgufFile *g, const char *key, const char **s, size_t *len, PailErr *err);
// An array of the given element type: its count and first element's bytes.
int gguf_get_array(const GgufFile *g, const char *key, GgufValueType elem, uint64_t *n,
                   const uint8_t **data, PailErr *err);
// Walks a string array: strs[i] / lens[i] (caller's arrays of n entries, from
// gguf_get_array's count) point into the file.
void gguf_array_strings(const uint8_t *data, uint64_t n, const char **strs, size_t *lens);

// Dequantizes n elements (a multiple of the type's block) at src to fp32
// exactly as gguf-py does (gguf_quant.c). Returns 0, or -1 for a type or count
// it cannot take.
int gguf_dequantize(float *dst, const void *src, GgmlType type, uint64_t n);
// The pail storage dtype (kernels/dtype.h's DType) a GGUF tensor type is kept
// as when it is not dequantized: F32, F16, BF16 and the eight block types pail
// computes on (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K); -1 for the
// others (Q2_K, Q3_K: dequantized at import, or refused when kept; MXFP4: always dequantized).
int gguf_type_dtype(GgmlType type);
