/*
 * FusedPointwise (domain "s4d", opset 1; built by the fusion pass
 * src/passes/fuse_pointwise.c, never in a user's model): a tree of
 * element-wise ops run as one layer. The program and its rules are in
 * ops/pointwise.h. infer() checks every field of the program against the
 * inputs (an engine file is untrusted: slot indices, opcodes, operand dtypes,
 * constant indices, lengths) and fills s4d_pointwise_params.
 *
 * The host reference runs the program over blocks of the output: each input's
 * block is gathered into a float buffer through its broadcast strides, then
 * every instruction runs over the whole block with the very expression the
 * unfused layer's host kernel uses per element (binary_elementwise.c,
 * unary_elementwise.c, where.c, cast.c), in float32, so that fused and
 * unfused float32 results are the same bits. Bool values are held as 0 and 1.
 * The CPU backend passes its vectorised activations (Sigmoid, Relu, Clip) in,
 * as its unfused layers use them.
 */
#include <math.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/pointwise.h"

#define PW_BLOCK 128

typedef s4d_pointwise_params pw_params;

_Static_assert(S4D_PW_MAX_RANK == S4D_MAX_RANK, "pointwise.h's rank bound is the engine's");

static int pw_dtype_ok(int dt)
{
    return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16 || dt == S4D_DTYPE_BOOL;
}

static int is_float(int dt)
{
    return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16;
}

static const char *op_name(int op)
{
    static const char *const names[S4D_PW_OP_COUNT] = {
        "Add", "Sub", "Mul", "Div", "Min", "Max", "Neg", "Abs", "Exp", "Log", "Sqrt", "Sigmoid",
        "Relu", "Tanh", "Reciprocal", "Atan", "Clip", "Where", "Equal", "Greater", "Less",
        "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Not", "Cast"};
    return op >= 0 && op < S4D_PW_OP_COUNT ? names[op] : "?";
}

/* Operand count of op: 1, 2 or 3 slots (Clip and Cast: 1 slot and immediates). */
static int slot_operands(int op)
{
    switch ((s4d_pw_op)op) {
    case S4D_PW_ADD: case S4D_PW_SUB: case S4D_PW_MUL: case S4D_PW_DIV: case S4D_PW_MIN:
    case S4D_PW_MAX: case S4D_PW_EQUAL: case S4D_PW_GREATER: case S4D_PW_LESS:
    case S4D_PW_GREATER_EQUAL: case S4D_PW_LESS_EQUAL: case S4D_PW_AND: case S4D_PW_OR:
    case S4D_PW_XOR:
        return 2;
    case S4D_PW_WHERE:
        return 3;
    case S4D_PW_NEG: case S4D_PW_ABS: case S4D_PW_EXP: case S4D_PW_LOG: case S4D_PW_SQRT:
    case S4D_PW_SIGMOID: case S4D_PW_RELU: case S4D_PW_TANH: case S4D_PW_RECIPROCAL:
    case S4D_PW_ATAN: case S4D_PW_CLIP: case S4D_PW_NOT: case S4D_PW_CAST:
        return 1;
    }
    return 0;
}

