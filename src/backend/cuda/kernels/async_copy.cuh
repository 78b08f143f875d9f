/*
 * Asynchronous copies from global to shared memory (cp.async, compute
 * capability 8.0 and newer) for the backend's kernels (internal to the kernel
 * sources). A thread issues copies, commits them as a group, and later waits
 * until at most N of its groups are still in flight; a __syncthreads() after
 * the wait makes every thread's copies visible to the block.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_ASYNC_COPY_CUH
#define S4D_BACKEND_CUDA_KERNELS_ASYNC_COPY_CUH

#include <cuda_runtime.h>
#include <stdint.h>

namespace s4d_async {

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Copies of 16, 8 or 4 bytes; the bytes past `bytes` are zero-filled. 16 bytes may bypass L1,
   8 and 4 go through it. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async8(void *dst, const void *src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/* Waits until at most N of this thread's groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} // namespace s4d_async

#endif /* S4D_BACKEND_CUDA_KERNELS_ASYNC_COPY_CUH */
