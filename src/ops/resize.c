/*
 * Resize (opset 10, 11, 13, 18, 19), modes nearest and linear, float32.
 * Scales or sizes must be constants (the output shape depends on them).
 * Both modes are separable, so the op resizes one axis at a time through
 * two workspace buffers; multilinear interpolation is exactly the product of
 * the per-axis linear weights, and nearest the per-axis choice.
 *
 * Coordinate modes: half_pixel, pytorch_half_pixel, align_corners,
 * asymmetric, tf_half_pixel_for_nearest, half_pixel_symmetric.
 * tf_crop_and_resize, cubic, antialias and keep_aspect_ratio_policy other
 * than stretch are refused. Opset 10 maps like asymmetric with floor.
 */
#include <math.h>
#include <string.h>

#include "ops/dense_util.h"
#include "ops/movement.h"

typedef s4d_resize_params resize_plan;
typedef s4d_resize_coord coord_mode;

static s4d_status resize_plan_make(s4d_op_ctx *ctx, resize_plan *p)
{
    int v10 = ctx->opset < 11;
    if (ctx->num_outputs != 1 || ctx->num_inputs < 2 || ctx->num_inputs > (v10 ? 2 : 4))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects %s inputs and 1 output, got %d and %d",
                            v10 ? "2" : "2 to 4", ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *x = &ctx->inputs[0];
    memset(p, 0, sizeof *p);
    /* float16 is inferred for backends that run it (CUDA); the host reference refuses it in run. */
    if (x->dtype != S4D_DTYPE_FLOAT32 && x->dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s; only float32 is supported (float16 on CUDA)",
                            s4d_dtype_name(x->dtype));
    p->rank = x->rank;
    const char *mode = s4d_op_attr_string(ctx, "mode", "nearest");
    if (strcmp(mode, "linear") == 0)
        p->linear = 1;
    else if (strcmp(mode, "nearest") != 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "mode '%s' (nearest and linear supported)", mode);
    if (s4d_op_attr_int(ctx, "antialias", 0) != 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "antialias=1 is not supported");
    const char *kar = s4d_op_attr_string(ctx, "keep_aspect_ratio_policy", "stretch");
    if (strcmp(kar, "stretch") != 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s' (stretch only)", kar);
    const char *cm = s4d_op_attr_string(ctx, "coordinate_transformation_mode", v10 ? "asymmetric" : "half_pixel");
    static const char *const cnames[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                         "tf_half_pixel_for_nearest", "half_pixel_symmetric"};
    int found = 0;
    for (int i = 0; i < 6; i++)
        if (strcmp(cm, cnames[i]) == 0) {
            p->coord = (coord_mode)i;
            found = 1;
        }
    if (strcmp(cm, "tf_half_pixel_for_nn") == 0) {
        /* The name ONNX 1.12's test data and older exporters use. */
        p->coord = S4D_RESIZE_TF_HALF_PIXEL_FOR_NEAREST;
        found = 1;
    }
    if (!found)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s' is not supported", cm);
    const char *nm = s4d_op_attr_string(ctx, "nearest_mode", v10 ? "floor" : "round_prefer_floor");
    if (strcmp(nm, "round_prefer_floor") == 0)
        p->near = S4D_RESIZE_ROUND_PREFER_FLOOR;
    else if (strcmp(nm, "round_prefer_ceil") == 0)
        p->near = S4D_RESIZE_ROUND_PREFER_CEIL;
    else if (strcmp(nm, "floor") == 0)
        p->near = S4D_RESIZE_FLOOR;
    else if (strcmp(nm, "ceil") == 0)
        p->near = S4D_RESIZE_CEIL;
    else
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "nearest_mode '%s' is not known", nm);

    /* Which axes the scales/sizes name (opset 18 axes attribute), in order. */
    int axes[S4D_MAX_RANK], naxes = x->rank;
    for (int i = 0; i < x->rank; i++)
        axes[i] = i;
    const s4d_attr *aa = s4d_op_attr(ctx, "axes");
    if (aa) {
        if (aa->type != S4D_ATTR_INTS || aa->count < 1 || (int)aa->count > x->rank)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "axes must list 1 to %d ints", x->rank);
        naxes = (int)aa->count;
        for (int i = 0; i < naxes; i++) {
            int64_t a = aa->ints[i] < 0 ? aa->ints[i] + x->rank : aa->ints[i];
            if (a < 0 || a >= x->rank)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "axes[%d] = %lld is out of range", i,
                                    (long long)aa->ints[i]);
            axes[i] = (int)a;
        }
    }
    for (int i = 0; i < x->rank; i++) {
        p->in[i] = p->out[i] = x->dims[i];
        p->scale[i] = 1.0;
        p->span[i] = (double)x->dims[i];
    }
    int si = v10 ? 1 : 2, zi = 3;
    int has_scales = s4d_host_has_input(ctx, si) && s4d_tensor_numel(&ctx->inputs[si]) > 0;
    int has_sizes = !v10 && s4d_host_has_input(ctx, zi) && s4d_tensor_numel(&ctx->inputs[zi]) > 0;
    if (has_scales == has_sizes)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "exactly one of scales and sizes must be given");
    if (has_scales) {
        float sc[S4D_MAX_RANK];
        const s4d_tensor *t = &ctx->inputs[si];
        if (t->dtype != S4D_DTYPE_FLOAT32 || s4d_tensor_numel(t) != naxes)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "scales must be %d float32 values", naxes);
        if (s4d_host_const_floats(t, sc, S4D_MAX_RANK) != naxes)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "scales must be a constant (the output shape depends on it)");
        for (int i = 0; i < naxes; i++) {
            if (!(sc[i] > 0.0f))
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "scales[%d] = %g must be positive", i, sc[i]);
            int a = axes[i];
            p->scale[a] = sc[i];
            p->span[a] = (double)p->in[a] * (double)sc[i];
            /* Also false for inf and NaN: only a finite, representable size reaches the cast. */
            if (!(p->span[a] < 0x1p62))
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "scales[%d] = %g makes axis %d of %lld hold %g elements",
                                    i, sc[i], a, (long long)p->in[a], p->span[a]);
            p->out[a] = (int64_t)floor(p->span[a]);
        }
    } else {
        int64_t sz[S4D_MAX_RANK];
        const s4d_tensor *t = &ctx->inputs[zi];
        if (t->dtype != S4D_DTYPE_INT64 || s4d_tensor_numel(t) != naxes)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "sizes must be %d int64 values", naxes);
        if (s4d_host_const_ints(t, sz, S4D_MAX_RANK) != naxes)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "sizes must be a constant (the output shape depends on it)");
        for (int i = 0; i < naxes; i++) {
            int a = axes[i];
            if (sz[i] < 0)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "sizes[%d] = %lld is negative", i, (long long)sz[i]);
            p->out[a] = sz[i];
            p->span[a] = (double)sz[i];
            p->scale[a] = p->in[a] ? (double)sz[i] / (double)p->in[a] : 1.0;
        }
    }
    for (int i = 0; i < x->rank; i++)
        if (p->out[i] > 0 && p->in[i] == 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis %d: cannot resize an empty axis to %lld", i,
                                (long long)p->out[i]);
    /* The axis-by-axis intermediates (resize_ws) must be tensors s4d could hold too. */
    int64_t cur[S4D_MAX_RANK];
    memcpy(cur, p->in, sizeof cur);
    for (int a = 0; a < p->rank; a++) {
        cur[a] = p->out[a];
        if (!s4d_shape_fits(p->rank, cur, S4D_DTYPE_FLOAT32))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "resizing axis %d makes an intermediate of more than 2^50 bytes",
                                a);
    }
    return S4D_OK;
}

