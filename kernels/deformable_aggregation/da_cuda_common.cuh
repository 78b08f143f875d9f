/*
 * Device helpers and launcher declarations shared by the CUDA sources of the
 * deformable aggregation op (internal):
 *   da_cuda.cu        public entry points, variant choice, the first kernels
 *   da_cuda_items.cu  the item kernels: forward and backward over compacted items
 *   da_cuda_det.cu    the deterministic feature gradient (sort, then gather)
 */
#ifndef S4D_DA_CUDA_COMMON_CUH
#define S4D_DA_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/pdl.cuh"
#include "da_internal.h"
#include "da_variants.h"

namespace s4d_da_cu {

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

/* Pixel coordinates and corner weights. Rounded multiply then subtract, never a fused
   multiply-add: the CPU oracle rounds twice too, and at W = 176 one rounding step moves lw
   by up to 1e-5, ten times the tolerance between the two implementations. */
__device__ __forceinline__ void pixel_coords(const MapInfo &m, float x, float y, int &h0, int &w0,
                                             float &lh, float &lw)
{
    float hf = __fsub_rn(__fmul_rn(y, (float)m.h), 0.5f);
    float wf = __fsub_rn(__fmul_rn(x, (float)m.w), 0.5f);
    float h0f = floorf(hf), w0f = floorf(wf);
    h0 = (int)h0f;
    w0 = (int)w0f;
    lh = hf - h0f;
    lw = wf - w0f;
}

__device__ __forceinline__ void make_corners(const MapInfo &m, float x, float y, Corners &c)
{
    int h0, w0;
    float lh, lw;
    pixel_coords(m, x, y, h0, w0, lh, lw);
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

/* Loads the map table into shared memory; a map whose rows leave [0, F) is marked not ok and
   contributes nothing, so bad tables never lead to a read outside the features. */
__device__ inline void load_maps(const Params &p, MapInfo *maps)
{
    for (int64_t i = threadIdx.x; i < p.N * p.L; i += blockDim.x) {
        int h = p.shape[2 * i], w = p.shape[2 * i + 1], st = p.start[i];
        MapInfo m;
        m.h = h;
        m.w = w;
        m.start = st;
        m.ok = h >= 1 && w >= 1 && st >= 0 && (int64_t)st + (int64_t)h * w <= p.F;
        maps[i] = m;
    }
}

/* Element access where the dtype is a runtime flag: weights, output, grad_output and
   grad_weights are touched far less than features, so a branch costs little and saves
   template instantiations. */
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

inline bool aligned(const void *p, size_t a)
{
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % a == 0;
}

inline s4d_status cuda_fail(s4d_errbuf *err, cudaError_t e, const char *what)
{
    return s4d_da_fail(err, S4D_ERR_CUDA, "deformable_aggregation: %s: %s (%s)", what,
                       cudaGetErrorName(e), cudaGetErrorString(e));
}

inline Params make_params(const s4d_da_sizes &z)
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
    p.cpg = z.num_groups > 0 ? z.channels / z.num_groups : 0;
    return p;
}

/* The status of a launch that returned `launched` (s4d_launch). */
inline s4d_status launch_status(s4d_errbuf *err, cudaError_t launched, const char *what)
{
    cudaError_t e = launched != cudaSuccess ? launched : cudaGetLastError();
    return e == cudaSuccess ? S4D_OK : cuda_fail(err, e, what);
}

/* ---------------------------------------------------------------- item kernels (da_cuda_items.cu) */

/* Shape of an item forward: warps per block, channels per lane per item (4 or 8), items each
   warp keeps in flight (1 or 2); dedup: sum the corner coefficients of equal feature rows of
   an anchor first and read each distinct row once (cpl 8, unroll 1, at most kDedupGroups
   groups); stages > 0: the item's feature rows go through a ring of that many per-warp
   stages in shared memory by cp.async (cpl 8, unroll 1), so loads stay in flight while
   earlier items are added up and cost no registers; half_blend: float16 features and output
   only, an item's 4 corners are blended in float16 pairs (HFMA2) and the blend is added to
   the float32 sums (other dtypes run the plain shape); minb > 0: blocks per SM to compile
   the plain shape for (its register cap), instead of the shape's default. */
struct FwdShape {
    int warps, cpl, unroll;
    bool dedup;
    int stages;
    bool half_blend;
    int minb;
    bool prefetch; /* the next item's corner rows asked of L1 before the item's loads */
};

/* Shape of an item backward; det: write item records and sort keys for the gather instead of
   scattering grad_features with atomics; dedup: scatter one atomic row per distinct feature
   row of an anchor instead of one per (item, corner). */
struct BwdShape {
    int warps;
    bool det, dedup;
    /* 1: the location and weight gradients (each block clearing its share of grad_features
       first), then the scatter alone; 2: the same after a memset of grad_features */
    int split;
};

/* Groups the dedup variants keep per distinct row (Sparse4Dv3 has 8). */
constexpr int kDedupGroups = 8;

/* Everything the deterministic feature gradient keeps between its kernels (in the caller's
   workspace; sizes from det_workspace_layout). */
struct DetBuffers {
    uint32_t *keys, *keys_sorted; /* one per item slot (b, a, p, n, l) */
    uint32_t *slots, *slots_sorted;
    int4 *rec_rows;               /* per slot: the 4 corner rows (-1 outside) */
    float4 *rec_cw;               /* per slot: the 4 corner weights */
    int2 *rec_meta;               /* per slot: map index, (b, a) */
    uint32_t *seg_begin, *seg_end; /* per key */
    void *sort_temp;
    size_t sort_temp_bytes;
    int64_t slots_n, keys_n;      /* item slots; keys per batch item x batch */
    int64_t key_stride;           /* keys per batch item */
    int end_bit;
    uint32_t sentinel;
};

/* Whether the item kernels take these arguments (vector widths, alignment, index ranges);
   when not, the caller runs the first kernels instead. */
bool fwd_items_supported(const Params &p, const FwdShape &s, size_t feat_size, const void *feat);
bool bwd_items_supported(const Params &p, const BwdShape &s, size_t feat_size,
                         const s4d_da_backward_args *a);

s4d_status launch_fwd_items(const Params &p, const FwdShape &s, bool feat_half, bool w_half,
                            bool o_half, cudaStream_t st, s4d_errbuf *err);
s4d_status launch_bwd_items(const Params &p, const BwdShape &s, bool feat_half, bool w_half,
                            bool g_half, const DetBuffers *det, cudaStream_t st, s4d_errbuf *err);

/* ---------------------------------------------------------------- deterministic gather (da_cuda_det.cu) */

/* Lays the buffers out in ws (NULL: only the size); returns the bytes needed, 0 when the sizes
   leave the 32-bit key and slot ranges (then the deterministic backward is unsupported). */
size_t det_workspace_layout(const s4d_da_sizes &z, void *ws, DetBuffers *d);

/* Keys and records of every item slot, for shapes the item backward does not take. */
s4d_status run_det_records(const Params &p, const DetBuffers &d, cudaStream_t st, s4d_errbuf *err);

/* Sorts the item keys, finds the segments and writes every row of grad_features. */
s4d_status run_det_gather(const Params &p, const DetBuffers &d, bool feat_half, bool w_half,
                          bool g_half, bool vec, cudaStream_t st, s4d_errbuf *err);

} /* namespace s4d_da_cu */

#endif /* S4D_DA_CUDA_COMMON_CUH */
