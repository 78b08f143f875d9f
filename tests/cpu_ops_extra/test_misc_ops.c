/*
 * The smaller ops added for real-world exports against direct loops on
 * random inputs: InstanceNormalization, LRN, MeanVarianceNormalization,
 * DepthToSpace, SpaceToDepth, Trilu, EyeLike, ReverseSequence, OneHot,
 * Shrink, Hardmax, CumSum, BitShift, Det, Dropout; and their errors.
 */
#include "../cpu_ops_b/op_test.h"

#include <stdint.h>

static void test_instance_norm(void)
{
    int64_t xd[4] = {2, 3, 5, 7}, cd[1] = {3};
    float *x = t_rand_buf(210, -2, 3), *s = t_rand_buf(3, 0.5f, 2), *b = t_rand_buf(3, -1, 1);
    double want[210];
    for (int pl = 0; pl < 6; pl++) {
        double m = 0, v = 0;
        for (int i = 0; i < 35; i++)
            m += x[pl * 35 + i];
        m /= 35;
        for (int i = 0; i < 35; i++)
            v += (x[pl * 35 + i] - m) * (x[pl * 35 + i] - m);
        v /= 35;
        for (int i = 0; i < 35; i++)
            want[pl * 35 + i] = s[pl % 3] * (x[pl * 35 + i] - m) / sqrt(v + 1e-3) + b[pl % 3];
    }
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, s, 1, cd),
                        t_tensor(S4D_DTYPE_FLOAT32, b, 1, cd)},
               out[1];
    s4d_attr eps = t_attr_float("epsilon", 1e-3f);
    s4d_status st = t_run_op("InstanceNormalization", 6, in, 3, &eps, 1, out, 1);
    T_CHECK(st == S4D_OK, "InstanceNormalization: %s", t_err);
    if (st == S4D_OK)
        T_CLOSE(out[0].data, want, 210, 1e-5, 1e-5, "InstanceNormalization");
    t_free_outputs(out, 1);
    int64_t bad[1] = {4};
    in[1] = t_tensor(S4D_DTYPE_FLOAT32, s, 1, bad);
    T_EXPECT_FAIL(t_run_op("InstanceNormalization", 6, in, 3, NULL, 0, out, 1), S4D_ERR_SHAPE,
                  "scale of 4 for 3 channels");
    free(x), free(s), free(b);
}

static void test_lrn_mvn(void)
{
    int64_t xd[4] = {2, 6, 3, 4};
    float *x = t_rand_buf(144, -2, 2);
    double want[144];
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 6; c++)
            for (int i = 0; i < 12; i++) {
                double sq = 0;
                for (int k = c - 1; k <= c + 2; k++) /* size 4: floor(3/2) before, ceil(3/2) after */
                    if (k >= 0 && k < 6)
                        sq += (double)x[(n * 6 + k) * 12 + i] * x[(n * 6 + k) * 12 + i];
                want[(n * 6 + c) * 12 + i] = x[(n * 6 + c) * 12 + i] / pow(2.0 + 0.1 / 4 * sq, 0.6);
            }
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd)}, out[1];
    s4d_attr a[4] = {t_attr_int("size", 4), t_attr_float("alpha", 0.1f), t_attr_float("beta", 0.6f),
                     t_attr_float("bias", 2.0f)};
    s4d_status st = t_run_op("LRN", 13, in, 1, a, 4, out, 1);
    T_CHECK(st == S4D_OK, "LRN: %s", t_err);
    if (st == S4D_OK)
        T_CLOSE(out[0].data, want, 144, 1e-6, 1e-5, "LRN size 4");
    t_free_outputs(out, 1);
    T_EXPECT_FAIL(t_run_op("LRN", 13, in, 1, a + 1, 3, out, 1), S4D_ERR_INVALID_ARG, "LRN without size");
    /* MVN over axes (0, 2, 3) and over (1). */
    for (int which = 0; which < 2; which++) {
        for (int c = 0; c < 6; c++)
            for (int n = 0; n < 2; n++)
                for (int i = 0; i < 12; i++) {
                    double m = 0, v = 0, cnt = 0;
                    for (int n2 = 0; n2 < 2; n2++)
                        for (int c2 = 0; c2 < 6; c2++)
                            for (int i2 = 0; i2 < 12; i2++) {
                                int same = which == 0 ? c2 == c : (n2 == n && i2 == i);
                                if (!same)
                                    continue;
                                m += x[(n2 * 6 + c2) * 12 + i2];
                                cnt++;
                            }
                    m /= cnt;
                    for (int n2 = 0; n2 < 2; n2++)
                        for (int c2 = 0; c2 < 6; c2++)
                            for (int i2 = 0; i2 < 12; i2++) {
                                int same = which == 0 ? c2 == c : (n2 == n && i2 == i);
                                if (same)
                                    v += (x[(n2 * 6 + c2) * 12 + i2] - m) * (x[(n2 * 6 + c2) * 12 + i2] - m);
                            }
                    want[(n * 6 + c) * 12 + i] = (x[(n * 6 + c) * 12 + i] - m) / (sqrt(v / cnt) + 1e-9);
                }
        int64_t axes1[1] = {1};
        s4d_attr ax = t_attr_ints("axes", axes1, 1);
        st = t_run_op("MeanVarianceNormalization", 13, in, 1, &ax, which, out, 1);
        T_CHECK(st == S4D_OK, "MVN: %s", t_err);
        if (st == S4D_OK)
            T_CLOSE(out[0].data, want, 144, 1e-5, 1e-5, "MVN %s", which ? "axes (1)" : "default axes");
        t_free_outputs(out, 1);
    }
    free(x);
}

