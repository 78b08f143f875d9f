/*
 * The fused attention kernels (see attention.h for the contract): float32 in
 * FFMA (here), float16 on tensor cores and float32 on TF32 tensor cores
 * (attention_tc.cu), the merge of a key split's partials and the host side
 * (here). The semantics paragraph holds for all three kernels.
 *
 * FFMA work split. A block of 256 threads owns 16 RT query rows of one batch
 * matrix and, when the keys are split over S blocks, every S-th key tile from
 * its index on (so that a contiguous run of masked keys is shared evenly
 * among the blocks); thread (ty, tx), ty, tx in [0, 16), owns
 * query rows RT ty .. RT ty + RT - 1 (RT = 8 up to D = 64: 128 rows per block,
 * so that each pair of shared-memory loads feeds 32 multiply-adds; RT = 4 at
 * D = 128, where 8 rows would not fit the registers). Per key tile of 64:
 *   1. K^T [D, 64] and V [64, Dv] are staged in shared memory (Q, transposed,
 *      stays there for the whole block);
 *   2. each thread computes an RT x 4 block of scores (keys 4 tx .. 4 tx + 3)
 *      in registers, applies the mask (skipped on a whole tile without one),
 *      and the 16 threads of a row (one half of a warp) agree on the row's new
 *      maximum by butterfly shuffles (every lane gets the same bits); each
 *      thread keeps the sum of its own keys' probabilities, rescaled with the
 *      maximum, and the 16 sums meet by a butterfly after the last tile;
 *   3. the probabilities go through shared memory (transposed, [key][query],
 *      runs of 4 rows swizzled per key: p_run) and each thread accumulates its
 *      RT rows x Dv/16 output columns.
 * Scores and the running maximum/sum stay in float.
 *
 * Dead tiles. With a key mask (the same for every query row) and a fill of
 * -inf, a tile none of whose keys is attended changes nothing: its scores are
 * all -inf, so its probabilities are 0, the running maximum stays, the scale
 * is exp(0) = 1 (or, before any live key, multiplies zeros), and P V adds
 * zeros. The FFMA block agrees on that with one barrier vote before the tile
 * is loaded, stages V alone, and skips the tile unless V holds an infinity or
 * a NaN (0 x inf and 0 x NaN are NaN in the unfused chain, so such a tile is
 * computed). Exact: the same bits as computing it. The tensor-core kernels
 * list their tiles before the first one, live tiles first (tc_order in
 * attention_tc.cu), and keep the scaled maximum of the last tile so that a
 * tile that leaves the maximum scales by exactly 1. Sparse4D's temporal
 * attention masks either its 600 cached keys or its 900 current ones.
 *
 * Softmax semantics are the unfused chain's: a masked score becomes
 * mask_fill exactly; a row whose scores are all -inf ends with sum 0 and so
 * 0 * (1 / 0) = NaN; NaN scores reach the sum and the accumulator. The
 * running maximum is used as 0 while it is -inf, so that -inf - -inf never
 * turns a row NaN before a finite score arrives.
 *
 * Head sizes are compiled for 16, 32, 64 and 128 (D and Dv padded with
 * zeros up to the next of these: a zero term adds nothing). Keys beyond Nk
 * are staged as zeros and their scores set to -inf; query rows beyond Nq
 * read zeros and are not stored.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/attention_common.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace s4d_attn {
namespace {

constexpr int NT = 256;      /* threads per block of the FFMA kernel */
/* Query rows per thread of the FFMA kernel (16 threads share a row) and per block. */
__host__ __device__ constexpr int f32_rt(int dp) { return dp <= 64 ? 8 : 4; }
__host__ __device__ constexpr int f32_bq(int dp) { return 16 * f32_rt(dp); }
/* padded rows of the transposed Q tile: fewer bank conflicts */
__host__ __device__ constexpr int f32_ld(int dp) { return f32_bq(dp) + 4; }

/*
 * The probabilities' tile P [BK][BQF] (keys by query rows) is written by each thread as float4
 * runs of 4 query rows for each of its 4 keys, and read as whole runs of a thread's rows for one
 * key. Unpadded, the 8 threads of a quarter warp (consecutive tx, one ty) would write runs
 * that start on two banks only: 4-way conflicts, which Nsight Compute counted as 63% of the
 * kernel's shared-store wavefronts. Run c of key row k lies at run c ^ (k / 4 % 8) instead:
 * the quarter warp's 8 keys k = 4 tx + j put the same run on 8 different banks, and a read of
 * one key row still finds every run whole.
 */
