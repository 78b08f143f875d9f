/*
 * Movement folded into element-wise layers: a Slice, Transpose, Gather of
 * constant indices or Expand, with the Reshapes, Squeezes and Unsqueezes
 * around them, reads each output element from one input element at an
 * offset that is linear in the output's coordinates: a strided view. An
 * s4d::FusedPointwise layer reads its inputs through such views
 * (ops/pointwise.h, attribute views), so
 *   - before a pointwise layer: the layer reads the chain's source through
 *     the view and the movement layers, left without readers, die;
 *   - after one: a pointwise layer whose output only a chain of such layers
 *     reads (one reader each, no graph output on the way) computes the
 *     chain's result directly, every input read through the view the chain
 *     makes of it, and the chain dies. Expand is not taken there (it would
 *     compute values again).
 * Each such layer is a launch on a GPU that costs more than the bytes it
 * moves; the Sparse4D head has dozens of them between its element-wise
 * layers (the anchor's fields cut out, the key points' coordinates picked,
 * the projected points reordered for the aggregation).
 *
 * Values are bit for bit those of the unfolded layers: each output element
 * is computed from the same input elements by the same program; only where
 * they are read from changes. A view whose innermost dim is not contiguous
 * reads scattered elements; on tensors of more than FOLD_MAX_SCATTERED
 * elements a dedicated Transpose copies faster, so those stay.
 *
 * The pass runs after the fusions and the channels-last pass, before the
 * precision pass (whose casts convert a whole source value; a view still
 * reads the elements it read). S4D_FOLD_VIEWS=0 in the environment turns it
 * off (to compare with unfolded engines).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops/movement.h"
#include "ops/pointwise.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

#define OOM "out of memory in the view folding"
#define FOLD_MAX_CHAIN 16
#define FOLD_MAX_SCATTERED ((int64_t)1 << 20)

/* A strided view of a value's buffer: element i0..ir-1 is element off + sum(i_d * st[d]). */
typedef struct vw {
    int rank;
    int64_t dims[S4D_MAX_RANK];
    int64_t st[S4D_MAX_RANK];
    int64_t off;
} vw;

typedef enum mv_kind { MV_NONE = 0, MV_RESHAPE, MV_EXPAND, MV_TRANSPOSE, MV_SLICE, MV_GATHER } mv_kind;

static int64_t numel_of(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

static void vw_plain(vw *v, const s4d_tensor *t)
{
    v->rank = t->rank;
    v->off = 0;
    int64_t s = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        v->dims[d] = t->dims[d];
        v->st[d] = s;
        s *= t->dims[d];
    }
}

/* Whether v reads t exactly as t lies (no record needed). */
static int vw_is_plain(const vw *v, const s4d_tensor *t)
{
    if (v->off != 0 || v->rank != t->rank)
        return 0;
    int64_t s = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        if (v->dims[d] != t->dims[d] || (t->dims[d] != 1 && v->st[d] != s))
            return 0;
        s *= t->dims[d];
    }
    return 1;
}

/* The same elements in row-major order under new dims; 0 when no strides express it. */
static int vw_reshape(vw *v, int rank, const int64_t *dims)
{
    if (rank > S4D_MAX_RANK || numel_of(v->rank, v->dims) != numel_of(rank, dims) ||
        numel_of(rank, dims) == 0)
        return 0;
    int64_t od[S4D_MAX_RANK], os[S4D_MAX_RANK];
    int orank = 0;
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] != 1) {
            od[orank] = v->dims[d];
            os[orank++] = v->st[d];
        }
    vw n = {.rank = rank, .off = v->off};
    int i = 0, j = 0;
    while (j < rank) {
        if (dims[j] == 1) {
            n.dims[j] = 1;
            n.st[j++] = 0;
            continue;
        }
        if (i >= orank)
            return 0;
        /* The smallest runs of old dims i..i2 and new dims j..j2 with one product. */
        int i2 = i, j2 = j;
        int64_t po = od[i], pn = dims[j];
        while (po != pn) {
            if (po < pn) {
                if (++i2 >= orank)
                    return 0;
                po *= od[i2];
            } else {
                if (++j2 >= rank)
                    return 0;
                pn *= dims[j2];
            }
        }
        for (int k = i; k < i2; k++)
            if (os[k] != os[k + 1] * od[k + 1])
                return 0; /* the old run is not one stride apart: no view of it */
        int64_t s = os[i2];
        for (int k = j2; k >= j; k--) {
            n.dims[k] = dims[k];
            n.st[k] = dims[k] == 1 ? 0 : s;
            s *= dims[k];
        }
        i = i2 + 1;
        j = j2 + 1;
    }
    if (i != orank)
        return 0;
    *v = n;
    return 1;
}

