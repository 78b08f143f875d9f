/*
 * Early opset versions of ops whose later schema does the work: models
 * exported at opset 6 and below (the libonnx-testdata whole-model tests, old
 * model zoos) use them. Each legacy schema translates what differs into the
 * later version's terms and calls its infer and run:
 *
 *   Add, Sub, Mul, Div, Pow (< 7)   broadcast=1 with axis: B's dims line up
 *                                   with A's from `axis`, so B is viewed with
 *                                   trailing 1s and broadcast numpy-style
 *   Max, Min, Sum, Mean (< 8)       no broadcasting then: a subset
 *   Gemm (< 7), BatchNormalization (< 7)
 *                                   the later definition is a superset
 *                                   (is_test, consumed_inputs are ignored)
 *   PRelu (< 7)                     a 1-D slope of C values is per channel
 *                                   (axis 1), not along the last axis
 *   Upsample (7, 9)                 Resize at opset 10 (scales as an input)
 *   Scatter (9, 10)                 ScatterElements at opset 11
 *
 * The wrapped schema sees a copy of the context with the adjusted input
 * shapes (the data is not moved: only trailing 1s are added) and its own
 * opset; its params go to ctx->params, sized here for the largest of them.
 */
#include <string.h>

#include "ops/broadcast.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/movement.h"
#include "ops/reduce.h"

typedef union legacy_params {
    s4d_binary_params binary;
    s4d_gemm_params gemm;
    s4d_batchnorm_params bn;
    s4d_resize_params resize;
    s4d_scatter_params scatter;
} legacy_params;

#define LEGACY_MAX_INPUTS 64

typedef enum legacy_kind {
    LEGACY_BINARY,   /* broadcast / axis attributes */
    LEGACY_SAME,     /* nothing to translate */
    LEGACY_PRELU,
    LEGACY_UPSAMPLE,
    LEGACY_SCATTER
} legacy_kind;

typedef struct legacy_call {
    s4d_op_ctx c;
    s4d_tensor in[LEGACY_MAX_INPUTS];
    float scales[S4D_MAX_RANK]; /* Upsample-7's attribute as Resize's input */
} legacy_call;

static legacy_kind kind_of(const char *op)
{
    static const char *binary[] = {"Add", "Sub", "Mul", "Div", "Pow"};
    for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++)
        if (strcmp(op, binary[i]) == 0)
            return LEGACY_BINARY;
    if (strcmp(op, "PRelu") == 0)
        return LEGACY_PRELU;
    if (strcmp(op, "Upsample") == 0)
        return LEGACY_UPSAMPLE;
    if (strcmp(op, "Scatter") == 0)
        return LEGACY_SCATTER;
    return LEGACY_SAME;
}

/* The later schema and the context to call it with; S4D_OK or an error in ctx. */
static s4d_status legacy_prepare(s4d_op_ctx *ctx, legacy_call *lc)
{
    if (ctx->num_inputs > LEGACY_MAX_INPUTS)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "%d inputs, at most %d", ctx->num_inputs,
                            LEGACY_MAX_INPUTS);
    legacy_kind kind = kind_of(ctx->op_type);
    const char *target = kind == LEGACY_UPSAMPLE  ? "Resize"
                         : kind == LEGACY_SCATTER ? "ScatterElements"
                                                  : ctx->op_type;
    int target_opset = kind == LEGACY_UPSAMPLE ? 10 : kind == LEGACY_SCATTER ? 11 : 9;
    const s4d_op_schema *s = s4d_op_find_schema("", target, target_opset);
    if (!s || s == ctx->schema)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "no later schema of %s to translate to", target);
    lc->c = *ctx;
    lc->c.schema = s;
    lc->c.opset = s->since_version;
    lc->c.inputs = lc->in;
    memcpy(lc->in, ctx->inputs, sizeof(s4d_tensor) * (size_t)ctx->num_inputs);
    switch (kind) {
    case LEGACY_BINARY: {
        if (ctx->num_inputs != 2 || !s4d_op_attr_int(ctx, "broadcast", 0))
            break;
        const s4d_tensor *a = &ctx->inputs[0];
        s4d_tensor *b = &lc->in[1];
        const s4d_attr *ax = s4d_op_attr(ctx, "axis");
        int64_t axis = ax ? ax->i : a->rank - b->rank;
        if (axis < 0)
            axis += a->rank;
        if (axis < 0 || axis + b->rank > a->rank)
            return s4d_op_error(ctx, S4D_ERR_SHAPE,
                                "broadcast axis %lld does not fit B (rank %d) into A (rank %d)",
                                (long long)(ax ? ax->i : axis), b->rank, a->rank);
        for (int64_t d = b->rank; d < a->rank - axis; d++)
            b->dims[d] = 1;
        b->rank = (int)(a->rank - axis);
        break;
    }
    case LEGACY_PRELU: {
        const s4d_tensor *x = &ctx->inputs[0];
        s4d_tensor *sl = &lc->in[1];
        if (ctx->num_inputs == 2 && sl->rank == 1 && x->rank > 2 && sl->dims[0] > 1 &&
            sl->dims[0] == x->dims[1]) {
            for (int d = 1; d < x->rank - 1; d++)
                sl->dims[d] = 1;
            sl->rank = x->rank - 1;
        }
        break;
    }
    case LEGACY_UPSAMPLE: {
        const char *mode = s4d_op_attr_string(ctx, "mode", "nearest");
        if (strcmp(mode, "nearest") != 0 && strcmp(mode, "linear") != 0 &&
            strcmp(mode, "bilinear") != 0)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "mode '%s' (nearest, linear)", mode);
        if (ctx->opset < 9) {
            const s4d_attr *sc = s4d_op_attr(ctx, "scales");
            if (ctx->num_inputs != 1 || !sc || sc->type != S4D_ATTR_FLOATS ||
                (int)sc->count != ctx->inputs[0].rank || sc->count > S4D_MAX_RANK)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                    "expects one input and a scales attribute of one float per "
                                    "axis");
            memcpy(lc->scales, sc->floats, sizeof(float) * sc->count);
            memset(&lc->in[1], 0, sizeof lc->in[1]);
            lc->in[1].dtype = S4D_DTYPE_FLOAT32;
            lc->in[1].rank = 1;
            lc->in[1].dims[0] = (int64_t)sc->count;
            lc->in[1].data = lc->scales;
            lc->c.num_inputs = 2;
        }
        break;
    }
    case LEGACY_SCATTER:
    case LEGACY_SAME:
        break;
    }
    return S4D_OK;
}

