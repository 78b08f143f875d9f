/*
 * Reduce* and ArgMax/ArgMin on CUDA (see reduce.h).
 *
 * Two layouts cover every geometry:
 *   rows    the reduced elements of an output are one contiguous run (a
 *           reduction over trailing dims): a group of lanes per output (2 to
 *           32 lanes, or the whole block for long runs) reads the run with
 *           16-byte loads; lanes take 16-byte chunks round robin.
 *   columns anything else, typically a reduction over leading or middle dims
 *           with the innermost dim kept: one thread per output, neighbouring
 *           threads on neighbouring outputs (coalesced), the reduced range
 *           optionally cut into 8 slices per block that meet in shared memory.
 * When the outputs are too few to fill the GPU, the reduced range is also cut
 * into P partial results (grid y) that a second kernel combines in order.
 * Every choice depends on the shapes only, so the order of the arithmetic is
 * fixed and results are bitwise reproducible; there are no atomics.
 *
 * Floating inputs accumulate in float (double for float64); integers in
 * int64 with wrap-around, as the host reference does. ReduceLogSumExp is two
 * passes: a max into the workspace, then sum(exp(x - max)).
 */
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/reduce_common.cuh"

using namespace s4d_red;

namespace {

enum { OP_SUM, OP_SUMSQ, OP_ABSSUM, OP_PROD, OP_MAX, OP_MIN, OP_SUMEXP };

/* The geometry as a kernel argument. */
struct Geo {
    int nk, nr;
    int64_t kdims[S4D_CUDA_RED_MAX_RANK], kst[S4D_CUDA_RED_MAX_RANK];
    int64_t rdims[S4D_CUDA_RED_MAX_RANK], rst[S4D_CUDA_RED_MAX_RANK];
    int64_t nout, nred;
};

/* How an output is written: the op's result in the element type, or the raw accumulator. */
struct Final {
    int kind;           /* S4D_CUDA_RED_* */
    int raw;            /* store the accumulator itself (A) */
    int64_t nred;
    const void *shift;  /* OP_SUMEXP: the per-output max (A) */
};

__device__ __forceinline__ int64_t kept_offset(const Geo &g, int64_t o)
{
    int64_t off = 0;
    for (int d = g.nk - 1; d >= 0; d--) {
        int64_t q = o / g.kdims[d];
        off += (o - q * g.kdims[d]) * g.kst[d];
        o = q;
    }
    return off;
}

/* Offset of row `row` of the reduced dims other than the innermost one. */
__device__ __forceinline__ int64_t reduced_row_offset(const Geo &g, int64_t row)
{
    int64_t off = 0;
    for (int d = g.nr - 2; d >= 0; d--) {
        int64_t q = row / g.rdims[d];
        off += (row - q * g.rdims[d]) * g.rst[d];
        row = q;
    }
    return off;
}

/* ---- the ops: identity, combination, per-element term ---- */

template <typename A> constexpr bool is_int_v = std::is_integral<A>::value;

template <int OP, typename A> __device__ __forceinline__ A op_identity()
{
    if constexpr (OP == OP_PROD) {
        return (A)1;
    } else if constexpr (OP == OP_MAX) {
        if constexpr (is_int_v<A>)
            return (A)INT64_MIN;
        else
            return neg_inf<A>();
    } else if constexpr (OP == OP_MIN) {
        if constexpr (is_int_v<A>)
            return (A)INT64_MAX;
        else
            return -neg_inf<A>();
    } else {
        return (A)0;
    }
}

template <int OP, typename A> __device__ __forceinline__ A op_combine(A a, A b)
{
    if constexpr (OP == OP_MAX)
        return max_nan(a, b);
    else if constexpr (OP == OP_MIN)
        return min_nan(a, b);
    else if constexpr (OP == OP_PROD) {
        if constexpr (is_int_v<A>)
            return (A)((uint64_t)a * (uint64_t)b);
        else
            return a * b;
    } else {
        if constexpr (is_int_v<A>)
            return (A)((uint64_t)a + (uint64_t)b);
        else
            return a + b;
    }
}

template <int OP, typename A> __device__ __forceinline__ A op_term(A v, A shift)
{
    if constexpr (OP == OP_SUMSQ) {
        if constexpr (is_int_v<A>)
            return (A)((uint64_t)v * (uint64_t)v);
        else
            return v * v;
    } else if constexpr (OP == OP_ABSSUM) {
        if constexpr (is_int_v<A>)
            return v < 0 ? (A)(0 - (uint64_t)v) : v;
        else
            return v < 0 ? -v : v;
    } else if constexpr (OP == OP_SUMEXP) {
        if constexpr (is_int_v<A>)
            return v;
        else
            return exp_a(v - shift);
    } else {
        return v;
    }
}

template <typename T, int OP>
__device__ __forceinline__ void store_final(void *y, int64_t o, typename Elem<T>::A acc, const Final &f)
{
    using A = typename Elem<T>::A;
    if (f.raw) {
        static_cast<A *>(y)[o] = acc;
        return;
    }
    A r = acc;
    if constexpr (is_int_v<A>) {
        switch (f.kind) {
        case S4D_CUDA_RED_MEAN: r = f.nred ? acc / f.nred : 0; break;
        case S4D_CUDA_RED_L2: r = (int64_t)sqrt((double)acc); break;
        case S4D_CUDA_RED_MAX:
            if (f.nred == 0) /* the lowest value of the type, as the host stores it */
                r = sizeof(T) == 4 ? (int64_t)INT32_MIN : INT64_MIN;
            break;
        case S4D_CUDA_RED_MIN:
            if (f.nred == 0)
                r = sizeof(T) == 4 ? (int64_t)INT32_MAX : INT64_MAX;
            break;
        default: break;
        }
    } else {
        switch (f.kind) {
        case S4D_CUDA_RED_MEAN: r = acc / (A)f.nred; break; /* 0/0 = NaN for an empty set */
        case S4D_CUDA_RED_L2: r = sqrt_a(acc); break;
        case S4D_CUDA_RED_LOG_SUM: r = log_a(acc); break;
        case S4D_CUDA_RED_LOG_SUM_EXP: {
            A mx = static_cast<const A *>(f.shift)[o];
            /* An infinite or NaN max is the answer itself (+inf, NaN; -inf: all -inf or empty). */
            r = (mx != mx || mx == -neg_inf<A>() || mx == neg_inf<A>()) ? mx : mx + log_a(acc);
            break;
        }
        default: break;
        }
    }
    static_cast<T *>(y)[o] = Elem<T>::store(r);
}

/* ---- rows: the reduced elements of each output are contiguous ---- */

/*
 * Outputs in groups of G lanes (G <= 32: kThreads / G outputs per block; G =
 * kThreads: one output per block). Lane l takes the 16-byte chunks l, l + G,
 * ... of its partial's chunk range; a chunk is loaded as one vector when the
 * row is aligned, element by element otherwise, in the same order either way.
 */
template <typename T, int OP>
__global__ void __launch_bounds__(kThreads)
red_rows(Geo g, const T *__restrict__ x, void *__restrict__ y, typename Elem<T>::A *__restrict__ part,
         int G, int64_t chunks_per_part, Final f)
{
    S4D_KERNEL_BEGIN();
    using A = typename Elem<T>::A;
    constexpr int V = vec_of<T>();
    const int gpb = kThreads / G;
    const int64_t o = (int64_t)blockIdx.x * gpb + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const int64_t p = blockIdx.y;
    const bool valid = o < g.nout;
    A acc = op_identity<OP, A>();
    if (valid) {
        const int64_t n0 = g.rdims[0];
        const int64_t nch = (n0 + V - 1) / V;
        const int64_t c0 = p * chunks_per_part;
        const int64_t c1 = c0 + chunks_per_part < nch ? c0 + chunks_per_part : nch;
        const T *px = x + kept_offset(g, o);
        const bool vec = aligned16(px);
        A shift = (A)0;
        if constexpr (OP == OP_SUMEXP)
            shift = static_cast<const A *>(f.shift)[o];
#pragma unroll 2
        for (int64_t c = c0 + lane; c < c1; c += G) {
            const int64_t e0 = c * V;
            if (vec && e0 + V <= n0) {
                T v[V];
                load16(px + e0, v);
#pragma unroll
                for (int t = 0; t < V; t++)
                    acc = op_combine<OP, A>(acc, op_term<OP, A>(Elem<T>::load(v[t]), shift));
            } else {
                for (int t = 0; t < V && e0 + t < n0; t++)
                    acc = op_combine<OP, A>(acc, op_term<OP, A>(Elem<T>::load(px[e0 + t]), shift));
            }
        }
    }
    auto comb = [](A a, A b) { return op_combine<OP, A>(a, b); };
    if (G <= 32) {
        acc = group_reduce(acc, G, comb);
    } else {
        __shared__ A sm[33];
        acc = block_reduce(acc, op_identity<OP, A>(), comb, sm);
    }
    if (lane != 0 || !valid)
        return;
    if (gridDim.y == 1)
        store_final<T, OP>(y, o, acc, f);
    else
        part[p * g.nout + o] = acc;
}

/* ---- columns: one thread per output, any geometry ---- */

/*
 * Block (BX, BY), BX * BY = kThreads: thread x is an output, thread y a slice
 * of the partial's reduced range. The range is walked row by row of the
 * innermost reduced dim, so the only divisions are per row.
 */
template <typename T, int OP>
__global__ void __launch_bounds__(kThreads)
red_cols(Geo g, const T *__restrict__ x, void *__restrict__ y, typename Elem<T>::A *__restrict__ part,
         int64_t per_part, Final f)
{
    S4D_KERNEL_BEGIN();
    using A = typename Elem<T>::A;
    const int BX = blockDim.x, BY = blockDim.y;
    const int64_t o = (int64_t)blockIdx.x * BX + threadIdx.x;
    const int64_t p = blockIdx.y;
    const bool valid = o < g.nout;
    A acc = op_identity<OP, A>();
    if (valid) {
        const int64_t r0 = p * per_part;
        const int64_t r1 = r0 + per_part < g.nred ? r0 + per_part : g.nred;
        const int64_t len = r1 > r0 ? r1 - r0 : 0;
        const int64_t per_slice = (len + BY - 1) / BY;
        int64_t s0 = r0 + threadIdx.y * per_slice;
        const int64_t s1 = s0 + per_slice < r1 ? s0 + per_slice : r1;
        const T *px = x + kept_offset(g, o);
        A shift = (A)0;
        if constexpr (OP == OP_SUMEXP)
            shift = static_cast<const A *>(f.shift)[o];
        if (g.nr == 0) {
            if (s0 < s1)
                acc = op_combine<OP, A>(acc, op_term<OP, A>(Elem<T>::load(px[0]), shift));
        } else {
            const int64_t n_in = g.rdims[g.nr - 1], s_in = g.rst[g.nr - 1];
            while (s0 < s1) {
                const int64_t row = s0 / n_in, col = s0 - row * n_in;
                const int64_t cnt = n_in - col < s1 - s0 ? n_in - col : s1 - s0;
                const T *q = px + reduced_row_offset(g, row) + col * s_in;
                for (int64_t t = 0; t < cnt; t++, q += s_in)
                    acc = op_combine<OP, A>(acc, op_term<OP, A>(Elem<T>::load(__ldg(q)), shift));
                s0 += cnt;
            }
        }
    }
    if (BY > 1) {
        __shared__ A sm[kThreads];
        sm[threadIdx.y * BX + threadIdx.x] = acc;
        __syncthreads();
        if (threadIdx.y != 0)
            return;
        for (int s = 1; s < BY; s++)
            acc = op_combine<OP, A>(acc, sm[s * BX + threadIdx.x]);
    }
    if (!valid)
        return;
    if (gridDim.y == 1)
        store_final<T, OP>(y, o, acc, f);
    else
        part[p * g.nout + o] = acc;
}

/* The P partial results of each output, combined in partial order. */
template <typename T, int OP>
__global__ void __launch_bounds__(kThreads)
red_combine(const typename Elem<T>::A *__restrict__ part, int64_t P, int64_t nout, void *__restrict__ y,
            Final f)
{
    S4D_KERNEL_BEGIN();
    using A = typename Elem<T>::A;
    const int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= nout)
        return;
    A acc = part[o];
    for (int64_t p = 1; p < P; p++)
        acc = op_combine<OP, A>(acc, part[p * nout + o]);
    store_final<T, OP>(y, o, acc, f);
}

