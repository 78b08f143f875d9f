/* Geometry, im2col and col2im of the convolution ops. */
#include <string.h>

#include "ops/conv_common.h"

static s4d_status read_ints(s4d_op_ctx *ctx, const char *name, int64_t count, int64_t dflt,
                            int64_t min, int64_t *out)
{
    const s4d_attr *a = s4d_op_attr(ctx, name);
    for (int64_t i = 0; i < count; i++)
        out[i] = dflt;
    if (!a)
        return S4D_OK;
    if (a->type != S4D_ATTR_INTS || (int64_t)a->count != count)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute %s must list %lld ints", name,
                            (long long)count);
    /* No window, step or padding reaches past the largest tensor, which keeps every index the
       kernels compute (o * stride - pad + k * dil) far from int64's ends. */
    const int64_t max = (int64_t)S4D_MAX_TENSOR_BYTES;
    for (int64_t i = 0; i < count; i++) {
        if (a->ints[i] < min)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute %s[%lld] = %lld is below %lld", name,
                                (long long)i, (long long)a->ints[i], (long long)min);
        if (a->ints[i] > max)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "attribute %s[%lld] = %lld is above 2^50", name,
                                (long long)i, (long long)a->ints[i]);
        out[i] = a->ints[i];
    }
    return S4D_OK;
}

s4d_status s4d_host_conv_attrs(s4d_op_ctx *ctx, int nsp, const int64_t *kernel_dims, s4d_conv_geom *g,
                              s4d_auto_pad *ap)
{
    if (nsp < 1 || nsp > 3)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%d spatial dimensions (1 to 3 supported)", nsp);
    int64_t ks[3], st[3], dl[3], pd[6];
    s4d_status s;
    if ((s = read_ints(ctx, "kernel_shape", nsp, 0, 1, ks)) != S4D_OK)
        return s;
    if (s4d_op_attr(ctx, "kernel_shape")) {
        for (int i = 0; i < nsp; i++)
            if (ks[i] != kernel_dims[i])
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "kernel_shape[%d] = %lld but the weight has %lld", i,
                                    (long long)ks[i], (long long)kernel_dims[i]);
    }
    if ((s = read_ints(ctx, "strides", nsp, 1, 1, st)) != S4D_OK ||
        (s = read_ints(ctx, "dilations", nsp, 1, 1, dl)) != S4D_OK ||
        (s = read_ints(ctx, "pads", 2 * nsp, 0, 0, pd)) != S4D_OK)
        return s;
    const char *apn = s4d_op_attr_string(ctx, "auto_pad", "NOTSET");
    if (strcmp(apn, "NOTSET") == 0 || apn[0] == '\0')
        *ap = S4D_AUTO_PAD_NOTSET;
    else if (strcmp(apn, "VALID") == 0)
        *ap = S4D_AUTO_PAD_VALID;
    else if (strcmp(apn, "SAME_UPPER") == 0)
        *ap = S4D_AUTO_PAD_SAME_UPPER;
    else if (strcmp(apn, "SAME_LOWER") == 0)
        *ap = S4D_AUTO_PAD_SAME_LOWER;
    else
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "auto_pad '%s' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER",
                            apn);
    memset(g, 0, sizeof *g);
    g->nsp = nsp;
    for (int i = 0; i < 3; i++) {
        g->img[i] = g->grid[i] = g->k[i] = g->stride[i] = g->dil[i] = 1;
    }
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        if (kernel_dims[i] < 1)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "kernel dimension %d is %lld", i, (long long)kernel_dims[i]);
        g->k[j] = kernel_dims[i];
        g->stride[j] = st[i];
        g->dil[j] = dl[i];
        g->pad_b[j] = *ap == S4D_AUTO_PAD_NOTSET ? pd[i] : 0;
        g->pad_e[j] = *ap == S4D_AUTO_PAD_NOTSET ? pd[nsp + i] : 0;
    }
    return S4D_OK;
}

void s4d_host_conv_same_pad(s4d_conv_geom *g, int j, int64_t ext, s4d_auto_pad ap)
{
    int64_t in = g->img[j];
    g->grid[j] = in / g->stride[j] + (in % g->stride[j] != 0);
    /* in - (grid - 1) * stride lies in [1, stride] (in > 0), so nothing here overflows. */
    int64_t total = in > 0 ? ext - (in - (g->grid[j] - 1) * g->stride[j]) : ext;
    if (total < 0)
        total = 0;
    g->pad_b[j] = ap == S4D_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
    g->pad_e[j] = total - g->pad_b[j];
}

int64_t s4d_host_conv_prod3(const int64_t *v)
{
    return v[0] * v[1] * v[2];
}

int s4d_host_conv_prod3_ok(const int64_t *v, int64_t *out)
{
    return s4d_mul_i64(v[0], v[1], out) == 0 && s4d_mul_i64(*out, v[2], out) == 0;
}

int s4d_host_conv_extent(const s4d_conv_geom *g, int j, int64_t *ext)
{
    return s4d_mul_i64(g->dil[j], g->k[j] - 1, ext) == 0 && s4d_add_i64(*ext, 1, ext) == 0;
}

