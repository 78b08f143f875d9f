/*
 * Channels-last convolutions (docs/cuda-backend.md, "Channels-last
 * convolutions"). cuDNN's tensor-core convolutions (TF32, float16) work on
 * NHWC; given NCHW tensors they convert in and out of it inside every call,
 * which costs a 3x3 layer of the v3 backbone 30-45% of its time on an H200.
 * This pass runs after the fusions (which match the model's NCHW chains) and
 * rewrites each 2-D Conv or s4d::FusedConv whose device runs the NHWC form:
 *
 *   X -> Transpose(0,2,3,1) -> FusedConv(layout NHWC, W as [M, kh, kw, C/g],
 *        Z through the same Transpose) -> Transpose(0,3,1,2) -> Y
 *
 * so every value the rest of the network sees keeps its layout and shape.
 * Then the Transposes are thinned out, each rewrite leaving outputs bit for
 * bit what they were (a Transpose only moves elements):
 *   - Transpose(Transpose(x)) that cancel: s4d_pass_simplify_movement, which
 *     the pass runs again here, removes them, so that between two
 *     convolutions (a ResNet's whole body) nothing is left;
 *   - Resize(Transpose(x)) -> Transpose(Resize'(x)), with the scales (or
 *     sizes) permuted: the FPN's upsampling then runs channels-last and the
 *     Transpose meets the next convolution's and cancels;
 *   - MaxPool(Transpose(x)) -> Transpose(s4d::MaxPool(x)), the pool
 *     channels-last (a ResNet's stem);
 *   - an element-wise node (an activation, an Add, a FusedPointwise) whose
 *     inputs are Transposes of one perm (or scalars) runs on their inputs and
 *     one Transpose follows it: activations between convolutions that no
 *     fusion took (ReLU6, SiLU) cost no Transposes;
 *   - Transpose(Reshape(Transpose(x))) whose net effect keeps the element
 *     order -> Reshape(x), a view: the export's flattening of the feature
 *     maps to [.., H*W, C] reads the channels-last maps as they are.
 * Convolutions the device cannot run channels-last (asymmetric padding on
 * CUDA, non-constant weights, 1-D and 3-D) keep NCHW.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "ops/dense.h"
#include "ops/movement.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

static const int64_t TO_NHWC[4] = {0, 2, 3, 1}, TO_NCHW[4] = {0, 3, 1, 2};

typedef struct lay {
    s4d_ir_graph *g;
    int any_device;           /* 0: convolutions on host-memory devices (a CPU fallback) keep NCHW */
    int first;                /* nodes from here on were appended by this sweep */
    s4d_fuse_anchor *anchors; /* per appended node */
    int num_anchors, cap_anchors;
    int made;                 /* values added, for unique names */
    char *err;
    size_t errsz;
} lay;

static s4d_status oom(lay *l)
{
    return s4d_fmt_err(l->err, l->errsz, S4D_ERR_NO_MEMORY, "out of memory in the channels-last pass");
}

static int is_s4d_op(const s4d_ir_graph *g, int ni, const char *op_type)
{
    const s4d_ir_node *n = &g->nodes[ni];
    return !n->dead && n->kind == S4D_LAYER_OP && strcmp(n->domain, "s4d") == 0 && strcmp(n->op_type, op_type) == 0;
}

