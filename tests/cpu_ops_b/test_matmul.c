/* MatMul and Gemm against float64 reference loops. */
#include "op_test.h"

/* Reference numpy matmul for operands already broadcast-expanded by index maths. */
static void ref_matmul(const float *a, int ra, const int64_t *da, const float *b, int rb,
                       const int64_t *db, double *y, int64_t *ny)
{
    int64_t m = ra >= 2 ? da[ra - 2] : 1, k = da[ra - 1], n = rb >= 2 ? db[rb - 1] : 1;
    int bra = ra >= 2 ? ra - 2 : 0, brb = rb >= 2 ? rb - 2 : 0;
    int br = bra > brb ? bra : brb;
    int64_t bd[8], nb = 1;
    for (int i = 0; i < br; i++) {
        int ia = i - (br - bra), ib = i - (br - brb);
        int64_t x = ia >= 0 ? da[ia] : 1, z = ib >= 0 ? db[ib] : 1;
        bd[i] = x == 1 ? z : x;
        nb *= bd[i];
    }
    for (int64_t bi = 0; bi < nb; bi++) {
        int64_t oa = 0, ob = 0, sa = 1, sb = 1, rem = bi;
        for (int i = br - 1; i >= 0; i--) {
            int64_t c = rem % bd[i];
            rem /= bd[i];
            int ia = i - (br - bra), ib = i - (br - brb);
            if (ia >= 0) {
                oa += (da[ia] == 1 ? 0 : c) * sa;
                sa *= da[ia];
            }
            if (ib >= 0) {
                ob += (db[ib] == 1 ? 0 : c) * sb;
                sb *= db[ib];
            }
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t q = 0; q < k; q++)
                    s += (double)a[(oa * m + i) * k + q] * (double)b[(ob * k + q) * n + j];
                y[(bi * m + i) * n + j] = s;
            }
    }
    *ny = nb * m * n;
}

static void check_matmul(int ra, const int64_t *da, int rb, const int64_t *db, int want_rank,
                         const int64_t *want_dims)
{
    int64_t na = 1, nb = 1;
    for (int i = 0; i < ra; i++)
        na *= da[i];
    for (int i = 0; i < rb; i++)
        nb *= db[i];
    float *a = t_rand_buf(na, -1, 1), *b = t_rand_buf(nb, -1, 1);
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, a, ra, da), t_tensor(S4D_DTYPE_FLOAT32, b, rb, db)};
    s4d_tensor out[1];
    s4d_status st = t_run_op("MatMul", 13, in, 2, NULL, 0, out, 1);
    T_CHECK(st == S4D_OK, "MatMul rank %d x rank %d: %s", ra, rb, t_err);
    if (st == S4D_OK) {
        T_CHECK(out[0].rank == want_rank, "output rank %d, want %d", out[0].rank, want_rank);
        int same = out[0].rank == want_rank;
        for (int i = 0; same && i < want_rank; i++)
            same = out[0].dims[i] == want_dims[i];
        T_CHECK(same, "output dims");
        double *ref = malloc(sizeof(double) * (size_t)s4d_tensor_numel(&out[0]) + 8);
        int64_t ny;
        ref_matmul(a, ra, da, b, rb, db, ref, &ny);
        T_CHECK(ny == s4d_tensor_numel(&out[0]), "element count %lld vs %lld", (long long)ny, (long long)s4d_tensor_numel(&out[0]));
        T_CLOSE(out[0].data, ref, ny, 1e-5, 1e-4, "MatMul values rank %d x %d", ra, rb);
        free(ref);
    }
    t_free_outputs(out, 1);
    free(a);
    free(b);
}

