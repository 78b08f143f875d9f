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
 * of KT x 256 floats (KT = 24 for 8 rows, 40 for 2), KT x 256 / n rows of W
 * each, that the whole block loads at once (below, before layer_product),
 * and the rows' inputs are read four k at a
 * time, so each W value feeds R / tpc FMAs. Sums run in k order with FMA:
 * the same bits on every run, whatever R and KT. With 2 rows per block,
 * where the chain's constants fit in shared memory, mlp_staged_kernel copies
 * all of them there at its start instead (below); its sums are the same.
 * Then bias and ReLU (NaN stays NaN), and the LayerNormalization: one warp
 * per row, mean and variance accumulated in double as the host's
 * LayerNormalization has them, the row normalised in float.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels/async_copy.cuh"
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
 * W reaches the block in tiles [th, n] of KT x 256 floats (th = KT x 256 / n
 * rows, a multiple of 4: a whole narrow layer is one tile), staged in shared memory by
 * all threads at once (float4 loads when n is a multiple of 4 and W is
 * 16-byte aligned), the next tile's loads in flight in registers while the
 * current one is multiplied. Each thread reading its own column of W from
 * global memory, as the kernel first did, left one load chain per thread
 * waiting on L2 (a block per SM or fewer: the cameras' 6 rows are one
 * block) and took 35-60 us per chain on the H200.
 */
/* float4 per thread per tile of KT x 256 floats (KT a multiple of 4). */
template <int KT> struct Tile {
    static constexpr int VEC = KT * S4D_CUDA_MLP_MAX_WIDTH / 4 / NT;
    static_assert(KT % 4 == 0 && (KT * S4D_CUDA_MLP_MAX_WIDTH / 4) % NT == 0, "whole float4 per thread");
};

/* Rows of W [k, n] per tile of the buffer of KT x 256 floats: a multiple of 4 (row runs of the
   inputs are read as float4 from the tile's first k on), at least KT. */
template <int KT> __device__ __forceinline__ int tile_height(int n) { return KT * S4D_CUDA_MLP_MAX_WIDTH / n & ~3; }

/* Rows of the tile of th rows of W [k, n] that starts at row k0: th, or what is left. */
__device__ __forceinline__ int tile_rows(int k, int k0, int th) { return k - k0 < th ? k - k0 : th; }

