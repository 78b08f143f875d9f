/*
 * The demo's C decoder and agreement checks against an independent float64
 * reference on random non-zero head outputs, plus their error cases.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "decode.h"

static int failures;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                      \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double uniform(double lo, double hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static double sig(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/*
 * The decoder rule written the slow way: repeated selection of the best
 * remaining instance, in float64.
 */
static void reference_decode(const demo_head_raw *raw, const int64_t *ids, int cand, int k,
                             demo_box *out)
{
    int64_t a = raw->num_instances, nc = raw->num_classes;
    char *taken = calloc((size_t)a, 1);
    int64_t *pick = malloc((size_t)cand * sizeof *pick);
    double *score = malloc((size_t)cand * sizeof *score);
    for (int j = 0; j < cand; j++) {
        int64_t best = -1;
        double bv = -1;
        for (int64_t i = 0; i < a; i++) {
            double m = -INFINITY;
            for (int64_t c = 0; c < nc; c++)
                m = fmax(m, raw->classification[i * nc + c]);
            if (!taken[i] && sig(m) > bv) {
                bv = sig(m);
                best = i;
            }
        }
        taken[best] = 1;
        pick[j] = best;
        score[j] = bv * sig(raw->quality[best * 2]);
    }
    memset(taken, 0, (size_t)a);
    for (int j = 0; j < k; j++) {
        int bj = -1;
        for (int q = 0; q < cand; q++)
            if (!taken[q] && (bj < 0 || score[q] > score[bj]))
                bj = q;
        taken[bj] = 1;
        int64_t i = pick[bj];
        const float *p = raw->prediction + i * 11;
        int cls = 0;
        for (int c = 1; c < nc; c++)
            if (raw->classification[i * nc + c] > raw->classification[i * nc + cls])
                cls = c;
        out[j] = (demo_box){p[0], p[1], p[2], (float)exp(p[3]), (float)exp(p[4]),
                            (float)exp(p[5]), (float)atan2(p[6], p[7]), p[8], p[9],
                            (float)score[bj], cls, ids ? ids[i] : -1};
    }
    free(taken);
    free(pick);
    free(score);
}

static void random_raw(demo_head_raw *raw, float *cls, float *pred, float *qual, int64_t a,
                       int64_t nc)
{
    for (int64_t i = 0; i < a * nc; i++)
        cls[i] = (float)uniform(-4, 2);
    for (int64_t i = 0; i < a * 11; i++)
        pred[i] = (float)uniform(-50, 50);
    for (int64_t i = 0; i < a; i++) {
        for (int d = 3; d < 6; d++)
            pred[i * 11 + d] = (float)uniform(-0.5, 2.5);
        qual[2 * i] = (float)uniform(-3, 3);
        qual[2 * i + 1] = (float)uniform(-3, 3);
    }
    *raw = (demo_head_raw){a, nc, cls, pred, qual};
}

static void test_decode_matches_reference(void)
{
    enum { A = 300, NC = 10, CAND = 200, K = 100 };
    static float cls[A * NC], pred[A * 11], qual[A * 2];
    static demo_box got[K], want[K];
    static int64_t ids[A];
    demo_head_raw raw;
    for (int rep = 0; rep < 5; rep++) {
        random_raw(&raw, cls, pred, qual, A, NC);
        for (int i = 0; i < A; i++)
            ids[i] = 1000 + i;
        char err[256];
        int n = demo_decode(&raw, ids, CAND, K, got, err, sizeof err);
        CHECK(n == K, "decode returned %d: %s", n, err);
        reference_decode(&raw, ids, CAND, K, want);
        demo_box_tol tol = {.metres = 1e-4, .radians = 1e-5, .velocity = 1e-4, .score = 1e-6};
        demo_box_report r;
        int rc = demo_compare_boxes(got, want, K, K, &tol, &r);
        CHECK(rc == 0, "decoder differs from the float64 reference: %s", r.first_problem);
        CHECK(r.compared == K && r.tie_groups == 0, "compared %d, ties %d", r.compared,
              r.tie_groups);
    }
}