static void test_matmul_shapes(void)
{
    { int64_t a[] = {7, 5}, b[] = {5, 9}, y[] = {7, 9}; check_matmul(2, a, 2, b, 2, y); }
    { int64_t a[] = {5}, b[] = {5, 9}, y[] = {9}; check_matmul(1, a, 2, b, 1, y); }
    { int64_t a[] = {7, 5}, b[] = {5}, y[] = {7}; check_matmul(2, a, 1, b, 1, y); }
    { int64_t a[] = {6}, b[] = {6}; check_matmul(1, a, 1, b, 0, NULL); }
    { int64_t a[] = {3, 7, 5}, b[] = {5, 4}, y[] = {3, 7, 4}; check_matmul(3, a, 2, b, 3, y); }
    { int64_t a[] = {7, 5}, b[] = {3, 5, 4}, y[] = {3, 7, 4}; check_matmul(2, a, 3, b, 3, y); }
    { int64_t a[] = {2, 1, 4, 6}, b[] = {3, 6, 5}, y[] = {2, 3, 4, 5}; check_matmul(4, a, 3, b, 4, y); }
    { int64_t a[] = {2, 3, 4, 6}, b[] = {2, 1, 6, 5}, y[] = {2, 3, 4, 5}; check_matmul(4, a, 4, b, 4, y); }
    { int64_t a[] = {4, 6}, b[] = {2, 6, 3}, y[] = {2, 4, 3}; check_matmul(2, a, 3, b, 3, y); }
    { int64_t a[] = {2, 3, 6}, b[] = {6}, y[] = {2, 3}; check_matmul(3, a, 1, b, 2, y); }
    { int64_t a[] = {6}, b[] = {2, 6, 3}, y[] = {2, 3}; check_matmul(1, a, 3, b, 2, y); }
    /* Large enough for OpenBLAS to use its threads, batched (attention-like). */
    { int64_t a[] = {2, 70, 64}, b[] = {2, 64, 90}, y[] = {2, 70, 90}; check_matmul(3, a, 3, b, 3, y); }
    /* Zero-sized batch. */
    { int64_t a[] = {0, 3, 4}, b[] = {4, 2}, y[] = {0, 3, 2}; check_matmul(3, a, 2, b, 3, y); }
}

static void test_matmul_errors(void)
{
    float buf[64] = {1};
    s4d_tensor out[1];
    {
        int64_t da[] = {3, 4}, db[] = {5, 2};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, da), t_tensor(S4D_DTYPE_FLOAT32, buf, 2, db)};
        T_EXPECT_FAIL(t_run_op("MatMul", 13, in, 2, NULL, 0, out, 1), S4D_ERR_SHAPE, "inner mismatch");
    }
    {
        int64_t da[] = {2, 3, 4}, db[] = {3, 4, 2};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 3, da), t_tensor(S4D_DTYPE_FLOAT32, buf, 3, db)};
        T_EXPECT_FAIL(t_run_op("MatMul", 13, in, 2, NULL, 0, out, 1), S4D_ERR_SHAPE, "batch mismatch");
    }
    {
        int64_t da[] = {3, 4}, db[] = {4, 2};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_INT8, buf, 2, da), t_tensor(S4D_DTYPE_INT8, buf, 2, db)};
        T_EXPECT_FAIL(t_run_op("MatMul", 13, in, 2, NULL, 0, out, 1), S4D_ERR_DTYPE, "int8");
    }
    {
        int64_t da[] = {3, 4}, db[] = {4, 2};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, da), t_tensor(S4D_DTYPE_FLOAT64, buf, 2, db)};
        T_EXPECT_FAIL(t_run_op("MatMul", 13, in, 2, NULL, 0, out, 1), S4D_ERR_DTYPE, "mixed dtypes");
    }
    {
        int64_t da[] = {3, 4};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, da), t_tensor(S4D_DTYPE_FLOAT32, buf, 0, NULL)};
        T_EXPECT_FAIL(t_run_op("MatMul", 13, in, 2, NULL, 0, out, 1), S4D_ERR_SHAPE, "scalar operand");
    }
}

