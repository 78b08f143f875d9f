// The small kernels of the dense family (see dense.h). Grids: the large,
// contiguous dimension runs along x (threads of a warp touch consecutive
// elements); planes and rows run along y / z with grid-stride loops, so no
// grid dimension passes its limit (65535 for y and z) whatever the shape.
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>

#include "backend/cuda/kernels/dense.h"
#include "backend/cuda/kernels/launch.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxGridX = 1 << 20;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Threads per block for rows of `units` elements: a multiple of 32, at most kThreads.
inline int row_threads(int64_t units)
{
    int64_t t = ceil_div(units, 32) * 32;
    return (int)(t < kThreads ? (t < 32 ? 32 : t) : kThreads);
}

// ReLU that keeps NaN (the host reference's max(v, 0) keeps it too).
__device__ __forceinline__ float relu_keep_nan(float v) { return (v > 0.0f || v != v) ? v : 0.0f; }

template <bool HasBias, bool HasZ, bool Relu>
__device__ __forceinline__ float epi1(float v, float b, float z)
{
    if (HasBias)
        v += b;
    if (HasZ)
        v += z;
    if (Relu)
        v = relu_keep_nan(v);
    return v;
}

// y viewed as planes of `units` vectors of V floats (V = 4: float4, V = 1: float).
// Fill: y's old values are not read (taken as 0), so y = bias + z: the addend a product then accumulates onto.
template <typename Vec, bool HasBias, bool HasZ, bool Relu, bool Fill = false>
__global__ void __launch_bounds__(kThreads) conv_epilogue_kernel(Vec *__restrict__ y, const float *__restrict__ bias,
                                                                 const Vec *__restrict__ z, int64_t planes,
                                                                 int64_t units, int64_t channels)
{
    S4D_KERNEL_BEGIN();
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
        const float b = HasBias ? __ldg(bias + p % channels) : 0.0f;
        Vec *yp = y + p * units;
        const Vec *zp = HasZ ? z + p * units : nullptr;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < units; i += step) {
            Vec v = Fill ? Vec{} : yp[i];
            if constexpr (sizeof(Vec) == 16) {
                float4 w = HasZ ? zp[i] : make_float4(0.f, 0.f, 0.f, 0.f);
                v.x = epi1<HasBias, HasZ, Relu>(v.x, b, w.x);
                v.y = epi1<HasBias, HasZ, Relu>(v.y, b, w.y);
                v.z = epi1<HasBias, HasZ, Relu>(v.z, b, w.z);
                v.w = epi1<HasBias, HasZ, Relu>(v.w, b, w.w);
            } else {
                v = epi1<HasBias, HasZ, Relu>(v, b, HasZ ? zp[i] : 0.0f);
            }
            yp[i] = v;
        }
    }
}

template <typename Vec>
void launch_epilogue(Vec *y, const float *bias, const Vec *z, int relu, int64_t planes, int64_t units,
                     int64_t channels, cudaStream_t s)
{
    const int threads = row_threads(units);
    dim3 grid((unsigned)min64(ceil_div(units, threads), kMaxGridX), (unsigned)min64(planes, kMaxGridYZ));
    const int key = (bias ? 4 : 0) | (z ? 2 : 0) | (relu ? 1 : 0);
    switch (key) {
#define S4D_EPI_CASE(K, B, Z, R)                                                                            \
    case K: s4d_launch(conv_epilogue_kernel<Vec, B, Z, R>, grid, threads, 0, s, y, bias, z, planes, units, channels); \
        break;
        S4D_EPI_CASE(1, false, false, true)
        S4D_EPI_CASE(2, false, true, false)
        S4D_EPI_CASE(3, false, true, true)
        S4D_EPI_CASE(4, true, false, false)
        S4D_EPI_CASE(5, true, false, true)
        S4D_EPI_CASE(6, true, true, false)
        S4D_EPI_CASE(7, true, true, true)
#undef S4D_EPI_CASE
    default: break; // nothing to apply
    }
}

// y = bias[plane % channels] + z (either may be absent, not both).
template <typename Vec>
void launch_prefill(Vec *y, const float *bias, const Vec *z, int64_t planes, int64_t units, int64_t channels,
                    cudaStream_t s)
{
    const int threads = row_threads(units);
    dim3 grid((unsigned)min64(ceil_div(units, threads), kMaxGridX), (unsigned)min64(planes, kMaxGridYZ));
    if (bias && z)
        s4d_launch(conv_epilogue_kernel<Vec, true, true, false, true>, grid, threads, 0, s, y, bias, z, planes, units,
                   channels);
    else if (bias)
        s4d_launch(conv_epilogue_kernel<Vec, true, false, false, true>, grid, threads, 0, s, y, bias, z, planes,
                   units, channels);
    else
        s4d_launch(conv_epilogue_kernel<Vec, false, true, false, true>, grid, threads, 0, s, y, bias, z, planes,
                   units, channels);
}

