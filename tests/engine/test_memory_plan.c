/*
 * Memory plan invariants on random layer graphs: every activation lies in the
 * arena, two activations whose lifetimes overlap never share a byte, the
 * arena is at least the peak of simultaneously live bytes (a lower bound any
 * plan must meet) and at most the sum without reuse. The loader's verifier
 * (s4d_plan_check_memory) accepts every such plan and refuses it once two
 * live tensors are made to share bytes; on plans with Concats in place whose
 * offsets are then moved at random it gives the verdict of a pairwise
 * reference; and it checks hostile sizes (hundreds of thousands of tensors at
 * two offsets, Concats in place nested tens of thousands deep) in one sweep,
 * where a pairwise check would take hours.
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

/* Frees the layers' input and output lists, the layers and the tensors of a test plan. */
static void plan_free(s4d_plan *p)
{
    for (int l = 0; l < p->num_layers; l++) {
        free(p->layers[l].inputs);
        free(p->layers[l].outputs);
    }
    free(p->layers);
    free(p->tensors);
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
    plan_free(&p);
    free(producer);
    free(first);
    free(last);
    free(own_last);
    return bad;
}

/*
 * The verdict of a pairwise reference on a plan without views: two arena tensors that share
 * a byte while both live are allowed only when one lies inside the other through the chain of
 * Concats in place (host links, followed here step by step). Lifetimes from the layers.
 */
static int reference_accepts(const s4d_plan *p)
{
    int n = p->num_tensors;
    int *first = malloc((size_t)n * sizeof(int)), *last = malloc((size_t)n * sizeof(int));
    int *host = malloc((size_t)n * sizeof(int)), *ident = malloc((size_t)n * sizeof(int));
    for (int t = 0; t < n; t++) {
        first[t] = last[t] = host[t] = -1;
        ident[t] = t;
    }
    for (int l = 0; l < p->num_layers; l++) {
        const s4d_plan_layer *pl = &p->layers[l];
        for (int k = 0; k < pl->num_inputs; k++)
            last[pl->inputs[k]] = l;
        first[pl->outputs[0]] = last[pl->outputs[0]] = l;
        if (s4d_plan_concat_in_place(p, pl, ident))
            for (int k = 0; k < pl->num_inputs; k++)
                host[pl->inputs[k]] = pl->outputs[0];
    }
    int ok = 1;
    for (int a = 0; a < n && ok; a++) {
        const s4d_plan_tensor *x = &p->tensors[a];
        if (x->place != S4D_PLACE_ARENA || x->offset % S4D_PLAN_ALIGN ||
            x->offset + x->bytes > p->arena_size[0]) {
            ok = x->place != S4D_PLACE_ARENA;
            continue;
        }
        for (int b = 0; b < n && ok; b++) {
            const s4d_plan_tensor *y = &p->tensors[b];
            if (b == a || y->place != S4D_PLACE_ARENA || !x->bytes || !y->bytes ||
                !(x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes) ||
                !(first[a] <= last[b] && first[b] <= last[a]))
                continue;
            int inside = 0;
            for (int u = a, steps = 0; u >= 0 && steps < n && !inside; steps++) {
                u = host[u];
                inside = u == b;
            }
            for (int u = b, steps = 0; u >= 0 && steps < n && !inside; steps++) {
                u = host[u];
                inside = u == a;
            }
            ok = inside;
        }
    }
    free(first);
    free(last);
    free(host);
    free(ident);
    return ok;
}

/* Moves one or two arena tensors to random aligned offsets (or onto another's) and compares
   the verifier's verdict with the reference's; the plan is restored after each trial. */
