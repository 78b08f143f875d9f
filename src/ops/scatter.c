/*
 * ScatterND and ScatterElements: output = data, then each update (a slice for
 * ScatterND, an element for ScatterElements) is written, or combined with
 * add/mul/max/min (opsets 16 and 18), where its indices say. Updates are
 * applied in order on one thread, so duplicate indices with a reduction give
 * the same result on every run.
 */
#include "ops/broadcast.h"
#include "ops/movement.h"

typedef s4d_scatter_reduction scat_red;

static s4d_status read_reduction(s4d_op_ctx *ctx, scat_red *r)
{
    const char *s = s4d_op_attr_string(ctx, "reduction", "none");
    if (!strcmp(s, "none"))
        *r = S4D_SCATTER_NONE;
    else if (!strcmp(s, "add"))
        *r = S4D_SCATTER_ADD;
    else if (!strcmp(s, "mul"))
        *r = S4D_SCATTER_MUL;
    else if (!strcmp(s, "max"))
        *r = S4D_SCATTER_MAX;
    else if (!strcmp(s, "min"))
        *r = S4D_SCATTER_MIN;
    else
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "reduction '%s' is not one of none, add, mul, max, min", s);
    return S4D_OK;
}

/* The checks ScatterND and ScatterElements share: three inputs, the reduction attribute, and a
   data dtype the reduction can combine. */
static s4d_status check_data_and_reduction(s4d_op_ctx *ctx, scat_red *red)
{
    s4d_status st = s4d_check_arity(ctx, 3, 3, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if ((st = read_reduction(ctx, red)) != S4D_OK)
        return st;
    if (s4d_dtype_size(x->dtype) == 0 || (*red != S4D_SCATTER_NONE && !s4d_dtype_is_int(x->dtype) && !s4d_dtype_is_float(x->dtype)))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s", s4d_dtype_name(x->dtype));
    return S4D_OK;
}

static s4d_status infer_scatter_nd(s4d_op_ctx *ctx)
{
    scat_red red;
    s4d_status st = check_data_and_reduction(ctx, &red);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1], *up = &ctx->inputs[2];
    if (idx->dtype != S4D_DTYPE_INT64)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 1 (indices) has dtype %s, expected int64",
                            s4d_dtype_name(idx->dtype));
    if (up->dtype != x->dtype)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 2 (updates) has dtype %s but data has %s",
                            s4d_dtype_name(up->dtype), s4d_dtype_name(x->dtype));
    if (idx->rank < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input 1 (indices) must have rank >= 1");
    int64_t k = idx->dims[idx->rank - 1];
    if (k < 1 || k > x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "indices' last dim is %lld, must be in [1, %d]", (long long)k, x->rank);
    int ur = idx->rank - 1 + x->rank - (int)k;
    int ok = up->rank == ur;
    for (int d = 0; ok && d < idx->rank - 1; d++)
        ok = up->dims[d] == idx->dims[d];
    for (int d = 0; ok && d < x->rank - (int)k; d++)
        ok = up->dims[idx->rank - 1 + d] == x->dims[k + d];
    if (!ok)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input 2 (updates) must have shape indices.shape[:-1] + data.shape[%lld:]",
                            (long long)k);
    s4d_set_out(ctx, 0, x->dtype, x->rank, x->dims);
    if (ctx->params)
        *(s4d_scatter_params *)ctx->params = (s4d_scatter_params){red, 0};
    return S4D_OK;
}

static void combine(s4d_dtype dt, scat_red red, int isint, char *dst, const char *src, int64_t n);

static s4d_status run_scatter_nd(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1], *up = &ctx->inputs[2];
    s4d_tensor *out = &ctx->outputs[0];
    scat_red red;
    if (ctx->params) {
        red = ((const s4d_scatter_params *)ctx->params)->reduction;
    } else {
        s4d_status st = read_reduction(ctx, &red);
        if (st != S4D_OK)
            return st;
    }
    size_t es = s4d_dtype_size(x->dtype);
    int64_t total = s4d_tensor_numel(x);
    if (out->data != x->data && total)
        memcpy(out->data, x->data, (size_t)total * es);
    int64_t k = idx->dims[idx->rank - 1], slice = 1, xst[S4D_MAX_RANK], s = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        xst[d] = s;
        s *= x->dims[d];
    }
    for (int d = (int)k; d < x->rank; d++)
        slice *= x->dims[d];
    int64_t n = s4d_tensor_numel(idx) / k;
    const int64_t *iv = idx->data;
    int isint = s4d_dtype_is_int(x->dtype);
    for (int64_t u = 0; u < n; u++) {
        int64_t off = 0;
        for (int64_t c = 0; c < k; c++) {
            int64_t v = iv[u * k + c], dim = x->dims[c];
            if (v < -dim || v >= dim)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "indices[%lld][%lld] = %lld is out of range for dim %lld",
                                    (long long)u, (long long)c, (long long)v, (long long)dim);
            off += (v < 0 ? v + dim : v) * xst[c];
        }
        const char *src = (const char *)up->data + (size_t)(u * slice) * es;
        char *dst = (char *)out->data + (size_t)off * es;
        if (red == S4D_SCATTER_NONE) {
            memcpy(dst, src, (size_t)slice * es);
            continue;
        }
        combine(x->dtype, red, isint, dst, src, slice);
    }
    return S4D_OK;
}

