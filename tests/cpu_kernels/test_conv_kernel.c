/*
 * The CPU backend's own Conv, FusedConv and MaxPool kernels
 * (src/backend/cpu/conv_kernel.c, maxpool_kernel.c) through the kernel
 * interface, as the engine drives them: schema infer, find_kernel, prepare at
 * build, save, prepare again from the payload (load), run on pools of 1 to 3
 * threads. Every result is compared with a float64 direct loop on random
 * inputs; the loaded state must give the built state's bits. Also: the cases
 * left to the host reference, and payloads that are not what the build wrote.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>

#include "../cpu_ops_b/op_test.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "ops/extra.h"

static const char *act_names[] = {"", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Silu", "HardSigmoid",
                                  "HardSwish"};
#define ACT_ALPHA 0.3f  /* Clip min, LeakyRelu and HardSigmoid alpha */
#define ACT_BETA 0.45f  /* Clip max, HardSigmoid beta */

static double ref_act(int act, double v)
{
    double t;
    switch (act) {
    case S4D_CONV_ACT_RELU: return v < 0 ? 0 : v;
    case S4D_CONV_ACT_CLIP: return v < ACT_ALPHA ? ACT_ALPHA : v > ACT_BETA ? ACT_BETA : v;
    case S4D_CONV_ACT_LEAKY_RELU: return v < 0 ? ACT_ALPHA * v : v;
    case S4D_CONV_ACT_SIGMOID: return 1 / (1 + exp(-v));
    case S4D_CONV_ACT_SILU: return v / (1 + exp(-v));
    case S4D_CONV_ACT_HARD_SIGMOID: t = ACT_ALPHA * v + ACT_BETA; return t < 0 ? 0 : t > 1 ? 1 : t;
    case S4D_CONV_ACT_HARD_SWISH: t = v / 6 + 0.5; return v * (t < 0 ? 0 : t > 1 ? 1 : t);
    default: return v;
    }
}

typedef struct conv_case {
    int nsp;               /* 1, 2 or 3 spatial dims */
    int64_t n, c, m, group;
    int64_t in[3], k[3], stride[3], dil[3], pads[6];
    int bias, fused, residual, relu;
    int act;               /* s4d::FusedConvAct's activation (s4d_conv_act), 0: none */
    int weight_input;      /* W is not a constant: the host reference runs it */
} conv_case;

/* Output size along spatial dim i. */
static int64_t out_dim(const conv_case *cc, int i)
{
    int64_t ext = cc->dil[i] * (cc->k[i] - 1) + 1;
    return (cc->in[i] + cc->pads[i] + cc->pads[i + cc->nsp] - ext) / cc->stride[i] + 1;
}

/* float64 direct convolution, plus bias, residual and ReLU; also sum |w x| per output. */
static void reference(const conv_case *cc, const float *x, const float *w, const float *b,
                      const float *z, double *y, double *mag)
{
    int64_t od[3] = {1, 1, 1}, id[3] = {1, 1, 1}, kd[3] = {1, 1, 1}, st[3] = {1, 1, 1},
            dl[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
    for (int i = 0; i < cc->nsp; i++) {
        int j = 3 - cc->nsp + i;
        od[j] = out_dim(cc, i);
        id[j] = cc->in[i];
        kd[j] = cc->k[i];
        st[j] = cc->stride[i];
        dl[j] = cc->dil[i];
        pb[j] = cc->pads[i];
    }
    int64_t cg = cc->c / cc->group, mg = cc->m / cc->group;
    int64_t plane_o = od[0] * od[1] * od[2], plane_i = id[0] * id[1] * id[2];
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t m = 0; m < cc->m; m++) {
            int64_t g = m / mg;
            for (int64_t o = 0; o < plane_o; o++) {
                int64_t o0 = o / (od[1] * od[2]), o1 = o / od[2] % od[1], o2 = o % od[2];
                double acc = b ? b[m] : 0.0, am = b ? fabs(b[m]) : 0.0;
                for (int64_t ci = 0; ci < cg; ci++)
                    for (int64_t k0 = 0; k0 < kd[0]; k0++)
                        for (int64_t k1 = 0; k1 < kd[1]; k1++)
                            for (int64_t k2 = 0; k2 < kd[2]; k2++) {
                                int64_t i0 = o0 * st[0] - pb[0] + k0 * dl[0];
                                int64_t i1 = o1 * st[1] - pb[1] + k1 * dl[1];
                                int64_t i2 = o2 * st[2] - pb[2] + k2 * dl[2];
                                if (i0 < 0 || i0 >= id[0] || i1 < 0 || i1 >= id[1] || i2 < 0 ||
                                    i2 >= id[2])
                                    continue;
                                double xv = x[(n * cc->c + g * cg + ci) * plane_i +
                                              (i0 * id[1] + i1) * id[2] + i2];
                                double wv = w[((m * cg + ci) * kd[0] + k0) * kd[1] * kd[2] +
                                              k1 * kd[2] + k2];
                                acc += xv * wv;
                                am += fabs(xv * wv);
                            }
                int64_t at = (n * cc->m + m) * plane_o + o;
                if (z) {
                    acc += z[at];
                    am += fabs(z[at]);
                }
                if (cc->relu && acc < 0)
                    acc = 0;
                acc = ref_act(cc->act, acc);
                y[at] = acc;
                mag[at] = am;
            }
        }
}

