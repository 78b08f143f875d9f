/* MaxPool, AveragePool and the global pools against float64 references. */
#include "op_test.h"

typedef struct pool_case {
    int nsp, is_max;
    int64_t n, c, in[3], k[3], stride[3], dil[3], pad[6];
    const char *auto_pad;
    int ceil_mode, count_include_pad, indices, storage_order;
} pool_case;

static void run_case(const pool_case *pc)
{
    int nsp = pc->nsp;
    int64_t pb[3], pe[3], out[3];
    for (int i = 0; i < nsp; i++) {
        int64_t ext = pc->dil[i] * (pc->k[i] - 1) + 1;
        if (pc->auto_pad) {
            out[i] = (pc->in[i] + pc->stride[i] - 1) / pc->stride[i];
            int64_t tot = (out[i] - 1) * pc->stride[i] + ext - pc->in[i];
            tot = tot < 0 ? 0 : tot;
            pb[i] = strcmp(pc->auto_pad, "SAME_UPPER") == 0 ? tot / 2 : tot - tot / 2;
            pe[i] = tot - pb[i];
        } else {
            pb[i] = pc->pad[i];
            pe[i] = pc->pad[nsp + i];
            double span = (double)(pc->in[i] + pb[i] + pe[i] - ext) / (double)pc->stride[i];
            out[i] = (int64_t)(pc->ceil_mode ? ceil(span) : floor(span)) + 1;
            if (pc->ceil_mode && (out[i] - 1) * pc->stride[i] >= pc->in[i] + pb[i])
                out[i]--;
        }
    }
    int64_t xd[5] = {pc->n, pc->c}, yd[5] = {pc->n, pc->c}, nx = pc->n * pc->c, ny = nx;
    int64_t I[3] = {1, 1, 1}, O[3] = {1, 1, 1}, K[3] = {1, 1, 1}, S[3] = {1, 1, 1}, D[3] = {1, 1, 1};
    int64_t PB[3] = {0, 0, 0}, PE[3] = {0, 0, 0};
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        xd[2 + i] = I[j] = pc->in[i];
        yd[2 + i] = O[j] = out[i];
        K[j] = pc->k[i];
        S[j] = pc->stride[i];
        D[j] = pc->dil[i];
        PB[j] = pb[i];
        PE[j] = pe[i];
        nx *= pc->in[i];
        ny *= out[i];
    }
    float *x = t_rand_buf(nx, -5, 5);
    double *ref = malloc(sizeof(double) * (size_t)ny), *ridx = malloc(sizeof(double) * (size_t)ny);
    int64_t plane = I[0] * I[1] * I[2], yi = 0;
    for (int64_t p = 0; p < pc->n * pc->c; p++)
        for (int64_t o0 = 0; o0 < O[0]; o0++)
            for (int64_t o1 = 0; o1 < O[1]; o1++)
                for (int64_t o2 = 0; o2 < O[2]; o2++, yi++) {
                    double best = -1e300, sum = 0;
                    int64_t bi = 0, cnt = 0, cntp = 0;
                    for (int64_t k0 = 0; k0 < K[0]; k0++)
                        for (int64_t k1 = 0; k1 < K[1]; k1++)
                            for (int64_t k2 = 0; k2 < K[2]; k2++) {
                                int64_t i0 = o0 * S[0] - PB[0] + k0 * D[0], i1 = o1 * S[1] - PB[1] + k1 * D[1],
                                        i2 = o2 * S[2] - PB[2] + k2 * D[2];
                                if (i0 >= -PB[0] && i0 < I[0] + PE[0] && i1 >= -PB[1] && i1 < I[1] + PE[1] &&
                                    i2 >= -PB[2] && i2 < I[2] + PE[2])
                                    cntp++;
                                if (i0 < 0 || i0 >= I[0] || i1 < 0 || i1 >= I[1] || i2 < 0 || i2 >= I[2])
                                    continue;
                                double v = x[p * plane + (i0 * I[1] + i1) * I[2] + i2];
                                cnt++;
                                sum += v;
                                if (v > best) {
                                    best = v;
                                    bi = pc->storage_order ? (i2 * I[1] + i1) * I[0] + i0 : (i0 * I[1] + i1) * I[2] + i2;
                                }
                            }
                    ref[yi] = pc->is_max ? best : sum / (double)(pc->count_include_pad ? cntp : cnt);
                    ridx[yi] = (double)(p * plane + bi);
                }
    int64_t ks[3], st[3], dl[3], pads[6];
    for (int i = 0; i < nsp; i++) {
        ks[i] = pc->k[i];
        st[i] = pc->stride[i];
        dl[i] = pc->dil[i];
        pads[i] = pc->pad[i];
        pads[nsp + i] = pc->pad[nsp + i];
    }
    s4d_attr at[8];
    int na = 0;
    at[na++] = t_attr_ints("kernel_shape", ks, (size_t)nsp);
    at[na++] = t_attr_ints("strides", st, (size_t)nsp);
    at[na++] = t_attr_ints("dilations", dl, (size_t)nsp);
    at[na++] = pc->auto_pad ? t_attr_string("auto_pad", pc->auto_pad) : t_attr_ints("pads", pads, (size_t)(2 * nsp));
    at[na++] = t_attr_int("ceil_mode", pc->ceil_mode);
    at[na++] = t_attr_int("count_include_pad", pc->count_include_pad);
    at[na++] = t_attr_int("storage_order", pc->storage_order);
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_FLOAT32, x, nsp + 2, xd)}, o[2];
    int nout = pc->indices ? 2 : 1;
    s4d_status s = t_run_op(pc->is_max ? "MaxPool" : "AveragePool", 12, in, 1, at, na, o, nout);
    T_CHECK(s == S4D_OK, "pool: %s", t_err);
    if (s == S4D_OK) {
        int same = o[0].rank == nsp + 2;
        for (int i = 0; same && i < nsp + 2; i++)
            same = o[0].dims[i] == yd[i];
        T_CHECK(same, "pool dims (max %d, ceil %d)", pc->is_max, pc->ceil_mode);
        if (same)
            T_CLOSE(o[0].data, ref, ny, 1e-6, 1e-5, "pool values max=%d nsp=%d ceil=%d cip=%d", pc->is_max, nsp,
                    pc->ceil_mode, pc->count_include_pad);
        if (same && pc->indices) {
            int ok = o[1].dtype == S4D_DTYPE_INT64;
            for (int64_t i = 0; ok && i < ny; i++)
                ok = ((int64_t *)o[1].data)[i] == (int64_t)ridx[i];
            T_CHECK(ok, "maxpool indices (storage_order %d)", pc->storage_order);
        }
    }
    t_free_outputs(o, nout);
    free(x);
    free(ref);
    free(ridx);
}