static void test_depth_space(void)
{
    int64_t xd[4] = {2, 8, 3, 5};
    int32_t x[240];
    for (int i = 0; i < 240; i++)
        x[i] = i * 7 + 1;
    for (int crd = 0; crd < 2; crd++) {
        s4d_tensor in[1] = {t_tensor(S4D_DTYPE_INT32, x, 4, xd)}, out[1];
        s4d_attr a[2] = {t_attr_int("blocksize", 2), t_attr_string("mode", crd ? "CRD" : "DCR")};
        s4d_status st = t_run_op("DepthToSpace", 13, in, 1, a, 2, out, 1);
        T_CHECK(st == S4D_OK && out[0].dims[1] == 2 && out[0].dims[2] == 6 && out[0].dims[3] == 10,
                "DepthToSpace %s: shape (%s)", crd ? "CRD" : "DCR", t_err);
        int bad = 0;
        for (int n = 0; st == S4D_OK && n < 2; n++)
            for (int c = 0; c < 2; c++)
                for (int h = 0; h < 6; h++)
                    for (int w = 0; w < 10; w++) {
                        int i = h % 2, j = w % 2;
                        int ci = crd ? c * 4 + i * 2 + j : (i * 2 + j) * 2 + c;
                        bad |= ((int32_t *)out[0].data)[((n * 2 + c) * 6 + h) * 10 + w] !=
                               x[((n * 8 + ci) * 3 + h / 2) * 5 + w / 2];
                    }
        T_CHECK(!bad, "DepthToSpace %s: values", crd ? "CRD" : "DCR");
        t_free_outputs(out, 1);
    }
    int64_t sd[4] = {1, 3, 4, 6};
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_INT32, x, 4, sd)}, out[1];
    s4d_attr a = t_attr_int("blocksize", 2);
    s4d_status st = t_run_op("SpaceToDepth", 13, in, 1, &a, 1, out, 1);
    T_CHECK(st == S4D_OK && out[0].dims[1] == 12 && out[0].dims[2] == 2 && out[0].dims[3] == 3,
            "SpaceToDepth: shape (%s)", t_err);
    int bad = 0;
    for (int co = 0; st == S4D_OK && co < 12; co++)
        for (int h = 0; h < 2; h++)
            for (int w = 0; w < 3; w++) {
                int c = co % 3, i = co / 3 / 2, j = co / 3 % 2;
                bad |= ((int32_t *)out[0].data)[(co * 2 + h) * 3 + w] != x[(c * 4 + h * 2 + i) * 6 + w * 2 + j];
            }
    T_CHECK(!bad, "SpaceToDepth: values");
    t_free_outputs(out, 1);
    int64_t odd[4] = {1, 3, 5, 6};
    in[0] = t_tensor(S4D_DTYPE_INT32, x, 4, odd);
    T_EXPECT_FAIL(t_run_op("SpaceToDepth", 13, in, 1, &a, 1, out, 1), S4D_ERR_SHAPE, "height 5 by 2");
    s4d_attr huge = t_attr_int("blocksize", (int64_t)1 << 40);
    T_EXPECT_FAIL(t_run_op("DepthToSpace", 13, in, 1, &huge, 1, out, 1), S4D_ERR_INVALID_ARG,
                  "a block size whose square overflows");
}

