/*
 * src/backend/cuda/cuda_backend.h - what the CUDA backend's kernels share
 * (internal): the per-context state, status helpers and the kernel tables.
 *
 * Layout of the backend:
 *   backend_cuda.c      the backend table (memory, contexts, copies, events,
 *                       graphs, target info) and the kernel lookup
 *   ops/<family>.c      C glue per op family: supports / workspace / prepare /
 *                       run over the schema's typed params, and the family's
 *                       kernel table
 *   kernels/<family>.cu CUDA C++ behind extern "C" launchers declared in
 *                       kernels/<family>.h: plain pointers, sizes, a stream,
 *                       an s4d_status back
 * Every launch goes on ctx->stream; nothing here allocates, synchronises or
 * touches the default stream at run time, so a whole engine can be captured
 * into one CUDA graph. Library handles belong to the context (cuBLAS,
 * cuBLASLt, cuDNN), all bound to its stream.
 */
#ifndef S4D_BACKEND_CUDA_BACKEND_H
#define S4D_BACKEND_CUDA_BACKEND_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "backend/backend.h"

struct s4d_backend_ctx {
    int device;               /* CUDA device ordinal */
    cudaStream_t stream;      /* the context's stream (never the legacy default stream) */
    int own_stream;           /* created here (else the caller's, borrowed) */
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
    cudnnHandle_t cudnn;
    int allow_tf32;           /* the engine was built with tf32 */
};

/* The context of a kernel call and its stream. */
static inline s4d_backend_ctx *s4d_cuda_ctx(const s4d_op_ctx *ctx)
{
    return (s4d_backend_ctx *)ctx->backend_ctx;
}

static inline cudaStream_t s4d_cuda_stream(const s4d_op_ctx *ctx)
{
    return (cudaStream_t)ctx->stream;
}

/*
 * Status from a CUDA runtime / cuBLAS / cuDNN result: S4D_OK, or
 * S4D_ERR_CUDA (S4D_ERR_NO_MEMORY for allocation failures) with "what:
 * <library's error string>" in ctx->err.
 */
s4d_status s4d_cuda_check(s4d_op_ctx *ctx, cudaError_t e, const char *what);
s4d_status s4d_cublas_check(s4d_op_ctx *ctx, cublasStatus_t e, const char *what);
s4d_status s4d_cudnn_check(s4d_op_ctx *ctx, cudnnStatus_t e, const char *what);

/* The same into a plain buffer, for code without an op context. */
s4d_status s4d_cuda_fmt(cudaError_t e, const char *what, char *err, size_t errsz);

/* Checks that a launch went out (cudaGetLastError), naming the kernel. */
s4d_status s4d_cuda_launched(s4d_op_ctx *ctx, const char *kernel);

/* The schema's typed params, which infer fills before any kernel call; NULL (with the
   error in ctx) when they are missing. */
const void *s4d_cuda_params(s4d_op_ctx *ctx);

/* The cudaDataType / cudnnDataType of an s4d dtype; -1 when there is none. */
int s4d_cuda_data_type(s4d_dtype dt);
int s4d_cudnn_data_type(s4d_dtype dt);

/*
 * The kernel tables, one per op family (ops/<family>.c). Each table lists
 * kernels by (domain, op_type, since_version) like the schemas.
 */
extern const s4d_kernel *const s4d_cuda_kernels_elementwise[];
extern const size_t s4d_cuda_kernels_elementwise_count;
extern const s4d_kernel *const s4d_cuda_kernels_reduce[];
extern const size_t s4d_cuda_kernels_reduce_count;
extern const s4d_kernel *const s4d_cuda_kernels_movement[];
extern const size_t s4d_cuda_kernels_movement_count;
extern const s4d_kernel *const s4d_cuda_kernels_dense[];
extern const size_t s4d_cuda_kernels_dense_count;
extern const s4d_kernel *const s4d_cuda_kernels_attention[];
extern const size_t s4d_cuda_kernels_attention_count;
extern const s4d_kernel *const s4d_cuda_kernels_mlp[];
extern const size_t s4d_cuda_kernels_mlp_count;

#endif /* S4D_BACKEND_CUDA_BACKEND_H */