__device__ __forceinline__ int p_run(int key, int run) { return run ^ ((key >> 2) & 7); }

__device__ __forceinline__ float ld1(const float *p) { return __ldg(p); }

__device__ __forceinline__ float4 ld4(const float *p) { return __ldg(reinterpret_cast<const float4 *>(p)); }

__device__ __forceinline__ void st1(float *p, float v) { *p = v; }
__device__ __forceinline__ void st1(__half *p, float v) { *p = __float2half_rn(v); }

constexpr int smem_floats(int dp)
{
    return dp * f32_ld(dp) + dp * BK + BK * dp + BK * f32_bq(dp) + f32_bq(dp) * BK / 4;
}

/* N floats of shared memory into registers as N / 4 runs of 4, run r at src + at(r) (16-byte
   aligned). */
template <int N, class At>
__device__ __forceinline__ void lds_runs(float (&dst)[N], const float *src, At at)
{
#pragma unroll
    for (int r = 0; r < N / 4; r++) {
        const float4 v = *reinterpret_cast<const float4 *>(src + at(r));
        dst[r * 4 + 0] = v.x;
        dst[r * 4 + 1] = v.y;
        dst[r * 4 + 2] = v.z;
        dst[r * 4 + 3] = v.w;
    }
}

/* N consecutive floats of shared memory (16-byte aligned, N a multiple of 4) into registers. */
template <int N>
__device__ __forceinline__ void lds_rows(float (&dst)[N], const float *src)
{
    lds_runs(dst, src, [](int r) { return r * 4; });
}

/* Output column of accumulator c of thread tx (CPT = DP / 16 columns per thread). */
template <int DP>
__device__ __forceinline__ int out_col(int tx, int c)
{
    if (DP >= 64)
        return (c >> 2) * 64 + tx * 4 + (c & 3);
    if (DP == 32)
        return tx * 2 + c;
    return tx;
}

template <typename T, int DP>
__global__ void __launch_bounds__(NT, 2) attn_kernel(Args a)
{
    S4D_KERNEL_BEGIN();
    constexpr int CPT = DP / 16, RT = f32_rt(DP), BQF = f32_bq(DP), LDQ = f32_ld(DP), LDP = BQF;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); /* [DP][LDQ]: Q transposed */
    float *Ks = Qs + DP * LDQ;                    /* [DP][BK] */
    float *Vs = Ks + DP * BK;                     /* [BK][DP] */
    float *Ps = Vs + BK * DP;                     /* [BK][LDP]: probabilities transposed, runs swizzled (p_run) */
    unsigned char *Ms = reinterpret_cast<unsigned char *>(Ps + BK * LDP); /* [BQF][BK] mask tile */
    const s4d_cuda_attn_desc &g = a.g;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;

    const BlockWork<T> blk = block_work<T>(a);
    const int split = blk.split;
    const int64_t qt = blk.qt, b = blk.b, om = blk.om;
    const T *Q = blk.q, *K = blk.k, *V = blk.v;
    const unsigned char *M = g.has_mask ? a.mask + om : nullptr;
    const int64_t q0 = qt * BQF;

    for (int i = tid; i < BQF * DP; i += NT) {
        int q = i / DP, d = i % DP;
        float x = 0.0f;
        if (q0 + q < g.nq && d < g.d) {
            x = ld1(Q + (q0 + q) * g.d + d);
            if (g.has_q_scale)
                x = x * g.q_scale;
        }
        Qs[d * LDQ + q] = x;
    }

    float m[RT], l[RT], acc[RT][CPT];
