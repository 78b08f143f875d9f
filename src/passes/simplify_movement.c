/*
 * Movement simplification: rewrites chains of pure data-movement ops
 * (Slice, Concat, Gather, Transpose) so that fewer layers run, with outputs
 * bit for bit the same - only which bytes are read changes, never a value.
 * Exported graphs are full of them (a Linear's output cut into pieces, a
 * Concat read back by Slices), and on a GPU each one is a kernel launch that
 * costs more than the bytes it moves.
 *
 * Every rewrite reads the parameters infer() resolved (node->params: clamped
 * Slice bounds, normalised axes), so ONNX's negative and out-of-range bounds
 * are handled once, by the op itself, and every rewritten node is inferred
 * again and must give its output the shape it had (a view moved to a Concat's
 * input, the shape computed for it). A node whose output a rewrite makes
 * redundant is bypassed: its readers read the source instead, unless its
 * output is a graph output (that tensor must still be written).
 *
 * Rewrites only ever point a node at a value made earlier in node order, so
 * the order stays topological and the sweeps end: every rewrite moves a
 * node's input to an earlier producer, removes a node or turns a Transpose
 * into a Reshape. Nodes left without readers die in s4d_pass_remove_dead.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/movement.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

typedef struct mv {
    s4d_ir_graph *g;
    int *uses; /* per value: live readers, +1 when a graph output */
    int num_uses;
    int made; /* constants added, for unique names */
    char *err;
    size_t errsz;
} mv;

static s4d_status oom(mv *m)
{
    return s4d_fmt_err(m->err, m->errsz, S4D_ERR_NO_MEMORY,
                       "out of memory in the movement simplification");
}

static s4d_status count_uses(mv *m)
{
    free(m->uses);
    m->uses = s4d_fuse_use_counts(m->g);
    m->num_uses = m->g->num_values;
    return m->uses ? S4D_OK : oom(m);
}

/* The live default-domain node of op_type that produces value v, or -1. */
static int producer_of(const s4d_ir_graph *g, int v, const char *op_type)
{
    if (v < 0 || g->values[v].kind != S4D_VALUE_ACTIVATION)
        return -1;
    int p = g->values[v].producer;
    return s4d_fuse_is_op(g, p, op_type) && g->nodes[p].params ? p : -1;
}

static int is_graph_output(const s4d_ir_graph *g, int v)
{
    for (int i = 0; i < g->num_outputs; i++)
        if (g->outputs[i] == v)
            return 1;
    return 0;
}

/* Whether value v's shape is known, fixed and holds no zero dim. */
static int static_nonempty(const s4d_ir_graph *g, int v)
{
    const s4d_ir_value *val = &g->values[v];
    if (!val->shape_known || val->symbolic || val->t.rank < 0)
        return 0;
    for (int d = 0; d < val->t.rank; d++)
        if (val->t.dims[d] <= 0)
            return 0;
    return 1;
}

/*
 * Node ni's one output is now the same tensor as value src: readers of the
 * output read src, and ni dies. Refused (0) when the output is a graph output.
 */
static int bypass(mv *m, int ni, int src)
{
    s4d_ir_graph *g = m->g;
    int out = g->nodes[ni].outputs[0];
    if (is_graph_output(g, out))
        return 0;
    for (int i = 0; i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        if (n->dead || i == ni)
            continue;
        for (int j = 0; j < n->num_inputs; j++)
            if (n->inputs[j] == out)
                n->inputs[j] = src;
    }
    g->nodes[ni].dead = 1;
    return 1;
}

/* Appends an integer constant (int64, or int32 when dt says so) of shape dims; -1 on OOM. */
static int add_ints(mv *m, const char *node, const char *what, s4d_dtype dt, int rank,
                    const int64_t *dims, const int64_t *vals)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    void *data = malloc((size_t)n * s4d_dtype_size(dt) + 1);
    char name[512];
    snprintf(name, sizeof name, "%s/%s.movement%d", node, what, m->made++);
    int v = data ? s4d_ir_add_value(m->g, name, S4D_VALUE_CONST) : -1;
    if (v < 0) {
        free(data);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        if (dt == S4D_DTYPE_INT32)
            ((int32_t *)data)[i] = (int32_t)vals[i];
        else
            ((int64_t *)data)[i] = vals[i];
    }
    s4d_ir_value *val = &m->g->values[v];
    val->t.dtype = dt;
    val->t.rank = rank;
    for (int d = 0; d < rank; d++)
        val->t.dims[d] = dims[d];
    val->t.data = data;
    val->shape_known = 1;
    return v;
}

