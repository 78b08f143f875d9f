/*
 * MatMul(Q, KT) [-> Where(mask, S, fill) | Where(mask, fill, S)]
 *   -> Softmax(last axis) -> MatMul(P, V)  =>  s4d::FusedAttention
 *
 * The attention blocks of the Sparse4D head as PyTorch exports them: the
 * scores [..., Nq, Nk] go through memory four times in the unfused chain,
 * which a kernel that keeps them on chip (CUDA) or reuses one buffer (CPU)
 * avoids.
 *
 * Two neighbours join when nothing else reads what they pass on:
 *   - a Mul of Q by a constant scalar before the first product (the scale):
 *     the fused node multiplies each element of Q by it as it reads Q
 *     (attribute q_scale), the same product rounded once, as the Mul layer
 *     does; folding the scale into the scores instead would round
 *     differently;
 *   - a Transpose of the output that swaps the query axis with the batch
 *     axis before it ([..., H, Nq, Dv] -> [..., Nq, H, Dv], the heads put
 *     back together): the fused node writes its rows there (swap_out = 1).
 * Each is one layer less, and a pass over the tensor less, with the same bits.
 * S4D_FUSE_ATTENTION_NEIGHBOURS=0 in the environment leaves them as layers (to
 * compare).
 *
 * The fused node takes the place of the last node of the chain (the second
 * MatMul, or the Transpose after it), so that V, produced anywhere before
 * it, is ready when it runs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "ops/broadcast.h"
#include "ops/movement.h"
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
    int mul, tr; /* the scale Mul before and the Transpose after, or -1 */
    int q, kt, v, mask;
    float fill, scale;
    int fill_where_true;
} chain;

/* The last node of the chain: the fused node goes there. */
static int last_node(const chain *c)
{
    return c->tr >= 0 ? c->tr : c->mm2;
}

/*
 * Q = Mul(x, s) (or Mul(s, x)) with s a constant scalar of Q's dtype, Q read
 * by the first product alone and shaped as x: the fused node reads x and
 * scales it (c->mul, c->scale).
 */
static void match_scale(const s4d_ir_graph *g, const int *uses, chain *c)
{
    const int q = c->q;
    if (g->values[q].kind != S4D_VALUE_ACTIVATION || uses[q] != 1)
        return;
    const int p = g->values[q].producer;
    if (!s4d_fuse_is_op(g, p, "Mul"))
        return;
    const s4d_ir_node *n = &g->nodes[p];
    if (n->num_inputs != 2 || n->num_outputs != 1 || n->inputs[0] < 0 || n->inputs[1] < 0 ||
        n->device != g->nodes[c->mm1].device)
        return;
    for (int k = 0; k < 2; k++) {
        const int x = n->inputs[k], sv = n->inputs[1 - k];
        float f;
        if (s4d_fuse_const(g, x) || !scalar_fill(g, sv, g->values[q].t.dtype, &f) ||
            !s4d_tensor_same_dims(&g->values[x].t, &g->values[q].t) ||
            g->values[x].t.dtype != g->values[q].t.dtype)
            continue;
        c->mul = p;
        c->q = x;
        c->scale = f;
        return;
    }
}

/* The output read by a Transpose alone that swaps its axes r-3 and r-2 (r >= 3): c->tr. */
static void match_transpose_out(const s4d_ir_graph *g, const int *uses, chain *c)
{
    const int o = g->nodes[c->mm2].outputs[0];
    const int r = g->values[o].t.rank;
    const int j = uses[o] == 1 && r >= 3 ? s4d_fuse_consumer(g, o) : -1;
    if (!s4d_fuse_is_op(g, j, "Transpose") || !g->nodes[j].params)
        return;
    const s4d_ir_node *t = &g->nodes[j];
    const s4d_transpose_params *tp = t->params;
    if (t->num_inputs != 1 || t->num_outputs != 1 || t->inputs[0] != o || tp->rank != r)
        return;
    for (int i = 0; i < r; i++)
        if (tp->perm[i] != (i == r - 3 ? r - 2 : i == r - 2 ? r - 3 : i))
            return;
    c->tr = j;
}

