/*
 * The decomposed LayerNorm that exports below opset 17 emit,
 *   m = ReduceMean(x); d = x - m; v = ReduceMean(Pow(d, 2)); n = d / Sqrt(v + eps)
 *   [y = n * gamma] [y = y + beta]
 * over trailing axes, becomes one LayerNormalization (opset 17) kernel: one
 * read of x for the statistics and one for the output instead of nine ops.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fuse_passes.h"
#include "util/util.h"

/* A constant float32 scalar (any rank, one element); NAN when not. */
static double const_scalar(const s4d_ir_graph *g, int v)
{
    const s4d_tensor *t = s4d_fuse_const(g, v);
    if (!t || t->dtype != S4D_DTYPE_FLOAT32 || s4d_tensor_numel(t) != 1)
        return NAN;
    return *(const float *)t->data;
}

/*
 * First reduced axis of a keepdims ReduceMean over trailing axes of its input
 * (rank r), or -1.
 */
static int reduce_trailing(const s4d_ir_graph *g, const s4d_ir_node *n, int r)
{
    const int64_t *axes = NULL;
    int64_t count = 0, buf[S4D_MAX_RANK];
    for (int k = 0; k < n->num_attrs; k++) {
        const s4d_attr *a = &n->attrs[k];
        if (strcmp(a->name, "keepdims") == 0 && a->i == 0)
            return -1;
        if (strcmp(a->name, "axes") == 0 && a->type == S4D_ATTR_INTS) {
            axes = a->ints;
            count = (int64_t)a->count;
        }
    }
    if (!axes && n->num_inputs > 1 && n->inputs[1] >= 0) {
        const s4d_tensor *t = s4d_fuse_const(g, n->inputs[1]);
        if (!t || t->dtype != S4D_DTYPE_INT64 || t->rank > 1 || s4d_tensor_numel(t) > S4D_MAX_RANK)
            return -1;
        count = s4d_tensor_numel(t);
        memcpy(buf, t->data, sizeof(int64_t) * (size_t)count);
        axes = buf;
    }
    if (!axes || count < 1 || count > r)
        return -1;
    /* The set must be exactly {r - count, ..., r - 1}. */
    int seen[S4D_MAX_RANK] = {0};
    for (int64_t i = 0; i < count; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < r - count || a >= r || seen[a])
            return -1;
        seen[a] = 1;
    }
    return (int)(r - count);
}

/* The other input of a two-input node, given one; -1 when v is not an input. */
static int other_input(const s4d_ir_node *n, int v)
{
    if (n->num_inputs != 2)
        return -1;
    if (n->inputs[0] == v)
        return n->inputs[1];
    if (n->inputs[1] == v)
        return n->inputs[0];
    return -1;
}

/*
 * A constant that scales or shifts the normalised dims (x rank r, first
 * normalised axis ax) without changing the output's shape; its copy reshaped
 * to the trailing r - ax dims (or fewer) goes into *out. -1 when not.
 */
static int param_copy(s4d_ir_graph *g, int v, const s4d_tensor *x, int ax, const char *name)
{
    const s4d_tensor *t = s4d_fuse_const(g, v);
    if (!t || t->dtype != S4D_DTYPE_FLOAT32 || t->rank > x->rank)
        return -1;
    int nr = x->rank - ax, keep = t->rank < nr ? t->rank : nr;
    for (int i = 0; i < t->rank - keep; i++)
        if (t->dims[i] != 1)
            return -1; /* would broadcast over the rows */
    int64_t dims[S4D_MAX_RANK];
    for (int i = 0; i < keep; i++) {
        dims[i] = t->dims[t->rank - keep + i];
        int64_t xd = x->dims[x->rank - keep + i];
        if (dims[i] != xd && dims[i] != 1)
            return -1;
    }
    size_t bytes = sizeof(float) * (size_t)s4d_tensor_numel(t);
    float *data = malloc(bytes + 1);
    if (!data)
        return -2;
    memcpy(data, t->data, bytes);
    int nv = s4d_fuse_add_const(g, name, data, keep, dims);
    return nv < 0 ? -2 : nv;
}

static int set_ln_attrs(s4d_ir_node *n, int64_t axis, float eps)
{
    s4d_attr *a = calloc(2, sizeof *a);
    char *n1 = s4d_strdup("axis"), *n2 = s4d_strdup("epsilon");
    if (!a || !n1 || !n2) {
        free(a);
        free(n1);
        free(n2);
        return -1;
    }
    for (int k = 0; k < n->num_attrs; k++)
        s4d_attr_clear(&n->attrs[k]);
    free(n->attrs);
    a[0].name = n1;
    a[0].type = S4D_ATTR_INT;
    a[0].i = axis;
    a[1].name = n2;
    a[1].type = S4D_ATTR_FLOAT;
    a[1].f = eps;
    n->attrs = a;
    n->num_attrs = 2;
    return 0;
}