static void test_matmul_f64(void)
{
    int64_t da[] = {2, 3, 5}, db[] = {5, 4};
    double a[30], b[20], ref[24];
    for (int i = 0; i < 30; i++)
        a[i] = t_randf(-1, 1);
    for (int i = 0; i < 20; i++)
        b[i] = t_randf(-1, 1);
    for (int bi = 0; bi < 2; bi++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                double s = 0;
                for (int q = 0; q < 5; q++)
                    s += a[(bi * 3 + i) * 5 + q] * b[q * 4 + j];
                ref[(bi * 3 + i) * 4 + j] = s;
            }
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT64, a, 3, da), t_tensor(S4D_DTYPE_FLOAT64, b, 2, db)};
    s4d_tensor out[1];
    T_CHECK(t_run_op("MatMul", 13, in, 2, NULL, 0, out, 1) == S4D_OK, "f64: %s", t_err);
    double worst = 0;
    for (int i = 0; i < 24; i++)
        worst = fmax(worst, fabs(((double *)out[0].data)[i] - ref[i]));
    T_CHECK(worst < 1e-12, "f64 values, worst %g", worst);
    T_CHECK(out[0].dtype == S4D_DTYPE_FLOAT64, "f64 dtype");
    t_free_outputs(out, 1);
}

static void check_gemm(int64_t m, int64_t n, int64_t k, int ta, int tb, float alpha, float beta,
                       int crank, const int64_t *cdims)
{
    int64_t da[2] = {ta ? k : m, ta ? m : k}, db[2] = {tb ? n : k, tb ? k : n};
    int64_t nc = 1;
    for (int i = 0; i < crank; i++)
        nc *= cdims[i];
    float *a = t_rand_buf(m * k, -1, 1), *b = t_rand_buf(k * n, -1, 1), *c = t_rand_buf(nc, -1, 1);
    s4d_attr at[4] = {t_attr_int("transA", ta), t_attr_int("transB", tb), t_attr_float("alpha", alpha),
                      t_attr_float("beta", beta)};
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, a, 2, da), t_tensor(S4D_DTYPE_FLOAT32, b, 2, db),
                        crank >= 0 ? t_tensor(S4D_DTYPE_FLOAT32, c, crank, cdims) : t_missing()};
    s4d_tensor out[1];
    s4d_status st = t_run_op("Gemm", 13, in, crank >= 0 ? 3 : 2, at, 4, out, 1);
    T_CHECK(st == S4D_OK, "Gemm %lldx%lldx%lld: %s", (long long)m, (long long)n, (long long)k, t_err);
    if (st == S4D_OK) {
        T_CHECK(out[0].rank == 2 && out[0].dims[0] == m && out[0].dims[1] == n, "Gemm dims");
        double *ref = malloc(sizeof(double) * (size_t)(m * n));
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t q = 0; q < k; q++) {
                    double x = ta ? a[q * m + i] : a[i * k + q];
                    double z = tb ? b[j * k + q] : b[q * n + j];
                    s += x * z;
                }
                double cv = 0;
                if (crank >= 0) {
                    int64_t cr = crank == 2 ? cdims[0] : 1, cc = crank >= 1 ? cdims[crank - 1] : 1;
                    cv = c[(cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j)];
                }
                ref[i * n + j] = alpha * s + beta * cv;
            }
        T_CLOSE(out[0].data, ref, m * n, 1e-5, 1e-4, "Gemm values ta=%d tb=%d crank=%d", ta, tb, crank);
        free(ref);
    }
    t_free_outputs(out, 1);
    free(a);
    free(b);
    free(c);
}

