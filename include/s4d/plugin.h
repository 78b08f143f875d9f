/*
 * s4d/plugin.h - the plugin ABI: how code outside libs4d adds an op to the
 * engine, and how an application registers plugins.
 *
 * The ABI is plain C. A plugin library never links libs4d: it exports one
 * function, s4d_plugin_library_init(), and receives the host's API as a table
 * of function pointers (s4d_host_api). Everything that crosses the boundary is
 * a struct defined here.
 *
 * Versioning rules (docs/plugins.md has the long form):
 *   - Every struct starts with `uint32_t abi_version; uint32_t struct_size;`.
 *     The producer of a struct sets them to S4D_PLUGIN_ABI_VERSION and
 *     sizeof(the struct) as it was compiled.
 *   - Fields are only ever appended. A reader that finds struct_size smaller
 *     than a field's end treats that field as absent (NULL / zero); a reader
 *     never touches bytes past struct_size.
 *   - The ABI version counts those additions: ABI 2 appended negotiation,
 *     configure, attach/detach and tensor formats to ABI 1. The host speaks
 *     every version from S4D_PLUGIN_ABI_MIN_VERSION up to its own and hands an
 *     older plugin the structs of its own version; anything else is refused
 *     with S4D_ERR_VERSION and a message giving both versions.
 *
 * Identity: a creator is found by the key (namespace, name, version), all
 * three compared as exact, case-sensitive strings. An ONNX node maps to a key
 * as: name = op_type; version = attribute `plugin_version` (default "1");
 * namespace = attribute `plugin_namespace`, else the node's domain. The
 * node's other attributes become the plugin's fields and are checked against
 * the fields the creator declares.
 *
 * Lifecycle, as in TensorRT's IPluginV3:
 *   build   create (from fields) or deserialize (from an engine payload);
 *           get_output_descs; supports_format, asked position by position to
 *           choose each tensor's dtype and format (else supports, once);
 *           workspace_size; serialize.
 *   configure  once the engine's shapes, formats and device are final (at
 *           build and at load): one-time work such as uploading tables.
 *   attach  once per execution context: per-context handles and scratch;
 *           detach when the context goes.
 *   enqueue at run time. It allocates nothing, synchronises nothing (no
 *           cudaStreamSynchronize, no cudaMalloc, no host reads of device
 *           memory), launches only on run->stream, and so is safe under CUDA
 *           graph capture. Several contexts of one engine may call it at once on
 *           one instance: per-context state lives in what attach() returned.
 *   destroy when the engine goes.
 */
#ifndef S4D_PLUGIN_H
#define S4D_PLUGIN_H

#include "s4d/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes, and the oldest one the host still loads. */
#define S4D_PLUGIN_ABI_VERSION 2u
#define S4D_PLUGIN_ABI_MIN_VERSION 1u

/* Highest tensor rank a plugin descriptor carries. */
#define S4D_PLUGIN_MAX_RANK 8

/* Where a tensor's bytes live. */
typedef enum s4d_device {
    S4D_DEVICE_CPU = 0,  /* host memory */
    S4D_DEVICE_CUDA = 1  /* device memory of the current CUDA device */
} s4d_device;

/* How a tensor's elements are laid out in memory. */
typedef enum s4d_tensor_format {
    S4D_FORMAT_LINEAR = 0,  /* dense row-major, last dimension innermost */
    S4D_FORMAT_NHWC = 1     /* rank 4 [N, C, H, W] stored channels-last */
} s4d_tensor_format;

/* Dtype, device, shape and layout of one tensor (no data). */
typedef struct s4d_plugin_tensor_desc {
    uint32_t abi_version;
    uint32_t struct_size;
    s4d_dtype dtype;
    s4d_device device;
    int32_t rank;                         /* 0 .. S4D_PLUGIN_MAX_RANK */
    int64_t dims[S4D_PLUGIN_MAX_RANK];    /* dims[0 .. rank-1] >= 0 */
    /* ABI 2 */
    s4d_tensor_format format;
    int64_t strides[S4D_PLUGIN_MAX_RANK]; /* in elements, per logical dim; from format and dims */
    int32_t device_ordinal;               /* CUDA: the device the tensor lives on */
} s4d_plugin_tensor_desc;

/* A tensor at run time: its descriptor and its dense row-major data. */
typedef struct s4d_plugin_tensor {
    uint32_t abi_version;
    uint32_t struct_size;
    s4d_plugin_tensor_desc desc;
    void *data; /* on desc.device; inputs must be treated as read-only */
} s4d_plugin_tensor;