// float16 y (and z, bias): each value read to float, the epilogue in float, one rounding back.
// Vec: uint4 (8 halves, 16 bytes) or __half.
__device__ __forceinline__ __half2 epi2_half(__half2 v, float b, __half2 z, bool has_bias, bool has_z, bool relu)
{
    float2 f = __half22float2(v);
    const float2 w = __half22float2(z);
    f.x = has_bias ? f.x + b : f.x;
    f.y = has_bias ? f.y + b : f.y;
    if (has_z) {
        f.x += w.x;
        f.y += w.y;
    }
    if (relu) {
        f.x = relu_keep_nan(f.x);
        f.y = relu_keep_nan(f.y);
    }
    return __floats2half2_rn(f.x, f.y);
}

template <typename Vec, bool HasBias, bool HasZ, bool Relu>
__global__ void __launch_bounds__(kThreads) conv_epilogue_half_kernel(Vec *__restrict__ y,
                                                                      const __half *__restrict__ bias,
                                                                      const Vec *__restrict__ z, int64_t planes,
                                                                      int64_t units, int64_t channels)
{
    S4D_KERNEL_BEGIN();
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
        const float b = HasBias ? __half2float(bias[p % channels]) : 0.0f;
        Vec *yp = y + p * units;
        const Vec *zp = HasZ ? z + p * units : nullptr;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < units; i += step) {
            if constexpr (sizeof(Vec) == 16) {
                uint4 v = yp[i];
                const uint4 w = HasZ ? zp[i] : make_uint4(0u, 0u, 0u, 0u);
                __half2 *vh = reinterpret_cast<__half2 *>(&v);
                const __half2 *wh = reinterpret_cast<const __half2 *>(&w);
#pragma unroll
                for (int q = 0; q < 4; q++)
                    vh[q] = epi2_half(vh[q], b, wh[q], HasBias, HasZ, Relu);
                yp[i] = v;
            } else {
                float v = __half2float(yp[i]) + (HasBias ? b : 0.0f) + (HasZ ? __half2float(zp[i]) : 0.0f);
                if (Relu)
                    v = relu_keep_nan(v);
                yp[i] = __float2half_rn(v);
            }
        }
    }
}

template <typename Vec>
void launch_epilogue_half(Vec *y, const __half *bias, const Vec *z, int relu, int64_t planes, int64_t units,
                          int64_t channels, cudaStream_t s)
{
    const int threads = row_threads(units);
    dim3 grid((unsigned)min64(ceil_div(units, threads), kMaxGridX), (unsigned)min64(planes, kMaxGridYZ));
    const int key = (bias ? 4 : 0) | (z ? 2 : 0) | (relu ? 1 : 0);
    switch (key) {
#define S4D_EPI_CASE(K, B, Z, R)                                                                          \
    case K:                                                                                               \
        s4d_launch(conv_epilogue_half_kernel<Vec, B, Z, R>, grid, threads, 0, s, y, bias, z, planes, units, channels); \
        break;
        S4D_EPI_CASE(1, false, false, true)
        S4D_EPI_CASE(2, false, true, false)
        S4D_EPI_CASE(3, false, true, true)
        S4D_EPI_CASE(4, true, false, false)
        S4D_EPI_CASE(5, true, false, true)
        S4D_EPI_CASE(6, true, true, false)
        S4D_EPI_CASE(7, true, true, true)
#undef S4D_EPI_CASE
    default: break; // nothing to apply
    }
}

