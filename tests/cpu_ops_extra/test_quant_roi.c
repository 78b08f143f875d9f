/*
 * QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
 * QLinearMatMul, RoiAlign, MaxUnpool and the window functions against direct
 * loops on random inputs (ties to even and saturation included), plus their
 * errors.
 */
#include "../cpu_ops_b/op_test.h"

#include <stdint.h>

static double even_round(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0))
        return f + 1;
    return f;
}

static void test_quantize(void)
{
    int64_t xd[3] = {2, 3, 5}, cd[1] = {3}, sd[1] = {1};
    float *x = t_rand_buf(30, -300, 300);
    x[0] = 2.5f, x[1] = 3.5f, x[2] = -2.5f, x[3] = 1e9f; /* ties, and saturation */
    float scale[3] = {0.5f, 2.0f, 1.5f}, s1 = 1.0f;
    int8_t zp[3] = {-3, 0, 7}, z1 = 0;
    for (int per_axis = 0; per_axis < 2; per_axis++) {
        s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, 3, xd),
                            per_axis ? t_tensor(S4D_DTYPE_FLOAT32, scale, 1, cd) : t_tensor(S4D_DTYPE_FLOAT32, &s1, 0, sd),
                            per_axis ? t_tensor(S4D_DTYPE_INT8, zp, 1, cd) : t_tensor(S4D_DTYPE_INT8, &z1, 0, sd)},
                   out[1];
        s4d_attr axis = t_attr_int("axis", 1);
        s4d_status st = t_run_op("QuantizeLinear", 13, in, 3, &axis, 1, out, 1);
        T_CHECK(st == S4D_OK && out[0].dtype == S4D_DTYPE_INT8, "QuantizeLinear: %s", t_err);
        int bad = 0;
        for (int i = 0; st == S4D_OK && i < 30; i++) {
            int c = per_axis ? i / 5 % 3 : 0;
            double q = even_round((double)(x[i] / (per_axis ? scale[c] : 1.0f))) + (per_axis ? zp[c] : 0);
            q = q < -128 ? -128 : q > 127 ? 127 : q;
            bad |= ((int8_t *)out[0].data)[i] != (int8_t)q;
        }
        T_CHECK(!bad, "QuantizeLinear %s", per_axis ? "per axis" : "per tensor");
        /* Back: (q - zp) * scale. */
        if (st == S4D_OK) {
            int8_t *q = out[0].data;
            s4d_tensor din[3] = {t_tensor(S4D_DTYPE_INT8, q, 3, xd), in[1], in[2]}, dout[1];
            st = t_run_op("DequantizeLinear", 13, din, 3, &axis, 1, dout, 1);
            double want[30];
            for (int i = 0; i < 30; i++) {
                int c = per_axis ? i / 5 % 3 : 0;
                want[i] = ((double)q[i] - (per_axis ? zp[c] : 0)) * (per_axis ? scale[c] : 1.0f);
            }
            T_CHECK(st == S4D_OK, "DequantizeLinear: %s", t_err);
            if (st == S4D_OK)
                T_CLOSE(dout[0].data, want, 30, 1e-12, 1e-7, "DequantizeLinear %s", per_axis ? "per axis" : "per tensor");
            t_free_outputs(dout, 1);
        }
        t_free_outputs(out, 1);
    }
    /* A per-axis scale of the wrong length. */
    int64_t bd[1] = {4};
    float s4[4] = {1, 1, 1, 1};
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, x, 3, xd), t_tensor(S4D_DTYPE_FLOAT32, s4, 1, bd)}, out[1];
    s4d_attr axis = t_attr_int("axis", 1);
    T_EXPECT_FAIL(t_run_op("QuantizeLinear", 13, in, 2, &axis, 1, out, 1), S4D_ERR_SHAPE, "4 scales for axis of 3");
    /* DynamicQuantizeLinear. */
    s4d_tensor dq[1] = {t_tensor(S4D_DTYPE_FLOAT32, x + 4, 1, (int64_t[]){26})}, dout[3];
    s4d_status st = t_run_op("DynamicQuantizeLinear", 11, dq, 1, NULL, 0, dout, 3);
    T_CHECK(st == S4D_OK, "DynamicQuantizeLinear: %s", t_err);
    if (st == S4D_OK) {
        float lo = 0, hi = 0;
        for (int i = 4; i < 30; i++)
            lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
        float sc = (hi - lo) / 255.0f;
        double zpv = even_round((double)(0.0f - lo / sc));
        zpv = zpv < 0 ? 0 : zpv > 255 ? 255 : zpv;
        T_CHECK(*(float *)dout[1].data == sc && *(uint8_t *)dout[2].data == (uint8_t)zpv,
                "DynamicQuantizeLinear scale %g zero point %d", (double)*(float *)dout[1].data,
                *(uint8_t *)dout[2].data);
        int bad = 0;
        for (int i = 4; i < 30; i++) {
            double q = even_round((double)(x[i] / sc)) + zpv;
            q = q < 0 ? 0 : q > 255 ? 255 : q;
            bad |= ((uint8_t *)dout[0].data)[i - 4] != (uint8_t)q;
        }
        T_CHECK(!bad, "DynamicQuantizeLinear values");
    }
    t_free_outputs(dout, 3);
    free(x);
}

