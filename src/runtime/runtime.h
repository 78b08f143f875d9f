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
    engine_dev dev[S4D_NUM_DEVICES];
    uint64_t max_context_bytes;
    pthread_mutex_t err_lock; /* errmsg is written by calls on a shared engine */
    char errmsg[2048];
};

/* Builds each layer's op context tensors: data from the engine's weights on the
   layer's device for constants (host weights when host is set), NULL otherwise. */
void s4d_engine_layer_tensors(const s4d_engine *e, const s4d_plan_layer *l, int host,
                              s4d_tensor *in, s4d_tensor *out);

/* Sets the engine's error message (thread-safe) and returns status. */
s4d_status s4d_engine_set_error(s4d_engine *e, s4d_status status, const char *msg);

#endif /* S4D_RUNTIME_RUNTIME_H */