static int set_num_inputs(s4d_ir_node *n, int count)
{
    int *in = realloc(n->inputs, sizeof(int) * (size_t)(count > 0 ? count : 1));
    if (!in)
        return -1;
    n->inputs = in;
    n->num_inputs = count;
    return 0;
}

/* Re-infers node ni after a rewrite; its output must keep dtype and shape. */
static s4d_status reinfer_same(mv *m, int ni)
{
    s4d_ir_graph *g = m->g;
    int out = g->nodes[ni].outputs[0];
    s4d_tensor before = g->values[out].t;
    s4d_status st = s4d_fuse_infer_node(g, ni, m->err, m->errsz);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *after = &g->values[out].t;
    if (after->dtype != before.dtype || after->rank != before.rank ||
        memcmp(after->dims, before.dims, sizeof(int64_t) * (size_t)before.rank) != 0)
        return s4d_fmt_err(m->err, m->errsz, S4D_ERR_INTERNAL,
                           "movement simplification changed the shape of node '%s' (%s)",
                           g->nodes[ni].name, g->nodes[ni].op_type);
    return S4D_OK;
}

/*
 * Makes node ni (a Slice, opset >= 10) read src[start + i] over count
 * elements on every axis, step 1; or bypasses it when that is all of src.
 * Returns 1 when rewritten, 0 when left alone (only for opset < 10 or a
 * scalar src), -1 with *st set on failure.
 */
static int slice_of(mv *m, int ni, int src, const int64_t *start, const int64_t *count,
                    s4d_status *st)
{
    s4d_ir_graph *g = m->g;
    int rank = g->values[src].t.rank;
    int64_t starts[S4D_MAX_RANK], ends[S4D_MAX_RANK], axes[S4D_MAX_RANK], ones[S4D_MAX_RANK];
    int k = 0;
    for (int d = 0; d < rank; d++) {
        if (start[d] == 0 && count[d] == g->values[src].t.dims[d])
            continue;
        starts[k] = start[d];
        ends[k] = start[d] + count[d];
        axes[k] = d;
        ones[k] = 1;
        k++;
    }
    if (k == 0 && bypass(m, ni, src))
        return 1;
    if (g->nodes[ni].opset < 10 || rank < 1)
        return 0; /* starts and ends are attributes there; exporters write opset >= 10 */
    if (k == 0) { /* all of src into a graph output: a Slice still writes it */
        starts[0] = 0;
        ends[0] = g->values[src].t.dims[0];
        axes[0] = 0;
        ones[0] = 1;
        k = 1;
    }
    const char *name = g->nodes[ni].name;
    int64_t len = k;
    int vs = add_ints(m, name, "starts", S4D_DTYPE_INT64, 1, &len, starts);
    int ve = vs < 0 ? -1 : add_ints(m, name, "ends", S4D_DTYPE_INT64, 1, &len, ends);
    int va = ve < 0 ? -1 : add_ints(m, name, "axes", S4D_DTYPE_INT64, 1, &len, axes);
    int vp = va < 0 ? -1 : add_ints(m, name, "steps", S4D_DTYPE_INT64, 1, &len, ones);
    s4d_ir_node *n = &g->nodes[ni];
    if (vp < 0 || set_num_inputs(n, 5) != 0) {
        *st = oom(m);
        return -1;
    }
    n->inputs[0] = src;
    n->inputs[1] = vs;
    n->inputs[2] = ve;
    n->inputs[3] = va;
    n->inputs[4] = vp;
    *st = reinfer_same(m, ni);
    return *st == S4D_OK ? 1 : -1;
}

/* A Slice's resolved bounds when it has step 1 and keeps at least one element on every axis. */
static const s4d_slice_params *unit_slice(const s4d_ir_graph *g, int ni)
{
    const s4d_slice_params *p = g->nodes[ni].params;
    for (int d = 0; d < p->rank; d++)
        if (p->step[d] != 1 || p->count[d] <= 0)
            return NULL;
    return p;
}

/* Input k of Concat node ci holds the output's [*off, *off + dims[axis]) along its axis. */
static int concat_part(const s4d_ir_graph *g, int ci, int64_t lo, int64_t hi, int64_t *off)
{
    const s4d_ir_node *c = &g->nodes[ci];
    int axis = ((const s4d_axis_params *)c->params)->axis;
    int64_t at = 0;
    for (int k = 0; k < c->num_inputs; k++) {
        int64_t len = g->values[c->inputs[k]].t.dims[axis];
        if (lo >= at && hi <= at + len && hi > lo) {
            *off = at;
            return k;
        }
        at += len;
    }
    return -1;
}