/* The result dtype of instruction k from its operands' dtypes; 0 with the error set. */
static s4d_status check_instr(s4d_op_ctx *ctx, int k, s4d_pw_instr *in, const int32_t *slot_dt, int nslots,
                              const s4d_attr *consts)
{
    const char *name = op_name(in->op);
    if (in->op < 0 || in->op >= S4D_PW_OP_COUNT)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "program instruction %d has opcode %d (0 to %d expected)",
                            k, (int)in->op, S4D_PW_OP_COUNT - 1);
    int nops = slot_operands(in->op);
    int32_t ops[3] = {in->a, in->b, in->c};
    for (int j = 0; j < 3; j++) {
        if (j < nops) {
            if (ops[j] < 0 || ops[j] >= nslots)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                    "program instruction %d (%s): operand %d is slot %d, expected 0 to %d "
                                    "(the inputs, then earlier results)",
                                    k, name, j, (int)ops[j], nslots - 1);
        }
    }
    int ta = slot_dt[in->a];
    int tb = nops >= 2 ? slot_dt[in->b] : 0, tc = nops >= 3 ? slot_dt[in->c] : 0;
    in->lo = -INFINITY;
    in->hi = INFINITY;
    switch ((s4d_pw_op)in->op) {
    case S4D_PW_ADD: case S4D_PW_SUB: case S4D_PW_MUL: case S4D_PW_DIV: case S4D_PW_MIN:
    case S4D_PW_MAX:
    case S4D_PW_EQUAL: case S4D_PW_GREATER: case S4D_PW_LESS: case S4D_PW_GREATER_EQUAL:
    case S4D_PW_LESS_EQUAL: {
        int cmp = in->op >= S4D_PW_EQUAL;
        int bool_ok = in->op == S4D_PW_EQUAL;
        if (in->c != -1)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "program instruction %d (%s): operand 2 must be -1", k,
                                name);
        if (ta != tb || !(is_float(ta) || (bool_ok && ta == S4D_DTYPE_BOOL)))
            return s4d_op_error(ctx, S4D_ERR_DTYPE,
                                "program instruction %d (%s): operands of dtypes %s and %s (two equal float "
                                "dtypes expected)",
                                k, name, s4d_dtype_name((s4d_dtype)ta), s4d_dtype_name((s4d_dtype)tb));
        in->dtype = cmp ? S4D_DTYPE_BOOL : ta;
        return S4D_OK;
    }
    case S4D_PW_AND: case S4D_PW_OR: case S4D_PW_XOR:
        if (in->c != -1)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "program instruction %d (%s): operand 2 must be -1", k,
                                name);
        if (ta != S4D_DTYPE_BOOL || tb != S4D_DTYPE_BOOL)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "program instruction %d (%s): operands of dtypes %s and %s "
                                "(bool expected)", k, name, s4d_dtype_name((s4d_dtype)ta),
                                s4d_dtype_name((s4d_dtype)tb));
        in->dtype = S4D_DTYPE_BOOL;
        return S4D_OK;
    case S4D_PW_WHERE:
        if (ta != S4D_DTYPE_BOOL || tb != tc)
            return s4d_op_error(ctx, S4D_ERR_DTYPE,
                                "program instruction %d (Where): condition of dtype %s and values of %s and "
                                "%s (bool, then two equal dtypes expected)",
                                k, s4d_dtype_name((s4d_dtype)ta), s4d_dtype_name((s4d_dtype)tb),
                                s4d_dtype_name((s4d_dtype)tc));
        in->dtype = tb;
        return S4D_OK;
    case S4D_PW_NOT:
    case S4D_PW_NEG: case S4D_PW_ABS: case S4D_PW_EXP: case S4D_PW_LOG: case S4D_PW_SQRT:
    case S4D_PW_SIGMOID: case S4D_PW_RELU: case S4D_PW_TANH: case S4D_PW_RECIPROCAL:
    case S4D_PW_ATAN:
        if (in->b != -1 || in->c != -1)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "program instruction %d (%s): operands 1 and 2 must be -1", k, name);
        if (in->op == S4D_PW_NOT ? ta != S4D_DTYPE_BOOL : !is_float(ta))
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "program instruction %d (%s): operand of dtype %s (%s expected)",
                                k, name, s4d_dtype_name((s4d_dtype)ta), in->op == S4D_PW_NOT ? "bool" : "a float");
        in->dtype = ta;
        return S4D_OK;
    case S4D_PW_CLIP: {
        if (!is_float(ta))
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "program instruction %d (Clip): operand of dtype %s "
                                "(a float expected)", k, s4d_dtype_name((s4d_dtype)ta));
        int64_t nc = consts ? (int64_t)consts->count : 0;
        int32_t bi[2] = {in->b, in->c};
        for (int j = 0; j < 2; j++)
            if (bi[j] < -1 || bi[j] >= nc)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                    "program instruction %d (Clip): bound %d is constant %d, expected -1 "
                                    "(none) or 0 to %lld",
                                    k, j, (int)bi[j], (long long)nc - 1);
        if (in->b >= 0)
            in->lo = consts->floats[in->b];
        if (in->c >= 0)
            in->hi = consts->floats[in->c];
        in->dtype = ta;
        return S4D_OK;
    }
    case S4D_PW_CAST:
        if (in->c != -1 || !pw_dtype_ok(in->b))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "program instruction %d (Cast): target dtype %d (float32, float16 or bool "
                                "expected, then -1)", k, (int)in->b);
        in->dtype = in->b;
        return S4D_OK;
    }
    return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "program instruction %d has opcode %d", k, (int)in->op);
}

