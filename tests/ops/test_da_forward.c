/*
 * CPU forward of deformable aggregation against the float64 reference.
 * Usage: test_da_forward random|edges|threads|fp16|halfconv
 */
#include "da_test_util.h"

static double run_case(problem *p, int threads, float *out_opt)
{
    int64_t no = n_out(p);
    float *out = out_opt ? out_opt : (float *)malloc(sizeof(float) * (size_t)(no > 0 ? no : 1));
    for (int64_t i = 0; i < no; i++)
        out[i] = NAN; /* the op must overwrite everything */
    s4d_da_forward_args a = fwd_args(p, out);
    s4d_errbuf e = {{0}};
    s4d_status st = s4d_da_forward_cpu(&a, threads, &e);
    CHECK(st == S4D_OK, "forward_cpu failed: %s", e.msg);
    double *fd = to_double(p->feat, n_feat(p)), *ld = to_double(p->loc, 2 * n_pairs(p)),
           *wd = to_double(p->w, n_w(p));
    double *ref = (double *)malloc(sizeof(double) * (size_t)(no > 0 ? no : 1));
    ref_forward(&p->s, p->shape, p->start, fd, ld, wd, ref);
    double err = rel_l2_f(ref, out, no);
    double refnorm = 0;
    for (int64_t i = 0; i < no; i++)
        refnorm += ref[i] * ref[i];
    CHECK(no == 0 || refnorm > 0, "reference output is all zeros: the case tests nothing");
    free(fd);
    free(ld);
    free(wd);
    free(ref);
    if (!out_opt)
        free(out);
    return err;
}

static int test_random(void)
{
    const int64_t groups[] = {1, 4, 8};
    const int64_t chans[] = {32, 64, 96, 128, 256};
    for (int it = 0; it < 24; it++) {
        problem p;
        int64_t G = groups[it % 3];
        int64_t C = chans[rng_int(0, 4)];
        int64_t bs = 1 + it % 3;
        problem_alloc(&p, bs, rng_int(1, 6), rng_int(1, 4), C, G, rng_int(1, 24), rng_int(1, 13),
                      40, 60);
        problem_locations(&p, 0.5);
        double err = run_case(&p, it % 4, NULL);
        CHECK(err <= 5e-6, "case %d (bs %lld N %lld L %lld C %lld G %lld A %lld P %lld): rel L2 %g",
              it, (long long)bs, (long long)p.s.num_cams, (long long)p.s.num_levels,
              (long long)C, (long long)G, (long long)p.s.num_anchors, (long long)p.s.num_points,
              err);
        problem_free(&p);
    }
    return 0;
}

/* Value of the op for one location on a single-camera single-level single-point problem. */
static float one_point(problem *p, float x, float y)
{
    p->loc[0] = x;
    p->loc[1] = y;
    float out[64];
    s4d_da_forward_args a = fwd_args(p, out);
    CHECK(s4d_da_forward_cpu(&a, 1, NULL) == S4D_OK, "forward failed");
    return out[0];
}

