/*
 * src/backend/cuda/kernels/reduce.h - CUDA kernels of the reduction family
 * (internal): Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax, LayerNormalization,
 * BatchNormalization (inference), TopK.
 *
 * Plain pointers to device memory, explicit 64-bit sizes, the caller's
 * stream. Each launcher returns cudaGetLastError() after its launches (or
 * cudaErrorInvalidValue for arguments it cannot take). Nothing is allocated
 * and nothing synchronises: scratch comes from the caller through `ws`, sized
 * by the matching *_workspace() function, so the launches can be captured
 * into a CUDA graph.
 *
 * Every kernel is deterministic: reductions run in a fixed order that depends
 * only on the shapes (never on timing, atomics or pointer alignment), so the
 * same engine gives bitwise the same outputs on every run.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_REDUCE_H
#define S4D_BACKEND_CUDA_KERNELS_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "s4d/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Same meaning as s4d_reduce_kind (src/ops/reduce.h); the glue checks they agree. */
enum {
    S4D_CUDA_RED_SUM = 0,
    S4D_CUDA_RED_MEAN,
    S4D_CUDA_RED_MAX,
    S4D_CUDA_RED_MIN,
    S4D_CUDA_RED_PROD,
    S4D_CUDA_RED_SUM_SQUARE,
    S4D_CUDA_RED_L1,
    S4D_CUDA_RED_L2,
    S4D_CUDA_RED_LOG_SUM,
    S4D_CUDA_RED_LOG_SUM_EXP,
    S4D_CUDA_RED_ARGMAX,
    S4D_CUDA_RED_ARGMIN
};

#define S4D_CUDA_RED_MAX_RANK 8

/*
 * A reduction's geometry: kept dims (one output per combination, outputs in
 * row-major order of the kept dims) and reduced dims, each with its element
 * stride in the input. Size-1 dims are absent.
 */
typedef struct s4d_cuda_red_geom {
    int nk, nr;
    int64_t kdims[S4D_CUDA_RED_MAX_RANK], kst[S4D_CUDA_RED_MAX_RANK];
    int64_t rdims[S4D_CUDA_RED_MAX_RANK], rst[S4D_CUDA_RED_MAX_RANK];
    int64_t nout, nred;
} s4d_cuda_red_geom;

/* Whether the Reduce* / Arg kernels take this input dtype (output dtype: same / int64). */
int s4d_cuda_reduce_dtype_ok(s4d_dtype dt);
int s4d_cuda_arg_dtype_ok(s4d_dtype dt);

/* Reduce* (kind 0..9): x of dtype dt -> y of dtype dt, nout elements. */
size_t s4d_cuda_reduce_workspace(int kind, s4d_dtype dt, const s4d_cuda_red_geom *g);
cudaError_t s4d_cuda_reduce(int kind, s4d_dtype dt, const s4d_cuda_red_geom *g, const void *x,
                            void *y, void *ws, size_t ws_size, cudaStream_t stream);

/* ArgMax / ArgMin over the one reduced dim (nr <= 1): int64 indices, ties to the
   first index (the last with select_last); NaN never wins, except at index 0. */
cudaError_t s4d_cuda_arg(int arg_min, int select_last, s4d_dtype dt, const s4d_cuda_red_geom *g,
                         const void *x, int64_t *y, cudaStream_t stream);

/* Softmax / LogSoftmax of n values at stride inner, outer * inner times (float32,
   float16, float64). */
cudaError_t s4d_cuda_softmax(int log_out, s4d_dtype dt, int64_t outer, int64_t n, int64_t inner,
                             const void *x, void *y, cudaStream_t stream);

/*
 * LayerNormalization (float32, or float16 X / Scale / B / Y when half != 0:
 * statistics and arithmetic in float, Y rounded once) of rows x cols. scale and bias (bias may be
 * NULL) hold cols values when dense; otherwise they are broadcast over the
 * nrank normalised dims ndims with strides s_str / b_str and are first
 * expanded into ws (s4d_cuda_layernorm_workspace bytes). mean / inv_std may
 * be NULL.
 */
typedef struct s4d_cuda_ln_args {
    int64_t rows, cols;
    int nrank;
    int64_t ndims[S4D_CUDA_RED_MAX_RANK];
    int64_t s_str[S4D_CUDA_RED_MAX_RANK], b_str[S4D_CUDA_RED_MAX_RANK];
    int scale_dense, bias_dense;
    float epsilon;
    int half; /* X, Scale, B and Y are float16; mean / inv_std stay float32 */
} s4d_cuda_ln_args;

size_t s4d_cuda_layernorm_workspace(const s4d_cuda_ln_args *a);
cudaError_t s4d_cuda_layernorm(const s4d_cuda_ln_args *a, const void *x, const void *scale,
                               const void *bias, void *y, float *mean, float *inv_std, void *ws,
                               size_t ws_size, cudaStream_t stream);

/* BatchNormalization, inference (float32): x [n, c, plane] -> y. */
cudaError_t s4d_cuda_batchnorm(int64_t n, int64_t c, int64_t plane, float epsilon, const float *x,
                               const float *scale, const float *bias, const float *mean,
                               const float *var, float *y, cudaStream_t stream);

/*
 * TopK along one axis: the k first of the n values at stride inner (outer *
 * inner slices) in the order largest first (smallest first with largest = 0),
 * ties by lower index, NaN above every number. Values keep their bits; indices
 * are int64. float32, float64, int32, int64 (int64 is ordered as double, as
 * the host reference orders it).
 */
int s4d_cuda_topk_dtype_ok(s4d_dtype dt);
size_t s4d_cuda_topk_workspace(int64_t outer, int64_t n, int64_t inner);
cudaError_t s4d_cuda_topk(s4d_dtype dt, int largest, int64_t outer, int64_t n, int64_t inner,
                          int64_t k, const void *x, void *values, int64_t *indices, void *ws,
                          size_t ws_size, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_REDUCE_H */
