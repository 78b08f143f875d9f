/* CUDA kernels of the elementwise family: see cuda_backend.h. */
#include "backend/cuda/cuda_backend.h"

const s4d_kernel *const s4d_cuda_kernels_elementwise[] = {NULL};
const size_t s4d_cuda_kernels_elementwise_count = 0;
