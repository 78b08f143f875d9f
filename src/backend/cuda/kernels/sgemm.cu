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
 * bits on every run; bias and ReLU are applied once at the end (NaN stays
 * NaN: fmaxf would drop it).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/kernels/sgemm.h"
#include "backend/cuda/kernels/launch.cuh"

namespace {

constexpr int BM = 32, BN = 64, BK = 16, NT = 128;

template <bool RELU, bool BIAS>
__global__ void __launch_bounds__(NT)
    sgemm_kernel(const float *__restrict__ A, const float *__restrict__ B, const float *__restrict__ bias,
                 float *__restrict__ D, int64_t M, int64_t N, int64_t K, int64_t sa, int64_t sb, int64_t sd)
{
    S4D_KERNEL_BEGIN();
    __shared__ __align__(16) float As[2][BK][BM + 4]; /* [k][m] */
    __shared__ __align__(16) float Bs[2][BK][BN];     /* [k][n] */
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t z = blockIdx.z;
    A += z * sa;
    B += z * sb;
    D += z * sd;
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
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t m = m0 + ty * 4 + i;
        if (m >= M)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = n0 + tx * 4 + j;
            if (n >= N)
                continue;
            float v = acc[i][j];
            if (BIAS)
                v += __ldg(bias + n);
            if (RELU)
                v = v < 0.0f ? 0.0f : v;
            D[m * N + n] = v;
        }
    }
}

} // namespace

extern "C" int s4d_cuda_sgemm_ok(int64_t m, int64_t n, int64_t k, int64_t batch)
{
    return m > 0 && n > 0 && k > 0 && batch > 0 && batch <= 65535 && (m + BM - 1) / BM <= 65535 &&
           (n + BN - 1) / BN <= INT32_MAX;
}

extern "C" cudaError_t s4d_cuda_sgemm(const float *a, const float *b, const float *bias, float *d, int64_t m,
                                      int64_t n, int64_t k, int64_t batch, int64_t sa, int64_t sb, int relu,
                                      cudaStream_t stream)
{
    if (!s4d_cuda_sgemm_ok(m, n, k, batch))
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM), (unsigned)batch);
    const int64_t sd = m * n;
    if (bias && relu)
        s4d_launch(sgemm_kernel<true, true>, grid, NT, 0, stream, a, b, bias, d, m, n, k, sa, sb, sd);
    else if (bias)
        s4d_launch(sgemm_kernel<false, true>, grid, NT, 0, stream, a, b, bias, d, m, n, k, sa, sb, sd);
    else if (relu)
        s4d_launch(sgemm_kernel<true, false>, grid, NT, 0, stream, a, b, bias, d, m, n, k, sa, sb, sd);
    else
        s4d_launch(sgemm_kernel<false, false>, grid, NT, 0, stream, a, b, bias, d, m, n, k, sa, sb, sd);
    return cudaGetLastError();
}
