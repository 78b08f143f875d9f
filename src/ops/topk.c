/*
 * TopK (opset 1: k attribute; 10: k input; 11: largest, sorted). K must be a
 * constant so that the output shape is static. Results are always sorted
 * (largest first, or smallest first with largest = 0); equal values keep
 * their input order (lower index first), and NaN ranks above every number,
 * as in numpy's sort, so a run is reproducible bit for bit.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dense_util.h"
#include "ops/reduce.h"

typedef s4d_topk_params topk_plan;

typedef struct topk_item {
    double v;
    int64_t i;
} topk_item;

static s4d_status topk_plan_make(s4d_op_ctx *ctx, topk_plan *p)
{
    int k_input = ctx->opset >= 10;
    memset(p, 0, sizeof *p);
    if (ctx->num_inputs != (k_input ? 2 : 1) || ctx->num_outputs != 2)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects %d inputs and 2 outputs, got %d and %d",
                            k_input ? 2 : 1, ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *x = &ctx->inputs[0];
    switch (x->dtype) {
    case S4D_DTYPE_FLOAT32:
    case S4D_DTYPE_FLOAT64:
    case S4D_DTYPE_INT32:
    case S4D_DTYPE_INT64:
    case S4D_DTYPE_FLOAT16: /* inferred for backends that run it (CUDA); the host refuses it in run */
        break;
    case S4D_DTYPE_UNDEFINED:
    case S4D_DTYPE_UINT8:
    case S4D_DTYPE_INT8:
    case S4D_DTYPE_UINT16:
    case S4D_DTYPE_INT16:
    case S4D_DTYPE_STRING:
    case S4D_DTYPE_BOOL:
    case S4D_DTYPE_UINT32:
    case S4D_DTYPE_UINT64:
    case S4D_DTYPE_BFLOAT16:
    default:
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s (float32, float64, int32, int64 supported)",
                            s4d_dtype_name(x->dtype));
    }
    if (x->rank < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank >= 1");
    int64_t axis = s4d_op_attr_int(ctx, "axis", -1);
    if (axis < -x->rank || axis >= x->rank)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "axis %lld is out of range for rank %d", (long long)axis,
                            x->rank);
    p->axis = (int)(axis < 0 ? axis + x->rank : axis);
    if (k_input) {
        const s4d_tensor *kt = &ctx->inputs[1];
        int64_t kv[1];
        if (kt->dtype != S4D_DTYPE_INT64 || s4d_tensor_numel(kt) != 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "K must be a 1-element int64 tensor");
        if (s4d_host_const_ints(kt, kv, 1) != 1)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "K must be a constant (the output shape depends on it)");
        p->k = kv[0];
    } else {
        p->k = s4d_op_attr_int(ctx, "k", -1);
    }
    p->n = x->dims[p->axis];
    if (p->k < 0 || p->k > p->n)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "k = %lld must be in [0, %lld]", (long long)p->k,
                            (long long)p->n);
    p->largest = s4d_op_attr_int(ctx, "largest", 1) != 0;
    p->outer = p->inner = 1;
    for (int i = 0; i < p->axis; i++)
        p->outer *= x->dims[i];
    for (int i = p->axis + 1; i < x->rank; i++)
        p->inner *= x->dims[i];
    return S4D_OK;
}

static s4d_status topk_infer(s4d_op_ctx *ctx)
{
    topk_plan p;
    s4d_status st = topk_plan_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        memcpy(ctx->params, &p, sizeof p);
    for (int o = 0; o < 2; o++) {
        ctx->outputs[o] = ctx->inputs[0];
        ctx->outputs[o].data = NULL;
        ctx->outputs[o].dims[p.axis] = p.k;
    }
    ctx->outputs[1].dtype = S4D_DTYPE_INT64;
    return S4D_OK;
}

static size_t topk_ws(const s4d_op_ctx *ctx)
{
    topk_plan local;
    const topk_plan *p = ctx->params;
    if (!p) {
        if (topk_plan_make((s4d_op_ctx *)ctx, &local) != S4D_OK)
            return 0;
        p = &local;
    }
    return sizeof(topk_item) * (size_t)(p->outer * p->inner * p->n);
}

