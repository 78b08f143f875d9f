/*
 * CUDA kernels of the data-movement and resampling ops: strided and batched
 * 2-D copies, tiled transpose, fill, gathers, scatters, Resize, GridSample.
 * See movement.h for the contracts.
 *
 * Index arithmetic: a flat index is split into coordinates by dividing by
 * each dim. Below 2^31 elements the division is a multiply-high by a magic
 * number made on the host (FastDiv), in 32-bit registers; larger index spaces
 * take the 64-bit path with plain division. Offsets are always 64-bit.
 *
 * Floating point: where a kernel must agree with the host reference to the
 * last bit (Resize's blends, GridSample's coordinates and sums, the scatter
 * reductions), it uses the _rn intrinsics, which the compiler never fuses
 * into an FMA the host does not do.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/kernels/movement.h"
#include "backend/cuda/kernels/launch.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20; /* grid-stride loops take the rest */
constexpr int MAXD = S4D_CUDA_MV_MAX_DIMS;
constexpr int MAXR = S4D_CUDA_MV_MAX_RANK;

/* ---- index arithmetic ------------------------------------------------------------ */

/* Division by d through a multiply-high: exact for numerators below 2^31. */
struct FastDiv {
    uint32_t m, s;
};

FastDiv make_div(int64_t d64)
{
    /* Only used below 2^31; a larger d (64-bit path) never reaches fdiv. */
    uint32_t d = d64 > 0 && d64 < ((int64_t)1 << 31) ? (uint32_t)d64 : 1u;
    uint32_t s = 0;
    while ((1ull << s) < d)
        s++;
    FastDiv f;
    f.s = s;
    f.m = (uint32_t)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
    return f;
}

/* n / d: the magic number in the 32-bit path, plain division in the 64-bit one. */
template <typename Idx>
__device__ __forceinline__ Idx divq(Idx n, const FastDiv &f, int64_t d)
{
    if constexpr (sizeof(Idx) == 4)
        return (__umulhi(n, f.m) + n) >> f.s;
    else
        return n / (Idx)d;
}

int64_t blocks_for(int64_t work, int64_t per_block)
{
    int64_t b = (work + per_block - 1) / per_block;
    return b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b;
}

bool fits32(int64_t n)
{
    return n < ((int64_t)1 << 31);
}

bool aligned(const void *p, int64_t w)
{
    return ((uintptr_t)p % (uintptr_t)w) == 0;
}

/* An element of B bytes, moved as one load and one store. */
template <int B> struct Word;
template <> struct Word<1> { typedef uint8_t T; };
template <> struct Word<2> { typedef uint16_t T; };
template <> struct Word<4> { typedef uint32_t T; };
template <> struct Word<8> { typedef uint2 T; };
template <> struct Word<16> { typedef uint4 T; };

/* Calls F::template run<T>(args...) with T the word of es bytes. */
template <typename F, typename... A> cudaError_t by_size(int64_t es, A... args)
{
    switch (es) {
    case 1: return F::template run<Word<1>::T>(args...);
    case 2: return F::template run<Word<2>::T>(args...);
    case 4: return F::template run<Word<4>::T>(args...);
    case 8: return F::template run<Word<8>::T>(args...);
    case 16: return F::template run<Word<16>::T>(args...);
    default: return cudaErrorInvalidValue;
    }
}

/* The widest word (<= 16 bytes, a multiple of es) that the run of `inner` elements and both
   pointers allow. */
int64_t vector_width(int64_t es, int64_t inner, const void *a, const void *b)
{
    for (int64_t w = 16; w > es; w /= 2)
        if (w % es == 0 && (inner * es) % w == 0 && aligned(a, w) && aligned(b, w))
            return w;
    return es;
}

/* ---- strided copy ------------------------------------------------------------------- */

struct StridedDesc {
    int rank;
    int64_t dims[MAXD];
    int64_t sst[MAXD], dst[MAXD];
    FastDiv div[MAXD];
};

template <typename T, typename Idx>
__global__ void __launch_bounds__(kThreads)
    strided_copy_kernel(T *__restrict__ out, const T *__restrict__ in, StridedDesc d, Idx total)
{
    S4D_KERNEL_BEGIN();
    for (Idx i = (Idx)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (Idx)gridDim.x * kThreads) {
        Idx rem = i;
        int64_t so = 0, dof = 0;
        for (int k = d.rank - 1; k > 0; k--) {
            Idx q = divq(rem, d.div[k], d.dims[k]);
            int64_t c = (int64_t)(rem - q * (Idx)d.dims[k]);
            so += c * d.sst[k];
            dof += c * d.dst[k];
            rem = q;
        }
        so += (int64_t)rem * d.sst[0];
        dof += (int64_t)rem * d.dst[0];
        out[dof] = in[so];
    }
}

struct StridedLaunch {
    template <typename T>
    static cudaError_t run(void *dst, const void *src, const StridedDesc *d, int64_t total,
                           cudaStream_t stream)
    {
        unsigned blocks = (unsigned)blocks_for(total, kThreads);
        if (fits32(total))
            s4d_launch(strided_copy_kernel<T, uint32_t>, blocks, kThreads, 0, stream, 
                (T *)dst, (const T *)src, *d, (uint32_t)total);
        else
            s4d_launch(strided_copy_kernel<T, uint64_t>, blocks, kThreads, 0, stream, 
                (T *)dst, (const T *)src, *d, (uint64_t)total);
        return cudaGetLastError();
    }
};

/* ---- tiled transpose ----------------------------------------------------------------------- */

constexpr int TILE = 32;
constexpr int TILE_ROWS = 8;

struct TileDesc {
    int nb; /* batch dims */
    int64_t bdims[MAXR], bist[MAXR], bost[MAXR];
    int64_t a, b; /* a: the input's contiguous dim; b: the output's */
    int64_t ist_b, ost_a;
    int64_t tiles_a, tiles_b, blocks;
};

template <typename T>
__global__ void __launch_bounds__(TILE * TILE_ROWS)
    transpose_tiled_kernel(T *__restrict__ out, const T *__restrict__ in, TileDesc d)
{
    S4D_KERNEL_BEGIN();
    __shared__ T tile[TILE][TILE + 1];
    for (int64_t blk = blockIdx.x; blk < d.blocks; blk += gridDim.x) {
        int64_t rest = blk;
        int64_t tb = rest % d.tiles_b;
        rest /= d.tiles_b;
        int64_t ta = rest % d.tiles_a;
        rest /= d.tiles_a;
        int64_t ioff = 0, ooff = 0;
        for (int k = d.nb - 1; k >= 0; k--) {
            int64_t c = rest % d.bdims[k];
            rest /= d.bdims[k];
            ioff += c * d.bist[k];
            ooff += c * d.bost[k];
        }
        int64_t a0 = ta * TILE, b0 = tb * TILE;
        /* Read along a (contiguous in the input), write along b (contiguous in the output). */
        int64_t a = a0 + threadIdx.x;
#pragma unroll
        for (int j = 0; j < TILE; j += TILE_ROWS) {
            int64_t bb = b0 + threadIdx.y + j;
            if (a < d.a && bb < d.b)
                tile[threadIdx.y + j][threadIdx.x] = in[ioff + bb * d.ist_b + a];
        }
        __syncthreads();
        int64_t bb = b0 + threadIdx.x;
#pragma unroll
        for (int j = 0; j < TILE; j += TILE_ROWS) {
            int64_t aa = a0 + threadIdx.y + j;
            if (aa < d.a && bb < d.b)
                out[ooff + aa * d.ost_a + bb] = tile[threadIdx.x][threadIdx.y + j];
        }
        __syncthreads();
    }
}

