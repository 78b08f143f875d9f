/*
 * Deformable aggregation on CUDA: forward (deterministic, in two load
 * schedules: S4D_DA_ALGO_FAST batches each item's loads, DETERMINISTIC loads
 * corner by corner) and backward, for float32 and float16 tensors with
 * float32 accumulation.
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
    /* Rounded multiply then subtract, never a fused multiply-add: the CPU oracle rounds
       twice too, and at W = 176 one rounding step moves lw by up to 1e-5, ten times the
       tolerance between the two implementations. */
    float hf = __fsub_rn(__fmul_rn(y, (float)m.h), 0.5f);
    float wf = __fsub_rn(__fmul_rn(x, (float)m.w), 0.5f);
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

/* Element access where the dtype is a runtime flag: weights, output, grad_output and
   grad_weights are touched far less than features, so a branch costs little and saves
   template instantiations (compile time for five architectures). */
__device__ __forceinline__ float load_w(const void *p, bool half, int64_t i)
{
    return half ? __half2float(__ldg(static_cast<const __half *>(p) + i))
                : __ldg(static_cast<const float *>(p) + i);
}

__device__ __forceinline__ void store_f(void *p, bool half, int64_t i, float v)
{
    if (half)
        static_cast<__half *>(p)[i] = __float2half_rn(v);
    else
        static_cast<float *>(p)[i] = v;
}

/* Channel vectors per lane: two for float32 (256 channels per slice), one for float16,
   whose 8-wide vectors already cover 256 channels. */
template <int VEC> struct Chunks {
    static constexpr int value = VEC >= 8 ? 1 : 2;
};

/* ------------------------------------------------------------------ forward */

/*
 * BATCH: issue all of an item's loads (4 corners x chunks) before its arithmetic, for
 * more loads in flight at the cost of registers; otherwise load and add corner by
 * corner. Both are deterministic; the benchmark times both (FAST and DETERMINISTIC).
 */
/* Blocks per SM the forward is compiled for: 3 caps registers at 85, which keeps three
   blocks resident per SM without spills and measured fastest on the H200 (1, 3 and 4 tried:
   bench/results/h200-20261202/). A build-time knob for other chips. */
#ifndef S4D_DA_FWD_MIN_BLOCKS
#define S4D_DA_FWD_MIN_BLOCKS 3
#endif
template <typename TF, int VEC, bool BATCH>
__global__ void __launch_bounds__(kThreads, S4D_DA_FWD_MIN_BLOCKS) fwd_kernel(Params p, bool vec, bool w_half, bool o_half)
{
    constexpr int K = Chunks<VEC>::value;
    extern __shared__ __align__(16) char smem_raw[];
    Smem s = smem_layout(smem_raw, p);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t slice_w = 32 * VEC * K;
    const int64_t c_begin = (int64_t)blockIdx.y * slice_w;
    const int64_t nba = p.bs * p.A;
    const TF *feat = static_cast<const TF *>(p.feat);
    int64_t cst[K], grp[K]; /* first channel and group of each of this lane's vectors */
#pragma unroll
    for (int k = 0; k < K; k++) {
        cst[k] = c_begin + (int64_t)k * 32 * VEC + (int64_t)lane * VEC;
        grp[k] = cst[k] / p.cpg;
    }
    load_maps(p, s);
    __syncthreads();
    /* Item, pair and camera indices fit in 32 bits (shared memory bounds P*N); 32-bit
       division is several times cheaper than 64-bit on the GPU. */
    const int L32 = (int)p.L, N32 = (int)p.N;
    for (int64_t ba = blockIdx.x; ba < nba; ba += gridDim.x) {
        const int64_t b = ba / p.A;
        const int nvalid = compact_pairs(p, s, ba);
        float acc[K][VEC];
#pragma unroll
        for (int k = 0; k < K; k++)
#pragma unroll
            for (int v = 0; v < VEC; v++)
                acc[k][v] = 0.0f;
        const int items = nvalid * L32;
        for (int it = warp; it < items; it += kWarps) {
            const int pi = s.pairs[it / L32];
            const int l = it % L32;
            const int n = pi % N32;
            const int64_t pair = ba * p.P * p.N + pi;
            const float x = __ldg(p.loc + 2 * pair), y = __ldg(p.loc + 2 * pair + 1);
            Corners cr;
            make_corners(s.maps[n * L32 + l], x, y, cr);
            const int64_t wbase = (pair * p.L + l) * p.G;
            if (BATCH) {
                float f[K][4][VEC];
#pragma unroll
                for (int k = 0; k < K; k++)
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        if (cst[k] < p.C && cr.row[q] >= 0)
                            load_n<VEC>(feat + (b * p.F + cr.row[q]) * p.C + cst[k], f[k][q], vec);
#pragma unroll
                for (int k = 0; k < K; k++) {
                    if (cst[k] >= p.C)
                        continue;
                    const float wg = load_w(p.weights, w_half, wbase + grp[k]);
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        if (cr.row[q] < 0)
                            continue;
                        const float coef = wg * cr.w[q];
#pragma unroll
                        for (int v = 0; v < VEC; v++)
                            acc[k][v] += coef * f[k][q][v];
                    }
                }
            } else {
#pragma unroll
                for (int k = 0; k < K; k++) {
                    if (cst[k] >= p.C)
                        continue;
                    const float wg = load_w(p.weights, w_half, wbase + grp[k]);
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        if (cr.row[q] < 0)
                            continue;
                        float f[VEC];
                        load_n<VEC>(feat + (b * p.F + cr.row[q]) * p.C + cst[k], f, vec);
                        const float coef = wg * cr.w[q];
#pragma unroll
                        for (int v = 0; v < VEC; v++)
                            acc[k][v] += coef * f[v];
                    }
                }
            }
        }
        /* Partial sums meet in shared memory and are added in warp order. */
        float *red = s.scratch;
