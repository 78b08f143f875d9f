/* Names and sizes for the enums of s4d/types.h. */
#include "s4d/types.h"

const char *s4d_status_string(s4d_status status)
{
    switch (status) {
    case S4D_OK: return "ok";
    case S4D_ERR_INVALID_ARG: return "invalid argument";
    case S4D_ERR_SHAPE: return "shape mismatch";
    case S4D_ERR_DTYPE: return "unsupported dtype";
    case S4D_ERR_NO_MEMORY: return "out of memory";
    case S4D_ERR_UNSUPPORTED: return "unsupported";
    case S4D_ERR_CUDA: return "CUDA error";
    case S4D_ERR_IO: return "I/O error";
    case S4D_ERR_PARSE: return "parse error";
    case S4D_ERR_NOT_FOUND: return "not found";
    case S4D_ERR_VERSION: return "version mismatch";
    case S4D_ERR_CHECKSUM: return "checksum mismatch";
    case S4D_ERR_PLUGIN: return "plugin error";
    case S4D_ERR_NO_DEVICE: return "no CUDA device";
    case S4D_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *s4d_dtype_name(s4d_dtype dtype)
{
    switch (dtype) {
    case S4D_DTYPE_FLOAT32: return "float32";
    case S4D_DTYPE_UINT8: return "uint8";
    case S4D_DTYPE_INT8: return "int8";
    case S4D_DTYPE_UINT16: return "uint16";
    case S4D_DTYPE_INT16: return "int16";
    case S4D_DTYPE_INT32: return "int32";
    case S4D_DTYPE_INT64: return "int64";
    case S4D_DTYPE_STRING: return "string";
    case S4D_DTYPE_BOOL: return "bool";
    case S4D_DTYPE_FLOAT16: return "float16";
    case S4D_DTYPE_FLOAT64: return "float64";
    case S4D_DTYPE_UINT32: return "uint32";
    case S4D_DTYPE_UINT64: return "uint64";
    case S4D_DTYPE_BFLOAT16: return "bfloat16";
    case S4D_DTYPE_UNDEFINED: break;
    }
    return "undefined";
}

size_t s4d_dtype_size(s4d_dtype dtype)
{
    switch (dtype) {
    case S4D_DTYPE_BOOL:
    case S4D_DTYPE_UINT8:
    case S4D_DTYPE_INT8: return 1;
    case S4D_DTYPE_UINT16:
    case S4D_DTYPE_INT16:
    case S4D_DTYPE_FLOAT16:
    case S4D_DTYPE_BFLOAT16: return 2;
    case S4D_DTYPE_FLOAT32:
    case S4D_DTYPE_INT32:
    case S4D_DTYPE_UINT32: return 4;
    case S4D_DTYPE_INT64:
    case S4D_DTYPE_FLOAT64:
    case S4D_DTYPE_UINT64: return 8;
    case S4D_DTYPE_STRING:
    case S4D_DTYPE_UNDEFINED: break;
    }
    return 0;
}
