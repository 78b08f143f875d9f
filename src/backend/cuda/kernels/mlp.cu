/*
 * s4d::FusedMLP on CUDA (mlp.h). The head's Linear chains are narrow (8 to
 * 256 columns) and run on a few hundred rows, so each of their products is
 * a few microseconds of work that costs a launch, a cuBLASLt kernel sized
 * for far larger problems and often a LayerNormalization kernel after it.
 * Here one block of 256 threads takes R rows (8, or 2 when 8 would leave
 * most SMs idle) through the whole chain with the rows in shared memory:
 * the first layer reads its columns of X (a Slice folded in), every layer
 * writes its outputs to the other buffer, and only the last layer's rows go
 * back to memory.
 *
 * A layer of n columns spreads its n x R outputs over the threads: each
 * column gets tpc = 1, 2, 4 or 8 threads (as many as 256 / n and R allow),
 * each of which sums R / tpc rows. W comes through shared memory in tiles
 * of KT rows (24 for 8 rows, 40 for 2) that the whole block loads at once
 * (below, before layer_product), and the rows' inputs are read four k at a
 * time, so each W value feeds R / tpc FMAs. Sums run in k order with FMA:
 * the same bits on every run, whatever R and KT.
 * Then bias and ReLU (NaN stays NaN), and the LayerNormalization: one warp
 * per row, mean and variance accumulated in double as the host's
 * LayerNormalization has them, the row normalised in float.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/mlp.h"

namespace {

constexpr int NT = 256, WARPS = NT / 32;
constexpr int STRIDE = S4D_CUDA_MLP_MAX_WIDTH + 4; /* floats per row buffer: 16-byte rows, banks staggered */

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/*
 * W reaches the block in tiles of KT rows [KT, n], staged in shared memory by
 * all threads at once (float4 loads when n is a multiple of 4 and W is
 * 16-byte aligned), the next tile's loads in flight in registers while the
 * current one is multiplied. Each thread reading its own column of W from
 * global memory, as the kernel first did, left one load chain per thread
 * waiting on L2 (a block per SM or fewer: the cameras' 6 rows are one
 * block) and took 35-60 us per chain on the H200.
 */
/* float4 per thread per tile of KT rows of W (KT a multiple of 4). */
template <int KT> struct Tile {
    static constexpr int VEC = KT * S4D_CUDA_MLP_MAX_WIDTH / 4 / NT;
    static_assert(KT % 4 == 0 && (KT * S4D_CUDA_MLP_MAX_WIDTH / 4) % NT == 0, "whole float4 per thread");
};

/* Rows of the tile of W [k, n] that starts at row k0: KT, or what is left. */
template <int KT> __device__ __forceinline__ int tile_rows(int k, int k0) { return k - k0 < KT ? k - k0 : KT; }

/* Loads the tile at row k0 of W [k, n] into registers: as float4 (vec) or as floats, NT apart. */
template <int KT, int WT_VEC = Tile<KT>::VEC>
__device__ __forceinline__ void tile_fetch(const float *__restrict__ w, int n, int k, int k0, bool vec,
                                           float4 (&r)[WT_VEC])
{
    const int64_t base = (int64_t)k0 * n;
    const int count = tile_rows<KT>(k, k0) * n;
#pragma unroll
    for (int i = 0; i < WT_VEC; i++) {
        const int e = (threadIdx.x + i * NT) * 4; /* first element of this thread's i-th quad */
        if (vec) {
            r[i] = e < count ? __ldg(reinterpret_cast<const float4 *>(w + base + e)) : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            r[i].x = e < count ? __ldg(w + base + e) : 0.0f;
            r[i].y = e + 1 < count ? __ldg(w + base + e + 1) : 0.0f;
            r[i].z = e + 2 < count ? __ldg(w + base + e + 2) : 0.0f;
            r[i].w = e + 3 < count ? __ldg(w + base + e + 3) : 0.0f;
        }
    }
}

