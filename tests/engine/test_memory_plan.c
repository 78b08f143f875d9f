/*
 * Memory plan invariants on random layer graphs: every activation lies in the
 * arena, two activations whose lifetimes overlap never share a byte, the
 * arena is at least the peak of simultaneously live bytes (a lower bound any
 * plan must meet) and at most the sum without reuse. The loader's verifier
 * (s4d_plan_check_memory) accepts every such plan and refuses it once two
 * live tensors are made to share bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "engine/plan.h"
#include "util/util.h"

static uint32_t rng = 2463534242u;
static int views_checked; /* plans where a view's lifetime decided the verifier's answer */

static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static int check_plan(int num_layers, int num_tensors)
{
    s4d_plan p;
    memset(&p, 0, sizeof p);
    p.num_tensors = num_tensors;
    p.tensors = calloc((size_t)num_tensors, sizeof *p.tensors);
    p.num_layers = num_layers;
    p.layers = calloc((size_t)num_layers, sizeof *p.layers);
    int *producer = malloc((size_t)num_tensors * sizeof(int));
    /* Tensor t is produced by layer t % num_layers (ordered), read by 0-3 later layers. */
    for (int t = 0; t < num_tensors; t++) {
        p.tensors[t].place = (next() % 8 == 0) ? S4D_PLACE_OUTPUT : S4D_PLACE_ARENA;
        p.tensors[t].bytes = 1 + next() % 5000;
        producer[t] = (int)(next() % (uint32_t)num_layers);
    }
    for (int l = 0; l < num_layers; l++) {
        /* Up to 3 readers and a view per tensor. */
        p.layers[l].inputs = calloc(4 * (size_t)num_tensors + 1, sizeof(int));
        p.layers[l].outputs = calloc((size_t)num_tensors, sizeof(int));
    }
    /* Some tensors are views of a tensor produced earlier (its layer reads that one): they
       have no bytes, and their readers keep the viewed tensor's bytes alive. */
    for (int t = 0; t < num_tensors; t++) {
        p.tensors[t].view_of = -1;
        if (next() % 5 != 0 || p.tensors[t].place != S4D_PLACE_ARENA)
            continue;
        int u = (int)(next() % (uint32_t)num_tensors);
        if (u == t || producer[u] >= producer[t] || p.tensors[u].place == S4D_PLACE_OUTPUT)
            continue;
        p.tensors[t].place = S4D_PLACE_VIEW;
        p.tensors[t].view_of = u;
    }
    for (int t = 0; t < num_tensors; t++) {
        s4d_plan_layer *pl = &p.layers[producer[t]];
        pl->outputs[pl->num_outputs++] = t;
        if (p.tensors[t].place == S4D_PLACE_VIEW)
            pl->inputs[pl->num_inputs++] = p.tensors[t].view_of;
        int readers = (int)(next() % 4);
        for (int r = 0; r < readers; r++) {
            int span = num_layers - producer[t] - 1;
            if (span <= 0)
                break;
            s4d_plan_layer *rl = &p.layers[producer[t] + 1 + (int)(next() % (uint32_t)span)];
            rl->inputs[rl->num_inputs++] = t;
        }
    }
    char err[256];
    int bad = s4d_plan_memory(&p, 0, err, sizeof err) != S4D_OK;
    /* Lifetimes, recomputed here independently of the planner. */
    int *first = malloc((size_t)num_tensors * sizeof(int)), *last = malloc((size_t)num_tensors * sizeof(int));
    for (int t = 0; t < num_tensors; t++)
        first[t] = last[t] = producer[t];
    for (int l = 0; l < num_layers; l++)
        for (int j = 0; j < p.layers[l].num_inputs; j++)
            if (l > last[p.layers[l].inputs[j]])
                last[p.layers[l].inputs[j]] = l;
    /* Before the views extend them: the lifetimes their own readers give. */
    int *own_last = malloc((size_t)num_tensors * sizeof(int));
    memcpy(own_last, last, (size_t)num_tensors * sizeof(int));
    for (int t = 0; t < num_tensors; t++) {
        int r = t;
        while (p.tensors[r].place == S4D_PLACE_VIEW)
            r = p.tensors[r].view_of;
        if (own_last[t] > last[r])
            last[r] = own_last[t];
    }
    uint64_t unplanned = 0, peak = 0;
    for (int t = 0; t < num_tensors; t++) {
        const s4d_plan_tensor *a = &p.tensors[t];
        if (a->place != S4D_PLACE_ARENA)
            continue;
        unplanned += s4d_align_up(a->bytes, S4D_PLAN_ALIGN);
        if (a->offset % S4D_PLAN_ALIGN || a->offset + a->bytes > p.arena_size[0]) {
            fprintf(stderr, "tensor %d at %llu+%llu outside the %llu-byte arena\n", t,
                    (unsigned long long)a->offset, (unsigned long long)a->bytes,
                    (unsigned long long)p.arena_size[0]);
            bad = 1;
        }
        for (int u = t + 1; u < num_tensors; u++) {
            const s4d_plan_tensor *b = &p.tensors[u];
            if (b->place != S4D_PLACE_ARENA)
                continue;
            int live_together = first[t] <= last[u] && first[u] <= last[t];
            int share = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
            if (live_together && share) {
                fprintf(stderr, "tensors %d and %d are live together and overlap\n", t, u);
                bad = 1;
            }
        }
    }
    for (int l = 0; l < num_layers; l++) {
        uint64_t live = 0;
        for (int t = 0; t < num_tensors; t++)
            if (p.tensors[t].place == S4D_PLACE_ARENA && first[t] <= l && l <= last[t])
                live += p.tensors[t].bytes;
        peak = live > peak ? live : peak;
    }
    if (p.arena_size[0] < peak || p.arena_size[0] > unplanned || p.arena_size_unplanned[0] != unplanned) {
        fprintf(stderr, "arena %llu outside [peak %llu, unplanned %llu] (reported %llu)\n",
                (unsigned long long)p.arena_size[0], (unsigned long long)peak,
                (unsigned long long)unplanned, (unsigned long long)p.arena_size_unplanned[0]);
        bad = 1;
    }
    if (s4d_plan_check_memory(&p, 0, err, sizeof err) != S4D_OK) {
        fprintf(stderr, "the verifier refuses a sound plan: %s\n", err);
        bad = 1;
    }
    /* Make two tensors that are live together share their first byte. */
    for (int t = 0; t < num_tensors; t++) {
        for (int u = t + 1; u < num_tensors; u++) {
            s4d_plan_tensor *a = &p.tensors[t], *b = &p.tensors[u];
            if (a->place != S4D_PLACE_ARENA || b->place != S4D_PLACE_ARENA ||
                !(first[t] <= last[u] && first[u] <= last[t]))
                continue;
            uint64_t keep = b->offset;
            b->offset = a->offset;
            if (b->bytes <= p.arena_size[0] - b->offset &&
                s4d_plan_check_memory(&p, 0, err, sizeof err) == S4D_OK) {
                fprintf(stderr, "the verifier accepts tensors %d and %d sharing bytes\n", t, u);
                bad = 1;
            }
            b->offset = keep;
            t = u = num_tensors; /* one case per plan */
        }
    }
    /* A tensor written after a root's own last reader, while a view of the root is still
       read, must not take the root's bytes. */
    for (int t = 0; t < num_tensors; t++) {
        s4d_plan_tensor *root = &p.tensors[t];
        if (root->place != S4D_PLACE_ARENA || last[t] <= own_last[t])
            continue;
        for (int u = 0; u < num_tensors; u++) {
            s4d_plan_tensor *b = &p.tensors[u];
            if (b->place != S4D_PLACE_ARENA || first[u] <= own_last[t] || first[u] > last[t] ||
                b->bytes > p.arena_size[0] - root->offset)
                continue;
            uint64_t keep = b->offset;
            b->offset = root->offset;
            if (s4d_plan_check_memory(&p, 0, err, sizeof err) == S4D_OK) {
                fprintf(stderr, "the verifier lets tensor %d take the bytes of %d, which a view "
                                "still reads\n", u, t);
                bad = 1;
            }
            b->offset = keep;
            views_checked++;
            t = u = num_tensors;
        }
    }
    printf("  %4d layers %5d tensors: arena %8llu, live peak %8llu, no reuse %9llu\n", num_layers,
           num_tensors, (unsigned long long)p.arena_size[0], (unsigned long long)peak,
           (unsigned long long)unplanned);
    for (int l = 0; l < num_layers; l++) {
        free(p.layers[l].inputs);
        free(p.layers[l].outputs);
    }
    free(p.layers);
    free(p.tensors);
    free(producer);
    free(first);
    free(last);
    free(own_last);
    return bad;
}

