/*
 * Shared pieces of the deformable aggregation tests: a seeded generator of
 * random problems and an independent float64 reference of the op written
 * straight from the formula of docs/ops/deformable_aggregation.md.
 */
#ifndef S4D_DA_TEST_UTIL_H
#define S4D_DA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "da_workload.h"
#include "s4d/deformable_aggregation.h"

static int g_failures = 0;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            g_failures++;                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                             \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
        }                                                                                    \
    } while (0)

/* The exit status of test `which` that returned rc: 77 (skipped) passes through, else 1 on any
   failed CHECK, else 0. */
static inline int test_exit(const char *which, int rc)
{
    if (rc == 77)
        return 77;
    if (g_failures) {
        fprintf(stderr, "%s: %d failure(s)\n", which, g_failures);
        return 1;
    }
    printf("%s: ok\n", which);
    return 0;
}

/* ---------------------------------------------------------------- random */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t rng_next(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline double rng_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next() >> 11) * (1.0 / 9007199254740992.0));
}

static inline int64_t rng_int(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* Non-zero values away from zero so that a missing term always shows. */
static inline float rng_nonzero(void)
{
    double v = rng_uniform(0.1, 1.0);
    return (float)(rng_next() & 1 ? v : -v);
}

/* ---------------------------------------------------------------- fp16 (independent decoder) */

static inline double half_bits_to_double(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(m + 1024), e - 25);
    return s ? -v : v;
}

