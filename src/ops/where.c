/* Where(condition, X, Y) with three-way broadcasting, any element type of X/Y. */
#include "ops/broadcast.h"

typedef struct where_job {
    s4d_bcast b;
    size_t es;
    const uint8_t *c;
    const char *x, *y;
    char *o;
} where_job;

#define WHERE_RUN(T)                                                                 \
    do {                                                                             \
        const T *x = (const T *)xp, *y = (const T *)yp;                              \
        T *o = (T *)op;                                                              \
        for (int64_t i = 0; i < n; i++)                                              \
            o[i] = c[i * sc] ? x[i * sx] : y[i * sy];                                \
    } while (0)

static void where_rows(void *vp, int64_t r0, int64_t r1)
{
    const where_job *j = vp;
    const s4d_bcast *b = &j->b;
    int64_t idx[S4D_MAX_RANK], offs[S4D_BCAST_MAX_IN];
    s4d_bcast_seek(b, r0, idx, offs);
    int L = b->rank - 1;
    int64_t sc = b->st[0][L], sx = b->st[1][L], sy = b->st[2][L], n = b->inner;
    size_t es = j->es;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *c = j->c + offs[0];
        const char *xp = j->x + (size_t)offs[1] * es, *yp = j->y + (size_t)offs[2] * es;
        char *op = j->o + (size_t)(r * n) * es;
        if (es == 4 && sc == 1 && sx == 1 && sy == 1) {
            /* The common float32 case, strides known: the compiler can vectorise it. */
            const uint32_t *x = (const uint32_t *)xp, *y = (const uint32_t *)yp;
            uint32_t *o = (uint32_t *)op;
            for (int64_t i = 0; i < n; i++)
                o[i] = c[i] ? x[i] : y[i];
        } else if (es == 4 && sc == 0) {
            /* One condition for the whole run: a copy of X or Y. */
            const char *src = c[0] ? xp : yp;
            int64_t s = c[0] ? sx : sy;
            if (s)
                memcpy(op, src, (size_t)n * 4);
            else
                for (int64_t i = 0; i < n; i++)
                    ((uint32_t *)op)[i] = *(const uint32_t *)src;
        } else switch (es) {
        case 1: WHERE_RUN(uint8_t); break;
        case 2: WHERE_RUN(uint16_t); break;
        case 4: WHERE_RUN(uint32_t); break;
        case 8: WHERE_RUN(uint64_t); break;
        default:
            for (int64_t i = 0; i < n; i++)
                memcpy(op + (size_t)i * es, c[i * sc] ? xp + (size_t)(i * sx) * es : yp + (size_t)(i * sy) * es, es);
        }
        s4d_bcast_next(b, idx, offs);
    }
}

static s4d_status infer_where(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 3, 3, 1);
    if (st != S4D_OK)
        return st;
    if (ctx->inputs[0].dtype != S4D_DTYPE_BOOL)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (condition) has dtype %s, expected bool",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    if (s4d_dtype_size(ctx->inputs[1].dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 1 (X) has unsupported dtype %s",
                            s4d_dtype_name(ctx->inputs[1].dtype));
    if (ctx->inputs[2].dtype != ctx->inputs[1].dtype)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 2 (Y) has dtype %s but input 1 (X) has %s",
                            s4d_dtype_name(ctx->inputs[2].dtype), s4d_dtype_name(ctx->inputs[1].dtype));
    const s4d_tensor *ins[3] = {&ctx->inputs[0], &ctx->inputs[1], &ctx->inputs[2]};
    int rank;
    int64_t dims[S4D_MAX_RANK];
    if ((st = s4d_bcast_shape(ctx, ins, 3, &rank, dims)) != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, ctx->inputs[1].dtype, rank, dims);
    return S4D_OK;
}

static s4d_status run_where(s4d_op_ctx *ctx)
{
    where_job *j = &(where_job){0};
    const s4d_tensor *ins[3] = {&ctx->inputs[0], &ctx->inputs[1], &ctx->inputs[2]};
    s4d_bcast_init(&j->b, &ctx->outputs[0], ins, 3);
    j->es = s4d_dtype_size(ctx->outputs[0].dtype);
    j->c = ctx->inputs[0].data;
    j->x = ctx->inputs[1].data;
    j->y = ctx->inputs[2].data;
    j->o = ctx->outputs[0].data;
    s4d_parallel_for(ctx->pool, j->b.rows, j->b.inner > 0 ? 16384 / j->b.inner + 1 : 1, where_rows, j);
    return S4D_OK;
}

const s4d_op_schema s4d_op_where = {"", "Where", 9, infer_where, NULL, run_where};
