/*
 * Element-wise binary ops with ONNX multidirectional broadcasting: Add, Sub,
 * Mul, Div, Pow, Mod, PRelu, the comparisons (Equal, Greater, Less,
 * GreaterOrEqual, LessOrEqual), the logic ops (And, Or, Xor), and the
 * variadic Min, Max, Sum and Mean, which fold their inputs pairwise through the
 * same row kernels. infer() leaves the op (Mod resolved by its fmod
 * attribute) in s4d_binary_params (ops/elementwise.h).
 *
 * Integer arithmetic wraps (two's complement) instead of invoking undefined
 * behaviour, and integer division by zero yields 0: a model's data must never
 * be able to crash the process.
 */
#include <math.h>

#include "ops/broadcast.h"
#include "ops/elementwise.h"

/* One contiguous run of the output; sa/sb are 1 (walk) or 0 (broadcast). */
typedef void (*row_fn)(void *o, const void *a, int64_t sa, const void *b, int64_t sb, int64_t n);

#define ROW(NAME, TA, TO, EXPR)                                                                  \
    static void NAME(void *o_, const void *a_, int64_t sa, const void *b_, int64_t sb, int64_t n) \
    {                                                                                            \
        typedef TA ta_t __attribute__((unused));                                                 \
        TO *o = o_;                                                                              \
        const TA *a = a_, *b = b_;                                                               \
        if (sa && sb) {                                                                          \
            for (int64_t i = 0; i < n; i++) {                                                    \
                TA x = a[i], y = b[i];                                                           \
                o[i] = (TO)(EXPR);                                                               \
            }                                                                                    \
        } else if (sa) {                                                                         \
            TA y = b[0];                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                    \
                TA x = a[i];                                                                     \
                o[i] = (TO)(EXPR);                                                               \
            }                                                                                    \
        } else if (sb) {                                                                         \
            TA x = a[0];                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                    \
                TA y = b[i];                                                                     \
                o[i] = (TO)(EXPR);                                                               \
            }                                                                                    \
        } else {                                                                                 \
            TA x = a[0], y = b[0];                                                               \
            TO v = (TO)(EXPR);                                                                   \
            for (int64_t i = 0; i < n; i++)                                                      \
                o[i] = v;                                                                        \
        }                                                                                        \
    }

#define SAME(OP, SUF, T, E) ROW(OP##_##SUF, T, T, E)
#define TOBOOL(OP, SUF, T, E) ROW(OP##_##SUF, T, uint8_t, E)
#define FLOATS(M, OP, E) M(OP, f32, float, E) M(OP, f64, double, E)
#define SINTS(M, OP, E) M(OP, i8, int8_t, E) M(OP, i16, int16_t, E) M(OP, i32, int32_t, E) M(OP, i64, int64_t, E)
#define UINTS(M, OP, E) M(OP, u8, uint8_t, E) M(OP, u16, uint16_t, E) M(OP, u32, uint32_t, E) M(OP, u64, uint64_t, E)
#define INTS(M, OP, E) SINTS(M, OP, E) UINTS(M, OP, E)

/* Integers: compute in uint64 so overflow wraps instead of being undefined. */
#define WRAP(op) ((uint64_t)x op (uint64_t)y)
#define FMIN (x != x ? x : y != y ? y : x < y ? x : y)
#define FMAX (x != x ? x : y != y ? y : x > y ? x : y)