static void test_track_ids(void)
{
    enum { A = 8, NC = 3 };
    float cls[A * NC], pred[A * 11], qual[A * 2];
    demo_head_raw raw;
    random_raw(&raw, cls, pred, qual, A, NC);
    /* every instance confident except 5, whose best logit is far below a 0.1 threshold */
    for (int i = 0; i < A; i++)
        cls[i * NC + 1] = i == 5 ? -10.0f : 1.0f;
    for (int c = 0; c < NC; c++)
        cls[5 * NC + c] = -10;
    int64_t cached[3] = {7, -1, 2};
    int64_t ids[A];
    char err[256];
    demo_track_in with = {1, 3, cached, 40, 0.1f};
    CHECK(demo_track_ids(&raw, &with, ids, err, sizeof err) == 0, "%s", err);
    int64_t expect[A] = {7, 40, 2, 41, 42, -1, 43, 44};
    for (int i = 0; i < A; i++)
        CHECK(ids[i] == expect[i], "history: instance %d id %lld, want %lld", i,
              (long long)ids[i], (long long)expect[i]);
    demo_track_in without = {0, 3, cached, 40, 0.1f};
    CHECK(demo_track_ids(&raw, &without, ids, err, sizeof err) == 0, "%s", err);
    int64_t fresh[A] = {40, 41, 42, 43, 44, -1, 45, 46};
    for (int i = 0; i < A; i++)
        CHECK(ids[i] == fresh[i], "no history: instance %d id %lld, want %lld", i,
              (long long)ids[i], (long long)fresh[i]);
}

static void test_compare_ties_and_mismatches(void)
{
    enum { N = 6 };
    demo_box want[N], got[N];
    for (int i = 0; i < N; i++)
        want[i] = (demo_box){(float)i, 2.0f * i, -1, 2, 4, 1.5f, 0.1f * i, 1, 0,
                             0.9f - 0.1f * i, i % 3, i};
    /* ranks 2 and 3 tie within 1e-5 */
    want[3].score = want[2].score - 5e-6f;
    demo_box_tol tol = {.metres = 1e-3, .relative = 1e-4, .radians = 1e-3, .velocity = 1e-3,
                        .score = 1e-4, .tie = 1e-5};
    demo_box_report r;
    memcpy(got, want, sizeof got);
    got[2] = want[3];
    got[3] = want[2];
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 0, "swapped tie rejected: %s",
          r.first_problem);
    CHECK(r.tie_groups == 1 && r.tied_boxes == 2, "ties %d/%d", r.tie_groups, r.tied_boxes);

    memcpy(got, want, sizeof got);
    got[1] = want[4];
    got[4] = want[1];
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 1 && r.mismatched == 2,
          "swapped distinct scores accepted (%d mismatched)", r.mismatched);

    memcpy(got, want, sizeof got);
    got[0].track_id = 99;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 1, "track id change accepted");
    memcpy(got, want, sizeof got);
    got[5].cls = 7;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 1, "class change accepted");
    memcpy(got, want, sizeof got);
    got[1].x += 2e-3f;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 1, "2 mm offset accepted");
    memcpy(got, want, sizeof got);
    got[1].x += 5e-4f;
    got[2].yaw += 5e-4f;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 0, "0.5 mm offset rejected");
    /* sizes may differ relatively (1e-4 of 300 m = 3 cm), centres may not */
    want[1].l = 300.0f;
    want[1].x = 300.0f;
    memcpy(got, want, sizeof got);
    got[1].l += 0.02f;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 0, "2 cm on a 300 m size rejected: %s",
          r.first_problem);
    got[1].l += 0.02f;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 1, "4 cm on a 300 m size accepted");
    memcpy(got, want, sizeof got);
    got[1].x += 0.002f;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 1 && strstr(r.first_problem, "x = "),
          "2 mm on a centre 300 m away accepted or not named: '%s'", r.first_problem);
    memcpy(got, want, sizeof got);
    got[2].yaw = want[2].yaw + 2 * 3.14159265358979f; /* the same heading */
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 0, "yaw + 2 pi rejected: %s",
          r.first_problem);
    /* a tie across the compared range: ranks 3 and 4 tie, only 4 compared;
     * the engine lists them the other way round */
    memcpy(got, want, sizeof got);
    want[4].score = want[3].score - 5e-6f;
    got[3] = want[4];
    got[4] = want[3];
    CHECK(demo_compare_boxes(got, want, 4, 6, &tol, &r) == 0 && r.tied_boxes == 2,
          "tie across the cut rejected: %s (tied %d)", r.first_problem, r.tied_boxes);
    CHECK(demo_compare_boxes(got, want, 4, 4, &tol, &r) == 1,
          "tie across the cut accepted without the boxes beyond it");
    memcpy(got, want, sizeof got);
    got[4].l = NAN;
    CHECK(demo_compare_boxes(got, want, N, N, &tol, &r) == 1, "NaN size accepted");
}

