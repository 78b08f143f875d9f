/*
 * Pad (opsets 1, 2, 11, 13, 18, 19): modes constant, reflect, edge and wrap,
 * any element type. The pads decide the output shape, so they must be
 * constants (an attribute before opset 11, an input after, with an optional
 * axes input from opset 18); the constant value may be computed at run time.
 *
 * Negative pads crop. ONNX leaves their interplay with the mirroring modes
 * open; here an axis is cropped first and the cropped extent is what reflect,
 * edge and wrap repeat (as ONNX Runtime does). Reflect needs at least two
 * elements along a padded axis unless the pad is 0; wrap and edge one.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/extra.h"

typedef s4d_pad_params pad_plan;

static s4d_status pad_mode(s4d_op_ctx *ctx, int32_t *mode)
{
    const char *m = s4d_op_attr_string(ctx, "mode", "constant");
    if (strcmp(m, "constant") == 0)
        *mode = S4D_PAD_CONSTANT;
    else if (strcmp(m, "reflect") == 0)
        *mode = S4D_PAD_REFLECT;
    else if (strcmp(m, "edge") == 0)
        *mode = S4D_PAD_EDGE;
    else if (strcmp(m, "wrap") == 0 && ctx->opset >= 19)
        *mode = S4D_PAD_WRAP;
    else
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "mode '%s' (constant, reflect, edge%s)", m,
                            ctx->opset >= 19 ? ", wrap" : "");
    return S4D_OK;
}

/* The pads as [begin of each axis..., end of each axis...] over all rank axes. */
static s4d_status pad_list(s4d_op_ctx *ctx, int rank, int64_t *pads)
{
    int64_t raw[2 * S4D_MAX_RANK], n = 0;
    for (int i = 0; i < 2 * rank; i++)
        pads[i] = 0;
    if (ctx->opset < 11) {
        const char *name = ctx->opset < 2 ? "paddings" : "pads";
        const s4d_attr *a = s4d_op_attr(ctx, name);
        if (!a || a->type != S4D_ATTR_INTS)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute %s (ints) is required", name);
        if ((int64_t)a->count != 2 * rank)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s has %zu values, expected %d for rank %d",
                                name, a->count, 2 * rank, rank);
        memcpy(pads, a->ints, sizeof(int64_t) * (size_t)(2 * rank));
        return S4D_OK;
    }
    if (!s4d_in_present(ctx, 1))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "input 1 (pads) is required");
    s4d_status st = s4d_const_ints(ctx, 1, "pads", raw, 2 * S4D_MAX_RANK, &n);
    if (st != S4D_OK)
        return st;
    int axes[S4D_MAX_RANK], naxes = rank;
    for (int i = 0; i < rank; i++)
        axes[i] = i;
    if (ctx->opset >= 18 && s4d_in_present(ctx, 3)) {
        int64_t av[S4D_MAX_RANK], na = 0;
        if ((st = s4d_const_ints(ctx, 3, "axes", av, S4D_MAX_RANK, &na)) != S4D_OK)
            return st;
        unsigned seen = 0;
        for (int64_t i = 0; i < na; i++) {
            if ((st = s4d_norm_axis(ctx, av[i], rank, "axes value", &axes[i])) != S4D_OK)
                return st;
            if (seen & (1u << axes[i]))
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis %d is repeated in axes", axes[i]);
            seen |= 1u << axes[i];
        }
        naxes = (int)na;
    }
    if (n != 2 * naxes)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "pads has %lld values, expected %d (2 per axis)",
                            (long long)n, 2 * naxes);
    for (int i = 0; i < naxes; i++) {
        pads[axes[i]] = raw[i];
        pads[rank + axes[i]] = raw[naxes + i];
    }
    return S4D_OK;
}

