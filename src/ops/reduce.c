/*
 * Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
 * ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, and
 * ArgMax / ArgMin.
 *
 * Axes are an attribute before the opset where they became input 1 (13 for
 * ReduceSum, 18 for the others); the input must then be a constant.
 * Floats accumulate in double; integers in int64 (sums wrap, never trap).
 * Each output element is reduced by one thread from start to end, so the
 * result does not depend on the thread count.
 */
#include <math.h>

#include "ops/broadcast.h"
#include "ops/reduce.h"

typedef s4d_reduce_kind red_kind;
#define R_SUM S4D_REDUCE_SUM
#define R_MEAN S4D_REDUCE_MEAN
#define R_MAX S4D_REDUCE_MAX
#define R_MIN S4D_REDUCE_MIN
#define R_PROD S4D_REDUCE_PROD
#define R_SUM_SQUARE S4D_REDUCE_SUM_SQUARE
#define R_L1 S4D_REDUCE_L1
#define R_L2 S4D_REDUCE_L2
#define R_LOG_SUM S4D_REDUCE_LOG_SUM
#define R_LOG_SUM_EXP S4D_REDUCE_LOG_SUM_EXP

/* Input geometry split into kept dims (one per output element) and reduced dims (reduce.h). */
typedef s4d_reduce_geom red_geom;

static void make_geom(const s4d_tensor *in, const int *mask, red_geom *g)
{
    int64_t st[S4D_MAX_RANK], s = 1;
    for (int d = in->rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= in->dims[d];
    }
    g->nk = g->nr = 0;
    g->nout = g->nred = 1;
    for (int d = 0; d < in->rank; d++) {
        if (in->dims[d] == 1)
            continue;
        int64_t *dims = mask[d] ? g->rdims : g->kdims, *sts = mask[d] ? g->rst : g->kst;
        int *n = mask[d] ? &g->nr : &g->nk;
        /* Merge with the previous dim of the same kind when they are adjacent in memory. */
        if (*n > 0 && sts[*n - 1] == st[d] * in->dims[d]) {
            dims[*n - 1] *= in->dims[d];
            sts[*n - 1] = st[d];
        } else {
            dims[*n] = in->dims[d];
            sts[*n] = st[d];
            (*n)++;
        }
        if (mask[d])
            g->nred *= in->dims[d];
        else
            g->nout *= in->dims[d];
    }
    for (int d = 0; d < in->rank; d++)
        if (in->dims[d] == 0) {
            if (mask[d])
                g->nred = 0;
            else
                g->nout = 0;
        }
}

typedef struct red_job {
    red_geom g;
    red_kind kind;
    s4d_dtype dt;
    const void *x;
    void *y;
    /* ArgMax/ArgMin */
    int arg_min, last;
} red_job;

/* Input offset of kept index o. */
static int64_t kept_offset(const red_geom *g, int64_t o)
{
    int64_t off = 0;
    for (int d = g->nk - 1; d >= 0; d--) {
        off += (o % g->kdims[d]) * g->kst[d];
        o /= g->kdims[d];
    }
    return off;
}

/* Calls BODY(offset) for every reduced element of the output at base. */
#define FOR_REDUCED(g, base, BODY)                                                  \
    do {                                                                            \
        int64_t ridx_[S4D_MAX_RANK] = {0}, roff_ = (base);                          \
        int nr_ = (g)->nr;                                                          \
        if ((g)->nred == 0)                                                         \
            break;                                                                  \
        if (nr_ == 0) {                                                             \
            int64_t off = roff_;                                                    \
            BODY;                                                                   \
            break;                                                                  \
        }                                                                           \
        int64_t in_n_ = (g)->rdims[nr_ - 1], in_s_ = (g)->rst[nr_ - 1];             \
        for (;;) {                                                                  \
            for (int64_t k_ = 0; k_ < in_n_; k_++) {                                \
                int64_t off = roff_ + k_ * in_s_;                                   \
                BODY;                                                               \
            }                                                                       \
            int d_ = nr_ - 2;                                                       \
            for (; d_ >= 0; d_--) {                                                 \
                ridx_[d_]++;                                                        \
                roff_ += (g)->rst[d_];                                              \
                if (ridx_[d_] < (g)->rdims[d_])                                     \
                    break;                                                          \
                roff_ -= ridx_[d_] * (g)->rst[d_];                                  \
                ridx_[d_] = 0;                                                      \
            }                                                                       \
            if (d_ < 0)                                                             \
                break;                                                              \
        }                                                                           \
    } while (0)

