/*
 * Argument checks of the deformable aggregation op: every function of the
 * op's API runs these before touching a tensor, so a wrong size is reported
 * by name instead of read out of bounds.
 */
#include "da_internal.h"

s4d_status s4d_da_fail(s4d_errbuf *err, s4d_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

static int is_float_type(s4d_dtype t)
{
    return t == S4D_DTYPE_FLOAT32 || t == S4D_DTYPE_FLOAT16;
}

/* Products of sizes must stay inside int64 so that every offset computed later is exact. */
static int mul_ok(int64_t *acc, int64_t v)
{
    if (v != 0 && *acc > INT64_MAX / v)
        return 0;
    *acc *= v;
    return 1;
}

static s4d_status check_sizes(const s4d_da_sizes *s, s4d_errbuf *err)
{
    if (s->struct_size < sizeof(s4d_da_sizes))
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                           "deformable_aggregation: sizes.struct_size is %zu, expected %zu",
                           s->struct_size, sizeof(s4d_da_sizes));
    const struct {
        const char *name;
        int64_t v;
    } f[] = {
        {"batch", s->batch},         {"num_rows", s->num_rows},
        {"channels", s->channels},   {"num_cams", s->num_cams},
        {"num_levels", s->num_levels}, {"num_groups", s->num_groups},
        {"num_anchors", s->num_anchors}, {"num_points", s->num_points},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i].v < 0)
            return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                               "deformable_aggregation: sizes.%s is %lld, expected >= 0",
                               f[i].name, (long long)f[i].v);
    }
    if (s->num_groups < 1)
        return s4d_da_fail(err, S4D_ERR_SHAPE,
                           "deformable_aggregation: sizes.num_groups is 0, expected >= 1");
    if (s->channels % s->num_groups != 0)
        return s4d_da_fail(err, S4D_ERR_SHAPE,
                           "deformable_aggregation: channels (%lld) is not divisible by "
                           "num_groups (%lld)",
                           (long long)s->channels, (long long)s->num_groups);
    int64_t feat = 1, wts = 1;
    int ok = mul_ok(&feat, s->batch) && mul_ok(&feat, s->num_rows) && mul_ok(&feat, s->channels) &&
             mul_ok(&feat, 8);
    ok = ok && mul_ok(&wts, s->batch) && mul_ok(&wts, s->num_anchors) &&
         mul_ok(&wts, s->num_points) && mul_ok(&wts, s->num_cams) && mul_ok(&wts, s->num_levels) &&
         mul_ok(&wts, s->num_groups) && mul_ok(&wts, 8);
    int64_t out = 1;
    ok = ok && mul_ok(&out, s->batch) && mul_ok(&out, s->num_anchors) &&
         mul_ok(&out, s->channels) && mul_ok(&out, 8);
    int64_t loc = 1;
    ok = ok && mul_ok(&loc, s->batch) && mul_ok(&loc, s->num_anchors) &&
         mul_ok(&loc, s->num_points) && mul_ok(&loc, s->num_cams) && mul_ok(&loc, 16);
    if (!ok)
        return s4d_da_fail(err, S4D_ERR_SHAPE,
                           "deformable_aggregation: tensor sizes overflow 64-bit byte counts");
    /* Row indices are int32 in scale_start_index, so F must fit too. */
    if (s->num_rows > INT32_MAX)
        return s4d_da_fail(err, S4D_ERR_SHAPE,
                           "deformable_aggregation: num_rows (%lld) exceeds the int32 range of "
                           "scale_start_index",
                           (long long)s->num_rows);
    return S4D_OK;
}

static s4d_status check_dtype(const char *name, s4d_dtype t, s4d_errbuf *err)
{
    if (!is_float_type(t))
        return s4d_da_fail(err, S4D_ERR_DTYPE,
                           "deformable_aggregation: %s dtype is %s (%d), expected float32 or "
                           "float16",
                           name, s4d_dtype_name(t), (int)t);
    return S4D_OK;
}

static int tensor_empty(const s4d_da_sizes *s)
{
    /* With no output element nothing is read, so NULL pointers are fine then. */
    return s->batch == 0 || s->num_anchors == 0 || s->channels == 0;
}

#define NEED_PTR(p, name)                                                                    \
    do {                                                                                     \
        if ((p) == NULL)                                                                     \
            return s4d_da_fail(err, S4D_ERR_INVALID_ARG,                                     \
                               "deformable_aggregation: %s is NULL", name);                  \
    } while (0)

