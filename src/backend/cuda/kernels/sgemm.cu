/*
 * The project's own strict float32 product for the skinny products of a
 * detection head (sgemm.h): hundreds to a few thousand rows, a few hundred
 * columns. cuBLASLt's FFMA kernels use tiles that leave most of an H200's
 * 132 SMs idle at 900 x 256 or pay for split-K; this one uses 32 x 64 tiles
 * (116 blocks at 900 x 256) of 128 threads, each thread a 4 x 4 block of
 * outputs, with the next K slice fetched into registers while the current
 * one is multiplied out of shared memory. The builder times it against
 * cuBLASLt's candidates and keeps it only where it is faster.
 *
 * Every output sums its K products in order k = 0, 1, ... with FMA: the same
 * bits on every run; bias, ReLU and a residual (the head's feed-forward and
 * attention blocks add their input back) are applied once at the end, in
 * that order (NaN stays NaN: fmaxf would drop it).
 *
 * With NORM (rows of at most BN columns, so one block holds whole rows) the
 * epilogue also normalises each row as LayerNormalization does: the 16
 * threads of a row group (one half of a warp) sum their values, then their
 * squared deviations from the mean, by butterfly shuffles, and write
 * (v - mean) * rstd * scale + shift. The head's Linear -> ReLU -> LayerNorm
 * layers of 32 or 64 columns thus cost one kernel instead of two.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/kernels/sgemm.h"
#include "backend/cuda/kernels/launch.cuh"

namespace {

constexpr int BM = 32, BN = 64, BK = 16, NT = 128;

/* LayerNormalization's parameters for the NORM epilogue. */
struct Norm {
    const float *scale, *shift;
    float eps;
};

template <bool RELU, bool BIAS, bool NORM>
__global__ void __launch_bounds__(NT)
    sgemm_kernel(const float *__restrict__ A, const float *__restrict__ B, const float *__restrict__ bias,
                 const float *__restrict__ R, float *__restrict__ D, int64_t M, int64_t N, int64_t K, int64_t sa, int64_t sb, int64_t sd,
                 Norm nm)
{
    S4D_KERNEL_BEGIN();
    __shared__ __align__(16) float As[2][BK][BM + 4]; /* [k][m] */
    __shared__ __align__(16) float Bs[2][BK][BN];     /* [k][n] */
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t z = blockIdx.z;
    A += z * sa;
    B += z * sb;
    D += z * sd;
    if (R)
        R += z * sd;
    const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
    /* Loads: A row ar, k columns ak .. ak+3; B row bk, n columns bn .. bn+7. */
    const int ar = tid / 4, ak = (tid % 4) * 4, bk = tid / 8, bn = (tid % 8) * 8;
    const int64_t arow = m0 + ar;
    float ra[4], rb[8];
    auto fetch = [&](int64_t k0) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t k = k0 + ak + i;
            ra[i] = arow < M && k < K ? __ldg(A + arow * K + k) : 0.0f;
        }
        const int64_t k = k0 + bk;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int64_t n = n0 + bn + i;
            rb[i] = k < K && n < N ? __ldg(B + k * N + n) : 0.0f;
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            As[buf][ak + i][ar] = ra[i];
        *reinterpret_cast<float4 *>(&Bs[buf][bk][bn]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
        *reinterpret_cast<float4 *>(&Bs[buf][bk][bn + 4]) = make_float4(rb[4], rb[5], rb[6], rb[7]);
    };
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    fetch(0);
    stash(0);
    __syncthreads();
    const int64_t tiles = (K + BK - 1) / BK;
    for (int64_t t = 0; t < tiles; t++) {
        const int buf = (int)(t & 1);
        if (t + 1 < tiles)
            fetch((t + 1) * BK);
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            const float4 a = *reinterpret_cast<const float4 *>(&As[buf][kk][ty * 4]);
            const float4 b = *reinterpret_cast<const float4 *>(&Bs[buf][kk][tx * 4]);
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        if (t + 1 < tiles)
            stash(buf ^ 1);
        __syncthreads();
    }
    float v[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t m = m0 + ty * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = n0 + tx * 4 + j;
            float x = acc[i][j];
            if (BIAS && n < N)
                x += __ldg(bias + n);
            if (RELU)
                x = x < 0.0f ? 0.0f : x;
            if (R && m < M && n < N)
                x += __ldg(R + m * N + n);
            v[i][j] = n < N ? x : 0.0f;
        }
    }
    if (NORM) {
        /* Whole rows: n0 == 0 and N <= BN. Every lane takes part in the shuffles. */
        const float inv_n = 1.0f / (float)N;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++)
                s += v[i][j];