static double reduce_float(const red_job *j, int64_t base)
{
    const red_geom *g = &j->g;
    double acc;
    switch (j->kind) {
    case R_MAX: acc = -INFINITY; break;
    case R_MIN: acc = INFINITY; break;
    case R_PROD: acc = 1; break;
    case R_LOG_SUM_EXP: {
        double mx = -INFINITY;
        FOR_REDUCED(g, base, { double v = s4d_load_f64(j->dt, j->x, off); if (v > mx || v != v) mx = v; });
        if (isinf(mx) || isnan(mx))
            return mx == -INFINITY ? -INFINITY : mx;
        double s = 0;
        FOR_REDUCED(g, base, s += exp(s4d_load_f64(j->dt, j->x, off) - mx));
        return mx + log(s);
    }
    case R_SUM: case R_MEAN: case R_SUM_SQUARE: case R_L1: case R_L2: case R_LOG_SUM: default: acc = 0; break;
    }
    if (j->dt == S4D_DTYPE_FLOAT32 && (j->kind == R_SUM || j->kind == R_MEAN) && g->nr == 1 && g->rst[0] == 1) {
        /* A contiguous run (LayerNorm's mean): four partial sums hide the add latency. */
        const float *x = (const float *)j->x + base;
        int64_t n = g->rdims[0], k = 0;
        double p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        for (; k + 4 <= n; k += 4) {
            p0 += x[k];
            p1 += x[k + 1];
            p2 += x[k + 2];
            p3 += x[k + 3];
        }
        for (; k < n; k++)
            p0 += x[k];
        acc = (p0 + p1) + (p2 + p3);
    } else if (j->dt == S4D_DTYPE_FLOAT32 && (j->kind == R_SUM || j->kind == R_MEAN)) {
        const float *x = j->x;
        FOR_REDUCED(g, base, acc += x[off]);
    } else {
        switch (j->kind) {
        case R_SUM: case R_MEAN: FOR_REDUCED(g, base, acc += s4d_load_f64(j->dt, j->x, off)); break;
        case R_MAX:
            FOR_REDUCED(g, base, { double v = s4d_load_f64(j->dt, j->x, off); if (v > acc || v != v) acc = v; });
            break;
        case R_MIN:
            FOR_REDUCED(g, base, { double v = s4d_load_f64(j->dt, j->x, off); if (v < acc || v != v) acc = v; });
            break;
        case R_PROD: FOR_REDUCED(g, base, acc *= s4d_load_f64(j->dt, j->x, off)); break;
        case R_SUM_SQUARE: case R_L2:
            FOR_REDUCED(g, base, { double v = s4d_load_f64(j->dt, j->x, off); acc += v * v; });
            break;
        case R_L1: FOR_REDUCED(g, base, acc += fabs(s4d_load_f64(j->dt, j->x, off))); break;
        case R_LOG_SUM: FOR_REDUCED(g, base, acc += s4d_load_f64(j->dt, j->x, off)); break;
        case R_LOG_SUM_EXP: case S4D_REDUCE_ARGMAX: case S4D_REDUCE_ARGMIN: break;
        }
    }
    switch (j->kind) {
    case R_MEAN: return acc / (double)g->nred; /* 0/0 = NaN for an empty set, as numpy */
    case R_L2: return sqrt(acc);
    case R_LOG_SUM: return log(acc);
    case R_SUM: case R_MAX: case R_MIN: case R_PROD: case R_SUM_SQUARE: case R_L1: case R_LOG_SUM_EXP:
    case S4D_REDUCE_ARGMAX: case S4D_REDUCE_ARGMIN:
        break;
    }
    return acc;
}

