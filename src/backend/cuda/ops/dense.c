/* CUDA kernels of the dense family: see cuda_backend.h. */
#include "backend/cuda/cuda_backend.h"

const s4d_kernel *const s4d_cuda_kernels_dense[] = {NULL};
const size_t s4d_cuda_kernels_dense_count = 0;
