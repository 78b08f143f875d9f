/* CUDA kernels of the movement family: see cuda_backend.h. */
#include "backend/cuda/cuda_backend.h"

const s4d_kernel *const s4d_cuda_kernels_movement[] = {NULL};
const size_t s4d_cuda_kernels_movement_count = 0;
