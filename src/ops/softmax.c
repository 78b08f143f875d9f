/*
 * Softmax and LogSoftmax. From opset 13 the op normalises along one axis
 * (default -1); before 13 it flattens to 2-D at `axis` (default 1) and
 * normalises each row of the trailing block. Both become (outer, n, inner):
 * n values at stride inner. Max-subtraction keeps exp finite; sums are kept
 * in double so long rows lose no precision.
 */
#include <math.h>

#include "ops/broadcast.h"
#include "ops/reduce.h"

typedef struct sm_job {
    int log;
    s4d_dtype dt;
    int64_t n, inner;
    const void *x;
    void *y;
} sm_job;

#define SM_BODY(T, EXP, LOG)                                             \
    do {                                                                 \
        const T *x = (const T *)j->x + base;                             \
        T *y = (T *)j->y + base;                                         \
        T mx = x[0];                                                     \
        for (int64_t k = 1; k < n; k++)                                  \
            if (x[k * s] > mx || mx != mx)                               \
                mx = x[k * s];                                           \
        double sum = 0;                                                  \
        if (j->log) {                                                    \
            for (int64_t k = 0; k < n; k++)                              \
                sum += EXP(x[k * s] - mx);                               \
            T ls = (T)log(sum);                                          \
            for (int64_t k = 0; k < n; k++)                              \
                y[k * s] = x[k * s] - mx - ls;                           \
        } else {                                                         \
            for (int64_t k = 0; k < n; k++) {                            \
                T e = EXP(x[k * s] - mx);                                \
                y[k * s] = e;                                            \
                sum += e;                                                \
            }                                                            \
            T inv = (T)(1.0 / sum);                                      \
            for (int64_t k = 0; k < n; k++)                              \
                y[k * s] *= inv;                                         \
        }                                                                \
    } while (0)

/* A contiguous float32 row: independent partial maxima and sums keep the passes short. */
static void sm_row_f32(const float *x, float *y, int64_t n, int log_out)
{
    float m0 = x[0], m1 = x[0], m2 = x[0], m3 = x[0];
    int nan = 0;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        m0 = x[k] > m0 ? x[k] : m0;
        m1 = x[k + 1] > m1 ? x[k + 1] : m1;
        m2 = x[k + 2] > m2 ? x[k + 2] : m2;
        m3 = x[k + 3] > m3 ? x[k + 3] : m3;
    }
    for (; k < n; k++)
        m0 = x[k] > m0 ? x[k] : m0;
    float mx = m0 > m1 ? m0 : m1;
    mx = m2 > mx ? m2 : mx;
    mx = m3 > mx ? m3 : mx;
    for (k = 0; k < n; k++)
        nan |= x[k] != x[k];
    if (nan) /* the comparisons above skip NaN; ONNX's max (and so the whole row) is NaN */
        mx = NAN;
    double s0 = 0, s1 = 0;
    if (log_out) {
        for (k = 0; k + 2 <= n; k += 2) {
            s0 += expf(x[k] - mx);
            s1 += expf(x[k + 1] - mx);
        }
        for (; k < n; k++)
            s0 += expf(x[k] - mx);
        /* (x - max) first: it is exact near the max, where max + log(sum) would round. */
        float ls = (float)log(s0 + s1);
        for (k = 0; k < n; k++)
            y[k] = (x[k] - mx) - ls;
        return;
    }
    for (k = 0; k < n; k++)
        y[k] = expf(x[k] - mx);
    for (k = 0; k + 2 <= n; k += 2) {
        s0 += y[k];
        s1 += y[k + 1];
    }
    for (; k < n; k++)
        s0 += y[k];
    float inv = (float)(1.0 / (s0 + s1));
    for (k = 0; k < n; k++)
        y[k] *= inv;
}

void s4d_softmax_row_f32(const float *x, float *y, int64_t n)
{
    sm_row_f32(x, y, n, 0);
}