static void test_trilu_eye(void)
{
    int64_t xd[3] = {2, 4, 5}, kd[1] = {1};
    float *x = t_rand_buf(40, -1, 1);
    for (int upper = 0; upper < 2; upper++)
        for (int k = -2; k <= 2; k++) {
            int64_t kv = k;
            double want[40];
            for (int m = 0; m < 2; m++)
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 5; j++) {
                        int keep = upper ? j - i >= k : j - i <= k;
                        want[(m * 4 + i) * 5 + j] = keep ? x[(m * 4 + i) * 5 + j] : 0;
                    }
            s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, x, 3, xd), t_tensor(S4D_DTYPE_INT64, &kv, 0, kd)}, out[1];
            s4d_attr a = t_attr_int("upper", upper);
            t_const_mask = k == 1 ? 0 : 2; /* k known at build, or only when run */
            s4d_status st = t_run_op("Trilu", 14, in, 2, &a, 1, out, 1);
            t_const_mask = 0;
            T_CHECK(st == S4D_OK, "Trilu: %s", t_err);
            if (st == S4D_OK)
                T_CLOSE(out[0].data, want, 40, 1e-12, 0, "Trilu upper %d k %d", upper, k);
            t_free_outputs(out, 1);
        }
    int64_t ed[2] = {3, 5};
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_INT32, x, 2, ed)}, out[1];
    s4d_attr a[2] = {t_attr_int("k", -1), t_attr_int("dtype", S4D_DTYPE_FLOAT64)};
    s4d_status st = t_run_op("EyeLike", 9, in, 1, a, 2, out, 1);
    T_CHECK(st == S4D_OK && out[0].dtype == S4D_DTYPE_FLOAT64, "EyeLike: %s", t_err);
    int bad = 0;
    for (int i = 0; st == S4D_OK && i < 3; i++)
        for (int j = 0; j < 5; j++)
            bad |= ((double *)out[0].data)[i * 5 + j] != (j == i - 1 ? 1.0 : 0.0);
    T_CHECK(!bad, "EyeLike k -1 as float64");
    t_free_outputs(out, 1);
    free(x);
}

static void test_revseq_onehot(void)
{
    int64_t xd[3] = {4, 3, 2}, ld[1] = {3};
    int64_t x[24], lens[3] = {4, 1, 3};
    for (int i = 0; i < 24; i++)
        x[i] = 100 + i;
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_INT64, x, 3, xd), t_tensor(S4D_DTYPE_INT64, lens, 1, ld)}, out[1];
    s4d_status st = t_run_op("ReverseSequence", 10, in, 2, NULL, 0, out, 1);
    T_CHECK(st == S4D_OK, "ReverseSequence: %s", t_err);
    int bad = 0;
    for (int t = 0; st == S4D_OK && t < 4; t++)
        for (int b = 0; b < 3; b++)
            for (int k = 0; k < 2; k++) {
                int from = t < lens[b] ? (int)lens[b] - 1 - t : t;
                bad |= ((int64_t *)out[0].data)[(t * 3 + b) * 2 + k] != x[(from * 3 + b) * 2 + k];
            }
    T_CHECK(!bad, "ReverseSequence time-major");
    t_free_outputs(out, 1);
    lens[0] = 5;
    T_EXPECT_FAIL(t_run_op("ReverseSequence", 10, in, 2, NULL, 0, out, 1), S4D_ERR_INVALID_ARG,
                  "a length past the sequence");
    t_free_outputs(out, 1); /* refused when run: the outputs were allocated */
    /* OneHot along axis 1 with negative and out-of-range indices. */
    int64_t ind[6] = {0, 3, -1, 5, -4, 2}, id[2] = {2, 3}, dd[1] = {1}, vd[1] = {2};
    float depth = 4, vals[2] = {-1.5f, 2.5f};
    s4d_tensor oin[3] = {t_tensor(S4D_DTYPE_INT64, ind, 2, id), t_tensor(S4D_DTYPE_FLOAT32, &depth, 0, dd),
                         t_tensor(S4D_DTYPE_FLOAT32, vals, 1, vd)};
    s4d_attr ax = t_attr_int("axis", 1);
    t_const_mask = 2;
    st = t_run_op("OneHot", 11, oin, 3, &ax, 1, out, 1);
    T_CHECK(st == S4D_OK && out[0].rank == 3 && out[0].dims[1] == 4, "OneHot: %s", t_err);
    double want[24];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 3; j++) {
                int64_t v = ind[i * 3 + j];
                if (v < 0)
                    v += 4;
                want[(i * 4 + k) * 3 + j] = v == k ? 2.5 : -1.5;
            }
    if (st == S4D_OK)
        T_CLOSE(out[0].data, want, 24, 1e-12, 0, "OneHot axis 1");
    t_free_outputs(out, 1);
    t_const_mask = 0;
    T_EXPECT_FAIL(t_run_op("OneHot", 11, oin, 3, &ax, 1, out, 1), S4D_ERR_UNSUPPORTED,
                  "OneHot depth at run time");
    t_const_mask = 2;
    depth = NAN;
    T_EXPECT_FAIL(t_run_op("OneHot", 11, oin, 3, &ax, 1, out, 1), S4D_ERR_INVALID_ARG, "OneHot depth NaN");
    depth = 1e30f;
    T_EXPECT_FAIL(t_run_op("OneHot", 11, oin, 3, &ax, 1, out, 1), S4D_ERR_INVALID_ARG, "OneHot depth 1e30");
    t_const_mask = 0;
}

