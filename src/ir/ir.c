/* Graph storage of ir.h. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

#include "registry/plugin_bridge.h"
#include "util/util.h"

s4d_ir_graph *s4d_ir_graph_create(void)
{
    return calloc(1, sizeof(s4d_ir_graph));
}

void s4d_attr_clear(s4d_attr *a)
{
    if (!a)
        return;
    free(a->name);
    free(a->s);
    free(a->floats);
    free(a->ints);
    if (a->strings) {
        for (size_t i = 0; i < a->count; i++)
            free(a->strings[i]);
        free(a->strings);
    }
    if (a->t) {
        free(a->t->data);
        free(a->t);
    }
    memset(a, 0, sizeof *a);
}

int s4d_attr_copy(s4d_attr *dst, const s4d_attr *src)
{
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    dst->f = src->f;
    dst->i = src->i;
    dst->count = src->count;
    dst->s_len = src->s_len;
    dst->name = s4d_strdup(src->name);
    if (!dst->name)
        goto fail;
    if (src->s) {
        dst->s = malloc(src->s_len + 1);
        if (!dst->s)
            goto fail;
        memcpy(dst->s, src->s, src->s_len + 1);
    }
    if (src->floats) {
        dst->floats = malloc(src->count * sizeof(float) + 1);
        if (!dst->floats)
            goto fail;
        memcpy(dst->floats, src->floats, src->count * sizeof(float));
    }
    if (src->ints) {
        dst->ints = malloc(src->count * sizeof(int64_t) + 1);
        if (!dst->ints)
            goto fail;
        memcpy(dst->ints, src->ints, src->count * sizeof(int64_t));
    }
    if (src->strings) {
        dst->strings = calloc(src->count + 1, sizeof(char *));
        if (!dst->strings)
            goto fail;
        for (size_t i = 0; i < src->count; i++)
            if (!(dst->strings[i] = s4d_strdup(src->strings[i])))
                goto fail;
    }
    if (src->t) {
        dst->t = malloc(sizeof *dst->t);
        if (!dst->t)
            goto fail;
        *dst->t = *src->t;
        size_t n = s4d_ir_tensor_bytes(src->t);
        dst->t->data = malloc(n + 1);
        if (!dst->t->data)
            goto fail;
        if (n)
            memcpy(dst->t->data, src->t->data, n);
    }
    return 0;
fail:
    s4d_attr_clear(dst);
    return -1;
}

static void node_clear(s4d_ir_node *n)
{
    free(n->name);
    free(n->domain);
    free(n->op_type);
    for (int i = 0; i < n->num_attrs; i++)
        s4d_attr_clear(&n->attrs[i]);
    free(n->attrs);
    free(n->inputs);
    free(n->outputs);
    free(n->plugin_namespace);
    free(n->plugin_name);
    free(n->plugin_version);
    free(n->params);
    if (n->plugin)
        s4d_bridge_destroy(n->plugin);
}

void s4d_ir_graph_destroy(s4d_ir_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->num_values; i++) {
        free(g->values[i].name);
        free(g->values[i].t.data);
        free(g->values[i].symbolic);
    }
    free(g->values);
    for (int i = 0; i < g->num_nodes; i++)
        node_clear(&g->nodes[i]);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    for (int i = 0; i < g->num_opsets; i++)
        free(g->opsets[i].domain);
    free(g->opsets);
    free(g);
}

int s4d_ir_add_value(s4d_ir_graph *g, const char *name, s4d_value_kind kind)
{
    if (g->num_values == g->cap_values) {
        int ncap = g->cap_values ? g->cap_values * 2 : 64;
        s4d_ir_value *nv = realloc(g->values, (size_t)ncap * sizeof *nv);
        if (!nv)
            return -1;
        g->values = nv;
        g->cap_values = ncap;
    }
    s4d_ir_value *v = &g->values[g->num_values];
    memset(v, 0, sizeof *v);
    v->name = s4d_strdup(name);
    if (!v->name)
        return -1;
    v->kind = kind;
    v->producer = -1;
    v->t.dtype = S4D_DTYPE_UNDEFINED;
    return g->num_values++;
}

int s4d_ir_add_node(s4d_ir_graph *g)
{
    if (g->num_nodes == g->cap_nodes) {
        int ncap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        s4d_ir_node *nn = realloc(g->nodes, (size_t)ncap * sizeof *nn);
        if (!nn)
            return -1;
        g->nodes = nn;
        g->cap_nodes = ncap;
    }
    memset(&g->nodes[g->num_nodes], 0, sizeof(s4d_ir_node));
    return g->num_nodes++;
}

int s4d_ir_is_onnx_domain(const char *domain)
{
    return !domain || domain[0] == 0 || strcmp(domain, "ai.onnx") == 0;
}

int s4d_ir_opset_version(const s4d_ir_graph *g, const char *domain)
{
    int onnx = s4d_ir_is_onnx_domain(domain);
    for (int i = 0; i < g->num_opsets; i++) {
        const char *d = g->opsets[i].domain;
        if (onnx ? s4d_ir_is_onnx_domain(d) : strcmp(d, domain) == 0)
            return g->opsets[i].version;
    }
    return -1;
}

size_t s4d_ir_tensor_bytes(const s4d_tensor *t)
{
    if (t->rank < 0)
        return 0;
    int64_t n = s4d_dims_numel(t->rank, t->dims);
    if (n < 0)
        return 0;
    return (size_t)n * s4d_dtype_size(t->dtype);
}

void s4d_ir_node_ctx(const s4d_ir_node *n, const s4d_tensor *in, s4d_tensor *out, char *msg,
                     size_t msg_size, s4d_op_ctx *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->node_name = n->name;
    ctx->op_type = n->op_type;
    ctx->opset = n->opset;
    ctx->num_attrs = n->num_attrs;
    ctx->attrs = n->attrs;
    ctx->num_inputs = n->num_inputs;
    ctx->inputs = in;
    ctx->num_outputs = n->num_outputs;
    ctx->outputs = out;
    ctx->schema = n->schema;
    ctx->params = n->params;
    msg[0] = 0;
    ctx->err = msg;
    ctx->err_size = msg_size;
}
