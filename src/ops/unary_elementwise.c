/*
 * Element-wise unary ops: activations (Relu, LeakyRelu, Sigmoid, Tanh, Gelu,
 * Elu, Selu, HardSigmoid, HardSwish, Softplus, Softsign), math (Erf, Sqrt,
 * Reciprocal, Exp, Log, Neg, Abs, Sign, Floor, Ceil, Round, trigonometric and
 * hyperbolic functions), Clip, and Not.
 *
 * float32 and float64 share one body through <tgmath.h> (each computes in its
 * own precision); float16 goes through float32 in blocks. Integer types are
 * accepted where ONNX allows them and the op is exact on integers. infer()
 * parses attributes and constant Clip bounds into s4d_unary_params
 * (ops/elementwise.h) once.
 */
#include <tgmath.h>

#include "ops/broadcast.h"
#include "ops/elementwise.h"

typedef struct un_job {
    s4d_unop op;
    s4d_dtype dt;
    double alpha, beta, gamma; /* op parameters; Clip: alpha = min, beta = max */
    const void *x;
    void *y;
} un_job;

/* One body for float and double: T is the element type, literals widen as needed. */
#define UN_BODY(T)                                                                                \
    switch (j->op) {                                                                              \
    case S4D_UN_RELU: for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? (T)0 : x[i]; break;       \
    case S4D_UN_LEAKY_RELU: {                                                                     \
        T a = (T)j->alpha;                                                                        \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? a * x[i] : x[i];                        \
        break;                                                                                    \
    }                                                                                             \
    case S4D_UN_SIGMOID:                                                                          \
        /* exp(-|x|) never overflows; the sign picks s or 1 - s = e * s without a branch. */      \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T v = x[i], e = exp(-fabs(v)), s = (T)1 / ((T)1 + e);                                 \
            y[i] = v >= 0 ? s : e * s;                                                            \
        }                                                                                         \
        break;                                                                                    \
    case S4D_UN_TANH: for (int64_t i = 0; i < n; i++) y[i] = tanh(x[i]); break;                   \
    case S4D_UN_GELU:                                                                             \
        for (int64_t i = 0; i < n; i++)                                                           \
            y[i] = (T)0.5 * x[i] * ((T)1 + erf(x[i] * (T)0.70710678118654752440));                \
        break;                                                                                    \
    case S4D_UN_GELU_TANH:                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T v = x[i];                                                                           \
            y[i] = (T)0.5 * v * ((T)1 + tanh((T)0.79788456080286535588 * (v + (T)0.044715 * v * v * v))); \
        }                                                                                         \
        break;                                                                                    \
    case S4D_UN_ERF: for (int64_t i = 0; i < n; i++) y[i] = erf(x[i]); break;                     \
    case S4D_UN_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrt(x[i]); break;                   \
    case S4D_UN_RECIPROCAL: for (int64_t i = 0; i < n; i++) y[i] = (T)1 / x[i]; break;            \
    case S4D_UN_EXP: for (int64_t i = 0; i < n; i++) y[i] = exp(x[i]); break;                     \
    case S4D_UN_LOG: for (int64_t i = 0; i < n; i++) y[i] = log(x[i]); break;                     \
    case S4D_UN_NEG: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;                         \
    case S4D_UN_ABS: for (int64_t i = 0; i < n; i++) y[i] = fabs(x[i]); break;                    \
    case S4D_UN_SIN: for (int64_t i = 0; i < n; i++) y[i] = sin(x[i]); break;                     \
    case S4D_UN_COS: for (int64_t i = 0; i < n; i++) y[i] = cos(x[i]); break;                     \
    case S4D_UN_TAN: for (int64_t i = 0; i < n; i++) y[i] = tan(x[i]); break;                     \
    case S4D_UN_ASIN: for (int64_t i = 0; i < n; i++) y[i] = asin(x[i]); break;                   \
    case S4D_UN_ACOS: for (int64_t i = 0; i < n; i++) y[i] = acos(x[i]); break;                   \
    case S4D_UN_ATAN: for (int64_t i = 0; i < n; i++) y[i] = atan(x[i]); break;                   \
    case S4D_UN_SINH: for (int64_t i = 0; i < n; i++) y[i] = sinh(x[i]); break;                   \
    case S4D_UN_COSH: for (int64_t i = 0; i < n; i++) y[i] = cosh(x[i]); break;                   \
    case S4D_UN_ASINH: for (int64_t i = 0; i < n; i++) y[i] = asinh(x[i]); break;                 \
    case S4D_UN_ACOSH: for (int64_t i = 0; i < n; i++) y[i] = acosh(x[i]); break;                 \
    case S4D_UN_ATANH: for (int64_t i = 0; i < n; i++) y[i] = atanh(x[i]); break;                 \
    case S4D_UN_FLOOR: for (int64_t i = 0; i < n; i++) y[i] = floor(x[i]); break;                 \
    case S4D_UN_CEIL: for (int64_t i = 0; i < n; i++) y[i] = ceil(x[i]); break;                   \
    case S4D_UN_ROUND: for (int64_t i = 0; i < n; i++) y[i] = nearbyint(x[i]); break; /* half to even */ \
    case S4D_UN_SIGN:                                                                             \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? (T)1 : x[i] < 0 ? (T)-1 : x[i];         \
        break;                                                                                    \
    case S4D_UN_CLIP: {                                                                           \
        T lo = (T)j->alpha, hi = (T)j->beta;                                                      \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];            \
        break;                                                                                    \
    }                                                                                             \
    case S4D_UN_ELU: {                                                                            \
        T a = (T)j->alpha;                                                                        \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? a * (exp(x[i]) - (T)1) : x[i];          \
        break;                                                                                    \
    }                                                                                             \
    case S4D_UN_SELU: {                                                                           \
        T a = (T)j->alpha, g = (T)j->gamma;                                                       \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] <= 0 ? g * (a * exp(x[i]) - a) : g * x[i];    \
        break;                                                                                    \
    }                                                                                             \
    case S4D_UN_HARD_SIGMOID: {                                                                   \
        T a = (T)j->alpha, b = (T)j->beta;                                                        \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T v = a * x[i] + b;                                                                   \
            y[i] = v < 0 ? (T)0 : v > 1 ? (T)1 : v;                                               \
        }                                                                                         \
        break;                                                                                    \
    }                                                                                             \
    case S4D_UN_HARD_SWISH:                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T v = x[i] / (T)6 + (T)0.5;                                                           \
            y[i] = x[i] * (v < 0 ? (T)0 : v > 1 ? (T)1 : v);                                      \
        }                                                                                         \
        break;                                                                                    \
    case S4D_UN_SOFTPLUS:                                                                         \
        /* log(1 + e^x) without overflow for large x. */                                          \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T v = x[i];                                                                           \
            y[i] = v > 0 ? v + log1p(exp(-v)) : log1p(exp(v));                                    \
        }                                                                                         \
        break;                                                                                    \
    case S4D_UN_SOFTSIGN: for (int64_t i = 0; i < n; i++) y[i] = x[i] / ((T)1 + fabs(x[i])); break; \
    case S4D_UN_CELU: {                                                                           \
        T a = (T)j->alpha;                                                                        \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? a * expm1(x[i] / a) : x[i];             \
        break;                                                                                    \
    }                                                                                             \
    case S4D_UN_THRESHOLDED_RELU: {                                                               \
        T a = (T)j->alpha;                                                                        \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > a ? x[i] : (T)0;                            \
        break;                                                                                    \
    }                                                                                             \
    case S4D_UN_MISH:                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T v = x[i], sp = v > 0 ? v + log1p(exp(-v)) : log1p(exp(v));                          \
            y[i] = v * tanh(sp);                                                                  \
        }                                                                                         \
        break;                                                                                    \
    case S4D_UN_NOT: break;                                                                       \
    }

