/*
 * RNN, GRU and LSTM against a float64 reference written from the ONNX
 * equations one batch entry and one time step at a time, on random sizes,
 * directions, layouts, sequence lengths, initial states, peepholes, clip,
 * linear_before_reset, input_forget and activation functions; plus errors.
 */
#include "../cpu_ops_b/op_test.h"

#include <stdint.h>

enum { K_RNN, K_GRU, K_LSTM };

typedef struct rcase {
    int kind, dirs, reverse, layout, lbr, input_forget;
    int64_t T, B, I, H;
    int has_b, has_lens, has_h0, has_c0, has_p;
    float clip;
    const char *acts[6];
    int nacts;
    float alphas[6], betas[6];
    int nalpha, nbeta;
} rcase;

static double f_act(const char *name, double a, double b, double x)
{
    if (!strcmp(name, "Tanh")) return tanh(x);
    if (!strcmp(name, "Sigmoid")) return 1.0 / (1.0 + exp(-x));
    if (!strcmp(name, "Relu")) return x > 0 ? x : 0;
    if (!strcmp(name, "LeakyRelu")) return x >= 0 ? x : a * x;
    if (!strcmp(name, "HardSigmoid")) { double v = a * x + b; return v < 0 ? 0 : v > 1 ? 1 : v; }
    if (!strcmp(name, "ScaledTanh")) return a * tanh(b * x);
    if (!strcmp(name, "Affine")) return a * x + b;
    if (!strcmp(name, "Elu")) return x >= 0 ? x : a * (exp(x) - 1);
    if (!strcmp(name, "Softsign")) return x / (1 + fabs(x));
    if (!strcmp(name, "Softplus")) return log(1 + exp(x));
    if (!strcmp(name, "ThresholdedRelu")) return x > a ? x : 0;
    return NAN;
}

static int takes_alpha(const char *n)
{
    return !strcmp(n, "LeakyRelu") || !strcmp(n, "HardSigmoid") || !strcmp(n, "ScaledTanh") ||
           !strcmp(n, "Affine") || !strcmp(n, "Elu") || !strcmp(n, "ThresholdedRelu");
}
static int takes_beta(const char *n)
{
    return !strcmp(n, "HardSigmoid") || !strcmp(n, "ScaledTanh") || !strcmp(n, "Affine");
}
static double def_alpha(const char *n)
{
    return !strcmp(n, "LeakyRelu") ? 0.01 : !strcmp(n, "HardSigmoid") ? 0.2 : 1.0;
}
static double def_beta(const char *n)
{
    return !strcmp(n, "HardSigmoid") ? 0.5 : !strcmp(n, "ScaledTanh") ? 1.0 : 0.0;
}

static double cl(double v, double c)
{
    return c > 0 ? (v > c ? c : v < -c ? -c : v) : v;
}

