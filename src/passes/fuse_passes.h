/*
 * src/passes/fuse_passes.h - build-time fusions (internal). Each pass
 * rewrites matching chains of live S4D_LAYER_OP nodes into one node and
 * marks the rest dead; values stay, unused ones are dropped by the plan
 * builder. A chain is fused only when its intermediate values have exactly
 * one consumer and are not graph outputs, when all its nodes sit on one
 * device, and when that device's backend has a kernel for the fused op:
 * fusions are what the target's kernels offer.
 *
 * Call order (the builder): s4d_pass_infer_and_fold, s4d_pass_simplify_movement,
 * placement, then s4d_pass_fuse, then s4d_pass_remove_dead. Shapes must be
 * known and constants folded; every rewritten node is re-inferred here
 * (workspace included).
 *
 * The fused ops are schemas of domain "s4d" (src/ops):
 *   FusedConv   (X, W, [B], [Z]) attr activation "" | "Relu": Conv + B, + Z, act
 *   FusedMatMul (A, B, [bias], [Scale, [B]], [R]) attr activation "" | "Relu", norm, epsilon:
 *               MatMul + bias, act, + R, LayerNormalization
 *   FusedConvAct (X, W, [B], [Z]) attr activation, activation_alpha/_beta:
 *               FusedConv + Clip, HardSwish, HardSigmoid, LeakyRelu, Sigmoid or SiLU
 *   FusedMBConv (X, [W1], [B1], W2, [B2], W3, [B3], [Z]) attr the three activations,
 *               dw_strides, dw_pads: expand 1x1 -> depthwise -> project 1x1 (+ Z)
 *   FusedAttention (Q, KT, V, [mask]) attr mask_fill, fill_where_true:
 *               MatMul -> [Where(mask, constant)] -> Softmax(last axis) -> MatMul
 *   FusedPointwise (X0..Xn-1) attr program, constants: a tree of element-wise ops
 *   FusedMLP    (X, then W, [bias], [Scale], [B] per layer) attr activations, norms, epsilons,
 *               input_begin: a chain of FusedMatMuls applied row by row (ops/mlp.h)
 * and the LayerNormalization kernel (opset 17) for the decomposed pattern.
 */
#ifndef S4D_PASSES_FUSE_PASSES_H
#define S4D_PASSES_FUSE_PASSES_H

#include "ir/ir.h"

/* All fusions below, in the order that lets each build on the previous. */
s4d_status s4d_pass_fuse(s4d_ir_graph *g, char *err, size_t errsz);

/* Conv -> BatchNormalization (constant weights and statistics): folds BN into W and B. */
s4d_status s4d_pass_fuse_conv_bn(s4d_ir_graph *g, char *err, size_t errsz);
/* Conv [-> Add(residual of the same shape)] [-> Relu] -> FusedConv. */
s4d_status s4d_pass_fuse_conv_act(s4d_ir_graph *g, char *err, size_t errsz);
/* Conv or FusedConv [-> Clip | HardSwish | HardSigmoid | LeakyRelu | Sigmoid | Sigmoid+Mul]
   -> FusedConvAct (fuse_conv_act_more.c). */
s4d_status s4d_pass_fuse_conv_act_more(s4d_ir_graph *g, char *err, size_t errsz);
/* [Conv 1x1 ->] depthwise Conv -> Conv 1x1 (each possibly fused above) -> FusedMBConv when the
   device has a kernel for it (fuse_mbconv.c); S4D_FUSE_MBCONV=0 turns it off. */
s4d_status s4d_pass_fuse_mbconv(s4d_ir_graph *g, char *err, size_t errsz);
/*
 * MatMul(Add(X, Y), constant W [K, N]) where X and Y broadcast to at least twice their rows
 * together -> Add(MatMul(X, W) [+ the bias after it], MatMul(Y, W)) (distribute_matmul.c);
 * before the MatMul fusions. S4D_DISTRIBUTE_MATMUL=0 turns it off.
 */
s4d_status s4d_pass_distribute_matmul(s4d_ir_graph *g, char *err, size_t errsz);
/*
 * Products by constant matrices with only a bias or a residual sum between them, folded at build
 * (fold_linear.c): MatMul(MatMul(X, W1) [+ b1], W2) -> MatMul(X, W1 W2) [+ b]; MatMul(R +
 * (MatMul(Z, Wo) [+ bo]), Wf) -> (MatMul(Z, Wo Wf) [+ b]) + MatMul(R, Wf). Float32, where the
 * folded product does no more multiplications; before the MatMul fusions. S4D_FOLD_LINEAR=0
 * turns it off.
 */
