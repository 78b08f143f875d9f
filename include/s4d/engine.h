/*
 * s4d/engine.h - build an engine from ONNX, save and load engine files, run
 * them through execution contexts. The public C API of libs4d.
 *
 * Objects
 *   s4d_engine   an immutable built network: layers, weights, memory plan.
 *                Built from ONNX (s4d_engine_build_onnx_*) or loaded from an
 *                engine file (s4d_engine_load_*). Weights are shared by every
 *                context of the engine.
 *   s4d_context  per-thread run state: activation arena, workspace, bound
 *                tensors, output buffers, the device's stream and library
 *                handles, profile. Create one per thread.
 *
 * Devices
 *   An engine is built for one device (s4d_build_options.device): the CPU, or
 *   CUDA (the current CUDA device when it is built or loaded; the engine
 *   records the GPU architecture and library versions and refuses to load on
 *   another). Its weights live on that device, shared by its contexts. Graph
 *   inputs and outputs can be bound as host memory (the context copies them)
 *   or as device memory (used in place, no copy). With allow_fallback, nodes
 *   the device cannot run are placed on the CPU with explicit copy layers.
 *
 * Thread-safety
 *   An engine may be used from many threads at once for read-only calls
 *   (the s4d_engine_* queries, s4d_engine_serialize/save, s4d_context_create)
 *   once it is built or loaded. A context is used by one thread at a time.
 *   s4d_engine_errmsg is per-engine and is written only by calls that take
 *   the engine as non-const, which are not thread-safe.
 *
 * Errors
 *   Every fallible function returns an s4d_status (S4D_OK is 0). Functions
 *   that create a handle write the detailed message into a caller-supplied
 *   s4d_errbuf (may be NULL); functions on a handle keep it on the handle
 *   (s4d_engine_errmsg, s4d_context_errmsg) until the next failing call.
 *   Nothing in this API exits or aborts on bad input.
 *
 * Ownership
 *   Handles are owned by the caller and freed with their destroy function;
 *   destroy(NULL) is a no-op. A context must be destroyed before its engine.
 *   Strings and info structs returned by queries point into the engine or
 *   context and stay valid until it is destroyed.
 */
#ifndef S4D_ENGINE_H
#define S4D_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "s4d/plugin.h"
#include "s4d/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define S4D_MAX_DIMS 8

typedef struct s4d_engine s4d_engine;
typedef struct s4d_context s4d_context;
/*
 * s4d_device (CPU, CUDA) and s4d_plugin_registry come from s4d/plugin.h.
 * A registry pointer of NULL everywhere means the process default registry.
 */

/*
 * Option structs: call the matching *_init() first; it sets struct_size and
 * the defaults. Fields are only ever appended; a library newer than the
 * caller's header gives fields past the caller's struct_size their defaults.
 * A struct_size below sizeof(size_t) or above 4096 is S4D_ERR_INVALID_ARG.
 */

/* How an s4d_input_spec is meant (trtexec's --shapes gives both). */
typedef enum s4d_input_spec_kind {
    /* SHAPE when the model leaves any dimension of the input symbolic, else VALUES. */
    S4D_INPUT_SPEC_AUTO = 0,
    S4D_INPUT_SPEC_SHAPE = 1,  /* dims fix the input's shape */
    S4D_INPUT_SPEC_VALUES = 2  /* dims are the input's VALUES: it becomes a constant */
} s4d_input_spec_kind;

/*
 * A build-time fact about one graph input: its shape (fixing symbolic
 * dimensions such as a dynamic batch axis), or its values (for an input
 * that carries a shape: a Reshape shape, Slice starts, TopK K, Resize sizes).
 * An input given values is folded into the engine as a constant; it stays an
 * input, and binding other values at run time is S4D_ERR_SHAPE.
 */
typedef struct s4d_input_spec {
    const char *name;
    s4d_input_spec_kind kind;
    int rank;                      /* SHAPE: the rank; VALUES: the count of values */
    int64_t dims[S4D_MAX_DIMS];    /* SHAPE: the dims. VALUES (up to 8): the values */
    const double *values;          /* VALUES, optional: `rank` values when more than 8 or
                                      fractional (Resize scales); overrides dims */
} s4d_input_spec;

/* A precision asked for one layer (--layerPrecisions=name:fp32). */
typedef struct s4d_layer_precision {
    const char *layer;   /* the layer's name (the ONNX node name) */
    s4d_dtype dtype;     /* S4D_DTYPE_FLOAT32 or S4D_DTYPE_FLOAT16 */
} s4d_layer_precision;

