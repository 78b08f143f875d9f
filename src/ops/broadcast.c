/* Shared helpers of the CPU op kernels (see broadcast.h). */
#include "ops/broadcast.h"

#include <string.h>

s4d_status s4d_check_arity(s4d_op_ctx *ctx, int lo, int hi, int nout)
{
    if (ctx->num_inputs < lo || ctx->num_inputs > hi) {
        if (lo == hi)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "expected %d inputs, got %d", lo, ctx->num_inputs);
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "expected %d to %d inputs, got %d", lo, hi, ctx->num_inputs);
    }
    for (int i = 0; i < lo; i++)
        if (!s4d_in_present(ctx, i))
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "required input %d is missing", i);
    if (ctx->num_outputs != nout)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "expected %d outputs, got %d", nout, ctx->num_outputs);
    return S4D_OK;
}

s4d_status s4d_norm_axis(s4d_op_ctx *ctx, int64_t axis, int rank, const char *what, int *out)
{
    if (axis < -(int64_t)rank || axis >= rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "%s %lld is out of range for rank %d", what, (long long)axis,
                            rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return S4D_OK;
}

s4d_status s4d_const_ints(s4d_op_ctx *ctx, int idx, const char *what, int64_t *vals, int64_t max,
                          int64_t *count)
{
    const s4d_tensor *t = &ctx->inputs[idx];
    if (t->dtype != S4D_DTYPE_INT64 && t->dtype != S4D_DTYPE_INT32)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d (%s) must be int64 or int32, got %s", idx, what,
                            s4d_dtype_name(t->dtype));
    if (t->rank > 1)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (%s) must be rank 0 or 1, got rank %d", idx, what,
                            t->rank);
    if (!t->data)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "input %d (%s) must be a constant: the output shape depends on its values", idx,
                            what);
    int64_t n = s4d_tensor_numel(t);
    if (n > max)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d (%s) has %lld values, at most %lld allowed", idx,
                            what, (long long)n, (long long)max);
    for (int64_t i = 0; i < n; i++)
        vals[i] = t->dtype == S4D_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
    *count = n;
    return S4D_OK;
}

s4d_status s4d_bcast_shape(s4d_op_ctx *ctx, const s4d_tensor *const *ins, int n, int *rank, int64_t *dims)
{
    int r = 0;
    for (int k = 0; k < n; k++)
        if (ins[k]->rank > r)
            r = ins[k]->rank;
    for (int d = 0; d < r; d++)
        dims[d] = 1;
    for (int k = 0; k < n; k++) {
        int off = r - ins[k]->rank;
        for (int d = 0; d < ins[k]->rank; d++) {
            int64_t v = ins[k]->dims[d], *o = &dims[off + d];
            if (v == *o || v == 1)
                continue;
            if (*o == 1) {
                *o = v;
                continue;
            }
            return s4d_op_error(ctx, S4D_ERR_SHAPE,
                                "input %d cannot be broadcast: its dim %d is %lld where another input has %lld",
                                k, d, (long long)v, (long long)*o);
        }
    }
    /* A zero-size dim wins over 1 (numpy): handled above since v == 0 != 1 sets it. */
    *rank = r;
    return S4D_OK;
}

void s4d_bcast_init(s4d_bcast *b, const s4d_tensor *out, const s4d_tensor *const *ins, int n)
{
    int r = out->rank;
    int64_t dims[S4D_MAX_RANK], st[S4D_BCAST_MAX_IN][S4D_MAX_RANK];
    for (int k = 0; k < n; k++) {
        int off = r - ins[k]->rank;
        int64_t s = 1;
        for (int d = r - 1; d >= 0; d--) {
            int64_t v = d >= off ? ins[k]->dims[d - off] : 1;
            st[k][d] = (v == out->dims[d] && v != 1) ? s : 0;
            s *= v;
        }
    }
    for (int d = 0; d < r; d++)
        dims[d] = out->dims[d];
    /* Drop size-1 dims, then merge neighbours whose strides chain. */
    int m = 0;
    b->n = n;
    for (int d = 0; d < r; d++) {
        if (dims[d] == 1)
            continue;
        int merge = m > 0;
        for (int k = 0; k < n && merge; k++)
            if (b->st[k][m - 1] != st[k][d] * dims[d])
                merge = 0;
        if (merge) {
            b->dims[m - 1] *= dims[d];
            for (int k = 0; k < n; k++)
                b->st[k][m - 1] = st[k][d];
        } else {
            b->dims[m] = dims[d];
            for (int k = 0; k < n; k++)
                b->st[k][m] = st[k][d];
            m++;
        }
    }
    if (m == 0) {
        b->dims[0] = 1;
        for (int k = 0; k < n; k++)
            b->st[k][0] = 0;
        m = 1;
    }
    b->rank = m;
    b->inner = b->dims[m - 1];
    b->rows = 1;
    for (int d = 0; d < m - 1; d++)
        b->rows *= b->dims[d];
    for (int d = 0; d < r; d++)
        if (out->dims[d] == 0)
            b->rows = 0, b->inner = 0;
}

typedef struct bcopy_job {
    const s4d_bcast *b;
    char *out;
    const char *in;
    size_t es;
} bcopy_job;

