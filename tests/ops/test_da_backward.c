/*
 * CPU backward of deformable aggregation against central finite differences
 * of the float64 reference, with locations kept away from grid lines (where
 * the bilinear blend has kinks).
 * Usage: test_da_backward fd|threads|invalid|fp16|partial
 */
#include "da_test_util.h"

/* Loss = sum(out * gout) of the float64 reference. */
static double ref_loss(const problem *p, const double *feat, const double *loc, const double *w,
                       const double *gout, double *out)
{
    ref_forward(&p->s, p->shape, p->start, feat, loc, w, out);
    double s = 0;
    for (int64_t i = 0; i < n_out(p); i++)
        s += out[i] * gout[i];
    return s;
}

/* Keeps x*size - 0.5 at least `margin` from an integer for every map of the camera. */
static int off_grid(const problem *p, int64_t n, double x, double y, double margin)
{
    for (int64_t l = 0; l < p->s.num_levels; l++) {
        int64_t m = n * p->s.num_levels + l;
        double h = y * p->shape[2 * m] - 0.5, w = x * p->shape[2 * m + 1] - 0.5;
        if (fabs(h - floor(h + 0.5)) < margin || fabs(w - floor(w + 0.5)) < margin)
            return 0;
    }
    return 1;
}

static void fd_locations(problem *p, double inside)
{
    for (int64_t i = 0; i < n_pairs(p); i++) {
        int64_t n = i % p->s.num_cams;
        float *xy = p->loc + 2 * i;
        if (rng_uniform(0, 1) < inside) {
            do {
                xy[0] = (float)rng_uniform(0.001, 0.999);
                xy[1] = (float)rng_uniform(0.001, 0.999);
            } while (!off_grid(p, n, xy[0], xy[1], 0.01));
        } else {
            xy[0] = (float)rng_uniform(-1.0, -0.01);
            xy[1] = (float)rng_uniform(0.0, 1.0);
        }
    }
}

typedef struct grads {
    float *feat, *loc, *w;
} grads;

static void run_backward(const problem *p, const float *gout, grads *g, int threads)
{
    s4d_da_backward_args a = bwd_args(p, gout, g->feat, g->loc, g->w);
    s4d_errbuf e = {{0}};
    s4d_status st = s4d_da_backward_cpu(&a, threads, &e);
    CHECK(st == S4D_OK, "backward_cpu failed: %s", e.msg);
}

static void grads_alloc(const problem *p, grads *g)
{
    g->feat = (float *)malloc(sizeof(float) * (size_t)n_feat(p));
    g->loc = (float *)malloc(sizeof(float) * 2 * (size_t)n_pairs(p));
    g->w = (float *)malloc(sizeof(float) * (size_t)n_w(p));
    /* Garbage first: the op must overwrite every element. */
    for (int64_t i = 0; i < n_feat(p); i++)
        g->feat[i] = 1e9f;
    for (int64_t i = 0; i < 2 * n_pairs(p); i++)
        g->loc[i] = 1e9f;
    for (int64_t i = 0; i < n_w(p); i++)
        g->w[i] = 1e9f;
}

static void grads_free(grads *g)
{
    free(g->feat);
    free(g->loc);
    free(g->w);
}

/* Central differences of the loss w.r.t. every element of x (n of them), step h. */
static void fd_grad(const problem *p, double *feat, double *loc, double *w, const double *gout,
                    double *x, int64_t n, double h, double *out_grad)
{
    double *tmp = (double *)malloc(sizeof(double) * (size_t)n_out(p));
    for (int64_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = ref_loss(p, feat, loc, w, gout, tmp);
        x[i] = keep - h;
        double lm = ref_loss(p, feat, loc, w, gout, tmp);
        x[i] = keep;
        out_grad[i] = (lp - lm) / (2 * h);
    }
    free(tmp);
}

