/*
 * Internals of the CPU convolution library shared by the driver (cpuconv.c)
 * and the per-instruction-set kernel files (kernels_*.c).
 *
 * Packed weights, all algorithms: panels of CC_MR output channels,
 * [panel][k][CC_MR] with k the reduction index, M padded with zero rows to a
 * multiple of CC_MR. The micro-kernel broadcasts one weight per row and
 * multiplies it with a vector of output pixels (or Winograd tiles): every set
 * reads the same packed bytes, only its panel width (nr) differs.
 */
#ifndef S4D_CPU_CONV_CPUCONV_IMPL_H
#define S4D_CPU_CONV_CPUCONV_IMPL_H

#include <stdint.h>

#include "backend/cpu/conv/cpuconv.h"

#define CC_MR 8          /* rows of a weight panel */
#define CC_NR_MAX 48     /* widest pixel panel of any set */
#define CC_VL_MAX 16     /* widest vector of any set */

/* What a micro-kernel does after its reduction, on the final K block only. */
typedef struct cc_epi {
    const float *bias;   /* bias of the tile's first row, or NULL */
    const float *res;    /* residual at the tile's first element, or NULL */
    int64_t ldr;
    int act;             /* s4d_cpuconv_act */
    float lo, hi;
} cc_epi;

/* Where the lanes of one Winograd tile vector sit: tile origin in the output
 * (oy, ox), its input origin iy = oy - pad_top, ix = ox - pad_left. */
typedef struct cc_tiles {
    int n;                      /* valid lanes */
    int32_t oy[CC_VL_MAX], ox[CC_VL_MAX];
} cc_tiles;

/* Geometry of one image plane as the kernels see it. */
typedef struct cc_geom {
    int64_t h, w, ho, wo;
    int64_t kh, kw, sh, sw, pt, pl, dh, dw;
} cc_geom;

/* Epilogue shared by the Winograd output transform and depthwise. */
typedef struct cc_post {
    int act;
    float lo, hi;
} cc_post;

typedef struct cc_ops {
    s4d_cpuconv_isa isa;
    int nr; /* pixel panel width of the micro-kernel */
    int vl; /* lanes of a vector (Winograd tiles per vector) */
    /*
     * C[mr x nc] = (accumulate ? C : 0) + A[kc][CC_MR] x B[kc][ldb]; rows past mr
     * and columns past nc are neither read nor written (B's columns past nc
     * are not read either). With epi, bias, residual and activation follow.
     */
    void (*ukr)(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr, int nc,
                int accumulate, const cc_epi *epi);
    /* dst[j] = row[ix0 + j * sw] where 0 <= ix0 + j * sw < w, else 0; row NULL: zeros. */
    void (*pack_row)(const float *row, int64_t w, int64_t ix0, int64_t sw, int len, float *dst);
    /*
     * Winograd input transform of tile vector t (F(m x m, 3x3), m = 2 or 4) for
     * channels [0, nc) of x (planes plane_stride apart, h x w, input origins
     * at (oy - pt, ox - pl)): element xi of channel c goes to
     * dst[xi * xi_stride + c * c_stride + lane].
     */
    void (*wino_in)(int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w, int64_t pt,
                    int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride);
    /*
     * Winograd output transform of tile vector t for channels [0, nm): element
     * xi of channel j at src[xi * xi_stride + j * m_stride + lane]; writes
     * y[j] (planes ho x wo, plane_stride apart) = act(A^T M A + bias[j] + res[j]).
     */
    void (*wino_out)(int m, const float *src, int64_t xi_stride, int64_t m_stride, int64_t nm, const cc_tiles *t,
                     int64_t ho, int64_t wo, const float *bias, const float *res, float *y, int64_t plane_stride,
                     const cc_post *post);
    /* Depthwise: output rows [oy0, oy1) of one channel. */
    void (*dw_rows)(const cc_geom *g, const float *x, const float *wk, float bias, const float *res, float *y,
                    int64_t oy0, int64_t oy1, const cc_post *post);
} cc_ops;

extern const cc_ops s4d_cc_ops_scalar;
extern const cc_ops s4d_cc_ops_avx2;
extern const cc_ops s4d_cc_ops_avx512;

/* Scalar helpers the vector files share for their rare cases. */
static inline float cc_act1(float v, const cc_post *p)
{
    if (p->act == S4D_CPUCONV_ACT_RELU)
        return v > 0.0f || v != v ? v : 0.0f;
    if (p->act == S4D_CPUCONV_ACT_CLIP) {
        if (v < p->lo)
            v = p->lo;
        if (v > p->hi)
            v = p->hi;
    }
    return v;
}

#endif /* S4D_CPU_CONV_CPUCONV_IMPL_H */
