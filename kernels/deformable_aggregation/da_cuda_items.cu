/*
 * Deformable aggregation on CUDA: the item kernels (forward and backward).
 *
 * Work split. One block per (batch, anchor) and channel slice, as small as 2-8
 * warps so that every anchor of the realistic workload is resident at once (no
 * partial last wave). The block
 *   1. compacts the valid (point, camera) pairs with warp ballots (about 19% of
 *      them on the realistic workload), keeping their locations in shared memory;
 *   2. turns every valid (pair, level) into an item record, one thread per item:
 *      the 4 corner rows (int32, -1 outside the map), the 4 bilinear weights and
 *      the offset of the item's weights. All corner arithmetic happens here, once
 *      per item instead of once per warp instruction stream;
 *   3. lets its warps walk the records round-robin. Per item a warp reads one
 *      record from shared memory and issues all of the item's feature loads at
 *      once (16-byte vectors, a lane holds 4 or 8 channels), then its multiply-adds:
 *      about 60 instructions per item where the first kernels spent several hundred;
 *   4. adds the warps' partial sums in warp order (forward), so the result is the
 *      same bit for bit on every run.
 * Items are numbered level-major (all pairs at level 0, then level 1, ...), so every
 * warp gets a share of every level (fine levels miss in L1, coarse ones hit).
 *
 * Backward: the same items; each lane keeps its channels of grad_output in
 * registers for the whole anchor. Per item the warp forms the 4 corner dot products
 * (grad_output . feature row), reduces them over each group's lanes with shuffles
 * (grad_weights) and over the warp (grad_sampling_location, summed over levels in
 * level order in shared memory), and either scatters grad_features with vector
 * atomics or, for the deterministic backward, writes the item's record and sort key
 * for the gather of da_cuda_det.cu.
 */
#include "da_cuda_common.cuh"

#include <atomic>

namespace s4d_da_cu {
namespace {

constexpr int kTile = 128; /* item records set up per round */

/* The raw 8- or 16-byte vector that holds VEC elements of TF. */
template <typename TF, int VEC> struct RawVec;
template <> struct RawVec<float, 4> {
    using T = float4;
};
template <> struct RawVec<__half, 8> {
    using T = uint4;
};
template <> struct RawVec<__half, 4> {
    using T = uint2;
};

template <typename TF, int VEC>
__device__ __forceinline__ typename RawVec<TF, VEC>::T ldv(const TF *p)
{
    return __ldg(reinterpret_cast<const typename RawVec<TF, VEC>::T *>(p));
}

__device__ __forceinline__ void unpack(const float4 &r, float *o)
{
    o[0] = r.x;
    o[1] = r.y;
    o[2] = r.z;
    o[3] = r.w;
}

__device__ __forceinline__ void unpack(const uint4 &r, float *o)
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&r);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 f = __half22float2(h[j]);
        o[2 * j] = f.x;
        o[2 * j + 1] = f.y;
    }
}

__device__ __forceinline__ void unpack(const uint2 &r, float *o)
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&r);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        float2 f = __half22float2(h[j]);
        o[2 * j] = f.x;
        o[2 * j + 1] = f.y;
    }
}

