/*
 * Deformable aggregation on CUDA: the deterministic feature gradient.
 *
 * Float atomics add in whatever order the hardware serves them, so their sums
 * change in the last bits from run to run. Here every row of grad_features is
 * written by one warp that adds its contributions in one fixed order:
 *   1. every item slot (b, a, p, n, l) gets a 32-bit key: the linear index of its
 *      top-left corner, shifted by W + 1 so that row or column -1 stays
 *      non-negative, plus b times a per-batch stride of 2F + 2 (invalid items and
 *      items without a corner inside get a sentinel that sorts last). The item
 *      backward kernel writes keys and records; records_kernel does so for shapes
 *      the item kernels do not take;
 *   2. a stable radix sort (CUB) orders the slots by key; equal keys keep slot
 *      order;
 *   3. bounds_kernel marks where each key's run begins and ends;
 *   4. gather_kernel: one warp per feature row r. For each map that holds r and
 *      each corner q, the items whose corner q is r have key(r - dq) (dq = 0, 1, W,
 *      W + 1); the warp walks that run in slot order, keeps the items whose record
 *      says map and corner row match (linear indices of different (h, w) can
 *      coincide), and adds weight x corner weight x grad_output[b, a] in float32.
 *      Rows nothing reads get zeros, so no separate clear of grad_features runs.
 * Everything is sized by the problem's upper bounds (all items valid), so the
 * launches are the same on every call and can be captured into a CUDA graph.
 */
#include <cub/device/device_radix_sort.cuh>

#include "da_cuda_common.cuh"