static void test_diff_arrays(void)
{
    float a[4] = {1, -2, 3, 4}, b[4] = {1, -2, 3, 4.5f};
    demo_diff d;
    char err[128];
    CHECK(demo_diff_arrays(S4D_DTYPE_FLOAT32, a, b, 4, &d, err, sizeof err) == 0, "%s", err);
    double want = 0.5 / sqrt(1 + 4 + 9 + 20.25);
    CHECK(fabs(d.rel_l2 - want) < 1e-12 && fabs(d.max_abs - 0.5) < 1e-12, "rel %g max %g",
          d.rel_l2, d.max_abs);
    int64_t ia[3] = {5, -1, 7}, ib[3] = {5, -1, 7};
    CHECK(demo_diff_arrays(S4D_DTYPE_INT64, ia, ib, 3, &d, err, sizeof err) == 0 &&
              d.rel_l2 == 0 && d.max_abs == 0, "equal int64 differ");
    a[2] = NAN;
    CHECK(demo_diff_arrays(S4D_DTYPE_FLOAT32, a, b, 4, &d, err, sizeof err) == 0 &&
              d.nonfinite == 1 && !(d.rel_l2 <= 1e-4), "NaN not flagged");
    CHECK(demo_diff_arrays(S4D_DTYPE_STRING, a, b, 4, &d, err, sizeof err) == -1 &&
              strstr(err, "string") != NULL, "string compare accepted: '%s'", err);
}

static void test_align_rows(void)
{
    int64_t want[6] = {10, 11, 12, -1, 14, 15};
    int64_t got[6] = {10, 12, 11, 15, -1, 99};
    int64_t perm[6];
    int64_t moved = demo_align_rows(got, want, 6, perm);
    /* 11 and 12 swap, 15 is found at row 3, the rows without a partner
     * (-1 and 14) take the unused rows 4 and 5 in order */
    int64_t expect[6] = {0, 2, 1, 4, 5, 3};
    for (int i = 0; i < 6; i++)
        CHECK(perm[i] == expect[i], "row %d -> %lld, want %lld", i, (long long)perm[i],
              (long long)expect[i]);
    CHECK(moved == 5, "moved %lld, want 5", (long long)moved);
    int64_t same[3] = {4, 5, 6};
    CHECK(demo_align_rows(same, same, 3, perm) == 0 && perm[2] == 2, "identity moved rows");
}

