/*
 * Chains of Linear layers -> s4d::FusedMLP (ops/mlp.h): a MatMul or
 * FusedMatMul with a constant 2-D W whose output only the next one reads,
 * and so on, optionally starting from a Slice of X's last axis (the anchor
 * encoder's x, y, z | w, l, h | yaw | velocity columns), becomes one layer
 * that keeps each block of rows on chip from the first product to the last
 * normalisation. The head's chains are short and narrow (N <= 256), where
 * each separate product and normalisation costs a kernel launch for a few
 * microseconds of work.
 *
 * Only on devices whose memory is not the host's (CUDA, and the guarded
 * test device that stands in for it): the CPU runs products through its
 * BLAS, which a row-by-row chain would not beat. Every link must be one the
 * device's kernel takes as a chain of its own (supports(): the width limit),
 * and the whole chain is offered again before anything changes. A chain is
 * two links or more, or one that reads a Slice. S4D_FUSE_MLP=0 in the
 * environment turns the pass off (to compare).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops/dense.h"
#include "ops/mlp.h"
#include "ops/movement.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

#define OOM "out of memory in the MLP chain fusion"

typedef struct link {
    int node;
    int w, bias, scale, shift; /* value indices, -1 when absent */
    int relu, norm;
    float eps;
} link;

typedef struct chain {
    int n;
    link l[S4D_MLP_MAX_LAYERS];
    int x;       /* the value the first link reads (the Slice's input when there is one) */
    int slice;   /* the Slice node folded in, or -1 */
    int64_t begin;
} chain;

/* Node i as a link of a chain: a live MatMul or FusedMatMul of float32 with a constant [K, N] W. */
static int link_of(const s4d_ir_graph *g, int i, link *l)
{
    const s4d_ir_node *n = &g->nodes[i];
    memset(l, 0, sizeof *l);
    l->node = i;
    l->bias = l->scale = l->shift = -1;
    int fused = !n->dead && n->kind == S4D_LAYER_OP && strcmp(n->domain, "s4d") == 0 &&
                strcmp(n->op_type, "FusedMatMul") == 0;
    if (!fused && (!s4d_fuse_is_op(g, i, "MatMul") || n->num_inputs != 2))
        return 0;
    if (n->num_inputs < 2 || n->num_outputs != 1 || !n->params || !s4d_fuse_is_f32(g, n->inputs[0]) ||
        !s4d_fuse_is_f32(g, n->outputs[0]))
        return 0;
    const s4d_tensor *w = s4d_fuse_const(g, n->inputs[1]);
    if (!w || w->rank != 2 || w->dtype != S4D_DTYPE_FLOAT32 || g->values[n->inputs[0]].t.rank < 1)
        return 0;
    l->w = n->inputs[1];
    if (fused) {
        const s4d_matmul_params *p = n->params;
        l->bias = p->has_bias ? n->inputs[2] : -1;
        l->relu = p->relu;
        l->norm = p->norm;
        l->scale = p->norm ? n->inputs[3] : -1;
        l->shift = p->norm && p->norm_bias ? n->inputs[4] : -1;
        l->eps = p->epsilon;
    }
    return 1;
}

/* The stand-in node's inputs and attributes for c; 0, or -1 when out of memory (attrs cleared). */
static int chain_node(const chain *c, int *ins, s4d_attr attrs[4])
{
    int64_t relu[S4D_MLP_MAX_LAYERS], norm[S4D_MLP_MAX_LAYERS];
    float eps[S4D_MLP_MAX_LAYERS];
    ins[0] = c->x;
    for (int i = 0; i < c->n; i++) {
        const link *l = &c->l[i];
        int *at = ins + S4D_MLP_INPUT(i);
        at[0] = l->w;
        at[1] = l->bias;
        at[2] = l->scale;
        at[3] = l->shift;
        relu[i] = l->relu;
        norm[i] = l->norm;
        eps[i] = l->norm ? l->eps : 0.0f;
    }
    int bad = s4d_fuse_attr_ints(&attrs[0], "activations", relu, (size_t)c->n);
    bad |= s4d_fuse_attr_ints(&attrs[1], "norms", norm, (size_t)c->n);
    bad |= s4d_fuse_attr_floats(&attrs[2], "epsilons", eps, (size_t)c->n);
    bad |= s4d_fuse_attr_int(&attrs[3], "input_begin", c->begin);
    if (bad) {
        for (int k = 0; k < 4; k++)
            s4d_attr_clear(&attrs[k]);
        return -1;
    }
    return 0;
}

/* Whether the chain's device takes it as one FusedMLP giving the last link's output. */
static s4d_status chain_supported(const s4d_ir_graph *g, const chain *c, int *ok)
{
    int ins[1 + 4 * S4D_MLP_MAX_LAYERS];
    s4d_attr attrs[4];
    *ok = 0;
    if (chain_node(c, ins, attrs) != 0)
        return S4D_ERR_NO_MEMORY;
    s4d_status st = s4d_fuse_supported(g, c->l[c->n - 1].node, "FusedMLP", ins, 1 + 4 * c->n, attrs, 4, ok);
    for (int k = 0; k < 4; k++)
        s4d_attr_clear(&attrs[k]);
    return st;
}

