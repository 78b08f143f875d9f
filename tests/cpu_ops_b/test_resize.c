/* Resize against a direct float64 multilinear / nearest reference. */
#include "op_test.h"

typedef struct rs_case {
    int rank;
    int64_t in[4];
    int use_sizes;
    float scales[4];
    int64_t sizes[4];
    const char *mode, *coord, *nearest;
    int opset;
} rs_case;

/* span: the resized length align_corners divides by (in * scale when scales are given). */
static double coord(const char *cm, int64_t o, double s, int64_t lin, int64_t lout, double span)
{
    if (strcmp(cm, "half_pixel") == 0)
        return (o + 0.5) / s - 0.5;
    if (strcmp(cm, "pytorch_half_pixel") == 0)
        return lout > 1 ? (o + 0.5) / s - 0.5 : 0.0;
    if (strcmp(cm, "align_corners") == 0)
        return lout == 1 ? 0.0 : (double)o * (double)(lin - 1) / (span - 1);
    if (strcmp(cm, "asymmetric") == 0)
        return o / s;
    return (o + 0.5) / s; /* tf_half_pixel_for_nearest */
}

static int64_t pick(const char *nm, double x, int64_t len)
{
    double f = floor(x), r;
    if (strcmp(nm, "floor") == 0)
        r = f;
    else if (strcmp(nm, "ceil") == 0)
        r = ceil(x);
    else if (x - f == 0.5)
        r = strcmp(nm, "round_prefer_ceil") == 0 ? f + 1 : f;
    else
        r = x - f < 0.5 ? f : f + 1;
    return r < 0 ? 0 : (r > len - 1 ? len - 1 : (int64_t)r);
}

static void run_case(const rs_case *rc)
{
    int r = rc->rank;
    int64_t out[4], nin = 1, nout = 1;
    double sc[4];
    for (int i = 0; i < r; i++) {
        if (rc->use_sizes) {
            out[i] = rc->sizes[i];
            sc[i] = (double)out[i] / (double)rc->in[i];
        } else {
            sc[i] = rc->scales[i];
            out[i] = (int64_t)floor(rc->in[i] * (double)rc->scales[i]);
        }
        nin *= rc->in[i];
        nout *= out[i];
    }
    float *x = t_rand_buf(nin, -2, 2);
    double *ref = malloc(sizeof(double) * (size_t)nout);
    const char *cm = rc->coord ? rc->coord : (rc->opset < 11 ? "asymmetric" : "half_pixel");
    const char *nm = rc->nearest ? rc->nearest : (rc->opset < 11 ? "floor" : "round_prefer_floor");
    int linear = strcmp(rc->mode, "linear") == 0;
    for (int64_t yi = 0; yi < nout; yi++) {
        int64_t o[4], rem = yi;
        for (int i = r - 1; i >= 0; i--) {
            o[i] = rem % out[i];
            rem /= out[i];
        }
        int64_t i0[4], i1[4];
        double w[4];
        for (int a = 0; a < r; a++) {
            double span = rc->use_sizes ? (double)out[a] : (double)rc->in[a] * sc[a];
            double c = coord(cm, o[a], sc[a], rc->in[a], out[a], span);
            if (linear) {
                c = c < 0 ? 0 : (c > rc->in[a] - 1 ? (double)(rc->in[a] - 1) : c);
                i0[a] = (int64_t)floor(c);
                i1[a] = i0[a] + 1 < rc->in[a] ? i0[a] + 1 : rc->in[a] - 1;
                w[a] = c - (double)i0[a];
            } else {
                i0[a] = i1[a] = pick(nm, c, rc->in[a]);
                w[a] = 0;
            }
        }
        double acc = 0;
        for (int corner = 0; corner < (1 << r); corner++) {
            double wt = 1;
            int64_t off = 0;
            for (int a = 0; a < r; a++) {
                int hi = (corner >> a) & 1;
                wt *= hi ? w[a] : 1 - w[a];
                off = off * rc->in[a] + (hi ? i1[a] : i0[a]);
            }
            acc += wt * x[off];
        }
        ref[yi] = acc;
    }
    s4d_attr at[3];
    int na = 0;
    at[na++] = t_attr_string("mode", rc->mode);
    if (rc->coord)
        at[na++] = t_attr_string("coordinate_transformation_mode", rc->coord);
    if (rc->nearest)
        at[na++] = t_attr_string("nearest_mode", rc->nearest);
    int64_t sd[1] = {r};
    float scales[4];
    int64_t sizes[4];
    memcpy(scales, rc->scales, sizeof scales);
    memcpy(sizes, rc->sizes, sizeof sizes);
    s4d_tensor in[4], o[1];
    int nin_t;
    in[0] = t_tensor(S4D_DTYPE_FLOAT32, x, r, rc->in);
    if (rc->opset < 11) {
        in[1] = t_tensor(S4D_DTYPE_FLOAT32, scales, 1, sd);
        nin_t = 2;
        t_const_mask = 2;
    } else {
        in[1] = t_missing();
        in[2] = rc->use_sizes ? t_missing() : t_tensor(S4D_DTYPE_FLOAT32, scales, 1, sd);
        in[3] = t_tensor(S4D_DTYPE_INT64, sizes, 1, sd);
        nin_t = rc->use_sizes ? 4 : 3;
        t_const_mask = 0xc;
    }
    s4d_status st = t_run_op("Resize", rc->opset, in, nin_t, at, na, o, 1);
    t_const_mask = 0;
    T_CHECK(st == S4D_OK, "resize %s/%s: %s", rc->mode, cm, t_err);
    if (st == S4D_OK) {
        int same = o[0].rank == r;
        for (int i = 0; same && i < r; i++)
            same = o[0].dims[i] == out[i];
        T_CHECK(same, "resize dims %s/%s", rc->mode, cm);
        if (same)
            T_CLOSE(o[0].data, ref, nout, 1e-5, 1e-5, "resize values %s/%s/%s", rc->mode, cm, nm);
    }
    t_free_outputs(o, 1);
    free(x);
    free(ref);
}