static int64_t reduce_int(const red_job *j, int64_t base)
{
    const red_geom *g = &j->g;
    int64_t acc = 0;
    uint64_t u = 0;
    switch (j->kind) {
    case R_MAX:
        acc = INT64_MIN;
        FOR_REDUCED(g, base, { int64_t v = s4d_load_i64(j->dt, j->x, off); if (v > acc) acc = v; });
        return acc;
    case R_MIN:
        acc = INT64_MAX;
        FOR_REDUCED(g, base, { int64_t v = s4d_load_i64(j->dt, j->x, off); if (v < acc) acc = v; });
        return acc;
    case R_PROD:
        u = 1;
        FOR_REDUCED(g, base, u *= (uint64_t)s4d_load_i64(j->dt, j->x, off));
        return (int64_t)u;
    case R_SUM_SQUARE: case R_L2:
        FOR_REDUCED(g, base, { uint64_t v = (uint64_t)s4d_load_i64(j->dt, j->x, off); u += v * v; });
        return j->kind == R_L2 ? (int64_t)sqrt((double)(int64_t)u) : (int64_t)u;
    case R_L1:
        FOR_REDUCED(g, base, { int64_t v = s4d_load_i64(j->dt, j->x, off); u += (uint64_t)(v < 0 ? 0 - (uint64_t)v : (uint64_t)v); });
        return (int64_t)u;
    case R_SUM: case R_MEAN: case R_LOG_SUM: case R_LOG_SUM_EXP:
        FOR_REDUCED(g, base, u += (uint64_t)s4d_load_i64(j->dt, j->x, off));
        if (j->kind == R_MEAN)
            return g->nred ? (int64_t)u / g->nred : 0;
        return (int64_t)u;
    case S4D_REDUCE_ARGMAX: case S4D_REDUCE_ARGMIN:
        break;
    }
    return 0;
}

static void store_int(s4d_dtype dt, void *p, int64_t i, int64_t v)
{
    switch (dt) {
    case S4D_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; return;
    case S4D_DTYPE_INT64: ((int64_t *)p)[i] = v; return;
    case S4D_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; return;
    case S4D_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; return;
    case S4D_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; return;
    case S4D_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; return;
    case S4D_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; return;
    case S4D_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; return;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_FLOAT32: case S4D_DTYPE_STRING: case S4D_DTYPE_BOOL:
    case S4D_DTYPE_FLOAT16: case S4D_DTYPE_FLOAT64: case S4D_DTYPE_BFLOAT16:
        return;
    }
}

/*
 * float32, one contiguous reduced run per output, outputs in input order
 * (reducing the innermost dims): no offset arithmetic, no type dispatch.
 */
static int inner_run_f32(const red_job *j)
{
    const red_geom *g = &j->g;
    if (j->dt != S4D_DTYPE_FLOAT32 || g->nr != 1 || g->rst[0] != 1 || g->nred == 0)
        return 0;
    if (g->nk > 1 || (g->nk == 1 && g->kst[0] != g->rdims[0]))
        return 0;
    return j->kind == R_SUM || j->kind == R_MEAN || j->kind == R_MAX || j->kind == R_MIN;
}

static void red_chunk_inner_f32(const red_job *j, int64_t b, int64_t e)
{
    int64_t n = j->g.rdims[0];
    const float *x = (const float *)j->x;
    float *y = (float *)j->y;
    for (int64_t o = b; o < e; o++) {
        const float *r = x + o * n;
        if (j->kind == R_SUM || j->kind == R_MEAN) {
            double p0 = 0, p1 = 0;
            int64_t k = 0;
            for (; k + 2 <= n; k += 2) {
                p0 += r[k];
                p1 += r[k + 1];
            }
            if (k < n)
                p0 += r[k];
            double acc = p0 + p1;
            y[o] = (float)(j->kind == R_MEAN ? acc / (double)n : acc);
        } else {
            float m = r[0];
            int nan = m != m;
            for (int64_t k = 1; k < n; k++) {
                float v = r[k];
                nan |= v != v;
                m = j->kind == R_MAX ? (v > m ? v : m) : (v < m ? v : m);
            }
            y[o] = nan ? NAN : m;
        }
    }
}