/* The inputs as the program reads them: their own shapes, or their views' (the views attribute). */
typedef struct pw_views {
    s4d_tensor shape[S4D_PW_MAX_INPUTS]; /* dtype, rank, dims; no data */
    int has[S4D_PW_MAX_INPUTS];
    int64_t strides[S4D_PW_MAX_INPUTS][S4D_MAX_RANK];
    int64_t offset[S4D_PW_MAX_INPUTS];
} pw_views;

/* Each input's element strides in the output, then size-1 dims dropped and chaining dims merged. */
static void pw_geometry(const pw_views *vw, const s4d_tensor *out, pw_params *p)
{
    int r = out->rank, n = p->num_inputs;
    int64_t st[S4D_PW_MAX_INPUTS][S4D_MAX_RANK];
    for (int k = 0; k < n; k++) {
        const s4d_tensor *t = &vw->shape[k];
        int off = r - t->rank;
        int64_t s = 1;
        for (int d = r - 1; d >= 0; d--) {
            int64_t v = d >= off ? t->dims[d - off] : 1;
            int64_t sv = vw->has[k] && d >= off ? vw->strides[k][d - off] : s;
            st[k][d] = (v == out->dims[d] && v != 1) ? sv : 0;
            s *= v;
        }
        p->offset[k] = vw->has[k] ? vw->offset[k] : 0;
    }
    int m = 0;
    for (int d = 0; d < r; d++) {
        if (out->dims[d] == 1)
            continue;
        int merge = m > 0;
        for (int k = 0; k < n && merge; k++)
            if (p->strides[k][m - 1] != st[k][d] * out->dims[d])
                merge = 0;
        if (merge) {
            p->dims[m - 1] *= out->dims[d];
            for (int k = 0; k < n; k++)
                p->strides[k][m - 1] = st[k][d];
        } else {
            p->dims[m] = out->dims[d];
            for (int k = 0; k < n; k++)
                p->strides[k][m] = st[k][d];
            m++;
        }
    }
    if (m == 0) {
        p->dims[0] = 1;
        for (int k = 0; k < n; k++)
            p->strides[k][0] = 0;
        m = 1;
    }
    p->rank = m;
    p->numel = s4d_tensor_numel(out);
}

/* Reads the optional views attribute (pointwise.h) into vw, every record checked against the inputs. */
static s4d_status pw_read_views(s4d_op_ctx *ctx, pw_views *vw)
{
    const s4d_attr *a = s4d_op_attr(ctx, "views");
    if (!a)
        return S4D_OK;
    if (a->type != S4D_ATTR_INTS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views' must be ints");
    size_t i = 0;
    while (i < a->count) {
        const int64_t *w = a->ints + i;
        if (a->count - i < 3)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views': a record at int %zu is cut short", i);
        int64_t k = w[0], off = w[1], rank = w[2];
        if (k < 0 || k >= ctx->num_inputs)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views': a record at int %zu names input %lld "
                                "(0 to %d expected)", i, (long long)k, ctx->num_inputs - 1);
        if (vw->has[k])
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views': input %lld has two records", (long long)k);
        if (rank < 0 || rank > S4D_MAX_RANK || (uint64_t)(a->count - i - 3) < 2 * (uint64_t)rank)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views': input %lld's record has rank %lld "
                                "(0 to %d, with that many dims and strides, expected)",
                                (long long)k, (long long)rank, S4D_MAX_RANK);
        const s4d_tensor *src = &ctx->inputs[k];
        int64_t n = s4d_tensor_numel(src), last = off;
        int empty = 0;
        for (int d = 0; d < rank; d++) {
            int64_t dim = w[3 + d], st = w[3 + rank + d];
            if (dim < 0 || st < 0 || dim > ((int64_t)1 << 50))
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views': input %lld: dim %d is %lld with stride "
                                    "%lld (dims of at most 2^50 and strides >= 0 expected)", (long long)k, d, (long long)dim,
                                    (long long)st);
            empty |= dim == 0;
            /* The last element, without overflow: every step must stay below n. */
            if (dim > 1 && st > 0 && (st > (n - 1) / (dim - 1) || last > n - 1 - st * (dim - 1)))
                last = INT64_MAX;
            else if (dim > 1)
                last += st * (dim - 1);
            vw->shape[k].dims[d] = dim;
            vw->strides[k][d] = st;
        }
        if (!empty && (off < 0 || off >= n || last >= n))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views': input %lld's view (offset %lld) reads past "
                                "its %lld elements", (long long)k, (long long)off, (long long)n);
        if (off < 0)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'views': input %lld has offset %lld", (long long)k,
                                (long long)off);
        vw->shape[k].rank = (int)rank;
        vw->offset[k] = off;
        vw->has[k] = 1;
        i += 3 + 2 * (size_t)rank;
    }
    return S4D_OK;
}

