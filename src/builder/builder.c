/* Op resolution and the build pipeline: see builder.h. */
#include "builder/builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "passes/fuse_passes.h"
#include "registry/plugin_bridge.h"
#include "util/util.h"

/* Appends to a fixed message buffer, truncating with "..." when full. */
typedef struct msgbuf {
    char *buf;
    size_t size;
    size_t len;
} msgbuf;

static void msg_add(msgbuf *m, const char *s)
{
    size_t n = strlen(s);
    if (m->len + 1 >= m->size)
        return;
    if (m->len + n + 1 >= m->size) {
        size_t room = m->size - m->len - 1;
        memcpy(m->buf + m->len, s, room);
        m->len += room;
        m->buf[m->len] = 0;
        if (m->size > 4)
            memcpy(m->buf + m->size - 4, "...", 4);
        return;
    }
    memcpy(m->buf + m->len, s, n + 1);
    m->len += n;
}

typedef struct miss {
    int node;
    char why[600]; /* registry message, for custom domains */
} miss;

static s4d_status report_unsupported(const s4d_ir_graph *g, const miss *misses, int count,
                                     char *err, size_t errsz)
{
    msgbuf m = {err, errsz, 0};
    if (errsz)
        err[0] = 0;
    char *done = calloc((size_t)count + 1, 1);
    if (!done)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    int kinds = 0;
    for (int i = 0; i < count; i++) {
        if (done[i])
            continue;
        kinds++;
        for (int j = i + 1; j < count; j++) {
            const s4d_ir_node *a = &g->nodes[misses[i].node], *b = &g->nodes[misses[j].node];
            if (!done[j] && strcmp(a->domain, b->domain) == 0 && strcmp(a->op_type, b->op_type) == 0)
                done[j] = 2; /* same key, counted below */
        }
    }
    memset(done, 0, (size_t)count);
    char line[1024];
    snprintf(line, sizeof line, "unsupported model: %d op%s with no implementation or plugin:",
             kinds, kinds == 1 ? "" : "s");
    msg_add(&m, line);
    int all_custom_missing = 1;
    int listed = 0;
    for (int i = 0; i < count; i++) {
        if (done[i])
            continue;
        const s4d_ir_node *a = &g->nodes[misses[i].node];
        if (s4d_ir_is_onnx_domain(a->domain))
            all_custom_missing = 0;
        snprintf(line, sizeof line, "%s (domain '%s', op_type '%s', opset %d) used by '%s'",
                 listed++ ? ";" : "", a->domain, a->op_type, a->opset, a->name);
        msg_add(&m, line);
        int more = 0;
        for (int j = i + 1; j < count; j++) {
            const s4d_ir_node *b = &g->nodes[misses[j].node];
            if (strcmp(a->domain, b->domain) == 0 && strcmp(a->op_type, b->op_type) == 0) {
                done[j] = 1;
                if (more < 8) {
                    snprintf(line, sizeof line, ", '%s'", b->name);
                    msg_add(&m, line);
                } else if (more == 8) {
                    msg_add(&m, ", ...");
                }
                more++;
            }
        }
        if (misses[i].why[0]) {
            msg_add(&m, " [");
            msg_add(&m, misses[i].why);
            msg_add(&m, "]");
        }
    }
    free(done);
    return all_custom_missing ? S4D_ERR_NOT_FOUND : S4D_ERR_UNSUPPORTED;
}

/*
 * The one op-resolution path: each node gets its schema by (domain, op_type,
 * highest since_version <= the model's opset), or a plugin creator. Devices
 * come later (placement); a schema is what the node IS, a kernel is how a
 * device runs it.
 */
