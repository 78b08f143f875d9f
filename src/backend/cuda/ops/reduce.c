/*
 * CUDA kernels of the reduction family: Reduce*, ArgMax/ArgMin,
 * Softmax/LogSoftmax, LayerNormalization, BatchNormalization (inference) and
 * TopK. The glue between the schemas' typed params (ops/reduce.h) and the
 * launchers (kernels/reduce.h); see cuda_backend.h for the rules every kernel
 * keeps (the context's stream, no allocation, no synchronisation).
 */
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/reduce.h"
#include "ops/reduce.h"

_Static_assert(S4D_CUDA_RED_SUM == (int)S4D_REDUCE_SUM && S4D_CUDA_RED_MEAN == (int)S4D_REDUCE_MEAN &&
                   S4D_CUDA_RED_MAX == (int)S4D_REDUCE_MAX && S4D_CUDA_RED_MIN == (int)S4D_REDUCE_MIN &&
                   S4D_CUDA_RED_PROD == (int)S4D_REDUCE_PROD &&
                   S4D_CUDA_RED_SUM_SQUARE == (int)S4D_REDUCE_SUM_SQUARE &&
                   S4D_CUDA_RED_L1 == (int)S4D_REDUCE_L1 && S4D_CUDA_RED_L2 == (int)S4D_REDUCE_L2 &&
                   S4D_CUDA_RED_LOG_SUM == (int)S4D_REDUCE_LOG_SUM &&
                   S4D_CUDA_RED_LOG_SUM_EXP == (int)S4D_REDUCE_LOG_SUM_EXP &&
                   S4D_CUDA_RED_ARGMAX == (int)S4D_REDUCE_ARGMAX &&
                   S4D_CUDA_RED_ARGMIN == (int)S4D_REDUCE_ARGMIN,
               "kernels/reduce.h and ops/reduce.h number the reductions alike");
_Static_assert(S4D_CUDA_RED_MAX_RANK == S4D_MAX_RANK, "one rank limit");

static void to_geom(const s4d_reduce_geom *g, s4d_cuda_red_geom *o)
{
    memset(o, 0, sizeof *o);
    o->nk = g->nk;
    o->nr = g->nr;
    for (int d = 0; d < S4D_MAX_RANK; d++) {
        o->kdims[d] = g->kdims[d];
        o->kst[d] = g->kst[d];
        o->rdims[d] = g->rdims[d];
        o->rst[d] = g->rst[d];
    }
    o->nout = g->nout;
    o->nred = g->nred;
}

static s4d_status refuse_dtype(s4d_op_ctx *ctx, s4d_dtype dt, const char *takes)
{
    return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the CUDA kernel takes %s input, not %s", takes,
                        s4d_dtype_name(dt));
}

/* ---- Reduce* ---- */

static s4d_status reduce_supports(s4d_op_ctx *ctx)
{
    const s4d_reduce_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (!p->noop && !s4d_cuda_reduce_dtype_ok(dt))
        return refuse_dtype(ctx, dt, "float32, float16, bfloat16, float64, int32 or int64");
    return S4D_OK;
}

static size_t reduce_workspace(const s4d_op_ctx *ctx)
{
    const s4d_reduce_params *p = ctx->params;
    if (!p || p->noop)
        return 0;
    s4d_cuda_red_geom g;
    to_geom(&p->geom, &g);
    return s4d_cuda_reduce_workspace((int)p->kind, ctx->inputs[0].dtype, &g);
}

static s4d_status reduce_run(s4d_op_ctx *ctx)
{
    const s4d_reduce_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    const s4d_tensor *in = &ctx->inputs[0];
    if (p->noop) {
        size_t bytes = (size_t)s4d_tensor_numel(in) * s4d_dtype_size(in->dtype);
        if (!bytes || ctx->outputs[0].data == in->data)
            return S4D_OK;
        return s4d_cuda_check(ctx,
                              cudaMemcpyAsync(ctx->outputs[0].data, in->data, bytes, cudaMemcpyDeviceToDevice,
                                              s4d_cuda_stream(ctx)),
                              "copying the input of a reduction over no axes");
    }
    s4d_cuda_red_geom g;
    to_geom(&p->geom, &g);
    cudaError_t e = s4d_cuda_reduce((int)p->kind, in->dtype, &g, in->data, ctx->outputs[0].data, ctx->workspace,
                                    ctx->workspace_size, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "reduction kernel");
}

#define REDUCE_KERNEL(NAME, ONNX)                                                                           \
    static const s4d_kernel k_##NAME = {.domain = "", .op_type = ONNX, .since_version = 1,                  \
                                        .supports = reduce_supports, .workspace_size = reduce_workspace,    \
                                        .run = reduce_run};