static void test_global(void)
{
    int64_t xd[4] = {2, 3, 5, 7}, n = 2 * 3 * 35;
    float *x = t_rand_buf(n, -1, 1);
    double ra[6], rm[6];
    for (int p = 0; p < 6; p++) {
        double s = 0, m = -1e300;
        for (int i = 0; i < 35; i++) {
            s += x[p * 35 + i];
            m = fmax(m, x[p * 35 + i]);
        }
        ra[p] = s / 35;
        rm[p] = m;
    }
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_FLOAT32, x, 4, xd)}, o[1];
    T_CHECK(t_run_op("GlobalAveragePool", 13, in, 1, NULL, 0, o, 1) == S4D_OK, "gap: %s", t_err);
    T_CHECK(o[0].rank == 4 && o[0].dims[1] == 3 && o[0].dims[2] == 1 && o[0].dims[3] == 1, "gap dims");
    T_CLOSE(o[0].data, ra, 6, 1e-6, 1e-5, "gap values");
    t_free_outputs(o, 1);
    T_CHECK(t_run_op("GlobalMaxPool", 13, in, 1, NULL, 0, o, 1) == S4D_OK, "gmp: %s", t_err);
    T_CLOSE(o[0].data, rm, 6, 0, 1e-7, "gmp values");
    t_free_outputs(o, 1);
    in[0].dtype = S4D_DTYPE_INT32;
    T_EXPECT_FAIL(t_run_op("GlobalAveragePool", 13, in, 1, NULL, 0, o, 1), S4D_ERR_DTYPE, "gap int32");
    in[0] = t_tensor(S4D_DTYPE_FLOAT32, x, 2, xd);
    T_EXPECT_FAIL(t_run_op("GlobalAveragePool", 13, in, 1, NULL, 0, o, 1), S4D_ERR_SHAPE, "gap rank 2");
    free(x);
}

