/*
 * src/registry/plugin_bridge.h - the one place where the builder, the engine
 * file and the backends meet the plugin registry. Everything plugin-shaped the
 * engine does goes through these functions, so the IR, the engine file and
 * the runtime see a plugin instance only as an opaque pointer. The bridge
 * speaks every plugin ABI version the host accepts: it hands an ABI 1
 * instance the descriptor layout of ABI 1.
 *
 * registry: a registry handle, or NULL for the process default registry.
 */
#ifndef S4D_REGISTRY_PLUGIN_BRIDGE_H
#define S4D_REGISTRY_PLUGIN_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "ops/op.h"
#include "util/util.h"

/*
 * Whether a creator exists for the node's key. Sets the node's
 * plugin_namespace / plugin_name / plugin_version from op_type, the
 * plugin_version attribute (default "1") and plugin_namespace attribute or
 * else the domain. Returns S4D_OK, or S4D_ERR_NOT_FOUND with the registry's
 * message (naming the key and listing registered creators) in err.
 */
s4d_status s4d_bridge_lookup(void *registry, s4d_ir_node *n, char *err, size_t errsz);

/* Creates the node's instance from its attributes (fields checked). */
s4d_status s4d_bridge_create(void *registry, s4d_ir_node *n, char *err, size_t errsz);

/*
 * Build phase: output dtypes/shapes and the workspace size for these inputs
 * on device, and with negotiate_formats the format negotiation too (once the
 * device is placed): it keeps every tensor LINEAR in the dtype inference gave
 * it (the engine's tensors are dense), asking supports_format (ABI 2)
 * position by position, else supports once.
 */
s4d_status s4d_bridge_infer(void *plugin, const char *node_name, s4d_device device,
                            int negotiate_formats, const s4d_tensor *inputs, int num_inputs,
                            s4d_tensor *outputs, int num_outputs, size_t *workspace, char *err,
                            size_t errsz);

/* Whether the instance runs on device with these (inferred) tensors; the reason in err. */
s4d_status s4d_bridge_supports(void *plugin, const char *node_name, s4d_device device,
                               const s4d_tensor *inputs, int num_inputs,
                               const s4d_tensor *outputs, int num_outputs, char *err,
                               size_t errsz);

/* Appends the instance's payload bytes to w. */
s4d_status s4d_bridge_serialize(void *plugin, s4d_wbuf *w, char *err, size_t errsz);

/* Recreates an instance from its payload. */
s4d_status s4d_bridge_deserialize(void *registry, const char *ns, const char *name,
                                  const char *version, const void *payload, size_t size,
                                  void **plugin, char *err, size_t errsz);

/* configure (ABI 2; a no-op for instances without it) with the final tensors. */
s4d_status s4d_bridge_configure(void *plugin, const char *node_name, s4d_device device,
                                const s4d_tensor *inputs, int num_inputs,
                                const s4d_tensor *outputs, int num_outputs, void *stream,
                                char *err, size_t errsz);

/* attach / detach (ABI 2; no-ops without them). */
s4d_status s4d_bridge_attach(void *plugin, const char *node_name, s4d_device device, void *stream,
                             void **context_state, char *err, size_t errsz);
void s4d_bridge_detach(void *plugin, void *context_state);

/* What an enqueue needs besides the tensors. */
typedef struct s4d_bridge_run {
    s4d_device device;
    void *stream;
    void *workspace;
    size_t workspace_size;
    int num_threads;
    struct s4d_threadpool *pool; /* CPU: the context's pool, or NULL */
    void *context_state;         /* from attach */
} s4d_bridge_run;

/* Run phase: runs the instance on device tensors. Allocates nothing for up to 16 tensors. */
s4d_status s4d_bridge_enqueue(void *plugin, const s4d_tensor *inputs, int num_inputs,
                              s4d_tensor *outputs, int num_outputs, const s4d_bridge_run *run,
                              char *err, size_t errsz);

void s4d_bridge_destroy(void *plugin);

/* Loads a plugin library into the registry (NULL: default). */
s4d_status s4d_bridge_load_library(void *registry, const char *path, char *err, size_t errsz);

#endif /* S4D_REGISTRY_PLUGIN_BRIDGE_H */