/* Slice(Concat(x1..xn)) whose range on the concat axis lies in one xk -> Slice(xk) or xk. */
static int slice_concat(mv *m, int ni, s4d_status *st)
{
    s4d_ir_graph *g = m->g;
    int ci = producer_of(g, g->nodes[ni].inputs[0], "Concat");
    const s4d_slice_params *p = ci >= 0 ? unit_slice(g, ni) : NULL;
    if (!p)
        return 0;
    int axis = ((const s4d_axis_params *)g->nodes[ci].params)->axis;
    int64_t off;
    int k = concat_part(g, ci, p->start[axis], p->start[axis] + p->count[axis], &off);
    if (k < 0)
        return 0;
    int64_t start[S4D_MAX_RANK], count[S4D_MAX_RANK];
    for (int d = 0; d < p->rank; d++) {
        start[d] = p->start[d];
        count[d] = p->count[d];
    }
    start[axis] -= off;
    return slice_of(m, ni, g->nodes[ci].inputs[k], start, count, st);
}

/* Slice(Slice(x)), both step 1 -> one Slice(x). */
static int slice_slice(mv *m, int ni, s4d_status *st)
{
    s4d_ir_graph *g = m->g;
    int si = producer_of(g, g->nodes[ni].inputs[0], "Slice");
    const s4d_slice_params *inner = si >= 0 ? unit_slice(g, si) : NULL;
    const s4d_slice_params *outer = inner ? unit_slice(g, ni) : NULL;
    if (!outer)
        return 0;
    int64_t start[S4D_MAX_RANK], count[S4D_MAX_RANK];
    for (int d = 0; d < outer->rank; d++) {
        start[d] = inner->start[d] + outer->start[d];
        count[d] = outer->count[d];
    }
    return slice_of(m, ni, g->nodes[si].inputs[0], start, count, st);
}

/* A Slice that keeps everything -> its input. */
static int slice_all(mv *m, int ni)
{
    const s4d_slice_params *p = unit_slice(m->g, ni);
    if (!p)
        return 0;
    const s4d_tensor *x = &m->g->values[m->g->nodes[ni].inputs[0]].t;
    for (int d = 0; d < p->rank; d++)
        if (p->start[d] != 0 || p->count[d] != x->dims[d])
            return 0;
    return bypass(m, ni, m->g->nodes[ni].inputs[0]);
}

static s4d_status try_slice(mv *m, int ni, int *done)
{
    s4d_status st = S4D_OK;
    const s4d_ir_node *n = &m->g->nodes[ni];
    if (n->num_outputs != 1 || !n->params || !static_nonempty(m->g, n->inputs[0]) ||
        !static_nonempty(m->g, n->outputs[0]))
        return S4D_OK;
    int r = slice_all(m, ni);
    if (r == 0)
        r = slice_concat(m, ni, &st);
    if (r == 0)
        r = slice_slice(m, ni, &st);
    *done = r > 0;
    return st;
}

/*
 * Gather(X, constant indices) along axis a, where X = Concat(..) along a with
 * every index in one input xk, or X = Slice(x) cutting (step 1) only axis a:
 * -> Gather(xk or x, shifted indices). Indices were range-checked by infer().
 */
