/*
 * Element-wise CUDA kernels with broadcasting: binary ops, the variadic ops'
 * Mean division, Where and Cast. See elementwise.h for the contract.
 *
 * Work split: one thread per pack of 16 bytes of the widest input (4 floats,
 * 8 halves, 16 bools), in a grid-stride loop over the output. Each pack lies
 * in one row of the last collapsed dim, so an input either walks it (one
 * 16-byte load) or repeats one element along it (one load, broadcast): the
 * bias add [1,900,256] + [256] and the scalar ops of the Sparse4D head read
 * and write only whole packs. The broadcast offsets of a pack's first element
 * come from the collapsed dims by multiply-high division (no divide
 * instruction); rank 1 (same shape, scalar operand) needs none. Shapes or
 * pointers that do not allow packs take the same kernel one element at a time.
 *
 * float32 and float16 (computed in float32) have a kernel per op; bool has
 * the logic ops; every other dtype (float64, the integers, Pow with mixed or
 * integer types) goes through one kernel that reads and writes by run-time
 * dtype and computes in double, int64 or uint64 exactly as the host does.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/elementwise_common.cuh"
#include "backend/cuda/kernels/elementwise_ops.cuh"
#include "ops/elementwise.h"

namespace s4d_ew {
namespace {

/* N elements of an input at element offset off: one pack when the input walks
   the last dim, else its one element N times. */
template <class T, int N>
__device__ __forceinline__ void load_pack(typename Cvt<T>::C (&x)[N], const T *p, int64_t off,
                                          int walks)
{
    if (N > 1 && walks) {
        Pack<T, N> pk = *reinterpret_cast<const Pack<T, N> *>(p + off);
S4D_EW_UNROLL
        for (int j = 0; j < N; j++)
            x[j] = Cvt<T>::in(pk.v[j]);
    } else {
        typename Cvt<T>::C v = Cvt<T>::in(p[off]);
S4D_EW_UNROLL
        for (int j = 0; j < N; j++)
            x[j] = v;
    }
}

template <class Op, class T, class TO, class R>
__device__ __forceinline__ TO binary_out(R r)
{
    if constexpr (Op::kBool)
        return (TO)(r ? 1 : 0);
    else
        return Cvt<T>::out(r);
}

/* TO: T, or uint8_t for bool results. N = 1: one element per step. */
template <class Op, class T, class TO, int N>
__global__ void S4D_EW_BOUNDS
    binary_kernel(TO *out, const T *a, const T *b, const __grid_constant__ Geom g)
{
    S4D_KERNEL_BEGIN();
    using C = typename Cvt<T>::C;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t packs = g.n / N;
    for (int64_t v = tid; v < packs; v += stride) {
        const int64_t i = v * N;
        int64_t off[2];
        bcast_offsets<2>(g, i, off);
        C x[N], y[N];
        load_pack<T, N>(x, a, off[0], g.contig[0]);
        load_pack<T, N>(y, b, off[1], g.contig[1]);
        Pack<TO, N> r;
S4D_EW_UNROLL
        for (int j = 0; j < N; j++)
            r.v[j] = binary_out<Op, T, TO>(Op::f(x[j], y[j]));
        *reinterpret_cast<Pack<TO, N> *>(out + i) = r;
    }
    /* The tail of a one-dim geometry whose size is not a multiple of N. */
    for (int64_t i = packs * N + tid; i < g.n; i += stride) {
        int64_t off[2];
        bcast_offsets<2>(g, i, off);
        out[i] = binary_out<Op, T, TO>(Op::f(Cvt<T>::in(a[off[0]]), Cvt<T>::in(b[off[1]])));
    }
}

template <class Op, class T, class TO>
cudaError_t launch_binary(void *out, const void *a, const void *b, const Geom &g,
                          cudaStream_t stream)
{
    constexpr int N = 16 / sizeof(T);
    const void *in[2] = {a, b};
    const size_t es[2] = {sizeof(T), sizeof(T)};
    if (packs_ok(g, N, out, sizeof(TO), in, es))
        return launch(binary_kernel<Op, T, TO, N>, g.n / N, stream, (TO *)out, (const T *)a,
                      (const T *)b, g);
    return launch(binary_kernel<Op, T, TO, 1>, g.n, stream, (TO *)out, (const T *)a, (const T *)b, g);
}