FLOATS(SAME, add, x + y)
INTS(SAME, add, WRAP(+))
FLOATS(SAME, sub, x - y)
INTS(SAME, sub, WRAP(-))
FLOATS(SAME, mul, x * y)
INTS(SAME, mul, WRAP(*))
FLOATS(SAME, div, x / y)
SINTS(SAME, div, y == 0 ? (ta_t)0 : y == -1 ? (ta_t)(0 - (uint64_t)x) : (ta_t)(x / y))
UINTS(SAME, div, y == 0 ? 0 : x / y)
FLOATS(SAME, min, FMIN)
INTS(SAME, min, x < y ? x : y)
FLOATS(SAME, max, FMAX)
INTS(SAME, max, x > y ? x : y)
FLOATS(TOBOOL, eq, x == y)
INTS(TOBOOL, eq, x == y)
FLOATS(TOBOOL, gt, x > y)
INTS(TOBOOL, gt, x > y)
FLOATS(TOBOOL, lt, x < y)
INTS(TOBOOL, lt, x < y)
FLOATS(TOBOOL, ge, x >= y)
INTS(TOBOOL, ge, x >= y)
FLOATS(TOBOOL, le, x <= y)
INTS(TOBOOL, le, x <= y)
FLOATS(SAME, prelu, x < 0 ? y * x : x)
SINTS(SAME, prelu, x < 0 ? (ta_t)((uint64_t)y * (uint64_t)x) : x)
UINTS(SAME, prelu, ((void)y, x)) /* no negative values to scale */
/* Mod with fmod=0: the result takes the divisor's sign (Python's %); fmod=1: the dividend's (C). */
SINTS(SAME, mod, y == 0 || y == -1 ? (ta_t)0 : (ta_t)(x % y != 0 && ((x % y < 0) != (y < 0)) ? x % y + y : x % y))
UINTS(SAME, mod, y == 0 ? (ta_t)0 : (ta_t)(x % y))
SINTS(SAME, fmod, y == 0 || y == -1 ? (ta_t)0 : (ta_t)(x % y))
UINTS(SAME, fmod, y == 0 ? (ta_t)0 : (ta_t)(x % y))
FLOATS(SAME, fmod, fmod(x, y))
FLOATS(SAME, mod, fmod(x, y) != 0 && ((fmod(x, y) < 0) != (y < 0)) ? fmod(x, y) + y : fmod(x, y))
ROW(eq_bool, uint8_t, uint8_t, (x != 0) == (y != 0))
ROW(and_bool, uint8_t, uint8_t, (x != 0) & (y != 0))
ROW(or_bool, uint8_t, uint8_t, (x != 0) | (y != 0))
ROW(xor_bool, uint8_t, uint8_t, (x != 0) ^ (y != 0))

