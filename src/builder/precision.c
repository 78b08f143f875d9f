/*
 * The precision pass of fp16 builds (docs/precision.md). After placement and
 * fusion, every layer on a device that is not host memory whose float32
 * tensors could be float16 asks its kernel (supports() with float16 dtypes,
 * or the plugin through the bridge) whether it runs in float16; layers that
 * do, and that neither the user nor the accuracy guard keeps in float32, get
 * float16 float tensors. Cast layers join float16 tensors to float32
 * consumers and to the graph's inputs and outputs, which keep the dtypes the
 * model gives them. Float constants read only by float16 layers are stored
 * as float16; integer and bool tensors never change.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "ops/broadcast.h"
#include "passes/fuse_passes.h"
#include "registry/plugin_bridge.h"
#include "util/util.h"

/* ONNX TensorProto.DataType codes for Cast's 'to'. */
#define ONNX_FLOAT 1
#define ONNX_FLOAT16 10

static size_t numel(const s4d_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

static uint16_t *to_half(const float *src, size_t n)
{
    uint16_t *h = malloc(n * sizeof *h + 2);
    if (!h)
        return NULL;
    for (size_t i = 0; i < n; i++)
        h[i] = s4d_float_to_half(src[i]);
    return h;
}

/* The node has a float32 tensor that float16 could replace. */
static int has_f32(const s4d_ir_graph *g, const s4d_ir_node *n)
{
    for (int i = 0; i < n->num_inputs; i++)
        if (s4d_fuse_is_f32(g, n->inputs[i]))
            return 1;
    for (int i = 0; i < n->num_outputs; i++)
        if (s4d_fuse_is_f32(g, n->outputs[i]))
            return 1;
    return 0;
}

/* Whether input j is one of the float inputs a mask keeps in float32. */
static int kept32(unsigned mask, int j)
{
    return j < 32 && (mask >> j & 1u);
}

/*
 * Whether node n runs in float16 on backend be: its schema infers the same
 * shapes and parameters from float16 inputs (so the loader will infer it
 * again), and its kernel or plugin says it runs them. S4D_OK, else the
 * reason in why.
 */
static s4d_status try_half(const s4d_ir_graph *g, const s4d_ir_node *n, const s4d_backend *be,
                           unsigned keep32, char *why, size_t whysz)
{
    int ni = n->num_inputs, no = n->num_outputs;
    s4d_tensor *in = calloc((size_t)ni + 1, sizeof *in);
    s4d_tensor *out = calloc((size_t)no + 1, sizeof *out);
    void **owned = calloc((size_t)ni + 1, sizeof *owned);
    void *params = NULL;
    s4d_status st = S4D_OK;
    why[0] = 0;
    if (!in || !out || !owned) {
        st = s4d_fmt_err(why, whysz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < ni; i++) {
        int v = n->inputs[i];
        if (v < 0) {
            in[i].rank = -1;
            continue;
        }
        const s4d_ir_value *val = &g->values[v];
        in[i] = val->t;
        if (val->kind != S4D_VALUE_CONST && !val->frozen)
            in[i].data = NULL;
        if (in[i].dtype != S4D_DTYPE_FLOAT32 || kept32(keep32, i))
            continue;
        in[i].dtype = S4D_DTYPE_FLOAT16;
        if (in[i].data) {
            owned[i] = to_half(in[i].data, numel(&in[i]));
            if (!owned[i]) {
                st = s4d_fmt_err(why, whysz, S4D_ERR_NO_MEMORY, "out of memory");
                goto done;
            }
            in[i].data = owned[i];
        }
    }
    for (int i = 0; i < no; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = -1;
    }
    if (n->kind == S4D_LAYER_OP) {
        size_t ps = n->schema->params_size;
        params = ps ? calloc(1, ps) : NULL;
        if (ps && !params) {
            st = s4d_fmt_err(why, whysz, S4D_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        s4d_op_ctx ctx;
        char msg[600];
        s4d_ir_node_ctx(n, in, out, msg, sizeof msg, &ctx);
        ctx.params = params;
        st = s4d_op_infer(&ctx);
        if (st != S4D_OK) {
            s4d_fmt_err(why, whysz, st, "its op does not take float16 inputs: %s", msg);
            goto done;
        }
    }
    for (int i = 0; i < no; i++) {
        int v = n->outputs[i];
        if (v < 0) {
            memset(&out[i], 0, sizeof out[i]);
            out[i].rank = -1;
            continue;
        }
        const s4d_tensor *t = &g->values[v].t;
        s4d_dtype want = t->dtype == S4D_DTYPE_FLOAT32 ? S4D_DTYPE_FLOAT16 : t->dtype;
        if (n->kind == S4D_LAYER_OP && (out[i].dtype != want || !s4d_tensor_same_dims(&out[i], t))) {
            st = s4d_fmt_err(why, whysz, S4D_ERR_UNSUPPORTED,
                             "with float16 inputs its output %d would be %s", i,
                             s4d_dtype_name(out[i].dtype));
            goto done;
        }
        out[i] = *t;
        out[i].dtype = want;
        out[i].data = NULL;
    }
    st = s4d_node_supported_as(n, be, in, out, params, why, whysz);
done:
    for (int i = 0; owned && i < ni; i++)
        free(owned[i]);
    free(owned);
    free(params);
    free(in);
    free(out);
    return st;
}

/*
 * A layer that runs in float16 only with some float inputs kept in float32,
 * as a bit mask of those inputs (0: none works). An op: its float constants
 * after the first input (parameters such as Resize's scales and roi, which
 * its schema reads as float32 values). A plugin: one float input (the
 * aggregation plugin takes features and weights in float16, its sampling
 * locations in float32 only).
 */
static unsigned mixed_keep32(const s4d_ir_graph *g, const s4d_ir_node *n, const s4d_backend *be)
{
    char why[600];
    if (n->kind == S4D_LAYER_OP) {
        unsigned params = 0;
        for (int j = 1; j < n->num_inputs && j < 32; j++) {
            int v = n->inputs[j];
            if (s4d_fuse_is_f32(g, v) && g->values[v].kind == S4D_VALUE_CONST)
                params |= 1u << j;
        }
        return params && s4d_fuse_is_f32(g, n->inputs[0]) && try_half(g, n, be, params, why, sizeof why) == S4D_OK
                   ? params
                   : 0;
    }
    if (n->kind != S4D_LAYER_PLUGIN)
        return 0;
    int floats = 0;
    for (int j = 0; j < n->num_inputs && j < 32; j++)
        floats += s4d_fuse_is_f32(g, n->inputs[j]);
    if (floats < 2)
        return 0;
    for (int j = 0; j < n->num_inputs && j < 32; j++)
        if (s4d_fuse_is_f32(g, n->inputs[j]) && try_half(g, n, be, 1u << j, why, sizeof why) == S4D_OK)
            return 1u << j;
    return 0;
}

/* Infers an op node again on its (now float16) tensors: new params, same outputs. */
static s4d_status reinfer(const s4d_ir_graph *g, s4d_ir_node *n, char *err, size_t errsz)
{
    s4d_tensor *in = calloc((size_t)n->num_inputs + 1, sizeof *in);
    s4d_tensor *out = calloc((size_t)n->num_outputs + 1, sizeof *out);
    size_t ps = n->schema->params_size;
    void *params = ps ? calloc(1, ps) : NULL;
    s4d_status st = S4D_OK;
    if (!in || !out || (ps && !params)) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < n->num_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0) {
            in[i].rank = -1;
            continue;
        }
        in[i] = g->values[v].t;
        if (g->values[v].kind != S4D_VALUE_CONST && !g->values[v].frozen)
            in[i].data = NULL;
    }
    for (int i = 0; i < n->num_outputs; i++)
        out[i].rank = -1;
    char msg[600];
    s4d_op_ctx ctx;
    s4d_ir_node_ctx(n, in, out, msg, sizeof msg, &ctx);
    ctx.params = params;
    st = s4d_op_infer(&ctx);
    for (int i = 0; st == S4D_OK && i < n->num_outputs; i++) {
        int v = n->outputs[i];
        if (v >= 0 && (out[i].dtype != g->values[v].t.dtype || !s4d_tensor_same_dims(&out[i], &g->values[v].t)))
            st = S4D_ERR_INTERNAL;
    }
    if (st != S4D_OK) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                         "fp16: layer '%s' (%s) does not infer again in float16: %s", n->name,
                         n->op_type, msg[0] ? msg : "its outputs changed");
        goto done;
    }
    free(n->params);
    n->params = params;
    params = NULL;
done:
    free(params);
    free(in);
    free(out);
    return st;
}