static s4d_status try_gather(mv *m, int ni, int *done)
{
    s4d_ir_graph *g = m->g;
    const s4d_ir_node *n = &g->nodes[ni];
    if (n->num_inputs != 2 || n->num_outputs != 1 || !n->params ||
        !static_nonempty(g, n->inputs[0]))
        return S4D_OK;
    const s4d_tensor *idx = s4d_fuse_const(g, n->inputs[1]);
    if (!idx || (idx->dtype != S4D_DTYPE_INT64 && idx->dtype != S4D_DTYPE_INT32))
        return S4D_OK;
    int axis = ((const s4d_gather_params *)n->params)->axis;
    int x = n->inputs[0];
    int64_t dim = g->values[x].t.dims[axis];
    int64_t cnt = s4d_tensor_numel(idx);
    if (cnt <= 0)
        return S4D_OK;
    int64_t *vals = malloc(sizeof(int64_t) * (size_t)cnt);
    if (!vals)
        return oom(m);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < cnt; i++) {
        int64_t v = idx->dtype == S4D_DTYPE_INT64 ? ((const int64_t *)idx->data)[i]
                                                  : ((const int32_t *)idx->data)[i];
        vals[i] = v < 0 ? v + dim : v;
        lo = vals[i] < lo ? vals[i] : lo;
        hi = vals[i] > hi ? vals[i] : hi;
    }
    int src = -1;
    int64_t shift = 0;
    int ci = producer_of(g, x, "Concat"), si = producer_of(g, x, "Slice");
    if (ci >= 0 && ((const s4d_axis_params *)g->nodes[ci].params)->axis == axis) {
        int64_t off;
        int k = concat_part(g, ci, lo, hi + 1, &off);
        if (k >= 0) {
            src = g->nodes[ci].inputs[k];
            shift = -off;
        }
    } else if (si >= 0 && unit_slice(g, si)) {
        const s4d_slice_params *p = g->nodes[si].params;
        const s4d_tensor *sx = &g->values[g->nodes[si].inputs[0]].t;
        int others_whole = 1;
        for (int d = 0; d < p->rank; d++)
            if (d != axis && (p->start[d] != 0 || p->count[d] != sx->dims[d]))
                others_whole = 0;
        if (others_whole) {
            src = g->nodes[si].inputs[0];
            shift = p->start[axis];
        }
    }
    s4d_status st = S4D_OK;
    if (src >= 0) {
        for (int64_t i = 0; i < cnt; i++)
            vals[i] += shift;
        int64_t dims[S4D_MAX_RANK];
        int rank = idx->rank;
        s4d_dtype dt = idx->dtype;
        memcpy(dims, idx->dims, sizeof dims);
        int vi = add_ints(m, g->nodes[ni].name, "indices", dt, rank, dims, vals);
        if (vi < 0) {
            st = oom(m);
        } else {
            g->nodes[ni].inputs[0] = src;
            g->nodes[ni].inputs[1] = vi;
            st = reinfer_same(m, ni);
            *done = st == S4D_OK;
        }
    }
    free(vals);
    return st;
}

/* Concat(.., Concat(a, b) on the same axis with no other reader, ..) -> Concat(.., a, b, ..). */
static s4d_status try_concat(mv *m, int ni, int *done)
{
    s4d_ir_graph *g = m->g;
    s4d_ir_node *n = &g->nodes[ni];
    if (n->num_outputs != 1 || !n->params)
        return S4D_OK;
    if (n->num_inputs == 1)
        return (*done = bypass(m, ni, n->inputs[0])), S4D_OK;
    int axis = ((const s4d_axis_params *)n->params)->axis;
    for (int j = 0; j < n->num_inputs; j++) {
        int v = n->inputs[j];
        int ci = producer_of(g, v, "Concat");
        if (ci < 0 || v >= m->num_uses || m->uses[v] != 1 ||
            ((const s4d_axis_params *)g->nodes[ci].params)->axis != axis)
            continue;
        const s4d_ir_node *c = &g->nodes[ci];
        int total = n->num_inputs - 1 + c->num_inputs;
        int *in = malloc(sizeof(int) * (size_t)total);
        if (!in)
            return oom(m);
        memcpy(in, n->inputs, sizeof(int) * (size_t)j);
        memcpy(in + j, c->inputs, sizeof(int) * (size_t)c->num_inputs);
        memcpy(in + j + c->num_inputs, n->inputs + j + 1,
               sizeof(int) * (size_t)(n->num_inputs - j - 1));
        free(n->inputs);
        n->inputs = in;
        n->num_inputs = total;
        g->nodes[ci].dead = 1;
        *done = 1;
        return reinfer_same(m, ni);
    }
    return S4D_OK;
}

/*
 * The axis of view value w (an Unsqueeze or Reshape of value c that only adds
 * or drops size-1 dims) that holds axis a of c, or -1 when w is no such view
 * or a has size 1 (it could not be told from the dims around it).
 */
static int view_axis(const s4d_ir_graph *g, int c, int w, int a)
{
    const s4d_tensor *ct = &g->values[c].t, *wt = &g->values[w].t;
    if (ct->dims[a] == 1)
        return -1;
    int ci = 0, wi = 0, at = -1;
    for (;;) {
        while (ci < ct->rank && ct->dims[ci] == 1)
            ci++;
        while (wi < wt->rank && wt->dims[wi] == 1)
            wi++;
        if (ci == ct->rank || wi == wt->rank)
            return ci == ct->rank && wi == wt->rank ? at : -1;
        if (ct->dims[ci] != wt->dims[wi])
            return -1;
        if (ci == a)
            at = wi;
        ci++;
        wi++;
    }
}

/* Range [*lo, *hi) that reader r (a Slice or a Gather of constant indices) takes of value w
   along axis a, or 0 when it is neither or reads w otherwise. */
