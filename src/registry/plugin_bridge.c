/*
 * The plugin bridge over the registry (src/registry/): converts between the
 * engine's tensors and the plugin ABI's descriptors, in the layout of the
 * instance's ABI version, and forwards messages.
 */
#include "registry/plugin_bridge.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"
#include "util/threadpool.h"

/* Plugin nodes in practice have a handful of inputs; more falls back to the heap. */
#define BRIDGE_STACK_TENSORS 16

/* The ABI 1 layouts: a descriptor without format/strides, and the tensor around it. */
typedef struct desc_v1 {
    uint32_t abi_version;
    uint32_t struct_size;
    s4d_dtype dtype;
    s4d_device device;
    int32_t rank;
    int64_t dims[S4D_PLUGIN_MAX_RANK];
} desc_v1;

typedef struct tensor_v1 {
    uint32_t abi_version;
    uint32_t struct_size;
    desc_v1 desc;
    void *data;
} tensor_v1;

static s4d_plugin_registry *reg_of(void *registry)
{
    return registry ? (s4d_plugin_registry *)registry : s4d_plugin_registry_default();
}

static int is_v1(const s4d_plugin *p)
{
    return p->abi_version < 2;
}

/* An ABI 2 callback, when the instance has it. */
#define HAS_CB(p, field)                                                                           \
    ((p)->abi_version >= 2 &&                                                                      \
     (p)->struct_size >= offsetof(s4d_plugin, field) + sizeof((p)->field) && (p)->field)

static size_t desc_size(const s4d_plugin *p)
{
    return is_v1(p) ? sizeof(desc_v1) : sizeof(s4d_plugin_tensor_desc);
}

static size_t tensor_size(const s4d_plugin *p)
{
    return is_v1(p) ? sizeof(tensor_v1) : sizeof(s4d_plugin_tensor);
}

/* Element i of a descriptor array in the instance's layout. The fields both
   layouts share sit at the same offsets. */
static s4d_plugin_tensor_desc *desc_at(const s4d_plugin *p, void *base, int i)
{
    return (s4d_plugin_tensor_desc *)((char *)base + (size_t)i * desc_size(p));
}