static void test_gemm(void)
{
    int64_t full[2] = {5, 7}, row[1] = {7}, col[2] = {5, 1}, one[1] = {1};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm(5, 7, 4, ta, tb, 1.0f, 1.0f, 2, full);
            check_gemm(5, 7, 4, ta, tb, 0.5f, -2.0f, 1, row);
        }
    check_gemm(5, 7, 4, 0, 0, 1.5f, 0.25f, 2, col);
    check_gemm(5, 7, 4, 0, 1, 1.0f, 3.0f, 1, one);
    check_gemm(5, 7, 4, 0, 1, 1.0f, 3.0f, 0, NULL);
    check_gemm(5, 7, 4, 1, 0, 2.0f, 1.0f, -1, NULL);
    check_gemm(64, 96, 80, 0, 1, 1.0f, 1.0f, 1, (int64_t[]){96});

    float buf[64] = {1};
    s4d_tensor out[1];
    int64_t da[] = {3, 4}, db[] = {4, 2}, dc[] = {3, 3}, d3[] = {1, 3, 4};
    {
        s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, da), t_tensor(S4D_DTYPE_FLOAT32, buf, 2, db),
                            t_tensor(S4D_DTYPE_FLOAT32, buf, 2, dc)};
        T_EXPECT_FAIL(t_run_op("Gemm", 13, in, 3, NULL, 0, out, 1), S4D_ERR_SHAPE, "C does not broadcast");
    }
    {
        s4d_attr at[1] = {t_attr_int("transB", 1)};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, da), t_tensor(S4D_DTYPE_FLOAT32, buf, 2, db)};
        T_EXPECT_FAIL(t_run_op("Gemm", 13, in, 2, at, 1, out, 1), S4D_ERR_SHAPE, "transB mismatch");
    }
    {
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 3, d3), t_tensor(S4D_DTYPE_FLOAT32, buf, 2, db)};
        T_EXPECT_FAIL(t_run_op("Gemm", 13, in, 2, NULL, 0, out, 1), S4D_ERR_SHAPE, "3-D A");
    }
    {
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_INT32, buf, 2, da), t_tensor(S4D_DTYPE_INT32, buf, 2, db)};
        T_EXPECT_FAIL(t_run_op("Gemm", 13, in, 2, NULL, 0, out, 1), S4D_ERR_DTYPE, "int32 Gemm");
    }
}

/* FusedMatMul: MatMul + bias + Relu in one kernel, and its bad inputs. */
static void test_fused_matmul(void)
{
    int64_t da[3] = {2, 3, 5}, db[2] = {5, 4}, dbias[2] = {1, 4}, bad[1] = {3};
    float *a = t_rand_buf(30, -1, 1), *b = t_rand_buf(20, -1, 1), *bias = t_rand_buf(4, -1, 1);
    double ref[24];
    for (int r = 0; r < 6; r++)
        for (int j = 0; j < 4; j++) {
            double s = bias[j];
            for (int q = 0; q < 5; q++)
                s += (double)a[r * 5 + q] * b[q * 4 + j];
            ref[r * 4 + j] = s > 0 ? s : 0;
        }
    s4d_attr at[1] = {t_attr_string("activation", "Relu")};
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, a, 3, da), t_tensor(S4D_DTYPE_FLOAT32, b, 2, db),
                        t_tensor(S4D_DTYPE_FLOAT32, bias, 2, dbias)}, o[1];
    t_domain = "s4d";
    T_CHECK(t_run_op("FusedMatMul", 1, in, 3, at, 1, o, 1) == S4D_OK, "fused matmul: %s", t_err);
    T_CLOSE(o[0].data, ref, 24, 1e-5, 1e-4, "fused matmul values");
    t_free_outputs(o, 1);
    in[2] = t_tensor(S4D_DTYPE_FLOAT32, bias, 1, bad);
    T_EXPECT_FAIL(t_run_op("FusedMatMul", 1, in, 3, at, 1, o, 1), S4D_ERR_SHAPE, "bias length");
    in[2] = t_tensor(S4D_DTYPE_FLOAT32, bias, 2, dbias);
    s4d_attr gelu[1] = {t_attr_string("activation", "Gelu")};
    T_EXPECT_FAIL(t_run_op("FusedMatMul", 1, in, 3, gelu, 1, o, 1), S4D_ERR_UNSUPPORTED, "activation Gelu");
    t_domain = "";
    free(a);
    free(b);
    free(bias);
}

/*
 * FusedMatMul with a residual (input 5): LayerNorm(ReLU(A B + bias) + R) against float64, with
 * and without the normalisation, and its bad residuals.
 */
