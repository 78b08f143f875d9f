/*
 * LayerNormalization (opset 17): normalise over the dimensions from axis on,
 *   Y = (X - mean) / sqrt(var + epsilon) * Scale + B,
 * Scale and B broadcast (right-aligned) to X.shape[axis:]. Optional outputs
 * Mean and InvStdDev have X's shape with the normalised dims set to 1.
 * Statistics accumulate in double (stash_type 1 asks for at least float).
 */
#include <math.h>
#include <string.h>

#include "ops/dense_util.h"
#include "ops/reduce.h"

typedef s4d_layernorm_params ln_plan;

static s4d_status ln_plan_make(s4d_op_ctx *ctx, ln_plan *p)
{
    if (ctx->num_inputs < 2 || ctx->num_inputs > 3 || ctx->num_outputs < 1 || ctx->num_outputs > 3)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 2-3 inputs and 1-3 outputs, got %d and %d",
                            ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *x = &ctx->inputs[0];
    memset(p, 0, sizeof *p);
    p->has_bias = s4d_host_has_input(ctx, 2);
    /* float16 (X, Scale, B alike) is inferred for backends that run it (CUDA); the host runs float32 only. */
    const s4d_dtype dt = x->dtype == S4D_DTYPE_FLOAT16 ? S4D_DTYPE_FLOAT16 : S4D_DTYPE_FLOAT32;
    for (int i = 0; i < (p->has_bias ? 3 : 2); i++)
        if (ctx->inputs[i].dtype != dt)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d is %s; only float32 is supported (float16 on CUDA)",
                                i, s4d_dtype_name(ctx->inputs[i].dtype));
    if (x->rank < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank >= 1");
    int64_t axis = s4d_op_attr_int(ctx, "axis", -1);
    if (axis < -x->rank || axis >= x->rank)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "axis %lld is out of range for rank %d", (long long)axis,
                            x->rank);
    p->axis = (int)(axis < 0 ? axis + x->rank : axis);
    p->rows = 1;
    p->cols = 1;
    for (int i = 0; i < p->axis; i++)
        p->rows *= x->dims[i];
    p->nrank = x->rank - p->axis;
    for (int i = p->axis; i < x->rank; i++) {
        p->cols *= x->dims[i];
        p->ndims[i - p->axis] = x->dims[i];
    }
    for (int t = 1; t < (p->has_bias ? 3 : 2); t++) {
        const s4d_tensor *s = &ctx->inputs[t];
        if (s->rank > p->nrank)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s has rank %d, above the %d normalised dims",
                                t == 1 ? "Scale" : "B", s->rank, p->nrank);
        for (int i = 0; i < s->rank; i++) {
            int64_t want = p->ndims[p->nrank - s->rank + i];
            if (s->dims[i] != want && s->dims[i] != 1)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s dim %d is %lld, not 1 or %lld", t == 1 ? "Scale" : "B",
                                    i, (long long)s->dims[i], (long long)want);
        }
        int64_t *str = t == 1 ? p->s_str : p->b_str;
        s4d_host_broadcast_strides(s->rank, s->dims, p->nrank, p->ndims, str);
        int dense = s4d_tensor_numel(s) == p->cols;
        if (t == 1)
            p->scale_dense = dense;
        else
            p->bias_dense = dense;
    }
    p->epsilon = s4d_op_attr_float(ctx, "epsilon", 1e-5f);
    return S4D_OK;
}

static s4d_status ln_infer(s4d_op_ctx *ctx)
{
    ln_plan p;
    s4d_status st = ln_plan_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        memcpy(ctx->params, &p, sizeof p);
    const s4d_tensor *x = &ctx->inputs[0];
    ctx->outputs[0] = *x;
    ctx->outputs[0].data = NULL;
    for (int o = 1; o < ctx->num_outputs; o++) {
        s4d_tensor *t = &ctx->outputs[o];
        *t = *x;
        t->data = NULL;
        t->dtype = S4D_DTYPE_FLOAT32; /* Mean and InvStdDev: stash_type 1, float */
        for (int i = p.axis; i < x->rank; i++)
            t->dims[i] = 1;
    }
    return S4D_OK;
}

/* Offset of flat normalised index i in a broadcast parameter. */
static int64_t ln_param_offset(const ln_plan *p, const int64_t *str, int64_t i)
{
    int64_t off = 0;
    for (int d = p->nrank - 1; d >= 0; d--) {
        off += (i % p->ndims[d]) * str[d];
        i /= p->ndims[d];
    }
    return off;
}

typedef struct ln_job {
    const ln_plan *p;
    const float *x, *scale, *bias;
    float *y, *mean, *inv;
    float eps;
} ln_job;

void s4d_layernorm_row_stats(const float *x, int64_t n, float eps, float *mean, float *inv_std)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    double mu = n ? s / (double)n : 0.0, v = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - mu;
        v += d * d;
    }
    v = n ? v / (double)n : 0.0;
    *inv_std = (float)(1.0 / sqrt(v + (double)eps));
    *mean = (float)mu;
}

static void ln_rows(void *arg, int64_t begin, int64_t end)
{
    const ln_job *j = arg;
    const ln_plan *p = j->p;
    const int64_t n = p->cols;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * n;
        float *y = j->y + r * n;
        float m, is;
        s4d_layernorm_row_stats(x, n, j->eps, &m, &is);
        if (j->mean)
            j->mean[r] = m;
        if (j->inv)
            j->inv[r] = is;
        if (p->scale_dense && (!j->bias || p->bias_dense)) {
            for (int64_t i = 0; i < n; i++)
                y[i] = (x[i] - m) * is * j->scale[i] + (j->bias ? j->bias[i] : 0.0f);
        } else {
            for (int64_t i = 0; i < n; i++) {
                float sc = j->scale[ln_param_offset(p, p->s_str, i)];
                float b = j->bias ? j->bias[ln_param_offset(p, p->b_str, i)] : 0.0f;
                y[i] = (x[i] - m) * is * sc + b;
            }
        }
    }
}

static s4d_status ln_run(s4d_op_ctx *ctx)
{
    ln_plan local;
    const ln_plan *p = ctx->params;
    if (!p) {
        s4d_status st = ln_plan_make(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    if (ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s: the host LayerNormalization runs float32 only",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    ln_job j = {p, ctx->inputs[0].data, ctx->inputs[1].data, p->has_bias ? ctx->inputs[2].data : NULL,
                ctx->outputs[0].data, ctx->num_outputs > 1 ? ctx->outputs[1].data : NULL,
                ctx->num_outputs > 2 ? ctx->outputs[2].data : NULL, p->epsilon};
    s4d_parallel_for(ctx->pool, p->rows, 1 + 8192 / (p->cols + 1), ln_rows, &j);
    return S4D_OK;
}

static const s4d_attr_spec ln_attrs[] = {
    {"axis", S4D_ATTR_INT}, {"epsilon", S4D_ATTR_FLOAT}, {"stash_type", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_layernorm = {"", "LayerNormalization", 17, ln_infer, NULL, ln_run,
                                        sizeof(s4d_layernorm_params), 0, ln_attrs};