static void fill_desc(const s4d_plugin *p, s4d_plugin_tensor_desc *d, const s4d_tensor *t,
                      s4d_device device)
{
    memset(d, 0, desc_size(p));
    d->abi_version = p->abi_version;
    d->struct_size = (uint32_t)desc_size(p);
    d->device = device;
    if (!t)
        return;
    d->dtype = t->dtype;
    d->rank = t->rank;
    for (int i = 0; i < t->rank && i < S4D_PLUGIN_MAX_RANK; i++)
        d->dims[i] = t->dims[i];
    if (!is_v1(p)) {
        d->format = S4D_FORMAT_LINEAR;
        int64_t stride = 1;
        for (int i = t->rank - 1; i >= 0 && i < S4D_PLUGIN_MAX_RANK; i--) {
            d->strides[i] = stride;
            stride *= t->dims[i] > 0 ? t->dims[i] : 1;
        }
    }
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

/* Descriptors of inputs then outputs, in the instance's layout; caller frees. */
static void *make_descs(const s4d_plugin *p, const s4d_tensor *in, int nin, const s4d_tensor *out,
                        int nout, s4d_device device)
{
    void *d = calloc((size_t)(nin + nout) + 1, desc_size(p));
    if (!d)
        return NULL;
    for (int i = 0; i < nin; i++)
        fill_desc(p, desc_at(p, d, i), &in[i], device);
    for (int i = 0; i < nout; i++)
        fill_desc(p, desc_at(p, d, nin + i), out ? &out[i] : NULL, device);
    return d;
}

/*
 * Format negotiation: the engine's tensors are dense, so each position is
 * offered its inferred dtype in LINEAR layout; a plugin that answers with
 * supports_format must accept it at every position, else the node cannot be
 * built on this device.
 */
static s4d_status negotiate(const s4d_plugin *p, const char *node_name, void *descs, int nin,
                            int nout, char *err, size_t errsz)
{
    s4d_errbuf eb;
    eb.msg[0] = 0;
    if (HAS_CB(p, supports_format)) {
        for (int pos = 0; pos < nin + nout; pos++) {
            s4d_status st = p->supports_format(p, pos, descs, nin, nout);
            if (st != S4D_OK) {
                const s4d_plugin_tensor_desc *d = desc_at(p, descs, pos);
                return s4d_fmt_err(err, errsz, st == S4D_ERR_DTYPE ? st : S4D_ERR_UNSUPPORTED,
                                   "node '%s': the plugin does not take %s %d as %s (linear) on %s",
                                   node_name, pos < nin ? "input" : "output",
                                   pos < nin ? pos : pos - nin, s4d_dtype_name(d->dtype),
                                   d->device == S4D_DEVICE_CUDA ? "cuda" : "cpu");
            }
        }
        return S4D_OK;
    }
    s4d_status st = p->supports(p, desc_at(p, descs, 0), nin, desc_at(p, descs, nin), nout, &eb);
    if (st != S4D_OK)
        return s4d_fmt_err(err, errsz, st, "node '%s': %s", node_name,
                           eb.msg[0] ? eb.msg : s4d_status_string(st));
    return S4D_OK;
}

s4d_status s4d_bridge_infer(void *plugin, const char *node_name, s4d_device device,
                            int negotiate_formats, const s4d_tensor *inputs, int num_inputs,
                            s4d_tensor *outputs, int num_outputs, size_t *workspace, char *err,
                            size_t errsz)
{
    const s4d_plugin *p = plugin;
    int nout = p->num_outputs(p);
    if (nout != num_outputs)
        return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                           "node '%s': the plugin has %d outputs, the node lists %d", node_name,
                           nout, num_outputs);
    for (int i = 0; i < num_inputs; i++)
        if (inputs[i].rank < 0)
            return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                               "node '%s': input %d is empty; plugin inputs cannot be omitted",
                               node_name, i);
    void *descs = make_descs(p, inputs, num_inputs, NULL, num_outputs, device);
    if (!descs)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_errbuf eb;
    eb.msg[0] = 0;
    s4d_status st = p->get_output_descs(p, desc_at(p, descs, 0), num_inputs,
                                        desc_at(p, descs, num_inputs), num_outputs, &eb);
    if (st != S4D_OK) {
        s4d_fmt_err(err, errsz, st, "node '%s': %s", node_name,
                    eb.msg[0] ? eb.msg : s4d_status_string(st));
        goto done;
    }
    for (int i = 0; i < num_outputs; i++) {
        s4d_plugin_tensor_desc *d = desc_at(p, descs, num_inputs + i);
        if (d->rank < 0 || d->rank > S4D_MAX_RANK) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_PLUGIN,
                             "node '%s': the plugin gave output %d rank %d", node_name, i,
                             (int)d->rank);
            goto done;
        }
        memset(&outputs[i], 0, sizeof outputs[i]);
        outputs[i].dtype = d->dtype;
        outputs[i].rank = d->rank;
        for (int k = 0; k < d->rank; k++)
            outputs[i].dims[k] = d->dims[k];
        /* The host's own view of the layout, whatever the plugin wrote. */
        fill_desc(p, d, &outputs[i], device);
    }
    if (negotiate_formats)
        st = negotiate(p, node_name, descs, num_inputs, num_outputs, err, errsz);
    if (st == S4D_OK)
        *workspace = p->workspace_size(p, desc_at(p, descs, 0), num_inputs,
                                       desc_at(p, descs, num_inputs), num_outputs);
done:
    free(descs);
    return st;
}