/* ---- planning (host): the same answer for workspace() and run ---- */

struct Plan {
    bool rows;
    int G;               /* rows: lanes per output */
    int BY;              /* columns: slices per block */
    int64_t blocks;      /* grid x */
    int64_t P;           /* partials (grid y) */
    int64_t per_part;    /* rows: chunks per partial; columns: reduced elements per partial */
};

Plan make_plan(const s4d_cuda_red_geom *g, size_t esize)
{
    Plan pl = {};
    pl.P = 1;
    const int64_t nout = g->nout, nred = g->nred;
    if (g->nr == 1 && g->rst[0] == 1 && nred > 0) {
        const int64_t V = (int64_t)(16 / esize);
        const int64_t nch = ceil_div(g->rdims[0], V);
        pl.rows = true;
        if (nch <= 32)
            pl.G = pow2_at_least(nch);
        else if (nch <= 256)
            pl.G = 32;
        else
            pl.G = kThreads;
        pl.blocks = ceil_div(nout, kThreads / pl.G);
        /* Few outputs with long runs: split each run, keeping >= 4 chunks per lane. */
        if (pl.blocks < kTargetBlocks) {
            int64_t want = ceil_div(kTargetBlocks, pl.blocks), most = nch / (4 * (int64_t)pl.G);
            int64_t P = want < most ? want : most;
            pl.P = P < 1 ? 1 : P > 4096 ? 4096 : P;
        }
        pl.per_part = ceil_div(nch, pl.P);
        pl.P = ceil_div(nch, pl.per_part);
        return pl;
    }
    pl.rows = false;
    pl.BY = (nout >= 16384 || nred < 64) ? 1 : 8;
    pl.blocks = ceil_div(nout, kThreads / pl.BY);
    if (pl.blocks < kTargetBlocks && nred >= 2 * 64 * (int64_t)pl.BY) {
        int64_t want = ceil_div(kTargetBlocks, pl.blocks), most = nred / (64 * (int64_t)pl.BY);
        int64_t P = want < most ? want : most;
        pl.P = P < 1 ? 1 : P > 4096 ? 4096 : P;
    }
    pl.per_part = nred > 0 ? ceil_div(nred, pl.P) : 0;
    pl.P = nred > 0 ? ceil_div(nred, pl.per_part) : 1;
    return pl;
}