static int test_fd(void)
{
    for (int it = 0; it < 6; it++) {
        problem p;
        int64_t G = it % 3 == 0 ? 1 : it % 3 == 1 ? 2 : 4;
        problem_alloc(&p, 1 + it % 2, 1 + it % 3, 1 + it % 2, 8, G, 3, 3, 9, 13);
        fd_locations(&p, 0.8);
        float *gout = (float *)malloc(sizeof(float) * (size_t)n_out(&p));
        for (int64_t i = 0; i < n_out(&p); i++)
            gout[i] = rng_nonzero();
        grads g;
        grads_alloc(&p, &g);
        run_backward(&p, gout, &g, it % 3);
        double *fd = to_double(p.feat, n_feat(&p)), *ld = to_double(p.loc, 2 * n_pairs(&p)),
               *wd = to_double(p.w, n_w(&p)), *god = to_double(gout, n_out(&p));
        double *num_f = (double *)malloc(sizeof(double) * (size_t)n_feat(&p));
        double *num_l = (double *)malloc(sizeof(double) * 2 * (size_t)n_pairs(&p));
        double *num_w = (double *)malloc(sizeof(double) * (size_t)n_w(&p));
        /* The loss is linear in features and weights, so any step is exact up to rounding. */
        fd_grad(&p, fd, ld, wd, god, fd, n_feat(&p), 1e-3, num_f);
        fd_grad(&p, fd, ld, wd, god, wd, n_w(&p), 1e-3, num_w);
        /* Piecewise linear in the location; the step stays inside one cell (margin 0.01 px). */
        fd_grad(&p, fd, ld, wd, god, ld, 2 * n_pairs(&p), 1e-6, num_l);
        double ef = rel_l2_f(num_f, g.feat, n_feat(&p));
        double ew = rel_l2_f(num_w, g.w, n_w(&p));
        double el = rel_l2_f(num_l, g.loc, 2 * n_pairs(&p));
        CHECK(ef <= 1e-5, "case %d grad_features rel L2 %g", it, ef);
        CHECK(ew <= 1e-5, "case %d grad_weights rel L2 %g", it, ew);
        CHECK(el <= 1e-5, "case %d grad_sampling_location rel L2 %g", it, el);
        double nl = 0;
        for (int64_t i = 0; i < 2 * n_pairs(&p); i++)
            nl += num_l[i] * num_l[i];
        CHECK(nl > 0, "case %d: location gradient is all zeros, the case tests nothing", it);
        free(fd);
        free(ld);
        free(wd);
        free(god);
        free(num_f);
        free(num_l);
        free(num_w);
        free(gout);
        grads_free(&g);
        problem_free(&p);
    }
    return 0;
}

static int test_threads(void)
{
    problem p;
    problem_alloc(&p, 2, 6, 4, 64, 8, 41, 13, 24, 40);
    problem_locations(&p, 0.4);
    float *gout = (float *)malloc(sizeof(float) * (size_t)n_out(&p));
    for (int64_t i = 0; i < n_out(&p); i++)
        gout[i] = rng_nonzero();
    grads base, g;
    grads_alloc(&p, &base);
    grads_alloc(&p, &g);
    run_backward(&p, gout, &base, 1);
    const int counts[] = {2, 3, 7, 0, 33};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        run_backward(&p, gout, &g, counts[i]);
        CHECK(!memcmp(g.feat, base.feat, sizeof(float) * (size_t)n_feat(&p)),
              "grad_features with %d threads differs bitwise", counts[i]);
        CHECK(!memcmp(g.loc, base.loc, sizeof(float) * 2 * (size_t)n_pairs(&p)),
              "grad_sampling_location with %d threads differs bitwise", counts[i]);
        CHECK(!memcmp(g.w, base.w, sizeof(float) * (size_t)n_w(&p)),
              "grad_weights with %d threads differs bitwise", counts[i]);
    }
    free(gout);
    grads_free(&base);
    grads_free(&g);
    problem_free(&p);
    return 0;
}

