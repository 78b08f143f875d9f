/* The CPU backend's entry in the backend table: see backend.h. */
#include <stdlib.h>

#include "backend/cpu/ops/dense_util.h"
#include "core/threadpool.h"
#include "runtime/backend.h"
#include "util/util.h"

static s4d_status cpu_context_init(int num_threads, void **state)
{
    *state = NULL;
    /* OpenBLAS's thread count is process-wide: the most recent context sets it
       to its own width, so one context per process gets exactly its budget. */
    if (num_threads == 1) {
        s4d_cpu_blas_set_threads(1);
        return S4D_OK;
    }
    s4d_threadpool *pool = NULL;
    s4d_status st = s4d_threadpool_create(num_threads, &pool);
    if (st != S4D_OK)
        return st;
    if (s4d_threadpool_size(pool) <= 1) {
        /* One core: running inline avoids the pool's hand-off cost. */
        s4d_threadpool_destroy(pool);
        pool = NULL;
    }
    *state = pool;
    s4d_cpu_blas_set_threads(pool ? s4d_threadpool_size(pool) : 1);
    return S4D_OK;
}

static void cpu_context_fini(void *state)
{
    s4d_threadpool_destroy(state);
}

static struct s4d_threadpool *cpu_context_pool(void *state)
{
    return state;
}

static const s4d_backend cpu_backend = {
    S4D_DEVICE_KIND_CPU, "cpu",     s4d_cpu_find_op,  s4d_aligned_alloc,
    s4d_aligned_free,    cpu_context_init, cpu_context_fini, cpu_context_pool,
};

const s4d_backend *s4d_backend_for(s4d_device_kind device)
{
    switch (device) {
    case S4D_DEVICE_KIND_CPU: return &cpu_backend;
    case S4D_DEVICE_KIND_CUDA: return NULL; /* the CUDA backend is a later issue */
    }
    return NULL;
}
