// HDF5 helpers shared by pail's file formats (see h5file.h). Files are built
// in memory with the core driver and handed out as file images, so a writer
// never leaves a temp file behind and a reader never touches the disk.
#include "shard/h5file.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;
static void quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }
static void h5_init(void) { pthread_once(&quiet_once, quiet); }

// The core driver identifies open files by name: make every name unique.
static void unique_name(char *out, size_t cap, const char *name) {
    static _Atomic unsigned long counter;
    snprintf(out, cap, "pail-mem-%lu-%s", ++counter, name ? name : "file");
}

hid_t h5f_create_mem(const char *name, PailErr *err) {
    h5_init();
    char uname[512];
    unique_name(uname, sizeof uname, name);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 16, 0) < 0) {
        if (fapl >= 0) H5Pclose(fapl);
        err_set(err, PAIL_ERR_IO, "%s: cannot set up an in-memory HDF5 file", name);
        return -1;
    }
    hid_t f = H5Fcreate(uname, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) err_set(err, PAIL_ERR_IO, "%s: cannot create an in-memory HDF5 file", name);
    return f;
}

int h5f_image(hid_t file, Buf *out, const char *name, PailErr *err) {
    if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) return err_set(err, PAIL_ERR_IO, "%s: HDF5 flush failed", name);
    ssize_t n = H5Fget_file_image(file, NULL, 0);
    if (n <= 0) return err_set(err, PAIL_ERR_IO, "%s: cannot get the HDF5 file image", name);
    if (buf_reserve(out, (size_t)n) < 0) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory (%zd bytes)", name, n);
    if (H5Fget_file_image(file, out->data + out->len, (size_t)n) != n)
        return err_set(err, PAIL_ERR_IO, "%s: cannot copy the HDF5 file image", name);
    out->len += (size_t)n;
    out->data[out->len] = 0;
    return 0;
}

hid_t h5f_open_mem(const void *data, size_t len, const char *name, PailErr *err) {
    h5_init();
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (len < 8 || memcmp(data, sig, 8) != 0) {
        err_set(err, PAIL_ERR_INVALID, "%s: not an HDF5 file (bad signature, %zu bytes)", name, len);
        return -1;
    }
    char uname[512];
    unique_name(uname, sizeof uname, name);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 16, 0) < 0 || H5Pset_file_image(fapl, (void *)data, len) < 0) {
        if (fapl >= 0) H5Pclose(fapl);
        err_set(err, PAIL_ERR_IO, "%s: cannot set up an HDF5 file image", name);
        return -1;
    }
    hid_t f = H5Fopen(uname, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) err_set(err, PAIL_ERR_INVALID, "%s: not a readable HDF5 file (truncated or corrupt)", name);
    return f;
}

hid_t h5f_open_path(const char *path, PailErr *err) {
    h5_init();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) err_set(err, PAIL_ERR_INVALID, "%s: not a readable HDF5 file", path);
    return f;
}

int h5f_write_path(const Buf *image, const char *path, PailErr *err) {
    return fs_write_file_atomic(path, image->data, image->len, err);
}

void h5f_close(hid_t file) {
    if (file >= 0) H5Fclose(file);
}

static hid_t str_type(void) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

static int write_attr(hid_t loc, const char *name, hid_t type, hid_t space, const void *value, PailErr *err) {
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t a = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, type, value) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    if (rc < 0) err_set(err, PAIL_ERR_IO, "cannot write HDF5 attribute '%s'", name);
    return rc;
}

// Strings are written fixed-length (UTF-8, NUL-terminated): variable-length
// strings live in HDF5's global heap, which a corrupt file can make the
// library read out of bounds (seen with HDF5 1.10.8 in tests/check_shard.c).
static hid_t fixed_str_type(size_t n) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, n ? n : 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

int h5a_write_str(hid_t loc, const char *name, const char *value, PailErr *err) {
    const char *v = value ? value : "";
    hid_t t = fixed_str_type(strlen(v) + 1), s = H5Screate(H5S_SCALAR);
    int rc = write_attr(loc, name, t, s, v, err);
    H5Tclose(t);
    H5Sclose(s);
    return rc;
}

int h5a_write_i64(hid_t loc, const char *name, int64_t value, PailErr *err) {
    hid_t s = H5Screate(H5S_SCALAR);
    int rc = write_attr(loc, name, H5T_NATIVE_INT64, s, &value, err);
    H5Sclose(s);
    return rc;
}

