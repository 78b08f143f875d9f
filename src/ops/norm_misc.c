/*
 * The normalisations older image and style-transfer networks export:
 * InstanceNormalization (per sample and channel over the spatial dims),
 * LRN (across channels, AlexNet / GoogLeNet era) and
 * MeanVarianceNormalization (over any set of axes, default N, H, W).
 * float32; statistics are accumulated in double.
 */
#include <math.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/extra.h"

static s4d_status need_f32(s4d_op_ctx *ctx, int i, const char *what)
{
    if (ctx->inputs[i].dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) is %s; only float32 is supported", i,
                            what, s4d_dtype_name(ctx->inputs[i].dtype));
    return S4D_OK;
}

/* ---- InstanceNormalization ---- */

static s4d_status in_make(s4d_op_ctx *ctx, s4d_norm_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 3, 3, 1);
    if (st != S4D_OK)
        return st;
    if ((st = need_f32(ctx, 0, "input")) != S4D_OK || (st = need_f32(ctx, 1, "scale")) != S4D_OK ||
        (st = need_f32(ctx, 2, "B")) != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (x->rank < 3)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input must have rank >= 3 (N, C, spatial), got %d",
                            x->rank);
    memset(p, 0, sizeof *p);
    p->n = x->dims[0];
    p->c = x->dims[1];
    p->inner = s4d_tensor_numel(x) / (p->n * p->c > 0 ? p->n * p->c : 1);
    p->epsilon = s4d_op_attr_float(ctx, "epsilon", 1e-5f);
    for (int i = 1; i < 3; i++)
        if (ctx->inputs[i].rank != 1 || ctx->inputs[i].dims[0] != p->c)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d must be [%lld] (one per channel)", i,
                                (long long)p->c);
    return S4D_OK;
}

static s4d_status in_infer(s4d_op_ctx *ctx)
{
    s4d_norm_params p;
    s4d_status st = in_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_norm_params *)ctx->params = p;
    s4d_set_out(ctx, 0, S4D_DTYPE_FLOAT32, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

typedef struct in_job {
    const s4d_norm_params *p;
    const float *x, *scale, *bias;
    float *y;
} in_job;

static void in_planes(void *arg, int64_t b, int64_t e)
{
    const in_job *j = arg;
    const int64_t m = j->p->inner;
    for (int64_t pl = b; pl < e; pl++) {
        const float *x = j->x + pl * m;
        float *y = j->y + pl * m;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < m; i++)
            s += x[i];
        double mean = m ? s / (double)m : 0;
        for (int64_t i = 0; i < m; i++)
            s2 += ((double)x[i] - mean) * ((double)x[i] - mean);
        double var = m ? s2 / (double)m : 0;
        int64_t c = pl % j->p->c;
        double a = (double)j->scale[c] / sqrt(var + (double)j->p->epsilon);
        double b0 = (double)j->bias[c] - mean * a;
        for (int64_t i = 0; i < m; i++)
            y[i] = (float)((double)x[i] * a + b0);
    }
}

