/*
 * src/backend/cuda/kernels/dense.h - the small CUDA kernels of the dense op
 * family (the convolutions and products themselves are cuDNN's and
 * cuBLASLt's): the convolution epilogue, asymmetric pre-padding, broadcast
 * fills for GEMM addends, the pools, and the transforms of the Winograd
 * convolution. Plain pointers, explicit 64-bit
 * sizes, the caller's stream; each launcher returns cudaGetLastError() after
 * its launch (cudaSuccess without a launch when there is nothing to do).
 * Every kernel is deterministic (no atomics) and keeps NaN where the host
 * reference does.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_DENSE_H
#define S4D_BACKEND_CUDA_KERNELS_DENSE_H

#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * In place on y [planes, plane] (planes = N * channels, NCHW order):
 *   y = act(y + bias[p % channels] + z)
 * bias (may be NULL) has `channels` entries, z (may be NULL) y's shape; act
 * is ReLU when relu != 0 (NaN stays NaN), else identity.
 */
cudaError_t s4d_cuda_conv_epilogue_f32(float *y, const float *bias, const float *z, int relu,
                                       int64_t planes, int64_t plane, int64_t channels,
                                       cudaStream_t stream);

/*
 * y = bias[p % channels] + z on y [planes, plane], y's old values unread: the
 * addend a 1x1 convolution's product then accumulates onto (beta = 1). At
 * least one of bias and z; z may alias y (then y += bias).
 */
cudaError_t s4d_cuda_conv_prefill_f32(float *y, const float *bias, const float *z, int64_t planes, int64_t plane,
                                      int64_t channels, cudaStream_t stream);

/*
 * The same on float16 y, bias and z (passed as void *: C has no half type):
 * each value converted to float, the epilogue in float, rounded once to
 * float16.
 */
cudaError_t s4d_cuda_conv_epilogue_f16(void *y, const void *bias, const void *z, int relu, int64_t planes,
                                       int64_t plane, int64_t channels, cudaStream_t stream);

/*
 * The same epilogue channels-last: y [rows, channels] (rows = N * H * W), the
 * bias indexed by the column; float32, or float16 (void *) in float with one
 * rounding.
 */
cudaError_t s4d_cuda_conv_epilogue_nhwc_f32(float *y, const float *bias, const float *z, int relu, int64_t rows,
                                            int64_t channels, cudaStream_t stream);
cudaError_t s4d_cuda_conv_epilogue_nhwc_f16(void *y, const void *bias, const void *z, int relu, int64_t rows,
                                            int64_t channels, cudaStream_t stream);

/*
 * Copies x [planes, img0, img1, img2] into xp [planes, pad0, pad1, pad2] at
 * offset (off0, off1, off2), zero elsewhere (pad_i >= img_i + off_i).
 */
cudaError_t s4d_cuda_pad3_f32(const float *x, float *xp, int64_t planes, const int64_t img[3],
                              const int64_t padded[3], const int64_t off[3], cudaStream_t stream);

/* s4d_cuda_pad3_f32 for any 16-bit element (float16, bfloat16): the bits are copied. */
cudaError_t s4d_cuda_pad3_16(const void *x, void *xp, int64_t planes, const int64_t img[3], const int64_t padded[3],
                             const int64_t off[3], cudaStream_t stream);

/* y[r, j] = beta * c[r * rs + j * cs] for r < rows, j < cols (y dense, row major). */
cudaError_t s4d_cuda_fill_bcast_f32(float *y, const float *c, int64_t rows, int64_t cols, int64_t rs,
                                    int64_t cs, float beta, cudaStream_t stream);
cudaError_t s4d_cuda_fill_bcast_f64(double *y, const double *c, int64_t rows, int64_t cols, int64_t rs,
                                    int64_t cs, double beta, cudaStream_t stream);
/* float16 y and c (void *), beta * c computed in float and rounded once. */
cudaError_t s4d_cuda_fill_bcast_f16(void *y, const void *c, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                    float beta, cudaStream_t stream);

/* MaxPool / AveragePool geometry: three spatial dims, leading unused ones of size 1. */
typedef struct s4d_cuda_pool_geom {
    int64_t planes; /* N * C */
    int64_t img[3], grid[3], k[3], stride[3], dil[3], pad_b[3], pad_e[3];
    int is_avg;            /* 0: max, 1: average */
    int count_include_pad; /* average: divide by the taps inside the padded input */
    int storage_order;     /* max indices: 1 = column major over the spatial dims */
} s4d_cuda_pool_geom;

/*
 * y [planes, grid] from x [planes, img]; idx (may be NULL; max only) gets the
 * flat index into x of each maximum, as ONNX MaxPool's Indices output.
 */
cudaError_t s4d_cuda_pool_f32(const float *x, float *y, int64_t *idx, const s4d_cuda_pool_geom *g,
                              cudaStream_t stream);
/* float16 x and y (void *); taps compared and summed in float / double as above, y rounded once. */
cudaError_t s4d_cuda_pool_f16(const void *x, void *y, int64_t *idx, const s4d_cuda_pool_geom *g,
                              cudaStream_t stream);

/*
 * Channels-last 2-D MaxPool: x [n, img1, img2, c] -> y [n, grid1, grid2, c] (the spatial sizes in
 * slots 1 and 2 of g; planes, is_avg and storage_order unused); float16 when half != 0.
 */
cudaError_t s4d_cuda_maxpool_nhwc(const void *x, void *y, int half, int64_t n, int64_t c,
                                  const s4d_cuda_pool_geom *g, cudaStream_t stream);

/*
 * Winograd F(4x4, 3x3) for a float32 NCHW convolution with stride 1 and
 * dilation 1 (kernels/winograd.cu; dense_conv.c runs it as CONV_WINO): X [n,
 * c, h, w] padded by pad_t / pad_l (zeros) into Y [n, m, ho, wo], cut into th
 * x tw tiles of 4 x 4 outputs per image, tiles = n * th * tw.
 *   filter: U [36][m][c] from W [m][c][3][3] (computed in double, rounded);
 *   input:  V [36][c][tiles] from X;
 *   output: Y = A^T M A per tile from M [36][m][tiles] = U V (36 products),
 *           plus bias[m] and z (Y's shape) when given, then ReLU when relu.
 */
typedef struct s4d_cuda_wino_geom {
    int64_t n, c, m, h, w, ho, wo, th, tw, pad_t, pad_l;
} s4d_cuda_wino_geom;
cudaError_t s4d_cuda_wino_filter_f32(const float *w, float *u, int64_t m, int64_t c, cudaStream_t stream);
cudaError_t s4d_cuda_wino_input_f32(const float *x, float *v, const s4d_cuda_wino_geom *g, cudaStream_t stream);
cudaError_t s4d_cuda_wino_output_f32(const float *mm, float *y, const float *bias, const float *z, int relu,
                                     const s4d_cuda_wino_geom *g, cudaStream_t stream);

/* y[p] = max or mean of x[p, 0 .. plane) for p < planes (an empty plane: -inf / 0). */
cudaError_t s4d_cuda_global_pool_f32(const float *x, float *y, int64_t planes, int64_t plane, int is_max,
                                     cudaStream_t stream);
cudaError_t s4d_cuda_global_pool_f16(const void *x, void *y, int64_t planes, int64_t plane, int is_max,
                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_DENSE_H */
