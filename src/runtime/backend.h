/*
 * src/runtime/backend.h - what the builder and the runtime need from a
 * device backend. The CPU backend (backend_cpu.c) is the only one today; a
 * CUDA backend fills the same table (device memory, a cuBLAS/cuDNN handle
 * and stream per context, its own op table) without touching the engine
 * file, the builder or the public API: every layer record already carries
 * its device and s4d_context_run already takes a stream.
 */
#ifndef S4D_RUNTIME_BACKEND_H
#define S4D_RUNTIME_BACKEND_H

#include <stddef.h>

#include "core/op.h"
#include "ir/ir.h"

typedef struct s4d_backend {
    s4d_device_kind device;
    const char *name;
    /* Op resolution: highest since_version <= opset; NULL when absent. */
    const s4d_op_def *(*find_op)(const char *domain, const char *op_type, int opset);
    /* Device memory for arenas, workspaces and outputs (zeroed, 256-byte aligned). */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    /*
     * Per-context state (thread pool; later library handles and a stream).
     * num_threads <= 0 means all cores. Returns S4D_OK or S4D_ERR_NO_MEMORY.
     */
    s4d_status (*context_init)(int num_threads, void **state);
    void (*context_fini)(void *state);
    /* The thread pool ops receive in s4d_op_ctx.pool (may be NULL). */
    struct s4d_threadpool *(*context_pool)(void *state);
} s4d_backend;

/* The backend for a device, or NULL when this build has none for it. */
const s4d_backend *s4d_backend_for(s4d_device_kind device);

#endif /* S4D_RUNTIME_BACKEND_H */