static const s4d_attr_spec scatter_nd_attrs[] = {{"reduction", S4D_ATTR_STRING}, {NULL}};
const s4d_op_schema s4d_op_scatter_nd = {"", "ScatterND", 11, infer_scatter_nd, NULL, run_scatter_nd,
                                         sizeof(s4d_scatter_params), 0, scatter_nd_attrs};

/* dst[i] = red(dst[i], src[i]) for i < n, in the element type dt. */
static void combine(s4d_dtype dt, scat_red red, int isint, char *dst, const char *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (isint) {
            int64_t a = s4d_load_i64(dt, dst, i), b = s4d_load_i64(dt, src, i), r = a;
            switch (red) {
            case S4D_SCATTER_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
            case S4D_SCATTER_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
            case S4D_SCATTER_MAX: r = a > b ? a : b; break;
            case S4D_SCATTER_MIN: r = a < b ? a : b; break;
            case S4D_SCATTER_NONE: break;
            }
            /* Back through double only for narrow types; int64 stays exact. */
            if (dt == S4D_DTYPE_INT64)
                ((int64_t *)dst)[i] = r;
            else
                s4d_store_f64(dt, dst, i, (double)r);
        } else {
            double a = s4d_load_f64(dt, dst, i), b = s4d_load_f64(dt, src, i), r = a;
            switch (red) {
            case S4D_SCATTER_ADD: r = a + b; break;
            case S4D_SCATTER_MUL: r = a * b; break;
            case S4D_SCATTER_MAX: r = a > b ? a : b; break;
            case S4D_SCATTER_MIN: r = a < b ? a : b; break;
            case S4D_SCATTER_NONE: break;
            }
            s4d_store_f64(dt, dst, i, r);
        }
    }
}

/* ---- ScatterElements -------------------------------------------------------------- */

static s4d_status infer_scatter_elements(s4d_op_ctx *ctx)
{
    scat_red red;
    s4d_status st = check_data_and_reduction(ctx, &red);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1], *up = &ctx->inputs[2];
    if (idx->dtype != S4D_DTYPE_INT64 && idx->dtype != S4D_DTYPE_INT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 1 (indices) has dtype %s, expected int64 or int32",
                            s4d_dtype_name(idx->dtype));
    if (up->dtype != x->dtype)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 2 (updates) has dtype %s but data has %s",
                            s4d_dtype_name(up->dtype), s4d_dtype_name(x->dtype));
    int axis;
    if ((st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), x->rank, "axis", &axis)) != S4D_OK)
        return st;
    int ok = idx->rank == x->rank && up->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++)
        ok = up->dims[d] == idx->dims[d] && (d == axis || idx->dims[d] <= x->dims[d]);
    if (!ok)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "indices and updates must have one shape, of data's rank and within it");
    s4d_set_out(ctx, 0, x->dtype, x->rank, x->dims);
    if (ctx->params)
        *(s4d_scatter_params *)ctx->params = (s4d_scatter_params){red, axis};
    return S4D_OK;
}

static s4d_status run_scatter_elements(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1], *up = &ctx->inputs[2];
    s4d_tensor *out = &ctx->outputs[0];
    scat_red red;
    int axis;
    if (ctx->params) {
        red = ((const s4d_scatter_params *)ctx->params)->reduction;
        axis = ((const s4d_scatter_params *)ctx->params)->axis;
    } else {
        s4d_status st = read_reduction(ctx, &red);
        if (st != S4D_OK || (st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), x->rank, "axis", &axis)) != S4D_OK)
            return st;
    }
    size_t es = s4d_dtype_size(x->dtype);
    int64_t total = s4d_tensor_numel(x), n = s4d_tensor_numel(idx), xst[S4D_MAX_RANK], s = 1;
    if (out->data != x->data && total)
        memcpy(out->data, x->data, (size_t)total * es);
    for (int d = x->rank - 1; d >= 0; d--) {
        xst[d] = s;
        s *= x->dims[d];
    }
    int isint = s4d_dtype_is_int(x->dtype);
    for (int64_t u = 0; u < n; u++) {
        int64_t rem = u, off = 0;
        for (int d = x->rank - 1; d >= 0; d--) {
            int64_t c = rem % idx->dims[d];
            rem /= idx->dims[d];
            if (d == axis) {
                c = s4d_load_i64(idx->dtype, idx->data, u);
                if (c < -x->dims[d] || c >= x->dims[d])
                    return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "indices[%lld] = %lld is out of range for dim %lld",
                                        (long long)u, (long long)c, (long long)x->dims[d]);
                if (c < 0)
                    c += x->dims[d];
            }
            off += c * xst[d];
        }
        char *dst = (char *)out->data + (size_t)off * es;
        const char *src = (const char *)up->data + (size_t)u * es;
        if (red == S4D_SCATTER_NONE)
            memcpy(dst, src, es);
        else
            combine(x->dtype, red, isint, dst, src, 1);
    }
    return S4D_OK;
}

static const s4d_attr_spec scatter_el_attrs[] = {
    {"axis", S4D_ATTR_INT}, {"reduction", S4D_ATTR_STRING}, {NULL}};
const s4d_op_schema s4d_op_scatter_elements = {"", "ScatterElements", 11, infer_scatter_elements, NULL,
                                                run_scatter_elements, sizeof(s4d_scatter_params), 0,
                                                scatter_el_attrs};
