/*
 * Layout ops of real-world exports, any element type: DepthToSpace (DCR and
 * CRD) and SpaceToDepth (sub-pixel convolution, YOLO-style reorganisation),
 * Trilu (attention masks), EyeLike, ReverseSequence and OneHot.
 */
#include <string.h>

#include "ops/broadcast.h"
#include "ops/extra.h"

static s4d_status need_sized(s4d_op_ctx *ctx, int i, const char *what)
{
    if (s4d_dtype_size(ctx->inputs[i].dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) has unsupported dtype %s", i, what,
                            s4d_dtype_name(ctx->inputs[i].dtype));
    return S4D_OK;
}

/* ---- DepthToSpace / SpaceToDepth ---- */

static s4d_status block_make(s4d_op_ctx *ctx, int to_space, s4d_block_params *p, int64_t *od)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK || (st = need_sized(ctx, 0, "input")) != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (x->rank != 4)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input must have rank 4, got %d", x->rank);
    memset(p, 0, sizeof *p);
    p->block = s4d_op_attr_int(ctx, "blocksize", 0);
    if (p->block < 1 || p->block > 65536)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "blocksize %lld must be in [1, 65536]",
                            (long long)p->block);
    const char *mode = s4d_op_attr_string(ctx, "mode", "DCR");
    if (to_space && strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "mode '%s' (DCR or CRD)", mode);
    p->dcr = !to_space || strcmp(mode, "DCR") == 0;
    p->n = x->dims[0], p->c = x->dims[1], p->h = x->dims[2], p->w = x->dims[3];
    int64_t b = p->block;
    if (to_space) {
        if (p->c % (b * b))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "channels %lld are not a multiple of blocksize^2 = %lld",
                                (long long)p->c, (long long)(b * b));
        od[0] = p->n, od[1] = p->c / (b * b), od[2] = p->h * b, od[3] = p->w * b;
    } else {
        if (p->h % b || p->w % b)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "height %lld and width %lld must be multiples of blocksize %lld",
                                (long long)p->h, (long long)p->w, (long long)b);
        od[0] = p->n, od[1] = p->c * b * b, od[2] = p->h / b, od[3] = p->w / b;
    }
    return S4D_OK;
}

static s4d_status block_infer(s4d_op_ctx *ctx, int to_space)
{
    s4d_block_params p;
    int64_t od[4];
    s4d_status st = block_make(ctx, to_space, &p, od);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_block_params *)ctx->params = p;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, 4, od);
    return S4D_OK;
}

typedef struct block_job {
    const s4d_block_params *p;
    int to_space;
    const char *x;
    char *y;
    size_t es;
} block_job;

/* Items: input rows (n, c, h); each input row goes to b output positions per element. */
static void block_rows(void *arg, int64_t r0, int64_t r1)
{
    const block_job *j = arg;
    const s4d_block_params *p = j->p;
    const int64_t b = p->block, W = p->w;
    const size_t es = j->es;
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r % p->h, c = r / p->h % p->c, n = r / (p->h * p->c);
        const char *src = j->x + (size_t)(r * W) * es;
        if (j->to_space) {
            /* Input channel c holds (i, j, c') (DCR) or (c', i, j) (CRD) of the output. */
            int64_t co = p->c / (b * b), i, jj, cc;
            if (p->dcr)
                i = c / (b * co), jj = c / co % b, cc = c % co;
            else
                cc = c / (b * b), i = c / b % b, jj = c % b;
            int64_t ho = p->h * b, wo = W * b;
            char *dst = j->y + (size_t)(((n * co + cc) * ho + h * b + i) * wo + jj) * es;
            for (int64_t w = 0; w < W; w++)
                memcpy(dst + (size_t)(w * b) * es, src + (size_t)w * es, es);
        } else {
            /* Input row h of channel c feeds output channels (i * b + jj) * C + c, row h / b. */
            int64_t i = h % b, ho = p->h / b, wo = W / b;
            for (int64_t jj = 0; jj < b; jj++) {
                int64_t co = (i * b + jj) * p->c + c;
                char *dst = j->y + (size_t)(((n * p->c * b * b + co) * ho + h / b) * wo) * es;
                for (int64_t w = 0; w < wo; w++)
                    memcpy(dst + (size_t)w * es, src + (size_t)(w * b + jj) * es, es);
            }
        }
    }
}

