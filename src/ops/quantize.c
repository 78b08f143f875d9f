/*
 * The quantisation ops of QDQ and integer-GEMM exports, host references:
 * QuantizeLinear and DequantizeLinear (per tensor or per axis, opsets 10 and
 * 13), DynamicQuantizeLinear, MatMulInteger and QLinearMatMul (batched, the
 * batch dims broadcast). Rounding is to nearest, ties to even, as ONNX
 * specifies; results saturate to the integer type.
 */
#include <math.h>
#include <string.h>

#include "ops/broadcast.h"

/* Scale and zero point of quantisation: per tensor, or per index along an axis. */
typedef struct q_axis {
    int axis;        /* -1: per tensor */
    int64_t len, inner;
} q_axis;

static s4d_status q_check_param(s4d_op_ctx *ctx, int idx, const char *what, const s4d_tensor *x,
                                int64_t axis_attr, q_axis *qa)
{
    const s4d_tensor *t = &ctx->inputs[idx];
    if (s4d_tensor_numel(t) == 1 && t->rank <= 1 && qa->axis < 0)
        return S4D_OK; /* per tensor */
    if (t->rank != 1 || ctx->opset < 13)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (%s) must be a scalar%s", idx, what,
                            ctx->opset < 13 ? "" : " or 1-D along axis");
    int ax;
    s4d_status st = s4d_norm_axis(ctx, axis_attr, x->rank, "axis", &ax);
    if (st != S4D_OK)
        return st;
    if (t->dims[0] != x->dims[ax])
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (%s) has %lld values for axis %d of size %lld",
                            idx, what, (long long)t->dims[0], ax, (long long)x->dims[ax]);
    if (qa->axis >= 0 && qa->axis != ax)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "scale and zero point disagree on the axis");
    qa->axis = ax;
    qa->len = x->dims[ax];
    qa->inner = 1;
    for (int d = ax + 1; d < x->rank; d++)
        qa->inner *= x->dims[d];
    return S4D_OK;
}

static int64_t q_index(const q_axis *qa, int64_t i)
{
    return qa->axis < 0 ? 0 : i / qa->inner % qa->len;
}

static int q_is_int8(s4d_dtype dt)
{
    return dt == S4D_DTYPE_UINT8 || dt == S4D_DTYPE_INT8;
}

static double q_lo(s4d_dtype dt)
{
    return dt == S4D_DTYPE_INT8 ? -128.0 : dt == S4D_DTYPE_INT32 ? -2147483648.0 : 0.0;
}

static double q_hi(s4d_dtype dt)
{
    return dt == S4D_DTYPE_INT8 ? 127.0 : dt == S4D_DTYPE_INT32 ? 2147483647.0 : 255.0;
}

static double q_sat(double v, s4d_dtype dt)
{
    return v != v ? 0.0 : v < q_lo(dt) ? q_lo(dt) : v > q_hi(dt) ? q_hi(dt) : v;
}

/* ---- QuantizeLinear / DequantizeLinear ---- */

static s4d_status q_common(s4d_op_ctx *ctx, int quant, q_axis *qa)
{
    s4d_status st = s4d_check_arity(ctx, 2, 3, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *s = &ctx->inputs[1];
    if (quant ? (x->dtype != S4D_DTYPE_FLOAT32 && x->dtype != S4D_DTYPE_INT32)
              : (!q_is_int8(x->dtype) && x->dtype != S4D_DTYPE_INT32))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (x) has dtype %s (%s)", s4d_dtype_name(x->dtype),
                            quant ? "float32 or int32" : "uint8, int8 or int32");
    if (s->dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 1 (scale) must be float32, got %s",
                            s4d_dtype_name(s->dtype));
    int64_t axis = s4d_op_attr_int(ctx, "axis", 1);
    qa->axis = -1;
    if ((st = q_check_param(ctx, 1, "scale", x, axis, qa)) != S4D_OK)
        return st;
    if (s4d_in_present(ctx, 2)) {
        const s4d_tensor *z = &ctx->inputs[2];
        if (quant ? !q_is_int8(z->dtype) : z->dtype != x->dtype)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 2 (zero point) has dtype %s",
                                s4d_dtype_name(z->dtype));
        if ((st = q_check_param(ctx, 2, "zero point", x, axis, qa)) != S4D_OK)
            return st;
    }
    return S4D_OK;
}

