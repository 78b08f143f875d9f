/*
 * Detection and segmentation ops, float32 host references:
 *   RoiAlign (opsets 10 and 16): average or max of bilinear samples per bin,
 *     the sampling and border rules of ONNX's reference (samples beyond one
 *     pixel outside the map count as 0; max mode takes the largest weighted
 *     corner, as ONNX Runtime does);
 *   MaxUnpool (opsets 9 and 11): values scattered to their MaxPool indices in
 *     a zero output. The indices address the unpooled shape the pooling
 *     attributes give; an output_shape input (a constant) may ask for a larger
 *     output, which gets the same elements at the same coordinates.
 */
#include <math.h>
#include <string.h>

#include "ops/broadcast.h"
#include "util/util.h"

/* ---- RoiAlign ---- */

typedef struct roi_params {
    int32_t max_mode, half_pixel;
    int64_t oh, ow, sampling;
    float scale;
} roi_params;

static s4d_status roi_make(s4d_op_ctx *ctx, roi_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 3, 3, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *r = &ctx->inputs[1], *bi = &ctx->inputs[2];
    if (x->dtype != S4D_DTYPE_FLOAT32 || r->dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X and rois must be float32");
    if (x->rank != 4 || r->rank != 2 || r->dims[1] != 4)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must be [N, C, H, W] and rois [num_rois, 4]");
    if (bi->dtype != S4D_DTYPE_INT64 || bi->rank != 1 || bi->dims[0] != r->dims[0])
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "batch_indices must be int64 [%lld]", (long long)r->dims[0]);
    memset(p, 0, sizeof *p);
    const char *mode = s4d_op_attr_string(ctx, "mode", "avg");
    if (strcmp(mode, "avg") != 0 && strcmp(mode, "max") != 0)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "mode '%s' (avg or max)", mode);
    p->max_mode = strcmp(mode, "max") == 0;
    const char *ct = s4d_op_attr_string(ctx, "coordinate_transformation_mode",
                                        ctx->opset >= 16 ? "half_pixel" : "output_half_pixel");
    if (strcmp(ct, "half_pixel") != 0 && strcmp(ct, "output_half_pixel") != 0)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "coordinate_transformation_mode '%s' (half_pixel or output_half_pixel)", ct);
    p->half_pixel = strcmp(ct, "half_pixel") == 0;
    p->oh = s4d_op_attr_int(ctx, "output_height", 1);
    p->ow = s4d_op_attr_int(ctx, "output_width", 1);
    p->sampling = s4d_op_attr_int(ctx, "sampling_ratio", 0);
    if (p->sampling > 1024)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "sampling_ratio %lld is above 1024", (long long)p->sampling);
    p->scale = s4d_op_attr_float(ctx, "spatial_scale", 1.0f);
    if (!(fabsf(p->scale) <= 1e6f))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "spatial_scale %g is not a finite scale", (double)p->scale);
    if (p->oh < 1 || p->ow < 1 || p->sampling < 0)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "output sizes must be >= 1 and sampling_ratio >= 0");
    return S4D_OK;
}

static s4d_status roi_infer(s4d_op_ctx *ctx)
{
    roi_params p;
    s4d_status st = roi_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(roi_params *)ctx->params = p;
    int64_t od[4] = {ctx->inputs[1].dims[0], ctx->inputs[0].dims[1], p.oh, p.ow};
    s4d_set_out(ctx, 0, S4D_DTYPE_FLOAT32, 4, od);
    return S4D_OK;
}

/* One bilinear sample of plane x (h x w) at (y, xx); *ok = 0 when it is outside. */
static void roi_sample(const float *x, int64_t h, int64_t w, double y, double xx, double *v, double *corner_max,
                       int *ok)
{
    *ok = 0;
    if (y < -1.0 || y > (double)h || xx < -1.0 || xx > (double)w)
        return;
    *ok = 1;
    y = y <= 0 ? 0 : y;
    xx = xx <= 0 ? 0 : xx;
    int64_t y0 = (int64_t)y, x0 = (int64_t)xx, y1, x1;
    if (y0 >= h - 1) {
        y0 = y1 = h - 1;
        y = (double)y0;
    } else {
        y1 = y0 + 1;
    }
    if (x0 >= w - 1) {
        x0 = x1 = w - 1;
        xx = (double)x0;
    } else {
        x1 = x0 + 1;
    }
    double ly = y - (double)y0, lx = xx - (double)x0, hy = 1.0 - ly, hx = 1.0 - lx;
    double a = hy * hx * x[y0 * w + x0], b = hy * lx * x[y0 * w + x1];
    double c = ly * hx * x[y1 * w + x0], d = ly * lx * x[y1 * w + x1];
    *v = a + b + c + d;
    double m = a > b ? a : b;
    m = m > c ? m : c;
    *corner_max = m > d ? m : d;
}