/* ONNX broadcasting of v to dims (rank >= v's): repeated dims read stride 0. */
static int vw_expand(vw *v, int rank, const int64_t *dims)
{
    if (rank < v->rank || rank > S4D_MAX_RANK)
        return 0;
    vw n = {.rank = rank, .off = v->off};
    int lead = rank - v->rank;
    for (int d = 0; d < rank; d++) {
        int64_t have = d < lead ? 1 : v->dims[d - lead], st = d < lead ? 0 : v->st[d - lead];
        if (have != dims[d] && have != 1)
            return 0;
        n.dims[d] = dims[d];
        n.st[d] = have == dims[d] && dims[d] != 1 ? st : 0;
    }
    *v = n;
    return 1;
}

static int vw_transpose(vw *v, const s4d_transpose_params *p)
{
    if (p->rank != v->rank)
        return 0;
    vw n = {.rank = v->rank, .off = v->off};
    for (int d = 0; d < v->rank; d++) {
        if (p->perm[d] < 0 || p->perm[d] >= v->rank)
            return 0;
        n.dims[d] = v->dims[p->perm[d]];
        n.st[d] = v->st[p->perm[d]];
    }
    *v = n;
    return 1;
}

static int vw_slice(vw *v, const s4d_slice_params *p)
{
    if (p->rank != v->rank)
        return 0;
    for (int d = 0; d < v->rank; d++) {
        if (p->count[d] <= 0 || (p->count[d] > 1 && p->step[d] <= 0))
            return 0;
        v->off += p->start[d] * v->st[d];
        v->st[d] = p->count[d] > 1 ? v->st[d] * p->step[d] : 0;
        v->dims[d] = p->count[d];
    }
    return 1;
}

/* Gather along axis by constant indices that are one value or an arithmetic progression. */
static int vw_gather(vw *v, int axis, const s4d_tensor *idx)
{
    if (axis < 0 || axis >= v->rank || idx->rank > 1 || !idx->data ||
        (idx->dtype != S4D_DTYPE_INT64 && idx->dtype != S4D_DTYPE_INT32))
        return 0;
    int64_t n = s4d_tensor_numel(idx), dim = v->dims[axis];
    if (n <= 0)
        return 0;
    int64_t first = 0, step = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = idx->dtype == S4D_DTYPE_INT64 ? ((const int64_t *)idx->data)[k]
                                                  : ((const int32_t *)idx->data)[k];
        if (i < 0)
            i += dim;
        if (i < 0 || i >= dim)
            return 0;
        if (k == 0)
            first = i;
        else if (k == 1)
            step = i - first;
        if (i != first + k * step || step < 0)
            return 0;
    }
    v->off += first * v->st[axis];
    if (idx->rank == 0) {
        for (int d = axis; d + 1 < v->rank; d++) {
            v->dims[d] = v->dims[d + 1];
            v->st[d] = v->st[d + 1];
        }
        v->rank--;
    } else {
        v->st[axis] = n > 1 ? v->st[axis] * step : 0;
        v->dims[axis] = n;
    }
    return 1;
}

/* Whether value v has a fixed, known shape. */
static int static_shape(const s4d_ir_graph *g, int v)
{
    return v >= 0 && g->values[v].shape_known && !g->values[v].symbolic && g->values[v].t.rank >= 0 &&
           g->values[v].t.rank <= S4D_MAX_RANK;
}

