/* CUDA kernels of the reduce family: see cuda_backend.h. */
#include "backend/cuda/cuda_backend.h"

const s4d_kernel *const s4d_cuda_kernels_reduce[] = {NULL};
const size_t s4d_cuda_kernels_reduce_count = 0;
