/*
 * RNN, GRU and LSTM (opsets 7 and 14: forward, reverse, bidirectional,
 * initial states, sequence lengths, peepholes, clip, layout, every
 * activation function ONNX names), float32.
 *
 * The input projection X W^T of all time steps is one matrix product per
 * direction; each step then multiplies the previous hidden state by R^T and
 * applies the gates. With sequence lengths, a batch entry stops at its own
 * length: its later outputs are zeros and its final state is the one after
 * its last step (for the reverse direction the first step is at its own
 * length - 1).
 */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/dense_util.h"
#include "ops/extra.h"

typedef s4d_rnn_params rnn_plan;

/* ---- activation functions ---- */

static const struct {
    const char *name;
    s4d_rnn_act act;
    int has_alpha, has_beta;
    float alpha, beta; /* defaults */
} rnn_acts[] = {
    {"relu", S4D_ACT_RELU, 0, 0, 0, 0},
    {"tanh", S4D_ACT_TANH, 0, 0, 0, 0},
    {"sigmoid", S4D_ACT_SIGMOID, 0, 0, 0, 0},
    {"affine", S4D_ACT_AFFINE, 1, 1, 1.0f, 0.0f},
    {"leakyrelu", S4D_ACT_LEAKY_RELU, 1, 0, 0.01f, 0},
    {"thresholdedrelu", S4D_ACT_THRESHOLDED_RELU, 1, 0, 1.0f, 0},
    {"scaledtanh", S4D_ACT_SCALED_TANH, 1, 1, 1.0f, 1.0f},
    {"hardsigmoid", S4D_ACT_HARD_SIGMOID, 1, 1, 0.2f, 0.5f},
    {"elu", S4D_ACT_ELU, 1, 0, 1.0f, 0},
    {"softsign", S4D_ACT_SOFTSIGN, 0, 0, 0, 0},
    {"softplus", S4D_ACT_SOFTPLUS, 0, 0, 0, 0},
};

static float act_apply(int act, float a, float b, float x)
{
    switch ((s4d_rnn_act)act) {
    case S4D_ACT_RELU: return x > 0 ? x : 0;
    case S4D_ACT_TANH: return tanhf(x);
    case S4D_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case S4D_ACT_AFFINE: return a * x + b;
    case S4D_ACT_LEAKY_RELU: return x >= 0 ? x : a * x;
    case S4D_ACT_THRESHOLDED_RELU: return x > a ? x : 0;
    case S4D_ACT_SCALED_TANH: return a * tanhf(b * x);
    case S4D_ACT_HARD_SIGMOID: {
        float v = a * x + b;
        return v < 0 ? 0 : v > 1 ? 1 : v;
    }
    case S4D_ACT_ELU: return x >= 0 ? x : a * (expf(x) - 1.0f);
    case S4D_ACT_SOFTSIGN: return x / (1.0f + fabsf(x));
    case S4D_ACT_SOFTPLUS: return log1pf(expf(-fabsf(x))) + (x > 0 ? x : 0);
    }
    return x;
}

