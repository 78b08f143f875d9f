/*
 * MatMul [-> Add(constant bias over the last axis)] [-> Relu]
 * [-> LayerNormalization(last axis, constant Scale and B)] -> FusedMatMul:
 * the Linear layers of the head (x W + b, often followed by ReLU, and in the
 * anchor encoder and the refinement branches by a LayerNorm) become one layer
 * that adds the bias, clamps and normalises while the rows are still in
 * cache (on CUDA, in the product kernel's epilogue where one block holds
 * whole rows; else a normalisation kernel right after the product).
 * S4D_FUSE_MATMUL_NORM=0 in the environment leaves the LayerNormalizations
 * apart (to compare).
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dense_util.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

/* Whether constant c adds like a bias of length n to an output of rank r and dtype dt. */
static int is_bias(const s4d_tensor *c, int64_t n, int r, s4d_dtype dt)
{
    return c && s4d_host_is_row_vector(c, n, r, dt);
}

/*
 * Node j when it is a LayerNormalization of value y (n wide, rank r, dtype dt)
 * over the last axis only, with constant Scale and B of n values, whose mean
 * and inverse deviation nobody reads; its epsilon in *eps. Else -1.
 */
static int norm_of(const s4d_ir_graph *g, int j, int y, const int *uses, int64_t n, int r, s4d_dtype dt, float *eps)
{
    if (!s4d_fuse_is_op(g, j, "LayerNormalization") || s4d_fuse_switched_off("S4D_FUSE_MATMUL_NORM"))
        return -1;
    const s4d_ir_node *ln = &g->nodes[j];
    if (ln->num_inputs < 2 || ln->inputs[0] != y || !is_bias(s4d_fuse_const(g, ln->inputs[1]), n, r, dt) ||
        (ln->num_inputs > 2 && ln->inputs[2] >= 0 && !is_bias(s4d_fuse_const(g, ln->inputs[2]), n, r, dt)))
        return -1;
    for (int o = 1; o < ln->num_outputs; o++)
        if (ln->outputs[o] >= 0 && uses[ln->outputs[o]] != 0)
            return -1;
    int64_t axis = -1;
    for (int k = 0; k < ln->num_attrs; k++) {
        if (strcmp(ln->attrs[k].name, "axis") == 0)
            axis = ln->attrs[k].i;
        else if (strcmp(ln->attrs[k].name, "epsilon") == 0)
            *eps = ln->attrs[k].f;
    }
    if (axis != -1 && axis != r - 1)
        return -1;
    if (!s4d_fuse_can(g, j, "s4d", "FusedMatMul", 1))
        return -1;
    return j;
}

