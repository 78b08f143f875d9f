/* The plan's lifetime: see plan.h. */
#include <stdlib.h>

#include "engine/plan.h"
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
