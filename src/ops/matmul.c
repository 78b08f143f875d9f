/*
 * MatMul (opset 1, 9, 13): numpy matmul semantics. A 1-D first operand is a
 * row vector and a 1-D second operand a column vector, their unit dimension
 * dropped from the result; leading (batch) dimensions broadcast.
 *
 * FusedMatMul (domain "s4d", built by the fusion passes, never in a user's
 * model): MatMul, then + bias (input 2, [N] or [1, .., N], optional), then the activation
 * attribute ("" or "Relu"), then, with attribute norm = "LayerNormalization",
 * LayerNormalization over the last axis with Scale (input 3, N values) and B
 * (input 4, N values, optional) and attribute epsilon: the head's Linear ->
 * ReLU -> LayerNorm as one layer. Input 5 (optional; inputs 3 and 4 are then
 * missing when the node does not normalise) is a residual of the output's
 * shape and dtype, added after the activation and before the normalisation:
 * the head's feed-forward block identity_fc(x) + mlp(x) -> LayerNorm and the
 * attention's out_proj(o) + query as one layer. The host runs float32 only;
 * its statistics are the LayerNormalization kernel's (double).
 */
#include <string.h>

#include "ops/dense.h"
#include "ops/dense_util.h"
#include "ops/reduce.h"
#include "util/util.h"

typedef s4d_matmul_params mm_shape;

static s4d_status mm_analyse_n(s4d_op_ctx *ctx, int num_inputs, mm_shape *s, int *out_rank,
                               int64_t *out_dims)
{
    if (ctx->num_inputs != num_inputs || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects %d inputs and 1 output, got %d and %d",
                            num_inputs, ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    memset(s, 0, sizeof *s);
    s->dtype = a->dtype;
    if (a->dtype != b->dtype)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "inputs differ in dtype: %s and %s",
                            s4d_dtype_name(a->dtype), s4d_dtype_name(b->dtype));
    /* float16 is inferred for backends that run it (CUDA); the host reference refuses it in run. */
    if (a->dtype != S4D_DTYPE_FLOAT32 && a->dtype != S4D_DTYPE_FLOAT64 && a->dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "dtype %s is not supported (float32, float64; float16 on CUDA)",
                            s4d_dtype_name(a->dtype));
    if (a->rank < 1 || b->rank < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "inputs must have rank >= 1, got %d and %d", a->rank,
                            b->rank);
    int64_t ka = a->dims[a->rank - 1];
    s->m = a->rank >= 2 ? a->dims[a->rank - 2] : 1;
    s->k = b->rank >= 2 ? b->dims[b->rank - 2] : b->dims[0];
    s->n = b->rank >= 2 ? b->dims[b->rank - 1] : 1;
    if (ka != s->k)
        return s4d_op_error(ctx, S4D_ERR_SHAPE,
                            "inner dimensions differ: A has %lld columns, B has %lld rows",
                            (long long)ka, (long long)s->k);
    if (s->m > S4D_HOST_BLAS_MAX_DIM || s->n > S4D_HOST_BLAS_MAX_DIM || s->k > S4D_HOST_BLAS_MAX_DIM)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a matrix dimension exceeds 2^31-1");
    int rba = a->rank >= 2 ? a->rank - 2 : 0, rbb = b->rank >= 2 ? b->rank - 2 : 0;
    s4d_status st = s4d_host_broadcast_shape(ctx, rba, a->dims, rbb, b->dims, &s->batch_rank, s->batch);
    if (st != S4D_OK)
        return st;
    s4d_host_broadcast_strides(rba, a->dims, s->batch_rank, s->batch, s->a_stride);
    s4d_host_broadcast_strides(rbb, b->dims, s->batch_rank, s->batch, s->b_stride);
    s->nbatch = 1;
    int r = 0;
    for (int i = 0; i < s->batch_rank; i++) {
        s->nbatch *= s->batch[i];
        out_dims[r++] = s->batch[i];
    }
    if (a->rank >= 2)
        out_dims[r++] = s->m;
    if (b->rank >= 2)
        out_dims[r++] = s->n;
    *out_rank = r;
    return S4D_OK;
}

static s4d_status mm_analyse(s4d_op_ctx *ctx, mm_shape *s, int *out_rank, int64_t *out_dims)
{
    return mm_analyse_n(ctx, 2, s, out_rank, out_dims);
}

static s4d_status matmul_infer(s4d_op_ctx *ctx)
{
    mm_shape s;
    int rank;
    int64_t dims[S4D_MAX_RANK];
    s4d_status st = mm_analyse(ctx, &s, &rank, dims);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(mm_shape *)ctx->params = s;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = ctx->inputs[0].dtype;
    y->rank = rank;
    memcpy(y->dims, dims, sizeof(int64_t) * (size_t)rank);
    return S4D_OK;
}

typedef struct mm_job {
    struct s4d_threadpool *pool;
    const mm_shape *s;
    int f64;
    const void *a, *b;
    void *y;
} mm_job;

