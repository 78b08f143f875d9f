/*
 * The plugin bridge over the registry (src/registry/): converts between the
 * engine's tensors and the plugin ABI's descriptors and forwards messages.
 */
#include "engine/plugin_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"

/* Plugin nodes in practice have a handful of inputs; more falls back to the heap. */
#define BRIDGE_STACK_TENSORS 16

static s4d_plugin_registry *reg_of(void *registry)
{
    return registry ? (s4d_plugin_registry *)registry : s4d_plugin_registry_default();
}

static s4d_status set_key(s4d_ir_node *n, const char *ns, const char *name, const char *version,
                          char *err, size_t errsz)
{
    free(n->plugin_namespace);
    free(n->plugin_name);
    free(n->plugin_version);
    n->plugin_namespace = s4d_strdup(ns);
    n->plugin_name = s4d_strdup(name);
    n->plugin_version = s4d_strdup(version);
    if (!n->plugin_namespace || !n->plugin_name || !n->plugin_version)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    return S4D_OK;
}

s4d_status s4d_bridge_lookup(void *registry, s4d_ir_node *n, char *err, size_t errsz)
{
    s4d_plugin_key key;
    s4d_status st = s4d_registry_node_key(n->name, n->domain, n->op_type, n->attrs, n->num_attrs,
                                          &key, err, errsz);
    if (st != S4D_OK)
        return st;
    const s4d_plugin_creator *c = NULL;
    st = s4d_registry_lookup(reg_of(registry), &key, n->name, &c, err, errsz);
    if (st != S4D_OK)
        return st;
    return set_key(n, c->plugin_namespace, c->name, c->version, err, errsz);
}

s4d_status s4d_bridge_create(void *registry, s4d_ir_node *n, char *err, size_t errsz)
{
    s4d_plugin *p = NULL;
    const s4d_plugin_creator *c = NULL;
    s4d_status st = s4d_registry_create_plugin(reg_of(registry), n->name, n->domain, n->op_type,
                                               n->attrs, n->num_attrs, &p, &c, err, errsz);
    if (st != S4D_OK)
        return st;
    if (n->plugin)
        s4d_bridge_destroy(n->plugin);
    n->plugin = p;
    return set_key(n, c->plugin_namespace, c->name, c->version, err, errsz);
}

static void to_desc(const s4d_tensor *t, s4d_plugin_tensor_desc *d)
{
    memset(d, 0, sizeof *d);
    d->abi_version = S4D_PLUGIN_ABI_VERSION;
    d->struct_size = sizeof *d;
    d->dtype = t->dtype;
    d->device = S4D_DEVICE_CPU;
    d->rank = t->rank;
    for (int i = 0; i < t->rank && i < S4D_PLUGIN_MAX_RANK; i++)
        d->dims[i] = t->dims[i];
}

s4d_status s4d_bridge_infer(void *plugin, const char *node_name, const s4d_tensor *inputs,
                            int num_inputs, s4d_tensor *outputs, int num_outputs,
                            size_t *workspace, char *err, size_t errsz)
{
    const s4d_plugin *p = plugin;
    int nout = p->num_outputs(p);
    if (nout != num_outputs)
        return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                           "node '%s': the plugin has %d outputs, the node lists %d", node_name,
                           nout, num_outputs);
    s4d_plugin_tensor_desc *in = calloc((size_t)num_inputs + 1, sizeof *in);
    s4d_plugin_tensor_desc *out = calloc((size_t)num_outputs + 1, sizeof *out);
    s4d_status st = S4D_OK;
    s4d_errbuf eb;
    eb.msg[0] = 0;
    if (!in || !out) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < num_inputs; i++) {
        if (inputs[i].rank < 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                             "node '%s': input %d is empty; plugin inputs cannot be omitted",
                             node_name, i);
            goto done;
        }
        to_desc(&inputs[i], &in[i]);
    }
    for (int i = 0; i < num_outputs; i++) {
        out[i].abi_version = S4D_PLUGIN_ABI_VERSION;
        out[i].struct_size = sizeof out[i];
        out[i].device = S4D_DEVICE_CPU;
    }
    st = p->get_output_descs(p, in, num_inputs, out, num_outputs, &eb);
    if (st == S4D_OK)
        st = p->supports(p, in, num_inputs, out, num_outputs, &eb);
    if (st != S4D_OK) {
        s4d_fmt_err(err, errsz, st, "node '%s': %s", node_name,
                    eb.msg[0] ? eb.msg : s4d_status_string(st));
        goto done;
    }
    for (int i = 0; i < num_outputs; i++) {
        if (out[i].rank < 0 || out[i].rank > S4D_MAX_RANK) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_PLUGIN,
                             "node '%s': the plugin gave output %d rank %d", node_name, i,
                             (int)out[i].rank);
            goto done;
        }
        memset(&outputs[i], 0, sizeof outputs[i]);
        outputs[i].dtype = out[i].dtype;
        outputs[i].rank = out[i].rank;
        for (int d = 0; d < out[i].rank; d++)
            outputs[i].dims[d] = out[i].dims[d];
    }
    *workspace = p->workspace_size(p, in, num_inputs, out, num_outputs);
