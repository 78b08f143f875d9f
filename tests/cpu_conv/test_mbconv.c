/*
 * The inverted residual block of the convolution library (mbconv.h) against
 * float64 loops, and bit for bit against its three layers run one after the
 * other through s4d_cpuconv_* on the same instruction set, on random shapes
 * (channel counts off multiples of 16 and 48, maps down to 1x1, stride 1 and
 * 2, kernels 3, 5, 7, every activation, with and without expand, biases and
 * residual, batch 1 to 2, 1 to 3 threads).
 *
 *   test_mbconv fused|fallback|errors
 *
 * fused: the AVX-512 one-pass plan (exit 77 when the CPU lacks AVX-512);
 * fallback: the plan forced to AVX2 (three convolutions; 77 without AVX2).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv.h"
#include "backend/cpu/conv/mbconv.h"

#define SKIP 77

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static int irand(int lo, int hi) /* [lo, hi] */
{
    return lo + (int)(urand() * (hi - lo + 1));
}
static void fill(float *v, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((urand() * 2.0 - 1.0) * scale);
}

static double act_d(const s4d_mbconv_act *a, double v)
{
    double t;
    switch (a->act) {
    case S4D_CPUCONV_ACT_NONE: return v;
    case S4D_CPUCONV_ACT_RELU: return v > 0 ? v : 0;
    case S4D_CPUCONV_ACT_CLIP: return v < a->act_min ? a->act_min : v > a->act_max ? a->act_max : v;
    case S4D_CPUCONV_ACT_LEAKY_RELU: return v < 0 ? a->act_alpha * v : v;
    case S4D_CPUCONV_ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    case S4D_CPUCONV_ACT_SILU: return v / (1.0 + exp(-v));
    case S4D_CPUCONV_ACT_HARD_SIGMOID:
        t = a->act_alpha * v + a->act_beta;
        return t < 0 ? 0 : t > 1 ? 1 : t;
    case S4D_CPUCONV_ACT_HARD_SWISH:
        t = v / 6.0 + 0.5;
        return v * (t < 0 ? 0 : t > 1 ? 1 : t);
    }
    return v;
}

static s4d_mbconv_act random_act(void)
{
    s4d_mbconv_act a;
    memset(&a, 0, sizeof a);
    a.act = (s4d_cpuconv_act)irand(0, 7);
    a.act_min = 0.0f;
    a.act_max = 6.0f;
    if (a.act == S4D_CPUCONV_ACT_CLIP && irand(0, 1)) {
        a.act_min = -0.5f;
        a.act_max = 0.75f;
    }
    a.act_alpha = a.act == S4D_CPUCONV_ACT_HARD_SIGMOID ? 0.2f : 0.1f;
    a.act_beta = 0.5f;
    return a;
}

typedef struct blk {
    s4d_mbconv_params p;
    int64_t ho, wo;
    float *x, *w1, *b1, *w2, *b2, *w3, *b3, *z;
} blk;

static void conv_params(const s4d_mbconv_params *p, s4d_cpuconv_params *cp, int64_t c, int64_t h, int64_t w,
                        int64_t m, const s4d_mbconv_act *a, int bias)
{
    memset(cp, 0, sizeof *cp);
    cp->struct_size = sizeof *cp;
    cp->n = p->n;
    cp->c = c;
    cp->h = h;
    cp->w = w;
    cp->m = m;
    cp->kh = cp->kw = 1;
    cp->has_bias = bias;
    cp->act = a->act;
    cp->act_min = a->act_min;
    cp->act_max = a->act_max;
    cp->act_alpha = a->act_alpha;
    cp->act_beta = a->act_beta;
    cp->isa = p->isa;
    cp->num_threads = 1;
}

