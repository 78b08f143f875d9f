/*
 * What the element-wise kernels share (internal to kernels/elementwise*.cu):
 * division by run-time constants without a divide instruction, the broadcast
 * geometry of up to three inputs, 16-byte packs, float16 conversion, element
 * access by run-time dtype for the rarely used types, and the launch.
 *
 * Host build: with S4D_EW_HOST_BUILD defined, a host C++ compiler builds the
 * same kernel sources into plain functions that launch() runs as loops over an
 * emulated grid, on host memory, under the names s4d_cu_host_* (see
 * elementwise.h). tests/cuda/test_elementwise_host.cpp checks them against
 * the host reference on a machine without a GPU: the index math, packs,
 * tails, dtype handling and formulas are the device code's own; only the
 * math library differs (the host's).
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_COMMON_CUH
#define S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/launch.cuh"
#include "s4d/types.h"

#if defined(S4D_EW_HOST_BUILD) && defined(__CUDACC__)
#error "S4D_EW_HOST_BUILD is for host C++ compilers"
#endif

/* #pragma unroll and launch bounds for the device pass only. */
#if defined(__CUDA_ARCH__)
#define S4D_EW_UNROLL _Pragma("unroll")
#else
#define S4D_EW_UNROLL
#endif
#if defined(__CUDACC__)
#define S4D_EW_BOUNDS __launch_bounds__(s4d_ew::kThreads)
#else
#define S4D_EW_BOUNDS
#endif

