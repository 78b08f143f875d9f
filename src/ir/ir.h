/*
 * src/ir/ir.h - the engine's intermediate representation: a graph of
 * values (tensors with static dtype and shape) and nodes, built by the ONNX
 * importer, transformed by the passes and lowered by the builder.
 *
 * Values and nodes live in arrays owned by the graph; nodes refer to values
 * by index (-1 for a missing optional input). Passes mark nodes dead rather
 * than removing them so indices stay stable until the builder compacts.
 */
#ifndef S4D_IR_H
#define S4D_IR_H

#include <stddef.h>
#include <stdint.h>

#include "ops/op.h"
#include "s4d/plugin.h"
#include "s4d/types.h"

typedef enum s4d_value_kind {
    S4D_VALUE_ACTIVATION = 0, /* produced by a node at run time */
    S4D_VALUE_INPUT = 1,      /* a graph input bound by the caller */
    S4D_VALUE_CONST = 2       /* an initializer, a Constant node or a folded value */
} s4d_value_kind;

typedef struct s4d_ir_value {
    char *name;
    s4d_value_kind kind;
    s4d_tensor t;     /* dtype, rank, dims; data owned (malloc'd) when CONST */
    int shape_known;  /* set once inference or the importer fixed dtype/shape */
    int frozen;       /* INPUT whose values were given at build: t.data holds them and
                         inference treats it as a constant */
    char *symbolic;   /* INPUT with dimensions the model leaves open: which ones, for
                         messages (e.g. "axis 0 'batch'"); NULL once fixed */
    int is_output;    /* a graph output */
    int producer;     /* node index, or -1 */
} s4d_ir_value;

typedef enum s4d_layer_kind {
    S4D_LAYER_OP = 0,     /* an op with a schema, run by its device's kernel */
    S4D_LAYER_PLUGIN = 1, /* a plugin instance from the registry */
    S4D_LAYER_COPY = 2    /* a copy between devices the placement pass inserted */
} s4d_layer_kind;

/* Devices an engine can use at once: the target and the CPU (fallback). */
#define S4D_NUM_DEVICES 2

typedef struct s4d_ir_node {
    char *name;
    char *domain;   /* "" for the default ONNX domain */
    char *op_type;
    int opset;      /* the model's opset for the node's domain */
    int num_attrs;
    s4d_attr *attrs;
    int num_inputs;
    int *inputs;    /* value indices; -1 for a missing optional input */
    int num_outputs;
    int *outputs;   /* value indices; -1 for an unused optional output */
    s4d_layer_kind kind;
    s4d_device device;          /* set by the placement pass */
    const s4d_op_schema *schema; /* S4D_LAYER_OP: resolved once, by the builder */
    void *params;               /* S4D_LAYER_OP: schema params_size bytes, from infer */
    /* S4D_LAYER_PLUGIN: key and the live instance (owned by the node). */
    char *plugin_namespace;
    char *plugin_name;
    char *plugin_version;
    void *plugin;               /* opaque instance; see builder/plugin_bridge.h */
    size_t workspace;           /* bytes, set by inference */
    int dead;
} s4d_ir_node;

typedef struct s4d_ir_opset {
    char *domain;
    int version;
} s4d_ir_opset;

typedef struct s4d_ir_graph {
    s4d_ir_value *values;
    int num_values, cap_values;
    s4d_ir_node *nodes;
    int num_nodes, cap_nodes;
    int *inputs;   /* graph inputs (value indices), in model order */
    int num_inputs;
    int *outputs;  /* graph outputs, in model order */
    int num_outputs;
    s4d_ir_opset *opsets;
    int num_opsets;
} s4d_ir_graph;

s4d_ir_graph *s4d_ir_graph_create(void);
void s4d_ir_graph_destroy(s4d_ir_graph *g);

/* Appends a value (name copied); returns its index or -1 when out of memory. */
int s4d_ir_add_value(s4d_ir_graph *g, const char *name, s4d_value_kind kind);
/* Appends a zeroed node; returns its index or -1 when out of memory. */
int s4d_ir_add_node(s4d_ir_graph *g);

/* The model's opset for domain ("" and "ai.onnx" are the same); -1 when not imported. */
int s4d_ir_opset_version(const s4d_ir_graph *g, const char *domain);

/* Frees what an attribute owns (not the struct itself). */
void s4d_attr_clear(s4d_attr *a);
/* Deep copy of an attribute into dst; 0 on success. */
int s4d_attr_copy(s4d_attr *dst, const s4d_attr *src);

/* Bytes of a tensor's data (numel * element size); 0 for unknown dtypes. */
size_t s4d_ir_tensor_bytes(const s4d_tensor *t);

/* True for "" and "ai.onnx". */
int s4d_ir_is_onnx_domain(const char *domain);

/*
 * Fills ctx for a build-time call of node n's infer() or workspace_size():
 * the node's op, schema, params and attributes, in and out as its tensors
 * (borrowed for the life of ctx), msg[msg_size] for the error message; the
 * run-time fields are zero.
 */
void s4d_ir_node_ctx(const s4d_ir_node *n, const s4d_tensor *in, s4d_tensor *out, char *msg,
                     size_t msg_size, s4d_op_ctx *ctx);

/*
 * The passes (src/passes/). Each returns S4D_OK or a status with a message
 * in err naming the node or value at fault.
 *
 * s4d_pass_infer runs every live node's infer() in topological order (node
 * order must be topological; the importer checks it) and folds nodes whose
 * inputs are all constant when fold is non-zero.
 */
s4d_status s4d_pass_infer_and_fold(s4d_ir_graph *g, int fold, char *err, size_t errsz);
/* Marks dead every node none of whose outputs reaches a graph output. */
s4d_status s4d_pass_remove_dead(s4d_ir_graph *g, char *err, size_t errsz);

#endif /* S4D_IR_H */