__device__ __forceinline__ int comp(const int4 &v, int q)
{
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

__device__ __forceinline__ float comp(const float4 &v, int q)
{
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

/* Shared memory. The per-item arrays have fixed sizes and live in static shared memory, so
   their addresses are constants of the code rather than registers; the per-anchor arrays
   (sized by N x L and P x N) follow in dynamic shared memory. */
template <int W, int RED> struct FwdTile {
    int4 rows[kTile];   /* corner rows, -1 outside the map */
    float4 cw[kTile];   /* corner weights */
    float red[RED];     /* the warps' partial sums (16-byte aligned: float4 stores) */
    int wrel[kTile];    /* offset of the item's weights from the anchor's */
    int cnt[W + 1];     /* valid pairs per warp */
};

template <int W> struct BwdTile {
    int4 rows[kTile];
    float4 cw[kTile];
    float4 geo[kTile];  /* lh, lw, W and H of the map */
    float2 itg[kTile];  /* the item's location gradient */
    int wrel[kTile];
    int cnt[W + 1];
};

struct Dyn {
    MapInfo *maps; /* N x L */
    int *pidx;     /* P x N: indices of the valid pairs */
    float2 *pxy;   /* P x N: their locations */
    float2 *pacc;  /* P x N, backward: location gradient per pair */
};

__host__ __device__ inline size_t dyn_bytes(int64_t NL, int64_t PN)
{
    return sizeof(MapInfo) * (size_t)NL + (sizeof(float2) * 2 + sizeof(int)) * (size_t)PN;
}

__device__ inline Dyn dyn_at(char *base, int64_t NL, int64_t PN)
{
    Dyn d;
    d.maps = reinterpret_cast<MapInfo *>(base);
    d.pxy = reinterpret_cast<float2 *>(d.maps + NL);
    d.pacc = d.pxy + PN;
    d.pidx = reinterpret_cast<int *>(d.pacc + PN);
    return d;
}

/* Writes the valid pairs of (b, a) in ascending order with their locations; returns their
   count (the same in every thread). Starts and ends with a barrier's worth of ordering:
   everything a thread wrote before the call is visible to the block after it. */
template <int W>
__device__ inline int compact_pairs(const Params &p, const Dyn &s, int *cnt, int64_t ba)
{
    constexpr int T = W * 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t PN = p.P * p.N;
    int total = 0;
    for (int64_t base = 0; base < PN; base += T) {
        const int64_t i = base + threadIdx.x;
        bool v = false;
        float x = 0.0f, y = 0.0f;
        if (i < PN) {
            const float *xy = p.loc + 2 * (ba * PN + i);
            x = __ldg(xy);
            y = __ldg(xy + 1);
            v = loc_valid(x, y);
        }
        const unsigned mask = __ballot_sync(0xffffffffu, v);
        if (lane == 0)
            cnt[warp] = __popc(mask);
        __syncthreads();
        int off = total, chunk = 0;
#pragma unroll
        for (int w = 0; w < W; w++) {
            const int c = cnt[w];
            off += w < warp ? c : 0;
            chunk += c;
        }
        if (v) {
            const int j = off + __popc(mask & ((1u << lane) - 1u));
            s.pidx[j] = (int)i;
            s.pxy[j] = make_float2(x, y);
        }
        total += chunk;
        __syncthreads();
    }
    return total;
}

/* The record of item it (level-major numbering) of an anchor with nvalid valid pairs. */
__device__ inline void make_item(const Dyn &s, int it, int nvalid, int L32, int N32, Corners &cr,
                                 int &pi, int &l, int &map)
{
    l = it / nvalid;
    const int j = it - l * nvalid;
    pi = s.pidx[j];
    const float2 xy = s.pxy[j];
    map = (pi % N32) * L32 + l;
    make_corners(s.maps[map], xy.x, xy.y, cr);
}

/* ------------------------------------------------------------------ distinct rows (dedup variants) */

/*
 * The corners of an anchor's items hit the same feature row often: on the realistic workload
 * 232.6 corner reads per anchor fall on 99.1 distinct rows (level 0: 70% distinct, level 3:
 * 20%). A row's contribution factorises over channels, coef[g] x row[c] in the forward and
 * coef[g] x grad_out[c] in the feature gradient, with coef[g] the sum over the row's corners
 * of weight[g] x corner weight. So a round of items can be reduced to its distinct rows and
 * their kDedupGroups coefficients first, and each row read (or scattered) once.
 *
 * Deterministic: an entry (item t, corner q), numbered 4t + q, leads when no earlier entry of
 * the same level in the round names its row (rows of different levels never coincide: each
 * level is its own map); the leaders are numbered by a block scan in entry order and each
 * leader sums its row's coefficients in entry order. No atomics, so the forward built on it is
 * bitwise reproducible. The scans are quadratic within a level (13-26 items per level on the
 * workload): cheap shared-memory work against the row loads they save.
 */
template <int TILE> struct DedupArrays {
    float wg[TILE * kDedupGroups];        /* the items' group weights */
    int urow[4 * TILE];                   /* distinct rows */
    float ucoef[4 * TILE * kDedupGroups]; /* their coefficients per group */
    int scan[33];
};

__device__ __forceinline__ bool has_row(const int4 &o, int r)
{
    return o.x == r || o.y == r || o.z == r || o.w == r;
}

/* Fills urow/ucoef with the distinct rows of the round's tn items (tn <= threads) and returns
   their number (the same in every thread). The records must be visible to the block before the
   call; the results are after it. */
template <int T, int TILE>
__device__ int dedup_rows(int tn, int tile0, int nvalid, int G, const int4 *rows, const float4 *cw,
                          DedupArrays<TILE> &dd)
{
    static_assert(TILE <= T, "one thread per item");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = threadIdx.x;
    int lead = 0, hi = 0;
    int4 r = make_int4(-1, -1, -1, -1);
    if (t < tn) {
        r = rows[t];
        const int l = (tile0 + t) / nvalid;
        const int lo = max(0, l * nvalid - tile0);
        hi = min(tn, (l + 1) * nvalid - tile0);
        /* The 4 corners of one item are distinct rows, so only earlier items can repeat one. */
        bool seen0 = r.x < 0, seen1 = r.y < 0, seen2 = r.z < 0, seen3 = r.w < 0;
        for (int u = lo; u < t; u++) {
            const int4 o = rows[u];
            seen0 |= has_row(o, r.x);
            seen1 |= has_row(o, r.y);
            seen2 |= has_row(o, r.z);
            seen3 |= has_row(o, r.w);
        }
        lead = (seen0 ? 0 : 1) | (seen1 ? 0 : 2) | (seen2 ? 0 : 4) | (seen3 ? 0 : 8);
    }
    const int n = __popc(lead);
    int v = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += x;
    }
    if (lane == 31)
        dd.scan[warp] = v;
    __syncthreads();
    int pos = v - n, total = 0;
#pragma unroll
    for (int w = 0; w < T / 32; w++) {
        const int c = dd.scan[w];
        pos += w < warp ? c : 0;
        total += c;
    }
    for (int q = 0; q < 4; q++) {
        if (!(lead >> q & 1))
            continue;
        const int rq = comp(r, q);
        float s[kDedupGroups];
#pragma unroll
        for (int g = 0; g < kDedupGroups; g++)
            s[g] = 0.0f;
        /* Entries before (t, q) with this row do not exist; the item's own other corners differ. */
        for (int u = t; u < hi; u++) {
            const int4 o = rows[u];
            if (!has_row(o, rq))
                continue;
            const float4 c = cw[u];
            const float cq = o.x == rq ? c.x : o.y == rq ? c.y : o.z == rq ? c.z : c.w;
#pragma unroll
            for (int g = 0; g < kDedupGroups; g++)
                if (g < G)
                    s[g] += dd.wg[u * kDedupGroups + g] * cq;
        }
        dd.urow[pos] = rq;
#pragma unroll
        for (int g = 0; g < kDedupGroups; g++)
            dd.ucoef[pos * kDedupGroups + g] = s[g];
        pos++;
    }
    __syncthreads();
    return total;
}

/* Stages the G group weights of item t (pair pi, level l) for dedup_rows. */
template <int TILE>
__device__ __forceinline__ void stage_weights(const Params &p, bool w_half, int64_t woff, int pi,
                                              int l, int t, DedupArrays<TILE> &dd)
{
    const int64_t wo = woff + ((int64_t)pi * p.L + l) * p.G;
#pragma unroll
    for (int g = 0; g < kDedupGroups; g++)
        dd.wg[t * kDedupGroups + g] = g < p.G ? load_w(p.weights, w_half, wo + g) : 0.0f;
}

/* ------------------------------------------------------------------ forward helpers */

/* The channels a lane owns in its block's slice: K vectors of VEC channels at cst[k], their
   groups, and whether they exist (C need not fill the last slice). */
template <int K, int VEC> struct LaneChannels {
    int cst[K], grp[K];
    bool cok[K];
    __device__ LaneChannels(const Params &p, int c_begin, int lane)
    {
#pragma unroll
        for (int k = 0; k < K; k++) {
            cst[k] = c_begin + k * 32 * VEC + lane * VEC;
            cok[k] = cst[k] < (int)p.C;
            grp[k] = cok[k] ? cst[k] / (int)p.cpg : 0;
        }
    }
};

template <int K, int VEC> __device__ __forceinline__ void zero_acc(float (&acc)[K][VEC])
{
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int v = 0; v < VEC; v++)
            acc[k][v] = 0.0f;
}

/* The records of a round's tn items (tile0 on), one thread per item: corner rows, corner
   weights, the offset of the item's weights. The caller orders them with a barrier. */
template <int T, typename Tile>
__device__ inline void make_records(Tile &tile, const Dyn &s, int tile0, int tn, int nvalid, int L32,
                                    int N32, int G32)
{
    for (int t = threadIdx.x; t < tn; t += T) {
        Corners cr;
        int pi, l, map;
        make_item(s, tile0 + t, nvalid, L32, N32, cr, pi, l, map);
        tile.rows[t] = make_int4((int)cr.row[0], (int)cr.row[1], (int)cr.row[2], (int)cr.row[3]);
        tile.cw[t] = make_float4(cr.w[0], cr.w[1], cr.w[2], cr.w[3]);
        tile.wrel[t] = (pi * L32 + l) * G32;
    }
}

/* The warps' partial sums of the slice meet in red (W x slice floats) and are added in warp
   order, so the output is the same bits on every run; ends with a barrier. */
template <int W, int K, int VEC>
__device__ inline void reduce_store(float *red, const float (&acc)[K][VEC], const Params &p, bool o_half,
                                    int64_t ba, int c_begin)
{
    constexpr int slice_w = 32 * VEC * K;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int v = 0; v < VEC; v += 4)
            *reinterpret_cast<float4 *>(red + warp * slice_w + k * 32 * VEC + lane * VEC + v) =
                make_float4(acc[k][v], acc[k][v + 1], acc[k][v + 2], acc[k][v + 3]);
    __syncthreads();
    for (int c = threadIdx.x; c < slice_w && c_begin + c < (int)p.C; c += W * 32) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++)
            sum += red[w * slice_w + c];
        store_f(p.out, o_half, ba * p.C + c_begin + c, sum);
    }
    __syncthreads();
}

/* ------------------------------------------------------------------ forward */

/* The float16 blend of one item's corners for the lane's VEC channels of vector k: HFMA2 over
   the corners inside the map, each corner's coefficient (group weight x corner weight) rounded
   to float16 once; the caller adds the result to its float32 sums. */
template <int VEC>
__device__ __forceinline__ void half_blend(const typename RawVec<__half, VEC>::T (&f)[4], const int4 &r,
                                           const float4 &c, float wg, float *out)
{
    __half2 s[VEC / 2];
#pragma unroll
    for (int j = 0; j < VEC / 2; j++)
        s[j] = __float2half2_rn(0.0f);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        if (comp(r, q) < 0)
            continue;
        const __half2 c2 = __float2half2_rn(wg * comp(c, q));
        const __half2 *h = reinterpret_cast<const __half2 *>(&f[q]);
#pragma unroll
        for (int j = 0; j < VEC / 2; j++)
            s[j] = __hfma2(h[j], c2, s[j]);
    }
