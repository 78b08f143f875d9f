/* Helpers shared by the fusion passes, and the pass that runs them all. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

int *s4d_fuse_use_counts(const s4d_ir_graph *g)
{
    int *c = calloc((size_t)g->num_values + 1, sizeof(int));
    if (!c)
        return NULL;
    for (int i = 0; i < g->num_nodes; i++) {
        const s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->num_inputs; j++)
            if (n->inputs[j] >= 0)
                c[n->inputs[j]]++;
    }
    for (int i = 0; i < g->num_outputs; i++)
        c[g->outputs[i]]++;
    return c;
}

int s4d_fuse_switched_off(const char *var)
{
    const char *env = getenv(var);
    return env && strcmp(env, "0") == 0;
}

int s4d_fuse_consumer(const s4d_ir_graph *g, int v)
{
    int producer = g->values[v].producer;
    for (int i = 0; i < g->num_nodes; i++) {
        const s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->num_inputs; j++) {
            if (n->inputs[j] != v)
                continue;
            /* A chain never crosses devices: placement decided each side. */
            if (producer >= 0 && g->nodes[producer].device != n->device)
                return -1;
            return i;
        }
    }
    return -1;
}

int s4d_fuse_can(const s4d_ir_graph *g, int ni, const char *domain, const char *op_type, int opset)
{
    const s4d_backend *be = s4d_backend_get(g->nodes[ni].device);
    return be && s4d_op_find_schema(domain, op_type, opset) &&
           be->find_kernel(domain, op_type, opset) != NULL;
}

int s4d_fuse_is_op(const s4d_ir_graph *g, int ni, const char *op_type)
{
    if (ni < 0 || ni >= g->num_nodes)
        return 0;
    const s4d_ir_node *n = &g->nodes[ni];
    return !n->dead && n->kind == S4D_LAYER_OP && s4d_ir_is_onnx_domain(n->domain) &&
           strcmp(n->op_type, op_type) == 0;
}

int s4d_fuse_is_f32(const s4d_ir_graph *g, int v)
{
    return v >= 0 && g->values[v].t.dtype == S4D_DTYPE_FLOAT32;
}

const s4d_tensor *s4d_fuse_const(const s4d_ir_graph *g, int v)
{
    if (v < 0 || v >= g->num_values || g->values[v].kind != S4D_VALUE_CONST || !g->values[v].t.data)
        return NULL;
    return &g->values[v].t;
}

int s4d_fuse_add_const(s4d_ir_graph *g, const char *name, float *data, int rank, const int64_t *dims)
{
    int v = s4d_ir_add_value(g, name, S4D_VALUE_CONST);
    if (v < 0) {
        free(data);
        return -1;
    }
    s4d_ir_value *val = &g->values[v];
    val->t.dtype = S4D_DTYPE_FLOAT32;
    val->t.rank = rank;
    for (int i = 0; i < rank; i++)
        val->t.dims[i] = dims[i];
    val->t.data = data;
    val->shape_known = 1;
    return v;
}

int s4d_fuse_attr_string(s4d_attr *a, const char *name, const char *v)
{
    memset(a, 0, sizeof *a);
    a->type = S4D_ATTR_STRING;
    a->name = s4d_strdup(name);
    a->s = s4d_strdup(v);
    a->s_len = strlen(v);
    return a->name && a->s ? 0 : -1;
}

int s4d_fuse_attr_float(s4d_attr *a, const char *name, float v)
{
    memset(a, 0, sizeof *a);
    a->type = S4D_ATTR_FLOAT;
    a->f = v;
    a->name = s4d_strdup(name);
    return a->name ? 0 : -1;
}

int s4d_fuse_attr_ints(s4d_attr *a, const char *name, const int64_t *v, size_t n)
{
    memset(a, 0, sizeof *a);
    a->type = S4D_ATTR_INTS;
    a->count = n;
    a->name = s4d_strdup(name);
    a->ints = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!a->name || !a->ints)
        return -1;
    memcpy(a->ints, v, sizeof(int64_t) * n);
    return 0;
}

int s4d_fuse_attr_floats(s4d_attr *a, const char *name, const float *v, size_t n)
{
    memset(a, 0, sizeof *a);
    a->type = S4D_ATTR_FLOATS;
    a->count = n;
    a->name = s4d_strdup(name);
    a->floats = malloc(sizeof(float) * (n ? n : 1));
    if (!a->name || !a->floats)
        return -1;
    memcpy(a->floats, v, sizeof(float) * n);
    return 0;
}

int s4d_fuse_attr_int(s4d_attr *a, const char *name, int64_t v)
{
    memset(a, 0, sizeof *a);
    a->type = S4D_ATTR_INT;
    a->i = v;
    a->name = s4d_strdup(name);
    return a->name ? 0 : -1;
}

/* Appends *a, filled with status fill_st, to n's attributes (taking what it owns); when the fill
 * or the append fails, clears it. */
