/* BatchNormalization and LayerNormalization against float64 references. */
#include "op_test.h"

static void test_batchnorm(void)
{
    int64_t xd[4] = {2, 3, 4, 5}, cd[1] = {3};
    int64_t n = 2 * 3 * 4 * 5;
    float *x = t_rand_buf(n, -2, 2), *sc = t_rand_buf(3, 0.5f, 2), *b = t_rand_buf(3, -1, 1);
    float *mu = t_rand_buf(3, -1, 1), *var = t_rand_buf(3, 0.1f, 2);
    double ref[120];
    float eps = 1e-3f;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = (i / 20) % 3;
        ref[i] = ((double)x[i] - mu[c]) / sqrt((double)var[c] + eps) * sc[c] + b[c];
    }
    s4d_attr at[1] = {t_attr_float("epsilon", eps)};
    s4d_tensor in[5] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, sc, 1, cd),
                        t_tensor(S4D_DTYPE_FLOAT32, b, 1, cd), t_tensor(S4D_DTYPE_FLOAT32, mu, 1, cd),
                        t_tensor(S4D_DTYPE_FLOAT32, var, 1, cd)};
    s4d_tensor o[3];
    T_CHECK(t_run_op("BatchNormalization", 15, in, 5, at, 1, o, 1) == S4D_OK, "bn: %s", t_err);
    T_CLOSE(o[0].data, ref, n, 1e-5, 1e-5, "bn values");
    T_CHECK(o[0].rank == 4 && o[0].dims[3] == 5, "bn dims");
    t_free_outputs(o, 1);

    /* Bad inputs. */
    int64_t bad[1] = {4};
    in[3] = t_tensor(S4D_DTYPE_FLOAT32, mu, 1, bad);
    T_EXPECT_FAIL(t_run_op("BatchNormalization", 15, in, 5, at, 1, o, 1), S4D_ERR_SHAPE, "bn mean length");
    in[3] = t_tensor(S4D_DTYPE_FLOAT32, mu, 1, cd);
    s4d_attr tm[1] = {t_attr_int("training_mode", 1)};
    T_EXPECT_FAIL(t_run_op("BatchNormalization", 15, in, 5, tm, 1, o, 1), S4D_ERR_UNSUPPORTED, "bn training");
    T_EXPECT_FAIL(t_run_op("BatchNormalization", 15, in, 5, at, 1, o, 3), S4D_ERR_UNSUPPORTED, "bn 3 outputs");
    in[0].dtype = S4D_DTYPE_FLOAT16;
    T_EXPECT_FAIL(t_run_op("BatchNormalization", 15, in, 5, at, 1, o, 1), S4D_ERR_DTYPE, "bn fp16");
    in[0].dtype = S4D_DTYPE_FLOAT32;
    T_EXPECT_FAIL(t_run_op("BatchNormalization", 15, in, 4, at, 1, o, 1), S4D_ERR_INVALID_ARG, "bn 4 inputs");
    free(x);
    free(sc);
    free(b);
    free(mu);
    free(var);
}

