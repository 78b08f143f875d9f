/*
 * FusedAttention (domain "s4d", opset 1; built by the fusion pass, never in a
 * user's model): inputs Q [..., Nq, D], KT [..., D, Nk], V [..., Nk, Dv] and
 * an optional bool mask (input 3) broadcastable to [..., Nq, Nk]; attributes
 * mask_fill (float, may be -inf) and fill_where_true (0: a false mask entry
 * gets mask_fill, as Where(mask, S, fill); 1: a true one, as
 * Where(mask, fill, S)). Output [..., Nq, Dv] =
 *   Softmax_lastaxis(masked(Q KT)) V
 * with the semantics of that chain of ONNX ops: a row whose scores are all
 * -inf gives NaN, NaN scores make their row NaN. Optional attributes for the
 * chain's neighbours: q_scale (float): Q is Mul(Q, q_scale), each element
 * rounded once as the Mul layer rounds it; swap_out (int 0/1): the output is
 * Transpose'd as [..., Nq, H, Dv], H the last batch dim (rank >= 3).
 *
 * The host reference runs the very computations the unfused layers run on the
 * CPU, in the same order (the same matrix products per batch, the same
 * softmax row code), so that fusing on the CPU changes no output bit; what
 * it saves there is two passes over the score tensor. float16 is inferred
 * for backends that run it (CUDA); the host reference runs float32 only.
 */
#include <math.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/dense_util.h"
#include "ops/reduce.h"
#include "util/util.h"

typedef s4d_attention_params attn_params;