static void test_bad_inputs(void)
{
    float cls[4 * 2], pred[4 * 11], qual[4 * 2];
    demo_head_raw raw;
    random_raw(&raw, cls, pred, qual, 4, 2);
    demo_box out[4];
    char err[256] = "";
    CHECK(demo_decode(&raw, NULL, 2, 3, out, err, sizeof err) == -1 && strstr(err, "k (3)"),
          "k > candidates: '%s'", err);
    CHECK(demo_decode(&raw, NULL, 5, 2, out, err, sizeof err) == -1, "candidates > A accepted");
    CHECK(demo_decode(&raw, NULL, 4, 0, out, err, sizeof err) == -1, "k = 0 accepted");
    demo_head_raw missing = raw;
    missing.quality = NULL;
    err[0] = 0;
    CHECK(demo_decode(&missing, NULL, 4, 2, out, err, sizeof err) == -1 &&
              strstr(err, "missing"), "missing output: '%s'", err);
    int64_t ids[4];
    demo_track_in bad = {1, 5, NULL, 0, 0};
    CHECK(demo_track_ids(&raw, &bad, ids, err, sizeof err) == -1 && strstr(err, "5 cached"),
          "more cached than instances: '%s'", err);
    CHECK(demo_decode(&raw, NULL, 4, 4, out, err, sizeof err) == 4 && out[0].track_id == -1,
          "decode without ids");
}

/*
 * The fp16 agreement: reference boxes matched by class, track id and centre
 * distance, rank ignored. The independent reference below relies on unique
 * track ids (then a reference box has at most one candidate partner) and
 * measures the distance in float64 from the coordinates.
 */
static void test_match_boxes(void)
{
    enum { N = 100 };
    demo_box want[N], got[N];
    char problem[256];
    for (int trial = 0; trial < 50; trial++) {
        for (int i = 0; i < N; i++) {
            want[i] = (demo_box){(float)uniform(-50, 50), (float)uniform(-50, 50),
                                 (float)uniform(-2, 2), 2, 4, 1.5f, 0.3f, 0, 0,
                                 (float)(1.0 - i * 0.005), (int)uniform(0, 10), 1000 + i};
            got[i] = want[i];
        }
        /* shuffle the engine's order: ranks must not matter */
        for (int i = N - 1; i > 0; i--) {
            int j = (int)uniform(0, i + 1);
            demo_box t = got[i];
            got[i] = got[j];
            got[j] = t;
        }
        for (int i = 0; i < N; i++) {
            double u = uniform(0, 1);
            if (u < 0.1) {
                double a = uniform(0, 6.283), r = uniform(0.02, 0.25);
                got[i].x += (float)(r * cos(a));
                got[i].y += (float)(r * sin(a));
            } else if (u < 0.13) {
                got[i].cls = (got[i].cls + 1) % 10;
            } else if (u < 0.16) {
                got[i].track_id += 5000;
            } else if (u < 0.17) {
                got[i].z = NAN;
            }
        }
        int expect = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++)
                if (got[j].track_id == want[i].track_id) {
                    double dx = (double)got[j].x - want[i].x, dy = (double)got[j].y - want[i].y,
                           dz = (double)got[j].z - want[i].z;
                    expect += got[j].cls == want[i].cls && dx * dx + dy * dy + dz * dz <= 0.01;
                }
        int m = demo_match_boxes(got, N, want, N, 0.1, problem, sizeof problem);
        CHECK(m == expect, "trial %d: matched %d, reference %d", trial, m, expect);
        CHECK(m == N || strstr(problem, "reference box at rank"), "problem text '%s'", problem);
    }
    /* fewer engine boxes: the missing ones have no partner */
    for (int i = 0; i < N; i++)
        got[i] = want[i];
    CHECK(demo_match_boxes(got, 90, want, N, 0.1, problem, sizeof problem) == 90 &&
              strstr(problem, "no engine box"),
          "a box outside the engine's top 90 matched: '%s'", problem);
    /* one engine box cannot serve two reference boxes of the same id */
    want[1] = want[0];
    CHECK(demo_match_boxes(got, N, want, 2, 0.1, NULL, 0) == 1, "an engine box used twice");
    CHECK(demo_match_boxes(got, 0, want, N, 0.1, problem, sizeof problem) == 0, "empty input");
}