// T: float or a 16-bit storage type (the copy moves bits; zero is all-zero bits in both).
template <typename T>
__global__ void __launch_bounds__(kThreads) pad3_kernel(const T *__restrict__ x, T *__restrict__ xp,
                                                        int64_t rows, int64_t img0, int64_t img1, int64_t img2,
                                                        int64_t pad0, int64_t pad1, int64_t pad2, int64_t off0,
                                                        int64_t off1, int64_t off2)
{
    S4D_KERNEL_BEGIN();
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        // One decomposition per row, amortised over the row's elements.
        const int64_t r1 = r % pad1, t = r / pad1;
        const int64_t r0 = t % pad0, pl = t / pad0;
        const int64_t i0 = r0 - off0, i1 = r1 - off1;
        const bool row_in = i0 >= 0 && i0 < img0 && i1 >= 0 && i1 < img1;
        const T *xr = row_in ? x + ((pl * img0 + i0) * img1 + i1) * img2 : nullptr;
        T *dr = xp + r * pad2;
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < pad2; c += step) {
            const int64_t i2 = c - off2;
            dr[c] = (row_in && i2 >= 0 && i2 < img2) ? xr[i2] : T(0);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) fill_bcast_kernel(T *__restrict__ y, const T *__restrict__ c,
                                                              int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                                              T beta)
{
    S4D_KERNEL_BEGIN();
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        T *yr = y + r * cols;
        const T *cr = c + r * rs;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += step)
            yr[j] = beta * cr[j * cs];
    }
}

template <typename T>
cudaError_t launch_fill(T *y, const T *c, int64_t rows, int64_t cols, int64_t rs, int64_t cs, T beta,
                        cudaStream_t s)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    const int threads = row_threads(cols);
    dim3 grid((unsigned)min64(ceil_div(cols, threads), kMaxGridX), (unsigned)min64(rows, kMaxGridYZ));
    s4d_launch(fill_bcast_kernel<T>, grid, threads, 0, s, y, c, rows, cols, rs, cs, beta);
    return cudaGetLastError();
}

// Kernel taps [*b, *e) whose position s + k * d lies in [lo, hi), as the host reference's tap_range.
__device__ __forceinline__ void tap_range(int64_t s, int64_t d, int64_t k, int64_t lo, int64_t hi, int64_t *b,
                                          int64_t *e)
{
    int64_t bb, ee;
    if (d == 1) {
        bb = lo - s <= 0 ? 0 : lo - s;
        ee = hi - s <= 0 ? 0 : hi - s;
    } else {
        bb = lo - s <= 0 ? 0 : (lo - s + d - 1) / d;
        ee = hi - s <= 0 ? 0 : (hi - s - 1) / d + 1;
    }
    if (ee > k)
        ee = k;
    if (bb > ee)
        bb = ee;
    *b = bb;
    *e = ee;
}

// Pool elements read as float and written back: float32, or float16 storage (float arithmetic; a
// maximum converts back exactly, an average rounds once).
__device__ __forceinline__ float ld_f(const float *p) { return __ldg(p); }
__device__ __forceinline__ float ld_f(const __half *p) { return __half2float(__ldg(p)); }
__device__ __forceinline__ void st_f(float *p, float v) { *p = v; }
__device__ __forceinline__ void st_f(__half *p, float v) { *p = __float2half_rn(v); }

// Whether tap value v replaces the running maximum best (first: no tap taken yet). The first NaN
// wins and stays, as in the host reference (numpy's max); ties keep the earlier tap.
__device__ __forceinline__ bool max_takes(float v, float best, bool first)
{
    return first || v > best || (v != v && best == best);
}