static void un_f32(const un_job *j, const float *x, float *y, int64_t n) { UN_BODY(float) }
static void un_f64(const un_job *j, const double *x, double *y, int64_t n) { UN_BODY(double) }

/* Integers: only the ops that are exact on integers reach here (see int_ok). */
#define UN_INT(T, UT)                                                                             \
    static void un_##T(const un_job *j, const T *x, T *y, int64_t n)                              \
    {                                                                                             \
        if (j->op == S4D_UN_RELU) {                                                               \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;                           \
        } else if (j->op == S4D_UN_NEG) {                                                         \
            for (int64_t i = 0; i < n; i++) y[i] = (T)(0 - (UT)x[i]);                             \
        } else if (j->op == S4D_UN_ABS) {                                                         \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : (T)(0 - (UT)x[i]);           \
        } else if (j->op == S4D_UN_SIGN) {                                                        \
            for (int64_t i = 0; i < n; i++) y[i] = (T)(x[i] > 0 ? 1 : x[i] == 0 ? 0 : -1);        \
        } else if (j->op == S4D_UN_CLIP) {                                                        \
            /* Bounds were clamped to T's range when read. */                                     \
            T lo = (T)j->alpha, hi = (T)j->beta;                                                  \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];        \
        }                                                                                         \
    }
