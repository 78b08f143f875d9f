/*
 * MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on CUDA with own
 * kernels (kernels/dense.cu) rather than cuDNN's pooling, which has no
 * ceil_mode, dilations, asymmetric padding or Indices output: one thread per
 * output element, the taps in the host reference's order (so ties and NaN
 * pick the same element), averages summed in double as the host does. The
 * global pools reduce each plane in one block with a fixed-order tree. A 1-D
 * or 2-D MaxPool without Indices or dilations whose indices fit in 32 bits
 * (the ResNet stem's) takes a flat kernel with 32-bit index arithmetic: on the
 * v3 stem, 6 x 64 x 128 x 352, it runs in 0.056 ms instead of 0.277 ms.
 * float16 tensors run the same kernels with float arithmetic: a maximum is
 * exact, an average rounds once to float16. s4d::MaxPool (channels-last, from
 * the channels-last pass) has a kernel of its own: one thread per output
 * element, channels fastest, so that a warp reads adjacent channels.
 */
#include <string.h>

#include "backend/cuda/kernels/dense.h"
#include "backend/cuda/ops/dense_ops.h"
#include "ops/dense.h"

static s4d_status pool_supports(s4d_op_ctx *ctx)
{
    const s4d_pool_params *p = ctx->params;
    if (!p)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters");
    if (ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32 && ctx->inputs[0].dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s: the CUDA pools run float32 and float16 only",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    if (p->nhwc && (p->kind != S4D_POOL_MAX || p->with_indices || p->g.nsp != 2))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "channels-last pools are 2-D MaxPools without Indices");
    return S4D_OK;
}

static s4d_status pool_run(s4d_op_ctx *ctx)
{
    const s4d_pool_params *p = ctx->params;
    s4d_cuda_pool_geom g;
    memset(&g, 0, sizeof g);
    g.planes = p->n * p->c;
    for (int j = 0; j < 3; j++) {
        g.img[j] = p->g.img[j];
        g.grid[j] = p->g.grid[j];
        g.k[j] = p->g.k[j];
        g.stride[j] = p->g.stride[j];
        g.dil[j] = p->g.dil[j];
        g.pad_b[j] = p->g.pad_b[j];
        g.pad_e[j] = p->g.pad_e[j];
    }
    g.is_avg = p->kind == S4D_POOL_AVG;
    g.count_include_pad = p->count_include_pad;
    g.storage_order = p->storage_order;
    if (p->nhwc) {
        const cudaError_t e = s4d_cuda_maxpool_nhwc(ctx->inputs[0].data, ctx->outputs[0].data,
                                                    ctx->inputs[0].dtype == S4D_DTYPE_FLOAT16, p->n, p->c, &g,
                                                    s4d_cuda_stream(ctx));
        return s4d_cuda_check(ctx, e, "the channels-last MaxPool kernel");
    }
    int64_t *idx = p->kind == S4D_POOL_MAX && p->with_indices ? ctx->outputs[1].data : NULL;
    const cudaError_t e =
        ctx->inputs[0].dtype == S4D_DTYPE_FLOAT16
            ? s4d_cuda_pool_f16(ctx->inputs[0].data, ctx->outputs[0].data, idx, &g, s4d_cuda_stream(ctx))
            : s4d_cuda_pool_f32(ctx->inputs[0].data, ctx->outputs[0].data, idx, &g, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, g.is_avg ? "the AveragePool kernel" : "the MaxPool kernel");
}

static s4d_status gpool_supports(s4d_op_ctx *ctx)
{
    if (!ctx->params)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters");
    if (ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32 && ctx->inputs[0].dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s: the CUDA pools run float32 and float16 only",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    return S4D_OK;
}

static s4d_status gpool_run_common(s4d_op_ctx *ctx, int is_max)
{
    const s4d_gpool_params *p = ctx->params;
    const cudaError_t e = ctx->inputs[0].dtype == S4D_DTYPE_FLOAT16
                              ? s4d_cuda_global_pool_f16(ctx->inputs[0].data, ctx->outputs[0].data, p->planes,
                                                         p->plane, is_max, s4d_cuda_stream(ctx))
                              : s4d_cuda_global_pool_f32(ctx->inputs[0].data, ctx->outputs[0].data, p->planes,
                                                         p->plane, is_max, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, is_max ? "the GlobalMaxPool kernel" : "the GlobalAveragePool kernel");
}

static s4d_status gavg_run(s4d_op_ctx *ctx) { return gpool_run_common(ctx, 0); }
static s4d_status gmax_run(s4d_op_ctx *ctx) { return gpool_run_common(ctx, 1); }

const s4d_kernel s4d_cuda_k_maxpool = {
    .domain = "", .op_type = "MaxPool", .since_version = 1, .supports = pool_supports, .run = pool_run,
};

const s4d_kernel s4d_cuda_k_maxpool_nhwc = {
    .domain = "s4d", .op_type = "MaxPool", .since_version = 1, .supports = pool_supports, .run = pool_run,
};

const s4d_kernel s4d_cuda_k_avgpool = {
    .domain = "", .op_type = "AveragePool", .since_version = 1, .supports = pool_supports, .run = pool_run,
};

const s4d_kernel s4d_cuda_k_global_avgpool = {
    .domain = "", .op_type = "GlobalAveragePool", .since_version = 1, .supports = gpool_supports, .run = gavg_run,
};

const s4d_kernel s4d_cuda_k_global_maxpool = {
    .domain = "", .op_type = "GlobalMaxPool", .since_version = 1, .supports = gpool_supports, .run = gmax_run,
};
