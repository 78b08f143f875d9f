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

int64_t s4d_tensor_numel(const s4d_tensor *t)
{
    if (!t || t->rank < 0)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}
