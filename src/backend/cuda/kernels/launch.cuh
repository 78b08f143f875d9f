/*
 * How the backend's own kernels are launched (internal to the kernel sources):
 * with programmatic dependent launch, as the op library's kernels are
 * (kernels/common/pdl.cuh says how). A head of the Sparse4D family is hundreds
 * of small kernels in a row, so the launch of each is hidden behind the kernel
 * before it.
 *
 * Every __global__ function of the backend must begin with S4D_KERNEL_BEGIN()
 * or S4D_KERNEL_BEGIN_CONSTANTS_FIRST() (tests/cuda/check_kernel_begin.py
 * checks it).
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_LAUNCH_CUH
#define S4D_BACKEND_CUDA_KERNELS_LAUNCH_CUH

#include "common/pdl.cuh"

#endif