s4d_status s4d_pass_fold_linear(s4d_ir_graph *g, char *err, size_t errsz);
/* MatMul(A, constant 2-D W) [-> Add(constant [N] bias)] [-> Relu] -> FusedMatMul. */
s4d_status s4d_pass_fuse_matmul_add(s4d_ir_graph *g, char *err, size_t errsz);
/*
 * Chains of MatMul / FusedMatMul layers with constant 2-D weights, each reading only the one before
 * [, the first after a Slice of the last axis] -> FusedMLP, on devices that are not host memory and
 * whose kernel takes the chain (fuse_mlp.c); S4D_FUSE_MLP=0 turns it off.
 */
s4d_status s4d_pass_fuse_mlp(s4d_ir_graph *g, char *err, size_t errsz);
/*
 * Add(P, R) [-> LayerNormalization(last axis, constant Scale and B)] where P is a MatMul, or a
 * FusedMatMul without activation and normalisation, read by the Add alone, and R has the output's
 * shape: one FusedMatMul with residual R (after the MLP fusion, which takes plain chains first);
 * S4D_FUSE_RESIDUAL=0 turns it off.
 */
s4d_status s4d_pass_fuse_matmul_residual(s4d_ir_graph *g, char *err, size_t errsz);
/*
 * MatMul(Q, KT) [-> Where(bool mask, S, constant scalar) or Where(mask, constant, S)]
 * -> Softmax(over exactly the last axis) -> MatMul(P, V) -> FusedAttention, float32 or
 * float16, when the device's kernel supports the fused node (fuse_attention.c).
 */
s4d_status s4d_pass_fuse_attention(s4d_ir_graph *g, char *err, size_t errsz);
/*
 * ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div
 * [-> Mul(gamma)] [-> Add(beta)] over the last axis -> LayerNormalization.
 */
s4d_status s4d_pass_fuse_layernorm(s4d_ir_graph *g, char *err, size_t errsz);
/* Trees of element-wise nodes -> FusedPointwise (fuse_pointwise.c); runs last. */
s4d_status s4d_pass_fuse_pointwise(s4d_ir_graph *g, char *err, size_t errsz);

/*
 * Slice, Gather, Concat and Transpose chains rewritten to move fewer bytes in
 * fewer layers, outputs bit for bit the same (simplify_movement.c); runs
 * after s4d_pass_infer_and_fold and before placement, on any device:
 *   Slice(Concat(x1..xn)) inside one xk          -> Slice(xk), or xk
 *   Gather(Concat(..), constant indices in xk)   -> Gather(xk, indices - offset)
 *   Gather(Slice(x) on the gather axis only)     -> Gather(x, indices + start)
 *   Concat(.., Concat(a, b) read once, ..)       -> Concat(.., a, b, ..), same axis
 *   Slice(Slice(x)), step 1                      -> Slice(x)
 *   Transpose(Transpose(x))                      -> Transpose(x), or x
 *   Transpose moving only size-1 dims            -> Reshape (a view in the plan)
 *   Slice of everything, one-input Concat        -> the input
 *   Unsqueeze/Reshape (size-1 dims only) of a Concat, read only by Slices and
 *   Gathers within one input xk                  -> the same view of xk
 *   a Slice, Gather, Transpose or Concat repeating an earlier one -> that one
 *   x + 0, x - 0, x * 1, x / 1 by a constant, output of x's shape and dtype,
 *   bit for bit x (integers; floats: x * 1, x / 1, x - (+0), x + (-0)) -> x
 */
s4d_status s4d_pass_simplify_movement(s4d_ir_graph *g, char *err, size_t errsz);

/*
 * Channels-last convolutions (layout_nhwc.c), after the fusions: each 2-D Conv or FusedConv whose
 * device runs s4d::FusedConv with layout "NHWC" becomes Transpose(X) -> FusedConv(NHWC, W as
 * [M, kh, kw, C/group]) -> Transpose back; Transposes that cancel, or that a Resize or a Reshape
 * chain lets through, are then removed. any_device 0: convolutions placed on a host-memory
 * device (a CPU fallback of a CUDA build) keep NCHW.
 */
s4d_status s4d_pass_layout_nhwc(s4d_ir_graph *g, int any_device, char *err, size_t errsz);

/*
 * Slice, Transpose, Gather (constant indices) and Expand chains before a
 * FusedPointwise input, or after its output, folded into the layer as strided
 * views (fold_views.c, ops/pointwise.h's views); after s4d_pass_layout_nhwc,
 * before the precision pass. S4D_FOLD_VIEWS=0 turns it off.
 */
s4d_status s4d_pass_fold_views(s4d_ir_graph *g, char *err, size_t errsz);
/* Whether value v is made on dev by movement that s4d_pass_fold_views would fold into a reader. */
int s4d_fold_views_reads_movement(const s4d_ir_graph *g, int v, s4d_device dev);
/* Whether value v (uses: s4d_fuse_use_counts) is read only by movement that the pass would fold
   into its producer. */
