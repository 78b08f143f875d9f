/*
 * Activation memory plan: every activation lives from the layer that
 * produces it to the last layer that reads it or any view of it (a view
 * has no bytes of its own: plan.h); tensors whose lifetimes
 * overlap must not share bytes. Placing the largest tensors first, each at
 * the lowest offset free for its whole lifetime (best known simple heuristic
 * for this offline interval packing), keeps the arena close to the peak of
 * simultaneously live bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "engine/plan.h"
#include "util/util.h"

typedef struct interval {
    int tensor;
    int first, last; /* layer steps */
    uint64_t size;   /* aligned */
    uint64_t offset;
} interval;

static int by_size_desc(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return x->tensor - y->tensor; /* deterministic plan */
}

static int by_offset(const void *a, const void *b)
{
    const interval *const *x = a, *const *y = b;
    if ((*x)->offset != (*y)->offset)
        return (*x)->offset < (*y)->offset ? -1 : 1;
    return 0;
}

s4d_status s4d_plan_lifetimes(const s4d_plan *p, int *first, int *last)
{
    for (int i = 0; i < p->num_tensors; i++)
        first[i] = last[i] = -1;
    for (int s = 0; s < p->num_layers; s++) {
        const s4d_plan_layer *l = &p->layers[s];
        for (int j = 0; j < l->num_outputs; j++) {
            int t = l->outputs[j];
            if (first[t] < 0)
                first[t] = s;
            last[t] = s > last[t] ? s : last[t];
        }
        for (int j = 0; j < l->num_inputs; j++) {
            int t = l->inputs[j];
            if (t >= 0 && s > last[t])
                last[t] = s;
        }
    }
    /* A view reads its root's bytes: the root lives until the view's last reader. */
    int *root = malloc(((size_t)p->num_tensors + 1) * sizeof(int));
    if (!root)
        return S4D_ERR_NO_MEMORY;
    s4d_plan_view_roots(p, root);
    for (int i = 0; i < p->num_tensors; i++) {
        int r = root[i];
        if (r >= 0 && r != i && last[i] > last[r])
            last[r] = last[i];
    }
    free(root);
    return S4D_OK;
}

s4d_status s4d_plan_memory(s4d_plan *p, int dev, char *err, size_t errsz)
{
    int n = p->num_tensors;
    int *first = malloc(((size_t)n + 1) * sizeof(int));
    int *last = malloc(((size_t)n + 1) * sizeof(int));
    interval *iv = calloc((size_t)n + 1, sizeof *iv);
    interval **placed = calloc(2 * (size_t)n + 1, sizeof *placed); /* placed + scratch */
    if (!first || !last || !iv || !placed) {
        free(first);
        free(last);
        free(iv);
        free(placed);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory planning memory");
    }
    if (s4d_plan_lifetimes(p, first, last) != S4D_OK) {
        free(first);
        free(last);
        free(iv);
        free(placed);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory planning memory");
    }
    int m = 0;
    uint64_t unplanned = 0;
    for (int i = 0; i < n; i++) {
        s4d_plan_tensor *t = &p->tensors[i];
        if (t->place != S4D_PLACE_ARENA || (int)t->device != dev)
            continue;
        iv[m].tensor = i;
        iv[m].first = first[i] < 0 ? 0 : first[i];
        iv[m].last = last[i] < iv[m].first ? iv[m].first : last[i];
        iv[m].size = s4d_align_up(t->bytes ? t->bytes : 1, S4D_PLAN_ALIGN);
        unplanned += iv[m].size;
        m++;
    }
    qsort(iv, (size_t)m, sizeof *iv, by_size_desc);
    uint64_t arena = 0;
    int num_placed = 0;
    for (int i = 0; i < m; i++) {
        /* Tensors already placed whose lifetime overlaps this one, by offset. */
        int k = 0;
        for (int j = 0; j < num_placed; j++) {
            interval *q = placed[j];
            if (q->first <= iv[i].last && iv[i].first <= q->last)
                placed[num_placed + k++] = q;
        }
        interval **conf = placed + num_placed;
        qsort(conf, (size_t)k, sizeof *conf, by_offset);
        uint64_t off = 0;
        for (int j = 0; j < k; j++) {
            if (conf[j]->offset >= off + iv[i].size)
                break; /* the gap before this one fits */
            uint64_t end = conf[j]->offset + conf[j]->size;
            if (end > off)
                off = end;
        }
        iv[i].offset = off;
        if (off + iv[i].size > arena)
            arena = off + iv[i].size;
        placed[num_placed++] = &iv[i];
    }
    for (int i = 0; i < m; i++)
        p->tensors[iv[i].tensor].offset = iv[i].offset;
    p->arena_size[dev] = arena;
    p->arena_size_unplanned[dev] = unplanned;
    free(first);
    free(last);
    free(iv);
    free(placed);
    return S4D_OK;
}
