/* Conv and FusedConv against a direct float64 convolution. */
#include "op_test.h"

typedef struct conv_case {
    int nsp;
    int64_t n, c, m, group;
    int64_t in[3], k[3], stride[3], dil[3], pad[6]; /* pads: begins then ends */
    const char *auto_pad;                            /* NULL: pads attribute */
    int bias;
    int fused_z, fused_relu;
} conv_case;

/* Explicit pads for auto_pad, computed from the ONNX formulas. */
static void resolve_pads(const conv_case *cc, int64_t *pb, int64_t *pe, int64_t *out)
{
    for (int i = 0; i < cc->nsp; i++) {
        int64_t ext = cc->dil[i] * (cc->k[i] - 1) + 1;
        if (cc->auto_pad && (strcmp(cc->auto_pad, "SAME_UPPER") == 0 || strcmp(cc->auto_pad, "SAME_LOWER") == 0)) {
            out[i] = (cc->in[i] + cc->stride[i] - 1) / cc->stride[i];
            int64_t tot = (out[i] - 1) * cc->stride[i] + ext - cc->in[i];
            if (tot < 0)
                tot = 0;
            pb[i] = strcmp(cc->auto_pad, "SAME_UPPER") == 0 ? tot / 2 : (tot + 1) / 2;
            pe[i] = tot - pb[i];
        } else {
            int valid = cc->auto_pad && strcmp(cc->auto_pad, "VALID") == 0;
            pb[i] = valid ? 0 : cc->pad[i];
            pe[i] = valid ? 0 : cc->pad[cc->nsp + i];
            out[i] = (cc->in[i] + pb[i] + pe[i] - ext) / cc->stride[i] + 1;
        }
    }
}