static s4d_status legacy_infer(s4d_op_ctx *ctx)
{
    legacy_call lc;
    s4d_status st = legacy_prepare(ctx, &lc);
    if (st != S4D_OK)
        return st;
    if (lc.c.schema->params_size > sizeof(legacy_params))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "params of %s outgrew the legacy wrapper",
                            lc.c.schema->op_type);
    return lc.c.schema->infer(&lc.c);
}

static size_t legacy_ws(const s4d_op_ctx *ctx)
{
    legacy_call lc;
    if (legacy_prepare((s4d_op_ctx *)ctx, &lc) != S4D_OK || !lc.c.schema->workspace_size)
        return 0;
    return lc.c.schema->workspace_size(&lc.c);
}

static s4d_status legacy_run(s4d_op_ctx *ctx)
{
    legacy_call lc;
    s4d_status st = legacy_prepare(ctx, &lc);
    if (st != S4D_OK)
        return st;
    return lc.c.schema->run(&lc.c);
}

#define LEGACY(NAME, ONNX, SINCE)                                                                 \
    const s4d_op_schema s4d_op_legacy_##NAME = {"", ONNX, SINCE, legacy_infer, legacy_ws,         \
                                                legacy_run, sizeof(legacy_params), 0,             \
                                                legacy_##NAME##_attrs};

/* The early versions' attributes; consumed_inputs and is_test mean nothing to inference. */
#define CONSUMED {"consumed_inputs", S4D_ATTR_INTS}
static const s4d_attr_spec legacy_binary_attrs[] = {
    {"axis", S4D_ATTR_INT}, {"broadcast", S4D_ATTR_INT, S4D_ATTR_BOOL}, CONSUMED, {NULL}};
static const s4d_attr_spec legacy_consumed_attrs[] = {CONSUMED, {NULL}};
#define legacy_add_attrs legacy_binary_attrs
#define legacy_sub_attrs legacy_binary_attrs
#define legacy_mul_attrs legacy_binary_attrs
#define legacy_div_attrs legacy_binary_attrs
#define legacy_pow_attrs legacy_binary_attrs
#define legacy_max_attrs legacy_consumed_attrs
#define legacy_min_attrs legacy_consumed_attrs
#define legacy_sum_attrs legacy_consumed_attrs
#define legacy_mean_attrs legacy_consumed_attrs
#define legacy_prelu_attrs legacy_consumed_attrs
static const s4d_attr_spec legacy_gemm_attrs[] = {{"alpha", S4D_ATTR_FLOAT},
                                                  {"beta", S4D_ATTR_FLOAT},
                                                  {"transA", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                                  {"transB", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                                  {"broadcast", S4D_ATTR_INT, S4D_ATTR_BOOL},
                                                  {NULL}};
static const s4d_attr_spec legacy_batchnorm_attrs[] = {{"epsilon", S4D_ATTR_FLOAT}, {"momentum", S4D_ATTR_FLOAT},
                                                       {"spatial", S4D_ATTR_INT},   {"is_test", S4D_ATTR_INT},
                                                       CONSUMED,                    {NULL}};
/* scales became an input at opset 9. */
static const s4d_attr_spec legacy_upsample_attrs[] = {
    {"mode", S4D_ATTR_STRING}, {"scales", S4D_ATTR_FLOATS, 0, 0, 8}, {NULL}};
static const s4d_attr_spec legacy_scatter_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};

LEGACY(add, "Add", 1)
LEGACY(sub, "Sub", 1)
LEGACY(mul, "Mul", 1)
LEGACY(div, "Div", 1)
LEGACY(pow, "Pow", 1)
LEGACY(max, "Max", 1)
LEGACY(min, "Min", 1)
LEGACY(sum, "Sum", 1)
LEGACY(mean, "Mean", 1)
LEGACY(gemm, "Gemm", 1)
LEGACY(prelu, "PRelu", 1)
LEGACY(batchnorm, "BatchNormalization", 1)
LEGACY(upsample, "Upsample", 7)
LEGACY(scatter, "Scatter", 9)
