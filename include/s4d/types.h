/*
 * s4d/types.h - status codes and element types shared by every s4d API.
 *
 * Element type values equal ONNX TensorProto.DataType so that tensors read
 * from a model need no translation table.
 */
#ifndef S4D_TYPES_H
#define S4D_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define S4D_API __declspec(dllexport)
#else
#define S4D_API __attribute__((visibility("default")))
#endif

/* Every fallible s4d function returns one of these. S4D_OK is zero. */
typedef enum s4d_status {
    S4D_OK = 0,
    S4D_ERR_INVALID_ARG = 1,  /* a NULL pointer, a negative size, a bad flag */
    S4D_ERR_SHAPE = 2,        /* sizes that disagree with each other */
    S4D_ERR_DTYPE = 3,        /* an element type the function does not take */
    S4D_ERR_NO_MEMORY = 4,    /* an allocation failed */
    S4D_ERR_UNSUPPORTED = 5,  /* valid input this build or device cannot run */
    S4D_ERR_CUDA = 6,         /* the CUDA runtime or a CUDA library failed */
    S4D_ERR_IO = 7,           /* a file could not be opened, read or written */
    S4D_ERR_PARSE = 8,        /* malformed bytes: ONNX, engine file, .npy */
    S4D_ERR_NOT_FOUND = 9,    /* a name (tensor, plugin, op) is not known */
    S4D_ERR_VERSION = 10,     /* a format or ABI version this build does not read */
    S4D_ERR_CHECKSUM = 11,    /* stored and computed checksums differ */
    S4D_ERR_PLUGIN = 12,      /* a plugin failed or broke its contract */
    S4D_ERR_NO_DEVICE = 13,   /* no usable GPU */
    S4D_ERR_INTERNAL = 14     /* a bug in s4d: please report it */
} s4d_status;

/* Element types (values of ONNX TensorProto.DataType). */
typedef enum s4d_dtype {
    S4D_DTYPE_UNDEFINED = 0,
    S4D_DTYPE_FLOAT32 = 1,
    S4D_DTYPE_UINT8 = 2,
    S4D_DTYPE_INT8 = 3,
    S4D_DTYPE_UINT16 = 4,
    S4D_DTYPE_INT16 = 5,
    S4D_DTYPE_INT32 = 6,
    S4D_DTYPE_INT64 = 7,
    S4D_DTYPE_STRING = 8,
    S4D_DTYPE_BOOL = 9,
    S4D_DTYPE_FLOAT16 = 10,
    S4D_DTYPE_FLOAT64 = 11,
    S4D_DTYPE_UINT32 = 12,
    S4D_DTYPE_UINT64 = 13,
    S4D_DTYPE_BFLOAT16 = 16
} s4d_dtype;

/*
 * A caller-owned buffer for a detailed error message, for functions that have
 * no handle to keep one on (the op library). May be passed as NULL.
 */
typedef struct s4d_errbuf {
    char msg[512];
} s4d_errbuf;

/* Static strings; never NULL. Unknown values give "unknown status"/"undefined". */
S4D_API const char *s4d_status_string(s4d_status status);
S4D_API const char *s4d_dtype_name(s4d_dtype dtype);
/* Bytes per element; 0 for UNDEFINED, STRING and unknown values. */
S4D_API size_t s4d_dtype_size(s4d_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif /* S4D_TYPES_H */
