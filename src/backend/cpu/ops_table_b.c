/* CPU op table b: see cpu_ops.h. Keep the list sorted by op_type. */
#include "backend/cpu/cpu_ops.h"

extern const s4d_op_def s4d_cpu_op_conv;
extern const s4d_op_def s4d_cpu_op_fused_conv;
extern const s4d_op_def s4d_cpu_op_gemm;
extern const s4d_op_def s4d_cpu_op_matmul;

const s4d_op_def *const s4d_cpu_ops_b[] = {
    &s4d_cpu_op_conv,
    &s4d_cpu_op_fused_conv,
    &s4d_cpu_op_gemm,
    &s4d_cpu_op_matmul,
};
const size_t s4d_cpu_ops_b_count = sizeof(s4d_cpu_ops_b) / sizeof(s4d_cpu_ops_b[0]);
