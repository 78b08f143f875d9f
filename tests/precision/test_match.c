/*
 * The matched relative L2 of the fp16 accuracy guard (s4d_matched_rel_l2)
 * against a brute-force reference written here in float64: the same
 * closest-pairs-first pairing found by scanning every free pair at every
 * step, and, for few rows, the best of all permutations. Random rows (never
 * all zeros), ties, duplicated rows, blocks before the row axis, the window of
 * ranks on long outputs, and non-finite values: a NaN in the candidate must
 * always come out as an infinite error. Also the comparison of two TopK
 * selections (s4d_selection_compare) against sorting written here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/precision_metric.h"
#include "../engine/check.h"

static uint32_t rng = 88172645u;

static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static double uni(double lo, double hi)
{
    return lo + (hi - lo) * (next() / 4294967296.0);
}

static void shuffle(int *p, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(next() % (uint32_t)(i + 1)), t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* Squared distance in float64 with the guard's rule for non-finite values. */
static double dist(const float *c, const float *r, int d)
{
    double s = 0;
    for (int k = 0; k < d; k++) {
        if (isfinite(c[k]) && isfinite(r[k]))
            s += ((double)c[k] - r[k]) * ((double)c[k] - r[k]);
        else if (!(c[k] == r[k]))
            return INFINITY;
    }
    return s;
}

/* The error of pairing reference row i with candidate row m[i] (one block). */
static double error_of(const float *c, const float *r, int n, int d, const int *m, double *den)
{
    double num = 0;
    for (int i = 0; i < n; i++) {
        double e = dist(c + (size_t)m[i] * d, r + (size_t)i * d, d);
        if (isinf(e))
            return INFINITY;
        num += e;
        for (int k = 0; k < d; k++)
            if (isfinite(r[(size_t)i * d + k]))
                *den += (double)r[(size_t)i * d + k] * r[(size_t)i * d + k];
    }
    return num;
}

/* Closest free pair first (ties: nearer ranks, then the lower reference row, then the
   lower candidate row), by scanning every free pair at each step. */
static void brute_greedy(const float *c, const float *r, int n, int d, int *m)
{
    char *ur = calloc((size_t)n, 1), *uc = calloc((size_t)n, 1);
    for (int step = 0; step < n; step++) {
        int bi = -1, bj = -1;
        double bd = 0;
        for (int i = 0; i < n; i++) {
            if (ur[i])
                continue;
            for (int j = 0; j < n; j++) {
                if (uc[j])
                    continue;
                double e = dist(c + (size_t)j * d, r + (size_t)i * d, d);
                int better = bi < 0 || e < bd;
                if (!better && e == bd) {
                    int da = abs(i - j), db = abs(bi - bj);
                    better = da < db || (da == db && (i < bi || (i == bi && j < bj)));
                }
                if (better) {
                    bi = i;
                    bj = j;
                    bd = e;
                }
            }
        }
        ur[bi] = uc[bj] = 1;
        m[bi] = bj;
    }
    free(ur);
    free(uc);
}

/* The brute-force matched error over `outer` blocks. */
static double brute(const float *c, const float *r, int outer, int n, int d)
{
    int *m = malloc((size_t)n * sizeof *m);
    double num = 0, den = 0;
    for (int b = 0; b < outer; b++) {
        brute_greedy(c + (size_t)b * n * d, r + (size_t)b * n * d, n, d, m);
        num += error_of(c + (size_t)b * n * d, r + (size_t)b * n * d, n, d, m, &den);
    }
    free(m);
    if (isinf(num))
        return INFINITY;
    return den == 0 ? (num == 0 ? 0 : INFINITY) : sqrt(num / den);
}

/* The best of all n! pairings (small n). */
static void best_perm(const float *c, const float *r, int n, int d, int *p, int k, double *best,
                      int *bestp)
{
    if (k == n) {
        double den = 0, e = error_of(c, r, n, d, p, &den);
        if (e < *best) {
            *best = e;
            memcpy(bestp, p, (size_t)n * sizeof *p);
        }
        return;
    }
    for (int i = k; i < n; i++) {
        int t = p[k];
        p[k] = p[i];
        p[i] = t;
        best_perm(c, r, n, d, p, k + 1, best, bestp);
        p[i] = p[k];
        p[k] = t;
    }
}