/* The functions of each direction (defaults, or the activations attribute) with their alphas and betas. */
static s4d_status rnn_activations(s4d_op_ctx *ctx, rnn_plan *p)
{
    static const int defaults[3][3] = {
        {S4D_ACT_TANH, 0, 0},
        {S4D_ACT_SIGMOID, S4D_ACT_TANH, 0},
        {S4D_ACT_SIGMOID, S4D_ACT_TANH, S4D_ACT_TANH},
    };
    int per = p->kind == S4D_RNN_SIMPLE ? 1 : p->kind == S4D_RNN_GRU ? 2 : 3;
    p->num_acts = per * p->num_dirs;
    const s4d_attr *names = s4d_op_attr(ctx, "activations");
    const s4d_attr *alphas = s4d_op_attr(ctx, "activation_alpha");
    const s4d_attr *betas = s4d_op_attr(ctx, "activation_beta");
    if (names && names->type != S4D_ATTR_STRINGS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute activations must be strings");
    if (names && (int)names->count != p->num_acts)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "activations lists %zu functions, expected %d (%d per direction)",
                            names->count, p->num_acts, per);
    size_t ai = 0, bi = 0;
    for (int i = 0; i < p->num_acts; i++) {
        if (!names) {
            p->act[i] = defaults[p->kind][i % per];
            p->alpha[i] = p->beta[i] = 0;
            continue;
        }
        char low[32];
        const char *s = names->strings[i] ? names->strings[i] : "";
        size_t n = strlen(s);
        if (n >= sizeof low)
            n = sizeof low - 1;
        for (size_t k = 0; k < n; k++)
            low[k] = (char)tolower((unsigned char)s[k]);
        low[n] = 0;
        size_t f = 0, nf = sizeof rnn_acts / sizeof rnn_acts[0];
        while (f < nf && strcmp(rnn_acts[f].name, low) != 0)
            f++;
        if (f == nf)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "activation function '%s'", s);
        p->act[i] = rnn_acts[f].act;
        /* activation_alpha and _beta are consumed in order by the functions that take them. */
        p->alpha[i] = rnn_acts[f].alpha;
        p->beta[i] = rnn_acts[f].beta;
        if (rnn_acts[f].has_alpha && alphas && alphas->type == S4D_ATTR_FLOATS && ai < alphas->count)
            p->alpha[i] = alphas->floats[ai++];
        if (rnn_acts[f].has_beta && betas && betas->type == S4D_ATTR_FLOATS && bi < betas->count)
            p->beta[i] = betas->floats[bi++];
    }
    return S4D_OK;
}

/* ---- shapes ---- */

static int dims_are(const s4d_tensor *t, int rank, int64_t a, int64_t b, int64_t c)
{
    int64_t want[3] = {a, b, c};
    if (t->rank != rank)
        return 0;
    for (int d = 0; d < rank; d++)
        if (t->dims[d] != want[d])
            return 0;
    return 1;
}

