/*
 * Concat and Split: both move blocks along one axis. With outer = product of
 * dims before the axis, every input (output) contributes one contiguous run
 * of dims[axis] * inner elements per outer index.
 */
#include "ops/broadcast.h"
#include "ops/movement.h"

/* ---- Concat ------------------------------------------------------------------ */

static s4d_status infer_concat(s4d_op_ctx *ctx)
{
    if (ctx->num_inputs < 1 || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "expected at least 1 input and 1 output");
    const s4d_tensor *t0 = &ctx->inputs[0];
    if (!s4d_in_present(ctx, 0) || s4d_dtype_size(t0->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 has unsupported dtype %s", s4d_dtype_name(t0->dtype));
    if (!s4d_op_attr(ctx, "axis"))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "attribute 'axis' is required");
    int axis;
    s4d_status st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), t0->rank, "axis", &axis);
    if (st != S4D_OK)
        return st;
    int64_t dims[S4D_MAX_RANK];
    for (int d = 0; d < t0->rank; d++)
        dims[d] = t0->dims[d];
    dims[axis] = 0;
    for (int i = 0; i < ctx->num_inputs; i++) {
        const s4d_tensor *t = &ctx->inputs[i];
        if (!s4d_in_present(ctx, i))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d is missing", i);
        if (t->dtype != t0->dtype)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d has dtype %s but input 0 has %s", i,
                                s4d_dtype_name(t->dtype), s4d_dtype_name(t0->dtype));
        if (t->rank != t0->rank)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d has rank %d but input 0 has %d", i, t->rank, t0->rank);
        for (int d = 0; d < t0->rank; d++)
            if (d != axis && t->dims[d] != t0->dims[d])
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d has dim %d = %lld but input 0 has %lld", i, d,
                                    (long long)t->dims[d], (long long)t0->dims[d]);
        dims[axis] += t->dims[axis];
    }
    s4d_set_out(ctx, 0, t0->dtype, t0->rank, dims);
    if (ctx->params)
        ((s4d_axis_params *)ctx->params)->axis = axis;
    return S4D_OK;
}

typedef struct cat_job {
    const s4d_op_ctx *ctx;
    int axis;
    int64_t inner_bytes_out; /* bytes of one outer slice of the output */
} cat_job;

static void cat_chunk(void *vp, int64_t b, int64_t e)
{
    const cat_job *j = vp;
    const s4d_op_ctx *ctx = j->ctx;
    size_t es = s4d_dtype_size(ctx->outputs[0].dtype);
    for (int64_t o = b; o < e; o++) {
        char *dst = (char *)ctx->outputs[0].data + o * j->inner_bytes_out;
        for (int i = 0; i < ctx->num_inputs; i++) {
            const s4d_tensor *t = &ctx->inputs[i];
            int64_t run = (int64_t)es;
            for (int d = j->axis; d < t->rank; d++)
                run *= t->dims[d];
            if (run)
                memcpy(dst, (const char *)t->data + o * run, (size_t)run);
            dst += run;
        }
    }
}

static s4d_status run_concat(s4d_op_ctx *ctx)
{
    const s4d_tensor *out = &ctx->outputs[0];
    int axis;
    if (ctx->params) {
        axis = ((const s4d_axis_params *)ctx->params)->axis;
    } else {
        s4d_status st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), out->rank, "axis", &axis);
        if (st != S4D_OK)
            return st;
    }
    int64_t outer = 1, slice = (int64_t)s4d_dtype_size(out->dtype);
    for (int d = 0; d < axis; d++)
        outer *= out->dims[d];
    for (int d = axis; d < out->rank; d++)
        slice *= out->dims[d];
    cat_job j = {ctx, axis, slice};
    s4d_parallel_for(ctx->pool, outer, 1 + 65536 / (slice ? slice : 1), cat_chunk, &j);
    return S4D_OK;
}

static const s4d_attr_spec concat_attrs[] = {{"axis", S4D_ATTR_INT}, {NULL}};
const s4d_op_schema s4d_op_concat = {"", "Concat", 4, infer_concat, NULL, run_concat,
                                     sizeof(s4d_axis_params), 0, concat_attrs};

/* ---- Split -------------------------------------------------------------------- */

