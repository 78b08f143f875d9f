/*
 * src/ops/dense.h - typed parameters of the dense ops (Conv, FusedConv,
 * ConvTranspose, MatMul, FusedMatMul, Gemm, the pools, Einsum), shared by
 * the host reference (src/ops) and the device kernels (src/backend/...).
 *
 * Each schema's infer() parses the attributes and checks the shapes once and
 * writes one of these structs into ctx->params (params_size bytes); run(),
 * workspace_size() and every backend kernel read it from there. The structs
 * are plain data: no pointers, copied as bytes.
 */
#ifndef S4D_OPS_DENSE_H
#define S4D_OPS_DENSE_H

#include <stdint.h>

#include "ops/conv_common.h"
#include "ops/op.h"

/*
 * Conv / FusedConv. Spatial dims are held as three (conv_common.h): g.img is
 * the input side, g.grid the output side, the leading unused slots of size 1.
 */
typedef struct s4d_conv_params {
    s4d_conv_geom g;
    int64_t n, c, m, group, cg, mg; /* batch, in/out channels, groups, per group */
    int has_bias, has_z, relu;      /* FusedConv: residual Z and ReLU */
    int direct;                     /* 1x1, stride 1, no padding: no im2col */
    s4d_dtype dtype;                /* of X, W, B, Z and Y */
    int nhwc;                       /* FusedConv layout "NHWC" (2-D only): X, Z, Y [N, H, W, C],
                                       W [M, kh, kw, C/group] */
} s4d_conv_params;

/* ConvTranspose: g.img is the OUTPUT side (Y), g.grid the input side (X). */
typedef struct s4d_convt_params {
    s4d_conv_geom g;
    int64_t n, c, m, group, cg, mg; /* c = X channels, m = Y channels */
    int has_bias;
    s4d_dtype dtype;
} s4d_convt_params;

/*
 * MatMul / FusedMatMul: numpy matmul of A [..., m, k] and B [..., k, n]
 * (1-D operands as a row / column vector), batch dims broadcast; strides in
 * whole matrices, 0 where an operand broadcasts.
 */
typedef struct s4d_matmul_params {
    int64_t m, n, k;
    int batch_rank;
    int64_t batch[S4D_MAX_RANK];
    int64_t a_stride[S4D_MAX_RANK];
    int64_t b_stride[S4D_MAX_RANK];
    int64_t nbatch;
    int has_bias, relu; /* FusedMatMul: bias over the last axis, then ReLU */
    int residual;        /* FusedMatMul: then + input 5 (the output's shape) */
    int norm, norm_bias; /* FusedMatMul: then LayerNormalization over the last axis (Scale, B) */
    float epsilon;
    s4d_dtype dtype;
} s4d_matmul_params;

/* Gemm: Y[m, n] = alpha * A' B' + beta * C, C broadcast through its strides. */
typedef struct s4d_gemm_params {
    int64_t m, n, k;
    int ta, tb;
    float alpha, beta;
    int has_c;
    int64_t c_rs, c_cs; /* C's row and column strides, 0 where it broadcasts */
    s4d_dtype dtype;
} s4d_gemm_params;

typedef enum s4d_pool_kind { S4D_POOL_MAX = 0, S4D_POOL_AVG = 1 } s4d_pool_kind;

/* MaxPool / AveragePool: g.img the input side, g.grid the output side. */
typedef struct s4d_pool_params {
    s4d_conv_geom g;
    int64_t n, c;
    s4d_pool_kind kind;
    int count_include_pad, storage_order, with_indices;
    int nhwc; /* s4d::MaxPool (layout NHWC, 2-D): X and Y [N, H, W, C], no Indices */
} s4d_pool_params;

/* GlobalAveragePool / GlobalMaxPool: one value per (n, c) plane. */
typedef struct s4d_gpool_params {
    int64_t planes; /* N * C */
    int64_t plane;  /* product of the spatial dims */
} s4d_gpool_params;

/* Einsum (one or two operands, letters a-z A-Z as ids 0..51). */
#define S4D_EINSUM_LETTERS 52

typedef struct s4d_einsum_term {
    int n;
    int l[S4D_MAX_RANK];
} s4d_einsum_term;

typedef struct s4d_einsum_params {
    int nops;
    s4d_einsum_term in[2], out;
    int64_t size[S4D_EINSUM_LETTERS];
    /* Two operands: letters grouped as batch (b), rows (m), columns (n), contracted (k). */
    int nb, nm, nn, nk;
    int bl[S4D_MAX_RANK], ml[S4D_MAX_RANK], nl[S4D_MAX_RANK], kl[S4D_MAX_RANK];
    int64_t B, M, N, K;
    int ta, tb;         /* operand read transposed in place */
    int a_copy, b_copy; /* operand permuted (and reduced) into the workspace */
    int c_copy;         /* result permuted into the output */
    int f64;            /* float64 operands */
} s4d_einsum_params;

#endif /* S4D_OPS_DENSE_H */
