/*
 * The thread pool behind s4d_parallel_for.
 *
 * One job at a time: the submitting thread publishes (fn, arg, chunk bounds),
 * wakes the workers, takes chunks itself, and waits until every chunk is done.
 * Chunks are claimed through an atomic counter, but their bounds are fixed
 * before any thread starts, so results do not depend on scheduling. A call
 * made from inside a chunk (nested parallelism) or while another thread owns
 * the pool runs inline rather than deadlocking.
 *
 * Waking a sleeping thread costs tens of microseconds on a loaded or virtual
 * machine, as much as a small layer's whole work. So a worker that finishes a
 * job watches for the next one for a short while (S4D_POOL_SPIN_US, default
 * 50 us; 0: never) before it sleeps on the condition variable, and the
 * submitter watches its workers finish for as long before it sleeps: the
 * layers of one network run back to back, so the next job usually comes
 * within that time and nobody sleeps. The generation and the pending count
 * are atomics for the watchers; every change of them that a sleeper waits for
 * still happens under the lock, so no wake-up is lost.
 */
#define _POSIX_C_SOURCE 200809L
#include "util/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif


struct s4d_threadpool {
    int num_threads; /* caller included */
    pthread_t *workers;
    int num_workers;
    pthread_mutex_t submit; /* held by the thread that owns the current job */
    pthread_mutex_t lock;   /* every change a sleeper waits for is made under it */
    pthread_cond_t wake;
    pthread_cond_t done;
    atomic_ullong generation;
    atomic_int stop;
    atomic_int pending; /* workers that have not yet finished the current generation */
    int64_t spin_ns;    /* how long a thread watches for its event before it sleeps */
    /* The current job. */
    s4d_parallel_fn fn;
    void *arg;
    int64_t n;
    int64_t chunks;
    atomic_llong next_chunk;
};

static _Thread_local int in_parallel_region;

static void chunk_bounds(int64_t n, int64_t chunks, int64_t c, int64_t *b, int64_t *e)
{
    /* Even split; the first n % chunks chunks get one element more. */
    int64_t q = n / chunks, r = n % chunks;
    *b = c * q + (c < r ? c : r);
    *e = *b + q + (c < r ? 1 : 0);
}

static void run_chunks(s4d_threadpool *p)
{
    in_parallel_region = 1;
    for (;;) {
        int64_t c = atomic_fetch_add(&p->next_chunk, 1);
        if (c >= p->chunks)
            break;
        int64_t b, e;
        chunk_bounds(p->n, p->chunks, c, &b, &e);
        if (e > b)
            p->fn(p->arg, b, e);
    }
    in_parallel_region = 0;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Watches until ready(p, v) holds or spin_ns pass; 1 when it held. */
static int spin_until(const s4d_threadpool *p, int (*ready)(const s4d_threadpool *, uint64_t), uint64_t v)
{
    if (p->spin_ns <= 0)
        return ready(p, v);
    int64_t t0 = now_ns();
    for (int i = 1;; i++) {
        if (ready(p, v))
            return 1;
        CPU_RELAX();
        if ((i & 15) == 0) {
            /* A thread that shares this CPU (another job's, or the pool's own on an
               oversubscribed machine) gets it now instead of at the end of the time slice. */
            sched_yield();
            if (now_ns() - t0 > p->spin_ns)
                return ready(p, v);
        }
    }
}

static int job_or_stop(const s4d_threadpool *p, uint64_t seen)
{
    return atomic_load(&p->stop) || atomic_load(&p->generation) != seen;
}

static int all_done(const s4d_threadpool *p, uint64_t unused)
{
    (void)unused;
    return atomic_load(&p->pending) == 0;
}

static void *worker_main(void *vp)
{
    s4d_threadpool *p = vp;
    uint64_t seen = 0;
    for (;;) {
        if (!spin_until(p, job_or_stop, seen)) {
            pthread_mutex_lock(&p->lock);
            while (!job_or_stop(p, seen))
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop))
            break;
        seen = atomic_load(&p->generation);
        run_chunks(p);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
    return NULL;
}

s4d_status s4d_threadpool_create(int num_threads, s4d_threadpool **out)
{
    if (!out)
        return S4D_ERR_INVALID_ARG;
    *out = NULL;
    if (num_threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        num_threads = cpus > 0 ? (int)cpus : 1;
    }
    s4d_threadpool *p = calloc(1, sizeof(*p));
    if (!p)
        return S4D_ERR_NO_MEMORY;
    p->num_threads = num_threads;
    pthread_mutex_init(&p->submit, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next_chunk, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->pending, 0);
    const char *spin = getenv("S4D_POOL_SPIN_US");
    p->spin_ns = (int64_t)(spin && spin[0] ? atoi(spin) : 50) * 1000;
    if (num_threads > 1) {
        p->workers = calloc((size_t)num_threads - 1, sizeof(pthread_t));
        if (!p->workers) {
            s4d_threadpool_destroy(p);
            return S4D_ERR_NO_MEMORY;
        }
        for (int i = 0; i < num_threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                s4d_threadpool_destroy(p);
                return S4D_ERR_NO_MEMORY;
            }
            p->num_workers++;
        }
    }
    *out = p;
    return S4D_OK;
}

void s4d_threadpool_destroy(s4d_threadpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->num_workers; i++)
        pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->submit);
    free(p);
}

int s4d_threadpool_size(const s4d_threadpool *p)
{
    return p ? p->num_threads : 1;
}

void s4d_parallel_for(s4d_threadpool *p, int64_t n, int64_t grain, s4d_parallel_fn fn, void *arg)
{
    if (n <= 0 || !fn)
        return;
    if (grain < 1)
        grain = 1;
    int64_t chunks = (n + grain - 1) / grain;
    int threads = p ? p->num_threads : 1;
    if (chunks > threads)
        chunks = threads;
    if (!p || chunks <= 1 || p->num_workers == 0 || in_parallel_region ||
        pthread_mutex_trylock(&p->submit) != 0) {
        /* Inline, but with the same chunk bounds as the threaded path so
         * that results are bitwise identical either way. */
        for (int64_t c = 0; c < chunks; c++) {
            int64_t b, e;
            chunk_bounds(n, chunks, c, &b, &e);
            if (e > b)
                fn(arg, b, e);
        }
        return;
    }
    /* Every worker has finished the previous job (its pending count reached 0), so none
       reads these fields while they change; the generation's store publishes them. */
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunks = chunks;
    atomic_store(&p->next_chunk, 0);
    atomic_store(&p->pending, p->num_workers);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    run_chunks(p);

    if (!spin_until(p, all_done, 0)) {
        pthread_mutex_lock(&p->lock);
        while (!all_done(p, 0))
            pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->submit);
}