UN_INT(int8_t, uint8_t)
UN_INT(int16_t, uint16_t)
UN_INT(int32_t, uint32_t)
UN_INT(int64_t, uint64_t)
UN_INT(uint8_t, uint8_t)
UN_INT(uint16_t, uint16_t)
UN_INT(uint32_t, uint32_t)
UN_INT(uint64_t, uint64_t)

static void un_chunk(void *vp, int64_t b, int64_t e)
{
    const un_job *j = vp;
    int64_t n = e - b;
    switch (j->dt) {
    case S4D_DTYPE_FLOAT32: un_f32(j, (const float *)j->x + b, (float *)j->y + b, n); return;
    case S4D_DTYPE_FLOAT64: un_f64(j, (const double *)j->x + b, (double *)j->y + b, n); return;
    case S4D_DTYPE_FLOAT16: {
        float buf[256];
        const uint16_t *x = (const uint16_t *)j->x + b;
        uint16_t *y = (uint16_t *)j->y + b;
        for (int64_t s = 0; s < n; s += 256) {
            int64_t m = n - s < 256 ? n - s : 256;
            for (int64_t i = 0; i < m; i++)
                buf[i] = s4d_half_to_float(x[s + i]);
            un_f32(j, buf, buf, m);
            for (int64_t i = 0; i < m; i++)
                y[s + i] = s4d_float_to_half(buf[i]);
        }
        return;
    }
    case S4D_DTYPE_BOOL: {
        const uint8_t *x = (const uint8_t *)j->x + b;
        uint8_t *y = (uint8_t *)j->y + b;
        for (int64_t i = 0; i < n; i++)
            y[i] = !x[i];
        return;
    }
    case S4D_DTYPE_INT8: un_int8_t(j, (const int8_t *)j->x + b, (int8_t *)j->y + b, n); return;
    case S4D_DTYPE_INT16: un_int16_t(j, (const int16_t *)j->x + b, (int16_t *)j->y + b, n); return;
    case S4D_DTYPE_INT32: un_int32_t(j, (const int32_t *)j->x + b, (int32_t *)j->y + b, n); return;
    case S4D_DTYPE_INT64: un_int64_t(j, (const int64_t *)j->x + b, (int64_t *)j->y + b, n); return;
    case S4D_DTYPE_UINT8: un_uint8_t(j, (const uint8_t *)j->x + b, (uint8_t *)j->y + b, n); return;
    case S4D_DTYPE_UINT16: un_uint16_t(j, (const uint16_t *)j->x + b, (uint16_t *)j->y + b, n); return;
    case S4D_DTYPE_UINT32: un_uint32_t(j, (const uint32_t *)j->x + b, (uint32_t *)j->y + b, n); return;
    case S4D_DTYPE_UINT64: un_uint64_t(j, (const uint64_t *)j->x + b, (uint64_t *)j->y + b, n); return;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_STRING: case S4D_DTYPE_BFLOAT16: return;
    }
}

static int int_ok(s4d_unop op)
{
    return op == S4D_UN_RELU || op == S4D_UN_NEG || op == S4D_UN_ABS || op == S4D_UN_SIGN || op == S4D_UN_CLIP;
}