static void test_errors(void)
{
    float buf[64] = {1}, sc[4] = {1, 1, 2, 2};
    int64_t xd[4] = {1, 1, 2, 3}, sd[1] = {4}, sz[4] = {1, 1, 4, 6};
    s4d_tensor o[1];
    s4d_tensor in[4] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_missing(), t_tensor(S4D_DTYPE_FLOAT32, sc, 1, sd),
                        t_tensor(S4D_DTYPE_INT64, sz, 1, sd)};
    t_const_mask = 0xc;
    T_EXPECT_FAIL(t_run_op("Resize", 13, in, 4, NULL, 0, o, 1), S4D_ERR_INVALID_ARG, "scales and sizes");
    s4d_attr cubic[1] = {t_attr_string("mode", "cubic")};
    T_EXPECT_FAIL(t_run_op("Resize", 13, in, 3, cubic, 1, o, 1), S4D_ERR_UNSUPPORTED, "cubic");
    s4d_attr tfc[1] = {t_attr_string("coordinate_transformation_mode", "tf_crop_and_resize")};
    T_EXPECT_FAIL(t_run_op("Resize", 13, in, 3, tfc, 1, o, 1), S4D_ERR_UNSUPPORTED, "tf_crop_and_resize");
    t_const_mask = 0;
    T_EXPECT_FAIL(t_run_op("Resize", 13, in, 3, NULL, 0, o, 1), S4D_ERR_UNSUPPORTED, "non-constant scales");
    t_const_mask = 0xc;
    int64_t sd3[1] = {3};
    in[2] = t_tensor(S4D_DTYPE_FLOAT32, sc, 1, sd3);
    T_EXPECT_FAIL(t_run_op("Resize", 13, in, 3, NULL, 0, o, 1), S4D_ERR_SHAPE, "scales length");
    in[2] = t_tensor(S4D_DTYPE_FLOAT32, sc, 1, sd);
    in[0].dtype = S4D_DTYPE_INT32;
    T_EXPECT_FAIL(t_run_op("Resize", 13, in, 3, NULL, 0, o, 1), S4D_ERR_DTYPE, "int32 X");
    t_const_mask = 0;
}