static const s4d_attr *node_attr(const s4d_ir_node *n, const char *name)
{
    for (int i = 0; i < n->num_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

/* A new activation value of dtype dt and the given dims. */
static int add_activation(lay *l, const char *base, const char *what, s4d_dtype dt, int rank, const int64_t *dims)
{
    char name[600];
    snprintf(name, sizeof name, "%s/%s.nhwc%d", base, what, l->made++);
    int v = s4d_ir_add_value(l->g, name, S4D_VALUE_ACTIVATION);
    if (v < 0)
        return -1;
    s4d_ir_value *val = &l->g->values[v];
    val->t.dtype = dt;
    val->t.rank = rank;
    memcpy(val->t.dims, dims, sizeof(int64_t) * (size_t)rank);
    val->shape_known = 1;
    return v;
}

/* A new constant taking `data` (malloc'd; freed on failure). */
static int add_constant(lay *l, const char *base, const char *what, s4d_dtype dt, int rank, const int64_t *dims,
                        void *data)
{
    char name[600];
    snprintf(name, sizeof name, "%s/%s.nhwc%d", base, what, l->made++);
    int v = data ? s4d_ir_add_value(l->g, name, S4D_VALUE_CONST) : -1;
    if (v < 0) {
        free(data);
        return -1;
    }
    s4d_ir_value *val = &l->g->values[v];
    val->t.dtype = dt;
    val->t.rank = rank;
    memcpy(val->t.dims, dims, sizeof(int64_t) * (size_t)rank);
    val->t.data = data;
    val->shape_known = 1;
    return v;
}

/* The elements of a 4-D constant permuted by perm (y dims[i] = x dims[perm[i]]), any element size. */
static void *permute4(const s4d_tensor *t, const int64_t *perm, int64_t *out_dims)
{
    const size_t es = s4d_dtype_size(t->dtype);
    int64_t st[4], s = 1;
    for (int d = 3; d >= 0; d--) {
        st[d] = s;
        s *= t->dims[d];
    }
    for (int d = 0; d < 4; d++)
        out_dims[d] = t->dims[perm[d]];
    char *dst = malloc(es * (size_t)(s > 0 ? s : 1));
    if (!dst)
        return NULL;
    const char *src = t->data;
    size_t k = 0;
    for (int64_t a = 0; a < out_dims[0]; a++)
        for (int64_t b = 0; b < out_dims[1]; b++)
            for (int64_t c = 0; c < out_dims[2]; c++)
                for (int64_t d = 0; d < out_dims[3]; d++, k++) {
                    const int64_t at = a * st[perm[0]] + b * st[perm[1]] + c * st[perm[2]] + d * st[perm[3]];
                    memcpy(dst + k * es, src + (size_t)at * es, es);
                }
    return dst;
}

/*
 * Appends a Transpose src -> dst (perm of rank 4) on the device of node `at`, placed before
 * (after = 0) or after it; dst gets its shape from inference. Returns the node or -1.
 */
static int add_transpose(lay *l, int at, int after, const char *suffix, int src, int dst, const int64_t *perm)
{
    s4d_ir_graph *g = l->g;
    char name[700];
    snprintf(name, sizeof name, "%s/%s", g->nodes[at].name, suffix);
    const s4d_device dev = g->nodes[at].device;
    int opset = s4d_ir_opset_version(g, "");
    int idx = s4d_ir_add_node(g);
    if (idx < 0 || s4d_fuse_push_anchor(&l->anchors, &l->num_anchors, &l->cap_anchors, at, after) != 0)
        return -1;
    s4d_ir_node *n = &g->nodes[idx];
    n->name = s4d_strdup(name);
    n->domain = s4d_strdup("");
    n->op_type = s4d_strdup("Transpose");
    n->opset = opset < 13 ? 13 : opset;
    n->kind = S4D_LAYER_OP;
    n->device = dev;
    n->schema = s4d_op_find_schema("", "Transpose", n->opset);
    n->attrs = calloc(1, sizeof *n->attrs);
    n->inputs = malloc(sizeof(int));
    n->outputs = malloc(sizeof(int));
    if (!n->name || !n->domain || !n->op_type || !n->schema || !n->attrs || !n->inputs || !n->outputs ||
        s4d_fuse_attr_ints(&n->attrs[0], "perm", perm, 4) != 0)
        return -1;
    n->num_attrs = 1;
    n->num_inputs = n->num_outputs = 1;
    n->inputs[0] = src;
    n->outputs[0] = dst;
    return idx;
}

/* The device's own answer, for a node the pass made: refused nodes are an internal error. */
static s4d_status finish_node(lay *l, int ni)
{
    return s4d_fuse_reinfer(l->g, ni, l->err, l->errsz);
}

/*
 * Node ni reading ins[0 .. num_inputs) and writing out as its first output: inferred again and
 * offered to its device's kernel. *ok 0 when either refuses; the node is then put back as it
 * was (and inferred as before).
 */
static s4d_status retarget(lay *l, int ni, const int *ins, int out, int *ok)
{
    s4d_ir_graph *g = l->g;
    s4d_ir_node *n = &g->nodes[ni];
    int old[8], old_out = n->outputs[0];
    if (n->num_inputs > 8)
        return (*ok = 0), S4D_OK;
    memcpy(old, n->inputs, sizeof(int) * (size_t)n->num_inputs);
    memcpy(n->inputs, ins, sizeof(int) * (size_t)n->num_inputs);
    n->outputs[0] = out;
    s4d_status st = s4d_fuse_infer_node(g, ni, l->err, l->errsz);
    char why[600];
    if (st == S4D_OK && s4d_node_supported(g, n, s4d_backend_get(n->device), why, sizeof why) != S4D_OK)
        st = S4D_ERR_UNSUPPORTED;
    *ok = st == S4D_OK;
    if (*ok)
        return S4D_OK;
    memcpy(n->inputs, old, sizeof(int) * (size_t)n->num_inputs);
    n->outputs[0] = old_out;
    if (l->errsz)
        l->err[0] = 0;
    return s4d_fuse_infer_node(g, ni, l->err, l->errsz);
}

/*
 * Whether node ni's device runs s4d::op_type (opset 1) on ins with ni's attributes and layout
 * NHWC, giving want: s4d_fuse_supported_as with the attribute list made and freed here.
 */
static s4d_status nhwc_supported(lay *l, int ni, const char *op_type, const int *ins, int nin,
                                 const s4d_tensor *want, int *ok)
{
    const s4d_ir_node *n = &l->g->nodes[ni];
    *ok = 0;
    s4d_attr *attrs = calloc((size_t)n->num_attrs + 1, sizeof *attrs);
    if (!attrs)
        return oom(l);
    int na = 0, bad = 0;
    for (int i = 0; i < n->num_attrs && !bad; i++)
        if (strcmp(n->attrs[i].name, "layout") != 0)
            bad = s4d_attr_copy(&attrs[na++], &n->attrs[i]) != 0;
    bad = bad || s4d_fuse_attr_string(&attrs[na++], "layout", "NHWC") != 0;
    s4d_status st = bad ? oom(l) : s4d_fuse_supported_as(l->g, ni, op_type, ins, nin, attrs, na, want, ok);
    for (int i = 0; i < na; i++)
        s4d_attr_clear(&attrs[i]);
    free(attrs);
    return st;
}

/* ---- the convolutions ---- */

/* Conv or FusedConv node ni as channels-last; *done when rewritten. */
static s4d_status try_conv(lay *l, int ni, int *done)
{
    s4d_ir_graph *g = l->g;
    const s4d_ir_node *n = &g->nodes[ni];
    const int fused = is_s4d_op(g, ni, "FusedConv");
    if (!fused && !s4d_fuse_is_op(g, ni, "Conv"))
        return S4D_OK;
    const s4d_conv_params *p = n->params;
    if (!p || p->nhwc || p->g.nsp != 2 || n->num_outputs != 1 || n->outputs[0] < 0)
        return S4D_OK;
    const s4d_backend *be = s4d_backend_get(n->device);
    if (!l->any_device && (!be || be->host_memory))
        return S4D_OK; /* the CPU runs channels-last through its slow host reference only */
    const s4d_tensor *w = s4d_fuse_const(g, n->inputs[1]);
    const int x = n->inputs[0], y = n->outputs[0];
    if (!w || w->rank != 4 || g->values[x].t.rank != 4)
        return S4D_OK;
    const int z = p->has_z ? n->inputs[3] : -1;
    const s4d_dtype dt = g->values[y].t.dtype;
    int64_t xd[4], yd[4], wd[4], zd[4];
    for (int d = 0; d < 4; d++) {
        xd[d] = g->values[x].t.dims[TO_NHWC[d]];
        yd[d] = g->values[y].t.dims[TO_NHWC[d]];
    }
    void *wdata = permute4(w, TO_NHWC, wd);
    if (!wdata)
        return oom(l);
    const char *base = n->name;
    int xv = add_activation(l, base, "x", g->values[x].t.dtype, 4, xd);
    int wv = xv < 0 ? (free(wdata), -1) : add_constant(l, base, "w", w->dtype, 4, wd, wdata);
    int zv = -2, yv = -1;
    if (wv >= 0 && z >= 0) {
        for (int d = 0; d < 4; d++)
            zd[d] = g->values[z].t.dims[TO_NHWC[d]];
        zv = add_activation(l, base, "z", g->values[z].t.dtype, 4, zd);
    }
    if (wv >= 0 && zv != -1)
        yv = add_activation(l, base, "y", dt, 4, yd);
    if (yv < 0)
        return oom(l);
    n = &g->nodes[ni];
    /* Would the device run it? The stand-in has the node's attributes plus the layout. */
    int ins[4] = {xv, wv, p->has_bias ? n->inputs[2] : -1, zv};
    const int nin = z >= 0 ? 4 : p->has_bias ? 3 : 2;
    int ok = 0;
    s4d_status st = nhwc_supported(l, ni, "FusedConv", ins, nin, &g->values[yv].t, &ok);
    if (st != S4D_OK || !ok)
        return st; /* the values made stay unused; the plan drops them */

    /* Rewrite: Transposes in, the node channels-last, a Transpose out to Y. */
    const int tin = add_transpose(l, ni, 0, "to_nhwc", x, xv, TO_NHWC);
    const int tz = tin >= 0 && z >= 0 ? add_transpose(l, ni, 0, "z_to_nhwc", z, zv, TO_NHWC) : -2;
    const int tout = tz != -1 ? add_transpose(l, ni, 1, "to_nchw", yv, y, TO_NCHW) : -1;
    if (tin < 0 || tz == -1 || tout < 0)
        return oom(l);
    s4d_ir_node *c = &g->nodes[ni];
    if (!fused && s4d_fuse_set_op(c, "s4d", "FusedConv", 1) != 0)
        return oom(l);
    if (s4d_fuse_add_attr_string(c, "layout", "NHWC") != 0)
        return oom(l);
    c->inputs[0] = xv;
    c->inputs[1] = wv;
    if (z >= 0)
        c->inputs[3] = zv;
    c->outputs[0] = yv;
    st = finish_node(l, tin);
    if (st == S4D_OK && tz >= 0)
        st = finish_node(l, tz);
    if (st == S4D_OK)
        st = finish_node(l, ni);
    if (st == S4D_OK)
        st = finish_node(l, tout);
    *done = st == S4D_OK;
    return st;
}

/* ---- Resize after a Transpose ---- */

/* The live Transpose (rank 4) producing value v, or -1. */
static int transpose_of(const s4d_ir_graph *g, int v)
{
    if (v < 0 || g->values[v].kind != S4D_VALUE_ACTIVATION)
        return -1;
    int t = g->values[v].producer;
    if (t < 0 || !s4d_fuse_is_op(g, t, "Transpose") || !g->nodes[t].params ||
        ((const s4d_transpose_params *)g->nodes[t].params)->rank != 4)
        return -1;
    return t;
}

/* Resize ni reading Transpose(x): resize x with permuted scales or sizes, then transpose. */
static s4d_status try_resize(lay *l, int ni, int *done)
{
    s4d_ir_graph *g = l->g;
    const s4d_ir_node *n = &g->nodes[ni];
    if (!s4d_fuse_is_op(g, ni, "Resize") || n->opset < 11 || n->num_outputs != 1 || n->num_inputs < 3 ||
        !n->params || node_attr(n, "axes") || node_attr(n, "keep_aspect_ratio_policy"))
        return S4D_OK;
    const s4d_attr *ct = node_attr(n, "coordinate_transformation_mode");
    if (ct && ct->s && strcmp(ct->s, "tf_crop_and_resize") == 0)
        return S4D_OK;
    const int t = transpose_of(g, n->inputs[0]);
    if (t < 0 || (n->inputs[1] >= 0 && s4d_tensor_numel(&g->values[n->inputs[1]].t) != 0))
        return S4D_OK;
    /* the one of scales / sizes that is given, a constant of 4 entries */
    int which = -1;
    for (int k = 2; k < n->num_inputs && k < 4; k++) {
        const s4d_tensor *c = n->inputs[k] >= 0 ? &g->values[n->inputs[k]].t : NULL;
        if (!c || (c->rank == 1 && c->dims[0] == 0))
            continue;
        if (which >= 0 || !s4d_fuse_const(g, n->inputs[k]) || c->rank != 1 || c->dims[0] != 4)
            return S4D_OK;
        which = k;
    }
    if (which < 0)
        return S4D_OK;
    const s4d_tensor *c = &g->values[n->inputs[which]].t;
    const int *perm = ((const s4d_transpose_params *)g->nodes[t].params)->perm;
    /* x = Transpose's input; Resize axis i is x's axis perm[i], so x's axis perm[i] takes entry i */
    const size_t es = s4d_dtype_size(c->dtype);
    char *cp = malloc(es * 4);
    if (!cp)
        return oom(l);
    for (int i = 0; i < 4; i++)
        memcpy(cp + (size_t)perm[i] * es, (const char *)c->data + (size_t)i * es, es);
    const int x = g->nodes[t].inputs[0], y = n->outputs[0];
    int64_t rd[4], four = 4;
    for (int i = 0; i < 4; i++)
        rd[perm[i]] = g->values[y].t.dims[i];
    int cv = add_constant(l, n->name, which == 2 ? "scales" : "sizes", c->dtype, 1, &four, cp);
    int rv = cv < 0 ? -1 : add_activation(l, g->nodes[ni].name, "resized", g->values[y].t.dtype, 4, rd);
    if (rv < 0)
        return oom(l);
    /* Would the device resize the channels-last tensor? Try the node itself. */
    int ins[4], ok = 0;
    memcpy(ins, g->nodes[ni].inputs, sizeof(int) * (size_t)g->nodes[ni].num_inputs);
    ins[0] = x;
    ins[which] = cv;
    s4d_status st = retarget(l, ni, ins, rv, &ok);
    if (st != S4D_OK || !ok)
        return st;
    int64_t back[4];
    for (int i = 0; i < 4; i++)
        back[i] = perm[i];
    int tn = add_transpose(l, ni, 1, "after", rv, y, back);
    if (tn < 0)
        return oom(l);
    g->values[y].producer = tn;
    st = finish_node(l, tn);
    *done = st == S4D_OK;
    return st;
}

/* ---- MaxPool after a Transpose to NCHW ---- */

/* A 2-D MaxPool (no Indices) of Transpose(x, 0,3,1,2): s4d::MaxPool on x, then the Transpose. */
static s4d_status try_pool(lay *l, int ni, int *done)
{
    s4d_ir_graph *g = l->g;
    const s4d_ir_node *n = &g->nodes[ni];
    if (!s4d_fuse_is_op(g, ni, "MaxPool") || !n->params || n->num_inputs != 1 || n->outputs[0] < 0 ||
        (n->num_outputs > 1 && n->outputs[1] >= 0))
        return S4D_OK;
    const s4d_pool_params *pp = n->params;
    const int t = transpose_of(g, n->inputs[0]);
    if (pp->g.nsp != 2 || t < 0 || memcmp(((const s4d_transpose_params *)g->nodes[t].params)->perm,
                                           (const int[]){0, 3, 1, 2}, sizeof(int) * 4) != 0)
        return S4D_OK;
    const int x = g->nodes[t].inputs[0], y = n->outputs[0];
    int64_t yd[4];
    for (int d = 0; d < 4; d++)
        yd[d] = g->values[y].t.dims[TO_NHWC[d]];
    int ok = 0;
    s4d_tensor want = g->values[y].t;
    memcpy(want.dims, yd, sizeof yd);
    s4d_status st = nhwc_supported(l, ni, "MaxPool", &x, 1, &want, &ok);
    if (st != S4D_OK || !ok)
        return st;
    int yv = add_activation(l, n->name, "pooled", g->values[y].t.dtype, 4, yd);
    if (yv < 0)
        return oom(l);
    s4d_ir_node *m = &g->nodes[ni];
    if (s4d_fuse_set_op(m, "s4d", "MaxPool", 1) != 0 || s4d_fuse_add_attr_string(m, "layout", "NHWC") != 0)
        return oom(l);
    m->inputs[0] = x;
    m->outputs[0] = yv;
    m->num_outputs = 1;
    int tn = add_transpose(l, ni, 1, "after", yv, y, TO_NCHW);
    if (tn < 0)
        return oom(l);
    st = finish_node(l, ni);
    if (st == S4D_OK)
        st = finish_node(l, tn);
    *done = st == S4D_OK;
    return st;
}

/* ---- element-wise nodes after Transposes ---- */

/* Element-wise ops whose output element depends only on the inputs' elements at its index. */
static const char *const ELTWISE[] = {
    "Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus",
    "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Cast", "Add", "Sub", "Mul", "Div", "Max",
    "Min", "Pow", "Sum", "Mean",
};

static int is_eltwise(const s4d_ir_graph *g, int ni)
{
    if (is_s4d_op(g, ni, "FusedPointwise"))
        return 1;
    for (size_t i = 0; i < sizeof ELTWISE / sizeof ELTWISE[0]; i++)
        if (s4d_fuse_is_op(g, ni, ELTWISE[i]))
            return 1;
    return 0;
}

/*
 * An element-wise node whose every input is a scalar or, with the output's shape, a Transpose of
 * one perm (rank 4): it runs on the Transposes' inputs instead, and one Transpose follows it.
 * Never more Transposes than before; the one after it may then cancel against a convolution's.
 */
static s4d_status try_eltwise(lay *l, int ni, int *done)
{
    s4d_ir_graph *g = l->g;
    const s4d_ir_node *n = &g->nodes[ni];
    if (!is_eltwise(g, ni) || n->num_outputs != 1 || n->outputs[0] < 0 || n->num_inputs > 8)
        return S4D_OK;
    const int y = n->outputs[0];
    const s4d_tensor *yt = &g->values[y].t;
    if (yt->rank != 4)
        return S4D_OK;
    const int *perm = NULL;
    int srcs[8];
    for (int j = 0; j < n->num_inputs; j++) {
        const int v = n->inputs[j];
        srcs[j] = v;
        if (v < 0 || s4d_tensor_numel(&g->values[v].t) == 1)
            continue; /* absent, or a scalar: the same after any permutation */
        const s4d_tensor *vt = &g->values[v].t;
        const int t = transpose_of(g, v);
        if (t < 0 || vt->rank != 4 || memcmp(vt->dims, yt->dims, sizeof(int64_t) * 4) != 0)
            return S4D_OK;
        const int *p = ((const s4d_transpose_params *)g->nodes[t].params)->perm;
        if (perm && memcmp(perm, p, sizeof(int) * 4) != 0)
            return S4D_OK;
        perm = p;
        srcs[j] = g->nodes[t].inputs[0];
    }
    if (!perm)
        return S4D_OK;
    int64_t back[4], xd[4];
    for (int i = 0; i < 4; i++) {
        back[i] = perm[i];
        xd[perm[i]] = yt->dims[i];
    }
    int yv = add_activation(l, n->name, "out", yt->dtype, 4, xd);
    if (yv < 0)
        return oom(l);
    int ok = 0;
    s4d_status st = retarget(l, ni, srcs, yv, &ok);
    if (st != S4D_OK || !ok)
        return st;
    int tn = add_transpose(l, ni, 1, "after", yv, y, back);
    if (tn < 0)
        return oom(l);
    st = finish_node(l, tn);
    *done = st == S4D_OK;
    return st;
}

/* ---- Transpose(Reshape(Transpose(x))) that keeps the element order ---- */

/*
 * Strides (in elements of x, row-major) of a no-copy reshape of a view with dims d[n] and
 * strides s[n] into dims e[m]; 0 when the view's elements cannot be regrouped without a copy.
 * Size-1 dims get any stride (they never move an element).
 */
static int regroup(const int64_t *d, const int64_t *s, int n, const int64_t *e, int m, int64_t *out)
{
    int i = 0, j = 0;
    while (i < n || j < m) {
        while (i < n && d[i] == 1)
            i++;
        while (j < m && e[j] == 1)
            out[j++] = 0;
        if (i >= n || j >= m)
            return i >= n && j >= m;
        /* groups [i0, i) and [j0, j) with equal products */
        int i0 = i, j0 = j;
        int64_t pi = d[i++], pj = e[j++];
        while (pi != pj) {
            if (pi < pj) {
                if (i >= n)
                    return 0;
                pi *= d[i++];
            } else {
                if (j >= m)
                    return 0;
                pj *= e[j++];
            }
        }
        /* the old group must be contiguous in x: each stride the next one's times its size */
        for (int k = i0; k + 1 < i; k++)
            if (d[k + 1] != 1 && s[k] != s[k + 1] * d[k + 1])
                return 0;
        int last = i - 1;
        while (last > i0 && d[last] == 1)
            last--;
        int64_t st = s[last];
        for (int k = j - 1; k >= j0; k--) {
            out[k] = st;
            st *= e[k];
        }
    }
    return 1;
}

/* Transpose t2 (rank m) of Reshape r of Transpose t1 of x: when the three only reshape x, t2
   becomes Reshape(x) to its own output shape, a view. */
static s4d_status try_chain(lay *l, int t2, int *done)
{
    s4d_ir_graph *g = l->g;
    const s4d_ir_node *n2 = &g->nodes[t2];
    if (!s4d_fuse_is_op(g, t2, "Transpose") || !n2->params || n2->opset < 5 || n2->num_outputs != 1)
        return S4D_OK;
    int rv = n2->inputs[0];
    int r = rv >= 0 && g->values[rv].kind == S4D_VALUE_ACTIVATION ? g->values[rv].producer : -1;
    if (r < 0 || !s4d_fuse_is_op(g, r, "Reshape"))
        return S4D_OK;
    const int t1 = transpose_of(g, g->nodes[r].inputs[0]);
    if (t1 < 0)
        return S4D_OK;
    const int x = g->nodes[t1].inputs[0], y = n2->outputs[0];
    const s4d_tensor *xt = &g->values[x].t, *y1 = &g->values[g->nodes[t1].outputs[0]].t;
    const s4d_tensor *e = &g->values[rv].t, *yt = &g->values[y].t;
    const s4d_tensor *all[4] = {xt, y1, e, yt};
    for (int k = 0; k < 4; k++)
        for (int d = 0; d < all[k]->rank; d++)
            if (all[k]->dims[d] <= 0)
                return S4D_OK;
    const int *p1 = ((const s4d_transpose_params *)g->nodes[t1].params)->perm;
    const int *p2 = ((const s4d_transpose_params *)n2->params)->perm;
    int64_t xs[S4D_MAX_RANK], s1[S4D_MAX_RANK], se[S4D_MAX_RANK], st = 1;
    for (int d = xt->rank - 1; d >= 0; d--) {
        xs[d] = st;
        st *= xt->dims[d];
    }
    for (int d = 0; d < y1->rank; d++)
        s1[d] = xs[p1[d]];
    if (!regroup(y1->dims, s1, y1->rank, e->dims, e->rank, se))
        return S4D_OK;
    /* t2's output must walk x in order: its strides those of a row-major tensor of its dims */
    st = 1;
    for (int d = yt->rank - 1; d >= 0; d--) {
        if (yt->dims[d] != 1 && se[p2[d]] != st)
            return S4D_OK;
        st *= yt->dims[d];
    }
    int64_t len = yt->rank, *shape = malloc(sizeof(int64_t) * (size_t)yt->rank);
    if (!shape)
        return oom(l);
    memcpy(shape, yt->dims, sizeof(int64_t) * (size_t)yt->rank);
    int sv = add_constant(l, n2->name, "shape", S4D_DTYPE_INT64, 1, &len, shape);
    if (sv < 0)
        return oom(l);
    s4d_ir_node *n = &g->nodes[t2];
    int *in = realloc(n->inputs, 2 * sizeof(int));
    if (!in || s4d_fuse_set_op(n, "", "Reshape", n->opset < 14 ? 14 : n->opset) != 0)
        return oom(l);
    n->inputs = in;
    n->num_inputs = 2;
    n->inputs[0] = x;
    n->inputs[1] = sv;
    for (int i = 0; i < n->num_attrs; i++)
        s4d_attr_clear(&n->attrs[i]);
    free(n->attrs);
    n->attrs = NULL;
    n->num_attrs = 0;
    s4d_status s = finish_node(l, t2);
    *done = s == S4D_OK;
    return s;
}

/* ---- the pass ---- */

typedef s4d_status (*rule_fn)(lay *, int, int *);

/* One sweep of a rule over the nodes that exist now; appended nodes are put in order after. */
static s4d_status sweep(lay *l, rule_fn rule, int *changed)
{
    s4d_ir_graph *g = l->g;
    l->first = g->num_nodes;
    l->num_anchors = 0;
    s4d_status st = S4D_OK;
    for (int i = 0; i < l->first && st == S4D_OK; i++) {
        int done = 0;
        st = rule(l, i, &done);
        *changed |= done;
    }
    if (st == S4D_OK)
        st = s4d_fuse_place_appended(g, l->first, l->anchors, l->err, l->errsz);
    if (st == S4D_OK)
        st = s4d_pass_remove_dead(g, l->err, l->errsz);
    return st;
}

s4d_status s4d_pass_layout_nhwc(s4d_ir_graph *g, int any_device, char *err, size_t errsz)
{
    lay l = {g, any_device, 0, NULL, 0, 0, 0, err, errsz};
    int changed = 0;
    s4d_status st = sweep(&l, try_conv, &changed);
    /* Each rule may let another act (a Resize moved lets two Transposes meet); a few rounds do. */
    for (int round = 0; st == S4D_OK && changed && round < 8; round++) {
        changed = 0;
        st = s4d_pass_simplify_movement(g, err, errsz);
        if (st == S4D_OK)
            st = sweep(&l, try_resize, &changed);
        if (st == S4D_OK)
            st = sweep(&l, try_eltwise, &changed);
        if (st == S4D_OK)
            st = sweep(&l, try_pool, &changed);
        if (st == S4D_OK)
            st = sweep(&l, try_chain, &changed);
    }
    if (st == S4D_OK)
        st = s4d_pass_simplify_movement(g, err, errsz);
    free(l.anchors);
    return st;
}