typedef struct colwork {
    const s4d_conv_geom *g;
    const float *src;
    float *dst;
} colwork;

static void im2col_rows(void *arg, int64_t begin, int64_t end)
{
    const colwork *w = arg;
    const s4d_conv_geom *g = w->g;
    const int64_t kk = s4d_host_conv_prod3(g->k), ncol = s4d_host_conv_prod3(g->grid);
    const int64_t plane = s4d_host_conv_prod3(g->img);
    for (int64_t r = begin; r < end; r++) {
        int64_t c = r / kk, kr = r % kk;
        int64_t k2 = kr % g->k[2], k1 = (kr / g->k[2]) % g->k[1], k0 = kr / (g->k[2] * g->k[1]);
        const float *src = w->src + c * plane;
        float *dst = w->dst + r * ncol;
        for (int64_t o0 = 0; o0 < g->grid[0]; o0++) {
            int64_t i0 = o0 * g->stride[0] - g->pad_b[0] + k0 * g->dil[0];
            for (int64_t o1 = 0; o1 < g->grid[1]; o1++) {
                int64_t i1 = o1 * g->stride[1] - g->pad_b[1] + k1 * g->dil[1];
                float *d = dst + (o0 * g->grid[1] + o1) * g->grid[2];
                if (i0 < 0 || i0 >= g->img[0] || i1 < 0 || i1 >= g->img[1]) {
                    memset(d, 0, sizeof(float) * (size_t)g->grid[2]);
                    continue;
                }
                const float *s = src + (i0 * g->img[1] + i1) * g->img[2];
                int64_t base = k2 * g->dil[2] - g->pad_b[2], sw = g->stride[2];
                if (sw == 1) {
                    /* Contiguous run: zero the clipped ends, copy the middle. */
                    int64_t lo = base < 0 ? -base : 0;
                    int64_t hi = g->img[2] - base;
                    if (hi > g->grid[2])
                        hi = g->grid[2];
                    if (lo > g->grid[2])
                        lo = g->grid[2];
                    if (hi < lo)
                        hi = lo;
                    memset(d, 0, sizeof(float) * (size_t)lo);
                    if (hi > lo)
                        memcpy(d + lo, s + base + lo, sizeof(float) * (size_t)(hi - lo));
                    memset(d + hi, 0, sizeof(float) * (size_t)(g->grid[2] - hi));
                } else {
                    for (int64_t o2 = 0; o2 < g->grid[2]; o2++) {
                        int64_t i2 = base + o2 * sw;
                        d[o2] = (i2 >= 0 && i2 < g->img[2]) ? s[i2] : 0.0f;
                    }
                }
            }
        }
    }
}

void s4d_host_im2col(struct s4d_threadpool *pool, const s4d_conv_geom *g, int64_t channels,
                    const float *img, float *col)
{
    colwork w = {g, img, col};
    int64_t rows = channels * s4d_host_conv_prod3(g->k);
    int64_t grain = 1 + 16384 / (s4d_host_conv_prod3(g->grid) + 1);
    s4d_parallel_for(pool, rows, grain, im2col_rows, &w);
}

static void col2im_channels(void *arg, int64_t begin, int64_t end)
{
    const colwork *w = arg;
    const s4d_conv_geom *g = w->g;
    const int64_t kk = s4d_host_conv_prod3(g->k), ncol = s4d_host_conv_prod3(g->grid);
    const int64_t plane = s4d_host_conv_prod3(g->img);
    for (int64_t c = begin; c < end; c++) {
        float *img = w->dst + c * plane;
        for (int64_t kr = 0; kr < kk; kr++) {
            int64_t k2 = kr % g->k[2], k1 = (kr / g->k[2]) % g->k[1], k0 = kr / (g->k[2] * g->k[1]);
            const float *src = w->src + (c * kk + kr) * ncol;
            for (int64_t o0 = 0; o0 < g->grid[0]; o0++) {
                int64_t i0 = o0 * g->stride[0] - g->pad_b[0] + k0 * g->dil[0];
                if (i0 < 0 || i0 >= g->img[0])
                    continue;
                for (int64_t o1 = 0; o1 < g->grid[1]; o1++) {
                    int64_t i1 = o1 * g->stride[1] - g->pad_b[1] + k1 * g->dil[1];
                    if (i1 < 0 || i1 >= g->img[1])
                        continue;
                    const float *s = src + (o0 * g->grid[1] + o1) * g->grid[2];
                    float *d = img + (i0 * g->img[1] + i1) * g->img[2];
                    int64_t base = k2 * g->dil[2] - g->pad_b[2];
                    for (int64_t o2 = 0; o2 < g->grid[2]; o2++) {
                        int64_t i2 = base + o2 * g->stride[2];
                        if (i2 >= 0 && i2 < g->img[2])
                            d[i2] += s[o2];
                    }
                }
            }
        }
    }
}

void s4d_host_col2im(struct s4d_threadpool *pool, const s4d_conv_geom *g, int64_t channels,
                    const float *col, float *img)
{
    colwork w = {g, col, img};
    s4d_parallel_for(pool, channels, 1, col2im_channels, &w);
}
