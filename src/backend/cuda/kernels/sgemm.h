/*
 * src/backend/cuda/kernels/sgemm.h - the project's own strict float32 product
 * (sgemm.cu), a candidate the builder times beside cuBLASLt's for products
 * with row-major A [m, k] and B [k, n], D = A B (+ bias[n]) (ReLU) (+ R), a
 * strided batch of them (A and B element strides sa, sb; 0 shares one), D and
 * the residual R dense.
 * Plain pointers, 64-bit sizes, the caller's stream; returns
 * cudaGetLastError() after the launch (cudaErrorInvalidValue for sizes it
 * cannot take: see s4d_cuda_sgemm_ok). Deterministic, graph-capturable.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_SGEMM_H
#define S4D_BACKEND_CUDA_KERNELS_SGEMM_H

#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the kernel takes these sizes (all positive, the grid within CUDA's limits). */
int s4d_cuda_sgemm_ok(int64_t m, int64_t n, int64_t k, int64_t batch);

/* d = a b (+ bias) (ReLU when relu; NaN stays NaN) (+ res, d's shape); bias and res may be NULL. */
cudaError_t s4d_cuda_sgemm(const float *a, const float *b, const float *bias, const float *res, float *d, int64_t m,
                           int64_t n, int64_t k, int64_t batch, int64_t sa, int64_t sb, int relu,
                           cudaStream_t stream);

/* Columns up to which s4d_cuda_sgemm_ln normalises in the product's epilogue (one block holds whole rows). */
#define S4D_CUDA_SGEMM_LN_MAX_N 64

/*
 * d = LayerNorm(a b (+ bias) (ReLU) (+ res)) over each row of n <= S4D_CUDA_SGEMM_LN_MAX_N
 * values: (v - mean) / sqrt(var + eps) * scale + shift (shift may be NULL),
 * statistics in float over the row held in registers.
 */
cudaError_t s4d_cuda_sgemm_ln(const float *a, const float *b, const float *bias, const float *res, const float *scale,
                              const float *shift, float eps, float *d, int64_t m, int64_t n, int64_t k,
                              int64_t batch, int64_t sa, int64_t sb, int relu, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_SGEMM_H */
