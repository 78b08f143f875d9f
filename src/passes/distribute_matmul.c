/*
 * MatMul(Add(X, Y), W) with constant W [K, N], where X and Y broadcast against
 * each other (X [.., a, 1, K], Y [.., 1, b, K]): the product of the sum runs
 * a x b rows, the products of the terms a + b. Sparse4D's weights_fc is this
 * pattern: the instance features plus each camera's embedding, [900, 1, 256]
 * + [1, 6, 256], times W [256, 416], 5400 rows where 906 do. The pass rewrites
 *
 *     S = Add(X, Y); O = MatMul(S, W) [; OB = Add(O, bias)]
 * as
 *     P = MatMul(X, W) [; P = Add(P, bias)]; Q = MatMul(Y, W); O (OB) = Add(P, Q)
 *
 * so the bias stays with the larger product (FusedMatMul's epilogue after the
 * fusion that follows) and the last Add broadcasts the two results. The sums
 * are rounded differently ((X W + b) + Y W instead of (X + Y) W + b), which is
 * why the pass takes only products whose sum has at least twice the rows of
 * its two terms together. The names stay: the X product keeps the MatMul's,
 * the Y product is "<MatMul>/distributed", the last Add "<Add>/distributed".
 * S4D_DISTRIBUTE_MATMUL=0 turns it off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dense_util.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

/* Rows of tensor t over its last axis (its elements / the last dim); -1 when empty. */
static int64_t rows_of(const s4d_tensor *t)
{
    if (t->rank < 1 || t->dims[t->rank - 1] <= 0)
        return -1;
    int64_t r = 1;
    for (int d = 0; d < t->rank - 1; d++)
        r *= t->dims[d];
    return r;
}

/* Whether dtype dt is one the rewrite takes (products of floats). */
static int float_type(s4d_dtype dt)
{
    return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16;
}

/* Node m when it is MatMul(Add(X, Y), W) that the pass rewrites (the Add in *add, X the side with
   more rows in *xv, Y in *yv); else 0. */
static int matches(const s4d_ir_graph *g, int m, const int *uses, int *add, int *xv, int *yv)
{
    const s4d_ir_node *mn = &g->nodes[m];
    if (!s4d_fuse_is_op(g, m, "MatMul") || mn->num_inputs != 2 || mn->num_outputs != 1)
        return 0;
    const int sv = mn->inputs[0];
    const s4d_tensor *w = s4d_fuse_const(g, mn->inputs[1]);
    if (sv < 0 || !w || w->rank != 2 || uses[sv] != 1)
        return 0;
    const int a = g->values[sv].producer;
    if (!s4d_fuse_is_op(g, a, "Add"))
        return 0;
    const s4d_ir_node *an = &g->nodes[a];
    if (an->num_inputs != 2 || an->num_outputs != 1 || an->device != mn->device || an->inputs[0] == an->inputs[1] ||
        an->inputs[0] < 0 || an->inputs[1] < 0)
        return 0;
    const s4d_tensor *s = &g->values[sv].t, *x = &g->values[an->inputs[0]].t, *y = &g->values[an->inputs[1]].t;
    const int64_t k = w->dims[0];
    if (!float_type(s->dtype) || x->dtype != s->dtype || y->dtype != s->dtype || w->dtype != s->dtype ||
        s->rank < 2 || x->rank != s->rank || y->rank != s->rank || s->dims[s->rank - 1] != k ||
        x->dims[x->rank - 1] != k || y->dims[y->rank - 1] != k)
        return 0;
    const int64_t rs = rows_of(s), rx = rows_of(x), ry = rows_of(y);
    if (rs <= 0 || rx <= 0 || ry <= 0 || 2 * (rx + ry) > rs)
        return 0;
    *add = a;
    *xv = rx >= ry ? an->inputs[0] : an->inputs[1];
    *yv = rx >= ry ? an->inputs[1] : an->inputs[0];
    return 1;
}

/* The Add of a constant bias of n values over the last axis that alone reads value o, or -1. */
static int bias_add_of(const s4d_ir_graph *g, int o, const int *uses, int64_t n, int rank, s4d_dtype dt)
{
    const int j = uses[o] == 1 ? s4d_fuse_consumer(g, o) : -1;
    if (!s4d_fuse_is_op(g, j, "Add") || g->nodes[j].num_inputs != 2 || g->nodes[j].num_outputs != 1)
        return -1;
    const s4d_ir_node *b = &g->nodes[j];
    const int other = b->inputs[0] == o ? b->inputs[1] : b->inputs[0];
    const s4d_tensor *c = other >= 0 && other != o ? s4d_fuse_const(g, other) : NULL;
    return c && s4d_host_is_row_vector(c, n, rank, dt) ? j : -1;
}