/*
 * Concats in place on random plans, run byte by byte. Layer l writes tensor l: a Concat (axis
 * 0, rank 1) of 1-3 earlier tensors (repeats allowed), or a layer computing from 0-2 earlier
 * ones. Some tensors are graph outputs (their own buffers), some sizes break the 64-byte
 * alignment. After planning, the plan is executed on 4-byte cells holding (tensor, element) of
 * the value they carry: a computing layer writes its own, a copying Concat copies its inputs'
 * cells, a layer that runs nothing (s4d_plan_layers_elided) does nothing; every read must find
 * the cells the tensor's value is made of. *in_place counts the Concats in place.
 */
static int check_concat_plan(int num_layers, int *in_place)
{
    s4d_plan p;
    memset(&p, 0, sizeof p);
    int n = num_layers;
    p.num_tensors = p.num_layers = n;
    p.tensors = calloc((size_t)n, sizeof *p.tensors);
    p.layers = calloc((size_t)n, sizeof *p.layers);
    s4d_attr axis = {0};
    axis.name = "axis";
    axis.type = S4D_ATTR_INT;
    for (int l = 0; l < n; l++) {
        s4d_plan_layer *pl = &p.layers[l];
        s4d_plan_tensor *t = &p.tensors[l];
        pl->kind = S4D_LAYER_OP;
        pl->domain = "";
        pl->outputs = malloc(sizeof(int));
        pl->outputs[0] = l;
        pl->num_outputs = 1;
        pl->inputs = calloc(3, sizeof(int));
        int cat = l >= 1 && next() % 2 == 0;
        pl->op_type = cat ? "Concat" : "Compute";
        if (cat) {
            pl->num_attrs = 1;
            pl->attrs = &axis;
            pl->num_inputs = 1 + (int)(next() % 3);
        } else {
            pl->num_inputs = l ? (int)(next() % 3) : 0;
        }
        uint64_t bytes = 0;
        for (int k = 0; k < pl->num_inputs; k++) {
            pl->inputs[k] = (int)(next() % (uint32_t)l);
            bytes += p.tensors[pl->inputs[k]].bytes;
        }
        if (!cat)
            bytes = next() % 4 ? 64 * (1 + next() % 40) : 4 * (1 + next() % 200);
        t->dtype = S4D_DTYPE_FLOAT32;
        t->rank = 1;
        t->dims[0] = (int64_t)(bytes / 4);
        t->bytes = bytes;
        t->place = next() % 10 == 0 ? S4D_PLACE_OUTPUT : S4D_PLACE_ARENA;
        t->view_of = -1;
    }
    char err[256];
    int bad = 0;
    unsigned char *elided = calloc((size_t)n, 1);
    if (s4d_plan_memory(&p, 0, err, sizeof err) != S4D_OK ||
        s4d_plan_check_memory(&p, 0, err, sizeof err) != S4D_OK) {
        fprintf(stderr, "concat plan of %d layers: %s\n", n, err);
        bad = 1;
    }
    s4d_plan_layers_elided(&p, elided);
    uint64_t *arena = calloc(p.arena_size[0] / 4 + 1, sizeof(uint64_t));
    uint64_t **own = calloc((size_t)n, sizeof *own);
    uint64_t *tmp = malloc(((size_t)p.tensors[0].bytes + 1) * sizeof(uint64_t));
    size_t tmp_cells = (size_t)p.tensors[0].bytes + 1;
    for (int t = 0; t < n; t++)
        if (p.tensors[t].place == S4D_PLACE_OUTPUT)
            own[t] = calloc(p.tensors[t].bytes / 4 + 1, sizeof(uint64_t));
#define CELLS(t) (p.tensors[t].place == S4D_PLACE_ARENA ? arena + p.tensors[t].offset / 4 : own[t])
    for (int l = 0; !bad && l < n; l++) {
        const s4d_plan_layer *pl = &p.layers[l];
        int cat = strcmp(pl->op_type, "Concat") == 0;
        *in_place += cat && elided[l];
        for (int k = 0; !bad && k < pl->num_inputs; k++) {
            /* The value of tensor r, element e: the element of the computed tensor it is. */
            int r = pl->inputs[k];
            const uint64_t *c = CELLS(r);
            for (int64_t e = 0; !bad && e < p.tensors[r].dims[0]; e++) {
                int u = r;
                int64_t i = e;
                while (strcmp(p.layers[u].op_type, "Concat") == 0) {
                    int j = 0;
                    while (i >= p.tensors[p.layers[u].inputs[j]].dims[0])
                        i -= p.tensors[p.layers[u].inputs[j++]].dims[0];
                    u = p.layers[u].inputs[j];
                }
                if (c[e] != ((uint64_t)u << 32 | (uint64_t)i)) {
                    fprintf(stderr, "concat plan of %d layers: layer %d reads tensor %d element "
                                    "%lld as (%llu, %llu), not (%d, %lld)\n",
                            n, l, r, (long long)e, (unsigned long long)(c[e] >> 32),
                            (unsigned long long)(c[e] & 0xffffffffu), u, (long long)i);
                    bad = 1;
                }
            }
        }
        if (elided[l])
            continue;
        uint64_t *out = CELLS(l);
        if (cat) {
            size_t at = 0;
            if (tmp_cells < p.tensors[l].bytes / 4 + 1) {
                tmp_cells = p.tensors[l].bytes / 4 + 1;
                tmp = realloc(tmp, tmp_cells * sizeof(uint64_t));
            }
            for (int k = 0; k < pl->num_inputs; k++) {
                int r = pl->inputs[k];
                memcpy(tmp + at, CELLS(r), (size_t)p.tensors[r].dims[0] * sizeof(uint64_t));
                at += (size_t)p.tensors[r].dims[0];
            }
            memcpy(out, tmp, at * sizeof(uint64_t));
        } else {
            for (int64_t e = 0; e < p.tensors[l].dims[0]; e++)
                out[e] = (uint64_t)l << 32 | (uint64_t)e;
        }
    }
#undef CELLS
    for (int l = 0; l < n; l++) {
        free(p.layers[l].inputs);
        free(p.layers[l].outputs);
        free(own[l]);
    }
    free(own);
    free(tmp);
    free(arena);
    free(elided);
    free(p.layers);
    free(p.tensors);
    return bad;
}