static void test_fused_matmul_residual(void)
{
    int64_t da[3] = {2, 3, 5}, db[2] = {5, 4}, dn[1] = {4}, dy[3] = {2, 3, 4}, dbad[3] = {2, 1, 4};
    float *a = t_rand_buf(30, -1, 1), *b = t_rand_buf(20, -1, 1), *bias = t_rand_buf(4, -1, 1);
    float *res = t_rand_buf(24, -2, 2), *scale = t_rand_buf(4, 0.5f, 1.5f), *shift = t_rand_buf(4, -1, 1);
    double pre[24], ref[24];
    for (int r = 0; r < 6; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < 4; j++) {
            double s = bias[j];
            for (int q = 0; q < 5; q++)
                s += (double)a[r * 5 + q] * b[q * 4 + j];
            pre[r * 4 + j] = (s > 0 ? s : 0) + res[r * 4 + j];
            m += pre[r * 4 + j] / 4;
        }
        for (int j = 0; j < 4; j++)
            v += (pre[r * 4 + j] - m) * (pre[r * 4 + j] - m) / 4;
        for (int j = 0; j < 4; j++)
            ref[r * 4 + j] = (pre[r * 4 + j] - m) / sqrt(v + 1e-5) * scale[j] + shift[j];
    }
    s4d_attr at[3] = {t_attr_string("activation", "Relu"), t_attr_string("norm", "LayerNormalization"),
                      t_attr_float("epsilon", 1e-5f)};
    s4d_tensor in[6] = {t_tensor(S4D_DTYPE_FLOAT32, a, 3, da),      t_tensor(S4D_DTYPE_FLOAT32, b, 2, db),
                        t_tensor(S4D_DTYPE_FLOAT32, bias, 1, dn),   t_tensor(S4D_DTYPE_FLOAT32, scale, 1, dn),
                        t_tensor(S4D_DTYPE_FLOAT32, shift, 1, dn),  t_tensor(S4D_DTYPE_FLOAT32, res, 3, dy)},
               o[1];
    t_domain = "s4d";
    T_CHECK(t_run_op("FusedMatMul", 1, in, 6, at, 3, o, 1) == S4D_OK, "residual + norm: %s", t_err);
    T_CLOSE(o[0].data, ref, 24, 1e-5, 1e-4, "residual + norm values");
    t_free_outputs(o, 1);
    /* Without the normalisation: Scale and B missing. */
    in[3] = t_missing();
    in[4] = t_missing();
    T_CHECK(t_run_op("FusedMatMul", 1, in, 6, at, 1, o, 1) == S4D_OK, "residual: %s", t_err);
    T_CLOSE(o[0].data, pre, 24, 1e-5, 1e-4, "residual values");
    t_free_outputs(o, 1);
    /* Scale given while the node does not normalise. */
    in[3] = t_tensor(S4D_DTYPE_FLOAT32, scale, 1, dn);
    T_EXPECT_FAIL(t_run_op("FusedMatMul", 1, in, 6, at, 1, o, 1), S4D_ERR_INVALID_ARG, "scale without norm");
    in[3] = t_missing();
    /* A residual that would broadcast, and one of another dtype. */
    in[5] = t_tensor(S4D_DTYPE_FLOAT32, res, 3, dbad);
    T_EXPECT_FAIL(t_run_op("FusedMatMul", 1, in, 6, at, 1, o, 1), S4D_ERR_SHAPE, "broadcast residual");
    in[5] = t_tensor(S4D_DTYPE_FLOAT64, res, 3, dbad);
    T_EXPECT_FAIL(t_run_op("FusedMatMul", 1, in, 6, at, 1, o, 1), S4D_ERR_SHAPE, "float64 residual");
    /* Seven inputs are none of the forms. */
    s4d_tensor in7[7];
    memcpy(in7, in, sizeof(s4d_tensor) * 6);
    in7[5] = t_tensor(S4D_DTYPE_FLOAT32, res, 3, dy);
    in7[6] = t_tensor(S4D_DTYPE_FLOAT32, res, 3, dy);
    T_EXPECT_FAIL(t_run_op("FusedMatMul", 1, in7, 7, at, 1, o, 1), S4D_ERR_INVALID_ARG, "seven inputs");
    t_domain = "";
    free(a);
    free(b);
    free(bias);
    free(res);
    free(scale);
    free(shift);
}

int main(void)
{
    test_fused_matmul();
    test_fused_matmul_residual();
    test_matmul_shapes();
    test_matmul_errors();
    test_matmul_f64();
    test_gemm();
    return t_finish("test_matmul");
}
