/*
 * MaxPool (opset 1, 8, 10, 11, 12), AveragePool (opset 1, 7, 10, 11, 19),
 * GlobalAveragePool and GlobalMaxPool (opset 1), 1 to 3 spatial dims.
 *
 * ceil_mode follows PyTorch (which exports these): a last window that would
 * start in the end padding is dropped. AveragePool's divisor counts the taps
 * inside the input, or with count_include_pad the taps inside the padded
 * input. MaxPool's optional Indices output holds flat indices into X (row
 * major, or column major over the spatial dims with storage_order = 1).
 *
 * s4d::MaxPool (made by the channels-last pass, never in a user's model):
 * MaxPool of 2-D maps with the channels last, attribute layout = "NHWC",
 * X and Y [N, H, W, C], no Indices. The host runs it by transposing into
 * its workspace around the NCHW computation.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/conv_common.h"
#include "ops/dense.h"
#include "ops/dense_util.h"

typedef s4d_pool_kind pool_kind;
#define POOL_MAX S4D_POOL_MAX
#define POOL_AVG S4D_POOL_AVG

typedef s4d_pool_params pool_plan;

static s4d_status pool_plan_make(s4d_op_ctx *ctx, pool_kind kind, pool_plan *p)
{
    /* white-box callers may run the pools without a schema: then it is the ONNX one */
    const int nhwc = ctx->schema && strcmp(ctx->schema->domain, "s4d") == 0;
    if (nhwc && strcmp(s4d_op_attr_string(ctx, "layout", ""), "NHWC") != 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "layout '%s' (s4d::MaxPool is NHWC)",
                            s4d_op_attr_string(ctx, "layout", ""));
    if (nhwc && (ctx->num_outputs != 1 || ctx->num_inputs != 1 || ctx->inputs[0].rank != 4))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "s4d::MaxPool takes one rank-4 NHWC input and "
                            "gives one output");
    int max_out = kind == POOL_MAX ? 2 : 1;
    if (ctx->num_inputs != 1 || ctx->num_outputs < 1 || ctx->num_outputs > max_out)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 1 input and 1 to %d outputs, got %d and %d", max_out,
                            ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *x = &ctx->inputs[0];
    /* float16 is inferred for backends that run it (CUDA); the host reference refuses it in run. */
    if (x->dtype != S4D_DTYPE_FLOAT32 && x->dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s; only float32 is supported (float16 on CUDA)",
                            s4d_dtype_name(x->dtype));
    if (x->rank < 3 || x->rank > 5)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank 3 to 5, got %d", x->rank);
    int nsp = x->rank - 2;
    const s4d_attr *ka = s4d_op_attr(ctx, "kernel_shape");
    if (!ka || ka->type != S4D_ATTR_INTS || (int)ka->count != nsp)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute kernel_shape must list %d ints", nsp);
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->nhwc = nhwc;
    s4d_auto_pad ap;
    s4d_status st = s4d_host_conv_attrs(ctx, nsp, ka->ints, &p->g, &ap);
    if (st != S4D_OK)
        return st;
    int ceil_mode = s4d_op_attr_int(ctx, "ceil_mode", 0) != 0;
    p->count_include_pad = s4d_op_attr_int(ctx, "count_include_pad", 0) != 0;
    p->storage_order = s4d_op_attr_int(ctx, "storage_order", 0) != 0;
    p->with_indices = ctx->num_outputs > 1;
    p->n = x->dims[0];
    p->c = x->dims[nhwc ? 3 : 1];
    s4d_conv_geom *g = &p->g;
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        int64_t in = x->dims[(nhwc ? 1 : 2) + i], ext, span;
        if (!s4d_host_conv_extent(g, j, &ext) || s4d_add_i64(in, g->pad_b[j], &span) ||
            s4d_add_i64(span, g->pad_e[j], &span))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d: the padded input or the dilated window "
                                "overflows 64 bits", i);
        g->img[j] = in;
        switch (ap) {
        case S4D_AUTO_PAD_NOTSET:
        case S4D_AUTO_PAD_VALID: {
            span -= ext; /* both non-negative */
            if (span < 0)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d: input %lld (padded) is smaller than the window %lld",
                                    i, (long long)in, (long long)ext);
            g->grid[j] = span / g->stride[j] + (ceil_mode && span % g->stride[j] != 0) + 1;
            int64_t last; /* where the last window starts; past int64 is past the input */
            if (ceil_mode && (s4d_mul_i64(g->grid[j] - 1, g->stride[j], &last) || last >= in + g->pad_b[j]))
                g->grid[j]--;
            break;
        }
        case S4D_AUTO_PAD_SAME_UPPER:
        case S4D_AUTO_PAD_SAME_LOWER:
            s4d_host_conv_same_pad(g, j, ext, ap);
            break;
        }
    }
    return S4D_OK;
}

