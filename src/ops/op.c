/* Helpers every op kernel uses: errors, attributes, sizes (see op.h). */
#include "ops/op.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

s4d_status s4d_op_error(s4d_op_ctx *ctx, s4d_status status, const char *fmt, ...)
{
    if (!ctx || !ctx->err || ctx->err_size == 0)
        return status;
    int n = snprintf(ctx->err, ctx->err_size, "node '%s' (%s): ", ctx->node_name ? ctx->node_name : "",
                     ctx->op_type ? ctx->op_type : "?");
    if (n < 0)
        n = 0;
    if ((size_t)n < ctx->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err + n, ctx->err_size - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return status;
}

static const char *attr_type_name(s4d_attr_type t)
{
    switch (t) {
    case S4D_ATTR_FLOAT: return "a float";
    case S4D_ATTR_INT: return "an int";
    case S4D_ATTR_STRING: return "a string";
    case S4D_ATTR_TENSOR: return "a tensor";
    case S4D_ATTR_FLOATS: return "a list of floats";
    case S4D_ATTR_INTS: return "a list of ints";
    case S4D_ATTR_STRINGS: return "a list of strings";
    case S4D_ATTR_UNDEFINED: break;
    }
    return "of an unknown type";
}

s4d_status s4d_op_check_attrs(s4d_op_ctx *ctx)
{
    const s4d_attr_spec *spec = ctx->schema ? ctx->schema->attrs : NULL;
    for (int i = 0; i < ctx->num_attrs; i++) {
        const s4d_attr *a = &ctx->attrs[i];
        const char *name = a->name ? a->name : "";
        for (int j = 0; j < i; j++)
            if (ctx->attrs[j].name && strcmp(ctx->attrs[j].name, name) == 0)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute '%s' is given twice", name);
        const s4d_attr_spec *s = spec;
        while (s && s->name && strcmp(s->name, name) != 0)
            s++;
        if (!s || !s->name) {
            char known[256] = "no attributes";
            size_t used = 0;
            for (const s4d_attr_spec *k = spec; k && k->name && used < sizeof known; k++) {
                int n = snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", k->name);
                used += n > 0 ? (size_t)n : 0;
            }
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "unknown attribute '%s' (%s takes %s)", name,
                                ctx->op_type ? ctx->op_type : "the op", known);
        }
        int ok = a->type == s->type || (s->type == S4D_ATTR_FLOAT && a->type == S4D_ATTR_INT);
        if (!ok)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute '%s' is %s, expected %s", name,
                                attr_type_name(a->type), attr_type_name(s->type));
        if ((s->since && ctx->opset < s->since) || (s->until && ctx->opset > s->until)) {
            char range[64];
            if (s->until)
                snprintf(range, sizeof range, "opsets %d to %d", s->since ? s->since : 1, s->until);
            else
                snprintf(range, sizeof range, "opset %d and later", s->since);
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG,
                                "attribute '%s' does not exist at opset %d (only in %s)", name, ctx->opset,
                                range);
        }
        if ((s->checks & S4D_ATTR_BOOL) && a->i != 0 && a->i != 1)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute '%s' = %lld must be 0 or 1", name,
                                (long long)a->i);
        if (a->type == S4D_ATTR_TENSOR && !a->t)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute '%s' holds no tensor", name);
    }
    return S4D_OK;
}

int s4d_shape_fits(int rank, const int64_t *dims, s4d_dtype dtype)
{
    if (rank < 0 || rank > S4D_MAX_RANK)
        return 0;
    uint64_t bytes = s4d_dtype_size(dtype) ? s4d_dtype_size(dtype) : 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return 0;
        uint64_t d = dims[i] ? (uint64_t)dims[i] : 1;
        if (d > S4D_MAX_TENSOR_BYTES / bytes)
            return 0;
        bytes *= d;
    }
    return 1;
}

/* A shape for messages: "[2, 3]" or "rank 9". */
static const char *shape_str(const s4d_tensor *t, char *buf, size_t size)
{
    if (t->rank < 0 || t->rank > S4D_MAX_RANK) {
        snprintf(buf, size, "rank %d", t->rank);
        return buf;
    }
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

s4d_status s4d_op_infer(s4d_op_ctx *ctx)
{
    if (!ctx->schema || !ctx->schema->infer)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "no schema to infer with");
    /* Every op writes at least one output; infer and run may rely on outputs[0]. */
    if (ctx->num_outputs < 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "the node has no outputs");
    char buf[200];
    for (int i = 0; i < ctx->num_inputs; i++) {
        const s4d_tensor *t = &ctx->inputs[i];
        if (t->rank == -1 && t->dtype == S4D_DTYPE_UNDEFINED)
            continue; /* a missing optional input */
        if (!s4d_shape_fits(t->rank, t->dims, t->dtype))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d has shape %s: more than 2^50 bytes, or a "
                                "negative dim", i, shape_str(t, buf, sizeof buf));
    }
    s4d_status st = s4d_op_check_attrs(ctx);
    if (st == S4D_OK)
        st = ctx->schema->infer(ctx);
    for (int i = 0; st == S4D_OK && i < ctx->num_outputs; i++) {
        const s4d_tensor *t = &ctx->outputs[i];
        if (!s4d_shape_fits(t->rank, t->dims, t->dtype))
            st = s4d_op_error(ctx, S4D_ERR_SHAPE, "output %d would have shape %s: more than 2^50 "
                              "bytes, or a negative dim", i, shape_str(t, buf, sizeof buf));
    }
    return st;
}

const s4d_attr *s4d_op_attr(const s4d_op_ctx *ctx, const char *name)
{
    if (!ctx || !name || !ctx->attrs)
        return NULL;
    for (int i = 0; i < ctx->num_attrs; i++)
        if (ctx->attrs[i].name && strcmp(ctx->attrs[i].name, name) == 0)
            return &ctx->attrs[i];
    return NULL;
}

int64_t s4d_op_attr_int(const s4d_op_ctx *ctx, const char *name, int64_t dflt)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    return a && a->type == S4D_ATTR_INT ? a->i : dflt;
}

float s4d_op_attr_float(const s4d_op_ctx *ctx, const char *name, float dflt)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    if (!a)
        return dflt;
    /* Exporters sometimes write a float attribute as an int (alpha=1). */
    if (a->type == S4D_ATTR_FLOAT)
        return a->f;
    if (a->type == S4D_ATTR_INT)
        return (float)a->i;
    return dflt;
}

const char *s4d_op_attr_string(const s4d_op_ctx *ctx, const char *name, const char *dflt)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    return a && a->type == S4D_ATTR_STRING && a->s ? a->s : dflt;
}

int s4d_tensor_same_dims(const s4d_tensor *a, const s4d_tensor *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

int64_t s4d_tensor_numel(const s4d_tensor *t)
{
    if (!t || t->rank < 0)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}
