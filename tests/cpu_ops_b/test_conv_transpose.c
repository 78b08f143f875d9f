/* ConvTranspose against a direct float64 scatter. */
#include "op_test.h"

typedef struct ct_case {
    int nsp;
    int64_t n, c, mg, group;
    int64_t in[3], k[3], stride[3], dil[3], pad[6], opad[3];
    int64_t out_shape[3]; /* used when out_shape[0] > 0 */
    const char *auto_pad;
    int bias;
} ct_case;

static void run_case(const ct_case *tc)
{
    int nsp = tc->nsp;
    int64_t pb[3], out[3];
    for (int i = 0; i < nsp; i++) {
        int64_t full = tc->stride[i] * (tc->in[i] - 1) + tc->opad[i] + tc->dil[i] * (tc->k[i] - 1) + 1;
        int64_t want = -1;
        if (tc->out_shape[0] > 0)
            want = tc->out_shape[i];
        else if (tc->auto_pad)
            want = tc->in[i] * tc->stride[i];
        if (want >= 0) {
            int64_t tot = full - want;
            int64_t half = (int64_t)floor((double)tot / 2.0); /* Python's // as in ONNX's reference */
            pb[i] = tc->auto_pad && strcmp(tc->auto_pad, "SAME_UPPER") == 0 ? half : tot - half;
            out[i] = want;
        } else {
            pb[i] = tc->pad[i];
            out[i] = full - tc->pad[i] - tc->pad[nsp + i];
        }
    }
    int64_t m = tc->mg * tc->group, cg = tc->c / tc->group;
    int64_t xd[5] = {tc->n, tc->c}, wd[5] = {tc->c, tc->mg}, nx = tc->n * tc->c, nw = tc->c * tc->mg, ny = tc->n * m;
    int64_t I[3] = {1, 1, 1}, O[3] = {1, 1, 1}, K[3] = {1, 1, 1}, S[3] = {1, 1, 1}, D[3] = {1, 1, 1}, P[3] = {0, 0, 0};
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        xd[2 + i] = I[j] = tc->in[i];
        wd[2 + i] = K[j] = tc->k[i];
        O[j] = out[i];
        S[j] = tc->stride[i];
        D[j] = tc->dil[i];
        P[j] = pb[i];
        nx *= tc->in[i];
        nw *= tc->k[i];
        ny *= out[i];
    }
    float *x = t_rand_buf(nx, -1, 1), *w = t_rand_buf(nw, -1, 1), *b = t_rand_buf(m, -1, 1);
    double *ref = calloc((size_t)ny, sizeof(double));
    for (int64_t n = 0; n < tc->n; n++)
        for (int64_t oc = 0; oc < m; oc++) {
            double *yp = ref + (n * m + oc) * O[0] * O[1] * O[2];
            for (int64_t q = 0; q < O[0] * O[1] * O[2]; q++)
                yp[q] = tc->bias ? b[oc] : 0.0;
            int64_t g = oc / tc->mg, om = oc % tc->mg;
            for (int64_t ci = 0; ci < cg; ci++) {
                int64_t c = g * cg + ci;
                for (int64_t i0 = 0; i0 < I[0]; i0++)
                    for (int64_t i1 = 0; i1 < I[1]; i1++)
                        for (int64_t i2 = 0; i2 < I[2]; i2++) {
                            double xv = x[(((n * tc->c + c) * I[0] + i0) * I[1] + i1) * I[2] + i2];
                            for (int64_t k0 = 0; k0 < K[0]; k0++)
                                for (int64_t k1 = 0; k1 < K[1]; k1++)
                                    for (int64_t k2 = 0; k2 < K[2]; k2++) {
                                        int64_t o0 = i0 * S[0] - P[0] + k0 * D[0], o1 = i1 * S[1] - P[1] + k1 * D[1],
                                                o2 = i2 * S[2] - P[2] + k2 * D[2];
                                        if (o0 < 0 || o0 >= O[0] || o1 < 0 || o1 >= O[1] || o2 < 0 || o2 >= O[2])
                                            continue;
                                        double wv = w[(((c * tc->mg + om) * K[0] + k0) * K[1] + k1) * K[2] + k2];
                                        yp[(o0 * O[1] + o1) * O[2] + o2] += xv * wv;
                                    }
                        }
            }
        }
    int64_t st[3], dl[3], pads[6], op[3], os[3];
    for (int i = 0; i < nsp; i++) {
        st[i] = tc->stride[i];
        dl[i] = tc->dil[i];
        op[i] = tc->opad[i];
        os[i] = tc->out_shape[i];
        pads[i] = tc->pad[i];
        pads[nsp + i] = tc->pad[nsp + i];
    }
    s4d_attr at[8];
    int na = 0;
    at[na++] = t_attr_ints("strides", st, (size_t)nsp);
    at[na++] = t_attr_ints("dilations", dl, (size_t)nsp);
    at[na++] = t_attr_ints("output_padding", op, (size_t)nsp);
    at[na++] = t_attr_int("group", tc->group);
    if (tc->out_shape[0] > 0)
        at[na++] = t_attr_ints("output_shape", os, (size_t)nsp);
    if (tc->auto_pad)
        at[na++] = t_attr_string("auto_pad", tc->auto_pad);
    else if (tc->out_shape[0] <= 0)
        at[na++] = t_attr_ints("pads", pads, (size_t)(2 * nsp));
    int64_t bd[1] = {m};
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, nsp + 2, xd), t_tensor(S4D_DTYPE_FLOAT32, w, nsp + 2, wd),
                        tc->bias ? t_tensor(S4D_DTYPE_FLOAT32, b, 1, bd) : t_missing()};
    s4d_tensor o[1];
    s4d_status s = t_run_op("ConvTranspose", 11, in, 3, at, na, o, 1);
    T_CHECK(s == S4D_OK, "convtranspose: %s", t_err);
    if (s == S4D_OK) {
        int same = o[0].rank == nsp + 2 && o[0].dims[1] == m;
        for (int i = 0; same && i < nsp; i++)
            same = o[0].dims[2 + i] == out[i];
        T_CHECK(same, "convtranspose dims");
        if (same)
            T_CLOSE(o[0].data, ref, ny, 1e-4, 1e-4, "convtranspose values nsp=%d group=%lld", nsp, (long long)tc->group);
    }
    t_free_outputs(o, 1);
    free(x);
    free(w);
    free(b);
    free(ref);
}

