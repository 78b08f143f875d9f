/*
 * The CPU backend's vectorised activations (src/backend/cpu/eltwise_kernel.c)
 * against float64 on random inputs and on the special values (NaN, infinities,
 * signed zeros, the exp underflow edge, the HardSigmoid corners), for each
 * instruction set this CPU has, lengths that leave a scalar tail, and pools of
 * 1 and 3 threads; plus Clip with bounds known only when run and a Clip of
 * another dtype (the host reference).
 */
#include <stdint.h>

#include "../cpu_ops_b/op_test.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"

static double ref_act(const char *op, double a, double b, double v)
{
    if (v != v)
        return v;
    if (!strcmp(op, "Relu")) return v < 0 ? 0 : v;
    if (!strcmp(op, "LeakyRelu")) return v < 0 ? a * v : v;
    if (!strcmp(op, "Sigmoid")) return 1.0 / (1.0 + exp(-v));
    if (!strcmp(op, "HardSigmoid")) { double t = a * v + b; return t < 0 ? 0 : t > 1 ? 1 : t; }
    if (!strcmp(op, "HardSwish")) { double t = v / 6 + 0.5; return v * (t < 0 ? 0 : t > 1 ? 1 : t); }
    if (!strcmp(op, "Clip")) return v < a ? a : v > b ? b : v;
    return NAN;
}

/* The size of the terms a float32 evaluation rounds: errors are measured against it, since
   a + b near zero keeps only the absolute rounding of its terms. */
static double ref_mag(const char *op, double a, double b, double v)
{
    if (!strcmp(op, "HardSigmoid")) return fabs(a * v) + fabs(b);
    if (!strcmp(op, "HardSwish")) return fabs(v) * (fabs(v) / 6 + 0.5);
    return 0;
}

/* Runs op through the backend's kernel on x (n elements); returns the worst relative error. */
static double run_act(const char *op, int opset, const s4d_attr *attrs, int na, float *x, int64_t n,
                      s4d_threadpool *pool, float *clip_lo, float *clip_hi, double a, double b)
{
    int64_t d[1] = {n}, sd[1] = {1};
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, 1, d)}, out[1];
    int ni = 1;
    if (clip_lo) {
        in[1] = t_tensor(S4D_DTYPE_FLOAT32, clip_lo, 0, sd);
        in[2] = t_tensor(S4D_DTYPE_FLOAT32, clip_hi, 0, sd);
        ni = 3;
    }
    char err[512] = "";
    unsigned char params[512];
    s4d_op_ctx c;
    memset(&c, 0, sizeof c);
    c.node_name = "act";
    c.op_type = op;
    c.opset = opset;
    c.num_attrs = na;
    c.attrs = attrs;
    c.num_inputs = ni;
    c.inputs = in;
    c.num_outputs = 1;
    c.outputs = out;
    c.params = params;
    c.err = err;
    c.err_size = sizeof err;
    c.schema = s4d_op_find_schema("", op, opset);
    out[0].rank = -1;
    /* Bounds unknown at build: read when run. */
    void *save1 = ni > 1 ? in[1].data : NULL, *save2 = ni > 1 ? in[2].data : NULL;
    if (ni > 1)
        in[1].data = in[2].data = NULL;
    if (!c.schema || c.schema->infer(&c) != S4D_OK) {
        T_CHECK(0, "%s: infer: %s", op, err);
        return INFINITY;
    }
    if (ni > 1)
        in[1].data = save1, in[2].data = save2;
    const s4d_kernel *k = s4d_backend_cpu()->find_kernel("", op, opset);
    float *y = malloc(sizeof(float) * (size_t)n);
    memset(y, 0x7f, sizeof(float) * (size_t)n);
    out[0].data = y;
    c.pool = pool;
    s4d_status st = k->run(&c);
    T_CHECK(st == S4D_OK, "%s: runs: %s", op, err);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = ref_act(op, a, b, x[i]);
        double got = y[i];
        double e;
        if (want != want)
            e = got != got ? 0 : INFINITY;
        else if (isinf(want))
            e = got == want ? 0 : INFINITY;
        else
            e = fabs(got - want) / (fmax(fabs(want), ref_mag(op, a, b, x[i])) + 1e-30);
        if (fabs(got - want) < 1e-37)
            e = 0; /* both flushed at the bottom of the range */
        if (!(e <= worst))
            worst = e;
    }
    free(y);
    return worst;
}

