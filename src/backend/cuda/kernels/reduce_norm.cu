/*
 * Softmax / LogSoftmax, LayerNormalization and BatchNormalization (inference)
 * on CUDA (see reduce.h).
 *
 * Softmax and LayerNorm rows up to 2048 values (1024 for float64) live in
 * registers: a group of lanes per row (as few as the row needs, up to a
 * warp), each lane holding NCH vectors, so x is read once and written once.
 * Longer rows take a block each and read x again for each pass (from L2).
 * Softmax over a strided axis (inner > 1) gives a block a tile of up to 32
 * neighbouring columns and splits the axis between the block's threads, so a
 * warp reads whole 32- to 128-byte runs. Statistics are float (double for
 * float64 softmax); LayerNorm's variance is two-pass over the cached values.
 * The reductions are fixed trees: results are bitwise reproducible.
 */
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/reduce_common.cuh"

using namespace s4d_red;

namespace {

/* Values per vector in the register-cached row kernels: 16 bytes of float, 8 of half, 16 of double. */
template <typename T> __host__ __device__ constexpr int row_vec() { return sizeof(T) == 8 ? 2 : 4; }

/* Most vectors a lane caches (a row of 32 * kMaxNch * row_vec values fits a warp's registers). */
constexpr int kMaxNch = 16;

struct Plus {
    template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MaxNan {
    template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return max_nan(a, b); }
};

/* ---- Softmax ---- */

template <typename T, int NCH>
__global__ void __launch_bounds__(kThreads)
softmax_rows(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t n, int G, int log_out)
{
    S4D_KERNEL_BEGIN();
    using A = typename Elem<T>::A;
    constexpr int V = row_vec<T>();
    const int gpb = kThreads / G;
    const int64_t row = (int64_t)blockIdx.x * gpb + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const bool valid = row < rows;
    const T *px = x + (valid ? row : 0) * n;
    T *py = y + (valid ? row : 0) * n;
    const bool vec = aligned_to(px, V * sizeof(T)) && aligned_to(py, V * sizeof(T));
    A v[NCH][V];
    A mx = neg_inf<A>();
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int64_t e0 = (int64_t)(lane + c * G) * V;
        if (valid && vec && e0 + V <= n) {
            T t[V];
            load_vec<T, V>(px + e0, t);
#pragma unroll
            for (int j = 0; j < V; j++)
                v[c][j] = Elem<T>::load(t[j]);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                v[c][j] = valid && e0 + j < n ? Elem<T>::load(px[e0 + j]) : neg_inf<A>();
        }
#pragma unroll
        for (int j = 0; j < V; j++)
            mx = max_nan(mx, v[c][j]);
    }
    mx = group_reduce(mx, G, MaxNan());
    A sum = 0;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int64_t e0 = (int64_t)(lane + c * G) * V;
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (e0 + j < n) {
                A e = exp_a(v[c][j] - mx);
                sum += e;
                if (!log_out)
                    v[c][j] = e;
            }
        }
    }
    sum = group_reduce(sum, G, Plus());
    if (!valid)
        return;
    const A ls = log_out ? log_a(sum) : (A)0, inv = log_out ? (A)0 : (A)1 / sum;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int64_t e0 = (int64_t)(lane + c * G) * V;
        T t[V];
#pragma unroll
        for (int j = 0; j < V; j++)
            t[j] = Elem<T>::store(log_out ? (v[c][j] - mx) - ls : v[c][j] * inv);
        if (vec && e0 + V <= n) {
            store_vec<T, V>(py + e0, t);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                if (e0 + j < n)
                    py[e0 + j] = t[j];
        }
    }
}