/* Loads the tile at row k0 of W [k, n] into registers: as float4 (vec) or as floats, NT apart. */
template <int KT, int WT_VEC = Tile<KT>::VEC>
__device__ __forceinline__ void tile_fetch(const float *__restrict__ w, int n, int k, int k0, int th, bool vec,
                                           float4 (&r)[WT_VEC])
{
    const int64_t base = (int64_t)k0 * n;
    const int count = tile_rows(k, k0, th) * n;
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
__device__ __forceinline__ void tile_store(float *wt, int n, int k, int k0, int th, const float4 (&r)[WT_VEC])
{
    const int count = tile_rows(k, k0, th) * n;
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

/* The block's rows row0 .. row0 + ROWS - 1 of X, the K_0 columns layer 0 reads (zeros past the
   last row). */
template <int ROWS>
__device__ __forceinline__ void load_rows(const s4d_cuda_mlp_desc &d, const float *__restrict__ x, int64_t row0,
                                          float (*rows)[STRIDE])
{
    const int k0 = d.layer[0].k;
    for (int i = threadIdx.x; i < ROWS * k0; i += NT) {
        const int r = i / k0, c = i % k0;
        const int64_t gr = row0 + r;
        rows[r][c] = gr < d.rows ? x[gr * d.x_cols + d.begin + c] : 0.0f;
    }
}

/* The block's rows of the last layer's output back to Y (rows past the last one dropped). */
template <int ROWS>
__device__ __forceinline__ void store_out(const s4d_cuda_mlp_desc &d, const float (*rows)[STRIDE], int64_t row0,
                                          float *__restrict__ y)
{
    const int n = d.layer[d.layers - 1].n;
    for (int i = threadIdx.x; i < ROWS * n; i += NT) {
        const int r = i / n, c = i % n;
        const int64_t gr = row0 + r;
        if (gr < d.rows)
            y[gr * n + c] = rows[r][c];
    }
}

/* One layer: out[r][c] = act(in[r][:k] . w[:, c] + bias[c]) for the block's rows, sums in k order
   with FMA. Tiled: W comes through wt in tiles of tile_height(n) rows that every thread of the
   block loads together (every thread calls it). Staged: wt holds all of W [k, n] and bias is in shared memory
   (no barrier inside). */
template <int ROWS, int KT, bool STAGED, int TPC>
__device__ __forceinline__ void layer_product_tpc(const s4d_cuda_mlp_layer &L, const float (*in)[STRIDE],
                                                  float (*out)[STRIDE], float *wt, const float *bias)
{
    constexpr int WT_VEC = Tile<KT>::VEC;
    constexpr int tpc = TPC, nr = ROWS / TPC;
    const int n = L.n, k = L.k;
    const int t = threadIdx.x;
    const bool active = t < n * tpc;
    const int col = active ? t % n : 0, rg = active ? t / n : 0;
    const bool vec = n % 4 == 0 && (reinterpret_cast<uintptr_t>(L.w) & 15) == 0;
    float acc[ROWS];
#pragma unroll
    for (int j = 0; j < ROWS; j++)
        acc[j] = 0.0f;
    float4 next[STAGED ? 1 : WT_VEC];
    const int th = STAGED ? k : tile_height<KT>(n);
    if (!STAGED)
        tile_fetch<KT>(L.w, n, k, 0, th, vec, next);
    for (int k0 = 0; k0 < k; k0 += th) {
        const int kt = STAGED ? k : tile_rows(k, k0, th);
        if (!STAGED) {
            __syncthreads(); /* the previous tile is no longer read */
            tile_store<KT>(wt, n, k, k0, th, next);
            __syncthreads();
            if (k0 + th < k)
                tile_fetch<KT>(L.w, n, k, k0 + th, th, vec, next);
        }
        if (!active)
            continue;
        int q = 0;
#pragma unroll 1
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
    const float b = STAGED ? (bias ? bias[col] : 0.0f) : (L.bias ? __ldg(L.bias + col) : 0.0f);
#pragma unroll
    for (int j = 0; j < ROWS; j++) {
        if (j < nr) {
            const float v = acc[j] + b;
            out[rg + j * tpc][col] = L.relu && v < 0.0f ? 0.0f : v;
        }
    }
}

/* Threads per column of a layer n wide with `rows` rows per block: 1, 2, 4 or 8, as many as NT / n
   and rows allow; each sums rows / tpc rows. */
__host__ __device__ __forceinline__ int threads_per_column(int n, int rows)
{
    const int room = NT / n < rows ? NT / n : rows;
    return room >= 8 ? 8 : room >= 4 ? 4 : room >= 2 ? 2 : 1;
}

/* One layer as above, for any width: tpc is a template argument of the product so that a thread's
   rows are a compile-time count (their loads and multiply-adds interleave instead of running row
   after row behind a branch each), chosen here at run time. */
template <int ROWS, int KT, bool STAGED>
__device__ __forceinline__ void layer_product(const s4d_cuda_mlp_layer &L, const float (*in)[STRIDE],
                                              float (*out)[STRIDE], float *wt, const float *bias)
{
    switch (threads_per_column(L.n, ROWS)) {
    case 8: layer_product_tpc<ROWS, KT, STAGED, (ROWS >= 8 ? 8 : 1)>(L, in, out, wt, bias); break;
    case 4: layer_product_tpc<ROWS, KT, STAGED, (ROWS >= 4 ? 4 : 1)>(L, in, out, wt, bias); break;
    case 2: layer_product_tpc<ROWS, KT, STAGED, (ROWS >= 2 ? 2 : 1)>(L, in, out, wt, bias); break;
    default: layer_product_tpc<ROWS, KT, STAGED, 1>(L, in, out, wt, bias); break;
    }
}

/* LayerNormalization of the block's row `warp` in place (L.n columns, L.eps), Scale and B (or
   NULL) read from global memory (GLOBAL) or from shared memory. (Passing n and eps by value
   instead of the layer took the tiled 8-row kernel from 64 to 76 registers with nvcc 13.0.) */
template <bool GLOBAL>
__device__ __forceinline__ void layer_norm_rows(const s4d_cuda_mlp_layer &L, const float *scale, const float *shift,
                                                float (*rows)[STRIDE])
{
    const int n = L.n;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
    /* Rounded step by step (no contraction into an FMA, which nvcc decides per kernel): the same
       bits in every kernel that normalises. */
    for (int c = lane; c < n; c += 32)
        row[c] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(row[c], m), is), GLOBAL ? __ldg(scale + c) : scale[c]),
                           shift ? (GLOBAL ? __ldg(shift + c) : shift[c]) : 0.0f);
}