static s4d_status resize_infer(s4d_op_ctx *ctx)
{
    resize_plan local, *p = ctx->params ? ctx->params : &local;
    s4d_status st = resize_plan_make(ctx, p);
    if (st != S4D_OK)
        return st;
    s4d_tensor *y = &ctx->outputs[0];
    *y = ctx->inputs[0];
    y->data = NULL;
    memcpy(y->dims, p->out, sizeof(int64_t) * (size_t)p->rank);
    return S4D_OK;
}

/* Where output index o of an axis reads: rows i0 and i1 blended by w (nearest: i0 = i1, w = 0). */
typedef struct resize_tap {
    int64_t i0, i1;
    float w;
} resize_tap;

/* The plan infer made, or (white-box calls without params) a fresh one in *local. */
static s4d_status get_plan(const s4d_op_ctx *ctx, resize_plan *local, const resize_plan **p)
{
    if (ctx->params) {
        *p = ctx->params;
        return S4D_OK;
    }
    *p = local;
    return resize_plan_make((s4d_op_ctx *)ctx, local);
}

int s4d_resize_axis_active(const resize_plan *p, int a)
{
    if (p->in[a] != p->out[a] || p->scale[a] != 1.0)
        return 1;
    switch (p->coord) {
    case S4D_RESIZE_HALF_PIXEL:
    case S4D_RESIZE_PYTORCH_HALF_PIXEL:
    case S4D_RESIZE_ALIGN_CORNERS:
    case S4D_RESIZE_ASYMMETRIC:
    case S4D_RESIZE_HALF_PIXEL_SYMMETRIC:
        return 0;
    case S4D_RESIZE_TF_HALF_PIXEL_FOR_NEAREST:
        return 1;
    }
    return 1;
}

