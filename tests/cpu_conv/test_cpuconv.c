/*
 * The convolution library (src/backend/cpu/conv) against a float64 direct
 * loop, on random inputs, for one group of cases and one instruction set:
 *
 *   test_cpuconv <gemm|winograd2|winograd4|depthwise|epilogue|threads|maxpool|random> <scalar|avx2|avx512>
 *   test_cpuconv errors
 *
 * Exit 0: pass; 1: fail; 77: the CPU lacks the instruction set (CTest skip).
 *
 * Error measure: |y - ref| / scale, with scale = sum |w x| + |bias| +
 * |residual| in float64 for that output element: a float32 sum of K terms
 * stays within K * 2^-24 of it (and in practice near sqrt(K) * 2^-24), while
 * one wrong or missing tap moves it by about 1/K. Tolerances: 2e-6 for GEMM,
 * depthwise and F(2x2,3x3), 2e-5 for F(4x4,3x3), whose transforms scale the
 * inputs by up to 5x5 and the outputs by up to 8x8 before rounding. Measured
 * (2026-12, all sets): at most 2.4e-7 for GEMM and depthwise, 1.6e-7 for
 * F(2x2), 2.0e-6 for F(4x4); every case prints its largest error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv.h"
#include "ops/op.h"
#include "util/threadpool.h"

static int failures;

#define CHECK(cond, ...)                                                                                 \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
            fprintf(stderr, __VA_ARGS__);                                                                \
            fprintf(stderr, "\n");                                                                       \
            failures++;                                                                                  \
        }                                                                                                \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static float *rand_buf(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

typedef struct ccase {
    const char *name;
    int64_t n, c, h, w, m, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, group;
    int bias, res;
    s4d_cpuconv_act act;
} ccase;

static s4d_cpuconv_params params_of(const ccase *k, s4d_cpuconv_algo algo, s4d_cpuconv_isa isa, int threads)
{
    s4d_cpuconv_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.n = k->n;
    p.c = k->c;
    p.h = k->h;
    p.w = k->w;
    p.m = k->m;
    p.kh = k->kh;
    p.kw = k->kw;
    p.stride_h = k->sh;
    p.stride_w = k->sw;
    p.pad_top = k->pt;
    p.pad_left = k->pl;
    p.pad_bottom = k->pb;
    p.pad_right = k->pr;
    p.dil_h = k->dh;
    p.dil_w = k->dw;
    p.group = k->group;
    p.has_bias = k->bias;
    p.has_residual = k->res;
    p.act = k->act;
    p.act_min = -0.25f;
    p.act_max = 0.5f;
    p.act_alpha = 0.3f;
    p.act_beta = 0.45f;
    p.algo = algo;
    p.isa = isa;
    p.num_threads = threads;
    return p;
}

/* The activations in float64 (alpha 0.3, beta 0.45, clip bounds -0.25 and 0.5, as run_case sets). */
static double ref_act(s4d_cpuconv_act act, double v)
{
    double t;
    switch (act) {
    case S4D_CPUCONV_ACT_RELU: return v < 0 ? 0 : v;
    case S4D_CPUCONV_ACT_CLIP: return v < -0.25 ? -0.25 : v > 0.5 ? 0.5 : v;
    case S4D_CPUCONV_ACT_LEAKY_RELU: return v < 0 ? (double)0.3f * v : v;
    case S4D_CPUCONV_ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    case S4D_CPUCONV_ACT_SILU: return v / (1.0 + exp(-v));
    case S4D_CPUCONV_ACT_HARD_SIGMOID:
        t = (double)0.3f * v + (double)0.45f;
        return t < 0 ? 0 : t > 1 ? 1 : t;
    case S4D_CPUCONV_ACT_HARD_SWISH:
        t = v / 6 + 0.5;
        return v * (t < 0 ? 0 : t > 1 ? 1 : t);
    case S4D_CPUCONV_ACT_NONE: break;
    }
    return v;
}

/* Float64 direct convolution; also the per-element scale of the error. */
static void reference(const ccase *k, int64_t ho, int64_t wo, const float *x, const float *w, const float *b,
                      const float *r, double *ref, double *scale)
{
    const int64_t g = k->group ? k->group : 1, sh = k->sh ? k->sh : 1, sw = k->sw ? k->sw : 1;
    const int64_t dh = k->dh ? k->dh : 1, dw = k->dw ? k->dw : 1, cg = k->c / g, mg = k->m / g;
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t m = 0; m < k->m; m++)
            for (int64_t oy = 0; oy < ho; oy++)
                for (int64_t ox = 0; ox < wo; ox++) {
                    double acc = 0.0, sc = 0.0;
                    int64_t gi = m / mg;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t ky = 0; ky < k->kh; ky++)
                            for (int64_t kx = 0; kx < k->kw; kx++) {
                                int64_t iy = oy * sh - k->pt + ky * dh, ix = ox * sw - k->pl + kx * dw;
                                if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w)
                                    continue;
                                double t = (double)w[((m * cg + ci) * k->kh + ky) * k->kw + kx] *
                                           (double)x[((n * k->c + gi * cg + ci) * k->h + iy) * k->w + ix];
                                acc += t;
                                sc += fabs(t);
                            }
                    int64_t at = ((n * k->m + m) * ho + oy) * wo + ox;
                    if (b) {
                        acc += b[m];
                        sc += fabs(b[m]);
                    }
                    if (r) {
                        acc += r[at];
                        sc += fabs(r[at]);
                    }
                    acc = ref_act(k->act, acc);
                    ref[at] = acc;
                    scale[at] = sc > 1e-30 ? sc : 1e-30;
                }
}

static void pool_for(void *pool, int64_t n, s4d_cpuconv_range_fn fn, void *arg)
{
    s4d_parallel_for(pool, n, 1, fn, arg);
}

