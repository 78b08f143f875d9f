/*
 * The fused attention kernels (see attention.h for the contract): float32 in
 * FFMA (below), float16 on tensor cores and float32 on TF32 tensor cores
 * (further down, each with its own comment). The semantics paragraph holds
 * for all three.
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
 *      in registers, applies the mask, and the 16 threads of a row (one half
 *      of a warp) agree on the row's new maximum and sum by butterfly
 *      shuffles (every lane gets the same bits);
 *   3. the probabilities go through shared memory (transposed, [key][query])
 *      and each thread accumulates its RT rows x Dv/16 output columns.
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
 * list their tiles before the first one, live tiles first (tc_order below),
 * and keep the scaled maximum of the last tile so that a tile that leaves the
 * maximum scales by exactly 1. Sparse4D's temporal attention masks either its
 * 600 cached keys or its 900 current ones.
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
 *
 * tests/cuda/attention_tc_emulation.py repeats the tensor-core kernels'
 * index arithmetic lane by lane on the CPU: keep it in step.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels/async_copy.cuh"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/launch.cuh"

namespace {

constexpr int BQ = 64;       /* queries per block of the tensor-core kernels */
constexpr int BK = 64;       /* keys per tile */
constexpr int NT = 256;      /* threads per block of the FFMA kernel */
/* Query rows per thread of the FFMA kernel (16 threads share a row) and per block. */
__host__ __device__ constexpr int f32_rt(int dp) { return dp <= 64 ? 8 : 4; }
__host__ __device__ constexpr int f32_bq(int dp) { return 16 * f32_rt(dp); }
/* padded rows of the transposed Q and P tiles: fewer bank conflicts */
__host__ __device__ constexpr int f32_ld(int dp) { return f32_bq(dp) + 4; }
/* Most blocks the key split aims for: two resident per SM (128 registers, ~109 KB of shared
   memory each at D = 64) on a 132-SM H100/H200, so that the blocks run as one wave. A constant, so that the
   split (and so the bits) depend on the shapes only. */
constexpr int64_t WANT_BLOCKS = 264;
constexpr int64_t MAX_SPLITS = 16;

struct Args {
    s4d_cuda_attn_desc g;
    const void *q, *k, *v;
    const unsigned char *mask;
    void *out;
    float *part;   /* splits > 1: partial accumulators [splits][nbatch][nq][dv] */
    float *stats;  /* splits > 1: running max and sum [splits][nbatch][nq][2] */
    int64_t qtiles;
    int splits;
    int vec_k, vec_v; /* 4-element vector loads of K^T rows / V rows are aligned */
    int skip_dead;    /* tiles a key mask leaves unattended may be skipped (FFMA kernel, tc_order) */
    /* Tensor-core paths: elements per access to Q, K^T, V (8, 4 or 1) and the output (2 or 1). */
    int w_q, w_k, w_v, w_o;
};

__device__ __forceinline__ float ld1(const float *p) { return __ldg(p); }

__device__ __forceinline__ float4 ld4(const float *p) { return __ldg(reinterpret_cast<const float4 *>(p)); }

__device__ __forceinline__ void st1(float *p, float v) { *p = v; }

/* Where batch matrix b's output rows go: query row i at *base + i * *rs elements. [..., Nq, Dv],
   or [..., Nq, H, Dv] with swap_out (H the last batch dim, b = (outer, h)). */
__device__ __forceinline__ void out_rows(const s4d_cuda_attn_desc &g, int64_t b, int64_t *base, int64_t *rs)
{
    if (!g.swap_out) {
        *base = b * g.nq * g.dv;
        *rs = g.dv;
        return;
    }
    const int64_t h = g.batch[g.batch_rank - 1];
    *base = (b / h * g.nq * h + b % h) * g.dv;
    *rs = h * g.dv;
}

/* Scales the staged Q tile's real elements (rows < nrow, columns < ncol; the zero padding stays
   zero) as the Mul layer before the product would: each product rounded once to T. */
template <typename T, int ROWS, int COLS>
__device__ __forceinline__ void scale_q_tile(T *Qs, int ld, int64_t nrow, int64_t ncol, float s, int nt)
{
    for (int i = threadIdx.x; i < ROWS * COLS; i += nt) {
        const int r = i / COLS, c = i % COLS;
        if (r < nrow && c < ncol) {
            T *x = Qs + r * ld + c;
            if constexpr (sizeof(T) == 2)
                *x = __float2half_rn(__half2float(*x) * s);
            else
                *x = *x * s;
        }
    }
}
__device__ __forceinline__ void st1(__half *p, float v) { *p = __float2half_rn(v); }

constexpr int smem_floats(int dp)
{
    return dp * f32_ld(dp) + dp * BK + BK * dp + BK * f32_ld(dp) + f32_bq(dp) * BK / 4;
}