static s4d_status rnn_make(s4d_op_ctx *ctx, s4d_rnn_kind kind, rnn_plan *p)
{
    int max_in = kind == S4D_RNN_LSTM ? 8 : 6, max_out = kind == S4D_RNN_LSTM ? 3 : 2;
    if (ctx->num_inputs < 3 || ctx->num_inputs > max_in || ctx->num_outputs < 1 ||
        ctx->num_outputs > max_out)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "expects 3 to %d inputs and 1 to %d outputs, got %d and %d", max_in,
                            max_out, ctx->num_inputs, ctx->num_outputs);
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->gates = kind == S4D_RNN_SIMPLE ? 1 : kind == S4D_RNN_GRU ? 3 : 4;
    const char *dir = s4d_op_attr_string(ctx, "direction", "forward");
    if (strcmp(dir, "forward") == 0)
        p->num_dirs = 1;
    else if (strcmp(dir, "reverse") == 0)
        p->num_dirs = 1, p->reverse = 1;
    else if (strcmp(dir, "bidirectional") == 0)
        p->num_dirs = 2;
    else
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "direction '%s' (forward, reverse or bidirectional)", dir);
    p->layout = ctx->opset >= 14 ? (int32_t)s4d_op_attr_int(ctx, "layout", 0) : 0;
    if (p->layout != 0 && p->layout != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "layout %d (0 or 1)", p->layout);
    p->linear_before_reset = kind == S4D_RNN_GRU && s4d_op_attr_int(ctx, "linear_before_reset", 0);
    p->input_forget = kind == S4D_RNN_LSTM && s4d_op_attr_int(ctx, "input_forget", 0);
    const s4d_attr *clip = s4d_op_attr(ctx, "clip");
    p->clip = clip && clip->type == S4D_ATTR_FLOAT ? clip->f : 0.0f;
    if (clip && !(p->clip > 0))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "clip %g must be positive", (double)p->clip);
    const s4d_tensor *x = &ctx->inputs[0], *w = &ctx->inputs[1], *r = &ctx->inputs[2];
    for (int i = 0; i < ctx->num_inputs; i++) {
        if (i == 4 || !s4d_in_present(ctx, i))
            continue;
        if (ctx->inputs[i].dtype != S4D_DTYPE_FLOAT32)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d is %s; only float32 is supported", i,
                                s4d_dtype_name(ctx->inputs[i].dtype));
    }
    if (x->rank != 3)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank 3, got %d", x->rank);
    p->seq = p->layout ? x->dims[1] : x->dims[0];
    p->batch = p->layout ? x->dims[0] : x->dims[1];
    p->input = x->dims[2];
    int64_t hattr = s4d_op_attr_int(ctx, "hidden_size", 0);
    p->hidden = w->rank == 3 ? w->dims[1] / p->gates : 0;
    if (hattr > 0 && hattr != p->hidden)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "hidden_size %lld but W gives %lld", (long long)hattr,
                            (long long)p->hidden);
    int64_t D = p->num_dirs, G = p->gates, H = p->hidden, B = p->batch;
    if (H < 1 || !dims_are(w, 3, D, G * H, p->input))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "W must be [%lld, %lld * hidden, %lld]",
                            (long long)D, (long long)G, (long long)p->input);
    if (!dims_are(r, 3, D, G * H, H))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "R must be [%lld, %lld, %lld]", (long long)D,
                            (long long)(G * H), (long long)H);
    p->has_b = s4d_in_present(ctx, 3);
    if (p->has_b && !dims_are(&ctx->inputs[3], 2, D, 2 * G * H, 0))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "B must be [%lld, %lld]", (long long)D,
                            (long long)(2 * G * H));
    p->has_seq_lens = s4d_in_present(ctx, 4);
    if (p->has_seq_lens) {
        const s4d_tensor *sl = &ctx->inputs[4];
        if (sl->dtype != S4D_DTYPE_INT32)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "sequence_lens must be int32, got %s",
                                s4d_dtype_name(sl->dtype));
        if (!dims_are(sl, 1, B, 0, 0))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "sequence_lens must be [%lld]", (long long)B);
    }
    int64_t s0 = p->layout ? B : D, s1 = p->layout ? D : B;
    p->has_h0 = s4d_in_present(ctx, 5);
    if (p->has_h0 && !dims_are(&ctx->inputs[5], 3, s0, s1, H))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "initial_h must be [%lld, %lld, %lld]",
                            (long long)s0, (long long)s1, (long long)H);
    if (kind == S4D_RNN_LSTM) {
        p->has_c0 = s4d_in_present(ctx, 6);
        if (p->has_c0 && !dims_are(&ctx->inputs[6], 3, s0, s1, H))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "initial_c must be [%lld, %lld, %lld]",
                                (long long)s0, (long long)s1, (long long)H);
        p->has_p = s4d_in_present(ctx, 7);
        if (p->has_p && !dims_are(&ctx->inputs[7], 2, D, 3 * H, 0))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "P must be [%lld, %lld]", (long long)D,
                                (long long)(3 * H));
    }
    if (p->seq * p->batch * G * H > S4D_HOST_BLAS_MAX_DIM || p->input > S4D_HOST_BLAS_MAX_DIM)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "sizes past 2^31 elements");
    return rnn_activations(ctx, p);
}