#pragma unroll
            for (int o = 8; o > 0; o >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, o);
            const float mean = s * inv_n;
            float q = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float d = tx * 4 + j < N ? v[i][j] - mean : 0.0f;
                q = fmaf(d, d, q);
            }
#pragma unroll
            for (int o = 8; o > 0; o >>= 1)
                q += __shfl_xor_sync(0xffffffffu, q, o);
            const float rstd = 1.0f / sqrtf(q * inv_n + nm.eps);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int n = tx * 4 + j;
                if (n < N)
                    v[i][j] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[i][j], mean), rstd), __ldg(nm.scale + n)),
                                        nm.shift ? __ldg(nm.shift + n) : 0.0f);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t m = m0 + ty * 4 + i;
        if (m >= M)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = n0 + tx * 4 + j;
            if (n < N)
                D[m * N + n] = v[i][j];
        }
    }
}

} // namespace

extern "C" int s4d_cuda_sgemm_ok(int64_t m, int64_t n, int64_t k, int64_t batch)
{
    return m > 0 && n > 0 && k > 0 && batch > 0 && batch <= 65535 && (m + BM - 1) / BM <= 65535 &&
           (n + BN - 1) / BN <= INT32_MAX;
}

namespace {

template <bool NORM>
cudaError_t launch(const float *a, const float *b, const float *bias, const float *res, float *d, int64_t m, int64_t n,
                   int64_t k, int64_t batch, int64_t sa, int64_t sb, int relu, Norm nm, cudaStream_t stream)
{
    const dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM), (unsigned)batch);
    const int64_t sd = m * n;
    if (bias && relu)
        s4d_launch(sgemm_kernel<true, true, NORM>, grid, NT, 0, stream, a, b, bias, res, d, m, n, k, sa, sb, sd, nm);
    else if (bias)
        s4d_launch(sgemm_kernel<false, true, NORM>, grid, NT, 0, stream, a, b, bias, res, d, m, n, k, sa, sb, sd, nm);
    else if (relu)
        s4d_launch(sgemm_kernel<true, false, NORM>, grid, NT, 0, stream, a, b, bias, res, d, m, n, k, sa, sb, sd, nm);
    else
        s4d_launch(sgemm_kernel<false, false, NORM>, grid, NT, 0, stream, a, b, bias, res, d, m, n, k, sa, sb, sd, nm);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t s4d_cuda_sgemm(const float *a, const float *b, const float *bias, const float *res, float *d,
                                      int64_t m, int64_t n, int64_t k, int64_t batch, int64_t sa, int64_t sb,
                                      int relu, cudaStream_t stream)
{
    if (!s4d_cuda_sgemm_ok(m, n, k, batch))
        return cudaErrorInvalidValue;
    return launch<false>(a, b, bias, res, d, m, n, k, batch, sa, sb, relu, Norm{nullptr, nullptr, 0.0f}, stream);
}

extern "C" cudaError_t s4d_cuda_sgemm_ln(const float *a, const float *b, const float *bias, const float *res,
                                         const float *scale,
                                         const float *shift, float eps, float *d, int64_t m, int64_t n, int64_t k,
                                         int64_t batch, int64_t sa, int64_t sb, int relu, cudaStream_t stream)
{
    static_assert(S4D_CUDA_SGEMM_LN_MAX_N == BN, "one block holds whole rows");
    if (!s4d_cuda_sgemm_ok(m, n, k, batch) || n > S4D_CUDA_SGEMM_LN_MAX_N || !scale)
        return cudaErrorInvalidValue;
    return launch<true>(a, b, bias, res, d, m, n, k, batch, sa, sb, relu, Norm{scale, shift, eps}, stream);
}