/* TPC > 0: every layer of the chain has that many threads per column (one width, or widths that
   share it; uniform_tpc below), so only that product is compiled in. TPC = 0 takes any chain, at
   the cost of the registers of every product shape at once. */
template <int ROWS, int KT, int TPC>
__global__ void __launch_bounds__(NT)
    mlp_kernel(const __grid_constant__ s4d_cuda_mlp_desc d, const float *__restrict__ x, float *__restrict__ y)
{
    S4D_KERNEL_BEGIN();
    static_assert(ROWS <= WARPS, "one warp normalises one row");
    __shared__ __align__(16) float buf[2][ROWS][STRIDE];
    __shared__ __align__(16) float wt[KT * S4D_CUDA_MLP_MAX_WIDTH];
    const int64_t row0 = (int64_t)blockIdx.x * ROWS;
    load_rows<ROWS>(d, x, row0, buf[0]);
    __syncthreads();
    int cur = 0;
    for (int l = 0; l < d.layers; l++) {
        const s4d_cuda_mlp_layer &L = d.layer[l];
        if constexpr (TPC > 0)
            layer_product_tpc<ROWS, KT, false, TPC>(L, buf[cur], buf[cur ^ 1], wt, nullptr);
        else
            layer_product<ROWS, KT, false>(L, buf[cur], buf[cur ^ 1], wt, nullptr);
        __syncthreads();
        if (L.scale) {
            if ((int)(threadIdx.x / 32) < ROWS)
                layer_norm_rows<true>(L, L.scale, L.shift, buf[cur ^ 1]);
            __syncthreads();
        }
        cur ^= 1;
    }
    store_out<ROWS>(d, buf[cur], row0, y);
}

/*
 * The chain with all of its constants in shared memory. When the chain's weights, biases and
 * LayerNorm parameters fit beside the row buffers (the device's opt-in limit per block), every
 * thread issues its share of the copies (cp.async) for all layers at once, one group per layer,
 * before it waits for the kernel before it (S4D_KERNEL_BEGIN_CONSTANTS_FIRST: they are
 * constants of the engine). Layer l then waits only for its own group, so its parameters'
 * latency is paid once per chain, mostly while the previous kernel still runs, instead of once
 * per tile, bias and scale. The products read W straight from shared memory in the same k
 * order with FMA as the tiled kernel: the same bits.
 */

/* Floats of a segment rounded up to whole 16-byte units (each segment starts 16-byte aligned). */
__host__ __device__ __forceinline__ int seg4(int floats) { return (floats + 3) & ~3; }

/* Floats of shared memory the chain's constants take. */
__host__ __device__ __forceinline__ int64_t staged_param_floats(const s4d_cuda_mlp_desc &d)
{
    int64_t f = 0;
    for (int l = 0; l < d.layers; l++) {
        const s4d_cuda_mlp_layer &L = d.layer[l];
        f += seg4(L.k * L.n) + (L.bias ? seg4(L.n) : 0) + (L.scale ? seg4(L.n) : 0) + (L.shift ? seg4(L.n) : 0);
    }
    return f;
}

