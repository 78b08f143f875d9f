/*
 * Deformable aggregation on CUDA: forward (deterministic; both algos run it)
 * and backward, for float32 and float16 tensors with float32 accumulation.
 *
 * Layout of the work: one thread block per (batch, anchor) and channel slice.
 * The block first compacts the (point, camera) pairs whose location is valid
 * (on the realistic workload only ~18% are), so no warp spends time on the
 * rest. Its warps then share the valid (pair, level) items; each lane holds a
 * fixed run of channels in registers and reads feature rows with 16-byte
 * loads. The warps' partial sums meet in shared memory and are added in warp
 * order, so the forward has no atomics and gives bitwise the same result on
 * every run. The backward writes location and weight gradients from exactly
 * one warp each (deterministic too) and scatters feature gradients with
 * atomics.
 *
 * Every launch goes to the caller's stream and nothing is allocated, so the
 * calls can be captured into CUDA graphs. Offsets are 64-bit.
 *
 * Build note for other consumers of this source: compile with S4D_HAVE_CUDA
 * defined (so that da_cuda_stub.c compiles to nothing) and link cudart.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "da_internal.h"

namespace {

constexpr int kWarps = 8;       /* warps per block */
constexpr int kThreads = kWarps * 32;
constexpr int kChunks = 2;      /* channel vectors per lane in the forward */
constexpr size_t kMaxSmem = 48 * 1024;

struct MapInfo {
    int h, w, start, ok;
};

struct Params {
    const void *feat;
    const int32_t *shape;
    const int32_t *start;
    const float *loc;
    const void *weights;
    void *out;                /* forward: output */
    const void *grad_out;     /* backward */
    void *grad_feat;
    float *grad_loc;
    void *grad_w;
    int64_t bs, F, C, N, L, G, A, P, cpg;
};

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

/* Loads n consecutive elements as floats, as 16- or 8-byte transactions when the
   caller has checked alignment (vec), one by one otherwise. */
template <int N>
__device__ __forceinline__ void load_n(const float *p, float *o, bool vec)
{
    if (vec && N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            float4 v = __ldg(reinterpret_cast<const float4 *>(p + i));
            o[i] = v.x;
            o[i + 1] = v.y;
            o[i + 2] = v.z;
            o[i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            o[i] = __ldg(p + i);
    }
}

template <int N>
__device__ __forceinline__ void load_n(const __half *p, float *o, bool vec)
{
    if (vec && N % 8 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 8) {
            uint4 raw = __ldg(reinterpret_cast<const uint4 *>(p + i));
            const __half2 *h = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 f = __half22float2(h[j]);
                o[i + 2 * j] = f.x;
                o[i + 2 * j + 1] = f.y;
            }
        }
    } else if (vec && N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            uint2 raw = __ldg(reinterpret_cast<const uint2 *>(p + i));
            const __half2 *h = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float2 f = __half22float2(h[j]);
                o[i + 2 * j] = f.x;
                o[i + 2 * j + 1] = f.y;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            o[i] = __half2float(p[i]);
    }
}

/* Adds n values into global memory with the widest atomic the chip has. */
template <int N>
__device__ __forceinline__ void atomic_add_n(float *p, const float *v, bool vec)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (vec && N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4)
            atomicAdd(reinterpret_cast<float4 *>(p + i), make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]));
        return;
    }
#endif
#pragma unroll
    for (int i = 0; i < N; i++)
        atomicAdd(p + i, v[i]);
}

template <int N>
__device__ __forceinline__ void atomic_add_n(__half *p, const float *v, bool vec)
{
    if (vec && N % 2 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 2)
            atomicAdd(reinterpret_cast<__half2 *>(p + i), __floats2half2_rn(v[i], v[i + 1]));
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            atomicAdd(p + i, __float2half_rn(v[i]));
    }
}

/* NaN and inf fail these comparisons, so they are invalid too. */
__device__ __forceinline__ bool loc_valid(float x, float y)
{
    return x > 0.0f && x < 1.0f && y > 0.0f && y < 1.0f;
}

struct Corners {
    int64_t row[4]; /* relative to the batch item; -1 when outside the map */
    float w[4];
    float lh, lw;
};

