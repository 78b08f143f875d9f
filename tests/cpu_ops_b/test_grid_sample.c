/* GridSample against a float64 reference of the PyTorch formulas. */
#include "op_test.h"

static double ref_reflect(double x, double lo2, double hi2)
{
    if (lo2 == hi2)
        return 0;
    double mn = lo2 / 2, span = (hi2 - lo2) / 2;
    x = fabs(x - mn);
    double flips = floor(x / span), extra = x - flips * span;
    return fmod(flips, 2) == 0 ? extra + mn : span - extra + mn;
}

static double unnorm(double g, int64_t size, int align, const char *pad)
{
    double x = align ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
    if (strcmp(pad, "border") == 0)
        x = fmin(fmax(x, 0), size - 1);
    else if (strcmp(pad, "reflection") == 0) {
        x = align ? ref_reflect(x, 0, 2.0 * (size - 1)) : ref_reflect(x, -1, 2.0 * size - 1);
        x = fmin(fmax(x, 0), size - 1);
    }
    return x;
}

static double at(const float *p, int64_t h, int64_t w, int64_t y, int64_t x)
{
    return (y < 0 || y >= h || x < 0 || x >= w) ? 0.0 : p[y * w + x];
}

static void check(const char *mode, const char *pad, int align)
{
    int64_t n = 2, c = 3, h = 5, w = 6, ho = 4, wo = 7;
    int64_t xd[4] = {n, c, h, w}, gd[4] = {n, ho, wo, 2}, total = n * c * ho * wo;
    float *x = t_rand_buf(n * c * h * w, -1, 1), *g = t_rand_buf(n * ho * wo * 2, -1.3f, 1.3f);
    /* A few exact pixel centres and corners. */
    g[0] = -1;
    g[1] = -1;
    g[2] = 1;
    g[3] = 1;
    g[4] = 0;
    g[5] = 0;
    double *ref = malloc(sizeof(double) * (size_t)total);
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < ho; i++)
            for (int64_t j = 0; j < wo; j++) {
                const float *gp = g + ((b * ho + i) * wo + j) * 2;
                double px = unnorm(gp[0], w, align, pad), py = unnorm(gp[1], h, align, pad);
                for (int64_t ch = 0; ch < c; ch++) {
                    const float *plane = x + (b * c + ch) * h * w;
                    double v;
                    if (strcmp(mode, "nearest") == 0) {
                        v = at(plane, h, w, (int64_t)nearbyint(py), (int64_t)nearbyint(px));
                    } else {
                        double fx = floor(px), fy = floor(py), lx = px - fx, ly = py - fy;
                        int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;
                        v = (1 - lx) * (1 - ly) * at(plane, h, w, y0, x0) + lx * (1 - ly) * at(plane, h, w, y0, x0 + 1) +
                            (1 - lx) * ly * at(plane, h, w, y0 + 1, x0) + lx * ly * at(plane, h, w, y0 + 1, x0 + 1);
                    }
                    ref[((b * c + ch) * ho + i) * wo + j] = v;
                }
            }
    s4d_attr a[3] = {t_attr_string("mode", mode), t_attr_string("padding_mode", pad), t_attr_int("align_corners", align)};
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, g, 4, gd)}, o[1];
    s4d_status st = t_run_op("GridSample", 16, in, 2, a, 3, o, 1);
    T_CHECK(st == S4D_OK, "grid_sample: %s", t_err);
    if (st == S4D_OK) {
        T_CHECK(o[0].dims[0] == n && o[0].dims[1] == c && o[0].dims[2] == ho && o[0].dims[3] == wo, "dims");
        T_CLOSE(o[0].data, ref, total, 1e-5, 1e-5, "grid_sample %s %s align=%d", mode, pad, align);
    }
    t_free_outputs(o, 1);
    free(x);
    free(g);
    free(ref);
}

int main(void)
{
    const char *modes[2] = {"bilinear", "nearest"}, *pads[3] = {"zeros", "border", "reflection"};
    for (int m = 0; m < 2; m++)
        for (int p = 0; p < 3; p++)
            for (int a = 0; a < 2; a++)
                check(modes[m], pads[p], a);

    float buf[256] = {1};
    int64_t xd[4] = {1, 2, 4, 4}, gd[4] = {1, 3, 3, 2}, gbad[4] = {1, 3, 3, 3}, g2[4] = {2, 3, 3, 2};
    s4d_tensor o[1];
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, gbad)};
    T_EXPECT_FAIL(t_run_op("GridSample", 16, in, 2, NULL, 0, o, 1), S4D_ERR_SHAPE, "grid last dim 3");
    in[1] = t_tensor(S4D_DTYPE_FLOAT32, buf, 4, g2);
    T_EXPECT_FAIL(t_run_op("GridSample", 16, in, 2, NULL, 0, o, 1), S4D_ERR_SHAPE, "batch mismatch");
    in[1] = t_tensor(S4D_DTYPE_FLOAT32, buf, 4, gd);
    s4d_attr bic[1] = {t_attr_string("mode", "bicubic")};
    T_EXPECT_FAIL(t_run_op("GridSample", 16, in, 2, bic, 1, o, 1), S4D_ERR_UNSUPPORTED, "bicubic");
    s4d_attr badpad[1] = {t_attr_string("padding_mode", "wrap")};
    T_EXPECT_FAIL(t_run_op("GridSample", 16, in, 2, badpad, 1, o, 1), S4D_ERR_INVALID_ARG, "padding wrap");
    in[1].dtype = S4D_DTYPE_FLOAT64;
    T_EXPECT_FAIL(t_run_op("GridSample", 16, in, 2, NULL, 0, o, 1), S4D_ERR_DTYPE, "f64 grid");

    /* A NaN location samples zero under zeros padding, never garbage. */
    {
        float xv[16], gv[2] = {NAN, 0.0f};
        for (int i = 0; i < 16; i++)
            xv[i] = (float)i + 1;
        int64_t x1[4] = {1, 1, 4, 4}, g1[4] = {1, 1, 1, 2};
        s4d_tensor in2[2] = {t_tensor(S4D_DTYPE_FLOAT32, xv, 4, x1), t_tensor(S4D_DTYPE_FLOAT32, gv, 4, g1)};
        T_CHECK(t_run_op("GridSample", 16, in2, 2, NULL, 0, o, 1) == S4D_OK, "nan grid: %s", t_err);
        T_CHECK(((float *)o[0].data)[0] == 0.0f, "nan location gives 0");
        t_free_outputs(o, 1);
    }
    return t_finish("test_grid_sample");
}