/* Nearest half by search over the 65536 patterns' ordering (slow but obviously right). */
static inline uint16_t double_to_half_bits(double v)
{
    if (isnan(v))
        return 0x7e00;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    double a = fabs(v);
    if (a >= 65520.0)
        return sign | 0x7c00;
    /* Binary search over the positive finite patterns 0..0x7bff, which are ordered. */
    int lo = 0, hi = 0x7bff;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (half_bits_to_double((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    int best = lo;
    if (lo < 0x7bff) {
        double d0 = a - half_bits_to_double((uint16_t)lo);
        double d1 = half_bits_to_double((uint16_t)(lo + 1)) - a;
        if (d1 < d0 || (d1 == d0 && (lo & 1)))
            best = lo + 1;
    } else if (a > 65504.0) {
        best = 0x7bff; /* between max half and 65520 rounds down */
    }
    return (uint16_t)(sign | best);
}

/* Rounds x[0..n) to half precision in place and stores the half bit patterns in bits. */
static inline void quantise_half(float *x, int64_t n, uint16_t *bits)
{
    for (int64_t i = 0; i < n; i++) {
        bits[i] = double_to_half_bits(x[i]);
        x[i] = (float)half_bits_to_double(bits[i]);
    }
}

/* ---------------------------------------------------------------- problems */

typedef struct problem {
    s4d_da_sizes s;
    int32_t *shape;  /* [N, L, 2] */
    int32_t *start;  /* [N, L] */
    float *feat;     /* [bs, F, C] */
    float *loc;      /* [bs, A, P, N, 2] */
    float *w;        /* [bs, A, P, N, L, G] */
} problem;

static inline int64_t n_feat(const problem *p) { return p->s.batch * p->s.num_rows * p->s.channels; }
static inline int64_t n_out(const problem *p) { return p->s.batch * p->s.num_anchors * p->s.channels; }
static inline int64_t n_pairs(const problem *p)
{
    return p->s.batch * p->s.num_anchors * p->s.num_points * p->s.num_cams;
}
static inline int64_t n_w(const problem *p) { return n_pairs(p) * p->s.num_levels * p->s.num_groups; }

static inline void problem_free(problem *p)
{
    free(p->shape);
    free(p->start);
    free(p->feat);
    free(p->loc);
    free(p->w);
    memset(p, 0, sizeof *p);
}

/* Shapes: each camera gets its own base resolution; levels halve it (at least 1). */
static inline void problem_alloc(problem *p, int64_t bs, int64_t N, int64_t L, int64_t C, int64_t G,
                          int64_t A, int64_t P, int64_t max_h, int64_t max_w)
{
    memset(p, 0, sizeof *p);
    p->s.struct_size = sizeof(s4d_da_sizes);
    p->s.batch = bs;
    p->s.num_cams = N;
    p->s.num_levels = L;
    p->s.channels = C;
    p->s.num_groups = G;
    p->s.num_anchors = A;
    p->s.num_points = P;
    p->shape = (int32_t *)malloc(sizeof(int32_t) * 2 * (size_t)(N * L));
    p->start = (int32_t *)malloc(sizeof(int32_t) * (size_t)(N * L));
    int64_t rows = 0;
    for (int64_t n = 0; n < N; n++) {
        int64_t h = rng_int(1, max_h), w = rng_int(1, max_w);
        for (int64_t l = 0; l < L; l++) {
            p->shape[2 * (n * L + l)] = (int32_t)h;
            p->shape[2 * (n * L + l) + 1] = (int32_t)w;
            p->start[n * L + l] = (int32_t)rows;
            rows += h * w;
            h = h > 1 ? (h + 1) / 2 : 1;
            w = w > 1 ? (w + 1) / 2 : 1;
        }
    }
    p->s.num_rows = rows;
    p->feat = (float *)malloc(sizeof(float) * (size_t)(n_feat(p) > 0 ? n_feat(p) : 1));
    p->loc = (float *)malloc(sizeof(float) * 2 * (size_t)(n_pairs(p) > 0 ? n_pairs(p) : 1));
    p->w = (float *)malloc(sizeof(float) * (size_t)(n_w(p) > 0 ? n_w(p) : 1));
    for (int64_t i = 0; i < n_feat(p); i++)
        p->feat[i] = rng_nonzero();
    for (int64_t i = 0; i < n_w(p); i++)
        p->w[i] = rng_nonzero();
}

/*
 * Locations: about `inside` of the pairs strictly inside (0,1)^2, a share of
 * those within half a pixel of a border, the rest outside (including far
 * outside, as projected points behind a camera land).
 */
static inline void problem_locations(problem *p, double inside)
{
    for (int64_t i = 0; i < n_pairs(p); i++) {
        float *xy = p->loc + 2 * i;
        double r = rng_uniform(0, 1);
        if (r < inside * 0.8) {
            xy[0] = (float)rng_uniform(0.0005, 0.9995);
            xy[1] = (float)rng_uniform(0.0005, 0.9995);
        } else if (r < inside) {
            /* Within 0.02 of a border: the finest map's half pixel at sizes used here. */
            int side = (int)rng_int(0, 3);
            double t = rng_uniform(1e-4, 0.02);
            double u = rng_uniform(0.01, 0.99);
            xy[0] = (float)(side == 0 ? t : side == 1 ? 1 - t : u);
            xy[1] = (float)(side == 2 ? t : side == 3 ? 1 - t : u);
        } else {
            int kind = (int)rng_int(0, 2);
            if (kind == 0) {
                xy[0] = (float)rng_uniform(-0.5, 1.5);
                xy[1] = (float)rng_uniform(1.0001, 2.0);
            } else if (kind == 1) {
                xy[0] = (float)rng_uniform(-1.0, -1e-4);
                xy[1] = (float)rng_uniform(0.1, 0.9);
            } else {
                xy[0] = (float)rng_uniform(-2e5, 2e5);
                xy[1] = (float)rng_uniform(-2e5, 2e5);
            }
        }
    }
}

/* ---------------------------------------------------------------- float64 reference */

/* Bilinear sample of one channel with zero padding, pixel centres at +0.5. */
static inline double ref_bilinear(const double *feat_b, int64_t C, int64_t c, int64_t start, int64_t H,
                           int64_t W, double x, double y)
{
    double hp = y * (double)H - 0.5, wp = x * (double)W - 0.5;
    double fh = floor(hp), fw = floor(wp);
    double ah = hp - fh, aw = wp - fw;
    double v = 0;
    for (int dh = 0; dh < 2; dh++) {
        for (int dw = 0; dw < 2; dw++) {
            int64_t h = (int64_t)fh + dh, w = (int64_t)fw + dw;
            if (h < 0 || w < 0 || h >= H || w >= W)
                continue;
            double k = (dh ? ah : 1 - ah) * (dw ? aw : 1 - aw);
            v += k * feat_b[(start + h * W + w) * C + c];
        }
    }
    return v;
}

/* out[b,a,c] over double inputs; the valid rule rejects NaN because isfinite is checked first. */
static inline void ref_forward(const s4d_da_sizes *s, const int32_t *shape, const int32_t *start,
                        const double *feat, const double *loc, const double *w, double *out)
{
    int64_t C = s->channels, cpg = s->channels / s->num_groups;
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t a = 0; a < s->num_anchors; a++)
            for (int64_t c = 0; c < C; c++) {
                double acc = 0;
                int64_t g = c / cpg;
                for (int64_t p = 0; p < s->num_points; p++)
                    for (int64_t n = 0; n < s->num_cams; n++) {
                        int64_t pair = ((b * s->num_anchors + a) * s->num_points + p) *
                                           s->num_cams + n;
                        double x = loc[2 * pair], y = loc[2 * pair + 1];
                        if (!isfinite(x) || !isfinite(y) || !(x > 0 && x < 1 && y > 0 && y < 1))
                            continue;
                        for (int64_t l = 0; l < s->num_levels; l++) {
                            int64_t m = n * s->num_levels + l;
                            double v = ref_bilinear(feat + b * s->num_rows * C, C, c, start[m],
                                                    shape[2 * m], shape[2 * m + 1], x, y);
                            acc += w[(pair * s->num_levels + l) * s->num_groups + g] * v;
                        }
                    }
                out[(b * s->num_anchors + a) * C + c] = acc;
            }
}

static inline double *to_double(const float *x, int64_t n)
{
    double *d = (double *)malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* ||got - want|| / max(||want||, tiny). */
static inline double rel_l2(const double *want, const double *got, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    if (den < 1e-300)
        return sqrt(num);
    return sqrt(num / den);
}

static inline double rel_l2_f(const double *want, const float *got, int64_t n)
{
    double *g = to_double(got, n);
    double r = rel_l2(want, g, n);
    free(g);
    return r;
}

static inline s4d_da_forward_args fwd_args(const problem *p, void *out)
{
    return da_forward_args_f32(&p->s, p->shape, p->start, p->feat, p->loc, p->w, out);
}

static inline s4d_da_backward_args bwd_args(const problem *p, const float *gout, float *gfeat,
                                     float *gloc, float *gw)
{
    return da_backward_args_f32(&p->s, p->shape, p->start, p->feat, p->loc, p->w, gout, gfeat,
                                gloc, gw);
}

#endif /* S4D_DA_TEST_UTIL_H */
