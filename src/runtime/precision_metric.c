/*
 * Order-insensitive comparison for the fp16 accuracy guard
 * (precision_metric.h, docs/precision.md): which graph outputs have rows in
 * the order of a TopK's selection, and the relative L2 error of such an
 * output after pairing its rows with the reference's.
 */
#include "runtime/precision_metric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double s4d_rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (!isfinite(y)) {
            if (x == y)
                continue;
            return INFINITY;
        }
        if (!isfinite(x))
            return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

/* ---- which outputs follow a selection ---- */

static int64_t attr_int(const s4d_plan_layer *l, const char *name, int64_t dflt)
{
    for (int i = 0; i < l->num_attrs; i++)
        if (strcmp(l->attrs[i].name, name) == 0 && l->attrs[i].type == S4D_ATTR_INT)
            return l->attrs[i].i;
    return dflt;
}

static const s4d_attr *attr_ints(const s4d_plan_layer *l, const char *name)
{
    for (int i = 0; i < l->num_attrs; i++)
        if (strcmp(l->attrs[i].name, name) == 0 && l->attrs[i].type == S4D_ATTR_INTS)
            return &l->attrs[i];
    return NULL;
}

static int is_op(const s4d_plan_layer *l, const char *op)
{
    return l->op_type && strcmp(l->op_type, op) == 0;
}

static int is_any(const s4d_plan_layer *l, const char *const *ops)
{
    for (; *ops; ops++)
        if (is_op(l, *ops))
            return 1;
    return 0;
}

static int64_t prod(const int64_t *d, int from, int to)
{
    int64_t p = 1;
    for (int k = from; k < to; k++)
        p *= d[k];
    return p;
}

static int norm_axis(int64_t a, int rank)
{
    if (a < 0)
        a += rank;
    return a >= 0 && a < rank ? (int)a : -1;
}

/* A reshape keeps the rows when the ordered axis ends at the same flat offset in
   both shapes (merged with leading axes at most: rows stay rows). */
static int reshape_axis(const s4d_plan_tensor *in, int a, const s4d_plan_tensor *out)
{
    int64_t p = prod(in->dims, 0, a + 1);
    for (int b = 0; b < out->rank; b++)
        if (prod(out->dims, 0, b + 1) == p && in->dims[a] > 0 && out->dims[b] % in->dims[a] == 0)
            return b;
    return -1;
}

/* The reduction axes of a Reduce layer: from its attribute or its constant second
   input; 0 when they cannot be read (the caller then drops the order). */
static int reduce_axes(const s4d_plan *p, const s4d_plan_layer *l, int rank, int *axes)
{
    const s4d_attr *at = attr_ints(l, "axes");
    int n = 0;
    if (at) {
        for (size_t k = 0; k < at->count && n < S4D_MAX_RANK; k++)
            if ((axes[n] = norm_axis(at->ints[k], rank)) >= 0)
                n++;
        return n;
    }
    if (l->num_inputs > 1 && l->inputs[1] >= 0) {
        const s4d_plan_tensor *t = &p->tensors[l->inputs[1]];
        if (t->place != S4D_PLACE_WEIGHT || t->dtype != S4D_DTYPE_INT64 || !p->weights ||
            t->offset + t->bytes > p->weights_size)
            return 0;
        const int64_t *v = (const int64_t *)(p->weights + t->offset);
        for (uint64_t k = 0; k < t->bytes / 8 && n < S4D_MAX_RANK; k++)
            if ((axes[n] = norm_axis(v[k], rank)) >= 0)
                n++;
        return n;
    }
    /* No axes: every axis (unless noop_with_empty_axes). */
    if (attr_int(l, "noop_with_empty_axes", 0))
        return -1;
    for (int k = 0; k < rank; k++)
        axes[n++] = k;
    return n;
}

