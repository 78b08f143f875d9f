/*
 * The inverted residual block of mobile networks  =>  s4d::FusedMBConv
 *
 *   [expand 1x1] -> depthwise k x k -> project 1x1 [+ residual]
 *
 * each a Conv, FusedConv or FusedConvAct (the earlier fusions have folded
 * BatchNormalization, the activations and the residual Add into them)
 * becomes one node that the CPU backend runs without writing the expanded
 * tensors to memory (src/backend/cpu/mbconv_kernel.c). The expand layer:
 * 1x1, stride 1, unpadded, one group, no residual. The depthwise layer: as
 * many groups as input and output channels, a square kernel of at most 7,
 * strides 1 or 2 both ways, dilation 1, each pad below the kernel, no
 * residual. The project layer: 1x1, stride 1, unpadded, one group, with or
 * without the residual. Without a matching expand layer (MobileNetV2's first
 * block, ShuffleNetV2's stride-2 branch) the depthwise and project layers fuse
 * alone. Float32, constant weights and biases, each intermediate read only by
 * the next layer and not a graph output, all three on one device whose
 * backend has the kernel. Pads and strides come from the layers' inferred
 * params, so auto_pad is already resolved.
 *
 * S4D_FUSE_MBCONV=0 in the environment turns the pass off (to compare fused
 * with unfused engines).
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dense.h"
#include "ops/extra.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

#define OOM "out of memory in the inverted residual block fusion"
#define MB_MAX_K 7

/* A float32 2-D convolution layer as the pass sees it. */
typedef struct mb_conv {
    const s4d_conv_params *p;
    int act;
    float alpha, beta;
} mb_conv;

/* Node ni as a Conv, FusedConv or FusedConvAct of float32 with constant weights (and bias),
   dilation 1 and no residual unless allow_z; 0 when it is not one. */
static int as_conv(const s4d_ir_graph *g, int ni, int allow_z, mb_conv *out)
{
    if (ni < 0 || ni >= g->num_nodes)
        return 0;
    const s4d_ir_node *n = &g->nodes[ni];
    if (n->dead || n->kind != S4D_LAYER_OP || n->num_outputs != 1 || n->outputs[0] < 0 ||
        !n->params || !n->schema)
        return 0;
    int conv = s4d_ir_is_onnx_domain(n->domain) && strcmp(n->op_type, "Conv") == 0;
    int s4d = strcmp(n->domain, "s4d") == 0;
    int fc = s4d && strcmp(n->op_type, "FusedConv") == 0;
    int fca = s4d && strcmp(n->op_type, "FusedConvAct") == 0;
    size_t want = fca ? sizeof(s4d_conv_act_params) : sizeof(s4d_conv_params);
    if ((!conv && !fc && !fca) || n->schema->params_size != want || n->num_inputs < 2)
        return 0;
    const s4d_conv_params *p = n->params;
    if (p->dtype != S4D_DTYPE_FLOAT32 || p->g.nsp != 2 || p->g.dil[1] != 1 || p->g.dil[2] != 1 ||
        (p->has_z && !allow_z))
        return 0;
    if (!s4d_fuse_const(g, n->inputs[1]) || (p->has_bias && !s4d_fuse_const(g, n->inputs[2])))
        return 0;
    out->p = p;
    out->act = p->relu ? S4D_CONV_ACT_RELU : S4D_CONV_ACT_NONE;
    out->alpha = out->beta = 0.0f;
    if (fca) {
        const s4d_conv_act_params *a = n->params;
        if (!s4d_conv_act_name(a->act))
            return 0;
        out->act = a->act;
        out->alpha = a->alpha;
        out->beta = a->beta;
    }
    return 1;
}

