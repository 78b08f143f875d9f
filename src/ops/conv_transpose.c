/*
 * ConvTranspose (opset 1, 11) for 1 to 3 spatial dims: the adjoint of Conv.
 * Per (image, group): col[M/g * K, in] = W_g^T x X_g, then col2im scatters
 * col into Y (initialised with the bias). Output size, per spatial dim:
 *   out = stride * (in - 1) + output_padding + dilation * (k - 1) + 1 - pad_b - pad_e,
 * or output_shape / auto_pad SAME_* (out = in * stride) with the total
 * padding split as the ONNX spec says: SAME_UPPER puts the smaller half
 * first, anything else the larger half first.
 */
#include <string.h>

#include "ops/conv_common.h"
#include "ops/dense.h"
#include "ops/dense_util.h"

typedef s4d_convt_params convt_plan; /* g.img = Y spatial, g.grid = X spatial */

static s4d_status convt_plan_make(s4d_op_ctx *ctx, convt_plan *p)
{
    if (ctx->num_inputs < 2 || ctx->num_inputs > 3 || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 2 or 3 inputs and 1 output, got %d and %d",
                            ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *x = &ctx->inputs[0], *w = &ctx->inputs[1];
    memset(p, 0, sizeof *p);
    p->dtype = x->dtype;
    p->has_bias = s4d_host_has_input(ctx, 2);
    /* float16 is inferred for backends that run it (CUDA); the host reference runs float32 only. */
    if ((x->dtype != S4D_DTYPE_FLOAT32 && x->dtype != S4D_DTYPE_FLOAT16) || w->dtype != x->dtype ||
        (p->has_bias && ctx->inputs[2].dtype != x->dtype))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X, W (and B) must all be float32 or all float16 (X is %s, W is %s)",
                            s4d_dtype_name(x->dtype), s4d_dtype_name(w->dtype));
    if (x->rank < 3 || x->rank > 5 || w->rank != x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X and W must have the same rank 3 to 5, got %d and %d", x->rank,
                            w->rank);
    int nsp = x->rank - 2;
    p->n = x->dims[0];
    p->c = x->dims[1];
    p->group = s4d_op_attr_int(ctx, "group", 1);
    if (p->group < 1 || p->c % p->group != 0)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "group %lld must divide the input channels %lld",
                            (long long)p->group, (long long)p->c);
    if (w->dims[0] != p->c)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "W has %lld input channels, X has %lld", (long long)w->dims[0],
                            (long long)p->c);
    p->cg = p->c / p->group;
    p->mg = w->dims[1];
    p->m = p->mg * p->group;
    if (p->has_bias && (ctx->inputs[2].rank != 1 || ctx->inputs[2].dims[0] != p->m))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "B must be [%lld]", (long long)p->m);
    s4d_auto_pad ap;
    s4d_status st = s4d_host_conv_attrs(ctx, nsp, w->dims + 2, &p->g, &ap);
    if (st != S4D_OK)
        return st;
    int64_t opad[3] = {0, 0, 0};
    const s4d_attr *oa = s4d_op_attr(ctx, "output_padding");
    if (oa) {
        if (oa->type != S4D_ATTR_INTS || (int)oa->count != nsp)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "output_padding must list %d ints", nsp);
        for (int i = 0; i < nsp; i++)
            opad[i] = oa->ints[i];
    }
    const s4d_attr *os = s4d_op_attr(ctx, "output_shape");
    if (os && (os->type != S4D_ATTR_INTS || (int)os->count < nsp))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "output_shape must list %d ints", nsp);
    s4d_conv_geom *g = &p->g;
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        int64_t in = x->dims[2 + i], ext, full;
        if (opad[i] < 0 || (opad[i] >= g->stride[j] && opad[i] >= g->dil[j]))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "output_padding[%d] = %lld must be below the stride or dilation",
                                i, (long long)opad[i]);
        g->grid[j] = in;
        if (in < 1 || !s4d_host_conv_extent(g, j, &ext) || s4d_mul_i64(g->stride[j], in - 1, &full) ||
            s4d_add_i64(full, opad[i], &full) || s4d_add_i64(full, ext, &full))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d: input %lld gives no output or one "
                                "beyond 64 bits", i, (long long)in);
        int64_t out = -1;
        if (os)
            out = os->ints[os->count - (size_t)nsp + (size_t)i];
        else if ((ap == S4D_AUTO_PAD_SAME_UPPER || ap == S4D_AUTO_PAD_SAME_LOWER) &&
                 s4d_mul_i64(in, g->stride[j], &out))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d: the output overflows 64 bits", i);
        if (out >= 0) {
            /*
             * A negative total (output_shape beyond the kernel's reach) is
             * negative padding: the output grows by zero rows. Halves use
             * floor division, so the growth goes to the end as in ONNX's
             * reference.
             */
            int64_t total = full - out;
            int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            if (ap == S4D_AUTO_PAD_SAME_UPPER) {
                g->pad_b[j] = half;
                g->pad_e[j] = total - half;
            } else {
                g->pad_b[j] = total - half;
                g->pad_e[j] = half;
            }
        } else if (ap == S4D_AUTO_PAD_VALID) {
            g->pad_b[j] = g->pad_e[j] = 0;
        }
        /* full >= 1 and pads >= 0 (or halves of full - out): the first difference cannot overflow. */
        if (s4d_add_i64(full - g->pad_b[j], -g->pad_e[j], &g->img[j]) || g->img[j] < 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d: the padding leaves no output", i);
    }
    int64_t rows, ncol;
    if (!s4d_host_conv_prod3_ok(g->k, &rows) || s4d_mul_i64(rows, p->mg, &rows) ||
        !s4d_host_conv_prod3_ok(g->grid, &ncol) || rows > S4D_HOST_BLAS_MAX_DIM || ncol > S4D_HOST_BLAS_MAX_DIM ||
        p->cg > S4D_HOST_BLAS_MAX_DIM)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the column matrix exceeds 2^31-1 rows or columns");
    return S4D_OK;
}

