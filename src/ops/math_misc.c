/*
 * Arithmetic ops of real-world exports: Shrink, Hardmax, CumSum, BitShift,
 * Det, and Dropout in its inference form (the identity, and a mask of ones).
 */
#include <math.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/extra.h"

/* ---- Shrink: x < -lambd ? x + bias : x > lambd ? x - bias : 0 ---- */

static s4d_status shrink_make(s4d_op_ctx *ctx, s4d_shrink_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (!s4d_dtype_is_int(dt) && !s4d_dtype_is_float(dt))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input has dtype %s, expected a number type",
                            s4d_dtype_name(dt));
    p->bias = s4d_op_attr_float(ctx, "bias", 0.0f);
    p->lambd = s4d_op_attr_float(ctx, "lambd", 0.5f);
    return S4D_OK;
}

static s4d_status shrink_infer(s4d_op_ctx *ctx)
{
    s4d_shrink_params p;
    s4d_status st = shrink_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_shrink_params *)ctx->params = p;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status shrink_run(s4d_op_ctx *ctx)
{
    s4d_shrink_params p;
    if (ctx->params) {
        p = *(const s4d_shrink_params *)ctx->params;
    } else {
        s4d_status st = shrink_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    int64_t n = s4d_tensor_numel(x);
    double lambd = p.lambd, bias = p.bias;
    if (x->dtype == S4D_DTYPE_FLOAT32) {
        const float *a = x->data;
        float *y = ctx->outputs[0].data;
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] < -p.lambd ? a[i] + p.bias : a[i] > p.lambd ? a[i] - p.bias : 0.0f;
        return S4D_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = s4d_load_f64(x->dtype, x->data, i);
        s4d_store_f64(x->dtype, ctx->outputs[0].data, i,
                      v < -lambd ? v + bias : v > lambd ? v - bias : 0.0);
    }
    return S4D_OK;
}

static const s4d_attr_spec shrink_attrs[] = {{"bias", S4D_ATTR_FLOAT}, {"lambd", S4D_ATTR_FLOAT}, {NULL}};
const s4d_op_schema s4d_op_shrink = {"", "Shrink", 9, shrink_infer, NULL, shrink_run,
                                     sizeof(s4d_shrink_params), 0, shrink_attrs};

/* ---- Hardmax: 1 at the first maximum along the axis (before opset 13: over the flattened tail) ---- */

static s4d_status hardmax_make(s4d_op_ctx *ctx, s4d_hardmax_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (!s4d_dtype_is_float(x->dtype))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input has dtype %s, expected a float type",
                            s4d_dtype_name(x->dtype));
    int old = ctx->opset < 13, ax;
    if ((st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", old ? 1 : -1), x->rank > 0 ? x->rank : 1,
                            "axis", &ax)) != S4D_OK)
        return st;
    int64_t outer = 1, len = 1, stride = 1;
    for (int d = 0; d < ax; d++)
        outer *= x->dims[d];
    if (old) {
        for (int d = ax; d < x->rank; d++)
            len *= x->dims[d];
    } else {
        len = x->rank ? x->dims[ax] : 1;
        for (int d = ax + 1; d < x->rank; d++)
            stride *= x->dims[d];
    }
    p->outer = outer, p->len = len, p->stride = stride;
    return S4D_OK;
}