#pragma unroll
    for (int i = 0; i < RT; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < CPT; c++)
            acc[i][c] = 0.0f;
    }
    const int64_t ktiles = (g.nk + BK - 1) / BK;
    const unsigned char hit = g.fill_where_true ? 1 : 0;
    /* Tiles whose keys a key mask (the same for every query) gives -inf may be skipped (above). */
    const bool may_skip = a.skip_dead && M && g.m_qstride == 0 && g.mask_fill == -INFINITY;

    /* Every splits-th tile from this range's index on: masked tiles, which tend to be contiguous
       (a padding mask, the head's history mask over [cached, current] keys), are spread evenly. */
    for (int64_t kt = split; kt < ktiles; kt += a.splits) {
        const int64_t k0 = kt * BK;
        bool dead = false;
        if (may_skip) {
            /* Any of the thread's 4 keys attended? The barrier also ends the previous tile's reads. */
            int live = 0;
            const int64_t kk = k0 + tx * 4;
            for (int j = 0; j < 4; j++)
                if (kk + j < g.nk && (M[(kk + j) * g.m_kstride] != 0) != hit)
                    live = 1;
            dead = !__syncthreads_or(live);
        } else {
            __syncthreads(); /* the previous tile's readers are done (and Q is staged) */
        }
        /* A dead tile adds exactly nothing (probabilities 0, scale 1 or an all-zero row's 0)
           unless a value is infinite or NaN, where 0 x V is NaN as in the unfused chain: V is
           staged first, checked on a dead tile, which is computed only then. */
        int bad = 0;
        if (a.vec_v) {
            for (int i = tid; i < BK * (DP / 4); i += NT) {
                int kk = i / (DP / 4), c = (i % (DP / 4)) * 4;
                float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (k0 + kk < g.nk && c < g.dv)
                    x = ld4(V + (k0 + kk) * g.dv + c);
                bad |= !isfinite(x.x + x.y + x.z + x.w);
                *reinterpret_cast<float4 *>(&Vs[kk * DP + c]) = x;
            }
        } else {
            for (int i = tid; i < BK * DP; i += NT) {
                int kk = i / DP, c = i % DP;
                float x = 0.0f;
                if (k0 + kk < g.nk && c < g.dv)
                    x = ld1(V + (k0 + kk) * g.dv + c);
                bad |= !isfinite(x);
                Vs[kk * DP + c] = x;
            }
        }
        if (dead && !__syncthreads_or(bad))
            continue;
        if (a.vec_k) {
            for (int i = tid; i < DP * (BK / 4); i += NT) {
                int d = i / (BK / 4), kk = (i % (BK / 4)) * 4;
                float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (d < g.d) {
                    const T *src = K + (int64_t)d * g.nk + k0 + kk;
                    if (k0 + kk + 4 <= g.nk) {
                        x = ld4(src);
                    } else {
                        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        for (int e = 0; e < 4; e++)
                            if (k0 + kk + e < g.nk)
                                t[e] = ld1(src + e);
                        x = make_float4(t[0], t[1], t[2], t[3]);
                    }
                }
                *reinterpret_cast<float4 *>(&Ks[d * BK + kk]) = x;
            }
        } else {
            for (int i = tid; i < DP * BK; i += NT) {
                int d = i / BK, kk = i % BK;
                float x = 0.0f;
                if (d < g.d && k0 + kk < g.nk)
                    x = ld1(K + (int64_t)d * g.nk + k0 + kk);
                Ks[d * BK + kk] = x;
            }
        }
        if (M && g.m_qstride != 0) {
            /* 0 or 1 per (query, key) of the tile; rows beyond the queries read as unmasked */
            for (int i = tid; i < BQF * BK; i += NT) {
                const int q = i / BK, kk = i % BK;
                unsigned char x = 1 - hit;
                if (q0 + q < g.nq && k0 + kk < g.nk)
                    x = M[(q0 + q) * g.m_qstride + (k0 + kk) * g.m_kstride] != 0;
                Ms[i] = x;
            }
        }
        __syncthreads();

        /* 2. scores of rows RT ty + i, keys 4 tx + j */
        float s[RT][4];
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < DP; d++) {
            float qa[RT];
            lds_rows(qa, &Qs[d * LDQ + ty * RT]);
            const float4 kv = *reinterpret_cast<const float4 *>(&Ks[d * BK + tx * 4]);
            const float ka[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
            for (int i = 0; i < RT; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    s[i][j] = fmaf(qa[i], ka[j], s[i][j]);
        }
        const int kvalid = g.nk - k0 < BK ? (int)(g.nk - k0) : BK; /* keys of this tile */
        if (M || kvalid < BK) { /* a whole tile without a mask changes no score */
            const bool row_mask = M && g.m_qstride != 0;
            /* A key mask (every query reads the same row) is read here, the thread's 4 keys of
               the tile, instead of being staged for every query row. */
            uchar4 kmv = make_uchar4(1 - hit, 1 - hit, 1 - hit, 1 - hit);
            if (M && !row_mask) {
                const int64_t kk = k0 + tx * 4;
                kmv.x = kk < g.nk ? M[kk * g.m_kstride] != 0 : 1 - hit;
                kmv.y = kk + 1 < g.nk ? M[(kk + 1) * g.m_kstride] != 0 : 1 - hit;
                kmv.z = kk + 2 < g.nk ? M[(kk + 2) * g.m_kstride] != 0 : 1 - hit;
                kmv.w = kk + 3 < g.nk ? M[(kk + 3) * g.m_kstride] != 0 : 1 - hit;
            }
#pragma unroll
            for (int i = 0; i < RT; i++) {
                const uchar4 mv = row_mask ? *reinterpret_cast<const uchar4 *>(&Ms[(ty * RT + i) * BK + tx * 4])
                                           : kmv;
                const unsigned char ma[4] = {mv.x, mv.y, mv.z, mv.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (tx * 4 + j >= kvalid)
                        s[i][j] = -INFINITY; /* beyond the keys: exp gives 0 */
                    else if (ma[j] == hit)
                        s[i][j] = g.mask_fill;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < RT; i++) {
            float tmax = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
#pragma unroll
            for (int off = 8; off >= 1; off >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
            const float mnew = fmaxf(m[i], tmax);
            const float muse = mnew == -INFINITY ? 0.0f : mnew;
            const float scale = expf(m[i] - muse);
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s[i][j] = expf(s[i][j] - muse);
                rs += s[i][j];
            }
            l[i] = l[i] * scale + rs; /* this thread's keys only: the row's 16 meet at the end */
            m[i] = mnew;
#pragma unroll
            for (int c = 0; c < CPT; c++)
                acc[i][c] *= scale;
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < RT / 4; r++)
                *reinterpret_cast<float4 *>(&Ps[(tx * 4 + j) * LDP + p_run(tx * 4 + j, ty * (RT / 4) + r) * 4]) =
                    make_float4(s[r * 4][j], s[r * 4 + 1][j], s[r * 4 + 2][j], s[r * 4 + 3][j]);
        __syncthreads();

        /* 3. acc += P V */
#pragma unroll 4
        for (int kk = 0; kk < BK; kk++) {
            float pa[RT];
            lds_runs(pa, &Ps[kk * LDP], [&](int r) { return p_run(kk, ty * (RT / 4) + r) * 4; });
            float va[CPT];
            if (DP >= 64) {
#pragma unroll
                for (int c4 = 0; c4 < CPT / 4; c4++) {
                    const float4 x = *reinterpret_cast<const float4 *>(&Vs[kk * DP + c4 * 64 + tx * 4]);
                    va[c4 * 4 + 0] = x.x;
                    va[c4 * 4 + 1] = x.y;
                    va[c4 * 4 + 2] = x.z;
                    va[c4 * 4 + 3] = x.w;
                }
            } else {
#pragma unroll
                for (int c = 0; c < CPT; c++)
                    va[c] = Vs[kk * DP + out_col<DP>(tx, c)];
            }
#pragma unroll
            for (int i = 0; i < RT; i++)
#pragma unroll
                for (int c = 0; c < CPT; c++)
                    acc[i][c] = fmaf(pa[i], va[c], acc[i][c]);
        }
    }

    /* Each row's sum from its 16 threads' keys (a butterfly: every lane gets the same bits). */
#pragma unroll
    for (int i = 0; i < RT; i++)
#pragma unroll
        for (int off = 8; off >= 1; off >>= 1)
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
    /* The rows this thread owns, as results or as partials of its key range. */
    int64_t obase, ors;
    out_rows(g, b, &obase, &ors);
#pragma unroll
    for (int i = 0; i < RT; i++) {
        const int64_t qg = q0 + ty * RT + i;
        if (qg >= g.nq)
            continue;
        const int64_t row = b * g.nq + qg;
        if (a.splits == 1) {
            const float inv = 1.0f / l[i]; /* 1 / 0 = inf, and 0 * inf = NaN: an all -inf row */
            T *o = static_cast<T *>(a.out) + obase + qg * ors;
#pragma unroll
            for (int c = 0; c < CPT; c++) {
                const int col = out_col<DP>(tx, c);
                if (col < g.dv)
                    st1(o + col, acc[i][c] * inv);
            }
        } else {
            const int64_t prow = (int64_t)split * g.nbatch * g.nq + row;
            float *p = a.part + prow * g.dv;
#pragma unroll
            for (int c = 0; c < CPT; c++) {
                const int col = out_col<DP>(tx, c);
                if (col < g.dv)
                    p[col] = acc[i][c];
            }
            if (tx == 0) {
                a.stats[prow * 2] = m[i];
                a.stats[prow * 2 + 1] = l[i];
            }
        }
    }
}

/* The largest of a row's range maxima, 0 when every range is empty (-inf): what each range's
   weight is taken relative to. */
__device__ __forceinline__ float ranges_max(const Args &a, int64_t rows, int64_t row)
{
    float mx = -INFINITY;
    for (int s = 0; s < a.splits; s++)
        mx = fmaxf(mx, a.stats[(s * rows + row) * 2]);
    return mx == -INFINITY ? 0.0f : mx;
}

/* Merges the key ranges' partials of four output columns of a row (dv a multiple of 4, the
   partials 16-byte aligned): the row's range weights are computed once for the four, and the
   partials read as float4. The same arithmetic in the same order as attn_combine below, so the
   same bits. */
template <typename T>
__global__ void attn_combine4(Args a)
{
    S4D_KERNEL_BEGIN();
    const s4d_cuda_attn_desc &g = a.g;
    const int64_t rows = g.nbatch * g.nq, quads = g.dv / 4, total = rows * quads;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = idx / quads, col = idx % quads * 4;
        int64_t obase, ors;
        out_rows(g, row / g.nq, &obase, &ors);
        const float muse = ranges_max(a, rows, row);
        float sum = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int s = 0; s < a.splits; s++) {
            const int64_t prow = s * rows + row;
            const float2 st = *reinterpret_cast<const float2 *>(a.stats + prow * 2);
            const float w = expf(st.x - muse);
            sum += st.y * w;
            const float4 p = *reinterpret_cast<const float4 *>(a.part + prow * g.dv + col);
            acc[0] += p.x * w;
            acc[1] += p.y * w;
            acc[2] += p.z * w;
            acc[3] += p.w * w;
        }
        const float inv = 1.0f / sum;
        T *o = static_cast<T *>(a.out) + obase + row % g.nq * ors + col;
#pragma unroll
        for (int c = 0; c < 4; c++)
            st1(o + c, acc[c] * inv);
    }
}