int h5a_write_f64(hid_t loc, const char *name, double value, PailErr *err) {
    hid_t s = H5Screate(H5S_SCALAR);
    int rc = write_attr(loc, name, H5T_NATIVE_DOUBLE, s, &value, err);
    H5Sclose(s);
    return rc;
}

int h5a_write_strs(hid_t loc, const char *name, const char *const *values, int n, PailErr *err) {
    hsize_t dim = (hsize_t)n;
    size_t w = 1;
    for (int i = 0; i < n; i++) if (strlen(values[i]) + 1 > w) w = strlen(values[i]) + 1;
    char *flat = calloc((size_t)(n ? n : 1), w);
    if (!flat) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) memcpy(flat + (size_t)i * w, values[i], strlen(values[i]));
    hid_t t = fixed_str_type(w), s = H5Screate_simple(1, &dim, NULL);
    int rc = write_attr(loc, name, t, s, flat, err);
    free(flat);
    H5Tclose(t);
    H5Sclose(s);
    return rc;
}

int h5a_exists(hid_t loc, const char *name) { return H5Aexists(loc, name) > 0; }

static hid_t open_attr(hid_t loc, const char *name, H5T_class_t want, const char *file, PailErr *err) {
    if (H5Aexists(loc, name) <= 0) {
        err_set(err, PAIL_ERR_INVALID, "%s: attribute '%s' is missing", file, name);
        return -1;
    }
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1;
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    if (t >= 0) H5Tclose(t);
    if (a < 0 || cls != want) {
        if (a >= 0) H5Aclose(a);
        static const char *names[] = {"integer", "float", "time", "string"};
        err_set(err, PAIL_ERR_INVALID, "%s: attribute '%s' is not a%s %s", file, name,
                want == H5T_INTEGER ? "n" : "", want <= H5T_STRING ? names[want] : "value");
        return -1;
    }
    return a;
}

int h5a_read_str(hid_t loc, const char *name, char *out, size_t cap, const char *file, PailErr *err) {
    hid_t a = open_attr(loc, name, H5T_STRING, file, err);
    if (a < 0) return -1;
    hid_t ft = H5Aget_type(a), space = H5Aget_space(a);
    int rc = 0;
    if (H5Sget_simple_extent_npoints(space) != 1) {
        rc = err_set(err, PAIL_ERR_INVALID, "%s: attribute '%s' is not a single string", file, name);
    } else if (H5Tis_variable_str(ft) > 0) {
        hid_t t = str_type();
        char *v = NULL;
        if (H5Aread(a, t, &v) < 0 || !v) rc = err_set(err, PAIL_ERR_INVALID, "%s: cannot read attribute '%s'", file, name);
        else snprintf(out, cap, "%s", v);
        if (v) H5Dvlen_reclaim(t, space, H5P_DEFAULT, &v);
        H5Tclose(t);
    } else {
        size_t n = H5Tget_size(ft);
        char *tmp = calloc(1, n + 1);
        hid_t t = fixed_str_type(n + 1);  // room for a NUL after a NULLPAD / SPACEPAD string
        H5Tset_cset(t, H5Tget_cset(ft));
        if (!tmp || H5Aread(a, t, tmp) < 0) rc = err_set(err, PAIL_ERR_INVALID, "%s: cannot read attribute '%s'", file, name);
        else snprintf(out, cap, "%s", tmp);
        H5Tclose(t);
        free(tmp);
    }
    H5Tclose(ft);
    H5Sclose(space);
    H5Aclose(a);
    return rc;
}

static int read_scalar(hid_t loc, const char *name, H5T_class_t cls, hid_t native, void *out, const char *file,
                       PailErr *err) {
    hid_t a = open_attr(loc, name, cls, file, err);
    if (a < 0) return -1;
    hid_t space = H5Aget_space(a);
    int rc = 0;
    if (H5Sget_simple_extent_npoints(space) != 1 || H5Aread(a, native, out) < 0)
        rc = err_set(err, PAIL_ERR_INVALID, "%s: attribute '%s' is not a single number", file, name);
    H5Sclose(space);
    H5Aclose(a);
    return rc;
}

int h5a_read_i64(hid_t loc, const char *name, int64_t *out, const char *file, PailErr *err) {
    return read_scalar(loc, name, H5T_INTEGER, H5T_NATIVE_INT64, out, file, err);
}

int h5a_read_f64(hid_t loc, const char *name, double *out, const char *file, PailErr *err) {
    return read_scalar(loc, name, H5T_FLOAT, H5T_NATIVE_DOUBLE, out, file, err);
}