s4d_status s4d_pass_fuse_matmul_add(s4d_ir_graph *g, char *err, size_t errsz)
{
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        if (!s4d_fuse_is_op(g, i, "MatMul") || g->nodes[i].num_inputs != 2 || g->nodes[i].num_outputs != 1)
            continue;
        if (!s4d_fuse_can(g, i, "s4d", "FusedMatMul", 1))
            continue;
        int y = g->nodes[i].outputs[0];
        const s4d_tensor *yt = &g->values[y].t;
        /* float16 fuses too: FusedMatMul runs it on CUDA (bias added in float before one rounding). */
        if ((yt->dtype != S4D_DTYPE_FLOAT32 && yt->dtype != S4D_DTYPE_FLOAT16) || yt->rank < 1 ||
            g->values[g->nodes[i].inputs[1]].t.rank < 2)
            continue;
        int64_t n = yt->dims[yt->rank - 1];
        int bias = -1, add_at = -1, relu_at = -1;
        int j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
        if (s4d_fuse_is_op(g, j, "Add") && g->nodes[j].num_inputs == 2) {
            const s4d_ir_node *add = &g->nodes[j];
            int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
            if (other != y && is_bias(s4d_fuse_const(g, other), n, yt->rank, yt->dtype)) {
                bias = other;
                add_at = j;
                y = add->outputs[0];
                j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
            }
        }
        if (s4d_fuse_is_op(g, j, "Relu")) {
            relu_at = j;
            y = g->nodes[j].outputs[0];
            j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
        }
        float eps = 1e-5f;
        const int ln_at = norm_of(g, j, y, uses, n, yt->rank, yt->dtype, &eps);
        if (add_at < 0 && relu_at < 0 && ln_at < 0)
            continue;
        s4d_ir_node *f = &g->nodes[i];
        int *ni = realloc(f->inputs, sizeof(int) * (ln_at >= 0 ? 5 : 3));
        if (!ni) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
            break;
        }
        f->inputs = ni;
        f->inputs[2] = bias;
        f->num_inputs = 3;
        f->outputs[0] = y;
        if (ln_at >= 0) {
            const s4d_ir_node *ln = &g->nodes[ln_at];
            f->inputs[3] = ln->inputs[1];
            f->inputs[4] = ln->num_inputs > 2 ? ln->inputs[2] : -1;
            f->num_inputs = 5;
            f->outputs[0] = ln->outputs[0];
        }
        if (s4d_fuse_set_op(f, "s4d", "FusedMatMul", 1) != 0 ||
            s4d_fuse_add_attr_string(f, "activation", relu_at >= 0 ? "Relu" : "") != 0 ||
            (ln_at >= 0 && (s4d_fuse_add_attr_string(f, "norm", "LayerNormalization") != 0 ||
                            s4d_fuse_add_attr_float(f, "epsilon", eps) != 0))) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
            break;
        }
        if (add_at >= 0)
            g->nodes[add_at].dead = 1;
        if (relu_at >= 0)
            g->nodes[relu_at].dead = 1;
        if (ln_at >= 0)
            g->nodes[ln_at].dead = 1;
        st = s4d_fuse_reinfer(g, i, err, errsz);
    }
    free(uses);
    return st;
}

/* Whether node i is a live MatMul, or a FusedMatMul that neither activates nor normalises nor adds a residual. */
static int plain_product(const s4d_ir_graph *g, int i)
{
    if (i < 0 || i >= g->num_nodes)
        return 0;
    const s4d_ir_node *n = &g->nodes[i];
    if (n->dead || n->kind != S4D_LAYER_OP || n->num_outputs != 1)
        return 0;
    if (s4d_fuse_is_op(g, i, "MatMul"))
        return n->num_inputs == 2;
    if (strcmp(n->domain, "s4d") != 0 || strcmp(n->op_type, "FusedMatMul") != 0 || n->num_inputs != 3)
        return 0;
    for (int k = 0; k < n->num_attrs; k++)
        if ((strcmp(n->attrs[k].name, "activation") == 0 || strcmp(n->attrs[k].name, "norm") == 0) &&
            n->attrs[k].type == S4D_ATTR_STRING && n->attrs[k].s && n->attrs[k].s[0] != '\0')
            return 0;
    return 1;
}

/* The fused node's attributes: no activation, and the normalisation when ln_at >= 0. */
static int residual_attrs(s4d_attr *at, int ln_at, float eps)
{
    memset(at, 0, 3 * sizeof *at);
    if (s4d_fuse_attr_string(&at[0], "activation", "") != 0)
        return -1;
    if (ln_at < 0)
        return 1;
    if (s4d_fuse_attr_string(&at[1], "norm", "LayerNormalization") != 0 ||
        s4d_fuse_attr_float(&at[2], "epsilon", eps) != 0)
        return -1;
    return 3;
}

static void free_attrs(s4d_attr *at, int n)
{
    for (int k = 0; k < n; k++)
        s4d_attr_clear(&at[k]);
}

/*
 * Add(P, R) [-> LayerNormalization] where P is the only reader's product of
 * plain_product and R has the output's shape and dtype: node P becomes one
 * FusedMatMul with R as its residual (input 5), placed where the last node
 * of the pattern was (R may be computed after P). The name stays P's.
 * The use counts stay true for every live node: the values that lose their
 * reader (P's output, and the Add's when the norm joins) had that one only.
 */