// One thread per output element: x along the last output dim, y over (o0, o1) rows, z over planes.
template <typename T, bool IsAvg>
__global__ void __launch_bounds__(kThreads) pool_kernel(const T *__restrict__ x, T *__restrict__ y,
                                                        int64_t *__restrict__ idx, s4d_cuda_pool_geom g)
{
    S4D_KERNEL_BEGIN();
    const int64_t rows = g.grid[0] * g.grid[1];
    const int64_t plane_in = g.img[0] * g.img[1] * g.img[2];
    const int64_t plane_out = rows * g.grid[2];
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t pl = blockIdx.z; pl < g.planes; pl += gridDim.z) {
        const T *xp = x + pl * plane_in;
        for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
            const int64_t o0 = row / g.grid[1], o1 = row - o0 * g.grid[1];
            const int64_t s0 = o0 * g.stride[0] - g.pad_b[0], s1 = o1 * g.stride[1] - g.pad_b[1];
            int64_t b0, e0, b1, e1, p0b = 0, p0e = 0, p1b = 0, p1e = 0;
            tap_range(s0, g.dil[0], g.k[0], 0, g.img[0], &b0, &e0);
            tap_range(s1, g.dil[1], g.k[1], 0, g.img[1], &b1, &e1);
            if (IsAvg) {
                tap_range(s0, g.dil[0], g.k[0], -g.pad_b[0], g.img[0] + g.pad_e[0], &p0b, &p0e);
                tap_range(s1, g.dil[1], g.k[1], -g.pad_b[1], g.img[1] + g.pad_e[1], &p1b, &p1e);
            }
            for (int64_t o2 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o2 < g.grid[2]; o2 += step) {
                const int64_t s2 = o2 * g.stride[2] - g.pad_b[2];
                int64_t b2, e2;
                tap_range(s2, g.dil[2], g.k[2], 0, g.img[2], &b2, &e2);
                const int64_t out = pl * plane_out + row * g.grid[2] + o2;
                if (IsAvg) {
                    int64_t p2b, p2e;
                    tap_range(s2, g.dil[2], g.k[2], -g.pad_b[2], g.img[2] + g.pad_e[2], &p2b, &p2e);
                    double sum = 0.0;
                    for (int64_t k0 = b0; k0 < e0; k0++) {
                        const int64_t i0 = s0 + k0 * g.dil[0];
                        for (int64_t k1 = b1; k1 < e1; k1++) {
                            const T *xr = xp + (i0 * g.img[1] + s1 + k1 * g.dil[1]) * g.img[2] + s2;
                            for (int64_t k2 = b2; k2 < e2; k2++)
                                sum += (double)ld_f(xr + k2 * g.dil[2]);
                        }
                    }
                    const int64_t n_in = (e0 - b0) * (e1 - b1) * (e2 - b2);
                    const int64_t n_pad = (p0e - p0b) * (p1e - p1b) * (p2e - p2b);
                    const int64_t cnt = g.count_include_pad ? n_pad : n_in;
                    st_f(y + out, cnt ? (float)(sum / (double)cnt) : 0.0f);
                } else {
                    float best = -INFINITY;
                    int64_t a0 = -1, a1 = 0, a2 = 0; // position of the maximum; -1: none yet
                    for (int64_t k0 = b0; k0 < e0; k0++) {
                        const int64_t i0 = s0 + k0 * g.dil[0];
                        for (int64_t k1 = b1; k1 < e1; k1++) {
                            const int64_t i1 = s1 + k1 * g.dil[1];
                            const T *xr = xp + (i0 * g.img[1] + i1) * g.img[2];
                            for (int64_t k2 = b2; k2 < e2; k2++) {
                                const int64_t i2 = s2 + k2 * g.dil[2];
                                const float v = ld_f(xr + i2);
                                if (max_takes(v, best, a0 < 0)) {
                                    best = v;
                                    a0 = i0;
                                    a1 = i1;
                                    a2 = i2;
                                }
                            }
                        }
                    }
                    st_f(y + out, best);
                    if (idx) {
                        int64_t at = 0;
                        if (a0 >= 0)
                            at = g.storage_order ? (a2 * g.img[1] + a1) * g.img[0] + a0
                                                 : (a0 * g.img[1] + a1) * g.img[2] + a2;
                        idx[out] = pl * plane_in + at;
                    }
                }
            }
        }
    }
}

// The 2-D MaxPool without Indices and dilations (a ResNet's stem): one thread per output element,
// flat over [planes, oh, ow] with 32-bit indices (the caller checks they fit); the taps in the
// order of pool_kernel, NaN winning as there, so the values are the same. pool_kernel's 64-bit
// index arithmetic per tap made it ten times slower than its memory traffic on the stem's maps.
template <typename T>
__global__ void __launch_bounds__(kThreads) maxpool2d_kernel(const T *__restrict__ x, T *__restrict__ y, int total,
                                                             int ih, int iw, int oh, int ow, int kh, int kw,
                                                             int sh, int sw, int ph, int pw)
{
    S4D_KERNEL_BEGIN();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int o2 = i % ow, r = i / ow;
        const int o1 = r % oh, pl = r / oh;
        const int s1 = o1 * sh - ph, s2 = o2 * sw - pw;
        const int b1 = s1 < 0 ? -s1 : 0, e1 = min(kh, ih - s1);
        const int b2 = s2 < 0 ? -s2 : 0, e2 = min(kw, iw - s2);
        const T *xp = x + (size_t)pl * ih * iw;
        float best = -INFINITY;
        bool any = false;
        for (int k1 = b1; k1 < e1; k1++) {
#pragma unroll 4
            for (int k2 = b2; k2 < e2; k2++) {
                const float v = ld_f(xp + (s1 + k1) * iw + s2 + k2);
                if (max_takes(v, best, !any)) {
                    best = v;
                    any = true;
                }
            }
        }
        st_f(y + i, best);
    }
}