/* Roots of views: a long chain ends at its first tensor; a cycle and a bad index have none. */
static int check_roots(void)
{
    enum { N = 200000 };
    s4d_plan p;
    memset(&p, 0, sizeof p);
    p.num_tensors = N;
    p.tensors = calloc(N, sizeof *p.tensors);
    int *root = malloc(N * sizeof(int));
    for (int t = 0; t < N; t++) {
        /* 1 .. N-4 view the one before; N-3 and N-2 view each other; N-1 views tensor N. */
        p.tensors[t].place = t == 0 ? S4D_PLACE_ARENA : S4D_PLACE_VIEW;
        p.tensors[t].view_of = t < N - 3 ? t - 1 : t == N - 3 ? N - 2 : t == N - 2 ? N - 3 : N;
    }
    s4d_plan_view_roots(&p, root);
    int bad = 0;
    for (int t = 0; t < N - 3; t++)
        bad |= root[t] != 0;
    bad |= root[N - 3] != -1 || root[N - 2] != -1 || root[N - 1] != -1;
    if (bad)
        fprintf(stderr, "view roots wrong\n");
    free(root);
    free(p.tensors);
    return bad;
}

int main(void)
{
    int bad = check_roots();
    const int sizes[][2] = {{1, 1}, {2, 5}, {10, 30}, {50, 120}, {200, 500}, {400, 1200}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int rep = 0; rep < 3; rep++)
            bad |= check_plan(sizes[i][0], sizes[i][1]);
    int in_place = 0, plans = 0;
    for (int rep = 0; rep < 200; rep++, plans++)
        bad |= check_concat_plan(2 + rep % 60, &in_place);
    printf("concats in place: %d in %d random plans, every read checked\n", in_place, plans);
    if (in_place < 50) {
        fprintf(stderr, "only %d Concats in place in %d plans\n", in_place, plans);
        bad = 1;
    }
    if (views_checked < 5) {
        fprintf(stderr, "only %d plans exercised a view's lifetime\n", views_checked);
        bad = 1;
    }
    printf("memory plan: %s (%d view lifetimes checked)\n", bad ? "FAILED" : "passed", views_checked);
    return bad;
}
