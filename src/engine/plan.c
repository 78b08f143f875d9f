/* The plan's lifetime: see plan.h. */
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "ops/extra.h"
#include "registry/plugin_bridge.h"
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
        free(l->backend_payload);
        free(l->params);
        if (l->plugin)
            s4d_bridge_destroy(l->plugin);
    }
    free(p->layers);
    free(p->inputs);
    free(p->outputs);
    s4d_aligned_free(p->weights);
    free(p->precision_report);
    free(p);
}

int s4d_plan_view_op(const s4d_plan *p, const s4d_plan_layer *l)
{
    if (l->kind != S4D_LAYER_OP || !s4d_ir_is_onnx_domain(l->domain) || l->num_inputs < 1 ||
        l->inputs[0] < 0 || l->num_outputs != 1)
        return 0;
    const s4d_plan_tensor *in = &p->tensors[l->inputs[0]], *out = &p->tensors[l->outputs[0]];
    if (in->dtype != out->dtype || in->bytes != out->bytes)
        return 0;
    static const char *const reshapes[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                           "Identity", "Cast", "CastLike"};
    for (size_t i = 0; i < sizeof reshapes / sizeof reshapes[0]; i++)
        if (strcmp(l->op_type, reshapes[i]) == 0)
            return 1;
    /* Dropout copies its input unless training_mode is only known at run time (which may
       make it refuse to run); a mask output would be a second output. */
    if (strcmp(l->op_type, "Dropout") == 0 && l->params)
        return ((const s4d_dropout_params *)l->params)->training >= 0;
    return 0;
}

int s4d_plan_layer_is_view(const s4d_plan *p, const s4d_plan_layer *l)
{
    return l->kind == S4D_LAYER_OP && l->num_outputs == 1 &&
           p->tensors[l->outputs[0]].place == S4D_PLACE_VIEW;
}

int s4d_plan_concat_contiguous(const s4d_plan *p, const s4d_plan_layer *l)
{
    if (l->kind != S4D_LAYER_OP || !s4d_ir_is_onnx_domain(l->domain) || !l->op_type ||
        strcmp(l->op_type, "Concat") != 0 || l->format != S4D_FORMAT_LINEAR ||
        l->num_outputs != 1 || l->outputs[0] < 0 || l->num_inputs < 1)
        return 0;
    const s4d_plan_tensor *out = &p->tensors[l->outputs[0]];
    const s4d_attr *axis_attr = NULL;
    for (int i = 0; i < l->num_attrs; i++)
        if (l->attrs[i].name && strcmp(l->attrs[i].name, "axis") == 0)
            axis_attr = &l->attrs[i];
    if (!axis_attr || axis_attr->type != S4D_ATTR_INT || out->rank < 1)
        return 0;
    int64_t axis = axis_attr->i < 0 ? axis_attr->i + out->rank : axis_attr->i;
    if (axis < 0 || axis >= out->rank)
        return 0;
    for (int64_t d = 0; d < axis; d++)
        if (out->dims[d] != 1)
            return 0;
    uint64_t sum = 0;
    for (int k = 0; k < l->num_inputs; k++) {
        int t = l->inputs[k];
        if (t < 0 || p->tensors[t].dtype != out->dtype)
            return 0;
        sum += p->tensors[t].bytes;
    }
    return sum == out->bytes;
}

int s4d_plan_concat_in_place(const s4d_plan *p, const s4d_plan_layer *l, const int *root)
{
    if (!s4d_plan_concat_contiguous(p, l))
        return 0;
    const s4d_plan_tensor *out = &p->tensors[l->outputs[0]];
    if (out->place != S4D_PLACE_ARENA || out->device != l->device)
        return 0;
    uint64_t at = out->offset;
    for (int k = 0; k < l->num_inputs; k++) {
        const s4d_plan_tensor *in = &p->tensors[l->inputs[k]];
        int r = root[l->inputs[k]];
        if (r < 0 || r == l->outputs[0])
            return 0;
        const s4d_plan_tensor *rt = &p->tensors[r];
        if (rt->place != S4D_PLACE_ARENA || rt->device != l->device || rt->offset != at ||
            rt->bytes != in->bytes)
            return 0;
        at += in->bytes;
    }
    return 1;
}

s4d_status s4d_plan_layers_elided(const s4d_plan *p, unsigned char *runs_nothing)
{
    int *root = malloc(((size_t)p->num_tensors + 1) * sizeof(int));
    if (!root)
        return S4D_ERR_NO_MEMORY;
    s4d_plan_view_roots(p, root);
    for (int i = 0; i < p->num_layers; i++) {
        const s4d_plan_layer *l = &p->layers[i];
        runs_nothing[i] = (unsigned char)(s4d_plan_layer_is_view(p, l) ||
                                          s4d_plan_concat_in_place(p, l, root));
    }
    free(root);
    return S4D_OK;
}

void s4d_plan_view_roots(const s4d_plan *p, int *root)
{
    enum { UNKNOWN = -2, VISITING = -3 };
    int n = p->num_tensors;
    for (int i = 0; i < n; i++)
        root[i] = p->tensors[i].place == S4D_PLACE_VIEW ? UNKNOWN : i;
    /* Each walk stops at a tensor already resolved, so every tensor is visited a bounded
       number of times: linear in the tensors even for a file with one long chain. */
    for (int i = 0; i < n; i++) {
        int t = i;
        while (t >= 0 && t < n && root[t] == UNKNOWN) {
            root[t] = VISITING;
            t = p->tensors[t].view_of;
        }
        int r = t >= 0 && t < n && root[t] >= 0 ? root[t] : -1; /* -1: a cycle or a bad index */
        for (t = i; t >= 0 && t < n && root[t] == VISITING; t = p->tensors[t].view_of)
            root[t] = r;
    }
}