static void run_case(const conv_case *cc)
{
    int nsp = cc->nsp;
    int64_t pb[3], pe[3], out[3];
    resolve_pads(cc, pb, pe, out);
    int64_t xd[5] = {cc->n, cc->c}, wd[5] = {cc->m, cc->c / cc->group}, yd[5] = {cc->n, cc->m};
    int64_t nx = cc->n * cc->c, nw = cc->m * (cc->c / cc->group), ny = cc->n * cc->m, sp_in = 1, sp_out = 1, kk = 1;
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
        yd[2 + i] = out[i];
        sp_in *= cc->in[i];
        sp_out *= out[i];
        kk *= cc->k[i];
    }
    nx *= sp_in;
    nw *= kk;
    ny *= sp_out;
    float *x = t_rand_buf(nx, -1, 1), *w = t_rand_buf(nw, -1, 1), *b = t_rand_buf(cc->m, -1, 1);
    float *z = t_rand_buf(ny, -1, 1);
    double *ref = calloc((size_t)ny + 1, sizeof(double));
    int64_t cg = cc->c / cc->group, mg = cc->m / cc->group;
    /* Pad unused leading dims to 1 so that one loop nest covers 1-D to 3-D. */
    int64_t I[3] = {1, 1, 1}, K[3] = {1, 1, 1}, O[3] = {1, 1, 1}, S[3] = {1, 1, 1}, D[3] = {1, 1, 1}, P[3] = {0, 0, 0};
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        I[j] = cc->in[i];
        K[j] = cc->k[i];
        O[j] = out[i];
        S[j] = cc->stride[i];
        D[j] = cc->dil[i];
        P[j] = pb[i];
    }
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t m = 0; m < cc->m; m++) {
            int64_t g = m / mg;
            for (int64_t o0 = 0; o0 < O[0]; o0++)
                for (int64_t o1 = 0; o1 < O[1]; o1++)
                    for (int64_t o2 = 0; o2 < O[2]; o2++) {
                        double s = cc->bias ? b[m] : 0.0;
                        for (int64_t ci = 0; ci < cg; ci++)
                            for (int64_t k0 = 0; k0 < K[0]; k0++)
                                for (int64_t k1 = 0; k1 < K[1]; k1++)
                                    for (int64_t k2 = 0; k2 < K[2]; k2++) {
                                        int64_t i0 = o0 * S[0] - P[0] + k0 * D[0];
                                        int64_t i1 = o1 * S[1] - P[1] + k1 * D[1];
                                        int64_t i2 = o2 * S[2] - P[2] + k2 * D[2];
                                        if (i0 < 0 || i0 >= I[0] || i1 < 0 || i1 >= I[1] || i2 < 0 || i2 >= I[2])
                                            continue;
                                        int64_t c = g * cg + ci;
                                        double xv = x[(((n * cc->c + c) * I[0] + i0) * I[1] + i1) * I[2] + i2];
                                        double wv = w[(((m * cg + ci) * K[0] + k0) * K[1] + k1) * K[2] + k2];
                                        s += xv * wv;
                                    }
                        int64_t yi = (((n * cc->m + m) * O[0] + o0) * O[1] + o1) * O[2] + o2;
                        if (cc->fused_z)
                            s += z[yi];
                        if (cc->fused_relu && s < 0)
                            s = 0;
                        ref[yi] = s;
                    }
        }
    int64_t strides[3], dils[3], pads[6], kshape[3];
    for (int i = 0; i < nsp; i++) {
        strides[i] = cc->stride[i];
        dils[i] = cc->dil[i];
        kshape[i] = cc->k[i];
        pads[i] = cc->pad[i];
        pads[nsp + i] = cc->pad[nsp + i];
    }
    s4d_attr at[8];
    int na = 0;
    at[na++] = t_attr_ints("strides", strides, (size_t)nsp);
    at[na++] = t_attr_ints("dilations", dils, (size_t)nsp);
    at[na++] = t_attr_ints("kernel_shape", kshape, (size_t)nsp);
    at[na++] = t_attr_int("group", cc->group);
    if (cc->auto_pad)
        at[na++] = t_attr_string("auto_pad", cc->auto_pad);
    else
        at[na++] = t_attr_ints("pads", pads, (size_t)(2 * nsp));
    int fused = cc->fused_z || cc->fused_relu;
    if (fused)
        at[na++] = t_attr_string("activation", cc->fused_relu ? "Relu" : "");
    int64_t bd[1] = {cc->m};
    s4d_tensor in[4] = {t_tensor(S4D_DTYPE_FLOAT32, x, nsp + 2, xd), t_tensor(S4D_DTYPE_FLOAT32, w, nsp + 2, wd),
                        cc->bias ? t_tensor(S4D_DTYPE_FLOAT32, b, 1, bd) : t_missing(),
                        t_tensor(S4D_DTYPE_FLOAT32, z, nsp + 2, yd)};
    s4d_tensor o[1];
    s4d_status st;
    if (fused) {
        const s4d_op_schema *def = s4d_op_find_schema("s4d", "FusedConv", 1);
        T_CHECK(def != NULL, "FusedConv is registered");
        /* t_run_op looks up the default domain; call through the def directly. */
        s4d_op_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.node_name = "test";
        ctx.op_type = "FusedConv";
        ctx.opset = 1;
        ctx.attrs = at;
        ctx.num_attrs = na;
        ctx.inputs = in;
        ctx.num_inputs = cc->fused_z ? 4 : 3;
        ctx.outputs = o;
        ctx.num_outputs = 1;
        ctx.err = t_err;
        ctx.err_size = sizeof t_err;
        st = def->infer(&ctx);
        if (st == S4D_OK) {
            o[0].data = malloc(sizeof(float) * (size_t)ny);
            size_t ws = def->workspace_size(&ctx);
            ctx.workspace = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
            ctx.workspace_size = ws;
            st = def->run(&ctx);
            free(ctx.workspace);
        }
    } else {
        st = t_run_op("Conv", 11, in, 3, at, na, o, 1);
    }
    T_CHECK(st == S4D_OK, "conv nsp=%d: %s", nsp, t_err);
    if (st == S4D_OK) {
        int same = o[0].rank == nsp + 2;
        for (int i = 0; same && i < nsp + 2; i++)
            same = o[0].dims[i] == yd[i];
        T_CHECK(same, "conv output dims (nsp %d, auto_pad %s)", nsp, cc->auto_pad ? cc->auto_pad : "-");
        if (same)
            T_CLOSE(o[0].data, ref, ny, 1e-4, 1e-4, "conv values nsp=%d group=%lld auto_pad=%s", nsp,
                    (long long)cc->group, cc->auto_pad ? cc->auto_pad : "-");
    }
    t_free_outputs(o, 1);
    free(x);
    free(w);
    free(b);
    free(z);
    free(ref);
}