static s4d_status quant_infer(s4d_op_ctx *ctx)
{
    q_axis qa;
    s4d_status st = q_common(ctx, 1, &qa);
    if (st != S4D_OK)
        return st;
    s4d_dtype out = s4d_in_present(ctx, 2) ? ctx->inputs[2].dtype : S4D_DTYPE_UINT8;
    s4d_set_out(ctx, 0, out, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status quant_run(s4d_op_ctx *ctx)
{
    q_axis qa;
    s4d_status st = q_common(ctx, 1, &qa);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    const float *scale = ctx->inputs[1].data;
    const s4d_tensor *z = s4d_in_present(ctx, 2) ? &ctx->inputs[2] : NULL;
    s4d_tensor *y = &ctx->outputs[0];
    int64_t n = s4d_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = q_index(&qa, i);
        double zp = z ? s4d_load_f64(z->dtype, z->data, c) : 0.0;
        /* x / scale in float32, as the reference does, then ties to even. */
        float q = (x->dtype == S4D_DTYPE_FLOAT32 ? ((const float *)x->data)[i]
                                                 : (float)((const int32_t *)x->data)[i]) /
                  scale[c];
        s4d_store_f64(y->dtype, y->data, i, q_sat(nearbyint((double)q) + zp, y->dtype));
    }
    return S4D_OK;
}

static s4d_status dequant_infer(s4d_op_ctx *ctx)
{
    q_axis qa;
    s4d_status st = q_common(ctx, 0, &qa);
    if (st != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, S4D_DTYPE_FLOAT32, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status dequant_run(s4d_op_ctx *ctx)
{
    q_axis qa;
    s4d_status st = q_common(ctx, 0, &qa);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0];
    const float *scale = ctx->inputs[1].data;
    const s4d_tensor *z = s4d_in_present(ctx, 2) ? &ctx->inputs[2] : NULL;
    float *y = ctx->outputs[0].data;
    int64_t n = s4d_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = q_index(&qa, i);
        int64_t v = s4d_load_i64(x->dtype, x->data, i) - (z ? s4d_load_i64(z->dtype, z->data, c) : 0);
        y[i] = (float)v * scale[c];
    }
    return S4D_OK;
}

static const s4d_attr_spec q_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_quantize_linear = {"", "QuantizeLinear", 10, quant_infer, NULL, quant_run, 0, 0, q_attrs};
const s4d_op_schema s4d_op_dequantize_linear = {"", "DequantizeLinear", 10, dequant_infer, NULL, dequant_run,
                                                0, 0, q_attrs};

/* ---- DynamicQuantizeLinear: uint8 with the scale and zero point of x's range (0 included) ---- */

static s4d_status dynq_infer(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 3);
    if (st != S4D_OK)
        return st;
    if (ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "x must be float32, got %s",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    int64_t none[1] = {0};
    s4d_set_out(ctx, 0, S4D_DTYPE_UINT8, ctx->inputs[0].rank, ctx->inputs[0].dims);
    s4d_set_out(ctx, 1, S4D_DTYPE_FLOAT32, 0, none);
    s4d_set_out(ctx, 2, S4D_DTYPE_UINT8, 0, none);
    return S4D_OK;
}

static s4d_status dynq_run(s4d_op_ctx *ctx)
{
    const float *x = ctx->inputs[0].data;
    int64_t n = s4d_tensor_numel(&ctx->inputs[0]);
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    float scale = (hi - lo) / 255.0f;
    float zpf = scale > 0.0f ? 0.0f - lo / scale : 0.0f;
    uint8_t zp = (uint8_t)q_sat(nearbyint((double)zpf), S4D_DTYPE_UINT8);
    uint8_t *y = ctx->outputs[0].data;
    for (int64_t i = 0; i < n; i++)
        y[i] = scale > 0.0f ? (uint8_t)q_sat(nearbyint((double)(x[i] / scale)) + zp, S4D_DTYPE_UINT8) : zp;
    *(float *)ctx->outputs[1].data = scale;
    *(uint8_t *)ctx->outputs[2].data = zp;
    return S4D_OK;
}

const s4d_op_schema s4d_op_dynamic_quantize_linear = {"", "DynamicQuantizeLinear", 11, dynq_infer, NULL,
                                                      dynq_run, 0, 0};

/* ---- MatMulInteger and QLinearMatMul: int32 sums of (a - a_zp)(b - b_zp), batch dims broadcast ---- */

typedef struct qmm_shape {
    int64_t m, n, k;
    int rank;                      /* of the output */
    int64_t out[S4D_MAX_RANK];
    int64_t batch;                 /* product of the output's batch dims */
} qmm_shape;

static s4d_status qmm_shape_of(s4d_op_ctx *ctx, const s4d_tensor *a, const s4d_tensor *b, qmm_shape *q)
{
    if (!q_is_int8(a->dtype) || !q_is_int8(b->dtype))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "A and B must be uint8 or int8, got %s and %s",
                            s4d_dtype_name(a->dtype), s4d_dtype_name(b->dtype));
    if (a->rank < 2 || b->rank < 2)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "A and B must have rank >= 2 (1-D operands are not supported)");
    q->m = a->dims[a->rank - 2];
    q->k = a->dims[a->rank - 1];
    q->n = b->dims[b->rank - 1];
    if (b->dims[b->rank - 2] != q->k)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "A's last dim %lld does not match B's rows %lld",
                            (long long)q->k, (long long)b->dims[b->rank - 2]);
    s4d_tensor ab = *a, bb = *b;
    ab.rank -= 2;
    bb.rank -= 2;
    const s4d_tensor *ins[2] = {&ab, &bb};
    int br;
    int64_t bd[S4D_MAX_RANK];
    s4d_status st = s4d_bcast_shape(ctx, ins, 2, &br, bd);
    if (st != S4D_OK)
        return st;
    q->rank = br + 2;
    q->batch = 1;
    for (int d = 0; d < br; d++) {
        q->out[d] = bd[d];
        q->batch *= bd[d];
    }
    q->out[br] = q->m;
    q->out[br + 1] = q->n;
    return S4D_OK;
}