static s4d_threadpool *pools[4]; /* index = threads; [1] is NULL (inline) */

typedef struct built {
    s4d_op_ctx ctx;
    s4d_tensor in[4], out[1];
    s4d_attr attrs[8];
    int64_t ks[3], strides[3], dils[3], pads[6];
    unsigned char params[1024];
    char err[1024];
    const s4d_kernel *kernel;
} built;

/* Fills b for the case, runs the schema's infer; 0 on success. */
static int build_ctx(const conv_case *cc, built *b, float *x, float *w, float *bias, float *z)
{
    memset(b, 0, sizeof *b);
    int64_t xd[5] = {cc->n, cc->c}, wd[5] = {cc->m, cc->c / cc->group};
    for (int i = 0; i < cc->nsp; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
        b->ks[i] = cc->k[i];
        b->strides[i] = cc->stride[i];
        b->dils[i] = cc->dil[i];
    }
    for (int i = 0; i < 2 * cc->nsp; i++)
        b->pads[i] = cc->pads[i];
    int ni = 0;
    b->in[ni++] = t_tensor(S4D_DTYPE_FLOAT32, NULL, 2 + cc->nsp, xd);
    b->in[ni++] = t_tensor(S4D_DTYPE_FLOAT32, cc->weight_input ? NULL : w, 2 + cc->nsp, wd);
    int64_t bd[1] = {cc->m};
    if (cc->bias || cc->residual)
        b->in[ni++] = cc->bias ? t_tensor(S4D_DTYPE_FLOAT32, bias, 1, bd) : t_missing();
    if (cc->residual) {
        int64_t zd[5] = {cc->n, cc->m};
        for (int i = 0; i < cc->nsp; i++)
            zd[2 + i] = out_dim(cc, i);
        b->in[ni++] = t_tensor(S4D_DTYPE_FLOAT32, NULL, 2 + cc->nsp, zd);
    }
    int na = 0;
    b->attrs[na++] = t_attr_ints("kernel_shape", b->ks, (size_t)cc->nsp);
    b->attrs[na++] = t_attr_ints("strides", b->strides, (size_t)cc->nsp);
    b->attrs[na++] = t_attr_ints("dilations", b->dils, (size_t)cc->nsp);
    b->attrs[na++] = t_attr_ints("pads", b->pads, (size_t)(2 * cc->nsp));
    b->attrs[na++] = t_attr_int("group", cc->group);
    if (cc->fused && cc->relu)
        b->attrs[na++] = t_attr_string("activation", "Relu");
    if (cc->act) {
        b->attrs[na++] = t_attr_string("activation", act_names[cc->act]);
        b->attrs[na++] = t_attr_float("activation_alpha", ACT_ALPHA);
        b->attrs[na++] = t_attr_float("activation_beta", ACT_BETA);
    }
    const char *domain = cc->fused || cc->act ? "s4d" : "";
    const char *op = cc->act ? "FusedConvAct" : cc->fused ? "FusedConv" : "Conv";
    s4d_op_ctx *c = &b->ctx;
    c->node_name = "conv";
    c->op_type = op;
    c->opset = cc->fused || cc->act ? 1 : 13;
    c->num_attrs = na;
    c->attrs = b->attrs;
    c->num_inputs = ni;
    c->inputs = b->in;
    c->num_outputs = 1;
    c->outputs = b->out;
    c->params = b->params;
    c->err = b->err;
    c->err_size = sizeof b->err;
    c->schema = s4d_op_find_schema(domain, op, c->opset);
    b->out[0].rank = -1;
    if (!c->schema || c->schema->params_size > sizeof b->params)
        return -1;
    if (c->schema->infer(c) != S4D_OK) {
        fprintf(stderr, "infer: %s\n", b->err);
        return -1;
    }
    b->kernel = s4d_backend_cpu()->find_kernel(domain, op, c->opset);
    /* Run-time data. */
    b->in[0].data = x;
    b->in[1].data = w;
    if (cc->residual)
        b->in[ni - 1].data = z;
    return 0;
}

