/*
 * Conv fusions: BatchNormalization folded into the convolution's weights,
 * then a residual Add and a Relu absorbed into one FusedConv kernel that
 * applies them while the output is still in cache.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fuse_passes.h"
#include "util/util.h"

static int f32_vec(const s4d_tensor *t, int64_t n)
{
    return t && t->dtype == S4D_DTYPE_FLOAT32 && t->rank == 1 && t->dims[0] == n;
}

/* Folds BN (node j) into Conv (node i); returns 1 when done, 0 when not applicable, -1 on OOM. */
static int fold_bn(s4d_ir_graph *g, int i, int j)
{
    s4d_ir_node *conv = &g->nodes[i], *bn = &g->nodes[j];
    if (conv->num_inputs < 2 || bn->num_inputs != 5 || bn->inputs[0] != conv->outputs[0])
        return 0;
    for (int k = 1; k < bn->num_outputs; k++)
        if (bn->outputs[k] >= 0)
            return 0;
    for (int k = 0; k < bn->num_attrs; k++)
        if (strcmp(bn->attrs[k].name, "training_mode") == 0 && bn->attrs[k].i != 0)
            return 0;
    const s4d_tensor *w = s4d_fuse_const(g, conv->inputs[1]);
    if (!w || w->dtype != S4D_DTYPE_FLOAT32 || w->rank < 3)
        return 0;
    int64_t m = w->dims[0], per = s4d_tensor_numel(w) / (m ? m : 1);
    const s4d_tensor *b = conv->num_inputs > 2 && conv->inputs[2] >= 0 ? s4d_fuse_const(g, conv->inputs[2]) : NULL;
    if (conv->num_inputs > 2 && conv->inputs[2] >= 0 && !f32_vec(b, m))
        return 0;
    const s4d_tensor *p[4];
    for (int k = 0; k < 4; k++) {
        p[k] = s4d_fuse_const(g, bn->inputs[1 + k]);
        if (!f32_vec(p[k], m))
            return 0;
    }
    float eps = 1e-5f;
    for (int k = 0; k < bn->num_attrs; k++)
        if (strcmp(bn->attrs[k].name, "epsilon") == 0)
            eps = bn->attrs[k].f;
    const float *sc = p[0]->data, *beta = p[1]->data, *mean = p[2]->data, *var = p[3]->data;
    float *nw = malloc(sizeof(float) * (size_t)(m * per) + 1), *nb = malloc(sizeof(float) * (size_t)m + 1);
    if (!nw || !nb) {
        free(nw);
        free(nb);
        return -1;
    }
    const float *ow = w->data, *ob = b ? b->data : NULL;
    for (int64_t o = 0; o < m; o++) {
        /* In double so that folding adds no rounding beyond the final store. */
        double a = (double)sc[o] / sqrt((double)var[o] + (double)eps);
        for (int64_t q = 0; q < per; q++)
            nw[o * per + q] = (float)((double)ow[o * per + q] * a);
        nb[o] = (float)(((ob ? (double)ob[o] : 0.0) - (double)mean[o]) * a + (double)beta[o]);
    }
    /* Adding a value may move the value array that w points into. */
    int64_t wdims[S4D_MAX_RANK];
    const int wrank = w->rank;
    memcpy(wdims, w->dims, sizeof wdims);
    char name[512];
    snprintf(name, sizeof name, "%s/folded_bn_W", conv->name);
    int wv = s4d_fuse_add_const(g, name, nw, wrank, wdims);
    snprintf(name, sizeof name, "%s/folded_bn_B", g->nodes[i].name);
    int64_t bd[1] = {m};
    int bv = wv < 0 ? -1 : s4d_fuse_add_const(g, name, nb, 1, bd);
    if (wv < 0) {
        free(nb);
        return -1;
    }
    if (bv < 0)
        return -1;
    conv = &g->nodes[i]; /* the value array may have moved, the node array not */
    bn = &g->nodes[j];
    if (conv->num_inputs < 3) {
        int *ni = realloc(conv->inputs, sizeof(int) * 3);
        if (!ni)
            return -1;
        conv->inputs = ni;
        conv->num_inputs = 3;
    }
    conv->inputs[1] = wv;
    conv->inputs[2] = bv;
    conv->outputs[0] = bn->outputs[0];
    bn->dead = 1;
    return 1;
}

s4d_status s4d_pass_fuse_conv_bn(s4d_ir_graph *g, char *err, size_t errsz)
{
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+BN fusion");
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        if (!s4d_fuse_is_op(g, i, "Conv") || g->nodes[i].num_outputs != 1)
            continue;
        int y = g->nodes[i].outputs[0];
        if (uses[y] != 1)
            continue;
        int j = s4d_fuse_consumer(g, y);
        if (!s4d_fuse_is_op(g, j, "BatchNormalization"))
            continue;
        int r = fold_bn(g, i, j);
        if (r < 0)
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+BN fusion");
        else if (r > 0)
            st = s4d_fuse_reinfer(g, i, err, errsz);
    }
    free(uses);
    return st;
}

s4d_status s4d_pass_fuse_conv_act(s4d_ir_graph *g, char *err, size_t errsz)
{
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+Add+Relu fusion");
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        if (!s4d_fuse_is_op(g, i, "Conv") || g->nodes[i].num_outputs != 1 || g->nodes[i].num_inputs > 3)
            continue;
        if (!s4d_fuse_can(g, i, "s4d", "FusedConv", 1))
            continue;
        int y = g->nodes[i].outputs[0], z = -1, relu = 0, last = i, add_at = -1;
        int j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
        if (s4d_fuse_is_op(g, j, "Add") && g->nodes[j].num_inputs == 2) {
            const s4d_ir_node *add = &g->nodes[j];
            int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
            if (other >= 0 && other != y && s4d_tensor_same_dims(&g->values[other].t, &g->values[y].t)) {
                z = other;
                last = add_at = j;
                y = add->outputs[0];
                j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
            }
        }
        if (s4d_fuse_is_op(g, j, "Relu")) {
            relu = 1;
            last = j;
            y = g->nodes[j].outputs[0];
        }
        if (last == i)
            continue;
        /*
         * The fused node takes the place of the chain's last node: Z may be
         * produced after the Conv in node order, never after the Add.
         */
        s4d_ir_node conv = g->nodes[i];
        g->nodes[i] = g->nodes[last];
        g->nodes[last] = conv;
        g->nodes[i].dead = 1;
        if (add_at >= 0 && add_at != last)
            g->nodes[add_at].dead = 1; /* the absorbed Add between Conv and Relu */
        s4d_ir_node *f = &g->nodes[last];
        int *ni = realloc(f->inputs, sizeof(int) * 4);
        if (!ni) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+Add+Relu fusion");
            break;
        }
        f->inputs = ni;
        for (int k = f->num_inputs; k < 3; k++)
            f->inputs[k] = -1;
        f->num_inputs = 3;
        if (z >= 0) {
            f->inputs[3] = z;
            f->num_inputs = 4;
        }
        f->outputs[0] = y;
        if (s4d_fuse_set_op(f, "s4d", "FusedConv", 1) != 0 ||
            s4d_fuse_add_attr_string(f, "activation", relu ? "Relu" : "") != 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the Conv+Add+Relu fusion");
            break;
        }
        st = s4d_fuse_reinfer(g, last, err, errsz);
    }
    free(uses);
    return st;
}