static s4d_status in_run(s4d_op_ctx *ctx)
{
    s4d_norm_params local;
    const s4d_norm_params *p = ctx->params;
    if (!p) {
        s4d_status st = in_make(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    in_job j = {p, ctx->inputs[0].data, ctx->inputs[1].data, ctx->inputs[2].data,
                ctx->outputs[0].data};
    s4d_parallel_for(ctx->pool, p->n * p->c, 1 + 16384 / (p->inner + 1), in_planes, &j);
    return S4D_OK;
}

static const s4d_attr_spec in_attrs[] = {{"epsilon", S4D_ATTR_FLOAT}, {"consumed_inputs", S4D_ATTR_INTS}, {NULL}};
const s4d_op_schema s4d_op_instance_norm = {"", "InstanceNormalization", 1, in_infer, NULL,
                                            in_run, sizeof(s4d_norm_params), 0, in_attrs};

/* ---- LRN ---- */

static s4d_status lrn_make(s4d_op_ctx *ctx, s4d_lrn_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK || (st = need_f32(ctx, 0, "X")) != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (x->rank < 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank >= 2, got %d", x->rank);
    memset(p, 0, sizeof *p);
    p->size = s4d_op_attr_int(ctx, "size", 0);
    if (p->size < 1 || p->size > ((int64_t)1 << 40))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute size must be in [1, 2^40]");
    p->alpha = s4d_op_attr_float(ctx, "alpha", 1e-4f);
    p->beta = s4d_op_attr_float(ctx, "beta", 0.75f);
    p->bias = s4d_op_attr_float(ctx, "bias", 1.0f);
    p->n = x->dims[0];
    p->c = x->dims[1];
    p->inner = s4d_tensor_numel(x) / (p->n * p->c > 0 ? p->n * p->c : 1);
    return S4D_OK;
}

static s4d_status lrn_infer(s4d_op_ctx *ctx)
{
    s4d_lrn_params p;
    s4d_status st = lrn_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_lrn_params *)ctx->params = p;
    s4d_set_out(ctx, 0, S4D_DTYPE_FLOAT32, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

typedef struct lrn_job {
    const s4d_lrn_params *p;
    const float *x;
    float *y;
} lrn_job;

/* Items: (n, c) planes; the window over channels is [c - (size-1)/2, c + ceil((size-1)/2)]. */
static void lrn_planes(void *arg, int64_t b, int64_t e)
{
    const lrn_job *j = arg;
    const s4d_lrn_params *p = j->p;
    const int64_t lo_off = (p->size - 1) / 2, hi_off = p->size - 1 - lo_off;
    for (int64_t pl = b; pl < e; pl++) {
        int64_t n = pl / p->c, c = pl % p->c;
        int64_t c0 = c - lo_off < 0 ? 0 : c - lo_off, c1 = c + hi_off >= p->c ? p->c - 1 : c + hi_off;
        const float *xn = j->x + n * p->c * p->inner;
        float *y = j->y + pl * p->inner;
        for (int64_t i = 0; i < p->inner; i++) {
            double sq = 0;
            for (int64_t k = c0; k <= c1; k++) {
                double v = xn[k * p->inner + i];
                sq += v * v;
            }
            double d = pow((double)p->bias + (double)p->alpha / (double)p->size * sq, (double)p->beta);
            y[i] = (float)((double)xn[c * p->inner + i] / d);
        }
    }
}

static s4d_status lrn_run(s4d_op_ctx *ctx)
{
    s4d_lrn_params local;
    const s4d_lrn_params *p = ctx->params;
    if (!p) {
        s4d_status st = lrn_make(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    lrn_job j = {p, ctx->inputs[0].data, ctx->outputs[0].data};
    s4d_parallel_for(ctx->pool, p->n * p->c, 1 + 4096 / (p->inner * p->size + 1), lrn_planes, &j);
    return S4D_OK;
}

static const s4d_attr_spec lrn_attrs[] = {
    {"alpha", S4D_ATTR_FLOAT}, {"beta", S4D_ATTR_FLOAT}, {"bias", S4D_ATTR_FLOAT}, {"size", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_lrn = {"", "LRN", 1, lrn_infer, NULL, lrn_run, sizeof(s4d_lrn_params), 0, lrn_attrs};

/* ---- MeanVarianceNormalization: (X - mean) / (sqrt(variance) + 1e-9) over the axes ---- */

static s4d_status mvn_make(s4d_op_ctx *ctx, s4d_norm_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK || (st = need_f32(ctx, 0, "X")) != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    memset(p, 0, sizeof *p);
    p->rank = x->rank;
    const s4d_attr *a = s4d_op_attr(ctx, "axes");
    if (a && a->type != S4D_ATTR_INTS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute axes must be ints");
    int64_t def[3] = {0, 2, 3};
    const int64_t *axes = a ? a->ints : def;
    size_t na = a ? a->count : 3;
    for (size_t i = 0; i < na; i++) {
        int ax;
        if ((st = s4d_norm_axis(ctx, axes[i], x->rank, "axes value", &ax)) != S4D_OK)
            return st;
        p->axes_mask |= 1 << ax;
    }
    return S4D_OK;
}

static s4d_status mvn_infer(s4d_op_ctx *ctx)
{
    s4d_norm_params p;
    s4d_status st = mvn_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_norm_params *)ctx->params = p;
    s4d_set_out(ctx, 0, S4D_DTYPE_FLOAT32, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

/* The kept-axes index of element i (row-major over dims). */
static int64_t mvn_group(const s4d_norm_params *p, const int64_t *dims, int64_t i)
{
    int64_t g = 0, mul = 1;
    for (int d = p->rank - 1; d >= 0; d--) {
        int64_t c = i % dims[d];
        i /= dims[d];
        if (!(p->axes_mask & (1 << d))) {
            g += c * mul;
            mul *= dims[d];
        }
    }
    return g;
}

static size_t mvn_ws(const s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_norm_params local;
    const s4d_norm_params *p = ctx->params;
    if (!p) {
        if (mvn_make((s4d_op_ctx *)ctx, &local) != S4D_OK)
            return 0;
        p = &local;
    }
    int64_t groups = 1;
    for (int d = 0; d < x->rank; d++)
        if (!(p->axes_mask & (1 << d)))
            groups *= x->dims[d];
    return sizeof(double) * 3 * (size_t)groups;
}

static s4d_status mvn_run(s4d_op_ctx *ctx)
{
    s4d_norm_params local;
    const s4d_norm_params *p = ctx->params;
    if (!p) {
        s4d_status st = mvn_make(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    int64_t groups = 1, n = s4d_tensor_numel(x);
    for (int d = 0; d < x->rank; d++)
        if (!(p->axes_mask & (1 << d)))
            groups *= x->dims[d];
    if (ctx->workspace_size < sizeof(double) * 3 * (size_t)groups)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            ctx->workspace_size);
    double *sum = ctx->workspace, *sq = sum + groups, *cnt = sq + groups;
    memset(sum, 0, sizeof(double) * 3 * (size_t)groups);
    const float *xv = x->data;
    float *y = ctx->outputs[0].data;
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group(p, x->dims, i);
        sum[g] += xv[i];
        cnt[g] += 1;
    }
    for (int64_t g = 0; g < groups; g++)
        sum[g] = cnt[g] ? sum[g] / cnt[g] : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group(p, x->dims, i);
        double d = xv[i] - sum[g];
        sq[g] += d * d;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group(p, x->dims, i);
        double sd = sqrt(cnt[g] ? sq[g] / cnt[g] : 0);
        y[i] = (float)(((double)xv[i] - sum[g]) / (sd + 1e-9));
    }
    return S4D_OK;
}

static const s4d_attr_spec mvn_attrs[] = {{"axes", S4D_ATTR_INTS}, {NULL}};
const s4d_op_schema s4d_op_mvn = {"", "MeanVarianceNormalization", 9, mvn_infer, mvn_ws, mvn_run,
                                  sizeof(s4d_norm_params), 0, mvn_attrs};