Geo to_geo(const s4d_cuda_red_geom *g)
{
    Geo k;
    memset(&k, 0, sizeof k);
    k.nk = g->nk;
    k.nr = g->nr;
    for (int d = 0; d < S4D_CUDA_RED_MAX_RANK; d++) {
        k.kdims[d] = g->kdims[d];
        k.kst[d] = g->kst[d];
        k.rdims[d] = g->rdims[d];
        k.rst[d] = g->rst[d];
    }
    k.nout = g->nout;
    k.nred = g->nred;
    return k;
}

size_t align256(size_t v)
{
    return (v + 255) & ~(size_t)255;
}

/* One reduction pass: the planned kernel(s) writing y through f. */
template <typename T, int OP>
cudaError_t run_pass(const Plan &pl, const Geo &geo, const T *x, void *y, const Final &f,
                     typename Elem<T>::A *part, cudaStream_t s)
{
    if (pl.blocks > INT32_MAX || pl.P > 65535)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)pl.blocks, (unsigned)pl.P);
    if (pl.rows)
        s4d_launch(red_rows<T, OP>, grid, kThreads, 0, s, geo, x, y, part, pl.G, pl.per_part, f);
    else
        s4d_launch(red_cols<T, OP>, grid, dim3(kThreads / pl.BY, pl.BY), 0, s, geo, x, y, part, pl.per_part, f);
    if (pl.P > 1) {
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
        s4d_launch(red_combine<T, OP>, (unsigned)ceil_div(geo.nout, kThreads), kThreads, 0, s, part, pl.P, geo.nout,
                                                                                       y, f);
    }
    return cudaGetLastError();
}

