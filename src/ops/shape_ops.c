/*
 * Ops that make tensors from shapes: Shape, Size, ConstantOfShape, Range.
 * Shape and Size depend only on static dims, so the builder can fold them;
 * ConstantOfShape and Range need constant inputs to know their own shape.
 */
#include <math.h>

#include "ops/broadcast.h"
#include "ops/movement.h"

/* ---- Shape (start/end since opset 15) ------------------------------------------------ */

static void shape_range(const s4d_op_ctx *ctx, int *b, int *e)
{
    int r = ctx->inputs[0].rank;
    int64_t s = s4d_op_attr_int(ctx, "start", 0), t = s4d_op_attr_int(ctx, "end", r);
    if (s < 0)
        s += r;
    if (t < 0)
        t += r;
    s = s < 0 ? 0 : s > r ? r : s;
    t = t < 0 ? 0 : t > r ? r : t;
    *b = (int)s;
    *e = (int)(t > s ? t : s);
}

static s4d_status infer_shape(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    int b, e;
    shape_range(ctx, &b, &e);
    int64_t n = e - b;
    s4d_set_out(ctx, 0, S4D_DTYPE_INT64, 1, &n);
    if (ctx->params)
        *(s4d_shape_params *)ctx->params = (s4d_shape_params){b, e};
    return S4D_OK;
}

static s4d_status run_shape(s4d_op_ctx *ctx)
{
    int b, e;
    if (ctx->params) {
        b = ((const s4d_shape_params *)ctx->params)->begin;
        e = ((const s4d_shape_params *)ctx->params)->end;
    } else {
        shape_range(ctx, &b, &e);
    }
    for (int d = b; d < e; d++)
        ((int64_t *)ctx->outputs[0].data)[d - b] = ctx->inputs[0].dims[d];
    return S4D_OK;
}

/* With static shapes the output is known at build: always folded (S4D_OP_SHAPE_ONLY). */
static const s4d_attr_spec shape_attrs[] = {{"start", S4D_ATTR_INT}, {"end", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_shape = {"", "Shape", 1, infer_shape, NULL, run_shape,
                                    sizeof(s4d_shape_params), S4D_OP_SHAPE_ONLY, shape_attrs};

/* ---- Size ------------------------------------------------------------------------------ */

static s4d_status infer_size(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, S4D_DTYPE_INT64, 0, NULL);
    return S4D_OK;
}

static s4d_status run_size(s4d_op_ctx *ctx)
{
    *(int64_t *)ctx->outputs[0].data = s4d_tensor_numel(&ctx->inputs[0]);
    return S4D_OK;
}

const s4d_op_schema s4d_op_size = {"", "Size", 1, infer_size, NULL, run_size, 0,
                                   S4D_OP_SHAPE_ONLY};

/* ---- ConstantOfShape ---------------------------------------------------------------------- */

static s4d_status cos_value(s4d_op_ctx *ctx, const s4d_tensor **val)
{
    const s4d_attr *a = s4d_op_attr(ctx, "value");
    *val = NULL;
    if (!a)
        return S4D_OK;
    if (a->type != S4D_ATTR_TENSOR || !a->t || s4d_tensor_numel(a->t) != 1 || !a->t->data)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "attribute value must be a one-element tensor");
    if (s4d_dtype_size(a->t->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "attribute value has unsupported dtype %s",
                            s4d_dtype_name(a->t->dtype));
    *val = a->t;
    return S4D_OK;
}

static s4d_status infer_constant_of_shape(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    if (ctx->inputs[0].dtype != S4D_DTYPE_INT64)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (input) has dtype %s, expected int64",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    const s4d_tensor *val;
    if ((st = cos_value(ctx, &val)) != S4D_OK)
        return st;
    int64_t dims[S4D_MAX_RANK], n;
    if ((st = s4d_const_ints(ctx, 0, "input", dims, S4D_MAX_RANK, &n)) != S4D_OK)
        return st;
    for (int64_t i = 0; i < n; i++)
        if (dims[i] < 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input[%lld] is %lld", (long long)i, (long long)dims[i]);
    s4d_set_out(ctx, 0, val ? val->dtype : S4D_DTYPE_FLOAT32, (int)n, dims);
    if (ctx->params) {
        s4d_constant_of_shape_params *p = ctx->params;
        memset(p, 0, sizeof *p);
        p->dtype = ctx->outputs[0].dtype;
        if (val)
            memcpy(p->value, val->data, s4d_dtype_size(val->dtype));
    }
    return S4D_OK;
}

static s4d_status run_constant_of_shape(s4d_op_ctx *ctx)
{
    s4d_tensor *out = &ctx->outputs[0];
    int64_t n = s4d_tensor_numel(out);
    size_t es = s4d_dtype_size(out->dtype);
    const void *value;
    if (ctx->params) {
        /* A missing value attribute left zero bytes here: the same fill. */
        value = ((const s4d_constant_of_shape_params *)ctx->params)->value;
    } else {
        const s4d_tensor *val;
        s4d_status st = cos_value(ctx, &val);
        if (st != S4D_OK)
            return st;
        if (!val) {
            memset(out->data, 0, (size_t)n * es);
            return S4D_OK;
        }
        value = val->data;
    }
    static const unsigned char zero[8];
    if (memcmp(value, zero, es) == 0) {
        memset(out->data, 0, (size_t)n * es);
        return S4D_OK;
    }
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)out->data + (size_t)i * es, value, es);
    return S4D_OK;
}

