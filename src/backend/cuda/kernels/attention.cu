/*
 * The fused attention kernel (see attention.h for the contract).
 *
 * Work split. A block of 256 threads owns 64 query rows of one batch matrix
 * and a range of key tiles; thread (ty, tx), ty, tx in [0, 16), owns query
 * rows 4 ty .. 4 ty + 3. Per key tile of 64:
 *   1. K^T [D, 64] and V [64, Dv] are staged in shared memory (Q, transposed,
 *      stays there for the whole block);
 *   2. each thread computes a 4 x 4 block of scores (keys 4 tx .. 4 tx + 3)
 *      in registers, applies the mask, and the 16 threads of a row (one half
 *      of a warp) agree on the row's new maximum and sum by butterfly
 *      shuffles (every lane gets the same bits);
 *   3. the probabilities go through shared memory (transposed, [key][query])
 *      and each thread accumulates its 4 rows x Dv/16 output columns.
 * Scores and the running maximum/sum stay in float; float16 inputs are
 * widened when staged and the output rounded once.
 *
 * Softmax semantics are the unfused chain's: a masked score becomes
 * mask_fill exactly; a row whose scores are all -inf ends with sum 0 and so
 * 0 * (1 / 0) = NaN; NaN scores reach the sum and the accumulator. The
 * running maximum is used as 0 while it is -inf, so that -inf - -inf never
 * turns a row NaN before a finite score arrives.
 *
 * Head sizes are compiled for 16, 32, 64 and 128 (D and Dv padded with
 * zeros up to the next of these: a zero term adds nothing).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/kernels/attention.h"

namespace {

constexpr int BQ = 64;       /* queries per block */
constexpr int BK = 64;       /* keys per tile */
constexpr int NT = 256;      /* threads per block */
constexpr int LDQ = BQ + 4;  /* padded rows of the transposed Q and P tiles: fewer bank conflicts */
constexpr int LDP = BQ + 4;
/* Most blocks the key split aims for: two resident per SM (128 registers, ~72 KB of shared
   memory each) on a 132-SM H100/H200, so that the blocks run as one wave. A constant, so that the
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
    int splits, tiles_per_split;
    int vec_k, vec_v; /* 4-element vector loads of K^T rows / V rows are aligned */
};

__device__ __forceinline__ float ld1(const float *p) { return __ldg(p); }
__device__ __forceinline__ float ld1(const __half *p) { return __half2float(p[0]); }

__device__ __forceinline__ float4 ld4(const float *p) { return __ldg(reinterpret_cast<const float4 *>(p)); }
__device__ __forceinline__ float4 ld4(const __half *p)
{
    uint2 r = __ldg(reinterpret_cast<const uint2 *>(p));
    __half2 a = *reinterpret_cast<__half2 *>(&r.x), b = *reinterpret_cast<__half2 *>(&r.y);
    float2 fa = __half22float2(a), fb = __half22float2(b);
    return make_float4(fa.x, fa.y, fb.x, fb.y);
}

__device__ __forceinline__ void st1(float *p, float v) { *p = v; }
__device__ __forceinline__ void st1(__half *p, float v) { *p = __float2half_rn(v); }