static s4d_status rnn_infer_common(s4d_op_ctx *ctx, s4d_rnn_kind kind)
{
    rnn_plan p;
    s4d_status st = rnn_make(ctx, kind, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(rnn_plan *)ctx->params = p;
    int64_t D = p.num_dirs, B = p.batch, H = p.hidden, T = p.seq;
    int64_t y[4] = {T, D, B, H}, y_l[4] = {B, T, D, H}, s[3] = {D, B, H}, s_l[3] = {B, D, H};
    for (int o = 0; o < ctx->num_outputs; o++) {
        if (o == 0)
            s4d_set_out(ctx, 0, S4D_DTYPE_FLOAT32, 4, p.layout ? y_l : y);
        else
            s4d_set_out(ctx, o, S4D_DTYPE_FLOAT32, 3, p.layout ? s_l : s);
    }
    return S4D_OK;
}

/* Scratch: the input projection of one direction, the recurrent product, h, c and a spare. */
static size_t rnn_ws_floats(const rnn_plan *p)
{
    int64_t G = p->gates, H = p->hidden, B = p->batch;
    return (size_t)(p->seq * B * G * H + B * G * H + 4 * B * H + B);
}

static s4d_status rnn_plan_get(s4d_op_ctx *ctx, s4d_rnn_kind kind, rnn_plan *p)
{
    if (ctx->params) {
        *p = *(const rnn_plan *)ctx->params;
        return S4D_OK;
    }
    return rnn_make(ctx, kind, p);
}

static size_t rnn_ws_common(const s4d_op_ctx *ctx, s4d_rnn_kind kind)
{
    rnn_plan p;
    if (rnn_plan_get((s4d_op_ctx *)ctx, kind, &p) != S4D_OK)
        return 0;
    return sizeof(float) * rnn_ws_floats(&p);
}

static float clipv(float v, float c)
{
    return c > 0 ? (v > c ? c : v < -c ? -c : v) : v;
}

/* One direction d over the whole sequence. */
static void rnn_direction(const s4d_op_ctx *ctx, const rnn_plan *p, int d, int reverse,
                          float *ws)
{
    const int64_t T = p->seq, B = p->batch, H = p->hidden, G = p->gates, I = p->input;
    const int64_t GH = G * H, D = p->num_dirs;
    const float *x = ctx->inputs[0].data;
    const float *w = (const float *)ctx->inputs[1].data + d * GH * I;
    const float *r = (const float *)ctx->inputs[2].data + d * GH * H;
    const float *bw = p->has_b ? (const float *)ctx->inputs[3].data + d * 2 * GH : NULL;
    const float *br = bw ? bw + GH : NULL;
    const int32_t *lens = p->has_seq_lens ? ctx->inputs[4].data : NULL;
    const float *h0 = p->has_h0 ? ctx->inputs[5].data : NULL;
    const float *c0 = p->has_c0 ? ctx->inputs[6].data : NULL;
    const float *peep = p->has_p ? (const float *)ctx->inputs[7].data + d * 3 * H : NULL;
    float *y = ctx->num_outputs > 0 ? ctx->outputs[0].data : NULL;
    float *yh = ctx->num_outputs > 1 ? ctx->outputs[1].data : NULL;
    float *yc = ctx->num_outputs > 2 ? ctx->outputs[2].data : NULL;
    float *xw = ws;                 /* [T * B][GH], rows in X's order */
    float *hr = xw + T * B * GH;    /* [B][GH] */
    float *h = hr + B * GH;         /* [B][H] */
    float *c = h + B * H;
    float *tmp = c + B * H;         /* [B][H] */
    float *hn = tmp + B * H;        /* [B][H] */
    const int *act = p->act + d * (p->num_acts / p->num_dirs);
    const float *al = p->alpha + d * (p->num_acts / p->num_dirs);
    const float *be = p->beta + d * (p->num_acts / p->num_dirs);
    /* X W^T for every step at once (plus the input bias). */
    s4d_host_sgemm(ctx->pool, 0, 1, T * B, GH, I, 1.0f, x, I, w, I, 0.0f, xw, GH);
    if (bw)
        for (int64_t i = 0; i < T * B; i++)
            for (int64_t k = 0; k < GH; k++)
                xw[i * GH + k] += bw[k];
    /* Initial states; layout 1 stores them [B][D][H]. */
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < H; k++) {
            int64_t at = p->layout ? (b * D + d) * H + k : (d * B + b) * H + k;
            h[b * H + k] = h0 ? h0[at] : 0.0f;
            c[b * H + k] = c0 ? c0[at] : 0.0f;
        }
    for (int64_t s = 0; s < T; s++) {
        /* The recurrent product H_prev R^T (GRU's candidate gate later, after the reset). */
        int64_t cols = p->kind == S4D_RNN_GRU && !p->linear_before_reset ? 2 * H : GH;
        s4d_host_sgemm(ctx->pool, 0, 1, B, cols, H, 1.0f, h, H, r, H, 0.0f, hr, GH);
        for (int64_t b = 0; b < B; b++) {
            int64_t len = lens ? lens[b] : T;
            if (len < 0)
                len = 0;
            if (len > T)
                len = T;
            if (s >= len)
                continue;
            int64_t t = reverse ? len - 1 - s : s;
            int64_t row = p->layout ? b * T + t : t * B + b;
            const float *g = xw + row * GH;
            float *rr = hr + b * GH, *hb = h + b * H, *cb = c + b * H;
            switch ((s4d_rnn_kind)p->kind) {
            case S4D_RNN_SIMPLE:
                for (int64_t k = 0; k < H; k++) {
                    float v = g[k] + rr[k] + (br ? br[k] : 0.0f);
                    tmp[b * H + k] = act_apply(act[0], al[0], be[0], clipv(v, p->clip));
                }
                break;
            case S4D_RNN_GRU:
                for (int64_t k = 0; k < H; k++) {
                    float z = g[k] + rr[k] + (br ? br[k] : 0.0f);
                    float rs = g[H + k] + rr[H + k] + (br ? br[H + k] : 0.0f);
                    z = act_apply(act[0], al[0], be[0], clipv(z, p->clip));
                    rs = act_apply(act[0], al[0], be[0], clipv(rs, p->clip));
                    rr[k] = z;      /* keep z; the product's slots are free now */
                    rr[H + k] = rs;
                }
                break;
            case S4D_RNN_LSTM:
                for (int64_t k = 0; k < H; k++) {
                    float vi = g[k] + rr[k] + (br ? br[k] : 0.0f);
                    float vo = g[H + k] + rr[H + k] + (br ? br[H + k] : 0.0f);
                    float vf = g[2 * H + k] + rr[2 * H + k] + (br ? br[2 * H + k] : 0.0f);
                    float vc = g[3 * H + k] + rr[3 * H + k] + (br ? br[3 * H + k] : 0.0f);
                    if (peep) {
                        vi += peep[k] * cb[k];
                        vf += peep[2 * H + k] * cb[k];
                    }
                    float ig = act_apply(act[0], al[0], be[0], clipv(vi, p->clip));
                    float fg = p->input_forget ? 1.0f - ig
                                               : act_apply(act[0], al[0], be[0], clipv(vf, p->clip));
                    float cg = act_apply(act[1], al[1], be[1], clipv(vc, p->clip));
                    float cn = fg * cb[k] + ig * cg;
                    if (peep)
                        vo += peep[H + k] * cn;
                    float og = act_apply(act[0], al[0], be[0], clipv(vo, p->clip));
                    tmp[b * H + k] = og * act_apply(act[2], al[2], be[2], cn);
                    hn[b * H + k] = cn;
                }
                break;
            }
            if (p->kind != S4D_RNN_GRU) {
                memcpy(hb, tmp + b * H, sizeof(float) * (size_t)H);
                if (p->kind == S4D_RNN_LSTM)
                    memcpy(cb, hn + b * H, sizeof(float) * (size_t)H);
            }
        }
        if (p->kind == S4D_RNN_GRU) {
            /* The candidate gate needs r first: (r * h) Rh^T, or r * (h Rh^T + Rbh). */
            const float *rh = r + 2 * H * H;
            const float *brh = br ? br + 2 * H : NULL;
            if (!p->linear_before_reset) {
                for (int64_t b = 0; b < B; b++)
                    for (int64_t k = 0; k < H; k++)
                        tmp[b * H + k] = hr[b * GH + H + k] * h[b * H + k];
                s4d_host_sgemm(ctx->pool, 0, 1, B, H, H, 1.0f, tmp, H, rh, H, 0.0f, hn, H);
            }
            for (int64_t b = 0; b < B; b++) {
                int64_t len = lens ? lens[b] : T;
                len = len < 0 ? 0 : len > T ? T : len;
                if (s >= len)
                    continue;
                int64_t t = reverse ? len - 1 - s : s;
                int64_t row = p->layout ? b * T + t : t * B + b;
                const float *g = xw + row * GH;
                for (int64_t k = 0; k < H; k++) {
                    float z = hr[b * GH + k], rs = hr[b * GH + H + k];
                    float rec = p->linear_before_reset
                                    ? rs * (hr[b * GH + 2 * H + k] + (brh ? brh[k] : 0.0f))
                                    : hn[b * H + k] + (brh ? brh[k] : 0.0f);
                    float v = g[2 * H + k] + rec;
                    float cand = act_apply(act[1], al[1], be[1], clipv(v, p->clip));
                    h[b * H + k] = (1.0f - z) * cand + z * h[b * H + k];
                }
            }
        }
        /* This step's outputs (entries past their length stay zero). */
        if (y)
            for (int64_t b = 0; b < B; b++) {
                int64_t len = lens ? lens[b] : T;
                len = len < 0 ? 0 : len > T ? T : len;
                if (s >= len)
                    continue;
                int64_t t = reverse ? len - 1 - s : s;
                int64_t at = p->layout ? ((b * T + t) * D + d) * H : ((t * D + d) * B + b) * H;
                memcpy(y + at, h + b * H, sizeof(float) * (size_t)H);
            }
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t at = p->layout ? (b * D + d) * H : (d * B + b) * H;
        if (yh)
            memcpy(yh + at, h + b * H, sizeof(float) * (size_t)H);
        if (yc)
            memcpy(yc + at, c + b * H, sizeof(float) * (size_t)H);
    }
}