/* The axis of output tensor `o` of layer l given the axes of its inputs; -1: not ordered. */
static int propagate(const s4d_plan *p, const s4d_plan_layer *l, const int *ax, int o)
{
    static const char *const reshapes[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", NULL};
    static const char *const same[] = {"Slice", "Split", "Concat", "Tile", "Pad", NULL};
    static const char *const lost[] = {"Conv", "ConvTranspose", "FusedConv", "FusedConvAct",
                                       "FusedMBConv", "Einsum", "Resize", "MaxPool", "AveragePool",
                                       "GlobalAveragePool", "Shape", "Size", NULL};
    const s4d_plan_tensor *out = &p->tensors[o];
    int in0 = l->num_inputs > 0 ? l->inputs[0] : -1;
    int in1 = l->num_inputs > 1 ? l->inputs[1] : -1;
    int a0 = in0 >= 0 ? ax[in0] : -1;
    int a1 = in1 >= 0 ? ax[in1] : -1;
    if (is_any(l, lost))
        return -1;
    if (is_op(l, "Gather") && in0 >= 0 && in1 >= 0) {
        const s4d_plan_tensor *d = &p->tensors[in0], *ix = &p->tensors[in1];
        int g = norm_axis(attr_int(l, "axis", 0), d->rank);
        if (g < 0)
            return -1;
        if (a1 >= 0)
            return g + a1; /* rows picked in the selection's order */
        if (a0 < 0 || a0 == g)
            return -1; /* fixed positions of an ordered axis: not a permutation */
        return a0 < g ? a0 : a0 - 1 + ix->rank;
    }
    if (is_op(l, "GatherElements")) {
        int g = in0 >= 0 ? norm_axis(attr_int(l, "axis", 0), p->tensors[in0].rank) : -1;
        return a1 >= 0 ? a1 : (a0 >= 0 && a0 != g ? a0 : -1);
    }
    if (is_op(l, "GatherND"))
        return in1 >= 0 && a1 >= 0 && a1 < p->tensors[in1].rank - 1 ? a1 : -1;
    if (is_op(l, "ScatterND") || is_op(l, "ScatterElements") || is_op(l, "Scatter"))
        return a0; /* rows written back to fixed positions follow the data only */
    if (is_any(l, reshapes))
        return a0 >= 0 ? reshape_axis(&p->tensors[in0], a0, out) : -1;
    if (is_op(l, "Transpose")) {
        const s4d_attr *perm = attr_ints(l, "perm");
        if (a0 < 0)
            return -1;
        if (!perm) /* the default reverses the axes */
            return out->rank - 1 - a0;
        for (size_t b = 0; b < perm->count; b++)
            if (perm->ints[b] == a0)
                return (int)b;
        return -1;
    }
    if (is_any(l, same)) {
        for (int i = 0; i < l->num_inputs; i++)
            if (l->inputs[i] >= 0 && ax[l->inputs[i]] >= 0)
                return ax[l->inputs[i]] < out->rank ? ax[l->inputs[i]] : -1;
        return -1;
    }
    if (l->op_type && (strncmp(l->op_type, "Reduce", 6) == 0 || is_op(l, "ArgMax") ||
                       is_op(l, "ArgMin"))) {
        int axes[S4D_MAX_RANK], rank = in0 >= 0 ? p->tensors[in0].rank : 0, n;
        if (a0 < 0)
            return -1;
        if (l->op_type[0] == 'A')
            n = (axes[0] = norm_axis(attr_int(l, "axis", 0), rank)) >= 0;
        else
            n = reduce_axes(p, l, rank, axes);
        if (n < 0)
            return a0; /* a reduction that does nothing */
        if (n == 0)
            return -1;
        int below = 0;
        for (int k = 0; k < n; k++) {
            if (axes[k] == a0)
                return -1; /* reduced over the rows: order-free */
            below += axes[k] < a0;
        }
        return attr_int(l, "keepdims", 1) ? a0 : a0 - below;
    }
    if (is_op(l, "MatMul") || is_op(l, "FusedMatMul") || is_op(l, "Gemm")) {
        if (in0 < 0 || in1 < 0)
            return -1;
        int ra = p->tensors[in0].rank, rb = p->tensors[in1].rank;
        if (is_op(l, "Gemm")) {
            int ta = (int)attr_int(l, "transA", 0), tb = (int)attr_int(l, "transB", 0);
            if (a0 >= 0 && a0 == (ta ? 1 : 0))
                return 0;
            return a1 >= 0 && a1 == (tb ? 0 : 1) ? 1 : -1;
        }
        if (a0 >= 0 && ra >= 2 && a0 != ra - 1)
            return a0 + out->rank - ra; /* a row or batch axis of A */
        if (a1 >= 0 && rb >= 2 && a1 == rb - 1)
            return out->rank - 1; /* the columns of B */
        if (a1 >= 0 && rb > 2 && a1 < rb - 2)
            return a1 + out->rank - rb;
        return -1;
    }
    /* Elementwise, activations, normalizations, Cast, Where, Expand, plugins: an
       ordered input whose axis lines up with an output axis of the same size,
       broadcast-aligned (from the last axis) first, then from the first. */
    for (int i = 0; i < l->num_inputs; i++) {
        int t = l->inputs[i];
        if (t < 0 || ax[t] < 0)
            continue;
        const s4d_plan_tensor *it = &p->tensors[t];
        int b = ax[t] + out->rank - it->rank;
        if (b >= 0 && b < out->rank && out->dims[b] == it->dims[ax[t]])
            return b;
        b = ax[t];
        if (b < out->rank && out->dims[b] == it->dims[ax[t]])
            return b;
    }
    return -1;
}

s4d_status s4d_selection_axes(const s4d_plan *p, int *axis, int *topk)
{
    int *ax = malloc(((size_t)p->num_tensors + 1) * sizeof *ax);
    int *src = malloc(((size_t)p->num_tensors + 1) * sizeof *src);
    if (!ax || !src) {
        free(ax);
        free(src);
        return S4D_ERR_NO_MEMORY;
    }
    for (int t = 0; t < p->num_tensors; t++)
        ax[t] = src[t] = -1;
    /* Layers are in execution order, so every input is known before its readers. */
    for (int li = 0; li < p->num_layers; li++) {
        const s4d_plan_layer *l = &p->layers[li];
        if (is_op(l, "TopK") && l->num_outputs >= 2 && l->num_inputs >= 1 && l->inputs[0] >= 0) {
            int in = l->inputs[0];
            int k = norm_axis(attr_int(l, "axis", -1), p->tensors[in].rank);
            ax[l->outputs[1]] = k;
            src[l->outputs[1]] = k >= 0 ? li : -1;
            /* Sorted values are the same however near ties fall; sorted along another
               axis they keep that axis' order. */
            if (ax[in] >= 0 && ax[in] != k) {
                ax[l->outputs[0]] = ax[in];
                src[l->outputs[0]] = src[in];
            }
            continue;
        }
        int from = -1;
        for (int i = 0; i < l->num_inputs && from < 0; i++)
            if (l->inputs[i] >= 0 && ax[l->inputs[i]] >= 0)
                from = l->inputs[i];
        if (from < 0)
            continue;
        /* Gathering by a selection's indices: those decide the order. */
        if ((is_op(l, "Gather") || is_op(l, "GatherElements") || is_op(l, "GatherND")) &&
            l->num_inputs > 1 && l->inputs[1] >= 0 && ax[l->inputs[1]] >= 0)
            from = l->inputs[1];
        for (int j = 0; j < l->num_outputs; j++) {
            int o = l->outputs[j];
            int a = propagate(p, l, ax, o);
            if (a >= 0 && p->tensors[o].dims[a] > 1) {
                ax[o] = a;
                src[o] = src[from];
            }
        }
    }
    for (int i = 0; i < p->num_outputs; i++) {
        axis[i] = ax[p->outputs[i]];
        if (topk)
            topk[i] = axis[i] >= 0 ? src[p->outputs[i]] : -1;
    }
    free(ax);
    free(src);
    return S4D_OK;
}

/* ---- matching rows ---- */

typedef struct pair {
    double d;
    int i, j; /* reference row, candidate row */
} pair;

static int cmp_pair(const void *x, const void *y)
{
    const pair *a = x, *b = y;
    if (a->d != b->d)
        return a->d < b->d ? -1 : 1;
    int da = abs(a->i - a->j), db = abs(b->i - b->j);
    if (da != db)
        return da < db ? -1 : 1;
    if (a->i != b->i)
        return a->i < b->i ? -1 : 1;
    return a->j < b->j ? -1 : (a->j > b->j);
}

/* Squared distance of two rows; infinite where a candidate value is not finite and
   the reference's is not the same value (so NaN never pairs cheaply). */
static double row_dist(const float *c, const float *r, int64_t d)
{
    double s = 0;
    for (int64_t k = 0; k < d; k++) {
        double x = c[k], y = r[k];
        if (!isfinite(x) || !isfinite(y)) {
            if (x == y)
                continue;
            return INFINITY;
        }
        s += (x - y) * (x - y);
    }
    return s;
}

s4d_status s4d_matched_rel_l2(const float *cand, const float *ref, int rank, const int64_t *dims,
                              int axis, double *out, int *perm)
{
    *out = 0;
    if (axis < 0 || axis >= rank)
        return S4D_ERR_INVALID_ARG;
    int64_t outer = prod(dims, 0, axis), n = dims[axis], d = prod(dims, axis + 1, rank);
    size_t total = (size_t)(outer * n * d);
    if (!total)
        return S4D_OK;
    /* Pairs within `w` ranks: all of them up to 1024 rows, about 2^20 pairs beyond. */
    int64_t w = n <= 1024 ? n - 1 : (1 << 20) / n;
    if (w < 16)
        w = 16;
    if (w > n - 1)
        w = n - 1;
    size_t np = (size_t)(n * (2 * w + 1));
    pair *pr = malloc((np + 1) * sizeof *pr);
    float *moved = malloc(total * sizeof *moved);
    unsigned char *used = malloc((size_t)(2 * n) + 1);
    int *match = malloc(((size_t)n + 1) * sizeof *match);
    if (!pr || !moved || !used || !match) {
        free(pr);
        free(moved);
        free(used);
        free(match);
        return S4D_ERR_NO_MEMORY;
    }
    for (int64_t b = 0; b < outer; b++) {
        const float *cb = cand + b * n * d, *rb = ref + b * n * d;
        size_t k = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = i - w < 0 ? 0 : i - w; j < n && j <= i + w; j++)
                pr[k++] = (pair){row_dist(cb + j * d, rb + i * d, d), (int)i, (int)j};
        qsort(pr, k, sizeof *pr, cmp_pair);
        memset(used, 0, (size_t)(2 * n));
        for (size_t q = 0; q < k; q++)
            if (!used[pr[q].i] && !used[n + pr[q].j]) {
                used[pr[q].i] = used[n + pr[q].j] = 1;
                match[pr[q].i] = pr[q].j;
            }
        /* Rows the window left alone: in rank order. */
        int64_t j = 0;
        for (int64_t i = 0; i < n; i++) {
            if (used[i])
                continue;
            while (used[n + j])
                j++;
            used[n + j] = 1;
            match[i] = (int)j;
        }
        for (int64_t i = 0; i < n; i++)
            memcpy(moved + (b * n + i) * d, cb + (int64_t)match[i] * d, (size_t)d * sizeof(float));
        if (perm && b == 0)
            memcpy(perm, match, (size_t)n * sizeof *perm);
    }
    *out = s4d_rel_l2(moved, ref, total);
    free(pr);
    free(moved);
    free(used);
    free(match);
    return S4D_OK;
}