static int append_attr(s4d_ir_node *n, s4d_attr *a, int fill_st)
{
    s4d_attr *na = fill_st == 0 ? realloc(n->attrs, sizeof(s4d_attr) * (size_t)(n->num_attrs + 1)) : NULL;
    if (!na) {
        s4d_attr_clear(a);
        return -1;
    }
    n->attrs = na;
    na[n->num_attrs++] = *a;
    return 0;
}

int s4d_fuse_add_attr_string(s4d_ir_node *n, const char *name, const char *value)
{
    s4d_attr a;
    return append_attr(n, &a, s4d_fuse_attr_string(&a, name, value));
}

int s4d_fuse_add_attr_float(s4d_ir_node *n, const char *name, float value)
{
    s4d_attr a;
    return append_attr(n, &a, s4d_fuse_attr_float(&a, name, value));
}

int s4d_fuse_set_op(s4d_ir_node *n, const char *domain, const char *op_type, int opset)
{
    const s4d_op_schema *def = s4d_op_find_schema(domain, op_type, opset);
    char *d = s4d_strdup(domain), *o = s4d_strdup(op_type);
    if (!def || !d || !o) {
        free(d);
        free(o);
        return -1;
    }
    free(n->domain);
    free(n->op_type);
    n->domain = d;
    n->op_type = o;
    n->opset = opset;
    n->schema = def;
    free(n->params);
    n->params = NULL;
    return 0;
}

s4d_status s4d_fuse_infer_node(s4d_ir_graph *g, int ni, char *err, size_t errsz)
{
    s4d_ir_node *n = &g->nodes[ni];
    s4d_tensor *in = calloc((size_t)n->num_inputs + 1, sizeof *in);
    s4d_tensor *out = calloc((size_t)n->num_outputs + 1, sizeof *out);
    char msg[1024];
    s4d_status st = S4D_OK;
    if (!in || !out) {
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
    if (n->schema->params_size) {
        free(n->params);
        n->params = calloc(1, n->schema->params_size);
        if (!n->params) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
    }
    s4d_op_ctx ctx;
    s4d_ir_node_ctx(n, in, out, msg, sizeof msg, &ctx);
    st = s4d_op_infer(&ctx);
    if (st != S4D_OK) {
        s4d_fmt_err(err, errsz, st, "rewritten node '%s' (%s) does not infer: %s", n->name,
                    n->op_type, msg);
        goto done;
    }
    n->workspace = n->schema->workspace_size ? n->schema->workspace_size(&ctx) : 0;
    for (int i = 0; i < n->num_outputs; i++) {
        int v = n->outputs[i];
        if (v < 0)
            continue;
        s4d_ir_value *val = &g->values[v];
        val->t.dtype = out[i].dtype;
        val->t.rank = out[i].rank;
        memcpy(val->t.dims, out[i].dims, sizeof val->t.dims);
        val->shape_known = 1;
        val->producer = ni;
    }
done:
    free(in);
    free(out);
    return st;
}

s4d_status s4d_fuse_reinfer(s4d_ir_graph *g, int ni, char *err, size_t errsz)
{
    s4d_status st = s4d_fuse_infer_node(g, ni, err, errsz);
    if (st != S4D_OK)
        return st;
    s4d_ir_node *n = &g->nodes[ni];
    const s4d_backend *be = s4d_backend_get(n->device);
    char why[600];
    if (s4d_node_supported(g, n, be, why, sizeof why) != S4D_OK)
        return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                           "fusion made node '%s' (%s) that its device %s cannot run: %s", n->name,
                           n->op_type, s4d_device_name(n->device), why);
    return S4D_OK;
}