/* Field (attribute) types. Values equal ONNX AttributeProto.AttributeType. */
typedef enum s4d_plugin_field_type {
    S4D_PLUGIN_FIELD_FLOAT = 1,   /* data: const float *, count 1 */
    S4D_PLUGIN_FIELD_INT = 2,     /* data: const int64_t *, count 1 */
    S4D_PLUGIN_FIELD_STRING = 3,  /* data: const char *, count = bytes without the NUL; NUL-terminated */
    S4D_PLUGIN_FIELD_FLOATS = 6,  /* data: const float *, count elements (may be 0) */
    S4D_PLUGIN_FIELD_INTS = 7     /* data: const int64_t *, count elements (may be 0) */
} s4d_plugin_field_type;

/* One field value. */
typedef struct s4d_plugin_field {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    s4d_plugin_field_type type;
    int64_t count;
    const void *data;
} s4d_plugin_field;

/*
 * A field a creator declares. A required field must be given by the node; an
 * optional one takes default_value when absent (default_value.name and .type
 * are ignored; its data must stay valid while the creator is registered).
 */
typedef struct s4d_plugin_field_decl {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    s4d_plugin_field_type type;
    int32_t required; /* 1: the node must set it; 0: default_value applies */
    s4d_plugin_field default_value;
} s4d_plugin_field_decl;

/*
 * The fields handed to create(): exactly the creator's declared fields, in
 * declaration order, defaults filled in, types already checked by the host.
 * Valid only during the create() call.
 */
typedef struct s4d_plugin_fields {
    uint32_t abi_version;
    uint32_t struct_size;
    int32_t count;
    const s4d_plugin_field *fields;
} s4d_plugin_fields;

/* The host's parallel for: fn(arg, begin, end) over chunks covering [0, n). */
typedef void (*s4d_plugin_range_fn)(void *arg, int64_t begin, int64_t end);
typedef void (*s4d_plugin_parallel_for_fn)(void *pool, int64_t n, int64_t grain,
                                           s4d_plugin_range_fn fn, void *arg);

/* What enqueue gets besides its tensors. Valid only during the call. */
typedef struct s4d_plugin_run_info {
    uint32_t abi_version;
    uint32_t struct_size;
    s4d_device device;     /* where the inputs, outputs and workspace live */
    void *stream;          /* CUDA: the cudaStream_t to enqueue on; CPU: NULL */
    void *workspace;       /* workspace_size() bytes on `device`, 256-byte aligned; NULL when 0 */
    size_t workspace_size;
    int32_t num_threads;   /* CPU: threads the plugin may use; <= 0 means its own choice */
    /* ABI 2 */
    int32_t device_ordinal;          /* CUDA: the current device */
    void *context_state;             /* what attach() returned for this context (or NULL) */
    /* CPU: the context's thread pool; parallel_for(thread_pool, ...) runs work on it
       without creating threads. Both NULL on CUDA. */
    void *thread_pool;
    s4d_plugin_parallel_for_fn parallel_for;
} s4d_plugin_run_info;

/* What configure and attach get. Valid only during the call. */
typedef struct s4d_plugin_config_info {
    uint32_t abi_version;
    uint32_t struct_size;
    s4d_device device;
    int32_t device_ordinal;
    void *stream;          /* CUDA: a stream for one-time uploads (configure) or the context's (attach) */
} s4d_plugin_config_info;

/*
 * A plugin instance: one node of one engine. The plugin allocates it (with
 * its state) in create()/deserialize() and frees it in destroy(). Callbacks
 * get the instance back as `self`. Every callback that can fail writes a
 * one-line message into *err (err may be NULL) naming what is at fault, e.g.
 * "input 3 (sampling_location): expected rank 5, got 4".
 */
typedef struct s4d_plugin s4d_plugin;
struct s4d_plugin {
    uint32_t abi_version;
    uint32_t struct_size;
    void *state; /* the plugin's own; the host never reads it */

    /* Build time. Number of outputs; fixed for the instance. */
    int32_t (*num_outputs)(const s4d_plugin *self);

    /*
     * Build time. Checks the inputs' dtypes and shapes and sets each output's
     * dtype, rank and dims. The host presets outputs[i].abi_version,
     * struct_size and device (the device the node is built for). Returns
     * S4D_OK, S4D_ERR_SHAPE, S4D_ERR_DTYPE or S4D_ERR_INVALID_ARG.
     */
    s4d_status (*get_output_descs)(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                                   int32_t num_inputs, s4d_plugin_tensor_desc *outputs,
                                   int32_t num_outputs, s4d_errbuf *err);

