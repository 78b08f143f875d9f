/*
 * s4d::FusedConvAct (built by the fusion pass of src/passes/fuse_conv_act_more.c,
 * never in a user's model): s4d::FusedConv (Conv + bias + residual Z) followed
 * by an activation other than Relu, so that the CPU convolution applies it
 * while the output is in cache:
 *
 *   activation  "Clip" (activation_alpha = min, activation_beta = max),
 *               "LeakyRelu" (alpha), "Sigmoid", "Silu" (x * sigmoid(x), the
 *               Swish of EfficientNet, exported as Sigmoid + Mul),
 *               "HardSigmoid" (alpha, beta), "HardSwish", "Relu"
 *
 * The convolution itself is FusedConv's: infer and run call its schema with
 * the activation attributes left out, and its params lead this op's.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/extra.h"

#define FCA_MAX_ATTRS 32

static const struct {
    const char *name;
    s4d_conv_act act;
} fca_names[] = {
    {"Relu", S4D_CONV_ACT_RELU},       {"Clip", S4D_CONV_ACT_CLIP},
    {"LeakyRelu", S4D_CONV_ACT_LEAKY_RELU}, {"Sigmoid", S4D_CONV_ACT_SIGMOID},
    {"Silu", S4D_CONV_ACT_SILU},       {"HardSigmoid", S4D_CONV_ACT_HARD_SIGMOID},
    {"HardSwish", S4D_CONV_ACT_HARD_SWISH},
};

typedef struct fca_call {
    s4d_op_ctx c;
    s4d_attr attrs[FCA_MAX_ATTRS];
} fca_call;

/* FusedConv's schema and a context without the activation attributes. */
static s4d_status fca_inner(s4d_op_ctx *ctx, fca_call *fc)
{
    const s4d_op_schema *s = s4d_op_find_schema("s4d", "FusedConv", 1);
    if (!s)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "no s4d::FusedConv schema to build on");
    if (ctx->num_attrs > FCA_MAX_ATTRS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "%d attributes, at most %d", ctx->num_attrs,
                            FCA_MAX_ATTRS);
    fc->c = *ctx;
    fc->c.schema = s;
    fc->c.opset = 1;
    fc->c.attrs = fc->attrs;
    fc->c.num_attrs = 0;
    for (int i = 0; i < ctx->num_attrs; i++) {
        const char *n = ctx->attrs[i].name ? ctx->attrs[i].name : "";
        if (strncmp(n, "activation", 10) != 0)
            fc->attrs[fc->c.num_attrs++] = ctx->attrs[i];
    }
    return S4D_OK;
}

s4d_status s4d_conv_act_parse(s4d_op_ctx *ctx, const char *prefix, int allow_none, int32_t *act,
                              float *alpha, float *beta)
{
    char name[64], name_a[80], name_b[80];
    snprintf(name, sizeof name, "%sactivation", prefix);
    snprintf(name_a, sizeof name_a, "%s_alpha", name);
    snprintf(name_b, sizeof name_b, "%s_beta", name);
    const char *a = s4d_op_attr_string(ctx, name, "");
    if (allow_none && a[0] == '\0') {
        *act = S4D_CONV_ACT_NONE;
        *alpha = *beta = 0.0f;
        return S4D_OK;
    }
    size_t i = 0, n = sizeof fca_names / sizeof fca_names[0];
    while (i < n && strcmp(fca_names[i].name, a) != 0)
        i++;
    if (i == n)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "%s '%s' (%sRelu, Clip, LeakyRelu, Sigmoid, Silu, HardSigmoid, "
                            "HardSwish)",
                            name, a, allow_none ? "\"\" for none, " : "");
    *act = fca_names[i].act;
    float da = *act == S4D_CONV_ACT_LEAKY_RELU ? 0.01f : *act == S4D_CONV_ACT_HARD_SIGMOID ? 0.2f
               : *act == S4D_CONV_ACT_CLIP     ? -INFINITY
                                               : 0.0f;
    float db = *act == S4D_CONV_ACT_HARD_SIGMOID ? 0.5f : *act == S4D_CONV_ACT_CLIP ? INFINITY : 0.0f;
    *alpha = s4d_op_attr_float(ctx, name_a, da);
    *beta = s4d_op_attr_float(ctx, name_b, db);
    if (*act == S4D_CONV_ACT_CLIP && !(*alpha <= *beta))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "%s: Clip range [%g, %g] is empty", name,
                            (double)*alpha, (double)*beta);
    return S4D_OK;
}

