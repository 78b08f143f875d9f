/*
 * src/backend/cuda/kernels/pointwise.h - the CUDA launcher of
 * s4d::FusedPointwise (internal): one kernel runs the whole program (see
 * ops/pointwise.h) for every output element.
 *
 * Returns cudaSuccess without launching for an empty output,
 * cudaErrorInvalidValue for a malformed description (infer() and the glue's
 * supports() keep those away), else cudaGetLastError() after the launch.
 * Nothing here allocates or synchronises.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_POINTWISE_H
#define S4D_BACKEND_CUDA_KERNELS_POINTWISE_H

#include <cuda_runtime.h>

#include "ops/pointwise.h"

/* The host build of the kernels (elementwise_common.cuh) has a name of its own. */
#if defined(S4D_EW_HOST_BUILD)
#define s4d_cu_pointwise s4d_cu_host_pointwise
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* out = the program of p over its geometry; in[k] is input k (p->num_inputs of them). */
cudaError_t s4d_cu_pointwise(const s4d_pointwise_params *p, void *out, const void *const *in,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_POINTWISE_H */