REDUCE_KERNEL(reduce_sum, "ReduceSum")
REDUCE_KERNEL(reduce_mean, "ReduceMean")
REDUCE_KERNEL(reduce_max, "ReduceMax")
REDUCE_KERNEL(reduce_min, "ReduceMin")
REDUCE_KERNEL(reduce_prod, "ReduceProd")
REDUCE_KERNEL(reduce_sum_square, "ReduceSumSquare")
REDUCE_KERNEL(reduce_l1, "ReduceL1")
REDUCE_KERNEL(reduce_l2, "ReduceL2")
REDUCE_KERNEL(reduce_log_sum, "ReduceLogSum")
REDUCE_KERNEL(reduce_log_sum_exp, "ReduceLogSumExp")

/* ---- ArgMax / ArgMin ---- */

static s4d_status arg_supports(s4d_op_ctx *ctx)
{
    const s4d_reduce_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (!s4d_cuda_arg_dtype_ok(dt))
        return refuse_dtype(ctx, dt, "float32, float16, bfloat16, float64, int32 or int64");
    if (p->geom.nr > 1)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "an arg reduction over %d dims", p->geom.nr);
    return S4D_OK;
}

static s4d_status arg_run(s4d_op_ctx *ctx)
{
    const s4d_reduce_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    s4d_cuda_red_geom g;
    to_geom(&p->geom, &g);
    cudaError_t e = s4d_cuda_arg(p->kind == S4D_REDUCE_ARGMIN, p->select_last, ctx->inputs[0].dtype, &g,
                                 ctx->inputs[0].data, ctx->outputs[0].data, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "arg reduction kernel");
}

static const s4d_kernel k_argmax = {.domain = "", .op_type = "ArgMax", .since_version = 1,
                                    .supports = arg_supports, .run = arg_run};
static const s4d_kernel k_argmin = {.domain = "", .op_type = "ArgMin", .since_version = 1,
                                    .supports = arg_supports, .run = arg_run};

/* ---- Softmax / LogSoftmax ---- */

static s4d_status softmax_supports(s4d_op_ctx *ctx)
{
    if (!s4d_cuda_params(ctx))
        return S4D_ERR_INTERNAL;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT16 && dt != S4D_DTYPE_FLOAT64)
        return refuse_dtype(ctx, dt, "float32, float16 or float64");
    return S4D_OK;
}

static s4d_status softmax_run(s4d_op_ctx *ctx)
{
    const s4d_softmax_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    cudaError_t e = s4d_cuda_softmax(p->log, ctx->inputs[0].dtype, p->outer, p->n, p->inner, ctx->inputs[0].data,
                                     ctx->outputs[0].data, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, p->log ? "log-softmax kernel" : "softmax kernel");
}

static const s4d_kernel k_softmax = {.domain = "", .op_type = "Softmax", .since_version = 1,
                                     .supports = softmax_supports, .run = softmax_run};
static const s4d_kernel k_log_softmax = {.domain = "", .op_type = "LogSoftmax", .since_version = 1,
                                         .supports = softmax_supports, .run = softmax_run};

/* ---- LayerNormalization ---- */

static void ln_args(const s4d_layernorm_params *p, s4d_dtype dt, s4d_cuda_ln_args *a)
{
    memset(a, 0, sizeof *a);
    a->rows = p->rows;
    a->cols = p->cols;
    a->nrank = p->nrank;
    for (int d = 0; d < S4D_MAX_RANK; d++) {
        a->ndims[d] = p->ndims[d];
        a->s_str[d] = p->s_str[d];
        a->b_str[d] = p->b_str[d];
    }
    a->scale_dense = p->scale_dense;
    a->bias_dense = p->has_bias ? p->bias_dense : 1;
    a->epsilon = p->epsilon;
    a->half = dt == S4D_DTYPE_FLOAT16;
}

static s4d_status ln_supports(s4d_op_ctx *ctx)
{
    if (!s4d_cuda_params(ctx))
        return S4D_ERR_INTERNAL;
    /* X, Scale and B alike (the schema checked): float32, or float16 with float statistics. */
    const s4d_dtype x = ctx->inputs[0].dtype;
    for (int i = 0; i < ctx->num_inputs; i++) {
        s4d_dtype dt = ctx->inputs[i].dtype;
        if (dt != S4D_DTYPE_UNDEFINED && dt != S4D_DTYPE_FLOAT32 && !(dt == S4D_DTYPE_FLOAT16 && dt == x))
            return refuse_dtype(ctx, dt, "float32 or float16");
    }
    for (int o = 1; o < ctx->num_outputs; o++)
        if (ctx->outputs[o].dtype != S4D_DTYPE_FLOAT32)
            return refuse_dtype(ctx, ctx->outputs[o].dtype, "float32 Mean / InvStdDev");
    return S4D_OK;
}