static s4d_status attn_analyse(s4d_op_ctx *ctx, attn_params *p, int *out_rank, int64_t *out_dims)
{
    memset(p, 0, sizeof *p);
    if (ctx->num_inputs < 3 || ctx->num_inputs > 4 || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 3 or 4 inputs and 1 output, got %d and %d",
                            ctx->num_inputs, ctx->num_outputs);
    const s4d_tensor *q = &ctx->inputs[0], *k = &ctx->inputs[1], *v = &ctx->inputs[2];
    const s4d_dtype dt = q->dtype;
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "Q has dtype %s; float32 (float16 on CUDA) expected",
                            s4d_dtype_name(dt));
    if (k->dtype != dt || v->dtype != dt)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "Q, KT and V differ in dtype: %s, %s and %s",
                            s4d_dtype_name(dt), s4d_dtype_name(k->dtype), s4d_dtype_name(v->dtype));
    if (q->rank < 2 || k->rank < 2 || v->rank < 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "Q, KT and V must have rank >= 2, got %d, %d and %d",
                            q->rank, k->rank, v->rank);
    p->dtype = dt;
    p->nq = q->dims[q->rank - 2];
    p->d = q->dims[q->rank - 1];
    p->nk = k->dims[k->rank - 1];
    p->dv = v->dims[v->rank - 1];
    if (k->dims[k->rank - 2] != p->d)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "Q has %lld columns but KT has %lld rows", (long long)p->d,
                            (long long)k->dims[k->rank - 2]);
    if (v->dims[v->rank - 2] != p->nk)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "KT has %lld columns (keys) but V has %lld rows",
                            (long long)p->nk, (long long)v->dims[v->rank - 2]);
    if (p->nq > S4D_HOST_BLAS_MAX_DIM || p->nk > S4D_HOST_BLAS_MAX_DIM || p->d > S4D_HOST_BLAS_MAX_DIM ||
        p->dv > S4D_HOST_BLAS_MAX_DIM)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a matrix dimension exceeds 2^31-1");
    int rq = q->rank - 2, rk = k->rank - 2, rv = v->rank - 2, rqk;
    int64_t qk[S4D_MAX_RANK];
    s4d_status st = s4d_host_broadcast_shape(ctx, rq, q->dims, rk, k->dims, &rqk, qk);
    if (st != S4D_OK)
        return st;
    st = s4d_host_broadcast_shape(ctx, rqk, qk, rv, v->dims, &p->batch_rank, p->batch);
    if (st != S4D_OK)
        return st;
    if (p->batch_rank + 2 > S4D_MAX_RANK)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "the output would have rank %d (at most %d)",
                            p->batch_rank + 2, S4D_MAX_RANK);
    s4d_host_broadcast_strides(rq, q->dims, p->batch_rank, p->batch, p->q_stride);
    s4d_host_broadcast_strides(rk, k->dims, p->batch_rank, p->batch, p->k_stride);
    s4d_host_broadcast_strides(rv, v->dims, p->batch_rank, p->batch, p->v_stride);
    p->nbatch = 1;
    for (int i = 0; i < p->batch_rank; i++) {
        p->nbatch *= p->batch[i];
        out_dims[i] = p->batch[i];
    }
    out_dims[p->batch_rank] = p->nq;
    out_dims[p->batch_rank + 1] = p->dv;
    *out_rank = p->batch_rank + 2;
    const s4d_attr *qs = s4d_op_attr(ctx, "q_scale");
    p->has_q_scale = qs != NULL;
    p->q_scale = qs ? s4d_op_attr_float(ctx, "q_scale", 1.0f) : 1.0f;
    p->swap_out = (int)s4d_op_attr_int(ctx, "swap_out", 0);
    if (p->swap_out) {
        if (p->batch_rank < 1)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "swap_out needs a batch dim to swap with the queries (the output has rank 2)");
        out_dims[p->batch_rank - 1] = p->nq;
        out_dims[p->batch_rank] = p->batch[p->batch_rank - 1];
    }
    /* The scores the unfused chain holds: the host reference keeps them in its workspace. */
    int64_t scores;
    if (s4d_mul_i64(p->nbatch, p->nq, &scores) || s4d_mul_i64(scores, p->nk, &scores) ||
        (uint64_t)scores > S4D_MAX_TENSOR_BYTES / sizeof(float))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "the score tensor [%lld batches, %lld, %lld] is too large",
                            (long long)p->nbatch, (long long)p->nq, (long long)p->nk);

    p->has_mask = s4d_host_has_input(ctx, 3);
    const s4d_attr *fill = s4d_op_attr(ctx, "mask_fill");
    p->fill_where_true = (int)s4d_op_attr_int(ctx, "fill_where_true", 0);
    if (!p->has_mask) {
        if (fill || s4d_op_attr(ctx, "fill_where_true"))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "mask_fill and fill_where_true need a mask (input 3)");
        return S4D_OK;
    }
    if (!fill)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "a mask (input 3) needs the attribute mask_fill");
    p->mask_fill = s4d_op_attr_float(ctx, "mask_fill", 0.0f);
    const s4d_tensor *m = &ctx->inputs[3];
    if (m->dtype != S4D_DTYPE_BOOL)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "the mask (input 3) has dtype %s; bool expected",
                            s4d_dtype_name(m->dtype));
    if (m->rank > *out_rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "the mask has rank %d, more than the scores' %d", m->rank,
                            *out_rank);
    /* Right-aligned against the scores [batch..., Nq, Nk]: each dim 1 or equal. */
    int64_t sdims[S4D_MAX_RANK], mst[S4D_MAX_RANK];
    int sr = *out_rank;
    memcpy(sdims, p->batch, sizeof(int64_t) * (size_t)p->batch_rank);
    sdims[sr - 2] = p->nq;
    sdims[sr - 1] = p->nk;
    for (int i = 0; i < m->rank; i++) {
        int64_t md = m->dims[i], sd = sdims[sr - m->rank + i];
        if (md != 1 && md != sd)
            return s4d_op_error(ctx, S4D_ERR_SHAPE,
                                "the mask's dim %d (%lld) does not broadcast to the scores' %lld", i,
                                (long long)md, (long long)sd);
    }
    s4d_host_broadcast_strides(m->rank, m->dims, sr, sdims, mst);
    for (int i = 0; i < p->batch_rank; i++)
        p->m_stride[i] = mst[i];
    p->m_qstride = mst[sr - 2];
    p->m_kstride = mst[sr - 1];
    return S4D_OK;
}

