/*
 * Products by constant matrices that follow each other with nothing but a
 * bias or a sum between them are one product: the build multiplies the
 * matrices (in double, rounded once to float32) and the run does one product
 * where it did two. Two patterns, float32 only:
 *
 *   chain:    Y = MatMul(MatMul(X, W1) [+ b1], W2) [+ b2]
 *          -> Y = MatMul(X, W1 W2) [+ (b1 W2 + b2)]
 *   residual: Y = MatMul(R + (MatMul(Z, Wo) [+ bo]), Wf) [+ bf]
 *          -> Y = (MatMul(Z, Wo Wf) [+ (bo Wf + bf)]) + MatMul(R, Wf)
 *
 * Sparse4D's decoupled attention is both: the value goes through fc_before
 * and then the attention's value projection (a chain), and the attention's
 * out_proj, the residual on its query and fc_after follow each other (the
 * residual pattern). On the chain of dependent layers a product goes in each
 * case: the product of R runs beside the attention, and the residual fusion
 * that follows takes the sum into the folded product's epilogue.
 *
 * Taken only where the folded product does no more multiplications than the
 * two it replaces (chain: K N <= K M + M N for W1 [K, M], W2 [M, N];
 * residual: N <= M), the intermediate values have one reader, the weights and
 * biases are finite constants and every node sits on one device. The sums
 * are rounded in another order (within float32's rounding of the unfolded
 * ones; tests/engine/linear_folding.py compares both with float64).
 * Names: the folded product keeps the second MatMul's name (chain) or Wo's
 * MatMul's (residual); there the product of R takes Wf's MatMul's name and
 * the last Add is "<Wf's MatMul>/folded". S4D_FOLD_LINEAR=0 turns it off.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dense_util.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

/* The constant 2-D float32 weight of MatMul node m when its first input is at least 2-D; else NULL. */
static const s4d_tensor *product_weight(const s4d_ir_graph *g, int m)
{
    if (!s4d_fuse_is_op(g, m, "MatMul"))
        return NULL;
    const s4d_ir_node *n = &g->nodes[m];
    if (n->num_inputs != 2 || n->num_outputs != 1 || n->inputs[0] < 0 || !s4d_fuse_is_f32(g, n->inputs[0]) ||
        g->values[n->inputs[0]].t.rank < 2)
        return NULL;
    const s4d_tensor *w = s4d_fuse_const(g, n->inputs[1]);
    if (!w || w->rank != 2 || w->dtype != S4D_DTYPE_FLOAT32 || w->dims[0] <= 0 || w->dims[1] <= 0)
        return NULL;
    return w;
}

static int finite_all(const s4d_tensor *t)
{
    const float *d = t->data;
    const int64_t n = s4d_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(d[i]))
            return 0;
    return 1;
}

/* The bias Add that alone reads value o ([N] constant, either input), its node in *node and the
   constant in *bias; 0 when there is none. */
static int bias_after(const s4d_ir_graph *g, int o, const int *uses, int64_t n, int *node, const s4d_tensor **bias)
{
    const int j = uses[o] == 1 ? s4d_fuse_consumer(g, o) : -1;
    if (!s4d_fuse_is_op(g, j, "Add") || g->nodes[j].num_inputs != 2 || g->nodes[j].num_outputs != 1 ||
        g->nodes[j].device != g->nodes[g->values[o].producer].device)
        return 0;
    const s4d_ir_node *a = &g->nodes[j];
    const int other = a->inputs[0] == o ? a->inputs[1] : a->inputs[0];
    const s4d_tensor *c = other >= 0 && other != o ? s4d_fuse_const(g, other) : NULL;
    if (!c || !s4d_host_is_row_vector(c, n, g->values[o].t.rank, S4D_DTYPE_FLOAT32) || !finite_all(c) ||
        !s4d_tensor_same_dims(&g->values[a->outputs[0]].t, &g->values[o].t))
        return 0;
    *node = j;
    *bias = c;
    return 1;
}