/* A new activation value: a float16 (or float32) twin of v, made by producer. */
static int add_twin(s4d_ir_graph *g, int v, s4d_dtype dtype, const char *suffix)
{
    char name[600];
    snprintf(name, sizeof name, "%s%s", g->values[v].name, suffix);
    int nv = s4d_ir_add_value(g, name, S4D_VALUE_ACTIVATION);
    if (nv < 0)
        return -1;
    s4d_ir_value *a = &g->values[nv];
    const s4d_ir_value *b = &g->values[v];
    a->t = b->t;
    a->t.data = NULL;
    a->t.dtype = dtype;
    a->shape_known = 1;
    return nv;
}

/* Appends a Cast node src -> dst on device dev; returns its index, or -1 with err set. */
static int add_cast(s4d_ir_graph *g, int src, int dst, s4d_device dev, char *err, size_t errsz)
{
    int opset = s4d_ir_opset_version(g, "");
    if (opset < 13)
        opset = 13;
    int idx = s4d_ir_add_node(g);
    if (idx < 0) {
        s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        return -1;
    }
    s4d_ir_node *n = &g->nodes[idx];
    s4d_dtype to = g->values[dst].t.dtype;
    char name[700];
    snprintf(name, sizeof name, "cast %s -> %s", g->values[src].name,
             to == S4D_DTYPE_FLOAT16 ? "fp16" : "fp32");
    n->name = s4d_strdup(name);
    n->domain = s4d_strdup("");
    n->op_type = s4d_strdup("Cast");
    n->opset = opset;
    n->kind = S4D_LAYER_OP;
    n->device = dev;
    n->attrs = calloc(1, sizeof *n->attrs);
    n->inputs = malloc(sizeof(int));
    n->outputs = malloc(sizeof(int));
    n->schema = s4d_op_find_schema("", "Cast", opset);
    if (!n->name || !n->domain || !n->op_type || !n->attrs || !n->inputs || !n->outputs ||
        !n->schema) {
        s4d_fmt_err(err, errsz, n->schema ? S4D_ERR_NO_MEMORY : S4D_ERR_INTERNAL,
                    "cannot make the Cast layer '%s'", name);
        return -1;
    }
    n->attrs[0].name = s4d_strdup("to");
    n->attrs[0].type = S4D_ATTR_INT;
    n->attrs[0].i = to == S4D_DTYPE_FLOAT16 ? ONNX_FLOAT16 : ONNX_FLOAT;
    n->num_attrs = 1;
    n->num_inputs = n->num_outputs = 1;
    n->inputs[0] = src;
    n->outputs[0] = dst;
    if (!n->attrs[0].name) {
        s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        return -1;
    }
    if (n->schema->params_size && !(n->params = calloc(1, n->schema->params_size))) {
        s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        return -1;
    }
    s4d_tensor in = g->values[src].t, out;
    if (g->values[src].kind != S4D_VALUE_CONST && !g->values[src].frozen)
        in.data = NULL;
    memset(&out, 0, sizeof out);
    out.rank = -1;
    char msg[600];
    s4d_op_ctx ctx;
    s4d_ir_node_ctx(n, &in, &out, msg, sizeof msg, &ctx);
    s4d_status st = s4d_op_infer(&ctx);
    if (st != S4D_OK || out.dtype != to) {
        s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "layer '%s' does not infer: %s", name, msg);
        return -1;
    }
    char why[600];
    st = s4d_node_supported(g, n, s4d_backend_get(dev), why, sizeof why);
    if (st != S4D_OK) {
        s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                    "fp16: device %s cannot run the Cast layer '%s' that joins float16 and "
                    "float32 layers: %s",
                    s4d_device_name(dev), name, why);
        return -1;
    }
    g->values[dst].producer = idx;
    return idx;
}