/* A block per row, for rows too long for registers: three passes over x. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_rows_block(const T *__restrict__ x, T *__restrict__ y, int64_t n, int log_out)
{
    S4D_KERNEL_BEGIN();
    using A = typename Elem<T>::A;
    __shared__ A sm[33];
    const T *px = x + (int64_t)blockIdx.x * n;
    T *py = y + (int64_t)blockIdx.x * n;
    A mx = neg_inf<A>();
    for (int64_t k = threadIdx.x; k < n; k += kThreads)
        mx = max_nan(mx, Elem<T>::load(px[k]));
    mx = block_reduce(mx, neg_inf<A>(), MaxNan(), sm);
    A sum = 0;
    for (int64_t k = threadIdx.x; k < n; k += kThreads)
        sum += exp_a(Elem<T>::load(px[k]) - mx);
    sum = block_reduce(sum, (A)0, Plus(), sm);
    const A ls = log_out ? log_a(sum) : (A)0, inv = log_out ? (A)0 : (A)1 / sum;
    for (int64_t k = threadIdx.x; k < n; k += kThreads) {
        A d = Elem<T>::load(px[k]) - mx;
        py[k] = Elem<T>::store(log_out ? d - ls : exp_a(d) * inv);
    }
}

/*
 * Strided axis: block = one outer index x a tile of TI columns (TI a power of
 * two <= 32); its S = kThreads / TI thread rows split the axis round robin.
 * The S partial results of a column meet in shared memory in row order.
 */
template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_cols(const T *__restrict__ x, T *__restrict__ y, int64_t n, int64_t inner, int TI, int64_t tiles,
             int log_out)
{
    S4D_KERNEL_BEGIN();
    using A = typename Elem<T>::A;
    __shared__ A part[kThreads];
    __shared__ A col[32];
    const int S = kThreads / TI, tx = threadIdx.x % TI, s = threadIdx.x / TI;
    const int64_t o = blockIdx.x / tiles, tile = blockIdx.x - o * tiles;
    const int64_t i = tile * TI + tx;
    const bool valid = i < inner;
    const int64_t base = o * n * inner + (valid ? i : 0);
    const T *px = x + base;
    T *py = y + base;

    A mx = neg_inf<A>();
    if (valid)
        for (int64_t k = s; k < n; k += S)
            mx = max_nan(mx, Elem<T>::load(__ldg(px + k * inner)));
    part[threadIdx.x] = mx;
    __syncthreads();
    if (s == 0) {
        for (int r = 1; r < S; r++)
            mx = max_nan(mx, part[r * TI + tx]);
        col[tx] = mx;
    }
    __syncthreads();
    mx = col[tx];

    A sum = 0;
    if (valid)
        for (int64_t k = s; k < n; k += S)
            sum += exp_a(Elem<T>::load(__ldg(px + k * inner)) - mx);
    __syncthreads(); /* everyone has read col[] and part[] */
    part[threadIdx.x] = sum;
    __syncthreads();
    if (s == 0) {
        for (int r = 1; r < S; r++)
            sum += part[r * TI + tx];
        col[tx] = sum;
    }
    __syncthreads();
    sum = col[tx];
    if (!valid)
        return;
    const A ls = log_out ? log_a(sum) : (A)0, inv = log_out ? (A)0 : (A)1 / sum;
    for (int64_t k = s; k < n; k += S) {
        A d = Elem<T>::load(px[k * inner]) - mx;
        py[k * inner] = Elem<T>::store(log_out ? d - ls : exp_a(d) * inv);
    }
}

template <typename T, int NCH>
void launch_softmax_rows(const T *x, T *y, int64_t rows, int64_t n, int G, int log_out, cudaStream_t s)
{
    const int64_t blocks = ceil_div(rows, kThreads / G);
    s4d_launch(softmax_rows<T, NCH>, (unsigned)blocks, kThreads, 0, s, x, y, rows, n, G, log_out);
}