int main(void)
{
    s4d_threadpool *pool3 = NULL;
    s4d_threadpool_create(3, &pool3);
    const int64_t n = 70001; /* not a multiple of 16: a scalar tail */
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = t_randf(-12, 12);
    /* Special values and edges at the front (vector lanes) and at the tail. */
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -87.0f, -88.0f, -90.0f, 87.0f,
                             100.0f, -3.0f, 3.0f, -2.5f, 2.5f, 1e-8f, -1e-8f, 6.0f, -6.0f, 0.5f};
    size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < ns; i++) {
        x[i] = special[i];
        x[n - 1 - (int64_t)i] = special[i];
    }
    float lo = -1.25f, hi = 4.5f;
    for (int isa = 1; isa <= 3; isa++) {
        s4d_cpu_eltwise_force_isa(isa);
        for (int t = 0; t < 2; t++) {
            s4d_threadpool *pool = t ? pool3 : NULL;
            s4d_attr leaky = t_attr_float("alpha", 0.07f);
            s4d_attr hs[2] = {t_attr_float("alpha", 0.3f), t_attr_float("beta", 0.45f)};
            s4d_attr clip_old[2] = {t_attr_float("min", -0.5f), t_attr_float("max", 2.0f)};
            struct {
                const char *op;
                int opset;
                const s4d_attr *attrs;
                int na;
                double a, b, tol;
                int clip_inputs;
            } cases[] = {
                {"Relu", 14, NULL, 0, 0, 0, 0, 0},
                {"LeakyRelu", 16, &leaky, 1, 0.07f, 0, 1e-7, 0},
                {"Sigmoid", 13, NULL, 0, 0, 0, 4e-7, 0},
                {"HardSigmoid", 6, hs, 2, 0.3f, 0.45f, 1e-6, 0},
                {"HardSwish", 14, NULL, 0, 0, 0, 1e-6, 0},
                {"Clip", 6, clip_old, 2, -0.5, 2.0, 0, 0},
                {"Clip", 13, NULL, 0, -1.25, 4.5, 0, 1},
            };
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                double w = run_act(cases[c].op, cases[c].opset, cases[c].attrs, cases[c].na, x, n,
                                   pool, cases[c].clip_inputs ? &lo : NULL,
                                   cases[c].clip_inputs ? &hi : NULL, cases[c].a, cases[c].b);
                T_CHECK(w <= cases[c].tol, "%s (opset %d), instruction set %d, %d threads: "
                        "relative error %g above %g", cases[c].op, cases[c].opset, isa, t ? 3 : 1,
                        w, cases[c].tol);
            }
        }
    }
    s4d_cpu_eltwise_force_isa(0);
    /* Another dtype goes to the host reference through the same kernel. */
    double dx[5] = {-2, -0.5, 0, 0.5, 3}, dlo = -1, dhi = 1;
    int64_t d5[1] = {5}, sd[1] = {1};
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT64, dx, 1, d5), t_tensor(S4D_DTYPE_FLOAT64, &dlo, 0, sd),
                        t_tensor(S4D_DTYPE_FLOAT64, &dhi, 0, sd)},
               out[1];
    char err[512] = "";
    unsigned char params[512];
    s4d_op_ctx c;
    memset(&c, 0, sizeof c);
    c.node_name = "clip64", c.op_type = "Clip", c.opset = 13;
    c.num_inputs = 3, c.inputs = in, c.num_outputs = 1, c.outputs = out;
    c.params = params, c.err = err, c.err_size = sizeof err;
    c.schema = s4d_op_find_schema("", "Clip", 13);
    out[0].rank = -1;
    s4d_status st = c.schema->infer(&c);
    double y64[5] = {0};
    out[0].data = y64;
    if (st == S4D_OK)
        st = s4d_backend_cpu()->find_kernel("", "Clip", 13)->run(&c);
    snprintf(t_err, sizeof t_err, "%s", err);
    double want[5] = {-1, -0.5, 0, 0.5, 1};
    T_CHECK(st == S4D_OK, "float64 Clip: %s", t_err);
    if (st == S4D_OK) {
        int bad = 0;
        for (int i = 0; i < 5; i++)
            bad |= y64[i] != want[i];
        T_CHECK(!bad, "float64 Clip values (host reference through the kernel)");
    }
    free(x);
    s4d_threadpool_destroy(pool3);
    return t_finish("cpu_kernels.eltwise");
}