/*
 * Track ids through the sequence's id map: the engine's ids are another
 * labelling of the same tracks (a bijection drawn here), so every box
 * matches; the map then holds the labelling, and a later frame in which two
 * engine tracks swap labels (an id switch) loses exactly those two boxes.
 */
static void test_match_boxes_mapped(void)
{
    enum { N = 100 };
    demo_box want[N], got[N];
    int64_t label[N];
    for (int i = 0; i < N; i++)
        label[i] = 5000 + 7 * i;
    for (int i = N - 1; i > 0; i--) { /* the engine's labels: a random bijection */
        int j = (int)uniform(0, i + 1);
        int64_t t = label[i];
        label[i] = label[j];
        label[j] = t;
    }
    demo_id_map map = {0};
    for (int frame = 0; frame < 3; frame++) {
        int expect = N;
        for (int i = 0; i < N; i++) {
            want[i] = (demo_box){(float)uniform(-50, 50), (float)uniform(-50, 50),
                                 (float)uniform(-2, 2), 2, 4, 1.5f, 0.3f, 0, 0,
                                 (float)(1.0 - i * 0.005), (int)uniform(0, 10), 1000 + i};
            got[N - 1 - i] = want[i]; /* reversed: ranks must not matter */
            got[N - 1 - i].track_id = label[i];
            got[N - 1 - i].x += 0.05f;
        }
        if (frame == 1) { /* boxes 3 and 4 of the engine far off, 5 of another class */
            got[N - 1 - 3].x += 1.0f;
            got[N - 1 - 4].z = NAN;
            got[N - 1 - 5].cls = (want[5].cls + 1) % 10;
            expect = N - 3;
        }
        if (frame == 2) { /* an id switch between the tracks of rows 10 and 20 */
            got[N - 1 - 10].track_id = label[20];
            got[N - 1 - 20].track_id = label[10];
            expect = N - 2;
        }
        int m = demo_match_boxes_mapped(got, N, want, N, 0.1, &map);
        CHECK(m == expect, "frame %d: matched %d, expected %d", frame, m, expect);
        CHECK(map.n == N, "frame %d: %d ids paired, expected %d", frame, map.n, N);
        /* the literal comparison matches nothing: every label differs */
        CHECK(demo_match_boxes(got, N, want, N, 0.1, NULL, 0) == 0, "literal ids matched");
    }
    /* a paired engine id never pairs with a new reference id, nor a paired reference id
     * with a new engine id */
    demo_box w1 = want[0], g1 = want[0];
    w1.track_id = 99999;
    g1.track_id = label[0];
    CHECK(demo_match_boxes_mapped(&g1, 1, &w1, 1, 0.1, &map) == 0, "paired engine id re-paired");
    w1.track_id = 1000;
    g1.track_id = 77777;
    CHECK(demo_match_boxes_mapped(&g1, 1, &w1, 1, 0.1, &map) == 0, "paired reference id re-paired");
    /* untracked boxes (id -1) agree only with untracked boxes and are never paired */
    int paired = map.n;
    w1.track_id = -1;
    g1.track_id = -1;
    CHECK(demo_match_boxes_mapped(&g1, 1, &w1, 1, 0.1, &map) == 1 && map.n == paired,
          "untracked boxes: not matched or paired");
    g1.track_id = 88888;
    CHECK(demo_match_boxes_mapped(&g1, 1, &w1, 1, 0.1, &map) == 0, "untracked matched a track");
    CHECK(demo_match_boxes_mapped(&g1, 0, &w1, 1, 0.1, &map) == 0, "empty input");
    demo_id_map_free(&map);
    CHECK(map.n == 0 && !map.got, "map not cleared");
}

int main(void)
{
    test_match_boxes();
    test_match_boxes_mapped();
    test_decode_matches_reference();
    test_track_ids();
    test_compare_ties_and_mismatches();
    test_diff_arrays();
    test_align_rows();
    test_bad_inputs();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("demo decode: all checks passed\n");
    return 0;
}