/* Matrix offsets of batch index i in A and B. */
static void mm_offsets(const mm_shape *s, int64_t i, int64_t *oa, int64_t *ob)
{
    int64_t a = 0, b = 0;
    for (int d = s->batch_rank - 1; d >= 0; d--) {
        int64_t c = i % s->batch[d];
        i /= s->batch[d];
        a += c * s->a_stride[d];
        b += c * s->b_stride[d];
    }
    *oa = a;
    *ob = b;
}

static void mm_batches(void *arg, int64_t begin, int64_t end)
{
    const mm_job *j = arg;
    const mm_shape *s = j->s;
    for (int64_t i = begin; i < end; i++) {
        int64_t oa, ob;
        mm_offsets(s, i, &oa, &ob);
        if (j->f64)
            s4d_host_dgemm(j->pool, 0, 0, s->m, s->n, s->k, 1.0, (const double *)j->a + oa * s->m * s->k, s->k,
                          (const double *)j->b + ob * s->k * s->n, s->n, 0.0,
                          (double *)j->y + i * s->m * s->n, s->n);
        else
            s4d_host_sgemm(j->pool, 0, 0, s->m, s->n, s->k, 1.0f, (const float *)j->a + oa * s->m * s->k, s->k,
                          (const float *)j->b + ob * s->k * s->n, s->n, 0.0f,
                          (float *)j->y + i * s->m * s->n, s->n);
    }
}

/* The product itself, shapes already checked. */
static void matmul_compute(s4d_op_ctx *ctx, const mm_shape *sp)
{
    mm_shape s = *sp;
    mm_job j = {ctx->pool, &s, ctx->inputs[0].dtype == S4D_DTYPE_FLOAT64, ctx->inputs[0].data,
                ctx->inputs[1].data, ctx->outputs[0].data};
    if (s.nbatch == 0 || s.m == 0 || s.n == 0)
        return;

    /* B shared by every batch and A dense over them: one tall product (Linear layers). */
    int b_shared = 1, a_dense = 1;
    for (int d = 0; d < s.batch_rank; d++) {
        if (s.b_stride[d] != 0 && s.batch[d] != 1)
            b_shared = 0;
        if (s.a_stride[d] == 0 && s.batch[d] != 1)
            a_dense = 0;
    }
    if (b_shared && a_dense && s.nbatch * s.m <= S4D_HOST_BLAS_MAX_DIM) {
        mm_shape t = s;
        t.m = s.nbatch * s.m;
        t.batch_rank = 0;
        t.nbatch = 1;
        j.s = &t;
        mm_batches(&j, 0, 1);
        return;
    }
    if (s.nbatch > 1 && s4d_host_gemm_is_small(s.m, s.n, s.k))
        s4d_parallel_for(ctx->pool, s.nbatch, 1, mm_batches, &j);
    else
        mm_batches(&j, 0, s.nbatch);
}

static s4d_status matmul_run(s4d_op_ctx *ctx)
{
    mm_shape s;
    if (ctx->params) {
        s = *(const mm_shape *)ctx->params;
    } else {
        int rank;
        int64_t dims[S4D_MAX_RANK];
        s4d_status st = mm_analyse(ctx, &s, &rank, dims);
        if (st != S4D_OK)
            return st;
    }
    if (s.dtype == S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "float16: the host MatMul runs float32 and float64 only");
    matmul_compute(ctx, &s);
    return S4D_OK;
}

const s4d_op_schema s4d_op_matmul = {"", "MatMul", 1, matmul_infer, NULL, matmul_run, sizeof(mm_shape), 0};

