/*
 * Deformable aggregation on CUDA: the public entry points, the choice of kernel
 * variant, and the first kernels (2026-12-02), kept as the "base" variants and
 * as the path for shapes the item kernels do not take (scalar channels,
 * unaligned tensors, groups that do not fit the item backward).
 *
 * First kernels: one thread block of 8 warps per (batch, anchor) and channel
 * slice. The block compacts the valid (point, camera) pairs; its warps then
 * share the valid (pair, level) items, each lane holding a fixed run of channels
 * in registers, computing the item's corners itself and reading feature rows
 * with 16-byte loads. The warps' partial sums meet in shared memory and are
 * added in warp order, so the forward has no atomics and gives bitwise the same
 * result on every run. The backward writes location and weight gradients from
 * exactly one warp each and scatters feature gradients with atomics.
 * The item kernels (da_cuda_items.cu) and the deterministic feature gradient
 * (da_cuda_det.cu) say how they differ.
 *
 * Every launch goes to the caller's stream and nothing is allocated, so the
 * calls can be captured into CUDA graphs. Offsets are 64-bit.
 *
 * Build note for other consumers of these sources: compile every .cu file of
 * this folder with S4D_HAVE_CUDA defined (so that da_cuda_stub.c compiles to
 * nothing) and link cudart.
 */
#include <stdlib.h>

#include <atomic>

#include "da_cuda_common.cuh"

using namespace s4d_da_cu;

namespace {

constexpr int kWarps = 8;       /* warps per block */
constexpr int kThreads = kWarps * 32;
constexpr size_t kMaxSmem = 48 * 1024;

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
    S4D_KERNEL_BEGIN();
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
    load_maps(p, s.maps);
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
    S4D_KERNEL_BEGIN();
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
    load_maps(p, s.maps);
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

/* ------------------------------------------------------------------ launchers of the first kernels */


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
    const cudaError_t launched = s4d_launch(fwd_kernel<TF, VEC, BATCH>, grid, kThreads, smem, st, p, vec,
                                            w_half, o_half);
    return launch_status(err, launched, "forward kernel launch");
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
    cudaError_t launched;
    if (vec)
        launched = s4d_launch(bwd_kernel<TF, V>, grid, kThreads, smem, st, p, true, vec_gf, w_half,
                              g_half);
    else
        launched = s4d_launch(bwd_kernel<TF, 1>, grid, kThreads, smem, st, p, false, false, w_half,
                              g_half);
    return launch_status(err, launched, "backward kernel launch");
}

/* ------------------------------------------------------------------ variants */

enum FwdKind { F_BASE, F_ITEMS };
struct FwdVariant {
    const char *name;
    FwdKind kind;
    bool batch; /* base: all of an item's loads before its arithmetic */
    FwdShape shape;
};

/* Every forward variant is deterministic (no atomics; partial sums added in warp order). */
const FwdVariant kFwd[] = {
    {"base_batch", F_BASE, true, {8, 8, 1, false}},
    {"base_serial", F_BASE, false, {8, 8, 1, false}},
    {"items_w4_c8", F_ITEMS, false, {4, 8, 1, false}},
    {"items_w8_c8", F_ITEMS, false, {8, 8, 1, false}},
    {"items_w2_c8", F_ITEMS, false, {2, 8, 1, false}},
    {"items_w4_c4", F_ITEMS, false, {4, 4, 1, false}},
    {"items_w4_c8_u2", F_ITEMS, false, {4, 8, 2, false}},
    {"items_w4_c4_u2", F_ITEMS, false, {4, 4, 2, false}},
    /* 2026-12-03: each distinct feature row of an anchor read once (da_cuda_items.cu). */
    {"items_w4_dedup", F_ITEMS, false, {4, 8, 1, true}},
    {"items_w8_dedup", F_ITEMS, false, {8, 8, 1, true}},
    /* 2026-12-03: feature rows staged through per-warp rings in shared memory (cp.async);
       slower (the rings take the L1's room, docs/ops/deformable_aggregation.md). The
       fastest two of the five shapes measured. */
    {"items_w8_async2", F_ITEMS, false, {8, 8, 1, false, 2}},
    {"items_w4_async3", F_ITEMS, false, {4, 8, 1, false, 3}},
    /* 2026-12-05: float16 features and output, each item's corners blended in float16 pairs
       (HFMA2) before the float32 sums; other dtypes run items_w4_c8 / items_w8_c8. */
    {"items_w4_h2", F_ITEMS, false, {4, 8, 1, false, 0, true}},
    {"items_w8_h2", F_ITEMS, false, {8, 8, 1, false, 0, true}},
    /* 2026-12-05: the float32 shapes capped at 64 registers (one more block per SM). */
    {"items_w4_c8_r64", F_ITEMS, false, {4, 8, 1, false, 0, false, 8}},
    {"items_w8_c8_r64", F_ITEMS, false, {8, 8, 1, false, 0, false, 4}},
    /* 2026-12-07: the defaults with the next item's corner rows prefetched into L1
       (da_cuda_items.cu, fwd_items_kernel's PF). */
    {"items_w8_c8_pfn", F_ITEMS, false, {8, 8, 1, false, 0, false, 0, true}},
    {"items_w4_h2_pfn", F_ITEMS, false, {4, 8, 1, false, 0, true, 0, true}},
};
constexpr int kFwdCount = (int)(sizeof kFwd / sizeof kFwd[0]);