/* The accuracy asked of one output by the fp16 accuracy guard (--accuracy=name:tol). */
typedef struct s4d_output_tolerance {
    const char *output;  /* a graph output's name */
    double rel_l2;       /* largest relative L2 error against the float32 network; INFINITY:
                            measured and reported, never acted on */
} s4d_output_tolerance;

/*
 * How the fp16 accuracy guard compares one output with the float32 network
 * (--accuracy=name:matched; docs/precision.md).
 */
typedef enum s4d_accuracy_metric {
    S4D_METRIC_AUTO = 0,    /* matched when the output's rows follow a TopK's selection (found
                               from the layer graph), else ordered */
    S4D_METRIC_ORDERED = 1, /* relative L2 element by element */
    S4D_METRIC_MATCHED = 2  /* relative L2 after pairing each reference row with a candidate
                               row (rows along the selection's axis, else the first axis
                               longer than 1), so that a changed row order is no error */
} s4d_accuracy_metric;

/* The metric asked for one output; an integer output given one is compared too. */
typedef struct s4d_output_metric {
    const char *output;         /* a graph output's name */
    s4d_accuracy_metric metric;
} s4d_output_metric;

/*
 * The memory layout of 2-D convolutions (--convLayout; docs/cuda-backend.md,
 * "Channels-last convolutions"). A network's tensors keep the layout of the
 * model; only the convolutions' own inputs and outputs change, with Transpose
 * layers at the borders (those that cancel are removed).
 */
typedef enum s4d_conv_layout {
    S4D_CONV_LAYOUT_AUTO = 0, /* NHWC on CUDA when TF32 or float16 is allowed (cuDNN's tensor-core
                                 kernels are channels-last), else NCHW */
    S4D_CONV_LAYOUT_NCHW = 1, /* as the model has it */
    S4D_CONV_LAYOUT_NHWC = 2  /* channels-last wherever the device's convolution takes it (any
                                 device; on the CPU for tests) */
} s4d_conv_layout;

/* Build options. */
typedef struct s4d_build_options {
    size_t struct_size;
    s4d_device device;      /* default CPU */
    int fp16;               /* allow float16 layers (CUDA); refused with S4D_ERR_UNSUPPORTED on the CPU */
    int fold_constants;     /* default 1 */
    s4d_plugin_registry *registry; /* plugin registry to resolve custom nodes; NULL: default */
    /* since 0.2 */
    const s4d_input_spec *input_specs; /* num_input_specs entries (borrowed during the call) */
    int num_input_specs;
    int allow_fallback;     /* nodes the device cannot run go to the CPU (copy layers); default 0:
                               such nodes are an error listing every one of them */
    int tf32;               /* CUDA float32 layers may use TF32 tensor cores (default 0: strict fp32) */
    /* since 0.3: precision control for fp16 builds (docs/precision.md) */
    const s4d_layer_precision *layer_precisions; /* num_layer_precisions entries (borrowed) */
    int num_layer_precisions;
    int obey_precisions;    /* non-zero (--precisionConstraints=obey): a layer pinned to a
                               precision its kernel cannot run fails the build; default: it
                               runs in float32 with a warning */
    const char *calib_dir;  /* the accuracy guard's calibration inputs (--calib=DIR); NULL: no
                               guard, every layer that can runs in float16 */
    double accuracy;        /* the guard's default tolerance, relative L2 per output; 0: 1e-2 */
    const s4d_output_tolerance *output_tolerances; /* per output overrides (borrowed) */
    int num_output_tolerances;
    const s4d_output_metric *output_metrics; /* per output metrics (borrowed); others: AUTO */
    int num_output_metrics;
    /* since 0.4 */
    s4d_conv_layout conv_layout; /* default AUTO */
} s4d_build_options;

/* Load options. */
typedef struct s4d_load_options {
    size_t struct_size;
    s4d_plugin_registry *registry; /* to deserialize plugin layers; NULL: default */
    /* since 0.2 */
    uint64_t max_context_bytes; /* refuse an engine whose contexts would need more bytes on one
                                   device (activations, workspace, the context's own input and
                                   output buffers); 0: 16 GiB, or the environment's
                                   S4D_MAX_CONTEXT_BYTES */
} s4d_load_options;