static s4d_status attn_infer(s4d_op_ctx *ctx)
{
    attn_params p;
    int rank;
    int64_t dims[S4D_MAX_RANK];
    s4d_status st = attn_analyse(ctx, &p, &rank, dims);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(attn_params *)ctx->params = p;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = p.dtype;
    y->rank = rank;
    memcpy(y->dims, dims, sizeof(int64_t) * (size_t)rank);
    return S4D_OK;
}

/* Elements of Q as given (its batch dims may broadcast). */
static int64_t q_numel(const s4d_op_ctx *ctx)
{
    return s4d_tensor_numel(&ctx->inputs[0]);
}

static size_t attn_workspace(const s4d_op_ctx *ctx)
{
    attn_params local;
    const attn_params *p = ctx->params;
    if (!p) {
        int rank;
        int64_t dims[S4D_MAX_RANK];
        if (attn_analyse((s4d_op_ctx *)ctx, &local, &rank, dims) != S4D_OK)
            return 0;
        p = &local;
    }
    return (size_t)(p->nbatch * p->nq * p->nk + (p->has_q_scale ? q_numel(ctx) : 0)) * sizeof(float);
}

typedef struct attn_job {
    struct s4d_threadpool *pool;
    const attn_params *p;
    const float *q, *k, *v;
    const uint8_t *mask;
    float *s, *y;
} attn_job;

/* Offsets of batch i: whole matrices of Q, KT, V; elements of the mask. */
static void attn_offsets(const attn_params *p, int64_t i, int64_t *oq, int64_t *ok, int64_t *ov, int64_t *om)
{
    int64_t q = 0, k = 0, v = 0, m = 0;
    for (int d = p->batch_rank - 1; d >= 0; d--) {
        int64_t c = i % p->batch[d];
        i /= p->batch[d];
        q += c * p->q_stride[d];
        k += c * p->k_stride[d];
        v += c * p->v_stride[d];
        m += c * p->m_stride[d];
    }
    *oq = q;
    *ok = k;
    *ov = v;
    *om = m;
}

static void scores_batches(void *arg, int64_t b0, int64_t b1)
{
    const attn_job *j = arg;
    const attn_params *p = j->p;
    for (int64_t i = b0; i < b1; i++) {
        int64_t oq, ok, ov, om;
        attn_offsets(p, i, &oq, &ok, &ov, &om);
        s4d_host_sgemm(j->pool, 0, 0, p->nq, p->nk, p->d, 1.0f, j->q + oq * p->nq * p->d, p->d,
                       j->k + ok * p->d * p->nk, p->nk, 0.0f, j->s + i * p->nq * p->nk, p->nk);
    }
}

/* Masks and normalises score rows [r0, r1) in place (rows run over batch, then query). */
static void softmax_rows(void *arg, int64_t r0, int64_t r1)
{
    const attn_job *j = arg;
    const attn_params *p = j->p;
    for (int64_t r = r0; r < r1; r++) {
        float *row = j->s + r * p->nk;
        if (p->has_mask) {
            int64_t i = r / p->nq, qi = r % p->nq, oq, ok, ov, om;
            attn_offsets(p, i, &oq, &ok, &ov, &om);
            const uint8_t *m = j->mask + om + qi * p->m_qstride;
            const uint8_t hit = p->fill_where_true ? 1 : 0;
            for (int64_t c = 0; c < p->nk; c++)
                if ((m[c * p->m_kstride] != 0) == hit)
                    row[c] = p->mask_fill;
        }
        s4d_softmax_row_f32(row, row, p->nk);
    }
}

