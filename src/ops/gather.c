/*
 * Gather and GatherElements. Indices are data at run time (they do not change
 * the output shape), so each is range-checked when the op runs; negative
 * indices count from the end. An index out of range fails the run with the
 * offending value instead of reading out of bounds.
 */
#include "ops/broadcast.h"
#include "ops/movement.h"

static s4d_status check_indices_dtype(s4d_op_ctx *ctx)
{
    s4d_dtype it = ctx->inputs[1].dtype;
    if (it != S4D_DTYPE_INT64 && it != S4D_DTYPE_INT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 1 (indices) has dtype %s, expected int64 or int32",
                            s4d_dtype_name(it));
    if (s4d_dtype_size(ctx->inputs[0].dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    return S4D_OK;
}

static int64_t index_at(const s4d_tensor *t, int64_t i)
{
    return t->dtype == S4D_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Normalises every index into [0, n); fails naming the first bad one. */
static s4d_status check_range(s4d_op_ctx *ctx, const s4d_tensor *idx, int64_t n)
{
    int64_t cnt = s4d_tensor_numel(idx);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t v = index_at(idx, i);
        if (v < -n || v >= n)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "indices[%lld] = %lld is out of range [%lld, %lld)",
                                (long long)i, (long long)v, (long long)-n, (long long)n);
    }
    return S4D_OK;
}

/* The axis infer resolved, or (white-box calls without params) the attribute's. */
static s4d_status run_axis(s4d_op_ctx *ctx, int *axis)
{
    if (ctx->params) {
        *axis = ((const s4d_gather_params *)ctx->params)->axis;
        return S4D_OK;
    }
    return s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), ctx->inputs[0].rank, "axis", axis);
}

static void set_params(s4d_op_ctx *ctx, int axis, int batch_dims)
{
    if (ctx->params) {
        s4d_gather_params *p = ctx->params;
        p->axis = axis;
        p->batch_dims = batch_dims;
    }
}

/* ---- Gather ---------------------------------------------------------------------- */

static s4d_status infer_gather(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK || (st = check_indices_dtype(ctx)) != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int axis;
    if ((st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), x->rank, "axis", &axis)) != S4D_OK)
        return st;
    int r = x->rank - 1 + idx->rank;
    if (r > S4D_MAX_RANK)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, S4D_MAX_RANK);
    if (idx->data && (st = check_range(ctx, idx, x->dims[axis])) != S4D_OK)
        return st;
    int64_t dims[S4D_MAX_RANK];
    int k = 0;
    for (int d = 0; d < axis; d++)
        dims[k++] = x->dims[d];
    for (int d = 0; d < idx->rank; d++)
        dims[k++] = idx->dims[d];
    for (int d = axis + 1; d < x->rank; d++)
        dims[k++] = x->dims[d];
    s4d_set_out(ctx, 0, x->dtype, r, dims);
    set_params(ctx, axis, 0);
    return S4D_OK;
}

typedef struct gather_job {
    const s4d_tensor *x, *idx;
    char *out;
    int64_t nidx, axis_n, inner_bytes;
} gather_job;

/* Units are (outer, index) pairs; each copies one contiguous run. */
static void gather_chunk(void *vp, int64_t b, int64_t e)
{
    const gather_job *j = vp;
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / j->nidx, i = u % j->nidx, v = index_at(j->idx, i);
        if (v < 0)
            v += j->axis_n;
        memcpy(j->out + u * j->inner_bytes, (const char *)j->x->data + (o * j->axis_n + v) * j->inner_bytes,
               (size_t)j->inner_bytes);
    }
}

static s4d_status run_gather(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int axis;
    s4d_status st = run_axis(ctx, &axis);
    if (st != S4D_OK || (st = check_range(ctx, idx, x->dims[axis])) != S4D_OK)
        return st;
    gather_job j = {x, idx, ctx->outputs[0].data, s4d_tensor_numel(idx), x->dims[axis],
                    (int64_t)s4d_dtype_size(x->dtype)};
    int64_t outer = 1;
    for (int d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++)
        j.inner_bytes *= x->dims[d];
    if (j.inner_bytes == 0 || j.nidx == 0)
        return S4D_OK;
    s4d_parallel_for(ctx->pool, outer * j.nidx, 1 + 65536 / j.inner_bytes, gather_chunk, &j);
    return S4D_OK;
}

static const s4d_attr_spec axis_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_gather = {"", "Gather", 1, infer_gather, NULL, run_gather,
                                     sizeof(s4d_gather_params), 0, axis_attrs};

/* ---- GatherElements ----------------------------------------------------------------- */

static s4d_status infer_gather_elements(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK || (st = check_indices_dtype(ctx)) != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int axis;
    if ((st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), x->rank, "axis", &axis)) != S4D_OK)
        return st;
    if (idx->rank != x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input 1 (indices) has rank %d, input 0 (data) has %d", idx->rank,
                            x->rank);
    for (int d = 0; d < x->rank; d++)
        if (d != axis && idx->dims[d] > x->dims[d])
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "indices dim %d is %lld, larger than data's %lld", d,
                                (long long)idx->dims[d], (long long)x->dims[d]);
    s4d_set_out(ctx, 0, x->dtype, idx->rank, idx->dims);
    set_params(ctx, axis, 0);
    return S4D_OK;
}