/* Offset (in matrices) of batch index bi of t within the broadcast batch dims of out. */
static int64_t qmm_batch_at(const s4d_tensor *t, const qmm_shape *q, int64_t bi)
{
    int tb = t->rank - 2, ob = q->rank - 2;
    int64_t off = 0, stride = 1;
    for (int d = ob - 1; d >= 0; d--) {
        int64_t c = bi % q->out[d];
        bi /= q->out[d];
        int td = d - (ob - tb);
        if (td >= 0) {
            if (t->dims[td] != 1)
                off += c * stride;
            stride *= t->dims[td];
        }
    }
    return off;
}

/* Zero point of A's row i (per row or scalar) and of B's column j. */
static int64_t qmm_zp(const s4d_op_ctx *ctx, int idx, int64_t i)
{
    if (!s4d_in_present(ctx, idx))
        return 0;
    const s4d_tensor *z = &ctx->inputs[idx];
    return s4d_load_i64(z->dtype, z->data, s4d_tensor_numel(z) == 1 ? 0 : i);
}

static void qmm_sum(const s4d_op_ctx *ctx, int ia, int ib, int iza, int izb, const qmm_shape *q,
                    int64_t bi, int64_t i, int64_t j, int64_t *acc)
{
    const s4d_tensor *a = &ctx->inputs[ia], *b = &ctx->inputs[ib];
    int64_t ao = qmm_batch_at(a, q, bi) * q->m * q->k, bo = qmm_batch_at(b, q, bi) * q->k * q->n;
    int64_t za = qmm_zp(ctx, iza, i), zb = qmm_zp(ctx, izb, j), s = 0;
    for (int64_t k = 0; k < q->k; k++)
        s += (s4d_load_i64(a->dtype, a->data, ao + i * q->k + k) - za) *
             (s4d_load_i64(b->dtype, b->data, bo + k * q->n + j) - zb);
    *acc = s;
}