static s4d_status check_unary(s4d_op_ctx *ctx, s4d_unop op, int lo, int hi)
{
    s4d_status st = s4d_check_arity(ctx, lo, hi, 1);
    if (st != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    int ok = op == S4D_UN_NOT ? dt == S4D_DTYPE_BOOL
                         : s4d_dtype_is_float(dt) && dt != S4D_DTYPE_BFLOAT16 ? 1
                         : s4d_dtype_is_int(dt) ? int_ok(op) : 0;
    /* Unsigned Neg makes no sense to ONNX either. */
    if (op == S4D_UN_NEG && (dt == S4D_DTYPE_UINT8 || dt == S4D_DTYPE_UINT16 || dt == S4D_DTYPE_UINT32 ||
                        dt == S4D_DTYPE_UINT64))
        ok = 0;
    if (!ok)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (X) has unsupported dtype %s", s4d_dtype_name(dt));
    s4d_set_out(ctx, 0, dt, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static s4d_status run_unary_job(s4d_op_ctx *ctx, un_job *j)
{
    j->dt = ctx->inputs[0].dtype;
    j->x = ctx->inputs[0].data;
    j->y = ctx->outputs[0].data;
    s4d_parallel_for(ctx->pool, s4d_tensor_numel(&ctx->inputs[0]), 1 << 14, un_chunk, j);
    return S4D_OK;
}

static double type_lowest(s4d_dtype dt)
{
    switch (dt) {
    case S4D_DTYPE_INT8: return -128.0;
    case S4D_DTYPE_INT16: return -32768.0;
    case S4D_DTYPE_INT32: return -2147483648.0;
    case S4D_DTYPE_INT64: return -9223372036854775808.0;
    case S4D_DTYPE_UINT8: case S4D_DTYPE_UINT16: case S4D_DTYPE_UINT32: case S4D_DTYPE_UINT64: return 0.0;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_FLOAT32: case S4D_DTYPE_STRING: case S4D_DTYPE_BOOL:
    case S4D_DTYPE_FLOAT16: case S4D_DTYPE_FLOAT64: case S4D_DTYPE_BFLOAT16: break;
    }
    return -INFINITY;
}

static double type_highest(s4d_dtype dt)
{
    switch (dt) {
    case S4D_DTYPE_INT8: return 127.0;
    case S4D_DTYPE_INT16: return 32767.0;
    case S4D_DTYPE_INT32: return 2147483647.0;
    case S4D_DTYPE_INT64: return 9223372036854775807.0;
    case S4D_DTYPE_UINT8: return 255.0;
    case S4D_DTYPE_UINT16: return 65535.0;
    case S4D_DTYPE_UINT32: return 4294967295.0;
    case S4D_DTYPE_UINT64: return 18446744073709551615.0;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_FLOAT32: case S4D_DTYPE_STRING: case S4D_DTYPE_BOOL:
    case S4D_DTYPE_FLOAT16: case S4D_DTYPE_FLOAT64: case S4D_DTYPE_BFLOAT16: break;
    }
    return INFINITY;
}

/* The integer limits exactly; uint64's maximum as its bit pattern. */
static int64_t int_lowest(s4d_dtype dt)
{
    return dt == S4D_DTYPE_INT64 ? INT64_MIN : s4d_dtype_is_int(dt) ? (int64_t)type_lowest(dt) : 0;
}

static int64_t int_highest(s4d_dtype dt)
{
    return dt == S4D_DTYPE_INT64    ? INT64_MAX
           : dt == S4D_DTYPE_UINT64 ? (int64_t)UINT64_MAX
           : s4d_dtype_is_int(dt)   ? (int64_t)type_highest(dt)
                                    : 0;
}

/* Clip's bounds: attributes before opset 11, optional scalar inputs after (read
   here when they are constants). */
static void parse_clip(const s4d_op_ctx *ctx, s4d_unary_params *p)
{
    s4d_dtype dt = ctx->inputs[0].dtype;
    p->alpha = type_lowest(dt);
    p->beta = type_highest(dt);
    p->min_i = int_lowest(dt);
    p->max_i = int_highest(dt);
    if (ctx->opset < 11) {
        p->alpha = s4d_op_attr_float(ctx, "min", -INFINITY);
        p->beta = s4d_op_attr_float(ctx, "max", INFINITY);
        return;
    }
    p->have_min = s4d_in_present(ctx, 1);
    p->have_max = s4d_in_present(ctx, 2);
    if (p->have_min && ctx->inputs[1].data) {
        p->min_known = 1;
        p->alpha = s4d_load_f64(dt, ctx->inputs[1].data, 0);
        p->min_i = s4d_load_i64(dt, ctx->inputs[1].data, 0);
    }
    if (p->have_max && ctx->inputs[2].data) {
        p->max_known = 1;
        p->beta = s4d_load_f64(dt, ctx->inputs[2].data, 0);
        p->max_i = s4d_load_i64(dt, ctx->inputs[2].data, 0);
    }
}

/* The parameters of op from the node's attributes and constant inputs. */
static void parse_unary(const s4d_op_ctx *ctx, s4d_unop op, s4d_unary_params *p)
{
    memset(p, 0, sizeof *p);
    p->op = op;
    if (op == S4D_UN_LEAKY_RELU) {
        p->alpha = s4d_op_attr_float(ctx, "alpha", 0.01f);
    } else if (op == S4D_UN_ELU || op == S4D_UN_CELU || op == S4D_UN_THRESHOLDED_RELU) {
        p->alpha = s4d_op_attr_float(ctx, "alpha", 1.0f);
    } else if (op == S4D_UN_SELU) {
        p->alpha = s4d_op_attr_float(ctx, "alpha", 1.67326319217681884765625f);
        p->gamma = s4d_op_attr_float(ctx, "gamma", 1.05070102214813232421875f);
    } else if (op == S4D_UN_HARD_SIGMOID) {
        p->alpha = s4d_op_attr_float(ctx, "alpha", 0.2f);
        p->beta = s4d_op_attr_float(ctx, "beta", 0.5f);
    } else if (op == S4D_UN_GELU) {
        if (strcmp(s4d_op_attr_string(ctx, "approximate", "none"), "tanh") == 0)
            p->op = S4D_UN_GELU_TANH;
    } else if (op == S4D_UN_CLIP) {
        parse_clip(ctx, p);
    }
}

/* What infer wrote, or the same parsed here when run without params (white-box tests). */
static const s4d_unary_params *unary_params(const s4d_op_ctx *ctx, s4d_unop op, s4d_unary_params *local)
{
    if (ctx->params)
        return ctx->params;
    parse_unary(ctx, op, local);
    return local;
}

static s4d_status infer_unary(s4d_op_ctx *ctx, s4d_unop op)
{
    s4d_status st = check_unary(ctx, op, 1, 1);
    if (st != S4D_OK)
        return st;
    if (op == S4D_UN_GELU) {
        const char *a = s4d_op_attr_string(ctx, "approximate", "none");
        if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "approximate='%s', expected 'none' or 'tanh'", a);
    }
    if (ctx->params)
        parse_unary(ctx, op, ctx->params);
    return S4D_OK;
}

static s4d_status run_unary(s4d_op_ctx *ctx, s4d_unop op)
{
    s4d_unary_params local;
    const s4d_unary_params *p = unary_params(ctx, op, &local);
    un_job j = {.op = (s4d_unop)p->op, .alpha = p->alpha, .beta = p->beta, .gamma = p->gamma};
    return run_unary_job(ctx, &j);
}

#define UNARY_OP_ATTRS(NAME, ONNX, SINCE, OP, ATTRS)                                     \
    static s4d_status infer_##NAME(s4d_op_ctx *ctx) { return infer_unary(ctx, OP); }      \
    static s4d_status run_##NAME(s4d_op_ctx *ctx) { return run_unary(ctx, OP); }          \
    const s4d_op_schema s4d_op_##NAME = {"", ONNX, SINCE, infer_##NAME, NULL, run_##NAME, \
                                         sizeof(s4d_unary_params), 0, ATTRS};
#define UNARY_OP(NAME, ONNX, SINCE, OP) UNARY_OP_ATTRS(NAME, ONNX, SINCE, OP, NULL)

static const s4d_attr_spec alpha_attrs[] = {{"alpha", S4D_ATTR_FLOAT}, {NULL}};
static const s4d_attr_spec selu_attrs[] = {{"alpha", S4D_ATTR_FLOAT}, {"gamma", S4D_ATTR_FLOAT}, {NULL}};
static const s4d_attr_spec hard_sigmoid_attrs[] = {{"alpha", S4D_ATTR_FLOAT}, {"beta", S4D_ATTR_FLOAT}, {NULL}};
static const s4d_attr_spec gelu_attrs[] = {{"approximate", S4D_ATTR_STRING}, {NULL}};

UNARY_OP(relu, "Relu", 6, S4D_UN_RELU)
UNARY_OP(sigmoid, "Sigmoid", 6, S4D_UN_SIGMOID)
UNARY_OP(tanh, "Tanh", 6, S4D_UN_TANH)
UNARY_OP(erf, "Erf", 9, S4D_UN_ERF)
UNARY_OP(sqrt, "Sqrt", 6, S4D_UN_SQRT)
UNARY_OP(reciprocal, "Reciprocal", 6, S4D_UN_RECIPROCAL)
UNARY_OP(exp, "Exp", 6, S4D_UN_EXP)
UNARY_OP(log, "Log", 6, S4D_UN_LOG)
UNARY_OP(neg, "Neg", 6, S4D_UN_NEG)
UNARY_OP(abs, "Abs", 6, S4D_UN_ABS)
UNARY_OP(sin, "Sin", 7, S4D_UN_SIN)
UNARY_OP(cos, "Cos", 7, S4D_UN_COS)
UNARY_OP(tan, "Tan", 7, S4D_UN_TAN)
UNARY_OP(asin, "Asin", 7, S4D_UN_ASIN)
UNARY_OP(acos, "Acos", 7, S4D_UN_ACOS)
UNARY_OP(atan, "Atan", 7, S4D_UN_ATAN)
UNARY_OP(sinh, "Sinh", 9, S4D_UN_SINH)
UNARY_OP(cosh, "Cosh", 9, S4D_UN_COSH)
UNARY_OP(asinh, "Asinh", 9, S4D_UN_ASINH)
UNARY_OP(acosh, "Acosh", 9, S4D_UN_ACOSH)
UNARY_OP(atanh, "Atanh", 9, S4D_UN_ATANH)
UNARY_OP(floor, "Floor", 6, S4D_UN_FLOOR)
UNARY_OP(ceil, "Ceil", 6, S4D_UN_CEIL)
UNARY_OP(round, "Round", 11, S4D_UN_ROUND)
UNARY_OP(sign, "Sign", 9, S4D_UN_SIGN)
UNARY_OP(not, "Not", 1, S4D_UN_NOT)
UNARY_OP(hard_swish, "HardSwish", 14, S4D_UN_HARD_SWISH)
UNARY_OP(softplus, "Softplus", 1, S4D_UN_SOFTPLUS)
UNARY_OP(softsign, "Softsign", 1, S4D_UN_SOFTSIGN)
UNARY_OP(mish, "Mish", 18, S4D_UN_MISH)
UNARY_OP_ATTRS(celu, "Celu", 12, S4D_UN_CELU, alpha_attrs)
UNARY_OP_ATTRS(thresholded_relu, "ThresholdedRelu", 10, S4D_UN_THRESHOLDED_RELU, alpha_attrs)
UNARY_OP_ATTRS(leaky_relu, "LeakyRelu", 6, S4D_UN_LEAKY_RELU, alpha_attrs)
UNARY_OP_ATTRS(elu, "Elu", 6, S4D_UN_ELU, alpha_attrs)
UNARY_OP_ATTRS(selu, "Selu", 6, S4D_UN_SELU, selu_attrs)
UNARY_OP_ATTRS(hard_sigmoid, "HardSigmoid", 6, S4D_UN_HARD_SIGMOID, hard_sigmoid_attrs)
UNARY_OP_ATTRS(gelu, "Gelu", 20, S4D_UN_GELU, gelu_attrs)

/* Clip: bounds are attributes before opset 11, optional scalar inputs after. */
static s4d_status infer_clip(s4d_op_ctx *ctx)
{
    s4d_status st = check_unary(ctx, S4D_UN_CLIP, 1, ctx->opset >= 11 ? 3 : 1);
    if (st != S4D_OK)
        return st;
    if (ctx->opset < 12 && !s4d_dtype_is_float(ctx->inputs[0].dtype))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (X) has dtype %s; integer Clip needs opset 12",
                            s4d_dtype_name(ctx->inputs[0].dtype));
    for (int i = 1; i < ctx->num_inputs; i++) {
        if (!s4d_in_present(ctx, i))
            continue;
        const s4d_tensor *t = &ctx->inputs[i];
        if (t->dtype != ctx->inputs[0].dtype)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) has dtype %s, expected %s like input 0", i,
                                i == 1 ? "min" : "max", s4d_dtype_name(t->dtype),
                                s4d_dtype_name(ctx->inputs[0].dtype));
        if (s4d_tensor_numel(t) != 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (%s) must be a scalar, has %lld elements", i,
                                i == 1 ? "min" : "max", (long long)s4d_tensor_numel(t));
    }
    if (ctx->params)
        parse_unary(ctx, S4D_UN_CLIP, ctx->params);
    return S4D_OK;
}