/* float32 or float16 (T); cudaErrorInvalidValue for ops they do not have. */
template <class T>
cudaError_t binary_float(int op, void *out, const void *a, const void *b, const Geom &g,
                         cudaStream_t s)
{
    switch (op) {
    case S4D_BIN_ADD: return launch_binary<OpAdd, T, T>(out, a, b, g, s);
    case S4D_BIN_SUB: return launch_binary<OpSub, T, T>(out, a, b, g, s);
    case S4D_BIN_MUL: return launch_binary<OpMul, T, T>(out, a, b, g, s);
    case S4D_BIN_DIV: return launch_binary<OpDiv, T, T>(out, a, b, g, s);
    case S4D_BIN_POW: return launch_binary<OpPow, T, T>(out, a, b, g, s);
    case S4D_BIN_MIN: return launch_binary<OpMin, T, T>(out, a, b, g, s);
    case S4D_BIN_MAX: return launch_binary<OpMax, T, T>(out, a, b, g, s);
    case S4D_BIN_PRELU: return launch_binary<OpPRelu, T, T>(out, a, b, g, s);
    case S4D_BIN_MOD: return launch_binary<OpMod, T, T>(out, a, b, g, s);
    case S4D_BIN_FMOD: return launch_binary<OpFMod, T, T>(out, a, b, g, s);
    case S4D_BIN_EQ: return launch_binary<OpEq, T, uint8_t>(out, a, b, g, s);
    case S4D_BIN_GT: return launch_binary<OpGt, T, uint8_t>(out, a, b, g, s);
    case S4D_BIN_LT: return launch_binary<OpLt, T, uint8_t>(out, a, b, g, s);
    case S4D_BIN_GE: return launch_binary<OpGe, T, uint8_t>(out, a, b, g, s);
    case S4D_BIN_LE: return launch_binary<OpLe, T, uint8_t>(out, a, b, g, s);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t binary_bool(int op, void *out, const void *a, const void *b, const Geom &g,
                        cudaStream_t s)
{
    switch (op) {
    case S4D_BIN_AND: return launch_binary<OpAnd, uint8_t, uint8_t>(out, a, b, g, s);
    case S4D_BIN_OR: return launch_binary<OpOr, uint8_t, uint8_t>(out, a, b, g, s);
    case S4D_BIN_XOR: return launch_binary<OpXor, uint8_t, uint8_t>(out, a, b, g, s);
    case S4D_BIN_EQ: return launch_binary<OpEqBool, uint8_t, uint8_t>(out, a, b, g, s);
    default: return cudaErrorInvalidValue;
    }
}

/* ---- binary ops on any dtype (one element per step, run-time dtype) ---- */

/*
 * x^y in double. Integer x and y (|y| <= 64) multiply out exactly while the
 * result fits 53 bits, where the host's correctly rounded pow gives the same
 * integer: integer Pow then matches the host bit for bit. The rest is CUDA's
 * pow (a few ulp from the host's).
 */
__device__ double pow_exactish(double x, double y)
{
    if (x == floor(x) && y == floor(y) && fabs(y) <= 64.0 && fabs(x) < 9007199254740992.0) {
        double r = 1.0, base = x;
        unsigned e = (unsigned)fabs(y);
        while (e) {
            if (e & 1u)
                r *= base;
            e >>= 1;
            if (e)
                base *= base;
        }
        if (fabs(r) <= 9007199254740992.0)
            return y < 0 ? 1.0 / r : r;
    }
    return pow(x, y);
}

__device__ double binary_f64(int op, double x, double y)
{
    switch (op) {
    case S4D_BIN_ADD: return x + y;
    case S4D_BIN_SUB: return x - y;
    case S4D_BIN_MUL: return x * y;
    case S4D_BIN_DIV: return x / y;
    case S4D_BIN_MIN: return OpMin::f(x, y);
    case S4D_BIN_MAX: return OpMax::f(x, y);
    case S4D_BIN_PRELU: return OpPRelu::f(x, y);
    case S4D_BIN_MOD: return OpMod::f(x, y);
    case S4D_BIN_FMOD: return OpFMod::f(x, y);
    case S4D_BIN_POW: return pow_exactish(x, y);
    case S4D_BIN_EQ: return x == y;
    case S4D_BIN_GT: return x > y;
    case S4D_BIN_LT: return x < y;
    case S4D_BIN_GE: return x >= y;
    case S4D_BIN_LE: return x <= y;
    default: return 0.0;
    }
}

/* Signed integers widened to int64: wrapping arithmetic, division and modulo by 0 give 0. */
__device__ int64_t binary_i64(int op, int64_t x, int64_t y)
{
    const uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
    switch (op) {
    case S4D_BIN_ADD: return (int64_t)(ux + uy);
    case S4D_BIN_SUB: return (int64_t)(ux - uy);
    case S4D_BIN_MUL: return (int64_t)(ux * uy);
    case S4D_BIN_DIV: return y == 0 ? 0 : y == -1 ? (int64_t)(0 - ux) : x / y;
    case S4D_BIN_MIN: return x < y ? x : y;
    case S4D_BIN_MAX: return x > y ? x : y;
    case S4D_BIN_PRELU: return x < 0 ? (int64_t)(uy * ux) : x;
    case S4D_BIN_MOD: {
        if (y == 0 || y == -1)
            return 0;
        int64_t r = x % y;
        return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
    }
    case S4D_BIN_FMOD: return y == 0 || y == -1 ? 0 : x % y;
    case S4D_BIN_EQ: return x == y;
    case S4D_BIN_GT: return x > y;
    case S4D_BIN_LT: return x < y;
    case S4D_BIN_GE: return x >= y;
    case S4D_BIN_LE: return x <= y;
    default: return 0;
    }
}

/* Unsigned integers and bool widened to uint64. */
__device__ uint64_t binary_u64(int op, uint64_t x, uint64_t y)
{
    switch (op) {
    case S4D_BIN_ADD: return x + y;
    case S4D_BIN_SUB: return x - y;
    case S4D_BIN_MUL: return x * y;
    case S4D_BIN_DIV: return y == 0 ? 0 : x / y;
    case S4D_BIN_MIN: return x < y ? x : y;
    case S4D_BIN_MAX: return x > y ? x : y;
    case S4D_BIN_PRELU: return x;
    case S4D_BIN_MOD: case S4D_BIN_FMOD: return y == 0 ? 0 : x % y;
    case S4D_BIN_EQ: return x == y;
    case S4D_BIN_GT: return x > y;
    case S4D_BIN_LT: return x < y;
    case S4D_BIN_GE: return x >= y;
    case S4D_BIN_LE: return x <= y;
    case S4D_BIN_AND: return (x != 0) & (y != 0);
    case S4D_BIN_OR: return (x != 0) | (y != 0);
    case S4D_BIN_XOR: return (x != 0) ^ (y != 0);
    default: return 0;
    }
}

__global__ void S4D_EW_BOUNDS
    binary_any_kernel(int op, int ta, int tb, int to, void *out, const void *a, const void *b,
                      const __grid_constant__ Geom g)
{
    S4D_KERNEL_BEGIN();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const bool pow_like = op == S4D_BIN_POW || dt_is_float(ta);
    const bool is_unsigned = dt_is_unsigned(ta);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += stride) {
        int64_t off[2];
        bcast_offsets<2>(g, i, off);
        if (pow_like) {
            double r = binary_f64(op, ld_f64(ta, a, off[0]), ld_f64(tb, b, off[1]));
            st_f64(to, out, i, r);
        } else if (is_unsigned) {
            uint64_t r = binary_u64(op, (uint64_t)ld_i64(ta, a, off[0]),
                                    (uint64_t)ld_i64(tb, b, off[1]));
            st_i64(to, out, i, (int64_t)r);
        } else {
            st_i64(to, out, i, binary_i64(op, ld_i64(ta, a, off[0]), ld_i64(tb, b, off[1])));
        }
    }
}

/* ---- Mean's division ---- */

template <class T>
__global__ void S4D_EW_BOUNDS divide_kernel(T *data, int64_t n, int64_t count)
{
    S4D_KERNEL_BEGIN();
    using C = typename Cvt<T>::C;
    const C k = (C)(double)count;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        data[i] = Cvt<T>::out(Cvt<T>::in(data[i]) / k);
}

/* ---- Where ---- */

template <class E, int N>
__global__ void S4D_EW_BOUNDS
    where_kernel(E *out, const uint8_t *cond, const E *x, const E *y, const __grid_constant__ Geom g)
{
    S4D_KERNEL_BEGIN();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t packs = g.n / N;
    for (int64_t v = tid; v < packs; v += stride) {
        const int64_t i = v * N;
        int64_t off[3];
        bcast_offsets<3>(g, i, off);
        uint8_t c[N];
        E xv[N], yv[N];
        load_pack<uint8_t, N>(c, cond, off[0], g.contig[0]);
        load_pack<E, N>(xv, x, off[1], g.contig[1]);
        load_pack<E, N>(yv, y, off[2], g.contig[2]);
        Pack<E, N> r;
S4D_EW_UNROLL
        for (int j = 0; j < N; j++)
            r.v[j] = c[j] ? xv[j] : yv[j];
        *reinterpret_cast<Pack<E, N> *>(out + i) = r;
    }
    for (int64_t i = packs * N + tid; i < g.n; i += stride) {
        int64_t off[3];
        bcast_offsets<3>(g, i, off);
        out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
    }
}

template <class E>
cudaError_t launch_where(void *out, const void *cond, const void *x, const void *y, const Geom &g,
                         cudaStream_t stream)
{
    constexpr int N = 16 / sizeof(E);
    const void *in[3] = {cond, x, y};
    const size_t es[3] = {1, sizeof(E), sizeof(E)};
    if (packs_ok(g, N, out, sizeof(E), in, es))
        return launch(where_kernel<E, N>, g.n / N, stream, (E *)out, (const uint8_t *)cond,
                      (const E *)x, (const E *)y, g);
    return launch(where_kernel<E, 1>, g.n, stream, (E *)out, (const uint8_t *)cond, (const E *)x,
                  (const E *)y, g);
}

/* ---- Cast ---- */

__device__ __forceinline__ bool int_like(int dt)
{
    return !dt_is_float(dt);
}

__global__ void S4D_EW_BOUNDS
    cast_any_kernel(int from, int to, void *out, const void *in, int64_t n)
{
    S4D_KERNEL_BEGIN();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const bool ints = int_like(from) && int_like(to);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (ints)
            st_i64(to, out, i, ld_i64(from, in, i));
        else
            st_f64(to, out, i, ld_f64(from, in, i));
    }
}

