/*
 * s4d::FusedMBConv (built by src/passes/fuse_mbconv.c, never in a user's
 * model): the inverted residual block of mobile networks as one layer,
 *
 *   e = act1(conv1x1(X, W1) + B1)      expand      (W1 absent: e = X)
 *   d = act2(depthwise(e, W2) + B2)    k x k, dw_strides, dw_pads
 *   Y = act3(conv1x1(d, W3) + B3 + Z)  project     (Z: the residual)
 *
 * Inputs X, W1, B1, W2, B2, W3, B3, Z: W1 [MID][C][1][1], W2 [MID][1][K][K],
 * W3 [M][MID][1][1], B1 and B2 [MID], B3 [M], Z Y's shape, all float32; W1,
 * the biases and Z optional. Attributes: expand_activation, dw_activation
 * and activation with their _alpha and _beta (FusedConvAct's names and
 * defaults, "" for none), dw_strides [s, s] (s 1 or 2), dw_pads [top, left,
 * bottom, right] (each below K).
 *
 * The host reference accumulates in float from zero with fmaf, channels
 * (taps) in ascending order, then adds the bias, the residual and applies
 * the activation: the operations the CPU kernels chain, so that the two stay
 * within a few float roundings of each other. Its workspace holds e and d
 * of one image.
 */
#include <math.h>
#include <string.h>

#include "ops/dense_util.h"
#include "ops/extra.h"

typedef s4d_fused_mbconv_params mbc_params;

static const char *const mbc_input_names[S4D_MBCONV_NUM_INPUTS] = {"X",  "W1", "B1", "W2",
                                                                   "B2", "W3", "B3", "Z"};

static int is_f32(const s4d_tensor *t)
{
    return t->dtype == S4D_DTYPE_FLOAT32;
}

/* Input i of rank 4 with dims d (-1: any); an error naming it otherwise. */
static s4d_status check_4d(s4d_op_ctx *ctx, int i, const int64_t *d, const char *want)
{
    const s4d_tensor *t = &ctx->inputs[i];
    int ok = is_f32(t) && t->rank == 4;
    for (int k = 0; ok && k < 4; k++)
        ok = d[k] < 0 || t->dims[k] == d[k];
    if (ok)
        return S4D_OK;
    if (!is_f32(t))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "%s must be float32, got %s", mbc_input_names[i],
                            s4d_dtype_name(t->dtype));
    if (t->rank != 4)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s must be %s, got rank %d", mbc_input_names[i],
                            want, t->rank);
    return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s must be %s, got [%lld, %lld, %lld, %lld]",
                        mbc_input_names[i], want, (long long)t->dims[0], (long long)t->dims[1],
                        (long long)t->dims[2], (long long)t->dims[3]);
}

/* Optional bias i: absent, or float32 [len]. */
static s4d_status check_bias(s4d_op_ctx *ctx, int i, int64_t len, int32_t *has)
{
    *has = s4d_host_has_input(ctx, i);
    if (!*has)
        return S4D_OK;
    const s4d_tensor *t = &ctx->inputs[i];
    if (!is_f32(t) || t->rank != 1 || t->dims[0] != len) {
        if (t->rank == 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s must be float32 [%lld], got %s [%lld]",
                                mbc_input_names[i], (long long)len, s4d_dtype_name(t->dtype),
                                (long long)t->dims[0]);
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s must be float32 [%lld], got %s of rank %d",
                            mbc_input_names[i], (long long)len, s4d_dtype_name(t->dtype), t->rank);
    }
    return S4D_OK;
}

/* An INTS attribute of exactly n values; 0 when absent (dflt stays), 1 when read, -1 bad count. */
static int ints_attr(const s4d_op_ctx *ctx, const char *name, size_t n, int64_t *out)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    if (!a)
        return 0;
    if (a->count != n || !a->ints)
        return -1;
    for (size_t i = 0; i < n; i++)
        out[i] = a->ints[i];
    return 1;
}

