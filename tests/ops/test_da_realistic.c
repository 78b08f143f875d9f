/*
 * The realistic workload (bench/da_workload.c): its statistics match
 * Sparse4Dv3 on nuScenes, and the CPU forward and backward on it match the
 * float64 reference (forward, and the weight gradient).
 */
#include "da_test_util.h"
#include "da_workload.h"

int main(void)
{
    da_workload w;
    if (da_workload_make(&w, 1, 120, 256, 7) != 0) {
        fprintf(stderr, "cannot make the workload\n");
        return 1;
    }
    CHECK(w.inside_fraction > 0.12 && w.inside_fraction < 0.26,
          "share of pairs inside an image is %.3f, expected about 0.18", w.inside_fraction);
    CHECK(w.seen_by[1] > 0.75, "share of points seen by one camera is %.3f", w.seen_by[1]);
    const s4d_da_sizes *s = &w.sizes;
    int64_t no = s->batch * s->num_anchors * s->channels;
    int64_t nf = s->batch * s->num_rows * s->channels;
    int64_t npairs = s->batch * s->num_anchors * s->num_points * s->num_cams;
    int64_t nw = npairs * s->num_levels * s->num_groups;
    problem p = {*s, w.spatial_shape, w.scale_start_index, w.features, w.sampling_location,
                 w.weights};
    float *out = (float *)malloc(4 * (size_t)no);
    s4d_da_forward_args a = fwd_args(&p, out);
    s4d_errbuf e = {{0}};
    CHECK(s4d_da_forward_cpu(&a, 0, &e) == S4D_OK, "forward: %s", e.msg);
    double *fd = to_double(w.features, nf), *ld = to_double(w.sampling_location, 2 * npairs),
           *wd = to_double(w.weights, nw), *ref = (double *)malloc(8 * (size_t)no);
    ref_forward(s, w.spatial_shape, w.scale_start_index, fd, ld, wd, ref);
    double err = rel_l2_f(ref, out, no);
    CHECK(err <= 5e-6, "realistic forward: rel L2 %g", err);
    int zero_rows = 0;
    for (int64_t an = 0; an < s->num_anchors; an++) {
        double n2 = 0;
        for (int64_t c = 0; c < s->channels; c++)
            n2 += ref[an * s->channels + c] * ref[an * s->channels + c];
        zero_rows += n2 == 0;
    }
    CHECK(zero_rows < s->num_anchors / 10, "%d of %lld anchors see nothing", zero_rows,
          (long long)s->num_anchors);
    /* Backward: grad_weights is the float64 bilinear sample dotted with grad_out over the
       group's channels (the loss is linear in each weight); checked on valid pairs. */
    float *gout = (float *)malloc(4 * (size_t)no), *gw = (float *)malloc(4 * (size_t)nw);
    for (int64_t i = 0; i < no; i++)
        gout[i] = rng_nonzero();
    s4d_da_backward_args b = bwd_args(&p, gout, NULL, NULL, gw);
    CHECK(s4d_da_backward_cpu(&b, 0, &e) == S4D_OK, "backward: %s", e.msg);
    double num = 0, den = 0;
    const int64_t C = s->channels, cpg = C / s->num_groups, PN = s->num_points * s->num_cams;
    for (int64_t pair = 0; pair < npairs; pair++) {
        double x = ld[2 * pair], y = ld[2 * pair + 1];
        if (!(x > 0 && x < 1 && y > 0 && y < 1))
            continue;
        int64_t an = pair / PN, n = pair % s->num_cams;
        for (int64_t l = 0; l < s->num_levels; l++) {
            int64_t m = n * s->num_levels + l;
            for (int64_t g = 0; g < s->num_groups; g++) {
                double want = 0;
                for (int64_t c = g * cpg; c < (g + 1) * cpg; c++)
                    want += gout[an * C + c] *
                            ref_bilinear(fd, C, c, w.scale_start_index[m],
                                         w.spatial_shape[2 * m], w.spatial_shape[2 * m + 1], x, y);
                double got = gw[(pair * s->num_levels + l) * s->num_groups + g];
                num += (got - want) * (got - want);
                den += want * want;
            }
        }
    }
    CHECK(den > 0 && sqrt(num / den) <= 1e-5, "realistic grad_weights: rel L2 %g",
          den > 0 ? sqrt(num / den) : -1.0);
    free(gout); free(gw); free(out); free(fd); free(ld); free(wd); free(ref);
    double inside = w.inside_fraction;
    da_workload_free(&w);
    if (g_failures) {
        fprintf(stderr, "realistic: %d failure(s)\n", g_failures);
        return 1;
    }
    printf("realistic: ok (%.1f%% of pairs inside an image)\n", 100 * inside);
    return 0;
}
