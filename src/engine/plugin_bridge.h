/*
 * src/engine/plugin_bridge.h - the one place where the builder and the
 * runtime meet the plugin registry (src/registry/). Everything plugin-shaped
 * that the engine does goes through these functions, so the IR, the engine
 * file and the runtime see a plugin instance only as an opaque pointer.
 *
 * registry: a registry handle, or NULL for the process default registry.
 */
#ifndef S4D_ENGINE_PLUGIN_BRIDGE_H
#define S4D_ENGINE_PLUGIN_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "ir/ir.h"
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

/* Build phase: output dtypes/shapes and the workspace size for these inputs. */
s4d_status s4d_bridge_infer(void *plugin, const char *node_name, const s4d_tensor *inputs,
                            int num_inputs, s4d_tensor *outputs, int num_outputs,
                            size_t *workspace, char *err, size_t errsz);

/* Appends the instance's payload bytes to w. */
s4d_status s4d_bridge_serialize(void *plugin, s4d_wbuf *w, char *err, size_t errsz);

/* Run phase: recreates an instance from its payload. */
s4d_status s4d_bridge_deserialize(void *registry, const char *ns, const char *name,
                                  const char *version, const void *payload, size_t size,
                                  void **plugin, char *err, size_t errsz);

/* Run phase: runs the instance on host tensors (stream may be NULL on the CPU). */
s4d_status s4d_bridge_enqueue(void *plugin, const s4d_tensor *inputs, int num_inputs,
                              s4d_tensor *outputs, int num_outputs, void *workspace,
                              size_t workspace_size, void *stream, int num_threads, char *err,
                              size_t errsz);

void s4d_bridge_destroy(void *plugin);

/* Loads a plugin library into the registry (NULL: default). */
s4d_status s4d_bridge_load_library(void *registry, const char *path, char *err, size_t errsz);

#endif /* S4D_ENGINE_PLUGIN_BRIDGE_H */