static s4d_status hardmax_infer(s4d_op_ctx *ctx)
{
    s4d_hardmax_params p;
    s4d_status st = hardmax_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_hardmax_params *)ctx->params = p;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status hardmax_run(s4d_op_ctx *ctx)
{
    s4d_hardmax_params p;
    if (ctx->params) {
        p = *(const s4d_hardmax_params *)ctx->params;
    } else {
        s4d_status st = hardmax_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_tensor *y = &ctx->outputs[0];
    memset(y->data, 0, s4d_dtype_size(y->dtype) * (size_t)s4d_tensor_numel(y));
    for (int64_t o = 0; o < p.outer; o++)
        for (int64_t s = 0; s < p.stride; s++) {
            int64_t base = o * p.len * p.stride + s, best = 0;
            double bv = s4d_load_f64(x->dtype, x->data, base);
            for (int64_t k = 1; k < p.len; k++) {
                double v = s4d_load_f64(x->dtype, x->data, base + k * p.stride);
                if (v > bv)
                    bv = v, best = k;
            }
            if (p.len > 0)
                s4d_store_f64(y->dtype, y->data, base + best * p.stride, 1.0);
        }
    return S4D_OK;
}

static const s4d_attr_spec hardmax_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_hardmax = {"", "Hardmax", 1, hardmax_infer, NULL, hardmax_run,
                                      sizeof(s4d_hardmax_params), 0, hardmax_attrs};

/* ---- CumSum ---- */

static s4d_status cumsum_make(s4d_op_ctx *ctx, s4d_cumsum_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *a = &ctx->inputs[1];
    s4d_dtype dt = x->dtype;
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT64 && dt != S4D_DTYPE_INT32 &&
        dt != S4D_DTYPE_INT64 && dt != S4D_DTYPE_UINT32 && dt != S4D_DTYPE_UINT64)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "x has dtype %s (float, double, int32, int64, uint32, uint64)",
                            s4d_dtype_name(dt));
    if ((a->dtype != S4D_DTYPE_INT64 && a->dtype != S4D_DTYPE_INT32) || s4d_tensor_numel(a) != 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis must be one int32 or int64");
    memset(p, 0, sizeof *p);
    p->exclusive = s4d_op_attr_int(ctx, "exclusive", 0) != 0;
    p->reverse = s4d_op_attr_int(ctx, "reverse", 0) != 0;
    if (x->rank < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "x must have rank >= 1");
    if (a->data) {
        int ax;
        if ((st = s4d_norm_axis(ctx, s4d_load_i64(a->dtype, a->data, 0), x->rank, "axis", &ax)) != S4D_OK)
            return st;
        p->axis = ax;
    } else {
        p->axis_at_run = 1;
    }
    return S4D_OK;
}