#pragma unroll
    for (int j = 0; j < VEC / 2; j++) {
        const float2 t = __half22float2(s[j]);
        out[2 * j] = t.x;
        out[2 * j + 1] = t.y;
    }
}

/* Asks L1 for the line of a global address; no register waits for it. */
__device__ __forceinline__ void prefetch_l1(const void *a)
{
    asm volatile("prefetch.global.L1 [%0];" ::"l"(a) : "memory");
}

/* PF (variants items_w8_c8_pfn, items_w4_h2_pfn): before a warp loads its item's corner rows it
   asks L1 for those of its next item in the tile, so that the next item's loads hit L1 instead
   of waiting on L2: a second item in flight per warp without the registers of U = 2. One
   prefetch per lane and item: 8 lanes per corner row, one 128-byte line each (the block's
   channel slice, up to 1 KB of it per row). */
template <typename TF, int VEC, int K, int W, int U, int MINB, bool HB = false, bool PF = false>
__global__ void __launch_bounds__(W * 32, MINB)
    fwd_items_kernel(Params p, bool w_half, bool o_half)
{
    S4D_KERNEL_BEGIN();
    static_assert(!PF || U == 1, "the prefetch stands for a second item in flight");
    static_assert(!HB || sizeof(TF) == 2, "the float16 blend reads float16 features");
    constexpr int T = W * 32;
    constexpr int slice_w = 32 * VEC * K;
    using Raw = typename RawVec<TF, VEC>::T;
    extern __shared__ __align__(16) char smem_raw[];
    __shared__ FwdTile<W, W * slice_w> tile;
    const Dyn s = dyn_at(smem_raw, p.N * p.L, p.P * p.N);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int C32 = (int)p.C, L32 = (int)p.L, N32 = (int)p.N, G32 = (int)p.G;
    const int c_begin = (int)blockIdx.y * slice_w;
    const LaneChannels<K, VEC> ch(p, c_begin, lane);
    const int *cst = ch.cst, *grp = ch.grp;
    const bool *cok = ch.cok;
    /* PF: this lane's line (lane % 8) of a row of the next item, if the slice has it. */
    const bool pf_on = PF && (lane & 7) * 128 < min(C32 - c_begin, slice_w) * (int)sizeof(TF);
    load_maps(p, s.maps);
    __syncthreads();
    const int64_t nba = p.bs * p.A, PN = p.P * p.N, PNLG = PN * p.L * p.G;
    const TF *feat = static_cast<const TF *>(p.feat);
    for (int64_t ba = blockIdx.x; ba < nba; ba += gridDim.x) {
        const int64_t b = ba / p.A;
        const TF *fb = feat + b * p.F * p.C;
        const int64_t woff = ba * PNLG;
        const int nvalid = compact_pairs<W>(p, s, tile.cnt, ba);
        const int items = nvalid * L32;
        float acc[K][VEC];
        zero_acc(acc);
        for (int tile0 = 0; tile0 < items; tile0 += kTile) {
            const int tn = min(kTile, items - tile0);
            make_records<T>(tile, s, tile0, tn, nvalid, L32, N32, G32);
            __syncthreads();
            for (int t = warp; t < tn; t += W * U) {
                if constexpr (PF) {
                    if (t + W < tn) {
                        /* corner lane / 8 of the next item */
                        const int rq = reinterpret_cast<const int *>(&tile.rows[t + W])[lane >> 3];
                        if (pf_on && rq >= 0)
                            prefetch_l1(reinterpret_cast<const char *>(fb + (int64_t)rq * C32 + c_begin) +
                                        (lane & 7) * 128);
                    }
                }
                int4 r[U];
                float4 c[U];
                float wg[U][K];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int tu = t + u * W;
                    const bool has = u == 0 || tu < tn;
                    r[u] = has ? tile.rows[tu] : make_int4(-1, -1, -1, -1);
                    c[u] = has ? tile.cw[tu] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    const int wr = has ? tile.wrel[tu] : 0;
#pragma unroll
                    for (int k = 0; k < K; k++)
                        wg[u][k] = has && cok[k] ? load_w(p.weights, w_half, woff + wr + grp[k]) : 0.0f;
                }
                /* Every load of the U items first, then the arithmetic. */
                Raw f[U][K][4];
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const int rq = comp(r[u], q);
#pragma unroll
                        for (int k = 0; k < K; k++)
                            if (rq >= 0 && cok[k])
                                f[u][k][q] = ldv<TF, VEC>(fb + (int64_t)rq * C32 + cst[k]);
                    }
                if constexpr (HB) {
#pragma unroll
                    for (int u = 0; u < U; u++)
#pragma unroll
                        for (int k = 0; k < K; k++) {
                            if (!cok[k])
                                continue;
                            float v[VEC];
                            half_blend<VEC>(f[u][k], r[u], c[u], wg[u][k], v);
#pragma unroll
                            for (int e = 0; e < VEC; e++)
                                acc[k][e] += v[e];
                        }
                } else {
#pragma unroll
                    for (int u = 0; u < U; u++)
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            const int rq = comp(r[u], q);
                            const float cq = comp(c[u], q);
#pragma unroll
                            for (int k = 0; k < K; k++) {
                                if (rq < 0 || !cok[k])
                                    continue;
                                float v[VEC];
                                unpack(f[u][k][q], v);
                                const float coef = wg[u][k] * cq;
#pragma unroll
                                for (int e = 0; e < VEC; e++)
                                    acc[k][e] += coef * v[e];
                            }
                        }
                }
            }
            __syncthreads();
        }
        reduce_store<W>(tile.red, acc, p, o_half, ba, c_begin);
    }
}

/* The forward over distinct rows (variants items_w*_dedup): per round of items the block finds
   the distinct rows and their group coefficients (dedup_rows), then its warps take the rows
   four at a time, issue the four rows' loads at once and multiply-add coef[g] x row. */
constexpr int kDedupTile = 64; /* items per round: one round for 13 valid pairs x 4 levels */

template <int W, int RED> struct FwdDedupTile {
    int4 rows[kDedupTile];
    float4 cw[kDedupTile];
    float red[RED];
    int cnt[W + 1];
    DedupArrays<kDedupTile> dd;
};