template <typename T>
cudaError_t reduce_typed(int kind, const s4d_cuda_red_geom *g, const void *xv, void *y, void *ws,
                         size_t ws_size, cudaStream_t s)
{
    using A = typename Elem<T>::A;
    (void)ws_size; /* checked by the caller */
    const T *x = static_cast<const T *>(xv);
    const Plan pl = make_plan(g, sizeof(T));
    const Geo geo = to_geo(g);
    const bool lse = kind == S4D_CUDA_RED_LOG_SUM_EXP && !is_int_v<A>;
    char *w = static_cast<char *>(ws);
    A *shift = nullptr, *part = nullptr;
    if (lse) {
        shift = reinterpret_cast<A *>(w);
        w += align256(sizeof(A) * (size_t)g->nout);
    }
    if (pl.P > 1)
        part = reinterpret_cast<A *>(w);
    Final f = {kind, 0, g->nred, nullptr};
    switch (kind) {
    case S4D_CUDA_RED_SUM:
    case S4D_CUDA_RED_MEAN:
    case S4D_CUDA_RED_LOG_SUM: return run_pass<T, OP_SUM>(pl, geo, x, y, f, part, s);
    case S4D_CUDA_RED_SUM_SQUARE:
    case S4D_CUDA_RED_L2: return run_pass<T, OP_SUMSQ>(pl, geo, x, y, f, part, s);
    case S4D_CUDA_RED_L1: return run_pass<T, OP_ABSSUM>(pl, geo, x, y, f, part, s);
    case S4D_CUDA_RED_PROD: return run_pass<T, OP_PROD>(pl, geo, x, y, f, part, s);
    case S4D_CUDA_RED_MAX: return run_pass<T, OP_MAX>(pl, geo, x, y, f, part, s);
    case S4D_CUDA_RED_MIN: return run_pass<T, OP_MIN>(pl, geo, x, y, f, part, s);
    case S4D_CUDA_RED_LOG_SUM_EXP: {
        if (!lse) /* integers: the host reference sums them */
            return run_pass<T, OP_SUM>(pl, geo, x, y, f, part, s);
        Final fmax = {S4D_CUDA_RED_MAX, 1, g->nred, nullptr};
        cudaError_t e = run_pass<T, OP_MAX>(pl, geo, x, shift, fmax, part, s);
        if (e != cudaSuccess)
            return e;
        f.shift = shift;
        return run_pass<T, OP_SUMEXP>(pl, geo, x, y, f, part, s);
    }
    default: return cudaErrorInvalidValue;
    }
}

