/*
 * Shape/dtype inference and constant folding, in one walk: a node's inputs
 * must have final shapes before its infer() runs, and folding a node makes
 * its outputs constants that later nodes' infer() may read (Reshape's shape,
 * Slice's starts), so both happen node by node in topological order.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ir/ir.h"
#include "registry/plugin_bridge.h"
#include "util/util.h"

/* Folding never creates a constant bigger than this; the runtime computes it instead. */
#define S4D_FOLD_MAX_BYTES ((size_t)256 << 20)

static s4d_status check_outputs(const s4d_ir_node *n, const s4d_tensor *out, char *err,
                                size_t errsz)
{
    for (int i = 0; i < n->num_outputs; i++) {
        const s4d_tensor *t = &out[i];
        if (s4d_dtype_size(t->dtype) == 0)
            return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                               "node '%s' (%s): output %d got no supported dtype from inference",
                               n->name, n->op_type, i);
        if (t->rank < 0 || t->rank > S4D_MAX_RANK)
            return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                               "node '%s' (%s): output %d got rank %d from inference", n->name,
                               n->op_type, i, t->rank);
        if (s4d_dims_numel(t->rank, t->dims) < 0)
            return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                               "node '%s' (%s): output %d has a negative or overflowing shape",
                               n->name, n->op_type, i);
    }
    return S4D_OK;
}

static s4d_status fold_node(s4d_ir_graph *g, s4d_ir_node *n, s4d_op_ctx *ctx, char *err,
                            size_t errsz)
{
    for (int i = 0; i < n->num_outputs; i++) {
        size_t bytes = s4d_ir_tensor_bytes(&ctx->outputs[i]);
        if (bytes > S4D_FOLD_MAX_BYTES)
            return S4D_OK; /* not folded: too big to keep as a weight */
    }
    s4d_status st = S4D_OK;
    void *ws = NULL;
    for (int i = 0; i < n->num_outputs; i++) {
        ctx->outputs[i].data = malloc(s4d_ir_tensor_bytes(&ctx->outputs[i]) + 1);
        if (!ctx->outputs[i].data) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory folding node '%s'",
                             n->name);
            goto done;
        }
    }
    if (n->workspace) {
        ws = s4d_aligned_alloc(n->workspace);
        if (!ws) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory folding node '%s'",
                             n->name);
            goto done;
        }
    }
    ctx->pool = NULL;
    ctx->workspace = ws;
    ctx->workspace_size = n->workspace;
    ctx->err[0] = 0;
    st = n->schema->run(ctx);
    if (st != S4D_OK) {
        if (ctx->err[0])
            s4d_fmt_err(err, errsz, st, "constant folding: %s", ctx->err);
        else
            s4d_fmt_err(err, errsz, st, "constant folding of node '%s' (%s) failed: %s", n->name,
                        n->op_type, s4d_status_string(st));
        goto done;
    }
    for (int i = 0; i < n->num_outputs; i++) {
        int vi = n->outputs[i];
        s4d_ir_value *v = &g->values[vi];
        free(v->t.data);
        v->t.data = ctx->outputs[i].data;
        ctx->outputs[i].data = NULL;
        v->kind = S4D_VALUE_CONST;
        v->producer = -1;
    }
    n->dead = 1;
    free(n->params);
    n->params = NULL;
done:
    for (int i = 0; i < n->num_outputs; i++) {
        free(ctx->outputs[i].data);
        ctx->outputs[i].data = NULL;
    }
    s4d_aligned_free(ws);
    return st;
}

static s4d_device plugin_device(s4d_device device)
{
    const s4d_backend *be = s4d_backend_get(device);
    return be ? be->plugin_device : device;
}

static s4d_status infer_node(s4d_ir_graph *g, s4d_ir_node *n, int fold, char *err, size_t errsz)
{
    s4d_tensor *in = calloc((size_t)n->num_inputs + 1, sizeof *in);
    s4d_tensor *out = calloc((size_t)n->num_outputs + 1, sizeof *out);
    char msg[1024];
    s4d_status st = S4D_OK;
    if (!in || !out) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    int all_const = 1;
    for (int i = 0; i < n->num_inputs; i++) {
        int vi = n->inputs[i];
        if (vi < 0) {
            in[i].dtype = S4D_DTYPE_UNDEFINED;
            in[i].rank = -1;
            continue;
        }
        const s4d_ir_value *v = &g->values[vi];
        if (!v->shape_known) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                             "node '%s': input '%s' has no shape yet", n->name, v->name);
            goto done;
        }
        in[i] = v->t;
        if (v->kind != S4D_VALUE_CONST && !v->frozen) {
            in[i].data = NULL;
            all_const = 0;
        }
    }
    if (n->kind == S4D_LAYER_OP && n->schema->params_size && !n->params) {
        n->params = calloc(1, n->schema->params_size);
        if (!n->params) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
    }
    s4d_op_ctx ctx;
    s4d_ir_node_ctx(n, in, out, msg, sizeof msg, &ctx);

    size_t ws = 0;
    switch (n->kind) {
    case S4D_LAYER_OP:
        st = s4d_op_infer(&ctx);
        if (st == S4D_OK && n->schema->workspace_size)
            ws = n->schema->workspace_size(&ctx);
        break;
    case S4D_LAYER_PLUGIN:
        /* Shapes only: whether the plugin runs on the device is placement's question. */
        st = s4d_bridge_infer(n->plugin, n->name, plugin_device(n->device), 0, in, n->num_inputs,
                              out, n->num_outputs, &ws, msg, sizeof msg);
        break;
    case S4D_LAYER_COPY:
        st = s4d_fmt_err(msg, sizeof msg, S4D_ERR_INTERNAL, "copy node before placement");
        break;
    }
    if (st != S4D_OK) {
        if (msg[0])
            s4d_fmt_err(err, errsz, st, "%s", msg);
        else
            s4d_fmt_err(err, errsz, st, "node '%s' (%s): inference failed: %s", n->name,
                        n->op_type, s4d_status_string(st));
        goto done;
    }
    st = check_outputs(n, out, err, errsz);
    if (st != S4D_OK)
        goto done;
    n->workspace = ws;
    for (int i = 0; i < n->num_outputs; i++) {
        s4d_ir_value *v = &g->values[n->outputs[i]];
        v->t.dtype = out[i].dtype;
        v->t.rank = out[i].rank;
        memcpy(v->t.dims, out[i].dims, sizeof v->t.dims);
        v->shape_known = 1;
        out[i].data = NULL;
    }
    /* Folding runs the schema's host reference, never a device kernel. */
    if (fold && n->kind == S4D_LAYER_OP && n->schema->run &&
        (all_const || (n->schema->flags & S4D_OP_SHAPE_ONLY)))
        st = fold_node(g, n, &ctx, err, errsz);
done:
    free(in);
    free(out);
    return st;
}

s4d_status s4d_pass_infer_and_fold(s4d_ir_graph *g, int fold, char *err, size_t errsz)
{
    for (int i = 0; i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        s4d_status st = infer_node(g, n, fold, err, errsz);
        if (st != S4D_OK)
            return st;
    }
    return S4D_OK;
}
