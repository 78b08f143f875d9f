/*
 * src/ops/pointwise.h - s4d::FusedPointwise: a chain (a tree) of element-wise
 * ops run as one layer, its program and typed parameters (internal), shared
 * by the host reference (src/ops/pointwise.c), the CPU kernel
 * (backend/cpu/pointwise_kernel.c) and the CUDA glue and kernel
 * (backend/cuda/ops/pointwise.c, kernels/pointwise.cu).
 *
 * The node (domain "s4d", opset 1) takes the tree's distinct external inputs
 * X0..Xn-1 (n <= S4D_PW_MAX_INPUTS), each broadcastable to the output's shape
 * (ONNX multidirectional broadcasting), and has one output. Attributes:
 *   program   INTS, 4 per instruction: opcode, a, b, c. Operands a, b, c name
 *             slots: 0..n-1 the inputs, n+k the result of instruction k
 *             (only earlier ones). Unused operands are -1. Clip: b and c
 *             index `constants` (the min and max; -1: no bound). Cast: b is
 *             the target dtype (float32, float16 or bool), c is -1. The last
 *             instruction's result is the output. At most
 *             S4D_PW_MAX_INSTRS instructions.
 *   constants FLOATS (optional): the immediates Clip reads.
 *   views     INTS (optional, built by the view folding pass
 *             src/passes/fold_views.c): inputs read through a strided view
 *             of their buffer instead of as their own shape. One record per
 *             such input: k, offset, rank, dims[rank], strides[rank]. Input
 *             k then takes part in broadcasting as a tensor of shape dims
 *             whose element i0..ir-1 is element offset + sum(i_d * strides[d])
 *             of input k's buffer. An input has one record at most; offsets
 *             and strides are >= 0 and every element of the view lies inside
 *             the input (infer() checks it: an engine file is untrusted).
 *             A Slice, Transpose, Gather of constant indices or Expand
 *             (through Reshapes) feeding an input, or reading the output, is
 *             folded into such views and runs no kernel of its own.
 * Every value of the program is float32, float16 or bool; the dtypes follow
 * the ONNX ops' rules (Add of two float16 values is float16, comparisons
 * give bool, ...). Float values are computed in float32 whatever their
 * dtype: a float16 result is rounded only where the program casts to
 * float16 and at the output, so a float16 chain fused differs from the
 * unfused layers, which round every intermediate (docs/precision.md).
 *
 * Opcode numbers are stored in engine files: append, never renumber.
 */
#ifndef S4D_OPS_POINTWISE_H
#define S4D_OPS_POINTWISE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define S4D_PW_MAX_INPUTS 8
#define S4D_PW_MAX_INSTRS 32
#define S4D_PW_MAX_SLOTS (S4D_PW_MAX_INPUTS + S4D_PW_MAX_INSTRS)
#define S4D_PW_MAX_CONSTS (2 * S4D_PW_MAX_INSTRS)
#define S4D_PW_MAX_RANK 8 /* S4D_MAX_RANK */

typedef enum s4d_pw_op {
    /* float (x) float -> float */
    S4D_PW_ADD = 0, S4D_PW_SUB = 1, S4D_PW_MUL = 2, S4D_PW_DIV = 3, S4D_PW_MIN = 4, S4D_PW_MAX = 5,
    /* float -> float */
    S4D_PW_NEG = 6, S4D_PW_ABS = 7, S4D_PW_EXP = 8, S4D_PW_LOG = 9, S4D_PW_SQRT = 10,
    S4D_PW_SIGMOID = 11, S4D_PW_RELU = 12, S4D_PW_TANH = 13, S4D_PW_RECIPROCAL = 14,
    S4D_PW_ATAN = 15,
    S4D_PW_CLIP = 16,   /* x, constants[b] or -inf, constants[c] or +inf */
    S4D_PW_WHERE = 17,  /* bool a ? b : c, b and c of one dtype */
    /* float (x) float -> bool (Equal also bool (x) bool) */
    S4D_PW_EQUAL = 18, S4D_PW_GREATER = 19, S4D_PW_LESS = 20, S4D_PW_GREATER_EQUAL = 21,
    S4D_PW_LESS_EQUAL = 22,
    /* bool -> bool */
    S4D_PW_AND = 23, S4D_PW_OR = 24, S4D_PW_XOR = 25, S4D_PW_NOT = 26,
    S4D_PW_CAST = 27    /* a to dtype b */
} s4d_pw_op;

#define S4D_PW_OP_COUNT 28

typedef struct s4d_pw_instr {
    int32_t op;        /* s4d_pw_op */
    int32_t a, b, c;   /* slots (see above); Clip and Cast as described */
    int32_t dtype;     /* the result's s4d_dtype */
    float lo, hi;      /* Clip's bounds (infinities where absent) */
} s4d_pw_instr;

typedef struct s4d_pointwise_params {
    int32_t num_inputs;
    int32_t num_instrs;
    int32_t in_dtype[S4D_PW_MAX_INPUTS];
    s4d_pw_instr code[S4D_PW_MAX_INSTRS];
    int32_t out_dtype;
    /* The output's shape with every input's element strides (0 along the dims it
       broadcasts), size-1 dims dropped and neighbours whose strides chain merged:
       rank >= 1; numel 0 for an empty output. */
    int32_t rank;
    int64_t dims[S4D_PW_MAX_RANK];
    int64_t strides[S4D_PW_MAX_INPUTS][S4D_PW_MAX_RANK];
    int64_t numel;
    /* Per input: the element its strides start from (a view's offset; else 0). */
    int64_t offset[S4D_PW_MAX_INPUTS];
} s4d_pointwise_params;

#ifndef __cplusplus
#include "ops/op.h"

/*
 * A backend's own float32 kernel for an instruction over n values (x to y),
 * in place of the host reference's loop: 1 when it ran, 0 to let the
 * reference run it. lo, hi: Clip's bounds.
 */
typedef int (*s4d_pw_act_fn)(int op, float lo, float hi, const float *x, float *y, int64_t n);

/* The host reference's run, with act (may be NULL) for the instructions it takes. */
s4d_status s4d_pointwise_run_with(s4d_op_ctx *ctx, s4d_pw_act_fn act);
#endif

#ifdef __cplusplus
}
#endif

#endif /* S4D_OPS_POINTWISE_H */