int h5a_read_strs(hid_t loc, const char *name, char ***out, int *n, const char *file, PailErr *err) {
    hid_t a = open_attr(loc, name, H5T_STRING, file, err);
    if (a < 0) return -1;
    hid_t space = H5Aget_space(a), ft = H5Aget_type(a);
    hssize_t count = H5Sget_simple_extent_npoints(space);
    int rc = 0;
    *out = NULL;
    *n = 0;
    if (count < 0 || count > 4096) {
        rc = err_set(err, PAIL_ERR_INVALID, "%s: attribute '%s' is not a list of strings", file, name);
    } else if (H5Tis_variable_str(ft) <= 0) {
        size_t w = H5Tget_size(ft) + 1;  // room for a NUL after NULLPAD strings (h5py's np.bytes_)
        char *flat = calloc((size_t)(count ? count : 1), w);
        hid_t t = fixed_str_type(w);
        H5Tset_cset(t, H5Tget_cset(ft));
        if (!flat || w > 65536 || H5Aread(a, t, flat) < 0) {
            rc = err_set(err, PAIL_ERR_INVALID, "%s: cannot read attribute '%s'", file, name);
        } else {
            char **copy = calloc((size_t)count + 1, sizeof *copy);
            for (hssize_t i = 0; i < count; i++) copy[i] = strndup(flat + (size_t)i * w, w);
            *out = copy;
            *n = (int)count;
        }
        free(flat);
        H5Tclose(t);
    } else {
        hid_t t = str_type();
        char **v = calloc((size_t)count + 1, sizeof *v);
        if (!v || H5Aread(a, t, v) < 0) {
            rc = err_set(err, PAIL_ERR_INVALID, "%s: cannot read attribute '%s'", file, name);
            free(v);
        } else {
            char **copy = calloc((size_t)count + 1, sizeof *copy);
            for (hssize_t i = 0; i < count; i++) copy[i] = strdup(v[i] ? v[i] : "");
            H5Dvlen_reclaim(t, space, H5P_DEFAULT, v);
            free(v);
            *out = copy;
            *n = (int)count;
        }
        H5Tclose(t);
    }
    H5Tclose(ft);
    H5Sclose(space);
    H5Aclose(a);
    return rc;
}