int main(void)
{
    ct_case cases[] = {
        {2, 2, 3, 4, 1, {4, 5}, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}, {0, 0}, {0}, NULL, 1},
        {2, 1, 4, 3, 1, {4, 5}, {3, 2}, {2, 3}, {1, 1}, {1, 0, 1, 1}, {1, 2}, {0}, NULL, 1},
        {2, 1, 4, 2, 2, {3, 4}, {3, 3}, {2, 2}, {2, 1}, {1, 1, 0, 1}, {1, 0}, {0}, NULL, 0},
        {2, 1, 2, 3, 1, {3, 4}, {3, 3}, {2, 2}, {1, 1}, {0}, {0, 0}, {0}, "SAME_UPPER", 1},
        {2, 1, 2, 3, 1, {3, 4}, {3, 3}, {2, 2}, {1, 1}, {0}, {0, 0}, {0}, "SAME_LOWER", 1},
        {2, 1, 2, 3, 1, {3, 4}, {3, 3}, {3, 2}, {1, 1}, {0}, {0, 0}, {8, 8}, NULL, 1},
        /* output_shape beyond the kernel's reach: zero rows appended */
        {2, 1, 2, 3, 1, {3, 3}, {3, 3}, {3, 2}, {1, 1}, {0}, {0, 0}, {10, 8}, NULL, 1},
        {1, 2, 3, 2, 1, {6}, {4}, {2}, {1}, {1, 2}, {1}, {0}, NULL, 1},
        {3, 1, 2, 2, 2, {3, 2, 3}, {2, 2, 2}, {2, 1, 2}, {1, 2, 1}, {0, 1, 0, 1, 0, 0}, {0, 0, 1}, {0}, NULL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    float buf[512] = {1};
    int64_t xd[4] = {1, 4, 3, 3}, wd[4] = {3, 2, 3, 3}, bd[1] = {3};
    s4d_tensor o[1];
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd),
                        t_tensor(S4D_DTYPE_FLOAT32, buf, 1, bd)};
    T_EXPECT_FAIL(t_run_op("ConvTranspose", 11, in, 2, NULL, 0, o, 1), S4D_ERR_SHAPE, "W channels vs X");
    int64_t wd2[4] = {4, 2, 3, 3};
    in[1] = t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd2);
    T_EXPECT_FAIL(t_run_op("ConvTranspose", 11, in, 3, NULL, 0, o, 1), S4D_ERR_SHAPE, "bias length");
    int64_t opad[2] = {2, 2};
    s4d_attr a1[1] = {t_attr_ints("output_padding", opad, 2)};
    T_EXPECT_FAIL(t_run_op("ConvTranspose", 11, in, 2, a1, 1, o, 1), S4D_ERR_INVALID_ARG, "output_padding >= stride");
    int64_t zero[2] = {0, 0};
    s4d_attr a2[1] = {t_attr_ints("output_shape", zero, 2)};
    T_EXPECT_FAIL(t_run_op("ConvTranspose", 11, in, 2, a2, 1, o, 1), S4D_ERR_SHAPE, "output_shape 0");
    in[0].dtype = S4D_DTYPE_FLOAT16;
    T_EXPECT_FAIL(t_run_op("ConvTranspose", 11, in, 2, NULL, 0, o, 1), S4D_ERR_DTYPE, "fp16");
    return t_finish("test_conv_transpose");
}
