/*
 * Conv (opset 1, 11) for 1 to 3 spatial dimensions: pads, auto_pad, strides,
 * dilations and groups. Each (image, group) is one product
 *   Y[M/g, out] = W[M/g, C/g * K] x col[C/g * K, out]
 * with col from im2col (skipped for 1x1, stride 1, unpadded kernels, where
 * the input already is the column matrix).
 *
 * FusedConv (domain "s4d", built by the fusion passes, never in a user's
 * model): Conv plus an optional residual input Z (added after the bias) and
 * an attribute activation = "" | "Relu" applied last. Its attribute layout
 * ("NCHW", the default, or "NHWC" for 2-D convolutions, which the
 * channels-last pass sets) says where the channels are: NHWC takes X and Z
 * as [N, H, W, C], W as [M, kh, kw, C/group] and gives Y as [N, H', W', M].
 * The host runs NHWC by transposing into its workspace around the NCHW
 * computation, so both layouts give the same bits.
 */
#include <string.h>

#include "ops/conv_common.h"
#include "ops/dense.h"
#include "ops/dense_util.h"

typedef s4d_conv_params conv_plan;

static s4d_status conv_plan_make(s4d_op_ctx *ctx, int fused, conv_plan *p)
{
    int max_in = fused ? 4 : 3;
    if (ctx->num_inputs < 2 || ctx->num_inputs > max_in || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 2 to %d inputs and 1 output, got %d and %d",
                            max_in, ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *x = &ctx->inputs[0], *w = &ctx->inputs[1];
    memset(p, 0, sizeof *p);
    p->dtype = x->dtype;
    p->has_bias = s4d_host_has_input(ctx, 2);
    p->has_z = fused && s4d_host_has_input(ctx, 3);
    /* float16 is inferred for backends that run it (CUDA); the host reference runs float32 only. */
    if ((x->dtype != S4D_DTYPE_FLOAT32 && x->dtype != S4D_DTYPE_FLOAT16) || w->dtype != x->dtype ||
        (p->has_bias && ctx->inputs[2].dtype != x->dtype) || (p->has_z && ctx->inputs[3].dtype != x->dtype))
        return s4d_op_error(ctx, S4D_ERR_DTYPE,
                            "X, W, B (and Z) must all be float32 or all float16 (X is %s, W is %s)",
                            s4d_dtype_name(x->dtype), s4d_dtype_name(w->dtype));
    if (x->rank < 3 || x->rank > 5 || w->rank != x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X and W must have the same rank 3 to 5, got %d and %d",
                            x->rank, w->rank);
    const char *layout = fused ? s4d_op_attr_string(ctx, "layout", "NCHW") : "NCHW";
    if (strcmp(layout, "NHWC") == 0)
        p->nhwc = 1;
    else if (strcmp(layout, "NCHW") != 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "layout '%s' (NCHW or NHWC)", layout);
    if (p->nhwc && x->rank != 4)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "layout NHWC is for 2-D convolutions (rank 4), not rank %d",
                            x->rank);
    int nsp = x->rank - 2;
    /* Where the channels and the spatial dims of X and W are. */
    const int64_t *x_sp = p->nhwc ? x->dims + 1 : x->dims + 2, *w_sp = p->nhwc ? w->dims + 1 : w->dims + 2;
    const int64_t w_cg = p->nhwc ? w->dims[3] : w->dims[1];
    p->n = x->dims[0];
    p->c = p->nhwc ? x->dims[3] : x->dims[1];
    p->m = w->dims[0];
    p->group = s4d_op_attr_int(ctx, "group", 1);
    if (p->group < 1 || p->c % p->group != 0 || p->m % p->group != 0)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "group %lld must divide input channels %lld and output channels %lld",
                            (long long)p->group, (long long)p->c, (long long)p->m);
    p->cg = p->c / p->group;
    p->mg = p->m / p->group;
    if (w_cg != p->cg)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "W has %lld input channels per group, X gives %lld",
                            (long long)w_cg, (long long)p->cg);
    if (p->has_bias && (ctx->inputs[2].rank != 1 || ctx->inputs[2].dims[0] != p->m))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "B must be [%lld]", (long long)p->m);
    s4d_auto_pad ap;
    s4d_status st = s4d_host_conv_attrs(ctx, nsp, w_sp, &p->g, &ap);
    if (st != S4D_OK)
        return st;
    s4d_conv_geom *g = &p->g;
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        int64_t in = x_sp[i], ext, padded;
        if (!s4d_host_conv_extent(g, j, &ext) || s4d_add_i64(in, g->pad_b[j], &padded) ||
            s4d_add_i64(padded, g->pad_e[j], &padded))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d: the padded input or the dilated kernel "
                                "overflows 64 bits", i);
        g->img[j] = in;
        switch (ap) {
        case S4D_AUTO_PAD_NOTSET:
        case S4D_AUTO_PAD_VALID:
            g->grid[j] = padded < ext ? 0 : (padded - ext) / g->stride[j] + 1;
            break;
        case S4D_AUTO_PAD_SAME_UPPER:
        case S4D_AUTO_PAD_SAME_LOWER:
            s4d_host_conv_same_pad(g, j, ext, ap);
            break;
        }
        if (g->grid[j] < 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d: input %lld is smaller than the dilated kernel %lld",
                                i, (long long)in, (long long)ext);
    }
    p->direct = 1;
    for (int j = 0; j < 3; j++)
        if (g->k[j] != 1 || g->stride[j] != 1 || g->pad_b[j] != 0 || g->pad_e[j] != 0)
            p->direct = 0;
    int64_t kk, ncol;
    if (!s4d_host_conv_prod3_ok(g->k, &kk) || s4d_mul_i64(kk, p->cg, &kk) ||
        !s4d_host_conv_prod3_ok(g->grid, &ncol) || kk > S4D_HOST_BLAS_MAX_DIM || ncol > S4D_HOST_BLAS_MAX_DIM)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the column matrix exceeds 2^31-1 rows or columns");
    if (p->has_z) {
        const s4d_tensor *z = &ctx->inputs[3];
        int ok = z->rank == x->rank && z->dims[0] == p->n && z->dims[p->nhwc ? 3 : 1] == p->m;
        for (int i = 0; ok && i < nsp; i++)
            ok = z->dims[(p->nhwc ? 1 : 2) + i] == g->grid[3 - nsp + i];
        if (!ok)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "the residual input Z must have the output's shape");
    }
    const char *act = fused ? s4d_op_attr_string(ctx, "activation", "") : "";
    if (strcmp(act, "Relu") == 0)
        p->relu = 1;
    else if (act[0] != '\0')
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "activation '%s' (only Relu)", act);
    return S4D_OK;
}