/* The reference. Outputs y [T][D][B][H] (layout 0 indexing), yh, yc [D][B][H]. */
static void reference(const rcase *k, const float *x, const float *w, const float *r,
                      const float *bias, const int32_t *lens, const float *h0, const float *c0,
                      const float *peep, double *y, double *yh, double *yc)
{
    int64_t T = k->T, B = k->B, I = k->I, H = k->H, D = k->dirs;
    int G = k->kind == K_RNN ? 1 : k->kind == K_GRU ? 3 : 4, per = k->kind == K_RNN ? 1 : k->kind == K_GRU ? 2 : 3;
    static const char *defaults[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    const char *fn[6];
    double al[6], be[6];
    int ai = 0, bi = 0;
    for (int i = 0; i < per * D; i++) {
        fn[i] = k->nacts ? k->acts[i] : defaults[k->kind][i % per];
        al[i] = takes_alpha(fn[i]) && ai < k->nalpha ? k->alphas[ai++] : def_alpha(fn[i]);
        be[i] = takes_beta(fn[i]) && bi < k->nbeta ? k->betas[bi++] : def_beta(fn[i]);
    }
    memset(y, 0, sizeof(double) * (size_t)(T * D * B * H));
    for (int64_t d = 0; d < D; d++) {
        int rev = k->reverse || d == 1;
        const char **f = fn + d * per;
        const double *a = al + d * per, *bb = be + d * per;
        for (int64_t b = 0; b < B; b++) {
            int64_t len = lens ? lens[b] : T;
            double h[64], c[64], hn[64], cn[64];
            for (int64_t j = 0; j < H; j++) {
                int64_t at = k->layout ? (b * D + d) * H + j : (d * B + b) * H + j;
                h[j] = h0 ? h0[at] : 0;
                c[j] = c0 ? c0[at] : 0;
            }
            for (int64_t s = 0; s < len; s++) {
                int64_t t = rev ? len - 1 - s : s;
                const float *xt = x + (k->layout ? (b * T + t) : (t * B + b)) * I;
                /* gate pre-activations: xw[g][j], hr[g][j] */
                double xw[4][64], hrr[4][64];
                for (int g = 0; g < G; g++)
                    for (int64_t j = 0; j < H; j++) {
                        int64_t row = d * G * H + g * H + j;
                        double sx = bias ? bias[d * 2 * G * H + g * H + j] : 0;
                        double sh = bias ? bias[d * 2 * G * H + G * H + g * H + j] : 0;
                        for (int64_t i = 0; i < I; i++)
                            sx += (double)w[row * I + i] * xt[i];
                        for (int64_t i = 0; i < H; i++)
                            sh += (double)r[row * H + i] * h[i];
                        xw[g][j] = sx;
                        hrr[g][j] = sh;
                    }
                for (int64_t j = 0; j < H; j++) {
                    if (k->kind == K_RNN) {
                        hn[j] = f_act(f[0], a[0], bb[0], cl(xw[0][j] + hrr[0][j], k->clip));
                    } else if (k->kind == K_GRU) {
                        double z = f_act(f[0], a[0], bb[0], cl(xw[0][j] + hrr[0][j], k->clip));
                        double rg = f_act(f[0], a[0], bb[0], cl(xw[1][j] + hrr[1][j], k->clip));
                        double rec;
                        if (k->lbr) {
                            rec = rg * hrr[2][j];
                        } else {
                            int64_t row = d * G * H + 2 * H + j;
                            rec = bias ? bias[d * 2 * G * H + G * H + 2 * H + j] : 0;
                            for (int64_t i = 0; i < H; i++) {
                                double rgi = f_act(f[0], a[0], bb[0], cl(xw[1][i] + hrr[1][i], k->clip));
                                rec += (double)r[row * H + i] * rgi * h[i];
                            }
                        }
                        double cand = f_act(f[1], a[1], bb[1], cl(xw[2][j] + rec, k->clip));
                        hn[j] = (1 - z) * cand + z * h[j];
                    } else {
                        const float *P = peep ? peep + d * 3 * H : NULL;
                        double vi = xw[0][j] + hrr[0][j] + (P ? P[j] * c[j] : 0);
                        double vf = xw[2][j] + hrr[2][j] + (P ? P[2 * H + j] * c[j] : 0);
                        double ig = f_act(f[0], a[0], bb[0], cl(vi, k->clip));
                        double fg = k->input_forget ? 1 - ig : f_act(f[0], a[0], bb[0], cl(vf, k->clip));
                        double cg = f_act(f[1], a[1], bb[1], cl(xw[3][j] + hrr[3][j], k->clip));
                        cn[j] = fg * c[j] + ig * cg;
                        double vo = xw[1][j] + hrr[1][j] + (P ? P[H + j] * cn[j] : 0);
                        double og = f_act(f[0], a[0], bb[0], cl(vo, k->clip));
                        hn[j] = og * f_act(f[2], a[2], bb[2], cn[j]);
                    }
                }
                for (int64_t j = 0; j < H; j++) {
                    h[j] = hn[j];
                    if (k->kind == K_LSTM)
                        c[j] = cn[j];
                    y[((t * D + d) * B + b) * H + j] = h[j];
                }
            }
            for (int64_t j = 0; j < H; j++) {
                yh[(d * B + b) * H + j] = h[j];
                yc[(d * B + b) * H + j] = c[j];
            }
        }
    }
}

static void run_rcase(const rcase *k, const char *what)
{
    static const char *ops[3] = {"RNN", "GRU", "LSTM"};
    int64_t T = k->T, B = k->B, I = k->I, H = k->H, D = k->dirs;
    int G = k->kind == K_RNN ? 1 : k->kind == K_GRU ? 3 : 4;
    float *x = t_rand_buf(T * B * I, -1, 1), *w = t_rand_buf(D * G * H * I, -0.7f, 0.7f);
    float *r = t_rand_buf(D * G * H * H, -0.7f, 0.7f), *bias = t_rand_buf(D * 2 * G * H, -0.5f, 0.5f);
    float *h0 = t_rand_buf(D * B * H, -1, 1), *c0 = t_rand_buf(D * B * H, -1, 1);
    float *peep = t_rand_buf(D * 3 * H, -0.5f, 0.5f);
    int32_t lens[16];
    for (int64_t b = 0; b < B; b++)
        lens[b] = k->has_lens ? (int32_t)(t_uniform() * (double)(T + 1)) : (int32_t)T;
    if (k->has_lens)
        lens[0] = (int32_t)T; /* one full-length entry */
    int64_t xd[3] = {k->layout ? B : T, k->layout ? T : B, I}, wd[3] = {D, G * H, I},
            rd[3] = {D, G * H, H}, bd[2] = {D, 2 * G * H}, ld[1] = {B},
            sd[3] = {k->layout ? B : D, k->layout ? D : B, H}, pd[2] = {D, 3 * H};
    s4d_tensor in[8];
    int ni = 3;
    in[0] = t_tensor(S4D_DTYPE_FLOAT32, x, 3, xd);
    in[1] = t_tensor(S4D_DTYPE_FLOAT32, w, 3, wd);
    in[2] = t_tensor(S4D_DTYPE_FLOAT32, r, 3, rd);
    int last = k->has_p ? 7 : k->has_c0 ? 6 : k->has_h0 ? 5 : k->has_lens ? 4 : k->has_b ? 3 : 2;
    for (int i = 3; i <= last; i++)
        in[i] = t_missing();
    if (k->has_b) in[3] = t_tensor(S4D_DTYPE_FLOAT32, bias, 2, bd);
    if (k->has_lens) in[4] = t_tensor(S4D_DTYPE_INT32, lens, 1, ld);
    if (k->has_h0) in[5] = t_tensor(S4D_DTYPE_FLOAT32, h0, 3, sd);
    if (k->has_c0) in[6] = t_tensor(S4D_DTYPE_FLOAT32, c0, 3, sd);
    if (k->has_p) in[7] = t_tensor(S4D_DTYPE_FLOAT32, peep, 2, pd);
    ni = last + 1;
    s4d_attr attrs[10];
    int na = 0;
    static const char *dirn[3] = {"forward", "reverse", "bidirectional"};
    attrs[na++] = t_attr_string("direction", dirn[k->dirs == 2 ? 2 : k->reverse]);
    attrs[na++] = t_attr_int("hidden_size", H);
    attrs[na++] = t_attr_int("layout", k->layout);
    if (k->kind == K_GRU)
        attrs[na++] = t_attr_int("linear_before_reset", k->lbr);
    if (k->kind == K_LSTM)
        attrs[na++] = t_attr_int("input_forget", k->input_forget);
    if (k->clip > 0)
        attrs[na++] = t_attr_float("clip", k->clip);
    s4d_attr acts;
    if (k->nacts) {
        memset(&acts, 0, sizeof acts);
        acts.name = "activations";
        acts.type = S4D_ATTR_STRINGS;
        acts.strings = (char **)k->acts;
        acts.count = (size_t)k->nacts;
        attrs[na++] = acts;
    }
    s4d_attr fa, fb;
    if (k->nalpha) {
        memset(&fa, 0, sizeof fa);
        fa.name = "activation_alpha", fa.type = S4D_ATTR_FLOATS;
        fa.floats = (float *)k->alphas, fa.count = (size_t)k->nalpha;
        attrs[na++] = fa;
    }
    if (k->nbeta) {
        memset(&fb, 0, sizeof fb);
        fb.name = "activation_beta", fb.type = S4D_ATTR_FLOATS;
        fb.floats = (float *)k->betas, fb.count = (size_t)k->nbeta;
        attrs[na++] = fb;
    }
    int nout = k->kind == K_LSTM ? 3 : 2;
    s4d_tensor out[3];
    s4d_status st = t_run_op(ops[k->kind], 14, in, ni, attrs, na, out, nout);
    T_CHECK(st == S4D_OK, "%s: runs: %s", what, t_err);
    if (st == S4D_OK) {
        double *y = malloc(sizeof(double) * (size_t)(T * D * B * H)), *yh = malloc(sizeof(double) * (size_t)(D * B * H)),
               *yc = malloc(sizeof(double) * (size_t)(D * B * H));
        reference(k, x, w, r, k->has_b ? bias : NULL, k->has_lens ? lens : NULL,
                  k->has_h0 ? h0 : NULL, k->has_c0 ? c0 : NULL, k->has_p ? peep : NULL, y, yh, yc);
        /* Bring the reference into the output layout. */
        double *yl = malloc(sizeof(double) * (size_t)(T * D * B * H)), *yhl = malloc(sizeof(double) * (size_t)(D * B * H)),
               *ycl = malloc(sizeof(double) * (size_t)(D * B * H));
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++) {
                        int64_t at = k->layout ? ((b * T + t) * D + d) * H + j : ((t * D + d) * B + b) * H + j;
                        yl[at] = y[((t * D + d) * B + b) * H + j];
                    }
        for (int64_t d = 0; d < D; d++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = 0; j < H; j++) {
                    int64_t at = k->layout ? (b * D + d) * H + j : (d * B + b) * H + j;
                    yhl[at] = yh[(d * B + b) * H + j];
                    ycl[at] = yc[(d * B + b) * H + j];
                }
        T_CLOSE(out[0].data, yl, T * D * B * H, 2e-5, 2e-5, "%s: Y", what);
        T_CLOSE(out[1].data, yhl, D * B * H, 2e-5, 2e-5, "%s: Y_h", what);
        if (nout == 3)
            T_CLOSE(out[2].data, ycl, D * B * H, 2e-5, 2e-5, "%s: Y_c", what);
        free(y), free(yh), free(yc), free(yl), free(yhl), free(ycl);
    }
    t_free_outputs(out, nout);
    free(x), free(w), free(r), free(bias), free(h0), free(c0), free(peep);
}