static s4d_status run_clip(s4d_op_ctx *ctx)
{
    s4d_unary_params local;
    const s4d_unary_params *p = unary_params(ctx, S4D_UN_CLIP, &local);
    s4d_dtype dt = ctx->inputs[0].dtype;
    un_job j = {.op = S4D_UN_CLIP, .alpha = p->alpha, .beta = p->beta};
    int64_t lo = p->min_i, hi = p->max_i;
    /* Bounds that are not constants are read now. */
    if (p->have_min && !p->min_known) {
        j.alpha = s4d_load_f64(dt, ctx->inputs[1].data, 0);
        lo = s4d_load_i64(dt, ctx->inputs[1].data, 0);
    }
    if (p->have_max && !p->max_known) {
        j.beta = s4d_load_f64(dt, ctx->inputs[2].data, 0);
        hi = s4d_load_i64(dt, ctx->inputs[2].data, 0);
    }
    /* Exact in 64-bit integers where double would round large bounds. */
    int64_t n = s4d_tensor_numel(&ctx->inputs[0]);
    if (dt == S4D_DTYPE_INT64) {
        const int64_t *x = ctx->inputs[0].data;
        int64_t *y = ctx->outputs[0].data;
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
        return S4D_OK;
    }
    if (dt == S4D_DTYPE_UINT64) {
        const uint64_t *x = ctx->inputs[0].data;
        uint64_t *y = ctx->outputs[0].data;
        uint64_t ulo = (uint64_t)lo, uhi = (uint64_t)hi;
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] < ulo ? ulo : x[i] > uhi ? uhi : x[i];
        return S4D_OK;
    }
    return run_unary_job(ctx, &j);
}