/* Link l on its own, as the kernel would take it. */
static s4d_status link_supported(const s4d_ir_graph *g, const link *l, int *ok)
{
    chain one = {.n = 1, .x = g->nodes[l->node].inputs[0], .slice = -1, .begin = 0};
    one.l[0] = *l;
    return chain_supported(g, &one, ok);
}

/* A Slice of only the last axis (step 1) of its input whose one reader is the chain: folds in. */
static void fold_slice(const s4d_ir_graph *g, const int *uses, chain *c)
{
    int v = c->x, p = g->values[v].producer;
    if (uses[v] != 1 || p < 0 || !s4d_fuse_is_op(g, p, "Slice") || !g->nodes[p].params ||
        g->nodes[p].device != g->nodes[c->l[0].node].device || g->nodes[p].num_outputs != 1)
        return;
    const s4d_slice_params *sp = g->nodes[p].params;
    int src = g->nodes[p].inputs[0];
    const s4d_tensor *in = &g->values[src].t, *out = &g->values[v].t;
    if (!s4d_fuse_is_f32(g, src) || sp->rank != in->rank || in->rank != out->rank || in->rank < 1)
        return;
    for (int d = 0; d < in->rank; d++) {
        int last = d == in->rank - 1;
        if (sp->step[d] != 1 || sp->count[d] != out->dims[d] || (!last && (sp->start[d] != 0 ||
                                                                             out->dims[d] != in->dims[d])))
            return;
    }
    c->slice = p;
    c->x = src;
    c->begin = sp->start[in->rank - 1];
}

/* Turns the chain's last link into the FusedMLP; the other links and the Slice die. */
static s4d_status rewrite(s4d_ir_graph *g, const chain *c, char *err, size_t errsz)
{
    s4d_ir_node *f = &g->nodes[c->l[c->n - 1].node];
    const int nin = 1 + 4 * c->n;
    int *ins = malloc(sizeof(int) * (size_t)nin);
    s4d_attr *attrs = calloc(4, sizeof *attrs);
    if (!ins || !attrs || chain_node(c, ins, attrs) != 0 || s4d_fuse_set_op(f, "s4d", "FusedMLP", 1) != 0) {
        free(ins);
        free(attrs);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    }
    free(f->inputs);
    f->inputs = ins;
    f->num_inputs = nin;
    for (int k = 0; k < f->num_attrs; k++)
        s4d_attr_clear(&f->attrs[k]);
    free(f->attrs);
    f->attrs = attrs;
    f->num_attrs = 4;
    for (int i = 0; i < c->n - 1; i++)
        g->nodes[c->l[i].node].dead = 1;
    if (c->slice >= 0)
        g->nodes[c->slice].dead = 1;
    return s4d_fuse_reinfer(g, c->l[c->n - 1].node, err, errsz);
}

/* Extends the chain that starts at link c->l[0] as far as links the device takes follow. */
static s4d_status grow(const s4d_ir_graph *g, const int *uses, chain *c)
{
    for (;;) {
        const link *last = &c->l[c->n - 1];
        int y = g->nodes[last->node].outputs[0];
        int j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
        link next;
        if (c->n == S4D_MLP_MAX_LAYERS || j < 0 || !link_of(g, j, &next) || g->nodes[j].inputs[0] != y ||
            g->nodes[j].inputs[1] == y || g->nodes[j].device != g->nodes[last->node].device)
            return S4D_OK;
        int ok;
        s4d_status st = link_supported(g, &next, &ok);
        if (st != S4D_OK || !ok)
            return st;
        c->l[c->n++] = next;
    }
}

s4d_status s4d_pass_fuse_mlp(s4d_ir_graph *g, char *err, size_t errsz)
{
    if (s4d_fuse_switched_off("S4D_FUSE_MLP"))
        return S4D_OK;
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        chain c = {.n = 1, .slice = -1, .begin = 0};
        if (!link_of(g, i, &c.l[0]))
            continue;
        const s4d_backend *be = s4d_backend_get(g->nodes[i].device);
        if (!be || be->host_memory || !s4d_fuse_can(g, i, "s4d", "FusedMLP", 1))
            continue;
        int ok;
        st = link_supported(g, &c.l[0], &ok);
        if (st != S4D_OK || !ok)
            continue;
        c.x = g->nodes[i].inputs[0];
        st = grow(g, uses, &c);
        if (st != S4D_OK)
            break;
        fold_slice(g, uses, &c);
        if (c.n < 2 && c.slice < 0)
            continue;
        st = chain_supported(g, &c, &ok);
        if (st != S4D_OK || !ok)
            continue;
        st = rewrite(g, &c, err, errsz);
    }
    if (st == S4D_ERR_NO_MEMORY && err && !err[0])
        s4d_fmt_err(err, errsz, st, OOM);
    free(uses);
    return st;
}