    /*
     * Build time. S4D_OK when the plugin can run this exact combination of
     * dtypes and devices (all descriptors complete); else S4D_ERR_DTYPE or
     * S4D_ERR_UNSUPPORTED with *err saying which tensor and why. The host
     * asks once per device it considers.
     */
    s4d_status (*supports)(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                           int32_t num_inputs, const s4d_plugin_tensor_desc *outputs,
                           int32_t num_outputs, s4d_errbuf *err);

    /* Build time. Scratch bytes enqueue needs for these (supported) descriptors. */
    size_t (*workspace_size)(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                             int32_t num_inputs, const s4d_plugin_tensor_desc *outputs,
                             int32_t num_outputs);

    /* Build time. Bytes of the payload serialize() writes. */
    size_t (*serialize_size)(const s4d_plugin *self);

    /*
     * Build time. Writes exactly serialize_size() bytes into buf (size is
     * that value); the creator's deserialize() must rebuild an equal
     * instance from them. The payload should carry its own version.
     */
    s4d_status (*serialize)(const s4d_plugin *self, void *buf, size_t size, s4d_errbuf *err);

    /*
     * Run time. Computes every output from the inputs, on run->device, with
     * shapes equal to those seen at build time. Allocates nothing; must be
     * reentrant. CUDA work goes on run->stream only.
     */
    s4d_status (*enqueue)(const s4d_plugin *self, const s4d_plugin_tensor *inputs, int32_t num_inputs,
                          s4d_plugin_tensor *outputs, int32_t num_outputs,
                          const s4d_plugin_run_info *run, s4d_errbuf *err);

    /* Frees the instance. Never NULL. */
    void (*destroy)(s4d_plugin *self);

    /* ---- ABI 2: every callback below may be NULL ---- */

    /*
     * Build time, TensorRT's supportsFormatCombination. descs holds the inputs
     * then the outputs (num_inputs + num_outputs entries, shapes set); entries
     * before pos are already chosen. S4D_OK when descs[pos].dtype and
     * .format are acceptable together with them, else S4D_ERR_UNSUPPORTED.
     * The host tries its preferred candidates in order and keeps the first
     * accepted. NULL: the host calls supports() on the whole combination.
     */
    s4d_status (*supports_format)(const s4d_plugin *self, int32_t pos,
                                  const s4d_plugin_tensor_desc *descs, int32_t num_inputs,
                                  int32_t num_outputs);

    /*
     * Once the engine's shapes, dtypes, formats and device are final, at build
     * and again at load, before any attach: one-time work (upload a table to
     * the device with info->stream, precompute). May fail with a message.
     */
    s4d_status (*configure)(s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                            int32_t num_inputs, const s4d_plugin_tensor_desc *outputs,
                            int32_t num_outputs, const s4d_plugin_config_info *info,
                            s4d_errbuf *err);

    /*
     * Once per execution context, at its creation: per-context state (library
     * handles, scratch) in *context_state, handed back in every enqueue of
     * that context (run->context_state) and to detach when it is destroyed.
     */
    s4d_status (*attach)(const s4d_plugin *self, const s4d_plugin_config_info *info,
                         void **context_state, s4d_errbuf *err);
    void (*detach)(const s4d_plugin *self, void *context_state);
};

/*
 * A creator: the factory for one plugin key. The struct and everything it
 * points to must stay valid while it is registered (a static const object in
 * the plugin library is the usual choice).
 */
typedef struct s4d_plugin_creator s4d_plugin_creator;
struct s4d_plugin_creator {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *plugin_namespace; /* never NULL; "" for none */
    const char *name;             /* the ONNX op_type */
    const char *version;          /* e.g. "1" */
    int32_t num_fields;
    const s4d_plugin_field_decl *fields;
    void *user; /* the creator's own; passed back through self */

    /*
     * Builds an instance from checked fields. node_name names the ONNX node
     * for messages. On success *out is a new instance the caller destroys.
     */
    s4d_status (*create)(const s4d_plugin_creator *self, const char *node_name,
                         const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err);

    /* Rebuilds an instance from a serialize() payload (untrusted bytes: check them). */
    s4d_status (*deserialize)(const s4d_plugin_creator *self, const void *data, size_t size,
                              s4d_plugin **out, s4d_errbuf *err);
};

/*
 * The host's API table, passed to s4d_plugin_library_init(). `host` is the
 * host's context for the calls below; valid only during the init call.
 */
typedef struct s4d_host_api s4d_host_api;
struct s4d_host_api {
    uint32_t abi_version;
    uint32_t struct_size;
    void *host;