template <typename TF, int VEC, int K, int W, int MINB>
__global__ void __launch_bounds__(W * 32, MINB) fwd_dedup_kernel(Params p, bool w_half, bool o_half)
{
    S4D_KERNEL_BEGIN();
    constexpr int T = W * 32;
    constexpr int slice_w = 32 * VEC * K;
    using Raw = typename RawVec<TF, VEC>::T;
    extern __shared__ __align__(16) char smem_raw[];
    __shared__ FwdDedupTile<W, W * slice_w> tile;
    const Dyn s = dyn_at(smem_raw, p.N * p.L, p.P * p.N);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int C32 = (int)p.C, L32 = (int)p.L, N32 = (int)p.N, G32 = (int)p.G;
    const int c_begin = (int)blockIdx.y * slice_w;
    const LaneChannels<K, VEC> ch(p, c_begin, lane);
    const int *cst = ch.cst, *grp = ch.grp;
    const bool *cok = ch.cok;
    load_maps(p, s.maps);
    __syncthreads();
    const int64_t nba = p.bs * p.A, PN = p.P * p.N, PNLG = PN * p.L * p.G;
    const TF *feat = static_cast<const TF *>(p.feat);
    for (int64_t ba = blockIdx.x; ba < nba; ba += gridDim.x) {
        const int64_t b = ba / p.A;
        const TF *fb = feat + b * p.F * p.C;
        const int64_t woff = ba * PNLG;
        const int nvalid = compact_pairs<W>(p, s, tile.cnt, ba);
        const int items = nvalid * L32;
        float acc[K][VEC];
        zero_acc(acc);
        for (int tile0 = 0; tile0 < items; tile0 += kDedupTile) {
            const int tn = min(kDedupTile, items - tile0);
            if (threadIdx.x < tn) {
                const int t = threadIdx.x;
                Corners cr;
                int pi, l, map;
                make_item(s, tile0 + t, nvalid, L32, N32, cr, pi, l, map);
                tile.rows[t] = make_int4((int)cr.row[0], (int)cr.row[1], (int)cr.row[2], (int)cr.row[3]);
                tile.cw[t] = make_float4(cr.w[0], cr.w[1], cr.w[2], cr.w[3]);
                stage_weights(p, w_half, woff, pi, l, t, tile.dd);
            }
            __syncthreads();
            const int nu = dedup_rows<T>(tn, tile0, nvalid, G32, tile.rows, tile.cw, tile.dd);
            for (int u0 = warp * 4; u0 < nu; u0 += W * 4) {
                int rr[4];
                float co[4][K];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int u = u0 + j;
                    rr[j] = u < nu ? tile.dd.urow[u] : -1;
#pragma unroll
                    for (int k = 0; k < K; k++)
                        co[j][k] = rr[j] >= 0 ? tile.dd.ucoef[u * kDedupGroups + grp[k]] : 0.0f;
                }
                Raw f[4][K];
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int k = 0; k < K; k++)
                        if (rr[j] >= 0 && cok[k])
                            f[j][k] = ldv<TF, VEC>(fb + (int64_t)rr[j] * C32 + cst[k]);
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int k = 0; k < K; k++) {
                        if (rr[j] < 0 || !cok[k])
                            continue;
                        float v[VEC];
                        unpack(f[j][k], v);
#pragma unroll
                        for (int e = 0; e < VEC; e++)
                            acc[k][e] += co[j][k] * v[e];
                    }
            }
            __syncthreads();
        }
        reduce_store<W>(tile.red, acc, p, o_half, ba, c_begin);
    }
}

/* ------------------------------------------------------------------ backward */

template <int VEC>
__device__ __forceinline__ void load_go(const void *p, bool half, int64_t off, float *o)
{
    if (half)
        load_n<VEC>(static_cast<const __half *>(p) + off, o, true);
    else
        load_n<VEC>(static_cast<const float *>(p) + off, o, true);
}

/* DEDUP (variant items_w8_dedup): the feature gradient is scattered after each round, one
   atomic row per distinct row of the round (dedup_rows) with coef[g] x grad_out, instead of
   one per (item, corner): 2.35x fewer atomics on the realistic workload.
   PART (variant items_w8_split, launch_bwd_split_t): 0 every gradient asked for; 1 the
   location and weight gradients, each block first clearing its share of grad_features (the
   whole of it over the grid); 2 the feature gradient only (no feature row is read; with DEDUP
   only the distinct rows' scatter, items_w8_split_dedup). */
