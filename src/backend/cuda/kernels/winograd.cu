// The transforms of the Winograd convolution F(4x4, 3x3) (see dense.h): the
// filter's once at prepare, the input's and the output's around the 36
// products on every run, with the CPU backend's transforms (backend/winograd4.h).
//
// Layouts. A tile is a 4 x 4 block of the output; tile p = (n * th + ty) * tw + tx
// of `tiles` in all. V [36][c][tiles], U [36][m][c] and M [36][m][tiles], so
// that M[xi] = U[xi] V[xi] is one strided batch of row-major products. A
// thread owns one (channel, tile): consecutive threads take consecutive tiles,
// so the 36 stores (or loads) of V and M are coalesced. No atomics: every
// element is written by one thread, the same bits on every run.
//
// Host build: with S4D_EW_HOST_BUILD defined, a host C++ compiler builds the
// same kernels into functions that the launchers run over an emulated grid on
// host memory (tests/cuda/test_winograd_host.cpp checks them against a direct
// float64 convolution on a machine without a GPU).
#include <stdint.h>

#include "backend/cuda/kernels/dense.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/winograd4.h"

#if defined(S4D_EW_HOST_BUILD)
#if defined(__CUDACC__)
#error "S4D_EW_HOST_BUILD is for host C++ compilers"
#endif
#define WINO_BOUNDS
#define WINO_UNROLL
#define WINO_LDG(p) (*(p))
#else
#define WINO_BOUNDS __launch_bounds__(kThreads)
#define WINO_UNROLL _Pragma("unroll")
#define WINO_LDG(p) __ldg(p)
#endif

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;

#if defined(S4D_EW_HOST_BUILD)
struct EmuDim {
    unsigned x;
};
EmuDim blockIdx, threadIdx, blockDim, gridDim;
#endif

// kernel<<<blocks, kThreads>>>(args...) on stream; the host build runs every thread in turn.
template <class... P, class... A>
cudaError_t launch_grid(void (*kernel)(P...), int64_t blocks, cudaStream_t stream, A... args)
{
#if defined(S4D_EW_HOST_BUILD)
    (void)stream;
    gridDim.x = (unsigned)blocks;
    blockDim.x = kThreads;
    for (int64_t b = 0; b < blocks; b++)
        for (int t = 0; t < kThreads; t++) {
            blockIdx.x = (unsigned)b;
            threadIdx.x = (unsigned)t;
            kernel(args...);
        }
    return cudaSuccess;
#else
    s4d_launch(kernel, dim3((unsigned)blocks), dim3(kThreads), 0, stream, args...);
    return cudaGetLastError();
#endif
}

inline int64_t blocks_for(int64_t n)
{
    int64_t b = (n + kThreads - 1) / kThreads;
    return b < kMaxBlocks ? b : kMaxBlocks;
}

// Thread item i of a [rows][tiles] layout: its row (channel) and its tile's image and position.
struct Item {
    int64_t row, n, ty, tx;
};

__device__ __forceinline__ Item item_of(int64_t i, int64_t tiles, int64_t th, int64_t tw)
{
    Item it;
    it.row = i / tiles;
    const int64_t p = i - it.row * tiles;
    it.n = p / (th * tw);
    const int64_t r = p - it.n * (th * tw);
    it.ty = r / tw;
    it.tx = r - it.ty * tw;
    return it;
}

// U[xi][k][c] = (G g G^T)[xi] for g = w[k][c] (3 x 3), in double, rounded once.
__global__ void WINO_BOUNDS wino_filter_kernel(const float *__restrict__ w, float *__restrict__ u,
                                                               int64_t mc)
{
    S4D_KERNEL_BEGIN();
    const double G[6][3] = S4D_WINO4_G;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < mc; i += step) {
        double g[9];
        for (int j = 0; j < 9; j++)
            g[j] = (double)w[i * 9 + j];
        double t[6][3]; // G g
        for (int a = 0; a < 6; a++)
            for (int q = 0; q < 3; q++)
                t[a][q] = G[a][0] * g[0 * 3 + q] + G[a][1] * g[1 * 3 + q] + G[a][2] * g[2 * 3 + q];
        for (int a = 0; a < 6; a++)
            for (int b = 0; b < 6; b++)
                u[(int64_t)(a * 6 + b) * mc + i] = (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
    }
}

