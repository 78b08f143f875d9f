/*
 * CUDA kernels of the dense family: the table, and the helpers the family's
 * glue files share (dense_ops.h): the choice cache, build-time scratch and
 * event timing.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ops/dense_ops.h"

const s4d_kernel *const s4d_cuda_kernels_dense[] = {
    &s4d_cuda_k_conv,           &s4d_cuda_k_fused_conv,     &s4d_cuda_k_conv_transpose,
    &s4d_cuda_k_matmul,         &s4d_cuda_k_fused_matmul,   &s4d_cuda_k_gemm,
    &s4d_cuda_k_einsum,         &s4d_cuda_k_maxpool,        &s4d_cuda_k_maxpool_nhwc,        &s4d_cuda_k_avgpool,
    &s4d_cuda_k_global_avgpool, &s4d_cuda_k_global_maxpool,
};
const size_t s4d_cuda_kernels_dense_count =
    sizeof(s4d_cuda_kernels_dense) / sizeof(s4d_cuda_kernels_dense[0]);

/* ---- choice cache ---- */

/* Enough for every distinct layer of several large models; past it, choices are simply not kept. */
#define CACHE_MAX_ENTRIES 4096

typedef struct cache_entry {
    struct cache_entry *next;
    size_t key_size, val_size;
    unsigned char bytes[]; /* key, then value */
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *cache_head;
static int cache_count;

int s4d_dense_cache_get(const void *key, size_t key_size, void *val, size_t val_size)
{
    int found = 0;
    pthread_mutex_lock(&cache_lock);
    for (cache_entry *e = cache_head; e; e = e->next) {
        if (e->key_size == key_size && e->val_size == val_size && memcmp(e->bytes, key, key_size) == 0) {
            memcpy(val, e->bytes + key_size, val_size);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

void s4d_dense_cache_put(const void *key, size_t key_size, const void *val, size_t val_size)
{
    cache_entry *e = malloc(sizeof *e + key_size + val_size);
    if (!e)
        return; /* a cache miss later costs only time */
    e->key_size = key_size;
    e->val_size = val_size;
    memcpy(e->bytes, key, key_size);
    memcpy(e->bytes + key_size, val, val_size);
    pthread_mutex_lock(&cache_lock);
    if (cache_count >= CACHE_MAX_ENTRIES) {
        pthread_mutex_unlock(&cache_lock);
        free(e);
        return;
    }
    e->next = cache_head;
    cache_head = e;
    cache_count++;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- scratch and timing ---- */

void *s4d_dense_scratch_alloc(s4d_dense_scratch *s, size_t bytes, cudaStream_t stream)
{
    if (s->n >= (int)(sizeof s->p / sizeof s->p[0]))
        return NULL;
    void *p = NULL;
    size_t n = s4d_dense_align256(bytes ? bytes : 1);
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    /* Zeros (on the stream that uses them): timings must not depend on leftover NaNs or denormals. */
    if (cudaMemsetAsync(p, 0, n, stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    s->p[s->n++] = p;
    return p;
}

void s4d_dense_scratch_free(s4d_dense_scratch *s, cudaStream_t stream)
{
    if (s->n)
        cudaStreamSynchronize(stream);
    for (int i = 0; i < s->n; i++)
        cudaFree(s->p[i]);
    s->n = 0;
    cudaGetLastError();
}

size_t s4d_dense_free_bytes(void)
{
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return free_b;
}

cudaError_t s4d_dense_sticky_error(cudaStream_t stream)
{
    cudaStreamSynchronize(stream);
    cudaGetLastError();
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e;
}

/* Timed replays per candidate (s4d_dense_time). */
#define DENSE_TIME_ROUNDS 2

/* Records `reps` calls of fn into *exec; 0: the stream cannot capture, -1: fn or the capture failed. */
static int dense_capture(cudaStream_t stream, s4d_dense_run_fn fn, void *arg, int reps, cudaGraphExec_t *exec,
                         s4d_status *st)
{
    *exec = NULL;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    for (int i = 0; i < reps && *st == S4D_OK; i++)
        *st = fn(arg);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(stream, &g);
    if (e == cudaSuccess && *st == S4D_OK && g)
        e = cudaGraphInstantiate(exec, g, 0);
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();
    if (*st != S4D_OK)
        return -1;
    if (e != cudaSuccess || !*exec) {
        *exec = NULL;
        *st = S4D_ERR_UNSUPPORTED;
        return -1;
    }
    return 1;
}

s4d_status s4d_dense_time(cudaStream_t stream, s4d_dense_run_fn fn, void *arg, int reps, double *ms)
{
    *ms = 0.0;
    if (reps < 1)
        reps = 1;
    cudaEvent_t a = NULL, b = NULL;
    cudaGraphExec_t exec = NULL;
    s4d_status st = fn(arg);
    if (st != S4D_OK)
        return st;
    if (cudaStreamSynchronize(stream) != cudaSuccess) {
        cudaGetLastError();
        return S4D_ERR_CUDA;
    }
    const int graphed = dense_capture(stream, fn, arg, reps, &exec, &st);
    if (graphed < 0)
        return st;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
        st = S4D_ERR_CUDA;
        goto done;
    }
    if (graphed && cudaGraphLaunch(exec, stream) != cudaSuccess) {
        st = S4D_ERR_CUDA;
        goto done;
    }
    /* The fastest of a few replays counts: a clock ramp or a neighbour's burst slows one. */
    for (int round = 0; round < DENSE_TIME_ROUNDS && st == S4D_OK; round++) {
        cudaEventRecord(a, stream);
        if (graphed) {
            if (cudaGraphLaunch(exec, stream) != cudaSuccess)
                st = S4D_ERR_CUDA;
        } else {
            for (int i = 0; i < reps && st == S4D_OK; i++)
                st = fn(arg);
        }
        cudaEventRecord(b, stream);
        if (cudaEventSynchronize(b) != cudaSuccess) {
            st = S4D_ERR_CUDA;
            break;
        }
        float t = 0.0f;
        if (st == S4D_OK && cudaEventElapsedTime(&t, a, b) != cudaSuccess)
            st = S4D_ERR_CUDA;
        if (st == S4D_OK && (round == 0 || (double)t / reps < *ms))
            *ms = (double)t / reps;
    }
done:
    if (exec)
        cudaGraphExecDestroy(exec);
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    cudaGetLastError();
    return st;
}