// One block per plane; each thread reduces a strided slice, then a fixed-order tree: deterministic.
template <typename T, bool IsMax>
__global__ void __launch_bounds__(kThreads) global_pool_kernel(const T *__restrict__ x, T *__restrict__ y,
                                                               int64_t planes, int64_t plane)
{
    S4D_KERNEL_BEGIN();
    __shared__ double sum[kThreads];
    __shared__ float mx[kThreads];
    __shared__ int nans[kThreads];
    for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
        const T *xp = x + p * plane;
        double s = 0.0;
        float m = -INFINITY;
        int has_nan = 0;
        for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) {
            const float v = ld_f(xp + i);
            if (IsMax) {
                if (v != v)
                    has_nan = 1;
                else if (v > m)
                    m = v;
            } else {
                s += (double)v;
            }
        }
        sum[threadIdx.x] = s;
        mx[threadIdx.x] = m;
        nans[threadIdx.x] = has_nan;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) {
                if (IsMax) {
                    mx[threadIdx.x] = mx[threadIdx.x + w] > mx[threadIdx.x] ? mx[threadIdx.x + w] : mx[threadIdx.x];
                    nans[threadIdx.x] |= nans[threadIdx.x + w];
                } else {
                    sum[threadIdx.x] += sum[threadIdx.x + w];
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            if (IsMax)
                st_f(y + p, nans[0] ? __int_as_float(0x7fc00000) : mx[0]);
            else
                st_f(y + p, plane ? (float)(sum[0] / (double)plane) : 0.0f);
        }
        __syncthreads(); // the shared arrays are reused for the next plane
    }
}

} // namespace