static void *ws_alloc(size_t n)
{
    return n ? aligned_alloc(64, (n + 63) / 64 * 64) : NULL;
}

/* Runs the kernel with state on a pool of `threads`; 0 on success. */
static int run_kernel(built *b, void *state, float *y, int threads)
{
    s4d_op_ctx *c = &b->ctx;
    c->state = state;
    size_t ws = b->kernel->workspace_size ? b->kernel->workspace_size(c) : 0;
    void *wsp = ws_alloc(ws);
    c->workspace = wsp;
    c->workspace_size = ws;
    c->pool = pools[threads];
    b->out[0].data = y;
    b->err[0] = 0;
    s4d_status st = b->kernel->run(c);
    free(wsp);
    if (st != S4D_OK)
        fprintf(stderr, "run: %s\n", b->err);
    return st == S4D_OK ? 0 : -1;
}

static void run_case(const conv_case *cc, int expect_library, const char *what)
{
    int64_t xn = cc->n * cc->c, wn = cc->m * (cc->c / cc->group), yn = cc->n * cc->m;
    for (int i = 0; i < cc->nsp; i++) {
        xn *= cc->in[i];
        wn *= cc->k[i];
        yn *= out_dim(cc, i);
    }
    float *x = t_rand_buf(xn, -1, 1), *w = t_rand_buf(wn, -1, 1), *bias = t_rand_buf(cc->m, -1, 1);
    float *z = t_rand_buf(yn, -1, 1);
    double *ref = malloc(sizeof(double) * (size_t)yn), *mag = malloc(sizeof(double) * (size_t)yn);
    float *y = malloc(sizeof(float) * (size_t)yn), *y0 = malloc(sizeof(float) * (size_t)yn);
    built b;
    if (build_ctx(cc, &b, x, w, bias, z) != 0 || !b.kernel) {
        T_CHECK(0, "%s: builds", what);
        goto out;
    }
    T_CHECK(b.kernel == (cc->act     ? &s4d_cpu_kernel_fused_conv_act
                         : cc->fused ? &s4d_cpu_kernel_fused_conv
                                     : &s4d_cpu_kernel_conv),
            "%s: the CPU backend gives its own convolution kernel", what);
    reference(cc, x, w, cc->bias ? bias : NULL, cc->residual ? z : NULL, ref, mag);
    /* prepare at build: constants carry data, activations do not. */
    void *saved_x = b.in[0].data;
    b.in[0].data = NULL;
    b.in[1].data = cc->weight_input ? NULL : w;
    void *state = NULL, *state2 = NULL;
    s4d_status st = b.kernel->prepare(&b.ctx, NULL, 0, &state);
    T_CHECK(st == S4D_OK, "%s: prepare: %s", what, b.err);
    T_CHECK((state != NULL) == expect_library, "%s: the library %s it", what,
            expect_library ? "runs" : "does not run");
    s4d_wbuf pay;
    memset(&pay, 0, sizeof pay);
    if (state) {
        T_CHECK(b.kernel->save(state, &pay) == S4D_OK && !pay.failed && pay.size == 12,
                "%s: save writes 12 bytes", what);
        st = b.kernel->prepare(&b.ctx, pay.data, pay.size, &state2);
        T_CHECK(st == S4D_OK && state2, "%s: prepare from the payload: %s", what, b.err);
    }
    b.in[0].data = saved_x;
    b.in[1].data = w;
    double tol = 2e-5; /* Winograd F(4x4) rounds through transforms that scale by up to 64 */
    for (int t = 1; t <= 3; t++) {
        memset(y, 0x7f, sizeof(float) * (size_t)yn);
        if (run_kernel(&b, state, y, t) != 0) {
            T_CHECK(0, "%s: runs on %d threads", what, t);
            continue;
        }
        double worst = 0;
        for (int64_t i = 0; i < yn; i++) {
            double e = fabs((double)y[i] - ref[i]) / (mag[i] + 1e-30);
            if (!(e <= worst))
                worst = e;
        }
        T_CHECK(worst <= tol, "%s, %d threads: error %g of sum |w x| (limit %g)", what, t, worst,
                tol);
        if (t == 1)
            memcpy(y0, y, sizeof(float) * (size_t)yn);
    }
    /* The host reference (no state) against the same float64 loops. */
    memset(y, 0x7f, sizeof(float) * (size_t)yn);
    if (run_kernel(&b, NULL, y, 2) == 0) {
        double worst = 0;
        for (int64_t i = 0; i < yn; i++) {
            double e = fabs((double)y[i] - ref[i]) / (mag[i] + 1e-30);
            if (!(e <= worst))
                worst = e;
        }
        T_CHECK(worst <= 2e-6, "%s, host reference: error %g of sum |w x|", what, worst);
    } else {
        T_CHECK(0, "%s: the host reference runs", what);
    }
    if (state2) {
        memset(y, 0x7f, sizeof(float) * (size_t)yn);
        T_CHECK(run_kernel(&b, state2, y, 1) == 0 &&
                    memcmp(y, y0, sizeof(float) * (size_t)yn) == 0,
                "%s: the loaded plan gives the built plan's bits", what);
    }
    if (b.kernel->destroy) {
        b.kernel->destroy(state);
        b.kernel->destroy(state2);
    }
    s4d_wbuf_free(&pay);
out:
    free(x), free(w), free(bias), free(z), free(ref), free(mag), free(y), free(y0);
}