/* One library convolution, planned, packed and run here. */
static int lib_conv(const s4d_cpuconv_params *cp, const float *w, const float *x, const float *b, const float *z,
                    float *y)
{
    s4d_cpuconv_plan *pl = NULL;
    s4d_errbuf err;
    if (s4d_cpuconv_plan_create(cp, &pl, &err) != S4D_OK) {
        printf("FAIL library plan: %s\n", err.msg);
        return 1;
    }
    s4d_cpuconv_info info;
    s4d_cpuconv_plan_info(pl, &info);
    void *pk = malloc(info.packed_bytes), *ws = malloc(info.workspace_bytes + 64);
    int bad = s4d_cpuconv_pack_weights(pl, w, pk, info.packed_bytes, &err) != S4D_OK ||
              s4d_cpuconv_run(pl, pk, x, b, z, y, ws, info.workspace_bytes + 64, NULL, NULL, &err) != S4D_OK;
    if (bad)
        printf("FAIL library run: %s\n", err.msg);
    free(pk);
    free(ws);
    s4d_cpuconv_plan_destroy(pl);
    return bad;
}

/* The three layers through the library, as the engine runs them unfused. */
static int unfused(const blk *b, float *y)
{
    const s4d_mbconv_params *p = &b->p;
    s4d_cpuconv_params cp;
    float *e = malloc(sizeof(float) * (size_t)(p->n * p->mid * p->h * p->w));
    float *d = malloc(sizeof(float) * (size_t)(p->n * p->mid * b->ho * b->wo));
    int bad = 0;
    if (p->has_expand) {
        conv_params(p, &cp, p->c, p->h, p->w, p->mid, &p->act1, p->has_b1);
        bad |= lib_conv(&cp, b->w1, b->x, b->b1, NULL, e);
    }
    conv_params(p, &cp, p->mid, p->h, p->w, p->mid, &p->act2, p->has_b2);
    cp.kh = cp.kw = p->k;
    cp.stride_h = cp.stride_w = p->stride;
    cp.pad_top = p->pad_top;
    cp.pad_left = p->pad_left;
    cp.pad_bottom = p->pad_bottom;
    cp.pad_right = p->pad_right;
    cp.group = p->mid;
    bad |= lib_conv(&cp, b->w2, p->has_expand ? e : b->x, b->b2, NULL, d);
    conv_params(p, &cp, p->mid, b->ho, b->wo, p->m, &p->act3, p->has_b3);
    cp.has_residual = p->has_residual;
    bad |= lib_conv(&cp, b->w3, d, b->b3, b->z, y);
    free(e);
    free(d);
    return bad;
}

/* float64 loops. */
static void reference(const blk *b, double *y)
{
    const s4d_mbconv_params *p = &b->p;
    const int64_t hw = p->h * p->w, ohw = b->ho * b->wo;
    double *e = malloc(sizeof(double) * (size_t)(p->mid * hw)), *d = malloc(sizeof(double) * (size_t)(p->mid * ohw));
    for (int64_t n = 0; n < p->n; n++) {
        const float *x = b->x + n * p->c * hw;
        for (int64_t m = 0; m < p->mid; m++)
            for (int64_t q = 0; q < hw; q++) {
                double s;
                if (p->has_expand) {
                    s = p->has_b1 ? b->b1[m] : 0.0;
                    for (int64_t c = 0; c < p->c; c++)
                        s += (double)b->w1[m * p->c + c] * x[c * hw + q];
                    s = act_d(&p->act1, s);
                } else {
                    s = x[m * hw + q];
                }
                e[m * hw + q] = s;
            }
        for (int64_t m = 0; m < p->mid; m++)
            for (int64_t oy = 0; oy < b->ho; oy++)
                for (int64_t ox = 0; ox < b->wo; ox++) {
                    double s = p->has_b2 ? b->b2[m] : 0.0;
                    for (int64_t ky = 0; ky < p->k; ky++)
                        for (int64_t kx = 0; kx < p->k; kx++) {
                            int64_t iy = oy * p->stride - p->pad_top + ky, ix = ox * p->stride - p->pad_left + kx;
                            if (iy >= 0 && iy < p->h && ix >= 0 && ix < p->w)
                                s += (double)b->w2[(m * p->k + ky) * p->k + kx] * e[m * hw + iy * p->w + ix];
                        }
                    d[m * ohw + oy * b->wo + ox] = act_d(&p->act2, s);
                }
        for (int64_t m = 0; m < p->m; m++)
            for (int64_t q = 0; q < ohw; q++) {
                double s = p->has_b3 ? b->b3[m] : 0.0;
                for (int64_t c = 0; c < p->mid; c++)
                    s += (double)b->w3[m * p->mid + c] * d[c * ohw + q];
                const int64_t at = (n * p->m + m) * ohw + q;
                if (p->has_residual)
                    s += b->z[at];
                y[at] = act_d(&p->act3, s);
            }
    }
    free(e);
    free(d);
}

