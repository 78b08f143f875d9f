/*
 * s4d::FusedMLP on CUDA (mlp.h). The head's Linear chains are narrow (8 to
 * 256 columns) and run on a few hundred rows, so each of their products is
 * a few microseconds of work that costs a launch, a cuBLASLt kernel sized
 * for far larger problems and often a LayerNormalization kernel after it.
 * Here one block of 256 threads takes 8 rows through the whole chain with
 * the rows in shared memory: the first layer reads its columns of X (a
 * Slice folded in), every layer writes its outputs to the other buffer,
 * and only the last layer's rows go back to memory.
 *
 * A layer of n columns spreads its n x 8 outputs over the threads: each
 * column gets tpc = 1, 2, 4 or 8 threads (as many as 256 / n allows), each
 * of which sums 8 / tpc rows. A thread reads its column of W from global
 * memory (the warp's 32 columns are one coalesced read; the weights stay in
 * L1 and L2 across blocks) and the rows' inputs from shared memory four
 * k at a time, so each W value feeds 8 / tpc FMAs. Sums run in k order with
 * FMA: the same bits on every run. Then bias and ReLU (NaN stays NaN), and
 * the LayerNormalization: one warp per row, mean and variance accumulated
 * in double as the host's LayerNormalization has them, the row normalised
 * in float.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/mlp.h"

namespace {

constexpr int ROWS = 8, NT = 256, WARPS = NT / 32;
constexpr int STRIDE = S4D_CUDA_MLP_MAX_WIDTH + 4; /* floats per row buffer: 16-byte rows, banks staggered */
static_assert(WARPS == ROWS, "one warp normalises one row");

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One layer: out[r][c] = act(in[r][:k] . w[:, c] + bias[c]) for the block's rows. */
__device__ __forceinline__ void layer_product(const s4d_cuda_mlp_layer &L, const float (*in)[STRIDE],
                                              float (*out)[STRIDE])
{
    const int n = L.n, k = L.k;
    const int room = NT / n;
    const int tpc = room >= 8 ? 8 : room >= 4 ? 4 : room >= 2 ? 2 : 1;
    const int nr = ROWS / tpc;
    const int t = threadIdx.x;
    if (t >= n * tpc)
        return;
    const int col = t % n, rg = t / n;
    float acc[ROWS];
#pragma unroll
    for (int j = 0; j < ROWS; j++)
        acc[j] = 0.0f;
    const float *__restrict__ w = L.w + col;
    int q = 0;
    for (; q + 4 <= k; q += 4) {
        const float w0 = __ldg(w + (int64_t)q * n), w1 = __ldg(w + (int64_t)(q + 1) * n);
        const float w2 = __ldg(w + (int64_t)(q + 2) * n), w3 = __ldg(w + (int64_t)(q + 3) * n);
#pragma unroll
        for (int j = 0; j < ROWS; j++) {
            if (j < nr) {
                const float4 a = *reinterpret_cast<const float4 *>(&in[rg + j * tpc][q]);
                acc[j] = fmaf(a.x, w0, acc[j]);
                acc[j] = fmaf(a.y, w1, acc[j]);
                acc[j] = fmaf(a.z, w2, acc[j]);
                acc[j] = fmaf(a.w, w3, acc[j]);
            }
        }
    }
    for (; q < k; q++) {
        const float wq = __ldg(w + (int64_t)q * n);
#pragma unroll
        for (int j = 0; j < ROWS; j++)
            if (j < nr)
                acc[j] = fmaf(in[rg + j * tpc][q], wq, acc[j]);
    }
    const float b = L.bias ? __ldg(L.bias + col) : 0.0f;
#pragma unroll
    for (int j = 0; j < ROWS; j++) {
        if (j < nr) {
            const float v = acc[j] + b;
            out[rg + j * tpc][col] = L.relu && v < 0.0f ? 0.0f : v;
        }
    }
}