/* Pow of float32 by float32; squaring (the LayerNorm pattern) skips powf. */
static void pow_f32(void *o_, const void *a_, int64_t sa, const void *b_, int64_t sb, int64_t n)
{
    float *o = o_;
    const float *a = a_, *b = b_;
    if (!sb && b[0] == 2.0f) {
        for (int64_t i = 0; i < n; i++) {
            float x = a[i * sa];
            o[i] = x * x;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++)
        o[i] = powf(a[i * sa], b[i * sb]);
}

#define PICK_NUM(OP)                                             \
    switch (dt) {                                                \
    case S4D_DTYPE_FLOAT32: return OP##_f32;                     \
    case S4D_DTYPE_FLOAT64: return OP##_f64;                     \
    case S4D_DTYPE_INT8: return OP##_i8;                         \
    case S4D_DTYPE_INT16: return OP##_i16;                       \
    case S4D_DTYPE_INT32: return OP##_i32;                       \
    case S4D_DTYPE_INT64: return OP##_i64;                       \
    case S4D_DTYPE_UINT8: return OP##_u8;                        \
    case S4D_DTYPE_UINT16: return OP##_u16;                      \
    case S4D_DTYPE_UINT32: return OP##_u32;                      \
    case S4D_DTYPE_UINT64: return OP##_u64;                      \
    case S4D_DTYPE_FLOAT16: return OP##_f32; /* via conversion */ \
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_STRING:             \
    case S4D_DTYPE_BOOL: case S4D_DTYPE_BFLOAT16:                \
        return NULL;                                             \
    }                                                            \
    return NULL

static row_fn pick_row(s4d_binop op, s4d_dtype dt)
{
    switch (op) {
    case S4D_BIN_ADD: PICK_NUM(add);
    case S4D_BIN_SUB: PICK_NUM(sub);
    case S4D_BIN_MUL: PICK_NUM(mul);
    case S4D_BIN_DIV: PICK_NUM(div);
    case S4D_BIN_MIN: PICK_NUM(min);
    case S4D_BIN_MAX: PICK_NUM(max);
    case S4D_BIN_EQ:
        if (dt == S4D_DTYPE_BOOL)
            return eq_bool;
        PICK_NUM(eq);
    case S4D_BIN_GT: PICK_NUM(gt);
    case S4D_BIN_LT: PICK_NUM(lt);
    case S4D_BIN_GE: PICK_NUM(ge);
    case S4D_BIN_LE: PICK_NUM(le);
    case S4D_BIN_AND: return dt == S4D_DTYPE_BOOL ? and_bool : NULL;
    case S4D_BIN_OR: return dt == S4D_DTYPE_BOOL ? or_bool : NULL;
    case S4D_BIN_XOR: return dt == S4D_DTYPE_BOOL ? xor_bool : NULL;
    case S4D_BIN_PRELU: PICK_NUM(prelu);
    case S4D_BIN_FMOD: PICK_NUM(fmod);
    case S4D_BIN_MOD: PICK_NUM(mod);
    case S4D_BIN_POW: return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16 ? pow_f32 : NULL;
    }
    return NULL;
}

static int is_compare(s4d_binop op)
{
    return op == S4D_BIN_EQ || op == S4D_BIN_GT || op == S4D_BIN_LT || op == S4D_BIN_GE || op == S4D_BIN_LE || op == S4D_BIN_AND ||
           op == S4D_BIN_OR || op == S4D_BIN_XOR;
}

/* ---- the broadcast driver ------------------------------------------------ */

typedef struct bin_job {
    s4d_bcast b;
    s4d_binop op;
    row_fn row;   /* NULL: generic double path (mixed-type Pow) */
    int half;     /* float16 through float32 kernels */
    s4d_dtype ta, tb, to;
    size_t ea, eb, eo;
    char *o;
    const char *a, *bb;
} bin_job;

#define HALF_BLOCK 256

static void half_row(const bin_job *j, char *o, const char *a, int64_t sa, const char *b, int64_t sb, int64_t n)
{
    float fa[HALF_BLOCK], fb[HALF_BLOCK], fo[HALF_BLOCK];
    const uint16_t *ha = (const uint16_t *)a, *hb = (const uint16_t *)b;
    for (int64_t s = 0; s < n; s += HALF_BLOCK) {
        int64_t m = n - s < HALF_BLOCK ? n - s : HALF_BLOCK;
        for (int64_t i = 0; i < m; i++) {
            fa[i] = s4d_half_to_float(ha[(s + i) * sa]);
            fb[i] = s4d_half_to_float(hb[(s + i) * sb]);
        }
        if (j->to == S4D_DTYPE_BOOL) {
            j->row(o + s, fa, 1, fb, 1, m);
        } else {
            j->row(fo, fa, 1, fb, 1, m);
            for (int64_t i = 0; i < m; i++)
                ((uint16_t *)o)[s + i] = s4d_float_to_half(fo[i]);
        }
    }
}

static void generic_row(const bin_job *j, char *o, const char *a, int64_t sa, const char *b, int64_t sb, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double x = s4d_load_f64(j->ta, a, i * sa), y = s4d_load_f64(j->tb, b, i * sb), v;
        switch (j->op) {
        case S4D_BIN_POW: v = pow(x, y); break;
        case S4D_BIN_ADD: case S4D_BIN_SUB: case S4D_BIN_MUL: case S4D_BIN_DIV: case S4D_BIN_MIN: case S4D_BIN_MAX: case S4D_BIN_EQ:
        case S4D_BIN_GT: case S4D_BIN_LT: case S4D_BIN_GE: case S4D_BIN_LE: case S4D_BIN_AND: case S4D_BIN_OR: case S4D_BIN_XOR:
        case S4D_BIN_PRELU: case S4D_BIN_MOD: case S4D_BIN_FMOD:
        default: v = 0; break;
        }
        s4d_store_f64(j->to, o, i, v);
    }
}

