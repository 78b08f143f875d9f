/*
 * Geometry, im2col and col2im shared by Conv and ConvTranspose. One to three
 * spatial dimensions are handled as three, the missing leading ones of size 1,
 * so that one loop nest serves Conv1d/2d/3d.
 */
#ifndef S4D_HOST_OPS_CONV_COMMON_H
#define S4D_HOST_OPS_CONV_COMMON_H

#include <stdint.h>

#include "ops/op.h"

typedef struct s4d_conv_geom {
    int nsp;             /* spatial rank as given, 1..3 */
    int64_t img[3];      /* image side: Conv input, ConvTranspose output */
    int64_t grid[3];     /* column side: Conv output, ConvTranspose input */
    int64_t k[3];        /* kernel */
    int64_t stride[3];
    int64_t dil[3];
    int64_t pad_b[3];    /* padding before, on the image side */
    int64_t pad_e[3];
} s4d_conv_geom;

typedef enum s4d_auto_pad {
    S4D_AUTO_PAD_NOTSET = 0,
    S4D_AUTO_PAD_VALID,
    S4D_AUTO_PAD_SAME_UPPER,
    S4D_AUTO_PAD_SAME_LOWER
} s4d_auto_pad;

/*
 * Reads kernel_shape (checked against kernel_dims from the weight), strides,
 * dilations, pads and auto_pad for nsp spatial dims into g (padded to 3 at
 * the front) and *ap. Sizes must be positive, pads non-negative.
 */
s4d_status s4d_host_conv_attrs(s4d_op_ctx *ctx, int nsp, const int64_t *kernel_dims, s4d_conv_geom *g,
                              s4d_auto_pad *ap);

/*
 * auto_pad SAME_UPPER / SAME_LOWER for spatial slot j of g (img and stride set,
 * ext the dilated window): grid[j] = ceil(img / stride) and the padding that
 * reaches it, the odd pixel after (UPPER) or before (LOWER).
 */
void s4d_host_conv_same_pad(s4d_conv_geom *g, int j, int64_t ext, s4d_auto_pad ap);

/* Product of the three entries; the _ok form returns 0 where it would overflow. */
int64_t s4d_host_conv_prod3(const int64_t *v);
int s4d_host_conv_prod3_ok(const int64_t *v, int64_t *out);

/* The dilated kernel extent dil * (k - 1) + 1 of slot j; 0 where it would overflow. */
int s4d_host_conv_extent(const s4d_conv_geom *g, int j, int64_t *ext);

/*
 * col[(c, k0, k1, k2), (o0, o1, o2)] = img[c, o*stride - pad_b + k*dil] (0 outside),
 * for channels [0, channels) of img (channel stride prod(img)).
 */
void s4d_host_im2col(struct s4d_threadpool *pool, const s4d_conv_geom *g, int64_t channels,
                    const float *img, float *col);
/* The adjoint: img[c, ...] += col[(c, k), o] over every (k, o) that lands inside. */
void s4d_host_col2im(struct s4d_threadpool *pool, const s4d_conv_geom *g, int64_t channels,
                    const float *col, float *img);

#endif