static size_t resize_ws(const s4d_op_ctx *ctx)
{
    resize_plan local;
    const resize_plan *pp;
    if (get_plan(ctx, &local, &pp) != S4D_OK)
        return 0;
    const resize_plan p = *pp;
    /* Intermediate shapes: axes before the current one resized, later ones not. */
    int64_t cur[S4D_MAX_RANK], worst = 0;
    memcpy(cur, p.in, sizeof cur);
    for (int a = 0; a < p.rank; a++) {
        cur[a] = p.out[a];
        int64_t n = 1;
        for (int i = 0; i < p.rank; i++)
            n *= cur[i];
        if (n > worst)
            worst = n;
    }
    int64_t longest = 1;
    for (int a = 0; a < p.rank; a++)
        if (p.out[a] > longest)
            longest = p.out[a];
    /* Two ping-pong buffers, then one axis's source-index table. */
    return 2 * sizeof(float) * (size_t)worst + sizeof(resize_tap) * (size_t)longest;
}

/* Source coordinate of output index o along an axis. */
static double src_coord(const resize_plan *p, int a, int64_t o)
{
    double s = p->scale[a], lin = (double)p->in[a], lout = (double)p->out[a];
    switch (p->coord) {
    case S4D_RESIZE_HALF_PIXEL:
        return ((double)o + 0.5) / s - 0.5;
    case S4D_RESIZE_PYTORCH_HALF_PIXEL:
        return lout > 1 ? ((double)o + 0.5) / s - 0.5 : 0.0;
    case S4D_RESIZE_ALIGN_CORNERS:
        return lout > 1 && p->span[a] > 1.0 ? (double)o * (lin - 1) / (p->span[a] - 1) : 0.0;
    case S4D_RESIZE_ASYMMETRIC:
        return (double)o / s;
    case S4D_RESIZE_TF_HALF_PIXEL_FOR_NEAREST:
        return ((double)o + 0.5) / s;
    case S4D_RESIZE_HALF_PIXEL_SYMMETRIC: {
        double adj = lout / (s * lin), centre = lin / 2.0;
        return centre * (1 - adj) + ((double)o + 0.5) / s - 0.5;
    }
    }
    return 0.0;
}

static int64_t nearest_index(const resize_plan *p, double x, int64_t len)
{
    double r;
    switch (p->near) {
    case S4D_RESIZE_ROUND_PREFER_FLOOR:
        r = (x == floor(x) + 0.5) ? floor(x) : round(x);
        break;
    case S4D_RESIZE_ROUND_PREFER_CEIL:
        r = (x == floor(x) + 0.5) ? ceil(x) : round(x);
        break;
    case S4D_RESIZE_FLOOR:
        r = floor(x);
        break;
    case S4D_RESIZE_CEIL:
        r = ceil(x);
        break;
    default:
        r = floor(x);
        break;
    }
    if (r < 0)
        return 0;
    if (r > (double)(len - 1))
        return len - 1;
    return (int64_t)r;
}

typedef struct axis_job {
    const resize_plan *p;
    int axis;
    int64_t outer, inner, lin, lout;
    const float *src;
    float *dst;
    const resize_tap *taps;
} axis_job;

/* The taps of output index o along axis a. */
static void one_tap(const resize_plan *p, int a, int64_t o, int64_t *i0, int64_t *i1, float *w)
{
    int64_t lin = p->in[a];
    double x = src_coord(p, a, o);
    if (p->linear) {
        if (x < 0)
            x = 0;
        if (x > (double)(lin - 1))
            x = (double)(lin - 1);
        *i0 = (int64_t)floor(x);
        *i1 = *i0 + 1 < lin ? *i0 + 1 : lin - 1;
        *w = (float)(x - (double)*i0);
    } else {
        *i0 = *i1 = nearest_index(p, x, lin);
        *w = 0.0f;
    }
}

void s4d_resize_taps(const resize_plan *p, int a, int64_t *i0, int64_t *i1, float *w)
{
    for (int64_t o = 0; o < p->out[a]; o++)
        one_tap(p, a, o, &i0[o], &i1[o], &w[o]);
}

static void fill_taps(const resize_plan *p, int a, resize_tap *t)
{
    for (int64_t o = 0; o < p->out[a]; o++)
        one_tap(p, a, o, &t[o].i0, &t[o].i1, &t[o].w);
}

