/*
 * IR -> plan: compacts the live part of the graph into the form the runtime
 * executes and the engine file stores.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "engine/plugin_bridge.h"
#include "util/util.h"

void s4d_plan_destroy(s4d_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->num_tensors; i++)
        free(p->tensors[i].name);
    free(p->tensors);
    for (int i = 0; i < p->num_layers; i++) {
        s4d_plan_layer *l = &p->layers[i];
        free(l->name);
        free(l->domain);
        free(l->op_type);
        for (int j = 0; j < l->num_attrs; j++)
            s4d_attr_clear(&l->attrs[j]);
        free(l->attrs);
        free(l->inputs);
        free(l->outputs);
        free(l->plugin_namespace);
        free(l->plugin_name);
        free(l->plugin_version);
        free(l->payload);
        if (l->plugin)
            s4d_bridge_destroy(l->plugin);
    }
    free(p->layers);
    free(p->inputs);
    free(p->outputs);
    s4d_aligned_free(p->weights);
    free(p);
}

#define OOM() s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory while building the plan")

static s4d_status copy_layer(s4d_plan_layer *l, s4d_ir_node *n, const int *vmap, char *err,
                             size_t errsz)
{
    l->name = s4d_strdup(n->name);
    l->domain = s4d_strdup(n->domain);
    l->op_type = s4d_strdup(n->op_type);
    l->kind = n->kind;
    l->device = n->device;
    l->opset = n->opset;
    l->workspace = n->workspace;
    l->def = n->def;
    l->inputs = calloc((size_t)n->num_inputs + 1, sizeof(int));
    l->outputs = calloc((size_t)n->num_outputs + 1, sizeof(int));
    l->attrs = calloc((size_t)n->num_attrs + 1, sizeof(s4d_attr));
    if (!l->name || !l->domain || !l->op_type || !l->inputs || !l->outputs || !l->attrs)
        return OOM();
    l->num_inputs = n->num_inputs;
    for (int i = 0; i < n->num_inputs; i++)
        l->inputs[i] = n->inputs[i] < 0 ? -1 : vmap[n->inputs[i]];
    l->num_outputs = n->num_outputs;
    for (int i = 0; i < n->num_outputs; i++)
        l->outputs[i] = vmap[n->outputs[i]];
    switch (n->kind) {
    case S4D_LAYER_OP:
        /* Plugin layers keep their fields in the payload; ops need their attributes at run time. */
        for (int i = 0; i < n->num_attrs; i++) {
            if (s4d_attr_copy(&l->attrs[i], &n->attrs[i]) != 0)
                return OOM();
            l->num_attrs = i + 1;
        }
        break;
    case S4D_LAYER_PLUGIN: {
        l->plugin_namespace = s4d_strdup(n->plugin_namespace);
        l->plugin_name = s4d_strdup(n->plugin_name);
        l->plugin_version = s4d_strdup(n->plugin_version);
        if (!l->plugin_namespace || !l->plugin_name || !l->plugin_version)
            return OOM();
        s4d_wbuf w;
        memset(&w, 0, sizeof w);
        s4d_status st = s4d_bridge_serialize(n->plugin, &w, err, errsz);
        if (st != S4D_OK) {
            s4d_wbuf_free(&w);
            return st;
        }
        if (w.failed) {
            s4d_wbuf_free(&w);
            return OOM();
        }
        l->payload = w.data;
        l->payload_size = w.size;
        l->plugin = n->plugin;
        n->plugin = NULL;
        break;
    }
    }
    return S4D_OK;
}