#pragma unroll
        for (int k = 0; k < K; k++)
#pragma unroll
            for (int v = 0; v < VEC; v++)
                red[warp * slice_w + k * 32 * VEC + lane * VEC + v] = acc[k][v];
        __syncthreads();
        for (int64_t c = threadIdx.x; c < slice_w && c_begin + c < p.C; c += kThreads) {
            float sum = 0.0f;
            for (int w = 0; w < kWarps; w++)
                sum += red[w * slice_w + c];
            store_f(p.out, o_half, ba * p.C + c_begin + c, sum);
        }
        __syncthreads();
    }
}

/* ------------------------------------------------------------------ backward */

template <int VEC>
__device__ __forceinline__ void load_go(const void *p, bool half, int64_t off, float *o, bool vec)
{
    if (half)
        load_n<VEC>(static_cast<const __half *>(p) + off, o, vec);
    else
        load_n<VEC>(static_cast<const float *>(p) + off, o, vec);
}

template <typename TF, int VEC>
__global__ void __launch_bounds__(kThreads)
    bwd_kernel(Params p, bool vec, bool vec_gf, bool w_half, bool g_half)
{
    extern __shared__ __align__(16) char smem_raw[];
    Smem s = smem_layout(smem_raw, p);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nba = p.bs * p.A;
    const int64_t PN = p.P * p.N, LG = p.L * p.G;
    const int64_t nvec = p.C / VEC;
    const TF *feat = static_cast<const TF *>(p.feat);
    TF *gfeat = static_cast<TF *>(p.grad_feat);
    void *gw = p.grad_w;
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
                    store_f(gw, w_half, pair * LG + j, 0.0f);
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
                const int64_t wbase = (pair * p.L + l) * p.G;
                float sx = 0.0f, sy = 0.0f;
                for (int64_t c0 = (int64_t)lane * VEC; c0 < p.C; c0 += 32 * VEC) {
                    const float wg = load_w(p.weights, w_half, wbase + c0 / p.cpg);
                    float go[VEC];
                    load_go<VEC>(p.grad_out, g_half, ba * p.C + c0, go, vec);
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
                        store_f(gw, w_half, wbase + g, sum);
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

s4d_status check_smem(size_t smem, s4d_errbuf *err)
{
    if (smem <= kMaxSmem)
        return S4D_OK;
    return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                       "deformable_aggregation: these sizes need %zu bytes of shared memory per "
                       "block, more than %zu (num_cams x num_levels, num_points x num_cams or "
                       "channels too large for the CUDA kernels)",
                       smem, kMaxSmem);
}

template <typename TF, int VEC, bool BATCH>
s4d_status launch_fwd_v(const Params &p, bool vec, bool w_half, bool o_half, cudaStream_t st,
                        s4d_errbuf *err)
{
    const int64_t slice_w = 32 * VEC * Chunks<VEC>::value;
    const int64_t slices = (p.C + slice_w - 1) / slice_w;
    if (slices > 65535)
        return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                           "deformable_aggregation: channels (%lld) too many for the CUDA kernel",
                           (long long)p.C);
    size_t smem = smem_head_bytes(p.N, p.L, p.P) + sizeof(float) * (size_t)(kWarps * slice_w);
    s4d_status s = check_smem(smem, err);
    if (s != S4D_OK)
        return s;
    dim3 grid(grid_x(p.bs * p.A), (unsigned)slices);
    fwd_kernel<TF, VEC, BATCH><<<grid, kThreads, smem, st>>>(p, vec, w_half, o_half);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? S4D_OK : cuda_fail(err, e, "forward kernel launch");
}