static void red_chunk(void *vp, int64_t b, int64_t e)
{
    const red_job *j = vp;
    if (inner_run_f32(j)) {
        red_chunk_inner_f32(j, b, e);
        return;
    }
    int isint = s4d_dtype_is_int(j->dt);
    for (int64_t o = b; o < e; o++) {
        int64_t base = kept_offset(&j->g, o);
        if (isint) {
            int64_t v = reduce_int(j, base);
            /* Empty-set max/min of an integer type: its lowest/highest value. */
            store_int(j->dt, j->y, o, v);
            if (j->g.nred == 0 && (j->kind == R_MAX || j->kind == R_MIN)) {
                double lim = j->kind == R_MAX ? -INFINITY : INFINITY;
                s4d_store_f64(j->dt, j->y, o, lim);
            }
        } else {
            s4d_store_f64(j->dt, j->y, o, reduce_float(j, base));
        }
    }
}

static void arg_chunk(void *vp, int64_t b, int64_t e)
{
    const red_job *j = vp;
    int64_t *y = j->y;
    for (int64_t o = b; o < e; o++) {
        int64_t base = kept_offset(&j->g, o), k = 0, best_k = 0;
        double best = 0;
        /* One reduced dim (the axis), so k counts positions along it. */
        FOR_REDUCED(&j->g, base, {
            double v = s4d_load_f64(j->dt, j->x, off);
            int better = k == 0 || (j->arg_min ? (j->last ? v <= best : v < best) : (j->last ? v >= best : v > best));
            if (better) {
                best = v;
                best_k = k;
            }
            k++;
        });
        y[o] = best_k;
    }
}

/* ---- attribute / input handling ------------------------------------------------- */

static s4d_status read_reduce(s4d_op_ctx *ctx, int axes_input_since, s4d_reduce_params *p)
{
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t axes[S4D_MAX_RANK * 2], n = -1;
    s4d_status st;
    p->keepdims = s4d_op_attr_int(ctx, "keepdims", 1) != 0;
    p->noop = 0;
    if (ctx->opset >= axes_input_since) {
        if (s4d_in_present(ctx, 1) && (st = s4d_const_ints(ctx, 1, "axes", axes, S4D_MAX_RANK * 2, &n)) != S4D_OK)
            return st;
    } else {
        const s4d_attr *a = s4d_op_attr(ctx, "axes");
        if (a) {
            if (a->type != S4D_ATTR_INTS || a->count > S4D_MAX_RANK * 2)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "attribute axes must be a list of at most %d ints",
                                    S4D_MAX_RANK * 2);
            n = (int64_t)a->count;
            for (int64_t i = 0; i < n; i++)
                axes[i] = a->ints[i];
        }
    }
    for (int d = 0; d < S4D_MAX_RANK; d++)
        p->mask[d] = 0;
    if (n <= 0) {
        if (s4d_op_attr_int(ctx, "noop_with_empty_axes", 0) && ctx->opset >= axes_input_since)
            p->noop = 1;
        else
            for (int d = 0; d < in->rank; d++)
                p->mask[d] = 1;
        return S4D_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        int a;
        if ((st = s4d_norm_axis(ctx, axes[i], in->rank, "axes value", &a)) != S4D_OK)
            return st;
        p->mask[a] = 1;
    }
    return S4D_OK;
}

static void out_dims(const s4d_tensor *in, const int *mask, int keepdims, int *rank, int64_t *dims)
{
    int r = 0;
    for (int d = 0; d < in->rank; d++) {
        if (!mask[d])
            dims[r++] = in->dims[d];
        else if (keepdims)
            dims[r++] = 1;
    }
    *rank = r;
}

/* The typed parameters of a Reduce* node: attributes, the constant axes input, the geometry. */
static s4d_status reduce_params(s4d_op_ctx *ctx, red_kind kind, int since, s4d_reduce_params *p)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    s4d_status st = read_reduce(ctx, since, p);
    if (st != S4D_OK)
        return st;
    make_geom(&ctx->inputs[0], p->mask, &p->geom);
    return S4D_OK;
}

