// Small HDF5 layer shared by every pail file format (rollout shards, adapters,
// trainer state): in-memory files (core driver + file image, never a temp
// file), typed attributes and datasets with shape checks, and errors turned
// into PailErr messages that name the file and the object. HDF5's own error
// stack printing is switched off; callers report.
#pragma once
#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"

#define H5F_MAX_DIMS 4

// Creates an empty in-memory file; name is used in messages only.
hid_t h5f_create_mem(const char *name, PailErr *err);
// The finished file's bytes (flushes first); appends to out.
int h5f_image(hid_t file, Buf *out, const char *name, PailErr *err);
// Opens a file image read-only (the bytes are copied by HDF5).
hid_t h5f_open_mem(const void *data, size_t len, const char *name, PailErr *err);
// Opens / creates a file on disk (for h5py-compatible local outputs).
hid_t h5f_open_path(const char *path, PailErr *err);
int h5f_write_path(const Buf *image, const char *path, PailErr *err);  // atomic
void h5f_close(hid_t file);

// Attributes on a location (file or group). Strings are variable-length UTF-8.
int h5a_write_str(hid_t loc, const char *name, const char *value, PailErr *err);
int h5a_write_i64(hid_t loc, const char *name, int64_t value, PailErr *err);
int h5a_write_f64(hid_t loc, const char *name, double value, PailErr *err);
int h5a_write_strs(hid_t loc, const char *name, const char *const *values, int n, PailErr *err);
// Readers fail (PAIL_ERR_INVALID) when the attribute is missing or of another
// class; `file` names the file in messages.
int h5a_read_str(hid_t loc, const char *name, char *out, size_t cap, const char *file, PailErr *err);
int h5a_read_i64(hid_t loc, const char *name, int64_t *out, const char *file, PailErr *err);
int h5a_read_f64(hid_t loc, const char *name, double *out, const char *file, PailErr *err);
// Reads a 1-D string array attribute into malloc'ed strings (caller frees each and the array).
int h5a_read_strs(hid_t loc, const char *name, char ***out, int *n, const char *file, PailErr *err);
int h5a_exists(hid_t loc, const char *name);

// Writes a dataset at path (intermediate groups created). type: H5T_NATIVE_*.
int h5d_write(hid_t loc, const char *path, hid_t type, int ndims, const int64_t *dims, const void *data,
              PailErr *err);
// Reads a whole dataset of the given native type into a malloc'ed buffer,
// checking rank (ndims) and every expected dim that is >= 0 (-1 = any); the
// actual dims go to dims_out. max_elems bounds what a hostile file can make
// us allocate. Refuses a stored class that differs (e.g. float for int).
int h5d_read(hid_t loc, const char *path, hid_t type, int ndims, const int64_t *expect, int64_t *dims_out,
             int64_t max_elems, void **out, const char *file, PailErr *err);
int h5l_exists(hid_t loc, const char *path);
// 1-D dataset of fixed-length UTF-8 strings (n may be 0).
int h5d_write_strs(hid_t loc, const char *path, const char *const *values, int n, PailErr *err);
// Reads it into malloc'ed strings (caller frees each and the array).
int h5d_read_strs(hid_t loc, const char *path, char ***out, int *n, int max_n, const char *file, PailErr *err);