/* Issues the copies of count floats from src to dst (16-byte aligned) by all threads. */
__device__ __forceinline__ void stage_floats(float *dst, const float *src, int count)
{
    using namespace s4d_async;
    int head = 0;
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
        head = count & ~3;
        for (int i = threadIdx.x * 4; i < head; i += NT * 4)
            cp_async16(dst + i, src + i, 16);
    }
    for (int i = head + threadIdx.x; i < count; i += NT)
        cp_async4(dst + i, src + i, 4);
}

/* Waits until at most n (0 .. 7) of this thread's copy groups are in flight. */
__device__ __forceinline__ void wait_groups(int n)
{
    using namespace s4d_async;
    switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
    }
}

template <int ROWS>
__global__ void __launch_bounds__(NT)
    mlp_staged_kernel(const __grid_constant__ s4d_cuda_mlp_desc d, const float *__restrict__ x, float *__restrict__ y)
{
    S4D_KERNEL_BEGIN_CONSTANTS_FIRST();
    static_assert(ROWS <= WARPS, "one warp normalises one row");
    extern __shared__ __align__(16) float sm[];
    float(*buf)[ROWS][STRIDE] = reinterpret_cast<float(*)[ROWS][STRIDE]>(sm);
    float *params = sm + 2 * ROWS * STRIDE;
    /* 1. every layer's constants, one copy group per layer */
    {
        float *p = params;
        for (int l = 0; l < d.layers; l++) {
            const s4d_cuda_mlp_layer &L = d.layer[l];
            stage_floats(p, L.w, L.k * L.n);
            p += seg4(L.k * L.n);
            if (L.bias) {
                stage_floats(p, L.bias, L.n);
                p += seg4(L.n);
            }
            if (L.scale) {
                stage_floats(p, L.scale, L.n);
                p += seg4(L.n);
            }
            if (L.shift) {
                stage_floats(p, L.shift, L.n);
                p += seg4(L.n);
            }
            s4d_async::cp_async_commit();
        }
    }
    /* 2. the rows, once the kernel before this one is done with them */
    S4D_KERNEL_WAIT();
    const int64_t row0 = (int64_t)blockIdx.x * ROWS;
    load_rows<ROWS>(d, x, row0, buf[0]);
    int cur = 0;
    float *p = params;
    for (int l = 0; l < d.layers; l++) {
        const s4d_cuda_mlp_layer &L = d.layer[l];
        wait_groups(d.layers - 1 - l);
        __syncthreads(); /* layer l's constants and its input rows are there */
        float *w = p;
        p += seg4(L.k * L.n);
        const float *bias = L.bias ? p : nullptr;
        p += L.bias ? seg4(L.n) : 0;
        const float *scale = L.scale ? p : nullptr;
        p += L.scale ? seg4(L.n) : 0;
        const float *shift = L.shift ? p : nullptr;
        p += L.shift ? seg4(L.n) : 0;
        layer_product<ROWS, 4, true>(L, buf[cur], buf[cur ^ 1], w, bias);
        if (scale) {
            __syncthreads();
            if ((int)(threadIdx.x / 32) < ROWS)
                layer_norm_rows<false>(L, scale, shift, buf[cur ^ 1]);
        }
        cur ^= 1;
    }
    __syncthreads();
    store_out<ROWS>(d, buf[cur], row0, y);
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
   only that way).
   With 2 rows per block the chain's constants go through shared memory all at once where they
   fit (mlp_staged_kernel): the grid leaves SMs idle anyway, and the latency of each tile, bias
   and Scale is what the kernel waits on. With 8 rows per block the tiled kernel stays: a staged
   block of the v3 head's anchor encoder on 900 rows (up to 221 KB of shared memory) leaves one
   block per SM and keeps the graph's other branches off those SMs, and even the small chains
   staged made the v3 head slower (H100, 2026-12-06: 4.60 -> 4.64-4.67 ms) while the tiny
   head, all of whose chains take 2 rows per block, went from 0.717 to 0.631 ms.
   S4D_CUDA_MLP_STAGED=0 keeps the tiled kernel everywhere. */
