/* TopK against a selection-by-scanning reference, with ties. */
#include "op_test.h"

static void check_topk(int rank, const int64_t *xd, int axis, int64_t k, int largest, int opset)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= xd[i];
    float *x = malloc(sizeof(float) * (size_t)n);
    /* Few distinct values so that ties are common. */
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((int)(t_uniform() * 7) - 3) * 0.5f + 0.25f;
    int ax = axis < 0 ? axis + rank : axis;
    int64_t outer = 1, inner = 1, len = xd[ax];
    for (int i = 0; i < ax; i++)
        outer *= xd[i];
    for (int i = ax + 1; i < rank; i++)
        inner *= xd[i];
    int64_t ny = outer * k * inner;
    double *rv = malloc(sizeof(double) * (size_t)(ny + 1));
    int64_t *ri = malloc(sizeof(int64_t) * (size_t)(ny + 1));
    char *used = malloc((size_t)len);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            memset(used, 0, (size_t)len);
            for (int64_t q = 0; q < k; q++) {
                int64_t best = -1;
                for (int64_t i = 0; i < len; i++) {
                    if (used[i])
                        continue;
                    float v = x[(o * len + i) * inner + in];
                    if (best < 0)
                        best = i;
                    else {
                        float bv = x[(o * len + best) * inner + in];
                        if (largest ? v > bv : v < bv)
                            best = i;
                    }
                }
                used[best] = 1;
                rv[(o * k + q) * inner + in] = x[(o * len + best) * inner + in];
                ri[(o * k + q) * inner + in] = best;
            }
        }
    int64_t kd[1] = {1}, kv[1] = {k};
    s4d_attr at[3] = {t_attr_int("axis", axis), t_attr_int("largest", largest), t_attr_int("k", k)};
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, x, rank, xd), t_tensor(S4D_DTYPE_INT64, kv, 1, kd)}, o[2];
    t_const_mask = 2;
    s4d_status st = t_run_op("TopK", opset, in, opset >= 10 ? 2 : 1, at, opset >= 11 ? 2 : (opset >= 10 ? 1 : 3),
                             o, 2);
    t_const_mask = 0;
    T_CHECK(st == S4D_OK, "topk: %s", t_err);
    if (st == S4D_OK) {
        T_CHECK(o[0].dims[ax] == k && o[1].dtype == S4D_DTYPE_INT64, "topk dims/dtype");
        T_CLOSE(o[0].data, rv, ny, 0, 1e-7, "topk values axis %d largest %d", axis, largest);
        int ok = 1;
        for (int64_t i = 0; i < ny; i++)
            ok &= ((int64_t *)o[1].data)[i] == ri[i];
        T_CHECK(ok, "topk indices stable (axis %d, largest %d, opset %d)", axis, largest, opset);
    }
    t_free_outputs(o, 2);
    free(x);
    free(rv);
    free(ri);
    free(used);
}

static void test_errors(void)
{
    float buf[64] = {1};
    int64_t xd[2] = {3, 4}, kd[1] = {1}, kv[1] = {5}, k2[1] = {2};
    s4d_tensor o[2];
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, xd), t_tensor(S4D_DTYPE_INT64, kv, 1, kd)};
    t_const_mask = 2;
    T_EXPECT_FAIL(t_run_op("TopK", 11, in, 2, NULL, 0, o, 2), S4D_ERR_INVALID_ARG, "k > n");
    in[1].data = k2;
    t_const_mask = 0;
    T_EXPECT_FAIL(t_run_op("TopK", 11, in, 2, NULL, 0, o, 2), S4D_ERR_UNSUPPORTED, "k not constant");
    t_const_mask = 2;
    in[0].dtype = S4D_DTYPE_BOOL;
    T_EXPECT_FAIL(t_run_op("TopK", 11, in, 2, NULL, 0, o, 2), S4D_ERR_DTYPE, "bool");
    in[0].dtype = S4D_DTYPE_FLOAT32;
    s4d_attr at[1] = {t_attr_int("axis", 2)};
    T_EXPECT_FAIL(t_run_op("TopK", 11, in, 2, at, 1, o, 2), S4D_ERR_INVALID_ARG, "axis");
    t_const_mask = 0;
}

static void test_int64(void)
{
    int64_t x[6] = {5, -2, 9, 9, 0, 7}, xd[1] = {6}, kd[1] = {1}, kv[1] = {3};
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_INT64, x, 1, xd), t_tensor(S4D_DTYPE_INT64, kv, 1, kd)}, o[2];
    t_const_mask = 2;
    T_CHECK(t_run_op("TopK", 11, in, 2, NULL, 0, o, 2) == S4D_OK, "topk int64: %s", t_err);
    t_const_mask = 0;
    int64_t *v = o[0].data, *i = o[1].data;
    T_CHECK(v[0] == 9 && v[1] == 9 && v[2] == 7 && i[0] == 2 && i[1] == 3 && i[2] == 5, "topk int64 values");
    t_free_outputs(o, 2);
}

int main(void)
{
    { int64_t d[] = {3, 17}; check_topk(2, d, -1, 5, 1, 11); }
    { int64_t d[] = {3, 17}; check_topk(2, d, 1, 17, 0, 11); }
    { int64_t d[] = {4, 9, 5}; check_topk(3, d, 1, 4, 1, 11); }
    { int64_t d[] = {4, 9, 5}; check_topk(3, d, 0, 2, 0, 11); }
    { int64_t d[] = {2, 900}; check_topk(2, d, 1, 300, 1, 11); }
    { int64_t d[] = {3, 8}; check_topk(2, d, 1, 3, 1, 10); }
    { int64_t d[] = {3, 8}; check_topk(2, d, 1, 3, 1, 1); }
    { int64_t d[] = {3, 8}; check_topk(2, d, 1, 0, 1, 11); }
    test_errors();
    test_int64();
    return t_finish("test_topk");
}