template <typename T>
cudaError_t softmax_typed(int log_out, int64_t outer, int64_t n, int64_t inner, const void *xv, void *yv,
                          cudaStream_t s)
{
    const T *x = static_cast<const T *>(xv);
    T *y = static_cast<T *>(yv);
    constexpr int V = row_vec<T>();
    if (inner == 1) {
        const int64_t rows = outer, nv = ceil_div(n, V);
        if (nv > 32 * kMaxNch) {
            if (rows > INT32_MAX)
                return cudaErrorInvalidValue;
            s4d_launch(softmax_rows_block<T>, (unsigned)rows, kThreads, 0, s, x, y, n, log_out);
            return cudaGetLastError();
        }
        const int G = nv <= 32 ? pow2_at_least(nv) : 32;
        const int nch = nv <= 32 ? 1 : pow2_at_least(ceil_div(nv, 32));
        if (ceil_div(rows, kThreads / G) > INT32_MAX)
            return cudaErrorInvalidValue;
        switch (nch) {
        case 1: launch_softmax_rows<T, 1>(x, y, rows, n, G, log_out, s); break;
        case 2: launch_softmax_rows<T, 2>(x, y, rows, n, G, log_out, s); break;
        case 4: launch_softmax_rows<T, 4>(x, y, rows, n, G, log_out, s); break;
        case 8: launch_softmax_rows<T, 8>(x, y, rows, n, G, log_out, s); break;
        case 16: launch_softmax_rows<T, 16>(x, y, rows, n, G, log_out, s); break;
        default: return cudaErrorInvalidValue;
        }
        return cudaGetLastError();
    }
    const int TI = inner >= 32 ? 32 : pow2_at_least(inner);
    const int64_t tiles = ceil_div(inner, TI), blocks = outer * tiles;
    if (blocks > INT32_MAX)
        return cudaErrorInvalidValue;
    s4d_launch(softmax_cols<T>, (unsigned)blocks, kThreads, 0, s, x, y, n, inner, TI, tiles, log_out);
    return cudaGetLastError();
}

/* ---- LayerNormalization ---- */

/* (x - mean) * rstd * scale + bias rounded step by step, as the host reference does (no FMA). */
__device__ __forceinline__ float ln_out(float v, float m, float rs, float sc, float b)
{
    return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v, m), rs), sc), b);
}

/* T: float, or __half storage (statistics and output math in float, the output rounded once). */
template <typename T, int NCH>
__global__ void __launch_bounds__(kThreads)
ln_rows(const T *__restrict__ x, const T *__restrict__ sc, const T *__restrict__ bi,
        T *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd, int64_t rows, int64_t cols,
        float eps, int G)
{
    S4D_KERNEL_BEGIN();
    constexpr int V = 4;
    const int gpb = kThreads / G;
    const int64_t row = (int64_t)blockIdx.x * gpb + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const bool valid = row < rows;
    const T *px = x + (valid ? row : 0) * cols;
    T *py = y + (valid ? row : 0) * cols;
    constexpr size_t VB = V * sizeof(T); /* bytes of one vector: 16 (float) or 8 (half) */
    const bool vec = aligned_to(px, VB) && aligned_to(py, VB) && aligned_to(sc, VB) &&
                     (!bi || aligned_to(bi, VB));
    float v[NCH][V];
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int64_t e0 = (int64_t)(lane + c * G) * V;
        if (valid && vec && e0 + V <= cols) {
            T raw[V];
            load_vec<T, V>(px + e0, raw);
#pragma unroll
            for (int j = 0; j < V; j++)
                v[c][j] = Elem<T>::load(raw[j]);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                v[c][j] = valid && e0 + j < cols ? Elem<T>::load(px[e0 + j]) : 0.f;
        }
#pragma unroll
        for (int j = 0; j < V; j++)
            sum += v[c][j];
    }
    sum = group_reduce(sum, G, Plus());
    const float m = cols > 0 ? sum / (float)cols : 0.f;
    float sq = 0.f;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int64_t e0 = (int64_t)(lane + c * G) * V;