template <typename TF, int VEC, int K, int W, int MINB, bool DET, bool DEDUP, int PART = 0>
__global__ void __launch_bounds__(W * 32, MINB)
    bwd_items_kernel(Params p, bool w_half, bool g_half, bool vec_gf, int lpg, DetBuffers d)
{
    S4D_KERNEL_BEGIN();
    static_assert(PART == 0 || (!DET && (PART == 2 || !DEDUP)), "the split backward is atomic");
    constexpr int T = W * 32;
    using Raw = typename RawVec<TF, VEC>::T;
    extern __shared__ __align__(16) char smem_raw[];
    __shared__ BwdTile<W> tile;
    __shared__ DedupArrays<DEDUP ? kTile : 1> dd;
    const Dyn s = dyn_at(smem_raw, p.N * p.L, p.P * p.N);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int C32 = (int)p.C, L32 = (int)p.L, N32 = (int)p.N, G32 = (int)p.G;
    int cst[K], grp[K];
    bool cok[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        cst[k] = k * 32 * VEC + lane * VEC;
        cok[k] = cst[k] < C32;
        grp[k] = cok[k] ? cst[k] / (int)p.cpg : 0;
    }
    load_maps(p, s.maps);
    __syncthreads();
    const int64_t nba = p.bs * p.A, PN = p.P * p.N, PNL = PN * p.L, PNLG = PNL * p.G;
    const TF *feat = static_cast<const TF *>(p.feat);
    TF *gfeat = static_cast<TF *>(p.grad_feat);
    void *gw = p.grad_w;
    float *gloc = p.grad_loc;
    int64_t nba_run = nba;
    if constexpr (PART == 1) {
        /* Stores only, issued before the gathers: they drain to memory while the block waits on
           its loads, instead of a memset before the kernel. Bytes: a multiple of 16
           (bwd_items_supported). */
        if (gfeat) {
            const int64_t words = p.bs * p.F * p.C * (int64_t)sizeof(TF) / 16;
            const int64_t per = (words + gridDim.x - 1) / gridDim.x;
            const int64_t lo = (int64_t)blockIdx.x * per, hi = min(words, lo + per);
            uint4 *dst = reinterpret_cast<uint4 *>(gfeat);
            for (int64_t i = lo + threadIdx.x; i < hi; i += T)
                dst[i] = make_uint4(0u, 0u, 0u, 0u);
        }
        if (!gw && !gloc)
            nba_run = 0; /* only the clear: the scatter follows */
    }
    for (int64_t ba = blockIdx.x; ba < nba_run; ba += gridDim.x) {
        const int64_t b = ba / p.A;
        const TF *fb = feat + b * p.F * p.C;
        const int64_t woff = ba * PNLG;
        /* Invalid pairs get zero gradients: clear the anchor's slices, coalesced; valid items
           overwrite their entries after the barriers of the compaction. */
        for (int64_t i = threadIdx.x; i < PN; i += T)
            s.pacc[i] = make_float2(0.0f, 0.0f);
        if (gw)
            for (int64_t i = threadIdx.x; i < PNLG; i += T)
                store_f(gw, w_half, woff + i, 0.0f);
        if (DET)
            for (int64_t i = threadIdx.x; i < PNL; i += T) {
                d.keys[ba * PNL + i] = d.sentinel;
                d.slots[ba * PNL + i] = (uint32_t)(ba * PNL + i);
            }
        const int nvalid = compact_pairs<W>(p, s, tile.cnt, ba);
        const int items = nvalid * L32;
        float go[K][VEC];
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (cok[k])
                load_go<VEC>(p.grad_out, g_half, ba * p.C + cst[k], go[k]);
            else
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    go[k][v] = 0.0f;
        }
        for (int tile0 = 0; tile0 < items; tile0 += kTile) {
            const int tn = min(kTile, items - tile0);
            for (int t = threadIdx.x; t < tn; t += T) {
                Corners cr;
                int pi, l, map;
                make_item(s, tile0 + t, nvalid, L32, N32, cr, pi, l, map);
                const int4 rows = make_int4((int)cr.row[0], (int)cr.row[1], (int)cr.row[2], (int)cr.row[3]);
                const float4 cw = make_float4(cr.w[0], cr.w[1], cr.w[2], cr.w[3]);
                const MapInfo m = s.maps[map];
                tile.rows[t] = rows;
                tile.cw[t] = cw;
                tile.geo[t] = make_float4(cr.lh, cr.lw, (float)m.w, (float)m.h);
                tile.wrel[t] = (pi * L32 + l) * G32;
                if (DEDUP)
                    stage_weights(p, w_half, woff, pi, l, t, dd);
                if (DET && (rows.x >= 0 || rows.y >= 0 || rows.z >= 0 || rows.w >= 0)) {
                    /* Key: the linear index of the top-left corner, shifted by W + 1 so that a
                       corner at row or column -1 stays non-negative. */
                    const int64_t slot = (ba * PN + pi) * p.L + l;
                    int h0, w0;
                    float lh, lw;
                    const float2 xy = s.pxy[(tile0 + t) - l * nvalid];
                    pixel_coords(m, xy.x, xy.y, h0, w0, lh, lw);
                    const int64_t tl = (int64_t)m.start + (int64_t)h0 * m.w + w0 + m.w + 1;
                    d.keys[slot] = (uint32_t)(b * d.key_stride + tl);
                    d.rec_rows[slot] = rows;
                    d.rec_cw[slot] = cw;
                    d.rec_meta[slot] = make_int2(map, (int)ba);
                }
            }
            __syncthreads();
            /* (the distinct rows' scatter alone has nothing to do per item) */
            for (int t = warp; t < (PART == 2 && DEDUP ? 0 : tn); t += W) {
                const int4 r = tile.rows[t];
                const float4 c = tile.cw[t];
                const float4 geo = tile.geo[t];
                const int wr = tile.wrel[t];
                float wg[K];
#pragma unroll
                for (int k = 0; k < K; k++)
                    wg[k] = cok[k] ? load_w(p.weights, w_half, woff + wr + grp[k]) : 0.0f;
                Raw f[K][4];
                if constexpr (PART != 2) {
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const int rq = comp(r, q);
#pragma unroll
                        for (int k = 0; k < K; k++)
                            if (rq >= 0 && cok[k])
                                f[k][q] = ldv<TF, VEC>(fb + (int64_t)rq * C32 + cst[k]);
                    }
                }
                const float lh = geo.x, lw = geo.y;
                float gx = 0.0f, gy = 0.0f;
#pragma unroll
                for (int k = 0; k < K; k++) {
                    if constexpr (PART != 2) {
                        float dq[4];
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            dq[q] = 0.0f;
                            if (comp(r, q) >= 0 && cok[k]) {
                                float v[VEC];
                                unpack(f[k][q], v);
#pragma unroll
                                for (int e = 0; e < VEC; e++)
                                    dq[q] += go[k][e] * v[e];
                            }
                        }
                        /* d(corner weight)/d(lw) and /d(lh), summed over the corners. */
                        const float cx = (1.0f - lh) * (dq[1] - dq[0]) + lh * (dq[3] - dq[2]);
                        const float cy = (1.0f - lw) * (dq[2] - dq[0]) + lw * (dq[3] - dq[1]);
                        gx += wg[k] * cx;
                        gy += wg[k] * cy;
                        if (gw) {
                            float sv = c.x * dq[0] + c.y * dq[1] + c.z * dq[2] + c.w * dq[3];
                            for (int o = lpg >> 1; o > 0; o >>= 1)
                                sv += __shfl_xor_sync(0xffffffffu, sv, o);
                            if (cok[k] && (lane & (lpg - 1)) == 0)
                                store_f(gw, w_half, woff + wr + grp[k], sv);
                        }
                    }
                    if (!DET && !DEDUP && PART != 1 && gfeat) {
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            const int rq = comp(r, q);
                            if (rq < 0 || !cok[k])
                                continue;
                            const float coef = wg[k] * comp(c, q);
                            float add[VEC];
#pragma unroll
                            for (int e = 0; e < VEC; e++)
                                add[e] = coef * go[k][e];
                            atomic_add_n<VEC>(gfeat + (b * p.F + rq) * p.C + cst[k], add, vec_gf);
                        }
                    }
                }
                if (PART != 2 && gloc) {
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) {
                        gx += __shfl_xor_sync(0xffffffffu, gx, o);
                        gy += __shfl_xor_sync(0xffffffffu, gy, o);
                    }
                    if (lane == 0)
                        tile.itg[t] = make_float2(gx * geo.z, gy * geo.w);
                }
            }
            __syncthreads();
            if (DEDUP && gfeat) {
                const int nu = dedup_rows<T>(tn, tile0, nvalid, G32, tile.rows, tile.cw, dd);
                for (int u = warp; u < nu; u += W) {
                    const int rq = dd.urow[u];
#pragma unroll
                    for (int k = 0; k < K; k++) {
                        if (!cok[k])
                            continue;
                        const float coef = dd.ucoef[u * kDedupGroups + grp[k]];
                        float add[VEC];
#pragma unroll
                        for (int e = 0; e < VEC; e++)
                            add[e] = coef * go[k][e];
                        atomic_add_n<VEC>(gfeat + (b * p.F + rq) * p.C + cst[k], add, vec_gf);
                    }
                }
            }
            /* Each pair adds its items of this round in level order. */
            if (gloc) {
                for (int j = threadIdx.x; j < nvalid; j += T) {
                    const int pi = s.pidx[j];
                    float2 a = s.pacc[pi];
                    for (int l = 0; l < L32; l++) {
                        const int it = l * nvalid + j - tile0;
                        if (it >= 0 && it < tn) {
                            a.x += tile.itg[it].x;
                            a.y += tile.itg[it].y;
                        }
                    }
                    s.pacc[pi] = a;
                }
            }
            __syncthreads();
        }
        if (gloc)
            for (int64_t i = threadIdx.x; i < PN; i += T) {
                const float2 a = s.pacc[i];
                gloc[2 * (ba * PN + i)] = a.x;
                gloc[2 * (ba * PN + i) + 1] = a.y;
            }
        __syncthreads();
    }
}

/* ------------------------------------------------------------------ forward, staged loads */

/* cp.async of 16 bytes, cached in L1 as well (corner rows repeat within an anchor). The
   "memory" clobbers keep the compiler from moving shared-memory reads of a stage past the
   copies that refill it. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int W> struct AsyncTile {
    int4 rows[kTile];
    float4 cw[kTile];
    int wrel[kTile];
    int cnt[W + 1];
};

/* Bytes of the per-warp rings: W warps x S stages x 4 corners x K vectors x 32 lanes x 16. */
__host__ __device__ constexpr size_t async_ring_bytes(int W, int S, int K)
{
    return (size_t)W * S * 4 * K * 32 * 16;
}

/*
 * The item forward with its feature loads staged through shared memory (variants
 * items_w*_async*). The register kernel above holds an item's loads in registers and has
 * nothing in flight while it adds them up; registers cap it at 24 warps per SM with one item
 * each. Here every warp keeps a ring of S stages in shared memory: while it adds up item j
 * from stage j % S, the copies of items j+1 .. j+S-1 are in flight (cp.async), so loads are
 * outstanding all the time and hold no registers. A lane copies and later reads only its own
 * channels, so the per-thread wait_group orders everything and no warp barrier is needed.
 * Channels per lane, item order per warp, products and the warp-order reduction are those of
 * fwd_items_kernel with the same W: the outputs are the same bits.
 */