static void test_random(void)
{
    static const char *names[] = {"Tanh", "Sigmoid", "Relu", "LeakyRelu", "HardSigmoid",
                                  "ScaledTanh", "Affine", "Elu", "Softsign", "Softplus",
                                  "ThresholdedRelu"};
    char what[200];
    for (int it = 0; it < 90; it++) {
        rcase k;
        memset(&k, 0, sizeof k);
        k.kind = it % 3;
        k.dirs = t_uniform() < 0.4 ? 2 : 1;
        k.reverse = k.dirs == 1 && t_uniform() < 0.5;
        k.layout = t_uniform() < 0.3;
        k.lbr = k.kind == K_GRU && t_uniform() < 0.5;
        k.input_forget = k.kind == K_LSTM && t_uniform() < 0.2;
        k.T = 1 + (int64_t)(t_uniform() * 6);
        k.B = 1 + (int64_t)(t_uniform() * 4);
        k.I = 1 + (int64_t)(t_uniform() * 7);
        k.H = 1 + (int64_t)(t_uniform() * 9);
        k.has_b = t_uniform() < 0.7;
        k.has_lens = t_uniform() < 0.4;
        k.has_h0 = t_uniform() < 0.6;
        k.has_c0 = k.kind == K_LSTM && t_uniform() < 0.6;
        k.has_p = k.kind == K_LSTM && t_uniform() < 0.5;
        k.clip = t_uniform() < 0.25 ? 0.8f : 0.0f;
        if (t_uniform() < 0.4) {
            int per = k.kind == K_RNN ? 1 : k.kind == K_GRU ? 2 : 3;
            k.nacts = per * k.dirs;
            for (int i = 0; i < k.nacts; i++)
                k.acts[i] = names[(int)(t_uniform() * 11)];
            k.nalpha = (int)(t_uniform() * 3);
            k.nbeta = (int)(t_uniform() * 3);
            for (int i = 0; i < 6; i++) {
                k.alphas[i] = t_randf(0.1f, 0.9f);
                k.betas[i] = t_randf(0.1f, 0.9f);
            }
        }
        snprintf(what, sizeof what,
                 "%s #%d dirs %d rev %d layout %d T %lld B %lld I %lld H %lld lens %d h0 %d c0 %d "
                 "P %d clip %g lbr %d acts %d",
                 k.kind == K_RNN ? "RNN" : k.kind == K_GRU ? "GRU" : "LSTM", it, k.dirs, k.reverse,
                 k.layout, (long long)k.T, (long long)k.B, (long long)k.I, (long long)k.H,
                 k.has_lens, k.has_h0, k.has_c0, k.has_p, (double)k.clip, k.lbr, k.nacts);
        run_rcase(&k, what);
    }
}