static void axis_rows(void *arg, int64_t begin, int64_t end)
{
    const axis_job *j = arg;
    if (j->inner == 1) {
        /* Resizing the innermost axis: one source row per output row. */
        for (int64_t ou = begin; ou < end; ou++) {
            const float *s = j->src + ou * j->lin;
            float *d = j->dst + ou * j->lout;
            if (j->p->linear)
                for (int64_t o = 0; o < j->lout; o++) {
                    const resize_tap *t = &j->taps[o];
                    d[o] = s[t->i0] + t->w * (s[t->i1] - s[t->i0]);
                }
            else
                for (int64_t o = 0; o < j->lout; o++)
                    d[o] = s[j->taps[o].i0];
        }
        return;
    }
    for (int64_t r = begin * j->lout; r < end * j->lout; r++) {
        int64_t ou = r / j->lout, o = r % j->lout;
        const resize_tap *t = &j->taps[o];
        const float *s = j->src + ou * j->lin * j->inner;
        float *d = j->dst + (ou * j->lout + o) * j->inner;
        const float *a = s + t->i0 * j->inner;
        if (j->p->linear && t->w != 0.0f) {
            const float *b = s + t->i1 * j->inner;
            for (int64_t i = 0; i < j->inner; i++)
                d[i] = a[i] + t->w * (b[i] - a[i]);
        } else {
            memcpy(d, a, sizeof(float) * (size_t)j->inner);
        }
    }
}

static s4d_status resize_run(s4d_op_ctx *ctx)
{
    resize_plan local;
    const resize_plan *pp;
    s4d_status st = get_plan(ctx, &local, &pp);
    if (st != S4D_OK)
        return st;
    const resize_plan p = *pp;
    if (ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X is %s: the host Resize runs float32 only",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    int64_t total_out = 1;
    for (int i = 0; i < p.rank; i++)
        total_out *= p.out[i];
    float *y = ctx->outputs[0].data;
    if (total_out == 0)
        return S4D_OK;
    int last = -1;
    for (int a = 0; a < p.rank; a++)
        if (s4d_resize_axis_active(&p, a))
            last = a;
    if (last < 0) {
        memcpy(y, ctx->inputs[0].data, sizeof(float) * (size_t)total_out);
        return S4D_OK;
    }
    size_t need = resize_ws(ctx);
    if (ctx->workspace_size < need)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small", ctx->workspace_size);
    int64_t longest = 1;
    for (int a = 0; a < p.rank; a++)
        if (p.out[a] > longest)
            longest = p.out[a];
    size_t half = (need - sizeof(resize_tap) * (size_t)longest) / 2;
    float *buf[2] = {ctx->workspace, (float *)((char *)ctx->workspace + half)};
    resize_tap *taps = (resize_tap *)((char *)ctx->workspace + 2 * half);
    int64_t cur[S4D_MAX_RANK];
    memcpy(cur, p.in, sizeof cur);
    const float *src = ctx->inputs[0].data;
    int which = 0;
    for (int a = 0; a <= last; a++) {
        if (!s4d_resize_axis_active(&p, a))
            continue;
        axis_job j = {&p, a, 1, 1, p.in[a], p.out[a], src, a == last ? y : buf[which], taps};
        for (int i = 0; i < a; i++)
            j.outer *= cur[i];
        for (int i = a + 1; i < p.rank; i++)
            j.inner *= cur[i];
        fill_taps(&p, a, taps);
        s4d_parallel_for(ctx->pool, j.outer, 1 + 4096 / (j.inner * j.lout + 1), axis_rows, &j);
        cur[a] = p.out[a];
        src = j.dst;
        which ^= 1;
    }
    return S4D_OK;
}

/* cubic_coeff_a, exclude_outside and extrapolation_value only matter to the cubic mode,
   antialias and tf_crop_and_resize, which infer refuses. */
static const s4d_attr_spec resize_attrs[] = {
    {"mode", S4D_ATTR_STRING},
    {"coordinate_transformation_mode", S4D_ATTR_STRING},
    {"cubic_coeff_a", S4D_ATTR_FLOAT},
    {"exclude_outside", S4D_ATTR_INT, S4D_ATTR_BOOL},
    {"extrapolation_value", S4D_ATTR_FLOAT},
    {"nearest_mode", S4D_ATTR_STRING},
    {"antialias", S4D_ATTR_INT, S4D_ATTR_BOOL},
    {"axes", S4D_ATTR_INTS},
    {"keep_aspect_ratio_policy", S4D_ATTR_STRING},
    {NULL}};
const s4d_op_schema s4d_op_resize = {"", "Resize", 10, resize_infer, resize_ws, resize_run,
                                     sizeof(s4d_resize_params), 0, resize_attrs};