static s4d_status fuse_residual_at(s4d_ir_graph *g, int a, const int *uses, char *err, size_t errsz)
{
    const s4d_ir_node *add = &g->nodes[a];
    if (!s4d_fuse_is_op(g, a, "Add") || add->num_inputs != 2 || add->num_outputs != 1 ||
        add->inputs[0] == add->inputs[1])
        return S4D_OK;
    const int y = add->outputs[0];
    const s4d_tensor *yt = &g->values[y].t;
    if ((yt->dtype != S4D_DTYPE_FLOAT32 && yt->dtype != S4D_DTYPE_FLOAT16) || yt->rank < 1)
        return S4D_OK;
    for (int side = 0; side < 2; side++) {
        const int pv = add->inputs[side], r = add->inputs[1 - side];
        const int p = g->values[pv].producer;
        if (uses[pv] != 1 || !plain_product(g, p) || g->nodes[p].device != add->device ||
            !s4d_tensor_same_dims(&g->values[pv].t, yt) || !s4d_tensor_same_dims(&g->values[r].t, yt) ||
            g->values[pv].t.dtype != yt->dtype || g->values[r].t.dtype != yt->dtype ||
            g->values[g->nodes[p].inputs[1]].t.rank < 2)
            continue;
        float eps = 1e-5f;
        const int j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
        const int ln_at = norm_of(g, j, y, uses, yt->dims[yt->rank - 1], yt->rank, yt->dtype, &eps);
        const s4d_ir_node *pn = &g->nodes[p];
        const int ins[6] = {pn->inputs[0],
                            pn->inputs[1],
                            pn->num_inputs > 2 ? pn->inputs[2] : -1,
                            ln_at >= 0 ? g->nodes[ln_at].inputs[1] : -1,
                            ln_at >= 0 && g->nodes[ln_at].num_inputs > 2 ? g->nodes[ln_at].inputs[2] : -1,
                            r};
        const int out = ln_at >= 0 ? g->nodes[ln_at].outputs[0] : y;
        s4d_attr at[3];
        const int na = residual_attrs(at, ln_at, eps);
        if (na < 0) {
            free_attrs(at, 3);
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the residual fusion");
        }
        int ok = 0;
        s4d_status st = s4d_fuse_supported_as(g, a, "FusedMatMul", ins, 6, at, na, &g->values[out].t, &ok);
        if (st != S4D_OK || !ok) {
            free_attrs(at, 3);
            if (st != S4D_OK)
                return s4d_fmt_err(err, errsz, st, "out of memory in the residual fusion");
            continue;
        }
        /* The product moves to the pattern's last node t; the nodes it leaves behind die. */
        const int t = ln_at >= 0 ? ln_at : a;
        s4d_ir_node moved = g->nodes[p];
        g->nodes[p] = g->nodes[t];
        g->nodes[t] = moved;
        g->nodes[p].dead = 1;
        if (t != a)
            g->nodes[a].dead = 1;
        s4d_ir_node *f = &g->nodes[t];
        int *ni = realloc(f->inputs, sizeof ins);
        s4d_attr *fa = malloc(sizeof at);
        if (!ni || !fa || s4d_fuse_set_op(f, "s4d", "FusedMatMul", 1) != 0) {
            if (ni)
                f->inputs = ni;
            free(fa);
            free_attrs(at, 3);
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the residual fusion");
        }
        memcpy(ni, ins, sizeof ins);
        f->inputs = ni;
        f->num_inputs = 6;
        f->outputs[0] = out;
        free_attrs(f->attrs, f->num_attrs);
        free(f->attrs);
        memcpy(fa, at, sizeof at); /* the node takes what at owns */
        f->attrs = fa;
        f->num_attrs = na;
        return s4d_fuse_reinfer(g, t, err, errsz);
    }
    return S4D_OK;
}

s4d_status s4d_pass_fuse_matmul_residual(s4d_ir_graph *g, char *err, size_t errsz)
{
    if (s4d_fuse_switched_off("S4D_FUSE_RESIDUAL"))
        return S4D_OK;
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the residual fusion");
    s4d_status st = S4D_OK;
    for (int a = 0; a < g->num_nodes && st == S4D_OK; a++)
        st = fuse_residual_at(g, a, uses, err, errsz);
    free(uses);
    return st;
}