/* Stores the tile fetched at row k0 as wt[kk * n + c] (packed rows of n). */
template <int KT, int WT_VEC = Tile<KT>::VEC>
__device__ __forceinline__ void tile_store(float *wt, int n, int k, int k0, const float4 (&r)[WT_VEC])
{
    const int count = tile_rows<KT>(k, k0) * n;
#pragma unroll
    for (int i = 0; i < WT_VEC; i++) {
        const int e = (threadIdx.x + i * NT) * 4;
        if (e + 3 < count) {
            *reinterpret_cast<float4 *>(wt + e) = r[i];
        } else {
            if (e < count)
                wt[e] = r[i].x;
            if (e + 1 < count)
                wt[e + 1] = r[i].y;
            if (e + 2 < count)
                wt[e + 2] = r[i].z;
        }
    }
}

/* One layer: out[r][c] = act(in[r][:k] . w[:, c] + bias[c]) for the block's rows. Every thread of the
   block calls it (the tiles are loaded together); sums run in k order with FMA. */
template <int ROWS, int KT>
__device__ __forceinline__ void layer_product(const s4d_cuda_mlp_layer &L, const float (*in)[STRIDE],
                                              float (*out)[STRIDE], float *wt)
{
    constexpr int WT_VEC = Tile<KT>::VEC;
    const int n = L.n, k = L.k;
    const int room = NT / n < ROWS ? NT / n : ROWS;
    const int tpc = room >= 8 ? 8 : room >= 4 ? 4 : room >= 2 ? 2 : 1;
    const int nr = ROWS / tpc;
    const int t = threadIdx.x;
    const bool active = t < n * tpc;
    const int col = active ? t % n : 0, rg = active ? t / n : 0;
    const bool vec = n % 4 == 0 && (reinterpret_cast<uintptr_t>(L.w) & 15) == 0;
    float acc[ROWS];
#pragma unroll
    for (int j = 0; j < ROWS; j++)
        acc[j] = 0.0f;
    float4 next[WT_VEC];
    tile_fetch<KT>(L.w, n, k, 0, vec, next);
    for (int k0 = 0; k0 < k; k0 += KT) {
        const int kt = tile_rows<KT>(k, k0);
        __syncthreads(); /* the previous tile is no longer read */
        tile_store<KT>(wt, n, k, k0, next);
        __syncthreads();
        if (k0 + KT < k)
            tile_fetch<KT>(L.w, n, k, k0 + KT, vec, next);
        if (!active)
            continue;
        int q = 0;
        for (; q + 4 <= kt; q += 4) {
            const float w0 = wt[q * n + col], w1 = wt[(q + 1) * n + col];
            const float w2 = wt[(q + 2) * n + col], w3 = wt[(q + 3) * n + col];
#pragma unroll
            for (int j = 0; j < ROWS; j++) {
                if (j < nr) {
                    const float4 a = *reinterpret_cast<const float4 *>(&in[rg + j * tpc][k0 + q]);
                    acc[j] = fmaf(a.x, w0, acc[j]);
                    acc[j] = fmaf(a.y, w1, acc[j]);
                    acc[j] = fmaf(a.z, w2, acc[j]);
                    acc[j] = fmaf(a.w, w3, acc[j]);
                }
            }
        }
        for (; q < kt; q++) {
            const float wq = wt[q * n + col];
#pragma unroll
            for (int j = 0; j < ROWS; j++)
                if (j < nr)
                    acc[j] = fmaf(in[rg + j * tpc][k0 + q], wq, acc[j]);
        }
    }
    if (!active)
        return;
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

template <int ROWS, int KT>
__global__ void __launch_bounds__(NT)
    mlp_kernel(const __grid_constant__ s4d_cuda_mlp_desc d, const float *__restrict__ x, float *__restrict__ y)
{
    S4D_KERNEL_BEGIN();
    static_assert(ROWS <= WARPS, "one warp normalises one row");
    __shared__ __align__(16) float buf[2][ROWS][STRIDE];
    __shared__ __align__(16) float wt[KT * S4D_CUDA_MLP_MAX_WIDTH];
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
        layer_product<ROWS, KT>(L, buf[cur], buf[cur ^ 1], wt);
        __syncthreads();
        if (L.scale) {
            if ((int)(threadIdx.x / 32) < ROWS)
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
    if (d->rows < 0 || d->rows > INT32_MAX) {
        *why = "too many rows for one grid";
        return 0;
    }
    for (int l = 0; l < d->layers; l++) {
        const s4d_cuda_mlp_layer &L = d->layer[l];
        if (L.k < 1 || L.n < 1 || L.k > S4D_CUDA_MLP_MAX_WIDTH || L.n > S4D_CUDA_MLP_MAX_WIDTH ||
            (l > 0 && L.k != d->layer[l - 1].n)) {
            *why = "a layer is wider than the kernel's 256 columns";
            return 0;
        }
    }
    return 1;
}

extern "C" int s4d_cuda_mlp_preferred(const s4d_cuda_mlp_desc *d, const char **why)
{
    *why = "";
    int64_t largest = 0;
    for (int l = 0; l < d->layers && l < S4D_CUDA_MLP_MAX_LAYERS; l++)
        if ((int64_t)d->layer[l].k * d->layer[l].n > largest)
            largest = (int64_t)d->layer[l].k * d->layer[l].n;
    if (d->rows > S4D_CUDA_MLP_MANY_ROWS && largest > S4D_CUDA_MLP_MANY_ROWS_MAX_WEIGHTS) {
        *why = "many rows through a layer of more than 128 x 128 weights run faster as separate products";
        return 0;
    }
    return 1;
}

/* Rows per block: 8, unless the blocks of 8 rows would fill under half of the SMs; then 2, so
   that four times as many SMs stream W and each adds up a quarter of the rows (a head with a
   few hundred instances: tiny's 128 rows are 16 blocks of 8 or 64 of 2). S4D_CUDA_MLP_ROWS=8,
   2 or 1 in the environment forces one (to compare; 1 row per block, in tiles of 44 rows of W,
   only that way). */
namespace {
int rows_per_block(int64_t rows)
{
    static const int forced = [] {
        const char *e = getenv("S4D_CUDA_MLP_ROWS");
        return e && (!strcmp(e, "8") || !strcmp(e, "2") || !strcmp(e, "1")) ? atoi(e) : 0;
    }();
    if (forced)
        return forced;
    /* SMs per device, read once per device (a benign race: every writer stores the same). */
    static volatile int sms_of[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return 8;
    if (!sms_of[dev]) {
        int sms = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
            return 8;
        sms_of[dev] = sms;
    }
    return (rows + 7) / 8 < sms_of[dev] / 2 ? 2 : 8;
}

} // namespace

extern "C" cudaError_t s4d_cuda_mlp(const s4d_cuda_mlp_desc *d, const float *x, float *y, cudaStream_t stream)
{
    const char *why;
    if (!s4d_cuda_mlp_ok(d, &why))
        return cudaErrorInvalidValue;
    if (d->rows == 0)
        return cudaSuccess;
    cudaError_t e;
    const int r = rows_per_block(d->rows);
    if (r == 1)
        e = s4d_launch(mlp_kernel<1, 44>, dim3((unsigned)d->rows), dim3(NT), 0, stream, *d, x, y);
    else if (r == 2)
        e = s4d_launch(mlp_kernel<2, 40>, dim3((unsigned)((d->rows + 1) / 2)), dim3(NT), 0, stream, *d, x, y);
    else
        e = s4d_launch(mlp_kernel<8, 24>, dim3((unsigned)((d->rows + 7) / 8)), dim3(NT), 0, stream, *d, x, y);
    return e != cudaSuccess ? e : cudaGetLastError();
}