static void test_integer_matmul(void)
{
    /* A [2, 1, 3, 5] x B [4, 5, 2]: batch dims broadcast to [2, 4]. */
    int64_t ad[4] = {2, 1, 3, 5}, bd[3] = {4, 5, 2}, zd[1] = {1};
    uint8_t a[30], b[40], azp = 9, bzp = 200;
    for (int i = 0; i < 30; i++)
        a[i] = (uint8_t)(t_uniform() * 255);
    for (int i = 0; i < 40; i++)
        b[i] = (uint8_t)(t_uniform() * 255);
    s4d_tensor in[4] = {t_tensor(S4D_DTYPE_UINT8, a, 4, ad), t_tensor(S4D_DTYPE_UINT8, b, 3, bd),
                        t_tensor(S4D_DTYPE_UINT8, &azp, 0, zd), t_tensor(S4D_DTYPE_UINT8, &bzp, 0, zd)},
               out[1];
    s4d_status st = t_run_op("MatMulInteger", 10, in, 4, NULL, 0, out, 1);
    T_CHECK(st == S4D_OK && out[0].rank == 4 && out[0].dims[1] == 4, "MatMulInteger: %s", t_err);
    int bad = 0;
    int64_t sums[48];
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 4; i1++)
            for (int m = 0; m < 3; m++)
                for (int n = 0; n < 2; n++) {
                    int64_t s = 0;
                    for (int k = 0; k < 5; k++)
                        s += ((int64_t)a[(i0 * 3 + m) * 5 + k] - azp) * ((int64_t)b[(i1 * 5 + k) * 2 + n] - bzp);
                    int at = ((i0 * 4 + i1) * 3 + m) * 2 + n;
                    sums[at] = s;
                    if (st == S4D_OK)
                        bad |= ((int32_t *)out[0].data)[at] != (int32_t)s;
                }
    T_CHECK(!bad, "MatMulInteger values");
    t_free_outputs(out, 1);
    /* QLinearMatMul on the same sums: saturate(round(s * sa * sb / sy) + zy). */
    float sa = 0.02f, sb = 0.03f, sy = 0.5f;
    uint8_t zy = 100;
    s4d_tensor qin[8] = {in[0], t_tensor(S4D_DTYPE_FLOAT32, &sa, 0, zd), in[2], in[1],
                         t_tensor(S4D_DTYPE_FLOAT32, &sb, 0, zd), in[3], t_tensor(S4D_DTYPE_FLOAT32, &sy, 0, zd),
                         t_tensor(S4D_DTYPE_UINT8, &zy, 0, zd)};
    st = t_run_op("QLinearMatMul", 10, qin, 8, NULL, 0, out, 1);
    T_CHECK(st == S4D_OK, "QLinearMatMul: %s", t_err);
    bad = 0;
    for (int i = 0; st == S4D_OK && i < 48; i++) {
        double q = even_round((double)sums[i] * ((double)sa * (double)sb / (double)sy)) + zy;
        q = q < 0 ? 0 : q > 255 ? 255 : q;
        bad |= ((uint8_t *)out[0].data)[i] != (uint8_t)q;
    }
    T_CHECK(!bad, "QLinearMatMul values");
    t_free_outputs(out, 1);
    int64_t bad_bd[3] = {4, 6, 2};
    in[1] = t_tensor(S4D_DTYPE_UINT8, b, 3, bad_bd);
    T_EXPECT_FAIL(t_run_op("MatMulInteger", 10, in, 4, NULL, 0, out, 1), S4D_ERR_SHAPE, "K of 5 against 6");
}