static int reader_range(const s4d_ir_graph *g, int r, int w, int a, int64_t *lo, int64_t *hi)
{
    const s4d_ir_node *n = &g->nodes[r];
    if (n->num_outputs != 1 || !n->params || n->inputs[0] != w)
        return 0;
    for (int j = 1; j < n->num_inputs; j++)
        if (n->inputs[j] == w)
            return 0;
    int64_t dim = g->values[w].t.dims[a];
    if (s4d_fuse_is_op(g, r, "Slice")) {
        const s4d_slice_params *p = unit_slice(g, r);
        if (!p || n->opset < 10)
            return 0;
        *lo = p->start[a];
        *hi = p->start[a] + p->count[a];
        return 1;
    }
    if (!s4d_fuse_is_op(g, r, "Gather") || n->num_inputs != 2 ||
        ((const s4d_gather_params *)n->params)->axis != a)
        return 0;
    const s4d_tensor *idx = s4d_fuse_const(g, n->inputs[1]);
    if (!idx || (idx->dtype != S4D_DTYPE_INT64 && idx->dtype != S4D_DTYPE_INT32))
        return 0;
    int64_t cnt = s4d_tensor_numel(idx);
    *lo = INT64_MAX;
    *hi = INT64_MIN;
    for (int64_t i = 0; i < cnt; i++) {
        int64_t v = idx->dtype == S4D_DTYPE_INT64 ? ((const int64_t *)idx->data)[i]
                                                  : ((const int32_t *)idx->data)[i];
        v = v < 0 ? v + dim : v;
        *lo = v < *lo ? v : *lo;
        *hi = v + 1 > *hi ? v + 1 : *hi;
    }
    return cnt > 0;
}

/* Gather node r: indices shifted by shift (normalised against the old dim first). */
static s4d_status shift_gather(mv *m, int r, int64_t dim, int64_t shift)
{
    s4d_ir_graph *g = m->g;
    const s4d_tensor *idx = s4d_fuse_const(g, g->nodes[r].inputs[1]);
    int64_t cnt = s4d_tensor_numel(idx), dims[S4D_MAX_RANK];
    int rank = idx->rank;
    s4d_dtype dt = idx->dtype;
    memcpy(dims, idx->dims, sizeof dims);
    int64_t *vals = malloc(sizeof(int64_t) * (size_t)cnt);
    if (!vals)
        return oom(m);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t v = dt == S4D_DTYPE_INT64 ? ((const int64_t *)idx->data)[i]
                                          : ((const int32_t *)idx->data)[i];
        vals[i] = (v < 0 ? v + dim : v) + shift;
    }
    int vi = add_ints(m, g->nodes[r].name, "indices", dt, rank, dims, vals);
    free(vals);
    if (vi < 0)
        return oom(m);
    g->nodes[r].inputs[1] = vi;
    return reinfer_same(m, r);
}

/*
 * An Unsqueeze or Reshape that only adds or drops size-1 dims, of a Concat,
 * read only by Slices and Gathers that all take their elements from one
 * input xk: the view is made of xk instead and its readers are shifted, so
 * the Concat loses its last reader (torch's x.unsqueeze(-2)[..., 0:3] of a
 * freshly concatenated tensor).
 */