enum BwdKind { B_BASE, B_ITEMS, B_ITEMS_DET, B_BASE_DET, B_ITEMS_DEDUP, B_ITEMS_SPLIT,
               B_ITEMS_SPLIT_MEMSET, B_ITEMS_SPLIT_DEDUP };
struct BwdVariant {
    const char *name;
    BwdKind kind;
    int warps;
};

const BwdVariant kBwd[] = {
    {"base_atomic", B_BASE, 8},
    {"items_w4_atomic", B_ITEMS, 4},
    {"items_w8_atomic", B_ITEMS, 8},
    {"items_w4_det", B_ITEMS_DET, 4},
    {"items_w8_det", B_ITEMS_DET, 8},
    {"base_det", B_BASE_DET, 8},
    /* 2026-12-03: one atomic row per distinct feature row of an anchor (da_cuda_items.cu). */
    {"items_w8_dedup", B_ITEMS_DEDUP, 8},
    /* 2026-12-07: the location and weight gradients, each block clearing its share of
       grad_features first, then the scatter alone (da_cuda_items.cu, launch_bwd_split_t); and
       the same two kernels after a memset, to tell the split from the clear. */
    {"items_w8_split", B_ITEMS_SPLIT, 8},
    {"items_w8_split_memset", B_ITEMS_SPLIT_MEMSET, 8},
    /* The split with the scatter of items_w8_dedup: one atomic row per distinct row. */
    {"items_w8_split_dedup", B_ITEMS_SPLIT_DEDUP, 8},
};
constexpr int kBwdCount = (int)(sizeof kBwd / sizeof kBwd[0]);

bool bwd_det(int v)
{
    return kBwd[v].kind == B_ITEMS_DET || kBwd[v].kind == B_BASE_DET;
}

/*
 * The variants the public functions run, chosen from the H200 run of 2026-12-02 22:53 UTC
 * (bench/results/h200-20261202-items/): the item forward with 8 warps and 8-channel
 * vectors is the fastest fp32 forward at 900 and 1800 anchors (27.3 / 45.7 us) and
 * within 3% of the fastest fp16 one; every forward is deterministic, so FAST and
 * DETERMINISTIC are the same kernel. Backward: the 8-warp item kernels, atomic (129 us)
 * and ordered (296 us).
 */
constexpr int kDefaultFwdFast = 3;
constexpr int kDefaultFwdDet = 3;
/* Float16 features and output (2026-12-05, H100, bench/results/h100-20261205/): items_w4_h2,
   the 4-warp item forward blending each item's corners in float16 pairs, 20.4 us at 900
   anchors and 32.7 at 1800 against 22.6 and 35.6 for items_w8_c8; its error against the
   float64 oracle stays within the float16 output's rounding (2.8e-4 relative L2, 2.1e-4). */
constexpr const char *kDefaultFwdHalf = "items_w4_h2";
constexpr int kDefaultBwdFast = 2;
constexpr int kDefaultBwdDet = 4;

int find_fwd(const char *name)
{
    for (int i = 0; name && i < kFwdCount; i++)
        if (!strcmp(name, kFwd[i].name))
            return i;
    return -1;
}