static void fill(float *a, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (float)uni(lo, hi);
}

/* cand = reference rows in order p (per block), plus relative noise. */
static void permute(const float *r, float *c, int outer, int n, int d, const int *p, double noise)
{
    for (int b = 0; b < outer; b++)
        for (int i = 0; i < n; i++)
            for (int k = 0; k < d; k++) {
                float v = r[((size_t)b * n + p[i]) * d + k];
                c[((size_t)b * n + i) * d + k] = (float)(v * (1 + uni(-noise, noise)));
            }
}

static double matched(const float *c, const float *r, int rank, const int64_t *dims, int axis,
                      int *perm)
{
    double e = -1;
    s4d_status st = s4d_matched_rel_l2(c, r, rank, dims, axis, &e, perm);
    CHECK(st == S4D_OK, "status %d", (int)st);
    return e;
}

static int close_to(double a, double b)
{
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= 1e-9 + 1e-6 * fabs(b);
}

/* Random rows against the brute-force greedy, [outer, n, d] with the rows on axis 1. */
static void random_against_brute(void)
{
    for (int trial = 0; trial < 60; trial++) {
        int outer = 1 + (int)(next() % 3), n = 1 + (int)(next() % 40), d = 1 + (int)(next() % 11);
        size_t total = (size_t)outer * n * d;
        float *r = malloc(total * sizeof *r), *c = malloc(total * sizeof *c);
        fill(r, total, -2, 2);
        if (trial % 3 == 0) {
            fill(c, total, -2, 2); /* unrelated rows */
        } else {
            int *p = malloc((size_t)n * sizeof *p);
            shuffle(p, n);
            permute(r, c, outer, n, d, p, trial % 3 == 1 ? 1e-3 : 0.3);
            free(p);
        }
        int64_t dims[3] = {outer, n, d};
        double got = matched(c, r, 3, dims, 1, NULL), want = brute(c, r, outer, n, d);
        CHECK(close_to(got, want), "trial %d [%d,%d,%d]: %.9g, brute force %.9g", trial, outer,
              n, d, got, want);
        CHECK(got > 0 && isfinite(got), "trial %d: %g", trial, got);
        /* The same rows along axis 0 of a transposed layout: the axis is honoured. */
        if (outer == 1) {
            int64_t dims2[2] = {n, d};
            CHECK(close_to(matched(c, r, 2, dims2, 0, NULL), want), "trial %d axis 0", trial);
        }
        free(r);
        free(c);
    }
}

/* A shuffled copy with small noise: the pairing is the shuffle, and no permutation does
   better. */
static void permutation_is_found(void)
{
    for (int trial = 0; trial < 30; trial++) {
        int n = 2 + (int)(next() % 6), d = 1 + (int)(next() % 5);
        float r[8 * 5], c[8 * 5];
        int p[8], got[8], q[8], bestp[8];
        fill(r, (size_t)n * d, 0.5, 3);
        shuffle(p, n);
        permute(r, c, 1, n, d, p, 1e-4);
        int64_t dims[2] = {n, d};
        double e = matched(c, r, 2, dims, 0, got);
        for (int i = 0; i < n; i++) {
            /* candidate row i holds reference row p[i]: reference row p[i] pairs with i */
            CHECK(got[p[i]] == i, "trial %d: reference row %d paired with %d, not %d", trial, p[i],
                  got[p[i]], i);
            q[i] = i;
        }
        double best = INFINITY, den = 0;
        best_perm(c, r, n, d, q, 0, &best, bestp);
        error_of(c, r, n, d, bestp, &den);
        CHECK(close_to(e, sqrt(best / den)), "trial %d: %g, best permutation %g", trial, e,
              sqrt(best / den));
        CHECK(e > 0 && e < 2e-4, "trial %d: %g", trial, e);
    }
}