/* 1x1, stride 1, no padding, one group. */
static int is_pointwise(const s4d_conv_params *p)
{
    const s4d_conv_geom *g = &p->g;
    return p->group == 1 && g->k[1] == 1 && g->k[2] == 1 && g->stride[1] == 1 && g->stride[2] == 1 &&
           g->pad_b[1] == 0 && g->pad_b[2] == 0 && g->pad_e[1] == 0 && g->pad_e[2] == 0;
}

/* The depthwise layers the fused kernel covers, with FusedMBConv's output size. */
static int is_depthwise(const s4d_conv_params *p)
{
    const s4d_conv_geom *g = &p->g;
    int64_t k = g->k[1], s = g->stride[1];
    if (p->group != p->c || p->c != p->m || p->c < 1 || k < 1 || k > MB_MAX_K || g->k[2] != k ||
        (s != 1 && s != 2) || g->stride[2] != s)
        return 0;
    if (g->pad_b[1] >= k || g->pad_b[2] >= k || g->pad_e[1] >= k || g->pad_e[2] >= k)
        return 0;
    int64_t ph = g->img[1] + g->pad_b[1] + g->pad_e[1], pw = g->img[2] + g->pad_b[2] + g->pad_e[2];
    return ph >= k && pw >= k && (ph - k) / s + 1 == g->grid[1] && (pw - k) / s + 1 == g->grid[2];
}

/* v is float32, read once (by node reader alone, on its device) and not a graph output. */
static int single_use(const s4d_ir_graph *g, const int *uses, int v, int reader)
{
    return v >= 0 && uses[v] == 1 && g->values[v].t.dtype == S4D_DTYPE_FLOAT32 &&
           !g->values[v].is_output && s4d_fuse_consumer(g, v) == reader;
}

#define MB_NUM_ATTRS 11

/* The fused node's attributes: the three activations, the depthwise strides and pads. */
static int make_attrs(const mb_conv *layers[3], s4d_attr *a)
{
    static const char *const names[3][3] = {
        {"expand_activation", "expand_activation_alpha", "expand_activation_beta"},
        {"dw_activation", "dw_activation_alpha", "dw_activation_beta"},
        {"activation", "activation_alpha", "activation_beta"},
    };
    int k = 0, bad = 0;
    for (int i = 0; i < 3; i++) {
        const mb_conv *l = layers[i];
        bad |= s4d_fuse_attr_string(&a[k++], names[i][0], l ? s4d_conv_act_name(l->act) : "");
        bad |= s4d_fuse_attr_float(&a[k++], names[i][1], l ? l->alpha : 0.0f);
        bad |= s4d_fuse_attr_float(&a[k++], names[i][2], l ? l->beta : 0.0f);
    }
    const s4d_conv_geom *dg = &layers[1]->p->g;
    const int64_t strides[2] = {dg->stride[1], dg->stride[2]};
    const int64_t pads[4] = {dg->pad_b[1], dg->pad_b[2], dg->pad_e[1], dg->pad_e[2]};
    bad |= s4d_fuse_attr_ints(&a[k++], "dw_strides", strides, 2);
    bad |= s4d_fuse_attr_ints(&a[k++], "dw_pads", pads, 4);
    return bad ? -1 : 0;
}

/*
 * Fuses the chain whose depthwise layer is node di (expand ei or -1, project pi): the fused node
 * takes the project's place in the node order (every input, the residual included, is ready
 * there) and the depthwise node's name.
 */
