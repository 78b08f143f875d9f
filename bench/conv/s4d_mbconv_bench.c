/*
 * The inverted residual blocks of MobileNetV2 (1x3x224x224: 17 blocks) through
 * s4d_mbconv_* (one pass) and through the three library convolutions one after
 * the other (the unfused layers), on the same inputs, runs of the two
 * interleaved; prints per block the median time of each and their ratio, and
 * the sum. Checks that both give the same bits.
 *
 *   s4d_mbconv_bench [--runs=9] [--reps=20] [--threads=1] [--cpu-time]
 *
 * --cpu-time times the process's CPU time (on a shared machine, the time other
 * processes hold the cores drops out); threads > 1 runs the slots on a pool of
 * pthreads.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/conv/cpuconv.h"
#include "backend/cpu/conv/mbconv.h"
#include "util/threadpool.h"

typedef struct blockdef {
    const char *name;
    int c, hw, expand, mid, m, stride, res;
} blockdef;

static const blockdef blocks[] = {
    {"features.1", 32, 112, 0, 32, 16, 1, 0},    {"features.2", 16, 112, 1, 96, 24, 2, 0},
    {"features.3", 24, 56, 1, 144, 24, 1, 1},    {"features.4", 24, 56, 1, 144, 32, 2, 0},
    {"features.5", 32, 28, 1, 192, 32, 1, 1},    {"features.6", 32, 28, 1, 192, 32, 1, 1},
    {"features.7", 32, 28, 1, 192, 64, 2, 0},    {"features.8", 64, 14, 1, 384, 64, 1, 1},
    {"features.9", 64, 14, 1, 384, 64, 1, 1},    {"features.10", 64, 14, 1, 384, 64, 1, 1},
    {"features.11", 64, 14, 1, 384, 96, 1, 0},   {"features.12", 96, 14, 1, 576, 96, 1, 1},
    {"features.13", 96, 14, 1, 576, 96, 1, 1},   {"features.14", 96, 14, 1, 576, 160, 2, 0},
    {"features.15", 160, 7, 1, 960, 160, 1, 1},  {"features.16", 160, 7, 1, 960, 160, 1, 1},
    {"features.17", 160, 7, 1, 960, 320, 1, 0},
};

static int cpu_time;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void fill(float *v, size_t n, float scale, unsigned *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        v[i] = ((float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void pfor(void *pool, int64_t n, s4d_cpuconv_range_fn fn, void *arg)
{
    s4d_parallel_for(pool, n, 1, fn, arg);
}

/* One library layer: plan, packed weights, workspace. */
typedef struct layer {
    s4d_cpuconv_plan *pl;
    void *pk, *ws;
    size_t wsb;
} layer;

static int layer_make(layer *l, s4d_cpuconv_params *cp, const float *w)
{
    s4d_errbuf err;
    if (s4d_cpuconv_plan_create(cp, &l->pl, &err) != S4D_OK) {
        fprintf(stderr, "plan: %s\n", err.msg);
        return 1;
    }
    s4d_cpuconv_info in;
    s4d_cpuconv_plan_info(l->pl, &in);
    l->pk = malloc(in.packed_bytes);
    l->wsb = in.workspace_bytes + 64;
    l->ws = malloc(l->wsb);
    return s4d_cpuconv_pack_weights(l->pl, w, l->pk, in.packed_bytes, &err) != S4D_OK;
}

static void params(s4d_cpuconv_params *cp, int c, int hw, int m, int k, int s, int group, int threads)
{
    memset(cp, 0, sizeof *cp);
    cp->struct_size = sizeof *cp;
    cp->n = 1;
    cp->c = c;
    cp->h = cp->w = hw;
    cp->m = m;
    cp->kh = cp->kw = k;
    cp->stride_h = cp->stride_w = s;
    cp->pad_top = cp->pad_left = cp->pad_bottom = cp->pad_right = k / 2;
    cp->group = group;
    cp->has_bias = 1;
    cp->num_threads = threads;
}

