/*
 * FusedMLP (domain "s4d", opset 1; built by the fusion pass on devices that
 * run it, never in a user's model): a chain of Linear layers, each with an
 * optional bias, ReLU and LayerNormalization over its outputs, applied to
 * every row of X; ops/mlp.h gives the inputs and attributes.
 *
 * The host reference computes layer by layer over all rows, each product
 * accumulated in float32 in k order, the normalisation's statistics in
 * double as the LayerNormalization kernel has them
 * (s4d_layernorm_row_stats). It runs float32 only; float16 is refused at
 * infer, so the precision pass keeps the layer in float32.
 */
#include <math.h>
#include <string.h>

#include "ops/dense_util.h"
#include "ops/mlp.h"
#include "ops/reduce.h"
#include "util/threadpool.h"

typedef s4d_mlp_params mlp_params;

/* A [n] or [1, ..., 1, n] float32 vector. */
static int is_vector(const s4d_tensor *t, int64_t n)
{
    return s4d_host_is_row_vector(t, n, S4D_MAX_RANK, S4D_DTYPE_FLOAT32);
}

static s4d_status flags_attr(s4d_op_ctx *ctx, const char *name, int layers, int *out)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    if (!a || a->count != (size_t)layers)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute %s must hold %d values (one per layer), "
                            "got %zu", name, layers, a ? a->count : (size_t)0);
    for (int i = 0; i < layers; i++) {
        if (a->ints[i] != 0 && a->ints[i] != 1)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "%s[%d] is %lld; 0 or 1 expected", name, i,
                                (long long)a->ints[i]);
        out[i] = (int)a->ints[i];
    }
    return S4D_OK;
}

static s4d_status mlp_analyse(s4d_op_ctx *ctx, mlp_params *p)
{
    memset(p, 0, sizeof *p);
    if (ctx->num_outputs != 1 || ctx->num_inputs < 5 || (ctx->num_inputs - 1) % 4 != 0 ||
        (ctx->num_inputs - 1) / 4 > S4D_MLP_MAX_LAYERS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 1 + 4 x layers inputs (1 to %d layers) and "
                            "1 output, got %d and %d", S4D_MLP_MAX_LAYERS, ctx->num_inputs, ctx->num_outputs);
    const int layers = (ctx->num_inputs - 1) / 4;
    p->layers = layers;
    const s4d_tensor *x = &ctx->inputs[0];
    p->dtype = x->dtype;
    if (x->dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X has dtype %s; only float32 is supported",
                            s4d_dtype_name(x->dtype));
    if (x->rank < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must have rank >= 1, got %d", x->rank);
    s4d_status st = flags_attr(ctx, "activations", layers, p->relu);
    if (st == S4D_OK)
        st = flags_attr(ctx, "norms", layers, p->norm);
    if (st != S4D_OK)
        return st;
    const s4d_attr *eps = s4d_op_attr(ctx, "epsilons");
    if (!eps || eps->count != (size_t)layers)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute epsilons must hold %d values, got %zu", layers,
                            eps ? eps->count : (size_t)0);
    p->x_cols = x->dims[x->rank - 1];
    p->rows = p->x_cols ? s4d_tensor_numel(x) / p->x_cols : 0;
    p->begin = s4d_op_attr_int(ctx, "input_begin", 0);
    int64_t k = -1;
    for (int i = 0; i < layers; i++) {
        const int at = S4D_MLP_INPUT(i);
        const s4d_tensor *w = &ctx->inputs[at];
        if (w->dtype != S4D_DTYPE_FLOAT32 || w->rank != 2 || w->dims[0] < 1 || w->dims[1] < 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "layer %d: W must be a float32 [K, N] matrix with K, N >= 1",
                                i);
        p->k[i] = w->dims[0];
        p->n[i] = w->dims[1];
        if (i == 0) {
            if (p->begin < 0 || p->begin > p->x_cols || p->k[0] > p->x_cols - p->begin)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "layer 0 reads columns [%lld, %lld) of X, which has %lld",
                                    (long long)p->begin, (long long)(p->begin + p->k[0]), (long long)p->x_cols);
        } else if (p->k[i] != k) {
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "layer %d: W has %lld rows but layer %d gives %lld values", i,
                                (long long)p->k[i], i - 1, (long long)k);
        }
        k = p->n[i];
        p->has_bias[i] = s4d_host_has_input(ctx, at + 1);
        if (p->has_bias[i] && !is_vector(&ctx->inputs[at + 1], k))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "layer %d: the bias must be float32 [%lld]", i, (long long)k);
        const int has_scale = s4d_host_has_input(ctx, at + 2);
        p->has_shift[i] = s4d_host_has_input(ctx, at + 3);
        if (has_scale != p->norm[i] || (p->has_shift[i] && !p->norm[i]))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "layer %d: a Scale (and B) is given exactly when the "
                                "layer normalises (norms[%d] = %d)", i, i, p->norm[i]);
        if (p->norm[i] && (!is_vector(&ctx->inputs[at + 2], k) ||
                           (p->has_shift[i] && !is_vector(&ctx->inputs[at + 3], k))))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "layer %d: the normalisation's Scale (and B) must be "
                                "float32 [%lld]", i, (long long)k);
        p->eps[i] = eps->floats[i];
        if (!(p->eps[i] >= 0.0f) || isinf(p->eps[i]))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "layer %d: epsilon must be finite and >= 0, got %g", i,
                                (double)p->eps[i]);
        if (p->n[i] > p->widest)
            p->widest = p->n[i];
    }
    if (p->k[0] > p->widest)
        p->widest = p->k[0];
    /* The host's two row buffers must stay within the engine's tensor bound. */
    if ((double)p->rows * (double)p->widest * 8.0 > (double)((int64_t)1 << 50))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%lld rows of up to %lld values are too many",
                            (long long)p->rows, (long long)p->widest);
    return S4D_OK;
}