static void bcopy_rows(void *vp, int64_t r0, int64_t r1)
{
    const bcopy_job *j = vp;
    const s4d_bcast *b = j->b;
    int64_t idx[S4D_MAX_RANK], offs[S4D_BCAST_MAX_IN];
    s4d_bcast_seek(b, r0, idx, offs);
    int64_t sin = b->st[0][b->rank - 1], inner = b->inner;
    size_t es = j->es;
    for (int64_t r = r0; r < r1; r++) {
        char *o = j->out + (size_t)(r * inner) * es;
        const char *s = j->in + (size_t)offs[0] * es;
        if (sin)
            memcpy(o, s, (size_t)inner * es);
        else
            for (int64_t i = 0; i < inner; i++)
                memcpy(o + (size_t)i * es, s, es);
        s4d_bcast_next(b, idx, offs);
    }
}

void s4d_bcast_copy(struct s4d_threadpool *pool, s4d_tensor *out, const s4d_tensor *in)
{
    s4d_bcast b;
    const s4d_tensor *ins[1] = {in};
    s4d_bcast_init(&b, out, ins, 1);
    bcopy_job j = {&b, out->data, in->data, s4d_dtype_size(out->dtype)};
    int64_t grain = b.inner > 0 ? (1 << 15) / b.inner + 1 : 1;
    s4d_parallel_for(pool, b.rows, grain, bcopy_rows, &j);
}

int s4d_dtype_is_int(s4d_dtype dt)
{
    switch (dt) {
    case S4D_DTYPE_UINT8: case S4D_DTYPE_INT8: case S4D_DTYPE_UINT16: case S4D_DTYPE_INT16:
    case S4D_DTYPE_INT32: case S4D_DTYPE_INT64: case S4D_DTYPE_UINT32: case S4D_DTYPE_UINT64:
        return 1;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_FLOAT32: case S4D_DTYPE_STRING: case S4D_DTYPE_BOOL:
    case S4D_DTYPE_FLOAT16: case S4D_DTYPE_FLOAT64: case S4D_DTYPE_BFLOAT16:
        return 0;
    }
    return 0;
}

int s4d_dtype_is_float(s4d_dtype dt)
{
    return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT64 || dt == S4D_DTYPE_FLOAT16 ||
           dt == S4D_DTYPE_BFLOAT16;
}

double s4d_load_f64(s4d_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return ((const float *)p)[i];
    case S4D_DTYPE_FLOAT64: return ((const double *)p)[i];
    case S4D_DTYPE_FLOAT16: return s4d_half_to_float(((const uint16_t *)p)[i]);
    case S4D_DTYPE_BFLOAT16: return s4d_bf16_to_float(((const uint16_t *)p)[i]);
    case S4D_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case S4D_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    case S4D_DTYPE_INT8: return ((const int8_t *)p)[i];
    case S4D_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case S4D_DTYPE_INT16: return ((const int16_t *)p)[i];
    case S4D_DTYPE_INT32: return ((const int32_t *)p)[i];
    case S4D_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case S4D_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case S4D_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_STRING: return 0.0;
    }
    return 0.0;
}

/* Float to integer without undefined behaviour: NaN -> 0, saturate at the ends. */
static int64_t f64_to_i64(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

void s4d_store_f64(s4d_dtype dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; return;
    case S4D_DTYPE_FLOAT64: ((double *)p)[i] = v; return;
    case S4D_DTYPE_FLOAT16: ((uint16_t *)p)[i] = s4d_float_to_half((float)v); return;
    case S4D_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = s4d_float_to_bf16((float)v); return;
    case S4D_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0; return;
    case S4D_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)f64_to_i64(v, 0, 255); return;
    case S4D_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)f64_to_i64(v, -128, 127); return;
    case S4D_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)f64_to_i64(v, 0, 65535); return;
    case S4D_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)f64_to_i64(v, -32768, 32767); return;
    case S4D_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)f64_to_i64(v, -2147483648.0, 2147483647.0); return;
    case S4D_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)f64_to_i64(v, 0, 4294967295.0); return;
    case S4D_DTYPE_INT64:
        /* 2^63 is not an int64: saturate strictly below it. */
        ((int64_t *)p)[i] = v != v ? 0 : v >= 9223372036854775807.0 ? INT64_MAX
                                       : v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
        return;
    case S4D_DTYPE_UINT64:
        ((uint64_t *)p)[i] = v != v || v <= 0 ? 0 : v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
        return;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_STRING: return;
    }
}

int64_t s4d_load_i64(s4d_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case S4D_DTYPE_UINT8: case S4D_DTYPE_BOOL: return ((const uint8_t *)p)[i];
    case S4D_DTYPE_INT8: return ((const int8_t *)p)[i];
    case S4D_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case S4D_DTYPE_INT16: return ((const int16_t *)p)[i];
    case S4D_DTYPE_INT32: return ((const int32_t *)p)[i];
    case S4D_DTYPE_INT64: return ((const int64_t *)p)[i];
    case S4D_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case S4D_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_FLOAT32: case S4D_DTYPE_STRING: case S4D_DTYPE_FLOAT16:
    case S4D_DTYPE_FLOAT64: case S4D_DTYPE_BFLOAT16:
        return 0;
    }
    return 0;
}