// V[xi][c][p] = (B^T d B)[xi] for the 6 x 6 patch d of plane (n, c) at the tile's origin (zeros outside).
__global__ void WINO_BOUNDS wino_input_kernel(const float *__restrict__ x, float *__restrict__ v,
                                                              int64_t channels, int64_t h, int64_t w, int64_t th,
                                                              int64_t tw, int64_t tiles, int64_t pad_t,
                                                              int64_t pad_l)
{
    S4D_KERNEL_BEGIN();
    const int64_t total = channels * tiles, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const Item it = item_of(i, tiles, th, tw);
        const int64_t c = it.row, n = it.n, ty = it.ty, tx = it.tx;
        const float *xp = x + (n * channels + c) * h * w;
        const int64_t y0 = ty * 4 - pad_t, x0 = tx * 4 - pad_l;
        float d[36], e[36];
WINO_UNROLL
        for (int a = 0; a < 6; a++) {
            const int64_t iy = y0 + a;
            const bool row = iy >= 0 && iy < h;
WINO_UNROLL
            for (int b = 0; b < 6; b++) {
                const int64_t ix = x0 + b;
                d[a * 6 + b] = row && ix >= 0 && ix < w ? WINO_LDG(xp + iy * w + ix) : 0.0f;
            }
        }
WINO_UNROLL
        for (int b = 0; b < 6; b++) // down each column, then along each row
            s4d_wino4_bt(d + b, 6, e + b, 6);
WINO_UNROLL
        for (int a = 0; a < 6; a++)
            s4d_wino4_bt(e + a * 6, 1, d + a * 6, 1);
WINO_UNROLL
        for (int j = 0; j < 36; j++)
            v[(int64_t)j * total + i] = d[j];
    }
}

// Y's 4 x 4 tile = A^T M A (+ bias, + z, ReLU), clipped to the output's ho x wo.
// z may alias y (each element is read, then written, by one thread).
template <bool HasBias, bool HasZ, bool Relu>
__global__ void WINO_BOUNDS wino_output_kernel(const float *__restrict__ mm, float *y,
                                                               const float *__restrict__ bias, const float *z,
                                                               int64_t channels,
                                                               int64_t ho, int64_t wo, int64_t th, int64_t tw,
                                                               int64_t tiles, bool vec)
{
    S4D_KERNEL_BEGIN();
    const int64_t total = channels * tiles, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const Item it = item_of(i, tiles, th, tw);
        const int64_t k = it.row, n = it.n, ty = it.ty, tx = it.tx;
        float s[36], t[24], o[16];
WINO_UNROLL
        for (int j = 0; j < 36; j++)
            s[j] = mm[(int64_t)j * total + i];
WINO_UNROLL
        for (int b = 0; b < 6; b++) // t [4][6] = A^T s, then o [4][4] = t A
            s4d_wino4_at(s + b, 6, t + b, 6);
WINO_UNROLL
        for (int a = 0; a < 4; a++)
            s4d_wino4_at(t + a * 6, 1, o + a * 4, 1);
        const float bk = HasBias ? WINO_LDG(bias + k) : 0.0f;
        const int64_t plane = (n * channels + k) * ho * wo;
WINO_UNROLL
        for (int a = 0; a < 4; a++) {
            const int64_t oy = ty * 4 + a;
            if (oy >= ho)
                break;
            if (vec) { // the row's 4 outputs as one 16-byte store (and load of z)
                const int64_t at = plane + oy * wo + tx * 4;
                float4 val = make_float4(o[a * 4], o[a * 4 + 1], o[a * 4 + 2], o[a * 4 + 3]);
                if (HasBias) {
                    val.x += bk;
                    val.y += bk;
                    val.z += bk;
                    val.w += bk;
                }
                if (HasZ) {
                    const float4 zz = *reinterpret_cast<const float4 *>(z + at);
                    val.x += zz.x;
                    val.y += zz.y;
                    val.z += zz.z;
                    val.w += zz.w;
                }
                if (Relu) {
                    val.x = (val.x > 0.0f || val.x != val.x) ? val.x : 0.0f; // NaN stays NaN
                    val.y = (val.y > 0.0f || val.y != val.y) ? val.y : 0.0f;
                    val.z = (val.z > 0.0f || val.z != val.z) ? val.z : 0.0f;
                    val.w = (val.w > 0.0f || val.w != val.w) ? val.w : 0.0f;
                }
                *reinterpret_cast<float4 *>(y + at) = val;
                continue;
            }
WINO_UNROLL
            for (int b = 0; b < 4; b++) {
                const int64_t ox = tx * 4 + b;
                if (ox >= wo)
                    break;
                const int64_t at = plane + oy * wo + ox;
                float val = o[a * 4 + b];
                if (HasBias)
                    val += bk;
                if (HasZ)
                    val += z[at];
                if (Relu)
                    val = (val > 0.0f || val != val) ? val : 0.0f; // NaN stays NaN
                y[at] = val;
            }
        }
    }
}