static size_t ln_workspace(const s4d_op_ctx *ctx)
{
    const s4d_layernorm_params *p = ctx->params;
    if (!p)
        return 0;
    s4d_cuda_ln_args a;
    ln_args(p, ctx->inputs[0].dtype, &a);
    return s4d_cuda_layernorm_workspace(&a);
}

static s4d_status ln_run(s4d_op_ctx *ctx)
{
    const s4d_layernorm_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    s4d_cuda_ln_args a;
    ln_args(p, ctx->inputs[0].dtype, &a);
    cudaError_t e = s4d_cuda_layernorm(&a, ctx->inputs[0].data, ctx->inputs[1].data,
                                       p->has_bias ? ctx->inputs[2].data : NULL, ctx->outputs[0].data,
                                       ctx->num_outputs > 1 ? ctx->outputs[1].data : NULL,
                                       ctx->num_outputs > 2 ? ctx->outputs[2].data : NULL, ctx->workspace,
                                       ctx->workspace_size, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "layer normalization kernel");
}

static const s4d_kernel k_layernorm = {.domain = "", .op_type = "LayerNormalization", .since_version = 17,
                                       .supports = ln_supports, .workspace_size = ln_workspace, .run = ln_run};

/* ---- BatchNormalization ---- */

static s4d_status bn_supports(s4d_op_ctx *ctx)
{
    if (!s4d_cuda_params(ctx))
        return S4D_ERR_INTERNAL;
    for (int i = 0; i < ctx->num_inputs; i++)
        if (ctx->inputs[i].dtype != S4D_DTYPE_FLOAT32)
            return refuse_dtype(ctx, ctx->inputs[i].dtype, "float32");
    return S4D_OK;
}

static s4d_status bn_run(s4d_op_ctx *ctx)
{
    const s4d_batchnorm_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    cudaError_t e = s4d_cuda_batchnorm(p->n, p->c, p->plane, p->epsilon, ctx->inputs[0].data, ctx->inputs[1].data,
                                       ctx->inputs[2].data, ctx->inputs[3].data, ctx->inputs[4].data,
                                       ctx->outputs[0].data, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "batch normalization kernel");
}

static const s4d_kernel k_batchnorm = {.domain = "", .op_type = "BatchNormalization", .since_version = 7,
                                       .supports = bn_supports, .run = bn_run};

/* ---- TopK ---- */

static s4d_status topk_supports(s4d_op_ctx *ctx)
{
    const s4d_topk_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (!s4d_cuda_topk_dtype_ok(dt))
        return refuse_dtype(ctx, dt, "float32, float16, float64, int32 or int64");
    if (p->n > INT32_MAX)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the CUDA kernel sorts at most %d values per slice, not %lld",
                            INT32_MAX, (long long)p->n);
    return S4D_OK;
}

static size_t topk_workspace(const s4d_op_ctx *ctx)
{
    const s4d_topk_params *p = ctx->params;
    return p && p->k > 0 ? s4d_cuda_topk_workspace(p->outer, p->n, p->inner) : 0;
}

static s4d_status topk_run(s4d_op_ctx *ctx)
{
    const s4d_topk_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    cudaError_t e = s4d_cuda_topk(ctx->inputs[0].dtype, p->largest, p->outer, p->n, p->inner, p->k,
                                  ctx->inputs[0].data, ctx->outputs[0].data, ctx->outputs[1].data, ctx->workspace,
                                  ctx->workspace_size, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "top-k kernel");
}

static const s4d_kernel k_topk_1 = {.domain = "", .op_type = "TopK", .since_version = 1,
                                    .supports = topk_supports, .workspace_size = topk_workspace, .run = topk_run};
static const s4d_kernel k_topk_10 = {.domain = "", .op_type = "TopK", .since_version = 10,
                                     .supports = topk_supports, .workspace_size = topk_workspace, .run = topk_run};

const s4d_kernel *const s4d_cuda_kernels_reduce[] = {
    &k_reduce_sum, &k_reduce_mean, &k_reduce_max, &k_reduce_min, &k_reduce_prod, &k_reduce_sum_square,
    &k_reduce_l1, &k_reduce_l2, &k_reduce_log_sum, &k_reduce_log_sum_exp, &k_argmax, &k_argmin,
    &k_softmax, &k_log_softmax, &k_layernorm, &k_batchnorm, &k_topk_1, &k_topk_10,
};
const size_t s4d_cuda_kernels_reduce_count = sizeof s4d_cuda_kernels_reduce / sizeof s4d_cuda_kernels_reduce[0];