s4d_status s4d_da_check_forward(const s4d_da_forward_args *a, s4d_errbuf *err)
{
    if (a == NULL)
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG, "deformable_aggregation: args is NULL");
    if (a->struct_size < sizeof(s4d_da_forward_args))
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                           "deformable_aggregation: args.struct_size is %zu, expected %zu",
                           a->struct_size, sizeof(s4d_da_forward_args));
    s4d_status st = check_sizes(&a->sizes, err);
    if (st != S4D_OK)
        return st;
    if ((st = check_dtype("features", a->features_dtype, err)) != S4D_OK ||
        (st = check_dtype("weights", a->weights_dtype, err)) != S4D_OK ||
        (st = check_dtype("output", a->output_dtype, err)) != S4D_OK)
        return st;
    NEED_PTR(a->spatial_shape, "spatial_shape");
    NEED_PTR(a->scale_start_index, "scale_start_index");
    if (tensor_empty(&a->sizes))
        return S4D_OK;
    NEED_PTR(a->output, "output");
    if (a->sizes.num_points > 0) {
        NEED_PTR(a->sampling_location, "sampling_location");
        NEED_PTR(a->weights, "weights");
        if (a->sizes.num_rows > 0)
            NEED_PTR(a->features, "features");
    }
    return S4D_OK;
}

s4d_status s4d_da_check_backward(const s4d_da_backward_args *a, s4d_errbuf *err)
{
    if (a == NULL)
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG, "deformable_aggregation: args is NULL");
    if (a->struct_size < sizeof(s4d_da_backward_args))
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                           "deformable_aggregation: args.struct_size is %zu, expected %zu",
                           a->struct_size, sizeof(s4d_da_backward_args));
    s4d_status st = check_sizes(&a->sizes, err);
    if (st != S4D_OK)
        return st;
    if ((st = check_dtype("features", a->features_dtype, err)) != S4D_OK ||
        (st = check_dtype("weights", a->weights_dtype, err)) != S4D_OK ||
        (st = check_dtype("grad_output", a->grad_output_dtype, err)) != S4D_OK)
        return st;
    NEED_PTR(a->spatial_shape, "spatial_shape");
    NEED_PTR(a->scale_start_index, "scale_start_index");
    const s4d_da_sizes *s = &a->sizes;
    int wants = a->grad_features || a->grad_sampling_location || a->grad_weights;
    if (wants && !tensor_empty(s) && s->num_points > 0) {
        NEED_PTR(a->grad_output, "grad_output");
        NEED_PTR(a->sampling_location, "sampling_location");
        NEED_PTR(a->weights, "weights");
        if (s->num_rows > 0)
            NEED_PTR(a->features, "features");
    }
    return S4D_OK;
}

s4d_status s4d_da_check_indices(const s4d_da_sizes *s, const int32_t *spatial_shape,
                                const int32_t *scale_start_index, s4d_errbuf *err)
{
    if (s == NULL)
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG, "deformable_aggregation: sizes is NULL");
    s4d_status st = check_sizes(s, err);
    if (st != S4D_OK)
        return st;
    NEED_PTR(spatial_shape, "spatial_shape");
    NEED_PTR(scale_start_index, "scale_start_index");
    for (int64_t n = 0; n < s->num_cams; n++) {
        for (int64_t l = 0; l < s->num_levels; l++) {
            int64_t i = n * s->num_levels + l;
            int64_t h = spatial_shape[2 * i], w = spatial_shape[2 * i + 1];
            int64_t start = scale_start_index[i];
            if (h < 1 || w < 1)
                return s4d_da_fail(err, S4D_ERR_SHAPE,
                                   "deformable_aggregation: spatial_shape[%lld][%lld] is (%lld, "
                                   "%lld), expected H >= 1 and W >= 1",
                                   (long long)n, (long long)l, (long long)h, (long long)w);
            if (start < 0 || start + h * w > s->num_rows)
                return s4d_da_fail(err, S4D_ERR_SHAPE,
                                   "deformable_aggregation: map [%lld][%lld] covers rows [%lld, "
                                   "%lld), outside the %lld rows of features "
                                   "(scale_start_index or spatial_shape is wrong)",
                                   (long long)n, (long long)l, (long long)start,
                                   (long long)(start + h * w), (long long)s->num_rows);
        }
    }
    return S4D_OK;
}

s4d_status s4d_da_check_algo(s4d_da_algo algo, s4d_errbuf *err)
{
    switch (algo) {
    case S4D_DA_ALGO_FAST:
    case S4D_DA_ALGO_DETERMINISTIC: return S4D_OK;
    }
    return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                       "deformable_aggregation: algo is %d, expected S4D_DA_ALGO_FAST (0) or "
                       "S4D_DA_ALGO_DETERMINISTIC (1)",
                       (int)algo);
}