done:
    free(in);
    free(out);
    return st;
}

s4d_status s4d_bridge_serialize(void *plugin, s4d_wbuf *w, char *err, size_t errsz)
{
    const s4d_plugin *p = plugin;
    size_t n = p->serialize_size(p);
    void *buf = malloc(n + 1);
    if (!buf)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory serializing a plugin");
    s4d_errbuf eb;
    eb.msg[0] = 0;
    s4d_status st = p->serialize(p, buf, n, &eb);
    if (st != S4D_OK)
        s4d_fmt_err(err, errsz, S4D_ERR_PLUGIN, "plugin serialize failed: %s",
                    eb.msg[0] ? eb.msg : s4d_status_string(st));
    else
        s4d_wbuf_bytes(w, buf, n);
    free(buf);
    return st == S4D_OK ? S4D_OK : S4D_ERR_PLUGIN;
}

s4d_status s4d_bridge_deserialize(void *registry, const char *ns, const char *name,
                                  const char *version, const void *payload, size_t size,
                                  void **plugin, char *err, size_t errsz)
{
    s4d_plugin *p = NULL;
    s4d_status st = s4d_registry_deserialize(reg_of(registry), NULL, ns, name, version, payload,
                                             size, &p, NULL, err, errsz);
    *plugin = st == S4D_OK ? p : NULL;
    return st;
}

static void to_ptensor(const s4d_tensor *t, s4d_plugin_tensor *pt)
{
    memset(pt, 0, sizeof *pt);
    pt->abi_version = S4D_PLUGIN_ABI_VERSION;
    pt->struct_size = sizeof *pt;
    to_desc(t, &pt->desc);
    pt->data = t->data;
}

s4d_status s4d_bridge_enqueue(void *plugin, const s4d_tensor *inputs, int num_inputs,
                              s4d_tensor *outputs, int num_outputs, void *workspace,
                              size_t workspace_size, void *stream, int num_threads, char *err,
                              size_t errsz)
{
    const s4d_plugin *p = plugin;
    s4d_plugin_tensor in_stack[BRIDGE_STACK_TENSORS], out_stack[BRIDGE_STACK_TENSORS];
    s4d_plugin_tensor *in = in_stack, *out = out_stack;
    if (num_inputs > BRIDGE_STACK_TENSORS)
        in = malloc((size_t)num_inputs * sizeof *in);
    if (num_outputs > BRIDGE_STACK_TENSORS)
        out = malloc((size_t)num_outputs * sizeof *out);
    s4d_status st = S4D_OK;
    if (!in || !out) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < num_inputs; i++)
        to_ptensor(&inputs[i], &in[i]);
    for (int i = 0; i < num_outputs; i++)
        to_ptensor(&outputs[i], &out[i]);
    s4d_plugin_run_info run;
    memset(&run, 0, sizeof run);
    run.abi_version = S4D_PLUGIN_ABI_VERSION;
    run.struct_size = sizeof run;
    run.device = S4D_DEVICE_CPU;
    run.stream = stream;
    run.workspace = workspace_size ? workspace : NULL;
    run.workspace_size = workspace_size;
    run.num_threads = num_threads;
    s4d_errbuf eb;
    eb.msg[0] = 0;
    st = p->enqueue(p, in, num_inputs, out, num_outputs, &run, &eb);
    if (st != S4D_OK)
        s4d_fmt_err(err, errsz, st, "%s", eb.msg[0] ? eb.msg : s4d_status_string(st));
done:
    if (in != in_stack)
        free(in);
    if (out != out_stack)
        free(out);
    return st;
}

void s4d_bridge_destroy(void *plugin)
{
    s4d_plugin *p = plugin;
    if (p)
        p->destroy(p);
}

s4d_status s4d_bridge_load_library(void *registry, const char *path, char *err, size_t errsz)
{
    s4d_plugin_registry *r = reg_of(registry);
    if (!r)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_status st = s4d_plugin_registry_load_library(r, path);
    if (st != S4D_OK)
        s4d_fmt_err(err, errsz, st, "%s", s4d_plugin_registry_errmsg(r));
    return st;
}