int find_bwd(const char *name)
{
    for (int i = 0; name && i < kBwdCount; i++)
        if (!strcmp(name, kBwd[i].name))
            return i;
    return -1;
}

/* A default, or the variant an environment variable names (experiments without a rebuild;
   a deterministic slot only takes deterministic variants). Read once. */
int env_default(std::atomic<int> &slot, const char *var, int fallback, bool fwd, bool need_det)
{
    int v = slot.load(std::memory_order_relaxed);
    if (v >= 0)
        return v;
    v = fallback;
    const char *e = getenv(var);
    if (e && *e) {
        const int i = fwd ? find_fwd(e) : find_bwd(e);
        if (i >= 0 && (!need_det || bwd_det(i)))
            v = i;
    }
    slot.store(v, std::memory_order_relaxed);
    return v;
}

std::atomic<int> g_fwd_fast{-1}, g_fwd_det{-1}, g_bwd_fast{-1}, g_bwd_det{-1};
std::atomic<int> g_fwd_fast_half{-1}, g_fwd_det_half{-1};

/* half: float16 features and output, which have their own default; the same variables name
   the variant for every dtype. */
int fwd_default(s4d_da_algo algo, bool half = false)
{
    static const int half_default = find_fwd(kDefaultFwdHalf);
    const bool det = algo == S4D_DA_ALGO_DETERMINISTIC;
    std::atomic<int> &slot = half ? (det ? g_fwd_det_half : g_fwd_fast_half) : (det ? g_fwd_det : g_fwd_fast);
    return env_default(slot, det ? "S4D_DA_CUDA_FWD_DET" : "S4D_DA_CUDA_FWD",
                       half ? half_default : det ? kDefaultFwdDet : kDefaultFwdFast, true, false);
}

int fwd_default_for(const s4d_da_forward_args *a, s4d_da_algo algo)
{
    return fwd_default(algo, a->features_dtype == S4D_DTYPE_FLOAT16 && a->output_dtype == S4D_DTYPE_FLOAT16);
}

int bwd_default(s4d_da_algo algo)
{
    return algo == S4D_DA_ALGO_DETERMINISTIC
               ? env_default(g_bwd_det, "S4D_DA_CUDA_BWD_DET", kDefaultBwdDet, false, true)
               : env_default(g_bwd_fast, "S4D_DA_CUDA_BWD", kDefaultBwdFast, false, false);
}

s4d_status bad_variant(s4d_errbuf *err, const char *what, int v, int count)
{
    return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                       "deformable_aggregation: %s variant %d is out of range [0, %d)", what, v,
                       count);
}

s4d_status forward_variant(const s4d_da_forward_args *a, int v, cudaStream_t s, int *ran,
                           s4d_errbuf *err)
{
    if (ran)
        *ran = v;
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
    const bool f_half = a->features_dtype == S4D_DTYPE_FLOAT16;
    const bool w_half = a->weights_dtype == S4D_DTYPE_FLOAT16;
    const bool o_half = a->output_dtype == S4D_DTYPE_FLOAT16;
    if (a->features_dtype != S4D_DTYPE_FLOAT32 && !f_half)
        return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: features dtype %s",
                           s4d_dtype_name(a->features_dtype));
    const FwdVariant &fv = kFwd[v];
    if (fv.kind == F_ITEMS && fwd_items_supported(p, fv.shape, fsz, a->features))
        return launch_fwd_items(p, fv.shape, f_half, w_half, o_half, s, err);
    /* The first kernels: vector loads need whole vectors per group and 16-byte aligned rows. */
    const int64_t VEC = 16 / (int64_t)fsz;
    const bool vec = p.C % VEC == 0 && p.cpg % VEC == 0 && aligned(a->features, 16);
    const bool batch = fv.kind == F_BASE ? fv.batch : true;
    if (ran)
        *ran = batch ? 0 : 1;
    return f_half ? launch_fwd<__half>(p, vec, batch, w_half, o_half, s, err)
                  : launch_fwd<float>(p, vec, batch, w_half, o_half, s, err);
}

size_t bwd_workspace(const s4d_da_sizes *sizes, int v)
{
    if (!sizes || v < 0 || v >= kBwdCount || !bwd_det(v))
        return 0;
    return det_workspace_layout(*sizes, nullptr, nullptr);
}