/* Merges the key ranges' partials of each output element, ranges in order. */
template <typename T>
__global__ void attn_combine(Args a)
{
    S4D_KERNEL_BEGIN();
    const s4d_cuda_attn_desc &g = a.g;
    const int64_t rows = g.nbatch * g.nq, total = rows * g.dv;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = idx / g.dv, col = idx % g.dv;
        int64_t obase, ors;
        out_rows(g, row / g.nq, &obase, &ors);
        const float muse = ranges_max(a, rows, row);
        float sum = 0.0f, acc = 0.0f;
        for (int s = 0; s < a.splits; s++) {
            const int64_t prow = s * rows + row;
            const float w = expf(a.stats[prow * 2] - muse);
            sum += a.stats[prow * 2 + 1] * w;
            acc += a.part[prow * g.dv + col] * w;
        }
        st1(static_cast<T *>(a.out) + obase + row % g.nq * ors + col, acc * (1.0f / sum));
    }
}

int head_pad(int64_t n)
{
    return n <= 16 ? 16 : n <= 32 ? 32 : n <= 64 ? 64 : 128;
}

/* The compiled head size that holds both D and Dv. */
int head_dp(const s4d_cuda_attn_desc *g)
{
    return head_pad(g->d > g->dv ? g->d : g->dv);
}