static s4d_status pw_analyse(s4d_op_ctx *ctx, pw_params *p, pw_views *vw, int *out_rank, int64_t *out_dims)
{
    memset(p, 0, sizeof *p);
    memset(vw, 0, sizeof *vw);
    if (ctx->num_inputs < 1 || ctx->num_inputs > S4D_PW_MAX_INPUTS || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "expects 1 to %d inputs and 1 output, got %d and %d",
                            S4D_PW_MAX_INPUTS, ctx->num_inputs, ctx->num_outputs);
    p->num_inputs = ctx->num_inputs;
    const s4d_tensor *ins[S4D_PW_MAX_INPUTS];
    int32_t slot_dt[S4D_PW_MAX_SLOTS];
    for (int k = 0; k < ctx->num_inputs; k++) {
        if (!s4d_in_present(ctx, k))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d is missing", k);
        if (!pw_dtype_ok(ctx->inputs[k].dtype))
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d has dtype %s (float32, float16 or bool expected)",
                                k, s4d_dtype_name(ctx->inputs[k].dtype));
        ins[k] = &ctx->inputs[k];
        p->in_dtype[k] = slot_dt[k] = ctx->inputs[k].dtype;
    }
    const s4d_attr *prog = s4d_op_attr(ctx, "program");
    const s4d_attr *consts = s4d_op_attr(ctx, "constants");
    if (!prog || prog->type != S4D_ATTR_INTS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "the attribute 'program' (ints) is required");
    if (prog->count == 0 || prog->count % 4 != 0 || prog->count / 4 > S4D_PW_MAX_INSTRS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                            "'program' has %zu ints; expected 4 per instruction, 1 to %d instructions",
                            prog->count, S4D_PW_MAX_INSTRS);
    if (consts && (consts->type != S4D_ATTR_FLOATS || consts->count > S4D_PW_MAX_CONSTS))
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "'constants' must be at most %d floats",
                            S4D_PW_MAX_CONSTS);
    p->num_instrs = (int32_t)(prog->count / 4);
    unsigned read = 0;
    for (int k = 0; k < p->num_instrs; k++) {
        s4d_pw_instr *in = &p->code[k];
        const int64_t *w = prog->ints + 4 * k;
        for (int j = 0; j < 4; j++)
            if (w[j] < INT32_MIN || w[j] > INT32_MAX)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "program instruction %d: field %d (%lld) is out of "
                                    "range", k, j, (long long)w[j]);
        in->op = (int32_t)w[0];
        in->a = (int32_t)w[1];
        in->b = (int32_t)w[2];
        in->c = (int32_t)w[3];
        s4d_status st = check_instr(ctx, k, in, slot_dt, p->num_inputs + k, consts);
        if (st != S4D_OK)
            return st;
        int nops = slot_operands(in->op);
        int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < nops; j++)
            if (ops[j] < p->num_inputs)
                read |= 1u << ops[j];
        slot_dt[p->num_inputs + k] = in->dtype;
    }
    for (int k = 0; k < p->num_inputs; k++)
        if (!(read >> k & 1u))
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "input %d is never read by the program", k);
    p->out_dtype = p->code[p->num_instrs - 1].dtype;
    for (int k = 0; k < ctx->num_inputs; k++)
        if (ins[k]->rank > S4D_MAX_RANK)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d has rank %d (at most %d)", k, ins[k]->rank,
                                S4D_MAX_RANK);
    s4d_status st = pw_read_views(ctx, vw);
    if (st != S4D_OK)
        return st;
    for (int k = 0; k < ctx->num_inputs; k++) {
        if (!vw->has[k])
            vw->shape[k] = *ins[k];
        vw->shape[k].data = NULL;
        ins[k] = &vw->shape[k];
    }
    return s4d_bcast_shape(ctx, ins, ctx->num_inputs, out_rank, out_dims);
}