static void output_batches(void *arg, int64_t b0, int64_t b1)
{
    const attn_job *j = arg;
    const attn_params *p = j->p;
    for (int64_t i = b0; i < b1; i++) {
        int64_t oq, ok, ov, om;
        attn_offsets(p, i, &oq, &ok, &ov, &om);
        /* swap_out: batch i = (outer, h) writes rows of stride H Dv from (outer Nq H + h) Dv */
        int64_t h = p->swap_out ? p->batch[p->batch_rank - 1] : 1;
        int64_t oy = p->swap_out ? ((i / h) * p->nq * h + i % h) * p->dv : i * p->nq * p->dv;
        s4d_host_sgemm(j->pool, 0, 0, p->nq, p->dv, p->nk, 1.0f, j->s + i * p->nq * p->nk, p->nk,
                       j->v + ov * p->nk * p->dv, p->dv, 0.0f, j->y + oy, h * p->dv);
    }
}

/*
 * The unfused layers' schedule: each product batch by batch, small ones one per pool
 * task, large ones in panels on the pool (dense_util.h's policy); every
 * score row through the Softmax layer's row code.
 */
static s4d_status attn_run(s4d_op_ctx *ctx)
{
    attn_params p;
    if (ctx->params) {
        p = *(const attn_params *)ctx->params;
    } else {
        int rank;
        int64_t dims[S4D_MAX_RANK];
        s4d_status st = attn_analyse(ctx, &p, &rank, dims);
        if (st != S4D_OK)
            return st;
    }
    if (p.dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "%s: the host FusedAttention runs float32 only",
                            s4d_dtype_name(p.dtype));
    int64_t nout = p.nbatch * p.nq * p.dv;
    if (nout == 0)
        return S4D_OK;
    if (p.nk == 0) {
        /* An empty sum: the product of the empty P and V. */
        memset(ctx->outputs[0].data, 0, (size_t)nout * sizeof(float));
        return S4D_OK;
    }
    const int64_t nqs = p.has_q_scale ? q_numel(ctx) : 0;
    if (ctx->workspace_size < (size_t)(p.nbatch * p.nq * p.nk + nqs) * sizeof(float))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small", ctx->workspace_size);
    attn_job j = {ctx->pool, &p, ctx->inputs[0].data, ctx->inputs[1].data, ctx->inputs[2].data,
                  p.has_mask ? ctx->inputs[3].data : NULL, ctx->workspace, ctx->outputs[0].data};
    if (p.has_q_scale) {
        /* the Mul layer's products, each rounded once */
        float *qs = (float *)ctx->workspace + p.nbatch * p.nq * p.nk;
        const float *q = ctx->inputs[0].data;
        for (int64_t i = 0; i < nqs; i++)
            qs[i] = q[i] * p.q_scale;
        j.q = qs;
    }
    if (p.nbatch > 1 && s4d_host_gemm_is_small(p.nq, p.nk, p.d))
        s4d_parallel_for(ctx->pool, p.nbatch, 1, scores_batches, &j);
    else
        scores_batches(&j, 0, p.nbatch);
    s4d_parallel_for(ctx->pool, p.nbatch * p.nq, 1 + 8192 / p.nk, softmax_rows, &j);
    if (p.nbatch > 1 && s4d_host_gemm_is_small(p.nq, p.dv, p.nk))
        s4d_parallel_for(ctx->pool, p.nbatch, 1, output_batches, &j);
    else
        output_batches(&j, 0, p.nbatch);
    return S4D_OK;
}

static const s4d_attr_spec attn_attrs[] = {{"mask_fill", S4D_ATTR_FLOAT},
                                           {"fill_where_true", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                           {"q_scale", S4D_ATTR_FLOAT},
                                           {"swap_out", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                           {NULL}};
const s4d_op_schema s4d_op_fused_attention = {"s4d", "FusedAttention", 1, attn_infer, attn_workspace, attn_run,
                                              sizeof(attn_params), 0, attn_attrs};