template <typename TF, int VEC, int K, int W, int S, int MINB>
__global__ void __launch_bounds__(W * 32, MINB) fwd_async_kernel(Params p, bool w_half, bool o_half)
{
    S4D_KERNEL_BEGIN();
    constexpr int T = W * 32;
    constexpr int slice_w = 32 * VEC * K;
    using Raw = typename RawVec<TF, VEC>::T;
    static_assert(sizeof(Raw) == 16, "16-byte vectors");
    extern __shared__ __align__(16) char smem_raw[];
    __shared__ AsyncTile<W> tile;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* The rings first (16-byte aligned), then the per-anchor arrays. */
    uint4 *ring = reinterpret_cast<uint4 *>(smem_raw) + (size_t)warp * S * 4 * K * 32;
    const Dyn s = dyn_at(smem_raw + async_ring_bytes(W, S, K), p.N * p.L, p.P * p.N);
    const int C32 = (int)p.C, L32 = (int)p.L, N32 = (int)p.N, G32 = (int)p.G;
    const int c_begin = (int)blockIdx.y * slice_w;
    const LaneChannels<K, VEC> ch(p, c_begin, lane);
    const int *cst = ch.cst, *grp = ch.grp;
    const bool *cok = ch.cok;
    load_maps(p, s.maps);
    __syncthreads();
    const int64_t nba = p.bs * p.A, PN = p.P * p.N, PNLG = PN * p.L * p.G;
    const TF *feat = static_cast<const TF *>(p.feat);
    for (int64_t ba = blockIdx.x; ba < nba; ba += gridDim.x) {
        const int64_t b = ba / p.A;
        const TF *fb = feat + b * p.F * p.C;
        const int64_t woff = ba * PNLG;
        const int nvalid = compact_pairs<W>(p, s, tile.cnt, ba);
        const int items = nvalid * L32;
        float acc[K][VEC];
        zero_acc(acc);
        for (int tile0 = 0; tile0 < items; tile0 += kTile) {
            const int tn = min(kTile, items - tile0);
            make_records<T>(tile, s, tile0, tn, nvalid, L32, N32, G32);
            __syncthreads();
            /* This warp's items of the round: warp, warp + W, ...; item j lives in stage j % S. */
            const int nw = warp < tn ? (tn - warp + W - 1) / W : 0;
            float wq[S][K];
            /* Copies item j into stage u and loads its group weights into wq[u]. */
            auto issue = [&](int j, int u) {
                const int t = warp + j * W;
                const int4 r = tile.rows[t];
                const int wr = tile.wrel[t];
#pragma unroll
                for (int k = 0; k < K; k++)
                    wq[u][k] = cok[k] ? load_w(p.weights, w_half, woff + wr + grp[k]) : 0.0f;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int rq = comp(r, q);
                    if (rq < 0)
                        continue;
#pragma unroll
                    for (int k = 0; k < K; k++)
                        if (cok[k])
                            cp_async16(ring + ((u * 4 + q) * K + k) * 32 + lane, fb + (int64_t)rq * C32 + cst[k]);
                }
            };
#pragma unroll
            for (int u = 0; u < S - 1; u++) {
                if (u < nw)
                    issue(u, u);
                cp_async_commit();
            }
            for (int j0 = 0; j0 < nw; j0 += S) {
#pragma unroll
                for (int u = 0; u < S; u++) {
                    const int j = j0 + u;
                    if (j >= nw)
                        break;
                    /* Refill the stage item j - 1 used; then item j's group is the oldest but S - 1. */
                    if (j + S - 1 < nw)
                        issue(j + S - 1, (u + S - 1) % S);
                    cp_async_commit();
                    cp_async_wait<S - 1>();
                    const int t = warp + j * W;
                    const int4 r = tile.rows[t];
                    const float4 c = tile.cw[t];
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const int rq = comp(r, q);
                        const float cq = comp(c, q);
#pragma unroll
                        for (int k = 0; k < K; k++) {
                            if (rq < 0 || !cok[k])
                                continue;
                            const uint4 raw = ring[((u * 4 + q) * K + k) * 32 + lane];
                            float v[VEC];
                            unpack(*reinterpret_cast<const Raw *>(&raw), v);
                            const float coef = wq[u][k] * cq;
#pragma unroll
                            for (int e = 0; e < VEC; e++)
                                acc[k][e] += coef * v[e];
                        }
                    }
                }
            }
            cp_async_wait<0>();
            __syncthreads();
        }
        /* Partial sums meet in the rings (every copy has landed). */
        reduce_store<W>(reinterpret_cast<float *>(smem_raw), acc, p, o_half, ba, c_begin);
    }
}

/* ------------------------------------------------------------------ launchers */

constexpr size_t kMaxSmem = 48 * 1024;

unsigned grid_x(int64_t nba)
{
    return (unsigned)(nba < (1 << 20) ? nba : (1 << 20));
}

template <typename TF, int VEC, int K, int W, int MINB>
s4d_status launch_fwd_dedup_t(const Params &p, bool w_half, bool o_half, cudaStream_t st,
                              s4d_errbuf *err)
{
    const int64_t slice_w = 32 * VEC * K;
    const int64_t slices = (p.C + slice_w - 1) / slice_w;
    const size_t smem = dyn_bytes(p.N * p.L, p.P * p.N);
    dim3 grid(grid_x(p.bs * p.A), (unsigned)slices);
    const cudaError_t launched = s4d_launch(fwd_dedup_kernel<TF, VEC, K, W, MINB>, grid, W * 32, smem,
                                            st, p, w_half, o_half);
    return launch_status(err, launched, "dedup item forward kernel launch");
}

template <typename TF, int VEC, int K, int W, int U, int MINB, bool HB = false, bool PF = false>
s4d_status launch_fwd_t(const Params &p, bool w_half, bool o_half, cudaStream_t st, s4d_errbuf *err)
{
    const int64_t slice_w = 32 * VEC * K;
    const int64_t slices = (p.C + slice_w - 1) / slice_w;
    const size_t smem = dyn_bytes(p.N * p.L, p.P * p.N);
    dim3 grid(grid_x(p.bs * p.A), (unsigned)slices);
    const cudaError_t launched = s4d_launch(fwd_items_kernel<TF, VEC, K, W, U, MINB, HB, PF>, grid, W * 32,
                                            smem, st, p, w_half, o_half);
    return launch_status(err, launched, "item forward kernel launch");
}

template <typename TF, int VEC, int K, int W, int S, int MINB>
s4d_status launch_fwd_async_t(const Params &p, bool w_half, bool o_half, cudaStream_t st, s4d_errbuf *err)
{
    const int64_t slice_w = 32 * VEC * K;
    const int64_t slices = (p.C + slice_w - 1) / slice_w;
    const size_t smem = async_ring_bytes(W, S, K) + dyn_bytes(p.N * p.L, p.P * p.N);
    auto kern = fwd_async_kernel<TF, VEC, K, W, S, MINB>;
    /* Above 48 KB a kernel must opt in; fwd_items_supported checked the device's limit. */
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "setting the staged item forward's shared memory");
    dim3 grid(grid_x(p.bs * p.A), (unsigned)slices);
    const cudaError_t launched = s4d_launch(kern, grid, W * 32, smem, st, p, w_half, o_half);
    return launch_status(err, launched, "staged item forward kernel launch");
}

/* The forward shapes: channels per lane (cpl) sets the vector width and the number of
   vectors per lane; 8-wide float16 vectors and two 4-wide float32 vectors both cover
   256 channels per warp. */
