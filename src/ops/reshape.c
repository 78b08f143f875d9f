/*
 * Ops that change only the shape, never the bytes: Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity. run() copies the input when the engine did not alias
 * the output to it.
 */
#include "ops/broadcast.h"

static s4d_status run_copy(s4d_op_ctx *ctx)
{
    const s4d_tensor *in = &ctx->inputs[0];
    s4d_tensor *out = &ctx->outputs[0];
    size_t bytes = (size_t)s4d_tensor_numel(in) * s4d_dtype_size(in->dtype);
    if (out->data != in->data && bytes)
        memcpy(out->data, in->data, bytes);
    return S4D_OK;
}

static s4d_status check_data(s4d_op_ctx *ctx)
{
    if (s4d_dtype_size(ctx->inputs[0].dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    return S4D_OK;
}

/* ---- Reshape ------------------------------------------------------------- */

static s4d_status infer_reshape(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK || (st = check_data(ctx)) != S4D_OK)
        return st;
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t shape[S4D_MAX_RANK], n;
    if ((st = s4d_const_ints(ctx, 1, "shape", shape, S4D_MAX_RANK, &n)) != S4D_OK)
        return st;
    int allowzero = ctx->opset >= 14 && s4d_op_attr_int(ctx, "allowzero", 0) != 0;
    int infer_at = -1;
    int64_t known = 1;
    for (int64_t i = 0; i < n; i++) {
        if (shape[i] == -1) {
            if (infer_at >= 0)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "shape has more than one -1");
            infer_at = (int)i;
            continue;
        }
        if (shape[i] == 0 && !allowzero) {
            if (i >= in->rank)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "shape[%lld] is 0 (copy) but the input has rank %d",
                                    (long long)i, in->rank);
            shape[i] = in->dims[i];
        }
        if (shape[i] < 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "shape[%lld] is %lld", (long long)i, (long long)shape[i]);
        if (s4d_mul_i64(known, shape[i], &known))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "shape holds more than 2^63 elements (at shape[%lld] = %lld)",
                                (long long)i, (long long)shape[i]);
    }
    int64_t total = s4d_tensor_numel(in);
    if (infer_at >= 0) {
        if (known == 0 || total % known != 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "cannot infer the -1 dim: %lld elements over %lld",
                                (long long)total, (long long)known);
        shape[infer_at] = total / known;
        known = total;
    }
    if (known != total)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "shape holds %lld elements, the input %lld", (long long)known,
                            (long long)total);
    s4d_set_out(ctx, 0, in->dtype, (int)n, shape);
    return S4D_OK;
}

static const s4d_attr_spec reshape_attrs[] = {{"allowzero", S4D_ATTR_INT, S4D_ATTR_BOOL, 14}, {NULL}};
const s4d_op_schema s4d_op_reshape = {"", "Reshape", 5, infer_reshape, NULL, run_copy, 0, 0, reshape_attrs};

/* ---- Flatten ------------------------------------------------------------- */

static s4d_status infer_flatten(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK || (st = check_data(ctx)) != S4D_OK)
        return st;
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t axis = s4d_op_attr_int(ctx, "axis", 1);
    if (axis < -(int64_t)in->rank || axis > in->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)axis,
                            in->rank);
    if (axis < 0)
        axis += in->rank;
    int64_t d[2] = {1, 1};
    for (int i = 0; i < in->rank; i++)
        d[i < axis ? 0 : 1] *= in->dims[i];
    s4d_set_out(ctx, 0, in->dtype, 2, d);
    return S4D_OK;
}

static const s4d_attr_spec flatten_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_flatten = {"", "Flatten", 1, infer_flatten, NULL, run_copy, 0, 0, flatten_attrs};

/* ---- Squeeze / Unsqueeze --------------------------------------------------- */

