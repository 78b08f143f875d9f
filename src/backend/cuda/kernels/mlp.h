/*
 * src/backend/cuda/kernels/mlp.h - s4d::FusedMLP's kernel (mlp.cu): a chain
 * of up to S4D_CUDA_MLP_MAX_LAYERS Linear layers, each + bias, ReLU and
 * LayerNormalization optional, applied to every row of X (ops/mlp.h gives
 * the semantics). Strict float32, deterministic, graph-capturable; plain
 * pointers, 64-bit sizes, the caller's stream; returns cudaGetLastError()
 * after the launch.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_MLP_H
#define S4D_BACKEND_CUDA_KERNELS_MLP_H

#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define S4D_CUDA_MLP_MAX_LAYERS 8
/* The widest layer (K of the first, N of every one) the kernel keeps on chip. */
#define S4D_CUDA_MLP_MAX_WIDTH 256

/*
 * Above this many rows, a layer of more than S4D_CUDA_MLP_MANY_ROWS_MAX_WEIGHTS weights makes
 * the kernel refuse the chain: each block then streams the whole W from L2 for its 8 rows, and
 * cuBLASLt's tiled products are faster (H200: the v3 head's 256-wide chains on 900 rows took
 * the TF32 head from 3.43 to 3.95 ms; with W staged in tiles, the float32 head's graph from
 * 4.89 to 5.64 ms, 2026-12-04).
 */
#define S4D_CUDA_MLP_MANY_ROWS 256
#define S4D_CUDA_MLP_MANY_ROWS_MAX_WEIGHTS (128 * 128)

typedef struct s4d_cuda_mlp_layer {
    const float *w;     /* [k, n], row major */
    const float *bias;  /* [n] or NULL */
    const float *scale; /* LayerNormalization's Scale [n]; NULL: the layer does not normalise */
    const float *shift; /* its B [n] or NULL */
    int k, n, relu;
    float eps;
} s4d_cuda_mlp_layer;

typedef struct s4d_cuda_mlp_desc {
    int layers;
    int64_t rows;   /* rows of X and of the output */
    int64_t x_cols; /* X's row stride */
    int64_t begin;  /* the first column of X that layer 0 reads */
    s4d_cuda_mlp_layer layer[S4D_CUDA_MLP_MAX_LAYERS];
} s4d_cuda_mlp_desc;

/* 1 when the kernel takes the chain's sizes (pointers aside); else 0 and why (static text). */
int s4d_cuda_mlp_ok(const s4d_cuda_mlp_desc *d, const char **why);

/*
 * 1 when the kernel is expected to beat separate products on the chain (the
 * S4D_CUDA_MLP_MANY_ROWS rule); else 0 and why. A speed rule: the kernel runs
 * any chain s4d_cuda_mlp_ok takes.
 */
int s4d_cuda_mlp_preferred(const s4d_cuda_mlp_desc *d, const char **why);

/* y [rows, n_last] = the chain applied to each row of x. */
cudaError_t s4d_cuda_mlp(const s4d_cuda_mlp_desc *d, const float *x, float *y, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_MLP_H */
