/*
 * s4d/deformable_aggregation.h - the deformable feature aggregation op of
 * Sparse4D, framework-free: plain pointers, explicit sizes, a status return.
 *
 * One implementation serves the engine's CPU and CUDA backends, the engine
 * plugin and the PyTorch extension. Semantics: docs/ops/deformable_aggregation.md.
 *
 * Shapes (all tensors dense, row-major, the last dimension innermost):
 *   features          [bs, F, C]          FLOAT32 or FLOAT16
 *   spatial_shape     [N, L, 2]           INT32, (H, W) of each map
 *   scale_start_index [N, L]              INT32, first row of each map in F
 *   sampling_location [bs, A, P, N, 2]    FLOAT32, normalised (x, y)
 *   weights           [bs, A, P, N, L, G] FLOAT32 or FLOAT16
 *   output            [bs, A, C]          FLOAT32 or FLOAT16
 * C must be divisible by G; channel c belongs to group c / (C / G).
 *
 * Pointer residency: the *_cpu functions take host pointers; the *_cuda
 * functions take device pointers for every tensor, spatial_shape and
 * scale_start_index included. Nothing is retained after a call returns.
 *
 * Statuses: S4D_OK; S4D_ERR_INVALID_ARG (NULL tensor pointer, bad struct_size,
 * negative size); S4D_ERR_SHAPE (C % G != 0, a map outside the F rows, a
 * non-positive H or W); S4D_ERR_DTYPE (an element type not listed above);
 * S4D_ERR_NO_MEMORY; S4D_ERR_CUDA and S4D_ERR_UNSUPPORTED (CUDA functions in
 * a build without CUDA). On error, err->msg (when err is not NULL) names the
 * argument at fault with the expected and actual values.
 */
#ifndef S4D_DEFORMABLE_AGGREGATION_H
#define S4D_DEFORMABLE_AGGREGATION_H

#include "s4d/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes of one call. Set struct_size = sizeof(s4d_da_sizes). */
typedef struct s4d_da_sizes {
    size_t struct_size;
    int64_t batch;       /* bs */
    int64_t num_rows;    /* F: rows of features per batch item */
    int64_t channels;    /* C */
    int64_t num_cams;    /* N */
    int64_t num_levels;  /* L */
    int64_t num_groups;  /* G */
    int64_t num_anchors; /* A */
    int64_t num_points;  /* P */
} s4d_da_sizes;

/* Forward arguments. Set struct_size = sizeof(s4d_da_forward_args). */
typedef struct s4d_da_forward_args {
    size_t struct_size;
    s4d_da_sizes sizes;
    s4d_dtype features_dtype; /* FLOAT32 or FLOAT16 */
    s4d_dtype weights_dtype;  /* FLOAT32 or FLOAT16 */
    s4d_dtype output_dtype;   /* FLOAT32 or FLOAT16; accumulation is always FLOAT32 */
    const void *features;
    const int32_t *spatial_shape;
    const int32_t *scale_start_index;
    const float *sampling_location;
    const void *weights;
    void *output; /* fully overwritten */
} s4d_da_forward_args;

/*
 * Backward arguments. Set struct_size = sizeof(s4d_da_backward_args).
 * Each grad_* output may be NULL to skip it; each non-NULL one is fully
 * overwritten (no accumulation into prior contents). Gradients are FLOAT32
 * except grad_features and grad_weights, which take the dtype of features and
 * weights respectively.
 */
typedef struct s4d_da_backward_args {
    size_t struct_size;
    s4d_da_sizes sizes;
    s4d_dtype features_dtype;
    s4d_dtype weights_dtype;
    s4d_dtype grad_output_dtype;
    const void *features;
    const int32_t *spatial_shape;
    const int32_t *scale_start_index;
    const float *sampling_location;
    const void *weights;
    const void *grad_output;        /* [bs, A, C] */
    void *grad_features;            /* [bs, F, C] or NULL */
    float *grad_sampling_location;  /* [bs, A, P, N, 2] or NULL */
    void *grad_weights;             /* [bs, A, P, N, L, G] or NULL */
} s4d_da_backward_args;

/*
 * Checks sizes, dtypes and pointers (not tensor contents). Cheap; the
 * compute functions call it too.
 */
S4D_API s4d_status s4d_da_check_forward(const s4d_da_forward_args *args, s4d_errbuf *err);
S4D_API s4d_status s4d_da_check_backward(const s4d_da_backward_args *args, s4d_errbuf *err);