struct TransposeLaunch {
    template <typename T>
    static cudaError_t run(void *dst, const void *src, const TileDesc *d, cudaStream_t stream)
    {
        if constexpr (sizeof(T) > 8) {
            return cudaErrorInvalidValue;
        } else {
            int64_t blocks = d->blocks < kMaxBlocks ? d->blocks : kMaxBlocks;
            s4d_launch(transpose_tiled_kernel<T>, (unsigned)blocks, dim3(TILE, TILE_ROWS), 0, stream, 
                (T *)dst, (const T *)src, *d);
            return cudaGetLastError();
        }
    }
};

/* ---- batched 2-D copies --------------------------------------------------------------------- */

constexpr int kBatch = 8;
constexpr int kItems = 4; /* words per thread */

struct Copy2dBatch {
    int n;
    char *dst[kBatch];
    const char *src[kBatch];
    int64_t units[kBatch], total[kBatch], dpitch[kBatch], spitch[kBatch]; /* in words */
    int64_t first_block[kBatch + 1];
    FastDiv div[kBatch];
};

template <typename T, typename Idx>
__global__ void __launch_bounds__(kThreads) copy2d_kernel(Copy2dBatch b)
{
    S4D_KERNEL_BEGIN();
    int p = 0;
    while (p + 1 < b.n && (int64_t)blockIdx.x >= b.first_block[p + 1])
        p++;
    T *out = (T *)b.dst[p];
    const T *in = (const T *)b.src[p];
    const Idx total = (Idx)b.total[p];
    const int64_t units = b.units[p], dp = b.dpitch[p], sp = b.spitch[p];
    const FastDiv div = b.div[p];
    Idx base = (Idx)((int64_t)blockIdx.x - b.first_block[p]) * (kThreads * kItems) + threadIdx.x;
#pragma unroll
    for (int it = 0; it < kItems; it++) {
        Idx i = base + (Idx)it * kThreads;
        if (i < total) {
            Idx row = divq(i, div, units);
            int64_t col = (int64_t)(i - row * (Idx)units);
            out[(int64_t)row * dp + col] = in[(int64_t)row * sp + col];
        }
    }
}

/* Launches parts (each movable in words of T) in groups of kBatch. */
struct Copy2dLaunch {
    template <typename T>
    static cudaError_t run(const s4d_cuda_copy2d *const *parts, int n, cudaStream_t stream)
    {
        const int64_t W = sizeof(T);
        for (int g = 0; g < n; g += kBatch) {
            int m = n - g < kBatch ? n - g : kBatch;
            Copy2dBatch b;
            memset(&b, 0, sizeof b);
            b.n = m;
            bool wide = false;
            int64_t blocks = 0;
            for (int i = 0; i < m; i++) {
                const s4d_cuda_copy2d *p = parts[g + i];
                int64_t units = p->row_bytes / W, total = p->rows * units;
                b.dst[i] = (char *)p->dst;
                b.src[i] = (const char *)p->src;
                b.units[i] = units;
                b.total[i] = total;
                b.dpitch[i] = p->dst_pitch / W;
                b.spitch[i] = p->src_pitch / W;
                b.first_block[i] = blocks;
                b.div[i] = make_div(units);
                wide = wide || !fits32(total + kThreads * kItems);
                blocks += (total + kThreads * kItems - 1) / (kThreads * kItems);
            }
            b.first_block[m] = blocks;
            if (blocks >= ((int64_t)1 << 31))
                return cudaErrorInvalidConfiguration;
            if (wide)
                s4d_launch(copy2d_kernel<T, uint64_t>, (unsigned)blocks, kThreads, 0, stream, b);
            else
                s4d_launch(copy2d_kernel<T, uint32_t>, (unsigned)blocks, kThreads, 0, stream, b);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess)
                return e;
        }
        return cudaSuccess;
    }
};

/* ---- fill ------------------------------------------------------------------------------------ */

template <typename T>
__global__ void __launch_bounds__(kThreads) fill_kernel(T *__restrict__ out, T v, int64_t n)
{
    S4D_KERNEL_BEGIN();
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * kThreads)
        out[i] = v;
}

struct FillLaunch {
    template <typename T>
    static cudaError_t run(void *dst, const unsigned char *value, int64_t n, cudaStream_t stream)
    {
        T v;
        memcpy(&v, value, sizeof v);
        s4d_launch(fill_kernel<T>, (unsigned)blocks_for(n, kThreads), kThreads, 0, stream, (T *)dst, v, n);
        return cudaGetLastError();
    }
};

/* ---- Gather ------------------------------------------------------------------------------------ */

template <typename T, typename I, typename Idx>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(T *__restrict__ out, const T *__restrict__ in, const I *__restrict__ idx,
                  Idx total, FastDiv d_inner, FastDiv d_nidx, int64_t inner, int64_t nidx,
                  int64_t axis_n)
{
    S4D_KERNEL_BEGIN();
    for (Idx i = (Idx)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (Idx)gridDim.x * kThreads) {
        Idx t = divq(i, d_inner, inner);
        int64_t r = (int64_t)(i - t * (Idx)inner);
        Idx o = divq(t, d_nidx, nidx);
        int64_t j = (int64_t)(t - o * (Idx)nidx);
        int64_t v = (int64_t)idx[j];
        if (v < 0)
            v += axis_n;
        T val = T();
        if (v >= 0 && v < axis_n)
            val = in[((int64_t)o * axis_n + v) * inner + r];
        out[i] = val;
    }
}

struct GatherLaunch {
    template <typename T>
    static cudaError_t run(void *dst, const void *src, const void *idx, int idx64, int64_t total,
                           int64_t axis_n, int64_t nidx, int64_t inner, cudaStream_t stream)
    {
        unsigned blocks = (unsigned)blocks_for(total, kThreads);
        FastDiv di = make_div(inner), dn = make_div(nidx);
        if (fits32(total)) {
            if (idx64)
                s4d_launch(gather_kernel<T, int64_t, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int64_t *)idx, (uint32_t)total, di, dn,
                    inner, nidx, axis_n);
            else
                s4d_launch(gather_kernel<T, int32_t, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int32_t *)idx, (uint32_t)total, di, dn,
                    inner, nidx, axis_n);
        } else {
            if (idx64)
                s4d_launch(gather_kernel<T, int64_t, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int64_t *)idx, (uint64_t)total, di, dn,
                    inner, nidx, axis_n);
            else
                s4d_launch(gather_kernel<T, int32_t, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int32_t *)idx, (uint64_t)total, di, dn,
                    inner, nidx, axis_n);
        }
        return cudaGetLastError();
    }
};

/* ---- GatherElements -------------------------------------------------------------------------- */

struct ShapeDesc {
    int rank, axis;
    int64_t dims[MAXR], st[MAXR]; /* index-space dims; element strides of the other tensor */
    FastDiv div[MAXR];
    int64_t axis_n;
};