/* LayerNormalization of the block's row `warp` in place (n columns). */
__device__ __forceinline__ void layer_norm(const s4d_cuda_mlp_layer &L, float (*rows)[STRIDE])
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n = L.n;
    float *row = rows[warp];
    double s = 0.0;
    for (int c = lane; c < n; c += 32)
        s += row[c];
    const double mu = warp_sum(s) / n;
    double v = 0.0;
    for (int c = lane; c < n; c += 32) {
        const double dlt = row[c] - mu;
        v += dlt * dlt;
    }
    v = warp_sum(v) / n;
    const float m = (float)mu, is = (float)(1.0 / sqrt(v + (double)L.eps));
    for (int c = lane; c < n; c += 32)
        row[c] = (row[c] - m) * is * __ldg(L.scale + c) + (L.shift ? __ldg(L.shift + c) : 0.0f);
}

__global__ void __launch_bounds__(NT)
    mlp_kernel(const __grid_constant__ s4d_cuda_mlp_desc d, const float *__restrict__ x, float *__restrict__ y)
{
    S4D_KERNEL_BEGIN();
    __shared__ __align__(16) float buf[2][ROWS][STRIDE];
    const int64_t row0 = (int64_t)blockIdx.x * ROWS;
    const int k0 = d.layer[0].k;
    for (int i = threadIdx.x; i < ROWS * k0; i += NT) {
        const int r = i / k0, c = i % k0;
        const int64_t gr = row0 + r;
        buf[0][r][c] = gr < d.rows ? x[gr * d.x_cols + d.begin + c] : 0.0f;
    }
    __syncthreads();
    int cur = 0;
    for (int l = 0; l < d.layers; l++) {
        const s4d_cuda_mlp_layer &L = d.layer[l];
        layer_product(L, buf[cur], buf[cur ^ 1]);
        __syncthreads();
        if (L.scale) {
            layer_norm(L, buf[cur ^ 1]);
            __syncthreads();
        }
        cur ^= 1;
    }
    const int n = d.layer[d.layers - 1].n;
    for (int i = threadIdx.x; i < ROWS * n; i += NT) {
        const int r = i / n, c = i % n;
        const int64_t gr = row0 + r;
        if (gr < d.rows)
            y[gr * n + c] = buf[cur][r][c];
    }
}

} // namespace

extern "C" int s4d_cuda_mlp_ok(const s4d_cuda_mlp_desc *d, const char **why)
{
    *why = "";
    if (d->layers < 1 || d->layers > S4D_CUDA_MLP_MAX_LAYERS) {
        *why = "the kernel takes 1 to 8 layers";
        return 0;
    }
    if (d->rows < 0 || (d->rows + ROWS - 1) / ROWS > INT32_MAX) {
        *why = "too many rows for one grid";
        return 0;
    }
    int64_t largest = 0;
    for (int l = 0; l < d->layers; l++) {
        const s4d_cuda_mlp_layer &L = d->layer[l];
        if (L.k < 1 || L.n < 1 || L.k > S4D_CUDA_MLP_MAX_WIDTH || L.n > S4D_CUDA_MLP_MAX_WIDTH ||
            (l > 0 && L.k != d->layer[l - 1].n)) {
            *why = "a layer is wider than the kernel's 256 columns";
            return 0;
        }
        if ((int64_t)L.k * L.n > largest)
            largest = (int64_t)L.k * L.n;
    }
    if (d->rows > S4D_CUDA_MLP_MANY_ROWS && largest > S4D_CUDA_MLP_MANY_ROWS_MAX_WEIGHTS) {
        *why = "many rows through a layer of more than 128 x 128 weights run faster as separate products";
        return 0;
    }
    return 1;
}

extern "C" cudaError_t s4d_cuda_mlp(const s4d_cuda_mlp_desc *d, const float *x, float *y, cudaStream_t stream)
{
    const char *why;
    if (!s4d_cuda_mlp_ok(d, &why))
        return cudaErrorInvalidValue;
    if (d->rows == 0)
        return cudaSuccess;
    const unsigned blocks = (unsigned)((d->rows + ROWS - 1) / ROWS);
    cudaError_t e = s4d_launch(mlp_kernel, dim3(blocks), dim3(NT), 0, stream, *d, x, y);
    return e != cudaSuccess ? e : cudaGetLastError();
}