/* Duplicated reference rows and exact ties: a permutation of them is no error. */
static void ties(void)
{
    int n = 20, d = 4;
    float r[20 * 4], c[20 * 4];
    int p[20];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < d; k++)
            r[i * d + k] = (float)(1 + (i % 5) + 0.25 * k); /* five distinct rows, four times */
    shuffle(p, n);
    permute(r, c, 1, n, d, p, 0);
    int64_t dims[2] = {n, d};
    CHECK(matched(c, r, 2, dims, 0, NULL) == 0, "a permutation of duplicated rows");
    CHECK(close_to(matched(c, r, 2, dims, 0, NULL), brute(c, r, 1, n, d)), "brute force");
    /* Candidate rows equally far from two reference rows: still one-to-one. */
    float r2[3] = {1, 3, 5}, c2[3] = {2, 2, 5};
    int64_t dims2[1] = {3};
    int m[3];
    double e = matched(c2, r2, 1, dims2, 0, m);
    CHECK(m[0] != m[1] && m[0] != m[2] && m[1] != m[2], "one-to-one: %d %d %d", m[0], m[1], m[2]);
    CHECK(m[0] == 0 && m[1] == 1 && m[2] == 2, "ties go to the nearer rank: %d %d %d", m[0], m[1],
          m[2]);
    CHECK(close_to(e, sqrt(2.0 / 35.0)), "%g", e);
    /* Reference row 2 is as far from candidate rows 0 and 3: the nearer rank wins. */
    float r3[4] = {100, 200, 2, 300}, c3[4] = {1, 200, 100, 3};
    int64_t dims3[1] = {4};
    int m3[4];
    e = matched(c3, r3, 1, dims3, 0, m3);
    CHECK(m3[0] == 2 && m3[1] == 1 && m3[2] == 3 && m3[3] == 0, "%d %d %d %d", m3[0], m3[1], m3[2],
          m3[3]);
    CHECK(close_to(e, sqrt((1.0 + 299.0 * 299.0) / (100.0 * 100 + 200 * 200 + 4 + 300 * 300))),
          "%g", e);
    CHECK(close_to(e, brute(c3, r3, 1, 4, 1)), "brute force");
}

/* NaN or infinity in the candidate: always an infinite error, wherever it is. */
static void nonfinite(void)
{
    int n = 12, d = 3;
    float r[12 * 3], c[12 * 3];
    int p[12];
    int64_t dims[2] = {n, d};
    for (int trial = 0; trial < 24; trial++) {
        fill(r, (size_t)n * d, -1, 1);
        shuffle(p, n);
        permute(r, c, 1, n, d, p, 1e-3);
        int at = (int)(next() % (uint32_t)(n * d));
        c[at] = trial % 2 ? NAN : INFINITY;
        double e = matched(c, r, 2, dims, 0, NULL);
        CHECK(isinf(e) && e > 0, "trial %d: non-finite at %d gave %g", trial, at, e);
        CHECK(isinf(brute(c, r, 1, n, d)), "brute force");
    }
    /* A whole candidate row of NaN among rows that match: still infinite. */
    fill(r, (size_t)n * d, -1, 1);
    shuffle(p, n);
    permute(r, c, 1, n, d, p, 0);
    for (int k = 0; k < d; k++)
        c[5 * d + k] = NAN;
    CHECK(isinf(matched(c, r, 2, dims, 0, NULL)), "a NaN row");
    /* The reference's own infinity met by the same infinity: finite. */
    fill(r, (size_t)n * d, -1, 1);
    r[4 * d + 1] = INFINITY;
    shuffle(p, n);
    permute(r, c, 1, n, d, p, 1e-3);
    double e = matched(c, r, 2, dims, 0, NULL);
    CHECK(isfinite(e) && e > 0 && close_to(e, brute(c, r, 1, n, d)), "%g", e);
}

