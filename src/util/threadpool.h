/*
 * src/util/threadpool.h - a fixed pool of worker threads for s4d_parallel_for
 * (internal; not installed).
 *
 * The pool is owned by whoever creates it (an execution context); ops only
 * receive it through s4d_op_ctx.pool. Work is split into chunks whose bounds
 * depend only on (n, grain, pool size), never on timing, so a kernel that
 * reduces within a chunk gives the same bits on every run.
 */
#ifndef S4D_CORE_THREADPOOL_H
#define S4D_CORE_THREADPOOL_H

#include <stdint.h>

#include "s4d/types.h"

typedef struct s4d_threadpool s4d_threadpool;

/*
 * Creates a pool that runs work on num_threads threads in total: the calling
 * thread plus num_threads - 1 workers. num_threads <= 0 means one per online
 * CPU. Returns S4D_OK, S4D_ERR_INVALID_ARG (out is NULL) or S4D_ERR_NO_MEMORY
 * (allocation or thread creation failed). *out is NULL on failure.
 */
s4d_status s4d_threadpool_create(int num_threads, s4d_threadpool **out);

/* Joins the workers and frees the pool. NULL is a no-op. Not while a
 * s4d_parallel_for on this pool is in progress. */
void s4d_threadpool_destroy(s4d_threadpool *pool);

/* Threads that run work, the caller included (1 for NULL). */
int s4d_threadpool_size(const s4d_threadpool *pool);

/*
 * Parallel for over [0, n): fn(arg, begin, end) on chunks of about grain
 * items; runs inline when pool is NULL. Chunks never overlap; the call
 * returns when all are done.
 */
typedef void (*s4d_parallel_fn)(void *arg, int64_t begin, int64_t end);
void s4d_parallel_for(s4d_threadpool *pool, int64_t n, int64_t grain, s4d_parallel_fn fn,
                      void *arg);

#endif /* S4D_CORE_THREADPOOL_H */