__device__ __forceinline__ void make_corners(const MapInfo &m, float x, float y, Corners &c)
{
    float hf = y * (float)m.h - 0.5f, wf = x * (float)m.w - 0.5f;
    float h0f = floorf(hf), w0f = floorf(wf);
    int h0 = (int)h0f, w0 = (int)w0f;
    float lh = hf - h0f, lw = wf - w0f;
    c.lh = lh;
    c.lw = lw;
    c.w[0] = (1.0f - lh) * (1.0f - lw);
    c.w[1] = (1.0f - lh) * lw;
    c.w[2] = lh * (1.0f - lw);
    c.w[3] = lh * lw;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int h = h0 + (k >> 1), w = w0 + (k & 1);
        bool in = m.ok && h >= 0 && h < m.h && w >= 0 && w < m.w;
        c.row[k] = in ? (int64_t)m.start + (int64_t)h * m.w + w : -1;
    }
}

/* Shared memory: the map table, the compacted valid pairs, then per-kernel scratch. */
struct Smem {
    MapInfo *maps;
    int *pairs;
    int *count;
    float *scratch;
};

__host__ __device__ inline size_t smem_head_bytes(int64_t N, int64_t L, int64_t P)
{
    size_t b = sizeof(MapInfo) * (size_t)(N * L) + sizeof(int) * (size_t)(P * N + kWarps + 1);
    return (b + 15) / 16 * 16;
}

__device__ inline Smem smem_layout(char *base, const Params &p)
{
    Smem s;
    s.maps = reinterpret_cast<MapInfo *>(base);
    s.pairs = reinterpret_cast<int *>(s.maps + p.N * p.L);
    s.count = s.pairs + p.P * p.N; /* kWarps per-warp counts, then the total */
    s.scratch = reinterpret_cast<float *>(base + smem_head_bytes(p.N, p.L, p.P));
    return s;
}

__device__ inline void load_maps(const Params &p, const Smem &s)
{
    for (int64_t i = threadIdx.x; i < p.N * p.L; i += blockDim.x) {
        int h = p.shape[2 * i], w = p.shape[2 * i + 1], st = p.start[i];
        MapInfo m;
        m.h = h;
        m.w = w;
        m.start = st;
        /* Bad tables never lead to a read outside [0, F): such a map contributes nothing. */
        m.ok = h >= 1 && w >= 1 && st >= 0 && (int64_t)st + (int64_t)h * w <= p.F;
        s.maps[i] = m;
    }
}

/* Writes the valid pairs of (b, a) in ascending order; returns their count (same in every thread). */
__device__ inline int compact_pairs(const Params &p, const Smem &s, int64_t ba)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t PN = p.P * p.N;
    int total = 0;
    for (int64_t base = 0; base < PN; base += kThreads) {
        int64_t i = base + threadIdx.x;
        bool v = false;
        if (i < PN) {
            const float *xy = p.loc + 2 * (ba * PN + i);
            v = loc_valid(__ldg(xy), __ldg(xy + 1));
        }
        unsigned mask = __ballot_sync(0xffffffffu, v);
        if (lane == 0)
            s.count[warp] = __popc(mask);
        __syncthreads();
        int off = total;
        for (int w = 0; w < warp; w++)
            off += s.count[w];
        if (v)
            s.pairs[off + __popc(mask & ((1u << lane) - 1u))] = (int)i;
        int chunk = 0;
        for (int w = 0; w < kWarps; w++)
            chunk += s.count[w];
        total += chunk;
        __syncthreads();
    }
    return total;
}

/* ------------------------------------------------------------------ forward */