template <typename T, typename I, typename Idx>
__global__ void __launch_bounds__(kThreads)
    gather_elements_kernel(T *__restrict__ out, const T *__restrict__ in,
                           const I *__restrict__ idx, ShapeDesc d, Idx total)
{
    S4D_KERNEL_BEGIN();
    for (Idx i = (Idx)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (Idx)gridDim.x * kThreads) {
        Idx rem = i;
        int64_t off = 0;
        for (int k = d.rank - 1; k >= 0; k--) {
            Idx q = k > 0 ? divq(rem, d.div[k], d.dims[k]) : (Idx)0;
            int64_t c = (int64_t)(rem - q * (Idx)d.dims[k]);
            if (k != d.axis)
                off += c * d.st[k];
            rem = q;
        }
        int64_t v = (int64_t)idx[i];
        if (v < 0)
            v += d.axis_n;
        T val = T();
        if (v >= 0 && v < d.axis_n)
            val = in[off + v * d.st[d.axis]];
        out[i] = val;
    }
}

struct GatherElementsLaunch {
    template <typename T>
    static cudaError_t run(void *dst, const void *src, const void *idx, int idx64,
                           const ShapeDesc *d, int64_t total, cudaStream_t stream)
    {
        if constexpr (sizeof(T) > 8) {
            return cudaErrorInvalidValue;
        } else {
        unsigned blocks = (unsigned)blocks_for(total, kThreads);
        if (fits32(total)) {
            if (idx64)
                s4d_launch(gather_elements_kernel<T, int64_t, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int64_t *)idx, *d, (uint32_t)total);
            else
                s4d_launch(gather_elements_kernel<T, int32_t, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int32_t *)idx, *d, (uint32_t)total);
        } else {
            if (idx64)
                s4d_launch(gather_elements_kernel<T, int64_t, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int64_t *)idx, *d, (uint64_t)total);
            else
                s4d_launch(gather_elements_kernel<T, int32_t, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)dst, (const T *)src, (const int32_t *)idx, *d, (uint64_t)total);
        }
        return cudaGetLastError();
        }
    }
};

/* ---- GatherND -------------------------------------------------------------------------------- */

struct TupleDesc {
    int k;
    int64_t dims[MAXR], st[MAXR]; /* st in words */
    int64_t per_batch, batch_elems, slice;
    FastDiv d_slice, d_batch;
};

template <typename T, typename Idx>
__global__ void __launch_bounds__(kThreads)
    gather_nd_kernel(T *__restrict__ out, const T *__restrict__ in, const int64_t *__restrict__ idx,
                     TupleDesc d, Idx total)
{
    S4D_KERNEL_BEGIN();
    for (Idx i = (Idx)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (Idx)gridDim.x * kThreads) {
        Idx t = divq(i, d.d_slice, d.slice);
        int64_t j = (int64_t)(i - t * (Idx)d.slice);
        Idx b = divq(t, d.d_batch, d.per_batch);
        const int64_t *tp = idx + (int64_t)t * d.k;
        int64_t off = (int64_t)b * d.batch_elems;
        bool ok = true;
        for (int c = 0; c < d.k; c++) {
            int64_t v = tp[c], n = d.dims[c];
            if (v < 0)
                v += n;
            ok = ok && v >= 0 && v < n;
            off += v * d.st[c];
        }
        out[i] = ok ? in[off + j] : T();
    }
}

struct GatherNDLaunch {
    template <typename T>
    static cudaError_t run(void *dst, const void *src, const int64_t *idx, const TupleDesc *d,
                           int64_t total, cudaStream_t stream)
    {
        unsigned blocks = (unsigned)blocks_for(total, kThreads);
        if (fits32(total))
            s4d_launch(gather_nd_kernel<T, uint32_t>, blocks, kThreads, 0, stream, 
                (T *)dst, (const T *)src, idx, *d, (uint32_t)total);
        else
            s4d_launch(gather_nd_kernel<T, uint64_t>, blocks, kThreads, 0, stream, 
                (T *)dst, (const T *)src, idx, *d, (uint64_t)total);
        return cudaGetLastError();
    }
};

/* ---- scatter reductions ------------------------------------------------------------------------ */

/*
 * combine(a, b, red) as the host reference computes it (src/ops/scatter.c):
 * floats through double, stored back to the element type after each update;
 * integers through int64 with wrap-around, narrow types saturated on store;
 * reduction 0 (none) takes b. Raw words only ever take b.
 */
template <typename T> struct Combine {
    static __device__ __forceinline__ T apply(T a, T b, int red)
    {
        (void)a;
        (void)red;
        return b;
    }
};

__device__ __forceinline__ double combine_f64(double a, double b, int red)
{
    switch (red) {
    case 1: return __dadd_rn(a, b);
    case 2: return __dmul_rn(a, b);
    case 3: return a > b ? a : b;
    case 4: return a < b ? a : b;
    default: return b;
    }
}

__device__ __forceinline__ int64_t combine_i64(int64_t a, int64_t b, int red)
{
    switch (red) {
    case 1: return (int64_t)((uint64_t)a + (uint64_t)b);
    case 2: return (int64_t)((uint64_t)a * (uint64_t)b);
    case 3: return a > b ? a : b;
    case 4: return a < b ? a : b;
    default: return b;
    }
}

template <> struct Combine<float> {
    static __device__ __forceinline__ float apply(float a, float b, int red)
    {
        return (float)combine_f64(a, b, red);
    }
};

template <> struct Combine<double> {
    static __device__ __forceinline__ double apply(double a, double b, int red)
    {
        return combine_f64(a, b, red);
    }
};

template <> struct Combine<__half> {
    static __device__ __forceinline__ __half apply(__half a, __half b, int red)
    {
        double r = combine_f64(__half2float(a), __half2float(b), red);
        return __float2half_rn((float)r);
    }
};

template <> struct Combine<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 apply(__nv_bfloat16 a, __nv_bfloat16 b, int red)
    {
        double r = combine_f64(__bfloat162float(a), __bfloat162float(b), red);
        return __float2bfloat16_rn((float)r);
    }
};

/* Narrow integers: the int64 result saturated to [lo, hi], as the host's store through double. */
template <typename T, int64_t LO, int64_t HI> struct CombineNarrow {
    static __device__ __forceinline__ T apply(T a, T b, int red)
    {
        int64_t r = combine_i64((int64_t)a, (int64_t)b, red);
        return (T)(r < LO ? LO : r > HI ? HI : r);
    }
};

template <> struct Combine<int8_t> : CombineNarrow<int8_t, -128, 127> {};
template <> struct Combine<uint8_t> : CombineNarrow<uint8_t, 0, 255> {};
template <> struct Combine<int16_t> : CombineNarrow<int16_t, -32768, 32767> {};
template <> struct Combine<uint16_t> : CombineNarrow<uint16_t, 0, 65535> {};
template <> struct Combine<int32_t> : CombineNarrow<int32_t, INT32_MIN, INT32_MAX> {};
template <> struct Combine<uint32_t> : CombineNarrow<uint32_t, 0, UINT32_MAX> {};

template <> struct Combine<int64_t> {
    static __device__ __forceinline__ int64_t apply(int64_t a, int64_t b, int red)
    {
        return combine_i64(a, b, red);
    }
};