static s4d_status pw_infer(s4d_op_ctx *ctx)
{
    pw_params p;
    pw_views vw;
    int rank;
    int64_t dims[S4D_MAX_RANK];
    s4d_status st = pw_analyse(ctx, &p, &vw, &rank, dims);
    if (st != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, (s4d_dtype)p.out_dtype, rank, dims);
    if (ctx->params) {
        pw_geometry(&vw, &ctx->outputs[0], &p);
        *(pw_params *)ctx->params = p;
    }
    return S4D_OK;
}

/* ---- the interpreter ------------------------------------------------------ */

typedef struct pw_job {
    const pw_params *p;
    const void *in[S4D_PW_MAX_INPUTS];
    void *out;
    s4d_pw_act_fn act;
    int64_t inner;
    /* Per input: its strides are the output's (it has the output's shape), or all 0. */
    int shape_of_out[S4D_PW_MAX_INPUTS], single[S4D_PW_MAX_INPUTS];
} pw_job;

/* m values of an input from element off on, s apart (0: one value repeated, 1: contiguous). */
static void load_block(int dt, const void *base, int64_t off, int64_t s, float *dst, int64_t m)
{
    if (s == 0) {
        float v = dt == S4D_DTYPE_FLOAT32   ? ((const float *)base)[off]
                  : dt == S4D_DTYPE_FLOAT16 ? s4d_half_to_float(((const uint16_t *)base)[off])
                                            : (float)(((const uint8_t *)base)[off] != 0);
        for (int64_t i = 0; i < m; i++)
            dst[i] = v;
    } else if (dt == S4D_DTYPE_FLOAT32 && s == 1) {
        memcpy(dst, (const float *)base + off, (size_t)m * sizeof(float));
    } else if (dt == S4D_DTYPE_FLOAT32) {
        const float *x = (const float *)base + off;
        for (int64_t i = 0; i < m; i++)
            dst[i] = x[i * s];
    } else if (dt == S4D_DTYPE_FLOAT16) {
        const uint16_t *x = (const uint16_t *)base + off;
        for (int64_t i = 0; i < m; i++)
            dst[i] = s4d_half_to_float(x[i * s]);
    } else if (s == 1) {
        const uint8_t *x = (const uint8_t *)base + off;
        for (int64_t i = 0; i < m; i++)
            dst[i] = (float)(x[i] != 0);
    } else {
        const uint8_t *x = (const uint8_t *)base + off;
        for (int64_t i = 0; i < m; i++)
            dst[i] = (float)(x[i * s] != 0);
    }
}

static void store_block(int dt, void *base, int64_t off, const float *src, int64_t m)
{
    if (dt == S4D_DTYPE_FLOAT32) {
        memcpy((float *)base + off, src, (size_t)m * sizeof(float));
    } else if (dt == S4D_DTYPE_FLOAT16) {
        uint16_t *y = (uint16_t *)base + off;
        for (int64_t i = 0; i < m; i++)
            y[i] = s4d_float_to_half(src[i]);
    } else {
        uint8_t *y = (uint8_t *)base + off;
        for (int64_t i = 0; i < m; i++)
            y[i] = src[i] != 0;
    }
}

/* Element-wise loops with the unfused host kernels' expressions (float32 throughout). */
#define LOOP1(EXPR)                        \
    for (int64_t i = 0; i < m; i++) {      \
        float x = a[i];                    \
        o[i] = (EXPR);                     \
    }                                      \
    break
#define LOOP2(EXPR)                        \
    for (int64_t i = 0; i < m; i++) {      \
        float x = a[i], y = b[i];          \
        o[i] = (EXPR);                     \
    }                                      \
    break