static void bin_rows(void *vp, int64_t r0, int64_t r1)
{
    const bin_job *j = vp;
    const s4d_bcast *b = &j->b;
    int64_t idx[S4D_MAX_RANK], offs[S4D_BCAST_MAX_IN];
    s4d_bcast_seek(b, r0, idx, offs);
    int64_t sa = b->st[0][b->rank - 1], sb = b->st[1][b->rank - 1], n = b->inner;
    for (int64_t r = r0; r < r1; r++) {
        char *o = j->o + (size_t)(r * n) * j->eo;
        const char *a = j->a + (size_t)offs[0] * j->ea, *bp = j->bb + (size_t)offs[1] * j->eb;
        if (!j->row)
            generic_row(j, o, a, sa, bp, sb, n);
        else if (j->half)
            half_row(j, o, a, sa, bp, sb, n);
        else
            j->row(o, a, sa, bp, sb, n);
        s4d_bcast_next(b, idx, offs);
    }
}

/* out = op(a, b) with broadcasting; out's dtype/dims are already set. */
static void bin_apply(s4d_op_ctx *ctx, s4d_binop op, s4d_tensor *out, const s4d_tensor *a, const s4d_tensor *b)
{
    bin_job *j = &(bin_job){0};
    const s4d_tensor *ins[2] = {a, b};
    s4d_bcast_init(&j->b, out, ins, 2);
    j->op = op;
    j->ta = a->dtype;
    j->tb = b->dtype;
    j->to = out->dtype;
    j->ea = s4d_dtype_size(a->dtype);
    j->eb = s4d_dtype_size(b->dtype);
    j->eo = s4d_dtype_size(out->dtype);
    j->row = a->dtype == b->dtype ? pick_row(op, a->dtype) : NULL;
    j->half = a->dtype == S4D_DTYPE_FLOAT16;
    j->o = out->data;
    j->a = a->data;
    j->bb = b->data;
    int64_t grain = j->b.inner > 0 ? 16384 / j->b.inner + 1 : 1;
    s4d_parallel_for(ctx->pool, j->b.rows, grain, bin_rows, j);
}

/* ---- infer / run ---------------------------------------------------------- */

static const char *in_name(s4d_binop op, int i)
{
    if (op == S4D_BIN_MIN || op == S4D_BIN_MAX)
        return "data";
    return i == 0 ? "A" : "B";
}

static s4d_status check_dtype(s4d_op_ctx *ctx, s4d_binop op, int i)
{
    s4d_dtype dt = ctx->inputs[i].dtype;
    if (op == S4D_BIN_POW) {
        int ok = i == 0 ? (dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT64 || dt == S4D_DTYPE_FLOAT16 ||
                           dt == S4D_DTYPE_INT32 || dt == S4D_DTYPE_INT64)
                        : (s4d_dtype_is_int(dt) || dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT64 ||
                           dt == S4D_DTYPE_FLOAT16);
        if (!ok)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) has unsupported dtype %s", i,
                                i == 0 ? "X" : "Y", s4d_dtype_name(dt));
        return S4D_OK;
    }
    s4d_dtype d0 = ctx->inputs[0].dtype;
    if (i > 0 && dt != d0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) has dtype %s but input 0 has %s", i,
                            in_name(op, i), s4d_dtype_name(dt), s4d_dtype_name(d0));
    if (!pick_row(op, dt))
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) has unsupported dtype %s", i, in_name(op, i),
                            s4d_dtype_name(dt));
    return S4D_OK;
}

