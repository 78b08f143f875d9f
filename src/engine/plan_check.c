/*
 * The memory plan's soundness, checked by the builder after planning and by
 * the loader on every file: an arena tensor must fit in its device's arena
 * at an aligned offset, and two tensors whose lifetimes overlap must not share
 * a byte. A file that breaks this would make one layer overwrite another's
 * live data. One sharing is by design: an input of a Concat in place
 * (s4d_plan_concat_in_place) lies inside the Concat's output, which it
 * fills, and so may any tensor lying inside that input in turn.
 *
 * The check sweeps the layer steps once, keeping the live tensors' byte
 * ranges in a segment tree, so that it costs O(n log n) in the number of
 * tensors whatever a file holds: many tensors reusing one offset at different
 * times, or Concats in place nested thousands deep, are a hostile file's
 * cheapest ways to make a pairwise check slow.
 */
#include <limits.h>
#include <stdlib.h>

#include "builder/builder.h"
#include "engine/plan.h"
#include "util/util.h"

typedef struct span {
    uint64_t begin, end; /* bytes [begin, end) */
    int first, last;     /* layer steps */
    int tensor;
    int lo, hi;          /* elementary segments [lo, hi] of the tree */
} span;

/*
 * A node of the segment tree over the elementary byte segments. Live tensors
 * whose ranges both cover a node's segments overlap, so, the plan being sound
 * so far, they are of one family (see families()): `own` counts those stored
 * at the node and `color` is their family. lo..hi spans the families of
 * every tensor stored at the node or below it (lo > hi: none).
 */
typedef struct node {
    int own, color;
    int lo, hi;
} node;

/*
 * family[t]: the outermost tensor that t lies inside through Concats in place (host[t]: the
 * output of the Concat in place that t's buffer fills, -1 for none); t itself if none. Two
 * tensors of one family either lie one inside the other or share no byte: each host link
 * puts a buffer at its own run of the one Concat that writes the host, and runs are
 * disjoint. So the pairs the sharing allows are exactly the pairs of one family. A cycle
 * of links, which no file whose layers read what earlier ones wrote can have, leaves each
 * tensor on it a family of its own.
 */
static void families(const int *host, int n, int *family, int *path)
{
    enum { UNKNOWN = -1, VISITING = -2 };
    for (int i = 0; i < n; i++)
        family[i] = UNKNOWN;
    for (int i = 0; i < n; i++) {
        int k = 0, t = i;
        while (t >= 0 && family[t] == UNKNOWN) {
            family[t] = VISITING;
            path[k++] = t;
            t = host[t];
        }
        int outer = t < 0 ? path[k - 1] : family[t];
        while (k > 0) {
            k--;
            family[path[k]] = outer >= 0 ? outer : path[k];
        }
    }
}

static void pull(node *tr, int v, int leaf)
{
    node *x = &tr[v];
    x->lo = x->own ? x->color : INT_MAX;
    x->hi = x->own ? x->color : INT_MIN;
    if (leaf)
        return;
    for (int c = 2 * v; c <= 2 * v + 1; c++) {
        x->lo = tr[c].lo < x->lo ? tr[c].lo : x->lo;
        x->hi = tr[c].hi > x->hi ? tr[c].hi : x->hi;
    }
}

/* Adds (delta 1) or removes (-1) a tensor of family `color` over segments [ql, qr]. */
static void update(node *tr, int v, int l, int r, int ql, int qr, int color, int delta)
{
    if (ql <= l && r <= qr) {
        tr[v].own += delta;
        tr[v].color = color;
    } else {
        int mid = l + (r - l) / 2;
        if (ql <= mid)
            update(tr, 2 * v, l, mid, ql, qr, color, delta);
        if (qr > mid)
            update(tr, 2 * v + 1, mid + 1, r, ql, qr, color, delta);
    }
    pull(tr, v, l == r);
}