static int whole_runs; /* runs that took the whole-map mode */

static int run_block(const blk *b, int threads, float *y, int *fused)
{
    s4d_mbconv_params p = b->p;
    p.num_threads = threads;
    s4d_mbconv_plan *pl = NULL;
    s4d_errbuf err;
    if (s4d_mbconv_plan_create(&p, &pl, &err) != S4D_OK) {
        printf("FAIL plan: %s\n", err.msg);
        return 1;
    }
    s4d_mbconv_info info;
    s4d_mbconv_plan_info(pl, &info);
    *fused = info.fused;
    char desc[256];
    s4d_mbconv_plan_describe(pl, desc, sizeof desc);
    whole_runs += strstr(desc, "whole map") != NULL;
    void *pk = malloc(info.packed_bytes), *ws = malloc(info.workspace_bytes);
    int bad = s4d_mbconv_pack_weights(pl, b->w1, b->w2, b->w3, pk, info.packed_bytes, &err) != S4D_OK;
    /* the slots run one after the other here: threads only changes the split */
    if (!bad)
        bad = s4d_mbconv_run(pl, pk, b->x, b->b1, b->b2, b->b3, b->z, y, ws, info.workspace_bytes, NULL, NULL,
                             &err) != S4D_OK;
    if (bad)
        printf("FAIL run: %s\n", err.msg);
    free(pk);
    free(ws);
    s4d_mbconv_plan_destroy(pl);
    return bad;
}