static int test_edges(void)
{
    /* A 5x7 map, C = G = 1, weight 1: the op is then the bare bilinear sample. */
    problem p;
    problem_alloc(&p, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    free(p.feat);
    p.shape[0] = 5;
    p.shape[1] = 7;
    p.s.num_rows = 35;
    p.feat = (float *)malloc(sizeof(float) * 35);
    for (int i = 0; i < 35; i++)
        p.feat[i] = 1.0f + (float)i * 0.5f;
    p.w[0] = 1.0f;
    const float H = 5, W = 7;
    /* Exactly on the borders: invalid, zero. */
    const float xs_bad[] = {0.0f, 1.0f, -0.0f, 0.5f, 0.5f, -1e30f, 1e30f, INFINITY, -INFINITY, NAN,
                            0.5f, NAN};
    const float ys_bad[] = {0.5f, 0.5f, 0.5f, 0.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, NAN, NAN};
    for (size_t i = 0; i < sizeof xs_bad / sizeof xs_bad[0]; i++) {
        float v = one_point(&p, xs_bad[i], ys_bad[i]);
        CHECK(v == 0.0f, "location (%g, %g) must be invalid, got %g", xs_bad[i], ys_bad[i], v);
    }
    /* Pixel centres read exactly one pixel. */
    for (int h = 0; h < 5; h++)
        for (int w = 0; w < 7; w++) {
            float v = one_point(&p, ((float)w + 0.5f) / W, ((float)h + 0.5f) / H);
            CHECK(fabsf(v - p.feat[h * 7 + w]) <= 1e-5f * fabsf(p.feat[h * 7 + w]),
                  "pixel centre (%d, %d): got %g want %g", h, w, v, p.feat[h * 7 + w]);
        }
    /* Within half a pixel of each border: the outside corners contribute zero. */
    {
        float x = 0.2f / W, y = 2.5f / H; /* wf = -0.3: only column 0 with weight 0.7 */
        float v = one_point(&p, x, y);
        float want = 0.7f * p.feat[2 * 7 + 0];
        CHECK(fabsf(v - want) <= 1e-5f, "left half pixel: got %g want %g", v, want);
        x = 1.0f - 0.2f / W; /* wf = 6.3 - 0.5 + ... column 6 with weight 0.7 */
        v = one_point(&p, x, y);
        want = 0.7f * p.feat[2 * 7 + 6];
        CHECK(fabsf(v - want) <= 1e-5f, "right half pixel: got %g want %g", v, want);
        x = 3.5f / W;
        y = 0.1f / H; /* hf = -0.4: row 0 with weight 0.6 */
        v = one_point(&p, x, y);
        want = 0.6f * p.feat[0 * 7 + 3];
        CHECK(fabsf(v - want) <= 1e-5f, "top half pixel: got %g want %g", v, want);
        y = 1.0f - 0.1f / H;
        v = one_point(&p, x, y);
        want = 0.6f * p.feat[4 * 7 + 3];
        CHECK(fabsf(v - want) <= 1e-5f, "bottom half pixel: got %g want %g", v, want);
        /* A corner of the image: one pixel, weight 0.7 * 0.6. */
        v = one_point(&p, 0.2f / W, 0.1f / H);
        want = 0.42f * p.feat[0];
        CHECK(fabsf(v - want) <= 1e-5f, "corner: got %g want %g", v, want);
    }
    /* Smallest positive and largest below-one floats are valid. */
    {
        float v = one_point(&p, 1e-30f, 1e-30f);
        CHECK(fabsf(v - 0.25f * p.feat[0]) <= 1e-5f, "tiny location: got %g", v);
        v = one_point(&p, nextafterf(1.0f, 0.0f), nextafterf(1.0f, 0.0f));
        CHECK(fabsf(v - 0.25f * p.feat[34]) <= 1e-5f, "location just below 1: got %g", v);
    }
    problem_free(&p);

    /* NaN in one pair equals that pair having weight zero, on a larger problem. */
    problem q;
    problem_alloc(&q, 2, 3, 2, 16, 4, 5, 4, 9, 11);
    problem_locations(&q, 1.0);
    int64_t no = n_out(&q);
    float *o1 = (float *)malloc(sizeof(float) * (size_t)no), *o2 = (float *)malloc(sizeof(float) * (size_t)no);
    int64_t pair = 7;
    q.loc[2 * pair] = NAN;
    s4d_da_forward_args a = fwd_args(&q, o1);
    CHECK(s4d_da_forward_cpu(&a, 2, NULL) == S4D_OK, "forward failed");
    q.loc[2 * pair] = 0.5f;
    for (int64_t i = 0; i < q.s.num_levels * q.s.num_groups; i++)
        q.w[pair * q.s.num_levels * q.s.num_groups + i] = 0.0f;
    a = fwd_args(&q, o2);
    CHECK(s4d_da_forward_cpu(&a, 2, NULL) == S4D_OK, "forward failed");
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)no) == 0,
          "a NaN location differs from a zero-weight pair");
    double err = run_case(&q, 3, NULL);
    CHECK(err <= 5e-6, "NaN problem vs reference: rel L2 %g", err);
    free(o1);
    free(o2);
    problem_free(&q);

    /* Empty sizes are fine and touch nothing. */
    problem z;
    problem_alloc(&z, 1, 2, 2, 8, 2, 0, 3, 4, 4);
    s4d_da_forward_args za = fwd_args(&z, NULL);
    CHECK(s4d_da_forward_cpu(&za, 0, NULL) == S4D_OK, "A = 0 must succeed");
    problem_free(&z);
    /* P = 0: the output is all zeros. */
    problem_alloc(&z, 1, 2, 2, 8, 2, 3, 0, 4, 4);
    float zo[24];
    for (int i = 0; i < 24; i++)
        zo[i] = 5.0f;
    za = fwd_args(&z, zo);
    CHECK(s4d_da_forward_cpu(&za, 0, NULL) == S4D_OK, "P = 0 must succeed");
    for (int i = 0; i < 24; i++)
        CHECK(zo[i] == 0.0f, "P = 0 output %d is %g, expected 0", i, zo[i]);
    problem_free(&z);
    return 0;
}