s4d_status s4d_bridge_supports(void *plugin, const char *node_name, s4d_device device,
                               const s4d_tensor *inputs, int num_inputs,
                               const s4d_tensor *outputs, int num_outputs, char *err,
                               size_t errsz)
{
    const s4d_plugin *p = plugin;
    void *descs = make_descs(p, inputs, num_inputs, outputs, num_outputs, device);
    if (!descs)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_status st = negotiate(p, node_name, descs, num_inputs, num_outputs, err, errsz);
    free(descs);
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

static void config_info(s4d_plugin_config_info *ci, s4d_device device, void *stream)
{
    memset(ci, 0, sizeof *ci);
    ci->abi_version = S4D_PLUGIN_ABI_VERSION;
    ci->struct_size = sizeof *ci;
    ci->device = device;
    ci->stream = stream;
}

s4d_status s4d_bridge_configure(void *plugin, const char *node_name, s4d_device device,
                                const s4d_tensor *inputs, int num_inputs,
                                const s4d_tensor *outputs, int num_outputs, void *stream,
                                char *err, size_t errsz)
{
    s4d_plugin *p = plugin;
    if (!HAS_CB(p, configure))
        return S4D_OK;
    void *descs = make_descs(p, inputs, num_inputs, outputs, num_outputs, device);
    if (!descs)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_plugin_config_info ci;
    config_info(&ci, device, stream);
    s4d_errbuf eb;
    eb.msg[0] = 0;
    s4d_status st = p->configure(p, desc_at(p, descs, 0), num_inputs,
                                 desc_at(p, descs, num_inputs), num_outputs, &ci, &eb);
    free(descs);
    if (st != S4D_OK)
        return s4d_fmt_err(err, errsz, st == S4D_ERR_NO_MEMORY ? st : S4D_ERR_PLUGIN,
                           "node '%s': plugin configure failed: %s", node_name,
                           eb.msg[0] ? eb.msg : s4d_status_string(st));
    return S4D_OK;
}

s4d_status s4d_bridge_attach(void *plugin, const char *node_name, s4d_device device, void *stream,
                             void **context_state, char *err, size_t errsz)
{
    const s4d_plugin *p = plugin;
    *context_state = NULL;
    if (!HAS_CB(p, attach))
        return S4D_OK;
    s4d_plugin_config_info ci;
    config_info(&ci, device, stream);
    s4d_errbuf eb;
    eb.msg[0] = 0;
    s4d_status st = p->attach(p, &ci, context_state, &eb);
    if (st != S4D_OK) {
        *context_state = NULL;
        return s4d_fmt_err(err, errsz, st == S4D_ERR_NO_MEMORY ? st : S4D_ERR_PLUGIN,
                           "node '%s': plugin attach failed: %s", node_name,
                           eb.msg[0] ? eb.msg : s4d_status_string(st));
    }
    return S4D_OK;
}

void s4d_bridge_detach(void *plugin, void *context_state)
{
    const s4d_plugin *p = plugin;
    if (p && HAS_CB(p, detach))
        p->detach(p, context_state);
}

/* The host's parallel for, as the plugin ABI spells it. */
static void host_parallel_for(void *pool, int64_t n, int64_t grain, s4d_plugin_range_fn fn,
                              void *arg)
{
    s4d_parallel_for(pool, n, grain, fn, arg);
}

/* Tensors in the instance's layout; the data pointer sits at another offset per version. */
static void fill_tensor(const s4d_plugin *p, void *base, int i, const s4d_tensor *t,
                        s4d_device device)
{
    char *e = (char *)base + (size_t)i * tensor_size(p);
    if (is_v1(p)) {
        tensor_v1 *v = (tensor_v1 *)e;
        v->abi_version = p->abi_version;
        v->struct_size = sizeof *v;
        fill_desc(p, (s4d_plugin_tensor_desc *)&v->desc, t, device);
        v->data = t->data;
    } else {
        s4d_plugin_tensor *v = (s4d_plugin_tensor *)e;
        v->abi_version = p->abi_version;
        v->struct_size = sizeof *v;
        fill_desc(p, &v->desc, t, device);
        v->data = t->data;
    }
}

s4d_status s4d_bridge_enqueue(void *plugin, const s4d_tensor *inputs, int num_inputs,
                              s4d_tensor *outputs, int num_outputs, const s4d_bridge_run *run,
                              char *err, size_t errsz)
{
    const s4d_plugin *p = plugin;
    s4d_plugin_tensor in_stack[BRIDGE_STACK_TENSORS], out_stack[BRIDGE_STACK_TENSORS];
    void *in = in_stack, *out = out_stack;
    if (num_inputs > BRIDGE_STACK_TENSORS)
        in = malloc((size_t)num_inputs * tensor_size(p));
    if (num_outputs > BRIDGE_STACK_TENSORS)
        out = malloc((size_t)num_outputs * tensor_size(p));
    s4d_status st = S4D_OK;
    if (!in || !out) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < num_inputs; i++)
        fill_tensor(p, in, i, &inputs[i], run->device);
    for (int i = 0; i < num_outputs; i++)
        fill_tensor(p, out, i, &outputs[i], run->device);
    s4d_plugin_run_info ri;
    memset(&ri, 0, sizeof ri);
    ri.abi_version = S4D_PLUGIN_ABI_VERSION;
    ri.struct_size = sizeof ri;
    ri.device = run->device;
    ri.stream = run->stream;
    ri.workspace = run->workspace_size ? run->workspace : NULL;
    ri.workspace_size = run->workspace_size;
    ri.num_threads = run->num_threads;
    ri.context_state = run->context_state;
    if (run->device == S4D_DEVICE_CPU) {
        ri.thread_pool = run->pool;
        ri.parallel_for = host_parallel_for;
    }
    s4d_errbuf eb;
    eb.msg[0] = 0;
    st = p->enqueue(p, in, num_inputs, out, num_outputs, &ri, &eb);
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
