/*
 * src/builder/builder.h - IR -> plan: the build pipeline.
 *
 *   input specs (--shapes)     fix symbolic dims, freeze shape-carrying inputs
 *   resolve                    one schema per node (src/ops) or a plugin creator
 *   dead nodes, plugin create
 *   infer + fold               shapes/dtypes/params; constant folding on the host
 *   placement                  a device per node: the target's kernel if it
 *                              supports the node, else the CPU when fallback is
 *                              allowed, else one error listing every such node
 *   fusions                    those the node's device has kernels for
 *   precision (fp16 builds)    float16 where the layer's kernel runs it and
 *                              neither a pin nor the accuracy guard keeps it
 *                              in float32; Cast layers at the borders
 *   lower                      tensors, layers, copy layers between devices,
 *                              memory plan per device, weights blob
 */
#ifndef S4D_BUILDER_H
#define S4D_BUILDER_H

#include "engine/plan.h"
#include "ir/ir.h"
#include "backend/backend.h"
#include "s4d/engine.h"

typedef struct s4d_build_config {
    s4d_device device;
    int fp16;
    int tf32;
    int fold_constants;
    int allow_fallback;
    void *registry; /* plugin registry; NULL: default */
    const s4d_input_spec *input_specs;
    int num_input_specs;
    /* fp16 builds (precision.c) */
    const s4d_layer_precision *layer_precisions;
    int num_layer_precisions;
    int obey_precisions;
    const char *const *guard_fp32; /* layers the accuracy guard keeps in float32 */
    int num_guard_fp32;
    s4d_conv_layout conv_layout; /* as asked; s4d_build_nhwc() resolves AUTO */
} s4d_build_config;

/* Whether the build makes 2-D convolutions channels-last (conv_layout, AUTO resolved). */
int s4d_build_nhwc(const s4d_build_config *cfg);

/*
 * Runs the pipeline above on g and lowers it to a plan. An unsupported model
 * is rejected with ONE message listing every unsupported (domain, op_type)
 * and the nodes that use it; nodes the target device cannot run, likewise.
 */
s4d_status s4d_build_plan(s4d_ir_graph *g, const s4d_build_config *cfg, s4d_plan **out, char *err,
                          size_t errsz);

/* Applies input specs to the graph's inputs (fix dims, freeze values). */
s4d_status s4d_apply_input_specs(s4d_ir_graph *g, const s4d_input_spec *specs, int count,
                                 char *err, size_t errsz);

/* The placement pass (placement.c). */
s4d_status s4d_pass_place(s4d_ir_graph *g, const s4d_build_config *cfg, char *err, size_t errsz);

/* Whether backend be can run node n as inferred (its kernel's supports(), or the plugin's
   negotiation); S4D_OK, else the reason in why. */
s4d_status s4d_node_supported(const s4d_ir_graph *g, const s4d_ir_node *n,
                              const struct s4d_backend *be, char *why, size_t whysz);

/* The same question with the node's tensors (e.g. as float16) and params (NULL: the
   node's) given. */
s4d_status s4d_node_supported_as(const s4d_ir_node *n, const struct s4d_backend *be,
                                 const s4d_tensor *in, s4d_tensor *out, void *params, char *why,
                                 size_t whysz);

/*
 * The precision pass (precision.c, docs/precision.md): chooses float16 layers
 * and inserts the Cast layers. *notes (malloc'd) summarises the choice for the
 * precision report.
 */
s4d_status s4d_pass_precision(s4d_ir_graph *g, const s4d_build_config *cfg, char **notes,
                              char *err, size_t errsz);

/*
 * IR -> plan: keeps live nodes and the values they touch, inserts copy layers
 * where a value crosses devices, copies constants into the weights blob,
 * plans each device's arena by liveness and takes ownership of plugin
 * instances and params (the graph's nodes lose them).
 */
s4d_status s4d_plan_from_ir(s4d_ir_graph *g, const s4d_build_config *cfg, s4d_plan **out,
                            char *err, size_t errsz);

/* Layer steps where each tensor is first written and last read (-1: never); a
   tensor's last read includes the reads of the views of it. S4D_OK or
   S4D_ERR_NO_MEMORY. */
s4d_status s4d_plan_lifetimes(const s4d_plan *p, int *first, int *last);

/*
 * Memory plan of one device: assigns arena offsets to that device's ARENA
 * tensors so that two tensors whose lifetimes overlap never overlap in
 * memory; sets arena_size[dev] and arena_size_unplanned[dev].
 */
s4d_status s4d_plan_memory(s4d_plan *p, int dev, char *err, size_t errsz);

#endif /* S4D_BUILDER_H */