int s4d_fold_views_feeds_movement(const s4d_ir_graph *g, const int *uses, int v, s4d_device dev);

/* Helpers shared by the fusion passes (fuse_common.c). */

/* Per value: live consumer count, +1 when a graph output. Caller frees. */
int *s4d_fuse_use_counts(const s4d_ir_graph *g);
/* Whether environment variable var is "0": a pass's (or a fusion's) off switch. */
int s4d_fuse_switched_off(const char *var);
/* The one live node that consumes value v, or -1 (also when it sits on another device). */
int s4d_fuse_consumer(const s4d_ir_graph *g, int v);
/* Whether node ni is a live op node of (ONNX domain) op_type. */
int s4d_fuse_is_op(const s4d_ir_graph *g, int ni, const char *op_type);
/* Whether node ni's device has a kernel for (domain, op_type, opset). */
int s4d_fuse_can(const s4d_ir_graph *g, int ni, const char *domain, const char *op_type, int opset);
/* Whether value v (-1: none) is float32. */
int s4d_fuse_is_f32(const s4d_ir_graph *g, int v);
/* Constant value index or NULL data: returns the value's tensor when it is a constant, else NULL. */
const s4d_tensor *s4d_fuse_const(const s4d_ir_graph *g, int v);
/* Appends a constant float32 value holding data (ownership passes); -1 on OOM. */
int s4d_fuse_add_const(s4d_ir_graph *g, const char *name, float *data, int rank, const int64_t *dims);
/* Appends a STRING (FLOAT) attribute to node n; 0 on success. */
int s4d_fuse_add_attr_string(s4d_ir_node *n, const char *name, const char *value);
int s4d_fuse_add_attr_float(s4d_ir_node *n, const char *name, float value);
/* Fill *a (zeroed first) with a named STRING, FLOAT or INTS attribute; 0 on success, -1 when out
   of memory (what was allocated stays in *a for s4d_attr_clear). */
int s4d_fuse_attr_string(s4d_attr *a, const char *name, const char *v);
int s4d_fuse_attr_float(s4d_attr *a, const char *name, float v);
int s4d_fuse_attr_ints(s4d_attr *a, const char *name, const int64_t *v, size_t n);
int s4d_fuse_attr_floats(s4d_attr *a, const char *name, const float *v, size_t n);
int s4d_fuse_attr_int(s4d_attr *a, const char *name, int64_t v);
/* Sets a node's op (domain, op_type, opset) and its schema; 0 on success. */
int s4d_fuse_set_op(s4d_ir_node *n, const char *domain, const char *op_type, int opset);
/* Re-runs infer (and workspace_size) of node ni, updating its output values. */
s4d_status s4d_fuse_infer_node(s4d_ir_graph *g, int ni, char *err, size_t errsz);
/* s4d_fuse_infer_node, then checks that node ni's device has a kernel that takes it. */
s4d_status s4d_fuse_reinfer(s4d_ir_graph *g, int ni, char *err, size_t errsz);
/*
 * Whether node at's device would run s4d::op_type (opset 1) on values ins[0..nin) with attrs,
 * giving node at's output shape and dtype: a stand-in node is inferred and offered to the
 * kernel's supports() before anything in the graph changes, so a refusal leaves it as it is.
 * *ok is 0 when it would not; S4D_ERR_NO_MEMORY is the only error.
 */
s4d_status s4d_fuse_supported(const s4d_ir_graph *g, int at, const char *op_type, const int *ins, int nin,
                              s4d_attr *attrs, int na, int *ok);

/* s4d_fuse_supported with the output the stand-in must infer given (NULL: node at's output). */
s4d_status s4d_fuse_supported_as(const s4d_ir_graph *g, int at, const char *op_type, const int *ins, int nin,
                                 s4d_attr *attrs, int na, const s4d_tensor *want, int *ok);

/* Where an appended node goes in node order: just before or after an original node. */
typedef struct s4d_fuse_anchor {
    int node;
    int after;
} s4d_fuse_anchor;
/* Puts the appended nodes [first, num_nodes) next to their anchors (anchors[k] for node first + k),
   keeping the order topological; producers follow their nodes. */
s4d_status s4d_fuse_place_appended(s4d_ir_graph *g, int first, const s4d_fuse_anchor *anchors, char *err,
                                   size_t errsz);
/* Appends {node, after} to the growing array *anchors (*num used of *cap); -1 when out of memory. */
int s4d_fuse_push_anchor(s4d_fuse_anchor **anchors, int *num, int *cap, int node, int after);
/* Appends the node op_type(a, b) -> out named name (copied), of node at's domain, opset and
   device, anchored right after node at; its index, or -1 when out of memory. */
int s4d_fuse_append_binary(s4d_ir_graph *g, s4d_fuse_anchor **anchors, int *num, int *cap, int at, const char *name,
                           const char *op_type, int a, int b, int out);

#endif
