/*
 * The memory plan's soundness, checked by the builder after planning and by
 * the loader on every file: an arena tensor must fit in its device's arena
 * at an aligned offset, and two tensors whose lifetimes overlap must not share
 * a byte. A file that breaks this would make one layer overwrite another's
 * live data.
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
    s4d_status st = S4D_OK;
    if (!first || !last || !sp) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory checking the memory plan");
        goto done;
    }
    if (s4d_plan_lifetimes(p, first, last) != S4D_OK) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory checking the memory plan");
        goto done;
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
    return st;
}