static conv_case make2d(int64_t n, int64_t c, int64_t m, int64_t h, int64_t w, int64_t k,
                        int64_t s, int64_t p, int64_t d, int64_t g)
{
    conv_case cc;
    memset(&cc, 0, sizeof cc);
    cc.nsp = 2;
    cc.n = n, cc.c = c, cc.m = m, cc.group = g;
    cc.in[0] = h, cc.in[1] = w;
    cc.k[0] = cc.k[1] = k;
    cc.stride[0] = cc.stride[1] = s;
    cc.dil[0] = cc.dil[1] = d;
    for (int i = 0; i < 4; i++)
        cc.pads[i] = p;
    cc.bias = 1;
    return cc;
}

static void test_conv_shapes(void)
{
    char what[160];
    /* Winograd (3x3 stride 1), implicit GEMM (1x1, strided, dilated, 7x7), depthwise, groups. */
    const conv_case fixed[] = {
        make2d(1, 16, 24, 13, 17, 3, 1, 1, 1, 1),
        make2d(2, 32, 40, 20, 22, 3, 1, 1, 1, 1),
        make2d(1, 24, 20, 9, 31, 1, 1, 0, 1, 1),
        make2d(1, 8, 16, 23, 19, 3, 2, 1, 1, 1),
        make2d(1, 3, 16, 30, 34, 7, 2, 3, 1, 1),
        make2d(1, 16, 16, 15, 15, 3, 1, 2, 2, 1),
        make2d(1, 24, 24, 14, 18, 3, 1, 1, 1, 24),
        make2d(2, 32, 32, 11, 9, 5, 2, 2, 1, 32),
        make2d(1, 12, 18, 10, 10, 3, 1, 1, 1, 3),
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const conv_case *cc = &fixed[i];
        snprintf(what, sizeof what, "conv %lldx%lld k%lld s%lld g%lld c%lld m%lld",
                 (long long)cc->in[0], (long long)cc->in[1], (long long)cc->k[0],
                 (long long)cc->stride[0], (long long)cc->group, (long long)cc->c,
                 (long long)cc->m);
        run_case(cc, 1, what);
        conv_case f = *cc;
        f.fused = 1, f.residual = 1, f.relu = 1;
        snprintf(what, sizeof what, "fused conv %zu (bias, residual, relu)", i);
        run_case(&f, 1, what);
        f.bias = 0;
        f.residual = 0;
        snprintf(what, sizeof what, "fused conv %zu (relu, no bias)", i);
        run_case(&f, 1, what);
        /* Each FusedConvAct activation, with and without the residual. */
        for (int act = S4D_CONV_ACT_RELU; act <= S4D_CONV_ACT_HARD_SWISH; act++) {
            conv_case a = *cc;
            a.act = act;
            a.residual = act % 2;
            snprintf(what, sizeof what, "fused conv %zu with %s%s", i, act_names[act],
                     a.residual ? " and a residual" : "");
            run_case(&a, 1, what);
        }
    }
    /* Random shapes, asymmetric pads, 1-D among them. */
    for (int r = 0; r < 40; r++) {
        conv_case cc;
        memset(&cc, 0, sizeof cc);
        cc.nsp = r % 4 == 0 ? 1 : 2;
        cc.n = 1 + (int64_t)(t_uniform() * 2);
        int64_t g = t_uniform() < 0.3 ? 1 + (int64_t)(t_uniform() * 3) : 1;
        cc.c = g * (1 + (int64_t)(t_uniform() * 12));
        cc.m = g * (1 + (int64_t)(t_uniform() * 12));
        if (t_uniform() < 0.2)
            g = cc.c = cc.m = 2 + (int64_t)(t_uniform() * 16);
        cc.group = g;
        for (int i = 0; i < cc.nsp; i++) {
            cc.k[i] = 1 + (int64_t)(t_uniform() * 5);
            cc.stride[i] = 1 + (int64_t)(t_uniform() * 2.5);
            cc.dil[i] = t_uniform() < 0.25 ? 2 : 1;
            cc.pads[i] = (int64_t)(t_uniform() * 3);
            cc.pads[i + cc.nsp] = (int64_t)(t_uniform() * 3);
            int64_t ext = cc.dil[i] * (cc.k[i] - 1) + 1;
            cc.in[i] = ext + (int64_t)(t_uniform() * 24);
        }
        cc.bias = t_uniform() < 0.7;
        cc.fused = t_uniform() < 0.5;
        cc.residual = cc.fused && t_uniform() < 0.6;
        cc.relu = cc.fused && t_uniform() < 0.6;
        snprintf(what, sizeof what, "random case %d (%dd, k %lld, g %lld)", r, cc.nsp,
                 (long long)cc.k[0], (long long)cc.group);
        run_case(&cc, 1, what);
    }
}