/* uint64: the host combines the bits as int64 and stores through double. */
template <> struct Combine<uint64_t> {
    static __device__ __forceinline__ uint64_t apply(uint64_t a, uint64_t b, int red)
    {
        if (red == 0)
            return b;
        double v = (double)combine_i64((int64_t)a, (int64_t)b, red);
        return v <= 0 ? 0 : v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
    }
};

/* A "raw" word of B bytes (reduction none only): a distinct type so Combine takes b. */
template <int B> struct Raw {
    typename Word<B>::T w;
};

/* Calls F::template run<T>(args...) with T the C++ type of scalar type st. */
template <typename F, typename... A> cudaError_t by_scalar(s4d_cuda_scalar st, int64_t es, A... args)
{
    switch (st) {
    case S4D_CUDA_F32: return F::template run<float>(args...);
    case S4D_CUDA_F64: return F::template run<double>(args...);
    case S4D_CUDA_F16: return F::template run<__half>(args...);
    case S4D_CUDA_BF16: return F::template run<__nv_bfloat16>(args...);
    case S4D_CUDA_I8: return F::template run<int8_t>(args...);
    case S4D_CUDA_U8: return F::template run<uint8_t>(args...);
    case S4D_CUDA_I16: return F::template run<int16_t>(args...);
    case S4D_CUDA_U16: return F::template run<uint16_t>(args...);
    case S4D_CUDA_I32: return F::template run<int32_t>(args...);
    case S4D_CUDA_U32: return F::template run<uint32_t>(args...);
    case S4D_CUDA_I64: return F::template run<int64_t>(args...);
    case S4D_CUDA_U64: return F::template run<uint64_t>(args...);
    case S4D_CUDA_RAW:
        switch (es) {
        case 1: return F::template run<Raw<1>>(args...);
        case 2: return F::template run<Raw<2>>(args...);
        case 4: return F::template run<Raw<4>>(args...);
        case 8: return F::template run<Raw<8>>(args...);
        default: return cudaErrorInvalidValue;
        }
    }
    return cudaErrorInvalidValue;
}

/* ---- ScatterElements ---------------------------------------------------------------------------- */

struct ScatterElemDesc {
    int rank, axis, red;
    int64_t ddims[MAXR];   /* data (output) dims */
    int64_t idims[MAXR];   /* indices / updates dims */
    int64_t ist[MAXR];     /* their element strides */
    FastDiv div[MAXR];
};

/* One thread per output element: the updates that can land on it lie along the axis. */
template <typename T, typename I, typename Idx>
__global__ void __launch_bounds__(kThreads)
    scatter_elements_kernel(T *__restrict__ out, const T *__restrict__ data,
                            const I *__restrict__ idx, const T *__restrict__ upd,
                            ScatterElemDesc d, Idx total)
{
    S4D_KERNEL_BEGIN();
    for (Idx i = (Idx)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (Idx)gridDim.x * kThreads) {
        T acc = data[i];
        Idx rem = i;
        int64_t pos = 0, ca = 0;
        bool reach = true;
        for (int k = d.rank - 1; k >= 0; k--) {
            Idx q = k > 0 ? divq(rem, d.div[k], d.ddims[k]) : (Idx)0;
            int64_t c = (int64_t)(rem - q * (Idx)d.ddims[k]);
            if (k == d.axis)
                ca = c;
            else {
                reach = reach && c < d.idims[k];
                pos += c * d.ist[k];
            }
            rem = q;
        }
        if (reach) {
            const int64_t n = d.ddims[d.axis], step = d.ist[d.axis];
            for (int64_t j = 0; j < d.idims[d.axis]; j++, pos += step) {
                int64_t v = (int64_t)idx[pos];
                if (v < 0)
                    v += n;
                if (v == ca)
                    acc = Combine<T>::apply(acc, upd[pos], d.red);
            }
        }
        out[i] = acc;
    }
}

struct ScatterElementsLaunch {
    template <typename T>
    static cudaError_t run(void *out, const void *data, const void *idx, int idx64,
                           const void *upd, const ScatterElemDesc *d, int64_t total,
                           cudaStream_t stream)
    {
        unsigned blocks = (unsigned)blocks_for(total, kThreads);
        const T *dt = (const T *)data, *up = (const T *)upd;
        if (fits32(total)) {
            if (idx64)
                s4d_launch(scatter_elements_kernel<T, int64_t, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)out, dt, (const int64_t *)idx, up, *d, (uint32_t)total);
            else
                s4d_launch(scatter_elements_kernel<T, int32_t, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)out, dt, (const int32_t *)idx, up, *d, (uint32_t)total);
        } else {
            if (idx64)
                s4d_launch(scatter_elements_kernel<T, int64_t, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)out, dt, (const int64_t *)idx, up, *d, (uint64_t)total);
            else
                s4d_launch(scatter_elements_kernel<T, int32_t, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)out, dt, (const int32_t *)idx, up, *d, (uint64_t)total);
        }
        return cudaGetLastError();
    }
};

/* ---- ScatterND -------------------------------------------------------------------------------------- */

struct SlotDesc {
    int k;
    int64_t dims[MAXR], st[MAXR]; /* st in slots */
};

/* Slot of each update (-1: an index out of range); with `win`, the last update per slot. */
__global__ void __launch_bounds__(kThreads)
    scatter_nd_slots_kernel(int64_t *__restrict__ slot, int *__restrict__ win,
                            const int64_t *__restrict__ idx, SlotDesc d, int64_t nupd)
{
    S4D_KERNEL_BEGIN();
    for (int64_t u = (int64_t)blockIdx.x * kThreads + threadIdx.x; u < nupd;
         u += (int64_t)gridDim.x * kThreads) {
        const int64_t *tp = idx + u * d.k;
        int64_t s = 0;
        bool ok = true;
        for (int c = 0; c < d.k; c++) {
            int64_t v = tp[c], n = d.dims[c];
            if (v < 0)
                v += n;
            ok = ok && v >= 0 && v < n;
            s += v * d.st[c];
        }
        slot[u] = ok ? s : -1;
        /* Integer max: the same winner whatever the order the atomics land in. */
        if (ok && win)
            atomicMax(win + s, (int)u);
    }
}

/* Reduction none: each update slice that won its slot is copied there. */
template <typename T, typename Idx>
__global__ void __launch_bounds__(kThreads)
    scatter_nd_write_kernel(T *__restrict__ out, const T *__restrict__ upd,
                            const int64_t *__restrict__ slot, const int *__restrict__ win,
                            int64_t slice, FastDiv d_slice, Idx total)
{
    S4D_KERNEL_BEGIN();
    for (Idx i = (Idx)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (Idx)gridDim.x * kThreads) {
        Idx u = divq(i, d_slice, slice);
        int64_t j = (int64_t)(i - u * (Idx)slice);
        int64_t s = slot[u];
        if (s >= 0 && win[s] == (int)u)
            out[s * slice + j] = upd[i];
    }
}

