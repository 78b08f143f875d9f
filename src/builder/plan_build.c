/*
 * IR -> plan: compacts the live part of the graph into the form the runtime
 * executes and the engine file stores, and makes every device crossing an
 * explicit copy layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "engine/plan.h"
#include "registry/plugin_bridge.h"
#include "util/util.h"

#define OOM() s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory while building the plan")

/* A growing plan under construction. */
typedef struct lower {
    s4d_plan *p;
    int cap_tensors, cap_layers;
    int *dev_copy[S4D_NUM_DEVICES]; /* per tensor: its copy on that device, or -1 */
} lower;

static int add_tensor(lower *lw, const char *name)
{
    s4d_plan *p = lw->p;
    if (p->num_tensors == lw->cap_tensors) {
        int cap = lw->cap_tensors ? lw->cap_tensors * 2 : 64;
        s4d_plan_tensor *t = realloc(p->tensors, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        p->tensors = t;
        for (int d = 0; d < S4D_NUM_DEVICES; d++) {
            int *c = realloc(lw->dev_copy[d], (size_t)cap * sizeof(int));
            if (!c)
                return -1;
            lw->dev_copy[d] = c;
        }
        lw->cap_tensors = cap;
    }
    int i = p->num_tensors;
    memset(&p->tensors[i], 0, sizeof p->tensors[i]);
    p->tensors[i].name = s4d_strdup(name);
    p->tensors[i].io_index = -1;
    p->tensors[i].view_of = -1;
    for (int d = 0; d < S4D_NUM_DEVICES; d++)
        lw->dev_copy[d][i] = -1;
    if (!p->tensors[i].name)
        return -1;
    p->num_tensors++;
    return i;
}

static s4d_plan_layer *add_layer(lower *lw)
{
    s4d_plan *p = lw->p;
    if (p->num_layers == lw->cap_layers) {
        int cap = lw->cap_layers ? lw->cap_layers * 2 : 64;
        s4d_plan_layer *l = realloc(p->layers, (size_t)cap * sizeof *l);
        if (!l)
            return NULL;
        p->layers = l;
        lw->cap_layers = cap;
    }
    s4d_plan_layer *l = &p->layers[p->num_layers++];
    memset(l, 0, sizeof *l);
    return l;
}

/* A copy layer from tensor src to a new tensor on device dev; returns the new tensor. */
static int add_copy(lower *lw, int src, s4d_device dev, int into)
{
    s4d_plan *p = lw->p;
    int dst = into;
    if (dst < 0) {
        char name[512];
        snprintf(name, sizeof name, "%s@%s", p->tensors[src].name, s4d_device_name(dev));
        dst = add_tensor(lw, name);
        if (dst < 0)
            return -1;
        s4d_plan_tensor *t = &p->tensors[dst];
        const s4d_plan_tensor *s = &p->tensors[src];
        t->dtype = s->dtype;
        t->rank = s->rank;
        memcpy(t->dims, s->dims, sizeof t->dims);
        t->bytes = s->bytes;
        t->device = dev;
        t->place = S4D_PLACE_ARENA;
    }
    s4d_plan_layer *l = add_layer(lw);
    if (!l)
        return -1;
    char name[512];
    snprintf(name, sizeof name, "copy %s -> %s", p->tensors[src].name, s4d_device_name(dev));
    l->name = s4d_strdup(name);
    l->kind = S4D_LAYER_COPY;
    /* A copy runs on the side that is not the host: that backend owns the stream. */
    l->device = dev == S4D_DEVICE_CPU ? p->tensors[src].device : dev;
    l->precision = p->tensors[src].dtype;
    l->domain = s4d_strdup("s4d");
    l->op_type = s4d_strdup("Copy");
    l->opset = 1;
    l->inputs = malloc(sizeof(int));
    l->outputs = malloc(sizeof(int));
    l->attrs = calloc(1, sizeof(s4d_attr));
    if (!l->name || !l->domain || !l->op_type || !l->inputs || !l->outputs || !l->attrs)
        return -1;
    l->num_inputs = l->num_outputs = 1;
    l->inputs[0] = src;
    l->outputs[0] = dst;
    if (into < 0)
        lw->dev_copy[dev][src] = dst;
    return dst;
}

static s4d_status copy_layer(s4d_plan_layer *l, s4d_ir_node *n, const int *tmap, char *err,
                             size_t errsz)
{
    l->name = s4d_strdup(n->name);
    l->domain = s4d_strdup(n->domain);
    l->op_type = s4d_strdup(n->op_type);
    l->kind = n->kind;
    l->device = n->device;
    l->opset = n->opset;
    l->format = S4D_FORMAT_LINEAR;
    l->inputs = calloc((size_t)n->num_inputs + 1, sizeof(int));
    l->outputs = calloc((size_t)n->num_outputs + 1, sizeof(int));
    l->attrs = calloc((size_t)n->num_attrs + 1, sizeof(s4d_attr));
    if (!l->name || !l->domain || !l->op_type || !l->inputs || !l->outputs || !l->attrs)
        return OOM();
    l->num_inputs = n->num_inputs;
    for (int i = 0; i < n->num_inputs; i++)
        l->inputs[i] = n->inputs[i] < 0 ? -1 : tmap[n->inputs[i]];
    l->num_outputs = n->num_outputs;
    for (int i = 0; i < n->num_outputs; i++)
        l->outputs[i] = tmap[n->outputs[i]];
    switch (n->kind) {
    case S4D_LAYER_OP:
        /* Plugin layers keep their fields in the payload; ops keep their attributes so that
           the loader can infer them again. */
        for (int i = 0; i < n->num_attrs; i++) {
            if (s4d_attr_copy(&l->attrs[i], &n->attrs[i]) != 0)
                return OOM();
            l->num_attrs = i + 1;
        }
        l->schema = n->schema;
        l->params = n->params;
        n->params = NULL;
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
    case S4D_LAYER_COPY: break;
    }
    return S4D_OK;
}

/*
 * Makes the output of each layer that only copies bytes (s4d_plan_view_op) a
 * view of its input where sharing the buffer is safe:
 *  - the output is an activation: a graph output keeps its own buffer (the
 *    caller binds it, or reads it after the run), so its layer still copies;
 *  - the input is an activation, a view, a graph input or a graph output that
 *    a layer writes. Nothing writes any of these after its producer (no kernel
 *    writes its inputs, callers must not bind an output over an input), so
 *    every reader of the view sees the bytes the producer left. Constants stay
 *    copied: they live in each device's weights, not in the layer's buffers;
 *  - all three (input, output, layer) are on one device.
 * Layers are visited in execution order, so a view of a view is marked after
 * the view it reads: chains share one root.
 */
static void mark_views(s4d_plan *p)
{
    for (int s = 0; s < p->num_layers; s++) {
        const s4d_plan_layer *l = &p->layers[s];
        if (!s4d_plan_view_op(p, l))
            continue;
        s4d_plan_tensor *in = &p->tensors[l->inputs[0]], *out = &p->tensors[l->outputs[0]];
        int readable = in->place == S4D_PLACE_ARENA || in->place == S4D_PLACE_VIEW ||
                       in->place == S4D_PLACE_INPUT ||
                       (in->place == S4D_PLACE_OUTPUT && !in->const_output);
        if (out->place != S4D_PLACE_ARENA || !readable || in->device != l->device ||
            out->device != l->device)
            continue;
        out->place = S4D_PLACE_VIEW;
        out->view_of = l->inputs[0];
        out->offset = 0;
    }
}

s4d_status s4d_plan_from_ir(s4d_ir_graph *g, const s4d_build_config *cfg, s4d_plan **out,
                            char *err, size_t errsz)
{
    *out = NULL;
    lower lw;
    memset(&lw, 0, sizeof lw);
    s4d_plan *p = calloc(1, sizeof *p);
    int *tmap = malloc(((size_t)g->num_values + 1) * sizeof(int));
    char *used = calloc((size_t)g->num_values + 1, 1);
    s4d_status st = S4D_OK;
    if (!p || !tmap || !used) {
        free(p);
        p = NULL;
        st = OOM();
        goto fail;
    }
    lw.p = p;
    p->device = cfg->device;
    p->fp16 = cfg->fp16;
    p->tf32 = cfg->tf32;
    p->allow_fallback = cfg->allow_fallback;
    for (int i = 0; i < g->num_inputs; i++)
        used[g->inputs[i]] = 1;
    for (int i = 0; i < g->num_outputs; i++)
        used[g->outputs[i]] = 1;
    for (int i = 0; i < g->num_nodes; i++) {
        const s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->num_inputs; j++)
            if (n->inputs[j] >= 0)
                used[n->inputs[j]] = 1;
        for (int j = 0; j < n->num_outputs; j++)
            used[n->outputs[j]] = 1;
    }
    p->inputs = calloc((size_t)g->num_inputs + 1, sizeof(int));
    p->outputs = calloc((size_t)g->num_outputs + 1, sizeof(int));
    if (!p->inputs || !p->outputs) {
        st = OOM();
        goto fail;
    }
    /* Tensors, and the weights' sizes and offsets. */
    uint64_t wsize = 0;
    for (int i = 0; i < g->num_values; i++) {
        tmap[i] = -1;
        if (!used[i])
            continue;
        const s4d_ir_value *v = &g->values[i];
        if (!v->shape_known) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "tensor '%s' has no inferred shape",
                             v->name);
            goto fail;
        }
        int ti = add_tensor(&lw, v->name);
        if (ti < 0) {
            st = OOM();
            goto fail;
        }
        tmap[i] = ti;
        s4d_plan_tensor *t = &p->tensors[ti];
        t->dtype = v->t.dtype;
        t->rank = v->t.rank;
        memcpy(t->dims, v->t.dims, sizeof t->dims);
        t->bytes = s4d_ir_tensor_bytes(&v->t);
        t->device = v->producer >= 0 ? g->nodes[v->producer].device : cfg->device;
        switch (v->kind) {
        case S4D_VALUE_INPUT: t->place = S4D_PLACE_INPUT; break;
        case S4D_VALUE_CONST: t->place = S4D_PLACE_WEIGHT; break;
        case S4D_VALUE_ACTIVATION: t->place = S4D_PLACE_ARENA; break;
        }
        t->frozen = v->kind == S4D_VALUE_INPUT && v->frozen;
        if (v->kind == S4D_VALUE_CONST || t->frozen) {
            wsize = s4d_align_up(wsize, S4D_PLAN_ALIGN);
            t->offset = wsize;
            wsize += t->bytes;
        }
    }
    for (int i = 0; i < g->num_inputs; i++) {
        int ti = tmap[g->inputs[i]];
        p->inputs[i] = ti;
        p->tensors[ti].io_index = i;
        p->tensors[ti].device = cfg->device;
    }
    p->num_inputs = g->num_inputs;
    /* Graph outputs live on the target device; one made on another device gets an
       arena tensor there and a copy into the output. */
    int *out_src = calloc((size_t)g->num_outputs + 1, sizeof(int));
    if (!out_src) {
        st = OOM();
        goto fail;
    }
    for (int i = 0; i < g->num_outputs; i++) {
        int ti = tmap[g->outputs[i]];
        s4d_plan_tensor *t = &p->tensors[ti];
        out_src[i] = -1;
        if (t->place == S4D_PLACE_INPUT) {
            free(out_src);
            st = s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                             "graph output '%s' is also a graph input; add an Identity node",
                             t->name);
            goto fail;
        }
        for (int j = 0; j < i; j++) {
            if (p->outputs[j] == ti) {
                free(out_src);
                st = s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                                 "graph output '%s' is listed twice", t->name);
                goto fail;
            }
        }
        if (t->place == S4D_PLACE_ARENA && t->device != cfg->device) {
            /* The producer writes a tensor of its own device; the output is a copy. */
            char name[512];
            snprintf(name, sizeof name, "%s@%s", t->name, s4d_device_name(t->device));
            int src = add_tensor(&lw, name);
            if (src < 0) {
                free(out_src);
                st = OOM();
                goto fail;
            }
            t = &p->tensors[ti];
            s4d_plan_tensor *s = &p->tensors[src];
            s->dtype = t->dtype;
            s->rank = t->rank;
            memcpy(s->dims, t->dims, sizeof s->dims);
            s->bytes = t->bytes;
            s->device = t->device;
            s->place = S4D_PLACE_ARENA;
            out_src[i] = src;
            tmap[g->outputs[i]] = src;
        }
        /* A constant output keeps its weight offset; the runtime copies it out. */
        t->const_output = t->place == S4D_PLACE_WEIGHT;
        t->place = S4D_PLACE_OUTPUT;
        t->device = cfg->device;
        t->io_index = i;
        p->outputs[i] = ti;
    }
    p->num_outputs = g->num_outputs;
    p->weights_size = wsize;
    p->weights = s4d_aligned_alloc((size_t)wsize);
    if (!p->weights) {
        free(out_src);
        st = OOM();
        goto fail;
    }
    for (int i = 0; i < g->num_values; i++) {
        const s4d_ir_value *v = &g->values[i];
        int ti = tmap[i];
        if (ti < 0 || (v->kind != S4D_VALUE_CONST && !v->frozen))
            continue;
        const s4d_plan_tensor *t = &p->tensors[ti];
        if (t->bytes)
            memcpy(p->weights + t->offset, v->t.data, (size_t)t->bytes);
    }
    for (int i = 0; i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        /* Inputs that live on another device come through a copy layer. */
        for (int j = 0; j < n->num_inputs; j++) {
            int v = n->inputs[j];
            if (v < 0)
                continue;
            int ti = tmap[v];
            const s4d_plan_tensor *t = &p->tensors[ti];
            if (t->place == S4D_PLACE_WEIGHT || t->device == n->device)
                continue;
            if (lw.dev_copy[n->device][ti] < 0 && add_copy(&lw, ti, n->device, -1) < 0) {
                free(out_src);
                st = OOM();
                goto fail;
            }
        }
        s4d_plan_layer *l = add_layer(&lw);
        if (!l) {
            free(out_src);
            st = OOM();
            goto fail;
        }
        st = copy_layer(l, n, tmap, err, errsz);
        if (st != S4D_OK) {
            free(out_src);
            goto fail;
        }
        for (int j = 0; j < l->num_inputs; j++) {
            int ti = l->inputs[j];
            if (ti >= 0 && p->tensors[ti].place != S4D_PLACE_WEIGHT &&
                p->tensors[ti].device != l->device)
                l->inputs[j] = lw.dev_copy[l->device][ti];
        }
        l->precision = l->num_outputs > 0 ? p->tensors[l->outputs[0]].dtype : S4D_DTYPE_FLOAT32;
        /* Outputs made on another device: copy into the graph output right away. */
        for (int j = 0; j < l->num_outputs; j++) {
            for (int o = 0; o < p->num_outputs; o++) {
                if (out_src[o] >= 0 && l->outputs[j] == out_src[o] &&
                    add_copy(&lw, out_src[o], cfg->device, p->outputs[o]) < 0) {
                    free(out_src);
                    st = OOM();
                    goto fail;
                }
            }
        }
    }
    free(out_src);
    mark_views(p);
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        st = s4d_plan_memory(p, d, err, errsz);
        if (st == S4D_OK)
            st = s4d_plan_check_memory(p, d, err, errsz);
        if (st != S4D_OK)
            goto fail;
    }
    for (int d = 0; d < S4D_NUM_DEVICES; d++)
        free(lw.dev_copy[d]);
    free(tmap);
    free(used);
    *out = p;
    return S4D_OK;
fail:
    for (int d = 0; d < S4D_NUM_DEVICES; d++)
        free(lw.dev_copy[d]);
    free(tmap);
    free(used);
    s4d_plan_destroy(p);
    return st;
}