/* A RoI whose samples fall on pixel centres: each bin is the mean of known bilinear points. */
static void test_roi_unpool_windows(void)
{
    int64_t xd[4] = {2, 2, 6, 7}, rd[2] = {2, 4}, bd[1] = {2};
    float *x = t_rand_buf(168, -1, 1);
    float rois[8] = {1.0f, 0.5f, 5.0f, 4.5f, 0.0f, 0.0f, 6.0f, 5.0f};
    int64_t bi[2] = {1, 0};
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, rois, 2, rd),
                        t_tensor(S4D_DTYPE_INT64, bi, 1, bd)},
               out[1];
    s4d_attr a[5] = {t_attr_int("output_height", 2), t_attr_int("output_width", 2), t_attr_int("sampling_ratio", 2),
                     t_attr_float("spatial_scale", 1.0f), t_attr_string("coordinate_transformation_mode", "half_pixel")};
    s4d_status st = t_run_op("RoiAlign", 16, in, 3, a, 5, out, 1);
    T_CHECK(st == S4D_OK, "RoiAlign: %s", t_err);
    double want[16];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++)
            for (int ph = 0; ph < 2; ph++)
                for (int pw = 0; pw < 2; pw++) {
                    double x1 = rois[r * 4] - 0.5, y1 = rois[r * 4 + 1] - 0.5;
                    double bw = (rois[r * 4 + 2] - rois[r * 4]) / 2.0, bh = (rois[r * 4 + 3] - rois[r * 4 + 1]) / 2.0;
                    double acc = 0;
                    for (int iy = 0; iy < 2; iy++)
                        for (int ix = 0; ix < 2; ix++) {
                            double yy = y1 + ph * bh + (iy + 0.5) * bh / 2, xx = x1 + pw * bw + (ix + 0.5) * bw / 2;
                            yy = yy < 0 ? 0 : yy;
                            xx = xx < 0 ? 0 : xx;
                            int y0 = (int)yy, x0 = (int)xx, y1i = y0 + 1 < 6 ? y0 + 1 : 5, x1i = x0 + 1 < 7 ? x0 + 1 : 6;
                            double ly = yy - y0, lx = xx - x0;
                            const float *pl = x + (bi[r] * 2 + c) * 42;
                            acc += (1 - ly) * (1 - lx) * pl[y0 * 7 + x0] + (1 - ly) * lx * pl[y0 * 7 + x1i] +
                                   ly * (1 - lx) * pl[y1i * 7 + x0] + ly * lx * pl[y1i * 7 + x1i];
                        }
                    want[((r * 2 + c) * 2 + ph) * 2 + pw] = acc / 4;
                }
    if (st == S4D_OK)
        T_CLOSE(out[0].data, want, 16, 1e-6, 1e-5, "RoiAlign avg, half_pixel");
    t_free_outputs(out, 1);
    bi[1] = 2;
    T_EXPECT_FAIL(t_run_op("RoiAlign", 16, in, 3, a, 5, out, 1), S4D_ERR_INVALID_ARG, "batch index 2 of 2");
    t_free_outputs(out, 1);
    bi[1] = 0;
    rois[2] = NAN;
    T_EXPECT_FAIL(t_run_op("RoiAlign", 16, in, 3, a, 5, out, 1), S4D_ERR_INVALID_ARG, "a NaN coordinate");
    t_free_outputs(out, 1);
    /* MaxUnpool: values back at their indices (into the unpooled 4x4), zeros elsewhere. */
    float v[4] = {1.5f, -2.0f, 3.0f, 4.0f};
    int64_t ind[4] = {5, 2, 8, 15}, vd[4] = {1, 1, 2, 2}, ks[2] = {2, 2}, ss[2] = {2, 2};
    s4d_tensor uin[2] = {t_tensor(S4D_DTYPE_FLOAT32, v, 4, vd), t_tensor(S4D_DTYPE_INT64, ind, 4, vd)};
    s4d_attr ua[2] = {t_attr_ints("kernel_shape", ks, 2), t_attr_ints("strides", ss, 2)};
    st = t_run_op("MaxUnpool", 11, uin, 2, ua, 2, out, 1);
    T_CHECK(st == S4D_OK && out[0].dims[2] == 4 && out[0].dims[3] == 4, "MaxUnpool: %s", t_err);
    double uw[16] = {0};
    uw[5] = 1.5, uw[2] = -2, uw[8] = 3, uw[15] = 4;
    if (st == S4D_OK)
        T_CLOSE(out[0].data, uw, 16, 1e-12, 0, "MaxUnpool scatter");
    t_free_outputs(out, 1);
    ind[3] = 16;
    T_EXPECT_FAIL(t_run_op("MaxUnpool", 11, uin, 2, ua, 2, out, 1), S4D_ERR_INVALID_ARG, "index 16 of 16");
    t_free_outputs(out, 1);
    int64_t big_s[2] = {(int64_t)1 << 62, 2};
    s4d_attr ub[2] = {t_attr_ints("kernel_shape", ks, 2), t_attr_ints("strides", big_s, 2)};
    T_EXPECT_FAIL(t_run_op("MaxUnpool", 11, uin, 2, ub, 2, out, 1), S4D_ERR_INVALID_ARG,
                  "a stride that overflows the unpooled size");
    /* Windows. */
    const char *names[3] = {"HannWindow", "HammingWindow", "BlackmanWindow"};
    const double c0[3] = {0.5, 25.0 / 46.0, 0.42}, c1[3] = {0.5, 21.0 / 46.0, 0.5}, c2[3] = {0, 0, 0.08};
    int64_t size = 9, sdim[1] = {1};
    for (int k = 0; k < 3; k++)
        for (int periodic = 0; periodic < 2; periodic++) {
            s4d_tensor win[1] = {t_tensor(S4D_DTYPE_INT64, &size, 0, sdim)};
            s4d_attr pa = t_attr_int("periodic", periodic);
            t_const_mask = 1;
            st = t_run_op(names[k], 17, win, 1, &pa, 1, out, 1);
            t_const_mask = 0;
            double ww[9];
            for (int i = 0; i < 9; i++) {
                double t = 2 * 3.14159265358979323846 * i / (periodic ? 9.0 : 8.0);
                ww[i] = c0[k] - c1[k] * cos(t) + c2[k] * cos(2 * t);
            }
            T_CHECK(st == S4D_OK, "%s: %s", names[k], t_err);
            if (st == S4D_OK)
                T_CLOSE(out[0].data, ww, 9, 1e-7, 1e-6, "%s periodic %d", names[k], periodic);
            t_free_outputs(out, 1);
        }
    s4d_tensor win[1] = {t_tensor(S4D_DTYPE_INT64, &size, 0, sdim)};
    T_EXPECT_FAIL(t_run_op("HannWindow", 17, win, 1, NULL, 0, out, 1), S4D_ERR_UNSUPPORTED, "size known only when run");
    free(x);
}

int main(void)
{
    test_quantize();
    test_integer_matmul();
    test_roi_unpool_windows();
    return t_finish("test_quant_roi");
}