/* Invalid pairs (outside, on the border, NaN, inf) get exactly zero gradient. */
static int test_invalid(void)
{
    problem p;
    problem_alloc(&p, 1, 2, 3, 16, 4, 4, 6, 10, 12);
    fd_locations(&p, 1.0);
    const float bad[][2] = {{0.0f, 0.5f}, {1.0f, 0.5f}, {0.5f, 0.0f}, {0.5f, 1.0f},
                            {NAN, 0.5f},  {0.5f, NAN},  {INFINITY, 0.5f}, {-3e7f, 8e6f}};
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nbad; i++) {
        p.loc[2 * (3 * i)] = bad[i][0];
        p.loc[2 * (3 * i) + 1] = bad[i][1];
    }
    float *gout = (float *)malloc(sizeof(float) * (size_t)n_out(&p));
    for (int64_t i = 0; i < n_out(&p); i++)
        gout[i] = rng_nonzero();
    grads g;
    grads_alloc(&p, &g);
    run_backward(&p, gout, &g, 2);
    int64_t LG = p.s.num_levels * p.s.num_groups;
    for (int i = 0; i < nbad; i++) {
        int64_t pair = 3 * i;
        CHECK(g.loc[2 * pair] == 0.0f && g.loc[2 * pair + 1] == 0.0f,
              "invalid pair (%g, %g): grad_loc (%g, %g)", bad[i][0], bad[i][1], g.loc[2 * pair],
              g.loc[2 * pair + 1]);
        for (int64_t k = 0; k < LG; k++)
            CHECK(g.w[pair * LG + k] == 0.0f, "invalid pair (%g, %g): grad_w %g", bad[i][0],
                  bad[i][1], g.w[pair * LG + k]);
    }
    int finite = 1;
    for (int64_t i = 0; i < n_feat(&p); i++)
        finite &= isfinite(g.feat[i]) != 0;
    CHECK(finite, "grad_features holds a non-finite value");
    /* grad_features equals that of the same problem where the invalid pairs have zero weight. */
    grads g2;
    grads_alloc(&p, &g2);
    for (int i = 0; i < nbad; i++)
        for (int64_t k = 0; k < LG; k++)
            p.w[3 * i * LG + k] = 0.0f;
    run_backward(&p, gout, &g2, 2);
    CHECK(!memcmp(g.feat, g2.feat, sizeof(float) * (size_t)n_feat(&p)),
          "invalid pairs changed grad_features");
    free(gout);
    grads_free(&g);
    grads_free(&g2);
    problem_free(&p);
    return 0;
}

/* float16 features/weights/grad_output: gradients against float64 FD of the rounded inputs. */
static int test_fp16(void)
{
    problem p;
    problem_alloc(&p, 1, 2, 2, 32, 4, 5, 4, 11, 15);
    fd_locations(&p, 0.8);
    int64_t nf = n_feat(&p), nw = n_w(&p), no = n_out(&p), nl = 2 * n_pairs(&p);
    uint16_t *fh = (uint16_t *)malloc(2 * (size_t)nf), *wh = (uint16_t *)malloc(2 * (size_t)nw),
             *goh = (uint16_t *)malloc(2 * (size_t)no);
    float *gout = (float *)malloc(sizeof(float) * (size_t)no);
    quantise_half(p.feat, nf, fh);
    quantise_half(p.w, nw, wh);
    for (int64_t i = 0; i < no; i++) {
        goh[i] = double_to_half_bits(rng_nonzero());
        gout[i] = (float)half_bits_to_double(goh[i]);
    }
    uint16_t *gfh = (uint16_t *)malloc(2 * (size_t)nf), *gwh = (uint16_t *)malloc(2 * (size_t)nw);
    float *gl = (float *)malloc(sizeof(float) * (size_t)nl);
    s4d_da_backward_args a = bwd_args(&p, gout, NULL, gl, NULL);
    a.features = fh;
    a.features_dtype = S4D_DTYPE_FLOAT16;
    a.weights = wh;
    a.weights_dtype = S4D_DTYPE_FLOAT16;
    a.grad_output = goh;
    a.grad_output_dtype = S4D_DTYPE_FLOAT16;
    a.grad_features = gfh;
    a.grad_weights = gwh;
    s4d_errbuf e = {{0}};
    CHECK(s4d_da_backward_cpu(&a, 0, &e) == S4D_OK, "fp16 backward failed: %s", e.msg);
    double *fd = to_double(p.feat, nf), *ld = to_double(p.loc, nl), *wd = to_double(p.w, nw),
           *god = to_double(gout, no);
    double *num_f = (double *)malloc(sizeof(double) * (size_t)nf),
           *num_w = (double *)malloc(sizeof(double) * (size_t)nw),
           *num_l = (double *)malloc(sizeof(double) * (size_t)nl);
    fd_grad(&p, fd, ld, wd, god, fd, nf, 1e-3, num_f);
    fd_grad(&p, fd, ld, wd, god, wd, nw, 1e-3, num_w);
    fd_grad(&p, fd, ld, wd, god, ld, nl, 1e-6, num_l);
    double *gfd = (double *)malloc(sizeof(double) * (size_t)nf),
           *gwd = (double *)malloc(sizeof(double) * (size_t)nw);
    for (int64_t i = 0; i < nf; i++)
        gfd[i] = half_bits_to_double(gfh[i]);
    for (int64_t i = 0; i < nw; i++)
        gwd[i] = half_bits_to_double(gwh[i]);
    double ef = rel_l2(num_f, gfd, nf), ew = rel_l2(num_w, gwd, nw), el = rel_l2_f(num_l, gl, nl);
    CHECK(ef <= 2e-3, "fp16 grad_features rel L2 %g", ef);
    CHECK(ew <= 2e-3, "fp16 grad_weights rel L2 %g", ew);
    CHECK(el <= 1e-5, "fp16-input grad_sampling_location rel L2 %g", el);
    free(fh); free(wh); free(goh); free(gout); free(gfh); free(gwh); free(gl);
    free(fd); free(ld); free(wd); free(god); free(num_f); free(num_w); free(num_l);
    free(gfd); free(gwd);
    problem_free(&p);
    return 0;
}

