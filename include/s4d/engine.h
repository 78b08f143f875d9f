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
 *                tensors, output buffers, profile. Create one per thread.
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

/* Build options. */
typedef struct s4d_build_options {
    size_t struct_size;
    s4d_device device;      /* default CPU; CUDA returns S4D_ERR_NO_DEVICE/UNSUPPORTED until the CUDA backend exists */
    int fp16;               /* allow float16 layers; refused with S4D_ERR_UNSUPPORTED on the CPU */
    int fold_constants;     /* default 1 */
    s4d_plugin_registry *registry; /* plugin registry to resolve custom nodes; NULL: default */
} s4d_build_options;

/* Load options. */
typedef struct s4d_load_options {
    size_t struct_size;
    s4d_plugin_registry *registry; /* to deserialize plugin layers; NULL: default */
} s4d_load_options;

/* Context options. */
typedef struct s4d_context_options {
    size_t struct_size;
    int num_threads;   /* CPU threads for this context; <= 0: all cores */
    int profile;       /* non-zero: record per-layer times (s4d_context_layer_time) */
} s4d_context_options;

/* A tensor's name, element type and static shape. */
typedef struct s4d_tensor_info {
    const char *name;
    s4d_dtype dtype;
    int rank;
    int64_t dims[S4D_MAX_DIMS];
    size_t bytes;
} s4d_tensor_info;

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
 * Runs the network. stream is a cudaStream_t for a CUDA engine, ignored
 * (may be NULL) on the CPU, where the call returns when outputs are ready.
 * Returns S4D_OK; S4D_ERR_INVALID_ARG; S4D_ERR_NOT_FOUND when an input is
 * not bound (the message names it); a layer's failure status (the message
 * names the layer).
 */
S4D_API s4d_status s4d_context_run(s4d_context *ctx, void *stream);

/*
 * An output's data after a run: the bound buffer or the context's own
 * (valid until the next run or destroy). info may be NULL.
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

/* Milliseconds layer `index` took in the last run (profile must be on). */
S4D_API s4d_status s4d_context_layer_time(const s4d_context *ctx, int index, double *ms);

#ifdef __cplusplus
}
#endif

#endif /* S4D_ENGINE_H */