static void test_errors(void)
{
    float buf[4096] = {1};
    s4d_tensor o[1];
    int64_t xd[] = {1, 4, 6, 6}, wd[] = {6, 4, 3, 3}, wbad[] = {6, 3, 3, 3}, bd[] = {5};
    {
        s4d_attr at[1] = {t_attr_int("group", 3)};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 2, at, 1, o, 1), S4D_ERR_SHAPE, "group not dividing C");
    }
    {
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wbad)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 2, NULL, 0, o, 1), S4D_ERR_SHAPE, "W channels");
    }
    {
        s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd),
                            t_tensor(S4D_DTYPE_FLOAT32, buf, 1, bd)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 3, NULL, 0, o, 1), S4D_ERR_SHAPE, "bias length");
    }
    {
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT64, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT64, buf, 4, wd)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 2, NULL, 0, o, 1), S4D_ERR_DTYPE, "float64 conv");
    }
    {
        s4d_attr at[1] = {t_attr_string("auto_pad", "SAME")};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 2, at, 1, o, 1), S4D_ERR_INVALID_ARG, "bad auto_pad");
    }
    {
        int64_t dil[2] = {4, 4};
        s4d_attr at[1] = {t_attr_ints("dilations", dil, 2)};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 2, at, 1, o, 1), S4D_ERR_SHAPE, "kernel larger than input");
    }
    {
        int64_t st[1] = {1};
        s4d_attr at[1] = {t_attr_ints("strides", st, 1)};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 2, at, 1, o, 1), S4D_ERR_INVALID_ARG, "strides length");
    }
    {
        int64_t ks[2] = {5, 5};
        s4d_attr at[1] = {t_attr_ints("kernel_shape", ks, 2)};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 4, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 4, wd)};
        T_EXPECT_FAIL(t_run_op("Conv", 11, in, 2, at, 1, o, 1), S4D_ERR_SHAPE, "kernel_shape vs W");
    }
}

int main(void)
{
    conv_case cases[] = {
        /* 2-D, padded, bias */
        {2, 2, 3, 5, 1, {7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, 1, 0, 0},
        /* strides, asymmetric pads, dilation */
        {2, 1, 4, 6, 1, {11, 10}, {3, 2}, {2, 3}, {2, 1}, {2, 0, 1, 3}, NULL, 1, 0, 0},
        /* groups */
        {2, 2, 6, 4, 2, {8, 8}, {3, 3}, {1, 2}, {1, 1}, {1, 1, 0, 1}, NULL, 0, 0, 0},
        /* depthwise */
        {2, 1, 5, 5, 5, {9, 7}, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}, NULL, 1, 0, 0},
        /* 1x1 direct path */
        {2, 2, 8, 3, 1, {5, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, NULL, 1, 0, 0},
        /* 1x1 with stride (im2col path) */
        {2, 1, 8, 3, 1, {5, 6}, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, NULL, 1, 0, 0},
        /* auto_pad */
        {2, 1, 3, 4, 1, {7, 8}, {3, 4}, {2, 3}, {1, 1}, {0}, "SAME_UPPER", 1, 0, 0},
        {2, 1, 3, 4, 1, {7, 8}, {3, 4}, {2, 3}, {1, 1}, {0}, "SAME_LOWER", 1, 0, 0},
        {2, 1, 3, 4, 1, {7, 8}, {3, 4}, {2, 1}, {1, 1}, {0}, "VALID", 0, 0, 0},
        /* 1-D and 3-D */
        {1, 2, 3, 4, 1, {13}, {3}, {2}, {2}, {1, 2}, NULL, 1, 0, 0},
        {3, 1, 4, 4, 2, {5, 6, 7}, {2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}, NULL, 1, 0, 0},
        /* ResNet-like 7x7 stride 2 stem */
        {2, 1, 3, 8, 1, {32, 40}, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}, NULL, 0, 0, 0},
        /* FusedConv: residual + Relu, Relu only */
        {2, 2, 4, 6, 1, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, 1, 1, 1},
        {2, 1, 4, 6, 2, {6, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, NULL, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_errors();
    return t_finish("test_conv");
}