template <typename TF, typename TW, typename TO, int VEC>
__global__ void __launch_bounds__(kThreads) fwd_kernel(Params p, bool vec)
{
    extern __shared__ __align__(16) char smem_raw[];
    Smem s = smem_layout(smem_raw, p);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t slice_w = 32 * VEC * kChunks;
    const int64_t c_begin = (int64_t)blockIdx.y * slice_w;
    const int64_t nba = p.bs * p.A;
    const TF *feat = static_cast<const TF *>(p.feat);
    const TW *wts = static_cast<const TW *>(p.weights);
    int64_t grp[kChunks]; /* the group of each of this lane's channel vectors */
#pragma unroll
    for (int k = 0; k < kChunks; k++)
        grp[k] = (c_begin + (int64_t)k * 32 * VEC + (int64_t)lane * VEC) / p.cpg;
    load_maps(p, s);
    __syncthreads();
    for (int64_t ba = blockIdx.x; ba < nba; ba += gridDim.x) {
        const int64_t b = ba / p.A;
        const int nvalid = compact_pairs(p, s, ba);
        float acc[kChunks][VEC];
#pragma unroll
        for (int k = 0; k < kChunks; k++)
#pragma unroll
            for (int v = 0; v < VEC; v++)
                acc[k][v] = 0.0f;
        /* Item, pair and camera indices fit in 32 bits (shared memory bounds P*N); 32-bit
           division is several times cheaper than 64-bit on the GPU. */
        const int L32 = (int)p.L, N32 = (int)p.N;
        const int items = nvalid * L32;
        for (int it = warp; it < items; it += kWarps) {
            const int pi = s.pairs[it / L32];
            const int l = it % L32;
            const int n = pi % N32;
            const int64_t pair = ba * p.P * p.N + pi;
            const float x = __ldg(p.loc + 2 * pair), y = __ldg(p.loc + 2 * pair + 1);
            Corners cr;
            make_corners(s.maps[n * p.L + l], x, y, cr);
            const TW *wrow = wts + (pair * p.L + l) * p.G;
#pragma unroll
            for (int k = 0; k < kChunks; k++) {
                const int64_t c0 = c_begin + (int64_t)k * 32 * VEC + (int64_t)lane * VEC;
                if (c0 >= p.C)
                    continue;
                const float wg = to_f(wrow[grp[k]]);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    if (cr.row[q] < 0)
                        continue;
                    float f[VEC];
                    load_n<VEC>(feat + (b * p.F + cr.row[q]) * p.C + c0, f, vec);
                    const float coef = wg * cr.w[q];
#pragma unroll
                    for (int v = 0; v < VEC; v++)
                        acc[k][v] += coef * f[v];
                }
            }
        }
        /* Partial sums meet in shared memory and are added in warp order. */
        float *red = s.scratch;
#pragma unroll
        for (int k = 0; k < kChunks; k++)
#pragma unroll
            for (int v = 0; v < VEC; v++)
                red[warp * slice_w + k * 32 * VEC + lane * VEC + v] = acc[k][v];
        __syncthreads();
        TO *out = static_cast<TO *>(p.out);
        for (int64_t c = threadIdx.x; c < slice_w && c_begin + c < p.C; c += kThreads) {
            float sum = 0.0f;
            for (int w = 0; w < kWarps; w++)
                sum += red[w * slice_w + c];
            out[ba * p.C + c_begin + c] = from_f<TO>(sum);
        }
        __syncthreads();
    }
}

/* ------------------------------------------------------------------ backward */