/* N consecutive floats of shared memory (16-byte aligned, N a multiple of 4) into registers. */
template <int N>
__device__ __forceinline__ void lds_rows(float (&dst)[N], const float *src)
{
#pragma unroll
    for (int r = 0; r < N / 4; r++) {
        const float4 v = *reinterpret_cast<const float4 *>(src + r * 4);
        dst[r * 4 + 0] = v.x;
        dst[r * 4 + 1] = v.y;
        dst[r * 4 + 2] = v.z;
        dst[r * 4 + 3] = v.w;
    }
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
    constexpr int CPT = DP / 16, RT = f32_rt(DP), BQF = f32_bq(DP), LDQ = f32_ld(DP), LDP = LDQ;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); /* [DP][LDQ]: Q transposed */
    float *Ks = Qs + DP * LDQ;                    /* [DP][BK] */
    float *Vs = Ks + DP * BK;                     /* [BK][DP] */
    float *Ps = Vs + BK * DP;                     /* [BK][LDP]: probabilities transposed */
    unsigned char *Ms = reinterpret_cast<unsigned char *>(Ps + BK * LDP); /* [BQF][BK] mask tile */
    const s4d_cuda_attn_desc &g = a.g;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;

    int64_t bid = blockIdx.x;
    const int split = (int)(bid % a.splits);
    bid /= a.splits;
    const int64_t qt = bid % a.qtiles, b = bid / a.qtiles;
    int64_t oq = 0, ok = 0, ov = 0, om = 0;
    {
        int64_t rest = b;
        for (int d = g.batch_rank - 1; d >= 0; d--) {
            int64_t c = rest % g.batch[d];
            rest /= g.batch[d];
            oq += c * g.q_stride[d];
            ok += c * g.k_stride[d];
            ov += c * g.v_stride[d];
            om += c * g.m_stride[d];
        }
    }
    const T *Q = static_cast<const T *>(a.q) + oq * g.nq * g.d;
    const T *K = static_cast<const T *>(a.k) + ok * g.d * g.nk;
    const T *V = static_cast<const T *>(a.v) + ov * g.nk * g.dv;
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
        {
            const int kvalid = g.nk - k0 < BK ? (int)(g.nk - k0) : BK; /* keys of this tile */
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
#pragma unroll
            for (int off = 8; off >= 1; off >>= 1)
                rs += __shfl_xor_sync(0xffffffffu, rs, off);
            l[i] = l[i] * scale + rs;
            m[i] = mnew;
#pragma unroll
            for (int c = 0; c < CPT; c++)
                acc[i][c] *= scale;
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < RT / 4; r++)
                *reinterpret_cast<float4 *>(&Ps[(tx * 4 + j) * LDP + ty * RT + r * 4]) =
                    make_float4(s[r * 4][j], s[r * 4 + 1][j], s[r * 4 + 2][j], s[r * 4 + 3][j]);
        __syncthreads();

        /* 3. acc += P V */
#pragma unroll 4
        for (int kk = 0; kk < BK; kk++) {
            float pa[RT];
            lds_rows(pa, &Ps[kk * LDP + ty * RT]);
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

/* ---- float16 on tensor cores ----------------------------------------------------------------
 * A block of 4 warps owns 64 query rows (16 per warp) and its share of the key tiles (which:
 * tc_order above). mma.sync
 * m16n8k16 (half inputs, float accumulation) computes each warp's 16 x 64 score tile S = Q K^T
 * with Q's fragments held in registers for the whole block and K^T's read from shared memory
 * by ldmatrix.trans (K^T is staged as it lies in memory, [d][key]). The accumulators of two
 * adjacent 8-key tiles of S are, element for element, the A fragment of a 16 x 16 slice of P,
 * so P V follows in registers: P is rounded to half there, V (staged as [key][dv]) is read by
 * ldmatrix.trans as well. The online softmax runs in float on the score accumulators; the two
 * rows a thread holds (g and g + 8, g = lane / 4) are spread over the 4 lanes of a quad, which
 * agree on the maximum and the sum by two butterfly shuffles (same bits in every lane); the
 * exponentials are exp2 of a fused multiply-add with log2(e). The tiles of K^T and V come in
 * by cp.async into two shared-memory stages, tile kt + 1 in flight while tile kt is computed
 * (16- or 8-byte copies where the row lengths and pointers allow, zero-filled past the ends;
 * element-wise otherwise). The mask is read straight from global memory (each thread its 2 x
 * 16 entries per tile; once per quad for a key mask), into a bit set. At D = 64: 128
 * registers, no spills, 45 KB of shared memory, four blocks per SM. */
constexpr int TC_WARPS = 4;
constexpr int TC_NT = 32 * TC_WARPS;
constexpr int TC_LDK = BK + 8; /* halves per K^T row in shared memory: 16-byte rows, no bank conflicts */
/* Most blocks the key split aims for on the tensor-core paths: four resident per SM of a
   132-SM H100/H200 (4 warps each). A constant, so that the split depends on the shapes only. */
constexpr int64_t TC_WANT_BLOCKS = 528;

__host__ __device__ constexpr int tc_ld(int dp) { return dp + 8; } /* halves per Q / V row in shared memory */
constexpr int tc_smem_bytes(int dp)
{
    return (BQ * tc_ld(dp) + 2 * (dp * TC_LDK + BK * tc_ld(dp))) * 2;
}

using s4d_async::smem_addr;

/* Four 8x8 half matrices; lanes 8i .. 8i + 7 give the row addresses of matrix i. */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c += a b: a 16x16 row-major half, b 16x8 column-major half, c 16x8 float. */
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi); /* lo: the lower column, in the low 16 bits */
    return *reinterpret_cast<uint32_t *>(&h);
}

using s4d_async::cp_async16;
using s4d_async::cp_async4;
using s4d_async::cp_async8;
using s4d_async::cp_async_commit;
using s4d_async::cp_async_wait;

/* Copies rows [r0, r0 + ROWS) x columns [c0, c0 + COLS) of a row-major matrix of T (row
   stride gs elements, rmax rows and cmax columns valid) into shared memory (row stride ld),
   zeros outside. W elements per access: W > 1 needs cmax == gs, gs % W == 0 and a source
   aligned to W elements, so that an access is either wholly inside or wholly outside.
   Accesses of 4, 8 or 16 bytes go by cp.async (the caller commits and waits), 2-byte ones
   by plain loads and stores. */