/* Asking for a subset of gradients gives the same values and leaves the others alone. */
static int test_partial(void)
{
    problem p;
    problem_alloc(&p, 2, 3, 2, 32, 8, 6, 5, 12, 20);
    problem_locations(&p, 0.6);
    float *gout = (float *)malloc(sizeof(float) * (size_t)n_out(&p));
    for (int64_t i = 0; i < n_out(&p); i++)
        gout[i] = rng_nonzero();
    grads full, g;
    grads_alloc(&p, &full);
    grads_alloc(&p, &g);
    run_backward(&p, gout, &full, 0);
    for (int mask = 1; mask < 7; mask++) {
        grads_free(&g);
        grads_alloc(&p, &g);
        grads use = {mask & 1 ? g.feat : NULL, mask & 2 ? g.loc : NULL, mask & 4 ? g.w : NULL};
        run_backward(&p, gout, &use, 2);
        if (mask & 1)
            CHECK(!memcmp(g.feat, full.feat, sizeof(float) * (size_t)n_feat(&p)),
                  "mask %d: grad_features differs", mask);
        else
            CHECK(g.feat[0] == 1e9f, "mask %d: grad_features was written", mask);
        if (mask & 2)
            CHECK(!memcmp(g.loc, full.loc, sizeof(float) * 2 * (size_t)n_pairs(&p)),
                  "mask %d: grad_sampling_location differs", mask);
        else
            CHECK(g.loc[0] == 1e9f, "mask %d: grad_sampling_location was written", mask);
        if (mask & 4)
            CHECK(!memcmp(g.w, full.w, sizeof(float) * (size_t)n_w(&p)),
                  "mask %d: grad_weights differs", mask);
        else
            CHECK(g.w[0] == 1e9f, "mask %d: grad_weights was written", mask);
    }
    free(gout);
    grads_free(&full);
    grads_free(&g);
    problem_free(&p);
    return 0;
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "fd";
    if (!strcmp(which, "fd"))
        test_fd();
    else if (!strcmp(which, "threads"))
        test_threads();
    else if (!strcmp(which, "invalid"))
        test_invalid();
    else if (!strcmp(which, "fp16"))
        test_fp16();
    else if (!strcmp(which, "partial"))
        test_partial();
    else {
        fprintf(stderr, "unknown test '%s'\n", which);
        return 2;
    }
    return test_exit(which, 0);
}