static s4d_status resolve(s4d_ir_graph *g, const s4d_build_config *cfg, char *err, size_t errsz)
{
    miss *misses = calloc((size_t)g->num_nodes + 1, sizeof *misses);
    if (!misses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    int count = 0;
    for (int i = 0; i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        n->device = cfg->device;
        const s4d_op_schema *schema = NULL;
        if (s4d_ir_is_onnx_domain(n->domain))
            schema = s4d_op_find_schema("", n->op_type, n->opset);
        if (schema) {
            n->kind = S4D_LAYER_OP;
            n->schema = schema;
            continue;
        }
        /* Like TensorRT's parser, an unknown default-domain op may still be a plugin. */
        char why[600];
        why[0] = 0;
        if (s4d_bridge_lookup(cfg->registry, n, why, sizeof why) == S4D_OK) {
            n->kind = S4D_LAYER_PLUGIN;
            continue;
        }
        misses[count].node = i;
        if (!s4d_ir_is_onnx_domain(n->domain))
            memcpy(misses[count].why, why, sizeof why);
        count++;
    }
    s4d_status st = S4D_OK;
    if (count)
        st = report_unsupported(g, misses, count, err, errsz);
    free(misses);
    return st;
}

int s4d_build_nhwc(const s4d_build_config *cfg)
{
    if (cfg->conv_layout == S4D_CONV_LAYOUT_AUTO)
        return cfg->device == S4D_DEVICE_CUDA && (cfg->fp16 || cfg->tf32);
    return cfg->conv_layout == S4D_CONV_LAYOUT_NHWC;
}

s4d_status s4d_build_plan(s4d_ir_graph *g, const s4d_build_config *cfg, s4d_plan **out, char *err,
                          size_t errsz)
{
    *out = NULL;
    const s4d_backend *target = s4d_backend_get(cfg->device);
    if (!target)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_DEVICE,
                           "device %s: this build of libs4d has no backend for it",
                           s4d_device_name(cfg->device));
    s4d_status st = target->probe(err, errsz);
    if (st != S4D_OK)
        return st;
    if (cfg->fp16 && target->host_memory)
        return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                           "fp16: the CPU backend computes in float32 only; build without "
                           "fp16 (fp16 engines need the CUDA backend)");
    if (!cfg->fp16 && cfg->num_layer_precisions)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                           "layer precisions apply to fp16 builds; build with fp16 (--fp16)");
    st = s4d_apply_input_specs(g, cfg->input_specs, cfg->num_input_specs, err, errsz);
    if (st == S4D_OK)
        st = resolve(g, cfg, err, errsz);
    /* Dead nodes first, so a dead plugin node's fields are never checked. */
    if (st == S4D_OK)
        st = s4d_pass_remove_dead(g, err, errsz);
    for (int i = 0; st == S4D_OK && i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        if (!n->dead && n->kind == S4D_LAYER_PLUGIN)
            st = s4d_bridge_create(cfg->registry, n, err, errsz);
    }
    if (st == S4D_OK)
        st = s4d_pass_infer_and_fold(g, cfg->fold_constants, err, errsz);
    /* Folding may have left nodes nobody reads. */
    if (st == S4D_OK)
        st = s4d_pass_remove_dead(g, err, errsz);
    /* Before placement: a bypassed layer then never costs a device copy either. */
    if (st == S4D_OK)
        st = s4d_pass_simplify_movement(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_place(g, cfg, err, errsz);
    /* Fusions need final shapes, folded constants and devices: each asks the
       node's device for the fused kernel. */
    if (st == S4D_OK)
        st = s4d_pass_fuse(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_remove_dead(g, err, errsz);
    /* After the fusions, which match the model's NCHW chains; before precision, so that the
       Transpose layers it adds get their precision like any other layer. */
    if (st == S4D_OK && s4d_build_nhwc(cfg)) {
        st = s4d_pass_layout_nhwc(g, cfg->conv_layout == S4D_CONV_LAYOUT_NHWC, err, errsz);
        if (st == S4D_OK)
            st = s4d_pass_remove_dead(g, err, errsz);
    }
    /* After every pass that matches movement layers by op; a fold makes them part of their reader. */
    if (st == S4D_OK)
        st = s4d_pass_fold_views(g, err, errsz);
    if (st == S4D_OK)
        st = s4d_pass_remove_dead(g, err, errsz);
    char *notes = NULL;
    if (st == S4D_OK && cfg->fp16)
        st = s4d_pass_precision(g, cfg, &notes, err, errsz);
    if (st == S4D_OK)
        st = s4d_plan_from_ir(g, cfg, out, err, errsz);
    if (st == S4D_OK)
        (*out)->precision_report = notes;
    else
        free(notes);
    /* Inference bounds what ops read and write; this also bounds graph inputs no node reads
       and plugin outputs, so that every engine built is one the loader accepts. */
    for (int i = 0; st == S4D_OK && i < (*out)->num_tensors; i++) {
        const s4d_plan_tensor *t = &(*out)->tensors[i];
        if (!s4d_shape_fits(t->rank, t->dims, t->dtype)) {
            char dims[200];
            s4d_dims_str(t->rank, t->dims, dims, sizeof dims);
            st = s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                             "tensor '%s' has shape %s: more than 2^50 bytes counting dims of 0 as 1",
                             t->name, dims);
            s4d_plan_destroy(*out);
            *out = NULL;
        }
    }
    return st;
}
