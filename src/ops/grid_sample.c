/*
 * GridSample (opset 16; 20 names the modes linear/cubic), 4-D input:
 * X [N, C, H, W], grid [N, Ho, Wo, 2] of (x, y) in [-1, 1] -> Y [N, C, Ho, Wo].
 * Modes bilinear and nearest (nearest rounds half to even, as PyTorch);
 * padding zeros, border and reflection; align_corners both ways.
 */
#include <math.h>
#include <string.h>

#include "ops/dense_util.h"
#include "ops/movement.h"

typedef s4d_grid_sample_params gs_plan;

static s4d_status gs_plan_make(s4d_op_ctx *ctx, gs_plan *p)
{
    if (ctx->num_inputs != 2 || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 2 inputs and 1 output, got %d and %d",
                            ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *x = &ctx->inputs[0], *g = &ctx->inputs[1];
    if (x->dtype != S4D_DTYPE_FLOAT32 || g->dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X and grid must be float32, got %s and %s",
                            s4d_dtype_name(x->dtype), s4d_dtype_name(g->dtype));
    if (x->rank != 4 || g->rank != 4 || g->dims[0] != x->dims[0] || g->dims[3] != 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must be [N, C, H, W] and grid [N, Ho, Wo, 2] (4-D only)");
    const char *mode = s4d_op_attr_string(ctx, "mode", "bilinear");
    if (strcmp(mode, "bilinear") == 0 || strcmp(mode, "linear") == 0)
        p->linear = 1;
    else if (strcmp(mode, "nearest") == 0)
        p->linear = 0;
    else
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "mode '%s' (bilinear and nearest supported)", mode);
    const char *pm = s4d_op_attr_string(ctx, "padding_mode", "zeros");
    if (strcmp(pm, "zeros") == 0)
        p->pad = S4D_GRID_SAMPLE_ZEROS;
    else if (strcmp(pm, "border") == 0)
        p->pad = S4D_GRID_SAMPLE_BORDER;
    else if (strcmp(pm, "reflection") == 0)
        p->pad = S4D_GRID_SAMPLE_REFLECTION;
    else
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "padding_mode '%s' is not zeros, border or reflection", pm);
    p->align = s4d_op_attr_int(ctx, "align_corners", 0) != 0;
    p->n = x->dims[0];
    p->c = x->dims[1];
    p->h = x->dims[2];
    p->w = x->dims[3];
    p->ho = g->dims[1];
    p->wo = g->dims[2];
    return S4D_OK;
}

static s4d_status gs_infer(s4d_op_ctx *ctx)
{
    gs_plan local, *p = ctx->params ? ctx->params : &local;
    s4d_status st = gs_plan_make(ctx, p);
    if (st != S4D_OK)
        return st;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = S4D_DTYPE_FLOAT32;
    y->rank = 4;
    y->dims[0] = p->n;
    y->dims[1] = p->c;
    y->dims[2] = p->ho;
    y->dims[3] = p->wo;
    return S4D_OK;
}

/* Reflect x into the range whose doubled bounds are [lo2, hi2]. */
static double reflect(double x, double lo2, double hi2)
{
    if (lo2 == hi2)
        return 0.0;
    double mn = lo2 / 2, span = (hi2 - lo2) / 2;
    x = fabs(x - mn);
    double extra = fmod(x, span);
    /* The parity in floating point: x / span may lie far outside int64 (1e30, inf). */
    double flips = floor(x / span);
    return fmod(flips, 2.0) == 0.0 ? extra + mn : span - extra + mn;
}

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Pixel coordinate of a normalised one along a side of `size` pixels, padding applied. */
static double gs_coord(const gs_plan *p, double g, int64_t size)
{
    double x = p->align ? (g + 1) / 2 * (double)(size - 1) : ((g + 1) * (double)size - 1) / 2;
    switch (p->pad) {
    case S4D_GRID_SAMPLE_ZEROS:
        break;
    case S4D_GRID_SAMPLE_BORDER:
        x = clampd(x, 0, (double)(size - 1));
        break;
    case S4D_GRID_SAMPLE_REFLECTION:
        x = p->align ? reflect(x, 0, 2.0 * (double)(size - 1)) : reflect(x, -1, 2.0 * (double)size - 1);
        x = clampd(x, 0, (double)(size - 1));
        break;
    }
    return x;
}

