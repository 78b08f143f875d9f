/*
 * src/backend/backend.h - the backend interface: what the builder and the
 * runtime need from a device (internal; not installed).
 *
 * A backend is a versioned table of functions for one s4d_device: memory
 * (allocation, copies, memset), per-context state (stream, library handles,
 * thread pool), synchronisation, events for profiling, optional graph
 * capture, and a kernel table. Nothing above this header touches device
 * memory directly: the runtime moves bytes only through copy()/memset(), and
 * only kernels read or write tensors. The CPU backend is the host; a backend
 * with host_memory == 0 (CUDA, the guarded test backend) gets every graph
 * input and output through explicit copies unless the caller binds device
 * memory.
 *
 * Kernels resolve against an op schema (src/ops/op.h): the schema infers
 * shapes and parses attributes into typed params once; a kernel says which
 * dtypes it runs (supports), how much scratch it needs, prepares per-layer
 * state once per engine (descriptors, algorithm choice, repacked weights),
 * and runs with device pointers on the context's stream. run() allocates
 * nothing and synchronises nothing, so a whole network can be captured into a
 * graph.
 */
#ifndef S4D_BACKEND_BACKEND_H
#define S4D_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ops/op.h"
#include "s4d/plugin.h"
#include "util/util.h"

/* Version of this table layout; a backend of another version is not used. */
#define S4D_BACKEND_VERSION 2u

/*
 * A kernel: one op on one backend. Every callback gets an s4d_op_ctx whose
 * params were filled by the schema's infer. Build-time callbacks
 * (supports, workspace_size) see tensors without data.
 */
typedef struct s4d_kernel {
    const char *domain;  /* "" for the default ONNX domain, "s4d" for fused ops */
    const char *op_type;
    int since_version;   /* as the schema's: the highest <= the model's opset wins */
    /* S4D_OK when this node's dtypes and attributes are ones the kernel runs;
       else S4D_ERR_UNSUPPORTED (or _DTYPE) with the reason in ctx->err. NULL: all. */
    s4d_status (*supports)(s4d_op_ctx *ctx);
    /* Scratch bytes run() needs on the device. NULL: none. */
    size_t (*workspace_size)(const s4d_op_ctx *ctx);
    /*
     * Once per layer per engine, at build and at load (NULL: no state).
     * payload/size: what save() wrote when the engine was built (the chosen
     * algorithm), or NULL/0 at build time, when the kernel chooses. Constant
     * inputs carry device data; ctx->backend_ctx is a context the engine
     * keeps for preparation. *state is freed by destroy().
     */
    s4d_status (*prepare)(s4d_op_ctx *ctx, const void *payload, size_t size, void **state);
    /* Appends the state's payload (bytes the engine file keeps for this layer). */
    s4d_status (*save)(const void *state, s4d_wbuf *w);
    void (*destroy)(void *state);
    /* Run time: compute the outputs. Allocates nothing, synchronises nothing. */
    s4d_status (*run)(s4d_op_ctx *ctx);
    /* What prepare() chose (algorithm, blocking), in one line for --dumpLayerInfo, with
       snprintf's rules; NULL or 0: nothing to say. */
    int (*describe)(const void *state, char *buf, size_t size);
} s4d_kernel;

/* Direction of a copy, from the host's point of view. */
typedef enum s4d_copy_kind {
    S4D_COPY_HOST_TO_DEVICE = 0,
    S4D_COPY_DEVICE_TO_HOST = 1,
    S4D_COPY_DEVICE_TO_DEVICE = 2
} s4d_copy_kind;

/* What a backend reports about its device, for the engine header. */
typedef struct s4d_target_info {
    char name[64];         /* device name, e.g. "NVIDIA H200" or "cpu" */
    char arch[32];         /* what code is built for, e.g. "sm_90"; "" for the CPU */
    char libraries[128];   /* library versions kernels depend on, e.g. "cudnn 91002, cublas 130100" */
} s4d_target_info;

typedef struct s4d_backend_ctx s4d_backend_ctx; /* the backend's own per-context state */

/* Options a context hands its backend. */
typedef struct s4d_backend_ctx_options {
    int num_threads;   /* CPU threads; <= 0: all cores */
    void *stream;      /* a caller's stream to adopt, or NULL for one of the context's own */
    int allow_tf32;    /* CUDA: tensor-core float32 (TF32) in convolutions and GEMMs */
} s4d_backend_ctx_options;

