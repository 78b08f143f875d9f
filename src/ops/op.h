/*
 * src/ops/op.h - the contract between the engine and its op kernels
 * (internal; not installed).
 *
 * Shapes are static: every tensor's dtype and dims are known when the engine
 * is built. An op therefore has two phases, as in TensorRT:
 *   infer  (build time) validates attributes and input dtypes/shapes and sets
 *          each output's dtype and dims. Inputs that are constants (initializers
 *          or folded values) carry their data; others have data == NULL. An op
 *          whose output shape would depend on non-constant data must fail
 *          with S4D_ERR_UNSUPPORTED and say so.
 *   run    (run time) computes outputs into preallocated buffers. It allocates
 *          nothing on the heap except through ctx->workspace.
 * The builder also uses run() on constant inputs for constant folding.
 */
#ifndef S4D_CORE_OP_H
#define S4D_CORE_OP_H

#include "s4d/types.h"
#include "util/threadpool.h"

#define S4D_MAX_RANK 8

typedef struct s4d_tensor {
    s4d_dtype dtype;
    int rank;
    int64_t dims[S4D_MAX_RANK];
    void *data; /* NULL at infer time unless constant */
} s4d_tensor;

/* ONNX AttributeProto.AttributeType values. */
typedef enum s4d_attr_type {
    S4D_ATTR_UNDEFINED = 0,
    S4D_ATTR_FLOAT = 1,
    S4D_ATTR_INT = 2,
    S4D_ATTR_STRING = 3,
    S4D_ATTR_TENSOR = 4,
    S4D_ATTR_FLOATS = 6,
    S4D_ATTR_INTS = 7,
    S4D_ATTR_STRINGS = 8
} s4d_attr_type;

typedef struct s4d_attr {
    char *name;
    s4d_attr_type type;
    float f;
    int64_t i;
    char *s;         /* STRING: NUL-terminated copy */
    size_t s_len;    /* STRING: byte length without the NUL */
    float *floats;   /* FLOATS */
    int64_t *ints;   /* INTS */
    char **strings;  /* STRINGS */
    size_t count;    /* element count of FLOATS / INTS / STRINGS */
    s4d_tensor *t;   /* TENSOR, data owned by the attribute */
} s4d_attr;

struct s4d_threadpool;

/*
 * One attribute an op accepts: its name, its type, S4D_ATTR_* checks and the
 * opsets in which the op reads it. A schema lists them in an array ended by
 * {NULL}; a node or layer with an attribute not in the list, of another type,
 * or at an opset where the op would ignore it (axes once it became an input)
 * is refused before infer runs (s4d_op_infer), so that a misspelt, renamed or
 * outdated attribute never turns silently into its default. Attributes the op
 * reads at every opset are accepted at every opset, even where ONNX added
 * them later. A FLOAT attribute may come as an INT (exporters write alpha=1).
 */
typedef struct s4d_attr_spec {
    const char *name;
    s4d_attr_type type;
    unsigned checks; /* S4D_ATTR_BOOL: an INT that must be 0 or 1 */
    int since;       /* first opset where the op reads it; 0: the schema's */
    int until;       /* last opset where it does; 0: every later one */
} s4d_attr_spec;

#define S4D_ATTR_BOOL 1u

typedef struct s4d_op_ctx {
    /* The node being built or run. */
    const char *node_name;
    const char *op_type;
    int opset;                  /* the model's opset for the node's domain */
    int num_attrs;
    const s4d_attr *attrs;
    /* Tensors. A missing optional input has dtype UNDEFINED and rank -1. */
    int num_inputs;
    const s4d_tensor *inputs;
    int num_outputs;
    s4d_tensor *outputs;
    /* Typed parameters (schema params_size bytes): written by infer, read by
       everything after it. NULL when the schema has none. */
    void *params;
    const struct s4d_op_schema *schema;
    /* Run time only. */
    struct s4d_threadpool *pool; /* may be NULL: run single-threaded */
    void *workspace;             /* workspace_size bytes, 64-byte aligned */
    size_t workspace_size;
    void *state;                 /* what the kernel's prepare() made, or NULL */
    void *stream;                /* the backend's stream (cudaStream_t) or NULL */
    void *backend_ctx;           /* the backend's per-context state */
    void *plugin;                /* plugin layers: the instance */
    void *plugin_ctx;            /* plugin layers: what attach() gave this context */
    /* Error message for the caller; set with s4d_op_error(). */
    char *err;
    size_t err_size;
} s4d_op_ctx;