template <typename T, int W, int ROWS, int COLS>
__device__ __forceinline__ void tc_stage(T *dst, int ld, const T *src, int64_t gs, int64_t r0, int64_t rmax,
                                         int64_t c0, int64_t cmax)
{
    constexpr int CPR = COLS / W, RS = TC_NT / CPR; /* accesses per row; rows per round */
    constexpr int BYTES = W * (int)sizeof(T);
    static_assert(TC_NT % CPR == 0 && ROWS % RS == 0, "whole rounds of the block");
    const int rt = threadIdx.x / CPR, ct = threadIdx.x % CPR * W;
    const bool cin = c0 + ct < cmax;
    const T *s = src + (r0 + rt) * gs + c0 + ct;
    T *d = dst + rt * ld + ct;
#pragma unroll
    for (int it = 0; it < ROWS / RS; it++) {
        const bool in = cin && r0 + rt + it * RS < rmax;
        const T *si = in ? s + it * RS * gs : src;
        T *di = d + it * RS * ld;
        if (BYTES == 16)
            cp_async16(di, si, in ? 16 : 0);
        else if (BYTES == 8)
            cp_async8(di, si, in ? 8 : 0);
        else if (BYTES == 4)
            cp_async4(di, si, in ? 4 : 0);
        else
            *di = in ? si[0] : T(0.0f);
    }
}

/* tc_stage with the access width chosen at run time (16 / sizeof(T), half that, or 1). */
template <typename T, int ROWS, int COLS>
__device__ __forceinline__ void tc_stage_any(int w, T *dst, int ld, const T *src, int64_t gs, int64_t r0,
                                             int64_t rmax, int64_t c0, int64_t cmax)
{
    constexpr int WIDE = 16 / (int)sizeof(T);
    if (w == WIDE)
        tc_stage<T, WIDE, ROWS, COLS>(dst, ld, src, gs, r0, rmax, c0, cmax);
    else if (w == WIDE / 2)
        tc_stage<T, WIDE / 2, ROWS, COLS>(dst, ld, src, gs, r0, rmax, c0, cmax);
    else
        tc_stage<T, 1, ROWS, COLS>(dst, ld, src, gs, r0, rmax, c0, cmax);
}

/* x, which the compiler can no longer see through: keeps the address arithmetic that depends
   on it inside the key loop instead of hoisting dozens of 64-bit products into registers. */
__device__ __forceinline__ int64_t opaque(int64_t x)
{
    asm volatile("" : "+l"(x));
    return x;
}

template <typename P>
__device__ __forceinline__ P *opaque(P *p)
{
    return reinterpret_cast<P *>(opaque(reinterpret_cast<int64_t>(p)));
}

/* ---- Which key tiles a tensor-core block computes --------------------------------------------
 * The key split's S blocks of a query tile take every S-th position of an order of the key
 * tiles: ascending, or, with a key mask that may leave tiles dead (the same for every query
 * row, fill -inf, at most TC_ORDER_MAX tiles), the live tiles ascending and then the dead ones.
 * So the tiles that count are shared evenly among the blocks wherever the mask's dead run lies.
 * With dead tiles skipped (S4D_ATTN_DEAD_TILES, the default), a block drops its dead tiles
 * whose V is finite: each would multiply the running sums by exactly 1 and add exact zeros.
 * A dead tile with an infinity or NaN in V is computed (0 x inf = NaN, as in the unfused
 * chain). The order does not depend on skipping, so the output bits do not either. */
constexpr int TC_ORDER_MAX = 1024; /* key tiles (64 Ki keys) */