s4d_status s4d_plan_from_ir(s4d_ir_graph *g, s4d_device_kind device, int fp16, s4d_plan **out,
                            char *err, size_t errsz)
{
    *out = NULL;
    s4d_plan *p = calloc(1, sizeof *p);
    int *vmap = malloc(((size_t)g->num_values + 1) * sizeof(int));
    char *used = calloc((size_t)g->num_values + 1, 1);
    s4d_status st = S4D_OK;
    if (!p || !vmap || !used) {
        st = OOM();
        goto fail;
    }
    p->device = device;
    p->fp16 = fp16;
    for (int i = 0; i < g->num_inputs; i++)
        used[g->inputs[i]] = 1;
    for (int i = 0; i < g->num_outputs; i++)
        used[g->outputs[i]] = 1;
    int live_layers = 0;
    for (int i = 0; i < g->num_nodes; i++) {
        const s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        live_layers++;
        for (int j = 0; j < n->num_inputs; j++)
            if (n->inputs[j] >= 0)
                used[n->inputs[j]] = 1;
        for (int j = 0; j < n->num_outputs; j++)
            used[n->outputs[j]] = 1;
    }
    int count = 0;
    for (int i = 0; i < g->num_values; i++)
        vmap[i] = used[i] ? count++ : -1;
    p->tensors = calloc((size_t)count + 1, sizeof *p->tensors);
    p->layers = calloc((size_t)live_layers + 1, sizeof *p->layers);
    p->inputs = calloc((size_t)g->num_inputs + 1, sizeof(int));
    p->outputs = calloc((size_t)g->num_outputs + 1, sizeof(int));
    if (!p->tensors || !p->layers || !p->inputs || !p->outputs) {
        st = OOM();
        goto fail;
    }
    /* Weights first: sizes and offsets. */
    uint64_t wsize = 0;
    for (int i = 0; i < g->num_values; i++) {
        if (vmap[i] < 0)
            continue;
        const s4d_ir_value *v = &g->values[i];
        s4d_plan_tensor *t = &p->tensors[vmap[i]];
        p->num_tensors = vmap[i] + 1;
        t->name = s4d_strdup(v->name);
        if (!t->name) {
            st = OOM();
            goto fail;
        }
        if (!v->shape_known) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "tensor '%s' has no inferred shape",
                             v->name);
            goto fail;
        }
        t->dtype = v->t.dtype;
        t->rank = v->t.rank;
        memcpy(t->dims, v->t.dims, sizeof t->dims);
        t->bytes = s4d_ir_tensor_bytes(&v->t);
        t->io_index = -1;
        switch (v->kind) {
        case S4D_VALUE_INPUT: t->place = S4D_PLACE_INPUT; break;
        case S4D_VALUE_CONST: t->place = S4D_PLACE_WEIGHT; break;
        case S4D_VALUE_ACTIVATION: t->place = S4D_PLACE_ARENA; break;
        }
        if (v->kind == S4D_VALUE_CONST) {
            wsize = s4d_align_up(wsize, S4D_PLAN_ALIGN);
            t->offset = wsize;
            wsize += t->bytes;
        }
    }
    for (int i = 0; i < g->num_inputs; i++) {
        int ti = vmap[g->inputs[i]];
        p->inputs[i] = ti;
        p->tensors[ti].io_index = i;
    }
    p->num_inputs = g->num_inputs;
    for (int i = 0; i < g->num_outputs; i++) {
        int ti = vmap[g->outputs[i]];
        s4d_plan_tensor *t = &p->tensors[ti];
        if (t->place == S4D_PLACE_INPUT) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                             "graph output '%s' is also a graph input; add an Identity node",
                             t->name);
            goto fail;
        }
        /* A constant output keeps its weight offset; the runtime copies it out. */
        t->const_output = t->place == S4D_PLACE_WEIGHT;
        t->place = S4D_PLACE_OUTPUT;
        t->io_index = i;
        p->outputs[i] = ti;
    }
    p->num_outputs = g->num_outputs;
    p->weights_size = wsize;
    p->weights = s4d_aligned_alloc((size_t)wsize);
    if (!p->weights) {
        st = OOM();
        goto fail;
    }
    for (int i = 0; i < g->num_values; i++) {
        if (vmap[i] < 0 || g->values[i].kind != S4D_VALUE_CONST)
            continue;
        const s4d_plan_tensor *t = &p->tensors[vmap[i]];
        if (t->bytes)
            memcpy(p->weights + t->offset, g->values[i].t.data, (size_t)t->bytes);
    }
    for (int i = 0; i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        s4d_plan_layer *l = &p->layers[p->num_layers++];
        st = copy_layer(l, n, vmap, err, errsz);
        if (st != S4D_OK)
            goto fail;
        if (l->workspace > p->workspace_size)
            p->workspace_size = l->workspace;
    }
    st = s4d_plan_memory(p, err, errsz);
    if (st != S4D_OK)
        goto fail;
    free(vmap);
    free(used);
    *out = p;
    return S4D_OK;
fail:
    free(vmap);
    free(used);
    s4d_plan_destroy(p);
    return st;
}