/* Context options. */
typedef struct s4d_context_options {
    size_t struct_size;
    int num_threads;   /* CPU threads for this context; <= 0: all cores */
    int profile;       /* non-zero: record per-layer times (s4d_context_layer_time) */
    /* since 0.2 */
    void *stream;      /* CUDA: the context's default stream (cudaStream_t, borrowed); NULL: its own */
    int use_graph;     /* CUDA: capture the layers once into a CUDA graph and replay it
                          (recaptured when a bound device pointer changes); ignored on the CPU */
    int graph_streams; /* CUDA graphs: streams the captured layers spread over, so that
                          independent branches run at once (1 .. 8; 1: one stream); 0: the
                          environment's S4D_GRAPH_STREAMS, else 4 */
} s4d_context_options;

/* Where the memory bound to an input or output lives. */
typedef enum s4d_memory {
    S4D_MEMORY_HOST = 0,   /* host memory: the context copies it to or from the device */
    S4D_MEMORY_DEVICE = 1  /* memory of the engine's device (cudaMalloc on CUDA), used in place */
} s4d_memory;

/* A tensor's name, element type and static shape. */
typedef struct s4d_tensor_info {
    const char *name;
    s4d_dtype dtype;
    int rank;
    int64_t dims[S4D_MAX_DIMS];
    size_t bytes;
} s4d_tensor_info;

/* What an engine was built for (s4d_engine_target). */
typedef struct s4d_engine_target_info {
    size_t struct_size;
    s4d_device device;
    const char *device_name;   /* e.g. "NVIDIA H200", "cpu" */
    const char *arch;          /* e.g. "sm_90"; "" on the CPU */
    const char *libraries;     /* library versions the kernels were chosen with */
    const char *library_version; /* the libs4d that built it */
} s4d_engine_target_info;

/* More about a layer than s4d_layer_info has room for (s4d_engine_layer_details). */
typedef struct s4d_layer_details {
    size_t struct_size;
    s4d_device device;          /* where the layer runs (the CPU for a fallback layer) */
    s4d_dtype precision;        /* the dtype it computes in */
    s4d_tensor_format format;   /* layout of its main input/output */
    size_t payload_bytes;       /* the backend's stored choice (algorithm) for it */
    int is_copy;                /* a copy layer the placement pass inserted */
    int is_view;                /* its output shares its input's buffer (a Reshape, Squeeze,
                                   ...): it runs no kernel and takes no time */
    const char *kernel_info;    /* what its kernel chose (algorithm, blocking) in one line, ""
                                   when it says nothing; valid while the engine lives */
    int in_place;               /* a Concat whose inputs were written where they lie in its
                                   output: it runs no kernel and takes no time */
} s4d_layer_details;

/* One layer, for --dumpLayerInfo. */
typedef struct s4d_layer_info {
    const char *name;
    const char *op;         /* op_type, or "namespace::name:version" for a plugin layer */
    const char *domain;     /* ONNX domain ("" for the default domain) */
    int is_plugin;
    s4d_device device;
    int num_inputs;
    int num_outputs;
    size_t workspace_bytes;
} s4d_layer_info;

S4D_API void s4d_build_options_init(s4d_build_options *opts);
S4D_API void s4d_load_options_init(s4d_load_options *opts);
S4D_API void s4d_context_options_init(s4d_context_options *opts);

/*
 * Builds an engine from an ONNX model (a file path, or bytes the call does
 * not retain). opts may be NULL for defaults.
 * Returns S4D_OK; S4D_ERR_INVALID_ARG (NULL path/out, bad struct_size);
 * S4D_ERR_IO; S4D_ERR_PARSE (not an ONNX model, malformed tensors);
 * S4D_ERR_UNSUPPORTED (ops with no implementation - the message lists every
 * unsupported (domain, op_type) with its nodes - dynamic shapes, fp16 on CPU);
 * S4D_ERR_NOT_FOUND (a custom node with no plugin creator: the message names
 * namespace, name and version and lists the registered creators);
 * S4D_ERR_PLUGIN (plugin field checks); S4D_ERR_SHAPE / S4D_ERR_DTYPE (a
 * node whose inputs its op rejects); S4D_ERR_NO_DEVICE; S4D_ERR_NO_MEMORY.
 */
S4D_API s4d_status s4d_engine_build_onnx_file(const char *path, const s4d_build_options *opts,
                                              s4d_engine **out, s4d_errbuf *err);
S4D_API s4d_status s4d_engine_build_onnx_memory(const void *data, size_t size,
                                                const s4d_build_options *opts, s4d_engine **out,
                                                s4d_errbuf *err);