static const s4d_attr_spec cos_attrs[] = {{"value", S4D_ATTR_TENSOR}, {NULL}};
const s4d_op_schema s4d_op_constant_of_shape = {"", "ConstantOfShape", 9, infer_constant_of_shape, NULL,
                                                 run_constant_of_shape,
                                                 sizeof(s4d_constant_of_shape_params), 0, cos_attrs};

/* ---- Range -------------------------------------------------------------------------------- */

static s4d_status range_count(s4d_op_ctx *ctx, int need_data, int64_t *count)
{
    s4d_dtype dt = ctx->inputs[0].dtype;
    int ok = dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT64 || dt == S4D_DTYPE_INT16 || dt == S4D_DTYPE_INT32 ||
             dt == S4D_DTYPE_INT64;
    if (!ok)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (start) has unsupported dtype %s", s4d_dtype_name(dt));
    static const char *names[3] = {"start", "limit", "delta"};
    for (int i = 0; i < 3; i++) {
        const s4d_tensor *t = &ctx->inputs[i];
        if (t->dtype != dt)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) has dtype %s but start has %s", i, names[i],
                                s4d_dtype_name(t->dtype), s4d_dtype_name(dt));
        if (s4d_tensor_numel(t) != 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (%s) must be a scalar", i, names[i]);
        if (need_data && !t->data)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                                "input %d (%s) must be a constant: the output length depends on it", i, names[i]);
    }
    if (s4d_dtype_is_int(dt)) {
        int64_t s = s4d_load_i64(dt, ctx->inputs[0].data, 0), l = s4d_load_i64(dt, ctx->inputs[1].data, 0),
                d = s4d_load_i64(dt, ctx->inputs[2].data, 0);
        if (d == 0)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "delta is 0");
        /* ceil((l - s) / d) in exact integer arithmetic. */
        int64_t num;
        if (s == INT64_MIN || s4d_add_i64(l, -s, &num) || (num == INT64_MIN && d == -1))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "start %lld, limit %lld, delta %lld give a length past int64",
                                (long long)s, (long long)l, (long long)d);
        int64_t q = num / d;
        if (q * d != num && ((num > 0) == (d > 0)))
            q++;
        *count = q > 0 ? q : 0;
    } else {
        double s = s4d_load_f64(dt, ctx->inputs[0].data, 0), l = s4d_load_f64(dt, ctx->inputs[1].data, 0),
               d = s4d_load_f64(dt, ctx->inputs[2].data, 0);
        double c = ceil((l - s) / d);
        if (!(d != 0) || !(c == c) || c > 1e12)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "start %g, limit %g, delta %g give no finite length", s, l, d);
        *count = c > 0 ? (int64_t)c : 0;
    }
    return S4D_OK;
}

static s4d_status infer_range(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 3, 3, 1);
    int64_t n = 0;
    if (st != S4D_OK || (st = range_count(ctx, 1, &n)) != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    s4d_set_out(ctx, 0, dt, 1, &n);
    if (ctx->params) {
        s4d_range_params *p = ctx->params;
        memset(p, 0, sizeof *p);
        p->dtype = dt;
        if (s4d_dtype_is_int(dt)) {
            p->istart = s4d_load_i64(dt, ctx->inputs[0].data, 0);
            p->idelta = s4d_load_i64(dt, ctx->inputs[2].data, 0);
        } else {
            p->fstart = s4d_load_f64(dt, ctx->inputs[0].data, 0);
            p->fdelta = s4d_load_f64(dt, ctx->inputs[2].data, 0);
        }
    }
    return S4D_OK;
}

static s4d_status run_range(s4d_op_ctx *ctx)
{
    s4d_tensor *out = &ctx->outputs[0];
    s4d_dtype dt = out->dtype;
    int64_t n = out->dims[0];
    const s4d_range_params *p = ctx->params;
    if (s4d_dtype_is_int(dt)) {
        int64_t s = p ? p->istart : s4d_load_i64(dt, ctx->inputs[0].data, 0),
                d = p ? p->idelta : s4d_load_i64(dt, ctx->inputs[2].data, 0);
        for (int64_t i = 0; i < n; i++) {
            int64_t v = (int64_t)((uint64_t)s + (uint64_t)i * (uint64_t)d);
            if (dt == S4D_DTYPE_INT16)
                ((int16_t *)out->data)[i] = (int16_t)v;
            else if (dt == S4D_DTYPE_INT32)
                ((int32_t *)out->data)[i] = (int32_t)v;
            else
                ((int64_t *)out->data)[i] = v;
        }
        return S4D_OK;
    }
    /* Repeated addition, as the ONNX reference defines it, not start + i * delta. */
    double s = p ? p->fstart : s4d_load_f64(dt, ctx->inputs[0].data, 0),
           d = p ? p->fdelta : s4d_load_f64(dt, ctx->inputs[2].data, 0);
    if (dt == S4D_DTYPE_FLOAT32) {
        float v = (float)s;
        for (int64_t i = 0; i < n; i++, v += (float)d)
            ((float *)out->data)[i] = v;
    } else {
        double v = s;
        for (int64_t i = 0; i < n; i++, v += d)
            ((double *)out->data)[i] = v;
    }
    return S4D_OK;
}

const s4d_op_schema s4d_op_range = {"", "Range", 11, infer_range, NULL, run_range,
                                    sizeof(s4d_range_params)};