int h5d_write(hid_t loc, const char *path, hid_t type, int ndims, const int64_t *dims, const void *data,
              PailErr *err) {
    hsize_t d[H5F_MAX_DIMS] = {0};
    int64_t total = 1;
    if (ndims < 1 || ndims > H5F_MAX_DIMS) return err_set(err, PAIL_ERR_INVALID, "dataset '%s': rank %d", path, ndims);
    for (int i = 0; i < ndims; i++) {
        d[i] = (hsize_t)dims[i];
        total *= dims[i];
    }
    hid_t space = H5Screate_simple(ndims, d, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t ds = H5Dcreate2(loc, path, type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    int rc = 0;
    if (ds < 0 || (total > 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0))
        rc = err_set(err, PAIL_ERR_IO, "cannot write HDF5 dataset '%s'", path);
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(lcpl);
    H5Sclose(space);
    return rc;
}

int h5l_exists(hid_t loc, const char *path) {
    // H5Lexists needs every intermediate link to exist: check each prefix.
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf; (p = strchr(p + 1, '/'));) {
        *p = 0;
        if (H5Lexists(loc, buf, H5P_DEFAULT) <= 0) return 0;
        *p = '/';
    }
    return H5Lexists(loc, buf, H5P_DEFAULT) > 0;
}

int h5d_read(hid_t loc, const char *path, hid_t type, int ndims, const int64_t *expect, int64_t *dims_out,
             int64_t max_elems, void **out, const char *file, PailErr *err) {
    *out = NULL;
    if (!h5l_exists(loc, path)) return err_set(err, PAIL_ERR_INVALID, "%s: dataset '%s' is missing", file, path);
    hid_t ds = H5Dopen2(loc, path, H5P_DEFAULT);
    if (ds < 0) return err_set(err, PAIL_ERR_INVALID, "%s: '%s' is not a dataset", file, path);
    hid_t space = H5Dget_space(ds), ft = H5Dget_type(ds);
    int rank = H5Sget_simple_extent_ndims(space), rc = 0;
    hsize_t d[H5F_MAX_DIMS] = {0};
    int64_t total = 1;
    if (rank != ndims) {
        rc = err_set(err, PAIL_ERR_INVALID, "%s: dataset '%s' has %d dimensions, expected %d", file, path, rank, ndims);
        goto done;
    }
    H5Sget_simple_extent_dims(space, d, NULL);
    for (int i = 0; i < ndims; i++) {
        if (expect && expect[i] >= 0 && (int64_t)d[i] != expect[i]) {
            rc = err_set(err, PAIL_ERR_INVALID, "%s: dataset '%s' has %lld values in dimension %d, expected %lld", file,
                         path, (long long)d[i], i, (long long)expect[i]);
            goto done;
        }
        if (dims_out) dims_out[i] = (int64_t)d[i];
        if (d[i] > 0 && (int64_t)d[i] > max_elems / (total ? total : 1)) {
            rc = err_set(err, PAIL_ERR_INVALID, "%s: dataset '%s' is too large", file, path);
            goto done;
        }
        total *= (int64_t)d[i];
    }
    H5T_class_t want = H5Tget_class(type), have = H5Tget_class(ft);
    if (want != have || (have == H5T_INTEGER && H5Tget_size(ft) > H5Tget_size(type))) {
        rc = err_set(err, PAIL_ERR_INVALID, "%s: dataset '%s' has type %s%zu, expected %s%zu", file, path,
                     have == H5T_FLOAT ? "float" : have == H5T_INTEGER ? "int" : "class", H5Tget_size(ft) * 8,
                     want == H5T_FLOAT ? "float" : "int", H5Tget_size(type) * 8);
        goto done;
    }
    *out = malloc((size_t)(total > 0 ? total : 1) * H5Tget_size(type));
    if (!*out) {
        rc = err_set(err, PAIL_ERR_NOMEM, "%s: out of memory reading '%s'", file, path);
        goto done;
    }
    if (total > 0 && H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0) {
        free(*out);
        *out = NULL;
        rc = err_set(err, PAIL_ERR_INVALID, "%s: cannot read dataset '%s' (corrupt?)", file, path);
    }
done:
    H5Tclose(ft);
    H5Sclose(space);
    H5Dclose(ds);
    return rc;
}

int h5d_write_strs(hid_t loc, const char *path, const char *const *values, int n, PailErr *err) {
    if (n < 0) return err_set(err, PAIL_ERR_INVALID, "dataset '%s': %d strings", path, n);
    size_t w = 1;
    for (int i = 0; i < n; i++) if (strlen(values[i]) + 1 > w) w = strlen(values[i]) + 1;
    char *flat = calloc((size_t)(n ? n : 1), w);
    if (!flat) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) memcpy(flat + (size_t)i * w, values[i], strlen(values[i]));
    hid_t t = fixed_str_type(w);
    int64_t dim = n;
    int rc = h5d_write(loc, path, t, 1, &dim, flat, err);
    H5Tclose(t);
    free(flat);
    return rc;
}

int h5d_read_strs(hid_t loc, const char *path, char ***out, int *n, int max_n, const char *file, PailErr *err) {
    *out = NULL;
    *n = 0;
    if (!h5l_exists(loc, path)) return err_set(err, PAIL_ERR_INVALID, "%s: dataset '%s' is missing", file, path);
    hid_t ds = H5Dopen2(loc, path, H5P_DEFAULT);
    if (ds < 0) return err_set(err, PAIL_ERR_INVALID, "%s: '%s' is not a dataset", file, path);
    hid_t ft = H5Dget_type(ds), space = H5Dget_space(ds);
    int rc = 0;
    hssize_t count = H5Sget_simple_extent_npoints(space);
    size_t w = H5Tget_size(ft) + 1;
    if (H5Tget_class(ft) != H5T_STRING || H5Tis_variable_str(ft) > 0 || H5Sget_simple_extent_ndims(space) != 1 ||
        count < 0 || count > max_n || w > 65536) {
        rc = err_set(err, PAIL_ERR_INVALID, "%s: dataset '%s' is not a list of at most %d strings", file, path, max_n);
    } else {
        char *flat = calloc((size_t)(count ? count : 1), w);
        hid_t t = fixed_str_type(w);
        H5Tset_cset(t, H5Tget_cset(ft));
        if (!flat || (count > 0 && H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat) < 0)) {
            rc = err_set(err, PAIL_ERR_INVALID, "%s: cannot read dataset '%s'", file, path);
        } else {
            char **v = calloc((size_t)count + 1, sizeof *v);
            for (hssize_t i = 0; i < count; i++) v[i] = strndup(flat + (size_t)i * w, w);
            *out = v;
            *n = (int)count;
        }
        free(flat);
        H5Tclose(t);
    }
    H5Tclose(ft);
    H5Sclose(space);
    H5Dclose(ds);
    return rc;
}
