/* Schema table b: see schemas.h. Keep the list sorted by op_type. */
#include "ops/schemas.h"

extern const s4d_op_schema s4d_op_avgpool;
extern const s4d_op_schema s4d_op_batchnorm;
extern const s4d_op_schema s4d_op_conv;
extern const s4d_op_schema s4d_op_conv_transpose;
extern const s4d_op_schema s4d_op_det;
extern const s4d_op_schema s4d_op_einsum;
extern const s4d_op_schema s4d_op_fused_attention;
extern const s4d_op_schema s4d_op_fused_conv;
extern const s4d_op_schema s4d_op_fused_conv_act;
extern const s4d_op_schema s4d_op_fused_mbconv;
extern const s4d_op_schema s4d_op_fused_mlp;
extern const s4d_op_schema s4d_op_fused_matmul;
extern const s4d_op_schema s4d_op_fused_pointwise;
extern const s4d_op_schema s4d_op_gemm;
extern const s4d_op_schema s4d_op_global_avgpool;
extern const s4d_op_schema s4d_op_global_maxpool;
extern const s4d_op_schema s4d_op_grid_sample;
extern const s4d_op_schema s4d_op_instance_norm;
extern const s4d_op_schema s4d_op_gru;
extern const s4d_op_schema s4d_op_layernorm;
extern const s4d_op_schema s4d_op_lrn;
extern const s4d_op_schema s4d_op_lstm;
extern const s4d_op_schema s4d_op_matmul;
extern const s4d_op_schema s4d_op_matmul_integer;
extern const s4d_op_schema s4d_op_mvn;
extern const s4d_op_schema s4d_op_qlinear_matmul;
extern const s4d_op_schema s4d_op_maxpool;
extern const s4d_op_schema s4d_op_maxpool_nhwc;
extern const s4d_op_schema s4d_op_max_unpool;
extern const s4d_op_schema s4d_op_resize;
extern const s4d_op_schema s4d_op_roi_align;
extern const s4d_op_schema s4d_op_rnn;
extern const s4d_op_schema s4d_op_topk_1;
extern const s4d_op_schema s4d_op_topk_10;
/* Early opset versions translated to later schemas (legacy.c). */
extern const s4d_op_schema s4d_op_legacy_add;
extern const s4d_op_schema s4d_op_legacy_sub;
extern const s4d_op_schema s4d_op_legacy_mul;
extern const s4d_op_schema s4d_op_legacy_div;
extern const s4d_op_schema s4d_op_legacy_pow;
extern const s4d_op_schema s4d_op_legacy_max;
extern const s4d_op_schema s4d_op_legacy_min;
extern const s4d_op_schema s4d_op_legacy_sum;
extern const s4d_op_schema s4d_op_legacy_mean;
extern const s4d_op_schema s4d_op_legacy_gemm;
extern const s4d_op_schema s4d_op_legacy_prelu;
extern const s4d_op_schema s4d_op_legacy_batchnorm;
extern const s4d_op_schema s4d_op_legacy_upsample;
extern const s4d_op_schema s4d_op_legacy_scatter;

const s4d_op_schema *const s4d_op_schemas_b[] = {
    &s4d_op_avgpool,
    &s4d_op_batchnorm,
    &s4d_op_conv,
    &s4d_op_conv_transpose,
    &s4d_op_det,
    &s4d_op_einsum,
    &s4d_op_fused_attention,
    &s4d_op_fused_conv,
    &s4d_op_fused_conv_act,
    &s4d_op_fused_mbconv,
    &s4d_op_fused_mlp,
    &s4d_op_fused_matmul,
    &s4d_op_fused_pointwise,
    &s4d_op_gemm,
    &s4d_op_global_avgpool,
    &s4d_op_global_maxpool,
    &s4d_op_grid_sample,
    &s4d_op_instance_norm,
    &s4d_op_gru,
    &s4d_op_layernorm,
    &s4d_op_lrn,
    &s4d_op_lstm,
    &s4d_op_matmul,
    &s4d_op_matmul_integer,
    &s4d_op_mvn,
    &s4d_op_qlinear_matmul,
    &s4d_op_maxpool,
    &s4d_op_maxpool_nhwc,
    &s4d_op_max_unpool,
    &s4d_op_resize,
    &s4d_op_roi_align,
    &s4d_op_rnn,
    &s4d_op_topk_1,
    &s4d_op_topk_10,
    &s4d_op_legacy_add,
    &s4d_op_legacy_sub,
    &s4d_op_legacy_mul,
    &s4d_op_legacy_div,
    &s4d_op_legacy_pow,
    &s4d_op_legacy_max,
    &s4d_op_legacy_min,
    &s4d_op_legacy_sum,
    &s4d_op_legacy_mean,
    &s4d_op_legacy_gemm,
    &s4d_op_legacy_prelu,
    &s4d_op_legacy_batchnorm,
    &s4d_op_legacy_upsample,
    &s4d_op_legacy_scatter,
};
const size_t s4d_op_schemas_b_count = sizeof(s4d_op_schemas_b) / sizeof(s4d_op_schemas_b[0]);
