/*
 * src/runtime/runtime.h - the engine and context objects behind
 * include/s4d/engine.h (internal).
 *
 * An engine owns the plan, per device the backend, a context for preparing
 * kernels and the weights placed on that device once, and per layer the
 * kernel, its prepared state and the plugin instance. A context owns, per
 * device, the backend's context (stream, handles, thread pool), the arena and
 * the workspace, plus staging buffers for host-bound inputs and outputs.
 */
#ifndef S4D_RUNTIME_RUNTIME_H
#define S4D_RUNTIME_RUNTIME_H

#include <pthread.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "engine/plan.h"
#include "s4d/engine.h"

typedef struct engine_dev {
    const s4d_backend *be;   /* NULL when the engine does not use the device */
    s4d_backend_ctx *prep;   /* for kernel preparation, uploads and plugin configure */
    void *weights;           /* the weights blob on this device (the plan's own on the host) */
} engine_dev;

struct s4d_engine {
    s4d_plan *plan;
    void *registry;
    char **plugin_labels;    /* "ns::name:version" per layer (NULL for other layers) */
    char **kernel_info;      /* per layer, what its kernel's describe() said (NULL: nothing) */
    unsigned char *runs_nothing; /* per layer: a view or a Concat in place (no kernel) */
    engine_dev dev[S4D_NUM_DEVICES];
    uint64_t max_context_bytes;
    pthread_mutex_t err_lock; /* errmsg is written by calls on a shared engine */
    char errmsg[2048];
};

/* Builds each layer's op context tensors: data from the engine's weights on the
   layer's device for constants (host weights when host is set), NULL otherwise. */
void s4d_engine_layer_tensors(const s4d_engine *e, const s4d_plan_layer *l, int host,
                              s4d_tensor *in, s4d_tensor *out);

/* s4d_ir_node_ctx for a plan layer: *ctx zeroed, then l's name, op, attributes, schema and
   params, the tensors in and out, and the message buffer msg (cleared) of msg_size bytes. */
void s4d_plan_layer_ctx(const s4d_plan_layer *l, s4d_tensor *in, s4d_tensor *out, char *msg,
                        size_t msg_size, s4d_op_ctx *ctx);

/* Sets the engine's error message (thread-safe) and returns status. */
s4d_status s4d_engine_set_error(s4d_engine *e, s4d_status status, const char *msg);

/*
 * Called after each layer of a run (not with graphs): the accuracy guard
 * reads every layer's outputs this way. A status other than S4D_OK stops the
 * run with it.
 */
typedef s4d_status (*s4d_layer_hook)(s4d_context *c, int layer, void *user);
void s4d_context_set_layer_hook(s4d_context *c, s4d_layer_hook hook, void *user);

/* Copies output `index` of layer `layer` from the last run into dst (host,
   its tensor's bytes) and waits for it. */
s4d_status s4d_context_layer_output(s4d_context *c, int layer, int index, void *dst);

/* Builds an engine from ONNX bytes with a resolved config (no accuracy guard). */
s4d_status s4d_engine_build_config(const void *data, size_t size, const s4d_build_config *cfg,
                                   s4d_engine **out, char *err, size_t errsz);

/*
 * The fp16 accuracy guard (precision_guard.c, docs/precision.md): builds the
 * float32 reference and fp16 candidates of the model, runs them on the
 * calibration sets in o->calib_dir and moves the layers that cause errors
 * above tolerance to float32. *out is the final fp16 engine with its report.
 */
s4d_status s4d_precision_guard(const void *data, size_t size, const s4d_build_options *o,
                               const s4d_build_config *cfg, s4d_engine **out, char *err,
                               size_t errsz);

#endif /* S4D_RUNTIME_RUNTIME_H */