constexpr int smem_floats(int dp) { return dp * LDQ + dp * BK + BK * dp + BK * LDP + BQ * BK / 4; }

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
    constexpr int CPT = DP / 16;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4); /* [DP][LDQ]: Q transposed */
    float *Ks = Qs + DP * LDQ;                    /* [DP][BK] */
    float *Vs = Ks + DP * BK;                     /* [BK][DP] */
    float *Ps = Vs + BK * DP;                     /* [BK][LDP]: probabilities transposed */
    unsigned char *Ms = reinterpret_cast<unsigned char *>(Ps + BK * LDP); /* [BQ][BK] mask tile */
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
    const int64_t q0 = qt * BQ;

    for (int i = tid; i < BQ * DP; i += NT) {
        int q = i / DP, d = i % DP;
        float x = 0.0f;
        if (q0 + q < g.nq && d < g.d)
            x = ld1(Q + (q0 + q) * g.d + d);
        Qs[d * LDQ + q] = x;
    }

    float m[4], l[4], acc[4][CPT];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < CPT; c++)
            acc[i][c] = 0.0f;
    }
    const int64_t ktiles = (g.nk + BK - 1) / BK;
    const int64_t kt0 = (int64_t)split * a.tiles_per_split;
    const int64_t kt1 = kt0 + a.tiles_per_split < ktiles ? kt0 + a.tiles_per_split : ktiles;
    const unsigned char hit = g.fill_where_true ? 1 : 0;

    for (int64_t kt = kt0; kt < kt1; kt++) {
        const int64_t k0 = kt * BK;
        __syncthreads(); /* the previous tile's readers are done (and Q is staged) */
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
        if (a.vec_v) {
            for (int i = tid; i < BK * (DP / 4); i += NT) {
                int kk = i / (DP / 4), c = (i % (DP / 4)) * 4;
                float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (k0 + kk < g.nk && c < g.dv)
                    x = ld4(V + (k0 + kk) * g.dv + c);
                *reinterpret_cast<float4 *>(&Vs[kk * DP + c]) = x;
            }
        } else {
            for (int i = tid; i < BK * DP; i += NT) {
                int kk = i / DP, c = i % DP;
                float x = 0.0f;
                if (k0 + kk < g.nk && c < g.dv)
                    x = ld1(V + (k0 + kk) * g.dv + c);
                Vs[kk * DP + c] = x;
            }
        }
        if (M) {
            /* 0 or 1 per (query, key) of the tile; rows beyond the queries read as unmasked */
            for (int i = tid; i < BQ * BK; i += NT) {
                const int q = i / BK, kk = i % BK;
                unsigned char x = 1 - hit;
                if (q0 + q < g.nq && k0 + kk < g.nk)
                    x = M[(q0 + q) * g.m_qstride + (k0 + kk) * g.m_kstride] != 0;
                Ms[i] = x;
            }
        }
        __syncthreads();

        /* 2. scores of rows 4 ty + i, keys 4 tx + j */
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < DP; d++) {
            const float4 qv = *reinterpret_cast<const float4 *>(&Qs[d * LDQ + ty * 4]);
            const float4 kv = *reinterpret_cast<const float4 *>(&Ks[d * BK + tx * 4]);
            const float qa[4] = {qv.x, qv.y, qv.z, qv.w}, ka[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    s[i][j] = fmaf(qa[i], ka[j], s[i][j]);
        }
        {
            const int kvalid = g.nk - k0 < BK ? (int)(g.nk - k0) : BK; /* keys of this tile */
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uchar4 mv = M ? *reinterpret_cast<const uchar4 *>(&Ms[(ty * 4 + i) * BK + tx * 4])
                                    : make_uchar4(1 - hit, 1 - hit, 1 - hit, 1 - hit);
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
        for (int i = 0; i < 4; i++) {
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
            *reinterpret_cast<float4 *>(&Ps[(tx * 4 + j) * LDP + ty * 4]) =
                make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
        __syncthreads();

        /* 3. acc += P V */
#pragma unroll 4
        for (int kk = 0; kk < BK; kk++) {
            const float4 pv = *reinterpret_cast<const float4 *>(&Ps[kk * LDP + ty * 4]);
            const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
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
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int c = 0; c < CPT; c++)
                    acc[i][c] = fmaf(pa[i], va[c], acc[i][c]);
        }
    }

    /* The rows this thread owns, as results or as partials of its key range. */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t qg = q0 + ty * 4 + i;
        if (qg >= g.nq)
            continue;
        const int64_t row = b * g.nq + qg;
        if (a.splits == 1) {
            const float inv = 1.0f / l[i]; /* 1 / 0 = inf, and 0 * inf = NaN: an all -inf row */
            T *o = static_cast<T *>(a.out) + row * g.dv;
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

/* Merges the key ranges' partials of each output element, ranges in order. */
template <typename T>
__global__ void attn_combine(Args a)
{
    const s4d_cuda_attn_desc &g = a.g;
    const int64_t rows = g.nbatch * g.nq, total = rows * g.dv;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = idx / g.dv, col = idx % g.dv;
        float mx = -INFINITY;
        for (int s = 0; s < a.splits; s++)
            mx = fmaxf(mx, a.stats[(s * rows + row) * 2]);
        const float muse = mx == -INFINITY ? 0.0f : mx;
        float sum = 0.0f, acc = 0.0f;
        for (int s = 0; s < a.splits; s++) {
            const int64_t prow = s * rows + row;
            const float w = expf(a.stats[prow * 2] - muse);
            sum += a.stats[prow * 2 + 1] * w;
            acc += a.part[prow * g.dv + col] * w;
        }
        st1(static_cast<T *>(a.out) + idx, acc * (1.0f / sum));
    }
}

int head_pad(int64_t n)
{
    return n <= 16 ? 16 : n <= 32 ? 32 : n <= 64 ? 64 : 128;
}

/* The launch geometry of g (shapes only). */
void plan(const s4d_cuda_attn_desc *g, int64_t *qtiles, int *splits, int *tps)
{
    *qtiles = (g->nq + BQ - 1) / BQ;
    const int64_t ktiles = (g->nk + BK - 1) / BK;
    const int64_t base = g->nbatch * *qtiles;
    int64_t s = 1;
    if (base > 0 && 2 * base <= WANT_BLOCKS) {
        s = WANT_BLOCKS / base;
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

template <typename T>
cudaError_t prepare_t(int dp)
{
    switch (dp) {
    case 16: return set_smem<T, 16>();
    case 32: return set_smem<T, 32>();
    case 64: return set_smem<T, 64>();
    default: return set_smem<T, 128>();
    }
}

template <typename T, int DP>
void launch_main(const Args &a, int64_t blocks, cudaStream_t stream)
{
    attn_kernel<T, DP><<<(unsigned)blocks, NT, smem_floats(DP) * sizeof(float), stream>>>(a);
}

template <typename T>
cudaError_t run_t(int dp, const Args &a, cudaStream_t stream)
{
    const int64_t blocks = a.g.nbatch * a.qtiles * a.splits;
    switch (dp) {
    case 16: launch_main<T, 16>(a, blocks, stream); break;
    case 32: launch_main<T, 32>(a, blocks, stream); break;
    case 64: launch_main<T, 64>(a, blocks, stream); break;
    default: launch_main<T, 128>(a, blocks, stream); break;
    }
    if (a.splits > 1) {
        const int64_t total = a.g.nbatch * a.g.nq * a.g.dv;
        int64_t cb = (total + 255) / 256;
        if (cb > 65536)
            cb = 65536;
        attn_combine<T><<<(unsigned)cb, 256, 0, stream>>>(a);
    }
    return cudaGetLastError();
}

bool aligned(const void *p, size_t n) { return (reinterpret_cast<uintptr_t>(p) % n) == 0; }

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
    plan(g, &qtiles, &splits, &tps);
    if (g->nbatch > 0 && qtiles > 0 && g->nbatch * qtiles > INT32_MAX / splits) {
        *why = "more than 2^31-1 blocks of 64 queries";
        return 0;
    }
    return 1;
}

extern "C" size_t s4d_cuda_attention_workspace(const s4d_cuda_attn_desc *g)
{
    int64_t qtiles;
    int splits, tps;
    plan(g, &qtiles, &splits, &tps);
    if (splits <= 1)
        return 0;
    const size_t rows = (size_t)splits * (size_t)g->nbatch * (size_t)g->nq;
    /* partials, then the statistics at a 256-byte boundary */
    size_t part = (rows * (size_t)g->dv * sizeof(float) + 255) / 256 * 256;
    return part + rows * 2 * sizeof(float);
}

extern "C" cudaError_t s4d_cuda_attention_prepare(s4d_dtype dtype, const s4d_cuda_attn_desc *g)
{
    const int dp = head_pad(g->d > g->dv ? g->d : g->dv);
    if (dtype == S4D_DTYPE_FLOAT16)
        return prepare_t<__half>(dp);
    if (dtype == S4D_DTYPE_FLOAT32)
        return prepare_t<float>(dp);
    return cudaErrorInvalidValue;
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
    Args a;
    a.g = *g;
    a.q = q;
    a.k = kt;
    a.v = v;
    a.mask = static_cast<const unsigned char *>(mask);
    a.out = out;
    plan(g, &a.qtiles, &a.splits, &a.tiles_per_split);
    a.part = nullptr;
    a.stats = nullptr;
    if (a.splits > 1) {
        const size_t need = s4d_cuda_attention_workspace(g);
        if (!ws || ws_size < need)
            return cudaErrorInvalidValue;
        const size_t rows = (size_t)a.splits * (size_t)g->nbatch * (size_t)g->nq;
        a.part = static_cast<float *>(ws);
        a.stats = reinterpret_cast<float *>(static_cast<char *>(ws) +
                                            (rows * (size_t)g->dv * sizeof(float) + 255) / 256 * 256);
    }
    /* Every matrix of K^T starts a multiple of nk elements in, every row of V a multiple of dv. */
    a.vec_k = g->nk % 4 == 0 && aligned(kt, 4 * es);
    a.vec_v = g->dv % 4 == 0 && aligned(v, 4 * es);
    const int dp = head_pad(g->d > g->dv ? g->d : g->dv);
    if (dtype == S4D_DTYPE_FLOAT16)
        return run_t<__half>(dp, a, stream);
    return run_t<float>(dp, a, stream);
}