/* ---- ArgMax / ArgMin ---- */

/* What values compare as: float for the 16/32-bit floats, double otherwise (the
   host orders int64 as double, so ties beyond 2^53 resolve the same way). */
template <typename T> struct ArgKey { using K = double; };
template <> struct ArgKey<float> { using K = float; };
template <> struct ArgKey<__half> { using K = float; };
template <> struct ArgKey<__nv_bfloat16> { using K = float; };

template <typename T> __device__ __forceinline__ typename ArgKey<T>::K arg_key(T v)
{
    if constexpr (std::is_same<T, __half>::value)
        return __half2float(v);
    else if constexpr (std::is_same<T, __nv_bfloat16>::value)
        return __bfloat162float(v);
    else
        return (typename ArgKey<T>::K)v;
}

template <typename K> struct Best {
    K v;
    int64_t i; /* -1: nothing yet */
};

template <typename K> __device__ __forceinline__ Best<K> shfl_xor(Best<K> b, int mask, int width)
{
    Best<K> r;
    r.v = __shfl_xor_sync(0xffffffffu, b.v, mask, width);
    r.i = __shfl_xor_sync(0xffffffffu, b.i, mask, width);
    return r;
}

/* b over a: strictly better value, or an equal value at the preferred index. Both
   are NaN-free candidates, so the choice is a total order and the grouping free. */
template <typename K>
__device__ __forceinline__ Best<K> arg_combine(Best<K> a, Best<K> b, bool arg_min, bool last)
{
    if (b.i < 0)
        return a;
    if (a.i < 0)
        return b;
    bool better = arg_min ? b.v < a.v : b.v > a.v;
    if (!better && b.v == a.v)
        better = last ? b.i > a.i : b.i < a.i;
    return better ? b : a;
}