static blk random_block(int iter, s4d_cpuconv_isa isa)
{
    static const int mids[] = {16, 24, 48, 72, 96, 120, 144, 200, 240};
    blk b;
    memset(&b, 0, sizeof b);
    s4d_mbconv_params *p = &b.p;
    p->struct_size = sizeof *p;
    p->isa = isa;
    p->n = irand(1, 2);
    p->c = irand(1, 40);
    p->h = irand(1, 20);
    p->w = irand(1, 24);
    if (iter % 7 == 0) { /* a map wider than a pixel tile row group */
        p->h = irand(20, 40);
        p->w = irand(56, 70);
    }
    p->has_expand = irand(0, 3) != 0;
    p->mid = p->has_expand ? mids[irand(0, 8)] + irand(-3, 3) : p->c;
    p->m = irand(1, 70);
    const int ks[] = {3, 3, 3, 5, 7};
    p->k = ks[irand(0, 4)];
    p->stride = irand(1, 2);
    int64_t *pads[] = {&p->pad_top, &p->pad_left, &p->pad_bottom, &p->pad_right};
    for (int i = 0; i < 4; i++)
        *pads[i] = irand(0, 3) ? (p->k - 1) / 2 : irand(0, (int)p->k - 1);
    if (p->h + p->pad_top + p->pad_bottom < p->k)
        p->pad_bottom = p->k - p->h - p->pad_top;
    if (p->w + p->pad_left + p->pad_right < p->k)
        p->pad_right = p->k - p->w - p->pad_left;
    if (p->pad_bottom >= p->k || p->pad_right >= p->k) { /* a map too small for the kernel: shrink it */
        p->k = 3;
        p->pad_top = p->pad_left = p->pad_bottom = p->pad_right = 1;
    }
    p->has_b1 = irand(0, 4) != 0;
    p->has_b2 = irand(0, 4) != 0;
    p->has_b3 = irand(0, 4) != 0;
    p->act1 = random_act();
    p->act2 = random_act();
    p->act3 = random_act();
    b.ho = (p->h + p->pad_top + p->pad_bottom - p->k) / p->stride + 1;
    b.wo = (p->w + p->pad_left + p->pad_right - p->k) / p->stride + 1;
    p->has_residual = irand(0, 1);
    const size_t nx = (size_t)(p->n * p->c * p->h * p->w), ny = (size_t)(p->n * p->m * b.ho * b.wo);
    b.x = malloc(sizeof(float) * nx);
    fill(b.x, nx, 1.0);
    b.w1 = malloc(sizeof(float) * (size_t)(p->mid * p->c));
    fill(b.w1, (size_t)(p->mid * p->c), 1.0 / sqrt((double)p->c));
    b.b1 = malloc(sizeof(float) * (size_t)p->mid);
    fill(b.b1, (size_t)p->mid, 0.5);
    b.w2 = malloc(sizeof(float) * (size_t)(p->mid * p->k * p->k));
    fill(b.w2, (size_t)(p->mid * p->k * p->k), 1.0 / (double)p->k);
    b.b2 = malloc(sizeof(float) * (size_t)p->mid);
    fill(b.b2, (size_t)p->mid, 0.5);
    b.w3 = malloc(sizeof(float) * (size_t)(p->m * p->mid));
    fill(b.w3, (size_t)(p->m * p->mid), 1.0 / sqrt((double)p->mid));
    b.b3 = malloc(sizeof(float) * (size_t)p->m);
    fill(b.b3, (size_t)p->m, 0.5);
    b.z = malloc(sizeof(float) * ny);
    fill(b.z, ny, 1.0);
    if (!p->has_residual) {
        free(b.z);
        b.z = NULL;
    }
    return b;
}

static void free_block(blk *b)
{
    free(b->x);
    free(b->w1);
    free(b->b1);
    free(b->w2);
    free(b->b2);
    free(b->w3);
    free(b->b3);
    free(b->z);
}