static s4d_status mmi_infer(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 2, 4, 1);
    if (st != S4D_OK)
        return st;
    qmm_shape q;
    if ((st = qmm_shape_of(ctx, &ctx->inputs[0], &ctx->inputs[1], &q)) != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, S4D_DTYPE_INT32, q.rank, q.out);
    return S4D_OK;
}

/* MatMulInteger(A, B, a_zero_point, b_zero_point). */
static s4d_status mmi_run(s4d_op_ctx *ctx)
{
    qmm_shape q;
    s4d_status st = qmm_shape_of(ctx, &ctx->inputs[0], &ctx->inputs[1], &q);
    if (st != S4D_OK)
        return st;
    int32_t *y = ctx->outputs[0].data;
    for (int64_t bi = 0; bi < q.batch; bi++)
        for (int64_t i = 0; i < q.m; i++)
            for (int64_t j = 0; j < q.n; j++) {
                int64_t s;
                qmm_sum(ctx, 0, 1, 2, 3, &q, bi, i, j, &s);
                y[(bi * q.m + i) * q.n + j] = (int32_t)s;
            }
    return S4D_OK;
}

const s4d_op_schema s4d_op_matmul_integer = {"", "MatMulInteger", 10, mmi_infer, NULL, mmi_run, 0, 0};

/* QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp). */
static s4d_status qlmm_infer(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 8, 8, 1);
    if (st != S4D_OK)
        return st;
    qmm_shape q;
    if ((st = qmm_shape_of(ctx, &ctx->inputs[0], &ctx->inputs[3], &q)) != S4D_OK)
        return st;
    for (int i = 1; i < 6; i += 3)
        if (ctx->inputs[i].dtype != S4D_DTYPE_FLOAT32 || s4d_tensor_numel(&ctx->inputs[i]) != 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (a scale) must be one float32", i);
    if (ctx->inputs[6].dtype != S4D_DTYPE_FLOAT32 || s4d_tensor_numel(&ctx->inputs[6]) != 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input 6 (y_scale) must be one float32");
    if (!q_is_int8(ctx->inputs[7].dtype) || s4d_tensor_numel(&ctx->inputs[7]) != 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input 7 (y_zero_point) must be one uint8 or int8");
    s4d_set_out(ctx, 0, ctx->inputs[7].dtype, q.rank, q.out);
    return S4D_OK;
}

static s4d_status qlmm_run(s4d_op_ctx *ctx)
{
    qmm_shape q;
    s4d_status st = qmm_shape_of(ctx, &ctx->inputs[0], &ctx->inputs[3], &q);
    if (st != S4D_OK)
        return st;
    double mul = (double)*(const float *)ctx->inputs[1].data * (double)*(const float *)ctx->inputs[4].data /
                 (double)*(const float *)ctx->inputs[6].data;
    double yz = (double)s4d_load_i64(ctx->inputs[7].dtype, ctx->inputs[7].data, 0);
    s4d_tensor *y = &ctx->outputs[0];
    for (int64_t bi = 0; bi < q.batch; bi++)
        for (int64_t i = 0; i < q.m; i++)
            for (int64_t j = 0; j < q.n; j++) {
                int64_t s;
                qmm_sum(ctx, 0, 3, 2, 5, &q, bi, i, j, &s);
                s4d_store_f64(y->dtype, y->data, (bi * q.m + i) * q.n + j,
                              q_sat(nearbyint((double)s * mul) + yz, y->dtype));
            }
    return S4D_OK;
}

const s4d_op_schema s4d_op_qlinear_matmul = {"", "QLinearMatMul", 10, qlmm_infer, NULL, qlmm_run, 0, 0};
