/*
 * src/ops/reduce.h - typed parameters of the reduction and normalisation ops
 * (internal): Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax, LayerNormalization,
 * BatchNormalization, TopK.
 *
 * Each schema's infer() parses the attributes and constant inputs once and
 * writes one of these structs into ctx->params (when it is non-NULL); the host
 * reference and the backends' kernels read it instead of the attributes.
 * Shapes are static, so the structs also carry the geometry derived from the
 * input shape. Plain data, no pointers: the engine rebuilds them on load by
 * running infer again.
 */
#ifndef S4D_OPS_REDUCE_H
#define S4D_OPS_REDUCE_H

#include <stdint.h>

#include "ops/op.h"

typedef enum s4d_reduce_kind {
    S4D_REDUCE_SUM = 0,
    S4D_REDUCE_MEAN,
    S4D_REDUCE_MAX,
    S4D_REDUCE_MIN,
    S4D_REDUCE_PROD,
    S4D_REDUCE_SUM_SQUARE,
    S4D_REDUCE_L1,
    S4D_REDUCE_L2,
    S4D_REDUCE_LOG_SUM,
    S4D_REDUCE_LOG_SUM_EXP,
    S4D_REDUCE_ARGMAX,
    S4D_REDUCE_ARGMIN
} s4d_reduce_kind;

/*
 * An input split into kept dims (one output element per combination) and
 * reduced dims, both in input order with their element strides. Size-1 dims
 * are dropped and neighbours of the same kind that are adjacent in memory are
 * merged, so a reduction over trailing dims is nk = 1 or 0 kept dims and one
 * reduced dim of stride 1.
 */
typedef struct s4d_reduce_geom {
    int nk, nr;
    int64_t kdims[S4D_MAX_RANK], kst[S4D_MAX_RANK];
    int64_t rdims[S4D_MAX_RANK], rst[S4D_MAX_RANK];
    int64_t nout; /* output elements (0 when a kept dim is 0) */
    int64_t nred; /* elements reduced into each (0 when a reduced dim is 0) */
} s4d_reduce_geom;

/* Reduce* and ArgMax/ArgMin. */
typedef struct s4d_reduce_params {
    s4d_reduce_kind kind;
    int keepdims;
    int noop;          /* Reduce*: empty axes with noop_with_empty_axes, output = input */
    int select_last;   /* ArgMax/ArgMin: ties give the last index */
    int mask[S4D_MAX_RANK]; /* 1 for each reduced axis of the input */
    s4d_reduce_geom geom;
} s4d_reduce_params;

/* Softmax / LogSoftmax: n values at stride inner, outer * inner times. */
typedef struct s4d_softmax_params {
    int log;
    int axis;
    int64_t outer, n, inner;
} s4d_softmax_params;

/*
 * The float32 Softmax of one contiguous row of n >= 1 values (y may be x),
 * exactly as the Softmax layer computes it: s4d::FusedAttention's host
 * reference normalises its scores with it so that fusing changes no bit.
 */
void s4d_softmax_row_f32(const float *x, float *y, int64_t n);

/* A LayerNormalization row's mean and 1 / sqrt(var + eps), accumulated in double as the
   kernel does (the fusions that normalise call it so that fusing changes no bit). */
void s4d_layernorm_row_stats(const float *x, int64_t n, float eps, float *mean, float *inv_std);

/* LayerNormalization: rows of cols values; Scale and B broadcast over the cols. */
typedef struct s4d_layernorm_params {
    int axis;
    int64_t rows, cols;
    int64_t s_str[S4D_MAX_RANK], b_str[S4D_MAX_RANK]; /* over the normalised dims */
    int nrank;
    int64_t ndims[S4D_MAX_RANK];
    int scale_dense, bias_dense, has_bias;
    float epsilon;
} s4d_layernorm_params;

/* BatchNormalization (inference): planes of `plane` values, channel = plane index % c. */
typedef struct s4d_batchnorm_params {
    float epsilon;
    int64_t n, c, plane;
} s4d_batchnorm_params;

/* TopK: k of the n values at stride inner, outer * inner times; always sorted. */
typedef struct s4d_topk_params {
    int axis;
    int64_t k, n, outer, inner;
    int largest;
} s4d_topk_params;

#endif /* S4D_OPS_REDUCE_H */