template <typename TF, typename TW, typename TG, int VEC>
__global__ void __launch_bounds__(kThreads) bwd_kernel(Params p, bool vec, bool vec_gf)
{
    extern __shared__ __align__(16) char smem_raw[];
    Smem s = smem_layout(smem_raw, p);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nba = p.bs * p.A;
    const int64_t PN = p.P * p.N, LG = p.L * p.G;
    const int64_t nvec = p.C / VEC;
    const TF *feat = static_cast<const TF *>(p.feat);
    const TW *wts = static_cast<const TW *>(p.weights);
    const TG *gout = static_cast<const TG *>(p.grad_out);
    TF *gfeat = static_cast<TF *>(p.grad_feat);
    TW *gw = static_cast<TW *>(p.grad_w);
    float *part = s.scratch + (int64_t)warp * nvec; /* per-warp, one value per channel vector */
    load_maps(p, s);
    __syncthreads();
    for (int64_t ba = blockIdx.x; ba < nba; ba += gridDim.x) {
        const int64_t b = ba / p.A;
        /* Invalid pairs get zero gradients (the outputs are fully overwritten). */
        for (int64_t i = threadIdx.x; i < PN; i += kThreads) {
            const int64_t pair = ba * PN + i;
            const float x = p.loc[2 * pair], y = p.loc[2 * pair + 1];
            if (loc_valid(x, y))
                continue;
            if (p.grad_loc) {
                p.grad_loc[2 * pair] = 0.0f;
                p.grad_loc[2 * pair + 1] = 0.0f;
            }
            if (gw)
                for (int64_t j = 0; j < LG; j++)
                    gw[pair * LG + j] = from_f<TW>(0.0f);
        }
        const int nvalid = compact_pairs(p, s, ba);
        for (int vi = warp; vi < nvalid; vi += kWarps) {
            const int pi = s.pairs[vi];
            const int n = pi % (int)p.N;
            const int64_t pair = ba * PN + pi;
            const float x = p.loc[2 * pair], y = p.loc[2 * pair + 1];
            float gx = 0.0f, gy = 0.0f;
            for (int64_t l = 0; l < p.L; l++) {
                const MapInfo m = s.maps[n * p.L + l];
                Corners cr;
                make_corners(m, x, y, cr);
                const TW *wrow = wts + (pair * p.L + l) * p.G;
                float sx = 0.0f, sy = 0.0f;
                for (int64_t c0 = (int64_t)lane * VEC; c0 < p.C; c0 += 32 * VEC) {
                    const float wg = to_f(wrow[c0 / p.cpg]);
                    float go[VEC];
                    load_n<VEC>(gout + ba * p.C + c0, go, vec);
                    float sv = 0.0f, cx = 0.0f, cy = 0.0f;
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        if (cr.row[q] < 0)
                            continue;
                        const int64_t off = (b * p.F + cr.row[q]) * p.C + c0;
                        if (p.grad_loc || gw) {
                            float f[VEC];
                            load_n<VEC>(feat + off, f, vec);
                            float dot = 0.0f;
#pragma unroll
                            for (int v = 0; v < VEC; v++)
                                dot += go[v] * f[v];
                            /* d(corner weight)/d(lw) and /d(lh) of corner q. */
                            const float dlw = ((q >> 1) ? cr.lh : 1.0f - cr.lh) * ((q & 1) ? 1.0f : -1.0f);
                            const float dlh = ((q & 1) ? cr.lw : 1.0f - cr.lw) * ((q >> 1) ? 1.0f : -1.0f);
                            sv += cr.w[q] * dot;
                            cx += dlw * dot;
                            cy += dlh * dot;
                        }
                        if (gfeat) {
                            float add[VEC];
                            const float coef = wg * cr.w[q];
#pragma unroll
                            for (int v = 0; v < VEC; v++)
                                add[v] = coef * go[v];
                            atomic_add_n<VEC>(gfeat + off, add, vec_gf);
                        }
                    }
                    part[c0 / VEC] = sv;
                    sx += wg * cx;
                    sy += wg * cy;
                }
                gx += sx * (float)m.w;
                gy += sy * (float)m.h;
                __syncwarp();
                /* Each group's channel vectors are summed by one lane in channel order. */
                if (gw) {
                    const int64_t per = p.cpg / VEC;
                    for (int64_t g = lane; g < p.G; g += 32) {
                        float sum = 0.0f;
                        for (int64_t j = 0; j < per; j++)
                            sum += part[g * per + j];
                        gw[(pair * p.L + l) * p.G + g] = from_f<TW>(sum);
                    }
                }
                __syncwarp();
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                gx += __shfl_xor_sync(0xffffffffu, gx, o);
                gy += __shfl_xor_sync(0xffffffffu, gy, o);
            }
            if (lane == 0 && p.grad_loc) {
                p.grad_loc[2 * pair] = gx;
                p.grad_loc[2 * pair + 1] = gy;
            }
        }
        __syncthreads();
    }
}

/* ------------------------------------------------------------------ dispatch */

bool aligned(const void *p, size_t a) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % a == 0; }

s4d_status cuda_fail(s4d_errbuf *err, cudaError_t e, const char *what)
{
    return s4d_da_fail(err, S4D_ERR_CUDA, "deformable_aggregation: %s: %s (%s)", what,
                       cudaGetErrorName(e), cudaGetErrorString(e));
}

Params make_params(const s4d_da_sizes &z)
{
    Params p;
    memset(&p, 0, sizeof p);
    p.bs = z.batch;
    p.F = z.num_rows;
    p.C = z.channels;
    p.N = z.num_cams;
    p.L = z.num_levels;
    p.G = z.num_groups;
    p.A = z.num_anchors;
    p.P = z.num_points;
    p.cpg = z.channels / z.num_groups;
    return p;
}

unsigned grid_x(int64_t nba)
{
    /* A grid-stride loop covers the rest; 2^20 blocks keep every SM busy. */
    return (unsigned)(nba < (1 << 20) ? nba : (1 << 20));
}