/* More rows than the window covers: local swaps are found, leftovers still paired. */
static void long_outputs(void)
{
    int n = 3000, d = 5;
    float *r = malloc((size_t)n * d * sizeof *r), *c = malloc((size_t)n * d * sizeof *c);
    int *p = malloc((size_t)n * sizeof *p), *m = malloc((size_t)n * sizeof *m);
    fill(r, (size_t)n * d, -3, 3);
    for (int i = 0; i < n; i++)
        p[i] = i;
    for (int i = 0; i + 1 < n; i += 2 + (int)(next() % 5)) { /* near ties swapped */
        int t = p[i];
        p[i] = p[i + 1];
        p[i + 1] = t;
    }
    permute(r, c, 1, n, d, p, 1e-4);
    int64_t dims[3] = {1, n, d};
    double e = matched(c, r, 3, dims, 1, m);
    int ok = 1;
    for (int i = 0; i < n; i++)
        ok &= m[p[i]] == i;
    CHECK(ok, "every swapped pair found");
    int *inv = malloc((size_t)n * sizeof *inv);
    for (int i = 0; i < n; i++)
        inv[p[i]] = i;
    double den = 0;
    double want = sqrt(error_of(c, r, n, d, inv, &den) / den);
    CHECK(close_to(e, want), "%g, want %g", e, want);
    CHECK(e > 0 && e < 1e-4, "%g", e);
    /* A row moved further than the window: still paired, one-to-one. */
    memcpy(c, r, (size_t)n * d * sizeof *c);
    float row[5];
    memcpy(row, c, sizeof row);
    memmove(c, c + d, (size_t)(n - 1) * d * sizeof *c);
    memcpy(c + (size_t)(n - 1) * d, row, sizeof row);
    e = matched(c, r, 3, dims, 1, m);
    CHECK(e == 0, "a row moved from first to last: %g", e);
    free(inv);
    free(r);
    free(c);
    free(p);
    free(m);
}

static void bad_axis(void)
{
    float a[4] = {1, 2, 3, 4};
    int64_t dims[2] = {2, 2};
    double e;
    CHECK(s4d_matched_rel_l2(a, a, 2, dims, 2, &e, NULL) == S4D_ERR_INVALID_ARG, "axis 2");
    CHECK(s4d_matched_rel_l2(a, a, 2, dims, -1, &e, NULL) == S4D_ERR_INVALID_ARG, "axis -1");
}

/* The top k of slice (b, i) of x [outer, n, inner], best first, ties to the lower index. */
static void topk_slice(const float *x, int n, int inner, int b, int i, int k, int largest,
                       int *idx)
{
    for (int j = 0; j < n; j++)
        idx[j] = j;
    for (int a = 0; a < k; a++)
        for (int j = a + 1; j < n; j++) {
            double u = x[((size_t)b * n + idx[j]) * inner + i];
            double v = x[((size_t)b * n + idx[a]) * inner + i];
            if (!largest) {
                u = -u;
                v = -v;
            }
            if (u > v || (u == v && idx[j] < idx[a])) {
                int t = idx[a];
                idx[a] = idx[j];
                idx[j] = t;
            }
        }
}

/* Random scores, a candidate selection from the scores with noise: the rows it selects
   that the reference does not, the reference's k-th/(k+1)-th gap where they differ, and
   the largest change of the last four sorted values, all found by sorting. */
