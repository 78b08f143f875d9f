/*
 * src/ops/mlp.h - typed parameters of s4d::FusedMLP, shared by the host
 * reference (src/ops/mlp.c) and the CUDA kernel's glue
 * (src/backend/cuda/ops/mlp.c).
 *
 * FusedMLP is what the fusion pass (src/passes/fuse_mlp.c) makes of a chain
 * of Linear layers applied row by row: the head's anchor encoder, its
 * refinement and classification branches. Input 0 is X [..., C]; layer i
 * reads inputs 1 + 4i .. 4 + 4i: W [K_i, N_i], bias [N_i] (optional),
 * Scale and B of a LayerNormalization over the N_i values (Scale present
 * when the layer normalises, B optional). Per row of X:
 *   h_0 = X[row, begin .. begin + K_0)
 *   h_{i+1} = LN_i(act_i(h_i W_i + bias_i))       (act: ReLU or nothing)
 * and the output [..., N_last] is the last h. Attributes: activations and
 * norms (INTS, 0 or 1 per layer), epsilons (FLOATS, one per layer) and
 * input_begin (INT, default 0).
 */
#ifndef S4D_OPS_MLP_H
#define S4D_OPS_MLP_H

#include <stdint.h>

#include "ops/op.h"

#define S4D_MLP_MAX_LAYERS 8

typedef struct s4d_mlp_params {
    int layers;
    int64_t rows;   /* X's elements / C */
    int64_t x_cols; /* C: X's row stride */
    int64_t begin;  /* the first column of X that layer 0 reads */
    int64_t k[S4D_MLP_MAX_LAYERS], n[S4D_MLP_MAX_LAYERS];
    int relu[S4D_MLP_MAX_LAYERS], norm[S4D_MLP_MAX_LAYERS];
    int has_bias[S4D_MLP_MAX_LAYERS], has_shift[S4D_MLP_MAX_LAYERS];
    float eps[S4D_MLP_MAX_LAYERS];
    int64_t widest; /* the largest N_i (and K_0) */
    s4d_dtype dtype;
} s4d_mlp_params;

/* Input index of layer i's W; its bias, Scale and B follow. */
#define S4D_MLP_INPUT(i) (1 + 4 * (i))

#endif /* S4D_OPS_MLP_H */