static int compare_verdicts(s4d_plan *p, int *accepted, int *refused)
{
    int n = p->num_tensors, bad = 0;
    uint64_t *keep = malloc((size_t)n * sizeof(uint64_t));
    for (int t = 0; t < n; t++)
        keep[t] = p->tensors[t].offset;
    for (int trial = 0; trial < 20; trial++) {
        int moves = 1 + (int)(next() % 2);
        for (int k = 0; k < moves; k++) {
            int t = (int)(next() % (uint32_t)n), u = (int)(next() % (uint32_t)n);
            s4d_plan_tensor *a = &p->tensors[t];
            if (a->place != S4D_PLACE_ARENA || a->bytes > p->arena_size[0])
                continue;
            uint64_t slots = (p->arena_size[0] - a->bytes) / S4D_PLAN_ALIGN + 1;
            uint64_t to = next() % 2 ? p->tensors[u].offset : (next() % slots) * S4D_PLAN_ALIGN;
            if (p->tensors[u].place == S4D_PLACE_ARENA && to + a->bytes <= p->arena_size[0])
                a->offset = to;
        }
        char err[256];
        int got = s4d_plan_check_memory(p, 0, err, sizeof err) == S4D_OK;
        int want = reference_accepts(p);
        if (got != want) {
            fprintf(stderr, "moved plan of %d tensors: the verifier %s it, the reference %s%s%s\n",
                    n, got ? "accepts" : "refuses", want ? "accepts" : "refuses",
                    got ? "" : ": ", got ? "" : err);
            bad = 1;
        }
        *accepted += got;
        *refused += !got;
        for (int t = 0; t < n; t++)
            p->tensors[t].offset = keep[t];
    }
    free(keep);
    return bad;
}

/*
 * Concats in place on random plans, run byte by byte. Layer l writes tensor l: a Concat (axis
 * 0, rank 1) of 1-3 earlier tensors (repeats allowed), or a layer computing from 0-2 earlier
 * ones. Some tensors are graph outputs (their own buffers), some sizes break the 64-byte
 * alignment. After planning, the plan is executed on 4-byte cells holding (tensor, element) of
 * the value they carry: a computing layer writes its own, a copying Concat copies its inputs'
 * cells, a layer that runs nothing (s4d_plan_layers_elided) does nothing; every read must find
 * the cells the tensor's value is made of. *in_place counts the Concats in place. Then the
 * offsets are moved at random (compare_verdicts).
 */
static int check_concat_plan(int num_layers, int *in_place, int *accepted, int *refused)
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
    if (!bad)
        bad = compare_verdicts(&p, accepted, refused);
    for (int l = 0; l < n; l++)
        free(own[l]);
    free(own);
    free(tmp);
    free(arena);
    free(elided);
    plan_free(&p);
    return bad;
}

/* A plan of n tensors of `bytes` each at offset 0, named, one layer per tensor. */
static void plan_alloc(s4d_plan *p, int n, char (*names)[16])
{
    memset(p, 0, sizeof *p);
    p->num_tensors = p->num_layers = n;
    p->tensors = calloc((size_t)n, sizeof *p->tensors);
    p->layers = calloc((size_t)n, sizeof *p->layers);
    for (int t = 0; t < n; t++) {
        snprintf(names[t], sizeof names[t], "t%d", t);
        p->tensors[t].name = names[t];
        p->tensors[t].place = S4D_PLACE_ARENA;
        p->tensors[t].dtype = S4D_DTYPE_FLOAT32;
        p->tensors[t].rank = 1;
        p->tensors[t].view_of = -1;
        p->layers[t].kind = S4D_LAYER_OP;
        p->layers[t].domain = "";
        p->layers[t].op_type = "Compute";
        p->layers[t].outputs = calloc(1, sizeof(int));
        p->layers[t].outputs[0] = t;
        p->layers[t].num_outputs = 1;
        p->layers[t].inputs = calloc(2, sizeof(int));
    }
}

static int expect(const s4d_plan *p, int accept, const char *said, const char *what)
{
    char err[256] = "";
    int ok = s4d_plan_check_memory(p, 0, err, sizeof err) == S4D_OK;
    if (ok != accept || (!accept && !strstr(err, said))) {
        fprintf(stderr, "%s: the verifier %s it (%s), expected %s%s\n", what,
                ok ? "accepts" : "refuses", err, accept ? "acceptance" : "a refusal naming ",
                accept ? "" : said);
        return 1;
    }
    return 0;
}