/* A product found above a value: MatMul node m (weight w) [then bias Add node b with constant bias]. */
typedef struct linear {
    int m, b;
    const s4d_tensor *w, *bias;
} linear;

/* Whether value v is made by a linear layer whose values other than v have one reader: MatMul(Z, W)
   or Add(MatMul(Z, W), bias) (either order), on the device of node `at`. */
static int linear_above(const s4d_ir_graph *g, int v, const int *uses, int at, linear *l)
{
    if (v < 0 || uses[v] != 1)
        return 0;
    int p = g->values[v].producer;
    l->b = -1;
    l->bias = NULL;
    l->w = NULL;
    if (s4d_fuse_is_op(g, p, "Add")) {
        const s4d_ir_node *a = &g->nodes[p];
        if (a->num_inputs != 2 || a->num_outputs != 1)
            return 0;
        for (int side = 0; side < 2; side++) {
            const int mv = a->inputs[side];
            const s4d_tensor *w = mv >= 0 && uses[mv] == 1 ? product_weight(g, g->values[mv].producer) : NULL;
            int b;
            const s4d_tensor *c;
            if (w && bias_after(g, mv, uses, w->dims[1], &b, &c) && b == p) {
                l->b = p;
                l->bias = c;
                l->w = w;
                p = g->values[mv].producer;
                break;
            }
        }
        if (l->b < 0)
            return 0;
    } else {
        l->w = product_weight(g, p);
    }
    l->m = p;
    /* The weights' values are read last, once everything else matches. */
    return l->w && g->nodes[p].device == g->nodes[at].device &&
           (l->b < 0 || g->nodes[l->b].device == g->nodes[at].device) && finite_all(l->w);
}

/* A [K, M] times B [M, N] in double, rounded to float32 (malloc'd; NULL when out of memory). */
static float *matrix_product(const s4d_tensor *a, const s4d_tensor *b)
{
    const int64_t k = a->dims[0], m = a->dims[1], n = b->dims[1];
    const float *x = a->data, *y = b->data;
    float *out = malloc((size_t)(k * n) * sizeof *out);
    double *row = malloc((size_t)n * sizeof *row);
    if (!out || !row) {
        free(out);
        free(row);
        return NULL;
    }
    for (int64_t i = 0; i < k; i++) {
        for (int64_t j = 0; j < n; j++)
            row[j] = 0.0;
        for (int64_t t = 0; t < m; t++) {
            const double s = x[i * m + t];
            for (int64_t j = 0; j < n; j++)
                row[j] += s * (double)y[t * n + j];
        }
        for (int64_t j = 0; j < n; j++)
            out[i * n + j] = (float)row[j];
    }
    free(row);
    return out;
}

/* bias [M] times W [M, N] (in double) plus extra [N] when given: N float32 values, or NULL. */
static float *bias_product(const s4d_tensor *bias, const s4d_tensor *w, const s4d_tensor *extra)
{
    const int64_t m = w->dims[0], n = w->dims[1];
    const float *b = bias ? bias->data : NULL, *y = w->data, *e = extra ? extra->data : NULL;
    float *out = malloc((size_t)n * sizeof *out);
    if (!out)
        return NULL;
    for (int64_t j = 0; j < n; j++) {
        double s = e ? (double)e[j] : 0.0;
        if (b) {
            double t = 0.0;
            for (int64_t i = 0; i < m; i++)
                t += (double)b[i] * (double)y[i * n + j];
            s += t;
        }
        out[j] = (float)s;
    }
    return out;
}

typedef struct fold {
    s4d_ir_graph *g;
    s4d_fuse_anchor *anchors;
    int num_anchors, cap_anchors, first;
    char *err;
    size_t errsz;
} fold;

static s4d_status oom(fold *f)
{
    return s4d_fmt_err(f->err, f->errsz, S4D_ERR_NO_MEMORY, "out of memory in the linear folding");
}