/* Runs the case once; returns y (caller frees) or NULL after reporting. */
static float *run_case(const ccase *k, s4d_cpuconv_algo algo, s4d_cpuconv_isa isa, int threads, s4d_threadpool *pool,
                       const float *x, const float *w, const float *b, const float *r, s4d_cpuconv_info *info)
{
    s4d_cpuconv_params p = params_of(k, algo, isa, threads);
    s4d_cpuconv_plan *plan = NULL;
    s4d_errbuf err = {{0}};
    s4d_status st = s4d_cpuconv_plan_create(&p, &plan, &err);
    CHECK(st == S4D_OK, "%s: plan: %s", k->name, err.msg);
    if (st != S4D_OK)
        return NULL;
    s4d_cpuconv_plan_info(plan, info);
    CHECK(algo == S4D_CPUCONV_ALGO_AUTO || info->algo == algo, "%s: asked for %s, got %s", k->name,
          s4d_cpuconv_algo_name(algo), s4d_cpuconv_algo_name(info->algo));
    CHECK(info->isa == isa, "%s: asked for %s, got %s", k->name, s4d_cpuconv_isa_name(isa),
          s4d_cpuconv_isa_name(info->isa));
    void *packed = malloc(info->packed_bytes);
    /* Poison the workspace and the output: nothing may be read before it is written. */
    void *ws = info->workspace_bytes ? malloc(info->workspace_bytes) : NULL;
    if (ws)
        memset(ws, 0xFF, info->workspace_bytes);
    size_t ny = (size_t)(k->n * k->m * info->ho * info->wo);
    float *y = malloc(sizeof(float) * ny);
    memset(y, 0xFF, sizeof(float) * ny);
    st = s4d_cpuconv_pack_weights(plan, w, packed, info->packed_bytes, &err);
    CHECK(st == S4D_OK, "%s: pack: %s", k->name, err.msg);
    st = s4d_cpuconv_run(plan, packed, x, b, r, y, ws, info->workspace_bytes, pool ? pool_for : NULL, pool, &err);
    CHECK(st == S4D_OK, "%s: run: %s", k->name, err.msg);
    free(ws);
    free(packed);
    s4d_cpuconv_plan_destroy(plan);
    return y;
}

static void check_case_t(const ccase *k, s4d_cpuconv_algo algo, s4d_cpuconv_isa isa, double tol, int threads,
                         s4d_threadpool *pool, int quiet);

static void check_case(const ccase *k, s4d_cpuconv_algo algo, s4d_cpuconv_isa isa, double tol)
{
    check_case_t(k, algo, isa, tol, 1, NULL, 0);
}

static void check_case_t(const ccase *k, s4d_cpuconv_algo algo, s4d_cpuconv_isa isa, double tol, int threads,
                         s4d_threadpool *pool, int quiet)
{
    const int64_t sh = k->sh ? k->sh : 1, sw = k->sw ? k->sw : 1, dh = k->dh ? k->dh : 1, dw = k->dw ? k->dw : 1;
    const int64_t ho = (k->h + k->pt + k->pb - dh * (k->kh - 1) - 1) / sh + 1;
    const int64_t wo = (k->w + k->pl + k->pr - dw * (k->kw - 1) - 1) / sw + 1;
    const int64_t g = k->group ? k->group : 1;
    const int64_t nx = k->n * k->c * k->h * k->w, nw = k->m * (k->c / g) * k->kh * k->kw, ny = k->n * k->m * ho * wo;
    float *x = rand_buf(nx), *w = rand_buf(nw), *b = k->bias ? rand_buf(k->m) : NULL, *r = k->res ? rand_buf(ny) : NULL;
    double *ref = malloc(sizeof(double) * (size_t)ny), *scale = malloc(sizeof(double) * (size_t)ny);
    reference(k, ho, wo, x, w, b, r, ref, scale);
    s4d_cpuconv_info info;
    float *y = run_case(k, algo, isa, threads, pool, x, w, b, r, &info);
    if (y) {
        CHECK(info.ho == ho && info.wo == wo, "%s: output %lldx%lld, expected %lldx%lld", k->name, (long long)info.ho,
              (long long)info.wo, (long long)ho, (long long)wo);
        double worst = 0.0;
        int64_t at = 0;
        for (int64_t i = 0; i < ny; i++) {
            double e = fabs((double)y[i] - ref[i]) / scale[i];
            if (!(e <= worst)) { /* catches NaN */
                worst = isnan(e) ? INFINITY : e;
                at = i;
            }
        }
        if (!quiet)
            printf("%-28s %-10s %-7s max error %.3g (x scale)\n", k->name, s4d_cpuconv_algo_name(info.algo),
                   s4d_cpuconv_isa_name(isa), worst);
        CHECK(worst <= tol, "%s (%s, %s, %d threads): error %.3g > %.3g at %lld: got %.9g, expected %.9g", k->name,
              s4d_cpuconv_algo_name(info.algo), s4d_cpuconv_isa_name(isa), threads, worst, tol, (long long)at,
              (double)y[at], ref[at]);
        free(y);
    }
    free(x);
    free(w);
    free(b);
    free(r);
    free(ref);
    free(scale);
}

/* name n c h w m kh kw sh sw pt pl pb pr dh dw group bias res act */
static const ccase gemm_cases[] = {
    {"1x1", 2, 13, 7, 9, 19, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, S4D_CPUCONV_ACT_NONE},
    {"1x1 wide", 1, 24, 3, 211, 40, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"1x1 stride 2", 1, 16, 11, 13, 24, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"1x1 padded", 1, 5, 6, 7, 9, 1, 1, 1, 1, 1, 2, 0, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"3x3 s1", 1, 5, 17, 23, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"3x3 s2", 2, 8, 15, 21, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"7x7 s2 stem", 1, 3, 33, 41, 16, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 0, 0, S4D_CPUCONV_ACT_RELU},
    {"5x3 s2x1 dil 2x1 asym pad", 1, 6, 19, 16, 10, 5, 3, 2, 1, 2, 1, 0, 1, 2, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"3x3 s3 dil 3", 1, 4, 25, 26, 7, 3, 3, 3, 3, 2, 2, 2, 2, 3, 3, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"groups 2", 1, 8, 9, 10, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"groups 4 1x1", 2, 16, 5, 6, 20, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 4, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"depthwise mult 2", 1, 6, 8, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"K blocks + res + relu", 1, 300, 6, 9, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"1x1 K blocks", 1, 700, 5, 5, 17, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_NONE},
    {"1x1 read in place, K blocks", 2, 600, 9, 12, 20, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"1x1 read in place, odd tail", 1, 40, 7, 23, 50, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"many M, many pixels", 1, 9, 30, 31, 200, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"1x1 single pixel", 3, 7, 1, 1, 5, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"kernel = input", 1, 3, 4, 5, 6, 4, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"1x1 large map, short K + res", 1, 24, 70, 64, 40, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_CLIP},
};

