/*
 * The memory plan's soundness, checked by the builder after planning and by
 * the loader on every file: an arena tensor must fit in its device's arena
 * at an aligned offset, and two tensors whose lifetimes overlap must not share
 * a byte. A file that breaks this would make one layer overwrite another's
 * live data. One sharing is by design: an input of a Concat in place
 * (s4d_plan_concat_in_place) lies inside the Concat's output, which it
 * fills, and so may any tensor lying inside that input in turn.
 */
#include <stdlib.h>

#include "builder/builder.h"
#include "engine/plan.h"
#include "util/util.h"

typedef struct span {
    uint64_t begin, end; /* bytes [begin, end) */
    int first, last;     /* layer steps */
    int tensor;
} span;

/* Whether tensor a lies inside tensor b through Concats in place (host[t]: the output of
   the Concat in place that t's buffer fills, -1 for none). The walk is bounded, as a
   file's host links may form a cycle. */
static int inside(const int *host, int n, int a, int b)
{
    for (int steps = 0; a >= 0 && steps < n; steps++) {
        a = host[a];
        if (a == b)
            return 1;
    }
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->tensor - y->tensor;
}

s4d_status s4d_plan_check_memory(const s4d_plan *p, int dev, char *err, size_t errsz)
{
    int n = p->num_tensors;
    int *first = malloc(((size_t)n + 1) * sizeof(int));
    int *last = malloc(((size_t)n + 1) * sizeof(int));
    span *sp = malloc(((size_t)n + 1) * sizeof *sp);
    int *root = malloc(((size_t)n + 1) * sizeof(int));
    int *host = malloc(((size_t)n + 1) * sizeof(int));
    s4d_status st = S4D_OK;
    if (!first || !last || !sp || !root || !host) {
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
        sp[m].begin = t->offset;
        sp[m].end = t->offset + t->bytes;
        sp[m].first = first[i];
        sp[m].last = last[i];
        sp[m].tensor = i;
        m++;
    }
    qsort(sp, (size_t)m, sizeof *sp, by_begin);
    for (int i = 0; i < m; i++) {
        for (int j = i + 1; j < m && sp[j].begin < sp[i].end; j++) {
            if (sp[j].begin == sp[j].end || sp[i].begin == sp[i].end)
                continue;
            if (inside(host, n, sp[i].tensor, sp[j].tensor) ||
                inside(host, n, sp[j].tensor, sp[i].tensor))
                continue;
            if (sp[i].first <= sp[j].last && sp[j].first <= sp[i].last) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                                 "memory plan: tensors '%s' and '%s' share arena bytes while both "
                                 "are live (layers %d-%d and %d-%d)",
                                 p->tensors[sp[i].tensor].name, p->tensors[sp[j].tensor].name,
                                 sp[i].first, sp[i].last, sp[j].first, sp[j].last);
                goto done;
            }
        }
    }
done:
    free(first);
    free(last);
    free(sp);
    free(root);
    free(host);
    return st;
}