static int random_cases(s4d_cpuconv_isa isa, int want_fused)
{
    int failed = 0, cases = 120;
    for (int it = 0; it < cases; it++) {
        blk b = random_block(it, isa);
        const s4d_mbconv_params *p = &b.p;
        const size_t ny = (size_t)(p->n * p->m * b.ho * b.wo);
        float *y = malloc(sizeof(float) * ny), *u = malloc(sizeof(float) * ny);
        double *r = malloc(sizeof(double) * ny);
        int fused = -1, bad = run_block(&b, 1, y, &fused) | unfused(&b, u);
        reference(&b, r);
        char what[256];
        snprintf(what, sizeof what,
                 "case %d: n %lld c %lld %lldx%lld expand %d mid %lld m %lld k %lld s %lld pads %lld %lld %lld %lld "
                 "acts %d %d %d res %d",
                 it, (long long)p->n, (long long)p->c, (long long)p->h, (long long)p->w, p->has_expand,
                 (long long)p->mid, (long long)p->m, (long long)p->k, (long long)p->stride, (long long)p->pad_top,
                 (long long)p->pad_left, (long long)p->pad_bottom, (long long)p->pad_right, (int)p->act1.act,
                 (int)p->act2.act, (int)p->act3.act, p->has_residual);
        if (!bad && fused != want_fused) {
            printf("FAIL %s: plan fused = %d, expected %d\n", what, fused, want_fused);
            bad = 1;
        }
        double worst = 0.0;
        size_t nonzero = 0;
        for (size_t i = 0; i < ny && !bad; i++) {
            if (memcmp(&y[i], &u[i], sizeof(float)) != 0 && !(isnan(y[i]) && isnan(u[i]))) {
                printf("FAIL %s: element %zu is %.9g, the unfused layers give %.9g\n", what, i, (double)y[i],
                       (double)u[i]);
                bad = 1;
            }
            const double err = fabs((double)y[i] - r[i]) / (1.0 + fabs(r[i]));
            worst = err > worst ? err : worst;
            nonzero += y[i] != 0.0f;
        }
        if (!bad && !(worst <= 2e-5)) {
            printf("FAIL %s: relative error %.3g against float64 (bound 2e-5)\n", what, worst);
            bad = 1;
        }
        for (int t = 2; t <= 3 && !bad; t++) {
            int f2;
            bad = run_block(&b, t, u, &f2);
            if (!bad && memcmp(y, u, sizeof(float) * ny) != 0) {
                printf("FAIL %s: %d slots give other bits than 1\n", what, t);
                bad = 1;
            }
        }
        if (!bad && nonzero == 0 && ny > 8) {
            printf("FAIL %s: every output is zero\n", what);
            bad = 1;
        }
        failed += bad;
        free(y);
        free(u);
        free(r);
        free_block(&b);
    }
    printf("%s: %d of %d random blocks agree (float64 within 2e-5, unfused layers bit for bit, 1 to 3 "
           "slots alike; %d runs in the whole-map mode)\n",
           want_fused ? "fused" : "fallback", cases - failed, cases, whole_runs);
    if (want_fused && whole_runs == 0) {
        printf("FAIL no block took the whole-map mode\n");
        return 1;
    }
    return failed ? 1 : 0;
}

static int expect(s4d_status got, s4d_status want, const char *what, const s4d_errbuf *err)
{
    if (got == want && err->msg[0]) {
        printf("ok   %s: %s\n", what, err->msg);
        return 0;
    }
    printf("FAIL %s: status %d, expected %d (%s)\n", what, (int)got, (int)want, err->msg);
    return 1;
}

/* A plan for p must be refused with status want, a message, and no plan. */
static int refuse(const s4d_mbconv_params *p, s4d_status want, const char *what)
{
    s4d_mbconv_plan *pl = NULL;
    s4d_errbuf err;
    err.msg[0] = 0;
    int bad = expect(s4d_mbconv_plan_create(p, &pl, &err), want, what, &err);
    if (pl) {
        printf("FAIL %s: a refused plan was returned\n", what);
        s4d_mbconv_plan_destroy(pl);
        bad = 1;
    }
    return bad;
}