static void test_host_fallbacks(void)
{
    conv_case cc;
    memset(&cc, 0, sizeof cc);
    cc.nsp = 3;
    cc.n = 1, cc.c = 4, cc.m = 6, cc.group = 1, cc.bias = 1;
    for (int i = 0; i < 3; i++) {
        cc.in[i] = 6 + i;
        cc.k[i] = 3;
        cc.stride[i] = 1;
        cc.dil[i] = 1;
        cc.pads[i] = cc.pads[i + 3] = 1;
    }
    run_case(&cc, 0, "3-D conv (host reference)");
    conv_case d = make2d(1, 8, 8, 10, 10, 3, 1, 1, 1, 1);
    d.weight_input = 1;
    run_case(&d, 0, "weights that are not constants (host reference)");
}

/* Payloads that are not what save wrote: each a clear S4D_ERR_PARSE, no state. */
static void test_bad_payloads(void)
{
    conv_case cc = make2d(1, 8, 8, 10, 10, 1, 1, 0, 1, 1); /* 1x1: Winograd cannot run it */
    float *x = t_rand_buf(800, -1, 1), *w = t_rand_buf(64, -1, 1), *bias = t_rand_buf(8, -1, 1);
    built b;
    if (build_ctx(&cc, &b, x, w, bias, NULL) != 0) {
        T_CHECK(0, "bad payloads: builds");
        return;
    }
    b.in[0].data = NULL;
    struct {
        uint32_t v[4];
        size_t bytes;
        const char *what;
    } bad[] = {
        {{0x56433453u, 1, 1}, 8, "truncated"},
        {{0x56433453u, 1, 1, 0}, 16, "trailing bytes"},
        {{0x12345678u, 1, 1}, 12, "wrong magic"},
        {{0x56433453u, 7, 1}, 12, "unknown version"},
        {{0x56433453u, 1, 9}, 12, "unknown algorithm"},
        {{0x56433453u, 1, 0}, 12, "algorithm AUTO"},
        {{0x56433453u, 1, 3}, 12, "Winograd for a 1x1 convolution"},
        {{0x56433453u, 1, 4}, 12, "depthwise for a dense convolution"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *state = (void *)1;
        b.err[0] = 0;
        s4d_status st = b.kernel->prepare(&b.ctx, bad[i].v, bad[i].bytes, &state);
        T_CHECK(st == S4D_ERR_PARSE && state == NULL && b.err[0],
                "payload %s: S4D_ERR_PARSE with a message (got %d: %s)", bad[i].what, (int)st,
                b.err);
    }
    /* A plan stored for a layer the library does not run (weights no longer constant). */
    b.in[1].data = NULL;
    uint32_t good[3] = {0x56433453u, 1, 1};
    void *state = NULL;
    b.err[0] = 0;
    T_CHECK(b.kernel->prepare(&b.ctx, good, 12, &state) == S4D_ERR_PARSE && !state && b.err[0],
            "a payload for a host-reference layer is refused");
    free(x), free(w), free(bias);
}

/* ---- MaxPool ---- */

static void pool_case(int64_t c, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p,
                      int64_t d, int ceil_mode, int with_indices, int nsp)
{
    char what[128];
    snprintf(what, sizeof what, "maxpool %dd %lldx%lld k%lld s%lld p%lld d%lld ceil %d idx %d",
             nsp, (long long)h, (long long)w, (long long)k, (long long)s, (long long)p,
             (long long)d, ceil_mode, with_indices);
    int64_t xd[4] = {2, c, nsp == 2 ? h : w, w};
    int64_t ks[2] = {k, k}, ss[2] = {s, s}, ds[2] = {d, d}, ps[4] = {p, p, p, p};
    int64_t xn = 2 * c * (nsp == 2 ? h : 1) * w;
    float *x = t_rand_buf(xn, -1, 1);
    s4d_tensor in[1] = {t_tensor(S4D_DTYPE_FLOAT32, NULL, 2 + nsp, xd)}, out[2];
    memset(out, 0, sizeof out);
    out[0].rank = out[1].rank = -1;
    s4d_attr attrs[5] = {t_attr_ints("kernel_shape", ks, (size_t)nsp),
                         t_attr_ints("strides", ss, (size_t)nsp),
                         t_attr_ints("dilations", ds, (size_t)nsp),
                         t_attr_ints("pads", ps, (size_t)(2 * nsp)),
                         t_attr_int("ceil_mode", ceil_mode)};
    unsigned char params[1024];
    char err[512] = "";
    s4d_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.node_name = "pool";
    ctx.op_type = "MaxPool";
    ctx.opset = 12;
    ctx.num_attrs = 5;
    ctx.attrs = attrs;
    ctx.num_inputs = 1;
    ctx.inputs = in;
    ctx.num_outputs = with_indices ? 2 : 1;
    ctx.outputs = out;
    ctx.params = params;
    ctx.err = err;
    ctx.err_size = sizeof err;
    ctx.schema = s4d_op_find_schema("", "MaxPool", 12);
    if (!ctx.schema || ctx.schema->infer(&ctx) != S4D_OK) {
        T_CHECK(0, "%s: infer: %s", what, err);
        free(x);
        return;
    }
    const s4d_kernel *kern = s4d_backend_cpu()->find_kernel("", "MaxPool", 12);
    T_CHECK(kern == &s4d_cpu_kernel_maxpool, "%s: the CPU backend gives its own kernel", what);
    int64_t ho = nsp == 2 ? out[0].dims[2] : 1, wo = out[0].dims[nsp == 2 ? 3 : 2];
    int64_t yn = 2 * c * ho * wo;
    float *y = malloc(sizeof(float) * (size_t)yn);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)yn);
    in[0].data = x;
    out[0].data = y;
    out[1].data = idx;
    size_t ws = kern->workspace_size ? kern->workspace_size(&ctx) : 0;
    void *wsp = ws_alloc(ws);
    ctx.workspace = wsp;
    ctx.workspace_size = ws;
    int64_t hi = nsp == 2 ? h : 1, kh = nsp == 2 ? k : 1, sh = nsp == 2 ? s : 1,
            dh = nsp == 2 ? d : 1, ph = nsp == 2 ? p : 0;
    for (int t = 1; t <= 3; t++) {
        ctx.pool = pools[t];
        memset(y, 0x7f, sizeof(float) * (size_t)yn);
        s4d_status st = kern->run(&ctx);
        T_CHECK(st == S4D_OK, "%s: runs: %s", what, err);
        int bad = 0;
        for (int64_t pl = 0; pl < 2 * c && !bad; pl++)
            for (int64_t oy = 0; oy < ho && !bad; oy++)
                for (int64_t ox = 0; ox < wo && !bad; ox++) {
                    float best = -INFINITY;
                    for (int64_t ky = 0; ky < kh; ky++)
                        for (int64_t kx = 0; kx < k; kx++) {
                            int64_t iy = oy * sh - ph + ky * dh, ix = ox * s - p + kx * d;
                            if (iy >= 0 && iy < hi && ix >= 0 && ix < w &&
                                x[(pl * hi + iy) * w + ix] > best)
                                best = x[(pl * hi + iy) * w + ix];
                        }
                    bad = y[(pl * ho + oy) * wo + ox] != best;
                }
        T_CHECK(!bad, "%s, %d threads: exact maxima", what, t);
    }
    free(wsp), free(x), free(y), free(idx);
}