/* Reductions: one thread per output element of each slot, applying that slot's updates in order. */
template <typename T, typename Idx>
__global__ void __launch_bounds__(kThreads)
    scatter_nd_reduce_kernel(T *__restrict__ out, const T *__restrict__ data,
                             const T *__restrict__ upd, const int64_t *__restrict__ slot,
                             int64_t nupd, int64_t slice, FastDiv d_slice, int red, Idx total)
{
    S4D_KERNEL_BEGIN();
    for (Idx i = (Idx)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (Idx)gridDim.x * kThreads) {
        Idx s = divq(i, d_slice, slice);
        int64_t j = (int64_t)(i - s * (Idx)slice);
        T acc = data[i];
        for (int64_t u = 0; u < nupd; u++)
            if (slot[u] == (int64_t)s)
                acc = Combine<T>::apply(acc, upd[u * slice + j], red);
        out[i] = acc;
    }
}

struct ScatterNDLaunch {
    template <typename T>
    static cudaError_t run(void *out, const void *data, const void *upd, const int64_t *slot,
                           const int *win, int red, int64_t nslots, int64_t slice, int64_t nupd,
                           cudaStream_t stream)
    {
        FastDiv ds = make_div(slice);
        if (red == 0) {
            int64_t total = nupd * slice;
            unsigned blocks = (unsigned)blocks_for(total, kThreads);
            if (fits32(total))
                s4d_launch(scatter_nd_write_kernel<T, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)out, (const T *)upd, slot, win, slice, ds, (uint32_t)total);
            else
                s4d_launch(scatter_nd_write_kernel<T, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)out, (const T *)upd, slot, win, slice, ds, (uint64_t)total);
        } else {
            int64_t total = nslots * slice;
            unsigned blocks = (unsigned)blocks_for(total, kThreads);
            if (fits32(total))
                s4d_launch(scatter_nd_reduce_kernel<T, uint32_t>, blocks, kThreads, 0, stream, 
                    (T *)out, (const T *)data, (const T *)upd, slot, nupd, slice, ds, red,
                    (uint32_t)total);
            else
                s4d_launch(scatter_nd_reduce_kernel<T, uint64_t>, blocks, kThreads, 0, stream, 
                    (T *)out, (const T *)data, (const T *)upd, slot, nupd, slice, ds, red,
                    (uint64_t)total);
        }
        return cudaGetLastError();
    }
};

/* ---- Resize ------------------------------------------------------------------------------------------ */

constexpr int RMAX = S4D_CUDA_RESIZE_MAX_AXES;
constexpr int LMAX = S4D_CUDA_RESIZE_MAX_LINEAR;

struct ResizeDesc {
    int naxes;
    int64_t in_block;
    int64_t dims[RMAX + 1]; /* [outer, table axes...] */
    int64_t base[RMAX];
    FastDiv div[RMAX + 1];
    int lin_slot[RMAX];     /* table axis -> its linear number, or -1 */
    int always[LMAX];
    const int64_t *off0, *off1;
    const float *w;
};

/* The host's blend (resize.c axis_rows): a + w * (b - a), skipped where w == 0 unless always. */
__device__ __forceinline__ float blend(float a, float b, float w, int always)
{
    if (!always && w == 0.0f)
        return a;
    return __fadd_rn(a, __fmul_rn(w, __fsub_rn(b, a)));
}

/*
 * One output element (VEC consecutive ones along the last axis for nearest)
 * per thread. NLIN linear axes give 2^NLIN corners, blended along the first
 * linear axis first, as the host's passes do one axis after another.
 */