/* Axes from the attribute (before opset 13) or the optional input 1. *n = -1: none given. */
static s4d_status read_axes(s4d_op_ctx *ctx, int64_t *axes, int64_t *n)
{
    *n = -1;
    if (ctx->opset < 13) {
        const s4d_attr *a = s4d_op_attr(ctx, "axes");
        if (!a)
            return S4D_OK;
        if (a->type != S4D_ATTR_INTS || a->count > S4D_MAX_RANK * 2)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "attribute axes must be a list of at most %d ints",
                                S4D_MAX_RANK * 2);
        for (size_t i = 0; i < a->count; i++)
            axes[i] = a->ints[i];
        *n = (int64_t)a->count;
        return S4D_OK;
    }
    if (!s4d_in_present(ctx, 1))
        return S4D_OK;
    return s4d_const_ints(ctx, 1, "axes", axes, S4D_MAX_RANK * 2, n);
}

static s4d_status infer_squeeze(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, ctx->opset >= 13 ? 2 : 1, 1);
    if (st != S4D_OK || (st = check_data(ctx)) != S4D_OK)
        return st;
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t axes[S4D_MAX_RANK * 2], n;
    if ((st = read_axes(ctx, axes, &n)) != S4D_OK)
        return st;
    int drop[S4D_MAX_RANK] = {0};
    if (n < 0) {
        for (int d = 0; d < in->rank; d++)
            drop[d] = in->dims[d] == 1;
    } else {
        for (int64_t i = 0; i < n; i++) {
            int a;
            if ((st = s4d_norm_axis(ctx, axes[i], in->rank, "axes value", &a)) != S4D_OK)
                return st;
            if (in->dims[a] != 1)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "cannot squeeze axis %d: its size is %lld", a,
                                    (long long)in->dims[a]);
            drop[a] = 1;
        }
    }
    int64_t dims[S4D_MAX_RANK];
    int r = 0;
    for (int d = 0; d < in->rank; d++)
        if (!drop[d])
            dims[r++] = in->dims[d];
    s4d_set_out(ctx, 0, in->dtype, r, dims);
    return S4D_OK;
}

static s4d_status infer_unsqueeze(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, ctx->opset >= 13 ? 2 : 1, ctx->opset >= 13 ? 2 : 1, 1);
    if (st != S4D_OK || (st = check_data(ctx)) != S4D_OK)
        return st;
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t axes[S4D_MAX_RANK * 2], n;
    if ((st = read_axes(ctx, axes, &n)) != S4D_OK)
        return st;
    if (n < 0)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "axes are required");
    int r = in->rank + (int)n;
    if (r > S4D_MAX_RANK)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "output rank %d exceeds the maximum %d", r, S4D_MAX_RANK);
    int add[S4D_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++) {
        int a;
        if ((st = s4d_norm_axis(ctx, axes[i], r, "axes value", &a)) != S4D_OK)
            return st;
        if (add[a])
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis %d is repeated", a);
        add[a] = 1;
    }
    int64_t dims[S4D_MAX_RANK];
    for (int d = 0, k = 0; d < r; d++)
        dims[d] = add[d] ? 1 : in->dims[k++];
    s4d_set_out(ctx, 0, in->dtype, r, dims);
    return S4D_OK;
}

static const s4d_attr_spec squeeze_attrs[] = {{"axes", S4D_ATTR_INTS, 0, 0, 12}, {NULL}};
const s4d_op_schema s4d_op_squeeze = {"", "Squeeze", 1, infer_squeeze, NULL, run_copy, 0, 0, squeeze_attrs};
const s4d_op_schema s4d_op_unsqueeze = {"", "Unsqueeze", 1, infer_unsqueeze, NULL, run_copy, 0, 0, squeeze_attrs};

/* ---- Identity ---------------------------------------------------------------- */

static s4d_status infer_identity(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK || (st = check_data(ctx)) != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

const s4d_op_schema s4d_op_identity = {"", "Identity", 1, infer_identity, NULL, run_copy};
