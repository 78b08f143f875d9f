/*
 * Gemm (opset 7, 9, 11, 13): Y = alpha * A' B' + beta * C, A' = transA ? A^T : A,
 * likewise B'; C (optional from opset 11) broadcasts unidirectionally to [M, N].
 */
#include <string.h>

#include "ops/dense.h"
#include "ops/dense_util.h"

typedef s4d_gemm_params gemm_shape;

static s4d_status gemm_analyse(s4d_op_ctx *ctx, gemm_shape *s)
{
    if (ctx->num_inputs < 2 || ctx->num_inputs > 3 || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 2 or 3 inputs and 1 output, got %d and %d",
                            ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    memset(s, 0, sizeof *s);
    s->has_c = s4d_host_has_input(ctx, 2);
    s4d_dtype dt = a->dtype;
    s->dtype = dt;
    /* float16 is inferred for backends that run it (CUDA); the host reference refuses it in run. */
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT64 && dt != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "dtype %s is not supported (float32, float64; float16 on CUDA)",
                            s4d_dtype_name(dt));
    if (b->dtype != dt || (s->has_c && ctx->inputs[2].dtype != dt))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "inputs differ in dtype");
    if (a->rank != 2 || b->rank != 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "A and B must be 2-D, got rank %d and %d", a->rank,
                            b->rank);
    s->ta = s4d_op_attr_int(ctx, "transA", 0) != 0;
    s->tb = s4d_op_attr_int(ctx, "transB", 0) != 0;
    s->alpha = s4d_op_attr_float(ctx, "alpha", 1.0f);
    s->beta = s4d_op_attr_float(ctx, "beta", 1.0f);
    s->m = s->ta ? a->dims[1] : a->dims[0];
    s->k = s->ta ? a->dims[0] : a->dims[1];
    int64_t kb = s->tb ? b->dims[1] : b->dims[0];
    s->n = s->tb ? b->dims[0] : b->dims[1];
    if (kb != s->k)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "inner dimensions differ: A' is %lldx%lld, B' is %lldx%lld",
                            (long long)s->m, (long long)s->k, (long long)kb, (long long)s->n);
    if (s->m > S4D_HOST_BLAS_MAX_DIM || s->n > S4D_HOST_BLAS_MAX_DIM || s->k > S4D_HOST_BLAS_MAX_DIM)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a matrix dimension exceeds 2^31-1");
    s->c_rs = s->c_cs = 0;
    if (s->has_c) {
        const s4d_tensor *c = &ctx->inputs[2];
        if (c->rank > 2)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "C must have rank <= 2, got %d", c->rank);
        int64_t cr = c->rank == 2 ? c->dims[0] : 1;
        int64_t cc = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
        if ((cr != 1 && cr != s->m) || (cc != 1 && cc != s->n))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "C [%lld, %lld] does not broadcast to [%lld, %lld]",
                                (long long)cr, (long long)cc, (long long)s->m, (long long)s->n);
        s->c_cs = cc == 1 ? 0 : 1;
        s->c_rs = cr == 1 ? 0 : cc;
    }
    return S4D_OK;
}

static s4d_status gemm_infer(s4d_op_ctx *ctx)
{
    gemm_shape s;
    s4d_status st = gemm_analyse(ctx, &s);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(gemm_shape *)ctx->params = s;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = ctx->inputs[0].dtype;
    y->rank = 2;
    y->dims[0] = s.m;
    y->dims[1] = s.n;
    return S4D_OK;
}

static s4d_status gemm_run(s4d_op_ctx *ctx)
{
    gemm_shape s;
    if (ctx->params) {
        s = *(const gemm_shape *)ctx->params;
    } else {
        s4d_status st = gemm_analyse(ctx, &s);
        if (st != S4D_OK)
            return st;
    }
    if (s.dtype == S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "float16: the host Gemm runs float32 and float64 only");
    const s4d_tensor *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    int use_c = s.has_c && s.beta != 0.0f;
    if (a->dtype == S4D_DTYPE_FLOAT64) {
        double *y = ctx->outputs[0].data;
        const double *c = use_c ? ctx->inputs[2].data : NULL;
        for (int64_t i = 0; i < s.m; i++)
            for (int64_t j = 0; j < s.n; j++)
                y[i * s.n + j] = c ? c[i * s.c_rs + j * s.c_cs] : 0.0;
        s4d_host_dgemm(ctx->pool, s.ta, s.tb, s.m, s.n, s.k, s.alpha, a->data, a->dims[1], b->data, b->dims[1],
                      use_c ? (double)s.beta : 0.0, y, s.n);
    } else {
        float *y = ctx->outputs[0].data;
        const float *c = use_c ? ctx->inputs[2].data : NULL;
        for (int64_t i = 0; i < s.m; i++)
            for (int64_t j = 0; j < s.n; j++)
                y[i * s.n + j] = c ? c[i * s.c_rs + j * s.c_cs] : 0.0f;
        s4d_host_sgemm(ctx->pool, s.ta, s.tb, s.m, s.n, s.k, s.alpha, a->data, a->dims[1], b->data, b->dims[1],
                      use_c ? s.beta : 0.0f, y, s.n);
    }
    return S4D_OK;
}

static const s4d_attr_spec gemm_attrs[] = {{"alpha", S4D_ATTR_FLOAT},
                                           {"beta", S4D_ATTR_FLOAT},
                                           {"transA", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                           {"transB", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                           {NULL}};
const s4d_op_schema s4d_op_gemm = {"", "Gemm", 7, gemm_infer, NULL, gemm_run, sizeof(gemm_shape), 0, gemm_attrs};