/* Resize values: float32, or float16 blended in float and rounded once (nearest copies exactly). */
__device__ __forceinline__ float rz_load(float v) { return v; }
__device__ __forceinline__ float rz_load(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T rz_store(float v);
template <> __device__ __forceinline__ float rz_store<float>(float v) { return v; }
template <> __device__ __forceinline__ __half rz_store<__half>(float v) { return __float2half_rn(v); }

template <typename T, int NLIN, int VEC, typename Idx>
__global__ void __launch_bounds__(kThreads)
    resize_kernel(T *__restrict__ y, const T *__restrict__ x, ResizeDesc d, Idx total)
{
    S4D_KERNEL_BEGIN();
    for (Idx v = (Idx)blockIdx.x * kThreads + threadIdx.x; v < total;
         v += (Idx)gridDim.x * kThreads) {
        Idx rem = v * (Idx)VEC;
        int64_t off = 0, o0[NLIN > 0 ? NLIN : 1], o1[NLIN > 0 ? NLIN : 1];
        float w[NLIN > 0 ? NLIN : 1];
        int64_t last_c = 0;
        for (int k = d.naxes; k >= 1; k--) {
            Idx q = divq(rem, d.div[k], d.dims[k]);
            int64_t c = (int64_t)(rem - q * (Idx)d.dims[k]);
            rem = q;
            int64_t t = d.base[k - 1] + c;
            int l = d.lin_slot[k - 1];
            if (VEC > 1 && k == d.naxes) {
                last_c = t;
                continue;
            }
            if (NLIN > 0 && l >= 0) {
#pragma unroll
                for (int m = 0; m < (NLIN > 0 ? NLIN : 1); m++)
                    if (m == l) {
                        o0[m] = d.off0[t];
                        o1[m] = d.off1[t];
                        w[m] = d.w[t];
                    }
            } else {
                off += d.off0[t];
            }
        }
        off += (int64_t)rem * d.in_block;
        if constexpr (VEC > 1) {
            T r[VEC];
#pragma unroll
            for (int e = 0; e < VEC; e++)
                r[e] = x[off + d.off0[last_c + e]];
            if constexpr (VEC == 4 && sizeof(T) == 4)
                *(float4 *)(y + (int64_t)v * VEC) = make_float4(r[0], r[1], r[2], r[3]);
            else
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    y[(int64_t)v * VEC + e] = r[e];
        } else if constexpr (NLIN == 0) {
            y[v] = x[off];
        } else {
            float c[1 << NLIN];
#pragma unroll
            for (int q = 0; q < (1 << NLIN); q++) {
                int64_t o = off;
#pragma unroll
                for (int m = 0; m < NLIN; m++)
                    o += (q >> m) & 1 ? o1[m] : o0[m];
                c[q] = rz_load(x[o]);
            }
#pragma unroll
            for (int m = 0; m < NLIN; m++)
#pragma unroll
                for (int q = 0; q < (1 << (NLIN - 1 - m)); q++)
                    c[q] = blend(c[2 * q], c[2 * q + 1], w[m], d.always[m]);
            y[v] = rz_store<T>(c[0]);
        }
    }
}

template <int NLIN, int VEC, typename T>
cudaError_t resize_launch(T *y, const T *x, const ResizeDesc &d, int64_t total,
                          cudaStream_t stream)
{
    unsigned blocks = (unsigned)blocks_for(total, kThreads);
    if (fits32(total * VEC))
        s4d_launch(resize_kernel<T, NLIN, VEC, uint32_t>, blocks, kThreads, 0, stream, y, x, d,
                                                                                (uint32_t)total);
    else
        s4d_launch(resize_kernel<T, NLIN, VEC, uint64_t>, blocks, kThreads, 0, stream, y, x, d,
                                                                                (uint64_t)total);
    return cudaGetLastError();
}

/* ---- GridSample ---------------------------------------------------------------------------------------- */

struct GridDesc {
    int64_t n, c, h, w, opl, npts, cchunk;
    int linear, pad, align;
};

/* Reflect x into the range whose doubled bounds are [lo2, hi2] (grid_sample.c). */
__device__ double gs_reflect(double x, double lo2, double hi2)
{
    if (lo2 == hi2)
        return 0.0;
    double mn = lo2 / 2, span = __dsub_rn(hi2, lo2) / 2;
    x = fabs(__dsub_rn(x, mn));
    double extra = fmod(x, span);
    int64_t flips = (int64_t)floor(x / span);
    return (flips % 2 == 0) ? __dadd_rn(extra, mn) : __dadd_rn(__dsub_rn(span, extra), mn);
}

__device__ double gs_coord(double g, int64_t size, int pad, int align)
{
    double x = align ? __dmul_rn(__dadd_rn(g, 1.0) / 2, (double)(size - 1))
                     : __dsub_rn(__dmul_rn(__dadd_rn(g, 1.0), (double)size), 1.0) / 2;
    if (pad == 1) {
        x = x < 0 ? 0 : x > (double)(size - 1) ? (double)(size - 1) : x;
    } else if (pad == 2) {
        x = align ? gs_reflect(x, 0, 2.0 * (double)(size - 1))
                  : gs_reflect(x, -1, __dsub_rn(2.0 * (double)size, 1.0));
        x = x < 0 ? 0 : x > (double)(size - 1) ? (double)(size - 1) : x;
    }
    return x;
}

/*
 * One thread per output location and chunk of channels: the location's
 * corners and weights are worked out once, then each channel's plane is
 * read at them; a warp writes 32 neighbouring locations of one channel, so
 * the stores are coalesced.
 */
__global__ void __launch_bounds__(128)
    grid_sample_kernel(float *__restrict__ y, const float *__restrict__ x,
                       const float *__restrict__ grid, GridDesc d)
{
    S4D_KERNEL_BEGIN();
    int64_t pt = (int64_t)blockIdx.x * 128 + threadIdx.x;
    if (pt >= d.npts)
        return;
    int64_t c0 = (int64_t)blockIdx.y * d.cchunk;
    int64_t c1 = c0 + d.cchunk < d.c ? c0 + d.cchunk : d.c;
    int64_t b = pt / d.opl, q = pt - b * d.opl, plane = d.h * d.w;
    const float *xs = x + (b * d.c + c0) * plane;
    float *ys = y + (b * d.c + c0) * d.opl + q;
    double gx = gs_coord((double)grid[2 * pt], d.w, d.pad, d.align);
    double gy = gs_coord((double)grid[2 * pt + 1], d.h, d.pad, d.align);
    int64_t nc = c1 - c0;
    if (gx != gx || gy != gy) {
        /* A NaN location samples nothing. */
        float v = d.pad == 0 ? 0.0f : __int_as_float(0x7fc00000);
        for (int64_t c = 0; c < nc; c++)
            ys[c * d.opl] = v;
        return;
    }
    if (!d.linear) {
        double rx = rint(gx), ry = rint(gy);
        bool inside = rx >= 0 && rx <= (double)(d.w - 1) && ry >= 0 && ry <= (double)(d.h - 1);
        int64_t at = inside ? (int64_t)ry * d.w + (int64_t)rx : 0;
#pragma unroll 4
        for (int64_t c = 0; c < nc; c++)
            ys[c * d.opl] = inside ? xs[c * plane + at] : 0.0f;
        return;
    }
    double fx = floor(gx), fy = floor(gy);
    int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;
    float lx = (float)__dsub_rn(gx, fx), ly = (float)__dsub_rn(gy, fy);
    float w0 = __fmul_rn(1 - lx, 1 - ly), w1 = __fmul_rn(lx, 1 - ly);
    float w2 = __fmul_rn(1 - lx, ly), w3 = __fmul_rn(lx, ly);
    bool xin0 = x0 >= 0 && x0 < d.w, xin1 = x0 + 1 >= 0 && x0 + 1 < d.w;
    bool yin0 = y0 >= 0 && y0 < d.h, yin1 = y0 + 1 >= 0 && y0 + 1 < d.h;
    bool v0 = xin0 && yin0, v1 = xin1 && yin0, v2 = xin0 && yin1, v3 = xin1 && yin1;
    int64_t p0 = y0 * d.w + x0;
    /* Corners outside the map are neither read nor added, as on the host. */
#pragma unroll 4
    for (int64_t c = 0; c < nc; c++) {
        const float *s = xs + c * plane + p0;
        float v = 0.0f;
        if (v0)
            v = __fadd_rn(v, __fmul_rn(w0, s[0]));
        if (v1)
            v = __fadd_rn(v, __fmul_rn(w1, s[1]));
        if (v2)
            v = __fadd_rn(v, __fmul_rn(w2, s[d.w]));
        if (v3)
            v = __fadd_rn(v, __fmul_rn(w3, s[d.w + 1]));
        ys[c * d.opl] = v;
    }
}

} /* namespace */

/* ---- launchers ------------------------------------------------------------------------------------------ */

extern "C" cudaError_t s4d_cuda_copy_strided(void *dst, const void *src, int64_t elem_size,
                                             int rank, const int64_t *dims,
                                             const int64_t *dst_st, const int64_t *src_st,
                                             cudaStream_t stream)
{
    if (rank < 0 || rank > MAXD)
        return cudaErrorInvalidValue;
    /* Drop size-1 dims; merge neighbours that are contiguous on both sides. */
    int64_t d[MAXD], ds[MAXD], ss[MAXD];
    int r = 0;
    int64_t total = 1;
    for (int k = 0; k < rank; k++) {
        total *= dims[k];
        if (dims[k] == 1)
            continue;
        if (r > 0 && ds[r - 1] == dst_st[k] * dims[k] && ss[r - 1] == src_st[k] * dims[k]) {
            d[r - 1] *= dims[k];
            ds[r - 1] = dst_st[k];
            ss[r - 1] = src_st[k];
        } else {
            d[r] = dims[k];
            ds[r] = dst_st[k];
            ss[r] = src_st[k];
            r++;
        }
    }
    if (total == 0)
        return cudaSuccess;
    if (r == 0) {
        d[0] = 1;
        ds[0] = ss[0] = 1;
        r = 1;
    }
    int64_t es = elem_size;
    /* Wider words when the innermost run is contiguous on both sides and everything lines up. */
    if (ds[r - 1] == 1 && ss[r - 1] == 1) {
        int64_t w = vector_width(es, d[r - 1], dst, src);
        for (int k = 0; k < r - 1 && w > es; k++)
            while (w > es && ((ds[k] * es) % w || (ss[k] * es) % w))
                w /= 2;
        if (w > es) {
            int64_t f = w / es;
            d[r - 1] /= f;
            for (int k = 0; k < r - 1; k++) {
                ds[k] /= f;
                ss[k] /= f;
            }
            total /= f;
            es = w;
        }
    }
    if (r == 1 && ds[0] == 1 && ss[0] == 1)
        return cudaMemcpyAsync(dst, src, (size_t)(total * es), cudaMemcpyDeviceToDevice, stream);
    StridedDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.rank = r;
    for (int k = 0; k < r; k++) {
        desc.dims[k] = d[k];
        desc.sst[k] = ss[k];
        desc.dst[k] = ds[k];
        desc.div[k] = make_div(d[k]);
    }
    return by_size<StridedLaunch>(es, dst, src, (const StridedDesc *)&desc, total, stream);
}