template <typename TF>
s4d_status launch_fwd(const Params &p, bool vec, bool batch, bool w_half, bool o_half,
                      cudaStream_t st, s4d_errbuf *err)
{
    constexpr int V = 16 / sizeof(TF);
    if (vec)
        return batch ? launch_fwd_v<TF, V, true>(p, true, w_half, o_half, st, err)
                     : launch_fwd_v<TF, V, false>(p, true, w_half, o_half, st, err);
    return batch ? launch_fwd_v<TF, 1, true>(p, false, w_half, o_half, st, err)
                 : launch_fwd_v<TF, 1, false>(p, false, w_half, o_half, st, err);
}

template <typename TF>
s4d_status launch_bwd(const Params &p, bool vec, bool vec_gf, bool w_half, bool g_half,
                      cudaStream_t st, s4d_errbuf *err)
{
    constexpr int V = 16 / sizeof(TF);
    const int64_t VEC = vec ? V : 1;
    size_t smem = smem_head_bytes(p.N, p.L, p.P) + sizeof(float) * (size_t)(kWarps * (p.C / VEC));
    s4d_status s = check_smem(smem, err);
    if (s != S4D_OK)
        return s;
    dim3 grid(grid_x(p.bs * p.A));
    if (vec)
        bwd_kernel<TF, V><<<grid, kThreads, smem, st>>>(p, true, vec_gf, w_half, g_half);
    else
        bwd_kernel<TF, 1><<<grid, kThreads, smem, st>>>(p, false, false, w_half, g_half);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? S4D_OK : cuda_fail(err, e, "backward kernel launch");
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
    /* Both algos are deterministic (no atomics); FAST batches each item's loads. */
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
    const bool w_half = a->weights_dtype == S4D_DTYPE_FLOAT16;
    const bool o_half = a->output_dtype == S4D_DTYPE_FLOAT16;
    const bool batch = algo == S4D_DA_ALGO_FAST;
    switch (a->features_dtype) {
    case S4D_DTYPE_FLOAT32: return launch_fwd<float>(p, vec, batch, w_half, o_half, s, err);
    case S4D_DTYPE_FLOAT16: return launch_fwd<__half>(p, vec, batch, w_half, o_half, s, err);
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
    const bool w_half = a->weights_dtype == S4D_DTYPE_FLOAT16;
    const bool g_half = a->grad_output_dtype == S4D_DTYPE_FLOAT16;
    switch (a->features_dtype) {
    case S4D_DTYPE_FLOAT32: return launch_bwd<float>(p, vec, vec_gf, w_half, g_half, s, err);
    case S4D_DTYPE_FLOAT16: return launch_bwd<__half>(p, vec, vec_gf, w_half, g_half, s, err);
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
