/*
 * Activation memory plan: every activation lives from the layer that
 * produces it to the last layer that reads it or any view of it (a view
 * has no bytes of its own: plan.h); tensors whose lifetimes
 * overlap must not share bytes. Placing the largest tensors first, each at
 * the lowest offset free for its whole lifetime (best known simple heuristic
 * for this offline interval packing), keeps the arena close to the peak of
 * simultaneously live bytes.
 *
 * Concats in place: where a Concat's inputs are consecutive byte runs of its
 * output (s4d_plan_concat_contiguous), each input's buffer is put where its
 * run lies, so the layers producing the inputs write the output and the
 * Concat runs nothing (s4d_plan_concat_in_place). The output and the inputs
 * placed in it are then one block, live from the first input's producer to
 * the last read of any of them. S4D_CONCAT_IN_PLACE=0 turns this off.
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

static int in_place_off(void)
{
    const char *env = getenv("S4D_CONCAT_IN_PLACE");
    return env && strcmp(env, "0") == 0;
}

/*
 * Chooses the Concats to place in place, in layer order: host[r] becomes the
 * Concat's output for the buffer r of each input, and rel[r] the input's byte
 * offset in it. An input qualifies when its buffer is an activation of this
 * device written before the Concat, not already placed in another Concat nor
 * the buffer of another input of this one, and its run starts at an aligned
 * offset (kernels count on S4D_PLAN_ALIGN). An output may itself be an input
 * of a later Concat in place: the blocks nest.
 */
static void choose_in_place(const s4d_plan *p, int dev, const int *root, const int *first,
                            int *host, uint64_t *rel)
{
    for (int s = 0; s < p->num_layers; s++) {
        const s4d_plan_layer *l = &p->layers[s];
        if ((int)l->device != dev || !s4d_plan_concat_contiguous(p, l))
            continue;
        int out = l->outputs[0];
        const s4d_plan_tensor *ot = &p->tensors[out];
        if (ot->place != S4D_PLACE_ARENA || (int)ot->device != dev)
            continue;
        int ok = 1;
        uint64_t at = 0;
        for (int k = 0; ok && k < l->num_inputs; k++) {
            int t = l->inputs[k], r = root[t];
            const s4d_plan_tensor *rt = r >= 0 ? &p->tensors[r] : NULL;
            ok = rt && r != out && rt->place == S4D_PLACE_ARENA && (int)rt->device == dev &&
                 host[r] == -1 && rt->bytes == p->tensors[t].bytes && rt->bytes > 0 &&
                 at % S4D_PLAN_ALIGN == 0 && first[r] >= 0 && first[r] < s;
            if (ok)
                host[r] = -2; /* taken by this Concat: a second input with this buffer fails */
            at += p->tensors[t].bytes;
        }
        at = 0;
        for (int k = 0; k < l->num_inputs; k++) {
            int t = l->inputs[k], r = root[t];
            if (r >= 0 && host[r] == -2) {
                host[r] = ok ? out : -1;
                rel[r] = at;
            }
            at += p->tensors[t].bytes;
        }
    }
}

/* The Concat output whose block holds tensor t at the top (t itself when none), and t's
   byte offset in it. */
static int block_of(const int *host, const uint64_t *rel, int t, uint64_t *off)
{
    *off = 0;
    while (host[t] >= 0) {
        *off += rel[t];
        t = host[t];
    }
    return t;
}

s4d_status s4d_plan_memory(s4d_plan *p, int dev, char *err, size_t errsz)
{
    int n = p->num_tensors;
    int *first = malloc(((size_t)n + 1) * sizeof(int));
    int *last = malloc(((size_t)n + 1) * sizeof(int));
    int *root = malloc(((size_t)n + 1) * sizeof(int));
    int *host = malloc(((size_t)n + 1) * sizeof(int));
    int *slot = malloc(((size_t)n + 1) * sizeof(int)); /* a block's interval in iv */
    uint64_t *rel = calloc((size_t)n + 1, sizeof(uint64_t));
    interval *iv = calloc((size_t)n + 1, sizeof *iv);
    interval **placed = calloc(2 * (size_t)n + 1, sizeof *placed); /* placed + scratch */
    s4d_status st = S4D_OK;
    if (!first || !last || !root || !host || !slot || !rel || !iv || !placed ||
        s4d_plan_lifetimes(p, first, last) != S4D_OK) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory planning memory");
        goto done;
    }
    s4d_plan_view_roots(p, root);
    for (int i = 0; i < n; i++)
        host[i] = -1;
    if (!in_place_off())
        choose_in_place(p, dev, root, first, host, rel);
    int m = 0;
    uint64_t unplanned = 0;
    for (int i = 0; i < n; i++) {
        s4d_plan_tensor *t = &p->tensors[i];
        if (t->place != S4D_PLACE_ARENA || (int)t->device != dev)
            continue;
        int f = first[i] < 0 ? 0 : first[i];
        unplanned += s4d_align_up(t->bytes ? t->bytes : 1, S4D_PLAN_ALIGN);
        if (host[i] >= 0)
            continue; /* lies in a block: placed with it */
        slot[i] = m;
        iv[m].tensor = i;
        iv[m].first = f;
        iv[m].last = last[i] < f ? f : last[i];
        iv[m].size = s4d_align_up(t->bytes ? t->bytes : 1, S4D_PLAN_ALIGN);
        m++;
    }
    /* A block lives as long as any tensor in it. */
    for (int i = 0; i < n; i++) {
        if (host[i] < 0)
            continue;
        uint64_t off;
        interval *b = &iv[slot[block_of(host, rel, i, &off)]];
        int f = first[i] < 0 ? b->first : first[i];
        if (f < b->first)
            b->first = f;
        if (last[i] > b->last)
            b->last = last[i];
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
    for (int i = 0; i < n; i++) {
        if (host[i] < 0)
            continue;
        uint64_t off;
        int b = block_of(host, rel, i, &off);
        p->tensors[i].offset = p->tensors[b].offset + off;
    }
    p->arena_size[dev] = arena;
    p->arena_size_unplanned[dev] = unplanned;
    /* Every Concat chosen must now be one the runtime skips. */
    for (int s = 0; s < p->num_layers; s++) {
        const s4d_plan_layer *l = &p->layers[s];
        if (l->num_inputs < 1 || l->num_outputs < 1 || l->inputs[0] < 0 || root[l->inputs[0]] < 0 ||
            host[root[l->inputs[0]]] != l->outputs[0])
            continue;
        if (!s4d_plan_concat_in_place(p, l, root)) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                             "memory plan: Concat '%s' was placed in place but its inputs do "
                             "not lie in its output",
                             l->name);
            goto done;
        }
    }
done:
    free(first);
    free(last);
    free(root);
    free(host);
    free(slot);
    free(rel);
    free(iv);
    free(placed);
    return st;
}