/* 300000 tensors at two offsets, each read by the next layer only: sound, with 2.2e10 pairs of
   tensors sharing their bytes. Then the last layer also reads the first tensor, which makes it
   live throughout. */
static int check_one_offset(void)
{
    enum { N = 300000 };
    s4d_plan p;
    char(*names)[16] = malloc(N * sizeof *names);
    plan_alloc(&p, N, names);
    for (int t = 0; t < N; t++) {
        p.tensors[t].dims[0] = 16;
        p.tensors[t].bytes = 64;
        p.tensors[t].offset = 64 * (uint64_t)(t % 2);
        if (t > 0)
            p.layers[t].inputs[p.layers[t].num_inputs++] = t - 1;
    }
    p.arena_size[0] = 128;
    p.arena_size_unplanned[0] = 64ull * N;
    int bad = expect(&p, 1, "", "300000 tensors at two offsets");
    p.layers[N - 1].inputs[p.layers[N - 1].num_inputs++] = 0;
    bad |= expect(&p, 0, "tensors 't0' and 't2' share arena bytes", "the first tensor read last");
    plan_free(&p);
    free(names);
    return bad;
}

/* Concats in place nested 40000 deep: c_i = Concat(c_{i-1}, x_i) with x_i written just
   before, every c_i at offset 0 and x_i at the end of c_i. Then x_last moves to offset 0, so
   the last Concat is not in place and x_last overwrites c_{last-1}, which it reads. */
static int check_deep_nesting(void)
{
    enum { D = 40000, N = 2 * D + 1 };
    s4d_plan p;
    char(*names)[16] = malloc(N * sizeof *names);
    plan_alloc(&p, N, names);
    s4d_attr axis = {0};
    axis.name = "axis";
    axis.type = S4D_ATTR_INT;
    /* tensor 0: c_0; tensor 2i-1: x_i; tensor 2i: c_i; layer t writes tensor t */
    for (int t = 0; t < N; t++) {
        int i = (t + 1) / 2;
        int cat = t > 0 && t % 2 == 0;
        p.tensors[t].dims[0] = cat ? 16 * (int64_t)(i + 1) : 16;
        p.tensors[t].bytes = 4 * (uint64_t)p.tensors[t].dims[0];
        p.tensors[t].offset = t % 2 ? 64 * (uint64_t)i : 0;
        if (cat) {
            s4d_plan_layer *l = &p.layers[t];
            l->op_type = "Concat";
            l->attrs = &axis;
            l->num_attrs = 1;
            l->inputs[0] = t - 2;
            l->inputs[1] = t - 1;
            l->num_inputs = 2;
        }
    }
    p.arena_size[0] = p.tensors[N - 1].bytes;
    p.arena_size_unplanned[0] = p.arena_size[0];
    unsigned char *elided = calloc(N, 1);
    s4d_plan_layers_elided(&p, elided);
    int in_place = 0;
    for (int t = 0; t < N; t++)
        in_place += elided[t];
    int bad = in_place != D;
    if (bad)
        fprintf(stderr, "nested Concats: %d in place, expected %d\n", in_place, D);
    bad |= expect(&p, 1, "", "Concats in place nested 40000 deep");
    p.tensors[N - 2].offset = 0;
    bad |= expect(&p, 0, "tensors 't79998' and 't79999' share arena bytes",
                  "a nested Concat's input moved onto its sibling");
    free(elided);
    plan_free(&p);
    free(names);
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
    int in_place = 0, plans = 0, accepted = 0, refused = 0;
    for (int rep = 0; rep < 200; rep++, plans++)
        bad |= check_concat_plan(2 + rep % 60, &in_place, &accepted, &refused);
    printf("concats in place: %d in %d random plans, every read checked\n", in_place, plans);
    printf("moved offsets: the verifier agrees with the pairwise reference on %d accepted and %d "
           "refused plans\n", accepted, refused);
    if (accepted < 200 || refused < 200) {
        fprintf(stderr, "too few moved plans of each verdict\n");
        bad = 1;
    }
    bad |= check_one_offset();
    bad |= check_deep_nesting();
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