static const s4d_layer_precision *pin_of(const s4d_build_config *cfg, const char *name)
{
    const s4d_layer_precision *pin = NULL;
    for (int i = 0; i < cfg->num_layer_precisions; i++)
        if (cfg->layer_precisions[i].layer && strcmp(cfg->layer_precisions[i].layer, name) == 0)
            pin = &cfg->layer_precisions[i]; /* the last one given wins */
    return pin;
}

static int guard_keeps(const s4d_build_config *cfg, const char *name)
{
    for (int i = 0; i < cfg->num_guard_fp32; i++)
        if (strcmp(cfg->guard_fp32[i], name) == 0)
            return 1;
    return 0;
}

/* Every pinned layer must be a live layer of the network. */
static s4d_status check_pins(const s4d_ir_graph *g, const s4d_build_config *cfg, char *err,
                             size_t errsz)
{
    for (int i = 0; i < cfg->num_layer_precisions; i++) {
        const s4d_layer_precision *lp = &cfg->layer_precisions[i];
        if (!lp->layer)
            return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                               "layer_precisions[%d]: the layer name is NULL", i);
        if (lp->dtype != S4D_DTYPE_FLOAT32 && lp->dtype != S4D_DTYPE_FLOAT16)
            return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                               "layer precision of '%s': %s; give fp32 or fp16", lp->layer,
                               s4d_dtype_name(lp->dtype));
        int live = 0, dead = 0;
        for (int j = 0; j < g->num_nodes && !live; j++) {
            if (strcmp(g->nodes[j].name, lp->layer) != 0)
                continue;
            if (g->nodes[j].dead)
                dead = 1;
            else
                live = 1;
        }
        if (!live)
            return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                               "layer precision for '%s': the network has no such layer%s "
                               "(--dumpLayerInfo lists the layers)",
                               lp->layer,
                               dead ? " (the node was fused into another layer or removed)" : "");
    }
    return S4D_OK;
}