template <typename TF>
s4d_status launch_fwd_dtype(const Params &p, const FwdShape &s, bool w_half, bool o_half,
                            cudaStream_t st, s4d_errbuf *err)
{
    constexpr bool H = sizeof(TF) == 2;
    constexpr int V8 = H ? 8 : 4, K8 = H ? 1 : 2; /* 8 channels per lane */
    /* Blocks per SM each shape is compiled for (its register cap): float32 with 8 channels
       per lane holds 32 loaded values per item and needs up to 72 registers, still 7 blocks
       of 4 warps per SM, 924 resident blocks for the 900 anchors. */
    if (s.dedup) {
        /* The same register budgets as the shapes below. */
        if (s.warps == 4 && s.cpl == 8 && s.unroll == 1)
            return launch_fwd_dedup_t<TF, V8, K8, 4, H ? 8 : 7>(p, w_half, o_half, st, err);
        if (s.warps == 8 && s.cpl == 8 && s.unroll == 1)
            return launch_fwd_dedup_t<TF, V8, K8, 8, H ? 4 : 3>(p, w_half, o_half, st, err);
        return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no dedup item forward "
                           "for %d warps, %d channels per lane", s.warps, s.cpl);
    }
    if (s.stages > 0) {
        /* Registers no longer hold loads in flight: 64 per thread at most (8 blocks of 4
           warps), shared memory decides residency. */
        const int key = s.warps * 10 + s.stages;
        switch (key) {
        case 43: return launch_fwd_async_t<TF, V8, K8, 4, 3, 8>(p, w_half, o_half, st, err);
        case 82: return launch_fwd_async_t<TF, V8, K8, 8, 2, 4>(p, w_half, o_half, st, err);
        default: break;
        }
        return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no staged item forward "
                           "for %d warps and %d stages", s.warps, s.stages);
    }
    if (s.prefetch) {
        /* The next item's rows prefetched: the default shapes, items_w8_c8 and (float16
           features and output) items_w4_h2, otherwise items_w4_c8's. */
        if constexpr (H)
            if (s.half_blend && o_half && s.warps == 4)
                return launch_fwd_t<TF, 8, 1, 4, 1, 8, true, true>(p, w_half, o_half, st, err);
        if (s.warps == 8 && s.cpl == 8 && s.unroll == 1)
            return launch_fwd_t<TF, V8, K8, 8, 1, H ? 4 : 3, false, true>(p, w_half, o_half, st, err);
        if (s.warps == 4 && s.cpl == 8 && s.unroll == 1)
            return launch_fwd_t<TF, V8, K8, 4, 1, H ? 8 : 7, false, true>(p, w_half, o_half, st, err);
        return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no prefetching item "
                           "forward for %d warps, %d channels per lane", s.warps, s.cpl);
    }
    if constexpr (H) {
        /* Only for a float16 output, which rounds to float16 anyway: with a float32 output the
           float16 features' products stay exact, as in every other variant. */
        if (s.half_blend && o_half && s.cpl == 8 && s.unroll == 1) {
            if (s.warps == 4)
                return launch_fwd_t<TF, 8, 1, 4, 1, 8, true>(p, w_half, o_half, st, err);
            if (s.warps == 8)
                return launch_fwd_t<TF, 8, 1, 8, 1, 4, true>(p, w_half, o_half, st, err);
        }
    }
    if (s.minb > 0 && s.cpl == 8 && s.unroll == 1) {
        /* 64 registers per thread: 8 blocks of 4 warps or 4 of 8 per SM. */
        if (s.warps == 4 && s.minb == 8)
            return launch_fwd_t<TF, V8, K8, 4, 1, 8>(p, w_half, o_half, st, err);
        if (s.warps == 8 && s.minb == 4)
            return launch_fwd_t<TF, V8, K8, 8, 1, 4>(p, w_half, o_half, st, err);
        return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no item forward for %d "
                           "warps compiled for %d blocks per SM", s.warps, s.minb);
    }
    const int key = s.warps * 100 + s.cpl * 10 + s.unroll;
    switch (key) {
    case 481: return launch_fwd_t<TF, V8, K8, 4, 1, H ? 8 : 7>(p, w_half, o_half, st, err);
    case 881: return launch_fwd_t<TF, V8, K8, 8, 1, H ? 4 : 3>(p, w_half, o_half, st, err);
    case 281: return launch_fwd_t<TF, V8, K8, 2, 1, H ? 16 : 14>(p, w_half, o_half, st, err);
    case 441: return launch_fwd_t<TF, 4, 1, 4, 1, 8>(p, w_half, o_half, st, err);
    case 482: return launch_fwd_t<TF, V8, K8, 4, 2, H ? 6 : 4>(p, w_half, o_half, st, err);
    case 442: return launch_fwd_t<TF, 4, 1, 4, 2, H ? 8 : 6>(p, w_half, o_half, st, err);
    default: break;
    }
    return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no item forward for %d warps, "
                       "%d channels per lane, %d items in flight", s.warps, s.cpl, s.unroll);
}

template <typename TF, int VEC, int K, int W, int MINB, bool DEDUP = false>
s4d_status launch_bwd_t(const Params &p, bool w_half, bool g_half, bool vec_gf, int lpg,
                        const DetBuffers *det, cudaStream_t st, s4d_errbuf *err)
{
    const size_t smem = dyn_bytes(p.N * p.L, p.P * p.N);
    dim3 grid(grid_x(p.bs * p.A));
    DetBuffers d;
    cudaError_t launched;
    if (det) {
        d = *det;
        launched = s4d_launch(bwd_items_kernel<TF, VEC, K, W, MINB, true, false>, grid, W * 32, smem, st,
                              p, w_half, g_half, vec_gf, lpg, d);
    } else {
        memset(&d, 0, sizeof d);
        launched = s4d_launch(bwd_items_kernel<TF, VEC, K, W, MINB, false, DEDUP>, grid, W * 32, smem,
                              st, p, w_half, g_half, vec_gf, lpg, d);
    }
    return launch_status(err, launched, "item backward kernel launch");
}

/* The SMs of the current device; 0 when unknown. */
int sm_count()
{
    static std::atomic<int> cached[64];
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) {
        cudaGetLastError();
        return 0;
    }
    if (dev < 64 && (n = cached[dev].load(std::memory_order_relaxed)) > 0)
        return n;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (dev < 64)
        cached[dev].store(n, std::memory_order_relaxed);
    return n;
}

/*
 * The split backward (variant items_w8_split): the location and weight gradients, each block
 * clearing its share of grad_features first (PART 1; at least two blocks per SM, so that the
 * clear runs at the memory's speed with few anchors too), then the feature gradient's atomics
 * alone (PART 2, MINB2 blocks per SM; DEDUP2: one atomic row per distinct row of each round,
 * as items_w8_dedup scatters). The clear's writes drain while the gathers wait on their
 * loads, instead of a memset before them. The location and weight gradients come from the code
 * of items_w8_atomic.
 */
template <typename TF, int VEC, int K, int W, int MINB, int MINB2, bool DEDUP2 = false>
s4d_status launch_bwd_split_t(const Params &p, bool clear, bool w_half, bool g_half, bool vec_gf,
                              int lpg, cudaStream_t st, s4d_errbuf *err)
{
    const size_t smem = dyn_bytes(p.N * p.L, p.P * p.N);
    const dim3 grid(grid_x(p.bs * p.A));
    DetBuffers d;
    memset(&d, 0, sizeof d);
    const bool feat = p.grad_feat != nullptr;
    const int sms = sm_count();
    const unsigned min_blocks = feat && clear ? 2u * (unsigned)(sms > 0 ? sms : 132) : 1u;
    const dim3 grid1(grid.x > min_blocks ? grid.x : min_blocks);
    Params p1 = p;
    if (!clear)
        p1.grad_feat = nullptr; /* cleared before (items_w8_split_memset) */
    if (p1.grad_feat || p1.grad_loc || p1.grad_w) {
        const cudaError_t launched =
            s4d_launch(bwd_items_kernel<TF, VEC, K, W, MINB, false, false, 1>, grid1, W * 32, smem,
                       st, p1, w_half, g_half, vec_gf, lpg, d);
        if (launched != cudaSuccess)
            return launch_status(err, launched,
                                 "item backward kernel launch (clear, locations, weights)");
    }
    if (feat) {
        Params p2 = p;
        p2.grad_loc = nullptr;
        p2.grad_w = nullptr;
        const cudaError_t launched =
            s4d_launch(bwd_items_kernel<TF, VEC, K, W, MINB2, false, DEDUP2, 2>, grid, W * 32, smem,
                       st, p2, w_half, g_half, vec_gf, lpg, d);
        return launch_status(err, launched, "item backward kernel launch (features)");
    }
    return S4D_OK;
}

