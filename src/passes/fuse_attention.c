/*
 * MatMul(Q, KT) [-> Where(mask, S, fill) | Where(mask, fill, S)]
 *   -> Softmax(last axis) -> MatMul(P, V)  =>  s4d::FusedAttention
 *
 * The attention blocks of the Sparse4D head as PyTorch exports them: the
 * scores [..., Nq, Nk] go through memory four times in the unfused chain,
 * which a kernel that keeps them on chip (CUDA) or reuses one buffer (CPU)
 * avoids. The scale Mul before the first product stays a layer of its own:
 * folding it into the product would round differently.
 *
 * The fused node takes the place of the second MatMul, the last node of the
 * chain, so that V, produced anywhere before it, is ready when it runs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "ops/broadcast.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

#define OOM "out of memory in the attention fusion"

/* The fill of a Where: a constant float scalar of the scores' dtype; 0 when not one. */
static int scalar_fill(const s4d_ir_graph *g, int v, s4d_dtype dt, float *out)
{
    const s4d_tensor *t = s4d_fuse_const(g, v);
    if (!t || t->dtype != dt || s4d_tensor_numel(t) != 1)
        return 0;
    if (dt == S4D_DTYPE_FLOAT32)
        *out = *(const float *)t->data;
    else if (dt == S4D_DTYPE_FLOAT16)
        *out = s4d_half_to_float(*(const uint16_t *)t->data);
    else
        return 0;
    return 1;
}

/* Whether Softmax node n (input of rank r) normalises over exactly the last axis. */
static int softmax_last_axis(const s4d_ir_node *n, int r)
{
    /* Before opset 13 the op flattens from axis (default 1); from 13 on, one axis (default -1). */
    int64_t axis = n->opset >= 13 ? -1 : 1;
    for (int k = 0; k < n->num_attrs; k++)
        if (strcmp(n->attrs[k].name, "axis") == 0)
            axis = n->attrs[k].i;
    if (axis < 0)
        axis += r;
    return axis == r - 1;
}

/* A matched chain: the nodes and what the fused node takes. */
typedef struct chain {
    int mm1, where, softmax, mm2;
    int q, kt, v, mask;
    float fill;
    int fill_where_true;
} chain;

/* Matches the chain from MatMul node i; 1 when it fits. */
static int match(const s4d_ir_graph *g, const int *uses, int i, chain *c)
{
    memset(c, 0, sizeof *c);
    c->where = c->mask = -1;
    const s4d_ir_node *m1 = &g->nodes[i];
    if (!s4d_fuse_is_op(g, i, "MatMul") || m1->num_inputs != 2 || m1->num_outputs != 1 || m1->inputs[0] < 0 ||
        m1->inputs[1] < 0)
        return 0;
    int s = m1->outputs[0];
    const s4d_tensor *st = &g->values[s].t;
    if ((st->dtype != S4D_DTYPE_FLOAT32 && st->dtype != S4D_DTYPE_FLOAT16) || st->rank < 2 ||
        g->values[m1->inputs[0]].t.rank < 2 || g->values[m1->inputs[1]].t.rank < 2)
        return 0;
    c->mm1 = i;
    c->q = m1->inputs[0];
    c->kt = m1->inputs[1];
    int x = s;
    int j = uses[x] == 1 ? s4d_fuse_consumer(g, x) : -1;
    if (s4d_fuse_is_op(g, j, "Where")) {
        const s4d_ir_node *w = &g->nodes[j];
        if (w->num_inputs != 3 || w->num_outputs != 1 || w->inputs[0] < 0 || w->inputs[0] == s)
            return 0;
        int other;
        if (w->inputs[1] == s && w->inputs[2] != s) {
            other = w->inputs[2];
            c->fill_where_true = 0;
        } else if (w->inputs[2] == s && w->inputs[1] != s) {
            other = w->inputs[1];
            c->fill_where_true = 1;
        } else {
            return 0;
        }
        if (other < 0 || !scalar_fill(g, other, st->dtype, &c->fill))
            return 0;
        if (g->values[w->inputs[0]].t.dtype != S4D_DTYPE_BOOL || !s4d_tensor_same_dims(&g->values[w->outputs[0]].t, st))
            return 0;
        c->where = j;
        c->mask = w->inputs[0];
        x = w->outputs[0];
        j = uses[x] == 1 ? s4d_fuse_consumer(g, x) : -1;
    }
    if (!s4d_fuse_is_op(g, j, "Softmax"))
        return 0;
    const s4d_ir_node *sm = &g->nodes[j];
    if (sm->num_inputs != 1 || sm->num_outputs != 1 || !softmax_last_axis(sm, st->rank))
        return 0;
    c->softmax = j;
    x = sm->outputs[0];
    j = uses[x] == 1 ? s4d_fuse_consumer(g, x) : -1;
    if (!s4d_fuse_is_op(g, j, "MatMul"))
        return 0;
    const s4d_ir_node *m2 = &g->nodes[j];
    if (m2->num_inputs != 2 || m2->num_outputs != 1 || m2->inputs[0] != x || m2->inputs[1] < 0 ||
        m2->inputs[1] == x || g->values[m2->inputs[1]].t.rank < 2)
        return 0;
    c->mm2 = j;
    c->v = m2->inputs[1];
    return 1;
}