static s4d_status cumsum_infer(s4d_op_ctx *ctx)
{
    s4d_cumsum_params p;
    s4d_status st = cumsum_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_cumsum_params *)ctx->params = p;
    s4d_set_out(ctx, 0, ctx->inputs[0].dtype, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

#define CUMSUM_LOOP(T, ACC)                                                                        \
    do {                                                                                           \
        const T *xs = x->data;                                                                     \
        T *ys = y->data;                                                                           \
        for (int64_t o = 0; o < outer; o++)                                                        \
            for (int64_t i = 0; i < inner; i++) {                                                  \
                ACC acc = 0;                                                                       \
                for (int64_t s = 0; s < len; s++) {                                                \
                    int64_t k = p.reverse ? len - 1 - s : s;                                       \
                    int64_t at = (o * len + k) * inner + i;                                        \
                    if (p.exclusive) {                                                             \
                        ys[at] = (T)acc;                                                           \
                        acc += xs[at];                                                             \
                    } else {                                                                       \
                        acc += xs[at];                                                             \
                        ys[at] = (T)acc;                                                           \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
    } while (0)

static s4d_status cumsum_run(s4d_op_ctx *ctx)
{
    s4d_cumsum_params p;
    if (ctx->params) {
        p = *(const s4d_cumsum_params *)ctx->params;
    } else {
        s4d_status st = cumsum_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_tensor *y = &ctx->outputs[0];
    if (p.axis_at_run) {
        int64_t a = s4d_load_i64(ctx->inputs[1].dtype, ctx->inputs[1].data, 0);
        if (a < -x->rank || a >= x->rank)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "axis %lld is outside [-%d, %d)",
                                (long long)a, x->rank, x->rank);
        p.axis = (int32_t)(a < 0 ? a + x->rank : a);
    }
    int64_t outer = 1, inner = 1, len = x->dims[p.axis];
    for (int d = 0; d < p.axis; d++)
        outer *= x->dims[d];
    for (int d = p.axis + 1; d < x->rank; d++)
        inner *= x->dims[d];
    switch (x->dtype) {
    case S4D_DTYPE_FLOAT32: CUMSUM_LOOP(float, double); break;
    case S4D_DTYPE_FLOAT64: CUMSUM_LOOP(double, double); break;
    case S4D_DTYPE_INT32: CUMSUM_LOOP(int32_t, int64_t); break;
    case S4D_DTYPE_INT64: CUMSUM_LOOP(int64_t, int64_t); break;
    case S4D_DTYPE_UINT32: CUMSUM_LOOP(uint32_t, uint64_t); break;
    case S4D_DTYPE_UINT64: CUMSUM_LOOP(uint64_t, uint64_t); break;
    default:
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "x has dtype %s", s4d_dtype_name(x->dtype));
    }
    return S4D_OK;
}

static const s4d_attr_spec cumsum_attrs[] = {
    {"exclusive", S4D_ATTR_INT, S4D_ATTR_BOOL}, {"reverse", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
const s4d_op_schema s4d_op_cumsum = {"", "CumSum", 11, cumsum_infer, NULL, cumsum_run,
                                     sizeof(s4d_cumsum_params), 0, cumsum_attrs};

/* ---- BitShift (unsigned, broadcasting); shifts past the width give 0 ---- */

static s4d_status bitshift_infer(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 2, 1);
    if (st != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (dt != S4D_DTYPE_UINT8 && dt != S4D_DTYPE_UINT16 && dt != S4D_DTYPE_UINT32 && dt != S4D_DTYPE_UINT64)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X has dtype %s, expected an unsigned integer type",
                            s4d_dtype_name(dt));
    if (ctx->inputs[1].dtype != dt)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "Y has dtype %s, X has %s",
                            s4d_dtype_name(ctx->inputs[1].dtype), s4d_dtype_name(dt));
    const char *dir = s4d_op_attr_string(ctx, "direction", "");
    int left = strcmp(dir, "LEFT") == 0;
    if (!left && strcmp(dir, "RIGHT") != 0)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "direction '%s' (LEFT or RIGHT)", dir);
    if (ctx->params)
        ((s4d_bitshift_params *)ctx->params)->left = left;
    const s4d_tensor *ins[2] = {&ctx->inputs[0], &ctx->inputs[1]};
    int rank;
    int64_t dims[S4D_MAX_RANK];
    if ((st = s4d_bcast_shape(ctx, ins, 2, &rank, dims)) != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, dt, rank, dims);
    return S4D_OK;
}

static s4d_status bitshift_run(s4d_op_ctx *ctx)
{
    int left = ctx->params ? ((const s4d_bitshift_params *)ctx->params)->left
                           : strcmp(s4d_op_attr_string(ctx, "direction", ""), "LEFT") == 0;
    const s4d_tensor *ins[2] = {&ctx->inputs[0], &ctx->inputs[1]};
    s4d_tensor *y = &ctx->outputs[0];
    s4d_bcast b;
    s4d_bcast_init(&b, y, ins, 2);
    s4d_dtype dt = y->dtype;
    unsigned bits = (unsigned)s4d_dtype_size(dt) * 8;
    int64_t idx[S4D_MAX_RANK], offs[S4D_BCAST_MAX_IN];
    s4d_bcast_seek(&b, 0, idx, offs);
    int L = b.rank - 1;
    int64_t sx = b.rank ? b.st[0][L] : 0, sy = b.rank ? b.st[1][L] : 0;
    for (int64_t r = 0; r < b.rows; r++) {
        for (int64_t i = 0; i < b.inner; i++) {
            uint64_t xv = (uint64_t)s4d_load_i64(dt, ctx->inputs[0].data, offs[0] + i * sx);
            uint64_t sv = (uint64_t)s4d_load_i64(dt, ctx->inputs[1].data, offs[1] + i * sy);
            uint64_t v = sv >= bits ? 0 : left ? xv << sv : xv >> sv;
            int64_t at = r * b.inner + i;
            switch (dt) {
            case S4D_DTYPE_UINT8: ((uint8_t *)y->data)[at] = (uint8_t)v; break;
            case S4D_DTYPE_UINT16: ((uint16_t *)y->data)[at] = (uint16_t)v; break;
            case S4D_DTYPE_UINT32: ((uint32_t *)y->data)[at] = (uint32_t)v; break;
            default: ((uint64_t *)y->data)[at] = v; break;
            }
        }
        s4d_bcast_next(&b, idx, offs);
    }
    return S4D_OK;
}

static const s4d_attr_spec bitshift_attrs[] = {{"direction", S4D_ATTR_STRING}, {NULL}};
const s4d_op_schema s4d_op_bitshift = {"", "BitShift", 11, bitshift_infer, NULL, bitshift_run,
                                       sizeof(s4d_bitshift_params), 0, bitshift_attrs};

/* ---- Det: LU with partial pivoting in double, per matrix of [..., M, M] ---- */

static s4d_status det_infer(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    if (x->dtype != S4D_DTYPE_FLOAT32 && x->dtype != S4D_DTYPE_FLOAT64)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "X has dtype %s (float32 or float64)",
                            s4d_dtype_name(x->dtype));
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "X must be [..., M, M]");
    s4d_set_out(ctx, 0, x->dtype, x->rank - 2, x->dims);
    return S4D_OK;
}

static size_t det_ws(const s4d_op_ctx *ctx)
{
    int64_t m = ctx->inputs[0].dims[ctx->inputs[0].rank - 1];
    return sizeof(double) * (size_t)(m * m);
}