template <typename TF>
s4d_status launch_bwd_dtype(const Params &p, const BwdShape &s, bool w_half, bool g_half,
                            bool vec_gf, const DetBuffers *det, cudaStream_t st, s4d_errbuf *err)
{
    constexpr int V = 16 / sizeof(TF);
    const int K = (int)((p.C + 32 * V - 1) / (32 * V));
    const int lpg = (int)(p.cpg / V);
    if (s.split && !det) {
        const bool clear = s.split == 1;
        /* The scatter alone needs at most 64 registers: four blocks of 8 warps per SM. */
        if (K == 1 && s.warps == 8)
            return s.dedup ? launch_bwd_split_t<TF, V, 1, 8, 4, 4, true>(p, clear, w_half, g_half,
                                                                         vec_gf, lpg, st, err)
                           : launch_bwd_split_t<TF, V, 1, 8, 4, 4>(p, clear, w_half, g_half, vec_gf,
                                                                   lpg, st, err);
        if (K == 2 && s.warps == 8)
            return s.dedup ? launch_bwd_split_t<TF, V, 2, 8, 3, 4, true>(p, clear, w_half, g_half,
                                                                         vec_gf, lpg, st, err)
                           : launch_bwd_split_t<TF, V, 2, 8, 3, 4>(p, clear, w_half, g_half, vec_gf,
                                                                   lpg, st, err);
        return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no split item backward "
                           "for %d warps and %d vectors per lane", s.warps, K);
    }
    if (s.dedup && !det) {
        if (K == 1 && s.warps == 8)
            return launch_bwd_t<TF, V, 1, 8, 4, true>(p, w_half, g_half, vec_gf, lpg, nullptr, st, err);
        if (K == 2 && s.warps == 8)
            return launch_bwd_t<TF, V, 2, 8, 3, true>(p, w_half, g_half, vec_gf, lpg, nullptr, st, err);
        return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no dedup item backward "
                           "for %d warps and %d vectors per lane", s.warps, K);
    }
    if (K == 1 && s.warps == 4)
        return launch_bwd_t<TF, V, 1, 4, 8>(p, w_half, g_half, vec_gf, lpg, det, st, err);
    if (K == 1 && s.warps == 8)
        return launch_bwd_t<TF, V, 1, 8, 4>(p, w_half, g_half, vec_gf, lpg, det, st, err);
    if (K == 2 && s.warps == 4)
        return launch_bwd_t<TF, V, 2, 4, 6>(p, w_half, g_half, vec_gf, lpg, det, st, err);
    if (K == 2 && s.warps == 8)
        return launch_bwd_t<TF, V, 2, 8, 3>(p, w_half, g_half, vec_gf, lpg, det, st, err);
    return s4d_da_fail(err, S4D_ERR_INTERNAL, "deformable_aggregation: no item backward for %d warps "
                       "and %d vectors per lane", s.warps, K);
}

bool pow2(int64_t v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

} /* namespace */

bool fwd_items_supported(const Params &p, const FwdShape &s, size_t feat_size, const void *feat)
{
    const int64_t vec = feat_size == 2 && s.cpl == 8 ? 8 : 4;
    const size_t vbytes = (size_t)vec * feat_size;
    if (p.C % vec || p.cpg % vec || !aligned(feat, vbytes))
        return false;
    /* 32-bit item arithmetic: relative weight offsets and channel indices. */
    if (p.P * p.N * p.L * p.G >= INT32_MAX || p.C >= INT32_MAX / 2)
        return false;
    const int64_t slice_w = 32 * s.cpl;
    if ((p.C + slice_w - 1) / slice_w > 65535)
        return false;
    /* Static tile (at most 4.6 KB of records plus the partial sums of 8 warps x 256
       channels; the dedup tile at most 21 KB) and the dynamic per-anchor arrays. */
    if (s.dedup)
        return p.G <= kDedupGroups && dyn_bytes(p.N * p.L, p.P * p.N) + 22 * 1024 <= kMaxSmem;
    if (s.stages > 0) {
        /* The rings and the per-anchor arrays in dynamic shared memory (opted in above
           48 KB, up to the device's limit), the 4.6 KB of records beside them. */
        const int K = feat_size == 2 ? 1 : 2;
        int dev = 0, optin = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return async_ring_bytes(s.warps, s.stages, K) + dyn_bytes(p.N * p.L, p.P * p.N) + 5 * 1024 <=
               (size_t)optin;
    }
    return dyn_bytes(p.N * p.L, p.P * p.N) + 13 * 1024 <= kMaxSmem;
}

bool bwd_items_supported(const Params &p, const BwdShape &s, size_t feat_size,
                         const s4d_da_backward_args *a)
{
    const int64_t vec = 16 / (int64_t)feat_size;
    const size_t gsz = s4d_dtype_size(a->grad_output_dtype);
    if (p.C % vec || p.cpg % vec || !aligned(a->features, 16) ||
        !aligned(a->grad_output, (size_t)vec * gsz) || !aligned(a->grad_features, 16))
        return false;
    /* Whole groups in power-of-two runs of lanes, and every channel in one block. */
    if (!pow2(p.cpg / vec) || p.cpg / vec > 32 || p.C > 2 * 32 * vec)
        return false;
    if (p.P * p.N * p.L * p.G >= INT32_MAX || p.bs * p.A >= INT32_MAX)
        return false;
    /* The dedup backward adds 22.2 KB of distinct rows and coefficients to the 7.7 KB tile. */
    if (s.dedup)
        return s.warps == 8 && p.G <= kDedupGroups &&
               dyn_bytes(p.N * p.L, p.P * p.N) + 31 * 1024 <= kMaxSmem;
    return dyn_bytes(p.N * p.L, p.P * p.N) + 8 * 1024 <= kMaxSmem;
}

s4d_status launch_fwd_items(const Params &p, const FwdShape &s, bool feat_half, bool w_half,
                            bool o_half, cudaStream_t st, s4d_errbuf *err)
{
    return feat_half ? launch_fwd_dtype<__half>(p, s, w_half, o_half, st, err)
                     : launch_fwd_dtype<float>(p, s, w_half, o_half, st, err);
}

s4d_status launch_bwd_items(const Params &p, const BwdShape &s, bool feat_half, bool w_half,
                            bool g_half, const DetBuffers *det, cudaStream_t st, s4d_errbuf *err)
{
    /* bwd_items_supported checked grad_features' alignment for the vector atomics. */
    return feat_half ? launch_bwd_dtype<__half>(p, s, w_half, g_half, true, det, st, err)
                     : launch_bwd_dtype<float>(p, s, w_half, g_half, true, det, st, err);
}

} /* namespace s4d_da_cu */