/* Which kernel runs g: float16 on tensor cores, float32 on TF32 tensor cores where the
   engine allows TF32, else in FFMA. */
enum Path { PATH_F32, PATH_TC16, PATH_TC32 };

Path path_of(s4d_dtype dtype, const s4d_cuda_attn_desc *g)
{
    if (dtype == S4D_DTYPE_FLOAT16)
        return PATH_TC16;
    return g->tf32 ? PATH_TC32 : PATH_F32;
}

/* The launch geometry of g on a path (shapes only). */
void plan(Path path, const s4d_cuda_attn_desc *g, int64_t *qtiles, int *splits, int *tps)
{
    const int64_t want = path == PATH_TC16 ? TC_WANT_BLOCKS : path == PATH_TC32 ? TC32_WANT_BLOCKS : WANT_BLOCKS;
    const int bq = path == PATH_F32 ? f32_bq(head_dp(g)) : BQ;
    *qtiles = (g->nq + bq - 1) / bq;
    const int64_t ktiles = (g->nk + BK - 1) / BK;
    const int64_t base = g->nbatch * *qtiles;
    int64_t s = 1;
    if (base > 0 && 2 * base <= want) {
        s = want / base;
        int64_t most = ktiles / 2; /* at least two tiles per range */
        if (s > most)
            s = most;
        if (s > MAX_SPLITS)
            s = MAX_SPLITS;
        if (s < 1)
            s = 1;
    }
    int64_t t = ktiles > 0 ? (ktiles + s - 1) / s : 1;
    s = ktiles > 0 ? (ktiles + t - 1) / t : 1; /* no empty range */
    *splits = (int)s;
    *tps = (int)t;
}