static s4d_status mbc_parse(s4d_op_ctx *ctx, mbc_params *p)
{
    memset(p, 0, sizeof *p);
    if (ctx->num_inputs < S4D_MBCONV_W3 + 1 || ctx->num_inputs > S4D_MBCONV_NUM_INPUTS ||
        ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "expects 6 to 8 inputs (X, W1, B1, W2, B2, W3, B3, Z) and 1 output, "
                            "got %d and %d",
                            ctx->num_inputs, ctx->num_outputs);
    static const int required[] = {S4D_MBCONV_X, S4D_MBCONV_W2, S4D_MBCONV_W3};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!s4d_host_has_input(ctx, required[i]))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "input %s is required",
                                mbc_input_names[required[i]]);
    const int64_t any4[4] = {-1, -1, -1, -1};
    s4d_status st = check_4d(ctx, S4D_MBCONV_X, any4, "[N][C][H][W]");
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[S4D_MBCONV_X];
    p->n = x->dims[0];
    p->c = x->dims[1];
    p->h = x->dims[2];
    p->w = x->dims[3];
    p->has_expand = s4d_host_has_input(ctx, S4D_MBCONV_W1);
    if (p->has_expand) {
        const int64_t d[4] = {-1, p->c, 1, 1};
        if ((st = check_4d(ctx, S4D_MBCONV_W1, d, "[MID][C][1][1] with C of X")) != S4D_OK)
            return st;
        p->mid = ctx->inputs[S4D_MBCONV_W1].dims[0];
    } else {
        p->mid = p->c;
        if (s4d_host_has_input(ctx, S4D_MBCONV_B1))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "B1 without W1 (no expand layer)");
        const char *a = s4d_op_attr_string(ctx, "expand_activation", "");
        if (a[0] != '\0')
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "expand_activation '%s' without W1 (no expand layer)", a);
    }
    const s4d_tensor *w2 = &ctx->inputs[S4D_MBCONV_W2];
    {
        const int64_t d[4] = {p->mid, 1, -1, -1};
        st = check_4d(ctx, S4D_MBCONV_W2, d, "depthwise [MID][1][K][K] with MID of W1 (or C of X)");
        if (st != S4D_OK)
            return st;
    }
    p->k = w2->dims[2];
    if (p->k < 1 || w2->dims[3] != p->k)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "W2 must have a square kernel, got %lld x %lld",
                            (long long)w2->dims[2], (long long)w2->dims[3]);
    {
        const int64_t d[4] = {-1, p->mid, 1, 1};
        if ((st = check_4d(ctx, S4D_MBCONV_W3, d, "[M][MID][1][1] with MID of W2")) != S4D_OK)
            return st;
    }
    p->m = ctx->inputs[S4D_MBCONV_W3].dims[0];
    if (p->mid < 1 || p->m < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "MID %lld and M %lld must be positive",
                            (long long)p->mid, (long long)p->m);
    if ((st = check_bias(ctx, S4D_MBCONV_B1, p->mid, &p->has_b1)) != S4D_OK ||
        (st = check_bias(ctx, S4D_MBCONV_B2, p->mid, &p->has_b2)) != S4D_OK ||
        (st = check_bias(ctx, S4D_MBCONV_B3, p->m, &p->has_b3)) != S4D_OK)
        return st;

    int64_t s[2] = {1, 1}, pads[4] = {0, 0, 0, 0};
    if (ints_attr(ctx, "dw_strides", 2, s) < 0)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "dw_strides must hold 2 values");
    if (s[0] != s[1] || (s[0] != 1 && s[0] != 2))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "dw_strides [%lld, %lld]: must be [1, 1] or [2, 2]",
                            (long long)s[0], (long long)s[1]);
    p->stride = s[0];
    if (ints_attr(ctx, "dw_pads", 4, pads) < 0)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "dw_pads must hold 4 values (top, left, bottom, right)");
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0 || pads[i] >= p->k)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "dw_pads [%lld, %lld, %lld, %lld]: each must be 0 to K-1 = %lld",
                                (long long)pads[0], (long long)pads[1], (long long)pads[2],
                                (long long)pads[3], (long long)(p->k - 1));
    p->pad_top = pads[0];
    p->pad_left = pads[1];
    p->pad_bottom = pads[2];
    p->pad_right = pads[3];
    /* Pads are below K, sizes below 2^50: no overflow. */
    int64_t ph = p->h + p->pad_top + p->pad_bottom, pw = p->w + p->pad_left + p->pad_right;
    if (ph < p->k || pw < p->k)
        return s4d_op_error(ctx, S4D_ERR_SHAPE,
                            "the padded input %lld x %lld is smaller than the %lld x %lld kernel",
                            (long long)ph, (long long)pw, (long long)p->k, (long long)p->k);
    p->ho = (ph - p->k) / p->stride + 1;
    p->wo = (pw - p->k) / p->stride + 1;

    p->has_z = s4d_host_has_input(ctx, S4D_MBCONV_Z);
    if (p->has_z) {
        const int64_t d[4] = {p->n, p->m, p->ho, p->wo};
        if ((st = check_4d(ctx, S4D_MBCONV_Z, d, "the output's shape [N][M][HO][WO]")) != S4D_OK)
            return st;
    }
    static const char *const prefixes[3] = {"expand_", "dw_", ""};
    for (int i = 0; i < 3; i++)
        if ((st = s4d_conv_act_parse(ctx, prefixes[i], 1, &p->act[i], &p->alpha[i], &p->beta[i])) != S4D_OK)
            return st;
    /* The workspace (e and d of one image) must be addressable. */
    int64_t e_elems = 0, d_elems, total;
    if ((p->has_expand && (s4d_mul_i64(p->mid, p->h, &e_elems) || s4d_mul_i64(e_elems, p->w, &e_elems))) ||
        s4d_mul_i64(p->mid, p->ho, &d_elems) || s4d_mul_i64(d_elems, p->wo, &d_elems) ||
        s4d_add_i64(e_elems, d_elems, &total) || (uint64_t)total > S4D_MAX_TENSOR_BYTES / sizeof(float))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "the expanded image (MID %lld of %lld x %lld) is too large",
                            (long long)p->mid, (long long)p->h, (long long)p->w);
    return S4D_OK;
}

