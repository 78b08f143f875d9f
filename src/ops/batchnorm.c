/*
 * BatchNormalization (opset 7, 9, 14, 15), inference form:
 *   Y = (X - mean) / sqrt(var + epsilon) * scale + B   per channel (axis 1).
 * training_mode = 1 (and the extra running-statistics outputs) is refused:
 * the engine runs inference only.
 */
#include <math.h>

#include <string.h>

#include "ops/dense_util.h"
#include "ops/reduce.h"

static s4d_status bn_check(s4d_op_ctx *ctx, s4d_batchnorm_params *p)
{
    if (ctx->num_inputs != 5)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 5 inputs (X, scale, B, mean, var), got %d",
                            ctx->num_inputs);
    if (ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%d outputs: the training outputs are not supported",
                            ctx->num_outputs);
    if (s4d_op_attr_int(ctx, "training_mode", 0) != 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "training_mode=1 is not supported (inference only)");
    if (s4d_op_attr_int(ctx, "spatial", 1) != 1)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "spatial=0 is not supported");
    const s4d_tensor *x = &ctx->inputs[0];
    if (x->rank < 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank >= 2, got %d", x->rank);
    for (int i = 0; i < 5; i++) {
        const s4d_tensor *t = &ctx->inputs[i];
        if (t->dtype != S4D_DTYPE_FLOAT32)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d is %s; only float32 is supported", i,
                                s4d_dtype_name(t->dtype));
        if (i > 0 && (t->rank != 1 || t->dims[0] != x->dims[1]))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d must be [%lld] (the channel count)", i,
                                (long long)x->dims[1]);
    }
    memset(p, 0, sizeof *p);
    p->epsilon = s4d_op_attr_float(ctx, "epsilon", 1e-5f);
    p->n = x->dims[0];
    p->c = x->dims[1];
    p->plane = 1;
    for (int i = 2; i < x->rank; i++)
        p->plane *= x->dims[i];
    return S4D_OK;
}

static s4d_status bn_infer(s4d_op_ctx *ctx)
{
    s4d_batchnorm_params p;
    s4d_status st = bn_check(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        memcpy(ctx->params, &p, sizeof p);
    ctx->outputs[0] = ctx->inputs[0];
    ctx->outputs[0].data = NULL;
    return S4D_OK;
}

typedef struct bn_job {
    const float *x, *scale, *bias, *mean, *var;
    float *y;
    float eps;
    int64_t c, plane;
} bn_job;

static void bn_planes(void *arg, int64_t begin, int64_t end)
{
    const bn_job *j = arg;
    for (int64_t p = begin; p < end; p++) {
        int64_t c = p % j->c;
        float a = j->scale[c] / sqrtf(j->var[c] + j->eps);
        float b = j->bias[c] - j->mean[c] * a;
        const float *x = j->x + p * j->plane;
        float *y = j->y + p * j->plane;
        for (int64_t i = 0; i < j->plane; i++)
            y[i] = x[i] * a + b;
    }
}

static s4d_status bn_run(s4d_op_ctx *ctx)
{
    s4d_batchnorm_params local;
    const s4d_batchnorm_params *p = ctx->params;
    if (!p) {
        s4d_status st = bn_check(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    bn_job j = {x->data, ctx->inputs[1].data, ctx->inputs[2].data, ctx->inputs[3].data,
                ctx->inputs[4].data, ctx->outputs[0].data, p->epsilon, p->c, p->plane};
    s4d_parallel_for(ctx->pool, p->n * p->c, 1 + 4096 / (j.plane + 1), bn_planes, &j);
    return S4D_OK;
}

static const s4d_attr_spec bn_attrs[] = {{"epsilon", S4D_ATTR_FLOAT},
                                         {"momentum", S4D_ATTR_FLOAT},
                                         {"spatial", S4D_ATTR_INT},
                                         {"training_mode", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                         {NULL}};
const s4d_op_schema s4d_op_batchnorm = {"", "BatchNormalization", 7, bn_infer, NULL, bn_run,
                                        sizeof(s4d_batchnorm_params), 0, bn_attrs};