extern "C" cudaError_t s4d_cuda_conv_epilogue_f32(float *y, const float *bias, const float *z, int relu,
                                                  int64_t planes, int64_t plane, int64_t channels,
                                                  cudaStream_t stream)
{
    if (planes <= 0 || plane <= 0 || (!bias && !z && !relu))
        return cudaSuccess;
    if (bias && channels <= 0)
        return cudaErrorInvalidValue;
    // float4 when every plane starts on a 16-byte boundary.
    const bool vec = plane % 4 == 0 && ((uintptr_t)y & 15) == 0 && (!z || ((uintptr_t)z & 15) == 0);
    if (vec)
        launch_epilogue<float4>((float4 *)y, bias, (const float4 *)z, relu, planes, plane / 4, channels, stream);
    else
        launch_epilogue<float>(y, bias, z, relu, planes, plane, channels, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t s4d_cuda_conv_prefill_f32(float *y, const float *bias, const float *z, int64_t planes,
                                                 int64_t plane, int64_t channels, cudaStream_t stream)
{
    if (planes <= 0 || plane <= 0)
        return cudaSuccess;
    if ((!bias && !z) || (bias && channels <= 0))
        return cudaErrorInvalidValue;
    const bool vec = plane % 4 == 0 && ((uintptr_t)y & 15) == 0 && (!z || ((uintptr_t)z & 15) == 0);
    if (vec)
        launch_prefill<float4>((float4 *)y, bias, (const float4 *)z, planes, plane / 4, channels, stream);
    else
        launch_prefill<float>(y, bias, z, planes, plane, channels, stream);
    return cudaGetLastError();
}

// Writes the padded xp: x where it lands, zeros around it.
template <typename T>
static cudaError_t launch_pad3(const T *x, T *xp, int64_t planes, const int64_t img[3], const int64_t padded[3],
                               const int64_t off[3], cudaStream_t stream)
{
    const int64_t rows = planes * padded[0] * padded[1];
    if (rows <= 0 || padded[2] <= 0)
        return cudaSuccess;
    for (int i = 0; i < 3; i++)
        if (off[i] < 0 || padded[i] < img[i] + off[i])
            return cudaErrorInvalidValue;
    const int threads = row_threads(padded[2]);
    dim3 grid((unsigned)min64(ceil_div(padded[2], threads), kMaxGridX), (unsigned)min64(rows, kMaxGridYZ));
    s4d_launch(pad3_kernel<T>, grid, threads, 0, stream, x, xp, rows, img[0], img[1], img[2], padded[0], padded[1],
                                                 padded[2], off[0], off[1], off[2]);
    return cudaGetLastError();
}

extern "C" cudaError_t s4d_cuda_pad3_f32(const float *x, float *xp, int64_t planes, const int64_t img[3],
                                         const int64_t padded[3], const int64_t off[3], cudaStream_t stream)
{
    return launch_pad3<float>(x, xp, planes, img, padded, off, stream);
}

extern "C" cudaError_t s4d_cuda_fill_bcast_f32(float *y, const float *c, int64_t rows, int64_t cols, int64_t rs,
                                               int64_t cs, float beta, cudaStream_t stream)
{
    return launch_fill<float>(y, c, rows, cols, rs, cs, beta, stream);
}

extern "C" cudaError_t s4d_cuda_fill_bcast_f64(double *y, const double *c, int64_t rows, int64_t cols, int64_t rs,
                                               int64_t cs, double beta, cudaStream_t stream)
{
    return launch_fill<double>(y, c, rows, cols, rs, cs, beta, stream);
}

namespace {

template <typename T>
cudaError_t launch_pool(const T *x, T *y, int64_t *idx, const s4d_cuda_pool_geom *g, cudaStream_t stream)
{
    const int64_t rows = g->grid[0] * g->grid[1];
    if (g->planes <= 0 || rows <= 0 || g->grid[2] <= 0)
        return cudaSuccess;
    const int64_t in_total = g->planes * g->img[1] * g->img[2], out_total = g->planes * rows * g->grid[2];
    const int64_t flat_blocks = min64(ceil_div(out_total, kThreads), kMaxGridX);
    const bool flat2d = !g->is_avg && !idx && g->img[0] == 1 && g->grid[0] == 1 && g->k[0] == 1 &&
                        g->dil[1] == 1 && g->dil[2] == 1 && in_total < INT32_MAX &&
                        out_total + flat_blocks * kThreads < INT32_MAX &&
                        g->k[1] < 1024 && g->k[2] < 1024 && g->stride[1] < 1024 && g->stride[2] < 1024 &&
                        g->pad_b[1] < 1024 && g->pad_b[2] < 1024;
    if (flat2d) {
        s4d_launch(maxpool2d_kernel<T>, dim3((unsigned)flat_blocks), kThreads, 0, stream, x, y, (int)out_total,
                   (int)g->img[1], (int)g->img[2], (int)g->grid[1], (int)g->grid[2], (int)g->k[1], (int)g->k[2],
                   (int)g->stride[1], (int)g->stride[2], (int)g->pad_b[1], (int)g->pad_b[2]);
        return cudaGetLastError();
    }
    const int threads = row_threads(g->grid[2]);
    dim3 grid((unsigned)min64(ceil_div(g->grid[2], threads), kMaxGridX), (unsigned)min64(rows, kMaxGridYZ),
              (unsigned)min64(g->planes, kMaxGridYZ));
    if (g->is_avg)
        s4d_launch(pool_kernel<T, true>, grid, threads, 0, stream, x, y, nullptr, *g);
    else
        s4d_launch(pool_kernel<T, false>, grid, threads, 0, stream, x, y, idx, *g);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_global_pool(const T *x, T *y, int64_t planes, int64_t plane, int is_max, cudaStream_t stream)
{
    if (planes <= 0)
        return cudaSuccess;
    const unsigned blocks = (unsigned)min64(planes, (int64_t)1 << 30);
    if (is_max)
        s4d_launch(global_pool_kernel<T, true>, blocks, kThreads, 0, stream, x, y, planes, plane);
    else
        s4d_launch(global_pool_kernel<T, false>, blocks, kThreads, 0, stream, x, y, planes, plane);
    return cudaGetLastError();
}

} // namespace

// Channels-last 2-D MaxPool: one thread per output element [n, oh, ow, c], channels fastest; the
// taps in the host reference's order, NaN winning as there.
// I is the index type: int where every element index of x and y fits (64-bit division per element
// costs more than the element's loads), int64_t otherwise.
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) maxpool_nhwc_kernel(const T *__restrict__ x, T *__restrict__ y,
                                                                s4d_cuda_pool_geom g, int64_t n, int64_t c_)
{
    S4D_KERNEL_BEGIN();
    const I ih = (I)g.img[1], iw = (I)g.img[2], oh = (I)g.grid[1], ow = (I)g.grid[2], c = (I)c_;
    const I total = (I)n * oh * ow * c, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const I ch = i % c;
        I r = i / c;
        const I o2 = r % ow;
        r /= ow;
        const I o1 = r % oh, b = r / oh;
        const int64_t s1 = o1 * g.stride[1] - g.pad_b[1], s2 = o2 * g.stride[2] - g.pad_b[2];
        int64_t b1, e1, b2, e2;
        tap_range(s1, g.dil[1], g.k[1], 0, ih, &b1, &e1);
        tap_range(s2, g.dil[2], g.k[2], 0, iw, &b2, &e2);
        float best = -INFINITY;
        bool any = false;
        for (int64_t k1 = b1; k1 < e1; k1++) {
            const T *xr = x + (((int64_t)b * ih + s1 + k1 * g.dil[1]) * iw + s2) * c + ch;
            for (int64_t k2 = b2; k2 < e2; k2++) {
                const float v = ld_f(xr + k2 * g.dil[2] * c);
                if (max_takes(v, best, !any)) {
                    best = v;
                    any = true;
                }
            }
        }
        st_f(y + i, best);
    }
}

extern "C" cudaError_t s4d_cuda_maxpool_nhwc(const void *x, void *y, int half, int64_t n, int64_t c,
                                             const s4d_cuda_pool_geom *g, cudaStream_t stream)
{
    const int64_t total = n * g->grid[1] * g->grid[2] * c;
    if (total <= 0)
        return cudaSuccess;
    const unsigned grid = (unsigned)min64(ceil_div(total, kThreads), kMaxGridX);
    // Every index (with the grid-stride loop's last step) below INT32_MAX: 32-bit arithmetic.
    const bool narrow = total + (int64_t)grid * kThreads < INT32_MAX && n * g->img[1] * g->img[2] * c < INT32_MAX;
    if (half && narrow)
        s4d_launch(maxpool_nhwc_kernel<__half, int>, dim3(grid), kThreads, 0, stream, (const __half *)x,
                   (__half *)y, *g, n, c);
    else if (half)
        s4d_launch(maxpool_nhwc_kernel<__half, int64_t>, dim3(grid), kThreads, 0, stream, (const __half *)x,
                   (__half *)y, *g, n, c);
    else if (narrow)
        s4d_launch(maxpool_nhwc_kernel<float, int>, dim3(grid), kThreads, 0, stream, (const float *)x, (float *)y,
                   *g, n, c);
    else
        s4d_launch(maxpool_nhwc_kernel<float, int64_t>, dim3(grid), kThreads, 0, stream, (const float *)x,
                   (float *)y, *g, n, c);
    return cudaGetLastError();
}

extern "C" cudaError_t s4d_cuda_pool_f32(const float *x, float *y, int64_t *idx, const s4d_cuda_pool_geom *g,
                                         cudaStream_t stream)
{
    return launch_pool<float>(x, y, idx, g, stream);
}

extern "C" cudaError_t s4d_cuda_pool_f16(const void *x, void *y, int64_t *idx, const s4d_cuda_pool_geom *g,
                                         cudaStream_t stream)
{
    return launch_pool<__half>((const __half *)x, (__half *)y, idx, g, stream);
}

extern "C" cudaError_t s4d_cuda_global_pool_f32(const float *x, float *y, int64_t planes, int64_t plane, int is_max,
                                                cudaStream_t stream)
{
    return launch_global_pool<float>(x, y, planes, plane, is_max, stream);
}

extern "C" cudaError_t s4d_cuda_global_pool_f16(const void *x, void *y, int64_t planes, int64_t plane, int is_max,
                                                cudaStream_t stream)
{
    return launch_global_pool<__half>((const __half *)x, (__half *)y, planes, plane, is_max, stream);
}

extern "C" cudaError_t s4d_cuda_conv_epilogue_f16(void *y, const void *bias, const void *z, int relu,
                                                  int64_t planes, int64_t plane, int64_t channels,
                                                  cudaStream_t stream)
{
    if (planes <= 0 || plane <= 0 || (!bias && !z && !relu))
        return cudaSuccess;
    if (bias && channels <= 0)
        return cudaErrorInvalidValue;
    // 8 halves (16 bytes) at a time when every plane starts on a 16-byte boundary.
    const bool vec = plane % 8 == 0 && ((uintptr_t)y & 15) == 0 && (!z || ((uintptr_t)z & 15) == 0);
    if (vec)
        launch_epilogue_half<uint4>((uint4 *)y, (const __half *)bias, (const uint4 *)z, relu, planes, plane / 8,
                                    channels, stream);
    else
        launch_epilogue_half<__half>((__half *)y, (const __half *)bias, (const __half *)z, relu, planes, plane,
                                     channels, stream);
    return cudaGetLastError();
}

// Channels-last: y [rows, channels], the bias varies along the row. V elements per access
// (16 bytes when channels and the pointers allow); the epilogue in float, one rounding back.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
    T v[V];
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ void from_float(float &d, float x) { d = x; }
__device__ __forceinline__ void from_float(__half &d, float x) { d = __float2half_rn(x); }

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) conv_epilogue_nhwc_kernel(Pack<T, V> *__restrict__ y,
                                                                      const T *__restrict__ bias,
                                                                      const Pack<T, V> *__restrict__ z, int relu,
                                                                      int64_t n, int64_t cgroups)
{
    S4D_KERNEL_BEGIN();
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        Pack<T, V> v = y[i];
        const Pack<T, V> w = z ? z[i] : Pack<T, V>{};
        const int64_t c0 = (i % cgroups) * V;
#pragma unroll
        for (int e = 0; e < V; e++) {
            float f = to_float(v.v[e]);
            if (bias)
                f += to_float(bias[c0 + e]);
            if (z)
                f += to_float(w.v[e]);
            if (relu)
                f = relu_keep_nan(f);
            from_float(v.v[e], f);
        }
        y[i] = v;
    }
}