struct TcOrder {
    uint32_t live[TC_ORDER_MAX / 32]; /* bit t: key tile t has a key attended */
    uint32_t bad[TC_ORDER_MAX / 32];  /* bit i: the block's i-th tile is dead and V is not finite */
    unsigned short list[TC_ORDER_MAX];
    int count;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

/* The word of raw bits holds a value that is not finite (float words, or pairs of halves). */
template <typename T>
__device__ __forceinline__ bool word_nonfinite(uint32_t w)
{
    if constexpr (sizeof(T) == 2)
        return (w & 0x7c00u) == 0x7c00u || (w & 0x7c000000u) == 0x7c000000u;
    else
        return (w & 0x7f800000u) == 0x7f800000u;
}

/* The key tiles of a block: n of them, the i-th at(i), listed in a TcOrder or every S-th. */
struct TcTiles {
    const TcOrder *o;
    int n, split, S;
    __device__ __forceinline__ int64_t at(int i) const { return o ? o->list[i] : split + (int64_t)i * S; }
};

/* The key tiles of a block of the key split, listed in o (shared) where a key mask orders them.
   M: the batch matrix's mask (NULL without one); V its [nk][dv] values. */
template <typename T>
__device__ TcTiles tc_order(const Args &a, const unsigned char *M, const T *V, int split, int64_t ktiles,
                            TcOrder &o)
{
    const s4d_cuda_attn_desc &g = a.g;
    const int S = a.splits, tid = threadIdx.x, lane = tid & 31;
    const int mine = (int)((ktiles - split + S - 1) / S);
    if (!(M && g.m_qstride == 0 && g.mask_fill == -INFINITY && ktiles <= TC_ORDER_MAX))
        return TcTiles{nullptr, mine, split, S};
    const unsigned char hit = g.fill_where_true ? 1 : 0;
    const int words = (int)((ktiles + 31) / 32);
    if (tid < TC_ORDER_MAX / 32) {
        o.live[tid] = 0;
        o.bad[tid] = 0;
    }
    __syncthreads();
    /* a warp reads 32 consecutive keys (one tile) per round and votes */
    const int64_t rounds = (g.nk + TC_NT - 1) / TC_NT;
#pragma unroll 4
    for (int64_t r = 0; r < rounds; r++) {
        const int64_t k = r * TC_NT + tid;
        const bool attended = k < g.nk && (M[k * g.m_kstride] != 0) != hit;
        const uint32_t v = __ballot_sync(0xffffffffu, attended);
        if (lane == 0 && v) {
            const int t = (int)((r * TC_NT + (tid & ~31)) / BK);
            atomicOr(&o.live[t >> 5], 1u << (t & 31));
        }
    }
    __syncthreads();
    int nlive = 0;
    for (int w = 0; w < words; w++)
        nlive += __popc(o.live[w]);
    for (int t = tid; t < ktiles; t += TC_NT) {
        int below = __popc(o.live[t >> 5] & ((1u << (t & 31)) - 1u));
        for (int w = 0; w < (t >> 5); w++)
            below += __popc(o.live[w]);
        const int pos = (o.live[t >> 5] >> (t & 31) & 1u) ? below : nlive + (t - below);
        if (pos % S == split)
            o.list[pos / S] = (unsigned short)t;
    }
    const int mine_live = nlive > split ? (nlive - split + S - 1) / S : 0;
    __syncthreads();
    if (!a.skip_dead || mine_live == mine)
        return TcTiles{&o, mine, split, S};
    /* The dead tiles' values, each a contiguous [64][dv] block, read as 32-bit words (dv even
       and V 4-byte aligned for halves: a.w_v >= 2), else element by element. */
    const int64_t tile_elems = (int64_t)BK * g.dv, total = g.nk * g.dv;
    const bool words32 = sizeof(T) == 4 || a.w_v >= 2;
    for (int i = mine_live; i < mine; i++) {
        const int64_t e0 = (int64_t)o.list[i] * tile_elems;
        const int64_t end = total - e0 < tile_elems ? total - e0 : tile_elems;
        bool bad = false;
        if (words32) {
            const uint32_t *src = reinterpret_cast<const uint32_t *>(V + e0);
            const int64_t n = end * (int64_t)sizeof(T) / 4;
            for (int64_t j = tid; j < n; j += TC_NT)
                bad |= word_nonfinite<T>(__ldg(src + j));
        } else {
            for (int64_t j = tid; j < end; j += TC_NT) {
                bad |= !isfinite(to_float(V[e0 + j]));
            }
        }
        if (bad)
            atomicOr(&o.bad[i >> 5], 1u << (i & 31));
    }
    __syncthreads();
    /* keep the live tiles and the dead ones that must count, in order */
    if (tid < 32) {
        int n = mine_live;
        for (int base = mine_live; base < mine; base += 32) {
            const int i = base + lane;
            const bool keep = i < mine && (o.bad[i >> 5] >> (i & 31) & 1u);
            const unsigned short t = i < mine ? o.list[i] : 0;
            const uint32_t v = __ballot_sync(0xffffffffu, keep);
            __syncwarp();
            if (keep)
                o.list[n + __popc(v & ((1u << lane) - 1u))] = t;
            n += __popc(v);
        }
        if (lane == 0)
            o.count = n;
    }
    __syncthreads();
    return TcTiles{&o, o.count, split, S};
}

/* Starts the copies of key tile k0's K^T ([DP][LDK]) and V ([BK][LD]) into a stage. */
template <typename T, int DP, int LDK, int LD>
__device__ __forceinline__ void tc_stage_kv(const Args &a, T *stage, const T *K, const T *V, int64_t nk, int64_t dv,
                                            int64_t k0)
{
    tc_stage_any<T, DP, BK>(a.w_k, stage, LDK, K, nk, 0, a.g.d, k0, nk);
    tc_stage_any<T, BK, DP>(a.w_v, stage + DP * LDK, LD, V, dv, k0, nk, 0, dv);
}

template <int DP>
__global__ void __launch_bounds__(TC_NT, DP >= 128 ? 2 : 4) attn_tc16_kernel(Args a)
{
    S4D_KERNEL_BEGIN();
    constexpr int LD = tc_ld(DP);
    constexpr int KS = DP / 16; /* k16 steps of Q K^T, and pairs of n8 tiles of P V */
    constexpr float LOG2E = 1.4426950408889634f;
    extern __shared__ uint4 smem_tc[];
    /* Q [BQ][LD]; then two stages of K^T [DP][TC_LDK] and V [BK][LD] */
    __half *Qs = reinterpret_cast<__half *>(smem_tc);
    __half *KVs = Qs + BQ * LD;
    constexpr int STAGE = DP * TC_LDK + BK * LD;
    const s4d_cuda_attn_desc &g = a.g;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gr = lane >> 2, tq = lane & 3; /* fragment row (g) and pair of columns (t) */
    /* ldmatrix: lane l addresses row (l & 7) + 8 ((l >> 3) & 1) and column 8 (l >> 4) of a 16x16 */
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lcol = (lane >> 4) * 8;

    int64_t bid = blockIdx.x;
    const int split = (int)(bid % a.splits);
    bid /= a.splits;
    const int64_t qt = bid % a.qtiles, b = bid / a.qtiles;
    int64_t oq = 0, ok = 0, ov = 0, om = 0;
    {
        int64_t rest = b;
        for (int d = g.batch_rank - 1; d >= 0; d--) {
            int64_t c = rest % g.batch[d];
            rest /= g.batch[d];
            oq += c * g.q_stride[d];
            ok += c * g.k_stride[d];
            ov += c * g.v_stride[d];
            om += c * g.m_stride[d];
        }
    }
    const __half *Q = static_cast<const __half *>(a.q) + oq * g.nq * g.d;
    const __half *K = static_cast<const __half *>(a.k) + ok * g.d * g.nk;
    const __half *V = static_cast<const __half *>(a.v) + ov * g.nk * g.dv;
    const int64_t q0 = qt * BQ;
    /* the mask rows of this thread's two query rows; NULL where there is no mask or no row */
    const unsigned char *mrow[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t qg = q0 + warp * 16 + gr + r * 8;
        mrow[r] = g.has_mask && qg < g.nq ? a.mask + om + qg * g.m_qstride : nullptr;
    }

    const int64_t ktiles = (g.nk + BK - 1) / BK;
    const unsigned char hit = g.fill_where_true ? 1 : 0;

    /* Two stages: the copies of the next tile fly while one is computed. */
    tc_stage_any<__half, BQ, DP>(a.w_q, Qs, LD, Q, g.d, q0, g.nq, 0, g.d);
    cp_async_commit();
    __shared__ TcOrder ord;
    const TcTiles tiles = tc_order<__half>(a, g.has_mask ? a.mask + om : nullptr, V, split, ktiles, ord);
    if (tiles.n > 0)
        tc_stage_kv<__half, DP, TC_LDK, LD>(a, KVs, K, V, g.nk, g.dv, tiles.at(0) * BK);
    cp_async_commit();
    cp_async_wait<1>(); /* Q has landed */
    __syncthreads();
    if (g.has_q_scale) {
        scale_q_tile<__half, BQ, DP>(Qs, LD, g.nq - q0, g.d, g.q_scale, TC_NT);
        __syncthreads();
    }
    uint32_t qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
        ldsm_x4(qf[ks], Qs + (warp * 16 + lrow) * LD + ks * 16 + lcol);

    /* ms: the maximum the accumulators are scaled to, times log2(e) as rounded (-inf before any) */
    float m[2] = {-INFINITY, -INFINITY}, ms[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[DP / 8][4];
#pragma unroll
    for (int j = 0; j < DP / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[j][e] = 0.0f;

    for (int it = 0; it < tiles.n; it++) {
        const int64_t k0 = tiles.at(it) * BK;
        __half *Ks = KVs + (it & 1) * STAGE; /* [DP][TC_LDK]: K^T */
        __half *Vs = Ks + DP * TC_LDK;        /* [BK][LD] */
        if (it + 1 < tiles.n) /* into the other stage, whose readers passed the last round's barrier */
            tc_stage_kv<__half, DP, TC_LDK, LD>(a, KVs + ((it + 1) & 1) * STAGE, opaque(K), opaque(V), opaque(g.nk),
                                                opaque(g.dv), tiles.at(it + 1) * BK);
        cp_async_commit();
        cp_async_wait<1>(); /* tile kt has landed (this thread's part) */
        __syncthreads();    /* ... and every thread's */

        const int kvalid = g.nk - k0 < BK ? (int)(g.nk - k0) : BK; /* keys of this tile */
        /* bit 4 j + e: the score s[j][e] takes the fill value */
        uint32_t fill = 0;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (!mrow[r])
                continue;
            if (r == 1 && mrow[0] && g.m_qstride == 0) { /* a key mask: row gr + 8 reads as row gr */
                fill |= (fill & 0x33333333u) << 2;
                continue;
            }
            const int64_t mk = opaque(g.m_kstride);
            const unsigned char *mp = opaque(mrow[r]) + (k0 + tq * 2) * mk;
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = j * 8 + tq * 2 + e;
                    if (key < kvalid && (mp[(j * 8 + e) * mk] != 0) == hit)
                        fill |= 1u << (4 * j + 2 * r + e);
                }
        }

        /* S = Q K^T: 8 tiles of 8 keys; s[j][0, 1] row gr, keys 8 j + 2 tq + {0, 1}; [2, 3] row gr + 8 */
        float s[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
#pragma unroll
            for (int np = 0; np < BK / 16; np++) {
                uint32_t kb[4];
                ldsm_x4_trans(kb, Ks + (ks * 16 + lrow) * TC_LDK + np * 16 + lcol);
                mma_f16(s[2 * np], qf[ks], kb[0], kb[1]);
                mma_f16(s[2 * np + 1], qf[ks], kb[2], kb[3]);
            }
        }
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (j * 8 + tq * 2 + (e & 1) >= kvalid)
                    s[j][e] = -INFINITY; /* beyond the keys: exp gives 0 */
                else if (fill >> (4 * j + e) & 1u)
                    s[j][e] = g.mask_fill;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float tmax = -INFINITY;
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
                tmax = fmaxf(tmax, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
            const float mnew = fmaxf(m[r], tmax);
            const float mscaled = (mnew == -INFINITY ? 0.0f : mnew) * LOG2E;
            const float scale = exp2f(ms[r] - mscaled); /* exactly 1 when the maximum stays */
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    s[j][e] = exp2f(fmaf(s[j][e], LOG2E, -mscaled));
                    rs += s[j][e];
                }
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            rs += __shfl_xor_sync(0xffffffffu, rs, 2);
            l[r] = l[r] * scale + rs;
            m[r] = mnew;
            ms[r] = mnew == -INFINITY ? -INFINITY : mscaled;
#pragma unroll
            for (int j = 0; j < DP / 8; j++) {
                o[j][2 * r] *= scale;
                o[j][2 * r + 1] *= scale;
            }
        }

        /* O += P V, 16 keys at a time; P's A fragment is two adjacent score tiles */
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            const uint32_t pa[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                    pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int np = 0; np < KS; np++) {
                uint32_t vb[4];
                ldsm_x4_trans(vb, Vs + (kk * 16 + lrow) * LD + np * 16 + lcol);
                mma_f16(o[2 * np], pa, vb[0], vb[1]);
                mma_f16(o[2 * np + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads(); /* this stage's readers are done before it is refilled */
    }

    /* Rows gr and gr + 8 of the warp's 16, as results or as partials of the key range. */
    int64_t obase, ors;
    out_rows(g, b, &obase, &ors);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t qg = q0 + warp * 16 + gr + r * 8;
        if (qg >= g.nq)
            continue;
        const int64_t row = b * g.nq + qg;
        if (a.splits == 1) {
            const float inv = 1.0f / l[r]; /* 1 / 0 = inf, and 0 * inf = NaN: an all -inf row */
            __half *out = static_cast<__half *>(a.out) + obase + qg * ors;
#pragma unroll
            for (int j = 0; j < DP / 8; j++) {
                const int col = j * 8 + tq * 2;
                if (a.w_o == 2) {
                    if (col < g.dv) /* dv even: col + 1 too */
                        *reinterpret_cast<__half2 *>(out + col) =
                            __floats2half2_rn(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
                } else {
                    if (col < g.dv)
                        out[col] = __float2half_rn(o[j][2 * r] * inv);
                    if (col + 1 < g.dv)
                        out[col + 1] = __float2half_rn(o[j][2 * r + 1] * inv);
                }
            }
        } else {
            const int64_t prow = (int64_t)split * g.nbatch * g.nq + row;
            float *p = a.part + prow * g.dv;
#pragma unroll
            for (int j = 0; j < DP / 8; j++) {
                const int col = j * 8 + tq * 2;
                if (col < g.dv)
                    p[col] = o[j][2 * r];
                if (col + 1 < g.dv)
                    p[col + 1] = o[j][2 * r + 1];
            }
            if (tq == 0) {
                a.stats[prow * 2] = m[r];
                a.stats[prow * 2 + 1] = l[r];
            }
        }
    }
}

/* ---- float32 on TF32 tensor cores (when the engine allows TF32) ---------------------------
 * The float16 kernel's plan with mma.sync m16n8k8 on TF32 operands (10-bit mantissas, rounded
 * to nearest by cvt.rna; float accumulation). Q, K^T and V are staged as float (cp.async) and
 * rounded to TF32 in place by the threads that copied them; fragments are read with plain
 * 32-bit loads, the row strides chosen so that a warp's loads hit 32 distinct banks. The k8 A
 * fragment holds columns t and t + 4 of a row where the score accumulators hold 2t and
 * 2t + 1; since P V sums over the keys in any order, the k slice of 8 keys is taken in the
 * order 0, 2, 4, 6, 1, 3, 5, 7: then P's A fragment is the accumulator tile as it stands, and
 * V's B fragment reads keys 2t and 2t + 1. */
constexpr int TC32_LDK = BK + 8; /* floats per K^T row: 8 t + g distinct banks */
/* Most blocks the key split aims for: two resident per SM (~88 KB of shared memory each at
   D = 64) of a 132-SM H100/H200. */
constexpr int64_t TC32_WANT_BLOCKS = 264;

__host__ __device__ constexpr int tc32_ld(int dp) { return dp + 4; } /* floats per Q / V row: 4 g + t */
constexpr int tc32_smem_bytes(int dp)
{
    return (BQ * tc32_ld(dp) + 2 * (dp * TC32_LDK + BK * tc32_ld(dp))) * 4;
}

__device__ __forceinline__ uint32_t to_tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* c += a b: a 16x8 row-major TF32, b 8x8 column-major TF32, c 16x8 float. */
__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Rounds to TF32, in place, the elements tc_stage<float, W, ROWS, COLS> made this thread copy
   (once its copies have landed; zeros stay zeros). */
template <int W, int ROWS, int COLS>
__device__ __forceinline__ void tc32_round_mine(float *dst, int ld)
{
    constexpr int CPR = COLS / W, RS = TC_NT / CPR;
    const int rt = threadIdx.x / CPR, ct = threadIdx.x % CPR * W;
#pragma unroll
    for (int it = 0; it < ROWS / RS; it++) {
        float *di = dst + (rt + it * RS) * ld + ct;
#pragma unroll
        for (int e = 0; e < W; e++)
            di[e] = __uint_as_float(to_tf32(di[e]));
    }
}

template <int ROWS, int COLS>
__device__ __forceinline__ void tc32_round_any(int w, float *dst, int ld)
{
    if (w == 4)
        tc32_round_mine<4, ROWS, COLS>(dst, ld);
    else if (w == 2)
        tc32_round_mine<2, ROWS, COLS>(dst, ld);
    else
        tc32_round_mine<1, ROWS, COLS>(dst, ld);
}

template <int DP>
__global__ void __launch_bounds__(TC_NT, DP >= 128 ? 1 : 2) attn_tc32_kernel(Args a)
{
    S4D_KERNEL_BEGIN();
    constexpr int LD = tc32_ld(DP);
    constexpr int KS = DP / 8; /* k8 steps of Q K^T, and n8 tiles of P V */
    constexpr float LOG2E = 1.4426950408889634f;
    extern __shared__ float4 smem_tc32[];
    /* Q [BQ][LD]; then two stages of K^T [DP][TC32_LDK] and V [BK][LD] */
    float *Qs = reinterpret_cast<float *>(smem_tc32);
    float *KVs = Qs + BQ * LD;
    constexpr int STAGE = DP * TC32_LDK + BK * LD;
    const s4d_cuda_attn_desc &g = a.g;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gr = lane >> 2, tq = lane & 3; /* fragment row (g) and column (t) */

    int64_t bid = blockIdx.x;
    const int split = (int)(bid % a.splits);
    bid /= a.splits;
    const int64_t qt = bid % a.qtiles, b = bid / a.qtiles;
    int64_t oq = 0, ok = 0, ov = 0, om = 0;
    {
        int64_t rest = b;
        for (int d = g.batch_rank - 1; d >= 0; d--) {
            int64_t c = rest % g.batch[d];
            rest /= g.batch[d];
            oq += c * g.q_stride[d];
            ok += c * g.k_stride[d];
            ov += c * g.v_stride[d];
            om += c * g.m_stride[d];
        }
    }
    const float *Q = static_cast<const float *>(a.q) + oq * g.nq * g.d;
    const float *K = static_cast<const float *>(a.k) + ok * g.d * g.nk;
    const float *V = static_cast<const float *>(a.v) + ov * g.nk * g.dv;
    const int64_t q0 = qt * BQ;
    const unsigned char *mrow[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t qg = q0 + warp * 16 + gr + r * 8;
        mrow[r] = g.has_mask && qg < g.nq ? a.mask + om + qg * g.m_qstride : nullptr;
    }

    const int64_t ktiles = (g.nk + BK - 1) / BK;
    const unsigned char hit = g.fill_where_true ? 1 : 0;

    tc_stage_any<float, BQ, DP>(a.w_q, Qs, LD, Q, g.d, q0, g.nq, 0, g.d);
    cp_async_commit();
    __shared__ TcOrder ord;
    const TcTiles tiles = tc_order<float>(a, g.has_mask ? a.mask + om : nullptr, V, split, ktiles, ord);
    if (tiles.n > 0)
        tc_stage_kv<float, DP, TC32_LDK, LD>(a, KVs, K, V, g.nk, g.dv, tiles.at(0) * BK);
    cp_async_commit();
    cp_async_wait<1>(); /* Q has landed */
    __syncthreads();
    if (g.has_q_scale) {
        scale_q_tile<float, BQ, DP>(Qs, LD, g.nq - q0, g.d, g.q_scale, TC_NT);
        __syncthreads();
    }
    uint32_t qf[KS][4]; /* a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4) of each k8 step */
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        const float *qr = Qs + (warp * 16 + gr) * LD + ks * 8 + tq;
        qf[ks][0] = to_tf32(qr[0]);
        qf[ks][1] = to_tf32(qr[8 * LD]);
        qf[ks][2] = to_tf32(qr[4]);
        qf[ks][3] = to_tf32(qr[8 * LD + 4]);
    }

    /* ms: the maximum the accumulators are scaled to, times log2(e) as rounded (-inf before any) */
    float m[2] = {-INFINITY, -INFINITY}, ms[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[KS][4];
#pragma unroll
    for (int j = 0; j < KS; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[j][e] = 0.0f;

    for (int it = 0; it < tiles.n; it++) {
        const int64_t k0 = tiles.at(it) * BK;
        float *Ks = KVs + (it & 1) * STAGE; /* [DP][TC32_LDK]: K^T */
        float *Vs = Ks + DP * TC32_LDK;      /* [BK][LD] */
        if (it + 1 < tiles.n)
            tc_stage_kv<float, DP, TC32_LDK, LD>(a, KVs + ((it + 1) & 1) * STAGE, opaque(K), opaque(V), opaque(g.nk),
                                                 opaque(g.dv), tiles.at(it + 1) * BK);
        cp_async_commit();
        cp_async_wait<1>(); /* tile kt has landed (this thread's part) */
        tc32_round_any<DP, BK>(a.w_k, Ks, TC32_LDK);
        tc32_round_any<BK, DP>(a.w_v, Vs, LD);
        __syncthreads(); /* every thread's part, rounded */

        const int kvalid = g.nk - k0 < BK ? (int)(g.nk - k0) : BK;
        uint32_t fill = 0; /* bit 4 j + e: s[j][e] takes the fill value */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (!mrow[r])
                continue;
            if (r == 1 && mrow[0] && g.m_qstride == 0) {
                fill |= (fill & 0x33333333u) << 2;
                continue;
            }
            const int64_t mk = opaque(g.m_kstride);
            const unsigned char *mp = opaque(mrow[r]) + (k0 + tq * 2) * mk;
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = j * 8 + tq * 2 + e;
                    if (key < kvalid && (mp[(j * 8 + e) * mk] != 0) == hit)
                        fill |= 1u << (4 * j + 2 * r + e);
                }
        }

        /* S = Q K^T: s[j][0, 1] row gr, keys 8 j + 2 tq + {0, 1}; [2, 3] row gr + 8 */
        float s[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            const float *kr = Ks + (ks * 8 + tq) * TC32_LDK + gr; /* b0 (k t, n g), b1 (k t + 4, n g) */
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
                mma_tf32(s[j], qf[ks], __float_as_uint(kr[j * 8]), __float_as_uint(kr[4 * TC32_LDK + j * 8]));
        }
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (j * 8 + tq * 2 + (e & 1) >= kvalid)
                    s[j][e] = -INFINITY;
                else if (fill >> (4 * j + e) & 1u)
                    s[j][e] = g.mask_fill;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float tmax = -INFINITY;
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
                tmax = fmaxf(tmax, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
            const float mnew = fmaxf(m[r], tmax);
            const float mscaled = (mnew == -INFINITY ? 0.0f : mnew) * LOG2E;
            const float scale = exp2f(ms[r] - mscaled); /* exactly 1 when the maximum stays */
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    s[j][e] = exp2f(fmaf(s[j][e], LOG2E, -mscaled));
                    rs += s[j][e];
                }
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            rs += __shfl_xor_sync(0xffffffffu, rs, 2);
            l[r] = l[r] * scale + rs;
            m[r] = mnew;
            ms[r] = mnew == -INFINITY ? -INFINITY : mscaled;
#pragma unroll
            for (int j = 0; j < KS; j++) {
                o[j][2 * r] *= scale;
                o[j][2 * r + 1] *= scale;
            }
        }

        /* O += P V, 8 keys at a time in the order 0, 2, 4, 6, 1, 3, 5, 7 (see above) */
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
            const uint32_t pa[4] = {to_tf32(s[j][0]), to_tf32(s[j][2]), to_tf32(s[j][1]), to_tf32(s[j][3])};
            const float *vr = Vs + (j * 8 + tq * 2) * LD + gr; /* b0 key 2t, b1 key 2t + 1; n g */
#pragma unroll
            for (int n = 0; n < KS; n++)
                mma_tf32(o[n], pa, __float_as_uint(vr[n * 8]), __float_as_uint(vr[LD + n * 8]));
        }
        __syncthreads(); /* this stage's readers are done before it is refilled */
    }