static void sm_rows(void *vp, int64_t r0, int64_t r1)
{
    const sm_job *j = vp;
    int64_t n = j->n, s = j->inner;
    for (int64_t r = r0; r < r1; r++) {
        int64_t base = (r / s) * n * s + r % s;
        switch (j->dt) {
        case S4D_DTYPE_FLOAT32:
            if (s == 1)
                sm_row_f32((const float *)j->x + base, (float *)j->y + base, n, j->log);
            else
                SM_BODY(float, expf, logf);
            break;
        case S4D_DTYPE_FLOAT64: SM_BODY(double, exp, log); break;
        case S4D_DTYPE_FLOAT16: {
            /* float16 rows: compute in float32 on a strided view, one value at a time. */
            const uint16_t *x = (const uint16_t *)j->x + base;
            uint16_t *y = (uint16_t *)j->y + base;
            float mx = s4d_half_to_float(x[0]);
            for (int64_t k = 1; k < n; k++) {
                float v = s4d_half_to_float(x[k * s]);
                if (v > mx || mx != mx)
                    mx = v;
            }
            double sum = 0;
            for (int64_t k = 0; k < n; k++)
                sum += expf(s4d_half_to_float(x[k * s]) - mx);
            for (int64_t k = 0; k < n; k++) {
                float v = s4d_half_to_float(x[k * s]) - mx;
                y[k * s] = s4d_float_to_half(j->log ? v - (float)log(sum) : (float)(expf(v) / sum));
            }
            break;
        }
        case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_UINT8: case S4D_DTYPE_INT8: case S4D_DTYPE_UINT16:
        case S4D_DTYPE_INT16: case S4D_DTYPE_INT32: case S4D_DTYPE_INT64: case S4D_DTYPE_STRING:
        case S4D_DTYPE_BOOL: case S4D_DTYPE_UINT32: case S4D_DTYPE_UINT64: case S4D_DTYPE_BFLOAT16:
            return;
        }
    }
}

/* (outer, n, inner) of the normalised block for this opset. */
static s4d_status sm_params(s4d_op_ctx *ctx, int log, s4d_softmax_params *p)
{
    const s4d_tensor *in = &ctx->inputs[0];
    int r = in->rank;
    int axis;
    memset(p, 0, sizeof *p);
    p->log = log;
    p->outer = p->n = p->inner = 1;
    if (r == 0)
        return S4D_OK;
    int64_t a = s4d_op_attr_int(ctx, "axis", ctx->opset >= 13 ? -1 : 1);
    if (ctx->opset < 13) {
        /* The flattening axis may equal rank (an empty trailing block). */
        if (a < -(int64_t)r || a > r)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)a, r);
        axis = (int)(a < 0 ? a + r : a);
    } else {
        s4d_status st = s4d_norm_axis(ctx, a, r, "axis", &axis);
        if (st != S4D_OK)
            return st;
    }
    p->axis = axis;
    for (int d = 0; d < r; d++) {
        if (d < axis)
            p->outer *= in->dims[d];
        else if (d == axis || ctx->opset < 13)
            p->n *= in->dims[d];
        else
            p->inner *= in->dims[d];
    }
    return S4D_OK;
}

static s4d_status infer_sm(s4d_op_ctx *ctx, int log)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *in = &ctx->inputs[0];
    if (in->dtype != S4D_DTYPE_FLOAT32 && in->dtype != S4D_DTYPE_FLOAT64 && in->dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (input) has dtype %s, expected a float type",
                            s4d_dtype_name(in->dtype));
    s4d_softmax_params p;
    if ((st = sm_params(ctx, log, &p)) != S4D_OK)
        return st;
    if (ctx->params)
        memcpy(ctx->params, &p, sizeof p);
    s4d_set_out(ctx, 0, in->dtype, in->rank, in->dims);
    return S4D_OK;
}

