/*
 * TopK on CUDA (see reduce.h): a bitonic sort of (key, index) pairs.
 *
 * Each value becomes a 64-bit key whose unsigned order is the wanted order
 * (largest first, or smallest first), with NaN above every number and -0
 * equal to +0 as the host reference compares them. Pairs sort by key, then by
 * index, so ties keep the lower index first and the result is one fixed
 * permutation: the same bits on every run, and the host reference's answer.
 *
 * Slices of up to 4096 values (padded to a power of two with sentinels that
 * sort last) are sorted by one block in 48 KB of shared memory. Longer slices
 * go through the workspace: 2048-pair segments sorted in shared memory, then
 * the remaining bitonic merge stages, the wide ones as one global pass per
 * step and the last eleven steps of each stage in shared memory again.
 */
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/reduce_common.cuh"

using namespace s4d_red;

namespace {

constexpr int kSmallMax = 4096;  /* longest padded slice sorted in one block's shared memory */
constexpr int kSeg = 2048;       /* pairs per block in the multi-pass sort */
constexpr uint64_t kSentinelKey = ~(uint64_t)0;
constexpr uint32_t kSentinelIdx = ~(uint32_t)0;

/* Unsigned keys whose ascending order is the output order. */
__device__ __forceinline__ uint64_t key_of(float v, bool largest)
{
    uint32_t u = __float_as_uint(v);
    if (v != v)
        u = 0x7fc00000u; /* every NaN the same, above +inf */
    else if (v == 0.0f)
        u = 0; /* -0 ties with +0 */
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return largest ? (uint64_t)(uint32_t)~ord : (uint64_t)ord;
}

__device__ __forceinline__ uint64_t key_of(double v, bool largest)
{
    uint64_t u = (uint64_t)__double_as_longlong(v);
    if (v != v)
        u = 0x7ff8000000000000ull;
    else if (v == 0.0)
        u = 0;
    uint64_t ord = (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
    return largest ? ~ord : ord;
}

__device__ __forceinline__ uint64_t key_of(int32_t v, bool largest)
{
    uint32_t ord = (uint32_t)v ^ 0x80000000u;
    return largest ? (uint64_t)(uint32_t)~ord : (uint64_t)ord;
}

/* float16 widens exactly to float: the same order, NaN and -0 handled there. */
__device__ __forceinline__ uint64_t key_of(__half v, bool largest)
{
    return key_of(__half2float(v), largest);
}

/* int64 orders as double, like the host reference: beyond 2^53 close values tie. */
__device__ __forceinline__ uint64_t key_of(int64_t v, bool largest)
{
    return key_of((double)v, largest);
}

__device__ __forceinline__ void compare_swap(uint64_t *key, uint32_t *idx, int a, int b, bool up)
{
    uint64_t ka = key[a], kb = key[b];
    uint32_t ia = idx[a], ib = idx[b];
    bool greater = ka > kb || (ka == kb && ia > ib);
    if (greater == up) {
        key[a] = kb;
        key[b] = ka;
        idx[a] = ib;
        idx[b] = ia;
    }
}

/* Index of the t-th pair of a step of distance j: bit log2(j) cleared and inserted. */
__device__ __forceinline__ int64_t pair_low(int64_t t, int64_t j)
{
    return ((t & ~(j - 1)) << 1) | (t & (j - 1));
}

/*
 * Bitonic stages kk = k_first .. k_last (powers of two) on n pairs in shared
 * memory; for kk above the block's n only the steps j < n run. pos0: index of
 * element 0 within its slice (which sets each pair's direction); npad: the
 * slice's padded length.
 */
__device__ void bitonic_shared(uint64_t *key, uint32_t *idx, int n, int64_t pos0, int64_t npad, int64_t k_first,
                               int64_t k_last)
{
    for (int64_t kk = k_first; kk <= k_last; kk <<= 1) {
        for (int64_t j = (kk >> 1) < n ? (kk >> 1) : (n >> 1); j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
                const int a = (int)pair_low(t, j);
                const bool up = (((pos0 + a) & (npad - 1)) & kk) == 0;
                compare_swap(key, idx, a, a + (int)j, up);
            }
            __syncthreads();
        }
    }
}

/* One block per slice of n <= kSmallMax values (npad = next power of two). */
template <typename T>
__global__ void __launch_bounds__(1024)
topk_small(const T *__restrict__ x, T *__restrict__ vals, int64_t *__restrict__ inds, int64_t n, int64_t inner,
           int64_t k, int npad, int largest)
{
    S4D_KERNEL_BEGIN();
    extern __shared__ uint64_t smem[];
    uint64_t *key = smem;
    uint32_t *idx = reinterpret_cast<uint32_t *>(smem + npad);
    const int64_t slice = blockIdx.x, o = slice / inner, i = slice - o * inner;
    const T *px = x + o * n * inner + i;
    for (int t = threadIdx.x; t < npad; t += blockDim.x) {
        key[t] = t < n ? key_of(__ldg(px + t * inner), largest != 0) : kSentinelKey;
        idx[t] = t < n ? (uint32_t)t : kSentinelIdx;
    }
    __syncthreads();
    bitonic_shared(key, idx, npad, 0, npad, 2, npad);
    const int64_t ob = o * k * inner + i;
    for (int64_t t = threadIdx.x; t < k; t += blockDim.x) {
        const int64_t j = idx[t];
        vals[ob + t * inner] = px[j * inner];
        inds[ob + t * inner] = j;
    }
}

/* Multi-pass: every slice padded to npad pairs in the workspace. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
topk_init(const T *__restrict__ x, uint64_t *__restrict__ key, uint32_t *__restrict__ idx, int64_t n,
          int64_t inner, int64_t npad, int64_t total, int largest)
{
    S4D_KERNEL_BEGIN();
    const int64_t g = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (g >= total)
        return;
    const int64_t slice = g / npad, t = g - slice * npad;
    const int64_t o = slice / inner, i = slice - o * inner;
    key[g] = t < n ? key_of(__ldg(x + o * n * inner + i + t * inner), largest != 0) : kSentinelKey;
    idx[g] = t < n ? (uint32_t)t : kSentinelIdx;
}

/* Segments of kSeg pairs through shared memory: stages k_first..k_last, steps j < kSeg. */
__global__ void __launch_bounds__(1024)
topk_segments(uint64_t *__restrict__ key, uint32_t *__restrict__ idx, int64_t npad, int64_t k_first, int64_t k_last)
{
    S4D_KERNEL_BEGIN();
    __shared__ uint64_t sk[kSeg];
    __shared__ uint32_t si[kSeg];
    const int64_t g0 = (int64_t)blockIdx.x * kSeg;
    for (int t = threadIdx.x; t < kSeg; t += blockDim.x) {
        sk[t] = key[g0 + t];
        si[t] = idx[g0 + t];
    }
    __syncthreads();
    bitonic_shared(sk, si, kSeg, g0 & (npad - 1), npad, k_first, k_last);
    for (int t = threadIdx.x; t < kSeg; t += blockDim.x) {
        key[g0 + t] = sk[t];
        idx[g0 + t] = si[t];
    }
}

/* One step (distance j >= kSeg) of stage kk over all slices: a thread per pair. */
__global__ void __launch_bounds__(kThreads)
topk_step(uint64_t *__restrict__ key, uint32_t *__restrict__ idx, int64_t npad, int64_t kk, int64_t j, int64_t pairs)
{
    S4D_KERNEL_BEGIN();
    const int64_t t = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (t >= pairs)
        return;
    const int64_t a = pair_low(t, j);
    const bool up = ((a & (npad - 1)) & kk) == 0;
    uint64_t ka = key[a], kb = key[a + j];
    uint32_t ia = idx[a], ib = idx[a + j];
    bool greater = ka > kb || (ka == kb && ia > ib);
    if (greater == up) {
        key[a] = kb;
        key[a + j] = ka;
        idx[a] = ib;
        idx[a + j] = ia;
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
topk_gather(const T *__restrict__ x, const uint32_t *__restrict__ idx, T *__restrict__ vals,
            int64_t *__restrict__ inds, int64_t n, int64_t inner, int64_t npad, int64_t k, int64_t total)
{
    S4D_KERNEL_BEGIN();
    const int64_t g = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (g >= total)
        return;
    const int64_t slice = g / k, t = g - slice * k;
    const int64_t o = slice / inner, i = slice - o * inner;
    const int64_t j = idx[slice * npad + t];
    vals[o * k * inner + i + t * inner] = x[o * n * inner + i + j * inner];
    inds[o * k * inner + i + t * inner] = j;
}

int64_t padded(int64_t n)
{
    int64_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

template <typename T>
cudaError_t topk_typed(int largest, int64_t outer, int64_t n, int64_t inner, int64_t k, const void *xv,
                       void *valv, int64_t *inds, void *ws, cudaStream_t s)
{
    const T *x = static_cast<const T *>(xv);
    T *vals = static_cast<T *>(valv);
    const int64_t slices = outer * inner, npad = padded(n);
    if (npad <= kSmallMax) {
        if (slices > INT32_MAX)
            return cudaErrorInvalidValue;
        const int threads = npad / 2 < 32 ? 32 : npad / 2 > 1024 ? 1024 : (int)(npad / 2);
        const size_t smem = (size_t)npad * (sizeof(uint64_t) + sizeof(uint32_t));
        s4d_launch(topk_small<T>, (unsigned)slices, threads, smem, s, x, vals, inds, n, inner, k, (int)npad, largest);
        return cudaGetLastError();
    }
    const int64_t total = slices * npad;
    uint64_t *key = static_cast<uint64_t *>(ws);
    uint32_t *idx = reinterpret_cast<uint32_t *>(static_cast<char *>(ws) +
                                                 (((size_t)total * sizeof(uint64_t) + 255) & ~(size_t)255));
    if (ceil_div(total, kThreads) > INT32_MAX)
        return cudaErrorInvalidValue;
    s4d_launch(topk_init<T>, (unsigned)ceil_div(total, kThreads), kThreads, 0, s,
               x, key, idx, n, inner, npad, total, largest);
    const unsigned segs = (unsigned)(total / kSeg);
    s4d_launch(topk_segments, segs, 1024, 0, s, key, idx, npad, 2, kSeg);
    for (int64_t kk = 2 * (int64_t)kSeg; kk <= npad; kk <<= 1) {
        for (int64_t j = kk >> 1; j >= kSeg; j >>= 1)
            s4d_launch(topk_step, (unsigned)ceil_div(total / 2, kThreads), kThreads, 0, s,
                       key, idx, npad, kk, j, total / 2);
        s4d_launch(topk_segments, segs, 1024, 0, s, key, idx, npad, kk, kk);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || k == 0)
        return e;
    const int64_t outs = slices * k;
    s4d_launch(topk_gather<T>, (unsigned)ceil_div(outs, kThreads), kThreads, 0, s,
               x, idx, vals, inds, n, inner, npad, k, outs);
    return cudaGetLastError();
}

} /* namespace */

extern "C" int s4d_cuda_topk_dtype_ok(s4d_dtype dt)
{
    return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16 || dt == S4D_DTYPE_FLOAT64 || dt == S4D_DTYPE_INT32 ||
           dt == S4D_DTYPE_INT64;
}

extern "C" size_t s4d_cuda_topk_workspace(int64_t outer, int64_t n, int64_t inner)
{
    const int64_t npad = padded(n);
    if (npad <= kSmallMax)
        return 0;
    const size_t total = (size_t)(outer * inner * npad);
    return ((total * sizeof(uint64_t) + 255) & ~(size_t)255) + total * sizeof(uint32_t);
}

extern "C" cudaError_t s4d_cuda_topk(s4d_dtype dt, int largest, int64_t outer, int64_t n, int64_t inner,
                                     int64_t k, const void *x, void *values, int64_t *indices, void *ws,
                                     size_t ws_size, cudaStream_t stream)
{
    if (outer <= 0 || inner <= 0 || k <= 0)
        return cudaSuccess;
    if (n > INT32_MAX || k > n || ws_size < s4d_cuda_topk_workspace(outer, n, inner))
        return cudaErrorInvalidValue;
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return topk_typed<float>(largest, outer, n, inner, k, x, values, indices, ws, stream);
    case S4D_DTYPE_FLOAT16: return topk_typed<__half>(largest, outer, n, inner, k, x, values, indices, ws, stream);
    case S4D_DTYPE_FLOAT64: return topk_typed<double>(largest, outer, n, inner, k, x, values, indices, ws, stream);
    case S4D_DTYPE_INT32: return topk_typed<int32_t>(largest, outer, n, inner, k, x, values, indices, ws, stream);
    case S4D_DTYPE_INT64: return topk_typed<int64_t>(largest, outer, n, inner, k, x, values, indices, ws, stream);
    default: return cudaErrorInvalidValue;
    }
}