/* Whether a stored tensor of a family other than `color` overlaps segments [ql, qr]. */
static int foreign(const node *tr, int v, int l, int r, int ql, int qr, int color)
{
    if (tr[v].own && tr[v].color != color)
        return 1;
    if (ql <= l && r <= qr)
        return tr[v].lo <= tr[v].hi && (tr[v].lo != color || tr[v].hi != color);
    int mid = l + (r - l) / 2;
    return (ql <= mid && foreign(tr, 2 * v, l, mid, ql, qr, color)) ||
           (qr > mid && foreign(tr, 2 * v + 1, mid + 1, r, ql, qr, color));
}

static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The index of v in the sorted, distinct xs[0..k). */
static int coord(const uint64_t *xs, int k, uint64_t v)
{
    int lo = 0, hi = k - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (xs[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

typedef struct ending {
    int last, at; /* a span's last step and its index in the spans */
} ending;

static int by_first(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->tensor - y->tensor;
}

static int by_last(const void *a, const void *b)
{
    const ending *x = a, *y = b;
    if (x->last != y->last)
        return x->last < y->last ? -1 : 1;
    return x->at - y->at;
}

/* Names the pair that `foreign` found for sp[x]: a live span of another family sharing bytes. */
static s4d_status report(const s4d_plan *p, const span *sp, int m, const unsigned char *live,
                         const int *family, int x, char *err, size_t errsz)
{
    int y = -1;
    for (int j = 0; j < m && y < 0; j++)
        if (live[j] && j != x && family[sp[j].tensor] != family[sp[x].tensor] &&
            sp[j].begin < sp[x].end && sp[x].begin < sp[j].end)
            y = j;
    if (y < 0) /* cannot happen: the tree holds only live spans */
        return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "memory plan check lost tensor '%s'",
                           p->tensors[sp[x].tensor].name);
    const span *a = &sp[x], *b = &sp[y];
    if (b->begin < a->begin || (b->begin == a->begin && b->tensor < a->tensor)) {
        const span *t = a;
        a = b;
        b = t;
    }
    return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                       "memory plan: tensors '%s' and '%s' share arena bytes while both are live "
                       "(layers %d-%d and %d-%d)",
                       p->tensors[a->tensor].name, p->tensors[b->tensor].name, a->first, a->last,
                       b->first, b->last);
}

/* Sweeps the steps: at each, the spans that ended leave the tree, then each span that starts
   there is checked against the tree and enters it. Spans sorted by first step. */
static s4d_status sweep(const s4d_plan *p, span *sp, int m, const int *family, char *err,
                        size_t errsz)
{
    s4d_status st = S4D_OK;
    uint64_t *xs = malloc(2 * ((size_t)m + 1) * sizeof *xs);
    ending *ends = malloc(((size_t)m + 1) * sizeof *ends);
    unsigned char *live = calloc((size_t)m + 1, 1);
    node *tr = NULL;
    if (!xs || !ends || !live)
        goto oom;
    int k = 0;
    for (int i = 0; i < m; i++) {
        xs[k++] = sp[i].begin;
        xs[k++] = sp[i].end;
    }
    qsort(xs, (size_t)k, sizeof *xs, by_u64);
    int d = 0;
    for (int i = 0; i < k; i++)
        if (d == 0 || xs[i] != xs[d - 1])
            xs[d++] = xs[i];
    int segs = d > 1 ? d - 1 : 1; /* segment s is [xs[s], xs[s + 1]) */
    tr = calloc(4 * (size_t)segs, sizeof *tr);
    if (!tr)
        goto oom;
    for (size_t v = 0; v < 4 * (size_t)segs; v++) {
        tr[v].lo = INT_MAX;
        tr[v].hi = INT_MIN;
    }
    for (int i = 0; i < m; i++) {
        sp[i].lo = coord(xs, d, sp[i].begin);
        sp[i].hi = coord(xs, d, sp[i].end) - 1;
        ends[i].last = sp[i].last;
        ends[i].at = i;
    }
    qsort(ends, (size_t)m, sizeof *ends, by_last);
    int gone = 0;
    for (int i = 0; i < m; i++) {
        for (; gone < m && ends[gone].last < sp[i].first; gone++) {
            const span *s = &sp[ends[gone].at];
            if (live[ends[gone].at]) {
                update(tr, 1, 0, segs - 1, s->lo, s->hi, family[s->tensor], -1);
                live[ends[gone].at] = 0;
            }
        }
        int color = family[sp[i].tensor];
        if (foreign(tr, 1, 0, segs - 1, sp[i].lo, sp[i].hi, color)) {
            st = report(p, sp, m, live, family, i, err, errsz);
            goto done;
        }
        update(tr, 1, 0, segs - 1, sp[i].lo, sp[i].hi, color, 1);
        live[i] = 1;
    }
    goto done;
oom:
    st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory checking the memory plan");
done:
    free(xs);
    free(ends);
    free(live);
    free(tr);
    return st;
}

s4d_status s4d_plan_check_memory(const s4d_plan *p, int dev, char *err, size_t errsz)
{
    int n = p->num_tensors;
    int *first = malloc(((size_t)n + 1) * sizeof(int));
    int *last = malloc(((size_t)n + 1) * sizeof(int));
    span *sp = malloc(((size_t)n + 1) * sizeof *sp);
    int *root = malloc(((size_t)n + 1) * sizeof(int));
    int *host = malloc(((size_t)n + 1) * sizeof(int));
    int *family = malloc(((size_t)n + 1) * sizeof(int));
    s4d_status st = S4D_OK;
    if (!first || !last || !sp || !root || !host || !family) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory checking the memory plan");
        goto done;
    }
    if (s4d_plan_lifetimes(p, first, last) != S4D_OK) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory checking the memory plan");
        goto done;
    }
    s4d_plan_view_roots(p, root);
    for (int i = 0; i < n; i++)
        host[i] = -1;
    for (int s = 0; s < p->num_layers; s++) {
        const s4d_plan_layer *l = &p->layers[s];
        if ((int)l->device != dev || !s4d_plan_concat_in_place(p, l, root))
            continue;
        for (int k = 0; k < l->num_inputs; k++)
            host[root[l->inputs[k]]] = l->outputs[0];
    }
    families(host, n, family, root); /* root is not needed any more: the walk's scratch */
    int m = 0;
    for (int i = 0; i < n; i++) {
        const s4d_plan_tensor *t = &p->tensors[i];
        if (t->place != S4D_PLACE_ARENA || (int)t->device != dev)
            continue;
        if (t->offset % S4D_PLAN_ALIGN != 0 || t->offset > p->arena_size[dev] ||
            t->bytes > p->arena_size[dev] - t->offset) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                             "tensor '%s': %llu bytes at arena offset %llu do not fit the %s arena "
                             "of %llu bytes at a %d-byte boundary",
                             t->name, (unsigned long long)t->bytes, (unsigned long long)t->offset,
                             s4d_device_name((s4d_device)dev),
                             (unsigned long long)p->arena_size[dev], S4D_PLAN_ALIGN);
            goto done;
        }
        if (first[i] < 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                             "tensor '%s' lives in the arena but no layer writes it", t->name);
            goto done;
        }
        if (t->bytes == 0) /* shares no byte with anything */
            continue;
        sp[m].begin = t->offset;
        sp[m].end = t->offset + t->bytes;
        sp[m].first = first[i];
        sp[m].last = last[i];
        sp[m].tensor = i;
        m++;
    }
    qsort(sp, (size_t)m, sizeof *sp, by_first);
    st = sweep(p, sp, m, family, err, errsz);
done:
    free(first);
    free(last);
    free(sp);
    free(root);
    free(host);
    free(family);
    return st;
}