typedef struct s4d_backend {
    uint32_t version;      /* S4D_BACKEND_VERSION */
    s4d_device device;
    const char *name;      /* "cpu", "cuda", "guarded" */
    int host_memory;       /* buffers are plain host memory the runtime may read */
    s4d_device plugin_device; /* the device plugins are told they run on */

    /* Is the device usable here (driver, a GPU)? S4D_ERR_NO_DEVICE with the reason. */
    s4d_status (*probe)(char *err, size_t errsz);
    s4d_status (*target_info)(s4d_target_info *info);

    /* Kernels: highest since_version <= opset; NULL when the backend has none. */
    const s4d_kernel *(*find_kernel)(const char *domain, const char *op_type, int opset);
    /* The kernel that runs plugin layers through the plugin bridge. */
    const s4d_kernel *plugin_kernel;

    /* Memory: zero-filled, 256-byte aligned; S4D_ERR_NO_MEMORY with the size. */
    s4d_status (*alloc)(size_t bytes, void **out, char *err, size_t errsz);
    void (*free)(void *p);
    /* Whether p .. p+bytes is memory of this device (for bound device pointers). */
    s4d_status (*check_pointer)(const void *p, size_t bytes, char *err, size_t errsz);

    /* Per-context state: stream, library handles, thread pool. */
    s4d_status (*context_create)(const s4d_backend_ctx_options *o, s4d_backend_ctx **out,
                                 char *err, size_t errsz);
    void (*context_destroy)(s4d_backend_ctx *c);
    void *(*context_stream)(s4d_backend_ctx *c);      /* the context's stream (NULL on the CPU) */
    struct s4d_threadpool *(*context_pool)(s4d_backend_ctx *c); /* NULL: none */

    /* Asynchronous on stream (NULL: the context's). */
    s4d_status (*copy)(s4d_backend_ctx *c, void *dst, const void *src, size_t bytes,
                       s4d_copy_kind kind, void *stream, char *err, size_t errsz);
    s4d_status (*memset)(s4d_backend_ctx *c, void *dst, int value, size_t bytes, void *stream,
                         char *err, size_t errsz);
    s4d_status (*synchronize)(s4d_backend_ctx *c, void *stream, char *err, size_t errsz);

    /* Profiling events; on the CPU they read the host clock. */
    s4d_status (*event_create)(void **event);
    void (*event_destroy)(void *event);
    s4d_status (*event_record)(void *event, void *stream);
    /* Milliseconds from a to b (both recorded, b completed). */
    s4d_status (*event_elapsed)(void *a, void *b, double *ms);

    /* Graph capture of everything enqueued on stream between begin and end;
       all NULL when the backend has none. */
    s4d_status (*graph_begin)(void *stream, char *err, size_t errsz);
    s4d_status (*graph_end)(void *stream, void **graph, char *err, size_t errsz);
    s4d_status (*graph_launch)(void *graph, void *stream, char *err, size_t errsz);
    void (*graph_destroy)(void *graph);

    /* More streams for a context, and events that order them: a graph's independent
       branches are captured on several streams (runtime/schedule.h). All NULL when the
       backend has none; graphs then use the context's stream alone. */
    s4d_status (*stream_create)(s4d_backend_ctx *c, void **stream, char *err, size_t errsz);
    void (*stream_destroy)(void *stream);
    s4d_status (*order_event_create)(void **event); /* an event for ordering only (no timing) */
    s4d_status (*stream_wait)(void *stream, void *event);
    /* 0 when work on stream cannot be captured into a graph (CUDA's legacy default stream):
       the graph is then captured on a stream from stream_create and launched on stream.
       NULL: every stream can be. */
    int (*stream_capturable)(void *stream);
    /* Makes stream wait for a caller's event (a cudaEvent_t on CUDA), also while stream is
       being captured (each launch of the graph then waits for the event as recorded before it).
       NULL: the backend takes no caller events (s4d_context_set_input_event refuses). */
    s4d_status (*stream_wait_external)(void *stream, void *event, char *err, size_t errsz);
} s4d_backend;

/*
 * The backend registry (registry.c). The CPU backend is always there; CUDA
 * when libs4d was built with it. S4D_TEST_BACKEND=guarded in the environment
 * puts the guarded test backend (backend_guarded.c: host memory behind
 * PROT_NONE pages) in the CUDA slot, so that the whole device path runs and
 * is checked on a machine without a GPU. NULL when the build has no backend
 * for the device.
 */
const s4d_backend *s4d_backend_get(s4d_device device);

/* Device names for messages: "cpu", "cuda". */
const char *s4d_device_name(s4d_device device);

/* The backends this build can provide (registry.c hands them out). */
const s4d_backend *s4d_backend_cpu(void);
const s4d_backend *s4d_backend_guarded(void);
#if defined(S4D_HAVE_CUDA_BACKEND)
const s4d_backend *s4d_backend_cuda(void);
#endif

#endif /* S4D_BACKEND_BACKEND_H */