#pragma unroll
        for (int j = 0; j < V; j++) {
            float d = v[c][j] - m;
            sq += e0 + j < cols ? d * d : 0.f;
        }
    }
    sq = group_reduce(sq, G, Plus());
    if (!valid)
        return;
    const float var = cols > 0 ? sq / (float)cols : 0.f;
    const float rs = 1.0f / sqrtf(var + eps);
    if (lane == 0) {
        if (mean)
            mean[row] = m;
        if (rstd)
            rstd[row] = rs;
    }
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int64_t e0 = (int64_t)(lane + c * G) * V;
        if (vec && e0 + V <= cols) {
            T s4[V], b4[V], o4[V];
            load_vec<T, V>(sc + e0, s4);
            if (bi)
                load_vec<T, V>(bi + e0, b4);
#pragma unroll
            for (int j = 0; j < V; j++)
                o4[j] = Elem<T>::store(
                    ln_out(v[c][j], m, rs, Elem<T>::load(s4[j]), bi ? Elem<T>::load(b4[j]) : 0.f));
            store_vec<T, V>(py + e0, o4);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                if (e0 + j < cols)
                    py[e0 + j] = Elem<T>::store(ln_out(v[c][j], m, rs, Elem<T>::load(__ldg(sc + e0 + j)),
                                                       bi ? Elem<T>::load(__ldg(bi + e0 + j)) : 0.f));
        }
    }
}

/* A block per row for long rows: sum, squared deviations, output, each a pass over x. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
ln_rows_block(const T *__restrict__ x, const T *__restrict__ sc, const T *__restrict__ bi,
              T *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd, int64_t cols, float eps)
{
    S4D_KERNEL_BEGIN();
    __shared__ float sm[33];
    const int64_t row = blockIdx.x;
    const T *px = x + row * cols;
    T *py = y + row * cols;
    float sum = 0.f;
    for (int64_t k = threadIdx.x; k < cols; k += kThreads)
        sum += Elem<T>::load(px[k]);
    sum = block_reduce(sum, 0.f, Plus(), sm);
    const float m = sum / (float)cols;
    float sq = 0.f;
    for (int64_t k = threadIdx.x; k < cols; k += kThreads) {
        float d = Elem<T>::load(px[k]) - m;
        sq += d * d;
    }
    sq = block_reduce(sq, 0.f, Plus(), sm);
    const float rs = 1.0f / sqrtf(sq / (float)cols + eps);
    if (threadIdx.x == 0) {
        if (mean)
            mean[row] = m;
        if (rstd)
            rstd[row] = rs;
    }
    for (int64_t k = threadIdx.x; k < cols; k += kThreads)
        py[k] = Elem<T>::store(ln_out(Elem<T>::load(px[k]), m, rs, Elem<T>::load(sc[k]),
                                      bi ? Elem<T>::load(bi[k]) : 0.f));
}

struct Dims8 {
    int64_t d[S4D_CUDA_RED_MAX_RANK];
};

/* A broadcast Scale or B expanded to cols dense values. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
ln_expand(const T *__restrict__ src, T *__restrict__ dst, int64_t cols, int nrank, Dims8 dims, Dims8 str)
{
    S4D_KERNEL_BEGIN();
    int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (i >= cols)
        return;
    int64_t off = 0, r = i;
    for (int d = nrank - 1; d >= 0; d--) {
        int64_t q = r / dims.d[d];
        off += (r - q * dims.d[d]) * str.d[d];
        r = q;
    }
    dst[i] = src[off];
}

template <typename T, int NCH>
void launch_ln_rows(const s4d_cuda_ln_args *a, const T *x, const T *sc, const T *bi, T *y,
                    float *mean, float *rstd, int G, cudaStream_t s)
{
    const int64_t blocks = ceil_div(a->rows, kThreads / G);
    s4d_launch(ln_rows<T, NCH>, (unsigned)blocks, kThreads, 0,
               s, x, sc, bi, y, mean, rstd, a->rows, a->cols, a->epsilon, G);
}

/* ---- BatchNormalization ---- */

/* y = x * a + b per channel with a and b rounded exactly as the host reference rounds them. */
__device__ __forceinline__ void bn_coeffs(const float *scale, const float *bias, const float *mean,
                                          const float *var, int64_t ch, float eps, float *a, float *b)
{
    *a = __fdiv_rn(__ldg(scale + ch), __fsqrt_rn(__fadd_rn(__ldg(var + ch), eps)));
    *b = __fsub_rn(__ldg(bias + ch), __fmul_rn(__ldg(mean + ch), *a));
}

constexpr int64_t kBnSeg = (int64_t)kThreads * 4 * 8; /* values per block: 8 float4 per thread */