static int errors(void)
{
    int bad = 0;
    s4d_mbconv_params p0;
    memset(&p0, 0, sizeof p0);
    p0.struct_size = sizeof p0;
    p0.n = 1;
    p0.c = 8;
    p0.h = p0.w = 9;
    p0.has_expand = 1;
    p0.mid = 32;
    p0.m = 8;
    p0.k = 3;
    p0.stride = 1;
    p0.pad_top = p0.pad_left = p0.pad_bottom = p0.pad_right = 1;
    s4d_mbconv_params p = p0;
    p.struct_size = 4;
    bad |= refuse(&p, S4D_ERR_INVALID_ARG, "struct_size");
    p = p0;
    p.k = 9;
    bad |= refuse(&p, S4D_ERR_UNSUPPORTED, "kernel 9");
    p = p0;
    p.stride = 3;
    bad |= refuse(&p, S4D_ERR_UNSUPPORTED, "stride 3");
    p = p0;
    p.pad_left = 3;
    bad |= refuse(&p, S4D_ERR_UNSUPPORTED, "padding 3");
    p = p0;
    p.has_expand = 0;
    bad |= refuse(&p, S4D_ERR_SHAPE, "mid != c without expand");
    p = p0;
    p.m = 0;
    bad |= refuse(&p, S4D_ERR_INVALID_ARG, "m = 0");
    p = p0;
    p.act2.act = S4D_CPUCONV_ACT_CLIP;
    p.act2.act_min = 1.0f;
    p.act2.act_max = 0.0f;
    bad |= refuse(&p, S4D_ERR_INVALID_ARG, "empty clip range");
    s4d_errbuf err;
    /* packed bytes of another plan, a short workspace, a missing bias */
    p = p0;
    p.has_b1 = 1;
    s4d_mbconv_plan *a = NULL, *b = NULL;
    if (s4d_mbconv_plan_create(&p, &a, &err) != S4D_OK)
        return printf("FAIL plan: %s\n", err.msg), 1;
    p.m = 16;
    if (s4d_mbconv_plan_create(&p, &b, &err) != S4D_OK)
        return printf("FAIL plan: %s\n", err.msg), 1;
    s4d_mbconv_info ia, ib;
    s4d_mbconv_plan_info(a, &ia);
    s4d_mbconv_plan_info(b, &ib);
    float w1[32 * 8], w2[32 * 9], w3[16 * 32], x[8 * 81], y[16 * 81], b1[32];
    fill(w1, 32 * 8, 0.3);
    fill(w2, 32 * 9, 0.3);
    fill(w3, 16 * 32, 0.3);
    fill(x, 8 * 81, 1.0);
    fill(b1, 32, 0.3);
    void *pb = malloc(ib.packed_bytes), *ws = malloc(ia.workspace_bytes + ib.workspace_bytes);
    err.msg[0] = 0;
    bad |= expect(s4d_mbconv_pack_weights(a, w1, w2, w3, pb, ia.packed_bytes - 1, &err), S4D_ERR_INVALID_ARG,
                  "pack into too few bytes", &err);
    if (s4d_mbconv_pack_weights(b, w1, w2, w3, pb, ib.packed_bytes, &err) != S4D_OK)
        return printf("FAIL pack: %s\n", err.msg), 1;
    err.msg[0] = 0;
    bad |= expect(s4d_mbconv_run(a, pb, x, b1, NULL, NULL, NULL, y, ws, ia.workspace_bytes, NULL, NULL, &err),
                  S4D_ERR_INVALID_ARG, "packed weights of another plan", &err);
    err.msg[0] = 0;
    bad |= expect(s4d_mbconv_run(b, pb, x, b1, NULL, NULL, NULL, y, ws, ib.workspace_bytes - 1, NULL, NULL, &err),
                  S4D_ERR_INVALID_ARG, "short workspace", &err);
    err.msg[0] = 0;
    bad |= expect(s4d_mbconv_run(b, pb, x, NULL, NULL, NULL, NULL, y, ws, ib.workspace_bytes, NULL, NULL, &err),
                  S4D_ERR_INVALID_ARG, "missing bias", &err);
    free(pb);
    free(ws);
    s4d_mbconv_plan_destroy(a);
    s4d_mbconv_plan_destroy(b);
    s4d_mbconv_plan_destroy(NULL);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_mbconv fused|fallback|errors\n");
        return 2;
    }
    const s4d_cpuconv_isa best = s4d_cpuconv_isa_best();
    if (strcmp(argv[1], "fused") == 0) {
        if (best != S4D_CPUCONV_ISA_AVX512) {
            printf("this CPU has no AVX-512F: the fused pass does not run here\n");
            return SKIP;
        }
        return random_cases(S4D_CPUCONV_ISA_AVX512, 1);
    }
    if (strcmp(argv[1], "fallback") == 0) {
        if (best == S4D_CPUCONV_ISA_SCALAR) {
            printf("this CPU has no AVX2: the scalar set is slow for these shapes\n");
            return SKIP;
        }
        return random_cases(S4D_CPUCONV_ISA_AVX2, 0);
    }
    if (strcmp(argv[1], "errors") == 0)
        return errors();
    fprintf(stderr, "unknown mode '%s'\n", argv[1]);
    return 2;
}
