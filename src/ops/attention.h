/*
 * src/ops/attention.h - typed parameters of s4d::FusedAttention, shared by
 * the host reference (src/ops/attention.c) and the device kernels
 * (src/backend/cuda/ops/attention.c).
 *
 * FusedAttention is what the fusion pass makes of the chain PyTorch exports
 * for scaled dot-product attention after the scale:
 *   S = MatMul(Q, KT) [-> Where(mask, S, fill) | Where(mask, fill, S)]
 *     -> Softmax(axis = last) -> MatMul(P, V)
 * Q [..., Nq, D], KT [..., D, Nk], V [..., Nk, Dv], mask bool broadcastable
 * to [..., Nq, Nk]; output [..., Nq, Dv] ([..., Nq, H, Dv] with swap_out).
 * Batch dims broadcast as MatMul's.
 * infer writes the struct once; plain data, copied as bytes.
 */
#ifndef S4D_OPS_ATTENTION_H
#define S4D_OPS_ATTENTION_H

#include <stdint.h>

#include "ops/op.h"

typedef struct s4d_attention_params {
    int64_t nq, nk, d, dv;
    /* Output batch dims; strides in whole matrices of each operand, 0 where it broadcasts. */
    int batch_rank;
    int64_t batch[S4D_MAX_RANK];
    int64_t q_stride[S4D_MAX_RANK];
    int64_t k_stride[S4D_MAX_RANK];
    int64_t v_stride[S4D_MAX_RANK];
    int64_t nbatch;
    /* Mask (input 3): element strides over the batch dims, the queries and the keys. */
    int has_mask;
    int fill_where_true; /* 1: Where(mask, fill, S); 0: Where(mask, S, fill) */
    float mask_fill;
    int64_t m_stride[S4D_MAX_RANK];
    int64_t m_qstride, m_kstride;
    s4d_dtype dtype; /* of Q, KT, V and the output */
    /* Q's elements are multiplied by q_scale as they are read (attribute q_scale). */
    int has_q_scale;
    float q_scale;
    /* 1: the output is [..., Nq, H, Dv], the queries before the last batch dim H (swap_out). */
    int swap_out;
} s4d_attention_params;

#endif /* S4D_OPS_ATTENTION_H */
