/*
 * Cast between the numeric types, bool, float16 and bfloat16 (CastLike too).
 * Integer-to-integer casts go through int64 so large values stay exact;
 * everything else goes through double. Float-to-integer casts saturate and
 * map NaN to 0 instead of invoking undefined behaviour.
 */
#include "ops/broadcast.h"

typedef struct cast_job {
    s4d_dtype from, to;
    const void *x;
    void *y;
} cast_job;

static void store_i64(s4d_dtype dt, void *p, int64_t i, int64_t v)
{
    switch (dt) {
    case S4D_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; return;
    case S4D_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; return;
    case S4D_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; return;
    case S4D_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; return;
    case S4D_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; return;
    case S4D_DTYPE_INT64: ((int64_t *)p)[i] = v; return;
    case S4D_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; return;
    case S4D_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; return;
    case S4D_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; return;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_FLOAT32: case S4D_DTYPE_STRING: case S4D_DTYPE_FLOAT16:
    case S4D_DTYPE_FLOAT64: case S4D_DTYPE_BFLOAT16:
        return;
    }
}

static int intlike(s4d_dtype dt)
{
    return s4d_dtype_is_int(dt) || dt == S4D_DTYPE_BOOL;
}

static void cast_chunk(void *vp, int64_t b, int64_t e)
{
    const cast_job *j = vp;
    if (j->from == j->to) {
        size_t es = s4d_dtype_size(j->from);
        memcpy((char *)j->y + (size_t)b * es, (const char *)j->x + (size_t)b * es, (size_t)(e - b) * es);
        return;
    }
    /* The two casts the models use most, without the generic detour. */
    if (j->from == S4D_DTYPE_FLOAT32 && j->to == S4D_DTYPE_FLOAT16) {
        for (int64_t i = b; i < e; i++)
            ((uint16_t *)j->y)[i] = s4d_float_to_half(((const float *)j->x)[i]);
        return;
    }
    if (j->from == S4D_DTYPE_FLOAT16 && j->to == S4D_DTYPE_FLOAT32) {
        for (int64_t i = b; i < e; i++)
            ((float *)j->y)[i] = s4d_half_to_float(((const uint16_t *)j->x)[i]);
        return;
    }
    if (intlike(j->from) && intlike(j->to)) {
        for (int64_t i = b; i < e; i++)
            store_i64(j->to, j->y, i, s4d_load_i64(j->from, j->x, i));
        return;
    }
    for (int64_t i = b; i < e; i++)
        s4d_store_f64(j->to, j->y, i, s4d_load_f64(j->from, j->x, i));
}

static int castable(s4d_dtype dt)
{
    return s4d_dtype_is_int(dt) || s4d_dtype_is_float(dt) || dt == S4D_DTYPE_BOOL;
}

static s4d_status infer_cast_to(s4d_op_ctx *ctx, s4d_dtype to)
{
    s4d_dtype from = ctx->inputs[0].dtype;
    if (!castable(from))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (input) has unsupported dtype %s", s4d_dtype_name(from));
    if (!castable(to))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "cannot cast to %s (dtype %d)", s4d_dtype_name(to), (int)to);
    s4d_set_out(ctx, 0, to, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status infer_cast(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    if (!s4d_op_attr(ctx, "to"))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "attribute 'to' is required");
    return infer_cast_to(ctx, (s4d_dtype)s4d_op_attr_int(ctx, "to", 0));
}

static s4d_status infer_cast_like(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK)
        return st;
    return infer_cast_to(ctx, ctx->inputs[1].dtype);
}

static s4d_status run_cast(s4d_op_ctx *ctx)
{
    cast_job j = {ctx->inputs[0].dtype, ctx->outputs[0].dtype, ctx->inputs[0].data, ctx->outputs[0].data};
    s4d_parallel_for(ctx->pool, s4d_tensor_numel(&ctx->inputs[0]), 1 << 15, cast_chunk, &j);
    return S4D_OK;
}

/* saturate (opset 19) only changes casts to float8, which are refused. */
static const s4d_attr_spec cast_attrs[] = {{"to", S4D_ATTR_INT}, {"saturate", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
static const s4d_attr_spec cast_like_attrs[] = {{"saturate", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
const s4d_op_schema s4d_op_cast = {"", "Cast", 6, infer_cast, NULL, run_cast, 0, 0, cast_attrs};
const s4d_op_schema s4d_op_cast_like = {"", "CastLike", 15, infer_cast_like, NULL, run_cast, 0, 0, cast_like_attrs};