static s4d_status block_run(s4d_op_ctx *ctx, int to_space)
{
    s4d_block_params local;
    const s4d_block_params *p = ctx->params;
    if (!p) {
        int64_t od[4];
        s4d_status st = block_make(ctx, to_space, &local, od);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    block_job j = {p, to_space, ctx->inputs[0].data, ctx->outputs[0].data,
                   s4d_dtype_size(ctx->inputs[0].dtype)};
    s4d_parallel_for(ctx->pool, p->n * p->c * p->h, 1 + 8192 / (p->w + 1), block_rows, &j);
    return S4D_OK;
}

static s4d_status d2s_infer(s4d_op_ctx *ctx) { return block_infer(ctx, 1); }
static s4d_status d2s_run(s4d_op_ctx *ctx) { return block_run(ctx, 1); }
static s4d_status s2d_infer(s4d_op_ctx *ctx) { return block_infer(ctx, 0); }
static s4d_status s2d_run(s4d_op_ctx *ctx) { return block_run(ctx, 0); }

static const s4d_attr_spec d2s_attrs[] = {{"blocksize", S4D_ATTR_INT}, {"mode", S4D_ATTR_STRING}, {NULL}};
static const s4d_attr_spec s2d_attrs[] = {{"blocksize", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_depth_to_space = {"", "DepthToSpace", 1, d2s_infer, NULL, d2s_run,
                                             sizeof(s4d_block_params), 0, d2s_attrs};
const s4d_op_schema s4d_op_space_to_depth = {"", "SpaceToDepth", 1, s2d_infer, NULL, s2d_run,
                                             sizeof(s4d_block_params), 0, s2d_attrs};

/* ---- Trilu ---- */

static s4d_status read_scalar_int(s4d_op_ctx *ctx, int i, const char *what, int64_t *v, int *known)
{
    const s4d_tensor *t = &ctx->inputs[i];
    if ((t->dtype != S4D_DTYPE_INT64 && t->dtype != S4D_DTYPE_INT32) || s4d_tensor_numel(t) != 1 ||
        t->rank > 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (%s) must be one int64 or int32", i, what);
    *known = t->data != NULL;
    if (t->data)
        *v = s4d_load_i64(t->dtype, t->data, 0);
    return S4D_OK;
}

static s4d_status trilu_make(s4d_op_ctx *ctx, s4d_trilu_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, 2, 1);
    if (st != S4D_OK || (st = need_sized(ctx, 0, "input")) != S4D_OK)
        return st;
    if (ctx->inputs[0].rank < 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input must have rank >= 2, got %d", ctx->inputs[0].rank);
    memset(p, 0, sizeof *p);
    p->upper = s4d_op_attr_int(ctx, "upper", 1) != 0;
    if (s4d_in_present(ctx, 1)) {
        int known = 0;
        if ((st = read_scalar_int(ctx, 1, "k", &p->k, &known)) != S4D_OK)
            return st;
        p->k_at_run = !known;
    }
    return S4D_OK;
}

static s4d_status trilu_infer(s4d_op_ctx *ctx)
{
    s4d_trilu_params p;
    s4d_status st = trilu_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_trilu_params *)ctx->params = p;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status trilu_run(s4d_op_ctx *ctx)
{
    s4d_trilu_params p;
    if (ctx->params) {
        p = *(const s4d_trilu_params *)ctx->params;
    } else {
        s4d_status st = trilu_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    if (p.k_at_run)
        p.k = s4d_load_i64(ctx->inputs[1].dtype, ctx->inputs[1].data, 0);
    const s4d_tensor *x = &ctx->inputs[0];
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
    int64_t mats = s4d_tensor_numel(x) / (rows * cols > 0 ? rows * cols : 1);
    size_t es = s4d_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = ctx->outputs[0].data;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++) {
            size_t at = (size_t)((m * rows + i) * cols) * es;
            for (int64_t jc = 0; jc < cols; jc++) {
                int keep = p.upper ? jc - i >= p.k : jc - i <= p.k;
                if (keep)
                    memcpy(dst + at + (size_t)jc * es, src + at + (size_t)jc * es, es);
                else
                    memset(dst + at + (size_t)jc * es, 0, es);
            }
        }
    return S4D_OK;
}

static const s4d_attr_spec trilu_attrs[] = {{"upper", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
const s4d_op_schema s4d_op_trilu = {"", "Trilu", 14, trilu_infer, NULL, trilu_run,
                                    sizeof(s4d_trilu_params), 0, trilu_attrs};

/* ---- EyeLike ---- */

static s4d_status eye_make(s4d_op_ctx *ctx, s4d_eyelike_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    if (ctx->inputs[0].rank != 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input must have rank 2, got %d", ctx->inputs[0].rank);
    memset(p, 0, sizeof *p);
    const s4d_attr *dt = s4d_op_attr(ctx, "dtype");
    p->dtype = dt ? (int32_t)dt->i : (int32_t)ctx->inputs[0].dtype;
    if (s4d_dtype_size((s4d_dtype)p->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "output dtype %s is not supported",
                            s4d_dtype_name((s4d_dtype)p->dtype));
    p->k = s4d_op_attr_int(ctx, "k", 0);
    return S4D_OK;
}

static s4d_status eye_infer(s4d_op_ctx *ctx)
{
    s4d_eyelike_params p;
    s4d_status st = eye_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_eyelike_params *)ctx->params = p;
    s4d_set_out(ctx, 0, (s4d_dtype)p.dtype, 2, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status eye_run(s4d_op_ctx *ctx)
{
    s4d_eyelike_params p;
    if (ctx->params) {
        p = *(const s4d_eyelike_params *)ctx->params;
    } else {
        s4d_status st = eye_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    s4d_tensor *y = &ctx->outputs[0];
    int64_t rows = y->dims[0], cols = y->dims[1];
    memset(y->data, 0, s4d_dtype_size(y->dtype) * (size_t)(rows * cols));
    if (p.k <= -rows || p.k >= cols)
        return S4D_OK; /* the diagonal misses the matrix */
    for (int64_t i = 0; i < rows; i++)
        if (i + p.k >= 0 && i + p.k < cols)
            s4d_store_f64(y->dtype, y->data, i * cols + i + p.k, 1.0);
    return S4D_OK;
}

static const s4d_attr_spec eye_attrs[] = {{"dtype", S4D_ATTR_INT}, {"k", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_eye_like = {"", "EyeLike", 9, eye_infer, NULL, eye_run,
                                       sizeof(s4d_eyelike_params), 0, eye_attrs};

/* ---- ReverseSequence ---- */

static s4d_status revseq_make(s4d_op_ctx *ctx, s4d_revseq_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK || (st = need_sized(ctx, 0, "input")) != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *l = &ctx->inputs[1];
    if (x->rank < 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input must have rank >= 2, got %d", x->rank);
    memset(p, 0, sizeof *p);
    p->batch_axis = (int32_t)s4d_op_attr_int(ctx, "batch_axis", 1);
    p->time_axis = (int32_t)s4d_op_attr_int(ctx, "time_axis", 0);
    if ((p->batch_axis != 0 && p->batch_axis != 1) || (p->time_axis != 0 && p->time_axis != 1) ||
        p->batch_axis == p->time_axis)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "batch_axis %d and time_axis %d must be 0 and 1 in some order",
                            p->batch_axis, p->time_axis);
    if (l->dtype != S4D_DTYPE_INT64 || l->rank != 1 || l->dims[0] != x->dims[p->batch_axis])
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "sequence_lens must be int64 [%lld]",
                            (long long)x->dims[p->batch_axis]);
    return S4D_OK;
}

static s4d_status revseq_infer(s4d_op_ctx *ctx)
{
    s4d_revseq_params p;
    s4d_status st = revseq_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_revseq_params *)ctx->params = p;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status revseq_run(s4d_op_ctx *ctx)
{
    s4d_revseq_params p;
    if (ctx->params) {
        p = *(const s4d_revseq_params *)ctx->params;
    } else {
        s4d_status st = revseq_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    const int64_t *lens = ctx->inputs[1].data;
    int64_t T = x->dims[p.time_axis], B = x->dims[p.batch_axis];
    int64_t inner = s4d_tensor_numel(x) / (T * B > 0 ? T * B : 1);
    size_t row = s4d_dtype_size(x->dtype) * (size_t)inner;
    for (int64_t b = 0; b < B; b++)
        if (lens[b] < 0 || lens[b] > T)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                                (long long)lens[b], (long long)T);
    const char *src = x->data;
    char *dst = ctx->outputs[0].data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
            int64_t o = p.time_axis == 0 ? t * B + b : b * T + t;
            int64_t i = p.time_axis == 0 ? from * B + b : b * T + from;
            memcpy(dst + (size_t)o * row, src + (size_t)i * row, row);
        }
    return S4D_OK;
}

static const s4d_attr_spec revseq_attrs[] = {{"batch_axis", S4D_ATTR_INT}, {"time_axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_reverse_sequence = {"", "ReverseSequence", 10, revseq_infer, NULL,
                                               revseq_run, sizeof(s4d_revseq_params), 0, revseq_attrs};

/* ---- OneHot ---- */

static s4d_status onehot_make(s4d_op_ctx *ctx, s4d_onehot_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 3, 3, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *ind = &ctx->inputs[0], *dep = &ctx->inputs[1], *val = &ctx->inputs[2];
    if (!s4d_dtype_is_int(ind->dtype) && !s4d_dtype_is_float(ind->dtype))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "indices have dtype %s, expected a number type",
                            s4d_dtype_name(ind->dtype));
    if (ind->rank + 1 > S4D_MAX_RANK)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "indices of rank %d: the output exceeds rank %d",
                            ind->rank, S4D_MAX_RANK);
    if (s4d_tensor_numel(dep) != 1 || (!s4d_dtype_is_int(dep->dtype) && !s4d_dtype_is_float(dep->dtype)))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "depth must be one number");
    if (!dep->data)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "input 1 (depth) must be a constant: the output shape depends on it");
    if (s4d_tensor_numel(val) != 2 || s4d_dtype_size(val->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "values must hold two elements (off, on)");
    memset(p, 0, sizeof *p);
    double depth = s4d_load_f64(dep->dtype, dep->data, 0);
    if (!(depth >= 1.0 && depth <= 2147483647.0))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "depth %g must be in [1, 2^31)", depth);
    p->depth = (int64_t)depth;
    int ax;
    if ((st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", -1), ind->rank + 1, "axis", &ax)) != S4D_OK)
        return st;
    p->axis = ax;
    return S4D_OK;
}

static s4d_status onehot_infer(s4d_op_ctx *ctx)
{
    s4d_onehot_params p;
    s4d_status st = onehot_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_onehot_params *)ctx->params = p;
    const s4d_tensor *ind = &ctx->inputs[0];
    int64_t od[S4D_MAX_RANK];
    for (int d = 0, s = 0; d < ind->rank + 1; d++)
        od[d] = d == p.axis ? p.depth : ind->dims[s++];
    s4d_set_out(ctx, 0, ctx->inputs[2].dtype, ind->rank + 1, od);
    return S4D_OK;
}

static s4d_status onehot_run(s4d_op_ctx *ctx)
{
    s4d_onehot_params p;
    if (ctx->params) {
        p = *(const s4d_onehot_params *)ctx->params;
    } else {
        s4d_status st = onehot_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    const s4d_tensor *ind = &ctx->inputs[0], *val = &ctx->inputs[2];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < p.axis; d++)
        outer *= ind->dims[d];
    for (int d = p.axis; d < ind->rank; d++)
        inner *= ind->dims[d];
    size_t es = s4d_dtype_size(val->dtype);
    const char *off = val->data, *on = off + es;
    char *y = ctx->outputs[0].data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < p.depth; k++)
            for (int64_t i = 0; i < inner; i++) {
                double v = s4d_load_f64(ind->dtype, ind->data, o * inner + i);
                /* out of [-depth, depth) (NaN included): all off */
                int64_t idx = v >= -(double)p.depth && v < (double)p.depth ? (int64_t)v : p.depth;
                if (idx < 0)
                    idx += p.depth;
                memcpy(y + (size_t)((o * p.depth + k) * inner + i) * es, idx == k ? on : off, es);
            }
    return S4D_OK;
}

static const s4d_attr_spec onehot_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_one_hot = {"", "OneHot", 9, onehot_infer, NULL, onehot_run,
                                      sizeof(s4d_onehot_params), 0, onehot_attrs};
