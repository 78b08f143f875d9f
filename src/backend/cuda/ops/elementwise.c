/*
 * CUDA kernels of the element-wise family: binary ops with broadcasting
 * (arithmetic, comparisons, logic), the variadic Min/Max/Sum/Mean, unary ops,
 * Clip, IsNaN/IsInf, Where, Cast and CastLike, and s4d::FusedPointwise (a
 * tree of those ops in one launch, ops/pointwise.h). The glue between the schemas'
 * typed params (ops/elementwise.h) and the launchers (kernels/elementwise.h):
 * shapes are collapsed here, on the host, with the host reference's own
 * broadcast helper, so both backends see the same geometry.
 *
 * No kernel needs a workspace or per-layer state. Variadic ops fold their
 * inputs pairwise into the output, in input order, as the host does, so
 * float results agree bit for bit where the op is exact.
 */
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/pointwise.h"
#include "ops/broadcast.h"
#include "ops/elementwise.h"

/* The collapsed broadcast of ins[0..n) to out, for the launchers. */
static void make_bcast(const s4d_tensor *out, const s4d_tensor *const *ins, int n,
                       s4d_cu_bcast *g)
{
    s4d_bcast b;
    s4d_bcast_init(&b, out, ins, n);
    memset(g, 0, sizeof *g);
    g->rank = b.rank;
    g->num_inputs = n;
    for (int d = 0; d < b.rank; d++) {
        g->dims[d] = b.dims[d];
        for (int k = 0; k < n; k++)
            g->strides[k][d] = b.st[k][d];
    }
    /* An empty output stays empty whatever the merging of dims did. */
    for (int d = 0; d < out->rank; d++)
        if (out->dims[d] == 0)
            g->dims[0] = 0;
}

static s4d_status no_params(s4d_op_ctx *ctx)
{
    return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the op's parameters were not inferred");
}

/* Element types the kernels read and write (every numeric type and bool). */
static int plain_dtype(s4d_dtype dt)
{
    return dt != S4D_DTYPE_STRING && dt != S4D_DTYPE_UNDEFINED && s4d_dtype_size(dt) > 0;
}

/* ---- binary and variadic ops ---- */

static s4d_status supports_binary(s4d_op_ctx *ctx)
{
    const s4d_binary_params *p = ctx->params;
    if (!p)
        return no_params(ctx);
    for (int i = 0; i < ctx->num_inputs; i++) {
        s4d_dtype dt = ctx->inputs[i].dtype;
        if (!plain_dtype(dt) || dt == S4D_DTYPE_BFLOAT16)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                                "input %d has dtype %s, which the CUDA kernel does not take", i,
                                s4d_dtype_name(dt));
        if (ctx->inputs[i].rank > S4D_CU_EW_MAX_RANK)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "input %d has rank %d, at most %d", i,
                                ctx->inputs[i].rank, S4D_CU_EW_MAX_RANK);
    }
    s4d_dtype dt = ctx->inputs[0].dtype;
    int logic = p->op == S4D_BIN_AND || p->op == S4D_BIN_OR || p->op == S4D_BIN_XOR;
    if (dt == S4D_DTYPE_BOOL && !logic && p->op != S4D_BIN_EQ)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "bool inputs are taken by And, Or, Xor "
                            "and Equal only");
    if (logic && dt != S4D_DTYPE_BOOL)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "input 0 has dtype %s, expected bool",
                            s4d_dtype_name(dt));
    return S4D_OK;
}

static s4d_status binary_step(s4d_op_ctx *ctx, int op, s4d_tensor *out, const s4d_tensor *a,
                              const s4d_tensor *b)
{
    const s4d_tensor *ins[2] = {a, b};
    s4d_cu_bcast g;
    make_bcast(out, ins, 2, &g);
    cudaError_t e = s4d_cu_binary(op, a->dtype, b->dtype, out->dtype, out->data, a->data, b->data,
                                  &g, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "element-wise binary kernel");
}