/* Tries the pattern rooted at ReduceMean node i; 1 fused, 0 no match, <0 out of memory. */
static int try_fuse(s4d_ir_graph *g, const int *uses, int i, char *err, size_t errsz, s4d_status *st)
{
    const s4d_ir_node *r1 = &g->nodes[i];
    if (r1->num_outputs != 1 || r1->inputs[0] < 0)
        return 0;
    int x = r1->inputs[0], m = r1->outputs[0];
    const s4d_tensor xt = g->values[x].t;
    if (xt.dtype != S4D_DTYPE_FLOAT32)
        return 0;
    int ax = reduce_trailing(g, r1, xt.rank);
    if (ax < 0 || uses[m] != 1)
        return 0;
    int sub = s4d_fuse_consumer(g, m);
    if (!s4d_fuse_is_op(g, sub, "Sub") || g->nodes[sub].num_inputs != 2 || g->nodes[sub].inputs[0] != x ||
        g->nodes[sub].inputs[1] != m)
        return 0;
    int d = g->nodes[sub].outputs[0];
    if (uses[d] != 2)
        return 0;
    int pw = -1, dv = -1;
    for (int k = 0; k < g->num_nodes; k++) {
        if (g->nodes[k].dead)
            continue;
        if (s4d_fuse_is_op(g, k, "Pow") && g->nodes[k].inputs[0] == d)
            pw = k;
        else if (s4d_fuse_is_op(g, k, "Div") && g->nodes[k].num_inputs == 2 && g->nodes[k].inputs[0] == d)
            dv = k;
    }
    if (pw < 0 || dv < 0 || const_scalar(g, g->nodes[pw].inputs[1]) != 2.0)
        return 0;
    int p = g->nodes[pw].outputs[0];
    int r2 = uses[p] == 1 ? s4d_fuse_consumer(g, p) : -1;
    if (!s4d_fuse_is_op(g, r2, "ReduceMean") || g->nodes[r2].inputs[0] != p ||
        reduce_trailing(g, &g->nodes[r2], xt.rank) != ax)
        return 0;
    int v = g->nodes[r2].outputs[0];
    int ad = uses[v] == 1 ? s4d_fuse_consumer(g, v) : -1;
    if (!s4d_fuse_is_op(g, ad, "Add"))
        return 0;
    double eps = const_scalar(g, other_input(&g->nodes[ad], v));
    if (!(eps >= 0.0))
        return 0;
    int ve = g->nodes[ad].outputs[0];
    int sq = uses[ve] == 1 ? s4d_fuse_consumer(g, ve) : -1;
    if (!s4d_fuse_is_op(g, sq, "Sqrt"))
        return 0;
    int s = g->nodes[sq].outputs[0];
    if (uses[s] != 1 || g->nodes[dv].inputs[1] != s)
        return 0;
    int y = g->nodes[dv].outputs[0], mul = -1, badd = -1, gamma = -1, beta = -1;
    char name[512];
    int j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
    if (s4d_fuse_is_op(g, j, "Mul")) {
        snprintf(name, sizeof name, "%s/ln_scale", r1->name);
        gamma = param_copy(g, other_input(&g->nodes[j], y), &xt, ax, name);
        if (gamma == -2)
            return -1;
        if (gamma >= 0) {
            mul = j;
            y = g->nodes[j].outputs[0];
            j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
            if (s4d_fuse_is_op(g, j, "Add")) {
                snprintf(name, sizeof name, "%s/ln_bias", g->nodes[i].name);
                beta = param_copy(g, other_input(&g->nodes[j], y), &xt, ax, name);
                if (beta == -2)
                    return -1;
                if (beta >= 0) {
                    badd = j;
                    y = g->nodes[j].outputs[0];
                }
            }
        }
    }
    if (gamma < 0) {
        /* No affine part: a scale of ones. */
        int64_t cols = 1, dims[S4D_MAX_RANK];
        for (int k = ax; k < xt.rank; k++) {
            dims[k - ax] = xt.dims[k];
            cols *= xt.dims[k];
        }
        float *ones = malloc(sizeof(float) * (size_t)cols + 1);
        if (!ones)
            return -1;
        for (int64_t k = 0; k < cols; k++)
            ones[k] = 1.0f;
        snprintf(name, sizeof name, "%s/ln_scale", g->nodes[i].name);
        gamma = s4d_fuse_add_const(g, name, ones, xt.rank - ax, dims);
        if (gamma < 0)
            return -1;
    }
    s4d_ir_node *f = &g->nodes[i];
    int *ni = realloc(f->inputs, sizeof(int) * 3);
    if (!ni)
        return -1;
    f->inputs = ni;
    f->inputs[0] = x;
    f->inputs[1] = gamma;
    f->inputs[2] = beta;
    f->num_inputs = 3;
    f->outputs[0] = y;
    if (s4d_fuse_set_op(f, "", "LayerNormalization", 17) != 0 || set_ln_attrs(f, ax, (float)eps) != 0)
        return -1;
    int gone[8] = {sub, pw, r2, ad, sq, dv, mul, badd};
    for (int k = 0; k < 8; k++)
        if (gone[k] >= 0)
            g->nodes[gone[k]].dead = 1;
    *st = s4d_fuse_reinfer(g, i, err, errsz);
    return 1;
}

s4d_status s4d_pass_fuse_layernorm(s4d_ir_graph *g, char *err, size_t errsz)
{
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        if (!s4d_fuse_is_op(g, i, "ReduceMean") || !s4d_fuse_can(g, i, "", "LayerNormalization", 17))
            continue;
        /* Counts change with every fusion, so take them afresh. */
        int *uses = s4d_fuse_use_counts(g);
        if (!uses)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the LayerNorm fusion");
        int r = try_fuse(g, uses, i, err, errsz, &st);
        free(uses);
        if (r < 0)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the LayerNorm fusion");
    }
    return st;
}