static s4d_status pad_make(s4d_op_ctx *ctx, pad_plan *p, int64_t *out_dims)
{
    int max_in = ctx->opset >= 18 ? 4 : ctx->opset >= 11 ? 3 : 1;
    s4d_status st = s4d_check_arity(ctx, 1, max_in, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_dtype dt = x->dtype;
    size_t es = s4d_dtype_size(dt);
    if (es == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s",
                            s4d_dtype_name(dt));
    memset(p, 0, sizeof *p);
    p->rank = x->rank;
    if ((st = pad_mode(ctx, &p->mode)) != S4D_OK)
        return st;
    int64_t pads[2 * S4D_MAX_RANK];
    if ((st = pad_list(ctx, x->rank, pads)) != S4D_OK)
        return st;
    const int64_t limit = (int64_t)1 << 40;
    for (int i = 0; i < 2 * x->rank; i++)
        if (pads[i] > limit || pads[i] < -limit)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "pad %lld is beyond 2^40", (long long)pads[i]);
    for (int d = 0; d < x->rank; d++) {
        int64_t n = x->dims[d], b = pads[d], e = pads[x->rank + d];
        p->lo[d] = b < 0 ? -b : 0;
        p->hi[d] = e < 0 ? n + e : n;
        p->before[d] = b > 0 ? b : 0;
        if (p->hi[d] < p->lo[d])
            return s4d_op_error(ctx, S4D_ERR_SHAPE,
                                "axis %d: pads %lld and %lld crop more than its %lld elements", d,
                                (long long)b, (long long)e, (long long)n);
        int64_t kept = p->hi[d] - p->lo[d], after = e > 0 ? e : 0;
        out_dims[d] = kept + p->before[d] + after;
        if ((p->before[d] || after) && p->mode != S4D_PAD_CONSTANT) {
            int64_t need = p->mode == S4D_PAD_REFLECT ? 2 : 1;
            if (kept < need)
                return s4d_op_error(ctx, S4D_ERR_SHAPE,
                                    "axis %d: %s padding needs at least %lld element%s, the input "
                                    "has %lld",
                                    d, p->mode == S4D_PAD_REFLECT ? "reflect" : p->mode == S4D_PAD_EDGE ? "edge" : "wrap",
                                    (long long)need, need > 1 ? "s" : "", (long long)kept);
        }
    }
    /* The constant: an attribute before opset 11, an optional scalar input after. */
    if (ctx->opset < 11) {
        /* value[] has no 8-byte alignment: convert into an aligned buffer first */
        uint64_t v = 0;
        s4d_store_f64(dt, &v, 0, (double)s4d_op_attr_float(ctx, "value", 0.0f));
        memcpy(p->value, &v, es);
    } else if (s4d_in_present(ctx, 2)) {
        const s4d_tensor *v = &ctx->inputs[2];
        if (v->dtype != dt)
            return s4d_op_error(ctx, S4D_ERR_DTYPE,
                                "input 2 (constant_value) is %s, the data is %s",
                                s4d_dtype_name(v->dtype), s4d_dtype_name(dt));
        if (s4d_tensor_numel(v) != 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input 2 (constant_value) must hold one value");
        if (v->data)
            memcpy(p->value, v->data, es);
        else
            p->value_at_run = 1;
    }
    return S4D_OK;
}

static s4d_status pad_infer(s4d_op_ctx *ctx)
{
    pad_plan p;
    int64_t dims[S4D_MAX_RANK];
    s4d_status st = pad_make(ctx, &p, dims);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(pad_plan *)ctx->params = p;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, ctx->inputs[0].rank, dims);
    return S4D_OK;
}

/* Source index along an axis for output index o, or -1 for the constant. */
static int64_t pad_src(const pad_plan *p, int d, int64_t o)
{
    int64_t lo = p->lo[d], n = p->hi[d] - lo, j = o - p->before[d];
    if (j >= 0 && j < n)
        return lo + j;
    switch ((s4d_pad_mode)p->mode) {
    case S4D_PAD_CONSTANT:
        return -1;
    case S4D_PAD_EDGE:
        return lo + (j < 0 ? 0 : n - 1);
    case S4D_PAD_WRAP: {
        int64_t r = j % n;
        return lo + (r < 0 ? r + n : r);
    }
    case S4D_PAD_REFLECT: {
        /* Mirror without repeating the edge: period 2 (n - 1). */
        int64_t period = 2 * (n - 1), r = j % period;
        if (r < 0)
            r += period;
        return lo + (r < n ? r : period - r);
    }
    }
    return -1;
}