typedef struct gs_job {
    const gs_plan *p;
    const float *x, *grid;
    float *y;
} gs_job;

static void gs_rows(void *arg, int64_t begin, int64_t end)
{
    const gs_job *j = arg;
    const gs_plan *p = j->p;
    const int64_t plane = p->h * p->w, oplane = p->ho * p->wo;
    for (int64_t r = begin; r < end; r++) {
        int64_t n = r / p->ho, oh = r % p->ho;
        for (int64_t ow = 0; ow < p->wo; ow++) {
            const float *gp = j->grid + ((n * p->ho + oh) * p->wo + ow) * 2;
            double x = gs_coord(p, gp[0], p->w), y = gs_coord(p, gp[1], p->h);
            const float *xs = j->x + n * p->c * plane;
            float *ys = j->y + n * p->c * oplane + oh * p->wo + ow;
            if (x != x || y != y) {
                /* A NaN location samples nothing. */
                for (int64_t c = 0; c < p->c; c++)
                    ys[c * oplane] = p->pad == S4D_GRID_SAMPLE_ZEROS ? 0.0f : NAN;
                continue;
            }
            if (!p->linear) {
                double rx = nearbyint(x), ry = nearbyint(y);
                int inside = rx >= 0 && rx <= (double)(p->w - 1) && ry >= 0 && ry <= (double)(p->h - 1);
                int64_t at = inside ? (int64_t)ry * p->w + (int64_t)rx : 0;
                for (int64_t c = 0; c < p->c; c++)
                    ys[c * oplane] = inside ? xs[c * plane + at] : 0.0f;
                continue;
            }
            double fx = floor(x), fy = floor(y);
            /* No corner lies inside the map: zeros, and no cast of a value outside int64. */
            if (!(fx >= -1 && fx <= (double)p->w && fy >= -1 && fy <= (double)p->h)) {
                for (int64_t c = 0; c < p->c; c++)
                    ys[c * oplane] = 0.0f;
                continue;
            }
            int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;
            float lx = (float)(x - fx), ly = (float)(y - fy);
            float wt[4], cw[4] = {(1 - lx) * (1 - ly), lx * (1 - ly), (1 - lx) * ly, lx * ly};
            int64_t off[4];
            int nv = 0;
            /* Only corners inside the map are read, so padding never touches memory. */
            for (int q = 0; q < 4; q++) {
                int64_t cx = x0 + (q & 1), cy = y0 + (q >> 1);
                if (cx >= 0 && cx < p->w && cy >= 0 && cy < p->h) {
                    wt[nv] = cw[q];
                    off[nv++] = cy * p->w + cx;
                }
            }
            for (int64_t c = 0; c < p->c; c++) {
                const float *s = xs + c * plane;
                float v = 0.0f;
                for (int q = 0; q < nv; q++)
                    v += wt[q] * s[off[q]];
                ys[c * oplane] = v;
            }
        }
    }
}

static s4d_status gs_run(s4d_op_ctx *ctx)
{
    gs_plan p;
    if (ctx->params) {
        p = *(const gs_plan *)ctx->params;
    } else {
        s4d_status st = gs_plan_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    if (p.h == 0 || p.w == 0) {
        memset(ctx->outputs[0].data, 0, sizeof(float) * (size_t)(p.n * p.c * p.ho * p.wo));
        return S4D_OK;
    }
    gs_job j = {&p, ctx->inputs[0].data, ctx->inputs[1].data, ctx->outputs[0].data};
    s4d_parallel_for(ctx->pool, p.n * p.ho, 1, gs_rows, &j);
    return S4D_OK;
}

static const s4d_attr_spec gs_attrs[] = {{"align_corners", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                         {"mode", S4D_ATTR_STRING},
                                         {"padding_mode", S4D_ATTR_STRING},
                                         {NULL}};
const s4d_op_schema s4d_op_grid_sample = {"", "GridSample", 16, gs_infer, NULL, gs_run,
                                          sizeof(s4d_grid_sample_params), 0, gs_attrs};