/* Opset 11 made the bounds inputs. */
static const s4d_attr_spec clip_attrs[] = {{"min", S4D_ATTR_FLOAT, 0, 0, 10}, {"max", S4D_ATTR_FLOAT, 0, 0, 10}, {NULL}};
const s4d_op_schema s4d_op_clip = {"", "Clip", 6, infer_clip, NULL, run_clip, sizeof(s4d_unary_params), 0, clip_attrs};

/* IsNaN / IsInf: float in, bool out. */
static s4d_status infer_is_class(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (!s4d_dtype_is_float(dt))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (X) has dtype %s, expected a float type", s4d_dtype_name(dt));
    s4d_set_out(ctx, 0, S4D_DTYPE_BOOL, ctx->inputs[0].rank, ctx->inputs[0].dims);
    return S4D_OK;
}

static void parse_isinf(const s4d_op_ctx *ctx, s4d_isinf_params *p)
{
    p->detect_negative = s4d_op_attr_int(ctx, "detect_negative", 1) != 0;
    p->detect_positive = s4d_op_attr_int(ctx, "detect_positive", 1) != 0;
}

static s4d_status infer_isinf(s4d_op_ctx *ctx)
{
    s4d_status st = infer_is_class(ctx);
    if (st == S4D_OK && ctx->params)
        parse_isinf(ctx, ctx->params);
    return st;
}