static s4d_status try_view(mv *m, int vi, int *done)
{
    s4d_ir_graph *g = m->g;
    s4d_ir_node *v = &g->nodes[vi];
    if (v->num_outputs != 1 || v->num_inputs < 1)
        return S4D_OK;
    int c = v->inputs[0], w = v->outputs[0];
    int ci = producer_of(g, c, "Concat");
    if (ci < 0 || !static_nonempty(g, c) || !static_nonempty(g, w) || is_graph_output(g, w) ||
        w >= m->num_uses)
        return S4D_OK;
    int a = ((const s4d_axis_params *)g->nodes[ci].params)->axis;
    int wa = view_axis(g, c, w, a);
    if (wa < 0)
        return S4D_OK;
    int readers = 0, k = -1;
    int64_t off = 0;
    for (int r = 0; r < g->num_nodes; r++) {
        if (g->nodes[r].dead)
            continue;
        int reads = 0;
        for (int j = 0; j < g->nodes[r].num_inputs; j++)
            reads |= g->nodes[r].inputs[j] == w;
        if (!reads)
            continue;
        int64_t lo, hi, o;
        if (!reader_range(g, r, w, wa, &lo, &hi))
            return S4D_OK;
        int kr = concat_part(g, ci, lo, hi, &o);
        if (kr < 0 || (k >= 0 && kr != k))
            return S4D_OK;
        k = kr;
        off = o;
        readers++;
    }
    if (readers == 0 || readers != m->uses[w])
        return S4D_OK;
    int src = g->nodes[ci].inputs[k];
    int64_t old_dim = g->values[w].t.dims[wa];
    int64_t shape[S4D_MAX_RANK], len = g->values[w].t.rank;
    memcpy(shape, g->values[w].t.dims, sizeof shape);
    shape[wa] = g->values[src].t.dims[a];
    if (s4d_fuse_is_op(g, vi, "Reshape")) {
        int vs = add_ints(m, g->nodes[vi].name, "shape", S4D_DTYPE_INT64, 1, &len, shape);
        if (vs < 0)
            return oom(m);
        g->nodes[vi].inputs[1] = vs;
    }
    g->nodes[vi].inputs[0] = src;
    s4d_status st = s4d_fuse_infer_node(g, vi, m->err, m->errsz);
    if (st == S4D_OK && (g->values[w].t.rank != (int)len ||
                         memcmp(g->values[w].t.dims, shape, sizeof(int64_t) * (size_t)len) != 0))
        st = s4d_fmt_err(m->err, m->errsz, S4D_ERR_INTERNAL,
                         "movement simplification: view '%s' of '%s' got another shape",
                         g->nodes[vi].name, g->values[src].name);
    *done = 1;
    for (int r = 0; r < g->num_nodes && st == S4D_OK; r++) {
        s4d_ir_node *n = &g->nodes[r];
        if (n->dead || r == vi || n->num_inputs < 1 || n->inputs[0] != w)
            continue;
        if (s4d_fuse_is_op(g, r, "Gather")) {
            st = shift_gather(m, r, old_dim, -off);
            continue;
        }
        const s4d_slice_params *p = n->params;
        int64_t start[S4D_MAX_RANK], count[S4D_MAX_RANK];
        for (int d = 0; d < p->rank; d++) {
            start[d] = p->start[d];
            count[d] = p->count[d];
        }
        start[wa] -= off;
        if (slice_of(m, r, w, start, count, &st) == 0)
            st = s4d_fmt_err(m->err, m->errsz, S4D_ERR_INTERNAL,
                             "movement simplification: Slice '%s' was not rewritten", n->name);
    }
    return st;
}

/* perm of Transpose node ni, as infer() read it. */
static const int *perm_of(const s4d_ir_graph *g, int ni)
{
    return ((const s4d_transpose_params *)g->nodes[ni].params)->perm;
}

static int set_perm(s4d_ir_node *n, const int *perm, int rank)
{
    s4d_attr *a = NULL;
    for (int i = 0; i < n->num_attrs; i++)
        if (strcmp(n->attrs[i].name, "perm") == 0)
            a = &n->attrs[i];
    if (!a) {
        s4d_attr *na = realloc(n->attrs, sizeof(s4d_attr) * (size_t)(n->num_attrs + 1));
        if (!na)
            return -1;
        n->attrs = na;
        a = &na[n->num_attrs];
        memset(a, 0, sizeof *a);
        if (!(a->name = s4d_strdup("perm")))
            return -1;
        a->type = S4D_ATTR_INTS;
        n->num_attrs++;
    }
    int64_t *ints = malloc(sizeof(int64_t) * (size_t)(rank > 0 ? rank : 1));
    if (!ints)
        return -1;
    for (int d = 0; d < rank; d++)
        ints[d] = perm[d];
    free(a->ints);
    a->ints = ints;
    a->count = (size_t)rank;
    return 0;
}

/*
 * Transpose(Transpose(x)) -> one Transpose (x itself when the perms cancel);
 * a Transpose that moves only size-1 dims, or none, keeps the element order:
 * -> Reshape to its output shape, which the plan makes a view.
 */