/* The params infer made, or (white-box callers without params) a fresh parse. */
static s4d_status conv_plan_get(const s4d_op_ctx *ctx, int fused, conv_plan *p)
{
    if (ctx->params) {
        *p = *(const conv_plan *)ctx->params;
        return S4D_OK;
    }
    /* The cast only lets the parser report through ctx->err. */
    return conv_plan_make((s4d_op_ctx *)ctx, fused, p);
}

static s4d_status conv_infer_common(s4d_op_ctx *ctx, int fused)
{
    conv_plan p;
    s4d_status st = conv_plan_make(ctx, fused, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(conv_plan *)ctx->params = p;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = p.dtype;
    y->rank = ctx->inputs[0].rank;
    y->dims[0] = p.n;
    y->dims[p.nhwc ? 3 : 1] = p.m;
    for (int i = 0; i < p.g.nsp; i++)
        y->dims[(p.nhwc ? 1 : 2) + i] = p.g.grid[3 - p.g.nsp + i];
    return S4D_OK;
}

/* NHWC on the host: NCHW copies of X and W and the NCHW result, ahead of the column matrix. */
static size_t nhwc_floats(const conv_plan *p)
{
    if (!p->nhwc)
        return 0;
    return (size_t)(p->n * p->c * s4d_host_conv_prod3(p->g.img) + p->m * p->cg * s4d_host_conv_prod3(p->g.k) +
                    p->n * p->m * s4d_host_conv_prod3(p->g.grid));
}

static size_t conv_ws_common(const s4d_op_ctx *ctx, int fused)
{
    conv_plan p;
    if (conv_plan_get(ctx, fused, &p) != S4D_OK)
        return 0;
    const size_t col = p.direct ? 0 : (size_t)(p.cg * s4d_host_conv_prod3(p.g.k) * s4d_host_conv_prod3(p.g.grid));
    return sizeof(float) * (col + nhwc_floats(&p));
}

typedef struct post_job {
    float *y;
    const float *z;
    int relu;
} post_job;

static void post_range(void *arg, int64_t begin, int64_t end)
{
    const post_job *j = arg;
    for (int64_t i = begin; i < end; i++) {
        float v = j->y[i];
        if (j->z)
            v += j->z[i];
        if (j->relu && !(v > 0.0f))
            v = v != v ? v : 0.0f; /* keep NaN visible */
        j->y[i] = v;
    }
}

static s4d_status conv_run_common(s4d_op_ctx *ctx, int fused)
{
    conv_plan p;
    s4d_status st = conv_plan_get(ctx, fused, &p);
    if (st != S4D_OK)
        return st;
    if (p.dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "dtype %s: the host convolution runs float32 only",
                            s4d_dtype_name(p.dtype));
    const float *x = ctx->inputs[0].data, *w = ctx->inputs[1].data;
    const float *bias = p.has_bias ? ctx->inputs[2].data : NULL;
    float *y = ctx->outputs[0].data;
    const int64_t plane_in = s4d_host_conv_prod3(p.g.img), ncol = s4d_host_conv_prod3(p.g.grid);
    const int64_t kk = p.cg * s4d_host_conv_prod3(p.g.k);
    if (ctx->workspace_size < sizeof(float) * ((p.direct ? 0 : (size_t)(kk * ncol)) + nhwc_floats(&p)))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small", ctx->workspace_size);
    float *col = ctx->workspace, *y_nhwc = NULL;
    if (p.nhwc) {
        float *xt = col, *wt = xt + p.n * p.c * plane_in, *yt = wt + p.m * kk;
        s4d_host_swap_channels(x, xt, p.n, plane_in, p.c, 0);
        s4d_host_swap_channels(w, wt, p.m, kk / p.cg, p.cg, 0);
        x = xt;
        w = wt;
        y_nhwc = y;
        y = yt;
        col = yt + p.n * p.m * ncol;
    }
    for (int64_t n = 0; n < p.n; n++) {
        for (int64_t gi = 0; gi < p.group; gi++) {
            const float *xg = x + (n * p.c + gi * p.cg) * plane_in;
            float *yg = y + (n * p.m + gi * p.mg) * ncol;
            const float *cm = xg;
            if (!p.direct) {
                s4d_host_im2col(ctx->pool, &p.g, p.cg, xg, col);
                cm = col;
            }
            if (bias)
                for (int64_t o = 0; o < p.mg; o++) {
                    float b = bias[gi * p.mg + o];
                    for (int64_t q = 0; q < ncol; q++)
                        yg[o * ncol + q] = b;
                }
            s4d_host_sgemm(ctx->pool, 0, 0, p.mg, ncol, kk, 1.0f, w + gi * p.mg * kk, kk, cm, ncol, bias ? 1.0f : 0.0f,
                          yg, ncol);
        }
    }
    if (y_nhwc) {
        s4d_host_swap_channels(y, y_nhwc, p.n, ncol, p.m, 1);
        y = y_nhwc; /* Z has Y's layout */
    }
    if (p.has_z || p.relu) {
        post_job j = {y, p.has_z ? ctx->inputs[3].data : NULL, p.relu};
        s4d_parallel_for(ctx->pool, p.n * p.m * ncol, 16384, post_range, &j);
    }
    return S4D_OK;
}

static s4d_status conv_infer(s4d_op_ctx *ctx) { return conv_infer_common(ctx, 0); }
static size_t conv_ws(const s4d_op_ctx *ctx) { return conv_ws_common(ctx, 0); }
static s4d_status conv_run(s4d_op_ctx *ctx) { return conv_run_common(ctx, 0); }
static s4d_status fconv_infer(s4d_op_ctx *ctx) { return conv_infer_common(ctx, 1); }
static size_t fconv_ws(const s4d_op_ctx *ctx) { return conv_ws_common(ctx, 1); }
static s4d_status fconv_run(s4d_op_ctx *ctx) { return conv_run_common(ctx, 1); }

#define CONV_ATTRS                                                                                 \
    {"auto_pad", S4D_ATTR_STRING}, {"dilations", S4D_ATTR_INTS}, {"group", S4D_ATTR_INT},                \
        {"kernel_shape", S4D_ATTR_INTS}, {"pads", S4D_ATTR_INTS}, {"strides", S4D_ATTR_INTS}
static const s4d_attr_spec conv_attrs[] = {CONV_ATTRS, {NULL}};
static const s4d_attr_spec fconv_attrs[] = {CONV_ATTRS, {"activation", S4D_ATTR_STRING},
                                             {"layout", S4D_ATTR_STRING}, {NULL}};
const s4d_op_schema s4d_op_conv = {"", "Conv", 1, conv_infer, conv_ws, conv_run, sizeof(conv_plan), 0, conv_attrs};
const s4d_op_schema s4d_op_fused_conv = {"s4d", "FusedConv", 1, fconv_infer, fconv_ws, fconv_run,
                                         sizeof(conv_plan), 0, fconv_attrs};