s4d_status backward_variant(const s4d_da_backward_args *a, int v, void *workspace, cudaStream_t s,
                            int *ran, s4d_errbuf *err)
{
    if (ran)
        *ran = v;
    Params p = make_params(a->sizes);
    const size_t fsz = s4d_dtype_size(a->features_dtype);
    const bool f_half = a->features_dtype == S4D_DTYPE_FLOAT16;
    if (a->features_dtype != S4D_DTYPE_FLOAT32 && !f_half)
        return s4d_da_fail(err, S4D_ERR_DTYPE, "deformable_aggregation: features dtype %s",
                           s4d_dtype_name(a->features_dtype));
    const int64_t nfeat = p.bs * p.F * p.C;
    const bool degenerate = p.bs * p.A == 0 || p.C == 0 || p.P * p.N * p.L == 0;
    const bool det = bwd_det(v) && a->grad_features && !degenerate && nfeat > 0;
    const BwdVariant &bv = kBwd[v];
    const BwdShape shape = {bv.warps, det,
                            bv.kind == B_ITEMS_DEDUP || bv.kind == B_ITEMS_SPLIT_DEDUP,
                            bv.kind == B_ITEMS_SPLIT || bv.kind == B_ITEMS_SPLIT_DEDUP ? 1
                            : bv.kind == B_ITEMS_SPLIT_MEMSET                          ? 2
                                                                                       : 0};
    const bool split = shape.split && !degenerate && bwd_items_supported(p, shape, fsz, a);
    DetBuffers d;
    memset(&d, 0, sizeof d);
    if (det) {
        const size_t need = det_workspace_layout(a->sizes, nullptr, nullptr);
        if (need == 0)
            return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                               "deformable_aggregation: the deterministic backward needs fewer than "
                               "2^31 (batch x anchor x point x camera x level) items and 2 x batch x "
                               "num_rows below 2^32; use S4D_DA_ALGO_FAST");
        if (!workspace)
            return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                               "deformable_aggregation: workspace is NULL; the deterministic "
                               "backward needs %zu bytes (s4d_da_backward_workspace_size_algo)",
                               need);
        det_workspace_layout(a->sizes, workspace, &d);
    } else if (a->grad_features && nfeat > 0 && !(split && shape.split == 1)) {
        /* The atomic paths add into grad_features, so it starts from zero (items_w8_split
           clears it in its first kernel instead). */
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
    const size_t galign = (size_t)VEC * gsz < 16 ? (size_t)VEC * gsz : 16;
    const bool vec = p.C % VEC == 0 && p.cpg % VEC == 0 && aligned(a->features, 16) &&
                     aligned(a->grad_output, galign);
    const bool vec_gf = vec && aligned(a->grad_features, 16);
    const bool w_half = a->weights_dtype == S4D_DTYPE_FLOAT16;
    const bool g_half = a->grad_output_dtype == S4D_DTYPE_FLOAT16;
    s4d_status st = S4D_OK;
    const bool items = split || ((bv.kind == B_ITEMS || bv.kind == B_ITEMS_DET ||
                                  bv.kind == B_ITEMS_DEDUP) &&
                                 bwd_items_supported(p, shape, fsz, a));
    if (items) {
        st = launch_bwd_items(p, shape, f_half, w_half, g_half, det ? &d : nullptr, s, err);
    } else {
        if (ran)
            *ran = det ? find_bwd("base_det") : 0;
        if (det)
            p.grad_feat = nullptr; /* the gather writes it */
        if (p.grad_loc || p.grad_w || p.grad_feat)
            st = f_half ? launch_bwd<__half>(p, vec, vec_gf, w_half, g_half, s, err)
                        : launch_bwd<float>(p, vec, vec_gf, w_half, g_half, s, err);
        p.grad_feat = a->grad_features;
        if (st == S4D_OK && det)
            st = run_det_records(p, d, s, err);
    }
    if (st != S4D_OK || !det)
        return st;
    const bool vec_gather = p.C % VEC == 0 && p.cpg % VEC == 0 &&
                            aligned(a->grad_features, 16) && aligned(a->grad_output, galign);
    return run_det_gather(p, d, f_half, w_half, g_half, vec_gather, s, err);
}

} /* namespace */