static s4d_status roi_run(s4d_op_ctx *ctx)
{
    roi_params local;
    const roi_params *p = ctx->params;
    if (!p) {
        s4d_status st = roi_make(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    const float *rois = ctx->inputs[1].data;
    const int64_t *bidx = ctx->inputs[2].data;
    int64_t nr = ctx->inputs[1].dims[0], n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
    float *y = ctx->outputs[0].data;
    double off = p->half_pixel ? 0.5 : 0.0;
    for (int64_t r = 0; r < nr; r++) {
        if (bidx[r] < 0 || bidx[r] >= n)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "batch_indices[%lld] = %lld is outside [0, %lld)",
                                (long long)r, (long long)bidx[r], (long long)n);
        const float *roi = rois + r * 4;
        for (int k = 0; k < 4; k++)
            if (!(fabsf(roi[k]) <= 1e9f))
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "rois[%lld] holds %g, not a coordinate",
                                    (long long)r, (double)roi[k]);
        double x1 = roi[0] * (double)p->scale - off, y1 = roi[1] * (double)p->scale - off;
        double x2 = roi[2] * (double)p->scale - off, y2 = roi[3] * (double)p->scale - off;
        double rw = x2 - x1, rh = y2 - y1;
        if (!p->half_pixel) {
            rw = rw > 1.0 ? rw : 1.0;
            rh = rh > 1.0 ? rh : 1.0;
        }
        double bh = rh / (double)p->oh, bw = rw / (double)p->ow;
        /* (adaptive grids are capped: a RoI thousands of pixels per bin samples no better) */
        double ah = ceil(rh / (double)p->oh), aw = ceil(rw / (double)p->ow);
        int64_t gh = p->sampling > 0 ? p->sampling : (int64_t)(ah > 1024 ? 1024 : ah > 0 ? ah : 0);
        int64_t gw = p->sampling > 0 ? p->sampling : (int64_t)(aw > 1024 ? 1024 : aw > 0 ? aw : 0);
        double count = gh * gw > 0 ? (double)(gh * gw) : 1.0;
        for (int64_t ch = 0; ch < c; ch++) {
            const float *plane = x->data ? (const float *)x->data + (bidx[r] * c + ch) * h * w : NULL;
            for (int64_t ph = 0; ph < p->oh; ph++)
                for (int64_t pw = 0; pw < p->ow; pw++) {
                    double acc = 0.0, best = 0.0;
                    int any = 0;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        double yy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double xx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                            double v = 0.0, m = 0.0;
                            int ok;
                            roi_sample(plane, h, w, yy, xx, &v, &m, &ok);
                            acc += v;
                            if (ok && (!any || m > best))
                                best = m;
                            any |= ok;
                        }
                    }
                    y[((r * c + ch) * p->oh + ph) * p->ow + pw] = (float)(p->max_mode ? best : acc / count);
                }
        }
    }
    return S4D_OK;
}

static const s4d_attr_spec roi_attrs[] = {{"mode", S4D_ATTR_STRING},
                                          {"output_height", S4D_ATTR_INT},
                                          {"output_width", S4D_ATTR_INT},
                                          {"sampling_ratio", S4D_ATTR_INT},
                                          {"spatial_scale", S4D_ATTR_FLOAT},
                                          {"coordinate_transformation_mode", S4D_ATTR_STRING},
                                          {NULL}};
const s4d_op_schema s4d_op_roi_align = {"", "RoiAlign", 10, roi_infer, NULL, roi_run, sizeof(roi_params), 0,
                                        roi_attrs};

/* ---- MaxUnpool ---- */