typedef struct pad_job {
    const pad_plan *p;
    const char *x;
    char *y;
    const uint8_t *value;
    size_t es;
    int64_t in_dims[S4D_MAX_RANK], out_dims[S4D_MAX_RANK];
    int64_t in_stride[S4D_MAX_RANK];
} pad_job;

static void fill(char *dst, const uint8_t *v, size_t es, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (size_t)i * es, v, es);
}

/* Output rows (every axis but the last) [r0, r1). */
static void pad_rows(void *arg, int64_t r0, int64_t r1)
{
    const pad_job *j = arg;
    const pad_plan *p = j->p;
    int last = p->rank - 1;
    int64_t wo = j->out_dims[last];
    size_t es = j->es;
    for (int64_t r = r0; r < r1; r++) {
        char *dst = j->y + (size_t)(r * wo) * es;
        /* Source row of this output row, or none (the constant). */
        int64_t rem = r, off = 0;
        int constant = 0;
        for (int d = last - 1; d >= 0; d--) {
            int64_t o = rem % j->out_dims[d];
            rem /= j->out_dims[d];
            int64_t s = pad_src(p, d, o);
            if (s < 0) {
                constant = 1;
                break;
            }
            off += s * j->in_stride[d];
        }
        if (constant) {
            fill(dst, j->value, es, wo);
            continue;
        }
        const char *src = j->x + (size_t)off * es;
        int64_t b = p->before[last], kept = p->hi[last] - p->lo[last];
        int64_t mid = kept < wo - b ? kept : wo - b;
        for (int64_t o = 0; o < b; o++) {
            int64_t s = pad_src(p, last, o);
            if (s < 0)
                memcpy(dst + (size_t)o * es, j->value, es);
            else
                memcpy(dst + (size_t)o * es, src + (size_t)s * es, es);
        }
        if (mid > 0)
            memcpy(dst + (size_t)b * es, src + (size_t)p->lo[last] * es, (size_t)mid * es);
        for (int64_t o = b + (mid > 0 ? mid : 0); o < wo; o++) {
            int64_t s = pad_src(p, last, o);
            if (s < 0)
                memcpy(dst + (size_t)o * es, j->value, es);
            else
                memcpy(dst + (size_t)o * es, src + (size_t)s * es, es);
        }
    }
}

static s4d_status pad_run(s4d_op_ctx *ctx)
{
    pad_plan pl;
    const pad_plan *p = ctx->params;
    if (!p) {
        int64_t dims[S4D_MAX_RANK];
        s4d_status st = pad_make(ctx, &pl, dims);
        if (st != S4D_OK)
            return st;
        p = &pl;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_tensor *y = &ctx->outputs[0];
    if (s4d_tensor_numel(y) == 0)
        return S4D_OK;
    pad_job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    j.x = x->data;
    j.y = y->data;
    j.es = s4d_dtype_size(x->dtype);
    j.value = p->value_at_run ? ctx->inputs[2].data : p->value;
    if (p->rank == 0) {
        memcpy(j.y, j.x, j.es);
        return S4D_OK;
    }
    int64_t stride = 1;
    for (int d = p->rank - 1; d >= 0; d--) {
        j.in_dims[d] = x->dims[d];
        j.out_dims[d] = y->dims[d];
        j.in_stride[d] = stride;
        stride *= x->dims[d];
    }
    int64_t rows = s4d_tensor_numel(y) / y->dims[p->rank - 1];
    int64_t grain = 16384 / (y->dims[p->rank - 1] + 1) + 1;
    s4d_parallel_for(ctx->pool, rows, grain, pad_rows, &j);
    return S4D_OK;
}

/* paddings (opset 1) became pads (2), then an input with the value (11). */
static const s4d_attr_spec pad_attrs[] = {{"mode", S4D_ATTR_STRING},
                                          {"paddings", S4D_ATTR_INTS, 0, 0, 1},
                                          {"pads", S4D_ATTR_INTS, 0, 2, 10},
                                          {"value", S4D_ATTR_FLOAT, 0, 0, 10},
                                          {NULL}};
const s4d_op_schema s4d_op_pad = {"", "Pad", 1, pad_infer, NULL, pad_run, sizeof(pad_plan), 0, pad_attrs};