/* A new constant "<base>/<what>" of the given data (taken); -1 when out of memory. */
static int new_const(s4d_ir_graph *g, const char *base, const char *what, float *data, int rank,
                     const int64_t *dims)
{
    char name[700];
    snprintf(name, sizeof name, "%s/%s", base, what);
    return s4d_fuse_add_const(g, name, data, rank, dims);
}

/* A new float32 activation "<base>/<what>"; -1 when out of memory. */
static int new_value(s4d_ir_graph *g, const char *base, const char *what)
{
    char name[700];
    snprintf(name, sizeof name, "%s/%s", base, what);
    const int v = s4d_ir_add_value(g, name, S4D_VALUE_ACTIVATION);
    if (v >= 0)
        g->values[v].t.dtype = S4D_DTYPE_FLOAT32;
    return v;
}

/* Node n becomes op_type (ONNX domain, the opset of node like) with inputs a, b and output out. */
static int make_binary(s4d_ir_graph *g, int n, int like, const char *op_type, int a, int b, int out)
{
    s4d_ir_node *d = &g->nodes[n];
    const s4d_ir_node *l = &g->nodes[like];
    if (s4d_fuse_set_op(d, l->domain, op_type, l->opset) != 0)
        return -1;
    for (int k = 0; k < d->num_attrs; k++)
        s4d_attr_clear(&d->attrs[k]);
    free(d->attrs);
    d->attrs = NULL;
    d->num_attrs = 0;
    if (d->num_inputs < 2) {
        int *in = realloc(d->inputs, 2 * sizeof *in);
        if (!in)
            return -1;
        d->inputs = in;
    }
    d->num_inputs = 2;
    d->inputs[0] = a;
    d->inputs[1] = b;
    d->outputs[0] = out;
    return 0;
}

/* Node dead, and its outputs made by nothing. */
static void retire(s4d_ir_graph *g, int node)
{
    g->nodes[node].dead = 1;
    for (int k = 0; k < g->nodes[node].num_outputs; k++)
        if (g->nodes[node].outputs[k] >= 0)
            g->values[g->nodes[node].outputs[k]].producer = -1;
}

/* Chain at MatMul p2 = MatMul(h, W2): 1 when rewritten, 0 when it does not match, -1 on error. */
static int fold_chain(fold *f, int p2, const int *uses)
{
    s4d_ir_graph *g = f->g;
    const s4d_tensor *w2 = product_weight(g, p2);
    linear l;
    if (!w2 || !linear_above(g, g->nodes[p2].inputs[0], uses, p2, &l))
        return 0;
    const int64_t k = l.w->dims[0], m = l.w->dims[1], n = w2->dims[1];
    if (w2->dims[0] != m || k * n > k * m + m * n || !finite_all(w2))
        return 0;
    const int y = g->nodes[p2].outputs[0];
    int b2 = -1;
    const s4d_tensor *bias2 = NULL;
    if (!bias_after(g, y, uses, n, &b2, &bias2))
        b2 = -1;
    char name[600];
    snprintf(name, sizeof name, "%s", g->nodes[p2].name);
    const int64_t wd[2] = {k, n}, bd[1] = {n};
    float *wc = matrix_product(l.w, w2);
    float *bc = l.bias || bias2 ? bias_product(l.bias, w2, bias2) : NULL;
    if (!wc || ((l.bias || bias2) && !bc)) {
        free(wc);
        free(bc);
        return -1;
    }
    const int x = g->nodes[l.m].inputs[0];
    const int wv = new_const(g, name, "folded_weight", wc, 2, wd);
    const int bv = bc ? new_const(g, name, "folded_bias", bc, 1, bd) : -1;
    if (wv < 0 || (bc && bv < 0))
        return -1;
    retire(g, l.m);
    if (l.b >= 0)
        retire(g, l.b);
    g->nodes[p2].inputs[0] = x;
    g->nodes[p2].inputs[1] = wv;
    if (b2 >= 0) {
        s4d_ir_node *bn = &g->nodes[b2];
        bn->inputs[bn->inputs[0] == y ? 1 : 0] = bv;
    } else if (bv >= 0) {
        const int yp = new_value(g, name, "folded_product");
        char nm[700];
        snprintf(nm, sizeof nm, "%s/folded_bias", name);
        if (yp < 0 || s4d_fuse_append_binary(g, &f->anchors, &f->num_anchors, &f->cap_anchors, p2, nm, "Add", yp, bv,
                                             y) < 0)
            return -1;
        g->nodes[p2].outputs[0] = yp;
    }
    if (s4d_fuse_reinfer(g, p2, f->err, f->errsz) != S4D_OK)
        return -1;
    if (b2 >= 0 && s4d_fuse_reinfer(g, b2, f->err, f->errsz) != S4D_OK)
        return -1;
    if (b2 < 0 && bv >= 0 && s4d_fuse_reinfer(g, g->num_nodes - 1, f->err, f->errsz) != S4D_OK)
        return -1;
    return 1;
}