static s4d_status rewrite(s4d_ir_graph *g, int ei, int di, int pi, const mb_conv *layers[3],
                          char *err, size_t errsz)
{
    const s4d_ir_node *e = ei >= 0 ? &g->nodes[ei] : NULL, *d = &g->nodes[di], *p = &g->nodes[pi];
    int in[S4D_MBCONV_NUM_INPUTS];
    for (int k = 0; k < S4D_MBCONV_NUM_INPUTS; k++)
        in[k] = -1;
    in[S4D_MBCONV_X] = e ? e->inputs[0] : d->inputs[0];
    if (e) {
        in[S4D_MBCONV_W1] = e->inputs[1];
        in[S4D_MBCONV_B1] = layers[0]->p->has_bias ? e->inputs[2] : -1;
    }
    in[S4D_MBCONV_W2] = d->inputs[1];
    in[S4D_MBCONV_B2] = layers[1]->p->has_bias ? d->inputs[2] : -1;
    in[S4D_MBCONV_W3] = p->inputs[1];
    in[S4D_MBCONV_B3] = layers[2]->p->has_bias ? p->inputs[2] : -1;
    in[S4D_MBCONV_Z] = layers[2]->p->has_z ? p->inputs[3] : -1;
    int y = p->outputs[0];

    s4d_attr attrs[MB_NUM_ATTRS];
    memset(attrs, 0, sizeof attrs);
    int *inputs = malloc(sizeof in);
    if (!inputs || make_attrs(layers, attrs) != 0) {
        free(inputs);
        for (int k = 0; k < MB_NUM_ATTRS; k++)
            s4d_attr_clear(&attrs[k]);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    }
    memcpy(inputs, in, sizeof in);
    /* The layers' params point into the nodes: done with them before the nodes move. */
    s4d_ir_node dn = g->nodes[di];
    g->nodes[di] = g->nodes[pi];
    g->nodes[pi] = dn;
    g->nodes[di].dead = 1;
    if (ei >= 0)
        g->nodes[ei].dead = 1;
    s4d_ir_node *f = &g->nodes[pi];
    free(f->inputs);
    f->inputs = inputs;
    f->num_inputs = S4D_MBCONV_NUM_INPUTS;
    f->outputs[0] = y;
    for (int k = 0; k < f->num_attrs; k++)
        s4d_attr_clear(&f->attrs[k]);
    free(f->attrs);
    f->attrs = malloc(sizeof attrs);
    if (!f->attrs) {
        f->num_attrs = 0;
        for (int k = 0; k < MB_NUM_ATTRS; k++)
            s4d_attr_clear(&attrs[k]);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    }
    memcpy(f->attrs, attrs, sizeof attrs);
    f->num_attrs = MB_NUM_ATTRS;
    if (s4d_fuse_set_op(f, "s4d", "FusedMBConv", 1) != 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    return s4d_fuse_reinfer(g, pi, err, errsz);
}

s4d_status s4d_pass_fuse_mbconv(s4d_ir_graph *g, char *err, size_t errsz)
{
    if (s4d_fuse_switched_off("S4D_FUSE_MBCONV") || g->num_nodes == 0)
        return S4D_OK;
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    s4d_status st = S4D_OK;
    for (int di = 0; di < g->num_nodes && st == S4D_OK; di++) {
        mb_conv dw, ex, pr;
        if (!as_conv(g, di, 0, &dw) || !is_depthwise(dw.p))
            continue;
        const s4d_ir_node *d = &g->nodes[di];
        int dv = d->outputs[0], pi = s4d_fuse_consumer(g, dv);
        if (!single_use(g, uses, dv, pi) || !as_conv(g, pi, 1, &pr) || !is_pointwise(pr.p) ||
            g->nodes[pi].inputs[0] != dv || g->nodes[pi].device != d->device ||
            !s4d_fuse_can(g, pi, "s4d", "FusedMBConv", 1))
            continue;
        /* The expand layer, when the depthwise input comes from one that nothing else reads. */
        int ev = d->inputs[0], ei = ev >= 0 ? g->values[ev].producer : -1;
        if (!(single_use(g, uses, ev, di) && as_conv(g, ei, 0, &ex) && is_pointwise(ex.p) &&
              g->nodes[ei].outputs[0] == ev && g->nodes[ei].device == d->device && ex.p->m == dw.p->c))
            ei = -1;
        const mb_conv *layers[3] = {ei >= 0 ? &ex : NULL, &dw, &pr};
        st = rewrite(g, ei, di, pi, layers, err, errsz);
    }
    free(uses);
    return st;
}