static int test_threads(void)
{
    problem p;
    problem_alloc(&p, 2, 6, 4, 64, 8, 37, 13, 32, 48);
    problem_locations(&p, 0.3);
    int64_t no = n_out(&p);
    float *base = (float *)malloc(sizeof(float) * (size_t)no);
    float *o = (float *)malloc(sizeof(float) * (size_t)no);
    double err = run_case(&p, 1, base);
    CHECK(err <= 5e-6, "rel L2 %g", err);
    const int counts[] = {2, 3, 5, 8, 0, 64};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        for (int rep = 0; rep < 2; rep++) {
            s4d_da_forward_args a = fwd_args(&p, o);
            CHECK(s4d_da_forward_cpu(&a, counts[i], NULL) == S4D_OK, "forward failed");
            CHECK(memcmp(o, base, sizeof(float) * (size_t)no) == 0,
                  "%d threads differ bitwise from 1 thread", counts[i]);
        }
    }
    free(base);
    free(o);
    problem_free(&p);
    return 0;
}

static int test_fp16(void)
{
    for (int it = 0; it < 6; it++) {
        problem p;
        problem_alloc(&p, 1 + it % 2, 3, 3, it < 3 ? 64 : 256, it % 2 ? 8 : 4, 20, 7, 24, 40);
        problem_locations(&p, 0.6);
        uint16_t *fh = (uint16_t *)malloc(2 * (size_t)n_feat(&p));
        uint16_t *wh = (uint16_t *)malloc(2 * (size_t)n_w(&p));
        quantise_half(p.feat, n_feat(&p), fh);
        quantise_half(p.w, n_w(&p), wh);
        int64_t no = n_out(&p);
        double *fd = to_double(p.feat, n_feat(&p)), *ld = to_double(p.loc, 2 * n_pairs(&p)),
               *wd = to_double(p.w, n_w(&p));
        double *ref = (double *)malloc(sizeof(double) * (size_t)no);
        ref_forward(&p.s, p.shape, p.start, fd, ld, wd, ref);
        /* All four combinations of input dtypes with float32 output, and float16 output. */
        for (int combo = 0; combo < 5; combo++) {
            int fhalf = combo & 1, whalf = (combo >> 1) & 1, ohalf = combo == 4;
            if (ohalf)
                fhalf = whalf = 1;
            float *of = (float *)malloc(sizeof(float) * (size_t)no);
            uint16_t *oh = (uint16_t *)malloc(2 * (size_t)no);
            s4d_da_forward_args a = fwd_args(&p, ohalf ? (void *)oh : (void *)of);
            if (fhalf) {
                a.features = fh;
                a.features_dtype = S4D_DTYPE_FLOAT16;
            }
            if (whalf) {
                a.weights = wh;
                a.weights_dtype = S4D_DTYPE_FLOAT16;
            }
            if (ohalf)
                a.output_dtype = S4D_DTYPE_FLOAT16;
            s4d_errbuf e = {{0}};
            CHECK(s4d_da_forward_cpu(&a, 0, &e) == S4D_OK, "fp16 forward failed: %s", e.msg);
            double err;
            if (ohalf) {
                double *g = (double *)malloc(sizeof(double) * (size_t)no);
                for (int64_t i = 0; i < no; i++)
                    g[i] = half_bits_to_double(oh[i]);
                err = rel_l2(ref, g, no);
                free(g);
                CHECK(err <= 2e-3, "case %d combo %d (fp16 output): rel L2 %g", it, combo, err);
            } else {
                /* Inputs are exactly representable, accumulation is fp32. */
                err = rel_l2_f(ref, of, no);
                CHECK(err <= 5e-6, "case %d combo %d: rel L2 %g", it, combo, err);
            }
            free(of);
            free(oh);
        }
        free(fd);
        free(ld);
        free(wd);
        free(ref);
        free(fh);
        free(wh);
        problem_free(&p);
    }
    return 0;
}

