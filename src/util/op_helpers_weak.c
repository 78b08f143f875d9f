/*
 * Weak stand-ins for the op helpers of src/core/op.h, so the engine links and
 * its tests run on a branch where src/core/op.c has not landed yet. The
 * strong definitions in src/core/op.c replace these at link time; delete
 * this file once that is merged everywhere.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/op.h"

#define WEAK __attribute__((weak))

WEAK s4d_status s4d_op_error(s4d_op_ctx *ctx, s4d_status status, const char *fmt, ...)
{
    if (ctx && ctx->err && ctx->err_size) {
        int n = snprintf(ctx->err, ctx->err_size, "node '%s' (%s): ",
                         ctx->node_name ? ctx->node_name : "", ctx->op_type ? ctx->op_type : "");
        if (n >= 0 && (size_t)n < ctx->err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ctx->err + n, ctx->err_size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return status;
}

WEAK const s4d_attr *s4d_op_attr(const s4d_op_ctx *ctx, const char *name)
{
    for (int i = 0; i < ctx->num_attrs; i++)
        if (strcmp(ctx->attrs[i].name, name) == 0)
            return &ctx->attrs[i];
    return NULL;
}

WEAK int64_t s4d_op_attr_int(const s4d_op_ctx *ctx, const char *name, int64_t dflt)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    return a && a->type == S4D_ATTR_INT ? a->i : dflt;
}

WEAK float s4d_op_attr_float(const s4d_op_ctx *ctx, const char *name, float dflt)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    return a && a->type == S4D_ATTR_FLOAT ? a->f : dflt;
}

WEAK const char *s4d_op_attr_string(const s4d_op_ctx *ctx, const char *name, const char *dflt)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    return a && a->type == S4D_ATTR_STRING ? a->s : dflt;
}

WEAK int64_t s4d_tensor_numel(const s4d_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}

WEAK void s4d_parallel_for(struct s4d_threadpool *pool, int64_t n, int64_t grain,
                           s4d_parallel_fn fn, void *arg)
{
    (void)pool;
    (void)grain;
    if (n > 0)
        fn(arg, 0, n);
}
