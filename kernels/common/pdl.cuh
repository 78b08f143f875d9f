/*
 * Programmatic dependent launch for the project's own CUDA kernels (the op
 * library's and the engine backend's), where the GPU has it (compute
 * capability 9.0 and newer).
 *
 * A network is many kernels in a row; each waits for the one before it to
 * finish, then for its own launch, and the GPU is idle in between.
 * s4d_launch() lets a kernel's blocks be launched while the kernel before it
 * on the stream still runs: every kernel begins with S4D_KERNEL_BEGIN(),
 * which waits until the grids it depends on have completed and their writes
 * are visible (griddepcontrol.wait) before the kernel touches memory, reads
 * or writes, and then allows the kernel after it to be launched
 * (griddepcontrol.launch_dependents). A kernel launched after another
 * library's kernel (cuBLASLt, cuDNN, CUB, PyTorch's) or after a copy or a
 * memset waits for it as any stream order does. CUDA graph capture keeps
 * these edges. S4D_PDL=0 in the environment launches without the attribute
 * (to compare).
 *
 * A kernel whose first reads are of an engine's constants (weights, written
 * when the engine loads and never during a run) may begin with
 * S4D_KERNEL_BEGIN_CONSTANTS_FIRST() instead: it allows the next kernel's
 * launch at once and may read constants while the kernel before it still
 * runs, but it must reach S4D_KERNEL_WAIT() before it reads or writes any
 * other memory. tests/cuda/check_kernel_begin.py checks every kernel source
 * for both rules and for launches that bypass s4d_launch().
 */
#ifndef S4D_KERNELS_COMMON_PDL_CUH
#define S4D_KERNELS_COMMON_PDL_CUH

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define S4D_KERNEL_BEGIN()                                                                         \
    asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#define S4D_KERNEL_BEGIN_CONSTANTS_FIRST() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define S4D_KERNEL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define S4D_KERNEL_BEGIN() ((void)0)
#define S4D_KERNEL_BEGIN_CONSTANTS_FIRST() ((void)0)
#define S4D_KERNEL_WAIT() ((void)0)
#endif

#if !defined(S4D_EW_HOST_BUILD)

/* Whether launches on the current device may overlap the kernel before them. */
static inline bool s4d_pdl_allowed()
{
    static const bool env_on = [] {
        const char *e = getenv("S4D_PDL");
        return !(e && strcmp(e, "0") == 0);
    }();
    if (!env_on)
        return false;
    /* Per device: 0 unknown, 1 yes, 2 no (a benign race: every writer stores the same). */
    static volatile signed char cached[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return false;
    if (!cached[dev]) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            return false;
        cached[dev] = major >= 9 ? 1 : 2;
    }
    return cached[dev] == 1;
}

/* kernel<<<grid, block, smem, stream>>>(args...), with programmatic dependent launch. */
template <class... P, class... A>
static inline cudaError_t s4d_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t stream, A... args)
{
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = s4d_pdl_allowed() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

#endif

#endif