template <typename K> __device__ __forceinline__ Best<K> arg_take(Best<K> a, K v, int64_t i, bool arg_min, bool last)
{
    if (v != v)
        return a;
    return arg_combine(a, Best<K>{v, i}, arg_min, last);
}

/* Contiguous axis: a group of G lanes per output, lane l on elements l, l + G, ... */
template <typename T>
__global__ void __launch_bounds__(kThreads)
arg_rows(Geo g, const T *__restrict__ x, int64_t *__restrict__ y, int G, int arg_min, int last)
{
    S4D_KERNEL_BEGIN();
    using K = typename ArgKey<T>::K;
    const int gpb = kThreads / G;
    const int64_t o = (int64_t)blockIdx.x * gpb + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const bool valid = o < g.nout;
    Best<K> b = {(K)0, -1};
    const T *px = nullptr;
    if (valid) {
        const int64_t n = g.rdims[0];
        px = x + kept_offset(g, o);
        for (int64_t k = lane; k < n; k += G)
            b = arg_take(b, arg_key(__ldg(px + k)), k, arg_min, last);
    }
    auto comb = [arg_min, last](Best<K> a, Best<K> c) { return arg_combine(a, c, arg_min, last); };
    if (G <= 32) {
        b = group_reduce(b, G, comb);
    } else {
        __shared__ Best<K> sm[33];
        b = block_reduce(b, Best<K>{(K)0, -1}, comb, sm);
    }
    if (lane != 0 || !valid)
        return;
    /* The host keeps the first element when it is NaN: nothing compares above it. */
    K first = arg_key(px[0]);
    y[o] = (first != first || b.i < 0) ? 0 : b.i;
}

/* Strided axis: one thread per output, BY slices of the axis per block. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
arg_cols(Geo g, const T *__restrict__ x, int64_t *__restrict__ y, int arg_min, int last)
{
    S4D_KERNEL_BEGIN();
    using K = typename ArgKey<T>::K;
    const int BX = blockDim.x, BY = blockDim.y;
    const int64_t o = (int64_t)blockIdx.x * BX + threadIdx.x;
    const bool valid = o < g.nout;
    Best<K> b = {(K)0, -1};
    const T *px = nullptr;
    if (valid) {
        const int64_t n = g.rdims[0], st = g.rst[0];
        const int64_t per = (n + BY - 1) / BY;
        const int64_t k0 = threadIdx.y * per, k1 = k0 + per < n ? k0 + per : n;
        px = x + kept_offset(g, o);
        for (int64_t k = k0; k < k1; k++)
            b = arg_take(b, arg_key(__ldg(px + k * st)), k, arg_min, last);
    }
    if (BY > 1) {
        __shared__ K sv[kThreads];
        __shared__ int64_t si[kThreads];
        sv[threadIdx.y * BX + threadIdx.x] = b.v;
        si[threadIdx.y * BX + threadIdx.x] = b.i;
        __syncthreads();
        if (threadIdx.y != 0)
            return;
        for (int s = 1; s < BY; s++)
            b = arg_combine(b, Best<K>{sv[s * BX + threadIdx.x], si[s * BX + threadIdx.x]}, arg_min != 0,
                            last != 0);
    }
    if (!valid)
        return;
    K first = arg_key(px[0]);
    y[o] = (first != first || b.i < 0) ? 0 : b.i;
}

template <typename T>
cudaError_t arg_typed(int arg_min, int last, const s4d_cuda_red_geom *g, const void *xv, int64_t *y,
                      cudaStream_t s)
{
    const T *x = static_cast<const T *>(xv);
    const Geo geo = to_geo(g);
    const int64_t n = g->rdims[0];
    if (g->rst[0] == 1) {
        int G = n <= 32 ? pow2_at_least(n) : n <= 1024 ? 32 : kThreads;
        int64_t blocks = ceil_div(g->nout, kThreads / G);
        if (blocks > INT32_MAX)
            return cudaErrorInvalidValue;
        s4d_launch(arg_rows<T>, (unsigned)blocks, kThreads, 0, s, geo, x, y, G, arg_min, last);
    } else {
        int BY = (g->nout >= 16384 || n < 64) ? 1 : 8;
        int64_t blocks = ceil_div(g->nout, kThreads / BY);
        if (blocks > INT32_MAX)
            return cudaErrorInvalidValue;
        s4d_launch(arg_cols<T>, (unsigned)blocks, dim3(kThreads / BY, BY), 0, s, geo, x, y, arg_min, last);
    }
    return cudaGetLastError();
}

} /* namespace */