/*
 * Loads an engine file (path, or bytes the call does not retain). Every
 * read is bounds-checked. Returns S4D_OK; S4D_ERR_INVALID_ARG; S4D_ERR_IO;
 * S4D_ERR_PARSE (not an engine file, truncated, malformed records);
 * S4D_ERR_VERSION (another format version: the message gives both);
 * S4D_ERR_CHECKSUM (stored vs computed, both printed); S4D_ERR_NOT_FOUND
 * (an op or plugin creator this process does not have); S4D_ERR_PLUGIN;
 * S4D_ERR_NO_MEMORY.
 */
S4D_API s4d_status s4d_engine_load_file(const char *path, const s4d_load_options *opts,
                                        s4d_engine **out, s4d_errbuf *err);
S4D_API s4d_status s4d_engine_load_memory(const void *data, size_t size,
                                          const s4d_load_options *opts, s4d_engine **out,
                                          s4d_errbuf *err);

/*
 * Serializes the engine. *data is malloc'd; release it with s4d_free().
 * Returns S4D_OK, S4D_ERR_INVALID_ARG, S4D_ERR_PLUGIN, S4D_ERR_NO_MEMORY.
 */
S4D_API s4d_status s4d_engine_serialize(s4d_engine *engine, void **data, size_t *size);
/* Writes the serialized engine to path. Adds S4D_ERR_IO to the statuses above. */
S4D_API s4d_status s4d_engine_save(s4d_engine *engine, const char *path);
S4D_API void s4d_engine_destroy(s4d_engine *engine);
/* The last error message on this engine ("" when none). Never NULL. */
S4D_API const char *s4d_engine_errmsg(const s4d_engine *engine);
S4D_API void s4d_free(void *p);

/* Graph inputs and outputs in model order. Index out of range: S4D_ERR_INVALID_ARG. */
S4D_API int s4d_engine_num_inputs(const s4d_engine *engine);
S4D_API int s4d_engine_num_outputs(const s4d_engine *engine);
S4D_API s4d_status s4d_engine_input_info(const s4d_engine *engine, int index, s4d_tensor_info *info);
S4D_API s4d_status s4d_engine_output_info(const s4d_engine *engine, int index, s4d_tensor_info *info);
S4D_API int s4d_engine_num_layers(const s4d_engine *engine);
S4D_API s4d_status s4d_engine_layer_info(const s4d_engine *engine, int index, s4d_layer_info *info);
/* Shapes of a layer's input/output tensors, for --dumpLayerInfo. */
S4D_API s4d_status s4d_engine_layer_tensor(const s4d_engine *engine, int layer, int is_output,
                                           int index, s4d_tensor_info *info);
/* Bytes of the shared activation arena (after liveness reuse) and without reuse. */
S4D_API size_t s4d_engine_activation_bytes(const s4d_engine *engine);
S4D_API size_t s4d_engine_activation_bytes_unplanned(const s4d_engine *engine);
S4D_API size_t s4d_engine_weight_bytes(const s4d_engine *engine);
S4D_API s4d_device s4d_engine_device(const s4d_engine *engine);
/* What the engine was built for; set info->struct_size = sizeof *info first. */
S4D_API s4d_status s4d_engine_target(const s4d_engine *engine, s4d_engine_target_info *info);
S4D_API s4d_status s4d_engine_layer_details(const s4d_engine *engine, int index,
                                            s4d_layer_details *details);
/*
 * The precision choice of an fp16 build, as text: the guard's tolerance, each
 * output's measured relative L2 error before and after, and the layers it
 * moved to float32 (stored in the engine). NULL for a float32 engine.
 */
S4D_API const char *s4d_engine_precision_report(const s4d_engine *engine);

/*
 * Creates an execution context (opts may be NULL). The engine must outlive
 * it. Returns S4D_OK, S4D_ERR_INVALID_ARG, S4D_ERR_NO_MEMORY (message in
 * the engine's errmsg is NOT touched; see err).
 */
S4D_API s4d_status s4d_context_create(const s4d_engine *engine, const s4d_context_options *opts,
                                      s4d_context **out, s4d_errbuf *err);
S4D_API void s4d_context_destroy(s4d_context *ctx);
S4D_API const char *s4d_context_errmsg(const s4d_context *ctx);

/*
 * Binds caller memory to a graph input or output by name. dtype, rank and
 * dims must equal the engine's exactly (checked: S4D_ERR_DTYPE, S4D_ERR_SHAPE
 * with expected vs got); S4D_ERR_NOT_FOUND for an unknown name. The memory
 * must stay valid and unchanged (inputs) until s4d_context_run returns; an
 * input is read only, an output is fully overwritten. Binding NULL data
 * unbinds: the output goes back to the context's own buffer.
 */