static s4d_status det_run(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0];
    int64_t m = x->dims[x->rank - 1], mats = s4d_tensor_numel(&ctx->outputs[0]);
    if (ctx->workspace_size < sizeof(double) * (size_t)(m * m))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            ctx->workspace_size);
    double *a = ctx->workspace;
    for (int64_t k = 0; k < mats; k++) {
        for (int64_t i = 0; i < m * m; i++)
            a[i] = s4d_load_f64(x->dtype, x->data, k * m * m + i);
        double det = 1.0;
        for (int64_t c = 0; c < m && det != 0.0; c++) {
            int64_t piv = c;
            for (int64_t r = c + 1; r < m; r++)
                if (fabs(a[r * m + c]) > fabs(a[piv * m + c]))
                    piv = r;
            if (a[piv * m + c] == 0.0) {
                det = 0.0;
                break;
            }
            if (piv != c) {
                for (int64_t j = 0; j < m; j++) {
                    double t = a[c * m + j];
                    a[c * m + j] = a[piv * m + j];
                    a[piv * m + j] = t;
                }
                det = -det;
            }
            det *= a[c * m + c];
            for (int64_t r = c + 1; r < m; r++) {
                double f = a[r * m + c] / a[c * m + c];
                for (int64_t j = c; j < m; j++)
                    a[r * m + j] -= f * a[c * m + j];
            }
        }
        s4d_store_f64(x->dtype, ctx->outputs[0].data, k, det);
    }
    return S4D_OK;
}

const s4d_op_schema s4d_op_det = {"", "Det", 11, det_infer, det_ws, det_run, 0, 0};

/* ---- Dropout, inference: Y = X and a mask of ones; training with ratio > 0 is refused ---- */

static s4d_status dropout_make(s4d_op_ctx *ctx, s4d_dropout_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, ctx->opset >= 12 ? 3 : 1, ctx->num_outputs);
    if (st != S4D_OK)
        return st;
    if (ctx->num_outputs < 1 || ctx->num_outputs > 2)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 1 or 2 outputs, got %d", ctx->num_outputs);
    if (s4d_dtype_size(ctx->inputs[0].dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "data has unsupported dtype %s",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    p->ratio = ctx->opset >= 12 ? 0.5f : s4d_op_attr_float(ctx, "ratio", 0.5f);
    p->training = 0;
    if (ctx->opset >= 12 && s4d_in_present(ctx, 1)) {
        const s4d_tensor *r = &ctx->inputs[1];
        if (!s4d_dtype_is_float(r->dtype) || s4d_tensor_numel(r) != 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "ratio must be one float");
        p->ratio = r->data ? (float)s4d_load_f64(r->dtype, r->data, 0) : -1.0f;
    }
    if (ctx->opset >= 12 && s4d_in_present(ctx, 2)) {
        const s4d_tensor *t = &ctx->inputs[2];
        if (t->dtype != S4D_DTYPE_BOOL || s4d_tensor_numel(t) != 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "training_mode must be one bool");
        p->training = t->data ? *(const uint8_t *)t->data != 0 : -1;
    }
    if (p->training == 1 && p->ratio != 0.0f)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "training_mode with ratio %g draws a random mask: not an inference "
                            "operation",
                            (double)p->ratio);
    return S4D_OK;
}

static s4d_status dropout_infer(s4d_op_ctx *ctx)
{
    s4d_dropout_params p;
    s4d_status st = dropout_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(s4d_dropout_params *)ctx->params = p;
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_set_out(ctx, 0, x->dtype, x->rank, x->dims);
    if (ctx->num_outputs > 1)
        s4d_set_out(ctx, 1, ctx->opset >= 10 ? S4D_DTYPE_BOOL : x->dtype, x->rank, x->dims);
    return S4D_OK;
}