static void run_instr(const pw_job *j, const s4d_pw_instr *in, const float *const *sp, float *o, int64_t m)
{
    const float *a = sp[in->a];
    const float *b = slot_operands(in->op) >= 2 ? sp[in->b] : a;
    const float *c = slot_operands(in->op) >= 3 ? sp[in->c] : a;
    if (j->act && in->dtype == S4D_DTYPE_FLOAT32 && j->act(in->op, in->lo, in->hi, a, o, m))
        return;
    switch ((s4d_pw_op)in->op) {
    case S4D_PW_ADD: LOOP2(x + y);
    case S4D_PW_SUB: LOOP2(x - y);
    case S4D_PW_MUL: LOOP2(x * y);
    case S4D_PW_DIV: LOOP2(x / y);
    case S4D_PW_MIN: LOOP2(x != x ? x : y != y ? y : x < y ? x : y);
    case S4D_PW_MAX: LOOP2(x != x ? x : y != y ? y : x > y ? x : y);
    case S4D_PW_NEG: LOOP1(-x);
    case S4D_PW_ABS: LOOP1(fabsf(x));
    case S4D_PW_EXP: LOOP1(expf(x));
    case S4D_PW_LOG: LOOP1(logf(x));
    case S4D_PW_SQRT: LOOP1(sqrtf(x));
    case S4D_PW_SIGMOID:
        /* unary_elementwise.c's: exp(-|x|) never overflows; the sign picks s or e * s. */
        for (int64_t i = 0; i < m; i++) {
            float v = a[i], e = expf(-fabsf(v)), s = 1.0f / (1.0f + e);
            o[i] = v >= 0 ? s : e * s;
        }
        break;
    case S4D_PW_RELU: LOOP1(x < 0 ? 0.0f : x);
    case S4D_PW_TANH: LOOP1(tanhf(x));
    case S4D_PW_RECIPROCAL: LOOP1(1.0f / x);
    case S4D_PW_ATAN: LOOP1(atanf(x));
    case S4D_PW_CLIP: {
        float lo = in->lo, hi = in->hi;
        LOOP1(x < lo ? lo : x > hi ? hi : x);
    }
    case S4D_PW_WHERE:
        /* A select of bits, without a branch per element (conditions are data). */
        for (int64_t i = 0; i < m; i++) {
            uint32_t xb, yb, r, mask = 0u - (uint32_t)(a[i] != 0);
            memcpy(&xb, &b[i], 4);
            memcpy(&yb, &c[i], 4);
            r = (xb & mask) | (yb & ~mask);
            memcpy(&o[i], &r, 4);
        }
        break;
    case S4D_PW_EQUAL: LOOP2(x == y);
    case S4D_PW_GREATER: LOOP2(x > y);
    case S4D_PW_LESS: LOOP2(x < y);
    case S4D_PW_GREATER_EQUAL: LOOP2(x >= y);
    case S4D_PW_LESS_EQUAL: LOOP2(x <= y);
    case S4D_PW_AND: LOOP2((x != 0) & (y != 0));
    case S4D_PW_OR: LOOP2((x != 0) | (y != 0));
    case S4D_PW_XOR: LOOP2((x != 0) ^ (y != 0));
    case S4D_PW_NOT: LOOP1(x == 0);
    case S4D_PW_CAST:
        if (in->dtype == S4D_DTYPE_BOOL) {
            LOOP1(x != 0); /* NaN is true, as the host's Cast (through double) makes it */
        } else if (in->dtype == S4D_DTYPE_FLOAT16) {
            /* float32 -> float16 rounds; bool and float16 values are already exact. */
            LOOP1(s4d_half_to_float(s4d_float_to_half(x)));
        } else {
            LOOP1(x);
        }
    }
}

/* Runs the program over m gathered or pointed-to values (sp[0..n) set) into output element e0 on. */
static void run_block(const pw_job *j, float (*slot)[PW_BLOCK], const float **sp, int64_t e0, int64_t m)
{
    const pw_params *p = j->p;
    const int last = p->num_inputs + p->num_instrs - 1;
    float *y = p->out_dtype == S4D_DTYPE_FLOAT32 ? (float *)j->out + e0 : NULL;
    for (int i = 0; i < p->num_instrs; i++) {
        int si = p->num_inputs + i;
        float *o = si == last && y ? y : slot[si];
        run_instr(j, &p->code[i], sp, o, m);
        sp[si] = o;
    }
    if (!y)
        store_block(p->out_dtype, j->out, e0, sp[last], m);
}

