/*
 * Plugin bridge without a registry: every plugin key is unknown. Replaced by
 * the registry-backed bridge once src/registry/ exists.
 */
#include "engine/plugin_bridge.h"

#include <string.h>

static const char *node_attr_str(const s4d_ir_node *n, const char *name, const char *dflt)
{
    for (int i = 0; i < n->num_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0 && n->attrs[i].type == S4D_ATTR_STRING)
            return n->attrs[i].s;
    return dflt;
}

s4d_status s4d_bridge_lookup(void *registry, s4d_ir_node *n, char *err, size_t errsz)
{
    const char *ver = node_attr_str(n, "plugin_version", "1");
    const char *ns = node_attr_str(n, "plugin_namespace", n->domain);
    return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                       "no plugin creator (namespace '%s', name '%s', version '%s'); registered "
                       "creators: none (this build has no plugin registry)",
                       ns, n->op_type, ver);
}

s4d_status s4d_bridge_create(void *registry, s4d_ir_node *n, char *err, size_t errsz)
{
    return s4d_bridge_lookup(registry, n, err, errsz);
}

s4d_status s4d_bridge_infer(void *plugin, const char *node_name, const s4d_tensor *inputs,
                            int num_inputs, s4d_tensor *outputs, int num_outputs,
                            size_t *workspace, char *err, size_t errsz)
{
    return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "node '%s': no plugin registry", node_name);
}

s4d_status s4d_bridge_serialize(void *plugin, s4d_wbuf *w, char *err, size_t errsz)
{
    return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "no plugin registry");
}

s4d_status s4d_bridge_deserialize(void *registry, const char *ns, const char *name,
                                  const char *version, const void *payload, size_t size,
                                  void **plugin, char *err, size_t errsz)
{
    *plugin = NULL;
    return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                       "no plugin creator (namespace '%s', name '%s', version '%s'); registered "
                       "creators: none (this build has no plugin registry)",
                       ns, name, version);
}

s4d_status s4d_bridge_enqueue(void *plugin, const s4d_tensor *inputs, int num_inputs,
                              s4d_tensor *outputs, int num_outputs, void *workspace,
                              size_t workspace_size, void *stream, char *err, size_t errsz)
{
    return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "no plugin registry");
}

void s4d_bridge_destroy(void *plugin)
{
    (void)plugin;
}

s4d_status s4d_bridge_load_library(void *registry, const char *path, char *err, size_t errsz)
{
    return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                       "cannot load plugin library '%s': this build has no plugin registry", path);
}