static s4d_status infer_reduce_k(s4d_op_ctx *ctx, red_kind kind, int since)
{
    s4d_status st = s4d_check_arity(ctx, 1, ctx->opset >= since ? 2 : 1, 1);
    if (st != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    int ok = dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT64 || dt == S4D_DTYPE_FLOAT16 ||
             dt == S4D_DTYPE_BFLOAT16 || s4d_dtype_is_int(dt);
    if (!ok)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s", s4d_dtype_name(dt));
    s4d_reduce_params p;
    if ((st = reduce_params(ctx, kind, since, &p)) != S4D_OK)
        return st;
    if (ctx->params)
        memcpy(ctx->params, &p, sizeof p);
    if (p.noop) {
        s4d_set_out(ctx, 0, dt, ctx->inputs[0].rank, ctx->inputs[0].dims);
        return S4D_OK;
    }
    int r;
    int64_t dims[S4D_MAX_RANK];
    out_dims(&ctx->inputs[0], p.mask, p.keepdims, &r, dims);
    s4d_set_out(ctx, 0, dt, r, dims);
    return S4D_OK;
}

static s4d_status run_reduce_k(s4d_op_ctx *ctx, red_kind kind, int since)
{
    s4d_reduce_params local;
    const s4d_reduce_params *p = ctx->params;
    if (!p) {
        s4d_status st = reduce_params(ctx, kind, since, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    const s4d_tensor *in = &ctx->inputs[0];
    if (p->noop) {
        size_t bytes = (size_t)s4d_tensor_numel(in) * s4d_dtype_size(in->dtype);
        if (bytes && ctx->outputs[0].data != in->data)
            memcpy(ctx->outputs[0].data, in->data, bytes);
        return S4D_OK;
    }
    red_job *j = &(red_job){0};
    j->g = p->geom;
    j->kind = kind;
    j->dt = in->dtype;
    j->x = in->data;
    j->y = ctx->outputs[0].data;
    int64_t work = j->g.nred > 0 ? j->g.nred : 1;
    s4d_parallel_for(ctx->pool, j->g.nout, 1 + 32768 / work, red_chunk, j);
    return S4D_OK;
}

#define REDUCE_OP(NAME, ONNX, KIND, AXES_INPUT_SINCE)                                                          \
    static s4d_status infer_##NAME(s4d_op_ctx *ctx) { return infer_reduce_k(ctx, KIND, AXES_INPUT_SINCE); } \
    static s4d_status run_##NAME(s4d_op_ctx *ctx) { return run_reduce_k(ctx, KIND, AXES_INPUT_SINCE); }     \
    const s4d_op_schema s4d_op_##NAME = {"", ONNX, 1, infer_##NAME, NULL, run_##NAME,                       \
                                         sizeof(s4d_reduce_params), 0, reduce_attrs_##AXES_INPUT_SINCE};

/* The axes attribute became an input at the opset where noop_with_empty_axes appeared. */
static const s4d_attr_spec reduce_attrs_13[] = {{"axes", S4D_ATTR_INTS, 0, 0, 12},
                                                {"keepdims", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                                {"noop_with_empty_axes", S4D_ATTR_INT, S4D_ATTR_BOOL, 13},
                                                {NULL}};
static const s4d_attr_spec reduce_attrs_18[] = {{"axes", S4D_ATTR_INTS, 0, 0, 17},
                                                {"keepdims", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                                {"noop_with_empty_axes", S4D_ATTR_INT, S4D_ATTR_BOOL, 18},
                                                {NULL}};

REDUCE_OP(reduce_sum, "ReduceSum", R_SUM, 13)
REDUCE_OP(reduce_mean, "ReduceMean", R_MEAN, 18)
REDUCE_OP(reduce_max, "ReduceMax", R_MAX, 18)
REDUCE_OP(reduce_min, "ReduceMin", R_MIN, 18)
REDUCE_OP(reduce_prod, "ReduceProd", R_PROD, 18)
REDUCE_OP(reduce_sum_square, "ReduceSumSquare", R_SUM_SQUARE, 18)
REDUCE_OP(reduce_l1, "ReduceL1", R_L1, 18)
REDUCE_OP(reduce_l2, "ReduceL2", R_L2, 18)
REDUCE_OP(reduce_log_sum, "ReduceLogSum", R_LOG_SUM, 18)
REDUCE_OP(reduce_log_sum_exp, "ReduceLogSumExp", R_LOG_SUM_EXP, 18)

/* ---- ArgMax / ArgMin ---------------------------------------------------------------- */

static s4d_status arg_params(s4d_op_ctx *ctx, int arg_min, s4d_reduce_params *p)
{
    const s4d_tensor *in = &ctx->inputs[0];
    memset(p, 0, sizeof *p);
    p->kind = arg_min ? S4D_REDUCE_ARGMIN : S4D_REDUCE_ARGMAX;
    int axis;
    s4d_status st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), in->rank > 0 ? in->rank : 1, "axis", &axis);
    if (st != S4D_OK)
        return st;
    for (int d = 0; d < S4D_MAX_RANK; d++)
        p->mask[d] = d == axis;
    p->keepdims = s4d_op_attr_int(ctx, "keepdims", 1) != 0;
    p->select_last = s4d_op_attr_int(ctx, "select_last_index", 0) != 0;
    if (in->rank > 0 && in->dims[axis] == 0)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "cannot take the arg of an empty axis %d", axis);
    make_geom(in, p->mask, &p->geom);
    return S4D_OK;
}

static s4d_status infer_arg(s4d_op_ctx *ctx, int arg_min)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (!s4d_dtype_is_float(dt) && !s4d_dtype_is_int(dt))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s", s4d_dtype_name(dt));
    s4d_reduce_params p;
    if ((st = arg_params(ctx, arg_min, &p)) != S4D_OK)
        return st;
    if (ctx->params)
        memcpy(ctx->params, &p, sizeof p);
    int r;
    int64_t dims[S4D_MAX_RANK];
    out_dims(&ctx->inputs[0], p.mask, p.keepdims, &r, dims);
    s4d_set_out(ctx, 0, S4D_DTYPE_INT64, r, dims);
    return S4D_OK;
}

static s4d_status run_arg(s4d_op_ctx *ctx, int arg_min)
{
    s4d_reduce_params local;
    const s4d_reduce_params *p = ctx->params;
    if (!p) {
        s4d_status st = arg_params(ctx, arg_min, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    red_job *j = &(red_job){0};
    j->g = p->geom;
    j->dt = ctx->inputs[0].dtype;
    j->x = ctx->inputs[0].data;
    j->y = ctx->outputs[0].data;
    j->arg_min = arg_min;
    j->last = p->select_last;
    s4d_parallel_for(ctx->pool, j->g.nout, 1 + 32768 / (j->g.nred ? j->g.nred : 1), arg_chunk, j);
    return S4D_OK;
}

static s4d_status infer_argmax(s4d_op_ctx *ctx) { return infer_arg(ctx, 0); }
static s4d_status infer_argmin(s4d_op_ctx *ctx) { return infer_arg(ctx, 1); }
static s4d_status run_argmax(s4d_op_ctx *ctx) { return run_arg(ctx, 0); }
static s4d_status run_argmin(s4d_op_ctx *ctx) { return run_arg(ctx, 1); }

static const s4d_attr_spec arg_attrs[] = {{"axis", S4D_ATTR_INT},
                                          {"keepdims", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                          {"select_last_index", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                          {NULL}};
const s4d_op_schema s4d_op_argmax = {"", "ArgMax", 1, infer_argmax, NULL, run_argmax,
                                     sizeof(s4d_reduce_params), 0, arg_attrs};
const s4d_op_schema s4d_op_argmin = {"", "ArgMin", 1, infer_argmin, NULL, run_argmin,
                                     sizeof(s4d_reduce_params), 0, arg_attrs};