/* Residual at MatMul pf = MatMul(S, Wf), S = Add(R, linear): 1 when rewritten, 0 when not, -1 on error. */
static int fold_residual(fold *f, int pf, const int *uses)
{
    s4d_ir_graph *g = f->g;
    const s4d_tensor *wf = product_weight(g, pf);
    const int s = g->nodes[pf].inputs[0];
    if (!wf || uses[s] != 1)
        return 0;
    const int a = g->values[s].producer;
    if (!s4d_fuse_is_op(g, a, "Add") || g->nodes[a].num_inputs != 2 || g->nodes[a].num_outputs != 1 ||
        g->nodes[a].device != g->nodes[pf].device || g->nodes[a].inputs[0] == g->nodes[a].inputs[1])
        return 0;
    const int64_t m = wf->dims[0], n = wf->dims[1];
    if (n > m)
        return 0;
    /* The side whose linear layer comes later in the graph (the one the other waits for). */
    linear l = {-1, -1, NULL, NULL};
    int r = -1;
    for (int side = 0; side < 2; side++) {
        const int v = g->nodes[a].inputs[side], other = g->nodes[a].inputs[1 - side];
        linear c;
        if (v < 0 || other < 0 || !s4d_fuse_is_f32(g, v) || !s4d_fuse_is_f32(g, other) ||
            !s4d_tensor_same_dims(&g->values[v].t, &g->values[s].t) ||
            !s4d_tensor_same_dims(&g->values[other].t, &g->values[s].t) || !linear_above(g, v, uses, a, &c) ||
            c.w->dims[1] != m)
            continue;
        if (l.m < 0 || c.m > l.m) {
            l = c;
            r = other;
        }
    }
    if (l.m < 0 || !finite_all(wf))
        return 0;
    const int64_t k = l.w->dims[0];
    const int y = g->nodes[pf].outputs[0];
    int bf = -1;
    const s4d_tensor *biasf = NULL;
    if (!bias_after(g, y, uses, n, &bf, &biasf))
        bf = -1, biasf = NULL;
    char pname[600], fname[600];
    snprintf(pname, sizeof pname, "%s", g->nodes[l.m].name);
    snprintf(fname, sizeof fname, "%s", g->nodes[pf].name);
    const int64_t wd[2] = {k, n}, bd[1] = {n};
    const int has_bias = l.bias || biasf;
    float *wc = matrix_product(l.w, wf);
    float *bc = has_bias ? bias_product(l.bias, wf, biasf) : NULL;
    if (!wc || (has_bias && !bc)) {
        free(wc);
        free(bc);
        return -1;
    }
    const int wv = new_const(g, pname, "folded_weight", wc, 2, wd);
    const int bv = bc ? new_const(g, pname, "folded_bias", bc, 1, bd) : -1;
    const int pz = new_value(g, pname, "folded_product");
    const int pzb = bc ? new_value(g, pname, "folded_product_bias") : -1;
    const int rf = new_value(g, fname, "residual_product");
    char *an = s4d_strdup(fname), *fn = malloc(strlen(fname) + 16), *bn = malloc(strlen(fname) + 16);
    if (wv < 0 || (bc && (bv < 0 || pzb < 0)) || pz < 0 || rf < 0 || !an || !fn || !bn) {
        free(an);
        free(fn);
        free(bn);
        return -1;
    }
    snprintf(fn, strlen(fname) + 16, "%s/folded", fname);
    snprintf(bn, strlen(fname) + 16, "%s/folded_bias", fname);
    /* The nodes, in their order: Z (Wo Wf) where Wo's product was; R Wf where the sum was (R is
       ready there); the folded bias after Z's product (where its bias was, else where Wf's
       product was); the sum of the two products last, the folded one first (so that the
       residual fusion takes R Wf into its epilogue). */
    const int out = bf >= 0 ? g->nodes[bf].outputs[0] : y;
    const int bias_node = l.b >= 0 ? l.b : bf >= 0 ? pf : -1;
    const int sum_node = l.b < 0 && bf >= 0 ? bf : pf;
    g->values[s].producer = -1;
    g->values[y].producer = -1;
    if (bf >= 0)
        g->values[g->nodes[bf].outputs[0]].producer = -1;
    if (l.b >= 0)
        g->values[g->nodes[l.b].outputs[0]].producer = -1;
    s4d_ir_node *pm = &g->nodes[l.m];
    g->values[pm->outputs[0]].producer = -1;
    pm->inputs[1] = wv;
    pm->outputs[0] = pz;
    const int wf_v = g->nodes[pf].inputs[1];
    int bad = make_binary(g, a, pf, "MatMul", r, wf_v, rf) != 0 ||
              (bias_node >= 0 && make_binary(g, bias_node, a, "Add", pz, bv, pzb) != 0) ||
              make_binary(g, sum_node, a, "Add", pzb >= 0 ? pzb : pz, rf, out) != 0;
    if (!bad && bf >= 0 && sum_node != bf)
        retire(g, bf);
    free(g->nodes[a].name);
    g->nodes[a].name = an;
    free(g->nodes[sum_node].name);
    g->nodes[sum_node].name = fn;
    if (bias_node == pf) {
        free(g->nodes[pf].name);
        g->nodes[pf].name = bn;
    } else {
        free(bn);
    }
    if (bad || s4d_fuse_reinfer(g, l.m, f->err, f->errsz) != S4D_OK ||
        s4d_fuse_reinfer(g, a, f->err, f->errsz) != S4D_OK ||
        (bias_node >= 0 && s4d_fuse_reinfer(g, bias_node, f->err, f->errsz) != S4D_OK) ||
        s4d_fuse_reinfer(g, sum_node, f->err, f->errsz) != S4D_OK)
        return -1;
    return 1;
}

s4d_status s4d_pass_fold_linear(s4d_ir_graph *g, char *err, size_t errsz)
{
    if (s4d_fuse_switched_off("S4D_FOLD_LINEAR"))
        return S4D_OK;
    err[0] = '\0';
    fold f = {g, NULL, 0, 0, g->num_nodes, err, errsz};
    s4d_status st = S4D_OK;
    /* One rewrite at a time, the reader counts taken again after each: a folded product may
       fold once more with the layer before it. */
    for (int changed = 1; changed && st == S4D_OK;) {
        changed = 0;
        int *uses = s4d_fuse_use_counts(g);
        if (!uses) {
            st = oom(&f);
            break;
        }
        for (int i = 0; i < f.first && !changed; i++) {
            if (g->nodes[i].dead)
                continue;
            int r = fold_chain(&f, i, uses);
            if (r == 0)
                r = fold_residual(&f, i, uses);
            if (r < 0)
                st = err[0] ? S4D_ERR_INTERNAL : oom(&f);
            changed = r > 0;
        }
        free(uses);
    }
    if (st == S4D_OK)
        st = s4d_fuse_place_appended(g, f.first, f.anchors, err, errsz);
    free(f.anchors);
    return st;
}