/* float32 <-> float16, the casts of mixed-precision engines, by packs of 8. */
template <class F, class T>
__global__ void S4D_EW_BOUNDS
    cast_float_kernel(T *out, const F *in, int64_t n, int packs_ok)
{
    S4D_KERNEL_BEGIN();
    constexpr int N = 8;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t packs = packs_ok ? n / N : 0;
    for (int64_t v = tid; v < packs; v += stride) {
        Pack<F, N> a = *reinterpret_cast<const Pack<F, N> *>(in + v * N);
        Pack<T, N> r;
S4D_EW_UNROLL
        for (int j = 0; j < N; j++) {
            if constexpr (sizeof(T) == 2)
                r.v[j] = __float2half_rn(a.v[j]);
            else
                r.v[j] = __half2float(a.v[j]);
        }
        *reinterpret_cast<Pack<T, N> *>(out + v * N) = r;
    }
    for (int64_t i = packs * N + tid; i < n; i += stride) {
        if constexpr (sizeof(T) == 2)
            out[i] = __float2half_rn(in[i]);
        else
            out[i] = __half2float(in[i]);
    }
}

} /* namespace */
} /* namespace s4d_ew */

using namespace s4d_ew;

extern "C" cudaError_t s4d_cu_binary(int op, int dtype_a, int dtype_b, int dtype_out, void *out,
                                     const void *a, const void *b, const s4d_cu_bcast *gb,
                                     cudaStream_t stream)
{
    Geom g;
    if (!make_geom(gb, &g) || g.nin != 2 || op < 0 || op >= S4D_BINOP_COUNT)
        return cudaErrorInvalidValue;
    if (!dt_size(dtype_a) || !dt_size(dtype_b) || !dt_size(dtype_out))
        return cudaErrorInvalidValue;
    if (g.n == 0)
        return cudaSuccess;
    if (dtype_a == dtype_b) {
        if (dtype_a == S4D_DTYPE_FLOAT32)
            return binary_float<float>(op, out, a, b, g, stream);
        if (dtype_a == S4D_DTYPE_FLOAT16)
            return binary_float<__half>(op, out, a, b, g, stream);
        if (dtype_a == S4D_DTYPE_BOOL && op != S4D_BIN_EQ && op != S4D_BIN_AND &&
            op != S4D_BIN_OR && op != S4D_BIN_XOR)
            return cudaErrorInvalidValue;
        if (dtype_a == S4D_DTYPE_BOOL)
            return binary_bool(op, out, a, b, g, stream);
    } else if (op != S4D_BIN_POW) {
        return cudaErrorInvalidValue;
    }
    if (dtype_a == S4D_DTYPE_BFLOAT16 || dtype_b == S4D_DTYPE_BFLOAT16)
        return cudaErrorInvalidValue;
    return launch(binary_any_kernel, g.n, stream, op, dtype_a, dtype_b, dtype_out, out, a, b, g);
}