static void test_arith(void)
{
    /* Shrink */
    int64_t d1[1] = {50};
    float *x = t_rand_buf(50, -3, 3);
    double want[200];
    for (int i = 0; i < 50; i++)
        want[i] = x[i] < -1.2 ? x[i] + 0.4 : x[i] > 1.2 ? x[i] - 0.4 : 0;
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, x, 1, d1)}, out[1];
    s4d_attr a[2] = {t_attr_float("lambd", 1.2f), t_attr_float("bias", 0.4f)};
    s4d_status st = t_run_op("Shrink", 9, in, 1, a, 2, out, 1);
    T_CHECK(st == S4D_OK, "Shrink: %s", t_err);
    if (st == S4D_OK)
        T_CLOSE(out[0].data, want, 50, 1e-6, 1e-6, "Shrink");
    t_free_outputs(out, 1);
    /* Hardmax along axis 1 of [2, 5, 5] (opset 13) and over the flattened tail (opset 11). */
    int64_t hd[3] = {2, 5, 5};
    for (int old = 0; old < 2; old++) {
        for (int i = 0; i < 50; i++)
            want[i] = 0;
        for (int n = 0; n < 2; n++) {
            if (old) {
                int best = 0;
                for (int i = 1; i < 25; i++)
                    if (x[n * 25 + i] > x[n * 25 + best])
                        best = i;
                want[n * 25 + best] = 1;
            } else {
                for (int w = 0; w < 5; w++) {
                    int best = 0;
                    for (int h = 1; h < 5; h++)
                        if (x[n * 25 + h * 5 + w] > x[n * 25 + best * 5 + w])
                            best = h;
                    want[n * 25 + best * 5 + w] = 1;
                }
            }
        }
        in[0] = t_tensor(S4D_DTYPE_FLOAT32, x, 3, hd);
        s4d_attr ax = t_attr_int("axis", 1);
        st = t_run_op("Hardmax", old ? 11 : 13, in, 1, &ax, 1, out, 1);
        T_CHECK(st == S4D_OK, "Hardmax: %s", t_err);
        if (st == S4D_OK)
            T_CLOSE(out[0].data, want, 50, 1e-12, 0, "Hardmax opset %d", old ? 11 : 13);
        t_free_outputs(out, 1);
    }
    /* CumSum along axis 1 of [2, 5, 5], each flag combination, int64 data. */
    int64_t xi[50];
    for (int i = 0; i < 50; i++)
        xi[i] = (int64_t)(x[i] * 100);
    for (int flags = 0; flags < 4; flags++) {
        int excl = flags & 1, rev = flags >> 1;
        double wi[50];
        for (int n = 0; n < 2; n++)
            for (int w = 0; w < 5; w++)
                for (int h = 0; h < 5; h++) {
                    int64_t s = 0;
                    for (int k = 0; k < 5; k++) {
                        int in_range = rev ? (excl ? k > h : k >= h) : (excl ? k < h : k <= h);
                        if (in_range)
                            s += xi[n * 25 + k * 5 + w];
                    }
                    wi[n * 25 + h * 5 + w] = (double)s;
                }
        int64_t axis = -2, ad[1] = {1};
        s4d_tensor cin[2] = {t_tensor(S4D_DTYPE_INT64, xi, 3, hd), t_tensor(S4D_DTYPE_INT64, &axis, 0, ad)};
        s4d_attr fa[2] = {t_attr_int("exclusive", excl), t_attr_int("reverse", rev)};
        t_const_mask = flags == 3 ? 0 : 2;
        st = t_run_op("CumSum", 14, cin, 2, fa, 2, out, 1);
        t_const_mask = 0;
        T_CHECK(st == S4D_OK, "CumSum: %s", t_err);
        int bad = 0;
        for (int i = 0; st == S4D_OK && i < 50; i++)
            bad |= (double)((int64_t *)out[0].data)[i] != wi[i];
        T_CHECK(!bad, "CumSum exclusive %d reverse %d", excl, rev);
        t_free_outputs(out, 1);
    }
    /* BitShift with broadcasting. */
    uint16_t bx[6] = {1, 2, 300, 65535, 7, 1024}, bs[3] = {0, 3, 17};
    int64_t bxd[2] = {2, 3}, bsd[1] = {3};
    s4d_tensor bin[2] = {t_tensor(S4D_DTYPE_UINT16, bx, 2, bxd), t_tensor(S4D_DTYPE_UINT16, bs, 1, bsd)};
    for (int left = 0; left < 2; left++) {
        s4d_attr dir = t_attr_string("direction", left ? "LEFT" : "RIGHT");
        st = t_run_op("BitShift", 11, bin, 2, &dir, 1, out, 1);
        T_CHECK(st == S4D_OK, "BitShift: %s", t_err);
        int bad = 0;
        for (int i = 0; st == S4D_OK && i < 6; i++) {
            unsigned s = bs[i % 3];
            uint16_t w = s >= 16 ? 0 : (uint16_t)(left ? bx[i] << s : bx[i] >> s);
            bad |= ((uint16_t *)out[0].data)[i] != w;
        }
        T_CHECK(!bad, "BitShift %s", left ? "LEFT" : "RIGHT");
        t_free_outputs(out, 1);
    }
    /* Det of 3x3 matrices by cofactors. */
    int64_t dd[3] = {4, 3, 3};
    double *m = malloc(sizeof(double) * 36);
    for (int i = 0; i < 36; i++)
        m[i] = (double)t_randf(-2, 2);
    m[27] = m[30] = 0, m[33] = 0; /* a matrix with a zero first column */
    double wd[4];
    for (int k = 0; k < 4; k++) {
        const double *a3 = m + 9 * k;
        wd[k] = a3[0] * (a3[4] * a3[8] - a3[5] * a3[7]) - a3[1] * (a3[3] * a3[8] - a3[5] * a3[6]) +
                a3[2] * (a3[3] * a3[7] - a3[4] * a3[6]);
    }
    s4d_tensor din[1] = {t_tensor(S4D_DTYPE_FLOAT64, m, 3, dd)};
    st = t_run_op("Det", 11, din, 1, NULL, 0, out, 1);
    T_CHECK(st == S4D_OK && out[0].rank == 1, "Det: %s", t_err);
    double worst = 0;
    for (int k = 0; st == S4D_OK && k < 4; k++) {
        double e = fabs(((double *)out[0].data)[k] - wd[k]);
        worst = e > worst ? e : worst;
    }
    T_CHECK(worst < 1e-12, "Det of 3x3 float64 matrices (error %g)", worst);
    t_free_outputs(out, 1);
    free(m);
    free(x);
}