static s4d_status run_is_class(s4d_op_ctx *ctx, int inf)
{
    const s4d_tensor *x = &ctx->inputs[0];
    uint8_t *y = ctx->outputs[0].data;
    s4d_isinf_params local = {1, 1};
    const s4d_isinf_params *p = &local;
    if (inf && ctx->params)
        p = ctx->params;
    else if (inf)
        parse_isinf(ctx, &local);
    int neg = p->detect_negative, pos = p->detect_positive;
    int64_t n = s4d_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        double v = s4d_load_f64(x->dtype, x->data, i);
        y[i] = inf ? (isinf(v) && ((v > 0 && pos) || (v < 0 && neg))) : isnan(v) != 0;
    }
    return S4D_OK;
}

static s4d_status run_isnan(s4d_op_ctx *ctx) { return run_is_class(ctx, 0); }
static s4d_status run_isinf(s4d_op_ctx *ctx) { return run_is_class(ctx, 1); }

const s4d_op_schema s4d_op_isnan = {"", "IsNaN", 9, infer_is_class, NULL, run_isnan};
static const s4d_attr_spec isinf_attrs[] = {{"detect_negative", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                            {"detect_positive", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                            {NULL}};
const s4d_op_schema s4d_op_isinf = {"", "IsInf", 10, infer_isinf, NULL, run_isinf, sizeof(s4d_isinf_params), 0,
                                    isinf_attrs};