/* Opset 18 axes: sizes for the last two axes only. */
static void test_axes(void)
{
    int64_t xd[4] = {1, 2, 3, 4}, sd[1] = {2}, sz[2] = {6, 2};
    float *x = t_rand_buf(24, -1, 1);
    int64_t ax[2] = {2, 3};
    s4d_attr at[3] = {t_attr_string("mode", "nearest"), t_attr_ints("axes", ax, 2),
                      t_attr_string("coordinate_transformation_mode", "asymmetric")};
    s4d_tensor in[4] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd), t_missing(), t_missing(),
                        t_tensor(S4D_DTYPE_INT64, sz, 1, sd)}, o[1];
    t_const_mask = 8;
    s4d_status st = t_run_op("Resize", 18, in, 4, at, 3, o, 1);
    t_const_mask = 0;
    T_CHECK(st == S4D_OK, "axes: %s", t_err);
    if (st == S4D_OK) {
        T_CHECK(o[0].dims[1] == 2 && o[0].dims[2] == 6 && o[0].dims[3] == 2, "axes dims");
        double ref[24];
        for (int c = 0; c < 2; c++)
            for (int h = 0; h < 6; h++)
                for (int w = 0; w < 2; w++) /* asymmetric + round_prefer_floor: h/2 and 2w */
                    ref[(c * 6 + h) * 2 + w] = x[(c * 3 + pick("round_prefer_floor", h / 2.0, 3)) * 4 + 2 * w];
        T_CLOSE(o[0].data, ref, 24, 0, 1e-7, "axes values");
    }
    t_free_outputs(o, 1);
    free(x);
}

int main(void)
{
    rs_case cases[] = {
        {4, {1, 2, 3, 4}, 0, {1, 1, 2, 2}, {0}, "linear", NULL, NULL, 13},
        {4, {2, 2, 5, 4}, 0, {1, 1, 0.6f, 1.7f}, {0}, "linear", "half_pixel", NULL, 13},
        {4, {1, 2, 3, 4}, 1, {0}, {1, 2, 7, 5}, "linear", "align_corners", NULL, 13},
        {4, {1, 2, 6, 5}, 1, {0}, {1, 2, 1, 3}, "linear", "pytorch_half_pixel", NULL, 13},
        {4, {1, 2, 5, 4}, 0, {1, 1, 0.6f, 1.7f}, {0}, "linear", "align_corners", NULL, 13},
        {4, {1, 2, 3, 4}, 0, {1, 1, 2, 3}, {0}, "linear", "asymmetric", NULL, 11},
        {4, {1, 2, 3, 4}, 0, {1, 1, 2, 2}, {0}, "nearest", "asymmetric", "floor", 13},
        {4, {1, 2, 3, 4}, 0, {1, 1, 2.5f, 1.5f}, {0}, "nearest", "half_pixel", "round_prefer_ceil", 13},
        {4, {1, 2, 5, 7}, 0, {1, 1, 0.5f, 0.6f}, {0}, "nearest", NULL, NULL, 13},
        {4, {1, 2, 3, 4}, 1, {0}, {1, 2, 8, 9}, "nearest", "align_corners", "ceil", 13},
        {4, {1, 2, 3, 4}, 0, {1, 1, 2, 3}, {0}, "nearest", "tf_half_pixel_for_nearest", NULL, 13},
        {4, {1, 2, 3, 4}, 0, {1, 1, 2, 2}, {0}, "nearest", NULL, NULL, 10},
        {3, {2, 3, 5}, 0, {1, 2, 0.8f}, {0}, "linear", NULL, NULL, 13},
        {2, {4, 6}, 1, {0}, {4, 6}, "linear", NULL, NULL, 13},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_axes();
    test_errors();
    return t_finish("test_resize");
}
