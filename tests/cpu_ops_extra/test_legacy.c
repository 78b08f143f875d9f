/*
 * The early opset versions (src/ops/legacy.c) against direct loops: Add/Sub/
 * Mul/Div/Pow with broadcast=1 and an axis, PRelu-6's per-channel slope,
 * Upsample-7 with its scales attribute, Scatter-9; and their errors.
 */
#include "../cpu_ops_b/op_test.h"

/* A [2,3,4,5] op B placed at `axis` (B's dims = A's dims [axis, axis + rank_b)). */
static void binary_axis(const char *op, int axis, int brank)
{
    int64_t ad[4] = {2, 3, 4, 5}, bd[4];
    int64_t an = 120, bn = 1;
    for (int d = 0; d < brank; d++) {
        bd[d] = ad[axis + d];
        bn *= bd[d];
    }
    float *a = t_rand_buf(an, 0.5f, 2.0f), *b = t_rand_buf(bn, 0.5f, 2.0f);
    double *want = malloc(sizeof(double) * (size_t)an);
    for (int64_t i = 0; i < an; i++) {
        int64_t idx[4] = {i / 60, i / 20 % 3, i / 5 % 4, i % 5}, bi = 0;
        for (int d = 0; d < brank; d++)
            bi = bi * bd[d] + idx[axis + d];
        double x = a[i], y = b[bi];
        want[i] = !strcmp(op, "Add") ? x + y : !strcmp(op, "Sub") ? x - y : !strcmp(op, "Mul") ? x * y
                  : !strcmp(op, "Div") ? x / y : pow(x, y);
    }
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, a, 4, ad), t_tensor(S4D_DTYPE_FLOAT32, b, brank, bd)}, out[1];
    s4d_attr attrs[2] = {t_attr_int("broadcast", 1), t_attr_int("axis", axis)};
    int with_axis = axis + brank != 4; /* a suffix needs no axis */
    s4d_status st = t_run_op(op, 6, in, 2, attrs, with_axis ? 2 : 1, out, 1);
    T_CHECK(st == S4D_OK, "%s-6 axis %d rank %d: runs: %s", op, axis, brank, t_err);
    if (st == S4D_OK) {
        T_CHECK(out[0].rank == 4 && out[0].dims[3] == 5, "%s-6: output shape", op);
        T_CLOSE(out[0].data, want, an, 1e-6, 1e-6, "%s-6 axis %d rank %d", op, axis, brank);
    }
    t_free_outputs(out, 1);
    free(a), free(b), free(want);
}

static void test_binary(void)
{
    const char *ops[5] = {"Add", "Sub", "Mul", "Div", "Pow"};
    for (int i = 0; i < 5; i++) {
        binary_axis(ops[i], 1, 1);
        binary_axis(ops[i], 1, 2);
        binary_axis(ops[i], 0, 2);
        binary_axis(ops[i], 2, 2); /* suffix: no axis attribute */
    }
    /* An axis that does not fit. */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {1, 2, 3};
    int64_t ad[2] = {2, 3}, bd[1] = {3};
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, a, 2, ad), t_tensor(S4D_DTYPE_FLOAT32, b, 1, bd)}, out[1];
    s4d_attr attrs[2] = {t_attr_int("broadcast", 1), t_attr_int("axis", 2)};
    T_EXPECT_FAIL(t_run_op("Add", 6, in, 2, attrs, 2, out, 1), S4D_ERR_SHAPE, "axis 2 for rank 2");
}

static void test_prelu(void)
{
    int64_t xd[4] = {2, 3, 4, 5}, sd[1] = {3};
    float *x = t_rand_buf(120, -1, 1), *s = t_rand_buf(3, 0.1f, 0.9f);
    double want[120];
    for (int64_t i = 0; i < 120; i++)
        want[i] = x[i] < 0 ? (double)s[i / 20 % 3] * x[i] : x[i];
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, s, 1, sd)}, out[1];
    s4d_status st = t_run_op("PRelu", 6, in, 2, NULL, 0, out, 1);
    T_CHECK(st == S4D_OK, "PRelu-6 per channel: %s", t_err);
    if (st == S4D_OK)
        T_CLOSE(out[0].data, want, 120, 1e-7, 1e-7, "PRelu-6 per channel");
    t_free_outputs(out, 1);
    free(x), free(s);
}

static void test_upsample(void)
{
    int64_t xd[4] = {1, 2, 3, 4};
    float *x = t_rand_buf(24, -1, 1);
    float scales[4] = {1, 1, 2, 3};
    s4d_attr attrs[2] = {t_attr_string("mode", "nearest"), t_attr_int("unused", 0)};
    attrs[1].name = "scales";
    attrs[1].type = S4D_ATTR_FLOATS;
    attrs[1].floats = scales;
    attrs[1].count = 4;
    double want[144];
    for (int64_t c = 0; c < 2; c++)
        for (int64_t y = 0; y < 6; y++)
            for (int64_t z = 0; z < 12; z++)
                want[(c * 6 + y) * 12 + z] = x[(c * 3 + y / 2) * 4 + z / 3];
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd)}, out[1];
    s4d_status st = t_run_op("Upsample", 7, in, 1, attrs, 2, out, 1);
    T_CHECK(st == S4D_OK, "Upsample-7 nearest: %s", t_err);
    if (st == S4D_OK) {
        T_CHECK(out[0].dims[2] == 6 && out[0].dims[3] == 12, "Upsample-7: output 6x12");
        T_CLOSE(out[0].data, want, 144, 1e-12, 0, "Upsample-7 nearest");
    }
    t_free_outputs(out, 1);
    attrs[0] = t_attr_string("mode", "cubic");
    T_EXPECT_FAIL(t_run_op("Upsample", 7, in, 1, attrs, 2, out, 1), S4D_ERR_UNSUPPORTED, "mode cubic");
    T_EXPECT_FAIL(t_run_op("Upsample", 7, in, 1, attrs + 1, 0, out, 1), S4D_ERR_INVALID_ARG, "no scales");
    free(x);
}

static void test_scatter(void)
{
    int64_t dd[2] = {3, 4}, id[2] = {2, 4};
    float *data = t_rand_buf(12, -1, 1), *upd = t_rand_buf(8, -1, 1);
    int64_t idx[8] = {2, 0, 1, 2, 0, 1, 2, 1};
    double want[12];
    for (int i = 0; i < 12; i++)
        want[i] = data[i];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++)
            want[idx[r * 4 + c] * 4 + c] = upd[r * 4 + c];
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, data, 2, dd), t_tensor(S4D_DTYPE_INT64, idx, 2, id),
                        t_tensor(S4D_DTYPE_FLOAT32, upd, 2, id)},
               out[1];
    s4d_attr axis = t_attr_int("axis", 0);
    s4d_status st = t_run_op("Scatter", 9, in, 3, &axis, 1, out, 1);
    T_CHECK(st == S4D_OK, "Scatter-9: %s", t_err);
    if (st == S4D_OK)
        T_CLOSE(out[0].data, want, 12, 1e-12, 0, "Scatter-9 along axis 0");
    t_free_outputs(out, 1);
    free(data), free(upd);
}

int main(void)
{
    test_binary();
    test_prelu();
    test_upsample();
    test_scatter();
    return t_finish("test_legacy");
}