/* What node ni is as a view of its input 0 on device dev; MV_NONE when it is none. */
static mv_kind mv_of(const s4d_ir_graph *g, int ni, s4d_device dev)
{
    if (ni < 0 || ni >= g->num_nodes)
        return MV_NONE;
    const s4d_ir_node *n = &g->nodes[ni];
    if (n->dead || n->kind != S4D_LAYER_OP || n->device != dev || !s4d_ir_is_onnx_domain(n->domain) ||
        n->num_outputs != 1 || n->num_inputs < 1 || !static_shape(g, n->outputs[0]) ||
        !static_shape(g, n->inputs[0]) || g->values[n->inputs[0]].t.dtype != g->values[n->outputs[0]].t.dtype)
        return MV_NONE;
    static const char *const reshapes[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
    for (size_t i = 0; i < sizeof reshapes / sizeof reshapes[0]; i++)
        if (strcmp(n->op_type, reshapes[i]) == 0)
            return MV_RESHAPE;
    if (strcmp(n->op_type, "Expand") == 0)
        return MV_EXPAND;
    if (!n->params)
        return MV_NONE;
    if (strcmp(n->op_type, "Transpose") == 0)
        return MV_TRANSPOSE;
    if (strcmp(n->op_type, "Slice") == 0)
        return MV_SLICE;
    if (strcmp(n->op_type, "Gather") == 0 && n->num_inputs == 2 && s4d_fuse_const(g, n->inputs[1]))
        return MV_GATHER;
    return MV_NONE;
}

/* v (a view of node ni's input 0) made a view of its output; 0 when strides cannot express it. */
static int vw_apply(const s4d_ir_graph *g, int ni, vw *v)
{
    const s4d_ir_node *n = &g->nodes[ni];
    const s4d_tensor *out = &g->values[n->outputs[0]].t;
    int ok = 0;
    switch (mv_of(g, ni, n->device)) {
    case MV_RESHAPE: ok = vw_reshape(v, out->rank, out->dims); break;
    case MV_EXPAND: ok = vw_expand(v, out->rank, out->dims); break;
    case MV_TRANSPOSE: ok = vw_transpose(v, n->params); break;
    case MV_SLICE: ok = vw_slice(v, n->params); break;
    case MV_GATHER:
        ok = vw_gather(v, ((const s4d_gather_params *)n->params)->axis, s4d_fuse_const(g, n->inputs[1]));
        break;
    case MV_NONE: break;
    }
    if (!ok || v->rank != out->rank)
        return 0;
    for (int d = 0; d < out->rank; d++)
        if (v->dims[d] != out->dims[d])
            return 0;
    return 1;
}

/* The input k of a FusedPointwise being rewritten: the value it reads and how. */
typedef struct fold_in {
    int src;
    vw view;
} fold_in;

/*
 * The deepest source of value v through movement producers on dev that strides express, with the
 * view that reads v from it; 0 when no kernel-running layer is on the way (Reshapes alone are views
 * of the plan already).
 */
static int absorb(const s4d_ir_graph *g, int v, s4d_device dev, fold_in *fi)
{
    int chain[FOLD_MAX_CHAIN], nc = 0, u = v;
    while (nc < FOLD_MAX_CHAIN && g->values[u].kind == S4D_VALUE_ACTIVATION) {
        int p = g->values[u].producer;
        if (mv_of(g, p, dev) == MV_NONE)
            break;
        chain[nc++] = p;
        u = g->nodes[p].inputs[0];
    }
    for (int depth = nc; depth >= 1; depth--) {
        int src = g->nodes[chain[depth - 1]].inputs[0], kernels = 0;
        vw view;
        vw_plain(&view, &g->values[src].t);
        int ok = 1;
        for (int c = depth - 1; c >= 0 && ok; c--) {
            ok = vw_apply(g, chain[c], &view);
            kernels += mv_of(g, chain[c], dev) != MV_RESHAPE;
        }
        if (ok && kernels) {
            fi->src = src;
            fi->view = view;
            return 1;
        }
    }
    return 0;
}

/* The one live node that reads v, as its input 0 only; -1 when none or more. */
static int sole_reader(const s4d_ir_graph *g, const int *uses, int v)
{
    if (uses[v] != 1 || g->values[v].is_output)
        return -1;
    int r = s4d_fuse_consumer(g, v);
    return r >= 0 && g->nodes[r].inputs[0] == v ? r : -1;
}

/*
 * The chain of one-reader movement on dev that reads value v (Expand never: it would compute
 * values again), at most FOLD_MAX_CHAIN layers, into chain; returns the length of its longest
 * start that ends in a layer running a kernel (0: none, Reshapes alone are views already).
 */
static int after_chain(const s4d_ir_graph *g, const int *uses, int v, s4d_device dev, int *chain)
{
    int nc = 0, best = 0;
    while (nc < FOLD_MAX_CHAIN) {
        int r = sole_reader(g, uses, v);
        mv_kind kind = mv_of(g, r, dev);
        if (kind == MV_NONE || kind == MV_EXPAND)
            break;
        chain[nc++] = r;
        if (kind != MV_RESHAPE)
            best = nc;
        v = g->nodes[r].outputs[0];
    }
    return best;
}

/* Whether S4D_FOLD_VIEWS=0 turns the pass off. */
static int fold_off(void)
{
    return s4d_fuse_switched_off("S4D_FOLD_VIEWS");
}

/* Whether a view reads scattered elements (its innermost non-unit dim is not contiguous). */
static int scattered(const vw *v)
{
    for (int d = v->rank - 1; d >= 0; d--)
        if (v->dims[d] != 1)
            return v->st[d] != 1 && v->st[d] != 0;
    return 0;
}

typedef struct fold {
    s4d_ir_graph *g;
    int *uses;
    char *err;
    size_t errsz;
} fold;

/* The views attribute for ins (records for the inputs not read as they lie). */
static int views_attr(const s4d_ir_graph *g, const fold_in *ins, int nin, s4d_attr *a)
{
    int64_t w[S4D_PW_MAX_INPUTS * (3 + 2 * S4D_MAX_RANK)];
    size_t n = 0;
    for (int k = 0; k < nin; k++) {
        const vw *v = &ins[k].view;
        if (vw_is_plain(v, &g->values[ins[k].src].t))
            continue;
        w[n++] = k;
        w[n++] = v->off;
        w[n++] = v->rank;
        for (int d = 0; d < v->rank; d++)
            w[n++] = v->dims[d];
        for (int d = 0; d < v->rank; d++)
            w[n++] = v->st[d];
    }
    return s4d_fuse_attr_ints(a, "views", w, n);
}

/* Node ni's attributes with views replaced by va (taken); 0 on success. */
static int set_views(s4d_ir_node *n, s4d_attr *va)
{
    for (int k = 0; k < n->num_attrs; k++)
        if (strcmp(n->attrs[k].name, "views") == 0) {
            s4d_attr_clear(&n->attrs[k]);
            n->attrs[k] = *va;
            memset(va, 0, sizeof *va);
            return 0;
        }
    s4d_attr *a = realloc(n->attrs, sizeof *a * ((size_t)n->num_attrs + 1));
    if (!a)
        return -1;
    n->attrs = a;
    n->attrs[n->num_attrs++] = *va;
    memset(va, 0, sizeof *va);
    return 0;
}

static int has_views(const s4d_ir_node *n)
{
    for (int k = 0; k < n->num_attrs; k++)
        if (strcmp(n->attrs[k].name, "views") == 0)
            return 1;
    return 0;
}

/* Tries the folds on FusedPointwise node ni: the movement before its inputs, then after its output. */
static s4d_status fold_node(fold *f, int ni)
{
    s4d_ir_graph *g = f->g;
    s4d_ir_node *n = &g->nodes[ni];
    int nin = n->num_inputs, w = n->outputs[0];
    if (nin < 1 || nin > S4D_PW_MAX_INPUTS || w < 0 || !static_shape(g, w) || has_views(n))
        return S4D_OK;
    fold_in ins[S4D_PW_MAX_INPUTS];
    int changed = 0;
    for (int k = 0; k < nin; k++) {
        int v = n->inputs[k];
        if (v < 0 || !static_shape(g, v))
            return S4D_OK;
        fold_in fi;
        if (absorb(g, v, n->device, &fi) &&
            (!scattered(&fi.view) || s4d_tensor_numel(&g->values[w].t) <= FOLD_MAX_SCATTERED)) {
            ins[k] = fi;
            changed = 1;
        } else {
            ins[k].src = v;
            vw_plain(&ins[k].view, &g->values[v].t);
        }
    }
    /* After the output: the longest chain of one-reader movement that ends in a kernel-running layer. */
    int chain[FOLD_MAX_CHAIN], best = after_chain(g, f->uses, w, n->device, chain);
    fold_in after[S4D_PW_MAX_INPUTS];
    int sunk = 0;
    for (int len = best; len >= 1 && !sunk; len--) {
        if (mv_of(g, chain[len - 1], n->device) == MV_RESHAPE)
            continue;
        const s4d_tensor *wt = &g->values[w].t;
        int ok = 1;
        for (int k = 0; k < nin && ok; k++) {
            after[k] = ins[k];
            ok = vw_expand(&after[k].view, wt->rank, wt->dims);
            for (int c = 0; c < len && ok; c++)
                ok = vw_apply(g, chain[c], &after[k].view);
            ok = ok && (!scattered(&after[k].view) ||
                        s4d_tensor_numel(&g->values[g->nodes[chain[len - 1]].outputs[0]].t) <=
                            FOLD_MAX_SCATTERED);
        }
        if (ok)
            sunk = len;
    }
    if (!changed && !sunk)
        return S4D_OK;
    const fold_in *use = sunk ? after : ins;
    int y = sunk ? g->nodes[chain[sunk - 1]].outputs[0] : w;
    int srcs[S4D_PW_MAX_INPUTS];
    for (int k = 0; k < nin; k++)
        srcs[k] = use[k].src;
    /* The node's attributes with the views, asked of its device before anything changes. */
    int na = n->num_attrs + 1;
    s4d_attr *attrs = calloc((size_t)na, sizeof *attrs), va;
    if (!attrs)
        return s4d_fmt_err(f->err, f->errsz, S4D_ERR_NO_MEMORY, OOM);
    memcpy(attrs, n->attrs, sizeof *attrs * (size_t)n->num_attrs);
    if (views_attr(g, use, nin, &va) != 0) {
        s4d_attr_clear(&va);
        free(attrs);
        return s4d_fmt_err(f->err, f->errsz, S4D_ERR_NO_MEMORY, OOM);
    }
    attrs[na - 1] = va;
    int ok = 0;
    s4d_status st = s4d_fuse_supported_as(g, ni, "FusedPointwise", srcs, nin, attrs, na, &g->values[y].t, &ok);
    free(attrs); /* the node's own attributes stay the node's; va is still ours */
    if (st != S4D_OK || !ok) {
        s4d_attr_clear(&va);
        return st == S4D_OK ? S4D_OK : s4d_fmt_err(f->err, f->errsz, st, OOM);
    }
    if (set_views(n, &va) != 0) {
        s4d_attr_clear(&va);
        return s4d_fmt_err(f->err, f->errsz, S4D_ERR_NO_MEMORY, OOM);
    }
    for (int k = 0; k < nin; k++) {
        if (n->inputs[k] != srcs[k]) {
            f->uses[n->inputs[k]]--;
            f->uses[srcs[k]]++;
        }
        n->inputs[k] = srcs[k];
    }
    if (sunk) {
        for (int c = 0; c < sunk; c++) {
            s4d_ir_node *r = &g->nodes[chain[c]];
            for (int j = 0; j < r->num_inputs; j++)
                if (r->inputs[j] >= 0)
                    f->uses[r->inputs[j]]--;
            r->dead = 1;
        }
        g->values[w].producer = -1;
        n->outputs[0] = y;
        g->values[y].producer = ni;
    }
    return s4d_fuse_reinfer(g, ni, f->err, f->errsz);
}

int s4d_fold_views_reads_movement(const s4d_ir_graph *g, int v, s4d_device dev)
{
    if (fold_off() || v < 0 || g->values[v].kind != S4D_VALUE_ACTIVATION)
        return 0;
    fold_in fi;
    return absorb(g, v, dev, &fi);
}

int s4d_fold_views_feeds_movement(const s4d_ir_graph *g, const int *uses, int v, s4d_device dev)
{
    int chain[FOLD_MAX_CHAIN];
    return !fold_off() && v >= 0 && static_shape(g, v) && after_chain(g, uses, v, dev, chain) > 0;
}

s4d_status s4d_pass_fold_views(s4d_ir_graph *g, char *err, size_t errsz)
{
    if (fold_off() || g->num_nodes == 0)
        return S4D_OK;
    fold f = {g, s4d_fuse_use_counts(g), err, errsz};
    if (!f.uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        const s4d_ir_node *n = &g->nodes[i];
        if (!n->dead && n->kind == S4D_LAYER_OP && n->num_outputs == 1 && strcmp(n->domain, "s4d") == 0 &&
            strcmp(n->op_type, "FusedPointwise") == 0)
            st = fold_node(&f, i);
    }
    free(f.uses);
    return st;
}
