/*
 * src/engine/plan.h - a built network as the engine file stores it and the
 * runtime executes it: tensors with static shapes, devices and placements,
 * layers in execution order, the weights blob and the memory plan per
 * device. The builder makes plans (builder/builder.h), the engine file
 * writes and reads them (this folder), the runtime runs them.
 */
#ifndef S4D_ENGINE_PLAN_H
#define S4D_ENGINE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ir/ir.h"
#include "ops/op.h"

#define S4D_PLAN_ALIGN 64

/* Where a tensor's bytes live at run time. */
typedef enum s4d_placement {
    S4D_PLACE_ARENA = 0,  /* activation: the device's context arena + offset */
    S4D_PLACE_WEIGHT = 1, /* constant: the engine's weights (on each device that reads it) + offset */
    S4D_PLACE_INPUT = 2,  /* bound by the caller */
    S4D_PLACE_OUTPUT = 3, /* bound by the caller or the context's own buffer */
    S4D_PLACE_VIEW = 4    /* the bytes of tensor view_of (a view layer's output): no buffer */
} s4d_placement;

typedef struct s4d_plan_tensor {
    char *name;
    s4d_dtype dtype;
    int rank;
    int64_t dims[S4D_MAX_RANK];
    uint64_t bytes;
    s4d_device device;  /* ARENA / INPUT / OUTPUT: the device that holds it */
    s4d_placement place;
    uint64_t offset;    /* ARENA: in the device's arena; WEIGHT, constant OUTPUT and
                           frozen INPUT: in the weights blob */
    int io_index;       /* INPUT / OUTPUT: index in inputs[] / outputs[] */
    int const_output;   /* OUTPUT whose value is a weight at offset: copied out after a run */
    int frozen;         /* INPUT whose values were fixed at build (weights at offset) */
    int view_of;        /* VIEW: the tensor whose bytes it shares (the view layer's input 0),
                           itself a view, an arena tensor, a graph input or a non-constant
                           graph output; -1 otherwise. The file stores it in offset. */
} s4d_plan_tensor;

typedef struct s4d_plan_layer {
    char *name;
    s4d_layer_kind kind;
    s4d_device device;
    s4d_dtype precision;       /* the dtype it computes in (its first output's) */
    s4d_tensor_format format;
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
    /* The kernel's stored choice (kernel save()); NULL/0 when none. */
    uint8_t *backend_payload;
    uint64_t backend_payload_size;
    /* Resolved when the engine is built or loaded, never stored. */
    const s4d_op_schema *schema;
    void *params;              /* schema params_size bytes, from infer */
    const s4d_kernel *kernel;
    void *kernel_state;        /* from kernel prepare(); destroyed with the engine */
    void *plugin;
} s4d_plan_layer;

typedef struct s4d_plan {
    /* Build options recorded in the file. */
    s4d_device device;       /* the target */
    int fp16;
    int tf32;
    int allow_fallback;
    s4d_target_info target;  /* the device the kernels were chosen on */
    char library_version[32];
    int num_tensors;
    s4d_plan_tensor *tensors;
    int num_layers;
    s4d_plan_layer *layers;
    int num_inputs;
    int *inputs;    /* tensor indices */
    int num_outputs;
    int *outputs;
    uint8_t *weights; /* 64-byte aligned host copy; devices get their own */
    uint64_t weights_size;
    /* Per device (index = s4d_device): planned activation bytes, the same
       without reuse, and the largest layer workspace. */
    uint64_t arena_size[S4D_NUM_DEVICES];
    uint64_t arena_size_unplanned[S4D_NUM_DEVICES];
    uint64_t workspace_size[S4D_NUM_DEVICES];
    /* fp16 builds: what the precision pass and the accuracy guard chose, as
       text (docs/precision.md); NULL for a float32 engine. Stored in the
       optional PREC section. */
    char *precision_report;
} s4d_plan;

/* Frees the plan, its layers' params and plugin instances (not kernel states). */
void s4d_plan_destroy(s4d_plan *p);

/*
 * Views: a layer whose output has the same bytes as its input 0 (Reshape,
 * Flatten, Squeeze, Unsqueeze, Identity, Cast and CastLike to the same dtype,
 * Dropout in inference) may have that output placed as a VIEW of the input:
 * it shares the input's buffer and the layer runs no kernel.
 *
 * s4d_plan_view_op: whether layer l computes such a copy, judged from its op,
 * its inferred params (Dropout) and the dtypes and sizes of its tensors.
 */
int s4d_plan_view_op(const s4d_plan *p, const s4d_plan_layer *l);

/* Whether layer l's output is a view (the layer runs nothing). */
int s4d_plan_layer_is_view(const s4d_plan *p, const s4d_plan_layer *l);

/* Per tensor, the tensor whose buffer it uses: itself unless it is a view; -1
   for a chain of views that does not end at a tensor with a buffer (the loader
   refuses those). root has num_tensors entries. */
void s4d_plan_view_roots(const s4d_plan *p, int *root);

/*
 * Concats in place: a Concat whose inputs are consecutive byte runs of its
 * output (every dim before the axis is 1, linear layout) can have the memory
 * plan put each input's buffer where its run lies in the output's, so that
 * the layers producing the inputs write the output and the Concat's copy
 * would leave every byte as it is.
 *
 * s4d_plan_concat_contiguous: whether Concat layer l's output is its inputs'
 * bytes one after another (the op, its axis attribute and the tensors' dims).
 *
 * s4d_plan_concat_in_place: whether, moreover, every input's buffer (root[]
 * from s4d_plan_view_roots) is an arena tensor on the layer's device at the
 * output's arena offset plus the bytes of the inputs before it, the output
 * being an arena tensor there too. Judged from the offsets alone, so a file
 * that places tensors so is run the same way whoever made it: skipping the
 * copy is exact, as the copy would write the bytes already there.
 */
int s4d_plan_concat_contiguous(const s4d_plan *p, const s4d_plan_layer *l);
int s4d_plan_concat_in_place(const s4d_plan *p, const s4d_plan_layer *l, const int *root);

/* Per layer, whether it runs nothing: a view, or a Concat in place. runs_nothing
   has num_layers entries; S4D_OK or S4D_ERR_NO_MEMORY. */
s4d_status s4d_plan_layers_elided(const s4d_plan *p, unsigned char *runs_nothing);

/* Engine file (docs/engine-format.md). */
#define S4D_ENGINE_MAGIC "S4DENGIN"
#define S4D_ENGINE_FORMAT_VERSION 2u
#define S4D_ENGINE_HEADER_SIZE 40u

s4d_status s4d_plan_serialize(const s4d_plan *p, uint8_t **data, size_t *size, char *err,
                              size_t errsz);
/*
 * Parses bytes into a plan. Every read is bounds-checked and every record
 * checked against the others (indices, placements, sizes, alignment, the
 * memory plan's lifetimes); layers are not resolved (schema/kernel/plugin
 * NULL): the runtime re-infers each layer against its schema when it loads.
 */
s4d_status s4d_plan_deserialize(const uint8_t *data, size_t size, s4d_plan **out, char *err,
                                size_t errsz);

/*
 * Checks that the memory plan of device dev is sound: every arena tensor of
 * that device fits in arena_size and no two tensors whose lifetimes overlap
 * share bytes. Used by the builder after planning and by the loader.
 */
s4d_status s4d_plan_check_memory(const s4d_plan *p, int dev, char *err, size_t errsz);

#endif /* S4D_ENGINE_PLAN_H */