static void test_errors(void)
{
    float buf[256] = {1};
    int64_t xd[4] = {1, 1, 4, 4}, ks[2] = {3, 3}, big[2] = {6, 6};
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd)}, o[2];
    T_EXPECT_FAIL(t_run_op("MaxPool", 12, in, 1, NULL, 0, o, 1), S4D_ERR_INVALID_ARG, "no kernel_shape");
    s4d_attr at[1] = {t_attr_ints("kernel_shape", big, 2)};
    T_EXPECT_FAIL(t_run_op("AveragePool", 11, in, 1, at, 1, o, 1), S4D_ERR_SHAPE, "window > input");
    s4d_attr at2[2] = {t_attr_ints("kernel_shape", ks, 2), t_attr_ints("strides", ks, 1)};
    T_EXPECT_FAIL(t_run_op("MaxPool", 12, in, 1, at2, 2, o, 1), S4D_ERR_INVALID_ARG, "strides length");
    T_EXPECT_FAIL(t_run_op("AveragePool", 11, in, 1, at, 1, o, 2), S4D_ERR_INVALID_ARG, "avgpool indices");
}

int main(void)
{
    pool_case cases[] = {
        {2, 1, 2, 3, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL, 0, 0, 0, 0},
        {2, 1, 1, 2, {7, 8}, {3, 2}, {2, 3}, {1, 1}, {1, 0, 1, 1}, NULL, 1, 0, 1, 0},
        {2, 1, 1, 2, {6, 9}, {2, 2}, {1, 2}, {2, 1}, {0, 0, 0, 0}, NULL, 0, 0, 1, 1},
        {2, 1, 1, 2, {6, 9}, {3, 3}, {2, 2}, {1, 1}, {0}, "SAME_UPPER", 0, 0, 0, 0},
        {2, 0, 2, 3, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL, 0, 0, 0, 0},
        {2, 0, 2, 3, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL, 0, 1, 0, 0},
        {2, 0, 1, 2, {8, 7}, {3, 2}, {3, 2}, {1, 1}, {1, 0, 1, 1}, NULL, 1, 1, 0, 0},
        {2, 0, 1, 2, {8, 7}, {3, 2}, {3, 2}, {1, 1}, {1, 0, 1, 1}, NULL, 1, 0, 0, 0},
        {2, 0, 1, 2, {6, 9}, {3, 3}, {2, 2}, {1, 1}, {0}, "SAME_LOWER", 0, 0, 0, 0},
        {1, 1, 2, 2, {11}, {3}, {2}, {1}, {1, 1}, NULL, 0, 0, 0, 0},
        {1, 0, 2, 2, {11}, {4}, {3}, {1}, {0, 2}, NULL, 1, 1, 0, 0},
        {3, 1, 1, 2, {4, 5, 6}, {2, 2, 3}, {2, 1, 2}, {1, 1, 1}, {0, 1, 0, 0, 0, 1}, NULL, 0, 0, 1, 0},
        {3, 0, 1, 2, {4, 5, 6}, {2, 2, 3}, {2, 1, 2}, {1, 1, 1}, {0, 1, 0, 0, 0, 1}, NULL, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_global();
    test_errors();
    return t_finish("test_pool");
}
