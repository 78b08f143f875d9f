/* Expand (broadcast to a constant shape) and Tile (repeat by constant counts). */
#include "ops/broadcast.h"

/* ---- Expand --------------------------------------------------------------------- */

static s4d_status infer_expand(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (s4d_dtype_size(x->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (input) has unsupported dtype %s", s4d_dtype_name(x->dtype));
    s4d_tensor shape = {S4D_DTYPE_FLOAT32, 0, {0}, NULL};
    int64_t n;
    if ((st = s4d_const_ints(ctx, 1, "shape", shape.dims, S4D_MAX_RANK, &n)) != S4D_OK)
        return st;
    for (int64_t i = 0; i < n; i++)
        if (shape.dims[i] < 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "shape[%lld] is %lld", (long long)i, (long long)shape.dims[i]);
    shape.rank = (int)n;
    /* Bidirectional: the result is the broadcast of the input's shape and the given one. */
    const s4d_tensor *ins[2] = {x, &shape};
    int rank;
    int64_t dims[S4D_MAX_RANK];
    if ((st = s4d_bcast_shape(ctx, ins, 2, &rank, dims)) != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, x->dtype, rank, dims);
    return S4D_OK;
}

static s4d_status run_expand(s4d_op_ctx *ctx)
{
    s4d_bcast_copy(ctx->pool, &ctx->outputs[0], &ctx->inputs[0]);
    return S4D_OK;
}

const s4d_op_schema s4d_op_expand = {"", "Expand", 8, infer_expand, NULL, run_expand};

/* ---- Tile ----------------------------------------------------------------------------- */

static s4d_status infer_tile(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (s4d_dtype_size(x->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (input) has unsupported dtype %s", s4d_dtype_name(x->dtype));
    int64_t rep[S4D_MAX_RANK], n;
    if ((st = s4d_const_ints(ctx, 1, "repeats", rep, S4D_MAX_RANK, &n)) != S4D_OK)
        return st;
    if (n != x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "repeats has %lld values for rank %d", (long long)n, x->rank);
    int64_t dims[S4D_MAX_RANK];
    for (int d = 0; d < x->rank; d++) {
        if (rep[d] < 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "repeats[%d] is %lld", d, (long long)rep[d]);
        dims[d] = x->dims[d] * rep[d];
    }
    s4d_set_out(ctx, 0, x->dtype, x->rank, dims);
    return S4D_OK;
}

typedef struct tile_job {
    const s4d_tensor *x;
    const s4d_tensor *out;
    int64_t ist[S4D_MAX_RANK];
    size_t es;
} tile_job;

static void tile_rows(void *vp, int64_t r0, int64_t r1)
{
    const tile_job *j = vp;
    const s4d_tensor *x = j->x, *out = j->out;
    int R = out->rank;
    int64_t inner = out->dims[R - 1], xin = x->dims[R - 1];
    size_t es = j->es;
    for (int64_t r = r0; r < r1; r++) {
        int64_t rem = r, off = 0;
        for (int d = R - 2; d >= 0; d--) {
            off += ((rem % out->dims[d]) % x->dims[d]) * j->ist[d];
            rem /= out->dims[d];
        }
        char *dst = (char *)out->data + (size_t)(r * inner) * es;
        const char *src = (const char *)x->data + (size_t)off * es;
        for (int64_t c = 0; c < inner; c += xin)
            memcpy(dst + (size_t)c * es, src, (size_t)xin * es);
    }
}

static s4d_status run_tile(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *out = &ctx->outputs[0];
    int64_t total = s4d_tensor_numel(out);
    if (total == 0)
        return S4D_OK;
    size_t es = s4d_dtype_size(x->dtype);
    if (x->rank == 0) {
        memcpy(out->data, x->data, es);
        return S4D_OK;
    }
    tile_job j = {x, out, {0}, es};
    int64_t s = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        j.ist[d] = s;
        s *= x->dims[d];
    }
    int64_t inner = out->dims[out->rank - 1];
    s4d_parallel_for(ctx->pool, total / inner, 1 + 16384 / inner, tile_rows, &j);
    return S4D_OK;
}

const s4d_op_schema s4d_op_tile = {"", "Tile", 6, infer_tile, NULL, run_tile};