static s4d_status infer_n(s4d_op_ctx *ctx, s4d_binop op, int lo, int hi)
{
    s4d_status st = s4d_check_arity(ctx, lo, hi, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *ins[64];
    if (ctx->num_inputs > 64)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%d inputs, at most 64 supported", ctx->num_inputs);
    for (int i = 0; i < ctx->num_inputs; i++) {
        if (!s4d_in_present(ctx, i))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d is missing", i);
        if ((st = check_dtype(ctx, op, i)) != S4D_OK)
            return st;
        ins[i] = &ctx->inputs[i];
    }
    int rank;
    int64_t dims[S4D_MAX_RANK];
    if ((st = s4d_bcast_shape(ctx, ins, ctx->num_inputs, &rank, dims)) != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, is_compare(op) ? S4D_DTYPE_BOOL : ctx->inputs[0].dtype, rank, dims);
    if (ctx->params)
        *(s4d_binary_params *)ctx->params = (s4d_binary_params){.op = op};
    return S4D_OK;
}

/* The op from the params infer wrote; `dflt` when run without them (white-box tests). */
static s4d_binop params_op(const s4d_op_ctx *ctx, s4d_binop dflt)
{
    return ctx->params ? (s4d_binop)((const s4d_binary_params *)ctx->params)->op : dflt;
}

static s4d_status run_n(s4d_op_ctx *ctx, s4d_binop op)
{
    s4d_tensor *out = &ctx->outputs[0];
    if (ctx->num_inputs == 1) {
        s4d_bcast_copy(ctx->pool, out, &ctx->inputs[0]);
        return S4D_OK;
    }
    bin_apply(ctx, op, out, &ctx->inputs[0], &ctx->inputs[1]);
    for (int i = 2; i < ctx->num_inputs; i++)
        bin_apply(ctx, op, out, out, &ctx->inputs[i]);
    return S4D_OK;
}

#define BIN_SCHEMA_ATTRS(NAME, ONNX, SINCE, ATTRS) \
    const s4d_op_schema s4d_op_##NAME = {"", ONNX, SINCE, infer_##NAME, NULL, run_##NAME, \
                                         sizeof(s4d_binary_params), 0, ATTRS};
#define BIN_SCHEMA(NAME, ONNX, SINCE) BIN_SCHEMA_ATTRS(NAME, ONNX, SINCE, NULL)

#define BINARY_OP(NAME, ONNX, SINCE, OP)                                                \
    static s4d_status infer_##NAME(s4d_op_ctx *ctx) { return infer_n(ctx, OP, 2, 2); } \
    static s4d_status run_##NAME(s4d_op_ctx *ctx) { return run_n(ctx, params_op(ctx, OP)); } \
    BIN_SCHEMA(NAME, ONNX, SINCE)

BINARY_OP(add, "Add", 7, S4D_BIN_ADD)
BINARY_OP(sub, "Sub", 7, S4D_BIN_SUB)
BINARY_OP(mul, "Mul", 7, S4D_BIN_MUL)
BINARY_OP(div, "Div", 7, S4D_BIN_DIV)
BINARY_OP(pow, "Pow", 7, S4D_BIN_POW)
BINARY_OP(equal, "Equal", 7, S4D_BIN_EQ)
BINARY_OP(greater, "Greater", 7, S4D_BIN_GT)
BINARY_OP(less, "Less", 7, S4D_BIN_LT)
BINARY_OP(greater_equal, "GreaterOrEqual", 12, S4D_BIN_GE)
BINARY_OP(less_equal, "LessOrEqual", 12, S4D_BIN_LE)
BINARY_OP(and, "And", 7, S4D_BIN_AND)
BINARY_OP(or, "Or", 7, S4D_BIN_OR)
BINARY_OP(xor, "Xor", 7, S4D_BIN_XOR)

/* Mod: the fmod attribute picks the sign convention. */
static s4d_binop mod_op(const s4d_op_ctx *ctx)
{
    return s4d_op_attr_int(ctx, "fmod", 0) ? S4D_BIN_FMOD : S4D_BIN_MOD;
}
static s4d_status infer_mod(s4d_op_ctx *ctx) { return infer_n(ctx, mod_op(ctx), 2, 2); }
static s4d_status run_mod(s4d_op_ctx *ctx)
{
    return run_n(ctx, ctx->params ? params_op(ctx, S4D_BIN_MOD) : mod_op(ctx));
}
static const s4d_attr_spec mod_attrs[] = {{"fmod", S4D_ATTR_INT, S4D_ATTR_BOOL}, {NULL}};
BIN_SCHEMA_ATTRS(mod, "Mod", 10, mod_attrs)