static void selections_against_sorting(void)
{
    for (int trial = 0; trial < 60; trial++) {
        int outer = 1 + (int)(next() % 3), n = 4 + (int)(next() % 30), inner = 1 + (int)(next() % 3);
        int k = 1 + (int)(next() % (uint32_t)n), largest = (int)(next() % 2);
        double noise = trial % 3 == 0 ? 0 : uni(1e-3, 0.2);
        size_t tot = (size_t)outer * n * inner, sel = (size_t)outer * k * inner;
        float *x = malloc(tot * sizeof *x), *y = malloc(tot * sizeof *y);
        float *ri = malloc(sel * sizeof *ri), *ci = malloc(sel * sizeof *ci);
        float *rv = malloc(sel * sizeof *rv), *cv = malloc(sel * sizeof *cv);
        int *idx = malloc((size_t)n * sizeof *idx);
        fill(x, tot, 0.1, 1.0);
        for (size_t q = 0; q < tot; q++)
            y[q] = (float)(x[q] + uni(-noise, noise));
        long long other = 0;
        double margin = INFINITY, any = INFINITY, err = 0;
        for (int b = 0; b < outer; b++)
            for (int i = 0; i < inner; i++) {
                topk_slice(x, n, inner, b, i, n, largest, idx); /* fully sorted */
                for (int j = 0; j < k; j++) {
                    ri[((size_t)b * k + j) * inner + i] = (float)idx[j];
                    rv[((size_t)b * k + j) * inner + i] = x[((size_t)b * n + idx[j]) * inner + i];
                }
                double gap = k < n ? fabs((double)x[((size_t)b * n + idx[k - 1]) * inner + i] -
                                          (double)x[((size_t)b * n + idx[k]) * inner + i])
                                   : INFINITY;
                topk_slice(y, n, inner, b, i, k, largest, idx);
                int miss = 0;
                for (int j = 0; j < k; j++) {
                    ci[((size_t)b * k + j) * inner + i] = (float)idx[j];
                    cv[((size_t)b * k + j) * inner + i] = y[((size_t)b * n + idx[j]) * inner + i];
                    int found = 0;
                    for (int q = 0; q < k; q++)
                        found |= ri[((size_t)b * k + q) * inner + i] == (float)idx[j];
                    miss += !found;
                }
                other += miss;
                if (miss && gap < margin)
                    margin = gap;
                if (gap < any)
                    any = gap;
                for (int j = k > 4 ? k - 4 : 0; j < k; j++) {
                    size_t at = ((size_t)b * k + j) * inner + i;
                    double dd = fabs((double)cv[at] - (double)rv[at]);
                    if (dd > err)
                        err = dd;
                }
            }
        if (!other)
            margin = any;
        int64_t dims[3] = {outer, n, inner};
        s4d_selection_diff d;
        s4d_status st = s4d_selection_compare(x, 3, dims, 1, k, largest, ri, ci, rv, cv, &d);
        CHECK(st == S4D_OK, "status %d", (int)st);
        CHECK(d.k == k && d.other == other, "trial %d: other %lld, want %lld", trial,
              (long long)d.other, other);
        CHECK(close_to(d.margin, margin), "trial %d: margin %g, want %g", trial, d.margin, margin);
        CHECK(close_to(d.err, err), "trial %d: err %g, want %g", trial, d.err, err);
        if (noise == 0)
            CHECK(d.other == 0 && d.err == 0, "trial %d: same scores, other %lld", trial,
                  (long long)d.other);
        free(x);
        free(y);
        free(ri);
        free(ci);
        free(rv);
        free(cv);
        free(idx);
    }
    float a[4] = {1, 2, 3, 4}, i1[1] = {3};
    int64_t dims[1] = {4};
    s4d_selection_diff d;
    CHECK(s4d_selection_compare(a, 1, dims, 1, 1, 1, i1, i1, NULL, NULL, &d) ==
              S4D_ERR_INVALID_ARG, "axis 1 of a rank-1 selection");
    CHECK(s4d_selection_compare(a, 1, dims, 0, 5, 1, i1, i1, NULL, NULL, &d) ==
              S4D_ERR_INVALID_ARG, "k 5 of 4");
    CHECK(s4d_selection_compare(a, 1, dims, 0, 1, 1, i1, i1, NULL, NULL, &d) == S4D_OK &&
              d.other == 0 && d.margin == 1 && d.kth == 4, "top 1 of 1..4: margin %g kth %g",
          d.margin, d.kth);
}

int main(void)
{
    selections_against_sorting();
    random_against_brute();
    permutation_is_found();
    ties();
    nonfinite();
    long_outputs();
    bad_axis();
    if (g_failures) {
        fprintf(stderr, "%d checks failed\n", g_failures);
        return 1;
    }
    printf("matched rel_l2: all checks passed\n");
    return 0;
}