    int64_t obase, ors;
    out_rows(g, b, &obase, &ors);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t qg = q0 + warp * 16 + gr + r * 8;
        if (qg >= g.nq)
            continue;
        const int64_t row = b * g.nq + qg;
        float *dst;
        float inv = 1.0f;
        if (a.splits == 1) {
            inv = 1.0f / l[r]; /* 1 / 0 = inf, and 0 * inf = NaN: an all -inf row */
            dst = static_cast<float *>(a.out) + obase + qg * ors;
        } else {
            const int64_t prow = (int64_t)split * g.nbatch * g.nq + row;
            dst = a.part + prow * g.dv;
            if (tq == 0) {
                a.stats[prow * 2] = m[r];
                a.stats[prow * 2 + 1] = l[r];
            }
        }
#pragma unroll
        for (int j = 0; j < KS; j++) {
            const int col = j * 8 + tq * 2;
            if (col < g.dv)
                dst[col] = o[j][2 * r] * inv;
            if (col + 1 < g.dv)
                dst[col + 1] = o[j][2 * r + 1] * inv;
        }
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

template <int DP>
cudaError_t set_smem_tc16()
{
    return cudaFuncSetAttribute(attn_tc16_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                tc_smem_bytes(DP));
}

template <int DP>
cudaError_t set_smem_tc32()
{
    return cudaFuncSetAttribute(attn_tc32_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                tc32_smem_bytes(DP));
}

cudaError_t prepare_tc32(int dp)
{
    switch (dp) {
    case 16: return set_smem_tc32<16>();
    case 32: return set_smem_tc32<32>();
    case 64: return set_smem_tc32<64>();
    default: return set_smem_tc32<128>();
    }
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

cudaError_t prepare_tc16(int dp)
{
    switch (dp) {
    case 16: return set_smem_tc16<16>();
    case 32: return set_smem_tc16<32>();
    case 64: return set_smem_tc16<64>();
    default: return set_smem_tc16<128>();
    }
}

template <typename T, int DP>
void launch_main(const Args &a, int64_t blocks, cudaStream_t stream)
{
    s4d_launch(attn_kernel<T, DP>, (unsigned)blocks, NT, smem_floats(DP) * sizeof(float), stream, a);
}

template <int DP>
void launch_tc16(const Args &a, int64_t blocks, cudaStream_t stream)
{
    s4d_launch(attn_tc16_kernel<DP>, (unsigned)blocks, TC_NT, tc_smem_bytes(DP), stream, a);
}

template <int DP>
void launch_tc32(const Args &a, int64_t blocks, cudaStream_t stream)
{
    s4d_launch(attn_tc32_kernel<DP>, (unsigned)blocks, TC_NT, tc32_smem_bytes(DP), stream, a);
}

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

cudaError_t run_tc16(int dp, const Args &a, cudaStream_t stream)
{
    const int64_t blocks = a.g.nbatch * a.qtiles * a.splits;
    switch (dp) {
    case 16: launch_tc16<16>(a, blocks, stream); break;
    case 32: launch_tc16<32>(a, blocks, stream); break;
    case 64: launch_tc16<64>(a, blocks, stream); break;
    default: launch_tc16<128>(a, blocks, stream); break;
    }
    if (a.splits > 1)
        launch_combine<__half>(a, stream);
    return cudaGetLastError();
}

cudaError_t run_tc32(int dp, const Args &a, cudaStream_t stream)
{
    const int64_t blocks = a.g.nbatch * a.qtiles * a.splits;
    switch (dp) {
    case 16: launch_tc32<16>(a, blocks, stream); break;
    case 32: launch_tc32<32>(a, blocks, stream); break;
    case 64: launch_tc32<64>(a, blocks, stream); break;
    default: launch_tc32<128>(a, blocks, stream); break;
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