    /*
     * Registers a creator. Statuses: S4D_OK (also when this exact creator is
     * already registered), S4D_ERR_PLUGIN (another creator holds the key),
     * S4D_ERR_VERSION (creator built for another ABI), S4D_ERR_INVALID_ARG.
     */
    s4d_status (*register_creator)(void *host, const s4d_plugin_creator *creator);

    /* Writes one line to the host's log (level 0 error, 1 warning, 2 info). */
    void (*log)(void *host, int32_t level, const char *message);
};

/*
 * The one symbol a plugin library exports; its signature never changes.
 * It must first store S4D_PLUGIN_ABI_VERSION (as compiled into the library)
 * in *library_abi_version, then return S4D_ERR_VERSION if host->abi_version
 * is one it does not speak, else register its creators through
 * host->register_creator and return S4D_OK (or the first failing status,
 * with a message in *err). The host discards every registration of a call
 * that fails or reports another ABI version.
 */
#define S4D_PLUGIN_LIBRARY_INIT_SYMBOL "s4d_plugin_library_init"
typedef s4d_status (*s4d_plugin_library_init_fn)(const s4d_host_api *host,
                                                 uint32_t *library_abi_version, s4d_errbuf *err);

/* ------------------------------------------------------------------------
 * Registration, for applications (libs4d).
 *
 * A registry maps keys to creators. The builder and the runtime look plugins
 * up in the registry they are given, or in the process default registry.
 * Thread-safety: every function below may be called from any thread; a
 * registry serialises its own updates. The message of the last failing call
 * lives on the registry (s4d_plugin_registry_errmsg); with several threads
 * failing at once on one registry, it holds one of their messages.
 * ------------------------------------------------------------------------ */
typedef struct s4d_plugin_registry s4d_plugin_registry;

/* New empty registry in *out. S4D_OK, S4D_ERR_INVALID_ARG, S4D_ERR_NO_MEMORY. */
S4D_API s4d_status s4d_plugin_registry_create(s4d_plugin_registry **out);

/*
 * Frees the registry and unloads the libraries it loaded. Every plugin
 * instance created through it must be destroyed first. NULL is a no-op; the
 * default registry is never freed (the call ignores it).
 */
S4D_API void s4d_plugin_registry_destroy(s4d_plugin_registry *registry);

/* The process-wide registry, created on first use; NULL only if out of memory. */
S4D_API s4d_plugin_registry *s4d_plugin_registry_default(void);

/*
 * Registers a creator (the caller keeps it valid until the registry is
 * destroyed). Registering the same creator again is S4D_OK; a different
 * creator under a key already taken is S4D_ERR_PLUGIN. Also S4D_ERR_VERSION,
 * S4D_ERR_INVALID_ARG (NULL or empty name/version, a NULL callback, a bad
 * field declaration), S4D_ERR_NO_MEMORY.
 */
S4D_API s4d_status s4d_plugin_registry_register(s4d_plugin_registry *registry,
                                                const s4d_plugin_creator *creator);

/*
 * Loads a plugin library (dlopen of `path`, then its entry point) and
 * registers its creators, all or none. S4D_OK; S4D_ERR_IO (cannot load the
 * file); S4D_ERR_NOT_FOUND (no s4d_plugin_library_init in it);
 * S4D_ERR_VERSION (another plugin ABI); S4D_ERR_PLUGIN (init failed or a key
 * clash); S4D_ERR_INVALID_ARG; S4D_ERR_NO_MEMORY. Loading the same library
 * twice is S4D_OK. The library stays loaded until the registry is destroyed.
 */
S4D_API s4d_status s4d_plugin_registry_load_library(s4d_plugin_registry *registry,
                                                    const char *path);

/* Number of registered creators, and the i-th one (NULL when out of range). */
S4D_API int32_t s4d_plugin_registry_count(s4d_plugin_registry *registry);
S4D_API const s4d_plugin_creator *s4d_plugin_registry_get(s4d_plugin_registry *registry,
                                                          int32_t index);

/*
 * The creator with this exact key in *out. S4D_OK; S4D_ERR_NOT_FOUND with a
 * message naming the key and listing every registered creator;
 * S4D_ERR_INVALID_ARG.
 */
S4D_API s4d_status s4d_plugin_registry_find(s4d_plugin_registry *registry,
                                            const char *plugin_namespace, const char *name,
                                            const char *version, const s4d_plugin_creator **out);

/* The message of the last failing call on this registry ("" if none); never NULL. */
S4D_API const char *s4d_plugin_registry_errmsg(s4d_plugin_registry *registry);

#ifdef __cplusplus
}
#endif

#endif /* S4D_PLUGIN_H */