template <typename T, int DP>
cudaError_t set_smem()
{
    return cudaFuncSetAttribute(attn_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                smem_floats(DP) * (int)sizeof(float));
}

cudaError_t prepare_f32(int dp)
{
    switch (dp) {
    case 16: return set_smem<float, 16>();
    case 32: return set_smem<float, 32>();
    case 64: return set_smem<float, 64>();
    default: return set_smem<float, 128>();
    }
}

template <typename T, int DP>
void launch_main(const Args &a, int64_t blocks, cudaStream_t stream)
{
    s4d_launch(attn_kernel<T, DP>, (unsigned)blocks, NT, smem_floats(DP) * sizeof(float), stream, a);
}

cudaError_t run_f32(int dp, const Args &a, cudaStream_t stream)
{
    const int64_t blocks = a.g.nbatch * a.qtiles * a.splits;
    switch (dp) {
    case 16: launch_main<float, 16>(a, blocks, stream); break;
    case 32: launch_main<float, 32>(a, blocks, stream); break;
    case 64: launch_main<float, 64>(a, blocks, stream); break;
    default: launch_main<float, 128>(a, blocks, stream); break;
    }
    if (a.splits > 1)
        launch_combine<float>(a, stream);
    return cudaGetLastError();
}

bool aligned(const void *p, size_t n) { return (reinterpret_cast<uintptr_t>(p) % n) == 0; }

/* Elements per access (16 bytes' worth, 8 bytes' worth or 1) to the rows of n elements of size
   es at p: every row must start aligned, so n must be a multiple of the width. */
int access_width(const void *p, int64_t n, size_t es)
{
    const int64_t wide = (int64_t)(16 / es);
    if (n % wide == 0 && aligned(p, 16))
        return (int)wide;
    if (n % (wide / 2) == 0 && aligned(p, 8))
        return (int)(wide / 2);
    return 1;
}

size_t part_bytes(const s4d_cuda_attn_desc *g, int splits)
{
    const size_t rows = (size_t)splits * (size_t)g->nbatch * (size_t)g->nq;
    return (rows * (size_t)g->dv * sizeof(float) + 255) / 256 * 256;
}

} // namespace

template <typename T>
void launch_combine(const Args &a, cudaStream_t stream)
{
    const bool quads = a.g.dv % 4 == 0 && (reinterpret_cast<uintptr_t>(a.part) & 15) == 0;
    const int64_t total = a.g.nbatch * a.g.nq * (quads ? a.g.dv / 4 : a.g.dv);
    int64_t cb = (total + 255) / 256;
    if (cb > 65536)
        cb = 65536;
    if (quads)
        s4d_launch(attn_combine4<T>, (unsigned)cb, 256, 0, stream, a);
    else
        s4d_launch(attn_combine<T>, (unsigned)cb, 256, 0, stream, a);
}

template void launch_combine<float>(const Args &, cudaStream_t);
template void launch_combine<__half>(const Args &, cudaStream_t);

} // namespace s4d_attn

using namespace s4d_attn;