/* NaN above everything; ties by index. */
static int cmp_desc(const void *pa, const void *pb)
{
    const topk_item *a = pa, *b = pb;
    int an = a->v != a->v, bn = b->v != b->v;
    if (an != bn)
        return an ? -1 : 1;
    if (!an && a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}

static int cmp_asc(const void *pa, const void *pb)
{
    const topk_item *a = pa, *b = pb;
    int an = a->v != a->v, bn = b->v != b->v;
    if (an != bn)
        return an ? 1 : -1;
    if (!an && a->v != b->v)
        return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}

static double load(s4d_dtype dt, const void *base, int64_t i)
{
    if (dt == S4D_DTYPE_FLOAT32)
        return ((const float *)base)[i];
    if (dt == S4D_DTYPE_FLOAT64)
        return ((const double *)base)[i];
    if (dt == S4D_DTYPE_INT32)
        return ((const int32_t *)base)[i];
    /* int64 beyond 2^53 loses order precision in double; ties then fall back to index order. */
    return (double)((const int64_t *)base)[i];
}

typedef struct topk_job {
    const topk_plan *p;
    s4d_dtype dt;
    size_t esize;
    const char *x;
    char *vals;
    int64_t *idx;
    topk_item *scratch;
} topk_job;

static void topk_slices(void *arg, int64_t begin, int64_t end)
{
    const topk_job *j = arg;
    const topk_plan *p = j->p;
    for (int64_t s = begin; s < end; s++) {
        int64_t o = s / p->inner, in = s % p->inner;
        topk_item *it = j->scratch + s * p->n;
        int64_t base = o * p->n * p->inner + in;
        for (int64_t i = 0; i < p->n; i++) {
            it[i].v = load(j->dt, j->x, base + i * p->inner);
            it[i].i = i;
        }
        qsort(it, (size_t)p->n, sizeof *it, p->largest ? cmp_desc : cmp_asc);
        int64_t obase = o * p->k * p->inner + in;
        for (int64_t i = 0; i < p->k; i++) {
            int64_t dst = obase + i * p->inner;
            memcpy(j->vals + (size_t)dst * j->esize, j->x + (size_t)(base + it[i].i * p->inner) * j->esize,
                   j->esize);
            j->idx[dst] = it[i].i;
        }
    }
}

static s4d_status topk_run(s4d_op_ctx *ctx)
{
    topk_plan local;
    const topk_plan *p = ctx->params;
    if (!p) {
        s4d_status st = topk_plan_make(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    if (ctx->inputs[0].dtype == S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is float16: the host TopK runs float32, float64, int32 and int64");
    size_t need = sizeof(topk_item) * (size_t)(p->outer * p->inner * p->n);
    if (ctx->workspace_size < need)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes, need %zu", ctx->workspace_size, need);
    topk_job j = {p, ctx->inputs[0].dtype, s4d_dtype_size(ctx->inputs[0].dtype), ctx->inputs[0].data,
                  ctx->outputs[0].data, ctx->outputs[1].data, ctx->workspace};
    if (p->k > 0)
        s4d_parallel_for(ctx->pool, p->outer * p->inner, 1, topk_slices, &j);
    return S4D_OK;
}

/* Opset 10 made k an input; every order of equal values is sorted output, so sorted=0 needs nothing. */
static const s4d_attr_spec topk_1_attrs[] = {{"axis", S4D_ATTR_INT}, {"k", S4D_ATTR_INT}, {NULL}};
static const s4d_attr_spec topk_10_attrs[] = {{"axis", S4D_ATTR_INT},
                                              {"largest", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                              {"sorted", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                              {NULL}};
const s4d_op_schema s4d_op_topk_1 = {"", "TopK", 1, topk_infer, topk_ws, topk_run, sizeof(s4d_topk_params), 0,
                                     topk_1_attrs};
const s4d_op_schema s4d_op_topk_10 = {"", "TopK", 10, topk_infer, topk_ws, topk_run, sizeof(s4d_topk_params), 0,
                                      topk_10_attrs};