static const ccase wino_cases[] = {
    {"small odd", 1, 7, 13, 22, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"row runs + res + relu", 2, 32, 9, 70, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"unpadded", 1, 12, 10, 71, 16, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, S4D_CPUCONV_ACT_NONE},
    {"asymmetric pad", 1, 6, 11, 40, 8, 3, 3, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"K blocks + clip", 1, 300, 8, 36, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_CLIP},
    {"tiny image", 1, 3, 3, 3, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_NONE},
    {"many tiles", 1, 8, 40, 150, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_NONE},
    {"narrow: many rows a vector", 1, 6, 30, 5, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
};

static const ccase dw_cases[] = {
    {"3x3 s1", 1, 10, 19, 37, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 10, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"3x3 s2 + res + clip", 2, 12, 20, 41, 12, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 12, 1, 1, S4D_CPUCONV_ACT_CLIP},
    {"5x5 s2", 1, 8, 23, 30, 8, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 8, 1, 0, S4D_CPUCONV_ACT_RELU},
    {"7x7 dil 2", 1, 4, 25, 33, 4, 7, 7, 1, 1, 6, 6, 6, 6, 2, 2, 4, 0, 0, S4D_CPUCONV_ACT_NONE},
    {"3x1 s3 asym pad", 1, 5, 17, 50, 5, 3, 1, 3, 3, 0, 2, 1, 0, 1, 1, 5, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"5x5 s1 small plane + res", 2, 6, 7, 7, 6, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 6, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"5x5 s2 odd plane", 1, 5, 14, 13, 5, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 5, 1, 0, S4D_CPUCONV_ACT_CLIP},
    {"3x3 s2 dil 2 uneven stride", 1, 3, 21, 18, 3, 3, 3, 2, 3, 2, 1, 1, 2, 2, 2, 3, 1, 1, S4D_CPUCONV_ACT_NONE},
    {"1x1 s1", 1, 4, 9, 20, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 4, 0, 0, S4D_CPUCONV_ACT_NONE},
    /* row rings: rows of several 64-wide steps, planes split in row chunks (3 planes), 7x7, no padding */
    {"3x3 s1 wide rows + res + hardswish", 1, 3, 9, 150, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1,
     S4D_CPUCONV_ACT_HARD_SWISH},
    {"7x7 s2 asym pad + silu", 1, 4, 20, 90, 4, 7, 7, 2, 2, 3, 1, 2, 3, 1, 1, 4, 1, 0, S4D_CPUCONV_ACT_SILU},
    {"7x7 s1 + res", 1, 5, 11, 19, 5, 7, 7, 1, 1, 3, 3, 3, 3, 1, 1, 5, 1, 1, S4D_CPUCONV_ACT_NONE},
    {"5x5 s1 unpadded wide + res", 1, 3, 12, 140, 3, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 3, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"3x3 s2 unpadded", 1, 5, 17, 131, 5, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, 5, 0, 0, S4D_CPUCONV_ACT_NONE},
    {"3x3 s1 14 wide: 4 rows a step, odd tail + res", 1, 6, 15, 14, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 1,
     S4D_CPUCONV_ACT_CLIP},
    {"3x3 s1 28 wide: 2 rows a step, odd tail", 2, 3, 13, 28, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 0,
     S4D_CPUCONV_ACT_HARD_SWISH},
    {"5x5 s2 7 wide: 4 rows a step", 1, 4, 14, 13, 4, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 4, 0, 1, S4D_CPUCONV_ACT_SILU},
    {"3x3 s2 pad past the image", 1, 2, 6, 5, 2, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 2, 1, 0, S4D_CPUCONV_ACT_NONE},
    /* planes past 1024 pixels, so that AVX-512 keeps its row ring rather than channels in vectors */
    {"3x3 s1 14 wide, tall: 4 rows a step + res", 1, 5, 80, 14, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, 1, 1,
     S4D_CPUCONV_ACT_RELU},
    {"5x5 s2 7 wide, tall: 4 rows a step", 1, 3, 90, 13, 3, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 3, 0, 1,
     S4D_CPUCONV_ACT_SILU},
};

static const ccase epi_cases[] = {
    {"relu", 1, 16, 12, 18, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"clip", 1, 16, 12, 18, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_CLIP},
    {"1x1 relu", 1, 16, 12, 18, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"1x1 clip", 1, 16, 12, 18, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1, S4D_CPUCONV_ACT_CLIP},
    {"dw relu", 1, 16, 12, 18, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"leaky relu", 1, 16, 12, 18, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_LEAKY_RELU},
    {"sigmoid", 1, 16, 12, 18, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_SIGMOID},
    {"silu", 1, 16, 12, 18, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_SILU},
    {"hard sigmoid", 1, 16, 12, 18, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_HARD_SIGMOID},
    {"hard swish", 1, 16, 12, 18, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_HARD_SWISH},
    {"1x1 silu", 1, 16, 12, 18, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_SILU},
    {"1x1 hard swish", 1, 16, 12, 18, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1, S4D_CPUCONV_ACT_HARD_SWISH},
    {"dw silu", 1, 16, 12, 18, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16, 1, 1, S4D_CPUCONV_ACT_SILU},
    {"dw 5x5 hard swish", 1, 16, 12, 18, 16, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 16, 1, 0, S4D_CPUCONV_ACT_HARD_SWISH},
    {"dw s2 hard sigmoid", 1, 16, 12, 18, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 16, 1, 1, S4D_CPUCONV_ACT_HARD_SIGMOID},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* NaN in an input must reach the outputs it touches through every activation. */
static void check_nan(s4d_cpuconv_isa isa)
{
    ccase k = {"nan", 1, 4, 6, 20, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_RELU};
    s4d_cpuconv_algo algos[] = {S4D_CPUCONV_ALGO_GEMM, S4D_CPUCONV_ALGO_WINOGRAD2, S4D_CPUCONV_ALGO_WINOGRAD4};
    for (int act = S4D_CPUCONV_ACT_RELU; act <= S4D_CPUCONV_ACT_HARD_SWISH; act++)
        for (size_t a = 0; a < COUNT(algos); a++) {
            k.act = (s4d_cpuconv_act)act;
            float *x = rand_buf(4 * 6 * 20), *w = rand_buf(8 * 4 * 9), *b = rand_buf(8);
            x[2 * 20 + 7] = NAN; /* channel 0, row 2, column 7 */
            s4d_cpuconv_info info;
            float *y = run_case(&k, algos[a], isa, 1, NULL, x, w, b, NULL, &info);
            if (y) {
                CHECK(isnan(y[2 * 20 + 7]) && isnan(y[7 * 120 + 3 * 20 + 8]),
                      "NaN lost by %s with activation %d (%s)", s4d_cpuconv_algo_name(algos[a]), act,
                      s4d_cpuconv_isa_name(isa));
                free(y);
            }
            free(x);
            free(w);
            free(b);
        }
}

/* Maps of fewer than 64 pixels, where a GEMM runs pixels as rows and vectors over output channels:
 * each case must take that path (the plan says so), match float64 with every activation, and give
 * the same bits on 1 and 3 threads. */
static const ccase small_cases[] = {
    {"7x7 1x1 + res + relu", 1, 96, 7, 7, 100, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
    {"7x7 1x1 K blocks", 2, 600, 7, 7, 48, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"1x1 s2 14->7 + res", 1, 40, 14, 13, 64, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_NONE},
    {"3x3 7x7 K blocks + clip", 1, 70, 7, 7, 56, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, S4D_CPUCONV_ACT_CLIP},
    {"3x3 s2 14->7 + res + silu", 1, 33, 14, 14, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_SILU},
    {"1x1 map (squeeze) + hardsig", 2, 72, 1, 1, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0,
     S4D_CPUCONV_ACT_HARD_SIGMOID},
    {"3x1 map, 17 channels", 1, 9, 3, 1, 17, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1, S4D_CPUCONV_ACT_SIGMOID},
    {"5x9 1x1 padded + leaky", 1, 20, 4, 7, 128, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0,
     S4D_CPUCONV_ACT_LEAKY_RELU},
};

/* Depthwise with 16 channels or more, or on maps of up to 1024 pixels: AVX-512 takes 16 channels a
 * vector, transposed 16 x 16 into a ring of pixel-major rows; the other sets stage planes or rows. Every kernel adds
 * the taps in the same order, so the results must agree bit for bit across sets as well as with
 * float64. Channel counts that leave a partial vector, strides, dilations, odd widths. */
static const ccase small_dw_cases[] = {
    {"dw 7x7 960-like + res + relu6", 1, 37, 7, 7, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 37, 1, 1, S4D_CPUCONV_ACT_CLIP},
    {"dw 14->7 s2", 2, 20, 14, 14, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 20, 1, 0, S4D_CPUCONV_ACT_NONE},
    {"dw 5x5 13x17 + silu", 1, 16, 13, 17, 16, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 16, 1, 1, S4D_CPUCONV_ACT_SILU},
    {"dw 3x3 dil 2 asym pad", 1, 9, 11, 19, 9, 3, 3, 1, 2, 2, 1, 0, 3, 2, 2, 9, 0, 0, S4D_CPUCONV_ACT_NONE},
    {"dw 7x7 s2 31x29 + hswish", 1, 18, 31, 29, 18, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 18, 1, 0,
     S4D_CPUCONV_ACT_HARD_SWISH},
    {"dw 3x3 28x28 + res", 1, 33, 28, 28, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 33, 1, 1, S4D_CPUCONV_ACT_RELU},
    /* larger maps, 16 channels or more: several strips, the ring wrapping */
    {"dw 3x3 s2 60x50, 3 strips", 1, 20, 60, 50, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 20, 1, 1, S4D_CPUCONV_ACT_NONE},
    {"dw 3x3 40x120 + res, 3-row strips", 1, 16, 40, 120, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16, 1, 1,
     S4D_CPUCONV_ACT_CLIP},
    {"dw 5x5 s2 45x70 + silu", 2, 17, 45, 70, 17, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 17, 1, 0, S4D_CPUCONV_ACT_SILU},
};

static void check_small_dw(s4d_cpuconv_isa isa)
{
    s4d_threadpool *pool = NULL;
    CHECK(s4d_threadpool_create(3, &pool) == S4D_OK, "thread pool");
    for (size_t i = 0; i < COUNT(small_dw_cases); i++) {
        const ccase *k = &small_dw_cases[i];
        check_case(k, S4D_CPUCONV_ALGO_DEPTHWISE, isa, 2e-6);
        s4d_cpuconv_params p = params_of(k, S4D_CPUCONV_ALGO_DEPTHWISE, isa, 1);
        s4d_cpuconv_plan *plan = NULL;
        s4d_errbuf err = {{0}};
        char desc[256] = "";
        CHECK(s4d_cpuconv_plan_create(&p, &plan, &err) == S4D_OK, "%s: plan: %s", k->name, err.msg);
        s4d_cpuconv_plan_describe(plan, desc, sizeof desc);
        s4d_cpuconv_plan_destroy(plan);
        if (isa == S4D_CPUCONV_ISA_AVX512)
            CHECK(strstr(desc, "16 channels a vector") != NULL, "%s: not planned with channels in vectors: %s",
                  k->name, desc);
        if (isa == S4D_CPUCONV_ISA_SCALAR)
            continue; /* plain C may contract differently: float64 above is its check */
        const int64_t ho = (k->h + k->pt + k->pb - k->dh * (k->kh - 1) - 1) / k->sh + 1;
        const int64_t wo = (k->w + k->pl + k->pr - k->dw * (k->kw - 1) - 1) / k->sw + 1, ny = k->n * k->m * ho * wo;
        float *x = rand_buf(k->n * k->c * k->h * k->w), *w = rand_buf(k->m * k->kh * k->kw);
        float *b = rand_buf(k->m), *r = rand_buf(ny);
        s4d_cpuconv_info i1, i2;
        float *y1 = run_case(k, S4D_CPUCONV_ALGO_DEPTHWISE, isa, 1, NULL, x, w, b, r, &i1);
        float *y2 = run_case(k, S4D_CPUCONV_ALGO_DEPTHWISE, S4D_CPUCONV_ISA_AVX2, 1, NULL, x, w, b, r, &i2);
        float *y3 = run_case(k, S4D_CPUCONV_ALGO_DEPTHWISE, isa, 3, pool, x, w, b, r, &i2);
        CHECK(y1 && y2 && memcmp(y1, y2, sizeof(float) * (size_t)ny) == 0, "%s: %s and avx2 differ in bits", k->name,
              s4d_cpuconv_isa_name(isa));
        CHECK(y1 && y3 && memcmp(y1, y3, sizeof(float) * (size_t)ny) == 0, "%s (%s): 3 threads differ from 1",
              k->name, s4d_cpuconv_isa_name(isa));
        free(y1);
        free(y2);
        free(y3);
        free(x);
        free(w);
        free(b);
        free(r);
    }
    s4d_threadpool_destroy(pool);
}

static void check_small_maps(s4d_cpuconv_isa isa)
{
    s4d_threadpool *pool = NULL;
    CHECK(s4d_threadpool_create(3, &pool) == S4D_OK, "thread pool");
    for (size_t i = 0; i < COUNT(small_cases); i++) {
        const ccase *k = &small_cases[i];
        s4d_cpuconv_params p = params_of(k, S4D_CPUCONV_ALGO_GEMM, isa, 1);
        s4d_cpuconv_plan *plan = NULL;
        s4d_errbuf err = {{0}};
        char desc[256] = "";
        CHECK(s4d_cpuconv_plan_create(&p, &plan, &err) == S4D_OK, "%s: plan: %s", k->name, err.msg);
        s4d_cpuconv_plan_describe(plan, desc, sizeof desc);
        CHECK(strstr(desc, "pixels as rows") != NULL, "%s: not planned as a small map: %s", k->name, desc);
        s4d_cpuconv_plan_destroy(plan);
        check_case(k, S4D_CPUCONV_ALGO_GEMM, isa, 2e-6);
        check_case_t(k, S4D_CPUCONV_ALGO_GEMM, isa, 2e-6, 3, pool, 1);
        /* bits on 1 and 3 threads */
        const int64_t sh = k->sh, ho = (k->h + k->pt + k->pb - k->kh) / sh + 1,
                      wo = (k->w + k->pl + k->pr - k->kw) / k->sw + 1, ny = k->n * k->m * ho * wo;
        float *x = rand_buf(k->n * k->c * k->h * k->w), *w = rand_buf(k->m * k->c * k->kh * k->kw);
        float *b = rand_buf(k->m), *r = rand_buf(ny);
        s4d_cpuconv_info i1, i3;
        float *y1 = run_case(k, S4D_CPUCONV_ALGO_GEMM, isa, 1, NULL, x, w, b, r, &i1);
        float *y3 = run_case(k, S4D_CPUCONV_ALGO_GEMM, isa, 3, pool, x, w, b, r, &i3);
        CHECK(y1 && y3 && memcmp(y1, y3, sizeof(float) * (size_t)ny) == 0, "%s (%s): 3 threads differ from 1",
              k->name, s4d_cpuconv_isa_name(isa));
        free(y1);
        free(y3);
        free(x);
        free(w);
        free(b);
        free(r);
    }
    s4d_threadpool_destroy(pool);
}

/* Same bits for 1 slot inline and 3 slots on a pool of 3 threads. */
static void check_threads(s4d_cpuconv_isa isa)
{
    static const ccase cases[] = {
        {"gemm", 1, 48, 20, 44, 72, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
        {"gemm 1x1", 2, 64, 16, 44, 96, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_NONE},
        {"winograd", 1, 32, 30, 90, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_RELU},
        {"depthwise", 1, 24, 30, 40, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 24, 1, 1, S4D_CPUCONV_ACT_NONE},
    };
    s4d_cpuconv_algo algos[] = {S4D_CPUCONV_ALGO_GEMM, S4D_CPUCONV_ALGO_GEMM, S4D_CPUCONV_ALGO_WINOGRAD4,
                                S4D_CPUCONV_ALGO_DEPTHWISE};
    s4d_threadpool *pool = NULL;
    CHECK(s4d_threadpool_create(3, &pool) == S4D_OK, "thread pool");
    for (size_t i = 0; i < COUNT(cases); i++) {
        const ccase *k = &cases[i];
        int64_t g = k->group, ho = (k->h + 2 * k->pt - k->kh) / k->sh + 1, wo = (k->w + 2 * k->pl - k->kw) / k->sw + 1;
        int64_t ny = k->n * k->m * ho * wo;
        float *x = rand_buf(k->n * k->c * k->h * k->w), *w = rand_buf(k->m * (k->c / g) * k->kh * k->kw);
        float *b = rand_buf(k->m), *r = rand_buf(ny);
        s4d_cpuconv_info i1, i3;
        float *y1 = run_case(k, algos[i], isa, 1, NULL, x, w, b, r, &i1);
        float *y3 = run_case(k, algos[i], isa, 3, pool, x, w, b, r, &i3);
        if (y1 && y3)
            CHECK(memcmp(y1, y3, sizeof(float) * (size_t)ny) == 0, "%s (%s): 3 threads differ from 1", k->name,
                  s4d_cpuconv_isa_name(isa));
        const int same = y1 && y3 && !memcmp(y1, y3, sizeof(float) * (size_t)ny);
        printf("%-28s %-10s %-7s 1 vs 3 threads: %s\n", k->name, s4d_cpuconv_algo_name(i3.algo),
               s4d_cpuconv_isa_name(isa), same ? "same bits" : "DIFFER");
        free(y1);
        free(y3);
        free(x);
        free(w);
        free(b);
        free(r);
    }
    s4d_threadpool_destroy(pool);
}

static int64_t irand(int64_t lo, int64_t hi) /* inclusive */
{
    float u = frand() * 0.5f + 0.5f; /* [0, 1] */
    int64_t v = lo + (int64_t)(u * (float)(hi - lo + 1));
    return v > hi ? hi : v;
}

/* Random small shapes through every algorithm that takes them, on 1 to 3
 * threads: blockings and edge cases no hand-picked list covers. */
static void check_random(s4d_cpuconv_isa isa)
{
    s4d_threadpool *pool = NULL;
    CHECK(s4d_threadpool_create(3, &pool) == S4D_OK, "thread pool");
    int runs = 0;
    double worst_seen[5] = {0};
    (void)worst_seen;
    for (int i = 0; i < 60; i++) {
        ccase k;
        memset(&k, 0, sizeof k);
        char name[64];
        snprintf(name, sizeof name, "random %d", i);
        k.name = name;
        k.n = irand(1, 2);
        k.kh = irand(1, 5);
        k.kw = i % 3 == 0 ? k.kh : irand(1, 5);
        k.sh = irand(1, 3);
        k.sw = i % 4 == 0 ? k.sh : irand(1, 3);
        k.dh = irand(1, 2);
        k.dw = irand(1, 2);
        k.pt = irand(0, k.kh - 1);
        k.pl = irand(0, k.kw - 1);
        k.pb = irand(0, k.kh - 1);
        k.pr = irand(0, k.kw - 1);
        const int64_t gsel = irand(0, 3);
        k.group = gsel == 0 ? irand(2, 4) : 1;
        k.c = k.group * irand(1, 24);
        k.m = k.group * irand(1, 24);
        if (gsel == 1) { /* depthwise */
            k.group = k.c = k.m = irand(2, 20);
        }
        k.h = irand(k.dh * (k.kh - 1) + 1, 40);
        k.w = irand(k.dw * (k.kw - 1) + 1, 60);
        k.bias = irand(0, 1);
        k.res = irand(0, 1);
        k.act = (s4d_cpuconv_act)irand(0, S4D_CPUCONV_ACT_HARD_SWISH);
        if (i % 5 == 0) { /* a Winograd shape */
            k.kh = k.kw = 3;
            k.sh = k.sw = k.dh = k.dw = 1;
            k.group = 1;
            k.pt = irand(0, 2), k.pl = irand(0, 2), k.pb = irand(0, 2), k.pr = irand(0, 2);
            k.h = irand(3, 40);
            k.w = irand(3, 70);
        }
        const int threads = (int)irand(1, 3);
        s4d_cpuconv_algo algos[4] = {S4D_CPUCONV_ALGO_GEMM, S4D_CPUCONV_ALGO_WINOGRAD2, S4D_CPUCONV_ALGO_WINOGRAD4,
                                     S4D_CPUCONV_ALGO_DEPTHWISE};
        const double tols[4] = {2e-6, 2e-6, 2e-5, 2e-6};
        for (int a = 0; a < 4; a++) {
            const int wino = k.kh == 3 && k.kw == 3 && k.sh == 1 && k.sw == 1 && k.dh == 1 && k.dw == 1 && k.group == 1;
            const int dw = k.group > 1 && k.group == k.c && k.m == k.c;
            if ((a == 1 || a == 2) && !wino)
                continue;
            if (a == 3 && !dw)
                continue;
            check_case_t(&k, algos[a], isa, tols[a], threads, threads > 1 ? pool : NULL, 1);
            runs++;
        }
    }
    printf("random: %d runs of 60 shapes on %s, %s\n", runs, s4d_cpuconv_isa_name(isa),
           failures ? "FAILED" : "all within tolerance");
    s4d_threadpool_destroy(pool);
}

/* Max pooling against a direct loop: exact, NaN and empty windows included. */
static void check_maxpool(s4d_cpuconv_isa isa)
{
    /* n c h w kh kw sh sw pt pl dh dw ho wo */
    static const int64_t cases[][14] = {
        {1, 64, 128, 352, 3, 3, 2, 2, 1, 1, 1, 1, 64, 176}, /* the ResNet stem */
        {2, 3, 17, 23, 3, 3, 1, 1, 1, 1, 1, 1, 17, 23},
        {1, 5, 19, 40, 2, 2, 2, 2, 0, 0, 1, 1, 9, 20},
        {1, 4, 20, 37, 3, 2, 3, 3, 1, 0, 1, 1, 7, 12},
        {1, 2, 15, 33, 3, 3, 1, 1, 0, 0, 2, 2, 11, 29},
        {1, 2, 9, 18, 2, 2, 1, 1, 2, 2, 1, 1, 10, 19}, /* windows wholly in the padding: -inf */
        {1, 3, 11, 50, 5, 5, 2, 2, 2, 2, 1, 1, 6, 25},  /* ceil_mode-like: last windows clipped */
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        const int64_t *k = cases[i];
        s4d_cpuconv_pool_params p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        p.n = k[0], p.c = k[1], p.h = k[2], p.w = k[3], p.kh = k[4], p.kw = k[5], p.stride_h = k[6], p.stride_w = k[7];
        p.pad_top = k[8], p.pad_left = k[9], p.dil_h = k[10], p.dil_w = k[11], p.ho = k[12], p.wo = k[13];
        p.isa = isa;
        const int64_t nx = p.n * p.c * p.h * p.w, ny = p.n * p.c * p.ho * p.wo;
        float *x = rand_buf(nx), *y = malloc(sizeof(float) * (size_t)ny), *ref = malloc(sizeof(float) * (size_t)ny);
        x[nx / 3] = NAN;
        for (int64_t pl = 0; pl < p.n * p.c; pl++)
            for (int64_t oy = 0; oy < p.ho; oy++)
                for (int64_t ox = 0; ox < p.wo; ox++) {
                    double best = -INFINITY;
                    int nan = 0;
                    for (int64_t ky = 0; ky < p.kh; ky++)
                        for (int64_t kx = 0; kx < p.kw; kx++) {
                            int64_t iy = oy * p.stride_h - p.pad_top + ky * p.dil_h;
                            int64_t ix = ox * p.stride_w - p.pad_left + kx * p.dil_w;
                            if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
                                continue;
                            float v = x[(pl * p.h + iy) * p.w + ix];
                            nan |= v != v;
                            best = v > best ? v : best;
                        }
                    ref[(pl * p.ho + oy) * p.wo + ox] = nan ? NAN : (float)best;
                }
        s4d_threadpool *pool = NULL;
        s4d_threadpool_create(2, &pool);
        s4d_errbuf err = {{0}};
        memset(y, 0xFF, sizeof(float) * (size_t)ny);
        s4d_status st = s4d_cpuconv_maxpool(&p, x, y, pool_for, pool, &err);
        CHECK(st == S4D_OK, "maxpool case %zu: %s", i, err.msg);
        int64_t bad = 0, nans = 0, infs = 0;
        for (int64_t j = 0; j < ny; j++) {
            int same = isnan(ref[j]) ? isnan(y[j]) : y[j] == ref[j];
            bad += !same;
            nans += isnan(ref[j]) != 0;
            infs += isinf(ref[j]) != 0;
        }
        CHECK(bad == 0, "maxpool case %zu (%s): %lld of %lld outputs differ", i, s4d_cpuconv_isa_name(isa),
              (long long)bad, (long long)ny);
        printf("maxpool case %zu %-7s %lld outputs (%lld NaN, %lld -inf): %s\n", i, s4d_cpuconv_isa_name(isa),
               (long long)ny, (long long)nans, (long long)infs, bad ? "DIFFER" : "exact");
        s4d_threadpool_destroy(pool);
        free(x);
        free(y);
        free(ref);
    }
    s4d_cpuconv_pool_params q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    q.n = q.c = q.h = q.w = q.kh = q.kw = q.ho = q.wo = 1;
    float v = 1.0f, out = 0.0f;
    s4d_errbuf err = {{0}};
    q.pad_left = -1;
    CHECK(s4d_cpuconv_maxpool(&q, &v, &out, NULL, NULL, &err) == S4D_ERR_INVALID_ARG && err.msg[0],
          "maxpool: negative pad accepted");
    q.pad_left = 0;
    CHECK(s4d_cpuconv_maxpool(&q, NULL, &out, NULL, NULL, &err) == S4D_ERR_INVALID_ARG, "maxpool: NULL x accepted");
    q.struct_size = 4;
    CHECK(s4d_cpuconv_maxpool(&q, &v, &out, NULL, NULL, &err) == S4D_ERR_INVALID_ARG, "maxpool: struct_size accepted");
}

static int expect_status(s4d_status got, s4d_status want, const s4d_errbuf *err, const char *what)
{
    CHECK(got == want, "%s: status %d, expected %d (%s)", what, (int)got, (int)want, err->msg);
    if (got == want && want != S4D_OK) {
        CHECK(err->msg[0] != '\0', "%s: no message", what);
        printf("%-40s -> %s\n", what, err->msg);
    }
    return got == want;
}

static void check_errors(void)
{
    ccase k = {"e", 1, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, S4D_CPUCONV_ACT_NONE};
    s4d_cpuconv_plan *plan = (s4d_cpuconv_plan *)1;
    s4d_errbuf err = {{0}};
    s4d_cpuconv_params p = params_of(&k, S4D_CPUCONV_ALGO_AUTO, S4D_CPUCONV_ISA_AUTO, 1);
    expect_status(s4d_cpuconv_plan_create(NULL, &plan, &err), S4D_ERR_INVALID_ARG, &err, "NULL params");
    CHECK(plan == NULL, "plan not cleared on failure");
    expect_status(s4d_cpuconv_plan_create(&p, NULL, &err), S4D_ERR_INVALID_ARG, &err, "NULL out");
    s4d_cpuconv_params q = p;
    q.struct_size = 8;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_INVALID_ARG, &err, "struct_size too small");
    q = p;
    q.c = 0;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_INVALID_ARG, &err, "zero channels");
    q = p;
    q.pad_left = -1;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_INVALID_ARG, &err, "negative pad");
    q = p;
    q.group = 3;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_SHAPE, &err, "group not dividing c");
    q = p;
    q.kh = 12;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_SHAPE, &err, "kernel larger than padded input");
    q = p;
    q.act = (s4d_cpuconv_act)99;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_INVALID_ARG, &err, "unknown activation");
    q = p;
    q.act = S4D_CPUCONV_ACT_CLIP;
    q.act_min = 1.0f;
    q.act_max = 0.0f;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_INVALID_ARG, &err, "empty clip range");
    q = p;
    q.kh = q.kw = 5;
    q.algo = S4D_CPUCONV_ALGO_WINOGRAD4;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_UNSUPPORTED, &err, "Winograd on 5x5");
    q = p;
    q.stride_h = 2;
    q.algo = S4D_CPUCONV_ALGO_WINOGRAD2;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_UNSUPPORTED, &err, "Winograd on stride 2");
    q = p;
    q.algo = S4D_CPUCONV_ALGO_DEPTHWISE;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_UNSUPPORTED, &err, "depthwise on group 1");
    q = p;
    q.h = q.w = 1 << 20;
    expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_UNSUPPORTED, &err, "plane past 2^30");
    if (s4d_cpuconv_isa_best() != S4D_CPUCONV_ISA_AVX512) {
        q = p;
        q.isa = S4D_CPUCONV_ISA_AVX512;
        expect_status(s4d_cpuconv_plan_create(&q, &plan, &err), S4D_ERR_UNSUPPORTED, &err, "AVX-512 on a CPU without");
    }

    s4d_cpuconv_plan_destroy(NULL);
    p.algo = S4D_CPUCONV_ALGO_WINOGRAD4;
    if (!expect_status(s4d_cpuconv_plan_create(&p, &plan, &err), S4D_OK, &err, "valid plan"))
        return;
    s4d_cpuconv_info info;
    s4d_cpuconv_plan_info(plan, &info);
    float *w = rand_buf(8 * 4 * 9), *x = rand_buf(4 * 64), *b = rand_buf(8), *r = rand_buf(8 * 64), y[8 * 64];
    char *packed = malloc(info.packed_bytes);
    char *ws = malloc(info.workspace_bytes + 1);
    expect_status(s4d_cpuconv_pack_weights(plan, w, packed, info.packed_bytes - 1, &err), S4D_ERR_INVALID_ARG, &err,
                  "packed buffer too small");
    expect_status(s4d_cpuconv_pack_weights(plan, NULL, packed, info.packed_bytes, &err), S4D_ERR_INVALID_ARG, &err,
                  "NULL weights");
    expect_status(s4d_cpuconv_pack_weights(plan, w, packed, info.packed_bytes, &err), S4D_OK, &err, "pack");
    expect_status(s4d_cpuconv_run(plan, packed, x, NULL, r, y, ws, info.workspace_bytes, NULL, NULL, &err),
                  S4D_ERR_INVALID_ARG, &err, "missing bias");
    expect_status(s4d_cpuconv_run(plan, packed, x, b, NULL, y, ws, info.workspace_bytes, NULL, NULL, &err),
                  S4D_ERR_INVALID_ARG, &err, "missing residual");
    expect_status(s4d_cpuconv_run(plan, packed, x, b, r, y, ws, info.workspace_bytes - 1, NULL, NULL, &err),
                  S4D_ERR_INVALID_ARG, &err, "workspace too small");
    expect_status(s4d_cpuconv_run(plan, packed, NULL, b, r, y, ws, info.workspace_bytes, NULL, NULL, &err),
                  S4D_ERR_INVALID_ARG, &err, "NULL x");
    /* Weights packed for another algorithm. */
    s4d_cpuconv_plan *other = NULL;
    q = p;
    q.algo = S4D_CPUCONV_ALGO_GEMM;
    expect_status(s4d_cpuconv_plan_create(&q, &other, &err), S4D_OK, &err, "gemm plan");
    if (other) {
        s4d_cpuconv_info oi;
        s4d_cpuconv_plan_info(other, &oi);
        char *op = malloc(oi.packed_bytes);
        s4d_cpuconv_pack_weights(other, w, op, oi.packed_bytes, &err);
        expect_status(s4d_cpuconv_run(plan, op, x, b, r, y, ws, info.workspace_bytes, NULL, NULL, &err),
                      S4D_ERR_INVALID_ARG, &err, "weights of another plan");
        free(op);
        s4d_cpuconv_plan_destroy(other);
    }
    /* Unaligned workspace is fine: the run aligns it itself. */
    expect_status(s4d_cpuconv_run(plan, packed, x, b, r, y, ws + 1, info.workspace_bytes, NULL, NULL, &err), S4D_OK,
                  &err, "unaligned workspace");
    free(packed);
    free(ws);
    free(w);
    free(x);
    free(b);
    free(r);
    s4d_cpuconv_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "errors") == 0) {
        check_errors();
        printf("%s\n", failures ? "FAILED" : "ok");
        return failures ? 1 : 0;
    }
    if (argc != 3) {
        fprintf(stderr,
                "usage: %s <gemm|winograd2|winograd4|depthwise|epilogue|threads|smallmap|maxpool|random> <scalar|avx2|avx512>\n"
                        "       %s errors\n", argv[0], argv[0]);
        return 2;
    }
    s4d_cpuconv_isa isa;
    if (strcmp(argv[2], "scalar") == 0)
        isa = S4D_CPUCONV_ISA_SCALAR;
    else if (strcmp(argv[2], "avx2") == 0)
        isa = S4D_CPUCONV_ISA_AVX2;
    else if (strcmp(argv[2], "avx512") == 0)
        isa = S4D_CPUCONV_ISA_AVX512;
    else {
        fprintf(stderr, "unknown instruction set '%s'\n", argv[2]);
        return 2;
    }
    if (isa > s4d_cpuconv_isa_best()) {
        printf("skipped: this CPU lacks %s\n", argv[2]);
        return 77;
    }
    const char *grp = argv[1];
    if (strcmp(grp, "gemm") == 0) {
        for (size_t i = 0; i < COUNT(gemm_cases); i++)
            check_case(&gemm_cases[i], S4D_CPUCONV_ALGO_GEMM, isa, 2e-6);
    } else if (strcmp(grp, "winograd2") == 0 || strcmp(grp, "winograd4") == 0) {
        int four = grp[8] == '4';
        for (size_t i = 0; i < COUNT(wino_cases); i++)
            check_case(&wino_cases[i], four ? S4D_CPUCONV_ALGO_WINOGRAD4 : S4D_CPUCONV_ALGO_WINOGRAD2, isa,
                       four ? 2e-5 : 2e-6);
    } else if (strcmp(grp, "depthwise") == 0) {
        for (size_t i = 0; i < COUNT(dw_cases); i++)
            check_case(&dw_cases[i], S4D_CPUCONV_ALGO_DEPTHWISE, isa, 2e-6);
    } else if (strcmp(grp, "epilogue") == 0) {
        for (size_t i = 0; i < COUNT(epi_cases); i++)
            check_case(&epi_cases[i], S4D_CPUCONV_ALGO_AUTO, isa, 2e-5);
        for (size_t i = 0; i < COUNT(epi_cases); i++)
            if (epi_cases[i].group == 1)
                check_case(&epi_cases[i], S4D_CPUCONV_ALGO_GEMM, isa, 2e-6);
        /* Each activation after the Winograd output transforms too. */
        for (size_t i = 0; i < COUNT(epi_cases); i++)
            if (epi_cases[i].group == 1 && epi_cases[i].kh == 3) {
                check_case(&epi_cases[i], S4D_CPUCONV_ALGO_WINOGRAD2, isa, 2e-6);
                check_case(&epi_cases[i], S4D_CPUCONV_ALGO_WINOGRAD4, isa, 2e-5);
            }
        check_nan(isa);
    } else if (strcmp(grp, "threads") == 0) {
        check_threads(isa);
    } else if (strcmp(grp, "smallmap") == 0) {
        check_small_maps(isa);
        check_small_dw(isa);
    } else if (strcmp(grp, "maxpool") == 0) {
        check_maxpool(isa);
    } else if (strcmp(grp, "random") == 0) {
        check_random(isa);
    } else {
        fprintf(stderr, "unknown case group '%s'\n", grp);
        return 2;
    }
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