extern "C" cudaError_t s4d_cu_mean_divide(int dtype, void *data, int64_t n, int64_t count,
                                          cudaStream_t stream)
{
    if (n < 0 || count < 1)
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    switch (dtype) {
    case S4D_DTYPE_FLOAT32: return launch(divide_kernel<float>, n, stream, (float *)data, n, count);
    case S4D_DTYPE_FLOAT16: return launch(divide_kernel<__half>, n, stream, (__half *)data, n, count);
    case S4D_DTYPE_FLOAT64: return launch(divide_kernel<double>, n, stream, (double *)data, n, count);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t s4d_cu_where(size_t elem_size, void *out, const void *cond, const void *x,
                                    const void *y, const s4d_cu_bcast *gb, cudaStream_t stream)
{
    Geom g;
    if (!make_geom(gb, &g) || g.nin != 3)
        return cudaErrorInvalidValue;
    if (g.n == 0)
        return cudaSuccess;
    switch (elem_size) {
    case 1: return launch_where<uint8_t>(out, cond, x, y, g, stream);
    case 2: return launch_where<uint16_t>(out, cond, x, y, g, stream);
    case 4: return launch_where<uint32_t>(out, cond, x, y, g, stream);
    case 8: return launch_where<uint64_t>(out, cond, x, y, g, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t s4d_cu_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
    return bytes ? copy_async(dst, src, bytes, stream) : cudaSuccess;
}

extern "C" cudaError_t s4d_cu_cast(int from, int to, void *out, const void *in, int64_t n,
                                   cudaStream_t stream)
{
    if (n < 0 || !dt_size(from) || !dt_size(to))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    if (from == to)
        return copy_async(out, in, (size_t)n * dt_size(from), stream);
    if (from == S4D_DTYPE_FLOAT32 && to == S4D_DTYPE_FLOAT16) {
        int ok = aligned(in, 32) && aligned(out, 16);
        return launch(cast_float_kernel<float, __half>, ok ? n / 8 + 1 : n, stream, (__half *)out,
                      (const float *)in, n, ok);
    }
    if (from == S4D_DTYPE_FLOAT16 && to == S4D_DTYPE_FLOAT32) {
        int ok = aligned(in, 16) && aligned(out, 32);
        return launch(cast_float_kernel<__half, float>, ok ? n / 8 + 1 : n, stream, (float *)out,
                      (const __half *)in, n, ok);
    }
    return launch(cast_any_kernel, n, stream, from, to, out, in, n);
}