template <typename TF, typename TW, typename TO>
s4d_status launch_fwd(const Params &p, bool vec, cudaStream_t st, s4d_errbuf *err)
{
    const int VEC = 16 / (int)sizeof(TF);
    const int64_t slice_w = vec ? 32 * VEC * kChunks : 32 * kChunks;
    const int64_t slices = (p.C + slice_w - 1) / slice_w;
    if (slices > 65535)
        return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                           "deformable_aggregation: channels (%lld) too many for the CUDA kernel",
                           (long long)p.C);
    size_t smem = smem_head_bytes(p.N, p.L, p.P) + sizeof(float) * (size_t)(kWarps * slice_w);
    if (smem > kMaxSmem)
        return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                           "deformable_aggregation: num_cams x num_levels (%lld) and num_points x "
                           "num_cams (%lld) need %zu bytes of shared memory, more than %zu",
                           (long long)(p.N * p.L), (long long)(p.P * p.N), smem, kMaxSmem);
    dim3 grid(grid_x(p.bs * p.A), (unsigned)slices);
    if (vec)
        fwd_kernel<TF, TW, TO, 16 / sizeof(TF)><<<grid, kThreads, smem, st>>>(p, true);
    else
        fwd_kernel<TF, TW, TO, 1><<<grid, kThreads, smem, st>>>(p, false);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? S4D_OK : cuda_fail(err, e, "forward kernel launch");
}

template <typename TF, typename TW, typename TG>
s4d_status launch_bwd(const Params &p, bool vec, bool vec_gf, cudaStream_t st, s4d_errbuf *err)
{
    const int64_t VEC = vec ? 16 / (int64_t)sizeof(TF) : 1;
    size_t smem = smem_head_bytes(p.N, p.L, p.P) + sizeof(float) * (size_t)(kWarps * (p.C / VEC));
    if (smem > kMaxSmem)
        return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                           "deformable_aggregation: the CUDA backward needs %zu bytes of shared "
                           "memory for these sizes, more than %zu",
                           smem, kMaxSmem);
    dim3 grid(grid_x(p.bs * p.A));
    if (vec)
        bwd_kernel<TF, TW, TG, 16 / sizeof(TF)><<<grid, kThreads, smem, st>>>(p, true, vec_gf);
    else
        bwd_kernel<TF, TW, TG, 1><<<grid, kThreads, smem, st>>>(p, false, false);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? S4D_OK : cuda_fail(err, e, "backward kernel launch");
}

template <typename TF, typename TW>
s4d_status fwd_by_out(const Params &p, s4d_dtype out, bool vec, cudaStream_t st, s4d_errbuf *err)
{
    switch (out) {
    case S4D_DTYPE_FLOAT32: return launch_fwd<TF, TW, float>(p, vec, st, err);
    case S4D_DTYPE_FLOAT16: return launch_fwd<TF, TW, __half>(p, vec, st, err);
    default: break;
    }
    return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: output dtype %s",
                       s4d_dtype_name(out));
}

template <typename TF>
s4d_status fwd_by_w(const Params &p, s4d_dtype w, s4d_dtype out, bool vec, cudaStream_t st,
                    s4d_errbuf *err)
{
    switch (w) {
    case S4D_DTYPE_FLOAT32: return fwd_by_out<TF, float>(p, out, vec, st, err);
    case S4D_DTYPE_FLOAT16: return fwd_by_out<TF, __half>(p, out, vec, st, err);
    default: break;
    }
    return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: weights dtype %s",
                       s4d_dtype_name(w));
}

template <typename TF, typename TW>
s4d_status bwd_by_g(const Params &p, s4d_dtype g, bool vec, bool vec_gf, cudaStream_t st,
                    s4d_errbuf *err)
{
    switch (g) {
    case S4D_DTYPE_FLOAT32: return launch_bwd<TF, TW, float>(p, vec, vec_gf, st, err);
    case S4D_DTYPE_FLOAT16: return launch_bwd<TF, TW, __half>(p, vec, vec_gf, st, err);
    default: break;
    }
    return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: grad_output dtype %s",
                       s4d_dtype_name(g));
}

template <typename TF>
s4d_status bwd_by_w(const Params &p, s4d_dtype w, s4d_dtype g, bool vec, bool vec_gf,
                    cudaStream_t st, s4d_errbuf *err)
{
    switch (w) {
    case S4D_DTYPE_FLOAT32: return bwd_by_g<TF, float>(p, g, vec, vec_gf, st, err);
    case S4D_DTYPE_FLOAT16: return bwd_by_g<TF, __half>(p, g, vec, vec_gf, st, err);
    default: break;
    }
    return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: weights dtype %s",
                       s4d_dtype_name(w));
}

} /* namespace */