/* Planes of >= kThreads values: blocks own segments of one plane (one division per block). */
__global__ void __launch_bounds__(kThreads)
bn_planes(const float *__restrict__ x, const float *__restrict__ scale, const float *__restrict__ bias,
          const float *__restrict__ mean, const float *__restrict__ var, float *__restrict__ y, int64_t c,
          int64_t plane, int64_t segs, float eps)
{
    S4D_KERNEL_BEGIN();
    const int64_t p = blockIdx.x / segs, seg = blockIdx.x - p * segs;
    float a, b;
    bn_coeffs(scale, bias, mean, var, p % c, eps, &a, &b);
    const int64_t start = seg * kBnSeg, end = start + kBnSeg < plane ? start + kBnSeg : plane;
    const float *px = x + p * plane;
    float *py = y + p * plane;
    if ((plane & 3) == 0 && aligned_to(x, 16) && aligned_to(y, 16)) {
        for (int64_t i = start + 4 * (int64_t)threadIdx.x; i < end; i += 4 * kThreads) {
            float4 v = __ldg(reinterpret_cast<const float4 *>(px + i));
            v.x = __fadd_rn(__fmul_rn(v.x, a), b);
            v.y = __fadd_rn(__fmul_rn(v.y, a), b);
            v.z = __fadd_rn(__fmul_rn(v.z, a), b);
            v.w = __fadd_rn(__fmul_rn(v.w, a), b);
            *reinterpret_cast<float4 *>(py + i) = v;
        }
    } else {
        for (int64_t i = start + threadIdx.x; i < end; i += kThreads)
            py[i] = __fadd_rn(__fmul_rn(__ldg(px + i), a), b);
    }
}

/* Small planes (e.g. [N, C] inputs): one thread per value. */
__global__ void __launch_bounds__(kThreads)
bn_flat(const float *__restrict__ x, const float *__restrict__ scale, const float *__restrict__ bias,
        const float *__restrict__ mean, const float *__restrict__ var, float *__restrict__ y, int64_t c,
        int64_t plane, int64_t total, float eps)
{
    S4D_KERNEL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (i >= total)
        return;
    float a, b;
    bn_coeffs(scale, bias, mean, var, (i / plane) % c, eps, &a, &b);
    y[i] = __fadd_rn(__fmul_rn(__ldg(x + i), a), b);
}

} /* namespace */