typedef struct s4d_op_schema {
    const char *domain;   /* "" for the default ONNX domain */
    const char *op_type;
    int since_version;    /* lowest opset this definition serves */
    /* Check inputs and attributes, set outputs' dtype/rank/dims, fill params. Required. */
    s4d_status (*infer)(s4d_op_ctx *ctx);
    /* Optional: bytes of scratch the host reference needs (shapes are final). */
    size_t (*workspace_size)(const s4d_op_ctx *ctx);
    /* The host reference (see above). NULL: the op is never folded and only
       backends with a kernel of their own run it. */
    s4d_status (*run)(s4d_op_ctx *ctx);
    /* Bytes of the typed parameters infer writes (0: none). */
    size_t params_size;
    /* S4D_OP_* flags. */
    unsigned flags;
    /* The attributes the op accepts, ended by {NULL}; NULL: none at all. Ranges
       that depend on the inputs (axes against the rank) are infer's to check. */
    const s4d_attr_spec *attrs;
} s4d_op_schema;

/* The outputs depend only on the inputs' shapes and dtypes (Shape, Size): with
   static shapes the node always folds, whatever its inputs. */
#define S4D_OP_SHAPE_ONLY 1u

/* Formats "node 'name' (OpType): <message>" into ctx->err; returns status. */
s4d_status s4d_op_error(s4d_op_ctx *ctx, s4d_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/*
 * The one way to infer a node or layer: refuses a node without outputs, an
 * input whose shape passes S4D_MAX_TENSOR_BYTES, and attributes the schema
 * does not list (unknown, of another type, twice, from another opset, a flag
 * other than 0/1) with a message naming the node and the attribute; then
 * calls ctx->schema->infer and bounds the outputs it set the same way. Used
 * by the builder, the fusions and the loader.
 */
s4d_status s4d_op_infer(s4d_op_ctx *ctx);

/* Only the attribute checks of s4d_op_infer. */
s4d_status s4d_op_check_attrs(s4d_op_ctx *ctx);

/* Attribute lookup; NULL when absent. */
const s4d_attr *s4d_op_attr(const s4d_op_ctx *ctx, const char *name);
int64_t s4d_op_attr_int(const s4d_op_ctx *ctx, const char *name, int64_t dflt);
float s4d_op_attr_float(const s4d_op_ctx *ctx, const char *name, float dflt);
const char *s4d_op_attr_string(const s4d_op_ctx *ctx, const char *name, const char *dflt);

/* Element count of a tensor (1 for rank 0). */
int64_t s4d_tensor_numel(const s4d_tensor *t);
/* Whether a and b have the same rank and dims. */
int s4d_tensor_same_dims(const s4d_tensor *a, const s4d_tensor *b);

/*
 * The largest tensor an op ever sees: its bytes, counting every dim of 0 as 1,
 * are at most 2^50 (1 PiB), so that the product of any dims of one tensor, and
 * a sum of a few of them, fits in int64 (a [0, 2^62] tensor holds no element
 * but is refused). s4d_op_infer checks every input and output against it, the
 * engine reader every stored shape.
 */
#define S4D_MAX_TENSOR_BYTES ((uint64_t)1 << 50)
int s4d_shape_fits(int rank, const int64_t *dims, s4d_dtype dtype);

/* Checked int64 arithmetic for shape code: 0 and *r set, or -1 on overflow. */
static inline int s4d_add_i64(int64_t a, int64_t b, int64_t *r)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return -1;
    *r = a + b;
    return 0;
}

static inline int s4d_mul_i64(int64_t a, int64_t b, int64_t *r)
{
    if (a != 0 && b != 0) {
        if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
                  : (b > 0 ? a < INT64_MIN / b : b < INT64_MAX / a))
            return -1;
    }
    *r = a * b;
    return 0;
}


/*
 * Schema lookup by (domain, op_type, model opset): the schema with the highest
 * since_version <= opset; "" and "ai.onnx" are the same domain. NULL when
 * none. The one op-resolution path of the engine (src/ops/schema.c).
 */
const s4d_op_schema *s4d_op_find_schema(const char *domain, const char *op_type, int opset);

#endif /* S4D_OPS_OP_H */
