/*
 * Placement: a device for every live node. A node goes to the build's device
 * when that device's backend has a kernel that supports it (its dtypes, its
 * attributes) or, for a plugin node, when the plugin runs there. Otherwise,
 * with fallback allowed, it goes to the CPU (the plan builder inserts copy
 * layers on the edges that cross devices); without, the build fails with one
 * message listing every node the device cannot run and why. Fallbacks are
 * never silent: --dumpLayerInfo shows each layer's device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "registry/plugin_bridge.h"
#include "util/util.h"

/* Fills in/out with the node's tensors (constants carry data). */
static s4d_status node_tensors(const s4d_ir_graph *g, const s4d_ir_node *n, s4d_tensor *in,
                               s4d_tensor *out)
{
    for (int i = 0; i < n->num_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0) {
            memset(&in[i], 0, sizeof in[i]);
            in[i].rank = -1;
            continue;
        }
        in[i] = g->values[v].t;
        if (g->values[v].kind != S4D_VALUE_CONST && !g->values[v].frozen)
            in[i].data = NULL;
    }
    for (int i = 0; i < n->num_outputs; i++) {
        int v = n->outputs[i];
        if (v < 0) {
            memset(&out[i], 0, sizeof out[i]);
            out[i].rank = -1;
            continue;
        }
        out[i] = g->values[v].t;
        out[i].data = NULL;
    }
    return S4D_OK;
}

s4d_status s4d_node_supported_as(const s4d_ir_node *n, const s4d_backend *be,
                                 const s4d_tensor *in, s4d_tensor *out, void *params, char *why,
                                 size_t whysz)
{
    s4d_status st = S4D_OK;
    why[0] = 0;
    switch (n->kind) {
    case S4D_LAYER_OP: {
        const s4d_kernel *k = be->find_kernel(n->schema->domain, n->schema->op_type, n->opset);
        if (!k) {
            st = s4d_fmt_err(why, whysz, S4D_ERR_UNSUPPORTED, "no %s kernel", be->name);
            break;
        }
        if (k->supports) {
            s4d_op_ctx ctx;
            s4d_ir_node_ctx(n, in, out, why, whysz, &ctx);
            if (params)
                ctx.params = params;
            st = k->supports(&ctx);
            if (st != S4D_OK && !why[0])
                s4d_fmt_err(why, whysz, st, "the %s kernel does not take it", be->name);
        }
        break;
    }
    case S4D_LAYER_PLUGIN:
        st = s4d_bridge_supports(n->plugin, n->name, be->plugin_device, in, n->num_inputs, out,
                                 n->num_outputs, why, whysz);
        break;
    case S4D_LAYER_COPY: break;
    }
    return st;
}

s4d_status s4d_node_supported(const s4d_ir_graph *g, const s4d_ir_node *n,
                              const s4d_backend *be, char *why, size_t whysz)
{
    s4d_tensor *in = calloc((size_t)n->num_inputs + 1, sizeof *in);
    s4d_tensor *out = calloc((size_t)n->num_outputs + 1, sizeof *out);
    s4d_status st = S4D_OK;
    why[0] = 0;
    if (!in || !out) {
        st = s4d_fmt_err(why, whysz, S4D_ERR_NO_MEMORY, "out of memory");
    } else {
        node_tensors(g, n, in, out);
        st = s4d_node_supported_as(n, be, in, out, NULL, why, whysz);
    }
    free(in);
    free(out);
    return st;
}

s4d_status s4d_pass_place(s4d_ir_graph *g, const s4d_build_config *cfg, char *err, size_t errsz)
{
    const s4d_backend *target = s4d_backend_get(cfg->device);
    const s4d_backend *cpu = s4d_backend_get(S4D_DEVICE_CPU);
    int fallback_ok = cfg->allow_fallback && cfg->device != S4D_DEVICE_CPU;
    size_t used = 0;
    int misses = 0;
    char why[600];
    if (errsz)
        err[0] = 0;
    for (int i = 0; i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        n->device = cfg->device;
        if (s4d_node_supported(g, n, target, why, sizeof why) == S4D_OK)
            continue;
        char cpu_why[600];
        if (fallback_ok && s4d_node_supported(g, n, cpu, cpu_why, sizeof cpu_why) == S4D_OK) {
            n->device = S4D_DEVICE_CPU;
            continue;
        }
        if (misses++ < 16 && used + 1 < errsz) {
            int k = snprintf(err + used, errsz - used, "%s'%s' (%s): %s", used ? "; " : "",
                             n->name, n->op_type, why);
            if (k > 0)
                used += (size_t)k < errsz - used ? (size_t)k : errsz - used - 1;
        }
    }
    if (!misses)
        return S4D_OK;
    char list[3072];
    snprintf(list, sizeof list, "%s", err);
    return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                       "device %s cannot run %d node%s: %s%s%s", s4d_device_name(cfg->device),
                       misses, misses == 1 ? "" : "s", list, misses > 16 ? "; ..." : "",
                       fallback_ok || cfg->device == S4D_DEVICE_CPU
                           ? ""
                           : " (allow fallback - s4dexec --allowFallback - to run them on the CPU)");
}