/* PRelu: slope broadcasts to X (unidirectionally), so the output has X's shape. */
static s4d_status infer_prelu(s4d_op_ctx *ctx)
{
    s4d_status st = infer_n(ctx, S4D_BIN_PRELU, 2, 2);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *x = &ctx->inputs[0], *o = &ctx->outputs[0];
    int same = o->rank == x->rank;
    for (int d = 0; same && d < x->rank; d++)
        same = o->dims[d] == x->dims[d];
    if (!same)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input 1 (slope) must broadcast to the shape of input 0 (X)");
    return S4D_OK;
}
static s4d_status run_prelu(s4d_op_ctx *ctx) { return run_n(ctx, params_op(ctx, S4D_BIN_PRELU)); }
BIN_SCHEMA(prelu, "PRelu", 9)

/* Variadic: Min, Max, Sum, Mean take 1 or more inputs (broadcast since opset 8). */
static s4d_status infer_min(s4d_op_ctx *ctx) { return infer_n(ctx, S4D_BIN_MIN, 1, 64); }
static s4d_status infer_max(s4d_op_ctx *ctx) { return infer_n(ctx, S4D_BIN_MAX, 1, 64); }
static s4d_status run_min(s4d_op_ctx *ctx) { return run_n(ctx, params_op(ctx, S4D_BIN_MIN)); }
static s4d_status run_max(s4d_op_ctx *ctx) { return run_n(ctx, params_op(ctx, S4D_BIN_MAX)); }

static s4d_status infer_sum_mean(s4d_op_ctx *ctx, int mean)
{
    s4d_status st = infer_n(ctx, S4D_BIN_ADD, 1, 64);
    if (st != S4D_OK)
        return st;
    s4d_dtype dt = ctx->inputs[0].dtype;
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT64 && dt != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data_0) has dtype %s, expected a float type",
                            s4d_dtype_name(dt));
    if (ctx->params)
        ((s4d_binary_params *)ctx->params)->mean = mean;
    return S4D_OK;
}

static s4d_status infer_sum(s4d_op_ctx *ctx) { return infer_sum_mean(ctx, 0); }
static s4d_status infer_mean(s4d_op_ctx *ctx) { return infer_sum_mean(ctx, 1); }
static s4d_status run_sum(s4d_op_ctx *ctx) { return run_n(ctx, params_op(ctx, S4D_BIN_ADD)); }

static s4d_status run_mean(s4d_op_ctx *ctx)
{
    run_n(ctx, params_op(ctx, S4D_BIN_ADD));
    s4d_tensor *out = &ctx->outputs[0];
    int64_t n = s4d_tensor_numel(out);
    double k = ctx->num_inputs;
    switch (out->dtype) {
    case S4D_DTYPE_FLOAT32:
        for (int64_t i = 0; i < n; i++)
            ((float *)out->data)[i] /= (float)k;
        return S4D_OK;
    case S4D_DTYPE_FLOAT64:
        for (int64_t i = 0; i < n; i++)
            ((double *)out->data)[i] /= k;
        return S4D_OK;
    case S4D_DTYPE_FLOAT16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t *h = &((uint16_t *)out->data)[i];
            *h = s4d_float_to_half(s4d_half_to_float(*h) / (float)k);
        }
        return S4D_OK;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_UINT8: case S4D_DTYPE_INT8: case S4D_DTYPE_UINT16:
    case S4D_DTYPE_INT16: case S4D_DTYPE_INT32: case S4D_DTYPE_INT64: case S4D_DTYPE_STRING:
    case S4D_DTYPE_BOOL: case S4D_DTYPE_UINT32: case S4D_DTYPE_UINT64: case S4D_DTYPE_BFLOAT16:
        break;
    }
    return s4d_op_error(ctx, S4D_ERR_DTYPE, "output dtype %s is not a float type", s4d_dtype_name(out->dtype));
}

BIN_SCHEMA(min, "Min", 8)
BIN_SCHEMA(max, "Max", 8)
BIN_SCHEMA(sum, "Sum", 8)
BIN_SCHEMA(mean, "Mean", 8)
