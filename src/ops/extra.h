/*
 * src/ops/extra.h - typed parameters of the ops that real-world exports need
 * beyond the core set (internal): Pad, the recurrent ops (RNN, GRU, LSTM),
 * the normalisations (InstanceNormalization, LRN,
 * MeanVarianceNormalization) and the small layout and arithmetic ops.
 *
 * As everywhere in src/ops, infer() fills the struct once (ctx->params) and
 * run() and any backend kernel read it. Plain data, no pointers.
 */
#ifndef S4D_OPS_EXTRA_H
#define S4D_OPS_EXTRA_H

#include <stdint.h>

#include "ops/dense.h"
#include "ops/op.h"

/* ---- Pad ---- */

typedef enum s4d_pad_mode {
    S4D_PAD_CONSTANT = 0,
    S4D_PAD_REFLECT = 1, /* mirror without repeating the edge */
    S4D_PAD_EDGE = 2,    /* repeat the edge */
    S4D_PAD_WRAP = 3     /* periodic (opset 19) */
} s4d_pad_mode;

/*
 * Per axis: the input is first cropped by the negative pads (keep [lo, hi)),
 * then padded by the positive ones (before[d] in front, the rest behind).
 * value: the constant in the data's dtype when value_at_run == 0; otherwise
 * it is the scalar input 2, read when the op runs.
 */
typedef struct s4d_pad_params {
    int32_t rank;
    int32_t mode; /* s4d_pad_mode */
    int64_t lo[S4D_MAX_RANK], hi[S4D_MAX_RANK], before[S4D_MAX_RANK];
    int32_t value_at_run;
    uint8_t value[8];
} s4d_pad_params;

/* ---- RNN, GRU, LSTM ---- */

typedef enum s4d_rnn_kind { S4D_RNN_SIMPLE = 0, S4D_RNN_GRU = 1, S4D_RNN_LSTM = 2 } s4d_rnn_kind;

typedef enum s4d_rnn_act {
    S4D_ACT_RELU, S4D_ACT_TANH, S4D_ACT_SIGMOID, S4D_ACT_AFFINE, S4D_ACT_LEAKY_RELU,
    S4D_ACT_THRESHOLDED_RELU, S4D_ACT_SCALED_TANH, S4D_ACT_HARD_SIGMOID, S4D_ACT_ELU,
    S4D_ACT_SOFTSIGN, S4D_ACT_SOFTPLUS
} s4d_rnn_act;

#define S4D_RNN_MAX_ACTS 6 /* 3 functions per direction (LSTM), 2 directions */

/*
 * Gates per kind: RNN 1 (i), GRU 3 (z, r, h), LSTM 4 (i, o, f, c), in ONNX's
 * order in W, R and B. Activations per direction: RNN f; GRU f, g; LSTM f,
 * g, h.
 */
typedef struct s4d_rnn_params {
    int32_t kind;           /* s4d_rnn_kind */
    int32_t gates;
    int32_t num_dirs;       /* 1 or 2 */
    int32_t reverse;        /* one direction, run backwards */
    int32_t layout;         /* 0: [seq, batch, ...]; 1: [batch, seq, ...] */
    int32_t linear_before_reset; /* GRU */
    int32_t input_forget;   /* LSTM: couple the forget gate to the input gate */
    int32_t has_b, has_seq_lens, has_h0, has_c0, has_p;
    int32_t num_acts;
    int32_t act[S4D_RNN_MAX_ACTS];
    float alpha[S4D_RNN_MAX_ACTS], beta[S4D_RNN_MAX_ACTS];
    float clip;             /* 0: none */
    int64_t seq, batch, input, hidden;
} s4d_rnn_params;

/* ---- normalisations ---- */

/* InstanceNormalization, MeanVarianceNormalization: mean and variance over
   `inner` contiguous elements of each of `outer` slices (MVN: over its axes,
   moved together by the generic path when they are not the trailing ones). */
typedef struct s4d_norm_params {
    float epsilon;
    int64_t n, c, inner;      /* InstanceNormalization: N, C, spatial size */
    int32_t rank;
    int32_t axes_mask;        /* MVN: bit d set when axis d is reduced */
} s4d_norm_params;

/* LRN across channels. */
typedef struct s4d_lrn_params {
    float alpha, beta, bias;
    int64_t size;
    int64_t n, c, inner;
} s4d_lrn_params;

/* ---- s4d::FusedConvAct: FusedConv followed by an activation ---- */

typedef enum s4d_conv_act {
    S4D_CONV_ACT_NONE = 0,
    S4D_CONV_ACT_RELU,
    S4D_CONV_ACT_CLIP,          /* alpha = min, beta = max */
    S4D_CONV_ACT_LEAKY_RELU,    /* alpha */
    S4D_CONV_ACT_SIGMOID,
    S4D_CONV_ACT_SILU,          /* x * sigmoid(x) */
    S4D_CONV_ACT_HARD_SIGMOID,  /* alpha, beta */
    S4D_CONV_ACT_HARD_SWISH
} s4d_conv_act;