static void test_errors(void)
{
    float buf[256];
    for (int i = 0; i < 256; i++)
        buf[i] = 0.01f * (float)(i + 1);
    int64_t xd[3] = {2, 1, 3}, wd[3] = {1, 8, 3}, rd[3] = {1, 8, 2}, bad_rd[3] = {1, 8, 3};
    s4d_tensor out[3];
    s4d_tensor in[3] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 3, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 3, wd),
                        t_tensor(S4D_DTYPE_FLOAT32, buf, 3, rd)};
    s4d_attr dir = t_attr_string("direction", "sideways");
    T_EXPECT_FAIL(t_run_op("LSTM", 14, in, 3, &dir, 1, out, 3), S4D_ERR_INVALID_ARG, "direction sideways");
    in[2] = t_tensor(S4D_DTYPE_FLOAT32, buf, 3, bad_rd);
    T_EXPECT_FAIL(t_run_op("LSTM", 14, in, 3, NULL, 0, out, 3), S4D_ERR_SHAPE, "R of the wrong shape");
    in[2] = t_tensor(S4D_DTYPE_FLOAT32, buf, 3, rd);
    s4d_attr hs = t_attr_int("hidden_size", 3);
    T_EXPECT_FAIL(t_run_op("LSTM", 14, in, 3, &hs, 1, out, 3), S4D_ERR_SHAPE, "hidden_size against W");
    char *one[1] = {"Swish"};
    s4d_attr acts;
    memset(&acts, 0, sizeof acts);
    acts.name = "activations", acts.type = S4D_ATTR_STRINGS, acts.strings = one, acts.count = 1;
    T_EXPECT_FAIL(t_run_op("LSTM", 14, in, 3, &acts, 1, out, 3), S4D_ERR_INVALID_ARG,
                  "one activation for an LSTM");
    int64_t rnn_wd[3] = {1, 2, 3}, rnn_rd[3] = {1, 2, 2};
    s4d_tensor rin[3] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 3, xd), t_tensor(S4D_DTYPE_FLOAT32, buf, 3, rnn_wd),
                         t_tensor(S4D_DTYPE_FLOAT32, buf, 3, rnn_rd)};
    T_EXPECT_FAIL(t_run_op("RNN", 14, rin, 3, &acts, 1, out, 2), S4D_ERR_UNSUPPORTED,
                  "an unknown activation");
    double dbuf[64] = {1};
    rin[0] = t_tensor(S4D_DTYPE_FLOAT64, dbuf, 3, xd);
    T_EXPECT_FAIL(t_run_op("RNN", 14, rin, 3, NULL, 0, out, 2), S4D_ERR_DTYPE, "float64 X");
    /* Sequence lengths past the sequence: refused when the op runs. */
    rin[0] = t_tensor(S4D_DTYPE_FLOAT32, buf, 3, xd);
    int32_t lens[1] = {5};
    int64_t ld[1] = {1};
    s4d_tensor lin[5] = {rin[0], rin[1], rin[2], t_missing(), t_tensor(S4D_DTYPE_INT32, lens, 1, ld)};
    T_EXPECT_FAIL(t_run_op("RNN", 14, lin, 5, NULL, 0, out, 2), S4D_ERR_INVALID_ARG,
                  "sequence length 5 of 2 steps");
    t_free_outputs(out, 2);
}

int main(void)
{
    test_random();
    test_errors();
    return t_finish("test_rnn");
}