static s4d_status fmm_analyse(s4d_op_ctx *ctx, mm_shape *s, int *rank, int64_t *dims)
{
    const char *norm = s4d_op_attr_string(ctx, "norm", "");
    const int has_norm = strcmp(norm, "LayerNormalization") == 0;
    if (!has_norm && norm[0] != '\0')
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "norm '%s' (only LayerNormalization)", norm);
    /* 6 inputs: the residual is input 5, and Scale and B are missing unless the node normalises. */
    const int with_residual = ctx->num_inputs == 6;
    s4d_status st = mm_analyse_n(ctx, with_residual ? 6 : has_norm ? 5 : 3, s, rank, dims);
    if (st != S4D_OK)
        return st;
    const s4d_dtype dt = ctx->inputs[0].dtype;
    if (with_residual && !has_norm && (s4d_host_has_input(ctx, 3) || s4d_host_has_input(ctx, 4)))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "inputs 3 and 4 (the normalisation's Scale and B) are given, but attribute norm is unset");
    s->residual = with_residual && s4d_host_has_input(ctx, 5);
    if (s->residual) {
        const s4d_tensor *r = &ctx->inputs[5];
        int same = r->dtype == dt && r->rank == *rank;
        for (int i = 0; same && i < *rank; i++)
            same = r->dims[i] == dims[i];
        if (!same) {
            char want[200], got[200];
            s4d_dims_str(*rank, dims, want, sizeof want);
            s4d_dims_str(r->rank, r->dims, got, sizeof got);
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "the residual (input 5) must be %s %s like the output, got %s %s",
                                s4d_dtype_name(dt), want, s4d_dtype_name(r->dtype), got);
        }
    }
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "only float32 is supported (float16 on CUDA)");
    s->has_bias = s4d_host_has_input(ctx, 2);
    if (s->has_bias) {
        /* [N], or [1, ..., 1, N] of no higher rank than the output. */
        if (!s4d_host_is_row_vector(&ctx->inputs[2], s->n, *rank, dt))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "the bias must be %s [%lld]", s4d_dtype_name(dt),
                                (long long)s->n);
    }
    const char *act = s4d_op_attr_string(ctx, "activation", "");
    s->relu = strcmp(act, "Relu") == 0;
    if (!s->relu && act[0] != '\0')
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "activation '%s' (only Relu)", act);
    s->norm = has_norm;
    s->norm_bias = has_norm && s4d_host_has_input(ctx, 4);
    s->epsilon = s4d_op_attr_float(ctx, "epsilon", 1e-5f);
    if (has_norm &&
        (!s4d_host_has_input(ctx, 3) || !s4d_host_is_row_vector(&ctx->inputs[3], s->n, *rank, dt) ||
         (s->norm_bias && !s4d_host_is_row_vector(&ctx->inputs[4], s->n, *rank, dt))))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "the normalisation's Scale (and B) must be %s [%lld]",
                            s4d_dtype_name(dt), (long long)s->n);
    if (has_norm && !(s->epsilon >= 0.0f))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "epsilon must be >= 0, got %g", (double)s->epsilon);
    return S4D_OK;
}

static s4d_status fmm_infer(s4d_op_ctx *ctx)
{
    mm_shape s;
    int rank;
    int64_t dims[S4D_MAX_RANK];
    s4d_status st = fmm_analyse(ctx, &s, &rank, dims);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(mm_shape *)ctx->params = s;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = s.dtype;
    y->rank = rank;
    memcpy(y->dims, dims, sizeof(int64_t) * (size_t)rank);
    return S4D_OK;
}

typedef struct fmm_post {
    float *y;
    const float *bias, *scale, *shift; /* scale: LayerNormalization's, when the node normalises */
    const float *res;                  /* the residual, or NULL */
    int64_t n;
    int relu;
    float eps;
} fmm_post;

static void fmm_rows(void *arg, int64_t begin, int64_t end)
{
    const fmm_post *p = arg;
    for (int64_t r = begin; r < end; r++) {
        float *y = p->y + r * p->n;
        for (int64_t i = 0; i < p->n; i++) {
            float v = y[i] + (p->bias ? p->bias[i] : 0.0f);
            v = (p->relu && v < 0.0f) ? 0.0f : v;
            y[i] = p->res ? v + p->res[r * p->n + i] : v;
        }
        if (!p->scale)
            continue;
        float m, is;
        s4d_layernorm_row_stats(y, p->n, p->eps, &m, &is);
        for (int64_t i = 0; i < p->n; i++)
            y[i] = (y[i] - m) * is * p->scale[i] + (p->shift ? p->shift[i] : 0.0f);
    }
}

static s4d_status fmm_run(s4d_op_ctx *ctx)
{
    mm_shape s;
    if (ctx->params) {
        s = *(const mm_shape *)ctx->params;
    } else {
        int rank;
        int64_t dims[S4D_MAX_RANK];
        s4d_status st = fmm_analyse(ctx, &s, &rank, dims);
        if (st != S4D_OK)
            return st;
    }
    if (s.dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "%s: the host FusedMatMul runs float32 only",
                            s4d_dtype_name(s.dtype));
    matmul_compute(ctx, &s);
    fmm_post p = {ctx->outputs[0].data,
                  s.has_bias ? ctx->inputs[2].data : NULL,
                  s.norm ? ctx->inputs[3].data : NULL,
                  s.norm_bias ? ctx->inputs[4].data : NULL,
                  s.residual ? ctx->inputs[5].data : NULL,
                  s.n,
                  s.relu,
                  s.epsilon};
    int64_t rows = s.n ? s4d_tensor_numel(&ctx->outputs[0]) / s.n : 0;
    if (p.bias || s.relu || p.scale || p.res)
        s4d_parallel_for(ctx->pool, rows, 1 + 16384 / (s.n + 1), fmm_rows, &p);
    return S4D_OK;
}

static const s4d_attr_spec fmm_attrs[] = {
    {"activation", S4D_ATTR_STRING}, {"norm", S4D_ATTR_STRING}, {"epsilon", S4D_ATTR_FLOAT}, {NULL}};
const s4d_op_schema s4d_op_fused_matmul = {"s4d", "FusedMatMul", 1, fmm_infer, NULL, fmm_run,
                                           sizeof(mm_shape), 0, fmm_attrs};