namespace s4d_ew {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16; /* beyond that, threads loop (grid-stride) */
constexpr int kMaxRank = S4D_CU_EW_MAX_RANK;

/* Blocks for `work` items, one per thread, capped (the kernels stride). */
static inline unsigned grid_for(int64_t work)
{
    int64_t b = (work + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}

static inline bool aligned(const void *p, size_t bytes)
{
    return ((uintptr_t)p % bytes) == 0;
}

#if defined(S4D_EW_HOST_BUILD)
/* The emulated grid the host build's kernels read. */
struct EmuDim {
    unsigned x;
};
static EmuDim blockIdx, threadIdx, blockDim, gridDim;
#endif

/*
 * Launches kernel with one thread per item of `work` (capped; the kernels
 * stride) on stream; cudaGetLastError() after it. The host build runs every
 * thread of the grid in turn.
 */
template <class... P, class... A>
static inline cudaError_t launch(void (*kernel)(P...), int64_t work, cudaStream_t stream, A... args)
{
    const unsigned grid = grid_for(work);
#if defined(S4D_EW_HOST_BUILD)
    (void)stream;
    gridDim.x = grid;
    blockDim.x = kThreads;
    for (unsigned b = 0; b < grid; b++) {
        blockIdx.x = b;
        for (unsigned t = 0; t < (unsigned)kThreads; t++) {
            threadIdx.x = t;
            kernel(args...);
        }
    }
    return cudaSuccess;
#else
    return s4d_launch(kernel, grid, kThreads, 0, stream, args...);
#endif
}

/* Device-to-device copy on stream (a memcpy in the host build). */
static inline cudaError_t copy_async(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
#if defined(S4D_EW_HOST_BUILD)
    (void)stream;
    memcpy(dst, src, bytes);
    return cudaSuccess;
#else
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
#endif
}

/* Bit casts and products and sums rounded one by one (never contracted into an FMA). */
__device__ __forceinline__ uint32_t float_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

__device__ __forceinline__ float bits_float(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
#else
/* Host passes: the host build compiles with -ffp-contract=off. */
__device__ __forceinline__ float mul_rn(float a, float b) { return a * b; }
__device__ __forceinline__ double mul_rn(double a, double b) { return a * b; }
__device__ __forceinline__ float add_rn(float a, float b) { return a + b; }
__device__ __forceinline__ double add_rn(double a, double b) { return a + b; }
#endif

/*
 * n / d for 0 <= n < 2^63 and 1 <= d < 2^63 by a multiply-high: with s the
 * smallest shift such that 2^s >= d and m = floor(2^64 (2^s - d) / d) + 1,
 * n / d = (mulhi(n, m) + n) >> s. mulhi(n, m) <= n, so the sum cannot wrap
 * while n < 2^63.
 */
struct FastDiv {
    uint64_t d, m;
    unsigned s;

    __host__ __device__ __forceinline__ uint64_t div(uint64_t n) const
    {
#if defined(__CUDA_ARCH__)
        uint64_t t = __umul64hi(n, m);
#else
        uint64_t t = (uint64_t)(((unsigned __int128)n * m) >> 64);
#endif
        return (t + n) >> s;
    }
};

static inline FastDiv make_fast_div(uint64_t d)
{
    FastDiv f;
    f.d = d ? d : 1;
    f.s = 0;
    while (f.s < 63 && ((uint64_t)1 << f.s) < f.d)
        f.s++;
    unsigned __int128 num = (unsigned __int128)(((uint64_t)1 << f.s) - f.d) << 64;
    f.m = (uint64_t)(num / f.d) + 1;
    return f;
}

/*
 * The broadcast geometry on the device: the collapsed output dims (as fast
 * divisors), each input's element strides, and whether an input walks the
 * last dim (contig) or repeats one element along it.
 */
struct Geom {
    int rank;
    int nin;
    int64_t n;
    int contig[3];
    FastDiv dim[kMaxRank];
    int64_t st[3][kMaxRank];
};

/* false when the description is malformed (the caller returns an error). */
static inline bool make_geom(const s4d_cu_bcast *b, Geom *g)
{
    if (!b || b->rank < 1 || b->rank > kMaxRank || b->num_inputs < 1 || b->num_inputs > 3)
        return false;
    g->rank = b->rank;
    g->nin = b->num_inputs;
    g->n = 1;
    for (int d = 0; d < kMaxRank; d++) {
        int64_t v = d < b->rank ? b->dims[d] : 1;
        if (v < 0)
            return false;
        g->dim[d] = make_fast_div((uint64_t)(v > 0 ? v : 1));
        g->n *= v;
        for (int k = 0; k < 3; k++)
            g->st[k][d] = d < b->rank && k < b->num_inputs ? b->strides[k][d] : 0;
    }
    for (int k = 0; k < 3; k++)
        g->contig[k] = g->st[k][b->rank - 1] != 0;
    return true;
}

/* Element offsets of the NIN inputs at output element i. */
template <int NIN>
__host__ __device__ __forceinline__ void bcast_offsets(const Geom &g, int64_t i, int64_t (&off)[NIN])
{
S4D_EW_UNROLL
    for (int k = 0; k < NIN; k++)
        off[k] = 0;
    uint64_t rem = (uint64_t)i;
S4D_EW_UNROLL
    for (int d = kMaxRank - 1; d >= 1; d--) {
        if (d < g.rank) {
            uint64_t q = g.dim[d].div(rem);
            int64_t c = (int64_t)(rem - q * g.dim[d].d);
S4D_EW_UNROLL
            for (int k = 0; k < NIN; k++)
                off[k] += c * g.st[k][d];
            rem = q;
        }
    }
S4D_EW_UNROLL
    for (int k = 0; k < NIN; k++)
        off[k] += (int64_t)rem * g.st[k][0];
}

/*
 * Whether N-element packs may be used: every pack must lie in one row of the
 * last dim (or the geometry is one dim, where the kernels finish the tail one
 * by one), and every pointer read or written as packs must be aligned to a
 * pack. Inputs that repeat one element along the last dim are read one by one.
 */
static inline bool packs_ok(const Geom &g, int n, const void *out, size_t out_es,
                            const void *const *in, const size_t *in_es)
{
    if (n <= 1)
        return false;
    if (g.rank > 1 && (int64_t)g.dim[g.rank - 1].d % n != 0)
        return false;
    if (!aligned(out, out_es * n))
        return false;
    for (int k = 0; k < g.nin; k++)
        if (g.contig[k] && !aligned(in[k], in_es[k] * n))
            return false;
    return true;
}

/* N elements moved as one access (16 bytes at most). */
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
    T v[N];
};

/* Compute type: float16 computes in float32 and rounds back to nearest even. */
template <class T>
struct Cvt {
    using C = T;
    static __device__ __forceinline__ C in(T x) { return x; }
    static __device__ __forceinline__ T out(C x) { return x; }
};

template <>
struct Cvt<__half> {
    using C = float;
    static __device__ __forceinline__ float in(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half out(float x) { return __float2half_rn(x); }
};

/* ---- elements by run-time dtype (the host's s4d_load_f64 and friends) ---- */

__device__ __forceinline__ bool dt_is_unsigned(int dt)
{
    return dt == S4D_DTYPE_UINT8 || dt == S4D_DTYPE_UINT16 || dt == S4D_DTYPE_UINT32 ||
           dt == S4D_DTYPE_UINT64 || dt == S4D_DTYPE_BOOL;
}

__host__ __device__ __forceinline__ bool dt_is_float(int dt)
{
    return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT64 || dt == S4D_DTYPE_FLOAT16 ||
           dt == S4D_DTYPE_BFLOAT16;
}

__device__ __forceinline__ float bf16_to_float(uint16_t h)
{
    return bits_float((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays a quiet NaN (as the host's s4d_float_to_bf16). */
__device__ __forceinline__ uint16_t float_to_bf16(float f)
{
    uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

__device__ __forceinline__ double ld_f64(int dt, const void *p, int64_t i)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return ((const float *)p)[i];
    case S4D_DTYPE_FLOAT64: return ((const double *)p)[i];
    case S4D_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case S4D_DTYPE_BFLOAT16: return bf16_to_float(((const uint16_t *)p)[i]);
    case S4D_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case S4D_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    case S4D_DTYPE_INT8: return ((const int8_t *)p)[i];
    case S4D_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case S4D_DTYPE_INT16: return ((const int16_t *)p)[i];
    case S4D_DTYPE_INT32: return ((const int32_t *)p)[i];
    case S4D_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case S4D_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case S4D_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    default: return 0.0;
    }
}

/* Integer types and bool widened to 64 bits (uint64 as its bit pattern); 0 for floats. */
__device__ __forceinline__ int64_t ld_i64(int dt, const void *p, int64_t i)
{
    switch (dt) {
    case S4D_DTYPE_UINT8: case S4D_DTYPE_BOOL: return ((const uint8_t *)p)[i];
    case S4D_DTYPE_INT8: return ((const int8_t *)p)[i];
    case S4D_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case S4D_DTYPE_INT16: return ((const int16_t *)p)[i];
    case S4D_DTYPE_INT32: return ((const int32_t *)p)[i];
    case S4D_DTYPE_INT64: return ((const int64_t *)p)[i];
    case S4D_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case S4D_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    default: return 0;
    }
}

/* Float to integer as the host does it: NaN -> 0, saturation at the ends. */
__device__ __forceinline__ int64_t sat_i64(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

__device__ __forceinline__ void st_f64(int dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; return;
    case S4D_DTYPE_FLOAT64: ((double *)p)[i] = v; return;
    /* Through float32 like the host: double rounding included. */
    case S4D_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn((float)v); return;
    case S4D_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = float_to_bf16((float)v); return;
    case S4D_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0; return;
    case S4D_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)sat_i64(v, 0, 255); return;
    case S4D_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)sat_i64(v, -128, 127); return;
    case S4D_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)sat_i64(v, 0, 65535); return;
    case S4D_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)sat_i64(v, -32768, 32767); return;
    case S4D_DTYPE_INT32:
        ((int32_t *)p)[i] = (int32_t)sat_i64(v, -2147483648.0, 2147483647.0);
        return;
    case S4D_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)sat_i64(v, 0, 4294967295.0); return;
    case S4D_DTYPE_INT64:
        ((int64_t *)p)[i] = v != v                            ? 0
                            : v >= 9223372036854775807.0      ? INT64_MAX
                            : v <= -9223372036854775808.0     ? INT64_MIN
                                                              : (int64_t)v;
        return;
    case S4D_DTYPE_UINT64:
        ((uint64_t *)p)[i] = v != v || v <= 0                 ? 0
                             : v >= 18446744073709551615.0    ? UINT64_MAX
                                                              : (uint64_t)v;
        return;
    default: return;
    }
}

/* Integer types and bool from 64 bits: two's complement truncation; bool is v != 0. */
__device__ __forceinline__ void st_i64(int dt, void *p, int64_t i, int64_t v)
{
    switch (dt) {
    case S4D_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; return;
    case S4D_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; return;
    case S4D_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; return;
    case S4D_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; return;
    case S4D_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; return;
    case S4D_DTYPE_INT64: ((int64_t *)p)[i] = v; return;
    case S4D_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; return;
    case S4D_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; return;
    case S4D_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; return;
    default: return;
    }
}

static inline size_t dt_size(int dt)
{
    switch (dt) {
    case S4D_DTYPE_UINT8: case S4D_DTYPE_INT8: case S4D_DTYPE_BOOL: return 1;
    case S4D_DTYPE_UINT16: case S4D_DTYPE_INT16: case S4D_DTYPE_FLOAT16: case S4D_DTYPE_BFLOAT16:
        return 2;
    case S4D_DTYPE_FLOAT32: case S4D_DTYPE_INT32: case S4D_DTYPE_UINT32: return 4;
    case S4D_DTYPE_FLOAT64: case S4D_DTYPE_INT64: case S4D_DTYPE_UINT64: return 8;
    default: return 0;
    }
}

} /* namespace s4d_ew */

#endif /* S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_COMMON_CUH */