static s4d_status mlp_infer(s4d_op_ctx *ctx)
{
    mlp_params p;
    s4d_status st = mlp_analyse(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(mlp_params *)ctx->params = p;
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = p.dtype;
    y->rank = x->rank;
    memcpy(y->dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    y->dims[x->rank - 1] = p.n[p.layers - 1];
    return S4D_OK;
}

/* Two buffers of rows x widest values that the layers pass their rows through. */
static size_t mlp_workspace(const s4d_op_ctx *ctx)
{
    const mlp_params *p = ctx->params;
    return p && p->layers > 1 ? 2 * (size_t)p->rows * (size_t)p->widest * sizeof(float) : 0;
}

typedef struct mlp_job {
    const mlp_params *p;
    int layer;
    const float *in;
    int64_t in_stride;
    float *out;
    const float *w, *bias, *scale, *shift;
} mlp_job;

static void mlp_rows(void *arg, int64_t begin, int64_t end)
{
    const mlp_job *j = arg;
    const int64_t k = j->p->k[j->layer], n = j->p->n[j->layer];
    const int relu = j->p->relu[j->layer];
    for (int64_t r = begin; r < end; r++) {
        const float *a = j->in + r * j->in_stride;
        float *y = j->out + r * n;
        for (int64_t c = 0; c < n; c++) {
            float s = 0.0f;
            for (int64_t q = 0; q < k; q++)
                s += a[q] * j->w[q * n + c];
            s += j->bias ? j->bias[c] : 0.0f;
            y[c] = relu && s < 0.0f ? 0.0f : s;
        }
        if (!j->scale)
            continue;
        float m, is;
        s4d_layernorm_row_stats(y, n, j->p->eps[j->layer], &m, &is);
        for (int64_t c = 0; c < n; c++)
            y[c] = (y[c] - m) * is * j->scale[c] + (j->shift ? j->shift[c] : 0.0f);
    }
}

static s4d_status mlp_run(s4d_op_ctx *ctx)
{
    mlp_params p;
    if (ctx->params) {
        p = *(const mlp_params *)ctx->params;
    } else {
        s4d_status st = mlp_analyse(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    if (p.layers > 1 && ctx->workspace_size < 2 * (size_t)p.rows * (size_t)p.widest * sizeof(float))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the workspace is too small");
    float *buf[2] = {ctx->workspace, ctx->workspace ? (float *)ctx->workspace + p.rows * p.widest : NULL};
    const float *in = (const float *)ctx->inputs[0].data + p.begin;
    int64_t in_stride = p.x_cols;
    for (int i = 0; i < p.layers; i++) {
        const int at = S4D_MLP_INPUT(i);
        mlp_job j = {&p, i, in, in_stride,
                     i == p.layers - 1 ? ctx->outputs[0].data : buf[i % 2],
                     ctx->inputs[at].data,
                     p.has_bias[i] ? ctx->inputs[at + 1].data : NULL,
                     p.norm[i] ? ctx->inputs[at + 2].data : NULL,
                     p.has_shift[i] ? ctx->inputs[at + 3].data : NULL};
        s4d_parallel_for(ctx->pool, p.rows, 1 + 16384 / (p.k[i] * p.n[i] + 1), mlp_rows, &j);
        in = j.out;
        in_stride = p.n[i];
    }
    return S4D_OK;
}

static const s4d_attr_spec mlp_attrs[] = {{"activations", S4D_ATTR_INTS},
                                          {"norms", S4D_ATTR_INTS},
                                          {"epsilons", S4D_ATTR_FLOATS},
                                          {"input_begin", S4D_ATTR_INT},
                                          {NULL}};
const s4d_op_schema s4d_op_fused_mlp = {"s4d", "FusedMLP", 1, mlp_infer, mlp_workspace, mlp_run,
                                        sizeof(mlp_params), 0, mlp_attrs};