namespace s4d_da_cu {
namespace {

constexpr int kGatherWarps = 8;

int bits_for(uint64_t v)
{
    int b = 0;
    while (b < 64 && (1ull << b) <= v)
        b++;
    return b;
}

__device__ __forceinline__ int comp4(const int4 &v, int q)
{
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

__device__ __forceinline__ float comp4(const float4 &v, int q)
{
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

/* Keys and records of every item slot, one thread per slot (the path for shapes that the
   item backward does not take; it writes the same keys and records itself). */
__global__ void records_kernel(Params p, DetBuffers d)
{
    S4D_KERNEL_BEGIN();
    extern __shared__ __align__(16) char smem_raw[];
    MapInfo *maps = reinterpret_cast<MapInfo *>(smem_raw);
    load_maps(p, maps);
    __syncthreads();
    const int64_t PN = p.P * p.N;
    for (int64_t slot = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; slot < d.slots_n;
         slot += (int64_t)gridDim.x * blockDim.x) {
        const int64_t l = slot % p.L, pair = slot / p.L;
        const int64_t n = pair % p.N, ba = pair / PN, b = ba / p.A;
        uint32_t key = d.sentinel;
        const float x = p.loc[2 * pair], y = p.loc[2 * pair + 1];
        if (loc_valid(x, y)) {
            const int map = (int)(n * p.L + l);
            const MapInfo m = maps[map];
            Corners cr;
            make_corners(m, x, y, cr);
            if (cr.row[0] >= 0 || cr.row[1] >= 0 || cr.row[2] >= 0 || cr.row[3] >= 0) {
                int h0, w0;
                float lh, lw;
                pixel_coords(m, x, y, h0, w0, lh, lw);
                const int64_t tl = (int64_t)m.start + (int64_t)h0 * m.w + w0 + m.w + 1;
                key = (uint32_t)(b * d.key_stride + tl);
                d.rec_rows[slot] = make_int4((int)cr.row[0], (int)cr.row[1], (int)cr.row[2], (int)cr.row[3]);
                d.rec_cw[slot] = make_float4(cr.w[0], cr.w[1], cr.w[2], cr.w[3]);
                d.rec_meta[slot] = make_int2(map, (int)ba);
            }
        }
        d.keys[slot] = key;
        d.slots[slot] = (uint32_t)slot;
    }
}

__global__ void bounds_kernel(const uint32_t *keys, int64_t n, uint32_t sentinel, uint32_t *begin,
                              uint32_t *end)
{
    S4D_KERNEL_BEGIN();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t k = keys[i];
        if (k == sentinel)
            continue;
        if (i == 0 || keys[i - 1] != k)
            begin[k] = (uint32_t)i;
        if (i == n - 1 || keys[i + 1] != k)
            end[k] = (uint32_t)(i + 1);
    }
}

template <typename TF, int VEC>
__device__ __forceinline__ void store_vec(TF *p, const float *v);

template <>
__device__ __forceinline__ void store_vec<float, 4>(float *p, const float *v)
{
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

template <>
__device__ __forceinline__ void store_vec<__half, 8>(__half *p, const float *v)
{
    uint4 raw;
    __half2 *h = reinterpret_cast<__half2 *>(&raw);
#pragma unroll
    for (int j = 0; j < 4; j++)
        h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
    *reinterpret_cast<uint4 *>(p) = raw;
}

template <>
__device__ __forceinline__ void store_vec<float, 1>(float *p, const float *v)
{
    *p = v[0];
}

template <>
__device__ __forceinline__ void store_vec<__half, 1>(__half *p, const float *v)
{
    *p = __float2half_rn(v[0]);
}

/* One warp per feature row; lanes over channels (VEC each, K vectors per lane per pass). */
template <typename TF, int VEC, int K>
__global__ void __launch_bounds__(kGatherWarps * 32)
    gather_kernel(Params p, DetBuffers d, bool w_half, bool g_half)
{
    S4D_KERNEL_BEGIN();
    extern __shared__ __align__(16) char smem_raw[];
    MapInfo *maps = reinterpret_cast<MapInfo *>(smem_raw);
    load_maps(p, maps);
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int NL = (int)(p.N * p.L);
    const int64_t nrows = p.bs * p.F;
    TF *gfeat = static_cast<TF *>(p.grad_feat);
    for (int64_t gr = (int64_t)blockIdx.x * kGatherWarps + warp; gr < nrows;
         gr += (int64_t)gridDim.x * kGatherWarps) {
        const int64_t b = gr / p.F;
        const int r = (int)(gr - b * p.F);
        for (int64_t c0 = 0; c0 < p.C; c0 += 32 * VEC * K) {
            int64_t cst[K], grp[K];
            bool cok[K];
            float acc[K][VEC];
#pragma unroll
            for (int k = 0; k < K; k++) {
                cst[k] = c0 + k * 32 * VEC + lane * VEC;
                cok[k] = cst[k] < p.C;
                grp[k] = cok[k] ? cst[k] / p.cpg : 0;
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    acc[k][v] = 0.0f;
            }
            for (int m = 0; m < NL; m++) {
                const MapInfo mp = maps[m];
                if (!mp.ok || r < mp.start || r - mp.start >= mp.h * mp.w)
                    continue;
                uint32_t sb = 0, se = 0;
                if (lane < 4) {
                    const int64_t tl = (int64_t)r - (lane >> 1) * mp.w - (lane & 1) + mp.w + 1;
                    const int64_t key = b * d.key_stride + tl;
                    sb = d.seg_begin[key];
                    se = d.seg_end[key];
                }
#pragma unroll 1
                for (int q = 0; q < 4; q++) {
                    const uint32_t s = __shfl_sync(0xffffffffu, sb, q);
                    const uint32_t e = __shfl_sync(0xffffffffu, se, q);
                    for (uint32_t base = s; base < e; base += 32) {
                        const uint32_t i = base + lane;
                        bool match = false;
                        uint32_t slot = 0;
                        float cwq = 0.0f;
                        int bav = 0;
                        if (i < e) {
                            slot = d.slots_sorted[i];
                            const int2 meta = d.rec_meta[slot];
                            if (meta.x == m && comp4(d.rec_rows[slot], q) == r) {
                                match = true;
                                cwq = comp4(d.rec_cw[slot], q);
                                bav = meta.y;
                            }
                        }
                        unsigned mm = __ballot_sync(0xffffffffu, match);
                        /* Matches in slot order, two at a time for more loads in flight. */
                        while (mm) {
                            const int s0 = __ffs(mm) - 1;
                            mm &= mm - 1;
                            const bool two = mm != 0;
                            const int s1 = two ? __ffs(mm) - 1 : s0;
                            if (two)
                                mm &= mm - 1;
                            const int64_t slot0 = __shfl_sync(0xffffffffu, slot, s0);
                            const int64_t slot1 = __shfl_sync(0xffffffffu, slot, s1);
                            const float cw0 = __shfl_sync(0xffffffffu, cwq, s0);
                            const float cw1 = __shfl_sync(0xffffffffu, cwq, s1);
                            const int64_t ba0 = __shfl_sync(0xffffffffu, bav, s0);
                            const int64_t ba1 = __shfl_sync(0xffffffffu, bav, s1);
#pragma unroll
                            for (int k = 0; k < K; k++) {
                                if (!cok[k])
                                    continue;
                                float g0[VEC], g1[VEC];
                                const float w0 = load_w(p.weights, w_half, slot0 * p.G + grp[k]);
                                const float w1 = two ? load_w(p.weights, w_half, slot1 * p.G + grp[k]) : 0.0f;
                                if (g_half) {
                                    const __half *go = static_cast<const __half *>(p.grad_out);
                                    load_n<VEC>(go + ba0 * p.C + cst[k], g0, VEC > 1);
                                    load_n<VEC>(go + ba1 * p.C + cst[k], g1, VEC > 1);
                                } else {
                                    const float *go = static_cast<const float *>(p.grad_out);
                                    load_n<VEC>(go + ba0 * p.C + cst[k], g0, VEC > 1);
                                    load_n<VEC>(go + ba1 * p.C + cst[k], g1, VEC > 1);
                                }
                                const float c0f = w0 * cw0, c1f = w1 * cw1;
#pragma unroll
                                for (int v = 0; v < VEC; v++)
                                    acc[k][v] += c0f * g0[v];
                                if (two)
#pragma unroll
                                    for (int v = 0; v < VEC; v++)
                                        acc[k][v] += c1f * g1[v];
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < K; k++)
                if (cok[k])
                    store_vec<TF, VEC>(gfeat + gr * p.C + cst[k], acc[k]);
        }
    }
}

unsigned blocks_for(int64_t n, int per_block)
{
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1)
        b = 1;
    return (unsigned)(b < (1 << 20) ? b : (1 << 20));
}

template <typename TF>
s4d_status launch_gather(const Params &p, const DetBuffers &d, bool w_half, bool g_half, bool vec,
                         cudaStream_t st, s4d_errbuf *err)
{
    constexpr int V = 16 / sizeof(TF);
    const size_t smem = sizeof(MapInfo) * (size_t)(p.N * p.L);
    const unsigned grid = blocks_for(p.bs * p.F, kGatherWarps);
    cudaError_t launched;
    if (vec && p.C <= 32 * V)
        launched = s4d_launch(gather_kernel<TF, V, 1>, grid, kGatherWarps * 32, smem, st, p, d, w_half,
                              g_half);
    else if (vec && p.C <= 64 * V)
        launched = s4d_launch(gather_kernel<TF, V, 2>, grid, kGatherWarps * 32, smem, st, p, d, w_half,
                              g_half);
    else
        launched = s4d_launch(gather_kernel<TF, 1, 1>, grid, kGatherWarps * 32, smem, st, p, d, w_half,
                              g_half);
    return launch_status(err, launched, "gather kernel launch");
}

size_t round_up(size_t v)
{
    return (v + 255) / 256 * 256;
}

} /* namespace */

size_t det_workspace_layout(const s4d_da_sizes &z, void *ws, DetBuffers *d)
{
    DetBuffers b;
    memset(&b, 0, sizeof b);
    b.slots_n = z.batch * z.num_anchors * z.num_points * z.num_cams * z.num_levels;
    b.key_stride = 2 * z.num_rows + 2;
    b.keys_n = z.batch * b.key_stride;
    if (b.slots_n <= 0 || b.slots_n >= INT32_MAX || (uint64_t)b.keys_n >= 0xffffffffull)
        return 0;
    b.end_bit = bits_for((uint64_t)b.keys_n);
    b.sentinel = b.end_bit >= 32 ? 0xffffffffu : (uint32_t)((1ull << b.end_bit) - 1);
    size_t temp = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, temp, (const uint32_t *)nullptr,
                                                    (uint32_t *)nullptr, (const uint32_t *)nullptr,
                                                    (uint32_t *)nullptr, (int)b.slots_n, 0, b.end_bit);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    b.sort_temp_bytes = temp;
    const size_t n = (size_t)b.slots_n, nk = (size_t)b.keys_n;
    size_t off[10], sz[10] = {4 * n, 4 * n, 4 * n, 4 * n, 16 * n, 16 * n, 8 * n, 4 * nk, 4 * nk, temp};
    size_t total = 0;
    for (int i = 0; i < 10; i++) {
        off[i] = total;
        total += round_up(sz[i]);
    }
    if (ws && d) {
        char *base = static_cast<char *>(ws);
        b.keys = reinterpret_cast<uint32_t *>(base + off[0]);
        b.keys_sorted = reinterpret_cast<uint32_t *>(base + off[1]);
        b.slots = reinterpret_cast<uint32_t *>(base + off[2]);
        b.slots_sorted = reinterpret_cast<uint32_t *>(base + off[3]);
        b.rec_rows = reinterpret_cast<int4 *>(base + off[4]);
        b.rec_cw = reinterpret_cast<float4 *>(base + off[5]);
        b.rec_meta = reinterpret_cast<int2 *>(base + off[6]);
        b.seg_begin = reinterpret_cast<uint32_t *>(base + off[7]);
        b.seg_end = reinterpret_cast<uint32_t *>(base + off[8]);
        b.sort_temp = base + off[9];
    }
    if (d)
        *d = b;
    return total;
}

s4d_status run_det_records(const Params &p, const DetBuffers &d, cudaStream_t st, s4d_errbuf *err)
{
    const size_t smem = sizeof(MapInfo) * (size_t)(p.N * p.L);
    const cudaError_t launched = s4d_launch(records_kernel, blocks_for(d.slots_n, 256), 256, smem, st, p,
                                            d);
    return launch_status(err, launched, "records kernel launch");
}

s4d_status run_det_gather(const Params &p, const DetBuffers &d, bool feat_half, bool w_half,
                          bool g_half, bool vec, cudaStream_t st, s4d_errbuf *err)
{
    size_t temp = d.sort_temp_bytes;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(d.sort_temp, temp, d.keys, d.keys_sorted, d.slots,
                                                    d.slots_sorted, (int)d.slots_n, 0, d.end_bit, st);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "sorting the item keys");
    if ((e = cudaMemsetAsync(d.seg_begin, 0, 4 * (size_t)d.keys_n, st)) != cudaSuccess ||
        (e = cudaMemsetAsync(d.seg_end, 0, 4 * (size_t)d.keys_n, st)) != cudaSuccess)
        return cuda_fail(err, e, "clearing the key runs");
    const cudaError_t launched = s4d_launch(bounds_kernel, blocks_for(d.slots_n, 256), 256, 0, st,
                                            d.keys_sorted, d.slots_n, d.sentinel, d.seg_begin,
                                            d.seg_end);
    s4d_status s = launch_status(err, launched, "bounds kernel launch");
    if (s != S4D_OK)
        return s;
    return feat_half ? launch_gather<__half>(p, d, w_half, g_half, vec, st, err)
                     : launch_gather<float>(p, d, w_half, g_half, vec, st, err);
}

} /* namespace s4d_da_cu */
