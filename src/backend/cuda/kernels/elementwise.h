/*
 * src/backend/cuda/kernels/elementwise.h - CUDA launchers of the element-wise
 * ops (internal): binary ops with broadcasting, the Mean division, Where,
 * Cast, unary ops, Not, IsNaN/IsInf.
 *
 * Plain device pointers, element types as s4d_dtype values, op codes from
 * ops/elementwise.h, explicit 64-bit sizes and a stream. Each launcher
 * returns cudaSuccess without launching when there is nothing to do (a
 * zero-size tensor), cudaErrorInvalidValue for a combination it does not
 * have (the glue's supports() keeps those away), else cudaGetLastError()
 * after its launches. Nothing here allocates or synchronises.
 *
 * Math follows the host reference (src/ops/): float16 computes in float32 and
 * rounds to nearest even; integer arithmetic wraps; integer division and
 * modulo by zero give 0; float-to-integer conversions saturate and map NaN to
 * 0; NaN propagates through Min/Max, Relu, Clip and Sign. Transcendental
 * functions are CUDA's (a few ulp from the host's libm).
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_H
#define S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_H

#include <cuda_runtime.h>
#include <stdint.h>

/* The host build of these kernels (elementwise_common.cuh) has names of its own. */
#if defined(S4D_EW_HOST_BUILD)
#define s4d_cu_binary s4d_cu_host_binary
#define s4d_cu_mean_divide s4d_cu_host_mean_divide
#define s4d_cu_where s4d_cu_host_where
#define s4d_cu_cast s4d_cu_host_cast
#define s4d_cu_unary s4d_cu_host_unary
#define s4d_cu_is_class s4d_cu_host_is_class
#define s4d_cu_copy s4d_cu_host_copy
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define S4D_CU_EW_MAX_RANK 8

/*
 * An output shape and the element strides of up to three inputs in it (0
 * along broadcast dims), as s4d_bcast_init (ops/broadcast.h) collapses them:
 * rank >= 1, dims >= 1 except that a zero dim means an empty output.
 */
typedef struct s4d_cu_bcast {
    int rank;
    int num_inputs;
    int64_t dims[S4D_CU_EW_MAX_RANK];
    int64_t strides[3][S4D_CU_EW_MAX_RANK];
} s4d_cu_bcast;

/*
 * out = op(a, b) for s4d_binop op over the geometry g (2 inputs). a and b have
 * dtype_a / dtype_b (equal except for Pow), out has dtype_out (bool for the
 * comparisons and logic ops). out may be a itself when a is not broadcast
 * (the variadic ops fold in place).
 */
cudaError_t s4d_cu_binary(int op, int dtype_a, int dtype_b, int dtype_out, void *out,
                          const void *a, const void *b, const s4d_cu_bcast *g,
                          cudaStream_t stream);

/* Mean's last step: data[i] /= count in the host's precision (float32 for
   float16), for n elements of a float dtype. */
cudaError_t s4d_cu_mean_divide(int dtype, void *data, int64_t n, int64_t count,
                               cudaStream_t stream);

/* out = cond ? x : y over g (3 inputs: cond (bool), x, y), elements of
   elem_size bytes (1, 2, 4 or 8). */
cudaError_t s4d_cu_where(size_t elem_size, void *out, const void *cond, const void *x,
                         const void *y, const s4d_cu_bcast *g, cudaStream_t stream);

/* bytes from src to dst, both device memory, on stream. */
cudaError_t s4d_cu_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* n elements from dtype_from to dtype_to, as the host's Cast. */
cudaError_t s4d_cu_cast(int dtype_from, int dtype_to, void *out, const void *in, int64_t n,
                        cudaStream_t stream);

/*
 * A unary op's parameters (see s4d_unary_params). Clip's bounds: the float
 * bounds in alpha (min) and beta (max), the integer ones in min_i and max_i,
 * unless min_ptr / max_ptr point at a device scalar of the input's dtype to
 * read instead (a bound that was not a constant).
 */
typedef struct s4d_cu_unary_args {
    double alpha, beta, gamma;
    int64_t min_i, max_i;
    const void *min_ptr, *max_ptr;
} s4d_cu_unary_args;

/* out = op(in) for s4d_unop op on n elements of dtype (Not: bool). */
cudaError_t s4d_cu_unary(int op, int dtype, void *out, const void *in, int64_t n,
                         const s4d_cu_unary_args *args, cudaStream_t stream);

/* IsNaN (inf == 0) or IsInf with its detect flags: n floats of dtype to bools. */
cudaError_t s4d_cu_is_class(int inf, int detect_negative, int detect_positive, int dtype,
                            void *out, const void *in, int64_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_H */