static s4d_status mbc_get(const s4d_op_ctx *ctx, mbc_params *p)
{
    if (ctx->params) {
        *p = *(const mbc_params *)ctx->params;
        return S4D_OK;
    }
    return mbc_parse((s4d_op_ctx *)ctx, p);
}

static s4d_status mbc_infer(s4d_op_ctx *ctx)
{
    mbc_params p;
    s4d_status st = mbc_parse(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(mbc_params *)ctx->params = p;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = S4D_DTYPE_FLOAT32;
    y->rank = 4;
    y->dims[0] = p.n;
    y->dims[1] = p.m;
    y->dims[2] = p.ho;
    y->dims[3] = p.wo;
    return S4D_OK;
}

static size_t ws_floats(const mbc_params *p)
{
    return (size_t)((p->has_expand ? p->mid * p->h * p->w : 0) + p->mid * p->ho * p->wo);
}

static size_t mbc_ws(const s4d_op_ctx *ctx)
{
    mbc_params p;
    if (mbc_get(ctx, &p) != S4D_OK)
        return 0;
    return sizeof(float) * ws_floats(&p);
}

/* One image's three layers; each stage runs over channels [begin, end). */
typedef struct mbc_job {
    const mbc_params *p;
    const float *x, *w1, *b1, *w2, *b2, *w3, *b3, *z;
    float *e, *d, *y;
} mbc_job;

/* out[q] = act(sum over j ascending of w[j] * in[j][q] from 0, + b, + z[q]) for q < len. */
static void pointwise_row(float *out, int64_t len, const float *w, const float *in, int64_t nin,
                          const float *b, const float *z, int act, float alpha, float beta)
{
    for (int64_t q = 0; q < len; q++)
        out[q] = 0.0f;
    for (int64_t j = 0; j < nin; j++) {
        const float wj = w[j], *row = in + j * len;
        for (int64_t q = 0; q < len; q++)
            out[q] = fmaf(wj, row[q], out[q]);
    }
    for (int64_t q = 0; q < len; q++) {
        float v = out[q];
        if (b)
            v += *b;
        if (z)
            v += z[q];
        out[q] = s4d_conv_act_apply(act, alpha, beta, v);
    }
}

static void expand_range(void *arg, int64_t begin, int64_t end)
{
    const mbc_job *j = arg;
    const mbc_params *p = j->p;
    const int64_t hw = p->h * p->w;
    for (int64_t c = begin; c < end; c++)
        pointwise_row(j->e + c * hw, hw, j->w1 + c * p->c, j->x, p->c, j->b1 ? j->b1 + c : NULL, NULL,
                      p->act[0], p->alpha[0], p->beta[0]);
}

static void depthwise_range(void *arg, int64_t begin, int64_t end)
{
    const mbc_job *j = arg;
    const mbc_params *p = j->p;
    const int64_t k = p->k;
    for (int64_t c = begin; c < end; c++) {
        const float *in = j->e + c * p->h * p->w, *wc = j->w2 + c * k * k;
        float *out = j->d + c * p->ho * p->wo;
        for (int64_t oy = 0; oy < p->ho; oy++)
            for (int64_t ox = 0; ox < p->wo; ox++) {
                float acc = 0.0f;
                for (int64_t ky = 0; ky < k; ky++) {
                    int64_t iy = oy * p->stride - p->pad_top + ky;
                    if (iy < 0 || iy >= p->h)
                        continue;
                    for (int64_t kx = 0; kx < k; kx++) {
                        int64_t ix = ox * p->stride - p->pad_left + kx;
                        if (ix >= 0 && ix < p->w)
                            acc = fmaf(wc[ky * k + kx], in[iy * p->w + ix], acc);
                    }
                }
                if (j->b2)
                    acc += j->b2[c];
                out[oy * p->wo + ox] = s4d_conv_act_apply(p->act[1], p->alpha[1], p->beta[1], acc);
            }
    }
}

static void project_range(void *arg, int64_t begin, int64_t end)
{
    const mbc_job *j = arg;
    const mbc_params *p = j->p;
    const int64_t howo = p->ho * p->wo;
    for (int64_t o = begin; o < end; o++)
        pointwise_row(j->y + o * howo, howo, j->w3 + o * p->mid, j->d, p->mid, j->b3 ? j->b3 + o : NULL,
                      j->z ? j->z + o * howo : NULL, p->act[2], p->alpha[2], p->beta[2]);
}

/* Channels per chunk: about 64 thousand multiply-adds. */
static int64_t grain(int64_t per_channel)
{
    return per_channel >= 65536 ? 1 : 65536 / (per_channel > 0 ? per_channel : 1);
}

static s4d_status mbc_run(s4d_op_ctx *ctx)
{
    mbc_params p;
    s4d_status st = mbc_get(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->workspace_size < sizeof(float) * ws_floats(&p) || (ws_floats(&p) && !ctx->workspace))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes, %zu needed", ctx->workspace_size,
                            sizeof(float) * ws_floats(&p));
    const s4d_tensor *in = ctx->inputs;
    mbc_job j = {&p};
    j.w1 = p.has_expand ? in[S4D_MBCONV_W1].data : NULL;
    j.b1 = p.has_b1 ? in[S4D_MBCONV_B1].data : NULL;
    j.w2 = in[S4D_MBCONV_W2].data;
    j.b2 = p.has_b2 ? in[S4D_MBCONV_B2].data : NULL;
    j.w3 = in[S4D_MBCONV_W3].data;
    j.b3 = p.has_b3 ? in[S4D_MBCONV_B3].data : NULL;
    float *ws = ctx->workspace;
    const int64_t hw = p.h * p.w, howo = p.ho * p.wo;
    j.d = ws + (p.has_expand ? p.mid * hw : 0);
    for (int64_t n = 0; n < p.n; n++) {
        j.x = (const float *)in[S4D_MBCONV_X].data + n * p.c * hw;
        j.z = p.has_z ? (const float *)in[S4D_MBCONV_Z].data + n * p.m * howo : NULL;
        j.y = (float *)ctx->outputs[0].data + n * p.m * howo;
        j.e = p.has_expand ? ws : (float *)j.x; /* read only when there is no expand layer */
        if (p.has_expand)
            s4d_parallel_for(ctx->pool, p.mid, grain(p.c * hw), expand_range, &j);
        s4d_parallel_for(ctx->pool, p.mid, grain(p.k * p.k * howo), depthwise_range, &j);
        s4d_parallel_for(ctx->pool, p.m, grain(p.mid * howo), project_range, &j);
    }
    return S4D_OK;
}

static const s4d_attr_spec mbc_attrs[] = {
    {"expand_activation", S4D_ATTR_STRING}, {"expand_activation_alpha", S4D_ATTR_FLOAT},
    {"expand_activation_beta", S4D_ATTR_FLOAT}, {"dw_activation", S4D_ATTR_STRING},
    {"dw_activation_alpha", S4D_ATTR_FLOAT}, {"dw_activation_beta", S4D_ATTR_FLOAT},
    {"activation", S4D_ATTR_STRING}, {"activation_alpha", S4D_ATTR_FLOAT},
    {"activation_beta", S4D_ATTR_FLOAT}, {"dw_strides", S4D_ATTR_INTS},
    {"dw_pads", S4D_ATTR_INTS}, {NULL}};
const s4d_op_schema s4d_op_fused_mbconv = {"s4d", "FusedMBConv", 1, mbc_infer, mbc_ws, mbc_run,
                                           sizeof(mbc_params), 0, mbc_attrs};
