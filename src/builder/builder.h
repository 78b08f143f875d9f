/*
 * src/builder/builder.h - IR -> plan: op resolution against the backend's
 * op table and the plugin registry, the passes, the memory plan.
 */
#ifndef S4D_BUILDER_H
#define S4D_BUILDER_H

#include "engine/plan.h"
#include "ir/ir.h"

typedef struct s4d_build_config {
    s4d_device_kind device;
    int fp16;
    int fold_constants;
    void *registry; /* plugin registry; NULL: default */
} s4d_build_config;

/*
 * Resolves every node (op table first for the default ONNX domain, then the
 * plugin registry; custom domains go to the registry), creates plugin
 * instances, runs inference/folding and dead-node removal, and lowers to a
 * plan. An unsupported model is rejected with ONE message listing every
 * unsupported (domain, op_type) and the nodes that use it.
 */
s4d_status s4d_build_plan(s4d_ir_graph *g, const s4d_build_config *cfg, s4d_plan **out, char *err,
                          size_t errsz);

#endif /* S4D_BUILDER_H */
