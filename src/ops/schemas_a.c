/* Schema table a: see schemas.h. Keep the list sorted by op_type. */
#include "ops/schemas.h"

#define OPS_A(X)                                                                                   \
    X(abs) X(acos) X(acosh) X(add) X(and) X(argmax) X(argmin) X(asin) X(asinh) X(atan) X(atanh)    \
    X(cast) X(cast_like) X(ceil) X(celu) X(clip) X(concat) X(constant_of_shape) X(cos) X(cosh)     \
    X(div) X(elu) X(equal) X(erf) X(exp) X(expand) X(flatten) X(floor) X(gather)                   \
    X(gather_elements) X(gather_nd) X(gelu) X(greater) X(greater_equal) X(hard_sigmoid)            \
    X(hard_swish) X(identity) X(isinf) X(isnan) X(leaky_relu) X(less) X(less_equal) X(log)         \
    X(log_softmax) X(max) X(mean) X(min) X(mish) X(mod) X(mul) X(neg) X(not) X(or) X(pow)          \
    X(prelu) X(range) X(reciprocal) X(reduce_l1) X(reduce_l2) X(reduce_log_sum)                    \
    X(reduce_log_sum_exp) X(reduce_max) X(reduce_mean) X(reduce_min) X(reduce_prod)                \
    X(reduce_sum) X(reduce_sum_square) X(relu) X(reshape) X(round) X(scatter_elements)             \
    X(scatter_nd) X(selu) X(shape) X(sigmoid) X(sign) X(sin) X(sinh) X(size) X(slice) X(softmax)   \
    X(softplus) X(softsign) X(split) X(sqrt) X(squeeze) X(sub) X(sum) X(tan) X(tanh)               \
    X(thresholded_relu) X(tile) X(transpose) X(unsqueeze) X(where) X(xor)

/* The ops added for real-world exports (pad.c, layout_misc.c, math_misc.c, quantize.c). */
#define OPS_A_EXTRA(X)                                                                             \
    X(bitshift) X(blackman_window) X(cumsum) X(depth_to_space) X(dequantize_linear) X(dropout)     \
    X(dynamic_quantize_linear) X(eye_like) X(hamming_window) X(hann_window) X(hardmax) X(one_hot)  \
    X(pad) X(quantize_linear) X(reverse_sequence) X(shrink) X(space_to_depth) X(trilu)

#define DECLARE(name) extern const s4d_op_schema s4d_op_##name;
OPS_A(DECLARE)
OPS_A_EXTRA(DECLARE)
#undef DECLARE

#define ENTRY(name) &s4d_op_##name,
const s4d_op_schema *const s4d_op_schemas_a[] = {OPS_A(ENTRY) OPS_A_EXTRA(ENTRY)};
#undef ENTRY
const size_t s4d_op_schemas_a_count = sizeof(s4d_op_schemas_a) / sizeof(s4d_op_schemas_a[0]);