static s4d_status run_binary(s4d_op_ctx *ctx)
{
    const s4d_binary_params *p = ctx->params;
    if (!p)
        return no_params(ctx);
    s4d_tensor *out = &ctx->outputs[0];
    int64_t n = s4d_tensor_numel(out);
    s4d_status st = S4D_OK;
    if (ctx->num_inputs == 1) {
        /* One input has the output's shape: a copy. */
        size_t bytes = (size_t)n * s4d_dtype_size(out->dtype);
        st = s4d_cuda_check(ctx, s4d_cu_copy(out->data, ctx->inputs[0].data, bytes,
                                             s4d_cuda_stream(ctx)),
                            "copying the single input");
    } else {
        st = binary_step(ctx, p->op, out, &ctx->inputs[0], &ctx->inputs[1]);
        for (int i = 2; i < ctx->num_inputs && st == S4D_OK; i++)
            st = binary_step(ctx, p->op, out, out, &ctx->inputs[i]);
    }
    if (st == S4D_OK && p->mean)
        st = s4d_cuda_check(ctx,
                            s4d_cu_mean_divide(out->dtype, out->data, n, ctx->num_inputs,
                                               s4d_cuda_stream(ctx)),
                            "Mean division kernel");
    return st;
}

/* ---- unary ops, Clip ---- */

static int int_unary(int op)
{
    return op == S4D_UN_RELU || op == S4D_UN_NEG || op == S4D_UN_ABS || op == S4D_UN_SIGN ||
           op == S4D_UN_CLIP;
}

static s4d_status supports_unary(s4d_op_ctx *ctx)
{
    const s4d_unary_params *p = ctx->params;
    if (!p)
        return no_params(ctx);
    s4d_dtype dt = ctx->inputs[0].dtype;
    int ok = p->op == S4D_UN_NOT ? dt == S4D_DTYPE_BOOL
             : dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16 || dt == S4D_DTYPE_FLOAT64
                 ? 1
             : s4d_dtype_is_int(dt) ? int_unary(p->op)
                                    : 0;
    if (!ok)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "input 0 has dtype %s, which the CUDA kernel does not take",
                            s4d_dtype_name(dt));
    return S4D_OK;
}

static s4d_status run_unary(s4d_op_ctx *ctx)
{
    const s4d_unary_params *p = ctx->params;
    if (!p)
        return no_params(ctx);
    s4d_cu_unary_args a = {
        .alpha = p->alpha, .beta = p->beta, .gamma = p->gamma, .min_i = p->min_i,
        .max_i = p->max_i,
        /* Bounds that were not constants at build time are read on the device. */
        .min_ptr = p->have_min && !p->min_known ? ctx->inputs[1].data : NULL,
        .max_ptr = p->have_max && !p->max_known ? ctx->inputs[2].data : NULL,
    };
    const s4d_tensor *x = &ctx->inputs[0];
    cudaError_t e = s4d_cu_unary(p->op, x->dtype, ctx->outputs[0].data, x->data,
                                 s4d_tensor_numel(x), &a, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "element-wise unary kernel");
}

/* ---- IsNaN, IsInf ---- */

static s4d_status run_isnan(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0];
    cudaError_t e = s4d_cu_is_class(0, 0, 0, x->dtype, ctx->outputs[0].data, x->data,
                                    s4d_tensor_numel(x), s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "IsNaN kernel");
}

static s4d_status supports_isinf(s4d_op_ctx *ctx)
{
    return ctx->params ? S4D_OK : no_params(ctx);
}

static s4d_status run_isinf(s4d_op_ctx *ctx)
{
    const s4d_isinf_params *p = ctx->params;
    if (!p)
        return no_params(ctx);
    const s4d_tensor *x = &ctx->inputs[0];
    cudaError_t e = s4d_cu_is_class(1, p->detect_negative, p->detect_positive, x->dtype,
                                    ctx->outputs[0].data, x->data, s4d_tensor_numel(x),
                                    s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "IsInf kernel");
}

/* ---- Where, Cast ---- */