const char *s4d_conv_act_name(int act)
{
    if (act == S4D_CONV_ACT_NONE)
        return "";
    for (size_t i = 0; i < sizeof fca_names / sizeof fca_names[0]; i++)
        if ((int)fca_names[i].act == act)
            return fca_names[i].name;
    return NULL;
}

static s4d_status fca_act(s4d_op_ctx *ctx, s4d_conv_act_params *p)
{
    return s4d_conv_act_parse(ctx, "", 0, &p->act, &p->alpha, &p->beta);
}

static s4d_status fca_infer(s4d_op_ctx *ctx)
{
    s4d_conv_act_params p;
    memset(&p, 0, sizeof p);
    s4d_status st = fca_act(ctx, &p);
    if (st != S4D_OK)
        return st;
    fca_call fc;
    if ((st = fca_inner(ctx, &fc)) != S4D_OK)
        return st;
    if (fc.c.schema->params_size > sizeof(s4d_conv_params))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "FusedConv's params outgrew s4d_conv_params");
    fc.c.params = ctx->params ? ctx->params : &p.conv;
    if ((st = fc.c.schema->infer(&fc.c)) != S4D_OK)
        return st;
    if (ctx->params) {
        s4d_conv_act_params *out = ctx->params;
        out->act = p.act;
        out->alpha = p.alpha;
        out->beta = p.beta;
    }
    return S4D_OK;
}

static size_t fca_ws(const s4d_op_ctx *ctx)
{
    fca_call fc;
    if (fca_inner((s4d_op_ctx *)ctx, &fc) != S4D_OK || !fc.c.schema->workspace_size)
        return 0;
    return fc.c.schema->workspace_size(&fc.c);
}

float s4d_conv_act_apply(int act, float alpha, float beta, float v)
{
    double x = v, t;
    switch ((s4d_conv_act)act) {
    case S4D_CONV_ACT_NONE: return v;
    case S4D_CONV_ACT_RELU: return v > 0.0f || v != v ? v : 0.0f;
    case S4D_CONV_ACT_CLIP: return v < alpha ? alpha : v > beta ? beta : v;
    case S4D_CONV_ACT_LEAKY_RELU: return v < 0.0f ? alpha * v : v;
    case S4D_CONV_ACT_SIGMOID: return (float)(1.0 / (1.0 + exp(-x)));
    case S4D_CONV_ACT_SILU: return (float)(x / (1.0 + exp(-x)));
    case S4D_CONV_ACT_HARD_SIGMOID:
        t = (double)alpha * x + (double)beta;
        return (float)(t < 0 ? 0 : t > 1 ? 1 : t);
    case S4D_CONV_ACT_HARD_SWISH:
        t = x / 6.0 + 0.5;
        return (float)(x * (t < 0 ? 0 : t > 1 ? 1 : t));
    }
    return v;
}

static s4d_status fca_run(s4d_op_ctx *ctx)
{
    s4d_conv_act_params local;
    s4d_conv_act_params *p = ctx->params;
    if (!p) {
        memset(&local, 0, sizeof local);
        s4d_status st = fca_act(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    fca_call fc;
    s4d_status st = fca_inner(ctx, &fc);
    if (st != S4D_OK)
        return st;
    fc.c.params = ctx->params ? ctx->params : NULL;
    if ((st = fc.c.schema->run(&fc.c)) != S4D_OK)
        return st;
    float *y = ctx->outputs[0].data;
    int64_t n = s4d_tensor_numel(&ctx->outputs[0]);
    for (int64_t i = 0; i < n; i++)
        y[i] = s4d_conv_act_apply(p->act, p->alpha, p->beta, y[i]);
    return S4D_OK;
}

static const s4d_attr_spec fca_attrs[] = {
    {"auto_pad", S4D_ATTR_STRING}, {"dilations", S4D_ATTR_INTS},         {"group", S4D_ATTR_INT},
    {"kernel_shape", S4D_ATTR_INTS}, {"pads", S4D_ATTR_INTS},            {"strides", S4D_ATTR_INTS},
    {"activation", S4D_ATTR_STRING}, {"activation_alpha", S4D_ATTR_FLOAT}, {"activation_beta", S4D_ATTR_FLOAT},
    {NULL}};
const s4d_op_schema s4d_op_fused_conv_act = {"s4d", "FusedConvAct", 1, fca_infer, fca_ws, fca_run,
                                             sizeof(s4d_conv_act_params), 0, fca_attrs};
