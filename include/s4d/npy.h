/*
 * s4d/npy.h - NumPy .npy files in C: the tensor format s4dexec and the
 * examples read and write.
 *
 * Reads format versions 1.0, 2.0 and 3.0, little-endian (or byte-order-free)
 * numeric and bool arrays in C order. Every header field and size is checked;
 * a malformed or truncated file is S4D_ERR_PARSE with a message saying what
 * is wrong, an unsupported dtype/order S4D_ERR_UNSUPPORTED. Writes version 1.0.
 */
#ifndef S4D_NPY_H
#define S4D_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "s4d/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define S4D_NPY_MAX_RANK 8

/* An array read from .npy. data is owned by the struct: release with s4d_npy_free(). */
typedef struct s4d_npy {
    s4d_dtype dtype;
    int rank;
    int64_t dims[S4D_NPY_MAX_RANK];
    size_t bytes; /* numel * element size */
    void *data;   /* 64-byte aligned; NULL only when the call failed */
} s4d_npy;

/*
 * Parses .npy bytes (not retained) or reads a file (a regular file no larger
 * than 2 GiB or S4D_MAX_FILE_BYTES: docs/engine-api.md). On failure *out is
 * zeroed and err (may be NULL) names the problem. Statuses: S4D_OK,
 * S4D_ERR_INVALID_ARG, S4D_ERR_IO, S4D_ERR_PARSE, S4D_ERR_UNSUPPORTED,
 * S4D_ERR_NO_MEMORY.
 */
S4D_API s4d_status s4d_npy_parse(const void *data, size_t size, s4d_npy *out, s4d_errbuf *err);
S4D_API s4d_status s4d_npy_load(const char *path, s4d_npy *out, s4d_errbuf *err);

/*
 * Writes an array as .npy version 1.0. Statuses: S4D_OK, S4D_ERR_INVALID_ARG,
 * S4D_ERR_DTYPE (no .npy code for it), S4D_ERR_IO.
 */
S4D_API s4d_status s4d_npy_save(const char *path, s4d_dtype dtype, int rank, const int64_t *dims,
                                const void *data, s4d_errbuf *err);

/* Frees the data and zeroes the struct. NULL is a no-op. */
S4D_API void s4d_npy_free(s4d_npy *array);

#ifdef __cplusplus
}
#endif

#endif /* S4D_NPY_H */