template <typename T, int V>
static void launch_epilogue_nhwc(T *y, const T *bias, const T *z, int relu, int64_t rows, int64_t channels,
                                 cudaStream_t stream)
{
    const int64_t n = rows * channels / V;
    const unsigned grid = (unsigned)min64(ceil_div(n, kThreads), kMaxGridX);
    s4d_launch(conv_epilogue_nhwc_kernel<T, V>, dim3(grid), kThreads, 0, stream, (Pack<T, V> *)y, bias,
               (const Pack<T, V> *)z, relu, n, channels / V);
}

template <typename T>
static cudaError_t epilogue_nhwc(T *y, const T *bias, const T *z, int relu, int64_t rows, int64_t channels,
                                 cudaStream_t stream)
{
    if (rows <= 0 || channels <= 0 || (!bias && !z && !relu))
        return cudaSuccess;
    constexpr int W = 16 / (int)sizeof(T);
    const bool vec = channels % W == 0 && ((uintptr_t)y & 15) == 0 && (!z || ((uintptr_t)z & 15) == 0);
    if (vec)
        launch_epilogue_nhwc<T, W>(y, bias, z, relu, rows, channels, stream);
    else
        launch_epilogue_nhwc<T, 1>(y, bias, z, relu, rows, channels, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t s4d_cuda_conv_epilogue_nhwc_f32(float *y, const float *bias, const float *z, int relu,
                                                       int64_t rows, int64_t channels, cudaStream_t stream)
{
    return epilogue_nhwc<float>(y, bias, z, relu, rows, channels, stream);
}

extern "C" cudaError_t s4d_cuda_conv_epilogue_nhwc_f16(void *y, const void *bias, const void *z, int relu,
                                                       int64_t rows, int64_t channels, cudaStream_t stream)
{
    return epilogue_nhwc<__half>((__half *)y, (const __half *)bias, (const __half *)z, relu, rows, channels,
                                 stream);
}

extern "C" cudaError_t s4d_cuda_pad3_16(const void *x, void *xp, int64_t planes, const int64_t img[3],
                                        const int64_t padded[3], const int64_t off[3], cudaStream_t stream)
{
    return launch_pad3<uint16_t>((const uint16_t *)x, (uint16_t *)xp, planes, img, padded, off, stream);
}

// Gemm's broadcast addend in float16: y = beta * c, computed in float and rounded once.
__global__ void __launch_bounds__(kThreads) fill_bcast_half_kernel(__half *__restrict__ y, const __half *__restrict__ c,
                                                                   int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                                                   float beta)
{
    S4D_KERNEL_BEGIN();
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        __half *yr = y + r * cols;
        const __half *cr = c + r * rs;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += step)
            yr[j] = __float2half_rn(beta * __half2float(cr[j * cs]));
    }
}

extern "C" cudaError_t s4d_cuda_fill_bcast_f16(void *y, const void *c, int64_t rows, int64_t cols, int64_t rs,
                                               int64_t cs, float beta, cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    const int threads = row_threads(cols);
    dim3 grid((unsigned)min64(ceil_div(cols, threads), kMaxGridX), (unsigned)min64(rows, kMaxGridYZ));
    s4d_launch(fill_bcast_half_kernel, grid, threads, 0, stream,
               (__half *)y, (const __half *)c, rows, cols, rs, cs, beta);
    return cudaGetLastError();
}