/* The params infer made, or (white-box callers without params) a fresh parse. */
static s4d_status convt_plan_get(const s4d_op_ctx *ctx, convt_plan *p)
{
    if (ctx->params) {
        *p = *(const convt_plan *)ctx->params;
        return S4D_OK;
    }
    return convt_plan_make((s4d_op_ctx *)ctx, p);
}

static s4d_status convt_infer(s4d_op_ctx *ctx)
{
    convt_plan p;
    s4d_status st = convt_plan_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(convt_plan *)ctx->params = p;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = p.dtype;
    y->rank = ctx->inputs[0].rank;
    y->dims[0] = p.n;
    y->dims[1] = p.m;
    for (int i = 0; i < p.g.nsp; i++)
        y->dims[2 + i] = p.g.img[3 - p.g.nsp + i];
    return S4D_OK;
}

static size_t convt_ws(const s4d_op_ctx *ctx)
{
    convt_plan p;
    if (convt_plan_get(ctx, &p) != S4D_OK)
        return 0;
    return sizeof(float) * (size_t)(p.mg * s4d_host_conv_prod3(p.g.k) * s4d_host_conv_prod3(p.g.grid));
}

static s4d_status convt_run(s4d_op_ctx *ctx)
{
    convt_plan p;
    s4d_status st = convt_plan_get(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (p.dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "dtype %s: the host ConvTranspose runs float32 only",
                            s4d_dtype_name(p.dtype));
    const int64_t kk = s4d_host_conv_prod3(p.g.k), ncol = s4d_host_conv_prod3(p.g.grid);
    const int64_t plane_out = s4d_host_conv_prod3(p.g.img), rows = p.mg * kk;
    if (ctx->workspace_size < sizeof(float) * (size_t)(rows * ncol))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small", ctx->workspace_size);
    const float *x = ctx->inputs[0].data, *w = ctx->inputs[1].data;
    const float *bias = p.has_bias ? ctx->inputs[2].data : NULL;
    float *y = ctx->outputs[0].data, *col = ctx->workspace;
    for (int64_t n = 0; n < p.n; n++)
        for (int64_t gi = 0; gi < p.group; gi++) {
            float *yg = y + (n * p.m + gi * p.mg) * plane_out;
            for (int64_t o = 0; o < p.mg; o++) {
                float b = bias ? bias[gi * p.mg + o] : 0.0f;
                for (int64_t q = 0; q < plane_out; q++)
                    yg[o * plane_out + q] = b;
            }
            s4d_host_sgemm(ctx->pool, 1, 0, rows, ncol, p.cg, 1.0f, w + gi * p.cg * rows, rows,
                          x + (n * p.c + gi * p.cg) * ncol, ncol, 0.0f, col, ncol);
            s4d_host_col2im(ctx->pool, &p.g, p.mg, col, yg);
        }
    return S4D_OK;
}

static const s4d_attr_spec convt_attrs[] = {
    {"auto_pad", S4D_ATTR_STRING}, {"dilations", S4D_ATTR_INTS},      {"group", S4D_ATTR_INT},
    {"kernel_shape", S4D_ATTR_INTS}, {"output_padding", S4D_ATTR_INTS}, {"output_shape", S4D_ATTR_INTS},
    {"pads", S4D_ATTR_INTS},         {"strides", S4D_ATTR_INTS},       {NULL}};
const s4d_op_schema s4d_op_conv_transpose = {"", "ConvTranspose", 1, convt_infer, convt_ws, convt_run,
                                             sizeof(convt_plan), 0, convt_attrs};