namespace {

/* The current device's SM count and opt-in shared memory per block, read once per device (a
   benign race: every writer stores the same); 0 when unknown. */
void device_limits(int *sms, int *optin)
{
    static volatile int sms_of[64], optin_of[64];
    *sms = *optin = 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return;
    if (!sms_of[dev]) {
        int a = 0, b = 0;
        if (cudaDeviceGetAttribute(&a, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || a < 1 ||
            cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
            return;
        optin_of[dev] = b;
        sms_of[dev] = a;
    }
    *sms = sms_of[dev];
    *optin = optin_of[dev];
}

int rows_per_block(int64_t rows, int sms)
{
    static const int forced = [] {
        const char *e = getenv("S4D_CUDA_MLP_ROWS");
        return e && (!strcmp(e, "8") || !strcmp(e, "2") || !strcmp(e, "1")) ? atoi(e) : 0;
    }();
    if (forced)
        return forced;
    if (sms < 1)
        return 8;
    return (rows + 7) / 8 < sms / 2 ? 2 : 8;
}

bool staged_allowed()
{
    static const bool on = [] {
        const char *e = getenv("S4D_CUDA_MLP_STAGED");
        return !(e && !strcmp(e, "0"));
    }();
    return on;
}

template <int ROWS>
cudaError_t launch_staged(const s4d_cuda_mlp_desc *d, size_t bytes, const float *x, float *y, cudaStream_t stream)
{
    cudaError_t e = cudaFuncSetAttribute(mlp_staged_kernel<ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess)
        return e;
    return s4d_launch(mlp_staged_kernel<ROWS>, dim3((unsigned)((d->rows + ROWS - 1) / ROWS)), dim3(NT), bytes, stream,
                      *d, x, y);
}

/* Threads per column shared by every layer of the chain at `rows` rows per block, 0 if they
   differ. */
int uniform_tpc(const s4d_cuda_mlp_desc *d, int rows)
{
    const int t = threads_per_column(d->layer[0].n, rows);
    for (int l = 1; l < d->layers; l++)
        if (threads_per_column(d->layer[l].n, rows) != t)
            return 0;
    return t;
}

/* 8 rows per block, tiled: the kernel with the chain's one product shape where it has one. */
cudaError_t launch_tiled8(const s4d_cuda_mlp_desc *d, const float *x, float *y, cudaStream_t stream)
{
    const dim3 grid((unsigned)((d->rows + 7) / 8));
    switch (uniform_tpc(d, 8)) {
    case 8: return s4d_launch(mlp_kernel<8, 24, 8>, grid, dim3(NT), 0, stream, *d, x, y);
    case 4: return s4d_launch(mlp_kernel<8, 24, 4>, grid, dim3(NT), 0, stream, *d, x, y);
    case 2: return s4d_launch(mlp_kernel<8, 24, 2>, grid, dim3(NT), 0, stream, *d, x, y);
    case 1: return s4d_launch(mlp_kernel<8, 24, 1>, grid, dim3(NT), 0, stream, *d, x, y);
    default: return s4d_launch(mlp_kernel<8, 24, 0>, grid, dim3(NT), 0, stream, *d, x, y);
    }
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
    int sms, optin;
    device_limits(&sms, &optin);
    const int r = rows_per_block(d->rows, sms);
    const size_t staged = sizeof(float) * (size_t)(2 * r * STRIDE + staged_param_floats(*d));
    if (r == 2 && staged_allowed() && staged <= (size_t)optin)
        e = launch_staged<2>(d, staged, x, y, stream);
    else if (r == 1)
        e = s4d_launch(mlp_kernel<1, 44, 0>, dim3((unsigned)d->rows), dim3(NT), 0, stream, *d, x, y);
    else if (r == 2)
        e = s4d_launch(mlp_kernel<2, 40, 0>, dim3((unsigned)((d->rows + 1) / 2)), dim3(NT), 0, stream, *d, x, y);
    else
        e = launch_tiled8(d, x, y, stream);
    return e != cudaSuccess ? e : cudaGetLastError();
}