/* The FusedConv params first (the wrapped schema writes them), then the activation. */
typedef struct s4d_conv_act_params {
    s4d_conv_params conv;
    int32_t act; /* s4d_conv_act */
    float alpha, beta;
} s4d_conv_act_params;

/*
 * The activation attributes "<prefix>activation", "<prefix>activation_alpha"
 * and "<prefix>activation_beta" (prefix "" for FusedConvAct's): the names
 * above, "" for none when allow_none, with ONNX's defaults (LeakyRelu alpha
 * 0.01, HardSigmoid 0.2 and 0.5, Clip the whole line). fused_conv_act.c.
 */
s4d_status s4d_conv_act_parse(s4d_op_ctx *ctx, const char *prefix, int allow_none, int32_t *act,
                              float *alpha, float *beta);
/* The attribute value of an s4d_conv_act ("" for NONE), NULL when out of range. */
const char *s4d_conv_act_name(int act);
/* One activation in float32 as the host references apply it (NaN passes through). */
float s4d_conv_act_apply(int act, float alpha, float beta, float v);

/* ---- s4d::FusedMBConv: expand 1x1 -> depthwise kxk -> project 1x1 (fused_mbconv.c) ---- */

/* Inputs of s4d::FusedMBConv; the optional ones absent as index -1. */
enum {
    S4D_MBCONV_X = 0, S4D_MBCONV_W1, S4D_MBCONV_B1, S4D_MBCONV_W2, S4D_MBCONV_B2, S4D_MBCONV_W3,
    S4D_MBCONV_B3, S4D_MBCONV_Z, S4D_MBCONV_NUM_INPUTS
};

/* Everything resolved: shapes, padding, which optional inputs are there, the three activations
   (s4d_conv_act; index 0 expand, 1 depthwise, 2 project; Clip: alpha = min, beta = max). */
typedef struct s4d_fused_mbconv_params {
    int64_t n, c, h, w;       /* X */
    int64_t mid, m, k;        /* expanded channels, output channels, depthwise kernel k x k */
    int64_t stride;           /* depthwise, both ways */
    int64_t pad_top, pad_left, pad_bottom, pad_right;
    int64_t ho, wo;           /* Y is [n][m][ho][wo] */
    int32_t has_expand, has_b1, has_b2, has_b3, has_z;
    int32_t act[3];
    float alpha[3], beta[3];
} s4d_fused_mbconv_params;

/* ---- layout ---- */

/* DepthToSpace (dcr: the DCR order, else CRD) and SpaceToDepth. */
typedef struct s4d_block_params {
    int64_t block;
    int32_t dcr;
    int64_t n, c, h, w; /* the input */
} s4d_block_params;

/* Trilu: keep the upper (or lower) triangle from diagonal k; k_at_run: read input 1 when run. */
typedef struct s4d_trilu_params {
    int32_t upper, k_at_run;
    int64_t k;
} s4d_trilu_params;

/* EyeLike: ones on diagonal k of a 2-D output of dtype. */
typedef struct s4d_eyelike_params {
    int32_t dtype;
    int64_t k;
} s4d_eyelike_params;

/* ReverseSequence. */
typedef struct s4d_revseq_params {
    int32_t batch_axis, time_axis;
} s4d_revseq_params;

/* OneHot: depth and the axis of the new dimension (normalised). */
typedef struct s4d_onehot_params {
    int64_t depth;
    int32_t axis;
} s4d_onehot_params;

/* ---- arithmetic ---- */

/* CumSum: axis (axis_at_run: read input 1 when run), exclusive, reverse. */
typedef struct s4d_cumsum_params {
    int32_t axis, axis_at_run, exclusive, reverse;
} s4d_cumsum_params;

/* Shrink. */
typedef struct s4d_shrink_params {
    float bias, lambd;
} s4d_shrink_params;

/* Hardmax: rows of `inner` elements along which the first maximum becomes 1 (strided by `stride`). */
typedef struct s4d_hardmax_params {
    int64_t outer, len, stride;
} s4d_hardmax_params;

/* BitShift: left or right. */
typedef struct s4d_bitshift_params {
    int32_t left;
} s4d_bitshift_params;

/* Dropout at inference: ratio and training_mode as known at build (-1: read when run). */
typedef struct s4d_dropout_params {
    int32_t training; /* 0, 1, or -1 */
    float ratio;      /* < 0: read when run */
} s4d_dropout_params;

#endif /* S4D_OPS_EXTRA_H */