static s4d_status try_transpose(mv *m, int ni, int *done)
{
    s4d_ir_graph *g = m->g;
    s4d_ir_node *n = &g->nodes[ni];
    if (n->num_outputs != 1 || !n->params || !static_nonempty(g, n->inputs[0]))
        return S4D_OK;
    int rank = g->values[n->inputs[0]].t.rank;
    int ti = producer_of(g, n->inputs[0], "Transpose");
    if (ti >= 0) {
        const int *p1 = perm_of(g, ti), *p2 = perm_of(g, ni);
        int p[S4D_MAX_RANK], ident = 1;
        for (int j = 0; j < rank; j++) {
            p[j] = p1[p2[j]];
            ident &= p[j] == j;
        }
        int x = g->nodes[ti].inputs[0];
        if (ident)
            return (*done = bypass(m, ni, x)), S4D_OK;
        if (set_perm(n, p, rank) != 0)
            return oom(m);
        n->inputs[0] = x;
        *done = 1;
        return reinfer_same(m, ni);
    }
    const int *perm = perm_of(g, ni);
    const int64_t *dims = g->values[n->inputs[0]].t.dims;
    int last = -1, ident = 1;
    for (int j = 0; j < rank; j++) {
        ident &= perm[j] == j;
        if (dims[perm[j]] == 1)
            continue;
        if (perm[j] < last)
            return S4D_OK;
        last = perm[j];
    }
    if (ident)
        return (*done = bypass(m, ni, n->inputs[0])), S4D_OK;
    if (n->opset < 5 || !static_nonempty(g, n->outputs[0]))
        return S4D_OK; /* Reshape took its shape as an attribute before opset 5 */
    const s4d_tensor *out = &g->values[n->outputs[0]].t;
    int64_t shape[S4D_MAX_RANK], len = out->rank;
    memcpy(shape, out->dims, sizeof shape);
    int vs = add_ints(m, g->nodes[ni].name, "shape", S4D_DTYPE_INT64, 1, &len, shape);
    n = &g->nodes[ni];
    if (vs < 0 || set_num_inputs(n, 2) != 0 || s4d_fuse_set_op(n, "", "Reshape", n->opset) != 0)
        return oom(m);
    for (int i = 0; i < n->num_attrs; i++)
        s4d_attr_clear(&n->attrs[i]);
    free(n->attrs);
    n->attrs = NULL;
    n->num_attrs = 0;
    n->inputs[1] = vs;
    *done = 1;
    return reinfer_same(m, ni);
}

/* Whether values u and v hold the same tensor at build: one value, or equal constants. */
static int same_value(const s4d_ir_graph *g, int u, int v)
{
    if (u == v)
        return 1;
    const s4d_tensor *a = s4d_fuse_const(g, u), *b = s4d_fuse_const(g, v);
    return a && b && a->dtype == b->dtype && a->rank == b->rank &&
           memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0 &&
           memcmp(a->data, b->data, s4d_ir_tensor_bytes(a)) == 0;
}

/* Whether Slice, Gather, Transpose or Concat nodes i and j (same op) compute the same tensor. */
static int same_movement(const s4d_ir_graph *g, int i, int j)
{
    const s4d_ir_node *a = &g->nodes[i], *b = &g->nodes[j];
    if (a->num_outputs != 1 || b->num_outputs != 1 || !b->params || a->inputs[0] != b->inputs[0])
        return 0;
    if (strcmp(a->op_type, "Slice") == 0) {
        const s4d_slice_params *p = a->params, *q = b->params;
        for (int d = 0; d < p->rank; d++)
            if (p->start[d] != q->start[d] || p->step[d] != q->step[d] ||
                p->count[d] != q->count[d])
                return 0;
        return p->rank == q->rank;
    }
    if (strcmp(a->op_type, "Gather") == 0)
        return a->num_inputs == 2 && b->num_inputs == 2 &&
               ((const s4d_gather_params *)a->params)->axis ==
                   ((const s4d_gather_params *)b->params)->axis &&
               same_value(g, a->inputs[1], b->inputs[1]);
    if (strcmp(a->op_type, "Transpose") == 0) {
        const s4d_transpose_params *p = a->params, *q = b->params;
        return p->rank == q->rank && memcmp(p->perm, q->perm, sizeof(int) * (size_t)p->rank) == 0;
    }
    if (a->num_inputs != b->num_inputs ||
        ((const s4d_axis_params *)a->params)->axis != ((const s4d_axis_params *)b->params)->axis)
        return 0;
    for (int k = 0; k < a->num_inputs; k++)
        if (a->inputs[k] != b->inputs[k])
            return 0;
    return 1;
}

/*
 * A Slice, Gather, Transpose or Concat that repeats an earlier one (same op,
 * same inputs, same resolved parameters): its readers read the earlier
 * output. Exports repeat them where the model indexes a tensor twice.
 */
static int try_repeat(mv *m, int ni)
{
    s4d_ir_graph *g = m->g;
    if (!g->nodes[ni].params || g->nodes[ni].num_inputs < 1 || g->nodes[ni].num_outputs != 1)
        return 0;
    for (int j = 0; j < ni; j++)
        if (s4d_fuse_is_op(g, j, g->nodes[ni].op_type) && same_movement(g, ni, j))
            return bypass(m, ni, g->nodes[j].outputs[0]);
    return 0;
}

