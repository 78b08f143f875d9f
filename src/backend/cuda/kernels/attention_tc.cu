/*
 * The fused attention kernels on tensor cores (see attention.h for the
 * contract, attention.cu's opening comment for the semantics, which these
 * keep): float16 (mma.sync m16n8k16) and float32 on TF32 tensor cores
 * (m16n8k8, when the engine allows TF32), each with its own comment below,
 * and the order in which a block takes its key tiles (tc_order).
 *
 * tests/cuda/attention_tc_emulation.py repeats these kernels' index
 * arithmetic lane by lane on the CPU: keep it in step.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/kernels/async_copy.cuh"
#include "backend/cuda/kernels/attention_common.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace s4d_attn {
namespace {

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

/* ---- float16 on tensor cores ----------------------------------------------------------------
 * A block of 4 warps owns 64 query rows (16 per warp) and its share of the key tiles (which:
 * tc_order below). mma.sync
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

    const BlockWork<__half> blk = block_work<__half>(a);
    const int split = blk.split;
    const int64_t qt = blk.qt, b = blk.b, om = blk.om;
    const __half *Q = blk.q, *K = blk.k, *V = blk.v;
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

    const BlockWork<float> blk = block_work<float>(a);
    const int split = blk.split;
    const int64_t qt = blk.qt, b = blk.b, om = blk.om;
    const float *Q = blk.q, *K = blk.k, *V = blk.v;
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

} // namespace

cudaError_t prepare_tc16(int dp)
{
    switch (dp) {
    case 16: return set_smem_tc16<16>();
    case 32: return set_smem_tc16<32>();
    case 64: return set_smem_tc16<64>();
    default: return set_smem_tc16<128>();
    }
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

cudaError_t prepare_tc32(int dp)
{
    switch (dp) {
    case 16: return set_smem_tc32<16>();
    case 32: return set_smem_tc32<32>();
    case 64: return set_smem_tc32<64>();
    default: return set_smem_tc32<128>();
    }
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

} // namespace s4d_attn
