/*
 * The activations of mobile networks absorbed into the convolution before
 * them: Conv or FusedConv (without an activation of its own) followed by
 * Clip with constant bounds (ReLU6), HardSwish, HardSigmoid, LeakyRelu,
 * Sigmoid, or Sigmoid and a Mul of the convolution's output with it (SiLU, as
 * torch.onnx exports it; HardSigmoid and Mul is HardSwish before opset 14)
 * becomes one s4d::FusedConvAct, which the CPU
 * backend runs in the convolution's epilogue. Runs after the Conv+Add+Relu
 * fusion, so a residual Add is already inside the FusedConv.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fuse_passes.h"
#include "util/util.h"

/* Consumers of value v that are live nodes on node ni's device: up to 2, -1 if more or elsewhere. */
static int consumers(const s4d_ir_graph *g, int v, int ni, int *out)
{
    int n = 0;
    for (int k = 0; k < g->num_nodes; k++) {
        const s4d_ir_node *c = &g->nodes[k];
        if (c->dead)
            continue;
        for (int j = 0; j < c->num_inputs; j++) {
            if (c->inputs[j] != v)
                continue;
            if (n == 2 || c->device != g->nodes[ni].device)
                return -1;
            out[n++] = k;
            break;
        }
    }
    return n;
}

static float attr_f(const s4d_ir_node *n, const char *name, float dflt)
{
    for (int k = 0; k < n->num_attrs; k++)
        if (strcmp(n->attrs[k].name, name) == 0 && n->attrs[k].type == S4D_ATTR_FLOAT)
            return n->attrs[k].f;
    return dflt;
}

static const char *attr_s(const s4d_ir_node *n, const char *name)
{
    for (int k = 0; k < n->num_attrs; k++)
        if (strcmp(n->attrs[k].name, name) == 0 && n->attrs[k].type == S4D_ATTR_STRING)
            return n->attrs[k].s;
    return NULL;
}

/* A float32 scalar constant input k of node n: 1 and *v, or 0. */
static int const_scalar(const s4d_ir_graph *g, const s4d_ir_node *n, int k, float *v)
{
    if (k >= n->num_inputs || n->inputs[k] < 0)
        return -1; /* absent */
    const s4d_tensor *t = s4d_fuse_const(g, n->inputs[k]);
    if (!t || t->dtype != S4D_DTYPE_FLOAT32 || s4d_tensor_numel(t) != 1)
        return 0;
    *v = *(const float *)t->data;
    return 1;
}

/* Sets the activation attribute (FusedConv has one already, empty). */
static int set_activation(s4d_ir_node *n, const char *act)
{
    for (int k = 0; k < n->num_attrs; k++) {
        if (strcmp(n->attrs[k].name, "activation") != 0)
            continue;
        char *s = s4d_strdup(act);
        if (!s)
            return -1;
        free(n->attrs[k].s);
        n->attrs[k].s = s;
        n->attrs[k].s_len = strlen(act);
        n->attrs[k].type = S4D_ATTR_STRING;
        return 0;
    }
    return s4d_fuse_add_attr_string(n, "activation", act);
}

