/*
 * Device helpers shared by the reduction family's kernels (reduce.cu,
 * reduce_norm.cu, reduce_topk.cu): element conversion, 16-byte loads, and
 * the fixed-order warp and block reductions that keep every result
 * deterministic.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_REDUCE_COMMON_CUH
#define S4D_BACKEND_CUDA_KERNELS_REDUCE_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/kernels/launch.cuh"

namespace s4d_red {

constexpr int kThreads = 256; /* every kernel of the family runs blocks of this size */

/*
 * Blocks a launch should reach before a reduction is split into partial
 * results. A constant, not the device's multiprocessor count, so that the
 * order of the additions (and so every bit of the result) is the same on
 * every GPU.
 */
constexpr int64_t kTargetBlocks = 256;

/* Element type -> accumulator type and conversions. */
template <typename T> struct Elem;
template <> struct Elem<float> {
    using A = float;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float a) { return a; }
};
template <> struct Elem<__half> {
    using A = float;
    static __device__ __forceinline__ float load(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half store(float a) { return __float2half_rn(a); }
};
template <> struct Elem<__nv_bfloat16> {
    using A = float;
    static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};
template <> struct Elem<double> {
    using A = double;
    static __device__ __forceinline__ double load(double v) { return v; }
    static __device__ __forceinline__ double store(double a) { return a; }
};
template <> struct Elem<int32_t> {
    using A = int64_t;
    static __device__ __forceinline__ int64_t load(int32_t v) { return v; }
    static __device__ __forceinline__ int32_t store(int64_t a) { return (int32_t)a; }
};
template <> struct Elem<int64_t> {
    using A = int64_t;
    static __device__ __forceinline__ int64_t load(int64_t v) { return v; }
    static __device__ __forceinline__ int64_t store(int64_t a) { return a; }
};

/* Elements per 16-byte vector of T. */
template <typename T> __host__ __device__ constexpr int vec_of() { return (int)(16 / sizeof(T)); }

__device__ __forceinline__ bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* Loads 16 bytes (the caller checked alignment) as vec_of<T>() elements. */
template <typename T>
__device__ __forceinline__ void load16(const T *p, T (&out)[vec_of<T>()])
{
    uint4 raw = __ldg(reinterpret_cast<const uint4 *>(p));
    memcpy(out, &raw, 16);
}

/* N elements of T in one 16- or 8-byte access; p aligned to N * sizeof(T). */
template <typename T, int N>
__device__ __forceinline__ void load_vec(const T *p, T (&out)[N])
{
    static_assert(N * sizeof(T) == 16 || N * sizeof(T) == 8, "16- or 8-byte vectors");
    if constexpr (N * sizeof(T) == 16) {
        uint4 raw = __ldg(reinterpret_cast<const uint4 *>(p));
        memcpy(out, &raw, 16);
    } else {
        uint2 raw = __ldg(reinterpret_cast<const uint2 *>(p));
        memcpy(out, &raw, 8);
    }
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T *p, const T (&in)[N])
{
    static_assert(N * sizeof(T) == 16 || N * sizeof(T) == 8, "16- or 8-byte vectors");
    if constexpr (N * sizeof(T) == 16) {
        uint4 raw;
        memcpy(&raw, in, 16);
        *reinterpret_cast<uint4 *>(p) = raw;
    } else {
        uint2 raw;
        memcpy(&raw, in, 8);
        *reinterpret_cast<uint2 *>(p) = raw;
    }
}

__device__ __forceinline__ bool aligned_to(const void *p, size_t bytes)
{
    return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* NaN-propagating maximum / minimum: once a NaN is seen it stays. */
template <typename A> __device__ __forceinline__ A max_nan(A a, A b)
{
    return (b > a || b != b) ? b : a;
}
template <typename A> __device__ __forceinline__ A min_nan(A a, A b)
{
    return (b < a || b != b) ? b : a;
}

template <typename A> __device__ __forceinline__ A neg_inf()
{
    return -(A)INFINITY;
}

__device__ __forceinline__ float exp_a(float v) { return expf(v); }
__device__ __forceinline__ double exp_a(double v) { return exp(v); }
__device__ __forceinline__ float log_a(float v) { return logf(v); }
__device__ __forceinline__ double log_a(double v) { return log(v); }
__device__ __forceinline__ float sqrt_a(float v) { return sqrtf(v); }
__device__ __forceinline__ double sqrt_a(double v) { return sqrt(v); }

template <typename V> __device__ __forceinline__ V shfl_xor(V v, int mask, int width)
{
    return __shfl_xor_sync(0xffffffffu, v, mask, width);
}

/*
 * Butterfly reduction inside aligned groups of `width` lanes (a power of two
 * <= 32). Every lane of the warp must call it. Every lane of a group ends with
 * the group's result, combined in an order fixed by the lane numbers; for a
 * commutative combination (addition, multiplication) all lanes hold the same
 * bits.
 */
template <typename V, typename C>
__device__ __forceinline__ V group_reduce(V v, int width, C comb)
{
    for (int m = width >> 1; m > 0; m >>= 1)
        v = comb(v, shfl_xor(v, m, width));
    return v;
}

/*
 * Reduction over the whole block (blockDim.x a multiple of 32): each warp
 * reduces, then warp 0 reduces the warps' results in warp order. Every
 * thread gets the result. sm: 33 values of shared scratch, free on entry.
 */
template <typename V, typename C>
__device__ __forceinline__ V block_reduce(V v, V ident, C comb, V *sm)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = group_reduce(v, 32, comb);
    if (lane == 0)
        sm[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sm[lane] : ident;
        v = group_reduce(v, 32, comb);
        if (lane == 0)
            sm[32] = v;
    }
    __syncthreads();
    v = sm[32];
    __syncthreads(); /* sm may be reused right after */
    return v;
}

/* Smallest power of two >= v (v >= 1), as int. */
static inline int pow2_at_least(int64_t v)
{
    int p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

static inline int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

} /* namespace s4d_red */

#endif /* S4D_BACKEND_CUDA_KERNELS_REDUCE_COMMON_CUH */