s4d_status s4d_pass_precision(s4d_ir_graph *g, const s4d_build_config *cfg, char **notes,
                              char *err, size_t errsz)
{
    *notes = NULL;
    s4d_status st = check_pins(g, cfg, err, errsz);
    if (st != S4D_OK)
        return st;
    int first = g->num_nodes, nvals = g->num_values;
    char *half = calloc((size_t)first + 1, 1);
    unsigned *keep32 = calloc((size_t)first + 1, sizeof *keep32); /* float inputs a float16 layer reads as float32 */
    int *users = calloc((size_t)nvals + 1, sizeof *users);      /* live readers */
    int *half_users = calloc((size_t)nvals + 1, sizeof *half_users);
    int *twin = malloc(((size_t)nvals + 1) * sizeof *twin);     /* its float16 twin, or -1 */
    s4d_fuse_anchor *anchors = NULL;
    int num_anchors = 0, cap_anchors = 0;
    s4d_text notes_t = {0};
    if (!half || !keep32 || !users || !half_users || !twin) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    int eligible = 0, chosen = 0, by_kernel = 0, by_user = 0, by_guard = 0;
    char why[600];
    for (int i = 0; i < first; i++) {
        const s4d_ir_node *n = &g->nodes[i];
        if (n->dead || n->kind == S4D_LAYER_COPY)
            continue;
        const s4d_backend *be = s4d_backend_get(n->device);
        const s4d_layer_precision *pin = pin_of(cfg, n->name);
        int wants_half = !pin || pin->dtype == S4D_DTYPE_FLOAT16;
        if (!be || be->host_memory || !has_f32(g, n)) {
            if (pin && pin->dtype == S4D_DTYPE_FLOAT16) {
                const char *reason = !has_f32(g, n) ? "it has no float tensors"
                                                    : "it runs on the CPU (fallback)";
                if (cfg->obey_precisions) {
                    st = s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                                     "layer '%s' (%s) is pinned to fp16 with precision "
                                     "constraints obeyed, but %s",
                                     n->name, n->op_type, reason);
                    goto done;
                }
                s4d_text_add(&notes_t, "warning: layer '%s' (%s) pinned to fp16 stays as it is: %s\n",
                         n->name, n->op_type, reason);
            }
            continue;
        }
        eligible++;
        if (!wants_half) {
            by_user++;
            continue;
        }
        if (!pin && guard_keeps(cfg, n->name)) {
            by_guard++;
            continue;
        }
        st = try_half(g, n, be, 0, why, sizeof why);
        if (st == S4D_ERR_NO_MEMORY) {
            s4d_fmt_err(err, errsz, st, "%s", why);
            goto done;
        }
        if (st != S4D_OK && (keep32[i] = mixed_keep32(g, n, be)) != 0) {
            st = S4D_OK;
            char list[96] = "";
            for (int j = 0, len = 0; j < 32 && len < (int)sizeof list - 8; j++)
                if (kept32(keep32[i], j))
                    len += snprintf(list + len, sizeof list - (size_t)len, "%s%d", len ? ", " : "", j);
            s4d_text_add(&notes_t, "'%s' (%s) runs in float16 with input%s %s kept in float32 (%s)\n",
                         n->name, n->op_type, (keep32[i] & (keep32[i] - 1)) ? "s" : "", list, why);
        }
        if (st != S4D_OK) {
            st = S4D_OK;
            by_kernel++;
            if (pin && cfg->obey_precisions) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                                 "layer '%s' (%s) is pinned to fp16 with precision constraints "
                                 "obeyed, but its %s kernel does not run it in float16: %s",
                                 n->name, n->op_type, be->name, why);
                goto done;
            }
            s4d_text_add(&notes_t, "%s'%s' (%s) stays fp32: %s\n",
                     pin ? "warning: pinned to fp16, " : "", n->name, n->op_type, why);
            continue;
        }
        half[i] = 1;
        chosen++;
    }
    /* Readers of each value, and how many of them run in float16. */
    for (int i = 0; i < first; i++) {
        const s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->num_inputs; j++) {
            int v = n->inputs[j];
            if (v < 0)
                continue;
            users[v]++;
            half_users[v] += half[i] && !kept32(keep32[i], j);
        }
    }
    for (int v = 0; v < nvals; v++)
        twin[v] = -1;
    for (int i = 0; i < first; i++) {
        if (!half[i])
            continue;
        s4d_device dev = g->nodes[i].device;
        for (int j = 0; j < g->nodes[i].num_inputs; j++) {
            int v = g->nodes[i].inputs[j];
            if (kept32(keep32[i], j))
                continue;
            if (!s4d_fuse_is_f32(g, v)) {
                if (v >= 0 && twin[v] >= 0)
                    g->nodes[i].inputs[j] = twin[v];
                continue;
            }
            if (twin[v] < 0) {
                s4d_ir_value *val = &g->values[v];
                if (val->kind == S4D_VALUE_CONST) {
                    uint16_t *h = to_half(val->t.data, numel(&val->t));
                    if (!h) {
                        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                        goto done;
                    }
                    if (users[v] == half_users[v] && !val->is_output) {
                        /* Only float16 layers read it: store it as float16. */
                        free(val->t.data);
                        val->t.data = h;
                        val->t.dtype = S4D_DTYPE_FLOAT16;
                        continue;
                    }
                    int c = add_twin(g, v, S4D_DTYPE_FLOAT16, "/fp16");
                    if (c < 0) {
                        free(h);
                        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                        goto done;
                    }
                    g->values[c].kind = S4D_VALUE_CONST;
                    g->values[c].t.data = h;
                    twin[v] = c;
                } else {
                    int c = add_twin(g, v, S4D_DTYPE_FLOAT16, "/fp16");
                    if (c < 0) {
                        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                        goto done;
                    }
                    twin[v] = c;
                    if (num_anchors == cap_anchors) {
                        cap_anchors = cap_anchors ? cap_anchors * 2 : 64;
                        s4d_fuse_anchor *a = realloc(anchors, (size_t)cap_anchors * sizeof *a);
                        if (!a) {
                            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                            goto done;
                        }
                        anchors = a;
                    }
                    anchors[num_anchors++] = (s4d_fuse_anchor){i, 0};
                    if (add_cast(g, v, c, dev, err, errsz) < 0) {
                        st = S4D_ERR_UNSUPPORTED;
                        goto done;
                    }
                }
            }
            g->nodes[i].inputs[j] = twin[v];
        }
        for (int j = 0; j < g->nodes[i].num_outputs; j++) {
            int v = g->nodes[i].outputs[j];
            if (!s4d_fuse_is_f32(g, v))
                continue;
            int c = add_twin(g, v, S4D_DTYPE_FLOAT16, "/fp16");
            if (c < 0) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                goto done;
            }
            g->values[c].producer = i;
            g->nodes[i].outputs[j] = c;
            twin[v] = c;
            if (users[v] == half_users[v] && !g->values[v].is_output) {
                g->values[v].producer = -1; /* nobody reads the float32 value any more */
                continue;
            }
            if (num_anchors == cap_anchors) {
                cap_anchors = cap_anchors ? cap_anchors * 2 : 64;
                s4d_fuse_anchor *a = realloc(anchors, (size_t)cap_anchors * sizeof *a);
                if (!a) {
                    st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                    goto done;
                }
                anchors = a;
            }
            anchors[num_anchors++] = (s4d_fuse_anchor){i, 1};
            if (add_cast(g, c, v, dev, err, errsz) < 0) {
                st = S4D_ERR_UNSUPPORTED;
                goto done;
            }
        }
    }
    /* Parameters follow the dtypes (and float16 constants): infer the float16 layers again. */
    for (int i = 0; i < first; i++) {
        if (half[i] && g->nodes[i].kind == S4D_LAYER_OP) {
            st = reinfer(g, &g->nodes[i], err, errsz);
            if (st != S4D_OK)
                goto done;
        }
    }
    st = s4d_fuse_place_appended(g, first, anchors, err, errsz);
    if (st != S4D_OK)
        goto done;
    {
        s4d_text head = {0};
        s4d_text_add(&head,
                 "fp16: %d of %d layers with float tensors run in float16 (%d kept in float32 by "
                 "their kernel, %d pinned to fp32, %d by the accuracy guard); %d cast layers\n",
                 chosen, eligible, by_kernel, by_user, by_guard, num_anchors);
        if (notes_t.s)
            s4d_text_put(&head, notes_t.s);
        if (head.failed) {
            free(head.s);
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        *notes = head.s;
    }
done:
    free(notes_t.s);
    free(anchors);
    free(half);
    free(keep32);
    free(users);
    free(half_users);
    free(twin);
    return st;
}