int main(int argc, char **argv)
{
    int runs = 9, reps = 20, threads = 1;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--runs=", 7) == 0)
            runs = atoi(argv[i] + 7);
        else if (strncmp(argv[i], "--reps=", 7) == 0)
            reps = atoi(argv[i] + 7);
        else if (strncmp(argv[i], "--threads=", 10) == 0)
            threads = atoi(argv[i] + 10);
        else if (strcmp(argv[i], "--cpu-time") == 0)
            cpu_time = 1;
        else {
            fprintf(stderr, "usage: %s [--runs=9] [--reps=20] [--threads=1] [--cpu-time]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 1 || runs > 1000 || reps < 1 || threads < 1 || threads > 64) {
        fprintf(stderr, "s4d_mbconv_bench: runs 1..1000, reps and threads >= 1\n");
        return 2;
    }
    s4d_threadpool *pool = NULL;
    if (threads > 1 && s4d_threadpool_create(threads, &pool) != S4D_OK) {
        fprintf(stderr, "s4d_mbconv_bench: no thread pool\n");
        return 1;
    }
    printf("MobileNetV2 inverted residual blocks, 1x3x224x224, %d thread(s), %s, median of %d runs of %d\n",
           threads, cpu_time ? "CPU time" : "wall clock", runs, reps);
    printf("| block | c -> mid -> m | map | stride | fused ms | three layers ms | ratio |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    double sum_f = 0.0, sum_u = 0.0;
    int bad = 0;
    unsigned seed = 12345u;
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
        const blockdef *d = &blocks[b];
        const int ho = (d->hw - 1) / d->stride + 1;
        const size_t nx = (size_t)d->c * d->hw * d->hw, ny = (size_t)d->m * ho * ho;
        float *x = malloc(4 * nx), *w1 = malloc(4 * (size_t)d->mid * d->c), *w2 = malloc(4 * (size_t)d->mid * 9);
        float *w3 = malloc(4 * (size_t)d->m * d->mid), *b1 = malloc(4 * (size_t)d->mid), *b2 = malloc(4 * (size_t)d->mid);
        float *b3 = malloc(4 * (size_t)d->m), *z = malloc(4 * ny), *yf = malloc(4 * ny), *yu = malloc(4 * ny);
        float *e = malloc(4 * (size_t)d->mid * d->hw * d->hw), *dd = malloc(4 * (size_t)d->mid * ho * ho);
        fill(x, nx, 1.0f, &seed);
        fill(w1, (size_t)d->mid * d->c, 0.2f, &seed);
        fill(w2, (size_t)d->mid * 9, 0.3f, &seed);
        fill(w3, (size_t)d->m * d->mid, 0.1f, &seed);
        fill(b1, (size_t)d->mid, 0.2f, &seed);
        fill(b2, (size_t)d->mid, 0.2f, &seed);
        fill(b3, (size_t)d->m, 0.2f, &seed);
        fill(z, ny, 1.0f, &seed);
        /* fused */
        s4d_mbconv_params p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        p.n = 1;
        p.c = d->c;
        p.h = p.w = d->hw;
        p.has_expand = d->expand;
        p.mid = d->mid;
        p.m = d->m;
        p.k = 3;
        p.stride = d->stride;
        p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
        p.has_b1 = p.has_b2 = p.has_b3 = 1;
        p.has_residual = d->res;
        p.act1.act = p.act2.act = S4D_CPUCONV_ACT_CLIP;
        p.act1.act_max = p.act2.act_max = 6.0f;
        p.num_threads = threads;
        s4d_mbconv_plan *pl = NULL;
        s4d_errbuf err;
        if (s4d_mbconv_plan_create(&p, &pl, &err) != S4D_OK) {
            fprintf(stderr, "%s: %s\n", d->name, err.msg);
            return 1;
        }
        s4d_mbconv_info in;
        s4d_mbconv_plan_info(pl, &in);
        void *pk = malloc(in.packed_bytes), *ws = malloc(in.workspace_bytes);
        s4d_mbconv_pack_weights(pl, w1, w2, w3, pk, in.packed_bytes, &err);
        /* unfused */
        layer le = {0}, ld = {0}, lp = {0};
        s4d_cpuconv_params cp;
        int fail = 0;
        if (d->expand) {
            params(&cp, d->c, d->hw, d->mid, 1, 1, 1, threads);
            cp.act = S4D_CPUCONV_ACT_CLIP;
            cp.act_max = 6.0f;
            fail |= layer_make(&le, &cp, w1);
        }
        params(&cp, d->mid, d->hw, d->mid, 3, d->stride, d->mid, threads);
        cp.act = S4D_CPUCONV_ACT_CLIP;
        cp.act_max = 6.0f;
        fail |= layer_make(&ld, &cp, w2);
        params(&cp, d->mid, ho, d->m, 1, 1, 1, threads);
        cp.has_residual = d->res;
        fail |= layer_make(&lp, &cp, w3);
        if (fail)
            return 1;
        s4d_cpuconv_parallel_for par = pool ? pfor : NULL;
        double *tf = malloc(sizeof(double) * (size_t)runs), *tu = malloc(sizeof(double) * (size_t)runs);
        for (int r = -1; r < runs; r++) { /* run -1 warms up */
            double t0 = now_ms();
            for (int i = 0; i < reps; i++)
                s4d_mbconv_run(pl, pk, x, b1, b2, b3, d->res ? z : NULL, yf, ws, in.workspace_bytes, par, pool, &err);
            double t1 = now_ms();
            for (int i = 0; i < reps; i++) {
                if (d->expand)
                    s4d_cpuconv_run(le.pl, le.pk, x, b1, NULL, e, le.ws, le.wsb, par, pool, &err);
                s4d_cpuconv_run(ld.pl, ld.pk, d->expand ? e : x, b2, NULL, dd, ld.ws, ld.wsb, par, pool, &err);
                s4d_cpuconv_run(lp.pl, lp.pk, dd, b3, d->res ? z : NULL, yu, lp.ws, lp.wsb, par, pool, &err);
            }
            double t2 = now_ms();
            if (r >= 0) {
                tf[r] = (t1 - t0) / reps;
                tu[r] = (t2 - t1) / reps;
            }
        }
        qsort(tf, (size_t)runs, sizeof(double), cmp_d);
        qsort(tu, (size_t)runs, sizeof(double), cmp_d);
        const double mf = tf[runs / 2], mu = tu[runs / 2];
        const int same = memcmp(yf, yu, 4 * ny) == 0;
        bad |= !same;
        printf("| %s | %d -> %d -> %d | %dx%d | %d | %.4f | %.4f | %.2f%s |\n", d->name, d->c, d->mid, d->m, d->hw,
               d->hw, d->stride, mf, mu, mf / mu, same ? "" : " (outputs differ!)");
        sum_f += mf;
        sum_u += mu;
        s4d_mbconv_plan_destroy(pl);
        s4d_cpuconv_plan_destroy(le.pl);
        s4d_cpuconv_plan_destroy(ld.pl);
        s4d_cpuconv_plan_destroy(lp.pl);
        free(le.pk);
        free(le.ws);
        free(ld.pk);
        free(ld.ws);
        free(lp.pk);
        free(lp.ws);
        free(pk);
        free(ws);
        free(tf);
        free(tu);
        free(x);
        free(w1);
        free(w2);
        free(w3);
        free(b1);
        free(b2);
        free(b3);
        free(z);
        free(yf);
        free(yu);
        free(e);
        free(dd);
    }
    printf("| all 17 | | | | %.3f | %.3f | %.2f |\n", sum_f, sum_u, sum_f / sum_u);
    s4d_threadpool_destroy(pool);
    return bad;
}