extern "C" cudaError_t s4d_cuda_softmax(int log_out, s4d_dtype dt, int64_t outer, int64_t n, int64_t inner,
                                        const void *x, void *y, cudaStream_t stream)
{
    if (outer <= 0 || n <= 0 || inner <= 0)
        return cudaSuccess;
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return softmax_typed<float>(log_out, outer, n, inner, x, y, stream);
    case S4D_DTYPE_FLOAT16: return softmax_typed<__half>(log_out, outer, n, inner, x, y, stream);
    case S4D_DTYPE_FLOAT64: return softmax_typed<double>(log_out, outer, n, inner, x, y, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" size_t s4d_cuda_layernorm_workspace(const s4d_cuda_ln_args *a)
{
    size_t one = ((size_t)a->cols * sizeof(float) + 255) & ~(size_t)255;
    return (a->scale_dense ? 0 : one) + (a->bias_dense ? 0 : one);
}

namespace {

template <typename T>
cudaError_t layernorm_typed(const s4d_cuda_ln_args *a, const T *x, const T *scale, const T *bias, T *y,
                            float *mean, float *inv_std, void *ws, size_t ws_size, cudaStream_t s)
{
    if (a->rows <= 0)
        return cudaSuccess;
    if (ws_size < s4d_cuda_layernorm_workspace(a) || a->nrank > S4D_CUDA_RED_MAX_RANK)
        return cudaErrorInvalidValue;
    char *w = static_cast<char *>(ws);
    const size_t one = ((size_t)a->cols * sizeof(float) + 255) & ~(size_t)255;
    for (int t = 0; t < 2; t++) {
        const T *src = t == 0 ? scale : bias;
        if (!src || (t == 0 ? a->scale_dense : a->bias_dense) || a->cols == 0)
            continue;
        Dims8 dims, str;
        memset(&dims, 0, sizeof dims);
        memset(&str, 0, sizeof str);
        for (int d = 0; d < a->nrank; d++) {
            dims.d[d] = a->ndims[d];
            str.d[d] = t == 0 ? a->s_str[d] : a->b_str[d];
        }
        T *dst = reinterpret_cast<T *>(w);
        w += one;
        s4d_launch(ln_expand<T>, (unsigned)ceil_div(a->cols, kThreads), kThreads, 0, s,
                   src, dst, a->cols, a->nrank, dims,
                                                                                 str);
        if (t == 0)
            scale = dst;
        else
            bias = dst;
    }
    if (a->cols == 0) {
        /* No values to normalise: only the statistics (mean 0, 1 / sqrt(eps)) remain. */
        const int G = 1;
        launch_ln_rows<T, 1>(a, x, scale, bias, y, mean, inv_std, G, s);
        return cudaGetLastError();
    }
    const int64_t nv = ceil_div(a->cols, 4);
    if (nv > 32 * kMaxNch) {
        if (a->rows > INT32_MAX)
            return cudaErrorInvalidValue;
        s4d_launch(ln_rows_block<T>, (unsigned)a->rows, kThreads, 0, s, x, scale, bias, y, mean, inv_std, a->cols,
                                                                a->epsilon);
        return cudaGetLastError();
    }
    const int G = nv <= 32 ? pow2_at_least(nv) : 32;
    const int nch = nv <= 32 ? 1 : pow2_at_least(ceil_div(nv, 32));
    if (ceil_div(a->rows, kThreads / G) > INT32_MAX)
        return cudaErrorInvalidValue;
    switch (nch) {
    case 1: launch_ln_rows<T, 1>(a, x, scale, bias, y, mean, inv_std, G, s); break;
    case 2: launch_ln_rows<T, 2>(a, x, scale, bias, y, mean, inv_std, G, s); break;
    case 4: launch_ln_rows<T, 4>(a, x, scale, bias, y, mean, inv_std, G, s); break;
    case 8: launch_ln_rows<T, 8>(a, x, scale, bias, y, mean, inv_std, G, s); break;
    case 16: launch_ln_rows<T, 16>(a, x, scale, bias, y, mean, inv_std, G, s); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

} /* namespace */

extern "C" cudaError_t s4d_cuda_layernorm(const s4d_cuda_ln_args *a, const void *x, const void *scale,
                                          const void *bias, void *y, float *mean, float *inv_std, void *ws,
                                          size_t ws_size, cudaStream_t s)
{
    if (a->half)
        return layernorm_typed<__half>(a, static_cast<const __half *>(x), static_cast<const __half *>(scale),
                                       static_cast<const __half *>(bias), static_cast<__half *>(y), mean, inv_std,
                                       ws, ws_size, s);
    return layernorm_typed<float>(a, static_cast<const float *>(x), static_cast<const float *>(scale),
                                  static_cast<const float *>(bias), static_cast<float *>(y), mean, inv_std, ws,
                                  ws_size, s);
}

extern "C" cudaError_t s4d_cuda_batchnorm(int64_t n, int64_t c, int64_t plane, float epsilon, const float *x,
                                          const float *scale, const float *bias, const float *mean,
                                          const float *var, float *y, cudaStream_t s)
{
    const int64_t planes = n * c, total = planes * plane;
    if (total <= 0)
        return cudaSuccess;
    if (plane >= kThreads) {
        const int64_t segs = ceil_div(plane, kBnSeg), blocks = planes * segs;
        if (blocks > INT32_MAX)
            return cudaErrorInvalidValue;
        s4d_launch(bn_planes, (unsigned)blocks, kThreads, 0, s, x, scale, bias, mean, var, y, c, plane, segs, epsilon);
    } else {
        const int64_t blocks = ceil_div(total, kThreads);
        if (blocks > INT32_MAX)
            return cudaErrorInvalidValue;
        s4d_launch(bn_flat, (unsigned)blocks, kThreads, 0, s, x, scale, bias, mean, var, y, c, plane, total, epsilon);
    }
    return cudaGetLastError();
}