/* The op's internal half conversion, exercised through float16 output and input. */
static int test_halfconv(void)
{
    /* One camera, one 1x1 map, C = 1: output = w * feat at the pixel centre. */
    problem p;
    problem_alloc(&p, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    p.loc[0] = 0.5f;
    p.loc[1] = 0.5f;
    uint16_t fh, wh = 0x3c00; /* 1.0 */
    int bad = 0;
    for (uint32_t bits = 0; bits < 65536; bits++) {
        fh = (uint16_t)bits;
        double want = half_bits_to_double(fh);
        float out;
        uint16_t outh;
        s4d_da_forward_args a = fwd_args(&p, &out);
        a.features = &fh;
        a.features_dtype = S4D_DTYPE_FLOAT16;
        a.weights = &wh;
        a.weights_dtype = S4D_DTYPE_FLOAT16;
        if (s4d_da_forward_cpu(&a, 1, NULL) != S4D_OK) {
            bad++;
            continue;
        }
        int same = isnan(want) ? isnan(out) : (double)out == want;
        /* 1.0 * v + 0 must be v; inf * 1 is inf. */
        if (!same && bad++ < 5)
            fprintf(stderr, "half 0x%04x decoded as %g, want %g\n", bits, out, want);
        a.output = &outh;
        a.output_dtype = S4D_DTYPE_FLOAT16;
        if (s4d_da_forward_cpu(&a, 1, NULL) != S4D_OK) {
            bad++;
            continue;
        }
        /* -0 accumulates to +0 (0 + -0 = +0); NaN stays NaN. */
        uint16_t expect = (bits == 0x8000) ? 0 : (uint16_t)bits;
        int ok = isnan(want) ? ((outh & 0x7c00) == 0x7c00 && (outh & 0x3ff)) : outh == expect;
        if (!ok && bad++ < 10)
            fprintf(stderr, "half 0x%04x round-tripped to 0x%04x\n", bits, outh);
    }
    CHECK(bad == 0, "%d half conversion mismatches", bad);
    /* Rounding of float -> half on values between halves: weight w, feature 1. */
    fh = 0x3c00;
    const float vals[] = {1.0f + 1.0f / 4096, 1.0f + 3.0f / 4096, 65519.0f, 65520.0f, 1e-8f,
                          3e-8f, 6.1e-5f, -2.5e-7f, 0.1f, 1000.3f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float wv = vals[i];
        uint16_t outh;
        s4d_da_forward_args a = fwd_args(&p, &outh);
        a.features = &fh;
        a.features_dtype = S4D_DTYPE_FLOAT16;
        a.weights = &wv;
        a.output_dtype = S4D_DTYPE_FLOAT16;
        CHECK(s4d_da_forward_cpu(&a, 1, NULL) == S4D_OK, "forward failed");
        uint16_t want = double_to_half_bits(wv);
        CHECK(outh == want, "float %.9g -> half 0x%04x, want 0x%04x", wv, outh, want);
    }
    problem_free(&p);
    return 0;
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "random";
    int rc = 0;
    if (!strcmp(which, "random"))
        rc = test_random();
    else if (!strcmp(which, "edges"))
        rc = test_edges();
    else if (!strcmp(which, "threads"))
        rc = test_threads();
    else if (!strcmp(which, "fp16"))
        rc = test_fp16();
    else if (!strcmp(which, "halfconv"))
        rc = test_halfconv();
    else {
        fprintf(stderr, "unknown test '%s'\n", which);
        return 2;
    }
    return test_exit(which, rc);
}