S4D_API s4d_status s4d_context_bind(s4d_context *ctx, const char *name, s4d_dtype dtype, int rank,
                                    const int64_t *dims, void *data);

/*
 * Binds caller memory of the given kind (s4d_context_bind is this with
 * S4D_MEMORY_HOST). Device memory must belong to the engine's device
 * (checked: S4D_ERR_INVALID_ARG naming the tensor when a host pointer is
 * bound as device memory, or the other way round); on a CPU engine both
 * kinds are host memory.
 */
S4D_API s4d_status s4d_context_bind_memory(s4d_context *ctx, const char *name, s4d_dtype dtype,
                                           int rank, const int64_t *dims, void *data,
                                           s4d_memory memory);

/*
 * The context's own device buffer for a graph input or output (*data; its size
 * is the tensor's bytes), owned by the context until it is destroyed. Binding
 * it with S4D_MEMORY_DEVICE makes runs copy nothing for that tensor: a
 * host-bound run leaves an input's values there, and outputs stay there for a
 * following engine to read (chain engines without a round trip through the
 * host). On a CPU engine this is the context's host buffer of an output, or
 * S4D_ERR_NOT_FOUND for an input. S4D_ERR_NOT_FOUND for an unknown name.
 */
S4D_API s4d_status s4d_context_device_buffer(s4d_context *ctx, const char *name, void **data);

/*
 * Makes the layers that read input `name` wait for `event` (a cudaEvent_t on a
 * CUDA engine; NULL clears it), while the layers that do not depend on it
 * start at once: a head engine whose "features" come from a backbone engine on
 * another stream runs its feature-independent layers during the backbone.
 * Record the event after the work that writes the input and before each
 * enqueue; every following enqueue (and every replay of the context's CUDA
 * graph) waits for its latest record. Only the layers wait: the enqueue's
 * stream is not ordered after the event otherwise (a host-bound input's copy
 * waits too). S4D_ERR_NOT_FOUND for a name that is no input;
 * S4D_ERR_UNSUPPORTED on a CPU engine, whose runs are done on return.
 */
S4D_API s4d_status s4d_context_set_input_event(s4d_context *ctx, const char *name, void *event);

/*
 * Enqueues one run of the network on stream (a cudaStream_t, cudaStreamLegacy
 * and cudaStreamPerThread included; NULL: the context's own stream, not the
 * legacy default stream) and returns without waiting, like TensorRT's
 * enqueueV3: host-bound inputs are read and host-bound outputs written by
 * copies on that stream, so they must stay valid until the stream has run
 * them (s4d_context_synchronize). On the CPU the work is done on return.
 * Returns S4D_OK; S4D_ERR_INVALID_ARG; S4D_ERR_NOT_FOUND when an input is
 * not bound (the message names it); S4D_ERR_SHAPE when an input fixed at
 * build (s4d_input_spec values) is bound with other values; a layer's
 * failure status (the message names the layer); S4D_ERR_CUDA.
 */
S4D_API s4d_status s4d_context_enqueue(s4d_context *ctx, void *stream);

/* Waits until everything the last enqueue queued is done. S4D_OK or S4D_ERR_CUDA. */
S4D_API s4d_status s4d_context_synchronize(s4d_context *ctx);

/*
 * Runs the network and waits for it: enqueue on stream (NULL: the
 * context's), then synchronize. Same statuses as s4d_context_enqueue.
 */
S4D_API s4d_status s4d_context_run(s4d_context *ctx, void *stream);

/*
 * An output's data after a run: the bound buffer (host or device, as bound)
 * or the context's own host copy (valid until the next run or destroy).
 * info may be NULL.
 */
S4D_API s4d_status s4d_context_output(s4d_context *ctx, const char *name, const void **data,
                                      s4d_tensor_info *info);

/*
 * Loads a plugin library (a shared object exporting the plugin entry point)
 * into registry (NULL: the default), for builds and loads that follow.
 * Returns S4D_OK, S4D_ERR_IO (dlopen failed), S4D_ERR_VERSION (ABI),
 * S4D_ERR_PLUGIN, S4D_ERR_UNSUPPORTED.
 */
S4D_API s4d_status s4d_plugins_load(s4d_plugin_registry *registry, const char *path,
                                    s4d_errbuf *err);

/* Milliseconds layer `index` took in the last run (profile must be on; device
   time from events on CUDA; 0 for layers inside a replayed graph). */
S4D_API s4d_status s4d_context_layer_time(const s4d_context *ctx, int index, double *ms);

#ifdef __cplusplus
}
#endif

#endif /* S4D_ENGINE_H */