static s4d_status rnn_run_common(s4d_op_ctx *ctx, s4d_rnn_kind kind)
{
    rnn_plan p;
    s4d_status st = rnn_plan_get(ctx, kind, &p);
    if (st != S4D_OK)
        return st;
    size_t need = sizeof(float) * rnn_ws_floats(&p);
    if (ctx->workspace_size < need || !ctx->workspace)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes, %zu needed",
                            ctx->workspace_size, need);
    if (p.has_seq_lens) {
        const int32_t *lens = ctx->inputs[4].data;
        for (int64_t b = 0; b < p.batch; b++)
            if (lens[b] < 0 || lens[b] > p.seq)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                    "sequence_lens[%lld] = %d is outside [0, %lld]", (long long)b,
                                    (int)lens[b], (long long)p.seq);
    }
    if (ctx->num_outputs > 0 && ctx->outputs[0].data)
        memset(ctx->outputs[0].data, 0, sizeof(float) * (size_t)s4d_tensor_numel(&ctx->outputs[0]));
    for (int d = 0; d < p.num_dirs; d++)
        rnn_direction(ctx, &p, d, p.reverse || d == 1, ctx->workspace);
    return S4D_OK;
}

#define RNN_SCHEMA(NAME, ONNX, KIND)                                                              \
    static s4d_status NAME##_infer(s4d_op_ctx *ctx) { return rnn_infer_common(ctx, KIND); }       \
    static size_t NAME##_ws(const s4d_op_ctx *ctx) { return rnn_ws_common(ctx, KIND); }           \
    static s4d_status NAME##_run(s4d_op_ctx *ctx) { return rnn_run_common(ctx, KIND); }           \
    const s4d_op_schema s4d_op_##NAME = {"", ONNX, 7, NAME##_infer, NAME##_ws, NAME##_run,        \
                                         sizeof(rnn_plan), 0, NAME##_attrs};

/* layout arrived at opset 14; linear_before_reset is GRU's, input_forget LSTM's. */
#define RNN_ATTRS                                                                                 \
    {"activations", S4D_ATTR_STRINGS}, {"activation_alpha", S4D_ATTR_FLOATS},                     \
        {"activation_beta", S4D_ATTR_FLOATS}, {"clip", S4D_ATTR_FLOAT}, {"direction", S4D_ATTR_STRING}, \
        {"hidden_size", S4D_ATTR_INT}, {"layout", S4D_ATTR_INT, S4D_ATTR_BOOL, 14}
static const s4d_attr_spec rnn_attrs[] = {RNN_ATTRS, {NULL}};
static const s4d_attr_spec gru_attrs[] = {RNN_ATTRS, {"linear_before_reset", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
static const s4d_attr_spec lstm_attrs[] = {RNN_ATTRS, {"input_forget", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};

RNN_SCHEMA(rnn, "RNN", S4D_RNN_SIMPLE)
RNN_SCHEMA(gru, "GRU", S4D_RNN_GRU)
RNN_SCHEMA(lstm, "LSTM", S4D_RNN_LSTM)