typedef struct ge_job {
    const s4d_tensor *x, *idx;
    char *out;
    int axis;
    int64_t xst[S4D_MAX_RANK];
    size_t es;
} ge_job;

static void ge_chunk(void *vp, int64_t b, int64_t e)
{
    const ge_job *j = vp;
    const s4d_tensor *idx = j->idx;
    for (int64_t o = b; o < e; o++) {
        int64_t rem = o, off = 0;
        for (int d = idx->rank - 1; d >= 0; d--) {
            int64_t c = rem % idx->dims[d];
            rem /= idx->dims[d];
            if (d == j->axis) {
                c = index_at(idx, o);
                if (c < 0)
                    c += j->x->dims[d];
            }
            off += c * j->xst[d];
        }
        memcpy(j->out + (size_t)o * j->es, (const char *)j->x->data + (size_t)off * j->es, j->es);
    }
}

static s4d_status run_gather_elements(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int axis;
    s4d_status st = run_axis(ctx, &axis);
    if (st != S4D_OK || (st = check_range(ctx, idx, x->dims[axis])) != S4D_OK)
        return st;
    ge_job j = {x, idx, ctx->outputs[0].data, axis, {0}, s4d_dtype_size(x->dtype)};
    int64_t s = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        j.xst[d] = s;
        s *= x->dims[d];
    }
    s4d_parallel_for(ctx->pool, s4d_tensor_numel(idx), 8192, ge_chunk, &j);
    return S4D_OK;
}

const s4d_op_schema s4d_op_gather_elements = {"", "GatherElements", 11, infer_gather_elements, NULL,
                                               run_gather_elements, sizeof(s4d_gather_params), 0, axis_attrs};

/* ---- GatherND ----------------------------------------------------------------------- */

static s4d_status infer_gather_nd(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    if (idx->dtype != S4D_DTYPE_INT64)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 1 (indices) has dtype %s, expected int64",
                            s4d_dtype_name(idx->dtype));
    if (s4d_dtype_size(x->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s", s4d_dtype_name(x->dtype));
    int64_t b = s4d_op_attr_int(ctx, "batch_dims", 0);
    if (idx->rank < 1 || b < 0 || b >= idx->rank || b >= x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "batch_dims %lld does not fit indices of rank %d and data of rank %d",
                            (long long)b, idx->rank, x->rank);
    int64_t k = idx->dims[idx->rank - 1];
    if (k < 1 || b + k > x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "indices' last dim %lld exceeds data rank %d minus batch_dims",
                            (long long)k, x->rank);
    for (int d = 0; d < b; d++)
        if (idx->dims[d] != x->dims[d])
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "batch dim %d differs: indices %lld, data %lld", d,
                                (long long)idx->dims[d], (long long)x->dims[d]);
    int r = idx->rank - 1 + x->rank - (int)(b + k);
    if (r > S4D_MAX_RANK)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, S4D_MAX_RANK);
    int64_t dims[S4D_MAX_RANK];
    int n = 0;
    for (int d = 0; d < idx->rank - 1; d++)
        dims[n++] = idx->dims[d];
    for (int d = (int)(b + k); d < x->rank; d++)
        dims[n++] = x->dims[d];
    s4d_set_out(ctx, 0, x->dtype, r, dims);
    set_params(ctx, 0, (int)b);
    return S4D_OK;
}

static s4d_status run_gather_nd(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int64_t b = ctx->params ? ((const s4d_gather_params *)ctx->params)->batch_dims
                            : s4d_op_attr_int(ctx, "batch_dims", 0);
    int64_t k = idx->dims[idx->rank - 1];
    size_t es = s4d_dtype_size(x->dtype);
    int64_t xst[S4D_MAX_RANK], s = 1, slice = 1, nb = 1, per_batch = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        xst[d] = s;
        s *= x->dims[d];
    }
    for (int d = (int)(b + k); d < x->rank; d++)
        slice *= x->dims[d];
    for (int d = 0; d < b; d++)
        nb *= x->dims[d];
    for (int d = (int)b; d < idx->rank - 1; d++)
        per_batch *= idx->dims[d];
    const int64_t *iv = idx->data;
    int64_t batch_elems = b > 0 ? xst[b - 1] : s;
    char *out = ctx->outputs[0].data;
    for (int64_t bi = 0; bi < nb; bi++) {
        for (int64_t t = 0; t < per_batch; t++) {
            const int64_t *tuple = iv + (bi * per_batch + t) * k;
            int64_t off = bi * batch_elems;
            for (int64_t c = 0; c < k; c++) {
                int64_t v = tuple[c], dim = x->dims[b + c];
                if (v < -dim || v >= dim)
                    return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "index tuple %lld, element %lld = %lld is out of range for dim %lld",
                                        (long long)(bi * per_batch + t), (long long)c, (long long)v, (long long)dim);
                off += (v < 0 ? v + dim : v) * xst[b + c];
            }
            memcpy(out + (size_t)((bi * per_batch + t) * slice) * es, (const char *)x->data + (size_t)off * es,
                   (size_t)slice * es);
        }
    }
    return S4D_OK;
}

static const s4d_attr_spec gather_nd_attrs[] = {{"batch_dims", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_gather_nd = {"", "GatherND", 11, infer_gather_nd, NULL, run_gather_nd,
                                        sizeof(s4d_gather_params), 0, gather_nd_attrs};