/* Output rows [r0, r1) (every dim but the last) in blocks along the row: rows of PW_BLOCK / 2
   elements or more, where a float32 input walking the row is read where it lies. */
static void pw_rows(void *arg, int64_t r0, int64_t r1)
{
    const pw_job *j = arg;
    const pw_params *p = j->p;
    float slot[S4D_PW_MAX_SLOTS][PW_BLOCK];
    const float *sp[S4D_PW_MAX_SLOTS]; /* each slot's values: its buffer, or a float32 input's own */
    const int L = p->rank - 1;
    for (int64_t row = r0; row < r1; row++) {
        int64_t off[S4D_PW_MAX_INPUTS] = {0};
        int64_t r = row;
        for (int d = L - 1; d >= 0; d--) {
            int64_t cd = r % p->dims[d];
            r /= p->dims[d];
            for (int k = 0; k < p->num_inputs; k++)
                off[k] += cd * p->strides[k][d];
        }
        for (int64_t c0 = 0; c0 < j->inner; c0 += PW_BLOCK) {
            int64_t m = j->inner - c0 < PW_BLOCK ? j->inner - c0 : PW_BLOCK;
            for (int k = 0; k < p->num_inputs; k++) {
                int64_t o = off[k] + c0 * p->strides[k][L], s = p->strides[k][L];
                if (p->in_dtype[k] == S4D_DTYPE_FLOAT32 && s == 1) {
                    sp[k] = (const float *)j->in[k] + o;
                } else {
                    load_block(p->in_dtype[k], j->in[k], o, s, slot[k], m);
                    sp[k] = slot[k];
                }
            }
            run_block(j, slot, sp, row * j->inner + c0, m);
        }
    }
}

/* Input k's element offset at output element e. */
static int64_t offset_of(const pw_params *p, int k, int64_t e)
{
    int64_t o = 0;
    for (int d = p->rank - 1; d >= 0; d--) {
        o += (e % p->dims[d]) * p->strides[k][d];
        e /= p->dims[d];
    }
    return o;
}

#define PW_WALK(LOAD)                                          \
    for (int64_t i = 0; i < m; i++) {                          \
        dst[i] = (LOAD);                                       \
        o += s1;                                               \
        if (++c1 == d1) {                                      \
            c1 = 0;                                            \
            o += s2 - d1 * s1;                                 \
            if (++c2 == d2) {                                  \
                c2 = 0;                                        \
                o = offset_of(p, k, e0 + i + 1);               \
            }                                                  \
        }                                                      \
    }

/* m values of input k for output elements e0 on (output coordinates idx, input offset off
   there): the last two dims by counters, a carry past them from the flat index. */
static void walk_input(const pw_params *p, int k, const void *base, int64_t e0, const int64_t *idx, int64_t off,
                       float *dst, int64_t m)
{
    const int R = p->rank;
    const int64_t d1 = p->dims[R - 1], s1 = p->strides[k][R - 1];
    const int64_t d2 = R >= 2 ? p->dims[R - 2] : 1, s2 = R >= 2 ? p->strides[k][R - 2] : 0;
    int64_t c1 = idx[R - 1], c2 = R >= 2 ? idx[R - 2] : 0, o = off;
    if (p->in_dtype[k] == S4D_DTYPE_FLOAT32) {
        const float *x = base;
        PW_WALK(x[o])
    } else if (p->in_dtype[k] == S4D_DTYPE_FLOAT16) {
        const uint16_t *x = base;
        PW_WALK(s4d_half_to_float(x[o]))
    } else {
        const uint8_t *x = base;
        PW_WALK((float)(x[o] != 0))
    }
}

/* Blocks [b0, b1) of PW_BLOCK output elements across short rows: inputs of the output's layout
   read in place or copied, single values repeated, the others walked element by element. */