static s4d_status unpool_shape(s4d_op_ctx *ctx, int64_t *od, int64_t *dflt)
{
    s4d_status st = s4d_check_arity(ctx, 2, 3, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *ind = &ctx->inputs[1];
    if (x->dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s; only float32 is supported", s4d_dtype_name(x->dtype));
    if (ind->dtype != S4D_DTYPE_INT64 || ind->rank != x->rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "I must be int64 with X's shape");
    for (int d = 0; d < x->rank; d++)
        if (ind->dims[d] != x->dims[d])
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "I must have X's shape");
    if (x->rank < 3 || x->rank > 5)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank 3 to 5, got %d", x->rank);
    int nsp = x->rank - 2;
    const s4d_attr *ks = s4d_op_attr(ctx, "kernel_shape");
    if (!ks || ks->type != S4D_ATTR_INTS || (int)ks->count != nsp)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "kernel_shape must list %d sizes", nsp);
    const s4d_attr *sa = s4d_op_attr(ctx, "strides"), *pa = s4d_op_attr(ctx, "pads");
    dflt[0] = x->dims[0];
    dflt[1] = x->dims[1];
    for (int i = 0; i < nsp; i++) {
        int64_t s = sa && (int)sa->count == nsp ? sa->ints[i] : 1;
        int64_t pb = pa && (int)pa->count == 2 * nsp ? pa->ints[i] : 0;
        int64_t pe = pa && (int)pa->count == 2 * nsp ? pa->ints[nsp + i] : 0;
        const int64_t big = (int64_t)1 << 30;
        if (s < 1 || s > big || ks->ints[i] < 1 || ks->ints[i] > big || pb < 0 || pb > big || pe < 0 || pe > big)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "kernel_shape, strides and pads of spatial dim %d must be in [0, 2^30]", i);
        dflt[2 + i] = (x->dims[2 + i] - 1) * s + ks->ints[i] - pb - pe;
        if (dflt[2 + i] < 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "spatial dim %d of the output would be %lld", i,
                                (long long)dflt[2 + i]);
    }
    memcpy(od, dflt, sizeof(int64_t) * (size_t)x->rank);
    if (s4d_in_present(ctx, 2)) {
        int64_t vals[S4D_MAX_RANK], n;
        if ((st = s4d_const_ints(ctx, 2, "output_shape", vals, S4D_MAX_RANK, &n)) != S4D_OK)
            return st;
        if (n != x->rank)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "output_shape has %lld values for rank %d", (long long)n,
                                x->rank);
        for (int d = 0; d < x->rank; d++)
            if (vals[d] < dflt[d] || (d < 2 && vals[d] != dflt[d]))
                return s4d_op_error(ctx, S4D_ERR_SHAPE,
                                    "output_shape dim %d is %lld, below the unpooled %lld (or another N, C)", d,
                                    (long long)vals[d], (long long)dflt[d]);
        memcpy(od, vals, sizeof(int64_t) * (size_t)n);
    }
    return S4D_OK;
}

static s4d_status unpool_infer(s4d_op_ctx *ctx)
{
    int64_t od[S4D_MAX_RANK], dflt[S4D_MAX_RANK];
    s4d_status st = unpool_shape(ctx, od, dflt);
    if (st != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, S4D_DTYPE_FLOAT32, ctx->inputs[0].rank, od);
    return S4D_OK;
}

static s4d_status unpool_run(s4d_op_ctx *ctx)
{
    int64_t od[S4D_MAX_RANK], dflt[S4D_MAX_RANK];
    s4d_status st = unpool_shape(ctx, od, dflt);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    const int64_t *ind = ctx->inputs[1].data;
    float *y = ctx->outputs[0].data;
    int rank = x->rank;
    int64_t ny = s4d_tensor_numel(&ctx->outputs[0]), nx = s4d_tensor_numel(x);
    int64_t nd = s4d_dims_numel(rank, dflt);
    memset(y, 0, sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) {
        if (ind[i] < 0 || ind[i] >= nd)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "index %lld at %lld is outside the %lld unpooled elements",
                                (long long)ind[i], (long long)i, (long long)nd);
        /* Coordinates in the unpooled shape, then the same coordinates in the output. */
        int64_t rem = ind[i], at = 0, stride = 1;
        for (int d = rank - 1; d >= 0; d--) {
            at += rem % dflt[d] * stride;
            rem /= dflt[d];
            stride *= od[d];
        }
        y[at] = ((const float *)x->data)[i];
    }
    return S4D_OK;
}

static const s4d_attr_spec unpool_attrs[] = {
    {"kernel_shape", S4D_ATTR_INTS}, {"pads", S4D_ATTR_INTS}, {"strides", S4D_ATTR_INTS}, {NULL}};
const s4d_op_schema s4d_op_max_unpool = {"", "MaxUnpool", 9, unpool_infer, NULL, unpool_run, 0, 0, unpool_attrs};