extern "C" int s4d_cuda_attention_ok(s4d_dtype dtype, const s4d_cuda_attn_desc *g, const char **why)
{
    if (dtype != S4D_DTYPE_FLOAT32 && dtype != S4D_DTYPE_FLOAT16) {
        *why = "the CUDA kernel takes float32 or float16";
        return 0;
    }
    if (g->d > S4D_CUDA_ATTN_MAX_HEAD || g->dv > S4D_CUDA_ATTN_MAX_HEAD) {
        *why = "the CUDA kernel takes head sizes (D of Q and KT, Dv of V) up to 128";
        return 0;
    }
    if (g->batch_rank > S4D_CUDA_ATTN_MAX_RANK) {
        *why = "too many batch dims";
        return 0;
    }
    int64_t qtiles;
    int splits, tps;
    plan(path_of(dtype, g), g, &qtiles, &splits, &tps);
    if (g->nbatch > 0 && qtiles > 0 && g->nbatch * qtiles > INT32_MAX / splits) {
        *why = "more than 2^31-1 blocks of queries";
        return 0;
    }
    return 1;
}

extern "C" size_t s4d_cuda_attention_workspace(s4d_dtype dtype, const s4d_cuda_attn_desc *g)
{
    int64_t qtiles;
    int splits, tps;
    plan(path_of(dtype, g), g, &qtiles, &splits, &tps);
    if (splits <= 1)
        return 0;
    const size_t rows = (size_t)splits * (size_t)g->nbatch * (size_t)g->nq;
    /* partials, then the statistics at a 256-byte boundary */
    return part_bytes(g, splits) + rows * 2 * sizeof(float);
}

extern "C" cudaError_t s4d_cuda_attention_prepare(s4d_dtype dtype, const s4d_cuda_attn_desc *g)
{
    const int dp = head_dp(g);
    if (dtype != S4D_DTYPE_FLOAT16 && dtype != S4D_DTYPE_FLOAT32)
        return cudaErrorInvalidValue;
    switch (path_of(dtype, g)) {
    case PATH_TC16: return prepare_tc16(dp);
    case PATH_TC32: return prepare_tc32(dp);
    default: return prepare_f32(dp);
    }
}

extern "C" cudaError_t s4d_cuda_attention(s4d_dtype dtype, const s4d_cuda_attn_desc *g, const void *q,
                                          const void *kt, const void *v, const void *mask, void *out,
                                          void *ws, size_t ws_size, cudaStream_t stream)
{
    const char *why;
    if (!s4d_cuda_attention_ok(dtype, g, &why) || (g->has_mask && !mask))
        return cudaErrorInvalidValue;
    const size_t es = dtype == S4D_DTYPE_FLOAT16 ? 2 : 4;
    const int64_t nout = g->nbatch * g->nq * g->dv;
    if (nout == 0)
        return cudaSuccess;
    if (g->nk == 0) /* the empty product of P and V */
        return cudaMemsetAsync(out, 0, (size_t)nout * es, stream);
    const Path path = path_of(dtype, g);
    Args a;
    a.g = *g;
    a.q = q;
    a.k = kt;
    a.v = v;
    a.mask = static_cast<const unsigned char *>(mask);
    a.out = out;
    int tps;
    plan(path, g, &a.qtiles, &a.splits, &tps);
    a.part = nullptr;
    a.stats = nullptr;
    if (a.splits > 1) {
        const size_t need = s4d_cuda_attention_workspace(dtype, g);
        if (!ws || ws_size < need)
            return cudaErrorInvalidValue;
        a.part = static_cast<float *>(ws);
        a.stats = reinterpret_cast<float *>(static_cast<char *>(ws) + part_bytes(g, a.splits));
    }
    /* Every matrix of K^T starts a multiple of nk elements in, every row of V a multiple of dv. */
    a.vec_k = g->nk % 4 == 0 && aligned(kt, 4 * es);
    a.vec_v = g->dv % 4 == 0 && aligned(v, 4 * es);
    /* S4D_ATTN_DEAD_TILES=0 computes dead tiles too (to compare; the same bits either way). */
    static const int skip_env = [] {
        const char *e = getenv("S4D_ATTN_DEAD_TILES");
        return !(e && strcmp(e, "0") == 0);
    }();
    a.skip_dead = skip_env;
    a.w_q = access_width(q, g->d, es);
    a.w_k = access_width(kt, g->nk, es);
    a.w_v = access_width(v, g->dv, es);
    a.w_o = g->dv % 2 == 0 && aligned(out, 2 * es) ? 2 : 1;
    const int dp = head_dp(g);
    switch (path) {
    case PATH_TC16: return run_tc16(dp, a, stream);
    case PATH_TC32: return run_tc32(dp, a, stream);
    default: return run_f32(dp, a, stream);
    }
}