extern "C" cudaError_t s4d_cuda_transpose(void *dst, const void *src, int64_t elem_size, int rank,
                                          const int64_t *odims, const int64_t *ist,
                                          cudaStream_t stream)
{
    if (rank < 1 || rank > MAXR)
        return cudaErrorInvalidValue;
    int64_t ost[MAXR], total = 1;
    for (int k = rank - 1; k >= 0; k--) {
        ost[k] = total;
        total *= odims[k];
    }
    if (total == 0)
        return cudaSuccess;
    int ta = -1;
    for (int k = 0; k < rank - 1; k++)
        if (ist[k] == 1 && odims[k] > 1)
            ta = k;
    /* The innermost output dim reads the input contiguously (or nothing does): a strided copy. */
    if (ist[rank - 1] == 1 || ta < 0 || elem_size > 8)
        return s4d_cuda_copy_strided(dst, src, elem_size, rank, odims, ost, ist, stream);
    TileDesc d;
    memset(&d, 0, sizeof d);
    for (int k = 0; k < rank - 1; k++) {
        if (k == ta)
            continue;
        d.bdims[d.nb] = odims[k];
        d.bist[d.nb] = ist[k];
        d.bost[d.nb] = ost[k];
        d.nb++;
    }
    d.a = odims[ta];
    d.b = odims[rank - 1];
    d.ist_b = ist[rank - 1];
    d.ost_a = ost[ta];
    d.tiles_a = (d.a + TILE - 1) / TILE;
    d.tiles_b = (d.b + TILE - 1) / TILE;
    d.blocks = total / (d.a * d.b) * d.tiles_a * d.tiles_b;
    return by_size<TransposeLaunch>(elem_size, dst, src, (const TileDesc *)&d, stream);
}

extern "C" cudaError_t s4d_cuda_copy2d_batched(const s4d_cuda_copy2d *parts, int n,
                                               cudaStream_t stream)
{
    /* Parts go in groups by the widest word each allows. */
    const s4d_cuda_copy2d *group[5][64];
    for (int g0 = 0; g0 < n; g0 += 64) {
        int m = n - g0 < 64 ? n - g0 : 64, cnt[5] = {0, 0, 0, 0, 0};
        for (int i = 0; i < m; i++) {
            const s4d_cuda_copy2d *p = &parts[g0 + i];
            if (p->rows <= 0 || p->row_bytes <= 0)
                continue;
            int c = 0; /* 16, 8, 4, 2, 1 bytes */
            for (int64_t w = 16; w > 1; w /= 2, c++)
                if (p->row_bytes % w == 0 && p->dst_pitch % w == 0 && p->src_pitch % w == 0 &&
                    aligned(p->dst, w) && aligned(p->src, w))
                    break;
            group[c][cnt[c]++] = p;
        }
        static const int64_t widths[5] = {16, 8, 4, 2, 1};
        for (int c = 0; c < 5; c++) {
            if (!cnt[c])
                continue;
            cudaError_t e = by_size<Copy2dLaunch>(widths[c], (const s4d_cuda_copy2d *const *)group[c],
                                                  cnt[c], stream);
            if (e != cudaSuccess)
                return e;
        }
    }
    return cudaSuccess;
}

extern "C" cudaError_t s4d_cuda_fill(void *dst, int64_t elem_size, const void *value,
                                     int64_t count, cudaStream_t stream)
{
    if (count <= 0)
        return cudaSuccess;
    if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8)
        return cudaErrorInvalidValue;
    unsigned char pattern[16];
    for (int i = 0; i < 16; i++)
        pattern[i] = ((const unsigned char *)value)[i % elem_size];
    int64_t bytes = count * elem_size, w = 16;
    while (w > elem_size && (bytes % w || !aligned(dst, w)))
        w /= 2;
    return by_size<FillLaunch>(w, dst, (const unsigned char *)pattern, bytes / w, stream);
}

extern "C" cudaError_t s4d_cuda_gather(void *dst, const void *src, const void *idx, int idx64,
                                       int64_t elem_size, int64_t outer, int64_t axis_n,
                                       int64_t nidx, int64_t inner, cudaStream_t stream)
{
    int64_t total = outer * nidx * inner;
    if (total <= 0)
        return cudaSuccess;
    int64_t w = vector_width(elem_size, inner, dst, src);
    int64_t units = inner * elem_size / w;
    return by_size<GatherLaunch>(w, dst, src, idx, idx64, outer * nidx * units, axis_n, nidx,
                                 units, stream);
}

extern "C" cudaError_t s4d_cuda_gather_elements(void *dst, const void *src, const void *idx,
                                                int idx64, int64_t elem_size, int rank,
                                                const int64_t *idims, const int64_t *src_st,
                                                int axis, int64_t axis_n, cudaStream_t stream)
{
    if (rank < 1 || rank > MAXR || axis < 0 || axis >= rank)
        return cudaErrorInvalidValue;
    ShapeDesc d;
    memset(&d, 0, sizeof d);
    d.rank = rank;
    d.axis = axis;
    d.axis_n = axis_n;
    int64_t total = 1;
    for (int k = 0; k < rank; k++) {
        d.dims[k] = idims[k];
        d.st[k] = src_st[k];
        d.div[k] = make_div(idims[k]);
        total *= idims[k];
    }
    if (total <= 0)
        return cudaSuccess;
    return by_size<GatherElementsLaunch>(elem_size, dst, src, idx, idx64, (const ShapeDesc *)&d,
                                         total, stream);
}

extern "C" cudaError_t s4d_cuda_gather_nd(void *dst, const void *src, const int64_t *idx,
                                          int64_t elem_size, int64_t ntuples, int64_t per_batch,
                                          int k, const int64_t *dims, const int64_t *st,
                                          int64_t batch_elems, int64_t slice, cudaStream_t stream)
{
    if (ntuples <= 0 || slice <= 0)
        return cudaSuccess;
    if (k < 1 || k > MAXR || per_batch < 1)
        return cudaErrorInvalidValue;
    /* Every offset is a multiple of the slice, so a word that divides the slice divides all. */
    int64_t w = vector_width(elem_size, slice, dst, src), f = w / elem_size;
    TupleDesc d;
    memset(&d, 0, sizeof d);
    d.k = k;
    for (int c = 0; c < k; c++) {
        d.dims[c] = dims[c];
        d.st[c] = st[c] / f;
    }
    d.per_batch = per_batch;
    d.batch_elems = batch_elems / f;
    d.slice = slice / f;
    d.d_slice = make_div(d.slice);
    d.d_batch = make_div(per_batch);
    return by_size<GatherNDLaunch>(w, dst, src, idx, (const TupleDesc *)&d, ntuples * d.slice,
                                   stream);
}

extern "C" cudaError_t s4d_cuda_scatter_elements(void *out, const void *data, const void *idx,
                                                 int idx64, const void *upd, s4d_cuda_scalar type,
                                                 int64_t elem_size, int reduction, int rank,
                                                 const int64_t *ddims, const int64_t *idims,
                                                 int axis, cudaStream_t stream)
{
    if (rank < 1 || rank > MAXR || axis < 0 || axis >= rank || reduction < 0 || reduction > 4 ||
        (type == S4D_CUDA_RAW && reduction != 0))
        return cudaErrorInvalidValue;
    ScatterElemDesc d;
    memset(&d, 0, sizeof d);
    d.rank = rank;
    d.axis = axis;
    d.red = reduction;
    int64_t total = 1, s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        d.ddims[k] = ddims[k];
        d.idims[k] = idims[k];
        d.ist[k] = s;
        d.div[k] = make_div(ddims[k]);
        s *= idims[k];
        total *= ddims[k];
    }
    if (total <= 0)
        return cudaSuccess;
    return by_scalar<ScatterElementsLaunch>(type, elem_size, out, data, idx, idx64, upd,
                                            (const ScatterElemDesc *)&d, total, stream);
}

