/*
 * src/registry/registry.h - what the builder and the runtime call to turn an
 * ONNX node or an engine payload into a plugin instance (internal; not
 * installed). The public half (create, destroy, register, load, find) is in
 * include/s4d/plugin.h.
 *
 * Errors: every function here writes its message into the caller's buffer
 * (err, err_size; err may be NULL), not on the registry, so that builds on
 * several threads sharing the default registry do not overwrite each other's
 * messages. Messages name the node, the key and the attribute at fault.
 *
 * Instances returned here have been checked: abi_version equal to
 * S4D_PLUGIN_ABI_VERSION, struct_size covering every callback of this ABI,
 * no NULL callback, num_outputs() >= 1. Callers may call them directly.
 */
#ifndef S4D_REGISTRY_REGISTRY_H
#define S4D_REGISTRY_REGISTRY_H

#include "ops/op.h"
#include "s4d/plugin.h"

/* Attribute names that select the key and never become fields. */
#define S4D_PLUGIN_ATTR_VERSION "plugin_version"
#define S4D_PLUGIN_ATTR_NAMESPACE "plugin_namespace"

/* The key of a node. Strings point into the node's arguments or `version_buf`. */
typedef struct s4d_plugin_key {
    const char *plugin_namespace;
    const char *name;
    const char *version;
    char version_buf[32]; /* holds an INT plugin_version printed in decimal */
} s4d_plugin_key;

/*
 * The key of an ONNX node: name = op_type; version = attribute
 * plugin_version (STRING, or INT printed in decimal; default "1");
 * namespace = attribute plugin_namespace (STRING), else domain ("" when
 * NULL). S4D_OK or S4D_ERR_INVALID_ARG (a key attribute of another type).
 */
s4d_status s4d_registry_node_key(const char *node_name, const char *domain, const char *op_type,
                                 const s4d_attr *attrs, int num_attrs, s4d_plugin_key *key,
                                 char *err, size_t err_size);

/* 1 when a creator is registered for the node's key, else 0 (never fails). */
int s4d_registry_has_node(s4d_plugin_registry *registry, const char *domain, const char *op_type,
                          const s4d_attr *attrs, int num_attrs);

/*
 * The creator for a key. S4D_ERR_NOT_FOUND names the node (when node_name is
 * not NULL), the three keys, says which part differs from near misses
 * (e.g. the right name under another version), and lists every registered
 * creator. registry NULL means the default registry.
 */
s4d_status s4d_registry_lookup(s4d_plugin_registry *registry, const s4d_plugin_key *key,
                               const char *node_name, const s4d_plugin_creator **out, char *err,
                               size_t err_size);

/*
 * Build time: node -> key -> creator -> checked fields -> create().
 * Every attribute other than the two key attributes must be a declared
 * field of the same type (FLOAT, INT, STRING, FLOATS, INTS); every required
 * field must be present. Statuses: S4D_OK; S4D_ERR_NOT_FOUND (no creator);
 * S4D_ERR_INVALID_ARG (unknown attribute, missing required attribute, type
 * mismatch - each message names the node and the attribute); when create()
 * fails, its own status (S4D_ERR_PLUGIN if that is not a failure status)
 * and message after the node and key; S4D_ERR_PLUGIN or S4D_ERR_VERSION for
 * a broken instance; S4D_ERR_NO_MEMORY. *out is the new instance (caller
 * destroys it with (*out)->destroy(*out)); *creator_out (may be NULL) the
 * creator, whose key the engine file records.
 */
s4d_status s4d_registry_create_plugin(s4d_plugin_registry *registry, const char *node_name,
                                      const char *domain, const char *op_type,
                                      const s4d_attr *attrs, int num_attrs, s4d_plugin **out,
                                      const s4d_plugin_creator **creator_out, char *err,
                                      size_t err_size);

/*
 * Run time: (namespace, name, version) + payload -> deserialize(). Statuses:
 * S4D_OK; S4D_ERR_NOT_FOUND; S4D_ERR_PLUGIN (deserialize failed or returned
 * a broken instance; the plugin's own message follows); S4D_ERR_INVALID_ARG.
 * node_name (may be NULL) only labels messages.
 */
s4d_status s4d_registry_deserialize(s4d_plugin_registry *registry, const char *node_name,
                                    const char *plugin_namespace, const char *name,
                                    const char *version, const void *data, size_t size,
                                    s4d_plugin **out, const s4d_plugin_creator **creator_out,
                                    char *err, size_t err_size);

/*
 * The plugin descriptor of an engine tensor on `device`. S4D_OK, or
 * S4D_ERR_INVALID_ARG when t is NULL or its rank is outside
 * 0..S4D_PLUGIN_MAX_RANK.
 */
s4d_status s4d_registry_tensor_desc(const s4d_tensor *t, s4d_device device,
                                    s4d_plugin_tensor_desc *out);

/*
 * Writes "ns::name v<version>, ..." for every registered creator (or
 * "none") into buf; used by messages and --verbose listings.
 */
void s4d_registry_describe(s4d_plugin_registry *registry, char *buf, size_t size);

#endif /* S4D_REGISTRY_REGISTRY_H */
