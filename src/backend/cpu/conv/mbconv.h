/*
 * src/backend/cpu/conv/mbconv.h - the inverted residual block of mobile
 * networks as one pass over the image (internal to libs4d; not installed).
 *
 *   e = act1(conv1x1(x, w1) + b1)          expand, [N][MID][H][W]  (optional)
 *   d = act2(depthwise_kxk(e, w2) + b2)    [N][MID][HO][WO], stride 1 or 2
 *   y = act3(conv1x1(d, w3) + b3 + z)      project, [N][M][HO][WO]
 *
 * MobileNetV2 and V3 (blocks without squeeze-excitation) and the branches of
 * ShuffleNetV2 are chains of this form. Run as three convolutions, the
 * expanded tensors (e, d: up to 96 x 112 x 112 floats, 4.8 MB, in
 * MobileNetV2) go to memory and back, and the depthwise layer transposes them
 * to channels-in-vectors and back. Here they never leave the cache: output
 * rows are produced in order; the expanded rows a depthwise row needs are
 * computed into a ring of k rows kept channels-in-vectors ([row][MID/16][W
 * padded][16]), the depthwise row is computed from the ring into a
 * pixel-major row buffer, and the projection reads that buffer as its
 * reduction (pixels as rows, vectors over 48 output channels), transposing
 * only its M-channel result into the NCHW output.
 *
 * Every output element is computed with the same operations in the same
 * order as the three layers of the library run one after the other (1x1
 * reductions from zero in channel order, then bias, residual, activation;
 * depthwise taps in (ky, kx) order from zero, then bias, activation), so the
 * block gives the same bits as the unfused layers on the same instruction
 * set. The fused pass is AVX-512 only; on other CPUs (or shapes it does not
 * cover) the plan runs the three layers through s4d_cpuconv_* with the
 * intermediates in the workspace, and says so in s4d_mbconv_plan_info.
 */
#ifndef S4D_CPU_CONV_MBCONV_H
#define S4D_CPU_CONV_MBCONV_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/conv/cpuconv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's epilogue activation, as in s4d_cpuconv_params. */
typedef struct s4d_mbconv_act {
    s4d_cpuconv_act act;
    float act_min, act_max;     /* CLIP */
    float act_alpha, act_beta;  /* LEAKY_RELU (alpha), HARD_SIGMOID */
} s4d_mbconv_act;

/* Plain data; set struct_size = sizeof(s4d_mbconv_params); zero, then fill. */
typedef struct s4d_mbconv_params {
    uint32_t struct_size;
    int64_t n, c, h, w;   /* block input x, NCHW */
    int has_expand;       /* 0: no expand layer, e = x and mid == c */
    int64_t mid;          /* expanded channels */
    int64_t m;            /* output channels */
    int64_t k;            /* depthwise kernel k x k, 1 <= k <= 7 */
    int64_t stride;       /* depthwise stride (both ways), 1 or 2 */
    int64_t pad_top, pad_left, pad_bottom, pad_right; /* depthwise padding, each < k */
    int has_b1, has_b2, has_b3; /* biases present (absent: nothing is added) */
    int has_residual;     /* z with y's shape, added after b3 */
    s4d_mbconv_act act1, act2, act3;
    s4d_cpuconv_isa isa;  /* AUTO or forced */
    int num_threads;      /* slots of the parallel-for; 0 means 1 */
} s4d_mbconv_params;

typedef struct s4d_mbconv_plan s4d_mbconv_plan;

typedef struct s4d_mbconv_info {
    int fused;               /* 1: one pass (AVX-512); 0: three library convolutions */
    s4d_cpuconv_isa isa;
    int64_t ho, wo;
    size_t workspace_bytes;  /* for s4d_mbconv_run */
    size_t packed_bytes;     /* for s4d_mbconv_pack_weights */
    double macs;             /* multiply-adds of the three layers */
} s4d_mbconv_info;

/* Checks params and plans. Errors as s4d_cpuconv_plan_create (S4D_ERR_INVALID_ARG,
 * S4D_ERR_SHAPE, S4D_ERR_UNSUPPORTED, S4D_ERR_NO_MEMORY), err->msg naming the field. */
s4d_status s4d_mbconv_plan_create(const s4d_mbconv_params *params, s4d_mbconv_plan **out,
                                  s4d_errbuf *err);
void s4d_mbconv_plan_destroy(s4d_mbconv_plan *plan);
void s4d_mbconv_plan_info(const s4d_mbconv_plan *plan, s4d_mbconv_info *info);
/* One line for logs and --dumpLayerInfo (snprintf rules). */
int s4d_mbconv_plan_describe(const s4d_mbconv_plan *plan, char *buf, size_t size);

/*
 * Packs w1 ([MID][C], NULL without expand), w2 ([MID][1][K][K]) and w3
 * ([M][MID]) into packed (info.packed_bytes, any alignment). The bytes
 * depend on the plan (fused or not), so pack with the plan that runs them.
 */
s4d_status s4d_mbconv_pack_weights(const s4d_mbconv_plan *plan, const float *w1, const float *w2,
                                   const float *w3, void *packed, size_t packed_bytes,
                                   s4d_errbuf *err);

/*
 * y = the block of x. b1, b2, b3, z: NULL where absent in the params. y must
 * not overlap x, z or the workspace. parallel_for NULL runs on the calling
 * thread. Allocates nothing. S4D_OK or S4D_ERR_INVALID_ARG.
 */
s4d_status s4d_mbconv_run(const s4d_mbconv_plan *plan, const void *packed, const float *x,
                          const float *b1, const float *b2, const float *b3, const float *z, float *y,
                          void *workspace, size_t workspace_bytes,
                          s4d_cpuconv_parallel_for parallel_for, void *pool, s4d_errbuf *err);

#ifdef __cplusplus
}
#endif

#endif /* S4D_CPU_CONV_MBCONV_H */
