/*
 * Helpers shared by the dense CPU ops (matrix products, convolution, pooling,
 * normalisation, resampling): the OpenBLAS entry points and small shape tools.
 *
 * Threading policy. OpenBLAS runs on one thread (its own threads would make
 * the bits of a product depend on their number, and they spin after each
 * call); the engine's pool does the rest:
 *   - a product of a few million multiply-adds or more is cut into panels of
 *     rows (or columns) whose bounds depend on its shape alone, one OpenBLAS
 *     call each, run on the pool: the same bits on any thread count;
 *   - smaller products are one call; a batch of them is spread over the
 *     pool, one product per task (s4d_host_gemm_is_small);
 *   - everything else (im2col, pooling, normalisation) runs on the pool.
 * A call made from inside a pool task runs its panels inline, in the same
 * bounds.
 */
#ifndef S4D_HOST_OPS_DENSE_UTIL_H
#define S4D_HOST_OPS_DENSE_UTIL_H

#include <stdint.h>

#include "ops/op.h"

/* Row-major C[m,n] = alpha * op(A) op(B) + beta * C, op = transpose when trans_* != 0; large
   products in panels on pool (NULL: the calling thread). */
void s4d_host_sgemm(struct s4d_threadpool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                    int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc);
void s4d_host_dgemm(struct s4d_threadpool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                    int64_t k, double alpha, const double *a, int64_t lda, const double *b,
                    int64_t ldb, double beta, double *c, int64_t ldc);

/* Nonzero when an m x n x k product is one OpenBLAS call (no panels). */
int s4d_host_gemm_is_small(int64_t m, int64_t n, int64_t k);

/* Largest size OpenBLAS's 32-bit interface takes for m, n, k and leading dimensions. */
#define S4D_HOST_BLAS_MAX_DIM 2147483647LL

/* Row-major y = alpha * op(A) x + beta * y for an m x n matrix A (op = transpose when trans != 0). */
void s4d_host_sgemv(int trans, int64_t m, int64_t n, float alpha, const float *a, int64_t lda, const float *x,
                    float beta, float *y);

/* Nonzero when optional input i is present (not an empty name in the node). */
int s4d_host_has_input(const s4d_op_ctx *ctx, int i);

/* Whether t holds n values of dtype dt as [n] or [1, .., 1, n], of rank at most r (a bias, a
   LayerNormalization's Scale or B over the last axis). */
int s4d_host_is_row_vector(const s4d_tensor *t, int64_t n, int r, s4d_dtype dt);

/* dst [n, c, plane] from src [n, plane, c] (channels_last 0), or the other way (1). */
void s4d_host_swap_channels(const float *src, float *dst, int64_t n, int64_t plane, int64_t c, int channels_last);

/*
 * Multidirectional (numpy) broadcast of shapes a and b into out; returns
 * S4D_ERR_SHAPE through the op error when they do not broadcast.
 */
s4d_status s4d_host_broadcast_shape(s4d_op_ctx *ctx, int ra, const int64_t *a, int rb,
                                   const int64_t *b, int *rout, int64_t *out);

/*
 * Element strides of a tensor of rank r and dims d viewed at rank rout
 * (right-aligned); broadcast dimensions (size 1 against a larger output)
 * get stride 0.
 */
void s4d_host_broadcast_strides(int r, const int64_t *d, int rout, const int64_t *out_dims,
                               int64_t *strides);

/* Reads a constant int64/int32 1-D input into vals (at most cap); returns count or -1. */
int64_t s4d_host_const_ints(const s4d_tensor *t, int64_t *vals, int64_t cap);
/* Same for float/double constants. */
int64_t s4d_host_const_floats(const s4d_tensor *t, float *vals, int64_t cap);

/*
 * nbatch products C_i[m,n] = op(A_i) op(B_i), A_i = a + i * stride_a (in
 * elements), likewise B_i, C_i = c + i * stride_c with ldc = n. Small
 * products go to the pool one per task; large ones run one after another,
 * each in panels on the pool (see the policy above).
 */
void s4d_host_sgemm_batched(struct s4d_threadpool *pool, int64_t nbatch, int trans_a, int trans_b, int64_t m,
                           int64_t n, int64_t k, const float *a, int64_t stride_a, int64_t lda, const float *b,
                           int64_t stride_b, int64_t ldb, float *c, int64_t stride_c);
#endif