static s4d_status supports_where(s4d_op_ctx *ctx)
{
    size_t es = s4d_dtype_size(ctx->inputs[1].dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "input 1 (X) has dtype %s, which the CUDA kernel does not take",
                            s4d_dtype_name(ctx->inputs[1].dtype));
    for (int i = 0; i < 3; i++)
        if (ctx->inputs[i].rank > S4D_CU_EW_MAX_RANK)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "input %d has rank %d, at most %d", i,
                                ctx->inputs[i].rank, S4D_CU_EW_MAX_RANK);
    return S4D_OK;
}

static s4d_status run_where(s4d_op_ctx *ctx)
{
    const s4d_tensor *ins[3] = {&ctx->inputs[0], &ctx->inputs[1], &ctx->inputs[2]};
    s4d_tensor *out = &ctx->outputs[0];
    s4d_cu_bcast g;
    make_bcast(out, ins, 3, &g);
    cudaError_t e = s4d_cu_where(s4d_dtype_size(out->dtype), out->data, ins[0]->data,
                                 ins[1]->data, ins[2]->data, &g, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "Where kernel");
}

static s4d_status supports_cast(s4d_op_ctx *ctx)
{
    s4d_dtype from = ctx->inputs[0].dtype, to = ctx->outputs[0].dtype;
    if (!plain_dtype(from) || !plain_dtype(to))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "cannot cast %s to %s on CUDA",
                            s4d_dtype_name(from), s4d_dtype_name(to));
    return S4D_OK;
}

static s4d_status run_cast(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_tensor *y = &ctx->outputs[0];
    cudaError_t e = s4d_cu_cast(x->dtype, y->dtype, y->data, x->data, s4d_tensor_numel(x),
                                s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "Cast kernel");
}

/* ---- FusedPointwise ---- */

/* infer() checked the program; the kernel takes every program it accepts. */
static s4d_status supports_pointwise(s4d_op_ctx *ctx)
{
    const s4d_pointwise_params *p = ctx->params;
    if (!p)
        return no_params(ctx);
    if (p->rank > S4D_CU_EW_MAX_RANK)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the output has %d dims after merging, at most %d",
                            p->rank, S4D_CU_EW_MAX_RANK);
    return S4D_OK;
}

static s4d_status run_pointwise(s4d_op_ctx *ctx)
{
    const s4d_pointwise_params *p = ctx->params;
    if (!p)
        return no_params(ctx);
    const void *in[S4D_PW_MAX_INPUTS];
    for (int k = 0; k < p->num_inputs && k < ctx->num_inputs; k++)
        in[k] = (const char *)ctx->inputs[k].data + p->offset[k] * (int64_t)s4d_dtype_size(p->in_dtype[k]);
    if (ctx->num_inputs != p->num_inputs)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "%d inputs where the program has %d", ctx->num_inputs,
                            p->num_inputs);
    cudaError_t e = s4d_cu_pointwise(p, ctx->outputs[0].data, in, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "FusedPointwise kernel");
}

/* ---- the table ---- */

#define KERNEL(VAR, OP, SINCE, SUPPORTS, RUN) \
    static const s4d_kernel VAR = {"", OP, SINCE, SUPPORTS, NULL, NULL, NULL, NULL, RUN};
#define BINARY(VAR, OP, SINCE) KERNEL(VAR, OP, SINCE, supports_binary, run_binary)
#define UNARY(VAR, OP, SINCE) KERNEL(VAR, OP, SINCE, supports_unary, run_unary)

BINARY(k_add, "Add", 7)
BINARY(k_sub, "Sub", 7)
BINARY(k_mul, "Mul", 7)
BINARY(k_div, "Div", 7)
BINARY(k_pow, "Pow", 7)
BINARY(k_mod, "Mod", 10)
BINARY(k_prelu, "PRelu", 9)
BINARY(k_equal, "Equal", 7)
BINARY(k_greater, "Greater", 7)
BINARY(k_less, "Less", 7)
BINARY(k_greater_equal, "GreaterOrEqual", 12)
BINARY(k_less_equal, "LessOrEqual", 12)
BINARY(k_and, "And", 7)
BINARY(k_or, "Or", 7)
BINARY(k_xor, "Xor", 7)
BINARY(k_min, "Min", 8)
BINARY(k_max, "Max", 8)
BINARY(k_sum, "Sum", 8)
BINARY(k_mean, "Mean", 8)