/*
 * float32 with inner > 1: a unit is (outer, block of SM_BLOCK inner positions),
 * so every pass over the n values walks contiguous memory and vectorises,
 * instead of striding by inner for each position separately.
 */
#define SM_BLOCK 64

static void sm_blocks(void *vp, int64_t u0, int64_t u1)
{
    const sm_job *j = vp;
    int64_t n = j->n, s = j->inner, nb = (s + SM_BLOCK - 1) / SM_BLOCK;
    float mx[SM_BLOCK];
    double sum[SM_BLOCK];
    for (int64_t u = u0; u < u1; u++) {
        int64_t o = u / nb, i0 = (u % nb) * SM_BLOCK, m = s - i0 < SM_BLOCK ? s - i0 : SM_BLOCK;
        const float *x = (const float *)j->x + o * n * s + i0;
        float *y = (float *)j->y + o * n * s + i0;
        for (int64_t i = 0; i < m; i++) {
            mx[i] = x[i];
            sum[i] = 0;
        }
        for (int64_t k = 1; k < n; k++)
            for (int64_t i = 0; i < m; i++) {
                float v = x[k * s + i];
                mx[i] = v > mx[i] || mx[i] != mx[i] ? v : mx[i];
            }
        for (int64_t k = 0; k < n; k++)
            for (int64_t i = 0; i < m; i++) {
                float e = expf(x[k * s + i] - mx[i]);
                if (!j->log)
                    y[k * s + i] = e;
                sum[i] += e;
            }
        if (j->log) {
            float ls[SM_BLOCK];
            for (int64_t i = 0; i < m; i++)
                ls[i] = (float)log(sum[i]);
            for (int64_t k = 0; k < n; k++)
                for (int64_t i = 0; i < m; i++)
                    y[k * s + i] = (x[k * s + i] - mx[i]) - ls[i];
        } else {
            for (int64_t i = 0; i < m; i++)
                mx[i] = (float)(1.0 / sum[i]); /* now the scale */
            for (int64_t k = 0; k < n; k++)
                for (int64_t i = 0; i < m; i++)
                    y[k * s + i] *= mx[i];
        }
    }
}

static s4d_status run_sm(s4d_op_ctx *ctx, int log)
{
    s4d_softmax_params local;
    const s4d_softmax_params *p = ctx->params;
    if (!p) {
        s4d_status st = sm_params(ctx, log, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    int64_t outer = p->outer, n = p->n, inner = p->inner;
    if (n == 0 || outer * inner == 0)
        return S4D_OK;
    sm_job j = {log, ctx->inputs[0].dtype, n, inner, ctx->inputs[0].data, ctx->outputs[0].data};
    if (j.dt == S4D_DTYPE_FLOAT32 && inner > 1) {
        int64_t units = outer * ((inner + SM_BLOCK - 1) / SM_BLOCK);
        s4d_parallel_for(ctx->pool, units, 1 + 8192 / (n * SM_BLOCK), sm_blocks, &j);
        return S4D_OK;
    }
    s4d_parallel_for(ctx->pool, outer * inner, 1 + 8192 / n, sm_rows, &j);
    return S4D_OK;
}

static s4d_status infer_softmax(s4d_op_ctx *ctx) { return infer_sm(ctx, 0); }
static s4d_status infer_log_softmax(s4d_op_ctx *ctx) { return infer_sm(ctx, 1); }
static s4d_status run_softmax(s4d_op_ctx *ctx) { return run_sm(ctx, 0); }
static s4d_status run_log_softmax(s4d_op_ctx *ctx) { return run_sm(ctx, 1); }

static const s4d_attr_spec softmax_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_softmax = {"", "Softmax", 1, infer_softmax, NULL, run_softmax,
                                      sizeof(s4d_softmax_params), 0, softmax_attrs};
const s4d_op_schema s4d_op_log_softmax = {"", "LogSoftmax", 1, infer_log_softmax, NULL, run_log_softmax,
                                          sizeof(s4d_softmax_params), 0, softmax_attrs};
