/*
 * src/backend/cuda/ops/dense_ops.h - what the dense family's CUDA glue files
 * share (internal): their kernels, a process-wide cache of build-time
 * algorithm choices, scratch memory and event timing for those choices, and
 * payload helpers.
 *
 *   dense_conv.c   Conv, s4d::FusedConv, ConvTranspose (cuDNN)
 *   dense_gemm.c   MatMul, s4d::FusedMatMul, Gemm, Einsum (cuBLASLt)
 *   dense_pool.c   MaxPool (and s4d::MaxPool, channels-last), AveragePool, GlobalAveragePool,
 *                  GlobalMaxPool
 *   dense.c        the family's kernel table and the helpers below
 */
#ifndef S4D_BACKEND_CUDA_OPS_DENSE_OPS_H
#define S4D_BACKEND_CUDA_OPS_DENSE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"

extern const s4d_kernel s4d_cuda_k_conv;
extern const s4d_kernel s4d_cuda_k_fused_conv;
extern const s4d_kernel s4d_cuda_k_conv_transpose;
extern const s4d_kernel s4d_cuda_k_matmul;
extern const s4d_kernel s4d_cuda_k_fused_matmul;
extern const s4d_kernel s4d_cuda_k_gemm;
extern const s4d_kernel s4d_cuda_k_einsum;
extern const s4d_kernel s4d_cuda_k_maxpool;
extern const s4d_kernel s4d_cuda_k_maxpool_nhwc;
extern const s4d_kernel s4d_cuda_k_avgpool;
extern const s4d_kernel s4d_cuda_k_global_avgpool;
extern const s4d_kernel s4d_cuda_k_global_maxpool;

/*
 * Build-time choices (an algorithm, its math mode) depend only on the
 * problem's shape and options, so identical layers are timed once per
 * process: the key is the problem as plain bytes (zero the struct before
 * filling it, so that padding compares equal), the value the choice.
 * Thread-safe. get returns 1 and copies the value when found.
 */
int s4d_dense_cache_get(const void *key, size_t key_size, void *val, size_t val_size);
void s4d_dense_cache_put(const void *key, size_t key_size, const void *val, size_t val_size);

/*
 * Device scratch for timing at build: a list of cudaMalloc'd buffers freed
 * together (after a synchronisation of the given stream).
 */
typedef struct s4d_dense_scratch {
    void *p[8];
    int n;
} s4d_dense_scratch;

/* A buffer of bytes (at least 256) zeroed on stream, or NULL when the device has no room. */
void *s4d_dense_scratch_alloc(s4d_dense_scratch *s, size_t bytes, cudaStream_t stream);
void s4d_dense_scratch_free(s4d_dense_scratch *s, cudaStream_t stream);

/* Bytes of device memory free now (0 when the query fails). */
size_t s4d_dense_free_bytes(void);

/*
 * Times fn(arg) on stream: one warm-up call, then `reps` calls captured into
 * a CUDA graph, replayed once to warm it and then twice between events; *ms
 * gets the mean per call of the faster replay. Engines replay their layers as graphs, so this is
 * the time that counts: calls enqueued one by one would add the host's cost
 * per call (tens of microseconds in cuDNN's legacy API, more than many of the
 * kernels take), and the fastest kernel would lose to the cheapest call.
 * On a stream that cannot capture (the legacy default stream) the calls are
 * timed as enqueued. A candidate whose calls break the capture returns
 * S4D_ERR_UNSUPPORTED: it could not run in the engine's graph either. fn's
 * own failure is returned as is (the caller decides whether a candidate that
 * fails is skipped).
 */
typedef s4d_status (*s4d_dense_run_fn)(void *arg);
s4d_status s4d_dense_time(cudaStream_t stream, s4d_dense_run_fn fn, void *arg, int reps, double *ms);
/*
 * After a timed candidate failed: cudaSuccess when the failure was its own
 * (cleared, the next candidate may run), else the sticky error that left the
 * CUDA context unusable (e.g. an illegal address), which the layer must report.
 */
cudaError_t s4d_dense_sticky_error(cudaStream_t stream);

/*
 * A 1x1 convolution (stride 1, no padding, one group) over NCHW float32 as
 * one strided batch of cuBLASLt products (dense_gemm.c, for dense_conv.c):
 * Y[i] [m, plane] = W [m, c] X[i] [c, plane] for each of the n images, W
 * shared. addend: Y already holds the bias and residual (the caller's
 * s4d_cuda_conv_prefill_f32) and the product accumulates onto it; relu:
 * cuBLASLt's ReLU epilogue, after the sum. prepare chooses the algorithm as
 * the products do (timed candidates, the process cache) or takes a stored
 * choice (payload, size: what save wrote; validated). run checks the
 * workspace against s4d_conv_gemm_workspace.
 */
typedef struct s4d_conv_gemm s4d_conv_gemm;
s4d_status s4d_conv_gemm_prepare(s4d_op_ctx *ctx, int64_t n, int64_t c, int64_t m, int64_t plane, int addend,
                                 int relu, const void *w_const, const void *payload, size_t size,
                                 s4d_conv_gemm **out);
/*
 * The same for any strided batch of row-major float32 products D[i] [m, n] =
 * A[i] [m, k] B[i] [k, n]: A[i] at i * sa (0: shared), B[i] at i * sb, D[i] at
 * i * m * n (the Winograd convolution's 36 products: A its transformed filter).
 */
s4d_status s4d_conv_gemm_prepare_batch(s4d_op_ctx *ctx, int64_t batch, int64_t m, int64_t n, int64_t k, int64_t sa,
                                       int64_t sb, int addend, int relu, const void *a_const, const void *payload,
                                       size_t size, s4d_conv_gemm **out);
s4d_status s4d_conv_gemm_run(s4d_op_ctx *ctx, const s4d_conv_gemm *g, const void *x, const void *w, void *y,
                             void *ws, size_t ws_size, cudaStream_t s);
size_t s4d_conv_gemm_workspace(const s4d_conv_gemm *g);
s4d_status s4d_conv_gemm_save(const s4d_conv_gemm *g, s4d_wbuf *w);
int s4d_conv_gemm_describe(const s4d_conv_gemm *g, char *buf, size_t size);
void s4d_conv_gemm_free(s4d_conv_gemm *g);

/* Payload framing: magic, version, then the kernel's fields. */
#define S4D_DENSE_PAYLOAD_VERSION 1u

/* ceil to 256 bytes: the alignment cuDNN and cuBLASLt like for workspaces and buffers. */
static inline size_t s4d_dense_align256(size_t v)
{
    return (v + 255u) & ~(size_t)255u;
}

#endif /* S4D_BACKEND_CUDA_OPS_DENSE_OPS_H */