/* Matches the chain from MatMul node i; 1 when it fits. */
static int match(const s4d_ir_graph *g, const int *uses, int i, chain *c)
{
    memset(c, 0, sizeof *c);
    c->where = c->mask = c->mul = c->tr = -1;
    c->scale = 1.0f;
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
    if (!s4d_fuse_switched_off("S4D_FUSE_ATTENTION_NEIGHBOURS")) {
        match_scale(g, uses, c);
        match_transpose_out(g, uses, c);
    }
    return 1;
}

#define MAX_ATTRS 4
static const char *const attr_names[MAX_ATTRS] = {"mask_fill", "fill_where_true", "q_scale", "swap_out"};

/* The fused node's attributes into a[] (names borrowed from attr_names); returns how many. */
static int make_attrs(const chain *c, s4d_attr a[MAX_ATTRS])
{
    memset(a, 0, MAX_ATTRS * sizeof *a);
    int n = 0;
    if (c->mask >= 0) {
        a[n].name = (char *)attr_names[0];
        a[n].type = S4D_ATTR_FLOAT;
        a[n++].f = c->fill;
        a[n].name = (char *)attr_names[1];
        a[n].type = S4D_ATTR_INT;
        a[n++].i = c->fill_where_true;
    }
    if (c->mul >= 0) {
        a[n].name = (char *)attr_names[2];
        a[n].type = S4D_ATTR_FLOAT;
        a[n++].f = c->scale;
    }
    if (c->tr >= 0) {
        a[n].name = (char *)attr_names[3];
        a[n].type = S4D_ATTR_INT;
        a[n++].i = 1;
    }
    return n;
}

/*
 * Whether the device of the chain runs the fused node as it would be (its
 * kernel's supports(), e.g. a head size the CUDA kernel refuses): asked on a
 * stand-in node before anything changes, so a refusal leaves the chain as is.
 */
static s4d_status fused_supported(const s4d_ir_graph *g, const chain *c, int *ok)
{
    const int ins[4] = {c->q, c->kt, c->v, c->mask};
    s4d_attr attrs[MAX_ATTRS];
    int na = make_attrs(c, attrs);
    return s4d_fuse_supported(g, last_node(c), "FusedAttention", ins, c->mask >= 0 ? 4 : 3, attrs, na, ok);
}

/* Turns the chain's last node into the fused node; the others die. */
static s4d_status rewrite(s4d_ir_graph *g, const chain *c, char *err, size_t errsz)
{
    s4d_ir_node *f = &g->nodes[last_node(c)];
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
    s4d_attr tmp[MAX_ATTRS];
    int na = make_attrs(c, tmp);
    if (na) {
        s4d_attr *a = calloc((size_t)na, sizeof *a);
        int ok = a != NULL;
        for (int k = 0; ok && k < na; k++) {
            a[k] = tmp[k];
            ok = (a[k].name = s4d_strdup(tmp[k].name)) != NULL;
        }
        if (!ok) {
            for (int k = 0; a && k < na; k++)
                if (a[k].name != tmp[k].name)
                    free(a[k].name);
            free(a);
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
        }
        f->attrs = a;
        f->num_attrs = na;
    }
    g->nodes[c->mm1].dead = 1;
    g->nodes[c->softmax].dead = 1;
    if (c->where >= 0)
        g->nodes[c->where].dead = 1;
    if (c->mul >= 0)
        g->nodes[c->mul].dead = 1;
    if (c->tr >= 0) {
        /* the layer keeps the product's name, as without the Transpose */
        char *name = f->name;
        f->name = g->nodes[c->mm2].name;
        g->nodes[c->mm2].name = name;
        g->nodes[c->mm2].dead = 1;
    }
    return s4d_fuse_reinfer(g, last_node(c), err, errsz);
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
        if (st == S4D_OK && !ok && (c.mul >= 0 || c.tr >= 0)) {
            /* the chain alone, its neighbours left as layers */
            c.q = c.mul >= 0 ? g->nodes[c.mm1].inputs[0] : c.q;
            c.mul = c.tr = -1;
            st = fused_supported(g, &c, &ok);
        }
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