UNARY(k_relu, "Relu", 6)
UNARY(k_sigmoid, "Sigmoid", 6)
UNARY(k_tanh, "Tanh", 6)
UNARY(k_erf, "Erf", 9)
UNARY(k_sqrt, "Sqrt", 6)
UNARY(k_reciprocal, "Reciprocal", 6)
UNARY(k_exp, "Exp", 6)
UNARY(k_log, "Log", 6)
UNARY(k_neg, "Neg", 6)
UNARY(k_abs, "Abs", 6)
UNARY(k_sin, "Sin", 7)
UNARY(k_cos, "Cos", 7)
UNARY(k_tan, "Tan", 7)
UNARY(k_asin, "Asin", 7)
UNARY(k_acos, "Acos", 7)
UNARY(k_atan, "Atan", 7)
UNARY(k_sinh, "Sinh", 9)
UNARY(k_cosh, "Cosh", 9)
UNARY(k_asinh, "Asinh", 9)
UNARY(k_acosh, "Acosh", 9)
UNARY(k_atanh, "Atanh", 9)
UNARY(k_floor, "Floor", 6)
UNARY(k_ceil, "Ceil", 6)
UNARY(k_round, "Round", 11)
UNARY(k_sign, "Sign", 9)
UNARY(k_not, "Not", 1)
UNARY(k_hard_swish, "HardSwish", 14)
UNARY(k_softplus, "Softplus", 1)
UNARY(k_softsign, "Softsign", 1)
UNARY(k_mish, "Mish", 18)
UNARY(k_celu, "Celu", 12)
UNARY(k_thresholded_relu, "ThresholdedRelu", 10)
UNARY(k_leaky_relu, "LeakyRelu", 6)
UNARY(k_elu, "Elu", 6)
UNARY(k_selu, "Selu", 6)
UNARY(k_hard_sigmoid, "HardSigmoid", 6)
UNARY(k_gelu, "Gelu", 20)
UNARY(k_clip, "Clip", 6)

KERNEL(k_isnan, "IsNaN", 9, NULL, run_isnan)
KERNEL(k_isinf, "IsInf", 10, supports_isinf, run_isinf)
KERNEL(k_where, "Where", 9, supports_where, run_where)
KERNEL(k_cast, "Cast", 6, supports_cast, run_cast)
KERNEL(k_cast_like, "CastLike", 15, supports_cast, run_cast)
static const s4d_kernel k_fused_pointwise = {"s4d", "FusedPointwise", 1, supports_pointwise, NULL, NULL,
                                             NULL, NULL, run_pointwise};

const s4d_kernel *const s4d_cuda_kernels_elementwise[] = {
    &k_add, &k_sub, &k_mul, &k_div, &k_pow, &k_mod, &k_prelu, &k_equal, &k_greater, &k_less,
    &k_greater_equal, &k_less_equal, &k_and, &k_or, &k_xor, &k_min, &k_max, &k_sum, &k_mean,
    &k_relu, &k_sigmoid, &k_tanh, &k_erf, &k_sqrt, &k_reciprocal, &k_exp, &k_log, &k_neg,
    &k_abs, &k_sin, &k_cos, &k_tan, &k_asin, &k_acos, &k_atan, &k_sinh, &k_cosh, &k_asinh,
    &k_acosh, &k_atanh, &k_floor, &k_ceil, &k_round, &k_sign, &k_not, &k_hard_swish,
    &k_softplus, &k_softsign, &k_mish, &k_celu, &k_thresholded_relu, &k_leaky_relu, &k_elu,
    &k_selu, &k_hard_sigmoid, &k_gelu, &k_clip, &k_isnan, &k_isinf, &k_where, &k_cast,
    &k_cast_like, &k_fused_pointwise,
};
const size_t s4d_cuda_kernels_elementwise_count =
    sizeof s4d_cuda_kernels_elementwise / sizeof s4d_cuda_kernels_elementwise[0];