static s4d_status dropout_run(s4d_op_ctx *ctx)
{
    s4d_dropout_params p;
    if (ctx->params) {
        p = *(const s4d_dropout_params *)ctx->params;
    } else {
        s4d_status st = dropout_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    float ratio = p.ratio < 0 ? (float)s4d_load_f64(ctx->inputs[1].dtype, ctx->inputs[1].data, 0) : p.ratio;
    int training = p.training < 0 ? *(const uint8_t *)ctx->inputs[2].data != 0 : p.training;
    if (training && ratio != 0.0f)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "training_mode with ratio %g draws a random mask: not an inference "
                            "operation",
                            (double)ratio);
    const s4d_tensor *x = &ctx->inputs[0];
    size_t bytes = s4d_dtype_size(x->dtype) * (size_t)s4d_tensor_numel(x);
    if (bytes && ctx->outputs[0].data != x->data)
        memcpy(ctx->outputs[0].data, x->data, bytes);
    if (ctx->num_outputs > 1) {
        s4d_tensor *m = &ctx->outputs[1];
        int64_t n = s4d_tensor_numel(m);
        for (int64_t i = 0; i < n; i++)
            s4d_store_f64(m->dtype, m->data, i, 1.0);
    }
    return S4D_OK;
}

/* ratio became an input at opset 12; seed, is_test and consumed_inputs change nothing in inference. */
static const s4d_attr_spec dropout_attrs[] = {{"ratio", S4D_ATTR_FLOAT, 0, 0, 11},
                                              {"seed", S4D_ATTR_INT},
                                              {"is_test", S4D_ATTR_INT},
                                              {"consumed_inputs", S4D_ATTR_INTS},
                                              {NULL}};
const s4d_op_schema s4d_op_dropout = {"", "Dropout", 1, dropout_infer, NULL, dropout_run,
                                      sizeof(s4d_dropout_params), 0, dropout_attrs};

/* ---- HannWindow, HammingWindow, BlackmanWindow: the size decides the shape, so it is a constant ---- */

typedef struct window_params {
    int64_t size;
    int32_t dtype, periodic;
} window_params;

static s4d_status window_make(s4d_op_ctx *ctx, window_params *p)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    int64_t v[1], n;
    if ((st = s4d_const_ints(ctx, 0, "size", v, 1, &n)) != S4D_OK)
        return st;
    if (n != 1 || v[0] < 0)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "size must be one non-negative integer");
    p->size = v[0];
    p->periodic = s4d_op_attr_int(ctx, "periodic", 1) != 0;
    p->dtype = (int32_t)s4d_op_attr_int(ctx, "output_datatype", S4D_DTYPE_FLOAT32);
    if (!s4d_dtype_is_float((s4d_dtype)p->dtype) && !s4d_dtype_is_int((s4d_dtype)p->dtype))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "output_datatype %d is not a number type", p->dtype);
    return S4D_OK;
}

static s4d_status window_infer(s4d_op_ctx *ctx)
{
    window_params p = {0, 0, 0};
    s4d_status st = window_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(window_params *)ctx->params = p;
    s4d_set_out(ctx, 0, (s4d_dtype)p.dtype, 1, &p.size);
    return S4D_OK;
}

/* a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N = size (periodic) or size - 1. */
static s4d_status window_run(s4d_op_ctx *ctx, double a0, double a1, double a2)
{
    window_params p = {0, 0, 0};
    if (ctx->params) {
        p = *(const window_params *)ctx->params;
    } else {
        s4d_status st = window_make(ctx, &p);
        if (st != S4D_OK)
            return st;
    }
    double den = (double)(p.periodic ? p.size : p.size - 1);
    for (int64_t i = 0; i < p.size; i++) {
        double t = den > 0 ? 2.0 * 3.14159265358979323846 * (double)i / den : 0.0;
        s4d_store_f64((s4d_dtype)p.dtype, ctx->outputs[0].data, i, a0 - a1 * cos(t) + a2 * cos(2.0 * t));
    }
    return S4D_OK;
}

static s4d_status hann_run(s4d_op_ctx *ctx) { return window_run(ctx, 0.5, 0.5, 0.0); }
static s4d_status hamming_run(s4d_op_ctx *ctx) { return window_run(ctx, 25.0 / 46.0, 21.0 / 46.0, 0.0); }
static s4d_status blackman_run(s4d_op_ctx *ctx) { return window_run(ctx, 0.42, 0.5, 0.08); }

static const s4d_attr_spec window_attrs[] = {
    {"output_datatype", S4D_ATTR_INT}, {"periodic", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
const s4d_op_schema s4d_op_hann_window = {"", "HannWindow", 17, window_infer, NULL, hann_run,
                                          sizeof(window_params), 0, window_attrs};
const s4d_op_schema s4d_op_hamming_window = {"", "HammingWindow", 17, window_infer, NULL, hamming_run,
                                             sizeof(window_params), 0, window_attrs};
const s4d_op_schema s4d_op_blackman_window = {"", "BlackmanWindow", 17, window_infer, NULL, blackman_run,
                                              sizeof(window_params), 0, window_attrs};