/* The fused node's attributes (names and strings owned by the caller unless dup). */
static void make_attrs(const chain *c, s4d_attr a[2], char *n0, char *n1)
{
    memset(a, 0, 2 * sizeof *a);
    a[0].name = n0;
    a[0].type = S4D_ATTR_FLOAT;
    a[0].f = c->fill;
    a[1].name = n1;
    a[1].type = S4D_ATTR_INT;
    a[1].i = c->fill_where_true;
}

/*
 * Whether the device of the chain runs the fused node as it would be (its
 * kernel's supports(), e.g. a head size the CUDA kernel refuses): asked on a
 * stand-in node before anything changes, so a refusal leaves the chain as is.
 */
static s4d_status fused_supported(const s4d_ir_graph *g, const chain *c, int *ok)
{
    const int ins[4] = {c->q, c->kt, c->v, c->mask};
    s4d_attr attrs[2];
    make_attrs(c, attrs, "mask_fill", "fill_where_true");
    return s4d_fuse_supported(g, c->mm2, "FusedAttention", ins, c->mask >= 0 ? 4 : 3, attrs,
                              c->mask >= 0 ? 2 : 0, ok);
}

/* Turns the chain's last node into the fused node; the others die. */
static s4d_status rewrite(s4d_ir_graph *g, const chain *c, char *err, size_t errsz)
{
    s4d_ir_node *f = &g->nodes[c->mm2];
    int nin = c->mask >= 0 ? 4 : 3;
    int *ni = realloc(f->inputs, sizeof(int) * 4);
    if (!ni)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    f->inputs = ni;
    ni[0] = c->q;
    ni[1] = c->kt;
    ni[2] = c->v;
    ni[3] = c->mask;
    f->num_inputs = nin;
    if (s4d_fuse_set_op(f, "s4d", "FusedAttention", 1) != 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    for (int k = 0; k < f->num_attrs; k++)
        s4d_attr_clear(&f->attrs[k]);
    free(f->attrs);
    f->attrs = NULL;
    f->num_attrs = 0;
    if (c->mask >= 0) {
        s4d_attr *a = calloc(2, sizeof *a);
        char *n0 = s4d_strdup("mask_fill"), *n1 = s4d_strdup("fill_where_true");
        if (!a || !n0 || !n1) {
            free(a);
            free(n0);
            free(n1);
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
        }
        make_attrs(c, a, n0, n1);
        f->attrs = a;
        f->num_attrs = 2;
    }
    g->nodes[c->mm1].dead = 1;
    g->nodes[c->softmax].dead = 1;
    if (c->where >= 0)
        g->nodes[c->where].dead = 1;
    return s4d_fuse_reinfer(g, c->mm2, err, errsz);
}

s4d_status s4d_pass_fuse_attention(s4d_ir_graph *g, char *err, size_t errsz)
{
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        chain c;
        if (!match(g, uses, i, &c) || !s4d_fuse_can(g, c.mm2, "s4d", "FusedAttention", 1))
            continue;
        int ok;
        st = fused_supported(g, &c, &ok);
        if (st != S4D_OK) {
            st = s4d_fmt_err(err, errsz, st, OOM);
            break;
        }
        if (!ok)
            continue;
        st = rewrite(g, &c, err, errsz);
    }
    free(uses);
    return st;
}