/* The activation chain after node i; 1 when found (act, alpha, beta, the nodes, the output). */
static int match(const s4d_ir_graph *g, const int *uses, int i, const char **act, float *alpha,
                 float *beta, int *chain, int *nchain, int *out)
{
    int y = g->nodes[i].outputs[0], c[2];
    if (g->values[y].t.dtype != S4D_DTYPE_FLOAT32)
        return 0;
    int n = consumers(g, y, i, c);
    *nchain = 0;
    *alpha = *beta = 0.0f;
    if (n == 1 && uses[y] == 1) {
        const s4d_ir_node *a = &g->nodes[c[0]];
        if (s4d_fuse_is_op(g, c[0], "Clip")) {
            *alpha = -INFINITY;
            *beta = INFINITY;
            if (a->opset < 11) {
                *alpha = attr_f(a, "min", -INFINITY);
                *beta = attr_f(a, "max", INFINITY);
            } else {
                int lo = const_scalar(g, a, 1, alpha), hi = const_scalar(g, a, 2, beta);
                if (lo == 0 || hi == 0)
                    return 0; /* a bound computed at run time */
            }
            if (!(*alpha <= *beta))
                return 0;
            *act = "Clip";
        } else if (s4d_fuse_is_op(g, c[0], "HardSwish")) {
            *act = "HardSwish";
        } else if (s4d_fuse_is_op(g, c[0], "HardSigmoid")) {
            *act = "HardSigmoid";
            *alpha = attr_f(a, "alpha", 0.2f);
            *beta = attr_f(a, "beta", 0.5f);
        } else if (s4d_fuse_is_op(g, c[0], "LeakyRelu")) {
            *act = "LeakyRelu";
            *alpha = attr_f(a, "alpha", 0.01f);
        } else if (s4d_fuse_is_op(g, c[0], "Sigmoid")) {
            *act = "Sigmoid";
        } else {
            return 0;
        }
        chain[(*nchain)++] = c[0];
        *out = a->outputs[0];
        return 1;
    }
    if (n == 2 && uses[y] == 2) {
        /* y * Sigmoid(y) is SiLU; y * HardSigmoid(y, 1/6, 1/2) is HardSwish (opset < 14 exports). */
        int s = -1, hard = 0;
        for (int k = 0; k < 2 && s < 0; k++) {
            if (s4d_fuse_is_op(g, c[k], "Sigmoid")) {
                s = c[k];
            } else if (s4d_fuse_is_op(g, c[k], "HardSigmoid") &&
                       fabsf(attr_f(&g->nodes[c[k]], "alpha", 0.2f) - 1.0f / 6.0f) < 1e-7f &&
                       attr_f(&g->nodes[c[k]], "beta", 0.5f) == 0.5f) {
                s = c[k];
                hard = 1;
            }
        }
        int m = s == c[0] ? c[1] : c[0];
        if (s < 0 || !s4d_fuse_is_op(g, m, "Mul") || g->nodes[m].num_inputs != 2)
            return 0;
        int sy = g->nodes[s].outputs[0];
        const int *mi = g->nodes[m].inputs;
        if (uses[sy] != 1 || !((mi[0] == y && mi[1] == sy) || (mi[0] == sy && mi[1] == y)))
            return 0;
        *act = hard ? "HardSwish" : "Silu";
        chain[(*nchain)++] = s;
        chain[(*nchain)++] = m;
        *out = g->nodes[m].outputs[0];
        return 1;
    }
    return 0;
}

s4d_status s4d_pass_fuse_conv_act_more(s4d_ir_graph *g, char *err, size_t errsz)
{
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+activation fusion");
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        const s4d_ir_node *cv = &g->nodes[i];
        int conv = s4d_fuse_is_op(g, i, "Conv") && cv->num_inputs <= 3;
        int fused = !cv->dead && cv->kind == S4D_LAYER_OP && strcmp(cv->domain, "s4d") == 0 &&
                    strcmp(cv->op_type, "FusedConv") == 0 && attr_s(cv, "activation") &&
                    attr_s(cv, "activation")[0] == '\0';
        if ((!conv && !fused) || cv->num_outputs != 1 || !s4d_fuse_can(g, i, "s4d", "FusedConvAct", 1))
            continue;
        const char *act;
        float alpha, beta;
        int chain[2], nchain, out;
        if (!match(g, uses, i, &act, &alpha, &beta, chain, &nchain, &out))
            continue;
        /* The fused node takes the place of the chain's last node (node order is topological). */
        int last = chain[nchain - 1];
        s4d_ir_node node = g->nodes[i];
        g->nodes[i] = g->nodes[last];
        g->nodes[last] = node;
        g->nodes[i].dead = 1;
        for (int k = 0; k < nchain - 1; k++)
            g->nodes[chain[k]].dead = 1;
        s4d_ir_node *f = &g->nodes[last];
        if (f->num_inputs < 3) {
            int *ni = realloc(f->inputs, sizeof(int) * 3);
            if (!ni) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+activation fusion");
                break;
            }
            f->inputs = ni;
            for (int k = f->num_inputs; k < 3; k++)
                f->inputs[k] = -1;
            f->num_inputs = 3;
        }
        f->outputs[0] = out;
        if (s4d_fuse_set_op(f, "s4d", "FusedConvAct", 1) != 0 || set_activation(f, act) != 0 ||
            s4d_fuse_add_attr_float(f, "activation_alpha", alpha) != 0 ||
            s4d_fuse_add_attr_float(f, "activation_beta", beta) != 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+activation fusion");
            break;
        }
        st = s4d_fuse_reinfer(g, last, err, errsz);
        /* Counts of the absorbed values no longer matter; the output keeps its consumers. */
    }
    free(uses);
    return st;
}