/* The params infer made, or (white-box callers without params) a fresh parse. */
static s4d_status pool_plan_get(const s4d_op_ctx *ctx, pool_kind kind, pool_plan *p)
{
    if (ctx->params) {
        *p = *(const pool_plan *)ctx->params;
        return S4D_OK;
    }
    return pool_plan_make((s4d_op_ctx *)ctx, kind, p);
}

static s4d_status pool_infer(s4d_op_ctx *ctx, pool_kind kind)
{
    pool_plan p;
    s4d_status st = pool_plan_make(ctx, kind, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(pool_plan *)ctx->params = p;
    const s4d_tensor *x = &ctx->inputs[0];
    for (int o = 0; o < ctx->num_outputs; o++) {
        s4d_tensor *y = &ctx->outputs[o];
        y->dtype = o == 0 ? x->dtype : S4D_DTYPE_INT64;
        y->rank = x->rank;
        y->dims[0] = p.n;
        y->dims[p.nhwc ? 3 : 1] = p.c;
        for (int i = 0; i < p.g.nsp; i++)
            y->dims[(p.nhwc ? 1 : 2) + i] = p.g.grid[3 - p.g.nsp + i];
    }
    return S4D_OK;
}

/* Per spatial dim and output index: valid taps [b, e) and taps inside the padding. */
typedef struct pool_taps {
    int64_t b, e, n_pad;
} pool_taps;

typedef struct pool_job {
    const pool_plan *p;
    pool_kind kind;
    const float *x;
    float *y;
    int64_t *idx;
    const pool_taps *taps[3];
} pool_job;

/* Kernel taps [*b, *e) whose position s + k * d lies in [lo, hi). */
static void tap_range(int64_t s, int64_t d, int64_t k, int64_t lo, int64_t hi, int64_t *b, int64_t *e)
{
    *b = lo - s <= 0 ? 0 : (lo - s + d - 1) / d;
    *e = hi - s <= 0 ? 0 : (hi - s - 1) / d + 1;
    if (*e > k)
        *e = k;
    if (*b > *e)
        *b = *e;
}

static void pool_planes(void *arg, int64_t begin, int64_t end)
{
    const pool_job *j = arg;
    const s4d_conv_geom *g = &j->p->g;
    const int64_t plane_in = s4d_host_conv_prod3(g->img), plane_out = s4d_host_conv_prod3(g->grid);
    for (int64_t pl = begin; pl < end; pl++) {
        const float *x = j->x + pl * plane_in;
        float *y = j->y + pl * plane_out;
        int64_t oi = 0;
        for (int64_t o0 = 0; o0 < g->grid[0]; o0++)
            for (int64_t o1 = 0; o1 < g->grid[1]; o1++)
                for (int64_t o2 = 0; o2 < g->grid[2]; o2++, oi++) {
                    int64_t s[3] = {o0 * g->stride[0] - g->pad_b[0], o1 * g->stride[1] - g->pad_b[1],
                                    o2 * g->stride[2] - g->pad_b[2]};
                    /* Valid taps per dim (precomputed), so the inner loops need no bounds checks. */
                    const pool_taps *t0 = &j->taps[0][o0], *t1 = &j->taps[1][o1], *t2 = &j->taps[2][o2];
                    int64_t b[3] = {t0->b, t1->b, t2->b}, e[3] = {t0->e, t1->e, t2->e};
                    int64_t n_pad = t0->n_pad * t1->n_pad * t2->n_pad;
                    float best = -INFINITY;
                    int64_t best_at = -1, n_in = (e[0] - b[0]) * (e[1] - b[1]) * (e[2] - b[2]);
                    double sum = 0.0;
                    for (int64_t k0 = b[0]; k0 < e[0]; k0++) {
                        int64_t i0 = s[0] + k0 * g->dil[0];
                        for (int64_t k1 = b[1]; k1 < e[1]; k1++) {
                            int64_t row = (i0 * g->img[1] + s[1] + k1 * g->dil[1]) * g->img[2];
                            const float *xr = x + row + s[2];
                            if (j->kind == POOL_AVG) {
                                for (int64_t k2 = b[2]; k2 < e[2]; k2++)
                                    sum += xr[k2 * g->dil[2]];
                                continue;
                            }
                            for (int64_t k2 = b[2]; k2 < e[2]; k2++) {
                                float v = xr[k2 * g->dil[2]];
                                /* NaN wins, as in numpy's max. */
                                if (best_at < 0 || v > best || (v != v && best == best)) {
                                    best = v;
                                    best_at = row + s[2] + k2 * g->dil[2];
                                }
                            }
                        }
                    }
                    if (j->kind == POOL_MAX) {
                        y[oi] = best;
                        if (j->idx) {
                            int64_t at = best_at < 0 ? 0 : best_at;
                            if (j->p->storage_order) {
                                int64_t a2 = at % g->img[2], a1 = (at / g->img[2]) % g->img[1],
                                        a0 = at / (g->img[2] * g->img[1]);
                                at = (a2 * g->img[1] + a1) * g->img[0] + a0;
                            }
                            j->idx[pl * plane_out + oi] = pl * plane_in + at;
                        }
                    } else {
                        int64_t cnt = j->p->count_include_pad ? n_pad : n_in;
                        y[oi] = cnt ? (float)(sum / (double)cnt) : 0.0f;
                    }
                }
    }
}

static s4d_status pool_run(s4d_op_ctx *ctx, pool_kind kind)
{
    pool_plan p;
    s4d_status st = pool_plan_get(ctx, kind, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s: the host pools run float32 only",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    const int64_t plane_in = s4d_host_conv_prod3(p.g.img), plane_out = s4d_host_conv_prod3(p.g.grid);
    size_t taps = sizeof(pool_taps) * (size_t)(p.g.grid[0] + p.g.grid[1] + p.g.grid[2]);
    size_t need = taps + (p.nhwc ? sizeof(float) * (size_t)(p.n * p.c * (plane_in + plane_out)) : 0);
    if (ctx->workspace_size < need)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small", ctx->workspace_size);
    pool_taps *tp = ctx->workspace;
    pool_job j = {&p, kind, ctx->inputs[0].data, ctx->outputs[0].data,
                  p.with_indices ? ctx->outputs[1].data : NULL, {NULL, NULL, NULL}};
    float *xt = NULL, *yt = NULL;
    if (p.nhwc) { /* NCHW copies after the tap tables */
        xt = (float *)((char *)ctx->workspace + taps);
        yt = xt + p.n * p.c * plane_in;
        s4d_host_swap_channels(j.x, xt, p.n, plane_in, p.c, 0);
        j.x = xt;
        j.y = yt;
    }
    for (int q = 0; q < 3; q++) {
        const s4d_conv_geom *g = &p.g;
        j.taps[q] = tp;
        for (int64_t o = 0; o < g->grid[q]; o++, tp++) {
            int64_t s = o * g->stride[q] - g->pad_b[q], pb, pe;
            tap_range(s, g->dil[q], g->k[q], 0, g->img[q], &tp->b, &tp->e);
            tap_range(s, g->dil[q], g->k[q], -g->pad_b[q], g->img[q] + g->pad_e[q], &pb, &pe);
            tp->n_pad = pe - pb;
        }
    }
    s4d_parallel_for(ctx->pool, p.n * p.c, 1, pool_planes, &j);
    if (yt)
        s4d_host_swap_channels(yt, ctx->outputs[0].data, p.n, plane_out, p.c, 1);
    return S4D_OK;
}

static size_t pool_ws(const s4d_op_ctx *ctx, pool_kind kind)
{
    pool_plan p;
    if (pool_plan_get(ctx, kind, &p) != S4D_OK)
        return 0;
    size_t nhwc = p.nhwc ? sizeof(float) * (size_t)(p.n * p.c * (s4d_host_conv_prod3(p.g.img) +
                                                                 s4d_host_conv_prod3(p.g.grid)))
                         : 0;
    return sizeof(pool_taps) * (size_t)(p.g.grid[0] + p.g.grid[1] + p.g.grid[2]) + nhwc;
}

static size_t maxpool_ws(const s4d_op_ctx *ctx) { return pool_ws(ctx, POOL_MAX); }
static size_t avgpool_ws(const s4d_op_ctx *ctx) { return pool_ws(ctx, POOL_AVG); }
static s4d_status maxpool_infer(s4d_op_ctx *ctx) { return pool_infer(ctx, POOL_MAX); }
static s4d_status maxpool_run(s4d_op_ctx *ctx) { return pool_run(ctx, POOL_MAX); }
static s4d_status avgpool_infer(s4d_op_ctx *ctx) { return pool_infer(ctx, POOL_AVG); }
static s4d_status avgpool_run(s4d_op_ctx *ctx) { return pool_run(ctx, POOL_AVG); }

/* Global pools: one value per (n, c) plane. */
static s4d_status gpool_check(s4d_op_ctx *ctx)
{
    if (ctx->num_inputs != 1 || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 1 input and 1 output");
    const s4d_tensor *x = &ctx->inputs[0];
    /* float16 is inferred for backends that run it (CUDA); the host reference refuses it in run. */
    if (x->dtype != S4D_DTYPE_FLOAT32 && x->dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s; only float32 is supported (float16 on CUDA)",
                            s4d_dtype_name(x->dtype));
    if (x->rank < 3)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank >= 3, got %d", x->rank);
    return S4D_OK;
}

static s4d_status gpool_infer(s4d_op_ctx *ctx)
{
    s4d_status st = gpool_check(ctx);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (ctx->params) {
        s4d_gpool_params *gp = ctx->params;
        memset(gp, 0, sizeof *gp);
        gp->planes = x->dims[0] * x->dims[1];
        gp->plane = 1;
        for (int i = 2; i < x->rank; i++)
            gp->plane *= x->dims[i];
    }
    ctx->outputs[0] = *x;
    ctx->outputs[0].data = NULL;
    for (int i = 2; i < x->rank; i++)
        ctx->outputs[0].dims[i] = 1;
    return S4D_OK;
}

typedef struct gpool_job {
    const float *x;
    float *y;
    int64_t plane;
    int is_max;
} gpool_job;

static void gpool_planes(void *arg, int64_t begin, int64_t end)
{
    const gpool_job *j = arg;
    for (int64_t p = begin; p < end; p++) {
        const float *x = j->x + p * j->plane;
        if (j->is_max) {
            float m = j->plane ? x[0] : -INFINITY;
            for (int64_t i = 1; i < j->plane; i++)
                if (x[i] > m || x[i] != x[i])
                    m = x[i];
            j->y[p] = m;
        } else {
            double s = 0.0;
            for (int64_t i = 0; i < j->plane; i++)
                s += x[i];
            j->y[p] = j->plane ? (float)(s / (double)j->plane) : 0.0f;
        }
    }
}

static s4d_status gpool_run(s4d_op_ctx *ctx, int is_max)
{
    const s4d_tensor *x = &ctx->inputs[0];
    if (x->dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s: the host pools run float32 only",
                            s4d_dtype_name(x->dtype));
    gpool_job j = {x->data, ctx->outputs[0].data, 1, is_max};
    int64_t planes;
    if (ctx->params) {
        const s4d_gpool_params *gp = ctx->params;
        planes = gp->planes;
        j.plane = gp->plane;
    } else {
        s4d_status st = gpool_check(ctx);
        if (st != S4D_OK)
            return st;
        for (int i = 2; i < x->rank; i++)
            j.plane *= x->dims[i];
        planes = x->dims[0] * x->dims[1];
    }
    s4d_parallel_for(ctx->pool, planes, 1, gpool_planes, &j);
    return S4D_OK;
}

static s4d_status gavg_run(s4d_op_ctx *ctx) { return gpool_run(ctx, 0); }
static s4d_status gmax_run(s4d_op_ctx *ctx) { return gpool_run(ctx, 1); }

#define POOL_ATTRS                                                                                 \
    {"auto_pad", S4D_ATTR_STRING}, {"kernel_shape", S4D_ATTR_INTS}, {"pads", S4D_ATTR_INTS},            \
        {"strides", S4D_ATTR_INTS}, {"ceil_mode", S4D_ATTR_INT, S4D_ATTR_BOOL}, {"dilations", S4D_ATTR_INTS}
/* The pools read every attribute at every opset: none is ignored where ONNX lacks it. */
static const s4d_attr_spec maxpool_attrs[] = {POOL_ATTRS, {"storage_order", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
static const s4d_attr_spec avgpool_attrs[] = {POOL_ATTRS, {"count_include_pad", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
const s4d_op_schema s4d_op_maxpool = {"", "MaxPool", 1, maxpool_infer, maxpool_ws, maxpool_run,
                                      sizeof(pool_plan), 0, maxpool_attrs};
static const s4d_attr_spec maxpool_nhwc_attrs[] = {POOL_ATTRS, {"storage_order", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                                   {"layout", S4D_ATTR_STRING}, {NULL}};
const s4d_op_schema s4d_op_maxpool_nhwc = {"s4d", "MaxPool", 1, maxpool_infer, maxpool_ws, maxpool_run,
                                           sizeof(pool_plan), 0, maxpool_nhwc_attrs};
const s4d_op_schema s4d_op_avgpool = {"", "AveragePool", 1, avgpool_infer, avgpool_ws, avgpool_run,
                                      sizeof(pool_plan), 0, avgpool_attrs};
const s4d_op_schema s4d_op_global_avgpool = {"", "GlobalAveragePool", 1, gpool_infer, NULL, gavg_run,
                                             sizeof(s4d_gpool_params), 0};
const s4d_op_schema s4d_op_global_maxpool = {"", "GlobalMaxPool", 1, gpool_infer, NULL, gmax_run,
                                             sizeof(s4d_gpool_params), 0};