static void test_dropout(void)
{
    int64_t d[2] = {3, 4}, sd[1] = {1};
    float *x = t_rand_buf(12, -1, 1), ratio = 0.3f;
    uint8_t train = 0;
    double want[12];
    for (int i = 0; i < 12; i++)
        want[i] = x[i];
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, 2, d), t_tensor(S4D_DTYPE_FLOAT32, &ratio, 0, sd),
                        t_tensor(S4D_DTYPE_BOOL, &train, 0, sd)},
               out[2];
    s4d_status st = t_run_op("Dropout", 13, in, 3, NULL, 0, out, 2);
    T_CHECK(st == S4D_OK && out[1].dtype == S4D_DTYPE_BOOL, "Dropout: %s", t_err);
    if (st == S4D_OK) {
        T_CLOSE(out[0].data, want, 12, 1e-12, 0, "Dropout passes its input");
        int ones = 1;
        for (int i = 0; i < 12; i++)
            ones &= ((uint8_t *)out[1].data)[i] == 1;
        T_CHECK(ones, "Dropout's mask is all true");
    }
    t_free_outputs(out, 2);
    train = 1;
    T_EXPECT_FAIL(t_run_op("Dropout", 13, in, 3, NULL, 0, out, 2), S4D_ERR_UNSUPPORTED,
                  "training with ratio 0.3, known when run");
    t_free_outputs(out, 2);
    t_const_mask = 6;
    T_EXPECT_FAIL(t_run_op("Dropout", 13, in, 3, NULL, 0, out, 2), S4D_ERR_UNSUPPORTED,
                  "training with ratio 0.3, known at build");
    t_const_mask = 0;
    free(x);
}

int main(void)
{
    test_instance_norm();
    test_lrn_mvn();
    test_depth_space();
    test_trilu_eye();
    test_revseq_onehot();
    test_arith();
    test_dropout();
    return t_finish("test_misc_ops");
}