static void test_maxpool(void)
{
    pool_case(8, 17, 23, 3, 2, 1, 1, 0, 0, 2);
    pool_case(5, 16, 16, 2, 2, 0, 1, 1, 0, 2);
    pool_case(3, 13, 11, 3, 1, 1, 2, 0, 0, 2);
    pool_case(70, 9, 9, 3, 2, 1, 1, 1, 0, 2);
    pool_case(4, 1, 40, 4, 3, 2, 1, 0, 0, 1);
    pool_case(4, 12, 12, 3, 2, 1, 1, 0, 1, 2); /* with Indices: the host reference */
}

int main(void)
{
    /* Plans for widths 1, 2 and 4 whatever this machine has, so a 3-thread
       pool runs the 2-wide plan and every path is taken. */
    setenv("S4D_CPU_PLAN_THREADS", "4", 1);
    unsetenv("S4D_CPU_HOST_ONLY");
    pools[1] = NULL;
    s4d_threadpool_create(2, &pools[2]);
    s4d_threadpool_create(3, &pools[3]);
    test_conv_shapes();
    test_host_fallbacks();
    test_bad_payloads();
    test_maxpool();
    s4d_threadpool_destroy(pools[2]);
    s4d_threadpool_destroy(pools[3]);
    return t_finish("cpu_kernels.conv");
}