/* A new activation value named "<base>/<what>" (shape from inference later); -1 when out of memory. */
static int new_value(s4d_ir_graph *g, const char *base, const char *what, s4d_dtype dt)
{
    char name[700];
    snprintf(name, sizeof name, "%s/%s", base, what);
    const int v = s4d_ir_add_value(g, name, S4D_VALUE_ACTIVATION);
    if (v >= 0)
        g->values[v].t.dtype = dt;
    return v;
}

typedef struct dist {
    s4d_ir_graph *g;
    s4d_fuse_anchor *anchors;
    int num_anchors, cap_anchors, first;
    char *err;
    size_t errsz;
} dist;

static s4d_status oom(dist *d)
{
    return s4d_fmt_err(d->err, d->errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul distribution");
}

/* Appends Add(p, q) -> out named "<name>/distributed" on node at's device, placed after node after. */
static int append_add(dist *d, int at, int after, const char *name, int p, int q, int out)
{
    char nm[700];
    snprintf(nm, sizeof nm, "%s/distributed", name);
    const int c = s4d_fuse_append_binary(d->g, &d->anchors, &d->num_anchors, &d->cap_anchors, after, nm, "Add", p, q,
                                         out);
    if (c >= 0)
        d->g->nodes[c].device = d->g->nodes[at].device;
    return c;
}

/* Rewrites the match at MatMul m (Add a, sides xv and yv). */
static s4d_status rewrite(dist *d, int m, int a, int xv, int yv, const int *uses)
{
    s4d_ir_graph *g = d->g;
    const int sv = g->nodes[m].inputs[0], w = g->nodes[m].inputs[1], o = g->nodes[m].outputs[0];
    const s4d_dtype dt = g->values[o].t.dtype;
    const int b = bias_add_of(g, o, uses, g->values[w].t.dims[1], g->values[o].t.rank, dt);
    /* Names first: the node and value arrays may move when they grow. */
    char mname[600], aname[600];
    snprintf(mname, sizeof mname, "%s", g->nodes[m].name);
    snprintf(aname, sizeof aname, "%s", g->nodes[a].name);
    const int p = new_value(g, mname, "rows", dt), q = new_value(g, mname, "distributed", dt);
    const int pb = b >= 0 ? new_value(g, mname, "rows_bias", dt) : -1;
    if (p < 0 || q < 0 || (b >= 0 && pb < 0))
        return oom(d);
    /* Y W where the Add was (Y is ready there); X W where the MatMul is. */
    s4d_ir_node *an = &g->nodes[a];
    char qname[700];
    snprintf(qname, sizeof qname, "%s/distributed", mname);
    char *nm = s4d_strdup(qname);
    if (!nm || s4d_fuse_set_op(an, g->nodes[m].domain, "MatMul", g->nodes[m].opset) != 0) {
        free(nm);
        return oom(d);
    }
    free(an->name);
    an->name = nm;
    an->opset = g->nodes[m].opset;
    an->inputs[0] = yv;
    an->inputs[1] = w;
    an->outputs[0] = q;
    g->nodes[m].inputs[0] = xv;
    g->nodes[m].outputs[0] = p;
    g->values[sv].producer = -1; /* the sum is no longer made; nothing reads it */
    int last = p, after = m;
    if (b >= 0) {
        s4d_ir_node *bn = &g->nodes[b];
        const int out = bn->outputs[0];
        bn->inputs[bn->inputs[0] == o ? 0 : 1] = p;
        bn->outputs[0] = pb;
        g->values[o].producer = -1; /* the product of the sum; nothing reads it now */
        last = pb;
        after = b;
        if (append_add(d, b, after, aname, last, q, out) < 0)
            return oom(d);
    } else if (append_add(d, a, after, aname, last, q, o) < 0) {
        return oom(d);
    }
    s4d_status st = s4d_fuse_reinfer(g, a, d->err, d->errsz);
    if (st == S4D_OK)
        st = s4d_fuse_reinfer(g, m, d->err, d->errsz);
    if (st == S4D_OK && b >= 0)
        st = s4d_fuse_reinfer(g, b, d->err, d->errsz);
    if (st == S4D_OK)
        st = s4d_fuse_reinfer(g, g->num_nodes - 1, d->err, d->errsz);
    return st;
}

s4d_status s4d_pass_distribute_matmul(s4d_ir_graph *g, char *err, size_t errsz)
{
    if (s4d_fuse_switched_off("S4D_DISTRIBUTE_MATMUL"))
        return S4D_OK;
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul distribution");
    dist d = {g, NULL, 0, 0, g->num_nodes, err, errsz};
    s4d_status st = S4D_OK;
    for (int m = 0; m < d.first && st == S4D_OK; m++) {
        int a, xv, yv;
        if (matches(g, m, uses, &a, &xv, &yv))
            st = rewrite(&d, m, a, xv, yv, uses);
    }
    free(uses);
    if (st == S4D_OK)
        st = s4d_fuse_place_appended(g, d.first, d.anchors, err, errsz);
    free(d.anchors);
    return st;
}