/*
 * Whether every element of constant c leaves an operand unchanged, bit for bit, as operand 1
 * of op (Add, Sub, Mul, Div; Add and Mul either side): integers 0 (Add, Sub) or 1 (Mul, Div);
 * floats 1 (Mul, Div), +0 (Sub: -0 - +0 is -0) or -0 (Add: x + +0 turns -0 into +0, x + -0
 * never changes x). A NaN operand stays NaN either way.
 */
static int identity_const(const s4d_tensor *c, const char *op)
{
    int add = strcmp(op, "Add") == 0, sub = strcmp(op, "Sub") == 0, fl = s4d_dtype_is_float(c->dtype);
    if (c->dtype == S4D_DTYPE_BOOL || c->dtype == S4D_DTYPE_STRING || c->dtype == S4D_DTYPE_UNDEFINED)
        return 0;
    int64_t n = s4d_tensor_numel(c);
    for (int64_t i = 0; i < n; i++) {
        double v = s4d_load_f64(c->dtype, c->data, i);
        if (add || sub) {
            if (v != 0.0 || (fl && (signbit(v) != 0) != add))
                return 0;
        } else if (v != 1.0) {
            return 0;
        }
    }
    return n > 0;
}

/* x + 0, x - 0, x * 1, x / 1 (identity_const) whose output is x's shape and dtype -> x. */
static int try_identity(mv *m, int ni)
{
    s4d_ir_graph *g = m->g;
    const s4d_ir_node *n = &g->nodes[ni];
    if (n->num_inputs != 2 || n->num_outputs != 1 || n->outputs[0] < 0)
        return 0;
    int commutes = strcmp(n->op_type, "Add") == 0 || strcmp(n->op_type, "Mul") == 0;
    for (int k = 0; k < (commutes ? 2 : 1); k++) {
        int x = n->inputs[k], c = n->inputs[1 - k], y = n->outputs[0];
        const s4d_tensor *ct = s4d_fuse_const(g, c);
        if (x < 0 || !ct || !g->values[x].shape_known || !g->values[y].shape_known ||
            g->values[x].t.dtype != g->values[y].t.dtype || ct->dtype != g->values[y].t.dtype ||
            !s4d_tensor_same_dims(&g->values[x].t, &g->values[y].t) || !static_nonempty(g, y))
            continue;
        if (identity_const(ct, n->op_type))
            return bypass(m, ni, x);
    }
    return 0;
}

s4d_status s4d_pass_simplify_movement(s4d_ir_graph *g, char *err, size_t errsz)
{
    mv m = {g, NULL, 0, 0, err, errsz};
    s4d_status st = count_uses(&m);
    /* Sweeps until nothing changes: one rewrite may expose another (a Slice of
       a Slice of a Concat, a Transpose pair that leaves a size-1 move). */
    for (int changed = 1; changed && st == S4D_OK;) {
        changed = 0;
        for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
            int done = 0;
            if ((s4d_fuse_is_op(g, i, "Slice") || s4d_fuse_is_op(g, i, "Gather") ||
                 s4d_fuse_is_op(g, i, "Transpose") || s4d_fuse_is_op(g, i, "Concat")) &&
                try_repeat(&m, i))
                done = 1;
            else if (s4d_fuse_is_op(g, i, "Slice"))
                st = try_slice(&m, i, &done);
            else if (s4d_fuse_is_op(g, i, "Gather"))
                st = try_gather(&m, i, &done);
            else if (s4d_fuse_is_op(g, i, "Concat"))
                st = try_concat(&m, i, &done);
            else if (s4d_fuse_is_op(g, i, "Transpose"))
                st = try_transpose(&m, i, &done);
            else if (s4d_fuse_is_op(g, i, "Unsqueeze") || s4d_fuse_is_op(g, i, "Reshape"))
                st = try_view(&m, i, &done);
            else if (s4d_fuse_is_op(g, i, "Add") || s4d_fuse_is_op(g, i, "Sub") ||
                     s4d_fuse_is_op(g, i, "Mul") || s4d_fuse_is_op(g, i, "Div"))
                done = try_identity(&m, i);
            if (done && st == S4D_OK) {
                changed = 1;
                st = count_uses(&m);
            }
        }
        /* A node whose readers all moved away must not count as one of its inputs' readers. */
        if (changed && st == S4D_OK)
            st = s4d_pass_remove_dead(g, err, errsz);
        if (changed && st == S4D_OK)
            st = count_uses(&m);
    }
    free(m.uses);
    return st;
}
