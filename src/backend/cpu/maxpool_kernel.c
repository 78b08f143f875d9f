/*
 * MaxPool on the CPU: 1-D and 2-D float32 pooling without the Indices output
 * through the convolution library's vectorised rows (the ResNet stem runs it
 * between two convolutions); everything else through the host reference.
 * The library's semantics are the op's: windows clipped to the input,
 * padding never wins, NaN propagates. Nothing to prepare: the decision reads
 * the typed params.
 */
#include <string.h>

#include "backend/cpu/conv/cpuconv.h"
#include "backend/cpu/cpu_kernels.h"
#include "ops/dense.h"
#include "util/threadpool.h"

/* The library's parameters for this layer; 0 when the host reference runs it. */
static int maxpool_lib_params(const s4d_op_ctx *ctx, s4d_cpuconv_pool_params *q)
{
    const s4d_pool_params *p = ctx->params;
    if (!p || p->kind != S4D_POOL_MAX || p->with_indices || p->g.nsp < 1 || p->g.nsp > 2 ||
        ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32)
        return 0;
    const s4d_conv_geom *g = &p->g;
    memset(q, 0, sizeof *q);
    q->struct_size = sizeof *q;
    q->n = p->n;
    q->c = p->c;
    q->h = g->img[1];
    q->w = g->img[2];
    q->kh = g->k[1];
    q->kw = g->k[2];
    q->stride_h = g->stride[1];
    q->stride_w = g->stride[2];
    q->pad_top = g->pad_b[1];
    q->pad_left = g->pad_b[2];
    q->dil_h = g->dil[1];
    q->dil_w = g->dil[2];
    q->ho = g->grid[1];
    q->wo = g->grid[2];
    return 1;
}

static size_t maxpool_workspace(const s4d_op_ctx *ctx)
{
    /* The host reference's (a few bytes per output row and column), so that it can always run. */
    return ctx->schema->workspace_size ? ctx->schema->workspace_size(ctx) : 0;
}

static void maxpool_parallel_for(void *pool, int64_t n, s4d_cpuconv_range_fn fn, void *arg)
{
    s4d_parallel_for(pool, n, 1, fn, arg);
}

static s4d_status maxpool_run(s4d_op_ctx *ctx)
{
    s4d_cpuconv_pool_params q;
    if (!maxpool_lib_params(ctx, &q))
        return ctx->schema->run(ctx);
    /* About 4 window elements compared per ns on one thread (ShuffleNet's 3x3/2 layer). */
    s4d_cpu_split_decide(ctx, (double)q.n * (double)q.c * (double)q.ho * (double)q.wo * (double)q.kh *
                                  (double)q.kw / 4000.0 + s4d_cpu_io_us(ctx));
    s4d_errbuf err;
    err.msg[0] = 0;
    s4d_status st = s4d_cpuconv_maxpool(&q, ctx->inputs[0].data, ctx->outputs[0].data,
                                        maxpool_parallel_for, ctx->pool, &err);
    if (st == S4D_ERR_UNSUPPORTED)
        return ctx->schema->run(ctx); /* planes past the library's 2^30 elements */
    if (st != S4D_OK)
        return s4d_op_error(ctx, st, "max pooling: %s", err.msg);
    return S4D_OK;
}

const s4d_kernel s4d_cpu_kernel_maxpool = {
    .domain = "", .op_type = "MaxPool", .since_version = 1,
    .workspace_size = maxpool_workspace, .run = maxpool_run,
};