/*
 * Checks host copies of spatial_shape and scale_start_index: every map has
 * H, W >= 1 and lies inside [0, F). The CPU functions call it themselves;
 * CUDA callers should call it once at build/bind time on host copies (the
 * CUDA kernels additionally never read outside [0, F) rows).
 */
S4D_API s4d_status s4d_da_check_indices(const s4d_da_sizes *sizes, const int32_t *spatial_shape,
                                        const int32_t *scale_start_index, s4d_errbuf *err);

/*
 * CPU. num_threads <= 0 means all cores. Deterministic: the same inputs give
 * bitwise the same outputs for any num_threads.
 */
S4D_API s4d_status s4d_da_forward_cpu(const s4d_da_forward_args *args, int num_threads,
                                      s4d_errbuf *err);
S4D_API s4d_status s4d_da_backward_cpu(const s4d_da_backward_args *args, int num_threads,
                                       s4d_errbuf *err);

/*
 * CPU forward on the caller's threads and scratch, for hosts that own a
 * thread pool and must not allocate per call (the engine plugin's enqueue).
 * parallel_for(pool, n, grain, fn, arg) must call fn(arg, begin, end) on
 * chunks that cover [0, n) exactly once and return when all are done; NULL
 * runs inline. workspace: at least s4d_da_forward_cpu_workspace_size() bytes,
 * aligned to 16 bytes. Bitwise equal to s4d_da_forward_cpu.
 */
typedef void (*s4d_da_range_fn)(void *arg, int64_t begin, int64_t end);
typedef void (*s4d_da_parallel_for_fn)(void *pool, int64_t n, int64_t grain, s4d_da_range_fn fn,
                                       void *arg);
typedef struct s4d_da_cpu_exec {
    size_t struct_size;
    s4d_da_parallel_for_fn parallel_for;
    void *pool;
    void *workspace;
    size_t workspace_size;
} s4d_da_cpu_exec;

S4D_API size_t s4d_da_forward_cpu_workspace_size(const s4d_da_sizes *sizes);
S4D_API s4d_status s4d_da_forward_cpu_exec(const s4d_da_forward_args *args,
                                           const s4d_da_cpu_exec *exec, s4d_errbuf *err);

/* Algorithm choice for the CUDA forward. */
typedef enum s4d_da_algo {
    S4D_DA_ALGO_FAST = 0,         /* the fastest kernel s4d has */
    S4D_DA_ALGO_DETERMINISTIC = 1 /* bitwise identical run to run (no float atomics) */
} s4d_da_algo;

/*
 * CUDA. stream is a cudaStream_t (NULL means the legacy default stream; pass
 * a real stream). Work is enqueued on that stream only; nothing is allocated
 * beyond the caller's workspace, so calls are safe under CUDA-graph capture.
 * Returns S4D_ERR_UNSUPPORTED in a build without CUDA.
 *
 * workspace: device memory of at least s4d_da_*_workspace_size() bytes
 * (may be NULL when that size is 0).
 */
S4D_API size_t s4d_da_forward_workspace_size(const s4d_da_sizes *sizes, s4d_da_algo algo);
S4D_API size_t s4d_da_backward_workspace_size(const s4d_da_sizes *sizes);
S4D_API s4d_status s4d_da_forward_cuda(const s4d_da_forward_args *args, s4d_da_algo algo,
                                       void *workspace, void *stream, s4d_errbuf *err);
S4D_API s4d_status s4d_da_backward_cuda(const s4d_da_backward_args *args, void *workspace,
                                        void *stream, s4d_errbuf *err);

/*
 * CUDA backward with an algorithm choice. S4D_DA_ALGO_FAST may scatter
 * grad_features with float atomics, whose last bits vary run to run;
 * S4D_DA_ALGO_DETERMINISTIC gives bitwise the same gradients on every run (each
 * row of grad_features is written by one warp that adds its contributions in a
 * fixed order) and needs s4d_da_backward_workspace_size_algo() bytes of
 * workspace. grad_sampling_location and grad_weights are deterministic with
 * either. s4d_da_backward_cuda() is this function with S4D_DA_ALGO_FAST.
 * Additional status: S4D_ERR_INVALID_ARG when a needed workspace is NULL.
 */
S4D_API size_t s4d_da_backward_workspace_size_algo(const s4d_da_sizes *sizes, s4d_da_algo algo);
S4D_API s4d_status s4d_da_backward_cuda_algo(const s4d_da_backward_args *args, s4d_da_algo algo,
                                             void *workspace, void *stream, s4d_errbuf *err);

/* 1 when this build has CUDA kernels and a device is usable, else 0. */
S4D_API int s4d_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif /* S4D_DEFORMABLE_AGGREGATION_H */