static size_t align16(size_t n)
{
    return (n + 15) / 16 * 16;
}

extern "C" size_t s4d_cuda_scatter_nd_workspace(int64_t nslots, int64_t nupd)
{
    return align16(sizeof(int) * (size_t)(nslots > 0 ? nslots : 0)) +
           align16(sizeof(int64_t) * (size_t)(nupd > 0 ? nupd : 0));
}

extern "C" cudaError_t s4d_cuda_scatter_nd(void *out, const void *data, const int64_t *idx,
                                           const void *upd, s4d_cuda_scalar type,
                                           int64_t elem_size, int reduction, int64_t nslots,
                                           int64_t slice, int64_t nupd, int k,
                                           const int64_t *dims, const int64_t *st,
                                           void *workspace, cudaStream_t stream)
{
    if (k < 1 || k > MAXR || reduction < 0 || reduction > 4 || nupd >= ((int64_t)1 << 31) ||
        (type == S4D_CUDA_RAW && reduction != 0))
        return cudaErrorInvalidValue;
    int64_t total = nslots * slice;
    if (total <= 0)
        return cudaSuccess;
    int *win = (int *)workspace;
    int64_t *slot = (int64_t *)((char *)workspace + align16(sizeof(int) * (size_t)nslots));
    cudaError_t e;
    if (reduction == 0) {
        if (out != data &&
            (e = cudaMemcpyAsync(out, data, (size_t)(total * elem_size), cudaMemcpyDeviceToDevice,
                                 stream)) != cudaSuccess)
            return e;
        if (nupd <= 0)
            return cudaSuccess;
        /* 0xff bytes: every slot starts at -1, below any update number. */
        if ((e = cudaMemsetAsync(win, 0xff, sizeof(int) * (size_t)nslots, stream)) != cudaSuccess)
            return e;
    } else {
        win = NULL;
    }
    SlotDesc sd;
    memset(&sd, 0, sizeof sd);
    sd.k = k;
    for (int c = 0; c < k; c++) {
        sd.dims[c] = dims[c];
        sd.st[c] = st[c];
    }
    if (nupd > 0) {
        s4d_launch(scatter_nd_slots_kernel, (unsigned)blocks_for(nupd, kThreads), kThreads, 0, stream, 
            slot, win, idx, sd, nupd);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    if (reduction == 0) {
        /* Moved by whole words: the slice of every update is contiguous on both sides. */
        int64_t w = vector_width(elem_size, slice, out, upd), f = w / elem_size;
        return by_size<ScatterNDLaunch>(w, out, data, upd, (const int64_t *)slot, (const int *)win,
                                        0, nslots, slice / f, nupd, stream);
    }
    return by_scalar<ScatterNDLaunch>(type, elem_size, out, data, upd, (const int64_t *)slot,
                                      (const int *)NULL, reduction, nslots, slice, nupd, stream);
}

template <typename T>
static cudaError_t resize_typed(T *y, const T *x, const s4d_cuda_resize *r, cudaStream_t stream)
{
    if (r->naxes < 1 || r->naxes > RMAX || r->nlin < 0 || r->nlin > LMAX ||
        (!r->linear && r->nlin))
        return cudaErrorInvalidValue;
    ResizeDesc d;
    memset(&d, 0, sizeof d);
    d.naxes = r->naxes;
    d.in_block = r->in_block;
    d.dims[0] = r->outer;
    d.div[0] = make_div(r->outer);
    int64_t total = r->outer;
    for (int k = 0; k < r->naxes; k++) {
        d.dims[k + 1] = r->out_dims[k];
        d.base[k] = r->base[k];
        d.lin_slot[k] = -1;
        total *= r->out_dims[k];
    }
    for (int m = 0; m < r->nlin; m++) {
        d.lin_slot[r->lin_axis[m]] = m;
        d.always[m] = r->always_blend[m];
    }
    d.off0 = r->off0;
    d.off1 = r->off1;
    d.w = r->w;
    if (total <= 0)
        return cudaSuccess;
    int64_t last = r->out_dims[r->naxes - 1];
    for (int k = 0; k <= r->naxes; k++)
        d.div[k] = make_div(d.dims[k]);
    /* Nearest (or nothing to blend): four outputs of a row per thread when rows come in
       fours, one float4 store (float16: four stores). */
    if (r->nlin == 0 && last % 4 == 0 && aligned(y, 4 * sizeof(T)))
        return resize_launch<0, 4>(y, x, d, total / 4, stream);
    switch (r->nlin) {
    case 0: return resize_launch<0, 1>(y, x, d, total, stream);
    case 1: return resize_launch<1, 1>(y, x, d, total, stream);
    case 2: return resize_launch<2, 1>(y, x, d, total, stream);
    default: return resize_launch<3, 1>(y, x, d, total, stream);
    }
}

extern "C" cudaError_t s4d_cuda_resize_f32(float *y, const float *x, const s4d_cuda_resize *r,
                                           cudaStream_t stream)
{
    return resize_typed<float>(y, x, r, stream);
}

extern "C" cudaError_t s4d_cuda_resize_f16(void *y, const void *x, const s4d_cuda_resize *r,
                                           cudaStream_t stream)
{
    return resize_typed<__half>(static_cast<__half *>(y), static_cast<const __half *>(x), r, stream);
}

extern "C" cudaError_t s4d_cuda_grid_sample_f32(float *y, const float *x, const float *grid,
                                                int64_t n, int64_t c, int64_t h, int64_t w,
                                                int64_t ho, int64_t wo, int linear, int pad,
                                                int align, cudaStream_t stream)
{
    int64_t npts = n * ho * wo;
    if (npts <= 0 || c <= 0)
        return cudaSuccess;
    if (h <= 0 || w <= 0)
        return cudaMemsetAsync(y, 0, sizeof(float) * (size_t)(npts * c), stream);
    GridDesc d;
    d.n = n;
    d.c = c;
    d.h = h;
    d.w = w;
    d.opl = ho * wo;
    d.npts = npts;
    d.linear = linear;
    d.pad = pad;
    d.align = align;
    int64_t bx = (npts + 127) / 128;
    if (bx >= ((int64_t)1 << 31))
        return cudaErrorInvalidConfiguration;
    /* Enough blocks to fill the GPU: split the channels when there are few locations. */
    int64_t chunks = (2048 + bx - 1) / bx;
    chunks = chunks < 1 ? 1 : chunks > c ? c : chunks;
    d.cchunk = (c + chunks - 1) / chunks;
    if ((c + d.cchunk - 1) / d.cchunk > 65535)
        d.cchunk = (c + 65534) / 65535;
    chunks = (c + d.cchunk - 1) / d.cchunk;
    s4d_launch(grid_sample_kernel, dim3((unsigned)bx, (unsigned)chunks), 128, 0, stream, y, x, grid, d);
    return cudaGetLastError();
}