static void pw_blocks(void *arg, int64_t b0, int64_t b1)
{
    const pw_job *j = arg;
    const pw_params *p = j->p;
    float slot[S4D_PW_MAX_SLOTS][PW_BLOCK];
    const float *sp[S4D_PW_MAX_SLOTS];
    const int R = p->rank, n = p->num_inputs;
    for (int64_t b = b0; b < b1; b++) {
        int64_t e0 = b * PW_BLOCK, m = p->numel - e0 < PW_BLOCK ? p->numel - e0 : PW_BLOCK;
        int64_t idx[S4D_MAX_RANK], off[S4D_PW_MAX_INPUTS] = {0}, r = e0;
        for (int d = R - 1; d >= 0; d--) {
            idx[d] = r % p->dims[d];
            r /= p->dims[d];
            for (int k = 0; k < n; k++)
                off[k] += idx[d] * p->strides[k][d];
        }
        /* Inputs laid out as the output and single values need no walk. */
        int walk[S4D_PW_MAX_INPUTS], nw = 0;
        for (int k = 0; k < n; k++) {
            if (j->shape_of_out[k] && p->in_dtype[k] == S4D_DTYPE_FLOAT32) {
                sp[k] = (const float *)j->in[k] + e0;
            } else if (j->shape_of_out[k] || j->single[k]) {
                load_block(p->in_dtype[k], j->in[k], j->single[k] ? 0 : e0, j->single[k] ? 0 : 1, slot[k], m);
                sp[k] = slot[k];
            } else {
                walk[nw++] = k;
                sp[k] = slot[k];
            }
        }
        for (int w = 0; w < nw; w++)
            walk_input(p, walk[w], j->in[walk[w]], e0, idx, off[walk[w]], slot[walk[w]], m);
        run_block(j, slot, sp, e0, m);
    }
}

s4d_status s4d_pointwise_run_with(s4d_op_ctx *ctx, s4d_pw_act_fn act)
{
    pw_params local;
    const pw_params *p = ctx->params;
    if (!p) {
        int rank;
        int64_t dims[S4D_MAX_RANK];
        pw_views vw;
        s4d_status st = pw_analyse(ctx, &local, &vw, &rank, dims);
        if (st != S4D_OK)
            return st;
        pw_geometry(&vw, &ctx->outputs[0], &local);
        p = &local;
    }
    if (p->numel == 0)
        return S4D_OK;
    pw_job j = {.p = p, .out = ctx->outputs[0].data, .act = act};
    for (int k = 0; k < p->num_inputs; k++)
        j.in[k] = (const char *)ctx->inputs[k].data + p->offset[k] * (int64_t)s4d_dtype_size(p->in_dtype[k]);
    j.inner = p->dims[p->rank - 1];
    for (int k = 0; k < p->num_inputs; k++) {
        int64_t st = 1;
        j.shape_of_out[k] = j.single[k] = 1;
        for (int d = p->rank - 1; d >= 0; d--) {
            j.shape_of_out[k] &= p->strides[k][d] == st;
            j.single[k] &= p->strides[k][d] == 0;
            st *= p->dims[d];
        }
    }
    /* About 16K element-instructions per task, as the one-op kernels split theirs. */
    int64_t work = 1 + p->num_instrs / 2;
    if (j.inner >= PW_BLOCK / 2)
        s4d_parallel_for(ctx->pool, p->numel / j.inner, 1 + 16384 / (j.inner * work), pw_rows, &j);
    else
        s4d_parallel_for(ctx->pool, (p->numel + PW_BLOCK - 1) / PW_BLOCK, 1 + 16384 / (PW_BLOCK * work),
                         pw_blocks, &j);
    return S4D_OK;
}

static s4d_status pw_run(s4d_op_ctx *ctx)
{
    return s4d_pointwise_run_with(ctx, NULL);
}

static const s4d_attr_spec pw_attrs[] = {
    {"program", S4D_ATTR_INTS}, {"constants", S4D_ATTR_FLOATS}, {"views", S4D_ATTR_INTS}, {NULL}};
const s4d_op_schema s4d_op_fused_pointwise = {"s4d", "FusedPointwise", 1, pw_infer, NULL, pw_run,
                                              sizeof(pw_params), 0, pw_attrs};