s4d_status s4d_pass_fuse(s4d_ir_graph *g, char *err, size_t errsz)
{
    s4d_status st = s4d_pass_fuse_layernorm(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_conv_bn(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_conv_act(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_conv_act_more(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_mbconv(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_attention(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_distribute_matmul(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fold_linear(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_matmul_add(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_mlp(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_matmul_residual(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_fuse_pointwise(g, err, errsz);
    return st;
}

#define FUSE_SUPPORTED_MAX_INPUTS 40

s4d_status s4d_fuse_supported(const s4d_ir_graph *g, int at, const char *op_type, const int *ins, int nin,
                              s4d_attr *attrs, int na, int *ok)
{
    return s4d_fuse_supported_as(g, at, op_type, ins, nin, attrs, na, NULL, ok);
}

s4d_status s4d_fuse_supported_as(const s4d_ir_graph *g, int at, const char *op_type, const int *ins, int nin,
                                 s4d_attr *attrs, int na, const s4d_tensor *want, int *ok)
{
    const s4d_ir_node *r = &g->nodes[at];
    const s4d_backend *be = s4d_backend_get(r->device);
    const s4d_op_schema *schema = s4d_op_find_schema("s4d", op_type, 1);
    *ok = 0;
    if (!be || !schema || nin > FUSE_SUPPORTED_MAX_INPUTS)
        return S4D_OK;
    s4d_tensor in[FUSE_SUPPORTED_MAX_INPUTS], out[1];
    for (int k = 0; k < nin; k++) {
        if (ins[k] < 0) { /* a missing optional input */
            memset(&in[k], 0, sizeof in[k]);
            in[k].rank = -1;
            continue;
        }
        in[k] = g->values[ins[k]].t;
        if (g->values[ins[k]].kind != S4D_VALUE_CONST && !g->values[ins[k]].frozen)
            in[k].data = NULL;
    }
    memset(out, 0, sizeof out);
    out[0].rank = -1;
    s4d_ir_node n = *r;
    n.domain = "s4d";
    n.op_type = (char *)op_type; /* the stand-in is never freed */
    n.opset = 1;
    n.schema = schema;
    n.num_attrs = na;
    n.attrs = attrs;
    n.num_inputs = nin;
    n.inputs = (int *)ins;
    n.params = calloc(1, schema->params_size);
    if (!n.params)
        return S4D_ERR_NO_MEMORY;
    char msg[600], why[600];
    s4d_op_ctx ctx;
    s4d_ir_node_ctx(&n, in, out, msg, sizeof msg, &ctx);
    const s4d_tensor *y = want ? want : &g->values[r->outputs[0]].t;
    if (s4d_op_infer(&ctx) == S4D_OK && s4d_tensor_same_dims(&out[0], y) && out[0].dtype == y->dtype) {
        out[0].data = NULL;
        *ok = s4d_node_supported_as(&n, be, in, out, n.params, why, sizeof why) == S4D_OK;
    }
    free(n.params);
    return S4D_OK;
}

int s4d_fuse_push_anchor(s4d_fuse_anchor **anchors, int *num, int *cap, int node, int after)
{
    if (*num == *cap) {
        const int grown = *cap ? 2 * *cap : 32;
        s4d_fuse_anchor *a = realloc(*anchors, (size_t)grown * sizeof *a);
        if (!a)
            return -1;
        *anchors = a;
        *cap = grown;
    }
    (*anchors)[(*num)++] = (s4d_fuse_anchor){node, after};
    return 0;
}

int s4d_fuse_append_binary(s4d_ir_graph *g, s4d_fuse_anchor **anchors, int *num, int *cap, int at, const char *name,
                           const char *op_type, int a, int b, int out)
{
    const int c = s4d_ir_add_node(g);
    if (c < 0 || s4d_fuse_push_anchor(anchors, num, cap, at, 1) != 0)
        return -1;
    s4d_ir_node *n = &g->nodes[c];
    const s4d_ir_node *src = &g->nodes[at];
    n->name = s4d_strdup(name);
    n->domain = s4d_strdup(src->domain);
    n->op_type = s4d_strdup(op_type);
    n->opset = src->opset;
    n->kind = S4D_LAYER_OP;
    n->device = src->device;
    n->schema = s4d_op_find_schema(n->domain ? n->domain : "", op_type, n->opset);
    n->inputs = malloc(2 * sizeof(int));
    n->outputs = malloc(sizeof(int));
    if (!n->name || !n->domain || !n->op_type || !n->schema || !n->inputs || !n->outputs)
        return -1;
    n->num_inputs = 2;
    n->num_outputs = 1;
    n->inputs[0] = a;
    n->inputs[1] = b;
    n->outputs[0] = out;
    return c;
}

s4d_status s4d_fuse_place_appended(s4d_ir_graph *g, int first, const s4d_fuse_anchor *anchors, char *err,
                                   size_t errsz)
{
    int total = g->num_nodes, extra = total - first;
    if (!extra)
        return S4D_OK;
    s4d_ir_node *nodes = malloc((size_t)g->cap_nodes * sizeof *nodes);
    int *map = malloc((size_t)total * sizeof *map);
    int *order = malloc((size_t)extra * sizeof *order);
    int *count = calloc((size_t)first + 1, sizeof *count);
    if (!nodes || !map || !order || !count) {
        free(nodes);
        free(map);
        free(order);
        free(count);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    }
    /* Counting sort of the appended nodes by anchor; creation order kept within one. */
    for (int k = 0; k < extra; k++)
        count[anchors[k].node + 1]++;
    for (int i = 0; i < first; i++)
        count[i + 1] += count[i];
    for (int k = 0; k < extra; k++)
        order[count[anchors[k].node]++] = k;
    int at = 0, o = 0;
    for (int i = 0; i < first; i++) {
        int start = o;
        while (o < extra && anchors[order[o]].node == i)
            o++;
        for (int q = start; q < o; q++)
            if (!anchors[order[q]].after)
                map[first + order[q]] = at++;
        map[i] = at++;
        for (int q = start; q < o; q++)
            if (anchors[order[q]].after)
                map[first + order[q]] = at++;
    }
    for (int i = 0; i < total; i++)
        nodes[map[i]] = g->nodes[i];
    for (int v = 0; v < g->num_values; v++)
        if (g->values[v].producer >= 0)
            g->values[v].producer = map[g->values[v].producer];
    free(g->nodes);
    g->nodes = nodes;
    free(map);
    free(order);
    free(count);
    return S4D_OK;
}