/* ---- comparing a selection ---- */

s4d_status s4d_selection_compare(const float *ref_scores, int rank, const int64_t *dims, int axis,
                                 int64_t k, int largest, const float *ref_idx,
                                 const float *cand_idx, const float *ref_vals,
                                 const float *cand_vals, s4d_selection_diff *out)
{
    memset(out, 0, sizeof *out);
    out->margin = INFINITY;
    if (axis < 0 || axis >= rank || k < 0 || k > dims[axis])
        return S4D_ERR_INVALID_ARG;
    int64_t outer = prod(dims, 0, axis), n = dims[axis], inner = prod(dims, axis + 1, rank);
    out->k = k;
    if (!k || !outer || !inner)
        return S4D_OK;
    unsigned char *mark = malloc((size_t)n + 1);
    if (!mark)
        return S4D_ERR_NO_MEMORY;
    double sign = largest ? 1 : -1, any_gap = INFINITY, any_kth = 0;
    for (int64_t b = 0; b < outer; b++) {
        for (int64_t i = 0; i < inner; i++) {
            memset(mark, 0, (size_t)n);
            for (int64_t j = 0; j < k; j++) {
                float x = ref_idx[(b * k + j) * inner + i];
                if (x >= 0 && x < (float)n)
                    mark[(int64_t)x] = 1;
            }
            int64_t other = 0;
            for (int64_t j = 0; j < k; j++) {
                float x = cand_idx[(b * k + j) * inner + i];
                other += !(x >= 0 && x < (float)n && mark[(int64_t)x]);
            }
            /* The k-th: the worst score selected; the (k+1)-th: the best one left. */
            double kth = INFINITY, next = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                double v = sign * ref_scores[(b * n + j) * inner + i];
                if (isnan(v))
                    continue;
                if (mark[j] && v < kth)
                    kth = v;
                else if (!mark[j] && v > next)
                    next = v;
            }
            double gap = k < n ? kth - next : INFINITY;
            if (isnan(gap))
                gap = INFINITY;
            if (gap < any_gap || isinf(any_gap)) {
                any_gap = gap;
                any_kth = sign * kth;
            }
            if (other && (gap < out->margin || !out->other)) {
                out->margin = gap;
                out->kth = sign * kth;
            }
            out->other += other;
            for (int64_t j = k > 4 ? k - 4 : 0; ref_vals && cand_vals && j < k; j++) {
                int64_t at = (b * k + j) * inner + i;
                double d = fabs((double)cand_vals[at] - (double)ref_vals[at]);
                if (d > out->err || isnan(d))
                    out->err = isnan(d) ? INFINITY : d;
            }
        }
    }
    if (!out->other) {
        out->margin = any_gap;
        out->kth = any_kth;
    }
    free(mark);
    return S4D_OK;
}
