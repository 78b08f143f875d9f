/*
 * src/engine/plan.h - a built network as the runtime executes it and as the
 * engine file stores it: tensors with static shapes and placements, layers
 * in execution order, the weights blob and the memory plan.
 */
#ifndef S4D_ENGINE_PLAN_H
#define S4D_ENGINE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "ir/ir.h"

#define S4D_PLAN_ALIGN 64

/* Where a tensor's bytes live at run time. */
typedef enum s4d_placement {
    S4D_PLACE_ARENA = 0,  /* activation: context arena + offset */
    S4D_PLACE_WEIGHT = 1, /* constant: engine weights + offset */
    S4D_PLACE_INPUT = 2,  /* bound by the caller */
    S4D_PLACE_OUTPUT = 3  /* bound by the caller or the context's own buffer */
} s4d_placement;

typedef struct s4d_plan_tensor {
    char *name;
    s4d_dtype dtype;
    int rank;
    int64_t dims[S4D_MAX_RANK];
    uint64_t bytes;
    s4d_placement place;
    uint64_t offset;  /* ARENA / WEIGHT */
    int io_index;     /* INPUT / OUTPUT: index in inputs[] / outputs[] */
    int const_output; /* OUTPUT whose value is a weight at offset: copied out after a run */
} s4d_plan_tensor;

typedef struct s4d_plan_layer {
    char *name;
    s4d_layer_kind kind;
    s4d_device_kind device;
    char *domain;
    char *op_type;
    int opset;
    int num_attrs;
    s4d_attr *attrs;
    int num_inputs;
    int *inputs;   /* tensor indices; -1 for a missing optional input */
    int num_outputs;
    int *outputs;
    uint64_t workspace;
    /* Plugin layers: the key and the serialized instance. */
    char *plugin_namespace;
    char *plugin_name;
    char *plugin_version;
    uint8_t *payload;
    uint64_t payload_size;
    /* Resolved when the engine is built or loaded. */
    const s4d_op_def *def;
    void *plugin;
} s4d_plan_layer;

typedef struct s4d_plan {
    /* Build options recorded in the file. */
    s4d_device_kind device;
    int fp16;
    int num_tensors;
    s4d_plan_tensor *tensors;
    int num_layers;
    s4d_plan_layer *layers;
    int num_inputs;
    int *inputs;    /* tensor indices */
    int num_outputs;
    int *outputs;
    uint8_t *weights; /* 64-byte aligned; shared by contexts */
    uint64_t weights_size;
    uint64_t arena_size;          /* planned activation bytes */
    uint64_t arena_size_unplanned; /* sum of activation sizes without reuse */
    uint64_t workspace_size;      /* max over layers */
} s4d_plan;

void s4d_plan_destroy(s4d_plan *p);

/*
 * IR -> plan: keeps live nodes and the values they touch, copies constants
 * into the weights blob, plans the activation arena by liveness and takes
 * ownership of plugin instances (the graph's nodes lose them).
 */
s4d_status s4d_plan_from_ir(s4d_ir_graph *g, s4d_device_kind device, int fp16, s4d_plan **out,
                            char *err, size_t errsz);

/*
 * Memory plan: assigns arena offsets to ARENA tensors so that two tensors
 * whose lifetimes overlap never overlap in memory. first[i] / last[i] are
 * the layer steps where tensor i is produced and last read.
 */
s4d_status s4d_plan_memory(s4d_plan *p, char *err, size_t errsz);

/* Engine file (docs/engine-format.md). */
#define S4D_ENGINE_MAGIC "S4DENGIN"
#define S4D_ENGINE_FORMAT_VERSION 1u
#define S4D_ENGINE_HEADER_SIZE 32u

s4d_status s4d_plan_serialize(const s4d_plan *p, uint8_t **data, size_t *size, char *err,
                              size_t errsz);
/* Parses bytes into a plan; layers are not resolved (def/plugin NULL). */
s4d_status s4d_plan_deserialize(const uint8_t *data, size_t size, s4d_plan **out, char *err,
                                size_t errsz);

#endif /* S4D_ENGINE_PLAN_H */