template <bool HasBias, bool HasZ, bool Relu>
cudaError_t launch_output(const float *m, float *y, const float *bias, const float *z, int64_t channels, int64_t ho,
                          int64_t wo, int64_t th, int64_t tw, int64_t tiles, cudaStream_t stream)
{
    // wo % 4 == 0: every tile is whole along the rows, and each tile row starts on a 16-byte boundary.
    const bool vec = wo % 4 == 0 && ((uintptr_t)y & 15) == 0 && (!z || ((uintptr_t)z & 15) == 0);
    return launch_grid(wino_output_kernel<HasBias, HasZ, Relu>, blocks_for(channels * tiles), stream, m, y, bias, z,
                       channels, ho, wo, th, tw, tiles, vec);
}

} // namespace

extern "C" cudaError_t s4d_cuda_wino_filter_f32(const float *w, float *u, int64_t m, int64_t c, cudaStream_t stream)
{
    if (m <= 0 || c <= 0)
        return cudaSuccess;
    return launch_grid(wino_filter_kernel, blocks_for(m * c), stream, w, u, m * c);
}

extern "C" cudaError_t s4d_cuda_wino_input_f32(const float *x, float *v, const s4d_cuda_wino_geom *g,
                                               cudaStream_t stream)
{
    const int64_t tiles = g->n * g->th * g->tw;
    if (tiles <= 0 || g->c <= 0)
        return cudaSuccess;
    return launch_grid(wino_input_kernel, blocks_for(g->c * tiles), stream, x, v, g->c, g->h, g->w, g->th, g->tw,
                       tiles, g->pad_t, g->pad_l);
}

extern "C" cudaError_t s4d_cuda_wino_output_f32(const float *mm, float *y, const float *bias, const float *z,
                                                int relu, const s4d_cuda_wino_geom *g, cudaStream_t stream)
{
    const int64_t tiles = g->n * g->th * g->tw;
    if (tiles <= 0 || g->m <= 0)
        return cudaSuccess;
    const int key = (bias ? 4 : 0) | (z ? 2 : 0) | (relu ? 1 : 0);
    const int64_t m = g->m, ho = g->ho, wo = g->wo, th = g->th, tw = g->tw;
    switch (key) {
    case 0: return launch_output<false, false, false>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    case 1: return launch_output<false, false, true>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    case 2: return launch_output<false, true, false>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    case 3: return launch_output<false, true, true>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    case 4: return launch_output<true, false, false>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    case 5: return launch_output<true, false, true>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    case 6: return launch_output<true, true, false>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    default: return launch_output<true, true, true>(mm, y, bias, z, m, ho, wo, th, tw, tiles, stream);
    }
}