extern "C" {

int s4d_da_cuda_fwd_variant_count(void)
{
    return kFwdCount;
}

int s4d_da_cuda_bwd_variant_count(void)
{
    return kBwdCount;
}

const char *s4d_da_cuda_fwd_variant_name(int v)
{
    return v >= 0 && v < kFwdCount ? kFwd[v].name : nullptr;
}

const char *s4d_da_cuda_bwd_variant_name(int v)
{
    return v >= 0 && v < kBwdCount ? kBwd[v].name : nullptr;
}

int s4d_da_cuda_bwd_variant_deterministic(int v)
{
    return v >= 0 && v < kBwdCount && bwd_det(v);
}

int s4d_da_cuda_fwd_variant_default(s4d_da_algo algo)
{
    return fwd_default(algo);
}

int s4d_da_cuda_fwd_variant_default_half(s4d_da_algo algo)
{
    return fwd_default(algo, true);
}

int s4d_da_cuda_bwd_variant_default(s4d_da_algo algo)
{
    return bwd_default(algo);
}

int s4d_da_cuda_fwd_variant_find(const char *name)
{
    return find_fwd(name);
}

int s4d_da_cuda_bwd_variant_find(const char *name)
{
    return find_bwd(name);
}

size_t s4d_da_forward_workspace_size_variant(const s4d_da_sizes *sizes, int variant)
{
    (void)sizes;
    (void)variant;
    return 0;
}

size_t s4d_da_backward_workspace_size_variant(const s4d_da_sizes *sizes, int variant)
{
    return bwd_workspace(sizes, variant);
}

s4d_status s4d_da_forward_cuda_variant(const s4d_da_forward_args *a, int variant, void *workspace,
                                       void *stream, int *ran, s4d_errbuf *err)
{
    (void)workspace;
    s4d_status st = s4d_da_check_forward(a, err);
    if (st != S4D_OK)
        return st;
    if (variant < 0 || variant >= kFwdCount)
        return bad_variant(err, "forward", variant, kFwdCount);
    return forward_variant(a, variant, static_cast<cudaStream_t>(stream), ran, err);
}

s4d_status s4d_da_backward_cuda_variant(const s4d_da_backward_args *a, int variant,
                                        void *workspace, void *stream, int *ran, s4d_errbuf *err)
{
    s4d_status st = s4d_da_check_backward(a, err);
    if (st != S4D_OK)
        return st;
    if (variant < 0 || variant >= kBwdCount)
        return bad_variant(err, "backward", variant, kBwdCount);
    return backward_variant(a, variant, workspace, static_cast<cudaStream_t>(stream), ran, err);
}

size_t s4d_da_forward_workspace_size(const s4d_da_sizes *sizes, s4d_da_algo algo)
{
    (void)sizes;
    (void)algo;
    return 0;
}

size_t s4d_da_backward_workspace_size(const s4d_da_sizes *sizes)
{
    return bwd_workspace(sizes, bwd_default(S4D_DA_ALGO_FAST));
}

size_t s4d_da_backward_workspace_size_algo(const s4d_da_sizes *sizes, s4d_da_algo algo)
{
    if (algo != S4D_DA_ALGO_FAST && algo != S4D_DA_ALGO_DETERMINISTIC)
        return 0;
    return bwd_workspace(sizes, bwd_default(algo));
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
    return forward_variant(a, fwd_default_for(a, algo), static_cast<cudaStream_t>(stream), nullptr, err);
}

s4d_status s4d_da_backward_cuda(const s4d_da_backward_args *a, void *workspace, void *stream,
                                s4d_errbuf *err)
{
    s4d_status st = s4d_da_check_backward(a, err);
    if (st != S4D_OK)
        return st;
    return backward_variant(a, bwd_default(S4D_DA_ALGO_FAST), workspace,
                            static_cast<cudaStream_t>(stream), nullptr, err);
}

s4d_status s4d_da_backward_cuda_algo(const s4d_da_backward_args *a, s4d_da_algo algo,
                                     void *workspace, void *stream, s4d_errbuf *err)
{
    s4d_status st = s4d_da_check_backward(a, err);
    if (st != S4D_OK)
        return st;
    if ((st = s4d_da_check_algo(algo, err)) != S4D_OK)
        return st;
    return backward_variant(a, bwd_default(algo), workspace, static_cast<cudaStream_t>(stream),
                            nullptr, err);
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