extern "C" int s4d_cuda_reduce_dtype_ok(s4d_dtype dt)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32:
    case S4D_DTYPE_FLOAT16:
    case S4D_DTYPE_BFLOAT16:
    case S4D_DTYPE_FLOAT64:
    case S4D_DTYPE_INT32:
    case S4D_DTYPE_INT64: return 1;
    default: return 0;
    }
}

extern "C" int s4d_cuda_arg_dtype_ok(s4d_dtype dt)
{
    return s4d_cuda_reduce_dtype_ok(dt);
}

extern "C" size_t s4d_cuda_reduce_workspace(int kind, s4d_dtype dt, const s4d_cuda_red_geom *g)
{
    if (!s4d_cuda_reduce_dtype_ok(dt) || g->nout <= 0)
        return 0;
    const size_t esize = s4d_dtype_size(dt);
    const size_t asize = dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16 || dt == S4D_DTYPE_BFLOAT16 ? 4 : 8;
    const bool is_float = dt != S4D_DTYPE_INT32 && dt != S4D_DTYPE_INT64;
    const Plan pl = make_plan(g, esize);
    size_t bytes = 0;
    if (kind == S4D_CUDA_RED_LOG_SUM_EXP && is_float)
        bytes += align256(asize * (size_t)g->nout);
    if (pl.P > 1)
        bytes += align256(asize * (size_t)g->nout * (size_t)pl.P);
    return bytes;
}

extern "C" cudaError_t s4d_cuda_reduce(int kind, s4d_dtype dt, const s4d_cuda_red_geom *g, const void *x,
                                       void *y, void *ws, size_t ws_size, cudaStream_t stream)
{
    if (g->nout <= 0)
        return cudaSuccess;
    if (ws_size < s4d_cuda_reduce_workspace(kind, dt, g))
        return cudaErrorInvalidValue;
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return reduce_typed<float>(kind, g, x, y, ws, ws_size, stream);
    case S4D_DTYPE_FLOAT16: return reduce_typed<__half>(kind, g, x, y, ws, ws_size, stream);
    case S4D_DTYPE_BFLOAT16: return reduce_typed<__nv_bfloat16>(kind, g, x, y, ws, ws_size, stream);
    case S4D_DTYPE_FLOAT64: return reduce_typed<double>(kind, g, x, y, ws, ws_size, stream);
    case S4D_DTYPE_INT32: return reduce_typed<int32_t>(kind, g, x, y, ws, ws_size, stream);
    case S4D_DTYPE_INT64: return reduce_typed<int64_t>(kind, g, x, y, ws, ws_size, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t s4d_cuda_arg(int arg_min, int select_last, s4d_dtype dt, const s4d_cuda_red_geom *g,
                                    const void *x, int64_t *y, cudaStream_t stream)
{
    if (g->nout <= 0)
        return cudaSuccess;
    if (g->nr > 1)
        return cudaErrorInvalidValue;
    if (g->nr == 0) /* an axis of size 1: every index is 0 */
        return cudaMemsetAsync(y, 0, sizeof(int64_t) * (size_t)g->nout, stream);
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return arg_typed<float>(arg_min, select_last, g, x, y, stream);
    case S4D_DTYPE_FLOAT16: return arg_typed<__half>(arg_min, select_last, g, x, y, stream);
    case S4D_DTYPE_BFLOAT16: return arg_typed<__nv_bfloat16>(arg_min, select_last, g, x, y, stream);
    case S4D_DTYPE_FLOAT64: return arg_typed<double>(arg_min, select_last, g, x, y, stream);
    case S4D_DTYPE_INT32: return arg_typed<int32_t>(arg_min, select_last, g, x, y, stream);
    case S4D_DTYPE_INT64: return arg_typed<int64_t>(arg_min, select_last, g, x, y, stream);
    default: return cudaErrorInvalidValue;
    }
}
