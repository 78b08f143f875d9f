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
    if (views_checked < 5) {
        fprintf(stderr, "only %d plans exercised a view's lifetime\n", views_checked);
        bad = 1;
    }
    printf("memory plan: %s (%d view lifetimes checked)\n", bad ? "FAILED" : "passed", views_checked);
    return bad;
}