extern "C" {

size_t s4d_da_forward_workspace_size(const s4d_da_sizes *sizes, s4d_da_algo algo)
{
    (void)sizes;
    (void)algo;
    return 0;
}

size_t s4d_da_backward_workspace_size(const s4d_da_sizes *sizes)
{
    (void)sizes;
    return 0;
}

s4d_status s4d_da_forward_cuda(const s4d_da_forward_args *a, s4d_da_algo algo, void *workspace,
                               void *stream, s4d_errbuf *err)
{
    (void)workspace;
    s4d_status st = s4d_da_check_forward(a, err);
    if (st != S4D_OK)
        return st;
    if ((st = s4d_da_check_algo(algo, err)) != S4D_OK)
        return st;
    /* Both algos run the same kernel: it is already deterministic and the fastest s4d has. */
    Params p = make_params(a->sizes);
    if (p.bs * p.A == 0 || p.C == 0)
        return S4D_OK;
    p.feat = a->features;
    p.shape = a->spatial_shape;
    p.start = a->scale_start_index;
    p.loc = a->sampling_location;
    p.weights = a->weights;
    p.out = a->output;
    const size_t fsz = s4d_dtype_size(a->features_dtype);
    const int64_t VEC = 16 / (int64_t)fsz;
    /* Vector loads need whole vectors per group and 16-byte aligned rows. */
    bool vec = p.C % VEC == 0 && p.cpg % VEC == 0 && aligned(a->features, 16);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (a->features_dtype) {
    case S4D_DTYPE_FLOAT32:
        return fwd_by_w<float>(p, a->weights_dtype, a->output_dtype, vec, s, err);
    case S4D_DTYPE_FLOAT16:
        return fwd_by_w<__half>(p, a->weights_dtype, a->output_dtype, vec, s, err);
    default: break;
    }
    return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: features dtype %s",
                       s4d_dtype_name(a->features_dtype));
}

s4d_status s4d_da_backward_cuda(const s4d_da_backward_args *a, void *workspace, void *stream,
                                s4d_errbuf *err)
{
    (void)workspace;
    s4d_status st = s4d_da_check_backward(a, err);
    if (st != S4D_OK)
        return st;
    Params p = make_params(a->sizes);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const size_t fsz = s4d_dtype_size(a->features_dtype);
    const int64_t nfeat = p.bs * p.F * p.C;
    if (a->grad_features && nfeat > 0) {
        cudaError_t e = cudaMemsetAsync(a->grad_features, 0, (size_t)nfeat * fsz, s);
        if (e != cudaSuccess)
            return cuda_fail(err, e, "clearing grad_features");
    }
    if (p.bs * p.A == 0 || p.C == 0 || p.P * p.N == 0 ||
        (!a->grad_features && !a->grad_sampling_location && !a->grad_weights))
        return S4D_OK;
    p.feat = a->features;
    p.shape = a->spatial_shape;
    p.start = a->scale_start_index;
    p.loc = a->sampling_location;
    p.weights = a->weights;
    p.grad_out = a->grad_output;
    p.grad_feat = a->grad_features;
    p.grad_loc = a->grad_sampling_location;
    p.grad_w = a->grad_weights;
    const int64_t VEC = 16 / (int64_t)fsz;
    const size_t gsz = s4d_dtype_size(a->grad_output_dtype);
    /* grad_output is read VEC elements at a time too: VEC * gsz bytes (8, 16 or 32). */
    size_t galign = (size_t)VEC * gsz < 16 ? (size_t)VEC * gsz : 16;
    bool vec = p.C % VEC == 0 && p.cpg % VEC == 0 && aligned(a->features, 16) &&
               aligned(a->grad_output, galign);
    bool vec_gf = vec && aligned(a->grad_features, 16);
    switch (a->features_dtype) {
    case S4D_DTYPE_FLOAT32:
        return bwd_by_w<float>(p, a->weights_dtype, a->grad_output_dtype, vec, vec_gf, s, err);
    case S4D_DTYPE_FLOAT16:
        return bwd_by_w<__half>(p, a->weights_dtype, a->grad_output_dtype, vec, vec_gf, s, err);
    default: break;
    }
    return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: features dtype %s",
                       s4d_dtype_name(a->features_dtype));
}

int s4d_cuda_available(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* leave no error behind for the caller */
        return 0;
    }
    return n > 0;
}

} /* extern "C" */