/* axis, scale rank (right-aligned dims of the normalised shape, or 1s where bcast). */
static void check_layernorm(int rank, const int64_t *xd, int axis, int srank, const int64_t *sd, int with_bias,
                            int nout)
{
    int64_t n = 1, rows = 1, cols = 1, ns = 1;
    int ax = axis < 0 ? axis + rank : axis;
    for (int i = 0; i < rank; i++) {
        n *= xd[i];
        if (i < ax)
            rows *= xd[i];
        else
            cols *= xd[i];
    }
    for (int i = 0; i < srank; i++)
        ns *= sd[i];
    float *x = t_rand_buf(n, -3, 3), *sc = t_rand_buf(ns, 0.5f, 1.5f), *b = t_rand_buf(ns, -1, 1);
    double *ref = malloc(sizeof(double) * (size_t)n), *rm = malloc(sizeof(double) * (size_t)rows),
           *ri = malloc(sizeof(double) * (size_t)rows);
    float eps = 1e-4f;
    int nr = rank - ax;
    for (int64_t r = 0; r < rows; r++) {
        double s = 0, v = 0;
        for (int64_t i = 0; i < cols; i++)
            s += x[r * cols + i];
        s /= (double)cols;
        for (int64_t i = 0; i < cols; i++)
            v += (x[r * cols + i] - s) * (x[r * cols + i] - s);
        v /= (double)cols;
        rm[r] = s;
        ri[r] = 1.0 / sqrt(v + eps);
        for (int64_t i = 0; i < cols; i++) {
            /* Unravel i over the normalised dims; map to the scale's index. */
            int64_t rem = i, si = 0, mul = 1;
            for (int d = nr - 1; d >= 0; d--) {
                int64_t c = rem % xd[ax + d];
                rem /= xd[ax + d];
                int sdim = d - (nr - srank);
                if (sdim >= 0) {
                    si += (sd[sdim] == 1 ? 0 : c) * mul;
                    mul *= sd[sdim];
                }
            }
            ref[r * cols + i] = (x[r * cols + i] - s) * ri[r] * sc[si] + (with_bias ? b[si] : 0.0);
        }
    }
    s4d_attr at[2] = {t_attr_int("axis", axis), t_attr_float("epsilon", eps)};
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, rank, xd), t_tensor(S4D_DTYPE_FLOAT32, sc, srank, sd),
                        t_tensor(S4D_DTYPE_FLOAT32, b, srank, sd)};
    s4d_tensor o[3];
    s4d_status st = t_run_op("LayerNormalization", 17, in, with_bias ? 3 : 2, at, 2, o, nout);
    T_CHECK(st == S4D_OK, "layernorm axis %d: %s", axis, t_err);
    if (st == S4D_OK) {
        T_CLOSE(o[0].data, ref, n, 1e-5, 1e-4, "layernorm Y axis %d srank %d", axis, srank);
        if (nout > 1) {
            T_CLOSE(o[1].data, rm, rows, 1e-6, 1e-5, "layernorm Mean");
            T_CHECK(o[1].rank == rank && o[1].dims[rank - 1] == 1, "layernorm Mean dims");
        }
        if (nout > 2)
            T_CLOSE(o[2].data, ri, rows, 1e-6, 1e-5, "layernorm InvStdDev");
    }
    t_free_outputs(o, nout);
    free(x);
    free(sc);
    free(b);
    free(ref);
    free(rm);
    free(ri);
}

static void test_layernorm(void)
{
    { int64_t xd[] = {2, 5, 64}, sd[] = {64}; check_layernorm(3, xd, -1, 1, sd, 1, 1); }
    { int64_t xd[] = {2, 5, 64}, sd[] = {64}; check_layernorm(3, xd, 2, 1, sd, 0, 3); }
    { int64_t xd[] = {3, 4, 5}, sd[] = {4, 5}; check_layernorm(3, xd, 1, 2, sd, 1, 3); }
    { int64_t xd[] = {3, 4, 5}, sd[] = {4, 1}; check_layernorm(3, xd, -2, 2, sd, 1, 1); }
    { int64_t xd[] = {3, 4, 5}, sd[] = {5}; check_layernorm(3, xd, 1, 1, sd, 1, 2); }
    { int64_t xd[] = {6, 7}, sd[] = {6, 7}; check_layernorm(2, xd, 0, 2, sd, 1, 3); }

    float buf[64] = {1};
    int64_t xd[] = {2, 8}, bad[] = {7}, ok[] = {8};
    s4d_tensor o[1];
    {
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 1, bad)};
        T_EXPECT_FAIL(t_run_op("LayerNormalization", 17, in, 2, NULL, 0, o, 1), S4D_ERR_SHAPE, "ln scale");
    }
    {
        s4d_attr at[1] = {t_attr_int("axis", 2)};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 1, ok)};
        T_EXPECT_FAIL(t_run_op("LayerNormalization", 17, in, 2, at, 1, o, 1), S4D_ERR_INVALID_ARG, "ln axis");
    }
    {
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT64, buf, 2, xd), t_tensor(S4D_DTYPE_FLOAT64, buf, 1, ok)};
        T_EXPECT_FAIL(t_run_op("LayerNormalization", 17, in, 2, NULL, 0, o, 1), S4D_ERR_DTYPE, "ln f64");
    }
    T_CHECK(s4d_op_find_schema("", "LayerNormalization", 16) == NULL, "no LayerNormalization before opset 17");
}

int main(void)
{
    test_batchnorm();
    test_layernorm();
    return t_finish("test_norm");
}