/* Sizes along the axis of each output, from input 1 (13+), 'split' (<13), num_outputs (18) or equal parts. */
static s4d_status split_sizes(s4d_op_ctx *ctx, int *axis_out, int64_t *sizes)
{
    const s4d_tensor *in = &ctx->inputs[0];
    int axis;
    s4d_status st = s4d_norm_axis(ctx, s4d_op_attr_int(ctx, "axis", 0), in->rank, "axis", &axis);
    if (st != S4D_OK)
        return st;
    int nout = ctx->num_outputs;
    int64_t total = in->dims[axis], n = -1;
    if (ctx->opset >= 13) {
        if (s4d_in_present(ctx, 1)) {
            if ((st = s4d_const_ints(ctx, 1, "split", sizes, nout, &n)) != S4D_OK)
                return st;
        }
    } else {
        const s4d_attr *a = s4d_op_attr(ctx, "split");
        if (a) {
            if (a->type != S4D_ATTR_INTS || (int64_t)a->count != nout)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "attribute split has %zu values for %d outputs", a->count,
                                    nout);
            n = (int64_t)a->count;
            for (int64_t i = 0; i < n; i++)
                sizes[i] = a->ints[i];
        }
    }
    if (n >= 0) {
        if (n != nout)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "split has %lld values for %d outputs", (long long)n, nout);
        int64_t sum = 0;
        for (int64_t i = 0; i < n; i++) {
            if (sizes[i] < 0)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "split[%lld] is negative", (long long)i);
            sum += sizes[i];
        }
        if (sum != total)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "split sums to %lld but the axis has %lld", (long long)sum,
                                (long long)total);
    } else {
        if (ctx->opset >= 18) {
            int64_t want = s4d_op_attr_int(ctx, "num_outputs", nout);
            if (want != nout)
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "num_outputs is %lld but the node has %d outputs",
                                    (long long)want, nout);
        }
        /* Equal parts of ceil(total / n); the last one takes the rest (opset 18 rule, exact before). */
        int64_t part = (total + nout - 1) / nout;
        if (ctx->opset < 18 && total % nout != 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis of %lld does not split into %d equal parts",
                                (long long)total, nout);
        int64_t left = total;
        for (int i = 0; i < nout; i++) {
            sizes[i] = left < part ? left : part;
            left -= sizes[i];
        }
    }
    *axis_out = axis;
    return S4D_OK;
}

static s4d_status infer_split(s4d_op_ctx *ctx)
{
    if (ctx->num_inputs < 1 || ctx->num_inputs > 2 || ctx->num_outputs < 1 || ctx->num_outputs > 1024)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "expected 1-2 inputs and 1-1024 outputs");
    const s4d_tensor *in = &ctx->inputs[0];
    if (s4d_dtype_size(in->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (input) has unsupported dtype %s", s4d_dtype_name(in->dtype));
    int64_t sizes[1024];
    int axis;
    s4d_status st = split_sizes(ctx, &axis, sizes);
    if (st != S4D_OK)
        return st;
    for (int i = 0; i < ctx->num_outputs; i++) {
        s4d_set_out(ctx, i, in->dtype, in->rank, in->dims);
        ctx->outputs[i].dims[axis] = sizes[i];
    }
    if (ctx->params)
        ((s4d_axis_params *)ctx->params)->axis = axis;
    return S4D_OK;
}

static s4d_status run_split(s4d_op_ctx *ctx)
{
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t sizes[1024];
    int axis;
    if (ctx->params) {
        /* Each output's length along the axis is its part. */
        axis = ((const s4d_axis_params *)ctx->params)->axis;
        for (int i = 0; i < ctx->num_outputs; i++)
            sizes[i] = ctx->outputs[i].dims[axis];
    } else {
        s4d_status st = split_sizes(ctx, &axis, sizes);
        if (st != S4D_OK)
            return st;
    }
    int64_t outer = 1, inner = (int64_t)s4d_dtype_size(in->dtype);
    for (int d = 0; d < axis; d++)
        outer *= in->dims[d];
    for (int d = axis + 1; d < in->rank; d++)
        inner *= in->dims[d];
    const char *src = in->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int i = 0; i < ctx->num_outputs; i++) {
            int64_t run = sizes[i] * inner;
            if (run)
                memcpy((char *)ctx->outputs[i].data + o * run, src, (size_t)run);
            src += run;
        }
    }
    return S4D_OK;
}

static const s4d_attr_spec split_attrs[] = {{"axis", S4D_ATTR_INT},
                                            {"split", S4D_ATTR_INTS, 0, 0, 12},
                                            {"num_outputs", S4D_ATTR_INT, 0, 18},
                                            {NULL}};
const s4d_op_schema s4d_op_split = {"", "Split", 2, infer_split, NULL, run_split,
                                    sizeof(s4d_axis_params), 0, split_attrs};
